// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The connection table's storage: slots, IDs, records, timers and
 * listings (conn.h says what the table does; conn.c is its state machine,
 * conn_restore.c takes a previous daemon's table back).
 *
 * An entry is 44 bytes in one flat array, addressed by its index; it
 * holds no pointer, so the same array serves from the heap (an anonymous
 * mapping, touched as it fills) or from the state file that outlives the
 * daemon (conn_store.c).  What it needs besides is shared or derived:
 *   - host IDs are derived from the index and a 10-bit generation of the
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
 * Freed slots are reused oldest first and only once 16,384 are free, so
 * a host ID comes back only after about 16.7 million others.
 */
#include "mux/conn_priv.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/cm_mad.h"
#include "common/hash.h"
#include "common/wire.h"
#include "mux/conn_store.h"

static int conn_table_src_cmp(struct src_count *a, struct src_count *b)
{
	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	return gid_cmp(&a->gid, &b->gid);
}

TREE_GENERATE_STATIC(src_tree, src_count, link, conn_table_src_cmp)

/* ---- hashing -------------------------------------------------------------- */

static uint32_t conn_table_mix(uint64_t x)
{
	return (uint32_t)hash_mix64(x);
}

/* The keys: a client's set by comm ID (or, for an entry no guest ID
 * finds, by its index), the peers' set by the peer's ID. */
static uint32_t conn_table_guest_hash(unsigned kind, unsigned port,
				      uint32_t guest)
{
	return conn_table_mix(((uint64_t)kind << 40) | ((uint64_t)port << 32) |
			      guest);
}

uint32_t conn_table_client_key(const void *ctx, uint32_t idx)
{
	const struct conn_table *ct = ctx;
	const struct conn *c = conn_at(ct, idx);

	if (c->flags & CF_GUESTED)
		return conn_table_guest_hash(conn_kind_of(c), c->port,
					     c->guest_id);
	return conn_table_mix((1ull << 48) | idx);
}

static uint32_t conn_table_peer_hash(unsigned kind, unsigned port,
				     uint32_t peer)
{
	return conn_table_mix((3ull << 48) | ((uint64_t)kind << 40) |
			      ((uint64_t)port << 32) | peer);
}

uint32_t conn_table_peer_key(const void *ctx, uint32_t idx)
{
	const struct conn_table *ct = ctx;
	const struct conn *c = conn_at(ct, idx);

	return conn_table_peer_hash(conn_kind_of(c), c->port, c->peer_id);
}

uint32_t conn_table_cl_key(const void *ctx, uint32_t idx)
{
	const struct conn_table *ct = ctx;
	return conn_table_mix(ct->cl[idx].id);
}

static uint32_t conn_table_path_hash(const struct conn_path *p,
				     uint64_t ca_guid)
{
	uint64_t h = ca_guid;
	int i;

	for (i = 0; i < 16; i += 8) {
		h = conn_table_mix(h ^ wire_get64(p->local_gid.raw + i)) ^
		    (h << 7);
		h = conn_table_mix(h ^ wire_get64(p->peer_gid.raw + i)) ^
		    (h << 7);
	}
	h ^= (uint64_t)p->pkey_index << 48 | (uint64_t)p->grh << 40 |
	     (uint64_t)p->sl << 32 | (uint64_t)p->hop_limit << 24 |
	     (uint64_t)p->traffic_class << 16;
	return conn_table_mix(h ^ ((uint64_t)p->flow_label << 1));
}

uint32_t conn_table_pathrec_key(const void *ctx, uint32_t idx)
{
	const struct conn_table *ct = ctx;
	return conn_table_path_hash(&ct->paths[idx].path,
				    ct->paths[idx].ca_guid);
}

static int conn_table_path_eq(const struct conn_path *a,
			      const struct conn_path *b)
{
	return gid_cmp(&a->local_gid, &b->local_gid) == 0 &&
	       gid_cmp(&a->peer_gid, &b->peer_gid) == 0 &&
	       a->pkey_index == b->pkey_index && a->grh == b->grh &&
	       a->sl == b->sl && a->hop_limit == b->hop_limit &&
	       a->traffic_class == b->traffic_class &&
	       a->gid_type == b->gid_type && a->flow_label == b->flow_label;
}

/* ---- the table ------------------------------------------------------------ */

static void *conn_table_reserve_anon(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

struct conn_table *conn_table_alloc(const struct conn_limits *lim,
				    uint32_t random_operand, conn_emit_fn emit,
				    void *emit_arg)
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
	for (i = 0; i < TC_POW_N; i++)
		ct->timer_ms[TC_POW0 + i] = UINT64_C(1) << i;
	/* Clients' records are few and never move: reserved, touched as
	 * used. */
	ct->cl = conn_table_reserve_anon(CONN_MAX_CLIENTS * sizeof(*ct->cl));
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
_Static_assert(CONN_HEAP_ENTRIES <= CONN_IDX_MASK + 1u,
	       "a slot's index fits a host ID's 22 bits");

struct conn_table *conn_table_new(const struct conn_limits *lim,
				  uint32_t random_operand, conn_emit_fn emit,
				  void *emit_arg)
{
	struct conn_table *ct = conn_table_alloc(lim, random_operand, emit,
						 emit_arg);

	if (ct == NULL)
		return NULL;
	ct->cap = ct->path_cap = CONN_HEAP_ENTRIES;
	ct->e = conn_table_reserve_anon((size_t)ct->cap * sizeof(*ct->e));
	ct->paths = conn_table_reserve_anon((size_t)ct->path_cap *
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

/* A fresh low TID half for a MAD the daemon sends on its own. */
static uint32_t conn_table_next_tid(struct conn_table *ct)
{
	ct->tid_seq = (ct->tid_seq + 1) & 0xffffff;
	if (ct->store)
		*conn_store_counter(ct->store,
				    CONN_STORE_TID_SEQ) = ct->tid_seq;
	return CONN_OWN_TID_BASE | ct->tid_seq;
}

/* Every call passes its time in; deadlines are read against the latest
 * (kept with the entries, for the next daemon to read them). */
void conn_table_clock(struct conn_table *ct, uint64_t now_ms)
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

void conn_table_timer_stop(struct conn_table *ct, struct conn *c)
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
	if (c->timer == TC_TIMEWAIT)
		conn_client_of(ct, c)->timewait--;
	c->timer = TC_NONE;
	c->timer_prev = c->timer_next = 0;
}

void conn_table_timer_append(struct conn_table *ct, struct conn *c, int tc)
{
	uint32_t self = conn_idx(ct, c) + 1, tail = ct->timer_tail[tc];

	c->timer = (uint8_t)tc;
	if (tc == TC_TIMEWAIT)
		conn_client_of(ct, c)->timewait++;
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
void conn_table_timer_arm(struct conn_table *ct, struct conn *c, int tc,
			  uint64_t now_ms)
{
	conn_table_timer_stop(ct, c);
	c->deadline = (uint32_t)(now_ms + ct->timer_ms[tc]);
	conn_table_timer_append(ct, c, tc);
}

struct conn *conn_table_timer_first(const struct conn_table *ct, int tc)
{
	return ct->timer_head[tc] ? conn_at(ct, ct->timer_head[tc] - 1) : NULL;
}

/* How far an eviction looks among the oldest of a timer class (a
 * peer's REQ records, TimeWait) for an entry to take: a flood's are the
 * oldest there, and a bound keeps every call cheap when the pool is
 * full. */
#define CONN_EVICT_LOOK 1024

/* The entry that leaves TimeWait early: the oldest (among the first
 * CONN_EVICT_LOOK) of the client record holding the most, so that a
 * tenant that ends many connections shortens only its own TimeWait (the
 * departed clients' record among them); the oldest of all if none is
 * found that near. */
static struct conn *conn_table_timewait_victim(struct conn_table *ct)
{
	uint32_t i, most = 0, at = ct->timer_head[TC_TIMEWAIT];
	unsigned looked;
	struct conn *c;

	for (i = 0; i < ct->ncl; i++)
		if (ct->cl[i].used && ct->cl[i].timewait > most)
			most = ct->cl[i].timewait;
	for (looked = 0; at && looked < CONN_EVICT_LOOK; looked++) {
		c = conn_at(ct, at - 1);
		if (conn_client_of(ct, c)->timewait == most)
			return c;
		at = c->timer_next;
	}
	return conn_table_timer_first(ct, TC_TIMEWAIT);
}

/*
 * Draining entries (TimeWait, and what a client abandoned) count against
 * nobody's quota, so a tenant's finished connections never block its new
 * ones; they are bounded as a whole instead, and above the bound one
 * leaves early (it only absorbs stray MADs), the biggest holder's.  Run
 * as each call begins, when nothing holds an entry.
 */
void conn_table_timewait_trim(struct conn_table *ct)
{
	struct conn *c;

	while (ct->lim.max_timewait &&
	       ct->timer_len[TC_TIMEWAIT] > ct->lim.max_timewait &&
	       (c = conn_table_timewait_victim(ct)) != NULL) {
		conn_table_remove(ct, c);
		ct->counts.timewait_evicted++;
	}
}

/* One more element at the end of the entries' or the paths' array (*hwm
 * used so far, of cap), its pages reserved in the state file and the
 * file's mark moved: its index, or -ENOSPC. */
static int conn_table_array_grow(struct conn_table *ct,
				 enum conn_store_array which, uint32_t *hwm,
				 uint32_t cap, uint32_t *idx)
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

static int conn_table_path_ref(struct conn_table *ct, const struct conn_path *p,
			       uint64_t ca_guid, uint32_t *out)
{
	uint32_t h = conn_table_path_hash(p, ca_guid), j, idx;
	struct conn_pathrec *r;

	HSET_PROBE(&ct->path_index, h, j) {
		r = &ct->paths[ct->path_index.cell[j] - 1];
		if (r->ca_guid == ca_guid && conn_table_path_eq(&r->path, p)) {
			r->refs++;
			*out = ct->path_index.cell[j] - 1;
			return 0;
		}
	}
	if (hset_reserve(&ct->path_index, conn_table_pathrec_key, ct) < 0)
		return -ENOMEM;
	if (ct->path_free) {
		idx = ct->path_free - 1;
		ct->path_free = ct->paths[idx].next_free;
	} else if (conn_table_array_grow(ct, CONN_STORE_PATHS, &ct->path_hwm,
					 ct->path_cap, &idx) < 0) {
		return -ENOSPC;
	}
	r = &ct->paths[idx];
	memset(r, 0, sizeof(*r));
	r->path = *p;
	r->ca_guid = ca_guid;
	__atomic_store_n(&r->refs, 1, __ATOMIC_RELEASE);
	hset_insert(&ct->path_index, idx, conn_table_pathrec_key, ct);
	*out = idx;
	return 0;
}

static void conn_table_path_unref(struct conn_table *ct, uint32_t idx)
{
	struct conn_pathrec *r = &ct->paths[idx];

	if (r->refs == 0 || --r->refs)
		return;
	hset_remove(&ct->path_index, idx, conn_table_pathrec_key, ct);
	r->next_free = ct->path_free;
	ct->path_free = idx + 1;
}

/* ---- clients' records ------------------------------------------------------ */

uint32_t conn_table_cl_find(const struct conn_table *ct, uint64_t id)
{
	uint32_t j;

	HSET_PROBE(&ct->cl_index, conn_table_mix(id), j) {
		if (ct->cl[ct->cl_index.cell[j] - 1].id == id)
			return ct->cl_index.cell[j] - 1;
	}
	return CONN_NO_OWNER;
}

struct conn_client *conn_table_client_get(struct conn_table *ct, uint64_t id)
{
	uint32_t i = conn_table_cl_find(ct, id);

	return i == CONN_NO_OWNER ? NULL : &ct->cl[i];
}

/* A record for a new client; in the state file it is an owner record,
 * whose index the entries name across a restart. */
uint32_t conn_table_cl_new(struct conn_table *ct, uint64_t id)
{
	struct conn_client *cc;
	struct conn_owner *o;
	uint32_t i, n;

	if (hset_reserve(&ct->cl_index, conn_table_cl_key, ct) < 0)
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
	hset_insert(&ct->cl_index, i, conn_table_cl_key, ct);
	return i;
}

static void conn_table_cl_free(struct conn_table *ct, uint32_t i)
{
	struct conn_client *cc = &ct->cl[i];
	struct conn_owner *o;
	uint32_t n;

	hset_remove(&ct->cl_index, i, conn_table_cl_key, ct);
	hset_free(&cc->conns);
	cc->used = 0;
	if (ct->store) {
		o = conn_store_owners(ct->store, &n);
		__atomic_store_n(&o[i].live, 0, __ATOMIC_RELEASE);
	}
	cc->next_free = (uint16_t)ct->cl_free;
	ct->cl_free = i + 1;
}

void conn_table_cl_forget_empty(struct conn_table *ct, uint32_t i)
{
	if (i != CONN_NO_OWNER && ct->cl[i].n == 0 && !ct->cl[i].pinned)
		conn_table_cl_free(ct, i);
}

/* ---- peer records: bounded per port and per source, charged to nobody -- */

struct src_count *conn_table_src_get(struct conn_table *ct, unsigned port,
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

static void conn_table_src_forget_empty(struct conn_table *ct,
					struct src_count *sc)
{
	if (sc && sc->n == 0) {
		RB_REMOVE(src_tree, &ct->sources, sc);
		free(sc);
	}
}

static void conn_table_src_put(struct conn_table *ct, struct src_count *sc)
{
	if (sc && sc->n > 0) {
		sc->n--;
		conn_table_src_forget_empty(ct, sc);
	}
}

/* One more peer record, on its port's and its source's counts (either
 * may be missing when memory ran out while restoring). */
void conn_table_peer_rec_count(struct conn_table *ct, struct src_count *port_sc,
			       struct src_count *src_sc)
{
	if (port_sc)
		port_sc->n++;
	if (src_sc)
		src_sc->n++;
	ct->counts.peer_records++;
}

/* A full port: the oldest record on it of a client holding more than
 * `have` + 1 (so that taking one leaves it no fewer than the taker),
 * removed.  0, or -ENOSPC when there is none. */
static int conn_table_peer_rec_evict(struct conn_table *ct, unsigned port,
				     uint32_t have)
{
	uint32_t i = ct->timer_head[TC_HANDSHAKE];
	unsigned looked = 0;
	struct conn *c;

	for (; i && looked < CONN_EVICT_LOOK; looked++) {
		c = conn_at(ct, i - 1);
		i = c->timer_next;
		if ((c->flags & CF_PEER_REC) && c->port == port &&
		    conn_state_of(c) == CONN_REQ_RCVD &&
		    conn_client_of(ct, c)->peer_recs > have + 1) {
			conn_table_remove(ct, c);
			ct->counts.peer_records_evicted++;
			return 0;
		}
	}
	return -ENOSPC;
}

int conn_table_peer_rec_take(struct conn_table *ct, unsigned port,
			     const struct gid *gid, uint64_t client)
{
	struct conn_client *cc = conn_table_client_get(ct, client);
	struct src_count *port_sc, *src_sc;

	port_sc = conn_table_src_get(ct, port, NULL, 1);
	src_sc = conn_table_src_get(ct, port, gid, 1);
	if (port_sc && src_sc && ct->lim.max_peer_records_per_port &&
	    port_sc->n >= ct->lim.max_peer_records_per_port &&
	    !(ct->lim.max_peer_records_per_source &&
	      src_sc->n >= ct->lim.max_peer_records_per_source) &&
	    conn_table_peer_rec_evict(ct, port, cc ? cc->peer_recs : 0) == 0) {
		/* The evicted record's counts may have been the last of
		 * theirs: the counts again. */
		port_sc = conn_table_src_get(ct, port, NULL, 1);
		src_sc = conn_table_src_get(ct, port, gid, 1);
	}
	if (port_sc == NULL || src_sc == NULL ||
	    (ct->lim.max_peer_records_per_port &&
	     port_sc->n >= ct->lim.max_peer_records_per_port) ||
	    (ct->lim.max_peer_records_per_source &&
	     src_sc->n >= ct->lim.max_peer_records_per_source)) {
		conn_table_src_forget_empty(ct, port_sc);
		conn_table_src_forget_empty(ct, src_sc);
		ct->counts.peer_records_refused++;
		return -ENOSPC;
	}
	conn_table_peer_rec_count(ct, port_sc, src_sc);
	return 0;
}

void conn_table_peer_rec_undo(struct conn_table *ct, unsigned port,
			      const struct gid *gid)
{
	conn_table_src_put(ct, conn_table_src_get(ct, port, NULL, 0));
	conn_table_src_put(ct, conn_table_src_get(ct, port, gid, 0));
	ct->counts.peer_records--;
}

void conn_table_peer_rec_drop(struct conn_table *ct, struct conn *c)
{
	if (!(c->flags & CF_PEER_REC))
		return;
	c->flags &= (uint8_t)~CF_PEER_REC;
	conn_client_of(ct, c)->peer_recs--;
	conn_table_peer_rec_undo(ct, c->port, &conn_path_of(ct, c)->peer_gid);
}

/* ---- entries -------------------------------------------------------------- */

static void conn_table_uncharge(struct conn_table *ct, struct conn *c)
{
	if (!(c->flags & CF_CHARGED))
		return;
	c->flags &= (uint8_t)~CF_CHARGED;
	conn_client_of(ct, c)->charged--;
}

void conn_table_set_state(struct conn_table *ct, struct conn *c,
			  enum conn_state s)
{
	ct->counts.by_state[conn_state_of(c)]--;
	c->state = (uint8_t)((c->state & 0xf0) | s);
	ct->counts.by_state[s]++;
	if (s == CONN_TIMEWAIT)
		conn_table_uncharge(ct, c);
}

/* The client's set is keyed by the guest ID while the entry has one that
 * finds it: a change of that moves it. */
static void conn_table_set_flags(struct conn_table *ct, struct conn *c,
				 uint8_t set, uint8_t clear)
{
	struct conn_client *cc = conn_client_of(ct, c);
	uint32_t idx = conn_idx(ct, c);
	uint8_t flags = (uint8_t)((c->flags | set) & ~clear);

	if ((flags ^ c->flags) & CF_GUESTED) {
		/* Out and back in: a set never needs more room for that,
		 * even when taking it out shrank the set. */
		hset_remove(&cc->conns, idx, conn_table_client_key, ct);
		c->flags = flags;
		hset_insert(&cc->conns, idx, conn_table_client_key, ct);
	} else {
		c->flags = flags;
	}
}

void conn_table_guest_unlink(struct conn_table *ct, struct conn *c)
{
	conn_table_set_flags(ct, c, 0, CF_GUESTED);
}

int conn_table_rehome(struct conn_table *ct, struct conn *c, uint32_t owner)
{
	struct conn_client *to = &ct->cl[owner];
	uint32_t idx = conn_idx(ct, c), from = c->owner;

	if (conn_table_client_room(ct, to) < 0)
		return -ENOMEM;
	conn_table_guest_unlink(ct, c);
	conn_table_uncharge(ct, c);
	hset_remove(&ct->cl[from].conns, idx, conn_table_client_key, ct);
	ct->cl[from].n--;
	if (c->flags & CF_PEER_REC) {
		ct->cl[from].peer_recs--;
		to->peer_recs++;
	}
	if (c->timer == TC_TIMEWAIT) {
		ct->cl[from].timewait--;
		to->timewait++;
	}
	c->owner = (uint16_t)owner;
	to->n++;
	hset_insert(&to->conns, idx, conn_table_client_key, ct);
	return 0;
}

static void conn_table_peer_unlink(struct conn_table *ct, struct conn *c)
{
	if (c->flags & CF_IN_PEER) {
		hset_remove(&ct->peers, conn_idx(ct, c), conn_table_peer_key,
			    ct);
		c->flags &= (uint8_t)~CF_IN_PEER;
	}
}

/* The slot goes back, oldest first; its generation and TID sequence
 * stay, so that the next entry in it has other IDs. */
void conn_table_slot_free(struct conn_table *ct, struct conn *c)
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

static struct conn *conn_table_slot_alloc(struct conn_table *ct)
{
	uint32_t idx, gen;
	struct conn *c;

	if (ct->nfree < CONN_REUSE_AFTER &&
	    conn_table_array_grow(ct, CONN_STORE_ENTRIES, &ct->hwm, ct->cap,
				  &idx) == 0) {
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
	gen = (conn_gen(c) + 1) & 1023;
	memset(c, 0, sizeof(*c));
	conn_gen_set(c, gen);
	/* Host ID 0 is never given. */
	if ((conn_slot_word(ct, c) ^ ct->random_operand) == 0)
		conn_gen_set(c, (gen + 1) & 1023);
	return c;
}

/* The client's set has room for one more. */
int conn_table_client_room(struct conn_table *ct, struct conn_client *cc)
{
	return hset_reserve(&cc->conns, conn_table_client_key, ct);
}

/* An entry in (delta 1) or out of (-1) counts of entries. */
static void conn_table_count(struct conn_counts *n, const struct conn *c,
			     int delta)
{
	n->total += (unsigned)delta;
	n->by_state[conn_state_of(c)] += (unsigned)delta;
	if (c->flags & CF_SIDR)
		n->sidr += (unsigned)delta;
	else
		n->comm += (unsigned)delta;
}

/* An entry out of everything but its client's set, and its slot freed. */
static void conn_table_release(struct conn_table *ct, struct conn *c)
{
	conn_table_timer_stop(ct, c);
	conn_table_uncharge(ct, c);
	conn_table_peer_rec_drop(ct, c);
	conn_table_peer_unlink(ct, c);
	ct->cl[c->owner].n--;
	conn_table_count(&ct->counts, c, -1);
	conn_table_path_unref(ct, c->path);
	conn_table_slot_free(ct, c);
}

void conn_table_remove(struct conn_table *ct, struct conn *c)
{
	uint32_t owner = c->owner;

	hset_remove(&ct->cl[owner].conns, conn_idx(ct, c),
		    conn_table_client_key, ct);
	conn_table_release(ct, c);
	conn_table_cl_forget_empty(ct, owner);
}

/* The table's counts of an entry (new, or taken back from a previous
 * daemon). */
void conn_table_account(struct conn_table *ct, struct conn *c)
{
	struct conn_client *cc = conn_client_of(ct, c);

	cc->n++;
	cc->charged += (c->flags & CF_CHARGED) != 0;
	conn_table_count(&ct->counts, c, 1);
}

/* The client's quota: what it started or took on, live. */
int conn_table_quota_full(struct conn_table *ct, const struct conn_client *cc)
{
	unsigned max = ct->lim.max_per_client;

	if (ct->call_max && ct->call_max < max)
		max = ct->call_max;
	return cc->charged >= max;
}

/* A new entry of client's; charged to it unless it is a peer's record. */
struct conn *conn_table_entry_new(struct conn_table *ct, enum conn_kind kind,
				  uint64_t client, unsigned port,
				  enum conn_state state,
				  const struct conn_path *path,
				  uint64_t ca_guid, int charge, int *err)
{
	uint32_t owner = conn_table_cl_find(ct, client), pidx;
	struct conn_client *cc;
	struct conn *c;

	if (port > UINT8_MAX) {
		*err = -EINVAL;
		return NULL;
	}
	if (owner == CONN_NO_OWNER)
		owner = conn_table_cl_new(ct, client);
	if (owner == CONN_NO_OWNER) {
		*err = -ENOSPC;
		return NULL;
	}
	cc = &ct->cl[owner];
	if (charge && conn_table_quota_full(ct, cc)) {
		*err = -ENOSPC;
		conn_table_cl_forget_empty(ct, owner);
		return NULL;
	}
	/* Everything that can fail, before the slot is taken. */
	if (conn_table_client_room(ct, cc) < 0) {
		*err = -ENOMEM;
		conn_table_cl_forget_empty(ct, owner);
		return NULL;
	}
	*err = conn_table_path_ref(ct, path, ca_guid, &pidx);
	if (*err) {
		conn_table_cl_forget_empty(ct, owner);
		return NULL;
	}
	c = conn_table_slot_alloc(ct);
	if (c == NULL) {
		*err = -ENOSPC;
		conn_table_path_unref(ct, pidx);
		conn_table_cl_forget_empty(ct, owner);
		return NULL;
	}
	c->state = (uint8_t)state;
	c->owner = (uint16_t)owner;
	c->port = (uint8_t)port;
	c->path = pidx;
	c->flags = (uint8_t)((kind == CK_SIDR ? CF_SIDR : 0) |
			     (charge ? CF_CHARGED : 0));
	hset_insert(&cc->conns, conn_idx(ct, c), conn_table_client_key, ct);
	conn_table_account(ct, c);
	/* Last: a restart takes the slot as an entry from here on. */
	__atomic_store_n(&c->flags, (uint8_t)(c->flags | CF_LIVE),
			 __ATOMIC_RELEASE);
	return c;
}

struct conn *conn_table_host_find(struct conn_table *ct, enum conn_kind kind,
				  unsigned port, uint32_t host_id)
{
	uint32_t x = host_id ^ ct->random_operand, idx = x & CONN_IDX_MASK;
	struct conn *c;

	if (host_id == 0 || idx >= ct->hwm)
		return NULL;
	c = conn_at(ct, idx);
	/* On any port, as cm_acquire_id() finds an ID: a connection whose
	 * path migrated to another port of the host is still found (its
	 * peer is checked by GID).  The port is what the caller saw. */
	(void)port;
	if ((c->flags & (CF_LIVE | CF_HOSTED)) != (CF_LIVE | CF_HOSTED) ||
	    conn_gen(c) != x >> CONN_IDX_BITS || conn_kind_of(c) != kind)
		return NULL;
	return c;
}

struct conn *conn_table_guest_find(struct conn_table *ct, enum conn_kind kind,
				   uint64_t client, unsigned port,
				   uint32_t guest_id)
{
	struct conn_client *cc = conn_table_client_get(ct, client);
	struct conn *c;
	uint32_t j;

	if (cc == NULL)
		return NULL;
	HSET_PROBE(&cc->conns, conn_table_guest_hash(kind, port, guest_id), j) {
		c = conn_at(ct, cc->conns.cell[j] - 1);
		if ((c->flags & CF_GUESTED) && c->guest_id == guest_id &&
		    c->port == port && conn_kind_of(c) == kind)
			return c;
	}
	return NULL;
}

/* The peers' set holds every GID's entries with one peer ID together. */
static int conn_table_peer_is(const struct conn *c, enum conn_kind kind,
			      unsigned port, uint32_t peer_id)
{
	return c->peer_id == peer_id && c->port == port &&
	       conn_kind_of(c) == kind;
}

struct conn *conn_table_peer_find_kind(struct conn_table *ct,
				       enum conn_kind kind, unsigned port,
				       uint32_t peer_id, const struct gid *gid)
{
	struct conn *c;
	uint32_t j;

	HSET_PROBE(&ct->peers, conn_table_peer_hash(kind, port, peer_id), j) {
		c = conn_at(ct, ct->peers.cell[j] - 1);
		if (conn_table_peer_is(c, kind, port, peer_id) &&
		    gid_cmp(&conn_path_of(ct, c)->peer_gid, gid) == 0)
			return c;
	}
	return NULL;
}

struct conn *conn_table_peer_find(struct conn_table *ct, unsigned port,
				  uint32_t peer_id, const struct gid *gid)
{
	return conn_table_peer_find_kind(ct, CK_COMM, port, peer_id, gid);
}

/* A client's record of a peer's REQ (or SIDR_REQ) with that peer ID, from
 * whichever GID: the peer ID is all a reply names. */
struct conn *conn_table_peer_record_of(struct conn_table *ct,
				       enum conn_kind kind, uint64_t client,
				       unsigned port, uint32_t peer_id)
{
	struct conn *c;
	uint32_t j;

	HSET_PROBE(&ct->peers, conn_table_peer_hash(kind, port, peer_id), j) {
		c = conn_at(ct, ct->peers.cell[j] - 1);
		if (conn_table_peer_is(c, kind, port, peer_id) &&
		    conn_client_id(ct, c) == client &&
		    conn_state_of(c) == CONN_REQ_RCVD)
			return c;
	}
	return NULL;
}

/* The peer's comm ID is known: index the entry by it (first come). */
void conn_table_peer_set(struct conn_table *ct, struct conn *c,
			 uint32_t peer_id)
{
	if ((c->flags & CF_IN_PEER) || peer_id == 0)
		return;
	c->peer_id = peer_id;
	if (conn_table_peer_find_kind(ct, conn_kind_of(c), c->port, peer_id,
				      &conn_path_of(ct, c)->peer_gid) == NULL &&
	    hset_reserve(&ct->peers, conn_table_peer_key, ct) == 0) {
		hset_insert(&ct->peers, conn_idx(ct, c), conn_table_peer_key,
			    ct);
		c->flags |= CF_IN_PEER;
	}
}

/* Give an entry its guest ID and its host ID (derived from its slot), and
 * let both find it. */
void conn_table_bind(struct conn_table *ct, struct conn *c, uint32_t guest_id)
{
	c->guest_id = guest_id;
	conn_table_set_flags(ct, c, CF_HOSTED | CF_GUESTED, 0);
}

struct conn *conn_table_create_bound(struct conn_table *ct, enum conn_kind kind,
				     uint64_t client, unsigned port,
				     uint32_t guest_id, enum conn_state state,
				     const struct conn_path *path,
				     uint64_t ca_guid, int *err)
{
	struct conn *c = conn_table_entry_new(ct, kind, client, port, state,
					      path, ca_guid, 1, err);

	if (c)
		conn_table_bind(ct, c, guest_id);
	return c;
}

/* ---- TIDs ----------------------------------------------------------------- */

#define TID_HIGH 0xffffffff00000000ull

/* A TID's low half as cm.c forms its sender's (cm_form_tid()): the
 * sender's comm ID. */
static int conn_table_tid_is_senders(uint32_t low, uint32_t sender)
{
	return sender != 0 && low == sender;
}

static uint64_t conn_table_guest_tid(const struct conn *c)
{
	return (uint64_t)c->guest_tid_hi << 32 | c->guest_tid_lo;
}

/* The attribute of the last send, in the state byte's high nibble (CM
 * attributes are 0x10..0x1a; 0: nothing sent yet). */
static unsigned conn_table_tid_attr(const struct conn *c)
{
	return c->state >> 4;
}

static unsigned conn_table_attr_nibble(const uint8_t *mad)
{
	return (cm_mad_attr_id(mad) - 0x0f) & 0x0f;
}

int conn_table_tid_repeats(const struct conn *c, const uint8_t *mad)
{
	return conn_table_tid_attr(c) != 0 &&
	       conn_table_tid_attr(c) == conn_table_attr_nibble(mad) &&
	       conn_table_guest_tid(c) == cm_mad_tid(mad);
}

/*
 * cm.c's TIDs (cm_form_tid()): a message of its own carries its comm ID
 * in the low half, an answer the TID of the message it answers.  So a
 * client's send leaves with the host ID in the low half, unless it
 * answers with the peer's own TID as cm.c forms it (the peer's comm ID):
 * a peer sees the TIDs a host's kernel CM would send, and no tenant
 * picks a TID that another's send could collide with in ib_umad (which
 * refuses a send whose TID is still outstanding: port_umad waits).  The
 * high half is ib_umad's: it puts the agent's number there.
 */
void conn_table_tid_out(struct conn *c, const struct conn_table *ct,
			uint8_t *mad)
{
	uint64_t tid = cm_mad_tid(mad);
	unsigned attr = conn_table_attr_nibble(mad);
	uint32_t low = (uint32_t)tid;

	if (!conn_table_tid_repeats(c, mad)) {
		c->state = (uint8_t)((attr << 4) | (c->state & 0x0f));
		c->guest_tid_hi = (uint32_t)(tid >> 32);
		c->guest_tid_lo = low;
	}
	if (!conn_table_tid_is_senders(low, c->peer_id))
		low = conn_host_id(ct, c);
	wire_put64(mad + MAD_OFF_TID, (tid & TID_HIGH) | low);
}

/* A message that echoes the host ID we put in the client's last send's
 * TID gets the client's TID back. */
void conn_table_tid_in(const struct conn_table *ct, const struct conn *c,
		       uint8_t *mad)
{
	if (conn_table_tid_attr(c) &&
	    !conn_table_tid_is_senders(c->guest_tid_lo, c->peer_id) &&
	    (uint32_t)cm_mad_tid(mad) == conn_host_id(ct, c))
		wire_put64(mad + MAD_OFF_TID, conn_table_guest_tid(c));
}

void conn_table_tid_answer(struct conn_table *ct, uint8_t *mad, uint32_t sender)
{
	uint64_t tid = cm_mad_tid(mad);

	wire_put64(mad + MAD_OFF_TID,
		   (tid & TID_HIGH) |
			   conn_table_echo_tid(ct, (uint32_t)tid, sender));
}

uint32_t conn_table_echo_tid(struct conn_table *ct, uint32_t low,
			     uint32_t sender)
{
	return conn_table_tid_is_senders(low, sender) ? low
						      : conn_table_next_tid(ct);
}

uint64_t conn_table_next_deadline(struct conn_table *ct)
{
	uint64_t next = UINT64_MAX, at;
	struct conn *c;
	int64_t in;
	int tc;

	for (tc = TC_HANDSHAKE; tc < TC_MAX; tc++) {
		c = conn_table_timer_first(ct, tc);
		if (c == NULL)
			continue;
		in = conn_deadline_in(c, ct->now_ms);
		at = in < 0 && (uint64_t)-in > ct->now_ms ? 0 : ct->now_ms + in;
		if (at < next)
			next = at;
	}
	return next;
}

/* A client's record and every entry it holds, gone, with no word to
 * anyone (what its peers must be told, conn_purge_record() in conn.c has
 * told them first). */
void conn_table_drop_client(struct conn_table *ct, uint32_t owner)
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
		conn_table_release(ct, c);
	}
	conn_table_cl_free(ct, owner);
}

void conn_table_free(struct conn_table *ct)
{
	struct src_count *sc, *snext;
	uint32_t i, n;

	if (ct == NULL)
		return;
	/* Shutting down: no one to tell, so the entries only go (the
	 * state file must not bring them back unless detached). */
	n = ct->ncl;
	for (i = 0; ct->cl && i < n; i++) {
		if (!ct->cl[i].used)
			continue;
		if (ct->detached) /* the entries stay where they are */
			hset_free(&ct->cl[i].conns);
		else
			conn_table_drop_client(ct, i);
	}
	hset_free(&ct->peers);
	hset_free(&ct->path_index);
	hset_free(&ct->cl_index);
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

void conn_table_counts(struct conn_table *ct, struct conn_counts *out)
{
	*out = ct->counts;
}

void conn_table_client_counts(struct conn_table *ct, uint64_t client,
			      struct conn_counts *out)
{
	struct conn_client *cc = conn_table_client_get(ct, client);
	const struct conn *c;
	uint32_t i;

	memset(out, 0, sizeof(*out));
	if (cc == NULL)
		return;
	out->peer_records = cc->peer_recs;
	for (i = 0; i < cc->conns.cap; i++) {
		if (cc->conns.cell[i] == 0)
			continue;
		c = conn_at(ct, cc->conns.cell[i] - 1);
		conn_table_count(out, c, 1);
	}
}

/* A client's entries in a stable order: comm IDs, then SIDR request IDs,
 * each by the guest's ID (peer records, which have none yet, first). */
static int conn_table_listing_cmp(const void *a, const void *b, void *arg)
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

/* Sift list[i] down the max-heap list[0..n) (the listing's order). */
static void conn_table_listing_sift(struct conn_table *ct, uint32_t *list,
				    uint32_t n, uint32_t i)
{
	uint32_t top = list[i], child;

	while ((child = 2 * i + 1) < n) {
		if (child + 1 < n &&
		    conn_table_listing_cmp(&list[child + 1], &list[child], ct) >
			    0)
			child++;
		if (conn_table_listing_cmp(&list[child], &top, ct) <= 0)
			break;
		list[i] = list[child];
		i = child;
	}
	list[i] = top;
}

/* The first k of list[0..n) in the listing's order, into list[0..k):
 * a status page of a client with thousands of entries sorts k of them,
 * not all, while the router's lock is held. */
static void conn_table_listing_first(struct conn_table *ct, uint32_t *list,
				     uint32_t n, uint32_t k)
{
	uint32_t i;

	if (k < n / 4) {
		for (i = k / 2; i-- > 0;)
			conn_table_listing_sift(ct, list, k, i);
		for (i = k; i < n; i++)
			if (conn_table_listing_cmp(&list[i], &list[0], ct) <
			    0) {
				list[0] = list[i];
				conn_table_listing_sift(ct, list, k, 0);
			}
		n = k;
	}
	qsort_r(list, n, sizeof(*list), conn_table_listing_cmp, ct);
}

void conn_table_client_foreach(struct conn_table *ct, uint64_t client,
			       unsigned skip, unsigned max, uint64_t now_ms,
			       void (*fn)(void *arg, const struct conn_view *v),
			       void *arg)
{
	struct conn_client *cc = conn_table_client_get(ct, client);
	struct conn_view v;
	const struct conn *c;
	uint32_t *list, n = 0, i;

	conn_table_clock(ct, now_ms);
	if (cc == NULL || cc->conns.n == 0 || skip >= cc->conns.n || max == 0)
		return;
	list = malloc(cc->conns.n * sizeof(*list));
	if (list == NULL)
		return;
	for (i = 0; i < cc->conns.cap; i++)
		if (cc->conns.cell[i])
			list[n++] = cc->conns.cell[i] - 1;
	conn_table_listing_first(ct, list, n, max < n - skip ? skip + max : n);
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
