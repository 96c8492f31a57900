// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The daemon's figures from /proc, for the soak and the benchmarks
 * (proc_figures.h).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/proc_figures.h"

long proc_figures_status_kb(pid_t pid, const char *field)
{
	char path[64], line[256];
	size_t len = strlen(field);
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, field, len) == 0 && line[len] == ':') {
			kb = strtol(line + len + 1, NULL, 10);
			break;
		}
	if (f)
		fclose(f);
	return kb;
}

/* A schedstat file's fields: the time on a CPU, the time waiting for
 * one, how many times the thread was put on one. */
enum schedstat_field { SCHEDSTAT_CPU_NS, SCHEDSTAT_WAIT_NS, SCHEDSTAT_RUNS };

static uint64_t proc_figures_schedstat(const char *path, enum schedstat_field k)
{
	unsigned long long v[3] = { 0 };
	FILE *f = fopen(path, "r");
	int n;

	if (f == NULL)
		return 0;
	n = fscanf(f, "%llu %llu %llu", &v[0], &v[1], &v[2]);
	fclose(f);
	return n > (int)k ? v[k] : 0;
}

/* Schedstat field k summed over pid's threads, over those whose name
 * begins with prefix (or over all, prefix NULL). */
static uint64_t proc_figures_tasks(pid_t pid, const char *prefix,
				   enum schedstat_field k)
{
	char path[300], comm[64];
	struct dirent *de;
	uint64_t total = 0;
	FILE *f;
	DIR *d;
	int named;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	while (d && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if (prefix) {
			snprintf(path, sizeof(path), "/proc/%d/task/%s/comm",
				 (int)pid, de->d_name);
			f = fopen(path, "r");
			if (f == NULL)
				continue;
			named = fgets(comm, sizeof(comm), f) != NULL &&
				strncmp(comm, prefix, strlen(prefix)) == 0;
			fclose(f);
			if (!named)
				continue;
		}
		snprintf(path, sizeof(path), "/proc/%d/task/%s/schedstat",
			 (int)pid, de->d_name);
		total += proc_figures_schedstat(path, k);
	}
	if (d)
		closedir(d);
	return total;
}

static uint64_t proc_figures_sched(pid_t pid, pid_t tid, enum schedstat_field k)
{
	char path[64];

	if (tid == 0)
		return proc_figures_tasks(pid, NULL, k);
	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)pid,
		 (int)tid);
	return proc_figures_schedstat(path, k);
}

uint64_t proc_figures_cpu_ns(pid_t pid, pid_t tid)
{
	return proc_figures_sched(pid, tid, SCHEDSTAT_CPU_NS);
}

uint64_t proc_figures_runs(pid_t pid, pid_t tid)
{
	return proc_figures_sched(pid, tid, SCHEDSTAT_RUNS);
}

uint64_t proc_figures_cpu_ns_named(pid_t pid, const char *prefix)
{
	return proc_figures_tasks(pid, prefix, SCHEDSTAT_CPU_NS);
}

uint64_t proc_figures_runs_named(pid_t pid, const char *prefix)
{
	return proc_figures_tasks(pid, prefix, SCHEDSTAT_RUNS);
}

void proc_figures_steal_ticks(uint64_t *steal, uint64_t *total)
{
	unsigned long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	int i;

	*steal = *total = 0;
	if (f == NULL)
		return;
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
		   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
		for (i = 0; i < 8; i++)
			*total += v[i];
		*steal = v[7];
	}
	fclose(f);
}

int proc_figures_fds(pid_t pid)
{
	char path[64];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	while (d && (de = readdir(d)) != NULL)
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}
