// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The router: who owns which GID, and so who gets an inbound CM MAD: REQ
 * and SIDR_REQ by destination GID, everything else through the connection
 * table (conn.c), which translates comm IDs per client.  It answers
 * for nobody's GIDs as a host's kernel CM would (REJ "invalid service
 * ID", SIDR_REP "unsupported"), and passes on what the table says for
 * clients that cannot.  It does no I/O: MADs it sends leave through the
 * ops the daemon wires up, after its lock is released; callers pass the
 * time in, so tests drive it with a fake clock.  One mutex serialises it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mux/router.h"
#include "common/log.h"
#include "common/cm_mad.h"
#include "common/tree.h"
#include "common/gid_map.h"
#include "common/wire.h"

struct gid_entry {
	RB_ENTRY(gid_entry) link;
	LIST_ENTRY(gid_entry) client_link; /* exclusive: its owner's */
	unsigned port;
	struct gid gid;
	uint64_t client;  /* ROUTER_GID_SHARED: its members' */
	unsigned members; /* shared: how many */
};

/*
 * A client's share of a shared GID (issue 43: the host's own processes
 * share its address, as they do with the kernel CM).  Every member sends
 * from it; an inbound REQ or SIDR_REQ for it goes to the member that
 * listens on its service ID, as cm.c finds a listener by service ID.
 */
struct gid_member {
	RB_ENTRY(gid_member) link; /* by (port, GID, client) */
	LIST_ENTRY(gid_member) client_link;
	struct gid_entry *e;
	uint64_t client;
	LIST_HEAD(, gid_listen) listens;
};

struct gid_listen {
	RB_ENTRY(gid_listen) link; /* by (port, GID, service ID) */
	LIST_ENTRY(gid_listen) member_link;
	unsigned port;
	struct gid gid;
	uint64_t service_id;
	uint64_t client;
};

struct router_client {
	RB_ENTRY(router_client) link;
	uint64_t id;
	unsigned ngids; /* exclusive and shared */
	unsigned nlistens;
	LIST_HEAD(, gid_entry) gids;
	LIST_HEAD(, gid_member) shares;
};

static int router_gid_entry_cmp(struct gid_entry *a, struct gid_entry *b)
{
	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	return gid_cmp(&a->gid, &b->gid);
}

static int router_client_cmp(struct router_client *a, struct router_client *b)
{
	return a->id < b->id ? -1 : a->id > b->id;
}

static int router_member_cmp(struct gid_member *a, struct gid_member *b)
{
	int c = router_gid_entry_cmp(a->e, b->e);

	if (c)
		return c;
	return a->client < b->client ? -1 : a->client > b->client;
}

static int router_listen_cmp(struct gid_listen *a, struct gid_listen *b)
{
	int c;

	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	c = gid_cmp(&a->gid, &b->gid);
	if (c)
		return c;
	return a->service_id < b->service_id ? -1
					     : a->service_id > b->service_id;
}

RB_HEAD(gid_tree, gid_entry);
RB_HEAD(rclient_tree, router_client);
RB_HEAD(member_tree, gid_member);
RB_HEAD(listen_tree, gid_listen);
TREE_GENERATE_STATIC(gid_tree, gid_entry, link, router_gid_entry_cmp)
TREE_GENERATE_STATIC(rclient_tree, router_client, link, router_client_cmp)
TREE_GENERATE_STATIC(member_tree, gid_member, link, router_member_cmp)
TREE_GENERATE_STATIC(listen_tree, gid_listen, link, router_listen_cmp)

#define ROUTER_ANSWER_HOP_LIMIT 64
/* GIDs of each client the state file keeps for a restart. */
#define ROUTER_KEPT_GIDS 64u

struct router;
static void router_gid_adopt(void *arg, uint64_t client, unsigned port,
			     const uint8_t raw[16]);
static void router_client_rename(struct router *r, uint64_t from, uint64_t to);

/* MADs the router sends, queued under its lock, sent after it. */
struct router_out {
	enum conn_answer why;
	unsigned port;
	struct conn_path path;
	uint8_t mad[MAD_SIZE];
};

struct router {
	pthread_mutex_t lock;
	struct router_limits lim;
	const struct router_ops *ops;
	void *ops_arg;
	struct router_out *out;
	unsigned nout, out_cap;
	uint64_t out_lost;        /* queue could not grow */
	struct gid_tree gids;     /* ordered, for listings */
	struct gid_map gid_owner; /* (port, GID) -> client, for lookups */
	struct member_tree members;
	struct listen_tree listens;
	struct rclient_tree clients;
	struct conn_table *conns;
	unsigned ngids;
	int restored;            /* entries came from a previous daemon */
	uint64_t grace_until_ms; /* then unclaimed ones end; 0: done */
};

static void router_queue(void *arg, const struct conn_emit *e)
{
	struct router *r = arg;
	struct router_out *o;

	if (r->nout == r->out_cap) {
		unsigned cap = r->out_cap ? r->out_cap * 2 : 16;

		o = realloc(r->out, cap * sizeof(*o));
		if (o == NULL) {
			r->out_lost++;
			return;
		}
		r->out = o;
		r->out_cap = cap;
	}
	o = &r->out[r->nout++];
	o->why = e->why;
	o->port = e->port;
	o->path = *e->path;
	memcpy(o->mad, e->mad, MAD_SIZE);
}

/* Unlock, then send what was queued under the lock.  Only the thread
 * that queued can flush, as the lock is held in between. */
static void router_unlock_flush(struct router *r)
{
	const struct router_ops *ops;
	struct router_out *batch = r->out;
	unsigned i, n = r->nout;

	if (n == 0) {
		pthread_mutex_unlock(&r->lock);
		return;
	}
	r->out = NULL;
	r->nout = r->out_cap = 0;
	ops = r->ops;
	pthread_mutex_unlock(&r->lock);
	for (i = 0; i < n; i++)
		if (ops && ops->send)
			ops->send(r->ops_arg, batch[i].why, batch[i].port,
				  &batch[i].path, batch[i].mad);
	free(batch);
}

void router_stop_answering(struct router *r)
{
	pthread_mutex_lock(&r->lock);
	r->ops = NULL;
	conn_restore_detach(r->conns);
	pthread_mutex_unlock(&r->lock);
}

int router_restored(struct router *r, struct router_counts *out)
{
	struct conn_counts cc;

	pthread_mutex_lock(&r->lock);
	conn_table_counts(r->conns, &cc);
	pthread_mutex_unlock(&r->lock);
	memset(out, 0, sizeof(*out));
	out->comm_ids = cc.comm;
	out->sidr_ids = cc.sidr;
	return r->restored;
}

void router_resume_grace(struct router *r, uint64_t until_ms)
{
	pthread_mutex_lock(&r->lock);
	r->grace_until_ms = r->restored ? until_ms : 0;
	pthread_mutex_unlock(&r->lock);
}

uint64_t router_max_client_id(struct router *r)
{
	uint64_t max;

	pthread_mutex_lock(&r->lock);
	max = conn_restore_max_client(r->conns);
	pthread_mutex_unlock(&r->lock);
	return max;
}

int router_owner_add(struct router *r, uint64_t client, uint32_t uid,
		     const uint8_t token[16])
{
	int rc;

	pthread_mutex_lock(&r->lock);
	rc = conn_restore_owner_add(r->conns, client, uid, token);
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int router_owner_add_qemu(struct router *r, uint64_t client, uint32_t uid,
			  const uint8_t identity[16])
{
	int rc;

	pthread_mutex_lock(&r->lock);
	rc = conn_restore_owner_add_qemu(r->conns, client, uid, identity);
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int router_owner_claim_identity(struct router *r, uint32_t uid,
				const uint8_t identity[16], uint64_t new_client,
				uint64_t *old_client)
{
	int rc;

	pthread_mutex_lock(&r->lock);
	rc = conn_restore_claim_identity(r->conns, uid, identity, new_client,
					 old_client);
	if (rc == 0)
		router_client_rename(r, *old_client, new_client);
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int router_owner_claim(struct router *r, uint64_t old_client, uint32_t uid,
		       const uint8_t token[16], uint64_t new_client,
		       const uint8_t new_token[16])
{
	int rc;

	pthread_mutex_lock(&r->lock);
	rc = conn_restore_claim(r->conns, old_client, uid, token, new_client,
				new_token);
	if (rc == 0)
		router_client_rename(r, old_client, new_client);
	pthread_mutex_unlock(&r->lock);
	return rc;
}

struct router *router_new(const struct router_limits *lim,
			  uint32_t random_operand, const struct router_ops *ops,
			  void *ops_arg)
{
	struct conn_limits cl = {
		.max_per_client = lim->max_comm_ids_per_client,
		.handshake_ms = lim->handshake_ms,
		.timewait_ms = lim->timewait_ms,
		.max_peer_records_per_port = lim->max_peer_records_per_port,
		.max_peer_records_per_source = lim->max_peer_records_per_source,
		.max_timewait = lim->max_timewait,
	};
	struct router *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->ops = ops;
	r->ops_arg = ops_arg;
	if (lim->state_path) {
		char err[256] = "";

		/* Each owner's first GIDs are kept (a file's layout cannot
		 * follow the limit's reloads). */
		r->conns = conn_restore_open(&cl, random_operand, router_queue,
					     r, lim->state_path,
					     lim->max_entries, lim->max_owners,
					     lim->max_gids_per_client <
							     ROUTER_KEPT_GIDS
						     ? lim->max_gids_per_client
						     : ROUTER_KEPT_GIDS,
					     lim->port_ids, lim->nports,
					     &r->restored, err, sizeof(err));
		if (r->conns == NULL)
			log_warnx("%s: %s", lim->state_path, err);
		else if (err[0])
			log_warnx("connection state %s: %s", lim->state_path,
				  err);
	} else {
		r->conns = conn_table_new(&cl, random_operand, router_queue, r);
	}
	if (r->conns == NULL) {
		free(r);
		return NULL;
	}
	pthread_mutex_init(&r->lock, NULL);
	r->lim = *lim;
	RB_INIT(&r->gids);
	gid_map_init(&r->gid_owner, (uint64_t)random_operand * 0x9e3779b1u);
	RB_INIT(&r->clients);
	RB_INIT(&r->members);
	RB_INIT(&r->listens);
	/* The GIDs of the previous daemon's clients wait for them. */
	if (r->restored)
		conn_restore_gids_foreach(r->conns, router_gid_adopt, r);
	return r;
}

void router_set_limits(struct router *r, const struct router_limits *lim)
{
	struct conn_limits cl = {
		.max_per_client = lim->max_comm_ids_per_client,
		.max_peer_records_per_port = lim->max_peer_records_per_port,
		.max_peer_records_per_source = lim->max_peer_records_per_source,
		.max_timewait = lim->max_timewait,
	};

	pthread_mutex_lock(&r->lock);
	r->lim.max_gids_per_client = lim->max_gids_per_client;
	r->lim.max_comm_ids_per_client = lim->max_comm_ids_per_client;
	r->lim.max_peer_records_per_port = lim->max_peer_records_per_port;
	r->lim.max_peer_records_per_source = lim->max_peer_records_per_source;
	r->lim.max_timewait = lim->max_timewait;
	conn_table_set_limits(r->conns, &cl);
	pthread_mutex_unlock(&r->lock);
}

static struct router_client *router_client_get(struct router *r, uint64_t id,
					       int create)
{
	struct router_client key = { .id = id }, *c;

	c = RB_FIND(rclient_tree, &r->clients, &key);
	if (c || !create)
		return c;
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return NULL;
	c->id = id;
	LIST_INIT(&c->gids);
	LIST_INIT(&c->shares);
	RB_INSERT(rclient_tree, &r->clients, c);
	return c;
}

static void router_client_put_if_empty(struct router *r,
				       struct router_client *c)
{
	if (LIST_EMPTY(&c->gids) && LIST_EMPTY(&c->shares)) {
		RB_REMOVE(rclient_tree, &r->clients, c);
		free(c);
	}
}

void router_free(struct router *r)
{
	struct router_client *c, *next;

	if (r == NULL)
		return;
	RB_FOREACH_SAFE(c, rclient_tree, &r->clients, next)
		router_purge_client(r, c->id);
	conn_table_free(r->conns);
	gid_map_fini(&r->gid_owner);
	pthread_mutex_destroy(&r->lock);
	free(r->out);
	free(r);
}

/* Lock held: e leaves the GID indexes and its client's list. */
static void router_gid_drop(struct router *r, struct gid_entry *e)
{
	RB_REMOVE(gid_tree, &r->gids, e);
	gid_map_del(&r->gid_owner, e->port, &e->gid);
	LIST_REMOVE(e, client_link);
	free(e);
	r->ngids--;
}

/* Lock held: (port, gid), which nobody holds, becomes c's.  0 or
 * -ENOMEM. */
static int router_gid_insert(struct router *r, struct router_client *c,
			     unsigned port, const struct gid *gid)
{
	struct gid_entry *e = calloc(1, sizeof(*e));

	if (e == NULL || gid_map_add(&r->gid_owner, port, gid, c->id) < 0) {
		free(e);
		return -ENOMEM;
	}
	e->port = port;
	e->gid = *gid;
	e->client = c->id;
	RB_INSERT(gid_tree, &r->gids, e);
	LIST_INSERT_HEAD(&c->gids, e, client_link);
	c->ngids++;
	r->ngids++;
	return 0;
}

/* Lock held: client's share of (port, gid), or NULL. */
static struct gid_member *router_member_find(struct router *r, unsigned port,
					     const struct gid *gid,
					     uint64_t client)
{
	struct gid_entry ek = { .port = port, .gid = *gid };
	struct gid_member key = { .e = &ek, .client = client };

	return RB_FIND(member_tree, &r->members, &key);
}

/* Lock held: c's listen l goes. */
static void router_listen_drop(struct router *r, struct router_client *c,
			       struct gid_listen *l)
{
	LIST_REMOVE(l, member_link);
	RB_REMOVE(listen_tree, &r->listens, l);
	free(l);
	c->nlistens--;
}

/* Lock held: c's share m goes with its listens, and the shared GID with
 * its last member. */
static void router_member_drop(struct router *r, struct router_client *c,
			       struct gid_member *m)
{
	struct gid_entry *e = m->e;
	struct gid_listen *l;

	while ((l = LIST_FIRST(&m->listens)) != NULL)
		router_listen_drop(r, c, l);
	RB_REMOVE(member_tree, &r->members, m);
	LIST_REMOVE(m, client_link);
	free(m);
	c->ngids--;
	if (--e->members == 0) {
		RB_REMOVE(gid_tree, &r->gids, e);
		gid_map_del(&r->gid_owner, e->port, &e->gid);
		free(e);
		r->ngids--;
	}
}

/* Lock held: a GID's owner, ROUTER_GID_SHARED, or 0. */
static uint64_t router_gid_owner_locked(struct router *r, unsigned port,
					const struct gid *gid)
{
	uint64_t owner;

	return gid_map_get(&r->gid_owner, port, gid, &owner) == 0 ? owner : 0;
}

/* Lock held: may client send from (port, gid)?  Its own, or one it
 * shares. */
static int router_gid_usable_locked(struct router *r, unsigned port,
				    const struct gid *gid, uint64_t client)
{
	uint64_t owner = router_gid_owner_locked(r, port, gid);

	return owner != 0 &&
	       (owner == client ||
		(owner == ROUTER_GID_SHARED &&
		 router_member_find(r, port, gid, client) != NULL));
}

/* Lock held: a GID a restarted daemon took back from the state file,
 * held for its owner until it comes back or its grace time is over. */
static void router_gid_adopt(void *arg, uint64_t client, unsigned port,
			     const uint8_t raw[16])
{
	struct router *r = arg;
	struct gid_entry probe = { .port = port };
	struct router_client *c = router_client_get(r, client, 1);

	memcpy(probe.gid.raw, raw, 16);
	if (c == NULL)
		return;
	if (RB_FIND(gid_tree, &r->gids, &probe) != NULL ||
	    router_gid_insert(r, c, port, &probe.gid) < 0)
		router_client_put_if_empty(r, c);
}

/* Lock held: a resumed client takes back the GIDs held for it. */
static void router_client_rename(struct router *r, uint64_t from, uint64_t to)
{
	struct router_client *c = router_client_get(r, from, 0), *t;
	struct gid_entry *e;

	if (c == NULL || (t = router_client_get(r, to, 1)) == NULL)
		return;
	/* Shares are not kept for a restart (a resumed client shares and
	 * listens again): a record has none but to be safe. */
	while (!LIST_EMPTY(&c->shares))
		router_member_drop(r, c, LIST_FIRST(&c->shares));
	while ((e = LIST_FIRST(&c->gids)) != NULL) {
		LIST_REMOVE(e, client_link);
		c->ngids--;
		e->client = to;
		gid_map_del(&r->gid_owner, e->port, &e->gid);
		if (gid_map_add(&r->gid_owner, e->port, &e->gid, to) < 0) {
			RB_REMOVE(gid_tree, &r->gids, e);
			free(e);
			r->ngids--;
			continue;
		}
		LIST_INSERT_HEAD(&t->gids, e, client_link);
		t->ngids++;
	}
	RB_REMOVE(rclient_tree, &r->clients, c);
	free(c);
	router_client_put_if_empty(r, t);
}

int router_register_gid(struct router *r, unsigned port, const struct gid *gid,
			uint64_t client)
{
	struct gid_entry probe = { .port = port, .gid = *gid }, *e;
	struct router_client *c;
	int rc = 0;

	pthread_mutex_lock(&r->lock);
	e = RB_FIND(gid_tree, &r->gids, &probe);
	if (e) {
		rc = e->client == client ? 0 : -EEXIST;
		goto out;
	}
	c = router_client_get(r, client, 1);
	if (c == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	if (c->ngids >= r->lim.max_gids_per_client) {
		rc = -ENOSPC;
		router_client_put_if_empty(r, c);
		goto out;
	}
	rc = router_gid_insert(r, c, port, gid);
	if (rc) {
		router_client_put_if_empty(r, c);
		goto out;
	}
	/* Kept for a restart (beyond the file's slice it is not). */
	conn_restore_gid_note(r->conns, client, port, gid->raw, 1);
out:
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int router_share_gid(struct router *r, unsigned port, const struct gid *gid,
		     uint64_t client)
{
	struct gid_entry probe = { .port = port, .gid = *gid }, *e;
	struct router_client *c;
	struct gid_member *m;
	int rc = 0;

	pthread_mutex_lock(&r->lock);
	e = RB_FIND(gid_tree, &r->gids, &probe);
	if (e && e->client != ROUTER_GID_SHARED) {
		rc = -EEXIST;
		goto out;
	}
	if (e && router_member_find(r, port, gid, client))
		goto out;
	c = router_client_get(r, client, 1);
	if (c == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	if (c->ngids >= r->lim.max_gids_per_client) {
		rc = -ENOSPC;
		router_client_put_if_empty(r, c);
		goto out;
	}
	m = calloc(1, sizeof(*m));
	if (m && e == NULL) {
		e = calloc(1, sizeof(*e));
		if (e == NULL || gid_map_add(&r->gid_owner, port, gid,
					     ROUTER_GID_SHARED) < 0) {
			free(e);
			e = NULL;
		} else {
			*e = probe;
			e->client = ROUTER_GID_SHARED;
			RB_INSERT(gid_tree, &r->gids, e);
			r->ngids++;
		}
	}
	if (m == NULL || e == NULL) {
		free(m);
		router_client_put_if_empty(r, c);
		rc = -ENOMEM;
		goto out;
	}
	m->e = e;
	m->client = client;
	LIST_INIT(&m->listens);
	RB_INSERT(member_tree, &r->members, m);
	LIST_INSERT_HEAD(&c->shares, m, client_link);
	e->members++;
	c->ngids++;
out:
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int router_listen(struct router *r, unsigned port, const struct gid *gid,
		  uint64_t service_id, uint64_t client)
{
	struct gid_listen key = { .port = port,
				  .gid = *gid,
				  .service_id = service_id },
			  *l;
	struct router_client *c;
	struct gid_member *m;
	int rc = 0;

	pthread_mutex_lock(&r->lock);
	m = router_member_find(r, port, gid, client);
	c = router_client_get(r, client, 0);
	l = RB_FIND(listen_tree, &r->listens, &key);
	if (m == NULL || c == NULL) {
		rc = -ENOENT;
		goto out;
	}
	if (l) { /* listening already: its own, or another's */
		rc = l->client == client ? 0 : -EADDRINUSE;
		goto out;
	}
	if (c->nlistens >= ROUTER_LISTENS_PER_CLIENT) {
		rc = -ENOSPC;
		goto out;
	}
	l = malloc(sizeof(*l));
	if (l == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	*l = key;
	l->client = client;
	RB_INSERT(listen_tree, &r->listens, l);
	LIST_INSERT_HEAD(&m->listens, l, member_link);
	c->nlistens++;
out:
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int router_unlisten(struct router *r, unsigned port, const struct gid *gid,
		    uint64_t service_id, uint64_t client)
{
	struct gid_listen key = { .port = port,
				  .gid = *gid,
				  .service_id = service_id },
			  *l;
	struct router_client *c;
	int rc = 0;

	pthread_mutex_lock(&r->lock);
	l = RB_FIND(listen_tree, &r->listens, &key);
	c = router_client_get(r, client, 0);
	if (l == NULL || l->client != client || c == NULL)
		rc = -ENOENT;
	else
		router_listen_drop(r, c, l);
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int router_unregister_gid(struct router *r, unsigned port,
			  const struct gid *gid, uint64_t client,
			  int end_connections)
{
	struct gid_entry probe = { .port = port, .gid = *gid }, *e;
	struct router_client *c;
	int rc = 0;

	pthread_mutex_lock(&r->lock);
	e = RB_FIND(gid_tree, &r->gids, &probe);
	if (e && e->client == ROUTER_GID_SHARED) {
		struct gid_member *m = router_member_find(r, port, gid, client);

		c = m ? router_client_get(r, client, 0) : NULL;
		if (c == NULL) {
			rc = -EACCES;
		} else {
			router_member_drop(r, c, m);
			router_client_put_if_empty(r, c);
			if (end_connections)
				rc = conn_purge_gid(r->conns, client, port,
						    gid);
		}
	} else if (e == NULL) {
		rc = -ENOENT;
	} else if (e->client != client) {
		rc = -EACCES;
	} else {
		c = router_client_get(r, client, 0);
		conn_restore_gid_note(r->conns, client, port, gid->raw, 0);
		router_gid_drop(r, e);
		if (c) {
			c->ngids--;
			router_client_put_if_empty(r, c);
		}
		/* Its peers are told (DREQ, REJ, DREP) once unlocked. */
		if (end_connections)
			rc = conn_purge_gid(r->conns, client, port, gid);
	}
	router_unlock_flush(r);
	return rc;
}

int router_reset_gid(struct router *r, unsigned port, const struct gid *gid,
		     uint64_t client)
{
	struct gid_entry probe = { .port = port, .gid = *gid }, *e;
	int rc;

	pthread_mutex_lock(&r->lock);
	e = RB_FIND(gid_tree, &r->gids, &probe);
	if (e == NULL)
		rc = -ENOENT;
	else if (!router_gid_usable_locked(r, port, gid, client))
		rc = -EACCES;
	else /* its peers are told (DREQ, REJ, DREP) once unlocked */
		rc = conn_purge_gid(r->conns, client, port, gid);
	router_unlock_flush(r);
	return rc;
}

uint64_t router_gid_owner(struct router *r, unsigned port,
			  const struct gid *gid)
{
	uint64_t owner;

	pthread_mutex_lock(&r->lock);
	owner = router_gid_owner_locked(r, port, gid);
	pthread_mutex_unlock(&r->lock);
	return owner;
}

int router_destination(struct router *r, unsigned port, uint64_t client,
		       const uint8_t *mad, struct gid *dst)
{
	int rc;

	pthread_mutex_lock(&r->lock);
	rc = conn_destination(r->conns, client, port, mad, dst);
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int router_owns_gid(struct router *r, unsigned port, const struct gid *gid,
		    uint64_t client)
{
	int usable;

	pthread_mutex_lock(&r->lock);
	usable = router_gid_usable_locked(r, port, gid, client);
	pthread_mutex_unlock(&r->lock);
	return usable;
}

int router_outbound(struct router *r, unsigned port, uint64_t client,
		    const struct router_claims *claims, unsigned *not_owned,
		    uint8_t *mad, const struct conn_path *path, uint64_t now_ms,
		    unsigned max_conns, uint8_t *gid_type)
{
	unsigned i, j;
	int rc;

	/* The ownership checks and the send's state change under one
	 * lock: a MAD takes the router's lock once on its way out. */
	pthread_mutex_lock(&r->lock);
	for (i = 0; claims && i < claims->n; i++) {
		/* A REQ names its source GID up to three times. */
		for (j = 0;
		     j < i && !gid_equal(&claims->gid[j], &claims->gid[i]); j++)
			;
		if (j == i &&
		    !router_gid_usable_locked(r, port, &claims->gid[i],
					      client)) {
			pthread_mutex_unlock(&r->lock);
			*not_owned = i;
			return -EADDRNOTAVAIL;
		}
	}
	rc = conn_outbound(r->conns, client, port, mad, path, now_ms,
			   max_conns);
	if (rc == 0 && gid_type)
		*gid_type = conn_reply_gid_type(r->conns, port, mad);
	router_unlock_flush(r);
	return rc;
}

void router_path_from_addr(const struct proto_mad_addr *a, int inbound,
			   struct conn_path *out)
{
	memset(out, 0, sizeof(*out));
	memcpy(out->local_gid.raw, a->local_gid, 16);
	memcpy(out->peer_gid.raw, a->remote_gid, 16);
	out->pkey_index = a->pkey_index;
	out->grh = (a->flags & PROTO_MAD_F_GRH) ? 1 : 0;
	out->sl = a->sl;
	out->traffic_class = a->traffic_class;
	out->flow_label = a->flow_label;
	/* An answer starts its own hop count. */
	out->hop_limit = inbound ? ROUTER_ANSWER_HOP_LIMIT : a->hop_limit;
}

static enum router_verdict router_route_by_gid(struct router *r, unsigned port,
					       const struct gid *gid,
					       const uint8_t *mad,
					       uint64_t *client)
{
	struct gid_listen key = { .port = port, .gid = *gid }, *l;

	if (gid_map_get(&r->gid_owner, port, gid, client) < 0)
		return ROUTER_UNKNOWN_GID;
	if (*client != ROUTER_GID_SHARED)
		return ROUTER_DELIVER;
	/* A shared GID's: the member listening on its service ID, as
	 * cm.c's cm_find_listen() finds a listener. */
	key.service_id = cm_field_get(mad, cm_mad_attr_id(mad) == CM_ATTR_REQ
						   ? CM_REQ_SERVICE_ID
						   : CM_SIDR_REQ_SERVICE_ID);
	l = RB_FIND(listen_tree, &r->listens, &key);
	*client = l ? l->client : 0;
	return l ? ROUTER_DELIVER : ROUTER_NO_LISTENER;
}

/* A REQ or SIDR_REQ for a GID of this port that no client owns: answer
 * as the kernel CM of a host without a listener (cm_issue_rej). */
static enum router_verdict router_answer_no_listener(
	struct router *r, unsigned port, const uint8_t *mad,
	const struct conn_path *path)
{
	struct conn_emit e = { .port = port, .path = path };
	uint8_t out[MAD_SIZE];
	uint32_t tid = conn_answer_tid(r->conns, mad);

	if (r->ops == NULL || r->ops->gid_in_table == NULL ||
	    !r->ops->gid_in_table(r->ops_arg, port, &path->local_gid))
		return ROUTER_UNKNOWN_GID;
	if (cm_mad_attr_id(mad) == CM_ATTR_REQ) {
		cm_build_rej(out, tid, 0, cm_mad_sender_id(mad),
			     CM_MSG_RESPONSE_REQ,
			     CM_REJ_REASON_INVALID_SERVICE_ID, NULL, 0);
		e.why = CONN_ANS_REJ_NO_LISTENER;
	} else {
		cm_build_sidr_rep(out, tid, cm_mad_sender_id(mad),
				  CM_SIDR_STATUS_UNSUPPORTED,
				  cm_field_get(mad, CM_SIDR_REQ_SERVICE_ID));
		e.why = CONN_ANS_SIDR_NO_LISTENER;
	}
	e.mad = out;
	router_queue(r, &e);
	return ROUTER_NO_LISTENER;
}

/* What the table's refusal (conn_inbound(), conn.h) means for the MAD. */
static enum router_verdict router_verdict_of(int rc, uint16_t attr)
{
	switch (rc) {
	case -EBADR: return ROUTER_ZERO_COMM_ID;
	case -EPERM: return ROUTER_PEER_MISMATCH;
	case -EPROTO: return ROUTER_WRONG_STATE;
	case -ESTALE: return ROUTER_STALE_CONN;
	case -EHOSTDOWN: return ROUTER_OWNER_AWAY;
	default:
		return attr == CM_ATTR_SIDR_REP ? ROUTER_UNKNOWN_REQUEST_ID
						: ROUTER_UNKNOWN_COMM_ID;
	}
}

enum router_verdict router_inbound(struct router *r, unsigned port,
				   uint8_t *mad, size_t len,
				   const struct conn_path *wire,
				   uint64_t now_ms, uint64_t *client,
				   uint32_t *noted)
{
	struct conn_path path = *wire;
	enum router_verdict v;
	uint16_t attr;
	int rc;

	rc = cm_mad_validate(mad, len);
	if (rc == -EMSGSIZE)
		return ROUTER_BAD_SIZE;
	if (rc)
		return ROUTER_NOT_CM;
	attr = cm_mad_attr_id(mad);

	pthread_mutex_lock(&r->lock);
	switch (attr) {
	case CM_ATTR_REQ:
	case CM_ATTR_SIDR_REQ:
		/* The receiver's own GID: the REQ's Primary Remote Port GID,
		 * or the destination in rdma_cm's header of a SIDR_REQ. */
		if (attr == CM_ATTR_REQ)
			cm_get_gid(mad, CM_REQ_OFF_PRIMARY_REMOTE_GID,
				   &path.local_gid);
		else if (cm_sidr_req_dst_gid(mad, &path.local_gid)) {
			v = ROUTER_NO_CMA_HDR;
			break;
		}
		v = router_route_by_gid(r, port, &path.local_gid, mad, client);
		if (v != ROUTER_DELIVER)
			v = router_answer_no_listener(r, port, mad, &path);
		else if (conn_restore_owner_away(r->conns, *client))
			/* Its owner has not come back since the restart: not
			 * answered for it (the peer retransmits). */
			v = ROUTER_OWNER_AWAY;
		else if (attr == CM_ATTR_REQ &&
			 conn_note_req(r->conns, *client, port, mad, &path,
				       now_ms) == -ESTALE)
			v = ROUTER_STALE_CONN;
		else if (attr == CM_ATTR_SIDR_REQ)
			conn_note_sidr_req(r->conns, *client, port, mad, &path,
					   now_ms);
		/* A record made for this one: its token, taken either way
		 * so that no later call finds it. */
		if (noted)
			*noted = conn_take_noted(r->conns);
		else
			conn_take_noted(r->conns);
		break;
	case CM_ATTR_MRA:
	case CM_ATTR_REJ:
	case CM_ATTR_REP:
	case CM_ATTR_RTU:
	case CM_ATTR_DREQ:
	case CM_ATTR_DREP:
	case CM_ATTR_LAP:
	case CM_ATTR_APR:
	case CM_ATTR_SIDR_REP:
		rc = conn_inbound(r->conns, port, mad, &path, now_ms, client);
		v = rc ? router_verdict_of(rc, attr) : ROUTER_DELIVER;
		break;
	default: v = ROUTER_UNSUPPORTED_ATTR; break;
	}
	router_unlock_flush(r);
	return v;
}

void router_forget_noted(struct router *r, uint32_t noted, uint64_t client)
{
	if (noted == 0)
		return;
	pthread_mutex_lock(&r->lock);
	conn_forget_noted(r->conns, noted, client);
	router_unlock_flush(r);
}

/* Lock held: a client's GIDs go, and its record with them. */
static void router_client_drop_gids(struct router *r, struct router_client *c)
{
	struct gid_entry *g;

	if (c == NULL)
		return;
	while ((g = LIST_FIRST(&c->gids)) != NULL) {
		c->ngids--;
		router_gid_drop(r, g);
	}
	while (!LIST_EMPTY(&c->shares))
		router_member_drop(r, c, LIST_FIRST(&c->shares));
	RB_REMOVE(rclient_tree, &r->clients, c);
	free(c);
}

void router_purge_client(struct router *r, uint64_t client)
{
	struct router_client *c;
	struct gid_entry *g;

	pthread_mutex_lock(&r->lock);
	c = router_client_get(r, client, 0);
	/* Its GIDs leave the state file while its record is there (not
	 * when the daemon is going: conn_restore_gid_note() knows). */
	if (c)
		LIST_FOREACH(g, &c->gids, client_link)
			conn_restore_gid_note(r->conns, client, g->port,
					      g->gid.raw, 0);
	/* The client's peers are told (DREQ, REJ, DREP) once unlocked. */
	conn_purge_client(r->conns, client);
	router_client_drop_gids(r, c);
	router_unlock_flush(r);
}

/* Entries expire in small batches, the lock let go between them: at
 * thousands of connections a second a tick has thousands to remove, and
 * a MAD must not wait behind all of them. */
#define ROUTER_EXPIRE_BATCH 128

unsigned router_expire(struct router *r, uint64_t now_ms)
{
	unsigned n, total = 0;

	/* Clients of the previous daemon that did not come back in time:
	 * their peers are told, as if they had gone now. */
	pthread_mutex_lock(&r->lock);
	if (r->grace_until_ms && now_ms >= r->grace_until_ms) {
		struct router_client *c, *next;

		r->grace_until_ms = 0;
		/* The GIDs held for them are free again. */
		RB_FOREACH_SAFE(c, rclient_tree, &r->clients, next)
			if (conn_restore_owner_away(r->conns, c->id))
				router_client_drop_gids(r, c);
		n = conn_restore_purge_unclaimed(r->conns);
		if (n)
			log_info(
				"%u client(s) of the previous daemon did not come back; their connections are ended",
				n);
		router_unlock_flush(r);
	} else {
		pthread_mutex_unlock(&r->lock);
	}

	do {
		pthread_mutex_lock(&r->lock);
		n = conn_expire_some(r->conns, now_ms, ROUTER_EXPIRE_BATCH);
		pthread_mutex_unlock(&r->lock);
		total += n;
	} while (n == ROUTER_EXPIRE_BATCH);
	return total;
}

static void router_fill_counts(struct router_counts *out,
			       const struct conn_counts *cc)
{
	out->comm_ids = cc->comm;
	out->sidr_ids = cc->sidr;
	out->draining = cc->by_state[CONN_TIMEWAIT];
	out->handshake = cc->by_state[CONN_REQ_SENT] +
			 cc->by_state[CONN_REQ_RCVD] +
			 cc->by_state[CONN_REP_RCVD] +
			 cc->by_state[CONN_SIDR_REQ_SENT];
	/* A REP sent is a connection the guest may already use. */
	out->established = cc->by_state[CONN_ESTABLISHED] +
			   cc->by_state[CONN_REP_SENT];
	out->disconnecting = cc->by_state[CONN_DREQ_SENT] +
			     cc->by_state[CONN_DREQ_RCVD];
	out->peer_records = cc->peer_records;
	out->peer_records_refused = cc->peer_records_refused;
	out->peer_records_evicted = cc->peer_records_evicted;
	out->timewait_evicted = cc->timewait_evicted;
}

void router_counts(struct router *r, struct router_counts *out)
{
	struct conn_counts cc;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&r->lock);
	out->gids = r->ngids;
	conn_table_counts(r->conns, &cc);
	router_fill_counts(out, &cc);
	pthread_mutex_unlock(&r->lock);
}

void router_client_counts(struct router *r, uint64_t client,
			  struct router_counts *out)
{
	struct router_client *c;

	struct conn_counts cc;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&r->lock);
	c = router_client_get(r, client, 0);
	conn_table_client_counts(r->conns, client, &cc);
	router_fill_counts(out, &cc);
	if (c) {
		out->gids = c->ngids;
		out->listens = c->nlistens;
	}
	pthread_mutex_unlock(&r->lock);
}

static json_t *router_conn_view_json(const struct conn_view *v)
{
	char buf[GID_STRLEN];
	json_t *o;

	o = json_pack("{s:s, s:s, s:i, s:I, s:I}", "kind",
		      v->sidr ? "sidr" : "comm", "state",
		      conn_state_name(v->state), "port", (int)v->port,
		      "guest_id", (json_int_t)v->guest_id, "host_id",
		      (json_int_t)v->host_id);
	if (v->has_peer)
		json_object_set_new(o, "peer_id", json_integer(v->peer_id));
	json_object_set_new(o, "peer_gid",
			    json_string(gid_format(&v->peer_gid, buf)));
	json_object_set_new(o, "expires_in_ms",
			    v->expires_in_ms < 0
				    ? json_null()
				    : json_integer(v->expires_in_ms));
	return o;
}

struct conn_views {
	struct conn_view *v;
	unsigned n;
};

static void router_conn_view_copy(void *arg, const struct conn_view *v)
{
	struct conn_views *cv = arg;

	cv->v[cv->n++] = *v;
}

json_t *router_conns_json(struct router *r, uint64_t client, unsigned offset,
			  unsigned max, uint64_t now_ms)
{
	struct conn_views cv = { .v = calloc(max ? max : 1, sizeof(*cv.v)) };
	json_t *arr = json_array();
	unsigned i;

	if (cv.v == NULL || arr == NULL) {
		free(cv.v);
		json_decref(arr);
		return NULL;
	}
	/* Copied under the lock, formatted after it: routing waits for a
	 * memcpy per entry, not for JSON. */
	pthread_mutex_lock(&r->lock);
	conn_table_client_foreach(r->conns, client, offset, max, now_ms,
				  router_conn_view_copy, &cv);
	pthread_mutex_unlock(&r->lock);
	for (i = 0; i < cv.n; i++)
		json_array_append_new(arr, router_conn_view_json(&cv.v[i]));
	free(cv.v);
	return arr;
}

void router_gids_foreach(struct router *r, uint64_t client,
			 void (*fn)(void *arg, unsigned port,
				    const struct gid *gid, uint64_t owner),
			 void *arg)
{
	struct gid_entry *e;

	pthread_mutex_lock(&r->lock);
	RB_FOREACH(e, gid_tree, &r->gids) {
		if (client == 0 || e->client == client)
			fn(arg, e->port, &e->gid, e->client);
		else if (e->client == ROUTER_GID_SHARED &&
			 router_member_find(r, e->port, &e->gid, client))
			fn(arg, e->port, &e->gid, client);
	}
	pthread_mutex_unlock(&r->lock);
}

static void router_gid_json(void *arg, unsigned port, const struct gid *gid,
			    uint64_t owner)
{
	char buf[GID_STRLEN];

	json_array_append_new(arg,
			      json_pack("{s:i, s:s, s:I}", "port", (int)port,
					"gid", gid_format(gid, buf), "client",
					(json_int_t)owner));
}

json_t *router_gids_json(struct router *r, uint64_t client)
{
	json_t *arr = json_array();

	router_gids_foreach(r, client, router_gid_json, arr);
	return arr;
}
