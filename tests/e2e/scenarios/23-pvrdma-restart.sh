# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# A QEMU guest keeps its connection across daemon restarts.  Stock QEMU
# with pvrdma on host A, its MAD chardev on the daemon's QEMU socket with
# reconnect=1; the guest (as in 20-pvrdma-guest) holds one connection to
# rdma_hold on host B (librdmacm, tests/e2e/rdma_hold.c).  The daemon is
# killed with SIGKILL and started again, then stopped with SIGTERM and
# started again (an upgrade); after each, QEMU is back as the same
# process with its GID, and data moves on the connection.  Then the
# guest's disconnect reaches B (its DREQ, B's DREP back), and a new
# connection from the guest and one to it (stock rdma_client and
# rdma_server) both work.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM
LAB_OPTS="--mem 2560 --smp 2 --timeout 900"

host_prepare() { scripts/lab/pvrdma-guest.sh >/dev/null; }

# wait_guest TEXT SECONDS
wait_guest() {
	local i
	for i in $(seq "$2"); do guest_said "$1" && return 0; sleep 1; done
	grep -a "GUEST\|rdma_" /tmp/guest.console
	sed 's/^/B rdma_hold: /' "$LAB_SYNC/hold.log" 2>/dev/null
	tail -n 20 /tmp/qemu.log
	fail "the guest never said \"$1\""
}
host_a() {
	local qemu libvirt
	start_daemon --qemu-socket rxe0:1
	tests/e2e/pvrdma/qmp-libvirt.sh "$QMP_PORT" /tmp/qmp.log &
	libvirt=$!
	await hold-up
	pvrdma_guest_start hold 300 ,reconnect=1
	qemu=$QEMU_PID
	wait_guest "rdma_hold: received one-back" 400
	ok "guest: connected to B's rdma_hold, first message both ways"

	kill -9 "$DAEMON_PID"
	wait "$DAEMON_PID" 2>/dev/null
	restart_daemon
	ok "kill -9 and a new start: QEMU back as the same process, its GID with it"
	signal restarted-1
	wait_guest "rdma_hold: sent back-1" 120
	ok "guest: data after the kill -9"

	stop_daemon
	restart_daemon
	ok "SIGTERM and a new start: QEMU back again"
	signal restarted-2
	wait_guest "GUEST t=.* hold-end rc=" 120
	guest_said "hold-end rc=0" || { grep -a "GUEST\|rdma_" /tmp/guest.console; fail "the guest's rdma_hold failed"; }
	[ "$(status_get .counters.mads_out.DREQ)" -ge 1 ] && [ "$(status_get .counters.mads_in.DREP)" -ge 1 ] ||
		{ status_get .counters; fail "the guest's DREQ and B's DREP did not pass the daemon"; }
	ok "guest: data after the SIGTERM restart, then its DREQ out and B's DREP in through the new daemon"

	signal guest-server-up-soon
	wait_guest "server-start" 200
	signal guest-server-up
	wait $qemu
	kill $libvirt 2>/dev/null
	grep -a "GUEST\|rdma_" /tmp/guest.console
	guest_said "client-end rc=0" || fail "the guest's new connection (rdma_client) failed"
	ok "a new connection from the guest after the restarts"
	guest_said "server-end rc=0" || fail "the guest's rdma_server failed"
	ok "a new connection to the guest after the restarts"
	[ "$(status_get '.counters.refusals | [.[]] | add')" = 0 ] ||
		{ status_get .counters.refusals; fail "the daemon refused QEMU's MADs"; }
	signal a-done
	stop_daemon
}

host_b() {
	local hold srv i rc=1
	timeout 800 stdbuf -oL "$B/tests/rdma_hold" -l -p 7472 \
		--wait "$LAB_SYNC/restarted-1" --wait "$LAB_SYNC/restarted-2" \
		>"$LAB_SYNC/hold.log" 2>&1 &
	hold=$!
	timeout 800 rdma_server >/tmp/srv.log 2>&1 &
	srv=$!
	wait_for kernel_listening 7472 || fail "rdma_hold is not listening"
	wait_for kernel_listening 7471 || fail "rdma_server is not listening"
	signal hold-up
	wait $hold || { cat "$LAB_SYNC/hold.log"; fail "rdma_hold (B) failed"; }
	cat "$LAB_SYNC/hold.log"
	grep -q "received back-2" "$LAB_SYNC/hold.log" || fail "no data after the second restart"
	grep -q "disconnected by the peer" "$LAB_SYNC/hold.log" ||
		fail "the guest's DREQ did not reach B"
	ok "B rdma_hold: data across both restarts, the guest's DREQ, B's DREP"
	wait $srv
	cat /tmp/srv.log
	grep -q "end 0" /tmp/srv.log || fail "rdma_server (B) did not end cleanly"
	ok "B rdma_server: the guest's new connection, data, disconnect"
	for i in $(seq 300); do [ -e "$LAB_SYNC/guest-server-up" ] && break; sleep 1; done
	for i in $(seq 10); do
		timeout 60 rdma_client -s "$GUEST_IP" >/tmp/cli.log 2>&1 && { rc=0; break; }
		sleep 3
	done
	cat /tmp/cli.log
	[ "$rc" = 0 ] || fail "rdma_client (B) to the guest failed"
	ok "B rdma_client -> guest: connected, data, disconnected"
	for i in $(seq 120); do [ -e "$LAB_SYNC/a-done" ] && break; sleep 1; done
}
