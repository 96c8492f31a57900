# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Issue 9: a real guest through stock QEMU's pvrdma.  On host A, Debian's
# QEMU runs a guest (Debian's kernel, vmw_pvrdma, stock rdma_client and
# rdma_server) with -device pvrdma whose MAD chardev is rdmacm-muxd's
# QEMU socket at the old daemon's default path; this script acts as
# libvirt on QEMU's GID events.  Host B runs the kernel CM with stock
# peers.  The guest's rdma_client connects to B's rdma_server, then B's
# rdma_client to the guest's rdma_server: data both ways, both sides see
# the disconnect, and the daemon shows the QEMU client, its GIDs and its
# translated connections, with nothing dropped.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM
LAB_OPTS="--mem 2560 --smp 2 --timeout 900"

host_prepare() { scripts/lab/pvrdma-guest.sh >/dev/null; }

host_a() {
	start_daemon --qemu-socket rxe0:1
	test -S /var/run/rdmacm-mux-rxe0-1 || fail "no QEMU socket at the old daemon's path"
	tests/e2e/pvrdma/qmp-libvirt.sh "$QMP_PORT" /tmp/qmp.log &
	local libvirt=$!
	pvrdma_guest_start both 90
	local qemu=$QEMU_PID t0
	t0=$(date +%s)
	# The guest's client runs first; B's server is up by then.
	while kill -0 $qemu 2>/dev/null && ! guest_said "server-start"; do sleep 1; done
	signal guest-server-up
	status_json >/tmp/st-mid.json
	wait $qemu
	echo "guest ran $(( $(date +%s) - t0 )) s"
	kill $libvirt 2>/dev/null
	grep -a "GUEST\|rdma_" /tmp/guest.console
	signal a-done
	grep -q "libvirt: ip -4 addr add $GUEST_IP/24 dev eth0 -> 0" /tmp/qmp.log ||
		{ cat /tmp/qmp.log; fail "QEMU's GID event for $GUEST_IP was not acted on"; }
	guest_said "client-end rc=0" || { tail -n 20 /tmp/qemu.log; fail "the guest's rdma_client failed"; }
	ok "guest rdma_client -> B rdma_server: connected, data, disconnected"
	guest_said "server-end rc=0" || { tail -n 20 /tmp/qemu.log; fail "the guest's rdma_server failed"; }
	ok "B rdma_client -> guest rdma_server: connected, data, disconnected"
	# While QEMU ran (the guest's first connection then in TimeWait).
	local q='.clients[] | select(.protocol == "qemu-rdmacm-mux")'
	jq -e "$q" /tmp/st-mid.json >/dev/null || fail "no QEMU client in the status"
	jq -e "[$q | .gids[].gid] | index(\"::ffff:$GUEST_IP\")" /tmp/st-mid.json >/dev/null ||
		fail "the guest's GID is not the QEMU client's"
	[ "$(jq "[$q | .connections[] | select(.kind == \"comm\" and .host_id != .guest_id)] | length" /tmp/st-mid.json)" -ge 1 ] ||
		{ jq "$q" /tmp/st-mid.json; fail "no translated connection of the QEMU client"; }
	[ "$(jq "[$q | .counters.mads_dropped] | add" /tmp/st-mid.json)" = 0 ] || fail "MADs to the guest dropped"
	status_json >/tmp/st.json
	[ "$(jq '[.counters.drops[]] | add' /tmp/st.json)" = 0 ] ||
		{ jq .counters.drops /tmp/st.json; fail "the daemon dropped MADs"; }
	[ "$(jq '.counters.refusals | [.[]] | add' /tmp/st.json)" = 0 ] ||
		{ jq .counters.refusals /tmp/st.json; fail "the daemon refused QEMU's MADs"; }
	ok "status: the QEMU client, its GIDs, its translated connections, nothing dropped or refused"
	stop_daemon
}

host_b() {
	timeout 600 rdma_server >/tmp/srv.log 2>&1 &
	wait_for kernel_listening 7471 || fail "rdma_server is not listening"
	local srv=$! i rc=1
	# The guest boots for a minute or two under emulation.
	for i in $(seq 300); do [ -e "$LAB_SYNC/guest-server-up" ] && break; sleep 1; done
	await guest-server-up
	wait $srv
	cat /tmp/srv.log
	grep -q "end 0" /tmp/srv.log || fail "rdma_server (B) did not end cleanly"
	ok "B rdma_server: the guest's connection, data, disconnect"
	# The guest's server needs a moment to listen: an early REQ gets REJ.
	for i in $(seq 10); do
		timeout 60 rdma_client -s "$GUEST_IP" >/tmp/cli.log 2>&1 && { rc=0; break; }
		sleep 3
	done
	cat /tmp/cli.log
	[ "$rc" = 0 ] || fail "rdma_client (B) to the guest failed"
	ok "B rdma_client -> guest: connected, data, disconnected"
	for i in $(seq 120); do [ -e "$LAB_SYNC/a-done" ] && break; sleep 1; done
}
