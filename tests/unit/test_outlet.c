// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * mux/outlet.c on a socket pair: what is queued reaches the peer whole and
 * in order however much the socket takes per write, a full socket keeps
 * the rest, limits and closing refuse, and QEMU's protocol gets one
 * message per write.  One thread writes at a time, without the lock:
 * send() is wrapped (-Wl,--wrap=send) so that a test can act, as another
 * thread would, while a write is under way.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "mux/mux.h"

ssize_t __real_send(int fd, const void *buf, size_t len, int flags);
ssize_t __wrap_send(int fd, const void *buf, size_t len, int flags);

/* What the next send() does first, as another thread would meanwhile. */
static void (*during_send)(void *arg);
static void *during_send_arg;

ssize_t __wrap_send(int fd, const void *buf, size_t len, int flags)
{
	void (*hook)(void *) = during_send;

	during_send = NULL;
	if (hook != NULL)
		hook(during_send_arg);
	return __real_send(fd, buf, len, flags);
}

/* An outlet writing to sv[0]; the test reads sv[1]. */
static void open_pair(struct outlet *o, int type, size_t max_msg_write,
		      int sv[2])
{
	int small = 4096;

	assert_int_equal(socketpair(AF_UNIX, type, 0, sv), 0);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small,
				    sizeof(small)),
			 0);
	assert_int_equal(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
	outlet_init(o);
	assert_int_equal(outlet_open(o, sv[0], max_msg_write), 0);
}

/* Byte i of the stream the test writes. */
static uint8_t pattern(size_t i)
{
	return (uint8_t)(i * 7 + i / 251);
}

/* Frames of 1 to 600 bytes (a header and a payload each) until total;
 * the bytes queued. */
static size_t queue_frames(struct outlet *o, size_t from, size_t total)
{
	uint8_t hdr[12], payload[600];
	size_t at = from, hlen, len, i;

	while (at < from + total) {
		hlen = sizeof(hdr);
		len = 1 + (at * 13) % sizeof(payload);
		for (i = 0; i < hlen; i++)
			hdr[i] = pattern(at + i);
		for (i = 0; i < len; i++)
			payload[i] = pattern(at + hlen + i);
		assert_int_equal(outlet_append(o, 0, hdr, hlen, payload, len),
				 0);
		at += hlen + len;
	}
	return at - from;
}

/* Reads what is there, checking it against the pattern from *at. */
static size_t read_check(int fd, size_t *at)
{
	uint8_t buf[8192];
	size_t got = 0, i;
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (i = 0; i < (size_t)n; i++)
			assert_int_equal(buf[i], pattern(*at + i));
		*at += (size_t)n;
		got += (size_t)n;
	}
	return got;
}

static void test_whole_and_in_order(void **state)
{
	struct outlet o;
	size_t queued = 0, read_at = 0, left;
	int sv[2], ask, round;

	(void)state;
	open_pair(&o, SOCK_STREAM, 0, sv);
	/* Rounds of more than the socket holds, read while queuing more:
	 * the buffer grows, moves its rest to the front and shrinks. */
	for (round = 0; round < 20; round++) {
		size_t more = queue_frames(&o, queued,
					   1000 + 9000 * (size_t)round);

		/* Each round starts with nothing queued. */
		assert_int_equal(outlet_len(&o), more);
		queued += more;
		do {
			assert_int_equal(outlet_flush(&o, 1, &left, &ask), 0);
			assert_int_equal(ask, 0);
			assert_int_equal(outlet_len(&o), left);
			read_check(sv[1], &read_at);
		} while (left > 0);
	}
	read_check(sv[1], &read_at);
	assert_true(read_at == queued);
	assert_int_equal(outlet_len(&o), 0);
	outlet_close(&o);
	outlet_fini(&o);
	close(sv[1]);
}

/* A writer that is not the owner and leaves bytes behind asks the owner
 * to take over, once, until the owner has flushed. */
static void test_full_socket_asks_the_owner_once(void **state)
{
	struct outlet o;
	size_t queued, read_at = 0, left;
	int sv[2], ask;

	(void)state;
	open_pair(&o, SOCK_STREAM, 0, sv);
	queued = queue_frames(&o, 0, 200000);
	assert_int_equal(outlet_flush(&o, 0, &left, &ask), 0);
	assert_true(left > 0 && left < queued);
	assert_int_equal(ask, 1);
	assert_int_equal(outlet_flush(&o, 0, &left, &ask), 0);
	assert_int_equal(ask, 0);
	assert_int_equal(outlet_flush(&o, 1, &left, &ask), 0);
	assert_int_equal(ask, 0);
	assert_int_equal(outlet_flush(&o, 0, &left, &ask), 0);
	assert_int_equal(ask, 1);
	while (left > 0) {
		read_check(sv[1], &read_at);
		assert_int_equal(outlet_flush(&o, 1, &left, &ask), 0);
	}
	read_check(sv[1], &read_at);
	assert_true(read_at == queued);
	outlet_close(&o);
	outlet_fini(&o);
	close(sv[1]);
}

#define LIMIT 250

/* A frame of a 10-byte header and len bytes, against LIMIT. */
static int append_limited(struct outlet *o, size_t len)
{
	static const uint8_t b[100];

	return outlet_append(o, LIMIT, b, 10, b, len);
}

static void test_limit_and_close(void **state)
{
	struct outlet o;
	uint8_t b[100] = { 0 };
	size_t left;
	int sv[2], ask;

	(void)state;
	open_pair(&o, SOCK_STREAM, 0, sv);
	assert_int_equal(append_limited(&o, 90), 0);
	assert_int_equal(append_limited(&o, 90), 0);
	assert_int_equal(append_limited(&o, 90), -ENOBUFS);
	assert_int_equal(outlet_len(&o), 200);
	outlet_close(&o);
	assert_int_equal(outlet_len(&o), 0);
	assert_int_equal(outlet_append(&o, 0, b, 10, NULL, 0), -EPIPE);
	assert_int_equal(outlet_write_or_queue(&o, b, 10), -EPIPE);
	assert_int_equal(outlet_flush(&o, 1, &left, &ask), 0);
	assert_int_equal(left, 0);
	outlet_fini(&o);
	/* A peer that went away: the write's error. */
	open_pair(&o, SOCK_STREAM, 0, sv);
	close(sv[1]);
	assert_int_equal(outlet_append(&o, 0, b, 10, NULL, 0), 0);
	assert_int_equal(outlet_flush(&o, 1, &left, &ask), -EPIPE);
	outlet_close(&o);
	outlet_fini(&o);
}

/* QEMU's protocol: one message per write, written at once when nothing
 * is queued. */
static void test_one_message_per_write(void **state)
{
	struct outlet o;
	uint8_t m[3][32], r[64];
	size_t left, i;
	int sv[2], ask;

	(void)state;
	open_pair(&o, SOCK_SEQPACKET, sizeof(m[0]), sv);
	for (i = 0; i < 3; i++)
		memset(m[i], 'a' + (int)i, sizeof(m[i]));
	assert_int_equal(outlet_write_or_queue(&o, m[0], sizeof(m[0])), 1);
	assert_int_equal(outlet_append(&o, 0, m[1], sizeof(m[1]), NULL, 0), 0);
	assert_int_equal(outlet_write_or_queue(&o, m[2], sizeof(m[2])), 0);
	assert_int_equal(outlet_len(&o), 2 * sizeof(m[0]));
	assert_int_equal(outlet_flush(&o, 1, &left, &ask), 0);
	assert_int_equal(left, 0);
	for (i = 0; i < 3; i++) {
		assert_int_equal(recv(sv[1], r, sizeof(r), 0),
				 (ssize_t)sizeof(m[i]));
		assert_memory_equal(r, m[i], sizeof(m[i]));
	}
	assert_int_equal(recv(sv[1], r, sizeof(r), 0), -1);
	outlet_close(&o);
	outlet_fini(&o);
	close(sv[1]);
}

/* The owner flushes what is left while the test reads it all. */
static void drain_as_owner(struct outlet *o, int fd, size_t *read_at,
			   size_t left)
{
	int ask;

	while (left > 0) {
		read_check(fd, read_at);
		assert_int_equal(outlet_flush(o, 1, &left, &ask), 0);
	}
	read_check(fd, read_at);
}

struct meanwhile {
	struct outlet *o;
	size_t queued;   /* the stream's bytes so far */
	size_t more;     /* to queue while the write is under way */
	size_t len_seen; /* outlet_len() during the write */
	size_t owner_left;
	int owner_rc, owner_ask;
};

/* The owner flushes and more is queued while another thread writes. */
static void owner_comes_meanwhile(void *arg)
{
	struct meanwhile *m = arg;

	m->len_seen = outlet_len(m->o);
	m->owner_rc = outlet_flush(m->o, 1, &m->owner_left, &m->owner_ask);
	m->queued += queue_frames(m->o, m->queued, m->more);
}

/* A flush that finds another thread writing returns at once and leaves
 * the rest to it: that writer writes what was queued meanwhile after
 * what it took, the socket's leftover in front, and asks the owner to
 * flush once it is done (the owner did not write). */
static void test_flush_while_another_writes(void **state)
{
	struct meanwhile m = { 0 };
	struct outlet o;
	size_t read_at = 0, left, taken;
	int sv[2], ask;

	(void)state;
	open_pair(&o, SOCK_STREAM, 0, sv);
	m.o = &o;
	/* More than the socket takes: the writer comes back with some. */
	m.queued = taken = queue_frames(&o, 0, 100000);
	m.more = 30000;
	during_send = owner_comes_meanwhile;
	during_send_arg = &m;
	assert_int_equal(outlet_flush(&o, 0, &left, &ask), 0);
	assert_null(during_send);
	/* The bytes the writer took still count while it writes. */
	assert_int_equal(m.len_seen, taken);
	assert_int_equal(m.owner_rc, 0);
	assert_int_equal(m.owner_left, 0);
	assert_int_equal(m.owner_ask, 0);
	assert_true(left > 0);
	assert_int_equal(outlet_len(&o), left);
	assert_int_equal(ask, 1);
	drain_as_owner(&o, sv[1], &read_at, left);
	assert_true(read_at == m.queued);

	/* All of it goes: the owner is still asked, as it flushed while
	 * the other wrote and may wait on the result. */
	m.queued += queue_frames(&o, m.queued, 100);
	m.more = 100;
	during_send = owner_comes_meanwhile;
	assert_int_equal(outlet_flush(&o, 0, &left, &ask), 0);
	assert_int_equal(m.owner_left, 0);
	assert_int_equal(left, 0);
	assert_int_equal(ask, 1);
	drain_as_owner(&o, sv[1], &read_at, left);
	assert_true(read_at == m.queued);
	outlet_close(&o);
	outlet_fini(&o);
	close(sv[1]);
}

struct bound_meanwhile {
	struct outlet *o;
	int rc_over, rc_within;
};

static void append_meanwhile(void *arg)
{
	struct bound_meanwhile *m = arg;

	m->rc_over = append_limited(m->o, 90);
	m->rc_within = append_limited(m->o, 40);
}

/* The bytes a writer took count against the limit while it writes:
 * what the socket does not take is queued again, in front of what came
 * meanwhile, and the two together must stay within the limit. */
static void test_limit_counts_the_write(void **state)
{
	struct bound_meanwhile m = { 0 };
	struct outlet o;
	size_t left;
	int sv[2], ask;

	(void)state;
	open_pair(&o, SOCK_STREAM, 0, sv);
	m.o = &o;
	assert_int_equal(append_limited(&o, 90), 0);
	assert_int_equal(append_limited(&o, 90), 0);
	during_send = append_meanwhile;
	during_send_arg = &m;
	assert_int_equal(outlet_flush(&o, 1, &left, &ask), 0);
	assert_int_equal(m.rc_over, -ENOBUFS);
	assert_int_equal(m.rc_within, 0);
	assert_int_equal(left, 0);
	assert_int_equal(outlet_len(&o), 0);
	/* Written, it no longer counts. */
	assert_int_equal(append_limited(&o, 90), 0);
	assert_int_equal(append_limited(&o, 90), 0);
	outlet_close(&o);
	outlet_fini(&o);
	close(sv[1]);
}

static void close_meanwhile(void *arg)
{
	outlet_close(arg);
}

/* The session closed while its output was being written: the writer
 * drops what it took, and nothing is left queued. */
static void test_close_while_another_writes(void **state)
{
	struct outlet o;
	size_t left;
	int sv[2], ask;

	(void)state;
	open_pair(&o, SOCK_STREAM, 0, sv);
	queue_frames(&o, 0, 100000);
	during_send = close_meanwhile;
	during_send_arg = &o;
	assert_int_equal(outlet_flush(&o, 0, &left, &ask), 0);
	assert_int_equal(left, 0);
	assert_int_equal(outlet_len(&o), 0);
	assert_int_equal(outlet_append(&o, 0, "x", 1, NULL, 0), -EPIPE);
	outlet_fini(&o);
	close(sv[1]);
}

#define STRESS_THREADS 4
#define STRESS_FRAMES 20000

/* A frame of the stress test: its thread, its number, its size. */
struct stress_hdr {
	uint32_t thread, seq, len;
};

struct stress {
	struct outlet o;
	_Atomic int asked;
	/* A writer's first failure, for the test's thread to report: cmocka's
	 * assertions may only be made on the thread that runs the test.
	 * Frame number above, (negative) return code below, in one word so
	 * that the report never pairs one writer's code with another's
	 * frame; 0 while none has failed. */
	_Atomic uint64_t failed;
	/* Set by the teardown: writers stop, also when the test failed
	 * first (cmocka leaves a failed test at once, its writers running). */
	_Atomic int stop;
	pthread_t th[STRESS_THREADS];
	uint32_t started;
	int reader_fd;
};

struct stress_thread {
	struct stress *st;
	uint32_t id;
};

static struct stress stress_state;

static void stress_fail(struct stress *st, uint32_t seq, int rc)
{
	uint64_t none = 0;

	atomic_compare_exchange_strong(&st->failed, &none,
				       (uint64_t)seq << 32 | (uint32_t)rc);
}

/* Stops the test, on its own thread, once a writer has failed. */
static void stress_check(struct stress *st)
{
	uint64_t failed = atomic_load(&st->failed);

	if (failed != 0)
		fail_msg("a writer failed at frame %u: %d",
			 (unsigned int)(failed >> 32), (int)(uint32_t)failed);
}

static void *stress_writer(void *arg)
{
	struct stress_thread *t = arg;
	uint8_t payload[300];
	struct stress_hdr h;
	size_t left;
	int ask, rc;

	for (h.seq = 0; h.seq < STRESS_FRAMES && !atomic_load(&t->st->stop);
	     h.seq++) {
		h.thread = t->id;
		h.len = 1 + (h.seq * 37 + t->id) % sizeof(payload);
		memset(payload, (int)(h.seq + t->id), h.len);
		rc = outlet_append(&t->st->o, 0, &h, sizeof(h), payload, h.len);
		if (rc == 0)
			rc = outlet_flush(&t->st->o, 0, &left, &ask);
		if (rc != 0) {
			stress_fail(t->st, h.seq, rc);
			break;
		}
		if (ask)
			atomic_store(&t->st->asked, 1);
	}
	return NULL;
}

/* Reads n bytes; while there are none the owner flushes (what its write
 * event would do) and waits for some, failing after 10 s without any or
 * as soon as a writer has failed. */
static void read_full(int fd, void *buf, size_t n, struct stress *st)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint8_t *p = buf;
	int idle_ms = 0, ask;
	size_t left;
	ssize_t r;

	while (n > 0) {
		r = read(fd, p, n);
		if (r > 0) {
			p += r;
			n -= (size_t)r;
			idle_ms = 0;
			continue;
		}
		assert_true(r < 0 && errno == EAGAIN);
		stress_check(st);
		assert_int_equal(outlet_flush(&st->o, 1, &left, &ask), 0);
		if (poll(&pfd, 1, 100) == 0)
			idle_ms += 100;
		assert_true(idle_ms < 10000);
	}
}

/* Threads queue and flush frames on one outlet, as workers and the port
 * thread do, the owner flushes when asked: every frame arrives whole,
 * each thread's in the order it queued them. */
static void test_threads_share_an_outlet(void **state)
{
	static struct stress_thread t[STRESS_THREADS];
	uint32_t next[STRESS_THREADS] = { 0 }, i, total = 0;
	struct stress *st = *state;
	uint8_t payload[300];
	struct stress_hdr h;
	size_t left;
	int sv[2], ask;

	open_pair(&st->o, SOCK_STREAM, 0, sv);
	st->reader_fd = sv[1];
	for (i = 0; i < STRESS_THREADS; i++) {
		t[i].st = st;
		t[i].id = i;
		assert_int_equal(pthread_create(&st->th[i], NULL, stress_writer,
						&t[i]),
				 0);
		st->started++;
	}
	while (total < STRESS_THREADS * STRESS_FRAMES) {
		/* The owner: its flush when a writer left bytes behind. */
		if (atomic_exchange(&st->asked, 0))
			assert_int_equal(outlet_flush(&st->o, 1, &left, &ask),
					 0);
		read_full(sv[1], &h, sizeof(h), st);
		assert_true(h.thread < STRESS_THREADS);
		assert_int_equal(h.seq, next[h.thread]);
		assert_int_equal(h.len,
				 1 + (h.seq * 37 + h.thread) % sizeof(payload));
		read_full(sv[1], payload, h.len, st);
		for (i = 0; i < h.len; i++)
			assert_int_equal(payload[i],
					 (uint8_t)(h.seq + h.thread));
		next[h.thread]++;
		total++;
	}
	for (; st->started > 0; st->started--)
		pthread_join(st->th[st->started - 1], NULL);
	stress_check(st);
	assert_int_equal(outlet_flush(&st->o, 1, &left, &ask), 0);
	assert_int_equal(left, 0);
	assert_int_equal(outlet_len(&st->o), 0);
}

static int stress_setup(void **state)
{
	memset(&stress_state, 0, sizeof(stress_state));
	stress_state.reader_fd = -1;
	*state = &stress_state;
	return 0;
}

/* Runs whether the test passed or not: no writer outlives it. */
static int stress_teardown(void **state)
{
	struct stress *st = *state;

	atomic_store(&st->stop, 1);
	for (; st->started > 0; st->started--)
		pthread_join(st->th[st->started - 1], NULL);
	if (st->reader_fd >= 0) {
		outlet_close(&st->o);
		outlet_fini(&st->o);
		close(st->reader_fd);
	}
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_whole_and_in_order),
		cmocka_unit_test(test_full_socket_asks_the_owner_once),
		cmocka_unit_test(test_limit_and_close),
		cmocka_unit_test(test_one_message_per_write),
		cmocka_unit_test(test_flush_while_another_writes),
		cmocka_unit_test(test_limit_counts_the_write),
		cmocka_unit_test(test_close_while_another_writes),
		cmocka_unit_test_setup_teardown(test_threads_share_an_outlet,
						stress_setup, stress_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
