// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Captures: the CM MADs the daemon receives and sends, as they are on the
 * wire, each with what the daemon did with it (delivered to which client,
 * sent, refused and why, dropped and why), for an administrator's
 * `rdmacm-muxctl capture` on the admin socket (a capture shows private
 * data and addresses).  One JSON line a MAD on that connection; the
 * command makes the capture file.
 *
 * Nothing is spent while nobody captures: the taps test one atomic flag.
 * A capture never slows the daemon for its reader: the taps put records in
 * the capture's ring under its lock, and the main thread writes them to
 * the connection as long as less than CAPTURE_OUT_MAX is waiting there; a
 * reader that falls behind loses records, counted and said at the end.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "mux/mux.h"
#include "common/gid.h"

#define CAPTURE_RING 4096
#define CAPTURE_OUT_MAX (4u << 20)
/* How often a capture's deadline is checked and its ring drained even
 * when nothing signals it. */
#define CAPTURE_TICK_MS 100

struct capture_rec {
	struct timespec t;
	uint64_t client;
	char vm[MUX_NAME_MAX + 1];
	uint8_t out;
	char port[64];
	char verdict[224];
	struct proto_mad m;
};

struct capture {
	struct mux *mux;
	struct proto_capture_request f;
	char what[96]; /* the filter, as the log says it */
	uint64_t max_count, deadline_ms;
	uint64_t matched, written, lost;
	pthread_mutex_t lock; /* the ring and the counts */
	struct capture_rec *ring;
	unsigned head, n;
	int ended;
	struct bufferevent *bev; /* the admin connection's, main thread */
	struct event *drain;     /* main thread; made active by the taps */
	struct event *tick;
	capture_end_fn end;
	void *end_arg;
};

struct capture_set {
	pthread_mutex_t lock;
	struct capture *s[CAPTURE_SESSIONS];
};

int capture_set_init(struct mux *mux)
{
	mux->captures = calloc(1, sizeof(*mux->captures));
	if (mux->captures == NULL)
		return -ENOMEM;
	pthread_mutex_init(&mux->captures->lock, NULL);
	return 0;
}

void capture_set_free(struct mux *mux)
{
	if (mux->captures == NULL)
		return;
	pthread_mutex_destroy(&mux->captures->lock);
	free(mux->captures);
	mux->captures = NULL;
}

void capture_filter_describe(const struct proto_capture_request *f, char *buf,
			     size_t len)
{
	char g[GID_STRLEN];
	struct gid gid;

	switch (f->by) {
	case PROTO_CAPTURE_CLIENT:
		snprintf(buf, len, "client %llu",
			 (unsigned long long)f->client);
		break;
	case PROTO_CAPTURE_VM: snprintf(buf, len, "VM \"%s\"", f->vm); break;
	case PROTO_CAPTURE_GID:
		memcpy(gid.raw, f->gid, 16);
		snprintf(buf, len, "GID %s", gid_format(&gid, g));
		break;
	default: snprintf(buf, len, "every MAD"); break;
	}
}

static int capture_matches(const struct proto_capture_request *f,
			   const struct capture_rec *r)
{
	switch (f->by) {
	case PROTO_CAPTURE_CLIENT: return r->client == f->client;
	case PROTO_CAPTURE_VM: return r->client && strcmp(r->vm, f->vm) == 0;
	case PROTO_CAPTURE_GID:
		return memcmp(r->m.addr.local_gid, f->gid, 16) == 0 ||
		       memcmp(r->m.addr.remote_gid, f->gid, 16) == 0;
	default: return 1;
	}
}

/* Under c->lock. */
static void capture_put(struct capture *c, const struct capture_rec *r)
{
	if (c->ended || c->matched >= c->max_count)
		return;
	c->matched++;
	if (c->n == CAPTURE_RING) {
		c->lost++;
		return;
	}
	c->ring[(c->head + c->n) % CAPTURE_RING] = *r;
	c->n++;
}

void capture_mad(struct mux *mux, int out, const struct port *p,
		 const struct proto_mad *m, const struct client_info *ci,
		 const char *fmt, ...)
{
	struct capture_set *set = mux->captures;
	struct capture_rec r;
	va_list ap;
	unsigned i;

	memset(&r, 0, offsetof(struct capture_rec, m));
	clock_gettime(CLOCK_REALTIME, &r.t);
	r.out = (uint8_t)out;
	if (ci) {
		r.client = ci->id;
		snprintf(r.vm, sizeof(r.vm), "%s", ci->name);
	}
	snprintf(r.port, sizeof(r.port), "%s", p ? p->name : "-");
	va_start(ap, fmt);
	vsnprintf(r.verdict, sizeof(r.verdict), fmt, ap);
	va_end(ap);
	r.m = *m;
	pthread_mutex_lock(&set->lock);
	for (i = 0; i < CAPTURE_SESSIONS; i++) {
		struct capture *c = set->s[i];

		if (c == NULL || !capture_matches(&c->f, &r))
			continue;
		pthread_mutex_lock(&c->lock);
		capture_put(c, &r);
		pthread_mutex_unlock(&c->lock);
		event_active(c->drain, EV_WRITE, 0);
	}
	pthread_mutex_unlock(&set->lock);
}

static const char capture_digits[] = "0123456789abcdef";

/* in as hex at p; past the last digit. */
static char *capture_hex(char *p, const uint8_t *in, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++) {
		*p++ = capture_digits[in[i] >> 4];
		*p++ = capture_digits[in[i] & 15];
	}
	return p;
}

/* s as a JSON string at p (RFC 8259, section 7: quotes, backslashes and
 * control characters escaped, UTF-8 as it is); past its closing quote.
 * At most 2 + 6 * strlen(s) bytes. */
static char *capture_json_str(char *p, const char *s)
{
	unsigned char c;

	*p++ = '"';
	for (; (c = (unsigned char)*s) != '\0'; s++) {
		if (c == '"' || c == '\\') {
			*p++ = '\\';
			*p++ = (char)c;
		} else if (c < 0x20 || c == 0x7f) {
			memcpy(p, "\\u00", 4);
			p[4] = capture_digits[c >> 4];
			p[5] = capture_digits[c & 15];
			p += 6;
		} else {
			*p++ = (char)c;
		}
	}
	*p++ = '"';
	return p;
}

/* A record's line, at most: its strings escaped at 6 bytes a byte, the
 * MAD in hex, two GIDs and the numbers. */
#define CAPTURE_REC_STRINGS                        \
	(sizeof(((struct capture_rec *)0)->vm) +   \
	 sizeof(((struct capture_rec *)0)->port) + \
	 sizeof(((struct capture_rec *)0)->verdict))
#define CAPTURE_LINE_MAX \
	(6 * CAPTURE_REC_STRINGS + 2 * PROTO_MAD_MAX + 2 * GID_STRLEN + 512)

/* One record as the JSON line rdmacm-muxctl reads (rdmacm-muxctl(8),
 * CAPTURE), written straight into out: a line a MAD, and at a capture
 * of everything the main thread's largest cost (jansson's objects and
 * dump were three quarters of the daemon's CPU then, perf). */
static void capture_write_rec(struct evbuffer *out, const struct capture_rec *r)
{
	char src[GID_STRLEN], dst[GID_STRLEN], line[CAPTURE_LINE_MAX], *p;
	const struct proto_mad_addr *a = &r->m.addr;
	struct gid l, rem;

	memcpy(l.raw, a->local_gid, 16);
	memcpy(rem.raw, a->remote_gid, 16);
	gid_format(r->out ? &l : &rem, src);
	gid_format(r->out ? &rem : &l, dst);
	p = line + snprintf(line, 160,
			    "{\"sec\":%lld,\"nsec\":%ld,\"dir\":\"%s\","
			    "\"client\":%llu,\"port\":",
			    (long long)r->t.tv_sec, (long)r->t.tv_nsec,
			    r->out ? "out" : "in",
			    (unsigned long long)r->client);
	p = capture_json_str(p, r->port);
	memcpy(p, ",\"vm\":", 6);
	p += 6;
	if (r->client) {
		p = capture_json_str(p, r->vm);
	} else {
		memcpy(p, "null", 4);
		p += 4;
	}
	memcpy(p, ",\"verdict\":", 11);
	p = capture_json_str(p + 11, r->verdict);
	p += snprintf(p, 2 * GID_STRLEN + 200,
		      ",\"src\":\"%s\",\"dst\":\"%s\",\"qpn\":%u,"
		      "\"pkey_index\":%u,\"sl\":%u,\"tclass\":%u,"
		      "\"hop_limit\":%u,\"flow_label\":%u,\"mad\":\"",
		      src, dst, (unsigned)a->remote_qpn,
		      (unsigned)a->pkey_index, (unsigned)a->sl,
		      (unsigned)a->traffic_class, (unsigned)a->hop_limit,
		      (unsigned)a->flow_label);
	p = capture_hex(p, r->m.mad, r->m.mad_len);
	memcpy(p, "\"}\n", 3);
	evbuffer_add(out, line, (size_t)(p + 3 - line));
}

/* Main thread: a capture that is over leaves the set, says so, and is
 * handed back to its connection (which frees it with capture_free()). */
static void capture_finish(struct capture *c, const char *why)
{
	struct capture_set *set = c->mux->captures;
	unsigned i;

	if (c->ended)
		return;
	pthread_mutex_lock(&set->lock);
	for (i = 0; i < CAPTURE_SESSIONS; i++)
		if (set->s[i] == c)
			set->s[i] = NULL;
	atomic_fetch_sub(&c->mux->capturing, 1);
	pthread_mutex_unlock(&set->lock);
	pthread_mutex_lock(&c->lock);
	c->ended = 1;
	c->lost += c->n; /* what the reader did not take in time */
	c->n = 0;
	pthread_mutex_unlock(&c->lock);
	if (c->bev)
		evbuffer_add_printf(
			bufferevent_get_output(c->bev),
			"{\"end\":true,\"why\":\"%s\",\"captured\":%llu,\"lost\":%llu}\n",
			why, (unsigned long long)c->written,
			(unsigned long long)c->lost);
	log_finfo(NULL, "admin: capture of %s ended (%s): %llu MADs, %llu lost",
		  c->what, why, (unsigned long long)c->written,
		  (unsigned long long)c->lost);
	if (c->end)
		c->end(c->end_arg);
}

static void capture_drain(evutil_socket_t fd, short what, void *arg)
{
	struct capture *c = arg;
	struct evbuffer *out;
	struct capture_rec r;
	int done;

	(void)fd;
	(void)what;
	if (c->ended)
		return;
	out = bufferevent_get_output(c->bev);
	for (;;) {
		if (evbuffer_get_length(out) >= CAPTURE_OUT_MAX)
			break; /* the reader is behind: the ring fills */
		pthread_mutex_lock(&c->lock);
		if (c->n == 0) {
			done = c->matched >= c->max_count;
			pthread_mutex_unlock(&c->lock);
			if (done)
				capture_finish(c, "count");
			return;
		}
		r = c->ring[c->head];
		c->head = (c->head + 1) % CAPTURE_RING;
		c->n--;
		pthread_mutex_unlock(&c->lock);
		capture_write_rec(out, &r);
		c->written++;
	}
}

static void capture_tick(evutil_socket_t fd, short what, void *arg)
{
	struct capture *c = arg;

	capture_drain(fd, what, arg);
	if (!c->ended && mux_now_ms() >= c->deadline_ms)
		capture_finish(c, "time");
}

int capture_start(struct mux *mux, struct event_base *base,
		  struct bufferevent *bev,
		  const struct proto_capture_request *req, capture_end_fn end,
		  void *end_arg, struct capture **out)
{
	struct capture_set *set = mux->captures;
	struct timeval tv = { 0, CAPTURE_TICK_MS * 1000 };
	struct capture *c = calloc(1, sizeof(*c));
	unsigned i;

	if (c == NULL)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	c->ended = 1; /* until it is in the set */
	c->ring = malloc(CAPTURE_RING * sizeof(*c->ring));
	c->drain = event_new(base, -1, 0, capture_drain, c);
	c->tick = event_new(base, -1, EV_PERSIST, capture_tick, c);
	if (c->ring == NULL || c->drain == NULL || c->tick == NULL) {
		capture_free(c);
		return -ENOMEM;
	}
	c->mux = mux;
	c->f = *req;
	c->max_count = req->count;
	c->deadline_ms = mux_now_ms() + (uint64_t)req->seconds * 1000;
	c->bev = bev;
	c->end = end;
	c->end_arg = end_arg;
	capture_filter_describe(req, c->what, sizeof(c->what));
	pthread_mutex_lock(&set->lock);
	for (i = 0; i < CAPTURE_SESSIONS && set->s[i]; i++)
		;
	if (i == CAPTURE_SESSIONS) {
		pthread_mutex_unlock(&set->lock);
		capture_free(c);
		return -EBUSY;
	}
	c->ended = 0;
	set->s[i] = c;
	atomic_fetch_add(&mux->capturing, 1);
	pthread_mutex_unlock(&set->lock);
	event_add(c->tick, &tv);
	*out = c;
	return 0;
}

/* Its connection is gone: it ends, told to nobody. */
static void capture_stop(struct capture *c)
{
	c->end = NULL; /* its connection is going: nobody to tell */
	c->bev = NULL;
	capture_finish(c, "stopped");
}

void capture_free(struct capture *c)
{
	if (c == NULL)
		return;
	if (!c->ended)
		capture_stop(c);
	if (c->drain)
		event_free(c->drain);
	if (c->tick)
		event_free(c->tick);
	pthread_mutex_destroy(&c->lock);
	free(c->ring);
	free(c);
}
