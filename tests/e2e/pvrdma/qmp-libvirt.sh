#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# qmp-libvirt.sh PORT LOG: what libvirt does for a pvrdma guest, on QEMU's
# QMP socket at 127.0.0.1:PORT.  QEMU emits RDMA_GID_STATUS_CHANGED for
# each GID the guest adds or removes (its link-local IPv6 and its
# IPv4-mapped address); the host must then have that address on the
# netdev, or the host device has no such GID and QEMU's data QPs cannot
# send (it loops on "Failed to get bk sgid_idx").  The event's
# subnet-prefix and interface-id are the GID's two halves read as
# little-endian 64-bit numbers.  Every event and action goes to LOG.
set -u
PORT=$1 LOG=$2
for i in $(seq 300); do
	{ exec 8<>"/dev/tcp/127.0.0.1/$PORT"; } 2>/dev/null && break
	sleep 0.1
done
read -r greeting <&8 || exit 1
echo "greeting $greeting" >>"$LOG"
echo '{"execute":"qmp_capabilities"}' >&8

# A little-endian u64 (decimal, possibly above 2^63) as 8 bytes of hex in
# memory order.
le_bytes() {
	local hex i out=""
	hex=$(printf '%016x' "$(($1))")
	for i in 14 12 10 8 6 4 2 0; do out+=${hex:$i:2}; done
	echo "$out"
}

while read -r line <&8; do
	echo "$line" >>"$LOG"
	case "$line" in *RDMA_GID_STATUS_CHANGED*) ;; *) continue ;; esac
	prefix=$(echo "$line" | sed -n 's/.*"subnet-prefix": *\([0-9]*\).*/\1/p')
	iid=$(echo "$line" | sed -n 's/.*"interface-id": *\([0-9]*\).*/\1/p')
	netdev=$(echo "$line" | sed -n 's/.*"netdev": *"\([^"]*\)".*/\1/p')
	case "$line" in *'"gid-status": true'*) op=add ;; *) op=del ;; esac
	gid=$(le_bytes "$prefix")$(le_bytes "$iid")
	if [ "${gid:0:24}" = 00000000000000000000ffff ]; then
		addr=$(printf '%d.%d.%d.%d/24' 0x${gid:24:2} 0x${gid:26:2} 0x${gid:28:2} 0x${gid:30:2})
		cmd=(ip -4 addr "$op" "$addr" dev "$netdev")
	else
		addr=$(echo "$gid" | sed 's/..../&:/g; s/:$//')/64
		cmd=(ip -6 addr "$op" "$addr" dev "$netdev")
		[ "$op" = add ] && cmd+=(nodad)
	fi
	"${cmd[@]}" >>"$LOG" 2>&1
	echo "libvirt: ${cmd[*]} -> $?" >>"$LOG"
done
