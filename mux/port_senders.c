// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Sender threads for a port whose send blocks.  On a RoCE umad port the
 * kernel resolves the destination's MAC for every MAD written (an address
 * handle per send, through the ordered ib_addr workqueue) and the writer
 * sleeps until it is done; a worker that wrote there itself would hold
 * every other client of its event loop behind each send.  Workers queue
 * the send here instead, and the verdict goes back through the port's
 * done callback.  A connection's MADs always take the same thread (by
 * the comm ID they carry), so they leave in the order they were sent.
 */
#include <errno.h>
#include <stdlib.h>

#include "mux/mux.h"
#include "common/log.h"

struct port_sender {
	struct port *port;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct port_send_list queue;
	unsigned len;
	unsigned lane; /* the port's way out for this thread (port_ops) */
	int stop;
};

struct port_senders {
	port_send_done_fn done;
	unsigned n;
	unsigned queue_max;
	struct port_sender s[];
};

static void *port_senders_main(void *arg)
{
	struct port_sender *s = arg;
	struct port_send *ps;
	int rc;

	pthread_setname_np(pthread_self(), "muxd-umad-send");
	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!s->stop && (ps = TAILQ_FIRST(&s->queue)) == NULL)
			pthread_cond_wait(&s->cond, &s->lock);
		if (s->stop)
			break;
		TAILQ_REMOVE(&s->queue, ps, link);
		s->len--;
		pthread_mutex_unlock(&s->lock);
		rc = s->port->ops->send(s->port, &ps->m, ps->gid_index,
					s->lane);
		s->port->senders->done(s->port, ps, rc);
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int port_senders_start(struct port *p, unsigned nthreads, unsigned queue_max,
		       port_send_done_fn done)
{
	struct port_senders *ss;
	unsigned i;
	int rc;

	ss = calloc(1, sizeof(*ss) + nthreads * sizeof(ss->s[0]));
	if (ss == NULL)
		return -ENOMEM;
	ss->done = done;
	ss->n = nthreads;
	ss->queue_max = queue_max;
	for (i = 0; i < nthreads; i++) {
		ss->s[i].port = p;
		ss->s[i].lane = i + 1;
		pthread_mutex_init(&ss->s[i].lock, NULL);
		pthread_cond_init(&ss->s[i].cond, NULL);
		TAILQ_INIT(&ss->s[i].queue);
		rc = pthread_create(&ss->s[i].thread, NULL, port_senders_main,
				    &ss->s[i]);
		if (rc) {
			errno = rc;
			fatal("port %s: sender thread", p->name);
		}
	}
	p->senders = ss;
	return 0;
}

int port_senders_queue(struct port *p, struct port_send *ps, uint32_t key,
		       int beyond_max)
{
	struct port_senders *ss = p->senders;
	struct port_sender *s;

	if (ss == NULL)
		return -EOPNOTSUPP;
	ps->key = key;
	s = &ss->s[key % ss->n];
	pthread_mutex_lock(&s->lock);
	if (s->stop || (s->len >= ss->queue_max && !beyond_max)) {
		pthread_mutex_unlock(&s->lock);
		return s->stop ? -ESHUTDOWN : -EAGAIN;
	}
	TAILQ_INSERT_TAIL(&s->queue, ps, link);
	s->len++;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

void port_senders_requeue(struct port *p, struct port_send_list *list)
{
	struct port_senders *ss = p->senders;
	struct port_send *ps, *prev;
	struct port_sender *s;
	unsigned i;

	for (i = 0; i < ss->n && !TAILQ_EMPTY(list); i++) {
		s = &ss->s[i];
		pthread_mutex_lock(&s->lock);
		/* From the last: each goes before the one after it. */
		for (ps = TAILQ_LAST(list, port_send_list); ps; ps = prev) {
			prev = TAILQ_PREV(ps, port_send_list, link);
			if (ps->key % ss->n != i || s->stop)
				continue;
			TAILQ_REMOVE(list, ps, link);
			TAILQ_INSERT_HEAD(&s->queue, ps, link);
			s->len++;
		}
		pthread_cond_signal(&s->cond);
		pthread_mutex_unlock(&s->lock);
	}
	/* The threads that stopped will send nothing more. */
	while ((ps = TAILQ_FIRST(list)) != NULL) {
		TAILQ_REMOVE(list, ps, link);
		ss->done(p, ps, -ECANCELED);
	}
}

void port_senders_fail(struct port *p, struct port_send *ps, int rc)
{
	p->senders->done(p, ps, rc);
}

void port_senders_stop(struct port *p)
{
	struct port_senders *ss = p->senders;
	struct port_send *ps;
	unsigned i;

	if (ss == NULL)
		return;
	for (i = 0; i < ss->n; i++) {
		pthread_mutex_lock(&ss->s[i].lock);
		ss->s[i].stop = 1;
		pthread_cond_signal(&ss->s[i].cond);
		pthread_mutex_unlock(&ss->s[i].lock);
	}
	for (i = 0; i < ss->n; i++) {
		pthread_join(ss->s[i].thread, NULL);
		/* The daemon is stopping: what was not sent is not.  A
		 * worker may still try to queue; stop refuses it (under the
		 * lock), so nothing is queued behind this. */
		pthread_mutex_lock(&ss->s[i].lock);
		while ((ps = TAILQ_FIRST(&ss->s[i].queue)) != NULL) {
			TAILQ_REMOVE(&ss->s[i].queue, ps, link);
			ss->s[i].len--;
			ss->done(p, ps, -ECANCELED);
		}
		pthread_mutex_unlock(&ss->s[i].lock);
	}
}

void port_senders_free(struct port *p)
{
	struct port_senders *ss = p->senders;
	unsigned i;

	if (ss == NULL)
		return;
	for (i = 0; i < ss->n; i++) {
		pthread_cond_destroy(&ss->s[i].cond);
		pthread_mutex_destroy(&ss->s[i].lock);
	}
	free(ss);
	p->senders = NULL;
}
