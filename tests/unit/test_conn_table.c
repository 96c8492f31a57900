// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The connection table itself (mux/conn_table.c): per-client comm IDs,
 * quotas and purges, host IDs, lifetimes and listings, on a fake clock. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "mux/conn.h"
#include "common/cm_mad.h"
#include "common/wire.h"
#include "tests/unit/conn_fixture.h"

static void test_two_clients_same_comm_id(void **state)
{
	struct conn_table *ct = new_table(0x9e3779b9);
	uint8_t mad[MAD_SIZE];
	uint32_t ha, hb, wire_tid;
	uint64_t client;

	(void)state;
	ha = out(ct, A, CM_ATTR_REQ, 0x10, 0, 0);
	hb = out(ct, B, CM_ATTR_REQ, 0x10, 0, 0);
	assert_true(ha != 0 && hb != 0 && ha != hb && ha != 0x10 && hb != 0x10);
	assert_true(in(ct, CM_ATTR_REP, 0x500, hb, 0x10, 1) == B);
	assert_true(in(ct, CM_ATTR_REP, 0x501, ha, 0x10, 1) == A);
	/* The guest's TID keeps its high half on the wire; a message that
	 * echoes the wire TID gets the guest's TID back. */
	mk(mad, CM_ATTR_RTU, 0x10, 0x501, 0xabcd000000000010ull);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 2, 0), 0);
	assert_int_equal(wire_get64(mad + 8) >> 32, 0xabcd0000u);
	wire_tid = (uint32_t)wire_get64(mad + 8);
	mk(mad, CM_ATTR_DREQ, 0x501, ha, 0x7777000000000000ull | wire_tid);
	assert_int_equal(conn_inbound(ct, 0, mad, &path, 3, &client), 0);
	assert_true(client == A);
	assert_int_equal(wire_get64(mad + 8), 0xabcd000000000010ull);
	conn_table_free(ct);
}

/* A client that goes away: each connection's peer hears what
 * cm_destroy_id() says for its state. */
static void test_purge_tells_peers(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	uint32_t h_est, h_req, h_rep, h_dreq;
	int i, seen[CONN_ANS_MAX] = { 0 };

	(void)state;
	h_est = established(ct, A, 0x1, 0xc01, 0);
	mk(mad, CM_ATTR_REQ, 0x2, 0, 0);
	cm_field_set(mad, CM_REQ_LOCAL_CA_GUID, 0x0011223344556677ull);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 0, 0), 0);
	h_req = local_of(mad);
	note_req(ct, A, 0xc03, 0); /* unanswered */
	note_req(ct, A, 0xc04, 0);
	h_rep = out(ct, A, CM_ATTR_REP, 0x4, 0xc04, 0); /* REP sent */
	h_dreq = established(ct, A, 0x5, 0xc05, 0);
	in(ct, CM_ATTR_DREQ, 0xc05, h_dreq, 0x5, 1); /* DREQ received */
	established(ct, A, 0x6, 0xc06, 0);
	out(ct, A, CM_ATTR_DREQ, 0x6, 0xc06, 1); /* DREQ sent: quiet */
	assert_int_equal(nemitted, 0);
	conn_purge_client(ct, A);
	/* What cm.c would keep in TimeWait after the destroy drains here,
	 * charged to nobody (the REP sent, the connections established or
	 * being torn down); the rest goes. */
	assert_int_equal(total(ct), 4);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 4);
	assert_int_equal(nemitted, 5);
	for (i = 0; i < nemitted; i++) {
		const uint8_t *m = emitted[i].mad;
		uint32_t peer = remote_of(m);

		seen[emitted[i].why]++;
		if (peer == 0xc01) {
			assert_int_equal(cm_mad_attr_id(m), CM_ATTR_DREQ);
			assert_int_equal(local_of(m), h_est);
		} else if (local_of(m) == h_req) {
			assert_int_equal(cm_mad_attr_id(m), CM_ATTR_REJ);
			assert_int_equal(cm_field_get(m, CM_REJ_REASON),
					 CM_REJ_REASON_TIMEOUT);
			assert_int_equal(wire_get64(m + CM_REJ_OFF_ARI),
					 0x0011223344556677ull);
		} else if (peer == 0xc03) {
			assert_int_equal(cm_mad_attr_id(m), CM_ATTR_REJ);
			assert_int_equal(local_of(m), 0);
			assert_int_equal(cm_field_get(m,
						      CM_REJ_MESSAGE_REJECTED),
					 CM_MSG_RESPONSE_REQ);
		} else if (peer == 0xc04) {
			assert_int_equal(cm_mad_attr_id(m), CM_ATTR_REJ);
			assert_int_equal(local_of(m), h_rep);
		} else {
			assert_int_equal(peer, 0xc05);
			assert_int_equal(cm_mad_attr_id(m), CM_ATTR_DREP);
			assert_int_equal(local_of(m), h_dreq);
		}
	}
	assert_int_equal(seen[CONN_ANS_DREQ_ABANDONED], 1);
	assert_int_equal(seen[CONN_ANS_REJ_ABANDONED], 3);
	assert_int_equal(seen[CONN_ANS_DREP_ABANDONED], 1);
	conn_table_free(ct);
}

/* For a client that is gone the daemon says what cm_destroy_id() says,
 * once (cm.c cancels its DREQ as soon as it is sent and enters TimeWait),
 * and keeps what cm.c would keep in TimeWait that long, charged to
 * nobody: the peer's late DREP is absorbed there, and its comm ID cannot
 * come back as a new connection meanwhile. */
static void test_gone_clients_connections_drain(void **state)
{
	struct conn_table *ct = new_table(7);
	uint8_t mad[MAD_SIZE];
	uint32_t h;

	(void)state;
	h = established(ct, A, 0x7, 0xe07, 0);
	/* One the peer rejected drains for its client, but cm.c resets
	 * that one to idle: it goes with the client. */
	in(ct, CM_ATTR_REJ, 0xe08, out(ct, A, CM_ATTR_REQ, 0x8, 0, 0), 0x8, 0);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 1);
	conn_purge_client(ct, A);
	assert_int_equal(total(ct), 1);
	assert_int_equal(nemitted, 1);
	assert_int_equal(emitted[0].why, CONN_ANS_DREQ_ABANDONED);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 1);
	assert_int_equal(conn_expire(ct, TW - 1), 0);
	assert_int_equal(nemitted, 1); /* never again */
	assert_int_equal(in_rc(ct, CM_ATTR_DREP, 0xe07, h, TW - 1), -ESTALE);
	/* The peer reusing its comm ID meanwhile: a stale connection. */
	mk(mad, CM_ATTR_REQ, 0xe07, 0, 1);
	assert_int_equal(conn_note_req(ct, B, 0, mad, &path, TW - 1), -ESTALE);
	assert_int_equal(emitted[1].why, CONN_ANS_REJ_STALE);
	assert_int_equal(conn_expire(ct, TW), 1);
	assert_int_equal(total(ct), 0);
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
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 0, 0), -ENOSPC);
	out(ct, B, CM_ATTR_REQ, 65, 0, 0);
	conn_table_client_counts(ct, A, &c);
	assert_int_equal(c.total, 64);
	conn_purge_client(ct, A);
	conn_table_client_counts(ct, A, &c);
	assert_int_equal(c.total, 0);
	assert_int_equal(total(ct), 1);
	/* Nothing of A's is left on a timer either. */
	assert_int_equal(conn_expire(ct, 10 * HS), 1);
	conn_table_free(ct);
}

/* A peer's REQ, on the path from src. */
static int note_req_from(struct conn_table *ct, uint64_t client,
			 uint32_t peer_id, const char *src, uint64_t now)
{
	struct conn_path p = path;
	uint8_t mad[MAD_SIZE];

	gid_parse(src, &p.peer_gid);
	mk(mad, CM_ATTR_REQ, peer_id, 0, 1);
	return conn_note_req(ct, client, 0, mad, &p, now);
}

/* A table with lim, the fixture's path set and nothing emitted yet. */
static struct conn_table *limited_table(const struct conn_limits *lim)
{
	struct conn_table *ct = conn_table_new(lim, 7, capture, NULL);

	assert_non_null(ct);
	memset(&path, 0, sizeof(path));
	gid_parse("fd00::1", &path.local_gid);
	gid_parse("fd00::99", &path.peer_gid);
	nemitted = 0;
	return ct;
}

/* Peer records are the port's, divided between its clients: a flood at
 * one client's listener (16 sources, none answered) fills the port, and
 * another client's REQ still gets its record, taking the flooded one's
 * oldest; a client takes from none that holds no more than itself.  A
 * REQ that never reached its client gives its record back. */
static void test_a_full_port_is_shared_between_clients(void **state)
{
	struct conn_limits lim = { .max_per_client = 64,
				   .handshake_ms = HS,
				   .timewait_ms = TW,
				   .max_peer_records_per_port = 8,
				   .max_peer_records_per_source = 4 };
	struct conn_table *ct = limited_table(&lim);
	struct conn_path p;
	struct conn_counts c, ca, cb;
	uint8_t mad[MAD_SIZE];
	char src[32];
	uint32_t token;
	int i;

	(void)state;
	for (i = 0; i < 16; i++) {
		snprintf(src, sizeof(src), "fd00::5%x", i);
		assert_int_equal(note_req_from(ct, A, 0x100 + (uint32_t)i, src,
					       (uint64_t)i),
				 0);
	}
	conn_table_counts(ct, &c);
	assert_int_equal(c.peer_records, 8);
	assert_int_equal(c.peer_records_refused, 8); /* A's own: no more */
	/* B's REQ takes A's oldest record, and B answers it. */
	assert_int_equal(note_req_from(ct, B, 0x900, "fd00::99", 20), 0);
	conn_table_counts(ct, &c);
	assert_int_equal(c.peer_records, 8);
	assert_int_equal(c.peer_records_evicted, 1);
	mk(mad, CM_ATTR_REP, 0x21, 0x900, 2);
	assert_int_equal(conn_outbound(ct, B, 0, mad, &path, 21, 0), 0);
	/* A's oldest REQ has no record now: its REP is refused. */
	p = path;
	gid_parse("fd00::50", &p.peer_gid);
	mk(mad, CM_ATTR_REP, 0x31, 0x100, 3);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &p, 22, 0), -ENOENT);
	/* A REQ noted and never delivered gives its record back; another
	 * client's word does not touch it. */
	assert_int_equal(note_req_from(ct, B, 0xb00, "fd00::70", 23), 0);
	conn_table_client_counts(ct, B, &cb);
	assert_int_equal(cb.peer_records, 1);
	token = conn_take_noted(ct);
	assert_true(token != 0);
	assert_int_equal(conn_take_noted(ct), 0);
	conn_forget_noted(ct, token, A);
	conn_table_client_counts(ct, B, &cb);
	assert_int_equal(cb.peer_records, 1);
	conn_forget_noted(ct, token, B);
	conn_table_client_counts(ct, B, &cb);
	assert_int_equal(cb.peer_records, 0);
	/* B keeps taking until the two hold the port evenly, then no
	 * more: 4 records each. */
	for (i = 0; i < 6; i++) {
		snprintf(src, sizeof(src), "fd00::6%x", i);
		assert_int_equal(note_req_from(ct, B, 0xa00 + (uint32_t)i, src,
					       30),
				 0);
	}
	conn_table_client_counts(ct, A, &ca);
	conn_table_client_counts(ct, B, &cb);
	assert_int_equal(ca.peer_records, 4);
	assert_int_equal(cb.peer_records, 4);
	conn_table_counts(ct, &c);
	assert_int_equal(c.peer_records, 8);
	assert_int_equal(c.peer_records_evicted, 4);
	conn_table_free(ct);
}

/* Quotas measure what a tenant does: peer records are charged to
 * nobody (bounded per port and per source), TimeWait to nobody
 * (bounded in all, oldest out first). */
static void test_quotas_count_what_the_client_does(void **state)
{
	struct conn_limits lim = { .max_per_client = 2,
				   .handshake_ms = HS,
				   .timewait_ms = TW,
				   .max_peer_records_per_port = 5,
				   .max_peer_records_per_source = 3,
				   .max_timewait = 4 };
	struct conn_table *ct = limited_table(&lim);
	struct conn_counts c;
	uint32_t h;
	int i;

	(void)state;
	/* A flood from one source: three records, the rest refused (the
	 * REQs themselves still go to the client). */
	for (i = 0; i < 6; i++)
		assert_int_equal(note_req_from(ct, A, 0x100 + (uint32_t)i,
					       "fd00::50", 0),
				 0);
	conn_table_counts(ct, &c);
	assert_int_equal(c.peer_records, 3);
	assert_int_equal(c.peer_records_refused, 3);
	/* Other sources fill the port's bound, not more. */
	assert_int_equal(note_req_from(ct, B, 0x200, "fd00::51", 0), 0);
	assert_int_equal(note_req_from(ct, B, 0x201, "fd00::52", 0), 0);
	assert_int_equal(note_req_from(ct, B, 0x202, "fd00::53", 0), 0);
	conn_table_counts(ct, &c);
	assert_int_equal(c.peer_records, 5);
	assert_int_equal(c.peer_records_refused, 4);
	/* None of it is A's quota: A still starts its two connections. */
	h = out(ct, A, CM_ATTR_REQ, 0x11, 0, 1);
	out(ct, A, CM_ATTR_REQ, 0x12, 0, 1);
	assert_int_equal(out_rc(ct, A, CM_ATTR_REQ, 0x13, 0, 1), -ENOSPC);
	/* Answering a peer takes quota: refused while A is at its limit. */
	{
		struct conn_path p = path;
		uint8_t mad[MAD_SIZE];

		gid_parse("fd00::50", &p.peer_gid);
		mk(mad, CM_ATTR_REP, 0x21, 0x100, 2);
		assert_int_equal(conn_outbound(ct, A, 0, mad, &p, 2, 0),
				 -ENOSPC);
	}
	/* A finished connection drains without quota: A's first one ends
	 * (REP, RTU, DREQ, DREP) and A can start another at once. */
	in(ct, CM_ATTR_REP, 0x901, h, 0x11, 2);
	out(ct, A, CM_ATTR_RTU, 0x11, 0x901, 2);
	out(ct, A, CM_ATTR_DREQ, 0x11, 0x901, 2);
	in(ct, CM_ATTR_DREP, 0x901, h, 0x11, 3);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 1);
	out(ct, A, CM_ATTR_REQ, 0x14, 0, 4);
	/* Answered records leave the per-source count: with A's record
	 * of 0x100 rejected, source fd00::50 may leave one more. */
	{
		struct conn_path p = path;
		uint8_t mad[MAD_SIZE];

		gid_parse("fd00::50", &p.peer_gid);
		mk(mad, CM_ATTR_REJ, 0, 0x100, 5);
		assert_int_equal(conn_outbound(ct, A, 0, mad, &p, 5, 0), 0);
	}
	assert_int_equal(note_req_from(ct, A, 0x106, "fd00::50", 5), 0);
	conn_table_counts(ct, &c);
	assert_int_equal(c.peer_records, 5);
	assert_int_equal(c.peer_records_refused, 4);
	/* TimeWait is bounded in all: above 4 the oldest goes early. */
	for (i = 0; i < 6; i++) {
		uint32_t g = 0x30 + (uint32_t)i;

		h = out(ct, B, CM_ATTR_REQ, g, 0, 6);
		in(ct, CM_ATTR_REJ, 0x700 + (uint32_t)i, h, g, 6);
	}
	/* (Trimmed as each call begins: the last REJ's entry is over the
	 * bound until the next call.) */
	conn_table_counts(ct, &c);
	assert_int_equal(c.by_state[CONN_TIMEWAIT], 5);
	assert_int_equal(c.timewait_evicted, 2);
	assert_int_equal(note_req_from(ct, B, 0x300, "fd00::60", 7), 0);
	conn_table_counts(ct, &c);
	assert_int_equal(c.by_state[CONN_TIMEWAIT], 4);
	assert_int_equal(c.timewait_evicted, 3);
	conn_table_free(ct);
}

static void list_guest_ids(void *arg, const struct conn_view *v);

/* TimeWait is bounded in all, and divided: a tenant that ends many
 * connections shortens its own TimeWait, not another's.  B's two entered
 * first (the oldest); A's flood of ten takes the rest of the pool. */
static void test_timewait_is_divided(void **state)
{
	struct conn_limits lim = { .max_per_client = 64,
				   .handshake_ms = HS,
				   .timewait_ms = TW,
				   .max_timewait = 6 };
	struct conn_table *ct = limited_table(&lim);
	uint32_t b_host[2], h, got[16] = { 0 };
	struct conn_counts c;
	int i;

	(void)state;
	for (i = 0; i < 2; i++) {
		b_host[i] = out(ct, B, CM_ATTR_REQ, 0x40 + (uint32_t)i, 0, 1);
		in(ct, CM_ATTR_REJ, 0x600 + (uint32_t)i, b_host[i],
		   0x40 + (uint32_t)i, 1);
	}
	for (i = 0; i < 10; i++) {
		h = out(ct, A, CM_ATTR_REQ, 0x50 + (uint32_t)i, 0, 2);
		in(ct, CM_ATTR_REJ, 0x700 + (uint32_t)i, h, 0x50 + (uint32_t)i,
		   2);
	}
	/* A call trims what the last REJ left over the bound. */
	assert_int_equal(note_req_from(ct, A, 0x900, "fd00::60", 3), 0);
	conn_table_counts(ct, &c);
	assert_int_equal(c.by_state[CONN_TIMEWAIT], 6);
	assert_int_equal(c.timewait_evicted, 6);
	/* B's both still there; A holds the other four. */
	conn_table_client_foreach(ct, B, 0, 16, 0, list_guest_ids, got);
	assert_int_equal(got[0], 2);
	memset(got, 0, sizeof(got));
	conn_table_client_foreach(ct, A, 0, 16, 0, list_guest_ids, got);
	assert_int_equal(got[0], 5); /* four in TimeWait, the peer's REQ */
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

static void check_view(void *arg, const struct conn_view *v)
{
	uint64_t limit;

	(void)arg;
	if (v->state == CONN_ESTABLISHED || v->state == CONN_DREQ_RCVD) {
		assert_true(v->expires_in_ms < 0);
		return;
	}
	/* A REP answering a REQ that asked for no retries and the least
	 * timeout: the window's floor, a second. */
	limit = v->state == CONN_TIMEWAIT   ? TW
		: v->state == CONN_REP_SENT ? 1024
					    : HS;
	assert_true(v->expires_in_ms >= 0 &&
		    (uint64_t)v->expires_in_ms <= limit);
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

	(void)state;
	for (step = 0; step < 20000; step++) {
		now += (uint64_t)(rand_r(&seed) % 3000);
		k = (unsigned)rand_r(&seed) % 32;
		switch (rand_r(&seed) % 8) {
		case 0: host[k] = out(ct, A, CM_ATTR_REQ, k + 1, 0, now); break;
		case 1:
			if (host[k])
				in_rc(ct, CM_ATTR_REP, 0x100 + k, host[k], now);
			break;
		case 2:
			out_rc(ct, A, CM_ATTR_RTU, k + 1, 0x100 + k, now);
			break;
		case 3:
			out_rc(ct, A, CM_ATTR_DREQ, k + 1, 0x100 + k, now);
			break;
		case 4:
			if (host[k])
				in_rc(ct, CM_ATTR_DREP, 0x100 + k, host[k],
				      now);
			break;
		case 5:
			mk(mad, CM_ATTR_REQ, 0x5000 + k, 0, 0);
			conn_note_req(ct, A, 0, mad, &path, now);
			out_rc(ct, A, CM_ATTR_REP, 0x40 + k, 0x5000 + k, now);
			break;
		case 6:
			if (host[k])
				in_rc(ct, CM_ATTR_DREQ, 0x100 + k, host[k],
				      now);
			break;
		default:
			if (host[k])
				in_rc(ct, CM_ATTR_REJ, 0x100 + k, host[k], now);
			break;
		}
		conn_expire(ct, now);
		assert_true(conn_table_next_deadline(ct) > now);
		conn_table_client_foreach(ct, A, 0, 1000, now, check_view,
					  NULL);
		nemitted = 0;
	}
	conn_table_free(ct);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Host IDs are derived from the slot an entry takes; a slot comes back
 * only after thousands of others, with its generation moved on: 20,000
 * connections one after the other get 20,000 different IDs, and a
 * message for an ended one reaches nobody (cm.c's IDs are cyclic too). */
static void test_host_ids_not_reused_soon(void **state)
{
	enum { ROUNDS = 20000 };
	struct conn_table *ct = new_table(0x5eed);
	uint32_t *ids = malloc(ROUNDS * sizeof(*ids));
	uint64_t now = 0;
	unsigned i;

	(void)state;
	assert_non_null(ids);
	for (i = 0; i < ROUNDS; i++, now += TW + 1) {
		ids[i] = out(ct, A, CM_ATTR_REQ, 1 + i % 8, 0, now);
		assert_int_equal(in(ct, CM_ATTR_REJ, 0x700 + i, ids[i],
				    1 + i % 8, now),
				 A);
		assert_int_equal(conn_expire(ct, now + TW), 1);
		assert_int_equal(total(ct), 0);
		assert_int_equal(in_rc(ct, CM_ATTR_DREQ, 0x700 + i, ids[i],
				       now + TW),
				 -ENOENT);
		nemitted = 0;
	}
	qsort(ids, ROUNDS, sizeof(*ids), cmp_u32);
	for (i = 1; i < ROUNDS; i++)
		assert_true(ids[i] != ids[i - 1]);
	free(ids);
	conn_table_free(ct);
}

/* A host ID is its slot and the slot's 10-bit generation (conn_table.c):
 * it comes back after its slot has been reused 1,024 times.  A freed
 * slot waits until 16,384 others are free, so that is after 16,777,216
 * connections, not 1,048,576: a peer that still holds the old connection
 * (a DREQ it never got) would take the new REQ for a duplicate. */
static void test_a_slot_waits_for_16384_others(void **state)
{
	enum { OPERAND = 0x5eed, ROUNDS = 20000 };
	struct conn_table *ct = new_table(OPERAND);
	uint32_t first = 0, h, again = 0;
	uint64_t now = 0;
	unsigned i;

	(void)state;
	for (i = 0; i < ROUNDS && !again; i++, now += TW + 1) {
		h = out(ct, A, CM_ATTR_REQ, 1, 0, now);
		if (i == 0)
			first = h;
		else if (((h ^ OPERAND) & 0x3fffff) ==
			 ((first ^ OPERAND) & 0x3fffff))
			again = i;
		assert_int_equal(in(ct, CM_ATTR_REJ, 0x700, h, 1, now), A);
		assert_int_equal(conn_expire(ct, now + TW), 1);
		nemitted = 0;
	}
	assert_true(again >= 16384);
	/* The slot's next generation: another ID, one step up in the
	 * generation's 10 bits (above the slot's 22). */
	assert_int_equal((h ^ OPERAND) >> 22, ((first ^ OPERAND) >> 22) + 1);
	conn_table_free(ct);
}

static void list_guest_ids(void *arg, const struct conn_view *v)
{
	uint32_t *out = arg;

	out[++out[0]] = v->guest_id | (v->sidr ? 0x80000000u : 0);
}

/* A client's connections are listed by kind, then by its own IDs, and a
 * page starts where the last one ended. */
static void test_listing_is_ordered_and_pages(void **state)
{
	static const uint32_t ids[] = { 0x30, 0x10, 0x50, 0x20, 0x40 };
	struct conn_table *ct = new_table(9);
	uint32_t got[16] = { 0 };
	uint8_t mad[MAD_SIZE];
	unsigned i;

	(void)state;
	for (i = 0; i < 5; i++)
		out(ct, A, CM_ATTR_REQ, ids[i], 0, 0);
	mk(mad, CM_ATTR_SIDR_REQ, 0x05, 0, 1);
	assert_int_equal(conn_outbound(ct, A, 0, mad, &path, 0, 0), 0);
	out(ct, B, CM_ATTR_REQ, 0x15, 0, 0);
	conn_table_client_foreach(ct, A, 0, 3, 0, list_guest_ids, got);
	conn_table_client_foreach(ct, A, 3, 100, 0, list_guest_ids, got);
	assert_int_equal(got[0], 6);
	assert_int_equal(got[1], 0x10);
	assert_int_equal(got[2], 0x20);
	assert_int_equal(got[3], 0x30);
	assert_int_equal(got[4], 0x40);
	assert_int_equal(got[5], 0x50);
	assert_int_equal(got[6], 0x80000005u);
	conn_table_free(ct);
}

/* A page of a client with many entries, picked without sorting them all,
 * is the same as in a full sort: the first ones, then page by page. */
static void test_listing_pages_of_many(void **state)
{
	enum { N = 60 }; /* within the table's 64 a client */
	struct conn_table *ct = new_table(N);
	uint32_t got[N + 2] = { 0 };
	unsigned i, k;

	(void)state;
	/* Guest IDs in a scrambled order (37 is prime to N). */
	for (i = 0; i < N; i++)
		out(ct, A, CM_ATTR_REQ, 0x100 + (i * 37) % N, 0, 0);
	conn_table_client_foreach(ct, A, 0, 3, 0, list_guest_ids, got);
	for (k = 3; k < N; k += 7)
		conn_table_client_foreach(ct, A, k, 7, 0, list_guest_ids, got);
	assert_int_equal(got[0], N);
	for (i = 0; i < N; i++)
		assert_int_equal(got[1 + i], 0x100 + i);
	/* Nothing asked, nothing listed. */
	conn_table_client_foreach(ct, A, 0, 0, 0, list_guest_ids, got);
	assert_int_equal(got[0], N);
	conn_table_free(ct);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_clients_same_comm_id),
		cmocka_unit_test(test_purge_tells_peers),
		cmocka_unit_test(test_gone_clients_connections_drain),
		cmocka_unit_test(test_quota_and_purge),
		cmocka_unit_test(test_quotas_count_what_the_client_does),
		cmocka_unit_test(test_a_full_port_is_shared_between_clients),
		cmocka_unit_test(test_host_id_never_zero),
		cmocka_unit_test(test_entries_never_outlive_their_lifetimes),
		cmocka_unit_test(test_host_ids_not_reused_soon),
		cmocka_unit_test(test_a_slot_waits_for_16384_others),
		cmocka_unit_test(test_timewait_is_divided),
		cmocka_unit_test(test_listing_is_ordered_and_pages),
		cmocka_unit_test(test_listing_pages_of_many),
	};

	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("conn_table", tests, NULL, NULL);
}
