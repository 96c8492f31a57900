// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * A minimal device model's QP1 (GSI) on libmuxbe, as muxbe(3) describes
 * it: the shape a hypervisor's paravirtual RDMA device follows.  The
 * "guest" here is a stand-in: MADs it posts on its QP1 send queue go to
 * the daemon, and MADs the daemon routes to it land in its QP1 receive
 * buffers (a GRH, then the MAD), with a completion each.
 *
 *   device_model GID [PEER-GID]
 *
 * registers GID and serves its QP1 until interrupted.  With PEER-GID the
 * guest also sends one MAD: a DREQ for a connection it never had, which
 * the daemon refuses (ENOENT: a VM acts only on its own connections), to
 * show a send's verdict; then it stops.  Built by `make` and run by the
 * integration suite, so that it cannot rot.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>

#include "backend/muxbe.h"

#define QP1_RECV_DEPTH 16

/* The guest's QP1: its receive buffers and what completed. */
struct qp1 {
	struct muxbe *mb;
	uint16_t port;
	uint8_t gid[16];
	uint8_t recv_buf[QP1_RECV_DEPTH][MUXBE_RECV_BUF_MIN];
	unsigned received, sent_ok, sent_failed;
	int link_up;
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* A MAD for the guest: a receive completion on its QP1.  A real device
 * model copies buf into the guest's buffer and raises a CQE. */
static void qp1_recv(void *user, void *buf_ctx, void *buf, size_t mad_len,
		     const struct muxbe_addr *addr)
{
	struct qp1 *q = user;

	(void)buf_ctx;
	if (addr == NULL)
		return; /* flushed by muxbe_flush_recv() */
	q->received++;
	printf("qp1: received a %zu-byte MAD (attribute 0x%04x)\n", mad_len,
	       ((uint8_t *)buf)[MUXBE_GRH_SIZE + 16] << 8 |
		       ((uint8_t *)buf)[MUXBE_GRH_SIZE + 17]);
	/* The guest reposts its buffer. */
	muxbe_post_recv(q->mb, buf, MUXBE_RECV_BUF_MIN, NULL);
}

/* The verdict on a send: the send completion the guest sees. */
static void qp1_send_done(void *user, void *send_ctx, int status,
			  const char *msg)
{
	struct qp1 *q = user;

	(void)send_ctx;
	if (status == 0) {
		q->sent_ok++;
		return;
	}
	q->sent_failed++;
	printf("qp1: send refused: %s (%s)\n", msg, strerror(-status));
}

/* The daemon went away and came back: nothing to do but say so; the
 * library reconnected and registered the GID again. */
static void qp1_link(void *user, int up, int status, const char *msg)
{
	struct qp1 *q = user;

	q->link_up = up;
	printf("qp1: daemon link %s: %s\n", up ? "up" : "down", msg);
	if (up && status)
		printf("qp1: the guest's connections are gone; its CM will see timeouts\n");
}

static int parse_gid(const char *text, uint8_t gid[16])
{
	struct in_addr v4;

	if (inet_pton(AF_INET6, text, gid) == 1)
		return 0;
	if (inet_pton(AF_INET, text, &v4) != 1)
		return -EINVAL;
	memset(gid, 0, 10); /* IPv4-mapped, as RoCE GIDs are */
	gid[10] = gid[11] = 0xff;
	memcpy(gid + 12, &v4, 4);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct muxbe_callbacks cb = {
		.recv = qp1_recv,
		.send_done = qp1_send_done,
		.link = qp1_link,
	};
	struct qp1 q = { .link_up = 1 };
	struct muxbe_options o = { .name = "example", .cb = &cb, .user = &q };
	struct pollfd pfd;
	char err[256];
	int i, rc;

	if (argc < 2 || parse_gid(argv[1], q.gid) < 0) {
		fprintf(stderr, "usage: device_model GID [PEER-GID]\n");
		return 2;
	}
	o.errbuf = err;
	o.errbuf_len = sizeof(err);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	/* At device realize: connect (socket from $RDMACM_MUX_SOCKET or the
	 * default), then claim the guest's GID on the port. */
	rc = muxbe_connect(&o, &q.mb);
	if (rc < 0) {
		fprintf(stderr, "device_model: %s\n", err);
		return 1;
	}
	rc = muxbe_register_gid(q.mb, NULL, q.gid, &q.port);
	if (rc < 0) {
		muxbe_last_error(q.mb, err, sizeof(err));
		fprintf(stderr, "device_model: register_gid: %s\n", err);
		muxbe_close(q.mb);
		return 1;
	}
	/* The guest posts its QP1 receive queue. */
	for (i = 0; i < QP1_RECV_DEPTH; i++)
		muxbe_post_recv(q.mb, q.recv_buf[i], MUXBE_RECV_BUF_MIN, NULL);
	printf("qp1: ready on port %u\n", q.port);
	fflush(stdout);

	/* The guest posts a send on QP1: a CM MAD to a peer's GSI QP. */
	if (argc > 2) {
		struct muxbe_addr a = { .port = q.port,
					.grh = 1,
					.hop_limit = 64,
					.remote_qpn = 1,
					.qkey = 0x80010000 };
		uint8_t mad[MUXBE_MAD_SIZE] = { 0x01, 0x07, 0x02, 0x03 };

		if (parse_gid(argv[2], a.remote_gid) < 0)
			return 2;
		memcpy(a.local_gid, q.gid, 16);
		mad[16] = 0x00;
		mad[17] = 0x15;     /* DREQ */
		mad[24 + 3] = 0x42; /* for a connection it has not */
		muxbe_send_mad(q.mb, &a, mad, sizeof(mad), NULL);
	}

	/* The device model's event loop: one more fd to poll. */
	pfd.fd = muxbe_fd(q.mb);
	pfd.events = POLLIN;
	while (!stop) {
		if (poll(&pfd, 1, 200) > 0 && muxbe_process(q.mb) < 0)
			break;
		if (argc > 2 && q.sent_ok + q.sent_failed == 1)
			break; /* the example's send has its verdict */
	}
	printf("qp1: %u received, %u sent, %u refused\n", q.received, q.sent_ok,
	       q.sent_failed);
	/* At device unrealize. */
	muxbe_close(q.mb);
	return 0;
}
