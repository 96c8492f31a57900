// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "backend/vm/guest_cm.h"

#include <errno.h>
#include <string.h>

#include "common/wire.h"

static const char *const gcm_state_names[GCM_STATE_MAX] = {
	[GCM_IDLE] = "idle",
	[GCM_LISTEN] = "listen",
	[GCM_REQ_SENT] = "req-sent",
	[GCM_REP_SENT] = "rep-sent",
	[GCM_ESTABLISHED] = "established",
	[GCM_DREQ_SENT] = "dreq-sent",
	[GCM_TIMEWAIT] = "timewait",
	[GCM_CLOSED] = "closed",
};

const char *gcm_state_name(enum gcm_state s)
{
	return (unsigned)s < GCM_STATE_MAX ? gcm_state_names[s] : "invalid";
}

void gcm_init(struct gcm *g, const struct gcm_params *p,
	      const struct gcm_ops *ops, void *ctx)
{
	memset(g, 0, sizeof(*g));
	g->p = *p;
	g->ops = ops;
	g->ctx = ctx;
	g->state = GCM_IDLE;
}

static void set_state(struct gcm *g, enum gcm_state s)
{
	g->state = s;
}

static uint64_t new_tid(struct gcm *g)
{
	return ((uint64_t)++g->tid_seq << 32) | g->p.local_comm_id;
}

/* Send a freshly built MAD, remember it, and arm the retry timer. */
static void send_tracked(struct gcm *g, uint64_t now_ms, int retried)
{
	g->ops->send(g->ctx, g->last_sent, &g->p.remote_gid);
	g->retries = 0;
	g->deadline_ms = retried ? now_ms + g->timeout_ms : 0;
}

static void resend_last(struct gcm *g)
{
	g->ops->send(g->ctx, g->last_sent, &g->p.remote_gid);
}

static void send_untracked(struct gcm *g, const uint8_t *mad)
{
	g->ops->send(g->ctx, mad, &g->p.remote_gid);
}

static void enter_timewait(struct gcm *g, uint64_t now_ms)
{
	set_state(g, GCM_TIMEWAIT);
	g->deadline_ms = now_ms + g->p.timewait_ms;
}

static void build_rej(struct gcm *g, uint8_t *mad, uint32_t local,
		      uint32_t remote, int msg, uint16_t reason, uint64_t tid)
{
	cm_mad_init(mad, CM_ATTR_REJ, tid);
	cm_field_set(mad, CM_REJ_LOCAL_COMM_ID, local);
	cm_field_set(mad, CM_REJ_REMOTE_COMM_ID, remote);
	cm_field_set(mad, CM_REJ_MESSAGE_REJECTED, (uint64_t)msg);
	cm_field_set(mad, CM_REJ_REASON, reason);
	(void)g;
}

int gcm_listen(struct gcm *g)
{
	if (g->state != GCM_IDLE && g->state != GCM_CLOSED)
		return -EINVAL;
	g->listening = 1;
	set_state(g, GCM_LISTEN);
	return 0;
}

/* The IBA time (4.096 us * 2^t) of at least ms, as cm.c reads it back
 * (cm_convert_to_ms(): 2^(t-8) ms). */
static unsigned iba_time_of_ms(unsigned ms)
{
	unsigned t = 8;

	while (t < 31 && (1u << (t - 8)) < ms)
		t++;
	return t;
}

int gcm_connect(struct gcm *g, uint64_t now_ms)
{
	uint8_t *m = g->last_sent;
	unsigned t = iba_time_of_ms(g->p.timeout_ms);

	if (g->state != GCM_IDLE && g->state != GCM_CLOSED)
		return -EINVAL;
	g->timeout_ms = 1u << cm_timeout_log2_ms(t);
	g->max_retries = g->p.max_retries & 0xf;
	g->tid = new_tid(g);
	cm_mad_init(m, CM_ATTR_REQ, g->tid);
	cm_field_set(m, CM_REQ_LOCAL_COMM_ID, g->p.local_comm_id);
	cm_field_set(m, CM_REQ_SERVICE_ID,
		     rdma_service_id(CMA_PS_TCP, g->p.port));
	cm_field_set(m, CM_REQ_LOCAL_CA_GUID, g->p.ca_guid);
	cm_field_set(m, CM_REQ_LOCAL_QPN, g->p.qpn);
	cm_field_set(m, CM_REQ_RESPONDER_RESOURCES, 1);
	cm_field_set(m, CM_REQ_INITIATOR_DEPTH, 1);
	cm_field_set(m, CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT, t);
	cm_field_set(m, CM_REQ_STARTING_PSN, g->p.psn);
	cm_field_set(m, CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT, t);
	cm_field_set(m, CM_REQ_RETRY_COUNT, 7);
	cm_field_set(m, CM_REQ_PKEY, 0xffff);
	cm_field_set(m, CM_REQ_PATH_MTU, 3);
	cm_field_set(m, CM_REQ_RNR_RETRY_COUNT, 7);
	cm_field_set(m, CM_REQ_MAX_CM_RETRIES, g->max_retries);
	cm_field_set(m, CM_REQ_PRIMARY_LOCAL_LID, 0xffff);
	cm_field_set(m, CM_REQ_PRIMARY_REMOTE_LID, 0xffff);
	cm_set_gid(m, CM_REQ_OFF_PRIMARY_LOCAL_GID, &g->p.local_gid);
	cm_set_gid(m, CM_REQ_OFF_PRIMARY_REMOTE_GID, &g->p.remote_gid);
	cm_field_set(m, CM_REQ_PRIMARY_HOP_LIMIT, 64);
	cm_field_set(m, CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT, 14);
	/* rdma_cm's header carries the active side's own port; the
	 * destination port is in the service ID. */
	cma_hdr_build(m + CM_REQ_OFF_PRIVATE_DATA, &g->p.local_gid,
		      &g->p.remote_gid,
		      g->p.src_port ? g->p.src_port : g->p.port);
	memcpy(m + CM_REQ_OFF_PRIVATE_DATA + CMA_HDR_SIZE, g->p.private_data,
	       sizeof(g->p.private_data) <
			       CM_REQ_PRIVATE_DATA_SIZE - CMA_HDR_SIZE
		       ? sizeof(g->p.private_data)
		       : CM_REQ_PRIVATE_DATA_SIZE - CMA_HDR_SIZE);
	set_state(g, GCM_REQ_SENT);
	send_tracked(g, now_ms, 1);
	return 0;
}

int gcm_disconnect(struct gcm *g, uint64_t now_ms)
{
	uint8_t *m = g->last_sent;

	if (g->state != GCM_ESTABLISHED)
		return -EINVAL;
	g->tid = new_tid(g);
	cm_mad_init(m, CM_ATTR_DREQ, g->tid);
	cm_field_set(m, CM_DREQ_LOCAL_COMM_ID, g->p.local_comm_id);
	cm_field_set(m, CM_DREQ_REMOTE_COMM_ID, g->remote_comm_id);
	cm_field_set(m, CM_DREQ_REMOTE_QPN, g->remote_qpn);
	set_state(g, GCM_DREQ_SENT);
	send_tracked(g, now_ms, 1);
	return 0;
}

static void copy_peer_data(struct gcm *g, const uint8_t *pd, size_t max)
{
	size_t n = max < sizeof(g->peer_data) - 1 ? max
						  : sizeof(g->peer_data) - 1;

	memcpy(g->peer_data, pd, n);
	g->peer_data[n] = '\0';
}

static void on_req(struct gcm *g, const uint8_t *mad, const struct gid *src,
		   uint64_t now_ms)
{
	uint32_t remote = (uint32_t)cm_field_get(mad, CM_REQ_LOCAL_COMM_ID);
	uint8_t rej[MAD_SIZE];
	struct gid dst;
	uint16_t port = 0;
	uint8_t *m = g->last_sent;

	if (g->state == GCM_REP_SENT && remote == g->remote_comm_id) {
		g->duplicates++;
		resend_last(g); /* our REP was lost */
		return;
	}
	if (g->state != GCM_LISTEN)
		return;
	if (cm_field_get(mad, CM_REQ_SERVICE_ID) !=
		    rdma_service_id(CMA_PS_TCP, g->p.port) ||
	    cm_req_cma_addrs(mad, NULL, &dst, &port) < 0 ||
	    gid_cmp(&dst, &g->p.local_gid) != 0) {
		build_rej(g, rej, 0, remote, CM_MSG_RESPONSE_REQ,
			  CM_REJ_REASON_INVALID_SERVICE_ID, cm_mad_tid(mad));
		g->ops->send(g->ctx, rej, src);
		return;
	}
	g->p.remote_gid = *src;
	g->remote_comm_id = remote;
	g->remote_qpn = (uint32_t)cm_field_get(mad, CM_REQ_LOCAL_QPN);
	g->remote_psn = (uint32_t)cm_field_get(mad, CM_REQ_STARTING_PSN);
	if (g->ops->qp_rtr &&
	    g->ops->qp_rtr(g->ctx, g->remote_qpn, g->remote_psn, src) < 0) {
		build_rej(g, rej, g->p.local_comm_id, remote,
			  CM_MSG_RESPONSE_REQ, CM_REJ_REASON_NO_RESOURCES,
			  cm_mad_tid(mad));
		g->ops->send(g->ctx, rej, src);
		g->remote_comm_id = 0;
		return;
	}
	copy_peer_data(g, mad + CM_REQ_OFF_PRIVATE_DATA + CMA_HDR_SIZE,
		       CM_REQ_PRIVATE_DATA_SIZE - CMA_HDR_SIZE);
	/* The REP is retried as the REQ asks (cm_req_handler()). */
	g->timeout_ms =
		1u << cm_timeout_log2_ms(
			(unsigned)
				cm_field_get(mad,
					     CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT));
	g->max_retries = (unsigned)cm_field_get(mad, CM_REQ_MAX_CM_RETRIES);
	/* A REP answers the REQ's transaction. */
	g->tid = cm_mad_tid(mad);
	cm_mad_init(m, CM_ATTR_REP, g->tid);
	cm_field_set(m, CM_REP_LOCAL_COMM_ID, g->p.local_comm_id);
	cm_field_set(m, CM_REP_REMOTE_COMM_ID, remote);
	cm_field_set(m, CM_REP_LOCAL_QPN, g->p.qpn);
	cm_field_set(m, CM_REP_STARTING_PSN, g->p.psn);
	cm_field_set(m, CM_REP_RESPONDER_RESOURCES, 1);
	cm_field_set(m, CM_REP_INITIATOR_DEPTH, 1);
	cm_field_set(m, CM_REP_RNR_RETRY_COUNT, 7);
	cm_field_set(m, CM_REP_LOCAL_CA_GUID, g->p.ca_guid);
	memcpy(m + CM_REP_OFF_PRIVATE_DATA, g->p.private_data,
	       sizeof(g->p.private_data));
	set_state(g, GCM_REP_SENT);
	send_tracked(g, now_ms, 1);
}

static void on_rep(struct gcm *g, const uint8_t *mad, uint64_t now_ms)
{
	uint32_t remote = (uint32_t)cm_field_get(mad, CM_REP_LOCAL_COMM_ID);
	uint8_t *m = g->last_sent;

	if (cm_field_get(mad, CM_REP_REMOTE_COMM_ID) != g->p.local_comm_id)
		return;
	if (g->state == GCM_ESTABLISHED && remote == g->remote_comm_id) {
		g->duplicates++;
		resend_last(g); /* our RTU was lost */
		return;
	}
	if (g->state != GCM_REQ_SENT)
		return;
	g->remote_comm_id = remote;
	g->remote_qpn = (uint32_t)cm_field_get(mad, CM_REP_LOCAL_QPN);
	g->remote_psn = (uint32_t)cm_field_get(mad, CM_REP_STARTING_PSN);
	copy_peer_data(g, mad + CM_REP_OFF_PRIVATE_DATA, 64);
	if ((g->ops->qp_rtr &&
	     g->ops->qp_rtr(g->ctx, g->remote_qpn, g->remote_psn,
			    &g->p.remote_gid) < 0) ||
	    (g->ops->qp_rts && g->ops->qp_rts(g->ctx) < 0)) {
		build_rej(g, m, g->p.local_comm_id, remote, CM_MSG_RESPONSE_REP,
			  CM_REJ_REASON_NO_RESOURCES, cm_mad_tid(mad));
		send_untracked(g, m);
		enter_timewait(g, now_ms);
		g->ops->event(g->ctx, GCM_EV_REJECTED,
			      CM_REJ_REASON_NO_RESOURCES);
		return;
	}
	cm_mad_init(m, CM_ATTR_RTU, cm_mad_tid(mad));
	cm_field_set(m, CM_RTU_LOCAL_COMM_ID, g->p.local_comm_id);
	cm_field_set(m, CM_RTU_REMOTE_COMM_ID, remote);
	set_state(g, GCM_ESTABLISHED);
	send_tracked(g, now_ms, 0);
	g->ops->event(g->ctx, GCM_EV_CONNECTED, 0);
}

static int ids_match(struct gcm *g, const uint8_t *mad)
{
	uint32_t local = 0, remote = 0;

	cm_mad_local_comm_id(mad, &local);
	cm_mad_remote_comm_id(mad, &remote);
	return remote == g->p.local_comm_id &&
	       (g->remote_comm_id == 0 || local == 0 ||
		local == g->remote_comm_id);
}

static void on_dreq(struct gcm *g, const uint8_t *mad, uint64_t now_ms)
{
	uint8_t *m = g->last_sent;

	if (!ids_match(g, mad))
		return;
	if (g->state == GCM_TIMEWAIT) {
		g->duplicates++;
		resend_last(g); /* our DREP was lost */
		return;
	}
	if (g->state != GCM_ESTABLISHED && g->state != GCM_DREQ_SENT)
		return;
	cm_mad_init(m, CM_ATTR_DREP, cm_mad_tid(mad));
	cm_field_set(m, CM_DREP_LOCAL_COMM_ID, g->p.local_comm_id);
	cm_field_set(m, CM_DREP_REMOTE_COMM_ID, g->remote_comm_id);
	send_tracked(g, now_ms, 0);
	enter_timewait(g, now_ms);
	g->ops->event(g->ctx, GCM_EV_DISCONNECTED, 0);
}

void gcm_input(struct gcm *g, const uint8_t *mad, size_t len,
	       const struct gid *src, uint64_t now_ms)
{
	if (cm_mad_validate(mad, len) < 0)
		return;
	switch (cm_mad_attr_id(mad)) {
	case CM_ATTR_REQ: on_req(g, mad, src, now_ms); break;
	case CM_ATTR_REP: on_rep(g, mad, now_ms); break;
	case CM_ATTR_RTU:
		/* Without RTS the REP's retries run out. */
		if (g->state == GCM_REP_SENT && ids_match(g, mad))
			gcm_established(g);
		break;
	case CM_ATTR_REJ:
		if ((g->state == GCM_REQ_SENT || g->state == GCM_REP_SENT) &&
		    cm_field_get(mad, CM_REJ_REMOTE_COMM_ID) ==
			    g->p.local_comm_id) {
			enter_timewait(g, now_ms);
			g->ops->event(g->ctx, GCM_EV_REJECTED,
				      (int)cm_field_get(mad, CM_REJ_REASON));
		}
		break;
	case CM_ATTR_MRA:
		/* The peer needs more time: wait, do not retransmit. */
		if (g->state == GCM_REQ_SENT && ids_match(g, mad))
			g->deadline_ms = now_ms + 4 * g->timeout_ms *
							  (g->max_retries + 1);
		break;
	case CM_ATTR_DREQ: on_dreq(g, mad, now_ms); break;
	case CM_ATTR_DREP:
		if (g->state == GCM_DREQ_SENT && ids_match(g, mad)) {
			enter_timewait(g, now_ms);
			g->ops->event(g->ctx, GCM_EV_DISCONNECTED, 0);
		}
		break;
	default: break;
	}
}

void gcm_established(struct gcm *g)
{
	if (g->state != GCM_REP_SENT)
		return;
	if (g->ops->qp_rts && g->ops->qp_rts(g->ctx) < 0)
		return;
	set_state(g, GCM_ESTABLISHED);
	g->deadline_ms = 0;
	g->ops->event(g->ctx, GCM_EV_CONNECTED, 0);
}

void gcm_tick(struct gcm *g, uint64_t now_ms)
{
	if (g->deadline_ms == 0 || now_ms < g->deadline_ms)
		return;
	switch (g->state) {
	case GCM_REQ_SENT:
	case GCM_REP_SENT:
	case GCM_DREQ_SENT:
		if (g->retries < g->max_retries) {
			g->retries++;
			g->retransmissions++;
			resend_last(g);
			g->deadline_ms = now_ms + g->timeout_ms;
			return;
		}
		if (g->state == GCM_DREQ_SENT) {
			/* No DREP: the connection is gone all the same. */
			enter_timewait(g, now_ms);
			g->ops->event(g->ctx, GCM_EV_DISCONNECTED, 0);
			return;
		}
		/* Give up as cm.c does (cm_process_send_error()): back to
		 * idle with nothing sent; the peer's own timer ends its
		 * side. */
		enter_timewait(g, now_ms);
		g->ops->event(g->ctx, GCM_EV_TIMEOUT, 0);
		return;
	case GCM_TIMEWAIT:
		g->deadline_ms = 0;
		g->remote_comm_id = 0;
		set_state(g, g->listening ? GCM_LISTEN : GCM_CLOSED);
		g->ops->event(g->ctx, GCM_EV_CLOSED, 0);
		return;
	default: g->deadline_ms = 0; return;
	}
}
