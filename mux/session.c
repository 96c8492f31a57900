// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * One client connection, owned by its worker thread.  Input is decoded
 * incrementally; each request gets exactly one reply.  Output is bounded:
 * above client_outq_max bytes the session stops reading requests (so
 * replies cannot pile up) and inbound MADs for it are dropped and counted
 * (a stopped VM must not hold memory or delay anyone else).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "mux.h"
#include "../common/log.h"

/* Requests handled per read callback before yielding to other clients. */
#define SESSION_FRAMES_PER_EVENT 64
/* Well-framed but malformed requests tolerated before the client is cut. */
#define SESSION_MAX_MALFORMED 64
/* How long a closing session may take to flush its last words (an
 * error, a "disconnected" event) to a client that does not read. */
#define SESSION_CLOSE_GRACE_MS 1000

struct session {
	RB_ENTRY(session) link;
	uint64_t id;
	struct worker *w;
	struct bufferevent *bev;
	struct proto_decoder dec;
	struct client_info *info;
	int hello_done;
	int qemu;                       /* QEMU's rdmacm-mux protocol */
	struct evbuffer *qemu_pending;  /* its inbound MADs not yet handed on */
	int closing;
	int read_paused;
	unsigned malformed;
	struct log_ratelimit log_rl;
	struct event *close_timer;
};

static int session_cmp(struct session *a, struct session *b)
{
	return a->id < b->id ? -1 : a->id > b->id;
}

RB_HEAD(session_tree, session);
TREE_GENERATE_STATIC(session_tree, session, link, session_cmp)

struct session_tree *session_tree_new(void)
{
	struct session_tree *t = calloc(1, sizeof(*t));

	if (t)
		RB_INIT(t);
	return t;
}

void session_tree_free(struct session_tree *t)
{
	free(t);
}

static struct session *session_find(struct worker *w, uint64_t id)
{
	struct session key = { .id = id };

	return RB_FIND(session_tree, worker_sessions(w), &key);
}

static void session_destroy(struct session *s)
{
	struct mux *mux = worker_mux(s->w);

	log_debug("client %llu: closed", (unsigned long long)s->id);
	RB_REMOVE(session_tree, worker_sessions(s->w), s);
	/* Routing state goes first so no new MAD is routed to a dead id. */
	router_purge_client(mux->router, s->id);
	clients_remove(&mux->clients, s->id);
	bufferevent_free(s->bev);
	if (s->qemu_pending)
		evbuffer_free(s->qemu_pending);
	if (s->close_timer)
		event_free(s->close_timer);
	proto_decoder_fini(&s->dec);
	free(s);
}

static void session_close_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;

	(void)fd;
	(void)what;
	log_info("client %llu: did not read its last %zu bytes in %d ms; "
		 "closing anyway", (unsigned long long)s->id,
		 evbuffer_get_length(bufferevent_get_output(s->bev)),
		 SESSION_CLOSE_GRACE_MS);
	session_destroy(s);
}

static size_t session_outq(struct session *s)
{
	return evbuffer_get_length(bufferevent_get_output(s->bev)) +
	       (s->qemu_pending ? evbuffer_get_length(s->qemu_pending) : 0);
}

/*
 * QEMU blocks reading the response to each request and takes whatever
 * message comes first for it.  So once the daemon has read a request, no
 * inbound MAD may be written before its response: inbound MADs are
 * written to the socket at once, directly, while it takes them, and only
 * one that does not fit waits in the bufferevent's output, where a
 * response would queue behind it (the socket is full then: QEMU is not
 * reading at all).  The rest wait in qemu_pending.
 */
static void session_qemu_pump(struct session *s)
{
	struct evbuffer *out = bufferevent_get_output(s->bev);
	int fd = bufferevent_getfd(s->bev);
	uint8_t msg[LEGACY_MSG_SIZE];
	ssize_t n;

	while (evbuffer_get_length(out) == 0 &&
	       evbuffer_get_length(s->qemu_pending) >= LEGACY_MSG_SIZE) {
		evbuffer_copyout(s->qemu_pending, msg, sizeof(msg));
		n = send(fd, msg, sizeof(msg), MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n == (ssize_t)sizeof(msg)) {
			evbuffer_drain(s->qemu_pending, sizeof(msg));
			continue;
		}
		/* Full (a message this small goes whole or not at all), or
		 * an error the bufferevent will report. */
		evbuffer_remove_buffer(s->qemu_pending, out, sizeof(msg));
	}
}

static void session_update_outq(struct session *s)
{
	atomic_store(&s->info->ctr.outq_bytes, session_outq(s));
}

static int session_send(struct session *s, uint8_t kind, uint8_t flags,
			uint32_t rid, const void *payload, size_t len)
{
	struct evbuffer *out = bufferevent_get_output(s->bev);
	uint8_t hdr[PROTO_HDR_SIZE];

	proto_header_encode(hdr, kind, flags, rid, (uint32_t)len);
	if (evbuffer_add(out, hdr, sizeof(hdr)) ||
	    evbuffer_add(out, payload, len))
		return -ENOMEM;
	session_update_outq(s);
	return 0;
}

static void session_send_json(struct session *s, uint8_t flags, uint32_t rid,
			      json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT);

	if (text == NULL || session_send(s, PROTO_KIND_JSON, flags, rid, text,
					 strlen(text)) < 0) {
		log_warnx("client %llu: cannot queue reply; closing",
			  (unsigned long long)s->id);
		s->closing = 1;
	}
	free(text);
}

static void session_reply(struct session *s, uint32_t rid, json_t *reply)
{
	if (!json_is_true(json_object_get(reply, "ok")))
		atomic_fetch_add(&s->info->ctr.errors, 1);
	session_send_json(s, PROTO_FLAG_REPLY, rid, reply);
	json_decref(reply);
}

static void session_malformed(struct session *s, const char *what)
{
	struct mux *mux = worker_mux(s->w);
	uint64_t suppressed;

	atomic_fetch_add(&s->info->ctr.malformed, 1);
	atomic_fetch_add(&mux->stats.protocol_errors, 1);
	if (log_ratelimit_allow(&s->log_rl, &suppressed))
		log_warnx("client %llu (pid %d): %s (%llu similar suppressed)",
			  (unsigned long long)s->id, (int)s->info->pid, what,
			  (unsigned long long)suppressed);
	if (++s->malformed > SESSION_MAX_MALFORMED) {
		log_warnx("client %llu: too many malformed requests; closing",
			  (unsigned long long)s->id);
		s->closing = 1;
	}
}

static void session_handle_json(struct session *s, const struct proto_frame *f)
{
	struct mux *mux = worker_mux(s->w);
	const char *err = NULL;
	int close_after = 0;
	json_t *req, *reply;

	if (proto_json_parse(f->payload, f->length, &req, &err) < 0) {
		session_malformed(s, err);
		session_reply(s, f->request_id,
			      proto_reply_error(EBADMSG, "%s", err));
		return;
	}
	reply = requests_handle(mux, s->info, &s->hello_done, req,
				&close_after);
	json_decref(req);
	session_reply(s, f->request_id, reply);
	if (close_after)
		s->closing = 1;
}

static void session_handle_mad(struct session *s, const struct proto_frame *f)
{
	struct mux *mux = worker_mux(s->w);
	struct proto_mad m;
	const char *why = "";
	int rc;

	if (!s->hello_done) {
		session_reply(s, f->request_id, proto_reply_error(ENOTCONN,
			      "send hello before anything else"));
		return;
	}
	rc = proto_mad_decode(f->payload, f->length, &m);
	if (rc < 0) {
		session_malformed(s, "malformed MAD frame");
		session_reply(s, f->request_id, proto_reply_error(rc,
			      "malformed MAD frame (%s)", proto_errno_name(rc)));
		return;
	}
	rc = requests_send_mad(mux, s->info, &m, &why);
	session_reply(s, f->request_id,
		      rc ? proto_reply_error(rc, "%s", why) : proto_reply_ok());
}

static void session_handle_frame(struct session *s, const struct proto_frame *f)
{
	atomic_fetch_add(&s->info->ctr.requests, 1);
	if (f->flags != 0) {
		/* Clients send requests only; there is nothing to answer. */
		session_malformed(s, "client sent a reply or event frame");
		return;
	}
	if (f->kind == PROTO_KIND_JSON)
		session_handle_json(s, f);
	else
		session_handle_mad(s, f);
}

static void session_framing_error(struct session *s, int rc)
{
	json_t *ev;

	session_malformed(s, "framing error");
	/* Framing is lost: say why in an event (there is no request id to
	 * answer), then close once it is written. */
	ev = json_pack("{s:s, s:s, s:s}", "event", "protocol_error", "code",
		       proto_errno_name(rc), "message",
		       rc == -EMSGSIZE ? "frame larger than the maximum"
				       : "malformed frame header");
	session_send_json(s, PROTO_FLAG_EVENT, 0, ev);
	json_decref(ev);
	s->closing = 1;
}

static void session_pause_if_full(struct session *s)
{
	struct mux *mux = worker_mux(s->w);

	if (session_outq(s) < mux->cfg.client_outq_max)
		return;
	s->read_paused = 1;
	bufferevent_disable(s->bev, EV_READ);
	bufferevent_setwatermark(s->bev, EV_WRITE, mux->cfg.client_outq_max / 2, 0);
}

/* A closing session ends once its output is written, or after the
 * grace time, whichever comes first: a client that never reads cannot
 * keep its GIDs and connections. */
static void session_finish_or_wait(struct session *s)
{
	struct timeval tv = { SESSION_CLOSE_GRACE_MS / 1000,
			      (SESSION_CLOSE_GRACE_MS % 1000) * 1000 };

	if (!s->closing)
		return;
	bufferevent_disable(s->bev, EV_READ);
	if (s->qemu_pending)    /* MADs for a client that is going: dropped */
		evbuffer_drain(s->qemu_pending, evbuffer_get_length(s->qemu_pending));
	if (session_outq(s) == 0) {
		session_destroy(s);
		return;
	}
	if (s->close_timer == NULL) {
		s->close_timer = evtimer_new(worker_base(s->w),
					     session_close_timeout, s);
		if (s->close_timer == NULL || evtimer_add(s->close_timer, &tv)) {
			session_destroy(s);
			return;
		}
	}
}

/* QEMU's protocol: whole 360-byte messages, each request answered at
 * once, ahead of inbound MADs that wait (session_qemu_pump). */
static void session_read_qemu(struct session *s)
{
	struct evbuffer *in = bufferevent_get_input(s->bev);
	struct mux *mux = worker_mux(s->w);
	uint8_t buf[LEGACY_MSG_SIZE];
	struct legacy_msg req, resp;
	int budget = SESSION_FRAMES_PER_EVENT, rc;

	while (budget-- > 0 && !s->closing && !s->read_paused &&
	       evbuffer_get_length(in) >= LEGACY_MSG_SIZE) {
		evbuffer_remove(in, buf, sizeof(buf));
		atomic_fetch_add(&s->info->ctr.requests, 1);
		rc = legacy_decode(buf, &req);
		if (rc < 0) {
			atomic_fetch_add(&s->info->ctr.malformed, 1);
			atomic_fetch_add(&mux->stats.protocol_errors, 1);
			log_warnx("client %llu (QEMU, pid %d): %s (type %u, op %u, "
				  "umad_len %d); closing", (unsigned long long)s->id,
				  (int)s->info->pid,
				  rc == -EBADMSG ? "not a request" :
				  rc == -EOPNOTSUPP ? "unknown op code" :
				  "MAD length outside 1..256", req.type, req.op,
				  req.umad_len);
			s->closing = 1;
			break;
		}
		requests_qemu_handle(mux, s->info, &req, &resp);
		if (resp.err != LEGACY_OK)
			atomic_fetch_add(&s->info->ctr.errors, 1);
		legacy_encode(&resp, buf);
		if (evbuffer_add(bufferevent_get_output(s->bev), buf,
				 sizeof(buf)) < 0)
			s->closing = 1;
		session_update_outq(s);
		session_pause_if_full(s);
	}
	if (budget < 0 && !s->closing && !s->read_paused &&
	    evbuffer_get_length(in) >= LEGACY_MSG_SIZE)
		bufferevent_trigger(s->bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS |
				    BEV_TRIG_DEFER_CALLBACKS);
	session_finish_or_wait(s);
}

static void session_read_cb(struct bufferevent *bev, void *arg)
{
	struct session *s = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	int budget = SESSION_FRAMES_PER_EVENT;
	struct evbuffer_iovec v;
	struct proto_frame f;
	size_t used;
	int rc;

	if (s->qemu) {
		session_read_qemu(s);
		return;
	}
	while (budget > 0 && !s->closing && !s->read_paused &&
	       evbuffer_get_length(in) > 0) {
		if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
			break;
		rc = proto_decoder_feed(&s->dec, v.iov_base, v.iov_len, &used, &f);
		evbuffer_drain(in, used);
		if (rc < 0) {
			session_framing_error(s, rc);
			break;
		}
		if (rc == 1) {
			session_handle_frame(s, &f);
			budget--;
			session_pause_if_full(s);
		}
	}
	if (budget == 0 && !s->closing && !s->read_paused &&
	    evbuffer_get_length(in) > 0)
		bufferevent_trigger(bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS |
				    BEV_TRIG_DEFER_CALLBACKS);
	session_finish_or_wait(s);
}

static void session_write_cb(struct bufferevent *bev, void *arg)
{
	struct session *s = arg;

	if (s->qemu && !s->closing)
		session_qemu_pump(s);
	session_update_outq(s);
	if (s->closing) {
		session_finish_or_wait(s);
		return;
	}
	if (s->read_paused) {
		s->read_paused = 0;
		bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
		bufferevent_enable(bev, EV_READ);
		if (evbuffer_get_length(bufferevent_get_input(bev)) > 0)
			bufferevent_trigger(bev, EV_READ,
					    BEV_TRIG_IGNORE_WATERMARKS |
					    BEV_TRIG_DEFER_CALLBACKS);
	}
}

static void session_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct session *s = arg;
	size_t left = evbuffer_get_length(bufferevent_get_input(bev));

	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
		if (s->qemu && left)
			log_warnx("client %llu (QEMU): closed with %zu bytes of a "
				  "message unsent", (unsigned long long)s->id, left);
		session_destroy(s);
	}
}

void session_start(struct worker *w, int fd, struct client_info *info)
{
	struct mux *mux = worker_mux(w);
	struct session *s = calloc(1, sizeof(*s));

	if (s == NULL) {
		log_warnx("client %llu: out of memory", (unsigned long long)info->id);
		close(fd);
		clients_remove(&mux->clients, info->id);
		return;
	}
	evutil_make_socket_nonblocking(fd);
	s->id = info->id;
	s->w = w;
	s->info = info;
	s->log_rl = (struct log_ratelimit)LOG_RATELIMIT_INIT(5, 1);
	proto_decoder_init(&s->dec, mux->cfg.max_payload);
	s->bev = bufferevent_socket_new(worker_base(w), fd, BEV_OPT_CLOSE_ON_FREE);
	if (s->bev == NULL) {
		close(fd);
		clients_remove(&mux->clients, info->id);
		free(s);
		return;
	}
	bufferevent_setcb(s->bev, session_read_cb, session_write_cb,
			  session_event_cb, s);
	RB_INSERT(session_tree, worker_sessions(w), s);
	if (info->qemu_port >= 0) {
		/* One message per write: a unix stream write this small goes
		 * whole or not at all, so QEMU, which reads up to one
		 * message and never checks how much it got, always gets
		 * whole messages. */
		s->qemu = 1;
		s->qemu_pending = evbuffer_new();
		bufferevent_set_max_single_write(s->bev, LEGACY_MSG_SIZE);
		if (s->qemu_pending == NULL) {
			session_destroy(s);
			return;
		}
		if (requests_qemu_hello(mux, info) < 0) {
			session_destroy(s);
			return;
		}
		s->hello_done = 1;
	}
	bufferevent_enable(s->bev, EV_READ | EV_WRITE);
	log_debug("client %llu: pid %d uid %d on worker %u",
		  (unsigned long long)s->id, (int)info->pid, (int)info->uid,
		  worker_index(w));
}

static int session_room_for(struct session *s, size_t bytes)
{
	return session_outq(s) + bytes <= worker_mux(s->w)->cfg.client_outq_max;
}

/* An inbound MAD for QEMU: an unsolicited request naming the GID it was
 * routed to; the MAD's sender goes in the address block's GID, from
 * which QEMU builds the GRH it hands the guest. */
static void session_deliver_qemu(struct session *s, const struct proto_mad *m)
{
	struct mux *mux = worker_mux(s->w);
	struct legacy_msg msg = { .type = LEGACY_REQ, .op = LEGACY_OP_MAD };
	uint8_t buf[LEGACY_MSG_SIZE];

	if (m->mad_len > LEGACY_MAD_MAX)
		return;
	if (!session_room_for(s, sizeof(buf))) {
		atomic_fetch_add(&mux->stats.drops[DROP_CLIENT_QUEUE_FULL], 1);
		atomic_fetch_add(&s->info->ctr.mads_dropped, 1);
		return;
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
	legacy_encode(&msg, buf);
	if (evbuffer_add(s->qemu_pending, buf, sizeof(buf)) == 0)
		atomic_fetch_add(&s->info->ctr.mads_delivered, 1);
	session_qemu_pump(s);
	session_update_outq(s);
}

void session_deliver_mad(struct worker *w, uint64_t client_id,
			 const struct proto_mad *m)
{
	struct mux *mux = worker_mux(w);
	struct session *s = session_find(w, client_id);
	uint8_t buf[PROTO_MAD_ADDR_SIZE + PROTO_MAD_MAX];
	int len;

	if (s == NULL || s->closing) {
		atomic_fetch_add(&mux->stats.drops[DROP_CLIENT_GONE], 1);
		return;
	}
	if (s->qemu) {
		session_deliver_qemu(s, m);
		return;
	}
	len = proto_mad_encode(m, buf, sizeof(buf));
	if (len < 0)
		return;
	if (!session_room_for(s, PROTO_HDR_SIZE + (size_t)len)) {
		atomic_fetch_add(&mux->stats.drops[DROP_CLIENT_QUEUE_FULL], 1);
		atomic_fetch_add(&s->info->ctr.mads_dropped, 1);
		return;
	}
	if (session_send(s, PROTO_KIND_MAD, PROTO_FLAG_EVENT, 0, buf,
			 (size_t)len) == 0)
		atomic_fetch_add(&s->info->ctr.mads_delivered, 1);
}

void session_broadcast_event(struct worker *w, const char *text)
{
	struct session *s;
	size_t len = strlen(text);

	RB_FOREACH(s, session_tree, worker_sessions(w)) {
		if (!s->hello_done || s->closing || s->qemu ||
		    !session_room_for(s, PROTO_HDR_SIZE + len))
			continue;
		session_send(s, PROTO_KIND_JSON, PROTO_FLAG_EVENT, 0, text, len);
	}
}

void session_kick(struct worker *w, uint64_t client_id, const char *why)
{
	struct session *s = session_find(w, client_id);
	json_t *ev;

	if (s == NULL || s->closing)
		return;
	if (!s->qemu) {         /* QEMU's protocol has no word for it */
		ev = json_pack("{s:s, s:s}", "event", "disconnected", "message",
			       why ? why : "disconnected by the administrator");
		session_send_json(s, PROTO_FLAG_EVENT, 0, ev);
		json_decref(ev);
	}
	s->closing = 1;
	session_finish_or_wait(s);
}

void session_close_all(struct worker *w)
{
	struct session *s;

	while ((s = RB_ROOT(worker_sessions(w))) != NULL)
		session_destroy(s);
}
