// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "protocol/qemu_msg.h"

#include <errno.h>
#include <string.h>

/* Offsets in the 360-byte message (see qemu_msg.h). */
enum {
	OFF_TYPE = 0,
	OFF_OP = 4,
	OFF_SGID = 8,
	OFF_ERR = 24,
	OFF_UMAD_LEN = 32,
	OFF_UMAD = 36,
	OFF_ADDR = OFF_UMAD + 20,
	OFF_MAD = OFF_UMAD + 64,
};

/* ib_mad_addr, relative to OFF_ADDR. */
enum {
	A_QPN = 0,
	A_QKEY = 4,
	A_LID = 8,
	A_SL = 10,
	A_GRH = 12,
	A_GID_INDEX = 13,
	A_HOP = 14,
	A_TCLASS = 15,
	A_GID = 16,
	A_FLOW = 32,
	A_PKEY_INDEX = 36,
};

static uint32_t host32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static void put_host32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, sizeof(v));
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static uint16_t be16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static void put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

int qemu_msg_decode(const uint8_t *buf, struct qemu_msg *out)
{
	const uint8_t *a = buf + OFF_ADDR;
	uint16_t pkey;

	memset(out, 0, sizeof(*out));
	out->type = host32(buf + OFF_TYPE);
	out->op = host32(buf + OFF_OP);
	memcpy(out->sgid, buf + OFF_SGID, 16);
	out->err = host32(buf + OFF_ERR);
	out->umad_len = (int32_t)host32(buf + OFF_UMAD_LEN);
	if (out->type != QEMU_MSG_REQ)
		return -EBADMSG;
	if (out->op > QEMU_MSG_OP_MAD)
		return -EOPNOTSUPP;
	if (out->op != QEMU_MSG_OP_MAD)
		return 0;
	if (out->umad_len < 1 || out->umad_len > QEMU_MSG_MAD_MAX)
		return -EMSGSIZE;
	out->addr.qpn = be32(a + A_QPN) & 0xffffff;
	out->addr.qkey = be32(a + A_QKEY);
	out->addr.lid = be16(a + A_LID);
	out->addr.sl = a[A_SL];
	out->addr.grh_present = a[A_GRH];
	out->addr.gid_index = a[A_GID_INDEX];
	out->addr.hop_limit = a[A_HOP];
	out->addr.traffic_class = a[A_TCLASS];
	memcpy(out->addr.gid, a + A_GID, 16);
	out->addr.flow_label = be32(a + A_FLOW) & 0xfffff;
	memcpy(&pkey, a + A_PKEY_INDEX, sizeof(pkey)); /* host order */
	out->addr.pkey_index = pkey;
	memcpy(out->mad, buf + OFF_MAD, (size_t)out->umad_len);
	return 0;
}

void qemu_msg_encode(const struct qemu_msg *m, uint8_t *buf)
{
	uint8_t *a = buf + OFF_ADDR;
	size_t len = m->umad_len > 0 && m->umad_len <= QEMU_MSG_MAD_MAX
			     ? (size_t)m->umad_len
			     : 0;

	memset(buf, 0, QEMU_MSG_SIZE);
	put_host32(buf + OFF_TYPE, m->type);
	put_host32(buf + OFF_OP, m->op);
	memcpy(buf + OFF_SGID, m->sgid, 16);
	put_host32(buf + OFF_ERR, m->err);
	put_host32(buf + OFF_UMAD_LEN, (uint32_t)m->umad_len);
	put_host32(buf + OFF_UMAD + 16, (uint32_t)len); /* length */
	put_be32(a + A_QPN, m->addr.qpn);
	put_be32(a + A_QKEY, m->addr.qkey);
	put_be16(a + A_LID, m->addr.lid);
	a[A_SL] = m->addr.sl;
	a[A_GRH] = m->addr.grh_present;
	a[A_GID_INDEX] = m->addr.gid_index;
	a[A_HOP] = m->addr.hop_limit;
	a[A_TCLASS] = m->addr.traffic_class;
	memcpy(a + A_GID, m->addr.gid, 16);
	put_be32(a + A_FLOW, m->addr.flow_label);
	memcpy(a + A_PKEY_INDEX, &m->addr.pkey_index,
	       sizeof(m->addr.pkey_index));
	memcpy(buf + OFF_MAD, m->mad, len);
}

void qemu_msg_response(const struct qemu_msg *req, enum qemu_msg_err err,
		       struct qemu_msg *resp)
{
	memset(resp, 0, sizeof(*resp));
	resp->type = QEMU_MSG_RESP;
	resp->op = req->op == QEMU_MSG_OP_MAD ? QEMU_MSG_OP_UNREG : req->op;
	memcpy(resp->sgid, req->sgid, 16);
	resp->err = err;
}
