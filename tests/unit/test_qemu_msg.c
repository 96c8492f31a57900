// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The codec of QEMU's rdmacm-mux protocol, checked against the C struct
 * QEMU and the old daemon exchanged (built here from rdma-core's own
 * headers, as contrib/rdmacm-mux/rdmacm-mux.h declared it). */
#include <stdlib.h>
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <infiniband/umad.h>
#include <infiniband/verbs.h>

#include "protocol/qemu_msg.h"

/* QEMU's declarations, field for field. */
enum qemu_type { QEMU_REQ = 0, QEMU_RESP = 1 };
enum qemu_op { QEMU_REG = 0, QEMU_UNREG = 1, QEMU_MAD = 2 };
enum qemu_err {
	QEMU_OK = 0,
	QEMU_EINVAL = 1,
	QEMU_EEXIST = 2,
	QEMU_EACCES = 3,
	QEMU_ENOTFOUND = 4
};
struct RdmaCmMuxHdr {
	enum qemu_type msg_type;
	enum qemu_op op_code;
	union ibv_gid sgid;
	enum qemu_err err_code;
};
struct RdmaCmUMad {
	struct ib_user_mad hdr;
	char mad[256];
};
struct RdmaCmMuxMsg {
	struct RdmaCmMuxHdr hdr;
	int umad_len;
	struct RdmaCmUMad umad;
};

static void test_layout_is_qemus(void **state)
{
	(void)state;
	assert_int_equal(sizeof(struct RdmaCmMuxMsg), QEMU_MSG_SIZE);
	assert_int_equal(offsetof(struct RdmaCmMuxMsg, umad_len), 32);
	assert_int_equal(offsetof(struct RdmaCmMuxMsg, umad.hdr.addr), 56);
	assert_int_equal(offsetof(struct RdmaCmMuxMsg, umad.mad), 100);
}

/* A MAD request as QEMU's mad_send() builds it decodes field by field. */
static void test_decode_qemu_mad(void **state)
{
	struct RdmaCmMuxMsg q;
	struct qemu_msg m;
	int i;

	(void)state;
	memset(&q, 0, sizeof(q));
	q.hdr.msg_type = QEMU_REQ;
	q.hdr.op_code = QEMU_MAD;
	for (i = 0; i < 16; i++)
		q.hdr.sgid.raw[i] = (uint8_t)(0xa0 + i);
	q.umad_len = 256;
	q.umad.hdr.addr.qpn = htonl(1);
	q.umad.hdr.addr.qkey = htonl(0x80010000);
	q.umad.hdr.addr.lid = htons(0x1234);
	q.umad.hdr.addr.sl = 3;
	q.umad.hdr.addr.grh_present = 1;
	q.umad.hdr.addr.gid_index = 7;
	q.umad.hdr.addr.hop_limit = 0xff;
	q.umad.hdr.addr.traffic_class = 0x20;
	for (i = 0; i < 16; i++)
		q.umad.hdr.addr.gid[i] = (uint8_t)i;
	q.umad.hdr.addr.flow_label = htonl(0x12345);
	q.umad.hdr.addr.pkey_index = 2;
	for (i = 0; i < 256; i++)
		q.umad.mad[i] = (char)i;
	assert_int_equal(qemu_msg_decode((uint8_t *)&q, &m), 0);
	assert_int_equal(m.type, QEMU_MSG_REQ);
	assert_int_equal(m.op, QEMU_MSG_OP_MAD);
	assert_memory_equal(m.sgid, q.hdr.sgid.raw, 16);
	assert_int_equal(m.umad_len, 256);
	assert_int_equal(m.addr.qpn, 1);
	assert_int_equal(m.addr.qkey, 0x80010000);
	assert_int_equal(m.addr.lid, 0x1234);
	assert_int_equal(m.addr.sl, 3);
	assert_int_equal(m.addr.grh_present, 1);
	assert_int_equal(m.addr.gid_index, 7);
	assert_int_equal(m.addr.hop_limit, 0xff);
	assert_int_equal(m.addr.traffic_class, 0x20);
	assert_memory_equal(m.addr.gid, q.umad.hdr.addr.gid, 16);
	assert_int_equal(m.addr.flow_label, 0x12345);
	assert_int_equal(m.addr.pkey_index, 2);
	assert_memory_equal(m.mad, q.umad.mad, 256);
}

/* What the daemon sends reads back in QEMU's struct as QEMU reads it. */
static void test_encode_reads_as_qemus(void **state)
{
	struct qemu_msg m = { .type = QEMU_MSG_REQ,
			      .op = QEMU_MSG_OP_MAD,
			      .umad_len = 256 };
	uint8_t buf[QEMU_MSG_SIZE];
	struct RdmaCmMuxMsg q;

	(void)state;
	m.sgid[15] = 0x11;
	m.addr.gid[15] = 0x22;
	m.addr.qpn = 1;
	m.addr.grh_present = 1;
	m.mad[0] = 1;
	m.mad[255] = 0x55;
	qemu_msg_encode(&m, buf);
	memcpy(&q, buf, sizeof(q));
	assert_int_equal(q.hdr.msg_type, QEMU_REQ);
	assert_int_equal(q.hdr.op_code, QEMU_MAD);
	assert_int_equal(q.hdr.sgid.raw[15], 0x11);
	assert_int_equal(q.umad_len, 256);
	assert_int_equal(q.umad.hdr.addr.gid[15], 0x22);
	assert_int_equal(ntohl(q.umad.hdr.addr.qpn), 1);
	assert_int_equal(q.umad.hdr.addr.grh_present, 1);
	assert_int_equal(q.umad.hdr.length, 256);
	assert_int_equal((uint8_t)q.umad.mad[255], 0x55);
}

static void test_malformed(void **state)
{
	struct RdmaCmMuxMsg q;
	struct qemu_msg m;

	(void)state;
	memset(&q, 0, sizeof(q));
	q.hdr.msg_type = QEMU_RESP;
	assert_int_equal(qemu_msg_decode((uint8_t *)&q, &m), -EBADMSG);
	q.hdr.msg_type = 7;
	assert_int_equal(qemu_msg_decode((uint8_t *)&q, &m), -EBADMSG);
	q.hdr.msg_type = QEMU_REQ;
	q.hdr.op_code = 3;
	assert_int_equal(qemu_msg_decode((uint8_t *)&q, &m), -EOPNOTSUPP);
	q.hdr.op_code = QEMU_MAD;
	q.umad_len = 0;
	assert_int_equal(qemu_msg_decode((uint8_t *)&q, &m), -EMSGSIZE);
	q.umad_len = 257;
	assert_int_equal(qemu_msg_decode((uint8_t *)&q, &m), -EMSGSIZE);
	q.umad_len = -1;
	assert_int_equal(qemu_msg_decode((uint8_t *)&q, &m), -EMSGSIZE);
	/* REG and UNREG carry no MAD: its length does not matter. */
	q.hdr.op_code = QEMU_REG;
	assert_int_equal(qemu_msg_decode((uint8_t *)&q, &m), 0);
}

/* A response QEMU's buggy asynchronous reader would skip: never op MAD. */
static void test_response_never_looks_like_a_mad(void **state)
{
	struct qemu_msg req = { .type = QEMU_MSG_REQ,
				.op = QEMU_MSG_OP_MAD,
				.umad_len = 256 },
			resp;
	uint8_t buf[QEMU_MSG_SIZE];
	struct RdmaCmMuxMsg q;

	(void)state;
	req.mad[0] = 1;
	qemu_msg_response(&req, QEMU_MSG_EACCES, &resp);
	qemu_msg_encode(&resp, buf);
	memcpy(&q, buf, sizeof(q));
	assert_int_equal(q.hdr.msg_type, QEMU_RESP);
	assert_int_equal(q.hdr.err_code, QEMU_EACCES);
	/* QEMU: if (msg_type != REQ && op_code != MAD) skip */
	assert_true(q.hdr.msg_type != QEMU_REQ && q.hdr.op_code != QEMU_MAD);
	assert_int_equal(q.umad_len, 0);
	req.op = QEMU_MSG_OP_REG;
	qemu_msg_response(&req, QEMU_MSG_OK, &resp);
	assert_int_equal(resp.op, QEMU_MSG_OP_REG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layout_is_qemus),
		cmocka_unit_test(test_decode_qemu_mad),
		cmocka_unit_test(test_encode_reads_as_qemus),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_response_never_looks_like_a_mad),
	};

	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("qemu_msg", tests, NULL, NULL);
}
