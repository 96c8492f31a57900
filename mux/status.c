// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The status socket: read-only by construction, served by its own thread
 * so that no query, however large or slow, holds up a client's accept or
 * hello.  A connection may send one query line (a JSON object); without
 * one within STATUS_QUERY_WAIT_MS it gets the default snapshot.  One
 * answer, then the connection is closed.  Readers that take less than
 * 4 KiB of their answer in --status-timeout-ms are dropped, and
 * connections are bounded in all and per uid.
 */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>

#include "mux/mux.h"
#include "common/log.h"

/* Concurrent status connections, in all and per uid. */
#define STATUS_MAX_CONNS 64
#define STATUS_MAX_CONNS_PER_UID 16
/* A query line, at most; longer is an error. */
#define STATUS_QUERY_MAX PROTO_STATUS_QUERY_MAX
/* How long a connection may take to send its query. */
#define STATUS_QUERY_WAIT_MS 100
/* A reader that takes less in --status-timeout-ms is dropped. */
#define STATUS_WRITE_CHUNK 4096
/* Connections listed per client in the snapshot (all are counted). */
#define STATUS_CONNS_PER_CLIENT 64
#define STATUS_CONNS_IN_ALL 4096
/* What a connection sent beyond its query, read off before the close:
 * at most a default unix socket's buffer (net.core.rmem_default). */
#define STATUS_DRAIN_MAX (256 * 1024)
/* An answer this large gives its memory back once sent (status_free_text). */
#define STATUS_TRIM_BYTES (256u << 10)

struct status_conn {
	TAILQ_ENTRY(status_conn) link;
	struct status_server *srv;
	struct bufferevent *bev;
	struct event *query_timer;
	uid_t uid;
	int answered;
	/* Watching the reader once the answer is queued: */
	struct event *watch;
	uint64_t progress_ms; /* when it last took something */
	size_t left_seen;     /* of the answer, not yet written */
	int outq_seen;        /* SIOCOUTQ: in its socket, unread */
};

struct status_server {
	struct mux *mux;
	struct event_base *base;
	struct event *stop_ev;
	pthread_t thread;
	int running;
	struct unix_listener ul;
	TAILQ_HEAD(, status_conn) conns;
	unsigned nconns;
};

static json_t *status_ports(struct mux *mux)
{
	json_t *arr = json_array(), *pj, *table, *g;
	struct port *p;
	struct gid gid;
	uint64_t owner;
	size_t j;
	int i;

	for (i = 0; i < mux->nports; i++) {
		p = &mux->ports[i];
		pj = port_json(p, 1);
		table = json_object_get(pj, "gid_table");
		json_array_foreach(table, j, g) {
			gid_parse(json_string_value(json_object_get(g, "gid")),
				  &gid);
			owner = router_gid_owner(mux->router, p->index, &gid);
			json_object_set_new(g, "owner",
					    owner == ROUTER_GID_SHARED
						    ? json_string("shared")
					    : owner ? json_integer(
							      (json_int_t)owner)
						    : json_null());
		}
		json_object_set_new(pj, "counters",
				    json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}",
					      "rx",
					      (json_int_t)atomic_load(&p->rx),
					      "tx",
					      (json_int_t)atomic_load(&p->tx),
					      "rx_errors",
					      (json_int_t)atomic_load(
						      &p->rx_errors),
					      "tx_errors",
					      (json_int_t)atomic_load(
						      &p->tx_errors),
					      "wire_dropped",
					      (json_int_t)atomic_load(
						      &p->wire_dropped),
					      "gid_table_changes",
					      (json_int_t)atomic_load(
						      &p->gid_table_changes)));
		/* MADs that waited for their destination's address
		 * (port_parked.c); expired: it never answered. */
		if (p->parked)
			json_object_set_new(
				pj, "waiting_for_address",
				json_pack("{s:I, s:I, s:I}", "now",
					  (json_int_t)atomic_load(
						  &p->parked_now),
					  "total",
					  (json_int_t)atomic_load(
						  &p->parked_total),
					  "expired",
					  (json_int_t)atomic_load(
						  &p->parked_expired)));
		json_array_append_new(arr, pj);
	}
	return arr;
}

static json_t *status_snapshot(struct mux *mux)
{
	struct router_counts rc;
	struct timespec now;
	json_t *workers = json_array(), *snap;
	struct policy *pol;
	int i;

	clock_gettime(CLOCK_MONOTONIC, &now);
	router_counts(mux->router, &rc);
	pol = mux_policy_get(mux);
	for (i = 0; i < mux->nworkers; i++)
		json_array_append_new(workers,
				      json_pack("{s:i, s:I}", "index", i,
						"inbox_dropped",
						(json_int_t)
							worker_inbox_dropped(
								mux->workers
									[i])));
	snap = json_pack(
		"{s:{s:s, s:i, s:I, s:s, s:s, s:i, s:i, s:{s:i, s:i, s:i, s:i, s:I, s:i, s:i, s:i, s:i, s:i, s:i}}, s:o, s:o*, s:{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:I}, s:o, s:o}",
		"daemon", "version", MUX_VERSION, "pid", (int)getpid(),
		"uptime_s", (json_int_t)(now.tv_sec - mux->started.tv_sec),
		"socket", mux->cfg.socket_path, "status_socket",
		mux->cfg.status_path, "protocol_major", PROTO_VERSION_MAJOR,
		"poll_us", (int)atomic_load(&mux->cfg.poll_us), "limits",
		"max_clients", (int)mux->cfg.max_clients, "max_clients_per_uid",
		(int)mux->cfg.max_clients_per_uid, "max_gids_per_client",
		(int)mux->cfg.max_gids_per_client, "max_comm_ids_per_client",
		(int)mux->cfg.max_comm_ids_per_client, "client_queue_bytes",
		(json_int_t)mux->cfg.client_outq_max, "timewait_ms",
		(int)mux->cfg.timewait_ms, "handshake_timeout_ms",
		(int)mux->cfg.handshake_ms, "hello_timeout_ms",
		(int)mux->cfg.hello_timeout_ms, "max_peer_records",
		(int)mux->cfg.max_peer_records, "max_peer_records_per_source",
		(int)mux->cfg.max_peer_records_per_source, "max_timewait",
		(int)mux->cfg.max_timewait, "ports", status_ports(mux),
		"clients",
		clients_json(mux->clients, mux->router, STATUS_CONNS_PER_CLIENT,
			     STATUS_CONNS_IN_ALL),
		"routing", "gids", (int)rc.gids, "comm_ids", (int)rc.comm_ids,
		"sidr_ids", (int)rc.sidr_ids, "handshake", (int)rc.handshake,
		"established", (int)rc.established, "disconnecting",
		(int)rc.disconnecting, "draining", (int)rc.draining,
		"peer_records", (int)rc.peer_records, "peer_records_refused",
		(json_int_t)rc.peer_records_refused, "timewait_evicted",
		(json_int_t)rc.timewait_evicted, "counters",
		stats_to_json(&mux->stats), "workers", workers);
	if (snap)
		json_object_set_new(json_object_get(snap, "routing"),
				    "peer_records_evicted",
				    json_integer(
					    (json_int_t)
						    rc.peer_records_evicted));
	if (snap)
		json_object_set_new(snap, "policy",
				    json_pack("{s:s, s:i}", "source",
					      pol->source, "rules",
					      pol->nrules));
	policy_unref(pol);
	return snap;
}

/* One page of a client's connections. */
static json_t *status_connections(struct mux *mux,
				  const struct proto_status_query *q)
{
	/* The admin socket's test of a live client, so both agree. */
	int connected = clients_worker_of(mux->clients, q->client) >= 0;
	struct router_counts rc;
	json_t *list;

	router_client_counts(mux->router, q->client, &rc);
	/* A client that is gone may still own connections: a restarted
	 * daemon holds a session's for its return (RESTARTS).  With none,
	 * the id names nobody, as the admin socket's disconnect says. */
	if (!connected && rc.comm_ids + rc.sidr_ids == 0)
		return proto_reply_error(
			ENOENT,
			"no client %llu, and no connections held for one",
			(unsigned long long)q->client);
	list = router_conns_json(mux->router, q->client, q->offset, q->limit,
				 mux_now_ms());
	if (list == NULL)
		return proto_reply_error(ENOMEM, "out of memory");
	return json_pack("{s:b, s:I, s:b, s:I, s:i, s:o}", "ok", 1, "client",
			 (json_int_t)q->client, "connected", connected,
			 "offset", (json_int_t)q->offset, "total",
			 (int)(rc.comm_ids + rc.sidr_ids), "connections", list);
}

static json_t *status_answer_query(struct mux *mux, const char *line,
				   size_t len)
{
	struct proto_status_query q;
	char err[160];
	int rc;

	rc = proto_status_query_parse(line, len, &q, err, sizeof(err));
	if (rc < 0)
		return proto_reply_error(-rc, "%s", err);
	if (q.op == PROTO_STATUS_CONNECTIONS)
		return status_connections(mux, &q);
	return status_snapshot(mux);
}

/* af_unix tells a peer whose bytes were left unread by the closer
 * ECONNRESET, not the end of the answer (unix_release_sock()), so what
 * it sent beyond its query, or past the query's limit, is read off
 * first: a reader of the answer then sees a clean end of file. */
static void status_drain(int fd)
{
	char sink[4096];
	size_t drained = 0;
	ssize_t n;

	while (drained < STATUS_DRAIN_MAX &&
	       (n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0)
		drained += (size_t)n;
}

static void status_conn_free(struct status_conn *sc)
{
	TAILQ_REMOVE(&sc->srv->conns, sc, link);
	sc->srv->nconns--;
	if (sc->query_timer)
		event_free(sc->query_timer);
	if (sc->watch)
		event_free(sc->watch);
	status_drain(bufferevent_getfd(sc->bev));
	bufferevent_free(sc->bev);
	free(sc);
}

static void status_free_text(const void *data, size_t len, void *arg)
{
	(void)arg;
	free((void *)data);
	/* A snapshot of many clients' connections is tens of megabytes of
	 * JSON for a moment, in this thread's malloc arena, which glibc
	 * keeps once freed: each status query would leave the daemon that
	 * much larger, for good.  Rare (an admin's), so the trim's walk of
	 * the arenas costs nothing that matters. */
	if (len >= STATUS_TRIM_BYTES)
		malloc_trim(0);
}

/*
 * The timeout measures the reader, not this thread: building other
 * answers may keep it from writing for a while.  A reader keeps up while
 * it takes something within each timeout: this thread wrote more of its
 * answer (there was room), or its socket holds less than at the last
 * look, or nothing.  SIOCOUTQ on a unix socket counts the buffers of
 * what is unread, not bytes, and a buffer is freed only once read
 * whole, so answers go out in STATUS_WRITE_CHUNK pieces: a reader's
 * progress shows at that grain.  A look every quarter of the timeout
 * sees it between two writes, and one after a busy spell of this thread
 * sees what the reader did meanwhile.
 */
static void status_watch(evutil_socket_t fd, short what, void *arg)
{
	struct status_conn *sc = arg;
	size_t left = evbuffer_get_length(bufferevent_get_output(sc->bev));
	uint64_t now = mux_now_ms();
	int outq = 0;

	(void)fd;
	(void)what;
	if (ioctl(bufferevent_getfd(sc->bev), SIOCOUTQ, &outq) < 0)
		outq = 0;
	if (left < sc->left_seen || outq < sc->outq_seen || outq == 0)
		sc->progress_ms = now;
	sc->left_seen = left;
	sc->outq_seen = outq;
	if (now - sc->progress_ms >= sc->srv->mux->cfg.status_timeout_ms) {
		atomic_fetch_add(&sc->srv->mux->stats.status_dropped_slow, 1);
		status_conn_free(sc);
	}
}

static void status_send(struct status_conn *sc, json_t *answer)
{
	unsigned ms = sc->srv->mux->cfg.status_timeout_ms / 4 + 1;
	struct timeval look = { ms / 1000, (ms % 1000) * 1000 };
	struct evbuffer *out = bufferevent_get_output(sc->bev);
	char *text = answer ? json_dumps(answer, JSON_COMPACT) : NULL;

	json_decref(answer);
	sc->answered = 1;
	if (sc->query_timer) {
		event_free(sc->query_timer);
		sc->query_timer = NULL;
	}
	bufferevent_disable(sc->bev, EV_READ);
	if (text == NULL) {
		status_conn_free(sc);
		return;
	}
	atomic_fetch_add(&sc->srv->mux->stats.status_queries, 1);
	evbuffer_add_reference(out, text, strlen(text), status_free_text, NULL);
	evbuffer_add(out, "\n", 1);
	sc->watch = event_new(sc->srv->base, -1, EV_PERSIST, status_watch, sc);
	if (sc->watch == NULL) {
		status_conn_free(sc);
		return;
	}
	sc->progress_ms = mux_now_ms();
	sc->left_seen = SIZE_MAX;
	sc->outq_seen = INT_MAX;
	event_add(sc->watch, &look);
	bufferevent_set_max_single_write(sc->bev, STATUS_WRITE_CHUNK);
	bufferevent_enable(sc->bev, EV_WRITE);
}

static void status_query_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct status_conn *sc = arg;

	(void)fd;
	(void)what;
	status_send(sc, status_snapshot(sc->srv->mux));
}

static void status_read(struct bufferevent *bev, void *arg)
{
	struct status_conn *sc = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len;
	char *line;

	if (sc->answered)
		return;
	line = evbuffer_readln(in, &len, EVBUFFER_EOL_LF);
	if (line == NULL) {
		if (evbuffer_get_length(in) > STATUS_QUERY_MAX)
			status_send(
				sc,
				proto_reply_error(
					EMSGSIZE,
					"a status query is at most %d bytes",
					STATUS_QUERY_MAX));
		return;
	}
	/* The parser refuses an oversize line as it does a missing end. */
	status_send(sc, status_answer_query(sc->srv->mux, line, len));
	free(line);
}

static void status_written(struct bufferevent *bev, void *arg)
{
	struct status_conn *sc = arg;

	if (sc->answered &&
	    evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		status_conn_free(sc);
}

static void status_event(struct bufferevent *bev, short what, void *arg)
{
	struct status_conn *sc = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in);
	char *text;

	if ((what & BEV_EVENT_EOF) && (what & BEV_EVENT_READING) &&
	    !sc->answered) {
		/* A query ended by the sending side's shutdown instead of a
		 * newline is still the query; nothing asked: the default. */
		text = len ? (char *)evbuffer_pullup(in, -1) : NULL;
		status_send(sc,
			    text ? status_answer_query(sc->srv->mux, text, len)
				 : status_snapshot(sc->srv->mux));
		return;
	}
	status_conn_free(sc);
}

static void status_accept(struct evconnlistener *l, evutil_socket_t fd,
			  struct sockaddr *sa, int salen, void *arg)
{
	struct status_server *srv = arg;
	struct timeval qt = { 0, STATUS_QUERY_WAIT_MS * 1000 };
	struct ucred cred = { .uid = (uid_t)-1 };
	socklen_t clen = sizeof(cred);
	struct status_conn *sc, *o;
	unsigned same_uid = 0;

	(void)sa;
	(void)salen;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		close(fd);
		return;
	}
	TAILQ_FOREACH(o, &srv->conns, link)
		same_uid += o->uid == cred.uid;
	if (srv->nconns >= STATUS_MAX_CONNS ||
	    same_uid >= STATUS_MAX_CONNS_PER_UID ||
	    (sc = calloc(1, sizeof(*sc))) == NULL) {
		atomic_fetch_add(&srv->mux->stats.status_refused, 1);
		close(fd);
		return;
	}
	sc->srv = srv;
	sc->uid = cred.uid;
	sc->bev = bufferevent_socket_new(evconnlistener_get_base(l), fd,
					 BEV_OPT_CLOSE_ON_FREE);
	sc->query_timer = evtimer_new(srv->base, status_query_timeout, sc);
	if (sc->bev == NULL || sc->query_timer == NULL) {
		if (sc->bev)
			bufferevent_free(sc->bev);
		else
			close(fd);
		if (sc->query_timer)
			event_free(sc->query_timer);
		free(sc);
		return;
	}
	TAILQ_INSERT_TAIL(&srv->conns, sc, link);
	srv->nconns++;
	bufferevent_setcb(sc->bev, status_read, status_written, status_event,
			  sc);
	bufferevent_setwatermark(sc->bev, EV_READ, 0, STATUS_QUERY_MAX + 2);
	bufferevent_enable(sc->bev, EV_READ);
	evtimer_add(sc->query_timer, &qt);
}

static void status_stop_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	event_base_loopbreak(arg);
}

static void *status_thread(void *arg)
{
	struct status_server *srv = arg;

	pthread_setname_np(pthread_self(), "muxd-status");
	event_base_loop(srv->base, EVLOOP_NO_EXIT_ON_EMPTY);
	return NULL;
}

int status_listen(struct mux *mux)
{
	struct status_server *srv = calloc(1, sizeof(*srv));
	int rc;

	if (srv == NULL)
		return -ENOMEM;
	srv->mux = mux;
	TAILQ_INIT(&srv->conns);
	srv->base = event_base_new();
	if (srv->base == NULL) {
		free(srv);
		return -ENOMEM;
	}
	srv->stop_ev = event_new(srv->base, -1, 0, status_stop_cb, srv->base);
	rc = srv->stop_ev ? unix_listener_open(
				    &srv->ul, srv->base, mux->cfg.status_path,
				    mux->cfg.status_mode, (uid_t)-1,
				    mux->cfg.status_group,
				    listen_fds_claim(mux->listen_fds, "status",
						     mux->cfg.status_path),
				    0, status_accept, srv)
			  : -ENOMEM;
	if (rc < 0) {
		if (srv->stop_ev)
			event_free(srv->stop_ev);
		event_base_free(srv->base);
		free(srv);
		return rc;
	}
	mux->status = srv;
	return 0;
}

int status_start(struct mux *mux)
{
	struct status_server *srv = mux->status;
	int rc;

	rc = pthread_create(&srv->thread, NULL, status_thread, srv);
	if (rc)
		return -rc;
	srv->running = 1;
	return 0;
}

void status_close(struct mux *mux)
{
	struct status_server *srv = mux->status;

	if (srv == NULL)
		return;
	if (srv->running) {
		/* An active event, not a loopbreak from here: it cannot be
		 * lost if the thread has not entered its loop yet. */
		event_active(srv->stop_ev, EV_TIMEOUT, 0);
		pthread_join(srv->thread, NULL);
	}
	while (!TAILQ_EMPTY(&srv->conns))
		status_conn_free(TAILQ_FIRST(&srv->conns));
	unix_listener_close(&srv->ul);
	event_free(srv->stop_ev);
	event_base_free(srv->base);
	free(srv);
	mux->status = NULL;
}
