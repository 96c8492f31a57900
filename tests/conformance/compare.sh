#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# compare.sh DIR CASE...: the verdict of the conformance run.  For each
# case file, DIR holds kernel-NAME.rec and daemon-NAME.rec (cm_peer's
# records against the kernel CM and against the guest behind
# rdmacm-muxd) and kernel-NAME.app, daemon-NAME.app (what cm_app saw).
# The two are compared line by line; a line in one and not the other
# fails the case unless a "differ: REGEX | REASON" line of the case file
# matches it (an intended difference, argued in rdmacm-mux-cm(7)).  A case
# whose kernel record holds no answer at all must say "quiet: REASON",
# so that a case whose MADs reached nobody cannot pass by accident.
# normalise.sed, applied to both records first, takes out what differs
# between the endpoints by nature (their devices), each with its reason.
# Prints one line per case and "conformance: N passed, N failed"; with
# CONF_VERBOSE set, each passing case's record too.
set -uo pipefail
dir=$1
shift
here=$(dirname "$0")
passed=0 failed=0

record() { # PHASE NAME: the record and the application's events
	cat "$dir/$1-$2.rec" || return 1
	sed "s/^cm_app\[[^]]*\]: /app: /" "$dir/$1-$2.app" || return 1
}

# No process substitution: the lab VMs have no /dev/fd.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for f in "$@"; do
	name=$(basename "$f" .case)
	if ! record kernel "$name" | sed -E -f "$here/normalise.sed" >"$tmp/a" ||
		! record daemon "$name" | sed -E -f "$here/normalise.sed" >"$tmp/b"; then
		echo "FAIL: conformance $name: a record is missing"
		failed=$((failed + 1))
		continue
	fi
	a=$(cat "$tmp/a")
	b=$(cat "$tmp/b")
	if ! grep -q ": recv " "$tmp/a" && ! grep -q "^quiet: " "$f"; then
		echo "FAIL: conformance $name: the kernel answered nothing and the case does not say it is quiet"
		failed=$((failed + 1))
		continue
	fi
	diffs=$(diff "$tmp/a" "$tmp/b" | sed -n 's/^\([<>]\) /\1 /p')
	sed -n 's/^differ: //p' "$f" >"$tmp/differ"
	left="" reasons=""
	while IFS= read -r line; do
		[ -n "$line" ] || continue
		excused=""
		while IFS= read -r d; do
			re=${d%% | *}
			if grep -qE -- "$re" <<<"${line:2}"; then
				excused=${d#* | }
				break
			fi
		done <"$tmp/differ"
		if [ -n "$excused" ]; then
			grep -qF -- "$excused" <<<"$reasons" || reasons+="${reasons:+; }$excused"
		else
			left+="$line"$'\n'
		fi
	done <<<"$diffs"
	if [ -z "$left" ]; then
		passed=$((passed + 1))
		echo "ok: conformance $name${reasons:+ (intended: $reasons)}"
		if [ -n "${CONF_VERBOSE:-}" ]; then
			sed 's/^/      /' <<<"$a"
			[ -z "$diffs" ] || sed 's/^/    differs: /' <<<"$diffs"
		fi
	else
		failed=$((failed + 1))
		echo "FAIL: conformance $name: < kernel CM, > daemon"
		printf '%s' "$left" | sed 's/^/    /'
		echo "    kernel record:"
		sed 's/^/      /' <<<"$a"
		echo "    daemon record:"
		sed 's/^/      /' <<<"$b"
	fi
done
echo "conformance: $passed passed, $failed failed"
[ "$failed" = 0 ]
