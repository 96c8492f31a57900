// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * A restarted daemon's connection table: the entries a previous daemon
 * left in the state file (conn_store.c) taken back into the table's
 * indexes and timers, and the owners of those entries, each of which a
 * client may claim with the resume token it was given; what nobody
 * claims in time is ended as its client's departure would end it.
 */
#include "mux/conn_priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mux/conn_store.h"
#include "common/wire.h"

/* ---- persistence: a restarted daemon's table -------------------------- */

struct conn_restore_timed {
	uint32_t idx;
	int32_t in; /* deadline against the restart */
};

static int conn_restore_by_deadline(const void *a, const void *b)
{
	const struct conn_restore_timed *x = a, *y = b;

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
	    conn_table_guest_find(ct, conn_kind_of(c), cc->id, c->port,
				  c->guest_id) != NULL)
		return -EEXIST;
	if ((c->flags & CF_IN_PEER) &&
	    conn_table_peer_find_kind(ct, conn_kind_of(c), c->port, c->peer_id,
				      &conn_path_of(ct, c)->peer_gid) != NULL)
		c->flags &= (uint8_t)~CF_IN_PEER; /* first come */
	if (conn_table_client_room(ct, cc) < 0 ||
	    ((c->flags & CF_IN_PEER) &&
	     hset_reserve(&ct->peers, conn_table_peer_key, ct) < 0))
		return -ENOMEM;
	if (c->flags & CF_PEER_REC) {
		conn_table_peer_rec_count(
			ct, conn_table_src_get(ct, c->port, NULL, 1),
			conn_table_src_get(ct, c->port,
					   &conn_path_of(ct, c)->peer_gid, 1));
		cc->peer_recs++;
	}
	hset_insert(&cc->conns, idx, conn_table_client_key, ct);
	if (c->flags & CF_IN_PEER)
		hset_insert(&ct->peers, idx, conn_table_peer_key, ct);
	ct->paths[c->path].refs++;
	conn_table_account(ct, c);
	return 0;
}

/* The table's counters as the file kept them. */
static void conn_restore_counters(struct conn_table *ct)
{
	struct conn_store *st = ct->store;

	ct->random_operand = *conn_store_counter(st, CONN_STORE_RANDOM_OPERAND);
	ct->now_ms = (uint64_t)*conn_store_counter(st, CONN_STORE_NOW_HI)
			     << 32 |
		     *conn_store_counter(st, CONN_STORE_NOW_LO);
	ct->tid_seq = *conn_store_counter(st, CONN_STORE_TID_SEQ);
	ct->hwm = *conn_store_counter(st, CONN_STORE_ENTRIES_HWM);
	ct->path_hwm = *conn_store_counter(st, CONN_STORE_PATHS_HWM);
}

/* The owners of the last life, each away until it claims its entries
 * (what departed clients left drains on); the records none holds are
 * free, lowest first. */
static void conn_restore_owners(struct conn_table *ct, struct conn_owner *o,
				uint32_t nown)
{
	uint32_t i;

	for (i = 0; i < nown && i < CONN_MAX_CLIENTS; i++) {
		struct conn_client *cc = &ct->cl[i];

		o[i].claimed = 0; /* every owner of the last life, once */
		if (!o[i].live ||
		    conn_table_cl_find(ct, o[i].client) != CONN_NO_OWNER ||
		    hset_reserve(&ct->cl_index, conn_table_cl_key, ct) < 0) {
			o[i].live = 0;
			continue;
		}
		memset(cc, 0, sizeof(*cc));
		cc->id = o[i].client;
		cc->used = 1;
		cc->pinned = o[i].resumable;
		if (o[i].client == CONN_DEPARTED)
			o[i].claimed = 1;
		else
			cc->away = 1;
		hset_insert(&ct->cl_index, i, conn_table_cl_key, ct);
	}
	ct->ncl = ct->cl_cap;
	for (i = ct->cl_cap; i-- > 0;) {
		if (ct->cl[i].used)
			continue;
		ct->cl[i].next_free = (uint16_t)ct->cl_free;
		ct->cl_free = i + 1;
	}
}

/* Each live entry taken back (its path referenced again), and its timer,
 * in deadline order: each class is a FIFO by deadline, as it was built.
 * Returns the entries that could not be taken back. */
static unsigned conn_restore_live(struct conn_table *ct)
{
	struct conn_restore_timed *timed = NULL;
	uint32_t i, ntimed = 0;
	unsigned dropped = 0;
	struct conn *c;

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
		/* A class may be shorter now (other limits): no deadline
		 * lies beyond what the class gives a new entry, or the
		 * class's FIFO would no longer be in deadline order. */
		if (conn_deadline_in(c, ct->now_ms) >
		    (int64_t)ct->timer_ms[c->timer])
			c->deadline = (uint32_t)(ct->now_ms +
						 ct->timer_ms[c->timer]);
		timed[ntimed].idx = i;
		timed[ntimed].in = (int32_t)conn_deadline_in(c, ct->now_ms);
		ntimed++;
	}
	if (ntimed)
		qsort(timed, ntimed, sizeof(*timed), conn_restore_by_deadline);
	for (i = 0; i < ntimed; i++) {
		c = conn_at(ct, timed[i].idx);
		conn_table_timer_append(ct, c, c->timer);
	}
	free(timed);
	return dropped;
}

/* Free entry slots and path records, lowest first; the paths in use
 * indexed again. */
static void conn_restore_free_lists(struct conn_table *ct)
{
	uint32_t i;

	for (i = 0; i < ct->hwm; i++)
		if (!(conn_at(ct, i)->flags & CF_LIVE))
			conn_table_slot_free(ct, conn_at(ct, i));
	for (i = ct->path_hwm; i-- > 0;) {
		if (ct->paths[i].refs) {
			if (hset_reserve(&ct->path_index,
					 conn_table_pathrec_key, ct) == 0)
				hset_insert(&ct->path_index, i,
					    conn_table_pathrec_key, ct);
		} else {
			ct->paths[i].next_free = ct->path_free;
			ct->path_free = i + 1;
		}
	}
}

/* Rebuilds the indexes from the file: owners, then entries (and the
 * references of their paths), then timers in deadline order, then the
 * free lists.  Returns the entries that could not be taken back. */
static unsigned conn_restore_entries(struct conn_table *ct)
{
	struct conn_owner *o;
	uint32_t nown, i;
	unsigned dropped;

	conn_restore_counters(ct);
	o = conn_store_owners(ct->store, &nown);
	conn_restore_owners(ct, o, nown);
	for (i = 0; i < ct->path_hwm; i++)
		ct->paths[i].refs = 0;
	dropped = conn_restore_live(ct);
	conn_restore_free_lists(ct);
	/* Owners that nothing keeps. */
	for (i = 0; i < nown && i < CONN_MAX_CLIENTS; i++)
		if (ct->cl[i].used)
			conn_table_cl_forget_empty(ct, i);
	return dropped;
}

/* Entries and owners' GIDs name ports by index: a restart with other
 * ports moves them to their port's new index.  Those of ports that are
 * gone are dropped; returns how many entries were. */
static unsigned conn_restore_remap_ports(struct conn_table *ct,
					 const int map[CONN_STORE_MAX_PORTS])
{
	uint32_t i,
		hwm = *conn_store_counter(ct->store, CONN_STORE_ENTRIES_HWM),
		ngids, n;
	struct conn_owner *o;
	struct conn *c;
	unsigned gone = 0;

	for (i = 0; i < hwm && i < ct->cap; i++) {
		c = conn_at(ct, i);
		if (!(c->flags & CF_LIVE))
			continue;
		if (c->port >= CONN_STORE_MAX_PORTS || map[c->port] < 0) {
			c->flags = 0;
			gone++;
			continue;
		}
		c->port = (uint8_t)map[c->port];
	}
	/* A QEMU owner is known by the port it came in on: by its name, not
	 * its place in the list, or the same QEMU process would find no
	 * owner of its own (its GIDs held for ever, its guest mute), and
	 * two devices of one QEMU on two ports would swap claims. */
	o = conn_store_owners(ct->store, &n);
	for (i = 0; i < n; i++) {
		uint16_t p = wire_get16(o[i].token + CONN_IDENTITY_PORT_OFF);

		if (o[i].live && o[i].qemu && p < CONN_STORE_MAX_PORTS &&
		    map[p] >= 0)
			wire_put16(o[i].token + CONN_IDENTITY_PORT_OFF,
				   (uint16_t)map[p]);
	}
	conn_store_owners(ct->store, &ngids);
	ngids *= ct->gids_per_owner;
	for (i = 0; i < ngids; i++) {
		struct conn_gid_rec *g = &ct->gids[i];

		if (!g->used)
			continue;
		if (g->port >= CONN_STORE_MAX_PORTS || map[g->port] < 0)
			g->used = 0;
		else
			g->port = (uint16_t)map[g->port];
	}
	return gone;
}

/* What an entry's fields mean, as a fingerprint (FNV-1a) of the states'
 * names in their order, the timer classes' layout, the flags' values and
 * the records' sizes: a change to any of them that forgot to bump the
 * state file's version still keeps a daemon from misreading a file. */
static uint64_t conn_restore_meanings(void)
{
	char text[512];
	uint64_t h = 1469598103934665603ull;
	size_t used = 0, i;
	int n;

	for (i = 0; i < CONN_STATE_MAX; i++) {
		n = snprintf(text + used, sizeof(text) - used, "%s,",
			     conn_state_name((enum conn_state)i));
		used += (size_t)n;
	}
	snprintf(
		text + used, sizeof(text) - used,
		";tc %d %d %d %d %d;cf %d %d %d %d %d %d %d %d;qpn %x;%zu %zu %zu %zu",
		TC_HANDSHAKE, TC_TIMEWAIT, TC_MRA0, TC_POW0, TC_MAX, CF_LIVE,
		CF_SIDR, CF_HOSTED, CF_GUESTED, CF_IN_PEER, CF_ORPHAN,
		CF_CHARGED, CF_PEER_REC, CONN_QPN_MASK, sizeof(struct conn),
		sizeof(struct conn_pathrec), sizeof(struct conn_owner),
		sizeof(struct conn_gid_rec));
	for (i = 0; text[i]; i++)
		h = (h ^ (uint8_t)text[i]) * 1099511628211ull;
	return h;
}

/* Each limit of a path record's or an entry's array, from the state
 * file's size for entries. */
struct conn_table *conn_restore_open(const struct conn_limits *lim,
				     uint32_t random_operand,
				     conn_emit_fn emit_fn, void *emit_arg,
				     const char *path, uint32_t max_entries,
				     uint32_t max_owners,
				     uint32_t gids_per_owner,
				     const uint64_t *port_ids, unsigned nports,
				     int *restored, char *err, size_t errlen)
{
	struct conn_table *ct;
	struct conn_store_layout lay = {
		.size = { sizeof(struct conn), sizeof(struct conn_pathrec),
			  sizeof(struct conn_gid_rec) },
		.cap = { max_entries, max_entries,
			 max_owners * gids_per_owner },
		.owner_cap = max_owners,
		.meanings = conn_restore_meanings(),
	};
	int map[CONN_STORE_MAX_PORTS];
	unsigned dropped, gone = 0;

	if (nports > CONN_STORE_MAX_PORTS) {
		snprintf(err, errlen, "at most %u ports", CONN_STORE_MAX_PORTS);
		return NULL;
	}
	lay.nports = nports;
	memcpy(lay.port_id, port_ids, nports * sizeof(*port_ids));

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
	ct->store = conn_store_open(path, &lay, restored, err, errlen);
	if (ct->store == NULL) {
		conn_table_free(ct);
		return NULL;
	}
	ct->e = conn_store_array(ct->store, CONN_STORE_ENTRIES);
	ct->paths = conn_store_array(ct->store, CONN_STORE_PATHS);
	ct->gids = conn_store_array(ct->store, CONN_STORE_GIDS);
	ct->gids_per_owner = gids_per_owner;
	ct->cap = ct->path_cap = max_entries;
	/* A client's record is its owner record. */
	ct->cl_cap = max_owners;
	if (*restored) {
		if (conn_store_port_map(ct->store, &lay, map))
			gone = conn_restore_remap_ports(ct, map);
		conn_store_set_ports(ct->store, &lay);
		dropped = conn_restore_entries(ct);
		if (gone)
			snprintf(
				err, errlen,
				"the ports changed: %u entries were on ports this daemon does not have and are lost (no DREQ can go out on a port that is not there)%s",
				gone,
				dropped ? "; more were being changed when the previous daemon ended"
					: "");
		else if (dropped)
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

void conn_restore_detach(struct conn_table *ct)
{
	ct->detached = 1;
}

/* ---- owners: clients that may claim their entries after a restart ----- */

static struct conn_owner *conn_restore_owner_of(struct conn_table *ct,
						uint32_t i)
{
	uint32_t n;

	return &conn_store_owners(ct->store, &n)[i];
}

/* ---- owners' GIDs ------------------------------------------------------- */

static struct conn_gid_rec *conn_restore_gids_of(struct conn_table *ct,
						 uint32_t rec)
{
	return ct->gids + (size_t)rec * ct->gids_per_owner;
}

/* A record's slice as a new owner takes it: a previous owner's GIDs are
 * not its.  Only what is set is written: a slice never written is a
 * hole in the file, which reads as zeros, and a store into it would
 * allocate a page that a full /run does not have (SIGBUS). */
static void conn_restore_gids_clear(struct conn_table *ct, uint32_t rec)
{
	struct conn_gid_rec *g = conn_restore_gids_of(ct, rec);
	uint32_t k;

	for (k = 0; k < ct->gids_per_owner; k++)
		if (g[k].used)
			g[k].used = 0;
}

int conn_restore_gid_note(struct conn_table *ct, uint64_t client, unsigned port,
			  const uint8_t gid[16], int add)
{
	struct conn_gid_rec *g, *free_slot = NULL;
	uint32_t rec, k;
	int rc;

	if (ct->store == NULL || ct->gids_per_owner == 0 || ct->detached)
		return 0;
	rec = conn_table_cl_find(ct, client);
	if (rec == CONN_NO_OWNER || !conn_restore_owner_of(ct, rec)->resumable)
		return 0; /* nobody can come back for it */
	rc = conn_store_reserve(ct->store, CONN_STORE_GIDS,
				(rec + 1) * ct->gids_per_owner);
	if (rc)
		return rc;
	g = conn_restore_gids_of(ct, rec);
	for (k = 0; k < ct->gids_per_owner; k++) {
		if (!g[k].used) {
			if (free_slot == NULL)
				free_slot = &g[k];
			continue;
		}
		if (g[k].port != port || memcmp(g[k].gid, gid, 16) != 0)
			continue;
		if (!add)
			g[k].used = 0;
		return 0;
	}
	if (!add)
		return 0;
	if (free_slot == NULL)
		return -ENOSPC;
	memcpy(free_slot->gid, gid, 16);
	free_slot->port = (uint16_t)port;
	free_slot->used = 1;
	return 0;
}

void conn_restore_gids_foreach(struct conn_table *ct,
			       void (*fn)(void *arg, uint64_t client,
					  unsigned port, const uint8_t gid[16]),
			       void *arg)
{
	struct conn_gid_rec *g;
	uint32_t rec, k;

	if (ct->store == NULL || ct->gids_per_owner == 0)
		return;
	for (rec = 0; rec < ct->ncl; rec++) {
		if (!ct->cl[rec].used || !ct->cl[rec].away ||
		    !conn_restore_owner_of(ct, rec)->resumable)
			continue;
		g = conn_restore_gids_of(ct, rec);
		for (k = 0; k < ct->gids_per_owner; k++)
			if (g[k].used)
				fn(arg, ct->cl[rec].id, g[k].port, g[k].gid);
	}
}

int conn_restore_owner_away(struct conn_table *ct, uint64_t client)
{
	uint32_t rec;

	if (ct->store == NULL)
		return 0;
	rec = conn_table_cl_find(ct, client);
	return rec != CONN_NO_OWNER && ct->cl[rec].away;
}

static int conn_restore_owner_add_kind(struct conn_table *ct, uint64_t client,
				       uint32_t uid, const uint8_t token[16],
				       int qemu);

int conn_restore_owner_add(struct conn_table *ct, uint64_t client, uint32_t uid,
			   const uint8_t token[16])
{
	return conn_restore_owner_add_kind(ct, client, uid, token, 0);
}

int conn_restore_owner_add_qemu(struct conn_table *ct, uint64_t client,
				uint32_t uid, const uint8_t identity[16])
{
	return conn_restore_owner_add_kind(ct, client, uid, identity, 1);
}

static int conn_restore_owner_add_kind(struct conn_table *ct, uint64_t client,
				       uint32_t uid, const uint8_t token[16],
				       int qemu)
{
	struct conn_owner *o;
	uint32_t i;

	if (ct->store == NULL)
		return -ENOTSUP;
	i = conn_table_cl_find(ct, client);
	if (i == CONN_NO_OWNER) {
		i = conn_table_cl_new(ct, client);
		if (i != CONN_NO_OWNER)
			conn_restore_gids_clear(ct, i);
	}
	if (i == CONN_NO_OWNER)
		return -ENOSPC;
	o = conn_restore_owner_of(ct, i);
	o->uid = uid;
	memcpy(o->token, token, 16);
	o->resumable = 1;
	o->qemu = (uint8_t)qemu;
	ct->cl[i].pinned = 1;
	return 0;
}

/* Record i's entries, GIDs and owner record pass to new_client. */
static void conn_restore_hand_over(struct conn_table *ct, uint32_t i,
				   uint64_t new_client,
				   const uint8_t new_token[16])
{
	struct conn_owner *o = conn_restore_owner_of(ct, i);

	/* The entries name the record, not the client: renaming the record
	 * hands them all over at once. */
	hset_remove(&ct->cl_index, i, conn_table_cl_key, ct);
	ct->cl[i].id = new_client;
	hset_insert(&ct->cl_index, i, conn_table_cl_key, ct);
	o->client = new_client;
	memcpy(o->token, new_token, 16);
	o->claimed = 1;
	ct->cl[i].away = 0;
}

int conn_restore_claim_identity(struct conn_table *ct, uint32_t uid,
				const uint8_t identity[16], uint64_t new_client,
				uint64_t *old_client)
{
	uint32_t i, n, found = CONN_NO_OWNER;
	struct conn_owner *o;

	if (ct->store == NULL)
		return -ENOENT;
	if (conn_table_cl_find(ct, new_client) != CONN_NO_OWNER)
		return -EEXIST;
	conn_store_owners(ct->store, &n);
	for (i = 0; i < ct->ncl && i < n; i++) {
		o = conn_restore_owner_of(ct, i);
		if (!ct->cl[i].used || !ct->cl[i].away || !o->resumable ||
		    !o->qemu || o->claimed || o->uid != uid ||
		    memcmp(o->token, identity, 16) != 0)
			continue;
		if (found != CONN_NO_OWNER)
			return -ENOTUNIQ; /* which is which cannot be told */
		found = i;
	}
	if (found == CONN_NO_OWNER)
		return -ENOENT;
	*old_client = ct->cl[found].id;
	conn_restore_hand_over(ct, found, new_client, identity);
	return 0;
}

int conn_restore_claim(struct conn_table *ct, uint64_t old_client, uint32_t uid,
		       const uint8_t token[16], uint64_t new_client,
		       const uint8_t new_token[16])
{
	struct conn_owner *o;
	uint8_t diff = 0;
	uint32_t i;
	unsigned k;

	if (ct->store == NULL)
		return -ENOENT;
	i = conn_table_cl_find(ct, old_client);
	if (i == CONN_NO_OWNER)
		return -ENOENT;
	o = conn_restore_owner_of(ct, i);
	/* A QEMU client's token is no secret: only its process claims. */
	if (!o->resumable || o->claimed || o->qemu)
		return -ENOENT;
	for (k = 0; k < 16; k++) /* in constant time */
		diff |= o->token[k] ^ token[k];
	if (diff || o->uid != uid)
		return -EPERM;
	if (conn_table_cl_find(ct, new_client) != CONN_NO_OWNER)
		return -EEXIST;
	conn_restore_hand_over(ct, i, new_client, new_token);
	return 0;
}

unsigned conn_restore_purge_unclaimed(struct conn_table *ct)
{
	unsigned purged = 0;
	uint32_t i, n;

	if (ct->store == NULL)
		return 0;
	conn_store_owners(ct->store, &n);
	for (i = 0; i < n && i < CONN_MAX_CLIENTS; i++) {
		if (!ct->cl[i].used || conn_restore_owner_of(ct, i)->claimed)
			continue;
		conn_purge_record(ct, i);
		purged++;
	}
	return purged;
}

uint64_t conn_restore_max_client(struct conn_table *ct)
{
	uint64_t max = 0;
	uint32_t i, n = ct->ncl;

	for (i = 0; i < n; i++)
		if (ct->cl[i].used && ct->cl[i].id != CONN_DEPARTED &&
		    ct->cl[i].id > max)
			max = ct->cl[i].id;
	return max;
}
