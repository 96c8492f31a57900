# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Issue 45: a capture taken in the lab.  A VM on host A connects to stock
# ucmatose on host B (the kernel's rdma_cm) and disconnects while
# rdmacm-muxctl captures everything on the umad port; stock tshark reads
# the file: every MAD dissected as RoCE v2 CM, each with the daemon's
# verdict, the whole handshake and teardown in it.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM

host_a() {
	local rc=0 cap n
	add_ip 10.77.0.11
	start_daemon --admin-socket /tmp/a.sock
	"$B/rdmacm-muxctl" -A /tmp/a.sock capture -c 1000 -s 120 -w /tmp/cap.pcapng \
		2>/tmp/cap.err &
	cap=$!
	wait_for grep -q "capturing every MAD" /tmp/cap.err || fail "the capture did not start"
	await server-up
	"$B/rdmacm-mux-vm" --name vm1 --gid 10.77.0.11 --connect "$LAB_PEER_IP" \
		--rdma-port 7471 --device rxe0 --run-ms 30000 >/tmp/vm1.log 2>&1 || rc=$?
	[ "$rc" = 0 ] || { cat /tmp/vm1.log; fail "vm1 exit status $rc"; }
	kill -INT "$cap"
	wait "$cap" || fail "rdmacm-muxctl capture: exit status $?"
	cat /tmp/cap.err
	tshark -r /tmp/cap.pcapng -T fields -E separator=/t -e _ws.col.Protocol \
		-e _ws.col.Info -e frame.comment >/tmp/cap.txt 2>/dev/null ||
		fail "tshark cannot read the capture"
	cat /tmp/cap.txt
	n=$(wc -l </tmp/cap.txt)
	[ "$n" -ge 5 ] || fail "$n packets in the capture"
	# Every one dissected, every one with its verdict.
	[ "$(grep -c $'^RRoCE\tCM: ' /tmp/cap.txt)" = "$n" ] || fail "a packet not dissected as RoCE v2 CM"
	[ "$(grep -cE $'\t(in|out) rxe0:1: ' /tmp/cap.txt)" = "$n" ] || fail "a packet without its verdict"
	for m in ConnectRequest ConnectReply ReadyToUse DisconnectRequest DisconnectReply; do
		grep -q "CM: $m" /tmp/cap.txt || fail "no $m in the capture"
	done
	grep -q $'CM: ConnectReply\tin rxe0:1: delivered to client [0-9]* (vm1)' /tmp/cap.txt ||
		fail "the REP's verdict"
	ok "capture: $n MADs of a connection with ucmatose, each dissected by tshark with its verdict"
	stop_daemon
}

host_b() {
	ucmatose_server
	ok "ucmatose (kernel rdma_cm): data complete, disconnected"
}
