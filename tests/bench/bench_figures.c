// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* bench_relay's figures (bench_figures.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/bench/bench_figures.h"

void bench_figures_print(struct bench_figures_out *o, const char *key,
			 double value)
{
	if (o->as_json)
		json_object_set_new(o->results, key, json_real(value));
	else
		printf("bench: %s %.6g\n", key, value);
	fflush(stdout);
}

void bench_figures_compare(struct bench_figures_out *o, int npairs,
			   const char *what, const char *unit, double mine,
			   double base)
{
	char key[128];

	snprintf(key, sizeof(key), "pairs=%d %s_%s", npairs, what, unit);
	bench_figures_print(o, key, mine);
	snprintf(key, sizeof(key), "pairs=%d %s_relay_%s", npairs, what, unit);
	bench_figures_print(o, key, base);
	snprintf(key, sizeof(key), "pairs=%d %s_ratio", npairs, what);
	bench_figures_print(o, key, mine / base);
}

int bench_figures_dbl_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void bench_figures_median(const struct run_figures *runs, int n,
			  struct run_figures *out)
{
	double v[MAX_ROUNDS];
	size_t f, nf = sizeof(*out) / sizeof(double);
	int i;

	for (f = 0; f < nf; f++) {
		for (i = 0; i < n; i++)
			v[i] = ((const double *)&runs[i])[f];
		qsort(v, (size_t)n, sizeof(v[0]), bench_figures_dbl_cmp);
		((double *)out)[f] = v[n / 2];
	}
}

void bench_figures_ratio(const struct run_figures *a,
			 const struct run_figures *b, int n,
			 struct run_figures *out)
{
	struct run_figures q[MAX_ROUNDS];
	size_t f, nf = sizeof(*out) / sizeof(double);
	double num, den;
	int i;

	for (i = 0; i < n; i++)
		for (f = 0; f < nf; f++) {
			num = ((const double *)&a[i])[f];
			den = ((const double *)&b[i])[f];
			((double *)&q[i])[f] = den > 0 ? num / den : 0;
		}
	bench_figures_median(q, n, out);
}

/* The closed-loop phases: their names, rates and CPU per MAD. */
#define PH(n, r, c)                                     \
	{                                               \
		n, offsetof(struct run_figures, r),     \
			offsetof(struct run_figures, c) \
	}
static const struct {
	const char *name;
	size_t rate, cpu;
} ph[] = {
	PH("req_by_gid_1_inflight", req1, cpu_req1),
	PH("req_by_gid_16_inflight", req16, cpu_req16),
	PH("reply_by_comm_id_1_inflight", rep1, cpu_rep1),
	PH("reply_by_comm_id_16_inflight", rep16, cpu_rep16),
	PH("req_fresh_1_inflight", fresh1, cpu_fresh1),
	PH("req_fresh_16_inflight", fresh16, cpu_fresh16),
	PH("handshakes", hs, cpu_hs),
	PH("handshakes_16_inflight", hs16, cpu_hs16),
};
#undef PH

void bench_figures_against(struct bench_figures_out *o, int npairs,
			   const struct run_figures *q)
{
	const char *base = (const char *)q;
	char key[128];
	size_t i;

	for (i = 0; i < sizeof(ph) / sizeof(ph[0]); i++) {
		snprintf(key, sizeof(key), "pairs=%d %s_vs_against", npairs,
			 ph[i].name);
		bench_figures_print(o, key,
				    *(const double *)(base + ph[i].rate));
		snprintf(key, sizeof(key), "pairs=%d cpu_per_mad_%s_vs_against",
			 npairs, ph[i].name);
		bench_figures_print(o, key,
				    *(const double *)(base + ph[i].cpu));
	}
	snprintf(key, sizeof(key), "pairs=%d latency_p50_vs_against", npairs);
	bench_figures_print(o, key, q->p50);
	snprintf(key, sizeof(key), "pairs=%d latency_p99_vs_against", npairs);
	bench_figures_print(o, key, q->p99);
}

static double bench_figures_field(const struct run_figures *f, size_t off)
{
	return *(const double *)((const char *)f + off);
}

static void bench_figures_key(struct bench_figures_out *o, int npairs,
			      double value, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void bench_figures_key(struct bench_figures_out *o, int npairs,
			      double value, const char *fmt, ...)
{
	char key[160];
	int n = snprintf(key, sizeof(key), "pairs=%d ", npairs);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(key + n, sizeof(key) - (size_t)n, fmt, ap);
	va_end(ap);
	bench_figures_print(o, key, value);
}

void bench_figures_umad(struct bench_figures_out *o, int npairs,
			const struct run_figures *d,
			const struct run_figures *u)
{
	double dr, ur, dc, uc;
	size_t i;

	for (i = 0; i < sizeof(ph) / sizeof(ph[0]); i++) {
		dr = bench_figures_field(d, ph[i].rate);
		ur = bench_figures_field(u, ph[i].rate);
		dc = bench_figures_field(d, ph[i].cpu);
		uc = bench_figures_field(u, ph[i].cpu);
		bench_figures_key(o, npairs, ur, "%s_umad_relay_%s", ph[i].name,
				  strncmp(ph[i].name, "handshakes", 10)
					  ? "mads_per_s"
					  : "per_s");
		bench_figures_key(o, npairs, dr / ur, "%s_vs_umad_relay",
				  ph[i].name);
		bench_figures_key(o, npairs, uc, "umad_relay_cpu_us_per_mad_%s",
				  ph[i].name);
		bench_figures_key(o, npairs, dc / uc,
				  "daemon_cpu_vs_umad_relay_%s", ph[i].name);
	}
	bench_figures_key(o, npairs, u->fresh16_cost.runs,
			  "umad_relay_runs_per_mad_req_fresh_16_inflight");
	bench_figures_key(o, npairs, u->hs_cost.runs,
			  "umad_relay_runs_per_mad_handshakes");
	bench_figures_key(o, npairs, u->req16_cost.runs,
			  "umad_relay_runs_per_mad_req_by_gid_16_inflight");
	bench_figures_key(
		o, npairs, u->rep16_cost.runs,
		"umad_relay_runs_per_mad_reply_by_comm_id_16_inflight");
}

void bench_figures_roles(struct bench_figures_out *o, int npairs,
			 const struct run_figures *d,
			 const char *const role_name[ROLES])
{
	static const struct {
		const char *phase;
		size_t cost;
	} pc[] = {
		{ "req_by_gid_16_inflight",
		  offsetof(struct run_figures, req16_cost) },
		{ "reply_by_comm_id_16_inflight",
		  offsetof(struct run_figures, rep16_cost) },
		{ "req_fresh_16_inflight",
		  offsetof(struct run_figures, fresh16_cost) },
		{ "handshakes", offsetof(struct run_figures, hs_cost) },
	};
	const struct phase_cost *c;
	size_t i;
	int r;

	for (i = 0; i < sizeof(pc) / sizeof(pc[0]); i++) {
		c = (const struct phase_cost *)((const char *)d + pc[i].cost);
		bench_figures_key(o, npairs, c->runs, "daemon_runs_per_mad_%s",
				  pc[i].phase);
		for (r = 0; r < ROLES; r++) {
			bench_figures_key(o, npairs, c->cpu_role[r],
					  "daemon_cpu_us_per_mad_%s_%s",
					  pc[i].phase, role_name[r]);
			bench_figures_key(o, npairs, c->runs_role[r],
					  "daemon_runs_per_mad_%s_%s",
					  pc[i].phase, role_name[r]);
		}
	}
}
