// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* bench_relay's floor: two threads' round trip (round_trip.h). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tests/bench/round_trip.h"

#define ROUND_TRIP_MSG 256

/* Until fd has a message: asleep in epoll_wait(), as the daemon's
 * workers and the benchmark's clients are.  Then read it whole. */
static int round_trip_take(int ep, int fd, uint8_t *buf)
{
	struct epoll_event ev;
	size_t have = 0;
	ssize_t n;

	while (have < ROUND_TRIP_MSG) {
		if (epoll_wait(ep, &ev, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		n = read(fd, buf + have, ROUND_TRIP_MSG - have);
		if (n == 0)
			return -EPIPE;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if (n > 0)
			have += (size_t)n;
	}
	return 0;
}

static int round_trip_give(int fd, const uint8_t *buf)
{
	return write(fd, buf, ROUND_TRIP_MSG) == ROUND_TRIP_MSG ? 0 : -EIO;
}

static int round_trip_poller(int fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0)
		return -errno;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int err = -errno;

		close(ep);
		return err;
	}
	return ep;
}

/* The far side: each message back, until the near side closes. */
static void *round_trip_echo(void *arg)
{
	uint8_t buf[ROUND_TRIP_MSG];
	int fd = *(const int *)arg, ep = round_trip_poller(fd);

	if (ep < 0)
		return NULL;
	while (round_trip_take(ep, fd, buf) == 0 &&
	       round_trip_give(fd, buf) == 0)
		;
	close(ep);
	return NULL;
}

static double round_trip_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double round_trip_us(double seconds)
{
	uint8_t buf[ROUND_TRIP_MSG] = { 0 };
	double t0, elapsed = 0;
	uint64_t trips = 0;
	pthread_t echo;
	int fds[2], ep, err;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
		       fds) < 0)
		return -errno;
	ep = round_trip_poller(fds[0]);
	err = ep < 0 ? ep
		     : -pthread_create(&echo, NULL, round_trip_echo, &fds[1]);
	if (err) {
		if (ep >= 0)
			close(ep);
		close(fds[0]);
		close(fds[1]);
		return err;
	}
	t0 = round_trip_now();
	while (err == 0 && elapsed < seconds) {
		err = round_trip_give(fds[0], buf);
		if (err == 0)
			err = round_trip_take(ep, fds[0], buf);
		trips += err == 0;
		/* The clock every 64 trips, so as not to time it. */
		if ((trips & 63) == 0)
			elapsed = round_trip_now() - t0;
	}
	elapsed = round_trip_now() - t0;
	shutdown(fds[0], SHUT_RDWR);
	pthread_join(echo, NULL);
	close(ep);
	close(fds[0]);
	close(fds[1]);
	if (err)
		return err;
	return trips ? elapsed * 1e6 / (double)trips : -EIO;
}
