// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "backend/vm/vm_data.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/muxbe_verbs.h"

struct vm_data {
	struct muxbe_dev *dev;
	struct ibv_pd *pd;
	struct muxbe_cq *cq;
	struct muxbe_qp *qp;
	struct ibv_mr *mr;
	uint8_t *mem; /* count receive slots, then send slots */
	int count, size;
	int sgid_index;
	uint32_t psn;        /* ours: what our receive queue expects */
	uint32_t remote_psn; /* theirs: where our send queue starts */
	int received, sent, errors;
	char first[128];
	char name[32];
};

static void vm_data_comp(void *user, const struct muxbe_wc *wc)
{
	struct vm_data *d = user;
	int slot = (int)(intptr_t)wc->ctx;

	if (wc->status != IBV_WC_SUCCESS) {
		/* Flushed receives at teardown are expected, not errors. */
		if (wc->status != IBV_WC_WR_FLUSH_ERR) {
			fprintf(stderr,
				"%s: completion error %s (vendor 0x%x)\n",
				d->name, ibv_wc_status_str(wc->status),
				wc->vendor_err);
			d->errors++;
		}
		return;
	}
	if (wc->opcode == IBV_WC_RECV) {
		if (d->received++ == 0) {
			size_t n = wc->byte_len < sizeof(d->first) - 1
					   ? wc->byte_len
					   : sizeof(d->first) - 1;

			size_t i;

			memcpy(d->first,
			       d->mem + (size_t)slot * (size_t)d->size, n);
			d->first[n] = '\0';
			/* Peers such as cmatose send uninitialised bytes. */
			for (i = 0; i < n && d->first[i]; i++)
				if (d->first[i] < 0x20 || d->first[i] > 0x7e)
					d->first[i] = '.';
		}
	} else if (wc->opcode == IBV_WC_SEND) {
		d->sent++;
	}
}

int vm_data_open(struct vm_data **out, const char *devname,
		 const struct gid *local, int count, int size, const char *name)
{
	struct muxbe_dev_options o = { .dev_name = devname,
				       .comp = vm_data_comp };
	struct muxbe_qp_caps caps;
	struct vm_data *d = calloc(1, sizeof(*d));
	struct ibv_sge sg;
	int i, rc;

	*out = NULL;
	if (d == NULL)
		return -ENOMEM;
	d->count = count;
	d->size = size;
	snprintf(d->name, sizeof(d->name), "%s", name);
	o.user = d;
	srand((unsigned)time(NULL) ^ (unsigned)(uintptr_t)d);
	d->psn = (uint32_t)rand() & 0xffffff;
	rc = muxbe_dev_open(&o, &d->dev);
	if (rc < 0)
		goto fail;
	d->sgid_index = muxbe_dev_gid_index(d->dev, local->raw);
	if (d->sgid_index < 0) {
		fprintf(stderr, "%s: GID is not in %s's GID table\n", name,
			devname);
		rc = d->sgid_index;
		goto fail;
	}
	caps = (struct muxbe_qp_caps){ (uint32_t)count, (uint32_t)count, 1, 1 };
	d->mem = calloc((size_t)count * 2, (size_t)size);
	if (d->mem == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	if ((rc = muxbe_pd_create(d->dev, &d->pd)) < 0 ||
	    (rc = muxbe_cq_create(d->dev, count * 2 + 4, &d->cq)) < 0 ||
	    (rc = muxbe_mr_create(d->pd, d->mem,
				  (size_t)count * 2 * (size_t)size,
				  IBV_ACCESS_LOCAL_WRITE, &d->mr)) < 0 ||
	    (rc = muxbe_qp_create(d->dev, d->pd, MUXBE_QPT_RC, d->cq, d->cq,
				  NULL, &caps, &d->qp)) < 0 ||
	    (rc = muxbe_qp_init(d->qp, 0)) < 0)
		goto fail;
	/* Receives can be posted in INIT: they are there before the peer
	 * can send anything. */
	for (i = 0; i < count; i++) {
		sg.addr = (uintptr_t)(d->mem + (size_t)i * (size_t)size);
		sg.length = (uint32_t)size;
		sg.lkey = d->mr->lkey;
		muxbe_qp_post_recv(d->qp, &sg, 1, (void *)(intptr_t)i);
	}
	*out = d;
	return 0;
fail:
	fprintf(stderr, "%s: data path on %s: %s\n", name, devname,
		strerror(-rc));
	vm_data_close(d);
	return rc;
}

void vm_data_close(struct vm_data *d)
{
	if (d == NULL)
		return;
	if (d->qp)
		muxbe_qp_destroy(d->qp);
	if (d->mr)
		muxbe_mr_destroy(d->mr);
	if (d->cq)
		muxbe_cq_destroy(d->cq);
	if (d->pd)
		muxbe_pd_destroy(d->dev, d->pd);
	muxbe_dev_close(d->dev);
	free(d->mem);
	free(d);
}

uint32_t vm_data_qpn(struct vm_data *d)
{
	return muxbe_qp_num(d->qp);
}
uint32_t vm_data_psn(struct vm_data *d)
{
	return d->psn;
}
int vm_data_fd(struct vm_data *d)
{
	return muxbe_dev_fd(d->dev);
}
void vm_data_process(struct vm_data *d)
{
	muxbe_dev_process(d->dev);
}
void vm_data_settle(struct vm_data *d, int expected, int timeout_ms)
{
	struct pollfd pfd = { .fd = muxbe_dev_fd(d->dev), .events = POLLIN };
	struct timespec start, now;
	int left = timeout_ms;

	clock_gettime(CLOCK_MONOTONIC, &start);
	muxbe_dev_process(d->dev);
	while ((d->sent < expected || d->received < expected) && left > 0) {
		poll(&pfd, 1, left);
		muxbe_dev_process(d->dev);
		clock_gettime(CLOCK_MONOTONIC, &now);
		left = timeout_ms -
		       (int)((now.tv_sec - start.tv_sec) * 1000 +
			     (now.tv_nsec - start.tv_nsec) / 1000000);
	}
}

int vm_data_received(struct vm_data *d)
{
	return d->received;
}
int vm_data_sent(struct vm_data *d)
{
	return d->sent;
}
int vm_data_errors(struct vm_data *d)
{
	return d->errors;
}
const char *vm_data_first(struct vm_data *d)
{
	return d->first;
}

int vm_data_rtr(struct vm_data *d, uint32_t remote_qpn, uint32_t remote_psn,
		const struct gid *remote)
{
	/* The Starting PSN a side puts in its REQ or REP is the one its own
	 * receive queue expects (Linux ib_cm sets rq_psn from its own
	 * message), so the peer's is where our send queue starts. */
	struct muxbe_qp_rtr r = { .sgid_index = (uint8_t)d->sgid_index,
				  .dest_qpn = remote_qpn,
				  .rq_psn = d->psn };

	d->remote_psn = remote_psn;
	memcpy(r.dgid, remote->raw, 16);
	return muxbe_qp_rtr(d->qp, &r);
}

int vm_data_rts(struct vm_data *d)
{
	struct muxbe_qp_rts r = { .sq_psn = d->remote_psn };

	return muxbe_qp_rts(d->qp, &r);
}

int vm_data_send_all(struct vm_data *d)
{
	struct ibv_sge sg;
	uint8_t *msg;
	int i;

	for (i = 0; i < d->count; i++) {
		msg = d->mem + (size_t)(d->count + i) * (size_t)d->size;
		snprintf((char *)msg, (size_t)d->size, "%s message %d", d->name,
			 i);
		sg.addr = (uintptr_t)msg;
		sg.length = (uint32_t)d->size;
		sg.lkey = d->mr->lkey;
		muxbe_qp_post_send(d->qp, &sg, 1, NULL,
				   (void *)(intptr_t)(d->count + i));
	}
	return 0;
}
