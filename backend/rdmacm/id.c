// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * rdma_cm_id: creation, destruction (which waits for the id's events to
 * be acked, as librdmacm's does), migration between channels, options,
 * and the calls that read an id's addresses.
 */
#include "backend/rdmacm/rcm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

struct rcm_id *id_of(struct rdma_cm_id *pub)
{
	return (struct rcm_id *)pub;
}

struct rcm_id *id_alloc(struct rcm_lib *lib, struct rcm_channel *ch,
			void *context, enum rdma_port_space ps,
			enum ibv_qp_type qp_type)
{
	struct rcm_id *id = calloc(1, sizeof(*id));

	if (id == NULL)
		return NULL;
	id->lib = lib;
	id->pub.channel = &ch->pub;
	id->pub.context = context;
	id->pub.ps = ps;
	id->pub.qp_type = qp_type;
	id->state = RCM_ID_IDLE;
	id->responder_resources = RDMA_MAX_RESP_RES;
	id->initiator_depth = RDMA_MAX_INIT_DEPTH;
	id->retry_count = 7;
	id->rnr_retry_count = 7;
	id->ack_timeout = 14;
	id->path_mtu = IBV_MTU_1024;
	if (getrandom(&id->psn, sizeof(id->psn), 0) != sizeof(id->psn))
		id->psn = (uint32_t)(uintptr_t)id;
	id->psn &= 0xffffff;
	pthread_cond_init(&id->acked, NULL);
	cep_init(&id->cep, &conn_cep_ops, id, lib_new_comm_id(lib));
	TAILQ_INSERT_TAIL(&lib->ids, id, link);
	return id;
}

void id_free(struct rcm_id *id)
{
	TAILQ_REMOVE(&id->lib->ids, id, link);
	pthread_cond_destroy(&id->acked);
	free(id->qp_init_attr);
	free(id->connect_pd);
	free(id);
}

void id_wait_acked(struct rcm_id *id)
{
	while (id->events_out > 0)
		pthread_cond_wait(&id->acked, &id->lib->lock);
}

int id_complete(struct rcm_id *id)
{
	struct rdma_cm_event *ev;

	if (!id->sync)
		return 0;
	if (id->pub.event) {
		rdma_ack_cm_event(id->pub.event);
		id->pub.event = NULL;
	}
	if (rdma_get_cm_event(id->pub.channel, &ev) < 0)
		return -errno;
	id->pub.event = ev;
	if (ev->status == 0)
		return 0;
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		return -ECONNREFUSED;
	return ev->status < 0 ? ev->status : -ev->status;
}

static int id_check_ps(enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	switch (ps) {
	case RDMA_PS_TCP: return qp_type == IBV_QPT_RC ? 0 : -EINVAL;
	case RDMA_PS_UDP: return qp_type == IBV_QPT_UD ? 0 : -EINVAL;
	case RDMA_PS_IB: return 0;
	case RDMA_PS_IPOIB:
	default: return -EPROTONOSUPPORT;
	}
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
		   void *context, enum rdma_port_space ps)
{
	enum ibv_qp_type qp_type = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB
					   ? IBV_QPT_UD
					   : IBV_QPT_RC;
	struct rcm_lib *lib = lib_get();
	struct rcm_channel *ch = (struct rcm_channel *)channel;
	struct rcm_id *r;
	int rc;

	if (lib == NULL)
		return -1;
	if (id == NULL)
		return lib_err(-EINVAL);
	rc = id_check_ps(ps, qp_type);
	if (rc < 0)
		return lib_err(rc);
	if (ch == NULL) {
		/* The synchronous API: a channel of its own, and the calls
		 * wait for their event. */
		ch = channel_create();
		if (ch == NULL)
			return lib_err(-ENOMEM);
	}
	pthread_mutex_lock(&lib->lock);
	r = id_alloc(lib, ch, context, ps, qp_type);
	if (r)
		r->sync = channel == NULL;
	pthread_mutex_unlock(&lib->lock);
	if (r == NULL) {
		if (channel == NULL)
			channel_destroy(ch);
		return lib_err(-ENOMEM);
	}
	*id = &r->pub;
	return 0;
}

int rdma_destroy_id(struct rdma_cm_id *pub)
{
	struct rcm_lib *lib = lib_for(pub);
	struct rcm_id *id = id_of(pub);
	struct rcm_channel *own = NULL;

	if (lib == NULL)
		return -1;
	if (pub->event) {
		rdma_ack_cm_event(pub->event);
		pub->event = NULL;
	}
	conn_unlisten(id);
	/* A QP number named without a QP (rdma_conn_param's) is let go
	 * here; one of id->qp, by rdma_destroy_qp(). */
	if (id->qpn_registered && pub->qp == NULL && id->port)
		muxbe_unregister_qpn(lib->mb, id->port->name,
				     (uint32_t)id->qpn_registered);
	pthread_mutex_lock(&lib->lock);
	id->state = RCM_ID_DESTROYING;
	conn_teardown(id);
	channel_flush_id(id);
	id_wait_acked(id);
	if (id->sync)
		own = (struct rcm_channel *)pub->channel;
	id_free(id);
	if (own)
		channel_destroy(own);
	pthread_mutex_unlock(&lib->lock);
	return 0;
}

int rdma_migrate_id(struct rdma_cm_id *pub, struct rdma_event_channel *channel)
{
	struct rcm_lib *lib = lib_get();
	struct rcm_id *id = id_of(pub);
	struct rcm_channel *from, *to = (struct rcm_channel *)channel;
	struct rcm_event *ev, *tmp;

	if (lib == NULL)
		return -1;
	if (pub == NULL || (id->sync && channel == NULL))
		return lib_err(-EINVAL);
	if (to == NULL) {
		to = channel_create();
		if (to == NULL)
			return lib_err(-ENOMEM);
	}
	if (id->sync && pub->event) {
		rdma_ack_cm_event(pub->event);
		pub->event = NULL;
	}
	pthread_mutex_lock(&lib->lock);
	from = (struct rcm_channel *)pub->channel;
	/* Its events not yet taken go with it, as the kernel moves them. */
	for (ev = TAILQ_FIRST(&from->events); ev; ev = tmp) {
		tmp = TAILQ_NEXT(ev, link);
		if (ev->id != id)
			continue;
		TAILQ_REMOVE(&from->events, ev, link);
		channel_enqueue(to, ev);
	}
	id_wait_acked(id);
	pub->channel = &to->pub;
	if (id->sync)
		channel_destroy(from);
	id->sync = channel == NULL;
	pthread_mutex_unlock(&lib->lock);
	return 0;
}

int rdma_set_option(struct rdma_cm_id *pub, int level, int optname,
		    void *optval, size_t optlen)
{
	struct rcm_id *id = id_of(pub);

	if (pub == NULL || optval == NULL)
		return lib_err(-EINVAL);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			if (optlen != sizeof(uint8_t))
				return lib_err(-EINVAL);
			id->tos = *(uint8_t *)optval;
			return 0;
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != sizeof(uint8_t))
				return lib_err(-EINVAL);
			id->ack_timeout = *(uint8_t *)optval & 0x1f;
			return 0;
		case RDMA_OPTION_ID_REUSEADDR:
		case RDMA_OPTION_ID_AFONLY:
			/* Addresses are the host's, shared through the
			 * daemon; a port is taken per service ID, which
			 * these options do not change. */
			if (optlen != sizeof(int))
				return lib_err(-EINVAL);
			return 0;
		default: return lib_err(-ENOSYS);
		}
	}
	/* RDMA_OPTION_IB_PATH: routes come from the GID table on RoCE. */
	return lib_err(-ENOSYS);
}

uint16_t rdma_get_src_port(struct rdma_cm_id *id)
{
	return id ? htobe16(addr_port(&id->route.addr.src_addr)) : 0;
}

uint16_t rdma_get_dst_port(struct rdma_cm_id *id)
{
	return id ? htobe16(addr_port(&id->route.addr.dst_addr)) : 0;
}

struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct rcm_lib *lib = lib_get();
	struct ibv_context **list;
	int i, n = 0;

	if (lib == NULL)
		return NULL;
	list = calloc((size_t)lib->nports + 1, sizeof(*list));
	if (list == NULL)
		return NULL;
	pthread_mutex_lock(&lib->lock);
	for (i = 0; i < lib->nports; i++) {
		struct ibv_context *v = lib_port_verbs(&lib->ports[i]);
		int j, seen = 0;

		for (j = 0; j < n; j++)
			seen |= list[j] == v;
		if (v && !seen)
			list[n++] = v;
	}
	pthread_mutex_unlock(&lib->lock);
	if (num_devices)
		*num_devices = n;
	return list;
}

void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

int rdma_notify(struct rdma_cm_id *pub, enum ibv_event_type event)
{
	struct rcm_lib *lib = lib_for(pub);
	struct rcm_id *id = id_of(pub);

	if (lib == NULL)
		return -1;
	/* IBV_EVENT_COMM_EST: data came before the RTU. */
	if (event != IBV_EVENT_COMM_EST)
		return 0;
	pthread_mutex_lock(&lib->lock);
	cep_established(&id->cep);
	pthread_mutex_unlock(&lib->lock);
	return 0;
}
