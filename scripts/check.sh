#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Every test: unit and integration suites and the demo check, first in a
# normal build, then under AddressSanitizer+UBSan, then under valgrind,
# then a short libFuzzer run of every parser.  Prints "N passed, N failed".
#   scripts/check.sh [--quick]     --quick: normal build only
set -uo pipefail
cd "$(dirname "$0")/.."

QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
JOBS=$(nproc 2>/dev/null || echo 2)
LOGDIR=$(mktemp -d /tmp/rdmacm-mux-check.XXXXXX)
PASSED=0
FAILED=0
FAILURES=()
# The Makefile's list, so that a suite added there runs here.
UNIT_TESTS=$(make -s --no-print-directory print-unit-tests)
INTEG_TESTS=$(make -s --no-print-directory print-integration-tests)
FUZZ_TARGETS=$(make -s --no-print-directory print-fuzz-targets)
# Under valgrind, the daemon's suites that drive it the way a host does
# (the attack and QEMU suites time the daemon, which valgrind slows
# some 20-50 times).
VALGRIND_TESTS="test_admission test_status test_service test_cm"

# run_suite NAME CMD...: counts cmocka's (or the demo's) totals.
run_suite() {
	local name="$1"; shift
	local log="$LOGDIR/$(echo "$name" | tr ' /' '__').log"
	local rc p f
	echo "== $name"
	"$@" >"$log" 2>&1
	rc=$?
	p=$(grep -Eo '\[  PASSED  \] [0-9]+ test' "$log" | awk '{s+=$4} END {print s+0}')
	f=$(grep -Eo '\[  FAILED  \] [0-9]+ test' "$log" | awk '{s+=$4} END {print s+0}')
	# Script suites end with "name: N passed, N failed".
	if grep -Eq '^[a-z-]+: [0-9]+ passed, [0-9]+ failed' "$log"; then
		# (the whole line: text after the counts is not a count)
		p=$(sed -nE 's/^[a-z-]+: ([0-9]+) passed, ([0-9]+) failed.*/\1/p' "$log" | tail -n 1)
		f=$(sed -nE 's/^[a-z-]+: ([0-9]+) passed, ([0-9]+) failed.*/\2/p' "$log" | tail -n 1)
	fi
	if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi
	PASSED=$((PASSED + p))
	FAILED=$((FAILED + f))
	if [ "$rc" != 0 ] || [ "$f" != 0 ]; then
		FAILURES+=("$name")
		echo "   FAILED (exit $rc): last lines of $log"
		tail -n 40 "$log" | sed 's/^/   | /'
	else
		echo "   $p passed"
	fi
}

build() {
	echo "== build $*"
	make -j"$JOBS" "$@" all tests >"$LOGDIR/build.log" 2>&1 || {
		tail -n 40 "$LOGDIR/build.log"; echo "0 passed, 1 failed"; exit 1; }
}

suites() {
	local b="$1" tag="$2"
	for t in $UNIT_TESTS; do
		run_suite "$tag $t" "$b/tests/$t"
	done
	for t in $INTEG_TESTS; do
		run_suite "$tag $t" env RDMACM_MUXD="$PWD/$b/rdmacm-muxd" \
			RDMACM_MUXCTL="$PWD/$b/rdmacm-muxctl" "$b/tests/$t"
	done
	run_suite "$tag demo" scripts/demo.sh --build-dir "$b" --check
}

run_suite "style (clang-format)" make -s check-format
run_suite "house rules (prefixes, mux.h sections, no call cycle, no dead code)" \
	scripts/check-house.sh
build
suites build normal
# make bench itself, the relay part briefly, so that it cannot rot (no
# timing asserted; the table benchmark checks that every lookup found its
# entry).
run_suite "make bench (relay --quick)" bash -c "timeout 600 make -s bench \
	BENCH_ARGS=--quick && echo 'bench: 1 passed, 0 failed'"
# and the capture's cost, briefly: it fails if the capture saw no MAD.
run_suite "make bench-capture (--quick)" bash -c "timeout 600 make -s \
	bench-capture BENCH_ARGS=--quick && echo 'bench: 1 passed, 0 failed'"
run_suite "make install + pkg-config consumer" tests/install/check-install.sh
run_suite "systemd units (systemd-analyze verify)" make -s check-units
# From a git checkout: the packages, built from the release tarball.
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$PWD" ]; then
	run_suite "debian packages (dpkg-buildpackage, lintian)" bash -c \
		"make -s deb && echo 'deb: 1 passed, 0 failed'"
fi

if [ "$QUICK" = 0 ]; then
	build SAN=1
	export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:exitcode=99
	export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
	suites build-san asan+ubsan
	unset ASAN_OPTIONS UBSAN_OPTIONS

	# The daemon is multithreaded: run its suites against a TSan build
	# (any data race makes it exit non-zero, which the harness fails).
	echo "== build TSAN=1 (daemon)"
	if make -j"$JOBS" TSAN=1 build-tsan/rdmacm-muxd >"$LOGDIR/build-tsan.log" 2>&1; then
		for t in $INTEG_TESTS; do
			run_suite "tsan daemon $t" env RDMACM_MUXD="$PWD/build-tsan/rdmacm-muxd" \
				RDMACM_MUXCTL="$PWD/build/rdmacm-muxctl" \
				TSAN_OPTIONS="halt_on_error=1 exitcode=66" RCM_TIME_SCALE=3 \
				build/tests/$t
		done
	else
		run_suite "build TSAN=1" bash -c "tail -n 30 $LOGDIR/build-tsan.log; false"
	fi
	# The host-process library is multithreaded too (its thread and the
	# application's): its suite with the library under TSan.
	if make -j"$JOBS" TSAN=1 build-tsan/tests/test_rdmacm >>"$LOGDIR/build-tsan.log" 2>&1; then
		run_suite "tsan library test_rdmacm" env RDMACM_MUXD="$PWD/build/rdmacm-muxd" \
			RDMACM_MUXCTL="$PWD/build/rdmacm-muxctl" \
			TSAN_OPTIONS="halt_on_error=1 exitcode=66" RCM_TIME_SCALE=3 \
			build-tsan/tests/test_rdmacm
	else
		run_suite "build TSAN=1 (library)" bash -c "tail -n 30 $LOGDIR/build-tsan.log; false"
	fi

	VG="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect"
	for t in $UNIT_TESTS; do
		run_suite "valgrind $t" $VG build/tests/$t
	done
	for t in $VALGRIND_TESTS; do
		run_suite "valgrind $t (daemon under valgrind)" env \
			RDMACM_MUXD="$PWD/build/rdmacm-muxd" RDMACM_MUXD_WRAPPER="$VG" \
			RDMACM_MUXCTL="$PWD/build/rdmacm-muxctl" \
			RCM_TIME_SCALE=10 build/tests/$t
	done

	# The host-process library under valgrind (its thread's stack is
	# still in use at exit: "possibly lost" is not counted).
	run_suite "valgrind test_rdmacm (library under valgrind)" env \
		RDMACM_MUXD="$PWD/build/rdmacm-muxd" RDMACM_MUXCTL="$PWD/build/rdmacm-muxctl" \
		RCM_TIME_SCALE=10 $VG --show-possibly-lost=no build/tests/test_rdmacm

	FUZZ_SECONDS=${FUZZ_SECONDS:-15}
	for t in $FUZZ_TARGETS; do
		run_suite "libFuzzer $t ${FUZZ_SECONDS}s" bash -c "
			make -s build/fuzz/$t && mkdir -p build/fuzz/corpus-$t &&
			build/fuzz/$t -max_total_time=$FUZZ_SECONDS -print_final_stats=1 \
				build/fuzz/corpus-$t tests/fuzz/seeds/$t &&
			echo '[  PASSED  ] 1 test(s).'"
	done
fi

echo
if [ ${#FAILURES[@]} -gt 0 ]; then
	echo "failed: ${FAILURES[*]} (logs in $LOGDIR)"
else
	rm -rf "$LOGDIR"
fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
