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

/* The number after "field:" in a status file (/proc/PID/status or
 * /proc/PID/task/TID/status), or -1. */
static long long proc_figures_status_field(const char *path, const char *field)
{
	char line[256];
	size_t len = strlen(field);
	long long v = -1;
	FILE *f = fopen(path, "r");

	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, field, len) == 0 && line[len] == ':') {
			v = strtoll(line + len + 1, NULL, 10);
			break;
		}
	if (f)
		fclose(f);
	return v;
}

long proc_figures_status_kb(pid_t pid, const char *field)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	return (long)proc_figures_status_field(path, field);
}

/* Adds a schedstat file's time on a CPU and runs to *sum; a field the
 * file does not have adds nothing. */
static void proc_figures_schedstat(const char *path, struct proc_sched *sum)
{
	unsigned long long cpu_ns = 0, wait_ns = 0, runs = 0;
	FILE *f = fopen(path, "r");
	int n;

	if (f == NULL)
		return;
	n = fscanf(f, "%llu %llu %llu", &cpu_ns, &wait_ns, &runs);
	fclose(f);
	if (n >= 1)
		sum->cpu_ns += cpu_ns;
	if (n >= 3)
		sum->runs += runs;
}

/* Adds a thread's voluntary context switches (status_path: its
 * /proc/PID/task/TID/status) to *sum; a thread gone adds nothing. */
static void proc_figures_sleeps(const char *status_path, struct proc_sched *sum)
{
	long long n = proc_figures_status_field(status_path,
						"voluntary_ctxt_switches");

	if (n > 0)
		sum->sleeps += (uint64_t)n;
}

/* Summed over pid's threads, over those whose name begins with prefix
 * (or over all, prefix NULL). */
static struct proc_sched proc_figures_tasks(pid_t pid, const char *prefix)
{
	struct proc_sched sum = { 0, 0, 0 };
	char path[300], comm[64];
	struct dirent *de;
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
		proc_figures_schedstat(path, &sum);
		snprintf(path, sizeof(path), "/proc/%d/task/%s/status",
			 (int)pid, de->d_name);
		proc_figures_sleeps(path, &sum);
	}
	if (d)
		closedir(d);
	return sum;
}

struct proc_sched proc_figures_sched(pid_t pid, pid_t tid)
{
	struct proc_sched one = { 0, 0, 0 };
	char path[64];

	if (tid == 0)
		return proc_figures_tasks(pid, NULL);
	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)pid,
		 (int)tid);
	proc_figures_schedstat(path, &one);
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid,
		 (int)tid);
	proc_figures_sleeps(path, &one);
	return one;
}

struct proc_sched proc_figures_sched_named(pid_t pid, const char *prefix)
{
	return proc_figures_tasks(pid, prefix);
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
