// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The client sockets: the v1 protocol's, and one per port for QEMU's
 * pvrdma in the protocol of QEMU's old rdmacm-mux.  Accepted clients are
 * identified by SO_PEERCRED, checked against the policy and the client
 * limit, and handed to a worker, whatever they speak.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/listener.h>

#include "mux/mux.h"
#include "common/log.h"

static void listener_refuse_client(int fd, int err, const char *message)
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
			send(fd, text, strlen(text),
			     MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	free(text);
	json_decref(ev);
	close(fd);
}

/* A refusal in the client's own protocol; QEMU's has no word for it. */
static void listener_refuse(struct client_listener *cl, int fd, int err,
			    const char *message)
{
	if (cl->qemu_port >= 0)
		close(fd);
	else
		listener_refuse_client(fd, err, message);
}

static void listener_accept_cb(struct evconnlistener *l, evutil_socket_t fd,
			       struct sockaddr *sa, int salen, void *arg)
{
	struct client_listener *cl = arg;
	struct mux *mux = cl->mux;
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
		snprintf(why, sizeof(why),
			 "uid %d gid %d is not allowed by policy",
			 (int)cred.uid, (int)cred.gid);
		if (log_ratelimit_allow(&mux->accept_rl, &suppressed))
			log_warnx(
				"refusing client pid %d: %s (%llu similar suppressed)",
				(int)cred.pid, why,
				(unsigned long long)suppressed);
		listener_refuse(cl, fd, EACCES, why);
		return;
	}
	w = atomic_fetch_add(&mux->next_worker, 1) % (unsigned)mux->nworkers;
	rc = clients_add(mux->clients, mux->cfg.max_clients,
			 mux->cfg.max_clients_per_uid, cred.pid, cred.uid,
			 cred.gid, w, cl->qemu_port, &ci);
	if (rc < 0) {
		char why[128];

		atomic_fetch_add(&mux->stats.clients_refused, 1);
		if (rc == -EUSERS) {
			atomic_fetch_add(&mux->stats.clients_refused_uid_limit,
					 1);
			snprintf(
				why, sizeof(why),
				"uid %d already has %u clients (--max-clients-per-uid)",
				(int)cred.uid, mux->cfg.max_clients_per_uid);
		} else if (rc == -EBUSY) {
			snprintf(why, sizeof(why), "too many clients (%u)",
				 mux->cfg.max_clients);
		} else {
			snprintf(why, sizeof(why), "out of memory");
		}
		if (log_ratelimit_allow(&mux->accept_rl, &suppressed))
			log_warnx(
				"refusing client pid %d uid %d: %s (%llu similar suppressed)",
				(int)cred.pid, (int)cred.uid, why,
				(unsigned long long)suppressed);
		listener_refuse(cl, fd, -rc, why);
		return;
	}
	msg = calloc(1, sizeof(*msg));
	if (msg == NULL) {
		clients_remove(mux->clients, ci->id);
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

int listener_start(struct mux *mux, struct event_base *base)
{
	struct client_listener *cl;
	struct port *p;
	int i, rc, backlog;

	mux->listener->mux = mux;
	mux->listener->qemu_port = -1;
	/* Every client may connect at once: after a restart they all come
	 * back together. */
	backlog = unix_listener_backlog(mux->cfg.max_clients,
					mux->cfg.socket_path);
	rc = unix_listener_open(&mux->listener->ul, base, mux->cfg.socket_path,
				mux->cfg.socket_mode, mux->cfg.socket_owner,
				mux->cfg.socket_group,
				listen_fds_claim(mux->listen_fds, "client",
						 mux->cfg.socket_path),
				backlog, listener_accept_cb, mux->listener);
	if (rc < 0)
		return rc;
	for (i = 0; i < mux->cfg.nqemu; i++) {
		p = mux_port_by_name(mux, mux->cfg.qemu[i].port);
		if (p == NULL) {
			log_warnx("--qemu-socket %s: no such port",
				  mux->cfg.qemu[i].port);
			return -ENODEV;
		}
		cl = &mux->qemu_listeners[mux->nqemu_listeners];
		cl->mux = mux;
		cl->qemu_port = (int)p->index;
		rc = unix_listener_open(&cl->ul, base, mux->cfg.qemu[i].path,
					mux->cfg.socket_mode,
					mux->cfg.socket_owner,
					mux->cfg.socket_group,
					listen_fds_claim(mux->listen_fds, NULL,
							 mux->cfg.qemu[i].path),
					backlog, listener_accept_cb, cl);
		if (rc < 0)
			return rc;
		mux->nqemu_listeners++;
		log_info("port %s: QEMU (rdmacm-mux protocol) clients on %s",
			 p->name, mux->cfg.qemu[i].path);
	}
	return 0;
}

void listener_stop(struct mux *mux)
{
	int i;

	unix_listener_close(&mux->listener->ul);
	for (i = 0; i < mux->nqemu_listeners; i++)
		unix_listener_close(&mux->qemu_listeners[i].ul);
	mux->nqemu_listeners = 0;
}
