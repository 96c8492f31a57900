// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* bench_relay's figures (bench_figures.h). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

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

void bench_figures_against(struct bench_figures_out *o, int npairs,
			   const struct run_figures *q)
{
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
