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
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "muxbe.h"
#include "../common/tree.h"
#include "../common/wire.h"
#include "../protocol/rdmacm_mux_proto.h"

#define MUXBE_MAX_REPLY (1u << 20)

enum pending_kind { PENDING_SYNC, PENDING_SEND };

struct pending {
	TAILQ_ENTRY(pending) link;
	enum pending_kind kind;
	uint32_t rid;
	int done;
	json_t *reply;          /* SYNC: the reply */
	void *send_ctx;         /* SEND */
};

enum completion_kind { COMP_RECV, COMP_SEND, COMP_PORT, COMP_DISCONNECT, COMP_LOST };

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
	int sock;
	int epfd;
	int evfd;
	int broken;             /* negative errno once the link is gone */
	int reader_active;      /* a blocking caller is polling the socket */
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

static void set_error(struct muxbe *mb, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void set_error(struct muxbe *mb, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(mb->last_error, sizeof(mb->last_error), fmt, ap);
	va_end(ap);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void wake_process(struct muxbe *mb)
{
	uint64_t one = 1;

	if (write(mb->evfd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is saturated, so it is readable. */
	}
}

static void queue_completion(struct muxbe *mb, struct completion *c)
{
	TAILQ_INSERT_TAIL(&mb->completions, c, link);
	wake_process(mb);
}

static void addr_from_proto(struct muxbe_addr *a, const struct proto_mad_addr *p)
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

/* The receive buffer layout a UD QP gives: a 40-byte GRH, then the MAD. */
static void fill_recv(struct muxbe *mb, const struct posted *pb,
		      const struct proto_mad *m)
{
	uint8_t *grh = pb->buf;
	struct completion *c = calloc(1, sizeof(*c));

	memset(grh, 0, MUXBE_GRH_SIZE);
	wire_put32(grh, (6u << 28) | ((uint32_t)m->addr.traffic_class << 20) |
			     (m->addr.flow_label & 0xfffff));
	wire_put16(grh + 4, m->mad_len);
	grh[6] = 0x1b;          /* next header: IBA transport */
	grh[7] = m->addr.hop_limit;
	memcpy(grh + 8, m->addr.remote_gid, 16);        /* SGID: sender */
	memcpy(grh + 24, m->addr.local_gid, 16);        /* DGID: us */
	memcpy(grh + MUXBE_GRH_SIZE, m->mad, m->mad_len);
	mb->st.rx_delivered++;
	if (c == NULL)
		return;
	c->kind = COMP_RECV;
	c->ctx = pb->ctx;
	c->buf = pb->buf;
	c->len = m->mad_len;
	addr_from_proto(&c->addr, &m->addr);
	queue_completion(mb, c);
}

static void handle_mad_event(struct muxbe *mb, const struct proto_frame *f)
{
	struct queued_mad *q;
	struct posted *pb;
	struct proto_mad m;

	if (proto_mad_decode(f->payload, f->length, &m) < 0)
		return;
	pb = TAILQ_FIRST(&mb->posted);
	if (pb && TAILQ_EMPTY(&mb->rxq)) {
		TAILQ_REMOVE(&mb->posted, pb, link);
		mb->nposted--;
		fill_recv(mb, pb, &m);
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

static void handle_json_event(struct muxbe *mb, const struct proto_frame *f)
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
			c->addr.port = (uint16_t)json_integer_value(json_object_get(j, "port"));
			c->status = json_is_string(json_object_get(j, "state")) &&
				    strcmp(json_string_value(json_object_get(j, "state")),
					   "active") == 0;
			snprintf(c->message, sizeof(c->message), "%s",
				 json_string_value(json_object_get(j, "port_name")) ?: "");
			queue_completion(mb, c);
		}
	} else if (ev && strcmp(ev, "mad_lost") == 0) {
		mb->st.tx_lost = (uint64_t)json_integer_value(json_object_get(j, "total"));
		c = calloc(1, sizeof(*c));
		if (c) {
			c->kind = COMP_LOST;
			c->status = (int)json_integer_value(json_object_get(j, "count"));
			c->addr.port = (uint16_t)json_integer_value(json_object_get(j, "port"));
			snprintf(c->message, sizeof(c->message), "%s from %s to %s: %s",
				 json_string_value(json_object_get(j, "attr")) ?: "MAD",
				 json_string_value(json_object_get(j, "src_gid")) ?: "?",
				 json_string_value(json_object_get(j, "dst_gid")) ?: "?",
				 json_string_value(json_object_get(j, "reason")) ?: "lost");
			queue_completion(mb, c);
		}
	} else if (ev && (strcmp(ev, "protocol_error") == 0 ||
			  strcmp(ev, "disconnected") == 0 ||
			  strcmp(ev, "refused") == 0)) {
		/* The daemon is about to close: say why. */
		set_error(mb, "daemon: %s: %s", ev,
			  json_string_value(json_object_get(j, "message")) ?: "");
	}
	json_decref(j);
}

static struct pending *pending_find(struct muxbe *mb, uint32_t rid)
{
	struct pending *p;

	TAILQ_FOREACH(p, &mb->pending, link)
		if (p->rid == rid)
			return p;
	return NULL;
}

static void handle_reply(struct muxbe *mb, const struct proto_frame *f)
{
	struct pending *p = pending_find(mb, f->request_id);
	const char *err = NULL, *msg = "";
	struct completion *c;
	json_t *j = NULL;
	int status;

	if (p == NULL)
		return;         /* a waiter that timed out and left */
	if (f->kind != PROTO_KIND_JSON ||
	    proto_json_parse(f->payload, f->length, &j, &err) < 0)
		j = proto_reply_error(EPROTO, "malformed reply from the daemon");
	if (p->kind == PENDING_SYNC) {
		p->reply = j;
		p->done = 1;
		pthread_cond_broadcast(&mb->cond);
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
		queue_completion(mb, c);
	}
	json_decref(j);
	TAILQ_REMOVE(&mb->pending, p, link);
	free(p);
}

/* The link is gone: fail everything in flight, once. */
static void mark_broken(struct muxbe *mb, int err)
{
	struct completion *c;
	struct pending *p, *next;

	if (mb->broken)
		return;
	mb->broken = err;
	TAILQ_FOREACH_SAFE(p, &mb->pending, link, next) {
		if (p->kind == PENDING_SYNC) {
			p->done = 1;
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (c) {
			c->kind = COMP_SEND;
			c->ctx = p->send_ctx;
			c->status = err;
			snprintf(c->message, sizeof(c->message),
				 "connection to the daemon lost");
			queue_completion(mb, c);
		}
		TAILQ_REMOVE(&mb->pending, p, link);
		free(p);
	}
	c = calloc(1, sizeof(*c));
	if (c) {
		c->kind = COMP_DISCONNECT;
		c->status = err;
		queue_completion(mb, c);
	}
	pthread_cond_broadcast(&mb->cond);
}

/* Lock held.  Read what is there without blocking and decode it. */
static void read_available(struct muxbe *mb)
{
	uint8_t buf[16384];
	struct proto_frame f;
	size_t off, used;
	ssize_t n;
	int rc;

	while (!mb->broken) {
		n = recv(mb->sock, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0) {
			mark_broken(mb, -ECONNRESET);
			return;
		}
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				mark_broken(mb, -errno);
			return;
		}
		for (off = 0; off < (size_t)n && !mb->broken; off += used) {
			rc = proto_decoder_feed(&mb->dec, buf + off, (size_t)n - off,
						&used, &f);
			if (rc < 0) {
				set_error(mb, "malformed frame from the daemon");
				mark_broken(mb, -EPROTO);
				return;
			}
			if (rc == 0)
				continue;
			if (f.flags & PROTO_FLAG_REPLY)
				handle_reply(mb, &f);
			else if (f.flags & PROTO_FLAG_EVENT && f.kind == PROTO_KIND_MAD)
				handle_mad_event(mb, &f);
			else if (f.flags & PROTO_FLAG_EVENT)
				handle_json_event(mb, &f);
		}
	}
}

/* Lock held.  Write a whole frame; while the socket is full, keep reading
 * so that the daemon, which stops reading us when its output to us is
 * full, can always make progress. */
static int write_frame(struct muxbe *mb, uint8_t kind, uint32_t rid,
		       const void *payload, size_t len)
{
	uint8_t hdr[PROTO_HDR_SIZE];
	struct iovec iov[2];
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	uint64_t deadline = now_ms() + (uint64_t)mb->timeout_ms;
	size_t total = sizeof(hdr) + len, sent = 0, skip;
	struct pollfd pfd;
	ssize_t n;

	proto_header_encode(hdr, kind, 0, rid, (uint32_t)len);
	while (sent < total) {
		if (mb->broken)
			return mb->broken;
		skip = sent;
		iov[0].iov_base = hdr + (skip < sizeof(hdr) ? skip : sizeof(hdr));
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
			read_available(mb);
			mark_broken(mb, err);
			return mb->broken;
		}
		if (now_ms() >= deadline) {
			/* A partial frame would desynchronise the stream. */
			set_error(mb, "daemon not reading; timed out writing");
			mark_broken(mb, -ETIMEDOUT);
			return -ETIMEDOUT;
		}
		pfd.fd = mb->sock;
		pfd.events = POLLOUT | POLLIN;
		if (poll(&pfd, 1, 50) > 0 && (pfd.revents & POLLIN))
			read_available(mb);
	}
	return 0;
}

/* Lock held on entry and exit.  Wait for a pending reply. */
static int wait_reply(struct muxbe *mb, struct pending *p, json_t **reply)
{
	uint64_t deadline = now_ms() + (uint64_t)mb->timeout_ms;
	struct pollfd pfd = { .fd = mb->sock, .events = POLLIN };
	struct timespec ts;
	uint64_t now;
	int rc = 0;

	while (!p->done) {
		now = now_ms();
		if (now >= deadline) {
			rc = -ETIMEDOUT;
			set_error(mb, "no reply from the daemon in %d ms",
				  mb->timeout_ms);
			break;
		}
		if (!mb->reader_active) {
			mb->reader_active = 1;
			pthread_mutex_unlock(&mb->lock);
			poll(&pfd, 1, (int)(deadline - now < 100 ? deadline - now : 100));
			pthread_mutex_lock(&mb->lock);
			mb->reader_active = 0;
			read_available(mb);
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
		rc = mb->broken ? mb->broken : -EPROTO;
	if (rc == 0)
		*reply = p->reply;
	else
		json_decref(p->reply);
	TAILQ_REMOVE(&mb->pending, p, link);
	free(p);
	return rc;
}

static uint32_t next_rid(struct muxbe *mb)
{
	if (++mb->next_rid == 0)
		mb->next_rid = 1;
	return mb->next_rid;
}

/* Lock held.  Write a request frame, then track it.  The daemon answers
 * only a whole frame and the lock is held until it is written, so the
 * reply cannot be read before the entry is listed.  On failure p is
 * freed and nothing is reported through callbacks. */
static int submit_locked(struct muxbe *mb, struct pending *p, uint8_t kind,
			 const void *payload, size_t len)
{
	int rc = mb->broken;

	if (rc == 0) {
		p->rid = next_rid(mb);
		rc = write_frame(mb, kind, p->rid, payload, len);
	}
	if (rc < 0) {
		free(p);
		return rc;
	}
	TAILQ_INSERT_TAIL(&mb->pending, p, link);
	return 0;
}

/* Send a frame and wait for its reply; *reply is the reply object. */
static int call(struct muxbe *mb, uint8_t kind, const void *payload,
		size_t len, json_t **reply)
{
	struct pending *p = calloc(1, sizeof(*p));
	int rc;

	if (p == NULL)
		return -ENOMEM;
	p->kind = PENDING_SYNC;
	pthread_mutex_lock(&mb->lock);
	rc = submit_locked(mb, p, kind, payload, len);
	if (rc == 0)
		rc = wait_reply(mb, p, reply);
	pthread_mutex_unlock(&mb->lock);
	return rc;
}

/* A JSON call whose reply status becomes the return value. */
static int call_json(struct muxbe *mb, json_t *req, json_t **reply_out)
{
	char *text = json_dumps(req, JSON_COMPACT);
	const char *msg = "";
	json_t *reply = NULL;
	int rc;

	json_decref(req);
	if (text == NULL)
		return -ENOMEM;
	rc = call(mb, PROTO_KIND_JSON, text, strlen(text), &reply);
	free(text);
	if (rc < 0)
		return rc;
	rc = proto_reply_status(reply, &msg);
	if (rc < 0) {
		pthread_mutex_lock(&mb->lock);
		set_error(mb, "%s", msg);
		pthread_mutex_unlock(&mb->lock);
	}
	if (reply_out && rc == 0)
		*reply_out = reply;
	else
		json_decref(reply);
	return rc;
}

static int connect_socket(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sun.sun_path))
		return -ENAMETOOLONG;
	strcpy(sun.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

int muxbe_connect(const struct muxbe_options *opts, struct muxbe **out)
{
	const char *path = opts->socket_path;
	struct epoll_event ev = { .events = EPOLLIN };
	struct muxbe *mb;
	json_t *reply = NULL;
	int rc;

	*out = NULL;
	if (path == NULL)
		path = getenv("RDMACM_MUX_SOCKET");
	if (path == NULL)
		path = MUXBE_DEFAULT_SOCKET;
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
	mb->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	mb->epfd = epoll_create1(EPOLL_CLOEXEC);
	mb->sock = connect_socket(path);
	if (mb->sock < 0) {
		rc = mb->sock;
		set_error(mb, "cannot connect to %s: %s", path, strerror(-rc));
		goto fail;
	}
	if (mb->evfd < 0 || mb->epfd < 0) {
		rc = -errno;
		goto fail;
	}
	ev.data.fd = mb->sock;
	epoll_ctl(mb->epfd, EPOLL_CTL_ADD, mb->sock, &ev);
	ev.data.fd = mb->evfd;
	epoll_ctl(mb->epfd, EPOLL_CTL_ADD, mb->evfd, &ev);

	rc = call_json(mb, json_pack("{s:s, s:{s:i, s:i}, s:s, s:[s, s]}",
				     "op", "hello", "protocol", "major",
				     PROTO_VERSION_MAJOR, "minor",
				     PROTO_VERSION_MINOR, "name",
				     opts->name ? opts->name : "",
				     "features", "mad", "port-events"), &reply);
	if (rc < 0)
		goto fail;
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
	read_available(mb);
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
				cb.send_done(user, c->ctx, c->status, c->message);
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
		case COMP_LOST:
			if (cb.mad_lost)
				cb.mad_lost(user, c->addr.port, (unsigned)c->status,
					    c->message);
			break;
		}
		free(c);
		count++;
	}
	return count ? count : broken;
}

int muxbe_ping(struct muxbe *mb)
{
	return call_json(mb, json_pack("{s:s}", "op", "ping"), NULL);
}

static json_t *gid_request(const char *op, const char *port,
			   const uint8_t gid[16])
{
	json_t *req = json_pack("{s:s, s:o}", "op", op, "gid",
				proto_gid_to_json(gid));

	if (port)
		json_object_set_new(req, "port", json_string(port));
	return req;
}

int muxbe_register_gid(struct muxbe *mb, const char *port,
		       const uint8_t gid[16], uint16_t *port_index)
{
	json_t *reply = NULL;
	int rc = call_json(mb, gid_request("register_gid", port, gid), &reply);

	if (rc == 0) {
		if (port_index)
			*port_index = (uint16_t)json_integer_value(
				json_object_get(reply, "port"));
		json_decref(reply);
	}
	return rc;
}

int muxbe_unregister_gid(struct muxbe *mb, const char *port,
			 const uint8_t gid[16])
{
	return call_json(mb, gid_request("unregister_gid", port, gid), NULL);
}

int muxbe_request(struct muxbe *mb, const char *request_json, char **reply_text)
{
	const char *err = NULL;
	json_t *req, *reply = NULL;
	int rc;

	*reply_text = NULL;
	if (proto_json_parse((const uint8_t *)request_json, strlen(request_json),
			     &req, &err) < 0)
		return -EINVAL;
	rc = call_json(mb, req, &reply);
	if (rc == 0) {
		*reply_text = json_dumps(reply, JSON_COMPACT);
		json_decref(reply);
		if (*reply_text == NULL)
			rc = -ENOMEM;
	}
	return rc;
}

static int encode_mad(const struct muxbe_addr *addr, const void *mad,
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

	n = encode_mad(addr, mad, len, buf);
	if (n < 0)
		return n;
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		return -ENOMEM;
	p->kind = PENDING_SEND;
	p->send_ctx = send_ctx;
	pthread_mutex_lock(&mb->lock);
	rc = submit_locked(mb, p, PROTO_KIND_MAD, buf, (size_t)n);
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

	n = encode_mad(addr, mad, len, buf);
	if (n < 0)
		return n;
	rc = call(mb, PROTO_KIND_MAD, buf, (size_t)n, &reply);
	if (rc < 0)
		return rc;
	rc = proto_reply_status(reply, &msg);
	pthread_mutex_lock(&mb->lock);
	if (rc < 0) {
		set_error(mb, "%s", msg);
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
	struct queued_mad *q;
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
	q = TAILQ_FIRST(&mb->rxq);
	if (q) {
		/* A MAD was waiting for this buffer: complete it now, in
		 * arrival order; the callback runs from muxbe_process(). */
		TAILQ_REMOVE(&mb->rxq, q, link);
		mb->nrxq--;
		fill_recv(mb, pb, &q->m);
		free(q);
		free(pb);
	} else if (mb->nposted >= mb->max_posted) {
		pthread_mutex_unlock(&mb->lock);
		free(pb);
		return -ENOBUFS;
	} else {
		TAILQ_INSERT_TAIL(&mb->posted, pb, link);
		mb->nposted++;
	}
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
			queue_completion(mb, c);
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
