#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# `make install` into a DESTDIR, then build and run a program against the
# installed library through pkg-config, static and shared.
set -uo pipefail
cd "$(dirname "$0")/../.."
D=$(mktemp -d /tmp/rdmacm-mux-install.XXXXXX)
trap 'rm -rf "$D"' EXIT
PASS=0 FAIL=0
ok() { echo "ok: $*"; PASS=$((PASS + 1)); }
bad() { echo "FAIL: $*"; FAIL=$((FAIL + 1)); }

make -s install DESTDIR="$D" PREFIX=/usr >/dev/null && ok "make install" || bad "make install"
for f in usr/sbin/rdmacm-muxd usr/bin/rdmacm-muxctl usr/bin/rdmacm-mux-vm \
	 usr/lib/libmuxbe.a usr/lib/libmuxbe.so.0 usr/lib/libmuxbe.so \
	 usr/include/rdmacm-mux/muxbe.h usr/lib/pkgconfig/muxbe.pc \
	 usr/share/man/man8/rdmacm-muxd.8 usr/share/man/man8/rdmacm-muxctl.8 \
	 usr/share/man/man5/rdmacm-muxd.conf.5 usr/share/man/man5/rdmacm-mux-policy.5 \
	 usr/share/man/man7/rdmacm-mux-protocol.7 usr/share/man/man7/rdmacm-mux-cm.7 \
	 usr/share/man/man3/muxbe.3 \
	 usr/share/man/man3/muxbe_verbs.3 usr/include/rdmacm-mux/muxbe_verbs.h \
	 usr/lib/librdmacm-mux.so.1 usr/bin/rdmacm-mux-run usr/share/man/man1/rdmacm-mux-run.1; do
	[ -e "$D/$f" ] && ok "$f installed" || bad "$f missing"
done
export PKG_CONFIG_PATH="$D/usr/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$D"
CFL=$(pkg-config --cflags muxbe) LIBS=$(pkg-config --libs muxbe)
if cc -std=c11 -Wall -Werror $CFL -o "$D/consumer" tests/install/consumer.c $LIBS &&
   LD_LIBRARY_PATH="$D/usr/lib" "$D/consumer"; then
	ok "shared consumer via pkg-config"
else
	bad "shared consumer via pkg-config"
fi
if cc -std=c11 -Wall -Werror $CFL -o "$D/consumer-static" tests/install/consumer.c \
	"$D/usr/lib/libmuxbe.a" $(pkg-config --libs --static muxbe | sed 's/-lmuxbe//') &&
   "$D/consumer-static"; then
	ok "static consumer"
else
	bad "static consumer"
fi
# Only the muxbe_ API is exported (version script).
EXTRA=$(nm -D --defined-only "$D/usr/lib/libmuxbe.so.0" | awk '$2 ~ /[TDB]/ {print $3}' | grep -v '^muxbe_' || true)
[ -z "$EXTRA" ] && ok "only muxbe_* exported" || bad "exports beyond muxbe_*: $EXTRA"
# librdmacm-mux: librdmacm's rdma_* names, each under librdmacm's own
# version node (what a binary linked with librdmacm.so.1 asks for).
EXTRA=$(objdump -T "$D/usr/lib/librdmacm-mux.so.1" | awk '$2 ~ /g/ && $4 != "*UND*" && $4 != "*ABS*" {print $NF}' |
	grep -v '^rdma_' || true)
NOVER=$(objdump -T "$D/usr/lib/librdmacm-mux.so.1" | awk '$4 != "*UND*" && $NF ~ /^rdma_/ && $(NF-1) !~ /RDMACM_1\.[0-3]/' || true)
[ -z "$EXTRA$NOVER" ] && ok "librdmacm-mux exports rdma_* at librdmacm's versions" ||
	bad "librdmacm-mux exports: $EXTRA $NOVER"
# The wrapper preloads the installed library for the command.
RDMACM_MUX_LIB="$D/usr/lib/librdmacm-mux.so.1" "$D/usr/bin/rdmacm-mux-run" \
	sh -c 'case "$LD_PRELOAD" in *librdmacm-mux.so.1*) exit 0;; esac; exit 1' &&
	ok "rdmacm-mux-run preloads the library" || bad "rdmacm-mux-run: LD_PRELOAD not set"
"$D/usr/bin/rdmacm-mux-run" >/dev/null 2>&1; [ $? = 1 ] && ok "rdmacm-mux-run with no command: 1" ||
	bad "rdmacm-mux-run with no command"
grep -q "^lib=.*/usr/lib/librdmacm-mux.so.1" "$D/usr/bin/rdmacm-mux-run" &&
	ok "rdmacm-mux-run names the installed library" || bad "rdmacm-mux-run library path"
"$D/usr/sbin/rdmacm-muxd" --version | grep -q "rdmacm-muxd 0.1.0" && ok "daemon runs" || bad "daemon --version"
"$D/usr/sbin/rdmacm-muxd" --config none --check-config \
	"$D/usr/share/doc/rdmacm-mux/examples/rdmacm-muxd.conf.example" \
	--policy "$D/usr/share/doc/rdmacm-mux/examples/policy.json.example" |
	grep -q ": ok$" && ok "example configuration and policy are valid" ||
	bad "example configuration or policy"
# A number out of its range is a usage error (2) that names the option,
# never a value nobody gave (atoi's 0, strtoull's 2^64 - 1).
usage_error() { # WORDS-EXPECTED PROGRAM ARGS...
	local want=$1 out rc
	shift
	out=$("$@" 2>&1)
	rc=$?
	[ "$rc" = 2 ] && [[ "$out" == *"$want"* ]]
}
for args in "--listen 99999" "--listen 7471 --retries 16" \
	    "--listen 7471 --comm-id -1" "--listen 7471 --hold-ms 5s"; do
	# shellcheck disable=SC2086 # the words are the arguments
	usage_error "is not a number from" "$D/usr/bin/rdmacm-mux-vm" \
		--gid 10.0.0.1 $args && ok "rdmacm-mux-vm $args: usage error" ||
		bad "rdmacm-mux-vm $args: not a usage error"
done
usage_error "is a number from 1 to 3600000" "$D/usr/bin/rdmacm-muxctl" -t 0 &&
	ok "rdmacm-muxctl -t 0: usage error" || bad "rdmacm-muxctl -t 0: not a usage error"
rm -f "$D/consumer" "$D/consumer-static"

# make uninstall takes away everything make install put there.
make -s uninstall DESTDIR="$D" PREFIX=/usr >/dev/null && ok "make uninstall" || bad "make uninstall"
LEFT=$(find "$D" -mindepth 1 ! -type d)
[ -z "$LEFT" ] && ok "nothing left after uninstall" || bad "left after uninstall: $LEFT"

# make dist: exactly the tracked files, under rdmacm-mux-VERSION/.
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$PWD" ]; then
	make -s dist B="$D/dist" >/dev/null && ok "make dist" || bad "make dist"
	diff <(tar -tzf "$D"/dist/rdmacm-mux-*.tar.gz | sed 's|^[^/]*/||' | grep -v '/$' | sort) \
	     <(git ls-files | sort) >/dev/null &&
		ok "tarball holds exactly the tracked files" || bad "tarball contents differ from git ls-files"
else
	echo "(not a git checkout: make dist not checked)"
fi
echo "install: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
