#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# pvrdma-guest.sh: what a real guest behind QEMU's pvrdma needs, built once
# from Debian packages and cached next to the lab's kernel:
#   - vmw_pvrdma.ko: Debian's kernels do not build it
#     (CONFIG_INFINIBAND_VMWARE_PVRDMA is not set), so it is compiled out
#     of tree from linux-source-X.Y of the lab kernel's version against its
#     linux-headers (downloaded and unpacked, not installed; ~20 s);
#   - an initramfs for the guest: static busybox, vmxnet3, the RDMA core
#     and CM modules and vmw_pvrdma (signatures stripped: no RSA check per
#     insmod under emulation), stock rdma_client and rdma_server, the
#     lab's rdma_hold and cm_app (librdmacm), with their libraries and
#     the vmw_pvrdma verbs provider, and tests/e2e/pvrdma/
#     guest-init.sh as /init (uncompressed: gunzip under nested emulation
#     costs seconds).
# Prints the directory holding vmlinux, vmw_pvrdma.ko and initramfs.cpio.
#   scripts/lab/pvrdma-guest.sh     (needs root, apt access the first time)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
CACHE=${LAB_CACHE:-/var/cache/rdmacm-mux-lab}

die() { echo "pvrdma-guest: $*" >&2; exit 1; }
scripts/lab/labvm.sh --prepare >/dev/null
KV=$(ls -d "$CACHE"/kernel-*/.complete 2>/dev/null | sed 's|.*/kernel-\(.*\)/.complete|\1|' |
	sort -V | tail -n 1)
[ -n "$KV" ] || die "no lab kernel in $CACHE"
KDIR=$CACHE/kernel-$KV
OUT=$CACHE/pvrdma-$KV
KSER=${KV%%.*}.$(echo "$KV" | cut -d. -f2)             # 6.1
KSER=${KSER%%-*}
mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9

# ---- the driver --------------------------------------------------------------
if [ ! -f "$OUT/vmw_pvrdma.ko" ]; then
	# Any revision of this ABI will do: Debian keeps an ABI's symbols.
	VER=$(apt-cache show "linux-headers-$KV" | awk '/^Version:/ {print $2; exit}')
	[ -n "$VER" ] || die "cannot tell the version of linux-image-$KV"
	W=$(mktemp -d "$OUT/build.XXXXXX")
	(cd "$W" && apt-get download -q -o APT::Sandbox::User=root \
		"linux-headers-$KV=$VER" "linux-headers-${KV%-*}-common=$VER" \
		"linux-kbuild-$KSER=$VER" "linux-source-$KSER=$VER" >/dev/null) ||
		die "apt-get download of the kernel headers and source $VER failed"
	mkdir -p "$W/root" "$W/src" "$W/mod"
	for d in "$W"/linux-headers-*.deb "$W"/linux-kbuild-*.deb; do dpkg -x "$d" "$W/root"; done
	KH=$W/root/usr/src/linux-headers-$KV
	# The headers' Makefile includes the common part by absolute path.
	sed -i "s|^include /usr/src/|include $W/root/usr/src/|" "$KH/Makefile"
	dpkg-deb --fsys-tarfile "$W"/linux-source-"$KSER"_*.deb |
		tar -xO "./usr/src/linux-source-$KSER.tar.xz" | xz -dc |
		tar -x -C "$W/src" --wildcards "linux-source-$KSER/drivers/infiniband/hw/vmw_pvrdma/*"
	cp "$W/src/linux-source-$KSER/drivers/infiniband/hw/vmw_pvrdma/"* "$W/mod/"
	make -C "$KH" M="$W/mod" CONFIG_INFINIBAND_VMWARE_PVRDMA=m modules >"$W/build.log" 2>&1 ||
		{ tail -n 30 "$W/build.log" >&2; die "vmw_pvrdma did not build"; }
	strip --strip-debug "$W/mod/vmw_pvrdma.ko"
	mv "$W/mod/vmw_pvrdma.ko" "$OUT/vmw_pvrdma.ko"
	rm -rf "$W"
	echo "pvrdma-guest: built vmw_pvrdma.ko for $KV" >&2
fi

# ---- the guest's initramfs ----------------------------------------------------
BINS="rdma_client rdma_server ibv_devinfo"
SBINS="ip rdma"
# The lab's own, built by make tests (librdmacm, as rdma_client is).
OWN_BINS="${B:-build}/tests/rdma_hold ${B:-build}/tests/cm_app"
for b in $OWN_BINS; do [ -x "$b" ] || die "$b is not built (make tests)"; done
PROV=/usr/lib/x86_64-linux-gnu/libibverbs/libvmw_pvrdma-rdmav34.so
hash=$({ cat tests/e2e/pvrdma/guest-init.sh; sha256sum /bin/busybox "$OUT/vmw_pvrdma.ko";
	 for b in $BINS $SBINS; do sha256sum "$(command -v "$b")"; done;
	 sha256sum $OWN_BINS; } | sha256sum | cut -c1-12)
IR_OUT=$OUT/initramfs-$hash.cpio
if [ ! -f "$IR_OUT" ]; then
	IR=$(mktemp -d "$OUT/ir.XXXXXX")
	mkdir -p "$IR"/{bin,dev,proc,sys,run,tmp,modules,etc/libibverbs.d,usr/bin,usr/sbin} \
		"$IR"/usr/lib/x86_64-linux-gnu/libibverbs "$IR/usr/lib64"
	ln -s usr/lib "$IR/lib"
	ln -s usr/lib64 "$IR/lib64"
	cp /bin/busybox "$IR/bin/"
	cp tests/e2e/pvrdma/guest-init.sh "$IR/init"
	chmod 755 "$IR/init"
	{
		for m in vmxnet3 ib_uverbs; do
			modprobe -d "$KDIR/root" -S "$KV" --show-depends "$m"
		done | awk '$1 == "insmod" {print $2}'
		echo "$OUT/vmw_pvrdma.ko"
		modprobe -d "$KDIR/root" -S "$KV" --show-depends rdma_ucm | awk '$1 == "insmod" {print $2}'
	} | awk '!seen[$0]++' | while read -r m; do
		cp "$m" "$IR/modules/"
		basename "$m" >>"$IR/modules/order"
	done
	# Drop appended signatures: ELF | signature | 12-byte descriptor
	# (its last 4 bytes the signature's length, big endian) | magic.
	for f in "$IR"/modules/*.ko; do
		[ "$(tail -c 28 "$f" | tr -d '\0')" = "~Module signature appended~" ] || continue
		sl=$(tail -c 32 "$f" | head -c 4 | od -An -tu1 | awk '{print (($1*256+$2)*256+$3)*256+$4}')
		truncate -s $(( $(stat -c %s "$f") - 28 - 12 - sl )) "$f"
	done
	for b in $BINS; do cp "$(command -v "$b")" "$IR/usr/bin/"; done
	for b in $OWN_BINS; do cp "$b" "$IR/usr/bin/"; done
	for b in $SBINS; do cp "$(command -v "$b")" "$IR/usr/sbin/"; done
	cp -L "$PROV" "$IR$PROV"
	cp /etc/libibverbs.d/vmw_pvrdma.driver "$IR/etc/libibverbs.d/"
	for f in $(for b in $BINS $SBINS; do command -v "$b"; done) $OWN_BINS "$PROV"; do
		ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
	done | sort -u | while read -r l; do cp -L "$l" "$IR/usr/lib/x86_64-linux-gnu/"; done
	cp -L /lib64/ld-linux-x86-64.so.2 "$IR/usr/lib64/"
	(cd "$IR" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$IR_OUT.tmp"
	mv "$IR_OUT.tmp" "$IR_OUT"
	rm -rf "$IR"
fi
ln -sf "$(basename "$IR_OUT")" "$OUT/initramfs.cpio"
ln -sf "$KDIR/vmlinux" "$OUT/vmlinux"
echo "$OUT"
