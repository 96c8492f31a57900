// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The real daemon on sim ports with several backend clients: routing,
 * GID ownership, spoof refusal, cleanup, isolation of a stopped client,
 * framing errors, port events, a shared sim fabric, limits.
 */
#include <dirent.h>
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
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/integration/harness.h"
#include "common/cm_mad.h"
#include "common/gid.h"
#include "common/wire.h"
#include "protocol/rdmacm_mux_proto.h"

#define SIM0 "sim0=fd00::1,fd00::2,fd00::3,fd00::4,fd00::5,10.1.0.1,10.1.0.2"

static const char *const one_port[] = { SIM0, NULL };

struct fixture {
	struct hdaemon d;
};

static int setup_daemon(void **state)
{
	static struct fixture f;

	hd_start(&f.d, NULL, one_port, NULL);
	*state = &f;
	return 0;
}

static int teardown_daemon(void **state)
{
	struct fixture *f = *state;

	hd_stop(&f->d);
	return 0;
}

static void connect_client(struct tclient *tc, struct hdaemon *d,
			   const char *name, const char *gid)
{
	char err[256];

	assert_int_equal(tc_connect(tc, d, name, 1, 0, err, sizeof(err)), 0);
	if (gid)
		assert_int_equal(tc_register(tc, gid), 0);
}

/* A ping round trip is a barrier: everything the daemon queued to this
 * client before the reply has been read by the time it returns. */
static void barrier(struct tclient *tc)
{
	assert_int_equal(muxbe_ping(tc->mb), 0);
	muxbe_process(tc->mb);
}

static void test_hello_negotiation(void **state)
{
	struct fixture *f = *state;
	uint8_t buf[4096], kind, flags;
	uint32_t rid;
	json_t *j;
	const char *msg;
	int fd;

	/* Anything before hello: a clear error, connection kept. */
	fd = raw_connect(f->d.sock);
	assert_true(fd >= 0);
	raw_send_json(fd, 7, "{\"op\":\"ping\"}");
	assert_true(raw_recv(fd, &kind, &flags, &rid, buf, sizeof(buf),
			     H_DEADLINE_MS) > 0);
	assert_int_equal(kind, PROTO_KIND_JSON);
	assert_int_equal(flags, PROTO_FLAG_REPLY);
	assert_int_equal(rid, 7);
	j = json_loads((char *)buf, 0, NULL);
	assert_int_equal(proto_reply_status(j, &msg), -ENOTCONN);
	json_decref(j);
	/* A good hello. */
	raw_send_json(
		fd, 8,
		"{\"op\":\"hello\",\"protocol\":{\"major\":1,\"minor\":5},\"features\":[\"mad\",\"teleport\"]}");
	assert_true(raw_recv(fd, &kind, &flags, &rid, buf, sizeof(buf),
			     H_DEADLINE_MS) > 0);
	assert_int_equal(rid, 8);
	j = json_loads((char *)buf, 0, NULL);
	assert_int_equal(proto_reply_status(j, &msg), 0);
	assert_int_equal(json_path_int(j, "protocol.major"), 1);
	assert_int_equal(json_path_int(j, "protocol.minor"), 0);
	/* Only features both sides know. */
	assert_int_equal(json_array_size(json_object_get(j, "features")), 1);
	json_decref(j);
	raw_send_json(
		fd, 9,
		"{\"op\":\"hello\",\"protocol\":{\"major\":1,\"minor\":0}}");
	assert_true(raw_recv(fd, &kind, &flags, &rid, buf, sizeof(buf),
			     H_DEADLINE_MS) > 0);
	j = json_loads((char *)buf, 0, NULL);
	assert_int_equal(proto_reply_status(j, &msg), -EALREADY);
	json_decref(j);
	close(fd);

	/* An unsupported major version: an error naming both, then close. */
	fd = raw_connect(f->d.sock);
	raw_send_json(
		fd, 1,
		"{\"op\":\"hello\",\"protocol\":{\"major\":2,\"minor\":0}}");
	assert_true(raw_recv(fd, &kind, &flags, &rid, buf, sizeof(buf),
			     H_DEADLINE_MS) > 0);
	assert_int_equal(rid, 1);
	j = json_loads((char *)buf, 0, NULL);
	assert_int_equal(proto_reply_status(j, &msg), -EPROTONOSUPPORT);
	assert_non_null(strstr(msg, "2.0"));
	assert_non_null(strstr(msg, "1.0"));
	json_decref(j);
	assert_true(raw_wait_eof(fd, H_DEADLINE_MS));
	close(fd);
}

static void test_control_operations(void **state)
{
	struct fixture *f = *state;
	struct tclient a;
	char *reply = NULL;
	json_t *j;
	uint8_t gid[16];
	struct gid g;

	connect_client(&a, &f->d, "a", NULL);
	assert_int_equal(muxbe_ping(a.mb), 0);
	assert_int_equal(muxbe_request(a.mb, "{\"op\":\"list_ports\"}", &reply),
			 0);
	j = json_loads(reply, 0, NULL);
	free(reply);
	assert_int_equal(json_array_size(json_object_get(j, "ports")), 1);
	if (h_real_port())
		assert_true(
			json_array_size(json_object_get(
				json_array_get(json_object_get(j, "ports"), 0),
				"gid_table")) >= 7);
	else
		assert_int_equal(
			json_array_size(json_object_get(
				json_array_get(json_object_get(j, "ports"), 0),
				"gid_table")),
			7);
	json_decref(j);

	assert_int_equal(tc_register(&a, "fd00::3"), 0);
	assert_int_equal(a.port, 0);
	/* IPv4 text means the IPv4-mapped GID. */
	assert_int_equal(gid_parse("10.1.0.1", &g), 0);
	assert_int_equal(muxbe_register_gid(a.mb, NULL, g.raw, NULL), 0);
	assert_int_equal(muxbe_request(a.mb, "{\"op\":\"list_gids\"}", &reply),
			 0);
	j = json_loads(reply, 0, NULL);
	free(reply);
	assert_int_equal(json_array_size(json_object_get(j, "gids")), 2);
	assert_true(json_is_true(
		json_object_get(json_array_get(json_object_get(j, "gids"), 0),
				"in_table")));
	json_decref(j);
	assert_int_equal(muxbe_unregister_gid(a.mb, h_port0(), g.raw), 0);
	assert_int_equal(muxbe_unregister_gid(a.mb, h_port0(), g.raw), -ENOENT);
	/* Specific errors for bad requests. */
	assert_int_equal(muxbe_request(a.mb, "{\"op\":\"frobnicate\"}", &reply),
			 -EOPNOTSUPP);
	assert_int_equal(
		muxbe_request(a.mb,
			      "{\"op\":\"register_gid\",\"gid\":\"nope\"}",
			      &reply),
		-EINVAL);
	gid_parse("fd00::1", &g);
	memcpy(gid, g.raw, 16);
	assert_int_equal(muxbe_register_gid(a.mb, "sim9", gid, NULL), -ENODEV);
	gid_parse("fd99::1", &g);
	assert_int_equal(muxbe_register_gid(a.mb, h_port0(), g.raw, NULL),
			 -EADDRNOTAVAIL);
	tc_close(&a);
}

static void test_multi_client_routing(void **state)
{
	struct fixture *f = *state;
	struct tclient a, b, c;
	uint8_t mad[MAD_SIZE];
	uint32_t host_a, host_b;
	struct gid ga, gb;
	json_t *st;

	connect_client(&a, &f->d, "a", "fd00::1");
	connect_client(&b, &f->d, "b", "fd00::2");
	connect_client(&c, &f->d, "c", "fd00::3");
	gid_parse("fd00::1", &ga);
	gid_parse("fd00::2", &gb);

	/* REQ by destination GID, with a GRH naming both ends. */
	h_req(mad, 0xa0001, "fd00::1", "fd00::2");
	assert_int_equal(tc_send_sync(&a, "fd00::2", mad), 0);
	assert_true(tc_pump_until(&b, tc_has_rx, 1, H_DEADLINE_MS));
	assert_int_equal(b.rx[0].len, MAD_SIZE);
	/* A's comm ID went out as a host ID the daemon chose, and the TID's
	 * low 32 bits as one unique among its sends; on a real port ib_umad
	 * also puts its agent's hi_tid in TID bits 63..32 (K:user_mad.c).
	 * The rest is as sent. */
	host_a = wire_get32(b.rx[0].mad + 24);
	assert_true(host_a != 0 && host_a != 0xa0001);
	assert_memory_equal(b.rx[0].mad, mad, 8);
	if (!h_real_port())
		assert_memory_equal(b.rx[0].mad + 8, mad + 8, 4);
	assert_memory_equal(b.rx[0].mad + 16, mad + 16, 8);
	assert_memory_equal(b.rx[0].mad + 28, mad + 28, MAD_SIZE - 28);
	assert_memory_equal(b.rx[0].grh + 8, ga.raw, 16);  /* SGID */
	assert_memory_equal(b.rx[0].grh + 24, gb.raw, 16); /* DGID */
	assert_int_equal(b.rx[0].grh[0] >> 4, 6);
	assert_int_equal(wire_get16(b.rx[0].grh + 4), MAD_SIZE);
	assert_memory_equal(b.rx[0].addr.remote_gid, ga.raw, 16);
	assert_memory_equal(b.rx[0].addr.local_gid, gb.raw, 16);
	assert_int_equal(b.rx[0].addr.remote_qpn, 1);
	assert_int_equal(b.rx[0].addr.qkey, GSI_QKEY);

	/* REP by A's (host) comm ID, which A sees as its own again; RTU by
	 * B's. */
	h_mad(mad, CM_ATTR_REP, 0xb0001, host_a, 1);
	assert_int_equal(tc_send_sync(&b, "fd00::1", mad), 0);
	assert_true(tc_pump_until(&a, tc_has_rx, 1, H_DEADLINE_MS));
	assert_int_equal(cm_mad_attr_id(a.rx[0].mad), CM_ATTR_REP);
	assert_int_equal(wire_get32(a.rx[0].mad + 28), 0xa0001);
	host_b = wire_get32(a.rx[0].mad + 24);
	assert_true(host_b != 0 && host_b != 0xb0001);
	h_mad(mad, CM_ATTR_RTU, 0xa0001, host_b, 1);
	assert_int_equal(tc_send_sync(&a, "fd00::2", mad), 0);
	assert_true(tc_pump_until(&b, tc_has_rx, 2, H_DEADLINE_MS));
	assert_int_equal(cm_mad_attr_id(b.rx[1].mad), CM_ATTR_RTU);
	assert_int_equal(wire_get32(b.rx[1].mad + 24), host_a);
	assert_int_equal(wire_get32(b.rx[1].mad + 28), 0xb0001);

	/* C saw none of it. */
	barrier(&c);
	assert_int_equal(c.nrx, 0);
	barrier(&a);
	barrier(&b);
	assert_int_equal(a.nrx, 1);
	assert_int_equal(b.nrx, 2);
	st = hd_status(&f->d);
	assert_int_equal(json_path_int(st, "counters.mads_in.REQ"), 1);
	assert_int_equal(json_path_int(st, "counters.mads_out.RTU"), 1);
	assert_int_equal(json_path_int(st, "routing.gids"), 3);
	assert_int_equal(json_path_int(st, "routing.comm_ids"), 2);
	assert_int_equal(json_path_int(st, "routing.established"), 2);
	assert_int_equal(json_array_size(json_object_get(st, "clients")), 3);
	json_decref(st);
	tc_close(&a);
	tc_close(&b);
	tc_close(&c);
}

static void test_gid_conflicts(void **state)
{
	struct fixture *f = *state;
	struct tclient a, b;
	char err[256];
	struct gid g;

	connect_client(&a, &f->d, "a", "fd00::1");
	connect_client(&b, &f->d, "b", NULL);
	gid_parse("fd00::1", &g);
	assert_int_equal(muxbe_register_gid(b.mb, h_port0(), g.raw, NULL),
			 -EEXIST);
	muxbe_last_error(b.mb, err, sizeof(err));
	assert_non_null(strstr(err, "another client"));
	assert_int_equal(muxbe_unregister_gid(b.mb, h_port0(), g.raw), -EACCES);
	/* A still owns it and still gets its REQs. */
	assert_true(hd_status_int(&f->d, "routing.gids") == 1);
	tc_close(&a);
	tc_close(&b);
}

static void test_spoofed_source_refused(void **state)
{
	struct fixture *f = *state;
	struct tclient a, b;
	uint8_t mad[MAD_SIZE];
	struct muxbe_addr addr;
	struct gid g;
	char err[256];

	connect_client(&a, &f->d, "a", "fd00::1");
	connect_client(&b, &f->d, "b", "fd00::2");
	/* A claims B's GID as its source. */
	h_req(mad, 0x51, "fd00::2", "fd00::1");
	memset(&addr, 0, sizeof(addr));
	addr.grh = 1;
	addr.remote_qpn = 1;
	addr.qkey = GSI_QKEY;
	gid_parse("fd00::2", &g);
	memcpy(addr.local_gid, g.raw, 16);
	gid_parse("fd00::1", &g);
	memcpy(addr.remote_gid, g.raw, 16);
	assert_int_equal(muxbe_send_mad_sync(a.mb, &addr, mad, MAD_SIZE),
			 -EADDRNOTAVAIL);
	muxbe_last_error(a.mb, err, sizeof(err));
	assert_non_null(strstr(err, "source GID"));
	/* Not a CM Send MAD; not 256 bytes; no such port. */
	h_req(mad, 0x52, "fd00::1", "fd00::2");
	mad[1] = 0x04;
	assert_int_equal(tc_send_sync(&a, "fd00::2", mad), -EBADMSG);
	mad[1] = 0x07;
	memcpy(addr.local_gid, a.gid, 16);
	gid_parse("fd00::2", &g);
	memcpy(addr.remote_gid, g.raw, 16);
	assert_int_equal(muxbe_send_mad_sync(a.mb, &addr, mad, 100), -EMSGSIZE);
	addr.port = 5;
	assert_int_equal(muxbe_send_mad_sync(a.mb, &addr, mad, MAD_SIZE),
			 -ENODEV);
	/* A comm ID another client owns. */
	h_req(mad, 0x60, "fd00::2", "fd00::1");
	assert_int_equal(tc_send_sync(&b, "fd00::1", mad), 0);
	h_mad(mad, CM_ATTR_DREQ, 0x60, 0x99, 1);
	assert_int_equal(tc_send_sync(&a, "fd00::2", mad), -ENOENT);
	/* None of it reached B; only B's own REQ reached A. */
	barrier(&b);
	assert_int_equal(b.nrx, 0);
	assert_true(tc_pump_until(&a, tc_has_rx, 1, H_DEADLINE_MS));
	barrier(&a);
	assert_int_equal(a.nrx, 1);
	assert_true(hd_status_int(&f->d, "counters.tx_refused") == 5);
	/* The async API reports the same verdict through send_done. */
	h_mad(mad, CM_ATTR_DREQ, 0x60, 0x99, 1);
	assert_int_equal(tc_send(&a, "fd00::2", mad), 0);
	assert_true(tc_pump_until(&a, tc_has_sends, 1, H_DEADLINE_MS));
	assert_int_equal(a.sends_failed, 1);
	assert_int_equal(a.last_send_status, -ENOENT);
	tc_close(&a);
	tc_close(&b);
}

static int wait_status_int(struct hdaemon *d, const char *path, long long want)
{
	uint64_t deadline = h_now_ms() + H_DEADLINE_MS;

	while (h_now_ms() < deadline) {
		if (hd_status_int(d, path) == want)
			return 1;
		poll(NULL, 0, 10);
	}
	return 0;
}

static int status_counts_are(struct hdaemon *d, int gids, int comm_ids,
			     int clients)
{
	json_t *st = hd_status(d);
	int ok = json_path_int(st, "routing.gids") == gids &&
		 json_path_int(st, "routing.comm_ids") == comm_ids &&
		 (int)json_array_size(json_object_get(st, "clients")) ==
			 clients;

	json_decref(st);
	return ok;
}

static int wait_status_counts(struct hdaemon *d, int gids, int comm_ids,
			      int clients)
{
	uint64_t deadline = h_now_ms() + H_DEADLINE_MS;

	while (h_now_ms() < deadline) {
		if (status_counts_are(d, gids, comm_ids, clients))
			return 1;
		poll(NULL, 0, 10);
	}
	return 0;
}

static void test_cleanup_on_disconnect(void **state)
{
	struct fixture *f = *state;
	struct tclient a, b;
	uint8_t mad[MAD_SIZE];
	uint32_t host_a;
	json_t *st;
	pid_t child;
	int status;

	connect_client(&a, &f->d, "a", "fd00::1");
	connect_client(&b, &f->d, "b", "fd00::2");
	h_req(mad, 0x77, "fd00::1", "fd00::3");
	assert_int_equal(tc_send_sync(&a, "fd00::3", mad), 0);
	assert_true(status_counts_are(&f->d, 2, 1, 2));
	st = hd_status(&f->d);
	host_a = (uint32_t)
		json_path_int(json_array_get(json_object_get(h_client(st, "a"),
							     "connections"),
					     0),
			      "host_id");
	json_decref(st);
	tc_close(&a);
	assert_true(wait_status_counts(&f->d, 1, 0, 1));
	/* The GID is free for someone else, and A's comm ID routes nowhere:
	 * a peer's late REP for it is dropped (B, now holding A's GID,
	 * gets nothing). */
	assert_int_equal(tc_register(&b, "fd00::1"), 0);
	if (!h_real_port()) {
		struct simpeer p;

		simpeer_open(&p, &f->d, "peer", "fd99::1");
		h_mad(mad, CM_ATTR_REP, 0x88, host_a, 1);
		simpeer_send(&p, "fd00::1", mad);
		assert_true(wait_status_int(&f->d,
					    "counters.drops.unknown_comm_id",
					    1));
		simpeer_close(&p);
		barrier(&b);
		assert_int_equal(b.nrx, 0);
	}
	assert_int_equal(muxbe_unregister_gid(b.mb, h_port0(), b.gid), 0);

	/* A client killed with SIGKILL is cleaned up the same way. */
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		struct tclient k;
		char err[64];

		if (tc_connect(&k, &f->d, "doomed", 1, 0, err, sizeof(err)) ||
		    tc_register(&k, "fd00::4"))
			_exit(1);
		h_req(mad, 0x99, "fd00::4", "fd00::2");
		if (tc_send_sync(&k, "fd00::2", mad))
			_exit(1);
		kill(getpid(), SIGSTOP);
		_exit(0);
	}
	assert_int_equal(waitpid(child, &status, WUNTRACED), child);
	assert_true(WIFSTOPPED(status));
	/* B: fd00::2 and the record of the child's REQ; the child:
	 * fd00::4 and its REQ's mapping. */
	assert_true(wait_status_counts(&f->d, 2, 2, 2));
	kill(child, SIGKILL);
	waitpid(child, &status, 0);
	/* The daemon speaks for the dead client as its kernel CM would: a
	 * timeout REJ for its REQ, which reaches B and ends B's record. */
	assert_true(wait_status_counts(&f->d, 1, 0, 1));
	assert_true(tc_pump_until(&b, tc_has_rx, 2, H_DEADLINE_MS));
	assert_int_equal(cm_mad_attr_id(b.rx[1].mad), CM_ATTR_REJ);
	assert_int_equal(cm_field_get(b.rx[1].mad, CM_REJ_REASON),
			 CM_REJ_REASON_TIMEOUT);
	assert_true(hd_status_int(&f->d, "counters.answers.rej_abandoned") >=
		    1);
	assert_int_equal(tc_register(&b, "fd00::4"), 0);
	tc_close(&b);
}

static int wait_client_settled(struct hdaemon *d, const char *name, long long n)
{
	uint64_t deadline = h_now_ms() + H_DEADLINE_MS;
	json_t *st, *cl;
	int ok = 0;

	for (;;) {
		st = hd_status(d);
		cl = h_client(st, name);
		/* The sim wire itself may lose some under this burst; it
		 * counts them, as a NIC would. */
		ok = cl &&
		     json_path_int(cl, "counters.mads_delivered") +
				     json_path_int(cl,
						   "counters.mads_dropped") +
				     json_path_int(json_array_get(
							   json_object_get(
								   st, "ports"),
							   0),
						   "counters.wire_dropped") ==
			     n;
		if (!ok && h_now_ms() >= deadline) {
			char *text = json_dumps(st, JSON_COMPACT);

			print_message("not settled: %s\n", text);
			free(text);
		}
		json_decref(st);
		if (ok || h_now_ms() >= deadline)
			return ok;
		poll(NULL, 0, 10);
	}
}

static void test_stopped_client_does_not_delay_others(void **state)
{
	struct fixture *f = *state;
	struct tclient a, b, c;
	uint8_t buf[4096], kind, flags, mad[MAD_SIZE];
	uint64_t t0, worst = 0, dt;
	uint32_t rid;
	int s, i, rcvbuf = 4096;
	json_t *st, *cl;
	size_t k;
	long long dropped = -1, n_mads;

	/* S: hello, a GID, then it never reads again. */
	s = raw_connect(f->d.sock);
	assert_true(s >= 0);
	setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	raw_send_json(
		s, 1,
		"{\"op\":\"hello\",\"name\":\"stopped\",\"protocol\":{\"major\":1,\"minor\":0}}");
	assert_true(raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf),
			     H_DEADLINE_MS) > 0);
	raw_send_json(s, 2, "{\"op\":\"register_gid\",\"gid\":\"fd00::5\"}");
	assert_true(raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf),
			     H_DEADLINE_MS) > 0);
	assert_non_null(strstr((char *)buf, "\"ok\":true"));

	connect_client(&a, &f->d, "flooder", "fd00::1");
	connect_client(&b, &f->d, "b", "fd00::2");
	connect_client(&c, &f->d, "c", "fd00::3");
	/* Far more than S's queue (64 KiB, set by this test's daemon) and
	 * its socket buffers can hold. */
	for (i = 0; i < 3000; i++) {
		h_req(mad, 0x100000 + (uint32_t)i, "fd00::1", "fd00::5");
		assert_int_equal(tc_send(&a, "fd00::5", mad), 0);
		if (i % 100 == 0) {
			/* B and C keep working meanwhile. */
			t0 = h_now_ms();
			assert_int_equal(muxbe_ping(b.mb), 0);
			h_req(mad, 0x200000 + (uint32_t)i, "fd00::2",
			      "fd00::3");
			assert_int_equal(tc_send_sync(&b, "fd00::3", mad), 0);
			assert_true(tc_pump_until(&c, tc_has_rx, i / 100 + 1,
						  H_DEADLINE_MS));
			dt = h_now_ms() - t0;
			if (dt > worst)
				worst = dt;
			muxbe_process(a.mb);
		}
	}
	assert_true(tc_pump_until(&a, tc_has_sends, 3000, 20000));
	assert_int_equal(a.sends_failed, 0);
	/* Every flood MAD has been either queued to S or dropped. */
	assert_true(wait_client_settled(&f->d, "stopped", 3000));
	print_message("worst B->C round trip while S is stopped: %llu ms\n",
		      (unsigned long long)worst);
	assert_true(worst < 500u * (unsigned)h_time_scale());
	assert_int_equal(c.nrx, 30);
	st = hd_status(&f->d);
	assert_true(json_path_int(st, "counters.drops.client_queue_full") > 0);
	dropped = json_path_int(h_client(st, "stopped"),
				"counters.mads_dropped");
	assert_true(dropped > 0);
	assert_true(json_path_int(st, "counters.drops.client_queue_full") ==
		    dropped);
	/* Its queue stayed bounded. */
	json_array_foreach(json_object_get(st, "clients"), k, cl)
		assert_true(json_path_int(cl, "counters.outq_bytes") <= 65536);
	json_decref(st);
	/* Issue 10, item 5: no loss is silent.  The sender was told of
	 * each one (mad_lost, through the library), and S, reading at
	 * last, gets every MAD that was not reported lost. */
	assert_true(
		tc_pump_until(&a, tc_has_lost, (int)dropped, H_DEADLINE_MS));
	assert_int_equal(a.lost, dropped);
	assert_non_null(strstr(a.last_lost, "REQ from fd00::1 to fd00::5"));
	assert_int_equal(hd_status_int(&f->d, "counters.losses_reported"),
			 dropped);
	st = hd_status(&f->d);
	assert_int_equal(json_path_int(h_client(st, "flooder"),
				       "counters.mads_lost"),
			 dropped);
	json_decref(st);
	for (n_mads = 0;;) {
		int n = raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf), 500);

		if (n < 0)
			break;
		if (kind == PROTO_KIND_MAD)
			n_mads++;
	}
	assert_int_equal(n_mads + dropped, 3000);
	close(s);
	tc_close(&a);
	tc_close(&b);
	tc_close(&c);
}

static int setup_small_queue(void **state)
{
	static struct fixture f;
	static const char *const extra[] = { "--client-queue", "65536", NULL };

	hd_start(&f.d, NULL, one_port, extra);
	*state = &f;
	return 0;
}

static void test_malformed_frame_closes_only_offender(void **state)
{
	struct fixture *f = *state;
	struct tclient a;
	uint8_t junk[32], buf[4096], kind, flags;
	uint32_t rid;
	int s, n;

	connect_client(&a, &f->d, "a", "fd00::1");
	s = raw_connect(f->d.sock);
	memset(junk, 0x5a, sizeof(junk));
	assert_int_equal(send(s, junk, sizeof(junk), MSG_NOSIGNAL),
			 (ssize_t)sizeof(junk));
	n = raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf), H_DEADLINE_MS);
	assert_true(n > 0);
	assert_int_equal(flags, PROTO_FLAG_EVENT);
	assert_non_null(strstr((char *)buf, "protocol_error"));
	assert_non_null(strstr((char *)buf, "EBADMSG"));
	assert_true(raw_wait_eof(s, H_DEADLINE_MS));
	close(s);
	/* An oversized frame is refused from its header. */
	s = raw_connect(f->d.sock);
	proto_header_encode(junk, PROTO_KIND_JSON, 0, 1, 0x7fffffff);
	assert_int_equal(send(s, junk, PROTO_HDR_SIZE, MSG_NOSIGNAL),
			 PROTO_HDR_SIZE);
	n = raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf), H_DEADLINE_MS);
	assert_true(n > 0);
	assert_non_null(strstr((char *)buf, "EMSGSIZE"));
	assert_true(raw_wait_eof(s, H_DEADLINE_MS));
	close(s);
	/* Well-framed garbage: an error reply, the connection stays. */
	s = raw_connect(f->d.sock);
	raw_send(s, PROTO_KIND_JSON, 0, 3, "{not json", 9);
	n = raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf), H_DEADLINE_MS);
	assert_true(n > 0);
	assert_int_equal(rid, 3);
	assert_non_null(strstr((char *)buf, "EBADMSG"));
	raw_send_json(
		s, 4,
		"{\"op\":\"hello\",\"protocol\":{\"major\":1,\"minor\":0}}");
	n = raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf), H_DEADLINE_MS);
	assert_true(n > 0);
	assert_int_equal(rid, 4);
	assert_non_null(strstr((char *)buf, "\"ok\":true"));
	close(s);
	/* Nobody else noticed. */
	assert_int_equal(muxbe_ping(a.mb), 0);
	assert_true(hd_status_int(&f->d, "counters.protocol_errors") == 3);
	tc_close(&a);
}

static int tc_port_down(struct tclient *tc, int arg)
{
	return tc->port_events >= arg && !tc->port_active;
}

static int tc_port_up(struct tclient *tc, int arg)
{
	return tc->port_events >= arg && tc->port_active;
}

static void test_port_state_events(void **state)
{
	struct fixture *f = *state;
	struct tclient a;
	uint8_t mad[MAD_SIZE];
	char path[256];

	if (h_real_port())
		skip(); /* the sim port's down switch; rxe has none */
	connect_client(&a, &f->d, "a", "fd00::1");
	snprintf(path, sizeof(path), "%s/sim0.down", f->d.fabric);
	h_write_file(path, "");
	assert_true(tc_pump_until(&a, tc_port_down, 1, H_DEADLINE_MS));
	h_req(mad, 0x31, "fd00::1", "fd00::2");
	assert_int_equal(tc_send_sync(&a, "fd00::2", mad), -ENETDOWN);
	assert_int_equal(unlink(path), 0);
	assert_true(tc_pump_until(&a, tc_port_up, 2, H_DEADLINE_MS));
	assert_int_equal(tc_send_sync(&a, "fd00::2", mad), 0);
	tc_close(&a);
}

static void test_two_daemons_share_fabric(void **state)
{
	struct fixture *f = *state;
	static const char *const other[] = { "simb=fd01::1,fd01::2", NULL };
	struct hdaemon d2;
	struct tclient a, b;
	uint8_t mad[MAD_SIZE];

	if (h_real_port())
		skip(); /* two daemons on one real port cannot both own it */
	hd_start(&d2, f->d.fabric, other, NULL);
	connect_client(&a, &f->d, "host1-vm", "fd00::1");
	{
		char err[256];

		assert_int_equal(tc_connect(&b, &d2, "host2-vm", 1, 0, err,
					    sizeof(err)),
				 0);
		assert_int_equal(gid_parse("fd01::2", &(struct gid){ 0 }), 0);
		{
			struct gid g;

			gid_parse("fd01::2", &g);
			memcpy(b.gid, g.raw, 16);
			assert_int_equal(muxbe_register_gid(b.mb, "simb", g.raw,
							    &b.port),
					 0);
		}
	}
	h_req(mad, 0xd1, "fd00::1", "fd01::2");
	assert_int_equal(tc_send_sync(&a, "fd01::2", mad), 0);
	assert_true(tc_pump_until(&b, tc_has_rx, 1, H_DEADLINE_MS));
	h_mad(mad, CM_ATTR_REP, 0xd2, wire_get32(b.rx[0].mad + 24), 1);
	assert_int_equal(tc_send_sync(&b, "fd00::1", mad), 0);
	assert_true(tc_pump_until(&a, tc_has_rx, 1, H_DEADLINE_MS));
	assert_int_equal(cm_mad_attr_id(a.rx[0].mad), CM_ATTR_REP);
	assert_int_equal(wire_get32(a.rx[0].mad + 28), 0xd1);
	tc_close(&a);
	tc_close(&b);
	hd_stop(&d2);
}

static int setup_two_clients_max(void **state)
{
	static struct fixture f;
	static const char *const extra[] = { "--max-clients", "2",
					     "--max-clients-per-uid", "2",
					     NULL };

	hd_start(&f.d, NULL, one_port, extra);
	*state = &f;
	return 0;
}

static void test_max_clients(void **state)
{
	struct fixture *f = *state;
	struct tclient a, b, c;
	char err[256] = "";

	connect_client(&a, &f->d, "a", NULL);
	connect_client(&b, &f->d, "b", NULL);
	assert_true(tc_connect(&c, &f->d, "c", 1, 0, err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "too many clients"));
	assert_true(hd_status_int(&f->d, "counters.clients_refused") == 1);
	tc_close(&a);
	assert_true(wait_status_counts(&f->d, 0, 0, 1));
	assert_int_equal(tc_connect(&c, &f->d, "c", 1, 0, err, sizeof(err)), 0);
	tc_close(&b);
	tc_close(&c);
}

static void test_library_queues_without_buffers(void **state)
{
	struct fixture *f = *state;
	struct tclient a, b;
	struct muxbe_stats st;
	uint8_t mad[MAD_SIZE];
	char err[256];
	int i;

	connect_client(&a, &f->d, "a", "fd00::1");
	assert_int_equal(tc_connect(&b, &f->d, "b", 0, 3, err, sizeof(err)), 0);
	assert_int_equal(tc_register(&b, "fd00::2"), 0);
	for (i = 0; i < 5; i++) {
		h_req(mad, 0x300 + (uint32_t)i, "fd00::1", "fd00::2");
		assert_int_equal(tc_send_sync(&a, "fd00::2", mad), 0);
	}
	/* Wait until all five reached the library. */
	for (i = 0; i < 500; i++) {
		barrier(&b);
		muxbe_get_stats(b.mb, &st);
		if (st.rx_queued + st.rx_dropped == 5)
			break;
		poll(NULL, 0, 10);
	}
	assert_int_equal(st.rx_queued, 3);
	assert_int_equal(st.rx_dropped, 2);
	assert_int_equal(st.rx_queue_len, 3);
	assert_int_equal(b.nrx, 0);
	assert_int_equal(muxbe_post_recv(b.mb, b.bufs[0], 10, NULL), -EINVAL);
	for (i = 0; i < 3; i++)
		assert_int_equal(muxbe_post_recv(b.mb, b.bufs[i],
						 MUXBE_RECV_BUF_MIN, NULL),
				 0);
	assert_true(tc_pump_until(&b, tc_has_rx, 3, H_DEADLINE_MS));
	/* In arrival order. */
	for (i = 0; i < 3; i++)
		assert_int_equal(cm_field_get(b.rx[i].mad, CM_REQ_STARTING_PSN),
				 0x300 + i);
	muxbe_get_stats(b.mb, &st);
	assert_int_equal(st.rx_delivered, 3);
	assert_int_equal(st.rx_queue_len, 0);
	tc_close(&a);
	tc_close(&b);
}

static void test_status_socket_is_read_only(void **state)
{
	struct fixture *f = *state;
	struct tclient a;
	json_t *st, *cl;
	int s;

	connect_client(&a, &f->d, "a", "fd00::1");
	/* Whatever is written to the status socket is never read. */
	s = raw_connect(f->d.status);
	assert_true(s >= 0);
	raw_send_json(s, 1, "{\"op\":\"unregister_gid\",\"gid\":\"fd00::1\"}");
	assert_true(raw_wait_eof(s, H_DEADLINE_MS));
	close(s);
	st = hd_status(&f->d);
	assert_int_equal(json_path_int(st, "routing.gids"), 1);
	assert_int_equal(json_path_int(st, "daemon.protocol_major"), 1);
	assert_true(json_path_int(st, "daemon.uptime_s") >= 0);
	assert_string_equal(json_string_value(
				    json_object_get(json_object_get(st,
								    "daemon"),
						    "version")),
			    "0.1.0");
	assert_int_equal(json_array_size(json_object_get(st, "ports")), 1);
	/* Identity comes from the kernel (SO_PEERCRED), not the client. */
	cl = h_client(st, "a");
	assert_non_null(cl);
	assert_int_equal(json_path_int(cl, "pid"), getpid());
	assert_int_equal(json_path_int(cl, "uid"), getuid());
	assert_int_equal(json_path_int(cl, "gid"), getgid());
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(json_object_get(cl, "gids"),
						   0),
				    "gid")),
			    "fd00::1");
	assert_int_equal(json_path_int(cl, "routing.gids"), 1);
	json_decref(st);
	tc_close(&a);
}

struct pinger {
	struct muxbe *mb;
	int ok;
};

static void *ping_thread(void *arg)
{
	struct pinger *p = arg;
	int i;

	for (i = 0; i < 200; i++)
		if (muxbe_ping(p->mb) == 0)
			p->ok++;
	return NULL;
}

/* Blocking calls from several threads at once, while MADs keep arriving
 * and another thread runs the event loop side. */
static void test_library_is_thread_safe(void **state)
{
	struct fixture *f = *state;
	struct tclient a, b;
	struct pinger p[4];
	pthread_t th[4];
	uint8_t mad[MAD_SIZE];
	int i;

	connect_client(&a, &f->d, "a", "fd00::1");
	connect_client(&b, &f->d, "b", "fd00::2");
	for (i = 0; i < 4; i++) {
		p[i].mb = b.mb;
		p[i].ok = 0;
		assert_int_equal(pthread_create(&th[i], NULL, ping_thread,
						&p[i]),
				 0);
	}
	for (i = 0; i < 200; i++) {
		h_req(mad, 0x4000 + (uint32_t)i, "fd00::1", "fd00::2");
		assert_int_equal(tc_send(&a, "fd00::2", mad), 0);
		muxbe_process(b.mb);
		muxbe_process(a.mb);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(p[i].ok, 200);
	}
	assert_true(tc_pump_until(&b, tc_has_rx, 200, H_DEADLINE_MS));
	assert_true(tc_pump_until(&a, tc_has_sends, 200, H_DEADLINE_MS));
	assert_int_equal(a.sends_failed, 0);
	if (h_real_port()) {
		/* A real port's sender threads keep each connection's MADs
		 * in order, not those of 200 different connections: each
		 * arrived, once. */
		uint8_t seen[200] = { 0 };

		for (i = 0; i < 200; i++) {
			uint32_t psn = cm_field_get(b.rx[i].mad,
						    CM_REQ_STARTING_PSN);

			assert_in_range(psn, 0x4000, 0x4000 + 199);
			assert_int_equal(seen[psn - 0x4000]++, 0);
		}
	} else {
		for (i = 0; i < 200; i++)
			assert_int_equal(cm_field_get(b.rx[i].mad,
						      CM_REQ_STARTING_PSN),
					 0x4000 + i);
	}
	tc_close(&a);
	tc_close(&b);
}

static int setup_two_ports(void **state)
{
	static struct fixture f;
	static const char *const ports[] = { "p0=fd00::1,fd00::2",
					     "p1=fd00::1,fd00::2", NULL };

	hd_start(&f.d, NULL, ports, NULL);
	*state = &f;
	return 0;
}

/* The same GID on two ports is two registrations, and a REQ is routed
 * by the port it arrived on as well as its GID. */
static void test_several_ports(void **state)
{
	struct fixture *f = *state;
	struct tclient a0, b0, b1;
	uint8_t mad[MAD_SIZE];
	struct gid g;
	char err[256], *reply;
	json_t *j;

	if (h_real_port())
		skip(); /* needs two ports; the lab host has one */
	gid_parse("fd00::2", &g);
	assert_int_equal(tc_connect(&b0, &f->d, "b0", 1, 0, err, sizeof(err)),
			 0);
	assert_int_equal(tc_connect(&b1, &f->d, "b1", 1, 0, err, sizeof(err)),
			 0);
	assert_int_equal(muxbe_register_gid(b0.mb, "p0", g.raw, &b0.port), 0);
	assert_int_equal(muxbe_register_gid(b1.mb, "p1", g.raw, &b1.port), 0);
	assert_int_equal(b0.port, 0);
	assert_int_equal(b1.port, 1);
	/* The port is required when there are several. */
	assert_int_equal(muxbe_register_gid(b1.mb, NULL, g.raw, NULL), -EINVAL);
	assert_int_equal(tc_connect(&a0, &f->d, "a0", 1, 0, err, sizeof(err)),
			 0);
	gid_parse("fd00::1", &g);
	memcpy(a0.gid, g.raw, 16);
	assert_int_equal(muxbe_register_gid(a0.mb, "p1", g.raw, &a0.port), 0);
	h_req(mad, 0x71, "fd00::1", "fd00::2");
	assert_int_equal(tc_send_sync(&a0, "fd00::2", mad), 0);
	assert_true(tc_pump_until(&b1, tc_has_rx, 1, H_DEADLINE_MS));
	assert_int_equal(b1.rx[0].addr.port, 1);
	barrier(&b0);
	assert_int_equal(b0.nrx, 0);
	/* Sending on a port where the source GID is not ours is refused. */
	a0.port = 0;
	assert_int_equal(tc_send_sync(&a0, "fd00::2", mad), -EADDRNOTAVAIL);
	assert_int_equal(muxbe_request(a0.mb, "{\"op\":\"list_ports\"}",
				       &reply),
			 0);
	j = json_loads(reply, 0, NULL);
	free(reply);
	assert_int_equal(json_array_size(json_object_get(j, "ports")), 2);
	json_decref(j);
	tc_close(&a0);
	tc_close(&b0);
	tc_close(&b1);
}

/* Regression: a SIGTERM that lands as soon as the sockets exist (before
 * the event loop ran) once killed the daemon without its clean-up.  The
 * window was short; this catches it reliably where start-up is slow:
 * under valgrind (scripts/check.sh) and in the lab (scenario 08). */
static void test_sigterm_right_after_start(void **state)
{
	struct hdaemon d;
	int i;

	(void)state;
	for (i = 0; i < 5; i++) {
		hd_start(&d, NULL, one_port, NULL);
		hd_stop(&d); /* asserts exit status 0 and the sockets gone */
	}
}

/* How many of the daemon's threads carry each of want's names. */
static int count_named_threads(pid_t pid, const char *const *want, int *seen)
{
	char path[64], name[32];
	struct dirent *e;
	int n = 0, i;
	DIR *dir;
	FILE *fp;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	assert_non_null(dir);
	for (i = 0; want[i] != NULL; i++)
		seen[i] = 0;
	while ((e = readdir(dir)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/comm",
			 (int)pid, e->d_name);
		fp = fopen(path, "r");
		if (fp == NULL)
			continue; /* a thread that has just ended */
		if (fgets(name, sizeof(name), fp) != NULL) {
			name[strcspn(name, "\n")] = '\0';
			for (i = 0; want[i] != NULL; i++)
				if (strcmp(name, want[i]) == 0 &&
				    seen[i]++ == 0)
					n++;
		}
		fclose(fp);
	}
	closedir(dir);
	return n;
}

/* Every thread says what it is, as rdmacm-muxd(8) lists them, one per
 * worker (three asked for here). */
static void test_threads_are_named(void **state)
{
	static const char *const extra[] = { "--workers", "3", NULL };
	static const char *const want[] = { "muxd-worker0", "muxd-worker1",
					    "muxd-worker2", "muxd-ports",
					    "muxd-status",  NULL };
	enum { NWANT = sizeof(want) / sizeof(want[0]) - 1 };
	uint64_t deadline = h_now_ms() + H_DEADLINE_MS;
	int seen[NWANT], found = 0;
	struct hdaemon d;

	(void)state;
	hd_start(&d, NULL, one_port, extra);
	/* A thread names itself as it starts: wait for the last one. */
	while (h_now_ms() < deadline &&
	       (found = count_named_threads(d.pid, want, seen)) < NWANT)
		usleep(10000);
	hd_stop(&d); /* first: a failed assertion would leave it running */
	for (int i = 0; i < NWANT; i++)
		if (!seen[i])
			print_error("no thread named %s\n", want[i]);
	assert_int_equal(found, NWANT);
	assert_int_equal(seen[0] + seen[1] + seen[2], 3);
}

/* Entries of /tmp named like the daemon's private sim fabrics. */
static int count_private_fabrics(void)
{
	struct dirent *e;
	DIR *dir = opendir("/tmp");
	int n = 0;

	assert_non_null(dir);
	while ((e = readdir(dir)) != NULL)
		n += strncmp(e->d_name, "rdmacm-mux-sim.", 15) == 0;
	closedir(dir);
	return n;
}

/* One daemon per socket and per port: a second one says who holds what
 * and exits 1, having removed what it made; a crashed daemon's socket
 * is taken over; a file that is not a socket is never removed. */
static void test_one_daemon_per_socket_and_port(void **state)
{
	struct fixture *f = *state;
	char out[4096], pid[32], other_sock[256], other_status[256], file[320];
	char run_dir[256];
	int fabrics, fd;

	if (h_real_port())
		skip();
	snprintf(pid, sizeof(pid), "(pid %d;", (int)f->d.pid);
	snprintf(other_sock, sizeof(other_sock), "%s/other.sock", f->d.dir);
	snprintf(other_status, sizeof(other_status), "%s/other-status.sock",
		 f->d.dir);
	snprintf(run_dir, sizeof(run_dir), "%s/run", f->d.dir);

	/* The same client socket. */
	{
		const char *const args[] = { "--sim-port=sim0", "-s",
					     f->d.sock,         "-S",
					     other_status,      NULL };

		fabrics = count_private_fabrics();
		assert_int_equal(hd_run(args, out, sizeof(out)), 1);
		assert_non_null(
			strstr(out, "is in use by another rdmacm-muxd"));
		assert_non_null(strstr(out, pid));
		assert_int_equal(count_private_fabrics(), fabrics);
		assert_int_equal(access(other_status, F_OK), -1);
	}
	/* The same sim port on the same fabric. */
	{
		const char *const args[] = { "--sim-port=sim0", "--sim-fabric",
					     f->d.fabric,       "-s",
					     other_sock,        "-S",
					     other_status,      NULL };

		assert_int_equal(hd_run(args, out, sizeof(out)), 1);
		assert_non_null(
			strstr(out,
			       "port sim0 is in use by another rdmacm-muxd"));
		assert_non_null(strstr(out, pid));
		assert_int_equal(access(other_sock, F_OK), -1);
		assert_int_equal(access(other_status, F_OK), -1);
	}
	/* A port that fails after a sim port opened in a private fabric:
	 * the fabric goes, with everything in it. */
	{
		const char *args[] = { "--sim-port=simX",
				       "--port=nosuchdev0:1",
				       "--run-dir",
				       run_dir,
				       "-s",
				       other_sock,
				       "-S",
				       other_status,
				       NULL };

		fabrics = count_private_fabrics();
		assert_int_equal(hd_run(args, out, sizeof(out)), 1);
		assert_non_null(strstr(out, "nosuchdev0:1"));
		assert_int_equal(count_private_fabrics(), fabrics);
		assert_int_equal(access(other_sock, F_OK), -1);
		snprintf(file, sizeof(file), "%s/port-nosuchdev0-1.lock",
			 run_dir);
		assert_int_equal(access(file, F_OK), -1);
	}
	/* Not a socket: left alone. */
	{
		const char *const args[] = {
			"--sim-port=simY", "-s", file, "-S", other_status, NULL
		};

		snprintf(file, sizeof(file), "%s/not-a-socket", f->d.dir);
		fd = open(file, O_WRONLY | O_CREAT, 0600);
		assert_true(fd >= 0);
		close(fd);
		assert_int_equal(hd_run(args, out, sizeof(out)), 1);
		assert_non_null(strstr(out, "is not a socket"));
		assert_int_equal(access(file, F_OK), 0);
	}
	/* kill -9: its sockets and locks stay behind, and are taken over. */
	kill(f->d.pid, SIGKILL);
	waitpid(f->d.pid, NULL, 0);
	f->d.pid = 0;
	assert_int_equal(access(f->d.sock, F_OK), 0);
	hd_restart(&f->d);
	assert_int_equal(hd_status_int(&f->d, "daemon.pid"), f->d.pid);
}

/* rdmacm-muxctl metrics: Prometheus' text format, as the prometheus_client
 * library's parser reads it (tests/integration/check_metrics.py), with the
 * daemon's figures and a VM name that needs escaping in a label. */
static void test_metrics(void **state)
{
	struct fixture *f = *state;
	struct tclient a;
	char cmd[768], line[512];
	int clients = 0, gids = 0, port_up = 0, named = 0;
	FILE *p;

	if (getenv("RDMACM_MUXCTL") == NULL)
		skip();
	connect_client(&a, &f->d, "vm\"7", "fd00::1");
	snprintf(
		cmd, sizeof(cmd),
		"%s -S %s metrics | /usr/bin/python3 tests/integration/check_metrics.py",
		getenv("RDMACM_MUXCTL"), f->d.status);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		clients += strcmp(line, "metric rdmacm_mux_clients{} 1\n") == 0;
		gids += strcmp(line, "metric rdmacm_mux_gids{} 1\n") == 0;
		port_up += strncmp(line, "metric rdmacm_mux_port_up{port=\"",
				   32) == 0 &&
			   strncmp(line + 32, h_port0(), strlen(h_port0())) ==
				   0 &&
			   strstr(line, "} 1\n") != NULL;
		/* The parser gives the label back unescaped. */
		named += strstr(line, "rdmacm_mux_client_mads_sent_total{") &&
			 strstr(line, "vm=\"vm\"7\"");
	}
	assert_int_equal(pclose(p), 0);
	assert_int_equal(clients, 1);
	assert_int_equal(gids, 1);
	assert_int_equal(port_up, 1);
	assert_int_equal(named, 1);
	tc_close(&a);
}

/* systemd: Type=notify (READY=1 once the sockets listen, STATUS=, the
 * watchdog, STOPPING=1) and socket activation (the client and status
 * sockets handed over as descriptors 3 and 4, matched by path; their
 * paths stay when the daemon stops).  A fake NOTIFY_SOCKET and
 * LISTEN_FDS, no systemd. */
static int bound_stream(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	assert_int_equal(listen(fd, 16), 0);
	return fd;
}

static int notify_wait(int fd, const char *what, char *msg, size_t cap)
{
	uint64_t deadline = h_now_ms() + (uint64_t)H_DEADLINE_MS;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ssize_t n;

	while (h_now_ms() < deadline) {
		if (poll(&pfd, 1, 50) <= 0)
			continue;
		n = recv(fd, msg, cap - 1, 0);
		if (n <= 0)
			continue;
		msg[n] = '\0';
		if (strstr(msg, what))
			return 1;
	}
	return 0;
}

static void test_systemd_notify_and_activation(void **state)
{
	char dir[] = "/tmp/rcm-sd.XXXXXX", notify[64], sock[64], status[64];
	char fabric[64], msg[512], pidtext[32], cmd[160];
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	const char *bin = getenv("RDMACM_MUXD");
	int nfd, cfd, sfd, s, st;
	pid_t pid;

	(void)state;
	if (h_real_port() || getenv("RDMACM_MUXD_WRAPPER"))
		skip();
	assert_non_null(mkdtemp(dir));
	snprintf(notify, sizeof(notify), "%s/notify", dir);
	snprintf(sock, sizeof(sock), "%s/mux.sock", dir);
	snprintf(status, sizeof(status), "%s/status.sock", dir);
	snprintf(fabric, sizeof(fabric), "%s/fabric", dir);
	nfd = socket(AF_UNIX, SOCK_DGRAM, 0);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", notify);
	assert_int_equal(bind(nfd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	cfd = bound_stream(sock);
	sfd = bound_stream(status);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int a = fcntl(cfd, F_DUPFD, 10), b = fcntl(sfd, F_DUPFD, 10);

		dup2(a, 3);
		dup2(b, 4);
		snprintf(pidtext, sizeof(pidtext), "%d", (int)getpid());
		setenv("LISTEN_PID", pidtext, 1);
		setenv("LISTEN_FDS", "2", 1);
		setenv("NOTIFY_SOCKET", notify, 1);
		setenv("WATCHDOG_USEC", "200000", 1);
		execl(bin, bin, "--config", "none", "-s", sock, "-S", status,
		      "--sim-fabric", fabric, "--sim-port=sim0=fd00::1",
		      (char *)NULL);
		_exit(127);
	}
	close(cfd);
	close(sfd);
	assert_true(notify_wait(nfd, "READY=1", msg, sizeof(msg)));
	assert_non_null(strstr(msg, "STATUS=1 port(s)"));
	snprintf(pidtext, sizeof(pidtext), "MAINPID=%d", (int)pid);
	assert_non_null(strstr(msg, pidtext));
	assert_true(notify_wait(nfd, "WATCHDOG=1", msg, sizeof(msg)));
	/* Clients are served on the sockets systemd made. */
	s = raw_hello_ok(sock, "sd");
	close(s);
	s = raw_connect(status);
	assert_true(s >= 0);
	close(s);
	kill(pid, SIGTERM);
	assert_true(notify_wait(nfd, "STOPPING=1", msg, sizeof(msg)));
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* systemd's paths stay, for the next start. */
	assert_int_equal(access(sock, F_OK), 0);
	assert_int_equal(access(status, F_OK), 0);
	close(nfd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* rdmacm-muxctl's views: each answers in at most 80 columns, with -j the
 * matching part of the status, and exit codes scripts can rely on (0, 1
 * daemon unreachable, 2 usage). */
static int muxctl_run(const char *args, char *out, size_t cap)
{
	char cmd[512];
	size_t len = 0;
	FILE *p;
	int st;

	snprintf(cmd, sizeof(cmd), "%s %s 2>/dev/null", getenv("RDMACM_MUXCTL"),
		 args);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (len < cap - 1 && fgets(out + len, (int)(cap - len), p))
		len += strlen(out + len);
	out[len] = '\0';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_muxctl_views(void **state)
{
	static const char *const views[] = {
		"status", "clients", "ports", "gids", "connections", "counters"
	};
	struct fixture *f = *state;
	char args[256], out[16384], *line, *save = NULL;
	struct tclient a;
	json_t *j;
	size_t i;

	if (getenv("RDMACM_MUXCTL") == NULL)
		skip();
	connect_client(&a, &f->d, "view-a", "fd00::1");
	for (i = 0; i < sizeof(views) / sizeof(views[0]); i++) {
		snprintf(args, sizeof(args), "-S %s %s", f->d.status, views[i]);
		assert_int_equal(muxctl_run(args, out, sizeof(out)), 0);
		if (i < 4) /* the client's or its GID's row */
			assert_true(
				strstr(out, i == 3 ? "client " : "view-a") ||
				strcmp(views[i], "ports") == 0);
		for (line = strtok_r(out, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save))
			assert_true(strlen(line) <= 80);
	}
	snprintf(args, sizeof(args), "-S %s -j clients", f->d.status);
	assert_int_equal(muxctl_run(args, out, sizeof(out)), 0);
	j = json_loads(out, 0, NULL);
	assert_true(json_is_array(j) && json_array_size(j) == 1);
	json_decref(j);
	snprintf(args, sizeof(args), "-S %s gids", f->d.status);
	muxctl_run(args, out, sizeof(out));
	assert_non_null(strstr(out, "fd00::1"));
	snprintf(args, sizeof(args), "-S %s no-such-view", f->d.status);
	assert_int_equal(muxctl_run(args, out, sizeof(out)), 2);
	snprintf(args, sizeof(args), "-S %s.none status", f->d.status);
	assert_int_equal(muxctl_run(args, out, sizeof(out)), 1);
	/* --help: the usage, in plain words, every line in 80 columns. */
	assert_int_equal(muxctl_run("--help", out, sizeof(out)), 0);
	assert_true(strncmp(out, "usage: rdmacm-muxctl ", 21) == 0);
	assert_non_null(strstr(out, "--watch SECONDS       show the view"));
	for (line = strtok_r(out, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save))
		assert_true(strlen(line) <= 80);
	tc_close(&a);
}

/* muxbe(3)'s example device model, run as a hypervisor would: it
 * registers its GID, its send gets the daemon's verdict. */
static void test_example_device_model(void **state)
{
	struct fixture *f = *state;
	const char *muxd = getenv("RDMACM_MUXD");
	char cmd[1024], out[4096];
	size_t len = 0;
	FILE *p;

	char example[300];

	if (h_real_port())
		skip(); /* its GID is a sim port's */
	assert_non_null(muxd);
	/* Beside the daemon; the TSan build makes only the daemon. */
	snprintf(example, sizeof(example), "%.*s/example/device_model",
		 (int)(strrchr(muxd, '/') - muxd), muxd);
	if (access(example, X_OK) < 0)
		skip();
	snprintf(cmd, sizeof(cmd),
		 "RDMACM_MUX_SOCKET=%s timeout 20 %s fd00::1 fd99::1 2>&1",
		 f->d.sock, example);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (len < sizeof(out) - 1 &&
	       fgets(out + len, (int)(sizeof(out) - len), p))
		len += strlen(out + len);
	assert_int_equal(pclose(p), 0);
	assert_non_null(strstr(out, "qp1: ready on port 0"));
	assert_non_null(strstr(out, "send refused"));
	assert_non_null(strstr(out, "0 sent, 1 refused"));
}

/* Waits until the daemon's log has a line containing each of the texts. */
static int log_has(struct hdaemon *d, const char *const *texts)
{
	uint64_t deadline = h_now_ms() + (uint64_t)H_DEADLINE_MS;
	char line[1024];
	int found, i;

	do {
		FILE *fp = fopen(d->log, "r");

		found = 0;
		for (i = 0; fp && texts[i]; i++) {
			rewind(fp);
			while (fgets(line, sizeof(line), fp))
				if (strstr(line, texts[i])) {
					found++;
					break;
				}
		}
		if (fp)
			fclose(fp);
		if (texts[found] == NULL)
			return 1;
		poll(NULL, 0, 20);
	} while (h_now_ms() < deadline);
	for (i = 0; texts[i]; i++)
		print_error("log lacks: %s\n", texts[i]);
	return 0;
}

/* The configuration file: its options apply, the command line wins over
 * it, --check-config reports every error with its line or key, and
 * SIGHUP applies what may change, says what waits for a restart, and
 * keeps everything when the file is wrong. */
static void test_config_file_and_reload(void **state)
{
	struct fixture f;
	char dir[] = "/tmp/rcm-conf.XXXXXX", conf[64], text[1024], out[8192];
	char cmd[128];
	struct tclient a, b, c;
	char err[256] = "";
	json_t *st;

	(void)state;
	if (h_real_port())
		skip();
	assert_non_null(mkdtemp(dir));
	snprintf(conf, sizeof(conf), "%s/rdmacm-muxd.conf", dir);
	/* "socket" is overridden by the harness's -s: the command line wins. */
	snprintf(
		text, sizeof(text),
		"{\n  \"sim-port\": [\"sim0=fd00::1*4\"],\n  \"socket\": \"%s/not-used.sock\",\n"
		"  \"workers\": 1,\n  \"max-clients\": 3,\n  \"max-clients-per-uid\": 3,\n"
		"  \"hello-timeout-ms\": 3000,\n  \"log-level\": \"info\"\n}\n",
		dir);
	h_write_file(conf, text);
	{
		const char *const ok[] = { "--check-config", conf, NULL };

		assert_int_equal(hd_run(ok, out, sizeof(out)), 0);
		assert_non_null(strstr(out, ": ok"));
	}
	{
		/* --help: every line fits an 80-column terminal. */
		const char *const help[] = { "--help", NULL };
		char *line, *save = NULL;

		assert_int_equal(hd_run(help, out, sizeof(out)), 0);
		assert_true(strncmp(out, "usage: rdmacm-muxd ", 19) == 0);
		for (line = strtok_r(out, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save))
			assert_true(strlen(line) <= 80);
	}
	{
		const char *const extra[] = { "--config", conf, NULL };

		hd_start(&f.d, NULL, NULL, extra);
	}
	st = hd_status(&f.d);
	assert_int_equal(json_path_int(st, "daemon.limits.max_clients"), 3);
	assert_int_equal(json_path_int(st, "daemon.limits.hello_timeout_ms"),
			 3000);
	assert_int_equal(json_array_size(json_object_get(st, "workers")), 1);
	json_decref(st);
	snprintf(out, sizeof(out), "%s/not-used.sock", dir);
	assert_int_equal(access(out, F_OK), -1);

	/* A reload: two limits and the level change, workers and the sim
	 * port's GID table (as many GIDs, one other) must wait. */
	connect_client(&a, &f.d, "a", "fd00::1");
	connect_client(&b, &f.d, "b", NULL);
	snprintf(
		text, sizeof(text),
		"{\"sim-port\": \"sim0=fd00::1*3,fd00::9\", \"workers\": 2, \"max-clients\": 2, \"max-clients-per-uid\": 2, \"hello-timeout-ms\": 3000, \"log-level\": \"debug\"}\n");
	h_write_file(conf, text);
	kill(f.d.pid, SIGHUP);
	{
		const char *const said[] = {
			"SIGHUP: max-clients: 3 -> 2",
			"SIGHUP: log-level: info -> debug",
			"SIGHUP: workers: 1 -> 2 needs a restart",
			"SIGHUP: sim-port: sim0:0/0/4/",
			"SIGHUP: 5 option(s) changed",
			NULL
		};

		assert_true(log_has(&f.d, said));
	}
	assert_int_equal(hd_status_int(&f.d, "daemon.limits.max_clients"), 2);
	assert_true(tc_connect(&c, &f.d, "c", 1, 0, err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "too many clients"));
	/* debug is in force: GID churn is logged now. */
	assert_int_equal(tc_register(&b, "fd00::2"), 0);
	{
		const char *const said[] = { "(b): registered fd00::2", NULL };

		assert_true(log_has(&f.d, said));
	}

	/* A broken file: every error said, nothing changed. */
	h_write_file(
		conf,
		"{\"sim-port\": \"sim0\", \"max-clients\": 0,\n"
		" \"workers\": \"many\", \"log-level\": \"loud\", \"colour\": 1}\n");
	{
		const char *const bad[] = { "--check-config", conf, NULL };

		assert_int_equal(hd_run(bad, out, sizeof(out)), 1);
		assert_non_null(
			strstr(out, "key 'max-clients': '0' is not a number"));
		assert_non_null(
			strstr(out, "key 'workers': 'many' is not a number"));
		assert_non_null(strstr(out, "key 'log-level': 'loud' is not"));
		assert_non_null(strstr(out, "key 'colour': no such option"));
	}
	kill(f.d.pid, SIGHUP);
	{
		const char *const said[] = {
			"SIGHUP: 4 error(s): nothing reloaded", NULL
		};

		assert_true(log_has(&f.d, said));
	}
	h_write_file(conf, "{\"sim-port\": \"sim0\",\n \"workers\": 2\n");
	{
		const char *const bad[] = { "--check-config", conf, NULL };

		assert_int_equal(hd_run(bad, out, sizeof(out)), 1);
		assert_non_null(strstr(out, "line 3"));
	}
	kill(f.d.pid, SIGHUP);
	{
		const char *const said[] = {
			"SIGHUP: 1 error(s): nothing reloaded", NULL
		};

		assert_true(log_has(&f.d, said));
	}
	assert_int_equal(hd_status_int(&f.d, "daemon.limits.max_clients"), 2);
	/* Options on the command line are checked with the file's. */
	{
		const char *const bad[] = { "--check-config", "--sim-port=sim0",
					    "--max-gids", "-3", NULL };

		assert_int_equal(hd_run(bad, out, sizeof(out)), 1);
		assert_non_null(
			strstr(out, "--max-gids: '-3' is not a number"));
	}
	tc_close(&a);
	tc_close(&b);
	hd_stop(&f.d);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* As a service, the daemon writes the journal's native protocol, with a
 * client's identity in fields of their own (a fake journal socket). */
static void test_journal_fields(void **state)
{
	struct fixture f;
	char dir[] = "/tmp/rcm-journal.XXXXXX", path[64], target[96], cmd[96];
	char buf[4096], text[8192] = "";
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	uint8_t mad[MAD_SIZE];
	struct tclient a, b;
	uint64_t deadline;
	ssize_t n;
	int jfd, i;

	(void)state;
	if (h_real_port())
		skip();
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/journal", dir);
	snprintf(target, sizeof(target), "--log-target=journal:%s", path);
	jfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	assert_int_equal(bind(jfd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	{
		const char *const extra[] = { target, NULL };

		hd_start(&f.d, NULL, one_port, extra);
	}
	connect_client(&a, &f.d, "tenant-a", "fd00::1");
	connect_client(&b, &f.d, "tenant-b", NULL);
	/* A GID someone else holds: a warning about tenant-b. */
	assert_true(tc_register(&b, "fd00::1") < 0);
	deadline = h_now_ms() + (uint64_t)H_DEADLINE_MS;
	while (h_now_ms() < deadline &&
	       strlen(text) < sizeof(text) - sizeof(buf)) {
		n = recv(jfd, buf, sizeof(buf) - 1, 0);
		if (n < 0) {
			poll(NULL, 0, 20);
			continue;
		}
		buf[n] = '\0';
		if (strstr(buf, "VM=tenant-b\n")) {
			strcat(text, buf);
			break;
		}
	}
	assert_non_null(strstr(text, "PRIORITY=4\n"));
	assert_non_null(strstr(text, "SYSLOG_IDENTIFIER=rdmacm-muxd\n"));
	assert_non_null(strstr(text, "MESSAGE=client "));
	assert_non_null(strstr(text, "CLIENT_ID="));
	assert_non_null(strstr(text, "PORT=sim0\n"));
	assert_non_null(strstr(text, "GID=fd00::1\n"));
	assert_non_null(strstr(text, "ERRNO=17\n")); /* EEXIST */
	/* At the default level nothing is logged per MAD or per request. */
	while (recv(jfd, buf, sizeof(buf), 0) >= 0)
		;
	assert_int_equal(tc_register(&b, "fd00::2"), 0);
	for (i = 0; i < 100; i++) {
		h_req(mad, 0x700 + (uint32_t)i, "fd00::1", "fd00::2");
		assert_int_equal(tc_send_sync(&a, "fd00::2", mad), 0);
	}
	assert_true(tc_pump_until(&b, tc_has_rx, 100, H_DEADLINE_MS));
	n = recv(jfd, buf, sizeof(buf) - 1, 0);
	if (n >= 0) {
		buf[n] = '\0';
		fail_msg("logged during traffic: %s", buf);
	}
	tc_close(&a);
	tc_close(&b);
	hd_stop(&f.d);
	close(jfd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hello_negotiation,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(test_control_operations,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(test_multi_client_routing,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(test_gid_conflicts,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(test_spoofed_source_refused,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(test_cleanup_on_disconnect,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(
			test_stopped_client_does_not_delay_others,
			setup_small_queue, teardown_daemon),
		cmocka_unit_test_setup_teardown(
			test_malformed_frame_closes_only_offender, setup_daemon,
			teardown_daemon),
		cmocka_unit_test_setup_teardown(test_port_state_events,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(test_two_daemons_share_fabric,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(test_max_clients,
						setup_two_clients_max,
						teardown_daemon),
		cmocka_unit_test_setup_teardown(
			test_library_queues_without_buffers, setup_daemon,
			teardown_daemon),
		cmocka_unit_test_setup_teardown(test_status_socket_is_read_only,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(test_library_is_thread_safe,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(test_several_ports,
						setup_two_ports,
						teardown_daemon),
		cmocka_unit_test(test_sigterm_right_after_start),
		cmocka_unit_test(test_threads_are_named),
		cmocka_unit_test_setup_teardown(
			test_one_daemon_per_socket_and_port, setup_daemon,
			teardown_daemon),
		cmocka_unit_test_setup_teardown(test_metrics, setup_daemon,
						teardown_daemon),
		cmocka_unit_test(test_systemd_notify_and_activation),
		cmocka_unit_test(test_config_file_and_reload),
		cmocka_unit_test(test_journal_fields),
		cmocka_unit_test_setup_teardown(test_muxctl_views, setup_daemon,
						teardown_daemon),
		cmocka_unit_test_setup_teardown(test_example_device_model,
						setup_daemon, teardown_daemon),
	};

	signal(SIGPIPE, SIG_IGN);
	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("integration", tests, NULL, NULL);
}
