// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer: JSON control payloads as the daemon and the library read
 * them (request op, reply status, GID fields). */
#include <stddef.h>
#include <stdint.h>

#include "protocol/rdmacm_mux_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *err = NULL, *msg = NULL;
	uint8_t gid[16];
	json_t *j;

	if (proto_json_parse(data, size, &j, &err) < 0)
		return 0;
	proto_request_op(j, &err);
	proto_reply_status(j, &msg);
	proto_gid_from_json(json_object_get(j, "gid"), gid);
	proto_errno_from_name(json_string_value(
		json_object_get(json_object_get(j, "error"), "code")));
	json_decref(j);
	return 0;
}
