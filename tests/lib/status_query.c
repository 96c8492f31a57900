// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * One status query for the test programs (status_query.h).  The daemon
 * answers one document and closes the connection, so the reply is read
 * to its end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tests/lib/status_query.h"

json_t *status_query(const char *path)
{
	static const char q[] = "{\"op\":\"status\"}\n";
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	size_t len = 0, cap = 1 << 20;
	char *buf = malloc(cap);
	json_t *j = NULL;
	ssize_t n;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	if (buf && fd >= 0 &&
	    connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0 &&
	    write(fd, q, sizeof(q) - 1) == (ssize_t)sizeof(q) - 1) {
		for (;;) {
			if (len + 65536 > cap) {
				char *nb = realloc(buf, cap *= 2);

				if (nb == NULL)
					break;
				buf = nb;
			}
			n = read(fd, buf + len, cap - len - 1);
			if (n <= 0)
				break;
			len += (size_t)n;
		}
		buf[len] = '\0';
		j = json_loads(buf, 0, NULL);
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	return j;
}

long long status_int_at(json_t *j, const char *path)
{
	char key[64];
	const char *p = path, *dot;

	while (j && (dot = strchr(p, '.')) != NULL) {
		snprintf(key, sizeof(key), "%.*s", (int)(dot - p), p);
		j = json_object_get(j, key);
		p = dot + 1;
	}
	j = j ? json_object_get(j, p) : NULL;
	return json_is_integer(j) ? json_integer_value(j) : -1;
}
