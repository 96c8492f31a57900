# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Issue 11, item 1: kill -9 of the daemon and a restart cost a VM nothing.
# A VM on host A holds an RC connection with stock ucmatose (client) on
# host B across the restart; then data moves and the VM's DREQ, through
# the new daemon, ends it cleanly on both sides.  The VM's library is
# back within its backoff (at most a second) of the daemon being ready,
# and a new connection (a second VM to a stock ucmatose server on host
# B) completes in under a second.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM

ms() { date +%s%3N; }

host_a() {
	add_ip 10.77.0.12
	add_ip 10.77.0.13
	start_daemon
	local rc=0 vm t0 t_ready t_up t_conn
	"$B/rdmacm-mux-vm" --name vm2 --gid 10.77.0.12 --listen 7471 --device rxe0 \
		--send-delay-ms 6000 --run-ms 60000 >/tmp/vm2.log 2>&1 &
	vm=$!
	wait_for grep -q listening /tmp/vm2.log || fail "vm2 did not start"
	signal vm-up
	wait_for grep -q "vm2: connected to" /tmp/vm2.log || fail "vm2 not connected"
	ok "vm2: connected to ucmatose; killing the daemon (-9)"

	kill -9 "$DAEMON_PID"
	wait "$DAEMON_PID" 2>/dev/null
	t0=$(ms)
	"$B/rdmacm-muxd" --port rxe0:1 -s /tmp/m.sock -S /tmp/s.sock 2>>/tmp/d.log &
	DAEMON_PID=$!
	wait_for "$B/rdmacm-muxctl" -t 200 status >/dev/null 2>&1 || fail "daemon did not restart"
	t_ready=$(ms)
	wait_for grep -q "vm2: daemon link up" /tmp/vm2.log || fail "vm2 did not reconnect"
	t_up=$(ms)
	grep -q "connections lost" /tmp/vm2.log && fail "the daemon did not keep vm2's connection"
	ok "daemon ready $((t_ready - t0)) ms after its start (on this VM's emulated CPU)"
	ok "vm2 back $((t_up - t_ready)) ms after the daemon was ready, its connection kept"
	[ $((t_up - t_ready)) -le 1500 ] || fail "vm2 took $((t_up - t_ready)) ms to come back"

	await server-up
	"$B/rdmacm-mux-vm" --name vm3 --gid 10.77.0.13 --connect "$LAB_PEER_IP" \
		--rdma-port 7471 --device rxe0 --run-ms 30000 >/tmp/vm3.log 2>&1 &
	local vm3=$!
	wait_for grep -q "vm3: connected in" /tmp/vm3.log || fail "vm3 not connected"
	t_conn=$(sed -n 's/.*vm3: connected in \([0-9]*\) ms.*/\1/p' /tmp/vm3.log)
	ok "new connection: REQ to RTU in $t_conn ms, $(( $(ms) - t_ready )) ms after the daemon was ready"
	[ "$t_conn" -le 1000 ] || fail "new connection took $t_conn ms"
	rc=0; wait $vm3 || rc=$?
	cat /tmp/vm3.log
	[ "$rc" = 0 ] || fail "vm3 exit status $rc"
	vm_session_ok vm3
	ok "vm3: new connection in under a second after the restart, data, disconnected"

	rc=0; wait $vm || rc=$?
	cat /tmp/vm2.log
	[ "$rc" = 0 ] || fail "vm2 exit status $rc"
	vm_session_ok vm2
	[ "$(status_get .counters.resumes)" = 1 ] || fail "resumes: $(status_get .counters.resumes)"
	ok "vm2: data after the restart, then its DREQ through the new daemon"
	stop_daemon
}

host_b() {
	local rc=0 srv
	timeout 90 stdbuf -oL ucmatose -b "$LAB_IP" >/tmp/ucm-srv.log 2>&1 &
	srv=$!
	wait_for kernel_listening 7471 || fail "ucmatose server is not listening"
	signal server-up
	await vm-up
	timeout 80 stdbuf -oL ucmatose -s 10.77.0.12 -b "$LAB_IP" >/tmp/ucm.log 2>&1 || rc=$?
	cat /tmp/ucm.log
	[ "$rc" = 0 ] || fail "ucmatose client exit status $rc"
	grep -q "data transfers complete" /tmp/ucm.log || fail "ucmatose data"
	grep -q "return status 0" /tmp/ucm.log || fail "ucmatose did not finish cleanly"
	ok "ucmatose client: its connection outlived the daemon, data, disconnected"
	rc=0; wait $srv || rc=$?
	cat /tmp/ucm-srv.log
	[ "$rc" = 0 ] || fail "ucmatose server exit status $rc"
	grep -q "data transfers complete" /tmp/ucm-srv.log || fail "ucmatose server data"
	ok "ucmatose server: the new connection moved its data"
}
