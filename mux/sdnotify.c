// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * systemd's notify protocol, spoken directly (a few lines, documented as
 * stable: sd_notify(3)), so that the daemon needs no libsystemd:
 * readiness, status and the watchdog as datagrams to $NOTIFY_SOCKET.
 * Without it, nothing changes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "mux/mux.h"
#include "common/unix_socket.h"

int sdnotify(const char *fmt, ...)
{
	const char *path = getenv("NOTIFY_SOCKET");
	char msg[512];
	va_list ap;
	int fd, rc = 0;

	if (path == NULL || (path[0] != '/' && path[0] != '@'))
		return 0;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fd = unix_socket_connect(path, SOCK_DGRAM);
	if (fd < 0)
		return fd;
	if (send(fd, msg, strlen(msg), MSG_NOSIGNAL) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

uint64_t sdnotify_watchdog_usec(void)
{
	const char *usec = getenv("WATCHDOG_USEC"),
		   *pid = getenv("WATCHDOG_PID");

	if (usec == NULL || (pid && atol(pid) != (long)getpid()))
		return 0;
	return strtoull(usec, NULL, 10);
}
