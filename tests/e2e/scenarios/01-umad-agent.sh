# The umad port on rxe without the kernel CM: the agent registers, the GID
# table is read (an address added later shows up when a client registers
# it), and the port is reported active.
LAB_TWO=0
MODULES_A=$NO_KCM

host_a() {
	start_daemon
	grep -q "umad port rxe0:1: agent" /tmp/d.log || fail "no agent in the log"
	status_json >/tmp/st.json
	grep -q '"name": "rxe0:1"' /tmp/st.json || fail "port not in status"
	grep -q '"kind": "umad"' /tmp/st.json || fail "not a umad port"
	grep -q '"state": "active"' /tmp/st.json || fail "port not active"
	grep -q "::ffff:$LAB_IP" /tmp/st.json || fail "own GID missing from the GID table"
	ok "agent registered, port active, GID table read"
	add_ip 10.77.0.31
	"$B/tests/mad_send" --register 10.77.0.31 --from 10.77.0.31 --to 10.77.0.31 \
		--expect ok || fail "a GID added after start-up is not usable"
	ok "a GID added after start-up is found and used"
	stop_daemon
}
