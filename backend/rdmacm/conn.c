// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Connections: rdma_listen, rdma_connect, rdma_accept, rdma_reject,
 * rdma_disconnect and rdma_establish, what each puts in its MAD (as the
 * kernel's cma.c and cm.c fill them), inbound MADs to their id, and the
 * CM endpoint's events to librdmacm's (cma_ib_handler()'s mapping).
 */
#include "backend/rdmacm/rcm.h"

#include <errno.h>
#include <ifaddrs.h>
#include <stdlib.h>
#include <string.h>

/* ucma's default and most a listener queues (net.rdma_ucm.max_backlog). */
#define CONN_MAX_BACKLOG 1024
/* The private data an application may put in each message: a REQ's
 * after rdma_cm's 36-byte header (IB_CM_REQ_PRIVATE_DATA_SIZE - 36). */
#define CONN_REQ_USER_PD (CM_REQ_PRIVATE_DATA_SIZE - CMA_HDR_SIZE)

uint16_t conn_ps_of(enum rdma_port_space ps)
{
	return (uint16_t)ps;
}

/* ---- the CM endpoint's side ------------------------------------------ */

static void conn_cep_send(void *ctx, const uint8_t *mad)
{
	struct rcm_id *id = ctx;

	if (id->port)
		lib_send_mad(id->lib, id->port, &id->sgid, &id->cep.remote_gid,
			     mad, id->tos);
}

static struct rcm_event *conn_event(struct rcm_id *id,
				    enum rdma_cm_event_type type, int status,
				    const uint8_t *pd, size_t pd_len)
{
	struct rcm_event *ev = channel_new_event(id, type, status);

	if (ev == NULL)
		return NULL;
	if (pd && pd_len) {
		memcpy(ev->pd, pd, pd_len);
		ev->pub.param.conn.private_data = ev->pd;
		ev->pub.param.conn.private_data_len = (uint8_t)pd_len;
	}
	return ev;
}

void conn_post(struct rcm_id *id, enum rdma_cm_event_type type, int status,
	       const uint8_t *pd, size_t pd_len)
{
	struct rcm_event *ev = conn_event(id, type, status, pd, pd_len);

	if (ev)
		channel_post(id, ev);
}

/* The active side's REP: RTR and RTS on its QP, then the RTU, as
 * librdmacm's ucma_process_conn_resp() does; with no QP the application
 * is told and answers with rdma_establish() or rdma_reject(). */
static void conn_on_rep(struct rcm_id *id, const uint8_t *mad)
{
	const uint8_t *pd = mad + CM_REP_OFF_PRIVATE_DATA;
	struct rcm_event *ev;
	uint64_t now = lib_now_ms();

	id->remote_psn = (uint32_t)cm_field_get(mad, CM_REP_STARTING_PSN);
	/* What the peer will serve bounds what we may ask of it. */
	if (id->initiator_depth > cm_field_get(mad, CM_REP_RESPONDER_RESOURCES))
		id->initiator_depth = (uint8_t)
			cm_field_get(mad, CM_REP_RESPONDER_RESOURCES);
	if (id->pub.qp == NULL) {
		ev = conn_event(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, pd,
				CM_REP_PRIVATE_DATA_SIZE);
	} else if (qp_to_rtr(id) < 0 || qp_to_rts(id) < 0) {
		qp_to_err(id);
		cep_send_rej(&id->cep, CM_REJ_REASON_CONSUMER_DEFINED, NULL, 0,
			     NULL, 0, now);
		id->connect_error = 1;
		ev = conn_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -EINVAL, NULL,
				0);
	} else {
		cep_send_rtu(&id->cep);
		id->state = RCM_ID_CONNECTED;
		ev = conn_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, pd,
				CM_REP_PRIVATE_DATA_SIZE);
	}
	if (ev == NULL)
		return;
	ev->pub.param.conn.responder_resources = (uint8_t)
		cm_field_get(mad, CM_REP_INITIATOR_DEPTH);
	ev->pub.param.conn.initiator_depth = (uint8_t)
		cm_field_get(mad, CM_REP_RESPONDER_RESOURCES);
	ev->pub.param.conn.flow_control = (uint8_t)
		cm_field_get(mad, CM_REP_FLOW_CONTROL);
	ev->pub.param.conn.rnr_retry_count = (uint8_t)
		cm_field_get(mad, CM_REP_RNR_RETRY_COUNT);
	ev->pub.param.conn.srq = (uint8_t)cm_field_get(mad, CM_REP_SRQ);
	ev->pub.param.conn.qp_num = id->cep.remote_qpn;
	channel_post(id, ev);
}

static void conn_disconnected(struct rcm_id *id, int status)
{
	if (id->state != RCM_ID_CONNECTED)
		return;
	id->state = RCM_ID_DISCONNECTED;
	conn_post(id, RDMA_CM_EVENT_DISCONNECTED, status, NULL, 0);
}

static void conn_cep_event(void *ctx, enum cep_event ev, const uint8_t *mad)
{
	struct rcm_id *id = ctx;

	if (id->state == RCM_ID_DESTROYING)
		return;
	switch (ev) {
	case CEP_EV_REP: conn_on_rep(id, mad); break;
	case CEP_EV_RTU:
		id->state = RCM_ID_CONNECTED;
		conn_post(id, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0);
		break;
	case CEP_EV_REJ:
		qp_to_err(id);
		if (id->connect_error || (id->state != RCM_ID_CONNECT &&
					  id->state != RCM_ID_CONNECTED))
			break;
		/* cma.c reports a REJ in its CONNECT state, which lasts
		 * while the connection is up: one on an established
		 * connection (a peer gone before our RTU reached it, as
		 * cm_destroy_id() answers in REP_SENT) is REJECTED too. */
		id->state = id->state == RCM_ID_CONNECTED
				    ? RCM_ID_DISCONNECTED
				    : RCM_ID_ROUTE_RESOLVED;
		conn_post(id, RDMA_CM_EVENT_REJECTED,
			  (int)cm_field_get(mad, CM_REJ_REASON),
			  mad + CM_REJ_OFF_PRIVATE_DATA,
			  CM_REJ_PRIVATE_DATA_SIZE);
		break;
	case CEP_EV_TIMEOUT:
		qp_to_err(id);
		if (id->state != RCM_ID_CONNECT)
			break;
		id->state = RCM_ID_ROUTE_RESOLVED;
		conn_post(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL, 0);
		break;
	case CEP_EV_DREQ:
	case CEP_EV_DREP: conn_disconnected(id, 0); break;
	case CEP_EV_DREQ_TIMEOUT: conn_disconnected(id, -ETIMEDOUT); break;
	case CEP_EV_TIMEWAIT_EXIT:
		if (id->state == RCM_ID_DISCONNECTED)
			conn_post(id, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, NULL, 0);
		break;
	case CEP_EV_SIDR_REP: sidr_on_rep(id, mad); break;
	}
}

const struct cep_ops conn_cep_ops = {
	.send = conn_cep_send,
	.event = conn_cep_event,
};

/* ---- inbound --------------------------------------------------------- */

static int conn_listens_on(const struct rcm_id *id, const struct gid *gid)
{
	int i;

	if (!id->wildcard)
		return gid_equal(&id->sgid, gid);
	for (i = 0; i < id->nat; i++)
		if (gid_equal(&id->at[i].gid, gid))
			return 1;
	return 0;
}

struct rcm_id *conn_find_listener(struct rcm_lib *lib, uint64_t sid,
				  const struct gid *dst)
{
	struct rcm_id *id;

	TAILQ_FOREACH(id, &lib->ids, link) {
		if (id->state == RCM_ID_LISTEN && id->service_id == sid &&
		    conn_listens_on(id, dst))
			return id;
	}
	return NULL;
}

static struct rcm_id *conn_find_by_remote(struct rcm_lib *lib,
					  uint32_t remote_id,
					  const struct gid *src)
{
	struct rcm_id *id;

	TAILQ_FOREACH(id, &lib->ids, link) {
		if (id->cep.state != CEP_IDLE &&
		    id->cep.remote_id == remote_id &&
		    gid_equal(&id->cep.remote_gid, src))
			return id;
	}
	return NULL;
}

static struct rcm_id *conn_find_local(struct rcm_lib *lib, uint32_t local_id)
{
	struct rcm_id *id;

	TAILQ_FOREACH(id, &lib->ids, link) {
		if (id->cep.local_id == local_id && id->cep.state != CEP_IDLE)
			return id;
	}
	return NULL;
}

void conn_answer(struct rcm_lib *lib, const struct muxbe_addr *a,
		 const uint8_t *mad)
{
	struct rcm_port *port = NULL;
	struct gid local, remote;
	int i;

	for (i = 0; i < lib->nports; i++)
		if (lib->ports[i].index == a->port)
			port = &lib->ports[i];
	if (port == NULL)
		return;
	memcpy(local.raw, a->local_gid, 16);
	memcpy(remote.raw, a->remote_gid, 16);
	lib_send_mad(lib, port, &local, &remote, mad, a->traffic_class);
}

/* A child of listener for a request from src to dst: its addresses from
 * rdma_cm's header, its port and GIDs; NULL when out of memory. */
struct rcm_id *conn_child(struct rcm_lib *lib, struct rcm_id *listener,
			  const struct gid *src, const struct gid *dst,
			  const struct gid *hdr_src, const struct gid *hdr_dst,
			  uint16_t hdr_port)
{
	struct rcm_id *child;
	int idx = 0;

	child = id_alloc(lib, (struct rcm_channel *)listener->pub.channel,
			 listener->pub.context, listener->pub.ps,
			 listener->pub.qp_type);
	if (child == NULL)
		return NULL;
	child->listener = listener;
	child->port = lib_port_of_gid(lib, dst, &idx);
	child->sgid = *dst;
	child->sgid_index = idx;
	child->dgid = *src;
	child->state = RCM_ID_CONNECT;
	child->service_id = listener->service_id;
	child->pub.verbs = child->port ? lib_port_verbs(child->port) : NULL;
	child->pub.port_num = child->port && child->port->port_num
				      ? child->port->port_num
				      : 1;
	child->pub.route.addr.addr.ibaddr.pkey = 0xffff;
	memcpy(&child->pub.route.addr.addr.ibaddr.sgid, dst->raw, 16);
	memcpy(&child->pub.route.addr.addr.ibaddr.dgid, src->raw, 16);
	addr_from_gid(hdr_dst, addr_port(&listener->pub.route.addr.src_addr),
		      &child->pub.route.addr.src_storage);
	addr_from_gid(hdr_src, hdr_port, &child->pub.route.addr.dst_storage);
	return child;
}

static void conn_on_req(struct rcm_lib *lib, const uint8_t *mad,
			const struct muxbe_addr *a)
{
	uint32_t remote_id = (uint32_t)cm_field_get(mad, CM_REQ_LOCAL_COMM_ID);
	uint64_t sid = cm_field_get(mad, CM_REQ_SERVICE_ID);
	struct rcm_id *listener, *child;
	struct rcm_event *ev;
	struct gid src, dst, hdr_src, hdr_dst;
	uint16_t hdr_port = 0;
	uint8_t rej[MAD_SIZE];

	memcpy(src.raw, a->remote_gid, 16);
	memcpy(dst.raw, a->local_gid, 16);
	if (conn_find_by_remote(lib, remote_id, &src))
		return; /* a duplicate: our REP, if any, has its own timer */
	listener = conn_find_listener(lib, sid, &dst);
	if (listener == NULL ||
	    cm_req_cma_addrs(mad, &hdr_src, &hdr_dst, &hdr_port) < 0) {
		/* cm_req_handler() with no listener; rdma_cm's own check
		 * of its header (cma_check_req_qp_type and friends). */
		memset(rej, 0, sizeof(rej));
		cm_build_rej(rej, cm_mad_tid(mad), 0, remote_id,
			     CM_MSG_RESPONSE_REQ,
			     CM_REJ_REASON_INVALID_SERVICE_ID, NULL, 0);
		conn_answer(lib, a, rej);
		return;
	}
	/* A full backlog: ucma's handler fails with -ENOMEM, and cm.c
	 * drops the REQ without a REJ so that its retry may find room. */
	if (listener->backlog <= 0)
		return;
	child = conn_child(lib, listener, &src, &dst, &hdr_src, &hdr_dst,
			   hdr_port);
	if (child == NULL)
		return;
	ev = channel_new_event(listener, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (ev == NULL) {
		id_free(child);
		return;
	}
	child->remote_psn = (uint32_t)cm_field_get(mad, CM_REQ_STARTING_PSN);
	child->responder_resources = (uint8_t)
		cm_field_get(mad, CM_REQ_INITIATOR_DEPTH);
	child->initiator_depth = (uint8_t)
		cm_field_get(mad, CM_REQ_RESPONDER_RESOURCES);
	child->retry_count = (uint8_t)cm_field_get(mad, CM_REQ_RETRY_COUNT);
	child->rnr_retry_count = (uint8_t)cm_field_get(mad,
						       CM_REQ_RNR_RETRY_COUNT);
	child->path_mtu = (uint8_t)cm_field_get(mad, CM_REQ_PATH_MTU);
	child->ack_timeout = (uint8_t)
		cm_field_get(mad, CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT);
	child->tos = (uint8_t)cm_field_get(mad, CM_REQ_PRIMARY_TRAFFIC_CLASS);
	cep_req_received(&child->cep, mad, &src);
	listener->backlog--;
	ev->pub.id = &child->pub;
	ev->pub.listen_id = &listener->pub;
	memcpy(ev->pd, mad + CM_REQ_OFF_PRIVATE_DATA + CMA_HDR_SIZE,
	       CONN_REQ_USER_PD);
	ev->pub.param.conn.private_data = ev->pd;
	ev->pub.param.conn.private_data_len = CONN_REQ_USER_PD;
	ev->pub.param.conn.responder_resources = child->responder_resources;
	ev->pub.param.conn.initiator_depth = child->initiator_depth;
	ev->pub.param.conn.flow_control = (uint8_t)
		cm_field_get(mad, CM_REQ_FLOW_CONTROL);
	ev->pub.param.conn.retry_count = child->retry_count;
	ev->pub.param.conn.rnr_retry_count = child->rnr_retry_count;
	ev->pub.param.conn.srq = (uint8_t)cm_field_get(mad, CM_REQ_SRQ);
	ev->pub.param.conn.qp_num = child->cep.remote_qpn;
	channel_post(listener, ev);
}

void conn_input(struct rcm_lib *lib, const uint8_t *mad,
		const struct muxbe_addr *a)
{
	struct rcm_id *id;
	uint8_t drep[MAD_SIZE];

	if (cm_mad_validate(mad, MAD_SIZE) < 0)
		return;
	switch (cm_mad_attr_id(mad)) {
	case CM_ATTR_REQ: conn_on_req(lib, mad, a); return;
	case CM_ATTR_SIDR_REQ: sidr_on_req(lib, mad, a); return;
	default: break;
	}
	id = conn_find_local(lib, cm_mad_receiver_id(mad));
	if (id) {
		/* On the library's thread, which runs the timers next:
		 * no wake-up needed for one this armed. */
		cep_input(&id->cep, mad, lib_now_ms());
		return;
	}
	/* cm.c answers a DREQ for a connection it does not know with a
	 * DREP (cm_issue_drep()), so that the peer need not time out. */
	if (cm_mad_attr_id(mad) == CM_ATTR_DREQ) {
		memset(drep, 0, sizeof(drep));
		cm_build_drep(drep, cm_mad_tid(mad),
			      (uint32_t)cm_field_get(mad,
						     CM_DREQ_REMOTE_COMM_ID),
			      (uint32_t)cm_field_get(mad,
						     CM_DREQ_LOCAL_COMM_ID));
		conn_answer(lib, a, drep);
	}
}

void conn_teardown(struct rcm_id *id)
{
	uint64_t guid = id->port ? id->port->ca_guid : 0;

	cep_destroy(&id->cep, &guid, lib_now_ms());
}

/* ---- listen ------------------------------------------------------------ */

static int conn_listen_at(struct rcm_id *id, struct rcm_port *port,
			  const struct gid *gid)
{
	struct rcm_lib *lib = id->lib;
	int rc;

	rc = muxbe_listen(lib->mb, port->name, gid->raw, id->service_id);
	if (rc < 0)
		return rc;
	id->at[id->nat].port = port;
	id->at[id->nat].gid = *gid;
	id->nat++;
	return 0;
}

/* Every address of the host that is a GID of one of the daemon's ports:
 * a listener on in6addr_any hears on each, one on INADDR_ANY on the
 * IPv4 ones (an IPv4 listener takes no IPv6 connection in cma.c). */
static int conn_listen_wildcard(struct rcm_id *id)
{
	struct rcm_lib *lib = id->lib;
	sa_family_t family = id->pub.route.addr.src_addr.sa_family;
	struct ifaddrs *ifa, *i;
	struct rcm_port *port;
	struct gid gid;
	int rc = -EADDRNOTAVAIL, n = 0;

	if (getifaddrs(&ifa) < 0)
		return -errno;
	for (i = ifa; i; i = i->ifa_next)
		n++;
	id->at = calloc((size_t)n + 1, sizeof(*id->at));
	if (id->at == NULL) {
		freeifaddrs(ifa);
		return -ENOMEM;
	}
	for (i = ifa; i; i = i->ifa_next) {
		int err;

		if (i->ifa_addr == NULL || addr_to_gid(i->ifa_addr, &gid) < 0 ||
		    (family == AF_INET && i->ifa_addr->sa_family != AF_INET))
			continue;
		pthread_mutex_lock(&lib->lock);
		port = lib_port_of_gid(lib, &gid, NULL);
		pthread_mutex_unlock(&lib->lock);
		if (port == NULL)
			continue;
		err = lib_share(lib, port, &gid);
		if (err == 0)
			err = conn_listen_at(id, port, &gid);
		/* One address taken is a listener; another process's port
		 * on one of them is the kernel's EADDRINUSE. */
		if (err == -EADDRINUSE)
			rc = err;
		else if (rc != -EADDRINUSE && err < 0 && rc == -EADDRNOTAVAIL)
			rc = err;
		if (err == 0 && rc != -EADDRINUSE)
			rc = 0;
	}
	freeifaddrs(ifa);
	return rc;
}

/* Lock held.  Does another listener of this process hear on id's
 * service ID at one of id's addresses? */
static int conn_port_taken(const struct rcm_id *id)
{
	const struct rcm_id *o;

	TAILQ_FOREACH(o, &id->lib->ids, link) {
		if (o == id || o->state != RCM_ID_LISTEN ||
		    o->service_id != id->service_id)
			continue;
		if (o->wildcard || id->wildcard ||
		    gid_equal(&o->sgid, &id->sgid))
			return 1;
	}
	return 0;
}

void conn_unlisten(struct rcm_id *id)
{
	struct rcm_lib *lib = id->lib;
	int i;

	if (!id->listening)
		return;
	pthread_mutex_lock(&lib->lock);
	id->state = RCM_ID_BOUND;
	id->listening = 0;
	pthread_mutex_unlock(&lib->lock);
	for (i = 0; i < id->nat; i++)
		muxbe_unlisten(lib->mb, id->at[i].port->name, id->at[i].gid.raw,
			       id->service_id);
	free(id->at);
	id->at = NULL;
	id->nat = 0;
}

int rdma_listen(struct rdma_cm_id *pub, int backlog)
{
	struct rcm_lib *lib = lib_for(pub);
	struct rcm_id *id = id_of(pub);
	int rc;

	if (lib == NULL)
		return -1;
	if (id->state == RCM_ID_IDLE) {
		struct sockaddr_in any = { .sin_family = AF_INET };

		if (rdma_bind_addr(pub, (struct sockaddr *)&any) < 0)
			return -1;
	}
	if (id->state == RCM_ID_LISTEN) {
		/* A new backlog for a listener, as ucma allows. */
		id->backlog = backlog > 0 && backlog < CONN_MAX_BACKLOG
				      ? backlog
				      : CONN_MAX_BACKLOG;
		return 0;
	}
	if (id->state != RCM_ID_BOUND)
		return lib_err(-EINVAL);
	id->service_id = rdma_service_id(conn_ps_of(pub->ps),
					 addr_port(&pub->route.addr.src_addr));
	/* The daemon knows listens per process; within one, a second
	 * listener on a port is the kernel bind's EADDRINUSE. */
	pthread_mutex_lock(&lib->lock);
	rc = conn_port_taken(id);
	pthread_mutex_unlock(&lib->lock);
	if (rc)
		return lib_err(-EADDRINUSE);
	if (id->wildcard) {
		rc = conn_listen_wildcard(id);
	} else {
		id->at = calloc(1, sizeof(*id->at));
		rc = id->at ? conn_listen_at(id, id->port, &id->sgid) : -ENOMEM;
	}
	if (rc < 0) {
		id->listening = 1;
		conn_unlisten(id);
		return lib_err(rc);
	}
	pthread_mutex_lock(&lib->lock);
	id->listening = 1;
	id->backlog = backlog > 0 && backlog < CONN_MAX_BACKLOG
			      ? backlog
			      : CONN_MAX_BACKLOG;
	id->state = RCM_ID_LISTEN;
	pthread_mutex_unlock(&lib->lock);
	return 0;
}

/* ---- connect, accept, reject, disconnect ---------------------------- */

static uint8_t conn_device_max_rd(struct rcm_id *id, int initiator)
{
	struct ibv_device_attr da;

	if (id->pub.verbs == NULL || ibv_query_device(id->pub.verbs, &da))
		return 16; /* a simulated port: what rxe offers */
	return (uint8_t)(initiator ? da.max_qp_init_rd_atom
				   : da.max_qp_rd_atom);
}

/* What rdma_connect() and rdma_accept() check of their parameters. */
static int conn_check_param(struct rcm_id *id, const struct rdma_conn_param *p,
			    size_t max_pd)
{
	if (id->pub.qp == NULL && p == NULL)
		return -EINVAL;
	if (p == NULL)
		return 0;
	if (p->responder_resources != RDMA_MAX_RESP_RES &&
	    p->responder_resources > conn_device_max_rd(id, 0))
		return -EINVAL;
	if (p->initiator_depth != RDMA_MAX_INIT_DEPTH &&
	    p->initiator_depth > conn_device_max_rd(id, 1))
		return -EINVAL;
	if (p->private_data_len &&
	    (p->private_data == NULL || p->private_data_len > max_pd))
		return -EINVAL;
	return 0;
}

/* Lock held on entry, not on return.  A REQ or REP went out (rc 0):
 * wake the timers, and a synchronous id waits for its event. */
static int conn_sent(struct rcm_id *id, int rc)
{
	pthread_mutex_unlock(&id->lib->lock);
	lib_kick(id->lib);
	return lib_err(rc < 0 ? rc : id_complete(id));
}

int rdma_connect(struct rdma_cm_id *pub, struct rdma_conn_param *p)
{
	struct rcm_lib *lib = lib_for(pub);
	struct rcm_id *id = id_of(pub);
	uint8_t m[MAD_SIZE];
	size_t pd_len;
	int rc;

	if (lib == NULL)
		return -1;
	if (pub->qp_type == IBV_QPT_UD)
		return lib_err(sidr_connect(id, p));
	rc = conn_check_param(id, p, CONN_REQ_USER_PD - id->connect_pd_len);
	if (rc < 0)
		return lib_err(rc);
	pd_len = p ? p->private_data_len : 0;
	id->initiator_depth = p && p->initiator_depth != RDMA_MAX_INIT_DEPTH
				      ? p->initiator_depth
				      : conn_device_max_rd(id, 1);
	id->responder_resources = p && p->responder_resources !=
							  RDMA_MAX_RESP_RES
					  ? p->responder_resources
					  : conn_device_max_rd(id, 0);
	if (p) {
		id->retry_count = p->retry_count & 7;
		id->rnr_retry_count = p->rnr_retry_count & 7;
	}
	id->qpn = pub->qp ? pub->qp->qp_num : p ? p->qp_num & 0xffffff : 0;
	rc = qp_register(id);
	if (rc < 0)
		return lib_err(rc);
	pthread_mutex_lock(&lib->lock);
	if (id->state != RCM_ID_ROUTE_RESOLVED) {
		pthread_mutex_unlock(&lib->lock);
		return lib_err(-EINVAL);
	}
	memset(m, 0, sizeof(m));
	cm_field_set(m, CM_REQ_SERVICE_ID,
		     rdma_service_id(conn_ps_of(pub->ps),
				     addr_port(&pub->route.addr.dst_addr)));
	cm_field_set(m, CM_REQ_LOCAL_CA_GUID, id->port->ca_guid);
	cm_field_set(m, CM_REQ_LOCAL_QPN, id->qpn);
	cm_field_set(m, CM_REQ_RESPONDER_RESOURCES, id->responder_resources);
	cm_field_set(m, CM_REQ_INITIATOR_DEPTH, id->initiator_depth);
	cm_field_set(m, CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT,
		     CEP_CM_RESPONSE_TIMEOUT);
	cm_field_set(m, CM_REQ_FLOW_CONTROL, p ? p->flow_control : 1);
	cm_field_set(m, CM_REQ_STARTING_PSN, id->psn);
	cm_field_set(m, CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT,
		     CEP_CM_RESPONSE_TIMEOUT);
	cm_field_set(m, CM_REQ_RETRY_COUNT, id->retry_count);
	cm_field_set(m, CM_REQ_PKEY, 0xffff);
	cm_field_set(m, CM_REQ_PATH_MTU, id->path_mtu);
	cm_field_set(m, CM_REQ_RNR_RETRY_COUNT, id->rnr_retry_count);
	cm_field_set(m, CM_REQ_MAX_CM_RETRIES, CEP_MAX_CM_RETRIES);
	cm_field_set(m, CM_REQ_SRQ,
		     pub->qp ? pub->qp->srq != NULL
		     : p     ? p->srq
			     : 0);
	cm_field_set(m, CM_REQ_PRIMARY_LOCAL_LID, 0xffff);
	cm_field_set(m, CM_REQ_PRIMARY_REMOTE_LID, 0xffff);
	cm_set_gid(m, CM_REQ_OFF_PRIMARY_LOCAL_GID, &id->sgid);
	cm_set_gid(m, CM_REQ_OFF_PRIMARY_REMOTE_GID, &id->dgid);
	cm_field_set(m, CM_REQ_PRIMARY_TRAFFIC_CLASS, id->tos);
	cm_field_set(m, CM_REQ_PRIMARY_HOP_LIMIT, 64);
	cm_field_set(m, CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT, id->ack_timeout);
	cma_hdr_build(m + CM_REQ_OFF_PRIVATE_DATA, &id->sgid, &id->dgid,
		      addr_port(&pub->route.addr.src_addr));
	/* An rdma_addrinfo's ai_connect (rdma_create_ep()) goes first, as
	 * librdmacm puts it before the caller's private data. */
	if (id->connect_pd_len)
		memcpy(m + CM_REQ_OFF_PRIVATE_DATA + CMA_HDR_SIZE,
		       id->connect_pd, id->connect_pd_len);
	if (pd_len)
		memcpy(m + CM_REQ_OFF_PRIVATE_DATA + CMA_HDR_SIZE +
			       id->connect_pd_len,
		       p->private_data, pd_len);
	id->state = RCM_ID_CONNECT;
	id->connect_error = 0;
	rc = cep_send_req(&id->cep, m, &id->dgid, lib_now_ms());
	return conn_sent(id, rc);
}

int rdma_accept(struct rdma_cm_id *pub, struct rdma_conn_param *p)
{
	struct rcm_lib *lib = lib_for(pub);
	struct rcm_id *id = id_of(pub);
	uint8_t m[MAD_SIZE];
	size_t pd_len;
	int rc;

	if (lib == NULL)
		return -1;
	if (pub->qp_type == IBV_QPT_UD)
		return lib_err(sidr_accept(id, p));
	rc = conn_check_param(id, p, CM_REP_PRIVATE_DATA_SIZE);
	if (rc < 0)
		return lib_err(rc);
	pd_len = p ? p->private_data_len : 0;
	if (p && p->initiator_depth != RDMA_MAX_INIT_DEPTH)
		id->initiator_depth = p->initiator_depth;
	else if (id->initiator_depth > conn_device_max_rd(id, 1))
		id->initiator_depth = conn_device_max_rd(id, 1);
	if (p && p->responder_resources != RDMA_MAX_RESP_RES)
		id->responder_resources = p->responder_resources;
	else if (id->responder_resources > conn_device_max_rd(id, 0))
		id->responder_resources = conn_device_max_rd(id, 0);
	if (p)
		id->rnr_retry_count = p->rnr_retry_count & 7;
	id->qpn = pub->qp ? pub->qp->qp_num : p ? p->qp_num & 0xffffff : 0;
	rc = qp_register(id);
	if (rc < 0)
		return lib_err(rc);
	pthread_mutex_lock(&lib->lock);
	if (id->cep.state != CEP_REQ_RCVD) {
		pthread_mutex_unlock(&lib->lock);
		return lib_err(-EINVAL);
	}
	/* librdmacm brings the QP up before the REP leaves. */
	if (pub->qp && (qp_to_rtr(id) < 0 || qp_to_rts(id) < 0)) {
		rc = -errno;
		qp_to_err(id);
		pthread_mutex_unlock(&lib->lock);
		return lib_err(rc ? rc : -EINVAL);
	}
	memset(m, 0, sizeof(m));
	cm_field_set(m, CM_REP_LOCAL_QPN, id->qpn);
	cm_field_set(m, CM_REP_STARTING_PSN, id->psn);
	cm_field_set(m, CM_REP_RESPONDER_RESOURCES, id->responder_resources);
	cm_field_set(m, CM_REP_INITIATOR_DEPTH, id->initiator_depth);
	cm_field_set(m, CM_REP_FLOW_CONTROL, p ? p->flow_control : 1);
	cm_field_set(m, CM_REP_RNR_RETRY_COUNT, id->rnr_retry_count);
	cm_field_set(m, CM_REP_SRQ,
		     pub->qp ? pub->qp->srq != NULL
		     : p     ? p->srq
			     : 0);
	cm_field_set(m, CM_REP_LOCAL_CA_GUID, id->port ? id->port->ca_guid : 0);
	if (pd_len)
		memcpy(m + CM_REP_OFF_PRIVATE_DATA, p->private_data, pd_len);
	rc = cep_send_rep(&id->cep, m, lib_now_ms());
	return conn_sent(id, rc);
}

int conn_reject(struct rdma_cm_id *pub, unsigned reason,
		const void *private_data, uint8_t private_data_len)
{
	struct rcm_lib *lib = lib_get();
	struct rcm_id *id = id_of(pub);
	int rc;

	if (lib == NULL)
		return -1;
	if (pub == NULL || (private_data_len && private_data == NULL))
		return lib_err(-EINVAL);
	pthread_mutex_lock(&lib->lock);
	if (id->cep.state == CEP_SIDR_REQ_RCVD)
		rc = sidr_reject(id, private_data, private_data_len);
	else if (id->cep.state != CEP_REQ_RCVD && id->cep.state != CEP_REP_RCVD)
		rc = -EINVAL;
	else
		rc = cep_send_rej(&id->cep, reason, NULL, 0, private_data,
				  private_data_len, lib_now_ms());
	if (rc == 0)
		id->state = RCM_ID_DISCONNECTED;
	pthread_mutex_unlock(&lib->lock);
	return lib_err(rc);
}

int rdma_reject(struct rdma_cm_id *pub, const void *private_data,
		uint8_t private_data_len)
{
	return conn_reject(pub, CM_REJ_REASON_CONSUMER_DEFINED, private_data,
			   private_data_len);
}

int rdma_establish(struct rdma_cm_id *pub)
{
	struct rcm_lib *lib = lib_for(pub);
	struct rcm_id *id = id_of(pub);
	int rc;

	if (lib == NULL)
		return -1;
	pthread_mutex_lock(&lib->lock);
	rc = cep_send_rtu(&id->cep);
	if (rc == 0)
		id->state = RCM_ID_CONNECTED;
	pthread_mutex_unlock(&lib->lock);
	return lib_err(rc);
}

int rdma_disconnect(struct rdma_cm_id *pub)
{
	struct rcm_lib *lib = lib_for(pub);
	struct rcm_id *id = id_of(pub);
	int rc = 0;

	if (lib == NULL)
		return -1;
	pthread_mutex_lock(&lib->lock);
	qp_to_err(id);
	switch (id->cep.state) {
	case CEP_ESTABLISHED: cep_send_dreq(&id->cep, lib_now_ms()); break;
	case CEP_DREQ_RCVD: cep_send_drep(&id->cep, lib_now_ms()); break;
	case CEP_IDLE:
		if (id->state != RCM_ID_DISCONNECTED)
			rc = -EINVAL;
		break;
	default: break; /* cma.c: neither a DREQ nor a DREP fits; fine */
	}
	pthread_mutex_unlock(&lib->lock);
	lib_kick(lib);
	return lib_err(rc);
}
