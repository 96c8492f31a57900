// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * A simulated port's QPs.  It has none of its own, so the clients say
 * whose a QPN is: the first process to register one on a port owns it,
 * for as long as a connection of its that registered it lasts; all its
 * connections may name it (on a real port the kernel says the same of a
 * process's QPs).  See qp_owner.c for why it matters.
 */
#include <errno.h>
#include <stdlib.h>

#include "mux/mux.h"
#include "common/tree.h"

struct qp_reg {
	RB_ENTRY(qp_reg) link;
	unsigned port;
	uint32_t qpn;
	pid_t pid;
	uint64_t client; /* the connection that registered it */
};

/* By (port, QPN), then client: each connection of the owning process
 * that registers a QPN holds it, so that it stays the process's while
 * any of them is there. */
static int qp_registry_cmp(const struct qp_reg *a, const struct qp_reg *b)
{
	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	if (a->qpn != b->qpn)
		return a->qpn < b->qpn ? -1 : 1;
	return a->client < b->client ? -1 : a->client > b->client;
}

RB_HEAD(qp_reg_tree, qp_reg);
TREE_GENERATE_STATIC(qp_reg_tree, qp_reg, link, qp_registry_cmp)

struct qp_registry {
	pthread_mutex_t lock;
	struct qp_reg_tree tree;
};

struct qp_registry *qp_registry_new(void)
{
	struct qp_registry *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	pthread_mutex_init(&r->lock, NULL);
	RB_INIT(&r->tree);
	return r;
}

void qp_registry_free(struct qp_registry *r)
{
	struct qp_reg *e, *next;

	if (r == NULL)
		return;
	RB_FOREACH_SAFE(e, qp_reg_tree, &r->tree, next) {
		RB_REMOVE(qp_reg_tree, &r->tree, e);
		free(e);
	}
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* Lock held: the first registration of (port, qpn), or NULL. */
static struct qp_reg *qp_registry_first(struct qp_registry *r, unsigned port,
					uint32_t qpn)
{
	struct qp_reg key = { .port = port, .qpn = qpn, .client = 0 }, *e;

	e = RB_NFIND(qp_reg_tree, &r->tree, &key);
	return e && e->port == port && e->qpn == qpn ? e : NULL;
}

int qp_registry_add(struct qp_registry *r, unsigned port, uint32_t qpn,
		    pid_t pid, uint64_t client, unsigned max_per_client)
{
	struct qp_reg key = { .port = port, .qpn = qpn, .client = client }, *e;
	unsigned held = 0;
	int rc = 0;

	pthread_mutex_lock(&r->lock);
	e = qp_registry_first(r, port, qpn);
	if (e && e->pid != pid) {
		rc = -EADDRINUSE;
		goto out;
	}
	if (RB_FIND(qp_reg_tree, &r->tree, &key))
		goto out; /* this connection has it already */
	RB_FOREACH(e, qp_reg_tree, &r->tree)
		held += e->client == client;
	if (held >= max_per_client) {
		rc = -ENOSPC;
		goto out;
	}
	e = calloc(1, sizeof(*e));
	if (e == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	*e = (struct qp_reg){
		.port = port, .qpn = qpn, .pid = pid, .client = client
	};
	RB_INSERT(qp_reg_tree, &r->tree, e);
out:
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int qp_registry_remove(struct qp_registry *r, unsigned port, uint32_t qpn,
		       pid_t pid, uint64_t client)
{
	struct qp_reg key = { .port = port, .qpn = qpn, .client = client }, *e;
	int rc = -ENOENT;

	pthread_mutex_lock(&r->lock);
	e = qp_registry_first(r, port, qpn);
	if (e && e->pid != pid)
		rc = -EACCES;
	else if ((e = RB_FIND(qp_reg_tree, &r->tree, &key)) != NULL) {
		RB_REMOVE(qp_reg_tree, &r->tree, e);
		free(e);
		rc = 0;
	}
	pthread_mutex_unlock(&r->lock);
	return rc;
}

void qp_registry_drop_client(struct qp_registry *r, uint64_t client)
{
	struct qp_reg *e, *next;

	pthread_mutex_lock(&r->lock);
	RB_FOREACH_SAFE(e, qp_reg_tree, &r->tree, next)
		if (e->client == client) {
			RB_REMOVE(qp_reg_tree, &r->tree, e);
			free(e);
		}
	pthread_mutex_unlock(&r->lock);
}

int qp_registry_owner(struct qp_registry *r, unsigned port, uint32_t qpn,
		      pid_t *pid)
{
	struct qp_reg *e;
	int rc = -ENOENT;

	pthread_mutex_lock(&r->lock);
	e = qp_registry_first(r, port, qpn);
	if (e) {
		*pid = e->pid;
		rc = 0;
	}
	pthread_mutex_unlock(&r->lock);
	return rc;
}
