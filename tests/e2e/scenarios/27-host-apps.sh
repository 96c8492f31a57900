# Issue 43: stock rdmacm-utils binaries, unchanged, run under
# rdmacm-mux-run on host A (the daemon owns rxe0:1, the kernel CM is
# unloaded) against host B's kernel CM, both directions; each tool's exit
# status and output checked as for the kernel CM.  Then two such
# processes listening on different ports of A's address and a demo VM
# with its own GID, all at once; then one process killed with a
# connection open, and B told.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM
VM_GID=10.77.0.13

# How many service IDs the host processes listen on, from the status.
muxed_listens() {
	status_get '[.clients[] | select(.name | startswith("rdmacm:")) | .routing.listens] | add // 0'
}
# muxed_listening N: they listen on N or more.
muxed_listening() { [ "$(muxed_listens)" -ge "$1" ]; }

# run_muxed NAME CMD...: CMD under the library, its output in /tmp/NAME.log.
run_muxed() {
	local name=$1; shift
	RDMACM_MUX_LIB="$B/librdmacm-mux.so.1" timeout 90 stdbuf -oL \
		"$B/rdmacm-mux-run" "$@" >"/tmp/$name.log" 2>&1
}

# muxed_ok NAME RC WORDS...: the tool's status was 0 and each of WORDS
# (a grep pattern) is in its output.
muxed_ok() {
	local name=$1 rc=$2 w; shift 2
	cat "/tmp/$name.log"
	[ "$rc" = 0 ] || fail "$name under rdmacm-mux-run: exit status $rc"
	for w in "$@"; do
		grep -q -- "$w" "/tmp/$name.log" || fail "$name: no \"$w\""
	done
}

# serve_muxed NAME LISTENS CMD...: CMD listening under the library, in the
# background (its pid in SERVED), once the daemon says it listens.
serve_muxed() {
	local name=$1 want=$2; shift 2
	run_muxed "$name" "$@" &
	SERVED=$!
	wait_for muxed_listening "$want" ||
		{ cat "/tmp/$name.log"; fail "$name did not listen"; }
}

host_a() {
	local rc srv
	start_daemon

	# ucmatose, four connections each way.
	await b-ucm-up
	rc=0; run_muxed ucm-c ucmatose -s "$LAB_PEER_IP" -b "$LAB_IP" -c 4 || rc=$?
	muxed_ok ucm-c "$rc" "data transfers complete" "return status 0"
	ok "ucmatose client (4 connections) through the daemon to the kernel CM"
	# Bound to no address: it listens on each of A's that is a GID.
	serve_muxed ucm-s 1 ucmatose -c 4
	signal a-ucm-up
	rc=0; wait "$SERVED" || rc=$?
	muxed_ok ucm-s "$rc" "data transfers complete" "return status 0"
	ok "ucmatose server on any address (4 connections) through the daemon, kernel CM client"

	# rping, data verified, RDMA READ and WRITE both ways.
	await b-rping-up
	rc=0; run_muxed rping-c rping -c -a "$LAB_PEER_IP" -v -C 10 || rc=$?
	muxed_ok rping-c "$rc" "ping data: rdma-ping-9"
	ok "rping client (10 verified pings) through the daemon"
	serve_muxed rping-s 1 rping -s -a "$LAB_IP" -v -C 10
	signal a-rping-up
	rc=0; wait "$SERVED" || rc=$?
	muxed_ok rping-s "$rc" "server ping data: rdma-ping-9"
	ok "rping server (10 verified pings) through the daemon"

	# rdma_client and rdma_server: the synchronous API.
	await b-rdmasrv-up
	rc=0; run_muxed rdma-c rdma_client -s "$LAB_PEER_IP" || rc=$?
	muxed_ok rdma-c "$rc" "rdma_client: end 0"
	ok "rdma_client (rdma_create_ep, synchronous) through the daemon"
	serve_muxed rdma-s 1 rdma_server -s "$LAB_IP"
	signal a-rdmasrv-up
	rc=0; wait "$SERVED" || rc=$?
	muxed_ok rdma-s "$rc" "rdma_server: end 0"
	ok "rdma_server (rdma_get_request, synchronous) through the daemon"

	# udaddy: SIDR, UD messages both ways.
	await b-udaddy-up
	rc=0; run_muxed uda-c udaddy -s "$LAB_PEER_IP" -b "$LAB_IP" || rc=$?
	muxed_ok uda-c "$rc" "data transfers complete"
	ok "udaddy client (SIDR) through the daemon"
	serve_muxed uda-s 1 udaddy -b "$LAB_IP"
	signal a-udaddy-up
	rc=0; wait "$SERVED" || rc=$?
	muxed_ok uda-s "$rc" "data transfers complete"
	ok "udaddy server (SIDR) through the daemon"

	# Two processes on A's address, ports 7480 and 7481, and a VM with
	# its own GID, all at once.
	add_ip "$VM_GID"
	local p1 p2 vm
	serve_muxed two-1 1 rping -s -a "$LAB_IP" -p 7480 -v -C 5
	p1=$SERVED
	serve_muxed two-2 2 ucmatose -b "$LAB_IP" -p 7481 -c 2
	p2=$SERVED
	"$B/rdmacm-mux-vm" --name vm3 --gid "$VM_GID" --listen 7471 --device rxe0 \
		--run-ms 40000 >/tmp/vm3.log 2>&1 &
	vm=$!
	wait_for grep -q listening /tmp/vm3.log || fail "vm3 did not start"
	signal a-three-up
	rc=0; wait "$p1" || rc=$?
	muxed_ok two-1 "$rc" "server ping data: rdma-ping-4"
	rc=0; wait "$p2" || rc=$?
	muxed_ok two-2 "$rc" "data transfers complete"
	rc=0; wait "$vm" || rc=$?
	cat /tmp/vm3.log
	[ "$rc" = 0 ] || fail "vm3 exit status $rc"
	ok "two host processes (ports 7480, 7481) and a VM (own GID) served at once"

	# A process killed with its connection open: B hears the disconnect.
	await b-kill-up
	run_muxed kill-c rping -c -a "$LAB_PEER_IP" -p 7490 -v &
	local victim=$!
	wait_for grep -q "ping data: rdma-ping-3" /tmp/kill-c.log ||
		{ cat /tmp/kill-c.log; fail "rping to be killed did not run"; }
	pkill -KILL -x rping || fail "no rping to kill"
	wait "$victim"
	signal a-killed
	await b-told
	ok "rping killed mid-connection: host B's rping was told"
	stop_daemon
}

host_b() {
	local rc
	UCM_SIGNAL=b-ucm-up ucmatose_server -c 4
	ok "ucmatose server (kernel CM): 4 connections from the muxed client"
	await a-ucm-up
	timeout 60 stdbuf -oL ucmatose -s "$LAB_PEER_IP" -b "$LAB_IP" -c 4 >/tmp/ucm2.log 2>&1
	rc=$?
	cat /tmp/ucm2.log
	[ "$rc" = 0 ] && grep -q "return status 0" /tmp/ucm2.log ||
		fail "ucmatose client (kernel CM): status $rc"
	ok "ucmatose client (kernel CM): 4 connections to the muxed server"

	timeout 60 rping -s -a "$LAB_IP" -v -C 10 >/tmp/rping-s.log 2>&1 &
	local srv=$!
	wait_for kernel_listening 7174 || fail "rping server not listening"
	signal b-rping-up
	rc=0; wait $srv || rc=$?
	cat /tmp/rping-s.log
	[ "$rc" = 0 ] && grep -q "server ping data: rdma-ping-9" /tmp/rping-s.log ||
		fail "rping server (kernel CM): status $rc"
	await a-rping-up
	rc=0; timeout 60 rping -c -a "$LAB_PEER_IP" -v -C 10 >/tmp/rping-c.log 2>&1 || rc=$?
	cat /tmp/rping-c.log
	[ "$rc" = 0 ] && grep -q "ping data: rdma-ping-9" /tmp/rping-c.log ||
		fail "rping client (kernel CM): status $rc"
	ok "rping (kernel CM) both ways with the muxed rping"

	timeout 60 rdma_server -s "$LAB_IP" >/tmp/rdma-s.log 2>&1 &
	srv=$!
	wait_for kernel_listening 7471 || fail "rdma_server not listening"
	signal b-rdmasrv-up
	rc=0; wait $srv || rc=$?
	cat /tmp/rdma-s.log
	[ "$rc" = 0 ] || fail "rdma_server (kernel CM): status $rc"
	await a-rdmasrv-up
	rc=0; timeout 60 rdma_client -s "$LAB_PEER_IP" >/tmp/rdma-c.log 2>&1 || rc=$?
	cat /tmp/rdma-c.log
	[ "$rc" = 0 ] || fail "rdma_client (kernel CM): status $rc"
	ok "rdma_server and rdma_client (kernel CM) with the muxed ones"

	timeout 60 stdbuf -oL udaddy -b "$LAB_IP" >/tmp/uda-s.log 2>&1 &
	srv=$!
	wait_for kernel_listening 7174 || fail "udaddy server not listening"
	signal b-udaddy-up
	rc=0; wait $srv || rc=$?
	cat /tmp/uda-s.log
	[ "$rc" = 0 ] && grep -q "data transfers complete" /tmp/uda-s.log ||
		fail "udaddy server (kernel CM): status $rc"
	await a-udaddy-up
	rc=0; timeout 60 stdbuf -oL udaddy -s "$LAB_PEER_IP" -b "$LAB_IP" >/tmp/uda-c.log 2>&1 || rc=$?
	cat /tmp/uda-c.log
	[ "$rc" = 0 ] && grep -q "data transfers complete" /tmp/uda-c.log ||
		fail "udaddy client (kernel CM): status $rc"
	ok "udaddy (kernel CM) both ways with the muxed udaddy"

	# The three on A at once.
	await a-three-up
	local r1 r2 r3
	timeout 60 rping -c -a "$LAB_PEER_IP" -p 7480 -v -C 5 >/tmp/three-1.log 2>&1 & r1=$!
	timeout 60 stdbuf -oL ucmatose -s "$LAB_PEER_IP" -b "$LAB_IP" -p 7481 -c 2 \
		>/tmp/three-2.log 2>&1 & r2=$!
	timeout 60 stdbuf -oL ucmatose -s "$VM_GID" -b "$LAB_IP" >/tmp/three-3.log 2>&1 & r3=$!
	rc=0; wait $r1 || rc=$?; cat /tmp/three-1.log
	[ "$rc" = 0 ] || fail "rping to A's port 7480: status $rc"
	rc=0; wait $r2 || rc=$?; cat /tmp/three-2.log
	[ "$rc" = 0 ] || fail "ucmatose to A's port 7481: status $rc"
	rc=0; wait $r3 || rc=$?; cat /tmp/three-3.log
	[ "$rc" = 0 ] || fail "ucmatose to the VM: status $rc"
	ok "B's kernel CM reached both host processes and the VM at once"

	# rping server on 7490; its client on A is killed mid-run.
	timeout 120 rping -s -a "$LAB_IP" -p 7490 -v >/tmp/kill-s.log 2>&1 &
	srv=$!
	wait_for kernel_listening 7490 || fail "rping server 7490 not listening"
	signal b-kill-up
	await a-killed
	rc=0; wait $srv || rc=$?
	cat /tmp/kill-s.log
	grep -q "DISCONNECT EVENT" /tmp/kill-s.log || fail "B's rping was not told"
	signal b-told
}
