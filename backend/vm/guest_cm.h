/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_GUEST_CM_H
#define RCM_GUEST_CM_H

#define CM_REJ_REASON_NO_RESOURCES 3

/*
 * A minimal guest-side IB CM endpoint (one connection, active or passive),
 * enough to drive the daemon the way a guest kernel's CM would: REQ with
 * rdma_cm's private-data header, REP, RTU, DREQ/DREP, REJ, retransmission
 * on timeout and answers to duplicates.  An explicit state machine, no
 * I/O: MADs go out through ops->send and time is passed in.
 */
#include <stddef.h>
#include <stdint.h>

#include "common/cm_mad.h"
#include "common/gid.h"

enum gcm_state {
	GCM_IDLE,
	GCM_LISTEN,
	GCM_REQ_SENT,
	GCM_REP_SENT,
	GCM_ESTABLISHED,
	GCM_DREQ_SENT,
	GCM_TIMEWAIT,
	GCM_CLOSED,
	GCM_STATE_MAX
};

enum gcm_event {
	GCM_EV_CONNECTED,
	GCM_EV_REJECTED, /* detail: REJ reason */
	GCM_EV_TIMEOUT,  /* no answer after all retries (nothing sent:
			  * cm.c's cm_process_send_error()) */
	GCM_EV_DISCONNECTED,
	GCM_EV_CLOSED, /* timewait over */
};

struct gcm_ops {
	int (*send)(void *ctx, const uint8_t *mad, const struct gid *dst);
	void (*event)(void *ctx, enum gcm_event ev, int detail);
	/* Optional: bring a data QP to RTR with what the peer announced
	 * (before REP on the passive side, on REP on the active side), and
	 * to RTS (before RTU on the active side, on RTU on the passive).
	 * A failure rejects the connection. */
	int (*qp_rtr)(void *ctx, uint32_t remote_qpn, uint32_t remote_psn,
		      const struct gid *remote);
	int (*qp_rts)(void *ctx);
};

struct gcm_params {
	struct gid local_gid;
	struct gid remote_gid;  /* active side */
	uint16_t port;          /* rdma_cm TCP port space port */
	uint16_t src_port;      /* active: our port in rdma_cm's header */
	uint32_t local_comm_id; /* non-zero */
	uint32_t qpn;
	uint32_t psn; /* the PSN our receive queue expects,
					 * announced in REQ or REP */
	uint64_t ca_guid;
	unsigned timeout_ms; /* per try, announced in the REQ (rounded up
			      * to cm.c's 2^n ms) */
	unsigned max_retries;
	unsigned timewait_ms;
	char private_data[64]; /* carried in REQ (after rdma_cm's
					 * header) or REP */
};

struct gcm {
	struct gcm_params p;
	const struct gcm_ops *ops;
	void *ctx;
	enum gcm_state state;
	int listening; /* go back to LISTEN after CLOSED */
	uint32_t remote_comm_id;
	uint32_t remote_qpn;
	uint32_t remote_psn;
	uint64_t tid;
	uint32_t tid_seq;
	/* The connection's timing, as cm.c keeps it per cm_id: the
	 * parameters' on the active side, the REQ's on the passive side
	 * (its Local CM Response Timeout and Max CM Retries). */
	unsigned timeout_ms;
	unsigned max_retries;
	unsigned retries;
	uint64_t deadline_ms;        /* 0: no timer */
	uint8_t last_sent[MAD_SIZE]; /* for retransmission and duplicates */
	char peer_data[64];          /* private data the peer sent */
	uint64_t retransmissions;
	uint64_t duplicates;
};

const char *gcm_state_name(enum gcm_state s);
void gcm_init(struct gcm *g, const struct gcm_params *p,
	      const struct gcm_ops *ops, void *ctx);
int gcm_listen(struct gcm *g);
int gcm_connect(struct gcm *g, uint64_t now_ms);
int gcm_disconnect(struct gcm *g, uint64_t now_ms);
/* One inbound CM MAD from src. */
void gcm_input(struct gcm *g, const uint8_t *mad, size_t len,
	       const struct gid *src, uint64_t now_ms);
/* The passive side saw the first data on its QP (the kernel's
 * ib_cm_notify(IB_EVENT_COMM_EST)): established without an RTU. */
void gcm_established(struct gcm *g);
/* Run timers: retransmit or give up. */
void gcm_tick(struct gcm *g, uint64_t now_ms);

#endif
