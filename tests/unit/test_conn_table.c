// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The connection table: per-client comm-ID translation and connection
 * lifetimes, on a fake clock. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../mux/conn_table.h"
#include "../../common/cm_mad.h"
#include "../../common/wire.h"

#define A 1
#define B 2
#define HS 60000u       /* handshake */
#define TW 10000u       /* timewait */
#define MIN 60000u

static struct gid peer;

static struct conn_table *new_table(uint32_t operand)
{
	struct conn_limits lim = { .max_per_client = 64, .handshake_ms = HS,
				   .timewait_ms = TW };
	struct conn_table *ct = conn_table_new(&lim, operand);

	gid_parse("fd00::99", &peer);
	assert_non_null(ct);
	return ct;
}

static void mk(uint8_t *mad, uint16_t attr, uint32_t local, uint32_t remote,
	       uint64_t tid)
{
	cm_mad_init(mad, attr, tid);
	wire_put32(mad + 24, local);
	wire_put32(mad + 28, remote);
}

static uint32_t local_of(const uint8_t *mad) { return wire_get32(mad + 24); }
static uint32_t remote_of(const uint8_t *mad) { return wire_get32(mad + 28); }

/* Outbound message from client; returns the host comm ID it carries. */
static uint32_t out(struct conn_table *ct, uint64_t client, uint16_t attr,
		    uint32_t local, uint32_t remote, uint64_t now)
{
	uint8_t mad[MAD_SIZE];

	mk(mad, attr, local, remote, 0x1234000000000000ull | local);
	assert_int_equal(conn_outbound(ct, client, 0, mad, &peer, now, 0), 0);
	return local_of(mad);
}

/* Inbound message for host ID `remote`: returns the client, checks the
 * guest's ID came back. */
static uint64_t in(struct conn_table *ct, uint16_t attr, uint32_t local,
		   uint32_t remote, uint32_t want_guest, uint64_t now)
{
	uint8_t mad[MAD_SIZE];
	uint64_t client = 0;

	mk(mad, attr, local, remote, 0);
	assert_int_equal(conn_inbound(ct, 0, mad, &peer, now, &client), 0);
	assert_int_equal(remote_of(mad), want_guest);
	return client;
}

static int in_rc(struct conn_table *ct, uint16_t attr, uint32_t local,
		 uint32_t remote, uint64_t now)
{
	uint8_t mad[MAD_SIZE];
	uint64_t client = 0;

	mk(mad, attr, local, remote, 0);
	return conn_inbound(ct, 0, mad, &peer, now, &client);
}

static unsigned count(struct conn_table *ct, enum conn_state s)
{
	struct conn_counts c;

	conn_counts(ct, &c);
	return c.by_state[s];
}

static unsigned total(struct conn_table *ct)
{
	struct conn_counts c;

	conn_counts(ct, &c);
	return c.total;
}

static void test_two_clients_same_comm_id(void **state)
{
	struct conn_table *ct = new_table(0x9e3779b9);
	uint8_t mad[MAD_SIZE];
	uint32_t ha, hb;
	uint64_t client;

	(void)state;
	ha = out(ct, A, CM_ATTR_REQ, 0x10, 0, 0);
	hb = out(ct, B, CM_ATTR_REQ, 0x10, 0, 0);
	assert_true(ha != 0 && hb != 0 && ha != hb && ha != 0x10 && hb != 0x10);
	assert_true(in(ct, CM_ATTR_REP, 0x500, hb, 0x10, 1) == B);
	assert_true(in(ct, CM_ATTR_REP, 0x501, ha, 0x10, 1) == A);
	/* The wire TID's low half names the entry; replies that echo it
	 * get the guest's TID back. */
	mk(mad, CM_ATTR_RTU, 0x10, 0x501, 0xabcd000000000010ull);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &peer, 2, 0), 0);
	assert_int_equal(wire_get64(mad + 8), 0xabcd000000000000ull | ha);
	mk(mad, CM_ATTR_DREQ, 0x501, ha, 0x7777000000000000ull | ha);
	assert_int_equal(conn_inbound(ct, 0, mad, &peer, 3, &client), 0);
	assert_true(client == A);
	assert_int_equal(wire_get64(mad + 8), 0xabcd000000000010ull);
	conn_table_free(ct);
}

static void test_active_lifecycle_and_long_idle(void **state)
{
	struct conn_table *ct = new_table(7);
	uint32_t h;

	(void)state;
	h = out(ct, A, CM_ATTR_REQ, 0x21, 0, 0);
	assert_int_equal(count(ct, CONN_HANDSHAKE), 1);
	assert_true(conn_next_deadline(ct) == HS);
	in(ct, CM_ATTR_REP, 0x900, h, 0x21, 1000);          /* re-arms */
	assert_true(conn_next_deadline(ct) == 1000 + HS);
	out(ct, A, CM_ATTR_RTU, 0x21, 0x900, 1100);
	assert_int_equal(count(ct, CONN_ESTABLISHED), 1);
	assert_true(conn_next_deadline(ct) == UINT64_MAX);
	/* An established connection has no timer: 30 idle minutes later
	 * the peer's DREQ still reaches the VM. */
	assert_int_equal(conn_expire(ct, 30 * MIN), 0);
	assert_true(in(ct, CM_ATTR_DREQ, 0x900, h, 0x21, 30 * MIN) == A);
	assert_int_equal(count(ct, CONN_DISCONNECTING), 1);
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

static void test_abandoned_handshake(void **state)
{
	struct conn_table *ct = new_table(7);
	uint32_t h;

	(void)state;
	h = out(ct, A, CM_ATTR_REQ, 0x31, 0, 0);
	/* A retransmitted REQ re-arms. */
	assert_int_equal(out(ct, A, CM_ATTR_REQ, 0x31, 0, 20000), h);
	assert_int_equal(total(ct), 1);
	assert_int_equal(conn_expire(ct, 20000 + HS - 1), 0);
	assert_int_equal(conn_expire(ct, 20000 + HS), 1);
	assert_int_equal(in_rc(ct, CM_ATTR_REP, 0x1, h, 20000 + HS), -ENOENT);
	/* MRA from the peer extends the wait the same way. */
	h = out(ct, A, CM_ATTR_REQ, 0x32, 0, 100000);
	in(ct, CM_ATTR_MRA, 0x2, h, 0x32, 150000);
	assert_int_equal(conn_expire(ct, 100000 + HS), 0);
	assert_int_equal(conn_expire(ct, 150000 + HS), 1);
	/* A teardown whose DREP never comes is bounded the same way. */
	h = out(ct, A, CM_ATTR_REQ, 0x33, 0, 300000);
	in(ct, CM_ATTR_REP, 0x3, h, 0x33, 300001);
	out(ct, A, CM_ATTR_RTU, 0x33, 0x3, 300002);
	out(ct, A, CM_ATTR_DREQ, 0x33, 0x3, 400000);
	assert_int_equal(conn_expire(ct, 400000 + HS - 1), 0);
	assert_int_equal(conn_expire(ct, 400000 + HS), 1);
	conn_table_free(ct);
}

static void test_passive_side_and_timeout_rej(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	uint64_t client;
	uint32_t h;

	(void)state;
	/* An inbound REQ (peer's comm ID 0x700) routed to B. */
	mk(mad, CM_ATTR_REQ, 0x700, 0, 1);
	assert_int_equal(conn_note_req(ct, B, 0, mad, &peer, 0), 0);
	assert_int_equal(count(ct, CONN_REQ_RCVD), 1);
	/* B answers with REP: the record becomes B's mapping. */
	h = out(ct, B, CM_ATTR_REP, 0x41, 0x700, 10);
	assert_int_equal(total(ct), 1);
	assert_int_equal(count(ct, CONN_HANDSHAKE), 1);
	assert_true(in(ct, CM_ATTR_RTU, 0x700, h, 0x41, 20) == B);
	assert_int_equal(count(ct, CONN_ESTABLISHED), 1);

	/* Another REQ that B never answers: the peer gives up and sends a
	 * timeout REJ with Remote Comm ID 0; it still reaches B. */
	mk(mad, CM_ATTR_REQ, 0x701, 0, 1);
	assert_int_equal(conn_note_req(ct, B, 0, mad, &peer, 100), 0);
	mk(mad, CM_ATTR_REJ, 0x701, 0, 2);
	cm_field_set(mad, CM_REJ_REASON, CM_REJ_REASON_TIMEOUT);
	client = 0;
	assert_int_equal(conn_inbound(ct, 0, mad, &peer, 5000, &client), 0);
	assert_true(client == B);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 1);
	/* Without such a record, nobody's. */
	mk(mad, CM_ATTR_REJ, 0x702, 0, 2);
	assert_int_equal(conn_inbound(ct, 0, mad, &peer, 5000, &client), -EBADR);
	/* A REQ record left alone goes after the handshake timeout. */
	mk(mad, CM_ATTR_REQ, 0x703, 0, 1);
	assert_int_equal(conn_note_req(ct, B, 0, mad, &peer, 6000), 0);
	assert_int_equal(conn_expire(ct, 6000 + HS), 2);   /* + the REJ'd one */
	assert_int_equal(total(ct), 1);
	conn_table_free(ct);
}

static void test_rej_from_the_client(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	uint32_t h;

	(void)state;
	/* REJ with Local Comm ID 0 (rejecting in REQ_RCVD): unchanged. */
	mk(mad, CM_ATTR_REQ, 0x800, 0, 1);
	conn_note_req(ct, A, 0, mad, &peer, 0);
	mk(mad, CM_ATTR_REJ, 0, 0x800, 1);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &peer, 1, 0), 0);
	assert_int_equal(local_of(mad), 0);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 1);
	/* With its own (never mapped) ID, answering a REQ it received:
	 * mapped, then drained. */
	mk(mad, CM_ATTR_REQ, 0x801, 0, 1);
	conn_note_req(ct, A, 0, mad, &peer, 0);
	h = out(ct, A, CM_ATTR_REJ, 0x51, 0x801, 2);
	assert_true(h != 0 && h != 0x51);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 2);
	assert_int_equal(conn_expire(ct, 2 + TW), 2);
	/* Answering nothing it received: refused (it could otherwise
	 * reject, accept or confirm someone else's connection). */
	mk(mad, CM_ATTR_REJ, 0x52, 0x802, 3);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &peer, 3, 0), -ENOENT);
	mk(mad, CM_ATTR_REJ, 0, 0x802, 3);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &peer, 3, 0), -ENOENT);
	mk(mad, CM_ATTR_REP, 0x53, 0x802, 3);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &peer, 3, 0), -ENOENT);
	mk(mad, CM_ATTR_MRA, 0x54, 0x802, 3);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &peer, 3, 0), -ENOENT);
	/* Nor a REQ another client received. */
	mk(mad, CM_ATTR_REQ, 0x803, 0, 1);
	conn_note_req(ct, B, 0, mad, &peer, 4);
	mk(mad, CM_ATTR_REP, 0x55, 0x803, 4);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &peer, 4, 0), -ENOENT);
	/* A per-call limit below the table's. */
	mk(mad, CM_ATTR_REQ, 0x56, 0, 5);
	assert_int_equal(conn_outbound(ct, B, 0, mad, &peer, 5, 1), -ENOSPC);
	conn_table_free(ct);
}

static void test_refusals(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	static const uint16_t need[] = { CM_ATTR_RTU, CM_ATTR_DREQ, CM_ATTR_DREP,
					 CM_ATTR_LAP, CM_ATTR_APR };
	size_t i;

	(void)state;
	out(ct, A, CM_ATTR_REQ, 0x61, 0, 0);
	for (i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
		/* B cannot act on A's comm ID (nor on any it lacks). */
		mk(mad, need[i], 0x61, 0x1, 0);
		assert_int_equal(conn_outbound(ct, B, 0, mad, &peer, 0, 0), -ENOENT);
		mk(mad, need[i], 0, 0x1, 0);
		assert_int_equal(conn_outbound(ct, A, 0, mad, &peer, 0, 0), -ENOENT);
	}
	mk(mad, CM_ATTR_REQ, 0, 0, 0);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &peer, 0, 0), -EINVAL);
	mk(mad, CM_ATTR_REP, 0, 1, 0);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &peer, 0, 0), -EINVAL);
	cm_mad_init(mad, CM_ATTR_SIDR_REQ, 0);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &peer, 0, 0), -EINVAL);
	conn_table_free(ct);
}

static void test_quota_and_purge(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	struct conn_counts c;
	int i;

	(void)state;
	for (i = 1; i <= 64; i++)
		out(ct, A, CM_ATTR_REQ, (uint32_t)i, 0, 0);
	mk(mad, CM_ATTR_REQ, 65, 0, 0);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &peer, 0, 0), -ENOSPC);
	out(ct, B, CM_ATTR_REQ, 65, 0, 0);
	conn_client_counts(ct, A, &c);
	assert_int_equal(c.total, 64);
	conn_purge_client(ct, A);
	conn_client_counts(ct, A, &c);
	assert_int_equal(c.total, 0);
	assert_int_equal(total(ct), 1);
	/* Nothing of A's is left on a timer either. */
	assert_int_equal(conn_expire(ct, 10 * HS), 1);
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
	assert_int_equal(conn_outbound(ct, A, 0, mad, &peer, 0, 0), 0);
	ha = (uint32_t)cm_field_get(mad, CM_SIDR_REQ_REQUEST_ID);
	cm_mad_init(mad, CM_ATTR_SIDR_REQ, 0);
	cm_field_set(mad, CM_SIDR_REQ_REQUEST_ID, 0x33);
	assert_int_equal(conn_outbound(ct, B, 0, mad, &peer, 0, 0), 0);
	hb = (uint32_t)cm_field_get(mad, CM_SIDR_REQ_REQUEST_ID);
	assert_true(ha != hb);
	cm_mad_init(mad, CM_ATTR_SIDR_REP, 0);
	cm_field_set(mad, CM_SIDR_REP_REQUEST_ID, hb);
	assert_int_equal(conn_inbound(ct, 0, mad, &peer, 5, &client), 0);
	assert_true(client == B);
	assert_int_equal(cm_field_get(mad, CM_SIDR_REP_REQUEST_ID), 0x33);
	/* Answered: drained after timewait; unanswered: after handshake. */
	assert_int_equal(conn_expire(ct, 5 + TW), 1);
	assert_int_equal(conn_expire(ct, HS), 1);
	conn_table_free(ct);
}

static void test_host_id_never_zero(void **state)
{
	/* With operand 5 the fifth allocation would be 5 ^ 5 == 0. */
	struct conn_table *ct = new_table(5);
	uint32_t h;
	int i;

	(void)state;
	for (i = 1; i <= 20; i++) {
		h = out(ct, A, CM_ATTR_REQ, (uint32_t)i, 0, 0);
		assert_true(h != 0);
	}
	conn_table_free(ct);
}

/* Random traffic over simulated hours: no entry ever holds a timer longer
 * than its class allows, and expiry leaves nothing overdue. */
static void test_entries_never_outlive_their_lifetimes(void **state)
{
	struct conn_table *ct = new_table(0x1234567);
	uint32_t host[32] = { 0 };
	uint64_t now = 0;
	uint8_t mad[MAD_SIZE];
	unsigned seed = 42, step, k;
	json_t *arr, *e;
	size_t i;

	(void)state;
	for (step = 0; step < 20000; step++) {
		now += (uint64_t)(rand_r(&seed) % 3000);
		k = (unsigned)rand_r(&seed) % 32;
		switch (rand_r(&seed) % 7) {
		case 0:
			host[k] = out(ct, A, CM_ATTR_REQ, k + 1, 0, now);
			break;
		case 1:
			if (host[k])
				in_rc(ct, CM_ATTR_REP, 0x100 + k, host[k], now);
			break;
		case 2:
			mk(mad, CM_ATTR_RTU, k + 1, 0x100 + k, 0);
			conn_outbound(ct, A, 0, mad, &peer, now, 0);
			break;
		case 3:
			mk(mad, CM_ATTR_DREQ, k + 1, 0x100 + k, 0);
			conn_outbound(ct, A, 0, mad, &peer, now, 0);
			break;
		case 4:
			if (host[k])
				in_rc(ct, CM_ATTR_DREP, 0x100 + k, host[k], now);
			break;
		case 5:
			mk(mad, CM_ATTR_REQ, 0x5000 + k, 0, 0);
			conn_note_req(ct, A, 0, mad, &peer, now);
			break;
		default:
			if (host[k])
				in_rc(ct, CM_ATTR_REJ, 0x100 + k, host[k], now);
			break;
		}
		conn_expire(ct, now);
		assert_true(conn_next_deadline(ct) > now);
		arr = conn_client_json(ct, A, 1000, now);
		json_array_foreach(arr, i, e) {
			const char *st = json_string_value(json_object_get(e, "state"));
			json_t *left = json_object_get(e, "expires_in_ms");

			if (strcmp(st, "established") == 0) {
				assert_true(json_is_null(left));
			} else if (strcmp(st, "timewait") == 0) {
				assert_true(json_integer_value(left) <= TW);
			} else {
				assert_true(json_integer_value(left) <= HS);
			}
		}
		json_decref(arr);
	}
	conn_table_free(ct);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_clients_same_comm_id),
		cmocka_unit_test(test_active_lifecycle_and_long_idle),
		cmocka_unit_test(test_abandoned_handshake),
		cmocka_unit_test(test_passive_side_and_timeout_rej),
		cmocka_unit_test(test_rej_from_the_client),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_quota_and_purge),
		cmocka_unit_test(test_sidr_lifetime),
		cmocka_unit_test(test_host_id_never_zero),
		cmocka_unit_test(test_entries_never_outlive_their_lifetimes),
	};

	return cmocka_run_group_tests_name("conn_table", tests, NULL, NULL);
}
