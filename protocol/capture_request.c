// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The admin socket's capture request (rdmacm-muxd(8), ADMIN SOCKET):
 * {"op":"capture"} with at most one of "client_id", "vm", "gid" (none:
 * every MAD), and "count", "seconds".  Pure: no I/O. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/gid.h"
#include "protocol/rdmacm_mux_proto.h"

/* An integer member from 1 to max, or dflt when absent: 0 or -EINVAL. */
static int proto_capture_limit(json_t *req, const char *key, json_int_t dflt,
			       json_int_t max, json_int_t *out, char *err,
			       size_t errlen)
{
	json_t *v = json_object_get(req, key);

	*out = dflt;
	if (v == NULL)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    json_integer_value(v) > max) {
		snprintf(err, errlen, "\"%s\" must be a number from 1 to %lld",
			 key, (long long)max);
		return -EINVAL;
	}
	*out = json_integer_value(v);
	return 0;
}

int proto_capture_request_parse(json_t *req, struct proto_capture_request *r,
				char *err, size_t errlen)
{
	json_t *id = json_object_get(req, "client_id"),
	       *vm = json_object_get(req, "vm"),
	       *gid = json_object_get(req, "gid");
	json_int_t count, seconds;
	struct gid g;

	memset(r, 0, sizeof(*r));
	if ((id != NULL) + (vm != NULL) + (gid != NULL) > 1) {
		snprintf(err, errlen,
			 "capture one client_id, vm or gid, or every MAD");
		return -EINVAL;
	}
	if (id) {
		if (!json_is_integer(id) || json_integer_value(id) <= 0) {
			snprintf(err, errlen,
				 "\"client_id\" must be a client's id");
			return -EINVAL;
		}
		r->by = PROTO_CAPTURE_CLIENT;
		r->client = (uint64_t)json_integer_value(id);
	} else if (vm) {
		if (!json_is_string(vm) || json_string_length(vm) == 0 ||
		    json_string_length(vm) >= sizeof(r->vm) ||
		    memchr(json_string_value(vm), '\0',
			   json_string_length(vm))) {
			snprintf(err, errlen,
				 "\"vm\" must be a VM name (1 to %zu bytes)",
				 sizeof(r->vm) - 1);
			return -EINVAL;
		}
		r->by = PROTO_CAPTURE_VM;
		memcpy(r->vm, json_string_value(vm), json_string_length(vm));
	} else if (gid) {
		if (!json_is_string(gid) ||
		    gid_parse(json_string_value(gid), &g) < 0) {
			snprintf(err, errlen, "\"gid\" must be a GID");
			return -EINVAL;
		}
		r->by = PROTO_CAPTURE_GID;
		memcpy(r->gid, g.raw, 16);
	}
	if (proto_capture_limit(req, "count", PROTO_CAPTURE_COUNT,
				PROTO_CAPTURE_COUNT_MAX, &count, err,
				errlen) < 0 ||
	    proto_capture_limit(req, "seconds", PROTO_CAPTURE_SECONDS,
				PROTO_CAPTURE_SECONDS_MAX, &seconds, err,
				errlen) < 0)
		return -EINVAL;
	r->count = (uint64_t)count;
	r->seconds = (unsigned)seconds;
	return 0;
}
