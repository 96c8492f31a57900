// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The daemon's sockets as rdmacm-muxctl reads them: a connection, one
 * status query and its whole answer, and the escaping of what in it came
 * from VMs before it reaches a terminal.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "common/text.h"
#include "common/unix_socket.h"
#include "mux/ctl/muxctl.h"

/* The largest answer taken. */
#define STATUS_MAX (64u << 20)

/* A connected unix stream socket, or -1 after saying why (with hint). */
int muxctl_status_connect(const char *path, const char *hint)
{
	int fd = unix_socket_connect(path, SOCK_STREAM);

	if (fd >= 0)
		return fd;
	fprintf(stderr, "rdmacm-muxctl: cannot connect to %s: %s\n  (%s)\n",
		path, strerror(-fd), hint);
	return -1;
}

/* One query line to the status socket; its answer, whole. */
char *muxctl_status_fetch(const char *path, const char *query, int timeout_ms)
{
	size_t len = 0, cap = 65536;
	struct pollfd pfd;
	char *buf;
	ssize_t n;
	int fd;

	fd = muxctl_status_connect(
		path,
		"is rdmacm-muxd running, and may you open its status socket?");
	if (fd < 0)
		return NULL;
	if (send(fd, query, strlen(query), MSG_NOSIGNAL) !=
		    (ssize_t)strlen(query) ||
	    send(fd, "\n", 1, MSG_NOSIGNAL) != 1) {
		fprintf(stderr, "rdmacm-muxctl: write: %s\n", strerror(errno));
		close(fd);
		return NULL;
	}
	buf = malloc(cap);
	pfd.fd = fd;
	pfd.events = POLLIN;
	while (buf) {
		if (poll(&pfd, 1, timeout_ms) <= 0) {
			fprintf(stderr,
				"rdmacm-muxctl: no status from %s within %d ms\n",
				path, timeout_ms);
			goto fail;
		}
		if (len + 1 >= cap) {
			char *nb;

			if (cap >= STATUS_MAX)
				goto fail;
			cap *= 2;
			nb = realloc(buf, cap);
			if (nb == NULL)
				goto fail;
			buf = nb;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0) {
			fprintf(stderr, "rdmacm-muxctl: read: %s\n",
				strerror(errno));
			goto fail;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (buf)
		buf[len] = '\0';
	return buf;
fail:
	free(buf);
	close(fd);
	return NULL;
}

/* Strings in the daemon's answers come, in part, from VMs: before any
 * reaches the terminal, its control characters are escaped in place. */
void muxctl_status_printable(json_t *v)
{
	const char *key;
	json_t *item;
	size_t i, len;
	char *buf;

	if (json_is_object(v)) {
		json_object_foreach(v, key, item)
			muxctl_status_printable(item);
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, item)
			muxctl_status_printable(item);
	} else if (json_is_string(v)) {
		len = json_string_length(v);
		if (text_is_clean(json_string_value(v), len))
			return;
		buf = malloc(len * 4 + 1);
		if (buf == NULL)
			return;
		text_escape(buf, len * 4 + 1, json_string_value(v), len);
		json_string_set(v, buf);
		free(buf);
	}
}
