/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_CONN_TABLE_H
#define RCM_CONN_TABLE_H

/*
 * The connection table: CM communication IDs and SIDR request IDs,
 * translated per client, and each connection's state, following the
 * Linux kernel CM's state machine (drivers/infiniband/core/cm.c).
 *
 * Guests allocate comm IDs independently, so two VMs can pick the same
 * one.  Every ID a client puts on the wire is replaced by a host-unique
 * one the table allocates (never 0), and the peer's messages, which name
 * that host ID, are turned back into the client's ID on the way in (the
 * mlx4 SR-IOV multiplexer's scheme).  Every MAD gets a wire TID whose low
 * 32 bits are unique among recent sends (ib_umad owns the high 32 and
 * refuses a second outstanding send with the same TID); the guest's TID
 * is restored on a message that echoes it.
 *
 * Inbound messages are matched as cm.c's cm_acquire_id() does: by the
 * host comm ID and, once known, the peer's comm ID and GID.  The state
 * decides what each message may do (an RTU completes only a handshake
 * the client is in), and every transition is one of cm.c's.
 *
 * Lifetimes: a handshake without progress is abandoned after
 * handshake_ms (an MRA extends that by the Service Timeout it carries);
 * a passive side that has sent its REP keeps its mapping until RTU,
 * DREQ, REJ or its own teardown, as the guest's CM goes established on
 * the first data even when no RTU arrives; an established connection
 * lives until it is torn down; TimeWait drains for timewait_ms.  Every
 * timer class has one fixed duration, so each is a FIFO and arming and
 * expiry are O(1).
 *
 * When a client goes away, or reuses a comm ID of a connection it has
 * forgotten, the table speaks for it as cm.c's cm_destroy_id() would: a
 * DREQ to an established peer, a REJ to a pending handshake, a DREP to a
 * DREQ it was given.  Those MADs, and the answers to stale REQs, leave
 * through the emit callback.
 *
 * No I/O, no locking: the router serialises calls and passes time in.
 * The table is three files, one section each below (conn_priv.h is
 * what they share).
 */
#include <stddef.h>
#include <stdint.h>

#include "common/gid.h"

struct conn_table;

/* 0: no limit. */
struct conn_limits {
	/* A client's connections: those it started or answered, until
	 * they end.  Peer records and draining entries are not counted. */
	unsigned max_per_client;
	unsigned handshake_ms; /* abandon a handshake without progress */
	unsigned timewait_ms;  /* drain after DREP/REJ/SIDR_REP */
	/* Records of peers' REQs and SIDR_REQs nobody has answered yet,
	 * per port and per source GID on a port. */
	unsigned max_peer_records_per_port;
	unsigned max_peer_records_per_source;
	/* Draining entries in all; above it the oldest leave early. */
	unsigned max_timewait;
};

/* cm.c's states, seen from the client's side of the connection. */
enum conn_state {
	CONN_REQ_SENT, /* IB_CM_REQ_SENT, MRA_REQ_RCVD */
	CONN_REQ_RCVD, /* IB_CM_REQ_RCVD, MRA_REQ_SENT */
	CONN_REP_SENT, /* IB_CM_REP_SENT, MRA_REP_RCVD */
	CONN_REP_RCVD, /* IB_CM_REP_RCVD, MRA_REP_SENT */
	CONN_ESTABLISHED,
	CONN_DREQ_SENT,
	CONN_DREQ_RCVD,
	CONN_TIMEWAIT,
	CONN_SIDR_REQ_SENT,
	CONN_STATE_MAX
};

/* How to reach the peer of a connection, to speak for the client. */
struct conn_path {
	struct gid local_gid; /* the client's (our) GID */
	struct gid peer_gid;
	uint16_t pkey_index;
	uint8_t grh, sl, hop_limit, traffic_class;
	/* The GID type the peer's MAD came on (IBV_GID_TYPE_* + 1), for
	 * what answers it; 0: the port's preference. */
	uint8_t gid_type;
	uint32_t flow_label;
};

/* What the table (or the router) sent on its own, for the counters. */
enum conn_answer {
	CONN_ANS_REJ_NO_LISTENER,  /* REQ for a GID no client owns */
	CONN_ANS_SIDR_NO_LISTENER, /* SIDR_REQ for a GID no client owns */
	CONN_ANS_DREP_UNKNOWN,     /* DREQ for no connection (cm_issue_drep) */
	CONN_ANS_REJ_STALE,        /* REQ matching a connection in TimeWait */
	CONN_ANS_DREQ_ABANDONED,   /* client gone or ID reused: established */
	CONN_ANS_REJ_ABANDONED,    /* ... a handshake */
	CONN_ANS_DREP_ABANDONED,   /* ... a DREQ it had been given */
	CONN_ANS_SIDR_REJ_ABANDONED, /* ... a SIDR_REQ it had been given */
	CONN_ANS_MAX
};

struct conn_emit {
	enum conn_answer why;
	unsigned port;
	const struct conn_path *path; /* from local_gid to peer_gid */
	const uint8_t *mad;           /* MAD_SIZE bytes */
};

typedef void (*conn_emit_fn)(void *arg, const struct conn_emit *e);

struct conn_counts {
	unsigned total;
	unsigned comm, sidr;
	unsigned by_state[CONN_STATE_MAX];
	unsigned peer_records;         /* unanswered peers' REQs, now */
	uint64_t peer_records_refused; /* over a port's or a source's bound */
	uint64_t peer_records_evicted; /* for a client holding fewer */
	uint64_t timewait_evicted;     /* left TimeWait early (max_timewait) */
};

/* One entry, as the status shows it. */
struct conn_view {
	int sidr;
	enum conn_state state;
	unsigned port;
	uint32_t guest_id, host_id, peer_id;
	int has_peer;
	struct gid peer_gid;
	int64_t expires_in_ms; /* -1: no timer */
};
/* ---- conn_table.c: the table, its timers and listings ------------------- */

/* random_operand: XORed into allocated IDs so that they are not
 * predictable (as the kernel CM does); tests pass a fixed one.  emit may
 * be NULL (nothing is sent on anyone's behalf). */
struct conn_table *conn_table_new(const struct conn_limits *lim,
				  uint32_t random_operand, conn_emit_fn emit,
				  void *emit_arg);
void conn_table_free(struct conn_table *ct);
/* New counting limits (a reload); the timers keep theirs. */
void conn_table_set_limits(struct conn_table *ct,
			   const struct conn_limits *lim);

/* Calls fn for a client's entries after the first skip, at most max of
 * them, in a stable order: comm IDs, then SIDR request IDs, each by the
 * guest's ID (peer records, which have none yet, first). */
void conn_table_client_foreach(struct conn_table *ct, uint64_t client,
			       unsigned skip, unsigned max, uint64_t now_ms,
			       void (*fn)(void *arg, const struct conn_view *v),
			       void *arg);
/* The time until the next timer, or UINT64_MAX. */
uint64_t conn_table_next_deadline(struct conn_table *ct);

void conn_table_counts(struct conn_table *ct, struct conn_counts *out);
void conn_table_client_counts(struct conn_table *ct, uint64_t client,
			      struct conn_counts *out);

/* ---- conn.c: the state machine -------------------------------------------- */

/* The low TID half of the daemon's own answer to `request` (a REJ of a
 * REQ, a DREP of a DREQ, a SIDR_REP): the request's, where it is the
 * sender's comm ID as cm.c forms TIDs (cm_form_tid(); cm.c answers with
 * the TID it was sent), otherwise a fresh one: a spoofed request does not
 * choose what our sends are keyed by in ib_umad. */
uint32_t conn_answer_tid(struct conn_table *ct, const uint8_t *request);

const char *conn_state_name(enum conn_state s);
const char *conn_answer_name(enum conn_answer a);

/*
 * A client's outbound CM MAD on path, rewritten in place (its own comm
 * ID or SIDR request ID, and TID).  max_conns (0: the table's limit)
 * bounds the client's entries.  Returns 0, or
 * -EINVAL   a REQ, REP, MRA or SIDR_REQ with ID 0, or a port index
 *           above 255;
 * -ENOENT   RTU, DREQ, DREP, LAP or APR for a comm ID this client has not
 *           started, or a REP, MRA or REJ that answers no REQ this client
 *           received (a SIDR_REP no SIDR_REQ): a client can only act on
 *           its own connections;
 * -EPROTO   the message does not fit the connection's state (an RTU
 *           without a REP, a DREP without a DREQ, ...);
 * -ENOSPC   the client's quota (a reply that would take on a peer's
 *           connection counts as much as a REQ), or the table is full
 *           (its entries, or 65,535 clients holding entries);
 * -ENOMEM.
 */
int conn_outbound(struct conn_table *ct, uint64_t client, unsigned port,
		  uint8_t *mad, const struct conn_path *path, uint64_t now_ms,
		  unsigned max_conns);

/* The GID type a client's MAD, translated by conn_outbound(), leaves as:
 * that of the peer's MAD its connection began with when the peer began
 * it (the REQ a REP answers, as cm_init_av_for_response() makes the
 * passive side's path), 0 (the port's preference) otherwise. */
uint8_t conn_reply_gid_type(struct conn_table *ct, unsigned port,
			    const uint8_t *mad);

/*
 * An inbound CM MAD that is routed by ID (everything but REQ and
 * SIDR_REQ), arriving on path (local_gid: ours, peer_gid: the sender).
 * Returns 0 with *client set and the MAD rewritten for that client, or
 * -ENOENT   nobody's ID (a DREQ is answered with a DREP);
 * -EBADR    Remote Comm ID 0 and no record of the peer's REQ;
 * -EPERM    right host ID, wrong peer comm ID or GID: nothing changes;
 * -EPROTO   not valid in the connection's state (a duplicate, an RTU
 *           for no REP): nothing changes;
 * -ESTALE   a connection the client has abandoned: absorbed (a DREQ is
 *           answered).
 */
int conn_inbound(struct conn_table *ct, unsigned port, uint8_t *mad,
		 const struct conn_path *path, uint64_t now_ms,
		 uint64_t *client);

/* An inbound REQ routed to client by its destination GID: remember the
 * peer.  Returns 0 (deliver it), or -ESTALE when it names a connection in
 * TimeWait (answered with REJ "stale connection", as cm.c does). */
int conn_note_req(struct conn_table *ct, uint64_t client, unsigned port,
		  const uint8_t *mad, const struct conn_path *path,
		  uint64_t now_ms);

/* An inbound SIDR_REQ routed to client: remember its sender, so that the
 * client's SIDR_REP must answer one (and can be addressed to it). */
int conn_note_sidr_req(struct conn_table *ct, uint64_t client, unsigned port,
		       const uint8_t *mad, const struct conn_path *path,
		       uint64_t now_ms);
/* The record the last conn_note_req() or conn_note_sidr_req() made, as a
 * token (0: it made none), taken once. */
uint32_t conn_take_noted(struct conn_table *ct);
/* The REQ whose record that was never reached its client (its queue was
 * full): the record goes, if it is still client's and unanswered. */
void conn_forget_noted(struct conn_table *ct, uint32_t token, uint64_t client);
/* Where a client's outbound MAD must go, for a client that cannot say
 * (QEMU's pvrdma addresses every MAD to the guest's own GID): a REQ to
 * its Primary Remote Port GID, a SIDR_REQ to rdma_cm's destination
 * address, everything else to the peer of the connection or the REQ it
 * answers.  0 and *dst, or -ENOENT. */
int conn_destination(struct conn_table *ct, uint64_t client, unsigned port,
		     const uint8_t *mad, struct gid *dst);

/* The entries whose timers have run out, each as cm.c ends its state's
 * wait (cm_process_send_error(), the TimeWait timer): a DREQ never
 * answered enters TimeWait, the rest go.  Returns how many expired. */
unsigned conn_expire(struct conn_table *ct, uint64_t now_ms);
/* The same, at most max entries (the caller holds a lock others wait on). */
unsigned conn_expire_some(struct conn_table *ct, uint64_t now_ms, unsigned max);

/* The client gave up gid on port (a QEMU guest reset: its CM is gone):
 * its connections from that GID end as if the client had gone.  0, or
 * -ENOMEM (they stay). */
int conn_purge_gid(struct conn_table *ct, uint64_t client, unsigned port,
		   const struct gid *gid);

/* The client is gone: tell its peers (DREQ, REJ, DREP as its states ask)
 * and forget its entries. */
void conn_purge_client(struct conn_table *ct, uint64_t client);

/* ---- conn_restore.c: a previous daemon's table --------------------------- */

/*
 * Persistence (conn_store.c).  conn_restore_open() keeps the entries in a
 * file mapping at path that outlives the process, and when the file holds
 * a previous daemon's entries (of this boot; port_ids name the ports by
 * index, and entries on ports that moved follow them), takes them back:
 * *restored is 1 then (err may note entries that were lost).  Their
 * clients are gone; each may claim its entries with the token it was
 * given (conn_restore_claim), and conn_restore_purge_unclaimed() ends the rest.
 * max_entries is at most 16,646,144 and max_owners at most 65,535; each
 * owner's first gids_per_owner GIDs are kept too (conn_restore_gid_note).
 */
struct conn_table *conn_restore_open(const struct conn_limits *lim,
				     uint32_t random_operand, conn_emit_fn emit,
				     void *emit_arg, const char *path,
				     uint32_t max_entries, uint32_t max_owners,
				     uint32_t gids_per_owner,
				     const uint64_t *port_ids, unsigned nports,
				     int *restored, char *err, size_t errlen);
/* A GID a client that may resume registered (add) or gave up: kept in
 * the file with its owner record.  0, or -ENOSPC when the owner's slice
 * is full (then it is not kept), -errno when the file has no room. */
int conn_restore_gid_note(struct conn_table *ct, uint64_t client, unsigned port,
			  const uint8_t gid[16], int add);
/* The GIDs of each owner a restarted daemon took back from the file. */
void conn_restore_gids_foreach(struct conn_table *ct,
			       void (*fn)(void *arg, uint64_t client,
					  unsigned port, const uint8_t gid[16]),
			       void *arg);
/* Whether client is an owner of the previous daemon's that has not come
 * back (claimed its entries) yet: what arrives for it is held back. */
int conn_restore_owner_away(struct conn_table *ct, uint64_t client);
/* The daemon is going and its clients are not: purging a client keeps
 * its entries and owner record from now on, for the next daemon. */
void conn_restore_detach(struct conn_table *ct);
/* A client that may claim its entries back after a restart. */
int conn_restore_owner_add(struct conn_table *ct, uint64_t client, uint32_t uid,
			   const uint8_t token[16]);
/* A QEMU client, whose token is its process's identity (QEMU cannot keep
 * one): claimed only by conn_restore_claim_identity(). */
int conn_restore_owner_add_qemu(struct conn_table *ct, uint64_t client,
				uint32_t uid, const uint8_t identity[16]);
/* A QEMU client takes over the entries of the previous daemon's QEMU
 * client of the same identity and uid: 0 with *old_client, -ENOENT (none
 * not yet claimed), -ENOTUNIQ (several: none is taken). */
int conn_restore_claim_identity(struct conn_table *ct, uint32_t uid,
				const uint8_t identity[16], uint64_t new_client,
				uint64_t *old_client);
/* A new client (new_client, with new_token from now on) takes over
 * old_client's entries: 0, -ENOENT (no such owner, or claimed already),
 * -EPERM (wrong uid or token), -EEXIST (new_client has entries already). */
int conn_restore_claim(struct conn_table *ct, uint64_t old_client, uint32_t uid,
		       const uint8_t token[16], uint64_t new_client,
		       const uint8_t new_token[16]);
/* Owners restored but not claimed: purged (their peers are told). */
unsigned conn_restore_purge_unclaimed(struct conn_table *ct);
/* After a restore, new client ids must start above this. */
uint64_t conn_restore_max_client(struct conn_table *ct);

#endif
