// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The CM state machine (mux/conn.c): comm-ID translation, cm.c's states
 * and timers, what the table answers for clients that cannot, on a fake
 * clock. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "mux/conn.h"
#include "common/cm_mad.h"
#include "common/wire.h"
#include "tests/unit/conn_fixture.h"

/* TIDs as cm.c forms them (cm_form_tid()): the guest's own messages
 * (its TID's low half its comm ID) leave with the host ID there, every
 * one of a connection alike; an answer keeps the peer's TID where that
 * is the peer's comm ID, and gets the host ID otherwise (no tenant picks
 * what its sends are keyed by in ib_umad). */
static void test_wire_tids_as_cm_forms_them(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	uint32_t h, hp;

	(void)state;
	mk(mad, CM_ATTR_REQ, 0x21, 0, 0x1234000000000021ull);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 0, 0), 0);
	h = local_of(mad);
	assert_int_equal((uint32_t)wire_get64(mad + 8), h);
	assert_int_equal(wire_get64(mad + 8) >> 32, 0x12340000u);
	in(ct, CM_ATTR_REP, 0x900, h, 0x21, 2);
	mk(mad, CM_ATTR_RTU, 0x21, 0x900, 0x1234000000000021ull);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 3, 0), 0);
	assert_int_equal((uint32_t)wire_get64(mad + 8), h);
	mk(mad, CM_ATTR_DREQ, 0x21, 0x900, 0x1234000000000021ull);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 4, 0), 0);
	assert_int_equal((uint32_t)wire_get64(mad + 8), h);

	/* Passive: the peer's REQ (cm.c's TID: its comm ID 0x700 low);
	 * the REP that echoes it keeps it, one with a TID of its own
	 * choosing gets the host ID. */
	note_req(ct, B, 0x700, 5);
	mk(mad, CM_ATTR_REP, 0x31, 0x700, 0x9999000000000700ull);
	assert_int_equal(conn_outbound(ct, B, 0, mad, &path, 6, 0), 0);
	hp = local_of(mad);
	assert_int_equal((uint32_t)wire_get64(mad + 8), 0x700);
	mk(mad, CM_ATTR_REP, 0x31, 0x700, 0x9999000000000701ull);
	assert_int_equal(conn_outbound(ct, B, 0, mad, &path, 7, 0), 0);
	assert_int_equal((uint32_t)wire_get64(mad + 8), hp);
	conn_table_free(ct);
}

/* A REQ the client rejected leaves no TimeWait (cm.c resets its ID to
 * idle): the peer's REQ again is a new request for the client, where one
 * a DREQ ended is still a stale connection. */
static void test_rejected_req_again_is_new(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];

	(void)state;
	note_req(ct, B, 0x710, 0);
	mk(mad, CM_ATTR_REJ, 0x31, 0x710, 0x710);
	assert_int_equal(conn_outbound(ct, B, 0, mad, &path, 1, 0), 0);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 1);
	mk(mad, CM_ATTR_REQ, 0x710, 0, 0x710);
	assert_int_equal(conn_note_req(ct, B, 0, mad, &path, 2), 0);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 0);
	assert_int_equal(count(ct, CONN_REQ_RCVD), 1);
	assert_int_equal(nemitted, 0);
	conn_table_free(ct);
}

static void test_active_lifecycle_and_long_idle(void **state)
{
	struct conn_table *ct = new_table(7);
	uint32_t h;

	(void)state;
	h = out(ct, A, CM_ATTR_REQ, 0x21, 0, 0);
	assert_int_equal(count(ct, CONN_REQ_SENT), 1);
	assert_true(conn_table_next_deadline(ct) == HS);
	in(ct, CM_ATTR_REP, 0x900, h, 0x21, 1000); /* re-arms */
	assert_int_equal(count(ct, CONN_REP_RCVD), 1);
	assert_true(conn_table_next_deadline(ct) == 1000 + HS);
	out(ct, A, CM_ATTR_RTU, 0x21, 0x900, 1100);
	assert_int_equal(count(ct, CONN_ESTABLISHED), 1);
	assert_true(conn_table_next_deadline(ct) == UINT64_MAX);
	/* An established connection has no timer: 30 idle minutes later
	 * the peer's DREQ still reaches the VM. */
	assert_int_equal(conn_expire(ct, 30 * MIN), 0);
	assert_true(in(ct, CM_ATTR_DREQ, 0x900, h, 0x21, 30 * MIN) == A);
	assert_int_equal(count(ct, CONN_DREQ_RCVD), 1);
	out(ct, A, CM_ATTR_DREP, 0x21, 0x900, 30 * MIN + 5);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 1);
	/* The peer's retransmitted DREQ during timewait still arrives and
	 * re-arms the drain. */
	assert_true(in(ct, CM_ATTR_DREQ, 0x900, h, 0x21, 30 * MIN + 4000) == A);
	assert_int_equal(conn_expire(ct, 30 * MIN + 4000 + TW - 1), 0);
	assert_int_equal(conn_expire(ct, 30 * MIN + 4000 + TW), 1);
	assert_int_equal(total(ct), 0);
	assert_int_equal(in_rc(ct, CM_ATTR_DREQ, 0x900, h, 31 * MIN), -ENOENT);
	conn_table_free(ct);
}

/* An MRA extends the wait by the Service Timeout it carries, either way:
 * a REP that comes after the plain handshake time but within the MRA's
 * is delivered. */
static void test_mra_extends_by_service_timeout(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	uint64_t client;
	uint32_t h;

	(void)state;
	assert_true(cm_service_timeout_ms(24) == 68720); /* 4.096us * 2^24 */
	h = out(ct, A, CM_ATTR_REQ, 0x32, 0, 0);
	mk(mad, CM_ATTR_MRA, 0x2, h, 0);
	cm_field_set(mad, CM_MRA_MESSAGE_MRAED, CM_MSG_RESPONSE_REQ);
	cm_field_set(mad, CM_MRA_SERVICE_TIMEOUT, 24);
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 1000, &client), 0);
	assert_int_equal(conn_expire(ct, 1000 + HS + 60000), 0);
	assert_true(in(ct, CM_ATTR_REP, 0x2, h, 0x32, 1000 + HS + 60000) == A);
	out(ct, A, CM_ATTR_RTU, 0x32, 0x2, 1000 + HS + 60000);
	/* Without the MRA the same REP would have found nothing. */
	h = out(ct, A, CM_ATTR_REQ, 0x33, 0, 200000);
	assert_int_equal(conn_expire(ct, 200000 + HS), 1);
	assert_int_equal(in_rc(ct, CM_ATTR_REP, 0x3, h, 200000 + HS), -ENOENT);
	/* The client's own MRA keeps a peer's REQ as long. */
	note_req(ct, B, 0x700, 300000);
	mk(mad, CM_ATTR_MRA, 0x41, 0x700, 0);
	cm_field_set(mad, CM_MRA_SERVICE_TIMEOUT, 20); /* ~4.3 s */
	assert_int_equal(conn_outbound(ct, B, 0, mad, &path, 300000, 0), 0);
	assert_int_equal(conn_expire(ct, 300000 + HS + 4000), 0);
	assert_int_equal(conn_expire(ct, 300000 + HS + 4295), 1);
	conn_table_free(ct);
}

static void test_abandoned_handshake(void **state)
{
	struct conn_table *ct = new_table(7);
	uint32_t h;

	(void)state;
	h = out(ct, A, CM_ATTR_REQ, 0x31, 0, 0);
	/* A retransmitted REQ re-arms and keeps its host ID. */
	assert_int_equal(out(ct, A, CM_ATTR_REQ, 0x31, 0, 20000), h);
	assert_int_equal(total(ct), 1);
	assert_int_equal(conn_expire(ct, 20000 + HS - 1), 0);
	assert_int_equal(conn_expire(ct, 20000 + HS), 1);
	assert_int_equal(in_rc(ct, CM_ATTR_REP, 0x1, h, 20000 + HS), -ENOENT);
	/* A teardown whose DREP never comes is bounded by the same time,
	 * then drains in TimeWait as cm.c's does after its DREQ's last
	 * retry (cm_process_send_error()): the late DREP is absorbed. */
	h = established(ct, A, 0x33, 0x3, 300000);
	out(ct, A, CM_ATTR_DREQ, 0x33, 0x3, 400000);
	assert_int_equal(conn_expire(ct, 400000 + HS - 1), 0);
	assert_int_equal(conn_expire(ct, 400000 + HS), 1);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 1);
	assert_int_equal(in_rc(ct, CM_ATTR_DREP, 0x3, h, 400000 + HS + 1),
			 -EPROTO);
	assert_int_equal(conn_expire(ct, 400000 + HS + TW), 1);
	assert_int_equal(total(ct), 0);
	conn_table_free(ct);
}

/* The passive side: a REP keeps its mapping with no RTU in sight (the
 * guest goes established on the first data), and the connection still
 * ends cleanly; a timeout REJ reaches the client by the peer record. */
static void test_passive_side_without_rtu(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	uint64_t client;
	uint32_t h;

	(void)state;
	note_req(ct, B, 0x700, 0);
	assert_int_equal(count(ct, CONN_REQ_RCVD), 1);
	h = out(ct, B, CM_ATTR_REP, 0x41, 0x700, 10);
	assert_int_equal(total(ct), 1);
	assert_int_equal(count(ct, CONN_REP_SENT), 1);
	/* Both sides disconnect at once: the guest's DREQ crosses the
	 * peer's, and each side's DREP is taken. */
	note_req(ct, B, 0x720, 20);
	h = out(ct, B, CM_ATTR_REP, 0x43, 0x720, 20);
	assert_true(in(ct, CM_ATTR_DREQ, 0x720, h, 0x43, 20) == B);
	out(ct, B, CM_ATTR_DREQ, 0x43, 0x720, 20);
	out(ct, B, CM_ATTR_DREP, 0x43, 0x720, 20);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 1);
	h = out(ct, B, CM_ATTR_REP, 0x41, 0x700, 20); /* a dup REP */
	/* The guest disconnects (it went established on data). */
	out(ct, B, CM_ATTR_DREQ, 0x41, 0x700, 20);
	assert_true(in(ct, CM_ATTR_DREP, 0x700, h, 0x41, 21) == B);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 2);

	/* With an RTU: established. */
	note_req(ct, B, 0x710, 20 * HS);
	h = out(ct, B, CM_ATTR_REP, 0x42, 0x710, 20 * HS);
	assert_true(in(ct, CM_ATTR_RTU, 0x710, h, 0x42, 20 * HS + 1) == B);
	assert_int_equal(count(ct, CONN_ESTABLISHED), 1);

	/* A REQ that B never answers: the peer's timeout REJ (Remote Comm
	 * ID 0) still reaches B, and the record goes. */
	note_req(ct, B, 0x701, 30 * HS);
	mk(mad, CM_ATTR_REJ, 0x701, 0, 2);
	cm_field_set(mad, CM_REJ_REASON, CM_REJ_REASON_TIMEOUT);
	client = 0;
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 30 * HS, &client), 0);
	assert_true(client == B);
	assert_int_equal(count(ct, CONN_REQ_RCVD), 0);
	/* Without such a record, nobody's. */
	mk(mad, CM_ATTR_REJ, 0x702, 0, 2);
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 30 * HS, &client),
			 -EBADR);
	conn_table_free(ct);
}

/* The guest's RTU did not reach the daemon (it was refused, or lost when
 * the daemon restarted) while its cm.c went established on posting it:
 * its DREQ is taken in REP_RCVD, as the peer in REP_SENT takes it, and
 * the connection ends as any other. */
static void test_active_side_rtu_lost(void **state)
{
	struct conn_table *ct = new_table(7);
	uint32_t h;

	(void)state;
	h = out(ct, A, CM_ATTR_REQ, 0x81, 0, 0);
	in(ct, CM_ATTR_REP, 0x801, h, 0x81, 1);
	assert_int_equal(count(ct, CONN_REP_RCVD), 1);
	assert_int_equal(out(ct, A, CM_ATTR_DREQ, 0x81, 0x801, 2), h);
	assert_int_equal(count(ct, CONN_DREQ_SENT), 1);
	/* Nothing established can follow: no RTU, no LAP. */
	assert_int_equal(out_rc(ct, A, CM_ATTR_RTU, 0x81, 0x801, 2), -EPROTO);
	assert_int_equal(out_rc(ct, A, CM_ATTR_LAP, 0x81, 0x801, 2), -EPROTO);
	assert_true(in(ct, CM_ATTR_DREP, 0x801, h, 0x81, 3) == A);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 1);
	assert_int_equal(count(ct, CONN_REP_RCVD) + count(ct, CONN_DREQ_SENT),
			 0);
	conn_table_free(ct);
}

/* A peer's REQ asking for cm.c's timing of the REP that answers it. */
static void note_req_timed(struct conn_table *ct, uint64_t client,
			   uint32_t peer_id, unsigned timeout, unsigned retries,
			   uint64_t now)
{
	uint8_t mad[MAD_SIZE];

	mk(mad, CM_ATTR_REQ, peer_id, 0, 1);
	cm_field_set(mad, CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT, timeout);
	cm_field_set(mad, CM_REQ_MAX_CM_RETRIES, retries);
	assert_int_equal(conn_note_req(ct, client, 0, mad, &path, now), 0);
}

/* The passive side's REP waits for its RTU as long as the REQ asked
 * (cm.c sends it Max CM Retries more times, each after the REQ's Local
 * CM Response Timeout), and then its entry goes: a guest whose CM never
 * gives up cannot hold a slot of its quota for ever.  A peer's MRA for
 * the REP extends the wait, once. */
static void test_rep_waits_as_the_req_asks(void **state)
{
	struct conn_table *ct = new_table(7);
	const uint64_t window = 16 * 4096; /* 4.096 us * 2^20, 16 tries */
	uint8_t mad[MAD_SIZE];
	uint64_t client;
	uint32_t h;

	(void)state;
	note_req_timed(ct, B, 0x900, 20, 15, 0);
	h = out(ct, B, CM_ATTR_REP, 0x91, 0x900, 0);
	/* Its retransmissions do not extend the window. */
	assert_int_equal(out(ct, B, CM_ATTR_REP, 0x91, 0x900, 60000), h);
	assert_int_equal(conn_expire(ct, window), 0);
	assert_int_equal(count(ct, CONN_REP_SENT), 1);
	assert_true(conn_table_next_deadline(ct) <= 2 * window);
	assert_int_equal(conn_expire(ct, 2 * window), 1);
	assert_int_equal(total(ct), 0);
	assert_int_equal(out_rc(ct, B, CM_ATTR_REP, 0x91, 0x900, 2 * window),
			 -ENOENT);
	assert_int_equal(in_rc(ct, CM_ATTR_RTU, 0x900, h, 2 * window), -ENOENT);

	/* An RTU within the window establishes it, with no timer left. */
	note_req_timed(ct, B, 0x901, 20, 15, 0);
	h = out(ct, B, CM_ATTR_REP, 0x92, 0x901, 0);
	assert_true(in(ct, CM_ATTR_RTU, 0x901, h, 0x92, window) == B);
	assert_true(conn_table_next_deadline(ct) == UINT64_MAX);

	/* A REQ asking for 1 ms and no retry: a second's floor, then the
	 * peer's MRA of the REP waits a handshake and its Service
	 * Timeout more, and a second MRA (a duplicate) no longer. */
	note_req_timed(ct, B, 0x902, 8, 0, 0);
	h = out(ct, B, CM_ATTR_REP, 0x93, 0x902, 0);
	assert_true(conn_table_next_deadline(ct) == 1024);
	mk(mad, CM_ATTR_MRA, 0x902, h, 0);
	cm_field_set(mad, CM_MRA_MESSAGE_MRAED, CM_MSG_RESPONSE_REQ);
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 500, &client),
			 -EPROTO); /* it names the wrong message */
	cm_field_set(mad, CM_MRA_MESSAGE_MRAED, CM_MSG_RESPONSE_REP);
	cm_field_set(mad, CM_MRA_SERVICE_TIMEOUT, 20); /* 4,295 ms */
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 500, &client), 0);
	mk(mad, CM_ATTR_MRA, 0x902, h, 0);
	cm_field_set(mad, CM_MRA_MESSAGE_MRAED, CM_MSG_RESPONSE_REP);
	cm_field_set(mad, CM_MRA_SERVICE_TIMEOUT, 20);
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 20000, &client), 0);
	assert_int_equal(conn_expire(ct, 500 + HS + 4294), 0);
	assert_int_equal(conn_expire(ct, 500 + HS + 4295), 1);
	assert_int_equal(count(ct, CONN_REP_SENT), 0);
	conn_table_free(ct);
}

/* The active side's timeout REJ (cm_destroy_id() in REQ_SENT: Remote
 * Comm ID 0, our CA GUID in its ARI) reaches the guest whose REP is on
 * its way, as cm.c takes it in REP_SENT; a REJ of another reason without
 * our comm ID names nobody (cm_acquire_rejected_id()). */
static void test_timeout_rej_in_rep_sent(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	uint64_t client = 0;

	(void)state;
	note_req(ct, B, 0x910, 0);
	out(ct, B, CM_ATTR_REP, 0x94, 0x910, 1);
	mk(mad, CM_ATTR_REJ, 0x910, 0, 2);
	cm_field_set(mad, CM_REJ_MESSAGE_REJECTED, CM_MSG_RESPONSE_REQ);
	cm_field_set(mad, CM_REJ_REASON, CM_REJ_REASON_CONSUMER_DEFINED);
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 2, &client), -EBADR);
	assert_int_equal(count(ct, CONN_REP_SENT), 1);
	cm_field_set(mad, CM_REJ_REASON, CM_REJ_REASON_TIMEOUT);
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 3, &client), 0);
	assert_true(client == B);
	assert_int_equal(remote_of(mad), 0x94);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 1);
	/* In REQ_RCVD, unanswered, the same. */
	note_req(ct, B, 0x911, 4);
	mk(mad, CM_ATTR_REJ, 0x911, 0, 2);
	cm_field_set(mad, CM_REJ_REASON, CM_REJ_REASON_CONSUMER_DEFINED);
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 5, &client), -EBADR);
	cm_field_set(mad, CM_REJ_REASON, CM_REJ_REASON_TIMEOUT);
	client = 0;
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 5, &client), 0);
	assert_true(client == B);
	assert_int_equal(count(ct, CONN_REQ_RCVD), 0);
	conn_table_free(ct);
}

/* A client's MAD with the attribute and TID of its last send is the MAD
 * layer's retransmission, in whichever state it crosses the peer's
 * answer: a REQ after the REP arrived goes out as it is (not a new
 * connection that would retire the first), a REP after the RTU too; the
 * same comm ID with another TID is still a new connection. */
static void test_retransmission_is_not_reuse(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	uint32_t h;

	(void)state;
	h = out(ct, A, CM_ATTR_REQ, 0x95, 0, 0);
	in(ct, CM_ATTR_REP, 0x950, h, 0x95, 1);
	assert_int_equal(out(ct, A, CM_ATTR_REQ, 0x95, 0, 2), h);
	assert_int_equal(count(ct, CONN_REP_RCVD), 1);
	assert_int_equal(nemitted, 0); /* nobody rejected */
	assert_int_equal(total(ct), 1);
	out(ct, A, CM_ATTR_RTU, 0x95, 0x950, 3);
	assert_int_equal(count(ct, CONN_ESTABLISHED), 1);
	/* The same ID in a REQ of another TID: a new connection, the old
	 * one told goodbye. */
	mk(mad, CM_ATTR_REQ, 0x95, 0, 0x777);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 4, 0), 0);
	assert_true(local_of(mad) != h);
	assert_int_equal(nemitted, 1);
	assert_int_equal(emitted[0].why, CONN_ANS_DREQ_ABANDONED);

	/* The passive side's REP crossing the RTU. */
	note_req(ct, B, 0x960, 10);
	h = out(ct, B, CM_ATTR_REP, 0x96, 0x960, 10);
	assert_true(in(ct, CM_ATTR_RTU, 0x960, h, 0x96, 11) == B);
	assert_int_equal(out(ct, B, CM_ATTR_REP, 0x96, 0x960, 12), h);
	assert_int_equal(count(ct, CONN_ESTABLISHED), 1);
	mk(mad, CM_ATTR_REP, 0x96, 0x960, 0x888);
	assert_int_equal(conn_outbound(ct, B, 0, mad, &path, 13, 0), -EPROTO);
	conn_table_free(ct);
}

/* The peer's DREQ reaching a connection in REP_RCVD (its RTU refused or
 * lost) is the guest's to judge: delivered; if the guest was still in
 * REP_RCVD its cm.c drops it and sends its RTU, which passes, and the
 * DREQ's retransmission ends the connection. */
static void test_peer_dreq_in_rep_rcvd(void **state)
{
	struct conn_table *ct = new_table(7);
	uint32_t h;

	(void)state;
	h = out(ct, A, CM_ATTR_REQ, 0x97, 0, 0);
	in(ct, CM_ATTR_REP, 0x970, h, 0x97, 1);
	assert_true(in(ct, CM_ATTR_DREQ, 0x970, h, 0x97, 2) == A);
	assert_int_equal(count(ct, CONN_DREQ_RCVD), 1);
	/* cm.c's DREQ_RCVD waits for its consumer, with no timer. */
	assert_true(conn_table_next_deadline(ct) == UINT64_MAX);
	out(ct, A, CM_ATTR_RTU, 0x97, 0x970, 3);
	assert_true(in(ct, CM_ATTR_DREQ, 0x970, h, 0x97, 4) == A);
	out(ct, A, CM_ATTR_DREP, 0x97, 0x970, 5);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 1);
	conn_table_free(ct);
}

/* What answers a peer's REQ leaves as the REQ came (RoCE v1 or v2, as
 * cm_init_av_for_response() makes the passive side's path); what the
 * client started leaves as the port prefers. */
static void test_replies_leave_as_the_req_came(void **state)
{
	struct conn_table *ct = new_table(7);
	struct conn_path v1 = path;
	uint8_t mad[MAD_SIZE];
	uint32_t h;

	(void)state;
	v1.gid_type = 2; /* IBV_GID_TYPE_ROCE_V1 + 1 */
	mk(mad, CM_ATTR_REQ, 0x990, 0, 1);
	assert_int_equal(conn_note_req(ct, B, 0, mad, &v1, 0), 0);
	mk(mad, CM_ATTR_REP, 0x99, 0x990, 2);
	assert_int_equal(conn_outbound(ct, B, 0, mad, &path, 1, 0), 0);
	assert_int_equal(conn_reply_gid_type(ct, 0, mad), 2);
	h = local_of(mad);
	in(ct, CM_ATTR_RTU, 0x990, h, 0x99, 2);
	mk(mad, CM_ATTR_DREQ, 0x99, 0x990, 3);
	assert_int_equal(conn_outbound(ct, B, 0, mad, &path, 3, 0), 0);
	assert_int_equal(conn_reply_gid_type(ct, 0, mad), 2);
	mk(mad, CM_ATTR_REQ, 0x98, 0, 4);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 4, 0), 0);
	assert_int_equal(conn_reply_gid_type(ct, 0, mad), 0);
	conn_table_free(ct);
}

/* A connection is found by its comm ID on any port of the host, as
 * cm_acquire_id() finds it: after its path migrated to another port the
 * peer's DREQ still reaches it (the peer's GID is checked as ever). */
static void test_found_on_any_port(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	uint64_t client = 0;
	uint32_t h;

	(void)state;
	h = established(ct, A, 0x31, 0x931, 0);
	mk(mad, CM_ATTR_DREQ, 0x931, h, 1);
	assert_int_equal(conn_inbound(ct, 1, mad, &path, 1, &client), 0);
	assert_true(client == A);
	assert_int_equal(remote_of(mad), 0x31);
	mk(mad, CM_ATTR_DREP, 0x931, h, 1);
	assert_int_equal(conn_inbound(ct, 1, mad, &other_path, 2, &client),
			 -EPERM);
	conn_table_free(ct);
}

static void test_rej_from_the_client(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	uint32_t h;

	(void)state;
	/* REJ with Local Comm ID 0 (rejecting in REQ_RCVD): the record
	 * goes, as cm.c resets to idle, so a retransmitted REQ is new. */
	note_req(ct, A, 0x800, 0);
	mk(mad, CM_ATTR_REJ, 0, 0x800, 1);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 1, 0), 0);
	assert_int_equal(local_of(mad), 0);
	assert_int_equal(total(ct), 0);
	note_req(ct, A, 0x800, 2);
	assert_int_equal(count(ct, CONN_REQ_RCVD), 1);
	/* With its own (never mapped) ID, answering a REQ it received:
	 * mapped, then drained. */
	h = out(ct, A, CM_ATTR_REJ, 0x51, 0x800, 2);
	assert_true(h != 0 && h != 0x51);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 1);
	assert_int_equal(conn_expire(ct, 2 + TW), 1);
	/* Answering nothing it received: refused (it could otherwise
	 * reject, accept or confirm someone else's connection). */
	assert_int_equal(out_rc(ct, A, CM_ATTR_REJ, 0x52, 0x802, 3), -ENOENT);
	assert_int_equal(out_rc(ct, A, CM_ATTR_REJ, 0, 0x802, 3), -ENOENT);
	assert_int_equal(out_rc(ct, A, CM_ATTR_REP, 0x53, 0x802, 3), -ENOENT);
	assert_int_equal(out_rc(ct, A, CM_ATTR_MRA, 0x54, 0x802, 3), -ENOENT);
	/* Nor a REQ another client received. */
	note_req(ct, B, 0x803, 4);
	assert_int_equal(out_rc(ct, A, CM_ATTR_REP, 0x55, 0x803, 4), -ENOENT);
	/* A per-call limit below the table's (B's peer record of 0x803
	 * is charged to nobody). */
	mk(mad, CM_ATTR_REQ, 0x56, 0, 5);
	assert_int_equal(conn_outbound(ct, B, 0, mad, &path, 5, 1), 0);
	mk(mad, CM_ATTR_REQ, 0x57, 0, 5);
	assert_int_equal(conn_outbound(ct, B, 0, mad, &path, 5, 1), -ENOSPC);
	conn_table_free(ct);
}

static void test_refusals(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	static const uint16_t need[] = { CM_ATTR_RTU, CM_ATTR_DREQ,
					 CM_ATTR_DREP, CM_ATTR_LAP,
					 CM_ATTR_APR };
	uint32_t h;
	size_t i;

	(void)state;
	h = out(ct, A, CM_ATTR_REQ, 0x61, 0, 0);
	in(ct, CM_ATTR_REP, 0x1, h, 0x61, 0);
	for (i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
		/* B cannot act on A's comm ID (nor on any it lacks), nor A
		 * name another peer than its connection's. */
		assert_int_equal(out_rc(ct, B, need[i], 0x61, 0x1, 0), -ENOENT);
		assert_int_equal(out_rc(ct, A, need[i], 0, 0x1, 0), -ENOENT);
		assert_int_equal(out_rc(ct, A, need[i], 0x61, 0x2, 0), -ENOENT);
	}
	/* What cm.c would not send in REP_RCVD: DREP, LAP, APR. */
	assert_int_equal(out_rc(ct, A, CM_ATTR_DREP, 0x61, 0x1, 0), -EPROTO);
	assert_int_equal(out_rc(ct, A, CM_ATTR_LAP, 0x61, 0x1, 0), -EPROTO);
	assert_int_equal(out_rc(ct, A, CM_ATTR_APR, 0x61, 0x1, 0), -EPROTO);
	assert_int_equal(count(ct, CONN_REP_RCVD), 1);
	/* The passive side cannot send an RTU; nor REJ once established. */
	note_req(ct, B, 0x71, 0);
	out(ct, B, CM_ATTR_REP, 0x72, 0x71, 0);
	assert_int_equal(out_rc(ct, B, CM_ATTR_RTU, 0x72, 0x71, 0), -EPROTO);
	out(ct, A, CM_ATTR_RTU, 0x61, 0x1, 1);
	assert_int_equal(out_rc(ct, A, CM_ATTR_REJ, 0x61, 0x1, 1), -EPROTO);
	assert_int_equal(count(ct, CONN_ESTABLISHED), 1);
	mk(mad, CM_ATTR_REQ, 0, 0, 0);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 0, 0), -EINVAL);
	mk(mad, CM_ATTR_REP, 0, 1, 0);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 0, 0), -EINVAL);
	cm_mad_init(mad, CM_ATTR_SIDR_REQ, 0);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 0, 0), -EINVAL);
	conn_table_free(ct);
}

/* cm_acquire_id(): the host ID and, once known, the peer's comm ID and
 * GID.  A message that gets one wrong changes nothing; a DREQ so is
 * answered as one for no connection (cm_issue_drep()). */
static void test_inbound_matches_peer(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	uint64_t client = 0;
	uint32_t h;

	(void)state;
	h = established(ct, A, 0x81, 0x901, 0);
	/* Wrong peer comm ID: REJ, DREQ, DREP, RTU, LAP. */
	assert_int_equal(in_rc(ct, CM_ATTR_REJ, 0x902, h, 1), -EPERM);
	assert_int_equal(in_rc(ct, CM_ATTR_DREQ, 0x902, h, 1), -EPERM);
	assert_int_equal(in_rc(ct, CM_ATTR_DREP, 0x902, h, 1), -EPERM);
	assert_int_equal(in_rc(ct, CM_ATTR_LAP, 0, h, 1), -EPERM);
	/* Right IDs from another GID. */
	mk(mad, CM_ATTR_DREQ, 0x901, h, 0);
	assert_int_equal(conn_inbound(ct, 0, mad, &other_path, 1, &client),
			 -EPERM);
	assert_int_equal(count(ct, CONN_ESTABLISHED), 1);
	assert_int_equal(nemitted, 2);
	assert_int_equal(emitted[0].why, CONN_ANS_DREP_UNKNOWN);
	assert_int_equal(cm_mad_attr_id(emitted[0].mad), CM_ATTR_DREP);
	assert_int_equal(local_of(emitted[0].mad), h);
	assert_int_equal(remote_of(emitted[0].mad), 0x902);
	assert_int_equal(emitted[1].why, CONN_ANS_DREP_UNKNOWN);
	assert_true(gid_cmp(&emitted[1].path.peer_gid, &other_path.peer_gid) ==
		    0);
	/* A REJ of the REQ once the REP named the peer: cm.c takes it only
	 * before (cm_acquire_id(id, 0)). */
	mk(mad, CM_ATTR_REJ, 0x901, h, 0);
	cm_field_set(mad, CM_REJ_MESSAGE_REJECTED, CM_MSG_RESPONSE_REQ);
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 1, &client), -EPERM);
	assert_int_equal(count(ct, CONN_ESTABLISHED), 1);
	/* An RTU for a connection past its handshake is a duplicate. */
	assert_int_equal(in_rc(ct, CM_ATTR_RTU, 0x901, h, 1), -EPROTO);
	/* A DREP with no DREQ sent. */
	assert_int_equal(in_rc(ct, CM_ATTR_DREP, 0x901, h, 1), -EPROTO);
	assert_int_equal(count(ct, CONN_ESTABLISHED), 1);
	/* A second REP naming another peer ID is not this connection's;
	 * the same one again is a duplicate the guest answers. */
	assert_int_equal(in_rc(ct, CM_ATTR_REP, 0x903, h, 1), -EPERM);
	assert_true(in(ct, CM_ATTR_REP, 0x901, h, 0x81, 1) == A);
	/* A REJ of our REQ may come before we know the peer: Local 0. */
	h = out(ct, A, CM_ATTR_REQ, 0x82, 0, 2);
	mk(mad, CM_ATTR_REJ, 0, h, 0);
	cm_field_set(mad, CM_REJ_MESSAGE_REJECTED, CM_MSG_RESPONSE_REQ);
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 3, &client), 0);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 1);
	conn_table_free(ct);
}

/* A guest reuses a comm ID (it rebooted, its counter wrapped): a fresh
 * host ID, and the old connection's peer is told as cm.c would tell it. */
static void test_comm_id_reuse(void **state)
{
	struct conn_table *ct = new_table(7);
	uint32_t h_old, h_new;

	(void)state;
	h_old = established(ct, A, 0x91, 0xa01, 0);
	h_new = out(ct, A, CM_ATTR_REQ, 0x91, 0, 10);
	assert_true(h_new != h_old);
	/* The old peer got a DREQ from the old host ID. */
	assert_int_equal(nemitted, 1);
	assert_int_equal(emitted[0].why, CONN_ANS_DREQ_ABANDONED);
	assert_int_equal(cm_mad_attr_id(emitted[0].mad), CM_ATTR_DREQ);
	assert_int_equal(local_of(emitted[0].mad), h_old);
	assert_int_equal(remote_of(emitted[0].mad), 0xa01);
	assert_int_equal(gid_cmp(&emitted[0].path.peer_gid, &path.peer_gid), 0);
	/* Its DREP is absorbed, never shown to the guest... */
	assert_int_equal(in_rc(ct, CM_ATTR_DREP, 0xa01, h_old, 11), -ESTALE);
	/* ...and the new connection goes its own way. */
	assert_true(in(ct, CM_ATTR_REP, 0xa02, h_new, 0x91, 12) == A);
	out(ct, A, CM_ATTR_RTU, 0x91, 0xa02, 13);
	assert_int_equal(count(ct, CONN_ESTABLISHED), 1);
	/* Reuse of an ID in TimeWait: fresh host ID, nothing to say. */
	out(ct, A, CM_ATTR_DREQ, 0x91, 0xa02, 20);
	in(ct, CM_ATTR_DREP, 0xa02, h_new, 0x91, 21);
	assert_true(out(ct, A, CM_ATTR_REQ, 0x91, 0, 22) != h_new);
	assert_int_equal(nemitted, 1);
	/* The peer reuses its comm ID while ours is in TimeWait after a
	 * disconnect: REJ "stale connection", as cm_dup_req_handler()
	 * answers (one a REJ ended is no TimeWait in cm.c:
	 * test_rejected_req_again_is_new). */
	{
		uint8_t mad[MAD_SIZE];
		uint32_t hb;

		note_req(ct, B, 0xb01, 30);
		hb = out(ct, B, CM_ATTR_REP, 0xb1, 0xb01, 31);
		in(ct, CM_ATTR_RTU, 0xb01, hb, 0xb1, 31);
		in(ct, CM_ATTR_DREQ, 0xb01, hb, 0xb1, 31);
		out(ct, B, CM_ATTR_DREP, 0xb1, 0xb01, 31);
		mk(mad, CM_ATTR_REQ, 0xb01, 0, 1);
		assert_int_equal(conn_note_req(ct, B, 0, mad, &path, 32),
				 -ESTALE);
		assert_int_equal(nemitted, 2);
		assert_int_equal(emitted[1].why, CONN_ANS_REJ_STALE);
		assert_int_equal(cm_field_get(emitted[1].mad, CM_REJ_REASON),
				 CM_REJ_REASON_STALE_CONN);
		assert_int_equal(remote_of(emitted[1].mad), 0xb01);
	}
	conn_table_free(ct);
}

/* cm_issue_drep(): a DREQ for no connection gets a DREP, IDs swapped. */
static void test_unknown_dreq_answered(void **state)
{
	struct conn_table *ct = new_table(7);

	(void)state;
	assert_int_equal(in_rc(ct, CM_ATTR_DREQ, 0xd01, 0x4242, 0), -ENOENT);
	assert_int_equal(nemitted, 1);
	assert_int_equal(emitted[0].why, CONN_ANS_DREP_UNKNOWN);
	assert_int_equal(cm_mad_attr_id(emitted[0].mad), CM_ATTR_DREP);
	assert_int_equal(local_of(emitted[0].mad), 0x4242);
	assert_int_equal(remote_of(emitted[0].mad), 0xd01);
	assert_int_equal(gid_cmp(&emitted[0].path.peer_gid, &path.peer_gid), 0);
	/* Other unknown messages are only dropped. */
	assert_int_equal(in_rc(ct, CM_ATTR_DREP, 0xd01, 0x4242, 0), -ENOENT);
	assert_int_equal(nemitted, 1);
	conn_table_free(ct);
}

static void test_sidr_lifetime(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	uint64_t client;
	uint32_t ha, hb;

	(void)state;
	cm_mad_init(mad, CM_ATTR_SIDR_REQ, 0);
	cm_field_set(mad, CM_SIDR_REQ_REQUEST_ID, 0x33);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 0, 0), 0);
	ha = (uint32_t)cm_field_get(mad, CM_SIDR_REQ_REQUEST_ID);
	cm_mad_init(mad, CM_ATTR_SIDR_REQ, 0);
	cm_field_set(mad, CM_SIDR_REQ_REQUEST_ID, 0x33);
	assert_int_equal(conn_outbound(ct, B, 0, mad, &path, 0, 0), 0);
	hb = (uint32_t)cm_field_get(mad, CM_SIDR_REQ_REQUEST_ID);
	assert_true(ha != hb);
	cm_mad_init(mad, CM_ATTR_SIDR_REP, 0);
	cm_field_set(mad, CM_SIDR_REP_REQUEST_ID, hb);
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 5, &client), 0);
	assert_true(client == B);
	assert_int_equal(cm_field_get(mad, CM_SIDR_REP_REQUEST_ID), 0x33);
	/* A second answer is a duplicate. */
	cm_field_set(mad, CM_SIDR_REP_REQUEST_ID, hb);
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 6, &client), -EPROTO);
	/* Answered: drained after timewait; unanswered: after handshake. */
	assert_int_equal(conn_expire(ct, 5 + TW), 1);
	assert_int_equal(conn_expire(ct, HS), 1);
	conn_table_free(ct);
}

/* A client that goes with a peer's SIDR_REQ unanswered: its peer gets
 * the SIDR_REP REJECT cm_destroy_id() sends (cm_reject_sidr_req()), and
 * need not retry; one the client answered is quiet. */
static void test_gone_client_rejects_its_sidr_reqs(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];

	(void)state;
	cm_mad_init(mad, CM_ATTR_SIDR_REQ, 0x44);
	cm_field_set(mad, CM_SIDR_REQ_REQUEST_ID, 0x44);
	assert_int_equal(conn_note_sidr_req(ct, A, 0, mad, &path, 0), 0);
	cm_field_set(mad, CM_SIDR_REQ_REQUEST_ID, 0x45);
	assert_int_equal(conn_note_sidr_req(ct, A, 0, mad, &path, 0), 0);
	cm_mad_init(mad, CM_ATTR_SIDR_REP, 0x45);
	cm_field_set(mad, CM_SIDR_REP_REQUEST_ID, 0x45);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 1, 0), 0);
	nemitted = 0;
	conn_purge_client(ct, A);
	assert_int_equal(nemitted, 1);
	assert_int_equal(emitted[0].why, CONN_ANS_SIDR_REJ_ABANDONED);
	assert_int_equal(cm_mad_attr_id(emitted[0].mad), CM_ATTR_SIDR_REP);
	assert_int_equal(cm_field_get(emitted[0].mad, CM_SIDR_REP_REQUEST_ID),
			 0x44);
	assert_int_equal(cm_field_get(emitted[0].mad, CM_SIDR_REP_STATUS),
			 CM_SIDR_STATUS_REJECT);
	assert_true(gid_cmp(&emitted[0].path.peer_gid, &path.peer_gid) == 0);
	conn_table_free(ct);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wire_tids_as_cm_forms_them),
		cmocka_unit_test(test_rejected_req_again_is_new),
		cmocka_unit_test(test_active_lifecycle_and_long_idle),
		cmocka_unit_test(test_mra_extends_by_service_timeout),
		cmocka_unit_test(test_abandoned_handshake),
		cmocka_unit_test(test_passive_side_without_rtu),
		cmocka_unit_test(test_active_side_rtu_lost),
		cmocka_unit_test(test_rep_waits_as_the_req_asks),
		cmocka_unit_test(test_timeout_rej_in_rep_sent),
		cmocka_unit_test(test_retransmission_is_not_reuse),
		cmocka_unit_test(test_peer_dreq_in_rep_rcvd),
		cmocka_unit_test(test_replies_leave_as_the_req_came),
		cmocka_unit_test(test_found_on_any_port),
		cmocka_unit_test(test_rej_from_the_client),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_inbound_matches_peer),
		cmocka_unit_test(test_comm_id_reuse),
		cmocka_unit_test(test_unknown_dreq_answered),
		cmocka_unit_test(test_sidr_lifetime),
		cmocka_unit_test(test_gone_client_rejects_its_sidr_reqs),
	};

	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("conn", tests, NULL, NULL);
}
