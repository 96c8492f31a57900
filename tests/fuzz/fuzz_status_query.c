// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer: status socket queries, as the daemon reads them from any
 * process that may open the status socket. */
#include <stddef.h>
#include <stdint.h>

#include "protocol/rdmacm_mux_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proto_status_query q;
	char err[160];

	err[0] = '\0';
	if (proto_status_query_parse((const char *)data, size, &q, err,
				     sizeof(err)) < 0) {
		if (err[0] == '\0')
			__builtin_trap(); /* every refusal says why */
		return 0;
	}
	if (q.op == PROTO_STATUS_CONNECTIONS &&
	    (q.client == 0 || q.limit < 1 || q.limit > PROTO_STATUS_PAGE_MAX))
		__builtin_trap();
	return 0;
}
