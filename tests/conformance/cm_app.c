// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * cm_app: the application side of a conformance case (librdmacm, as any
 * stock rdma_cm program).  It runs on a host with the kernel CM and in a
 * pvrdma guest behind rdmacm-muxd with the same behaviour, so that the
 * peer's records of the two compare.
 *
 *   cm_app --tag T (--listen | --connect ADDR) [--port N]
 *          [--on-req accept|reject|ignore] [--accept-after MS]
 *          [--disconnect-after MS] [--on-dreq answer|hold]
 *          [--give-up MS] [--exit-after MS] [--linger MS]
 *
 * --listen takes connection requests on 0.0.0.0:PORT (7471); --connect
 * opens one to ADDR:PORT.  --on-req: accept (after --accept-after), reject
 * (rdma_reject, no private data) or leave it unanswered.  Once established,
 * --disconnect-after: rdma_disconnect after MS.  --on-dreq answer (the
 * default) calls rdma_disconnect on a peer's disconnect (the DREP); hold
 * leaves it unanswered.  --give-up: an active side not yet connected after
 * MS destroys its ID (what cm.c then sends is the case's business).  The
 * app ends --linger MS after its connection ended, or --exit-after MS
 * after it started (15 s), destroying what it holds.
 *
 * Prints "cm_app[T]: ready", one line per event, "cm_app[T]: exit".
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/rdma_cma.h>

enum app_on_req { APP_ACCEPT, APP_REJECT, APP_IGNORE };

struct app {
	const char *tag;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen_id, *id;
	enum app_on_req on_req;
	int hold_dreq, established, qp;
	long accept_after, disconnect_after, give_up, exit_after, linger;
	/* Deadlines in ms on the monotonic clock; 0: none. */
	double accept_at, disconnect_at, give_up_at, exit_at;
};

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void say(const struct app *a, const char *what, int value)
{
	printf("cm_app[%s]: %s %d\n", a->tag, what, value);
	fflush(stdout);
}

static int app_create_qp(struct app *a, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &attr)) {
		say(a, "rdma_create_qp failed, errno", errno);
		return -1;
	}
	a->qp = 1;
	return 0;
}

static void app_accept(struct app *a)
{
	a->accept_at = 0;
	/* No parameters, as rdma_server: librdmacm takes the REQ's
	 * within the device's limits. */
	if (app_create_qp(a, a->id) == 0 && rdma_accept(a->id, NULL))
		say(a, "rdma_accept failed, errno", errno);
}

/* The connection is over: end after the linger. */
static void app_done(struct app *a)
{
	double at = now_ms() + (double)a->linger;

	if (!a->exit_at || at < a->exit_at)
		a->exit_at = at;
}

static void app_event(struct app *a, struct rdma_cm_event *ev)
{
	enum rdma_cm_event_type type = ev->event;
	struct rdma_cm_id *id = ev->id;

	say(a, rdma_event_str(type), ev->status);
	rdma_ack_cm_event(ev);
	switch (type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(id, 2000))
			say(a, "rdma_resolve_route failed, errno", errno);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		/* No parameters, as rdma_client. */
		if (app_create_qp(a, id) == 0 && rdma_connect(id, NULL))
			say(a, "rdma_connect failed, errno", errno);
		break;
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		if (a->id) {
			/* One connection per case: more are refused. */
			rdma_reject(id, NULL, 0);
			rdma_destroy_id(id);
			break;
		}
		a->id = id;
		if (a->on_req == APP_REJECT) {
			if (rdma_reject(id, NULL, 0))
				say(a, "rdma_reject failed, errno", errno);
			app_done(a);
		} else if (a->on_req == APP_ACCEPT) {
			a->accept_at = now_ms() + (double)a->accept_after;
			if (a->accept_after == 0)
				app_accept(a);
		}
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		a->established = 1;
		a->give_up_at = 0;
		if (a->disconnect_after >= 0)
			a->disconnect_at = now_ms() +
					   (double)a->disconnect_after;
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		a->disconnect_at = 0;
		if (!a->hold_dreq) {
			rdma_disconnect(id);
			app_done(a);
		}
		break;
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		a->give_up_at = 0;
		app_done(a);
		break;
	default: break;
	}
}

/* The nearest deadline, as a poll() timeout. */
static int app_timeout(const struct app *a)
{
	double d[4] = { a->accept_at, a->disconnect_at, a->give_up_at,
			a->exit_at },
	       best = 0, now = now_ms();
	int i;

	for (i = 0; i < 4; i++)
		if (d[i] && (!best || d[i] < best))
			best = d[i];
	if (!best)
		return 1000;
	return best <= now ? 0 : (int)(best - now) + 1;
}

static void app_timers(struct app *a)
{
	double now = now_ms();

	if (a->accept_at && a->accept_at <= now)
		app_accept(a);
	if (a->disconnect_at && a->disconnect_at <= now) {
		a->disconnect_at = 0;
		say(a, "rdma_disconnect", rdma_disconnect(a->id) ? errno : 0);
	}
	if (a->give_up_at && a->give_up_at <= now) {
		a->give_up_at = 0;
		say(a, "give up", 0);
		if (a->qp)
			rdma_destroy_qp(a->id);
		rdma_destroy_id(a->id);
		a->id = NULL;
		a->qp = 0;
		app_done(a);
	}
}

static int app_start(struct app *a, const char *connect_to, const char *port)
{
	struct addrinfo hints, *res;
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET;
	hints.ai_flags = connect_to ? 0 : AI_PASSIVE;
	if (getaddrinfo(connect_to, port, &hints, &res))
		return -1;
	if (!connect_to) {
		rc = rdma_create_id(a->ch, &a->listen_id, a, RDMA_PS_TCP);
		if (rc == 0)
			rc = rdma_bind_addr(a->listen_id, res->ai_addr);
		if (rc == 0)
			rc = rdma_listen(a->listen_id, 4);
	} else {
		rc = rdma_create_id(a->ch, &a->id, a, RDMA_PS_TCP);
		if (rc == 0)
			rc = rdma_resolve_addr(a->id, NULL, res->ai_addr, 2000);
		if (rc == 0 && a->give_up >= 0)
			a->give_up_at = now_ms() + (double)a->give_up;
	}
	freeaddrinfo(res);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "tag", required_argument, NULL, 't' },
		{ "listen", no_argument, NULL, 'l' },
		{ "connect", required_argument, NULL, 'c' },
		{ "port", required_argument, NULL, 'p' },
		{ "on-req", required_argument, NULL, 'r' },
		{ "accept-after", required_argument, NULL, 'a' },
		{ "disconnect-after", required_argument, NULL, 'd' },
		{ "on-dreq", required_argument, NULL, 'q' },
		{ "give-up", required_argument, NULL, 'g' },
		{ "exit-after", required_argument, NULL, 'x' },
		{ "linger", required_argument, NULL, 'L' },
		{ NULL, 0, NULL, 0 },
	};
	struct app a = { .tag = "-",
			 .disconnect_after = -1,
			 .give_up = -1,
			 .exit_after = 15000,
			 .linger = 1000 };
	const char *connect_to = NULL, *port = "7471";
	struct rdma_cm_event *ev;
	struct pollfd pfd;
	int c, listen = 0;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 't': a.tag = optarg; break;
		case 'l': listen = 1; break;
		case 'c': connect_to = optarg; break;
		case 'p': port = optarg; break;
		case 'r':
			a.on_req = !strcmp(optarg, "reject")   ? APP_REJECT
				   : !strcmp(optarg, "ignore") ? APP_IGNORE
							       : APP_ACCEPT;
			break;
		case 'a': a.accept_after = atol(optarg); break;
		case 'd': a.disconnect_after = atol(optarg); break;
		case 'q': a.hold_dreq = !strcmp(optarg, "hold"); break;
		case 'g': a.give_up = atol(optarg); break;
		case 'x': a.exit_after = atol(optarg); break;
		case 'L': a.linger = atol(optarg); break;
		default:
			fprintf(stderr, "cm_app: see the head of cm_app.c\n");
			return 2;
		}
	}
	if (listen == !!connect_to) {
		fprintf(stderr, "cm_app: one of --listen and --connect\n");
		return 2;
	}
	a.ch = rdma_create_event_channel();
	if (!a.ch || app_start(&a, connect_to, port)) {
		say(&a, "start failed, errno", errno);
		return 1;
	}
	a.exit_at = now_ms() + (double)a.exit_after;
	say(&a, "ready", 0);
	pfd.fd = a.ch->fd;
	pfd.events = POLLIN;
	while (now_ms() < a.exit_at) {
		if (poll(&pfd, 1, app_timeout(&a)) > 0 &&
		    rdma_get_cm_event(a.ch, &ev) == 0)
			app_event(&a, ev);
		app_timers(&a);
	}
	if (a.id) {
		if (a.qp)
			rdma_destroy_qp(a.id);
		rdma_destroy_id(a.id);
	}
	if (a.listen_id)
		rdma_destroy_id(a.listen_id);
	rdma_destroy_event_channel(a.ch);
	say(&a, "exit", 0);
	return 0;
}
