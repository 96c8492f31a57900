/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_TESTS_PROC_FIGURES_H
#define RCM_TESTS_PROC_FIGURES_H

#include <stdint.h>
#include <sys/types.h>

/*
 * What /proc tells of the daemon, for the soak and the benchmarks that
 * report its memory, CPU and descriptors.  Each reads /proc afresh.
 */

/* A "Field:   N kB" line of /proc/PID/status (VmRSS, VmHWM, RssAnon,
 * RssShmem), in kB, or -1. */
long proc_figures_status_kb(pid_t pid, const char *field);
/* From schedstat: the time on a CPU, in ns, and how many times it was
 * put on one (each a wake-up, or a preemption ended); from status, how
 * many times it went to sleep (voluntary_ctxt_switches). */
struct proc_sched {
	uint64_t cpu_ns, runs, sleeps;
};

/* Of one thread (tid != 0), or of every thread of the process (tid ==
 * 0). */
struct proc_sched proc_figures_sched(pid_t pid, pid_t tid);
/* Of the process's threads whose name begins with prefix (the daemon
 * names its threads by role: muxd-worker0, ...). */
struct proc_sched proc_figures_sched_named(pid_t pid, const char *prefix);
/* The time this machine's CPUs were runnable but not run (the
 * hypervisor's steal), and all their time, in clock ticks. */
void proc_figures_steal_ticks(uint64_t *steal, uint64_t *total);
/* How many descriptors the process holds open, or 0 if it is gone. */
int proc_figures_fds(pid_t pid);

#endif
