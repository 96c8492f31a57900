// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * bench_relay: what the daemon costs on the connection-setup path, against
 * a minimal relay measured in the same run.
 *
 * Client pairs (A_i, B_i) talk through rdmacm-muxd on a sim port, and
 * again through a minimal relay: a thread that does the same unix-socket
 * reads, copies and writes (each MAD frame answered to its sender and
 * forwarded to the partner) and nothing else.  For each number of pairs:
 *   - relay throughput, 1 and 16 MADs in flight per client, for REQs
 *     routed by GID (A -> B) and for replies routed by comm ID (B -> A);
 *   - full handshakes per second (REQ, REP, RTU, DREQ, DREP), one and
 *     sixteen in flight per pair;
 *   - latency p50/p99/p99.9 at half the measured saturation rate of an
 *     open loop (one MAD per send, spread evenly over the clients; the
 *     highest rate whose sends keep to their schedule), each from the
 *     time its MAD was due;
 *   - the daemon's CPU microseconds per relayed MAD, and its peak RSS;
 * then, on a sim port, the daemon's memory per mapping with 125,000 to
 * 1,000,000 comm-ID mappings of established connections held.
 * One line per figure ("bench: KEY VALUE"), or --json.
 *
 *   bench_relay [--daemon PATH] [--seconds S] [--pairs 1,8,64,1024]
 *               [--rounds N] [--port DEV:PORT [--gid-base GID]] [--json]
 *               [--mappings 125000,...,1000000|none] [--quick]
 *               [--against PATH [--capture]]
 *
 * Client i's GID is the base (default fd00::) plus i+1 in its low 32
 * bits.  --port runs the daemon on a real (umad) port instead of a sim
 * one; the GIDs must then be in its table (the lab adds them as
 * addresses: --gid-base ::ffff:10.77.1.0 is 10.77.1.1, 10.77.1.2, ...),
 * and MADs between two of them loop back through the device.  There a
 * second relay is measured too, one that sends each MAD through the
 * port's umad and forwards what umad receives (umad_relay.c): the cost
 * of the port's I/O, which the socket relay never pays and the daemon
 * cannot avoid, without anything else of the daemon's.
 *
 * The daemon runs with its default limits (but --max-clients), so the
 * handshake figures show what its quotas allow.  Each figure is the
 * median of N rounds (default 3) that alternate relay and daemon.
 *
 * --against measures a second daemon binary in the same rounds (the two
 * taking turns first) and prints the first's figures over the second's,
 * each the median of the rounds' own ratios: a change's cost, before
 * against after, on one noisy machine.  With --capture, the first daemon
 * has a capture of every MAD running (its admin socket, a reader that
 * keeps up) while it is measured.  `make bench-capture` runs both.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cm_mad.h"
#include "common/gid.h"
#include "common/wire.h"
#include "protocol/rdmacm_mux_proto.h"
#include "tests/lib/own_qp.h"
#include "tests/lib/proc_figures.h"
#include "tests/lib/status_query.h"
#include "tests/bench/bench_capture.h"
#include "tests/bench/bench_daemon.h"
#include "tests/bench/bench_figures.h"
#include "tests/bench/relay.h"
#include "tests/bench/round_trip.h"

#define MAX_PAIRS 1024
_Static_assert(2 * MAX_PAIRS <= RELAY_MAX_CLIENTS,
	       "a relay serves every client");
#define MAX_PAIR_COUNTS 16 /* in --pairs */
#define FRAME_MAD (PROTO_HDR_SIZE + PROTO_MAD_ADDR_SIZE + MAD_SIZE)
#define TS_OFF 200 /* a send timestamp inside the MAD */
#define RBUF 65536

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
	perror(what);
	exit(2);
}

/* ---- a client: one unix socket, raw frames ------------------------------ */

/*
 * The connections a pair's REQs and MRAs are spread over.  cm.c forms a
 * connection's TIDs from its comm ID, so the daemon's sends on one
 * connection share one TID, and ib_umad refuses a TID it is still
 * sending: one connection's MADs leave one at a time, each after the
 * last one's send completed, and a CM never has more than one of its
 * own MADs of a connection out.  Sixteen in flight are therefore on
 * sixteen connections, as they are when a host's many connections
 * meet.
 */
#define REQ_CONNS 16

struct client {
	int fd;
	int pair, side; /* side 0: A, 1: B */
	struct gid gid;
	uint8_t rbuf[RBUF];
	size_t have;
	uint32_t rid;
	unsigned inflight; /* requests without a reply */
	uint64_t received; /* MADs delivered to it */
	/* WL_REQ, WL_REPLY: the partner's comm IDs as seen here (A's
	 * REQ_CONNS connections, in the order their REQs arrived), and the
	 * connection a sender's next MAD is on */
	uint32_t peers[REQ_CONNS];
	unsigned npeers, next_conn;
	uint32_t hs_id;         /* handshake: current guest comm ID */
	uint16_t last_attr;     /* for a refusal's message */
	int in_input;           /* client_input() is taking its frames */
	uint32_t tid;           /* the client's TIDs, one a MAD */
	uint32_t started, held; /* WL_HOLD: A's connections */
};

static struct client clients[2 * MAX_PAIRS];
static int npairs;
static int use_daemon; /* 1: the daemon's protocol, 0: the relay */
static const char *gid_base = "fd00::"; /* client i: + i + 1 */

static int unix_connect(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0)
		die("connect");
	return fd;
}

static void write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len) {
		n = write(fd, p, len);
		if (n < 0 && errno == EAGAIN) {
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };

			poll(&pfd, 1, 1000);
			continue;
		}
		if (n <= 0)
			die("write");
		p += n;
		len -= (size_t)n;
	}
}

/* Blocking request/reply, for the setup only. */
static json_t *control(struct client *c, const char *fmt, ...)
{
	uint8_t hdr[PROTO_HDR_SIZE], buf[4096];
	struct proto_frame f;
	char text[512];
	va_list ap;
	json_t *j;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	proto_header_encode(hdr, PROTO_KIND_JSON, 0, ++c->rid,
			    (uint32_t)strlen(text));
	write_all(c->fd, hdr, sizeof(hdr));
	write_all(c->fd, text, strlen(text));
	for (;;) {
		if (recv(c->fd, hdr, sizeof(hdr), MSG_WAITALL) !=
			    (ssize_t)sizeof(hdr) ||
		    proto_header_decode(hdr, sizeof(buf) - 1, &f) < 0 ||
		    recv(c->fd, buf, f.length, MSG_WAITALL) !=
			    (ssize_t)f.length)
			die("control reply");
		if (f.kind == PROTO_KIND_JSON && (f.flags & PROTO_FLAG_REPLY))
			break;
	}
	buf[f.length] = 0;
	j = json_loads((char *)buf, 0, NULL);
	if (!json_is_true(json_object_get(j, "ok"))) {
		fprintf(stderr, "bench: %s -> %s\n", text, buf);
		exit(2);
	}
	return j;
}

/* The QP every REQ and REP names: this process's own (own_qp()), which
 * the daemon checks as it would a guest's.  Set before clients open. */
static uint32_t own_qpn;

static void client_open(struct client *c, const char *path, int pair, int side)
{
	char g[GID_STRLEN];
	int id = pair * 2 + side;
	json_t *j;

	memset(c, 0, sizeof(*c));
	c->pair = pair;
	c->side = side;
	c->fd = unix_connect(path);
	gid_parse(gid_base, &c->gid);
	wire_put32(c->gid.raw + 12,
		   wire_get32(c->gid.raw + 12) + (uint32_t)id + 1);
	if (use_daemon) {
		json_decref(control(
			c,
			"{\"op\":\"hello\",\"protocol\":{\"major\":1,\"minor\":0},\"name\":\"bench-%d\"}",
			id));
		json_decref(control(c,
				    "{\"op\":\"register_gid\",\"gid\":\"%s\"}",
				    gid_format(&c->gid, g)));
		j = control(c, "{\"op\":\"register_qpn\",\"qpn\":%u}",
			    (unsigned)own_qpn);
		if (!json_is_true(json_object_get(j, "ok")))
			die("register_qpn");
		json_decref(j);
	} else {
		uint32_t be = htonl((uint32_t)id);

		write_all(c->fd, &be, sizeof(be));
	}
	fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
}

static struct client *partner(struct client *c)
{
	return &clients[c->pair * 2 + !c->side];
}

static void pump(int timeout_ms);

/* Write a frame; while the socket is full, keep reading every client, or
 * the relay (or the daemon) blocks writing to one we do not read. */
static void send_frame(int fd, const uint8_t *p, size_t len)
{
	ssize_t n;

	while (len) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EAGAIN) {
			pump(1);
			continue;
		}
		if (n <= 0)
			die("send");
		p += n;
		len -= (size_t)n;
	}
}

/* Queue one MAD frame from c to its partner. */
static void send_mad(struct client *c, const uint8_t *mad)
{
	struct proto_mad m;
	uint8_t frame[FRAME_MAD];
	int len;

	memset(&m.addr, 0, sizeof(m.addr));
	m.addr.flags = PROTO_MAD_F_GRH;
	m.addr.hop_limit = 64;
	m.addr.remote_qpn = GSI_QPN;
	m.addr.qkey = GSI_QKEY;
	memcpy(m.addr.local_gid, c->gid.raw, 16);
	memcpy(m.addr.remote_gid, partner(c)->gid.raw, 16);
	m.mad_len = MAD_SIZE;
	memcpy(m.mad, mad, MAD_SIZE);
	if (cm_mad_attr_id(mad) == CM_ATTR_REQ)
		cm_field_set(m.mad, CM_REQ_LOCAL_QPN, own_qpn);
	else if (cm_mad_attr_id(mad) == CM_ATTR_REP)
		cm_field_set(m.mad, CM_REP_LOCAL_QPN, own_qpn);
	len = proto_mad_encode(&m, frame + PROTO_HDR_SIZE,
			       sizeof(frame) - PROTO_HDR_SIZE);
	proto_header_encode(frame, PROTO_KIND_MAD, 0, ++c->rid, (uint32_t)len);
	send_frame(c->fd, frame, PROTO_HDR_SIZE + (size_t)len);
	c->inflight++;
	c->last_attr = cm_mad_attr_id(mad);
}

/* ---- workloads ----------------------------------------------------------- */

/* WL_REQ: REQs that retransmit the REQs of REQ_CONNS connections a pair,
 * in turn (the table stays as it is); WL_REQ_FRESH: each REQ a new connection (a fresh comm ID),
 * which the partner rejects, as a storm of connection attempts makes the
 * table grow, the quota bind and TimeWait fill; WL_REPLY: MRAs routed by
 * comm ID; WL_HANDSHAKE: whole connections; WL_HOLD: connections
 * established and held (REQ, REP, RTU), up to hold_per_pair a pair. */
enum workload { WL_REQ, WL_REQ_FRESH, WL_REPLY, WL_HANDSHAKE, WL_HOLD };

static enum workload wl;
static unsigned want_inflight;
static uint64_t *lat; /* latency samples, ns */
static size_t nlat, cap_lat;
static uint64_t handshakes;
static int measuring;
static uint32_t hold_per_pair;

/* A's comm ID of its connection k (of REQ_CONNS) in WL_REQ: apart from
 * the other workloads' comm IDs. */
static uint32_t req_comm_id(int pair, unsigned k)
{
	return 0x01000000u | (uint32_t)pair << 4 | (k % REQ_CONNS);
}

/* The partner's comm ID as seen here, learnt from a REQ. */
static void learn_peer(struct client *c, uint32_t local)
{
	unsigned i;

	for (i = 0; i < c->npeers; i++)
		if (c->peers[i] == local)
			return;
	if (c->npeers < REQ_CONNS)
		c->peers[c->npeers++] = local;
}

/* The MAD a sender sends in the throughput and latency workloads. */
static void workload_mad(struct client *c, uint8_t *mad)
{
	if (wl == WL_REQ || wl == WL_REQ_FRESH) {
		cm_mad_init(mad, CM_ATTR_REQ, ++c->tid);
		/* Apart from the other workloads' comm IDs. */
		cm_field_set(mad, CM_REQ_LOCAL_COMM_ID,
			     wl == WL_REQ
				     ? req_comm_id(c->pair, c->next_conn++)
				     : 0x20000000u | (c->tid & 0x0fffffff));
		cm_set_gid(mad, CM_REQ_OFF_PRIMARY_LOCAL_GID, &c->gid);
		cm_set_gid(mad, CM_REQ_OFF_PRIMARY_REMOTE_GID,
			   &partner(c)->gid);
	} else {
		/* B's MRA of one of A's REQs: routed to A by A's host
		 * comm ID. */
		unsigned k = c->next_conn++ % (c->npeers ? c->npeers : 1);

		cm_mad_init(mad, CM_ATTR_MRA, ++c->tid);
		cm_field_set(mad, CM_MRA_LOCAL_COMM_ID,
			     0x02000000u | (uint32_t)c->pair << 4 | k);
		cm_field_set(mad, CM_MRA_REMOTE_COMM_ID, c->peers[k]);
	}
	wire_put64(mad + TS_OFF, now_ns());
}

static void hs_start(struct client *a)
{
	uint8_t mad[MAD_SIZE];

	/* Apart from the throughput workloads' comm IDs (0x100 + pair),
	 * which would make this a retransmission of their REQ. */
	a->hs_id = ((a->hs_id + 1) & 0x0fffffff) | 0x10000000;
	cm_mad_init(mad, CM_ATTR_REQ, a->hs_id);
	cm_field_set(mad, CM_REQ_LOCAL_COMM_ID, a->hs_id);
	cm_set_gid(mad, CM_REQ_OFF_PRIMARY_LOCAL_GID, &a->gid);
	cm_set_gid(mad, CM_REQ_OFF_PRIMARY_REMOTE_GID, &partner(a)->gid);
	send_mad(a, mad);
}

/* A MAD arrived at c: the handshake's next step, or a sample. */
static void on_mad(struct client *c, const uint8_t *mad)
{
	uint8_t out[MAD_SIZE];
	uint16_t attr = cm_mad_attr_id(mad);
	uint32_t local = wire_get32(mad + 24), remote = wire_get32(mad + 28);

	c->received++;
	if (attr == CM_ATTR_REQ && wl == WL_REQ)
		learn_peer(c, local);
	if (wl == WL_REQ_FRESH && attr == CM_ATTR_REQ) {
		/* B turns the connection down (cm_issue_rej(): no comm ID
		 * of its own), which ends A's entry in TimeWait. */
		cm_mad_init(out, CM_ATTR_REJ, ++c->tid);
		wire_put32(out + 28, local);
		cm_field_set(out, CM_REJ_MESSAGE_REJECTED, CM_MSG_RESPONSE_REQ);
		cm_field_set(out, CM_REJ_REASON,
			     CM_REJ_REASON_CONSUMER_DEFINED);
		wire_put64(out + TS_OFF, wire_get64(mad + TS_OFF));
		send_mad(c, out);
		return;
	}
	if (wl == WL_HOLD && attr == CM_ATTR_REP) {
		/* At A: established; the next one while the pair has room. */
		cm_mad_init(out, CM_ATTR_RTU, 1);
		wire_put32(out + 24, remote);
		wire_put32(out + 28, local);
		send_mad(c, out);
		c->held++;
		if (c->started < hold_per_pair) {
			c->started++;
			hs_start(c);
		}
		return;
	}
	if (wl != WL_HANDSHAKE && !(wl == WL_HOLD && attr == CM_ATTR_REQ)) {
		if (measuring && lat && nlat < cap_lat)
			lat[nlat++] = now_ns() - wire_get64(mad + TS_OFF);
		return;
	}
	/* Each reply names the receiver's own ID (the daemon translated
	 * it back; the relay never changed it), so any number of
	 * handshakes can be in flight per pair. */
	switch (attr) {
	case CM_ATTR_REQ: /* at B: a fresh ID of its own */
		c->hs_id = (c->hs_id + 1) | 0x40000000u;
		cm_mad_init(out, CM_ATTR_REP, 1);
		wire_put32(out + 24, c->hs_id);
		wire_put32(out + 28, local);
		send_mad(c, out);
		break;
	case CM_ATTR_REP: /* at A: RTU then DREQ */
		cm_mad_init(out, CM_ATTR_RTU, 1);
		wire_put32(out + 24, remote);
		wire_put32(out + 28, local);
		send_mad(c, out);
		cm_mad_init(out, CM_ATTR_DREQ, 2);
		wire_put32(out + 24, remote);
		wire_put32(out + 28, local);
		send_mad(c, out);
		break;
	case CM_ATTR_DREQ: /* at B */
		cm_mad_init(out, CM_ATTR_DREP, 2);
		wire_put32(out + 24, remote);
		wire_put32(out + 28, local);
		send_mad(c, out);
		break;
	case CM_ATTR_DREP: /* at A: one handshake done */
		/* The next only while measuring, so that drain() finds the
		 * pairs quiet once the phase is over. */
		if (!measuring)
			break;
		handshakes++;
		hs_start(c);
		break;
	default: break;
	}
}

/* Frames that arrived for c.  An answer sent from on_mad() may find the
 * socket full and pump meanwhile (send_frame()): c's own frames wait
 * until this call has taken the ones it holds. */
static void client_input(struct client *c)
{
	struct proto_frame f;
	uint8_t mad[MAD_SIZE];
	size_t off = 0;
	ssize_t n;

	if (c->in_input)
		return;
	n = read(c->fd, c->rbuf + c->have, sizeof(c->rbuf) - c->have);
	if (n <= 0)
		return;
	c->in_input = 1;
	c->have += (size_t)n;
	while (c->have - off >= PROTO_HDR_SIZE) {
		if (proto_header_decode(c->rbuf + off, RBUF, &f) < 0) {
			fprintf(stderr, "bench: bad frame\n");
			exit(2);
		}
		if (c->have - off < PROTO_HDR_SIZE + f.length)
			break;
		if (f.flags & PROTO_FLAG_REPLY) {
			if (c->inflight)
				c->inflight--;
			if (strstr((const char *)c->rbuf + off + PROTO_HDR_SIZE,
				   "\"ok\":false") &&
			    f.length < 400) {
				fprintf(stderr,
					"bench: %s from client %d (workload %d) refused: %.*s\n",
					cm_attr_name(c->last_attr),
					c->pair * 2 + c->side, (int)wl,
					(int)f.length,
					c->rbuf + off + PROTO_HDR_SIZE);
				exit(2);
			}
		} else if (f.kind == PROTO_KIND_MAD) {
			memcpy(mad,
			       c->rbuf + off + PROTO_HDR_SIZE +
				       PROTO_MAD_ADDR_SIZE,
			       MAD_SIZE);
			on_mad(c, mad);
		}
		off += PROTO_HDR_SIZE + f.length;
	}
	memmove(c->rbuf, c->rbuf + off, c->have - off);
	c->have -= off;
	c->in_input = 0;
}

/* ---- running a workload --------------------------------------------------- */

static int epfd;

static void epoll_all(void)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int i;

	epfd = epoll_create1(EPOLL_CLOEXEC);
	for (i = 0; i < 2 * npairs; i++) {
		ev.data.ptr = &clients[i];
		epoll_ctl(epfd, EPOLL_CTL_ADD, clients[i].fd, &ev);
	}
}

/* Reads what arrives, waiting at most timeout_ns (epoll_wait's
 * milliseconds are too coarse to pace an open loop). */
static void pump_ns(uint64_t timeout_ns)
{
	struct timespec ts = { .tv_sec = (time_t)(timeout_ns / 1000000000u),
			       .tv_nsec = (long)(timeout_ns % 1000000000u) };
	struct epoll_event evs[256];
	int n, i;

	n = epoll_pwait2(epfd, evs, 256, &ts, NULL);
	for (i = 0; i < n; i++)
		client_input(evs[i].data.ptr);
}

static void pump(int timeout_ms)
{
	pump_ns((uint64_t)timeout_ms * 1000000u);
}

/* Until nothing is in flight and nothing arrives for 50 ms (at most 5 s):
 * what one workload sent must not reach the next. */
static void drain(void)
{
	uint64_t seen = 0, now_seen, deadline = now_ns() + 5000000000ull;
	uint64_t quiet_since = now_ns();
	unsigned busy;
	int i;

	while (now_ns() < deadline) {
		pump(5);
		now_seen = 0;
		busy = 0;
		for (i = 0; i < 2 * npairs; i++) {
			now_seen += clients[i].received;
			busy += clients[i].inflight;
		}
		if (now_seen != seen || busy) {
			seen = now_seen;
			quiet_since = now_ns();
		} else if (now_ns() - quiet_since > 50000000ull) {
			return;
		}
	}
	/* A workload that does not stop costs every phase after it 5 s
	 * and leaves its traffic in the next one's figures. */
	fprintf(stderr, "bench: traffic still running 5 s after a phase\n");
}

static int senders_side(void)
{
	return wl == WL_REPLY ? 1 : 0;
}

/* Closed loop: every sender keeps want_inflight MADs in flight for
 * seconds; returns MADs received per second. */
static double run_closed(double seconds)
{
	uint64_t before = 0, after = 0;
	uint8_t mad[MAD_SIZE];
	double t0, t1;
	int i;

	for (i = 0; i < 2 * npairs; i++)
		before += clients[i].received;
	t0 = now_s();
	measuring = 1;
	while ((t1 = now_s()) - t0 < seconds) {
		for (i = 0; i < npairs; i++) {
			struct client *c = &clients[i * 2 + senders_side()];

			while (c->inflight < want_inflight) {
				workload_mad(c, mad);
				send_mad(c, mad);
			}
		}
		pump(1);
	}
	measuring = 0;
	for (i = 0; i < 2 * npairs; i++)
		after += clients[i].received;

	/* Let what is in flight land before the next run. */
	for (i = 0; i < 200; i++)
		pump(1);
	return (double)(after - before) / (t1 - t0);
}

/* A send this late has fallen behind its schedule: the loop is no longer
 * open (a burst of catching up follows), whoever is the slower side. */
#define OPEN_LOOP_LATE_NS 1000000ull

/* When the open loop's MAD number k is due, from its start t0 (ns). */
static uint64_t open_loop_due(uint64_t t0, double rate, uint64_t k)
{
	return t0 + (uint64_t)((double)k * 1e9 / rate);
}

/*
 * Open loop at rate MADs/s for seconds, latency samples in lat[], each
 * from the time its MAD was due to be sent: a send that is late counts
 * against the latency (a generator that timed its samples from the send
 * would leave out exactly the waits it could not keep to).  Returns
 * whether it kept up: sent what was due, no more than 1% of it over a
 * millisecond late, and no more left undelivered at the end than 10 ms
 * of the rate (and a few) would deliver; above saturation the sends fall
 * behind and that backlog grows with the run.
 */
static int run_open(double rate, double seconds)
{
	uint8_t mad[MAD_SIZE];
	uint64_t t0 = now_ns(), end = t0 + (uint64_t)(seconds * 1e9), now;
	uint64_t sent = 0, when, delivered = 0, late = 0;
	int next = 0, i;

	for (i = 0; i < 2 * npairs; i++)
		delivered -= clients[i].received;
	nlat = 0;
	measuring = 1;
	while ((now = now_ns()) < end) {
		while ((when = open_loop_due(t0, rate, sent)) <= now) {
			struct client *c = &clients[next * 2 + senders_side()];

			next = (next + 1) % npairs;
			workload_mad(c, mad);
			wire_put64(mad + TS_OFF, when);
			late += now_ns() > when + OPEN_LOOP_LATE_NS;
			send_mad(c, mad);
			sent++;
		}
		/* Until the next send is due, reading what arrives: sends
		 * evenly spaced, not in bursts a millisecond apart (the last
		 * MAD of a burst measures the burst's queue, in the relay as
		 * in the daemon). */
		now = now_ns();
		pump_ns(when > now ? when - now : 0);
	}
	measuring = 0;
	for (i = 0; i < 2 * npairs; i++)
		delivered += clients[i].received;
	drain();
	return (double)sent >= 0.97 * rate * seconds && late * 100 <= sent &&
	       (double)(sent - delivered) <= 16 + rate * 0.010;
}

/* Whether the open loop keeps up with rate: twice at most, since one
 * stall of this shared machine's can fail a rate that is kept up (and
 * no luck keeps up with one that is not). */
static int open_loop_keeps_up(double rate, double window)
{
	return run_open(rate, window) || run_open(rate, window);
}

/*
 * The highest open-loop rate that is kept up (run_open()), within about
 * 5%: the saturation of the traffic the latency figures measure, one MAD
 * per send spread over the clients.  The closed loops do not measure it:
 * with 16 in flight a client's MADs come in bursts that one read takes,
 * and with one in flight a few pairs are bound by the round trip.
 */
static double open_loop_saturation(double lo, double hi, double window)
{
	int i;

	if (open_loop_keeps_up(hi, window))
		return hi;
	for (i = 0; i < 6 && !open_loop_keeps_up(lo, window); i++) {
		hi = lo;
		lo /= 2;
	}
	for (i = 0; i < 12 && hi > 1.05 * lo; i++) {
		double mid = (lo + hi) / 2;

		if (open_loop_keeps_up(mid, window))
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* per_pair handshakes in flight per pair, each followed by the next. */
static double run_handshakes(double seconds, int per_pair)
{
	double t0;
	int i, k;

	handshakes = 0;
	measuring = 1;
	for (i = 0; i < npairs; i++)
		for (k = 0; k < per_pair; k++)
			hs_start(&clients[i * 2]);
	t0 = now_s();
	while (now_s() - t0 < seconds)
		pump(1);
	measuring = 0;
	t0 = (double)handshakes / (now_s() - t0);
	drain();
	return t0;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct(double p)
{
	size_t i;

	if (nlat == 0)
		return 0;
	i = (size_t)(p * (double)(nlat - 1));
	return (double)lat[i] / 1000.0;
}

/* The socket relay, and with --port the one through the port's umad. */
static struct relay relay, urelay;

/* ---- the daemon ------------------------------------------------------------- */

static struct bench_daemon muxd;
static struct bench_figures_out fig_out;

static void figure(const char *key, double value)
{
	bench_figures_print(&fig_out, key, value);
}

/* The daemon's, the relay's and their ratio (bench_figures_compare()). */
static void compare(const char *what, const char *unit, double mine,
		    double base)
{
	bench_figures_compare(&fig_out, npairs, what, unit, mine, base);
}
static struct bench_daemon against_muxd; /* --against's */
static const char *umad_port; /* --port: a real port instead of a sim one */

/* However the bench ends, the daemons go with it. */
static void daemon_kill(void)
{
	if (muxd.pid > 0)
		kill(muxd.pid, SIGTERM);
	if (against_muxd.pid > 0)
		kill(against_muxd.pid, SIGTERM);
}

/* ---- main ------------------------------------------------------------------- */

static void connect_all(const char *path)
{
	int i;

	for (i = 0; i < npairs; i++) {
		client_open(&clients[2 * i], path, i, 0);
		client_open(&clients[2 * i + 1], path, i, 1);
	}
	epoll_all();
}

static void close_all(void)
{
	int i;

	for (i = 0; i < 2 * npairs; i++)
		close(clients[i].fd);
	close(epfd);
}

/* ---- memory per mapping ------------------------------------------------------ */

/* A field of /proc/PID/status, in kB: RssAnon (the daemon's heap: the
 * table's indexes), RssShmem (the state file, on a tmpfs), or -1. */
/* Every pair holds per_pair connections (two mappings each, one per
 * side), started 16 at a time; the daemon's count must agree.  The
 * daemon's memory once they are: anon and shmem, in kB. */
static void hold_connections(const char *status_sock, uint32_t per_pair,
			     long *anon, long *shmem)
{
	uint64_t deadline = now_ns() + 300000000000ull, want;
	long long have;
	uint32_t done;
	json_t *st;
	int i;

	wl = WL_HOLD;
	hold_per_pair = per_pair;
	for (i = 0; i < npairs; i++) {
		struct client *a = &clients[2 * i];

		while (a->started < per_pair && a->started - a->held < 16) {
			a->started++;
			hs_start(a);
		}
	}
	do {
		pump(10);
		for (done = 0, i = 0; i < npairs; i++)
			done += clients[2 * i].held >= per_pair;
	} while (done < (uint32_t)npairs && now_ns() < deadline);
	drain();
	/* The memory before the status query, whose answer is large for a
	 * moment (the daemon gives it back once sent). */
	*anon = proc_figures_status_kb(muxd.pid, "RssAnon");
	*shmem = proc_figures_status_kb(muxd.pid, "RssShmem");
	want = 2ull * per_pair * (uint64_t)npairs;
	st = status_query(status_sock);
	have = status_int_at(st, "routing.comm_ids");
	json_decref(st);
	if (done < (uint32_t)npairs || have != (long long)want) {
		fprintf(stderr,
			"bench: %u of %d pairs hold %u connections; the daemon has %lld mappings of %llu\n",
			done, npairs, per_pair, have, (unsigned long long)want);
		exit(2);
	}
}

/*
 * The daemon's memory as the table grows to each count of mappings in
 * list (established connections between 250 pairs of clients, default
 * limits): bytes per mapping of its own memory (RssAnon, from the
 * daemon's size with the clients connected and no mapping), bytes per
 * mapping added since the previous count (what the table's growth costs,
 * without the fixed part: flat when it stays the same), and the state
 * file's pages per mapping (RssShmem).
 */
static void memory_per_mapping(const char *bin, const char *dir, char *list)
{
	char key[96], *tok, *save = NULL;
	long anon0, shmem0, anon, shmem, anon_prev;
	unsigned long want, prev = 0;

	npairs = 250;
	use_daemon = 1;
	bench_daemon_start(&muxd, bin, dir, npairs, umad_port, NULL);
	connect_all(muxd.sock);
	drain();
	anon0 = anon_prev = proc_figures_status_kb(muxd.pid, "RssAnon");
	shmem0 = proc_figures_status_kb(muxd.pid, "RssShmem");
	for (tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		want = strtoul(tok, NULL, 10);
		if (want < 2ul * (unsigned long)npairs || want <= prev) {
			fprintf(stderr,
				"bench: --mappings: growing counts of at least %d\n",
				2 * npairs);
			exit(2);
		}
		hold_connections(muxd.status,
				 (uint32_t)(want / 2 / (unsigned long)npairs),
				 &anon, &shmem);
		want = 2ul * hold_per_pair * (unsigned long)npairs;
		snprintf(key, sizeof(key),
			 "mappings=%lu daemon_bytes_per_mapping", want);
		figure(key, (double)(anon - anon0) * 1024.0 / (double)want);
		snprintf(key, sizeof(key),
			 "mappings=%lu daemon_bytes_per_added_mapping", want);
		figure(key, (double)(anon - anon_prev) * 1024.0 /
				    (double)(want - prev));
		snprintf(key, sizeof(key),
			 "mappings=%lu state_file_bytes_per_mapping", want);
		figure(key, (double)(shmem - shmem0) * 1024.0 / (double)want);
		anon_prev = anon;
		prev = want;
	}
	close_all();
	bench_daemon_stop(&muxd);
}

/* For comm-ID routed replies each A sends a REQ on each of its
 * REQ_CONNS connections; its B learns A's host comm IDs from them (the
 * daemon translated them; the relay did not). */
static void setup_replies(void)
{
	uint8_t mad[MAD_SIZE];
	uint64_t deadline = now_ns() + 5000000000ull;
	unsigned k;
	int i, done;

	wl = WL_REQ; /* B only counts (and learns A's comm IDs) */
	for (i = 0; i < npairs; i++)
		for (k = 0; k < REQ_CONNS; k++) {
			cm_mad_init(mad, CM_ATTR_REQ, ++clients[2 * i].tid);
			cm_field_set(mad, CM_REQ_LOCAL_COMM_ID,
				     req_comm_id(i, k));
			cm_set_gid(mad, CM_REQ_OFF_PRIMARY_LOCAL_GID,
				   &clients[2 * i].gid);
			cm_set_gid(mad, CM_REQ_OFF_PRIMARY_REMOTE_GID,
				   &clients[2 * i + 1].gid);
			send_mad(&clients[2 * i], mad);
		}
	do {
		pump(10);
		for (done = 0, i = 0; i < npairs; i++)
			done += clients[2 * i + 1].npeers == REQ_CONNS;
	} while (done < npairs && now_ns() < deadline);
	if (done < npairs) {
		fprintf(stderr,
			"bench: %d of %d pairs' partners learnt all %d REQs\n",
			done, npairs, REQ_CONNS);
		exit(2);
	}
}

/* What the relay does (the workers: client sockets, routing) and the
 * umad I/O it does not (the threads that write and read the port). */
static const char *const role_thread[ROLES] = { "muxd-worker", "muxd-umad-send",
						"muxd-ports" };
static const char *const role_name[ROLES] = { "workers", "umad_senders",
					      "port_thread" };

static int ulong_cmp(const void *a, const void *b)
{
	unsigned long x = *(const unsigned long *)a,
		      y = *(const unsigned long *)b;

	return x < y ? -1 : x > y;
}

/* One pair's handshakes against the machine's wake-up: a handshake is
 * four hops (REQ, REP, RTU with DREQ, DREP), each a client's write that
 * wakes a relay or daemon thread and that thread's write that wakes the
 * client, the two threads' round trip that round_trip_us() times alone. */
/* The median of the rounds' round trips (sorting them), or the failed
 * round's negative errno value. */
static double round_trip_median(double *trip_us, int rounds)
{
	qsort(trip_us, (size_t)rounds, sizeof(*trip_us), bench_figures_dbl_cmp);
	return trip_us[rounds / 2];
}

/* Handshakes a second if each took four round trips of trip_us and
 * nothing else. */
static double handshakes_at_round_trip(double trip_us)
{
	return 1e6 / (4 * trip_us);
}

static void round_trip_figures(double *trip_us, int rounds, double hs,
			       double relay_hs)
{
	double trip, at_trip;

	trip = round_trip_median(trip_us, rounds);
	if (trip <= 0) {
		fprintf(stderr, "bench: round trip: %s\n",
			strerror((int)-trip));
		exit(2);
	}
	at_trip = handshakes_at_round_trip(trip);
	figure("pairs=1 thread_round_trip_us", trip);
	figure("pairs=1 handshakes_at_thread_round_trip_per_s", at_trip);
	figure("pairs=1 handshakes_vs_thread_round_trip", hs / at_trip);
	figure("pairs=1 handshakes_relay_vs_thread_round_trip",
	       relay_hs / at_trip);
}

/* With $BENCH_PHASES set, each phase says when it starts on stderr, so
 * that a profiler can be pointed at one (scripts/bench-profile.sh). */
static void phase(const char *name)
{
	if (getenv("BENCH_PHASES"))
		fprintf(stderr, "bench: phase %s %s %d\n",
			use_daemon ? "daemon" : "relay", name, npairs);
}

/* The MADs delivered to every client so far. */
static uint64_t delivered(void)
{
	uint64_t n = 0;
	int i;

	for (i = 0; i < 2 * npairs; i++)
		n += clients[i].received;
	return n;
}

struct cpu_probe {
	pid_t pid, tid;
};

/* What phase_run() reads before and after. */
struct cpu_sample {
	uint64_t mads;
	struct proc_sched all, role[ROLES];
};

static void cpu_sample(const struct cpu_probe *cp, int by_role,
		       struct cpu_sample *s)
{
	int i;

	s->mads = delivered();
	s->all = proc_figures_sched(cp->pid, cp->tid);
	for (i = 0; by_role && i < ROLES; i++)
		s->role[i] = proc_figures_sched_named(cp->pid, role_thread[i]);
}

/* One closed-loop phase: its rate (run() of secs), and the CPU the
 * measured process (or thread) spent per MAD delivered meanwhile; with
 * pc, also its runs, and for the daemon (tid 0) both by role. */
static double phase_run(const struct cpu_probe *cp, const char *name,
			double (*run)(double, unsigned), double secs,
			unsigned arg, double *cpu_us, struct phase_cost *pc)
{
	int by_role = pc && cp->tid == 0;
	struct cpu_sample a, b;
	double rate, mads;
	int i;

	phase(name);
	cpu_sample(cp, by_role, &a);
	rate = run(secs, arg);
	cpu_sample(cp, by_role, &b);
	mads = b.mads > a.mads ? (double)(b.mads - a.mads) : 0;
	*cpu_us = mads ? (double)(b.all.cpu_ns - a.all.cpu_ns) / 1000.0 / mads
		       : 0;
	if (pc == NULL || mads == 0)
		return rate;
	pc->runs = (double)(b.all.runs - a.all.runs) / mads;
	for (i = 0; by_role && i < ROLES; i++) {
		pc->cpu_role[i] = (double)(b.role[i].cpu_ns -
					   a.role[i].cpu_ns) /
				  1000.0 / mads;
		pc->runs_role[i] = (double)(b.role[i].runs - a.role[i].runs) /
				   mads;
	}
	return rate;
}

static double closed_run(double secs, unsigned inflight)
{
	want_inflight = inflight;
	return run_closed(secs);
}

static double handshakes_run(double secs, unsigned inflight)
{
	return run_handshakes(secs, (int)inflight);
}

static void measure(const char *path, pid_t cpu_pid, pid_t cpu_tid, double secs,
		    struct run_figures *r, int with_latency)
{
	const struct cpu_probe cp = { cpu_pid, cpu_tid };
	uint64_t st0, st1, tot0, tot1;

	/* What a phase leaves unmeasured (a relay has no roles, a phase
	 * may deliver nothing) is 0 in the medians, not stack garbage. */
	memset(r, 0, sizeof(*r));
	connect_all(path);
	wl = WL_REQ;
	r->req1 = phase_run(&cp, "req_by_gid_1_inflight", closed_run, secs, 1,
			    &r->cpu_req1, NULL);
	r->req16 = phase_run(&cp, "req_by_gid_16_inflight", closed_run, secs,
			     16, &r->cpu_req16, &r->req16_cost);
	setup_replies();
	/* In the daemon the REQ made B's peer record; B's MRAs answer it. */
	wl = WL_REPLY;
	r->rep1 = phase_run(&cp, "reply_by_comm_id_1_inflight", closed_run,
			    secs, 1, &r->cpu_rep1, NULL);
	r->rep16 = phase_run(&cp, "reply_by_comm_id_16_inflight", closed_run,
			     secs, 16, &r->cpu_rep16, &r->rep16_cost);
	drain();
	wl = WL_REQ_FRESH;
	r->fresh1 = phase_run(&cp, "req_fresh_1_inflight", closed_run, secs, 1,
			      &r->cpu_fresh1, NULL);
	r->fresh16 = phase_run(&cp, "req_fresh_16_inflight", closed_run, secs,
			       16, &r->cpu_fresh16, &r->fresh16_cost);
	drain();
	if (with_latency) {
		wl = WL_REQ;
		phase("open_loop_saturation");
		r->open_sat = open_loop_saturation(r->req1 / 2, r->req16,
						   secs / 4);
		phase("latency");
		proc_figures_steal_ticks(&st0, &tot0);
		run_open(r->open_sat / 2, secs);
		proc_figures_steal_ticks(&st1, &tot1);
		r->steal_pct = tot1 > tot0 ? 100.0 * (double)(st1 - st0) /
						     (double)(tot1 - tot0)
					   : 0;
		qsort(lat, nlat, sizeof(*lat), u64_cmp);
		r->p50 = pct(0.5);
		r->p99 = pct(0.99);
		r->p999 = pct(0.999);
	}
	wl = WL_HANDSHAKE;
	r->hs = phase_run(&cp, "handshakes", handshakes_run, secs, 1,
			  &r->cpu_hs, &r->hs_cost);
	r->hs16 = phase_run(&cp, "handshakes_16_inflight", handshakes_run, secs,
			    16, &r->cpu_hs16, NULL);
	phase("end");
	close_all();
}

/*
 * One pair's handshakes through a daemon whose one worker polls 50 us
 * after input (--poll-us) instead of sleeping at once, so that a hop's
 * MAD finds it running: rounds alternate with the relay's handshakes and
 * the bare round trip.  One worker, because on two CPUs two polling
 * workers leave the load client no CPU of its own.
 */
static void polling_handshakes(const char *bin, const char *dir, int rounds,
			       double secs)
{
	static const char *const poll_args[] = { "--workers", "1", "--poll-us",
						 "50", NULL };
	const struct cpu_probe relay_cp = { getpid(), relay.tid };
	struct run_figures pr[MAX_ROUNDS], br[MAX_ROUNDS], p, b;
	struct cpu_probe daemon_cp;
	double trip_us[MAX_ROUNDS], trip, at_trip;
	int r;

	bench_daemon_start(&muxd, bin, dir, 1, umad_port, poll_args);
	daemon_cp.pid = muxd.pid;
	daemon_cp.tid = 0;
	wl = WL_HANDSHAKE;
	for (r = 0; r < rounds; r++) {
		memset(&pr[r], 0, sizeof(pr[r]));
		memset(&br[r], 0, sizeof(br[r]));
		use_daemon = 0;
		connect_all(relay.path);
		br[r].hs = phase_run(&relay_cp, "handshakes", handshakes_run,
				     secs, 1, &br[r].cpu_hs, NULL);
		close_all();
		use_daemon = 1;
		connect_all(muxd.sock);
		pr[r].hs = phase_run(&daemon_cp, "handshakes_polling",
				     handshakes_run, secs, 1, &pr[r].cpu_hs,
				     NULL);
		close_all();
		trip_us[r] = round_trip_us(secs / 4);
	}
	bench_daemon_stop(&muxd);
	bench_figures_median(pr, rounds, &p);
	bench_figures_median(br, rounds, &b);
	trip = round_trip_median(trip_us, rounds);
	at_trip = trip > 0 ? handshakes_at_round_trip(trip) : 0;
	figure("pairs=1 handshakes_polling_per_s", p.hs);
	figure("pairs=1 handshakes_polling_relay_per_s", b.hs);
	figure("pairs=1 handshakes_polling_vs_relay", p.hs / b.hs);
	figure("pairs=1 handshakes_polling_thread_round_trip_us", trip);
	if (at_trip > 0)
		figure("pairs=1 handshakes_polling_vs_thread_round_trip",
		       p.hs / at_trip);
	figure("pairs=1 daemon_cpu_us_per_mad_handshakes_polling", p.cpu_hs);
	figure("pairs=1 relay_cpu_us_per_mad_handshakes_polling", b.cpu_hs);
}

/* One measurement of the daemon, with --capture a capture of every MAD
 * running meanwhile: the MADs its reader read. */
static unsigned long measure_daemon(const char *admin, double secs,
				    struct run_figures *r)
{
	struct bench_capture cap = { .fd = -1 };

	if (admin && bench_capture_start(&cap, admin) < 0)
		exit(2);
	measure(muxd.sock, muxd.pid, 0, secs, r, 1);
	return bench_capture_stop(&cap);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "daemon", required_argument, NULL, 'd' },
		{ "seconds", required_argument, NULL, 's' },
		{ "pairs", required_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "quick", no_argument, NULL, 'q' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "port", required_argument, NULL, 'P' },
		{ "gid-base", required_argument, NULL, 'G' },
		{ "mappings", required_argument, NULL, 'm' },
		{ "against", required_argument, NULL, 'a' },
		{ "capture", no_argument, NULL, 'c' },
		{ "daemon-arg", required_argument, NULL, 'D' },
		{ NULL, 0, NULL, 0 },
	};
	const char *bin = getenv("RDMACM_MUXD") ? getenv("RDMACM_MUXD")
						: "build/rdmacm-muxd";
	char pairs_list[128] = "1,8,64,1024", dir[] = "/tmp/rcm-bench.XXXXXX";
	char mappings_list[128] = "125000,250000,500000,1000000";
	char rm_dir[160], key[96], *tok, *save = NULL;
	struct run_figures d, b, u, q, dr[MAX_ROUNDS], br[MAX_ROUNDS],
		ur[MAX_ROUNDS], ar[MAX_ROUNDS];
	/* The measured daemon's own arguments: the capture's socket, then
	 * --daemon-arg's (as the lab's --ud-sender). */
	const char *against_bin = NULL, *daemon_args[16] = { NULL };
	int ndargs = 2;
	char against_dir[64], admin[80];
	unsigned long captured[MAX_ROUNDS];
	int with_capture = 0;
	double trip_us[MAX_ROUNDS];
	double run_req16[MAX_PAIR_COUNTS], run_relay_req16[MAX_PAIR_COUNTS];
	double run_p99[MAX_PAIR_COUNTS], run_relay_p99[MAX_PAIR_COUNTS];
	double peak_req16 = 0, peak_relay_req16 = 0;
	int run_pairs[MAX_PAIR_COUNTS], nrun = 0;
	struct rlimit rl;
	double secs = 1.0;
	int c, r, rounds = 3;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'd': bin = optarg; break;
		case 's': secs = atof(optarg); break;
		case 'p':
			snprintf(pairs_list, sizeof(pairs_list), "%s", optarg);
			break;
		case 'j': fig_out.as_json = 1; break;
		case 'q':
			secs = 0.2;
			rounds = 1;
			snprintf(pairs_list, sizeof(pairs_list), "1,8");
			snprintf(mappings_list, sizeof(mappings_list),
				 "2000,4000");
			break;
		case 'm':
			snprintf(mappings_list, sizeof(mappings_list), "%s",
				 optarg);
			break;
		case 'r': rounds = atoi(optarg); break;
		case 'P': umad_port = optarg; break;
		case 'G': gid_base = optarg; break;
		case 'a': against_bin = optarg; break;
		case 'c': with_capture = 1; break;
		case 'D':
			if (ndargs >= 15) {
				fprintf(stderr,
					"bench: too many --daemon-arg\n");
				return 2;
			}
			daemon_args[ndargs++] = optarg;
			break;
		default: return 2;
		}
	}
	if (with_capture && against_bin == NULL) {
		fprintf(stderr, "bench: --capture is measured --against\n");
		return 2;
	}
	if (against_bin && umad_port) {
		/* A port's CM agent is one process's at a time. */
		fprintf(stderr, "bench: --against runs on a sim port only\n");
		return 2;
	}
	if (rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "bench: --rounds 1..%d\n", MAX_ROUNDS);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	/* The open loop's sends are due every few microseconds: the
	 * default 50 us of timer slack would bunch them (and its samples
	 * would measure the bunching). */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	atexit(daemon_kill);
	/* 2,048 clients and as many relay sockets; the daemon inherits it. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (mkdtemp(dir) == NULL)
		die("mkdtemp");
	snprintf(against_dir, sizeof(against_dir), "%s/against", dir);
	if (against_bin && mkdir(against_dir, 0700) < 0)
		die("mkdir");
	snprintf(admin, sizeof(admin), "%s/admin.sock", dir);
	if (with_capture) {
		daemon_args[0] = "--admin-socket";
		daemon_args[1] = admin;
	}
	fig_out.results = json_object();
	cap_lat = 4000000;
	lat = malloc(cap_lat * sizeof(*lat));
	relay_start(&relay, dir, "relay", gid_base);
	if (umad_port) {
		urelay.ur = umad_relay_open(umad_port);
		if (urelay.ur == NULL)
			return 1;
		relay_start(&urelay, dir, "umad-relay", gid_base);
	}
	own_qpn = own_qp(umad_port);
	if (own_qpn == 0)
		die("own_qp");
	for (tok = strtok_r(pairs_list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		npairs = atoi(tok);
		if (npairs < 1 || npairs > MAX_PAIRS)
			return 2;
		use_daemon = 1;
		bench_daemon_start(&muxd, bin, dir, npairs, umad_port,
				   with_capture ? daemon_args
						: daemon_args + 2);
		if (against_bin)
			bench_daemon_start(&against_muxd, against_bin,
					   against_dir, npairs, NULL, NULL);
		/* Rounds alternate the two, so that the machine's drift
		 * (it is shared) hits both alike; the median of each. */
		for (r = 0; r < rounds; r++) {
			use_daemon = 0;
			measure(relay.path, getpid(), relay.tid, secs, &br[r],
				1);
			use_daemon = 1;
			/* The two daemons take turns going first. */
			if (against_bin && r % 2)
				measure(against_muxd.sock, against_muxd.pid, 0,
					secs, &ar[r], 1);
			captured[r] = measure_daemon(with_capture ? admin
								  : NULL,
						     secs, &dr[r]);
			if (against_bin && r % 2 == 0)
				measure(against_muxd.sock, against_muxd.pid, 0,
					secs, &ar[r], 1);
			if (npairs == 1)
				trip_us[r] = round_trip_us(secs / 4);
			if (urelay.ur == NULL)
				continue;
			use_daemon = 0;
			measure(urelay.path, getpid(), urelay.tid, secs, &ur[r],
				0);
		}
		bench_figures_median(dr, rounds, &d);
		bench_figures_median(br, rounds, &b);
		if (urelay.ur)
			bench_figures_median(ur, rounds, &u);
#define FIG(name, v)                                                     \
	do {                                                             \
		snprintf(key, sizeof(key), "pairs=%d %s", npairs, name); \
		figure(key, v);                                          \
	} while (0)
#define CPU_FIG(phase_name, field)                                 \
	do {                                                       \
		FIG("daemon_cpu_us_per_mad_" phase_name, d.field); \
		FIG("relay_cpu_us_per_mad_" phase_name, b.field);  \
	} while (0)
		compare("req_by_gid_1_inflight", "mads_per_s", d.req1, b.req1);
		compare("req_by_gid_16_inflight", "mads_per_s", d.req16,
			b.req16);
		compare("reply_by_comm_id_1_inflight", "mads_per_s", d.rep1,
			b.rep1);
		compare("reply_by_comm_id_16_inflight", "mads_per_s", d.rep16,
			b.rep16);
		compare("req_fresh_1_inflight", "mads_per_s", d.fresh1,
			b.fresh1);
		compare("req_fresh_16_inflight", "mads_per_s", d.fresh16,
			b.fresh16);
		compare("handshakes", "per_s", d.hs, b.hs);
		if (npairs == 1)
			round_trip_figures(trip_us, rounds, d.hs, b.hs);
		/* A handshake is five MADs: against the relay's frame rate. */
		FIG("handshakes_16_inflight_vs_relay_frames", d.hs16 / b.req16);
		compare("handshakes_16_inflight", "per_s", d.hs16, b.hs16);
		compare("open_loop_saturation", "mads_per_s", d.open_sat,
			b.open_sat);
		FIG("latency_p50_us", d.p50);
		FIG("latency_p99_us", d.p99);
		FIG("latency_p999_us", d.p999);
		FIG("relay_latency_p50_us", b.p50);
		FIG("relay_latency_p99_us", b.p99);
		FIG("relay_latency_p999_us", b.p999);
		/* What the hypervisor took meanwhile: a VM's tail. */
		FIG("latency_steal_pct", d.steal_pct);
		FIG("relay_latency_steal_pct", b.steal_pct);
		/* CPU per MAD delivered, each phase on its own. */
		CPU_FIG("req_by_gid_1_inflight", cpu_req1);
		CPU_FIG("req_by_gid_16_inflight", cpu_req16);
		CPU_FIG("reply_by_comm_id_1_inflight", cpu_rep1);
		CPU_FIG("reply_by_comm_id_16_inflight", cpu_rep16);
		CPU_FIG("req_fresh_1_inflight", cpu_fresh1);
		CPU_FIG("req_fresh_16_inflight", cpu_fresh16);
		CPU_FIG("handshakes", cpu_hs);
		CPU_FIG("handshakes_16_inflight", cpu_hs16);
		FIG("relay_runs_per_mad_req_fresh_16_inflight",
		    b.fresh16_cost.runs);
		FIG("relay_runs_per_mad_handshakes", b.hs_cost.runs);
		/* Through the port, against the relay that makes the same
		 * umad writes and reads. */
		if (urelay.ur)
			bench_figures_umad(&fig_out, npairs, &d, &u);
		bench_figures_roles(&fig_out, npairs, &d, role_name);
		FIG("daemon_peak_rss_kb",
		    (double)proc_figures_status_kb(muxd.pid, "VmHWM"));
		if (nrun < MAX_PAIR_COUNTS) {
			run_pairs[nrun] = npairs;
			run_p99[nrun] = d.p99;
			run_relay_p99[nrun] = b.p99;
			run_req16[nrun] = d.req16;
			run_relay_req16[nrun++] = b.req16;
			if (d.req16 > peak_req16)
				peak_req16 = d.req16;
			if (b.req16 > peak_relay_req16)
				peak_relay_req16 = b.req16;
		}
		bench_daemon_stop(&muxd);
		if (against_bin) {
			bench_daemon_stop(&against_muxd);
			bench_figures_ratio(dr, ar, rounds, &q);
			bench_figures_against(&fig_out, npairs, &q);
		}
		if (with_capture) {
			qsort(captured, (size_t)rounds, sizeof(captured[0]),
			      ulong_cmp);
			/* A capture that saw nothing measured nothing. */
			if (captured[0] == 0) {
				fprintf(stderr,
					"bench: a capture read no MAD "
					"(see %s/daemon.log)\n",
					dir);
				return 1;
			}
			FIG("capture_mads_read", (double)captured[rounds / 2]);
		}
		if (npairs == 1 && !umad_port && !against_bin)
			polling_handshakes(bin, dir, rounds, secs);
		if (umad_port)
			FIG("sends_waited_for_their_tid",
			    (double)bench_daemon_tid_waits(dir));
	}
	/* How each pair count holds up against the best of this run (the
	 * issue's "at 1,024 pairs, 80% of peak"), the relay's beside it. */
	for (r = 0; r < nrun; r++) {
		snprintf(key, sizeof(key),
			 "pairs=%d req_by_gid_16_inflight_of_peak",
			 run_pairs[r]);
		figure(key, run_req16[r] / peak_req16);
		snprintf(key, sizeof(key),
			 "pairs=%d req_by_gid_16_inflight_relay_of_peak",
			 run_pairs[r]);
		figure(key, run_relay_req16[r] / peak_relay_req16);
		/* The "p99 within 2x from 1 to 1,024 pairs". */
		if (run_pairs[0] != 1 || run_p99[0] <= 0 ||
		    run_relay_p99[0] <= 0)
			continue;
		snprintf(key, sizeof(key), "pairs=%d latency_p99_vs_1_pair",
			 run_pairs[r]);
		figure(key, run_p99[r] / run_p99[0]);
		snprintf(key, sizeof(key),
			 "pairs=%d relay_latency_p99_vs_1_pair", run_pairs[r]);
		figure(key, run_relay_p99[r] / run_relay_p99[0]);
	}
	/* The memory a sim port's daemon holds per mapping (not on a real
	 * port: the lab's VM has no room for a million). */
	if (!umad_port && !against_bin && strcmp(mappings_list, "none") != 0)
		memory_per_mapping(bin, dir, mappings_list);
	relay_stop(&relay);
	relay_stop(&urelay);
	if (fig_out.as_json) {
		json_dumpf(fig_out.results, stdout,
			   JSON_INDENT(1) | JSON_SORT_KEYS);
		printf("\n");
	}
	snprintf(rm_dir, sizeof(rm_dir), "rm -rf %s", dir);
	if (system(rm_dir) != 0)
		return 1;
	return 0;
}
