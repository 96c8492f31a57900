/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_BENCH_CAPTURE_H
#define RCM_BENCH_CAPTURE_H

/*
 * bench_relay --capture: a capture of every MAD (rdmacm-muxd(8), the
 * admin socket's {"op":"capture"}), read as fast as it comes by a thread
 * that counts its lines and keeps nothing, as `rdmacm-muxctl capture -w
 * /dev/null` would, for as long as a measurement runs.
 */
#include <pthread.h>
#include <stdatomic.h>

struct bench_capture {
	int fd; /* the admin connection; -1: none */
	pthread_t reader;
	atomic_ulong lines; /* MADs read (the reply's line too) */
};

/* Start one on the daemon's admin socket: 0, or a negative errno value
 * (the daemon's refusal printed). */
int bench_capture_start(struct bench_capture *c, const char *admin_path);
/* End it (the reader's close ends the daemon's capture); the MADs it
 * read. */
unsigned long bench_capture_stop(struct bench_capture *c);

#endif
