// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * MADs waiting for their destination's address.  On a RoCE port the
 * kernel resolves the destination's MAC in the thread that writes the MAD
 * and holds it there up to a second when the address does not answer;
 * a sender thread that wrote such a MAD would hold every other MAD of its
 * lane, whoever sent them.  So a send the port says would wait
 * (port_ops.dest_wait, which has started the resolution) is parked here,
 * with every later MAD to that destination behind it, and no thread
 * waits: once the port hears the address resolved they go to their
 * sender threads, at the head of their queues, in the order they came,
 * and MADs whose destination has not answered within PORT_PARKED_WAIT_MS
 * fail with -EHOSTUNREACH, as the kernel's write would have failed after
 * holding a thread that long.
 *
 * What is parked is bounded by its senders: a client's MADs in flight
 * (port_send_client_mad()) and the daemon's own answers (their budgets,
 * port_answers.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mux/mux.h"
#include "common/hash.h"
#include "common/log.h"

#define PORT_PARKED_BUCKETS 256

struct parked_dest {
	LIST_ENTRY(parked_dest) link;
	uint8_t dgid[16];
	int gid_index;
	uint64_t deadline_ms;
	struct port_send_list sends;
};

LIST_HEAD(parked_bucket, parked_dest);

struct port_parked {
	pthread_mutex_t lock;
	struct parked_bucket buckets[PORT_PARKED_BUCKETS];
	unsigned ndests;
	uint64_t key; /* the bucket hash's, so no sender picks collisions */
};

int port_parked_init(struct port *p, uint64_t key)
{
	struct port_parked *pk = calloc(1, sizeof(*pk));
	unsigned i;

	if (pk == NULL)
		return -ENOMEM;
	pthread_mutex_init(&pk->lock, NULL);
	for (i = 0; i < PORT_PARKED_BUCKETS; i++)
		LIST_INIT(&pk->buckets[i]);
	pk->key = key;
	p->parked = pk;
	return 0;
}

static struct parked_bucket *port_parked_bucket(struct port_parked *pk,
						const uint8_t dgid[16])
{
	return &pk->buckets[hash_gid(dgid, pk->key) % PORT_PARKED_BUCKETS];
}

static struct parked_dest *port_parked_find(struct port_parked *pk,
					    const uint8_t dgid[16],
					    int gid_index)
{
	struct parked_dest *d;

	LIST_FOREACH(d, port_parked_bucket(pk, dgid), link)
		if (d->gid_index == gid_index && memcmp(d->dgid, dgid, 16) == 0)
			return d;
	return NULL;
}

/* Under pk->lock: ps behind what waits for its destination, a record
 * made for it if need be.  0, or -ENOMEM. */
static int port_parked_add(struct port *p, struct port_send *ps,
			   uint64_t now_ms)
{
	struct port_parked *pk = p->parked;
	const uint8_t *dgid = ps->m.addr.remote_gid;
	struct parked_dest *d = port_parked_find(pk, dgid, ps->gid_index);

	if (d == NULL) {
		d = calloc(1, sizeof(*d));
		if (d == NULL)
			return -ENOMEM;
		memcpy(d->dgid, dgid, 16);
		d->gid_index = ps->gid_index;
		d->deadline_ms = now_ms + PORT_PARKED_WAIT_MS;
		TAILQ_INIT(&d->sends);
		LIST_INSERT_HEAD(port_parked_bucket(pk, dgid), d, link);
		pk->ndests++;
	}
	TAILQ_INSERT_TAIL(&d->sends, ps, link);
	atomic_fetch_add(&p->parked_now, 1);
	atomic_fetch_add(&p->parked_total, 1);
	return 0;
}

static int port_parked_take(struct port *p, struct port_send *ps,
			    uint64_t now_ms)
{
	struct port_parked *pk = p->parked;
	int rc;

	if (pk == NULL || p->ops->dest_wait == NULL)
		return 0;
	pthread_mutex_lock(&pk->lock);
	/* Behind what already waits for the destination: in order. */
	if (port_parked_find(pk, ps->m.addr.remote_gid, ps->gid_index)) {
		rc = port_parked_add(p, ps, now_ms);
		pthread_mutex_unlock(&pk->lock);
		return rc == 0;
	}
	pthread_mutex_unlock(&pk->lock);
	if (p->ops->dest_wait(p, ps->m.addr.remote_gid, ps->gid_index,
			      now_ms) <= 0)
		return 0;
	pthread_mutex_lock(&pk->lock);
	rc = port_parked_add(p, ps, now_ms);
	pthread_mutex_unlock(&pk->lock);
	/* Out of memory: sent now, as before there was a gate. */
	return rc == 0;
}

int port_parked_queue(struct port *p, struct port_send *ps, uint32_t key,
		      int beyond_max)
{
	if (p->senders == NULL)
		return -EOPNOTSUPP;
	ps->key = key;
	if (port_parked_take(p, ps, mux_now_ms()))
		return 0;
	return port_senders_queue(p, ps, key, beyond_max);
}

/* Under pk->lock: d's MADs to their threads' queue heads, in order (a
 * connection's later MADs queued meanwhile are behind them), or failed;
 * d freed. */
static void port_parked_end(struct port *p, struct parked_dest *d, int rc)
{
	struct port_send *ps;

	LIST_REMOVE(d, link);
	p->parked->ndests--;
	TAILQ_FOREACH(ps, &d->sends, link)
		atomic_fetch_sub(&p->parked_now, 1);
	if (rc == 0)
		port_senders_requeue(p, &d->sends);
	while ((ps = TAILQ_FIRST(&d->sends)) != NULL) {
		TAILQ_REMOVE(&d->sends, ps, link);
		if (rc == -EHOSTUNREACH)
			atomic_fetch_add(&p->parked_expired, 1);
		port_senders_fail(p, ps, rc);
	}
	free(d);
}

/* Under pk->lock: d's destination asked again. */
static void port_parked_check(struct port *p, struct parked_dest *d,
			      uint64_t now_ms)
{
	if (p->ops->dest_wait(p, d->dgid, d->gid_index, now_ms) <= 0)
		port_parked_end(p, d, 0);
	else if (now_ms >= d->deadline_ms)
		port_parked_end(p, d, -EHOSTUNREACH);
}

void port_parked_ready(struct port *p, const uint8_t *gid, uint64_t now_ms)
{
	struct port_parked *pk = p->parked;
	struct parked_bucket *b, *last;
	struct parked_dest *d, *next;

	if (pk == NULL)
		return;
	/* One GID's bucket, or every bucket. */
	b = gid ? port_parked_bucket(pk, gid) : &pk->buckets[0];
	last = gid ? b : &pk->buckets[PORT_PARKED_BUCKETS - 1];
	pthread_mutex_lock(&pk->lock);
	for (; b <= last; b++) {
		LIST_FOREACH_SAFE(d, b, link, next)
			if (gid == NULL || memcmp(d->dgid, gid, 16) == 0)
				port_parked_check(p, d, now_ms);
	}
	pthread_mutex_unlock(&pk->lock);
}

void port_parked_tick(struct port *p, uint64_t now_ms)
{
	/* Every destination: one behind a gateway hears of its gateway,
	 * and an event may have been missed. */
	port_parked_ready(p, NULL, now_ms);
}

void port_parked_free(struct port *p)
{
	struct port_parked *pk = p->parked;
	struct parked_dest *d;
	unsigned i;

	if (pk == NULL)
		return;
	pthread_mutex_lock(&pk->lock);
	for (i = 0; i < PORT_PARKED_BUCKETS; i++)
		while ((d = LIST_FIRST(&pk->buckets[i])) != NULL)
			port_parked_end(p, d, -ECANCELED);
	pthread_mutex_unlock(&pk->lock);
	pthread_mutex_destroy(&pk->lock);
	free(pk);
	p->parked = NULL;
}
