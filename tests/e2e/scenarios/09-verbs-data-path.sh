# Issue 3, item 3: libmuxbe's verbs data path on rxe, QP1 through the
# daemon included.
LAB_TWO=0
MODULES_A=$NO_KCM

host_a() {
	add_ip 10.77.0.21
	add_ip 10.77.0.22
	RDMACM_MUXD=$PWD/$B/rdmacm-muxd RCM_TEST_UMAD_PORT=rxe0:1 \
		RCM_GSI_GID_A=10.77.0.21 RCM_GSI_GID_B=10.77.0.22 \
		timeout 120 "$B/tests/verbs_selftest" || fail "verbs selftest"
	ok "verbs data path"
}
