// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* bench_relay's rdmacm-muxd (bench_daemon.h). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/bench/bench_daemon.h"

#define BENCH_DAEMON_ARGS 32
#define BENCH_DAEMON_START_POLLS 1000 /* of 10 ms: 10 s */

unsigned long bench_daemon_tid_waits(const char *dir)
{
	char path[160], line[512];
	unsigned long n = 0;
	const char *at;
	FILE *f;

	snprintf(path, sizeof(path), "%s/daemon.log", dir);
	f = fopen(path, "r");
	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		at = strstr(line, " sends waited for ib_umad");
		if (at == NULL)
			continue;
		while (at > line && at[-1] >= '0' && at[-1] <= '9')
			at--;
		n = strtoul(at, NULL, 10);
	}
	fclose(f);
	return n;
}

void bench_daemon_start(struct bench_daemon *d, const char *bin,
			const char *dir, int pairs, const char *umad_port,
			const char *const *extra)
{
	const char *argv[BENCH_DAEMON_ARGS];
	char fabric[160], simport[96], log[160], state[220];
	int fd, argc = 0, polls = 0;
	const char *slash;

	snprintf(d->sock, sizeof(d->sock), "%s/mux.sock", dir);
	snprintf(d->status, sizeof(d->status), "%s/status.sock", dir);
	snprintf(fabric, sizeof(fabric), "%s/fabric", dir);
	snprintf(log, sizeof(log), "%s/daemon.log", dir);
	snprintf(simport, sizeof(simport), "--sim-port=sim0=fd00::1*%d",
		 2 * pairs);
	/* The connection state where a deployment keeps it: on a tmpfs
	 * (/run), not on a disk whose writeback would fault its pages. */
	/* One file per daemon: bench_relay --against runs two at once,
	 * each in its own dir. */
	slash = strrchr(dir, '/');
	if (access("/dev/shm", W_OK) == 0)
		snprintf(d->state_path, sizeof(d->state_path),
			 "/dev/shm/rcm-bench.%d.%s.state", (int)getpid(),
			 slash ? slash + 1 : dir);
	else
		snprintf(d->state_path, sizeof(d->state_path), "%s/mux.state",
			 dir);
	snprintf(state, sizeof(state), "--state-file=%s", d->state_path);
	unlink(d->state_path);
	d->pid = fork();
	if (d->pid == 0) {
		/* A bench killed half-way (its exit handler does not run on
		 * a signal) leaves no daemon behind. */
		prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
		fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 1);
		dup2(fd, 2);
		argv[argc++] = bin;
		argv[argc++] = "--config";
		argv[argc++] = "none";
		argv[argc++] = "-s";
		argv[argc++] = d->sock;
		argv[argc++] = "-S";
		argv[argc++] = d->status;
		if (umad_port) {
			argv[argc++] = "--port";
			argv[argc++] = umad_port;
		} else {
			argv[argc++] = "--sim-fabric";
			argv[argc++] = fabric;
			argv[argc++] = simport;
		}
		argv[argc++] = "--max-clients";
		argv[argc++] = "4096";
		argv[argc++] = state;
		while (extra && *extra && argc < BENCH_DAEMON_ARGS - 1)
			argv[argc++] = *extra++;
		argv[argc] = NULL;
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	while (access(d->status, F_OK) != 0) {
		if (++polls > BENCH_DAEMON_START_POLLS) {
			fprintf(stderr,
				"bench: the daemon did not start (see %s)\n",
				log);
			exit(2);
		}
		usleep(10000);
	}
}

void bench_daemon_stop(struct bench_daemon *d)
{
	int status;

	kill(d->pid, SIGTERM);
	waitpid(d->pid, &status, 0);
	d->pid = 0;
	unlink(d->state_path);
}
