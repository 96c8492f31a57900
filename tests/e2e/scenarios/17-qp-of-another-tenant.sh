# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# A tenant names only its own QPs.  A peer's kernel CM takes (QPN, CA
# GUID) as a connection's identity: a REQ naming a live connection's QP
# is rejected as stale and that connection gets a DREQ.  vm1 on host A
# holds an RC connection with stock ucmatose (client) on host B; a second
# tenant on host A sends B a REQ naming vm1's QPN and the host's node
# GUID.  The daemon refuses it (the kernel's resource tracking says the
# QP is vm1's), counts it, and vm1's connection moves its data and ends
# cleanly; the second tenant's REQ naming its own QP goes out.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM

host_a() {
	local rc=0 vm qpn guid
	add_ip 10.77.0.11
	add_ip 10.77.0.12
	start_daemon
	"$B/rdmacm-mux-vm" --name vm1 --gid 10.77.0.11 --listen 7471 --device rxe0 \
		--send-delay-ms 8000 --run-ms 60000 >/tmp/vm1.log 2>&1 &
	vm=$!
	wait_for grep -q listening /tmp/vm1.log || fail "vm1 did not start"
	signal vm-up
	wait_for grep -q "vm1: connected to" /tmp/vm1.log || fail "vm1 not connected"
	qpn=$(rdma -j res show qp | jq -r --argjson pid "$vm" \
		'.[] | select(.pid == $pid and .type == "RC") | .lqpn' | head -n 1)
	[ -n "$qpn" ] || { rdma res show qp; fail "no RC QP of vm1 in rdma res show qp"; }
	guid=0x$(tr -d : </sys/class/infiniband/rxe0/node_guid)
	ok "vm1 connected to ucmatose; its QP is $qpn on node GUID $guid"

	"$B/tests/mad_send" --socket /tmp/m.sock --register 10.77.0.12 --from 10.77.0.12 \
		--to "$LAB_PEER_IP" --qpn "$qpn" --ca-guid "$guid" --expect EPERM ||
		fail "the REQ naming vm1's QP was not refused"
	[ "$(status_get .counters.refusals.qp_owner)" = 1 ] ||
		fail "refusals.qp_owner: $(status_get .counters.refusals.qp_owner)"
	ok "a second tenant's REQ naming vm1's QP: refused (EPERM), counted"
	"$B/tests/mad_send" --socket /tmp/m.sock --register 10.77.0.12 --from 10.77.0.12 \
		--to "$LAB_PEER_IP" --comm-id 0x7e570002 --expect ok ||
		fail "the second tenant's REQ naming its own QP was refused"
	ok "the second tenant's REQ naming its own QP: sent"

	wait $vm || rc=$?
	cat /tmp/vm1.log
	[ "$rc" = 0 ] || fail "vm1 exit status $rc"
	vm_session_ok vm1
	grep -q "connections lost\|disconnected by peer early" /tmp/vm1.log &&
		fail "vm1's connection was ended by the peer"
	ok "vm1: its connection moved its data and ended cleanly"
	stop_daemon
}

host_b() {
	local rc=0
	await vm-up
	timeout 80 stdbuf -oL ucmatose -s 10.77.0.11 -b "$LAB_IP" >/tmp/ucm.log 2>&1 || rc=$?
	cat /tmp/ucm.log
	[ "$rc" = 0 ] || fail "ucmatose client exit status $rc"
	grep -q "data transfers complete" /tmp/ucm.log || fail "ucmatose data"
	grep -q "return status 0" /tmp/ucm.log || fail "ucmatose did not finish cleanly"
	ok "ucmatose client: data complete, no stale-connection teardown"
}
