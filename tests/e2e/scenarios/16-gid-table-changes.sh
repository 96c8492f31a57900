# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Issue 8, item 7: the GID table is never stale.  A client registers an
# address, the address leaves the netdev and another takes its place (and,
# as the kernel reuses free slots, its GID index).  The daemon notices on
# its own, and the first client's next send is refused instead of leaving
# from the index that now holds someone else's address.
LAB_TWO=0
MODULES_A=$NO_KCM

gid_index_of() {
	local f
	f=$(grep -li "$1" /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null | head -n 1)
	[ -n "$f" ] && basename "$f"
}
table_has() { status_get '.ports[0].gid_table[].gid' | grep -qx "::ffff:$1"; }
table_lacks() { ! table_has "$1"; }

host_a() {
	add_ip 10.77.0.11
	start_daemon
	local before after changes
	before=$(gid_index_of "$(ipv4_gid 10.77.0.11)")
	"$B/tests/mad_send" --register 10.77.0.11 --from 10.77.0.11 --to "$LAB_IP" \
		--wait-file /tmp/go --expect EADDRNOTAVAIL >/tmp/x.log 2>&1 &
	local x=$!
	wait_for grep -q registered /tmp/x.log || fail "client x did not register"
	changes=$(status_get '.ports[0].counters.gid_table_changes')
	ip addr del 10.77.0.11/24 dev eth0 || fail "ip addr del"
	add_ip 10.77.0.12
	after=$(gid_index_of "$(ipv4_gid 10.77.0.12)")
	echo "10.77.0.11 had GID index $before; 10.77.0.12 has $after"
	# No client asked: the daemon notices by itself.
	wait_for table_lacks 10.77.0.11 || fail "the daemon still lists 10.77.0.11"
	wait_for table_has 10.77.0.12 || fail "the daemon does not list 10.77.0.12"
	[ "$(status_get '.ports[0].counters.gid_table_changes')" -gt "$changes" ] ||
		fail "the change was not counted"
	ok "address replaced on the netdev: the daemon's GID table followed"
	"$B/tests/mad_send" --register 10.77.0.12 --from 10.77.0.12 --to "$LAB_IP" \
		--expect ok || fail "the new address's owner cannot send"
	touch /tmp/go
	local rc=0
	wait $x || rc=$?
	cat /tmp/x.log
	[ "$rc" = 0 ] || fail "client x's send from the departed address was not refused"
	ok "a send from the departed address is refused (EADDRNOTAVAIL), not sent from index $before"
	stop_daemon
}
