#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The demo: rdmacm-muxd on a simulated port, two VMs (rdmacm-mux-vm) that
# connect through it with REQ/REP/RTU and disconnect with DREQ/DREP, a
# connection attempt that is rejected, and rdmacm-muxctl status along the
# way.  With --check it also asserts every step (used by `make check`).
set -euo pipefail

B=build
CHECK=0
while [ $# -gt 0 ]; do
	case "$1" in
	--build-dir) B="$2"; shift 2 ;;
	--check) CHECK=1; shift ;;
	*) echo "usage: $0 [--build-dir DIR] [--check]" >&2; exit 2 ;;
	esac
done

T=$(mktemp -d /tmp/rdmacm-mux-demo.XXXXXX)
DPID=
cleanup() {
	if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then kill -TERM "$DPID"; wait "$DPID" || true; fi
	rm -rf "$T"
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
fail() { echo "demo check FAILED: $*" >&2; echo "--- daemon log" >&2; cat "$T/daemon.log" >&2; exit 1; }
# wait_for FILE PATTERN: until the line shows up, at most 10 s.
wait_for() {
	local i
	for i in $(seq 1 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
	fail "timed out waiting for '$2' in $1"
}

VM1_GID=10.0.0.1
VM2_GID=10.0.0.2
say "start rdmacm-muxd on a simulated port (GIDs $VM1_GID, $VM2_GID)"
"$B/rdmacm-muxd" --config none -s "$T/mux.sock" -S "$T/status.sock" \
	--sim-port "sim0=$VM1_GID,$VM2_GID" --timewait-ms 1000 2>"$T/daemon.log" &
DPID=$!
for i in $(seq 1 200); do [ -S "$T/status.sock" ] && break; sleep 0.05; done
[ -S "$T/status.sock" ] || fail "daemon did not start"
cat "$T/daemon.log"
export RDMACM_MUX_SOCKET="$T/mux.sock" RDMACM_MUX_STATUS="$T/status.sock"

say "vm2 listens on rdma_cm port 7471; vm1 connects to it"
"$B/rdmacm-mux-vm" --name vm2 --gid $VM2_GID --listen 7471 >"$T/vm2.log" 2>&1 &
VM2=$!
wait_for "$T/vm2.log" "listening"
"$B/rdmacm-mux-vm" --name vm1 --gid $VM1_GID --connect $VM2_GID --rdma-port 7471 \
	--hold-ms 1500 >"$T/vm1.log" 2>&1 &
VM1=$!
wait_for "$T/vm1.log" "connected"
cat "$T/vm1.log" "$T/vm2.log"

say "rdmacm-muxctl status (while connected)"
"$B/rdmacm-muxctl" status | tee "$T/status-connected.txt"
"$B/rdmacm-muxctl" -j >"$T/status-connected.json"

say "vm1 disconnects"
VM1_RC=0; wait $VM1 || VM1_RC=$?
VM2_RC=0; wait $VM2 || VM2_RC=$?
cat "$T/vm1.log"; cat "$T/vm2.log"
echo "vm1 exit $VM1_RC, vm2 exit $VM2_RC"

say "vm1 tries port 7472, where nobody listens: vm2's CM rejects it"
"$B/rdmacm-mux-vm" --name vm2 --gid $VM2_GID --listen 7471 --run-ms 3000 >"$T/vm2b.log" 2>&1 &
VM2B=$!
wait_for "$T/vm2b.log" "listening"
REJ_RC=0
"$B/rdmacm-mux-vm" --name vm1 --gid $VM1_GID --connect $VM2_GID --rdma-port 7472 \
	>"$T/vm1b.log" 2>&1 || REJ_RC=$?
cat "$T/vm1b.log"
kill $VM2B 2>/dev/null || true; wait $VM2B 2>/dev/null || true
# The daemon notices the closed sockets on its own time; wait for it.
for i in $(seq 1 200); do
	"$B/rdmacm-muxctl" -j | grep -q '"clients": \[\]' && break; sleep 0.05
done

say "rdmacm-muxctl status (after)"
"$B/rdmacm-muxctl" status | tee "$T/status-after.txt"

say "stop the daemon"
kill -TERM "$DPID"
DAEMON_RC=0; wait "$DPID" || DAEMON_RC=$?
DPID=
tail -n 3 "$T/daemon.log"
echo "daemon exit $DAEMON_RC"

if [ "$CHECK" = 1 ]; then
	[ "$VM1_RC" = 0 ] || fail "vm1 exit $VM1_RC"
	[ "$VM2_RC" = 0 ] || fail "vm2 exit $VM2_RC"
	[ "$REJ_RC" = 3 ] || fail "rejected connect exit $REJ_RC, expected 3"
	grep -q 'peer says "hello from vm2"' "$T/vm1.log" || fail "vm1 did not get vm2's private data"
	grep -q 'peer says "hello from vm1"' "$T/vm2.log" || fail "vm2 did not get vm1's private data"
	grep -q "vm1: disconnected" "$T/vm1.log" || fail "vm1 saw no disconnect"
	grep -q "vm2: disconnected" "$T/vm2.log" || fail "vm2 saw no disconnect"
	grep -q "reason 8" "$T/vm1b.log" || fail "no REJ with reason 8 (invalid service ID)"
	grep -q '"comm_ids": 2' "$T/status-connected.json" || fail "status did not show 2 live comm IDs"
	grep -Eq 'CLIENTS \(2\)' "$T/status-connected.txt" || fail "status did not show 2 clients"
	grep -q 'REJ=1' "$T/status-after.txt" || fail "status did not count the REJ"
	grep -Eq 'CLIENTS \(0\)' "$T/status-after.txt" || fail "clients left behind"
	[ "$DAEMON_RC" = 0 ] || fail "daemon exit $DAEMON_RC"
	echo
	echo "demo: 11 passed, 0 failed"
fi
