// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Shared GIDs (issue 43, rdmacm-mux-protocol(7) SHARED GIDS): the host's
 * own processes use one address, as they do with the kernel CM, through
 * the real daemon on a sim port against a scripted CM peer.  Each is
 * reached by the service IDs it listens on, one listener a service ID,
 * nobody listening answered as the kernel CM answers; each sends from
 * the address; a VM's GID stays its own; and the policy decides who may
 * share.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/integration/harness.h"
#include "common/cm_mad.h"
#include "common/gid.h"
#include "common/wire.h"

#define PEER "fd99::1"
#define SHARED "fd00::5"
/* rdma_cm's service IDs for TCP ports 7471 and 7472. */
#define SID1 0x0000000001061d2full
#define SID2 0x0000000001061d30ull
static const char *const ports[] = { "sim0=fd00::1,fd00::5", NULL };

struct fx {
	struct hdaemon d;
	struct simpeer p;
	struct tclient h1, h2, vm;
};

/* A control request on tc's connection: 0, or the daemon's -errno. */
static int request(struct tclient *tc, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int request(struct tclient *tc, const char *fmt, ...)
{
	char json[256], *reply = NULL;
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(json, sizeof(json), fmt, ap);
	va_end(ap);
	rc = muxbe_request(tc->mb, json, &reply);
	free(reply);
	return rc;
}

/* tc shares gid (its source from now on) and names the test's QP. */
static int share(struct tclient *tc, const char *gid)
{
	struct gid g;
	int rc;

	assert_int_equal(gid_parse(gid, &g), 0);
	rc = muxbe_share_gid(tc->mb, "sim0", g.raw, &tc->port);
	if (rc)
		return rc;
	memcpy(tc->gid, g.raw, 16);
	return muxbe_register_qpn(tc->mb, "sim0", h_qpn());
}

static int listen_on(struct tclient *tc, uint64_t sid)
{
	struct gid g;

	assert_int_equal(gid_parse(SHARED, &g), 0);
	return muxbe_listen(tc->mb, "sim0", g.raw, sid);
}

static int setup(void **state)
{
	static struct fx f;
	char err[256];

	memset(&f, 0, sizeof(f));
	hd_start(&f.d, NULL, ports, NULL);
	simpeer_open(&f.p, &f.d, "peer", PEER);
	assert_int_equal(tc_connect(&f.h1, &f.d, "host-1", 1, 0, err,
				    sizeof(err)),
			 0);
	assert_int_equal(tc_connect(&f.h2, &f.d, "host-2", 1, 0, err,
				    sizeof(err)),
			 0);
	tc_connect_gid(&f.vm, &f.d, "vm", "fd00::1");
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (f->h1.mb)
		tc_close(&f->h1);
	if (f->h2.mb)
		tc_close(&f->h2);
	tc_close(&f->vm);
	simpeer_close(&f->p);
	hd_stop(&f->d);
	return 0;
}

/* The peer's REQ for the shared GID's service sid. */
static void peer_req(struct fx *f, uint32_t local, uint64_t sid)
{
	uint8_t m[MAD_SIZE];

	h_req(m, local, PEER, SHARED);
	cm_field_set(m, CM_REQ_SERVICE_ID, sid);
	simpeer_send(&f->p, SHARED, m);
}

/* Two processes share one address: a REQ reaches the one listening on
 * its service ID (and nobody else), the rest of its connection follows
 * it by comm ID, a service ID nobody listens on is rejected as the
 * kernel CM rejects it, each process sends from the address, and one
 * that exits has its connection ended and its listens freed while the
 * other keeps its own. */
static void test_processes_share_a_gid_by_service_id(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE], src[16];
	struct gid shared;
	uint32_t host;
	json_t *st;

	assert_int_equal(share(&f->h1, SHARED), 0);
	assert_int_equal(share(&f->h2, SHARED), 0);
	assert_int_equal(tc_register(&f->vm, SHARED), -EEXIST);
	assert_int_equal(listen_on(&f->h1, SID1), 0);
	assert_int_equal(listen_on(&f->h2, SID1), -EADDRINUSE);
	assert_int_equal(listen_on(&f->h2, SID2), 0);
	assert_int_equal(listen_on(&f->vm, SID2), -ENOENT);
	st = hd_status(&f->d);
	assert_string_equal(
		json_string_value(json_object_get(
			json_array_get(
				json_object_get(
					json_array_get(json_object_get(st,
								       "ports"),
						       0),
					"gid_table"),
				1),
			"owner")),
		"shared");
	json_decref(st);

	/* By service ID. */
	peer_req(f, 0x4711, SID1);
	tc_expect(&f->h1, 1, CM_ATTR_REQ);
	peer_req(f, 0x4712, SID2);
	tc_expect(&f->h2, 1, CM_ATTR_REQ);
	assert_int_equal(cm_field_get(f->h2.rx[0].mad, CM_REQ_LOCAL_COMM_ID),
			 0x4712);
	/* Nobody on a third: the kernel CM's REJ, invalid service ID. */
	peer_req(f, 0x4713, 0x0000000001061d31ull);
	simpeer_expect(&f->p, CM_ATTR_REJ, r);
	assert_int_equal(cm_field_get(r, CM_REJ_REASON),
			 CM_REJ_REASON_INVALID_SERVICE_ID);
	assert_int_equal(cm_field_get(r, CM_REJ_REMOTE_COMM_ID), 0x4713);

	/* h1 accepts; the RTU comes back to it alone. */
	h_mad(m, CM_ATTR_REP, 0x171, 0x4711, 1);
	assert_int_equal(tc_send_sync(&f->h1, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REP, r);
	host = wire_get32(r + 24);
	h_mad(m, CM_ATTR_RTU, 0x4711, host, 2);
	simpeer_send(&f->p, SHARED, m);
	tc_expect(&f->h1, 2, CM_ATTR_RTU);
	tc_barrier(&f->h2);
	assert_int_equal(f->h2.nrx, 1);
	/* h2 may not answer h1's connection. */
	h_mad(m, CM_ATTR_DREQ, 0x171, 0x4711, 3);
	assert_int_equal(tc_send_sync(&f->h2, PEER, m), -ENOENT);

	/* h2 connects out from the shared address. */
	h_req(m, 0x99, SHARED, PEER);
	assert_int_equal(tc_send_sync(&f->h2, PEER, m), 0);
	assert_true(simpeer_recv(&f->p, r, src, H_DEADLINE_MS));
	assert_int_equal(cm_mad_attr_id(r), CM_ATTR_REQ);
	assert_int_equal(gid_parse(SHARED, &shared), 0);
	assert_memory_equal(src, shared.raw, 16);

	/* h1 exits: its peer is told, its service ID is free, h2 stays. */
	tc_close(&f->h1);
	simpeer_expect(&f->p, CM_ATTR_DREQ, r);
	assert_int_equal(wire_get32(r + 24), host);
	peer_req(f, 0x4714, SID1);
	simpeer_expect(&f->p, CM_ATTR_REJ, r);
	assert_int_equal(cm_field_get(r, CM_REJ_REMOTE_COMM_ID), 0x4714);
	peer_req(f, 0x4715, SID2);
	tc_expect(&f->h2, 2, CM_ATTR_REQ);
	/* The last member gone, the address is free for a VM. */
	assert_int_equal(request(&f->h2,
				 "{\"op\":\"unregister_gid\",\"port\":\"sim0\","
				 "\"gid\":\"" SHARED "\"}"),
			 0);
	assert_int_equal(tc_register(&f->vm, SHARED), 0);
}

/* A VM's GID is its own: nobody joins it shared, and it cannot be
 * shared while it is held. */
static void test_an_exclusive_gid_stays_exclusive(void **state)
{
	struct fx *f = *state;

	assert_int_equal(share(&f->h1, "fd00::1"), -EEXIST);
	assert_int_equal(request(&f->h1,
				 "{\"op\":\"register_gid\",\"port\":\"sim0\","
				 "\"gid\":\"" SHARED "\",\"shared\":1}"),
			 -EINVAL);
	assert_int_equal(share(&f->h1, SHARED), 0);
	assert_int_equal(request(&f->h1, "{\"op\":\"listen\",\"port\":\"sim0\","
					 "\"gid\":\"" SHARED
					 "\",\"service_id\":\"7\"}"),
			 -EINVAL);
	assert_int_equal(request(&f->h1,
				 "{\"op\":\"listen\",\"port\":\"sim0\","
				 "\"gid\":\"" SHARED "\",\"service_id\":-1}"),
			 -EINVAL);
	assert_int_equal(request(&f->h1,
				 "{\"op\":\"listen\",\"port\":\"sim0\","
				 "\"gid\":\"" SHARED
				 "\",\"service_id\":\"0x10000000000000000\"}"),
			 -EINVAL);
	assert_int_equal(listen_on(&f->h1, SID1), 0);
	assert_int_equal(request(&f->h1,
				 "{\"op\":\"unlisten\",\"port\":\"sim0\","
				 "\"gid\":\"" SHARED "\",\"service_id\":%llu}",
				 (unsigned long long)SID1),
			 0);
	assert_int_equal(request(&f->h1,
				 "{\"op\":\"unlisten\",\"port\":\"sim0\","
				 "\"gid\":\"" SHARED "\",\"service_id\":%llu}",
				 (unsigned long long)SID1),
			 -ENOENT);
}

/* A restarted daemon keeps no shares: the library registers its GID
 * shared and listens again, in that order, and REQs find their
 * listeners as before; what a client gave up stays given up. */
static void test_shares_and_listens_come_back_after_a_restart(void **state)
{
	struct fx *f = *state;
	uint8_t r[MAD_SIZE];
	struct gid g;

	assert_int_equal(gid_parse(SHARED, &g), 0);
	assert_int_equal(share(&f->h1, SHARED), 0);
	assert_int_equal(share(&f->h2, SHARED), 0);
	assert_int_equal(listen_on(&f->h1, SID1), 0);
	assert_int_equal(listen_on(&f->h2, SID2), 0);
	assert_int_equal(listen_on(&f->h2, SID1 + 7), 0);
	assert_int_equal(muxbe_unlisten(f->h2.mb, "sim0", g.raw, SID1 + 7), 0);
	hd_kill(&f->d, SIGTERM);
	hd_restart(&f->d);
	assert_true(tc_pump_until(&f->h1, tc_has_link_ups, 1, H_DEADLINE_MS));
	assert_true(tc_pump_until(&f->h2, tc_has_link_ups, 1, H_DEADLINE_MS));
	assert_int_equal(f->h1.link_status, 0);
	assert_null(strstr(f->h1.link_message, "not registered again"));
	assert_null(strstr(f->h2.link_message, "not registered again"));
	peer_req(f, 0x4721, SID2);
	tc_expect(&f->h2, 1, CM_ATTR_REQ);
	peer_req(f, 0x4722, SID1);
	tc_expect(&f->h1, 1, CM_ATTR_REQ);
	peer_req(f, 0x4723, SID1 + 7);
	simpeer_expect(&f->p, CM_ATTR_REJ, r);
	assert_int_equal(cm_field_get(r, CM_REJ_REMOTE_COMM_ID), 0x4723);
	/* Leaving the GID forgets its listens: after the next restart h2
	 * is not back on it, and its service is nobody's. */
	assert_int_equal(muxbe_unregister_gid(f->h2.mb, "sim0", g.raw), 0);
	hd_kill(&f->d, SIGTERM);
	hd_restart(&f->d);
	assert_true(tc_pump_until(&f->h2, tc_has_link_ups, 2, H_DEADLINE_MS));
	assert_null(strstr(f->h2.link_message, "not registered again"));
	assert_true(tc_pump_until(&f->h1, tc_has_link_ups, 2, H_DEADLINE_MS));
	peer_req(f, 0x4724, SID2);
	simpeer_expect(&f->p, CM_ATTR_REJ, r);
	assert_int_equal(cm_field_get(r, CM_REJ_REMOTE_COMM_ID), 0x4724);
}

/* Who may share is the policy's: a rule without share_gids is refused
 * (EACCES), one with it is let in. */
static void test_the_policy_decides_who_shares(void **state)
{
	static const char *extra[] = { "--policy", NULL, NULL };
	char dir[] = "/tmp/rcm-shared.XXXXXX", path[64], text[256], err[256];
	struct tclient vm = { 0 }, host = { 0 };
	struct hdaemon d;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/policy.json", dir);
	snprintf(text, sizeof(text),
		 "{\"policy\": [\n"
		 " {\"match\": {\"uid\": %u}, \"vm\": \"host\","
		 " \"share_gids\": true},\n"
		 " {\"match\": {\"uid\": %u}, \"vm\": \"vm\"}\n"
		 "]}\n",
		 (unsigned)getuid(), (unsigned)getuid());
	h_write_file(path, text);
	extra[1] = path;
	hd_start(&d, NULL, ports, extra);
	assert_int_equal(tc_connect(&vm, &d, "vm", 1, 0, err, sizeof(err)), 0);
	assert_int_equal(tc_connect(&host, &d, "host", 1, 0, err, sizeof(err)),
			 0);
	assert_int_equal(share(&vm, SHARED), -EACCES);
	assert_int_equal(share(&host, SHARED), 0);
	tc_close(&vm);
	tc_close(&host);
	hd_stop(&d);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
			test_processes_share_a_gid_by_service_id, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			test_an_exclusive_gid_stays_exclusive, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_shares_and_listens_come_back_after_a_restart,
			setup, teardown),
		cmocka_unit_test(test_the_policy_decides_who_shares),
	};

	signal(SIGPIPE, SIG_IGN);
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	if (getenv("RCM_TEST_UMAD_PORT"))
		return 0; /* the scripted peer lives on the sim fabric */
	return cmocka_run_group_tests_name("shared_gid", tests, NULL, NULL);
}
