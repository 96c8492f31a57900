// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "tests/lib/own_qp.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* One device context, PD and CQ for the process's QPs, opened on first
 * use and kept for the process's life (tests and lab tools only). */
static struct {
	pthread_mutex_t lock;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	uint32_t first; /* own_qp()'s */
	pid_t pid;      /* whose they are: a forked child makes its own */
} own_qp_dev = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int own_qp_real(const char *port_spec, char *dev, int *port_num)
{
	return port_spec && strncmp(port_spec, "sim", 3) != 0 &&
	       sscanf(port_spec, "%63[^:]:%d", dev, port_num) == 2;
}

static int own_qp_open(const char *dev)
{
	struct ibv_device **list;
	int i;

	if (own_qp_dev.cq && own_qp_dev.pid == getpid())
		return 0;
	/* Inherited across fork(): the parent's, not to be used here. */
	own_qp_dev.ctx = NULL;
	own_qp_dev.pd = NULL;
	own_qp_dev.cq = NULL;
	own_qp_dev.first = 0;
	own_qp_dev.pid = getpid();
	list = ibv_get_device_list(NULL);
	for (i = 0; list && list[i] && own_qp_dev.ctx == NULL; i++)
		if (strcmp(ibv_get_device_name(list[i]), dev) == 0)
			own_qp_dev.ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (own_qp_dev.ctx)
		own_qp_dev.pd = ibv_alloc_pd(own_qp_dev.ctx);
	if (own_qp_dev.pd)
		own_qp_dev.cq = ibv_create_cq(own_qp_dev.ctx, 2, NULL, NULL, 0);
	if (own_qp_dev.cq)
		return 0;
	fprintf(stderr, "own_qp: cannot open device %s\n", dev);
	return -1;
}

/* An RC QP in INIT on the port: the kernel names its port from then on. */
static uint32_t own_qp_make(const char *dev, int port_num)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_INIT,
				    .port_num = (uint8_t)port_num };
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 1,
						.max_recv_wr = 1,
						.max_send_sge = 1,
						.max_recv_sge = 1 } };
	struct ibv_qp *qp;

	if (own_qp_open(dev) < 0)
		return 0;
	ia.send_cq = ia.recv_cq = own_qp_dev.cq;
	qp = ibv_create_qp(own_qp_dev.pd, &ia);
	if (qp == NULL ||
	    ibv_modify_qp(qp, &attr,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_ACCESS_FLAGS)) {
		fprintf(stderr, "own_qp: cannot make an RC QP on %s:%d\n", dev,
			port_num);
		return 0;
	}
	return qp->qp_num;
}

uint32_t own_qp(const char *port_spec)
{
	char dev[64];
	int port_num;
	uint32_t qpn;

	if (!own_qp_real(port_spec, dev, &port_num))
		return 0x100000u | ((uint32_t)getpid() & 0xfffffu);
	pthread_mutex_lock(&own_qp_dev.lock);
	if (own_qp_dev.first == 0 || own_qp_dev.pid != getpid())
		own_qp_dev.first = own_qp_make(dev, port_num);
	qpn = own_qp_dev.first;
	pthread_mutex_unlock(&own_qp_dev.lock);
	return qpn;
}

uint32_t own_qp_new(const char *port_spec)
{
	char dev[64];
	int port_num;
	uint32_t qpn;

	if (!own_qp_real(port_spec, dev, &port_num))
		return 0;
	pthread_mutex_lock(&own_qp_dev.lock);
	qpn = own_qp_make(dev, port_num);
	pthread_mutex_unlock(&own_qp_dev.lock);
	return qpn;
}
