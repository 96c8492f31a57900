// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer: the frame decoder and the MAD frame codec on untrusted bytes.
 * The first byte chooses a split point, so splits are fuzzed too; both
 * halves must decode to the same frames as the whole. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/rdmacm_mux_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct summary {
	int frames;
	int error;
	uint32_t sum;
};

static void run(const uint8_t *data, size_t size, size_t cut, struct summary *s)
{
	struct proto_decoder dec;
	struct proto_frame f;
	struct proto_mad m;
	uint8_t re[PROTO_MAD_ADDR_SIZE + PROTO_MAD_MAX];
	size_t off = 0, end, used;
	int rc, n;

	memset(s, 0, sizeof(*s));
	proto_decoder_init(&dec, 4096);
	while (off < size && !s->error) {
		end = off < cut ? cut : size;
		rc = proto_decoder_feed(&dec, data + off, end - off, &used, &f);
		off += used;
		if (rc < 0) {
			s->error = rc;
			break;
		}
		if (rc == 0)
			continue;
		s->frames++;
		s->sum = s->sum * 31 + f.request_id + f.length + f.kind +
			 f.flags;
		if (f.kind == PROTO_KIND_MAD &&
		    proto_mad_decode(f.payload, f.length, &m) == 0) {
			n = proto_mad_encode(&m, re, sizeof(re));
			if (n != (int)f.length ||
			    memcmp(re, f.payload, f.length) != 0)
				abort(); /* decode/encode must round-trip */
		}
	}
	proto_decoder_fini(&dec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct summary whole, split;

	if (size < 1)
		return 0;
	run(data + 1, size - 1, size - 1, &whole);
	run(data + 1, size - 1, data[0] % size, &split);
	if (whole.frames != split.frames || whole.error != split.error ||
	    whole.sum != split.sum)
		abort();
	return 0;
}
