# Issue 3, 4d: a connection to a port nobody listens on ends in the REJ the
# kernel CM gives (reason 8, invalid service ID), from either side, and it
# reaches the right VM.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM

host_a() {
	add_ip 10.77.0.11
	add_ip 10.77.0.12
	start_daemon
	# A bystander VM on the same daemon must not see the REJ.
	"$B/rdmacm-mux-vm" --name vm2 --gid 10.77.0.12 --listen 7471 --run-ms 30000 \
		>/tmp/vm2.log 2>&1 &
	local vm2=$! rc=0
	wait_for grep -q listening /tmp/vm2.log || fail "vm2 did not start"
	"$B/rdmacm-mux-vm" --name vm1 --gid 10.77.0.11 --connect "$LAB_PEER_IP" \
		--rdma-port 7999 --device rxe0 >/tmp/vm1.log 2>&1 || rc=$?
	cat /tmp/vm1.log
	[ "$rc" = 3 ] || fail "vm1 exit status $rc, expected 3 (rejected)"
	grep -q "rejected by ::ffff:$LAB_PEER_IP, reason 8" /tmp/vm1.log ||
		fail "vm1 did not get the kernel CM's REJ reason 8"
	ok "A -> B:7999: the kernel CM's REJ (reason 8) reached vm1"
	[ "$(client_counter vm2 mads_delivered)" = 0 ] || fail "the bystander vm2 got a MAD"
	ok "the bystander vm2 got nothing"
	# Now B connects to vm2 on a port vm2 does not listen on.
	signal a-ready
	await b-done
	kill $vm2 2>/dev/null; wait $vm2 2>/dev/null
	# B's kernel CM answers every REQ of vm1's with a REJ, its
	# retransmissions too (slow first contact on RoCE makes some).
	local rejs
	rejs=$((1 + $(sed -n 's/.*vm1: closed (retransmissions \([0-9]*\),.*/\1/p' /tmp/vm1.log)))
	[ "$(status_get .counters.mads_in.REJ)" = "$rejs" ] ||
		fail "REJs from B: $(status_get .counters.mads_in.REJ) counted, $rejs expected"
	[ "$(status_get .counters.mads_out.REJ)" = 1 ] || fail "vm2's REJ was not counted"
	stop_daemon
}

host_b() {
	await a-ready
	timeout 30 stdbuf -oL ucmatose -s 10.77.0.12 -b "$LAB_IP" -p 7472 >/tmp/ucm.log 2>&1
	cat /tmp/ucm.log
	signal b-done
	grep -q "RDMA_CM_EVENT_REJECTED, error: 8" /tmp/ucm.log ||
		fail "ucmatose did not get REJ reason 8 from the VM"
	ok "B -> vm2:7472: REJ reason 8, as the kernel CM would answer"
}
