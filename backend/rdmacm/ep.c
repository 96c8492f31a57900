// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The synchronous endpoint API that rdma_client and rdma_server use:
 * rdma_create_ep (an id with no channel, resolved, with its QP),
 * rdma_get_request and rdma_destroy_ep, as librdmacm defines them.
 */
#include "backend/rdmacm/rcm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int ep_passive(struct rdma_cm_id *pub, struct rdma_addrinfo *res,
		      struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct rcm_id *id = id_of(pub);

	if (rdma_bind_addr(pub, res->ai_src_addr) < 0)
		return -1;
	if (pd)
		pub->pd = pd;
	if (attr) {
		id->qp_init_attr = malloc(sizeof(*attr));
		if (id->qp_init_attr == NULL)
			return lib_err(-ENOMEM);
		*id->qp_init_attr = *attr;
		id->qp_init_attr->qp_type = res->ai_qp_type;
	}
	return 0;
}

int rdma_create_ep(struct rdma_cm_id **out, struct rdma_addrinfo *res,
		   struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct rdma_cm_id *pub;
	struct rcm_id *id;

	if (out == NULL || res == NULL)
		return lib_err(-EINVAL);
	if (rdma_create_id(NULL, &pub, NULL, res->ai_port_space) < 0)
		return -1;
	pub->qp_type = res->ai_qp_type;
	id = id_of(pub);
	if (res->ai_flags & RAI_PASSIVE) {
		if (ep_passive(pub, res, pd, attr) < 0)
			goto err;
		*out = pub;
		return 0;
	}
	if (rdma_resolve_addr(pub, res->ai_src_addr, res->ai_dst_addr, 2000) <
		    0 ||
	    rdma_resolve_route(pub, 2000) < 0)
		goto err;
	if (attr) {
		attr->qp_type = res->ai_qp_type;
		if (rdma_create_qp(pub, pd, attr) < 0)
			goto err;
	}
	if (res->ai_connect_len > CM_REQ_PRIVATE_DATA_SIZE - CMA_HDR_SIZE) {
		errno = EINVAL;
		goto err;
	}
	if (res->ai_connect_len) {
		id->connect_pd = malloc(res->ai_connect_len);
		if (id->connect_pd == NULL) {
			errno = ENOMEM;
			goto err;
		}
		memcpy(id->connect_pd, res->ai_connect, res->ai_connect_len);
		id->connect_pd_len = res->ai_connect_len;
	}
	*out = pub;
	return 0;
err:
	rdma_destroy_ep(pub);
	return -1;
}

void rdma_destroy_ep(struct rdma_cm_id *pub)
{
	if (pub == NULL)
		return;
	if (pub->qp)
		rdma_destroy_qp(pub);
	if (pub->srq)
		rdma_destroy_srq(pub);
	rdma_destroy_id(pub);
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **out)
{
	struct rcm_id *l = id_of(listen);
	struct rdma_cm_event *ev;
	int err;

	if (listen == NULL || out == NULL || !l->sync)
		return lib_err(-EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	if (rdma_get_cm_event(listen->channel, &ev) < 0)
		return -1;
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		err = -ECONNREFUSED;
	else if (ev->status)
		err = ev->status < 0 ? ev->status : -ev->status;
	else if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		err = -EINVAL;
	else
		err = 0;
	if (err == 0) {
		/* The request's id waits on its own, as the listener does. */
		if (rdma_migrate_id(ev->id, NULL) < 0)
			err = -errno;
	}
	if (err == 0 && l->qp_init_attr) {
		struct ibv_qp_init_attr attr = *l->qp_init_attr;

		if (rdma_create_qp(ev->id, listen->pd, &attr) < 0)
			err = -errno;
	}
	if (err < 0) {
		listen->event = ev;
		return lib_err(err);
	}
	*out = ev->id;
	ev->id->event = ev;
	return 0;
}
