// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * What every port shares: the inbound path from a port to the router and
 * on to the owning client's worker, port state events, and the port I/O
 * thread that runs all ports' receive events and the router's timers.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mux/mux.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/wire.h"

/* How often the port thread expires drained routes and polls port state. */
#define PORTIO_TICK_MS 250
/* Each sender thread's queue (PORT_SENDERS: mux.h). */
#define PORT_SENDER_QUEUE 1024

const char *port_state_name(int st)
{
	return st == PORT_STATE_ACTIVE ? "active" : "down";
}

json_t *port_json(struct port *p, int with_gids)
{
	json_t *o = json_pack("{s:i, s:s, s:s, s:s}", "index", (int)p->index,
			      "name", p->name, "kind", p->ops->kind, "state",
			      port_state_name(atomic_load(&p->state)));
	char guid[24];

	/* The CA GUID its REQs and REPs carry, as ibstat prints a GUID. */
	snprintf(guid, sizeof(guid), "0x%016llx",
		 (unsigned long long)p->ops->node_guid(p));
	json_object_set_new(o, "node_guid", json_string(guid));
	if (with_gids)
		json_object_set_new(o, "gid_table", p->ops->gid_table(p));
	return o;
}

static struct log_ratelimit *port_drop_rl(void)
{
	/* Only the port thread logs drops, so one limiter serves all. */
	static _Thread_local struct log_ratelimit rl = LOG_RATELIMIT_INIT(10,
									  1);

	return &rl;
}

/* Gets and Sets to the CM class are answered here (on a umad port the
 * kernel's MAD layer answers them before they reach us). */
static int port_answer_class_request(struct port *p, const struct proto_mad *m,
				     int gid_type)
{
	struct proto_mad resp;
	struct gid local;
	int idx;

	if (!cm_mad_class_response(m->mad, m->mad_len, resp.mad))
		return 0;
	resp.addr = m->addr;
	resp.mad_len = MAD_SIZE;
	memcpy(local.raw, m->addr.local_gid, 16);
	idx = p->ops->gid_index(p, &local, gid_type);
	/* Counted before it leaves, so the count is never behind the wire. */
	atomic_fetch_add(&p->mux->stats.class_requests_answered, 1);
	if (idx < 0 || p->ops->send(p, &resp, idx, 0) != 0)
		atomic_fetch_add(&p->tx_errors, 1);
	return 1;
}

/* What became of an inbound MAD, for a capture: wire is it as it came;
 * a MAD for a client is said before it is handed over (what the client
 * sends in answer must not come first), its loss after. */
static void port_capture_in(struct port *p, const struct proto_mad *wire,
			    enum router_verdict v, struct client_info *ci,
			    int rc)
{
	if (v != ROUTER_DELIVER)
		capture_mad(p->mux, 0, p, wire, NULL, "dropped: %s",
			    stats_drop_reason_name(stats_drop_for_verdict(v)));
	else if (ci == NULL)
		capture_mad(p->mux, 0, p, wire, NULL, "dropped: client_gone");
	else if (rc < 0)
		capture_mad(p->mux, 0, p, wire, ci, "lost at client %llu: %s",
			    (unsigned long long)ci->id, proto_errno_name(rc));
	else
		capture_mad(p->mux, 0, p, wire, ci, "delivered to client %llu",
			    (unsigned long long)ci->id);
}

void port_input(struct port *p, struct proto_mad *m, int gid_type)
{
	struct mux *mux = p->mux;
	struct proto_mad *wire = NULL, copy;
	struct client_info *ci;
	uint64_t client = 0, suppressed;
	uint32_t noted = 0;
	enum router_verdict v;
	struct conn_path path;
	int rc;

	atomic_fetch_add(&p->rx, 1);
	m->addr.port = (uint16_t)p->index;
	if (m->mad_len >= MAD_HDR_SIZE)
		atomic_fetch_add(&mux->stats.mads_in[cm_attr_index(
					 cm_mad_attr_id(m->mad))],
				 1);
	if (port_answer_class_request(p, m, gid_type))
		return;
	if (capture_on(mux)) { /* before routing translates it */
		copy = *m;
		wire = &copy;
	}
	router_path_from_addr(&m->addr, 1, &path);
	/* What answers it leaves as it came (cm_init_av_for_response()). */
	path.gid_type = (uint8_t)gid_type;
	v = router_inbound(mux->router, p->index, m->mad, m->mad_len, &path,
			   mux_now_ms(), &client, &noted);
	if (v != ROUTER_DELIVER) {
		enum drop_reason why = stats_drop_for_verdict(v);

		if (wire)
			port_capture_in(p, wire, v, NULL, 0);
		atomic_fetch_add(&mux->stats.drops[why], 1);
		if (log_get_level() >= LOG_LVL_DEBUG &&
		    log_ratelimit_allow(port_drop_rl(), &suppressed))
			log_debug("%s: dropped inbound %s: %s", p->name,
				  m->mad_len >= MAD_HDR_SIZE
					  ? cm_attr_name(cm_mad_attr_id(m->mad))
					  : "runt",
				  stats_drop_reason_name(why));
		return;
	}
	ci = clients_get(mux->clients, client);
	if (ci == NULL) {
		atomic_fetch_add(&mux->stats.drops[DROP_CLIENT_GONE], 1);
		router_forget_noted(mux->router, noted, client);
		if (wire)
			port_capture_in(p, wire, v, NULL, 0);
		return;
	}
	if (wire)
		port_capture_in(p, wire, v, ci, 0);
	rc = mux->deliver->mad(mux, ci, m);
	if (wire && rc < 0)
		port_capture_in(p, wire, v, ci, rc);
	clients_put(ci);
	/* A REQ its client never got holds no record of the port's. */
	if (rc < 0)
		router_forget_noted(mux->router, noted, client);
	if (rc == -ENOBUFS)
		mux->deliver->lost(mux, m);
}

static void port_count_client_send(struct port *p, struct client_info *ci,
				   const struct proto_mad *m, int rc)
{
	struct mux *mux = p->mux;

	if (rc) {
		atomic_fetch_add(&mux->stats.tx_errors, 1);
		atomic_fetch_add(&p->tx_errors, 1);
		return;
	}
	atomic_fetch_add(&p->tx, 1);
	atomic_fetch_add(&mux->stats.mads_out[cm_attr_index(
				 cm_mad_attr_id(m->mad))],
			 1);
	atomic_fetch_add(&ci->ctr.mads_sent, 1);
}

static void port_send_drop(struct port_send *ps)
{
	if (ps->ci)
		clients_put(ps->ci);
	free(ps);
}

/* A sender thread sent ps (rc 0) or could not, or it never will
 * (-ECANCELED): count it, and hand the verdict to the client. */
static void port_send_done(struct port *p, struct port_send *ps, int rc)
{
	if (ps->ci)
		atomic_fetch_sub(&ps->ci->sends_in_flight, 1);
	if (rc && rc != -ECANCELED && capture_on(p->mux))
		capture_mad(p->mux, 1, p, &ps->m, ps->ci, "send failed: %s",
			    proto_errno_name(rc));
	if (ps->ci == NULL)
		port_answers_count(p, rc);
	else if (rc != -ECANCELED) {
		port_count_client_send(p, ps->ci, &ps->m, rc);
		p->mux->deliver->send_done(p->mux, ps->ci, ps->rid, rc);
	}
	port_send_drop(ps);
}

/* A client's MAD the sender threads cannot take now (its share on its
 * way, or a full queue): -EAGAIN, counted for it and for the daemon. */
static int port_send_busy(struct port *p, struct client_info *ci)
{
	atomic_fetch_sub(&ci->sends_in_flight, 1);
	atomic_fetch_add(&ci->ctr.sends_busy, 1);
	atomic_fetch_add(&p->mux->stats.sends_busy, 1);
	return -EAGAIN;
}

/* A port whose send blocks sends from its sender threads only: a worker
 * that wrote itself would hold its other clients behind the write, and on
 * lane 0 the port's receive path too.  What one client may have on its
 * way there (queued, or waiting for its destination) is bounded, so that
 * no client fills the threads' queues for the others. */
static int port_send_deferred(struct port *p, struct client_info *ci,
			      const struct proto_mad *m, int gid_index,
			      uint32_t rid)
{
	struct port_send *ps;
	int rc;

	if (atomic_fetch_add(&ci->sends_in_flight, 1) >= PORT_CLIENT_SENDS_MAX)
		return port_send_busy(p, ci);
	ps = malloc(sizeof(*ps));
	if (ps == NULL) {
		atomic_fetch_sub(&ci->sends_in_flight, 1);
		return -ENOMEM;
	}
	ps->m = *m;
	ps->gid_index = gid_index;
	ps->ci = clients_hold(ci);
	ps->rid = rid;
	/* By the comm ID it carries: a connection's MADs keep their
	 * order. */
	rc = port_parked_queue(p, ps, cm_mad_sender_id(m->mad), 0);
	if (rc == 0)
		return -EINPROGRESS;
	if (rc == -ESHUTDOWN) /* the daemon is stopping: not busy */
		atomic_fetch_sub(&ci->sends_in_flight, 1);
	else
		rc = port_send_busy(p, ci);
	port_send_drop(ps);
	return rc;
}

int port_send_client_mad(struct port *p, struct client_info *ci,
			 const struct proto_mad *m, int gid_index, uint32_t rid)
{
	int rc;

	if (p->senders)
		return port_send_deferred(p, ci, m, gid_index, rid);
	rc = p->ops->send(p, m, gid_index, 0);
	port_count_client_send(p, ci, m, rc);
	return rc;
}

static int port_gid_in_table(void *arg, unsigned port, const struct gid *gid)
{
	struct mux *mux = arg;
	struct port *p;

	if (port >= (unsigned)mux->nports)
		return 0;
	p = &mux->ports[port];
	return p->ops->gid_index(p, gid, 0) >= 0;
}

const struct router_ops port_router_ops = {
	.send = port_answers_send,
	.gid_in_table = port_gid_in_table,
};

/* An event to every client (workers hand it to their ready sessions). */
static void port_broadcast(struct port *p, json_t *ev)
{
	char *text = json_dumps(ev, JSON_COMPACT);

	json_decref(ev);
	if (text)
		p->mux->deliver->broadcast(p->mux, text);
	free(text);
}

void port_set_state(struct port *p, enum port_state st)
{
	if (atomic_exchange(&p->state, st) == (int)st)
		return;
	log_finfo(&(struct log_fields){ .port = p->name }, "port %s: %s",
		  p->name, port_state_name(st));
	port_broadcast(p,
		       json_pack("{s:s, s:i, s:s, s:s}", "event", "port_state",
				 "port", (int)p->index, "port_name", p->name,
				 "state", port_state_name(st)));
}

struct missing_gids {
	struct port *port;
	unsigned n;
};

static void port_count_missing(void *arg, unsigned port, const struct gid *gid,
			       uint64_t owner)
{
	struct missing_gids *m = arg;

	(void)owner;
	if (port == m->port->index &&
	    m->port->ops->gid_index(m->port, gid, 0) < 0)
		m->n++;
}

void port_gids_changed(struct port *p)
{
	struct missing_gids m = { p, 0 };

	atomic_fetch_add(&p->gid_table_changes, 1);
	/* Registrations stay (the address may come back); sends from a GID
	 * that left the table are refused until it does, since every send
	 * looks its index up in the table as it is now. */
	router_gids_foreach(p->mux->router, 0, port_count_missing, &m);
	log_finfo(&(struct log_fields){ .port = p->name },
		  "port %s: GID table changed; %u registered GID(s) not in it",
		  p->name, m.n);
	/* Every client hears of it; which of its GIDs are in the table it
	 * asks with list_gids (nobody learns another tenant's GIDs). */
	port_broadcast(p, json_pack("{s:s, s:i, s:s}", "event",
				    "gid_table_changed", "port", (int)p->index,
				    "port_name", p->name));
}

struct portio {
	struct mux *mux;
	pthread_t thread;
	struct event_base *base;
	struct event *tick;
	_Atomic int stop;
};

static void port_io_tick(evutil_socket_t fd, short what, void *arg)
{
	struct portio *pio = arg;
	struct mux *mux = pio->mux;
	int i;

	(void)fd;
	(void)what;
	/* A loopbreak from another thread before this loop started is
	 * lost (event_base_loop clears it): the tick makes sure. */
	if (atomic_load(&pio->stop)) {
		event_base_loopbreak(pio->base);
		return;
	}
	router_expire(mux->router, mux_now_ms());
	for (i = 0; i < mux->nports; i++) {
		if (mux->ports[i].ops->poll_state)
			mux->ports[i].ops->poll_state(&mux->ports[i]);
		port_answers_drain(&mux->ports[i], mux_now_ms());
		port_parked_tick(&mux->ports[i], mux_now_ms());
	}
}

static void *port_io_main(void *arg)
{
	struct portio *pio = arg;

	pthread_setname_np(pthread_self(), "muxd-ports");
	event_base_dispatch(pio->base);
	return NULL;
}

struct portio *port_io_start(struct mux *mux)
{
	struct timeval tv = { 0, PORTIO_TICK_MS * 1000 };
	struct portio *pio = calloc(1, sizeof(*pio));
	int i, rc;

	if (pio == NULL)
		fatal("portio");
	pio->mux = mux;
	pio->base = event_base_new();
	if (pio->base == NULL)
		fatalx("portio: event_base_new failed");
	for (i = 0; i < mux->nports; i++) {
		if (mux->ports[i].ops->start(&mux->ports[i], pio->base) < 0 ||
		    port_answers_start(&mux->ports[i], pio->base) < 0)
			fatalx("port %s: cannot start", mux->ports[i].name);
		if (mux->ports[i].ops->dest_wait &&
		    port_parked_init(&mux->ports[i],
				     hash_mix64(mux->ports[i].answer_key)) < 0)
			fatalx("port %s: cannot start", mux->ports[i].name);
		if (mux->ports[i].ops->send_blocks &&
		    port_senders_start(&mux->ports[i], PORT_SENDERS,
				       PORT_SENDER_QUEUE, port_send_done) < 0)
			fatalx("port %s: cannot start its senders",
			       mux->ports[i].name);
	}
	pio->tick = event_new(pio->base, -1, EV_PERSIST, port_io_tick, pio);
	event_add(pio->tick, &tv);
	rc = pthread_create(&pio->thread, NULL, port_io_main, pio);
	if (rc) {
		errno = rc;
		fatal("portio: pthread_create");
	}
	return pio;
}

void port_io_stop(struct portio *pio)
{
	int i;

	atomic_store(&pio->stop, 1);
	event_base_loopbreak(pio->base);
	pthread_join(pio->thread, NULL);
	/* While the workers they report to are still there. */
	for (i = 0; i < pio->mux->nports; i++)
		port_senders_stop(&pio->mux->ports[i]);
}

/* The ports themselves are the daemon's to close (they outlive it).
 * After the workers stopped: they queue sends until then. */
void port_io_free(struct portio *pio)
{
	int i;

	for (i = 0; i < pio->mux->nports; i++) {
		port_parked_free(&pio->mux->ports[i]);
		port_senders_free(&pio->mux->ports[i]);
		port_answers_free(&pio->mux->ports[i]);
	}
	event_free(pio->tick);
	event_base_free(pio->base);
	free(pio);
}
