// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * QEMU's rdmacm-mux protocol (pvrdma's), both directions, for a session
 * that speaks it: its hello (by the QEMU process's identity, QEMU having
 * no word for one), its requests (REG, UNREG, a MAD to send) each
 * answered at once, and the inbound MADs it is handed, which wait until
 * no response is due.  The session owns the socket and its buffers; this
 * file owns what the protocol means.  The wire format is
 * protocol/qemu_msg.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "mux/mux.h"
#include "mux/conn_store.h"
#include "common/log.h"
#include "common/wire.h"

struct qemu_client {
	struct mux *mux;
	struct client_info *ci;
	struct evbuffer *pending; /* inbound MADs not yet handed on */
	/* Came to a restarted daemon and was not known again: its GIDs
	 * registered in the previous life are taken up at its sends. */
	int adopts;
};

/* QEMU's protocol has no word for a refusal: counted, logged (within
 * the refusals' budget), and the connection closes. */
static int qemu_client_refuse(struct mux *mux, struct client_info *ci,
			      _Atomic uint64_t *counter, int err,
			      const char *why)
{
	uint64_t suppressed;

	atomic_fetch_add(counter, 1);
	atomic_fetch_add(&mux->stats.clients_refused, 1);
	if (mux_refusal_log_allowed(mux, &suppressed))
		log_warnx(
			"client %llu (QEMU, pid %d): %s; closing (%llu similar suppressed)",
			(unsigned long long)ci->id, (int)ci->pid, why,
			(unsigned long long)suppressed);
	return err;
}

/* QEMU keeps no token across a daemon's restart, but its process is its
 * identity: its pid with the process's start time (a reused pid has
 * another), and the socket (port) it comes in on; the uid is checked
 * beside.  0, or -errno when /proc cannot say. */
static int qemu_client_identity(const struct client_info *ci,
				uint8_t identity[16])
{
	char path[64], buf[1024], *p;
	unsigned long long start = 0;
	ssize_t n;
	int fd, field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)ci->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = '\0';
	/* The command name may hold anything: fields follow its last ')'. */
	p = strrchr(buf, ')');
	for (field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (p == NULL || sscanf(p + 1, "%llu", &start) != 1 || start == 0)
		return -EIO;
	memset(identity, 0, 16);
	identity[0] = 'Q';
	wire_put16(identity + CONN_IDENTITY_PORT_OFF, (uint16_t)ci->qemu_port);
	wire_put32(identity + 4, (uint32_t)ci->pid);
	wire_put64(identity + 8, start);
	return 0;
}

/* A QEMU process back after the daemon's restart (QEMU's chardev with
 * reconnect=N) takes back its previous connection's GIDs and
 * connections; any other is a new owner the next restart keeps. */
static int qemu_client_session(struct mux *mux, struct client_info *ci)
{
	uint8_t identity[16];
	uint64_t old = 0, suppressed;
	int rc;

	if (qemu_client_identity(ci, identity) < 0)
		return 0; /* nothing proves it the same next time */
	rc = router_owner_claim_identity(mux->router, ci->uid, identity, ci->id,
					 &old);
	if (rc == 0) {
		atomic_fetch_add(&mux->stats.resumes, 1);
		if (mux_refusal_log_allowed(mux, &suppressed))
			log_finfo(
				&(struct log_fields){ ci->id, ci->name },
				"client %llu (QEMU, pid %d): the same process as client %llu of the previous daemon; its GIDs and connections are back (%llu similar suppressed)",
				(unsigned long long)ci->id, (int)ci->pid,
				(unsigned long long)old,
				(unsigned long long)suppressed);
		return 1;
	}
	if (rc == -ENOTUNIQ) {
		atomic_fetch_add(&mux->stats.resumes_refused, 1);
		/* Within its uid's budget: reconnecting buys no lines. */
		if (clients_log_allowed(mux, ci, &suppressed))
			log_fwarn(
				&(struct log_fields){ ci->id, ci->name }, -rc,
				"client %llu (QEMU, pid %d): its process had several connections on this socket before the restart, which cannot be told apart: none is taken back (%llu similar suppressed)",
				(unsigned long long)ci->id, (int)ci->pid,
				(unsigned long long)suppressed);
	}
	router_owner_add_qemu(mux->router, ci->id, ci->uid, identity);
	return 0;
}

static int qemu_client_hello(struct mux *mux, struct client_info *ci,
			     int *resumed)
{
	const struct policy_rule *rule;
	struct policy *pol;
	unsigned rule_max;
	char name[32], why[96];

	/* QEMU names no VM: the rule follows from its identity alone. */
	pol = mux_policy_get(mux);
	rule = policy_select(pol, ci->uid, ci->gid, NULL);
	if (rule == NULL) {
		policy_unref(pol);
		snprintf(why, sizeof(why),
			 "no policy rule for uid %d gid %d without a VM name",
			 (int)ci->uid, (int)ci->gid);
		return qemu_client_refuse(mux, ci,
					  &mux->stats.clients_refused_policy,
					  -EACCES, why);
	}
	snprintf(name, sizeof(name), "qemu-%d", (int)ci->pid);
	rule_max = rule->max_clients; /* pol may be gone after a refusal */
	if (clients_set_hello(mux->clients, ci, name, pol, rule) < 0) {
		snprintf(why, sizeof(why),
			 "the policy rule for uid %d allows %u clients at once",
			 (int)ci->uid, rule_max);
		return qemu_client_refuse(mux, ci,
					  &mux->stats
						   .clients_refused_rule_limit,
					  -EUSERS, why);
	}
	policy_token_bucket_init(&ci->tb, rule->mad_rate, rule->mad_burst,
				 mux_now_ms());
	*resumed = qemu_client_session(mux, ci);
	return 0;
}

/* The old daemon's codes: EACCES for what is someone else's or not
 * allowed, EINVAL for the rest. */
static enum qemu_msg_err qemu_client_code(int err)
{
	switch (err) {
	case 0: return QEMU_MSG_OK;
	case -EEXIST:
	case -EACCES:
	case -EPERM:
	case -EADDRNOTAVAIL:
	case -ENOENT: return QEMU_MSG_EACCES;
	default: return QEMU_MSG_EINVAL;
	}
}

static enum qemu_msg_err qemu_client_register(struct mux *mux,
					      struct client_info *ci,
					      struct port *port,
					      const struct gid *gid)
{
	char text[160];
	int idx, rc;

	/* A REG of a GID this QEMU owns already marks its guest's reset:
	 * stock QEMU sends no UNREG when its guest resets or reboots, and
	 * the rebooted guest adds its GIDs again.  The guest's CM is gone
	 * with its connections on that GID, as cm.c's device removal
	 * (cm_remove_one()) ends them: their peers are told (DREQ, REJ),
	 * and the GID is the guest's afresh (answered OK, where the old
	 * daemon said EEXIST, which QEMU only logs). */
	if (router_owns_gid(mux->router, port->index, gid, ci->id)) {
		router_reset_gid(mux->router, port->index, gid, ci->id);
		atomic_fetch_add(&mux->stats.qemu_resets, 1);
		return QEMU_MSG_OK;
	}
	/* QEMU registers a guest's GID before the host admin (libvirt) adds
	 * its address to the netdev: the table is checked at each send. */
	rc = requests_gid_register(mux, ci, port, gid, 0, 1, &idx, text,
				   sizeof(text));
	return qemu_client_code(rc);
}

/* QEMU registers a guest's GID once, when the guest adds it, and never
 * again: a QEMU the restarted daemon could not know again (its identity
 * unreadable, or ambiguous) would find its guest mute for good.  Such a
 * client's send from a GID it does not hold registers it, with the checks
 * of a REG (its rule, another's hold: a GID still held for the previous
 * daemon's unclaimed owner is free once the grace has ended). */
static void qemu_client_adopt(struct qemu_client *q, struct port *port,
			      const struct gid *gid)
{
	struct mux *mux = q->mux;
	char text[160], buf[GID_STRLEN];
	uint64_t suppressed;
	int idx;

	if (!q->adopts ||
	    router_owns_gid(mux->router, port->index, gid, q->ci->id))
		return;
	if (requests_gid_register(mux, q->ci, port, gid, 0, 1, &idx, text,
				  sizeof(text)) < 0)
		return;
	atomic_fetch_add(&mux->stats.qemu_adopted_gids, 1);
	if (clients_log_allowed(mux, q->ci, &suppressed))
		log_finfo(
			&(struct log_fields){ q->ci->id, q->ci->name },
			"client %llu (QEMU, pid %d): GID %s on %s registered at its first send: a restart could not know this QEMU again, and it never registers twice (%llu similar suppressed)",
			(unsigned long long)q->ci->id, (int)q->ci->pid,
			gid_format(gid, buf), port->name,
			(unsigned long long)suppressed);
}

static enum qemu_msg_err qemu_client_send(struct qemu_client *q,
					  struct port *port,
					  const struct qemu_msg *req)
{
	struct mux *mux = q->mux;
	struct client_info *ci = q->ci;
	struct proto_mad m;
	const char *why = "";
	struct gid sgid;
	int rc;

	/* What QEMU writes in the address block is its guest's own GID and
	 * index; the daemon picks both ends itself. */
	memset(&m.addr, 0, sizeof(m.addr));
	m.addr.port = (uint16_t)port->index;
	m.addr.flags = PROTO_MAD_F_GRH;
	m.addr.hop_limit = 64;
	m.addr.traffic_class = req->addr.traffic_class;
	m.addr.sl = req->addr.sl;
	m.addr.flow_label = req->addr.flow_label;
	m.addr.remote_qpn = GSI_QPN;
	m.addr.qkey = GSI_QKEY;
	m.addr.pkey_index = req->addr.pkey_index;
	memcpy(m.addr.local_gid, req->sgid, 16);
	m.mad_len = (uint16_t)req->umad_len;
	memcpy(m.mad, req->mad, m.mad_len);
	memcpy(sgid.raw, req->sgid, 16);
	qemu_client_adopt(q, port, &sgid);
	/* QEMU waits for this response with its device (the guest's vCPU)
	 * stopped: it is given when the MAD is checked and on its way,
	 * not after the wire took it, which on RoCE may be a second later
	 * (the destination's address resolved first).  A MAD that then
	 * fails is a MAD lost on the wire to the guest's CM, which sends
	 * it again (rdmacm-mux-cm(7)). */
	rc = outbound_send_mad(mux, ci, &m, 0, &why);
	return qemu_client_code(rc == -EINPROGRESS ? 0 : rc);
}

static void qemu_client_handle(struct qemu_client *q,
			       const struct qemu_msg *req,
			       struct qemu_msg *resp)
{
	struct mux *mux = q->mux;
	struct client_info *ci = q->ci;
	struct port *port = &mux->ports[ci->qemu_port];
	enum qemu_msg_err err;
	struct gid gid;
	int rc;

	memcpy(gid.raw, req->sgid, 16);
	switch (req->op) {
	case QEMU_MSG_OP_REG:
		err = qemu_client_register(mux, ci, port, &gid);
		break;
	case QEMU_MSG_OP_UNREG:
		/* The guest removed the address (or QEMU's device went
		 * away): its connections from it end, their peers told,
		 * where cm.c would keep them; the GID is free for another
		 * tenant, who must not inherit them (rdmacm-mux-cm(7)). */
		rc = router_unregister_gid(mux->router, port->index, &gid,
					   ci->id, 1);
		err = rc == -ENOENT ? QEMU_MSG_ENOTFOUND : qemu_client_code(rc);
		break;
	default: err = qemu_client_send(q, port, req); break;
	}
	qemu_msg_response(req, err, resp);
}

int qemu_client_open(struct mux *mux, struct client_info *ci,
		     struct qemu_client **out)
{
	struct qemu_client *q = calloc(1, sizeof(*q));
	struct router_counts was;
	int rc, resumed = 0;

	*out = q;
	if (q == NULL)
		return -ENOMEM;
	q->mux = mux;
	q->ci = ci;
	q->pending = evbuffer_new();
	if (q->pending == NULL)
		return -ENOMEM;
	rc = qemu_client_hello(mux, ci, &resumed);
	q->adopts = rc == 0 && !resumed && router_restored(mux->router, &was);
	return rc;
}

void qemu_client_free(struct qemu_client *q)
{
	if (q == NULL)
		return;
	if (q->pending)
		evbuffer_free(q->pending);
	free(q);
}

size_t qemu_client_pending(const struct qemu_client *q)
{
	return q && q->pending ? evbuffer_get_length(q->pending) : 0;
}

static void qemu_client_count_pending(struct qemu_client *q)
{
	atomic_store(&q->ci->ctr.qemu_pending_bytes,
		     evbuffer_get_length(q->pending));
}

void qemu_client_drop_pending(struct qemu_client *q)
{
	evbuffer_drain(q->pending, evbuffer_get_length(q->pending));
	qemu_client_count_pending(q);
}

/*
 * QEMU blocks reading the response to each request and takes whatever
 * message comes first for it.  So once the daemon has read a request, no
 * inbound MAD may be written before its response: inbound MADs are
 * written to the socket at once, directly, while it takes them, and only
 * one that does not fit waits in the session's output, where a
 * response would queue behind it (the socket is full then: QEMU is not
 * reading at all).  The rest wait in pending.
 */
int qemu_client_pump(struct qemu_client *q)
{
	uint8_t msg[QEMU_MSG_SIZE];
	int queued = 0;

	while (outlet_len(&q->ci->out) == 0 &&
	       evbuffer_get_length(q->pending) >= QEMU_MSG_SIZE) {
		evbuffer_remove(q->pending, msg, sizeof(msg));
		/* Queued when the socket is full (a message this small goes
		 * whole or not at all), or on an error the next write
		 * reports. */
		if (outlet_write_or_queue(&q->ci->out, msg, sizeof(msg)) != 1) {
			queued = 1;
			break;
		}
	}
	qemu_client_count_pending(q);
	return queued;
}

static size_t qemu_client_outq(const struct qemu_client *q)
{
	return outlet_len(&q->ci->out) + evbuffer_get_length(q->pending);
}

static void qemu_client_bad_request(struct qemu_client *q, int rc,
				    const struct qemu_msg *req)
{
	struct mux *mux = q->mux;
	uint64_t suppressed;

	atomic_fetch_add(&q->ci->ctr.malformed, 1);
	atomic_fetch_add(&mux->stats.protocol_errors, 1);
	if (mux_refusal_log_allowed(mux, &suppressed))
		log_fwarn(
			&(struct log_fields){ q->ci->id, q->ci->name }, -rc,
			"client %llu (QEMU, pid %d): %s (type %u, op %u, umad_len %d); closing",
			(unsigned long long)q->ci->id, (int)q->ci->pid,
			rc == -EBADMSG      ? "not a request"
			: rc == -EOPNOTSUPP ? "unknown op code"
					    : "MAD length outside 1..256",
			req->type, req->op, req->umad_len);
}

int qemu_client_read(struct qemu_client *q, struct evbuffer *in, int budget,
		     int *close)
{
	struct mux *mux = q->mux;
	uint8_t buf[QEMU_MSG_SIZE];
	struct qemu_msg req, resp;
	int rc, done = 0;

	while (done < budget && evbuffer_get_length(in) >= QEMU_MSG_SIZE) {
		evbuffer_remove(in, buf, sizeof(buf));
		done++;
		atomic_fetch_add(&q->ci->ctr.requests, 1);
		rc = qemu_msg_decode(buf, &req);
		if (rc < 0) {
			qemu_client_bad_request(q, rc, &req);
			*close = 1;
			break;
		}
		qemu_client_handle(q, &req, &resp);
		if (resp.err != QEMU_MSG_OK)
			atomic_fetch_add(&q->ci->ctr.errors, 1);
		qemu_msg_encode(&resp, buf);
		if (outlet_append(&q->ci->out, 0, buf, sizeof(buf), NULL, 0) <
		    0) {
			*close = 1;
			break;
		}
		/* Its output full: the session stops reading it. */
		if (qemu_client_outq(q) >= mux->cfg.client_outq_max)
			break;
	}
	return done;
}

/* An inbound MAD for QEMU: an unsolicited request naming the GID it was
 * routed to; the MAD's sender goes in the address block's GID, from
 * which QEMU builds the GRH it hands the guest. */
int qemu_client_deliver(struct qemu_client *q, const struct proto_mad *m)
{
	struct mux *mux = q->mux;
	struct qemu_msg msg = { .type = QEMU_MSG_REQ, .op = QEMU_MSG_OP_MAD };
	uint8_t buf[QEMU_MSG_SIZE];

	if (m->mad_len > QEMU_MSG_MAD_MAX)
		return -EMSGSIZE;
	if (qemu_client_outq(q) + sizeof(buf) > mux->cfg.client_outq_max) {
		atomic_fetch_add(&mux->stats.drops[DROP_CLIENT_QUEUE_FULL], 1);
		atomic_fetch_add(&q->ci->ctr.mads_dropped, 1);
		return -ENOBUFS;
	}
	memcpy(msg.sgid, m->addr.local_gid, 16);
	msg.umad_len = m->mad_len;
	msg.addr.qpn = m->addr.remote_qpn;
	msg.addr.qkey = m->addr.qkey;
	msg.addr.lid = m->addr.lid;
	msg.addr.sl = m->addr.sl;
	msg.addr.grh_present = (m->addr.flags & PROTO_MAD_F_GRH) ? 1 : 0;
	msg.addr.hop_limit = m->addr.hop_limit;
	msg.addr.traffic_class = m->addr.traffic_class;
	memcpy(msg.addr.gid, m->addr.remote_gid, 16);
	msg.addr.flow_label = m->addr.flow_label;
	msg.addr.pkey_index = m->addr.pkey_index;
	memcpy(msg.mad, m->mad, m->mad_len);
	qemu_msg_encode(&msg, buf);
	if (evbuffer_add(q->pending, buf, sizeof(buf)) == 0)
		atomic_fetch_add(&q->ci->ctr.mads_delivered, 1);
	return qemu_client_pump(q);
}
