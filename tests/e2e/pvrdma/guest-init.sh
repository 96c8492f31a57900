#!/bin/busybox sh
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# /init of a real guest behind QEMU's pvrdma (Debian's kernel, vmw_pvrdma,
# busybox, stock rdma_client and rdma_server).  Kernel command line:
#   g.ip=A.B.C.D     address for eth0 (the vmxnet3 function of the pvrdma slot)
#   g.peer=A.B.C.D   the remote host, g.peermac=MAC its Ethernet address: the
#                    guest's NIC has no path to it (RDMA goes through the
#                    host's device), so its neighbour entry is static
#   g.mode=client|server|both|hold   rdma_client to the peer, rdma_server
#                    for it, or the first then the second; hold: first
#                    rdma_hold (one connection to the peer's port 7472 held
#                    across two daemon restarts: tests/e2e/rdma_hold.c),
#                    then both
#                    cmd: run the command lines that arrive on the
#                    second serial port (ttyS1) until "quit": "run CMD"
#                    starts CMD in the background, its output on ttyS1
#                    (the conformance run's cm_app)
#   g.tmo=SEC        timeout of each tool (default 60)
# Milestones on the console start with "GUEST t=<uptime>"; the last line
# is "GUEST done client=RC server=RC".
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
t() { echo "GUEST t=$(cut -d' ' -f1 /proc/uptime) $*"; }
g_ip=10.77.0.11 g_peer=10.77.0.2 g_peermac=52:54:00:77:00:02 g_mode=client g_tmo=60
for w in $(cat /proc/cmdline); do
	case "$w" in g.*=*) k=${w%%=*}; eval "g_${k#g.}=\${w#*=}" ;; esac
done
t init
while read -r m; do insmod "/modules/$m" || echo "GUEST insmod $m failed"; done </modules/order
t modules
# iproute2's ip: busybox's has no "neigh replace ... nud permanent".
printf 'link set lo up\nlink set eth0 up\naddr add %s/24 dev eth0\nneigh replace %s lladdr %s dev eth0 nud permanent\n' \
	"$g_ip" "$g_peer" "$g_peermac" | /usr/sbin/ip -batch -
want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' $(echo "$g_ip" | tr . ' '))
for i in $(seq 100); do
	grep -qx "$want" /sys/class/infiniband/vmw_pvrdma0/ports/1/gids/1 2>/dev/null && break
	sleep 0.2
done
t net-ready
crc=- src=- hrc=-
case "$g_mode" in cmd)
	stty -F /dev/ttyS1 raw -echo
	t cmd-ready
	while read -r line; do
		case "$line" in
		run\ *) (eval "timeout $g_tmo ${line#run }") >/dev/ttyS1 2>&1 & ;;
		quit) break ;;
		esac
	done </dev/ttyS1
	t cmd-end ;;
esac
case "$g_mode" in hold)
	# A heartbeat: a guest that stops saying it has stopped running.
	( while sleep 5; do t tick; done ) &
	t hold-start
	timeout "$g_tmo" rdma_hold -s "$g_peer" -p 7472 -n 2 2>&1; hrc=$?
	t hold-end rc=$hrc
	kill %1 2>/dev/null ;;
esac
case "$g_mode" in client|both|hold)
	t client-start
	timeout "$g_tmo" rdma_client -s "$g_peer" 2>&1; crc=$?
	t client-end rc=$crc ;;
esac
case "$g_mode" in server|both|hold)
	t server-start
	timeout "$g_tmo" rdma_server 2>&1; src=$?
	t server-end rc=$src ;;
esac
echo "GUEST done client=$crc server=$src hold=$hrc"
poweroff -f
