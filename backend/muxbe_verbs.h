/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef MUXBE_VERBS_H
#define MUXBE_VERBS_H

/*
 * libmuxbe's data path: what a paravirtual RDMA device model needs from
 * the host's RDMA device through libibverbs.  Data QPs (RC, UD) are real
 * host QPs; the GSI QP (QP1) is delegated to rdmacm-muxd through a
 * struct muxbe.  Every posted work request completes exactly once, with
 * the caller's context: on success, with the device's error, or, where the
 * operation cannot reach the device, with IBV_WC_GENERAL_ERR and one of
 * the vendor error codes below.  See muxbe_verbs(3).
 */
#include <stdint.h>

#include <infiniband/verbs.h>

#include "muxbe.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MUXBE_VENDOR_ERR_FAIL_BACKEND 0x201 /* the device refused the post */
#define MUXBE_VENDOR_ERR_TOO_MANY_SGES 0x202
#define MUXBE_VENDOR_ERR_NOMEM 0x203
#define MUXBE_VENDOR_ERR_QP0 0x204 /* QP0 (SMI) is not supported */
#define MUXBE_VENDOR_ERR_NO_SGE 0x205
#define MUXBE_VENDOR_ERR_MAD_SEND 0x206 /* the daemon refused the MAD */
#define MUXBE_VENDOR_ERR_INVLKEY 0x207
#define MUXBE_VENDOR_ERR_MR_SMALL 0x208
#define MUXBE_VENDOR_ERR_INV_MAD_BUFF 0x209 /* GSI receive buffer too small */
#define MUXBE_VENDOR_ERR_INV_NUM_SGE 0x210  /* GSI receive needs one SGE */

struct muxbe_dev;
struct muxbe_cq;
struct muxbe_qp;
struct muxbe_srq;

enum muxbe_qp_type { MUXBE_QPT_RC, MUXBE_QPT_UD, MUXBE_QPT_GSI };

struct muxbe_wc {
	void *ctx; /* as given when posting */
	enum ibv_wc_status status;
	uint32_t vendor_err;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len;
	uint32_t qp_num;
	uint32_t src_qp;
	unsigned int wc_flags;
	uint32_t imm_data;
	struct muxbe_cq *cq;
};

typedef void (*muxbe_comp_fn)(void *user, const struct muxbe_wc *wc);

struct muxbe_dev_options {
	const char *dev_name; /* NULL: the first device */
	uint8_t port_num;     /* 0: port 1 */
	int comp_thread;      /* 1: completions on a library thread;
					 * 0: the caller polls muxbe_dev_fd() */
	muxbe_comp_fn comp;
	void *user;
	struct muxbe *mux; /* optional: GSI QPs go through it; the
					 * device takes over its callbacks */
};

struct muxbe_dev_stats {
	uint64_t completions;
	uint64_t error_completions; /* synthesised with a vendor error */
	uint64_t ah_cache_hits;
	uint64_t ah_cache_misses;
	unsigned ah_cache_size;
};

int muxbe_dev_open(const struct muxbe_dev_options *o, struct muxbe_dev **out);
/* Stops the completion thread (promptly: it never sleeps on a timer). */
void muxbe_dev_close(struct muxbe_dev *dev);
struct ibv_context *muxbe_dev_context(struct muxbe_dev *dev);
uint8_t muxbe_dev_port(struct muxbe_dev *dev);
/* Lower every capability in *want that exceeds the device's; returns how
 * many were lowered, or a negative errno. */
int muxbe_dev_clamp_caps(struct muxbe_dev *dev, struct ibv_device_attr *want);
int muxbe_dev_query_port(struct muxbe_dev *dev, struct ibv_port_attr *attr);
/* Index of a GID in the port's table, or -ENOENT. */
int muxbe_dev_gid_index(struct muxbe_dev *dev, const uint8_t gid[16]);
int muxbe_dev_gid(struct muxbe_dev *dev, int index, uint8_t gid[16]);
/* Without a completion thread: poll this fd, then call process. */
int muxbe_dev_fd(struct muxbe_dev *dev);
int muxbe_dev_process(struct muxbe_dev *dev);
void muxbe_dev_get_stats(struct muxbe_dev *dev, struct muxbe_dev_stats *st);

int muxbe_pd_create(struct muxbe_dev *dev, struct ibv_pd **pd);
/* Also destroys the cached address handles of the PD. */
int muxbe_pd_destroy(struct muxbe_dev *dev, struct ibv_pd *pd);
int muxbe_mr_create(struct ibv_pd *pd, void *addr, size_t len, int access,
		    struct ibv_mr **mr);
int muxbe_mr_destroy(struct ibv_mr *mr);

int muxbe_cq_create(struct muxbe_dev *dev, int cqe, struct muxbe_cq **cq);
int muxbe_cq_destroy(struct muxbe_cq *cq);
/* Deliver whatever the CQ holds now; returns how many. */
int muxbe_cq_poll(struct muxbe_cq *cq);

int muxbe_srq_create(struct muxbe_dev *dev, struct ibv_pd *pd, uint32_t max_wr,
		     uint32_t max_sge, uint32_t limit, struct muxbe_srq **srq);
int muxbe_srq_destroy(struct muxbe_srq *srq);
int muxbe_srq_query(struct muxbe_srq *srq, struct ibv_srq_attr *attr);
int muxbe_srq_modify(struct muxbe_srq *srq, struct ibv_srq_attr *attr,
		     int mask);
int muxbe_srq_post_recv(struct muxbe_srq *srq, const struct ibv_sge *sg,
			int nsge, void *ctx);

struct muxbe_qp_caps {
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge;
};

int muxbe_qp_create(struct muxbe_dev *dev, struct ibv_pd *pd,
		    enum muxbe_qp_type type, struct muxbe_cq *send_cq,
		    struct muxbe_cq *recv_cq, struct muxbe_srq *srq,
		    const struct muxbe_qp_caps *caps, struct muxbe_qp **qp);
/* Moves the QP to the error state and delivers the flushed completions
 * of everything still posted, then destroys it. */
int muxbe_qp_destroy(struct muxbe_qp *qp);
uint32_t muxbe_qp_num(struct muxbe_qp *qp); /* GSI: 1 */

/* RESET -> INIT (UD and GSI: with the Q_Key). */
int muxbe_qp_init(struct muxbe_qp *qp, uint32_t qkey);

struct muxbe_qp_rtr {
	uint8_t sgid_index;
	uint8_t dgid[16];  /* RC */
	uint32_t dest_qpn; /* RC */
	uint32_t rq_psn;   /* RC */
	uint32_t qkey;     /* UD: 0 keeps the current one */
	enum ibv_mtu mtu;  /* 0: the port's active MTU */
	uint8_t hop_limit; /* 0: 64 */
	uint8_t traffic_class;
	uint32_t flow_label;
	uint8_t max_dest_rd_atomic; /* 0: 1 */
	uint8_t min_rnr_timer;      /* 0: 12 */
};

/* INIT -> RTR, with what a RoCE connection needs (GRH, GID index, MTU). */
int muxbe_qp_rtr(struct muxbe_qp *qp, const struct muxbe_qp_rtr *a);

struct muxbe_qp_rts {
	uint32_t sq_psn;
	uint32_t qkey;         /* UD: 0 keeps the current one */
	uint8_t timeout;       /* 0: 14 */
	uint8_t retry_cnt;     /* 0: 7 */
	uint8_t rnr_retry;     /* 0: 7 */
	uint8_t max_rd_atomic; /* 0: 1 */
};

/* RTR -> RTS. */
int muxbe_qp_rts(struct muxbe_qp *qp, const struct muxbe_qp_rts *a);
/* The QP's state; a GSI QP is always RTS (the daemon owns the real one). */
int muxbe_qp_state(struct muxbe_qp *qp, enum ibv_qp_state *state);

/* Where a UD or GSI send goes. */
struct muxbe_ud_dest {
	uint8_t sgid_index;
	uint8_t dgid[16];
	uint32_t dest_qpn;
	uint32_t qkey;
};

/* Post one send or receive.  Returns 0 when a completion will follow
 * (maybe an error completion), or -EINVAL for a call that makes no sense
 * (NULL QP).  UD sends use a cached address handle per (GID index, GID). */
int muxbe_qp_post_send(struct muxbe_qp *qp, const struct ibv_sge *sg, int nsge,
		       const struct muxbe_ud_dest *dest, void *ctx);
int muxbe_qp_post_recv(struct muxbe_qp *qp, const struct ibv_sge *sg, int nsge,
		       void *ctx);

#ifdef __cplusplus
}
#endif

#endif
