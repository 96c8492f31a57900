// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The UD sender (--ud-sender, opt-in): a umad port's clients' CM MADs
 * sent from UD QPs of the daemon's own, one per sender thread, to the
 * peer's QP1 with the GSI Q_Key, instead of written to ib_umad.
 *
 * Why: ib_umad makes an address handle for every MAD written, and on
 * RoCE that resolves the destination's MAC, a round trip through the
 * kernel's ib_addr workqueue that the writer sleeps through.  Here a
 * lane keeps one address handle per destination (made once, which
 * resolves once) and a send is a post.  Receives stay on umad: cm.c
 * answers every message, its responses included, to QP1
 * (ib_create_cm_id(): remote_cm_qpn = 1; cm_alloc_response_msg()).
 *
 * IBTA: the GSI's traffic is QP1's, but a GMP may come from any QP (a
 * redirected class's does); what QP1 checks is the Q_Key, which must be
 * the GSI's controlled 0x80010000.  A UD QP sends with its own Q_Key
 * when the work request's has the high bit set, so the QP is given that
 * Q_Key, which Linux 6.4 and later grant only to CAP_NET_RAW
 * (ib_uverbs' modify_qp): without it the port says so and keeps umad.
 *
 * A lane's address handles are dropped when a neighbour the kernel
 * resolves changes (port_ud_forget(), from neigh_nl's events on the port
 * thread): a handle holds the MAC it was made with.  A MAD this path does
 * not take (a P_Key index other than the QP's 0, no GRH) goes by umad.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "mux/mux.h"
#include "common/ibdev.h"
#include "common/wire.h"

/* Sends a lane may have posted and not seen complete. */
#define UD_SLOTS 64
/* Address handles a lane keeps: a host's CM peers, not its connections. */
#define UD_AHS 128
/* How long a send waits for a free slot, at most. */
#define UD_SLOT_WAIT_US 100000u

struct port_ud_ah {
	struct ibv_ah *ah;
	uint8_t dgid[16];
	int gid_index;
	uint8_t hop_limit, traffic_class, sl;
	uint32_t flow_label;
};

struct port_ud_lane {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf; /* UD_SLOTS MADs */
	unsigned next, outstanding;
	unsigned gen; /* of the handles below (port_ud.gen) */
	unsigned nah, evict;
	struct port_ud_ah ahs[UD_AHS];
};

struct port_ud {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	int port_num;
	unsigned nlanes;
	_Atomic unsigned gen;
	_Atomic uint64_t send_errors; /* completions in error */
	struct port_ud_lane lanes[];
};

static int port_ud_lane_open(struct port_ud *u, struct port_ud_lane *l)
{
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp_attr a = { 0 };

	l->buf = calloc(UD_SLOTS, MAD_SIZE);
	if (l->buf == NULL)
		return -ENOMEM;
	l->mr = ibv_reg_mr(u->pd, l->buf, UD_SLOTS * MAD_SIZE, 0);
	l->cq = ibv_create_cq(u->ctx, UD_SLOTS, NULL, NULL, 0);
	if (l->mr == NULL || l->cq == NULL)
		return -(errno ? errno : ENOMEM);
	ia.send_cq = ia.recv_cq = l->cq;
	ia.qp_type = IBV_QPT_UD;
	ia.cap.max_send_wr = UD_SLOTS;
	ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	l->qp = ibv_create_qp(u->pd, &ia);
	if (l->qp == NULL)
		return -(errno ? errno : ENOMEM);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = (uint8_t)u->port_num;
	a.qkey = GSI_QKEY;
	errno = 0;
	if (ibv_modify_qp(l->qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_QKEY))
		return -(errno ? errno : EPERM);
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(l->qp, &a, IBV_QP_STATE))
		return -(errno ? errno : EINVAL);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(l->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return -(errno ? errno : EINVAL);
	return 0;
}

static void port_ud_lane_close(struct port_ud_lane *l)
{
	unsigned i;

	for (i = 0; i < l->nah; i++)
		ibv_destroy_ah(l->ahs[i].ah);
	if (l->qp)
		ibv_destroy_qp(l->qp);
	if (l->cq)
		ibv_destroy_cq(l->cq);
	if (l->mr)
		ibv_dereg_mr(l->mr);
	free(l->buf);
}

void port_ud_close(struct port_ud *u)
{
	unsigned i;

	if (u == NULL)
		return;
	for (i = 0; i < u->nlanes; i++)
		port_ud_lane_close(&u->lanes[i]);
	if (u->pd)
		ibv_dealloc_pd(u->pd);
	if (u->ctx)
		ibv_close_device(u->ctx);
	free(u);
}

int port_ud_open(struct port_ud **out, const char *dev, int port_num,
		 unsigned nlanes)
{
	struct port_ud *u = calloc(1,
				   sizeof(*u) + nlanes * sizeof(u->lanes[0]));
	unsigned i;
	int rc = 0;

	*out = NULL;
	if (u == NULL)
		return -ENOMEM;
	u->port_num = port_num;
	u->nlanes = nlanes;
	u->ctx = ibdev_open(dev);
	u->pd = u->ctx ? ibv_alloc_pd(u->ctx) : NULL;
	if (u->pd == NULL)
		rc = -ENODEV;
	for (i = 0; rc == 0 && i < nlanes; i++)
		rc = port_ud_lane_open(u, &u->lanes[i]);
	if (rc) {
		port_ud_close(u);
		return rc;
	}
	*out = u;
	return 0;
}

void port_ud_forget(struct port_ud *u)
{
	if (u)
		atomic_fetch_add(&u->gen, 1);
}

uint64_t port_ud_send_errors(const struct port_ud *u)
{
	return u ? atomic_load(&u->send_errors) : 0;
}

/* Completed sends give their slots back; one in error is counted. */
static void port_ud_reap(struct port_ud *u, struct port_ud_lane *l)
{
	struct ibv_wc wc[16];
	int n, i;

	while ((n = ibv_poll_cq(l->cq, 16, wc)) > 0) {
		for (i = 0; i < n; i++)
			if (wc[i].status != IBV_WC_SUCCESS)
				atomic_fetch_add(&u->send_errors, 1);
		l->outstanding -= (unsigned)n;
	}
}

/* A slot for the next send: -EAGAIN when the device completes none in
 * UD_SLOT_WAIT_US. */
static int port_ud_slot(struct port_ud *u, struct port_ud_lane *l)
{
	unsigned waited = 0, us = 10;

	port_ud_reap(u, l);
	while (l->outstanding >= UD_SLOTS) {
		if (waited >= UD_SLOT_WAIT_US)
			return -EAGAIN;
		nanosleep(&(struct timespec){ .tv_nsec = (long)us * 1000 },
			  NULL);
		waited += us;
		if (us < 1000)
			us *= 2;
		port_ud_reap(u, l);
	}
	return (int)(l->next++ % UD_SLOTS);
}

static int port_ud_ah_matches(const struct port_ud_ah *a,
			      const struct proto_mad *m, int gid_index)
{
	return a->gid_index == gid_index && a->hop_limit == m->addr.hop_limit &&
	       a->traffic_class == m->addr.traffic_class &&
	       a->flow_label == m->addr.flow_label && a->sl == m->addr.sl &&
	       memcmp(a->dgid, m->addr.remote_gid, 16) == 0;
}

/* The lane's handle for m's destination, made (and its MAC resolved)
 * the first time; when the lane has UD_AHS, one goes, in turn. */
static struct ibv_ah *port_ud_ah(struct port_ud *u, struct port_ud_lane *l,
				 const struct proto_mad *m, int gid_index)
{
	struct ibv_ah_attr attr = { 0 };
	struct port_ud_ah *a;
	unsigned i, gen = atomic_load(&u->gen);

	if (gen != l->gen) {
		for (i = 0; i < l->nah; i++)
			ibv_destroy_ah(l->ahs[i].ah);
		l->nah = 0;
		l->gen = gen;
	}
	for (i = 0; i < l->nah; i++)
		if (port_ud_ah_matches(&l->ahs[i], m, gid_index))
			return l->ahs[i].ah;
	attr.is_global = 1;
	memcpy(attr.grh.dgid.raw, m->addr.remote_gid, 16);
	attr.grh.sgid_index = (uint8_t)gid_index;
	attr.grh.hop_limit = m->addr.hop_limit;
	attr.grh.traffic_class = m->addr.traffic_class;
	attr.grh.flow_label = m->addr.flow_label;
	attr.dlid = m->addr.lid;
	attr.sl = m->addr.sl;
	attr.port_num = (uint8_t)u->port_num;
	if (l->nah < UD_AHS) {
		a = &l->ahs[l->nah];
	} else {
		a = &l->ahs[l->evict++ % UD_AHS];
		ibv_destroy_ah(a->ah);
		l->nah--;
	}
	a->ah = ibv_create_ah(u->pd, &attr);
	if (a->ah == NULL) {
		/* The slot is free again: move the last one into it. */
		if (a != &l->ahs[l->nah])
			*a = l->ahs[l->nah];
		return NULL;
	}
	memcpy(a->dgid, m->addr.remote_gid, 16);
	a->gid_index = gid_index;
	a->hop_limit = m->addr.hop_limit;
	a->traffic_class = m->addr.traffic_class;
	a->flow_label = m->addr.flow_label;
	a->sl = m->addr.sl;
	l->nah++;
	return a->ah;
}

int port_ud_send(struct port_ud *u, unsigned lane, const struct proto_mad *m,
		 int gid_index)
{
	struct port_ud_lane *l;
	struct ibv_send_wr wr = { 0 }, *bad = NULL;
	struct ibv_sge sge;
	struct ibv_ah *ah;
	uint8_t *mad;
	int slot, rc;

	if (u == NULL || lane < 1 || lane > u->nlanes ||
	    m->addr.pkey_index != 0 || !(m->addr.flags & PROTO_MAD_F_GRH) ||
	    m->mad_len != MAD_SIZE)
		return -EOPNOTSUPP;
	l = &u->lanes[lane - 1];
	errno = 0;
	ah = port_ud_ah(u, l, m, gid_index);
	if (ah == NULL)
		return -(errno ? errno : EHOSTUNREACH);
	slot = port_ud_slot(u, l);
	if (slot < 0)
		return slot;
	mad = l->buf + (size_t)slot * MAD_SIZE;
	memcpy(mad, m->mad, MAD_SIZE);
	/* ib_umad writes its agent's number in the TID's high half; here
	 * it is the lane's, so no client's bits reach the wire there. */
	wire_put32(mad + MAD_OFF_TID, lane);
	sge.addr = (uintptr_t)mad;
	sge.length = MAD_SIZE;
	sge.lkey = l->mr->lkey;
	wr.wr_id = (uint64_t)slot;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = m->addr.remote_qpn;
	wr.wr.ud.remote_qkey = m->addr.qkey;
	rc = ibv_post_send(l->qp, &wr, &bad);
	if (rc)
		return -rc;
	l->outstanding++;
	return 0;
}
