// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The real port: a libibumad agent for the CM class (0x07, version 2,
 * method Send) on one device port, with the port's GID table read through
 * libibverbs.  Sends go out with the GID index the daemon chose for the
 * client's source GID; MAD-layer retries are off because the guests' CMs
 * retransmit on their own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/umad.h>
#include <infiniband/verbs.h>

#include "mux.h"
#include "../common/ibdev.h"
#include "../common/log.h"

#define UMAD_RX_BUDGET 256
#define UMAD_GID_MAX 256

struct umad_agent_port {
	char dev[32];
	int port_num;
	int fd;
	int agent;
	struct event *rx_ev;
	struct ibv_context *ctx;
	pthread_mutex_t gid_lock;
	int ngids;
	struct gid gids[UMAD_GID_MAX];
	int pkeys;
	int tick;
};

static void umad_read_gids(struct umad_agent_port *up)
{
	struct ibv_port_attr pa;
	union ibv_gid g;
	int i, n;

	if (ibv_query_port(up->ctx, (uint8_t)up->port_num, &pa))
		return;
	n = pa.gid_tbl_len < UMAD_GID_MAX ? pa.gid_tbl_len : UMAD_GID_MAX;
	up->pkeys = (int)pa.pkey_tbl_len;
	pthread_mutex_lock(&up->gid_lock);
	for (i = 0; i < n; i++) {
		if (ibv_query_gid(up->ctx, (uint8_t)up->port_num, i, &g))
			memset(&g, 0, sizeof(g));
		memcpy(up->gids[i].raw, g.raw, 16);
	}
	up->ngids = n;
	pthread_mutex_unlock(&up->gid_lock);
}

static int umad_port_open(struct port *p, const struct port_spec *spec)
{
	long method_mask[16 / sizeof(long)] = { 0 };
	struct umad_agent_port *up = calloc(1, sizeof(*up));
	umad_port_t info;

	if (up == NULL)
		return -ENOMEM;
	p->priv = up;
	up->fd = -1;
	up->agent = -1;
	pthread_mutex_init(&up->gid_lock, NULL);
	snprintf(up->dev, sizeof(up->dev), "%s", spec->name);
	up->port_num = spec->port_num;
	if (umad_init() < 0) {
		log_warnx("umad port %s: umad_init failed (is ib_umad loaded?)",
			  p->name);
		return -ENODEV;
	}
	up->fd = umad_open_port(up->dev, up->port_num);
	if (up->fd < 0) {
		errno = -up->fd;
		log_warn("umad port %s: cannot open %s port %d (need ib_umad "
			 "loaded and read-write access to /dev/infiniband/umad*)",
			 p->name, up->dev, up->port_num);
		return up->fd;
	}
	/* Method Send only: bit 3 of the 128-bit method mask. */
	method_mask[0] = 1L << MAD_METHOD_SEND;
	errno = 0;
	up->agent = umad_register(up->fd, MAD_CLASS_CM, MAD_CM_CLASS_VERSION, 0,
				  method_mask);
	if (up->agent < 0) {
		/* umad_register() says -EPERM for every failure; the
		 * kernel's reason is in errno. */
		int err = errno ? errno : EPERM;

		if (err == EINVAL)
			log_warnx("umad port %s: cannot register the CM agent: "
				  "the kernel CM (ib_cm) already owns class 0x07 "
				  "method Send on %s port %d. Unload it "
				  "(modprobe -r rdma_ucm rdma_cm iw_cm ib_cm) or "
				  "blacklist ib_cm, then restart the daemon",
				  p->name, up->dev, up->port_num);
		else
			log_warnx("umad port %s: cannot register the CM agent: %s",
				  p->name, strerror(err));
		return -err;
	}
	up->ctx = ibdev_open(up->dev);
	if (up->ctx == NULL) {
		log_warnx("umad port %s: cannot open verbs device %s to read "
			  "its GID table (is ib_uverbs loaded?)", p->name, up->dev);
		return -ENODEV;
	}
	umad_read_gids(up);
	if (umad_get_port(up->dev, up->port_num, &info) == 0) {
		atomic_store(&p->state, info.state == 4 ? PORT_STATE_ACTIVE
							: PORT_STATE_DOWN);
		umad_release_port(&info);
	}
	log_info("umad port %s: agent %d on %s port %d, %d GIDs", p->name,
		 up->agent, up->dev, up->port_num, up->ngids);
	return 0;
}

static int umad_find_gid(struct umad_agent_port *up, const struct gid *gid)
{
	int i, idx = -ENOENT;

	pthread_mutex_lock(&up->gid_lock);
	for (i = 0; i < up->ngids; i++)
		if (gid_cmp(&up->gids[i], gid) == 0) {
			idx = i;
			break;
		}
	pthread_mutex_unlock(&up->gid_lock);
	return idx;
}

static int umad_gid_index(struct port *p, const struct gid *gid)
{
	struct umad_agent_port *up = p->priv;
	int idx = umad_find_gid(up, gid);

	/* The table changes when addresses come and go on the netdev. */
	if (idx < 0) {
		umad_read_gids(up);
		idx = umad_find_gid(up, gid);
	}
	return idx;
}

static void umad_rx(evutil_socket_t fd, short what, void *arg)
{
	struct port *p = arg;
	struct umad_agent_port *up = p->priv;
	uint8_t buf[sizeof(struct ib_user_mad) + PROTO_MAD_MAX];
	struct ib_user_mad *um = (struct ib_user_mad *)buf;
	struct proto_mad in;
	int len, rc, budget = UMAD_RX_BUDGET;

	(void)fd;
	(void)what;
	while (budget-- > 0) {
		len = PROTO_MAD_MAX;
		rc = umad_recv(up->fd, buf, &len, 0);
		if (rc < 0)
			return;
		if (um->status != 0 || len <= 0 || len > PROTO_MAD_MAX) {
			/* Send completions (we ask for none) and errors. */
			atomic_fetch_add(&p->rx_errors, 1);
			continue;
		}
		memset(&in, 0, sizeof(in));
		in.addr.remote_qpn = ntohl(um->addr.qpn) & 0xffffff;
		/* ib_umad leaves the Q_Key of a received MAD out; anything
		 * QP1 accepted carried the GSI Q_Key. */
		in.addr.qkey = GSI_QKEY;
		in.addr.lid = ntohs(um->addr.lid);
		in.addr.sl = um->addr.sl;
		in.addr.flags = um->addr.grh_present ? PROTO_MAD_F_GRH : 0;
		in.addr.hop_limit = um->addr.hop_limit;
		in.addr.traffic_class = um->addr.traffic_class;
		in.addr.flow_label = ntohl(um->addr.flow_label) & 0xfffff;
		in.addr.pkey_index = um->addr.pkey_index;
		memcpy(in.addr.remote_gid, um->addr.gid, 16);
		pthread_mutex_lock(&up->gid_lock);
		if (um->addr.grh_present && um->addr.gid_index < up->ngids)
			memcpy(in.addr.local_gid, up->gids[um->addr.gid_index].raw, 16);
		pthread_mutex_unlock(&up->gid_lock);
		in.mad_len = (uint16_t)len;
		memcpy(in.mad, umad_get_mad(buf), (size_t)len);
		port_input(p, &in);
	}
}

static int umad_start(struct port *p, struct event_base *base)
{
	struct umad_agent_port *up = p->priv;

	up->rx_ev = event_new(base, umad_get_fd(up->fd), EV_READ | EV_PERSIST,
			      umad_rx, p);
	return up->rx_ev ? event_add(up->rx_ev, NULL) : -ENOMEM;
}

static int umad_port_send(struct port *p, const struct proto_mad *m,
			  int gid_index)
{
	struct umad_agent_port *up = p->priv;
	uint8_t buf[sizeof(struct ib_user_mad) + PROTO_MAD_MAX];
	struct ib_user_mad *um = (struct ib_user_mad *)buf;
	int rc;

	memset(buf, 0, sizeof(buf));
	um->addr.qpn = htonl(m->addr.remote_qpn);
	um->addr.qkey = htonl(m->addr.qkey);
	um->addr.lid = htons(m->addr.lid);
	um->addr.sl = m->addr.sl;
	um->addr.grh_present = (m->addr.flags & PROTO_MAD_F_GRH) ? 1 : 0;
	um->addr.gid_index = (uint8_t)gid_index;
	um->addr.hop_limit = m->addr.hop_limit;
	um->addr.traffic_class = m->addr.traffic_class;
	um->addr.flow_label = htonl(m->addr.flow_label);
	memcpy(um->addr.gid, m->addr.remote_gid, 16);
	umad_set_pkey(buf, m->addr.pkey_index);
	memcpy(umad_get_mad(buf), m->mad, m->mad_len);
	rc = umad_send(up->fd, up->agent, buf, m->mad_len, 0, 0);
	if (rc < 0)
		log_warnx("umad port %s: umad_send: %s", p->name, strerror(-rc));
	return rc < 0 ? rc : 0;
}

static json_t *umad_gid_table(struct port *p)
{
	struct umad_agent_port *up = p->priv;
	json_t *arr = json_array();
	char buf[GID_STRLEN];
	int i;

	pthread_mutex_lock(&up->gid_lock);
	for (i = 0; i < up->ngids; i++)
		if (!gid_is_zero(&up->gids[i]))
			json_array_append_new(arr, json_pack("{s:i, s:s}", "index",
				i, "gid", gid_format(&up->gids[i], buf)));
	pthread_mutex_unlock(&up->gid_lock);
	return arr;
}

static int umad_pkey_count(struct port *p)
{
	struct umad_agent_port *up = p->priv;

	return up->pkeys > 0 ? up->pkeys : 1;
}

static void umad_poll_state(struct port *p)
{
	struct umad_agent_port *up = p->priv;
	umad_port_t info;

	/* sysfs reads: once a second is plenty. */
	if (++up->tick % 4)
		return;
	if (umad_get_port(up->dev, up->port_num, &info) == 0) {
		port_set_state(p, info.state == 4 ? PORT_STATE_ACTIVE
						  : PORT_STATE_DOWN);
		umad_release_port(&info);
	}
}

static void umad_port_close(struct port *p)
{
	struct umad_agent_port *up = p->priv;

	if (up == NULL)
		return;
	if (up->rx_ev)
		event_free(up->rx_ev);
	if (up->agent >= 0)
		umad_unregister(up->fd, up->agent);
	if (up->fd >= 0)
		umad_close_port(up->fd);
	if (up->ctx)
		ibv_close_device(up->ctx);
	pthread_mutex_destroy(&up->gid_lock);
	free(up);
	p->priv = NULL;
}

const struct port_ops port_umad_ops = {
	.kind = "umad",
	.open = umad_port_open,
	.start = umad_start,
	.send = umad_port_send,
	.gid_index = umad_gid_index,
	.gid_table = umad_gid_table,
	.pkey_count = umad_pkey_count,
	.poll_state = umad_poll_state,
	.close = umad_port_close,
};
