// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The router: who owns which GID, and so who gets an inbound CM MAD: REQ
 * and SIDR_REQ by destination GID, everything else through the connection
 * table (conn_table.c), which translates comm IDs per client.  It does no
 * I/O; callers pass the time in, so tests drive it with a fake clock.
 * One mutex serialises it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mux.h"
#include "conn_table.h"
#include "../common/wire.h"

struct gid_entry {
	RB_ENTRY(gid_entry) link;
	LIST_ENTRY(gid_entry) client_link;
	unsigned port;
	struct gid gid;
	uint64_t client;
};

struct router_client {
	RB_ENTRY(router_client) link;
	uint64_t id;
	unsigned ngids;
	LIST_HEAD(, gid_entry) gids;
};

static int gid_entry_cmp(struct gid_entry *a, struct gid_entry *b)
{
	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	return gid_cmp(&a->gid, &b->gid);
}

static int router_client_cmp(struct router_client *a, struct router_client *b)
{
	return a->id < b->id ? -1 : a->id > b->id;
}

RB_HEAD(gid_tree, gid_entry);
RB_HEAD(rclient_tree, router_client);
TREE_GENERATE_STATIC(gid_tree, gid_entry, link, gid_entry_cmp)
TREE_GENERATE_STATIC(rclient_tree, router_client, link, router_client_cmp)

struct router {
	pthread_mutex_t lock;
	struct router_limits lim;
	struct gid_tree gids;
	struct rclient_tree clients;
	struct conn_table *conns;
	unsigned ngids;
};

struct router *router_new(const struct router_limits *lim,
			  uint32_t random_operand)
{
	struct conn_limits cl = {
		.max_per_client = lim->max_comm_ids_per_client,
		.handshake_ms = lim->handshake_ms,
		.timewait_ms = lim->timewait_ms,
	};
	struct router *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->conns = conn_table_new(&cl, random_operand);
	if (r->conns == NULL) {
		free(r);
		return NULL;
	}
	pthread_mutex_init(&r->lock, NULL);
	r->lim = *lim;
	RB_INIT(&r->gids);
	RB_INIT(&r->clients);
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
	RB_INSERT(rclient_tree, &r->clients, c);
	return c;
}

static void client_put_if_empty(struct router *r, struct router_client *c)
{
	if (LIST_EMPTY(&c->gids)) {
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

int router_outbound(struct router *r, unsigned port, uint64_t client,
		    uint8_t *mad, const struct gid *dst, uint64_t now_ms,
		    unsigned max_conns)
{
	int rc;

	pthread_mutex_lock(&r->lock);
	rc = conn_outbound(r->conns, client, port, mad, dst, now_ms, max_conns);
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

int router_inbound(struct router *r, unsigned port, uint8_t *mad, size_t len,
		   const struct gid *src, uint64_t now_ms, uint64_t *client)
{
	uint16_t attr;
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
		/* Remembered so that a REJ without our comm ID (the peer's
		 * timeout REJ) still finds this client; a full table only
		 * loses that, not the REQ. */
		if (rc == 0)
			conn_note_req(r->conns, *client, port, mad, src, now_ms);
		break;
	case CM_ATTR_SIDR_REQ:
		if (cm_sidr_req_dst_gid(mad, &gid)) {
			rc = ROUTER_DROP(DROP_NO_CMA_HDR);
			break;
		}
		rc = route_by_gid(r, port, &gid, client);
		break;
	case CM_ATTR_MRA: case CM_ATTR_REJ: case CM_ATTR_REP: case CM_ATTR_RTU:
	case CM_ATTR_DREQ: case CM_ATTR_DREP: case CM_ATTR_LAP: case CM_ATTR_APR:
	case CM_ATTR_SIDR_REP:
		rc = conn_inbound(r->conns, port, mad, src, now_ms, client);
		if (rc == -EBADR)
			rc = ROUTER_DROP(DROP_ZERO_COMM_ID);
		else if (rc == -ENOENT)
			rc = ROUTER_DROP(attr == CM_ATTR_SIDR_REP ?
					 DROP_UNKNOWN_REQUEST_ID : DROP_UNKNOWN_COMM_ID);
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

	pthread_mutex_lock(&r->lock);
	conn_purge_client(r->conns, client);
	c = client_get(r, client, 0);
	if (c) {
		while ((g = LIST_FIRST(&c->gids)) != NULL) {
			RB_REMOVE(gid_tree, &r->gids, g);
			LIST_REMOVE(g, client_link);
			free(g);
			r->ngids--;
		}
		RB_REMOVE(rclient_tree, &r->clients, c);
		free(c);
	}
	pthread_mutex_unlock(&r->lock);
}

unsigned router_expire(struct router *r, uint64_t now_ms)
{
	unsigned n;

	pthread_mutex_lock(&r->lock);
	n = conn_expire(r->conns, now_ms);
	pthread_mutex_unlock(&r->lock);
	return n;
}

static void fill_counts(struct router_counts *out, const struct conn_counts *cc)
{
	out->comm_ids = cc->comm;
	out->sidr_ids = cc->sidr;
	out->draining = cc->by_state[CONN_TIMEWAIT];
	out->handshake = cc->by_state[CONN_HANDSHAKE] + cc->by_state[CONN_REQ_RCVD];
	out->established = cc->by_state[CONN_ESTABLISHED];
	out->disconnecting = cc->by_state[CONN_DISCONNECTING];
}

void router_counts(struct router *r, struct router_counts *out)
{
	struct conn_counts cc;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&r->lock);
	out->gids = r->ngids;
	conn_counts(r->conns, &cc);
	fill_counts(out, &cc);
	pthread_mutex_unlock(&r->lock);
}

void router_client_counts(struct router *r, uint64_t client,
			  struct router_counts *out)
{
	struct router_client *c;

	struct conn_counts cc;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&r->lock);
	c = client_get(r, client, 0);
	if (c)
		out->gids = c->ngids;
	conn_client_counts(r->conns, client, &cc);
	fill_counts(out, &cc);
	pthread_mutex_unlock(&r->lock);
}

json_t *router_conns_json(struct router *r, uint64_t client, unsigned max,
			  uint64_t now_ms)
{
	json_t *arr;

	pthread_mutex_lock(&r->lock);
	arr = conn_client_json(r->conns, client, max, now_ms);
	pthread_mutex_unlock(&r->lock);
	return arr;
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
