// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * cm_peer: a raw CM peer on umad for the conformance run
 * (tests/conformance/README.md).  It holds the CM class agent of a port
 * whose host has no kernel CM, plays the "peer:" steps of one case file
 * against an endpoint (a host's kernel CM, or a guest behind rdmacm-muxd)
 * and writes what came back, normalised so that two endpoints' records
 * compare line by line: comm IDs, TIDs, QPNs and GUIDs become names in
 * order of first appearance, times become multiples of the case's unit.
 *
 *   cm_peer --dev DEV --port N --src-ip IP --ep-ip IP --host-ip IP
 *           --case FILE --ids N [--go FILE] [--sync-prefix P] [--verbose]
 *
 * --ep-ip is the endpoint (where REQs go), --host-ip the address of the
 * endpoint's host that no endpoint listens on ("dst=host").  --ids seeds
 * the comm IDs and QPNs of this run, so runs never collide.  --go: wait
 * (up to 120 s) until FILE exists before the first step.
 *
 * Steps (one per "peer:" line; c=N picks connection N, default 0):
 *   send ATTR [k=v...]   build and send a CM message (see peer_send())
 *   resend ATTR [c=N]    the last ATTR sent on the connection, byte for byte
 *   await ATTR [MS]      record arrivals until ATTR comes (default 10 s)
 *   wait MS              record arrivals for MS
 *   sync NAME            have the endpoint's host act (--sync-prefix P:
 *                        create P-NAME, wait for P-NAME-done)
 * Record lines: "S: recv ATTR fields... [dt=K]" (K = round(ms / unit)
 * since the last ATTR received) and "S: no ATTR" for an await that timed
 * out.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/umad.h>

#include "common/cm_mad.h"
#include "common/gid.h"
#include "common/wire.h"

#define MAX_CONNS 4
#define MAX_NAMES 32
#define LINE_MAX_LEN 512
#define CPI_TIMEOUT_MS 2000

/* One connection of the case, as this side sees it. */
struct peer_conn {
	uint32_t our_id, their_id, our_qpn, their_qpn;
	uint64_t req_tid;   /* the REQ's, whoever sent it */
	uint64_t dreq_tid;  /* the last DREQ received */
	uint64_t other_tid; /* the last other message received */
	uint16_t other_attr;
	struct gid dst;
	uint8_t last[CM_IDX_MAX][MAD_SIZE];
	int have_last[CM_IDX_MAX];
};

/* Values seen from the endpoint, named in order of first appearance. */
struct peer_names {
	uint64_t v[MAX_NAMES];
	int n;
};

struct peer {
	int fd, agent, gid_index;
	uint64_t node_guid;
	struct gid src, ep, host;
	uint32_t ids;
	unsigned unit_ms;
	int verbose;
	const char *sync_prefix;
	uint32_t next_tid; /* of a Get, which no connection owns */
	struct peer_conn conn[MAX_CONNS];
	struct peer_names their_ids, tids, qpns, guids;
	/* TIDs this side sent, with what: a reply names the message. */
	uint64_t sent_tid[64];
	uint16_t sent_attr[64];
	int nsent;
	int step;
	struct timespec step_start;
	double last_ms[CM_IDX_MAX]; /* last arrival of each attribute */
};

static void die(const char *what)
{
	fprintf(stderr, "cm_peer: %s\n", what);
	exit(2);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double step_ms(const struct peer *p)
{
	return now_ms() - ((double)p->step_start.tv_sec * 1e3 +
			   (double)p->step_start.tv_nsec / 1e6);
}

static int name_of(struct peer_names *n, uint64_t v)
{
	int i;

	for (i = 0; i < n->n; i++)
		if (n->v[i] == v)
			return i;
	if (n->n == MAX_NAMES)
		return MAX_NAMES;
	n->v[n->n] = v;
	return n->n++;
}

/* ---- the port -------------------------------------------------------- */

static int peer_read_sysfs(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return -errno;
	n = fread(buf, 1, cap - 1, f);
	fclose(f);
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

/* The RoCE v2 GID index of the source address, and the node GUID. */
static void peer_find_port(struct peer *p, const char *dev, int port)
{
	char path[256], text[128];
	struct gid g;
	int i;

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/node_guid", dev);
	if (peer_read_sysfs(path, text, sizeof(text)) == 0) {
		unsigned a, b, c, d;

		if (sscanf(text, "%x:%x:%x:%x", &a, &b, &c, &d) == 4)
			p->node_guid = (uint64_t)a << 48 | (uint64_t)b << 32 |
				       (uint64_t)c << 16 | d;
	}
	p->gid_index = -1;
	for (i = 0; i < 256 && p->gid_index < 0; i++) {
		snprintf(path, sizeof(path),
			 "/sys/class/infiniband/%s/ports/%d/gids/%d", dev, port,
			 i);
		if (peer_read_sysfs(path, text, sizeof(text)) ||
		    gid_parse(text, &g) || !gid_equal(&g, &p->src))
			continue;
		snprintf(path, sizeof(path),
			 "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d",
			 dev, port, i);
		if (peer_read_sysfs(path, text, sizeof(text)) == 0 &&
		    strstr(text, "v2"))
			p->gid_index = i;
	}
	if (p->gid_index < 0)
		die("no RoCE v2 GID of --src-ip on the port");
}

static void peer_open(struct peer *p, const char *dev, int port)
{
	long mask[16 / sizeof(long)];

	memset(mask, 0, sizeof(mask));
	mask[MAD_METHOD_SEND / (8 * sizeof(long))] |= 1L
						      << (MAD_METHOD_SEND %
							  (8 * sizeof(long)));
	if (umad_init() < 0)
		die("umad_init failed");
	p->fd = umad_open_port(dev, port);
	if (p->fd < 0)
		die("umad_open_port failed");
	p->agent = umad_register(p->fd, MAD_CLASS_CM, MAD_CM_CLASS_VERSION, 0,
				 mask);
	if (p->agent < 0)
		die("umad_register failed (is ib_cm loaded on this host?)");
	peer_find_port(p, dev, port);
}

/* Send a MAD to dst; a Get waits for its response (ib_mad keeps the
 * request to match the GetResp against it). */
static void peer_xmit(struct peer *p, const uint8_t *mad, const struct gid *dst)
{
	uint8_t buf[sizeof(struct ib_user_mad) + MAD_SIZE];
	struct ib_user_mad *um = (struct ib_user_mad *)buf;
	int get = mad[MAD_OFF_METHOD] == MAD_METHOD_GET;

	memset(buf, 0, sizeof(buf));
	um->addr.qpn = htonl(GSI_QPN);
	um->addr.qkey = htonl(GSI_QKEY);
	um->addr.grh_present = 1;
	um->addr.gid_index = (uint8_t)p->gid_index;
	um->addr.hop_limit = 64;
	memcpy(um->addr.gid, dst->raw, 16);
	memcpy(umad_get_mad(buf), mad, MAD_SIZE);
	if (umad_send(p->fd, p->agent, buf, MAD_SIZE, get ? CPI_TIMEOUT_MS : 0,
		      0) < 0) {
		/* Part of the record: an earlier step went otherwise
		 * (no GID learnt to send to, say). */
		printf("%d: send %s failed: %s\n", p->step,
		       cm_attr_name(cm_mad_attr_id(mad)), strerror(errno));
		return;
	}
	if (p->nsent < 64) {
		p->sent_tid[p->nsent] = cm_mad_tid(mad);
		p->sent_attr[p->nsent++] = cm_mad_attr_id(mad);
	}
}

/* ---- recording --------------------------------------------------------- */

/* A comm ID as a name: one of ours ("cN"), 0, or the endpoint's ("tK"). */
static void peer_id_name(struct peer *p, uint32_t id, char *out, size_t cap)
{
	int i;

	if (id == 0) {
		snprintf(out, cap, "0");
		return;
	}
	for (i = 0; i < MAX_CONNS; i++)
		if (p->conn[i].our_id == id) {
			snprintf(out, cap, "c%d", i);
			return;
		}
	snprintf(out, cap, "t%d", name_of(&p->their_ids, id));
}

static void peer_tid_name(struct peer *p, uint64_t tid, char *out, size_t cap)
{
	int i;

	/* ib_umad puts the agent's own number in the high half of every
	 * request's TID (ib_umad_write()): only the low half is ours. */
	for (i = p->nsent - 1; i >= 0; i--)
		if ((uint32_t)p->sent_tid[i] == (uint32_t)tid) {
			snprintf(out, cap, "our-%s",
				 cm_attr_name(p->sent_attr[i]));
			return;
		}
	snprintf(out, cap, "x%d", name_of(&p->tids, tid));
}

/* The connection a received message belongs to (by the Remote Comm ID
 * naming ours), or -1. */
static int peer_conn_of(struct peer *p, const uint8_t *mad)
{
	uint32_t id;
	int i;

	if (!cm_mad_remote_comm_id(mad, &id))
		return -1;
	for (i = 0; i < MAX_CONNS; i++)
		if (p->conn[i].our_id == id)
			return i;
	return -1;
}

static const char *peer_msg_name(unsigned m)
{
	static const char *const names[] = { "REQ", "REP", "OTHER", "?" };

	return names[m & 3];
}

/* What a received message says, in the fields a peer acts on. */
static void peer_describe(struct peer *p, const uint8_t *mad, char *out,
			  size_t cap)
{
	uint16_t attr = cm_mad_attr_id(mad);
	char a[16], b[16], t[24];
	uint32_t id;
	size_t n = 0;

	peer_tid_name(p, cm_mad_tid(mad), t, sizeof(t));
	n += (size_t)snprintf(out + n, cap - n,
			      "%s method=0x%02x status=0x%04x tid=%s",
			      cm_attr_name(attr), mad[MAD_OFF_METHOD],
			      wire_get16(mad + MAD_OFF_STATUS), t);
	if (cm_mad_local_comm_id(mad, &id)) {
		peer_id_name(p, id, a, sizeof(a));
		n += (size_t)snprintf(out + n, cap - n, " lcid=%s", a);
	}
	if (cm_mad_remote_comm_id(mad, &id)) {
		peer_id_name(p, id, b, sizeof(b));
		n += (size_t)snprintf(out + n, cap - n, " rcid=%s", b);
	}
	switch (attr) {
	case CM_ATTR_REQ:
		n += (size_t)snprintf(
			out + n, cap - n,
			" qpn=q%d guid=g%d rrt=%u lrt=%u retries=%u",
			name_of(&p->qpns, cm_field_get(mad, CM_REQ_LOCAL_QPN)),
			name_of(&p->guids,
				cm_field_get(mad, CM_REQ_LOCAL_CA_GUID)),
			(unsigned)
				cm_field_get(mad,
					     CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT),
			(unsigned)
				cm_field_get(mad,
					     CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT),
			(unsigned)cm_field_get(mad, CM_REQ_MAX_CM_RETRIES));
		break;
	case CM_ATTR_REP:
		n += (size_t)snprintf(
			out + n, cap - n,
			" qpn=q%d guid=g%d resp_res=%u init_depth=%u rnr=%u",
			name_of(&p->qpns, cm_field_get(mad, CM_REP_LOCAL_QPN)),
			name_of(&p->guids,
				cm_field_get(mad, CM_REP_LOCAL_CA_GUID)),
			(unsigned)cm_field_get(mad, CM_REP_RESPONDER_RESOURCES),
			(unsigned)cm_field_get(mad, CM_REP_INITIATOR_DEPTH),
			(unsigned)cm_field_get(mad, CM_REP_RNR_RETRY_COUNT));
		break;
	case CM_ATTR_REJ: {
		unsigned len = (unsigned)cm_field_get(mad, CM_REJ_ARI_LENGTH);
		const uint8_t *ari = mad + CM_REJ_OFF_ARI;
		struct gid g;

		n += (size_t)snprintf(out + n, cap - n,
				      " reason=%u msg=%s ari_len=%u",
				      (unsigned)cm_field_get(mad,
							     CM_REJ_REASON),
				      peer_msg_name((unsigned)cm_field_get(
					      mad, CM_REJ_MESSAGE_REJECTED)),
				      len);
		if (len == 8)
			n += (size_t)snprintf(out + n, cap - n, " ari=g%d",
					      name_of(&p->guids,
						      wire_get64(ari)));
		if (len == 16) {
			memcpy(g.raw, ari, 16);
			n += (size_t)snprintf(out + n, cap - n, " ari=%s",
					      gid_equal(&g, &p->ep) ? "ep-gid"
					      : gid_equal(&g, &p->host)
						      ? "host-gid"
					      : gid_equal(&g, &p->src)
						      ? "our-gid"
						      : "other-gid");
		}
		break;
	}
	case CM_ATTR_MRA:
		n += (size_t)snprintf(
			out + n, cap - n, " msg=%s service_timeout=%u",
			peer_msg_name(
				(unsigned)cm_field_get(mad,
						       CM_MRA_MESSAGE_MRAED)),
			(unsigned)cm_field_get(mad, CM_MRA_SERVICE_TIMEOUT));
		break;
	case CM_ATTR_DREQ: {
		uint64_t q = cm_field_get(mad, CM_DREQ_REMOTE_QPN);
		int i;

		for (i = 0; i < MAX_CONNS && p->conn[i].our_qpn != q; i++)
			;
		if (i < MAX_CONNS)
			n += (size_t)snprintf(out + n, cap - n, " qpn=c%d", i);
		else
			n += (size_t)snprintf(out + n, cap - n, " qpn=other");
		break;
	}
	case CM_ATTR_APR:
		n += (size_t)snprintf(out + n, cap - n, " ap_status=%u",
				      (unsigned)cm_field_get(mad,
							     CM_APR_AP_STATUS));
		break;
	case CM_ATTR_SIDR_REP:
		n += (size_t)
			snprintf(out + n, cap - n, " status=%u",
				 (unsigned)cm_field_get(mad,
							CM_SIDR_REP_STATUS));
		break;
	case CM_ATTR_CLASS_PORT_INFO:
		n += (size_t)snprintf(out + n, cap - n, " resp_time=%u",
				      (unsigned)(wire_get32(mad + MAD_HDR_SIZE +
							    4) &
						 0x1f));
		break;
	}
}

/* Learn what a received message tells about its connection. */
static void peer_learn(struct peer *p, const uint8_t *mad)
{
	uint16_t attr = cm_mad_attr_id(mad);
	struct peer_conn *c;
	uint32_t id;
	int i = peer_conn_of(p, mad);

	if (attr == CM_ATTR_REQ) {
		/* The endpoint's REQ opens the first connection without one. */
		for (i = 0; i < MAX_CONNS; i++)
			if (!p->conn[i].their_id ||
			    p->conn[i].their_id ==
				    cm_field_get(mad, CM_REQ_LOCAL_COMM_ID))
				break;
		if (i == MAX_CONNS)
			return;
		c = &p->conn[i];
		c->their_id = (uint32_t)cm_field_get(mad, CM_REQ_LOCAL_COMM_ID);
		c->their_qpn = (uint32_t)cm_field_get(mad, CM_REQ_LOCAL_QPN);
		c->req_tid = cm_mad_tid(mad);
		cm_get_gid(mad, CM_REQ_OFF_PRIMARY_LOCAL_GID, &c->dst);
		return;
	}
	if (i < 0)
		return;
	c = &p->conn[i];
	if (cm_mad_local_comm_id(mad, &id) && id && !c->their_id)
		c->their_id = id;
	if (attr == CM_ATTR_REP)
		c->their_qpn = (uint32_t)cm_field_get(mad, CM_REP_LOCAL_QPN);
	if (attr == CM_ATTR_DREQ)
		c->dreq_tid = cm_mad_tid(mad);
	c->other_tid = cm_mad_tid(mad);
	c->other_attr = attr;
}

/* A message's time is the interval since the last of its attribute, in
 * the case's unit: a retransmission's is the IBTA timer behind it.  The
 * first has none: when it comes is the endpoint's pace (an application
 * in a nested guest accepts seconds later than one on the host). */
static void peer_print_arrival(struct peer *p, uint16_t attr, const char *what)
{
	enum cm_attr_index i = cm_attr_index(attr);
	double now = now_ms();

	if (p->last_ms[i] > 0)
		printf("%d: recv %s dt=%.0f\n", p->step, what,
		       round((now - p->last_ms[i]) / p->unit_ms));
	else
		printf("%d: recv %s\n", p->step, what);
	p->last_ms[i] = now;
}

/* Receive and record until `until_attr` arrives (0: none) or ms pass.
 * Returns 1 when it arrived. */
static int peer_collect(struct peer *p, uint16_t until_attr, int ms)
{
	uint8_t buf[sizeof(struct ib_user_mad) + MAD_SIZE];
	struct ib_user_mad *um = (struct ib_user_mad *)buf;
	double deadline = now_ms() + ms;
	char what[LINE_MAX_LEN];

	for (;;) {
		int left = (int)(deadline - now_ms()), len = MAD_SIZE;
		const uint8_t *mad = umad_get_mad(buf);

		if (left <= 0)
			return 0;
		if (umad_recv(p->fd, buf, &len, left) < 0) {
			if (errno == ETIMEDOUT || errno == EINTR)
				continue;
			die("umad_recv failed");
		}
		if (um->status) {
			/* A Get's response never came. */
			printf("%d: recv nothing for %s (status %d)\n", p->step,
			       cm_attr_name(cm_mad_attr_id(mad)), um->status);
			if (until_attr == CM_ATTR_CLASS_PORT_INFO)
				return 1;
			continue;
		}
		if (len < MAD_SIZE || mad[MAD_OFF_MGMT_CLASS] != MAD_CLASS_CM)
			continue;
		peer_describe(p, mad, what, sizeof(what));
		peer_print_arrival(p, cm_mad_attr_id(mad), what);
		if (p->verbose)
			fprintf(stderr, "cm_peer: %d: %.0f ms %s\n", p->step,
				step_ms(p), what);
		fflush(stdout);
		peer_learn(p, mad);
		if (until_attr && cm_mad_attr_id(mad) == until_attr)
			return 1;
	}
}

/* ---- building messages ------------------------------------------------- */

struct peer_args {
	int conn;
	const char *dst; /* "ep" (default), "host" */
	unsigned port;   /* rdma_cm port of REQ and SIDR_REQ */
	int lrt, rrt, retries, reason, msg, st, qpn_of, rcid_zero, unknown;
	int status;
};

static void peer_parse_args(char **tok, int ntok, struct peer_args *a)
{
	int i;

	memset(a, 0, sizeof(*a));
	a->dst = "ep";
	a->port = 7471;
	a->lrt = a->rrt = 20;
	a->retries = 15;
	a->reason = 28;
	a->msg = -1;
	a->st = 20;
	a->qpn_of = -1;
	for (i = 0; i < ntok; i++) {
		char *eq = strchr(tok[i], '=');
		const char *k = tok[i], *v = eq ? eq + 1 : "";
		long n;

		if (!eq)
			die("a step's argument is not key=value");
		*eq = '\0';
		n = strtol(v, NULL, 0);
		if (!strcmp(k, "c"))
			a->conn = (int)n;
		else if (!strcmp(k, "dst"))
			a->dst = v;
		else if (!strcmp(k, "port"))
			a->port = (unsigned)n;
		else if (!strcmp(k, "lrt"))
			a->lrt = (int)n;
		else if (!strcmp(k, "rrt"))
			a->rrt = (int)n;
		else if (!strcmp(k, "retries"))
			a->retries = (int)n;
		else if (!strcmp(k, "reason"))
			a->reason = (int)n;
		else if (!strcmp(k, "msg"))
			a->msg = !strcmp(v, "REQ")   ? CM_MSG_RESPONSE_REQ
				 : !strcmp(v, "REP") ? CM_MSG_RESPONSE_REP
						     : CM_MSG_RESPONSE_OTHER;
		else if (!strcmp(k, "st"))
			a->st = (int)n;
		else if (!strcmp(k, "qpn-of"))
			a->qpn_of = (int)n;
		else if (!strcmp(k, "rcid"))
			a->rcid_zero = !strcmp(v, "0");
		else if (!strcmp(k, "id"))
			a->unknown = !strcmp(v, "unknown");
		else if (!strcmp(k, "status"))
			a->status = (int)n;
		else
			die("unknown step argument");
		if (a->conn < 0 || a->conn >= MAX_CONNS ||
		    a->qpn_of >= MAX_CONNS)
			die("connection number out of range");
	}
}

/* A TID as cm.c forms one (cm_form_tid()): the sender's comm ID in the
 * low half (ib_umad writes the high half).  The peer plays a Linux host. */
static uint64_t peer_new_tid(struct peer *p, uint32_t local_id)
{
	return ((uint64_t)p->ids << 32) | local_id;
}

/* The TID a reply carries: cm.c answers with the TID of the message it
 * answers (its cm_id's tid). */
static uint64_t peer_reply_tid(struct peer *p, struct peer_conn *c,
			       uint16_t to_attr)
{
	if (to_attr == CM_ATTR_DREQ && c->dreq_tid)
		return c->dreq_tid;
	if (c->req_tid)
		return c->req_tid;
	return peer_new_tid(p, c->our_id);
}

static void peer_build_req(struct peer *p, struct peer_conn *c,
			   const struct peer_args *a, uint8_t *mad)
{
	const struct gid *dst = !strcmp(a->dst, "host") ? &p->host : &p->ep;
	uint32_t qpn = a->qpn_of >= 0 ? p->conn[a->qpn_of].our_qpn : c->our_qpn;

	c->req_tid = peer_new_tid(p, c->our_id);
	c->dst = *dst;
	cm_mad_init(mad, CM_ATTR_REQ, c->req_tid);
	cm_field_set(mad, CM_REQ_LOCAL_COMM_ID, c->our_id);
	cm_field_set(mad, CM_REQ_SERVICE_ID,
		     rdma_service_id(CMA_PS_TCP, (uint16_t)a->port));
	cm_field_set(mad, CM_REQ_LOCAL_CA_GUID, p->node_guid);
	cm_field_set(mad, CM_REQ_LOCAL_QPN, qpn);
	cm_field_set(mad, CM_REQ_RESPONDER_RESOURCES, 1);
	cm_field_set(mad, CM_REQ_INITIATOR_DEPTH, 1);
	cm_field_set(mad, CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT, (uint64_t)a->rrt);
	cm_field_set(mad, CM_REQ_STARTING_PSN, c->our_id & 0xffffff);
	cm_field_set(mad, CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT, (uint64_t)a->lrt);
	cm_field_set(mad, CM_REQ_RETRY_COUNT, 7);
	cm_field_set(mad, CM_REQ_PKEY, 0xffff);
	cm_field_set(mad, CM_REQ_PATH_MTU, 3); /* 1024, rxe's on Ethernet */
	cm_field_set(mad, CM_REQ_RNR_RETRY_COUNT, 7);
	cm_field_set(mad, CM_REQ_MAX_CM_RETRIES, (uint64_t)a->retries);
	cm_field_set(mad, CM_REQ_PRIMARY_LOCAL_LID, 0xffff);
	cm_field_set(mad, CM_REQ_PRIMARY_REMOTE_LID, 0xffff);
	cm_field_set(mad, CM_REQ_PRIMARY_HOP_LIMIT, 64);
	cm_field_set(mad, CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT, 14);
	cm_set_gid(mad, CM_REQ_OFF_PRIMARY_LOCAL_GID, &p->src);
	cm_set_gid(mad, CM_REQ_OFF_PRIMARY_REMOTE_GID, dst);
	cma_hdr_build(mad + CM_REQ_OFF_PRIVATE_DATA, &p->src, dst, 40000);
}

static void peer_build_rep(struct peer *p, struct peer_conn *c, uint8_t *mad)
{
	(void)p;
	cm_mad_init(mad, CM_ATTR_REP, c->req_tid);
	cm_field_set(mad, CM_REP_LOCAL_COMM_ID, c->our_id);
	cm_field_set(mad, CM_REP_REMOTE_COMM_ID, c->their_id);
	cm_field_set(mad, CM_REP_LOCAL_QPN, c->our_qpn);
	cm_field_set(mad, CM_REP_STARTING_PSN, c->our_id & 0xffffff);
	cm_field_set(mad, CM_REP_RESPONDER_RESOURCES, 1);
	cm_field_set(mad, CM_REP_INITIATOR_DEPTH, 1);
	cm_field_set(mad, CM_REP_RNR_RETRY_COUNT, 7);
	cm_field_set(mad, CM_REP_LOCAL_CA_GUID, p->node_guid);
}

/*
 * send ATTR: REQ (dst= port= lrt= rrt= retries= qpn-of=), REP, RTU,
 * DREQ (id=unknown: IDs nobody has), DREP, REJ (reason= msg= rcid=0), MRA
 * (msg= st=), LAP, APR (status=), SIDR_REQ (port=), CPI (a Get of
 * ClassPortInfo, to the endpoint).
 */
static void peer_send(struct peer *p, const char *attr,
		      const struct peer_args *a)
{
	struct peer_conn *c = &p->conn[a->conn];
	uint8_t mad[MAD_SIZE];
	uint32_t their = a->unknown ? p->ids ^ 0x5a5a5a5a : c->their_id;
	uint32_t ours = a->unknown ? p->ids ^ 0xa5a5a5a5 : c->our_id;
	const struct gid *dst = gid_is_zero(&c->dst) ? &p->ep : &c->dst;

	memset(mad, 0, sizeof(mad));
	if (!strcmp(attr, "REQ")) {
		peer_build_req(p, c, a, mad);
		dst = &c->dst;
	} else if (!strcmp(attr, "REP")) {
		peer_build_rep(p, c, mad);
	} else if (!strcmp(attr, "RTU")) {
		cm_mad_init(mad, CM_ATTR_RTU, c->req_tid);
		cm_field_set(mad, CM_RTU_LOCAL_COMM_ID, ours);
		cm_field_set(mad, CM_RTU_REMOTE_COMM_ID, their);
	} else if (!strcmp(attr, "DREQ")) {
		cm_build_dreq(mad, peer_new_tid(p, ours), ours, their,
			      a->unknown ? 0x123456 : c->their_qpn);
	} else if (!strcmp(attr, "DREP")) {
		cm_build_drep(mad, peer_reply_tid(p, c, CM_ATTR_DREQ), ours,
			      their);
	} else if (!strcmp(attr, "REJ")) {
		int msg = a->msg >= 0                    ? a->msg
			  : c->other_attr == CM_ATTR_REP ? CM_MSG_RESPONSE_REP
							 : CM_MSG_RESPONSE_REQ;
		uint8_t ari[8];

		wire_put64(ari, p->node_guid);
		cm_build_rej(mad, msg == CM_MSG_RESPONSE_REQ ? c->req_tid : c->other_tid ?: c->req_tid,
			     ours, a->rcid_zero ? 0 : their, (unsigned)msg,
			     (unsigned)a->reason,
			     a->reason == CM_REJ_REASON_TIMEOUT ? ari : NULL,
			     a->reason == CM_REJ_REASON_TIMEOUT ? 8 : 0);
	} else if (!strcmp(attr, "MRA")) {
		int msg = a->msg >= 0 ? a->msg : CM_MSG_RESPONSE_REQ;

		cm_mad_init(mad, CM_ATTR_MRA,
			    msg == CM_MSG_RESPONSE_OTHER ? c->other_tid
							 : c->req_tid);
		cm_field_set(mad, CM_MRA_LOCAL_COMM_ID, ours);
		cm_field_set(mad, CM_MRA_REMOTE_COMM_ID, their);
		cm_field_set(mad, CM_MRA_MESSAGE_MRAED, (uint64_t)msg);
		cm_field_set(mad, CM_MRA_SERVICE_TIMEOUT, (uint64_t)a->st);
	} else if (!strcmp(attr, "LAP")) {
		cm_mad_init(mad, CM_ATTR_LAP, peer_new_tid(p, ours));
		cm_field_set(mad, CM_LAP_LOCAL_COMM_ID, ours);
		cm_field_set(mad, CM_LAP_REMOTE_COMM_ID, their);
		cm_field_set(mad, CM_LAP_REMOTE_QPN, c->their_qpn);
		cm_set_gid(mad, CM_LAP_OFF_ALT_LOCAL_GID, &p->src);
		cm_set_gid(mad, CM_LAP_OFF_ALT_REMOTE_GID, dst);
	} else if (!strcmp(attr, "APR")) {
		cm_mad_init(mad, CM_ATTR_APR, c->other_tid);
		cm_field_set(mad, CM_APR_LOCAL_COMM_ID, ours);
		cm_field_set(mad, CM_APR_REMOTE_COMM_ID, their);
		cm_field_set(mad, CM_APR_AP_STATUS, (uint64_t)a->status);
	} else if (!strcmp(attr, "SIDR_REQ")) {
		cm_mad_init(mad, CM_ATTR_SIDR_REQ, peer_new_tid(p, ours));
		cm_field_set(mad, CM_SIDR_REQ_REQUEST_ID, ours);
		cm_field_set(mad, CM_SIDR_REQ_PKEY, 0xffff);
		cm_field_set(mad, CM_SIDR_REQ_SERVICE_ID,
			     rdma_service_id(CMA_PS_UDP, (uint16_t)a->port));
		cma_hdr_build(mad + CM_SIDR_REQ_OFF_PRIVATE_DATA, &p->src,
			      &p->ep, 40000);
		dst = &p->ep;
	} else if (!strcmp(attr, "CPI")) {
		cm_mad_init(mad, CM_ATTR_CLASS_PORT_INFO,
			    peer_new_tid(p, ++p->next_tid));
		mad[MAD_OFF_METHOD] = MAD_METHOD_GET;
		dst = &p->ep;
	} else {
		die("unknown attribute to send");
	}
	memcpy(c->last[cm_attr_index(cm_mad_attr_id(mad))], mad, MAD_SIZE);
	c->have_last[cm_attr_index(cm_mad_attr_id(mad))] = 1;
	peer_xmit(p, mad, dst);
}

static uint16_t peer_attr_by_name(const char *name)
{
	static const uint16_t attrs[] = {
		CM_ATTR_REQ,  CM_ATTR_MRA,      CM_ATTR_REJ,
		CM_ATTR_REP,  CM_ATTR_RTU,      CM_ATTR_DREQ,
		CM_ATTR_DREP, CM_ATTR_SIDR_REQ, CM_ATTR_SIDR_REP,
		CM_ATTR_LAP,  CM_ATTR_APR,      CM_ATTR_CLASS_PORT_INFO,
	};
	size_t i;

	for (i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++)
		if (!strcmp(cm_attr_name(attrs[i]), name))
			return attrs[i];
	die("unknown attribute name");
	return 0;
}

/* ---- the case ------------------------------------------------------------ */

/* Have the endpoint's host act (the scenario restarts the daemon for
 * "sync restart"): create PREFIX-NAME, wait for PREFIX-NAME-done, and
 * record what arrives meanwhile. */
static void peer_sync(struct peer *p, const char *name)
{
	char path[512];
	FILE *f;
	int i;

	if (!p->sync_prefix)
		die("a sync step needs --sync-prefix");
	snprintf(path, sizeof(path), "%s-%s", p->sync_prefix, name);
	f = fopen(path, "w");
	if (!f)
		die("cannot create the sync file");
	fclose(f);
	snprintf(path, sizeof(path), "%s-%s-done", p->sync_prefix, name);
	for (i = 0; i < 1200 && access(path, F_OK); i++)
		peer_collect(p, 0, 100);
	if (access(path, F_OK))
		die("the endpoint's host never did what a sync step asked");
}

static void peer_step(struct peer *p, char *line)
{
	char *tok[16], *save = NULL, *t;
	int ntok = 0;
	struct peer_args a;

	for (t = strtok_r(line, " \t", &save); t && ntok < 16;
	     t = strtok_r(NULL, " \t", &save))
		tok[ntok++] = t;
	if (ntok == 0)
		return;
	clock_gettime(CLOCK_MONOTONIC, &p->step_start);
	if (!strcmp(tok[0], "send") && ntok >= 2) {
		peer_parse_args(tok + 2, ntok - 2, &a);
		peer_send(p, tok[1], &a);
	} else if (!strcmp(tok[0], "resend") && ntok >= 2) {
		struct peer_conn *c;
		enum cm_attr_index i;

		peer_parse_args(tok + 2, ntok - 2, &a);
		c = &p->conn[a.conn];
		i = cm_attr_index(peer_attr_by_name(tok[1]));
		if (!c->have_last[i])
			die("resend of a message never sent");
		peer_xmit(p, c->last[i], &c->dst);
	} else if (!strcmp(tok[0], "await") && ntok >= 2) {
		uint16_t attr = peer_attr_by_name(tok[1]);

		if (!peer_collect(p, attr, ntok >= 3 ? atoi(tok[2]) : 10000))
			printf("%d: no %s\n", p->step, tok[1]);
	} else if (!strcmp(tok[0], "wait") && ntok == 2) {
		peer_collect(p, 0, atoi(tok[1]));
	} else if (!strcmp(tok[0], "sync") && ntok == 2) {
		peer_sync(p, tok[1]);
	} else {
		die("unknown step");
	}
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dev", required_argument, NULL, 'd' },
		{ "port", required_argument, NULL, 'p' },
		{ "src-ip", required_argument, NULL, 's' },
		{ "ep-ip", required_argument, NULL, 'e' },
		{ "host-ip", required_argument, NULL, 'h' },
		{ "case", required_argument, NULL, 'c' },
		{ "ids", required_argument, NULL, 'i' },
		{ "go", required_argument, NULL, 'g' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "sync-prefix", required_argument, NULL, 'S' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dev = "rxe0", *case_file = NULL, *go = NULL;
	char line[LINE_MAX_LEN], ip[80];
	struct peer p;
	int port = 1, c, i;
	FILE *f;

	memset(&p, 0, sizeof(p));
	p.unit_ms = 1000;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		struct gid *g = c == 's' ? &p.src : c == 'e' ? &p.ep : &p.host;

		switch (c) {
		case 'd': dev = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 's':
		case 'e':
		case 'h':
			snprintf(ip, sizeof(ip), "::ffff:%s", optarg);
			if (gid_parse(ip, g))
				die("bad IPv4 address");
			break;
		case 'c': case_file = optarg; break;
		case 'i': p.ids = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'g': go = optarg; break;
		case 'v': p.verbose = 1; break;
		case 'S': p.sync_prefix = optarg; break;
		default: die("bad option (see the head of cm_peer.c)");
		}
	}
	if (!case_file || gid_is_zero(&p.src) || gid_is_zero(&p.ep) ||
	    gid_is_zero(&p.host) || !p.ids)
		die("--case, --src-ip, --ep-ip, --host-ip and --ids are needed");
	f = fopen(case_file, "r");
	if (!f)
		die("cannot open the case file");
	for (i = 0; i < MAX_CONNS; i++) {
		p.conn[i].our_id = (p.ids << 4) | (uint32_t)(i + 1);
		p.conn[i].our_qpn = ((p.ids << 4) | (uint32_t)(i + 1)) &
				    0xffffff;
	}
	peer_open(&p, dev, port);
	printf("cm_peer: ready\n");
	fflush(stdout);
	if (go) {
		for (i = 0; i < 1200 && access(go, F_OK); i++)
			usleep(100000);
		if (access(go, F_OK))
			die("the endpoint never got ready");
	}
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (!strncmp(line, "unit: ", 6))
			p.unit_ms = (unsigned)atoi(line + 6);
		if (strncmp(line, "peer: ", 6))
			continue;
		p.step++;
		printf("%d: %s\n", p.step, line + 6);
		peer_step(&p, line + 6);
	}
	fclose(f);
	/* Late answers to the last step are part of the record. */
	p.step++;
	peer_collect(&p, 0, 1000);
	printf("cm_peer: end\n");
	umad_unregister(p.fd, p.agent);
	umad_close_port(p.fd);
	return 0;
}
