# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Issue 8, items 4 and 11: a VM disconnects and connects again with the
# same comm ID (a rebooted guest, a wrapped counter) while the first
# connection is still in TimeWait on both hosts: it gets a fresh host ID,
# so the stock peer does not take it for the old connection.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM

host_a() {
	add_ip 10.77.0.11
	start_daemon -v
	local run rc
	for run in 1 2; do
		await "server-up-$run"
		rc=0
		"$B/rdmacm-mux-vm" --name vm1 --gid 10.77.0.11 --comm-id 0x1234 \
			--connect "$LAB_PEER_IP" --rdma-port 7471 --device rxe0 \
			--timewait-ms 100 --run-ms 40000 >/tmp/vm1.log 2>&1 || rc=$?
		cat /tmp/vm1.log
		[ "$rc" = 0 ] || fail "run $run: vm1 exit status $rc"
		vm_session_ok vm1
		ok "run $run: comm ID 0x1234 connected, data, disconnected"
		signal "vm-done-$run"
	done
	local hosts
	hosts=$(host_ids_for 0x00001234)
	[ "$hosts" = 2 ] || fail "expected two host IDs for the reused guest ID, saw $hosts"
	ok "the reused comm ID went out as a new host ID"
	stop_daemon
}

host_b() {
	local run
	for run in 1 2; do
		UCM_SIGNAL=server-up-$run ucmatose_server
		await "vm-done-$run"
		ok "run $run: ucmatose data complete"
	done
}
