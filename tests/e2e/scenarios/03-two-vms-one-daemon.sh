# Issue 3, 4a: two VMs behind one daemon on host A, each with its own GID,
# connect, move data both ways over a real RC QP, and disconnect.
LAB_TWO=0
MODULES_A=$NO_KCM

host_a() {
	add_ip 10.77.0.11
	add_ip 10.77.0.12
	start_daemon
	"$B/rdmacm-mux-vm" --name vm2 --gid 10.77.0.12 --listen 7471 --device rxe0 \
		>/tmp/vm2.log 2>&1 &
	local vm2=$! rc1=0 rc2=0
	wait_for grep -q listening /tmp/vm2.log || fail "vm2 did not start"
	"$B/rdmacm-mux-vm" --name vm1 --gid 10.77.0.11 --connect 10.77.0.12 \
		--rdma-port 7471 --device rxe0 >/tmp/vm1.log 2>&1 || rc1=$?
	wait $vm2 || rc2=$?
	cat /tmp/vm1.log /tmp/vm2.log
	[ "$rc1" = 0 ] && [ "$rc2" = 0 ] || fail "vm exit statuses $rc1 $rc2"
	vm_session_ok vm1
	vm_session_ok vm2
	grep -q 'first received: "vm2 message 0"' /tmp/vm1.log || fail "vm1 got wrong data"
	grep -q 'first received: "vm1 message 0"' /tmp/vm2.log || fail "vm2 got wrong data"
	ok "connected, 10 messages each way over RC, disconnected"
	stop_daemon
}
