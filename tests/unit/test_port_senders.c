// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * mux/port_senders.c with a port whose send blocks until the test lets it
 * go: each thread sends through a lane of its own (1..PORT_SENDERS, what
 * port_umad gives a umad file and agent of its own), a key always takes
 * the same lane and keeps its order there, and a send that blocks holds
 * up its own lane only.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "mux/mux.h"

#define SENDS 64
#define DEADLINE_S 10

/* What the fake port saw and what the senders reported, by rid. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned lane_of[SENDS];
	unsigned sent_seq[SENDS]; /* order in which sends were made */
	unsigned seq;
	int done_rc[SENDS];
	unsigned ndone;
	uint32_t hold_rid; /* this send blocks until released */
	int holding, released;
} T = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static int fake_send(struct port *p, const struct proto_mad *m, int gid_index,
		     unsigned lane)
{
	uint32_t rid = (uint32_t)gid_index; /* the test's tag */

	(void)p;
	(void)m;
	pthread_mutex_lock(&T.lock);
	T.lane_of[rid] = lane;
	T.sent_seq[rid] = T.seq++;
	if (rid == T.hold_rid) {
		T.holding = 1;
		pthread_cond_broadcast(&T.cond);
		while (!T.released)
			pthread_cond_wait(&T.cond, &T.lock);
	}
	pthread_mutex_unlock(&T.lock);
	return 0;
}

static void fake_done(struct port *p, struct port_send *ps, int rc)
{
	(void)p;
	pthread_mutex_lock(&T.lock);
	T.done_rc[ps->gid_index] = rc;
	T.ndone++;
	pthread_cond_broadcast(&T.cond);
	pthread_mutex_unlock(&T.lock);
	free(ps);
}

static const struct port_ops fake_ops = { .kind = "fake",
					  .send = fake_send,
					  .send_blocks = 1 };

/* Wait (with a deadline) until cond holds; T.lock held. */
static int wait_locked(int (*cond)(void))
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += DEADLINE_S;
	while (!cond())
		if (pthread_cond_timedwait(&T.cond, &T.lock, &until) ==
		    ETIMEDOUT)
			return cond();
	return 1;
}

static unsigned want_done;
static int enough_done(void)
{
	return T.ndone >= want_done;
}

static int is_holding(void)
{
	return T.holding;
}

static void queue(struct port *p, uint32_t rid, uint32_t key)
{
	struct port_send *ps = calloc(1, sizeof(*ps));

	assert_non_null(ps);
	ps->gid_index = (int)rid;
	assert_int_equal(port_senders_queue(p, ps, key, 0), 0);
}

static void reset(void)
{
	pthread_mutex_lock(&T.lock);
	memset(T.lane_of, 0, sizeof(T.lane_of));
	memset(T.sent_seq, 0, sizeof(T.sent_seq));
	memset(T.done_rc, 0, sizeof(T.done_rc));
	T.seq = T.ndone = 0;
	T.hold_rid = UINT32_MAX;
	T.holding = T.released = 0;
	pthread_mutex_unlock(&T.lock);
}

static void test_a_key_keeps_its_lane_and_order(void **state)
{
	struct port p = { .ops = &fake_ops, .name = "fake" };
	unsigned i, j, lanes_seen = 0;

	(void)state;
	reset();
	assert_int_equal(port_senders_start(&p, PORT_SENDERS, 1024, fake_done),
			 0);
	/* Eight sends on each of eight keys, interleaved. */
	for (i = 0; i < SENDS; i++)
		queue(&p, i, i % 8);
	pthread_mutex_lock(&T.lock);
	want_done = SENDS;
	assert_true(wait_locked(enough_done));
	for (i = 0; i < SENDS; i++) {
		assert_int_equal(T.done_rc[i], 0);
		assert_in_range(T.lane_of[i], 1, PORT_SENDERS);
		/* Same key, same lane; later, sent later. */
		for (j = i + 8; j < SENDS; j += 8) {
			assert_int_equal(T.lane_of[j], T.lane_of[i]);
			assert_true(T.sent_seq[j] > T.sent_seq[i]);
		}
		lanes_seen |= 1u << T.lane_of[i];
	}
	pthread_mutex_unlock(&T.lock);
	/* Eight keys spread over all eight lanes: none shares another's. */
	assert_int_equal(__builtin_popcount(lanes_seen), PORT_SENDERS);
	port_senders_stop(&p);
	port_senders_free(&p);
}

/* A send that blocks (a RoCE address that does not resolve) holds its
 * own lane: the other lanes' sends all go meanwhile, and what queued
 * behind it on its lane waits for it. */
static void test_a_blocked_send_holds_its_lane_only(void **state)
{
	struct port p = { .ops = &fake_ops, .name = "fake" };
	unsigned i, others = 0;

	(void)state;
	reset();
	T.hold_rid = 0;
	assert_int_equal(port_senders_start(&p, PORT_SENDERS, 1024, fake_done),
			 0);
	queue(&p, 0, 0); /* blocks */
	pthread_mutex_lock(&T.lock);
	assert_true(wait_locked(is_holding));
	pthread_mutex_unlock(&T.lock);
	queue(&p, 1, 0); /* behind it */
	for (i = 2; i < SENDS; i++)
		if (i % PORT_SENDERS != 0) {
			queue(&p, i, i);
			others++;
		}
	pthread_mutex_lock(&T.lock);
	want_done = others;
	assert_true(wait_locked(enough_done));
	assert_int_equal(T.ndone, others);
	T.released = 1;
	pthread_cond_broadcast(&T.cond);
	want_done = others + 2;
	assert_true(wait_locked(enough_done));
	assert_true(T.sent_seq[1] > T.sent_seq[0]);
	assert_int_equal(T.lane_of[1], T.lane_of[0]);
	pthread_mutex_unlock(&T.lock);
	port_senders_stop(&p);
	port_senders_free(&p);
}

/* A full lane refuses a client's send (-EAGAIN: the client is told),
 * but takes what the daemon owes a peer (beyond_max), in its
 * order behind the rest. */
static void test_a_full_lane_takes_what_is_owed(void **state)
{
	struct port p = { .ops = &fake_ops, .name = "fake" };
	struct port_send *ps;

	(void)state;
	reset();
	T.hold_rid = 0;
	assert_int_equal(port_senders_start(&p, PORT_SENDERS, 2, fake_done), 0);
	queue(&p, 0, 0); /* blocks its lane */
	pthread_mutex_lock(&T.lock);
	assert_true(wait_locked(is_holding));
	pthread_mutex_unlock(&T.lock);
	queue(&p, 1, 0);
	queue(&p, 2, 0); /* the lane's queue is full */
	ps = calloc(1, sizeof(*ps));
	assert_non_null(ps);
	ps->gid_index = 3;
	assert_int_equal(port_senders_queue(&p, ps, 0, 0), -EAGAIN);
	assert_int_equal(port_senders_queue(&p, ps, 0, 1), 0);
	pthread_mutex_lock(&T.lock);
	T.released = 1;
	pthread_cond_broadcast(&T.cond);
	want_done = 4;
	assert_true(wait_locked(enough_done));
	assert_true(T.sent_seq[3] > T.sent_seq[2]);
	assert_int_equal(T.done_rc[3], 0);
	pthread_mutex_unlock(&T.lock);
	port_senders_stop(&p);
	port_senders_free(&p);
}

/* A worker queuing sends while the pool stops. */
struct queuer {
	struct port *p;
	unsigned accepted;
	int rc; /* what ended it */
};

static void *queue_until_refused(void *arg)
{
	struct queuer *q = arg;
	struct port_send *ps;

	for (;;) {
		ps = calloc(1, sizeof(*ps));
		if (ps == NULL) {
			q->rc = -ENOMEM;
			return NULL;
		}
		q->rc = port_senders_queue(q->p, ps, q->accepted, 0);
		if (q->rc == 0) {
			q->accepted++;
			continue;
		}
		free(ps);
		if (q->rc != -EAGAIN)
			return NULL;
		/* A full thread: again, once the senders have run (under
		 * valgrind, whose threads take turns, a spin here held them
		 * off past the deadline). */
		sched_yield();
	}
}

/* The workers queue sends until they stop, which is after the senders:
 * a send queued while the pool stops is either taken and reported once
 * (sent, or cancelled), or refused (-ESHUTDOWN, still the caller's),
 * never left in a queue no thread will empty, nor queued on freed
 * memory. */
static void test_queue_while_stopping(void **state)
{
	struct port p = { .ops = &fake_ops, .name = "fake" };
	struct queuer q = { .p = &p };
	pthread_t th;

	(void)state;
	reset();
	T.hold_rid = UINT32_MAX; /* none blocks; every rid is 0 */
	assert_int_equal(port_senders_start(&p, PORT_SENDERS, 1024, fake_done),
			 0);
	assert_int_equal(pthread_create(&th, NULL, queue_until_refused, &q), 0);
	pthread_mutex_lock(&T.lock);
	want_done = 1000;
	assert_true(wait_locked(enough_done));
	pthread_mutex_unlock(&T.lock);
	port_senders_stop(&p);
	pthread_join(th, NULL);
	assert_int_equal(q.rc, -ESHUTDOWN);
	pthread_mutex_lock(&T.lock);
	assert_int_equal(T.ndone, q.accepted);
	pthread_mutex_unlock(&T.lock);
	port_senders_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_key_keeps_its_lane_and_order),
		cmocka_unit_test(test_a_blocked_send_holds_its_lane_only),
		cmocka_unit_test(test_a_full_lane_takes_what_is_owed),
		cmocka_unit_test(test_queue_while_stopping),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
