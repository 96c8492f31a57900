#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Installs what rdmacm-mux needs to build and test, from Debian packages.
# Does nothing (and needs no network) when everything is already there.
set -euo pipefail

PKGS=(
	build-essential pkg-config
	libibumad-dev libibverbs-dev librdmacm-dev rdma-core ibverbs-providers
	libevent-dev libjansson-dev libcmocka-dev libbsd-dev libmnl-dev
	clang libclang-rt-14-dev valgrind
	# rdmacm-muxctl metrics is checked with Prometheus' own parser, the
	# systemd units with systemd-analyze
	python3-prometheus-client systemd
	# rdmacm-muxctl capture's files are read by stock tshark in the tests
	tshark
	# packages (make deb: debhelper, checked by lintian) and the style check
	debhelper dpkg-dev fakeroot lintian clang-format
	# the lab: Debian's kernel with soft-RoCE in QEMU, and stock peers
	qemu-system-x86 busybox-static cpio xz-utils zstd kmod iproute2
	ibverbs-utils rdmacm-utils perftest infiniband-diags tcpdump jq
)

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all ${#PKGS[@]} packages present"
	exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
