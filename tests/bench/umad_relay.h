/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_BENCH_UMAD_RELAY_H
#define RCM_BENCH_UMAD_RELAY_H

#include "protocol/rdmacm_mux_proto.h"

/*
 * The minimal relay's way through a real port, for bench_relay --port:
 * what the daemon cannot avoid there (a write to ib_umad for each MAD it
 * sends, a read for each it receives, and the kernel's work behind
 * them), without anything of the daemon's own.  One umad file and one
 * agent, written and read by the relay's one thread.
 *
 * The agent is the CM class's at class version 1, and the MADs travel as
 * version 1 (set on the way out, put back on the way in): the daemon
 * under test holds version 2 on the same port meanwhile, and the kernel
 * hands a MAD to the agent of its class version.
 */
struct umad_relay;

/* port_spec "DEV:PORT".  NULL with a message on stderr. */
struct umad_relay *umad_relay_open(const char *port_spec);
void umad_relay_close(struct umad_relay *ur);
int umad_relay_fd(const struct umad_relay *ur);
/* Send m (from its local GID to its remote GID): 0 or -errno. */
int umad_relay_send(struct umad_relay *ur, const struct proto_mad *m);
/* The next MAD received into m (remote GID: its sender's, local GID:
 * ours it came to): 1, 0 when there is none, -errno. */
int umad_relay_recv(struct umad_relay *ur, struct proto_mad *m);

#endif
