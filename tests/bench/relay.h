/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_BENCH_RELAY_H
#define RCM_BENCH_RELAY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/cm_mad.h"
#include "common/gid.h"
#include "protocol/rdmacm_mux_proto.h"
#include "tests/bench/umad_relay.h"

/*
 * bench_relay's baselines: a minimal relay, one thread that does the
 * unix-socket reads, copies and writes the daemon does (each MAD frame
 * answered to its sender and forwarded to the partner, client i's
 * partner i ^ 1) and nothing else; with ur set, the same relay through a
 * real port's umad (each MAD written to it, each MAD received forwarded
 * to its sender's partner).  A client says its number first, 4 bytes in
 * network order.
 */
#define RELAY_MAX_CLIENTS 2048
#define RELAY_RBUF 65536
#define RELAY_FRAME_MAD (PROTO_HDR_SIZE + PROTO_MAD_ADDR_SIZE + MAD_SIZE)

struct rconn {
	int fd, id;
	uint8_t buf[RELAY_RBUF];
	size_t have;
};

struct relay {
	int lfd;
	char path[108];
	int fds[RELAY_MAX_CLIENTS];
	struct rconn *conns;   /* by client id */
	struct umad_relay *ur; /* through a real port, or NULL */
	struct gid base;       /* client i's GID: base + i + 1 */
	pid_t tid;
	volatile int stop;
	pthread_t thread;
};

/* Listen on DIR/NAME.sock and run; client i's GID is gid_base plus
 * i + 1 in its low 32 bits (for what a port receives). */
void relay_start(struct relay *rl, const char *dir, const char *name,
		 const char *gid_base);
void relay_stop(struct relay *rl);

#endif
