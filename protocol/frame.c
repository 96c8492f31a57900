// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/rdmacm_mux_proto.h"
#include "common/wire.h"

void proto_decoder_init(struct proto_decoder *dec, uint32_t max_payload)
{
	memset(dec, 0, sizeof(*dec));
	if (max_payload == 0 || max_payload > PROTO_MAX_PAYLOAD_LIMIT)
		max_payload = PROTO_MAX_PAYLOAD_DEFAULT;
	dec->max_payload = max_payload;
}

void proto_decoder_fini(struct proto_decoder *dec)
{
	free(dec->buf);
	dec->buf = NULL;
	dec->buf_cap = 0;
}

void proto_header_encode(uint8_t *out, uint8_t kind, uint8_t flags,
			 uint32_t request_id, uint32_t length)
{
	out[0] = kind;
	out[1] = flags;
	wire_put16(out + 2, 0);
	wire_put32(out + 4, request_id);
	wire_put32(out + 8, length);
}

int proto_header_decode(const uint8_t *in, uint32_t max_payload,
			struct proto_frame *frame)
{
	uint8_t kind = in[0], flags = in[1];
	uint32_t rid = wire_get32(in + 4), len = wire_get32(in + 8);

	if (kind != PROTO_KIND_JSON && kind != PROTO_KIND_MAD)
		return -EBADMSG;
	if ((flags & ~(PROTO_FLAG_REPLY | PROTO_FLAG_EVENT)) != 0 ||
	    flags == (PROTO_FLAG_REPLY | PROTO_FLAG_EVENT))
		return -EBADMSG;
	if (wire_get16(in + 2) != 0)
		return -EBADMSG;
	if ((flags & PROTO_FLAG_EVENT) ? rid != 0 : rid == 0)
		return -EPROTO;
	if (len > max_payload)
		return -EMSGSIZE;
	frame->kind = kind;
	frame->flags = flags;
	frame->request_id = rid;
	frame->length = len;
	frame->payload = NULL;
	return 0;
}

static int decoder_reserve(struct proto_decoder *dec, size_t need)
{
	uint8_t *nb;
	size_t cap;

	if (need <= dec->buf_cap)
		return 0;
	cap = dec->buf_cap ? dec->buf_cap : 512;
	while (cap < need)
		cap *= 2;
	nb = realloc(dec->buf, cap);
	if (nb == NULL)
		return -ENOMEM;
	dec->buf = nb;
	dec->buf_cap = cap;
	return 0;
}

int proto_decoder_feed(struct proto_decoder *dec, const uint8_t *data,
		       size_t len, size_t *consumed, struct proto_frame *frame)
{
	size_t used = 0, take;
	int rc;

	*consumed = 0;
	if (dec->error)
		return dec->error;

	if (dec->hdr_have < PROTO_HDR_SIZE) {
		take = PROTO_HDR_SIZE - dec->hdr_have;
		if (take > len)
			take = len;
		memcpy(dec->hdr + dec->hdr_have, data, take);
		dec->hdr_have += take;
		used += take;
		*consumed = used;
		if (dec->hdr_have < PROTO_HDR_SIZE)
			return 0;
		rc = proto_header_decode(dec->hdr, dec->max_payload, frame);
		if (rc == 0)
			rc = decoder_reserve(dec, wire_get32(dec->hdr + 8));
		if (rc < 0) {
			dec->error = rc;
			return rc;
		}
		dec->payload_have = 0;
	} else {
		rc = proto_header_decode(dec->hdr, dec->max_payload, frame);
		if (rc < 0)
			return dec->error = rc;
	}

	take = frame->length - dec->payload_have;
	if (take > len - used)
		take = len - used;
	if (take)
		memcpy(dec->buf + dec->payload_have, data + used, take);
	dec->payload_have += take;
	used += take;
	*consumed = used;
	if (dec->payload_have < frame->length)
		return 0;

	frame->payload = dec->buf;
	dec->hdr_have = 0;
	dec->payload_have = 0;
	return 1;
}
