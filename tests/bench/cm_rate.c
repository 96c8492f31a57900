// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * cm_rate: connection setup and teardown rate with the kernel's rdma_cm,
 * for the lab benchmark (the peer side: librdmacm, as stock tools use it).
 *
 *   cm_rate -s [-b ADDR] [-p PORT]
 *       server: accept every connection (a QP each), destroy it when the
 *       peer disconnects; runs until killed.
 *   cm_rate -c N -a SERVER [-b ADDR] [-p PORT] [-w WINDOW]
 *       client: N connections, WINDOW at a time.  Addresses, routes and
 *       QPs are made first; then the connect phase (first rdma_connect to
 *       the last ESTABLISHED) and the disconnect phase (first
 *       rdma_disconnect to the last DISCONNECTED) are timed.  Prints
 *       "cm_rate: KEY VALUE" lines: connect_per_s, disconnect_per_s,
 *       cycle_per_s.
 *
 * tests/bench/cm_rate_vm.c does the same from a VM through rdmacm-muxd,
 * and prints the same lines.
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/rdma_cma.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int get_addr(const char *host, const char *port,
		    struct sockaddr_storage *ss)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	int rc = getaddrinfo(host, port, &hints, &res);

	if (rc) {
		fprintf(stderr, "cm_rate: %s: %s\n", host, gai_strerror(rc));
		return -1;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

/* One PD and CQ for the device the first connection comes on. */
static struct ibv_pd *pd;
static struct ibv_cq *cq;

static int make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1,
			 .max_recv_wr = 1,
			 .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};

	if (pd == NULL) {
		pd = ibv_alloc_pd(id->verbs);
		cq = pd ? ibv_create_cq(id->verbs, 64, NULL, NULL, 0) : NULL;
		if (cq == NULL) {
			fprintf(stderr, "cm_rate: cannot make a PD and CQ\n");
			return -1;
		}
	}
	attr.send_cq = attr.recv_cq = cq;
	if (rdma_create_qp(id, pd, &attr)) {
		perror("cm_rate: rdma_create_qp");
		return -1;
	}
	return 0;
}

static void drop_id(struct rdma_cm_id *id)
{
	if (id->qp)
		rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

static int serve(struct rdma_event_channel *ch,
		 struct sockaddr_storage *bind_ss)
{
	struct rdma_conn_param param = { .responder_resources = 1,
					 .initiator_depth = 1,
					 .rnr_retry_count = 7 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *listen_id, *id;
	enum rdma_cm_event_type type;
	unsigned long accepted = 0;

	if (rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen_id, (struct sockaddr *)bind_ss) ||
	    rdma_listen(listen_id, 1024)) {
		perror("cm_rate: listen");
		return 1;
	}
	printf("cm_rate: listening\n");
	fflush(stdout);
	while (rdma_get_cm_event(ch, &ev) == 0) {
		id = ev->id;
		type = ev->event;
		switch (type) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			if (make_qp(id) || rdma_accept(id, &param)) {
				rdma_reject(id, NULL, 0);
				rdma_ack_cm_event(ev);
				drop_id(id);
				continue;
			}
			accepted++;
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
		case RDMA_CM_EVENT_REJECTED:
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
			rdma_ack_cm_event(ev);
			/* Destroying it in DREQ_RCVD sends the DREP. */
			drop_id(id);
			continue;
		default: break;
		}
		rdma_ack_cm_event(ev);
	}
	return 0;
}

enum {
	C_NEW,
	C_ADDR,
	C_ROUTE,
	C_READY,
	C_CONNECTING,
	C_UP,
	C_CLOSING,
	C_DOWN,
	C_FAILED
};

struct conn {
	struct rdma_cm_id *id;
	int state;
	double t_disc, disc_s; /* rdma_disconnect(), and to DISCONNECTED */
};

static struct conn *conns;
static unsigned nconns, window;

static struct conn *conn_of(struct rdma_cm_id *id)
{
	return id->context;
}

/* Events until every connection has reached at least `want` (or failed);
 * start() moves the next ones in, at most `window` in flight. */
static int run_phase(struct rdma_event_channel *ch, int want,
		     int (*start)(struct conn *c), int start_from,
		     int busy_state)
{
	unsigned next = 0, busy = 0, done = 0, i;
	struct rdma_cm_event *ev;
	struct conn *c;

	for (i = 0; i < nconns; i++)
		if (conns[i].state >= want)
			done++;
	while (done < nconns) {
		while (busy < window && next < nconns) {
			c = &conns[next++];
			if (c->state != start_from)
				continue;
			if (start(c) < 0) {
				c->state = C_FAILED;
				done++;
				continue;
			}
			c->state = busy_state;
			busy++;
		}
		if (rdma_get_cm_event(ch, &ev))
			return -1;
		c = conn_of(ev->id);
		if (ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT ||
		    c->state == C_FAILED || c->state >= want) {
			/* The end of an earlier phase's connection (its
			 * TimeWait), or one that is done already. */
			rdma_ack_cm_event(ev);
			continue;
		}
		switch (ev->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			c->state = C_ADDR;
			if (rdma_resolve_route(c->id, 2000))
				c->state = C_FAILED;
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			c->state = make_qp(c->id) ? C_FAILED : C_READY;
			break;
		case RDMA_CM_EVENT_ESTABLISHED: c->state = C_UP; break;
		case RDMA_CM_EVENT_DISCONNECTED:
			c->state = C_DOWN;
			c->disc_s = now_s() - c->t_disc;
			break;
		default:
			fprintf(stderr,
				"cm_rate: connection %ld: %s (status %d)\n",
				(long)(c - conns), rdma_event_str(ev->event),
				ev->status);
			c->state = C_FAILED;
			break;
		}
		rdma_ack_cm_event(ev);
		if (c->state >= want || c->state == C_FAILED) {
			done++;
			busy--;
		}
	}
	return 0;
}

static struct sockaddr_storage src_ss, dst_ss;
static int have_src;

static int start_resolve(struct conn *c)
{
	return rdma_resolve_addr(c->id,
				 have_src ? (struct sockaddr *)&src_ss : NULL,
				 (struct sockaddr *)&dst_ss, 2000);
}

static int start_connect(struct conn *c)
{
	struct rdma_conn_param param = { .responder_resources = 1,
					 .initiator_depth = 1,
					 .retry_count = 7,
					 .rnr_retry_count = 7 };

	return rdma_connect(c->id, &param);
}

static int start_disconnect(struct conn *c)
{
	c->t_disc = now_s();
	return rdma_disconnect(c->id);
}

static int client(struct rdma_event_channel *ch)
{
	double t0, t_conn, t_disc, disc_sum = 0;
	unsigned i, up = 0, down = 0;

	conns = calloc(nconns, sizeof(*conns));
	if (conns == NULL)
		return 1;
	for (i = 0; i < nconns; i++)
		if (rdma_create_id(ch, &conns[i].id, &conns[i], RDMA_PS_TCP)) {
			perror("cm_rate: rdma_create_id");
			return 1;
		}
	if (run_phase(ch, C_READY, start_resolve, C_NEW, C_NEW) < 0)
		return 1;
	t0 = now_s();
	if (run_phase(ch, C_UP, start_connect, C_READY, C_CONNECTING) < 0)
		return 1;
	t_conn = now_s() - t0;
	for (i = 0; i < nconns; i++)
		up += conns[i].state == C_UP;
	t0 = now_s();
	if (run_phase(ch, C_DOWN, start_disconnect, C_UP, C_CLOSING) < 0)
		return 1;
	t_disc = now_s() - t0;
	for (i = 0; i < nconns; i++) {
		down += conns[i].state == C_DOWN;
		if (conns[i].state == C_DOWN)
			disc_sum += conns[i].disc_s;
		drop_id(conns[i].id);
	}
	printf("cm_rate: connections %u\n", nconns);
	printf("cm_rate: established %u\n", up);
	printf("cm_rate: disconnected %u\n", down);
	printf("cm_rate: connect_per_s %.1f\n", up / t_conn);
	printf("cm_rate: disconnect_per_s %.1f\n", down / t_disc);
	printf("cm_rate: cycle_per_s %.1f\n", down / (t_conn + t_disc));
	/* A disconnect's own time, from its call to its event. */
	printf("cm_rate: disconnect_ms %.2f\n",
	       down ? disc_sum * 1e3 / down : 0);
	return up == nconns && down == nconns ? 0 : 1;
}

int main(int argc, char **argv)
{
	const char *bind_addr = NULL, *server = NULL, *port = "7471";
	struct rdma_event_channel *ch;
	int c, serving = 0;

	window = 16;
	while ((c = getopt(argc, argv, "sb:a:p:c:w:")) != -1) {
		switch (c) {
		case 's': serving = 1; break;
		case 'b': bind_addr = optarg; break;
		case 'a': server = optarg; break;
		case 'p': port = optarg; break;
		case 'c': nconns = (unsigned)atoi(optarg); break;
		case 'w': window = (unsigned)atoi(optarg); break;
		default:
			fprintf(stderr,
				"usage: cm_rate -s [-b ADDR] [-p PORT]\n"
				"       cm_rate -c N -a SERVER [-b ADDR] [-p "
				"PORT] [-w WINDOW]\n");
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	ch = rdma_create_event_channel();
	if (ch == NULL) {
		perror("cm_rate: rdma_create_event_channel");
		return 1;
	}
	if (serving) {
		memset(&src_ss, 0, sizeof(src_ss));
		if (bind_addr ? get_addr(bind_addr, port, &src_ss)
			      : get_addr("0.0.0.0", port, &src_ss))
			return 2;
		return serve(ch, &src_ss);
	}
	if (server == NULL || nconns == 0 || window == 0) {
		fprintf(stderr, "cm_rate: a client needs -a SERVER and -c N\n");
		return 2;
	}
	if (get_addr(server, port, &dst_ss))
		return 2;
	if (bind_addr) {
		if (get_addr(bind_addr, "0", &src_ss))
			return 2;
		have_src = 1;
	}
	return client(ch);
}
