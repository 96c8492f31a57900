// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The connection table's state machine: the kernel CM's
 * (drivers/infiniband/core/cm.c), seen from the client's side of each
 * connection.  A client's send is taken by the handler of its message
 * (conn_out_*, cm.c's ib_send_cm_*), a peer's by the handler of its own
 * (conn_in_*, cm.c's cm_*_handler); each checks the connection's state
 * first and makes only cm.c's transitions.  What the client cannot say
 * for itself (it is gone, or reused a comm ID), the table says for it as
 * cm_destroy_id() would (conn_abandon).  The entries, IDs and timers
 * these act on are conn_table.c's.
 */
#include "mux/conn_priv.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/cm_mad.h"
#include "common/wire.h"

static const char *const conn_state_names[CONN_STATE_MAX] = {
	[CONN_REQ_SENT] = "req_sent",           [CONN_REQ_RCVD] = "req_rcvd",
	[CONN_REP_SENT] = "rep_sent",           [CONN_REP_RCVD] = "rep_rcvd",
	[CONN_ESTABLISHED] = "established",     [CONN_DREQ_SENT] = "dreq_sent",
	[CONN_DREQ_RCVD] = "dreq_rcvd",         [CONN_TIMEWAIT] = "timewait",
	[CONN_SIDR_REQ_SENT] = "sidr_req_sent",
};

const char *conn_state_name(enum conn_state s)
{
	return (unsigned)s < CONN_STATE_MAX ? conn_state_names[s] : "invalid";
}

static const char *const conn_answer_names[CONN_ANS_MAX] = {
	[CONN_ANS_REJ_NO_LISTENER] = "rej_no_listener",
	[CONN_ANS_SIDR_NO_LISTENER] = "sidr_rep_no_listener",
	[CONN_ANS_DREP_UNKNOWN] = "drep_unknown_comm_id",
	[CONN_ANS_SIDR_REJ_ABANDONED] = "sidr_rep_abandoned",
	[CONN_ANS_REJ_STALE] = "rej_stale_conn",
	[CONN_ANS_DREQ_ABANDONED] = "dreq_abandoned",
	[CONN_ANS_REJ_ABANDONED] = "rej_abandoned",
	[CONN_ANS_DREP_ABANDONED] = "drep_abandoned",
};

const char *conn_answer_name(enum conn_answer a)
{
	return (unsigned)a < CONN_ANS_MAX ? conn_answer_names[a] : "invalid";
}

/* ---- transitions shared by the handlers ------------------------------------ */

/* TimeWait (cm.c's cm_enter_timewait()): entered, or its timer restarted
 * for an entry in it already. */
static void conn_enter_timewait(struct conn_table *ct, struct conn *c,
				uint64_t now_ms)
{
	if (conn_state_of(c) != CONN_TIMEWAIT)
		conn_table_set_state(ct, c, CONN_TIMEWAIT);
	conn_table_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
}

/* ---- speaking for a client (cm.c's cm_destroy_id) ------------------------ */

static void conn_send_answer(struct conn_table *ct, enum conn_answer why,
			     unsigned port, const struct conn_path *path,
			     const uint8_t *mad)
{
	struct conn_emit e = { why, port, path, mad };

	if (ct->emit)
		ct->emit(ct->emit_arg, &e);
}

uint32_t conn_answer_tid(struct conn_table *ct, const uint8_t *request)
{
	return conn_table_echo_tid(ct, (uint32_t)cm_mad_tid(request),
				   cm_mad_sender_id(request));
}

/* What cm.c's own ID would carry: the peer's TID on the passive side
 * (its REQ's, its DREQ's: their comm ID, as cm.c forms them), ours
 * (the host ID) on the active side. */
static uint32_t conn_own_tid(const struct conn_table *ct, const struct conn *c)
{
	switch (conn_state_of(c)) {
	case CONN_REQ_RCVD:
	case CONN_REP_SENT:
	case CONN_DREQ_RCVD: return c->peer_id;
	default: return conn_host_id(ct, c);
	}
}

static void conn_emit_rej(struct conn_table *ct, struct conn *c, unsigned msg,
			  unsigned reason, enum conn_answer why)
{
	uint8_t mad[MAD_SIZE], guid[CM_REJ_ARI_CA_GUID_LEN];
	int timeout = reason == CM_REJ_REASON_TIMEOUT;

	/* A timeout REJ names our CA GUID, by which the peer finds the
	 * REQ it never answered (cm.c's cm_acquire_rejected_id). */
	wire_put64(guid, ct->paths[c->path].ca_guid);
	cm_build_rej(mad, conn_own_tid(ct, c), conn_host_id(ct, c), c->peer_id,
		     msg, reason, timeout ? guid : NULL,
		     timeout ? sizeof(guid) : 0);
	conn_send_answer(ct, why, c->port, conn_path_of(ct, c), mad);
}

/*
 * The client no longer stands behind this connection (it is gone, or it
 * reused the comm ID): tell the peer what cm_destroy_id() would, and
 * leave the entry in TimeWait, where the peer's last messages are
 * absorbed.  Returns whether cm.c's own ID would linger in TimeWait after
 * the destroy (REP_SENT, and what a DREQ began): its timewait_info keeps
 * the peer's comm ID from being reused that long.  cm.c sends each of
 * these once: its DREQ is cancelled as soon as sent (DREQ_SENT, then
 * cm_enter_timewait()).
 */
static int conn_abandon(struct conn_table *ct, struct conn *c, uint64_t now_ms)
{
	uint8_t mad[MAD_SIZE];
	int lingers = 0;

	if (conn_kind_of(c) == CK_SIDR) {
		/* A peer's SIDR_REQ the client has not answered: cm.c's
		 * cm_destroy_id() sends SIDR_REP REJECT (cm_reject_sidr_req()),
		 * so the peer need not retry.  Its service ID is the
		 * listener's there; no record keeps it here, and no CM
		 * matches a SIDR_REP by it (cm_sidr_rep_handler()). */
		if (conn_state_of(c) == CONN_REQ_RCVD && c->peer_id) {
			cm_build_sidr_rep(mad, conn_own_tid(ct, c), c->peer_id,
					  CM_SIDR_STATUS_REJECT, 0);
			conn_send_answer(ct, CONN_ANS_SIDR_REJ_ABANDONED,
					 c->port, conn_path_of(ct, c), mad);
		}
		return 0;
	}
	switch (conn_state_of(c)) {
	case CONN_REQ_SENT:
		conn_emit_rej(ct, c, CM_MSG_RESPONSE_REQ, CM_REJ_REASON_TIMEOUT,
			      CONN_ANS_REJ_ABANDONED);
		break;
	case CONN_REQ_RCVD:
		conn_emit_rej(ct, c, CM_MSG_RESPONSE_REQ,
			      CM_REJ_REASON_CONSUMER_DEFINED,
			      CONN_ANS_REJ_ABANDONED);
		break;
	case CONN_REP_SENT:
		conn_emit_rej(ct, c, CM_MSG_RESPONSE_OTHER,
			      CM_REJ_REASON_CONSUMER_DEFINED,
			      CONN_ANS_REJ_ABANDONED);
		lingers = 1;
		break;
	case CONN_REP_RCVD:
		conn_emit_rej(ct, c, CM_MSG_RESPONSE_REP,
			      CM_REJ_REASON_CONSUMER_DEFINED,
			      CONN_ANS_REJ_ABANDONED);
		break;
	case CONN_ESTABLISHED:
		cm_build_dreq(mad, conn_own_tid(ct, c), conn_host_id(ct, c),
			      c->peer_id, conn_peer_qpn(c));
		conn_send_answer(ct, CONN_ANS_DREQ_ABANDONED, c->port,
				 conn_path_of(ct, c), mad);
		lingers = 1;
		break;
	case CONN_DREQ_RCVD:
		cm_build_drep(mad, conn_own_tid(ct, c), conn_host_id(ct, c),
			      c->peer_id);
		conn_send_answer(ct, CONN_ANS_DREP_ABANDONED, c->port,
				 conn_path_of(ct, c), mad);
		lingers = 1;
		break;
	case CONN_DREQ_SENT: lingers = 1; break; /* the client's DREQ: quiet */
	case CONN_TIMEWAIT:
		/* After a teardown; one a REJ ended, cm.c resets to idle. */
		return conn_last_sent(c) == CM_ATTR_DREQ ||
		       conn_last_sent(c) == CM_ATTR_DREP;
	default: return 0;
	}
	conn_enter_timewait(ct, c, now_ms);
	return lingers;
}

/* The guest reuses a comm ID: the old connection is abandoned and stays
 * only to absorb its peer's last messages, out of the guest's sight. */
static void conn_retire(struct conn_table *ct, struct conn *c, uint64_t now_ms)
{
	(void)conn_abandon(ct, c, now_ms);
	conn_table_guest_unlink(ct, c);
	c->flags |= CF_ORPHAN;
	if (c->timer == TC_NONE)
		conn_table_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
}

/* ---- outbound: the client's CM sends (cm.c's ib_send_cm_*) ---------------- */

static int conn_same_peer(const struct conn_table *ct, const struct conn *c,
			  uint32_t peer_id, const struct conn_path *path)
{
	return c->peer_id == peer_id &&
	       gid_cmp(&conn_path_of(ct, c)->peer_gid, &path->peer_gid) == 0;
}

/* The record a peer's REQ left for this client that the client has not
 * answered yet: what its REP, MRA or REJ may answer, and nothing else
 * (otherwise a VM could accept or reject a connection meant for another). */
static struct conn *conn_unanswered_req(struct conn_table *ct, uint64_t client,
					unsigned port, uint32_t peer_id,
					const struct gid *peer_gid)
{
	struct conn *r = conn_table_peer_find(ct, port, peer_id, peer_gid);

	if (r == NULL || conn_client_id(ct, r) != client ||
	    conn_state_of(r) != CONN_REQ_RCVD || (r->flags & CF_GUESTED))
		return NULL;
	return r;
}

/* The client's reply (REP, MRA, REJ) to a peer's REQ: its connection if
 * it has one with that peer, else the peer record the REQ left. */
static struct conn *conn_for_reply(struct conn_table *ct, uint64_t client,
				   unsigned port, uint32_t guest_id,
				   uint32_t peer_id,
				   const struct conn_path *path,
				   uint64_t now_ms, int *err)
{
	struct conn *c = conn_table_guest_find(ct, CK_COMM, client, port,
					       guest_id),
		    *r;
	struct conn_client *cc;

	if (c && conn_same_peer(ct, c, peer_id, path))
		return c;
	r = conn_unanswered_req(ct, client, port, peer_id, &path->peer_gid);
	if (r == NULL) {
		*err = -ENOENT;
		return NULL;
	}
	/* Answering it makes the connection the client's own: from here
	 * on its quota counts it. */
	cc = conn_table_client_get(ct, client);
	if (cc == NULL || conn_table_quota_full(ct, cc)) {
		*err = -ENOSPC;
		return NULL;
	}
	if (c)
		conn_retire(ct, c, now_ms); /* the guest reused the ID */
	conn_table_bind(ct, r, guest_id);
	conn_table_peer_rec_drop(ct, r);
	r->flags |= CF_CHARGED;
	cc->charged++;
	return r;
}

static int conn_out_req(struct conn_table *ct, uint64_t client, unsigned port,
			uint8_t *mad, const struct conn_path *path,
			uint64_t now_ms, struct conn **out)
{
	uint32_t guest_id = cm_mad_sender_id(mad);
	struct conn *c;
	int err = 0;

	if (guest_id == 0)
		return -EINVAL;
	c = conn_table_guest_find(ct, CK_COMM, client, port, guest_id);
	/* Its MAD layer's retransmission, crossing the peer's REP (sent
	 * before the REP reached the guest's CM): on its way as it is, as
	 * cm.c's would be, the connection unchanged. */
	if (c && conn_state_of(c) != CONN_REQ_SENT &&
	    conn_table_tid_repeats(c, mad) &&
	    gid_cmp(&conn_path_of(ct, c)->peer_gid, &path->peer_gid) == 0) {
		*out = c;
		return 0;
	}
	/* The same REQ again is a retransmission; anything else with this
	 * ID is a new connection (a rebooted guest, a wrapped counter). */
	if (c == NULL || conn_state_of(c) != CONN_REQ_SENT ||
	    gid_cmp(&conn_path_of(ct, c)->peer_gid, &path->peer_gid) != 0) {
		if (c)
			conn_retire(ct, c, now_ms);
		c = conn_table_create_bound(ct, CK_COMM, client, port, guest_id,
					    CONN_REQ_SENT, path,
					    cm_field_get(mad,
							 CM_REQ_LOCAL_CA_GUID),
					    &err);
		if (c == NULL)
			return err;
	}
	conn_table_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
	*out = c;
	return 0;
}

/* The timer class of a REP's wait for its RTU: cm.c sends the REP
 * max_cm_retries more times, each after the REQ's Local CM Response
 * Timeout.  Twice that (or more: classes are powers of two), so that the
 * guest's CM gives up first; at least a second, for the scheduling
 * between the guest's clock and ours. */
static int conn_rep_window(const struct conn *c)
{
	unsigned k = conn_timing_log2_ms(c) + 1, tries = 1;

	while (tries < conn_timing_retries(c) + 1u) {
		tries <<= 1;
		k++;
	}
	if (k < 10)
		k = 10;
	if (k > TC_POW_N - 1)
		k = TC_POW_N - 1;
	return TC_POW0 + (int)k;
}

/* The client's REP: it accepts the peer's REQ (ib_send_cm_rep). */
static int conn_out_rep(struct conn_table *ct, struct conn *c,
			const uint8_t *mad, uint64_t now_ms)
{
	switch (conn_state_of(c)) {
	case CONN_REQ_RCVD:
		conn_table_set_state(ct, c, CONN_REP_SENT);
		/* Kept until RTU, DREQ or REJ, or until the guest's CM can
		 * no longer be waiting: then it has given up (cm.c resets to
		 * idle and tells the peer nothing) or gone established on
		 * its first data with every RTU lost. */
		conn_table_timer_arm(ct, c, conn_rep_window(c), now_ms);
		return 0;
	case CONN_REP_SENT: return 0; /* its retransmission */
	default:
		/* A retransmission that crossed the peer's RTU (or what
		 * followed it) changes nothing. */
		return conn_table_tid_repeats(c, mad) ? 0 : -EPROTO;
	}
}

/* The client's MRA: it needs more time for the REQ or REP it was sent
 * (ib_send_cm_mra); the handshake waits as long as it asks. */
static int conn_out_mra(struct conn_table *ct, struct conn *c,
			const uint8_t *mad, uint64_t now_ms)
{
	switch (conn_state_of(c)) {
	case CONN_REQ_RCVD:
	case CONN_REP_RCVD:
		conn_table_timer_arm(
			ct, c,
			TC_MRA0 +
				(int)cm_field_get(mad, CM_MRA_SERVICE_TIMEOUT),
			now_ms);
		return 0;
	case CONN_ESTABLISHED: return 0;
	default: return -EPROTO;
	}
}

/* The client's REJ of a connection in its handshake (ib_send_cm_rej). */
static int conn_out_rej(struct conn_table *ct, struct conn *c, uint64_t now_ms)
{
	switch (conn_state_of(c)) {
	case CONN_REQ_SENT:
	case CONN_REQ_RCVD:
	case CONN_REP_SENT:
	case CONN_REP_RCVD:
	case CONN_TIMEWAIT: /* cm.c's REJ to a stale REQ */
		conn_enter_timewait(ct, c, now_ms);
		return 0;
	default: return -EPROTO;
	}
}

/* A REJ with no comm ID of the client's: it rejects a REQ before
 * replying.  Nothing to map, but it must be a REQ this client received;
 * the record goes, as cm.c resets to idle.  1: sent as it is. */
static int conn_out_rej_unnamed(struct conn_table *ct, uint64_t client,
				unsigned port, uint8_t *mad,
				const struct conn_path *path)
{
	struct conn *c = conn_unanswered_req(ct, client, port,
					     cm_mad_receiver_id(mad),
					     &path->peer_gid);

	if (c == NULL)
		return -ENOENT;
	conn_table_tid_answer(ct, mad, c->peer_id);
	conn_table_remove(ct, c);
	return 1;
}

/* REP, MRA, REJ: the client's answer to a peer's REQ or REP. */
static int conn_out_reply(struct conn_table *ct, uint64_t client, unsigned port,
			  uint8_t *mad, const struct conn_path *path,
			  uint64_t now_ms, struct conn **out)
{
	uint16_t attr = cm_mad_attr_id(mad);
	uint32_t guest_id = cm_mad_sender_id(mad);
	struct conn *c;
	int err = 0;

	if (guest_id == 0)
		return attr == CM_ATTR_REJ
			       ? conn_out_rej_unnamed(ct, client, port, mad,
						      path)
			       : -EINVAL;
	c = conn_for_reply(ct, client, port, guest_id, cm_mad_receiver_id(mad),
			   path, now_ms, &err);
	if (c == NULL)
		return err;
	switch (attr) {
	case CM_ATTR_REP: err = conn_out_rep(ct, c, mad, now_ms); break;
	case CM_ATTR_MRA: err = conn_out_mra(ct, c, mad, now_ms); break;
	default: err = conn_out_rej(ct, c, now_ms); break;
	}
	if (err == 0)
		*out = c;
	return err;
}

/* The client's RTU: its REP arrived (ib_send_cm_rtu). */
static int conn_out_rtu(struct conn_table *ct, struct conn *c)
{
	switch (conn_state_of(c)) {
	case CONN_REP_RCVD:
		conn_table_set_state(ct, c, CONN_ESTABLISHED);
		conn_table_timer_stop(ct, c);
		return 0;
	case CONN_ESTABLISHED:
		return 0; /* answering a duplicate REP */
	/* The peer's DREQ reached the guest in REP_RCVD, where cm.c drops
	 * it; the guest goes on, and answers the DREQ's retransmission. */
	case CONN_DREQ_RCVD: return 0;
	default: return -EPROTO;
	}
}

/* The client's DREQ (ib_send_cm_dreq). */
static int conn_out_dreq(struct conn_table *ct, struct conn *c, uint64_t now_ms)
{
	switch (conn_state_of(c)) {
	case CONN_DREQ_RCVD:
		/* The peer's DREQ is still on its way to the guest: both
		 * sides disconnect at once, which cm.c takes. */
		return 0;
	case CONN_ESTABLISHED:
	case CONN_REP_SENT:
	case CONN_DREQ_SENT:
	/* In REP_RCVD the guest's cm.c went established when it posted
	 * its RTU, which did not reach us (refused, or lost when the
	 * daemon restarted); the peer, in REP_SENT, takes a DREQ
	 * (cm_dreq_handler()). */
	case CONN_REP_RCVD:
		conn_table_set_state(ct, c, CONN_DREQ_SENT);
		conn_table_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		return 0;
	default: return -EPROTO;
	}
}

/* The client's DREP (ib_send_cm_drep). */
static int conn_out_drep(struct conn_table *ct, struct conn *c, uint64_t now_ms)
{
	switch (conn_state_of(c)) {
	case CONN_DREQ_RCVD:
	case CONN_TIMEWAIT: conn_enter_timewait(ct, c, now_ms); return 0;
	default: return -EPROTO;
	}
}

/* The client's LAP or APR: only on an established connection. */
static int conn_out_lap_apr(const struct conn *c)
{
	return conn_state_of(c) == CONN_ESTABLISHED ? 0 : -EPROTO;
}

/* RTU, DREQ, DREP, LAP, APR: on a connection of the client's, in a state
 * where cm.c would send it. */
static int conn_out_conn(struct conn_table *ct, uint64_t client, unsigned port,
			 uint8_t *mad, uint64_t now_ms, struct conn **out)
{
	uint32_t guest_id = cm_mad_sender_id(mad);
	struct conn *c;
	int err;

	c = guest_id
		    ? conn_table_guest_find(ct, CK_COMM, client, port, guest_id)
		    : NULL;
	if (c == NULL || c->peer_id == 0 ||
	    cm_mad_receiver_id(mad) != c->peer_id)
		return -ENOENT;
	switch (cm_mad_attr_id(mad)) {
	case CM_ATTR_RTU: err = conn_out_rtu(ct, c); break;
	case CM_ATTR_DREQ: err = conn_out_dreq(ct, c, now_ms); break;
	case CM_ATTR_DREP: err = conn_out_drep(ct, c, now_ms); break;
	default: err = conn_out_lap_apr(c); break;
	}
	if (err == 0)
		*out = c;
	return err;
}

static int conn_out_sidr_req(struct conn_table *ct, uint64_t client,
			     unsigned port, uint8_t *mad,
			     const struct conn_path *path, uint64_t now_ms,
			     struct conn **out)
{
	uint32_t guest_id = cm_mad_sender_id(mad);
	struct conn *c;
	int err = 0;

	if (guest_id == 0)
		return -EINVAL;
	c = conn_table_guest_find(ct, CK_SIDR, client, port, guest_id);
	if (c && conn_state_of(c) != CONN_SIDR_REQ_SENT) {
		conn_retire(ct, c, now_ms);
		c = NULL;
	}
	if (c == NULL)
		c = conn_table_create_bound(ct, CK_SIDR, client, port, guest_id,
					    CONN_SIDR_REQ_SENT, path, 0, &err);
	if (c == NULL)
		return err;
	conn_table_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
	*out = c;
	return 0;
}

int conn_outbound(struct conn_table *ct, uint64_t client, unsigned port,
		  uint8_t *mad, const struct conn_path *path, uint64_t now_ms,
		  unsigned max_conns)
{
	struct conn *c = NULL;
	int rc;

	conn_table_clock(ct, now_ms);
	conn_table_timewait_trim(ct);
	ct->call_max = max_conns;
	switch (cm_mad_attr_id(mad)) {
	case CM_ATTR_REQ:
		rc = conn_out_req(ct, client, port, mad, path, now_ms, &c);
		break;
	case CM_ATTR_REP:
	case CM_ATTR_MRA:
	case CM_ATTR_REJ:
		rc = conn_out_reply(ct, client, port, mad, path, now_ms, &c);
		break;
	case CM_ATTR_RTU:
	case CM_ATTR_DREQ:
	case CM_ATTR_DREP:
	case CM_ATTR_LAP:
	case CM_ATTR_APR:
		rc = conn_out_conn(ct, client, port, mad, now_ms, &c);
		break;
	case CM_ATTR_SIDR_REQ:
		rc = conn_out_sidr_req(ct, client, port, mad, path, now_ms, &c);
		break;
	default: /* SIDR_REP: it must answer a SIDR_REQ received */
		c = conn_table_peer_find_kind(ct, CK_SIDR, port,
					      cm_mad_receiver_id(mad),
					      &path->peer_gid);
		if (c == NULL || conn_client_id(ct, c) != client) {
			rc = -ENOENT;
			break;
		}
		conn_table_tid_answer(ct, mad, c->peer_id);
		conn_table_remove(ct, c);
		rc = 1;
		break;
	}
	ct->call_max = 0;
	if (rc == 1)
		return 0;
	if (rc)
		return rc;
	/* From here on the MAD carries the host ID, not the guest's. */
	cm_mad_set_sender_id(mad, conn_host_id(ct, c));
	conn_table_tid_out(c, ct, mad);
	return 0;
}

uint8_t conn_reply_gid_type(struct conn_table *ct, unsigned port,
			    const uint8_t *mad)
{
	uint16_t attr = cm_mad_attr_id(mad);
	struct conn *c;

	if (attr == CM_ATTR_SIDR_REQ || attr == CM_ATTR_SIDR_REP)
		return 0;
	c = conn_table_host_find(ct, CK_COMM, port, cm_mad_sender_id(mad));
	return c ? conn_path_of(ct, c)->gid_type : 0;
}

/* ---- inbound: the peer's messages (cm.c's cm_*_handler) ------------------ */

/* Whether the Local Comm ID of a peer's message names the peer this
 * connection knows (cm_acquire_id(): 0 only where the peer's ID cannot
 * be known yet). */
static int conn_peer_matches(const struct conn *c, const uint8_t *mad)
{
	uint16_t attr = cm_mad_attr_id(mad);
	uint32_t sender = cm_mad_sender_id(mad);
	unsigned about = CM_MSG_RESPONSE_OTHER;

	if (attr == CM_ATTR_REJ)
		about = (unsigned)cm_field_get(mad, CM_REJ_MESSAGE_REJECTED);
	else if (attr == CM_ATTR_MRA)
		about = (unsigned)cm_field_get(mad, CM_MRA_MESSAGE_MRAED);
	/* A REJ of the REQ: cm.c takes it only while the connection has
	 * no remote ID (cm_acquire_id(id, 0)), before a REP gave it one. */
	if (attr == CM_ATTR_REJ && about == CM_MSG_RESPONSE_REQ)
		return c->peer_id == 0;
	if (about == CM_MSG_RESPONSE_REQ || attr == CM_ATTR_REP)
		return c->peer_id == 0 || sender == c->peer_id;
	return c->peer_id != 0 && sender == c->peer_id;
}

/* The peer's REP to the client's REQ (cm_rep_handler). */
static int conn_in_rep(struct conn_table *ct, struct conn *c,
		       const uint8_t *mad, uint64_t now_ms)
{
	switch (conn_state_of(c)) {
	case CONN_REQ_SENT:
		conn_table_peer_set(ct, c, cm_mad_sender_id(mad));
		conn_set_peer_qpn(c, (uint32_t)cm_field_get(mad,
							    CM_REP_LOCAL_QPN));
		conn_table_set_state(ct, c, CONN_REP_RCVD);
		conn_table_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		return 0;
	case CONN_REP_RCVD:
	case CONN_ESTABLISHED:
		/* A duplicate: the guest's CM answers it again (RTU). */
		return 0;
	default: return -EPROTO;
	}
}

static int conn_timer_is_mra(const struct conn *c)
{
	return c->timer >= TC_MRA0 && c->timer < TC_MRA0 + 32;
}

/* The peer's MRA (cm_mra_handler): it needs more time for our REQ or our
 * REP, and the handshake waits as long as it asks, once per message as
 * cm.c does (MRA_REQ_RCVD, MRA_REP_RCVD: another is a duplicate). */
static int conn_in_mra(struct conn_table *ct, struct conn *c,
		       const uint8_t *mad, uint64_t now_ms)
{
	unsigned mraed = (unsigned)cm_field_get(mad, CM_MRA_MESSAGE_MRAED);

	switch (conn_state_of(c)) {
	case CONN_REQ_SENT:
	case CONN_REP_SENT:
		if (mraed != (conn_state_of(c) == CONN_REQ_SENT
				      ? CM_MSG_RESPONSE_REQ
				      : CM_MSG_RESPONSE_REP))
			return -EPROTO;
		if (!conn_timer_is_mra(c))
			conn_table_timer_arm(
				ct, c,
				TC_MRA0 + (int)cm_field_get(
						  mad, CM_MRA_SERVICE_TIMEOUT),
				now_ms);
		return 0;
	case CONN_ESTABLISHED: /* of a LAP */
		return mraed == CM_MSG_RESPONSE_OTHER ? 0 : -EPROTO;
	default: return -EPROTO;
	}
}

/* The peer's RTU to the client's REP (cm_rtu_handler). */
static int conn_in_rtu(struct conn_table *ct, struct conn *c)
{
	switch (conn_state_of(c)) {
	case CONN_REP_SENT:
		conn_table_set_state(ct, c, CONN_ESTABLISHED);
		conn_table_timer_stop(ct, c);
		return 0;
	default: return -EPROTO;
	}
}

/* The peer's DREQ (cm_dreq_handler). */
static int conn_in_dreq(struct conn_table *ct, struct conn *c, uint64_t now_ms)
{
	switch (conn_state_of(c)) {
	case CONN_ESTABLISHED:
	case CONN_REP_SENT:
	case CONN_DREQ_SENT:
	/* In REP_RCVD the guest may be established already, its RTU
	 * refused or lost (conn_out_dreq()); its cm.c decides. */
	case CONN_REP_RCVD:
		conn_table_set_state(ct, c, CONN_DREQ_RCVD);
		/* cm.c's DREQ_RCVD has no timer: it lasts until the guest
		 * answers or goes, the connection on its quota meanwhile. */
		conn_table_timer_stop(ct, c);
		return 0;
	case CONN_DREQ_RCVD: return 0;
	case CONN_TIMEWAIT: /* our DREP was lost: the guest answers */
		conn_table_timer_arm(ct, c, TC_TIMEWAIT, now_ms);
		return 0;
	default: return -EPROTO;
	}
}

/* The peer's DREP (cm_drep_handler); in DREQ_RCVD too: both sides sent
 * a DREQ at once. */
static int conn_in_drep(struct conn_table *ct, struct conn *c, uint64_t now_ms)
{
	switch (conn_state_of(c)) {
	case CONN_DREQ_SENT:
	case CONN_DREQ_RCVD: conn_enter_timewait(ct, c, now_ms); return 0;
	default: return -EPROTO;
	}
}

/* The peer's REJ (cm_rej_handler). */
static int conn_in_rej(struct conn_table *ct, struct conn *c, uint64_t now_ms)
{
	switch (conn_state_of(c)) {
	case CONN_REQ_SENT:
	case CONN_REQ_RCVD:
	case CONN_REP_SENT:
	case CONN_REP_RCVD:
	case CONN_ESTABLISHED:
	case CONN_DREQ_SENT: conn_enter_timewait(ct, c, now_ms); return 0;
	default: return -EPROTO;
	}
}

/* The peer's LAP or APR: only on an established connection. */
static int conn_in_lap_apr(const struct conn *c)
{
	return conn_state_of(c) == CONN_ESTABLISHED ? 0 : -EPROTO;
}

/* A peer's message in the connection's state: 0 (deliver) or -EPROTO. */
static int conn_in_transition(struct conn_table *ct, struct conn *c,
			      const uint8_t *mad, uint64_t now_ms)
{
	switch (cm_mad_attr_id(mad)) {
	case CM_ATTR_REP: return conn_in_rep(ct, c, mad, now_ms);
	case CM_ATTR_MRA: return conn_in_mra(ct, c, mad, now_ms);
	case CM_ATTR_RTU: return conn_in_rtu(ct, c);
	case CM_ATTR_DREQ: return conn_in_dreq(ct, c, now_ms);
	case CM_ATTR_DREP: return conn_in_drep(ct, c, now_ms);
	case CM_ATTR_REJ: return conn_in_rej(ct, c, now_ms);
	default: return conn_in_lap_apr(c);
	}
}

static void conn_answer_drep(struct conn_table *ct, enum conn_answer why,
			     unsigned port, const uint8_t *dreq,
			     const struct conn_path *path)
{
	uint8_t mad[MAD_SIZE];

	/* cm_issue_drep(): the DREQ's IDs swapped. */
	cm_build_drep(mad, conn_answer_tid(ct, dreq), cm_mad_receiver_id(dreq),
		      cm_mad_sender_id(dreq));
	conn_send_answer(ct, why, port, path, mad);
}

static int conn_in_sidr_rep(struct conn_table *ct, unsigned port, uint8_t *mad,
			    const struct conn_path *path, uint64_t now_ms,
			    uint64_t *client)
{
	struct conn *c = conn_table_host_find(ct, CK_SIDR, port,
					      cm_mad_receiver_id(mad));

	if (c == NULL)
		return -ENOENT;
	if (gid_cmp(&conn_path_of(ct, c)->peer_gid, &path->peer_gid) != 0)
		return -EPERM;
	if (ct->cl[c->owner].away)
		return -EHOSTDOWN;
	if ((c->flags & CF_ORPHAN))
		return -ESTALE;
	if (conn_state_of(c) != CONN_SIDR_REQ_SENT)
		return -EPROTO;
	conn_enter_timewait(ct, c, now_ms);
	*client = conn_client_id(ct, c);
	cm_mad_set_receiver_id(mad, c->guest_id);
	conn_table_tid_in(ct, c, mad);
	return 0;
}

/* A REJ without our comm ID: the active side gave up on its REQ before
 * a REP reached it (a timeout REJ, cm_destroy_id() in REQ_SENT), while
 * the guest had not answered yet or its REP was on the way.  cm.c finds
 * only a timeout REJ so (cm_acquire_rejected_id(), by the sender's comm
 * ID and CA GUID; here its comm ID and GID). */
static int conn_in_rej_unnamed(struct conn_table *ct, unsigned port,
			       uint8_t *mad, const struct conn_path *path,
			       uint64_t now_ms, uint64_t *client)
{
	struct conn *c;

	if (cm_field_get(mad, CM_REJ_REASON) != CM_REJ_REASON_TIMEOUT)
		return -EBADR;
	c = conn_table_peer_find(ct, port, cm_mad_sender_id(mad),
				 &path->peer_gid);
	if (c == NULL)
		return -EBADR;
	if (ct->cl[c->owner].away)
		return -EHOSTDOWN;
	if ((c->flags & CF_ORPHAN))
		return -ESTALE;
	if (conn_state_of(c) != CONN_REQ_RCVD &&
	    conn_state_of(c) != CONN_REP_SENT)
		return -EPROTO;
	*client = conn_client_id(ct, c);
	if (!(c->flags & CF_GUESTED)) {
		conn_table_remove(ct, c); /* cm.c: reset to idle */
		return 0;
	}
	cm_mad_set_receiver_id(mad, c->guest_id);
	conn_enter_timewait(ct, c, now_ms);
	return 0;
}

int conn_inbound(struct conn_table *ct, unsigned port, uint8_t *mad,
		 const struct conn_path *path, uint64_t now_ms,
		 uint64_t *client)
{
	uint16_t attr = cm_mad_attr_id(mad);
	uint32_t host_id = cm_mad_receiver_id(mad);
	struct conn *c;
	int rc;

	conn_table_clock(ct, now_ms);
	conn_table_timewait_trim(ct);
	if (attr == CM_ATTR_SIDR_REP)
		return conn_in_sidr_rep(ct, port, mad, path, now_ms, client);
	if (host_id == 0) {
		if (attr != CM_ATTR_REJ)
			return -EBADR;
		return conn_in_rej_unnamed(ct, port, mad, path, now_ms, client);
	}
	c = conn_table_host_find(ct, CK_COMM, port, host_id);
	if (c == NULL) {
		if (attr == CM_ATTR_DREQ)
			conn_answer_drep(ct, CONN_ANS_DREP_UNKNOWN, port, mad,
					 path);
		return -ENOENT;
	}
	if (gid_cmp(&conn_path_of(ct, c)->peer_gid, &path->peer_gid) != 0 ||
	    !conn_peer_matches(c, mad)) {
		/* cm.c finds no connection by these IDs (cm_acquire_id())
		 * and answers as for an unknown one (cm_issue_drep()). */
		if (attr == CM_ATTR_DREQ)
			conn_answer_drep(ct, CONN_ANS_DREP_UNKNOWN, port, mad,
					 path);
		return -EPERM;
	}
	/* Its owner has not come back since a restart: the entry stays as
	 * it was (the peer retransmits), until it does or its grace ends. */
	if (ct->cl[c->owner].away)
		return -EHOSTDOWN;
	if ((c->flags & CF_ORPHAN)) {
		if (attr == CM_ATTR_DREQ) {
			conn_answer_drep(ct, CONN_ANS_DREP_ABANDONED, port, mad,
					 conn_path_of(ct, c));
			conn_enter_timewait(ct, c, now_ms);
		} else if ((attr == CM_ATTR_DREP || attr == CM_ATTR_REJ) &&
			   conn_state_of(c) != CONN_TIMEWAIT) {
			conn_enter_timewait(ct, c, now_ms);
		}
		return -ESTALE;
	}
	rc = conn_in_transition(ct, c, mad, now_ms);
	if (rc)
		return rc;
	*client = conn_client_id(ct, c);
	cm_mad_set_receiver_id(mad, c->guest_id);
	conn_table_tid_in(ct, c, mad);
	return 0;
}

/* The record of a peer's REQ or SIDR_REQ for client, charged to nobody.
 * A full table loses the record, not the REQ (the client cannot answer
 * it, and the peer times out, as with a lost MAD). */
static struct conn *conn_peer_record_new(struct conn_table *ct,
					 enum conn_kind kind, uint64_t client,
					 unsigned port, uint32_t peer_id,
					 uint32_t peer_qpn,
					 const struct conn_path *path,
					 uint64_t now_ms)
{
	struct conn *c;
	int err = 0;

	if (conn_table_peer_rec_take(ct, port, &path->peer_gid, client) < 0)
		return NULL;
	c = conn_table_entry_new(ct, kind, client, port, CONN_REQ_RCVD, path, 0,
				 0, &err);
	if (c == NULL) {
		conn_table_peer_rec_undo(ct, port, &path->peer_gid);
		return NULL;
	}
	c->flags |= CF_PEER_REC;
	conn_client_of(ct, c)->peer_recs++;
	c->peer_qpn = peer_qpn & CONN_QPN_MASK;
	conn_table_peer_set(ct, c, peer_id);
	conn_table_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
	ct->noted = conn_slot_word(ct, c) + 1;
	return c;
}

uint32_t conn_take_noted(struct conn_table *ct)
{
	uint32_t token = ct->noted;

	ct->noted = 0;
	return token;
}

void conn_forget_noted(struct conn_table *ct, uint32_t token, uint64_t client)
{
	uint32_t idx = (token - 1) & CONN_IDX_MASK;
	struct conn *c;

	if (token == 0 || idx >= ct->hwm)
		return;
	c = conn_at(ct, idx);
	if ((c->flags & CF_LIVE) && (c->flags & CF_PEER_REC) &&
	    conn_gen(c) == (token - 1) >> CONN_IDX_BITS &&
	    conn_client_id(ct, c) == client &&
	    conn_state_of(c) == CONN_REQ_RCVD)
		conn_table_remove(ct, c);
}

int conn_note_req(struct conn_table *ct, uint64_t client, unsigned port,
		  const uint8_t *mad, const struct conn_path *path,
		  uint64_t now_ms)
{
	uint32_t peer_id = cm_mad_sender_id(mad);
	uint8_t rej[MAD_SIZE];
	struct conn *c;

	conn_table_clock(ct, now_ms);
	conn_table_timewait_trim(ct);
	if (peer_id == 0)
		return 0; /* nothing to key a record by; the guest decides */
	c = conn_table_peer_find(ct, port, peer_id, &path->peer_gid);
	if (c && conn_state_of(c) == CONN_TIMEWAIT && !(c->flags & CF_ORPHAN) &&
	    conn_last_sent(c) == CM_ATTR_REJ) {
		/* The client rejected that REQ: cm.c reset its ID to idle
		 * and keeps no TimeWait, so the peer's REQ again is a new
		 * connection request (conformance case 41). */
		conn_table_remove(ct, c);
		c = NULL;
	}
	if (c && conn_state_of(c) == CONN_TIMEWAIT) {
		/* The peer reuses the comm ID of a connection still in
		 * TimeWait: cm.c's cm_dup_req_handler() rejects it. */
		/* As cm_issue_rej() does: the REQ's sender can only match
		 * a REJ of its REQ (it knows no ID of ours yet). */
		cm_build_rej(rej, conn_answer_tid(ct, mad), 0, peer_id,
			     CM_MSG_RESPONSE_REQ, CM_REJ_REASON_STALE_CONN,
			     NULL, 0);
		conn_send_answer(ct, CONN_ANS_REJ_STALE, port,
				 conn_path_of(ct, c), rej);
		return -ESTALE;
	}
	if (c) {
		/* A retransmitted REQ: keep the record as long; the guest's
		 * CM decides what a duplicate deserves. */
		if (conn_client_id(ct, c) == client &&
		    conn_state_of(c) == CONN_REQ_RCVD &&
		    c->timer == TC_HANDSHAKE)
			conn_table_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		return 0;
	}
	c = conn_peer_record_new(ct, CK_COMM, client, port, peer_id,
				 (uint32_t)cm_field_get(mad, CM_REQ_LOCAL_QPN),
				 path, now_ms);
	/* The timing the guest's CM will give its REP (cm_req_handler()). */
	if (c)
		conn_set_timing(c,
				(unsigned)cm_field_get(
					mad, CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT),
				(unsigned)cm_field_get(mad,
						       CM_REQ_MAX_CM_RETRIES));
	return 0;
}

int conn_note_sidr_req(struct conn_table *ct, uint64_t client, unsigned port,
		       const uint8_t *mad, const struct conn_path *path,
		       uint64_t now_ms)
{
	uint32_t peer_id = cm_mad_sender_id(mad);
	struct conn *c;

	conn_table_clock(ct, now_ms);
	conn_table_timewait_trim(ct);
	if (peer_id == 0)
		return 0;
	c = conn_table_peer_find_kind(ct, CK_SIDR, port, peer_id,
				      &path->peer_gid);
	if (c) {
		if (conn_client_id(ct, c) == client)
			conn_table_timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		return 0;
	}
	conn_peer_record_new(ct, CK_SIDR, client, port, peer_id, 0, path,
			     now_ms);
	return 0;
}

int conn_destination(struct conn_table *ct, uint64_t client, unsigned port,
		     const uint8_t *mad, struct gid *dst)
{
	uint16_t attr = cm_mad_attr_id(mad);
	uint32_t sender = cm_mad_sender_id(mad);
	uint32_t receiver = cm_mad_receiver_id(mad);
	struct conn *c, *r = NULL;

	switch (attr) {
	case CM_ATTR_REQ:
		cm_get_gid(mad, CM_REQ_OFF_PRIMARY_REMOTE_GID, dst);
		return gid_is_zero(dst) ? -ENOENT : 0;
	case CM_ATTR_SIDR_REQ:
		return cm_mad_cma_addrs(mad, NULL, dst, NULL) ? -ENOENT : 0;
	case CM_ATTR_SIDR_REP:
		r = conn_table_peer_record_of(ct, CK_SIDR, client, port,
					      receiver);
		break;
	default:
		c = sender ? conn_table_guest_find(ct, CK_COMM, client, port,
						   sender)
			   : NULL;
		if (c && c->peer_id == receiver) {
			r = c;
			break;
		}
		if (attr == CM_ATTR_REP || attr == CM_ATTR_MRA ||
		    attr == CM_ATTR_REJ)
			r = conn_table_peer_record_of(ct, CK_COMM, client, port,
						      receiver);
		if (r == NULL)
			r = c;
		break;
	}
	if (r == NULL)
		return -ENOENT;
	*dst = conn_path_of(ct, r)->peer_gid;
	return 0;
}

/* ---- timers: cm.c's send errors and TimeWait ------------------------------ */

/* An entry's wait has run out, and it ends as cm_process_send_error()
 * ends its state: a DREQ never answered enters TimeWait (the peer's late
 * DREQ or DREP is absorbed there); every other wait, TimeWait's own
 * included, ends the entry. */
static void conn_timeout(struct conn_table *ct, struct conn *c, uint64_t now_ms)
{
	if (conn_state_of(c) == CONN_DREQ_SENT)
		conn_enter_timewait(ct, c, now_ms);
	else
		conn_table_remove(ct, c);
}

unsigned conn_expire_some(struct conn_table *ct, uint64_t now_ms, unsigned max)
{
	struct conn *c;
	unsigned n = 0;
	int tc;

	conn_table_clock(ct, now_ms);
	for (tc = TC_HANDSHAKE; tc < TC_MAX && n < max; tc++) {
		while (n < max &&
		       (c = conn_table_timer_first(ct, tc)) != NULL &&
		       conn_deadline_in(c, now_ms) <= 0) {
			conn_timeout(ct, c, now_ms);
			n++;
		}
	}
	return n;
}

unsigned conn_expire(struct conn_table *ct, uint64_t now_ms)
{
	return conn_expire_some(ct, now_ms, UINT_MAX);
}

/* The record of what gone clients left draining, made when first needed. */
static uint32_t conn_departed_record(struct conn_table *ct)
{
	uint32_t i = conn_table_cl_find(ct, CONN_DEPARTED);

	return i != CONN_NO_OWNER ? i : conn_table_cl_new(ct, CONN_DEPARTED);
}

/*
 * Entries of record owner (every one, or those from gid on port, when
 * gid is given) abandoned as cm_destroy_id() would abandon them: what
 * cm.c would keep in TimeWait moves to the departed record to drain
 * there; the rest goes, with the record when it is every entry.
 * -ENOMEM when there is no memory to walk them (nothing changes then,
 * unless it is every entry).
 */
static int conn_abandon_record(struct conn_table *ct, uint32_t owner,
			       unsigned port, const struct gid *gid)
{
	struct conn_client *cc = &ct->cl[owner];
	uint32_t i, n = 0, departed = CONN_NO_OWNER, *pick;
	int lingers, from_departed = cc->id == CONN_DEPARTED;
	struct conn *c;

	/* Two bits of a picked index say what becomes of it. */
	pick = cc->n ? malloc(cc->n * sizeof(*pick)) : NULL;
	if (cc->n && pick == NULL && gid)
		return -ENOMEM;
	for (i = 0; i < cc->conns.cap; i++) {
		if (cc->conns.cell[i] == 0)
			continue;
		c = conn_at(ct, cc->conns.cell[i] - 1);
		if (gid && (c->port != port ||
			    gid_cmp(&conn_path_of(ct, c)->local_gid, gid) != 0))
			continue;
		lingers = (c->flags & CF_ORPHAN)
				  ? conn_state_of(c) == CONN_TIMEWAIT
				  : conn_abandon(ct, c, ct->now_ms);
		if (pick)
			pick[n++] = (cc->conns.cell[i] - 1) << 1 |
				    (uint32_t)lingers;
	}
	/* (After the walk: removing from the set moves its cells.)  Without
	 * a record for them, what would linger goes with the rest. */
	for (i = 0; i < n; i++) {
		c = conn_at(ct, pick[i] >> 1);
		if ((pick[i] & 1) && !from_departed &&
		    departed == CONN_NO_OWNER)
			departed = conn_departed_record(ct);
		if ((pick[i] & 1) && departed != CONN_NO_OWNER) {
			c->flags |= CF_ORPHAN;
			if (conn_table_rehome(ct, c, departed) == 0)
				continue;
		}
		if (gid)
			conn_table_remove(ct, c);
	}
	free(pick);
	if (!gid)
		conn_table_drop_client(ct, owner);
	if (departed != CONN_NO_OWNER)
		conn_table_cl_forget_empty(ct, departed);
	return 0;
}

void conn_purge_record(struct conn_table *ct, uint32_t owner)
{
	(void)conn_abandon_record(ct, owner, 0, NULL);
}

int conn_purge_gid(struct conn_table *ct, uint64_t client, unsigned port,
		   const struct gid *gid)
{
	uint32_t owner = conn_table_cl_find(ct, client);

	if (ct->detached || owner == CONN_NO_OWNER)
		return 0;
	return conn_abandon_record(ct, owner, port, gid);
}

void conn_purge_client(struct conn_table *ct, uint64_t client)
{
	uint32_t owner;

	/* The daemon is going, not the client: its entries stay in the
	 * store for the next daemon. */
	if (ct->detached)
		return;
	owner = conn_table_cl_find(ct, client);
	if (owner != CONN_NO_OWNER)
		conn_purge_record(ct, owner);
}
