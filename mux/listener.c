// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The client socket, set up as smtpd's control socket is: refuse to start
 * if another daemon answers on the path, remove a stale socket, bind with
 * a umask so the mode is never wider than asked, then chmod.  Accepted
 * clients are identified by SO_PEERCRED and handed to a worker.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/listener.h>

#include "mux.h"
#include "../common/log.h"

#define LISTEN_BACKLOG 128
/* How long accepting pauses when the process is out of descriptors. */
#define LISTENER_PAUSE_MS 500

int unix_listen_socket(const char *path, mode_t mode, uid_t owner, gid_t group)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	mode_t old_umask;
	int fd, rc;

	if (strlen(path) >= sizeof(sun.sun_path)) {
		log_warnx("%s: socket path too long (max %zu)", path,
			  sizeof(sun.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	strcpy(sun.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0) {
		log_warnx("%s: another daemon is already listening", path);
		close(fd);
		return -EADDRINUSE;
	}
	close(fd);
	if (unlink(path) < 0 && errno != ENOENT) {
		log_warn("%s: cannot remove stale socket", path);
		return -errno;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	old_umask = umask(~mode & 0777);
	rc = bind(fd, (struct sockaddr *)&sun, sizeof(sun));
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
	if (rc < 0 || chmod(path, mode) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
		rc = -errno;
		log_warn("%s: cannot listen", path);
		close(fd);
		return rc;
	}
	return fd;
}

static void refuse_client(int fd, int err, const char *message)
{
	uint8_t hdr[PROTO_HDR_SIZE];
	json_t *ev = json_pack("{s:s, s:s, s:i, s:s}", "event", "refused",
			       "code", proto_errno_name(err), "errno", err,
			       "message", message);
	char *text = json_dumps(ev, JSON_COMPACT);

	/* Best effort on a fresh socket: the frame fits its buffer. */
	if (text) {
		proto_header_encode(hdr, PROTO_KIND_JSON, PROTO_FLAG_EVENT, 0,
				    (uint32_t)strlen(text));
		if (send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL | MSG_DONTWAIT) ==
		    (ssize_t)sizeof(hdr))
			send(fd, text, strlen(text), MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	free(text);
	json_decref(ev);
	close(fd);
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd,
		      struct sockaddr *sa, int salen, void *arg)
{
	struct mux *mux = arg;
	struct ucred cred = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
	socklen_t clen = sizeof(cred);
	struct client_info *ci;
	struct worker_msg *msg;
	struct policy *pol;
	uint64_t suppressed;
	unsigned w;
	int rc, admitted;

	(void)l;
	(void)sa;
	(void)salen;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		log_warn("accept: SO_PEERCRED");
		close(fd);
		return;
	}
	/* Identity comes from the kernel; the policy decides before the
	 * peer can say anything. */
	pol = mux_policy_get(mux);
	admitted = policy_admits(pol, cred.uid, cred.gid);
	policy_unref(pol);
	if (!admitted) {
		char why[128];

		atomic_fetch_add(&mux->stats.clients_refused_policy, 1);
		atomic_fetch_add(&mux->stats.clients_refused, 1);
		snprintf(why, sizeof(why), "uid %d gid %d is not allowed by policy",
			 (int)cred.uid, (int)cred.gid);
		if (log_ratelimit_allow(&mux->accept_rl, &suppressed))
			log_warnx("refusing client pid %d: %s (%llu similar suppressed)",
				  (int)cred.pid, why, (unsigned long long)suppressed);
		refuse_client(fd, EACCES, why);
		return;
	}
	w = atomic_fetch_add(&mux->next_worker, 1) % (unsigned)mux->nworkers;
	rc = clients_add(&mux->clients, mux->cfg.max_clients, cred.pid, cred.uid,
			 cred.gid, w, &ci);
	if (rc < 0) {
		atomic_fetch_add(&mux->stats.clients_refused, 1);
		log_warnx("refusing client pid %d uid %d: %s", (int)cred.pid,
			  (int)cred.uid, rc == -EBUSY ? "too many clients"
						      : "out of memory");
		refuse_client(fd, -rc, rc == -EBUSY ? "too many clients"
						    : "out of memory");
		return;
	}
	msg = calloc(1, sizeof(*msg));
	if (msg == NULL) {
		clients_remove(&mux->clients, ci->id);
		close(fd);
		return;
	}
	atomic_fetch_add(&mux->stats.clients_accepted, 1);
	msg->type = WMSG_NEW_CLIENT;
	msg->fd = fd;
	msg->info = ci;
	msg->client_id = ci->id;
	worker_post(mux->workers[w], msg);
}

static void listener_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct mux *mux = arg;

	(void)fd;
	(void)what;
	evconnlistener_enable(mux->listener);
}

static void accept_error_cb(struct evconnlistener *l, void *arg)
{
	struct mux *mux = arg;
	struct timeval tv = { 0, LISTENER_PAUSE_MS * 1000 };
	int err = EVUTIL_SOCKET_ERROR();

	if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
		/* Pending connections stay queued; retrying at once would
		 * spin.  Pause, then try again. */
		log_warnx("accept: %s; pausing for %d ms", strerror(err),
			  LISTENER_PAUSE_MS);
		evconnlistener_disable(l);
		event_add(mux->listener_resume, &tv);
		return;
	}
	log_warnx("accept: %s", strerror(err));
}

int listener_start(struct mux *mux, struct event_base *base)
{
	int fd = unix_listen_socket(mux->cfg.socket_path, mux->cfg.socket_mode,
				    mux->cfg.socket_owner, mux->cfg.socket_group);

	if (fd < 0)
		return fd;
	mux->listener = evconnlistener_new(base, accept_cb, mux,
					   LEV_OPT_CLOSE_ON_FREE, -1, fd);
	if (mux->listener == NULL) {
		close(fd);
		return -ENOMEM;
	}
	evconnlistener_set_error_cb(mux->listener, accept_error_cb);
	mux->listener_resume = evtimer_new(base, listener_resume_cb, mux);
	return 0;
}

void listener_stop(struct mux *mux)
{
	if (mux->listener) {
		evconnlistener_free(mux->listener);
		mux->listener = NULL;
		unlink(mux->cfg.socket_path);
	}
	if (mux->listener_resume) {
		event_free(mux->listener_resume);
		mux->listener_resume = NULL;
	}
}
