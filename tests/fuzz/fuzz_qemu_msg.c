// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer: QEMU's rdmacm-mux messages as a client may send them (any
 * bytes, cut into 360-byte messages): decode, and for what decodes, the
 * response and a re-encoding that must decode to the same message. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/qemu_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t buf[QEMU_MSG_SIZE], again[QEMU_MSG_SIZE];
	struct qemu_msg m, m2, resp;
	size_t off;

	for (off = 0; off < size; off += QEMU_MSG_SIZE) {
		size_t n = size - off < QEMU_MSG_SIZE ? size - off
						      : QEMU_MSG_SIZE;

		memset(buf, 0, sizeof(buf));
		memcpy(buf, data + off, n);
		if (qemu_msg_decode(buf, &m) != 0)
			continue;
		qemu_msg_response(&m, QEMU_MSG_OK, &resp);
		if (resp.op == QEMU_MSG_OP_MAD)
			abort();
		qemu_msg_encode(&m, again);
		if (qemu_msg_decode(again, &m2) != 0 ||
		    memcmp(&m, &m2, sizeof(m)) != 0)
			abort();
	}
	return 0;
}
