// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Worker threads, in the shape of memcached's thread.c: each worker owns
 * an event base (no locking inside it) and its sessions; other threads
 * reach it only through its inbox, a bounded mutex-protected queue with
 * an eventfd to wake it.  A wake-up handles at most the messages that
 * were queued when it started, so one busy producer cannot starve it.
 * With --poll-us a worker polls a little before it sleeps (worker_loop).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "mux/mux.h"
#include "common/log.h"

struct worker {
	struct mux *mux;
	unsigned index;
	pthread_t thread;
	struct event_base *base;
	int notify_fd;
	struct event *notify_ev;
	pthread_mutex_t lock;
	TAILQ_HEAD(, worker_msg) inbox;
	unsigned inbox_len;
	unsigned inbox_max;
	_Atomic uint64_t inbox_dropped;
	const struct worker_ops *ops;
	void *state;          /* what ops->attach made (its sessions) */
	int stopping;         /* WMSG_STOP taken */
	unsigned long inputs; /* reads and inbox batches, for worker_loop */
};

struct event_base *worker_base(struct worker *w)
{
	return w->base;
}
unsigned worker_index(struct worker *w)
{
	return w->index;
}
struct mux *worker_mux(struct worker *w)
{
	return w->mux;
}
uint64_t worker_inbox_dropped(struct worker *w)
{
	return atomic_load(&w->inbox_dropped);
}
void worker_note_input(struct worker *w)
{
	w->inputs++;
}

static void worker_msg_free(struct worker_msg *m)
{
	free(m->text);
	free(m);
}

struct worker_msg *worker_msg_new(enum worker_msg_type type, uint64_t client_id)
{
	struct worker_msg *m = calloc(1, sizeof(*m));

	if (m) {
		m->type = type;
		m->client_id = client_id;
	}
	return m;
}

int worker_post(struct worker *w, struct worker_msg *msg)
{
	uint64_t one = 1;
	/* Admin and lifecycle messages always get through; MADs are
	 * bounded by their client's share (WORKER_CLIENT_INBOX_MADS). */
	int bounded = msg->type == WMSG_EVENT;
	int wake;

	pthread_mutex_lock(&w->lock);
	if (bounded && w->inbox_len >= w->inbox_max) {
		pthread_mutex_unlock(&w->lock);
		atomic_fetch_add(&w->inbox_dropped, 1);
		worker_msg_free(msg);
		return -ENOBUFS;
	}
	TAILQ_INSERT_TAIL(&w->inbox, msg, link);
	/* One wake-up per batch: the worker takes the whole inbox at once,
	 * so only the message that finds it empty has to wake it. */
	wake = w->inbox_len++ == 0;
	pthread_mutex_unlock(&w->lock);
	if (wake && write(w->notify_fd, &one, sizeof(one)) < 0 &&
	    errno != EAGAIN)
		log_warn("worker %u: eventfd write", w->index);
	return 0;
}

static void worker_process_inbox(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	TAILQ_HEAD(, worker_msg) batch = TAILQ_HEAD_INITIALIZER(batch);
	struct worker_msg *m;
	uint64_t n;

	(void)what;
	worker_note_input(w);
	if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		log_warn("worker %u: eventfd read", w->index);

	pthread_mutex_lock(&w->lock);
	TAILQ_CONCAT(&batch, &w->inbox, link);
	w->inbox_len = 0;
	pthread_mutex_unlock(&w->lock);

	while ((m = TAILQ_FIRST(&batch)) != NULL) {
		TAILQ_REMOVE(&batch, m, link);
		w->ops->handle(w, m);
		if (m->type == WMSG_STOP) {
			w->stopping = 1;
			event_base_loopbreak(w->base);
		}
		worker_msg_free(m);
	}
}

static uint64_t worker_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/*
 * After input, with --poll-us: keep polling without sleeping until that
 * long has passed with no more, so that in a handshake the next MAD
 * finds the worker running rather than having to wake it; on an idle
 * CPU (a halted vCPU, above all) that wake-up takes longer than the
 * MAD's own work.  It costs up to poll-us of CPU after each burst.
 */
static void worker_poll(struct worker *w)
{
	unsigned long seen = w->inputs;
	uint64_t quiet_since = worker_now_us(), now;
	unsigned poll_us;

	while (!w->stopping &&
	       (poll_us = atomic_load(&w->mux->cfg.poll_us)) > 0) {
		if (event_base_loop(w->base, EVLOOP_NONBLOCK) < 0)
			fatal("worker %u: event loop", w->index);
		now = worker_now_us();
		if (w->inputs != seen) {
			seen = w->inputs;
			quiet_since = now;
		} else if (now - quiet_since >= poll_us) {
			break;
		}
	}
}

/* Sleep until there is something to do, do it, and poll a while if
 * asked to.  The stop is kept in a flag, not in the base's break, which
 * the next event_base_loop() clears. */
static void worker_loop(struct worker *w)
{
	while (!w->stopping) {
		/* It fails only where epoll does: the clients would hang. */
		if (event_base_loop(w->base, EVLOOP_ONCE) < 0)
			fatal("worker %u: event loop", w->index);
		if (atomic_load(&w->mux->cfg.poll_us) > 0)
			worker_poll(w);
	}
}

/* The worker whose thread this is (NULL on other threads). */
static _Thread_local struct worker *worker_current;

struct worker *worker_self(void)
{
	return worker_current;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char name[16];

	/* Named for top -H, perf and gdb (pthread names hold 15 bytes). */
	snprintf(name, sizeof(name), "muxd-worker%u", w->index);
	pthread_setname_np(pthread_self(), name);
	worker_current = w;
	worker_loop(w);
	return NULL;
}

static struct worker *worker_new(struct mux *mux, unsigned index,
				 const struct worker_ops *ops)
{
	struct event_config *cfg;
	struct worker *w = calloc(1, sizeof(*w));

	if (w == NULL)
		return NULL;
	w->mux = mux;
	w->index = index;
	w->ops = ops;
	w->inbox_max = mux->cfg.inbox_max;
	pthread_mutex_init(&w->lock, NULL);
	TAILQ_INIT(&w->inbox);
	cfg = event_config_new();
	/* Only this worker's thread touches its base. */
	event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
	w->base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	w->notify_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	w->state = w->base ? ops->attach(w) : NULL;
	if (w->base == NULL || w->notify_fd < 0 || w->state == NULL)
		fatal("worker %u: setup", index);
	w->notify_ev = event_new(w->base, w->notify_fd, EV_READ | EV_PERSIST,
				 worker_process_inbox, w);
	event_add(w->notify_ev, NULL);
	return w;
}

void *worker_state(struct worker *w)
{
	return w->state;
}

int worker_pool_start(struct mux *mux, const struct worker_ops *ops)
{
	int i, rc;

	for (i = 0; i < mux->nworkers; i++)
		mux->workers[i] = worker_new(mux, (unsigned)i, ops);
	for (i = 0; i < mux->nworkers; i++) {
		rc = pthread_create(&mux->workers[i]->thread, NULL, worker_main,
				    mux->workers[i]);
		if (rc) {
			errno = rc;
			fatal("worker %d: pthread_create", i);
		}
	}
	return 0;
}

void worker_pool_stop(struct mux *mux)
{
	struct worker_msg *m;
	struct worker *w;
	int i;

	for (i = 0; i < mux->nworkers; i++) {
		m = worker_msg_new(WMSG_STOP, 0);
		if (m == NULL)
			fatal("worker stop");
		worker_post(mux->workers[i], m);
	}
	/* All of them before any is freed: until it has stopped, a worker
	 * may still route a MAD to another's client and post to it. */
	for (i = 0; i < mux->nworkers; i++)
		pthread_join(mux->workers[i]->thread, NULL);
	for (i = 0; i < mux->nworkers; i++) {
		w = mux->workers[i];
		while ((m = TAILQ_FIRST(&w->inbox)) != NULL) {
			TAILQ_REMOVE(&w->inbox, m, link);
			w->ops->discard(w, m);
			worker_msg_free(m);
		}
		w->ops->detach(w, w->state);
		event_free(w->notify_ev);
		event_base_free(w->base);
		close(w->notify_fd);
		pthread_mutex_destroy(&w->lock);
		free(w);
		mux->workers[i] = NULL;
	}
}
