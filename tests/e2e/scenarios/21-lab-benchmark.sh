# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Issue 10, item 4: the lab benchmark (make bench-lab runs it at full size,
# LAB_BENCH=full; check-lab runs it small so that it cannot rot, and
# asserts only that every connection completed).
#  - Connection setup rate between two lab hosts: host A's kernel rdma_cm
#    (cm_rate, librdmacm) against a cm_rate server on host B, then a VM on
#    host A through rdmacm-muxd (cm_rate_vm: libmuxbe and the guest CM)
#    and the very same cm_rate binary under rdmacm-mux-run (one binary,
#    two CMs) against the same server, in turn, three rounds (two when
#    small), and the medians of their rates and of each round's ratios.
#  - The relay benchmark (bench_relay) with the daemon on the umad port of
#    soft-RoCE: MADs between two VMs' GIDs loop back through the device.
LAB_TWO=1
MODULES_A=$WITH_KCM
MODULES_B=$WITH_KCM
LAB_OPTS="--smp 2 --timeout 1200"

bench_sizes() {
	if [ "${LAB_BENCH:-}" = full ]; then
		N=1000 PAIRS=1,8 SECS=2 ROUNDS=3 CM_ROUNDS=3
		# Traced too: the ceilings come from the run's own trace.
		LAB_TRACE=${LAB_TRACE:-1}
	else
		# 8 pairs too: their storms on one connection are what
		# outran ib_umad's send completions (port_umad_send()).
		# Two rounds, so that the kernel CM's reload cannot rot;
		# traced, so that the tracing cannot either.
		N=40 PAIRS=1,8 SECS=0.3 ROUNDS=1 CM_ROUNDS=2
		LAB_TRACE=${LAB_TRACE:-1}
	fi
}

# The median of the numbers on standard input.
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# cm_rate's "cm_rate: KEY VALUE" line from FILE.
rate_of() { sed -n "s/^cm_rate: $2 //p" "$1"; }
# Round R's daemon rate of KEY against the kernel CM's: the VM's, or
# with a third argument "hostlib" cm_rate's under rdmacm-mux-run.
round_ratio() {
	awk -v d="$(rate_of "/tmp/${3:-vm}-$1.txt" "$2")" -v n="$(rate_of "/tmp/native-$1.txt" "$2")" \
		'BEGIN { printf "%.3f\n", d / n }'
}

# The mean time of FUNC's calls in traced run NAME (0: it made none).
trace_mean() {
	awk -v f="$2" '$1 == f && $2 == "calls" { m = $5 } END { print m + 0 }' \
		"$LAB_SYNC/trace-$1.txt"
}

# The host's CPU time so far, all CPUs: "TOTAL IDLE" in clock ticks
# (idle with iowait; steal and guest left out).
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8, $5 + $6 }' /proc/stat; }
# cpu_spent NAME BEFORE AFTER: what run NAME cost the host, as "ms of
# CPU a connection" and the share of the CPUs busy meanwhile (near 1:
# the run was bound by the host's CPUs, not by anything it waited for).
cpu_spent() {
	set -- "$1" $2 $3
	awk -v n="$N" -v hz="$(getconf CLK_TCK)" -v t0="$2" -v i0="$3" -v t1="$4" -v i1="$5" \
		'BEGIN { b = (t1 - t0) - (i1 - i0)
			printf "cpu_ms_per_connection %.2f cpus_busy %.2f\n", b * 1000 / hz / n,
				(t1 > t0 ? b / (t1 - t0) : 0) }'
}

# The number of FUNC's calls in traced run NAME.
trace_calls() {
	awk -v f="$2" '$1 == f && $2 == "calls" { n = $3 } END { print n + 0 }' \
		"$LAB_SYNC/trace-$1.txt"
}

# The share of round R's traced daemon run (its timed phases) that the
# port's receive work spent in the daemon's received MADs
# (round_ceiling()): near 1, that work is what bounds the daemon's rate.
receive_busy() {
	awk -v c="$(trace_calls "daemon-$1" ib_mad_recv_done)" -v n="$N" \
		-v m="$(trace_mean "daemon-$1" ib_mad_recv_done)" \
		-v cyc="$(rate_of "/tmp/vm-$1.txt" cycle_per_s)" \
		'BEGIN { printf "%.2f\n", (cyc > 0 ? (c * m / 1e6) / (n / cyc) : 0) }'
}

# Round R's ceiling for KEY (connect, disconnect, cycle) that ib_umad
# sets, the lower of two:
#  - latency: the kernel CM's rate in the round had each of its
#    connections also waited, on its path, for what the daemon's umad
#    sends and receives cost beyond the kernel CM's own sends and
#    receives (the traced means: on a connect's path a REQ written and a
#    REP received, on a disconnect's a DREQ and a DREP), at the same
#    WINDOW connections in flight (Little's law);
#  - receive work: the MAD layer takes a port's completions in one work
#    item (its CQ's), one at a time, and ib_umad's receive handler
#    resolves the sender's MAC inside it, so each MAD the daemon receives
#    holds the port's receive path for ib_mad_recv_done's traced mean,
#    however many are in flight: a phase with one received MAD a
#    connection (a REP, a DREP) runs at most 1 / that mean.
# What the daemon's ratio can reach on this port; the gap between the
# two is the daemon's own.
round_ceiling() {
	awk -v rate="$(rate_of "/tmp/native-$1.txt" "$2_per_s")" -v w="$WINDOW" -v k="$2" \
		-v wd="$(trace_mean "daemon-$1" ib_umad_write)" \
		-v rd="$(trace_mean "daemon-$1" ib_mad_recv_done)" \
		-v rn="$(trace_mean "native-$1" ib_mad_recv_done)" \
		-v sreq="$(trace_mean "native-$1" ib_send_cm_req)" \
		-v sdreq="$(trace_mean "native-$1" ib_send_cm_dreq)" 'BEGIN {
		c = wd + rd - sreq - rn; d = wd + rd - sdreq - rn
		x = k == "connect" ? c : k == "disconnect" ? d : c + d
		if (x < 0) x = 0
		l = w / rate * 1e6
		lat = l / (l + x)
		recv = rd > 0 ? 1e6 / (rd * (k == "cycle" ? 2 : 1)) / rate : lat
		printf "%.3f\n", (recv < lat ? recv : lat)
	}'
}
WINDOW=16

# profiled NAME CMD...: CMD, and with LAB_PROFILE=1 a system-wide perf
# profile of it in the sync dir (profile-NAME.txt: by thread name and
# symbol, kernel included), which LAB_KEEP_SYNC=DIR takes out.
profiled() {
	local name=$1 rc=0
	shift
	[ -n "${LAB_PROFILE:-}" ] || { "$@"; return; }
	perf record -a -g -F 499 -o "/tmp/perf-$name.data" -- "$@" 2>/tmp/perf-$name.log || rc=$?
	perf report -i "/tmp/perf-$name.data" --stdio --no-children --sort comm,sym \
		--percent-limit 0.3 >"$LAB_SYNC/profile-$name.txt" 2>&1
	perf report -i "/tmp/perf-$name.data" --stdio --no-children --sort comm \
		-g none >"$LAB_SYNC/profile-$name-by-thread.txt" 2>&1
	return $rc
}

# What a MAD costs in the kernel on each side, by the functions it goes
# through: the MAC resolution of a RoCE address (ib_umad resolves one
# for every MAD it sends and receives; the kernel CM once a connection,
# for its path), ib_umad's write and read, the MAD layer's receive
# completion (its CQ work, where ib_umad's receive handler runs), and
# the kernel CM's own sends.
TRACE_FUNCS="rdma_addr_find_l2_eth_by_grh ib_umad_write ib_umad_read ib_mad_recv_done
ib_send_cm_req ib_send_cm_rep ib_send_cm_rtu ib_send_cm_dreq ib_send_cm_drep"

# traced NAME CMD...: CMD, and with LAB_TRACE=1 the calls to TRACE_FUNCS
# meanwhile, their number and mean time (function_graph, which times
# each call from entry to return, sleeps included), into the sync dir as
# trace-NAME.txt.
traced() {
	local name=$1 t=/sys/kernel/tracing rc=0 f
	shift
	[ -n "${LAB_TRACE:-}" ] || { "$@"; return; }
	[ -d $t/options ] || mount -t tracefs nodev $t
	echo 0 >$t/tracing_on
	echo nop >$t/current_tracer
	echo 8192 >$t/buffer_size_kb
	: >$t/set_ftrace_filter
	for f in $TRACE_FUNCS; do
		echo "$f" >>$t/set_ftrace_filter 2>/dev/null || true
	done
	echo 1 >$t/options/funcgraph-tail
	echo function_graph >$t/current_tracer
	: >$t/trace
	echo 1 >$t/tracing_on
	"$@" || rc=$?
	echo 0 >$t/tracing_on
	# "... 12.345 us | name();" or "... 12.345 us | } /* name */"
	awk '/ us +\|/ {
		d = $0; sub(/ us +\|.*/, "", d); sub(/.* /, "", d)
		f = $0; sub(/.*\| +/, "", f); sub(/^\} \/\* /, "", f)
		sub(/ \*\/$/, "", f); sub(/\(\);$/, "", f); sub(/ \[.*\]$/, "", f)
		n[f]++; us[f] += d
	} END {
		for (f in n) printf "%-32s calls %7d  mean_us %9.1f\n", f, n[f], us[f] / n[f]
	}' $t/trace | sort >"$LAB_SYNC/trace-$name.txt"
	echo "overruns $(awk '/overrun/ { s += $2 } END { print s + 0 }' $t/per_cpu/cpu*/stats)" \
		>>"$LAB_SYNC/trace-$name.txt"
	echo nop >$t/current_tracer
	return $rc
}

host_a() {
	local i k r
	bench_sizes
	add_ip 10.77.0.11
	await server-up
	# Kernel CM and daemon in turn, CM_ROUNDS times, each ratio of a
	# round's two runs side by side: this host's rates move by half
	# from one minute to the next, so one run of each compares little.
	for r in $(seq "$CM_ROUNDS"); do
		c0=$(cpu_ticks)
		traced native-$r profiled native timeout 300 "$B/bench/cm_rate" -c "$N" -w "$WINDOW" -a "$LAB_PEER_IP" \
			-b "$LAB_IP" >/tmp/native-$r.txt 2>&1 ||
			{ cat /tmp/native-$r.txt; fail "native cm_rate"; }
		ok "lab-bench: round $r native $(cpu_spent native "$c0" "$(cpu_ticks)")"
		# The daemon needs the CM class to itself: the kernel CM goes.
		modprobe -r rdma_ucm rdma_cm iw_cm ib_cm || fail "cannot unload the kernel CM"
		start_daemon
		# A send agent for each sender thread (port_umad.c): on one
		# umad file the sends would leave one at a time.
		grep -q "RoCE, 8 send agents" /tmp/d.log || { cat /tmp/d.log; fail "send agents"; }
		c0=$(cpu_ticks)
		traced daemon-$r profiled daemon timeout 300 "$B/bench/cm_rate_vm" --gid 10.77.0.11 --connect "$LAB_PEER_IP" \
			--qp-port rxe0:1 -c "$N" -w "$WINDOW" >/tmp/vm-$r.txt 2>&1 ||
			{ cat /tmp/vm-$r.txt; fail "cm_rate_vm"; }
		ok "lab-bench: round $r daemon $(cpu_spent daemon "$c0" "$(cpu_ticks)")"
		ok "lab-bench: round $r connections=$N daemon_retransmissions $(rate_of /tmp/vm-$r.txt retransmissions)"
		# The same cm_rate as the kernel CM's run, through the daemon
		# (librdmacm-mux): what a host program pays, QPs moved by the
		# library as librdmacm moves them.
		RDMACM_MUX_LIB="$B/librdmacm-mux.so.1" timeout 300 "$B/rdmacm-mux-run" \
			"$B/bench/cm_rate" -c "$N" -w "$WINDOW" -a "$LAB_PEER_IP" -b "$LAB_IP" \
			>/tmp/hostlib-$r.txt 2>&1 || { cat /tmp/hostlib-$r.txt; fail "cm_rate under rdmacm-mux-run"; }
		ok "lab-bench: round $r daemon drops $(status_get '.counters.drops' | tr -d ' \n')"
		stop_daemon
		# Sends of one connection's TID that waited for ib_umad to
		# finish the one before (port_umad.c; logged at the stop).
		ok "lab-bench: round $r connections=$N daemon_sends_waited_for_their_tid $(sed -n \
			's/.* \([0-9]*\) sends waited for ib_umad.*/\1/p' /tmp/d.log | tail -n 1 | grep . || echo 0)"
		[ -z "${LAB_TRACE:-}" ] || for k in native daemon; do
			grep -q " calls " "$LAB_SYNC/trace-$k-$r.txt" || fail "no kernel trace of the $k run"
			grep " calls " "$LAB_SYNC/trace-$k-$r.txt" | while read -r f _ calls _ mean; do
				ok "lab-bench: round $r $k kernel $f per_connection $(awk -v c="$calls" -v n="$N" \
					'BEGIN { printf "%.2f", c / n }') mean_us $mean"
			done
		done
		# How busy the port's receive work was (receive_busy()).
		[ -z "${LAB_TRACE:-}" ] ||
			ok "lab-bench: round $r daemon receive_work_busy $(receive_busy "$r")"
		# Where a disconnect's time goes: its own time from its call
		# (or DREQ) to its DISCONNECTED (or DREP) on each side, and on
		# the daemon's how much of it came before the DREQ's verdict.
		ok "lab-bench: round $r disconnect_ms native $(rate_of /tmp/native-$r.txt disconnect_ms) daemon $(rate_of /tmp/vm-$r.txt disconnect_ms) of_which_until_verdict $(rate_of /tmp/vm-$r.txt disconnect_verdict_ms)"
		# Each ratio, and with the trace the ceiling ib_umad set.
		for k in connect disconnect cycle; do
			ok "lab-bench: round $r connections=$N ${k}_ratio $(round_ratio "$r" ${k}_per_s)$(
				[ -z "${LAB_TRACE:-}" ] || echo " ceiling $(round_ceiling "$r" $k)")"
			ok "lab-bench: round $r connections=$N hostlib_${k}_ratio $(round_ratio "$r" ${k}_per_s hostlib)"
		done
		# The kernel CM again for the next round; the last round
		# leaves the CM class to bench_relay's daemons.
		[ "$r" = "$CM_ROUNDS" ] || modprobe rdma_ucm || fail "cannot load the kernel CM again"
	done
	signal bench-done
	# Medians over the rounds: each side's rate, and the ratio of the
	# runs side by side.
	for k in connect_per_s disconnect_per_s cycle_per_s; do
		ok "lab-bench: connections=$N native_$k $(for r in $(seq "$CM_ROUNDS"); do
			rate_of /tmp/native-$r.txt $k; done | median)"
		ok "lab-bench: connections=$N daemon_$k $(for r in $(seq "$CM_ROUNDS"); do
			rate_of /tmp/vm-$r.txt $k; done | median)"
		ok "lab-bench: connections=$N ${k%_per_s}_ratio $(for r in $(seq "$CM_ROUNDS"); do
			round_ratio "$r" $k; done | median)"
		ok "lab-bench: connections=$N hostlib_$k $(for r in $(seq "$CM_ROUNDS"); do
			rate_of /tmp/hostlib-$r.txt $k; done | median)"
		ok "lab-bench: connections=$N hostlib_${k%_per_s}_ratio $(for r in $(seq "$CM_ROUNDS"); do
			round_ratio "$r" $k hostlib; done | median)"
		[ -z "${LAB_TRACE:-}" ] ||
			ok "lab-bench: connections=$N ${k%_per_s}_ceiling $(for r in $(seq "$CM_ROUNDS"); do
				round_ceiling "$r" "${k%_per_s}"; done | median)"
	done
	# bench_relay's clients are 10.77.1.1, 10.77.1.2, ...: addresses here.
	for i in $(seq 16); do add_ip "10.77.1.$i"; done
	# (LAB_DAEMON_ARGS, as the daemons start_daemon() starts have them)
	# shellcheck disable=SC2046
	timeout 900 "$B/bench/bench_relay" --port rxe0:1 --gid-base ::ffff:10.77.1.0 --pairs "$PAIRS" \
		--seconds "$SECS" --rounds "$ROUNDS" $(for a in ${LAB_DAEMON_ARGS:-}; do
			echo "--daemon-arg=$a"; done) >/tmp/relay.txt 2>&1 ||
		{ cat /tmp/relay.txt; tail -n 20 /tmp/rcm-bench.*/daemon.log;
		  fail "bench_relay on the umad port"; }
	grep -E "ratio|per_s|cpu_us|runs_per|vs_umad_relay|round_trip|latency_p99|waited" /tmp/relay.txt |
		sed 's/^bench: /lab-bench: umad /' | while read -r line; do ok "$line"; done
}

host_b() {
	bench_sizes
	local srv
	"$B/bench/cm_rate" -s -b "$LAB_IP" >/tmp/srv.log 2>&1 &
	srv=$!
	wait_for kernel_listening 7471 || fail "cm_rate server is not listening"
	signal server-up
	await_long 800 bench-done
	kill "$srv" 2>/dev/null
	ok "cm_rate server served the run"
}
