// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * libmuxbe's verbs data path on a real device (rxe in the lab): device
 * open and caps, GID lookup, RC and UD QPs through INIT/RTR/RTS, SRQ, the
 * AH cache, completions with the caller's context on a thread and on the
 * caller's loop, vendor errors, flush on destroy, and QP1 through the
 * daemon.  Needs LAB_IP (this host's address on the rxe netdev) and, for
 * the GSI test, RDMACM_MUXD and the GIDs of RCM_GSI_GID_A/B on the port.
 */
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "backend/muxbe_verbs.h"
#include "common/cm_mad.h"
#include "common/gid.h"
#include "common/wire.h"
#include "tests/integration/harness.h"

#define MAX_WC 256

struct sink {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int n;
	struct muxbe_wc wc[MAX_WC];
};

static void sink_comp(void *user, const struct muxbe_wc *wc)
{
	struct sink *s = user;

	pthread_mutex_lock(&s->lock);
	if (s->n < MAX_WC)
		s->wc[s->n++] = *wc;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static void sink_init(struct sink *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
}

/* Wait (thread mode) until n completions arrived; deadline 5 s. */
static int sink_wait(struct sink *s, int n)
{
	struct timespec ts;
	int ok;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	pthread_mutex_lock(&s->lock);
	while (s->n < n)
		if (pthread_cond_timedwait(&s->cond, &s->lock, &ts))
			break;
	ok = s->n >= n;
	pthread_mutex_unlock(&s->lock);
	return ok;
}

static const struct muxbe_wc *sink_find(struct sink *s, void *ctx)
{
	int i;

	for (i = 0; i < s->n; i++)
		if (s->wc[i].ctx == ctx)
			return &s->wc[i];
	return NULL;
}

static struct gid lab_gid(void)
{
	const char *ip = getenv("LAB_IP");
	struct gid g;

	assert_non_null(ip);
	assert_int_equal(gid_parse(ip, &g), 0);
	return g;
}

static struct muxbe_dev *open_dev(struct sink *s, int thread)
{
	struct muxbe_dev_options o = { .dev_name = "rxe0",
				       .comp_thread = thread,
				       .comp = sink_comp,
				       .user = s };
	struct muxbe_dev *dev;

	assert_int_equal(muxbe_dev_open(&o, &dev), 0);
	return dev;
}

static void test_open_caps_gids(void **state)
{
	struct muxbe_dev_options o = { .dev_name = "nosuchdev0" };
	struct ibv_device_attr want;
	struct ibv_port_attr pa;
	struct muxbe_dev *dev;
	struct sink s;
	struct gid g = lab_gid(), none;
	uint8_t back[16];
	int idx;

	(void)state;
	assert_int_equal(muxbe_dev_open(&o, &dev), -ENODEV);
	o.dev_name = NULL; /* the first device */
	assert_int_equal(muxbe_dev_open(&o, &dev), 0);
	assert_string_equal(ibv_get_device_name(muxbe_dev_context(dev)->device),
			    "rxe0");
	muxbe_dev_close(dev);
	o.port_num = 9;
	assert_int_equal(muxbe_dev_open(&o, &dev), -EINVAL);

	sink_init(&s);
	dev = open_dev(&s, 1);
	memset(&want, 0, sizeof(want));
	want.max_qp = 1 << 30;
	want.max_sge = 1000;
	want.max_cqe = 1 << 30;
	want.max_pd = 4;
	assert_int_equal(muxbe_dev_clamp_caps(dev, &want), 3);
	assert_true(want.max_qp < (1 << 30));
	assert_int_equal(want.max_pd, 4);
	assert_int_equal(muxbe_dev_clamp_caps(dev, &want), 0);
	assert_int_equal(muxbe_dev_query_port(dev, &pa), 0);
	assert_int_equal(pa.state, IBV_PORT_ACTIVE);
	idx = muxbe_dev_gid_index(dev, g.raw);
	assert_true(idx >= 0);
	assert_int_equal(muxbe_dev_gid(dev, idx, back), 0);
	assert_memory_equal(back, g.raw, 16);
	gid_parse("fd99::99", &none);
	assert_int_equal(muxbe_dev_gid_index(dev, none.raw), -ENOENT);
	muxbe_dev_close(dev);
}

struct rc_pair {
	struct muxbe_dev *dev;
	struct ibv_pd *pd;
	struct muxbe_cq *cq;
	struct muxbe_qp *a, *b;
	struct ibv_mr *mr;
	char buf[4][256];
	int gidx;
};

static void rc_connect(struct muxbe_qp *q, struct muxbe_qp *peer, int gidx,
		       const struct gid *g)
{
	struct muxbe_qp_rtr rtr = { .sgid_index = (uint8_t)gidx,
				    .dest_qpn = muxbe_qp_num(peer),
				    .rq_psn = 0x100 };
	struct muxbe_qp_rts rts = { .sq_psn = 0x100 };
	enum ibv_qp_state st;

	memcpy(rtr.dgid, g->raw, 16);
	assert_int_equal(muxbe_qp_init(q, 0), 0);
	assert_int_equal(muxbe_qp_state(q, &st), 0);
	assert_int_equal(st, IBV_QPS_INIT);
	assert_int_equal(muxbe_qp_rtr(q, &rtr), 0);
	assert_int_equal(muxbe_qp_state(q, &st), 0);
	assert_int_equal(st, IBV_QPS_RTR);
	assert_int_equal(muxbe_qp_rts(q, &rts), 0);
	assert_int_equal(muxbe_qp_state(q, &st), 0);
	assert_int_equal(st, IBV_QPS_RTS);
}

static void rc_setup(struct rc_pair *p, struct sink *s, int thread,
		     struct muxbe_srq **srq_out)
{
	struct muxbe_qp_caps caps = { 16, 16, 2, 2 };
	struct gid g = lab_gid();

	memset(p, 0, sizeof(*p));
	p->dev = open_dev(s, thread);
	p->gidx = muxbe_dev_gid_index(p->dev, g.raw);
	assert_true(p->gidx >= 0);
	assert_int_equal(muxbe_pd_create(p->dev, &p->pd), 0);
	assert_int_equal(muxbe_cq_create(p->dev, 64, &p->cq), 0);
	assert_int_equal(muxbe_mr_create(p->pd, p->buf, sizeof(p->buf),
					 IBV_ACCESS_LOCAL_WRITE, &p->mr),
			 0);
	if (srq_out)
		assert_int_equal(muxbe_srq_create(p->dev, p->pd, 16, 1, 0,
						  srq_out),
				 0);
	assert_int_equal(muxbe_qp_create(p->dev, p->pd, MUXBE_QPT_RC, p->cq,
					 p->cq, NULL, &caps, &p->a),
			 0);
	assert_int_equal(muxbe_qp_create(p->dev, p->pd, MUXBE_QPT_RC, p->cq,
					 p->cq, srq_out ? *srq_out : NULL,
					 &caps, &p->b),
			 0);
	rc_connect(p->a, p->b, p->gidx, &g);
	rc_connect(p->b, p->a, p->gidx, &g);
}

static void rc_teardown(struct rc_pair *p, struct muxbe_srq *srq)
{
	assert_int_equal(muxbe_qp_destroy(p->a), 0);
	assert_int_equal(muxbe_qp_destroy(p->b), 0);
	if (srq)
		assert_int_equal(muxbe_srq_destroy(srq), 0);
	assert_int_equal(muxbe_mr_destroy(p->mr), 0);
	assert_int_equal(muxbe_cq_destroy(p->cq), 0);
	assert_int_equal(muxbe_pd_destroy(p->dev, p->pd), 0);
	muxbe_dev_close(p->dev);
}

static struct ibv_sge sge_of(struct rc_pair *p, int i, uint32_t len)
{
	struct ibv_sge sg = { .addr = (uintptr_t)p->buf[i],
			      .length = len,
			      .lkey = p->mr->lkey };

	return sg;
}

static void test_rc_send_recv_both_ways(void **state)
{
	static struct sink s;
	struct rc_pair p;
	struct ibv_sge sg;
	const struct muxbe_wc *wc;
	int ctx_recv_b, ctx_send_a, ctx_recv_a, ctx_send_b;

	(void)state;
	sink_init(&s);
	rc_setup(&p, &s, 1, NULL);
	sg = sge_of(&p, 1, 256);
	assert_int_equal(muxbe_qp_post_recv(p.b, &sg, 1, &ctx_recv_b), 0);
	sg = sge_of(&p, 3, 256);
	assert_int_equal(muxbe_qp_post_recv(p.a, &sg, 1, &ctx_recv_a), 0);
	strcpy(p.buf[0], "a to b");
	sg = sge_of(&p, 0, 7);
	assert_int_equal(muxbe_qp_post_send(p.a, &sg, 1, NULL, &ctx_send_a), 0);
	assert_true(sink_wait(&s, 2));
	strcpy(p.buf[2], "b to a");
	sg = sge_of(&p, 2, 7);
	assert_int_equal(muxbe_qp_post_send(p.b, &sg, 1, NULL, &ctx_send_b), 0);
	assert_true(sink_wait(&s, 4));
	wc = sink_find(&s, &ctx_recv_b);
	assert_non_null(wc);
	assert_int_equal(wc->status, IBV_WC_SUCCESS);
	assert_int_equal(wc->opcode, IBV_WC_RECV);
	assert_int_equal(wc->byte_len, 7);
	assert_int_equal(wc->qp_num, muxbe_qp_num(p.b));
	assert_string_equal(p.buf[1], "a to b");
	wc = sink_find(&s, &ctx_recv_a);
	assert_non_null(wc);
	assert_string_equal(p.buf[3], "b to a");
	wc = sink_find(&s, &ctx_send_a);
	assert_non_null(wc);
	assert_int_equal(wc->status, IBV_WC_SUCCESS);
	assert_int_equal(wc->opcode, IBV_WC_SEND);
	assert_non_null(sink_find(&s, &ctx_send_b));
	rc_teardown(&p, NULL);
}

static void test_srq_receive(void **state)
{
	static struct sink s;
	struct muxbe_srq *srq;
	struct ibv_srq_attr sa;
	struct rc_pair p;
	struct ibv_sge sg;
	int rctx, sctx;

	(void)state;
	sink_init(&s);
	rc_setup(&p, &s, 1, &srq);
	assert_int_equal(muxbe_srq_query(srq, &sa), 0);
	assert_true(sa.max_wr >= 16);
	sa.srq_limit = 2;
	assert_int_equal(muxbe_srq_modify(srq, &sa, IBV_SRQ_LIMIT), 0);
	sg = sge_of(&p, 1, 256);
	assert_int_equal(muxbe_srq_post_recv(srq, &sg, 1, &rctx), 0);
	strcpy(p.buf[0], "via srq");
	sg = sge_of(&p, 0, 8);
	assert_int_equal(muxbe_qp_post_send(p.a, &sg, 1, NULL, &sctx), 0);
	assert_true(sink_wait(&s, 2));
	assert_int_equal(sink_find(&s, &rctx)->status, IBV_WC_SUCCESS);
	assert_string_equal(p.buf[1], "via srq");
	rc_teardown(&p, srq);
}

static void test_ud_and_ah_cache(void **state)
{
	static struct sink s;
	struct muxbe_qp_caps caps = { 16, 16, 1, 1 };
	struct muxbe_dev_stats st;
	struct muxbe_qp *u1, *u2;
	struct muxbe_ud_dest d = { .qkey = 0x1111 };
	struct rc_pair p;
	struct gid g = lab_gid();
	struct ibv_sge sg;
	int i, rctx[3], sctx[3];

	(void)state;
	sink_init(&s);
	memset(&p, 0, sizeof(p));
	p.dev = open_dev(&s, 1);
	assert_int_equal(muxbe_pd_create(p.dev, &p.pd), 0);
	assert_int_equal(muxbe_cq_create(p.dev, 64, &p.cq), 0);
	assert_int_equal(muxbe_mr_create(p.pd, p.buf, sizeof(p.buf),
					 IBV_ACCESS_LOCAL_WRITE, &p.mr),
			 0);
	assert_int_equal(muxbe_qp_create(p.dev, p.pd, MUXBE_QPT_UD, p.cq, p.cq,
					 NULL, &caps, &u1),
			 0);
	assert_int_equal(muxbe_qp_create(p.dev, p.pd, MUXBE_QPT_UD, p.cq, p.cq,
					 NULL, &caps, &u2),
			 0);
	for (i = 0; i < 2; i++) {
		struct muxbe_qp *q = i ? u2 : u1;
		struct muxbe_qp_rts rts = { .sq_psn = 1 };

		assert_int_equal(muxbe_qp_init(q, 0x1111), 0);
		assert_int_equal(muxbe_qp_rtr(q, NULL), 0);
		assert_int_equal(muxbe_qp_rts(q, &rts), 0);
	}
	d.sgid_index = (uint8_t)muxbe_dev_gid_index(p.dev, g.raw);
	memcpy(d.dgid, g.raw, 16);
	d.dest_qpn = muxbe_qp_num(u2);
	for (i = 0; i < 3; i++) {
		/* A UD receive holds a GRH (40 bytes) before the payload. */
		sg = sge_of(&p, 1 + (i % 2), 256);
		sg.addr = (uintptr_t)p.buf[1] + 0;
		assert_int_equal(muxbe_qp_post_recv(u2, &sg, 1, &rctx[i]), 0);
	}
	strcpy(p.buf[0], "ud");
	sg = sge_of(&p, 0, 3);
	for (i = 0; i < 3; i++)
		assert_int_equal(muxbe_qp_post_send(u1, &sg, 1, &d, &sctx[i]),
				 0);
	assert_true(sink_wait(&s, 6));
	for (i = 0; i < 3; i++) {
		assert_int_equal(sink_find(&s, &sctx[i])->status,
				 IBV_WC_SUCCESS);
		assert_int_equal(sink_find(&s, &rctx[i])->status,
				 IBV_WC_SUCCESS);
		assert_true(sink_find(&s, &rctx[i])->wc_flags & IBV_WC_GRH);
		assert_int_equal(sink_find(&s, &rctx[i])->byte_len, 40 + 3);
	}
	/* One address handle for three sends to one peer. */
	muxbe_dev_get_stats(p.dev, &st);
	assert_int_equal(st.ah_cache_misses, 1);
	assert_int_equal(st.ah_cache_hits, 2);
	assert_int_equal(st.ah_cache_size, 1);
	assert_int_equal(muxbe_qp_destroy(u1), 0);
	assert_int_equal(muxbe_qp_destroy(u2), 0);
	assert_int_equal(muxbe_mr_destroy(p.mr), 0);
	assert_int_equal(muxbe_cq_destroy(p.cq), 0);
	assert_int_equal(muxbe_pd_destroy(p.dev, p.pd), 0);
	muxbe_dev_get_stats(p.dev, &st);
	assert_int_equal(st.ah_cache_size, 0);
	muxbe_dev_close(p.dev);
}

static void test_vendor_errors_and_flush(void **state)
{
	static struct sink s;
	struct muxbe_qp_caps caps = { 16, 16, 1, 1 };
	struct muxbe_qp *gsi, *ud;
	struct rc_pair p;
	struct ibv_sge sg[3];
	int c_nosge, c_many, c_ud, c_recv[4], i;

	(void)state;
	sink_init(&s);
	rc_setup(&p, &s, 1, NULL);
	/* QP1 without a daemon handle cannot exist. */
	assert_int_equal(muxbe_qp_create(p.dev, p.pd, MUXBE_QPT_GSI, NULL, NULL,
					 NULL, &caps, &gsi),
			 -EOPNOTSUPP);
	sg[0] = sge_of(&p, 0, 8);
	sg[1] = sge_of(&p, 1, 8);
	sg[2] = sge_of(&p, 2, 8);
	assert_int_equal(muxbe_qp_post_send(p.a, sg, 0, NULL, &c_nosge), 0);
	assert_int_equal(muxbe_qp_post_send(p.a, sg, 3, NULL, &c_many), 0);
	assert_int_equal(muxbe_qp_create(p.dev, p.pd, MUXBE_QPT_UD, p.cq, p.cq,
					 NULL, &caps, &ud),
			 0);
	assert_int_equal(muxbe_qp_post_send(ud, sg, 1, NULL, &c_ud), 0);
	assert_true(sink_wait(&s, 3));
	assert_int_equal(sink_find(&s, &c_nosge)->status, IBV_WC_GENERAL_ERR);
	assert_int_equal(sink_find(&s, &c_nosge)->vendor_err,
			 MUXBE_VENDOR_ERR_NO_SGE);
	assert_int_equal(sink_find(&s, &c_many)->vendor_err,
			 MUXBE_VENDOR_ERR_TOO_MANY_SGES);
	assert_int_equal(sink_find(&s, &c_ud)->vendor_err,
			 MUXBE_VENDOR_ERR_FAIL_BACKEND);
	/* Destroying a QP completes what was still posted, flushed. */
	for (i = 0; i < 4; i++)
		assert_int_equal(muxbe_qp_post_recv(p.b, &sg[0], 1, &c_recv[i]),
				 0);
	assert_int_equal(muxbe_qp_destroy(p.b), 0);
	assert_true(sink_wait(&s, 7));
	for (i = 0; i < 4; i++)
		assert_int_equal(sink_find(&s, &c_recv[i])->status,
				 IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(muxbe_qp_destroy(p.a), 0);
	assert_int_equal(muxbe_qp_destroy(ud), 0);
	assert_int_equal(muxbe_mr_destroy(p.mr), 0);
	assert_int_equal(muxbe_cq_destroy(p.cq), 0);
	assert_int_equal(muxbe_pd_destroy(p.dev, p.pd), 0);
	muxbe_dev_close(p.dev);
}

static void test_caller_loop_and_prompt_stop(void **state)
{
	static struct sink s;
	struct rc_pair p;
	struct ibv_sge sg;
	struct pollfd pfd;
	uint64_t t0;
	int rctx, sctx, i;

	(void)state;
	sink_init(&s);
	rc_setup(&p, &s, 0, NULL);
	sg = sge_of(&p, 1, 256);
	assert_int_equal(muxbe_qp_post_recv(p.b, &sg, 1, &rctx), 0);
	sg = sge_of(&p, 0, 4);
	assert_int_equal(muxbe_qp_post_send(p.a, &sg, 1, NULL, &sctx), 0);
	pfd.fd = muxbe_dev_fd(p.dev);
	pfd.events = POLLIN;
	for (i = 0; i < 500 && s.n < 2; i++) {
		poll(&pfd, 1, 10);
		muxbe_dev_process(p.dev);
	}
	assert_int_equal(s.n, 2);
	rc_teardown(&p, NULL);

	/* The completion thread never sleeps on a timer: closing is quick. */
	p.dev = open_dev(&s, 1);
	t0 = h_now_ms();
	muxbe_dev_close(p.dev);
	assert_true(h_now_ms() - t0 < 200);
}

static void test_gsi_through_daemon(void **state)
{
	static struct sink s;
	static const char *const no_ports[] = { NULL };
	struct muxbe_qp_caps caps = { 16, 16, 1, 1 };
	struct muxbe_options mo = { .timeout_ms = 5000 };
	struct muxbe_dev_options o = { .dev_name = "rxe0",
				       .comp_thread = 1,
				       .comp = sink_comp,
				       .user = &s };
	const char *ga = getenv("RCM_GSI_GID_A"), *gb = getenv("RCM_GSI_GID_B");
	struct muxbe_ud_dest d = { .dest_qpn = 1, .qkey = GSI_QKEY };
	static uint8_t mad[MAD_SIZE], rbuf[2][512];
	struct ibv_sge sg;
	enum ibv_qp_state st;
	struct hdaemon hd;
	struct muxbe *mb;
	struct muxbe_dev *dev;
	struct muxbe_qp *gsi;
	struct gid a, b;
	int sctx, rctx, bad1, bad2, spoof, r2;

	(void)state;
	if (ga == NULL || gb == NULL || getenv("RCM_TEST_UMAD_PORT") == NULL)
		skip();
	sink_init(&s);
	hd_start(&hd, NULL, no_ports, NULL);
	mo.socket_path = hd.sock;
	assert_int_equal(muxbe_connect(&mo, &mb), 0);
	o.mux = mb;
	assert_int_equal(muxbe_dev_open(&o, &dev), 0);
	gid_parse(ga, &a);
	gid_parse(gb, &b);
	assert_int_equal(muxbe_register_gid(mb, NULL, a.raw, NULL), 0);
	assert_int_equal(muxbe_register_gid(mb, NULL, b.raw, NULL), 0);
	assert_int_equal(muxbe_qp_create(dev, NULL, MUXBE_QPT_GSI, NULL, NULL,
					 NULL, &caps, &gsi),
			 0);
	assert_int_equal(muxbe_qp_num(gsi), 1);
	assert_int_equal(muxbe_qp_state(gsi, &st), 0);
	assert_int_equal(st, IBV_QPS_RTS);
	sg.addr = (uintptr_t)rbuf[0];
	sg.length = sizeof(rbuf[0]);
	sg.lkey = 0;
	assert_int_equal(muxbe_qp_post_recv(gsi, &sg, 1, &rctx), 0);
	/* A REQ from A's GID to B's, both ours: out on QP1 and back. */
	cm_mad_init(mad, CM_ATTR_REQ, 1);
	cm_field_set(mad, CM_REQ_LOCAL_COMM_ID, 0x5151);
	/* A QP of this process's, and the device's node GUID (which the
	 * daemon would write in place of any other). */
	cm_field_set(mad, CM_REQ_LOCAL_QPN, h_qpn());
	{
		struct ibv_device_attr da;

		assert_int_equal(ibv_query_device(muxbe_dev_context(dev), &da),
				 0);
		cm_field_set(mad, CM_REQ_LOCAL_CA_GUID, be64toh(da.node_guid));
	}
	cm_set_gid(mad, CM_REQ_OFF_PRIMARY_LOCAL_GID, &a);
	cm_set_gid(mad, CM_REQ_OFF_PRIMARY_REMOTE_GID, &b);
	d.sgid_index = (uint8_t)muxbe_dev_gid_index(dev, a.raw);
	memcpy(d.dgid, b.raw, 16);
	sg.addr = (uintptr_t)mad;
	sg.length = MAD_SIZE;
	assert_int_equal(muxbe_qp_post_send(gsi, &sg, 1, &d, &sctx), 0);
	assert_true(sink_wait(&s, 2));
	assert_int_equal(sink_find(&s, &sctx)->status, IBV_WC_SUCCESS);
	assert_int_equal(sink_find(&s, &rctx)->status, IBV_WC_SUCCESS);
	assert_int_equal(sink_find(&s, &rctx)->byte_len, MAD_SIZE);
	assert_true(sink_find(&s, &rctx)->wc_flags & IBV_WC_GRH);
	/* The daemon put a host comm ID in place of 0x5151 (and a TID low
	 * half unique among its sends), ib_umad its agent's hi_tid in TID
	 * bits 63..32 (K:user_mad.c); the rest arrives as sent. */
	assert_memory_equal(rbuf[0] + 40, mad, 8);
	assert_true(cm_field_get(rbuf[0] + 40, CM_REQ_LOCAL_COMM_ID) != 0x5151);
	assert_memory_equal(rbuf[0] + 40 + 16, mad + 16, 8);
	assert_memory_equal(rbuf[0] + 40 + 28, mad + 28, MAD_SIZE - 28);
	assert_memory_equal(rbuf[0] + 8, a.raw, 16); /* GRH SGID */
	/* From a GID index that is not ours: the daemon refuses it. */
	d.sgid_index = 0; /* the link-local GID: not registered */
	cm_field_set(mad, CM_REQ_LOCAL_COMM_ID, 0x5152);
	assert_int_equal(muxbe_qp_post_send(gsi, &sg, 1, &d, &spoof), 0);
	/* Malformed receives. */
	sg.addr = (uintptr_t)rbuf[1];
	sg.length = 100;
	assert_int_equal(muxbe_qp_post_recv(gsi, &sg, 1, &bad1), 0);
	assert_int_equal(muxbe_qp_post_recv(gsi, &sg, 2, &bad2), 0);
	assert_true(sink_wait(&s, 5));
	assert_int_equal(sink_find(&s, &spoof)->vendor_err,
			 MUXBE_VENDOR_ERR_MAD_SEND);
	assert_int_equal(sink_find(&s, &bad1)->vendor_err,
			 MUXBE_VENDOR_ERR_INV_MAD_BUFF);
	assert_int_equal(sink_find(&s, &bad2)->vendor_err,
			 MUXBE_VENDOR_ERR_INV_NUM_SGE);
	/* A posted buffer comes back flushed when the QP goes. */
	sg.length = sizeof(rbuf[1]);
	assert_int_equal(muxbe_qp_post_recv(gsi, &sg, 1, &r2), 0);
	assert_int_equal(muxbe_qp_destroy(gsi), 0);
	assert_true(sink_wait(&s, 6));
	assert_int_equal(sink_find(&s, &r2)->status, IBV_WC_WR_FLUSH_ERR);
	muxbe_dev_close(dev);
	muxbe_close(mb);
	hd_stop(&hd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_caps_gids),
		cmocka_unit_test(test_rc_send_recv_both_ways),
		cmocka_unit_test(test_srq_receive),
		cmocka_unit_test(test_ud_and_ah_cache),
		cmocka_unit_test(test_vendor_errors_and_flush),
		cmocka_unit_test(test_caller_loop_and_prompt_stop),
		cmocka_unit_test(test_gsi_through_daemon),
	};

	return cmocka_run_group_tests_name("verbs", tests, NULL, NULL);
}
