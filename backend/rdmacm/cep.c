// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * One CM endpoint of the host-process library: the states and timers of
 * the kernel's cm.c (struct cm_id_private) for one connection or one
 * SIDR exchange, with no I/O.  The caller builds the contents of REQ,
 * REP and SIDR MADs (what librdmacm's API puts in them); this file owns
 * comm IDs, transaction IDs, retransmission, duplicates and which
 * message is valid in which state.
 */
#include "backend/rdmacm/rcm.h"

#include <errno.h>
#include <string.h>

static const char *const cep_state_names[CEP_STATE_MAX] = {
	[CEP_IDLE] = "idle",
	[CEP_REQ_SENT] = "req-sent",
	[CEP_REQ_RCVD] = "req-rcvd",
	[CEP_REP_SENT] = "rep-sent",
	[CEP_REP_RCVD] = "rep-rcvd",
	[CEP_ESTABLISHED] = "established",
	[CEP_DREQ_SENT] = "dreq-sent",
	[CEP_DREQ_RCVD] = "dreq-rcvd",
	[CEP_TIMEWAIT] = "timewait",
	[CEP_SIDR_REQ_SENT] = "sidr-req-sent",
	[CEP_SIDR_REQ_RCVD] = "sidr-req-rcvd",
};

const char *cep_state_name(enum cep_state s)
{
	return (unsigned)s < CEP_STATE_MAX ? cep_state_names[s] : "invalid";
}

void cep_init(struct cep *c, const struct cep_ops *ops, void *ctx,
	      uint32_t local_id)
{
	memset(c, 0, sizeof(*c));
	c->ops = ops;
	c->ctx = ctx;
	c->local_id = local_id;
	c->state = CEP_IDLE;
	c->timewait_ms = CEP_TIMEWAIT_MS;
}

static uint64_t cep_new_tid(struct cep *c)
{
	return ((uint64_t)++c->tid_seq << 32) | c->local_id;
}

/* Send last_sent and arm the retry timer for it. */
static void cep_send_tracked(struct cep *c, uint64_t now_ms)
{
	c->retries = 0;
	c->deadline_ms = now_ms + c->timeout_ms;
	c->ops->send(c->ctx, c->last_sent);
}

/* A reply nobody waits on (RTU, DREP, REJ): kept in last_sent so that a
 * duplicate of what it answers gets it again. */
static void cep_send_reply(struct cep *c)
{
	c->deadline_ms = 0;
	c->ops->send(c->ctx, c->last_sent);
}

static void cep_enter_timewait(struct cep *c, uint64_t now_ms)
{
	c->state = CEP_TIMEWAIT;
	c->deadline_ms = now_ms + c->timewait_ms;
}

/* cm.c's cm_reset_to_idle(): nothing in flight, the comm ID free again. */
static void cep_reset_to_idle(struct cep *c)
{
	c->state = CEP_IDLE;
	c->deadline_ms = 0;
}

/* The per-try timeout of a REQ as cm.c computes it: twice the packet
 * lifetime plus the peer's CM response time, each 2^(t-8) ms. */
static unsigned cep_req_timeout_ms(unsigned response_t, unsigned lifetime_t)
{
	return (2u << cm_timeout_log2_ms(lifetime_t)) +
	       (1u << cm_timeout_log2_ms(response_t));
}

int cep_send_req(struct cep *c, uint8_t *mad, const struct gid *remote,
		 uint64_t now_ms)
{
	if (c->state != CEP_IDLE)
		return -EINVAL;
	c->remote_gid = *remote;
	c->remote_id = 0;
	c->tid = cep_new_tid(c);
	cm_mad_set_header(mad, CM_ATTR_REQ, c->tid);
	cm_field_set(mad, CM_REQ_LOCAL_COMM_ID, c->local_id);
	c->timeout_ms = cep_req_timeout_ms(
		(unsigned)cm_field_get(mad, CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT),
		CEP_PACKET_LIFETIME);
	c->max_retries = (unsigned)cm_field_get(mad, CM_REQ_MAX_CM_RETRIES);
	c->remote_qpn = 0;
	memcpy(c->last_sent, mad, MAD_SIZE);
	c->state = CEP_REQ_SENT;
	cep_send_tracked(c, now_ms);
	return 0;
}

void cep_req_received(struct cep *c, const uint8_t *req, const struct gid *src)
{
	c->remote_gid = *src;
	c->remote_id = (uint32_t)cm_field_get(req, CM_REQ_LOCAL_COMM_ID);
	c->remote_qpn = (uint32_t)cm_field_get(req, CM_REQ_LOCAL_QPN);
	c->tid = cm_mad_tid(req);
	/* The REP is retried as the REQ asks (cm_req_handler()). */
	c->timeout_ms = cep_req_timeout_ms(
		(unsigned)cm_field_get(req, CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT),
		CEP_PACKET_LIFETIME);
	c->max_retries = (unsigned)cm_field_get(req, CM_REQ_MAX_CM_RETRIES);
	c->state = CEP_REQ_RCVD;
}

int cep_send_rep(struct cep *c, uint8_t *mad, uint64_t now_ms)
{
	if (c->state != CEP_REQ_RCVD)
		return -EINVAL;
	cm_mad_set_header(mad, CM_ATTR_REP, c->tid);
	cm_field_set(mad, CM_REP_LOCAL_COMM_ID, c->local_id);
	cm_field_set(mad, CM_REP_REMOTE_COMM_ID, c->remote_id);
	memcpy(c->last_sent, mad, MAD_SIZE);
	c->state = CEP_REP_SENT;
	cep_send_tracked(c, now_ms);
	return 0;
}

int cep_send_rtu(struct cep *c)
{
	uint8_t *m = c->last_sent;

	if (c->state != CEP_REP_RCVD)
		return -EINVAL;
	cm_mad_init(m, CM_ATTR_RTU, c->tid);
	cm_field_set(m, CM_RTU_LOCAL_COMM_ID, c->local_id);
	cm_field_set(m, CM_RTU_REMOTE_COMM_ID, c->remote_id);
	c->state = CEP_ESTABLISHED;
	cep_send_reply(c);
	return 0;
}

int cep_send_rej(struct cep *c, unsigned reason, const uint8_t *ari,
		 unsigned ari_len, const void *pd, size_t pd_len,
		 uint64_t now_ms)
{
	uint8_t *m = c->last_sent;
	unsigned msg;

	switch (c->state) {
	case CEP_REQ_SENT: msg = CM_MSG_RESPONSE_OTHER; break;
	case CEP_REQ_RCVD: msg = CM_MSG_RESPONSE_REQ; break;
	case CEP_REP_SENT: msg = CM_MSG_RESPONSE_OTHER; break;
	case CEP_REP_RCVD: msg = CM_MSG_RESPONSE_REP; break;
	default: return -EINVAL;
	}
	cm_build_rej(m, c->tid, c->local_id, c->remote_id, msg, reason, ari,
		     ari_len);
	if (pd_len > CM_REJ_PRIVATE_DATA_SIZE)
		pd_len = CM_REJ_PRIVATE_DATA_SIZE;
	if (pd_len)
		memcpy(m + CM_REJ_OFF_PRIVATE_DATA, pd, pd_len);
	/* ib_send_cm_rej(): back to idle, except after a REP of ours,
	 * which the peer may still hold. */
	if (c->state == CEP_REP_SENT)
		cep_enter_timewait(c, now_ms);
	else
		cep_reset_to_idle(c);
	c->ops->send(c->ctx, m);
	return 0;
}

int cep_send_dreq(struct cep *c, uint64_t now_ms)
{
	if (c->state != CEP_ESTABLISHED)
		return -EINVAL;
	c->tid = cep_new_tid(c);
	cm_build_dreq(c->last_sent, c->tid, c->local_id, c->remote_id,
		      c->remote_qpn);
	c->state = CEP_DREQ_SENT;
	/* A DREQ is retried on the connection's own timeout. */
	cep_send_tracked(c, now_ms);
	return 0;
}

int cep_send_drep(struct cep *c, uint64_t now_ms)
{
	if (c->state != CEP_DREQ_RCVD)
		return -EINVAL;
	cm_build_drep(c->last_sent, c->tid, c->local_id, c->remote_id);
	cep_send_reply(c);
	cep_enter_timewait(c, now_ms);
	return 0;
}

int cep_send_sidr_req(struct cep *c, uint8_t *mad, const struct gid *remote,
		      unsigned timeout_ms, unsigned max_retries,
		      uint64_t now_ms)
{
	if (c->state != CEP_IDLE)
		return -EINVAL;
	c->remote_gid = *remote;
	c->tid = cep_new_tid(c);
	cm_mad_set_header(mad, CM_ATTR_SIDR_REQ, c->tid);
	cm_field_set(mad, CM_SIDR_REQ_REQUEST_ID, c->local_id);
	c->timeout_ms = timeout_ms;
	c->max_retries = max_retries;
	memcpy(c->last_sent, mad, MAD_SIZE);
	c->state = CEP_SIDR_REQ_SENT;
	cep_send_tracked(c, now_ms);
	return 0;
}

void cep_sidr_req_received(struct cep *c, const uint8_t *req,
			   const struct gid *src)
{
	c->remote_gid = *src;
	c->remote_id = (uint32_t)cm_field_get(req, CM_SIDR_REQ_REQUEST_ID);
	c->tid = cm_mad_tid(req);
	c->state = CEP_SIDR_REQ_RCVD;
}

int cep_send_sidr_rep(struct cep *c, uint8_t *mad, uint64_t now_ms)
{
	if (c->state != CEP_SIDR_REQ_RCVD)
		return -EINVAL;
	cm_mad_set_header(mad, CM_ATTR_SIDR_REP, c->tid);
	cm_field_set(mad, CM_SIDR_REP_REQUEST_ID, c->remote_id);
	memcpy(c->last_sent, mad, MAD_SIZE);
	cep_reset_to_idle(c);
	(void)now_ms;
	c->ops->send(c->ctx, c->last_sent);
	return 0;
}

static int cep_ids_match(const struct cep *c, const uint8_t *mad)
{
	uint32_t local = 0, remote = 0;

	cm_mad_local_comm_id(mad, &local);
	cm_mad_remote_comm_id(mad, &remote);
	return remote == c->local_id &&
	       (c->remote_id == 0 || local == c->remote_id);
}

static void cep_on_rep(struct cep *c, const uint8_t *mad)
{
	uint32_t remote = (uint32_t)cm_field_get(mad, CM_REP_LOCAL_COMM_ID);

	if (cm_field_get(mad, CM_REP_REMOTE_COMM_ID) != c->local_id)
		return;
	if (c->state == CEP_ESTABLISHED && remote == c->remote_id) {
		c->duplicates++;
		c->ops->send(c->ctx, c->last_sent); /* our RTU was lost */
		return;
	}
	if (c->state != CEP_REQ_SENT)
		return;
	c->remote_id = remote;
	c->remote_qpn = (uint32_t)cm_field_get(mad, CM_REP_LOCAL_QPN);
	c->tid = cm_mad_tid(mad);
	c->state = CEP_REP_RCVD;
	c->deadline_ms = 0;
	c->ops->event(c->ctx, CEP_EV_REP, mad);
}

static void cep_on_rej(struct cep *c, const uint8_t *mad, uint64_t now_ms)
{
	if (cm_field_get(mad, CM_REJ_REMOTE_COMM_ID) != c->local_id)
		return;
	switch (c->state) {
	case CEP_REQ_SENT:
	case CEP_REP_RCVD:
	case CEP_REQ_RCVD: cep_reset_to_idle(c); break;
	case CEP_REP_SENT:
	case CEP_ESTABLISHED:
		if (!cep_ids_match(c, mad))
			return;
		cep_enter_timewait(c, now_ms);
		break;
	default: return;
	}
	c->ops->event(c->ctx, CEP_EV_REJ, mad);
}

static void cep_on_dreq(struct cep *c, const uint8_t *mad)
{
	if (!cep_ids_match(c, mad))
		return;
	switch (c->state) {
	case CEP_TIMEWAIT:
		/* Our DREP was lost: answer the same transaction again. */
		c->duplicates++;
		cm_build_drep(c->last_sent, cm_mad_tid(mad), c->local_id,
			      c->remote_id);
		c->ops->send(c->ctx, c->last_sent);
		return;
	case CEP_REP_SENT:
	case CEP_ESTABLISHED:
	case CEP_DREQ_SENT: /* both sides disconnect at once */
		c->tid = cm_mad_tid(mad);
		c->state = CEP_DREQ_RCVD;
		c->deadline_ms = 0;
		c->ops->event(c->ctx, CEP_EV_DREQ, mad);
		return;
	default: return;
	}
}

void cep_input(struct cep *c, const uint8_t *mad, uint64_t now_ms)
{
	switch (cm_mad_attr_id(mad)) {
	case CM_ATTR_REP: cep_on_rep(c, mad); break;
	case CM_ATTR_RTU:
		if (cep_ids_match(c, mad))
			cep_established(c);
		break;
	case CM_ATTR_REJ: cep_on_rej(c, mad, now_ms); break;
	case CM_ATTR_MRA:
		/* The peer needs more time: wait as long as it says, plus
		 * our own timeout, and do not retransmit before. */
		if ((c->state == CEP_REQ_SENT || c->state == CEP_REP_SENT) &&
		    cep_ids_match(c, mad))
			c->deadline_ms =
				now_ms + c->timeout_ms +
				cm_service_timeout_ms((unsigned)cm_field_get(
					mad, CM_MRA_SERVICE_TIMEOUT));
		break;
	case CM_ATTR_DREQ: cep_on_dreq(c, mad); break;
	case CM_ATTR_DREP:
		if (c->state == CEP_DREQ_SENT && cep_ids_match(c, mad)) {
			cep_enter_timewait(c, now_ms);
			c->ops->event(c->ctx, CEP_EV_DREP, mad);
		}
		break;
	case CM_ATTR_SIDR_REP:
		if (c->state == CEP_SIDR_REQ_SENT &&
		    cm_field_get(mad, CM_SIDR_REP_REQUEST_ID) == c->local_id) {
			cep_reset_to_idle(c);
			c->ops->event(c->ctx, CEP_EV_SIDR_REP, mad);
		}
		break;
	default: break;
	}
}

void cep_established(struct cep *c)
{
	if (c->state != CEP_REP_SENT)
		return;
	c->state = CEP_ESTABLISHED;
	c->deadline_ms = 0;
	c->ops->event(c->ctx, CEP_EV_RTU, NULL);
}

void cep_tick(struct cep *c, uint64_t now_ms)
{
	if (c->deadline_ms == 0 || now_ms < c->deadline_ms)
		return;
	switch (c->state) {
	case CEP_REQ_SENT:
	case CEP_REP_SENT:
	case CEP_DREQ_SENT:
	case CEP_SIDR_REQ_SENT:
		if (c->retries < c->max_retries) {
			c->retries++;
			c->retransmissions++;
			c->deadline_ms = now_ms + c->timeout_ms;
			c->ops->send(c->ctx, c->last_sent);
			return;
		}
		if (c->state == CEP_DREQ_SENT) {
			/* No DREP: the connection is gone all the same
			 * (IB_CM_DREQ_ERROR). */
			cep_enter_timewait(c, now_ms);
			c->ops->event(c->ctx, CEP_EV_DREQ_TIMEOUT, NULL);
			return;
		}
		/* cm_process_send_error(): idle, nothing sent. */
		cep_reset_to_idle(c);
		c->ops->event(c->ctx, CEP_EV_TIMEOUT, NULL);
		return;
	case CEP_TIMEWAIT:
		cep_reset_to_idle(c);
		c->ops->event(c->ctx, CEP_EV_TIMEWAIT_EXIT, NULL);
		return;
	default: c->deadline_ms = 0; return;
	}
}

void cep_destroy(struct cep *c, const uint64_t *ca_guid, uint64_t now_ms)
{
	uint8_t ari[CM_REJ_ARI_CA_GUID_LEN];
	uint64_t be;

	/* cm_destroy_id(): the peer hears that this end is gone. */
	switch (c->state) {
	case CEP_REQ_SENT:
		be = htobe64(*ca_guid);
		memcpy(ari, &be, sizeof(ari));
		cep_send_rej(c, CM_REJ_REASON_TIMEOUT, ari, sizeof(ari), NULL,
			     0, now_ms);
		break;
	case CEP_REQ_RCVD:
	case CEP_REP_SENT:
	case CEP_REP_RCVD:
		cep_send_rej(c, CM_REJ_REASON_CONSUMER_DEFINED, NULL, 0, NULL,
			     0, now_ms);
		break;
	case CEP_ESTABLISHED: cep_send_dreq(c, now_ms); break;
	case CEP_DREQ_RCVD: cep_send_drep(c, now_ms); break;
	case CEP_SIDR_REQ_RCVD: {
		uint8_t m[MAD_SIZE];

		memset(m, 0, sizeof(m));
		cm_mad_init(m, CM_ATTR_SIDR_REP, c->tid);
		cm_field_set(m, CM_SIDR_REP_REQUEST_ID, c->remote_id);
		cm_field_set(m, CM_SIDR_REP_STATUS, CM_SIDR_STATUS_REJECT);
		c->ops->send(c->ctx, m);
		break;
	}
	default: break;
	}
	c->state = CEP_IDLE;
	c->deadline_ms = 0;
}
