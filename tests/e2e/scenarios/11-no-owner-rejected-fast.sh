# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Issue 8, items 5 and 11: a stock client on host B connects to an address
# of host A that no VM owns.  The daemon answers as A's kernel CM would
# (REJ reason 8, invalid service ID) at once, instead of letting the
# client retry for a minute.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM

host_a() {
	start_daemon
	signal daemon-up
	await b-done
	[ "$(status_get .counters.answers.rej_no_listener)" -ge 1 ] ||
		fail "the daemon's REJ was not counted"
	ok "the daemon answered the REQ for its unowned address (counted)"
	stop_daemon
}

host_b() {
	await daemon-up
	local t0 t1 ms wire
	# The REQ and the REJ on B's wire, timestamped.
	tcpdump -i eth0 -n -tt -l udp port 4791 >/tmp/cap.txt 2>/tmp/cap.err &
	local cap=$!
	wait_for grep -q "listening on" /tmp/cap.err || fail "tcpdump did not start"
	t0=$(date +%s%N)
	timeout 60 stdbuf -oL ucmatose -s "$LAB_PEER_IP" -b "$LAB_IP" -C 1 >/tmp/ucm.log 2>&1
	t1=$(date +%s%N)
	wait_for test "$(grep -c UDP /tmp/cap.txt)" -ge 2 || true
	kill $cap; wait $cap 2>/dev/null
	signal b-done
	cat /tmp/ucm.log /tmp/cap.txt
	ms=$(( (t1 - t0) / 1000000 ))
	grep -q "RDMA_CM_EVENT_REJECTED, error: 8" /tmp/ucm.log ||
		fail "ucmatose did not get REJ reason 8"
	# REQ out (first packet to A), REJ back (first packet from A).
	wire=$(awk -v a="$LAB_PEER_IP" '
		$3 ~ "^"a"\\." && !rej { rej = $1 }
		$5 ~ "^"a"\\." && !req { req = $1 }
		END { if (req && rej) printf "%d", (rej - req) * 1000; else print "none" }' /tmp/cap.txt)
	[ "$wire" != none ] || fail "REQ and REJ not both seen on the wire"
	[ "$wire" -lt 1000 ] || fail "REJ came $wire ms after the REQ"
	# Without the answer the client retries for about a minute.
	[ "$ms" -lt 5000 ] || fail "the client took $ms ms"
	ok "B -> A's unowned address: REJ reason 8, $wire ms after the REQ on the wire ($ms ms whole run)"
}
