// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The kernel's neighbour table, as a RoCE send sees it.  ib_umad resolves
 * the destination's MAC for every MAD written (user_mad.c ->
 * rdma_create_user_ah() -> rdma_addr_find_l2_eth_by_grh()), in the
 * writing thread, and waits up to a second for an address that does not
 * answer ARP or neighbour discovery.  The daemon asks first, over
 * rtnetlink, whether that wait would happen: the route to the destination
 * (as addr_resolve() takes it: from the source GID's netdev) and the
 * neighbour entry of its next hop.  When the entry is not valid it asks the
 * kernel to resolve it (RTM_NEWNEIGH with NTF_USE, what a packet to the
 * address would do) and hears of the answer on the neighbour multicast
 * group, so that no thread waits for a destination that may never answer:
 * the kernel CM resolves once per connection, asynchronously, too
 * (rdma_resolve_addr()).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <libmnl/libmnl.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include "mux/mux.h"
#include "common/hash.h"
#include "common/log.h"

/* How long a destination found resolved is taken as resolved without
 * asking again: the kernel keeps a valid entry's MAC (STALE included) and
 * re-probes it itself, so a send within this time does not wait. */
#define NEIGH_NL_READY_MS 1000
/* The states whose MAC a send takes without waiting (the kernel's
 * NUD_VALID, which it does not export). */
#define NEIGH_NL_VALID                                                       \
	(NUD_PERMANENT | NUD_NOARP | NUD_REACHABLE | NUD_PROBE | NUD_STALE | \
	 NUD_DELAY)
/* Answers of earlier queries one query reads past before it gives up. */
#define NEIGH_NL_STALE_MAX 8

struct neigh_nl_addr {
	int family; /* AF_INET or AF_INET6 */
	unsigned len;
	uint8_t raw[16];
};

/* A GID as the IP address a RoCE v2 (or IP-based v1) GID is. */
static void neigh_nl_addr_of(const uint8_t gid[16], struct neigh_nl_addr *a)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0,    0,
					      0, 0, 0, 0, 0xff, 0xff };

	if (memcmp(gid, v4mapped, sizeof(v4mapped)) == 0) {
		a->family = AF_INET;
		a->len = 4;
		memcpy(a->raw, gid + 12, 4);
	} else {
		a->family = AF_INET6;
		a->len = 16;
		memcpy(a->raw, gid, 16);
	}
}

/* Multicast needs no neighbour: its MAC is computed. */
static int neigh_nl_is_multicast(const struct neigh_nl_addr *a)
{
	return a->family == AF_INET ? (a->raw[0] & 0xf0) == 0xe0
				    : a->raw[0] == 0xff;
}

int neigh_nl_open(struct neigh_nl *nl)
{
	int rc;

	memset(nl, 0, sizeof(*nl));
	pthread_mutex_init(&nl->lock, NULL);
	nl->q = mnl_socket_open(NETLINK_ROUTE);
	if (nl->q == NULL || mnl_socket_bind(nl->q, 0, MNL_SOCKET_AUTOPID) < 0)
		goto fail;
	nl->q_portid = mnl_socket_get_portid(nl->q);
	nl->ev = mnl_socket_open2(NETLINK_ROUTE, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (nl->ev == NULL ||
	    mnl_socket_bind(nl->ev, RTMGRP_NEIGH, MNL_SOCKET_AUTOPID) < 0)
		goto fail;
	return 0;
fail:
	rc = errno ? -errno : -EIO;
	neigh_nl_close(nl);
	return rc;
}

void neigh_nl_close(struct neigh_nl *nl)
{
	if (nl->q)
		mnl_socket_close(nl->q);
	if (nl->ev)
		mnl_socket_close(nl->ev);
	nl->q = nl->ev = NULL;
	pthread_mutex_destroy(&nl->lock);
}

int neigh_nl_event_fd(struct neigh_nl *nl)
{
	return nl->ev ? mnl_socket_get_fd(nl->ev) : -1;
}

/* Under nl->lock: send the request, read its answer into cb.  0, or the
 * kernel's -errno. */
static int neigh_nl_ask(struct neigh_nl *nl, struct nlmsghdr *nlh, mnl_cb_t cb,
			void *data)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	const struct nlmsghdr *ans = (const struct nlmsghdr *)buf;
	unsigned stale;
	uint32_t seq = nlh->nlmsg_seq = ++nl->seq;
	ssize_t n;
	int rc;

	if (mnl_socket_sendto(nl->q, nlh, nlh->nlmsg_len) < 0)
		return -errno;
	/* rtnetlink answers within the send, so the read does not wait;
	 * what an earlier query left unread is passed over by its
	 * sequence number, a bounded number of times. */
	for (stale = 0;; stale++) {
		n = mnl_socket_recvfrom(nl->q, buf, sizeof(buf));
		if (n < 0)
			return -errno;
		if ((size_t)n < sizeof(*ans) || ans->nlmsg_seq == seq ||
		    stale == NEIGH_NL_STALE_MAX)
			break;
	}
	rc = mnl_cb_run(buf, (size_t)n, seq, nl->q_portid, cb, data);
	return rc == MNL_CB_ERROR ? (errno ? -errno : -EPROTO) : 0;
}

struct neigh_nl_route {
	int have;
	unsigned char type; /* RTN_* */
	uint32_t oif;
	int have_gw;
	uint8_t gw[16];
	unsigned gw_len;
};

static int neigh_nl_route_attr(const struct nlattr *attr, void *data)
{
	struct neigh_nl_route *r = data;
	unsigned len = mnl_attr_get_payload_len(attr);

	if (mnl_attr_get_type(attr) == RTA_OIF &&
	    mnl_attr_validate(attr, MNL_TYPE_U32) == 0)
		r->oif = mnl_attr_get_u32(attr);
	if (mnl_attr_get_type(attr) == RTA_GATEWAY && (len == 4 || len == 16)) {
		memcpy(r->gw, mnl_attr_get_payload(attr), len);
		r->gw_len = len;
		r->have_gw = 1;
	}
	return MNL_CB_OK;
}

static int neigh_nl_route_msg(const struct nlmsghdr *nlh, void *data)
{
	const struct rtmsg *rtm = mnl_nlmsg_get_payload(nlh);
	struct neigh_nl_route *r = data;

	if (nlh->nlmsg_type != RTM_NEWROUTE)
		return MNL_CB_OK;
	r->have = 1;
	r->type = rtm->rtm_type;
	return mnl_attr_parse(nlh, sizeof(*rtm), neigh_nl_route_attr, r);
}

/* The route a send from src (out of ifindex) to dst takes. */
static int neigh_nl_route(struct neigh_nl *nl, const struct neigh_nl_addr *dst,
			  const struct neigh_nl_addr *src, int ifindex,
			  struct neigh_nl_route *r)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct rtmsg *rtm;

	nlh->nlmsg_type = RTM_GETROUTE;
	nlh->nlmsg_flags = NLM_F_REQUEST;
	rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
	rtm->rtm_family = (unsigned char)dst->family;
	rtm->rtm_dst_len = (unsigned char)(dst->len * 8);
	mnl_attr_put(nlh, RTA_DST, dst->len, dst->raw);
	if (src->family == dst->family) {
		rtm->rtm_src_len = (unsigned char)(src->len * 8);
		mnl_attr_put(nlh, RTA_SRC, src->len, src->raw);
	}
	if (ifindex > 0)
		mnl_attr_put_u32(nlh, RTA_OIF, (uint32_t)ifindex);
	memset(r, 0, sizeof(*r));
	return neigh_nl_ask(nl, nlh, neigh_nl_route_msg, r);
}

static int neigh_nl_state_msg(const struct nlmsghdr *nlh, void *data)
{
	const struct ndmsg *ndm = mnl_nlmsg_get_payload(nlh);

	if (nlh->nlmsg_type == RTM_NEWNEIGH)
		*(int *)data = ndm->ndm_state;
	return MNL_CB_OK;
}

/* A request of type about hop's neighbour entry on ifindex, in buf. */
static struct nlmsghdr *neigh_nl_entry_msg(char *buf, uint16_t type,
					   uint16_t flags, uint8_t ndm_flags,
					   const struct neigh_nl_addr *hop,
					   uint32_t ifindex)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct ndmsg *ndm;

	nlh->nlmsg_type = type;
	nlh->nlmsg_flags = flags;
	ndm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ndm));
	ndm->ndm_family = (unsigned char)hop->family;
	ndm->ndm_ifindex = (int)ifindex;
	ndm->ndm_flags = ndm_flags;
	mnl_attr_put(nlh, NDA_DST, hop->len, hop->raw);
	return nlh;
}

/* The state (NUD_*) of the neighbour entry of hop on ifindex; -ENOENT
 * when there is none. */
static int neigh_nl_state(struct neigh_nl *nl, const struct neigh_nl_addr *hop,
			  uint32_t ifindex)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	int state = -ENOENT, rc;

	rc = neigh_nl_ask(nl,
			  neigh_nl_entry_msg(buf, RTM_GETNEIGH, NLM_F_REQUEST,
					     0, hop, ifindex),
			  neigh_nl_state_msg, &state);
	return rc ? rc : state;
}

static int neigh_nl_ack(const struct nlmsghdr *nlh, void *data)
{
	(void)nlh;
	(void)data;
	return MNL_CB_OK;
}

/* Ask the kernel to resolve hop, as a packet to it would (neigh_add()
 * with NTF_USE: neigh_event_send()).  Needs CAP_NET_ADMIN; without it
 * the send itself resolves (and waits), said once. */
static void neigh_nl_kick(struct neigh_nl *nl, const struct neigh_nl_addr *hop,
			  uint32_t ifindex)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	int rc;

	rc = neigh_nl_ask(nl,
			  neigh_nl_entry_msg(buf, RTM_NEWNEIGH,
					     NLM_F_REQUEST | NLM_F_CREATE |
						     NLM_F_ACK,
					     NTF_USE, hop, ifindex),
			  neigh_nl_ack, NULL);
	if (rc == -EPERM && !nl->kick_denied) {
		nl->kick_denied = 1;
		log_fwarn(
			NULL, EPERM,
			"neighbour resolution cannot be started without CAP_NET_ADMIN: a send to an address not yet resolved waits in its sender thread for ARP (rdmacm-muxd(8), REAL PORTS)");
	}
}

static struct neigh_nl_cached *neigh_nl_slot(struct neigh_nl *nl,
					     const uint8_t dgid[16],
					     int ifindex)
{
	return &nl->cache[hash_gid(dgid, (uint64_t)(unsigned)ifindex) %
			  NEIGH_NL_CACHE];
}

/* Under nl->lock. */
static int neigh_nl_ask_wait(struct neigh_nl *nl, const struct neigh_nl_addr *d,
			     const struct neigh_nl_addr *s, int ifindex)
{
	struct neigh_nl_route r;
	struct neigh_nl_addr hop;
	int state;

	/* No route, an error: the kernel's send fails at once as well. */
	if (neigh_nl_route(nl, d, s, ifindex, &r) < 0 || !r.have)
		return 0;
	if (r.type != RTN_UNICAST)
		return 0; /* local (loopback), or refused at once */
	hop = *d;
	if (r.have_gw) {
		hop.len = r.gw_len;
		hop.family = r.gw_len == 4 ? AF_INET : AF_INET6;
		memcpy(hop.raw, r.gw, r.gw_len);
	}
	state = neigh_nl_state(nl, &hop, r.oif);
	if (state >= 0 && (state & NEIGH_NL_VALID))
		return 0;
	if (state < 0 && state != -ENOENT)
		return 0; /* cannot tell: as before, the send resolves */
	neigh_nl_kick(nl, &hop, r.oif);
	return nl->kick_denied ? 0 : 1;
}

int neigh_nl_wait(struct neigh_nl *nl, const uint8_t dgid[16],
		  const uint8_t sgid[16], int ifindex, uint64_t now_ms)
{
	struct neigh_nl_addr d, s;
	struct neigh_nl_cached *c;
	int wait;

	neigh_nl_addr_of(dgid, &d);
	neigh_nl_addr_of(sgid, &s);
	if (nl->q == NULL || neigh_nl_is_multicast(&d))
		return 0;
	pthread_mutex_lock(&nl->lock);
	c = neigh_nl_slot(nl, dgid, ifindex);
	if (c->until_ms > now_ms && c->ifindex == ifindex &&
	    memcmp(c->dgid, dgid, 16) == 0) {
		pthread_mutex_unlock(&nl->lock);
		return 0;
	}
	wait = neigh_nl_ask_wait(nl, &d, &s, ifindex);
	if (!wait) {
		memcpy(c->dgid, dgid, 16);
		c->ifindex = ifindex;
		c->until_ms = now_ms + NEIGH_NL_READY_MS;
	}
	pthread_mutex_unlock(&nl->lock);
	return wait;
}

struct neigh_nl_event {
	void (*ready)(void *arg, const uint8_t *gid);
	void *arg;
};

static int neigh_nl_event_attr(const struct nlattr *attr, void *data)
{
	const struct nlattr **dst = data;

	if (mnl_attr_get_type(attr) == NDA_DST)
		*dst = attr;
	return MNL_CB_OK;
}

static int neigh_nl_event_msg(const struct nlmsghdr *nlh, void *data)
{
	const struct ndmsg *ndm = mnl_nlmsg_get_payload(nlh);
	const struct neigh_nl_event *e = data;
	const struct nlattr *dst = NULL;
	uint8_t gid[16] = { [10] = 0xff, [11] = 0xff };
	unsigned len;

	if (nlh->nlmsg_type != RTM_NEWNEIGH ||
	    nlh->nlmsg_len < mnl_nlmsg_size(sizeof(*ndm)) ||
	    !(ndm->ndm_state & NEIGH_NL_VALID))
		return MNL_CB_OK;
	mnl_attr_parse(nlh, sizeof(*ndm), neigh_nl_event_attr, &dst);
	if (dst == NULL)
		return MNL_CB_OK;
	len = mnl_attr_get_payload_len(dst);
	if (len == 4)
		memcpy(gid + 12, mnl_attr_get_payload(dst), 4);
	else if (len == 16)
		memcpy(gid, mnl_attr_get_payload(dst), 16);
	else
		return MNL_CB_OK;
	e->ready(e->arg, gid);
	return MNL_CB_OK;
}

void neigh_nl_read_events(struct neigh_nl *nl,
			  void (*ready)(void *arg, const uint8_t *gid),
			  void *arg)
{
	struct neigh_nl_event e = { ready, arg };
	char buf[MNL_SOCKET_BUFFER_SIZE];
	ssize_t n;

	if (nl->ev == NULL)
		return;
	for (;;) {
		n = mnl_socket_recvfrom(nl->ev, buf, sizeof(buf));
		if (n < 0) {
			/* Events were lost: every destination may be
			 * resolved now. */
			if (errno == ENOBUFS)
				ready(arg, NULL);
			if (errno == EINTR || errno == ENOBUFS)
				continue;
			return; /* EAGAIN: all read */
		}
		mnl_cb_run(buf, (size_t)n, 0, 0, neigh_nl_event_msg, &e);
	}
}
