# With the kernel CM loaded the agent cannot register; the daemon must say
# why and what to do, and exit with status 1.
LAB_TWO=0
MODULES_A=$WITH_KCM

host_a() {
	local rc=0
	"$B/rdmacm-muxd" --port rxe0:1 -s /tmp/m.sock -S /tmp/s.sock 2>/tmp/d.log || rc=$?
	[ "$rc" = 1 ] || fail "daemon exit status $rc, expected 1"
	grep -q "ib_cm" /tmp/d.log || fail "the message does not name ib_cm"
	grep -q "modprobe -r rdma_ucm rdma_cm iw_cm ib_cm" /tmp/d.log || fail "the message gives no fix"
	sed 's/^/daemon: /' /tmp/d.log
	ok "refused with the cause and the fix"
}
