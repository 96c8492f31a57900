/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RDMACM_MUX_QEMU_MSG_H
#define RDMACM_MUX_QEMU_MSG_H

/*
 * The protocol of QEMU's removed contrib/rdmacm-mux, which every QEMU
 * from 5.0 to 9.0 with the pvrdma device speaks on its MAD chardev (see
 * rdmacm-mux-protocol(7), QEMU PROTOCOL).
 *
 * Every message, in both directions, is the same 360-byte C struct of an
 * x86_64 host (RdmaCmMuxMsg): host-endian 32-bit enums, no magic, no
 * version, no length field.
 *
 *   0    u32  msg_type    0 request, 1 response
 *   4    u32  op_code     0 register GID, 1 unregister GID, 2 MAD
 *   8    16   sgid        the GID the request is about (REG/UNREG), the
 *                         sender's GID (MAD from QEMU), or the GID an
 *                         inbound MAD was routed to (MAD to QEMU)
 *   24   u32  err_code    in responses: 0 OK, 1 EINVAL, 2 EEXIST,
 *                         3 EACCES, 4 ENOTFOUND
 *   28   4    padding
 *   32   i32  umad_len    MAD bytes in mad[]
 *   36   64   struct ib_user_mad (agent_id, status, timeout_ms, retries,
 *                         length, then ib_mad_addr: qpn and qkey big
 *                         endian, lid, sl, path_bits, grh_present,
 *                         gid_index, hop_limit, traffic_class, gid[16],
 *                         flow_label, pkey_index)
 *   100  256  mad
 *   356  4    padding
 *
 * This codec is pure: no I/O, no global state.
 */
#include <stddef.h>
#include <stdint.h>

#define QEMU_MSG_SIZE 360
#define QEMU_MSG_MAD_MAX 256

enum qemu_msg_type { QEMU_MSG_REQ = 0, QEMU_MSG_RESP = 1 };
enum qemu_msg_op {
	QEMU_MSG_OP_REG = 0,
	QEMU_MSG_OP_UNREG = 1,
	QEMU_MSG_OP_MAD = 2
};
enum qemu_msg_err {
	QEMU_MSG_OK = 0,
	QEMU_MSG_EINVAL = 1,
	QEMU_MSG_EEXIST = 2,
	QEMU_MSG_EACCES = 3,
	QEMU_MSG_ENOTFOUND = 4,
};

/* ib_mad_addr as QEMU fills it (network order fields already swapped). */
struct qemu_msg_addr {
	uint32_t qpn;
	uint32_t qkey;
	uint16_t lid;
	uint8_t sl;
	uint8_t grh_present;
	uint8_t gid_index;
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint8_t gid[16];
	uint32_t flow_label;
	uint16_t pkey_index;
};

struct qemu_msg {
	uint32_t type;
	uint32_t op;
	uint8_t sgid[16];
	uint32_t err;
	int32_t umad_len;
	struct qemu_msg_addr addr;
	uint8_t mad[QEMU_MSG_MAD_MAX];
};

/* Decode one whole message.  Returns 0, or
 * -EBADMSG     a type other than request (clients send only requests),
 * -EOPNOTSUPP  an unknown op code,
 * -EMSGSIZE    a MAD request whose umad_len is not 1..256. */
int qemu_msg_decode(const uint8_t *buf, struct qemu_msg *out);
/* Encode one message into QEMU_MSG_SIZE bytes (padding zeroed). */
void qemu_msg_encode(const struct qemu_msg *m, uint8_t *buf);
/* The response to a request: the request echoed with type RESP, err set,
 * and the MAD cleared.  Its op code is never MAD: QEMU's asynchronous
 * reader tests (type != REQ && op != MAD) where it meant ||, so a
 * response that reached it with op MAD would be taken for an inbound
 * MAD and handed to the guest. */
void qemu_msg_response(const struct qemu_msg *req, enum qemu_msg_err err,
		       struct qemu_msg *resp);

#endif
