// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * cm_rate_vm: cm_rate's client, from a VM through rdmacm-muxd.  One
 * libmuxbe handle (the VM's device model) and N guest CM endpoints
 * (backend/vm/guest_cm.c, as a guest kernel's CM would run them) connect
 * to a cm_rate server, WINDOW at a time, then disconnect; the connect
 * phase (first REQ to the last connection established) and the
 * disconnect phase (first DREQ to the last DREP) are timed and printed
 * as cm_rate prints them, so the two compare line by line.
 *
 * Each connection has an RC QP of its own on the port, made through
 * libmuxbe's verbs as QEMU makes a guest's, and moved to RTR on the REP
 * and to RTS before the RTU inside the connect phase, as QEMU does for
 * the guest and librdmacm does for cm_rate: on RoCE the move to RTR
 * resolves the peer's MAC, a cost both sides pay.
 *
 *   cm_rate_vm --gid GID --connect SERVER-GID [--rdma-port P] -c N [-w W]
 *              [--port DAEMON-PORT] [--socket PATH]
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/muxbe.h"
#include "backend/muxbe_verbs.h"
#include "backend/vm/guest_cm.h"

#define RECV_BUFS 256
#define COMM_BASE 0x51000000u

/* A connection's DREQ: when it was sent, its verdict came and its DREP
 * (DISCONNECTED) came; its sends and verdicts so far (a connection's
 * are answered in order: they take one sender thread), and the DREQ's
 * number among its sends. */
struct disc_times {
	double dreq, verdict, down;
	unsigned sent, verdicts, dreq_n;
};

struct rate {
	struct muxbe *mb;
	uint16_t port_index;
	struct gid gid;
	struct gcm *cm;
	unsigned n, window;
	const char *qp_port; /* where each connection's QP is made */
	struct muxbe_dev *dev;
	struct ibv_pd *pd;
	struct muxbe_cq *cq;
	struct muxbe_qp **qp; /* connection i's */
	int sgid_index;
	uint32_t *sq_psn;        /* connection i's: the peer's Starting PSN */
	struct disc_times *disc; /* connection i's */
	unsigned up, down, failed, send_errors;
	unsigned long sends, verdicts; /* every send is answered */
	uint8_t bufs[RECV_BUFS][MUXBE_RECV_BUF_MIN];
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct rate R;

static int send_mad(void *ctx, const uint8_t *mad, const struct gid *dst)
{
	struct muxbe_addr a = {
		.port = R.port_index,
		.grh = 1,
		.hop_limit = 64,
		.remote_qpn = GSI_QPN,
		.qkey = GSI_QKEY,
	};
	struct gcm *g = ctx;
	struct disc_times *d = &R.disc[g - R.cm];
	int rc;

	memcpy(a.local_gid, R.gid.raw, 16);
	memcpy(a.remote_gid, dst->raw, 16);
	rc = muxbe_send_mad(R.mb, &a, mad, MAD_SIZE, g);
	if (rc)
		return rc;
	R.sends++;
	d->sent++;
	if (cm_mad_attr_id(mad) == CM_ATTR_DREQ && d->dreq == 0) {
		d->dreq = now_s();
		d->dreq_n = d->sent;
	}
	return 0;
}

static void on_event(void *ctx, enum gcm_event ev, int detail)
{
	struct gcm *g = ctx;

	switch (ev) {
	case GCM_EV_CONNECTED: R.up++; break;
	case GCM_EV_DISCONNECTED:
		R.down++;
		R.disc[g - R.cm].down = now_s();
		break;
	case GCM_EV_REJECTED:
	case GCM_EV_TIMEOUT:
		fprintf(stderr, "cm_rate_vm: connection 0x%08x: %s %d\n",
			g->p.local_comm_id,
			ev == GCM_EV_REJECTED ? "rejected"
					      : "timed out in state",
			ev == GCM_EV_REJECTED ? detail : (int)g->state);
		R.failed++;
		break;
	case GCM_EV_CLOSED: break;
	}
}

/* The guest CM's QP moves, as QEMU makes them for a guest (vm_data.c):
 * RTR with the peer's QPN and GID, our receive PSN the one we announced;
 * RTS from the PSN the peer announced. */
static int qp_rtr(void *ctx, uint32_t remote_qpn, uint32_t remote_psn,
		  const struct gid *remote)
{
	struct gcm *g = ctx;
	size_t i = (size_t)(g - R.cm);
	struct muxbe_qp_rtr r = { .sgid_index = (uint8_t)R.sgid_index,
				  .dest_qpn = remote_qpn,
				  .rq_psn = g->p.psn };

	memcpy(r.dgid, remote->raw, 16);
	R.sq_psn[i] = remote_psn;
	return muxbe_qp_rtr(R.qp[i], &r);
}

static int qp_rts(void *ctx)
{
	struct gcm *g = ctx;
	size_t i = (size_t)(g - R.cm);
	struct muxbe_qp_rts r = { .sq_psn = R.sq_psn[i] };

	return muxbe_qp_rts(R.qp[i], &r);
}

static const struct gcm_ops ops = {
	.send = send_mad, .event = on_event, .qp_rtr = qp_rtr, .qp_rts = qp_rts
};

/* The device, a PD and a CQ for the connections' QPs (no data flows, so
 * nothing completes: the CQ is never polled). */
static int verbs_open(const char *port_spec)
{
	struct muxbe_dev_options o = { 0 };
	char dev[64];
	const char *colon = strchr(port_spec, ':');
	int rc;

	if (colon == NULL || (size_t)(colon - port_spec) >= sizeof(dev))
		return -EINVAL;
	memcpy(dev, port_spec, (size_t)(colon - port_spec));
	dev[colon - port_spec] = '\0';
	o.dev_name = dev;
	o.port_num = (uint8_t)atoi(colon + 1);
	rc = muxbe_dev_open(&o, &R.dev);
	if (rc < 0)
		return rc;
	R.sgid_index = muxbe_dev_gid_index(R.dev, R.gid.raw);
	if (R.sgid_index < 0)
		return R.sgid_index;
	rc = muxbe_pd_create(R.dev, &R.pd);
	if (rc == 0)
		rc = muxbe_cq_create(R.dev, 16, &R.cq);
	return rc;
}

/* Connection i's RC QP, in INIT: its QPN, or 0. */
static uint32_t qp_new(unsigned i)
{
	const struct muxbe_qp_caps caps = { 1, 1, 1, 1 };

	if (muxbe_qp_create(R.dev, R.pd, MUXBE_QPT_RC, R.cq, R.cq, NULL, &caps,
			    &R.qp[i]) < 0 ||
	    muxbe_qp_init(R.qp[i], 0) < 0)
		return 0;
	return muxbe_qp_num(R.qp[i]);
}

static void on_recv(void *user, void *buf_ctx, void *buf, size_t mad_len,
		    const struct muxbe_addr *addr)
{
	const uint8_t *mad = (const uint8_t *)buf + MUXBE_GRH_SIZE;
	uint32_t to;
	struct gid src;

	(void)user;
	(void)buf_ctx;
	if (addr == NULL)
		return;
	if (mad_len >= MAD_HDR_SIZE) {
		/* Every reply names the guest's own comm ID (the daemon
		 * translated it back). */
		to = cm_mad_receiver_id(mad) - COMM_BASE;
		memcpy(src.raw, addr->remote_gid, 16);
		if (to < R.n)
			gcm_input(&R.cm[to], mad, mad_len, &src, now_ms());
	}
	muxbe_post_recv(R.mb, buf, MUXBE_RECV_BUF_MIN, NULL);
}

static void on_send_done(void *user, void *send_ctx, int status,
			 const char *msg)
{
	struct gcm *g = send_ctx;
	struct disc_times *d = g ? &R.disc[g - R.cm] : NULL;

	(void)user;
	R.verdicts++;
	if (d && ++d->verdicts == d->dreq_n)
		d->verdict = now_s();
	if (status < 0 && R.send_errors++ < 5)
		fprintf(stderr, "cm_rate_vm: send refused: %s\n", msg);
}

/* How long to sleep for input (muxbe's fd is readable whenever it has
 * work): until the earliest timer of the endpoints that run one.  A
 * client waiting on retransmissions (REQs to an address that
 * never answers) then sleeps as a kernel CM's process does, instead of
 * reading the clock 200 times a second. */
static int poll_ms(unsigned from, unsigned to, uint64_t now)
{
	uint64_t first = UINT64_MAX;
	unsigned i;

	for (i = from; i < to; i++)
		if (R.cm[i].deadline_ms && R.cm[i].deadline_ms < first)
			first = R.cm[i].deadline_ms;
	if (first == UINT64_MAX || first > now + 1000)
		return 1000;
	return first > now ? (int)(first - now) : 0;
}

/* Run until count() reaches n (or all that are left failed); start()
 * puts the next endpoint in, keeping at most window in flight. */
static int run_phase(unsigned *count, int (*start)(struct gcm *g, uint64_t now),
		     enum gcm_state startable_state, unsigned timeout_ms)
{
	unsigned next = 0, base = *count, fails0 = R.failed, i, settled = 0;
	uint64_t now = now_ms(), deadline = now + timeout_ms;
	struct pollfd pfd = { .fd = muxbe_fd(R.mb), .events = POLLIN };

	while (*count - base + (R.failed - fails0) < R.n) {
		unsigned busy = next - (*count - base) - (R.failed - fails0);

		while (busy < R.window && next < R.n) {
			if (R.cm[next].state == startable_state &&
			    start(&R.cm[next], now) == 0)
				busy++;
			else
				R.failed++;
			next++;
		}
		if (now > deadline) {
			fprintf(stderr,
				"cm_rate_vm: phase timed out at %u of %u\n",
				*count - base, R.n);
			return -1;
		}
		poll(&pfd, 1, poll_ms(settled, next, now));
		if (muxbe_process(R.mb) < 0)
			return -1;
		/* One clock read a pass, for the ticks and the next starts:
		 * where the clock is a device (the lab's HPET), a read per
		 * endpoint was this client's largest cost (perf in the
		 * lab), not the daemon's. */
		now = now_ms();
		/* Timers from the oldest endpoint that still runs one, as
		 * a kernel CM runs only the timers it has armed: a scan of
		 * every endpoint a pass was this client's CPU, not the
		 * daemon's. */
		while (settled < next && R.cm[settled].deadline_ms == 0)
			settled++;
		for (i = settled; i < next; i++)
			gcm_tick(&R.cm[i], now);
	}
	return 0;
}

/* Where a disconnect's time went: from its DREQ to its DISCONNECTED
 * (cm_rate's disconnect_ms), and of that, until the daemon's verdict on
 * the DREQ (checked, routed and written to the port; the DREP can come
 * first). */
static void disconnect_split(void)
{
	double total = 0, send = 0;
	unsigned i, n = 0, nv = 0;

	for (i = 0; i < R.n; i++) {
		const struct disc_times *d = &R.disc[i];

		if (d->dreq == 0 || d->down < d->dreq)
			continue;
		total += d->down - d->dreq;
		n++;
		if (d->verdict) {
			send += d->verdict - d->dreq;
			nv++;
		}
	}
	printf("cm_rate: disconnect_ms %.2f\n", n ? total * 1e3 / n : 0);
	printf("cm_rate: disconnect_verdict_ms %.2f\n",
	       nv ? send * 1e3 / nv : 0);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "gid", required_argument, NULL, 'g' },
		{ "port", required_argument, NULL, 'p' },
		{ "connect", required_argument, NULL, 'a' },
		{ "rdma-port", required_argument, NULL, 'r' },
		{ "qp-port", required_argument, NULL, 'q' },
		{ NULL, 0, NULL, 0 },
	};
	struct muxbe_callbacks cb = { .recv = on_recv,
				      .send_done = on_send_done };
	struct muxbe_options mo = { .cb = &cb, .name = "cm-rate-vm" };
	struct gcm_params gp = { .timeout_ms = 1000,
				 .max_retries = 5,
				 .timewait_ms = 100,
				 .port = 7471 };
	const char *daemon_port = NULL;
	double t0, t_conn, t_disc;
	uint64_t retx;
	char err[256];
	unsigned i;
	int c;

	R.window = 16;
	while ((c = getopt_long(argc, argv, "s:g:p:a:r:c:w:", opts, NULL)) !=
	       -1) {
		switch (c) {
		case 's': mo.socket_path = optarg; break;
		case 'g':
			if (gid_parse(optarg, &R.gid))
				return 2;
			break;
		case 'p': daemon_port = optarg; break;
		case 'a':
			if (gid_parse(optarg, &gp.remote_gid))
				return 2;
			break;
		case 'r': gp.port = (uint16_t)atoi(optarg); break;
		case 'c': R.n = (unsigned)atoi(optarg); break;
		case 'w': R.window = (unsigned)atoi(optarg); break;
		case 'q': R.qp_port = optarg; break;
		default:
			fprintf(stderr,
				"usage: cm_rate_vm --gid GID --connect SERVER-GID --qp-port DEV:PORT [--rdma-port P] -c N [-w W]\n");
			return 2;
		}
	}
	if (gid_is_zero(&R.gid) || gid_is_zero(&gp.remote_gid) || R.n == 0 ||
	    R.n > 0xffff || R.window == 0 || R.qp_port == NULL)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	mo.errbuf = err;
	mo.errbuf_len = sizeof(err);
	if (muxbe_connect(&mo, &R.mb) < 0) {
		fprintf(stderr, "cm_rate_vm: %s\n", err);
		return 1;
	}
	if (muxbe_register_gid(R.mb, daemon_port, R.gid.raw, &R.port_index) <
	    0) {
		muxbe_last_error(R.mb, err, sizeof(err));
		fprintf(stderr, "cm_rate_vm: register_gid: %s\n", err);
		return 1;
	}
	for (i = 0; i < RECV_BUFS; i++)
		muxbe_post_recv(R.mb, R.bufs[i], sizeof(R.bufs[i]), NULL);
	R.cm = calloc(R.n, sizeof(*R.cm));
	R.qp = calloc(R.n, sizeof(*R.qp));
	R.sq_psn = calloc(R.n, sizeof(*R.sq_psn));
	R.disc = calloc(R.n, sizeof(*R.disc));
	if (R.cm == NULL || R.qp == NULL || R.sq_psn == NULL || R.disc == NULL)
		return 1;
	c = verbs_open(R.qp_port);
	if (c < 0) {
		fprintf(stderr, "cm_rate_vm: verbs on %s: %s\n", R.qp_port,
			strerror(-c));
		return 1;
	}
	gp.local_gid = R.gid;
	for (i = 0; i < R.n; i++) {
		gp.local_comm_id = COMM_BASE + i;
		/* A QP of its own, in INIT on the daemon's port, made before
		 * the timed phases as cm_rate makes its own (the daemon sends
		 * a REQ only for its QP's owner, and a peer takes a QPN it
		 * holds for another connection as stale).  No data flows. */
		gp.qpn = qp_new(i);
		if (gp.qpn == 0) {
			fprintf(stderr, "cm_rate_vm: cannot make QP %u\n", i);
			return 1;
		}
		gp.psn = 0x4242;
		gp.src_port = (uint16_t)(0x8000 + i);
		gcm_init(&R.cm[i], &gp, &ops, &R.cm[i]);
	}
	t0 = now_s();
	if (run_phase(&R.up, gcm_connect, GCM_IDLE, 60000) < 0)
		return 1;
	t_conn = now_s() - t0;
	t0 = now_s();
	if (run_phase(&R.down, gcm_disconnect, GCM_ESTABLISHED, 60000) < 0)
		return 1;
	t_disc = now_s() - t0;
	/* The phases end at the last DREP, which can overtake the verdict
	 * on its DREQ's send: a while for the stragglers. */
	for (t0 = now_s(); R.verdicts < R.sends && now_s() - t0 < 5;) {
		struct pollfd pfd = { .fd = muxbe_fd(R.mb), .events = POLLIN };

		poll(&pfd, 1, 100);
		if (muxbe_process(R.mb) < 0)
			break;
	}
	printf("cm_rate: connections %u\n", R.n);
	printf("cm_rate: established %u\n", R.up);
	printf("cm_rate: disconnected %u\n", R.down);
	printf("cm_rate: connect_per_s %.1f\n", R.up / t_conn);
	printf("cm_rate: disconnect_per_s %.1f\n", R.down / t_disc);
	printf("cm_rate: cycle_per_s %.1f\n", R.down / (t_conn + t_disc));
	for (i = 0, retx = 0; i < R.n; i++)
		retx += R.cm[i].retransmissions;
	printf("cm_rate: retransmissions %llu\n", (unsigned long long)retx);
	disconnect_split();
	printf("cm_rate: sends %lu\n", R.sends);
	printf("cm_rate: verdicts_missing %lu\n", R.sends - R.verdicts);
	muxbe_close(R.mb);
	return R.up == R.n && R.down == R.n && R.send_errors == 0 &&
			       R.verdicts == R.sends
		       ? 0
		       : 1;
}
