// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Delivery: how what the ports receive and decide reaches the clients'
 * sessions, and what a worker does with each message of its inbox.  The
 * daemon wires both in (main.c: mux->deliver, worker_pool_start), so that
 * ports and workers call nothing above them and the layers stay a line:
 * session -> requests -> port, and delivery -> session -> worker.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mux/mux.h"

/* QEMU's sessions order their output themselves: through their worker,
 * each within its share of the worker's inbox (the message holds the
 * client until the worker has taken it). */
static int delivery_post_mad(struct mux *mux, struct client_info *ci,
			     const struct proto_mad *m)
{
	struct worker_msg *msg;

	if (atomic_fetch_add(&ci->inbox_mads, 1) >= WORKER_CLIENT_INBOX_MADS) {
		atomic_fetch_sub(&ci->inbox_mads, 1);
		atomic_fetch_add(&mux->stats.drops[DROP_WORKER_QUEUE_FULL], 1);
		return -ENOBUFS;
	}
	msg = malloc(sizeof(*msg));
	if (msg == NULL) {
		atomic_fetch_sub(&ci->inbox_mads, 1);
		atomic_fetch_add(&mux->stats.drops[DROP_WORKER_QUEUE_FULL], 1);
		return -ENOMEM;
	}
	memset(msg, 0, offsetof(struct worker_msg, mad));
	msg->type = WMSG_MAD_IN;
	msg->client_id = ci->id;
	msg->info = clients_hold(ci);
	msg->mad = *m;
	worker_post(mux->workers[ci->worker], msg);
	return 0;
}

/* A MAD_IN message taken (or dropped at the stop): its client's share
 * back. */
static void delivery_inbox_release(struct worker_msg *m)
{
	atomic_fetch_sub(&m->info->inbox_mads, 1);
	clients_put(m->info);
	m->info = NULL;
}

/* Run to completion where it can: a MAD goes straight to its client's
 * socket from the thread that routed it, queued with the rest of this
 * pass on a worker, at once on the port thread. */
static int delivery_mad(struct mux *mux, struct client_info *ci,
			const struct proto_mad *m)
{
	struct worker *self = worker_self();

	if (self != NULL && self == mux->workers[ci->worker])
		return session_deliver_mad(self, ci->id, m);
	if (ci->qemu_port < 0 && self != NULL)
		return session_deliver_from(self, ci, m);
	if (ci->qemu_port < 0)
		return session_deliver_now(mux, ci, m);
	return delivery_post_mad(mux, ci, m);
}

/*
 * The drop policy: a MAD the daemon accepted from a client (its send
 * was answered ok) can still be lost here, as on a wire, when its
 * receiver is not taking what it is sent (its queue is full).  Such a
 * loss is not silent: the receiver's mads_dropped and the sender's
 * mads_lost count it, and a sender that is a client of ours (the MAD's
 * source GID is one it registered) gets a mad_lost event with its
 * running total (one per burst; one that finds the sender's own queue
 * full waits until it drains), which the library reports through its
 * mad_lost callback.  The sender's CM retransmits on its own timeout, as
 * after any loss.
 */
static void delivery_lost(struct mux *mux, const struct proto_mad *m)
{
	char src[GID_STRLEN], dst[GID_STRLEN], *text;
	struct worker_msg *msg;
	struct client_info *ci;
	struct gid sgid, dgid;
	uint64_t sender;
	json_t *ev;

	memcpy(sgid.raw, m->addr.remote_gid, 16);
	memcpy(dgid.raw, m->addr.local_gid, 16);
	sender = router_gid_owner(mux->router, m->addr.port, &sgid);
	ci = sender ? clients_get(mux->clients, sender) : NULL;
	if (ci == NULL)
		return; /* from the fabric: its host's CM retransmits */
	atomic_fetch_add(&ci->ctr.mads_lost, 1);
	atomic_fetch_add(&mux->stats.losses_reported, 1);
	/* One report in flight per client: it carries the running total,
	 * so a burst of losses costs one event, and none is missed. */
	if (atomic_exchange(&ci->loss_note_posted, 1)) {
		clients_put(ci);
		return;
	}
	ev = json_pack("{s:i, s:s, s:s, s:s}", "port", (int)m->addr.port,
		       "attr",
		       m->mad_len >= MAD_HDR_SIZE
			       ? cm_attr_name(cm_mad_attr_id(m->mad))
			       : "runt",
		       "src_gid", gid_format(&sgid, src), "dst_gid",
		       gid_format(&dgid, dst));
	text = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
	json_decref(ev);
	msg = text ? worker_msg_new(WMSG_NOTE, sender) : NULL;
	if (msg != NULL) {
		msg->text = text;
		text = NULL;
		worker_post(mux->workers[ci->worker], msg);
	} else {
		atomic_store(&ci->loss_note_posted, 0);
	}
	free(text);
	clients_put(ci);
}

/* At once, or through the client's worker where it cannot be queued at
 * once.  QEMU was answered when its MAD was checked (qemu_client.c): its
 * protocol has no later verdict. */
static void delivery_send_done(struct mux *mux, struct client_info *ci,
			       uint32_t rid, int rc)
{
	struct worker_msg *msg;

	if (ci->qemu_port >= 0 || session_send_done_now(mux, ci, rid, rc) == 0)
		return;
	msg = worker_msg_new(WMSG_SEND_DONE, ci->id);

	if (msg != NULL) {
		msg->rid = rid;
		msg->rc = rc;
		worker_post(mux->workers[ci->worker], msg);
	}
}

/* Every worker hands the event to its ready sessions. */
static void delivery_broadcast(struct mux *mux, const char *text)
{
	struct worker_msg *msg;
	int i;

	for (i = 0; i < mux->nworkers; i++) {
		msg = worker_msg_new(WMSG_EVENT, 0);
		if (msg == NULL)
			break;
		msg->text = strdup(text);
		worker_post(mux->workers[i], msg);
	}
}

/* struct mux_delivery's only implementation; why it is a table at all:
 * mux.h, delivery.c's section. */
const struct mux_delivery delivery_to_sessions = {
	.mad = delivery_mad,
	.lost = delivery_lost,
	.send_done = delivery_send_done,
	.broadcast = delivery_broadcast,
};

static void *delivery_worker_attach(struct worker *w)
{
	return session_set_new(worker_mux(w), worker_index(w), worker_base(w));
}

static void delivery_worker_handle(struct worker *w, struct worker_msg *m)
{
	switch (m->type) {
	case WMSG_NEW_CLIENT: session_start(w, m->fd, m->info); break;
	case WMSG_MAD_IN:
		delivery_inbox_release(m);
		if (session_deliver_mad(w, m->client_id, &m->mad) == -ENOBUFS)
			delivery_lost(worker_mux(w), &m->mad);
		break;
	case WMSG_EVENT: session_broadcast_event(w, m->text); break;
	case WMSG_KICK: session_kick(w, m->client_id, m->text); break;
	case WMSG_FLUSH: session_flush_client(w, m->client_id); break;
	case WMSG_NOTE: session_note(w, m->client_id, m->text); break;
	case WMSG_SEND_DONE:
		session_send_done(w, m->client_id, m->rid, m->rc);
		break;
	case WMSG_STOP: session_close_all(w); break;
	}
}

/* A new client the stopped worker never took: it goes. */
static void delivery_worker_discard(struct worker *w, struct worker_msg *m)
{
	if (m->type == WMSG_NEW_CLIENT) {
		close(m->fd);
		clients_remove(worker_mux(w)->clients, m->info->id);
	}
	if (m->type == WMSG_MAD_IN)
		delivery_inbox_release(m);
}

static void delivery_worker_detach(struct worker *w, void *state)
{
	session_close_all(w);
	session_set_free(state);
}

/* struct worker_ops's only implementation (mux.h says why a table). */
const struct worker_ops delivery_worker_ops = {
	.attach = delivery_worker_attach,
	.handle = delivery_worker_handle,
	.discard = delivery_worker_discard,
	.detach = delivery_worker_detach,
};
