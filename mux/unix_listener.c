// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The daemon's unix sockets (clients, status, admin), set up as smtpd's
 * control socket is: refuse to start if another daemon holds the path's
 * lock (or, not using locks, answers on it), remove a crashed daemon's
 * socket (a socket only), bind with a umask so the mode is never
 * wider than asked, then chmod.  Each one's accepting pauses, rather than
 * spins, while the process is out of descriptors.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "mux/mux.h"
#include "common/unix_socket.h"
#include "common/log.h"

#define LISTEN_BACKLOG 128
/* Out of descriptors, accepting pauses: first briefly (the descriptors a
 * burst of closing clients frees come back within milliseconds, and the
 * connections queued behind dead ones drain a few per retry), then for
 * twice as long each time, up to the longest pause, so that a process
 * that stays out of them does not spin. */
#define LISTENER_PAUSE_MIN_MS 10
#define LISTENER_PAUSE_MAX_MS 500

static int unix_listener_socket(const char *path, mode_t mode, uid_t owner,
				gid_t group, int backlog)
{
	struct sockaddr_un sun;
	mode_t old_umask;
	socklen_t len;
	struct stat st;
	int fd, rc;

	if (!unix_socket_path_listenable(path) ||
	    unix_socket_address(path, &sun, &len) < 0) {
		log_warnx("%s: not a socket path of 1..%d characters", path,
			  UNIX_SOCKET_PATH_MAX);
		return -ENAMETOOLONG;
	}
	/* The lock says no daemon uses the path; a socket there is a
	 * crashed one's.  Anything else there is somebody's file. */
	if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
		log_warnx("%s: exists and is not a socket; not removing it",
			  path);
		return -EEXIST;
	}
	fd = unix_socket_connect(path, SOCK_STREAM);
	if (fd >= 0) {
		log_warnx("%s: another daemon is already listening", path);
		close(fd);
		return -EADDRINUSE;
	}
	if (unlink(path) < 0 && errno != ENOENT) {
		log_warn("%s: cannot remove stale socket", path);
		return -errno;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	old_umask = umask(~mode & 0777);
	rc = bind(fd, (struct sockaddr *)&sun, len);
	umask(old_umask);
	/* Owner and group before the mode: the mode never applies to a
	 * wider audience than asked, even for an instant. */
	if (rc == 0 && (owner != (uid_t)-1 || group != (gid_t)-1) &&
	    chown(path, owner, group) < 0) {
		rc = -errno;
		log_warn("%s: cannot set owner/group", path);
		close(fd);
		unlink(path);
		return rc;
	}
	if (rc < 0 || chmod(path, mode) < 0 || listen(fd, backlog) < 0) {
		rc = -errno;
		log_warn("%s: cannot listen", path);
		close(fd);
		return rc;
	}
	return fd;
}

static void unix_listener_accept(struct evconnlistener *l, evutil_socket_t fd,
				 struct sockaddr *sa, int salen, void *arg)
{
	struct unix_listener *ul = arg;

	if (ul->short_since_ms) {
		log_info("%s: accepting again after %llu ms out of descriptors",
			 ul->path,
			 (unsigned long long)(mux_now_ms() -
					      ul->short_since_ms));
		ul->short_since_ms = 0;
	}
	ul->pause_ms = 0;
	ul->accept(l, fd, sa, salen, ul->arg);
}

static void unix_listener_resume(evutil_socket_t fd, short what, void *arg)
{
	struct unix_listener *ul = arg;

	(void)fd;
	(void)what;
	evconnlistener_enable(ul->lev);
}

static void unix_listener_error(struct evconnlistener *l, void *arg)
{
	struct unix_listener *ul = arg;
	int err = EVUTIL_SOCKET_ERROR();
	struct timeval tv;

	if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
		/* The connection stays queued and the socket readable;
		 * retrying at once would spin.  Pause, then try again. */
		ul->pause_ms = ul->pause_ms ? 2 * ul->pause_ms
					    : LISTENER_PAUSE_MIN_MS;
		if (ul->pause_ms > LISTENER_PAUSE_MAX_MS)
			ul->pause_ms = LISTENER_PAUSE_MAX_MS;
		/* One warning when it starts, one line when it ends. */
		if (ul->short_since_ms == 0) {
			ul->short_since_ms = mux_now_ms();
			log_warnx(
				"%s: accept: %s; pausing, retrying for up to every %d ms",
				ul->path, strerror(err), LISTENER_PAUSE_MAX_MS);
		}
		tv.tv_sec = 0;
		tv.tv_usec = (suseconds_t)ul->pause_ms * 1000;
		evconnlistener_disable(l);
		event_add(ul->resume, &tv);
		return;
	}
	log_warnx("%s: accept: %s", ul->path, strerror(err));
}

int unix_listener_backlog(unsigned want, const char *path)
{
	unsigned max = 0;
	FILE *f;

	if (want < LISTEN_BACKLOG)
		return LISTEN_BACKLOG;
	/* The kernel bounds every listen() by net.core.somaxconn, quietly:
	 * say so, as a storm of clients beyond it meets EAGAIN. */
	f = fopen("/proc/sys/net/core/somaxconn", "r");
	if (f) {
		if (fscanf(f, "%u", &max) != 1)
			max = 0;
		fclose(f);
	}
	if (max && want > max) {
		log_info(
			"%s: listen backlog %u, bounded by net.core.somaxconn (%u clients may connect at once; raise it for more)",
			path, max, max);
		want = max;
	}
	return want > INT_MAX ? INT_MAX : (int)want;
}

int unix_listener_open(struct unix_listener *ul, struct event_base *base,
		       const char *path, mode_t mode, uid_t owner, gid_t group,
		       int given, int backlog, evconnlistener_cb accept,
		       void *arg)
{
	char lock[sizeof(ul->lock.path)];
	int fd;

	memset(ul, 0, sizeof(*ul));
	ul->lock.fd = -1;
	if ((size_t)snprintf(lock, sizeof(lock), "%s.lock", path) >=
	    sizeof(lock)) {
		log_warnx("%s: socket path too long", path);
		if (given >= 0)
			close(given);
		return -ENAMETOOLONG;
	}
	fd = lockfile_take_or_say(&ul->lock, lock, path);
	if (fd < 0) {
		if (given >= 0)
			close(given);
		return fd;
	}
	if (given >= 0) {
		/* systemd's (socket activation): it made the socket, with
		 * its mode and owner, and keeps the path. */
		fd = given;
		evutil_make_socket_nonblocking(fd);
		ul->given = 1;
		log_info("%s: taken from systemd", path);
	} else {
		fd = unix_listener_socket(path, mode, owner, group,
					  backlog > 0 ? backlog
						      : LISTEN_BACKLOG);
	}
	if (fd < 0) {
		lockfile_release(&ul->lock);
		return fd;
	}
	ul->path = path;
	ul->accept = accept;
	ul->arg = arg;
	/* 0: listening already, with its backlog (ours, or systemd's
	 * Backlog=); libevent's own default would cut it to 128. */
	ul->lev = evconnlistener_new(base, unix_listener_accept, ul,
				     LEV_OPT_CLOSE_ON_FREE, 0, fd);
	if (ul->lev == NULL) {
		close(fd);
		if (!ul->given)
			unlink(path);
		lockfile_release(&ul->lock);
		return -ENOMEM;
	}
	ul->resume = evtimer_new(base, unix_listener_resume, ul);
	if (ul->resume == NULL) {
		unix_listener_close(ul);
		return -ENOMEM;
	}
	evconnlistener_set_error_cb(ul->lev, unix_listener_error);
	return 0;
}

void unix_listener_close(struct unix_listener *ul)
{
	if (ul->lev) {
		evconnlistener_free(ul->lev);
		ul->lev = NULL;
		if (!ul->given) /* systemd's path stays for the next start */
			unlink(ul->path);
	}
	if (ul->resume) {
		event_free(ul->resume);
		ul->resume = NULL;
	}
	if (ul->path) { /* opened: the lock is held */
		lockfile_release(&ul->lock);
		ul->path = NULL;
	}
}
