# Issue 44, point 4: the UD sender (--ud-sender, opt-in).  With it the
# clients' CM MADs leave from the daemon's own UD QPs to the peer's QP1
# with the GSI Q_Key, and the kernel CM on host B, which answers to QP1,
# takes them as it takes ib_umad's: a VM connects to stock ucmatose on B
# and moves data; B's stock ucmatose connects to a VM listening on A; a
# VM opens and closes 40 connections to a cm_rate server on B, 16 at a
# time.  Meanwhile the kernel on A counts ib_umad_write() calls: no MAD
# went that way (the daemon's own answers leave from the sender threads'
# UD QPs too).
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM

# ib_umad_write() calls from now on (the function tracer's record).
umad_writes_start() {
	local t=/sys/kernel/tracing
	[ -d $t/options ] || mount -t tracefs nodev $t
	echo 0 >$t/tracing_on
	echo ib_umad_write >$t/set_ftrace_filter
	echo function >$t/current_tracer
	: >$t/trace
	echo 1 >$t/tracing_on
}
umad_writes() {
	local t=/sys/kernel/tracing
	echo 0 >$t/tracing_on
	grep -c " ib_umad_write" $t/trace || true
	echo nop >$t/current_tracer
}

host_a() {
	local writes
	add_ip 10.77.0.11
	add_ip 10.77.0.12
	start_daemon --ud-sender rxe0:1
	grep -q "clients' MADs leave from 8 UD QPs" /tmp/d.log || { cat /tmp/d.log; fail "no UD sender"; }
	umad_writes_start
	await server-up
	vm_run_checked vm1 --gid 10.77.0.11 --connect "$LAB_PEER_IP" --rdma-port 7471 \
		--device rxe0 --run-ms 30000
	ok "vm1: connected to ucmatose on B, 10 messages each way, disconnected"
	vm_start_listening vm2 --gid 10.77.0.12 --listen 7472 --device rxe0 --run-ms 40000
	signal vm-up
	vm_wait_checked vm2
	ok "vm2: accepted B's ucmatose, 10 messages each way, disconnected"
	await rate-up
	timeout 120 "$B/bench/cm_rate_vm" --gid 10.77.0.11 --connect "$LAB_PEER_IP" \
		--qp-port rxe0:1 -c 40 -w 16 >/tmp/rate.txt 2>&1 || { cat /tmp/rate.txt; fail "cm_rate_vm"; }
	grep -qx "cm_rate: established 40" /tmp/rate.txt || fail "not all 40 established"
	grep -qx "cm_rate: disconnected 40" /tmp/rate.txt || fail "not all 40 disconnected"
	ok "cm_rate_vm: 40 connections to cm_rate on B, 16 at a time, opened and closed"
	writes=$(umad_writes)
	[ "$writes" = 0 ] || fail "$writes MADs were written to ib_umad"
	ok "no MAD written to ib_umad: every MAD left from a UD QP"
	signal done
	stop_daemon
}

host_b() {
	local srv
	ucmatose_server
	grep -q "^disconnected" /tmp/ucm.log || fail "ucmatose saw no disconnect"
	ok "ucmatose server (kernel rdma_cm): data complete, disconnected"
	await vm-up
	timeout 60 stdbuf -oL ucmatose -s 10.77.0.12 -p 7472 -b "$LAB_IP" >/tmp/ucmc.log 2>&1 ||
		{ cat /tmp/ucmc.log; fail "ucmatose client"; }
	grep -q "data transfers complete" /tmp/ucmc.log || fail "ucmatose client data"
	ok "ucmatose client (kernel rdma_cm): connected to vm2, data complete"
	"$B/bench/cm_rate" -s -b "$LAB_IP" >/tmp/srv.log 2>&1 &
	srv=$!
	wait_for kernel_listening 7471 || fail "cm_rate server is not listening"
	signal rate-up
	await_long 120 done
	kill "$srv" 2>/dev/null
	ok "cm_rate server served the run"
}
