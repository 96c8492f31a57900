// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The outbound corridor's checks: a client's MAD, checked as a message
 * (the rate, class, method, attribute), for where it goes from and to
 * (port, policy, source GID, address block), for the QP it names, and by
 * the connection table (comm IDs, states, the GIDs inside it), then
 * handed to its port.  Runs on the client's worker; each refusal is
 * counted under its reason and logged within the client's budget.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "mux/mux.h"
#include "common/log.h"
#include "common/wire.h"

/* A refused MAD: the reason's counter, a rate-limited log line. */
static int outbound_refuse(struct mux *mux, struct client_info *ci,
			   enum refusal why, int err, const char *text,
			   const char **out)
{
	uint64_t suppressed;

	*out = text;
	atomic_fetch_add(&mux->stats.tx_refused, 1);
	atomic_fetch_add(&mux->stats.refusals[why], 1);
	if (clients_log_allowed(mux, ci, &suppressed)) {
		struct log_fields lf = { .client_id = ci->id, .vm = ci->name };

		log_fwarn(
			&lf, -err,
			"client %llu (%s, pid %d): MAD refused: %s (%llu similar suppressed)",
			(unsigned long long)ci->id, ci->name, (int)ci->pid,
			text, (unsigned long long)suppressed);
	}
	return err;
}

static int outbound_cm_message_attr(uint16_t attr)
{
	return (attr >= CM_ATTR_REQ && attr <= CM_ATTR_APR);
}

static const char *outbound_inner_text(const char *field)
{
	static _Thread_local char text[128];

	snprintf(text, sizeof(text),
		 "%s is not a GID this client owns on this port", field);
	return text;
}

/* The GIDs a MAD says are its sender's, which must be the client's own on
 * the port (a peer builds its path back from them): its source GID,
 * then the message's own (REQ's local port GIDs, LAP's alternate) and
 * rdma_cm's source address; names[i] says which, for the refusal. */
_Static_assert(ROUTER_MAX_CLAIMS >= 1 + CM_OWN_GIDS_MAX + 1,
	       "a source GID, the message's own, rdma_cm's source address");

static void outbound_claims(const struct port *port, const uint8_t *mad,
			    const struct gid *sgid,
			    struct router_claims *claims, const char **names)
{
	const struct cm_attr_desc *d = cm_attr_desc(cm_mad_attr_id(mad));
	struct gid *g;
	unsigned i;

	claims->gid[0] = *sgid;
	names[0] = NULL;
	claims->n = 1;
	for (i = 0; d && i < d->n_own_gids; i++) {
		g = &claims->gid[claims->n];
		cm_get_gid(mad, d->own_gids[i].off, g);
		if (d->own_gids[i].zero_ok && gid_is_zero(g))
			continue;
		names[claims->n++] = d->own_gids[i].name;
	}
	/* On RoCE rdma_cm's addresses are GIDs; on InfiniBand they are
	 * IPoIB addresses, which the daemon cannot check. */
	if (port->roce &&
	    cm_mad_cma_addrs(mad, &claims->gid[claims->n], NULL, NULL) == 0)
		names[claims->n++] = "rdma_cm header source address";
}

/* What QP1 CM traffic's address block is, and nothing else: QP1 with the
 * GSI Q_Key, to one unicast GID, at a valid SL and hop limit.  Otherwise
 * a tenant could aim the host's QP1 at any UD QP on the fabric. */
static int outbound_address_fault(const struct proto_mad *m,
				  enum refusal *reason, const char **why)
{
	struct gid dst;

	memcpy(dst.raw, m->addr.remote_gid, 16);
	if (m->addr.remote_qpn != GSI_QPN) {
		*reason = REFUSE_REMOTE_QPN;
		*why = "CM MADs go to QP1: the remote QPN must be 1";
		return -EPROTOTYPE;
	}
	if (m->addr.qkey != GSI_QKEY) {
		*reason = REFUSE_QKEY;
		*why = "QP1 takes the GSI Q_Key 0x80010000 only";
		return -EKEYREJECTED;
	}
	if ((m->addr.flags & PROTO_MAD_F_GRH) && gid_is_zero(&dst)) {
		*reason = REFUSE_DEST_GID;
		*why = "the destination GID is zero";
		return -EDESTADDRREQ;
	}
	if ((m->addr.flags & PROTO_MAD_F_GRH) && gid_is_multicast(&dst)) {
		*reason = REFUSE_DEST_GID;
		*why = "CM MADs are unicast: the destination GID is multicast";
		return -ENETUNREACH;
	}
	if (m->addr.sl > 15 ||
	    ((m->addr.flags & PROTO_MAD_F_GRH) && m->addr.hop_limit == 0)) {
		*reason = REFUSE_SL_HOP;
		*why = "the SL is 0..15 and a GRH's hop limit is not 0";
		return -EDOM;
	}
	return 0;
}

/* What is wrong with where a MAD would go from (its port, P_Key, source
 * GID's place in the table) and to (its address block), before the
 * router sees it: 0, or a negative errno with *reason and *why.  Fills
 * *idx, the source GID's index, and a QEMU client's destination. */
static int outbound_path_fault(struct mux *mux, struct client_info *ci,
			       struct port *port, struct proto_mad *m,
			       const struct gid *sgid, int *idx,
			       enum refusal *reason, const char **why)
{
	if (m->addr.pkey_index >= port->ops->pkey_count(port)) {
		*reason = REFUSE_PKEY_INDEX;
		*why = "P_Key index outside the port's P_Key table";
		return -ERANGE;
	}
	if (atomic_load(&port->state) != PORT_STATE_ACTIVE) {
		*reason = REFUSE_PORT_DOWN;
		*why = "port is down";
		return -ENETDOWN;
	}
	*idx = port->ops->gid_index(port, sgid, 0);
	if (*idx < 0) {
		*reason = REFUSE_SOURCE_GID;
		*why = "source GID has left the port's GID table";
		return -EADDRNOTAVAIL;
	}
	if (ci->qemu_port >= 0) {
		/* QEMU addresses every MAD to the guest's own GID: where it
		 * must go follows from the MAD and its connection. */
		struct gid dgid;

		if (router_destination(mux->router, port->index, ci->id, m->mad,
				       &dgid) < 0) {
			*reason = REFUSE_DESTINATION;
			*why = "no destination follows from this MAD (no connection or REQ of this client names its peer)";
			return -EDESTADDRREQ;
		}
		memcpy(m->addr.remote_gid, dgid.raw, 16);
	}
	return outbound_address_fault(m, reason, why);
}

/* The QP a REQ, REP or successful SIDR_REP names as its sender's, and
 * where its CA GUID sits (width 0 for none): 1, or 0 when the message
 * names no QP of its sender. */
static int outbound_named_qp(const uint8_t *mad, uint32_t *qpn,
			     struct cm_field *ca_guid)
{
	*ca_guid = (struct cm_field){ 0 };
	switch (cm_mad_attr_id(mad)) {
	case CM_ATTR_REQ:
		*qpn = (uint32_t)cm_field_get(mad, CM_REQ_LOCAL_QPN);
		*ca_guid = CM_REQ_LOCAL_CA_GUID;
		return 1;
	case CM_ATTR_REP:
		*qpn = (uint32_t)cm_field_get(mad, CM_REP_LOCAL_QPN);
		*ca_guid = CM_REP_LOCAL_CA_GUID;
		return 1;
	case CM_ATTR_SIDR_REP:
		if (cm_field_get(mad, CM_SIDR_REP_STATUS) !=
		    CM_SIDR_STATUS_SUCCESS)
			return 0; /* a refusal names no QP (QPN 0) */
		*qpn = (uint32_t)cm_field_get(mad, CM_SIDR_REP_QPN);
		return 1;
	default: return 0;
	}
}

/* A timeout REJ names in its ARI the CA GUID of its sender's REQ or
 * REP, by which a peer's cm.c finds the connection it ends
 * (cm_acquire_rejected_id()); that GUID left as the port's device's
 * (outbound_named_qp()), so the ARI must say the same. */
static void outbound_timeout_rej_guid(struct port *port, uint8_t *mad)
{
	if (cm_mad_attr_id(mad) != CM_ATTR_REJ ||
	    cm_field_get(mad, CM_REJ_REASON) != CM_REJ_REASON_TIMEOUT ||
	    cm_field_get(mad, CM_REJ_ARI_LENGTH) != CM_REJ_ARI_CA_GUID_LEN)
		return;
	wire_put64(mad + CM_REJ_OFF_ARI, port->ops->node_guid(port));
}

/* Whether the client's process owns the QP the MAD names, on this port:
 * the kernel's resource tracking says on a real port, the clients'
 * registrations on a simulated one.  A peer's cm.c takes (QPN, CA GUID)
 * as a connection's identity: a REQ naming another tenant's QP would
 * have the peer end that tenant's connection as stale. */
int outbound_qp_fault(struct mux *mux, struct client_info *ci,
		      struct port *port, uint32_t qpn, const char **why)
{
	static _Thread_local char text[160];
	pid_t owner;
	int rc;

	if (port->ops->qp_owner == NULL) {
		rc = qp_registry_owner(mux->qp_registry, port->index, qpn,
				       &owner);
		if (rc == 0 && owner == ci->pid)
			return 0;
		snprintf(
			text, sizeof(text),
			rc ? "the MAD names QP %u, which no process has registered on this port"
			   : "the MAD names QP %u, which another process registered on this port",
			(unsigned)qpn);
	} else {
		rc = port->ops->qp_owner(port, qpn, &owner);
		if (rc == 0 && qp_owner_task_of(ci->pid, owner))
			return 0;
		if (rc == 0 || rc == -ESRCH)
			snprintf(
				text, sizeof(text),
				"the MAD names QP %u, which is not this client's process's",
				(unsigned)qpn);
		else if (rc == -ENOENT || rc == -EAGAIN)
			snprintf(
				text, sizeof(text),
				"the MAD names QP %u, which is not on this port (or is in RESET)",
				(unsigned)qpn);
		else
			snprintf(
				text, sizeof(text),
				"the MAD names QP %u, whose owner the kernel did not say (%s)",
				(unsigned)qpn, strerror(-rc));
	}
	*why = text;
	return -EPERM;
}

/* The MAD's own checks, cheapest first, the rate limit before anything
 * touches state: 0 or the refusal. */
static int outbound_check_mad(struct mux *mux, struct client_info *ci,
			      const struct proto_mad *m, uint64_t now,
			      const char **why)
{
	const uint8_t *mad = m->mad;

	if (!policy_token_bucket_take(&ci->tb, now))
		return outbound_refuse(mux, ci, REFUSE_RATE, -EAGAIN,
				       "MAD rate limit of this client exceeded",
				       why);
	if (m->mad_len != MAD_SIZE)
		return outbound_refuse(mux, ci, REFUSE_SIZE, -EMSGSIZE,
				       "a CM MAD is exactly 256 bytes", why);
	if (mad[MAD_OFF_BASE_VERSION] != MAD_BASE_VERSION ||
	    mad[MAD_OFF_MGMT_CLASS] != MAD_CLASS_CM ||
	    mad[MAD_OFF_CLASS_VERSION] != MAD_CM_CLASS_VERSION)
		return outbound_refuse(mux, ci, REFUSE_NOT_CM, -EBADMSG,
				       "not a CM (class 0x07 version 2) MAD",
				       why);
	if (mad[MAD_OFF_METHOD] != MAD_METHOD_SEND)
		return outbound_refuse(mux, ci, REFUSE_METHOD, -EOPNOTSUPP,
				       "the CM uses method Send only", why);
	if (!outbound_cm_message_attr(cm_mad_attr_id(mad)))
		return outbound_refuse(
			mux, ci, REFUSE_ATTRIBUTE, -ENOMSG,
			"not a CM message attribute (REQ..APR, SIDR)", why);
	return 0;
}

/* The port the MAD names, if the policy lets the client use it, and
 * where the MAD goes from and to on it: 0 with *port and *idx (the
 * source GID's index), or the refusal. */
static int outbound_check_path(struct mux *mux, struct client_info *ci,
			       struct proto_mad *m, const struct gid *sgid,
			       struct port **port, int *idx, const char **why)
{
	enum refusal reason;
	int rc;

	if (m->addr.port >= mux->nports)
		return outbound_refuse(mux, ci, REFUSE_PORT, -ENODEV,
				       "no such port", why);
	*port = &mux->ports[m->addr.port];
	if (!policy_rule_allows_port(ci->rule, (*port)->name))
		return outbound_refuse(mux, ci, REFUSE_PORT, -EACCES,
				       "policy does not allow this port", why);
	rc = outbound_path_fault(mux, ci, *port, m, sgid, idx, &reason, why);
	if (rc == 0)
		return 0;
	/* Who sends comes first: a foreign source is refused as such,
	 * whatever else is wrong with its MAD. */
	if (!router_owns_gid(mux->router, (*port)->index, sgid, ci->id))
		return outbound_refuse(
			mux, ci, REFUSE_SOURCE_GID, -EADDRNOTAVAIL,
			"source GID is not registered by this client", why);
	return outbound_refuse(mux, ci, reason, rc, *why, why);
}

/* A QP the MAD names must be its sender's process's, and the CA GUID
 * beside it the port's device's, whatever the guest's device calls
 * itself: 0 or the refusal.  (A foreign source is refused as such by
 * the router.) */
static int outbound_check_qp(struct mux *mux, struct client_info *ci,
			     struct port *port, struct proto_mad *m,
			     const struct gid *sgid, const char **why)
{
	struct cm_field ca_guid;
	uint32_t qpn;
	int rc;

	if (!outbound_named_qp(m->mad, &qpn, &ca_guid) ||
	    !router_owns_gid(mux->router, port->index, sgid, ci->id))
		return 0;
	rc = outbound_qp_fault(mux, ci, port, qpn, why);
	if (rc)
		return outbound_refuse(mux, ci, REFUSE_QP_OWNER, rc, *why, why);
	if (ca_guid.width)
		cm_field_set(m->mad, ca_guid, port->ops->node_guid(port));
	return 0;
}

/* The connection table's word on the MAD (which from here on carries
 * host comm IDs, not the guest's): 0 with *gid_type, or the refusal. */
static int outbound_route(struct mux *mux, struct client_info *ci,
			  struct port *port, struct proto_mad *m,
			  const struct gid *sgid, uint64_t now,
			  uint8_t *gid_type, const char **why)
{
	const char *claim_names[ROUTER_MAX_CLAIMS];
	struct router_claims claims;
	struct conn_path path;
	unsigned not_owned = 0;
	int rc;

	outbound_claims(port, m->mad, sgid, &claims, claim_names);
	router_path_from_addr(&m->addr, 0, &path);
	rc = router_outbound(mux->router, port->index, ci->id, &claims,
			     &not_owned, m->mad, &path, now,
			     ci->rule->max_connections, gid_type);
	switch (rc) {
	case 0: return 0;
	case -EADDRNOTAVAIL:
		if (not_owned == 0)
			return outbound_refuse(
				mux, ci, REFUSE_SOURCE_GID, -EADDRNOTAVAIL,
				"source GID is not registered by this client",
				why);
		return outbound_refuse(mux, ci, REFUSE_INNER_GID, -EPERM,
				       outbound_inner_text(
					       claim_names[not_owned]),
				       why);
	case -ENOENT:
		return outbound_refuse(
			mux, ci, REFUSE_COMM_ID, rc,
			"no connection of this client has that comm ID, or it answers no REQ this client received",
			why);
	case -EPROTO:
		return outbound_refuse(
			mux, ci, REFUSE_STATE, rc,
			"the message does not fit the connection's state (cm.c would not send it)",
			why);
	case -ENOSPC:
		return outbound_refuse(
			mux, ci, REFUSE_QUOTA, rc,
			"client has the maximum number of live communication IDs",
			why);
	default:
		return outbound_refuse(
			mux, ci, REFUSE_COMM_ID, rc,
			"Local Comm ID (or SIDR request ID) 0 is not valid here",
			why);
	}
}

/* The checks in order, and the route: 0 with m as it will leave, port
 * and the source GID's index, or the refusal. */
static int outbound_check_all(struct mux *mux, struct client_info *ci,
			      const struct proto_mad *in, struct proto_mad *m,
			      struct port **port, int *idx, const char **why)
{
	struct gid sgid;
	uint64_t now = mux_now_ms(); /* one clock read per MAD */
	uint8_t gid_type = 0;
	int typed, rc;

	memcpy(sgid.raw, m->addr.local_gid, 16);
	rc = outbound_check_mad(mux, ci, m, now, why);
	if (rc == 0)
		rc = outbound_check_path(mux, ci, m, &sgid, port, idx, why);
	if (rc == 0)
		rc = outbound_check_qp(mux, ci, *port, m, &sgid, why);
	if (rc)
		return rc;
	outbound_timeout_rej_guid(*port, m->mad);
	rc = outbound_route(mux, ci, *port, m, &sgid, now, &gid_type, why);
	if (rc)
		return rc;
	if (log_get_level() >= LOG_LVL_DEBUG &&
	    cm_mad_sender_id(in->mad) != cm_mad_sender_id(m->mad))
		log_debug("client %llu: %s local comm id 0x%08x sent as 0x%08x",
			  (unsigned long long)ci->id,
			  cm_attr_name(cm_mad_attr_id(m->mad)),
			  (unsigned)cm_mad_sender_id(in->mad),
			  (unsigned)cm_mad_sender_id(m->mad));
	if (gid_type &&
	    (typed = (*port)->ops->gid_index(*port, &sgid, gid_type)) >= 0)
		*idx = typed;
	return 0;
}

int outbound_send_mad(struct mux *mux, struct client_info *ci,
		      const struct proto_mad *in, uint32_t rid,
		      const char **why)
{
	struct proto_mad wire = *in;
	struct port *port = NULL;
	int idx = -1, rc;

	rc = outbound_check_all(mux, ci, in, &wire, &port, &idx, why);
	if (rc) {
		/* As the client sent it: it never left. */
		if (capture_on(mux))
			capture_mad(mux, 1, port, in, ci,
				    "refused client %llu: %s (%s)",
				    (unsigned long long)ci->id, *why,
				    proto_errno_name(rc));
		return rc;
	}
	/* Before it leaves: a simulated port delivers it in place. */
	if (capture_on(mux))
		capture_mad(mux, 1, port, &wire, ci, "sent by client %llu",
			    (unsigned long long)ci->id);
	rc = port_send_client_mad(port, ci, &wire, idx, rid);
	if (rc && rc != -EINPROGRESS) {
		*why = "port send failed";
		if (capture_on(mux))
			capture_mad(mux, 1, port, &wire, ci, "send failed: %s",
				    proto_errno_name(rc));
	}
	return rc;
}
