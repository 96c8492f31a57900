// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The soak: rdmacm-muxd on a sim port for SOAK_SECONDS (default 600),
 * with 1,000 clients on libmuxbe, each keeping connections to a scripted
 * remote CM on the sim fabric going (REQ, REP, RTU, then DREQ and DREP
 * from either side), clients that crash (closed without a word) and come
 * back, and a kill -9 of the daemon and a restart halfway; beside them,
 * QEMU processes (QEMU's rdmacm-mux protocol) that hold connections
 * across that restart, connecting again as QEMU's reconnect=1 does, and
 * end them afterwards.  It asserts:
 *   - the daemon's RSS grows by less than 5% from the end of warm-up to
 *     the end of each half (before and after the restart);
 *   - every MAD reaches the right side with the right IDs, and every
 *     connection established before the restart is torn down afterwards
 *     with the right IDs on both sides (none lost);
 *   - drops are only of the kinds the daemon's policy makes (a client
 *     gone, IDs no longer known), all counted;
 *   - no send is refused, but for an answer that a message of the peer's
 *     or a timer overtook (at most 1 in 10,000 MADs);
 *   - after all clients leave: no mapping, no GID, no client, and as many
 *     descriptors as before they came.
 * One "soak: KEY VALUE" line per figure; exit status 0 when all hold.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

#include "backend/muxbe.h"
#include "common/cm_mad.h"
#include "common/gid.h"
#include "common/wire.h"
#include "mux/sim_fabric.h"
#include "protocol/qemu_msg.h"
#include "tests/lib/own_qp.h"
#include "tests/lib/proc_figures.h"
#include "tests/lib/status_query.h"

#define NCLIENTS 1000
#define NQEMU 8      /* QEMU processes */
#define QEMU_CONNS 4 /* connections each holds across the restart */
#define SLOTS 4      /* connections per client at once */
#define PEER_GID "fd99::1"
#define PEER_MAX 65536 /* the peer's connection records */
/* A DREQ goes again every second, up to DREQ_TRIES times, as a CM's do
 * (the sim wire drops what a full queue cannot take); a connection
 * with no answer by GIVE_UP_MS is given up. */
#define DREQ_TRIES 8
#define GIVE_UP_MS 10000

enum slot_state { S_IDLE, S_REQ, S_EST, S_DREQ };

struct slot {
	enum slot_state st;
	uint32_t guest, peer;
	uint64_t at, hold_ms;
	int tries;          /* DREQ retransmissions */
	int before_restart; /* established before it: must end well */
};

struct client {
	struct muxbe *mb;
	int idx;
	uint8_t gid[16];
	uint16_t port;
	uint32_t next_id;
	struct slot s[SLOTS];
	int down; /* link down (daemon restarting) */
	uint8_t bufs[8][MUXBE_RECV_BUF_MIN];
};

struct peer_conn {
	uint32_t host, peer;
	int used, est;
	int rep_tries;
	uint64_t rep_at;
	uint8_t client_gid[16];
};

/* SOAK_DEBUG: why the peer forgot a connection, by host ID. */
struct forgot {
	uint32_t host;
	int why;         /* the attribute that ended it */
	int dreqs_after; /* DREQs for it the peer saw afterwards */
	uint64_t at;
};

struct soak {
	struct forgot forgot[PEER_MAX];
	char dir[32], sock[64], status[64], fabric[64], log[64], bin[256];
	pid_t pid;
	int ep;
	int peer_fd;
	uint8_t peer_gid[16];
	uint32_t peer_next;
	struct peer_conn pc[PEER_MAX];
	struct client c[NCLIENTS];
	uint64_t now;
	/* figures */
	uint64_t mads_out, mads_in, established, torn_down, crashes;
	uint64_t misrouted, send_refused, must_verify, verified;
	uint64_t lost_reported, send_reset, retransmit_late, send_raced;
	_Atomic uint64_t wrong_ids, peer_dreq, rep_resent;
	struct refusal {
		uint16_t attr;
		int status;
		uint64_t count;
		double first_s; /* seconds into the run */
		char msg[160];
	} refusals[16];
	size_t nrefusals;
	uint64_t start_ms, restart_ms;
	unsigned peer_scan;
	pthread_t peer_thread;
	atomic_int peer_stop;
	int failed;
	char qemu_sock[64];
	pid_t qemu_pid[NQEMU];
	int qemu_ready[NQEMU], qemu_go[NQEMU]; /* pipes' ends */
};

static struct soak S;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void check(int ok, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...)
{
	va_list ap;

	if (ok)
		return;
	va_start(ap, fmt);
	fprintf(stderr, "soak: FAIL: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	S.failed = 1;
}

static void die(const char *what)
{
	fprintf(stderr, "soak: %s: %s\n", what, strerror(errno));
	if (S.pid > 0)
		kill(S.pid, SIGKILL);
	exit(1);
}

/* ---- the daemon --------------------------------------------------------- */

static json_t *status(void)
{
	return status_query(S.status);
}

static long long status_int(const char *path)
{
	json_t *j = status();
	long long v = status_int_at(j, path);

	json_decref(j);
	return v;
}

static void daemon_start(void)
{
	char gids[64];
	int fd, i;

	char qemu[96];

	snprintf(gids, sizeof(gids), "--sim-port=sim0=fd00::1*%d",
		 NCLIENTS + NQEMU);
	snprintf(qemu, sizeof(qemu), "--qemu-socket=sim0=%s", S.qemu_sock);
	S.pid = fork();
	if (S.pid < 0)
		die("fork");
	if (S.pid == 0) {
		fd = open(S.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(S.bin, S.bin, "--config", "none", "-s", S.sock, "-S",
		      S.status, "--sim-fabric", S.fabric, gids, qemu,
		      "--max-clients=2048", "--max-clients-per-uid=2048",
		      "--timewait-ms=500", "--handshake-timeout-ms=5000",
		      "--resume-grace-ms=10000", (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 500; i++) {
		json_t *j = status();

		if (j && status_int_at(j, "daemon.pid") == S.pid) {
			json_decref(j);
			return;
		}
		json_decref(j);
		usleep(10000);
	}
	errno = ETIMEDOUT;
	die("daemon start");
}

/* ---- the remote CM on the sim wire --------------------------------------- */

static void peer_open(void)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct gid g;
	int sz = 8 << 20;

	gid_parse(PEER_GID, &g);
	memcpy(S.peer_gid, g.raw, 16);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s/peer.sock", S.fabric);
	S.peer_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	setsockopt(S.peer_fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	setsockopt(S.peer_fd, SOL_SOCKET, SO_SNDTIMEO,
		   &(struct timeval){ 0, 200000 }, sizeof(struct timeval));
	unlink(sun.sun_path);
	if (bind(S.peer_fd, (struct sockaddr *)&sun, sizeof(sun)) < 0)
		die("peer bind");
}

static void peer_send(const uint8_t *dst_gid, const uint8_t *mad)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	uint8_t buf[SIM_DGRAM_MAX];
	struct proto_mad m;
	int len;

	memset(&m, 0, sizeof(m));
	m.addr.flags = PROTO_MAD_F_GRH;
	m.addr.hop_limit = 64;
	m.addr.remote_qpn = GSI_QPN;
	m.addr.qkey = GSI_QKEY;
	memcpy(m.addr.local_gid, S.peer_gid, 16);
	memcpy(m.addr.remote_gid, dst_gid, 16);
	m.mad_len = MAD_SIZE;
	memcpy(m.mad, mad, MAD_SIZE);
	len = sim_dgram_encode(&m, buf, sizeof(buf));
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s/sim0.sock", S.fabric);
	/* The remote host's wire to the daemon does not lose: a full daemon
	 * queue makes the peer wait (up to its send timeout), so that what
	 * this run checks is the daemon, not a simulated congestion.  The
	 * daemon's own sends to a full peer are dropped, as its sim port
	 * does (wire_dropped), and the CMs retransmit. */
	sendto(S.peer_fd, buf, (size_t)len, 0, (struct sockaddr *)&sun,
	       sizeof(sun));
}

static void mad(uint8_t *m, uint16_t attr, uint32_t local, uint32_t remote)
{
	cm_mad_init(m, attr, 0x5000000000ull | local);
	wire_put32(m + MAD_HDR_SIZE, local);
	wire_put32(m + MAD_HDR_SIZE + 4, remote);
}

static struct peer_conn *peer_find(uint32_t host)
{
	struct peer_conn *p = &S.pc[host % PEER_MAX];
	unsigned i;

	for (i = 0; i < 64; i++, p = &S.pc[(host + i) % PEER_MAX])
		if (p->used && p->host == host)
			return p;
	return NULL;
}

static struct peer_conn *peer_new(uint32_t host)
{
	unsigned i;

	for (i = 0; i < 64; i++) {
		struct peer_conn *p = &S.pc[(host + i) % PEER_MAX];

		if (!p->used) {
			memset(p, 0, sizeof(*p));
			p->used = 1;
			p->host = host;
			return p;
		}
	}
	return NULL;
}

static void peer_forget(struct peer_conn *p, int why)
{
	struct forgot *f = &S.forgot[p->host % PEER_MAX];

	f->host = p->host;
	f->why = why;
	f->dreqs_after = 0;
	f->at = now_ms();
	p->used = 0;
}

static void peer_input(void)
{
	uint8_t buf[SIM_DGRAM_MAX + 1], out[MAD_SIZE];
	struct proto_mad m;
	struct peer_conn *p;
	uint32_t local, remote;
	ssize_t n;

	while ((n = recv(S.peer_fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
		if (sim_dgram_decode(buf, (size_t)n, &m) < 0 ||
		    memcmp(m.addr.remote_gid, S.peer_gid, 16) != 0)
			continue;
		local = wire_get32(m.mad + MAD_HDR_SIZE);
		remote = wire_get32(m.mad + MAD_HDR_SIZE + 4);
		switch (cm_mad_attr_id(m.mad)) {
		case CM_ATTR_REQ:
			p = peer_find(local);
			if (p == NULL && (p = peer_new(local)) != NULL) {
				p->peer = ++S.peer_next ? S.peer_next
							: ++S.peer_next;
				memcpy(p->client_gid, m.addr.local_gid, 16);
			}
			if (p) { /* a retransmitted REQ: the same REP */
				mad(out, CM_ATTR_REP, p->peer, local);
				peer_send(m.addr.local_gid, out);
				p->rep_at = now_ms();
			}
			break;
		case CM_ATTR_RTU:
			p = peer_find(local);
			if (p && p->peer == remote)
				p->est = 1;
			break;
		case CM_ATTR_DREQ:
			p = peer_find(local);
			if (p && p->peer != remote)
				atomic_fetch_add(&S.wrong_ids, 1);
			mad(out, CM_ATTR_DREP, remote, local);
			peer_send(m.addr.local_gid, out);
			if (p)
				peer_forget(p, CM_ATTR_DREQ);
			else if (S.forgot[local % PEER_MAX].host == local)
				S.forgot[local % PEER_MAX].dreqs_after++;
			break;
		case CM_ATTR_DREP:
		case CM_ATTR_REJ:
			p = peer_find(local);
			if (p)
				peer_forget(p, cm_mad_attr_id(m.mad));
			break;
		default: break;
		}
	}
}

/* Now and then the peer ends a connection itself; and, as a CM does, it
 * sends its REP again while no RTU comes (a lost one, or one that was in
 * flight when the daemon died). */
/* GIDs above the native clients' are the QEMU processes'. */
static int peer_is_qemus(const struct peer_conn *p)
{
	return wire_get32(p->client_gid + 12) > NCLIENTS;
}

static void peer_tick(void)
{
	uint8_t out[MAD_SIZE];
	unsigned i, start = (unsigned)rand() % PEER_MAX;
	uint64_t now = now_ms();

	for (i = 0; i < 1024; i++) {
		struct peer_conn *p = &S.pc[S.peer_scan++ % PEER_MAX];

		if (p->used && !p->est && p->rep_at && now - p->rep_at > 1000 &&
		    p->rep_tries < 4) {
			mad(out, CM_ATTR_REP, p->peer, p->host);
			peer_send(p->client_gid, out);
			p->rep_at = now;
			p->rep_tries++;
			atomic_fetch_add(&S.rep_resent, 1);
		}
	}
	for (i = 0; i < 256; i++) {
		struct peer_conn *p = &S.pc[(start + i) % PEER_MAX];

		/* Not the QEMU processes': they end theirs after the
		 * restart, which is what they are there to show. */
		if (p->used && p->est && !peer_is_qemus(p)) {
			mad(out, CM_ATTR_DREQ, p->peer, p->host);
			peer_send(p->client_gid, out);
			p->est = 0;    /* its DREP (or a repeat) ends it */
			p->rep_at = 0; /* and its REP is not sent again */
			atomic_fetch_add(&S.peer_dreq, 1);
			return;
		}
	}
}

/* The remote CM has a thread of its own, as a remote host would: the
 * clients' load must not starve it (its socket holds 512 datagrams). */
static void *peer_loop(void *arg)
{
	struct pollfd pfd = { .fd = S.peer_fd, .events = POLLIN };
	uint64_t next_tick = 0;

	(void)arg;
	while (!atomic_load(&S.peer_stop)) {
		if (poll(&pfd, 1, 5) > 0)
			peer_input();
		if (now_ms() >= next_tick) {
			peer_tick();
			next_tick = now_ms() + 20;
		}
	}
	return NULL;
}

/* ---- clients --------------------------------------------------------------- */

/* SOAK_DEBUG: what the daemon and the peer know of a connection that
 * did not end well. */
static void debug_conn(struct client *c, struct slot *s)
{
	static int n;
	json_t *st, *cl, *e;
	size_t i, j;
	char name[32];

	if (n++ > 5)
		return;
	snprintf(name, sizeof(name), "vm%d", c->idx);
	fprintf(stderr,
		"soak: debug: client %d slot guest 0x%x peer 0x%x state %d tries %d\n",
		c->idx, s->guest, s->peer, s->st, s->tries);
	for (i = 0; i < PEER_MAX; i++)
		if (S.pc[i].used && S.pc[i].peer == s->peer)
			fprintf(stderr,
				"soak: debug:   peer record host 0x%x est %d\n",
				S.pc[i].host, S.pc[i].est);
	st = status();
	json_array_foreach(json_object_get(st, "clients"), i, cl) {
		if (strcmp(json_string_value(json_object_get(cl, "name")) ?: "",
			   name))
			continue;
		json_array_foreach(json_object_get(cl, "connections"), j, e) {
			uint32_t h = (uint32_t)json_integer_value(
				json_object_get(e, "host_id"));
			struct forgot *f = &S.forgot[h % PEER_MAX];

			if (json_integer_value(
				    json_object_get(e, "guest_id")) ==
				    s->guest &&
			    f->host == h)
				fprintf(stderr,
					"soak: debug:   peer forgot it %llu ms ago on attr 0x%x; DREQs since: %d\n",
					(unsigned long long)(now_ms() - f->at),
					f->why, f->dreqs_after);
			if (json_integer_value(
				    json_object_get(e, "guest_id")) == s->guest)
				fprintf(stderr,
					"soak: debug:   daemon: %s host 0x%llx peer 0x%llx\n",
					json_string_value(
						json_object_get(e, "state")),
					(long long)json_integer_value(
						json_object_get(e, "host_id")),
					(long long)json_integer_value(
						json_object_get(e, "peer_id")));
		}
	}
	json_decref(st);
}

/* A send's context: its attribute, and whether it is a retransmission,
 * whose verdict may be a refusal that says only that the first one got
 * through (its DREP came since, and the connection is draining). */
#define SEND_CTX(attr, retransmit) \
	((void *)(((uintptr_t)(attr) << 1) | ((retransmit) ? 1u : 0u)))
#define SEND_CTX_ATTR(ctx) ((uint16_t)((uintptr_t)(ctx) >> 1))
#define SEND_CTX_RETRANSMIT(ctx) (((uintptr_t)(ctx)&1u) != 0)

static int client_send_ctx(struct client *c, const uint8_t *m, int retransmit);

static int client_send(struct client *c, const uint8_t *m)
{
	return client_send_ctx(c, m, 0);
}

static int client_send_ctx(struct client *c, const uint8_t *m, int retransmit)
{
	void *ctx = SEND_CTX(cm_mad_attr_id(m), retransmit);
	struct muxbe_addr a = { .port = c->port,
				.grh = 1,
				.hop_limit = 64,
				.remote_qpn = GSI_QPN,
				.qkey = GSI_QKEY };
	int rc;

	memcpy(a.local_gid, c->gid, 16);
	memcpy(a.remote_gid, S.peer_gid, 16);
	rc = muxbe_send_mad(c->mb, &a, m, MAD_SIZE, ctx);
	if (rc == 0)
		S.mads_out++;
	return rc;
}

static struct slot *slot_by_guest(struct client *c, uint32_t guest)
{
	int i;

	for (i = 0; i < SLOTS; i++)
		if (c->s[i].st != S_IDLE && c->s[i].guest == guest)
			return &c->s[i];
	return NULL;
}

static void slot_end(struct slot *s)
{
	if (s->before_restart)
		S.verified++;
	s->before_restart = 0;
	s->st = S_IDLE;
	S.torn_down++;
}

static void on_recv(void *user, void *ctx, void *buf, size_t len,
		    const struct muxbe_addr *addr)
{
	struct client *c = user;
	uint8_t *m = (uint8_t *)buf + MUXBE_GRH_SIZE, out[MAD_SIZE];
	uint32_t local, remote;
	struct slot *s;

	(void)ctx;
	if (addr == NULL || len < MAD_SIZE)
		return;
	S.mads_in++;
	local = wire_get32(m + MAD_HDR_SIZE);
	remote = wire_get32(m + MAD_HDR_SIZE + 4);
	s = slot_by_guest(c, remote);
	switch (cm_mad_attr_id(m)) {
	case CM_ATTR_REP:
		if (s == NULL || (s->st != S_REQ && s->st != S_EST)) {
			S.misrouted += s == NULL;
			break;
		}
		mad(out, CM_ATTR_RTU, s->guest, local);
		if (client_send(c, out) == 0 && s->st == S_REQ) {
			s->st = S_EST;
			s->peer = local;
			s->at = S.now;
			s->hold_ms = 300 + (uint64_t)(rand() % 2700);
			S.established++;
		}
		break;
	case CM_ATTR_DREQ:
		if (s == NULL) {
			/* The DREP of ours crossed it: answer, nothing more. */
			mad(out, CM_ATTR_DREP, remote, local);
			client_send(c, out);
			break;
		}
		if (s->peer != local)
			atomic_fetch_add(&S.wrong_ids, 1);
		mad(out, CM_ATTR_DREP, s->guest, local);
		if (client_send(c, out) == 0)
			slot_end(s);
		break;
	case CM_ATTR_DREP:
		if (s == NULL)
			break; /* after a DREQ that crossed the peer's */
		if (s->st != S_DREQ || s->peer != local)
			atomic_fetch_add(&S.wrong_ids, 1);
		slot_end(s);
		break;
	default: break;
	}
	muxbe_post_recv(c->mb, buf, MUXBE_RECV_BUF_MIN, NULL);
}

/*
 * A refusal, kept for the summary (CI shows its tail): by attribute and
 * status, with the first message and when.  raced: an answer to the
 * peer (or a DREQ) that found the connection moved on or gone, as a
 * real CM's can when a message of the peer's, a lost delivery or a timer
 * gets there first (cm.c's ib_send_cm_rtu() returns -EINVAL then); those
 * are bounded, not forbidden.  Any other refusal fails the run.
 */
static void refusal_note(uint16_t attr, int status, const char *msg, int raced)
{
	struct refusal *r = S.refusals;
	size_t i;

	if (raced)
		S.send_raced++;
	else
		S.send_refused++;
	for (i = 0; i < S.nrefusals; i++, r++)
		if (r->attr == attr && r->status == status)
			break;
	if (i == S.nrefusals) {
		if (i == sizeof(S.refusals) / sizeof(S.refusals[0]))
			return;
		S.nrefusals++;
		r->attr = attr;
		r->status = status;
		r->first_s = (now_ms() - S.start_ms) / 1000.0;
		snprintf(r->msg, sizeof(r->msg), "%s", msg ? msg : "");
	}
	r->count++;
}

static void on_send_done(void *user, void *ctx, int status, const char *msg)
{
	(void)user;
	if (status == -ECONNRESET)
		S.send_reset++; /* in flight when the daemon died */
	else if (status && SEND_CTX_RETRANSMIT(ctx) &&
		 (status == -EPROTO || status == -ENOENT))
		S.retransmit_late++;
	else if (status && (status == -EPROTO || status == -ENOENT) &&
		 SEND_CTX_ATTR(ctx) != CM_ATTR_REQ)
		refusal_note(SEND_CTX_ATTR(ctx), status, msg, 1);
	else if (status)
		refusal_note(SEND_CTX_ATTR(ctx), status, msg, 0);
}

static void on_link(void *user, int up, int status, const char *msg)
{
	struct client *c = user;

	c->down = !up;
	if (up && status)
		check(0, "client %d came back without its connections: %s",
		      c->idx, msg);
}

static void on_lost(void *user, uint16_t port, unsigned count, const char *msg)
{
	(void)user;
	(void)port;
	(void)msg;
	S.lost_reported += count;
}

static const struct muxbe_callbacks cbs = {
	.recv = on_recv,
	.send_done = on_send_done,
	.link = on_link,
	.mad_lost = on_lost,
};

static void client_open(struct client *c)
{
	struct muxbe_options o = { .socket_path = S.sock,
				   .cb = &cbs,
				   .user = c };
	struct epoll_event ev = { .events = EPOLLIN };
	char name[32], err[256];
	int i;

	snprintf(name, sizeof(name), "vm%d", c->idx);
	o.name = name;
	o.errbuf = err;
	o.errbuf_len = sizeof(err);
	memset(c->s, 0, sizeof(c->s));
	if (muxbe_connect(&o, &c->mb) < 0) {
		fprintf(stderr, "soak: client %d: %s\n", c->idx, err);
		exit(1);
	}
	/* After a crash the daemon may not have seen the old one go yet. */
	for (int tries = 0; (i = muxbe_register_gid(c->mb, NULL, c->gid,
						    &c->port)) == -EEXIST &&
			    tries < 1000;
	     tries++)
		usleep(2000);
	if (i < 0) {
		muxbe_last_error(c->mb, err, sizeof(err));
		fprintf(stderr, "soak: client %d: register_gid: %s (%s)\n",
			c->idx, strerror(-i), err);
		exit(1);
	}
	/* The QP its REQs name (a simulated port's is registered). */
	i = muxbe_register_qpn(c->mb, NULL, own_qp(NULL));
	if (i < 0) {
		muxbe_last_error(c->mb, err, sizeof(err));
		fprintf(stderr, "soak: client %d: register_qpn: %s (%s)\n",
			c->idx, strerror(-i), err);
		exit(1);
	}
	for (i = 0; i < 8; i++)
		muxbe_post_recv(c->mb, c->bufs[i], MUXBE_RECV_BUF_MIN, NULL);
	ev.data.u64 = (uint64_t)c->idx;
	epoll_ctl(S.ep, EPOLL_CTL_ADD, muxbe_fd(c->mb), &ev);
}

/* A crash: gone without a word; the daemon speaks for it. */
static void client_crash(struct client *c)
{
	int i;

	for (i = 0; i < SLOTS; i++)
		if (c->s[i].before_restart)
			return; /* must end well: not this one */
	epoll_ctl(S.ep, EPOLL_CTL_DEL, muxbe_fd(c->mb), NULL);
	muxbe_close(c->mb);
	S.crashes++;
	client_open(c);
}

static void client_tick(struct client *c)
{
	uint8_t out[MAD_SIZE];
	struct gid dst;
	int i;

	if (c->down)
		return;
	memcpy(dst.raw, S.peer_gid, 16);
	for (i = 0; i < SLOTS; i++) {
		struct slot *s = &c->s[i];

		switch (s->st) {
		case S_IDLE:
			if (rand() % 4)
				break;
			s->guest = ((uint32_t)c->idx << 16) |
				   (++c->next_id & 0xffff);
			if (s->guest == 0)
				s->guest = 1;
			cm_mad_init(out, CM_ATTR_REQ,
				    0x4200000000ull | s->guest);
			wire_put32(out + MAD_HDR_SIZE, s->guest);
			cm_field_set(out, CM_REQ_LOCAL_QPN, own_qp(NULL));
			cm_field_set(out, CM_REQ_STARTING_PSN,
				     s->guest & 0xffffff);
			cm_field_set(out, CM_REQ_SERVICE_ID,
				     rdma_service_id(CMA_PS_TCP, 7471));
			{
				struct gid src;

				memcpy(src.raw, c->gid, 16);
				cm_set_gid(out, CM_REQ_OFF_PRIMARY_LOCAL_GID,
					   &src);
				cm_set_gid(out, CM_REQ_OFF_PRIMARY_REMOTE_GID,
					   &dst);
				cma_hdr_build(out + CM_REQ_OFF_PRIVATE_DATA,
					      &src, &dst, 7471);
			}
			if (client_send(c, out) == 0) {
				s->st = S_REQ;
				s->at = S.now;
			}
			break;
		case S_DREQ:
			/* The sim wire drops what a full queue cannot take, as a
			 * congested wire does: a CM retransmits its DREQ. */
			if (S.now - s->at > 1000u * (s->tries + 1) &&
			    s->tries < DREQ_TRIES) {
				mad(out, CM_ATTR_DREQ, s->guest, s->peer);
				if (client_send_ctx(c, out, 1) == 0)
					s->tries++;
			}
			/* fall through */
		case S_REQ:
			/* No answer at all: start over; the daemon's timers end
			 * what is left. */
			if (S.now - s->at > GIVE_UP_MS) {
				if (s->before_restart && getenv("SOAK_DEBUG"))
					debug_conn(c, s);
				if (s->before_restart)
					check(0,
					      "client %d: connection 0x%x got no DREP",
					      c->idx, s->guest);
				s->before_restart = 0;
				s->st = S_IDLE;
			}
			break;
		case S_EST:
			if (S.now - s->at < s->hold_ms)
				break;
			mad(out, CM_ATTR_DREQ, s->guest, s->peer);
			if (client_send(c, out) == 0) {
				s->st = S_DREQ;
				s->at = S.now;
				s->tries = 0;
			}
			break;
		}
	}
}

/* While everything ends: DREQs that got no DREP go again. */
static void client_retransmit(struct client *c)
{
	uint8_t out[MAD_SIZE];
	int i;

	for (i = 0; i < SLOTS; i++) {
		struct slot *s = &c->s[i];

		if (s->st == S_DREQ && S.now - s->at > 1000u * (s->tries + 1) &&
		    s->tries < DREQ_TRIES) {
			mad(out, CM_ATTR_DREQ, s->guest, s->peer);
			if (client_send_ctx(c, out, 1) == 0)
				s->tries++;
		}
		if (s->st != S_IDLE && S.now - s->at > GIVE_UP_MS) {
			if (s->before_restart && getenv("SOAK_DEBUG"))
				debug_conn(c, s);
			check(!s->before_restart,
			      "client %d: connection 0x%x got no DREP", c->idx,
			      s->guest);
			s->before_restart = 0;
			s->st = S_IDLE;
		}
	}
}

/* ---- QEMU processes across the restart ---------------------------------- */

/* One QEMU process: its rdmacm-mux socket and the native connection
 * through which its process registers the QPN its REQs name (a sim port
 * has no QPs; QEMU's own would be the kernel's). */
struct qemu_proc {
	int idx, q;
	uint8_t gid[16];
	struct muxbe *mb;
	uint32_t guest[QEMU_CONNS], peer[QEMU_CONNS];
	int rep[QEMU_CONNS], drep[QEMU_CONNS];
	int links_up; /* times the native link came back */
};

static void qemu_link(void *user, int up, int status, const char *message)
{
	struct qemu_proc *qp = user;

	(void)status;
	(void)message;
	qp->links_up += up;
}

static int qemu_connect(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", S.qemu_sock);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
		return fd;
	if (fd >= 0)
		close(fd);
	return -1;
}

/* The next message from the daemon (a response, or a MAD for the guest),
 * within ms: 1, 0 on timeout, -1 when the connection is gone. */
static int qemu_read(struct qemu_proc *qp, struct qemu_msg *m, int ms)
{
	uint8_t buf[QEMU_MSG_SIZE];
	struct pollfd pfd = { .fd = qp->q, .events = POLLIN };
	size_t have = 0;
	ssize_t n;

	while (have < sizeof(buf)) {
		if (poll(&pfd, 1, have ? 1000 : ms) <= 0)
			return have ? -1 : 0;
		n = read(qp->q, buf + have, sizeof(buf) - have);
		if (n <= 0)
			return -1;
		have += (size_t)n;
	}
	qemu_msg_decode(buf, m);
	memcpy(&m->type, buf, 4); /* a response, which decode refuses */
	memcpy(&m->op, buf + 4, 4);
	memcpy(&m->err, buf + 24, 4);
	return 1;
}

/* A MAD for the guest: a REP to answer with RTU, or a DREP. */
static void qemu_input(struct qemu_proc *qp, const struct qemu_msg *m);

/* A request and its response (MADs for the guest in between are taken
 * as they come): the response's code, or -1. */
static int qemu_request(struct qemu_proc *qp, uint32_t op, const uint8_t *mad)
{
	struct qemu_msg m = { .type = QEMU_MSG_REQ, .op = op };
	uint8_t buf[QEMU_MSG_SIZE];
	int rc;

	memcpy(m.sgid, qp->gid, 16);
	if (mad) {
		m.umad_len = MAD_SIZE;
		m.addr.qpn = 1;
		m.addr.grh_present = 1;
		memcpy(m.addr.gid, qp->gid, 16);
		memcpy(m.mad, mad, MAD_SIZE);
	}
	qemu_msg_encode(&m, buf);
	if (send(qp->q, buf, sizeof(buf), MSG_NOSIGNAL) != (ssize_t)sizeof(buf))
		return -1;
	while ((rc = qemu_read(qp, &m, 5000)) == 1) {
		if (m.type == QEMU_MSG_RESP)
			return (int)m.err;
		qemu_input(qp, &m);
	}
	return -1;
}

static void qemu_input(struct qemu_proc *qp, const struct qemu_msg *m)
{
	uint32_t local = wire_get32(m->mad + MAD_HDR_SIZE),
		 remote = wire_get32(m->mad + MAD_HDR_SIZE + 4);
	uint8_t out[MAD_SIZE];
	int k;

	for (k = 0; k < QEMU_CONNS; k++) {
		if (qp->guest[k] != remote)
			continue;
		if (cm_mad_attr_id(m->mad) == CM_ATTR_REP && qp->peer[k] == 0) {
			qp->peer[k] = local;
			qp->rep[k] = 1;
			mad(out, CM_ATTR_RTU, qp->guest[k], local);
			qemu_request(qp, QEMU_MSG_OP_MAD, out);
		} else if (cm_mad_attr_id(m->mad) == CM_ATTR_DREP &&
			   local == qp->peer[k]) {
			qp->drep[k] = 1;
		}
	}
}

static int qemu_count(const int *v)
{
	int k, n = 0;

	for (k = 0; k < QEMU_CONNS; k++)
		n += v[k] != 0;
	return n;
}

/* Until v has QEMU_CONNS set, or ms pass. */
static int qemu_wait(struct qemu_proc *qp, const int *v, int ms)
{
	uint64_t until = now_ms() + (uint64_t)ms;
	struct qemu_msg m;

	while (qemu_count(v) < QEMU_CONNS && now_ms() < until) {
		if (qp->mb)
			muxbe_process(qp->mb);
		if (qemu_read(qp, &m, 50) == 1 && m.type == QEMU_MSG_REQ)
			qemu_input(qp, &m);
	}
	return qemu_count(v) == QEMU_CONNS;
}

/* The child: connect, establish, say ready; when told the daemon is back,
 * connect again (QEMU's reconnect=1) and end each connection.  Its exit
 * status says what failed. */
static int qemu_proc_run(int idx, int ready, int go)
{
	static const struct muxbe_callbacks cb = { .link = qemu_link };
	struct qemu_proc qp = { .idx = idx };
	struct muxbe_options o = { .socket_path = S.sock,
				   .name = "qemu-qpn",
				   .cb = &cb,
				   .user = &qp };
	uint64_t until;
	int k, i;
	uint8_t out[MAD_SIZE], byte = 1;
	char text[32];
	struct gid g;

	snprintf(text, sizeof(text), "fd00::%x", NCLIENTS + idx + 1);
	gid_parse(text, &g);
	memcpy(qp.gid, g.raw, 16);
	if (muxbe_connect(&o, &qp.mb) < 0 ||
	    muxbe_register_qpn(qp.mb, NULL, own_qp(NULL)) < 0)
		return 10;
	qp.q = qemu_connect();
	if (qp.q < 0 || qemu_request(&qp, QEMU_MSG_OP_REG, NULL) != 0)
		return 11;
	for (k = 0; k < QEMU_CONNS; k++)
		qp.guest[k] = 0x7000000u | (uint32_t)(idx << 8) | (uint32_t)k;
	/* A REQ again each second while no REP came, as a guest's CM does
	 * (the sim wire drops what a full queue cannot take). */
	for (i = 0; i < 10 && qemu_count(qp.rep) < QEMU_CONNS; i++) {
		for (k = 0; k < QEMU_CONNS; k++) {
			if (qp.peer[k])
				continue;
			mad(out, CM_ATTR_REQ, qp.guest[k], 0);
			cm_field_set(out, CM_REQ_LOCAL_QPN, own_qp(NULL));
			cm_set_gid(out, CM_REQ_OFF_PRIMARY_LOCAL_GID, &g);
			memcpy(out + CM_REQ_OFF_PRIMARY_REMOTE_GID, S.peer_gid,
			       16);
			cma_hdr_build(out + CM_REQ_OFF_PRIVATE_DATA, &g,
				      (const struct gid *)S.peer_gid, 7471);
			if (qemu_request(&qp, QEMU_MSG_OP_MAD, out) != 0)
				return 12;
		}
		qemu_wait(&qp, qp.rep, 1000);
	}
	if (qemu_count(qp.rep) < QEMU_CONNS)
		return 13;
	if (write(ready, &byte, 1) != 1)
		return 14;
	/* The daemon dies: QEMU's socket closes; the library reconnects
	 * on its own while it is pumped. */
	while (read(go, &byte, 1) != 1) {
		if (errno != EINTR)
			return 15;
	}
	close(qp.q);
	for (i = 0; i < 100 && (qp.q = qemu_connect()) < 0; i++)
		usleep(100000);
	if (qp.q < 0)
		return 16;
	/* The native connection re-registers the QPN once back up. */
	until = now_ms() + 10000;
	while (qp.links_up == 0 && now_ms() < until) {
		struct pollfd pfd = { .fd = muxbe_fd(qp.mb), .events = POLLIN };

		poll(&pfd, 1, 50);
		muxbe_process(qp.mb);
	}
	if (qp.links_up == 0)
		return 19;
	/* A DREQ again each second while no DREP came, as a guest's CM
	 * does (the daemon's sends to a full peer are dropped). */
	for (i = 0; i < 10 && qemu_count(qp.drep) < QEMU_CONNS; i++) {
		for (k = 0; k < QEMU_CONNS; k++) {
			if (qp.drep[k])
				continue;
			mad(out, CM_ATTR_DREQ, qp.guest[k], qp.peer[k]);
			if (qemu_request(&qp, QEMU_MSG_OP_MAD, out) != 0)
				return 17;
		}
		qemu_wait(&qp, qp.drep, 1000);
	}
	if (qemu_count(qp.drep) < QEMU_CONNS)
		return 18;
	close(qp.q);
	muxbe_close(qp.mb);
	return 0;
}

static void qemu_procs_start(void)
{
	int i, r[2], gpipe[2];

	for (i = 0; i < NQEMU; i++) {
		if (pipe2(r, O_CLOEXEC) || pipe2(gpipe, O_CLOEXEC))
			die("pipe");
		S.qemu_pid[i] = fork();
		if (S.qemu_pid[i] < 0)
			die("fork");
		if (S.qemu_pid[i] == 0) {
			close(r[0]);
			close(gpipe[1]);
			_exit(qemu_proc_run(i, r[1], gpipe[0]));
		}
		close(r[1]);
		close(gpipe[0]);
		S.qemu_ready[i] = r[0];
		S.qemu_go[i] = gpipe[1];
	}
}

/* Before the restart: every QEMU process holds its connections. */
static void qemu_procs_ready(void)
{
	uint8_t byte;
	int i, st;

	for (i = 0; i < NQEMU; i++) {
		if (read(S.qemu_ready[i], &byte, 1) == 1)
			continue;
		waitpid(S.qemu_pid[i], &st, 0);
		S.qemu_pid[i] = 0;
		check(0,
		      "QEMU process %d did not establish its connections (exit 0x%x)",
		      i, st);
	}
}

/* After it: they end their connections, while the native clients go on
 * (they must claim theirs within the resume grace). */
static void qemu_procs_go(void)
{
	uint8_t byte = 1;
	int i;

	for (i = 0; i < NQEMU; i++)
		if (S.qemu_pid[i] && write(S.qemu_go[i], &byte, 1) != 1)
			die("write");
}

/* Each must have had every DREP. */
static void qemu_procs_reap(void)
{
	int i, st;

	for (i = 0; i < NQEMU; i++) {
		if (S.qemu_pid[i] == 0)
			continue;
		waitpid(S.qemu_pid[i], &st, 0);
		S.qemu_pid[i] = 0;
		check(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "QEMU process %d: its connections across the restart did not end well (exit 0x%x)",
		      i, st);
	}
	printf("soak: qemu_connections_across_restart %d\n",
	       NQEMU * QEMU_CONNS);
}

static void pump(int ms)
{
	struct epoll_event ev[256];
	int n, i;

	n = epoll_wait(S.ep, ev, 256, ms);
	S.now = now_ms();
	for (i = 0; i < n; i++)
		muxbe_process(S.c[ev[i].data.u64].mb);
}

/* ---- the run ----------------------------------------------------------- */

static void run_phase(uint64_t until, long *rss_warm, long *rss_end,
		      uint64_t warm_at)
{
	uint64_t next_crash = 0, last = now_ms();
	unsigned rr = 0, n, i;

	while ((S.now = now_ms()) < until) {
		pump(1);
		/* Every client about every 50 ms, spread out: a burst of all
		 * of them at once would overflow the remote's queue (512
		 * datagrams) in a pattern that loses the same ones each time. */
		n = (unsigned)((S.now - last) * NCLIENTS / 50);
		if (n > NCLIENTS)
			n = NCLIENTS;
		if (n)
			last = S.now;
		for (i = 0; i < n; i++)
			client_tick(&S.c[rr++ % NCLIENTS]);
		if (S.now >= next_crash) {
			client_crash(&S.c[rand() % NCLIENTS]);
			next_crash = S.now + 200;
		}
		if (*rss_warm < 0 && S.now >= warm_at)
			*rss_warm = proc_figures_status_kb(S.pid, "VmRSS");
	}
	*rss_end = proc_figures_status_kb(S.pid, "VmRSS");
}

int main(void)
{
	const char *secs = getenv("SOAK_SECONDS");
	long seconds = secs ? atol(secs) : 600, rss_w1 = -1, rss_e1,
	     rss_w2 = -1, rss_e2;
	struct rlimit rl = { 1 << 16, 1 << 16 };
	uint64_t t0, half, end, warm;
	int fds0, i, status_rc;
	json_t *st, *drops, *v;
	const char *key;

	if (getenv("RDMACM_MUXD") == NULL) {
		fprintf(stderr, "soak: set RDMACM_MUXD to the daemon\n");
		return 2;
	}
	if (seconds < 20)
		seconds = 20;
	snprintf(S.bin, sizeof(S.bin), "%s", getenv("RDMACM_MUXD"));
	setrlimit(RLIMIT_NOFILE, &rl);
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0); /* in order with stderr */
	S.start_ms = now_ms();
	srand(42);
	snprintf(S.dir, sizeof(S.dir), "/tmp/rcm-soak.XXXXXX");
	if (mkdtemp(S.dir) == NULL)
		die("mkdtemp");
	snprintf(S.sock, sizeof(S.sock), "%s/mux.sock", S.dir);
	snprintf(S.status, sizeof(S.status), "%s/status.sock", S.dir);
	snprintf(S.fabric, sizeof(S.fabric), "%s/fabric", S.dir);
	snprintf(S.log, sizeof(S.log), "%s/daemon.log", S.dir);
	snprintf(S.qemu_sock, sizeof(S.qemu_sock), "%s/qemu.sock", S.dir);
	S.ep = epoll_create1(EPOLL_CLOEXEC);
	daemon_start();
	peer_open();
	fds0 = proc_figures_fds(S.pid);
	/* Before the clients and threads: nothing of theirs in the forks. */
	qemu_procs_start();
	if (pthread_create(&S.peer_thread, NULL, peer_loop, NULL))
		die("peer thread");
	for (i = 0; i < NCLIENTS; i++) {
		struct gid g;
		char text[32];

		S.c[i].idx = i;
		snprintf(text, sizeof(text), "fd00::%x", i + 1);
		gid_parse(text, &g);
		memcpy(S.c[i].gid, g.raw, 16);
		client_open(&S.c[i]);
	}
	printf("soak: clients %d\nsoak: seconds %ld\n", NCLIENTS, seconds);
	fflush(stdout);

	t0 = now_ms();
	/* Warm-up: 20 s or a tenth of the run, at most 40% of a half. */
	warm = (uint64_t)seconds * 100 > 20000 ? (uint64_t)seconds * 100
					       : 20000;
	if (warm > (uint64_t)seconds * 200)
		warm = (uint64_t)seconds * 200;
	half = t0 + (uint64_t)seconds * 500;
	end = t0 + (uint64_t)seconds * 1000;
	run_phase(half, &rss_w1, &rss_e1, t0 + warm);

	/* Halfway: the daemon dies and comes back. */
	qemu_procs_ready();
	for (i = 0; i < NCLIENTS; i++)
		for (int k = 0; k < SLOTS; k++)
			if (S.c[i].s[k].st == S_EST) {
				S.c[i].s[k].before_restart = 1;
				S.must_verify++;
			}
	kill(S.pid, SIGKILL);
	S.restart_ms = now_ms();
	waitpid(S.pid, &status_rc, 0);
	daemon_start();
	printf("soak: established_at_restart %llu\n",
	       (unsigned long long)S.must_verify);
	qemu_procs_go();
	run_phase(end, &rss_w2, &rss_e2, now_ms() + warm);
	qemu_procs_reap();

	/* Everything ends: the clients' connections first, then they go. */
	for (uint64_t until = now_ms() + GIVE_UP_MS + 4000; now_ms() < until;) {
		int busy = 0;

		pump(5);
		for (i = 0; i < NCLIENTS; i++)
			client_retransmit(&S.c[i]);
		for (i = 0; i < NCLIENTS; i++)
			for (int k = 0; k < SLOTS; k++) {
				struct slot *s = &S.c[i].s[k];
				uint8_t out[MAD_SIZE];

				if (s->st == S_EST) {
					mad(out, CM_ATTR_DREQ, s->guest,
					    s->peer);
					if (client_send(&S.c[i], out) == 0) {
						s->st = S_DREQ;
						s->at = S.now;
						s->tries = 0;
					}
				}
				busy |= s->st == S_EST || s->before_restart;
			}
		if (!busy)
			break;
	}
	for (i = 0; i < NCLIENTS; i++)
		for (int k = 0; k < SLOTS; k++)
			check(!S.c[i].s[k].before_restart,
			      "client %d: connection 0x%x of before the restart never ended",
			      i, S.c[i].s[k].guest);
	for (i = 0; i < NCLIENTS; i++) {
		epoll_ctl(S.ep, EPOLL_CTL_DEL, muxbe_fd(S.c[i].mb), NULL);
		muxbe_close(S.c[i].mb);
	}
	/* Mappings drain (TimeWait 500 ms, handshakes 5 s). */
	for (i = 0; i < 100 && (status_int("routing.comm_ids") ||
				status_int("routing.gids") ||
				status_int("routing.sidr_ids"));
	     i++)
		usleep(100000);

	atomic_store(&S.peer_stop, 1);
	pthread_join(S.peer_thread, NULL);
	st = status();
	printf("soak: retransmissions_after_the_answer %llu\n",
	       (unsigned long long)S.retransmit_late);
	printf("soak: answers_too_late %llu\n",
	       (unsigned long long)S.send_raced);
	printf("soak: sends_in_flight_at_restart %llu\nsoak: rep_retransmitted %llu\n",
	       (unsigned long long)S.send_reset,
	       (unsigned long long)atomic_load(&S.rep_resent));
	printf("soak: wire_dropped %lld\n",
	       status_int_at(json_array_get(json_object_get(st, "ports"), 0),
			     "counters.wire_dropped"));
	printf("soak: mads_out %llu\nsoak: mads_in %llu\nsoak: established %llu\n"
	       "soak: torn_down %llu\nsoak: crashes %llu\nsoak: peer_dreq %llu\n"
	       "soak: verified_after_restart %llu\nsoak: misrouted %llu\n"
	       "soak: wrong_ids %llu\nsoak: send_refused %llu\nsoak: "
	       "lost_reported %llu\n"
	       "soak: rss_kb_warm_1 %ld\nsoak: rss_kb_end_1 %ld\n"
	       "soak: rss_kb_warm_2 %ld\nsoak: rss_kb_end_2 %ld\n"
	       "soak: fds_before %d\nsoak: fds_after %d\n",
	       (unsigned long long)S.mads_out, (unsigned long long)S.mads_in,
	       (unsigned long long)S.established,
	       (unsigned long long)S.torn_down, (unsigned long long)S.crashes,
	       (unsigned long long)atomic_load(&S.peer_dreq),
	       (unsigned long long)S.verified, (unsigned long long)S.misrouted,
	       (unsigned long long)atomic_load(&S.wrong_ids),
	       (unsigned long long)S.send_refused,
	       (unsigned long long)S.lost_reported, rss_w1, rss_e1, rss_w2,
	       rss_e2, fds0, proc_figures_fds(S.pid));
	drops = json_object_get(json_object_get(st, "counters"), "drops");
	json_object_foreach(drops, key, v) {
		if (json_integer_value(v) == 0)
			continue;
		printf("soak: drop_%s %lld\n", key,
		       (long long)json_integer_value(v));
		/* The kinds a policy makes: a client gone, IDs no longer
		 * known (ended, or a retransmission after the end), a queue
		 * full (reported to the sender). */
		check(strcmp(key, "client_gone") == 0 ||
			      strcmp(key, "owner_away") == 0 ||
			      strcmp(key, "unknown_comm_id") == 0 ||
			      strcmp(key, "stale_connection") == 0 ||
			      strcmp(key, "wrong_state") == 0 ||
			      strcmp(key, "peer_mismatch") == 0 ||
			      strcmp(key, "client_queue_full") == 0,
		      "drops of an unexpected kind: %s", key);
	}
	check(S.established > (uint64_t)seconds * 10,
	      "too little traffic: %llu connections",
	      (unsigned long long)S.established);
	check(S.must_verify > 0 && S.verified == S.must_verify,
	      "connections of before the restart: %llu of %llu ended well",
	      (unsigned long long)S.verified,
	      (unsigned long long)S.must_verify);
	check(S.misrouted == 0, "%llu MADs reached the wrong client",
	      (unsigned long long)S.misrouted);
	check(atomic_load(&S.wrong_ids) == 0, "%llu MADs with wrong IDs",
	      (unsigned long long)atomic_load(&S.wrong_ids));
	check(S.send_refused == 0, "%llu sends refused",
	      (unsigned long long)S.send_refused);
	check(S.send_raced <= S.mads_out / 10000,
	      "%llu answers refused as too late, more than 1 in 10,000 of %llu MADs",
	      (unsigned long long)S.send_raced, (unsigned long long)S.mads_out);
	for (size_t k = 0; k < S.nrefusals; k++)
		printf("soak: refused %s %s x%llu, first at %.1f s (restart at %.1f s): %s\n",
		       cm_attr_name(S.refusals[k].attr),
		       strerrorname_np(-S.refusals[k].status) ?: "?",
		       (unsigned long long)S.refusals[k].count,
		       S.refusals[k].first_s,
		       (S.restart_ms - S.start_ms) / 1000.0, S.refusals[k].msg);
	check(rss_e1 <= rss_w1 + rss_w1 / 20,
	      "RSS grew from %ld to %ld kB before the restart", rss_w1, rss_e1);
	check(rss_e2 <= rss_w2 + rss_w2 / 20,
	      "RSS grew from %ld to %ld kB after it", rss_w2, rss_e2);
	check(status_int_at(st, "routing.comm_ids") == 0 &&
		      status_int_at(st, "routing.sidr_ids") == 0,
	      "mappings left: %lld", status_int_at(st, "routing.comm_ids"));
	check(status_int_at(st, "routing.gids") == 0, "GIDs left: %lld",
	      status_int_at(st, "routing.gids"));
	check(json_array_size(json_object_get(st, "clients")) == 0,
	      "clients left: %zu",
	      json_array_size(json_object_get(st, "clients")));
	check(proc_figures_fds(S.pid) == fds0,
	      "descriptors: %d before the clients, %d after", fds0,
	      proc_figures_fds(S.pid));
	json_decref(st);
	kill(S.pid, SIGTERM);
	waitpid(S.pid, &status_rc, 0);
	check(WIFEXITED(status_rc) && WEXITSTATUS(status_rc) == 0,
	      "daemon exit status 0x%x", status_rc);
	printf("soak: %s\n", S.failed ? "FAILED" : "passed");
	if (!S.failed) {
		char cmd[256];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", S.dir);
		if (system(cmd) != 0)
			perror("rm");
	} else {
		fprintf(stderr, "soak: daemon log in %s\n", S.log);
	}
	return S.failed;
}
