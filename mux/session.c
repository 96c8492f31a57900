// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * One client connection, owned by its worker thread.  Input is decoded
 * incrementally; each request gets exactly one reply.  Output is bounded:
 * above client_outq_max bytes the session stops reading requests (so
 * replies cannot pile up) and inbound MADs for it are dropped and counted
 * (a stopped VM must not hold memory or delay anyone else).
 *
 * Writes are the daemon's main cost, so they are batched: whatever is
 * queued for a session during one pass of the event loop (its replies,
 * MADs from other clients, events) goes out in one writev at the end of
 * the pass, straight from the worker, and a write event is armed only
 * while the socket is full.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "mux/mux.h"
#include "common/log.h"

/* Requests handled per read callback before yielding to other clients. */
#define SESSION_FRAMES_PER_EVENT 64
/* Output waits for the end of a loop pass, so that a client's replies
 * and MADs go out in one write; but no longer than this many frames'
 * handling, or the first of a long pass waits for all the others. */
#define SESSION_FLUSH_AFTER_FRAMES 64
/* Bytes read from the socket per read callback, at most. */
#define SESSION_READ_CHUNK 65536
/* A timer due at once: it runs after the next poll of the sockets. */
static const struct timeval session_at_once = { 0, 0 };
/* Well-framed but malformed requests tolerated before the client is cut. */
#define SESSION_MAX_MALFORMED 64
/* How long a closing session may take to flush its last words (an
 * error, a "disconnected" event) to a client that does not read. */
#define SESSION_CLOSE_GRACE_MS 1000

struct session {
	RB_ENTRY(session) link;
	TAILQ_ENTRY(session) dirty_link;
	uint64_t id;
	struct worker *w;
	struct session_set *set;
	int fd; /* the outlet's; this reads it */
	struct event *read_ev;
	struct event *more_ev; /* the rest of its input, after the others */
	struct event *write_ev;
	struct evbuffer *in;
	struct proto_decoder dec;
	struct client_info *info;
	int hello_done;
	struct qemu_client *qemu; /* QEMU's rdmacm-mux protocol: its side */
	int closing;
	int read_paused;
	/* Over its request rate: its input waits for more_ev (at_eof: its
	 * last words are acted on whatever the rate). */
	int paced, at_eof;
	struct token_bucket req_tb; /* set at hello */
	int dirty;                  /* on the set's dirty list */
	int write_armed;
	unsigned malformed;
	uint64_t lost_told;           /* mads_lost the client has heard of */
	char *lost_last;              /* the latest loss, for its report */
	struct log_fields log_fields; /* filled by session_log_fields() */
	struct event *close_timer;
	struct event *hello_timer; /* until hello, then freed */
};

/* Who a log line is about, for the journal's fields. */
static const struct log_fields *session_log_fields(struct session *s)
{
	s->log_fields = (struct log_fields){ .client_id = s->id,
					     .vm = s->info->name };
	return &s->log_fields;
}

static int session_cmp(struct session *a, struct session *b)
{
	return a->id < b->id ? -1 : a->id > b->id;
}

RB_HEAD(session_tree, session);
TREE_GENERATE_STATIC(session_tree, session, link, session_cmp)

/* A worker's sessions, and those with output queued in this pass of its
 * event loop. */
struct session_set {
	struct session_tree tree;
	TAILQ_HEAD(, session) dirty;
	/* Other workers' clients this one queued MADs for (held). */
	struct client_info **foreign;
	size_t nforeign, foreign_cap;
	unsigned worker;
	struct mux *mux;
	struct event *flush_ev;
	int flush_armed;
	unsigned frames_unflushed; /* handled since the last flush */
	/* Where every read of a session lands.  While it has nothing
	 * buffered, only a partial frame (or what its budget left) moves
	 * on to its own buffer, so a read costs no allocation and touches
	 * no memory of the session's but its decoder. */
	uint8_t read_buf[SESSION_READ_CHUNK];
};

/* Write a client's queued output from a thread that is not its
 * worker's; what the socket does not take, its worker takes over (a
 * write error is the owner's to see: its read ends too). */
static void session_write_for(struct mux *mux, struct client_info *ci)
{
	struct worker_msg *msg;
	size_t left;
	int ask;

	outlet_flush(&ci->out, 0, &left, &ask);
	if (!ask)
		return;
	msg = worker_msg_new(WMSG_FLUSH, ci->id);
	if (msg != NULL) /* else its next own flush writes it */
		worker_post(mux->workers[ci->worker], msg);
}

/* Another worker's client: write what this pass queued for it. */
static void session_flush_foreign(struct session_set *set,
				  struct client_info *ci)
{
	outlet_release_flush(&ci->out, set->worker);
	session_write_for(set->mux, ci);
	clients_put(ci);
}

static int session_flush(struct session *s);

/* Write out what this worker queued for others' clients and its own.
 * Others' first: what this worker queues for another's client is a MAD
 * it routed there, which that client is waiting for, while its own
 * clients' output after a MAD frame is mostly the sender's reply, which
 * nobody is (own clients that got a MAD were touched before the reply
 * that followed it, so theirs leaves first too).  Written the other way
 * round, the reply wakes a client process that reads it and sleeps
 * again before the MAD arrives: on the one-connection handshake that
 * was a wake-up more on each of its four hops. */
static void session_set_flush(struct session_set *set)
{
	struct session *s;
	size_t i;

	set->flush_armed = 0;
	set->frames_unflushed = 0;
	for (i = 0; i < set->nforeign; i++)
		session_flush_foreign(set, set->foreign[i]);
	set->nforeign = 0;
	while ((s = TAILQ_FIRST(&set->dirty)) != NULL)
		session_flush(s);
}

/* Runs after the I/O callbacks of a loop pass (it is activated by the
 * first of them that queues output, so it sits behind them all). */
static void session_set_flush_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	session_set_flush(arg);
}

struct session_set *session_set_new(struct mux *mux, unsigned worker,
				    struct event_base *base)
{
	struct session_set *set = calloc(1, sizeof(*set));

	if (set == NULL)
		return NULL;
	set->mux = mux;
	set->worker = worker;
	RB_INIT(&set->tree);
	TAILQ_INIT(&set->dirty);
	set->flush_ev = event_new(base, -1, 0, session_set_flush_cb, set);
	if (set->flush_ev == NULL) {
		free(set);
		return NULL;
	}
	return set;
}

void session_set_free(struct session_set *set)
{
	size_t i;

	for (i = 0; i < set->nforeign; i++)
		clients_put(set->foreign[i]);
	free(set->foreign);
	event_free(set->flush_ev);
	free(set);
}

/* A worker's sessions: what delivery_worker_ops attached to it. */
static struct session_set *session_set_of(struct worker *w)
{
	return worker_state(w);
}

static struct session *session_find(struct worker *w, uint64_t id)
{
	struct session key = { .id = id };

	return RB_FIND(session_tree, &session_set_of(w)->tree, &key);
}

static void session_arm_flush(struct session_set *set)
{
	if (!set->flush_armed) {
		set->flush_armed = 1;
		event_active(set->flush_ev, EV_TIMEOUT, 0);
	}
}

/* Output was queued: it goes out at the end of this loop pass. */
static void session_touch(struct session *s)
{
	struct session_set *set = s->set;

	if (!s->dirty) {
		s->dirty = 1;
		TAILQ_INSERT_TAIL(&set->dirty, s, dirty_link);
	}
	session_arm_flush(set);
}

static void session_untouch(struct session *s)
{
	if (s->dirty) {
		s->dirty = 0;
		TAILQ_REMOVE(&s->set->dirty, s, dirty_link);
	}
}

static void session_destroy(struct session *s)
{
	struct mux *mux = worker_mux(s->w);

	log_debug("client %llu: closed", (unsigned long long)s->id);
	RB_REMOVE(session_tree, &s->set->tree, s);
	session_untouch(s);
	/* Routing state goes first so no new MAD is routed to a dead id. */
	router_purge_client(mux->router, s->id);
	qp_registry_drop_client(mux->qp_registry, s->id);
	event_free(s->read_ev);
	event_free(s->more_ev);
	event_free(s->write_ev);
	/* Other threads may still hold the record; the last one closes
	 * the socket. */
	outlet_close(&s->info->out);
	clients_remove(mux->clients, s->id);
	evbuffer_free(s->in);
	qemu_client_free(s->qemu);
	if (s->close_timer)
		event_free(s->close_timer);
	if (s->hello_timer)
		event_free(s->hello_timer);
	proto_decoder_fini(&s->dec);
	free(s->lost_last);
	free(s);
}

static void session_close_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;

	uint64_t suppressed;

	(void)fd;
	(void)what;
	/* A line per connection: one budget for every client's. */
	if (mux_refusal_log_allowed(worker_mux(s->w), &suppressed))
		log_finfo(
			session_log_fields(s),
			"client %llu: did not read its last %zu bytes in %d ms; closing anyway (%llu similar suppressed)",
			(unsigned long long)s->id, outlet_len(&s->info->out),
			SESSION_CLOSE_GRACE_MS, (unsigned long long)suppressed);
	session_destroy(s);
}

static size_t session_outq(struct session *s)
{
	return outlet_len(&s->info->out) + qemu_client_pending(s->qemu);
}

static void session_resume_reading(struct session *s)
{
	s->read_paused = 0;
	if (s->paced)
		return; /* more_ev takes it up */
	event_add(s->read_ev, NULL);
	if (evbuffer_get_length(s->in) > 0)
		event_active(s->read_ev, EV_READ, 0);
}

static int session_finish_or_wait(struct session *s);
static void session_report_losses(struct session *s);

/*
 * Write what is queued, as far as the socket takes it; a write event
 * stays armed only while it does not.  -1 when the session is gone (a
 * write error, or a closing session that has said its last words).
 */
static int session_flush(struct session *s)
{
	struct mux *mux = worker_mux(s->w);
	size_t left;
	int rc, ask;

	session_untouch(s);
	rc = outlet_flush(&s->info->out, 1, &left, &ask);
	if (rc < 0) {
		log_debug("client %llu: write: %s", (unsigned long long)s->id,
			  strerror(-rc));
		session_destroy(s);
		return -1;
	}
	if (s->qemu && !s->closing && left == 0) {
		if (qemu_client_pump(s->qemu))
			session_touch(s);
		left = outlet_len(&s->info->out);
	}
	if (left > 0) {
		if (!s->write_armed) {
			s->write_armed = 1;
			event_add(s->write_ev, NULL);
		}
	} else if (s->write_armed) {
		s->write_armed = 0;
		event_del(s->write_ev);
	}
	if (s->closing)
		return session_finish_or_wait(s);
	if (s->read_paused && session_outq(s) <= mux->cfg.client_outq_max / 2)
		session_resume_reading(s);
	/* A report that waited for room (its note has come: a loss
	 * always posts one). */
	if (left == 0 && s->lost_last &&
	    s->lost_told != atomic_load(&s->info->ctr.mads_lost))
		session_report_losses(s);
	return 0;
}

static void session_write_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	session_flush(arg);
}

static int session_send(struct session *s, uint8_t kind, uint8_t flags,
			uint32_t rid, const void *payload, size_t len)
{
	uint8_t hdr[PROTO_HDR_SIZE];
	int rc;

	proto_header_encode(hdr, kind, flags, rid, (uint32_t)len);
	rc = outlet_append(&s->info->out, 0, hdr, sizeof(hdr), payload, len);
	if (rc == 0)
		session_touch(s);
	return rc;
}

static void session_send_json(struct session *s, uint8_t flags, uint32_t rid,
			      json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT);
	uint64_t suppressed;

	if (text == NULL || session_send(s, PROTO_KIND_JSON, flags, rid, text,
					 strlen(text)) < 0) {
		if (mux_refusal_log_allowed(worker_mux(s->w), &suppressed))
			log_fwarn(
				session_log_fields(s), 0,
				"client %llu: cannot queue reply; closing (%llu similar suppressed)",
				(unsigned long long)s->id,
				(unsigned long long)suppressed);
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

/* The reply to a MAD sent: the same text proto_reply_ok() would give,
 * without building it for every MAD. */
static const char session_ok_text[] = "{\"ok\":true}";

static void session_reply_ok(struct session *s, uint32_t rid)
{
	if (session_send(s, PROTO_KIND_JSON, PROTO_FLAG_REPLY, rid,
			 session_ok_text, sizeof(session_ok_text) - 1) < 0)
		s->closing = 1;
}

static void session_malformed(struct session *s, const char *what)
{
	struct mux *mux = worker_mux(s->w);
	uint64_t suppressed;

	atomic_fetch_add(&s->info->ctr.malformed, 1);
	atomic_fetch_add(&mux->stats.protocol_errors, 1);
	/* One budget for every client's: a client that reconnects to get
	 * a fresh one gets nothing more. */
	if (mux_refusal_log_allowed(mux, &suppressed))
		log_fwarn(session_log_fields(s), 0,
			  "client %llu (pid %d): %s (%llu similar suppressed)",
			  (unsigned long long)s->id, (int)s->info->pid, what,
			  (unsigned long long)suppressed);
	/* The limit's own request is answered, then the connection ends. */
	if (++s->malformed >= SESSION_MAX_MALFORMED) {
		if (mux_refusal_log_allowed(mux, &suppressed))
			log_fwarn(
				session_log_fields(s), 0,
				"client %llu: too many malformed requests; closing (%llu similar suppressed)",
				(unsigned long long)s->id,
				(unsigned long long)suppressed);
		s->closing = 1;
	}
}

/* Over its request rate (the request in hand is handled, its token
 * owed): nothing more of its input is read for ms, until it is paid.
 * Its requests are delayed, never refused; what a flood of them costs
 * its worker is bounded by the rate. */
static void session_pace(struct session *s, unsigned ms)
{
	struct timeval tv;

	s->paced = 1;
	event_del(s->read_ev);
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
	evtimer_add(s->more_ev, &tv);
	atomic_fetch_add(&worker_mux(s->w)->stats.requests_paced, 1);
}

static void session_handle_json(struct session *s, const struct proto_frame *f)
{
	struct mux *mux = worker_mux(s->w);
	const char *err = NULL;
	int close_after = 0, was_hello_done = s->hello_done;
	json_t *req, *reply;
	unsigned ms;

	if (was_hello_done && !s->at_eof &&
	    (ms = policy_token_bucket_charge(&s->req_tb, mux_now_ms())) > 0)
		session_pace(s, ms);
	if (proto_json_parse(f->payload, f->length, &req, &err) < 0) {
		session_malformed(s, err);
		session_reply(s, f->request_id,
			      proto_reply_error(EBADMSG, "%s", err));
		return;
	}
	if (!s->hello_done) {
		const char *op = proto_request_op(req, &err);

		/* Answered ENOTCONN, and counted as malformed: nothing
		 * but hello may come first. */
		if (op == NULL || strcmp(op, "hello") != 0)
			session_malformed(s, "request before hello");
	}
	reply = requests_handle(mux, s->info, &s->hello_done, req,
				&close_after);
	json_decref(req);
	if (s->hello_done && s->hello_timer) {
		event_free(s->hello_timer);
		s->hello_timer = NULL;
	}
	if (s->hello_done && !was_hello_done)
		policy_token_bucket_init(&s->req_tb,
					 s->info->rule->request_rate,
					 s->info->rule->request_burst,
					 mux_now_ms());
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
		session_malformed(s, "MAD before hello");
		session_reply(
			s, f->request_id,
			proto_reply_error(ENOTCONN,
					  "send hello before anything else"));
		return;
	}
	rc = proto_mad_decode(f->payload, f->length, &m);
	if (rc < 0) {
		session_malformed(s, "malformed MAD frame");
		session_reply(s, f->request_id,
			      proto_reply_error(rc, "malformed MAD frame (%s)",
						proto_errno_name(rc)));
		return;
	}
	rc = outbound_send_mad(mux, s->info, &m, f->request_id, &why);
	if (rc == -EINPROGRESS)
		return; /* the verdict comes with session_send_done */
	if (rc)
		session_reply(s, f->request_id,
			      proto_reply_error(rc, "%s", why));
	else
		session_reply_ok(s, f->request_id);
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

	if (s->read_paused || session_outq(s) < mux->cfg.client_outq_max)
		return;
	s->read_paused = 1;
	event_del(s->read_ev);
}

/* A closing session ends once its output is written, or after the
 * grace time, whichever comes first: a client that never reads cannot
 * keep its GIDs and connections.  -1 when it has ended. */
static int session_finish_or_wait(struct session *s)
{
	struct timeval tv = { SESSION_CLOSE_GRACE_MS / 1000,
			      (SESSION_CLOSE_GRACE_MS % 1000) * 1000 };

	if (!s->closing)
		return 0;
	event_del(s->read_ev);
	if (s->qemu) /* MADs for a client that is going: dropped */
		qemu_client_drop_pending(s->qemu);
	if (session_outq(s) == 0) {
		session_destroy(s);
		return -1;
	}
	if (s->close_timer == NULL) {
		s->close_timer = evtimer_new(worker_base(s->w),
					     session_close_timeout, s);
		if (s->close_timer == NULL ||
		    evtimer_add(s->close_timer, &tv)) {
			session_destroy(s);
			return -1;
		}
	}
	return 0;
}

/* QEMU's requests, within budget: frames handled. */
static int session_read_qemu(struct session *s, int budget)
{
	int done, close = 0;

	if (s->closing || s->read_paused)
		return 0;
	done = qemu_client_read(s->qemu, s->in, budget, &close);
	if (close)
		s->closing = 1;
	if (done > 0) {
		session_touch(s);
		session_pause_if_full(s);
	}
	return done;
}

/* Our protocol's frames from data[0..len), within budget; how many were
 * handled, and in *taken how many bytes went to the decoder. */
static int session_feed_frames(struct session *s, const uint8_t *data,
			       size_t len, int budget, size_t *taken)
{
	struct proto_frame f;
	int rc, done = 0;
	size_t used;

	*taken = 0;
	while (done < budget && !s->closing && !s->read_paused && !s->paced &&
	       *taken < len) {
		rc = proto_decoder_feed(&s->dec, data + *taken, len - *taken,
					&used, &f);
		*taken += used;
		if (rc < 0) {
			session_framing_error(s, rc);
			break;
		}
		if (rc == 1) {
			session_handle_frame(s, &f);
			done++;
			session_pause_if_full(s);
		}
	}
	return done;
}

/* Our protocol's frames from the session's buffer; how many were
 * handled. */
static int session_read_frames(struct session *s, int budget)
{
	struct evbuffer_iovec v;
	size_t taken;
	int done = 0;

	while (done < budget && !s->closing && !s->read_paused && !s->paced &&
	       evbuffer_peek(s->in, -1, NULL, &v, 1) == 1) {
		done += session_feed_frames(s, v.iov_base, v.iov_len,
					    budget - done, &taken);
		evbuffer_drain(s->in, taken);
		if (taken < v.iov_len)
			break;
	}
	return done;
}

/* One read into the set's buffer, its frames handled within budget (*n
 * the bytes read, or 0 or -1 as read() says); what is left (a partial
 * frame, or frames past the budget or a pause) moves to the session's
 * own buffer.  How many frames were handled. */
static int session_read_direct(struct session *s, int fd, int budget,
			       ssize_t *n)
{
	size_t taken;
	int done;

	*n = read(fd, s->set->read_buf, sizeof(s->set->read_buf));
	if (*n <= 0)
		return 0;
	done = session_feed_frames(s, s->set->read_buf, (size_t)*n, budget,
				   &taken);
	if (taken < (size_t)*n && !s->closing &&
	    evbuffer_add(s->in, s->set->read_buf + taken, (size_t)*n - taken) <
		    0) {
		log_fwarn(session_log_fields(s), ENOMEM,
			  "client %llu: no memory for its input; closing",
			  (unsigned long long)s->id);
		s->closing = 1;
	}
	return done;
}

static int session_input_whole(struct session *s)
{
	size_t left = evbuffer_get_length(s->in);

	return s->qemu ? left >= QEMU_MSG_SIZE : left > 0;
}

/* One read of up to SESSION_READ_CHUNK bytes into the set's buffer, then
 * onto what the session has buffered: read() as to its result. */
static int session_read_socket(struct session *s, int fd)
{
	ssize_t n = read(fd, s->set->read_buf, sizeof(s->set->read_buf));

	if (n > 0 && evbuffer_add(s->in, s->set->read_buf, (size_t)n) < 0) {
		errno = ENOMEM;
		return -1;
	}
	return (int)n;
}

/* One read onto what the session has buffered.  At the end of its
 * input, what it sent before it went is acted on (a DREQ before exit),
 * with nobody left to answer, and the session ends: -1. */
static int session_read_buffered(struct session *s, int fd)
{
	uint64_t suppressed;
	size_t left;
	int n;

	n = session_read_socket(s, fd);
	if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
		return 0;
	s->at_eof = 1;
	s->paced = 0;
	if (s->qemu)
		session_read_qemu(s, INT_MAX);
	else
		session_read_frames(s, INT_MAX);
	left = evbuffer_get_length(s->in);
	if (s->qemu && left % QEMU_MSG_SIZE &&
	    mux_refusal_log_allowed(worker_mux(s->w), &suppressed))
		log_fwarn(
			session_log_fields(s), 0,
			"client %llu (QEMU): closed with %zu bytes of a message unsent",
			(unsigned long long)s->id, left % QEMU_MSG_SIZE);
	session_destroy(s);
	return -1;
}

static void session_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	int n;

	(void)what;
	worker_note_input(s->w);
	if (!s->qemu && evbuffer_get_length(s->in) == 0) {
		/* The common case: nothing buffered, nothing copied but by
		 * the decoder; at the end of input, nothing left to act on. */
		ssize_t got;

		n = session_read_direct(s, fd, SESSION_FRAMES_PER_EVENT, &got);
		if (got == 0 ||
		    (got < 0 && errno != EAGAIN && errno != EINTR)) {
			session_destroy(s);
			return;
		}
	} else {
		/* What was read and not yet handled is handled first; the
		 * socket holds the rest. */
		if (evbuffer_get_length(s->in) < SESSION_READ_CHUNK &&
		    session_read_buffered(s, fd) < 0)
			return;
		if (s->qemu)
			n = session_read_qemu(s, SESSION_FRAMES_PER_EVENT);
		else
			n = session_read_frames(s, SESSION_FRAMES_PER_EVENT);
	}
	/* Out of budget: the rest after the other clients' turn.  Not
	 * event_active(): libevent runs what is activated during a pass in
	 * that same pass, so a client that never pauses would be served
	 * until it did, while the other sockets wait for the next poll.  A
	 * timer due at once runs after the next poll, beside every client
	 * that has input by then. */
	if (n == SESSION_FRAMES_PER_EVENT && !s->closing && !s->read_paused &&
	    !s->paced && session_input_whole(s))
		evtimer_add(s->more_ev, &session_at_once);
	if (s->closing) {
		session_flush(s);
		return;
	}
	s->set->frames_unflushed += (unsigned)n;
	if (s->set->frames_unflushed >= SESSION_FLUSH_AFTER_FRAMES)
		session_set_flush(s->set);
}

/* Its turn again: as if its socket had said it was readable. */
static void session_more_cb(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;

	(void)fd;
	(void)what;
	if (s->paced) {
		s->paced = 0;
		if (!s->read_paused && !s->closing)
			event_add(s->read_ev, NULL);
	}
	if (!s->closing && !s->read_paused)
		session_read_cb(s->fd, EV_READ, s);
}

/* A slot is not held by a connection that never says hello. */
static void session_hello_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	struct mux *mux = worker_mux(s->w);
	uint64_t suppressed;
	json_t *ev;
	char msg[96];

	(void)fd;
	(void)what;
	if (s->hello_done || s->closing)
		return;
	atomic_fetch_add(&mux->stats.hello_timeouts, 1);
	if (mux_refusal_log_allowed(mux, &suppressed))
		log_fwarn(
			session_log_fields(s), ETIMEDOUT,
			"client %llu (pid %d uid %d): no hello within %u ms; closing (%llu similar suppressed)",
			(unsigned long long)s->id, (int)s->info->pid,
			(int)s->info->uid, mux->cfg.hello_timeout_ms,
			(unsigned long long)suppressed);
	snprintf(msg, sizeof(msg), "no hello within %u ms",
		 mux->cfg.hello_timeout_ms);
	ev = json_pack("{s:s, s:s, s:i, s:s}", "event", "refused", "code",
		       "ETIMEDOUT", "errno", ETIMEDOUT, "message", msg);
	if (ev)
		session_send_json(s, PROTO_FLAG_EVENT, 0, ev);
	json_decref(ev);
	s->closing = 1;
	session_flush(s);
}

void session_start(struct worker *w, int fd, struct client_info *info)
{
	struct mux *mux = worker_mux(w);
	struct event_base *base = worker_base(w);
	struct session *s = calloc(1, sizeof(*s));

	if (s == NULL) {
		log_warnx("client %llu: out of memory",
			  (unsigned long long)info->id);
		close(fd);
		clients_remove(mux->clients, info->id);
		return;
	}
	evutil_make_socket_nonblocking(fd);
	s->id = info->id;
	s->w = w;
	s->set = session_set_of(w);
	s->fd = fd;
	s->info = info;
	proto_decoder_init(&s->dec, mux->cfg.max_payload);
	s->in = evbuffer_new();
	s->read_ev = event_new(base, fd, EV_READ | EV_PERSIST, session_read_cb,
			       s);
	s->more_ev = evtimer_new(base, session_more_cb, s);
	s->write_ev = event_new(base, fd, EV_WRITE | EV_PERSIST,
				session_write_cb, s);
	if (s->in == NULL || s->read_ev == NULL || s->more_ev == NULL ||
	    s->write_ev == NULL ||
	    outlet_open(&info->out, fd,
			info->qemu_port >= 0 ? QEMU_MSG_SIZE : 0)) {
		log_warnx("client %llu: out of memory",
			  (unsigned long long)info->id);
		if (s->in)
			evbuffer_free(s->in);
		if (s->read_ev)
			event_free(s->read_ev);
		if (s->more_ev)
			event_free(s->more_ev);
		if (s->write_ev)
			event_free(s->write_ev);
		free(s);
		close(fd);
		clients_remove(mux->clients, info->id);
		return;
	}
	RB_INSERT(session_tree, &s->set->tree, s);
	if (info->qemu_port >= 0) {
		if (qemu_client_open(mux, info, &s->qemu) < 0) {
			session_destroy(s);
			return;
		}
		s->hello_done = 1;
	} else {
		struct timeval tv = { mux->cfg.hello_timeout_ms / 1000,
				      (mux->cfg.hello_timeout_ms % 1000) *
					      1000 };

		s->hello_timer = evtimer_new(base, session_hello_timeout, s);
		if (s->hello_timer == NULL ||
		    evtimer_add(s->hello_timer, &tv)) {
			session_destroy(s);
			return;
		}
	}
	event_add(s->read_ev, NULL);
	log_debug("client %llu: pid %d uid %d on worker %u",
		  (unsigned long long)s->id, (int)info->pid, (int)info->uid,
		  worker_index(w));
}

static int session_room_for(struct session *s, size_t bytes)
{
	return session_outq(s) + bytes <= worker_mux(s->w)->cfg.client_outq_max;
}

/* A MAD frame for a client of our protocol, queued on its outlet by
 * whichever thread routed it there.  0, or negative when dropped. */
static int session_queue_mad(struct mux *mux, struct client_info *ci,
			     const struct proto_mad *m)
{
	uint8_t hdr[PROTO_HDR_SIZE], buf[PROTO_MAD_ADDR_SIZE + PROTO_MAD_MAX];
	int len, rc;

	len = proto_mad_encode(m, buf, sizeof(buf));
	if (len < 0)
		return len;
	proto_header_encode(hdr, PROTO_KIND_MAD, PROTO_FLAG_EVENT, 0,
			    (uint32_t)len);
	rc = outlet_append(&ci->out, mux->cfg.client_outq_max, hdr, sizeof(hdr),
			   buf, (size_t)len);
	if (rc == -ENOBUFS) {
		atomic_fetch_add(&mux->stats.drops[DROP_CLIENT_QUEUE_FULL], 1);
		atomic_fetch_add(&ci->ctr.mads_dropped, 1);
	} else if (rc < 0) {
		atomic_fetch_add(&mux->stats.drops[DROP_CLIENT_GONE], 1);
	} else {
		atomic_fetch_add(&ci->ctr.mads_delivered, 1);
	}
	return rc;
}

int session_deliver_mad(struct worker *w, uint64_t client_id,
			const struct proto_mad *m)
{
	struct mux *mux = worker_mux(w);
	struct session *s = session_find(w, client_id);
	int rc;

	if (s == NULL || s->closing) {
		atomic_fetch_add(&mux->stats.drops[DROP_CLIENT_GONE], 1);
		return -EPIPE;
	}
	if (s->qemu) {
		rc = qemu_client_deliver(s->qemu, m);
		if (rc > 0)
			session_touch(s);
		return rc > 0 ? 0 : rc;
	}
	rc = session_queue_mad(mux, s->info, m);
	if (rc == 0)
		session_touch(s);
	return rc;
}

int session_deliver_from(struct worker *self, struct client_info *ci,
			 const struct proto_mad *m)
{
	struct mux *mux = worker_mux(self);
	struct session_set *set = session_set_of(self);
	struct client_info **grown;
	int rc;

	rc = session_queue_mad(mux, ci, m);
	if (rc < 0)
		return rc;
	if (!outlet_claim_flush(&ci->out, set->worker))
		return 0; /* listed already: goes out with the rest */
	if (set->nforeign == set->foreign_cap) {
		grown = realloc(set->foreign,
				(set->foreign_cap * 2 + 16) * sizeof(*grown));
		if (grown == NULL) {
			/* Written now instead of at the end of the pass. */
			outlet_release_flush(&ci->out, set->worker);
			session_write_for(mux, ci);
			return 0;
		}
		set->foreign = grown;
		set->foreign_cap = set->foreign_cap * 2 + 16;
	}
	set->foreign[set->nforeign++] = clients_hold(ci);
	session_arm_flush(set);
	return 0;
}

int session_deliver_now(struct mux *mux, struct client_info *ci,
			const struct proto_mad *m)
{
	int rc = session_queue_mad(mux, ci, m);

	if (rc == 0)
		session_write_for(mux, ci);
	return rc;
}

/* The mad_lost report: the running total, and what the count adds since
 * the last one.  Without room it waits for the queue to drain
 * (session_flush retries), so a slow sender still learns of every loss. */
static void session_report_losses(struct session *s)
{
	uint64_t total = atomic_load(&s->info->ctr.mads_lost);
	json_t *ev;
	char *text;

	if (total == s->lost_told || s->closing || s->qemu || !s->hello_done)
		return;
	ev = s->lost_last ? json_loads(s->lost_last, 0, NULL) : json_object();
	if (ev == NULL)
		ev = json_object();
	json_object_set_new(ev, "event", json_string("mad_lost"));
	json_object_set_new(ev, "reason", json_string("receiver_queue_full"));
	json_object_set_new(ev, "count",
			    json_integer((json_int_t)(total - s->lost_told)));
	json_object_set_new(ev, "total", json_integer((json_int_t)total));
	text = json_dumps(ev, JSON_COMPACT);
	json_decref(ev);
	if (text && session_room_for(s, PROTO_HDR_SIZE + strlen(text)) &&
	    session_send(s, PROTO_KIND_JSON, PROTO_FLAG_EVENT, 0, text,
			 strlen(text)) == 0)
		s->lost_told = total;
	free(text);
}

void session_note(struct worker *w, uint64_t client_id, const char *last)
{
	struct session *s = session_find(w, client_id);
	struct client_info *ci;

	if (s == NULL)
		return;
	ci = s->info;
	/* Losses after this point post a new note. */
	atomic_store(&ci->loss_note_posted, 0);
	free(s->lost_last);
	s->lost_last = strdup(last);
	session_report_losses(s);
}

void session_send_done(struct worker *w, uint64_t client_id, uint32_t rid,
		       int rc)
{
	struct session *s = session_find(w, client_id);

	if (s == NULL || s->closing)
		return;
	if (rc)
		session_reply(s, rid,
			      proto_reply_error(rc, "port send failed"));
	else
		session_reply_ok(s, rid);
}

/* The verdict written by the sender thread that sent the MAD, as the port
 * thread writes inbound MADs: waking the client's worker to write it cost
 * a worker wake-up per MAD sent.  -ENOMEM when it could not be queued
 * (the caller hands it to the worker, which closes a session it cannot
 * answer); 0 otherwise, including when the client is gone. */
int session_send_done_now(struct mux *mux, struct client_info *ci, uint32_t rid,
			  int rc)
{
	uint8_t hdr[PROTO_HDR_SIZE];
	const char *text = session_ok_text;
	char *built = NULL;
	json_t *reply;
	int refused;
	size_t len;

	if (rc) {
		reply = proto_reply_error(rc, "port send failed");
		built = reply ? json_dumps(reply, JSON_COMPACT) : NULL;
		json_decref(reply);
		if (built == NULL)
			return -ENOMEM;
		text = built;
	}
	len = strlen(text);
	proto_header_encode(hdr, PROTO_KIND_JSON, PROTO_FLAG_REPLY, rid,
			    (uint32_t)len);
	refused = built != NULL;
	rc = outlet_append(&ci->out, 0, hdr, sizeof(hdr), text, len);
	free(built);
	if (rc == -EPIPE)
		return 0; /* closed: nobody is waiting for it */
	if (rc < 0)
		return rc;
	if (refused)
		atomic_fetch_add(&ci->ctr.errors, 1);
	session_write_for(mux, ci);
	return 0;
}

void session_flush_client(struct worker *w, uint64_t client_id)
{
	struct session *s = session_find(w, client_id);

	if (s != NULL)
		session_flush(s);
}

void session_broadcast_event(struct worker *w, const char *text)
{
	struct session *s;
	size_t len = strlen(text);

	RB_FOREACH(s, session_tree, &session_set_of(w)->tree) {
		if (!s->hello_done || s->closing || s->qemu ||
		    !session_room_for(s, PROTO_HDR_SIZE + len))
			continue;
		session_send(s, PROTO_KIND_JSON, PROTO_FLAG_EVENT, 0, text,
			     len);
	}
}

void session_kick(struct worker *w, uint64_t client_id, const char *why)
{
	struct session *s = session_find(w, client_id);
	json_t *ev;

	if (s == NULL || s->closing)
		return;
	if (!s->qemu) { /* QEMU's protocol has no word for it */
		ev = json_pack("{s:s, s:s}", "event", "disconnected", "message",
			       why ? why : "disconnected by the administrator");
		session_send_json(s, PROTO_FLAG_EVENT, 0, ev);
		json_decref(ev);
	}
	s->closing = 1;
	session_flush(s);
}

void session_close_all(struct worker *w)
{
	struct session *s;

	while ((s = RB_ROOT(&session_set_of(w)->tree)) != NULL)
		session_destroy(s);
}
