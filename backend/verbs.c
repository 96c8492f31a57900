// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * libmuxbe's data path on libibverbs.  Each posted work request carries a
 * small record (the caller's context and its owner) as its wr_id, so that
 * every request completes exactly once with the caller's context, and a
 * QP being destroyed can wait for its flushed completions.  Completions
 * the library makes itself (a post the device refused, a MAD the daemon
 * refused) are queued and delivered from the same loop as the device's,
 * never from inside the post call.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "backend/muxbe_verbs.h"
#include "backend/ah_cache.h"
#include "common/ibdev.h"
#include "common/tree.h"

#define DEV_AH_CACHE_MAX 1024
#define GSI_QKEY 0x80010000u
#define QP_DRAIN_MS 2000

struct wr_rec {
	void *ctx;
	struct muxbe_qp *qp; /* or NULL for an SRQ receive */
	struct muxbe_srq *srq;
	enum ibv_wc_opcode opcode; /* for synthesised completions */
};

struct pending_wc {
	TAILQ_ENTRY(pending_wc) link;
	struct muxbe_wc wc;
};

struct muxbe_dev {
	struct ibv_context *ctx;
	uint8_t port;
	struct ibv_device_attr attr;
	struct ibv_comp_channel *chan;
	int epfd; /* channel, pending eventfd, mux */
	int pending_fd;
	int stop_fd;
	pthread_t thread;
	int has_thread;
	muxbe_comp_fn comp;
	void *user;
	struct muxbe *mux;
	uint16_t mux_port;
	pthread_mutex_t lock;      /* pending, stats, AH cache */
	pthread_mutex_t poll_lock; /* recursive: CQ polling and delivery */
	TAILQ_HEAD(, pending_wc) pending;
	struct ah_cache ahc;
	struct muxbe_dev_stats st;
};

struct muxbe_cq {
	struct muxbe_dev *dev;
	struct ibv_cq *cq;
};

struct muxbe_srq {
	struct muxbe_dev *dev;
	struct ibv_srq *srq;
	_Atomic int outstanding;
};

struct muxbe_qp {
	struct muxbe_dev *dev;
	enum muxbe_qp_type type;
	struct ibv_qp *qp; /* NULL for GSI */
	struct ibv_pd *pd;
	struct muxbe_cq *scq, *rcq;
	uint32_t max_send_sge, max_recv_sge;
	_Atomic int outstanding;
};

/* ---- completions ---------------------------------------------------------- */

static void verbs_deliver(struct muxbe_dev *dev, const struct muxbe_wc *wc)
{
	pthread_mutex_lock(&dev->lock);
	dev->st.completions++;
	if (wc->vendor_err)
		dev->st.error_completions++;
	pthread_mutex_unlock(&dev->lock);
	if (dev->comp)
		dev->comp(dev->user, wc);
}

static void verbs_rec_done(struct wr_rec *r)
{
	if (r->qp)
		atomic_fetch_sub(&r->qp->outstanding, 1);
	if (r->srq)
		atomic_fetch_sub(&r->srq->outstanding, 1);
	free(r);
}

/* A completion the library makes: queued, delivered from the loop. */
static void verbs_complete_later(struct muxbe_dev *dev, struct wr_rec *r,
				 enum ibv_wc_status status, uint32_t vendor_err)
{
	struct pending_wc *p = calloc(1, sizeof(*p));
	uint64_t one = 1;

	if (p) {
		p->wc.ctx = r->ctx;
		p->wc.status = status;
		p->wc.vendor_err = vendor_err;
		p->wc.opcode = r->opcode;
		p->wc.qp_num = r->qp ? muxbe_qp_num(r->qp) : 0;
		pthread_mutex_lock(&dev->lock);
		TAILQ_INSERT_TAIL(&dev->pending, p, link);
		pthread_mutex_unlock(&dev->lock);
		if (write(dev->pending_fd, &one, sizeof(one)) < 0) {
			/* saturated counter: already readable */
		}
	}
	verbs_rec_done(r);
}

static int verbs_deliver_pending(struct muxbe_dev *dev)
{
	TAILQ_HEAD(, pending_wc) batch = TAILQ_HEAD_INITIALIZER(batch);
	struct pending_wc *p;
	uint64_t n;
	int count = 0;

	if (read(dev->pending_fd, &n, sizeof(n)) < 0) {
		/* nothing signalled */
	}
	pthread_mutex_lock(&dev->lock);
	TAILQ_CONCAT(&batch, &dev->pending, link);
	pthread_mutex_unlock(&dev->lock);
	while ((p = TAILQ_FIRST(&batch)) != NULL) {
		TAILQ_REMOVE(&batch, p, link);
		verbs_deliver(dev, &p->wc);
		free(p);
		count++;
	}
	return count;
}

static int verbs_poll_cq_locked(struct muxbe_cq *cq)
{
	struct ibv_wc wc[16];
	struct muxbe_wc out;
	struct wr_rec *r;
	int i, n, total = 0;

	do {
		n = ibv_poll_cq(cq->cq, 16, wc);
		for (i = 0; i < n; i++) {
			r = (struct wr_rec *)(uintptr_t)wc[i].wr_id;
			memset(&out, 0, sizeof(out));
			out.ctx = r->ctx;
			out.status = wc[i].status;
			out.vendor_err = wc[i].vendor_err;
			out.opcode = wc[i].opcode;
			out.byte_len = wc[i].byte_len;
			out.qp_num = wc[i].qp_num;
			out.src_qp = wc[i].src_qp;
			out.wc_flags = wc[i].wc_flags;
			out.imm_data = wc[i].imm_data;
			out.cq = cq;
			verbs_rec_done(r);
			verbs_deliver(cq->dev, &out);
		}
		if (n > 0)
			total += n;
	} while (n > 0);
	return total;
}

int muxbe_cq_poll(struct muxbe_cq *cq)
{
	int n;

	pthread_mutex_lock(&cq->dev->poll_lock);
	n = verbs_poll_cq_locked(cq);
	pthread_mutex_unlock(&cq->dev->poll_lock);
	return n;
}

static int verbs_handle_channel(struct muxbe_dev *dev)
{
	struct ibv_cq *ibcq;
	void *cq_ctx;
	int n = 0;

	pthread_mutex_lock(&dev->poll_lock);
	while (ibv_get_cq_event(dev->chan, &ibcq, &cq_ctx) == 0) {
		ibv_ack_cq_events(ibcq, 1);
		/* Re-arm before polling so nothing slips between the two. */
		ibv_req_notify_cq(ibcq, 0);
		n += verbs_poll_cq_locked(cq_ctx);
	}
	pthread_mutex_unlock(&dev->poll_lock);
	return n;
}

int muxbe_dev_process(struct muxbe_dev *dev)
{
	int n = verbs_handle_channel(dev);

	if (dev->mux) {
		int m = muxbe_process(dev->mux);

		if (m > 0)
			n += m;
	}
	return n + verbs_deliver_pending(dev);
}

static void *verbs_comp_thread(void *arg)
{
	struct muxbe_dev *dev = arg;
	struct epoll_event ev[4];
	int i, n;

	for (;;) {
		n = epoll_wait(dev->epfd, ev, 4, -1);
		for (i = 0; i < n; i++)
			if (ev[i].data.fd == dev->stop_fd)
				return NULL;
		muxbe_dev_process(dev);
	}
}

/* ---- GSI through the daemon ---------------------------------------------- */

static void verbs_gsi_recv(void *user, void *buf_ctx, void *buf, size_t mad_len,
			   const struct muxbe_addr *addr)
{
	struct muxbe_dev *dev = user;
	struct wr_rec *r = buf_ctx;
	struct muxbe_wc wc = { .ctx = r->ctx,
			       .opcode = IBV_WC_RECV,
			       .qp_num = 1 };

	(void)buf;
	if (addr) {
		wc.status = IBV_WC_SUCCESS;
		wc.byte_len = (uint32_t)mad_len;
		wc.wc_flags = IBV_WC_GRH;
		wc.src_qp = addr->remote_qpn;
	} else {
		wc.status = IBV_WC_WR_FLUSH_ERR;
	}
	verbs_rec_done(r);
	verbs_deliver(dev, &wc);
}

static void verbs_gsi_send_done(void *user, void *send_ctx, int status,
				const char *message)
{
	struct muxbe_dev *dev = user;
	struct wr_rec *r = send_ctx;
	struct muxbe_wc wc = { .ctx = r->ctx,
			       .opcode = IBV_WC_SEND,
			       .qp_num = 1 };

	(void)message;
	if (status) {
		wc.status = IBV_WC_GENERAL_ERR;
		wc.vendor_err = MUXBE_VENDOR_ERR_MAD_SEND;
	}
	verbs_rec_done(r);
	verbs_deliver(dev, &wc);
}

static const struct muxbe_callbacks gsi_callbacks = {
	.recv = verbs_gsi_recv,
	.send_done = verbs_gsi_send_done,
};

/* The daemon's index of this device's port, by its name "dev:port". */
static int verbs_find_mux_port(struct muxbe_dev *dev)
{
	char *reply = NULL, want[80];
	json_error_t jerr;
	json_t *j, *p;
	size_t i;
	int rc = -ENODEV;

	snprintf(want, sizeof(want), "%s:%u",
		 ibv_get_device_name(dev->ctx->device), dev->port);
	if (muxbe_request(dev->mux, "{\"op\":\"list_ports\"}", &reply) < 0)
		return -EIO;
	j = json_loads(reply, 0, &jerr);
	free(reply);
	json_array_foreach(json_object_get(j, "ports"), i, p) {
		const char *name = json_string_value(
			json_object_get(p, "name"));

		if (name && strcmp(name, want) == 0) {
			dev->mux_port = (uint16_t)json_integer_value(
				json_object_get(p, "index"));
			rc = 0;
		}
	}
	json_decref(j);
	return rc;
}

/* ---- device --------------------------------------------------------------- */

static int verbs_epoll_add(int epfd, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

int muxbe_dev_open(const struct muxbe_dev_options *o, struct muxbe_dev **out)
{
	struct muxbe_dev *dev = calloc(1, sizeof(*dev));
	pthread_mutexattr_t ma;
	int rc;

	*out = NULL;
	if (dev == NULL)
		return -ENOMEM;
	dev->port = o->port_num ? o->port_num : 1;
	dev->comp = o->comp;
	dev->user = o->user;
	dev->mux = o->mux;
	dev->epfd = dev->pending_fd = dev->stop_fd = -1;
	pthread_mutex_init(&dev->lock, NULL);
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&dev->poll_lock, &ma);
	pthread_mutexattr_destroy(&ma);
	TAILQ_INIT(&dev->pending);
	ah_cache_init(&dev->ahc, DEV_AH_CACHE_MAX);
	errno = 0;
	dev->ctx = ibdev_open(o->dev_name);
	if (dev->ctx == NULL) {
		rc = -(errno ? errno : ENODEV);
		goto fail;
	}
	if (ibv_query_device(dev->ctx, &dev->attr)) {
		rc = -EIO;
		goto fail;
	}
	if (dev->port < 1 || dev->port > dev->attr.phys_port_cnt) {
		rc = -EINVAL;
		goto fail;
	}
	dev->chan = ibv_create_comp_channel(dev->ctx);
	dev->epfd = epoll_create1(EPOLL_CLOEXEC);
	dev->pending_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	dev->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (dev->chan == NULL || dev->epfd < 0 || dev->pending_fd < 0 ||
	    dev->stop_fd < 0) {
		rc = -ENOMEM;
		goto fail;
	}
	fcntl(dev->chan->fd, F_SETFL,
	      fcntl(dev->chan->fd, F_GETFL) | O_NONBLOCK);
	verbs_epoll_add(dev->epfd, dev->chan->fd);
	verbs_epoll_add(dev->epfd, dev->pending_fd);
	if (dev->mux) {
		rc = verbs_find_mux_port(dev);
		if (rc < 0)
			goto fail;
		muxbe_set_callbacks(dev->mux, &gsi_callbacks, dev);
		verbs_epoll_add(dev->epfd, muxbe_fd(dev->mux));
	}
	if (o->comp_thread) {
		sigset_t all, was;

		verbs_epoll_add(dev->epfd, dev->stop_fd);
		/* The library's thread takes none of the application's
		 * signals: they go to the threads the application made. */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &was);
		rc = pthread_create(&dev->thread, NULL, verbs_comp_thread, dev);
		pthread_sigmask(SIG_SETMASK, &was, NULL);
		if (rc) {
			rc = -rc;
			goto fail;
		}
		dev->has_thread = 1;
	}
	*out = dev;
	return 0;
fail:
	muxbe_dev_close(dev);
	return rc;
}

void muxbe_dev_close(struct muxbe_dev *dev)
{
	struct pending_wc *p;
	uint64_t one = 1;

	if (dev == NULL)
		return;
	if (dev->has_thread) {
		if (write(dev->stop_fd, &one, sizeof(one)) < 0) {
			/* cannot happen on a fresh eventfd */
		}
		pthread_join(dev->thread, NULL);
	}
	if (dev->mux)
		muxbe_set_callbacks(dev->mux, NULL, NULL);
	ah_cache_flush(&dev->ahc, NULL);
	while ((p = TAILQ_FIRST(&dev->pending)) != NULL) {
		TAILQ_REMOVE(&dev->pending, p, link);
		free(p);
	}
	if (dev->chan)
		ibv_destroy_comp_channel(dev->chan);
	if (dev->ctx)
		ibv_close_device(dev->ctx);
	if (dev->epfd >= 0)
		close(dev->epfd);
	if (dev->pending_fd >= 0)
		close(dev->pending_fd);
	if (dev->stop_fd >= 0)
		close(dev->stop_fd);
	pthread_mutex_destroy(&dev->lock);
	pthread_mutex_destroy(&dev->poll_lock);
	free(dev);
}

struct ibv_context *muxbe_dev_context(struct muxbe_dev *dev)
{
	return dev->ctx;
}
uint8_t muxbe_dev_port(struct muxbe_dev *dev)
{
	return dev->port;
}
int muxbe_dev_fd(struct muxbe_dev *dev)
{
	return dev->epfd;
}

#define CLAMP(field)                                   \
	do {                                           \
		if (want->field > dev->attr.field) {   \
			want->field = dev->attr.field; \
			lowered++;                     \
		}                                      \
	} while (0)

int muxbe_dev_clamp_caps(struct muxbe_dev *dev, struct ibv_device_attr *want)
{
	int lowered = 0;

	CLAMP(max_mr_size);
	CLAMP(max_qp);
	CLAMP(max_qp_wr);
	CLAMP(max_sge);
	CLAMP(max_cq);
	CLAMP(max_cqe);
	CLAMP(max_mr);
	CLAMP(max_pd);
	CLAMP(max_qp_rd_atom);
	CLAMP(max_qp_init_rd_atom);
	CLAMP(max_ah);
	CLAMP(max_srq);
	CLAMP(max_srq_wr);
	CLAMP(max_srq_sge);
	return lowered;
}

int muxbe_dev_query_port(struct muxbe_dev *dev, struct ibv_port_attr *attr)
{
	return ibv_query_port(dev->ctx, dev->port, attr) ? -EIO : 0;
}

int muxbe_dev_gid(struct muxbe_dev *dev, int index, uint8_t gid[16])
{
	union ibv_gid g;

	if (ibv_query_gid(dev->ctx, dev->port, index, &g))
		return -EINVAL;
	memcpy(gid, g.raw, 16);
	return 0;
}

int muxbe_dev_gid_index(struct muxbe_dev *dev, const uint8_t gid[16])
{
	struct ibv_port_attr pa;
	struct ibv_gid_entry e;
	int i, any = -ENOENT;

	if (ibv_query_port(dev->ctx, dev->port, &pa))
		return -EIO;
	for (i = 0; i < pa.gid_tbl_len; i++) {
		if (ibv_query_gid_ex(dev->ctx, dev->port, (uint32_t)i, &e, 0))
			continue;
		if (memcmp(e.gid.raw, gid, 16) != 0)
			continue;
		/* RoCE lists a GID once per type; v2 is the routable one. */
		if (e.gid_type == IBV_GID_TYPE_ROCE_V2)
			return i;
		if (any < 0)
			any = i;
	}
	return any;
}

void muxbe_dev_get_stats(struct muxbe_dev *dev, struct muxbe_dev_stats *st)
{
	pthread_mutex_lock(&dev->lock);
	*st = dev->st;
	st->ah_cache_hits = dev->ahc.hits;
	st->ah_cache_misses = dev->ahc.misses;
	st->ah_cache_size = dev->ahc.size;
	pthread_mutex_unlock(&dev->lock);
}

/* ---- PD, MR, CQ, SRQ ------------------------------------------------------ */

int muxbe_pd_create(struct muxbe_dev *dev, struct ibv_pd **pd)
{
	*pd = ibv_alloc_pd(dev->ctx);
	return *pd ? 0 : -(errno ? errno : ENOMEM);
}

int muxbe_pd_destroy(struct muxbe_dev *dev, struct ibv_pd *pd)
{
	pthread_mutex_lock(&dev->lock);
	ah_cache_flush(&dev->ahc, pd);
	pthread_mutex_unlock(&dev->lock);
	return ibv_dealloc_pd(pd) ? -EBUSY : 0;
}

int muxbe_mr_create(struct ibv_pd *pd, void *addr, size_t len, int access,
		    struct ibv_mr **mr)
{
	*mr = ibv_reg_mr(pd, addr, len, access);
	return *mr ? 0 : -(errno ? errno : ENOMEM);
}

int muxbe_mr_destroy(struct ibv_mr *mr)
{
	return ibv_dereg_mr(mr) ? -EBUSY : 0;
}

int muxbe_cq_create(struct muxbe_dev *dev, int cqe, struct muxbe_cq **out)
{
	struct muxbe_cq *cq = calloc(1, sizeof(*cq));

	*out = NULL;
	if (cq == NULL)
		return -ENOMEM;
	if (cqe > dev->attr.max_cqe)
		cqe = dev->attr.max_cqe;
	cq->dev = dev;
	cq->cq = ibv_create_cq(dev->ctx, cqe, cq, dev->chan, 0);
	if (cq->cq == NULL) {
		free(cq);
		return -(errno ? errno : ENOMEM);
	}
	ibv_req_notify_cq(cq->cq, 0);
	*out = cq;
	return 0;
}

int muxbe_cq_destroy(struct muxbe_cq *cq)
{
	int rc;

	pthread_mutex_lock(&cq->dev->poll_lock);
	verbs_poll_cq_locked(cq);
	rc = ibv_destroy_cq(cq->cq) ? -EBUSY : 0;
	pthread_mutex_unlock(&cq->dev->poll_lock);
	if (rc == 0)
		free(cq);
	return rc;
}

int muxbe_srq_create(struct muxbe_dev *dev, struct ibv_pd *pd, uint32_t max_wr,
		     uint32_t max_sge, uint32_t limit, struct muxbe_srq **out)
{
	struct ibv_srq_init_attr a = { .attr = { .max_wr = max_wr,
						 .max_sge = max_sge,
						 .srq_limit = limit } };
	struct muxbe_srq *srq = calloc(1, sizeof(*srq));

	*out = NULL;
	if (srq == NULL)
		return -ENOMEM;
	srq->dev = dev;
	srq->srq = ibv_create_srq(pd, &a);
	if (srq->srq == NULL) {
		free(srq);
		return -(errno ? errno : ENOMEM);
	}
	*out = srq;
	return 0;
}

int muxbe_srq_destroy(struct muxbe_srq *srq)
{
	if (ibv_destroy_srq(srq->srq))
		return -EBUSY;
	free(srq);
	return 0;
}

int muxbe_srq_query(struct muxbe_srq *srq, struct ibv_srq_attr *attr)
{
	return ibv_query_srq(srq->srq, attr) ? -EIO : 0;
}

int muxbe_srq_modify(struct muxbe_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	int rc = ibv_modify_srq(srq->srq, attr, mask);

	return rc ? -(rc > 0 ? rc : EIO) : 0;
}

static struct wr_rec *verbs_new_rec(void *ctx, struct muxbe_qp *qp,
				    struct muxbe_srq *srq,
				    enum ibv_wc_opcode op)
{
	struct wr_rec *r = malloc(sizeof(*r));

	if (r == NULL)
		return NULL;
	r->ctx = ctx;
	r->qp = qp;
	r->srq = srq;
	r->opcode = op;
	if (qp)
		atomic_fetch_add(&qp->outstanding, 1);
	if (srq)
		atomic_fetch_add(&srq->outstanding, 1);
	return r;
}

/* Out of memory for the record itself: complete with the context alone. */
static int verbs_complete_nomem(struct muxbe_dev *dev, void *ctx,
				enum ibv_wc_opcode op)
{
	struct wr_rec *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return -ENOMEM;
	r->ctx = ctx;
	r->opcode = op;
	verbs_complete_later(dev, r, IBV_WC_GENERAL_ERR,
			     MUXBE_VENDOR_ERR_NOMEM);
	return 0;
}

int muxbe_srq_post_recv(struct muxbe_srq *srq, const struct ibv_sge *sg,
			int nsge, void *ctx)
{
	struct wr_rec *r = verbs_new_rec(ctx, NULL, srq, IBV_WC_RECV);
	struct ibv_recv_wr wr = { .sg_list = (struct ibv_sge *)sg,
				  .num_sge = nsge },
			   *bad;

	if (r == NULL)
		return verbs_complete_nomem(srq->dev, ctx, IBV_WC_RECV);
	wr.wr_id = (uintptr_t)r;
	if (nsge > srq->dev->attr.max_srq_sge) {
		verbs_complete_later(srq->dev, r, IBV_WC_GENERAL_ERR,
				     MUXBE_VENDOR_ERR_TOO_MANY_SGES);
		return 0;
	}
	if (ibv_post_srq_recv(srq->srq, &wr, &bad))
		verbs_complete_later(srq->dev, r, IBV_WC_GENERAL_ERR,
				     MUXBE_VENDOR_ERR_FAIL_BACKEND);
	return 0;
}

/* ---- QP ------------------------------------------------------------------- */

int muxbe_qp_create(struct muxbe_dev *dev, struct ibv_pd *pd,
		    enum muxbe_qp_type type, struct muxbe_cq *send_cq,
		    struct muxbe_cq *recv_cq, struct muxbe_srq *srq,
		    const struct muxbe_qp_caps *caps, struct muxbe_qp **out)
{
	struct ibv_qp_init_attr a = { 0 };
	struct muxbe_qp *qp;

	*out = NULL;
	if (type == MUXBE_QPT_GSI && dev->mux == NULL)
		return -EOPNOTSUPP; /* QP1 needs the daemon */
	if (type != MUXBE_QPT_GSI && (send_cq == NULL || recv_cq == NULL))
		return -EINVAL;
	qp = calloc(1, sizeof(*qp));
	if (qp == NULL)
		return -ENOMEM;
	qp->dev = dev;
	qp->type = type;
	qp->pd = pd;
	qp->scq = send_cq;
	qp->rcq = recv_cq;
	qp->max_send_sge = caps->max_send_sge;
	qp->max_recv_sge = caps->max_recv_sge;
	if (type == MUXBE_QPT_GSI) {
		*out = qp;
		return 0;
	}
	a.qp_type = type == MUXBE_QPT_RC ? IBV_QPT_RC : IBV_QPT_UD;
	a.send_cq = send_cq->cq;
	a.recv_cq = recv_cq->cq;
	a.srq = srq ? srq->srq : NULL;
	a.cap.max_send_wr = caps->max_send_wr;
	a.cap.max_recv_wr = caps->max_recv_wr;
	a.cap.max_send_sge = caps->max_send_sge;
	a.cap.max_recv_sge = caps->max_recv_sge;
	a.sq_sig_all = 1;
	qp->qp = ibv_create_qp(pd, &a);
	if (qp->qp == NULL) {
		int err = errno ? errno : ENOMEM;

		free(qp);
		return -err;
	}
	*out = qp;
	return 0;
}

uint32_t muxbe_qp_num(struct muxbe_qp *qp)
{
	return qp->qp ? qp->qp->qp_num : 1;
}

static int verbs_modify(struct muxbe_qp *qp, struct ibv_qp_attr *a, int mask)
{
	int rc = ibv_modify_qp(qp->qp, a, mask);

	return rc ? -(rc > 0 ? rc : EIO) : 0;
}

int muxbe_qp_init(struct muxbe_qp *qp, uint32_t qkey)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT,
				 .pkey_index = 0,
				 .port_num = qp->dev->port };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	if (qp->type == MUXBE_QPT_GSI)
		return 0;
	if (qp->type == MUXBE_QPT_RC) {
		a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
				    IBV_ACCESS_REMOTE_READ |
				    IBV_ACCESS_REMOTE_WRITE;
		mask |= IBV_QP_ACCESS_FLAGS;
	} else {
		a.qkey = qkey;
		mask |= IBV_QP_QKEY;
	}
	return verbs_modify(qp, &a, mask);
}

int muxbe_qp_rtr(struct muxbe_qp *qp, const struct muxbe_qp_rtr *r)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	struct ibv_port_attr pa;
	int mask = IBV_QP_STATE;

	if (qp->type == MUXBE_QPT_GSI)
		return 0;
	if (qp->type == MUXBE_QPT_UD) {
		if (r && r->qkey) {
			a.qkey = r->qkey;
			mask |= IBV_QP_QKEY;
		}
		return verbs_modify(qp, &a, mask);
	}
	if (ibv_query_port(qp->dev->ctx, qp->dev->port, &pa))
		return -EIO;
	a.path_mtu = r->mtu ? r->mtu : pa.active_mtu;
	a.dest_qp_num = r->dest_qpn;
	a.rq_psn = r->rq_psn & 0xffffff;
	a.max_dest_rd_atomic = r->max_dest_rd_atomic ? r->max_dest_rd_atomic
						     : 1;
	a.min_rnr_timer = r->min_rnr_timer ? r->min_rnr_timer : 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = qp->dev->port;
	a.ah_attr.grh.sgid_index = r->sgid_index;
	a.ah_attr.grh.hop_limit = r->hop_limit ? r->hop_limit : 64;
	a.ah_attr.grh.traffic_class = r->traffic_class;
	a.ah_attr.grh.flow_label = r->flow_label;
	memcpy(a.ah_attr.grh.dgid.raw, r->dgid, 16);
	mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	return verbs_modify(qp, &a, mask);
}

int muxbe_qp_rts(struct muxbe_qp *qp, const struct muxbe_qp_rts *r)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS,
				 .sq_psn = r->sq_psn & 0xffffff };
	int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;

	if (qp->type == MUXBE_QPT_GSI)
		return 0;
	if (qp->type == MUXBE_QPT_RC) {
		a.timeout = r->timeout ? r->timeout : 14;
		a.retry_cnt = r->retry_cnt ? r->retry_cnt : 7;
		a.rnr_retry = r->rnr_retry ? r->rnr_retry : 7;
		a.max_rd_atomic = r->max_rd_atomic ? r->max_rd_atomic : 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	} else if (r->qkey) {
		a.qkey = r->qkey;
		mask |= IBV_QP_QKEY;
	}
	return verbs_modify(qp, &a, mask);
}

int muxbe_qp_state(struct muxbe_qp *qp, enum ibv_qp_state *state)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;

	if (qp->type == MUXBE_QPT_GSI) {
		*state = IBV_QPS_RTS;
		return 0;
	}
	if (ibv_query_qp(qp->qp, &a, IBV_QP_STATE, &ia))
		return -EIO;
	*state = a.qp_state;
	return 0;
}

static uint64_t verbs_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int muxbe_qp_destroy(struct muxbe_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	uint64_t deadline = verbs_mono_ms() + QP_DRAIN_MS;

	if (qp->type == MUXBE_QPT_GSI) {
		/* Posted MAD buffers come back flushed. */
		muxbe_flush_recv(qp->dev->mux);
		while (atomic_load(&qp->outstanding) > 0 &&
		       verbs_mono_ms() < deadline)
			muxbe_dev_process(qp->dev);
		free(qp);
		return 0;
	}
	ibv_modify_qp(qp->qp, &a, IBV_QP_STATE);
	while (atomic_load(&qp->outstanding) > 0 &&
	       verbs_mono_ms() < deadline) {
		muxbe_cq_poll(qp->scq);
		if (qp->rcq != qp->scq)
			muxbe_cq_poll(qp->rcq);
		verbs_deliver_pending(qp->dev);
	}
	if (ibv_destroy_qp(qp->qp))
		return -EBUSY;
	free(qp);
	return 0;
}

static uint32_t verbs_sge_total(const struct ibv_sge *sg, int nsge)
{
	uint32_t t = 0;
	int i;

	for (i = 0; i < nsge; i++)
		t += sg[i].length;
	return t;
}

static void verbs_gsi_post_send(struct muxbe_qp *qp, struct wr_rec *r,
				const struct ibv_sge *sg, int nsge,
				const struct muxbe_ud_dest *d)
{
	struct muxbe_dev *dev = qp->dev;
	struct muxbe_addr addr = { .port = dev->mux_port,
				   .grh = 1,
				   .hop_limit = 64,
				   .remote_qpn = 1,
				   .qkey = GSI_QKEY };
	uint8_t mad[MUXBE_MAD_SIZE];
	uint32_t off = 0;
	int i;

	if (d == NULL || verbs_sge_total(sg, nsge) > sizeof(mad) ||
	    muxbe_dev_gid(dev, d->sgid_index, addr.local_gid) < 0) {
		verbs_complete_later(dev, r, IBV_WC_GENERAL_ERR,
				     MUXBE_VENDOR_ERR_MAD_SEND);
		return;
	}
	for (i = 0; i < nsge; i++) {
		memcpy(mad + off, (void *)(uintptr_t)sg[i].addr, sg[i].length);
		off += sg[i].length;
	}
	memcpy(addr.remote_gid, d->dgid, 16);
	if (muxbe_send_mad(dev->mux, &addr, mad, off, r) < 0)
		verbs_complete_later(dev, r, IBV_WC_GENERAL_ERR,
				     MUXBE_VENDOR_ERR_MAD_SEND);
}

int muxbe_qp_post_send(struct muxbe_qp *qp, const struct ibv_sge *sg, int nsge,
		       const struct muxbe_ud_dest *d, void *ctx)
{
	struct ibv_send_wr wr = { .sg_list = (struct ibv_sge *)sg,
				  .num_sge = nsge,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	struct muxbe_dev *dev;
	struct wr_rec *r;
	struct ibv_ah *ah;

	if (qp == NULL)
		return -EINVAL;
	dev = qp->dev;
	r = verbs_new_rec(ctx, qp, NULL, IBV_WC_SEND);
	if (r == NULL)
		return verbs_complete_nomem(dev, ctx, IBV_WC_SEND);
	if (nsge <= 0) {
		verbs_complete_later(dev, r, IBV_WC_GENERAL_ERR,
				     MUXBE_VENDOR_ERR_NO_SGE);
		return 0;
	}
	if ((uint32_t)nsge > qp->max_send_sge) {
		verbs_complete_later(dev, r, IBV_WC_GENERAL_ERR,
				     MUXBE_VENDOR_ERR_TOO_MANY_SGES);
		return 0;
	}
	if (qp->type == MUXBE_QPT_GSI) {
		verbs_gsi_post_send(qp, r, sg, nsge, d);
		return 0;
	}
	wr.wr_id = (uintptr_t)r;
	if (qp->type == MUXBE_QPT_UD) {
		if (d == NULL) {
			verbs_complete_later(dev, r, IBV_WC_GENERAL_ERR,
					     MUXBE_VENDOR_ERR_FAIL_BACKEND);
			return 0;
		}
		pthread_mutex_lock(&dev->lock);
		ah = ah_cache_get(&dev->ahc, qp->pd, dev->port, d->sgid_index,
				  d->dgid, 64);
		pthread_mutex_unlock(&dev->lock);
		if (ah == NULL) {
			verbs_complete_later(
				dev, r, IBV_WC_GENERAL_ERR,
				errno == ENOSPC || errno == ENOMEM
					? MUXBE_VENDOR_ERR_NOMEM
					: MUXBE_VENDOR_ERR_FAIL_BACKEND);
			return 0;
		}
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = d->dest_qpn;
		wr.wr.ud.remote_qkey = d->qkey;
	}
	if (ibv_post_send(qp->qp, &wr, &bad))
		verbs_complete_later(dev, r, IBV_WC_GENERAL_ERR,
				     MUXBE_VENDOR_ERR_FAIL_BACKEND);
	return 0;
}

int muxbe_qp_post_recv(struct muxbe_qp *qp, const struct ibv_sge *sg, int nsge,
		       void *ctx)
{
	struct ibv_recv_wr wr = { .sg_list = (struct ibv_sge *)sg,
				  .num_sge = nsge },
			   *bad;
	struct muxbe_dev *dev;
	struct wr_rec *r;

	if (qp == NULL)
		return -EINVAL;
	dev = qp->dev;
	r = verbs_new_rec(ctx, qp, NULL, IBV_WC_RECV);
	if (r == NULL)
		return verbs_complete_nomem(dev, ctx, IBV_WC_RECV);
	if (qp->type == MUXBE_QPT_GSI) {
		/* One buffer big enough for a GRH and a MAD, as the seeds
		 * required of a guest's QP1 receive. */
		if (nsge != 1)
			verbs_complete_later(dev, r, IBV_WC_GENERAL_ERR,
					     MUXBE_VENDOR_ERR_INV_NUM_SGE);
		else if (sg[0].length < MUXBE_RECV_BUF_MIN)
			verbs_complete_later(dev, r, IBV_WC_GENERAL_ERR,
					     MUXBE_VENDOR_ERR_INV_MAD_BUFF);
		else if (muxbe_post_recv(dev->mux,
					 (void *)(uintptr_t)sg[0].addr,
					 sg[0].length, r) < 0)
			verbs_complete_later(dev, r, IBV_WC_GENERAL_ERR,
					     MUXBE_VENDOR_ERR_NOMEM);
		return 0;
	}
	if ((uint32_t)nsge > qp->max_recv_sge) {
		verbs_complete_later(dev, r, IBV_WC_GENERAL_ERR,
				     MUXBE_VENDOR_ERR_TOO_MANY_SGES);
		return 0;
	}
	wr.wr_id = (uintptr_t)r;
	if (ibv_post_recv(qp->qp, &wr, &bad))
		verbs_complete_later(dev, r, IBV_WC_GENERAL_ERR,
				     MUXBE_VENDOR_ERR_FAIL_BACKEND);
	return 0;
}
