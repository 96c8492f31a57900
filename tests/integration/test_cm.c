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

#include <cmocka.h>

#include "harness.h"
#include "../../common/cm_mad.h"
#include "../../common/gid.h"
#include "../../common/wire.h"

#define PEER "fd99::1"
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
	assert_int_equal(tc_connect(&f.a, &f.d, "vm-a", 1, 0, err, sizeof(err)), 0);
	assert_int_equal(tc_register(&f.a, "fd00::1"), 0);
	assert_int_equal(tc_connect(&f.b, &f.d, "vm-b", 1, 0, err, sizeof(err)), 0);
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

static uint32_t local_of(const uint8_t *m) { return wire_get32(m + 24); }
static uint32_t remote_of(const uint8_t *m) { return wire_get32(m + 28); }

/* The peer expects a MAD of attr; returns it in mad. */
static void peer_expect(struct fx *f, uint16_t attr, uint8_t *mad)
{
	assert_true(simpeer_recv(&f->p, mad, NULL, H_DEADLINE_MS));
	assert_int_equal(cm_mad_attr_id(mad), attr);
}

static void vm_expect(struct tclient *tc, int n, uint16_t attr)
{
	assert_true(tc_pump_until(tc, tc_has_rx, n, H_DEADLINE_MS));
	assert_int_equal(cm_mad_attr_id(tc->rx[n - 1].mad), attr);
}

static int wait_status(struct hdaemon *d, const char *path, long long want)
{
	uint64_t deadline = h_now_ms() + H_DEADLINE_MS;

	for (;;) {
		if (hd_status_int(d, path) == want)
			return 1;
		if (h_now_ms() >= deadline)
			return 0;
		poll(NULL, 0, 10);
	}
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
	peer_expect(f, CM_ATTR_REQ, ra);
	h_req(m, 0x1234, "fd00::2", PEER);
	assert_int_equal(tc_send_sync(&f->b, PEER, m), 0);
	peer_expect(f, CM_ATTR_REQ, rb);
	ha = local_of(ra);
	hb = local_of(rb);
	assert_true(ha != hb && ha != 0x1234 && hb != 0x1234 && ha && hb);
	/* The wire TID's low half is the host ID too. */
	assert_int_equal(wire_get64(ra + 8) & 0xffffffff, ha);

	/* REP to B first, then to A. */
	h_mad(m, CM_ATTR_REP, 0x900b, hb, wire_get64(rb + 8));
	simpeer_send(&f->p, "fd00::2", m);
	h_mad(m, CM_ATTR_REP, 0x900a, ha, wire_get64(ra + 8));
	simpeer_send(&f->p, "fd00::1", m);
	vm_expect(&f->a, 1, CM_ATTR_REP);
	vm_expect(&f->b, 1, CM_ATTR_REP);
	assert_int_equal(remote_of(f->a.rx[0].mad), 0x1234);
	assert_int_equal(local_of(f->a.rx[0].mad), 0x900a);
	assert_int_equal(remote_of(f->b.rx[0].mad), 0x1234);
	assert_int_equal(local_of(f->b.rx[0].mad), 0x900b);
	/* The guest's TID comes back on the echoed reply. */
	assert_int_equal(wire_get64(f->a.rx[0].mad + 8), 0x42000000ull | 0x1234);

	/* RTU from both; the peer tells them apart by host ID. */
	h_mad(m, CM_ATTR_RTU, 0x1234, 0x900a, 1);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	peer_expect(f, CM_ATTR_RTU, ra);
	assert_int_equal(local_of(ra), ha);
	h_mad(m, CM_ATTR_RTU, 0x1234, 0x900b, 1);
	assert_int_equal(tc_send_sync(&f->b, PEER, m), 0);
	peer_expect(f, CM_ATTR_RTU, rb);
	assert_int_equal(local_of(rb), hb);
	assert_true(hd_status_int(&f->d, "routing.established") == 2);

	/* The peer disconnects A only. */
	h_mad(m, CM_ATTR_DREQ, 0x900a, ha, 2);
	simpeer_send(&f->p, "fd00::1", m);
	vm_expect(&f->a, 2, CM_ATTR_DREQ);
	assert_int_equal(remote_of(f->a.rx[1].mad), 0x1234);
	h_mad(m, CM_ATTR_DREP, 0x1234, 0x900a, 2);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	peer_expect(f, CM_ATTR_DREP, ra);
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
	peer_expect(f, CM_ATTR_SIDR_REQ, ra);
	gid_parse("fd00::2", &s);
	cma_hdr_build(m + CM_SIDR_REQ_OFF_PRIVATE_DATA, &s, &d, 4791);
	assert_int_equal(tc_send_sync(&f->b, PEER, m), 0);
	peer_expect(f, CM_ATTR_SIDR_REQ, rb);
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
	vm_expect(&f->a, 1, CM_ATTR_SIDR_REP);
	vm_expect(&f->b, 1, CM_ATTR_SIDR_REP);
	assert_int_equal(cm_field_get(f->a.rx[0].mad, CM_SIDR_REP_REQUEST_ID), 0x77);
	assert_int_equal(cm_field_get(f->a.rx[0].mad, CM_SIDR_REP_QPN), 0xa);
	assert_int_equal(cm_field_get(f->b.rx[0].mad, CM_SIDR_REP_REQUEST_ID), 0x77);
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
	vm_expect(&f->a, 2, CM_ATTR_REQ);
	assert_memory_equal(f->a.rx[0].mad, f->a.rx[1].mad, MAD_SIZE);
	h_mad(m, CM_ATTR_MRA, 0x51, 0xc0ffee, 7);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	peer_expect(f, CM_ATTR_MRA, r);
	h = local_of(r);
	assert_true(h != 0x51 && h != 0);
	h_mad(m, CM_ATTR_REP, 0x51, 0xc0ffee, 7);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	peer_expect(f, CM_ATTR_REP, r);
	assert_int_equal(local_of(r), h);       /* same connection, same ID */
	h_mad(m, CM_ATTR_RTU, 0xc0ffee, h, 7);
	simpeer_send(&f->p, "fd00::1", m);
	vm_expect(&f->a, 3, CM_ATTR_RTU);
	assert_int_equal(remote_of(f->a.rx[2].mad), 0x51);
	assert_true(hd_status_int(&f->d, "routing.established") == 1);
	/* The peer MRAs the VM's own REQ: it reaches the VM. */
	h_req(m, 0x61, "fd00::2", PEER);
	assert_int_equal(tc_send_sync(&f->b, PEER, m), 0);
	peer_expect(f, CM_ATTR_REQ, r);
	h_mad(m, CM_ATTR_MRA, 0x888, local_of(r), 8);
	simpeer_send(&f->p, "fd00::2", m);
	vm_expect(&f->b, 1, CM_ATTR_MRA);
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
	vm_expect(&f->b, 1, CM_ATTR_REQ);
	h_mad(m, CM_ATTR_REJ, 0xdead01, 0, 9);
	cm_field_set(m, CM_REJ_REASON, CM_REJ_REASON_TIMEOUT);
	simpeer_send(&f->p, "fd00::2", m);
	vm_expect(&f->b, 2, CM_ATTR_REJ);
	assert_int_equal(cm_field_get(f->b.rx[1].mad, CM_REJ_REASON),
			 CM_REJ_REASON_TIMEOUT);
	tc_pump_until(&f->a, tc_has_rx, 1, 100);
	assert_int_equal(f->a.nrx, 0);
	/* A REJ with no record at all is dropped and counted. */
	h_mad(m, CM_ATTR_REJ, 0xdead02, 0, 9);
	simpeer_send(&f->p, "fd00::2", m);
	assert_true(tc_pump_until(&f->b, tc_has_rx, 3, 300) == 0);
	assert_true(wait_status(&f->d, "counters.drops.zero_remote_comm_id", 1));
}

static int wait_comm_ids(struct hdaemon *d, long long want, int timeout_ms)
{
	uint64_t deadline = h_now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		if (hd_status_int(d, "routing.comm_ids") == want)
			return 1;
		if (h_now_ms() >= deadline)
			return 0;
		poll(NULL, 0, 10);
	}
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
	uint32_t h;
	json_t *st, *c;

	h_req(m, 0x71, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	peer_expect(f, CM_ATTR_REQ, r);
	h = local_of(r);
	h_mad(m, CM_ATTR_REP, 0x171, h, 1);
	simpeer_send(&f->p, "fd00::1", m);
	vm_expect(&f->a, 1, CM_ATTR_REP);
	h_mad(m, CM_ATTR_RTU, 0x71, 0x171, 1);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	peer_expect(f, CM_ATTR_RTU, r);
	/* An abandoned handshake from B. */
	t0 = h_now_ms();
	h_req(m, 0x72, "fd00::2", PEER);
	assert_int_equal(tc_send_sync(&f->b, PEER, m), 0);
	peer_expect(f, CM_ATTR_REQ, r);
	st = hd_status(&f->d);
	c = json_array_get(json_object_get(json_array_get(json_object_get(st, "clients"),
							  1), "connections"), 0);
	assert_string_equal(json_string_value(json_object_get(c, "state")), "handshake");
	assert_true(json_integer_value(json_object_get(c, "expires_in_ms")) <= 600);
	json_decref(st);
	assert_true(hd_status_int(&f->d, "routing.comm_ids") == 2);
	/* Gone within the handshake time plus one timer tick (250 ms)... */
	assert_true(wait_comm_ids(&f->d, 1, 600 + 250 + 500 * h_time_scale()));
	/* ...and not before it. */
	assert_true(h_now_ms() - t0 >= 600);
	/* The peer starts a connection to B, B answers REP, and the peer
	 * disappears mid-handshake: B's mapping is abandoned in time. */
	h_req(m, 0xabc0, PEER, "fd00::2");
	simpeer_send(&f->p, "fd00::2", m);
	vm_expect(&f->b, 1, CM_ATTR_REQ);
	h_mad(m, CM_ATTR_REP, 0x73, 0xabc0, 3);
	/* Taken before the daemon sees the REP: its timer starts later. */
	t0 = h_now_ms();
	assert_int_equal(tc_send_sync(&f->b, PEER, m), 0);
	peer_expect(f, CM_ATTR_REP, r);
	assert_true(hd_status_int(&f->d, "routing.comm_ids") == 2);
	assert_true(wait_comm_ids(&f->d, 1, 600 + 250 + 500 * h_time_scale()));
	assert_true(h_now_ms() - t0 >= 600);
	/* Three handshake periods idle: the established one stays. */
	poll(NULL, 0, 3 * 600);
	assert_true(hd_status_int(&f->d, "routing.established") == 1);
	h_mad(m, CM_ATTR_DREQ, 0x171, h, 2);
	simpeer_send(&f->p, "fd00::1", m);
	vm_expect(&f->a, 2, CM_ATTR_DREQ);
	h_mad(m, CM_ATTR_DREP, 0x71, 0x171, 2);
	t0 = h_now_ms();
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	assert_true(wait_comm_ids(&f->d, 0, 400 + 250 + 500 * h_time_scale()));
	assert_true(h_now_ms() - t0 >= 400);
}

/* A VM that goes away mid-handshake: its mappings go at once, and the
 * peer's late REP is dropped, not delivered to anyone. */
static void test_disconnect_mid_handshake(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];

	h_req(m, 0x81, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	peer_expect(f, CM_ATTR_REQ, r);
	tc_close(&f->a);
	assert_true(wait_comm_ids(&f->d, 0, H_DEADLINE_MS));
	h_mad(m, CM_ATTR_REP, 0x181, local_of(r), 1);
	simpeer_send(&f->p, "fd00::1", m);
	assert_true(tc_pump_until(&f->b, tc_has_rx, 1, 300) == 0);
	assert_true(wait_status(&f->d, "counters.drops.unknown_comm_id", 1));
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
	assert_int_equal(r[24], 1);     /* BaseVersion */
	assert_int_equal(r[25], 2);     /* ClassVersion */
	assert_int_equal(wire_get32(r + 28) & 0x1f, CM_CLASS_RESP_TIME_VALUE);
	cm_mad_init(m, CM_ATTR_REQ, 0x5151);
	m[MAD_OFF_METHOD] = MAD_METHOD_GET;
	simpeer_send(&f->p, "fd00::3", m);
	assert_true(simpeer_recv(&f->p, r, NULL, H_DEADLINE_MS));
	assert_int_equal(wire_get16(r + MAD_OFF_STATUS), MAD_STATUS_UNSUPPORTED_METHOD_ATTR);
	assert_true(wait_status(&f->d, "counters.class_requests_answered", 2));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_same_comm_id_two_vms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_same_sidr_request_id_two_vms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_retransmits_and_mra, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout_rej_after_abandoned_req, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lifetimes, setup_short_timers, teardown),
		cmocka_unit_test_setup_teardown(test_disconnect_mid_handshake, setup, teardown),
		cmocka_unit_test_setup_teardown(test_class_port_info, setup, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	if (getenv("RCM_TEST_UMAD_PORT"))
		return 0;       /* the scripted peer lives on the sim fabric */
	return cmocka_run_group_tests_name("cm", tests, NULL, NULL);
}
