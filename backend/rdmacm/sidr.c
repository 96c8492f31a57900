// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * SIDR for RDMA_PS_UDP ids (udaddy's): a SIDR_REQ to a service, its
 * listener's CONNECT_REQUEST, and the SIDR_REP that gives back the
 * service's QP and Q_Key as ESTABLISHED (or a refusal as UNREACHABLE),
 * as the kernel's cma.c and cm.c exchange them.  No connection follows.
 */
#include "backend/rdmacm/rcm.h"

#include <errno.h>
#include <string.h>

#define SIDR_USER_PD (CM_SIDR_REQ_PRIVATE_DATA_SIZE - CMA_HDR_SIZE)
/* cma.c's SIDR timing: 2^(CMA_CM_RESPONSE_TIMEOUT - 8) ms a try. */
#define SIDR_TIMEOUT_MS (1u << (CEP_CM_RESPONSE_TIMEOUT - 8))

/* The AH that reaches the peer of a UD id: the event's ah_attr, as the
 * kernel fills it from the path (GRH on RoCE). */
static void sidr_ah(const struct rcm_id *id, struct ibv_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	ah->is_global = 1;
	memcpy(ah->grh.dgid.raw, id->dgid.raw, 16);
	ah->grh.sgid_index = (uint8_t)id->sgid_index;
	ah->grh.hop_limit = 64;
	ah->grh.traffic_class = id->tos;
	ah->port_num = id->pub.port_num;
}

/* cma_sidr_rep_handler(): the service's QP and Q_Key as ESTABLISHED, a
 * refusal as UNREACHABLE with the SIDR status. */
void sidr_on_rep(struct rcm_id *id, const uint8_t *mad)
{
	unsigned status = (unsigned)cm_field_get(mad, CM_SIDR_REP_STATUS);
	uint32_t qkey = (uint32_t)cm_field_get(mad, CM_SIDR_REP_QKEY);
	struct rcm_event *ev;

	if (id->state != RCM_ID_CONNECT)
		return;
	if (status != CM_SIDR_STATUS_SUCCESS) {
		id->state = RCM_ID_ROUTE_RESOLVED;
		conn_post(id, RDMA_CM_EVENT_UNREACHABLE, (int)status, NULL, 0);
		return;
	}
	/* cma_set_qkey(): a port space's Q_Key is fixed. */
	if (id->pub.ps == RDMA_PS_UDP && qkey != RDMA_UDP_QKEY) {
		id->state = RCM_ID_ROUTE_RESOLVED;
		conn_post(id, RDMA_CM_EVENT_ADDR_ERROR, -EINVAL, NULL, 0);
		return;
	}
	ev = channel_new_event(id, RDMA_CM_EVENT_ESTABLISHED, 0);
	if (ev == NULL)
		return;
	id->state = RCM_ID_CONNECTED;
	memcpy(ev->pd, mad + CM_SIDR_REP_OFF_PRIVATE_DATA,
	       CM_SIDR_REP_PRIVATE_DATA_SIZE);
	ev->pub.param.ud.private_data = ev->pd;
	ev->pub.param.ud.private_data_len = CM_SIDR_REP_PRIVATE_DATA_SIZE;
	sidr_ah(id, &ev->pub.param.ud.ah_attr);
	ev->pub.param.ud.qp_num = (uint32_t)cm_field_get(mad, CM_SIDR_REP_QPN);
	ev->pub.param.ud.qkey = qkey;
	channel_post(id, ev);
}

/* cm.c's SIDR_REQ: to the listener on its service ID (an unknown one
 * answered "not supported"), a CONNECT_REQUEST with the UD parameters. */
void sidr_on_req(struct rcm_lib *lib, const uint8_t *mad,
		 const struct muxbe_addr *a)
{
	uint64_t sid = cm_field_get(mad, CM_SIDR_REQ_SERVICE_ID);
	uint32_t rid = (uint32_t)cm_field_get(mad, CM_SIDR_REQ_REQUEST_ID);
	struct gid src, dst, hdr_src, hdr_dst;
	struct rcm_id *listener, *child;
	struct rcm_event *ev;
	uint8_t rep[MAD_SIZE];
	uint16_t hdr_port = 0;

	memcpy(src.raw, a->remote_gid, 16);
	memcpy(dst.raw, a->local_gid, 16);
	listener = conn_find_listener(lib, sid, &dst);
	if (listener == NULL ||
	    cm_mad_cma_addrs(mad, &hdr_src, &hdr_dst, &hdr_port) < 0) {
		memset(rep, 0, sizeof(rep));
		cm_build_sidr_rep(rep, cm_mad_tid(mad), rid,
				  CM_SIDR_STATUS_UNSUPPORTED, sid);
		conn_answer(lib, a, rep);
		return;
	}
	if (listener->backlog <= 0)
		return; /* as a REQ: its retry may find room */
	child = conn_child(lib, listener, &src, &dst, &hdr_src, &hdr_dst,
			   hdr_port);
	ev = child ? channel_new_event(listener, RDMA_CM_EVENT_CONNECT_REQUEST,
				       0)
		   : NULL;
	if (ev == NULL) {
		if (child)
			id_free(child);
		return;
	}
	child->qkey = RDMA_UDP_QKEY;
	cep_sidr_req_received(&child->cep, mad, &src);
	listener->backlog--;
	ev->pub.id = &child->pub;
	ev->pub.listen_id = &listener->pub;
	memcpy(ev->pd, mad + CM_SIDR_REQ_OFF_PRIVATE_DATA + CMA_HDR_SIZE,
	       SIDR_USER_PD);
	ev->pub.param.ud.private_data = ev->pd;
	ev->pub.param.ud.private_data_len = SIDR_USER_PD;
	sidr_ah(child, &ev->pub.param.ud.ah_attr);
	channel_post(listener, ev);
}

/* SIDR for a UD id (cma_resolve_ib_udp()): the service's QP comes back
 * as ESTABLISHED, with no connection behind it. */
int sidr_connect(struct rcm_id *id, const struct rdma_conn_param *p)
{
	struct rcm_lib *lib = id->lib;
	struct rdma_cm_id *pub = &id->pub;
	size_t pd_len = p ? p->private_data_len : 0;
	uint8_t m[MAD_SIZE];
	int rc;

	if (pd_len > SIDR_USER_PD || (pd_len && p->private_data == NULL))
		return -EINVAL;
	pthread_mutex_lock(&lib->lock);
	if (id->state != RCM_ID_ROUTE_RESOLVED) {
		pthread_mutex_unlock(&lib->lock);
		return -EINVAL;
	}
	memset(m, 0, sizeof(m));
	cm_field_set(m, CM_SIDR_REQ_PKEY, 0xffff);
	cm_field_set(m, CM_SIDR_REQ_SERVICE_ID,
		     rdma_service_id(conn_ps_of(pub->ps),
				     addr_port(&pub->route.addr.dst_addr)));
	cma_hdr_build(m + CM_SIDR_REQ_OFF_PRIVATE_DATA, &id->sgid, &id->dgid,
		      addr_port(&pub->route.addr.src_addr));
	if (pd_len)
		memcpy(m + CM_SIDR_REQ_OFF_PRIVATE_DATA + CMA_HDR_SIZE,
		       p->private_data, pd_len);
	id->state = RCM_ID_CONNECT;
	rc = cep_send_sidr_req(&id->cep, m, &id->dgid, SIDR_TIMEOUT_MS,
			       CEP_MAX_CM_RETRIES, lib_now_ms());
	pthread_mutex_unlock(&lib->lock);
	lib_kick(lib);
	return rc < 0 ? rc : id_complete(id);
}

/* cma_send_sidr_rep() with success: the QP and the port space's Q_Key. */
int sidr_accept(struct rcm_id *id, const struct rdma_conn_param *p)
{
	struct rcm_lib *lib = id->lib;
	size_t pd_len = p ? p->private_data_len : 0;
	uint8_t m[MAD_SIZE];
	int rc;

	if (pd_len > CM_SIDR_REP_PRIVATE_DATA_SIZE ||
	    (pd_len && p->private_data == NULL))
		return -EINVAL;
	id->qpn = id->pub.qp ? id->pub.qp->qp_num
		  : p        ? p->qp_num & 0xffffff
			     : 0;
	rc = qp_register(id);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&lib->lock);
	if (id->cep.state != CEP_SIDR_REQ_RCVD) {
		pthread_mutex_unlock(&lib->lock);
		return -EINVAL;
	}
	memset(m, 0, sizeof(m));
	cm_field_set(m, CM_SIDR_REP_STATUS, CM_SIDR_STATUS_SUCCESS);
	cm_field_set(m, CM_SIDR_REP_QPN, id->qpn);
	cm_field_set(m, CM_SIDR_REP_SERVICE_ID, id->service_id);
	cm_field_set(m, CM_SIDR_REP_QKEY, id->qkey);
	if (pd_len)
		memcpy(m + CM_SIDR_REP_OFF_PRIVATE_DATA, p->private_data,
		       pd_len);
	rc = cep_send_sidr_rep(&id->cep, m, lib_now_ms());
	if (rc == 0)
		id->state = RCM_ID_CONNECTED;
	pthread_mutex_unlock(&lib->lock);
	return rc;
}

/* cma_send_sidr_rep(IB_SIDR_REJECT) with the private data. */
int sidr_reject(struct rcm_id *id, const void *private_data,
		uint8_t private_data_len)
{
	uint8_t m[MAD_SIZE] = { 0 };

	cm_field_set(m, CM_SIDR_REP_STATUS, CM_SIDR_STATUS_REJECT);
	cm_field_set(m, CM_SIDR_REP_SERVICE_ID, id->service_id);
	if (private_data_len)
		memcpy(m + CM_SIDR_REP_OFF_PRIVATE_DATA, private_data,
		       private_data_len < CM_SIDR_REP_PRIVATE_DATA_SIZE
			       ? private_data_len
			       : CM_SIDR_REP_PRIVATE_DATA_SIZE);
	return cep_send_sidr_rep(&id->cep, m, lib_now_ms());
}
