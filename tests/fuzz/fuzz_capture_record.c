// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer: a capture's record line, as rdmacm-muxctl reads it from the
 * admin socket, made into a pcapng packet block: whatever the line, the
 * block is whole (its two lengths agree, 4-byte aligned). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mux/ctl/muxctl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct muxctl_capture_rec *r = malloc(sizeof(*r));
	uint32_t first, last;
	char *buf = NULL;
	size_t len = 0;
	json_t *o;
	FILE *f;

	o = json_loadb((const char *)data, size, 0, NULL);
	if (r == NULL || o == NULL || muxctl_capture_parse(o, r) < 0) {
		json_decref(o);
		free(r);
		return 0;
	}
	f = open_memstream(&buf, &len);
	if (f == NULL || muxctl_pcapng_write(f, r) < 0)
		__builtin_trap();
	fclose(f);
	memcpy(&first, buf + 4, 4);
	memcpy(&last, buf + len - 4, 4);
	if (len % 4 || first != len || last != len)
		__builtin_trap();
	free(buf);
	json_decref(o);
	free(r);
	return 0;
}
