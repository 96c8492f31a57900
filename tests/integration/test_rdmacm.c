// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * librdmacm-mux (rdmacm-mux-run(1)): librdmacm's API through the real
 * daemon on a sim port, as a host process calls it.  The library is the
 * process's (as librdmacm is), so every case runs in a process of its
 * own, forked before it first touches the library; cases with two
 * processes fork again.  The sim port has no QPs: connections name a QP
 * number in rdma_conn_param, as librdmacm allows; the lab runs stock
 * tools with real QPs (tests/e2e/scenarios/27-host-apps.sh).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <rdma/rdma_cma.h>

#include "common/gid.h"
#include "tests/integration/harness.h"

#define SERVER_IP "10.1.0.1"
#define CLIENT_IP "10.1.0.2"
/* Each case's process: a failed check says where and exits 1. */
#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: %s failed (errno %s)\n",     \
				__FILE__, __LINE__, #cond, strerror(errno)); \
			_exit(1);                                            \
		}                                                            \
	} while (0)

static struct sockaddr_in sin_of(const char *ip, uint16_t port)
{
	struct sockaddr_in s = { .sin_family = AF_INET,
				 .sin_port = htons(port) };

	inet_pton(AF_INET, ip, &s.sin_addr);
	return s;
}

/* The next event on ch within the deadline, one of two kinds. */
static struct rdma_cm_event *next_event_of(struct rdma_event_channel *ch,
					   enum rdma_cm_event_type a,
					   enum rdma_cm_event_type b)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev = NULL;

	CHECK(poll(&pfd, 1, 15000 * h_time_scale()) == 1);
	CHECK(rdma_get_cm_event(ch, &ev) == 0);
	if (ev->event != a && ev->event != b) {
		fprintf(stderr, "got %s, wanted %s or %s\n",
			rdma_event_str(ev->event), rdma_event_str(a),
			rdma_event_str(b));
		_exit(1);
	}
	return ev;
}

/* The next event on ch within the deadline; it must be `want`. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch,
					enum rdma_cm_event_type want)
{
	return next_event_of(ch, want, want);
}

static void expect_ack(struct rdma_event_channel *ch,
		       enum rdma_cm_event_type want)
{
	rdma_ack_cm_event(next_event(ch, want));
}

/* An id on ch resolved from CLIENT_IP to SERVER_IP:port. */
static struct rdma_cm_id *resolved(struct rdma_event_channel *ch, uint16_t port)
{
	struct sockaddr_in src = sin_of(CLIENT_IP, 0),
			   dst = sin_of(SERVER_IP, port);
	struct rdma_cm_id *id;

	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src,
				(struct sockaddr *)&dst, 2000) == 0);
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(rdma_resolve_route(id, 2000) == 0);
	expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	return id;
}

static struct rdma_cm_id *listening(struct rdma_event_channel *ch,
				    uint16_t port, int backlog)
{
	struct sockaddr_in a = sin_of(SERVER_IP, port);
	struct rdma_cm_id *id;

	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == 0);
	CHECK(rdma_listen(id, backlog) == 0);
	return id;
}

static int connect_qpn(struct rdma_cm_id *id, uint32_t qpn, const char *pd)
{
	struct rdma_conn_param p = {
		.private_data = pd,
		.private_data_len = pd ? (uint8_t)(strlen(pd) + 1) : 0,
		.responder_resources = 1,
		.initiator_depth = 1,
		.retry_count = 5,
		.rnr_retry_count = 6,
		.qp_num = qpn,
	};

	return rdma_connect(id, &p);
}

static int accept_qpn(struct rdma_cm_id *id, uint32_t qpn, const char *pd)
{
	struct rdma_conn_param p = {
		.private_data = pd,
		.private_data_len = pd ? (uint8_t)(strlen(pd) + 1) : 0,
		.responder_resources = 1,
		.initiator_depth = 1,
		.rnr_retry_count = 7,
		.qp_num = qpn,
	};

	return rdma_accept(id, &p);
}

/* Run fn in a process of its own against the fixture's daemon; the
 * case passes when that process exits 0. */
static void in_process(struct hdaemon *d, void (*fn)(void))
{
	pid_t pid;
	int status = 0;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("RDMACM_MUX_SOCKET", d->sock, 1);
		fn();
		exit(0); /* (not _exit: LeakSanitizer checks at exit) */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* test_NAME: NAME() in a process of its own, against the daemon. */
#define PROCESS_CASE(name)                                          \
	static void test_##name(void **state)                       \
	{                                                           \
		in_process(&((struct h_fixture *)*state)->d, name); \
	}

/* ---- the cases ---------------------------------------------------------- */

static void connect_accept_disconnect(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *c, *s;
	struct rdma_cm_event *ev;

	CHECK(sch && cch);
	l = listening(sch, 7471, 0);
	c = resolved(cch, 7471);
	CHECK(connect_qpn(c, 0x111, "hello from the client") == 0);
	ev = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(ev->listen_id == l);
	s = ev->id;
	CHECK(strcmp(ev->param.conn.private_data, "hello from the client") ==
	      0);
	CHECK(ev->param.conn.qp_num == 0x111);
	CHECK(ev->param.conn.retry_count == 5);
	CHECK(ev->param.conn.rnr_retry_count == 6);
	/* rdma_cm's header: the peer's address and port. */
	CHECK(s->route.addr.dst_sin.sin_addr.s_addr ==
	      sin_of(CLIENT_IP, 0).sin_addr.s_addr);
	CHECK(rdma_get_dst_port(s) == c->route.addr.src_sin.sin_port);
	CHECK(rdma_get_src_port(s) == htons(7471));
	rdma_ack_cm_event(ev);
	CHECK(accept_qpn(s, 0x222, "welcome") == 0);
	ev = next_event(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(strcmp(ev->param.conn.private_data, "welcome") == 0);
	CHECK(ev->param.conn.qp_num == 0x222);
	rdma_ack_cm_event(ev);
	CHECK(rdma_establish(c) == 0);
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(rdma_disconnect(c) == 0);
	expect_ack(sch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(rdma_disconnect(s) == 0); /* the DREP */
	expect_ack(cch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(rdma_destroy_id(s) == 0);
	CHECK(rdma_destroy_id(c) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

PROCESS_CASE(connect_accept_disconnect)

static void reject_and_no_listener(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *c;
	struct rdma_cm_event *ev;

	CHECK(sch && cch);
	l = listening(sch, 7471, 0);
	c = resolved(cch, 7471);
	CHECK(connect_qpn(c, 0x111, NULL) == 0);
	ev = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(rdma_reject(ev->id, "go away", 8) == 0);
	CHECK(rdma_destroy_id(ev->id) == 0);
	rdma_ack_cm_event(ev);
	ev = next_event(cch, RDMA_CM_EVENT_REJECTED);
	CHECK(ev->status == 28); /* consumer defined, as cma.c's reject */
	CHECK(memcmp(ev->param.conn.private_data, "go away", 8) == 0);
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(c) == 0);

	/* Nobody on port 9: the daemon answers as cm.c, reason 8. */
	c = resolved(cch, 9);
	CHECK(connect_qpn(c, 0x111, NULL) == 0);
	ev = next_event(cch, RDMA_CM_EVENT_REJECTED);
	CHECK(ev->status == 8);
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(c) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

PROCESS_CASE(reject_and_no_listener)

/* A second process listening on 7000 and accepting one connection;
 * it says on `ready` when it listens. */
static void listener_process(int ready, uint16_t port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	struct rdma_cm_id *s;
	char c = 1;

	CHECK(ch);
	listening(ch, port, 0);
	CHECK(write(ready, &c, 1) == 1);
	ev = next_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	s = ev->id;
	rdma_ack_cm_event(ev);
	CHECK(accept_qpn(s, 0x333, "the other process") == 0);
	expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	pause(); /* until killed */
}

static void two_processes_one_address(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *mine, *c, *dup;
	struct rdma_cm_event *ev;
	struct sockaddr_in a = sin_of(SERVER_IP, 7000);
	int p[2], status;
	pid_t other;
	char b;

	CHECK(pipe(p) == 0);
	other = fork();
	CHECK(other >= 0);
	if (other == 0) {
		close(p[0]);
		listener_process(p[1], 7000);
		_exit(0);
	}
	close(p[1]);
	CHECK(read(p[0], &b, 1) == 1);
	ch = rdma_create_event_channel();
	CHECK(ch);
	/* The same address, another port: as with the kernel CM. */
	mine = listening(ch, 7001, 0);
	/* The other process's port: the kernel bind's EADDRINUSE. */
	CHECK(rdma_create_id(ch, &dup, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(dup, (struct sockaddr *)&a) == 0);
	CHECK(rdma_listen(dup, 0) == -1 && errno == EADDRINUSE);
	CHECK(rdma_destroy_id(dup) == 0);

	/* A connection to the other process reaches it, not this one. */
	c = resolved(ch, 7000);
	CHECK(connect_qpn(c, 0x111, NULL) == 0);
	ev = next_event(ch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(strcmp(ev->param.conn.private_data, "the other process") == 0);
	rdma_ack_cm_event(ev);
	CHECK(rdma_establish(c) == 0);

	/* Killed with the connection open: its peer is told, by a DREQ,
	 * or by a REJ if our RTU had not reached the daemon yet (as cm.c
	 * answers for a cm_id destroyed in REP_SENT). */
	CHECK(kill(other, SIGKILL) == 0);
	CHECK(waitpid(other, &status, 0) == other);
	ev = next_event_of(ch, RDMA_CM_EVENT_DISCONNECTED,
			   RDMA_CM_EVENT_REJECTED);
	rdma_ack_cm_event(ev);
	CHECK(rdma_disconnect(c) == 0);
	CHECK(rdma_destroy_id(c) == 0);

	/* Its port is free again. */
	CHECK(rdma_create_id(ch, &dup, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(dup, (struct sockaddr *)&a) == 0);
	CHECK(rdma_listen(dup, 0) == 0);
	CHECK(rdma_destroy_id(dup) == 0);
	CHECK(rdma_destroy_id(mine) == 0);
	rdma_destroy_event_channel(ch);
}

PROCESS_CASE(two_processes_one_address)

static void backlog_and_nonblocking(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_event_channel *mch = rdma_create_event_channel();
	struct rdma_cm_id *c1, *c2, *marker, *l1, *l2, *s1, *s2;
	struct rdma_cm_event *ev;
	struct pollfd pfd = { .events = POLLIN };

	CHECK(sch && cch && mch);
	l1 = listening(sch, 7471, 1);
	l2 = listening(mch, 7473, 0);
	CHECK(fcntl(sch->fd, F_SETFL, O_NONBLOCK) == 0);
	CHECK(rdma_get_cm_event(sch, &ev) == -1 && errno == EAGAIN);
	c1 = resolved(cch, 7471);
	c2 = resolved(cch, 7471);
	marker = resolved(cch, 7473);
	CHECK(connect_qpn(c1, 0x111, "one") == 0);
	pfd.fd = sch->fd;
	CHECK(poll(&pfd, 1, 15000 * h_time_scale()) == 1);
	/* The backlog of one is full: the second REQ is dropped (ucma's
	 * -ENOMEM; cm.c sends no REJ).  The marker, sent after it on the
	 * same link, says it has come and gone. */
	CHECK(connect_qpn(c2, 0x112, "two") == 0);
	CHECK(connect_qpn(marker, 0x113, "marker") == 0);
	ev = next_event(mch, RDMA_CM_EVENT_CONNECT_REQUEST);
	s2 = ev->id;
	rdma_ack_cm_event(ev);
	ev = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(strcmp(ev->param.conn.private_data, "one") == 0);
	CHECK(poll(&pfd, 1, 0) == 0);
	s1 = ev->id;
	rdma_ack_cm_event(ev);
	/* Taken, it left the backlog: the REQ's retry finds room. */
	ev = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(strcmp(ev->param.conn.private_data, "two") == 0);
	CHECK(rdma_destroy_id(ev->id) == 0);
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(s1) == 0 && rdma_destroy_id(s2) == 0);
	CHECK(rdma_destroy_id(c1) == 0 && rdma_destroy_id(c2) == 0 &&
	      rdma_destroy_id(marker) == 0);
	CHECK(rdma_destroy_id(l1) == 0 && rdma_destroy_id(l2) == 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(mch);
}

PROCESS_CASE(backlog_and_nonblocking)

/* rdma_server's half of the synchronous API, in a thread. */
static void *sync_server(void *arg)
{
	struct rdma_cm_id *l = arg, *s;
	struct rdma_conn_param p = { .qp_num = 0x444,
				     .responder_resources = 1,
				     .initiator_depth = 1 };

	CHECK(rdma_get_request(l, &s) == 0);
	CHECK(s->event && s->event->event == RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(rdma_accept(s, &p) == 0); /* returns once ESTABLISHED */
	return s;
}

static void sync_api(void)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE |
						   RAI_NUMERICHOST,
				       .ai_port_space = RDMA_PS_TCP },
			     *res, *cres;
	struct rdma_cm_id *l, *c;
	struct rdma_conn_param p = { .qp_num = 0x555,
				     .responder_resources = 1,
				     .initiator_depth = 1 };
	pthread_t t;
	void *s;

	CHECK(rdma_getaddrinfo(SERVER_IP, "7472", &hints, &res) == 0);
	CHECK(res->ai_src_addr && res->ai_port_space == RDMA_PS_TCP);
	CHECK(rdma_create_ep(&l, res, NULL, NULL) == 0);
	CHECK(rdma_listen(l, 0) == 0);
	CHECK(pthread_create(&t, NULL, sync_server, l) == 0);
	hints.ai_flags = RAI_NUMERICHOST;
	hints.ai_src_addr = res->ai_src_addr; /* any port of that address */
	hints.ai_src_len = res->ai_src_len;
	((struct sockaddr_in *)res->ai_src_addr)->sin_addr.s_addr =
		sin_of(CLIENT_IP, 0).sin_addr.s_addr;
	((struct sockaddr_in *)res->ai_src_addr)->sin_port = 0;
	CHECK(rdma_getaddrinfo(SERVER_IP, "7472", &hints, &cres) == 0);
	CHECK(cres->ai_dst_addr && cres->ai_src_addr);
	CHECK(rdma_create_ep(&c, cres, NULL, NULL) == 0);
	CHECK(rdma_connect(c, &p) == 0); /* returns once answered */
	CHECK(c->event && c->event->event == RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(rdma_establish(c) == 0);
	CHECK(pthread_join(t, &s) == 0);
	CHECK(rdma_disconnect(c) == 0);
	rdma_destroy_ep(s);
	rdma_destroy_ep(c);
	rdma_destroy_ep(l);
	rdma_freeaddrinfo(res);
	rdma_freeaddrinfo(cres);
}

PROCESS_CASE(sync_api)

/* An id of port space ps resolved to SERVER_IP:port, listening or not. */
static struct rdma_cm_id *udp_id(struct rdma_event_channel *ch, uint16_t port,
				 int listen)
{
	struct sockaddr_in src = sin_of(CLIENT_IP, 0),
			   dst = sin_of(SERVER_IP, port);
	struct rdma_cm_id *id;

	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == 0);
	CHECK(id->qp_type == IBV_QPT_UD);
	if (listen) {
		CHECK(rdma_bind_addr(id, (struct sockaddr *)&dst) == 0);
		CHECK(rdma_listen(id, 0) == 0);
		return id;
	}
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src,
				(struct sockaddr *)&dst, 2000) == 0);
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(rdma_resolve_route(id, 2000) == 0);
	expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	return id;
}

static void sidr(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_conn_param hello = { .private_data = "sidr hello",
					 .private_data_len = 11 };
	struct rdma_conn_param answer = { .private_data = "here",
					  .private_data_len = 5,
					  .qp_num = 0x666 };
	struct rdma_cm_id *l, *c, *s;
	struct rdma_cm_event *ev;
	struct gid server;

	CHECK(sch && cch);
	l = udp_id(sch, 7474, 1);
	c = udp_id(cch, 7474, 0);
	CHECK(rdma_connect(c, &hello) == 0);
	ev = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(ev->listen_id == l);
	CHECK(strcmp(ev->param.ud.private_data, "sidr hello") == 0);
	s = ev->id;
	rdma_ack_cm_event(ev);
	CHECK(rdma_accept(s, &answer) == 0);
	/* The service's QP, its port space's Q_Key, and an AH to it. */
	ev = next_event(cch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->param.ud.qp_num == 0x666);
	CHECK(ev->param.ud.qkey == RDMA_UDP_QKEY);
	CHECK(strcmp(ev->param.ud.private_data, "here") == 0);
	CHECK(ev->param.ud.ah_attr.is_global);
	gid_parse(SERVER_IP, &server);
	CHECK(memcmp(ev->param.ud.ah_attr.grh.dgid.raw, server.raw, 16) == 0);
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(s) == 0);
	CHECK(rdma_destroy_id(c) == 0);

	/* Refused: UNREACHABLE with SIDR's status 2 (rejected). */
	c = udp_id(cch, 7474, 0);
	CHECK(rdma_connect(c, NULL) == 0);
	ev = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(rdma_reject(ev->id, NULL, 0) == 0);
	CHECK(rdma_destroy_id(ev->id) == 0);
	rdma_ack_cm_event(ev);
	ev = next_event(cch, RDMA_CM_EVENT_UNREACHABLE);
	CHECK(ev->status == 2);
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(c) == 0);

	/* Nobody on that port: status 1, as the kernel CM answers. */
	c = udp_id(cch, 7475, 0);
	CHECK(rdma_connect(c, NULL) == 0);
	ev = next_event(cch, RDMA_CM_EVENT_UNREACHABLE);
	CHECK(ev->status == 1);
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(c) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

PROCESS_CASE(sidr)

/* RDMA_PS_IB over IP addresses: its own service IDs, so a TCP listener
 * on the same port does not hear it. */
static void port_space_ib(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in srv = sin_of(SERVER_IP, 7479),
			   cli = sin_of(CLIENT_IP, 0);
	struct rdma_cm_id *l, *tcp, *c, *s;
	struct rdma_cm_event *ev;

	CHECK(ch);
	CHECK(rdma_create_id(ch, &l, NULL, RDMA_PS_IB) == 0);
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&srv) == 0);
	CHECK(rdma_listen(l, 0) == 0);
	tcp = listening(ch, 7479, 0); /* another port space: no clash */
	CHECK(rdma_create_id(ch, &c, NULL, RDMA_PS_IB) == 0);
	CHECK(rdma_resolve_addr(c, (struct sockaddr *)&cli,
				(struct sockaddr *)&srv, 2000) == 0);
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(rdma_resolve_route(c, 2000) == 0);
	expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK(connect_qpn(c, 0x141, "ib space") == 0);
	ev = next_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(ev->listen_id == l);
	s = ev->id;
	CHECK(s->ps == RDMA_PS_IB);
	rdma_ack_cm_event(ev);
	CHECK(accept_qpn(s, 0x142, NULL) == 0);
	expect_ack(ch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(rdma_establish(c) == 0);
	expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(rdma_disconnect(c) == 0);
	expect_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(rdma_disconnect(s) == 0);
	expect_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(rdma_destroy_id(s) == 0 && rdma_destroy_id(c) == 0);
	CHECK(rdma_destroy_id(tcp) == 0 && rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(ch);
}

PROCESS_CASE(port_space_ib)

/* IPv6 addresses (the sim port's fd00::/64 GIDs) end to end. */
static void ipv6(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in6 srv = { .sin6_family = AF_INET6,
				    .sin6_port = htons(7476) };
	struct sockaddr_in6 cli = { .sin6_family = AF_INET6 };
	struct rdma_cm_id *l, *c, *s;
	struct rdma_cm_event *ev;

	CHECK(ch);
	inet_pton(AF_INET6, "fd00::1", &srv.sin6_addr);
	inet_pton(AF_INET6, "fd00::2", &cli.sin6_addr);
	CHECK(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&srv) == 0);
	CHECK(rdma_listen(l, 0) == 0);
	CHECK(rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(c, (struct sockaddr *)&cli,
				(struct sockaddr *)&srv, 2000) == 0);
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(c->route.addr.src_addr.sa_family == AF_INET6);
	CHECK(rdma_resolve_route(c, 2000) == 0);
	expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK(connect_qpn(c, 0x121, "over v6") == 0);
	ev = next_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	s = ev->id;
	CHECK(s->route.addr.dst_addr.sa_family == AF_INET6);
	CHECK(memcmp(&s->route.addr.dst_sin6.sin6_addr, &cli.sin6_addr, 16) ==
	      0);
	CHECK(strcmp(ev->param.conn.private_data, "over v6") == 0);
	rdma_ack_cm_event(ev);
	CHECK(accept_qpn(s, 0x122, NULL) == 0);
	expect_ack(ch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(rdma_establish(c) == 0);
	expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(rdma_destroy_id(s) == 0); /* a DREQ to c */
	expect_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(rdma_destroy_id(c) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(ch);
}

PROCESS_CASE(ipv6)

/* The calls around a connection: rdma_migrate_id() takes an id's events
 * along, RDMA_OPTION_ID_TOS reaches the REQ, rdma_init_qp_attr() gives
 * what the peer announced, and rdma_notify(COMM_EST) establishes a
 * passive side whose RTU has not come. */
static void around_a_connection(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_event_channel *moved = rdma_create_event_channel();
	struct rdma_cm_id *l, *c, *s;
	struct rdma_cm_event *ev;
	struct ibv_qp_attr qa;
	struct ibv_context **devs;
	uint8_t tos = 0x68, timeout = 18;
	int mask = 0, n = -1;
	struct pollfd pfd = { .fd = cch->fd, .events = POLLIN };

	CHECK(sch && cch && moved);
	l = listening(sch, 7477, 0);
	c = resolved(cch, 7477);
	CHECK(rdma_set_option(c, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos,
			      sizeof(tos)) == 0);
	CHECK(rdma_set_option(c, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
			      &timeout, sizeof(timeout)) == 0);
	CHECK(rdma_set_option(c, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 4) ==
		      -1 &&
	      errno == EINVAL);
	CHECK(rdma_set_option(c, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &tos,
			      1) == -1 &&
	      errno == ENOSYS);
	CHECK(connect_qpn(c, 0x131, NULL) == 0);
	ev = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	s = ev->id;
	rdma_ack_cm_event(ev);
	/* What the REQ said, as the QP's attributes. */
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_RTR;
	CHECK(rdma_init_qp_attr(s, &qa, &mask) == 0);
	CHECK(qa.dest_qp_num == 0x131);
	CHECK(qa.ah_attr.grh.traffic_class == tos);
	CHECK(mask & IBV_QP_DEST_QPN);
	qa.qp_state = IBV_QPS_RTS;
	CHECK(rdma_init_qp_attr(s, &qa, &mask) == 0);
	CHECK(qa.timeout == timeout);
	/* The client's events go to another channel, the REP's with them. */
	CHECK(accept_qpn(s, 0x132, NULL) == 0);
	CHECK(rdma_migrate_id(c, moved) == 0);
	CHECK(c->channel == moved);
	expect_ack(moved, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(poll(&pfd, 1, 0) == 0);
	/* No RTU: data on the QP tells the passive side it is up. */
	CHECK(rdma_notify(s, IBV_EVENT_COMM_EST) == 0);
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED);
	/* A sim port has no device to list. */
	devs = rdma_get_devices(&n);
	CHECK(devs && n == 0);
	rdma_free_devices(devs);
	CHECK(rdma_destroy_id(s) == 0);
	CHECK(rdma_destroy_id(c) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(moved);
}

PROCESS_CASE(around_a_connection)

static void bad_arguments(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in nowhere = sin_of("192.0.2.77", 1);
	struct sockaddr_in6 ib = { .sin6_family = AF_IB };
	struct rdma_cm_id *id, *l;
	struct rdma_conn_param p = { .qp_num = 1 };
	char big[200];

	CHECK(ch);
	CHECK(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP) == -1 &&
	      errno == EINVAL);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_IPOIB) == -1);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&ib) == -1 &&
	      errno == EAFNOSUPPORT);
	/* Not an address of the daemon's ports. */
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&nowhere) == -1 &&
	      errno == EADDRNOTAVAIL);
	/* Connect and accept need their state. */
	CHECK(rdma_connect(id, &p) == -1 && errno == EINVAL);
	CHECK(rdma_accept(id, &p) == -1 && errno == EINVAL);
	CHECK(rdma_reject(id, NULL, 0) == -1 && errno == EINVAL);
	CHECK(rdma_resolve_route(id, 100) == -1 && errno == EINVAL);
	CHECK(rdma_destroy_id(id) == 0);
	/* No QP and no conn_param. */
	id = resolved(ch, 7471);
	CHECK(rdma_connect(id, NULL) == -1 && errno == EINVAL);
	/* More private data than a REQ carries after rdma_cm's header. */
	memset(big, 'x', sizeof(big));
	p.private_data = big;
	p.private_data_len = 57;
	CHECK(rdma_connect(id, &p) == -1 && errno == EINVAL);
	/* Named, not served: multicast (rdmacm-mux-run(1)). */
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&nowhere, NULL) ==
		      -1 &&
	      errno == EOPNOTSUPP);
	/* A sim port has no device: no QP on it. */
	CHECK(rdma_create_qp(id, NULL, &(struct ibv_qp_init_attr){ 0 }) == -1 &&
	      errno == ENODEV);
	CHECK(rdma_destroy_id(id) == 0);
	/* One listener a port within a process too. */
	l = listening(ch, 7471, 0);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	{
		struct sockaddr_in a = sin_of(SERVER_IP, 7471);

		CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == 0);
	}
	CHECK(rdma_listen(id, 0) == -1 && errno == EADDRINUSE);
	CHECK(rdma_destroy_id(id) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED),
		     "RDMA_CM_EVENT_ESTABLISHED") == 0);
	CHECK(strcmp(rdma_event_str((enum rdma_cm_event_type)999),
		     "UNKNOWN EVENT") == 0);
	rdma_destroy_event_channel(ch);
}

PROCESS_CASE(bad_arguments)

/* An address a VM holds is its own: EADDRINUSE to a host program, at
 * bind and at resolve. */
static void vm_gid_refused(void)
{
	struct sockaddr_in vm = sin_of(CLIENT_IP, 7000),
			   dst = sin_of(SERVER_IP, 7000);
	struct rdma_cm_id *id;

	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&vm) == -1 &&
	      errno == EADDRINUSE);
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&vm,
				(struct sockaddr *)&dst, 100) == -1 &&
	      errno == EADDRINUSE);
	CHECK(rdma_destroy_id(id) == 0);
}

static void test_vm_gid_refused(void **state)
{
	struct h_fixture *f = *state;
	struct tclient vm = { 0 };

	tc_connect_gid(&vm, &f->d, "vm", CLIENT_IP);
	in_process(&f->d, vm_gid_refused);
	tc_close(&vm);
}

/* A policy rule without share_gids: EACCES at bind. */
static void policy_refused(void)
{
	struct sockaddr_in mine = sin_of(SERVER_IP, 7000);
	struct rdma_cm_id *id;

	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&mine) == -1 &&
	      errno == EACCES);
	CHECK(rdma_destroy_id(id) == 0);
}

/* No daemon: the first call fails with the socket's errno. */
static void no_daemon(void)
{
	setenv("RDMACM_MUX_SOCKET", "/nonexistent/mux.sock", 1);
	CHECK(rdma_create_event_channel() == NULL && errno == ENOENT);
}

static void test_policy_and_no_daemon(void **state)
{
	static const char *extra[] = { "--policy", NULL, NULL };
	char dir[] = "/tmp/rcm-rdmacm.XXXXXX", path[64], text[160];
	struct hdaemon d;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/policy.json", dir);
	snprintf(text, sizeof(text),
		 "{\"policy\": [{\"match\": {\"uid\": %u}}]}\n",
		 (unsigned)getuid());
	h_write_file(path, text);
	extra[1] = path;
	hd_start(&d, NULL, h_one_port, extra);
	in_process(&d, policy_refused);
	in_process(&d, no_daemon);
	hd_stop(&d);
	unlink(path);
	rmdir(dir);
}

static void daemon_gone(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *c, *s, *l;
	struct rdma_cm_event *ev;
	pid_t daemon = (pid_t)atoi(getenv("TEST_DAEMON_PID"));

	CHECK(sch && cch);
	l = listening(sch, 7471, 0);
	c = resolved(cch, 7471);
	CHECK(connect_qpn(c, 0x111, NULL) == 0);
	ev = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	s = ev->id;
	rdma_ack_cm_event(ev);
	CHECK(accept_qpn(s, 0x222, NULL) == 0);
	expect_ack(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(rdma_establish(c) == 0);
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED);
	/* Mid-connection the daemon dies: the process hears it as a
	 * device gone from under its ids, and nothing hangs. */
	CHECK(kill(daemon, SIGKILL) == 0);
	expect_ack(cch, RDMA_CM_EVENT_DEVICE_REMOVAL);
	CHECK(rdma_disconnect(c) == 0);
	/* Calls that need the daemon say it is gone. */
	CHECK(rdma_listen(c, 0) == -1);
	CHECK(rdma_destroy_id(c) == 0);
	CHECK(rdma_destroy_id(s) == 0);
	CHECK(rdma_destroy_id(l) == 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

static void test_daemon_gone(void **state)
{
	struct h_fixture *f = *state;
	char pid[16];

	snprintf(pid, sizeof(pid), "%d", (int)f->d.pid);
	setenv("TEST_DAEMON_PID", pid, 1);
	in_process(&f->d, daemon_gone);
	hd_kill(&f->d, SIGKILL); /* reap it; teardown's stop is a no-op */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_connect_accept_disconnect,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_reject_and_no_listener,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_two_processes_one_address,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_backlog_and_nonblocking,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_sync_api, h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_sidr, h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_port_space_ib,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_ipv6, h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_around_a_connection,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_bad_arguments,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_vm_gid_refused,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test(test_policy_and_no_daemon),
		cmocka_unit_test_setup_teardown(test_daemon_gone,
						h_setup_daemon,
						h_teardown_daemon),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
