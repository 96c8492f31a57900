/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_BENCH_FIGURES_H
#define RCM_BENCH_FIGURES_H

/*
 * bench_relay's figures: what one measurement of a relay or a daemon
 * gives, their medians and ratios over the rounds, and how they are
 * printed ("bench: KEY VALUE" lines, or one JSON object at the end).
 */
#include <jansson.h>

/* The daemon's threads by role: its workers do what the relay does
 * (client sockets, routing), its umad threads what it does not. */
enum { ROLE_WORKERS, ROLE_SENDERS, ROLE_PORTS, ROLES };

/* Per MAD delivered in a phase: how many times the measured thread (or
 * the daemon's threads) were put on a CPU, a count where CPU time in a
 * TCG lab VM swings by a third between runs: the hand-offs that the
 * CPU figures mostly are; and for the daemon both by its threads'
 * roles.  Only doubles: the medians take it apart. */
struct phase_cost {
	double runs;
	double cpu_role[ROLES], runs_role[ROLES]; /* microseconds, runs */
};

struct run_figures {
	double req1, req16, fresh1, fresh16, rep1, rep16, hs, hs16;
	double p50, p99, p999, open_sat, steal_pct;
	/* CPU per MAD delivered, in each closed-loop phase, microseconds */
	double cpu_req1, cpu_req16, cpu_fresh1, cpu_fresh16, cpu_rep1,
		cpu_rep16, cpu_hs, cpu_hs16;
	/* More of the routed phases with 16 in flight and of the
	 * connection storm's two phases */
	struct phase_cost req16_cost, rep16_cost, fresh16_cost, hs_cost;
};

#define MAX_ROUNDS 9

struct bench_figures_out {
	json_t *results; /* as_json: what is printed at the end */
	int as_json;
};

void bench_figures_print(struct bench_figures_out *o, const char *key,
			 double value);
/* A throughput figure of the daemon's, the relay's, and their ratio:
 * "pairs=N WHAT_UNIT", "pairs=N WHAT_relay_UNIT", "pairs=N WHAT_ratio". */
void bench_figures_compare(struct bench_figures_out *o, int npairs,
			   const char *what, const char *unit, double mine,
			   double base);
int bench_figures_dbl_cmp(const void *a, const void *b);
/* Each figure's median over n rounds. */
void bench_figures_median(const struct run_figures *runs, int n,
			  struct run_figures *out);
/* Each figure of a over b's in the same round, the median of the n
 * rounds' ratios: a round's drift (the machine is shared) hits both. */
void bench_figures_ratio(const struct run_figures *a,
			 const struct run_figures *b, int n,
			 struct run_figures *out);
/* --against: q (bench_figures_ratio()) as "_vs_against" keys: the rates
 * and CPU per MAD of every phase, the latencies. */
void bench_figures_against(struct bench_figures_out *o, int npairs,
			   const struct run_figures *q);

/* The daemon's rate and CPU per MAD in each phase against the umad
 * relay's (the one that makes the same umad I/O), and the relay's runs
 * per MAD. */
void bench_figures_umad(struct bench_figures_out *o, int npairs,
			const struct run_figures *d,
			const struct run_figures *u);
/* The daemon's runs per MAD, and its CPU and runs by thread role, in
 * the phases that measure them: its workers do what the relay does
 * (sockets and routing), its umad threads what it does not (the port's
 * I/O). */
void bench_figures_roles(struct bench_figures_out *o, int npairs,
			 const struct run_figures *d,
			 const char *const role_name[ROLES]);

#endif
