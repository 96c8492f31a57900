// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* bench_relay's capture reader (bench_capture.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/unix_socket.h"
#include "tests/bench/bench_capture.h"

/* Every MAD, for longer than any measurement (the daemon's limits). */
#define BENCH_CAPTURE_REQUEST \
	"{\"op\":\"capture\",\"count\":10000000,\"seconds\":86400}\n"

static void *bench_capture_read(void *arg)
{
	struct bench_capture *c = arg;
	char buf[65536];
	ssize_t n, i;

	while ((n = read(c->fd, buf, sizeof(buf))) > 0 ||
	       (n < 0 && errno == EINTR))
		for (i = 0; i < n; i++)
			if (buf[i] == '\n')
				atomic_fetch_add_explicit(&c->lines, 1,
							  memory_order_relaxed);
	return NULL;
}

int bench_capture_start(struct bench_capture *c, const char *admin_path)
{
	char reply[512];
	size_t len;
	ssize_t n;
	int rc;

	atomic_store(&c->lines, 0);
	c->fd = unix_socket_connect(admin_path, SOCK_STREAM);
	if (c->fd < 0) {
		fprintf(stderr, "bench: admin socket %s: %s\n", admin_path,
			strerror(-c->fd));
		return c->fd;
	}
	if (write(c->fd, BENCH_CAPTURE_REQUEST,
		  sizeof(BENCH_CAPTURE_REQUEST) - 1) !=
	    (ssize_t)sizeof(BENCH_CAPTURE_REQUEST) - 1) {
		rc = -errno;
		goto fail;
	}
	/* The reply is the first line: read up to its end and no further
	 * (what follows is the reader's). */
	for (len = 0; len < sizeof(reply) - 1; len++) {
		n = read(c->fd, &reply[len], 1);
		if (n <= 0) {
			rc = n < 0 ? -errno : -ECONNRESET;
			goto fail;
		}
		if (reply[len] == '\n')
			break;
	}
	reply[len] = '\0';
	if (strstr(reply, "\"ok\":true") == NULL) {
		fprintf(stderr, "bench: capture refused: %s\n", reply);
		rc = -EPROTO;
		goto fail;
	}
	rc = pthread_create(&c->reader, NULL, bench_capture_read, c);
	if (rc == 0)
		return 0;
	rc = -rc;
fail:
	close(c->fd);
	c->fd = -1;
	return rc;
}

unsigned long bench_capture_stop(struct bench_capture *c)
{
	if (c->fd < 0)
		return 0;
	shutdown(c->fd, SHUT_RDWR);
	pthread_join(c->reader, NULL);
	close(c->fd);
	c->fd = -1;
	return atomic_load(&c->lines);
}
