// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The demo's guest CM endpoint: two of them over an in-memory wire that
 * can lose messages, on a fake clock. */
#include <stdlib.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backend/vm/guest_cm.h"

#define WIRE_MAX 64

struct wire_msg {
	uint8_t mad[MAD_SIZE];
	struct gid src, dst;
};

struct net {
	struct wire_msg q[WIRE_MAX];
	int n;
	int drop_next[CM_IDX_MAX]; /* lose the next N of an attribute */
	int sent[CM_IDX_MAX];
};

struct peer {
	struct net *net;
	struct gcm cm;
	int events[GCM_EV_CLOSED + 1];
	int last_detail;
	/* QP hooks: what was called, in order, and what the wire had seen. */
	char hooks[8];
	int nhooks;
	int sent_at_rtr[CM_IDX_MAX];
	uint32_t rtr_qpn, rtr_psn;
	int fail_rtr;
};

static int peer_send(void *ctx, const uint8_t *mad, const struct gid *dst)
{
	struct peer *p = ctx;
	struct net *n = p->net;
	enum cm_attr_index idx = cm_attr_index(cm_mad_attr_id(mad));

	n->sent[idx]++;
	if (n->drop_next[idx] > 0) {
		n->drop_next[idx]--;
		return 0;
	}
	assert_true(n->n < WIRE_MAX);
	memcpy(n->q[n->n].mad, mad, MAD_SIZE);
	n->q[n->n].src = p->cm.p.local_gid;
	n->q[n->n].dst = *dst;
	n->n++;
	return 0;
}

static void peer_event(void *ctx, enum gcm_event ev, int detail)
{
	struct peer *p = ctx;

	p->events[ev]++;
	p->last_detail = detail;
}

static const struct gcm_ops ops = { .send = peer_send, .event = peer_event };

static int peer_rtr(void *ctx, uint32_t qpn, uint32_t psn,
		    const struct gid *remote)
{
	struct peer *p = ctx;

	(void)remote;
	p->hooks[p->nhooks++] = 'R';
	memcpy(p->sent_at_rtr, p->net->sent, sizeof(p->sent_at_rtr));
	p->rtr_qpn = qpn;
	p->rtr_psn = psn;
	return p->fail_rtr ? -ENOMEM : 0;
}

static int peer_rts(void *ctx)
{
	struct peer *p = ctx;

	p->hooks[p->nhooks++] = 'S';
	return 0;
}

static const struct gcm_ops qp_ops = { .send = peer_send,
				       .event = peer_event,
				       .qp_rtr = peer_rtr,
				       .qp_rts = peer_rts };

/* Deliver everything on the wire to whoever owns the destination GID. */
static void deliver(struct net *n, struct peer *a, struct peer *b, uint64_t now)
{
	struct wire_msg m;

	while (n->n > 0) {
		m = n->q[0];
		memmove(n->q, n->q + 1, sizeof(n->q[0]) * (size_t)(n->n - 1));
		n->n--;
		if (gid_cmp(&m.dst, &a->cm.p.local_gid) == 0)
			gcm_input(&a->cm, m.mad, MAD_SIZE, &m.src, now);
		else if (gid_cmp(&m.dst, &b->cm.p.local_gid) == 0)
			gcm_input(&b->cm, m.mad, MAD_SIZE, &m.src, now);
	}
}

static void setup_pair(struct net *n, struct peer *a, struct peer *b)
{
	struct gcm_params pa = { .port = 7471,
				 .local_comm_id = 0x1111,
				 .timeout_ms = 64, /* cm.c's 2^n ms */
				 .max_retries = 3,
				 .timewait_ms = 50 };
	struct gcm_params pb = pa;

	memset(n, 0, sizeof(*n));
	memset(a, 0, sizeof(*a));
	memset(b, 0, sizeof(*b));
	a->net = b->net = n;
	gid_parse("fd00::1", &pa.local_gid);
	gid_parse("fd00::2", &pa.remote_gid);
	gid_parse("fd00::2", &pb.local_gid);
	pb.local_comm_id = 0x2222;
	strcpy(pa.private_data, "from a");
	strcpy(pb.private_data, "from b");
	gcm_init(&a->cm, &pa, &ops, a);
	gcm_init(&b->cm, &pb, &ops, b);
	assert_int_equal(gcm_listen(&b->cm), 0);
}

static void test_connect_and_disconnect(void **state)
{
	struct net n;
	struct peer a, b;

	(void)state;
	setup_pair(&n, &a, &b);
	assert_int_equal(gcm_connect(&a.cm, 0), 0);
	assert_int_equal(a.cm.state, GCM_REQ_SENT);
	deliver(&n, &a, &b, 1); /* REQ -> REP -> RTU */
	assert_int_equal(a.cm.state, GCM_ESTABLISHED);
	assert_int_equal(b.cm.state, GCM_ESTABLISHED);
	assert_int_equal(a.events[GCM_EV_CONNECTED], 1);
	assert_int_equal(b.events[GCM_EV_CONNECTED], 1);
	assert_int_equal(a.cm.remote_comm_id, 0x2222);
	assert_int_equal(b.cm.remote_comm_id, 0x1111);
	assert_string_equal(a.cm.peer_data, "from b");
	assert_string_equal(b.cm.peer_data, "from a");
	assert_int_equal(n.sent[CM_IDX_REQ], 1);
	assert_int_equal(n.sent[CM_IDX_REP], 1);
	assert_int_equal(n.sent[CM_IDX_RTU], 1);

	assert_int_equal(gcm_disconnect(&a.cm, 10), 0);
	deliver(&n, &a, &b, 11); /* DREQ -> DREP */
	assert_int_equal(a.cm.state, GCM_TIMEWAIT);
	assert_int_equal(b.cm.state, GCM_TIMEWAIT);
	assert_int_equal(a.events[GCM_EV_DISCONNECTED], 1);
	assert_int_equal(b.events[GCM_EV_DISCONNECTED], 1);
	/* Timewait is 50 ms from the DREP at t=11. */
	gcm_tick(&a.cm, 60);
	assert_int_equal(a.cm.state, GCM_TIMEWAIT);
	gcm_tick(&a.cm, 61);
	gcm_tick(&b.cm, 61);
	assert_int_equal(a.cm.state, GCM_CLOSED);
	assert_int_equal(b.cm.state, GCM_LISTEN); /* listener stays */
	assert_int_equal(a.cm.retransmissions, 0);
}

static void test_lost_req_is_retransmitted(void **state)
{
	struct net n;
	struct peer a, b;

	(void)state;
	setup_pair(&n, &a, &b);
	n.drop_next[CM_IDX_REQ] = 2;
	gcm_connect(&a.cm, 0);
	deliver(&n, &a, &b, 0);
	gcm_tick(&a.cm, 63); /* not yet */
	assert_int_equal(n.sent[CM_IDX_REQ], 1);
	gcm_tick(&a.cm, 100);
	deliver(&n, &a, &b, 100);
	gcm_tick(&a.cm, 200);
	deliver(&n, &a, &b, 200);
	assert_int_equal(n.sent[CM_IDX_REQ], 3);
	assert_int_equal(a.cm.state, GCM_ESTABLISHED);
	assert_int_equal(a.cm.retransmissions, 2);
}

static void test_lost_rep_answered_as_duplicate(void **state)
{
	struct net n;
	struct peer a, b;

	(void)state;
	setup_pair(&n, &a, &b);
	n.drop_next[CM_IDX_REP] = 1;
	gcm_connect(&a.cm, 0);
	deliver(&n, &a, &b, 0);
	assert_int_equal(b.cm.state, GCM_REP_SENT);
	/* Both time out; the active side's retransmitted REQ is a duplicate
	 * the passive side answers by re-sending its REP. */
	gcm_tick(&a.cm, 100);
	deliver(&n, &a, &b, 100);
	assert_int_equal(b.cm.duplicates, 1);
	assert_int_equal(a.cm.state, GCM_ESTABLISHED);
	assert_int_equal(b.cm.state, GCM_ESTABLISHED);
	assert_int_equal(b.events[GCM_EV_CONNECTED], 1);
}

static void test_lost_rtu_answered_as_duplicate(void **state)
{
	struct net n;
	struct peer a, b;

	(void)state;
	setup_pair(&n, &a, &b);
	n.drop_next[CM_IDX_RTU] = 1;
	gcm_connect(&a.cm, 0);
	deliver(&n, &a, &b, 0);
	assert_int_equal(a.cm.state, GCM_ESTABLISHED);
	assert_int_equal(b.cm.state, GCM_REP_SENT);
	gcm_tick(&b.cm, 100); /* REP again */
	deliver(&n, &a, &b, 100);
	assert_int_equal(a.cm.duplicates, 1);
	assert_int_equal(b.cm.state, GCM_ESTABLISHED);
	assert_int_equal(n.sent[CM_IDX_RTU], 2);
}

static void test_no_listener_is_rejected(void **state)
{
	struct net n;
	struct peer a, b;

	(void)state;
	setup_pair(&n, &a, &b);
	a.cm.p.port = 9999;
	gcm_connect(&a.cm, 0);
	deliver(&n, &a, &b, 0);
	assert_int_equal(a.events[GCM_EV_REJECTED], 1);
	assert_int_equal(a.last_detail, CM_REJ_REASON_INVALID_SERVICE_ID);
	assert_int_equal(b.cm.state, GCM_LISTEN);
}

/* Out of retries, the CM gives up as cm.c does (cm_process_send_error():
 * back to idle, nothing sent). */
static void test_timeout_gives_up_silently(void **state)
{
	struct net n;
	struct peer a, b;
	uint64_t t;

	(void)state;
	setup_pair(&n, &a, &b);
	n.drop_next[CM_IDX_REQ] = 100;
	gcm_connect(&a.cm, 0);
	for (t = 100; t <= 400; t += 100) {
		gcm_tick(&a.cm, t);
		deliver(&n, &a, &b, t);
	}
	assert_int_equal(n.sent[CM_IDX_REQ], 4); /* 1 + 3 retries */
	assert_int_equal(a.events[GCM_EV_TIMEOUT], 1);
	assert_int_equal(n.sent[CM_IDX_REJ], 0);
}

/* The passive side retries its REP as the REQ asks (its Local CM Response
 * Timeout and Max CM Retries, as cm_req_handler() takes them), not by
 * its own parameters. */
static void test_rep_retried_as_the_req_asks(void **state)
{
	struct net n;
	struct peer a, b;
	uint64_t t;

	(void)state;
	setup_pair(&n, &a, &b);
	a.cm.p.timeout_ms = 8;
	a.cm.p.max_retries = 5;
	n.drop_next[CM_IDX_REP] = 100;
	gcm_connect(&a.cm, 0);
	deliver(&n, &a, &b, 0);
	assert_int_equal(b.cm.timeout_ms, 8);
	assert_int_equal(b.cm.max_retries, 5);
	for (t = 8; t <= 8 * 6; t += 8) {
		gcm_tick(&b.cm, t);
		deliver(&n, &a, &b, t);
	}
	assert_int_equal(n.sent[CM_IDX_REP], 6); /* 1 + 5 retries */
	assert_int_equal(b.events[GCM_EV_TIMEOUT], 1);
	assert_int_equal(n.sent[CM_IDX_REJ], 0);
}

static void test_dreq_retransmitted_and_duplicate_answered(void **state)
{
	struct net n;
	struct peer a, b;

	(void)state;
	setup_pair(&n, &a, &b);
	gcm_connect(&a.cm, 0);
	deliver(&n, &a, &b, 0);
	n.drop_next[CM_IDX_DREP] = 1;
	gcm_disconnect(&a.cm, 10);
	deliver(&n, &a, &b, 10);
	assert_int_equal(b.cm.state, GCM_TIMEWAIT);
	assert_int_equal(a.cm.state, GCM_DREQ_SENT);
	gcm_tick(&a.cm, 110);
	deliver(&n, &a, &b, 110);
	assert_int_equal(b.cm.duplicates, 1);
	assert_int_equal(a.cm.state, GCM_TIMEWAIT);
	assert_int_equal(a.events[GCM_EV_DISCONNECTED], 1);
	assert_int_equal(b.events[GCM_EV_DISCONNECTED], 1);
}

static void test_mra_delays_retransmission(void **state)
{
	struct net n;
	struct peer a, b;
	uint8_t mra[MAD_SIZE];

	(void)state;
	setup_pair(&n, &a, &b);
	n.drop_next[CM_IDX_REQ] = 1;
	gcm_connect(&a.cm, 0);
	cm_mad_init(mra, CM_ATTR_MRA, 1);
	cm_field_set(mra, CM_MRA_LOCAL_COMM_ID, 0x2222);
	cm_field_set(mra, CM_MRA_REMOTE_COMM_ID, 0x1111);
	gcm_input(&a.cm, mra, MAD_SIZE, &b.cm.p.local_gid, 50);
	gcm_tick(&a.cm, 100);
	gcm_tick(&a.cm, 400);
	assert_int_equal(n.sent[CM_IDX_REQ], 1);
	assert_int_equal(a.cm.state, GCM_REQ_SENT);
}

/* The data QP follows the handshake: the passive side is RTR before its
 * REP goes out and RTS on RTU; the active side is RTR and RTS before its
 * RTU; each learns the other's QPN and Starting PSN. */
static void test_qp_hooks_follow_the_handshake(void **state)
{
	struct net n;
	struct peer a, b;

	(void)state;
	setup_pair(&n, &a, &b);
	a.cm.ops = &qp_ops;
	b.cm.ops = &qp_ops;
	a.cm.p.qpn = 0x11;
	a.cm.p.psn = 0xa00001;
	b.cm.p.qpn = 0x22;
	b.cm.p.psn = 0xb00002;
	gcm_connect(&a.cm, 0);
	deliver(&n, &a, &b, 1);
	assert_int_equal(b.nhooks, 2);
	assert_memory_equal(b.hooks, "RS", 2);
	assert_int_equal(b.sent_at_rtr[CM_IDX_REP], 0); /* RTR before REP */
	assert_int_equal(b.rtr_qpn, 0x11);
	assert_int_equal(b.rtr_psn, 0xa00001);
	assert_int_equal(a.nhooks, 2);
	assert_memory_equal(a.hooks, "RS", 2);
	assert_int_equal(a.sent_at_rtr[CM_IDX_RTU], 0); /* before RTU */
	assert_int_equal(a.rtr_qpn, 0x22);
	assert_int_equal(a.rtr_psn, 0xb00002);
	assert_int_equal(a.cm.state, GCM_ESTABLISHED);
	assert_int_equal(b.cm.state, GCM_ESTABLISHED);
}

/* A passive side that cannot bring its QP up rejects with No Resources. */
static void test_qp_failure_rejects(void **state)
{
	struct net n;
	struct peer a, b;

	(void)state;
	setup_pair(&n, &a, &b);
	b.cm.ops = &qp_ops;
	b.fail_rtr = 1;
	gcm_connect(&a.cm, 0);
	deliver(&n, &a, &b, 1);
	assert_int_equal(a.events[GCM_EV_REJECTED], 1);
	assert_int_equal(a.last_detail, CM_REJ_REASON_NO_RESOURCES);
	assert_int_equal(n.sent[CM_IDX_REP], 0);
	assert_int_equal(b.cm.state, GCM_LISTEN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_connect_and_disconnect),
		cmocka_unit_test(test_lost_req_is_retransmitted),
		cmocka_unit_test(test_lost_rep_answered_as_duplicate),
		cmocka_unit_test(test_lost_rtu_answered_as_duplicate),
		cmocka_unit_test(test_no_listener_is_rejected),
		cmocka_unit_test(test_timeout_gives_up_silently),
		cmocka_unit_test(test_rep_retried_as_the_req_asks),
		cmocka_unit_test(
			test_dreq_retransmitted_and_duplicate_answered),
		cmocka_unit_test(test_mra_delays_retransmission),
		cmocka_unit_test(test_qp_hooks_follow_the_handshake),
		cmocka_unit_test(test_qp_failure_rejects),
	};

	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("guest_cm", tests, NULL, NULL);
}
