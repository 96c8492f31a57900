#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# The house rules that a compiler does not check, on the daemon's own
# sources (mux/) and the library's (backend/, whose exported API is
# muxbe_*): every function is prefixed by its file's name; mux/mux.h
# has one section per file that implements it, each declaring only that
# file's functions; no module calls into one that calls back into it (the
# layers form no cycle); no global function is defined that nothing
# else calls; nothing generated is committed; no C file over 1,500 lines,
# no function of the daemon's over 100; no include cycle; one include
# root; the units below the daemon include no mux.h; the option table is
# the one list of options; README under 300 lines; commit messages follow
# the convention, their areas README's list.
#   scripts/check-house.sh [--list]   --list: print the module graph too
set -uo pipefail
cd "$(dirname "$0")/.."
T=$(mktemp -d /tmp/rdmacm-mux-house.XXXXXX)
trap 'rm -rf "$T"' EXIT
PASS=0 FAIL=0
ok() { echo "ok: $*"; PASS=$((PASS + 1)); }
bad() { echo "FAIL: $*"; FAIL=$((FAIL + 1)); }

# -O0, so that no static function is inlined out of sight.
CFLAGS="-std=c11 -D_GNU_SOURCE -I. -pthread -O0 $(pkg-config --cflags libevent jansson)"
for f in mux/*.c mux/ctl/*.c; do
	cc $CFLAGS -c -o "$T/$(basename "${f%.c}").o" "$f" || bad "compile $f"
done

# 1. Every function the file defines (not those that headers' inlines and
# tree.h's generators make) prefixed by its file; main() aside.
for o in "$T"/*.o; do
	m=$(basename "${o%.o}")
	wrong=$(nm --defined-only "$o" | awk '$2 ~ /^[tT]$/ {print $3}' |
		grep -v -e "^${m}_" -e "^${m}\$" -e '^main$' |
		while read -r fn; do
			grep -qE "^[A-Za-z_][^;]*\b${fn}\(" mux/$m.c mux/ctl/$m.c 2>/dev/null && echo "$fn"
		done || true)
	[ -z "$wrong" ] && ok "$m.c: every function is ${m}_*" ||
		bad "$m.c: functions not prefixed ${m}_: $(echo $wrong)"
done

# 1b. The library (backend/) by the same rule: a file's functions are
# prefixed by its name, but for the API it exports (backend/muxbe.map),
# which is muxbe_* whichever file defines it.
for f in backend/*.c; do
	m=$(basename "${f%.c}")
	mkdir -p "$T/backend"
	cc $CFLAGS -c -o "$T/backend/$m.o" "$f" || { bad "compile $f"; continue; }
	wrong=$(nm --defined-only "$T/backend/$m.o" | awk '$2 ~ /^[tT]$/ {print $3}' |
		grep -v -e "^${m}_" |
		while read -r fn; do
			grep -qE "^[[:space:]]+${fn};" backend/muxbe.map && continue
			grep -qE "^[A-Za-z_][^;]*\b${fn}\(" "$f" && echo "$fn"
		done || true)
	[ -z "$wrong" ] && ok "$f: every function is ${m}_* or exported" ||
		bad "$f: functions neither prefixed ${m}_ nor in muxbe.map: $(echo $wrong)"
done

# 2. mux.h (and the connection table's conn.h, conn_priv.h): each section
# names a file that exists, and declares only
# functions that file defines.
python3 - "$T" <<'PY' || FAIL=$((FAIL + 1))
import re, subprocess, sys, os
t = sys.argv[1]
bad = 0
# The daemon's header, and the connection table's public and private ones.
for header in ("mux/mux.h", "mux/conn.h", "mux/conn_priv.h"):
    text = open(header).read()
    parts = re.split(r"^/\* ---- (.*?) -*\s*\*/\s*$", text, flags=re.M)
    for title, body in zip(parts[1::2], parts[2::2]):
        m = re.match(r"([a-z_]+)\.c\b", title)
        if not m:
            print(f"FAIL: {header} section '{title}' does not name its file"); bad += 1; continue
        stem = m.group(1)
        obj = os.path.join(t, stem + ".o")
        if not os.path.exists(obj):
            print(f"FAIL: {header} section {stem}.c: no such file mux/{stem}.c"); bad += 1; continue
        defined = set(l.split()[-1] for l in subprocess.run(["nm", "--defined-only", obj],
                      capture_output=True, text=True).stdout.splitlines())
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        body = re.sub(r"^typedef[^;]*;", "", body, flags=re.M)
        protos = re.findall(r"^[a-z][^;{}()]*?\b\(?\*?\s*([a-z_][a-z0-9_]*)\s*\([^;{}]*\)\s*(?:__attribute__\(\(.*?\)\))?\s*;",
                            body, flags=re.M)
        for name in protos:
            if name not in defined:
                print(f"FAIL: {header} section {stem}.c declares {name}(), which mux/{stem}.c does not define"); bad += 1
print(f"{'ok' if bad == 0 else 'FAIL'}: mux.h, conn.h and conn_priv.h sections match their files")
sys.exit(1 if bad else 0)
PY
[ $? = 0 ] && PASS=$((PASS + 1))

# 3. No cycle between modules; 4. no global function nobody calls.
python3 - "$T" "${1:-}" <<'PY' || FAIL=$((FAIL + 1))
import subprocess, sys, os, glob
t, listing = sys.argv[1], sys.argv[2] == "--list"
defs, undefs = {}, {}
for o in sorted(glob.glob(os.path.join(t, "*.o"))):
    m = os.path.basename(o)[:-2]
    out = subprocess.run(["nm", o], capture_output=True, text=True).stdout.splitlines()
    for l in out:
        f = l.split()
        if len(f) == 3 and f[1] in "TDBR":
            defs[f[2]] = m
        elif len(f) == 2 and f[0] == "U":
            undefs.setdefault(m, set()).add(f[1])
g = {}
used = set()
for m, syms in undefs.items():
    for s in syms:
        d = defs.get(s)
        if d and d != m:
            g.setdefault(m, set()).add(d)
            used.add(s)
if listing:
    for m in sorted(g):
        print(f"  {m} -> {' '.join(sorted(g[m]))}")
# Tarjan's strongly connected components: any with two modules is a cycle.
index, low, stack, on, cycles, n = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def visit(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in g.get(v, ()):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: cycles.append(comp)
for v in list(defs.values()):
    if v not in index: visit(v)
bad = 0
for c in cycles:
    print(f"FAIL: call cycle between {', '.join(sorted(c))}"); bad += 1
if not cycles:
    print("ok: no call cycle between the daemon's modules")
# The two programs (main.o, muxctl.o) and what the tests link directly.
dead = sorted(s for s, m in defs.items()
              if s not in used and s != "main" and m not in ("main", "muxctl"))
# A unit's API that its own tests or fuzzer drive counts as used.
import re
tested = set()
for p in glob.glob("tests/**/*.c", recursive=True):
    tested |= set(re.findall(r"\b[a-z_][a-z0-9_]*\b", open(p, errors="replace").read()))
dead = [s for s in dead if s not in tested]
if dead:
    print(f"FAIL: defined and called from no other file (static, or gone): {' '.join(dead)}"); bad += 1
else:
    print("ok: every global function is called from another file")
sys.exit(1 if bad else 0)
PY
[ $? = 0 ] && PASS=$((PASS + 2))

# 5. No C file over 1,500 lines: one that long does more than one job.
long=$(for f in $(find mux backend common protocol tests -name '*.c'); do
	n=$(wc -l <"$f"); [ "$n" -gt 1500 ] && echo "$f ($n)"; done)
[ -z "$long" ] && ok "no C file over 1,500 lines" ||
	bad "C files over 1,500 lines: $(echo $long)"

# 5b. A function of the daemon's that runs over 100 lines does more
# than one thing: it reads as steps that name themselves.
long=$(python3 - <<'PY'
import re, glob
for f in sorted(glob.glob("mux/*.c")):
    name = None
    for i, l in enumerate(open(f, errors="replace").read().split("\n")):
        m = re.match(r"^[A-Za-z_][^;]*?\b([a-z_][a-z0-9_]*)\(", l)
        if m:
            cand = m.group(1)
        if l == "{":
            name, start = cand, i
        elif l == "}" and name:
            if i - start - 1 > 100:
                print(f"{f}:{name}() ({i - start - 1})")
            name = None
PY
)
[ -z "$long" ] && ok "no function of the daemon over 100 lines" ||
	bad "functions over 100 lines: $(echo $long)"

# 5c. No include cycle between the tree's headers (a header that
# reaches itself again through its includes).
cyc=$(python3 - <<'PY'
import re, glob, os
hs = [h for d in ("mux", "backend", "common", "protocol") for h in glob.glob(d + "/**/*.h", recursive=True)]
g = {}
for h in hs:
    incs = re.findall(r'^\s*#\s*include\s*"([^"]+)"', open(h).read(), re.M)
    g[h] = [i if os.path.exists(i) else os.path.join(os.path.dirname(h), i) for i in incs]
seen, stack = {}, []
def walk(v):
    seen[v] = 1; stack.append(v)
    for w in g.get(v, ()):
        if seen.get(w) == 1:
            print(" -> ".join(stack[stack.index(w):] + [w]))
        elif w not in seen:
            walk(w)
    stack.pop(); seen[v] = 2
for h in sorted(g):
    if h not in seen:
        walk(h)
PY
)
[ -z "$cyc" ] && ok "no include cycle between the headers" ||
	bad "include cycles: $cyc"

# 5d. One list of the daemon's options: the table in mux/config.c.  Its
# --help is printed from the table (no option written in
# config_print_usage), rdmacm-muxd(8) documents each, and its RELOADING
# names exactly those the table lets a SIGHUP change.
drift=$(python3 - <<'PY'
import re
c = open("mux/config.c").read()
a = c.index("static const struct config_option config_options[] = {")
tbl = c[a:c.index("\n};", a)]
entries = re.findall(r'\{\s*"([a-z-]+)",(.*?)\},', tbl, re.S)
names = [n for n, _ in entries]
reload = {n for n, body in entries if "CONFIG_RELOAD" in body}
u = c.index("void config_print_usage(FILE *f)")
usage = c[u:c.index("\n}\n", u)]
for lit in re.findall(r'"([^"]*)"', usage):
    if re.search(r'--[a-z]', lit) and "usage:" not in lit and "--check-config [FILE]" not in lit:
        print(f"config_print_usage writes an option itself: \"{lit}\"")
man = open("man/rdmacm-muxd.8").read().replace("\\-", "-")
for n in names:
    if "--" + n not in man:
        print(f"--{n} is not in rdmacm-muxd(8)")
r = man[man.index(".SH RELOADING"):man.index(".SH", man.index(".SH RELOADING") + 4)]
said = set(re.findall(r"^\.BR? ([a-z][a-z-]+[a-z])\b", r, re.M))
if said != reload:
    print(f"rdmacm-muxd(8) RELOADING names {sorted(said - reload)} the table does not reload, misses {sorted(reload - said)}")
PY
)
[ -z "$drift" ] && ok "the option table is the one list (--help, rdmacm-muxd(8), RELOADING)" ||
	bad "options drift: $drift"

# 5e. README stays what a newcomer reads: under 300 lines.
n=$(wc -l <README.md)
[ "$n" -lt 300 ] && ok "README.md is $n lines (under 300)" ||
	bad "README.md is $n lines: 300 or more"

# 6. One include root: a quoted include names its file from the top of
# the tree ("common/log.h"), never relative to the includer.  The
# installed headers are the exception: they find each other beside
# themselves once installed in include/rdmacm-mux/.
PUBLIC_HEADERS="backend/muxbe.h backend/muxbe_verbs.h protocol/rdmacm_mux_proto.h"
wrong=$(for f in $(find mux backend common protocol tests -name '*.[ch]'); do
	case " $PUBLIC_HEADERS " in *" $f "*) continue ;; esac
	sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
		while read -r inc; do [ -f "$inc" ] || echo "$f:$inc"; done
done)
[ -z "$wrong" ] && ok "every include is a path from the top of the tree" ||
	bad "includes not from the top of the tree: $(echo $wrong)"

# 7. The units below the daemon (the router, the connection table, the
# policy) know nothing of it: none includes mux/mux.h.
up=$(grep -l '#include "mux/mux.h"' mux/router.c mux/conn*.c mux/conn*.h \
	mux/router.h mux/policy.[ch] 2>/dev/null)
[ -z "$up" ] && ok "router, connection table and policy include no mux.h" ||
	bad "units below the daemon include mux/mux.h: $(echo $up)"

# 8. Commit messages since the convention began (README, For
# contributors): 'area: summary' of at most 72 characters, a blank line,
# a body wrapped at 72, and a Fixes: tag in the kernel's form.
CONVENTION_BASE=080b8cd45abdaf0ed3c508690ba7f2789dd84771
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$PWD" ] &&
	git cat-file -e "$CONVENTION_BASE^{commit}" 2>/dev/null; then
	wrong=$(git rev-list --no-merges "$CONVENTION_BASE..HEAD" | while read -r c; do
		git log -1 --format=%B "$c" | awk -v c="${c:0:12}" '
			NR == 1 && (length > 72 || $0 !~ /^[A-Za-z0-9_.\/-]+(, [A-Za-z0-9_.\/-]+)*: [^ ]/) {
				print c ": subject \"" $0 "\""; bad = 1 }
			NR == 2 && $0 != "" { print c ": no blank line after the subject"; bad = 1 }
			NR > 2 && length > 72 && $0 !~ /^(Fixes|Link): / && $0 !~ /^    / {
				print c ": body line " NR " is " length " characters"; bad = 1 }
			/^Fixes:/ && ($0 !~ /^Fixes: [0-9a-f]+ \(".*"\)$/ || length($2) != 12) {
				print c ": \"" $0 "\" is not Fixes: <12 hex> (\"subject\")"; bad = 1 }
			END { if (NR < 3 && !bad) print c ": no body" }'
		# A Fixes: tag names an ancestor by its own subject.
		git log -1 --format=%B "$c" | sed -n 's/^Fixes: \([0-9a-f]\{12\}\) ("\(.*\)")$/\1 \2/p' |
			while read -r sha subject; do
				[ "$(git log -1 --format=%s "$sha" 2>/dev/null)" = "$subject" ] &&
					git merge-base --is-ancestor "$sha" "$c" ||
					echo "${c:0:12}: Fixes: $sha is not an earlier commit named \"$subject\""
			done
	done)
	[ -z "$wrong" ] && ok "commit messages since ${CONVENTION_BASE:0:12} follow the convention" ||
		bad "commit messages: $wrong"
fi

# 8b. Each commit's area is one of README's list (For contributors):
# a folder, a part of the tests, or a module (a C file's name without
# .c under mux/, backend/, common/, protocol/; muxctl, vm, rdmacm).  Checked
# since the list was written.
AREAS_BASE=532987ba0102c89039fecd57384372c056c6ded9
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$PWD" ] &&
	git cat-file -e "$AREAS_BASE^{commit}" 2>/dev/null; then
	areas=" mux backend common protocol tests scripts man debian build docs ci unit integration fuzz lab conformance bench soak install muxctl vm rdmacm "
	for f in mux/*.c backend/*.c backend/vm/*.c backend/rdmacm/*.c common/*.c protocol/*.c; do
		m=$(basename "${f%.c}"); areas="$areas$m "
	done
	grep -q '`unit`, `integration`, `fuzz`, `lab`' README.md ||
		bad "README.md no longer lists the commit areas this check knows"
	wrong=$(git rev-list --no-merges "$AREAS_BASE..HEAD" | while read -r c; do
		subj=$(git log -1 --format=%s "$c")
		for a in $(echo "${subj%%: *}" | tr ',' ' '); do
			case "$areas" in *" $a "*) ;; *) echo "${c:0:12} ($a)" ;; esac
		done
	done)
	[ -z "$wrong" ] && ok "commit areas since ${AREAS_BASE:0:12} are README's" ||
		bad "commit areas not in README's list: $(echo $wrong)"
fi

# 9. Nothing generated is committed.
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$PWD" ]; then
	gen=$(git ls-files | grep -E '^build|(\.o|\.a|\.so(\.[0-9]+)*|\.d)$' || true)
	elf=$(git ls-files -z | xargs -0 file --mime-type | grep -E 'application/x-(executable|sharedlib|object|pie-executable)' || true)
	[ -z "$gen$elf" ] && ok "nothing generated is committed" ||
		bad "generated files committed: $gen $elf"
fi
echo "house: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
