# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Issue 8, items 3 and 11: the peer's RTUs never arrive (host B drops them
# on the way out), so the VM's passive side goes established on the first
# data, as the kernel CM does.  Its mapping in the daemon outlives the
# handshake timeout and the connection still disconnects cleanly.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B="$WITH_KCM sch_prio cls_u32 act_gact"

host_a() {
	add_ip 10.77.0.12
	start_daemon --handshake-timeout-ms 1000
	local rc=0
	"$B/rdmacm-mux-vm" --name vm2 --gid 10.77.0.12 --listen 7471 --device rxe0 \
		--messages 1 --message-size 16 --send-delay-ms 3000 --run-ms 40000 \
		>/tmp/vm2.log 2>&1 &
	local vm=$!
	wait_for grep -q listening /tmp/vm2.log || fail "vm2 did not start"
	signal vm-up
	wait_for grep -q "established" /tmp/vm2.log || { cat /tmp/vm2.log; fail "vm2 never established"; }
	# Two handshake timeouts later the connection is still mapped.
	sleep 2
	[ "$(status_get '[.clients[] | select(.name == "vm2") | .connections[] | select(.state == "rep_sent")] | length')" = 1 ] ||
		{ status_json; fail "vm2's connection lost its mapping"; }
	ok "no RTU: the mapping (rep_sent) outlived the 1 s handshake timeout"
	wait $vm || rc=$?
	cat /tmp/vm2.log
	[ "$rc" = 0 ] || fail "vm2 exit status $rc"
	grep -q "first data before the RTU" /tmp/vm2.log || fail "vm2 saw an RTU after all"
	grep -q "vm2: data: received 1, sent 1" /tmp/vm2.log || fail "vm2 data"
	grep -q "vm2: disconnected" /tmp/vm2.log || fail "vm2 saw no disconnect"
	[ "$(status_get .counters.mads_in.RTU)" = 0 ] || fail "an RTU reached the daemon"
	[ "$(status_get .counters.drops.unknown_comm_id)" = 0 ] || fail "a message found no mapping"
	ok "vm2 (passive): established on data, disconnected cleanly"
	stop_daemon
}

host_b() {
	# Drop B's outgoing RTUs: RoCE v2 UDP 4791, MAD base version 1 and
	# class 0x07 at payload offset 20 (after BTH and DETH), attribute
	# 0x0014 at 36 (IP header 20 + UDP 8 before them).
	tc qdisc add dev eth0 root handle 1: prio || fail "tc qdisc"
	tc filter add dev eth0 parent 1: protocol ip prio 1 u32 \
		match ip dport 4791 0xffff match u16 0x0107 0xffff at 48 \
		match u16 0x0014 0xffff at 64 action drop || fail "tc filter"
	await vm-up
	timeout 60 rdma_client -s 10.77.0.12 -p 7471 >/tmp/cli.log 2>&1
	local rc=$?
	cat /tmp/cli.log
	tc -s filter show dev eth0
	[ "$rc" = 0 ] || fail "rdma_client exit status $rc"
	tc -s filter show dev eth0 | grep -q "dropped [1-9]" || fail "no RTU was dropped"
	ok "rdma_client: connected, message each way, disconnected (its RTUs dropped)"
}
