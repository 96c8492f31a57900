// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The GID registry and the router, driven with a fake clock. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../../mux/mux.h"
#include "../../common/wire.h"

#define A 11
#define B 22
#define C 33

static struct router *new_router(void)
{
	struct router_limits lim = {
		.max_gids_per_client = 4,
		.max_comm_ids_per_client = 8,
		.timewait_ms = 1000,
	};
	struct router *r = router_new(&lim);

	assert_non_null(r);
	return r;
}

static struct gid G(const char *s)
{
	struct gid g;

	assert_int_equal(gid_parse(s, &g), 0);
	return g;
}

static void mad_with_ids(uint8_t *mad, uint16_t attr, uint32_t local,
			 uint32_t remote)
{
	cm_mad_init(mad, attr, 1);
	wire_put32(mad + 24, local);
	wire_put32(mad + 28, remote);
}

static void req_to(uint8_t *mad, uint32_t local, const char *dst)
{
	struct gid d = G(dst), s = G("fd00::99");

	cm_mad_init(mad, CM_ATTR_REQ, 1);
	cm_field_set(mad, CM_REQ_LOCAL_COMM_ID, local);
	cm_set_gid(mad, CM_REQ_OFF_PRIMARY_LOCAL_GID, &s);
	cm_set_gid(mad, CM_REQ_OFF_PRIMARY_REMOTE_GID, &d);
}

static int inbound(struct router *r, unsigned port, const uint8_t *mad,
		   uint64_t now, uint64_t *client)
{
	*client = 0;
	return router_inbound(r, port, mad, MAD_SIZE, now, client);
}

static void test_gid_registry(void **state)
{
	struct router *r = new_router();
	struct gid g1 = G("fd00::1"), g2 = G("fd00::2");
	struct router_counts rc;

	(void)state;
	assert_int_equal(router_register_gid(r, 0, &g1, A), 0);
	assert_int_equal(router_register_gid(r, 0, &g1, A), 0);     /* idempotent */
	assert_int_equal(router_register_gid(r, 0, &g1, B), -EEXIST);
	/* Same GID on another port is another key. */
	assert_int_equal(router_register_gid(r, 1, &g1, B), 0);
	assert_true(router_owns_gid(r, 0, &g1, A));
	assert_false(router_owns_gid(r, 0, &g1, B));
	assert_true(router_gid_owner(r, 1, &g1) == B);
	assert_int_equal(router_unregister_gid(r, 0, &g1, B), -EACCES);
	assert_int_equal(router_unregister_gid(r, 0, &g2, A), -ENOENT);
	assert_int_equal(router_unregister_gid(r, 0, &g1, A), 0);
	assert_true(router_gid_owner(r, 0, &g1) == 0);
	assert_int_equal(router_register_gid(r, 0, &g1, B), 0);
	router_counts(r, &rc);
	assert_int_equal(rc.gids, 2);
	router_purge_client(r, B);
	router_counts(r, &rc);
	assert_int_equal(rc.gids, 0);
	router_free(r);
}

static void test_gid_full_128_bits(void **state)
{
	struct router *r = new_router();
	struct gid a = G("fd00:1::5"), b = G("fd00:2::5");
	uint8_t mad[MAD_SIZE];
	uint64_t who;

	(void)state;
	/* Same interface id, different subnet prefix: two owners. */
	assert_int_equal(router_register_gid(r, 0, &a, A), 0);
	assert_int_equal(router_register_gid(r, 0, &b, B), 0);
	req_to(mad, 5, "fd00:1::5");
	assert_int_equal(inbound(r, 0, mad, 0, &who), 0);
	assert_true(who == A);
	req_to(mad, 5, "fd00:2::5");
	assert_int_equal(inbound(r, 0, mad, 0, &who), 0);
	assert_true(who == B);
	req_to(mad, 5, "fd00:3::5");
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_DROP(DROP_UNKNOWN_GID));
	/* A REQ on another port does not match port 0's GID. */
	req_to(mad, 5, "fd00:1::5");
	assert_int_equal(inbound(r, 1, mad, 0, &who), ROUTER_DROP(DROP_UNKNOWN_GID));
	router_free(r);
}

static void test_gid_quota(void **state)
{
	struct router *r = new_router();
	char text[32];
	struct gid g;
	int i;

	(void)state;
	for (i = 0; i < 4; i++) {
		snprintf(text, sizeof(text), "fd00::%d", i + 1);
		g = G(text);
		assert_int_equal(router_register_gid(r, 0, &g, A), 0);
	}
	g = G("fd00::77");
	assert_int_equal(router_register_gid(r, 0, &g, A), -ENOSPC);
	assert_int_equal(router_register_gid(r, 0, &g, B), 0);
	router_free(r);
}

static void test_sidr_routing(void **state)
{
	struct router *r = new_router();
	struct gid a = G("10.0.0.1"), b = G("10.0.0.2");
	uint8_t mad[MAD_SIZE];
	uint64_t who;

	(void)state;
	assert_int_equal(router_register_gid(r, 0, &b, B), 0);
	cm_mad_init(mad, CM_ATTR_SIDR_REQ, 1);
	cm_field_set(mad, CM_SIDR_REQ_REQUEST_ID, 0x42);
	cma_hdr_build(mad + CM_SIDR_REQ_OFF_PRIVATE_DATA, &a, &b, 4791);
	assert_int_equal(inbound(r, 0, mad, 0, &who), 0);
	assert_true(who == B);
	/* Without rdma_cm's header it cannot be routed. */
	mad[CM_SIDR_REQ_OFF_PRIVATE_DATA + 1] = 0;
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_DROP(DROP_NO_CMA_HDR));

	/* SIDR_REP by the request id the client sent. */
	cm_mad_init(mad, CM_ATTR_SIDR_REQ, 1);
	cm_field_set(mad, CM_SIDR_REQ_REQUEST_ID, 0x77);
	assert_int_equal(router_outbound(r, 0, A, mad, 0), 0);
	cm_mad_init(mad, CM_ATTR_SIDR_REQ, 1);
	cm_field_set(mad, CM_SIDR_REQ_REQUEST_ID, 0x77);
	assert_int_equal(router_outbound(r, 0, B, mad, 0), -EADDRINUSE);
	cm_mad_init(mad, CM_ATTR_SIDR_REP, 1);
	cm_field_set(mad, CM_SIDR_REP_REQUEST_ID, 0x77);
	assert_int_equal(inbound(r, 0, mad, 10, &who), 0);
	assert_true(who == A);
	cm_field_set(mad, CM_SIDR_REP_REQUEST_ID, 0x78);
	assert_int_equal(inbound(r, 0, mad, 10, &who),
			 ROUTER_DROP(DROP_UNKNOWN_REQUEST_ID));
	/* The answered request drains, then is gone. */
	cm_field_set(mad, CM_SIDR_REP_REQUEST_ID, 0x77);
	assert_int_equal(inbound(r, 0, mad, 500, &who), 0);
	assert_int_equal(router_expire(r, 1499), 0);
	assert_int_equal(router_expire(r, 1500), 1);
	assert_int_equal(inbound(r, 0, mad, 1600, &who),
			 ROUTER_DROP(DROP_UNKNOWN_REQUEST_ID));
	router_free(r);
}

/* Every attribute that carries a Remote Comm ID routes by it. */
static void test_comm_id_routing_every_attribute(void **state)
{
	static const uint16_t attrs[] = { CM_ATTR_MRA, CM_ATTR_REJ, CM_ATTR_REP,
		CM_ATTR_RTU, CM_ATTR_DREQ, CM_ATTR_DREP, CM_ATTR_LAP, CM_ATTR_APR };
	struct router *r = new_router();
	uint8_t mad[MAD_SIZE];
	uint64_t who;
	size_t i;

	(void)state;
	req_to(mad, 0x1000, "fd00::2");
	assert_int_equal(router_outbound(r, 0, A, mad, 0), 0);
	mad_with_ids(mad, CM_ATTR_REP, 0x2000, 0x9999);
	assert_int_equal(router_outbound(r, 0, B, mad, 0), 0);
	for (i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
		mad_with_ids(mad, attrs[i], 0x5555, 0x1000);
		assert_int_equal(inbound(r, 0, mad, 0, &who), 0);
		assert_true(who == A);
		/* Re-claim after REJ/DREP drained it. */
		req_to(mad, 0x1000, "fd00::2");
		assert_int_equal(router_outbound(r, 0, A, mad, 0), 0);
		mad_with_ids(mad, attrs[i], 0x5555, 0x2000);
		assert_int_equal(inbound(r, 0, mad, 0, &who), 0);
		assert_true(who == B);
		mad_with_ids(mad, CM_ATTR_REP, 0x2000, 0x9999);
		assert_int_equal(router_outbound(r, 0, B, mad, 0), 0);
		mad_with_ids(mad, attrs[i], 0x5555, 0x3000);
		assert_int_equal(inbound(r, 0, mad, 0, &who),
				 ROUTER_DROP(DROP_UNKNOWN_COMM_ID));
		/* Remote Comm ID 0 (e.g. a timeout REJ) has no owner. */
		mad_with_ids(mad, attrs[i], 0x5555, 0);
		assert_int_equal(inbound(r, 0, mad, 0, &who),
				 ROUTER_DROP(DROP_ZERO_COMM_ID));
		assert_true(who == 0);
	}
	router_free(r);
}

static void test_unroutable(void **state)
{
	struct router *r = new_router();
	uint8_t mad[MAD_SIZE];
	uint64_t who;

	(void)state;
	cm_mad_init(mad, CM_ATTR_CLASS_PORT_INFO, 1);
	assert_int_equal(inbound(r, 0, mad, 0, &who),
			 ROUTER_DROP(DROP_UNSUPPORTED_ATTR));
	cm_mad_init(mad, 0x001b, 1);
	assert_int_equal(inbound(r, 0, mad, 0, &who),
			 ROUTER_DROP(DROP_UNSUPPORTED_ATTR));
	cm_mad_init(mad, CM_ATTR_REQ, 1);
	mad[1] = 0x04;
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_DROP(DROP_NOT_CM));
	cm_mad_init(mad, CM_ATTR_REQ, 1);
	mad[3] = MAD_METHOD_GET;
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_DROP(DROP_NOT_CM));
	cm_mad_init(mad, CM_ATTR_REQ, 1);
	assert_int_equal(router_inbound(r, 0, mad, 100, 0, &who),
			 ROUTER_DROP(DROP_BAD_SIZE));
	router_free(r);
}

static void test_outbound_ownership(void **state)
{
	struct router *r = new_router();
	uint8_t mad[MAD_SIZE];
	struct router_counts rc;
	int i;

	(void)state;
	req_to(mad, 0x10, "fd00::2");
	assert_int_equal(router_outbound(r, 0, A, mad, 0), 0);
	/* Another client may neither start nor act on A's comm ID. */
	assert_int_equal(router_outbound(r, 0, B, mad, 0), -EADDRINUSE);
	mad_with_ids(mad, CM_ATTR_DREQ, 0x10, 0x99);
	assert_int_equal(router_outbound(r, 0, B, mad, 0), -EADDRINUSE);
	mad_with_ids(mad, CM_ATTR_REJ, 0x10, 0x99);
	assert_int_equal(router_outbound(r, 0, B, mad, 0), -EADDRINUSE);
	mad_with_ids(mad, CM_ATTR_RTU, 0x10, 0x99);
	assert_int_equal(router_outbound(r, 0, B, mad, 0), -EADDRINUSE);
	assert_int_equal(router_outbound(r, 0, A, mad, 0), 0);
	/* Local Comm ID 0 is never claimed. */
	req_to(mad, 0, "fd00::2");
	assert_int_equal(router_outbound(r, 0, A, mad, 0), -EINVAL);
	mad_with_ids(mad, CM_ATTR_REJ, 0, 0x99);
	assert_int_equal(router_outbound(r, 0, B, mad, 0), 0);
	/* Quota: 8 per client. */
	for (i = 1; i < 8; i++) {
		req_to(mad, 0x100 + (uint32_t)i, "fd00::2");
		assert_int_equal(router_outbound(r, 0, A, mad, 0), 0);
	}
	req_to(mad, 0x200, "fd00::2");
	assert_int_equal(router_outbound(r, 0, A, mad, 0), -ENOSPC);
	router_client_counts(r, A, &rc);
	assert_int_equal(rc.comm_ids, 8);
	router_free(r);
}

static void test_drain_and_purge(void **state)
{
	struct router *r = new_router();
	uint8_t mad[MAD_SIZE];
	struct router_counts rc;
	uint64_t who;

	(void)state;
	req_to(mad, 0x10, "fd00::2");
	assert_int_equal(router_outbound(r, 0, A, mad, 0), 0);
	/* Inbound DREP starts the drain; retransmissions still route. */
	mad_with_ids(mad, CM_ATTR_DREP, 0x20, 0x10);
	assert_int_equal(inbound(r, 0, mad, 100, &who), 0);
	router_counts(r, &rc);
	assert_int_equal(rc.draining, 1);
	assert_int_equal(inbound(r, 0, mad, 1099, &who), 0);
	/* The duplicate re-armed the drain at 1099. */
	assert_int_equal(router_expire(r, 2098), 0);
	assert_int_equal(router_expire(r, 2099), 1);
	assert_int_equal(inbound(r, 0, mad, 2100, &who),
			 ROUTER_DROP(DROP_UNKNOWN_COMM_ID));
	/* A new REQ with the same id revives a draining entry. */
	req_to(mad, 0x30, "fd00::2");
	assert_int_equal(router_outbound(r, 0, A, mad, 3000), 0);
	mad_with_ids(mad, CM_ATTR_REJ, 0x30, 0x40);
	assert_int_equal(router_outbound(r, 0, A, mad, 3000), 0);
	router_counts(r, &rc);
	assert_int_equal(rc.draining, 1);
	req_to(mad, 0x30, "fd00::2");
	assert_int_equal(router_outbound(r, 0, A, mad, 3500), 0);
	router_counts(r, &rc);
	assert_int_equal(rc.draining, 0);
	assert_int_equal(router_expire(r, 100000), 0);
	/* Disconnect purges everything the client had, draining or not. */
	mad_with_ids(mad, CM_ATTR_REP, 0x50, 0x60);
	assert_int_equal(router_outbound(r, 0, A, mad, 3500), 0);
	mad_with_ids(mad, CM_ATTR_DREP, 0x50, 0x60);
	assert_int_equal(router_outbound(r, 0, A, mad, 3600), 0);
	router_purge_client(r, A);
	router_counts(r, &rc);
	assert_int_equal(rc.comm_ids, 0);
	assert_int_equal(rc.draining, 0);
	mad_with_ids(mad, CM_ATTR_RTU, 0x99, 0x30);
	assert_int_equal(inbound(r, 0, mad, 3700, &who),
			 ROUTER_DROP(DROP_UNKNOWN_COMM_ID));
	/* And the ids are free for another client. */
	req_to(mad, 0x30, "fd00::2");
	assert_int_equal(router_outbound(r, 0, C, mad, 3800), 0);
	assert_int_equal(router_expire(r, 100000), 0);
	router_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gid_registry),
		cmocka_unit_test(test_gid_full_128_bits),
		cmocka_unit_test(test_gid_quota),
		cmocka_unit_test(test_sidr_routing),
		cmocka_unit_test(test_comm_id_routing_every_attribute),
		cmocka_unit_test(test_unroutable),
		cmocka_unit_test(test_outbound_ownership),
		cmocka_unit_test(test_drain_and_purge),
	};

	return cmocka_run_group_tests_name("router", tests, NULL, NULL);
}
