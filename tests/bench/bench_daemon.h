/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_BENCH_DAEMON_H
#define RCM_BENCH_DAEMON_H

/*
 * bench_relay's rdmacm-muxd: on a sim port of its own or on a real port,
 * its sockets and log in the benchmark's directory, its connection state
 * on a tmpfs, and gone with the benchmark however that ends.
 */
#include <sys/types.h>

struct bench_daemon {
	pid_t pid;            /* 0: not running */
	char sock[160];       /* its client socket */
	char status[160];     /* its status socket */
	char state_path[200]; /* its connection-state file, removed at stop */
};

/* Start bin with its sockets (d->sock, d->status: dir's mux.sock and
 * status.sock) and its log
 * (daemon.log) in dir, on umad_port or, if that is NULL, on a sim port
 * with 2 * pairs GIDs, extra's arguments (NULL-terminated, or NULL) after
 * the benchmark's own.  Returns once the status socket exists; exits the
 * benchmark if it does not within 10 s. */
void bench_daemon_start(struct bench_daemon *d, const char *bin,
			const char *dir, int pairs, const char *umad_port,
			const char *const *extra);
/* SIGTERM, reaped, its state file removed. */
void bench_daemon_stop(struct bench_daemon *d);
/* How many of its sends waited for ib_umad to finish an earlier send of
 * their TID, as dir's daemon.log says once it has stopped (port_umad.c;
 * 0 on a sim port). */
unsigned long bench_daemon_tid_waits(const char *dir);

#endif
