// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * An id's QP on libibverbs: rdma_create_qp (INIT on creation, CQs made
 * when the caller gives none, as librdmacm does), the attributes of each
 * state (rdma_init_qp_attr: what the kernel's ib_cm_init_qp_attr() gives
 * for the connection), and the moves the CM makes (RTR and RTS on the
 * REP or accept, ERR on disconnect and reject).
 */
#include "backend/rdmacm/rcm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static enum ibv_mtu qp_port_mtu(struct rcm_id *id)
{
	struct ibv_port_attr pa;

	if (id->pub.verbs == NULL ||
	    ibv_query_port(id->pub.verbs, id->pub.port_num, &pa))
		return IBV_MTU_1024;
	return pa.active_mtu;
}

/* ib_cm_init_qp_attr()'s attributes for one state of this connection. */
static int qp_attrs_for(struct rcm_id *id, struct ibv_qp_attr *a, int *mask)
{
	enum ibv_mtu mtu = qp_port_mtu(id);

	switch (a->qp_state) {
	case IBV_QPS_INIT:
		a->pkey_index = 0;
		a->port_num = id->pub.port_num;
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		if (id->pub.qp_type == IBV_QPT_UD) {
			a->qkey = id->qkey ? id->qkey : RDMA_UDP_QKEY;
			*mask |= IBV_QP_QKEY;
		} else {
			a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
			if (id->responder_resources)
				a->qp_access_flags |= IBV_ACCESS_REMOTE_READ |
						      IBV_ACCESS_REMOTE_ATOMIC;
			*mask |= IBV_QP_ACCESS_FLAGS;
		}
		return 0;
	case IBV_QPS_RTR:
		memset(&a->ah_attr, 0, sizeof(a->ah_attr));
		a->ah_attr.is_global = 1;
		memcpy(a->ah_attr.grh.dgid.raw, id->cep.remote_gid.raw, 16);
		a->ah_attr.grh.sgid_index = (uint8_t)id->sgid_index;
		a->ah_attr.grh.hop_limit = 64;
		a->ah_attr.grh.traffic_class = id->tos;
		a->ah_attr.port_num = id->pub.port_num;
		a->path_mtu = id->path_mtu && id->path_mtu < mtu
				      ? (enum ibv_mtu)id->path_mtu
				      : mtu;
		a->dest_qp_num = id->cep.remote_qpn;
		/* A REQ's or REP's Starting PSN is what its sender's QP
		 * expects to receive (cm.c takes the peer's as its send
		 * queue's; cma.c's RTR sets the receive queue's to the PSN
		 * it announced). */
		a->rq_psn = id->psn;
		a->max_dest_rd_atomic = id->responder_resources;
		a->min_rnr_timer = 0;
		*mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		return 0;
	case IBV_QPS_RTS:
		a->sq_psn = id->remote_psn;
		a->timeout = id->ack_timeout;
		a->retry_cnt = id->retry_count;
		a->rnr_retry = id->rnr_retry_count;
		a->max_rd_atomic = id->initiator_depth;
		*mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
		return 0;
	default: return -EINVAL;
	}
}

int rdma_init_qp_attr(struct rdma_cm_id *pub, struct ibv_qp_attr *qp_attr,
		      int *qp_attr_mask)
{
	if (pub == NULL || qp_attr == NULL || qp_attr_mask == NULL)
		return lib_err(-EINVAL);
	return lib_err(qp_attrs_for(id_of(pub), qp_attr, qp_attr_mask));
}

static int qp_modify(struct rcm_id *id, enum ibv_qp_state state)
{
	struct ibv_qp_attr a;
	int mask, rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = state;
	rc = qp_attrs_for(id, &a, &mask);
	if (rc < 0)
		return rc;
	rc = ibv_modify_qp(id->pub.qp, &a, mask);
	return rc ? -rc : 0;
}

int qp_to_rtr(struct rcm_id *id)
{
	int rc;

	if (id->pub.qp == NULL || id->pub.qp_type == IBV_QPT_UD)
		return 0;
	/* INIT again first: the access flags follow the responder
	 * resources agreed on (ucma_modify_qp_rtr()). */
	rc = qp_modify(id, IBV_QPS_INIT);
	if (rc == 0)
		rc = qp_modify(id, IBV_QPS_RTR);
	if (rc < 0)
		errno = -rc;
	return rc;
}

int qp_to_rts(struct rcm_id *id)
{
	int rc;

	if (id->pub.qp == NULL || id->pub.qp_type == IBV_QPT_UD)
		return 0;
	rc = qp_modify(id, IBV_QPS_RTS);
	if (rc < 0)
		errno = -rc;
	return rc;
}

void qp_to_err(struct rcm_id *id)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	if (id->pub.qp)
		ibv_modify_qp(id->pub.qp, &a, IBV_QP_STATE);
}

int qp_register(struct rcm_id *id)
{
	int rc;

	if (id->qpn_registered == (int)id->qpn || id->port == NULL ||
	    id->qpn == 0)
		return 0;
	rc = muxbe_register_qpn(id->lib->mb, id->port->name, id->qpn);
	if (rc == 0)
		id->qpn_registered = (int)id->qpn;
	return rc;
}

/* A CQ of cqe entries with a completion channel of its own, as
 * librdmacm makes one when rdma_create_qp() is given none. */
static int qp_make_cq(struct rdma_cm_id *pub, int cqe,
		      struct ibv_comp_channel **ch, struct ibv_cq **cq)
{
	*ch = ibv_create_comp_channel(pub->verbs);
	if (*ch)
		*cq = ibv_create_cq(pub->verbs, cqe > 0 ? cqe : 1, pub, *ch, 0);
	return *cq ? 0 : -ENOMEM;
}

static void qp_drop_cq(struct ibv_comp_channel **ch, struct ibv_cq **cq)
{
	if (*cq)
		ibv_destroy_cq(*cq);
	if (*ch)
		ibv_destroy_comp_channel(*ch);
	*cq = NULL;
	*ch = NULL;
}

static int qp_make_cqs(struct rcm_id *id, struct ibv_qp_init_attr *attr)
{
	struct rdma_cm_id *pub = &id->pub;

	if (attr->send_cq == NULL) {
		id->own_cqs |= 1;
		if (qp_make_cq(pub, (int)attr->cap.max_send_wr,
			       &pub->send_cq_channel, &pub->send_cq) < 0)
			return -ENOMEM;
		attr->send_cq = pub->send_cq;
	}
	if (attr->recv_cq == NULL) {
		id->own_cqs |= 2;
		if (qp_make_cq(pub, (int)attr->cap.max_recv_wr,
			       &pub->recv_cq_channel, &pub->recv_cq) < 0)
			return -ENOMEM;
		attr->recv_cq = pub->recv_cq;
	}
	return 0;
}

static void qp_drop_cqs(struct rcm_id *id)
{
	if (id->own_cqs & 1)
		qp_drop_cq(&id->pub.send_cq_channel, &id->pub.send_cq);
	if (id->own_cqs & 2)
		qp_drop_cq(&id->pub.recv_cq_channel, &id->pub.recv_cq);
	id->own_cqs = 0;
}

int rdma_create_qp(struct rdma_cm_id *pub, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *attr)
{
	struct rcm_id *id = id_of(pub);
	struct ibv_qp *qp;
	int rc;

	if (pub == NULL || attr == NULL)
		return lib_err(-EINVAL);
	if (pub->verbs == NULL)
		return lib_err(-ENODEV); /* unbound, or a simulated port */
	if (pd == NULL) {
		if (pub->pd == NULL)
			pub->pd = ibv_alloc_pd(pub->verbs);
		pd = pub->pd;
		if (pd == NULL)
			return lib_err(-ENOMEM);
	}
	if (pd->context != pub->verbs)
		return lib_err(-EINVAL);
	if (attr->srq == NULL)
		attr->srq = pub->srq;
	rc = qp_make_cqs(id, attr);
	if (rc < 0) {
		qp_drop_cqs(id);
		return lib_err(rc);
	}
	qp = ibv_create_qp(pd, attr);
	if (qp == NULL) {
		rc = errno ? -errno : -ENOMEM;
		qp_drop_cqs(id);
		return lib_err(rc);
	}
	pub->qp = qp;
	pub->pd = pd;
	rc = qp_modify(id, IBV_QPS_INIT);
	if (rc == 0 && pub->qp_type == IBV_QPT_UD) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };

		rc = -ibv_modify_qp(qp, &a, IBV_QP_STATE);
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 0;
		if (rc == 0)
			rc = -ibv_modify_qp(qp, &a,
					    IBV_QP_STATE | IBV_QP_SQ_PSN);
	}
	if (rc == 0) {
		id->qpn = qp->qp_num;
		/* The daemon checks a REQ's or REP's QP with the kernel;
		 * asking now turns a refusal into this call's error. */
		rc = qp_register(id);
	}
	if (rc < 0) {
		ibv_destroy_qp(qp);
		pub->qp = NULL;
		qp_drop_cqs(id);
		return lib_err(rc);
	}
	return 0;
}

void rdma_destroy_qp(struct rdma_cm_id *pub)
{
	struct rcm_id *id = id_of(pub);

	if (pub == NULL || pub->qp == NULL)
		return;
	if (id->qpn_registered && id->port)
		muxbe_unregister_qpn(id->lib->mb, id->port->name,
				     (uint32_t)id->qpn_registered);
	id->qpn_registered = 0;
	ibv_destroy_qp(pub->qp);
	pub->qp = NULL;
	qp_drop_cqs(id);
}

int rdma_create_qp_ex(struct rdma_cm_id *pub, struct ibv_qp_init_attr_ex *ex)
{
	struct ibv_qp_init_attr attr;
	int rc;

	if (pub == NULL || ex == NULL)
		return lib_err(-EINVAL);
	/* Only what ibv_qp_init_attr says; extensions are refused. */
	if (ex->comp_mask & ~IBV_QP_INIT_ATTR_PD)
		return lib_err(-EOPNOTSUPP);
	memset(&attr, 0, sizeof(attr));
	attr.qp_context = ex->qp_context;
	attr.send_cq = ex->send_cq;
	attr.recv_cq = ex->recv_cq;
	attr.srq = ex->srq;
	attr.cap = ex->cap;
	attr.qp_type = ex->qp_type;
	attr.sq_sig_all = ex->sq_sig_all;
	rc = rdma_create_qp(pub, ex->pd, &attr);
	if (rc == 0)
		ex->cap = attr.cap;
	return rc;
}

int rdma_create_srq(struct rdma_cm_id *pub, struct ibv_pd *pd,
		    struct ibv_srq_init_attr *attr)
{
	struct ibv_srq *srq;

	if (pub == NULL || attr == NULL)
		return lib_err(-EINVAL);
	if (pub->verbs == NULL)
		return lib_err(-ENODEV);
	if (pd == NULL) {
		if (pub->pd == NULL)
			pub->pd = ibv_alloc_pd(pub->verbs);
		pd = pub->pd;
		if (pd == NULL)
			return lib_err(-ENOMEM);
	}
	srq = ibv_create_srq(pd, attr);
	if (srq == NULL)
		return -1;
	pub->srq = srq;
	pub->pd = pd;
	return 0;
}

int rdma_create_srq_ex(struct rdma_cm_id *pub, struct ibv_srq_init_attr_ex *ex)
{
	struct ibv_srq_init_attr attr;

	if (pub == NULL || ex == NULL)
		return lib_err(-EINVAL);
	if ((ex->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) &&
	    ex->srq_type != IBV_SRQT_BASIC)
		return lib_err(-EOPNOTSUPP);
	memset(&attr, 0, sizeof(attr));
	attr.srq_context = ex->srq_context;
	attr.attr = ex->attr;
	return rdma_create_srq(pub,
			       (ex->comp_mask & IBV_SRQ_INIT_ATTR_PD) ? ex->pd
								      : NULL,
			       &attr);
}

void rdma_destroy_srq(struct rdma_cm_id *pub)
{
	if (pub && pub->srq) {
		ibv_destroy_srq(pub->srq);
		pub->srq = NULL;
	}
}
