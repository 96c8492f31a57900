/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_CONN_PRIV_H
#define RCM_CONN_PRIV_H

/*
 * Inside the connection table (conn.h is its API): the entry, the table,
 * and what its three files give each other, one section per file.
 *   conn_table.c    storage: slots, IDs, records, timers, listings
 *   conn.c          the state machine (cm.c's handlers)
 *   conn_restore.c  a previous daemon's table, its owners and tokens
 * The storage calls neither of the others: the state machine and the
 * restore call down into it, and the restore into the state machine
 * (its unclaimed owners' peers are told as a departure tells them).
 */
#include <stddef.h>
#include <stdint.h>

#include "common/cm_mad.h"
#include "common/hset.h"
#include "common/tree.h"
#include "mux/conn.h"

enum conn_kind { CK_COMM, CK_SIDR };

/* Timer classes, one fixed duration each: handshake, timewait, a
 * handshake extended by each of the 32 MRA Service Timeouts, and 2^k ms
 * for cm.c's own windows (a REP's retries, a DREQ's next try). */
enum {
	TC_NONE,
	TC_HANDSHAKE,
	TC_TIMEWAIT,
	TC_MRA0,
	TC_POW0 = TC_MRA0 + 32,
	TC_POW_N = 24,
	TC_MAX = TC_POW0 + TC_POW_N
};

/* Entry flags. */
enum {
	CF_LIVE = 1 << 0,     /* written last: the slot holds an entry */
	CF_SIDR = 1 << 1,     /* a SIDR request ID, not a comm ID */
	CF_HOSTED = 1 << 2,   /* has a host ID */
	CF_GUESTED = 1 << 3,  /* found by its guest ID */
	CF_IN_PEER = 1 << 4,  /* found by its peer's ID */
	CF_ORPHAN = 1 << 5,   /* the client has abandoned it */
	CF_CHARGED = 1 << 6,  /* counts against the client's quota */
	CF_PEER_REC = 1 << 7, /* a peer's REQ the client has not answered */
};

struct conn {
	uint32_t guest_id;
	uint32_t peer_id;  /* 0: not known yet */
	uint32_t peer_qpn; /* 24 bits; above them, conn_timing_*() */
	uint32_t guest_tid_hi, guest_tid_lo; /* of the client's last send */
	uint32_t path;                       /* its path record */
	uint32_t deadline;                   /* table ms, modulo 2^32 */
	uint32_t timer_prev, timer_next;     /* index + 1; a free list's too */
	uint16_t owner;                      /* its client's record */
	uint8_t port;
	uint8_t gen;   /* of the slot, its high 8 bits (conn_gen()) */
	uint8_t state; /* enum conn_state; the high nibble: last send's attr */
	uint8_t flags;
	uint8_t timer;  /* class, TC_NONE */
	uint8_t gen_lo; /* of the slot, its low 2 bits; the rest free */
};

_Static_assert(sizeof(struct conn) == 44, "an entry is 44 bytes");
/* Path records are in the state file too: a field of conn_path takes
 * padding, never size. */
_Static_assert(sizeof(struct conn_path) == 44, "a path is 44 bytes");

/* A path and our CA GUID, shared by the connections that use them. */
struct conn_pathrec {
	struct conn_path path;
	uint32_t refs; /* 0: free */
	uint64_t ca_guid;
	uint32_t next_free;
	uint32_t pad;
};

struct conn_client {
	uint64_t id;
	uint32_t n;         /* entries */
	uint32_t charged;   /* of them, what its quota counts */
	uint32_t peer_recs; /* of them, peers' REQs it has not answered */
	uint32_t timewait;  /* of them, in TimeWait (its share, trimmed) */
	struct hset conns;
	uint8_t used;
	uint8_t pinned; /* an owner that may resume: kept without entries */
	uint8_t away;   /* a previous daemon's owner, not back yet */
	uint16_t next_free;
};

/* Peer records per (port, source GID); the zero GID counts a port's. */
struct src_count {
	RB_ENTRY(src_count) link;
	unsigned port;
	struct gid gid;
	unsigned n;
};

RB_HEAD(src_tree, src_count);

/* Slot indexes take 22 bits of a host ID (conn_slot_word()); wire TIDs
 * of entries are (index + 1) << 8 | sequence, those of the table's own
 * sends are above them all. */
#define CONN_MAX_ENTRIES (1u << 22)
#define CONN_OWN_TID_BASE 0xff000000u
#define CONN_MAX_CLIENTS 0xffffu
#define CONN_NO_OWNER 0xffffu
/* The record that holds what clients that are gone left draining in
 * TimeWait: no client has this ID (the daemon counts them from 1; the
 * state file takes IDs below 2^48). */
#define CONN_DEPARTED ((UINT64_C(1) << 48) - 1)
/* A freed slot waits until this many are free before it is reused: a
 * host ID (the slot and its 10-bit generation) comes back after 1,024
 * times this many connections, 16,777,216; cm.c's after 2^32 (its IDs
 * are cyclic in 32 bits).  The cost is the entries' memory, 44 bytes
 * each: 720 KiB, touched as the table first grows. */
#define CONN_REUSE_AFTER 16384u

struct conn_table {
	struct conn_limits lim;
	uint32_t random_operand;
	uint32_t tid_seq;
	conn_emit_fn emit;
	void *emit_arg;
	uint64_t now_ms; /* the latest time a call gave: deadlines' reference */

	struct conn *e; /* entries */
	uint32_t cap, hwm;
	uint32_t free_head, free_tail, nfree; /* FIFO, index + 1 */
	struct conn_pathrec *paths;
	uint32_t path_cap, path_hwm, path_free; /* LIFO, index + 1 */
	struct hset path_index;
	struct conn_client *cl; /* clients' records */
	uint32_t cl_cap;        /* records there can be */
	uint32_t ncl;           /* records ever used */
	uint32_t cl_free;       /* index + 1 */
	struct hset cl_index;
	struct hset peers;
	struct src_tree sources; /* peer record counts */

	uint32_t timer_head[TC_MAX], timer_tail[TC_MAX];
	unsigned timer_len[TC_MAX];
	uint64_t timer_ms[TC_MAX];
	struct conn_counts counts;
	uint32_t noted;            /* the last peer record made: its token */
	unsigned call_max;         /* the current call's client limit */
	struct conn_store *store;  /* NULL: entries on the heap */
	struct conn_gid_rec *gids; /* the store's: owners' GIDs */
	uint32_t gids_per_owner;
	int detached; /* the daemon is going; entries stay */
};

/* Access to entries, paths and clients, for all three files. */

static inline struct conn *conn_at(const struct conn_table *ct, uint32_t idx)
{
	return &ct->e[idx];
}

static inline uint32_t conn_idx(const struct conn_table *ct,
				const struct conn *c)
{
	return (uint32_t)(c - ct->e);
}

static inline enum conn_kind conn_kind_of(const struct conn *c)
{
	return c->flags & CF_SIDR ? CK_SIDR : CK_COMM;
}

static inline enum conn_state conn_state_of(const struct conn *c)
{
	return (enum conn_state)(c->state & 0x0f);
}

static inline const struct conn_path *conn_path_of(const struct conn_table *ct,
						   const struct conn *c)
{
	return &ct->paths[c->path].path;
}

static inline struct conn_client *conn_client_of(const struct conn_table *ct,
						 const struct conn *c)
{
	return &ct->cl[c->owner];
}

static inline uint64_t conn_client_id(const struct conn_table *ct,
				      const struct conn *c)
{
	return ct->cl[c->owner].id;
}

/* A slot's 10-bit generation: gen its high 8 bits, so that an entry of a
 * state file written when it was all the generation (gen_lo 0) keeps its
 * host ID. */
static inline uint32_t conn_gen(const struct conn *c)
{
	return (uint32_t)c->gen << 2 | (c->gen_lo & 3u);
}

static inline void conn_gen_set(struct conn *c, uint32_t gen)
{
	c->gen = (uint8_t)(gen >> 2 & 0xff);
	c->gen_lo = (uint8_t)(gen & 3);
}

/* Slot index (below 2^22, MUX_STATE_MAX_ENTRIES) and generation, the 32
 * bits a host ID is made of. */
#define CONN_IDX_BITS 22
#define CONN_IDX_MASK ((1u << CONN_IDX_BITS) - 1)

static inline uint32_t conn_slot_word(const struct conn_table *ct,
				      const struct conn *c)
{
	return conn_gen(c) << CONN_IDX_BITS | conn_idx(ct, c);
}

static inline uint32_t conn_host_id(const struct conn_table *ct,
				    const struct conn *c)
{
	if (!(c->flags & CF_HOSTED))
		return 0;
	return conn_slot_word(ct, c) ^ ct->random_operand;
}

/*
 * cm.c's retry timing of a connection, read from its REQ as cm.c reads
 * it (cm_req_handler(), ib_send_cm_req()): a MAD is sent again up to
 * `retries` times, 2^log2_ms ms apart.  Kept in the byte above the peer's
 * 24-bit QPN: log2_ms in 4 bits (beyond 2^15 ms, 33 s a try, clamped),
 * retries in 4.
 */
#define CONN_QPN_MASK 0xffffffu

static inline uint32_t conn_peer_qpn(const struct conn *c)
{
	return c->peer_qpn & CONN_QPN_MASK;
}

static inline void conn_set_peer_qpn(struct conn *c, uint32_t qpn)
{
	c->peer_qpn = (c->peer_qpn & ~CONN_QPN_MASK) | (qpn & CONN_QPN_MASK);
}

static inline unsigned conn_timing_log2_ms(const struct conn *c)
{
	return (c->peer_qpn >> 24) & 0xf;
}

static inline unsigned conn_timing_retries(const struct conn *c)
{
	return c->peer_qpn >> 28;
}

/* From an IBA time (4.096 us * 2^t), as cm_convert_to_ms() rounds it. */
static inline void conn_set_timing(struct conn *c, unsigned iba_time,
				   unsigned retries)
{
	unsigned log2_ms = cm_timeout_log2_ms(iba_time);

	if (log2_ms > 15)
		log2_ms = 15;
	c->peer_qpn = conn_peer_qpn(c) | (uint32_t)log2_ms << 24 |
		      (uint32_t)(retries & 0xf) << 28;
}

/* The attribute of the client's last send on the entry (0: none yet),
 * kept in the state byte's high nibble (conn_table_tid_out()). */
static inline unsigned conn_last_sent(const struct conn *c)
{
	return c->state >> 4 ? 0x0fu + (c->state >> 4) : 0;
}

/* A deadline read against now: negative once passed. */
static inline int64_t conn_deadline_in(const struct conn *c, uint64_t now_ms)
{
	return (int32_t)(c->deadline - (uint32_t)now_ms);
}

/* ---- conn_table.c: slots, IDs, records, timers ---------------------------- */

/* The keys of the table's sets (hset.h), ctx the table: a client's
 * entries by guest ID, the peers' IDs, the clients' records, the paths. */
uint32_t conn_table_client_key(const void *ctx, uint32_t idx);
uint32_t conn_table_peer_key(const void *ctx, uint32_t idx);
uint32_t conn_table_cl_key(const void *ctx, uint32_t idx);
uint32_t conn_table_pathrec_key(const void *ctx, uint32_t idx);

/* A table with no arrays yet (conn_table_new() puts them on the heap,
 * conn_restore_open() in the state file); NULL when out of memory. */
struct conn_table *conn_table_alloc(const struct conn_limits *lim,
				    uint32_t random_operand, conn_emit_fn emit,
				    void *emit_arg);
/* Every call passes its time in; deadlines are read against the latest
 * (kept with the entries, for the next daemon to read them). */
void conn_table_clock(struct conn_table *ct, uint64_t now_ms);

/* Timers: one FIFO per class (TC_*), every entry of a class as long. */
void conn_table_timer_stop(struct conn_table *ct, struct conn *c);
/* To the tail of class tc, its deadline already set (a restore). */
void conn_table_timer_append(struct conn_table *ct, struct conn *c, int tc);
/* (Re-)arm: the deadline from now, to the tail of class tc. */
void conn_table_timer_arm(struct conn_table *ct, struct conn *c, int tc,
			  uint64_t now_ms);
/* The entry of class tc whose deadline comes first, or NULL. */
struct conn *conn_table_timer_first(const struct conn_table *ct, int tc);
/* Draining entries (TimeWait, and what a client abandoned) count against
 * nobody's quota; above max_timewait the oldest leave early.  Run as a
 * call begins, when nothing holds an entry. */
void conn_table_timewait_trim(struct conn_table *ct);

/* Clients' records: the index of client id's, or CONN_NO_OWNER. */
uint32_t conn_table_cl_find(const struct conn_table *ct, uint64_t id);
struct conn_client *conn_table_client_get(struct conn_table *ct, uint64_t id);
/* A record for a new client (in the state file, its owner record): its
 * index, or CONN_NO_OWNER when none is left or memory ran out. */
uint32_t conn_table_cl_new(struct conn_table *ct, uint64_t id);
/* The record goes once it holds no entry and is not pinned. */
void conn_table_cl_forget_empty(struct conn_table *ct, uint32_t i);
/* A client's record and all its entries, gone without a word to anyone
 * (conn_purge_record() tells the peers first). */
void conn_table_drop_client(struct conn_table *ct, uint32_t owner);

/* Peer records, bounded per port and per source GID (NULL gid: the
 * port's count); create: make the count when missing (NULL: no memory). */
struct src_count *conn_table_src_get(struct conn_table *ct, unsigned port,
				     const struct gid *gid, int create);
/* One more peer record on its port's and its source's counts (either may
 * be NULL when memory ran out while restoring). */
void conn_table_peer_rec_count(struct conn_table *ct, struct src_count *port_sc,
			       struct src_count *src_sc);
/* Room for one more record, for client, of a REQ from gid on port: 0,
 * or -ENOSPC (counted as refused).  A full port takes the oldest record
 * of a client that holds more than client would (counted as evicted):
 * no client's records can take another's share of the port's. */
int conn_table_peer_rec_take(struct conn_table *ct, unsigned port,
			     const struct gid *gid, uint64_t client);
/* Gives back what conn_table_peer_rec_take() took. */
void conn_table_peer_rec_undo(struct conn_table *ct, unsigned port,
			      const struct gid *gid);
/* The entry is no longer a peer's record (answered, or going). */
void conn_table_peer_rec_drop(struct conn_table *ct, struct conn *c);

/* Entries. */
void conn_table_set_state(struct conn_table *ct, struct conn *c,
			  enum conn_state s);
/* No guest ID finds the entry any more (the guest reused it). */
void conn_table_guest_unlink(struct conn_table *ct, struct conn *c);
/* The entry, found by no guest ID and charged to nobody, moves to the
 * record at index owner: 0, or -ENOMEM (it stays where it was). */
int conn_table_rehome(struct conn_table *ct, struct conn *c, uint32_t owner);
/* The slot goes back, oldest first; its generation and TID sequence
 * stay, so that the next entry in it has other IDs. */
void conn_table_slot_free(struct conn_table *ct, struct conn *c);
/* Room in the client's set for one more: 0 or -ENOMEM. */
int conn_table_client_room(struct conn_table *ct, struct conn_client *cc);
/* The entry out of everything, its slot freed, its client's record too
 * once empty. */
void conn_table_remove(struct conn_table *ct, struct conn *c);
/* The table's counts of an entry (new, or taken back from a previous
 * daemon). */
void conn_table_account(struct conn_table *ct, struct conn *c);
/* Whether the client's quota (what it started or took on, live) is full
 * under the table's limit and the current call's. */
int conn_table_quota_full(struct conn_table *ct, const struct conn_client *cc);
/* A new entry of client's in state on path, charged to its quota unless
 * it is a peer's record (charge 0): NULL and *err -EINVAL (port above
 * 255), -ENOSPC (quota, records, slots) or -ENOMEM. */
struct conn *conn_table_entry_new(struct conn_table *ct, enum conn_kind kind,
				  uint64_t client, unsigned port,
				  enum conn_state state,
				  const struct conn_path *path,
				  uint64_t ca_guid, int charge, int *err);
/* conn_table_entry_new(), charged, with its guest ID and host ID. */
struct conn *conn_table_create_bound(struct conn_table *ct, enum conn_kind kind,
				     uint64_t client, unsigned port,
				     uint32_t guest_id, enum conn_state state,
				     const struct conn_path *path,
				     uint64_t ca_guid, int *err);
/* Give an entry its guest ID and its host ID (derived from its slot), and
 * let both find it. */
void conn_table_bind(struct conn_table *ct, struct conn *c, uint32_t guest_id);
/* The peer's comm ID is known: the peers' set finds the entry by it (the
 * first entry with that ID and GID keeps it). */
void conn_table_peer_set(struct conn_table *ct, struct conn *c,
			 uint32_t peer_id);

/* Lookups; NULL when nothing matches. */
struct conn *conn_table_host_find(struct conn_table *ct, enum conn_kind kind,
				  unsigned port, uint32_t host_id);
struct conn *conn_table_guest_find(struct conn_table *ct, enum conn_kind kind,
				   uint64_t client, unsigned port,
				   uint32_t guest_id);
struct conn *conn_table_peer_find_kind(struct conn_table *ct,
				       enum conn_kind kind, unsigned port,
				       uint32_t peer_id, const struct gid *gid);
/* conn_table_peer_find_kind() for comm IDs. */
struct conn *conn_table_peer_find(struct conn_table *ct, unsigned port,
				  uint32_t peer_id, const struct gid *gid);
/* A client's record of a peer's REQ (or SIDR_REQ) with that peer ID, from
 * whichever GID: the peer ID is all a reply names. */
struct conn *conn_table_peer_record_of(struct conn_table *ct,
				       enum conn_kind kind, uint64_t client,
				       unsigned port, uint32_t peer_id);

/* TIDs.  A client's send gets a fresh low TID half unless it repeats its
 * last send (same attribute and guest TID): a retransmission keeps its
 * TID. */
void conn_table_tid_out(struct conn *c, const struct conn_table *ct,
			uint8_t *mad);
/* Whether a client's MAD repeats its last send on c (same attribute and
 * guest TID): a retransmission, which the MAD layer makes of the same
 * message while the first is unanswered. */
int conn_table_tid_repeats(const struct conn *c, const uint8_t *mad);
/* A message that echoes the TID of our last send gets the guest's back. */
void conn_table_tid_in(const struct conn_table *ct, const struct conn *c,
		       uint8_t *mad);
/* The TID of a client's answer that belongs to no entry (a REJ of a REQ
 * before any reply, a SIDR_REP): the request's where its low half is
 * the requester's ID `sender` (cm.c echoes it), else one of our own. */
void conn_table_tid_answer(struct conn_table *ct, uint8_t *mad,
			   uint32_t sender);
/* The low TID half of an answer to a message with low half `low` from
 * `sender`: `low` where it is the sender's comm ID, else one of ours. */
uint32_t conn_table_echo_tid(struct conn_table *ct, uint32_t low,
			     uint32_t sender);

/* ---- conn.c: the state machine -------------------------------------------- */

/* Every entry of a client's record, abandoned as cm_destroy_id() would
 * (its peers told), then gone, and the record with them. */
void conn_purge_record(struct conn_table *ct, uint32_t owner);

#endif
