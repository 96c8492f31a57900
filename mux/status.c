// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The status socket: read-only by construction.  A connection gets one
 * JSON snapshot of the daemon and is closed; nothing it sends is read.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>

#include "mux.h"
#include "../common/log.h"

/* Concurrent status connections; more are closed at once. */
#define STATUS_MAX_CONNS 32

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
			gid_parse(json_string_value(json_object_get(g, "gid")), &gid);
			owner = router_gid_owner(mux->router, p->index, &gid);
			json_object_set_new(g, "owner", owner ?
					    json_integer((json_int_t)owner) : json_null());
		}
		json_object_set_new(pj, "counters", json_pack(
			"{s:I, s:I, s:I, s:I, s:I, s:I}",
			"rx", (json_int_t)atomic_load(&p->rx),
			"tx", (json_int_t)atomic_load(&p->tx),
			"rx_errors", (json_int_t)atomic_load(&p->rx_errors),
			"tx_errors", (json_int_t)atomic_load(&p->tx_errors),
			"wire_dropped", (json_int_t)atomic_load(&p->wire_dropped),
			"gid_table_changes",
			(json_int_t)atomic_load(&p->gid_table_changes)));
		json_array_append_new(arr, pj);
	}
	return arr;
}

json_t *status_snapshot(struct mux *mux)
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
		json_array_append_new(workers, json_pack("{s:i, s:I}", "index", i,
			"inbox_dropped",
			(json_int_t)worker_inbox_dropped(mux->workers[i])));
	snap = json_pack(
		"{s:{s:s, s:i, s:I, s:s, s:s, s:i, s:{s:i, s:i, s:i, s:I, s:i, s:i,"
		" s:i, s:i, s:i}},"
		" s:o, s:o, s:{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:I}, s:o, s:o}",
		"daemon", "version", MUX_VERSION, "pid", (int)getpid(),
		"uptime_s", (json_int_t)(now.tv_sec - mux->started.tv_sec),
		"socket", mux->cfg.socket_path,
		"status_socket", mux->cfg.status_path,
		"protocol_major", PROTO_VERSION_MAJOR,
		"limits", "max_clients", (int)mux->cfg.max_clients,
		"max_gids_per_client", (int)mux->cfg.max_gids_per_client,
		"max_comm_ids_per_client", (int)mux->cfg.max_comm_ids_per_client,
		"client_queue_bytes", (json_int_t)mux->cfg.client_outq_max,
		"timewait_ms", (int)mux->cfg.timewait_ms,
		"handshake_timeout_ms", (int)mux->cfg.handshake_ms,
		"max_peer_records", (int)mux->cfg.max_peer_records,
		"max_peer_records_per_source", (int)mux->cfg.max_peer_records_per_source,
		"max_timewait", (int)mux->cfg.max_timewait,
		"ports", status_ports(mux),
		"clients", clients_json(&mux->clients, mux->router),
		"routing", "gids", (int)rc.gids, "comm_ids", (int)rc.comm_ids,
		"sidr_ids", (int)rc.sidr_ids, "handshake", (int)rc.handshake,
		"established", (int)rc.established,
		"disconnecting", (int)rc.disconnecting, "draining", (int)rc.draining,
		"peer_records", (int)rc.peer_records,
		"peer_records_refused", (json_int_t)rc.peer_records_refused,
		"timewait_evicted", (json_int_t)rc.timewait_evicted,
		"counters", stats_to_json(&mux->stats),
		"workers", workers);
	json_object_set_new(snap, "policy", json_pack("{s:s, s:i}", "source",
			    pol->source, "rules", pol->nrules));
	policy_unref(pol);
	return snap;
}

/* An open status connection; all are freed at shutdown too. */
struct status_conn {
	TAILQ_ENTRY(status_conn) link;
	struct mux *mux;
	struct bufferevent *bev;
};

static void status_conn_free(struct status_conn *sc)
{
	TAILQ_REMOVE(&sc->mux->status_conns_list, sc, link);
	sc->mux->status_conns--;
	bufferevent_free(sc->bev);
	free(sc);
}

static void status_done(struct bufferevent *bev, void *arg)
{
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		status_conn_free(arg);
}

static void status_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	status_conn_free(arg);
}

static void status_accept(struct evconnlistener *l, evutil_socket_t fd,
			  struct sockaddr *sa, int salen, void *arg)
{
	struct mux *mux = arg;
	struct status_conn *sc;
	json_t *snap;
	char *text;

	(void)sa;
	(void)salen;
	if (mux->status_conns >= STATUS_MAX_CONNS ||
	    (sc = calloc(1, sizeof(*sc))) == NULL) {
		close(fd);
		return;
	}
	sc->mux = mux;
	sc->bev = bufferevent_socket_new(evconnlistener_get_base(l), fd,
					 BEV_OPT_CLOSE_ON_FREE);
	if (sc->bev == NULL) {
		free(sc);
		close(fd);
		return;
	}
	TAILQ_INSERT_TAIL(&mux->status_conns_list, sc, link);
	mux->status_conns++;
	snap = status_snapshot(mux);
	text = json_dumps(snap, JSON_COMPACT);
	json_decref(snap);
	if (text) {
		evbuffer_add(bufferevent_get_output(sc->bev), text, strlen(text));
		evbuffer_add(bufferevent_get_output(sc->bev), "\n", 1);
	}
	free(text);
	bufferevent_setcb(sc->bev, NULL, status_done, status_event, sc);
	bufferevent_disable(sc->bev, EV_READ);
	bufferevent_enable(sc->bev, EV_WRITE);
}

int status_listen(struct mux *mux, struct event_base *base)
{
	TAILQ_INIT(&mux->status_conns_list);
	return unix_listener_open(&mux->status_listener, base, mux->cfg.status_path,
				  mux->cfg.status_mode, (uid_t)-1,
				  mux->cfg.status_group, status_accept, mux);
}

void status_close(struct mux *mux)
{
	while (!TAILQ_EMPTY(&mux->status_conns_list))
		status_conn_free(TAILQ_FIRST(&mux->status_conns_list));
	unix_listener_close(&mux->status_listener);
}
