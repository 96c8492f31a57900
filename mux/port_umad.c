// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The real port: a libibumad agent for the CM class (0x07, version 2,
 * method Send) on one device port, with the port's GID table read through
 * libibverbs.  Sends go out with the GID index the daemon chose for the
 * client's source GID; MAD-layer retries are off because the guests' CMs
 * retransmit on their own.
 *
 * Each sender thread sends through an agent of its own, on an open of
 * its own: ib_umad holds a file's mutex across a whole write, the
 * address resolution of a RoCE send included (user_mad.c:
 * ib_umad_write(), which sleeps on the ib_addr workqueue), and across
 * every read and poll of that file.  On one file the sends would leave
 * one at a time, and receive would wait behind each of them.
 *
 * The GID table follows the netdev's addresses: it is re-read once a
 * second, and at once when a client registers a GID that is not in it.
 * The verbs context that reads it is opened for each read and closed
 * again: a device whose driver cannot disassociate user contexts (rxe on
 * Linux 6.1) cannot be removed while anyone holds one.  Where one address
 * is in the table twice (RoCE v1 and v2), the port's preferred version
 * wins (v2 unless --roce-version says 1).
 *
 * A device can go away (a driver unbind, `rdma link delete`): the umad
 * fd then reports an error.  The port is marked down, its agent is
 * released (so no thread spins on a dead fd), and it is reopened by name
 * once a second until the device is back; the clients' registrations are
 * kept, so their GIDs work again as soon as it is.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/umad.h>
#include <infiniband/verbs.h>

#include "mux/mux.h"
#include "common/ibdev.h"
#include "common/log.h"
#include "common/wire.h"

#define UMAD_RX_BUDGET 256
#define UMAD_GID_MAX 256
/* Port-thread ticks (250 ms) between GID table polls and reopen tries. */
#define UMAD_POLL_TICKS 4

/* An open of the port's umad device and the agent on it.  Lane 0's
 * takes the CM class's Sends; the others are send-only, one for each
 * sender thread (port_ops.send's lane). */
struct umad_lane {
	struct port *port;
	int fd;
	int agent;
	struct event *rx_ev;
};

#define UMAD_LANES (1 + PORT_SENDERS)

struct umad_agent_port {
	char dev[32];
	int port_num;
	int roce_version; /* preferred where a GID is there twice */
	struct umad_lane lanes[UMAD_LANES];
	struct event_base *base;
	/* Senders (any thread) hold it shared; the port thread holds it
	 * exclusively to close the device under them. */
	pthread_rwlock_t dev_lock;
	pthread_mutex_t gid_lock;
	int ngids;
	struct gid gids[UMAD_GID_MAX];
	uint8_t types[UMAD_GID_MAX]; /* enum ibv_gid_type */
	uint8_t valid[UMAD_GID_MAX];
	int ifindex[UMAD_GID_MAX]; /* the GID's netdev */
	int pkeys;
	int tick;
	int lost; /* the device went away */
	/* Read with the GID table: the device's index changes when it
	 * goes and comes back. */
	_Atomic uint32_t dev_index;
	_Atomic uint64_t node_guid;
	struct qp_owner_nl qp_nl;
	/* Whether a destination's MAC is known (neigh_nl.c), and the
	 * kernel's word when one is learnt, read on the port thread. */
	struct neigh_nl neigh;
	int have_neigh;
	struct event *neigh_ev;
	struct log_ratelimit send_rl;
	/* The low TID halves sent last, by their low bits (see
	 * port_umad_send()). */
	_Atomic uint32_t *recent_tids;
	_Atomic uint64_t dup_waits; /* sends that waited so */
	/* --ud-sender: clients' sends from UD QPs (port_ud.c), made with
	 * the device's lanes and gone with them (under dev_lock). */
	int want_ud;
	struct port_ud *ud;
};

#define UMAD_RECENT_TIDS 65536u
/* How long a send waits, at most, for ib_umad to finish sending an
 * earlier MAD of the same TID: a soft-RoCE port on a loaded host has been
 * seen more than 25 ms behind. */
#define UMAD_DUP_WAIT_US 1000000u

/* Read the GID table; returns 1 when it differs from what we had. */
static int port_umad_read_gids(struct port *p)
{
	struct umad_agent_port *up = p->priv;
	struct ibv_gid_entry ents[UMAD_GID_MAX];
	struct ibv_port_attr pa;
	struct ibv_device_attr da;
	struct gid gids[UMAD_GID_MAX];
	uint8_t types[UMAD_GID_MAX], valid[UMAD_GID_MAX];
	int ifindex[UMAD_GID_MAX];
	struct ibv_context *ctx;
	ssize_t n;
	int i, changed;

	ctx = ibdev_open(up->dev);
	if (ctx == NULL)
		return 0;
	if (ibv_query_port(ctx, (uint8_t)up->port_num, &pa)) {
		ibv_close_device(ctx);
		return 0;
	}
	n = ibv_query_gid_table(ctx, ents, UMAD_GID_MAX, 0);
	if (ibv_query_device(ctx, &da) == 0)
		atomic_store(&up->node_guid, be64toh(da.node_guid));
	if (ibv_get_device_index(ctx->device) >= 0)
		atomic_store(&up->dev_index,
			     (uint32_t)ibv_get_device_index(ctx->device));
	ibv_close_device(ctx);
	up->pkeys = (int)pa.pkey_tbl_len;
	p->roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
	memset(gids, 0, sizeof(gids));
	memset(types, 0, sizeof(types));
	memset(valid, 0, sizeof(valid));
	memset(ifindex, 0, sizeof(ifindex));
	for (i = 0; i < n; i++) {
		unsigned idx = ents[i].gid_index;

		if (ents[i].port_num != (uint32_t)up->port_num ||
		    idx >= UMAD_GID_MAX)
			continue;
		memcpy(gids[idx].raw, ents[i].gid.raw, 16);
		types[idx] = (uint8_t)ents[i].gid_type;
		valid[idx] = 1;
		ifindex[idx] = (int)ents[i].ndev_ifindex;
	}
	pthread_mutex_lock(&up->gid_lock);
	changed = memcmp(gids, up->gids, sizeof(gids)) ||
		  memcmp(types, up->types, sizeof(types)) ||
		  memcmp(valid, up->valid, sizeof(valid));
	memcpy(up->gids, gids, sizeof(gids));
	memcpy(up->types, types, sizeof(types));
	memcpy(up->valid, valid, sizeof(valid));
	memcpy(up->ifindex, ifindex, sizeof(ifindex));
	up->ngids = pa.gid_tbl_len < UMAD_GID_MAX ? pa.gid_tbl_len
						  : UMAD_GID_MAX;
	pthread_mutex_unlock(&up->gid_lock);
	return changed;
}

static void port_umad_check_gids(struct port *p)
{
	if (port_umad_read_gids(p))
		port_gids_changed(p);
}

static int port_umad_want_type(const struct umad_agent_port *up)
{
	return up->roce_version == 1 ? IBV_GID_TYPE_ROCE_V1
				     : IBV_GID_TYPE_ROCE_V2;
}

static int port_umad_gid_index(struct port *p, const struct gid *gid, int type)
{
	struct umad_agent_port *up = p->priv;
	int i, idx = -ENOENT,
	       want = type > 0 ? type - 1 : port_umad_want_type(up);

	pthread_mutex_lock(&up->gid_lock);
	for (i = 0; i < up->ngids; i++) {
		if (!up->valid[i] || gid_cmp(&up->gids[i], gid) != 0)
			continue;
		if (idx < 0 || up->types[i] == want)
			idx = i;
		if (up->types[i] == want)
			break;
	}
	pthread_mutex_unlock(&up->gid_lock);
	return idx;
}

static void port_umad_gid_refresh(struct port *p)
{
	port_umad_check_gids(p);
}

static void port_umad_rx(evutil_socket_t fd, short what, void *arg);

/* The sender threads' lanes: a send-only agent each (no class: ib_mad
 * gives it nothing to receive).  One that cannot be had sends through
 * another lane (port_umad_write()), slower but not wrong. */
static int port_umad_open_send_lanes(struct port *p, int reopen)
{
	struct umad_agent_port *up = p->priv;
	struct umad_lane *l;
	int i, err = 0, n = 0;

	for (i = 1; i < UMAD_LANES; i++) {
		l = &up->lanes[i];
		l->fd = umad_open_port(up->dev, up->port_num);
		if (l->fd < 0) {
			err = -l->fd;
			l->fd = -1;
			continue;
		}
		errno = 0;
		l->agent = umad_register(l->fd, 0, 0, 0, NULL);
		if (l->agent < 0) {
			err = errno ? errno : EPERM;
			umad_close_port(l->fd);
			l->fd = l->agent = -1;
			continue;
		}
		n++;
	}
	if (err && !reopen)
		log_fwarn(
			&(struct log_fields){ .port = p->name }, err,
			"umad port %s: a send agent of its own for each sender thread: not all; the rest share the others'",
			p->name);
	return n;
}

/* --ud-sender's QPs, one for each sender thread; without them (the
 * Q_Key refused, no verbs) the sends go through umad, as said once. */
static void port_umad_open_ud(struct port *p)
{
	struct umad_agent_port *up = p->priv;
	struct port_ud *ud;
	int rc;

	if (!up->want_ud)
		return;
	rc = port_ud_open(&ud, up->dev, up->port_num, PORT_SENDERS);
	if (rc) {
		log_fwarn(
			&(struct log_fields){ .port = p->name }, -rc,
			rc == -EPERM
				? "umad port %s: --ud-sender: the GSI Q_Key is refused (it needs CAP_NET_RAW on Linux 6.4 and later); sending through umad"
				: "umad port %s: --ud-sender: cannot make its UD QPs; sending through umad",
			p->name);
		return;
	}
	pthread_rwlock_wrlock(&up->dev_lock);
	up->ud = ud;
	pthread_rwlock_unlock(&up->dev_lock);
	log_finfo(
		&(struct log_fields){ .port = p->name },
		"umad port %s: --ud-sender: clients' MADs leave from %d UD QPs",
		p->name, PORT_SENDERS);
}

/* Open the device port, register the CM agent, read the GID table.
 * On a reopen the failures are expected (the device is still gone) and
 * the port state is announced. */
static int port_umad_attach(struct port *p, int reopen)
{
	long method_mask[16 / sizeof(long)] = { 0 };
	struct umad_agent_port *up = p->priv;
	struct umad_lane *rl = &up->lanes[0];
	umad_port_t info;
	int err, nsend;

	rl->fd = umad_open_port(up->dev, up->port_num);
	if (rl->fd < 0) {
		err = rl->fd;
		rl->fd = -1;
		if (!reopen) {
			errno = -err;
			log_warn(
				"umad port %s: cannot open %s port %d (need ib_umad loaded and read-write access to /dev/infiniband/umad*)",
				p->name, up->dev, up->port_num);
		}
		return err;
	}
	/* Method Send only: bit 3 of the 128-bit method mask. */
	method_mask[0] = 1L << MAD_METHOD_SEND;
	errno = 0;
	rl->agent = umad_register(rl->fd, MAD_CLASS_CM, MAD_CM_CLASS_VERSION, 0,
				  method_mask);
	if (rl->agent < 0) {
		/* umad_register() says -EPERM for every failure; the
		 * kernel's reason is in errno. */
		err = errno ? errno : EPERM;
		if (reopen)
			; /* said once, when the port was lost */
		else if (err == EINVAL)
			log_fwarn(
				&(struct log_fields){ .port = p->name }, 0,
				"umad port %s: cannot register the CM agent: the kernel CM (ib_cm) already owns class 0x07 method Send on %s port %d. Unload it (modprobe -r rdma_ucm rdma_cm iw_cm ib_cm) or blacklist ib_cm, then restart the daemon",
				p->name, up->dev, up->port_num);
		else
			log_fwarn(
				&(struct log_fields){ .port = p->name }, 0,
				"umad port %s: cannot register the CM agent: %s",
				p->name, strerror(err));
		return -err;
	}
	port_umad_read_gids(p);
	if (up->ngids == 0) {
		if (!reopen)
			log_fwarn(
				&(struct log_fields){ .port = p->name }, 0,
				"umad port %s: cannot read the GID table of %s (is ib_uverbs loaded, /dev/infiniband/uverbs* readable?)",
				p->name, up->dev);
		return -ENODEV;
	}
	/* An InfiniBand port routes by LID, and may without a GRH: the
	 * daemon keeps a connection's GIDs, not its LIDs, and would answer
	 * to LID 0.  Refused, not half served (rdmacm-muxd(8) BUGS). */
	if (!p->roce) {
		if (!reopen)
			log_fwarn(
				&(struct log_fields){ .port = p->name }, 0,
				"umad port %s: %s port %d is InfiniBand (LID routing), which the daemon does not serve yet: use a RoCE port",
				p->name, up->dev, up->port_num);
		return -EPROTONOSUPPORT;
	}
	if (umad_get_port(up->dev, up->port_num, &info) == 0) {
		enum port_state st = info.state == 4 ? PORT_STATE_ACTIVE
						     : PORT_STATE_DOWN;

		if (reopen)
			port_set_state(p, st);
		else
			atomic_store(&p->state, st);
		umad_release_port(&info);
	}
	nsend = port_umad_open_send_lanes(p, reopen);
	up->lost = 0;
	log_finfo(
		&(struct log_fields){ .port = p->name },
		"umad port %s: agent %d on %s port %d, %d GIDs, RoCE, %d send agents",
		p->name, rl->agent, up->dev, up->port_num, up->ngids, nsend);
	port_umad_open_ud(p);
	return 0;
}

/* Every lane is read: a send-only agent is given a response only while
 * a send of its TID is out, but what is given is taken, not left to
 * pile up in the kernel. */
static int port_umad_arm(struct port *p)
{
	struct umad_agent_port *up = p->priv;
	struct umad_lane *l;
	int i, rc;

	for (i = 0; i < UMAD_LANES; i++) {
		l = &up->lanes[i];
		if (l->fd < 0)
			continue;
		l->rx_ev = event_new(up->base, umad_get_fd(l->fd),
				     EV_READ | EV_PERSIST, port_umad_rx, l);
		if (l->rx_ev == NULL)
			return -ENOMEM;
		rc = event_add(l->rx_ev, NULL);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Release everything the device gave us; the port stays, down. */
static void port_umad_detach(struct port *p)
{
	struct umad_agent_port *up = p->priv;
	struct umad_lane *l;
	uint64_t ud_errors;
	int i;

	for (i = 0; i < UMAD_LANES; i++) {
		if (up->lanes[i].rx_ev)
			event_free(up->lanes[i].rx_ev);
		up->lanes[i].rx_ev = NULL;
	}
	pthread_rwlock_wrlock(&up->dev_lock);
	for (i = 0; i < UMAD_LANES; i++) {
		l = &up->lanes[i];
		if (l->agent >= 0 && l->fd >= 0)
			umad_unregister(l->fd, l->agent);
		if (l->fd >= 0)
			umad_close_port(l->fd);
		l->agent = l->fd = -1;
	}
	ud_errors = port_ud_send_errors(up->ud);
	if (ud_errors)
		log_fwarn(&(struct log_fields){ .port = p->name }, 0,
			  "umad port %s: %llu UD sends completed in error",
			  p->name, (unsigned long long)ud_errors);
	port_ud_close(up->ud);
	up->ud = NULL;
	pthread_rwlock_unlock(&up->dev_lock);
	pthread_mutex_lock(&up->gid_lock);
	memset(up->valid, 0, sizeof(up->valid));
	up->ngids = 0;
	pthread_mutex_unlock(&up->gid_lock);
}

/* Port thread: the device is gone.  Stop using it at once. */
static void port_umad_lost(struct port *p, const char *why)
{
	struct umad_agent_port *up = p->priv;

	if (up->lost)
		return;
	log_fwarn(
		&(struct log_fields){ .port = p->name }, 0,
		"umad port %s: device %s went away (%s); the port is down until it comes back",
		p->name, up->dev, why);
	up->lost = 1;
	port_umad_detach(p);
	port_set_state(p, PORT_STATE_DOWN);
	port_gids_changed(p);
}

static int port_umad_open(struct port *p, const struct port_spec *spec)
{
	struct umad_agent_port *up = calloc(1, sizeof(*up));
	int i, rc;

	if (up == NULL)
		return -ENOMEM;
	p->priv = up;
	for (i = 0; i < UMAD_LANES; i++) {
		up->lanes[i].port = p;
		up->lanes[i].fd = up->lanes[i].agent = -1;
	}
	up->roce_version = spec->roce_version;
	up->want_ud = spec->ud_sender;
	up->send_rl = (struct log_ratelimit)LOG_RATELIMIT_INIT(5, 1);
	pthread_mutex_init(&up->gid_lock, NULL);
	pthread_rwlock_init(&up->dev_lock, NULL);
	up->recent_tids = calloc(UMAD_RECENT_TIDS, sizeof(*up->recent_tids));
	if (up->recent_tids == NULL)
		return -ENOMEM;
	snprintf(up->dev, sizeof(up->dev), "%s", spec->name);
	up->port_num = spec->port_num;
	rc = qp_owner_nl_open(&up->qp_nl);
	if (rc) {
		log_fwarn(
			&(struct log_fields){ .port = p->name }, -rc,
			"umad port %s: cannot open RDMA netlink, which tells whose a QP is",
			p->name);
		return rc;
	}
	/* Without it every send resolves its destination itself, and a
	 * destination that does not answer holds its sender thread. */
	rc = neigh_nl_open(&up->neigh);
	if (rc)
		log_fwarn(
			&(struct log_fields){ .port = p->name }, -rc,
			"umad port %s: cannot open rtnetlink: a send to an address that does not answer ARP holds its sender thread",
			p->name);
	up->have_neigh = rc == 0;
	if (umad_init() < 0) {
		log_fwarn(&(struct log_fields){ .port = p->name }, 0,
			  "umad port %s: umad_init failed (is ib_umad loaded?)",
			  p->name);
		return -ENODEV;
	}
	return port_umad_attach(p, 0);
}

static void port_umad_rx(evutil_socket_t fd, short what, void *arg)
{
	struct umad_lane *l = arg;
	struct port *p = l->port;
	struct umad_agent_port *up = p->priv;
	uint8_t buf[sizeof(struct ib_user_mad) + PROTO_MAD_MAX];
	struct ib_user_mad *um = (struct ib_user_mad *)buf;
	struct proto_mad in;
	int len, rc, gid_type, budget = UMAD_RX_BUDGET;

	(void)fd;
	(void)what;
	while (budget-- > 0) {
		len = PROTO_MAD_MAX;
		rc = umad_recv(l->fd, buf, &len, 0);
		if (rc == -EAGAIN || rc == -EWOULDBLOCK || rc == -ETIMEDOUT)
			return;
		if (rc < 0) {
			/* A dead fd stays readable: stop, or spin. */
			port_umad_lost(p, strerror(-rc));
			return;
		}
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
		/* ib_umad gives the index of our GID the MAD came to, of
		 * the type it came as (ib_init_ah_attr_from_wc()): what a
		 * reply must leave from. */
		gid_type = 0;
		pthread_mutex_lock(&up->gid_lock);
		if (um->addr.grh_present && um->addr.gid_index < up->ngids) {
			memcpy(in.addr.local_gid,
			       up->gids[um->addr.gid_index].raw, 16);
			if (up->valid[um->addr.gid_index])
				gid_type = up->types[um->addr.gid_index] + 1;
		}
		pthread_mutex_unlock(&up->gid_lock);
		in.mad_len = (uint16_t)len;
		memcpy(in.mad, umad_get_mad(buf), (size_t)len);
		port_input(p, &in, gid_type);
	}
}

static void port_umad_neigh_ready(void *arg, const uint8_t *gid)
{
	struct port *p = arg;
	struct umad_agent_port *up = p->priv;

	/* A UD sender's address handles hold the MACs they were made
	 * with (port_ud.c). */
	port_ud_forget(up->ud);
	port_parked_ready(p, gid, mux_now_ms());
}

static void port_umad_neigh_rx(evutil_socket_t fd, short what, void *arg)
{
	struct port *p = arg;
	struct umad_agent_port *up = p->priv;

	(void)fd;
	(void)what;
	neigh_nl_read_events(&up->neigh, port_umad_neigh_ready, p);
}

static int port_umad_start(struct port *p, struct event_base *base)
{
	struct umad_agent_port *up = p->priv;

	up->base = base;
	if (up->have_neigh) {
		up->neigh_ev = event_new(base, neigh_nl_event_fd(&up->neigh),
					 EV_READ | EV_PERSIST,
					 port_umad_neigh_rx, p);
		if (up->neigh_ev == NULL || event_add(up->neigh_ev, NULL) < 0)
			return -ENOMEM;
	}
	return port_umad_arm(p);
}

/* Whether a send from gid_index to dgid would wait for ARP or neighbour
 * discovery in the writing thread (port_ops.dest_wait).  A link-local
 * destination of a RoCE v1 GID has its MAC in it (the kernel's
 * ib_resolve_unicast_gid_dmac() asks no neighbour). */
static int port_umad_dest_wait(struct port *p, const uint8_t *dgid,
			       int gid_index, uint64_t now_ms)
{
	struct umad_agent_port *up = p->priv;
	struct gid sgid;
	int ifindex, v1;

	if (!up->have_neigh || gid_index < 0 || gid_index >= UMAD_GID_MAX)
		return 0;
	pthread_mutex_lock(&up->gid_lock);
	sgid = up->gids[gid_index];
	ifindex = up->ifindex[gid_index];
	v1 = up->types[gid_index] == IBV_GID_TYPE_ROCE_V1;
	pthread_mutex_unlock(&up->gid_lock);
	if (v1 && dgid[0] == 0xfe && (dgid[1] & 0xc0) == 0x80)
		return 0;
	return neigh_nl_wait(&up->neigh, dgid, sgid.raw, ifindex, now_ms);
}

/* The lane a sender thread writes through: its own, else the next send
 * lane that could be had; lane 0 (the receive agent's file, whose mutex
 * the port thread's reads take) only when none could.  Under dev_lock. */
static const struct umad_lane *port_umad_lane(struct umad_agent_port *up,
					      unsigned lane)
{
	unsigned i, at;

	if (lane >= 1 && lane < UMAD_LANES)
		for (i = 0; i < UMAD_LANES - 1; i++) {
			at = 1 + (lane - 1 + i) % (UMAD_LANES - 1);
			if (up->lanes[at].fd >= 0)
				return &up->lanes[at];
		}
	return &up->lanes[0];
}

/* One write to ib_umad through a lane: 0 or the kernel's -errno. */
static int port_umad_write(struct umad_agent_port *up, unsigned lane, void *buf,
			   int len)
{
	const struct umad_lane *l;
	int rc;

	pthread_rwlock_rdlock(&up->dev_lock);
	l = port_umad_lane(up, lane);
	errno = 0;
	rc = l->fd < 0 || l->agent < 0
		     ? -ENETDOWN
		     : umad_send(l->fd, l->agent, buf, len, 0, 0);
	pthread_rwlock_unlock(&up->dev_lock);
	/* libibumad says EIO for every failed write; errno has the
	 * kernel's reason. */
	if (rc == -EIO && errno != 0)
		rc = -errno;
	return rc < 0 ? rc : 0;
}

/*
 * ib_umad refuses (EINVAL) a send whose TID it is still sending
 * (user_mad.c's is_duplicate(), until the send completes), and the TIDs
 * of one connection's sends repeat every 255 of them: a storm of MADs on
 * one connection can outrun the kernel's send completions that far.  A
 * refusal of a TID sent lately is that; the send waits for the earlier
 * one to finish, briefly, instead of failing.  Any other EINVAL (a MAD
 * the kernel finds wrong) fails at once.
 */
static int port_umad_write_waiting(struct umad_agent_port *up, unsigned lane,
				   void *buf, int len, uint32_t tid)
{
	_Atomic uint32_t *recent = &up->recent_tids[tid % UMAD_RECENT_TIDS];
	unsigned waited = 0, us = 50;
	int rc;

	for (;;) {
		rc = port_umad_write(up, lane, buf, len);
		if (rc != -EINVAL || atomic_load(recent) != tid ||
		    waited >= UMAD_DUP_WAIT_US)
			break;
		if (waited == 0)
			atomic_fetch_add(&up->dup_waits, 1);
		nanosleep(&(struct timespec){ .tv_nsec = (long)us * 1000 },
			  NULL);
		waited += us;
		if (us < 100000)
			us *= 2;
	}
	if (rc == 0)
		atomic_store(recent, tid);
	return rc;
}

static int port_umad_send(struct port *p, const struct proto_mad *m,
			  int gid_index, unsigned lane)
{
	struct umad_agent_port *up = p->priv;
	uint8_t buf[sizeof(struct ib_user_mad) + PROTO_MAD_MAX];
	struct ib_user_mad *um = (struct ib_user_mad *)buf;
	uint64_t suppressed;
	int rc;

	if (up->want_ud) {
		/* (-EOPNOTSUPP too without its QPs, or from lane 0) */
		pthread_rwlock_rdlock(&up->dev_lock);
		rc = port_ud_send(up->ud, lane, m, gid_index);
		pthread_rwlock_unlock(&up->dev_lock);
		if (rc != -EOPNOTSUPP)
			goto out;
	}
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
	rc = port_umad_write_waiting(up, lane, buf, m->mad_len,
				     (uint32_t)wire_get64(m->mad +
							  MAD_OFF_TID));
out:
	/* Any sender may get here, so the warning is rate-limited. */
	if (rc < 0 && log_ratelimit_allow(&up->send_rl, &suppressed))
		log_fwarn(
			&(struct log_fields){ .port = p->name }, 0,
			"umad port %s: umad_send: %s (%llu similar suppressed)",
			p->name, strerror(-rc), (unsigned long long)suppressed);
	return rc < 0 ? rc : 0;
}

static json_t *port_umad_gid_table(struct port *p)
{
	static const char *const type_names[] = { "IB", "RoCE v1", "RoCE v2" };
	struct umad_agent_port *up = p->priv;
	json_t *arr = json_array();
	char buf[GID_STRLEN];
	int i;

	pthread_mutex_lock(&up->gid_lock);
	for (i = 0; i < up->ngids; i++)
		if (up->valid[i] && !gid_is_zero(&up->gids[i]))
			json_array_append_new(
				arr,
				json_pack("{s:i, s:s, s:s}", "index", i, "gid",
					  gid_format(&up->gids[i], buf), "type",
					  up->types[i] < 3
						  ? type_names[up->types[i]]
						  : "?"));
	pthread_mutex_unlock(&up->gid_lock);
	return arr;
}

static int port_umad_pkey_count(struct port *p)
{
	struct umad_agent_port *up = p->priv;

	return up->pkeys > 0 ? up->pkeys : 1;
}

static void port_umad_poll_state(struct port *p)
{
	struct umad_agent_port *up = p->priv;
	umad_port_t info;

	/* sysfs reads and reopen attempts: once a second is plenty. */
	if (++up->tick % UMAD_POLL_TICKS)
		return;
	if (up->lost) {
		if (port_umad_attach(p, 1) == 0 && port_umad_arm(p) == 0) {
			log_finfo(&(struct log_fields){ .port = p->name },
				  "umad port %s: device %s is back", p->name,
				  up->dev);
			port_gids_changed(p);
		} else {
			port_umad_detach(p);
			up->lost = 1;
		}
		return;
	}
	if (umad_get_port(up->dev, up->port_num, &info) == 0) {
		port_set_state(p, info.state == 4 ? PORT_STATE_ACTIVE
						  : PORT_STATE_DOWN);
		umad_release_port(&info);
	}
	port_umad_check_gids(p);
}

static int port_umad_qp_owner(struct port *p, uint32_t qpn, pid_t *tid)
{
	struct umad_agent_port *up = p->priv;

	return qp_owner_nl_query(&up->qp_nl, atomic_load(&up->dev_index),
				 (uint32_t)up->port_num, qpn, tid);
}

static uint64_t port_umad_node_guid(struct port *p)
{
	struct umad_agent_port *up = p->priv;

	return atomic_load(&up->node_guid);
}

static void port_umad_close(struct port *p)
{
	struct umad_agent_port *up = p->priv;

	if (up == NULL)
		return;
	port_umad_detach(p);
	if (atomic_load(&up->dup_waits))
		log_finfo(
			&(struct log_fields){ .port = p->name },
			"umad port %s: %llu sends waited for ib_umad to finish an earlier send of their TID",
			p->name,
			(unsigned long long)atomic_load(&up->dup_waits));
	qp_owner_nl_close(&up->qp_nl);
	if (up->neigh_ev)
		event_free(up->neigh_ev);
	if (up->have_neigh)
		neigh_nl_close(&up->neigh);
	pthread_mutex_destroy(&up->gid_lock);
	pthread_rwlock_destroy(&up->dev_lock);
	free(up->recent_tids);
	free(up);
	p->priv = NULL;
}

const struct port_ops port_umad_ops = {
	.kind = "umad",
	.open = port_umad_open,
	.start = port_umad_start,
	.send = port_umad_send,
	.send_blocks = 1,
	.gid_index = port_umad_gid_index,
	.gid_refresh = port_umad_gid_refresh,
	.gid_table = port_umad_gid_table,
	.pkey_count = port_umad_pkey_count,
	.poll_state = port_umad_poll_state,
	.qp_owner = port_umad_qp_owner,
	.dest_wait = port_umad_dest_wait,
	.node_guid = port_umad_node_guid,
	.close = port_umad_close,
};
