/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_COMMON_CM_MAD_H
#define RCM_COMMON_CM_MAD_H

/*
 * InfiniBand CM MADs (IBTA Vol1 ch.12, as laid out by the Linux kernel's
 * include/rdma/ibta_vol1_c12.h).  Fields are described by a table of
 * (byte, bit, width) locations and read or written only through
 * cm_field_get()/cm_field_set(); offsets are absolute (MAD header included).
 * Pure code: no I/O, no allocation.
 */
#include <stddef.h>
#include <stdint.h>

#include "common/gid.h"

#define MAD_SIZE 256
#define MAD_HDR_SIZE 24
#define MAD_BASE_VERSION 1
#define MAD_CLASS_CM 0x07
#define MAD_CM_CLASS_VERSION 2
#define MAD_METHOD_GET 0x01
#define MAD_METHOD_SET 0x02
#define MAD_METHOD_SEND 0x03
#define MAD_METHOD_GET_RESP 0x81
#define GSI_QPN 1
#define GSI_QKEY 0x80010000u

/* Common MAD header (Table 145), absolute offsets. */
#define MAD_OFF_BASE_VERSION 0
#define MAD_OFF_MGMT_CLASS 1
#define MAD_OFF_CLASS_VERSION 2
#define MAD_OFF_METHOD 3
#define MAD_OFF_STATUS 4
#define MAD_OFF_TID 8
#define MAD_OFF_ATTR_ID 16
#define MAD_OFF_ATTR_MOD 20

enum cm_attr {
	CM_ATTR_CLASS_PORT_INFO = 0x0001,
	CM_ATTR_REQ = 0x0010,
	CM_ATTR_MRA = 0x0011,
	CM_ATTR_REJ = 0x0012,
	CM_ATTR_REP = 0x0013,
	CM_ATTR_RTU = 0x0014,
	CM_ATTR_DREQ = 0x0015,
	CM_ATTR_DREP = 0x0016,
	CM_ATTR_SIDR_REQ = 0x0017,
	CM_ATTR_SIDR_REP = 0x0018,
	CM_ATTR_LAP = 0x0019,
	CM_ATTR_APR = 0x001a,
};

/* Dense index of an attribute for per-attribute counters. */
enum cm_attr_index {
	CM_IDX_CLASS_PORT_INFO,
	CM_IDX_REQ,
	CM_IDX_MRA,
	CM_IDX_REJ,
	CM_IDX_REP,
	CM_IDX_RTU,
	CM_IDX_DREQ,
	CM_IDX_DREP,
	CM_IDX_SIDR_REQ,
	CM_IDX_SIDR_REP,
	CM_IDX_LAP,
	CM_IDX_APR,
	CM_IDX_OTHER,
	CM_IDX_MAX
};

enum cm_attr_index cm_attr_index(uint16_t attr_id);
const char *cm_attr_index_name(enum cm_attr_index idx);
const char *cm_attr_name(uint16_t attr_id);

/* A field location, as the kernel's CM_FIELD*_LOC macros: the field starts
 * `bit` bits below the most significant bit of byte `byte` and is `width`
 * bits wide (at most 64, spanning at most 8 bytes). */
struct cm_field {
	uint16_t byte;
	uint8_t bit;
	uint8_t width;
};

#define CM_F(b, bit, w) ((struct cm_field){ MAD_HDR_SIZE + (b), (bit), (w) })

/* Table 106 REQ */
#define CM_REQ_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_REQ_SERVICE_ID CM_F(8, 0, 64)
#define CM_REQ_LOCAL_CA_GUID CM_F(16, 0, 64)
#define CM_REQ_LOCAL_QKEY CM_F(28, 0, 32)
#define CM_REQ_LOCAL_QPN CM_F(32, 0, 24)
#define CM_REQ_RESPONDER_RESOURCES CM_F(35, 0, 8)
#define CM_REQ_INITIATOR_DEPTH CM_F(39, 0, 8)
#define CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT CM_F(43, 0, 5)
#define CM_REQ_TRANSPORT_SERVICE_TYPE CM_F(43, 5, 2)
#define CM_REQ_FLOW_CONTROL CM_F(43, 7, 1)
#define CM_REQ_STARTING_PSN CM_F(44, 0, 24)
#define CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT CM_F(47, 0, 5)
#define CM_REQ_RETRY_COUNT CM_F(47, 5, 3)
#define CM_REQ_PKEY CM_F(48, 0, 16)
#define CM_REQ_PATH_MTU CM_F(50, 0, 4)
#define CM_REQ_RNR_RETRY_COUNT CM_F(50, 5, 3)
#define CM_REQ_MAX_CM_RETRIES CM_F(51, 0, 4)
#define CM_REQ_SRQ CM_F(51, 4, 1)
#define CM_REQ_PRIMARY_LOCAL_LID CM_F(52, 0, 16)
#define CM_REQ_PRIMARY_REMOTE_LID CM_F(54, 0, 16)
#define CM_REQ_PRIMARY_FLOW_LABEL CM_F(88, 0, 20)
#define CM_REQ_PRIMARY_TRAFFIC_CLASS CM_F(92, 0, 8)
#define CM_REQ_PRIMARY_HOP_LIMIT CM_F(93, 0, 8)
#define CM_REQ_PRIMARY_SL CM_F(94, 0, 4)
#define CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT CM_F(95, 0, 5)
#define CM_REQ_OFF_PRIMARY_LOCAL_GID (MAD_HDR_SIZE + 56)
#define CM_REQ_OFF_PRIMARY_REMOTE_GID (MAD_HDR_SIZE + 72)
#define CM_REQ_OFF_ALT_LOCAL_GID (MAD_HDR_SIZE + 100)
#define CM_REQ_OFF_ALT_REMOTE_GID (MAD_HDR_SIZE + 116)
#define CM_REQ_OFF_PRIVATE_DATA (MAD_HDR_SIZE + 140)
#define CM_REQ_PRIVATE_DATA_SIZE 92

/* Table 107 MRA */
#define CM_MRA_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_MRA_REMOTE_COMM_ID CM_F(4, 0, 32)
#define CM_MRA_MESSAGE_MRAED CM_F(8, 0, 2)
#define CM_MRA_SERVICE_TIMEOUT CM_F(9, 0, 5)
#define CM_MRA_OFF_PRIVATE_DATA (MAD_HDR_SIZE + 10)

/* Table 108 REJ */
#define CM_REJ_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_REJ_REMOTE_COMM_ID CM_F(4, 0, 32)
#define CM_REJ_MESSAGE_REJECTED CM_F(8, 0, 2)
#define CM_REJ_ARI_LENGTH CM_F(9, 0, 7)
#define CM_REJ_REASON CM_F(10, 0, 16)
#define CM_REJ_OFF_ARI (MAD_HDR_SIZE + 12)
#define CM_REJ_OFF_PRIVATE_DATA (MAD_HDR_SIZE + 84)
#define CM_REJ_PRIVATE_DATA_SIZE 148

/* Table 110 REP */
#define CM_REP_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_REP_REMOTE_COMM_ID CM_F(4, 0, 32)
#define CM_REP_LOCAL_QKEY CM_F(8, 0, 32)
#define CM_REP_LOCAL_QPN CM_F(12, 0, 24)
#define CM_REP_STARTING_PSN CM_F(20, 0, 24)
#define CM_REP_RESPONDER_RESOURCES CM_F(24, 0, 8)
#define CM_REP_INITIATOR_DEPTH CM_F(25, 0, 8)
#define CM_REP_RNR_RETRY_COUNT CM_F(27, 0, 3)
#define CM_REP_LOCAL_CA_GUID CM_F(28, 0, 64)
#define CM_REP_OFF_PRIVATE_DATA (MAD_HDR_SIZE + 36)
#define CM_REP_PRIVATE_DATA_SIZE 196
#define CM_REP_FLOW_CONTROL CM_F(26, 7, 1)
#define CM_REP_SRQ CM_F(27, 3, 1)

/* Table 111 RTU */
#define CM_RTU_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_RTU_REMOTE_COMM_ID CM_F(4, 0, 32)

/* Table 112 DREQ */
#define CM_DREQ_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_DREQ_REMOTE_COMM_ID CM_F(4, 0, 32)
#define CM_DREQ_REMOTE_QPN CM_F(8, 0, 24)

/* Table 113 DREP */
#define CM_DREP_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_DREP_REMOTE_COMM_ID CM_F(4, 0, 32)

/* Table 115 LAP */
#define CM_LAP_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_LAP_REMOTE_COMM_ID CM_F(4, 0, 32)
#define CM_LAP_REMOTE_QPN CM_F(12, 0, 24)
#define CM_LAP_OFF_ALT_LOCAL_GID (MAD_HDR_SIZE + 24)
#define CM_LAP_OFF_ALT_REMOTE_GID (MAD_HDR_SIZE + 40)

/* Table 116 APR */
#define CM_APR_LOCAL_COMM_ID CM_F(0, 0, 32)
#define CM_APR_REMOTE_COMM_ID CM_F(4, 0, 32)
#define CM_APR_AP_STATUS CM_F(9, 0, 8)

/* Table 119 SIDR_REQ */
#define CM_SIDR_REQ_REQUEST_ID CM_F(0, 0, 32)
#define CM_SIDR_REQ_PKEY CM_F(4, 0, 16)
#define CM_SIDR_REQ_SERVICE_ID CM_F(8, 0, 64)
#define CM_SIDR_REQ_OFF_PRIVATE_DATA (MAD_HDR_SIZE + 16)
#define CM_SIDR_REQ_PRIVATE_DATA_SIZE 216

/* Table 120 SIDR_REP */
#define CM_SIDR_REP_REQUEST_ID CM_F(0, 0, 32)
#define CM_SIDR_REP_STATUS CM_F(4, 0, 8)
#define CM_SIDR_REP_QPN CM_F(8, 0, 24)
#define CM_SIDR_REP_SERVICE_ID CM_F(12, 0, 64)
#define CM_SIDR_REP_QKEY CM_F(20, 0, 32)
#define CM_SIDR_REP_OFF_PRIVATE_DATA (MAD_HDR_SIZE + 96)
#define CM_SIDR_REP_PRIVATE_DATA_SIZE 136

/* SIDR_REP status (kernel enum ib_cm_sidr_status). */
#define CM_SIDR_STATUS_SUCCESS 0
#define CM_SIDR_STATUS_UNSUPPORTED 1 /* no listener for the service ID */
#define CM_SIDR_STATUS_REJECT 2      /* the service provider rejected it */

/* REJ reasons used here (kernel enum ib_cm_rej_reason). */
#define CM_REJ_REASON_TIMEOUT 4
#define CM_REJ_ARI_CA_GUID_LEN 8 /* a timeout REJ's ARI: the CA GUID */
#define CM_REJ_REASON_INVALID_COMM_ID 6
#define CM_REJ_REASON_INVALID_SERVICE_ID 8
#define CM_REJ_REASON_STALE_CONN 10
#define CM_REJ_REASON_CONSUMER_DEFINED 28

/* Which message a REJ or MRA refers to (Message REJected / MRAed). */
#define CM_MSG_RESPONSE_REQ 0
#define CM_MSG_RESPONSE_REP 1
#define CM_MSG_RESPONSE_OTHER 2

/*
 * rdma_cm's private-data header in REQ and SIDR_REQ (kernel cma.c,
 * struct cma_hdr): version, ip_version in the high nibble, port, then
 * source and destination addresses as 16-byte in6 (IPv4 in the last 4).
 */
#define CMA_HDR_SIZE 36
#define CMA_VERSION 0x00
#define CMA_OFF_VERSION 0
#define CMA_OFF_IP_VERSION 1
#define CMA_OFF_PORT 2
#define CMA_OFF_SRC_ADDR 4
#define CMA_OFF_DST_ADDR 20
#define CMA_PS_TCP 0x0106
#define CMA_PS_UDP 0x0111

uint64_t cm_field_get(const uint8_t *mad, struct cm_field f);
void cm_field_set(uint8_t *mad, struct cm_field f, uint64_t value);

void cm_get_gid(const uint8_t *mad, size_t off, struct gid *out);
void cm_set_gid(uint8_t *mad, size_t off, const struct gid *gid);

/* Header accessors. */
static inline uint16_t cm_mad_attr_id(const uint8_t *mad)
{
	return (uint16_t)((mad[MAD_OFF_ATTR_ID] << 8) |
			  mad[MAD_OFF_ATTR_ID + 1]);
}

uint64_t cm_mad_tid(const uint8_t *mad);
void cm_mad_init(uint8_t *mad, uint16_t attr_id, uint64_t tid);
/* The common header of a Send in a MAD whose body is already filled. */
void cm_mad_set_header(uint8_t *mad, uint16_t attr_id, uint64_t tid);

/*
 * The wire table: for each CM message attribute, which ID names the
 * sender's side of the connection (Local Comm ID, or a SIDR_REQ's
 * Request ID), which names the receiver's (Remote Comm ID, or the Request
 * ID a SIDR_REP answers), which GIDs inside it must be the sender's own,
 * and where rdma_cm's private-data header sits.  Everything that reads
 * IDs or addresses out of a CM MAD goes through this table.
 */
#define CM_OWN_GIDS_MAX 2
struct cm_own_gid {
	uint16_t off;    /* absolute offset of the 16 bytes */
	uint8_t zero_ok; /* all-zero means "none" (no alternate path) */
	const char *name;
};

struct cm_attr_desc {
	uint16_t attr;
	uint8_t sidr; /* IDs are SIDR request IDs */
	uint8_t has_local, has_remote;
	struct cm_field local_id;  /* the sender's ID */
	struct cm_field remote_id; /* the receiver's ID */
	unsigned n_own_gids;
	struct cm_own_gid own_gids[CM_OWN_GIDS_MAX];
	uint16_t cma_hdr_off; /* 0: no rdma_cm header */
};

/* The entry for attr_id, or NULL for anything that is not a CM message. */
const struct cm_attr_desc *cm_attr_desc(uint16_t attr_id);

/* Where the Local and Remote Communication IDs sit (every connected-mode
 * attribute has Local at P+0 and Remote at P+4, REQ has only Local).
 * Return 1 and store the id when the attribute carries it, 0 if not
 * (SIDR request IDs are not comm IDs). */
int cm_mad_local_comm_id(const uint8_t *mad, uint32_t *id);
int cm_mad_remote_comm_id(const uint8_t *mad, uint32_t *id);
/* The sender's and receiver's IDs of any CM message, SIDR included
 * (0 when the attribute has none); and their setters. */
uint32_t cm_mad_sender_id(const uint8_t *mad);
uint32_t cm_mad_receiver_id(const uint8_t *mad);
void cm_mad_set_sender_id(uint8_t *mad, uint32_t id);
void cm_mad_set_receiver_id(uint8_t *mad, uint32_t id);

/*
 * MADs a CM sends on its own, as the kernel's cm.c builds them.  Each
 * fills a whole 256-byte MAD (method Send) with the given TID.
 */
/* REJ: reason, which message is rejected, and ARI bytes (may be NULL). */
void cm_build_rej(uint8_t *mad, uint64_t tid, uint32_t local_id,
		  uint32_t remote_id, unsigned msg_rejected, unsigned reason,
		  const uint8_t *ari, unsigned ari_len);
void cm_build_dreq(uint8_t *mad, uint64_t tid, uint32_t local_id,
		   uint32_t remote_id, uint32_t remote_qpn);
void cm_build_drep(uint8_t *mad, uint64_t tid, uint32_t local_id,
		   uint32_t remote_id);
void cm_build_sidr_rep(uint8_t *mad, uint64_t tid, uint32_t request_id,
		       unsigned status, uint64_t service_id);
/* MRA Service Timeout (4.096 us * 2^t) in milliseconds, rounded up. */
uint64_t cm_service_timeout_ms(unsigned t);
/* A CM timeout (a REQ's CM Response Timeout) as cm.c reads it
 * (cm_convert_to_ms(): 4.096 us * 2^t taken as 2^(t-8) ms, at least
 * 1 ms): the exponent of that power of two. */
unsigned cm_timeout_log2_ms(unsigned t);

/* Checks the common header for a CM Send MAD of a full 256 bytes.
 * Returns 0 or -EBADMSG (bad version/class), -EPROTO (bad method),
 * -EMSGSIZE (length). */
int cm_mad_validate(const uint8_t *mad, size_t len);

/*
 * A Get or Set addressed to the CM class (which only uses Send): fill
 * resp with the GetResp the spec asks for -- ClassPortInfo for a Get of
 * it, otherwise status "unsupported method/attribute" as the kernel's MAD
 * layer answers for classes nobody serves.  Returns 1 when req is such a
 * request, 0 otherwise.
 */
#define MAD_STATUS_UNSUPPORTED_METHOD_ATTR 0x000c
#define CM_CLASS_RESP_TIME_VALUE 20 /* 4.096 us * 2^20: about 4 s */
int cm_mad_class_response(const uint8_t *req, size_t len, uint8_t *resp);

/* rdma_cm's header in a REQ's or SIDR_REQ's private data (the table's
 * cma_hdr_off): source and destination as GIDs (IPv4 mapped), and port;
 * any pointer may be NULL.  -ENOENT when the attribute has none or it is
 * not there (not version 0, no IP version 4 or 6). */
int cm_mad_cma_addrs(const uint8_t *mad, struct gid *src, struct gid *dst,
		     uint16_t *port);
/* Destination GID of a SIDR_REQ from rdma_cm's private-data header.
 * Returns 0, or -ENOENT when the header is absent or not version 0. */
int cm_sidr_req_dst_gid(const uint8_t *mad, struct gid *out);
/* The same header at the start of REQ private data (both addresses). */
int cm_req_cma_addrs(const uint8_t *mad, struct gid *src, struct gid *dst,
		     uint16_t *port);

/* Fill rdma_cm's header at `pd` (CMA_HDR_SIZE bytes). */
void cma_hdr_build(uint8_t *pd, const struct gid *src, const struct gid *dst,
		   uint16_t port);

/* Service ID rdma_cm uses for a port space and port. */
static inline uint64_t rdma_service_id(uint16_t ps, uint16_t port)
{
	return ((uint64_t)ps << 16) | port;
}

#endif
