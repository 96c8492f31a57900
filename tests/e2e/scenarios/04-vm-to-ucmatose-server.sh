# Issue 3, 4b: a VM on host A connects to stock ucmatose (server) on host B,
# which runs the kernel's rdma_cm; messages flow and both see the
# disconnect.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM

host_a() {
	add_ip 10.77.0.11
	start_daemon
	await server-up
	vm_run_checked vm1 --gid 10.77.0.11 --connect "$LAB_PEER_IP" --rdma-port 7471 \
		--device rxe0 --run-ms 30000
	ok "vm1: connected to ucmatose, 10 messages each way, disconnected"
	stop_daemon
}

host_b() {
	ucmatose_server
	grep -q "^disconnected" /tmp/ucm.log || fail "ucmatose saw no disconnect"
	ok "ucmatose (kernel rdma_cm): data complete, disconnected"
}
