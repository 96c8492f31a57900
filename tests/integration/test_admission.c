// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Clients of the real daemon on sim ports: the hello and control
 * operations, routing between several clients, GID ownership, refusal of
 * spoofed sources, cleanup when a client goes, a stopped client isolated
 * from the others, framing errors, port events, a shared sim fabric,
 * several ports, limits, and the library used from several threads.
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

static void test_hello_negotiation(void **state)
{
	struct h_fixture *f = *state;
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
	/* The smaller minor: the daemon's (1.1: shared GIDs). */
	assert_int_equal(json_path_int(j, "protocol.minor"), 1);
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
	assert_non_null(strstr(msg, "1.1"));
	json_decref(j);
	assert_true(raw_wait_eof(fd, H_DEADLINE_MS));
	close(fd);
}

static void test_control_operations(void **state)
{
	struct h_fixture *f = *state;
	struct tclient a;
	char *reply = NULL;
	json_t *j;
	uint8_t gid[16];
	struct gid g;

	tc_connect_gid(&a, &f->d, "a", NULL);
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
	struct h_fixture *f = *state;
	struct tclient a, b, c;
	uint8_t mad[MAD_SIZE];
	uint32_t host_a, host_b;
	struct gid ga, gb;
	uint64_t guid;
	json_t *st;

	tc_connect_gid(&a, &f->d, "a", "fd00::1");
	tc_connect_gid(&b, &f->d, "b", "fd00::2");
	tc_connect_gid(&c, &f->d, "c", "fd00::3");
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
	/* The Local CA GUID is the port's node GUID, whatever the client
	 * wrote (0 here): a peer pairs it with the QPN, which is the port's
	 * device's.  The QPN is this process's own (h_mad()). */
	st = hd_status(&f->d);
	guid = strtoull(json_string_value(json_object_get(
				json_array_get(json_object_get(st, "ports"), 0),
				"node_guid")),
			NULL, 16);
	json_decref(st);
	assert_int_not_equal(guid, 0);
	assert_int_equal(cm_field_get(b.rx[0].mad, CM_REQ_LOCAL_CA_GUID), guid);
	cm_field_set(mad, CM_REQ_LOCAL_CA_GUID, guid);
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
	tc_barrier(&c);
	assert_int_equal(c.nrx, 0);
	tc_barrier(&a);
	tc_barrier(&b);
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
	struct h_fixture *f = *state;
	struct tclient a, b;
	char err[256];
	struct gid g;

	tc_connect_gid(&a, &f->d, "a", "fd00::1");
	tc_connect_gid(&b, &f->d, "b", NULL);
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
	struct h_fixture *f = *state;
	struct tclient a, b;
	uint8_t mad[MAD_SIZE];
	struct muxbe_addr addr;
	struct gid g;
	char err[256];

	tc_connect_gid(&a, &f->d, "a", "fd00::1");
	tc_connect_gid(&b, &f->d, "b", "fd00::2");
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
	tc_barrier(&b);
	assert_int_equal(b.nrx, 0);
	assert_true(tc_pump_until(&a, tc_has_rx, 1, H_DEADLINE_MS));
	tc_barrier(&a);
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

struct counts_want {
	struct hdaemon *d;
	int gids, comm_ids, clients;
};

static int counts_are(void *arg)
{
	struct counts_want *w = arg;
	json_t *st = hd_status(w->d);
	int ok = json_path_int(st, "routing.gids") == w->gids &&
		 json_path_int(st, "routing.comm_ids") == w->comm_ids &&
		 (int)json_array_size(json_object_get(st, "clients")) ==
			 w->clients;

	json_decref(st);
	return ok;
}

/* Until the status counts gids, comm IDs and clients as given. */
static int wait_counts(struct hdaemon *d, int gids, int comm_ids, int clients)
{
	struct counts_want w = { d, gids, comm_ids, clients };

	return h_wait_until(counts_are, &w, H_DEADLINE_MS);
}

static void test_cleanup_on_disconnect(void **state)
{
	struct h_fixture *f = *state;
	struct tclient a, b;
	uint8_t mad[MAD_SIZE];
	uint32_t host_a;
	json_t *st;
	pid_t child;
	int status;

	tc_connect_gid(&a, &f->d, "a", "fd00::1");
	tc_connect_gid(&b, &f->d, "b", "fd00::2");
	h_req(mad, 0x77, "fd00::1", "fd00::3");
	assert_int_equal(tc_send_sync(&a, "fd00::3", mad), 0);
	assert_true(counts_are(&(struct counts_want){ &f->d, 2, 1, 2 }));
	st = hd_status(&f->d);
	host_a = (uint32_t)
		json_path_int(json_array_get(json_object_get(h_client(st, "a"),
							     "connections"),
					     0),
			      "host_id");
	json_decref(st);
	tc_close(&a);
	assert_true(wait_counts(&f->d, 1, 0, 1));
	/* The GID is free for someone else, and A's comm ID routes nowhere:
	 * a peer's late REP for it is dropped (B, now holding A's GID,
	 * gets nothing). */
	assert_int_equal(tc_register(&b, "fd00::1"), 0);
	if (!h_real_port()) {
		struct simpeer p;

		simpeer_open(&p, &f->d, "peer", "fd99::1");
		h_mad(mad, CM_ATTR_REP, 0x88, host_a, 1);
		simpeer_send(&p, "fd00::1", mad);
		assert_true(hd_wait_status_int(&f->d,
					       "counters.drops.unknown_comm_id",
					       1));
		simpeer_close(&p);
		tc_barrier(&b);
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
	assert_true(wait_counts(&f->d, 2, 2, 2));
	kill(child, SIGKILL);
	waitpid(child, &status, 0);
	/* The daemon speaks for the dead client as its kernel CM would: a
	 * timeout REJ for its REQ, which reaches B and ends B's record. */
	assert_true(wait_counts(&f->d, 1, 0, 1));
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
	struct h_fixture *f = *state;
	struct tclient a, b, c;
	uint8_t buf[4096], kind, flags, mad[MAD_SIZE];
	uint64_t t0, worst = 0, dt;
	uint32_t rid;
	int s, i, rcvbuf = 4096;
	json_t *st, *cl;
	size_t k;
	long long dropped = -1, n_mads;

	/* S: hello, a GID, then it never reads again. */
	s = raw_hello_gid(f->d.sock, "stopped", "fd00::5");
	setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));

	tc_connect_gid(&a, &f->d, "flooder", "fd00::1");
	tc_connect_gid(&b, &f->d, "b", "fd00::2");
	tc_connect_gid(&c, &f->d, "c", "fd00::3");
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
	static struct h_fixture f;
	static const char *const extra[] = { "--client-queue", "65536", NULL };

	hd_start(&f.d, NULL, h_one_port, extra);
	*state = &f;
	return 0;
}

static void test_malformed_frame_closes_only_offender(void **state)
{
	struct h_fixture *f = *state;
	struct tclient a;
	uint8_t junk[32], buf[4096], kind, flags;
	uint32_t rid;
	int s, n;

	tc_connect_gid(&a, &f->d, "a", "fd00::1");
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
	struct h_fixture *f = *state;
	struct tclient a;
	uint8_t mad[MAD_SIZE];
	char path[256];

	if (h_real_port())
		skip(); /* the sim port's down switch; rxe has none */
	tc_connect_gid(&a, &f->d, "a", "fd00::1");
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
	struct h_fixture *f = *state;
	static const char *const other[] = { "simb=fd01::1,fd01::2", NULL };
	struct hdaemon d2;
	struct tclient a, b;
	uint8_t mad[MAD_SIZE];

	if (h_real_port())
		skip(); /* two daemons on one real port cannot both own it */
	hd_start(&d2, f->d.fabric, other, NULL);
	tc_connect_gid(&a, &f->d, "host1-vm", "fd00::1");
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
			assert_int_equal(muxbe_register_qpn(b.mb, "simb",
							    h_qpn()),
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
	static struct h_fixture f;
	static const char *const extra[] = { "--max-clients", "2",
					     "--max-clients-per-uid", "2",
					     NULL };

	hd_start(&f.d, NULL, h_one_port, extra);
	*state = &f;
	return 0;
}

static void test_max_clients(void **state)
{
	struct h_fixture *f = *state;
	struct tclient a, b, c;
	char err[256] = "";

	tc_connect_gid(&a, &f->d, "a", NULL);
	tc_connect_gid(&b, &f->d, "b", NULL);
	assert_true(tc_connect(&c, &f->d, "c", 1, 0, err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "too many clients"));
	assert_true(hd_status_int(&f->d, "counters.clients_refused") == 1);
	tc_close(&a);
	assert_true(wait_counts(&f->d, 0, 0, 1));
	assert_int_equal(tc_connect(&c, &f->d, "c", 1, 0, err, sizeof(err)), 0);
	tc_close(&b);
	tc_close(&c);
}

static void test_library_queues_without_buffers(void **state)
{
	struct h_fixture *f = *state;
	struct tclient a, b;
	struct muxbe_stats st;
	uint8_t mad[MAD_SIZE];
	char err[256];
	int i;

	tc_connect_gid(&a, &f->d, "a", "fd00::1");
	assert_int_equal(tc_connect(&b, &f->d, "b", 0, 3, err, sizeof(err)), 0);
	assert_int_equal(tc_register(&b, "fd00::2"), 0);
	for (i = 0; i < 5; i++) {
		h_req(mad, 0x300 + (uint32_t)i, "fd00::1", "fd00::2");
		assert_int_equal(tc_send_sync(&a, "fd00::2", mad), 0);
	}
	/* Wait until all five reached the library. */
	for (i = 0; i < 500; i++) {
		tc_barrier(&b);
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
	struct h_fixture *f = *state;
	struct tclient a, b;
	struct pinger p[4];
	pthread_t th[4];
	uint8_t mad[MAD_SIZE];
	int i;

	tc_connect_gid(&a, &f->d, "a", "fd00::1");
	tc_connect_gid(&b, &f->d, "b", "fd00::2");
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
	static struct h_fixture f;
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
	struct h_fixture *f = *state;
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
	assert_int_equal(muxbe_register_qpn(a0.mb, "p1", h_qpn()), 0);
	h_req(mad, 0x71, "fd00::1", "fd00::2");
	assert_int_equal(tc_send_sync(&a0, "fd00::2", mad), 0);
	assert_true(tc_pump_until(&b1, tc_has_rx, 1, H_DEADLINE_MS));
	assert_int_equal(b1.rx[0].addr.port, 1);
	tc_barrier(&b0);
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

/* muxbe(3)'s example device model, run as a hypervisor would: it
 * registers its GID, its send gets the daemon's verdict. */
static void test_example_device_model(void **state)
{
	struct h_fixture *f = *state;
	const char *muxd = getenv("RDMACM_MUXD");
	char cmd[1024], out[4096];
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
	assert_int_equal(h_shell_run(cmd, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "qp1: ready on port 0"));
	assert_non_null(strstr(out, "send refused"));
	assert_non_null(strstr(out, "0 sent, 1 refused"));
}

/* An empty RDMACM_MUX_SOCKET is an unset one (the default socket), as
 * the shell's ${VAR:-default}; it used to be tried as the path "" and
 * fail with EINVAL. */
static void test_empty_socket_variable_is_unset(void **state)
{
	struct muxbe_options o = { .timeout_ms = 1000 };
	struct muxbe *mb = NULL;
	int rc;

	(void)state;
	assert_int_equal(setenv("RDMACM_MUX_SOCKET", "", 1), 0);
	rc = muxbe_connect(&o, &mb);
	unsetenv("RDMACM_MUX_SOCKET");
	if (mb)
		muxbe_close(mb);
	/* No daemon at the default path here, or the host's own. */
	if (rc != 0 && rc != -ENOENT && rc != -ECONNREFUSED && rc != -EACCES)
		fail_msg("muxbe_connect with RDMACM_MUX_SOCKET=\"\": %s",
			 strerror(-rc));
}

struct backlog_connect {
	const char *path;
	int rc;
};

static void *backlog_connect_thread(void *arg)
{
	struct backlog_connect *bc = arg;
	struct muxbe_options o = { .socket_path = bc->path,
				   .timeout_ms = 3000 };
	struct muxbe *mb = NULL;

	bc->rc = muxbe_connect(&o, &mb);
	if (mb)
		muxbe_close(mb);
	return NULL;
}

/* A daemon whose listen backlog is full answers a connect with EAGAIN;
 * muxbe_connect() tries again within its deadline instead of failing at
 * once.  The daemon here is a bare listener with a backlog of one, kept
 * full until the library has been turned away. */
static void test_connect_waits_out_a_full_backlog(void **state)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct backlog_connect bc = { .rc = 1 };
	int lfd, fill[8], nfill = 0, fd, i;
	char path[108];
	pthread_t th;

	(void)state;
	snprintf(path, sizeof(path), "/tmp/rcm-backlog.%d", getpid());
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	unlink(path);
	lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	assert_int_equal(listen(lfd, 1), 0);
	/* Fill the backlog until the kernel says EAGAIN. */
	for (;;) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
		assert_true(fd >= 0 && nfill < 8);
		if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
			assert_int_equal(errno, EAGAIN);
			close(fd);
			break;
		}
		fill[nfill++] = fd;
	}
	bc.path = path;
	assert_int_equal(pthread_create(&th, NULL, backlog_connect_thread, &bc),
			 0);
	/* Long enough to be turned away, short of its deadline. */
	poll(NULL, 0, 300);
	for (i = 0; i < nfill; i++) {
		fd = accept(lfd, NULL, NULL);
		assert_true(fd >= 0);
		close(fd);
		close(fill[i]);
	}
	/* Its retry arrives; this "daemon" hangs up on its hello. */
	{
		struct pollfd pf = { .fd = lfd, .events = POLLIN };

		if (poll(&pf, 1, H_DEADLINE_MS) != 1)
			fail_msg(
				"muxbe_connect() did not try again (it returned %d)",
				bc.rc);
	}
	fd = accept(lfd, NULL, NULL);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_not_equal(bc.rc, -EAGAIN);
	assert_true(bc.rc < 0);
	close(lfd);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hello_negotiation,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_control_operations,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_multi_client_routing,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_gid_conflicts,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_spoofed_source_refused,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_cleanup_on_disconnect,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(
			test_stopped_client_does_not_delay_others,
			setup_small_queue, h_teardown_daemon),
		cmocka_unit_test_setup_teardown(
			test_malformed_frame_closes_only_offender,
			h_setup_daemon, h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_port_state_events,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_two_daemons_share_fabric,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_max_clients,
						setup_two_clients_max,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(
			test_library_queues_without_buffers, h_setup_daemon,
			h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_library_is_thread_safe,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_several_ports,
						setup_two_ports,
						h_teardown_daemon),
		cmocka_unit_test(test_connect_waits_out_a_full_backlog),
		cmocka_unit_test(test_empty_socket_variable_is_unset),
		cmocka_unit_test_setup_teardown(test_example_device_model,
						h_setup_daemon,
						h_teardown_daemon),
	};

	signal(SIGPIPE, SIG_IGN);
	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("admission", tests, NULL, NULL);
}
