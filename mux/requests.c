// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Control operations: hello, GID and QPN registrations, listings.  Every
 * function here runs on the calling session's worker thread and answers
 * with exactly one reply object.
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

static const char *const mux_features[] = { "mad", "port-events",
					    "shared-gid" };

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
	if (clients_set_hello(mux->clients, ci,
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

static int requests_gid_register_checked(struct mux *mux,
					 struct client_info *ci,
					 struct port *port,
					 const struct gid *gid, int shared,
					 int in_table_optional, int *idx,
					 char *text, size_t len);

/* A tenant's refused registrations are worth a line, a limited number. */
int requests_gid_register(struct mux *mux, struct client_info *ci,
			  struct port *port, const struct gid *gid, int shared,
			  int in_table_optional, int *idx, char *text,
			  size_t len)
{
	char buf[GID_STRLEN];
	uint64_t suppressed;
	int rc;

	rc = requests_gid_register_checked(mux, ci, port, gid, shared,
					   in_table_optional, idx, text, len);
	if (rc && clients_log_allowed(mux, ci, &suppressed)) {
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
					 const struct gid *gid, int shared,
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
	if (shared && !ci->rule->share_gids) {
		snprintf(text, len,
			 "policy does not let this client share GIDs");
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
	rc = shared ? router_share_gid(mux->router, port->index, gid, ci->id)
		    : router_register_gid(mux->router, port->index, gid,
					  ci->id);
	if (rc == -EEXIST && !shared &&
	    router_gid_owner(mux->router, port->index, gid) ==
		    ROUTER_GID_SHARED)
		snprintf(
			text, len,
			"GID %s on port %s is shared (\"shared\":true joins it)",
			gid_format(gid, buf), port->name);
	else if (rc == -EEXIST)
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
			   "client %llu (%s): registered %s on %s%s%s",
			   (unsigned long long)ci->id, ci->name,
			   gid_format(gid, buf), port->name,
			   shared ? " (shared)" : "",
			   *idx < 0 ? " (not in its GID table yet)" : "");
	return rc;
}

static json_t *requests_op_register_gid(struct mux *mux, struct client_info *ci,
					json_t *req)
{
	json_t *err = NULL;
	struct port *port;
	struct gid gid;
	json_t *shared = json_object_get(req, "shared");
	char text[160];
	int idx, rc;

	if (shared && !json_is_boolean(shared))
		return proto_reply_error(EINVAL,
					 "\"shared\" must be true or false");
	port = requests_port_gid(mux, req, &gid, &err);
	if (port == NULL)
		return err;
	rc = requests_gid_register(mux, ci, port, &gid, json_is_true(shared), 0,
				   &idx, text, sizeof(text));
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
		rc = outbound_qp_fault(mux, ci, port, qpn, &why);
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

/* A listen request's service ID: an integer, or a string of up to 16
 * hex digits after "0x" (IB service IDs use all 64 bits).  0 or
 * -EINVAL. */
static int requests_service_id(json_t *v, uint64_t *out)
{
	const char *t = json_string_value(v);

	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (t == NULL || strncmp(t, "0x", 2) != 0 || strlen(t) < 3 ||
	    strlen(t) > 18 ||
	    strspn(t + 2, "0123456789abcdefABCDEF") != strlen(t + 2))
		return -EINVAL;
	*out = strtoull(t + 2, NULL, 16);
	return 0;
}

/* listen and unlisten: REQs and SIDR_REQs for a shared GID's service ID
 * (rdmacm-mux-protocol(7), SHARED GIDS). */
static json_t *requests_op_listen(struct mux *mux, struct client_info *ci,
				  json_t *req, int listen)
{
	char buf[GID_STRLEN];
	json_t *err = NULL;
	struct port *port;
	uint64_t sid;
	struct gid gid;
	int rc;

	if (requests_service_id(json_object_get(req, "service_id"), &sid))
		return proto_reply_error(
			EINVAL,
			"\"service_id\" must be a number or \"0x\" and up to 16 hex digits");
	port = requests_port_gid(mux, req, &gid, &err);
	if (port == NULL)
		return err;
	rc = listen ? router_listen(mux->router, port->index, &gid, sid, ci->id)
		    : router_unlisten(mux->router, port->index, &gid, sid,
				      ci->id);
	if (rc == -EADDRINUSE)
		return proto_reply_error(
			EADDRINUSE,
			"service ID 0x%016llx on %s is another client's",
			(unsigned long long)sid, gid_format(&gid, buf));
	if (rc == -ENOENT)
		return proto_reply_error(
			ENOENT,
			listen ? "GID %s on %s is not shared by this client"
			       : "this client does not listen on %s on %s",
			gid_format(&gid, buf), port->name);
	if (rc == -ENOSPC)
		return proto_reply_error(ENOSPC,
					 "a client listens on %u at most",
					 ROUTER_LISTENS_PER_CLIENT);
	if (rc)
		return proto_reply_error(-rc, "cannot listen");
	return proto_reply_ok();
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
	if (strcmp(op, "listen") == 0)
		return requests_op_listen(mux, ci, req, 1);
	if (strcmp(op, "unlisten") == 0)
		return requests_op_listen(mux, ci, req, 0);
	if (strcmp(op, "list_gids") == 0)
		return requests_op_list_gids(mux, ci);
	if (strcmp(op, "list_ports") == 0)
		return requests_op_list_ports(mux);
	return proto_reply_error(EOPNOTSUPP, "unknown op \"%s\"", op);
}
