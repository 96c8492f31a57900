// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * mux/port_parked.c behind mux/port_senders.c, with a port that behaves
 * as ib_umad on RoCE does: a write to a destination whose address does
 * not resolve holds the writing thread for a second (the kernel's wait)
 * and fails.  A tenant's MADs to such destinations must hold no sender
 * thread, so that the other tenants' MADs on every lane go at once; a
 * destination that resolves gets its MADs in the order they came; one
 * that does not fails them after PORT_PARKED_WAIT_MS.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "mux/mux.h"

#define TAGS 128
#define DEADLINE_S 10
/* A destination's last byte: 0xdd does not answer (until resolved). */
#define DEAD 0xdd
#define LIVE 0x11

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned sent_seq[TAGS]; /* 1 + the order in which sends were made */
	unsigned seq;
	int done_rc[TAGS];
	int done[TAGS];
	unsigned ndone;
	int resolved; /* the dead destination answers now */
	unsigned dest_asks;
	_Atomic uint64_t now_ms;
} T = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

uint64_t mux_now_ms(void)
{
	return atomic_load(&T.now_ms);
}

static uint32_t tag_of(const struct proto_mad *m)
{
	uint32_t tag;

	memcpy(&tag, m->mad, sizeof(tag));
	return tag;
}

/* ib_umad's write on RoCE: an unresolved destination holds the thread
 * for the kernel's second, then fails. */
static int fake_send(struct port *p, const struct proto_mad *m, int gid_index,
		     unsigned lane)
{
	struct timespec until;
	int rc = 0;

	(void)p;
	(void)gid_index;
	(void)lane;
	pthread_mutex_lock(&T.lock);
	if (m->addr.remote_gid[15] == DEAD && !T.resolved) {
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 1;
		while (!T.resolved &&
		       pthread_cond_timedwait(&T.cond, &T.lock, &until) == 0)
			;
		rc = T.resolved ? 0 : -ETIMEDOUT;
	}
	T.sent_seq[tag_of(m)] = ++T.seq;
	pthread_mutex_unlock(&T.lock);
	return rc;
}

static int fake_dest_wait(struct port *p, const uint8_t *dgid, int gid_index,
			  uint64_t now_ms)
{
	int wait;

	(void)p;
	(void)gid_index;
	(void)now_ms;
	pthread_mutex_lock(&T.lock);
	T.dest_asks++;
	wait = dgid[15] == DEAD && !T.resolved;
	pthread_mutex_unlock(&T.lock);
	return wait;
}

static void fake_done(struct port *p, struct port_send *ps, int rc)
{
	uint32_t tag = tag_of(&ps->m);

	(void)p;
	pthread_mutex_lock(&T.lock);
	T.done_rc[tag] = rc;
	T.done[tag] = 1;
	T.ndone++;
	pthread_cond_broadcast(&T.cond);
	pthread_mutex_unlock(&T.lock);
	free(ps);
}

static const struct port_ops fake_ops = { .kind = "fake",
					  .send = fake_send,
					  .send_blocks = 1,
					  .dest_wait = fake_dest_wait };

static uint32_t want_tag;
static int tag_done(void)
{
	return T.done[want_tag];
}

static unsigned want_done;
static int enough_done(void)
{
	return T.ndone >= want_done;
}

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

static void queue(struct port *p, uint32_t tag, uint32_t key, uint8_t dest)
{
	struct port_send *ps = calloc(1, sizeof(*ps));

	assert_non_null(ps);
	memcpy(ps->m.mad, &tag, sizeof(tag));
	ps->m.mad_len = 256;
	ps->m.addr.remote_gid[15] = dest;
	assert_int_equal(port_parked_queue(p, ps, key, 0), 0);
}

static void start(struct port *p)
{
	pthread_mutex_lock(&T.lock);
	memset(T.sent_seq, 0, sizeof(T.sent_seq));
	memset(T.done, 0, sizeof(T.done));
	memset(T.done_rc, 0, sizeof(T.done_rc));
	T.seq = T.ndone = T.dest_asks = 0;
	T.resolved = 0;
	atomic_store(&T.now_ms, 1000000);
	pthread_mutex_unlock(&T.lock);
	*p = (struct port){ .ops = &fake_ops, .name = "fake" };
	assert_int_equal(port_parked_init(p, 42), 0);
	assert_int_equal(port_senders_start(p, PORT_SENDERS, 1024, fake_done),
			 0);
}

static void stop(struct port *p)
{
	port_senders_stop(p);
	port_parked_free(p);
	port_senders_free(p);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A noisy tenant's 64 MADs to addresses that never answer, on every
 * lane, then an honest MAD on each lane: the honest ones go at once (the
 * kernel would have held each lane eight seconds), the noisy ones are
 * never written and fail with -EHOSTUNREACH once their wait is over. */
static void test_dead_destinations_hold_no_thread(void **state)
{
	struct port p;
	uint32_t t;
	double t0;

	(void)state;
	start(&p);
	for (t = 0; t < 64; t++)
		queue(&p, t, t, DEAD);
	t0 = now_s();
	for (t = 64; t < 72; t++)
		queue(&p, t, t, LIVE);
	pthread_mutex_lock(&T.lock);
	want_done = 8;
	assert_true(wait_locked(enough_done));
	for (t = 64; t < 72; t++) {
		assert_true(T.done[t]);
		assert_int_equal(T.done_rc[t], 0);
	}
	pthread_mutex_unlock(&T.lock);
	/* Far under the kernel's second per dead MAD before them. */
	assert_true(now_s() - t0 < 0.5);
	assert_int_equal(atomic_load(&p.parked_now), 64);
	/* One record per destination: all 64 went to one address. */
	port_parked_tick(&p, mux_now_ms() + PORT_PARKED_WAIT_MS - 1);
	assert_int_equal(atomic_load(&p.parked_now), 64);
	port_parked_tick(&p, mux_now_ms() + PORT_PARKED_WAIT_MS);
	pthread_mutex_lock(&T.lock);
	want_done = 72;
	assert_true(wait_locked(enough_done));
	for (t = 0; t < 64; t++) {
		assert_int_equal(T.done_rc[t], -EHOSTUNREACH);
		assert_int_equal(T.sent_seq[t], 0); /* never written */
	}
	pthread_mutex_unlock(&T.lock);
	assert_int_equal(atomic_load(&p.parked_now), 0);
	assert_int_equal(atomic_load(&p.parked_expired), 64);
	stop(&p);
}

/* Three MADs of one connection wait for their destination, a MAD to
 * another goes past them on their lane; once the destination resolves,
 * the three go in their order, and one sent after them follows them. */
static void test_a_resolved_destination_keeps_order(void **state)
{
	struct port p;
	unsigned asks;

	(void)state;
	start(&p);
	queue(&p, 0, 5, DEAD);
	queue(&p, 1, 5, DEAD);
	queue(&p, 2, 5, DEAD);
	queue(&p, 3, 5, LIVE);
	pthread_mutex_lock(&T.lock);
	want_tag = 3;
	assert_true(wait_locked(tag_done));
	assert_false(T.done[0] || T.done[1] || T.done[2]);
	/* The later two were parked behind the first without asking. */
	asks = T.dest_asks;
	assert_int_equal(asks, 2);
	T.resolved = 1;
	pthread_mutex_unlock(&T.lock);
	/* Another address resolving moves nothing. */
	port_parked_ready(&p, (uint8_t[16]){ [15] = LIVE }, mux_now_ms());
	assert_int_equal(atomic_load(&p.parked_now), 3);
	port_parked_ready(&p, (uint8_t[16]){ [15] = DEAD }, mux_now_ms());
	queue(&p, 4, 5, DEAD);
	pthread_mutex_lock(&T.lock);
	want_done = 5;
	assert_true(wait_locked(enough_done));
	assert_int_equal(T.done_rc[0], 0);
	assert_int_equal(T.done_rc[4], 0);
	assert_true(T.sent_seq[0] < T.sent_seq[1]);
	assert_true(T.sent_seq[1] < T.sent_seq[2]);
	assert_true(T.sent_seq[2] < T.sent_seq[4]);
	pthread_mutex_unlock(&T.lock);
	stop(&p);
}

/* The daemon stops with MADs waiting: each is reported once, cancelled. */
static void test_waiting_at_stop_is_cancelled(void **state)
{
	struct port p;

	(void)state;
	start(&p);
	queue(&p, 0, 1, DEAD);
	queue(&p, 1, 2, DEAD);
	port_senders_stop(&p);
	port_parked_free(&p);
	pthread_mutex_lock(&T.lock);
	assert_int_equal(T.ndone, 2);
	assert_int_equal(T.done_rc[0], -ECANCELED);
	assert_int_equal(T.done_rc[1], -ECANCELED);
	pthread_mutex_unlock(&T.lock);
	port_senders_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dead_destinations_hold_no_thread),
		cmocka_unit_test(test_a_resolved_destination_keeps_order),
		cmocka_unit_test(test_waiting_at_stop_is_cancelled),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
