# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Helpers for lab scenarios; sourced inside the lab VMs (cwd: the repo).
B=${B:-build}
DAEMON_PID=
NO_KCM="rdma_rxe ib_umad ib_uverbs"
WITH_KCM="rdma_rxe ib_umad ib_uverbs rdma_ucm"

fail() { echo "FAIL: $*"; [ -f /tmp/d.log ] && sed 's/^/daemon: /' /tmp/d.log; exit 1; }
ok() { echo "ok: $*"; }

# wait_for CONDITION-COMMAND...: retry for up to 10 s.
wait_for() {
	local i
	for i in $(seq 100); do "$@" && return 0; sleep 0.1; done
	return 1
}

signal() { touch "$LAB_SYNC/$1"; }
await() { wait_for test -e "$LAB_SYNC/$1" || fail "peer never signalled $1"; }
# await_long SECONDS NAME: for a peer that works for a while first.
await_long() {
	local i
	for i in $(seq $(($1 * 10))); do [ -e "$LAB_SYNC/$2" ] && return 0; sleep 0.1; done
	fail "peer never signalled $2"
}

# The GID an address gets on rxe0 port 1 shows up in its table.
gid_present() {
	cat /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null | grep -qi "$1"
}

# The tail of an IPv4 address's GID: 10.77.0.12 -> ffff:0a4d:000c
ipv4_gid() { local IFS=.; set -- $1; printf 'ffff:%02x%02x:%02x%02x' "$1" "$2" "$3" "$4"; }

# Add an address to eth0 and wait until rxe0 has its GID.
add_ip() {
	ip addr add "$1/24" dev eth0 || fail "ip addr add $1"
	wait_for gid_present "$(ipv4_gid "$1")" || fail "no GID for $1"
}
add_ip6() { ip -6 addr add "$1/64" dev eth0 nodad || fail "ip addr add $1"; }

# A rdmacm-mux-vm run, logged to /tmp/NAME.log, moved its 10 messages each
# way and saw the disconnect.
vm_session_ok() {
	grep -q "$1: data: received 10, sent 10" "/tmp/$1.log" || fail "$1 data"
	grep -q "$1: disconnected" "/tmp/$1.log" || fail "$1 saw no disconnect"
}

# LAB_DAEMON_ARGS: more options for every daemon a scenario starts (as
# LAB_DAEMON_ARGS="--ud-sender rxe0:1" make check-conformance).
# A demo VM NAME (rdmacm-mux-vm with ARGS) run to its end, its log
# shown, its exit status and its session checked (vm_session_ok).
vm_run_checked() {
	local name=$1 rc=0
	shift
	"$B/rdmacm-mux-vm" --name "$name" "$@" >"/tmp/$name.log" 2>&1 || rc=$?
	vm_checked "$name" "$rc"
}
# The same for a VM started in the background (VM_PID) once it listens.
vm_start_listening() {
	local name=$1
	shift
	"$B/rdmacm-mux-vm" --name "$name" "$@" >"/tmp/$name.log" 2>&1 &
	VM_PID=$!
	wait_for grep -q listening "/tmp/$name.log" || fail "$name did not start"
}
vm_wait_checked() {
	local rc=0
	wait "$VM_PID" || rc=$?
	vm_checked "$1" "$rc"
}
vm_checked() {
	cat "/tmp/$1.log"
	[ "$2" = 0 ] || fail "$1 exit status $2"
	vm_session_ok "$1"
}

start_daemon() {
	# shellcheck disable=SC2086
	"$B/rdmacm-muxd" --port rxe0:1 -s /tmp/m.sock -S /tmp/s.sock "$@" $LAB_DAEMON_ARGS 2>/tmp/d.log &
	DAEMON_PID=$!
	wait_for test -S /tmp/s.sock || fail "daemon did not start"
	export RDMACM_MUX_SOCKET=/tmp/m.sock RDMACM_MUX_STATUS=/tmp/s.sock
	daemon_args_took
}

# An option given by LAB_DAEMON_ARGS that the daemon did not take up
# would have the scenario judge the daemon without it.
daemon_args_took() {
	case " ${LAB_DAEMON_ARGS:-} " in
	*" --ud-sender "*)
		grep -q "clients' MADs leave from [0-9]* UD QPs" /tmp/d.log ||
			{ cat /tmp/d.log; fail "LAB_DAEMON_ARGS: no UD sender"; }
		ok "daemon with $LAB_DAEMON_ARGS: its MADs leave from UD QPs" ;;
	esac
}

stop_daemon() {
	local rc=0
	kill -TERM "$DAEMON_PID"
	wait "$DAEMON_PID" || rc=$?
	[ "$rc" = 0 ] || fail "daemon exit status $rc"
	ok "daemon stopped cleanly"
}

status_json() { "$B/rdmacm-muxctl" -j; }
# How many host comm IDs a guest comm ID went out as (the daemon's -v log).
host_ids_for() {
	sed -n "s/.*REQ local comm id $1 sent as \(0x[0-9a-f]*\).*/\1/p" /tmp/d.log |
		sort -u | wc -l
}
# A value from the daemon's status: status_get '.counters.mads_in.REJ'
status_get() { "$B/rdmacm-muxctl" -j | jq -r "$1"; }
# A client's counter by name: client_counter vm2 mads_delivered
client_counter() { status_get ".clients[] | select(.name == \"$1\") | .counters.$2"; }

# The kernel rdma_cm has a listener on PORT (e.g. a stock ucmatose server).
kernel_listening() { rdma res show cm_id 2>/dev/null | grep -q "state LISTEN.*:$1 "; }
# The kernel rdma_cm has a connected ID.
cm_id_connected() { rdma res show cm_id 2>/dev/null | grep -q "state CONNECT "; }

# A stock ucmatose server on this host (kernel rdma_cm): start it, tell
# the peer once the kernel shows its listener, wait for it to finish and
# check it moved its data.  Extra arguments go to ucmatose.
ucmatose_server() {
	local rc=0 ucm
	timeout 90 stdbuf -oL ucmatose -b "$LAB_IP" "$@" >/tmp/ucm.log 2>&1 &
	ucm=$!
	wait_for kernel_listening 7471 || fail "ucmatose is not listening"
	signal "${UCM_SIGNAL:-server-up}"
	wait $ucm || rc=$?
	cat /tmp/ucm.log
	[ "$rc" = 0 ] || fail "ucmatose exit status $rc"
	grep -q "data transfers complete" /tmp/ucm.log || fail "ucmatose data"
}

# The pvrdma guest (scripts/lab/pvrdma-guest.sh builds it), for scenarios
# 20 and 23: what each shares, and stock QEMU started in the background
# (its pid in QEMU_PID, its console in /tmp/guest.console).
GUEST_IP=10.77.0.11
QMP_PORT=4444
guest_said() { grep -aq "$1" /tmp/guest.console 2>/dev/null; }
# pvrdma_guest_start MODE TIMEOUT [CHARDEV-OPTIONS]: guest-init's g.mode
# and g.tmo; the options go on the MAD chardev (",reconnect=1").  With
# GUEST_CMD_PORT set, the guest's second serial port (g.mode=cmd's
# command line) listens on that TCP port of 127.0.0.1.
pvrdma_guest_start() {
	local g
	g=$(ls -d /var/cache/rdmacm-mux-lab/pvrdma-*/ | tail -n 1)
	[ -f "$g/initramfs.cpio" ] || fail "no guest initramfs (scripts/lab/pvrdma-guest.sh)"
	qemu-system-x86_64 -name guest -accel tcg,tb-size=256 -cpu max -smp 1 -m 512 \
		-object memory-backend-ram,id=mb,size=512M,share=on \
		-machine q35,memory-backend=mb -nodefaults -no-user-config -display none \
		-no-reboot -kernel "$g/vmlinux" -initrd "$g/initramfs.cpio" \
		-append "console=ttyS0 panic=-1 quiet g.mode=$1 g.ip=$GUEST_IP g.peer=$LAB_PEER_IP g.tmo=$2" \
		-serial file:/tmp/guest.console \
		${GUEST_CMD_PORT:+-serial tcp:127.0.0.1:$GUEST_CMD_PORT,server=on,wait=off} -qmp "tcp:127.0.0.1:$QMP_PORT,server=on,wait=off" \
		-netdev hubport,id=n1,hubid=0 \
		-device vmxnet3,netdev=n1,mac=52:54:00:88:00:0b,addr=10.0,multifunction=on \
		-chardev "socket,path=/var/run/rdmacm-mux-rxe0-1,id=mads${3:-}" \
		-device pvrdma,addr=10.1,ibdev=rxe0,netdev=eth0,mad-chardev=mads \
		>/tmp/qemu.log 2>&1 &
	QEMU_PID=$!
}
# The new daemon (the QEMU socket's options as scenarios 23 and 24 start
# it) took QEMU back with the guest's GID.
qemu_client_back() {
	[ "$(status_get .counters.resumes)" = 1 ] &&
		status_get '.clients[] | select(.protocol == "qemu-rdmacm-mux") | .gids[].gid' |
			grep -qx "::ffff:$GUEST_IP"
}
restart_daemon() {
	# shellcheck disable=SC2086
	"$B/rdmacm-muxd" --port rxe0:1 -s /tmp/m.sock -S /tmp/s.sock --qemu-socket rxe0:1 \
		$LAB_DAEMON_ARGS 2>>/tmp/d.log &
	DAEMON_PID=$!
	wait_for "$B/rdmacm-muxctl" -t 200 status >/dev/null 2>&1 || fail "daemon did not start again"
	wait_for qemu_client_back || { status_json; fail "QEMU did not come back with its GID"; }
}
