# Issue 43: stock rdmacm-utils binaries, unchanged, run under
# rdmacm-mux-run on host A (the daemon owns rxe0:1, the kernel CM is
# unloaded) against host B's kernel CM, both directions; each tool's exit
# status and output checked as for the kernel CM.
LAB_TWO=1
MODULES_A=$NO_KCM
MODULES_B=$WITH_KCM

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

host_a() {
	start_daemon
	# 1. ucmatose as a client, four connections, to B's kernel CM.
	await ucm-server-up
	local rc=0
	run_muxed ucm-client ucmatose -s "$LAB_PEER_IP" -b "$LAB_IP" -c 4 || rc=$?
	cat /tmp/ucm-client.log
	[ "$rc" = 0 ] || fail "ucmatose client under rdmacm-mux-run: exit status $rc"
	grep -q "data transfers complete" /tmp/ucm-client.log || fail "ucmatose client: data"
	grep -q "return status 0" /tmp/ucm-client.log || fail "ucmatose client: not clean"
	ok "ucmatose client (4 connections) through the daemon to the kernel CM"
	signal ucm-client-done

	# 2. ucmatose as the server, B's kernel CM connecting.
	rc=0
	run_muxed ucm-server ucmatose -b "$LAB_IP" -c 4 &
	local srv=$!
	wait_for muxed_listening 1 ||
		{ cat /tmp/ucm-server.log; fail "ucmatose server did not listen"; }
	signal ucm-mux-server-up
	wait $srv || rc=$?
	cat /tmp/ucm-server.log
	[ "$rc" = 0 ] || fail "ucmatose server under rdmacm-mux-run: exit status $rc"
	grep -q "data transfers complete" /tmp/ucm-server.log || fail "ucmatose server: data"
	ok "ucmatose server (4 connections) through the daemon, kernel CM client"
	await ucm-b-client-done
	stop_daemon
}

host_b() {
	UCM_SIGNAL=ucm-server-up ucmatose_server -c 4
	ok "ucmatose server (kernel CM): 4 connections from the muxed client"
	await ucm-mux-server-up
	timeout 60 stdbuf -oL ucmatose -s "$LAB_PEER_IP" -b "$LAB_IP" -c 4 >/tmp/ucm2.log 2>&1
	local rc=$?
	cat /tmp/ucm2.log
	[ "$rc" = 0 ] || fail "ucmatose client (kernel CM) exit status $rc"
	grep -q "return status 0" /tmp/ucm2.log || fail "ucmatose client did not finish cleanly"
	ok "ucmatose client (kernel CM): 4 connections to the muxed server"
	signal ucm-b-client-done
}
