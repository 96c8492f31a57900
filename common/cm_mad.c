// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "common/cm_mad.h"

#include <errno.h>
#include <string.h>

#include "common/wire.h"

static const char *const cm_attr_names[CM_IDX_MAX] = {
	[CM_IDX_CLASS_PORT_INFO] = "ClassPortInfo",
	[CM_IDX_REQ] = "REQ",
	[CM_IDX_MRA] = "MRA",
	[CM_IDX_REJ] = "REJ",
	[CM_IDX_REP] = "REP",
	[CM_IDX_RTU] = "RTU",
	[CM_IDX_DREQ] = "DREQ",
	[CM_IDX_DREP] = "DREP",
	[CM_IDX_SIDR_REQ] = "SIDR_REQ",
	[CM_IDX_SIDR_REP] = "SIDR_REP",
	[CM_IDX_LAP] = "LAP",
	[CM_IDX_APR] = "APR",
	[CM_IDX_OTHER] = "other",
};

enum cm_attr_index cm_attr_index(uint16_t attr_id)
{
	switch (attr_id) {
	case CM_ATTR_CLASS_PORT_INFO: return CM_IDX_CLASS_PORT_INFO;
	case CM_ATTR_REQ: return CM_IDX_REQ;
	case CM_ATTR_MRA: return CM_IDX_MRA;
	case CM_ATTR_REJ: return CM_IDX_REJ;
	case CM_ATTR_REP: return CM_IDX_REP;
	case CM_ATTR_RTU: return CM_IDX_RTU;
	case CM_ATTR_DREQ: return CM_IDX_DREQ;
	case CM_ATTR_DREP: return CM_IDX_DREP;
	case CM_ATTR_SIDR_REQ: return CM_IDX_SIDR_REQ;
	case CM_ATTR_SIDR_REP: return CM_IDX_SIDR_REP;
	case CM_ATTR_LAP: return CM_IDX_LAP;
	case CM_ATTR_APR: return CM_IDX_APR;
	default: return CM_IDX_OTHER;
	}
}

const char *cm_attr_index_name(enum cm_attr_index idx)
{
	if ((unsigned)idx >= CM_IDX_MAX)
		return "invalid";
	return cm_attr_names[idx];
}

const char *cm_attr_name(uint16_t attr_id)
{
	return cm_attr_index_name(cm_attr_index(attr_id));
}

uint64_t cm_field_get(const uint8_t *mad, struct cm_field f)
{
	unsigned nbytes = (f.bit + f.width + 7u) / 8u;
	uint64_t acc = 0;
	unsigned i;

	for (i = 0; i < nbytes; i++)
		acc = (acc << 8) | mad[f.byte + i];
	acc >>= nbytes * 8u - f.bit - f.width;
	if (f.width < 64)
		acc &= (UINT64_C(1) << f.width) - 1;
	return acc;
}

void cm_field_set(uint8_t *mad, struct cm_field f, uint64_t value)
{
	unsigned nbytes = (f.bit + f.width + 7u) / 8u;
	unsigned shift = nbytes * 8u - f.bit - f.width;
	uint64_t mask = f.width < 64 ? (UINT64_C(1) << f.width) - 1
				     : ~UINT64_C(0);
	uint64_t acc = 0;
	unsigned i;

	for (i = 0; i < nbytes; i++)
		acc = (acc << 8) | mad[f.byte + i];
	acc &= ~(mask << shift);
	acc |= (value & mask) << shift;
	for (i = nbytes; i-- > 0;) {
		mad[f.byte + i] = (uint8_t)acc;
		acc >>= 8;
	}
}

void cm_get_gid(const uint8_t *mad, size_t off, struct gid *out)
{
	memcpy(out->raw, mad + off, sizeof(out->raw));
}

void cm_set_gid(uint8_t *mad, size_t off, const struct gid *gid)
{
	memcpy(mad + off, gid->raw, sizeof(gid->raw));
}

uint64_t cm_mad_tid(const uint8_t *mad)
{
	return wire_get64(mad + MAD_OFF_TID);
}

void cm_mad_init(uint8_t *mad, uint16_t attr_id, uint64_t tid)
{
	memset(mad, 0, MAD_SIZE);
	cm_mad_set_header(mad, attr_id, tid);
}

void cm_mad_set_header(uint8_t *mad, uint16_t attr_id, uint64_t tid)
{
	mad[MAD_OFF_BASE_VERSION] = MAD_BASE_VERSION;
	mad[MAD_OFF_MGMT_CLASS] = MAD_CLASS_CM;
	mad[MAD_OFF_CLASS_VERSION] = MAD_CM_CLASS_VERSION;
	mad[MAD_OFF_METHOD] = MAD_METHOD_SEND;
	wire_put64(mad + MAD_OFF_TID, tid);
	wire_put16(mad + MAD_OFF_ATTR_ID, attr_id);
}

#define ID_P0 CM_F(0, 0, 32)
#define ID_P4 CM_F(4, 0, 32)
#define NO_ID CM_F(0, 0, 0)

static const struct cm_attr_desc cm_attr_table[] = {
	{ .attr = CM_ATTR_REQ,
	  .has_local = 1,
	  .local_id = ID_P0,
	  .remote_id = NO_ID,
	  .n_own_gids = 2,
	  .own_gids = { { CM_REQ_OFF_PRIMARY_LOCAL_GID, 0,
			  "REQ Primary Local Port GID" },
			{ CM_REQ_OFF_ALT_LOCAL_GID, 1,
			  "REQ Alternate Local Port GID" } },
	  .cma_hdr_off = CM_REQ_OFF_PRIVATE_DATA },
	{ .attr = CM_ATTR_MRA,
	  .has_local = 1,
	  .has_remote = 1,
	  .local_id = ID_P0,
	  .remote_id = ID_P4 },
	{ .attr = CM_ATTR_REJ,
	  .has_local = 1,
	  .has_remote = 1,
	  .local_id = ID_P0,
	  .remote_id = ID_P4 },
	{ .attr = CM_ATTR_REP,
	  .has_local = 1,
	  .has_remote = 1,
	  .local_id = ID_P0,
	  .remote_id = ID_P4 },
	{ .attr = CM_ATTR_RTU,
	  .has_local = 1,
	  .has_remote = 1,
	  .local_id = ID_P0,
	  .remote_id = ID_P4 },
	{ .attr = CM_ATTR_DREQ,
	  .has_local = 1,
	  .has_remote = 1,
	  .local_id = ID_P0,
	  .remote_id = ID_P4 },
	{ .attr = CM_ATTR_DREP,
	  .has_local = 1,
	  .has_remote = 1,
	  .local_id = ID_P0,
	  .remote_id = ID_P4 },
	{ .attr = CM_ATTR_SIDR_REQ,
	  .sidr = 1,
	  .has_local = 1,
	  .local_id = CM_SIDR_REQ_REQUEST_ID,
	  .remote_id = NO_ID,
	  .cma_hdr_off = CM_SIDR_REQ_OFF_PRIVATE_DATA },
	{ .attr = CM_ATTR_SIDR_REP,
	  .sidr = 1,
	  .has_remote = 1,
	  .local_id = NO_ID,
	  .remote_id = CM_SIDR_REP_REQUEST_ID },
	{ .attr = CM_ATTR_LAP,
	  .has_local = 1,
	  .has_remote = 1,
	  .local_id = ID_P0,
	  .remote_id = ID_P4,
	  .n_own_gids = 1,
	  .own_gids = { { CM_LAP_OFF_ALT_LOCAL_GID, 0,
			  "LAP Alternate Local Port GID" } } },
	{ .attr = CM_ATTR_APR,
	  .has_local = 1,
	  .has_remote = 1,
	  .local_id = ID_P0,
	  .remote_id = ID_P4 },
};

const struct cm_attr_desc *cm_attr_desc(uint16_t attr_id)
{
	size_t i;

	for (i = 0; i < sizeof(cm_attr_table) / sizeof(cm_attr_table[0]); i++)
		if (cm_attr_table[i].attr == attr_id)
			return &cm_attr_table[i];
	return NULL;
}

int cm_mad_local_comm_id(const uint8_t *mad, uint32_t *id)
{
	const struct cm_attr_desc *d = cm_attr_desc(cm_mad_attr_id(mad));

	if (d == NULL || d->sidr || !d->has_local)
		return 0;
	*id = (uint32_t)cm_field_get(mad, d->local_id);
	return 1;
}

int cm_mad_remote_comm_id(const uint8_t *mad, uint32_t *id)
{
	const struct cm_attr_desc *d = cm_attr_desc(cm_mad_attr_id(mad));

	if (d == NULL || d->sidr || !d->has_remote)
		return 0;
	*id = (uint32_t)cm_field_get(mad, d->remote_id);
	return 1;
}

uint32_t cm_mad_sender_id(const uint8_t *mad)
{
	const struct cm_attr_desc *d = cm_attr_desc(cm_mad_attr_id(mad));

	return d && d->has_local ? (uint32_t)cm_field_get(mad, d->local_id) : 0;
}

uint32_t cm_mad_receiver_id(const uint8_t *mad)
{
	const struct cm_attr_desc *d = cm_attr_desc(cm_mad_attr_id(mad));

	return d && d->has_remote ? (uint32_t)cm_field_get(mad, d->remote_id)
				  : 0;
}

void cm_mad_set_sender_id(uint8_t *mad, uint32_t id)
{
	const struct cm_attr_desc *d = cm_attr_desc(cm_mad_attr_id(mad));

	if (d && d->has_local)
		cm_field_set(mad, d->local_id, id);
}

void cm_mad_set_receiver_id(uint8_t *mad, uint32_t id)
{
	const struct cm_attr_desc *d = cm_attr_desc(cm_mad_attr_id(mad));

	if (d && d->has_remote)
		cm_field_set(mad, d->remote_id, id);
}

void cm_build_rej(uint8_t *mad, uint64_t tid, uint32_t local_id,
		  uint32_t remote_id, unsigned msg_rejected, unsigned reason,
		  const uint8_t *ari, unsigned ari_len)
{
	cm_mad_init(mad, CM_ATTR_REJ, tid);
	cm_field_set(mad, CM_REJ_LOCAL_COMM_ID, local_id);
	cm_field_set(mad, CM_REJ_REMOTE_COMM_ID, remote_id);
	cm_field_set(mad, CM_REJ_MESSAGE_REJECTED, msg_rejected);
	cm_field_set(mad, CM_REJ_REASON, reason);
	if (ari && ari_len) {
		if (ari_len > 72)
			ari_len = 72;
		cm_field_set(mad, CM_REJ_ARI_LENGTH, ari_len);
		memcpy(mad + CM_REJ_OFF_ARI, ari, ari_len);
	}
}

void cm_build_dreq(uint8_t *mad, uint64_t tid, uint32_t local_id,
		   uint32_t remote_id, uint32_t remote_qpn)
{
	cm_mad_init(mad, CM_ATTR_DREQ, tid);
	cm_field_set(mad, CM_DREQ_LOCAL_COMM_ID, local_id);
	cm_field_set(mad, CM_DREQ_REMOTE_COMM_ID, remote_id);
	cm_field_set(mad, CM_DREQ_REMOTE_QPN, remote_qpn);
}

void cm_build_drep(uint8_t *mad, uint64_t tid, uint32_t local_id,
		   uint32_t remote_id)
{
	cm_mad_init(mad, CM_ATTR_DREP, tid);
	cm_field_set(mad, CM_DREP_LOCAL_COMM_ID, local_id);
	cm_field_set(mad, CM_DREP_REMOTE_COMM_ID, remote_id);
}

void cm_build_sidr_rep(uint8_t *mad, uint64_t tid, uint32_t request_id,
		       unsigned status, uint64_t service_id)
{
	cm_mad_init(mad, CM_ATTR_SIDR_REP, tid);
	cm_field_set(mad, CM_SIDR_REP_REQUEST_ID, request_id);
	cm_field_set(mad, CM_SIDR_REP_STATUS, status);
	cm_field_set(mad, CM_SIDR_REP_SERVICE_ID, service_id);
}

uint64_t cm_service_timeout_ms(unsigned t)
{
	/* 4.096 us * 2^t = 2^(t+12) ns */
	uint64_t ns = UINT64_C(1) << ((t & 31) + 12);

	return (ns + 999999) / 1000000;
}

unsigned cm_timeout_log2_ms(unsigned t)
{
	t &= 31;
	return t > 8 ? t - 8 : 0;
}

int cm_mad_validate(const uint8_t *mad, size_t len)
{
	if (len != MAD_SIZE)
		return -EMSGSIZE;
	if (mad[MAD_OFF_BASE_VERSION] != MAD_BASE_VERSION ||
	    mad[MAD_OFF_MGMT_CLASS] != MAD_CLASS_CM ||
	    mad[MAD_OFF_CLASS_VERSION] != MAD_CM_CLASS_VERSION)
		return -EBADMSG;
	if (mad[MAD_OFF_METHOD] != MAD_METHOD_SEND)
		return -EPROTO;
	return 0;
}

static void cma_addr_to_gid(const uint8_t *addr, int ip_version,
			    struct gid *out)
{
	if (ip_version == 4) {
		memset(out->raw, 0, 10);
		out->raw[10] = 0xff;
		out->raw[11] = 0xff;
		memcpy(out->raw + 12, addr + 12, 4);
	} else {
		memcpy(out->raw, addr, 16);
	}
}

static int cma_hdr_parse(const uint8_t *pd, struct gid *src, struct gid *dst,
			 uint16_t *port)
{
	int ipv = pd[CMA_OFF_IP_VERSION] >> 4;

	if (pd[CMA_OFF_VERSION] != CMA_VERSION || (ipv != 4 && ipv != 6))
		return -ENOENT;
	if (src)
		cma_addr_to_gid(pd + CMA_OFF_SRC_ADDR, ipv, src);
	if (dst)
		cma_addr_to_gid(pd + CMA_OFF_DST_ADDR, ipv, dst);
	if (port)
		*port = wire_get16(pd + CMA_OFF_PORT);
	return 0;
}

int cm_mad_cma_addrs(const uint8_t *mad, struct gid *src, struct gid *dst,
		     uint16_t *port)
{
	const struct cm_attr_desc *d = cm_attr_desc(cm_mad_attr_id(mad));

	if (d == NULL || d->cma_hdr_off == 0)
		return -ENOENT;
	return cma_hdr_parse(mad + d->cma_hdr_off, src, dst, port);
}

int cm_sidr_req_dst_gid(const uint8_t *mad, struct gid *out)
{
	return cma_hdr_parse(mad + CM_SIDR_REQ_OFF_PRIVATE_DATA, NULL, out,
			     NULL);
}

int cm_req_cma_addrs(const uint8_t *mad, struct gid *src, struct gid *dst,
		     uint16_t *port)
{
	return cma_hdr_parse(mad + CM_REQ_OFF_PRIVATE_DATA, src, dst, port);
}

static int gid_is_v4_mapped(const struct gid *g)
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0,    0,
					    0, 0, 0, 0, 0xff, 0xff };

	return memcmp(g->raw, prefix, sizeof(prefix)) == 0;
}

void cma_hdr_build(uint8_t *pd, const struct gid *src, const struct gid *dst,
		   uint16_t port)
{
	int v4 = gid_is_v4_mapped(src) && gid_is_v4_mapped(dst);

	memset(pd, 0, CMA_HDR_SIZE);
	pd[CMA_OFF_VERSION] = CMA_VERSION;
	pd[CMA_OFF_IP_VERSION] = (uint8_t)((v4 ? 4 : 6) << 4);
	wire_put16(pd + CMA_OFF_PORT, port);
	if (v4) {
		memcpy(pd + CMA_OFF_SRC_ADDR + 12, src->raw + 12, 4);
		memcpy(pd + CMA_OFF_DST_ADDR + 12, dst->raw + 12, 4);
	} else {
		memcpy(pd + CMA_OFF_SRC_ADDR, src->raw, 16);
		memcpy(pd + CMA_OFF_DST_ADDR, dst->raw, 16);
	}
}

int cm_mad_class_response(const uint8_t *req, size_t len, uint8_t *resp)
{
	uint8_t method;

	if (len != MAD_SIZE || req[MAD_OFF_BASE_VERSION] != MAD_BASE_VERSION ||
	    req[MAD_OFF_MGMT_CLASS] != MAD_CLASS_CM)
		return 0;
	method = req[MAD_OFF_METHOD];
	if (method != MAD_METHOD_GET && method != MAD_METHOD_SET)
		return 0;
	memcpy(resp, req, MAD_HDR_SIZE);
	memset(resp + MAD_HDR_SIZE, 0, MAD_SIZE - MAD_HDR_SIZE);
	resp[MAD_OFF_METHOD] = MAD_METHOD_GET_RESP;
	resp[MAD_OFF_CLASS_VERSION] = MAD_CM_CLASS_VERSION;
	if (method == MAD_METHOD_GET &&
	    cm_mad_attr_id(req) == CM_ATTR_CLASS_PORT_INFO &&
	    req[MAD_OFF_CLASS_VERSION] == MAD_CM_CLASS_VERSION) {
		wire_put16(resp + MAD_OFF_STATUS, 0);
		/* ClassPortInfo (IBA 13.4.8.1): no optional capabilities,
		 * no redirection, no traps. */
		resp[MAD_HDR_SIZE + 0] = MAD_BASE_VERSION;
		resp[MAD_HDR_SIZE + 1] = MAD_CM_CLASS_VERSION;
		wire_put32(resp + MAD_HDR_SIZE + 4, CM_CLASS_RESP_TIME_VALUE);
	} else {
		wire_put16(resp + MAD_OFF_STATUS,
			   MAD_STATUS_UNSUPPORTED_METHOD_ATTR);
	}
	return 1;
}
