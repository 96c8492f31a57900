# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Issue 8, items 5 and 11: a VM with an established connection to a stock
# rdma_cm peer is killed.  The daemon sends the DREQ the VM's kernel CM
# would have sent, and the peer's connection leaves the established state
# within a second (host B's `rdma res show cm_id`).
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM

host_a() {
	add_ip 10.77.0.11
	start_daemon
	await server-up
	# rdma_server waits for the client's message first; so does the VM
	# (cmatose's order), so the connection stays established, idle.
	"$B/rdmacm-mux-vm" --name vm1 --gid 10.77.0.11 --connect "$LAB_PEER_IP" \
		--rdma-port 7471 --device rxe0 --messages 1 --message-size 16 \
		--run-ms 60000 >/tmp/vm1.log 2>&1 &
	local vm=$!
	wait_for grep -q "vm1: connected" /tmp/vm1.log || { sleep 3; cat /tmp/vm1.log; fail "vm1 did not connect"; }
	await peer-sees-connection
	kill -KILL $vm
	wait $vm 2>/dev/null
	signal vm-killed
	await b-done
	[ "$(status_get .counters.answers.dreq_abandoned)" = 1 ] ||
		fail "the daemon's DREQ for the dead VM was not counted"
	ok "vm1 killed: the daemon sent its peer a DREQ (counted)"
	stop_daemon
}

host_b() {
	timeout 60 rdma_server >/tmp/srv.log 2>&1 &
	wait_for kernel_listening 7471 || fail "rdma_server is not listening"
	signal server-up
	wait_for cm_id_connected || { rdma res show cm_id; cat /tmp/srv.log; fail "the connection never showed on B"; }
	signal peer-sees-connection
	await vm-killed
	local t0 t1 ms
	t0=$(date +%s%N)
	# Polled tightly: the bound is one second.
	for i in $(seq 200); do cm_id_connected || break; sleep 0.02; done
	t1=$(date +%s%N)
	ms=$(( (t1 - t0) / 1000000 ))
	signal b-done
	rdma res show cm_id
	cm_id_connected && fail "B's connection is still established $ms ms after the kill"
	[ "$ms" -lt 1000 ] || fail "B's connection left established only after $ms ms"
	ok "B's rdma_cm connection left the established state $ms ms after the VM died"
}
