// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * systemd's socket activation, spoken directly (documented as stable:
 * sd_listen_fds(3)): listening sockets handed over as descriptors 3..
 * with $LISTEN_FDS, $LISTEN_PID and $LISTEN_FDNAMES, claimed by the name
 * systemd gave them or by the path they are bound to.  Without them, the
 * daemon binds its own.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "mux/mux.h"

void listen_fds_take(struct listen_fds *lf)
{
	const char *pid = getenv("LISTEN_PID"), *n = getenv("LISTEN_FDS");
	const char *names = getenv("LISTEN_FDNAMES");
	int i, count;

	memset(lf, 0, sizeof(*lf));
	if (pid == NULL || n == NULL || atol(pid) != (long)getpid())
		return;
	count = atoi(n);
	if (count < 0)
		count = 0;
	for (i = 0; i < count && i < LISTEN_FDS_MAX; i++) {
		const char *end;
		size_t len;

		lf->fd[i] = 3 + i;
		fcntl(lf->fd[i], F_SETFD, FD_CLOEXEC);
		/* Names are colon-separated, in descriptor order. */
		if (names) {
			end = strchr(names, ':');
			len = end ? (size_t)(end - names) : strlen(names);
			snprintf(lf->name[i], sizeof(lf->name[i]), "%.*s",
				 (int)len, names);
			names = end ? end + 1 : NULL;
		}
	}
	lf->n = i;
	/* Not for children (none are started, but the contract says so). */
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
}

/* The socket handed over for PATH: by its name (FileDescriptorName=; name
 * may be NULL), or by the path it is bound to.  -1 when there is none. */
int listen_fds_claim(struct listen_fds *lf, const char *name, const char *path)
{
	struct sockaddr_un sun;
	socklen_t len;
	int i, fd;

	for (i = 0; i < lf->n; i++) {
		int by_name = name && name[0] && strcmp(lf->name[i], name) == 0;

		if (lf->fd[i] < 0)
			continue;
		len = sizeof(sun);
		memset(&sun, 0, sizeof(sun));
		if (!by_name && (getsockname(lf->fd[i], (struct sockaddr *)&sun,
					     &len) < 0 ||
				 sun.sun_family != AF_UNIX ||
				 strcmp(sun.sun_path, path) != 0))
			continue;
		fd = lf->fd[i];
		lf->fd[i] = -1;
		return fd;
	}
	return -1;
}

void listen_fds_close_unclaimed(struct listen_fds *lf)
{
	int i;

	for (i = 0; i < lf->n; i++) {
		if (lf->fd[i] < 0)
			continue;
		log_warnx(
			"socket activation: descriptor %d (\"%s\") matches no socket of this daemon; closed",
			lf->fd[i], lf->name[i]);
		close(lf->fd[i]);
		lf->fd[i] = -1;
	}
}
