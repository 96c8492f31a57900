#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Profile the daemon in one phase of bench_relay: `perf record -g` on it
# for the phase's first SECONDS, then its system calls per relayed MAD
# over the same span (`perf stat`) and its threads' context switches per
# MAD by role, so two pair counts or two daemons compare per MAD rather
# than per second.
#
#   scripts/bench-profile.sh [-d DAEMON] [-p PAIRS] [-P PHASE] [-s SECONDS] [-o DIR]
#                            [-a 'BENCH_RELAY ARGS']
#
# -a passes more arguments to bench_relay: in a lab VM, -a '--port rxe0:1
# --gid-base ::ffff:10.77.1.0' profiles the daemon on a umad port.
#
# PHASE is one bench_relay prints with BENCH_PHASES set (default
# req_by_gid_16_inflight).  Output: DIR/perf.data (read it with `perf
# report -i DIR/perf.data`), DIR/syscalls.txt, and a summary on stdout.
set -euo pipefail

mads_out() {
	build/rdmacm-muxctl -S "$1" -j counters |
		python3 -c 'import json,sys; print(sum(json.load(sys.stdin)["counters"]["mads_out"].values()))'
}

# Each thread role of process $1 (its threads' names without their
# numbers) with its voluntary and involuntary context switches so far.
switches() {
	local t
	for t in /proc/"$1"/task/*; do
		awk '/^Name:/ { sub(/[0-9]+$/, "", $2); n = $2 }
			/^voluntary_ctxt_switches:/ { v = $2 }
			/^nonvoluntary_ctxt_switches:/ { i = $2 }
			END { print n, v, i }' "$t/status" 2>/dev/null || true
	done | awk '{ v[$1] += $2; i[$1] += $3 } END { for (r in v) print r, v[r], i[r] }'
}

# The profiled span (perf's workload, below): MADs and switches at its
# start and end.
if [ "${1:-}" = --span ]; then
	mads_out "$2" >"$5/m0"
	switches "$3" >"$5/switches-before.txt"
	sleep "$4"
	mads_out "$2" >"$5/m1"
	switches "$3" >"$5/switches-after.txt"
	exit 0
fi

daemon=build/rdmacm-muxd
pairs=1024
phase=req_by_gid_16_inflight
secs=3
out=
extra=
while getopts d:p:P:s:o:a: opt; do
	case $opt in
	d) daemon=$OPTARG ;;
	p) pairs=$OPTARG ;;
	P) phase=$OPTARG ;;
	s) secs=$OPTARG ;;
	o) out=$OPTARG ;;
	a) extra=$OPTARG ;;
	*) sed -n '10,11p' "$0" >&2; exit 2 ;;
	esac
done
command -v perf >/dev/null || { echo "bench-profile: perf is not installed" >&2; exit 2; }
[ -x build/bench/bench_relay ] || { echo "bench-profile: make build/bench/bench_relay first" >&2; exit 2; }
out=${out:-$(mktemp -d /tmp/rcm-profile.XXXXXX)}
mkdir -p "$out"
fifo=$out/phases
rm -f "$fifo" && mkfifo "$fifo"

# Each phase lasts 2 x SECONDS, so that the profile falls inside it.
BENCH_PHASES=1 build/bench/bench_relay --daemon "$(realpath "$daemon")" \
	--pairs "$pairs" --rounds 1 --seconds "$((2 * secs))" $extra \
	>"$out/bench.txt" 2>"$fifo" &
bench=$!
trap 'kill $bench 2>/dev/null || true' EXIT

while read -r line; do
	echo "$line" >>"$out/bench.stderr"
	[ "$line" = "bench: phase daemon $phase $pairs" ] || continue
	pid=$(ps -eo pid=,ppid= | awk -v b=$bench '$2 == b {print $1}')
	[ -n "$pid" ] || { echo "bench-profile: no daemon under bench_relay" >&2; exit 1; }
	status=$(tr '\0' '\n' </proc/"$pid"/cmdline | grep -A1 -x -- -S | tail -n 1)
	# The span is perf's workload, so that it starts once both perfs
	# are attached (in a lab VM that takes seconds) and its counts are
	# read when it ends, not when perf is done writing its data.
	perf record -q -g -F 999 -p "$pid" -o "$out/perf.data" -- \
		perf stat -x, -o "$out/syscalls.txt" \
		-e 'syscalls:sys_enter_read,syscalls:sys_enter_readv,syscalls:sys_enter_recvfrom,syscalls:sys_enter_recvmsg,syscalls:sys_enter_sendmsg,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_futex' \
		-p "$pid" -- "$0" --span "$status" "$pid" "$secs" "$out" 2>/dev/null
	m0=$(cat "$out/m0") m1=$(cat "$out/m1")
	echo "bench-profile: $pairs pairs, phase $phase, $((m1 - m0)) MADs in ${secs} s"
	# Context switches per MAD by thread role, a thread's own sleeps
	# (voluntary: waits, lock contention) apart from its preemptions.
	awk -v n=$((m1 - m0)) 'NR == FNR { v[$1] -= $2; i[$1] -= $3; next }
		{ v[$1] += $2; i[$1] += $3 }
		END { for (r in v) if (n > 0)
			printf "bench-profile: switches %-16s %.3f voluntary %.3f involuntary per MAD\n", r, v[r] / n, i[r] / n }' \
		"$out/switches-before.txt" "$out/switches-after.txt" | sort
	awk -F, -v n=$((m1 - m0)) '/syscalls:/ { if (n > 0) printf "bench-profile: %-32s %.3f per MAD\n", $3, $1 / n }' "$out/syscalls.txt"
	# (sed reads to the end: an early exit would fail the pipe)
	perf report -i "$out/perf.data" --no-children --sort comm --stdio -g none 2>/dev/null |
		grep -E '^ +[0-9.]+%' | sed -n '1,8s/^/bench-profile: thread /p'
	perf report -i "$out/perf.data" --no-children --sort sym --stdio -g none 2>/dev/null |
		grep -E '^ +[0-9.]+%' | sed -n '1,25s/^/bench-profile: /p'
done <"$fifo"
wait $bench
trap - EXIT
echo "bench-profile: output in $out"
