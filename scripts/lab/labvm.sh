#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# labvm.sh: run a script as root inside throwaway QEMU VMs that boot
# Debian's own kernel with soft-RoCE (rdma_rxe) on eth0, one VM or two on a
# shared virtual Ethernet.  The host's root filesystem is the VMs' (read-
# only, with a tmpfs on top), so binaries built here run there unchanged.
#
#   labvm.sh [options] SCRIPT_A [SCRIPT_B]
#     SCRIPT_A runs on VM "a" (10.77.0.1); with SCRIPT_B, a second VM "b"
#     (10.77.0.2) runs it, and a's script starts once b is set up.
#   --modules "LIST"   modules to load (default: rdma_rxe ib_umad ib_uverbs)
#   --modules-b "LIST" the same for VM b (default: as --modules)
#   --share DIR        writable inside the VMs at the same path (repeatable)
#   --timeout SEC      for the whole run (default 300)
#   --mem MIB          memory of VM a (default 1024; b always has 1024)
#   --smp N            vCPUs of VM a (default 1)
#   --prepare          only fetch and cache the kernel and initramfs
# LAB_KEEP_SYNC=DIR: copy the shared directory there at the end (what the
# VMs left in it, such as the conformance run's records).
#
# Exit status: SCRIPT_A's (then SCRIPT_B's if a's was 0); 124 timeout;
# 125 the lab itself failed (the console tail is printed).
# Inside: LAB_ROLE (a|b), LAB_IP, LAB_PEER_IP, LAB_SYNC (shared dir).
# Needs root, qemu-system-x86, busybox-static, cpio, kmod, apt access for
# the kernel package (cached in $LAB_CACHE, default /var/cache/rdmacm-mux-lab).
set -euo pipefail

CACHE=${LAB_CACHE:-/var/cache/rdmacm-mux-lab}
MODULES="rdma_rxe ib_umad ib_uverbs"
MODULES_B=""
TIMEOUT=300
MEM_A=1024
SMP_A=1
SHARES=()
PREPARE=0
NET=10.77.0
BOOT_MODULES="virtio_pci virtio_net virtio_rng 9p 9pnet_virtio overlay"

die() { echo "labvm: $*" >&2; exit 125; }

while [ $# -gt 0 ]; do
	case "$1" in
	--modules) MODULES=$2; shift 2 ;;
	--modules-b) MODULES_B=$2; shift 2 ;;
	--share) SHARES+=("$(realpath -e "$2")"); shift 2 ;;
	--timeout) TIMEOUT=$2; shift 2 ;;
	--mem) MEM_A=$2; shift 2 ;;
	--smp) SMP_A=$2; shift 2 ;;
	--prepare) PREPARE=1; shift ;;
	-*) die "unknown option $1" ;;
	*) break ;;
	esac
done
[ -n "$MODULES_B" ] || MODULES_B=$MODULES
[ "$(id -u)" = 0 ] || die "must run as root"
[ "$PREPARE" = 1 ] || { [ $# -ge 1 ] && [ $# -le 2 ]; } ||
	die "usage: labvm.sh [options] SCRIPT_A [SCRIPT_B] (options first)"
for t in qemu-system-x86_64 cpio depmod modprobe flock; do
	command -v $t >/dev/null || die "missing $t (run scripts/install-deps.sh)"
done
[ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 || die "need a static /bin/busybox (busybox-static)"

# ---- kernel and initramfs, cached ------------------------------------------
kernel_abi() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: linux-image-\(.*-amd64\)$/\1/p' | head -n 1
}

# The bzImage's payload, decompressed, is an ELF vmlinux QEMU boots
# through PVH: it skips the slow in-guest decompression under TCG.
extract_vmlinux() {
	local off
	off=$(LC_ALL=C grep -obUaP '\xfd\x37\x7a\x58\x5a\x00' "$1" | head -n 1 | cut -d: -f1 || true)
	[ -n "$off" ] || return 1
	tail -c +$((off + 1)) "$1" | xz -dc --single-stream >"$2" 2>/dev/null || true
	[ "$(head -c 4 "$2" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]
}

init_script() {
	cat <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
while read -r m; do insmod "/modules/$m"; done </modules/order
o=trans=virtio,version=9p2000.L,msize=512000
mkdir -p /lower /upper /newroot
mount -t 9p -o "$o,ro,cache=loose" hostroot /lower || { echo "labvm: no host root"; poweroff -f; }
mount -t tmpfs tmpfs /upper && mkdir -p /upper/u /upper/w
mount -t overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w overlay /newroot
mount -t tmpfs tmpfs /newroot/run
mkdir -p /newroot/run/lab "/newroot/lib/modules/$(uname -r)"
mount -t 9p -o "$o,cache=none" labctl /newroot/run/lab
mount -t 9p -o "$o,ro,cache=loose" kmods "/newroot/lib/modules/$(uname -r)"
for d in dev proc sys; do mount --move /$d /newroot/$d; done
exec switch_root /newroot /bin/bash /run/lab/guest.sh
INIT
}

prepare_cache() {
	mkdir -p "$CACHE"
	exec 9>"$CACHE/.lock"
	flock 9
	KV=${LAB_KERNEL:-$(kernel_abi)}
	[ -n "$KV" ] || KV=$(ls "$CACHE" 2>/dev/null | sed -n 's/^kernel-//p' | sort -V | tail -n 1)
	[ -n "$KV" ] || die "cannot tell the kernel version (apt-get update first)"
	KDIR=$CACHE/kernel-$KV
	if [ ! -f "$KDIR/.complete" ]; then
		echo "labvm: fetching linux-image-$KV (once)" >&2
		local tmp
		tmp=$(mktemp -d "$CACHE/tmp.XXXXXX")
		(cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "linux-image-$KV" >/dev/null) ||
			die "apt-get download linux-image-$KV failed"
		dpkg -x "$tmp"/linux-image-*.deb "$tmp/root"
		rm -f "$tmp"/linux-image-*.deb
		depmod -b "$tmp/root" "$KV"
		extract_vmlinux "$tmp/root/boot/vmlinuz-$KV" "$tmp/vmlinux" || rm -f "$tmp/vmlinux"
		chmod 755 "$tmp"
		rm -rf "$KDIR"
		mv "$tmp" "$KDIR"
		touch "$KDIR/.complete"
	fi
	local hash ir m
	hash=$({ init_script; echo "$BOOT_MODULES"; sha256sum /bin/busybox; } | sha256sum | cut -c1-12)
	INITRD=$KDIR/initramfs-$hash.cpio.gz
	if [ ! -f "$INITRD" ]; then
		ir=$(mktemp -d "$CACHE/ir.XXXXXX")
		mkdir -p "$ir"/{bin,dev,proc,sys,modules}
		cp /bin/busybox "$ir/bin/"
		init_script >"$ir/init"
		chmod 755 "$ir/init"
		for m in $BOOT_MODULES; do
			modprobe -d "$KDIR/root" -S "$KV" --show-depends "$m"
		done | awk '$1 == "insmod" && !seen[$2]++ {print $2}' | while read -r m; do
			cp "$m" "$ir/modules/"
			basename "$m" >>"$ir/modules/order"
		done
		(cd "$ir" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) >"$INITRD.tmp"
		mv "$INITRD.tmp" "$INITRD"
		rm -rf "$ir"
	fi
	KERNEL=$KDIR/root/boot/vmlinuz-$KV
	[ -f "$KDIR/vmlinux" ] && KERNEL=$KDIR/vmlinux
	KMODS=$KDIR/root/lib/modules/$KV
	flock -u 9
}

prepare_cache
if [ "$PREPARE" = 1 ]; then echo "labvm: kernel $KV ready in $KDIR"; exit 0; fi

# ---- one run ---------------------------------------------------------------
RUN=$(mktemp -d /tmp/labvm.XXXXXX)
CTL=$RUN/ctl
mkdir -p "$CTL/sync" "$CTL/a" "$CTL/b"
QEMU_PIDS=()
cleanup() {
	local p
	for p in "${QEMU_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${QEMU_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	[ -z "${LAB_KEEP_SYNC:-}" ] || cp -r "$CTL/sync/." "$LAB_KEEP_SYNC/"
	rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

printf '%s\n' "${SHARES[@]+"${SHARES[@]}"}" >"$CTL/shares"
cat >"$CTL/guest.sh" <<'GUEST'
#!/bin/bash
# PID 1 in the VM.  Everything sits in main() so that bash has read the
# whole file before the VM powers off under it.
main() {
	export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
	local role i=0 p rc
	role=$(sed -n 's/.*lab\.role=\([ab]\).*/\1/p' /proc/cmdline)
	. "/run/lab/$role/env"
	{
		mkdir -p /dev/pts /dev/shm
		mount -t devpts devpts /dev/pts
		mount -t tmpfs -o mode=1777 tmpfs /dev/shm
		while IFS= read -r p; do
			[ -n "$p" ] || continue
			mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none "share$i" "$p"
			i=$((i + 1))
		done </run/lab/shares
		hostname "lab-$role"
		ip link set lo up
		ip link set eth0 up
		ip addr add "$LAB_IP/24" dev eth0
		[ -z "$LAB_MODULES" ] || modprobe -a $LAB_MODULES
		if [ -d /sys/module/rdma_rxe ]; then
			rdma link add rxe0 type rxe netdev eth0
			for i in $(seq 100); do
				grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null && break
				sleep 0.1
			done
		fi
	} >"/run/lab/$role/setup.log" 2>&1
	touch "/run/lab/$role/ready"
	if [ "$role" = a ] && [ "$LAB_TWO" = 1 ]; then
		for i in $(seq 1200); do [ -e /run/lab/b/ready ] && break; sleep 0.1; done
	fi
	cd "$LAB_CWD" 2>/dev/null || cd /
	env -i PATH="$PATH" HOME=/root LANG=C.UTF-8 LAB_ROLE="$role" LAB_IP="$LAB_IP" \
		LAB_PEER_IP="$LAB_PEER_IP" LAB_SYNC=/run/lab/sync \
		/bin/bash "/run/lab/$role/script" </dev/null >"/run/lab/$role/out" 2>&1
	rc=$?
	echo "$rc" >"/run/lab/$role/rc.tmp" && mv "/run/lab/$role/rc.tmp" "/run/lab/$role/rc"
	sync
	/bin/busybox poweroff -f
}
main
exit
GUEST

TWO=0
[ $# -ge 2 ] && TWO=1
setup_role() { # role ip peer modules script
	printf 'LAB_IP=%q\nLAB_PEER_IP=%q\nLAB_MODULES=%q\nLAB_TWO=%q\nLAB_CWD=%q\n' \
		"$2" "$3" "$4" "$TWO" "$PWD" >"$CTL/$1/env"
	printf '%s\n' "$5" >"$CTL/$1/script"
	: >"$CTL/$1/out"
}
setup_role a "$NET.1" "$NET.2" "$MODULES" "$1"
[ "$TWO" = 0 ] || setup_role b "$NET.2" "$NET.1" "$MODULES_B" "$2"

boot() { # role mac netdev
	local mem=1024 smp=1
	[ "$1" = a ] && mem=$MEM_A smp=$SMP_A
	local args=(qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m "$mem" -smp "$smp"
		-machine q35 -nodefaults -no-user-config -display none -no-reboot
		-kernel "$KERNEL" -initrd "$INITRD"
		-append "console=ttyS0 panic=-1 quiet lab.role=$1"
		-serial "file:$RUN/$1.console" -device virtio-rng-pci
		-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
		-virtfs "local,path=$KMODS,mount_tag=kmods,security_model=none,readonly=on"
		-virtfs "local,path=$CTL,mount_tag=labctl,security_model=none"
		-netdev "$3" -device "virtio-net-pci,netdev=n0,mac=$2")
	local i=0 s
	for s in "${SHARES[@]+"${SHARES[@]}"}"; do
		args+=(-virtfs "local,path=$s,mount_tag=share$i,security_model=none,multidevs=remap")
		i=$((i + 1))
	done
	"${args[@]}" >"$RUN/$1.qemu.log" 2>&1 &
	QEMU_PIDS+=($!)
}

if [ "$TWO" = 1 ]; then
	boot a 52:54:00:77:00:01 "dgram,id=n0,local.type=unix,local.path=$RUN/a.sock,remote.type=unix,remote.path=$RUN/b.sock"
	boot b 52:54:00:77:00:02 "dgram,id=n0,local.type=unix,local.path=$RUN/b.sock,remote.type=unix,remote.path=$RUN/a.sock"
else
	boot a 52:54:00:77:00:01 "hubport,id=n0,hubid=0"
fi

deadline=$(($(date +%s) + TIMEOUT))
status=
while kill -0 "${QEMU_PIDS[0]}" 2>/dev/null; do
	[ "$(date +%s)" -lt "$deadline" ] || { status=124; break; }
	sleep 0.1
done
if [ "$TWO" = 1 ] && [ -z "$status" ]; then
	# b gets a few seconds to finish after a is done.
	for i in $(seq 100); do kill -0 "${QEMU_PIDS[1]}" 2>/dev/null || break; sleep 0.1; done
fi
for p in "${QEMU_PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
QEMU_PIDS=()

for r in a b; do
	[ -s "$CTL/$r/out" ] || continue
	if [ "$TWO" = 1 ]; then sed "s/^/[$r] /" "$CTL/$r/out"; else cat "$CTL/$r/out"; fi
done
if [ -z "$status" ]; then
	if [ -f "$CTL/a/rc" ]; then
		status=$(cat "$CTL/a/rc")
		if [ "$TWO" = 1 ] && [ "$status" = 0 ]; then
			status=$(cat "$CTL/b/rc" 2>/dev/null || echo 125)
		fi
	else
		echo "labvm: VM a gave no exit status; setup log and console tail:" >&2
		cat "$CTL/a/setup.log" >&2 2>/dev/null || true
		tail -n 30 "$RUN/a.console" >&2 || true
		status=125
	fi
else
	echo "labvm: timed out after ${TIMEOUT}s" >&2
fi
exit "$status"
