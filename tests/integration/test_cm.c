// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * CM-aware multiplexing through the real daemon on a sim port, against a
 * scripted CM peer on the sim wire: two VMs with the same comm IDs and
 * SIDR request IDs, retransmissions, MRA, a timeout REJ, DREQ after idle,
 * a disconnect mid-handshake, lifetimes as documented, ClassPortInfo.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/integration/harness.h"
#include "common/cm_mad.h"
#include "common/gid.h"
#include "common/wire.h"

#define PEER "fd99::1"
/* rdmacm-muxd(8): a source's budget for the daemon's answers. */
#define PORT_ANSWER_BURST_FOR_TEST 256
#define PORT_ANSWER_RATE_FOR_TEST 256
static const char *const ports[] = { "sim0=fd00::1,fd00::2,fd00::3", NULL };

struct fx {
	struct hdaemon d;
	struct simpeer p;
	struct tclient a, b;
};

static int setup_with(void **state, const char *const *extra)
{
	static struct fx f;
	char err[256];

	memset(&f, 0, sizeof(f));
	hd_start(&f.d, NULL, ports, extra);
	simpeer_open(&f.p, &f.d, "peer", PEER);
	assert_int_equal(tc_connect(&f.a, &f.d, "vm-a", 1, 0, err, sizeof(err)),
			 0);
	assert_int_equal(tc_register(&f.a, "fd00::1"), 0);
	assert_int_equal(tc_connect(&f.b, &f.d, "vm-b", 1, 0, err, sizeof(err)),
			 0);
	assert_int_equal(tc_register(&f.b, "fd00::2"), 0);
	*state = &f;
	return 0;
}

static int setup(void **state)
{
	return setup_with(state, NULL);
}

static int setup_short_timers(void **state)
{
	static const char *const extra[] = { "--handshake-timeout-ms", "600",
					     "--timewait-ms", "400", NULL };

	return setup_with(state, extra);
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (f->a.mb)
		tc_close(&f->a);
	if (f->b.mb)
		tc_close(&f->b);
	simpeer_close(&f->p);
	hd_stop(&f->d);
	return 0;
}

static uint32_t local_of(const uint8_t *m)
{
	return wire_get32(m + 24);
}
static uint32_t remote_of(const uint8_t *m)
{
	return wire_get32(m + 28);
}

/* Issue 4, item 1: two VMs use the same comm ID at the same time, both
 * connect to the same peer, and every reply reaches the right VM with
 * its own ID. */
static void test_same_comm_id_two_vms(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], ra[MAD_SIZE], rb[MAD_SIZE];
	uint32_t ha, hb;

	h_req(m, 0x1234, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, ra);
	h_req(m, 0x1234, "fd00::2", PEER);
	assert_int_equal(tc_send_sync(&f->b, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, rb);
	ha = local_of(ra);
	hb = local_of(rb);
	assert_true(ha != hb && ha != 0x1234 && hb != 0x1234 && ha && hb);
	/* The wire TIDs' low halves are the host IDs, as cm.c's carry its
	 * comm IDs. */
	assert_int_equal(wire_get64(ra + 8) & 0xffffffff, ha);
	assert_int_equal(wire_get64(rb + 8) & 0xffffffff, hb);

	/* REP to B first, then to A. */
	h_mad(m, CM_ATTR_REP, 0x900b, hb, wire_get64(rb + 8));
	simpeer_send(&f->p, "fd00::2", m);
	h_mad(m, CM_ATTR_REP, 0x900a, ha, wire_get64(ra + 8));
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, 1, CM_ATTR_REP);
	tc_expect(&f->b, 1, CM_ATTR_REP);
	assert_int_equal(remote_of(f->a.rx[0].mad), 0x1234);
	assert_int_equal(local_of(f->a.rx[0].mad), 0x900a);
	assert_int_equal(remote_of(f->b.rx[0].mad), 0x1234);
	assert_int_equal(local_of(f->b.rx[0].mad), 0x900b);
	/* The guest's TID comes back on the echoed reply. */
	assert_int_equal(wire_get64(f->a.rx[0].mad + 8),
			 0x42000000ull | 0x1234);

	/* RTU from both; the peer tells them apart by host ID. */
	h_mad(m, CM_ATTR_RTU, 0x1234, 0x900a, 1);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_RTU, ra);
	assert_int_equal(local_of(ra), ha);
	h_mad(m, CM_ATTR_RTU, 0x1234, 0x900b, 1);
	assert_int_equal(tc_send_sync(&f->b, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_RTU, rb);
	assert_int_equal(local_of(rb), hb);
	assert_true(hd_status_int(&f->d, "routing.established") == 2);

	/* The peer disconnects A only. */
	h_mad(m, CM_ATTR_DREQ, 0x900a, ha, 2);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, 2, CM_ATTR_DREQ);
	assert_int_equal(remote_of(f->a.rx[1].mad), 0x1234);
	h_mad(m, CM_ATTR_DREP, 0x1234, 0x900a, 2);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_DREP, ra);
	assert_int_equal(local_of(ra), ha);
	/* B's connection is untouched. */
	tc_pump_until(&f->b, tc_has_rx, 2, 100);
	assert_int_equal(f->b.nrx, 1);
	assert_true(hd_status_int(&f->d, "routing.established") == 1);
	assert_true(hd_status_int(&f->d, "routing.draining") == 1);
}

static void test_same_sidr_request_id_two_vms(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], ra[MAD_SIZE], rb[MAD_SIZE];
	struct gid s, d;
	uint32_t ha, hb;

	gid_parse(PEER, &d);
	cm_mad_init(m, CM_ATTR_SIDR_REQ, 5);
	cm_field_set(m, CM_SIDR_REQ_REQUEST_ID, 0x77);
	gid_parse("fd00::1", &s);
	cma_hdr_build(m + CM_SIDR_REQ_OFF_PRIVATE_DATA, &s, &d, 4791);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_SIDR_REQ, ra);
	gid_parse("fd00::2", &s);
	cma_hdr_build(m + CM_SIDR_REQ_OFF_PRIVATE_DATA, &s, &d, 4791);
	assert_int_equal(tc_send_sync(&f->b, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_SIDR_REQ, rb);
	ha = (uint32_t)cm_field_get(ra, CM_SIDR_REQ_REQUEST_ID);
	hb = (uint32_t)cm_field_get(rb, CM_SIDR_REQ_REQUEST_ID);
	assert_true(ha != hb && ha != 0x77 && hb != 0x77);
	cm_mad_init(m, CM_ATTR_SIDR_REP, 5);
	cm_field_set(m, CM_SIDR_REP_REQUEST_ID, hb);
	cm_field_set(m, CM_SIDR_REP_QPN, 0xb);
	simpeer_send(&f->p, "fd00::2", m);
	cm_field_set(m, CM_SIDR_REP_REQUEST_ID, ha);
	cm_field_set(m, CM_SIDR_REP_QPN, 0xa);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, 1, CM_ATTR_SIDR_REP);
	tc_expect(&f->b, 1, CM_ATTR_SIDR_REP);
	assert_int_equal(cm_field_get(f->a.rx[0].mad, CM_SIDR_REP_REQUEST_ID),
			 0x77);
	assert_int_equal(cm_field_get(f->a.rx[0].mad, CM_SIDR_REP_QPN), 0xa);
	assert_int_equal(cm_field_get(f->b.rx[0].mad, CM_SIDR_REP_REQUEST_ID),
			 0x77);
	assert_int_equal(cm_field_get(f->b.rx[0].mad, CM_SIDR_REP_QPN), 0xb);
}

/* The peer is the active side: it retransmits its REQ (both copies reach
 * the VM: the guest CM decides), the VM answers with MRA then REP, and
 * the peer's RTU arrives with the VM's own comm ID. */
static void test_peer_retransmits_and_mra(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	uint32_t h;

	h_req(m, 0xc0ffee, PEER, "fd00::1");
	simpeer_send(&f->p, "fd00::1", m);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, 2, CM_ATTR_REQ);
	assert_memory_equal(f->a.rx[0].mad, f->a.rx[1].mad, MAD_SIZE);
	h_mad(m, CM_ATTR_MRA, 0x51, 0xc0ffee, 7);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_MRA, r);
	h = local_of(r);
	assert_true(h != 0x51 && h != 0);
	h_mad(m, CM_ATTR_REP, 0x51, 0xc0ffee, 7);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REP, r);
	assert_int_equal(local_of(r), h); /* same connection, same ID */
	h_mad(m, CM_ATTR_RTU, 0xc0ffee, h, 7);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, 3, CM_ATTR_RTU);
	assert_int_equal(remote_of(f->a.rx[2].mad), 0x51);
	assert_true(hd_status_int(&f->d, "routing.established") == 1);
	/* The peer MRAs the VM's own REQ: it reaches the VM. */
	h_req(m, 0x61, "fd00::2", PEER);
	assert_int_equal(tc_send_sync(&f->b, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	h_mad(m, CM_ATTR_MRA, 0x888, local_of(r), 8);
	simpeer_send(&f->p, "fd00::2", m);
	tc_expect(&f->b, 1, CM_ATTR_MRA);
	assert_int_equal(remote_of(f->b.rx[0].mad), 0x61);
}

/* The peer sends a REQ the VM never answers, then gives up with a
 * timeout REJ that carries no Remote Comm ID: it reaches that VM only. */
static void test_timeout_rej_after_abandoned_req(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE];

	h_req(m, 0xdead01, PEER, "fd00::2");
	simpeer_send(&f->p, "fd00::2", m);
	tc_expect(&f->b, 1, CM_ATTR_REQ);
	h_mad(m, CM_ATTR_REJ, 0xdead01, 0, 9);
	cm_field_set(m, CM_REJ_REASON, CM_REJ_REASON_TIMEOUT);
	simpeer_send(&f->p, "fd00::2", m);
	tc_expect(&f->b, 2, CM_ATTR_REJ);
	assert_int_equal(cm_field_get(f->b.rx[1].mad, CM_REJ_REASON),
			 CM_REJ_REASON_TIMEOUT);
	tc_pump_until(&f->a, tc_has_rx, 1, 100);
	assert_int_equal(f->a.nrx, 0);
	/* A REJ with no record at all is dropped and counted. */
	h_mad(m, CM_ATTR_REJ, 0xdead02, 0, 9);
	simpeer_send(&f->p, "fd00::2", m);
	assert_true(tc_pump_until(&f->b, tc_has_rx, 3, 300) == 0);
	assert_true(hd_wait_status_int(&f->d,
				       "counters.drops.zero_remote_comm_id",
				       1));
}

/* Lifetimes with short timers (600 ms handshake, 400 ms timewait): an
 * established connection outlives many handshake periods and still gets
 * the peer's DREQ; an abandoned handshake is gone in time, and not
 * before; the status shows each mapping's state and remaining life. */
static void test_lifetimes(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	uint64_t t0;
	uint32_t h, hb;
	json_t *st, *c;

	h_req(m, 0x71, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	h = local_of(r);
	h_mad(m, CM_ATTR_REP, 0x171, h, 1);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, 1, CM_ATTR_REP);
	h_mad(m, CM_ATTR_RTU, 0x71, 0x171, 1);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_RTU, r);
	/* An abandoned handshake from B. */
	t0 = h_now_ms();
	h_req(m, 0x72, "fd00::2", PEER);
	assert_int_equal(tc_send_sync(&f->b, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	st = hd_status(&f->d);
	c = json_array_get(
		json_object_get(json_array_get(json_object_get(st, "clients"),
					       1),
				"connections"),
		0);
	assert_string_equal(json_string_value(json_object_get(c, "state")),
			    "req_sent");
	assert_true(json_integer_value(json_object_get(c, "expires_in_ms")) <=
		    600);
	json_decref(st);
	assert_true(hd_status_int(&f->d, "routing.comm_ids") == 2);
	/* Gone within the handshake time plus one timer tick (250 ms)... */
	assert_true(
		hd_wait_status_int_within(&f->d, "routing.comm_ids", 1,
					  600 + 250 + 500 * h_time_scale()));
	/* ...and not before it. */
	assert_true(h_now_ms() - t0 >= 600);
	/* The peer starts a connection to B, B answers REP, and the RTU
	 * never comes (lost; the peer went established and B's CM will on
	 * the first data): B's mapping outlives the handshake timeout. */
	h_req(m, 0xabc0, PEER, "fd00::2");
	simpeer_send(&f->p, "fd00::2", m);
	tc_expect(&f->b, 1, CM_ATTR_REQ);
	h_mad(m, CM_ATTR_REP, 0x73, 0xabc0, 3);
	assert_int_equal(tc_send_sync(&f->b, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REP, r);
	hb = local_of(r);
	assert_true(hd_status_int(&f->d, "routing.comm_ids") == 2);
	/* Three handshake periods idle: both the established connection
	 * and the one whose RTU never came stay. */
	poll(NULL, 0, 3 * 600);
	assert_true(hd_status_int(&f->d, "routing.comm_ids") == 2);
	assert_true(hd_status_int(&f->d, "routing.established") == 2);
	/* B disconnects cleanly: its DREQ reaches the peer, the peer's DREP
	 * reaches B. */
	h_mad(m, CM_ATTR_DREQ, 0x73, 0xabc0, 4);
	assert_int_equal(tc_send_sync(&f->b, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_DREQ, r);
	assert_int_equal(local_of(r), hb);
	h_mad(m, CM_ATTR_DREP, 0xabc0, hb, 4);
	simpeer_send(&f->p, "fd00::2", m);
	tc_expect(&f->b, 2, CM_ATTR_DREP);
	assert_int_equal(remote_of(f->b.rx[1].mad), 0x73);
	assert_true(
		hd_wait_status_int_within(&f->d, "routing.comm_ids", 1,
					  400 + 250 + 500 * h_time_scale()));
	h_mad(m, CM_ATTR_DREQ, 0x171, h, 2);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, 2, CM_ATTR_DREQ);
	h_mad(m, CM_ATTR_DREP, 0x71, 0x171, 2);
	t0 = h_now_ms();
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	assert_true(
		hd_wait_status_int_within(&f->d, "routing.comm_ids", 0,
					  400 + 250 + 500 * h_time_scale()));
	assert_true(h_now_ms() - t0 >= 400);
	/* A REP waits for its RTU as the REQ asked, and no longer: here
	 * 1 ms and no retry, so the window's floor, a second (then the
	 * guest's CM has long given up, telling nobody). */
	simpeer_expect(&f->p, CM_ATTR_DREP, r); /* A's, above */
	h_req(m, 0xabc1, PEER, "fd00::2");
	cm_field_set(m, CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT, 8);
	cm_field_set(m, CM_REQ_MAX_CM_RETRIES, 0);
	simpeer_send(&f->p, "fd00::2", m);
	tc_expect(&f->b, 3, CM_ATTR_REQ);
	h_mad(m, CM_ATTR_REP, 0x74, 0xabc1, 5);
	t0 = h_now_ms();
	assert_int_equal(tc_send_sync(&f->b, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REP, r);
	assert_true(hd_status_int(&f->d, "routing.comm_ids") == 1);
	assert_true(
		hd_wait_status_int_within(&f->d, "routing.comm_ids", 0,
					  1024 + 250 + 500 * h_time_scale()));
	assert_true(h_now_ms() - t0 >= 1024);
}

/* A VM that goes away mid-handshake: its mappings go at once, and the
 * peer's late REP is dropped, not delivered to anyone. */
static void test_disconnect_mid_handshake(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];

	h_req(m, 0x81, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	tc_close(&f->a);
	assert_true(hd_wait_status_int_within(&f->d, "routing.comm_ids", 0,
					      H_DEADLINE_MS));
	h_mad(m, CM_ATTR_REP, 0x181, local_of(r), 1);
	simpeer_send(&f->p, "fd00::1", m);
	assert_true(tc_pump_until(&f->b, tc_has_rx, 1, 300) == 0);
	assert_true(
		hd_wait_status_int(&f->d, "counters.drops.unknown_comm_id", 1));
}

/* The guest's timeout REJ of its own REQ (cm_destroy_id() in REQ_SENT:
 * Remote Comm ID 0, its CA GUID in the ARI) names the CA GUID its REQ
 * left with, the port's device's, by which the peer's cm.c finds the
 * connection (cm_acquire_rejected_id()): conformance case 32. */
static void test_timeout_rej_names_the_reqs_guid(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE], guest_guid[8];

	h_req(m, 0x82, "fd00::1", PEER);
	cm_field_set(m, CM_REQ_LOCAL_CA_GUID, 0x1111222233334444ull);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	assert_true(cm_field_get(r, CM_REQ_LOCAL_CA_GUID) !=
		    0x1111222233334444ull);
	wire_put64(guest_guid, 0x1111222233334444ull);
	cm_build_rej(m, 0x82, 0x82, 0, CM_MSG_RESPONSE_OTHER,
		     CM_REJ_REASON_TIMEOUT, guest_guid, sizeof(guest_guid));
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REJ, m);
	assert_int_equal(wire_get64(m + CM_REJ_OFF_ARI),
			 cm_field_get(r, CM_REQ_LOCAL_CA_GUID));
}

/* Gets to the CM class are answered as the spec asks: ClassPortInfo
 * with its contents, anything else "unsupported". */
static void test_class_port_info(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];

	cm_mad_init(m, CM_ATTR_CLASS_PORT_INFO, 0x5150);
	m[MAD_OFF_METHOD] = MAD_METHOD_GET;
	simpeer_send(&f->p, "fd00::3", m);
	assert_true(simpeer_recv(&f->p, r, NULL, H_DEADLINE_MS));
	assert_int_equal(r[MAD_OFF_METHOD], MAD_METHOD_GET_RESP);
	assert_int_equal(wire_get16(r + MAD_OFF_STATUS), 0);
	assert_int_equal(wire_get64(r + MAD_OFF_TID), 0x5150);
	assert_int_equal(r[24], 1); /* BaseVersion */
	assert_int_equal(r[25], 2); /* ClassVersion */
	assert_int_equal(wire_get32(r + 28) & 0x1f, CM_CLASS_RESP_TIME_VALUE);
	cm_mad_init(m, CM_ATTR_REQ, 0x5151);
	m[MAD_OFF_METHOD] = MAD_METHOD_GET;
	simpeer_send(&f->p, "fd00::3", m);
	assert_true(simpeer_recv(&f->p, r, NULL, H_DEADLINE_MS));
	assert_int_equal(wire_get16(r + MAD_OFF_STATUS),
			 MAD_STATUS_UNSUPPORTED_METHOD_ATTR);
	assert_true(hd_wait_status_int(&f->d,
				       "counters.class_requests_answered", 2));
}

/* Issue 8 ---------------------------------------------------------------- */

/* A REQ from A to the peer, answered, confirmed: A's established
 * connection (guest ID g, peer ID p); returns the host ID. */
/* A's REQ g answered by the peer's REP p (A in REP_RCVD); the host ID. */
static uint32_t answered(struct fx *f, uint32_t g, uint32_t p)
{
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	int n = f->a.nrx;
	uint32_t h;

	h_req(m, g, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	h = local_of(r);
	h_mad(m, CM_ATTR_REP, p, h, 1);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, n + 1, CM_ATTR_REP);
	return h;
}

static uint32_t establish(struct fx *f, uint32_t g, uint32_t p)
{
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	uint32_t h = answered(f, g, p);

	h_mad(m, CM_ATTR_RTU, g, p, 1);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_RTU, r);
	return h;
}

static int send_errno(struct tclient *tc, const uint8_t *m)
{
	return tc_send_sync(tc, PEER, m);
}

/* Item 1: the addresses inside a MAD are the sender's own. */
static void test_inner_addresses_are_the_senders(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	struct gid other, zero = { { 0 } }, peer;

	gid_parse("fd00::2", &other); /* B's */
	gid_parse(PEER, &peer);
	/* REQ Primary Local Port GID. */
	h_req(m, 0x11, "fd00::1", PEER);
	cm_set_gid(m, CM_REQ_OFF_PRIMARY_LOCAL_GID, &other);
	assert_int_equal(send_errno(&f->a, m), -EPERM);
	/* Alternate Local Port GID: another's is refused, none is fine. */
	h_req(m, 0x12, "fd00::1", PEER);
	cm_set_gid(m, CM_REQ_OFF_ALT_LOCAL_GID, &other);
	assert_int_equal(send_errno(&f->a, m), -EPERM);
	/* rdma_cm's source address. */
	h_req(m, 0x13, "fd00::1", PEER);
	cma_hdr_build(m + CM_REQ_OFF_PRIVATE_DATA, &other, &peer, 7471);
	assert_int_equal(send_errno(&f->a, m), -EPERM);
	/* SIDR_REQ's rdma_cm source address. */
	cm_mad_init(m, CM_ATTR_SIDR_REQ, 5);
	cm_field_set(m, CM_SIDR_REQ_REQUEST_ID, 0x14);
	cma_hdr_build(m + CM_SIDR_REQ_OFF_PRIVATE_DATA, &other, &peer, 4791);
	assert_int_equal(send_errno(&f->a, m), -EPERM);
	assert_true(hd_wait_status_int(&f->d, "counters.refusals.inner_address",
				       4));
	/* Nothing of that reached the wire. */
	assert_int_equal(simpeer_recv(&f->p, r, NULL, 100), 0);
	/* A REQ with no alternate path and its own addresses goes out. */
	h_req(m, 0x15, "fd00::1", PEER);
	cm_set_gid(m, CM_REQ_OFF_ALT_LOCAL_GID, &zero);
	assert_int_equal(send_errno(&f->a, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	/* LAP's alternate local GID, on an established connection. */
	establish(f, 0x16, 0x916);
	h_mad(m, CM_ATTR_LAP, 0x16, 0x916, 2);
	cm_set_gid(m, CM_LAP_OFF_ALT_LOCAL_GID, &other);
	assert_int_equal(send_errno(&f->a, m), -EPERM);
	assert_true(hd_wait_status_int(&f->d, "counters.refusals.inner_address",
				       5));
}

/* Issue 11, item 6: the address block is QP1 CM traffic's: QP1, the GSI
 * Q_Key, one unicast GID, a valid SL and hop limit; anything else is
 * refused with its own errno and counter, and nothing reaches the wire. */
static void test_address_block_is_qp1_cm(void **state)
{
	static const struct {
		const char *counter;
		int err;
	} want[] = {
		{ "counters.refusals.remote_qpn", -EPROTOTYPE },
		{ "counters.refusals.qkey", -EKEYREJECTED },
		{ "counters.refusals.destination_gid", -EDESTADDRREQ },
		{ "counters.refusals.destination_gid", -ENETUNREACH },
		{ "counters.refusals.sl_or_hop_limit", -EDOM },
		{ "counters.refusals.sl_or_hop_limit", -EDOM },
	};
	struct fx *f = *state;
	struct muxbe_addr a;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	struct gid g;
	size_t i;

	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		memset(&a, 0, sizeof(a));
		a.port = f->a.port;
		a.grh = 1;
		a.hop_limit = 64;
		a.remote_qpn = GSI_QPN;
		a.qkey = GSI_QKEY;
		memcpy(a.local_gid, f->a.gid, 16);
		gid_parse(PEER, &g);
		memcpy(a.remote_gid, g.raw, 16);
		switch (i) {
		case 0: a.remote_qpn = 0x1234; break; /* a UD QP, not QP1 */
		case 1: a.qkey = 0x11111111; break;
		case 2: memset(a.remote_gid, 0, 16); break;
		case 3:
			gid_parse("ff02::1", &g);
			memcpy(a.remote_gid, g.raw, 16);
			break;
		case 4: a.sl = 16; break;
		case 5: a.hop_limit = 0; break;
		}
		h_req(m, 0x60 + (uint32_t)i, "fd00::1", PEER);
		assert_int_equal(muxbe_send_mad_sync(f->a.mb, &a, m, MAD_SIZE),
				 want[i].err);
	}
	assert_int_equal(hd_status_int(&f->d, "counters.refusals.remote_qpn"),
			 1);
	assert_int_equal(hd_status_int(&f->d, "counters.refusals.qkey"), 1);
	assert_int_equal(hd_status_int(&f->d,
				       "counters.refusals.destination_gid"),
			 2);
	assert_int_equal(hd_status_int(&f->d,
				       "counters.refusals.sl_or_hop_limit"),
			 2);
	assert_int_equal(simpeer_recv(&f->p, r, NULL, 100), 0);
	/* And the same REQ, addressed as QP1 CM traffic is, goes out. */
	h_req(m, 0x70, "fd00::1", PEER);
	assert_int_equal(send_errno(&f->a, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
}

/* Items 2 and 3: inbound matching by host ID, peer ID and peer GID, and
 * messages only in the states cm.c takes them in. */
static void test_peer_identity_and_state(void **state)
{
	struct fx *f = *state;
	struct simpeer other;
	uint8_t m[MAD_SIZE];
	uint32_t h;

	h = establish(f, 0x21, 0x921);
	/* The right host ID with the wrong peer ID, or from another GID:
	 * nothing reaches A, nothing changes; a DREQ so gets the DREP for
	 * no connection, as cm.c's cm_issue_drep() answers it. */
	h_mad(m, CM_ATTR_DREQ, 0x999, h, 3);
	simpeer_send(&f->p, "fd00::1", m);
	h_mad(m, CM_ATTR_REJ, 0x999, h, 3);
	simpeer_send(&f->p, "fd00::1", m);
	simpeer_open(&other, &f->d, "other", "fd99::2");
	h_mad(m, CM_ATTR_DREP, 0x921, h, 3);
	simpeer_send(&other, "fd00::1", m);
	h_mad(m, CM_ATTR_DREQ, 0x921, h, 3);
	simpeer_send(&other, "fd00::1", m);
	assert_true(
		hd_wait_status_int(&f->d, "counters.drops.peer_mismatch", 4));
	simpeer_expect(&f->p, CM_ATTR_DREP, m);
	assert_int_equal(local_of(m), h);
	assert_int_equal(remote_of(m), 0x999);
	assert_true(simpeer_recv(&other, m, NULL, H_DEADLINE_MS));
	assert_int_equal(cm_mad_attr_id(m), CM_ATTR_DREP);
	assert_int_equal(remote_of(m), 0x921);
	assert_int_equal(hd_status_int(&f->d,
				       "counters.answers.drep_unknown_comm_id"),
			 2);
	/* A duplicate RTU changes nothing either. */
	h_mad(m, CM_ATTR_RTU, 0x921, h, 3);
	simpeer_send(&f->p, "fd00::1", m);
	assert_true(hd_wait_status_int(&f->d, "counters.drops.wrong_state", 1));
	assert_int_equal(f->a.nrx, 1);
	assert_true(hd_status_int(&f->d, "routing.established") == 1);
	simpeer_close(&other);
	/* The client cannot send what its state does not allow: an RTU
	 * before any REP. */
	h_req(m, 0x22, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, m);
	h_mad(m, CM_ATTR_RTU, 0x22, 0x922, 4);
	assert_int_equal(send_errno(&f->a, m), -ENOENT); /* no peer yet */
	h_mad(m, CM_ATTR_DREP, 0x21, 0x921, 4);
	assert_int_equal(send_errno(&f->a, m), -EPROTO); /* no DREQ */
	assert_true(hd_wait_status_int(&f->d, "counters.refusals.state", 1));
}

/* Item 3: an MRA extends the handshake by its Service Timeout; a REP
 * after the plain handshake time (600 ms here) is still delivered. */
static void test_mra_extends_handshake(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	uint64_t t0;
	uint32_t h;

	h_req(m, 0x31, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	h = local_of(r);
	t0 = h_now_ms();
	h_mad(m, CM_ATTR_MRA, 0x931, h, 1);
	cm_field_set(m, CM_MRA_MESSAGE_MRAED, CM_MSG_RESPONSE_REQ);
	cm_field_set(m, CM_MRA_SERVICE_TIMEOUT, 20); /* 4.3 s */
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, 1, CM_ATTR_MRA);
	/* Well past the handshake time and its expiry tick. */
	poll(NULL, 0, 600 + 250 + 400);
	assert_true(h_now_ms() - t0 < 4000);
	h_mad(m, CM_ATTR_REP, 0x931, h, 1);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, 2, CM_ATTR_REP);
	assert_int_equal(remote_of(f->a.rx[1].mad), 0x31);
}

/* Item 4: a guest that reuses the comm ID of a connection it forgot
 * (it rebooted) gets a new connection; the old one's peer is told. */
static void test_comm_id_reuse_new_connection(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE], r2[MAD_SIZE];
	uint32_t h_old, h_new;

	h_old = establish(f, 0x41, 0x941);
	h_req(m, 0x41, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	/* The old connection's peer hears a DREQ from the old host ID... */
	simpeer_expect(&f->p, CM_ATTR_DREQ, r);
	assert_int_equal(local_of(r), h_old);
	assert_int_equal(remote_of(r), 0x941);
	/* ...and the new REQ has a host ID of its own. */
	simpeer_expect(&f->p, CM_ATTR_REQ, r2);
	h_new = local_of(r2);
	assert_true(h_new != h_old);
	/* The old peer's DREP is absorbed; the new connection works. */
	h_mad(m, CM_ATTR_DREP, 0x941, h_old, 1);
	simpeer_send(&f->p, "fd00::1", m);
	assert_true(hd_wait_status_int(&f->d, "counters.drops.stale_connection",
				       1));
	h_mad(m, CM_ATTR_REP, 0x942, h_new, 1);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, 2, CM_ATTR_REP);
	assert_int_equal(local_of(f->a.rx[1].mad), 0x942);
	assert_int_equal(remote_of(f->a.rx[1].mad), 0x41);
	assert_true(hd_status_int(&f->d, "counters.answers.dreq_abandoned") ==
		    1);
	/* RTU then DREQ at once with the guest's one TID: both leave with
	 * the host ID as their TID, as cm.c's carry its comm ID (on a umad
	 * port the DREQ waits for the RTU's send to complete). */
	h_mad(m, CM_ATTR_RTU, 0x41, 0x942, 7);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	h_mad(m, CM_ATTR_DREQ, 0x41, 0x942, 7);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_RTU, r);
	simpeer_expect(&f->p, CM_ATTR_DREQ, r2);
	assert_int_equal((uint32_t)cm_mad_tid(r), h_new);
	assert_int_equal((uint32_t)cm_mad_tid(r2), h_new);
}

/* Issue 10, item 3: a flood of REQs from the fabric to a VM does not use
 * up its quota (peer records are charged to nobody and bounded per
 * source): with default limits the VM still connects. */
/* Every REQ of the flood below recorded, refused a record, or dropped
 * at the VM's full queue. */
static int flood_settled(void *arg)
{
	struct hdaemon *d = arg;

	return hd_status_int(d, "routing.peer_records") +
		       hd_status_int(d, "routing.peer_records_refused") +
		       hd_status_int(d, "counters.drops.client_queue_full") ==
	       5000;
}

static void test_fabric_req_flood_leaves_vm_connecting(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	long long dropped, delivered;
	int i;

	for (i = 0; i < 5000; i++) {
		h_req(m, 0x10000 + (uint32_t)i, PEER, "fd00::1");
		simpeer_send(&f->p, "fd00::1", m);
	}
	/* What reached the VM is recorded up to the bound per source
	 * (4,096 by default), the rest not; what its full queue dropped
	 * keeps no record. */
	assert_true(h_wait_until(flood_settled, &f->d, H_DEADLINE_MS));
	dropped = hd_status_int(&f->d, "counters.drops.client_queue_full");
	delivered = 5000 - dropped;
	assert_int_equal(hd_status_int(&f->d, "routing.peer_records"),
			 delivered < 4096 ? delivered : 4096);
	assert_int_equal(hd_status_int(&f->d, "routing.peer_records_refused"),
			 delivered < 4096 ? 0 : delivered - 4096);
	assert_int_equal(hd_status_int(&f->d,
				       "daemon.limits.max_comm_ids_per_client"),
			 4096);
	h_req(m, 0x77, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	assert_int_equal(cm_field_get(r, CM_REQ_STARTING_PSN),
			 0x77); /* its marker */
}

/* The daemon's own answers are budgeted per source: a peer that floods
 * REQs at a GID nobody owns (or spoofs a source that cannot be resolved)
 * gets a burst of REJs and then a steady trickle, counted, and another
 * peer's answer is not held back by it. */
static void test_answers_are_budgeted_per_source(void **state)
{
	struct fx *f = *state;
	const int n = PORT_ANSWER_BURST_FOR_TEST + 100;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	struct simpeer p2;
	uint64_t t0, answered, limited, took;
	int i;

	t0 = h_now_ms();
	for (i = 0; i < n; i++) {
		h_req(m, 0x7000 + (uint32_t)i, PEER, "fd00::3");
		simpeer_send(&f->p, "fd00::3", m);
	}
	assert_true(hd_wait_status_int(&f->d, "counters.mads_in.REQ", n));
	took = h_now_ms() - t0;
	answered = (uint64_t)hd_status_int(&f->d,
					   "counters.answers.rej_no_listener");
	limited = (uint64_t)hd_status_int(&f->d, "counters.answers.limited");
	assert_true(answered + limited == (uint64_t)n);
	assert_true(answered >= PORT_ANSWER_BURST_FOR_TEST);
	assert_true(answered <=
		    PORT_ANSWER_BURST_FOR_TEST + 1 +
			    took * PORT_ANSWER_RATE_FOR_TEST / 1000);
	assert_true(limited > 0);
	/* Another source has its own budget.  (The first one's REJs are
	 * read first: a fabric peer's send waits for every other peer's
	 * queue.) */
	while (simpeer_recv(&f->p, r, NULL, 100))
		;
	simpeer_open(&p2, &f->d, "peer2", "fd99::2");
	h_req(m, 0x7fff, "fd99::2", "fd00::3");
	simpeer_send(&p2, "fd00::3", m);
	assert_true(simpeer_recv(&p2, r, NULL, H_DEADLINE_MS));
	assert_int_equal(cm_mad_attr_id(r), CM_ATTR_REJ);
	assert_int_equal(cm_field_get(r, CM_REJ_REMOTE_COMM_ID), 0x7fff);
	simpeer_close(&p2);
}

/* Item 5: the daemon answers as a host's kernel CM for nobody's GID, for
 * unknown DREQs, and for clients that go away. */
static void test_daemon_answers(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	struct gid s, d;
	uint64_t t0;
	uint32_t h;
	int i, dreq = 0, rej = 0;

	/* fd00::3 is in the port's table; no client owns it. */
	h_req(m, 0x51, PEER, "fd00::3");
	t0 = h_now_ms();
	simpeer_send(&f->p, "fd00::3", m);
	simpeer_expect(&f->p, CM_ATTR_REJ, r);
	assert_true(h_now_ms() - t0 < 1000);
	assert_int_equal(cm_field_get(r, CM_REJ_REASON),
			 CM_REJ_REASON_INVALID_SERVICE_ID);
	assert_int_equal(cm_field_get(r, CM_REJ_REMOTE_COMM_ID), 0x51);
	gid_parse(PEER, &s);
	gid_parse("fd00::3", &d);
	cm_mad_init(m, CM_ATTR_SIDR_REQ, 5);
	cm_field_set(m, CM_SIDR_REQ_REQUEST_ID, 0x52);
	cma_hdr_build(m + CM_SIDR_REQ_OFF_PRIVATE_DATA, &s, &d, 4791);
	simpeer_send(&f->p, "fd00::3", m);
	simpeer_expect(&f->p, CM_ATTR_SIDR_REP, r);
	assert_int_equal(cm_field_get(r, CM_SIDR_REP_REQUEST_ID), 0x52);
	assert_int_equal(cm_field_get(r, CM_SIDR_REP_STATUS),
			 CM_SIDR_STATUS_UNSUPPORTED);
	/* A DREQ for no connection: DREP, IDs swapped. */
	h_mad(m, CM_ATTR_DREQ, 0x53, 0x12345, 5);
	simpeer_send(&f->p, "fd00::1", m);
	simpeer_expect(&f->p, CM_ATTR_DREP, r);
	assert_int_equal(local_of(r), 0x12345);
	assert_int_equal(remote_of(r), 0x53);
	/* A, with an established connection and a pending REQ, dies. */
	h = establish(f, 0x54, 0x954);
	h_req(m, 0x55, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	tc_close(&f->a);
	for (i = 0; i < 2; i++) {
		assert_true(simpeer_recv(&f->p, r, NULL, H_DEADLINE_MS));
		if (cm_mad_attr_id(r) == CM_ATTR_DREQ) {
			dreq++;
			assert_int_equal(local_of(r), h);
			assert_int_equal(remote_of(r), 0x954);
		} else {
			rej++;
			assert_int_equal(cm_mad_attr_id(r), CM_ATTR_REJ);
			assert_int_equal(cm_field_get(r, CM_REJ_REASON),
					 CM_REJ_REASON_TIMEOUT);
		}
	}
	assert_true(dreq == 1 && rej == 1);
	assert_true(hd_status_int(&f->d, "counters.answers.rej_no_listener") ==
		    1);
	assert_true(
		hd_status_int(&f->d, "counters.answers.sidr_rep_no_listener") ==
		1);
	assert_true(
		hd_status_int(&f->d, "counters.answers.drep_unknown_comm_id") ==
		1);
	assert_true(hd_status_int(&f->d, "counters.answers.dreq_abandoned") ==
		    1);
	assert_true(hd_status_int(&f->d, "counters.answers.rej_abandoned") ==
		    1);
}

/* A daemon that stops is not a VM that dies: its clients' peers hear
 * nothing (the connections are the VMs', and they live on). */
static void test_daemon_stop_tells_no_peer(void **state)
{
	struct fx *f = *state;
	uint8_t r[MAD_SIZE];

	establish(f, 0x71, 0x971);
	hd_stop(&f->d);
	assert_int_equal(simpeer_recv(&f->p, r, NULL, 500), 0);
}

static int setup_kick(void **state)
{
	static char admin_arg[80];
	static const char *extra[] = { "--client-queue", "16384", admin_arg,
				       NULL };

	snprintf(admin_arg, sizeof(admin_arg),
		 "--admin-socket=/tmp/rcm-cm-admin.%d", getpid());
	return setup_with(state, extra);
}

/* Item 9: an admin disconnect ends a client that never reads within a
 * bounded time; its GIDs are free and its peers are told. */
static void test_kick_client_that_never_reads(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	char req[128], reply[512], path[80];
	long long id = -1;
	json_t *st;
	uint64_t t0;
	int fd, i;

	fd = raw_hello_gid(f->d.sock, "deaf", "fd00::3");
	/* The peer sends it REQs it never reads, until its queue is full. */
	for (i = 0; i < 400 && id < 0; i++) {
		h_req(m, 0x6000 + (uint32_t)i, PEER, "fd00::3");
		simpeer_send(&f->p, "fd00::3", m);
		if (i % 50 == 49) {
			st = hd_status(&f->d);
			if (json_path_int(h_client(st, "deaf"),
					  "counters.mads_dropped") > 0)
				id = json_path_int(h_client(st, "deaf"), "id");
			json_decref(st);
		}
	}
	assert_true(id > 0);
	snprintf(req, sizeof(req),
		 "{\"op\":\"disconnect_client\",\"client_id\":%lld}", id);
	snprintf(path, sizeof(path), "/tmp/rcm-cm-admin.%d", getpid());
	t0 = h_now_ms();
	assert_true(h_admin(path, req, reply, sizeof(reply)) > 0);
	assert_non_null(strstr(reply, "\"ok\":true"));
	/* Gone within the grace time (1 s) and a margin, though it reads
	 * nothing; its GID is free and the peer hears REJs for its REQs. */
	assert_true(hd_wait_client_gone(&f->d, "deaf"));
	assert_true(h_now_ms() - t0 < 1000 + 1000 * (uint64_t)h_time_scale());
	assert_int_equal(tc_register(&f->b, "fd00::3"), 0);
	assert_true(simpeer_recv(&f->p, r, NULL, H_DEADLINE_MS));
	assert_int_equal(cm_mad_attr_id(r), CM_ATTR_REJ);
	close(fd);
}

/* Issue 11, item 1 ------------------------------------------------------- */

static int has_link_down(struct tclient *tc, int n)
{
	return tc->link_downs >= n;
}

/* A's DREQ for its connection guest (the peer's peer_id, the host's
 * host_id) reaches the peer with the host's ID; the peer's DREP reaches A
 * with A's. */
static void a_disconnects(struct fx *f, uint32_t guest, uint32_t peer_id,
			  uint32_t host_id)
{
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	int n = f->a.nrx;

	h_mad(m, CM_ATTR_DREQ, guest, peer_id, 1);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_DREQ, r);
	assert_int_equal(local_of(r), host_id);
	assert_int_equal(remote_of(r), peer_id);
	h_mad(m, CM_ATTR_DREP, peer_id, host_id, 1);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, n + 1, CM_ATTR_DREP);
	assert_int_equal(remote_of(f->a.rx[n].mad), guest);
}

/* The daemon dies (kill -9) or stops (SIGTERM) and starts again: A's
 * library comes back by itself with its session, and A's connections,
 * active and passive, and a handshake in progress, go on with the right
 * IDs both ways. */
static void restart_keeps_connections(struct fx *f, int sig)
{
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	uint32_t h1, h2, h3, h4;
	uint64_t t0;
	int n;

	/* Active: A's 0x1234 with the peer's 0x9001. */
	h1 = establish(f, 0x1234, 0x9001);
	/* Passive: the peer's 0x9002 answered by A's 0x5678. */
	n = f->a.nrx;
	h_req(m, 0x9002, PEER, "fd00::1");
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, n + 1, CM_ATTR_REQ);
	h_mad(m, CM_ATTR_REP, 0x5678, 0x9002, 1);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REP, r);
	h2 = local_of(r);
	assert_int_equal(remote_of(r), 0x9002);
	h_mad(m, CM_ATTR_RTU, 0x9002, h2, 1);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, n + 2, CM_ATTR_RTU);
	/* In progress: A's REQ 0x2222, not answered yet. */
	h_req(m, 0x2222, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	h3 = local_of(r);
	/* Answered, its RTU not yet sent when the daemon goes (A's cm.c
	 * posts it and goes established; the RTU is lost with the link). */
	h4 = answered(f, 0x2223, 0x9005);

	hd_kill(&f->d, sig);
	/* Down: A's calls fail at once, without waiting for anything. */
	assert_true(tc_pump_until(&f->a, has_link_down, 1, H_DEADLINE_MS));
	h_mad(m, CM_ATTR_DREQ, 0x1234, 0x9001, 1);
	t0 = h_now_ms();
	assert_int_equal(tc_send_sync(&f->a, PEER, m), -ENOTCONN);
	assert_true(h_now_ms() - t0 < 100);
	assert_int_equal(f->a.link_downs, 1);

	t0 = h_now_ms();
	hd_restart(&f->d);
	assert_true(tc_pump_until(&f->a, tc_has_link_ups, 1, H_DEADLINE_MS));
	printf("link back up %llu ms after the daemon's start: %s\n",
	       (unsigned long long)(h_now_ms() - t0), f->a.link_message);
	assert_int_equal(f->a.link_status, 0);
	assert_true(h_now_ms() - t0 < 1000u * (unsigned)h_time_scale());
	assert_true(tc_pump_until(&f->b, tc_has_link_ups, 1, H_DEADLINE_MS));
	assert_true(hd_wait_status_int(&f->d, "counters.resumes", 2));
	assert_int_equal(hd_status_int(&f->d, "routing.gids"), 2);

	/* The peer's MRA for the handshake in progress reaches A, named by
	 * A's own ID. */
	n = f->a.nrx;
	h_mad(m, CM_ATTR_MRA, 0x9003, h3, 1);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, n + 1, CM_ATTR_MRA);
	assert_int_equal(remote_of(f->a.rx[n].mad), 0x2222);
	/* The peer ends the active connection: DREQ in, DREP out. */
	h_mad(m, CM_ATTR_DREQ, 0x9001, h1, 1);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, n + 2, CM_ATTR_DREQ);
	assert_int_equal(remote_of(f->a.rx[n + 1].mad), 0x1234);
	h_mad(m, CM_ATTR_DREP, 0x1234, 0x9001, 1);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_DREP, r);
	assert_int_equal(local_of(r), h1);
	assert_int_equal(remote_of(r), 0x9001);
	/* A ends the passive one: DREQ out, DREP in. */
	a_disconnects(f, 0x5678, 0x9002, h2);
	/* A ends the one whose RTU was lost: its DREQ is taken, as the
	 * peer (in REP_SENT) takes it. */
	a_disconnects(f, 0x2223, 0x9005, h4);
	/* And a new connection, at once. */
	establish(f, 0x3333, 0x9004);
}

static void test_restart_after_kill_keeps_connections(void **state)
{
	restart_keeps_connections(*state, SIGKILL);
}

static void test_restart_after_sigterm_keeps_connections(void **state)
{
	restart_keeps_connections(*state, SIGTERM);
}

static int setup_grace(void **state)
{
	static const char *const extra[] = { "--resume-grace-ms", "300", NULL };

	return setup_with(state, extra);
}

/* A client that does not come back after the restart (its VM died with
 * the daemon down): once the grace time is over its peer hears a DREQ,
 * as it would have had the daemon been up.  A stranger cannot take its
 * session over. */
static void test_restart_client_that_does_not_come_back(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE], kind, flags, buf[1024];
	uint32_t h, rid;
	int s, n;

	h = establish(f, 0x4444, 0x9044);
	hd_kill(&f->d, SIGKILL);
	tc_close(&f->a); /* gone while the daemon was */
	hd_restart(&f->d);
	assert_true(tc_pump_until(&f->b, tc_has_link_ups, 1, H_DEADLINE_MS));
	/* A wrong token claims nothing. */
	s = raw_connect(f->d.sock);
	assert_int_equal(
		raw_send_json(
			s, 1,
			"{\"op\":\"hello\",\"protocol\":{\"major\":1,\"minor\":0},\"name\":\"vm-a\",\"resume\":{\"client_id\":1,\"token\":\"00000000000000000000000000000000\"}}"),
		0);
	n = raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf), H_DEADLINE_MS);
	assert_true(n > 0);
	assert_non_null(strstr((char *)buf, "\"resumed\":false"));
	assert_non_null(strstr((char *)buf, "\"resume_error\":\"EPERM\""));
	close(s);
	/* Grace over: the peer is told. */
	assert_true(simpeer_recv(&f->p, r, NULL, H_DEADLINE_MS));
	assert_int_equal(cm_mad_attr_id(r), CM_ATTR_DREQ);
	assert_int_equal(local_of(r), h);
	assert_int_equal(remote_of(r), 0x9044);
	(void)m;
}

/* While a client of the previous daemon has not come back, what arrives
 * for it is neither answered for it nor applied to its entries: a peer's
 * REQ to its GID (held in the state file) gets no REJ, and a DREQ leaves
 * its connection established.  Both reach it when the peer retransmits
 * after it is back. */
static void test_restart_holds_what_arrives_for_the_absent(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	json_t *st, *page;
	long long a_id;
	char q[96];
	uint32_t h;
	int n;

	h = establish(f, 0x4545, 0x9045);
	st = hd_status(&f->d);
	a_id = json_integer_value(json_object_get(h_client(st, "vm-a"), "id"));
	json_decref(st);
	hd_kill(&f->d, SIGKILL);
	hd_restart(&f->d);
	/* A's and B's libraries have not run since: neither is back, and
	 * their GIDs are held for them. */
	assert_int_equal(hd_status_int(&f->d, "routing.gids"), 2);
	assert_int_equal(hd_status_int(&f->d, "routing.established"), 1);
	/* An admin sees A's connection by A's id, as held for its return. */
	snprintf(q, sizeof(q), "{\"op\":\"connections\",\"client\":%lld}",
		 a_id);
	page = hd_status_query(&f->d, q);
	assert_true(json_is_true(json_object_get(page, "ok")));
	assert_true(json_is_false(json_object_get(page, "connected")));
	assert_int_equal(json_path_int(page, "total"), 1);
	json_decref(page);
	h_req(m, 0x9046, PEER, "fd00::1");
	simpeer_send(&f->p, "fd00::1", m);
	h_mad(m, CM_ATTR_DREQ, 0x9045, h, 1);
	simpeer_send(&f->p, "fd00::1", m);
	assert_true(hd_wait_status_int(&f->d, "counters.drops.owner_away", 2));
	assert_int_equal(simpeer_recv(&f->p, r, NULL, 300),
			 0); /* no REJ, DREP */
	assert_int_equal(hd_status_int(&f->d,
				       "counters.answers.rej_no_listener"),
			 0);
	assert_int_equal(hd_status_int(&f->d, "routing.established"), 1);
	/* A comes back, and the peer retransmits both. */
	assert_true(tc_pump_until(&f->a, tc_has_link_ups, 1, H_DEADLINE_MS));
	n = f->a.nrx;
	h_req(m, 0x9046, PEER, "fd00::1");
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, n + 1, CM_ATTR_REQ);
	h_mad(m, CM_ATTR_DREQ, 0x9045, h, 1);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, n + 2, CM_ATTR_DREQ);
	assert_int_equal(remote_of(f->a.rx[n + 1].mad), 0x4545);
	/* B never comes back: after its grace its GID is free. */
}

/* A restart with other limits (--max-comm-ids, --max-clients: the state
 * file's layout) carries the connections over, and says so; limits too
 * small for what is in use refuse the start, saying why, and leave the
 * file for a start with room. */
static void test_restart_with_other_limits(void **state)
{
	static const char *const more[] = { "--max-comm-ids", "8192",
					    "--max-clients", "300", NULL };
	static const char *const too_small[] = { "--max-comm-ids",
						 "1",
						 "--max-clients",
						 "1",
						 "--max-peer-records",
						 "1",
						 "--max-timewait",
						 "1",
						 NULL };
	struct fx *f = *state;
	const char *args[32];
	char out[4096], log[8192];
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	uint32_t h[5];
	int i, n = 0;

	for (i = 0; i < 5; i++)
		h[i] = establish(f, 0x6000u + (uint32_t)i,
				 0x9060u + (uint32_t)i);
	hd_kill(&f->d, SIGTERM);

	/* Too small: refused, the file as it was. */
	args[n++] = "-s";
	args[n++] = f->d.sock;
	args[n++] = "-S";
	args[n++] = f->d.status;
	args[n++] = "--sim-fabric";
	args[n++] = f->d.fabric;
	args[n++] = "--config";
	args[n++] = "none";
	args[n++] = "--sim-port=sim0=fd00::1,fd00::2,fd00::3";
	for (i = 0; too_small[i]; i++)
		args[n++] = too_small[i];
	args[n] = NULL;
	assert_int_equal(hd_run(args, out, sizeof(out)), 1);
	if (strstr(out, "new limits cannot hold") == NULL)
		fail_msg("expected a refusal for the limits, got: %s", out);

	/* More room: carried over, and the client's connections with it. */
	f->d.extra = more;
	hd_restart(&f->d);
	assert_true(tc_pump_until(&f->a, tc_has_link_ups, 1, H_DEADLINE_MS));
	assert_int_equal(f->a.link_status, 0);
	assert_int_equal(hd_status_int(&f->d, "routing.established"), 5);
	hd_read_log(&f->d, log, sizeof(log));
	assert_non_null(strstr(log, "were carried over"));
	for (i = 0; i < 5; i++) {
		n = f->a.nrx;
		h_mad(m, CM_ATTR_DREQ, 0x9060u + (uint32_t)i, h[i], 1);
		simpeer_send(&f->p, "fd00::1", m);
		tc_expect(&f->a, n + 1, CM_ATTR_DREQ);
		assert_int_equal(remote_of(f->a.rx[n].mad),
				 0x6000u + (uint32_t)i);
	}
	(void)r;
}

/* A restart with other ports: entries name ports by index, and follow
 * their port to its new one; those of a port that is gone are lost,
 * and the log says how many (no DREQ can go out on a missing port). */
static void test_restart_with_other_ports(void **state)
{
	static const char *const moved[] = { "simz=fd02::1",
					     "sim0=fd00::1,fd00::2,fd00::3",
					     NULL };
	static const char *const gone[] = { "simz=fd02::1", NULL };
	struct fx *f = *state;
	uint8_t m[MAD_SIZE];
	char log[16384];
	uint32_t h;
	int n;

	h = establish(f, 0x6100, 0x9161);
	establish(f, 0x6101, 0x9162);
	hd_kill(&f->d, SIGTERM);
	/* sim0 is now port 1. */
	f->d.ports = moved;
	hd_restart(&f->d);
	assert_true(tc_pump_until(&f->a, tc_has_link_ups, 1, H_DEADLINE_MS));
	assert_int_equal(f->a.link_status, 0);
	assert_int_equal(hd_status_int(&f->d, "routing.established"), 2);
	n = f->a.nrx;
	h_mad(m, CM_ATTR_DREQ, 0x9161, h, 1);
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, n + 1, CM_ATTR_DREQ);
	assert_int_equal(remote_of(f->a.rx[n].mad), 0x6100);
	assert_int_equal(f->a.rx[n].addr.port, 1);

	/* sim0 is gone: what was on it cannot be kept, and is said. */
	hd_kill(&f->d, SIGTERM);
	f->d.ports = gone;
	hd_restart(&f->d);
	assert_true(hd_wait_status_int(&f->d, "routing.comm_ids", 0));
	hd_read_log(&f->d, log, sizeof(log));
	if (strstr(log, "entries were on ports this daemon does not have") ==
	    NULL)
		fail_msg("no word of the entries of the port that went: %s",
			 log);
	f->d.ports = ports;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_same_comm_id_two_vms,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_same_sidr_request_id_two_vms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_retransmits_and_mra,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_timeout_rej_after_abandoned_req, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lifetimes,
						setup_short_timers, teardown),
		cmocka_unit_test_setup_teardown(test_disconnect_mid_handshake,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_timeout_rej_names_the_reqs_guid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_class_port_info, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_inner_addresses_are_the_senders, setup, teardown),
		cmocka_unit_test_setup_teardown(test_address_block_is_qp1_cm,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_identity_and_state,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_mra_extends_handshake,
						setup_short_timers, teardown),
		cmocka_unit_test_setup_teardown(
			test_comm_id_reuse_new_connection, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_answers_are_budgeted_per_source, setup, teardown),
		cmocka_unit_test_setup_teardown(test_daemon_answers, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_restart_holds_what_arrives_for_the_absent, setup,
			teardown),
		cmocka_unit_test_setup_teardown(test_restart_with_other_limits,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart_with_other_ports,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_fabric_req_flood_leaves_vm_connecting, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			test_kick_client_that_never_reads, setup_kick,
			teardown),
		cmocka_unit_test_setup_teardown(test_daemon_stop_tells_no_peer,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_restart_after_kill_keeps_connections, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			test_restart_after_sigterm_keeps_connections, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			test_restart_client_that_does_not_come_back,
			setup_grace, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	if (getenv("RCM_TEST_UMAD_PORT"))
		return 0; /* the scripted peer lives on the sim fabric */
	return cmocka_run_group_tests_name("cm", tests, NULL, NULL);
}
