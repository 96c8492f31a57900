// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer: QEMU's rdmacm-mux messages as a client may send them (any
 * bytes, cut into 360-byte messages): decode, and for what decodes, the
 * response and a re-encoding that must decode to the same message. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/legacy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t buf[LEGACY_MSG_SIZE], again[LEGACY_MSG_SIZE];
	struct legacy_msg m, m2, resp;
	size_t off;

	for (off = 0; off < size; off += LEGACY_MSG_SIZE) {
		size_t n = size - off < LEGACY_MSG_SIZE ? size - off
							: LEGACY_MSG_SIZE;

		memset(buf, 0, sizeof(buf));
		memcpy(buf, data + off, n);
		if (legacy_decode(buf, &m) != 0)
			continue;
		legacy_response(&m, LEGACY_OK, &resp);
		if (resp.op == LEGACY_OP_MAD)
			abort();
		legacy_encode(&m, again);
		if (legacy_decode(again, &m2) != 0 ||
		    memcmp(&m, &m2, sizeof(m)) != 0)
			abort();
	}
	return 0;
}
