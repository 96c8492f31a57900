// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "protocol/rdmacm_mux_proto.h"
#include "common/gid.h"

static const struct {
	int err;
	const char *name;
} proto_errnos[] = {
	{ EPERM, "EPERM" },
	{ ENOENT, "ENOENT" },
	{ EIO, "EIO" },
	{ EAGAIN, "EAGAIN" },
	{ ENOMEM, "ENOMEM" },
	{ EACCES, "EACCES" },
	{ EBUSY, "EBUSY" },
	{ EEXIST, "EEXIST" },
	{ ENODEV, "ENODEV" },
	{ EINVAL, "EINVAL" },
	{ ENOSPC, "ENOSPC" },
	{ ERANGE, "ERANGE" },
	{ ENOSYS, "ENOSYS" },
	{ EPROTO, "EPROTO" },
	{ EBADMSG, "EBADMSG" },
	{ EMSGSIZE, "EMSGSIZE" },
	{ EPROTONOSUPPORT, "EPROTONOSUPPORT" },
	{ EOPNOTSUPP, "EOPNOTSUPP" },
	{ EADDRINUSE, "EADDRINUSE" },
	{ EADDRNOTAVAIL, "EADDRNOTAVAIL" },
	{ ENETDOWN, "ENETDOWN" },
	{ ENOBUFS, "ENOBUFS" },
	{ ENOTCONN, "ENOTCONN" },
	{ ETIMEDOUT, "ETIMEDOUT" },
	{ ECONNRESET, "ECONNRESET" },
	{ EALREADY, "EALREADY" },
	{ ECANCELED, "ECANCELED" },
	{ ENOMSG, "ENOMSG" },
	{ EDESTADDRREQ, "EDESTADDRREQ" },
	{ EPROTOTYPE, "EPROTOTYPE" },
	{ EKEYREJECTED, "EKEYREJECTED" },
	{ EUSERS, "EUSERS" },
	{ ENETUNREACH, "ENETUNREACH" },
	{ EDOM, "EDOM" },
};

const char *proto_errno_name(int err)
{
	size_t i;

	if (err < 0)
		err = -err;
	for (i = 0; i < sizeof(proto_errnos) / sizeof(proto_errnos[0]); i++)
		if (proto_errnos[i].err == err)
			return proto_errnos[i].name;
	return "EIO";
}

int proto_errno_from_name(const char *name)
{
	size_t i;

	if (name == NULL)
		return EPROTO;
	for (i = 0; i < sizeof(proto_errnos) / sizeof(proto_errnos[0]); i++)
		if (strcmp(proto_errnos[i].name, name) == 0)
			return proto_errnos[i].err;
	return EPROTO;
}

static int json_depth_ok(json_t *v, int depth)
{
	const char *key;
	json_t *child;
	size_t i;

	if (depth > PROTO_JSON_MAX_DEPTH)
		return 0;
	if (json_is_object(v)) {
		json_object_foreach(v, key, child)
			if (!json_depth_ok(child, depth + 1))
				return 0;
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, child)
			if (!json_depth_ok(child, depth + 1))
				return 0;
	}
	return 1;
}

int proto_json_parse(const uint8_t *payload, size_t len, json_t **out,
		     const char **err)
{
	json_error_t jerr;
	json_t *v;

	*out = NULL;
	/* JSON_REJECT_DUPLICATES: an object with two "op" keys is ambiguous. */
	v = json_loadb((const char *)payload, len, JSON_REJECT_DUPLICATES,
		       &jerr);
	if (v == NULL) {
		*err = "payload is not valid JSON";
		return -EBADMSG;
	}
	if (!json_is_object(v)) {
		json_decref(v);
		*err = "payload is not a JSON object";
		return -EBADMSG;
	}
	if (!json_depth_ok(v, 0)) {
		json_decref(v);
		*err = "JSON nests too deeply";
		return -EBADMSG;
	}
	*out = v;
	return 0;
}

const char *proto_request_op(json_t *req, const char **err)
{
	json_t *op = json_object_get(req, "op");

	if (!json_is_string(op)) {
		*err = "request has no string \"op\"";
		return NULL;
	}
	return json_string_value(op);
}

json_t *proto_reply_ok(void)
{
	return json_pack("{s:b}", "ok", 1);
}

json_t *proto_reply_error(int err, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (err < 0)
		err = -err;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return json_pack("{s:b, s:{s:s, s:i, s:s}}", "ok", 0, "error", "code",
			 proto_errno_name(err), "errno", err, "message", msg);
}

int proto_reply_status(json_t *reply, const char **message)
{
	json_t *ok = json_object_get(reply, "ok");
	json_t *error;

	*message = "";
	if (json_is_true(ok))
		return 0;
	if (!json_is_false(ok)) {
		*message = "malformed reply: no boolean \"ok\"";
		return -EPROTO;
	}
	error = json_object_get(reply, "error");
	if (json_is_string(json_object_get(error, "message")))
		*message = json_string_value(json_object_get(error, "message"));
	return -proto_errno_from_name(
		json_string_value(json_object_get(error, "code")));
}

int proto_gid_from_json(json_t *value, uint8_t gid[16])
{
	struct gid g;

	if (!json_is_string(value) || gid_parse(json_string_value(value), &g))
		return -EINVAL;
	memcpy(gid, g.raw, 16);
	return 0;
}

json_t *proto_gid_to_json(const uint8_t gid[16])
{
	char buf[GID_STRLEN];
	struct gid g;

	memcpy(g.raw, gid, 16);
	return json_string(gid_format(&g, buf));
}
