// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Attacks through the QPs a MAD names.  A REQ, REP or SIDR_REP names its
 * sender's QP, and a peer's cm.c takes (QPN, CA GUID) as a connection's
 * identity: a REQ naming another tenant's QP has the peer reject it as
 * stale and DREQ that tenant's connection.  So a tenant names only its
 * own QPs (on a simulated port, what its process registered first; on a
 * real port, what the kernel says it created: the lab's scenario 17),
 * natively and through QEMU's protocol, and the CA GUID is the port's.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend/muxbe.h"
#include "common/cm_mad.h"
#include "tests/integration/harness.h"

#define PEER "fd99::1"

/* A REQ, REP or SIDR_REP names its sender's QP, and a peer's cm.c takes
 * (QPN, CA GUID) as a connection's identity: a REQ naming a tenant's QP
 * has the peer reject it as stale and DREQ that tenant's connection.  A
 * tenant in another process names only its own (on a simulated port,
 * what its process registered first); the CA GUID is the port's. */
static int intruder_checks(struct hdaemon *d, uint32_t victims)
{
	uint8_t m[MAD_SIZE];
	struct tclient a;
	char err[256];
	int bad = 0, rc;

/* A child cannot fail a cmocka assertion: it counts, and says which. */
#define INTRUDER_EXPECT(call, want)                                          \
	do {                                                                 \
		rc = (call);                                                 \
		if (rc != (want)) {                                          \
			fprintf(stderr, "intruder: %s: %d, not %d\n", #call, \
				rc, (want));                                 \
			bad++;                                               \
		}                                                            \
	} while (0)

	if (tc_connect(&a, d, "intruder", 1, 0, err, sizeof(err)) < 0 ||
	    tc_register(&a, "fd00::2") < 0)
		return 100;
	INTRUDER_EXPECT(muxbe_register_qpn(a.mb, NULL, victims), -EADDRINUSE);
	INTRUDER_EXPECT(muxbe_unregister_qpn(a.mb, NULL, victims), -EACCES);
	h_req(m, 0x4001, "fd00::2", PEER);
	cm_field_set(m, CM_REQ_LOCAL_QPN, victims);
	INTRUDER_EXPECT(tc_send_sync(&a, PEER, m), -EPERM);
	cm_field_set(m, CM_REQ_LOCAL_QPN, 0x5151); /* nobody's */
	INTRUDER_EXPECT(tc_send_sync(&a, PEER, m), -EPERM);
	h_mad(m, CM_ATTR_REP, 0x4002, 0x9999, 1);
	cm_field_set(m, CM_REP_LOCAL_QPN, victims);
	INTRUDER_EXPECT(tc_send_sync(&a, PEER, m), -EPERM);
	h_mad(m, CM_ATTR_SIDR_REP, 0x4003, 0, 1);
	cm_field_set(m, CM_SIDR_REP_QPN, victims);
	INTRUDER_EXPECT(tc_send_sync(&a, PEER, m), -EPERM);
	/* Its own QP, with the victim's CA GUID written in: sent, with
	 * the port's (checked by the parent on the wire). */
	h_req(m, 0x4004, "fd00::2", PEER);
	cm_field_set(m, CM_REQ_LOCAL_CA_GUID, 0x1122334455667788ull);
	INTRUDER_EXPECT(tc_send_sync(&a, PEER, m), 0);
	tc_close(&a);
	return bad;
#undef INTRUDER_EXPECT
}

static void test_qps_are_their_owners(void **state)
{
	static const char *const gids[] = { "sim0=fd00::1,fd00::2,fd00::3",
					    NULL };
	uint8_t m[MAD_SIZE];
	struct simpeer p;
	struct tclient v;
	struct hdaemon d;
	uint32_t victims = h_qpn(); /* the child's would be its own */
	int status, got = 0;
	uint64_t guid;
	json_t *st;
	pid_t pid;

	(void)state;
	hd_start(&d, NULL, gids, NULL);
	simpeer_open(&p, &d, "peer", PEER);
	tc_connect_gid(&v, &d, "victim", "fd00::1"); /* registers h_qpn() */
	h_req(m, 0x3001, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&v, PEER, m), 0);
	assert_true(simpeer_recv(&p, m, NULL, H_DEADLINE_MS));
	assert_int_equal(cm_field_get(m, CM_REQ_LOCAL_QPN), h_qpn());
	guid = cm_field_get(m, CM_REQ_LOCAL_CA_GUID);
	assert_int_not_equal(guid, 0);

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(intruder_checks(&d, victims));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* Only the intruder's own REQ reached the wire, as the port's (and
	 * the REJ the daemon sent for it when the intruder left). */
	while (simpeer_recv(&p, m, NULL, 200)) {
		if (cm_mad_attr_id(m) != CM_ATTR_REQ)
			continue;
		got++;
		assert_int_not_equal(cm_field_get(m, CM_REQ_LOCAL_QPN),
				     h_qpn());
		assert_int_equal(cm_field_get(m, CM_REQ_LOCAL_CA_GUID), guid);
	}
	assert_int_equal(got, 1);
	st = hd_status(&d);
	assert_int_equal(json_path_int(st, "counters.refusals.qp_owner"), 4);
	json_decref(st);
	/* The victim's QP is still its own. */
	h_req(m, 0x3002, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&v, PEER, m), 0);
	tc_close(&v);
	simpeer_close(&p);
	hd_stop(&d);
}

/* A process's QPN stays its own while any of its connections that
 * registered it is there, not only the first: a process with many
 * clients (QEMU with several devices, a test harness) loses none of
 * its QPs when one of them goes. */
static void test_qpn_outlives_its_first_registrant(void **state)
{
	static const char *const gids[] = { "sim0=fd00::1,fd00::2", NULL };
	uint8_t m[MAD_SIZE];
	struct tclient a, b;
	struct simpeer p;
	struct hdaemon d;

	(void)state;
	hd_start(&d, NULL, gids, NULL);
	simpeer_open(&p, &d, "peer", PEER);
	tc_connect_gid(&a, &d, "first", "fd00::1");  /* registers h_qpn() */
	tc_connect_gid(&b, &d, "second", "fd00::2"); /* and again */
	tc_close(&a);
	assert_true(hd_wait_client_gone(&d, "first"));
	h_req(m, 0x3101, "fd00::2", PEER);
	assert_int_equal(tc_send_sync(&b, PEER, m), 0);
	assert_true(simpeer_recv(&p, m, NULL, H_DEADLINE_MS));
	assert_int_equal(cm_field_get(m, CM_REQ_LOCAL_QPN), h_qpn());
	tc_close(&b);
	simpeer_close(&p);
	hd_stop(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_qps_are_their_owners),
		cmocka_unit_test(test_qpn_outlives_its_first_registrant),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
