# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Issue 21: the kernel CM as the judge of transparency.  Host B has no
# kernel CM: tests/conformance/cm_peer holds its CM agent and plays each
# case of tests/conformance/cases/ against host A twice, recording what
# comes back: (a) A's own kernel CM with cm_app (librdmacm), the
# reference; (b) rdmacm-muxd on A with the stock pvrdma guest of
# 20-pvrdma-guest behind it, running the same cm_app (one boot for all
# cases).  Host A then compares the two records of each case
# (tests/conformance/compare.sh); see tests/conformance/README.md.
LAB_TWO=1
MODULES_A=$WITH_KCM
MODULES_B=$NO_KCM
LAB_OPTS="--mem 2560 --smp 2 --timeout 2400"
CONF_DIR=tests/conformance
CMD_PORT=4446

host_prepare() { scripts/lab/pvrdma-guest.sh >/dev/null; }

conf_cases() {
	local f
	for f in "$CONF_DIR"/cases/*.case; do
		[ -z "${CONF_CASES:-}" ] || echo " $CONF_CASES " | grep -q " $(basename "$f" .case) " ||
			continue
		echo "$f"
	done
}

# wait_line FILE TEXT SECONDS
wait_line() {
	local i
	for i in $(seq $(($3 * 10))); do grep -aqF "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
	return 1
}

# conf_serve_syncs TAG MODE: until B's peer is done with the case, do
# what its "sync" steps ask: "restart" kills the daemon (SIGKILL) and
# starts it again, QEMU reconnecting (nothing to do for the kernel CM).
conf_serve_syncs() {
	local i
	for i in $(seq 3000); do
		[ -e "$LAB_SYNC/$1-peer-done" ] && return 0
		if [ -e "$LAB_SYNC/$1-restart" ] && [ ! -e "$LAB_SYNC/$1-restart-done" ]; then
			if [ "$2" = guest ]; then
				kill -9 "$DAEMON_PID"
				wait "$DAEMON_PID" 2>/dev/null
				restart_daemon
			fi
			signal "$1-restart-done"
		fi
		sleep 0.1
	done
	fail "peer never signalled $1-peer-done"
}

# conf_phase PHASE MODE: every case's application side, on this host
# (MODE native) or in the guest (MODE guest), in step with B.
conf_phase() {
	local phase=$1 mode=$2 f name tag args
	for f in $(conf_cases); do
		name=$(basename "$f" .case)
		tag=$phase-$name
		args=$(sed -n 's/^app: //p' "$f" | sed "s/{B}/$LAB_PEER_IP/g")
		await_long 120 "$tag-peer-ready"
		if [ "$mode" = native ]; then
			# shellcheck disable=SC2086
			timeout 120 "$B/tests/cm_app" --tag "$tag" $args >>/tmp/app.log 2>&1 &
		else
			echo "run cm_app --tag $tag $args" >&5
		fi
		wait_line /tmp/app.log "cm_app[$tag]: ready" 120 ||
			{ tail -n 20 /tmp/app.log; fail "$tag: cm_app did not start"; }
		signal "$tag-go"
		conf_serve_syncs "$tag" "$mode"
		wait_line /tmp/app.log "cm_app[$tag]: exit" 120 ||
			{ tail -n 20 /tmp/app.log; fail "$tag: cm_app did not end"; }
		grep -aF "cm_app[$tag]:" /tmp/app.log | tr -d '\r' >"$LAB_SYNC/$tag.app"
		signal "$tag-closed"
	done
}

host_a() {
	local libvirt
	: >/tmp/app.log
	conf_phase kernel native
	ok "kernel CM: $(conf_cases | wc -l) cases played"
	modprobe -r rdma_ucm rdma_cm iw_cm ib_cm || fail "cannot unload the kernel CM"
	start_daemon --qemu-socket rxe0:1
	tests/e2e/pvrdma/qmp-libvirt.sh "$QMP_PORT" /tmp/qmp.log &
	libvirt=$!
	GUEST_CMD_PORT=$CMD_PORT pvrdma_guest_start cmd 600 ,reconnect=1
	local i
	for i in $(seq 600); do guest_said "cmd-ready" && break; sleep 1; done
	guest_said "cmd-ready" || { tail -n 20 /tmp/guest.console; fail "the guest did not boot"; }
	wait_for gid_present "$(ipv4_gid "$GUEST_IP")" || fail "QEMU's GID for the guest never came"
	exec 5<>/dev/tcp/127.0.0.1/$CMD_PORT || fail "no command line into the guest"
	cat <&5 >>/tmp/app.log &
	ok "guest booted, its command line open"
	signal daemon-phase
	conf_phase daemon guest
	ok "daemon and pvrdma guest: $(conf_cases | wc -l) cases played"
	echo quit >&5
	for i in $(seq 60); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 1; done
	kill "$QEMU_PID" $libvirt 2>/dev/null
	status_json >"$LAB_SYNC/daemon-status.json"
	stop_daemon
	await_long 300 b-done
	"$CONF_DIR"/compare.sh "$LAB_SYNC" $(conf_cases) || fail "the daemon is not transparent"
}

# conf_peer PHASE EP-IP HOST-IP: B's side of every case.
conf_peer() {
	local phase=$1 f name tag n=0 pid base=256
	[ "$phase" = kernel ] || base=512
	for f in $(conf_cases); do
		n=$((n + 1))
		name=$(basename "$f" .case)
		tag=$phase-$name
		"$B/tests/cm_peer" --src-ip "$LAB_IP" --ep-ip "$2" --host-ip "$3" --case "$f" \
			--ids $((base + n)) --go "$LAB_SYNC/$tag-go" --sync-prefix "$LAB_SYNC/$tag" \
			>"$LAB_SYNC/$tag.rec" 2>"$LAB_SYNC/$tag.err" &
		pid=$!
		wait_line "$LAB_SYNC/$tag.rec" "cm_peer: ready" 10 ||
			{ cat "$LAB_SYNC/$tag.err"; fail "$tag: cm_peer did not start"; }
		signal "$tag-peer-ready"
		# A failed peer fails its case in compare.sh, not the run.
		wait $pid || echo "cm_peer: failed: $(cat "$LAB_SYNC/$tag.err")" >>"$LAB_SYNC/$tag.rec"
		signal "$tag-peer-done"
		await_long 180 "$tag-closed"
	done
}

host_b() {
	conf_peer kernel "$LAB_PEER_IP" "$LAB_PEER_IP"
	await_long 900 daemon-phase
	conf_peer daemon "$GUEST_IP" "$LAB_PEER_IP"
	signal b-done
}
