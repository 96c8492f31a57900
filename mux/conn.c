// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "conn.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_mad.h"
#include "../common/tree.h"
#include "../common/wire.h"
#include "conn_store.h"

enum conn_kind { CK_COMM, CK_SIDR };

/* Timer classes, one fixed duration each: handshake, timewait, and a
 * handshake extended by each of the 32 MRA Service Timeouts. */
enum { TC_NONE, TC_HANDSHAKE, TC_TIMEWAIT, TC_MRA0, TC_MAX = TC_MRA0 + 32 };

struct conn {
	RB_ENTRY(conn) host_link;  /* by (kind, port, host_id) */
	RB_ENTRY(conn) guest_link; /* by (kind, client, port, guest_id) */
	RB_ENTRY(conn) peer_link;  /* by (port, peer_id, peer_gid) */
	TAILQ_ENTRY(conn) timer_link;
	LIST_ENTRY(conn) client_link;
	uint8_t kind, state, timer;
	uint8_t in_host, in_guest, in_peer;
	uint8_t orphan;    /* the client has abandoned it */
	uint8_t charged;   /* counts against the client's quota */
	uint8_t peer_rec;  /* a peer's REQ the client has not answered */
	uint16_t tid_attr; /* attribute of the last send */
	unsigned port;
	uint64_t client;
	uint32_t host_id, guest_id;
	uint32_t peer_id; /* 0: not known yet */
	uint32_t peer_qpn;
	uint32_t wire_tid; /* low TID half of the last send */
	uint64_t guest_tid;
	uint64_t ca_guid; /* our REQ's Local CA GUID */
	uint64_t deadline_ms;
	struct conn_path path;
};

struct conn_client {
	RB_ENTRY(conn_client) link;
	uint64_t id;
	unsigned n;       /* entries listed */
	unsigned charged; /* of them, what its quota counts */
	LIST_HEAD(, conn) conns;
};

/* Peer records per (port, source GID); the zero GID counts a port's. */
struct src_count {
	RB_ENTRY(src_count) link;
	unsigned port;
	struct gid gid;
	unsigned n;
};

static int conn_host_cmp(struct conn *a, struct conn *b)
{
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	return a->host_id < b->host_id ? -1 : a->host_id > b->host_id;
}

static int conn_guest_cmp(struct conn *a, struct conn *b)
{
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	if (a->client != b->client)
		return a->client < b->client ? -1 : 1;
	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	return a->guest_id < b->guest_id ? -1 : a->guest_id > b->guest_id;
}

static int conn_peer_cmp(struct conn *a, struct conn *b)
{
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	if (a->peer_id != b->peer_id)
		return a->peer_id < b->peer_id ? -1 : 1;
	return gid_cmp(&a->path.peer_gid, &b->path.peer_gid);
}

static int conn_cclient_cmp(struct conn_client *a, struct conn_client *b)
{
	return a->id < b->id ? -1 : a->id > b->id;
}

static int conn_src_cmp(struct src_count *a, struct src_count *b)
{
	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	return gid_cmp(&a->gid, &b->gid);
}

RB_HEAD(host_tree, conn);
RB_HEAD(guest_tree, conn);
RB_HEAD(peer_tree, conn);
RB_HEAD(cclient_tree, conn_client);
RB_HEAD(src_tree, src_count);
TREE_GENERATE_STATIC(host_tree, conn, host_link, conn_host_cmp)
TREE_GENERATE_STATIC(guest_tree, conn, guest_link, conn_guest_cmp)
TREE_GENERATE_STATIC(peer_tree, conn, peer_link, conn_peer_cmp)
TREE_GENERATE_STATIC(cclient_tree, conn_client, link, conn_cclient_cmp)
TREE_GENERATE_STATIC(src_tree, src_count, link, conn_src_cmp)

struct conn_table {
	struct conn_limits lim;
	uint32_t random_operand;
	uint32_t next;
	uint32_t tid_seq;
	conn_emit_fn emit;
	void *emit_arg;
	struct host_tree hosts;
	struct guest_tree guests;
	struct peer_tree peers;
	struct cclient_tree clients;
	struct src_tree sources;
	TAILQ_HEAD(, conn) timers[TC_MAX];
	unsigned timer_len[TC_MAX];
	uint64_t timer_ms[TC_MAX];
	struct conn_counts counts;
	unsigned call_max;        /* the current call's client limit */
	struct conn_store *store; /* NULL: entries on the heap */
	int detached;             /* the daemon is going; entries stay */
};

static const char *const conn_state_names[CONN_STATE_MAX] = {
	[CONN_REQ_SENT] = "req_sent",           [CONN_REQ_RCVD] = "req_rcvd",
	[CONN_REP_SENT] = "rep_sent",           [CONN_REP_RCVD] = "rep_rcvd",
	[CONN_ESTABLISHED] = "established",     [CONN_DREQ_SENT] = "dreq_sent",
	[CONN_DREQ_RCVD] = "dreq_rcvd",         [CONN_TIMEWAIT] = "timewait",
	[CONN_SIDR_REQ_SENT] = "sidr_req_sent",
};

const char *conn_state_name(enum conn_state s)
{
	return (unsigned)s < CONN_STATE_MAX ? conn_state_names[s] : "invalid";
}

static const char *const conn_answer_names[CONN_ANS_MAX] = {
	[CONN_ANS_REJ_NO_LISTENER] = "rej_no_listener",
	[CONN_ANS_SIDR_NO_LISTENER] = "sidr_rep_no_listener",
	[CONN_ANS_DREP_UNKNOWN] = "drep_unknown_comm_id",
	[CONN_ANS_REJ_STALE] = "rej_stale_conn",
	[CONN_ANS_DREQ_ABANDONED] = "dreq_abandoned",
	[CONN_ANS_REJ_ABANDONED] = "rej_abandoned",
	[CONN_ANS_DREP_ABANDONED] = "drep_abandoned",
};

const char *conn_answer_name(enum conn_answer a)
{
	return (unsigned)a < CONN_ANS_MAX ? conn_answer_names[a] : "invalid";
}

struct conn_table *conn_table_new(const struct conn_limits *lim,
				  uint32_t random_operand, conn_emit_fn emit,
				  void *emit_arg)
{
	struct conn_table *ct = calloc(1, sizeof(*ct));
	int i;

	if (ct == NULL)
		return NULL;
	ct->lim = *lim;
	ct->random_operand = random_operand;
	ct->next = 1;
	ct->tid_seq = random_operand;
	ct->emit = emit;
	ct->emit_arg = emit_arg;
	RB_INIT(&ct->hosts);
	RB_INIT(&ct->guests);
	RB_INIT(&ct->peers);
	RB_INIT(&ct->clients);
	RB_INIT(&ct->sources);
	for (i = 0; i < TC_MAX; i++)
		TAILQ_INIT(&ct->timers[i]);
	ct->timer_ms[TC_HANDSHAKE] = lim->handshake_ms;
	ct->timer_ms[TC_TIMEWAIT] = lim->timewait_ms;
	for (i = 0; i < 32; i++)
		ct->timer_ms[TC_MRA0 + i] = lim->handshake_ms +
					    cm_service_timeout_ms((unsigned)i);
	return ct;
}

void conn_table_set_limits(struct conn_table *ct, const struct conn_limits *lim)
{
	ct->lim.max_per_client = lim->max_per_client;
	ct->lim.max_peer_records_per_port = lim->max_peer_records_per_port;
	ct->lim.max_peer_records_per_source = lim->max_peer_records_per_source;
	ct->lim.max_timewait = lim->max_timewait;
}

uint32_t conn_next_tid(struct conn_table *ct)
{
	if (++ct->tid_seq == 0)
		ct->tid_seq = 1;
	if (ct->store)
		*conn_store_counter(ct->store,
				    CONN_STORE_TID_SEQ) = ct->tid_seq;
	return ct->tid_seq;
}

/* ---- timers: one FIFO per duration class -------------------------------- */

static void conn_timer_stop(struct conn_table *ct, struct conn *c)
{
	if (c->timer != TC_NONE) {
		TAILQ_REMOVE(&ct->timers[c->timer], c, timer_link);
		ct->timer_len[c->timer]--;
		c->timer = TC_NONE;
		c->deadline_ms = 0;
	}
}

/* (Re-)arm: to the tail, as every entry of a class has the same length. */
static void conn_timer_arm(struct conn_table *ct, struct conn *c, int tc,
			   uint64_t now_ms)
{
	conn_timer_stop(ct, c);
	c->timer = (uint8_t)tc;
	c->deadline_ms = now_ms + ct->timer_ms[tc];
	TAILQ_INSERT_TAIL(&ct->timers[tc], c, timer_link);
	ct->timer_len[tc]++;
}

static void conn_remove(struct conn_table *ct, struct conn *c);

/*
 * Draining entries (TimeWait, and what a client abandoned) count against
 * nobody's quota, so a tenant's finished connections never block its new
 * ones; they are bounded as a whole instead, and above the bound the
 * oldest leaves early (it only absorbs stray MADs).  Run as each call
 * begins, when nothing holds an entry.
 */
static void conn_timewait_trim(struct conn_table *ct)
{
	struct conn *c;

	while (ct->lim.max_timewait &&
	       ct->timer_len[TC_TIMEWAIT] > ct->lim.max_timewait &&
	       (c = TAILQ_FIRST(&ct->timers[TC_TIMEWAIT])) != NULL) {
		conn_remove(ct, c);
		ct->counts.timewait_evicted++;
	}
}

/* ---- peer records: bounded per port and per source, charged to nobody -- */

static struct src_count *conn_src_get(struct conn_table *ct, unsigned port,
				      const struct gid *gid, int create)
{
	struct src_count key = { .port = port }, *sc;

	if (gid)
		key.gid = *gid;
	sc = RB_FIND(src_tree, &ct->sources, &key);
	if (sc || !create)
		return sc;
	sc = calloc(1, sizeof(*sc));
	if (sc == NULL)
		return NULL;
	*sc = key;
	RB_INSERT(src_tree, &ct->sources, sc);
	return sc;
}

static void conn_src_forget_empty(struct conn_table *ct, struct src_count *sc)
{
	if (sc && sc->n == 0) {
		RB_REMOVE(src_tree, &ct->sources, sc);
		free(sc);
	}
}

static void conn_src_put(struct conn_table *ct, struct src_count *sc)
{
	if (sc && sc->n > 0) {
		sc->n--;
		conn_src_forget_empty(ct, sc);
	}
}

/* One more peer record, on its port's and its source's counts (either
 * may be missing when memory ran out while restoring). */
static void conn_peer_rec_count(struct conn_table *ct,
				struct src_count *port_sc,
				struct src_count *src_sc)
{
	if (port_sc)
		port_sc->n++;
	if (src_sc)
		src_sc->n++;
	ct->counts.peer_records++;
}

/* Room for one more record of a REQ from gid on port: 0, or -ENOSPC. */
static int conn_peer_rec_take(struct conn_table *ct, unsigned port,
			      const struct gid *gid)
{
	struct src_count *port_sc, *src_sc;

	port_sc = conn_src_get(ct, port, NULL, 1);
	src_sc = conn_src_get(ct, port, gid, 1);
	if (port_sc == NULL || src_sc == NULL ||
	    (ct->lim.max_peer_records_per_port &&
	     port_sc->n >= ct->lim.max_peer_records_per_port) ||
	    (ct->lim.max_peer_records_per_source &&
	     src_sc->n >= ct->lim.max_peer_records_per_source)) {
		conn_src_forget_empty(ct, port_sc);
		conn_src_forget_empty(ct, src_sc);
		ct->counts.peer_records_refused++;
		return -ENOSPC;
	}
	conn_peer_rec_count(ct, port_sc, src_sc);
	return 0;
}

static void conn_peer_rec_undo(struct conn_table *ct, unsigned port,
			       const struct gid *gid)
{
	conn_src_put(ct, conn_src_get(ct, port, NULL, 0));
	conn_src_put(ct, conn_src_get(ct, port, gid, 0));
	ct->counts.peer_records--;
}

static void conn_peer_rec_drop(struct conn_table *ct, struct conn *c)
{
	if (!c->peer_rec)
		return;
	c->peer_rec = 0;
	conn_peer_rec_undo(ct, c->port, &c->path.peer_gid);
}

/* ---- entries ------------------------------------------------------------ */

static struct conn_client *conn_cclient_get(struct conn_table *ct, uint64_t id,
					    int create)
{
	struct conn_client key = { .id = id }, *cc;

	cc = RB_FIND(cclient_tree, &ct->clients, &key);
	if (cc || !create)
		return cc;
	cc = calloc(1, sizeof(*cc));
	if (cc == NULL)
		return NULL;
	cc->id = id;
	LIST_INIT(&cc->conns);
	RB_INSERT(cclient_tree, &ct->clients, cc);
	return cc;
}

static void conn_uncharge(struct conn_table *ct, struct conn *c)
{
	struct conn_client *cc;

	if (!c->charged)
		return;
	c->charged = 0;
	cc = conn_cclient_get(ct, c->client, 0);
	if (cc)
		cc->charged--;
}

static void conn_set_state(struct conn_table *ct, struct conn *c,
			   enum conn_state s)
{
	ct->counts.by_state[c->state]--;
	c->state = (uint8_t)s;
	ct->counts.by_state[s]++;
	if (s == CONN_TIMEWAIT)
		conn_uncharge(ct, c);
}

static void conn_guest_unlink(struct conn_table *ct, struct conn *c)
{
	if (c->in_guest) {
		RB_REMOVE(guest_tree, &ct->guests, c);
		c->in_guest = 0;
	}
}

static void conn_remove(struct conn_table *ct, struct conn *c)
{
	struct conn_client *cc = conn_cclient_get(ct, c->client, 0);

	conn_timer_stop(ct, c);
	conn_uncharge(ct, c);
	conn_peer_rec_drop(ct, c);
	if (c->in_host)
		RB_REMOVE(host_tree, &ct->hosts, c);
	conn_guest_unlink(ct, c);
	if (c->in_peer)
		RB_REMOVE(peer_tree, &ct->peers, c);
	LIST_REMOVE(c, client_link);
	ct->counts.total--;
	ct->counts.by_state[c->state]--;
	if (c->kind == CK_COMM)
		ct->counts.comm--;
	else
		ct->counts.sidr--;
	if (cc && --cc->n == 0) {
		RB_REMOVE(cclient_tree, &ct->clients, cc);
		free(cc);
	}
	if (ct->store)
		conn_store_free(ct->store, c);
	else
		free(c);
}

static void conn_cclient_forget_empty(struct conn_table *ct,
				      struct conn_client *cc)
{
	if (cc->n == 0) {
		RB_REMOVE(cclient_tree, &ct->clients, cc);
		free(cc);
	}
}

/* An entry joins its client's list and the table's counts (new, or
 * taken back from a previous daemon). */
static void conn_account(struct conn_table *ct, struct conn_client *cc,
			 struct conn *c)
{
	LIST_INSERT_HEAD(&cc->conns, c, client_link);
	cc->n++;
	cc->charged += c->charged;
	ct->counts.total++;
	ct->counts.by_state[c->state]++;
	if (c->kind == CK_COMM)
		ct->counts.comm++;
	else
		ct->counts.sidr++;
}

/* The client's quota: what it started or took on, live. */
static int conn_quota_full(struct conn_table *ct, const struct conn_client *cc)
{
	unsigned max = ct->lim.max_per_client;

	if (ct->call_max && ct->call_max < max)
		max = ct->call_max;
	return cc->charged >= max;
}

/* A new entry of client's; charged to it unless it is a peer's record. */
static struct conn *conn_new(struct conn_table *ct, enum conn_kind kind,
			     uint64_t client, unsigned port,
			     enum conn_state state,
			     const struct conn_path *path, int charge, int *err)
{
	struct conn_client *cc = conn_cclient_get(ct, client, 1);
	struct conn *c;

	if (cc == NULL) {
		*err = -ENOMEM;
		return NULL;
	}
	if (charge && conn_quota_full(ct, cc)) {
		*err = -ENOSPC;
		conn_cclient_forget_empty(ct, cc);
		return NULL;
	}
	c = ct->store ? conn_store_alloc(ct->store) : calloc(1, sizeof(*c));
	if (c == NULL) {
		*err = ct->store ? -ENOSPC : -ENOMEM;
		conn_cclient_forget_empty(ct, cc);
		return NULL;
	}
	c->kind = (uint8_t)kind;
	c->state = (uint8_t)state;
	c->client = client;
	c->port = port;
	c->path = *path;
	c->charged = charge != 0;
	conn_account(ct, cc, c);
	if (ct->store)
		conn_store_commit(ct->store, c);
	return c;
}

static struct conn *conn_host_find(struct conn_table *ct, enum conn_kind kind,
				   unsigned port, uint32_t host_id)
{
	struct conn key = { .kind = (uint8_t)kind,
			    .port = port,
			    .host_id = host_id };

	return RB_FIND(host_tree, &ct->hosts, &key);
}

static struct conn *conn_guest_find(struct conn_table *ct, enum conn_kind kind,
				    uint64_t client, unsigned port,
				    uint32_t guest_id)
{
	struct conn key = { .kind = (uint8_t)kind,
			    .client = client,
			    .port = port,
			    .guest_id = guest_id };

	return RB_FIND(guest_tree, &ct->guests, &key);
}

static struct conn *conn_peer_find_kind(struct conn_table *ct,
					enum conn_kind kind, unsigned port,
					uint32_t peer_id, const struct gid *gid)
{
	struct conn key = { .kind = (uint8_t)kind,
			    .port = port,
			    .peer_id = peer_id };

	key.path.peer_gid = *gid;
	return RB_FIND(peer_tree, &ct->peers, &key);
}

static struct conn *conn_peer_find(struct conn_table *ct, unsigned port,
				   uint32_t peer_id, const struct gid *gid)
{
	return conn_peer_find_kind(ct, CK_COMM, port, peer_id, gid);
}

/* A client's record of a peer's REQ (or SIDR_REQ) with that peer ID, from
 * whichever GID: the peer ID is all a reply names. */
static struct conn *conn_peer_record_of(struct conn_table *ct,
					enum conn_kind kind, uint64_t client,
					unsigned port, uint32_t peer_id)
{
	struct conn key = { .kind = (uint8_t)kind,
			    .port = port,
			    .peer_id = peer_id },
		    *c;

	for (c = RB_NFIND(peer_tree, &ct->peers, &key);
	     c && c->kind == kind && c->port == port && c->peer_id == peer_id;
	     c = RB_NEXT(peer_tree, &ct->peers, c))
		if (c->client == client && c->state == CONN_REQ_RCVD)
			return c;
	return NULL;
}

/* The peer's comm ID is known: index the entry by it (first come). */
static void conn_peer_set(struct conn_table *ct, struct conn *c,
			  uint32_t peer_id)
{
	if (c->in_peer || peer_id == 0)
		return;
	c->peer_id = peer_id;
	if (conn_peer_find(ct, c->port, peer_id, &c->path.peer_gid) == NULL) {
		RB_INSERT(peer_tree, &ct->peers, c);
		c->in_peer = 1;
	}
}

/* A host ID nobody on this port uses: cyclic, XORed with a random
 * operand as the kernel CM does, never 0. */
static uint32_t conn_alloc_host_id(struct conn_table *ct, enum conn_kind kind,
				   unsigned port)
{
	uint32_t id;
	unsigned tries;

	for (tries = 0; tries < (1u << 22); tries++) {
		id = ct->next++ ^ ct->random_operand;
		if (ct->store)
			*conn_store_counter(ct->store,
					    CONN_STORE_NEXT_HOST) = ct->next;
		if (id != 0 && conn_host_find(ct, kind, port, id) == NULL)
			return id;
	}
	return 0;
}

/* Give an entry its guest and host IDs and index it by both. */
static int conn_bind(struct conn_table *ct, struct conn *c, uint32_t guest_id)
{
	c->host_id = conn_alloc_host_id(ct, (enum conn_kind)c->kind, c->port);
	if (c->host_id == 0)
		return -ENOSPC;
	c->guest_id = guest_id;
	RB_INSERT(host_tree, &ct->hosts, c);
	RB_INSERT(guest_tree, &ct->guests, c);
	c->in_host = c->in_guest = 1;
	return 0;
}

static struct conn *conn_create_bound(struct conn_table *ct,
				      enum conn_kind kind, uint64_t client,
				      unsigned port, uint32_t guest_id,
				      enum conn_state state,
				      const struct conn_path *path, int *err)
{
	struct conn *c = conn_new(ct, kind, client, port, state, path, 1, err);

	if (c == NULL)
		return NULL;
	*err = conn_bind(ct, c, guest_id);
	if (*err) {
		conn_remove(ct, c);
		return NULL;
	}
	return c;
}

/* ---- TIDs ----------------------------------------------------------------- */

#define TID_HIGH 0xffffffff00000000ull

/* A client's send gets a fresh low TID half, unless it repeats its last
 * send (same attribute and guest TID): a retransmission keeps its TID. */
static void conn_tid_out(struct conn_table *ct, struct conn *c, uint8_t *mad)
{
	uint64_t tid = cm_mad_tid(mad);
	uint16_t attr = cm_mad_attr_id(mad);

	if (c->wire_tid == 0 || c->tid_attr != attr || c->guest_tid != tid) {
		c->wire_tid = conn_next_tid(ct);
		c->tid_attr = attr;
		c->guest_tid = tid;
	}
	wire_put64(mad + MAD_OFF_TID, (tid & TID_HIGH) | c->wire_tid);
}

/* A message that echoes the TID of our last send gets the guest's back. */
static void conn_tid_in(struct conn *c, uint8_t *mad)
{
	if ((cm_mad_tid(mad) & 0xffffffffull) == c->wire_tid && c->wire_tid)
		wire_put64(mad + MAD_OFF_TID, c->guest_tid);
}

static void conn_tid_fresh(struct conn_table *ct, uint8_t *mad)
{
	wire_put64(mad + MAD_OFF_TID,
		   (cm_mad_tid(mad) & TID_HIGH) | conn_next_tid(ct));
}

/* ---- speaking for a client (cm.c's cm_destroy_id) ------------------------ */

static void conn_send_answer(struct conn_table *ct, enum conn_answer why,
			     unsigned port, const struct conn_path *path,
			     const uint8_t *mad)
{
	struct conn_emit e = { why, port, path, mad };

	if (ct->emit)
		ct->emit(ct->emit_arg, &e);
}

static void conn_emit_rej(struct conn_table *ct, struct conn *c, unsigned msg,
			  unsigned reason, enum conn_answer why)
{
	uint8_t mad[MAD_SIZE], guid[CM_REJ_ARI_CA_GUID_LEN];
	int timeout = reason == CM_REJ_REASON_TIMEOUT;

	/* A timeout REJ names our CA GUID, by which the peer finds the
	 * REQ it never answered (cm.c's cm_acquire_rejected_id). */
	wire_put64(guid, c->ca_guid);
	cm_build_rej(mad, conn_next_tid(ct), c->in_host ? c->host_id : 0,
		     c->peer_id, msg, reason, timeout ? guid : NULL,
		     timeout ? sizeof(guid) : 0);
	conn_send_answer(ct, why, c->port, &c->path, mad);
}

/*
 * The client no longer stands behind this connection (it is gone, or it
 * reused the comm ID): tell the peer what cm_destroy_id() would, and
 * leave the entry in the state that follows.
 */
static void conn_abandon(struct conn_table *ct, struct conn *c, uint64_t now_ms)
{
	uint8_t mad[MAD_SIZE];

	if (c->kind != CK_COMM)
		return;
	switch (c->state) {
	case CONN_REQ_SENT:
		conn_emit_rej(ct, c, CM_MSG_RESPONSE_REQ, CM_REJ_REASON_TIMEOUT,
			      CONN_ANS_REJ_ABANDONED);
		break;
	case CONN_REQ_RCVD:
		conn_emit_rej(ct, c, CM_MSG_RESPONSE_REQ,
			      CM_REJ_REASON_CONSUMER_DEFINED,
			      CONN_ANS_REJ_ABANDONED);
		break;
	case CONN_REP_SENT:
		conn_emit_rej(ct, c, CM_MSG_RESPONSE_OTHER,
			      CM_REJ_REASON_CONSUMER_DEFINED,
			      CONN_ANS_REJ_ABANDONED);
		break;
	case CONN_REP_RCVD:
		conn_emit_rej(ct, c, CM_MSG_RESPONSE_REP,
			      CM_REJ_REASON_CONSUMER_DEFINED,
			      CONN_ANS_REJ_ABANDONED);
		break;
	case CONN_ESTABLISHED:
		cm_build_dreq(mad, conn_next_tid(ct), c->host_id, c->peer_id,
			      c->peer_qpn);
		conn_send_answer(ct, CONN_ANS_DREQ_ABANDONED, c->port, &c->path,
				 mad);
		conn_set_state(ct, c, CONN_DREQ_SENT);
		conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		return;
	case CONN_DREQ_RCVD:
		cm_build_drep(mad, conn_next_tid(ct), c->host_id, c->peer_id);
		conn_send_answer(ct, CONN_ANS_DREP_ABANDONED, c->port, &c->path,
				 mad);
		break;
	default: return;
	}
	conn_set_state(ct, c, CONN_TIMEWAIT);
	conn_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
}

/* The guest reuses a comm ID: the old connection is abandoned and stays
 * only to absorb its peer's last messages, out of the guest's sight. */
static void conn_retire(struct conn_table *ct, struct conn *c, uint64_t now_ms)
{
	conn_abandon(ct, c, now_ms);
	conn_guest_unlink(ct, c);
	c->orphan = 1;
	if (c->timer == TC_NONE)
		conn_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
}

/* ---- outbound: the client's CM sends (cm.c's ib_send_cm_*) ---------------- */

static int conn_same_peer(const struct conn *c, uint32_t peer_id,
			  const struct conn_path *path)
{
	return c->peer_id == peer_id &&
	       gid_cmp(&c->path.peer_gid, &path->peer_gid) == 0;
}

/* The client's reply (REP, MRA, REJ) to a peer's REQ: its connection if
 * it has one with that peer, else the peer record the REQ left. */
static struct conn *conn_for_reply(struct conn_table *ct, uint64_t client,
				   unsigned port, uint32_t guest_id,
				   uint32_t peer_id,
				   const struct conn_path *path,
				   uint64_t now_ms, int *err)
{
	struct conn *c = conn_guest_find(ct, CK_COMM, client, port, guest_id),
		    *r;
	struct conn_client *cc;

	if (c && conn_same_peer(c, peer_id, path))
		return c;
	/* Only an answer to a REQ this client received: otherwise a VM
	 * could accept (or reject) a connection meant for another. */
	r = conn_peer_find(ct, port, peer_id, &path->peer_gid);
	if (r == NULL || r->client != client || r->state != CONN_REQ_RCVD ||
	    r->in_guest) {
		*err = -ENOENT;
		return NULL;
	}
	/* Answering it makes the connection the client's own: from here
	 * on its quota counts it. */
	cc = conn_cclient_get(ct, client, 0);
	if (cc == NULL || conn_quota_full(ct, cc)) {
		*err = -ENOSPC;
		return NULL;
	}
	if (c)
		conn_retire(ct, c, now_ms); /* the guest reused the ID */
	*err = conn_bind(ct, r, guest_id);
	if (*err)
		return NULL;
	conn_peer_rec_drop(ct, r);
	r->charged = 1;
	cc->charged++;
	return r;
}

static int conn_out_req(struct conn_table *ct, uint64_t client, unsigned port,
			uint8_t *mad, const struct conn_path *path,
			uint64_t now_ms, struct conn **out)
{
	uint32_t guest_id = cm_mad_sender_id(mad);
	struct conn *c;
	int err = 0;

	if (guest_id == 0)
		return -EINVAL;
	c = conn_guest_find(ct, CK_COMM, client, port, guest_id);
	/* The same REQ again is a retransmission; anything else with this
	 * ID is a new connection (a rebooted guest, a wrapped counter). */
	if (c == NULL || c->state != CONN_REQ_SENT ||
	    gid_cmp(&c->path.peer_gid, &path->peer_gid) != 0) {
		if (c)
			conn_retire(ct, c, now_ms);
		c = conn_create_bound(ct, CK_COMM, client, port, guest_id,
				      CONN_REQ_SENT, path, &err);
		if (c == NULL)
			return err;
		c->ca_guid = cm_field_get(mad, CM_REQ_LOCAL_CA_GUID);
	}
	conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
	*out = c;
	return 0;
}

static int conn_out_reply(struct conn_table *ct, uint64_t client, unsigned port,
			  uint8_t *mad, const struct conn_path *path,
			  uint64_t now_ms, struct conn **out)
{
	uint16_t attr = cm_mad_attr_id(mad);
	uint32_t guest_id = cm_mad_sender_id(mad);
	uint32_t peer_id = cm_mad_receiver_id(mad);
	struct conn *c;
	int err = 0;

	if (guest_id == 0) {
		if (attr != CM_ATTR_REJ)
			return -EINVAL;
		/* Rejecting a REQ before replying: nothing to map, but it
		 * must be a REQ this client received; the record goes, as
		 * cm.c resets to idle. */
		c = conn_peer_find(ct, port, peer_id, &path->peer_gid);
		if (c == NULL || c->client != client ||
		    c->state != CONN_REQ_RCVD || c->in_guest)
			return -ENOENT;
		conn_remove(ct, c);
		conn_tid_fresh(ct, mad);
		return 1;
	}
	c = conn_for_reply(ct, client, port, guest_id, peer_id, path, now_ms,
			   &err);
	if (c == NULL)
		return err;
	switch (attr) {
	case CM_ATTR_REP:
		if (c->state == CONN_REQ_RCVD) {
			conn_set_state(ct, c, CONN_REP_SENT);
			/* Kept until RTU, DREQ, REJ or teardown: the guest
			 * goes established on its first data. */
			conn_timer_stop(ct, c);
		} else if (c->state != CONN_REP_SENT) {
			return -EPROTO;
		}
		break;
	case CM_ATTR_MRA:
		if (c->state == CONN_REQ_RCVD || c->state == CONN_REP_RCVD)
			conn_timer_arm(ct, c,
				       TC_MRA0 +
					       (int)cm_field_get(
						       mad,
						       CM_MRA_SERVICE_TIMEOUT),
				       now_ms);
		else if (c->state != CONN_ESTABLISHED)
			return -EPROTO;
		break;
	default: /* REJ */
		switch (c->state) {
		case CONN_REQ_SENT:
		case CONN_REQ_RCVD:
		case CONN_REP_SENT:
		case CONN_REP_RCVD:
			conn_set_state(ct, c, CONN_TIMEWAIT);
			/* fall through */
		case CONN_TIMEWAIT: /* cm.c's REJ to a stale REQ */
			conn_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
			break;
		default: return -EPROTO;
		}
		break;
	}
	*out = c;
	return 0;
}

/* RTU, DREQ, DREP, LAP, APR: on a connection of the client's, in a state
 * where cm.c would send it. */
static int conn_out_conn(struct conn_table *ct, uint64_t client, unsigned port,
			 uint8_t *mad, uint64_t now_ms, struct conn **out)
{
	uint16_t attr = cm_mad_attr_id(mad);
	uint32_t guest_id = cm_mad_sender_id(mad);
	struct conn *c;

	c = guest_id ? conn_guest_find(ct, CK_COMM, client, port, guest_id)
		     : NULL;
	if (c == NULL || c->peer_id == 0 ||
	    cm_mad_receiver_id(mad) != c->peer_id)
		return -ENOENT;
	switch (attr) {
	case CM_ATTR_RTU:
		if (c->state == CONN_REP_RCVD) {
			conn_set_state(ct, c, CONN_ESTABLISHED);
			conn_timer_stop(ct, c);
		} else if (c->state != CONN_ESTABLISHED) {
			return -EPROTO;
		}
		break;
	case CM_ATTR_DREQ:
		/* In DREQ_RCVD the peer's DREQ is still on its way to the
		 * guest: both sides disconnect at once, which cm.c takes. */
		if (c->state == CONN_DREQ_RCVD)
			break;
		if (c->state != CONN_ESTABLISHED && c->state != CONN_REP_SENT &&
		    c->state != CONN_DREQ_SENT)
			return -EPROTO;
		conn_set_state(ct, c, CONN_DREQ_SENT);
		conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		break;
	case CM_ATTR_DREP:
		if (c->state != CONN_DREQ_RCVD && c->state != CONN_TIMEWAIT)
			return -EPROTO;
		conn_set_state(ct, c, CONN_TIMEWAIT);
		conn_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
		break;
	default: /* LAP, APR */
		if (c->state != CONN_ESTABLISHED)
			return -EPROTO;
		break;
	}
	*out = c;
	return 0;
}

static int conn_out_sidr_req(struct conn_table *ct, uint64_t client,
			     unsigned port, uint8_t *mad,
			     const struct conn_path *path, uint64_t now_ms,
			     struct conn **out)
{
	uint32_t guest_id = cm_mad_sender_id(mad);
	struct conn *c;
	int err = 0;

	if (guest_id == 0)
		return -EINVAL;
	c = conn_guest_find(ct, CK_SIDR, client, port, guest_id);
	if (c && c->state != CONN_SIDR_REQ_SENT) {
		conn_retire(ct, c, now_ms);
		c = NULL;
	}
	if (c == NULL)
		c = conn_create_bound(ct, CK_SIDR, client, port, guest_id,
				      CONN_SIDR_REQ_SENT, path, &err);
	if (c == NULL)
		return err;
	conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
	*out = c;
	return 0;
}

int conn_outbound(struct conn_table *ct, uint64_t client, unsigned port,
		  uint8_t *mad, const struct conn_path *path, uint64_t now_ms,
		  unsigned max_conns)
{
	struct conn *c = NULL;
	int rc;

	conn_timewait_trim(ct);
	ct->call_max = max_conns;
	switch (cm_mad_attr_id(mad)) {
	case CM_ATTR_REQ:
		rc = conn_out_req(ct, client, port, mad, path, now_ms, &c);
		break;
	case CM_ATTR_REP:
	case CM_ATTR_MRA:
	case CM_ATTR_REJ:
		rc = conn_out_reply(ct, client, port, mad, path, now_ms, &c);
		break;
	case CM_ATTR_RTU:
	case CM_ATTR_DREQ:
	case CM_ATTR_DREP:
	case CM_ATTR_LAP:
	case CM_ATTR_APR:
		rc = conn_out_conn(ct, client, port, mad, now_ms, &c);
		break;
	case CM_ATTR_SIDR_REQ:
		rc = conn_out_sidr_req(ct, client, port, mad, path, now_ms, &c);
		break;
	default: /* SIDR_REP: it must answer a SIDR_REQ received */
		c = conn_peer_find_kind(ct, CK_SIDR, port,
					cm_mad_receiver_id(mad),
					&path->peer_gid);
		if (c == NULL || c->client != client) {
			rc = -ENOENT;
			break;
		}
		conn_remove(ct, c);
		conn_tid_fresh(ct, mad);
		rc = 1;
		break;
	}
	ct->call_max = 0;
	if (rc == 1)
		return 0;
	if (rc)
		return rc;
	/* From here on the MAD carries the host ID, not the guest's. */
	cm_mad_set_sender_id(mad, c->host_id);
	conn_tid_out(ct, c, mad);
	return 0;
}

/* ---- inbound: the peer's messages (cm.c's cm_*_handler) ------------------ */

/* Whether the Local Comm ID of a peer's message names the peer this
 * connection knows (cm_acquire_id(): 0 only where the peer's ID cannot
 * be known yet). */
static int conn_peer_matches(const struct conn *c, const uint8_t *mad)
{
	uint16_t attr = cm_mad_attr_id(mad);
	uint32_t sender = cm_mad_sender_id(mad);
	unsigned about = CM_MSG_RESPONSE_OTHER;

	if (attr == CM_ATTR_REJ)
		about = (unsigned)cm_field_get(mad, CM_REJ_MESSAGE_REJECTED);
	else if (attr == CM_ATTR_MRA)
		about = (unsigned)cm_field_get(mad, CM_MRA_MESSAGE_MRAED);
	if (about == CM_MSG_RESPONSE_REQ || attr == CM_ATTR_REP)
		return c->peer_id == 0 || sender == c->peer_id ||
		       (attr == CM_ATTR_REJ && sender == 0);
	return c->peer_id != 0 && sender == c->peer_id;
}

/* A peer's message in the connection's state: 0 (deliver) or -EPROTO. */
static int conn_in_transition(struct conn_table *ct, struct conn *c,
			      const uint8_t *mad, uint64_t now_ms)
{
	switch (cm_mad_attr_id(mad)) {
	case CM_ATTR_REP:
		if (c->state == CONN_REQ_SENT) {
			conn_peer_set(ct, c, cm_mad_sender_id(mad));
			c->peer_qpn = (uint32_t)cm_field_get(mad,
							     CM_REP_LOCAL_QPN);
			conn_set_state(ct, c, CONN_REP_RCVD);
			conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
			return 0;
		}
		/* A duplicate: the guest's CM answers it again (RTU). */
		return c->state == CONN_REP_RCVD || c->state == CONN_ESTABLISHED
			       ? 0
			       : -EPROTO;
	case CM_ATTR_MRA:
		if (c->state == CONN_REQ_SENT || c->state == CONN_REP_SENT) {
			if (c->state == CONN_REQ_SENT)
				conn_timer_arm(
					ct, c,
					TC_MRA0 +
						(int)cm_field_get(
							mad,
							CM_MRA_SERVICE_TIMEOUT),
					now_ms);
			return 0;
		}
		return c->state == CONN_ESTABLISHED ? 0 : -EPROTO;
	case CM_ATTR_RTU:
		if (c->state != CONN_REP_SENT)
			return -EPROTO;
		conn_set_state(ct, c, CONN_ESTABLISHED);
		conn_timer_stop(ct, c);
		return 0;
	case CM_ATTR_DREQ:
		switch (c->state) {
		case CONN_ESTABLISHED:
		case CONN_REP_SENT:
		case CONN_DREQ_SENT:
			conn_set_state(ct, c, CONN_DREQ_RCVD);
			conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
			return 0;
		case CONN_DREQ_RCVD: return 0;
		case CONN_TIMEWAIT: /* our DREP was lost: the guest answers */
			conn_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
			return 0;
		default: return -EPROTO;
		}
	case CM_ATTR_DREP:
		/* DREQ_RCVD too: both sides sent a DREQ at once. */
		if (c->state != CONN_DREQ_SENT && c->state != CONN_DREQ_RCVD)
			return -EPROTO;
		conn_set_state(ct, c, CONN_TIMEWAIT);
		conn_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
		return 0;
	case CM_ATTR_REJ:
		switch (c->state) {
		case CONN_REQ_SENT:
		case CONN_REQ_RCVD:
		case CONN_REP_SENT:
		case CONN_REP_RCVD:
		case CONN_ESTABLISHED:
		case CONN_DREQ_SENT:
			conn_set_state(ct, c, CONN_TIMEWAIT);
			conn_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
			return 0;
		default: return -EPROTO;
		}
	default: /* LAP, APR */
		return c->state == CONN_ESTABLISHED ? 0 : -EPROTO;
	}
}

static void conn_answer_drep(struct conn_table *ct, enum conn_answer why,
			     unsigned port, const uint8_t *dreq,
			     const struct conn_path *path)
{
	uint8_t mad[MAD_SIZE];

	/* cm_issue_drep(): the DREQ's IDs swapped. */
	cm_build_drep(mad, conn_next_tid(ct), cm_mad_receiver_id(dreq),
		      cm_mad_sender_id(dreq));
	conn_send_answer(ct, why, port, path, mad);
}

static int conn_in_sidr_rep(struct conn_table *ct, unsigned port, uint8_t *mad,
			    const struct conn_path *path, uint64_t now_ms,
			    uint64_t *client)
{
	struct conn *c = conn_host_find(ct, CK_SIDR, port,
					cm_mad_receiver_id(mad));

	if (c == NULL)
		return -ENOENT;
	if (gid_cmp(&c->path.peer_gid, &path->peer_gid) != 0)
		return -EPERM;
	if (c->orphan)
		return -ESTALE;
	if (c->state != CONN_SIDR_REQ_SENT)
		return -EPROTO;
	conn_set_state(ct, c, CONN_TIMEWAIT);
	conn_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
	*client = c->client;
	cm_mad_set_receiver_id(mad, c->guest_id);
	conn_tid_in(c, mad);
	return 0;
}

/* A REJ without our comm ID: the active side gave up on a REQ before
 * anyone answered it (a timeout REJ); found by the peer record. */
static int conn_in_rej_unnamed(struct conn_table *ct, unsigned port,
			       uint8_t *mad, const struct conn_path *path,
			       uint64_t now_ms, uint64_t *client)
{
	struct conn *c = conn_peer_find(ct, port, cm_mad_sender_id(mad),
					&path->peer_gid);

	if (c == NULL)
		return -EBADR;
	if (c->orphan)
		return -ESTALE;
	if (c->state != CONN_REQ_RCVD)
		return -EPROTO;
	*client = c->client;
	if (!c->in_guest) {
		conn_remove(ct, c); /* cm.c: reset to idle */
		return 0;
	}
	cm_mad_set_receiver_id(mad, c->guest_id);
	conn_set_state(ct, c, CONN_TIMEWAIT);
	conn_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
	return 0;
}

int conn_inbound(struct conn_table *ct, unsigned port, uint8_t *mad,
		 const struct conn_path *path, uint64_t now_ms,
		 uint64_t *client)
{
	uint16_t attr = cm_mad_attr_id(mad);
	uint32_t host_id = cm_mad_receiver_id(mad);
	struct conn *c;
	int rc;

	conn_timewait_trim(ct);
	if (attr == CM_ATTR_SIDR_REP)
		return conn_in_sidr_rep(ct, port, mad, path, now_ms, client);
	if (host_id == 0) {
		if (attr != CM_ATTR_REJ)
			return -EBADR;
		return conn_in_rej_unnamed(ct, port, mad, path, now_ms, client);
	}
	c = conn_host_find(ct, CK_COMM, port, host_id);
	if (c == NULL) {
		if (attr == CM_ATTR_DREQ)
			conn_answer_drep(ct, CONN_ANS_DREP_UNKNOWN, port, mad,
					 path);
		return -ENOENT;
	}
	if (gid_cmp(&c->path.peer_gid, &path->peer_gid) != 0 ||
	    !conn_peer_matches(c, mad))
		return -EPERM;
	if (c->orphan) {
		if (attr == CM_ATTR_DREQ) {
			conn_answer_drep(ct, CONN_ANS_DREP_ABANDONED, port, mad,
					 &c->path);
			if (c->state != CONN_TIMEWAIT)
				conn_set_state(ct, c, CONN_TIMEWAIT);
			conn_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
		} else if (attr == CM_ATTR_DREP || attr == CM_ATTR_REJ) {
			if (c->state != CONN_TIMEWAIT) {
				conn_set_state(ct, c, CONN_TIMEWAIT);
				conn_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
			}
		}
		return -ESTALE;
	}
	rc = conn_in_transition(ct, c, mad, now_ms);
	if (rc)
		return rc;
	*client = c->client;
	cm_mad_set_receiver_id(mad, c->guest_id);
	conn_tid_in(c, mad);
	return 0;
}

int conn_note_req(struct conn_table *ct, uint64_t client, unsigned port,
		  const uint8_t *mad, const struct conn_path *path,
		  uint64_t now_ms)
{
	uint32_t peer_id = cm_mad_sender_id(mad);
	uint8_t rej[MAD_SIZE];
	struct conn *c;
	int err = 0;

	conn_timewait_trim(ct);
	if (peer_id == 0)
		return 0; /* nothing to key a record by; the guest decides */
	c = conn_peer_find(ct, port, peer_id, &path->peer_gid);
	if (c && c->state == CONN_TIMEWAIT) {
		/* The peer reuses the comm ID of a connection still in
		 * TimeWait: cm.c's cm_dup_req_handler() rejects it. */
		/* As cm_issue_rej() does: the REQ's sender can only match
		 * a REJ of its REQ (it knows no ID of ours yet). */
		cm_build_rej(rej, conn_next_tid(ct), 0, peer_id,
			     CM_MSG_RESPONSE_REQ, CM_REJ_REASON_STALE_CONN,
			     NULL, 0);
		conn_send_answer(ct, CONN_ANS_REJ_STALE, port, &c->path, rej);
		return -ESTALE;
	}
	if (c) {
		/* A retransmitted REQ: keep the record as long; the guest's
		 * CM decides what a duplicate deserves. */
		if (c->client == client && c->state == CONN_REQ_RCVD &&
		    c->timer == TC_HANDSHAKE)
			conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		return 0;
	}
	/* A full table loses the record, not the REQ (the client cannot
	 * answer it, and the peer times out, as with a lost MAD). */
	if (conn_peer_rec_take(ct, port, &path->peer_gid) < 0)
		return 0;
	c = conn_new(ct, CK_COMM, client, port, CONN_REQ_RCVD, path, 0, &err);
	if (c == NULL) {
		conn_peer_rec_undo(ct, port, &path->peer_gid);
		return 0;
	}
	c->peer_rec = 1;
	c->peer_qpn = (uint32_t)cm_field_get(mad, CM_REQ_LOCAL_QPN);
	conn_peer_set(ct, c, peer_id);
	conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
	return 0;
}

int conn_note_sidr_req(struct conn_table *ct, uint64_t client, unsigned port,
		       const uint8_t *mad, const struct conn_path *path,
		       uint64_t now_ms)
{
	uint32_t peer_id = cm_mad_sender_id(mad);
	struct conn *c;
	int err = 0;

	conn_timewait_trim(ct);
	if (peer_id == 0)
		return 0;
	c = conn_peer_find_kind(ct, CK_SIDR, port, peer_id, &path->peer_gid);
	if (c) {
		if (c->client == client)
			conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		return 0;
	}
	if (conn_peer_rec_take(ct, port, &path->peer_gid) < 0)
		return 0; /* a full table loses the record, not the REQ */
	c = conn_new(ct, CK_SIDR, client, port, CONN_REQ_RCVD, path, 0, &err);
	if (c == NULL) {
		conn_peer_rec_undo(ct, port, &path->peer_gid);
		return 0;
	}
	c->peer_rec = 1;
	c->peer_id = peer_id;
	RB_INSERT(peer_tree, &ct->peers, c);
	c->in_peer = 1;
	conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
	return 0;
}

int conn_destination(struct conn_table *ct, uint64_t client, unsigned port,
		     const uint8_t *mad, struct gid *dst)
{
	uint16_t attr = cm_mad_attr_id(mad);
	uint32_t sender = cm_mad_sender_id(mad);
	uint32_t receiver = cm_mad_receiver_id(mad);
	struct conn *c, *r = NULL;

	switch (attr) {
	case CM_ATTR_REQ:
		cm_get_gid(mad, CM_REQ_OFF_PRIMARY_REMOTE_GID, dst);
		return gid_is_zero(dst) ? -ENOENT : 0;
	case CM_ATTR_SIDR_REQ:
		return cm_mad_cma_addrs(mad, NULL, dst, NULL) ? -ENOENT : 0;
	case CM_ATTR_SIDR_REP:
		r = conn_peer_record_of(ct, CK_SIDR, client, port, receiver);
		break;
	default:
		c = sender ? conn_guest_find(ct, CK_COMM, client, port, sender)
			   : NULL;
		if (c && c->peer_id == receiver) {
			r = c;
			break;
		}
		if (attr == CM_ATTR_REP || attr == CM_ATTR_MRA ||
		    attr == CM_ATTR_REJ)
			r = conn_peer_record_of(ct, CK_COMM, client, port,
						receiver);
		if (r == NULL)
			r = c;
		break;
	}
	if (r == NULL)
		return -ENOENT;
	*dst = r->path.peer_gid;
	return 0;
}

unsigned conn_expire_some(struct conn_table *ct, uint64_t now_ms, unsigned max)
{
	struct conn *c;
	unsigned n = 0;
	int tc;

	for (tc = TC_HANDSHAKE; tc < TC_MAX && n < max; tc++) {
		while (n < max && (c = TAILQ_FIRST(&ct->timers[tc])) != NULL &&
		       c->deadline_ms <= now_ms) {
			conn_remove(ct, c);
			n++;
		}
	}
	return n;
}

unsigned conn_expire(struct conn_table *ct, uint64_t now_ms)
{
	return conn_expire_some(ct, now_ms, UINT_MAX);
}

uint64_t conn_next_deadline(struct conn_table *ct)
{
	uint64_t next = UINT64_MAX;
	struct conn *c;
	int tc;

	for (tc = TC_HANDSHAKE; tc < TC_MAX; tc++) {
		c = TAILQ_FIRST(&ct->timers[tc]);
		if (c && c->deadline_ms < next)
			next = c->deadline_ms;
	}
	return next;
}

static void conn_owner_forget(struct conn_table *ct, uint64_t client);

void conn_purge_client(struct conn_table *ct, uint64_t client)
{
	struct conn_client *cc = conn_cclient_get(ct, client, 0);
	struct conn *c;

	/* The daemon is going, not the client: its entries stay in the
	 * store for the next daemon. */
	if (ct->detached)
		return;
	conn_owner_forget(ct, client);

	/* conn_remove frees cc with the last entry. */
	while (cc && (c = LIST_FIRST(&cc->conns)) != NULL) {
		int last = cc->n == 1;

		if (!c->orphan)
			conn_abandon(ct, c, 0);
		conn_remove(ct, c);
		if (last)
			break;
	}
}

void conn_table_free(struct conn_table *ct)
{
	struct conn_client *cc, *next;
	struct src_count *sc, *snext;

	if (ct == NULL)
		return;
	ct->emit = NULL; /* shutting down: no one to tell */
	if (ct->detached) {
		/* The entries stay where they are; only the indexes go. */
		RB_FOREACH_SAFE(cc, cclient_tree, &ct->clients, next) {
			RB_REMOVE(cclient_tree, &ct->clients, cc);
			free(cc);
		}
		RB_FOREACH_SAFE(sc, src_tree, &ct->sources, snext) {
			RB_REMOVE(src_tree, &ct->sources, sc);
			free(sc);
		}
	} else {
		RB_FOREACH_SAFE(cc, cclient_tree, &ct->clients, next)
			conn_purge_client(ct, cc->id);
	}
	conn_store_close(ct->store);
	free(ct);
}

void conn_table_detach(struct conn_table *ct)
{
	ct->detached = 1;
}

/* ---- persistence: a restarted daemon's table -------------------------- */

struct restore {
	struct conn_table *ct;
	struct conn **timed[TC_MAX];
	unsigned ntimed[TC_MAX], cap[TC_MAX];
	unsigned dropped;
};

static int conn_restore_by_deadline(const void *a, const void *b)
{
	const struct conn *x = *(struct conn *const *)a,
			  *y = *(struct conn *const *)b;

	return x->deadline_ms < y->deadline_ms
		       ? -1
		       : x->deadline_ms > y->deadline_ms;
}

/* One entry back into the indexes it was in; dropped if it is not
 * consistent (changed at the instant of a crash) or collides. */
static void conn_restore_one(void *arg, void *slot)
{
	struct restore *r = arg;
	struct conn_table *ct = r->ct;
	struct conn *c = slot;
	struct conn_client *cc;
	int host = 0, guest = 0, peer = 0;

	if (c->kind > CK_SIDR || c->state >= CONN_STATE_MAX ||
	    c->timer >= TC_MAX || (!c->in_host && !c->in_guest && !c->in_peer))
		goto drop;
	if (c->in_host && RB_INSERT(host_tree, &ct->hosts, c) != NULL)
		goto unindex;
	host = c->in_host;
	if (c->in_guest && RB_INSERT(guest_tree, &ct->guests, c) != NULL)
		goto unindex;
	guest = c->in_guest;
	if (c->in_peer && RB_INSERT(peer_tree, &ct->peers, c) != NULL)
		goto unindex;
	peer = c->in_peer;
	cc = conn_cclient_get(ct, c->client, 1);
	if (cc == NULL)
		goto unindex;
	conn_account(ct, cc, c);
	if (c->peer_rec)
		conn_peer_rec_count(ct, conn_src_get(ct, c->port, NULL, 1),
				    conn_src_get(ct, c->port, &c->path.peer_gid,
						 1));
	if (c->timer != TC_NONE) {
		if (r->ntimed[c->timer] == r->cap[c->timer]) {
			unsigned ncap = r->cap[c->timer] ? 2 * r->cap[c->timer]
							 : 64;
			struct conn **n = realloc(r->timed[c->timer],
						  ncap * sizeof(*n));

			if (n == NULL) {
				c->timer = TC_NONE; /* lives until torn down */
				return;
			}
			r->timed[c->timer] = n;
			r->cap[c->timer] = ncap;
		}
		r->timed[c->timer][r->ntimed[c->timer]++] = c;
	}
	return;
unindex:
	if (host)
		RB_REMOVE(host_tree, &ct->hosts, c);
	if (guest)
		RB_REMOVE(guest_tree, &ct->guests, c);
	if (peer)
		RB_REMOVE(peer_tree, &ct->peers, c);
drop:
	r->dropped++;
	conn_store_free(ct->store, c);
}

static void conn_owners_reset_claims(struct conn_table *ct);

static unsigned conn_table_restore(struct conn_table *ct)
{
	struct restore r = { .ct = ct };
	unsigned tc, i;

	ct->random_operand = *conn_store_counter(ct->store,
						 CONN_STORE_RANDOM_OPERAND);
	ct->next = *conn_store_counter(ct->store, CONN_STORE_NEXT_HOST);
	ct->tid_seq = *conn_store_counter(ct->store, CONN_STORE_TID_SEQ);
	conn_store_foreach(ct->store, conn_restore_one, &r);
	/* Each timer class is a FIFO by deadline, as it was built. */
	for (tc = 1; tc < TC_MAX; tc++) {
		if (r.ntimed[tc] == 0)
			continue;
		qsort(r.timed[tc], r.ntimed[tc], sizeof(r.timed[tc][0]),
		      conn_restore_by_deadline);
		for (i = 0; i < r.ntimed[tc]; i++) {
			TAILQ_INSERT_TAIL(&ct->timers[tc], r.timed[tc][i],
					  timer_link);
			ct->timer_len[tc]++;
		}
		free(r.timed[tc]);
	}
	return r.dropped;
}

struct conn_table *conn_table_open(const struct conn_limits *lim,
				   uint32_t random_operand,
				   conn_emit_fn emit_fn, void *emit_arg,
				   const char *path, uint32_t max_entries,
				   uint32_t max_owners, uint64_t ports_hash,
				   int *restored, char *err, size_t errlen)
{
	struct conn_table *ct = conn_table_new(lim, random_operand, emit_fn,
					       emit_arg);
	unsigned dropped;

	*restored = 0;
	if (ct == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	ct->store = conn_store_open(path, sizeof(struct conn), max_entries,
				    max_owners, ports_hash, restored, err,
				    errlen);
	if (ct->store == NULL) {
		free(ct);
		return NULL;
	}
	if (*restored) {
		/* Every owner of the previous life may claim, once. */
		conn_owners_reset_claims(ct);
		dropped = conn_table_restore(ct);
		if (dropped)
			snprintf(err, errlen,
				 "%u entries were being changed when the "
				 "previous daemon ended and are lost",
				 dropped);
	} else {
		*conn_store_counter(ct->store, CONN_STORE_RANDOM_OPERAND) =
			ct->random_operand;
		*conn_store_counter(ct->store, CONN_STORE_NEXT_HOST) = ct->next;
		*conn_store_counter(ct->store,
				    CONN_STORE_TID_SEQ) = ct->tid_seq;
	}
	return ct;
}

/* ---- owners: clients that may claim their entries after a restart ----- */

static struct conn_owner *conn_owner_find(struct conn_table *ct,
					  uint64_t client)
{
	struct conn_owner *o;
	uint32_t n, i;

	if (ct->store == NULL)
		return NULL;
	o = conn_store_owners(ct->store, &n);
	for (i = 0; i < n; i++)
		if (o[i].live && o[i].client == client)
			return &o[i];
	return NULL;
}

int conn_owner_add(struct conn_table *ct, uint64_t client, uint32_t uid,
		   const uint8_t token[16])
{
	struct conn_owner *o;
	uint32_t n, i;

	if (ct->store == NULL)
		return -ENOTSUP;
	o = conn_store_owners(ct->store, &n);
	for (i = 0; i < n; i++) {
		if (o[i].live)
			continue;
		o[i].client = client;
		o[i].uid = uid;
		o[i].claimed = 1;
		memcpy(o[i].token, token, 16);
		__atomic_store_n(&o[i].live, 1, __ATOMIC_RELEASE);
		return 0;
	}
	return -ENOSPC;
}

static void conn_owner_forget(struct conn_table *ct, uint64_t client)
{
	struct conn_owner *o = conn_owner_find(ct, client);

	if (o)
		__atomic_store_n(&o->live, 0, __ATOMIC_RELEASE);
}

int conn_owner_claim(struct conn_table *ct, uint64_t old_client, uint32_t uid,
		     const uint8_t token[16], uint64_t new_client,
		     const uint8_t new_token[16])
{
	struct conn_owner *o = conn_owner_find(ct, old_client);
	struct conn_client *from, *to;
	struct conn *c;
	uint8_t diff = 0;
	unsigned i;

	if (o == NULL || o->claimed)
		return -ENOENT;
	for (i = 0; i < 16; i++) /* in constant time */
		diff |= o->token[i] ^ token[i];
	if (diff || o->uid != uid)
		return -EPERM;
	from = conn_cclient_get(ct, old_client, 0);
	if (from && from->n) {
		to = conn_cclient_get(ct, new_client, 1);
		if (to == NULL)
			return -ENOMEM;
		while ((c = LIST_FIRST(&from->conns)) != NULL) {
			LIST_REMOVE(c, client_link);
			if (c->in_guest)
				RB_REMOVE(guest_tree, &ct->guests, c);
			c->client = new_client;
			if (c->in_guest)
				RB_INSERT(guest_tree, &ct->guests, c);
			LIST_INSERT_HEAD(&to->conns, c, client_link);
			to->n++;
			to->charged += c->charged;
		}
	}
	if (from) {
		RB_REMOVE(cclient_tree, &ct->clients, from);
		free(from);
	}
	o->client = new_client;
	memcpy(o->token, new_token, 16);
	o->claimed = 1;
	return 0;
}

unsigned conn_purge_unclaimed(struct conn_table *ct)
{
	struct conn_owner *o;
	unsigned purged = 0;
	uint32_t n, i;

	if (ct->store == NULL)
		return 0;
	o = conn_store_owners(ct->store, &n);
	for (i = 0; i < n; i++) {
		if (!o[i].live || o[i].claimed)
			continue;
		conn_purge_client(ct, o[i].client); /* forgets o[i] too */
		purged++;
	}
	return purged;
}

uint64_t conn_owners_max_client(struct conn_table *ct)
{
	struct conn_owner *o;
	struct conn_client *cc;
	uint64_t max = 0;
	uint32_t n, i;

	if (ct->store) {
		o = conn_store_owners(ct->store, &n);
		for (i = 0; i < n; i++)
			if (o[i].live && o[i].client > max)
				max = o[i].client;
	}
	RB_FOREACH(cc, cclient_tree, &ct->clients)
		if (cc->id > max)
			max = cc->id;
	return max;
}

static void conn_owners_reset_claims(struct conn_table *ct)
{
	struct conn_owner *o;
	uint32_t n, i;

	if (ct->store == NULL)
		return;
	o = conn_store_owners(ct->store, &n);
	for (i = 0; i < n; i++)
		o[i].claimed = 0;
}

void conn_counts(struct conn_table *ct, struct conn_counts *out)
{
	*out = ct->counts;
}

void conn_client_counts(struct conn_table *ct, uint64_t client,
			struct conn_counts *out)
{
	struct conn_client *cc = conn_cclient_get(ct, client, 0);
	struct conn *c;

	memset(out, 0, sizeof(*out));
	if (cc == NULL)
		return;
	LIST_FOREACH(c, &cc->conns, client_link) {
		out->total++;
		out->by_state[c->state]++;
		if (c->kind == CK_COMM)
			out->comm++;
		else
			out->sidr++;
	}
}

void conn_client_foreach(struct conn_table *ct, uint64_t client, unsigned skip,
			 unsigned max, uint64_t now_ms,
			 void (*fn)(void *arg, const struct conn_view *v),
			 void *arg)
{
	struct conn_client *cc = conn_cclient_get(ct, client, 0);
	struct conn_view v;
	struct conn *c;
	unsigned n = 0, seen = 0;

	if (cc == NULL)
		return;
	LIST_FOREACH(c, &cc->conns, client_link) {
		if (seen++ < skip)
			continue;
		if (n++ >= max)
			break;
		memset(&v, 0, sizeof(v));
		v.sidr = c->kind == CK_SIDR;
		v.state = (enum conn_state)c->state;
		v.port = c->port;
		v.guest_id = c->guest_id;
		v.host_id = c->host_id;
		v.peer_id = c->peer_id;
		v.has_peer = c->peer_id != 0;
		v.peer_gid = c->path.peer_gid;
		v.expires_in_ms =
			c->timer == TC_NONE
				? -1
				: (c->deadline_ms > now_ms
					   ? (int64_t)(c->deadline_ms - now_ms)
					   : 0);
		fn(arg, &v);
	}
}
