// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include <errno.h>
#include <string.h>

#include "protocol/rdmacm_mux_proto.h"
#include "common/wire.h"

int proto_mad_encode(const struct proto_mad *m, uint8_t *out, size_t cap)
{
	const struct proto_mad_addr *a = &m->addr;
	size_t total = PROTO_MAD_ADDR_SIZE + m->mad_len;

	if (m->mad_len == 0 || m->mad_len > PROTO_MAD_MAX)
		return -EINVAL;
	if (a->flags & ~PROTO_MAD_F_GRH || a->flow_label > 0xfffff ||
	    a->remote_qpn > 0xffffff)
		return -EINVAL;
	if (cap < total)
		return -ENOSPC;
	wire_put16(out + 0, a->port);
	wire_put16(out + 2, m->mad_len);
	out[4] = a->flags;
	out[5] = a->hop_limit;
	out[6] = a->traffic_class;
	out[7] = a->sl;
	wire_put32(out + 8, a->flow_label);
	wire_put32(out + 12, a->remote_qpn);
	wire_put32(out + 16, a->qkey);
	wire_put16(out + 20, a->lid);
	wire_put16(out + 22, a->pkey_index);
	memcpy(out + 24, a->local_gid, 16);
	memcpy(out + 40, a->remote_gid, 16);
	wire_put32(out + 56, a->status);
	wire_put32(out + 60, 0);
	memcpy(out + PROTO_MAD_ADDR_SIZE, m->mad, m->mad_len);
	return (int)total;
}

int proto_mad_decode(const uint8_t *in, size_t len, struct proto_mad *m)
{
	struct proto_mad_addr *a = &m->addr;
	uint16_t mad_len;

	if (len < PROTO_MAD_ADDR_SIZE)
		return -EMSGSIZE;
	mad_len = wire_get16(in + 2);
	if (mad_len == 0 || mad_len > PROTO_MAD_MAX ||
	    len != PROTO_MAD_ADDR_SIZE + (size_t)mad_len)
		return -EMSGSIZE;
	a->port = wire_get16(in + 0);
	a->flags = in[4];
	a->hop_limit = in[5];
	a->traffic_class = in[6];
	a->sl = in[7];
	a->flow_label = wire_get32(in + 8);
	a->remote_qpn = wire_get32(in + 12);
	a->qkey = wire_get32(in + 16);
	a->lid = wire_get16(in + 20);
	a->pkey_index = wire_get16(in + 22);
	memcpy(a->local_gid, in + 24, 16);
	memcpy(a->remote_gid, in + 40, 16);
	a->status = wire_get32(in + 56);
	if (a->flags & ~PROTO_MAD_F_GRH || a->flow_label > 0xfffff ||
	    a->remote_qpn > 0xffffff || wire_get32(in + 60) != 0)
		return -EINVAL;
	m->mad_len = mad_len;
	memcpy(m->mad, in + PROTO_MAD_ADDR_SIZE, mad_len);
	return 0;
}
