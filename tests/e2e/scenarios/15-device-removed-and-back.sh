# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Issue 8, item 8: the RDMA device goes away (`rdma link delete`) and comes
# back.  The daemon marks the port down without spinning, tells its
# clients, and when the device returns re-registers its agent; a VM that
# stayed connected to the daemon keeps its GID and takes a connection
# from host B again.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
port_state_is() { [ "$(status_get '.ports[0].state')" = "$1" ]; }

host_a() {
	add_ip 10.77.0.11
	start_daemon
	# No verbs context until a REQ comes (one would keep the device
	# from going away on Linux 6.1's rxe); then the QP its REP names.
	"$B/rdmacm-mux-vm" --name vm1 --gid 10.77.0.11 --listen 7471 \
		--device-late rxe0 --run-ms 60000 >/tmp/vm1.log 2>&1 &
	local vm=$!
	wait_for grep -q listening /tmp/vm1.log || fail "vm1 did not start"
	timeout 20 rdma link delete rxe0 || fail "rdma link delete hung or failed"
	wait_for port_state_is down || fail "port not down"
	local t0 t1
	t0=$(cpu_ticks "$DAEMON_PID")
	sleep 2
	t1=$(cpu_ticks "$DAEMON_PID")
	# clock ticks are 1/100 s: under 20% of one CPU over two seconds.
	[ $((t1 - t0)) -lt 40 ] || fail "the daemon used $((t1 - t0)) ticks in 2 s while the device was gone"
	grep -q "went away" /tmp/d.log || fail "no log line for the lost device"
	ok "device gone: port down, daemon idle ($((t1 - t0)) ticks in 2 s)"
	rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add"
	wait_for port_state_is active || fail "port not back"
	wait_for gid_present "$(ipv4_gid 10.77.0.11)" || fail "no GID for vm1's address"
	grep -q "is back" /tmp/d.log || fail "no log line for the returned device"
	[ "$(status_get '.ports[0].counters.gid_table_changes')" -ge 2 ] ||
		fail "GID table changes not counted"
	ok "device back: agent re-registered, port active"
	signal device-back
	wait_for grep -q "vm1: connected" /tmp/vm1.log ||
		{ cat /tmp/vm1.log; fail "vm1 was not reached after the device came back"; }
	ok "vm1 kept its GID and took a connection from B"
	kill $vm 2>/dev/null; wait $vm 2>/dev/null
	signal a-done
	stop_daemon
}

host_b() {
	await device-back
	# Only the connection itself is checked.
	timeout 20 ucmatose -s 10.77.0.11 -b "$LAB_IP" -C 1 >/tmp/ucm.log 2>&1 &
	await a-done
	kill %1 2>/dev/null
	cat /tmp/ucm.log
	ok "ucmatose reached the VM"
}
