// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "common/unix_socket.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

int unix_socket_address(const char *path, struct sockaddr_un *sun,
			socklen_t *len)
{
	size_t n = strlen(path);

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	if (n == 0)
		return -EINVAL;
	/* A path keeps its terminating NUL; an abstract name has none. */
	if (n + (path[0] != '@') > sizeof(sun->sun_path))
		return -ENAMETOOLONG;
	memcpy(sun->sun_path, path, n);
	if (path[0] == '@')
		sun->sun_path[0] = '\0';
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
			   (path[0] != '@'));
	return 0;
}

_Static_assert(UNIX_SOCKET_PATH_MAX + 1 ==
		       sizeof(((struct sockaddr_un *)0)->sun_path),
	       "a path keeps its NUL in sun_path");

int unix_socket_path_listenable(const char *path)
{
	struct sockaddr_un sun;
	socklen_t len;

	return path[0] != '@' && unix_socket_address(path, &sun, &len) == 0;
}

int unix_socket_connect(const char *path, int type)
{
	struct sockaddr_un sun;
	socklen_t len;
	int fd, rc;

	rc = unix_socket_address(path, &sun, &len);
	if (rc < 0)
		return rc;
	fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sun, len) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}
