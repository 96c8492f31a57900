/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_CONN_TABLE_H
#define RCM_CONN_TABLE_H

/*
 * The connection table: CM communication IDs and SIDR request IDs,
 * translated per client, following each connection's lifetime.
 *
 * Guests allocate comm IDs independently, so two VMs can pick the same
 * one.  Every ID a client puts on the wire is therefore replaced by a
 * host-unique one the table allocates (never 0), and the peer's replies,
 * which name that host ID, are turned back into the client's ID on the
 * way in (the mlx4 SR-IOV multiplexer's scheme).  The wire TID's low 32
 * bits become the host ID too (ib_umad owns the high 32), and the guest's
 * TID is restored on replies that echo it.
 *
 * Entries follow the connection: created by the client's REQ, REP, MRA or
 * REJ (SIDR_REQ for request IDs); a handshake that sees no RTU is
 * abandoned after handshake_ms; an established connection lives until it
 * is torn down; DREQ bounds the teardown by handshake_ms; DREP and REJ
 * start a timewait_ms drain so retransmissions still find their owner;
 * duplicates re-arm the running timer; a client's entries go when it
 * disconnects.  Every timer class has one fixed duration, so each class
 * is a FIFO list and arming, re-arming and expiry are O(1) per entry.
 *
 * An inbound REQ leaves a "peer" record (the peer's comm ID and GID) for
 * the client it was routed to, so that a REJ that carries no Remote Comm
 * ID (the active side's timeout REJ after an abandoned REQ) still reaches
 * that client.
 *
 * No I/O, no locking: the router serialises calls and passes time in.
 */
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "../common/gid.h"

struct conn_table;

struct conn_limits {
	unsigned max_per_client;
	unsigned handshake_ms;          /* abandon a handshake without RTU */
	unsigned timewait_ms;           /* drain after DREP/REJ/SIDR_REP */
};

enum conn_state {
	CONN_REQ_RCVD,                  /* peer record of an inbound REQ */
	CONN_HANDSHAKE,
	CONN_ESTABLISHED,
	CONN_DISCONNECTING,
	CONN_TIMEWAIT,
	CONN_STATE_MAX
};

const char *conn_state_name(enum conn_state s);

/* random_operand: XORed into allocated IDs so that they are not
 * predictable (as the kernel CM does); tests pass a fixed one. */
struct conn_table *conn_table_new(const struct conn_limits *lim,
				  uint32_t random_operand);
void conn_table_free(struct conn_table *ct);

/*
 * A client's outbound CM MAD, rewritten in place (Local Comm ID or SIDR
 * request ID, and TID) before it is sent to dst.  max_conns (0: the
 * table's limit) bounds the client's entries.  Returns 0, or
 * -EINVAL   a REQ, REP, MRA or SIDR_REQ with ID 0;
 * -ENOENT   RTU, DREQ, DREP, LAP or APR for a comm ID this client has not
 *           started, or a REP, MRA or REJ that answers no REQ this client
 *           received: a client can only act on its own connections;
 * -ENOSPC   the client's quota;
 * -ENOMEM.
 */
int conn_outbound(struct conn_table *ct, uint64_t client, unsigned port,
		  uint8_t *mad, const struct gid *dst, uint64_t now_ms,
		  unsigned max_conns);

/*
 * An inbound CM MAD from src that is routed by ID (everything but REQ and
 * SIDR_REQ): returns 0 with *client set and the MAD rewritten for that
 * client, or -ENOENT (nobody's), -EBADR (Remote Comm ID 0 and no peer
 * record).
 */
int conn_inbound(struct conn_table *ct, unsigned port, uint8_t *mad,
		 const struct gid *src, uint64_t now_ms, uint64_t *client);

/* An inbound REQ was routed to client: remember the peer for its REJ. */
int conn_note_req(struct conn_table *ct, uint64_t client, unsigned port,
		  const uint8_t *mad, const struct gid *src, uint64_t now_ms);

unsigned conn_expire(struct conn_table *ct, uint64_t now_ms);
void conn_purge_client(struct conn_table *ct, uint64_t client);

struct conn_counts {
	unsigned total;
	unsigned comm, sidr;
	unsigned by_state[CONN_STATE_MAX];
};
void conn_counts(struct conn_table *ct, struct conn_counts *out);
void conn_client_counts(struct conn_table *ct, uint64_t client,
			struct conn_counts *out);
/* A client's live entries (at most max) with state and remaining life. */
json_t *conn_client_json(struct conn_table *ct, uint64_t client,
			 unsigned max, uint64_t now_ms);
/* The time until the next timer, or UINT64_MAX. */
uint64_t conn_next_deadline(struct conn_table *ct);

#endif
