// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The connection table's storage (see conn.h for what it does).
 *
 * An entry is 44 bytes in one flat array, addressed by its index; it
 * holds no pointer, so the same array serves from the heap (an anonymous
 * mapping, touched as it fills) or from the state file that outlives the
 * daemon (conn_store.c).  What it needs besides is shared or derived:
 *   - host IDs are derived from the index and an 8-bit generation of the
 *     slot, XORed with the random operand, as the kernel CM derives its
 *     IDs from its xarray index: looking one up is arithmetic, and no
 *     index of host IDs exists;
 *   - wire TIDs are derived from the index and a per-entry sequence;
 *   - paths (GIDs, P_Key, SL, ...) and our CA GUID are records shared by
 *     every connection between the same two ports, counted by reference;
 *   - each client has one open-addressing set of its entries' indexes,
 *     keyed by comm ID: the lookup by guest ID and the client's list;
 *   - the peers' comm IDs are one open-addressing set of indexes;
 *   - timers are per-class FIFOs linked by index; deadlines are 32-bit
 *     milliseconds, compared across their wrap.
 * Freed slots are reused oldest first and only once thousands are free,
 * so a host ID comes back only after about a million others.
 */
#include "mux/conn.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/cm_mad.h"
#include "common/hash.h"
#include "common/tree.h"
#include "common/wire.h"
#include "mux/conn_store.h"

enum conn_kind { CK_COMM, CK_SIDR };

/* Timer classes, one fixed duration each: handshake, timewait, and a
 * handshake extended by each of the 32 MRA Service Timeouts. */
enum { TC_NONE, TC_HANDSHAKE, TC_TIMEWAIT, TC_MRA0, TC_MAX = TC_MRA0 + 32 };

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
	uint32_t peer_id; /* 0: not known yet */
	uint32_t peer_qpn;
	uint32_t guest_tid_hi, guest_tid_lo; /* of the client's last send */
	uint32_t path;                       /* its path record */
	uint32_t deadline;                   /* table ms, modulo 2^32 */
	uint32_t timer_prev, timer_next;     /* index + 1; a free list's too */
	uint16_t owner;                      /* its client's record */
	uint8_t port;
	uint8_t gen;   /* of the slot: its host IDs name it */
	uint8_t state; /* enum conn_state; the high nibble: last send's attr */
	uint8_t flags;
	uint8_t timer; /* class, TC_NONE */
	uint8_t tid;   /* sequence of the last send's wire TID */
};

_Static_assert(sizeof(struct conn) == 44, "an entry is 44 bytes");

/* A path and our CA GUID, shared by the connections that use them. */
struct conn_pathrec {
	struct conn_path path;
	uint32_t refs; /* 0: free */
	uint64_t ca_guid;
	uint32_t next_free;
	uint32_t pad;
};

/* An open-addressing set of indexes (index + 1 in a cell, 0: empty),
 * linear probing, deletion by backward shift. */
struct conn_hset {
	uint32_t *cell;
	uint32_t cap; /* 0 or a power of 2 */
	uint32_t n;
};

struct conn_client {
	uint64_t id;
	uint32_t n;       /* entries */
	uint32_t charged; /* of them, what its quota counts */
	struct conn_hset conns;
	uint8_t used;
	uint8_t pinned; /* an owner that may resume: kept without entries */
	uint16_t next_free;
};

/* Peer records per (port, source GID); the zero GID counts a port's. */
struct src_count {
	RB_ENTRY(src_count) link;
	unsigned port;
	struct gid gid;
	unsigned n;
};

static int conn_src_cmp(struct src_count *a, struct src_count *b)
{
	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	return gid_cmp(&a->gid, &b->gid);
}

RB_HEAD(src_tree, src_count);
TREE_GENERATE_STATIC(src_tree, src_count, link, conn_src_cmp)

/* Slot indexes take 24 bits of a host ID; wire TIDs of entries are
 * (index + 1) << 8 | sequence, those of the table's own sends are above
 * them all. */
#define CONN_MAX_ENTRIES 0xfe0000u
#define CONN_OWN_TID_BASE 0xff000000u
#define CONN_MAX_CLIENTS 0xffffu
#define CONN_NO_OWNER 0xffffu
/* A freed slot waits until this many are free before it is reused. */
#define CONN_REUSE_AFTER 4096u

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
	struct conn_hset path_index;
	struct conn_client *cl; /* clients' records */
	uint32_t cl_cap;        /* records there can be */
	uint32_t ncl;           /* records ever used */
	uint32_t cl_free;       /* index + 1 */
	struct conn_hset cl_index;
	struct conn_hset peers;
	struct src_tree sources; /* peer record counts */

	uint32_t timer_head[TC_MAX], timer_tail[TC_MAX];
	unsigned timer_len[TC_MAX];
	uint64_t timer_ms[TC_MAX];
	struct conn_counts counts;
	unsigned call_max;        /* the current call's client limit */
	struct conn_store *store; /* NULL: entries on the heap */
	int detached;             /* the daemon is going; entries stay */
};

/* ---- hashing -------------------------------------------------------------- */

static uint32_t conn_mix(uint64_t x)
{
	return (uint32_t)hash_mix64(x);
}

typedef uint32_t (*conn_hash_fn)(const struct conn_table *ct, uint32_t idx);

/* Large sets are mappings of their own: as a set doubles, the arrays it
 * leaves go back to the system instead of staying in the heap. */
#define CONN_HSET_MAPPED (64u * 1024)

static uint32_t *conn_cells_alloc(uint32_t cap)
{
	size_t bytes = (size_t)cap * sizeof(uint32_t);
	void *p;

	if (bytes < CONN_HSET_MAPPED)
		return calloc(cap, sizeof(uint32_t));
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void conn_cells_free(uint32_t *cell, uint32_t cap)
{
	size_t bytes = (size_t)cap * sizeof(uint32_t);

	if (bytes < CONN_HSET_MAPPED)
		free(cell);
	else if (cell)
		munmap(cell, bytes);
}

static int conn_hset_resize(const struct conn_table *ct, struct conn_hset *h,
			    uint32_t cap, conn_hash_fn hash)
{
	uint32_t *cell = conn_cells_alloc(cap), i, j;

	if (cell == NULL)
		return -ENOMEM;
	for (i = 0; i < h->cap; i++) {
		if (h->cell[i] == 0)
			continue;
		for (j = hash(ct, h->cell[i] - 1) & (cap - 1); cell[j];
		     j = (j + 1) & (cap - 1))
			;
		cell[j] = h->cell[i];
	}
	conn_cells_free(h->cell, h->cap);
	h->cell = cell;
	h->cap = cap;
	return 0;
}

/* Room for one more, at most 3/4 full. */
static int conn_hset_reserve(const struct conn_table *ct, struct conn_hset *h,
			     conn_hash_fn hash)
{
	if ((uint64_t)(h->n + 1) * 4 <= (uint64_t)h->cap * 3)
		return 0;
	return conn_hset_resize(ct, h, h->cap ? h->cap * 2 : 8, hash);
}

/* After conn_hset_reserve(). */
static void conn_hset_insert(const struct conn_table *ct, struct conn_hset *h,
			     uint32_t idx, conn_hash_fn hash)
{
	uint32_t j;

	for (j = hash(ct, idx) & (h->cap - 1); h->cell[j];
	     j = (j + 1) & (h->cap - 1))
		;
	h->cell[j] = idx + 1;
	h->n++;
}

static void conn_hset_remove(const struct conn_table *ct, struct conn_hset *h,
			     uint32_t idx, conn_hash_fn hash)
{
	uint32_t mask = h->cap - 1, i, j, k;

	if (h->cap == 0)
		return;
	for (i = hash(ct, idx) & mask; h->cell[i] != idx + 1;
	     i = (i + 1) & mask)
		if (h->cell[i] == 0)
			return;
	for (j = i;;) {
		j = (j + 1) & mask;
		if (h->cell[j] == 0)
			break;
		k = hash(ct, h->cell[j] - 1) & mask;
		/* Stays if its home lies cyclically in (i, j]. */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		h->cell[i] = h->cell[j];
		i = j;
	}
	h->cell[i] = 0;
	h->n--;
	/* Give memory back once mostly empty. */
	if (h->cap > 8 && (uint64_t)h->n * 8 < h->cap)
		conn_hset_resize(ct, h, h->cap / 2, hash);
}

static void conn_hset_free(struct conn_hset *h)
{
	conn_cells_free(h->cell, h->cap);
	memset(h, 0, sizeof(*h));
}

/* Probe the cells from a key's home: for (FOREACH) { idx = *cell - 1 } */
#define CONN_HSET_PROBE(h, home, j)                        \
	for ((j) = (h)->cap ? (home) & ((h)->cap - 1) : 0; \
	     (h)->cap && (h)->cell[(j)]; (j) = ((j) + 1) & ((h)->cap - 1))

/* ---- entries, paths, clients: access -------------------------------------- */

static struct conn *conn_at(const struct conn_table *ct, uint32_t idx)
{
	return &ct->e[idx];
}

static uint32_t conn_idx(const struct conn_table *ct, const struct conn *c)
{
	return (uint32_t)(c - ct->e);
}

static enum conn_kind conn_kind_of(const struct conn *c)
{
	return c->flags & CF_SIDR ? CK_SIDR : CK_COMM;
}

static enum conn_state conn_state_of(const struct conn *c)
{
	return (enum conn_state)(c->state & 0x0f);
}

static const struct conn_path *conn_path_of(const struct conn_table *ct,
					    const struct conn *c)
{
	return &ct->paths[c->path].path;
}

static struct conn_client *conn_client_of(const struct conn_table *ct,
					  const struct conn *c)
{
	return &ct->cl[c->owner];
}

static uint64_t conn_client_id(const struct conn_table *ct,
			       const struct conn *c)
{
	return ct->cl[c->owner].id;
}

static uint32_t conn_host_id(const struct conn_table *ct, const struct conn *c)
{
	if (!(c->flags & CF_HOSTED))
		return 0;
	return (((uint32_t)c->gen << 24) | conn_idx(ct, c)) ^
	       ct->random_operand;
}

/* The keys: a client's set by comm ID (or, for an entry no guest ID
 * finds, by its index), the peers' set by the peer's ID. */
static uint32_t conn_guest_hash(unsigned kind, unsigned port, uint32_t guest)
{
	return conn_mix(((uint64_t)kind << 40) | ((uint64_t)port << 32) |
			guest);
}

static uint32_t conn_client_key(const struct conn_table *ct, uint32_t idx)
{
	const struct conn *c = conn_at(ct, idx);

	if (c->flags & CF_GUESTED)
		return conn_guest_hash(conn_kind_of(c), c->port, c->guest_id);
	return conn_mix((1ull << 48) | idx);
}

static uint32_t conn_peer_hash(unsigned kind, unsigned port, uint32_t peer)
{
	return conn_mix((3ull << 48) | ((uint64_t)kind << 40) |
			((uint64_t)port << 32) | peer);
}

static uint32_t conn_peer_key(const struct conn_table *ct, uint32_t idx)
{
	const struct conn *c = conn_at(ct, idx);

	return conn_peer_hash(conn_kind_of(c), c->port, c->peer_id);
}

static uint32_t conn_cl_key(const struct conn_table *ct, uint32_t idx)
{
	return conn_mix(ct->cl[idx].id);
}

static uint32_t conn_path_hash(const struct conn_path *p, uint64_t ca_guid)
{
	uint64_t h = ca_guid;
	int i;

	for (i = 0; i < 16; i += 8) {
		h = conn_mix(h ^ wire_get64(p->local_gid.raw + i)) ^ (h << 7);
		h = conn_mix(h ^ wire_get64(p->peer_gid.raw + i)) ^ (h << 7);
	}
	h ^= (uint64_t)p->pkey_index << 48 | (uint64_t)p->grh << 40 |
	     (uint64_t)p->sl << 32 | (uint64_t)p->hop_limit << 24 |
	     (uint64_t)p->traffic_class << 16;
	return conn_mix(h ^ ((uint64_t)p->flow_label << 1));
}

static uint32_t conn_pathrec_key(const struct conn_table *ct, uint32_t idx)
{
	return conn_path_hash(&ct->paths[idx].path, ct->paths[idx].ca_guid);
}

static int conn_path_eq(const struct conn_path *a, const struct conn_path *b)
{
	return gid_cmp(&a->local_gid, &b->local_gid) == 0 &&
	       gid_cmp(&a->peer_gid, &b->peer_gid) == 0 &&
	       a->pkey_index == b->pkey_index && a->grh == b->grh &&
	       a->sl == b->sl && a->hop_limit == b->hop_limit &&
	       a->traffic_class == b->traffic_class &&
	       a->flow_label == b->flow_label;
}

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

/* ---- the table ------------------------------------------------------------ */

static void *conn_reserve_anon(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static struct conn_table *conn_table_alloc(const struct conn_limits *lim,
					   uint32_t random_operand,
					   conn_emit_fn emit, void *emit_arg)
{
	struct conn_table *ct = calloc(1, sizeof(*ct));
	int i;

	if (ct == NULL)
		return NULL;
	ct->lim = *lim;
	ct->random_operand = random_operand;
	ct->tid_seq = random_operand;
	ct->emit = emit;
	ct->emit_arg = emit_arg;
	RB_INIT(&ct->sources);
	ct->timer_ms[TC_HANDSHAKE] = lim->handshake_ms;
	ct->timer_ms[TC_TIMEWAIT] = lim->timewait_ms;
	for (i = 0; i < 32; i++)
		ct->timer_ms[TC_MRA0 + i] = lim->handshake_ms +
					    cm_service_timeout_ms((unsigned)i);
	/* Clients' records are few and never move: reserved, touched as
	 * used. */
	ct->cl = conn_reserve_anon(CONN_MAX_CLIENTS * sizeof(*ct->cl));
	ct->cl_cap = CONN_MAX_CLIENTS;
	if (ct->cl == NULL) {
		free(ct);
		return NULL;
	}
	return ct;
}

/* On the heap, the arrays are reservations the entries touch as they
 * come: as many as the state file could hold. */
#define CONN_HEAP_ENTRIES (1u << 22)

struct conn_table *conn_table_new(const struct conn_limits *lim,
				  uint32_t random_operand, conn_emit_fn emit,
				  void *emit_arg)
{
	struct conn_table *ct = conn_table_alloc(lim, random_operand, emit,
						 emit_arg);

	if (ct == NULL)
		return NULL;
	ct->cap = ct->path_cap = CONN_HEAP_ENTRIES;
	ct->e = conn_reserve_anon((size_t)ct->cap * sizeof(*ct->e));
	ct->paths = conn_reserve_anon((size_t)ct->path_cap *
				      sizeof(*ct->paths));
	if (ct->e == NULL || ct->paths == NULL) {
		conn_table_free(ct);
		return NULL;
	}
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
	ct->tid_seq = (ct->tid_seq + 1) & 0xffffff;
	if (ct->store)
		*conn_store_counter(ct->store,
				    CONN_STORE_TID_SEQ) = ct->tid_seq;
	return CONN_OWN_TID_BASE | ct->tid_seq;
}

/* Every call passes its time in; deadlines are read against the latest
 * (kept with the entries, for the next daemon to read them). */
static void conn_clock(struct conn_table *ct, uint64_t now_ms)
{
	if (now_ms <= ct->now_ms)
		return;
	ct->now_ms = now_ms;
	if (ct->store) {
		*conn_store_counter(ct->store,
				    CONN_STORE_NOW_LO) = (uint32_t)now_ms;
		*conn_store_counter(ct->store,
				    CONN_STORE_NOW_HI) = (uint32_t)(now_ms >>
								    32);
	}
}

/* ---- timers: one FIFO per duration class -------------------------------- */

/* A deadline read against now: negative once passed. */
static int64_t conn_deadline_in(const struct conn *c, uint64_t now_ms)
{
	return (int32_t)(c->deadline - (uint32_t)now_ms);
}

static void conn_timer_stop(struct conn_table *ct, struct conn *c)
{
	uint32_t prev = c->timer_prev, next = c->timer_next;

	if (c->timer == TC_NONE)
		return;
	if (prev)
		conn_at(ct, prev - 1)->timer_next = next;
	else
		ct->timer_head[c->timer] = next;
	if (next)
		conn_at(ct, next - 1)->timer_prev = prev;
	else
		ct->timer_tail[c->timer] = prev;
	ct->timer_len[c->timer]--;
	c->timer = TC_NONE;
	c->timer_prev = c->timer_next = 0;
}

static void conn_timer_append(struct conn_table *ct, struct conn *c, int tc)
{
	uint32_t self = conn_idx(ct, c) + 1, tail = ct->timer_tail[tc];

	c->timer = (uint8_t)tc;
	c->timer_prev = tail;
	c->timer_next = 0;
	if (tail)
		conn_at(ct, tail - 1)->timer_next = self;
	else
		ct->timer_head[tc] = self;
	ct->timer_tail[tc] = self;
	ct->timer_len[tc]++;
}

/* (Re-)arm: to the tail, as every entry of a class has the same length. */
static void conn_timer_arm(struct conn_table *ct, struct conn *c, int tc,
			   uint64_t now_ms)
{
	conn_timer_stop(ct, c);
	c->deadline = (uint32_t)(now_ms + ct->timer_ms[tc]);
	conn_timer_append(ct, c, tc);
}

static struct conn *conn_timer_first(const struct conn_table *ct, int tc)
{
	return ct->timer_head[tc] ? conn_at(ct, ct->timer_head[tc] - 1) : NULL;
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
	       (c = conn_timer_first(ct, TC_TIMEWAIT)) != NULL) {
		conn_remove(ct, c);
		ct->counts.timewait_evicted++;
	}
}

/* One more element at the end of the entries' or the paths' array (*hwm
 * used so far, of cap), its pages reserved in the state file and the
 * file's mark moved: its index, or -ENOSPC. */
static int conn_array_grow(struct conn_table *ct, enum conn_store_array which,
			   uint32_t *hwm, uint32_t cap, uint32_t *idx)
{
	if (*hwm >= cap ||
	    (ct->store && conn_store_reserve(ct->store, which, *hwm + 1) < 0))
		return -ENOSPC;
	*idx = (*hwm)++;
	if (ct->store)
		*conn_store_counter(ct->store,
				    which == CONN_STORE_ENTRIES
					    ? CONN_STORE_ENTRIES_HWM
					    : CONN_STORE_PATHS_HWM) = *hwm;
	return 0;
}

/* ---- paths: shared by the connections between the same two ports ------- */

static int conn_path_ref(struct conn_table *ct, const struct conn_path *p,
			 uint64_t ca_guid, uint32_t *out)
{
	uint32_t h = conn_path_hash(p, ca_guid), j, idx;
	struct conn_pathrec *r;

	CONN_HSET_PROBE(&ct->path_index, h, j) {
		r = &ct->paths[ct->path_index.cell[j] - 1];
		if (r->ca_guid == ca_guid && conn_path_eq(&r->path, p)) {
			r->refs++;
			*out = ct->path_index.cell[j] - 1;
			return 0;
		}
	}
	if (conn_hset_reserve(ct, &ct->path_index, conn_pathrec_key) < 0)
		return -ENOMEM;
	if (ct->path_free) {
		idx = ct->path_free - 1;
		ct->path_free = ct->paths[idx].next_free;
	} else if (conn_array_grow(ct, CONN_STORE_PATHS, &ct->path_hwm,
				   ct->path_cap, &idx) < 0) {
		return -ENOSPC;
	}
	r = &ct->paths[idx];
	memset(r, 0, sizeof(*r));
	r->path = *p;
	r->ca_guid = ca_guid;
	__atomic_store_n(&r->refs, 1, __ATOMIC_RELEASE);
	conn_hset_insert(ct, &ct->path_index, idx, conn_pathrec_key);
	*out = idx;
	return 0;
}

static void conn_path_unref(struct conn_table *ct, uint32_t idx)
{
	struct conn_pathrec *r = &ct->paths[idx];

	if (r->refs == 0 || --r->refs)
		return;
	conn_hset_remove(ct, &ct->path_index, idx, conn_pathrec_key);
	r->next_free = ct->path_free;
	ct->path_free = idx + 1;
}

/* ---- clients' records ------------------------------------------------------ */

static uint32_t conn_cl_find(const struct conn_table *ct, uint64_t id)
{
	uint32_t j;

	CONN_HSET_PROBE(&ct->cl_index, conn_mix(id), j) {
		if (ct->cl[ct->cl_index.cell[j] - 1].id == id)
			return ct->cl_index.cell[j] - 1;
	}
	return CONN_NO_OWNER;
}

static struct conn_client *conn_cclient_get(struct conn_table *ct, uint64_t id)
{
	uint32_t i = conn_cl_find(ct, id);

	return i == CONN_NO_OWNER ? NULL : &ct->cl[i];
}

/* A record for a new client; in the state file it is an owner record,
 * whose index the entries name across a restart. */
static uint32_t conn_cl_new(struct conn_table *ct, uint64_t id)
{
	struct conn_client *cc;
	struct conn_owner *o;
	uint32_t i, n;

	if (conn_hset_reserve(ct, &ct->cl_index, conn_cl_key) < 0)
		return CONN_NO_OWNER;
	if (ct->cl_free) {
		i = ct->cl_free - 1;
		ct->cl_free = ct->cl[i].next_free;
	} else if (ct->ncl < ct->cl_cap) {
		i = ct->ncl++;
	} else {
		return CONN_NO_OWNER;
	}
	if (ct->store) {
		o = conn_store_owners(ct->store, &n);
		memset(&o[i], 0, sizeof(o[i]));
		o[i].client = id;
		o[i].claimed = 1;
		__atomic_store_n(&o[i].live, 1, __ATOMIC_RELEASE);
	}
	cc = &ct->cl[i];
	memset(cc, 0, sizeof(*cc));
	cc->id = id;
	cc->used = 1;
	conn_hset_insert(ct, &ct->cl_index, i, conn_cl_key);
	return i;
}

static void conn_cl_free(struct conn_table *ct, uint32_t i)
{
	struct conn_client *cc = &ct->cl[i];
	struct conn_owner *o;
	uint32_t n;

	conn_hset_remove(ct, &ct->cl_index, i, conn_cl_key);
	conn_hset_free(&cc->conns);
	cc->used = 0;
	if (ct->store) {
		o = conn_store_owners(ct->store, &n);
		__atomic_store_n(&o[i].live, 0, __ATOMIC_RELEASE);
	}
	cc->next_free = (uint16_t)ct->cl_free;
	ct->cl_free = i + 1;
}

static void conn_cl_forget_empty(struct conn_table *ct, uint32_t i)
{
	if (i != CONN_NO_OWNER && ct->cl[i].n == 0 && !ct->cl[i].pinned)
		conn_cl_free(ct, i);
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
	if (!(c->flags & CF_PEER_REC))
		return;
	c->flags &= (uint8_t)~CF_PEER_REC;
	conn_peer_rec_undo(ct, c->port, &conn_path_of(ct, c)->peer_gid);
}

/* ---- entries -------------------------------------------------------------- */

static void conn_uncharge(struct conn_table *ct, struct conn *c)
{
	if (!(c->flags & CF_CHARGED))
		return;
	c->flags &= (uint8_t)~CF_CHARGED;
	conn_client_of(ct, c)->charged--;
}

static void conn_set_state(struct conn_table *ct, struct conn *c,
			   enum conn_state s)
{
	ct->counts.by_state[conn_state_of(c)]--;
	c->state = (uint8_t)((c->state & 0xf0) | s);
	ct->counts.by_state[s]++;
	if (s == CONN_TIMEWAIT)
		conn_uncharge(ct, c);
}

/* TimeWait (cm.c's cm_enter_timewait()): entered, or its timer restarted
 * for an entry in it already. */
static void conn_enter_timewait(struct conn_table *ct, struct conn *c,
				uint64_t now_ms)
{
	if (conn_state_of(c) != CONN_TIMEWAIT)
		conn_set_state(ct, c, CONN_TIMEWAIT);
	conn_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
}

/* The client's set is keyed by the guest ID while the entry has one that
 * finds it: a change of that moves it. */
static void conn_set_flags(struct conn_table *ct, struct conn *c, uint8_t set,
			   uint8_t clear)
{
	struct conn_client *cc = conn_client_of(ct, c);
	uint32_t idx = conn_idx(ct, c);
	uint8_t flags = (uint8_t)((c->flags | set) & ~clear);

	if ((flags ^ c->flags) & CF_GUESTED) {
		/* Out and back in: a set never needs more room for that,
		 * even when taking it out shrank the set. */
		conn_hset_remove(ct, &cc->conns, idx, conn_client_key);
		c->flags = flags;
		conn_hset_insert(ct, &cc->conns, idx, conn_client_key);
	} else {
		c->flags = flags;
	}
}

static void conn_guest_unlink(struct conn_table *ct, struct conn *c)
{
	conn_set_flags(ct, c, 0, CF_GUESTED);
}

static void conn_peer_unlink(struct conn_table *ct, struct conn *c)
{
	if (c->flags & CF_IN_PEER) {
		conn_hset_remove(ct, &ct->peers, conn_idx(ct, c),
				 conn_peer_key);
		c->flags &= (uint8_t)~CF_IN_PEER;
	}
}

/* The slot goes back, oldest first; its generation and TID sequence
 * stay, so that the next entry in it has other IDs. */
static void conn_slot_free(struct conn_table *ct, struct conn *c)
{
	uint32_t self = conn_idx(ct, c) + 1;

	__atomic_store_n(&c->flags, 0, __ATOMIC_RELEASE);
	c->timer_next = 0;
	if (ct->free_tail)
		conn_at(ct, ct->free_tail - 1)->timer_next = self;
	else
		ct->free_head = self;
	ct->free_tail = self;
	ct->nfree++;
}

static struct conn *conn_slot_alloc(struct conn_table *ct)
{
	uint32_t idx;
	struct conn *c;
	uint8_t gen, tid;

	if (ct->nfree < CONN_REUSE_AFTER &&
	    conn_array_grow(ct, CONN_STORE_ENTRIES, &ct->hwm, ct->cap, &idx) ==
		    0) {
		c = conn_at(ct, idx);
	} else if (ct->nfree) {
		idx = ct->free_head - 1;
		c = conn_at(ct, idx);
		ct->free_head = c->timer_next;
		if (ct->free_head == 0)
			ct->free_tail = 0;
		ct->nfree--;
	} else {
		return NULL;
	}
	gen = (uint8_t)(c->gen + 1);
	tid = c->tid;
	memset(c, 0, sizeof(*c));
	c->tid = tid;
	/* Host ID 0 is never given. */
	if (((((uint32_t)gen << 24) | idx) ^ ct->random_operand) == 0)
		gen++;
	c->gen = gen;
	return c;
}

/* The client's set has room for one more. */
static int conn_client_room(struct conn_table *ct, struct conn_client *cc)
{
	return conn_hset_reserve(ct, &cc->conns, conn_client_key);
}

/* An entry in (delta 1) or out of (-1) counts of entries. */
static void conn_count(struct conn_counts *n, const struct conn *c, int delta)
{
	n->total += (unsigned)delta;
	n->by_state[conn_state_of(c)] += (unsigned)delta;
	if (c->flags & CF_SIDR)
		n->sidr += (unsigned)delta;
	else
		n->comm += (unsigned)delta;
}

/* An entry out of everything but its client's set, and its slot freed. */
static void conn_release(struct conn_table *ct, struct conn *c)
{
	conn_timer_stop(ct, c);
	conn_uncharge(ct, c);
	conn_peer_rec_drop(ct, c);
	conn_peer_unlink(ct, c);
	ct->cl[c->owner].n--;
	conn_count(&ct->counts, c, -1);
	conn_path_unref(ct, c->path);
	conn_slot_free(ct, c);
}

static void conn_remove(struct conn_table *ct, struct conn *c)
{
	uint32_t owner = c->owner;

	conn_hset_remove(ct, &ct->cl[owner].conns, conn_idx(ct, c),
			 conn_client_key);
	conn_release(ct, c);
	conn_cl_forget_empty(ct, owner);
}

/* The table's counts of an entry (new, or taken back from a previous
 * daemon). */
static void conn_account(struct conn_table *ct, struct conn *c)
{
	struct conn_client *cc = conn_client_of(ct, c);

	cc->n++;
	cc->charged += (c->flags & CF_CHARGED) != 0;
	conn_count(&ct->counts, c, 1);
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
			     const struct conn_path *path, uint64_t ca_guid,
			     int charge, int *err)
{
	uint32_t owner = conn_cl_find(ct, client), pidx;
	struct conn_client *cc;
	struct conn *c;

	if (port > UINT8_MAX) {
		*err = -EINVAL;
		return NULL;
	}
	if (owner == CONN_NO_OWNER)
		owner = conn_cl_new(ct, client);
	if (owner == CONN_NO_OWNER) {
		*err = -ENOSPC;
		return NULL;
	}
	cc = &ct->cl[owner];
	if (charge && conn_quota_full(ct, cc)) {
		*err = -ENOSPC;
		conn_cl_forget_empty(ct, owner);
		return NULL;
	}
	/* Everything that can fail, before the slot is taken. */
	if (conn_client_room(ct, cc) < 0) {
		*err = -ENOMEM;
		conn_cl_forget_empty(ct, owner);
		return NULL;
	}
	*err = conn_path_ref(ct, path, ca_guid, &pidx);
	if (*err) {
		conn_cl_forget_empty(ct, owner);
		return NULL;
	}
	c = conn_slot_alloc(ct);
	if (c == NULL) {
		*err = -ENOSPC;
		conn_path_unref(ct, pidx);
		conn_cl_forget_empty(ct, owner);
		return NULL;
	}
	c->state = (uint8_t)state;
	c->owner = (uint16_t)owner;
	c->port = (uint8_t)port;
	c->path = pidx;
	c->flags = (uint8_t)((kind == CK_SIDR ? CF_SIDR : 0) |
			     (charge ? CF_CHARGED : 0));
	conn_hset_insert(ct, &cc->conns, conn_idx(ct, c), conn_client_key);
	conn_account(ct, c);
	/* Last: a restart takes the slot as an entry from here on. */
	__atomic_store_n(&c->flags, (uint8_t)(c->flags | CF_LIVE),
			 __ATOMIC_RELEASE);
	return c;
}

static struct conn *conn_host_find(struct conn_table *ct, enum conn_kind kind,
				   unsigned port, uint32_t host_id)
{
	uint32_t x = host_id ^ ct->random_operand, idx = x & 0xffffff;
	struct conn *c;

	if (host_id == 0 || idx >= ct->hwm)
		return NULL;
	c = conn_at(ct, idx);
	if ((c->flags & (CF_LIVE | CF_HOSTED)) != (CF_LIVE | CF_HOSTED) ||
	    c->gen != x >> 24 || conn_kind_of(c) != kind || c->port != port)
		return NULL;
	return c;
}

static struct conn *conn_guest_find(struct conn_table *ct, enum conn_kind kind,
				    uint64_t client, unsigned port,
				    uint32_t guest_id)
{
	struct conn_client *cc = conn_cclient_get(ct, client);
	struct conn *c;
	uint32_t j;

	if (cc == NULL)
		return NULL;
	CONN_HSET_PROBE(&cc->conns, conn_guest_hash(kind, port, guest_id), j) {
		c = conn_at(ct, cc->conns.cell[j] - 1);
		if ((c->flags & CF_GUESTED) && c->guest_id == guest_id &&
		    c->port == port && conn_kind_of(c) == kind)
			return c;
	}
	return NULL;
}

/* The peers' set holds every GID's entries with one peer ID together. */
static int conn_peer_is(const struct conn *c, enum conn_kind kind,
			unsigned port, uint32_t peer_id)
{
	return c->peer_id == peer_id && c->port == port &&
	       conn_kind_of(c) == kind;
}

static struct conn *conn_peer_find_kind(struct conn_table *ct,
					enum conn_kind kind, unsigned port,
					uint32_t peer_id, const struct gid *gid)
{
	struct conn *c;
	uint32_t j;

	CONN_HSET_PROBE(&ct->peers, conn_peer_hash(kind, port, peer_id), j) {
		c = conn_at(ct, ct->peers.cell[j] - 1);
		if (conn_peer_is(c, kind, port, peer_id) &&
		    gid_cmp(&conn_path_of(ct, c)->peer_gid, gid) == 0)
			return c;
	}
	return NULL;
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
	struct conn *c;
	uint32_t j;

	CONN_HSET_PROBE(&ct->peers, conn_peer_hash(kind, port, peer_id), j) {
		c = conn_at(ct, ct->peers.cell[j] - 1);
		if (conn_peer_is(c, kind, port, peer_id) &&
		    conn_client_id(ct, c) == client &&
		    conn_state_of(c) == CONN_REQ_RCVD)
			return c;
	}
	return NULL;
}

/* The peer's comm ID is known: index the entry by it (first come). */
static void conn_peer_set(struct conn_table *ct, struct conn *c,
			  uint32_t peer_id)
{
	if ((c->flags & CF_IN_PEER) || peer_id == 0)
		return;
	c->peer_id = peer_id;
	if (conn_peer_find_kind(ct, conn_kind_of(c), c->port, peer_id,
				&conn_path_of(ct, c)->peer_gid) == NULL &&
	    conn_hset_reserve(ct, &ct->peers, conn_peer_key) == 0) {
		conn_hset_insert(ct, &ct->peers, conn_idx(ct, c),
				 conn_peer_key);
		c->flags |= CF_IN_PEER;
	}
}

/* Give an entry its guest ID and its host ID (derived from its slot), and
 * let both find it. */
static void conn_bind(struct conn_table *ct, struct conn *c, uint32_t guest_id)
{
	c->guest_id = guest_id;
	conn_set_flags(ct, c, CF_HOSTED | CF_GUESTED, 0);
}

static struct conn *conn_create_bound(struct conn_table *ct,
				      enum conn_kind kind, uint64_t client,
				      unsigned port, uint32_t guest_id,
				      enum conn_state state,
				      const struct conn_path *path,
				      uint64_t ca_guid, int *err)
{
	struct conn *c = conn_new(ct, kind, client, port, state, path, ca_guid,
				  1, err);

	if (c)
		conn_bind(ct, c, guest_id);
	return c;
}

/* ---- TIDs ----------------------------------------------------------------- */

#define TID_HIGH 0xffffffff00000000ull

static uint32_t conn_wire_tid(const struct conn_table *ct, const struct conn *c)
{
	return ((conn_idx(ct, c) + 1) << 8) | c->tid;
}

static uint64_t conn_guest_tid(const struct conn *c)
{
	return (uint64_t)c->guest_tid_hi << 32 | c->guest_tid_lo;
}

/* The attribute of the last send, in the state byte's high nibble (CM
 * attributes are 0x10..0x1a; 0: nothing sent yet). */
static unsigned conn_tid_attr(const struct conn *c)
{
	return c->state >> 4;
}

/* A client's send gets a fresh low TID half, unless it repeats its last
 * send (same attribute and guest TID): a retransmission keeps its TID. */
static void conn_tid_out(struct conn *c, const struct conn_table *ct,
			 uint8_t *mad)
{
	uint64_t tid = cm_mad_tid(mad);
	unsigned attr = (cm_mad_attr_id(mad) - 0x0f) & 0x0f;

	if (conn_tid_attr(c) == 0 || conn_tid_attr(c) != attr ||
	    conn_guest_tid(c) != tid) {
		c->tid = (uint8_t)(c->tid == 0xff ? 1 : c->tid + 1);
		c->state = (uint8_t)((attr << 4) | (c->state & 0x0f));
		c->guest_tid_hi = (uint32_t)(tid >> 32);
		c->guest_tid_lo = (uint32_t)tid;
	}
	wire_put64(mad + MAD_OFF_TID, (tid & TID_HIGH) | conn_wire_tid(ct, c));
}

/* A message that echoes the TID of our last send gets the guest's back. */
static void conn_tid_in(const struct conn_table *ct, const struct conn *c,
			uint8_t *mad)
{
	if (conn_tid_attr(c) &&
	    (uint32_t)cm_mad_tid(mad) == conn_wire_tid(ct, c))
		wire_put64(mad + MAD_OFF_TID, conn_guest_tid(c));
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
	wire_put64(guid, ct->paths[c->path].ca_guid);
	cm_build_rej(mad, conn_next_tid(ct), conn_host_id(ct, c), c->peer_id,
		     msg, reason, timeout ? guid : NULL,
		     timeout ? sizeof(guid) : 0);
	conn_send_answer(ct, why, c->port, conn_path_of(ct, c), mad);
}

/*
 * The client no longer stands behind this connection (it is gone, or it
 * reused the comm ID): tell the peer what cm_destroy_id() would, and
 * leave the entry in the state that follows.
 */
static void conn_abandon(struct conn_table *ct, struct conn *c, uint64_t now_ms)
{
	uint8_t mad[MAD_SIZE];

	if (conn_kind_of(c) != CK_COMM)
		return;
	switch (conn_state_of(c)) {
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
		cm_build_dreq(mad, conn_next_tid(ct), conn_host_id(ct, c),
			      c->peer_id, c->peer_qpn);
		conn_send_answer(ct, CONN_ANS_DREQ_ABANDONED, c->port,
				 conn_path_of(ct, c), mad);
		conn_set_state(ct, c, CONN_DREQ_SENT);
		conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		return;
	case CONN_DREQ_RCVD:
		cm_build_drep(mad, conn_next_tid(ct), conn_host_id(ct, c),
			      c->peer_id);
		conn_send_answer(ct, CONN_ANS_DREP_ABANDONED, c->port,
				 conn_path_of(ct, c), mad);
		break;
	default: return;
	}
	conn_enter_timewait(ct, c, now_ms);
}

/* The guest reuses a comm ID: the old connection is abandoned and stays
 * only to absorb its peer's last messages, out of the guest's sight. */
static void conn_retire(struct conn_table *ct, struct conn *c, uint64_t now_ms)
{
	conn_abandon(ct, c, now_ms);
	conn_guest_unlink(ct, c);
	c->flags |= CF_ORPHAN;
	if (c->timer == TC_NONE)
		conn_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
}

/* ---- outbound: the client's CM sends (cm.c's ib_send_cm_*) ---------------- */

static int conn_same_peer(const struct conn_table *ct, const struct conn *c,
			  uint32_t peer_id, const struct conn_path *path)
{
	return c->peer_id == peer_id &&
	       gid_cmp(&conn_path_of(ct, c)->peer_gid, &path->peer_gid) == 0;
}

/* The record a peer's REQ left for this client that the client has not
 * answered yet: what its REP, MRA or REJ may answer, and nothing else
 * (otherwise a VM could accept or reject a connection meant for another). */
static struct conn *conn_unanswered_req(struct conn_table *ct, uint64_t client,
					unsigned port, uint32_t peer_id,
					const struct gid *peer_gid)
{
	struct conn *r = conn_peer_find(ct, port, peer_id, peer_gid);

	if (r == NULL || conn_client_id(ct, r) != client ||
	    conn_state_of(r) != CONN_REQ_RCVD || (r->flags & CF_GUESTED))
		return NULL;
	return r;
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

	if (c && conn_same_peer(ct, c, peer_id, path))
		return c;
	r = conn_unanswered_req(ct, client, port, peer_id, &path->peer_gid);
	if (r == NULL) {
		*err = -ENOENT;
		return NULL;
	}
	/* Answering it makes the connection the client's own: from here
	 * on its quota counts it. */
	cc = conn_cclient_get(ct, client);
	if (cc == NULL || conn_quota_full(ct, cc)) {
		*err = -ENOSPC;
		return NULL;
	}
	if (c)
		conn_retire(ct, c, now_ms); /* the guest reused the ID */
	conn_bind(ct, r, guest_id);
	conn_peer_rec_drop(ct, r);
	r->flags |= CF_CHARGED;
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
	if (c == NULL || conn_state_of(c) != CONN_REQ_SENT ||
	    gid_cmp(&conn_path_of(ct, c)->peer_gid, &path->peer_gid) != 0) {
		if (c)
			conn_retire(ct, c, now_ms);
		c = conn_create_bound(ct, CK_COMM, client, port, guest_id,
				      CONN_REQ_SENT, path,
				      cm_field_get(mad, CM_REQ_LOCAL_CA_GUID),
				      &err);
		if (c == NULL)
			return err;
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
		c = conn_unanswered_req(ct, client, port, peer_id,
					&path->peer_gid);
		if (c == NULL)
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
		if (conn_state_of(c) == CONN_REQ_RCVD) {
			conn_set_state(ct, c, CONN_REP_SENT);
			/* Kept until RTU, DREQ, REJ or teardown: the guest
			 * goes established on its first data. */
			conn_timer_stop(ct, c);
		} else if (conn_state_of(c) != CONN_REP_SENT) {
			return -EPROTO;
		}
		break;
	case CM_ATTR_MRA:
		if (conn_state_of(c) == CONN_REQ_RCVD ||
		    conn_state_of(c) == CONN_REP_RCVD)
			conn_timer_arm(ct, c,
				       TC_MRA0 +
					       (int)cm_field_get(
						       mad,
						       CM_MRA_SERVICE_TIMEOUT),
				       now_ms);
		else if (conn_state_of(c) != CONN_ESTABLISHED)
			return -EPROTO;
		break;
	default: /* REJ */
		switch (conn_state_of(c)) {
		case CONN_REQ_SENT:
		case CONN_REQ_RCVD:
		case CONN_REP_SENT:
		case CONN_REP_RCVD:
		case CONN_TIMEWAIT: /* cm.c's REJ to a stale REQ */
			conn_enter_timewait(ct, c, now_ms);
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
		if (conn_state_of(c) == CONN_REP_RCVD) {
			conn_set_state(ct, c, CONN_ESTABLISHED);
			conn_timer_stop(ct, c);
		} else if (conn_state_of(c) != CONN_ESTABLISHED) {
			return -EPROTO;
		}
		break;
	case CM_ATTR_DREQ:
		/* In DREQ_RCVD the peer's DREQ is still on its way to the
		 * guest: both sides disconnect at once, which cm.c takes.
		 * In REP_RCVD the guest's cm.c went established when it
		 * posted its RTU, which did not reach us (refused, or lost
		 * when the daemon restarted); the peer, in REP_SENT, takes
		 * a DREQ (cm_dreq_handler()). */
		if (conn_state_of(c) == CONN_DREQ_RCVD)
			break;
		if (conn_state_of(c) != CONN_ESTABLISHED &&
		    conn_state_of(c) != CONN_REP_SENT &&
		    conn_state_of(c) != CONN_REP_RCVD &&
		    conn_state_of(c) != CONN_DREQ_SENT)
			return -EPROTO;
		conn_set_state(ct, c, CONN_DREQ_SENT);
		conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		break;
	case CM_ATTR_DREP:
		if (conn_state_of(c) != CONN_DREQ_RCVD &&
		    conn_state_of(c) != CONN_TIMEWAIT)
			return -EPROTO;
		conn_enter_timewait(ct, c, now_ms);
		break;
	default: /* LAP, APR */
		if (conn_state_of(c) != CONN_ESTABLISHED)
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
	if (c && conn_state_of(c) != CONN_SIDR_REQ_SENT) {
		conn_retire(ct, c, now_ms);
		c = NULL;
	}
	if (c == NULL)
		c = conn_create_bound(ct, CK_SIDR, client, port, guest_id,
				      CONN_SIDR_REQ_SENT, path, 0, &err);
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

	conn_clock(ct, now_ms);
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
		if (c == NULL || conn_client_id(ct, c) != client) {
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
	cm_mad_set_sender_id(mad, conn_host_id(ct, c));
	conn_tid_out(c, ct, mad);
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
		if (conn_state_of(c) == CONN_REQ_SENT) {
			conn_peer_set(ct, c, cm_mad_sender_id(mad));
			c->peer_qpn = (uint32_t)cm_field_get(mad,
							     CM_REP_LOCAL_QPN);
			conn_set_state(ct, c, CONN_REP_RCVD);
			conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
			return 0;
		}
		/* A duplicate: the guest's CM answers it again (RTU). */
		return conn_state_of(c) == CONN_REP_RCVD ||
				       conn_state_of(c) == CONN_ESTABLISHED
			       ? 0
			       : -EPROTO;
	case CM_ATTR_MRA:
		if (conn_state_of(c) == CONN_REQ_SENT ||
		    conn_state_of(c) == CONN_REP_SENT) {
			if (conn_state_of(c) == CONN_REQ_SENT)
				conn_timer_arm(
					ct, c,
					TC_MRA0 +
						(int)cm_field_get(
							mad,
							CM_MRA_SERVICE_TIMEOUT),
					now_ms);
			return 0;
		}
		return conn_state_of(c) == CONN_ESTABLISHED ? 0 : -EPROTO;
	case CM_ATTR_RTU:
		if (conn_state_of(c) != CONN_REP_SENT)
			return -EPROTO;
		conn_set_state(ct, c, CONN_ESTABLISHED);
		conn_timer_stop(ct, c);
		return 0;
	case CM_ATTR_DREQ:
		switch (conn_state_of(c)) {
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
		if (conn_state_of(c) != CONN_DREQ_SENT &&
		    conn_state_of(c) != CONN_DREQ_RCVD)
			return -EPROTO;
		conn_enter_timewait(ct, c, now_ms);
		return 0;
	case CM_ATTR_REJ:
		switch (conn_state_of(c)) {
		case CONN_REQ_SENT:
		case CONN_REQ_RCVD:
		case CONN_REP_SENT:
		case CONN_REP_RCVD:
		case CONN_ESTABLISHED:
		case CONN_DREQ_SENT:
			conn_enter_timewait(ct, c, now_ms);
			return 0;
		default: return -EPROTO;
		}
	default: /* LAP, APR */
		return conn_state_of(c) == CONN_ESTABLISHED ? 0 : -EPROTO;
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
	if (gid_cmp(&conn_path_of(ct, c)->peer_gid, &path->peer_gid) != 0)
		return -EPERM;
	if ((c->flags & CF_ORPHAN))
		return -ESTALE;
	if (conn_state_of(c) != CONN_SIDR_REQ_SENT)
		return -EPROTO;
	conn_enter_timewait(ct, c, now_ms);
	*client = conn_client_id(ct, c);
	cm_mad_set_receiver_id(mad, c->guest_id);
	conn_tid_in(ct, c, mad);
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
	if ((c->flags & CF_ORPHAN))
		return -ESTALE;
	if (conn_state_of(c) != CONN_REQ_RCVD)
		return -EPROTO;
	*client = conn_client_id(ct, c);
	if (!(c->flags & CF_GUESTED)) {
		conn_remove(ct, c); /* cm.c: reset to idle */
		return 0;
	}
	cm_mad_set_receiver_id(mad, c->guest_id);
	conn_enter_timewait(ct, c, now_ms);
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

	conn_clock(ct, now_ms);
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
	if (gid_cmp(&conn_path_of(ct, c)->peer_gid, &path->peer_gid) != 0 ||
	    !conn_peer_matches(c, mad))
		return -EPERM;
	if ((c->flags & CF_ORPHAN)) {
		if (attr == CM_ATTR_DREQ) {
			conn_answer_drep(ct, CONN_ANS_DREP_ABANDONED, port, mad,
					 conn_path_of(ct, c));
			conn_enter_timewait(ct, c, now_ms);
		} else if ((attr == CM_ATTR_DREP || attr == CM_ATTR_REJ) &&
			   conn_state_of(c) != CONN_TIMEWAIT) {
			conn_enter_timewait(ct, c, now_ms);
		}
		return -ESTALE;
	}
	rc = conn_in_transition(ct, c, mad, now_ms);
	if (rc)
		return rc;
	*client = conn_client_id(ct, c);
	cm_mad_set_receiver_id(mad, c->guest_id);
	conn_tid_in(ct, c, mad);
	return 0;
}

/* The record of a peer's REQ or SIDR_REQ for client, charged to nobody.
 * A full table loses the record, not the REQ (the client cannot answer
 * it, and the peer times out, as with a lost MAD). */
static void conn_peer_record_new(struct conn_table *ct, enum conn_kind kind,
				 uint64_t client, unsigned port,
				 uint32_t peer_id, uint32_t peer_qpn,
				 const struct conn_path *path, uint64_t now_ms)
{
	struct conn *c;
	int err = 0;

	if (conn_peer_rec_take(ct, port, &path->peer_gid) < 0)
		return;
	c = conn_new(ct, kind, client, port, CONN_REQ_RCVD, path, 0, 0, &err);
	if (c == NULL) {
		conn_peer_rec_undo(ct, port, &path->peer_gid);
		return;
	}
	c->flags |= CF_PEER_REC;
	c->peer_qpn = peer_qpn;
	conn_peer_set(ct, c, peer_id);
	conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
}

int conn_note_req(struct conn_table *ct, uint64_t client, unsigned port,
		  const uint8_t *mad, const struct conn_path *path,
		  uint64_t now_ms)
{
	uint32_t peer_id = cm_mad_sender_id(mad);
	uint8_t rej[MAD_SIZE];
	struct conn *c;

	conn_clock(ct, now_ms);
	conn_timewait_trim(ct);
	if (peer_id == 0)
		return 0; /* nothing to key a record by; the guest decides */
	c = conn_peer_find(ct, port, peer_id, &path->peer_gid);
	if (c && conn_state_of(c) == CONN_TIMEWAIT) {
		/* The peer reuses the comm ID of a connection still in
		 * TimeWait: cm.c's cm_dup_req_handler() rejects it. */
		/* As cm_issue_rej() does: the REQ's sender can only match
		 * a REJ of its REQ (it knows no ID of ours yet). */
		cm_build_rej(rej, conn_next_tid(ct), 0, peer_id,
			     CM_MSG_RESPONSE_REQ, CM_REJ_REASON_STALE_CONN,
			     NULL, 0);
		conn_send_answer(ct, CONN_ANS_REJ_STALE, port,
				 conn_path_of(ct, c), rej);
		return -ESTALE;
	}
	if (c) {
		/* A retransmitted REQ: keep the record as long; the guest's
		 * CM decides what a duplicate deserves. */
		if (conn_client_id(ct, c) == client &&
		    conn_state_of(c) == CONN_REQ_RCVD &&
		    c->timer == TC_HANDSHAKE)
			conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		return 0;
	}
	conn_peer_record_new(ct, CK_COMM, client, port, peer_id,
			     (uint32_t)cm_field_get(mad, CM_REQ_LOCAL_QPN),
			     path, now_ms);
	return 0;
}

int conn_note_sidr_req(struct conn_table *ct, uint64_t client, unsigned port,
		       const uint8_t *mad, const struct conn_path *path,
		       uint64_t now_ms)
{
	uint32_t peer_id = cm_mad_sender_id(mad);
	struct conn *c;

	conn_clock(ct, now_ms);
	conn_timewait_trim(ct);
	if (peer_id == 0)
		return 0;
	c = conn_peer_find_kind(ct, CK_SIDR, port, peer_id, &path->peer_gid);
	if (c) {
		if (conn_client_id(ct, c) == client)
			conn_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		return 0;
	}
	conn_peer_record_new(ct, CK_SIDR, client, port, peer_id, 0, path,
			     now_ms);
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
	*dst = conn_path_of(ct, r)->peer_gid;
	return 0;
}

unsigned conn_expire_some(struct conn_table *ct, uint64_t now_ms, unsigned max)
{
	struct conn *c;
	unsigned n = 0;
	int tc;

	conn_clock(ct, now_ms);
	for (tc = TC_HANDSHAKE; tc < TC_MAX && n < max; tc++) {
		while (n < max && (c = conn_timer_first(ct, tc)) != NULL &&
		       conn_deadline_in(c, now_ms) <= 0) {
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
	uint64_t next = UINT64_MAX, at;
	struct conn *c;
	int64_t in;
	int tc;

	for (tc = TC_HANDSHAKE; tc < TC_MAX; tc++) {
		c = conn_timer_first(ct, tc);
		if (c == NULL)
			continue;
		in = conn_deadline_in(c, ct->now_ms);
		at = in < 0 && (uint64_t)-in > ct->now_ms ? 0 : ct->now_ms + in;
		if (at < next)
			next = at;
	}
	return next;
}

/* Every entry of a client's record: abandoned as cm_destroy_id() would,
 * then gone, and the record with them. */
static void conn_purge_record(struct conn_table *ct, uint32_t owner)
{
	struct conn_client *cc = &ct->cl[owner];
	struct conn *c;
	uint32_t i;

	cc->pinned = 0;
	/* Removing from the set while walking it would move the cells: the
	 * set goes as a whole at the end instead. */
	for (i = 0; i < cc->conns.cap; i++) {
		if (cc->conns.cell[i] == 0)
			continue;
		c = conn_at(ct, cc->conns.cell[i] - 1);
		cc->conns.cell[i] = 0;
		cc->conns.n--;
		if (!(c->flags & CF_ORPHAN))
			conn_abandon(ct, c, ct->now_ms);
		conn_release(ct, c);
	}
	conn_cl_free(ct, owner);
}

void conn_purge_client(struct conn_table *ct, uint64_t client)
{
	uint32_t owner;

	/* The daemon is going, not the client: its entries stay in the
	 * store for the next daemon. */
	if (ct->detached)
		return;
	owner = conn_cl_find(ct, client);
	if (owner != CONN_NO_OWNER)
		conn_purge_record(ct, owner);
}

void conn_table_free(struct conn_table *ct)
{
	struct src_count *sc, *snext;
	uint32_t i, n;

	if (ct == NULL)
		return;
	ct->emit = NULL; /* shutting down: no one to tell */
	n = ct->ncl;
	for (i = 0; ct->cl && i < n; i++) {
		if (!ct->cl[i].used)
			continue;
		if (ct->detached) /* the entries stay where they are */
			conn_hset_free(&ct->cl[i].conns);
		else
			conn_purge_record(ct, i);
	}
	conn_hset_free(&ct->peers);
	conn_hset_free(&ct->path_index);
	conn_hset_free(&ct->cl_index);
	RB_FOREACH_SAFE(sc, src_tree, &ct->sources, snext) {
		RB_REMOVE(src_tree, &ct->sources, sc);
		free(sc);
	}
	if (ct->store) {
		conn_store_close(ct->store);
	} else {
		if (ct->e)
			munmap(ct->e, (size_t)ct->cap * sizeof(*ct->e));
		if (ct->paths)
			munmap(ct->paths,
			       (size_t)ct->path_cap * sizeof(*ct->paths));
	}
	if (ct->cl)
		munmap(ct->cl, CONN_MAX_CLIENTS * sizeof(*ct->cl));
	free(ct);
}

void conn_table_detach(struct conn_table *ct)
{
	ct->detached = 1;
}

/* ---- persistence: a restarted daemon's table -------------------------- */

struct restore_timed {
	uint32_t idx;
	int32_t in; /* deadline against the restart */
};

static int conn_restore_by_deadline(const void *a, const void *b)
{
	const struct restore_timed *x = a, *y = b;

	if (x->in != y->in)
		return x->in < y->in ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Whether a slot of the previous daemon's holds an entry that fits
 * together (not one changed at the instant of a crash). */
static int conn_restore_valid(struct conn_table *ct, const struct conn *c)
{
	uint32_t nown;
	const struct conn_owner *o = conn_store_owners(ct->store, &nown);

	return conn_state_of(c) < CONN_STATE_MAX && c->timer < TC_MAX &&
	       c->owner < nown && c->owner < CONN_MAX_CLIENTS &&
	       o[c->owner].live && ct->cl[c->owner].used &&
	       c->path < ct->path_hwm &&
	       (c->flags & (CF_HOSTED | CF_GUESTED | CF_IN_PEER)) &&
	       !((c->flags & CF_GUESTED) && !(c->flags & CF_HOSTED));
}

/* One entry back into the sets it was in, or its slot freed. */
static int conn_restore_one(struct conn_table *ct, uint32_t idx)
{
	struct conn *c = conn_at(ct, idx);
	struct conn_client *cc;

	if (!conn_restore_valid(ct, c))
		return -EINVAL;
	cc = &ct->cl[c->owner];
	if ((c->flags & CF_GUESTED) &&
	    conn_guest_find(ct, conn_kind_of(c), cc->id, c->port,
			    c->guest_id) != NULL)
		return -EEXIST;
	if ((c->flags & CF_IN_PEER) &&
	    conn_peer_find_kind(ct, conn_kind_of(c), c->port, c->peer_id,
				&conn_path_of(ct, c)->peer_gid) != NULL)
		c->flags &= (uint8_t)~CF_IN_PEER; /* first come */
	if (conn_client_room(ct, cc) < 0 ||
	    ((c->flags & CF_IN_PEER) &&
	     conn_hset_reserve(ct, &ct->peers, conn_peer_key) < 0))
		return -ENOMEM;
	if (c->flags & CF_PEER_REC)
		conn_peer_rec_count(ct, conn_src_get(ct, c->port, NULL, 1),
				    conn_src_get(ct, c->port,
						 &conn_path_of(ct, c)->peer_gid,
						 1));
	conn_hset_insert(ct, &cc->conns, idx, conn_client_key);
	if (c->flags & CF_IN_PEER)
		conn_hset_insert(ct, &ct->peers, idx, conn_peer_key);
	ct->paths[c->path].refs++;
	conn_account(ct, c);
	return 0;
}

/* Rebuilds the indexes from the file: owners, then entries (and the
 * references of their paths), then timers in deadline order, then the
 * free lists.  Returns the entries that could not be taken back. */
static unsigned conn_table_restore(struct conn_table *ct)
{
	struct restore_timed *timed = NULL;
	struct conn_owner *o;
	uint32_t nown, i, ntimed = 0;
	unsigned dropped = 0;
	struct conn *c;

	ct->random_operand = *conn_store_counter(ct->store,
						 CONN_STORE_RANDOM_OPERAND);
	ct->now_ms = (uint64_t)*conn_store_counter(ct->store, CONN_STORE_NOW_HI)
			     << 32 |
		     *conn_store_counter(ct->store, CONN_STORE_NOW_LO);
	ct->tid_seq = *conn_store_counter(ct->store, CONN_STORE_TID_SEQ);
	ct->hwm = *conn_store_counter(ct->store, CONN_STORE_ENTRIES_HWM);
	ct->path_hwm = *conn_store_counter(ct->store, CONN_STORE_PATHS_HWM);
	o = conn_store_owners(ct->store, &nown);
	for (i = 0; i < nown && i < CONN_MAX_CLIENTS; i++) {
		struct conn_client *cc = &ct->cl[i];

		o[i].claimed = 0; /* every owner of the last life, once */
		if (!o[i].live ||
		    conn_cl_find(ct, o[i].client) != CONN_NO_OWNER ||
		    conn_hset_reserve(ct, &ct->cl_index, conn_cl_key) < 0) {
			o[i].live = 0;
			continue;
		}
		memset(cc, 0, sizeof(*cc));
		cc->id = o[i].client;
		cc->used = 1;
		cc->pinned = o[i].resumable;
		conn_hset_insert(ct, &ct->cl_index, i, conn_cl_key);
	}
	/* The records no owner holds are free, lowest first. */
	ct->ncl = ct->cl_cap;
	for (i = ct->cl_cap; i-- > 0;) {
		if (ct->cl[i].used)
			continue;
		ct->cl[i].next_free = (uint16_t)ct->cl_free;
		ct->cl_free = i + 1;
	}
	for (i = 0; i < ct->path_hwm; i++)
		ct->paths[i].refs = 0;
	if (ct->hwm)
		timed = calloc(ct->hwm, sizeof(*timed));
	for (i = 0; i < ct->hwm; i++) {
		c = conn_at(ct, i);
		if (!(c->flags & CF_LIVE))
			continue;
		c->timer_prev = c->timer_next = 0;
		if (conn_restore_one(ct, i) < 0) {
			dropped++;
			c->flags = 0;
			continue;
		}
		if (c->timer == TC_NONE)
			continue;
		if (timed == NULL) {
			c->timer = TC_NONE; /* lives until torn down */
			continue;
		}
		timed[ntimed].idx = i;
		timed[ntimed].in = (int32_t)conn_deadline_in(c, ct->now_ms);
		ntimed++;
	}
	/* Each timer class is a FIFO by deadline, as it was built. */
	if (ntimed)
		qsort(timed, ntimed, sizeof(*timed), conn_restore_by_deadline);
	for (i = 0; i < ntimed; i++) {
		c = conn_at(ct, timed[i].idx);
		conn_timer_append(ct, c, c->timer);
	}
	free(timed);
	/* Free slots, lowest first. */
	for (i = 0; i < ct->hwm; i++)
		if (!(conn_at(ct, i)->flags & CF_LIVE))
			conn_slot_free(ct, conn_at(ct, i));
	for (i = ct->path_hwm; i-- > 0;) {
		if (ct->paths[i].refs) {
			if (conn_hset_reserve(ct, &ct->path_index,
					      conn_pathrec_key) == 0)
				conn_hset_insert(ct, &ct->path_index, i,
						 conn_pathrec_key);
		} else {
			ct->paths[i].next_free = ct->path_free;
			ct->path_free = i + 1;
		}
	}
	/* Owners that nothing keeps. */
	for (i = 0; i < nown && i < CONN_MAX_CLIENTS; i++)
		if (ct->cl[i].used)
			conn_cl_forget_empty(ct, i);
	return dropped;
}

/* Each limit of a path record's or an entry's array, from the state
 * file's size for entries. */
struct conn_table *conn_table_open(const struct conn_limits *lim,
				   uint32_t random_operand,
				   conn_emit_fn emit_fn, void *emit_arg,
				   const char *path, uint32_t max_entries,
				   uint32_t max_owners, uint64_t ports_hash,
				   int *restored, char *err, size_t errlen)
{
	struct conn_table *ct;
	struct conn_store_layout lay = {
		.size = { sizeof(struct conn), sizeof(struct conn_pathrec) },
		.cap = { max_entries, max_entries },
		.owner_cap = max_owners,
	};
	unsigned dropped;

	*restored = 0;
	if (max_entries > CONN_MAX_ENTRIES || max_owners > CONN_MAX_CLIENTS) {
		snprintf(
			err, errlen,
			"at most %u entries and %u owners (asked for %u and %u)",
			CONN_MAX_ENTRIES, CONN_MAX_CLIENTS, max_entries,
			max_owners);
		return NULL;
	}
	ct = conn_table_alloc(lim, random_operand, emit_fn, emit_arg);
	if (ct == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	ct->store = conn_store_open(path, &lay, ports_hash, restored, err,
				    errlen);
	if (ct->store == NULL) {
		conn_table_free(ct);
		return NULL;
	}
	ct->e = conn_store_array(ct->store, CONN_STORE_ENTRIES);
	ct->paths = conn_store_array(ct->store, CONN_STORE_PATHS);
	ct->cap = ct->path_cap = max_entries;
	/* A client's record is its owner record. */
	ct->cl_cap = max_owners;
	if (*restored) {
		dropped = conn_table_restore(ct);
		if (dropped)
			snprintf(
				err, errlen,
				"%u entries were being changed when the previous daemon ended and are lost",
				dropped);
	} else {
		*conn_store_counter(ct->store, CONN_STORE_RANDOM_OPERAND) =
			ct->random_operand;
		*conn_store_counter(ct->store,
				    CONN_STORE_TID_SEQ) = ct->tid_seq;
	}
	return ct;
}

/* ---- owners: clients that may claim their entries after a restart ----- */

static struct conn_owner *conn_owner_of(struct conn_table *ct, uint32_t i)
{
	uint32_t n;

	return &conn_store_owners(ct->store, &n)[i];
}

int conn_owner_add(struct conn_table *ct, uint64_t client, uint32_t uid,
		   const uint8_t token[16])
{
	struct conn_owner *o;
	uint32_t i;

	if (ct->store == NULL)
		return -ENOTSUP;
	i = conn_cl_find(ct, client);
	if (i == CONN_NO_OWNER)
		i = conn_cl_new(ct, client);
	if (i == CONN_NO_OWNER)
		return -ENOSPC;
	o = conn_owner_of(ct, i);
	o->uid = uid;
	memcpy(o->token, token, 16);
	o->resumable = 1;
	ct->cl[i].pinned = 1;
	return 0;
}

int conn_owner_claim(struct conn_table *ct, uint64_t old_client, uint32_t uid,
		     const uint8_t token[16], uint64_t new_client,
		     const uint8_t new_token[16])
{
	struct conn_owner *o;
	uint8_t diff = 0;
	uint32_t i;
	unsigned k;

	if (ct->store == NULL)
		return -ENOENT;
	i = conn_cl_find(ct, old_client);
	if (i == CONN_NO_OWNER)
		return -ENOENT;
	o = conn_owner_of(ct, i);
	if (!o->resumable || o->claimed)
		return -ENOENT;
	for (k = 0; k < 16; k++) /* in constant time */
		diff |= o->token[k] ^ token[k];
	if (diff || o->uid != uid)
		return -EPERM;
	if (conn_cl_find(ct, new_client) != CONN_NO_OWNER)
		return -EEXIST;
	/* The entries name the record, not the client: renaming the record
	 * hands them all over at once. */
	conn_hset_remove(ct, &ct->cl_index, i, conn_cl_key);
	ct->cl[i].id = new_client;
	conn_hset_insert(ct, &ct->cl_index, i, conn_cl_key);
	o->client = new_client;
	memcpy(o->token, new_token, 16);
	o->claimed = 1;
	return 0;
}

unsigned conn_purge_unclaimed(struct conn_table *ct)
{
	unsigned purged = 0;
	uint32_t i, n;

	if (ct->store == NULL)
		return 0;
	conn_store_owners(ct->store, &n);
	for (i = 0; i < n && i < CONN_MAX_CLIENTS; i++) {
		if (!ct->cl[i].used || conn_owner_of(ct, i)->claimed)
			continue;
		conn_purge_record(ct, i);
		purged++;
	}
	return purged;
}

uint64_t conn_owners_max_client(struct conn_table *ct)
{
	uint64_t max = 0;
	uint32_t i, n = ct->ncl;

	for (i = 0; i < n; i++)
		if (ct->cl[i].used && ct->cl[i].id > max)
			max = ct->cl[i].id;
	return max;
}

void conn_counts(struct conn_table *ct, struct conn_counts *out)
{
	*out = ct->counts;
}

void conn_client_counts(struct conn_table *ct, uint64_t client,
			struct conn_counts *out)
{
	struct conn_client *cc = conn_cclient_get(ct, client);
	const struct conn *c;
	uint32_t i;

	memset(out, 0, sizeof(*out));
	if (cc == NULL)
		return;
	for (i = 0; i < cc->conns.cap; i++) {
		if (cc->conns.cell[i] == 0)
			continue;
		c = conn_at(ct, cc->conns.cell[i] - 1);
		conn_count(out, c, 1);
	}
}

/* A client's entries in a stable order: comm IDs, then SIDR request IDs,
 * each by the guest's ID (peer records, which have none yet, first). */
static int conn_listing_cmp(const void *a, const void *b, void *arg)
{
	const struct conn_table *ct = arg;
	const struct conn *x = conn_at(ct, *(const uint32_t *)a);
	const struct conn *y = conn_at(ct, *(const uint32_t *)b);
	uint32_t kx = conn_kind_of(x), ky = conn_kind_of(y);

	if (kx != ky)
		return kx < ky ? -1 : 1;
	if (x->guest_id != y->guest_id)
		return x->guest_id < y->guest_id ? -1 : 1;
	if (x->port != y->port)
		return x->port < y->port ? -1 : 1;
	return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

void conn_client_foreach(struct conn_table *ct, uint64_t client, unsigned skip,
			 unsigned max, uint64_t now_ms,
			 void (*fn)(void *arg, const struct conn_view *v),
			 void *arg)
{
	struct conn_client *cc = conn_cclient_get(ct, client);
	struct conn_view v;
	const struct conn *c;
	uint32_t *list, n = 0, i;

	conn_clock(ct, now_ms);
	if (cc == NULL || cc->conns.n == 0 || skip >= cc->conns.n)
		return;
	list = malloc(cc->conns.n * sizeof(*list));
	if (list == NULL)
		return;
	for (i = 0; i < cc->conns.cap; i++)
		if (cc->conns.cell[i])
			list[n++] = cc->conns.cell[i] - 1;
	qsort_r(list, n, sizeof(*list), conn_listing_cmp, ct);
	for (i = skip; i < n && i - skip < max; i++) {
		c = conn_at(ct, list[i]);
		memset(&v, 0, sizeof(v));
		v.sidr = (c->flags & CF_SIDR) != 0;
		v.state = conn_state_of(c);
		v.port = c->port;
		v.guest_id = c->guest_id;
		v.host_id = conn_host_id(ct, c);
		v.peer_id = c->peer_id;
		v.has_peer = c->peer_id != 0;
		v.peer_gid = conn_path_of(ct, c)->peer_gid;
		v.expires_in_ms = c->timer == TC_NONE
					  ? -1
					  : (conn_deadline_in(c, now_ms) > 0
						     ? conn_deadline_in(c,
									now_ms)
						     : 0);
		fn(arg, &v);
	}
	free(list);
}
