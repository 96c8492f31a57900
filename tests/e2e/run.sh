#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Runs lab scenarios (tests/e2e/scenarios/*.sh, or the names given) in
# throwaway VMs with Debian's kernel and soft-RoCE, through
# scripts/lab/labvm.sh, and prints "lab: N passed, N failed".
# A scenario sets LAB_TWO, MODULES_A (and MODULES_B) and defines host_a
# (and host_b), which run inside the VMs with tests/e2e/lib.sh sourced;
# optionally LAB_OPTS (more labvm.sh options) and host_prepare, which runs
# here on the host first (to build what the VMs need).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
. tests/e2e/lib.sh

if [ $# -gt 0 ]; then
	SCEN=()
	for n in "$@"; do SCEN+=(tests/e2e/scenarios/*"$n"*.sh); done
else
	SCEN=(tests/e2e/scenarios/*.sh)
fi
PASSED=0 FAILED=0 FAILS=()
for f in "${SCEN[@]}"; do
	name=$(basename "$f" .sh)
	LAB_TWO=0 MODULES_A=$NO_KCM MODULES_B=$NO_KCM LAB_OPTS=""
	unset -f host_prepare
	. "$f"
	pre="set -e; export LAB_BENCH='${LAB_BENCH:-}' CONF_CASES='${CONF_CASES:-}' CONF_VERBOSE='${CONF_VERBOSE:-}' LAB_PROFILE='${LAB_PROFILE:-}' LAB_TRACE='${LAB_TRACE:-}' LAB_DAEMON_ARGS='${LAB_DAEMON_ARGS:-}'; cd '$REPO'; . tests/e2e/lib.sh; . '$f'; set +e"
	echo "== $name"
	if declare -F host_prepare >/dev/null && ! out=$(host_prepare 2>&1); then
		FAILED=$((FAILED + 1))
		FAILS+=("$name")
		echo "$out" | sed 's/^/   | /'
		echo "   FAIL (host_prepare)"
		continue
	fi
	# shellcheck disable=SC2206
	args=(--timeout 300 $LAB_OPTS --modules "$MODULES_A" --modules-b "$MODULES_B" "$pre; host_a")
	[ "$LAB_TWO" = 1 ] && args+=("$pre; host_b")
	t0=$(date +%s)
	out=$(scripts/lab/labvm.sh "${args[@]}" 2>&1)
	rc=$?
	dt=$(($(date +%s) - t0))
	if [ "$rc" = 0 ]; then
		PASSED=$((PASSED + 1))
		if [ -n "${CONF_VERBOSE:-}" ]; then
			echo "$out" | sed 's/^/   | /'
		else
			echo "$out" | grep -E '(^|\] )ok: ' | sed 's/^/   /'
		fi
		echo "   PASS (${dt}s)"
	else
		FAILED=$((FAILED + 1))
		FAILS+=("$name")
		echo "$out" | sed 's/^/   | /'
		echo "   FAIL (exit $rc, ${dt}s)"
	fi
done
echo
[ ${#FAILS[@]} -eq 0 ] || echo "failed: ${FAILS[*]}"
echo "lab: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
