// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The MADs the daemon sends on its own: the router's answers (a REJ for a
 * REQ nobody takes, a DREP for an unknown DREQ) and what it says for a
 * client that is gone (a DREQ for each of its connections).  They are of
 * two kinds, budgeted apart, each per destination in buckets of a keyed
 * hash (a source cannot pick a GID that shares another's bucket):
 *
 * - Answers to what arrives are a remote peer's doing: beyond a burst and
 *   a steady rate per source they are not sent (answers.limited), so that
 *   a flood, or spoofed sources, buys no more than that.
 * - What a local event makes the daemon say (a client gone, a guest that
 *   reused a comm ID) is owed to its peers, and bounded by the
 *   connections the client held: never dropped, it is paced, a small
 *   burst and a steady rate per destination (a peer's QP1 receive queue
 *   takes so many at once: 512 MADs of every class, in Linux), the rest
 *   waiting on the port's owed list (answers.paced) for the port thread
 *   to send as the budget allows.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "mux/mux.h"
#include "common/hash.h"

/* What is owed to one destination: a burst, then a steady rate.  A
 * client with 4,096 connections to one peer tells it in about 4 s. */
#define PORT_OWED_BURST 32
#define PORT_OWED_PER_S 1000
/* How often the port thread looks at the owed list while it is not
 * empty. */
#define PORT_OWED_TICK_MS 10

void port_answers_init(struct port *p)
{
	if (getrandom(&p->answer_key, sizeof(p->answer_key), 0) !=
	    (ssize_t)sizeof(p->answer_key))
		p->answer_key = hash_mix64((uint64_t)time(NULL) ^
					   ((uint64_t)getpid() << 32));
	pthread_mutex_init(&p->owed_lock, NULL);
	TAILQ_INIT(&p->owed);
}

/* Whether dst's bucket has an answer left, of burst at most, refilled
 * at per_s (a token bucket packed in one word, the time of its last
 * refill in ms above 16 bits of tokens, so that any thread takes from it
 * without a lock). */
static int port_answers_allowed(struct port *p, _Atomic uint64_t *budget,
				const struct gid *dst, uint64_t burst,
				uint64_t per_s, uint64_t now_ms)
{
	_Atomic uint64_t *b = &budget[hash_gid(dst->raw, p->answer_key) %
				      PORT_ANSWER_BUCKETS];
	uint64_t old = atomic_load(b), at, tokens, add, next;

	do {
		at = old >> 16;
		tokens = old & 0xffff;
		add = now_ms > at ? (now_ms - at) * per_s / 1000 : 0;
		if (at == 0)
			add = burst; /* a source not seen yet */
		tokens = tokens + add > burst ? burst : tokens + add;
		if (tokens == 0)
			return 0;
		/* The refill time moves only with whole tokens, so that a
		 * steady trickle still earns them. */
		next = (add ? now_ms : at) << 16 | (tokens - 1);
	} while (!atomic_compare_exchange_weak(b, &old, next));
	return 1;
}

void port_answers_count(struct port *p, int rc)
{
	if (rc == 0) {
		atomic_fetch_add(&p->tx, 1);
	} else {
		atomic_fetch_add(&p->tx_errors, 1);
		atomic_fetch_add(&p->mux->stats.answers_failed, 1);
	}
}

/* Out on the wire, counted before it leaves so that the count is never
 * behind the wire: through a sender thread where the port's send blocks
 * (a RoCE port resolves the address first), so that answering a source
 * that cannot be resolved stalls neither receive nor timers; behind what
 * the connection's client sent (the same key).  Takes ps. */
static void port_answers_out(struct port *p, struct port_send *ps,
			     enum conn_answer why, int owed)
{
	int rc;

	if (capture_on(p->mux))
		capture_mad(p->mux, 1, p, &ps->m, NULL, "sent: the daemon's %s",
			    conn_answer_name(why));
	atomic_fetch_add(&p->mux->stats.answers[why], 1);
	atomic_fetch_add(&p->mux->stats.mads_out[cm_attr_index(
				 cm_mad_attr_id(ps->m.mad))],
			 1);
	if (p->senders) {
		/* An owed answer is queued beyond a thread's limit: the
		 * connections that owe it bound how many there are. */
		rc = port_parked_queue(p, ps, cm_mad_sender_id(ps->m.mad),
				       owed);
		if (rc < 0) {
			free(ps);
			port_answers_count(p, rc);
		}
		return;
	}
	port_answers_count(p, p->ops->send(p, &ps->m, ps->gid_index, 0));
	free(ps);
}

/* Whether the daemon says this because of a local event (its client is
 * gone, or reused the comm ID): the peer is owed it. */
static int port_answers_owed(enum conn_answer why)
{
	return why == CONN_ANS_DREQ_ABANDONED ||
	       why == CONN_ANS_REJ_ABANDONED ||
	       why == CONN_ANS_DREP_ABANDONED ||
	       why == CONN_ANS_SIDR_REJ_ABANDONED;
}

/* The router's way out: a MAD the daemon sends on its own (an answer for
 * nobody's GID, or for a client that is gone), from the GID on path.  Any
 * thread. */
void port_answers_send(void *arg, enum conn_answer why, unsigned port,
		       const struct conn_path *path, const uint8_t *mad)
{
	struct mux *mux = arg;
	struct port_send *ps;
	struct event *ev;
	struct port *p;
	int idx, owed = port_answers_owed(why);

	if (port >= (unsigned)mux->nports)
		return;
	p = &mux->ports[port];
	idx = p->ops->gid_index(p, &path->local_gid, path->gid_type);
	if (idx < 0 || atomic_load(&p->state) != PORT_STATE_ACTIVE) {
		atomic_fetch_add(&mux->stats.answers_failed, 1);
		return;
	}
	if (!owed && !port_answers_allowed(p, p->answer_budget, &path->peer_gid,
					   PORT_ANSWER_BURST, PORT_ANSWER_PER_S,
					   mux_now_ms())) {
		atomic_fetch_add(&mux->stats.answers_limited, 1);
		return;
	}
	ps = calloc(1, sizeof(*ps));
	if (ps == NULL) {
		port_answers_count(p, -ENOMEM);
		return;
	}
	ps->m.addr.port = (uint16_t)port;
	ps->m.addr.flags = path->grh ? PROTO_MAD_F_GRH : 0;
	ps->m.addr.hop_limit = path->hop_limit;
	ps->m.addr.traffic_class = path->traffic_class;
	ps->m.addr.sl = path->sl;
	ps->m.addr.flow_label = path->flow_label;
	ps->m.addr.remote_qpn = GSI_QPN;
	ps->m.addr.qkey = GSI_QKEY;
	ps->m.addr.pkey_index = path->pkey_index;
	memcpy(ps->m.addr.local_gid, path->local_gid.raw, 16);
	memcpy(ps->m.addr.remote_gid, path->peer_gid.raw, 16);
	ps->m.mad_len = MAD_SIZE;
	memcpy(ps->m.mad, mad, MAD_SIZE);
	ps->gid_index = idx;
	ps->why = why;
	if (!owed) {
		port_answers_out(p, ps, why, 0);
		return;
	}
	/* In the order they were owed: behind any that wait already. */
	pthread_mutex_lock(&p->owed_lock);
	if (TAILQ_EMPTY(&p->owed) &&
	    port_answers_allowed(p, p->owed_budget, &path->peer_gid,
				 PORT_OWED_BURST, PORT_OWED_PER_S,
				 mux_now_ms())) {
		pthread_mutex_unlock(&p->owed_lock);
		port_answers_out(p, ps, why, 1);
		return;
	}
	TAILQ_INSERT_TAIL(&p->owed, ps, link);
	/* The port thread takes it from here (its tick, until it runs);
	 * the event is made when it starts, and freed only once no worker
	 * is left to get here. */
	ev = p->owed_ev;
	pthread_mutex_unlock(&p->owed_lock);
	atomic_fetch_add(&mux->stats.answers_paced, 1);
	if (ev)
		event_active(ev, EV_TIMEOUT, 0);
}

unsigned port_answers_drain(struct port *p, uint64_t now_ms)
{
	struct port_send *ps, *next;
	struct gid dst;
	unsigned sent = 0;

	pthread_mutex_lock(&p->owed_lock);
	TAILQ_FOREACH_SAFE(ps, &p->owed, link, next) {
		memcpy(dst.raw, ps->m.addr.remote_gid, 16);
		/* A destination without budget keeps its answers in order;
		 * the others go on. */
		if (!port_answers_allowed(p, p->owed_budget, &dst,
					  PORT_OWED_BURST, PORT_OWED_PER_S,
					  now_ms))
			continue;
		TAILQ_REMOVE(&p->owed, ps, link);
		port_answers_out(p, ps, ps->why, 1);
		sent++;
	}
	pthread_mutex_unlock(&p->owed_lock);
	return sent;
}

/* Port thread: what the budgets allow now, and again in a tick while
 * anything is left. */
static void port_answers_owed_cb(evutil_socket_t fd, short what, void *arg)
{
	static const struct timeval tick = { 0, PORT_OWED_TICK_MS * 1000 };
	struct port *p = arg;
	int left;

	(void)fd;
	(void)what;
	port_answers_drain(p, mux_now_ms());
	pthread_mutex_lock(&p->owed_lock);
	left = !TAILQ_EMPTY(&p->owed);
	pthread_mutex_unlock(&p->owed_lock);
	if (left)
		event_add(p->owed_ev, &tick);
}

int port_answers_start(struct port *p, struct event_base *base)
{
	struct event *ev = event_new(base, -1, 0, port_answers_owed_cb, p);

	/* Workers may be answering already. */
	pthread_mutex_lock(&p->owed_lock);
	p->owed_ev = ev;
	pthread_mutex_unlock(&p->owed_lock);
	return ev ? 0 : -ENOMEM;
}

void port_answers_free(struct port *p)
{
	struct port_send *ps;

	pthread_mutex_lock(&p->owed_lock);
	while ((ps = TAILQ_FIRST(&p->owed)) != NULL) {
		TAILQ_REMOVE(&p->owed, ps, link);
		port_answers_count(p, -ECANCELED);
		free(ps);
	}
	pthread_mutex_unlock(&p->owed_lock);
	if (p->owed_ev)
		event_free(p->owed_ev);
	p->owed_ev = NULL;
}
