// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Control operations and the outbound MAD path.  Every function here runs
 * on the calling session's worker thread and answers with exactly one
 * reply object.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "mux/mux.h"
#include "common/text.h"
#include "common/log.h"
#include "common/wire.h"

static const char *const mux_features[] = { "mad", "port-events" };

static json_t *requests_features_json(json_t *requested)
{
	json_t *out = json_array(), *v;
	size_t i, j;

	for (i = 0; i < sizeof(mux_features) / sizeof(mux_features[0]); i++) {
		json_array_foreach(requested, j, v) {
			if (json_is_string(v) && strcmp(json_string_value(v),
							mux_features[i]) == 0) {
				json_array_append_new(out,
						      json_string(
							      mux_features[i]));
				break;
			}
		}
	}
	return out;
}

static int requests_hex_token(const char *text, uint8_t token[16])
{
	unsigned i, v;

	if (text == NULL || strlen(text) != 32)
		return -EINVAL;
	for (i = 0; i < 16; i++) {
		if (sscanf(text + 2 * i, "%2x", &v) != 1)
			return -EINVAL;
		token[i] = (uint8_t)v;
	}
	return 0;
}

/*
 * A session a client can resume after a restart of the daemon: a random
 * token, only ever sent to this client, which (with the same uid) claims
 * this client's connections back.  A hello that presents the token of a
 * previous session takes that session's connections over.  Reply fields:
 * "session": {"client_id", "token"} (when the daemon keeps state), and
 * "resumed": true, or false with "resume_error" (errno name).
 */
static void requests_hello_session(struct mux *mux, struct client_info *ci,
				   json_t *resume, json_t *reply)
{
	uint8_t token[16], old_token[16];
	uint64_t suppressed;
	char hex[33];
	json_int_t old_id;
	int rc = 0, i;

	if (getrandom(token, sizeof(token), 0) != (ssize_t)sizeof(token))
		return;
	for (i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", token[i]);
	if (resume) {
		old_id = json_integer_value(
			json_object_get(resume, "client_id"));
		if (old_id <= 0 ||
		    requests_hex_token(json_string_value(
					       json_object_get(resume,
							       "token")),
				       old_token) < 0)
			rc = -EINVAL;
		else
			rc = router_owner_claim(mux->router, (uint64_t)old_id,
						ci->uid, old_token, ci->id,
						token);
		json_object_set_new(reply, "resumed", json_boolean(rc == 0));
		if (rc) {
			json_object_set_new(reply, "resume_error",
					    json_string(proto_errno_name(-rc)));
			atomic_fetch_add(&mux->stats.resumes_refused, 1);
		} else {
			atomic_fetch_add(&mux->stats.resumes, 1);
			if (mux_refusal_log_allowed(mux, &suppressed))
				log_finfo(
					&(struct log_fields){ ci->id,
							      ci->name },
					"client %llu (%s): resumed the session of client %lld (%llu similar suppressed)",
					(unsigned long long)ci->id, ci->name,
					(long long)old_id,
					(unsigned long long)suppressed);
		}
	}
	if (!resume || rc)
		rc = router_owner_add(mux->router, ci->id, ci->uid, token);
	if (rc == 0)
		json_object_set_new(reply, "session",
				    json_pack("{s:I, s:s}", "client_id",
					      (json_int_t)ci->id, "token",
					      hex));
}

static json_t *requests_op_hello(struct mux *mux, struct client_info *ci,
				 int *hello_done, json_t *req, int *close_after)
{
	json_t *proto = json_object_get(req, "protocol");
	json_t *name = json_object_get(req, "name");
	json_t *features = json_object_get(req, "features");
	const struct policy_rule *rule;
	json_int_t major, minor;
	struct policy *pol;
	unsigned rule_max;
	json_t *reply;

	if (*hello_done)
		return proto_reply_error(EALREADY, "hello already done");
	if (!json_is_integer(json_object_get(proto, "major")) ||
	    !json_is_integer(json_object_get(proto, "minor"))) {
		*close_after = 1;
		return proto_reply_error(
			EINVAL,
			"hello needs \"protocol\": {\"major\": N, \"minor\": N}");
	}
	major = json_integer_value(json_object_get(proto, "major"));
	minor = json_integer_value(json_object_get(proto, "minor"));
	if (major < 0 || major > 65535 || minor < 0 || minor > 65535) {
		*close_after = 1;
		return proto_reply_error(
			EINVAL,
			"protocol version numbers are 0..65535, not %lld.%lld",
			(long long)major, (long long)minor);
	}
	if (major != PROTO_VERSION_MAJOR) {
		*close_after = 1;
		return proto_reply_error(
			EPROTONOSUPPORT,
			"protocol %lld.%lld not supported; this daemon speaks %d.%d",
			(long long)major, (long long)minor, PROTO_VERSION_MAJOR,
			PROTO_VERSION_MINOR);
	}
	if (name != NULL && !json_is_string(name))
		return proto_reply_error(EINVAL, "\"name\" must be a string");
	/* The name reaches logs, the status and admins' terminals. */
	if (name != NULL && (json_string_length(name) > MUX_NAME_MAX ||
			     !text_is_clean(json_string_value(name),
					    json_string_length(name)))) {
		*close_after = 1;
		return proto_reply_error(
			EINVAL,
			"\"name\" must be UTF-8 of at most %d bytes without control characters",
			MUX_NAME_MAX);
	}
	if (features != NULL && !json_is_array(features))
		return proto_reply_error(EINVAL,
					 "\"features\" must be an array");
	/* The VM name is the hypervisor's word, but only counts where the
	 * policy binds it to this (kernel-verified) identity. */
	pol = mux_policy_get(mux);
	rule = policy_select(pol, ci->uid, ci->gid,
			     name ? json_string_value(name) : NULL);
	if (rule == NULL) {
		policy_unref(pol);
		*close_after = 1;
		return proto_reply_error(
			EACCES,
			"no policy rule lets uid %d gid %d run VM \"%s\"",
			(int)ci->uid, (int)ci->gid,
			name ? json_string_value(name) : "");
	}
	/* Under the table's lock: the status thread reads these, and the
	 * rule's client count is checked where it is kept. */
	rule_max = rule->max_clients; /* pol may be gone after a refusal */
	if (clients_set_hello(&mux->clients, ci,
			      name ? json_string_value(name) : NULL, pol,
			      rule) < 0) {
		atomic_fetch_add(&mux->stats.clients_refused_rule_limit, 1);
		atomic_fetch_add(&mux->stats.clients_refused, 1);
		*close_after = 1;
		return proto_reply_error(
			EUSERS,
			"the policy rule for uid %d VM \"%s\" allows %u clients at once",
			(int)ci->uid, name ? json_string_value(name) : "",
			rule_max);
	}
	policy_token_bucket_init(&ci->tb, rule->mad_rate, rule->mad_burst,
				 mux_now_ms());
	*hello_done = 1;
	reply = json_pack("{s:b, s:{s:i, s:i}, s:o, s:I, s:s, s:i}", "ok", 1,
			  "protocol", "major", PROTO_VERSION_MAJOR, "minor",
			  minor < PROTO_VERSION_MINOR ? (int)minor
						      : PROTO_VERSION_MINOR,
			  "features", requests_features_json(features),
			  "client_id", (json_int_t)ci->id, "daemon",
			  "rdmacm-muxd " MUX_VERSION, "max_payload",
			  (int)mux->cfg.max_payload);
	if (reply)
		requests_hello_session(mux, ci, json_object_get(req, "resume"),
				       reply);
	return reply;
}

/* Find the port a request names: "port" as a name or index; may be left
 * out when the daemon has exactly one port. */
static struct port *requests_port(struct mux *mux, json_t *req, json_t **err)
{
	json_t *p = json_object_get(req, "port");
	json_int_t idx;

	if (p == NULL) {
		if (mux->nports == 1)
			return &mux->ports[0];
		*err = proto_reply_error(
			EINVAL,
			"\"port\" is required: this daemon has %d ports",
			mux->nports);
		return NULL;
	}
	if (json_is_integer(p)) {
		idx = json_integer_value(p);
		if (idx >= 0 && idx < mux->nports)
			return &mux->ports[idx];
		*err = proto_reply_error(ENODEV, "no port with index %lld",
					 (long long)idx);
		return NULL;
	}
	if (json_is_string(p)) {
		struct port *port = mux_port_by_name(mux, json_string_value(p));

		if (port)
			return port;
		*err = proto_reply_error(ENODEV, "no port named \"%s\"",
					 json_string_value(p));
		return NULL;
	}
	*err = proto_reply_error(EINVAL, "\"port\" must be a name or an index");
	return NULL;
}

/* The (port, gid) pair a GID request names; NULL and *err on error. */
static struct port *requests_port_gid(struct mux *mux, json_t *req,
				      struct gid *gid, json_t **err)
{
	struct port *port = requests_port(mux, req, err);

	if (port == NULL)
		return NULL;
	if (proto_gid_from_json(json_object_get(req, "gid"), gid->raw) == 0)
		return port;
	*err = proto_reply_error(
		EINVAL, "\"gid\" must be an IPv6-form GID or an IPv4 address");
	return NULL;
}

/* Register a GID for a client: the policy's ports, GIDs and limit, the
 * port's table unless in_table_optional, first come first served.  0 with
 * *idx (-1 when not in the table yet), or a negative errno with text. */
static int requests_gid_register_checked(struct mux *mux,
					 struct client_info *ci,
					 struct port *port,
					 const struct gid *gid,
					 int in_table_optional, int *idx,
					 char *text, size_t len);

/* May a line a client's request caused be logged now?  Within its uid's
 * budget, which reconnecting does not renew, and the daemon's
 * (*suppressed: the lines held back of that uid and of all). */
static int requests_log_allowed(struct mux *mux, const struct client_info *ci,
				uint64_t *suppressed)
{
	uint64_t all = 0;

	if (!clients_uid_log_allowed(&mux->clients, ci->uid, suppressed))
		return 0;
	if (!mux_refusal_log_allowed(mux, &all))
		return 0;
	*suppressed += all;
	return 1;
}

/* A tenant's refused registrations are worth a line, a limited number. */
static int requests_gid_register(struct mux *mux, struct client_info *ci,
				 struct port *port, const struct gid *gid,
				 int in_table_optional, int *idx, char *text,
				 size_t len)
{
	char buf[GID_STRLEN];
	uint64_t suppressed;
	int rc;

	rc = requests_gid_register_checked(mux, ci, port, gid,
					   in_table_optional, idx, text, len);
	if (rc && requests_log_allowed(mux, ci, &suppressed)) {
		struct log_fields lf = { ci->id, ci->name, port->name,
					 gid_format(gid, buf) };

		log_fwarn(
			&lf, -rc,
			"client %llu (%s): GID %s on %s refused: %s (%llu similar suppressed)",
			(unsigned long long)ci->id, ci->name, buf, port->name,
			text, (unsigned long long)suppressed);
	}
	return rc;
}

static int requests_gid_register_checked(struct mux *mux,
					 struct client_info *ci,
					 struct port *port,
					 const struct gid *gid,
					 int in_table_optional, int *idx,
					 char *text, size_t len)
{
	char buf[GID_STRLEN];
	int rc;

	/* Never a port's own address, in its table or later: what a QEMU
	 * client may register before the host adds it is a unicast GID. */
	if (gid_is_zero(gid) || gid_is_multicast(gid)) {
		snprintf(text, len, "GID %s is not a unicast address",
			 gid_format(gid, buf));
		return -EADDRNOTAVAIL;
	}
	if (!policy_rule_allows_port(ci->rule, port->name)) {
		snprintf(text, len,
			 "policy does not allow port %s for this client",
			 port->name);
		return -EACCES;
	}
	if (!policy_rule_allows_gid(ci->rule, gid)) {
		snprintf(text, len,
			 "policy does not allow GID %s for this client",
			 gid_format(gid, buf));
		return -EACCES;
	}
	if (ci->rule->max_gids &&
	    router_owns_gid(mux->router, port->index, gid, ci->id) == 0) {
		struct router_counts rc2;

		router_client_counts(mux->router, ci->id, &rc2);
		if (rc2.gids >= ci->rule->max_gids) {
			snprintf(text, len, "policy allows this client %u GIDs",
				 ci->rule->max_gids);
			return -ENOSPC;
		}
	}
	*idx = port->ops->gid_index(port, gid, 0);
	if (*idx < 0 && port->ops->gid_refresh) {
		/* The address may have just been added to the netdev. */
		port->ops->gid_refresh(port);
		*idx = port->ops->gid_index(port, gid, 0);
	}
	if (*idx < 0 && !in_table_optional) {
		snprintf(text, len, "GID %s is not in the GID table of port %s",
			 gid_format(gid, buf), port->name);
		return -EADDRNOTAVAIL;
	}
	rc = router_register_gid(mux->router, port->index, gid, ci->id);
	if (rc == -EEXIST)
		snprintf(text, len,
			 "GID %s on port %s is registered by another client",
			 gid_format(gid, buf), port->name);
	else if (rc == -ENOSPC)
		snprintf(text, len, "client already has the maximum of %u GIDs",
			 mux->cfg.max_gids_per_client);
	else if (rc)
		snprintf(text, len, "cannot register GID");
	else
		log_fdebug(&(struct log_fields){ ci->id, ci->name, port->name,
						 buf },
			   "client %llu (%s): registered %s on %s%s",
			   (unsigned long long)ci->id, ci->name,
			   gid_format(gid, buf), port->name,
			   *idx < 0 ? " (not in its GID table yet)" : "");
	return rc;
}

static json_t *requests_op_register_gid(struct mux *mux, struct client_info *ci,
					json_t *req)
{
	json_t *err = NULL;
	struct port *port;
	struct gid gid;
	char text[160];
	int idx, rc;

	port = requests_port_gid(mux, req, &gid, &err);
	if (port == NULL)
		return err;
	rc = requests_gid_register(mux, ci, port, &gid, 0, &idx, text,
				   sizeof(text));
	if (rc)
		return proto_reply_error(rc, "%s", text);
	return json_pack("{s:b, s:i, s:s, s:i}", "ok", 1, "port",
			 (int)port->index, "port_name", port->name, "gid_index",
			 idx);
}

static json_t *requests_op_unregister_gid(struct mux *mux,
					  struct client_info *ci, json_t *req)
{
	char buf[GID_STRLEN];
	json_t *err = NULL;
	struct port *port;
	struct gid gid;
	int rc;

	port = requests_port_gid(mux, req, &gid, &err);
	if (port == NULL)
		return err;
	rc = router_unregister_gid(mux->router, port->index, &gid, ci->id, 0);
	if (rc == -ENOENT)
		return proto_reply_error(ENOENT,
					 "GID %s is not registered on %s",
					 gid_format(&gid, buf), port->name);
	if (rc == -EACCES)
		return proto_reply_error(
			EACCES, "GID %s on %s is registered by another client",
			gid_format(&gid, buf), port->name);
	return proto_reply_ok();
}

/* The QPN a QP request names, on its port: NULL and *err on error. */
static struct port *requests_port_qpn(struct mux *mux, json_t *req,
				      uint32_t *qpn, json_t **err)
{
	struct port *port = requests_port(mux, req, err);
	json_t *q = json_object_get(req, "qpn");

	if (port == NULL)
		return NULL;
	if (json_is_integer(q) && json_integer_value(q) > GSI_QPN &&
	    json_integer_value(q) <= 0xffffff) {
		*qpn = (uint32_t)json_integer_value(q);
		return port;
	}
	*err = proto_reply_error(
		EINVAL, "\"qpn\" must be a QP number from 2 to 0xffffff");
	return NULL;
}

static int requests_qp_fault(struct mux *mux, struct client_info *ci,
			     struct port *port, uint32_t qpn, const char **why);

/* A simulated port's QPs are the clients' word; a real port's, the
 * kernel's, which is checked here too so that a client learns early. */
static json_t *requests_op_register_qpn(struct mux *mux, struct client_info *ci,
					json_t *req)
{
	json_t *err = NULL;
	struct port *port;
	const char *why;
	uint32_t qpn;
	int rc;

	port = requests_port_qpn(mux, req, &qpn, &err);
	if (port == NULL)
		return err;
	if (port->ops->qp_owner) {
		rc = requests_qp_fault(mux, ci, port, qpn, &why);
		if (rc)
			return proto_reply_error(rc, "%s", why);
		return proto_reply_ok();
	}
	rc = qp_registry_add(mux->qp_registry, port->index, qpn, ci->pid,
			     ci->id, MUX_QPNS_PER_CLIENT);
	if (rc == -EADDRINUSE)
		return proto_reply_error(
			rc, "QP %u on %s is registered by another process",
			(unsigned)qpn, port->name);
	if (rc == -ENOSPC)
		return proto_reply_error(rc,
					 "a client registers at most %u QPs",
					 MUX_QPNS_PER_CLIENT);
	if (rc)
		return proto_reply_error(rc, "cannot register QP %u",
					 (unsigned)qpn);
	return proto_reply_ok();
}

static json_t *requests_op_unregister_qpn(struct mux *mux,
					  struct client_info *ci, json_t *req)
{
	json_t *err = NULL;
	struct port *port;
	uint32_t qpn;
	int rc;

	port = requests_port_qpn(mux, req, &qpn, &err);
	if (port == NULL)
		return err;
	if (port->ops->qp_owner)
		return proto_reply_ok(); /* the kernel's to forget */
	rc = qp_registry_remove(mux->qp_registry, port->index, qpn, ci->pid,
				ci->id);
	if (rc == -ENOENT)
		return proto_reply_error(rc, "QP %u is not registered on %s",
					 (unsigned)qpn, port->name);
	if (rc == -EACCES)
		return proto_reply_error(
			rc, "QP %u on %s is registered by another process",
			(unsigned)qpn, port->name);
	return proto_reply_ok();
}

struct gid_list {
	struct mux *mux;
	json_t *gids;
};

static void requests_list_gid(void *arg, unsigned port_index,
			      const struct gid *gid, uint64_t owner)
{
	struct gid_list *l = arg;
	struct port *port = &l->mux->ports[port_index];
	char buf[GID_STRLEN];

	(void)owner;
	json_array_append_new(l->gids,
			      json_pack("{s:i, s:s, s:s, s:b}", "port",
					(int)port_index, "gid",
					gid_format(gid, buf), "port_name",
					port->name, "in_table",
					port->ops->gid_index(port, gid, 0) >=
						0));
}

static json_t *requests_op_list_gids(struct mux *mux, struct client_info *ci)
{
	struct gid_list l = { mux, json_array() };

	router_gids_foreach(mux->router, ci->id, requests_list_gid, &l);
	return json_pack("{s:b, s:o}", "ok", 1, "gids", l.gids);
}

static json_t *requests_op_list_ports(struct mux *mux)
{
	json_t *ports = json_array();
	int i;

	for (i = 0; i < mux->nports; i++)
		json_array_append_new(ports, port_json(&mux->ports[i], 1));
	return json_pack("{s:b, s:o}", "ok", 1, "ports", ports);
}

json_t *requests_handle(struct mux *mux, struct client_info *ci,
			int *hello_done, json_t *req, int *close_after)
{
	const char *err = NULL, *op = proto_request_op(req, &err);

	if (op == NULL)
		return proto_reply_error(EINVAL, "%s", err);
	if (strcmp(op, "hello") == 0)
		return requests_op_hello(mux, ci, hello_done, req, close_after);
	if (!*hello_done)
		return proto_reply_error(ENOTCONN, "send hello before \"%s\"",
					 op);
	if (strcmp(op, "ping") == 0)
		return proto_reply_ok();
	if (strcmp(op, "register_gid") == 0)
		return requests_op_register_gid(mux, ci, req);
	if (strcmp(op, "unregister_gid") == 0)
		return requests_op_unregister_gid(mux, ci, req);
	if (strcmp(op, "register_qpn") == 0)
		return requests_op_register_qpn(mux, ci, req);
	if (strcmp(op, "unregister_qpn") == 0)
		return requests_op_unregister_qpn(mux, ci, req);
	if (strcmp(op, "list_gids") == 0)
		return requests_op_list_gids(mux, ci);
	if (strcmp(op, "list_ports") == 0)
		return requests_op_list_ports(mux);
	return proto_reply_error(EOPNOTSUPP, "unknown op \"%s\"", op);
}

/* A refused MAD: the reason's counter, a rate-limited log line. */
static int requests_refuse(struct mux *mux, struct client_info *ci,
			   enum refusal why, int err, const char *text,
			   const char **out)
{
	uint64_t suppressed;

	*out = text;
	atomic_fetch_add(&mux->stats.tx_refused, 1);
	atomic_fetch_add(&mux->stats.refusals[why], 1);
	if (requests_log_allowed(mux, ci, &suppressed)) {
		struct log_fields lf = { .client_id = ci->id, .vm = ci->name };

		log_fwarn(
			&lf, -err,
			"client %llu (%s, pid %d): MAD refused: %s (%llu similar suppressed)",
			(unsigned long long)ci->id, ci->name, (int)ci->pid,
			text, (unsigned long long)suppressed);
	}
	return err;
}

static int requests_cm_message_attr(uint16_t attr)
{
	return (attr >= CM_ATTR_REQ && attr <= CM_ATTR_APR);
}

static const char *requests_inner_text(const char *field)
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

static void requests_claims(const struct port *port, const uint8_t *mad,
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
static int requests_address_fault(const struct proto_mad *m,
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
static int requests_path_fault(struct mux *mux, struct client_info *ci,
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
	return requests_address_fault(m, reason, why);
}

/* The QP a REQ, REP or successful SIDR_REP names as its sender's, and
 * where its CA GUID sits (width 0 for none): 1, or 0 when the message
 * names no QP of its sender. */
static int requests_named_qp(const uint8_t *mad, uint32_t *qpn,
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
 * (requests_named_qp()), so the ARI must say the same. */
static void requests_timeout_rej_guid(struct port *port, uint8_t *mad)
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
static int requests_qp_fault(struct mux *mux, struct client_info *ci,
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

int requests_send_mad(struct mux *mux, struct client_info *ci,
		      const struct proto_mad *in, uint32_t rid, int may_defer,
		      const char **why)
{
	struct cm_field ca_guid;
	uint32_t qpn;
	struct proto_mad wire = *in, *m = &wire;
	const uint8_t *mad = m->mad;
	const char *claim_names[ROUTER_MAX_CLAIMS];
	struct router_claims claims;
	struct conn_path path;
	unsigned not_owned = 0;
	struct port *port;
	enum refusal reason;
	struct gid sgid;
	uint64_t now = mux_now_ms(); /* one clock read per MAD */
	uint8_t gid_type = 0;
	int idx, typed, rc;

	/* Cheapest first; the rate limit before anything touches state. */
	if (!policy_token_bucket_take(&ci->tb, now))
		return requests_refuse(mux, ci, REFUSE_RATE, -EAGAIN,
				       "MAD rate limit of this client exceeded",
				       why);
	if (m->mad_len != MAD_SIZE)
		return requests_refuse(mux, ci, REFUSE_SIZE, -EMSGSIZE,
				       "a CM MAD is exactly 256 bytes", why);
	if (mad[MAD_OFF_BASE_VERSION] != MAD_BASE_VERSION ||
	    mad[MAD_OFF_MGMT_CLASS] != MAD_CLASS_CM ||
	    mad[MAD_OFF_CLASS_VERSION] != MAD_CM_CLASS_VERSION)
		return requests_refuse(mux, ci, REFUSE_NOT_CM, -EBADMSG,
				       "not a CM (class 0x07 version 2) MAD",
				       why);
	if (mad[MAD_OFF_METHOD] != MAD_METHOD_SEND)
		return requests_refuse(mux, ci, REFUSE_METHOD, -EOPNOTSUPP,
				       "the CM uses method Send only", why);
	if (!requests_cm_message_attr(cm_mad_attr_id(mad)))
		return requests_refuse(
			mux, ci, REFUSE_ATTRIBUTE, -ENOMSG,
			"not a CM message attribute (REQ..APR, SIDR)", why);
	if (m->addr.port >= mux->nports)
		return requests_refuse(mux, ci, REFUSE_PORT, -ENODEV,
				       "no such port", why);
	port = &mux->ports[m->addr.port];
	if (!policy_rule_allows_port(ci->rule, port->name))
		return requests_refuse(mux, ci, REFUSE_PORT, -EACCES,
				       "policy does not allow this port", why);
	memcpy(sgid.raw, m->addr.local_gid, 16);
	rc = requests_path_fault(mux, ci, port, m, &sgid, &idx, &reason, why);
	if (rc) {
		/* Who sends comes first: a foreign source is refused as
		 * such, whatever else is wrong with its MAD. */
		if (!router_owns_gid(mux->router, port->index, &sgid, ci->id))
			return requests_refuse(
				mux, ci, REFUSE_SOURCE_GID, -EADDRNOTAVAIL,
				"source GID is not registered by this client",
				why);
		return requests_refuse(mux, ci, reason, rc, *why, why);
	}
	if (requests_named_qp(mad, &qpn, &ca_guid) &&
	    router_owns_gid(mux->router, port->index, &sgid, ci->id)) {
		/* (A foreign source is refused as such below.) */
		rc = requests_qp_fault(mux, ci, port, qpn, why);
		if (rc)
			return requests_refuse(mux, ci, REFUSE_QP_OWNER, rc,
					       *why, why);
		/* The QP is the port's device's: so is the CA GUID a peer
		 * pairs with it, whatever the guest's device calls itself. */
		if (ca_guid.width)
			cm_field_set(m->mad, ca_guid,
				     port->ops->node_guid(port));
	}
	requests_timeout_rej_guid(port, m->mad);
	requests_claims(port, mad, &sgid, &claims, claim_names);
	router_path_from_addr(&m->addr, 0, &path);
	/* From here on the MAD carries host comm IDs, not the guest's. */
	rc = router_outbound(mux->router, port->index, ci->id, &claims,
			     &not_owned, m->mad, &path, now,
			     ci->rule->max_connections, &gid_type);
	if (rc == -EADDRNOTAVAIL && not_owned == 0)
		return requests_refuse(
			mux, ci, REFUSE_SOURCE_GID, -EADDRNOTAVAIL,
			"source GID is not registered by this client", why);
	if (rc == -EADDRNOTAVAIL)
		return requests_refuse(mux, ci, REFUSE_INNER_GID, -EPERM,
				       requests_inner_text(
					       claim_names[not_owned]),
				       why);
	if (rc == -ENOENT)
		return requests_refuse(
			mux, ci, REFUSE_COMM_ID, rc,
			"no connection of this client has that comm ID, or it answers no REQ this client received",
			why);
	if (rc == -EPROTO)
		return requests_refuse(
			mux, ci, REFUSE_STATE, rc,
			"the message does not fit the connection's state (cm.c would not send it)",
			why);
	if (rc == -ENOSPC)
		return requests_refuse(
			mux, ci, REFUSE_QUOTA, rc,
			"client has the maximum number of live communication IDs",
			why);
	if (rc)
		return requests_refuse(
			mux, ci, REFUSE_COMM_ID, rc,
			"Local Comm ID (or SIDR request ID) 0 is not valid here",
			why);
	if (log_get_level() >= LOG_LVL_DEBUG &&
	    cm_mad_sender_id(in->mad) != cm_mad_sender_id(m->mad))
		log_debug("client %llu: %s local comm id 0x%08x sent as 0x%08x",
			  (unsigned long long)ci->id,
			  cm_attr_name(cm_mad_attr_id(m->mad)),
			  (unsigned)cm_mad_sender_id(in->mad),
			  (unsigned)cm_mad_sender_id(m->mad));
	if (gid_type &&
	    (typed = port->ops->gid_index(port, &sgid, gid_type)) >= 0)
		idx = typed;
	rc = port_send_client_mad(port, ci, m, idx, rid, may_defer);
	if (rc && rc != -EINPROGRESS)
		*why = "port send failed";
	return rc;
}

/* ---- QEMU's rdmacm-mux protocol ------------------------------------------ */

/* QEMU's protocol has no word for a refusal: counted, logged (within
 * the refusals' budget), and the connection closes. */
static int requests_qemu_refuse(struct mux *mux, struct client_info *ci,
				_Atomic uint64_t *counter, int err,
				const char *why)
{
	uint64_t suppressed;

	atomic_fetch_add(counter, 1);
	atomic_fetch_add(&mux->stats.clients_refused, 1);
	if (mux_refusal_log_allowed(mux, &suppressed))
		log_warnx(
			"client %llu (QEMU, pid %d): %s; closing (%llu similar suppressed)",
			(unsigned long long)ci->id, (int)ci->pid, why,
			(unsigned long long)suppressed);
	return err;
}

/* QEMU keeps no token across a daemon's restart, but its process is its
 * identity: its pid with the process's start time (a reused pid has
 * another), and the socket (port) it comes in on; the uid is checked
 * beside.  0, or -errno when /proc cannot say. */
static int requests_qemu_identity(const struct client_info *ci,
				  uint8_t identity[16])
{
	char path[64], buf[1024], *p;
	unsigned long long start = 0;
	ssize_t n;
	int fd, field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)ci->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = '\0';
	/* The command name may hold anything: fields follow its last ')'. */
	p = strrchr(buf, ')');
	for (field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (p == NULL || sscanf(p + 1, "%llu", &start) != 1 || start == 0)
		return -EIO;
	memset(identity, 0, 16);
	identity[0] = 'Q';
	wire_put16(identity + 2, (uint16_t)ci->qemu_port);
	wire_put32(identity + 4, (uint32_t)ci->pid);
	wire_put64(identity + 8, start);
	return 0;
}

/* A QEMU process back after the daemon's restart (QEMU's chardev with
 * reconnect=N) takes back its previous connection's GIDs and
 * connections; any other is a new owner the next restart keeps. */
static void requests_qemu_session(struct mux *mux, struct client_info *ci)
{
	uint8_t identity[16];
	uint64_t old = 0, suppressed;
	int rc;

	if (requests_qemu_identity(ci, identity) < 0)
		return; /* nothing proves it the same next time */
	rc = router_owner_claim_identity(mux->router, ci->uid, identity, ci->id,
					 &old);
	if (rc == 0) {
		atomic_fetch_add(&mux->stats.resumes, 1);
		if (mux_refusal_log_allowed(mux, &suppressed))
			log_finfo(
				&(struct log_fields){ ci->id, ci->name },
				"client %llu (QEMU, pid %d): the same process as client %llu of the previous daemon; its GIDs and connections are back (%llu similar suppressed)",
				(unsigned long long)ci->id, (int)ci->pid,
				(unsigned long long)old,
				(unsigned long long)suppressed);
		return;
	}
	if (rc == -ENOTUNIQ) {
		atomic_fetch_add(&mux->stats.resumes_refused, 1);
		/* Within its uid's budget: reconnecting buys no lines. */
		if (requests_log_allowed(mux, ci, &suppressed))
			log_fwarn(
				&(struct log_fields){ ci->id, ci->name }, -rc,
				"client %llu (QEMU, pid %d): its process had several connections on this socket before the restart, which cannot be told apart: none is taken back (%llu similar suppressed)",
				(unsigned long long)ci->id, (int)ci->pid,
				(unsigned long long)suppressed);
	}
	router_owner_add_qemu(mux->router, ci->id, ci->uid, identity);
}

int requests_qemu_hello(struct mux *mux, struct client_info *ci)
{
	const struct policy_rule *rule;
	struct policy *pol;
	unsigned rule_max;
	char name[32], why[96];

	/* QEMU names no VM: the rule follows from its identity alone. */
	pol = mux_policy_get(mux);
	rule = policy_select(pol, ci->uid, ci->gid, NULL);
	if (rule == NULL) {
		policy_unref(pol);
		snprintf(why, sizeof(why),
			 "no policy rule for uid %d gid %d without a VM name",
			 (int)ci->uid, (int)ci->gid);
		return requests_qemu_refuse(mux, ci,
					    &mux->stats.clients_refused_policy,
					    -EACCES, why);
	}
	snprintf(name, sizeof(name), "qemu-%d", (int)ci->pid);
	rule_max = rule->max_clients; /* pol may be gone after a refusal */
	if (clients_set_hello(&mux->clients, ci, name, pol, rule) < 0) {
		snprintf(why, sizeof(why),
			 "the policy rule for uid %d allows %u clients at once",
			 (int)ci->uid, rule_max);
		return requests_qemu_refuse(
			mux, ci, &mux->stats.clients_refused_rule_limit,
			-EUSERS, why);
	}
	policy_token_bucket_init(&ci->tb, rule->mad_rate, rule->mad_burst,
				 mux_now_ms());
	requests_qemu_session(mux, ci);
	return 0;
}

/* The old daemon's codes: EACCES for what is someone else's or not
 * allowed, EINVAL for the rest. */
static enum qemu_msg_err requests_qemu_code(int err)
{
	switch (err) {
	case 0: return QEMU_MSG_OK;
	case -EEXIST:
	case -EACCES:
	case -EPERM:
	case -EADDRNOTAVAIL:
	case -ENOENT: return QEMU_MSG_EACCES;
	default: return QEMU_MSG_EINVAL;
	}
}

static enum qemu_msg_err requests_qemu_register(struct mux *mux,
						struct client_info *ci,
						struct port *port,
						const struct gid *gid)
{
	char text[160];
	int idx, rc;

	/* A repeat got EEXIST from the old daemon. */
	if (router_owns_gid(mux->router, port->index, gid, ci->id))
		return QEMU_MSG_EEXIST;
	/* QEMU registers a guest's GID before the host admin (libvirt) adds
	 * its address to the netdev: the table is checked at each send. */
	rc = requests_gid_register(mux, ci, port, gid, 1, &idx, text,
				   sizeof(text));
	return requests_qemu_code(rc);
}

static enum qemu_msg_err requests_qemu_send(struct mux *mux,
					    struct client_info *ci,
					    struct port *port,
					    const struct qemu_msg *req)
{
	struct proto_mad m;
	const char *why = "";

	/* What QEMU writes in the address block is its guest's own GID and
	 * index; the daemon picks both ends itself. */
	memset(&m.addr, 0, sizeof(m.addr));
	m.addr.port = (uint16_t)port->index;
	m.addr.flags = PROTO_MAD_F_GRH;
	m.addr.hop_limit = 64;
	m.addr.traffic_class = req->addr.traffic_class;
	m.addr.sl = req->addr.sl;
	m.addr.flow_label = req->addr.flow_label;
	m.addr.remote_qpn = GSI_QPN;
	m.addr.qkey = GSI_QKEY;
	m.addr.pkey_index = req->addr.pkey_index;
	memcpy(m.addr.local_gid, req->sgid, 16);
	m.mad_len = (uint16_t)req->umad_len;
	memcpy(m.mad, req->mad, m.mad_len);
	/* QEMU reads each response before anything else: sent here. */
	return requests_qemu_code(requests_send_mad(mux, ci, &m, 0, 0, &why));
}

void requests_qemu_handle(struct mux *mux, struct client_info *ci,
			  const struct qemu_msg *req, struct qemu_msg *resp)
{
	struct port *port = &mux->ports[ci->qemu_port];
	enum qemu_msg_err err;
	struct gid gid;
	int rc;

	memcpy(gid.raw, req->sgid, 16);
	switch (req->op) {
	case QEMU_MSG_OP_REG:
		err = requests_qemu_register(mux, ci, port, &gid);
		break;
	case QEMU_MSG_OP_UNREG:
		/* pvrdma unregisters the guest's GIDs when the guest resets
		 * its device (a reboot): the guest's CM is gone, and its
		 * connections with it. */
		rc = router_unregister_gid(mux->router, port->index, &gid,
					   ci->id, 1);
		err = rc == -ENOENT ? QEMU_MSG_ENOTFOUND
				    : requests_qemu_code(rc);
		break;
	default: err = requests_qemu_send(mux, ci, port, req); break;
	}
	qemu_msg_response(req, err, resp);
}
