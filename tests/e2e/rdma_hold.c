// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * rdma_hold: one RC connection held across events outside it, for the
 * lab's restart scenarios (librdmacm, as rdma-core's rdma_client and
 * rdma_server use it; it runs in a pvrdma guest, where rping and
 * ucmatose cannot).
 *
 *   rdma_hold -l [-p PORT] [--wait FILE]...
 *       server: accept one connection; receive a message, answer it;
 *       then, for each FILE in turn, wait until it exists (up to 10
 *       minutes) and send a message, and receive the answer; then wait
 *       for the peer's disconnect (its DREQ), and answer it (DREP).
 *   rdma_hold -s SERVER [-p PORT] [-n ROUNDS]
 *       client: connect, send a message and receive the answer; then
 *       ROUNDS more times receive a message and answer it; disconnect.
 *
 * Each step is a line "rdma_hold: ..."; exit status 0 when all went.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define MSG_SIZE 16 /* rdma_client's and rdma_server's */
#define MAX_WAITS 8

struct hold {
	struct rdma_cm_id *id;
	struct ibv_mr *recv_mr, *send_mr;
	int send_flags;
	char recv_msg[MSG_SIZE], send_msg[MSG_SIZE];
};

static void say(const char *what, const char *arg)
{
	printf("rdma_hold: %s%s\n", what, arg);
	fflush(stdout);
}

static int post_recv(struct hold *h)
{
	return rdma_post_recv(h->id, NULL, h->recv_msg, MSG_SIZE, h->recv_mr);
}

/* A completion on cq within 10 minutes: CQs are polled, not waited on
 * with events, which pvrdma guests do not always deliver. */
static int poll_comp(struct ibv_cq *cq, struct ibv_wc *wc)
{
	int rc, i;

	for (i = 0; i < 600000; i++) {
		rc = ibv_poll_cq(cq, 1, wc);
		if (rc)
			return rc;
		usleep(1000);
	}
	return -1;
}

static int send_text(struct hold *h, const char *text)
{
	struct ibv_wc wc;
	int rc;

	snprintf(h->send_msg, MSG_SIZE, "%s", text);
	if (rdma_post_send(h->id, NULL, h->send_msg, MSG_SIZE, h->send_mr,
			   h->send_flags))
		return -1;
	rc = poll_comp(h->id->send_cq, &wc);
	if (rc < 0 || wc.status != IBV_WC_SUCCESS)
		return -1;
	say("sent ", text);
	return 0;
}

/* The next message into recv_msg (a receive was posted), and one posted
 * for the message after it. */
static int recv_text(struct hold *h)
{
	struct ibv_wc wc;
	int rc;

	rc = poll_comp(h->id->recv_cq, &wc);
	if (rc < 0 || wc.status != IBV_WC_SUCCESS)
		return -1;
	h->recv_msg[MSG_SIZE - 1] = '\0';
	say("received ", h->recv_msg);
	return post_recv(h);
}

static int setup(struct hold *h, struct ibv_qp_init_attr *attr)
{
	if (attr->cap.max_inline_data >= MSG_SIZE)
		h->send_flags = IBV_SEND_INLINE;
	h->recv_mr = rdma_reg_msgs(h->id, h->recv_msg, MSG_SIZE);
	if (h->recv_mr == NULL)
		return -1;
	if (!(h->send_flags & IBV_SEND_INLINE)) {
		h->send_mr = rdma_reg_msgs(h->id, h->send_msg, MSG_SIZE);
		if (h->send_mr == NULL)
			return -1;
	}
	return post_recv(h);
}

static void qp_attr(struct ibv_qp_init_attr *attr, void *ctx)
{
	memset(attr, 0, sizeof(*attr));
	attr->cap.max_send_wr = attr->cap.max_recv_wr = 2;
	attr->cap.max_send_sge = attr->cap.max_recv_sge = 1;
	attr->cap.max_inline_data = MSG_SIZE;
	attr->qp_context = ctx;
	attr->sq_sig_all = 1;
}

static int wait_file(const char *path)
{
	int i;

	for (i = 0; i < 6000; i++) {
		if (access(path, F_OK) == 0)
			return 0;
		usleep(100000);
	}
	return -1;
}

static int server(const char *port, const char *const *waits, int nwaits)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE,
				       .ai_port_space = RDMA_PS_TCP },
			     *res;
	struct ibv_qp_init_attr attr;
	struct rdma_cm_id *listen_id;
	struct hold h = { 0 };
	char text[MSG_SIZE];
	int i;

	if (rdma_getaddrinfo(NULL, port, &hints, &res)) {
		perror("rdma_hold: rdma_getaddrinfo");
		return 1;
	}
	qp_attr(&attr, NULL);
	if (rdma_create_ep(&listen_id, res, NULL, &attr) ||
	    rdma_listen(listen_id, 0)) {
		perror("rdma_hold: listen");
		return 1;
	}
	say("listening on port ", port);
	if (rdma_get_request(listen_id, &h.id)) {
		perror("rdma_hold: rdma_get_request");
		return 1;
	}
	memset(&attr, 0, sizeof(attr));
	if (ibv_query_qp(h.id->qp, &(struct ibv_qp_attr){ 0 }, IBV_QP_CAP,
			 &attr) ||
	    setup(&h, &attr) || rdma_accept(h.id, NULL)) {
		perror("rdma_hold: accept");
		return 1;
	}
	say("connected", "");
	if (recv_text(&h) || send_text(&h, "one-back"))
		return 1;
	for (i = 0; i < nwaits; i++) {
		if (wait_file(waits[i])) {
			say("never appeared: ", waits[i]);
			return 1;
		}
		snprintf(text, sizeof(text), "after-%d", (i + 1) % 100);
		if (send_text(&h, text) || recv_text(&h))
			return 1;
	}
	/* The peer's DREQ: its event waits on the ID's channel (read by
	 * rdma_disconnect(), which answers it with a DREP). */
	{
		struct pollfd pfd = { .fd = h.id->channel->fd,
				      .events = POLLIN };

		if (poll(&pfd, 1, 600000) != 1) {
			say("no disconnect from the peer", "");
			return 1;
		}
	}
	if (rdma_disconnect(h.id) || h.id->event == NULL ||
	    h.id->event->event != RDMA_CM_EVENT_DISCONNECTED) {
		say("the peer's disconnect was not", "");
		return 1;
	}
	say("disconnected by the peer", "");
	rdma_destroy_ep(h.id);
	rdma_destroy_ep(listen_id);
	say("end 0", "");
	return 0;
}

static int client(const char *server_addr, const char *port, int rounds)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	struct ibv_qp_init_attr attr;
	struct hold h = { 0 };
	char text[MSG_SIZE];
	int i;

	if (rdma_getaddrinfo(server_addr, port, &hints, &res)) {
		perror("rdma_hold: rdma_getaddrinfo");
		return 1;
	}
	qp_attr(&attr, NULL);
	if (rdma_create_ep(&h.id, res, NULL, &attr) || setup(&h, &attr) ||
	    rdma_connect(h.id, NULL)) {
		perror("rdma_hold: connect");
		return 1;
	}
	say("connected to ", server_addr);
	if (send_text(&h, "one") || recv_text(&h))
		return 1;
	for (i = 0; i < rounds; i++) {
		if (recv_text(&h))
			return 1;
		snprintf(text, sizeof(text), "back-%d", (i + 1) % 100);
		if (send_text(&h, text))
			return 1;
	}
	if (rdma_disconnect(h.id)) {
		perror("rdma_hold: rdma_disconnect");
		return 1;
	}
	say("disconnected", "");
	rdma_destroy_ep(h.id);
	say("end 0", "");
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "wait", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 },
	};
	const char *port = "7471", *server_addr = NULL, *waits[MAX_WAITS];
	int c, listen = 0, rounds = 0, nwaits = 0;

	while ((c = getopt_long(argc, argv, "ls:p:n:w:", opts, NULL)) != -1) {
		switch (c) {
		case 'l': listen = 1; break;
		case 's': server_addr = optarg; break;
		case 'p': port = optarg; break;
		case 'n': rounds = atoi(optarg); break;
		case 'w':
			if (nwaits < MAX_WAITS)
				waits[nwaits++] = optarg;
			break;
		default:
			fprintf(stderr,
				"usage: rdma_hold -l [-p PORT] [--wait FILE]... | -s SERVER [-p PORT] [-n ROUNDS]\n");
			return 2;
		}
	}
	if (listen == (server_addr != NULL))
		return 2;
	return listen ? server(port, waits, nwaits)
		      : client(server_addr, port, rounds);
}
