# Issue 3, 4e: a CM MAD whose source GID the client does not own never
# reaches the wire (checked with a capture on host B); a legitimate one
# goes out from the GID index of the client's own GID.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM

host_a() {
	add_ip 10.77.0.11
	add_ip 10.77.0.12
	add_ip 10.77.0.13
	start_daemon
	await capture-up
	"$B/rdmacm-mux-vm" --name owner --gid 10.77.0.12 --listen 7471 --run-ms 20000 \
		>/tmp/owner.log 2>&1 &
	wait_for grep -q listening /tmp/owner.log || fail "owner did not start"
	"$B/tests/mad_send" --register 10.77.0.11 --from 10.77.0.12 --to "$LAB_PEER_IP" \
		--comm-id 0x5001 --expect EADDRNOTAVAIL || fail "another VM's GID was accepted"
	"$B/tests/mad_send" --register 10.77.0.11 --from 10.77.0.13 --to "$LAB_PEER_IP" \
		--comm-id 0x5002 --expect EADDRNOTAVAIL || fail "an unowned GID was accepted"
	"$B/tests/mad_send" --register 10.77.0.11 --from 10.77.0.11 --to "$LAB_PEER_IP" \
		--comm-id 0x5003 --expect ok || fail "the legitimate MAD was refused"
	ok "spoofed sources refused by the daemon, the legitimate one sent"
	signal sent
	await b-done
	[ "$(status_get .counters.tx_refused)" = 2 ] || fail "refusals not counted"
	[ "$(status_get .counters.mads_out.REQ)" = 1 ] || fail "more than one REQ went out"
	stop_daemon
}

host_b() {
	tcpdump -ni eth0 -w /tmp/roce.pcap udp port 4791 2>/dev/null &
	local td=$!
	sleep 1
	signal capture-up
	await sent
	sleep 1
	kill -INT $td; wait $td
	tcpdump -nr /tmp/roce.pcap 2>/dev/null >/tmp/roce.txt
	sed 's/^/capture: /' /tmp/roce.txt
	signal b-done
	grep -q "IP 10.77.0.11\.[0-9]* > $LAB_IP.4791" /tmp/roce.txt ||
		fail "the legitimate REQ from 10.77.0.11 did not arrive"
	! grep -q "IP 10.77.0.12\." /tmp/roce.txt || fail "a MAD from 10.77.0.12 reached the wire"
	! grep -q "IP 10.77.0.13\." /tmp/roce.txt || fail "a MAD from 10.77.0.13 reached the wire"
	! grep -q "IP 10.77.0.1\.[0-9]* > $LAB_IP.4791" /tmp/roce.txt ||
		fail "a MAD went out from the port's default GID instead of the client's"
	ok "on the wire: only the REQ from 10.77.0.11, sent from its own GID index"
}
