// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Which process owns a QP.  A REQ, REP or SIDR_REP names its sender's QP
 * (Local QPN), and a peer's cm.c matches (remote QPN, remote CA GUID)
 * against its live connections: a REQ naming another tenant's QP makes
 * the peer reject it as a stale connection and send that tenant's
 * connection a DREQ.  So the daemon sends such a MAD only for the process
 * that owns the QP.
 *
 * On a real port the kernel says who: RDMA netlink resource tracking
 * (RDMA_NLDEV_CMD_RES_QP_GET, what `rdma res show qp` prints) gives the
 * task that created the QP, a thread of the owning process.  A simulated
 * port has no QPs: there the clients' registrations say it (qp_registry.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libmnl/libmnl.h>
#include <rdma/rdma_netlink.h>

#include "mux/mux.h"

/* Answers of earlier queries one query reads past before it gives up. */
#define QP_OWNER_STALE_MAX 8

struct qp_owner_reply {
	uint32_t dev_index;
	int have_dev, have_qpn, have_pid, kernel;
	uint32_t qpn;
	pid_t pid;
};

static int qp_owner_attr(const struct nlattr *attr, void *data)
{
	struct qp_owner_reply *r = data;

	switch (mnl_attr_get_type(attr)) {
	case RDMA_NLDEV_ATTR_DEV_INDEX:
		if (mnl_attr_validate(attr, MNL_TYPE_U32) == 0) {
			r->dev_index = mnl_attr_get_u32(attr);
			r->have_dev = 1;
		}
		break;
	case RDMA_NLDEV_ATTR_RES_LQPN:
		if (mnl_attr_validate(attr, MNL_TYPE_U32) == 0) {
			r->qpn = mnl_attr_get_u32(attr);
			r->have_qpn = 1;
		}
		break;
	case RDMA_NLDEV_ATTR_RES_PID:
		if (mnl_attr_validate(attr, MNL_TYPE_U32) == 0) {
			r->pid = (pid_t)mnl_attr_get_u32(attr);
			r->have_pid = 1;
		}
		break;
	case RDMA_NLDEV_ATTR_RES_KERN_NAME: r->kernel = 1; break;
	}
	return MNL_CB_OK;
}

static int qp_owner_msg(const struct nlmsghdr *nlh, void *data)
{
	return mnl_attr_parse(nlh, 0, qp_owner_attr, data) == MNL_CB_ERROR
		       ? MNL_CB_ERROR
		       : MNL_CB_OK;
}

int qp_owner_nl_open(struct qp_owner_nl *q)
{
	q->nl = mnl_socket_open(NETLINK_RDMA);
	if (q->nl == NULL)
		return -errno;
	if (mnl_socket_bind(q->nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		int err = -errno;

		mnl_socket_close(q->nl);
		q->nl = NULL;
		return err;
	}
	q->portid = mnl_socket_get_portid(q->nl);
	q->seq = 0;
	pthread_mutex_init(&q->lock, NULL);
	return 0;
}

void qp_owner_nl_close(struct qp_owner_nl *q)
{
	if (q->nl == NULL)
		return;
	mnl_socket_close(q->nl);
	q->nl = NULL;
	pthread_mutex_destroy(&q->lock);
}

int qp_owner_nl_query(struct qp_owner_nl *q, uint32_t dev_index,
		      uint32_t port_num, uint32_t qpn, pid_t *tid)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct qp_owner_reply r = { 0 };
	struct nlmsghdr *nlh;
	unsigned stale;
	uint32_t seq;
	ssize_t n;
	int rc;

	if (q->nl == NULL)
		return -ENOTCONN;
	nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV,
					   RDMA_NLDEV_CMD_RES_QP_GET);
	/* No NLM_F_ACK: the answer or an error message is all that comes
	 * back (rdma_nl_rcv_skb() acks a success only when asked), so a
	 * query is one read, not two. */
	nlh->nlmsg_flags = NLM_F_REQUEST;
	mnl_attr_put_u32(nlh, RDMA_NLDEV_ATTR_DEV_INDEX, dev_index);
	/* The kernel wants the port (QPs are per port); a QP on another
	 * port, or in RESET (on none yet), is -EAGAIN. */
	mnl_attr_put_u32(nlh, RDMA_NLDEV_ATTR_PORT_INDEX, port_num);
	mnl_attr_put_u32(nlh, RDMA_NLDEV_ATTR_RES_LQPN, qpn);
	pthread_mutex_lock(&q->lock);
	seq = nlh->nlmsg_seq = ++q->seq;
	if (mnl_socket_sendto(q->nl, nlh, nlh->nlmsg_len) < 0) {
		rc = -errno;
		goto out;
	}
	/* The kernel answers within the send (netlink input runs in the
	 * sender's context), so the read does not wait; what an earlier
	 * query left unread (its read failed) is passed over by its
	 * sequence number, a bounded number of times. */
	for (stale = 0;; stale++) {
		n = mnl_socket_recvfrom(q->nl, buf, sizeof(buf));
		if (n < 0) {
			rc = -errno;
			goto out;
		}
		/* (nlh is buf's start: the request's header, now the
		 * answer's) */
		if ((size_t)n < sizeof(*nlh) || nlh->nlmsg_seq == seq ||
		    stale == QP_OWNER_STALE_MAX)
			break;
	}
	rc = mnl_cb_run(buf, (size_t)n, seq, q->portid, qp_owner_msg, &r);
	rc = rc == MNL_CB_ERROR ? -errno : 0;
out:
	pthread_mutex_unlock(&q->lock);
	if (rc)
		return rc; /* -ENOENT: no such QP; -EINVAL: no such device */
	if (!r.have_qpn || r.qpn != qpn ||
	    (r.have_dev && r.dev_index != dev_index))
		return -EPROTO;
	if (r.kernel || !r.have_pid)
		return -ESRCH; /* a kernel QP, or its creator has exited */
	*tid = r.pid;
	return 0;
}

int qp_owner_task_of(pid_t pid, pid_t tid)
{
	char path[64];
	struct stat st;

	if (pid <= 0 || tid <= 0)
		return 0;
	if (pid == tid)
		return 1;
	snprintf(path, sizeof(path), "/proc/%d/task/%d", (int)pid, (int)tid);
	return stat(path, &st) == 0;
}
