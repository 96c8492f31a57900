// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The GID registry and the router, driven with a fake clock. */
#include <stdlib.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "mux/router.h"
#include "common/cm_mad.h"
#include "common/wire.h"

#define A 11
#define B 22
#define C 33

/* What the router sent on its own, and which GIDs "the port" has. */
static int nsent;
static enum conn_answer sent_why;
static uint8_t sent_mad[MAD_SIZE];
static struct conn_path sent_path;

static void t_send(void *arg, enum conn_answer why, unsigned port,
		   const struct conn_path *path, const uint8_t *mad)
{
	(void)arg;
	(void)port;
	nsent++;
	sent_why = why;
	sent_path = *path;
	memcpy(sent_mad, mad, MAD_SIZE);
}

/* The port's table: fd00:1::/32 and 10.0.0.0/24 (as IPv4-mapped). */
static int t_gid_in_table(void *arg, unsigned port, const struct gid *gid)
{
	(void)arg;
	return port == 0 && ((gid->raw[0] == 0xfd && gid->raw[1] == 0 &&
			      gid->raw[2] == 0 && gid->raw[3] == 1) ||
			     (gid->raw[10] == 0xff && gid->raw[12] == 10));
}

static const struct router_ops t_ops = { t_send, t_gid_in_table };

static struct router *new_router(void)
{
	struct router_limits lim = {
		.max_gids_per_client = 4,
		.max_comm_ids_per_client = 8,
		.handshake_ms = 60000,
		.timewait_ms = 1000,
	};
	struct router *r = router_new(&lim, 0x5a5a5a5a, &t_ops, NULL);

	nsent = 0;
	assert_non_null(r);
	return r;
}

static struct gid G(const char *s) {
	struct gid g;

	assert_int_equal(gid_parse(s, &g), 0);
	return g;
}

static void
mad_with_ids(uint8_t *mad, uint16_t attr, uint32_t local, uint32_t remote)
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

static const struct gid peer_gid = { { 0xfd, 0, [15] = 0x99 } };

static int inbound(struct router *r, unsigned port, uint8_t *mad, uint64_t now,
		   uint64_t *client)
{
	struct conn_path path = { .peer_gid = peer_gid };

	*client = 0;
	return router_inbound(r, port, mad, MAD_SIZE, &path, now, client, NULL);
}

static int outbound(struct router *r, unsigned port, uint64_t client,
		    uint8_t *mad, uint64_t now)
{
	struct conn_path path = { .peer_gid = peer_gid };

	return router_outbound(r, port, client, NULL, NULL, mad, &path, now, 0,
			       NULL);
}

static void test_gid_registry(void **state)
{
	struct router *r = new_router();
	struct gid g1 = G("fd00::1"), g2 = G("fd00::2");
	struct router_counts rc;

	(void)state;
	assert_int_equal(router_register_gid(r, 0, &g1, A), 0);
	assert_int_equal(router_register_gid(r, 0, &g1, A), 0); /* idempotent */
	assert_int_equal(router_register_gid(r, 0, &g1, B), -EEXIST);
	/* Same GID on another port is another key. */
	assert_int_equal(router_register_gid(r, 1, &g1, B), 0);
	assert_true(router_owns_gid(r, 0, &g1, A));
	assert_false(router_owns_gid(r, 0, &g1, B));
	assert_true(router_gid_owner(r, 1, &g1) == B);
	assert_int_equal(router_unregister_gid(r, 0, &g1, B, 0), -EACCES);
	assert_int_equal(router_unregister_gid(r, 0, &g2, A, 0), -ENOENT);
	assert_int_equal(router_unregister_gid(r, 0, &g1, A, 0), 0);
	assert_true(router_gid_owner(r, 0, &g1) == 0);
	assert_int_equal(router_register_gid(r, 0, &g1, B), 0);
	router_counts(r, &rc);
	assert_int_equal(rc.gids, 2);
	router_purge_client(r, B);
	router_counts(r, &rc);
	assert_int_equal(rc.gids, 0);
	router_free(r);
}

/* A REQ from the peer to shared GID dst for service ID sid. */
static void req_for_service(uint8_t *mad, uint32_t local, const char *dst,
			    uint64_t sid)
{
	req_to(mad, local, dst);
	cm_field_set(mad, CM_REQ_SERVICE_ID, sid);
}

/* Host processes share a GID (issue 43): each may send from it, REQs and
 * SIDR_REQs go to the one listening on their service ID (one listener
 * per service ID: EADDRINUSE, as the kernel's bind), nobody listening
 * is answered as the kernel CM answers, and an exclusive GID stays
 * exclusive both ways. */
static void test_shared_gid_demux_by_service_id(void **state)
{
	const uint64_t sid1 = 0x0000000001064a4bull,
		       sid2 = 0x0000000001064a4cull;
	struct router *r = new_router();
	struct gid g = G("fd00:1::5"), own = G("fd00:1::6"), s = G("10.0.0.9");
	struct router_claims claims = { 1, { g } };
	struct conn_path path = { .peer_gid = peer_gid };
	struct router_counts rc;
	uint8_t mad[MAD_SIZE];
	unsigned not_owned;
	uint64_t who;

	(void)state;
	assert_int_equal(router_share_gid(r, 0, &g, A), 0);
	assert_int_equal(router_share_gid(r, 0, &g, A), 0); /* idempotent */
	assert_int_equal(router_share_gid(r, 0, &g, B), 0);
	assert_true(router_gid_owner(r, 0, &g) == ROUTER_GID_SHARED);
	/* Exclusive and shared do not mix, either way. */
	assert_int_equal(router_register_gid(r, 0, &g, C), -EEXIST);
	assert_int_equal(router_register_gid(r, 0, &g, A), -EEXIST);
	assert_int_equal(router_register_gid(r, 0, &own, C), 0);
	assert_int_equal(router_share_gid(r, 0, &own, A), -EEXIST);
	assert_int_equal(router_share_gid(r, 0, &own, C), -EEXIST);
	/* Members send from it; nobody else does. */
	assert_true(router_owns_gid(r, 0, &g, A));
	assert_true(router_owns_gid(r, 0, &g, B));
	assert_false(router_owns_gid(r, 0, &g, C));
	req_to(mad, 0x10, "fd00::2");
	assert_int_equal(router_outbound(r, 0, C, &claims, &not_owned, mad,
					 &path, 0, 0, NULL),
			 -EADDRNOTAVAIL);
	assert_int_equal(router_outbound(r, 0, B, &claims, &not_owned, mad,
					 &path, 0, 0, NULL),
			 0);
	/* One listener per service ID, members only. */
	assert_int_equal(router_listen(r, 0, &g, sid1, A), 0);
	assert_int_equal(router_listen(r, 0, &g, sid1, A), 0);
	assert_int_equal(router_listen(r, 0, &g, sid1, B), -EADDRINUSE);
	assert_int_equal(router_listen(r, 0, &g, sid2, B), 0);
	assert_int_equal(router_listen(r, 0, &g, 0x77, C), -ENOENT);
	assert_int_equal(router_listen(r, 0, &own, 0x77, C), -ENOENT);
	assert_int_equal(router_unlisten(r, 0, &g, sid2, A), -ENOENT);
	/* Inbound by service ID. */
	req_for_service(mad, 0x4711, "fd00:1::5", sid1);
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_DELIVER);
	assert_true(who == A);
	req_for_service(mad, 0x4712, "fd00:1::5", sid2);
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_DELIVER);
	assert_true(who == B);
	cm_mad_init(mad, CM_ATTR_SIDR_REQ, 1);
	cm_field_set(mad, CM_SIDR_REQ_REQUEST_ID, 0x42);
	cm_field_set(mad, CM_SIDR_REQ_SERVICE_ID, sid2);
	cma_hdr_build(mad + CM_SIDR_REQ_OFF_PRIVATE_DATA, &s, &g, 19276);
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_DELIVER);
	assert_true(who == B);
	/* The REQ's record is its listener's: only A answers it. */
	mad_with_ids(mad, CM_ATTR_REP, 0x900, 0x4711);
	assert_int_equal(outbound(r, 0, B, mad, 0), -ENOENT);
	mad_with_ids(mad, CM_ATTR_REP, 0x900, 0x4711);
	assert_int_equal(outbound(r, 0, A, mad, 0), 0);
	/* Nobody on a service ID: the kernel CM's REJ. */
	nsent = 0;
	req_for_service(mad, 0x4713, "fd00:1::5", 0x99);
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_NO_LISTENER);
	assert_int_equal(nsent, 1);
	assert_int_equal(cm_field_get(sent_mad, CM_REJ_REASON),
			 CM_REJ_REASON_INVALID_SERVICE_ID);
	/* A leaving member takes its listens; the GID stays the others'. */
	assert_int_equal(router_unregister_gid(r, 0, &g, C, 0), -EACCES);
	assert_int_equal(router_unregister_gid(r, 0, &g, A, 0), 0);
	assert_false(router_owns_gid(r, 0, &g, A));
	req_for_service(mad, 0x4714, "fd00:1::5", sid1);
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_NO_LISTENER);
	assert_int_equal(router_listen(r, 0, &g, sid1, B), 0);
	assert_int_equal(router_unlisten(r, 0, &g, sid1, B), 0);
	router_client_counts(r, B, &rc);
	assert_int_equal(rc.gids, 1);
	/* The last member gone, the GID is nobody's. */
	router_purge_client(r, B);
	assert_true(router_gid_owner(r, 0, &g) == 0);
	assert_int_equal(router_register_gid(r, 0, &g, C), 0);
	router_free(r);
}

/* Shares count against a client's GIDs; listens against their own
 * limit. */
static void test_shared_gid_limits(void **state)
{
	struct router *r = new_router();
	struct gid g = G("fd00:1::5");
	uint64_t sid;
	char text[32];
	int i;

	(void)state;
	for (i = 0; i < 4; i++) {
		snprintf(text, sizeof(text), "fd00:1::%d", 10 + i);
		g = G(text);
		assert_int_equal(router_share_gid(r, 0, &g, A), 0);
	}
	g = G("fd00:1::5");
	assert_int_equal(router_share_gid(r, 0, &g, A), -ENOSPC);
	assert_int_equal(router_register_gid(r, 0, &g, A), -ENOSPC);
	g = G("fd00:1::10");
	for (sid = 1; sid <= ROUTER_LISTENS_PER_CLIENT; sid++)
		assert_int_equal(router_listen(r, 0, &g, sid, A), 0);
	assert_int_equal(router_listen(r, 0, &g, sid, A), -ENOSPC);
	assert_int_equal(router_unlisten(r, 0, &g, 1, A), 0);
	assert_int_equal(router_listen(r, 0, &g, sid, A), 0);
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
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_DELIVER);
	assert_true(who == A);
	req_to(mad, 5, "fd00:2::5");
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_DELIVER);
	assert_true(who == B);
	req_to(mad, 5, "fd00:3::5");
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_UNKNOWN_GID);
	assert_int_equal(nsent,
			 0); /* not this port's GID: not ours to answer */
	/* A REQ on another port does not match port 0's GID. */
	req_to(mad, 5, "fd00:1::5");
	assert_int_equal(inbound(r, 1, mad, 0, &who), ROUTER_UNKNOWN_GID);
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
	uint8_t mad[MAD_SIZE], mad2[MAD_SIZE];
	uint32_t host_a, host_b;
	uint64_t who;

	(void)state;
	assert_int_equal(router_register_gid(r, 0, &b, B), 0);
	cm_mad_init(mad, CM_ATTR_SIDR_REQ, 1);
	cm_field_set(mad, CM_SIDR_REQ_REQUEST_ID, 0x42);
	cma_hdr_build(mad + CM_SIDR_REQ_OFF_PRIVATE_DATA, &a, &b, 4791);
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_DELIVER);
	assert_true(who == B);
	/* Without rdma_cm's header it cannot be routed. */
	mad[CM_SIDR_REQ_OFF_PRIVATE_DATA + 1] = 0;
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_NO_CMA_HDR);

	/* Two clients may use the same request ID: each gets a host one. */
	cm_mad_init(mad, CM_ATTR_SIDR_REQ, 1);
	cm_field_set(mad, CM_SIDR_REQ_REQUEST_ID, 0x77);
	memcpy(mad2, mad, MAD_SIZE);
	assert_int_equal(outbound(r, 0, A, mad, 0), 0);
	assert_int_equal(outbound(r, 0, B, mad2, 0), 0);
	host_a = (uint32_t)cm_field_get(mad, CM_SIDR_REQ_REQUEST_ID);
	host_b = (uint32_t)cm_field_get(mad2, CM_SIDR_REQ_REQUEST_ID);
	assert_true(host_a != 0x77 && host_b != 0x77 && host_a != host_b);
	cm_mad_init(mad, CM_ATTR_SIDR_REP, 1);
	cm_field_set(mad, CM_SIDR_REP_REQUEST_ID, host_b);
	assert_int_equal(inbound(r, 0, mad, 10, &who), ROUTER_DELIVER);
	assert_true(who == B);
	assert_int_equal(cm_field_get(mad, CM_SIDR_REP_REQUEST_ID), 0x77);
	cm_field_set(mad, CM_SIDR_REP_REQUEST_ID, host_a);
	assert_int_equal(inbound(r, 0, mad, 10, &who), ROUTER_DELIVER);
	assert_true(who == A);
	cm_field_set(mad, CM_SIDR_REP_REQUEST_ID, 0x78);
	assert_int_equal(inbound(r, 0, mad, 10, &who),
			 ROUTER_UNKNOWN_REQUEST_ID);
	/* Answered requests drain (1000 ms here), then are gone. */
	assert_int_equal(router_expire(r, 1009), 0);
	assert_int_equal(router_expire(r, 1010), 2);
	cm_field_set(mad, CM_SIDR_REP_REQUEST_ID, host_a);
	assert_int_equal(inbound(r, 0, mad, 1600, &who),
			 ROUTER_UNKNOWN_REQUEST_ID);
	router_free(r);
}

/* A connection of client A with the peer (peer comm ID 0x5555) in the
 * state where the peer may send attr; returns the host comm ID. */
static uint32_t conn_for(struct router *r, uint16_t attr, uint32_t guest)
{
	struct gid a = G("fd00::1");
	uint8_t mad[MAD_SIZE];
	uint32_t host;
	uint64_t who;

	if (attr == CM_ATTR_RTU) {
		/* Passive: the peer's REQ, A's REP. */
		router_register_gid(r, 0, &a, A);
		req_to(mad, 0x5555, "fd00::1");
		assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_DELIVER);
		mad_with_ids(mad, CM_ATTR_REP, guest, 0x5555);
		assert_int_equal(outbound(r, 0, A, mad, 0), 0);
		router_unregister_gid(r, 0, &a, A, 0);
		return wire_get32(mad + 24);
	}
	req_to(mad, guest, "fd00::2");
	assert_int_equal(outbound(r, 0, A, mad, 0), 0);
	host = (uint32_t)cm_field_get(mad, CM_REQ_LOCAL_COMM_ID);
	if (attr == CM_ATTR_MRA || attr == CM_ATTR_REJ || attr == CM_ATTR_REP)
		return host;
	mad_with_ids(mad, CM_ATTR_REP, 0x5555, host);
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_DELIVER);
	mad_with_ids(mad, CM_ATTR_RTU, guest, 0x5555);
	assert_int_equal(outbound(r, 0, A, mad, 0), 0);
	if (attr == CM_ATTR_DREP) {
		mad_with_ids(mad, CM_ATTR_DREQ, guest, 0x5555);
		assert_int_equal(outbound(r, 0, A, mad, 0), 0);
	}
	return host;
}

/* Every attribute that carries a Remote Comm ID routes by it, and the
 * client sees its own comm ID again. */
static void test_comm_id_routing_every_attribute(void **state)
{
	static const uint16_t attrs[] = { CM_ATTR_MRA,  CM_ATTR_REJ,
					  CM_ATTR_REP,  CM_ATTR_RTU,
					  CM_ATTR_DREQ, CM_ATTR_DREP,
					  CM_ATTR_LAP,  CM_ATTR_APR };
	uint8_t mad[MAD_SIZE];
	uint32_t host;
	uint64_t who;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
		struct router *r = new_router();

		host = conn_for(r, attrs[i], 0x1000 + (uint32_t)i);
		assert_true(host != 0x1000 + i && host != 0);
		mad_with_ids(mad, attrs[i], 0x5555, host ^ 0xffff0000u);
		assert_int_equal(inbound(r, 0, mad, 0, &who),
				 ROUTER_UNKNOWN_COMM_ID);
		/* Remote Comm ID 0 without a REQ record has no owner. */
		mad_with_ids(mad, attrs[i], 0x5555, 0);
		assert_int_equal(inbound(r, 0, mad, 0, &who),
				 ROUTER_ZERO_COMM_ID);
		assert_true(who == 0);
		mad_with_ids(mad, attrs[i], 0x5555, host);
		assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_DELIVER);
		assert_true(who == A);
		assert_int_equal(wire_get32(mad + 28), 0x1000 + i);
		assert_int_equal(wire_get32(mad + 24), 0x5555);
		router_free(r);
	}
}

/* A REQ or SIDR_REQ for a GID of the port that no client owns is
 * answered as a host CM without a listener answers; for a GID not in the
 * port's table it is only dropped. */
static void test_no_listener_answered(void **state)
{
	struct router *r = new_router();
	struct gid s = G("10.0.0.9"), d = G("10.0.0.7"), want = G("fd00:1::7");
	uint8_t mad[MAD_SIZE];
	uint64_t who;

	(void)state;
	req_to(mad, 0x4711, "fd00:1::7");
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_NO_LISTENER);
	assert_int_equal(nsent, 1);
	assert_int_equal(sent_why, CONN_ANS_REJ_NO_LISTENER);
	assert_int_equal(cm_mad_attr_id(sent_mad), CM_ATTR_REJ);
	assert_int_equal(cm_field_get(sent_mad, CM_REJ_REASON),
			 CM_REJ_REASON_INVALID_SERVICE_ID);
	assert_int_equal(cm_field_get(sent_mad, CM_REJ_MESSAGE_REJECTED),
			 CM_MSG_RESPONSE_REQ);
	assert_int_equal(cm_field_get(sent_mad, CM_REJ_REMOTE_COMM_ID), 0x4711);
	assert_int_equal(cm_field_get(sent_mad, CM_REJ_LOCAL_COMM_ID), 0);
	/* From the GID the REQ was for, to its sender. */
	assert_int_equal(gid_cmp(&sent_path.local_gid, &want), 0);
	assert_int_equal(gid_cmp(&sent_path.peer_gid, &peer_gid), 0);
	cm_mad_init(mad, CM_ATTR_SIDR_REQ, 1);
	cm_field_set(mad, CM_SIDR_REQ_REQUEST_ID, 0x42);
	cm_field_set(mad, CM_SIDR_REQ_SERVICE_ID, 0x1060000001234ull);
	cma_hdr_build(mad + CM_SIDR_REQ_OFF_PRIVATE_DATA, &s, &d, 4791);
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_NO_LISTENER);
	assert_int_equal(nsent, 2);
	assert_int_equal(sent_why, CONN_ANS_SIDR_NO_LISTENER);
	assert_int_equal(cm_field_get(sent_mad, CM_SIDR_REP_REQUEST_ID), 0x42);
	assert_int_equal(cm_field_get(sent_mad, CM_SIDR_REP_STATUS),
			 CM_SIDR_STATUS_UNSUPPORTED);
	assert_true(cm_field_get(sent_mad, CM_SIDR_REP_SERVICE_ID) ==
		    0x1060000001234ull);
	assert_int_equal(gid_cmp(&sent_path.local_gid, &d), 0);
	router_free(r);
}

/* The peer's timeout REJ after an abandoned REQ carries neither our comm
 * ID nor our GID: it reaches the client the REQ went to. */
static void test_timeout_rej_reaches_req_owner(void **state)
{
	struct router *r = new_router();
	struct gid b = G("fd00::2");
	uint8_t mad[MAD_SIZE];
	uint64_t who;

	(void)state;
	assert_int_equal(router_register_gid(r, 0, &b, B), 0);
	req_to(mad, 0xabc, "fd00::2");
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_DELIVER);
	assert_true(who == B);
	mad_with_ids(mad, CM_ATTR_REJ, 0xabc, 0);
	cm_field_set(mad, CM_REJ_REASON, CM_REJ_REASON_TIMEOUT);
	assert_int_equal(inbound(r, 0, mad, 5000, &who), ROUTER_DELIVER);
	assert_true(who == B);
	router_free(r);
}

static void test_unroutable(void **state)
{
	struct router *r = new_router();
	uint8_t mad[MAD_SIZE];
	uint64_t who;

	(void)state;
	cm_mad_init(mad, CM_ATTR_CLASS_PORT_INFO, 1);
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_UNSUPPORTED_ATTR);
	cm_mad_init(mad, 0x001b, 1);
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_UNSUPPORTED_ATTR);
	cm_mad_init(mad, CM_ATTR_REQ, 1);
	mad[1] = 0x04;
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_NOT_CM);
	cm_mad_init(mad, CM_ATTR_REQ, 1);
	mad[3] = MAD_METHOD_GET;
	assert_int_equal(inbound(r, 0, mad, 0, &who), ROUTER_NOT_CM);
	cm_mad_init(mad, CM_ATTR_REQ, 1);
	assert_int_equal(router_inbound(r, 0, mad, 100,
					&(struct conn_path){
						.peer_gid = peer_gid },
					0, &who, NULL),
			 ROUTER_BAD_SIZE);
	router_free(r);
}

/* The GIDs a MAD claims as its sender's are checked under the same lock
 * as the send: the first that is not the client's is named, and a
 * refused MAD leaves no trace in the table. */
static void test_outbound_claims(void **state)
{
	struct router *r = new_router();
	struct gid a1 = G("fd00::a1"), a2 = G("fd00::a2"), b1 = G("fd00::b1");
	struct router_claims claims = { 3, { a1, b1, a2 } };
	struct conn_path path = { .peer_gid = peer_gid };
	struct router_counts rc;
	unsigned not_owned = 99;
	uint8_t mad[MAD_SIZE];

	(void)state;
	assert_int_equal(router_register_gid(r, 0, &a1, A), 0);
	assert_int_equal(router_register_gid(r, 0, &a2, A), 0);
	assert_int_equal(router_register_gid(r, 0, &b1, B), 0);
	req_to(mad, 0x10, "fd00::2");
	assert_int_equal(router_outbound(r, 0, A, &claims, &not_owned, mad,
					 &path, 0, 0, NULL),
			 -EADDRNOTAVAIL);
	assert_int_equal(not_owned, 1);
	assert_int_equal(cm_field_get(mad, CM_REQ_LOCAL_COMM_ID), 0x10);
	router_client_counts(r, A, &rc);
	assert_int_equal(rc.comm_ids, 0);
	/* The same GIDs on another port are nobody's there. */
	claims.n = 1;
	assert_int_equal(router_outbound(r, 1, A, &claims, &not_owned, mad,
					 &path, 0, 0, NULL),
			 -EADDRNOTAVAIL);
	assert_int_equal(not_owned, 0);
	claims = (struct router_claims){ 2, { a2, a1 } };
	assert_int_equal(router_outbound(r, 0, A, &claims, &not_owned, mad,
					 &path, 0, 0, NULL),
			 0);
	assert_true(cm_field_get(mad, CM_REQ_LOCAL_COMM_ID) != 0x10);
	router_client_counts(r, A, &rc);
	assert_int_equal(rc.comm_ids, 1);
	router_free(r);
}

static void test_outbound_ownership(void **state)
{
	struct router *r = new_router();
	uint8_t mad[MAD_SIZE], mad2[MAD_SIZE];
	struct router_counts rc;
	int i;

	(void)state;
	/* Two clients may use the same comm ID: both work. */
	req_to(mad, 0x10, "fd00::2");
	memcpy(mad2, mad, MAD_SIZE);
	assert_int_equal(outbound(r, 0, A, mad, 0), 0);
	assert_int_equal(outbound(r, 0, B, mad2, 0), 0);
	assert_true(wire_get32(mad + 24) != wire_get32(mad2 + 24));
	/* Acting on a connection a client does not have is refused. */
	mad_with_ids(mad, CM_ATTR_DREQ, 0x11, 0x99);
	assert_int_equal(outbound(r, 0, A, mad, 0), -ENOENT);
	mad_with_ids(mad, CM_ATTR_RTU, 0x12, 0x99);
	assert_int_equal(outbound(r, 0, B, mad, 0), -ENOENT);
	/* Local Comm ID 0 is never mapped; a REJ may carry it, when it
	 * answers a REQ the client received. */
	req_to(mad, 0, "fd00::2");
	assert_int_equal(outbound(r, 0, A, mad, 0), -EINVAL);
	mad_with_ids(mad, CM_ATTR_REJ, 0, 0x99);
	assert_int_equal(outbound(r, 0, B, mad, 0), -ENOENT);
	/* Quota: 8 per client. */
	for (i = 1; i < 8; i++) {
		req_to(mad, 0x100 + (uint32_t)i, "fd00::2");
		assert_int_equal(outbound(r, 0, A, mad, 0), 0);
	}
	req_to(mad, 0x200, "fd00::2");
	assert_int_equal(outbound(r, 0, A, mad, 0), -ENOSPC);
	router_client_counts(r, A, &rc);
	assert_int_equal(rc.comm_ids, 8);
	assert_int_equal(rc.handshake, 8);
	/* A disconnect purges them all. */
	router_purge_client(r, A);
	router_client_counts(r, A, &rc);
	assert_int_equal(rc.comm_ids, 0);
	router_counts(r, &rc);
	assert_int_equal(rc.comm_ids, 1);
	router_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gid_registry),
		cmocka_unit_test(test_gid_full_128_bits),
		cmocka_unit_test(test_shared_gid_demux_by_service_id),
		cmocka_unit_test(test_shared_gid_limits),
		cmocka_unit_test(test_gid_quota),
		cmocka_unit_test(test_sidr_routing),
		cmocka_unit_test(test_comm_id_routing_every_attribute),
		cmocka_unit_test(test_no_listener_answered),
		cmocka_unit_test(test_unroutable),
		cmocka_unit_test(test_outbound_ownership),
		cmocka_unit_test(test_outbound_claims),
		cmocka_unit_test(test_timeout_rej_reaches_req_owner),
	};

	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("router", tests, NULL, NULL);
}
