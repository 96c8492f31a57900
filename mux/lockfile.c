// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Lock files: one daemon per socket and per port.  A POSIX write lock on
 * PATH, which the kernel drops when the process dies however it dies, so
 * a crashed daemon never leaves a lock behind; the file holds the pid for
 * the message a second daemon prints.  The file is removed on release:
 * a locker checks, once it holds the lock, that the path still names the
 * file it locked, and starts over if a releasing daemon removed it in
 * between.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mux/mux.h"

#define LOCKFILE_TRIES 8

static int lockfile_take(struct lockfile *lf, const char *path, pid_t *holder)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	struct stat held, now;
	int fd, tries, err;
	char pid[16];

	lf->fd = -1;
	*holder = 0;
	if ((size_t)snprintf(lf->path, sizeof(lf->path), "%s", path) >=
	    sizeof(lf->path))
		return -ENAMETOOLONG;
	for (tries = 0; tries < LOCKFILE_TRIES; tries++) {
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
			  0644);
		if (fd < 0)
			return -errno;
		if (fcntl(fd, F_SETLK, &fl) < 0) {
			err = errno;
			if (err == EAGAIN || err == EACCES) {
				struct flock q = { .l_type = F_WRLCK,
						   .l_whence = SEEK_SET };

				if (fcntl(fd, F_GETLK, &q) == 0 &&
				    q.l_type != F_UNLCK)
					*holder = q.l_pid;
				err = EADDRINUSE;
			}
			close(fd);
			return -err;
		}
		if (fstat(fd, &held) == 0 && stat(path, &now) == 0 &&
		    held.st_dev == now.st_dev && held.st_ino == now.st_ino)
			break;
		close(fd); /* removed by its last holder: again */
		fd = -1;
	}
	if (fd < 0)
		return -EAGAIN;
	snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) < 0 || write(fd, pid, strlen(pid)) < 0)
		log_warn("%s: cannot write the pid", path);
	lf->fd = fd;
	return 0;
}

int lockfile_take_or_say(struct lockfile *lf, const char *path,
			 const char *what)
{
	pid_t holder;
	int rc = lockfile_take(lf, path, &holder);

	if (rc == -EADDRINUSE && holder > 0)
		log_warnx(
			"%s is in use by another rdmacm-muxd (pid %d; lock %s)",
			what, (int)holder, path);
	else if (rc == -EADDRINUSE)
		log_warnx("%s is in use by another rdmacm-muxd (lock %s)", what,
			  path);
	else if (rc < 0)
		log_warnx("%s: cannot take the lock %s: %s", what, path,
			  strerror(-rc));
	return rc;
}

void lockfile_release(struct lockfile *lf)
{
	if (lf->fd < 0)
		return;
	/* Removed while still held: see the check in lockfile_take(). */
	unlink(lf->path);
	close(lf->fd);
	lf->fd = -1;
}
