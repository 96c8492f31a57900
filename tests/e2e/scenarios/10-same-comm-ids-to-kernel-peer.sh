# Issue 4, item 7: two VMs behind one daemon, using identical guest comm
# IDs, connect at the same time to one stock rdma_cm peer (ucmatose
# serving two connections) on host B; both exchange data and disconnect.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM

host_a() {
	add_ip 10.77.0.11
	add_ip 10.77.0.12
	start_daemon -v         # logs each comm-ID translation
	await server-up
	local rc1=0 rc2=0 p1 p2
	"$B/rdmacm-mux-vm" --name vm1 --gid 10.77.0.11 --comm-id 0x1234 \
		--connect "$LAB_PEER_IP" --rdma-port 7471 --device rxe0 --run-ms 40000 \
		>/tmp/vm1.log 2>&1 &
	p1=$!
	"$B/rdmacm-mux-vm" --name vm2 --gid 10.77.0.12 --comm-id 0x1234 \
		--connect "$LAB_PEER_IP" --rdma-port 7471 --device rxe0 --run-ms 40000 \
		>/tmp/vm2.log 2>&1 &
	p2=$!
	wait $p1 || rc1=$?
	wait $p2 || rc2=$?
	cat /tmp/vm1.log /tmp/vm2.log
	[ "$rc1" = 0 ] && [ "$rc2" = 0 ] || fail "vm exit statuses $rc1 $rc2"
	grep -q "local comm id 0x00001234" /tmp/vm1.log || fail "vm1 did not use 0x1234"
	grep -q "local comm id 0x00001234" /tmp/vm2.log || fail "vm2 did not use 0x1234"
	vm_session_ok vm1
	vm_session_ok vm2
	local hosts
	hosts=$(host_ids_for 0x00001234)
	[ "$hosts" = 2 ] || fail "expected two host IDs for guest ID 0x1234 on the wire, saw $hosts"
	ok "two VMs with comm ID 0x1234: two host IDs, both connected, data, disconnected"
	stop_daemon
}

host_b() {
	ucmatose_server -c 2
	ok "ucmatose served both connections"
}
