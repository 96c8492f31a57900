# The daemon's integration suites (admission, status, service) against the
# real umad port.  The tests use GIDs fd00::1..5, 10.1.0.1 and 10.1.0.2,
# so they are added to eth0 first.  Tests that need the sim port's down switch, a shared sim
# fabric or two ports skip (each says why).
LAB_TWO=0
MODULES_A=$NO_KCM

host_a() {
	local i
	for i in 1 2 3 4 5; do add_ip6 fd00::$i; done
	add_ip 10.1.0.1
	add_ip 10.1.0.2
	wait_for gid_present "fd00:0000:0000:0000:0000:0000:0000:0005" || fail "no GID for fd00::5"
	local t
	for t in test_admission test_status test_service; do
		RDMACM_MUXD=$PWD/$B/rdmacm-muxd \
			RCM_TEST_UMAD_PORT=rxe0:1 timeout 200 "$B/tests/$t" ||
			fail "$t on rxe0:1"
	done
	ok "integration suites passed on the real port"
}
