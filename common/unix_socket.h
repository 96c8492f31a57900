/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_COMMON_UNIX_SOCKET_H
#define RCM_COMMON_UNIX_SOCKET_H

#include <sys/socket.h>
#include <sys/un.h>

/*
 * Unix-domain socket addresses and connections, for the daemon, its CLI
 * and the library alike.  A path that starts with '@' names the abstract
 * namespace (systemd's convention for NOTIFY_SOCKET).
 */

/* The longest path a socket may have (sun_path less its NUL). */
#define UNIX_SOCKET_PATH_MAX 107

/* 1 if path can be a listening socket's: 1..UNIX_SOCKET_PATH_MAX
 * characters, not an abstract name ('@'), which no lock file or
 * permission could guard.  The daemon's check at start-up and at bind. */
int unix_socket_path_listenable(const char *path);

/* *sun and *len for path: 0, or -ENAMETOOLONG, or -EINVAL for "". */
int unix_socket_address(const char *path, struct sockaddr_un *sun,
			socklen_t *len);

/* A close-on-exec socket of type (SOCK_STREAM or SOCK_DGRAM, with
 * SOCK_NONBLOCK if wanted) connected to path: its descriptor, or -errno. */
int unix_socket_connect(const char *path, int type);

#endif
