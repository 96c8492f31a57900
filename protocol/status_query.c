// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The status socket's queries (rdmacm-muxd(8), STATUS): one line, one
 * JSON object.  Pure: no I/O. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "protocol/rdmacm_mux_proto.h"

int proto_status_query_parse(const char *line, size_t len,
			     struct proto_status_query *q, char *err,
			     size_t errlen)
{
	json_t *j, *id, *off, *lim;
	json_error_t jerr;
	const char *op;
	int rc = 0;

	memset(q, 0, sizeof(*q));
	q->limit = PROTO_STATUS_PAGE_DEFAULT;
	if (len > PROTO_STATUS_QUERY_MAX) {
		snprintf(err, errlen, "a status query is at most %d bytes",
			 PROTO_STATUS_QUERY_MAX);
		return -EMSGSIZE;
	}
	j = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(j)) {
		json_decref(j);
		snprintf(err, errlen,
			 "a status query is one JSON object on one line");
		return -EBADMSG;
	}
	op = json_string_value(json_object_get(j, "op"));
	if (op == NULL || strcmp(op, "status") == 0) {
		q->op = PROTO_STATUS_SNAPSHOT;
		goto out;
	}
	if (strcmp(op, "connections") != 0) {
		snprintf(err, errlen,
			 "status queries are \"status\" and \"connections\"");
		rc = -EOPNOTSUPP;
		goto out;
	}
	q->op = PROTO_STATUS_CONNECTIONS;
	id = json_object_get(j, "client");
	off = json_object_get(j, "offset");
	lim = json_object_get(j, "limit");
	if (!json_is_integer(id) || json_integer_value(id) <= 0) {
		snprintf(err, errlen, "\"client\" must be a client id");
		rc = -EINVAL;
	} else if (off &&
		   (!json_is_integer(off) || json_integer_value(off) < 0 ||
		    json_integer_value(off) > UINT32_MAX)) {
		snprintf(err, errlen, "\"offset\" must be 0 or more");
		rc = -EINVAL;
	} else if (lim &&
		   (!json_is_integer(lim) || json_integer_value(lim) < 1 ||
		    json_integer_value(lim) > PROTO_STATUS_PAGE_MAX)) {
		snprintf(err, errlen, "\"limit\" must be 1..%d",
			 PROTO_STATUS_PAGE_MAX);
		rc = -EINVAL;
	} else {
		q->client = (uint64_t)json_integer_value(id);
		q->offset = off ? (uint32_t)json_integer_value(off) : 0;
		q->limit = lim ? (uint32_t)json_integer_value(lim)
			       : PROTO_STATUS_PAGE_DEFAULT;
	}
out:
	json_decref(j);
	return rc;
}
