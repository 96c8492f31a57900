// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer: the admin socket's capture request, as the daemon reads it
 * (the admin socket is root's, but a request is still only bytes). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "protocol/rdmacm_mux_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proto_capture_request r;
	const char *why = NULL;
	char err[160];
	json_t *req;

	if (proto_json_parse(data, size, &req, &why) < 0)
		return 0;
	err[0] = '\0';
	if (proto_capture_request_parse(req, &r, err, sizeof(err)) < 0) {
		if (err[0] == '\0')
			__builtin_trap(); /* every refusal says why */
	} else if (r.count < 1 || r.count > PROTO_CAPTURE_COUNT_MAX ||
		   r.seconds < 1 || r.seconds > PROTO_CAPTURE_SECONDS_MAX ||
		   r.by > PROTO_CAPTURE_GID ||
		   memchr(r.vm, '\0', sizeof(r.vm)) == NULL ||
		   (r.by == PROTO_CAPTURE_CLIENT && r.client == 0) ||
		   (r.by == PROTO_CAPTURE_VM && r.vm[0] == '\0')) {
		__builtin_trap();
	}
	json_decref(req);
	return 0;
}
