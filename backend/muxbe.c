// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * libmuxbe.  One mutex guards the handle.  Whoever holds it may read the
 * socket and decode frames; what decoding produces (replies for waiters,
 * completions for callbacks) is queued, and callbacks run later from
 * muxbe_process() with the lock released.  Blocking calls wait on a
 * condition variable; one of them at a time polls the socket for all.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "backend/muxbe.h"
#include "common/unix_socket.h"
#include "common/tree.h"
#include "common/wire.h"
#include "protocol/rdmacm_mux_proto.h"

#define MUXBE_MAX_REPLY (1u << 20)

/* INTERNAL: the library's own requests while it takes the link back up
 * (hello, then each GID again). */
enum pending_kind { PENDING_SYNC, PENDING_SEND, PENDING_INTERNAL };

struct pending {
	TAILQ_ENTRY(pending) link;
	enum pending_kind kind;
	uint32_t rid;
	int done;
	int err;        /* SYNC: why it ended without a reply */
	json_t *reply;  /* SYNC: the reply */
	void *send_ctx; /* SEND */
};

enum completion_kind {
	COMP_RECV,
	COMP_SEND,
	COMP_PORT,
	COMP_DISCONNECT,
	COMP_LOST,
	COMP_LINK
};

/* The link: up; down (no socket, a timer to try again); resuming (a
 * socket, hello and the GIDs' registrations in flight). */
enum link_state { LINK_UP, LINK_DOWN, LINK_RESUMING };

/* What the library registers again after a reconnect, in the order it
 * was registered (a listen after its shared GID). */
enum reg_kind { REG_GID, REG_SHARED_GID, REG_QPN, REG_LISTEN };

struct reg {
	TAILQ_ENTRY(reg) link;
	enum reg_kind kind;
	char *port;          /* NULL: the daemon's only port */
	uint8_t gid[16];     /* GIDs and listens */
	uint32_t qpn;        /* REG_QPN */
	uint64_t service_id; /* REG_LISTEN */
};

struct completion {
	TAILQ_ENTRY(completion) link;
	enum completion_kind kind;
	void *ctx;
	void *buf;
	size_t len;
	int status;
	char message[160];
	struct muxbe_addr addr;
};

struct posted {
	TAILQ_ENTRY(posted) link;
	void *buf;
	size_t len;
	void *ctx;
};

struct queued_mad {
	TAILQ_ENTRY(queued_mad) link;
	struct proto_mad m;
};

struct muxbe {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int sock; /* -1 while the link is down */
	int epfd;
	int evfd;
	int timerfd; /* the next reconnect attempt */
	int broken;  /* negative errno once the link is gone for good */
	enum link_state link;
	int reconnect; /* a lost link is taken back up */
	unsigned backoff_ms;
	int down_err;          /* why the link went down */
	unsigned regs_pending; /* re-registrations in flight */
	char resume_note[160]; /* what the way back up met */
	char *path, *name;
	uint64_t session_client; /* 0: the daemon keeps no state */
	char session_token[33];
	TAILQ_HEAD(, reg) regs;
	int reader_active; /* a blocking caller is polling the socket */
	uint32_t next_rid;
	struct proto_decoder dec;
	struct muxbe_callbacks cb;
	void *user;
	unsigned rx_queue_max;
	unsigned max_posted;
	int timeout_ms;
	TAILQ_HEAD(, pending) pending;
	TAILQ_HEAD(, completion) completions;
	TAILQ_HEAD(, posted) posted;
	TAILQ_HEAD(, queued_mad) rxq;
	unsigned nposted, nrxq;
	struct muxbe_stats st;
	char last_error[256];
};

static void muxbe_set_error(struct muxbe *mb, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void muxbe_set_error(struct muxbe *mb, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(mb->last_error, sizeof(mb->last_error), fmt, ap);
	va_end(ap);
}

static uint64_t muxbe_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void muxbe_wake_process(struct muxbe *mb)
{
	uint64_t one = 1;

	if (write(mb->evfd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is saturated, so it is readable. */
	}
}

static void muxbe_queue_completion(struct muxbe *mb, struct completion *c)
{
	TAILQ_INSERT_TAIL(&mb->completions, c, link);
	muxbe_wake_process(mb);
}

static void muxbe_addr_from_proto(struct muxbe_addr *a,
				  const struct proto_mad_addr *p)
{
	a->port = p->port;
	a->grh = (p->flags & PROTO_MAD_F_GRH) != 0;
	a->hop_limit = p->hop_limit;
	a->traffic_class = p->traffic_class;
	a->sl = p->sl;
	a->flow_label = p->flow_label;
	a->remote_qpn = p->remote_qpn;
	a->qkey = p->qkey;
	a->lid = p->lid;
	a->pkey_index = p->pkey_index;
	memcpy(a->local_gid, p->local_gid, 16);
	memcpy(a->remote_gid, p->remote_gid, 16);
}

/* The receive buffer layout a UD QP gives: a 40-byte GRH, then the MAD.
 * 0, or -ENOMEM with the buffer untouched: it stays the caller's, posted,
 * and completes with a later MAD. */
static int muxbe_fill_recv(struct muxbe *mb, const struct posted *pb,
			   const struct proto_mad *m)
{
	uint8_t *grh = pb->buf;
	struct completion *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return -ENOMEM;
	memset(grh, 0, MUXBE_GRH_SIZE);
	wire_put32(grh, (6u << 28) | ((uint32_t)m->addr.traffic_class << 20) |
				(m->addr.flow_label & 0xfffff));
	wire_put16(grh + 4, m->mad_len);
	grh[6] = 0x1b; /* next header: IBA transport */
	grh[7] = m->addr.hop_limit;
	memcpy(grh + 8, m->addr.remote_gid, 16); /* SGID: sender */
	memcpy(grh + 24, m->addr.local_gid, 16); /* DGID: us */
	memcpy(grh + MUXBE_GRH_SIZE, m->mad, m->mad_len);
	mb->st.rx_delivered++;
	c->kind = COMP_RECV;
	c->ctx = pb->ctx;
	c->buf = pb->buf;
	c->len = m->mad_len;
	muxbe_addr_from_proto(&c->addr, &m->addr);
	muxbe_queue_completion(mb, c);
	return 0;
}

/* MADs that wait, into buffers that wait, in arrival order, as far as
 * memory allows (lock held). */
static void muxbe_place_queued(struct muxbe *mb)
{
	struct queued_mad *q;
	struct posted *pb;

	while ((q = TAILQ_FIRST(&mb->rxq)) != NULL &&
	       (pb = TAILQ_FIRST(&mb->posted)) != NULL) {
		if (muxbe_fill_recv(mb, pb, &q->m) < 0)
			return; /* both wait for the next try */
		TAILQ_REMOVE(&mb->rxq, q, link);
		mb->nrxq--;
		TAILQ_REMOVE(&mb->posted, pb, link);
		mb->nposted--;
		free(q);
		free(pb);
	}
}

static void muxbe_handle_mad_event(struct muxbe *mb,
				   const struct proto_frame *f)
{
	struct queued_mad *q;
	struct posted *pb;
	struct proto_mad m;

	if (proto_mad_decode(f->payload, f->length, &m) < 0)
		return;
	pb = TAILQ_FIRST(&mb->posted);
	if (pb && TAILQ_EMPTY(&mb->rxq) && muxbe_fill_recv(mb, pb, &m) == 0) {
		TAILQ_REMOVE(&mb->posted, pb, link);
		mb->nposted--;
		free(pb);
		return;
	}
	if (mb->nrxq >= mb->rx_queue_max) {
		mb->st.rx_dropped++;
		return;
	}
	q = malloc(sizeof(*q));
	if (q == NULL) {
		mb->st.rx_dropped++;
		return;
	}
	q->m = m;
	TAILQ_INSERT_TAIL(&mb->rxq, q, link);
	mb->nrxq++;
	mb->st.rx_queued++;
}

static void muxbe_resume_step(struct muxbe *mb, json_t *reply);

static void muxbe_handle_json_event(struct muxbe *mb,
				    const struct proto_frame *f)
{
	const char *err = NULL, *ev;
	struct completion *c;
	json_t *j;

	if (proto_json_parse(f->payload, f->length, &j, &err) < 0)
		return;
	ev = json_string_value(json_object_get(j, "event"));
	if (ev && strcmp(ev, "port_state") == 0) {
		c = calloc(1, sizeof(*c));
		if (c) {
			c->kind = COMP_PORT;
			c->addr.port = (uint16_t)json_integer_value(
				json_object_get(j, "port"));
			c->status = json_is_string(
					    json_object_get(j, "state")) &&
				    strcmp(json_string_value(
						   json_object_get(j, "state")),
					   "active") == 0;
			snprintf(c->message, sizeof(c->message), "%s",
				 json_string_value(
					 json_object_get(j, "port_name"))
					 ?: "");
			muxbe_queue_completion(mb, c);
		}
	} else if (ev && strcmp(ev, "mad_lost") == 0) {
		mb->st.tx_lost = (uint64_t)json_integer_value(
			json_object_get(j, "total"));
		c = calloc(1, sizeof(*c));
		if (c) {
			c->kind = COMP_LOST;
			c->status = (int)json_integer_value(
				json_object_get(j, "count"));
			c->addr.port = (uint16_t)json_integer_value(
				json_object_get(j, "port"));
			snprintf(c->message, sizeof(c->message),
				 "%s from %s to %s: %s",
				 json_string_value(json_object_get(j, "attr"))
					 ?: "MAD",
				 json_string_value(
					 json_object_get(j, "src_gid"))
					 ?: "?",
				 json_string_value(
					 json_object_get(j, "dst_gid"))
					 ?: "?",
				 json_string_value(json_object_get(j, "reason"))
					 ?: "lost");
			muxbe_queue_completion(mb, c);
		}
	} else if (ev && (strcmp(ev, "protocol_error") == 0 ||
			  strcmp(ev, "disconnected") == 0 ||
			  strcmp(ev, "refused") == 0)) {
		/* The daemon is about to close: say why.  An administrator's
		 * disconnect, or a protocol error, is not undone by coming
		 * back. */
		muxbe_set_error(mb, "daemon: %s: %s", ev,
				json_string_value(json_object_get(j, "message"))
					?: "");
		if (strcmp(ev, "refused") != 0)
			mb->reconnect = 0;
	}
	json_decref(j);
}

static struct pending *muxbe_pending_find(struct muxbe *mb, uint32_t rid)
{
	struct pending *p;

	TAILQ_FOREACH(p, &mb->pending, link)
		if (p->rid == rid)
			return p;
	return NULL;
}

static void muxbe_handle_reply(struct muxbe *mb, const struct proto_frame *f)
{
	struct pending *p = muxbe_pending_find(mb, f->request_id);
	const char *err = NULL, *msg = "";
	struct completion *c;
	json_t *j = NULL;
	int status;

	if (p == NULL)
		return; /* a waiter that timed out and left */
	if (f->kind != PROTO_KIND_JSON ||
	    proto_json_parse(f->payload, f->length, &j, &err) < 0)
		j = proto_reply_error(EPROTO,
				      "malformed reply from the daemon");
	if (p->kind == PENDING_SYNC) {
		p->reply = j;
		p->done = 1;
		pthread_cond_broadcast(&mb->cond);
		return;
	}
	if (p->kind == PENDING_INTERNAL) {
		TAILQ_REMOVE(&mb->pending, p, link);
		free(p);
		muxbe_resume_step(mb, j);
		json_decref(j);
		return;
	}
	status = proto_reply_status(j, &msg);
	if (status)
		mb->st.tx_errors++;
	else
		mb->st.tx_ok++;
	c = calloc(1, sizeof(*c));
	if (c) {
		c->kind = COMP_SEND;
		c->ctx = p->send_ctx;
		c->status = status;
		snprintf(c->message, sizeof(c->message), "%s", msg);
		muxbe_queue_completion(mb, c);
	}
	json_decref(j);
	TAILQ_REMOVE(&mb->pending, p, link);
	free(p);
}

static void muxbe_link_lost(struct muxbe *mb, int err);

/* Lock held.  The link under everything in flight is gone: a blocking
 * call returns err, a send completes with err (it may or may not have
 * reached the wire; the guest's CM retransmits what got no answer), the
 * library's own requests are dropped. */
static void muxbe_fail_in_flight(struct muxbe *mb, int err)
{
	struct completion *c;
	struct pending *p, *next;

	TAILQ_FOREACH_SAFE(p, &mb->pending, link, next) {
		if (p->kind == PENDING_SYNC) {
			p->done = 1;
			p->err = err;
			continue;
		}
		if (p->kind == PENDING_SEND &&
		    (c = calloc(1, sizeof(*c))) != NULL) {
			c->kind = COMP_SEND;
			c->ctx = p->send_ctx;
			c->status = err;
			snprintf(c->message, sizeof(c->message),
				 "connection to the daemon lost");
			muxbe_queue_completion(mb, c);
		}
		TAILQ_REMOVE(&mb->pending, p, link);
		free(p);
	}
}

/* The link is gone: fail everything in flight, once; then take it back
 * up unless told not to. */
static void muxbe_mark_broken(struct muxbe *mb, int err)
{
	struct completion *c;

	if (mb->broken || mb->link == LINK_DOWN)
		return;
	if (mb->reconnect) {
		muxbe_link_lost(mb, err);
		return;
	}
	mb->broken = err;
	muxbe_fail_in_flight(mb, err);
	c = calloc(1, sizeof(*c));
	if (c) {
		c->kind = COMP_DISCONNECT;
		c->status = err;
		muxbe_queue_completion(mb, c);
	}
	pthread_cond_broadcast(&mb->cond);
}

static void muxbe_queue_link(struct muxbe *mb, int up, int status,
			     const char *msg)
{
	struct completion *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return;
	c->kind = COMP_LINK;
	c->len = (size_t)up;
	c->status = status;
	snprintf(c->message, sizeof(c->message), "%s", msg);
	muxbe_queue_completion(mb, c);
}

static void muxbe_arm_retry(struct muxbe *mb)
{
	struct itimerspec its = {
		.it_value = { .tv_sec = mb->backoff_ms / 1000,
			      .tv_nsec = (long)(mb->backoff_ms % 1000) *
					 1000000L }
	};

	timerfd_settime(mb->timerfd, 0, &its, NULL);
	mb->backoff_ms = mb->backoff_ms * 2 > MUXBE_RECONNECT_MAX_MS
				 ? MUXBE_RECONNECT_MAX_MS
				 : mb->backoff_ms * 2;
}

static void muxbe_drop_socket(struct muxbe *mb)
{
	if (mb->sock >= 0) {
		epoll_ctl(mb->epfd, EPOLL_CTL_DEL, mb->sock, NULL);
		close(mb->sock);
		mb->sock = -1;
	}
	proto_decoder_fini(&mb->dec);
	proto_decoder_init(&mb->dec, MUXBE_MAX_REPLY);
}

/* Lock held.  The link went down (or an attempt to take it up failed):
 * what was in flight fails now, and a retry is due after the backoff. */
static void muxbe_link_lost(struct muxbe *mb, int err)
{
	int was_up = mb->link == LINK_UP;

	muxbe_drop_socket(mb);
	mb->link = LINK_DOWN;
	mb->down_err = err;
	mb->regs_pending = 0;
	muxbe_fail_in_flight(mb, -ECONNRESET);
	if (was_up) {
		mb->backoff_ms = 10;
		muxbe_queue_link(mb, 0, err,
				 mb->last_error[0] ? mb->last_error
						   : strerror(-err));
	}
	muxbe_arm_retry(mb);
	pthread_cond_broadcast(&mb->cond);
}

static json_t *muxbe_hello_request(struct muxbe *mb)
{
	json_t *req = json_pack("{s:s, s:{s:i, s:i}, s:s, s:[s, s]}", "op",
				"hello", "protocol", "major",
				PROTO_VERSION_MAJOR, "minor",
				PROTO_VERSION_MINOR, "name",
				mb->name ? mb->name : "", "features", "mad",
				"port-events");

	if (req && mb->session_client)
		json_object_set_new(req, "resume",
				    json_pack("{s:I, s:s}", "client_id",
					      (json_int_t)mb->session_client,
					      "token", mb->session_token));
	return req;
}

/* From a hello reply: the session to resume after the next restart. */
static void muxbe_keep_session(struct muxbe *mb, json_t *reply)
{
	json_t *sess = json_object_get(reply, "session");
	const char *token = json_string_value(json_object_get(sess, "token"));

	if (token == NULL || strlen(token) != 32) {
		mb->session_client = 0;
		return;
	}
	mb->session_client = (uint64_t)json_integer_value(
		json_object_get(sess, "client_id"));
	memcpy(mb->session_token, token, 33);
}

static int muxbe_submit_internal(struct muxbe *mb, json_t *req);
static json_t *muxbe_reg_json(const struct reg *r, int reg);
static void muxbe_reg_free(struct reg *r);
static int muxbe_connect_socket(const char *path);

/* Lock held.  The link is being taken back up: each reply (hello's, then
 * each GID's registration) moves it on; the last one brings it up. */
static void muxbe_resume_step(struct muxbe *mb, json_t *reply)
{
	const char *msg = "";
	struct reg *r;
	int rc = proto_reply_status(reply, &msg);

	if (mb->link != LINK_RESUMING)
		return;
	if (mb->regs_pending == 0) { /* hello's reply */
		if (rc < 0) {
			muxbe_set_error(mb, "daemon: %s", msg);
			muxbe_link_lost(mb, rc);
			return;
		}
		if (json_is_true(json_object_get(reply, "resumed")))
			snprintf(mb->resume_note, sizeof(mb->resume_note),
				 "the daemon kept this client's connections");
		else
			snprintf(
				mb->resume_note, sizeof(mb->resume_note),
				"the daemon did not keep this client's connections (%s)",
				json_string_value(
					json_object_get(reply, "resume_error"))
					?: "it keeps no state");
		mb->down_err = json_is_true(json_object_get(reply, "resumed"))
				       ? 0
				       : -ESTALE;
		muxbe_keep_session(mb, reply);
		TAILQ_FOREACH(r, &mb->regs, link) {
			if (muxbe_submit_internal(mb, muxbe_reg_json(r, 1)) ==
			    0)
				mb->regs_pending++;
		}
		if (mb->regs_pending)
			return;
	} else {
		if (rc < 0) {
			size_t l = strlen(mb->resume_note);

			snprintf(mb->resume_note + l,
				 sizeof(mb->resume_note) - l,
				 "; a GID was not registered again: %s", msg);
		}
		if (--mb->regs_pending)
			return;
	}
	mb->link = LINK_UP;
	muxbe_queue_link(mb, 1, mb->down_err, mb->resume_note);
	pthread_cond_broadcast(&mb->cond);
}

/* Lock held, on the timer: one attempt to take the link back up. */
static void muxbe_try_reconnect(struct muxbe *mb)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int fd;

	if (mb->link != LINK_DOWN || mb->broken)
		return;
	fd = muxbe_connect_socket(mb->path);
	if (fd < 0) {
		muxbe_arm_retry(mb);
		return;
	}
	mb->sock = fd;
	ev.data.fd = fd;
	epoll_ctl(mb->epfd, EPOLL_CTL_ADD, fd, &ev);
	mb->link = LINK_RESUMING;
	mb->regs_pending = 0;
	mb->last_error[0] = '\0';
	if (muxbe_submit_internal(mb, muxbe_hello_request(mb)) < 0 &&
	    mb->link == LINK_RESUMING)
		muxbe_link_lost(mb, -ECONNRESET);
}

/* Lock held.  Read what is there without blocking and decode it. */
static void muxbe_read_available(struct muxbe *mb)
{
	uint8_t buf[16384];
	struct proto_frame f;
	size_t off, used;
	ssize_t n;
	int rc;

	while (!mb->broken && mb->sock >= 0) {
		n = recv(mb->sock, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0) {
			muxbe_mark_broken(mb, -ECONNRESET);
			return;
		}
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				muxbe_mark_broken(mb, -errno);
			return;
		}
		for (off = 0; off < (size_t)n && !mb->broken && mb->sock >= 0;
		     off += used) {
			rc = proto_decoder_feed(&mb->dec, buf + off,
						(size_t)n - off, &used, &f);
			if (rc < 0) {
				muxbe_set_error(
					mb, "malformed frame from the daemon");
				muxbe_mark_broken(mb, -EPROTO);
				return;
			}
			if (rc == 0)
				continue;
			if (f.flags & PROTO_FLAG_REPLY)
				muxbe_handle_reply(mb, &f);
			else if (f.flags & PROTO_FLAG_EVENT &&
				 f.kind == PROTO_KIND_MAD)
				muxbe_handle_mad_event(mb, &f);
			else if (f.flags & PROTO_FLAG_EVENT)
				muxbe_handle_json_event(mb, &f);
		}
	}
}

/* Lock held.  Write a whole frame; while the socket is full, keep reading
 * so that the daemon, which stops reading us when its output to us is
 * full, can always make progress. */
static int muxbe_write_frame(struct muxbe *mb, uint8_t kind, uint32_t rid,
			     const void *payload, size_t len)
{
	uint8_t hdr[PROTO_HDR_SIZE];
	struct iovec iov[2];
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	uint64_t deadline = muxbe_now_ms() + (uint64_t)mb->timeout_ms;
	size_t total = sizeof(hdr) + len, sent = 0, skip;
	struct pollfd pfd;
	ssize_t n;

	proto_header_encode(hdr, kind, 0, rid, (uint32_t)len);
	while (sent < total) {
		if (mb->broken)
			return mb->broken;
		if (mb->sock < 0)
			return -ENOTCONN;
		skip = sent;
		iov[0].iov_base = hdr +
				  (skip < sizeof(hdr) ? skip : sizeof(hdr));
		iov[0].iov_len = skip < sizeof(hdr) ? sizeof(hdr) - skip : 0;
		skip = skip > sizeof(hdr) ? skip - sizeof(hdr) : 0;
		iov[1].iov_base = (uint8_t *)payload + skip;
		iov[1].iov_len = len - skip;
		n = sendmsg(mb->sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			sent += (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR) {
			int err = -errno;

			/* The daemon may have said why before closing. */
			muxbe_read_available(mb);
			muxbe_mark_broken(mb, err);
			return mb->broken ? mb->broken : -ECONNRESET;
		}
		if (muxbe_now_ms() >= deadline) {
			/* A partial frame would desynchronise the stream. */
			muxbe_set_error(
				mb, "daemon not reading; timed out writing");
			muxbe_mark_broken(mb, -ETIMEDOUT);
			return -ETIMEDOUT;
		}
		pfd.fd = mb->sock;
		pfd.events = POLLOUT | POLLIN;
		if (poll(&pfd, 1, 50) > 0 && (pfd.revents & POLLIN))
			muxbe_read_available(mb);
	}
	return 0;
}

/* Lock held on entry and exit.  Wait for a pending reply. */
static int muxbe_wait_reply(struct muxbe *mb, struct pending *p, json_t **reply)
{
	uint64_t deadline = muxbe_now_ms() + (uint64_t)mb->timeout_ms;
	struct pollfd pfd = { .events = POLLIN };
	struct timespec ts;
	uint64_t now;
	int rc = 0;

	while (!p->done) {
		pfd.fd = mb->sock; /* a new one after a reconnect */
		now = muxbe_now_ms();
		if (now >= deadline) {
			rc = -ETIMEDOUT;
			muxbe_set_error(mb, "no reply from the daemon in %d ms",
					mb->timeout_ms);
			break;
		}
		if (!mb->reader_active) {
			mb->reader_active = 1;
			pthread_mutex_unlock(&mb->lock);
			poll(&pfd, 1,
			     (int)(deadline - now < 100 ? deadline - now
							: 100));
			pthread_mutex_lock(&mb->lock);
			mb->reader_active = 0;
			muxbe_read_available(mb);
			pthread_cond_broadcast(&mb->cond);
		} else {
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 50 * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&mb->cond, &mb->lock, &ts);
		}
	}
	if (p->done && p->reply == NULL)
		rc = p->err ? p->err : mb->broken ? mb->broken : -EPROTO;
	if (rc == 0)
		*reply = p->reply;
	else
		json_decref(p->reply);
	TAILQ_REMOVE(&mb->pending, p, link);
	free(p);
	return rc;
}

static uint32_t muxbe_next_rid(struct muxbe *mb)
{
	if (++mb->next_rid == 0)
		mb->next_rid = 1;
	return mb->next_rid;
}

/* Lock held.  Write a request frame, then track it.  The daemon answers
 * only a whole frame and the lock is held until it is written, so the
 * reply cannot be read before the entry is listed.  On failure p is
 * freed and nothing is reported through callbacks. */
static int muxbe_submit_locked(struct muxbe *mb, struct pending *p,
			       uint8_t kind, const void *payload, size_t len)
{
	int rc = mb->broken;

	/* While the link is down nothing waits for it: the caller's thread
	 * is never blocked by a daemon that is not there. */
	if (rc == 0 && mb->link != LINK_UP && p->kind != PENDING_INTERNAL)
		rc = -ENOTCONN;
	if (rc == 0) {
		p->rid = muxbe_next_rid(mb);
		rc = muxbe_write_frame(mb, kind, p->rid, payload, len);
	}
	if (rc < 0) {
		free(p);
		return rc;
	}
	TAILQ_INSERT_TAIL(&mb->pending, p, link);
	return 0;
}

/* Send a frame and wait for its reply; *reply is the reply object. */
static int muxbe_call(struct muxbe *mb, uint8_t kind, const void *payload,
		      size_t len, json_t **reply)
{
	struct pending *p = calloc(1, sizeof(*p));
	int rc;

	if (p == NULL)
		return -ENOMEM;
	p->kind = PENDING_SYNC;
	pthread_mutex_lock(&mb->lock);
	rc = muxbe_submit_locked(mb, p, kind, payload, len);
	if (rc == 0)
		rc = muxbe_wait_reply(mb, p, reply);
	pthread_mutex_unlock(&mb->lock);
	return rc;
}

/* A JSON call whose reply status becomes the return value. */
static int muxbe_call_json(struct muxbe *mb, json_t *req, json_t **reply_out)
{
	char *text = json_dumps(req, JSON_COMPACT);
	const char *msg = "";
	json_t *reply = NULL;
	int rc;

	json_decref(req);
	if (text == NULL)
		return -ENOMEM;
	rc = muxbe_call(mb, PROTO_KIND_JSON, text, strlen(text), &reply);
	free(text);
	if (rc < 0)
		return rc;
	rc = proto_reply_status(reply, &msg);
	if (rc < 0) {
		pthread_mutex_lock(&mb->lock);
		muxbe_set_error(mb, "%s", msg);
		pthread_mutex_unlock(&mb->lock);
	}
	if (reply_out && rc == 0)
		*reply_out = reply;
	else
		json_decref(reply);
	return rc;
}

/* Lock held.  One of the library's own requests (resume_step answers). */
static int muxbe_submit_internal(struct muxbe *mb, json_t *req)
{
	struct pending *p;
	char *text;
	int rc;

	if (req == NULL)
		return -ENOMEM;
	text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	p = calloc(1, sizeof(*p));
	if (text == NULL || p == NULL) {
		free(text);
		free(p);
		return -ENOMEM;
	}
	p->kind = PENDING_INTERNAL;
	rc = muxbe_submit_locked(mb, p, PROTO_KIND_JSON, text, strlen(text));
	free(text);
	return rc;
}

static int muxbe_connect_socket(const char *path)
{
	/* Non-blocking: every I/O here is, and a daemon whose backlog is
	 * full must cost a retry, not the caller's thread. */
	return unix_socket_connect(path, SOCK_STREAM | SOCK_NONBLOCK);
}

/* The first connection.  A daemon whose listen backlog is full (a storm
 * of backends starting, or coming back after a restart) answers EAGAIN:
 * worth a retry within the caller's deadline, not a failure. */
static int muxbe_connect_first(const char *path, int timeout_ms)
{
	uint64_t deadline = muxbe_now_ms() + (uint64_t)timeout_ms;
	int fd, pause_ms = 1;

	for (;;) {
		fd = muxbe_connect_socket(path);
		if (fd != -EAGAIN ||
		    muxbe_now_ms() + (uint64_t)pause_ms > deadline)
			return fd;
		poll(NULL, 0, pause_ms);
		if (pause_ms < 64)
			pause_ms *= 2;
	}
}

int muxbe_connect(const struct muxbe_options *opts, struct muxbe **out)
{
	const char *path = opts->socket_path;
	struct epoll_event ev = { .events = EPOLLIN };
	struct muxbe *mb;
	json_t *reply = NULL;
	int rc;

	*out = NULL;
	if (path == NULL) {
		/* Empty is unset, as the shell's ${VAR:-default}. */
		path = getenv("RDMACM_MUX_SOCKET");
		if (path == NULL || path[0] == '\0')
			path = MUXBE_DEFAULT_SOCKET;
	}
	mb = calloc(1, sizeof(*mb));
	if (mb == NULL)
		return -ENOMEM;
	pthread_mutex_init(&mb->lock, NULL);
	pthread_cond_init(&mb->cond, NULL);
	TAILQ_INIT(&mb->pending);
	TAILQ_INIT(&mb->completions);
	TAILQ_INIT(&mb->posted);
	TAILQ_INIT(&mb->rxq);
	proto_decoder_init(&mb->dec, MUXBE_MAX_REPLY);
	if (opts->cb)
		mb->cb = *opts->cb;
	mb->user = opts->user;
	mb->rx_queue_max = opts->rx_queue_max ? opts->rx_queue_max : 256;
	mb->max_posted = opts->max_posted ? opts->max_posted : 1024;
	mb->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 5000;
	TAILQ_INIT(&mb->regs);
	mb->link = LINK_UP;
	mb->path = strdup(path);
	mb->name = opts->name ? strdup(opts->name) : NULL;
	mb->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	mb->timerfd = timerfd_create(CLOCK_MONOTONIC,
				     TFD_NONBLOCK | TFD_CLOEXEC);
	mb->epfd = epoll_create1(EPOLL_CLOEXEC);
	mb->sock = muxbe_connect_first(path, mb->timeout_ms);
	if (mb->sock < 0) {
		rc = mb->sock;
		muxbe_set_error(mb, "cannot connect to %s: %s", path,
				strerror(-rc));
		goto fail;
	}
	if (mb->evfd < 0 || mb->epfd < 0 || mb->timerfd < 0 ||
	    mb->path == NULL || (opts->name && mb->name == NULL)) {
		rc = mb->evfd < 0 || mb->epfd < 0 || mb->timerfd < 0 ? -errno
								     : -ENOMEM;
		goto fail;
	}
	ev.data.fd = mb->sock;
	epoll_ctl(mb->epfd, EPOLL_CTL_ADD, mb->sock, &ev);
	ev.data.fd = mb->evfd;
	epoll_ctl(mb->epfd, EPOLL_CTL_ADD, mb->evfd, &ev);
	ev.data.fd = mb->timerfd;
	epoll_ctl(mb->epfd, EPOLL_CTL_ADD, mb->timerfd, &ev);

	rc = muxbe_call_json(mb, muxbe_hello_request(mb), &reply);
	if (rc < 0)
		goto fail;
	pthread_mutex_lock(&mb->lock);
	muxbe_keep_session(mb, reply);
	/* From now on a lost link is taken back up. */
	mb->reconnect = !opts->no_reconnect;
	pthread_mutex_unlock(&mb->lock);
	json_decref(reply);
	*out = mb;
	return 0;
fail:
	if (opts->errbuf && opts->errbuf_len)
		snprintf(opts->errbuf, opts->errbuf_len, "%s",
			 mb->last_error[0] ? mb->last_error : strerror(-rc));
	mb->cb.disconnected = NULL;
	muxbe_close(mb);
	return rc;
}

void muxbe_close(struct muxbe *mb)
{
	struct completion *c;
	struct reg *r;
	struct pending *p;
	struct posted *pb;
	struct queued_mad *q;

	if (mb == NULL)
		return;
	if (mb->sock >= 0)
		close(mb->sock);
	if (mb->epfd >= 0)
		close(mb->epfd);
	if (mb->evfd >= 0)
		close(mb->evfd);
	if (mb->timerfd >= 0)
		close(mb->timerfd);
	while ((r = TAILQ_FIRST(&mb->regs))) {
		TAILQ_REMOVE(&mb->regs, r, link);
		muxbe_reg_free(r);
	}
	free(mb->path);
	free(mb->name);
	while ((p = TAILQ_FIRST(&mb->pending))) {
		TAILQ_REMOVE(&mb->pending, p, link);
		json_decref(p->reply);
		free(p);
	}
	while ((c = TAILQ_FIRST(&mb->completions))) {
		TAILQ_REMOVE(&mb->completions, c, link);
		free(c);
	}
	while ((pb = TAILQ_FIRST(&mb->posted))) {
		TAILQ_REMOVE(&mb->posted, pb, link);
		free(pb);
	}
	while ((q = TAILQ_FIRST(&mb->rxq))) {
		TAILQ_REMOVE(&mb->rxq, q, link);
		free(q);
	}
	proto_decoder_fini(&mb->dec);
	pthread_cond_destroy(&mb->cond);
	pthread_mutex_destroy(&mb->lock);
	free(mb);
}

int muxbe_fd(struct muxbe *mb)
{
	return mb->epfd;
}

int muxbe_process(struct muxbe *mb)
{
	TAILQ_HEAD(, completion) batch = TAILQ_HEAD_INITIALIZER(batch);
	struct muxbe_callbacks cb;
	struct completion *c;
	void *user;
	uint64_t n;
	int count = 0, broken;

	pthread_mutex_lock(&mb->lock);
	if (read(mb->evfd, &n, sizeof(n)) < 0) {
		/* EAGAIN: nothing was signalled. */
	}
	if (read(mb->timerfd, &n, sizeof(n)) == (ssize_t)sizeof(n))
		muxbe_try_reconnect(mb);
	muxbe_place_queued(mb); /* what memory refused last time */
	muxbe_read_available(mb);
	TAILQ_CONCAT(&batch, &mb->completions, link);
	broken = mb->broken;
	cb = mb->cb;
	user = mb->user;
	pthread_mutex_unlock(&mb->lock);

	while ((c = TAILQ_FIRST(&batch))) {
		TAILQ_REMOVE(&batch, c, link);
		switch (c->kind) {
		case COMP_RECV:
			if (cb.recv)
				cb.recv(user, c->ctx, c->buf, c->len,
					c->status < 0 ? NULL : &c->addr);
			break;
		case COMP_SEND:
			if (cb.send_done)
				cb.send_done(user, c->ctx, c->status,
					     c->message);
			break;
		case COMP_PORT:
			if (cb.port_event)
				cb.port_event(user, c->addr.port, c->message,
					      c->status);
			break;
		case COMP_DISCONNECT:
			if (cb.disconnected)
				cb.disconnected(user, c->status);
			break;
		case COMP_LINK:
			if (cb.link)
				cb.link(user, (int)c->len, c->status,
					c->message);
			break;
		case COMP_LOST:
			if (cb.mad_lost)
				cb.mad_lost(user, c->addr.port,
					    (unsigned)c->status, c->message);
			break;
		}
		free(c);
		count++;
	}
	return count ? count : broken;
}

int muxbe_ping(struct muxbe *mb)
{
	return muxbe_call_json(mb, json_pack("{s:s}", "op", "ping"), NULL);
}

/* The request that registers r, or (register 0) undoes it. */
static json_t *muxbe_reg_json(const struct reg *r, int reg)
{
	char sid[24];
	json_t *req;

	switch (r->kind) {
	case REG_QPN:
		req = json_pack("{s:s, s:I}", "op",
				reg ? "register_qpn" : "unregister_qpn", "qpn",
				(json_int_t)r->qpn);
		break;
	case REG_LISTEN:
		snprintf(sid, sizeof(sid), "0x%llx",
			 (unsigned long long)r->service_id);
		req = json_pack("{s:s, s:o, s:s}", "op",
				reg ? "listen" : "unlisten", "gid",
				proto_gid_to_json(r->gid), "service_id", sid);
		break;
	default:
		req = json_pack("{s:s, s:o}", "op",
				reg ? "register_gid" : "unregister_gid", "gid",
				proto_gid_to_json(r->gid));
		if (req && reg && r->kind == REG_SHARED_GID)
			json_object_set_new(req, "shared", json_true());
	}
	if (req && r->port)
		json_object_set_new(req, "port", json_string(r->port));
	return req;
}

/* Both the daemon's only port (NULL), or the same named one. */
static int muxbe_same_port(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

/* A GID is one registration, shared or not. */
static enum reg_kind muxbe_reg_class(enum reg_kind kind)
{
	return kind == REG_SHARED_GID ? REG_GID : kind;
}

/* Lock held: the registration like key (kind, port, GID, QPN, service
 * ID), or NULL. */
static struct reg *muxbe_reg_find(struct muxbe *mb, const struct reg *key)
{
	struct reg *r;

	TAILQ_FOREACH(r, &mb->regs, link) {
		if (muxbe_reg_class(r->kind) != muxbe_reg_class(key->kind))
			continue;
		if (r->kind == REG_QPN ? r->qpn != key->qpn
				       : memcmp(r->gid, key->gid, 16) != 0)
			continue;
		if (r->kind == REG_LISTEN && r->service_id != key->service_id)
			continue;
		if (muxbe_same_port(key->port, r->port))
			return r;
	}
	return NULL;
}

static void muxbe_reg_free(struct reg *r)
{
	free(r->port);
	free(r);
}

/* Register what key says with the daemon and, once it has, remember it
 * to register again after a reconnect; *reply when not NULL. */
static int muxbe_reg_add(struct muxbe *mb, const struct reg *key,
			 json_t **reply)
{
	int rc = muxbe_call_json(mb, muxbe_reg_json(key, 1), reply);
	struct reg *r;

	if (rc)
		return rc;
	pthread_mutex_lock(&mb->lock);
	if (muxbe_reg_find(mb, key) == NULL &&
	    (r = calloc(1, sizeof(*r))) != NULL) {
		*r = *key;
		r->port = key->port ? strdup(key->port) : NULL;
		TAILQ_INSERT_TAIL(&mb->regs, r, link);
	}
	pthread_mutex_unlock(&mb->lock);
	return 0;
}

/* Undo what key says, and forget it (a GID's listens with it: the
 * daemon drops them when a shared GID is left). */
static int muxbe_reg_del(struct muxbe *mb, const struct reg *key)
{
	int rc = muxbe_call_json(mb, muxbe_reg_json(key, 0), NULL);
	struct reg *r, *next;

	if (rc && rc != -ENOENT)
		return rc;
	pthread_mutex_lock(&mb->lock);
	if ((r = muxbe_reg_find(mb, key)) != NULL) {
		TAILQ_REMOVE(&mb->regs, r, link);
		muxbe_reg_free(r);
	}
	if (key->kind == REG_GID)
		TAILQ_FOREACH_SAFE(r, &mb->regs, link, next)
			if (r->kind == REG_LISTEN &&
			    memcmp(r->gid, key->gid, 16) == 0 &&
			    muxbe_same_port(key->port, r->port)) {
				TAILQ_REMOVE(&mb->regs, r, link);
				muxbe_reg_free(r);
			}
	pthread_mutex_unlock(&mb->lock);
	return rc;
}

static int muxbe_gid_add(struct muxbe *mb, enum reg_kind kind, const char *port,
			 const uint8_t gid[16], uint16_t *port_index)
{
	struct reg key = { .kind = kind, .port = (char *)port };
	json_t *reply = NULL;
	int rc;

	memcpy(key.gid, gid, 16);
	rc = muxbe_reg_add(mb, &key, &reply);
	if (rc == 0 && port_index)
		*port_index = (uint16_t)json_integer_value(
			json_object_get(reply, "port"));
	json_decref(reply);
	return rc;
}

int muxbe_register_gid(struct muxbe *mb, const char *port,
		       const uint8_t gid[16], uint16_t *port_index)
{
	return muxbe_gid_add(mb, REG_GID, port, gid, port_index);
}

int muxbe_share_gid(struct muxbe *mb, const char *port, const uint8_t gid[16],
		    uint16_t *port_index)
{
	return muxbe_gid_add(mb, REG_SHARED_GID, port, gid, port_index);
}

int muxbe_unregister_gid(struct muxbe *mb, const char *port,
			 const uint8_t gid[16])
{
	struct reg key = { .kind = REG_GID, .port = (char *)port };

	memcpy(key.gid, gid, 16);
	return muxbe_reg_del(mb, &key);
}

int muxbe_register_qpn(struct muxbe *mb, const char *port, uint32_t qpn)
{
	struct reg key = { .kind = REG_QPN, .port = (char *)port, .qpn = qpn };

	return muxbe_reg_add(mb, &key, NULL);
}

int muxbe_unregister_qpn(struct muxbe *mb, const char *port, uint32_t qpn)
{
	struct reg key = { .kind = REG_QPN, .port = (char *)port, .qpn = qpn };

	return muxbe_reg_del(mb, &key);
}

static struct reg muxbe_listen_key(const char *port, const uint8_t gid[16],
				   uint64_t service_id)
{
	struct reg key = { .kind = REG_LISTEN,
			   .port = (char *)port,
			   .service_id = service_id };

	memcpy(key.gid, gid, 16);
	return key;
}

int muxbe_listen(struct muxbe *mb, const char *port, const uint8_t gid[16],
		 uint64_t service_id)
{
	struct reg key = muxbe_listen_key(port, gid, service_id);

	return muxbe_reg_add(mb, &key, NULL);
}

int muxbe_unlisten(struct muxbe *mb, const char *port, const uint8_t gid[16],
		   uint64_t service_id)
{
	struct reg key = muxbe_listen_key(port, gid, service_id);

	return muxbe_reg_del(mb, &key);
}

int muxbe_request(struct muxbe *mb, const char *request_json, char **reply_text)
{
	const char *err = NULL;
	json_t *req, *reply = NULL;
	int rc;

	*reply_text = NULL;
	if (proto_json_parse((const uint8_t *)request_json,
			     strlen(request_json), &req, &err) < 0)
		return -EINVAL;
	rc = muxbe_call_json(mb, req, &reply);
	if (rc == 0) {
		*reply_text = json_dumps(reply, JSON_COMPACT);
		json_decref(reply);
		if (*reply_text == NULL)
			rc = -ENOMEM;
	}
	return rc;
}

static int muxbe_encode_mad(const struct muxbe_addr *addr, const void *mad,
			    size_t len, uint8_t *out)
{
	struct proto_mad m;

	if (len == 0 || len > PROTO_MAD_MAX)
		return -EINVAL;
	memset(&m, 0, sizeof(m));
	m.addr.port = addr->port;
	m.addr.flags = addr->grh ? PROTO_MAD_F_GRH : 0;
	m.addr.hop_limit = addr->hop_limit;
	m.addr.traffic_class = addr->traffic_class;
	m.addr.sl = addr->sl;
	m.addr.flow_label = addr->flow_label;
	m.addr.remote_qpn = addr->remote_qpn;
	m.addr.qkey = addr->qkey;
	m.addr.lid = addr->lid;
	m.addr.pkey_index = addr->pkey_index;
	memcpy(m.addr.local_gid, addr->local_gid, 16);
	memcpy(m.addr.remote_gid, addr->remote_gid, 16);
	m.mad_len = (uint16_t)len;
	memcpy(m.mad, mad, len);
	return proto_mad_encode(&m, out, PROTO_MAD_ADDR_SIZE + PROTO_MAD_MAX);
}

int muxbe_send_mad(struct muxbe *mb, const struct muxbe_addr *addr,
		   const void *mad, size_t len, void *send_ctx)
{
	uint8_t buf[PROTO_MAD_ADDR_SIZE + PROTO_MAD_MAX];
	struct pending *p;
	int n, rc;

	n = muxbe_encode_mad(addr, mad, len, buf);
	if (n < 0)
		return n;
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		return -ENOMEM;
	p->kind = PENDING_SEND;
	p->send_ctx = send_ctx;
	pthread_mutex_lock(&mb->lock);
	rc = muxbe_submit_locked(mb, p, PROTO_KIND_MAD, buf, (size_t)n);
	pthread_mutex_unlock(&mb->lock);
	return rc;
}

int muxbe_send_mad_sync(struct muxbe *mb, const struct muxbe_addr *addr,
			const void *mad, size_t len)
{
	uint8_t buf[PROTO_MAD_ADDR_SIZE + PROTO_MAD_MAX];
	const char *msg = "";
	json_t *reply = NULL;
	int n, rc;

	n = muxbe_encode_mad(addr, mad, len, buf);
	if (n < 0)
		return n;
	rc = muxbe_call(mb, PROTO_KIND_MAD, buf, (size_t)n, &reply);
	if (rc < 0)
		return rc;
	rc = proto_reply_status(reply, &msg);
	pthread_mutex_lock(&mb->lock);
	if (rc < 0) {
		muxbe_set_error(mb, "%s", msg);
		mb->st.tx_errors++;
	} else {
		mb->st.tx_ok++;
	}
	pthread_mutex_unlock(&mb->lock);
	json_decref(reply);
	return rc;
}

int muxbe_post_recv(struct muxbe *mb, void *buf, size_t len, void *buf_ctx)
{
	struct posted *pb;

	if (buf == NULL || len < MUXBE_RECV_BUF_MIN)
		return -EINVAL;
	pb = malloc(sizeof(*pb));
	if (pb == NULL)
		return -ENOMEM;
	pb->buf = buf;
	pb->len = len;
	pb->ctx = buf_ctx;
	pthread_mutex_lock(&mb->lock);
	if (TAILQ_EMPTY(&mb->rxq) && mb->nposted >= mb->max_posted) {
		pthread_mutex_unlock(&mb->lock);
		free(pb);
		return -ENOBUFS;
	}
	/* A MAD waiting for a buffer completes into it now, in arrival
	 * order; the callback runs from muxbe_process(). */
	TAILQ_INSERT_TAIL(&mb->posted, pb, link);
	mb->nposted++;
	muxbe_place_queued(mb);
	pthread_mutex_unlock(&mb->lock);
	return 0;
}

int muxbe_flush_recv(struct muxbe *mb)
{
	struct completion *c;
	struct posted *pb;
	int n = 0;

	pthread_mutex_lock(&mb->lock);
	while ((pb = TAILQ_FIRST(&mb->posted)) != NULL) {
		TAILQ_REMOVE(&mb->posted, pb, link);
		mb->nposted--;
		c = calloc(1, sizeof(*c));
		if (c) {
			c->kind = COMP_RECV;
			c->ctx = pb->ctx;
			c->buf = pb->buf;
			c->status = -ECANCELED;
			muxbe_queue_completion(mb, c);
			n++;
		}
		free(pb);
	}
	pthread_mutex_unlock(&mb->lock);
	return n;
}

void muxbe_set_callbacks(struct muxbe *mb, const struct muxbe_callbacks *cb,
			 void *user)
{
	pthread_mutex_lock(&mb->lock);
	memset(&mb->cb, 0, sizeof(mb->cb));
	if (cb)
		mb->cb = *cb;
	mb->user = user;
	pthread_mutex_unlock(&mb->lock);
}

void muxbe_get_stats(struct muxbe *mb, struct muxbe_stats *st)
{
	pthread_mutex_lock(&mb->lock);
	*st = mb->st;
	st->rx_queue_len = mb->nrxq;
	st->posted = mb->nposted;
	pthread_mutex_unlock(&mb->lock);
}

void muxbe_last_error(struct muxbe *mb, char *buf, size_t len)
{
	pthread_mutex_lock(&mb->lock);
	snprintf(buf, len, "%s", mb->last_error);
	pthread_mutex_unlock(&mb->lock);
}
