// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * mux/outlet.c on a socket pair: what is queued reaches the peer whole and
 * in order however much the socket takes per write, a full socket keeps
 * the rest, limits and closing refuse, and QEMU's protocol gets one
 * message per write.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "mux/mux.h"

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

static void test_limit_and_close(void **state)
{
	struct outlet o;
	uint8_t b[100] = { 0 };
	size_t left;
	int sv[2], ask;

	(void)state;
	open_pair(&o, SOCK_STREAM, 0, sv);
	assert_int_equal(outlet_append(&o, 250, b, 10, b, 90), 0);
	assert_int_equal(outlet_append(&o, 250, b, 10, b, 90), 0);
	assert_int_equal(outlet_append(&o, 250, b, 10, b, 90), -ENOBUFS);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_whole_and_in_order),
		cmocka_unit_test(test_full_socket_asks_the_owner_once),
		cmocka_unit_test(test_limit_and_close),
		cmocka_unit_test(test_one_message_per_write),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
