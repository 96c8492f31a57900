// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The host-process library's CM endpoint (backend/rdmacm/cep.c) against
 * the kernel's cm.c: which message each state sends and accepts, retries
 * on the REQ's own timing, duplicates answered, and what destroying an
 * endpoint tells the peer (cm_destroy_id()).  Time is a number here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backend/rdmacm/rcm.h"

#define LOCAL_ID 0x1000
#define PEER_ID 0x2000

struct rec {
	int nsent;
	uint8_t sent[32][MAD_SIZE];
	int nev;
	enum cep_event ev[32];
};

static void rec_send(void *ctx, const uint8_t *mad)
{
	struct rec *r = ctx;

	if (r->nsent < 32)
		memcpy(r->sent[r->nsent], mad, MAD_SIZE);
	r->nsent++;
}

static void rec_event(void *ctx, enum cep_event ev, const uint8_t *mad)
{
	struct rec *r = ctx;

	(void)mad;
	if (r->nev < 32)
		r->ev[r->nev] = ev;
	r->nev++;
}

static const struct cep_ops ops = { rec_send, rec_event };
static const struct gid peer = { { 0xfd, 0x99, [15] = 1 } };

static uint16_t attr_of(struct rec *r, int n)
{
	return cm_mad_attr_id(r->sent[n]);
}

/* An active endpoint with its REQ out at time 0. */
static void req_sent(struct cep *c, struct rec *r)
{
	uint8_t m[MAD_SIZE] = { 0 };

	memset(r, 0, sizeof(*r));
	cep_init(c, &ops, r, LOCAL_ID);
	cm_field_set(m, CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT,
		     CEP_CM_RESPONSE_TIMEOUT);
	cm_field_set(m, CM_REQ_MAX_CM_RETRIES, 3);
	cm_field_set(m, CM_REQ_LOCAL_QPN, 0x42);
	assert_int_equal(cep_send_req(c, m, &peer, 0), 0);
	assert_int_equal(r->nsent, 1);
	assert_int_equal(attr_of(r, 0), CM_ATTR_REQ);
	/* The body the caller built is what left, with its IDs. */
	assert_int_equal(cm_field_get(r->sent[0], CM_REQ_LOCAL_QPN), 0x42);
	assert_int_equal(cm_field_get(r->sent[0], CM_REQ_LOCAL_COMM_ID),
			 LOCAL_ID);
}

static void peer_msg(uint8_t *m, uint16_t attr, uint64_t tid)
{
	cm_mad_init(m, attr, tid);
	cm_field_set(m, CM_REP_LOCAL_COMM_ID, PEER_ID);   /* P+0 */
	cm_field_set(m, CM_REP_REMOTE_COMM_ID, LOCAL_ID); /* P+4 */
}

static void test_req_retried_on_its_timing_then_timeout(void **state)
{
	struct cep c;
	struct rec r;
	/* cm.c: 2 x 2^(16-8) ms of packet lifetime + 2^(20-8) ms. */
	uint64_t t = 512 + 4096, now = 0;
	int i;

	(void)state;
	req_sent(&c, &r);
	cep_tick(&c, t - 1);
	assert_int_equal(r.nsent, 1);
	for (i = 1; i <= 3; i++) {
		now += t;
		cep_tick(&c, now);
		assert_int_equal(r.nsent, 1 + i);
		assert_int_equal(attr_of(&r, i), CM_ATTR_REQ);
	}
	cep_tick(&c, now + t);
	assert_int_equal(r.nev, 1);
	assert_int_equal(r.ev[0], CEP_EV_TIMEOUT);
	assert_int_equal(c.state, CEP_IDLE);
}

static void test_rep_then_rtu_and_duplicate_rep(void **state)
{
	struct cep c;
	struct rec r;
	uint8_t m[MAD_SIZE];

	(void)state;
	req_sent(&c, &r);
	peer_msg(m, CM_ATTR_REP, c.tid);
	cm_field_set(m, CM_REP_LOCAL_QPN, 0x77);
	cep_input(&c, m, 10);
	assert_int_equal(c.state, CEP_REP_RCVD);
	assert_int_equal(c.remote_qpn, 0x77);
	assert_int_equal(r.ev[0], CEP_EV_REP);
	assert_int_equal(cep_send_rtu(&c), 0);
	assert_int_equal(attr_of(&r, 1), CM_ATTR_RTU);
	assert_int_equal(c.state, CEP_ESTABLISHED);
	/* The peer did not get the RTU: its REP again gets it again. */
	cep_input(&c, m, 12);
	assert_int_equal(r.nsent, 3);
	assert_int_equal(attr_of(&r, 2), CM_ATTR_RTU);
	assert_int_equal(r.nev, 1);
	/* A REP for another comm ID is not ours. */
	cm_field_set(m, CM_REP_REMOTE_COMM_ID, LOCAL_ID + 1);
	cep_input(&c, m, 13);
	assert_int_equal(r.nsent, 3);
}

static void test_mra_holds_the_retry(void **state)
{
	struct cep c;
	struct rec r;
	uint8_t m[MAD_SIZE];

	(void)state;
	req_sent(&c, &r);
	peer_msg(m, CM_ATTR_MRA, c.tid);
	cm_field_set(m, CM_MRA_SERVICE_TIMEOUT, 22); /* about 17 s */
	cep_input(&c, m, 100);
	cep_tick(&c, 100 + 4608 + 1000);
	assert_int_equal(r.nsent, 1); /* no retry yet */
	cep_tick(&c, 100 + 4608 + cm_service_timeout_ms(22));
	assert_int_equal(r.nsent, 2);
}

static void test_passive_rej_and_rep_states(void **state)
{
	struct cep c;
	struct rec r = { 0 };
	uint8_t req[MAD_SIZE], m[MAD_SIZE] = { 0 };

	(void)state;
	cep_init(&c, &ops, &r, LOCAL_ID);
	cm_mad_init(req, CM_ATTR_REQ, 0xabc);
	cm_field_set(req, CM_REQ_LOCAL_COMM_ID, PEER_ID);
	cm_field_set(req, CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT, 20);
	cm_field_set(req, CM_REQ_MAX_CM_RETRIES, 2);
	cep_req_received(&c, req, &peer);
	assert_int_equal(c.state, CEP_REQ_RCVD);
	/* Nothing but a REP or a REJ fits now. */
	assert_int_equal(cep_send_rtu(&c), -EINVAL);
	assert_int_equal(cep_send_dreq(&c, 0), -EINVAL);
	assert_int_equal(cep_send_rej(&c, CM_REJ_REASON_CONSUMER_DEFINED, NULL,
				      0, "no", 3, 0),
			 0);
	assert_int_equal(attr_of(&r, 0), CM_ATTR_REJ);
	assert_int_equal(cm_mad_tid(r.sent[0]), 0xabc);
	assert_int_equal(cm_field_get(r.sent[0], CM_REJ_MESSAGE_REJECTED),
			 CM_MSG_RESPONSE_REQ);
	assert_int_equal(cm_field_get(r.sent[0], CM_REJ_REMOTE_COMM_ID),
			 PEER_ID);
	assert_memory_equal(r.sent[0] + CM_REJ_OFF_PRIVATE_DATA, "no", 3);
	assert_int_equal(c.state, CEP_IDLE);

	/* Accepted this time: the REP answers the REQ's transaction and
	 * is retried on the REQ's timing; the RTU establishes. */
	cep_req_received(&c, req, &peer);
	assert_int_equal(cep_send_rep(&c, m, 0), 0);
	assert_int_equal(cm_mad_tid(r.sent[1]), 0xabc);
	cep_tick(&c, 4608);
	assert_int_equal(r.nsent, 3);
	assert_int_equal(attr_of(&r, 2), CM_ATTR_REP);
	peer_msg(m, CM_ATTR_RTU, 0xabc);
	cep_input(&c, m, 5000);
	assert_int_equal(c.state, CEP_ESTABLISHED);
	assert_int_equal(r.ev[0], CEP_EV_RTU);
}

/* Up, from the active side. */
static void established(struct cep *c, struct rec *r)
{
	uint8_t m[MAD_SIZE];

	req_sent(c, r);
	peer_msg(m, CM_ATTR_REP, c->tid);
	cep_input(c, m, 1);
	assert_int_equal(cep_send_rtu(c), 0);
	r->nev = 0;
	r->nsent = 0;
}

static void test_disconnect_both_ways(void **state)
{
	struct cep c;
	struct rec r;
	uint8_t m[MAD_SIZE];

	(void)state;
	established(&c, &r);
	assert_int_equal(cep_send_dreq(&c, 10), 0);
	assert_int_equal(attr_of(&r, 0), CM_ATTR_DREQ);
	peer_msg(m, CM_ATTR_DREP, c.tid);
	cep_input(&c, m, 20);
	assert_int_equal(c.state, CEP_TIMEWAIT);
	assert_int_equal(r.ev[0], CEP_EV_DREP);
	cep_tick(&c, 20 + CEP_TIMEWAIT_MS);
	assert_int_equal(c.state, CEP_IDLE);
	assert_int_equal(r.ev[1], CEP_EV_TIMEWAIT_EXIT);

	/* The peer disconnects: DREQ reported; our DREP answers it, and
	 * again when the peer's DREQ comes back in timewait. */
	established(&c, &r);
	peer_msg(m, CM_ATTR_DREQ, 0x555);
	cep_input(&c, m, 30);
	assert_int_equal(c.state, CEP_DREQ_RCVD);
	assert_int_equal(r.ev[0], CEP_EV_DREQ);
	assert_int_equal(cep_send_drep(&c, 31), 0);
	assert_int_equal(attr_of(&r, 0), CM_ATTR_DREP);
	assert_int_equal(cm_mad_tid(r.sent[0]), 0x555);
	cep_input(&c, m, 40);
	assert_int_equal(r.nsent, 2);
	assert_int_equal(attr_of(&r, 1), CM_ATTR_DREP);

	/* A DREQ nobody answers: retried, then the connection is gone
	 * all the same. */
	established(&c, &r);
	assert_int_equal(cep_send_dreq(&c, 0), 0);
	cep_tick(&c, 4608 * 4 + 10);
	cep_tick(&c, 4608 * 8 + 10);
	cep_tick(&c, 4608 * 12 + 10);
	cep_tick(&c, 4608 * 16 + 10);
	assert_int_equal(r.nsent, 4); /* the DREQ and three retries */
	assert_int_equal(r.ev[r.nev - 1], CEP_EV_DREQ_TIMEOUT);
}

static void test_destroy_tells_the_peer(void **state)
{
	struct cep c;
	struct rec r;
	uint64_t guid = 0x0102030405060708ull, be;

	(void)state;
	/* REQ_SENT: REJ "timeout" with the CA GUID as its ARI. */
	req_sent(&c, &r);
	cep_destroy(&c, &guid, 5);
	assert_int_equal(attr_of(&r, 1), CM_ATTR_REJ);
	assert_int_equal(cm_field_get(r.sent[1], CM_REJ_REASON),
			 CM_REJ_REASON_TIMEOUT);
	be = htobe64(guid);
	assert_memory_equal(r.sent[1] + CM_REJ_OFF_ARI, &be, 8);
	assert_int_equal(c.state, CEP_IDLE);
	/* ESTABLISHED: a DREQ, and no retries after. */
	established(&c, &r);
	cep_destroy(&c, &guid, 5);
	assert_int_equal(attr_of(&r, 0), CM_ATTR_DREQ);
	cep_tick(&c, 100000);
	assert_int_equal(r.nsent, 1);
	assert_int_equal(r.nev, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_req_retried_on_its_timing_then_timeout),
		cmocka_unit_test(test_rep_then_rtu_and_duplicate_rep),
		cmocka_unit_test(test_mra_holds_the_retry),
		cmocka_unit_test(test_passive_rej_and_rep_states),
		cmocka_unit_test(test_disconnect_both_ways),
		cmocka_unit_test(test_destroy_tells_the_peer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
