// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* CM MAD field table against ../shared/docs/cm-wire.md §2.3: every field
 * at its payload offset (P+n), width and bit position. */
#include <stdlib.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/cm_mad.h"
#include "common/wire.h"

struct field_case {
	const char *name;
	struct cm_field f;
	unsigned p_off; /* documented payload offset */
	unsigned bit;
	unsigned width;
};

#define FC(n, f, p, b, w)     \
	{                     \
		n, f, p, b, w \
	}

static const struct field_case fields[] = {
	/* REQ, Table 106 */
	FC("REQ local comm id", CM_REQ_LOCAL_COMM_ID, 0, 0, 32),
	FC("REQ service id", CM_REQ_SERVICE_ID, 8, 0, 64),
	FC("REQ local CA GUID", CM_REQ_LOCAL_CA_GUID, 16, 0, 64),
	FC("REQ local qkey", CM_REQ_LOCAL_QKEY, 28, 0, 32),
	FC("REQ local qpn", CM_REQ_LOCAL_QPN, 32, 0, 24),
	FC("REQ remote cm resp timeout", CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT, 43,
	   0, 5),
	FC("REQ starting psn", CM_REQ_STARTING_PSN, 44, 0, 24),
	FC("REQ local cm resp timeout", CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT, 47, 0,
	   5),
	FC("REQ retry count", CM_REQ_RETRY_COUNT, 47, 5, 3),
	FC("REQ pkey", CM_REQ_PKEY, 48, 0, 16),
	FC("REQ max cm retries", CM_REQ_MAX_CM_RETRIES, 51, 0, 4),
	FC("REQ primary local lid", CM_REQ_PRIMARY_LOCAL_LID, 52, 0, 16),
	FC("REQ primary remote lid", CM_REQ_PRIMARY_REMOTE_LID, 54, 0, 16),
	FC("REQ flow label", CM_REQ_PRIMARY_FLOW_LABEL, 88, 0, 20),
	FC("REQ traffic class", CM_REQ_PRIMARY_TRAFFIC_CLASS, 92, 0, 8),
	FC("REQ hop limit", CM_REQ_PRIMARY_HOP_LIMIT, 93, 0, 8),
	FC("REQ SL", CM_REQ_PRIMARY_SL, 94, 0, 4),
	FC("REQ local ack timeout", CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT, 95, 0, 5),
	/* MRA, Table 107 */
	FC("MRA local comm id", CM_MRA_LOCAL_COMM_ID, 0, 0, 32),
	FC("MRA remote comm id", CM_MRA_REMOTE_COMM_ID, 4, 0, 32),
	FC("MRA message MRAed", CM_MRA_MESSAGE_MRAED, 8, 0, 2),
	FC("MRA service timeout", CM_MRA_SERVICE_TIMEOUT, 9, 0, 5),
	/* REJ, Table 108 */
	FC("REJ local comm id", CM_REJ_LOCAL_COMM_ID, 0, 0, 32),
	FC("REJ remote comm id", CM_REJ_REMOTE_COMM_ID, 4, 0, 32),
	FC("REJ message rejected", CM_REJ_MESSAGE_REJECTED, 8, 0, 2),
	FC("REJ ARI length", CM_REJ_ARI_LENGTH, 9, 0, 7),
	FC("REJ reason", CM_REJ_REASON, 10, 0, 16),
	/* REP, Table 110 */
	FC("REP local comm id", CM_REP_LOCAL_COMM_ID, 0, 0, 32),
	FC("REP remote comm id", CM_REP_REMOTE_COMM_ID, 4, 0, 32),
	FC("REP local qkey", CM_REP_LOCAL_QKEY, 8, 0, 32),
	FC("REP local qpn", CM_REP_LOCAL_QPN, 12, 0, 24),
	FC("REP starting psn", CM_REP_STARTING_PSN, 20, 0, 24),
	FC("REP local CA GUID", CM_REP_LOCAL_CA_GUID, 28, 0, 64),
	/* RTU, DREQ, DREP: Tables 111-113 */
	FC("RTU local comm id", CM_RTU_LOCAL_COMM_ID, 0, 0, 32),
	FC("RTU remote comm id", CM_RTU_REMOTE_COMM_ID, 4, 0, 32),
	FC("DREQ local comm id", CM_DREQ_LOCAL_COMM_ID, 0, 0, 32),
	FC("DREQ remote comm id", CM_DREQ_REMOTE_COMM_ID, 4, 0, 32),
	FC("DREQ remote qpn", CM_DREQ_REMOTE_QPN, 8, 0, 24),
	FC("DREP local comm id", CM_DREP_LOCAL_COMM_ID, 0, 0, 32),
	FC("DREP remote comm id", CM_DREP_REMOTE_COMM_ID, 4, 0, 32),
	/* LAP, APR: Tables 115-116 */
	FC("LAP local comm id", CM_LAP_LOCAL_COMM_ID, 0, 0, 32),
	FC("LAP remote comm id", CM_LAP_REMOTE_COMM_ID, 4, 0, 32),
	FC("LAP remote qpn", CM_LAP_REMOTE_QPN, 12, 0, 24),
	FC("APR local comm id", CM_APR_LOCAL_COMM_ID, 0, 0, 32),
	FC("APR remote comm id", CM_APR_REMOTE_COMM_ID, 4, 0, 32),
	FC("APR AP status", CM_APR_AP_STATUS, 9, 0, 8),
	/* SIDR, Tables 119-120 */
	FC("SIDR_REQ request id", CM_SIDR_REQ_REQUEST_ID, 0, 0, 32),
	FC("SIDR_REQ pkey", CM_SIDR_REQ_PKEY, 4, 0, 16),
	FC("SIDR_REQ service id", CM_SIDR_REQ_SERVICE_ID, 8, 0, 64),
	FC("SIDR_REP request id", CM_SIDR_REP_REQUEST_ID, 0, 0, 32),
	FC("SIDR_REP status", CM_SIDR_REP_STATUS, 4, 0, 8),
	FC("SIDR_REP qpn", CM_SIDR_REP_QPN, 8, 0, 24),
	FC("SIDR_REP service id", CM_SIDR_REP_SERVICE_ID, 12, 0, 64),
	FC("SIDR_REP qkey", CM_SIDR_REP_QKEY, 20, 0, 32),
};

static int bit_is_set(const uint8_t *mad, unsigned absbit)
{
	return (mad[absbit / 8] >> (7 - absbit % 8)) & 1;
}

static void test_every_field_at_its_offset(void **state)
{
	uint8_t mad[MAD_SIZE];
	size_t i;
	unsigned b, first, last;
	uint64_t max, pattern;

	(void)state;
	for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		const struct field_case *c = &fields[i];

		assert_int_equal(c->f.byte, MAD_HDR_SIZE + c->p_off);
		assert_int_equal(c->f.bit, c->bit);
		assert_int_equal(c->f.width, c->width);
		/* All ones lands on exactly the documented bits. */
		max = c->width == 64 ? ~UINT64_C(0)
				     : (UINT64_C(1) << c->width) - 1;
		memset(mad, 0, sizeof(mad));
		cm_field_set(mad, c->f, max);
		first = (MAD_HDR_SIZE + c->p_off) * 8 + c->bit;
		last = first + c->width;
		for (b = 0; b < MAD_SIZE * 8; b++)
			assert_int_equal(bit_is_set(mad, b),
					 b >= first && b < last);
		assert_true(cm_field_get(mad, c->f) == max);
		/* Setting zero over a full MAD clears only the field. */
		memset(mad, 0xff, sizeof(mad));
		cm_field_set(mad, c->f, 0);
		for (b = 0; b < MAD_SIZE * 8; b++)
			assert_int_equal(bit_is_set(mad, b),
					 !(b >= first && b < last));
		pattern = UINT64_C(0x9e3779b97f4a7c15) & max;
		cm_field_set(mad, c->f, pattern);
		assert_true(cm_field_get(mad, c->f) == pattern);
	}
}

static void test_gid_and_private_data_offsets(void **state)
{
	(void)state;
	assert_int_equal(CM_REQ_OFF_PRIMARY_LOCAL_GID, 24 + 56);
	assert_int_equal(CM_REQ_OFF_PRIMARY_REMOTE_GID, 24 + 72);
	assert_int_equal(CM_REQ_OFF_ALT_LOCAL_GID, 24 + 100);
	assert_int_equal(CM_REQ_OFF_ALT_REMOTE_GID, 24 + 116);
	assert_int_equal(CM_REQ_OFF_PRIVATE_DATA, 24 + 140);
	assert_int_equal(CM_REQ_PRIVATE_DATA_SIZE, 92);
	assert_int_equal(CM_MRA_OFF_PRIVATE_DATA, 24 + 10);
	assert_int_equal(CM_REJ_OFF_ARI, 24 + 12);
	assert_int_equal(CM_REJ_OFF_PRIVATE_DATA, 24 + 84);
	assert_int_equal(CM_REP_OFF_PRIVATE_DATA, 24 + 36);
	assert_int_equal(CM_LAP_OFF_ALT_LOCAL_GID, 24 + 24);
	assert_int_equal(CM_LAP_OFF_ALT_REMOTE_GID, 24 + 40);
	assert_int_equal(CM_SIDR_REQ_OFF_PRIVATE_DATA, 24 + 16);
	/* The interface id of the REQ's remote GID is QEMU's
	 * CM_REQ_DGID_POS 80 (payload-relative). */
	assert_int_equal(CM_REQ_OFF_PRIMARY_REMOTE_GID + 8 - MAD_HDR_SIZE, 80);
}

static void test_header(void **state)
{
	uint8_t mad[MAD_SIZE];

	(void)state;
	cm_mad_init(mad, CM_ATTR_DREQ, UINT64_C(0x0102030405060708));
	assert_int_equal(mad[0], 1);
	assert_int_equal(mad[1], 0x07);
	assert_int_equal(mad[2], 2);
	assert_int_equal(mad[3], 0x03);
	assert_true(wire_get64(mad + 8) == UINT64_C(0x0102030405060708));
	assert_int_equal(wire_get16(mad + 16), 0x0015);
	assert_true(cm_mad_tid(mad) == UINT64_C(0x0102030405060708));
	assert_int_equal(cm_mad_attr_id(mad), CM_ATTR_DREQ);
	assert_int_equal(cm_mad_validate(mad, MAD_SIZE), 0);
	assert_int_equal(cm_mad_validate(mad, 255), -EMSGSIZE);
	mad[1] = 0x04;
	assert_int_equal(cm_mad_validate(mad, MAD_SIZE), -EBADMSG);
	mad[1] = 0x07;
	mad[2] = 1;
	assert_int_equal(cm_mad_validate(mad, MAD_SIZE), -EBADMSG);
	mad[2] = 2;
	mad[0] = 2;
	assert_int_equal(cm_mad_validate(mad, MAD_SIZE), -EBADMSG);
	mad[0] = 1;
	mad[3] = MAD_METHOD_GET;
	assert_int_equal(cm_mad_validate(mad, MAD_SIZE), -EPROTO);
}

static void test_comm_ids_per_attribute(void **state)
{
	static const struct {
		uint16_t attr;
		int has_local, has_remote;
	} cases[] = {
		{ CM_ATTR_REQ, 1, 0 },      { CM_ATTR_MRA, 1, 1 },
		{ CM_ATTR_REJ, 1, 1 },      { CM_ATTR_REP, 1, 1 },
		{ CM_ATTR_RTU, 1, 1 },      { CM_ATTR_DREQ, 1, 1 },
		{ CM_ATTR_DREP, 1, 1 },     { CM_ATTR_LAP, 1, 1 },
		{ CM_ATTR_APR, 1, 1 },      { CM_ATTR_SIDR_REQ, 0, 0 },
		{ CM_ATTR_SIDR_REP, 0, 0 }, { CM_ATTR_CLASS_PORT_INFO, 0, 0 },
	};
	uint8_t mad[MAD_SIZE];
	uint32_t id;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cm_mad_init(mad, cases[i].attr, 1);
		wire_put32(mad + 24, 0xaabbccdd);
		wire_put32(mad + 28, 0x11223344);
		id = 0;
		assert_int_equal(cm_mad_local_comm_id(mad, &id),
				 cases[i].has_local);
		if (cases[i].has_local)
			assert_int_equal(id, 0xaabbccdd);
		id = 0;
		assert_int_equal(cm_mad_remote_comm_id(mad, &id),
				 cases[i].has_remote);
		if (cases[i].has_remote)
			assert_int_equal(id, 0x11223344);
	}
}

static void test_attr_names_and_index(void **state)
{
	(void)state;
	assert_string_equal(cm_attr_name(CM_ATTR_REQ), "REQ");
	assert_string_equal(cm_attr_name(CM_ATTR_SIDR_REP), "SIDR_REP");
	assert_string_equal(cm_attr_name(CM_ATTR_APR), "APR");
	assert_string_equal(cm_attr_name(0x001b), "other");
	assert_int_equal(cm_attr_index(CM_ATTR_CLASS_PORT_INFO),
			 CM_IDX_CLASS_PORT_INFO);
	assert_string_equal(cm_attr_index_name(CM_IDX_MAX), "invalid");
}

static void test_rdma_cm_header(void **state)
{
	uint8_t mad[MAD_SIZE];
	struct gid a, b, src, dst;
	uint16_t port;

	(void)state;
	/* IPv4: dst_addr's last 4 bytes at PD+20+12; REQ PD is P+140, so
	 * the destination is at P+160 (M+184), SIDR at P+36. */
	gid_parse("10.77.0.1", &a);
	gid_parse("10.77.0.2", &b);
	cm_mad_init(mad, CM_ATTR_REQ, 1);
	cma_hdr_build(mad + CM_REQ_OFF_PRIVATE_DATA, &a, &b, 7471);
	assert_int_equal(mad[CM_REQ_OFF_PRIVATE_DATA + 1], 0x40);
	assert_int_equal(wire_get16(mad + CM_REQ_OFF_PRIVATE_DATA + 2), 7471);
	assert_memory_equal(mad + 24 + 160 + 12, b.raw + 12, 4);
	assert_int_equal(cm_req_cma_addrs(mad, &src, &dst, &port), 0);
	assert_int_equal(gid_cmp(&src, &a), 0);
	assert_int_equal(gid_cmp(&dst, &b), 0);
	assert_int_equal(port, 7471);

	gid_parse("fd00::1", &a);
	gid_parse("fd00::2", &b);
	cm_mad_init(mad, CM_ATTR_SIDR_REQ, 1);
	cma_hdr_build(mad + CM_SIDR_REQ_OFF_PRIVATE_DATA, &a, &b, 1);
	assert_memory_equal(mad + 24 + 36, b.raw, 16);
	assert_int_equal(cm_sidr_req_dst_gid(mad, &dst), 0);
	assert_int_equal(gid_cmp(&dst, &b), 0);
	/* The low 8 bytes of the destination start at SIDR P+44 (QEMU's
	 * CM_SIDR_REQ_DGID_POS). */
	assert_memory_equal(mad + 24 + 44, b.raw + 8, 8);
	/* Not rdma_cm's header: no destination. */
	mad[CM_SIDR_REQ_OFF_PRIVATE_DATA] = 1;
	assert_int_equal(cm_sidr_req_dst_gid(mad, &dst), -ENOENT);
	mad[CM_SIDR_REQ_OFF_PRIVATE_DATA] = 0;
	mad[CM_SIDR_REQ_OFF_PRIVATE_DATA + 1] = 0x50;
	assert_int_equal(cm_sidr_req_dst_gid(mad, &dst), -ENOENT);
	assert_true(rdma_service_id(CMA_PS_TCP, 7471) == 0x01061d2f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_field_at_its_offset),
		cmocka_unit_test(test_gid_and_private_data_offsets),
		cmocka_unit_test(test_header),
		cmocka_unit_test(test_comm_ids_per_attribute),
		cmocka_unit_test(test_attr_names_and_index),
		cmocka_unit_test(test_rdma_cm_header),
	};

	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("cm_mad", tests, NULL, NULL);
}
