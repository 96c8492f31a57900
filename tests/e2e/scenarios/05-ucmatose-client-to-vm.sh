# Issue 3, 4c: stock ucmatose as a client on host B connects to a VM that
# listens on host A.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM

host_a() {
	add_ip 10.77.0.12
	start_daemon
	vm_start_listening vm2 --gid 10.77.0.12 --listen 7471 --device rxe0 --run-ms 40000
	signal vm-up
	vm_wait_checked vm2
	ok "vm2: accepted ucmatose, 10 messages each way, disconnected"
	stop_daemon
}

host_b() {
	await vm-up
	timeout 60 stdbuf -oL ucmatose -s 10.77.0.12 -b "$LAB_IP" >/tmp/ucm.log 2>&1
	local rc=$?
	cat /tmp/ucm.log
	[ "$rc" = 0 ] || fail "ucmatose exit status $rc"
	grep -q "data transfers complete" /tmp/ucm.log || fail "ucmatose data"
	grep -q "return status 0" /tmp/ucm.log || fail "ucmatose did not finish cleanly"
	ok "ucmatose client: connected, data complete, disconnected"
}
