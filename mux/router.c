// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The router: who owns which GID, which comm IDs and SIDR request IDs
 * belong to which client, and so who gets an inbound CM MAD.  It does no
 * I/O; callers pass the time in, so tests drive it with a fake clock.
 *
 * Entries that end (DREP, REJ, SIDR_REP) are kept for a drain period so
 * that retransmissions still find their owner.  All drains have the same
 * length, so the drain list is FIFO and expiry costs O(1) per entry.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mux.h"
#include "../common/wire.h"

struct gid_entry {
	RB_ENTRY(gid_entry) link;
	LIST_ENTRY(gid_entry) client_link;
	unsigned port;
	struct gid gid;
	uint64_t client;
};

enum route_kind { ROUTE_COMM, ROUTE_SIDR };
enum route_state { ROUTE_LIVE, ROUTE_DRAINING };

struct route_entry {
	RB_ENTRY(route_entry) link;
	LIST_ENTRY(route_entry) client_link;
	TAILQ_ENTRY(route_entry) drain_link;
	enum route_kind kind;
	enum route_state state;
	unsigned port;
	uint32_t key;
	uint64_t client;
	uint64_t drain_deadline_ms;
};

struct router_client {
	RB_ENTRY(router_client) link;
	uint64_t id;
	unsigned ngids, ncomm, nsidr;
	LIST_HEAD(, gid_entry) gids;
	LIST_HEAD(, route_entry) routes;
};

static int gid_entry_cmp(struct gid_entry *a, struct gid_entry *b)
{
	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	return gid_cmp(&a->gid, &b->gid);
}

static int route_entry_cmp(struct route_entry *a, struct route_entry *b)
{
	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	if (a->key != b->key)
		return a->key < b->key ? -1 : 1;
	return 0;
}

static int router_client_cmp(struct router_client *a, struct router_client *b)
{
	return a->id < b->id ? -1 : a->id > b->id;
}

RB_HEAD(gid_tree, gid_entry);
RB_HEAD(route_tree, route_entry);
RB_HEAD(rclient_tree, router_client);
TREE_GENERATE_STATIC(gid_tree, gid_entry, link, gid_entry_cmp)
TREE_GENERATE_STATIC(route_tree, route_entry, link, route_entry_cmp)
TREE_GENERATE_STATIC(rclient_tree, router_client, link, router_client_cmp)

struct router {
	pthread_mutex_t lock;
	struct router_limits lim;
	struct gid_tree gids;
	struct route_tree comm;
	struct route_tree sidr;
	struct rclient_tree clients;
	TAILQ_HEAD(, route_entry) draining;
	unsigned ngids, ncomm, nsidr, ndraining;
};

struct router *router_new(const struct router_limits *lim)
{
	struct router *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	pthread_mutex_init(&r->lock, NULL);
	r->lim = *lim;
	RB_INIT(&r->gids);
	RB_INIT(&r->comm);
	RB_INIT(&r->sidr);
	RB_INIT(&r->clients);
	TAILQ_INIT(&r->draining);
	return r;
}

static struct router_client *client_get(struct router *r, uint64_t id,
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
	LIST_INIT(&c->routes);
	RB_INSERT(rclient_tree, &r->clients, c);
	return c;
}

static void client_put_if_empty(struct router *r, struct router_client *c)
{
	if (LIST_EMPTY(&c->gids) && LIST_EMPTY(&c->routes)) {
		RB_REMOVE(rclient_tree, &r->clients, c);
		free(c);
	}
}

static struct route_tree *route_tree_of(struct router *r, enum route_kind k)
{
	return k == ROUTE_COMM ? &r->comm : &r->sidr;
}

static void route_remove(struct router *r, struct route_entry *e)
{
	struct router_client *c = client_get(r, e->client, 0);

	RB_REMOVE(route_tree, route_tree_of(r, e->kind), e);
	LIST_REMOVE(e, client_link);
	if (e->state == ROUTE_DRAINING) {
		TAILQ_REMOVE(&r->draining, e, drain_link);
		r->ndraining--;
	}
	if (e->kind == ROUTE_COMM) {
		r->ncomm--;
		if (c)
			c->ncomm--;
	} else {
		r->nsidr--;
		if (c)
			c->nsidr--;
	}
	free(e);
	if (c)
		client_put_if_empty(r, c);
}

static void route_drain(struct router *r, struct route_entry *e,
			uint64_t now_ms)
{
	if (e->state == ROUTE_DRAINING)
		TAILQ_REMOVE(&r->draining, e, drain_link);
	else
		r->ndraining++;
	e->state = ROUTE_DRAINING;
	e->drain_deadline_ms = now_ms + r->lim.timewait_ms;
	TAILQ_INSERT_TAIL(&r->draining, e, drain_link);
}

static void route_revive(struct router *r, struct route_entry *e)
{
	if (e->state == ROUTE_DRAINING) {
		TAILQ_REMOVE(&r->draining, e, drain_link);
		r->ndraining--;
		e->state = ROUTE_LIVE;
	}
}

static struct route_entry *route_find(struct router *r, enum route_kind k,
				      unsigned port, uint32_t key)
{
	struct route_entry probe = { .port = port, .key = key };

	return RB_FIND(route_tree, route_tree_of(r, k), &probe);
}

void router_free(struct router *r)
{
	struct router_client *c, *next;

	if (r == NULL)
		return;
	RB_FOREACH_SAFE(c, rclient_tree, &r->clients, next)
		router_purge_client(r, c->id);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

int router_register_gid(struct router *r, unsigned port,
			const struct gid *gid, uint64_t client)
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
	c = client_get(r, client, 1);
	if (c == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	if (c->ngids >= r->lim.max_gids_per_client) {
		rc = -ENOSPC;
		client_put_if_empty(r, c);
		goto out;
	}
	e = calloc(1, sizeof(*e));
	if (e == NULL) {
		rc = -ENOMEM;
		client_put_if_empty(r, c);
		goto out;
	}
	*e = probe;
	e->client = client;
	RB_INSERT(gid_tree, &r->gids, e);
	LIST_INSERT_HEAD(&c->gids, e, client_link);
	c->ngids++;
	r->ngids++;
out:
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int router_unregister_gid(struct router *r, unsigned port,
			  const struct gid *gid, uint64_t client)
{
	struct gid_entry probe = { .port = port, .gid = *gid }, *e;
	struct router_client *c;
	int rc = 0;

	pthread_mutex_lock(&r->lock);
	e = RB_FIND(gid_tree, &r->gids, &probe);
	if (e == NULL) {
		rc = -ENOENT;
	} else if (e->client != client) {
		rc = -EACCES;
	} else {
		c = client_get(r, client, 0);
		RB_REMOVE(gid_tree, &r->gids, e);
		LIST_REMOVE(e, client_link);
		free(e);
		r->ngids--;
		if (c) {
			c->ngids--;
			client_put_if_empty(r, c);
		}
	}
	pthread_mutex_unlock(&r->lock);
	return rc;
}

uint64_t router_gid_owner(struct router *r, unsigned port,
			  const struct gid *gid)
{
	struct gid_entry probe = { .port = port, .gid = *gid }, *e;
	uint64_t owner;

	pthread_mutex_lock(&r->lock);
	e = RB_FIND(gid_tree, &r->gids, &probe);
	owner = e ? e->client : 0;
	pthread_mutex_unlock(&r->lock);
	return owner;
}

int router_owns_gid(struct router *r, unsigned port, const struct gid *gid,
		    uint64_t client)
{
	return router_gid_owner(r, port, gid) == client;
}

/* Claim (kind, port, key) for client: existing own entries are revived. */
static int route_claim(struct router *r, enum route_kind kind, unsigned port,
		       uint32_t key, uint64_t client)
{
	struct route_entry *e = route_find(r, kind, port, key);
	struct router_client *c;

	if (e) {
		if (e->client != client)
			return -EADDRINUSE;
		route_revive(r, e);
		return 0;
	}
	c = client_get(r, client, 1);
	if (c == NULL)
		return -ENOMEM;
	if (c->ncomm + c->nsidr >= r->lim.max_comm_ids_per_client) {
		client_put_if_empty(r, c);
		return -ENOSPC;
	}
	e = calloc(1, sizeof(*e));
	if (e == NULL) {
		client_put_if_empty(r, c);
		return -ENOMEM;
	}
	e->kind = kind;
	e->state = ROUTE_LIVE;
	e->port = port;
	e->key = key;
	e->client = client;
	RB_INSERT(route_tree, route_tree_of(r, kind), e);
	LIST_INSERT_HEAD(&c->routes, e, client_link);
	if (kind == ROUTE_COMM) {
		c->ncomm++;
		r->ncomm++;
	} else {
		c->nsidr++;
		r->nsidr++;
	}
	return 0;
}

int router_outbound(struct router *r, unsigned port, uint64_t client,
		    const uint8_t *mad, uint64_t now_ms)
{
	uint16_t attr = cm_mad_attr_id(mad);
	struct route_entry *e;
	uint32_t local = 0;
	int rc = 0;

	pthread_mutex_lock(&r->lock);
	switch (attr) {
	case CM_ATTR_REQ:
	case CM_ATTR_REP:
	case CM_ATTR_MRA:
		/* These start (or, for MRA, may precede) a connection whose
		 * replies will name our Local Comm ID as their Remote one. */
		cm_mad_local_comm_id(mad, &local);
		if (local == 0) {
			rc = -EINVAL;
			break;
		}
		rc = route_claim(r, ROUTE_COMM, port, local, client);
		break;
	case CM_ATTR_SIDR_REQ:
		local = (uint32_t)cm_field_get(mad, CM_SIDR_REQ_REQUEST_ID);
		rc = route_claim(r, ROUTE_SIDR, port, local, client);
		break;
	default:
		if (!cm_mad_local_comm_id(mad, &local) || local == 0)
			break;
		e = route_find(r, ROUTE_COMM, port, local);
		if (e && e->client != client) {
			rc = -EADDRINUSE;
			break;
		}
		if (e && (attr == CM_ATTR_DREP || attr == CM_ATTR_REJ))
			route_drain(r, e, now_ms);
		break;
	}
	pthread_mutex_unlock(&r->lock);
	return rc;
}

static int route_by_gid(struct router *r, unsigned port,
			const struct gid *gid, uint64_t *client)
{
	struct gid_entry probe = { .port = port, .gid = *gid }, *e;

	e = RB_FIND(gid_tree, &r->gids, &probe);
	if (e == NULL)
		return ROUTER_DROP(DROP_UNKNOWN_GID);
	*client = e->client;
	return 0;
}

int router_inbound(struct router *r, unsigned port, const uint8_t *mad,
		   size_t len, uint64_t now_ms, uint64_t *client)
{
	struct route_entry *e;
	uint16_t attr;
	uint32_t remote;
	struct gid gid;
	int rc;

	rc = cm_mad_validate(mad, len);
	if (rc == -EMSGSIZE)
		return ROUTER_DROP(DROP_BAD_SIZE);
	if (rc)
		return ROUTER_DROP(DROP_NOT_CM);
	attr = cm_mad_attr_id(mad);

	pthread_mutex_lock(&r->lock);
	switch (attr) {
	case CM_ATTR_REQ:
		cm_get_gid(mad, CM_REQ_OFF_PRIMARY_REMOTE_GID, &gid);
		rc = route_by_gid(r, port, &gid, client);
		break;
	case CM_ATTR_SIDR_REQ:
		if (cm_sidr_req_dst_gid(mad, &gid)) {
			rc = ROUTER_DROP(DROP_NO_CMA_HDR);
			break;
		}
		rc = route_by_gid(r, port, &gid, client);
		break;
	case CM_ATTR_SIDR_REP:
		e = route_find(r, ROUTE_SIDR, port,
			       (uint32_t)cm_field_get(mad, CM_SIDR_REP_REQUEST_ID));
		if (e == NULL) {
			rc = ROUTER_DROP(DROP_UNKNOWN_REQUEST_ID);
			break;
		}
		*client = e->client;
		route_drain(r, e, now_ms);
		rc = 0;
		break;
	case CM_ATTR_MRA: case CM_ATTR_REJ: case CM_ATTR_REP: case CM_ATTR_RTU:
	case CM_ATTR_DREQ: case CM_ATTR_DREP: case CM_ATTR_LAP: case CM_ATTR_APR:
		cm_mad_remote_comm_id(mad, &remote);
		if (remote == 0) {
			rc = ROUTER_DROP(DROP_ZERO_COMM_ID);
			break;
		}
		e = route_find(r, ROUTE_COMM, port, remote);
		if (e == NULL) {
			rc = ROUTER_DROP(DROP_UNKNOWN_COMM_ID);
			break;
		}
		*client = e->client;
		if (attr == CM_ATTR_DREP || attr == CM_ATTR_REJ)
			route_drain(r, e, now_ms);
		rc = 0;
		break;
	default:
		rc = ROUTER_DROP(DROP_UNSUPPORTED_ATTR);
		break;
	}
	pthread_mutex_unlock(&r->lock);
	return rc;
}

void router_purge_client(struct router *r, uint64_t client)
{
	struct router_client *c;
	struct gid_entry *g;
	struct route_entry *e;

	pthread_mutex_lock(&r->lock);
	c = client_get(r, client, 0);
	if (c == NULL)
		goto out;
	while ((g = LIST_FIRST(&c->gids)) != NULL) {
		RB_REMOVE(gid_tree, &r->gids, g);
		LIST_REMOVE(g, client_link);
		free(g);
		r->ngids--;
		c->ngids--;
	}
	/* route_remove frees c with the last entry; keep one step ahead. */
	while ((e = LIST_FIRST(&c->routes)) != NULL) {
		int last = LIST_NEXT(e, client_link) == NULL;

		route_remove(r, e);
		if (last)
			goto out;
	}
	client_put_if_empty(r, c);
out:
	pthread_mutex_unlock(&r->lock);
}

unsigned router_expire(struct router *r, uint64_t now_ms)
{
	struct route_entry *e;
	unsigned n = 0;

	pthread_mutex_lock(&r->lock);
	while ((e = TAILQ_FIRST(&r->draining)) != NULL &&
	       e->drain_deadline_ms <= now_ms) {
		route_remove(r, e);
		n++;
	}
	pthread_mutex_unlock(&r->lock);
	return n;
}

void router_counts(struct router *r, struct router_counts *out)
{
	pthread_mutex_lock(&r->lock);
	out->gids = r->ngids;
	out->comm_ids = r->ncomm;
	out->sidr_ids = r->nsidr;
	out->draining = r->ndraining;
	pthread_mutex_unlock(&r->lock);
}

void router_client_counts(struct router *r, uint64_t client,
			  struct router_counts *out)
{
	struct router_client *c;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&r->lock);
	c = client_get(r, client, 0);
	if (c) {
		out->gids = c->ngids;
		out->comm_ids = c->ncomm;
		out->sidr_ids = c->nsidr;
	}
	pthread_mutex_unlock(&r->lock);
}

json_t *router_gids_json(struct router *r, uint64_t client)
{
	json_t *arr = json_array();
	struct gid_entry *e;
	char buf[GID_STRLEN];

	pthread_mutex_lock(&r->lock);
	RB_FOREACH(e, gid_tree, &r->gids) {
		if (client && e->client != client)
			continue;
		json_array_append_new(arr, json_pack("{s:i, s:s, s:I}",
			"port", (int)e->port, "gid", gid_format(&e->gid, buf),
			"client", (json_int_t)e->client));
	}
	pthread_mutex_unlock(&r->lock);
	return arr;
}
