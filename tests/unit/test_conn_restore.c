// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A previous daemon's table (mux/conn_restore.c, through the state file of
 * mux/conn_store.c): entries, timers and owners back, claimed by their
 * clients or ended, and the store's word on a file of other meanings.
 * Its other verdicts on files it finds (carried, set aside, refused) are
 * test_cm's and test_attacks_files', against the daemon. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "mux/conn.h"
#include "mux/conn_store.h"
#include "common/cm_mad.h"
#include "common/wire.h"
#include "tests/unit/conn_fixture.h"

/* A table in a state file of a name made from file's XXXXXX, which does
 * not exist yet; on port 42. */
static struct conn_table *open_new_table(char *file, int *restored)
{
	int fd = mkstemp(file);

	assert_true(fd >= 0);
	close(fd);
	unlink(file);
	return open_table(file, 42, restored);
}

/* A table that outlives its daemon: entries, their states and timers,
 * and the owners' tokens come back; a client claims its own with the
 * right token and uid only, once; the unclaimed ones end as if their
 * clients had left. */
static void test_state_survives_the_daemon(void **state)
{
	static const uint8_t tok_a[16] = { 1, 2, 3 }, tok_b[16] = { 4, 5, 6 };
	static const uint8_t new_a[16] = { 7 }, wrong[16] = { 9 };
	char file[] = "/tmp/rcm-test-state.XXXXXX";
	struct conn_table *ct;
	uint32_t h1, h2, h3;
	int restored;

	(void)state;
	ct = open_new_table(file, &restored);
	assert_int_equal(restored, 0);
	conn_table_free(new_table(7)); /* paths */
	conn_table_free(ct);
	unlink(file);
	ct = open_table(file, 42, &restored);
	h1 = established(ct, A, 0x11, 0x911, 0);
	h2 = out(ct, A, CM_ATTR_REQ, 0x12, 0, 100); /* in progress */
	h3 = established(ct, B, 0x11, 0x933, 0);
	assert_int_equal(conn_restore_owner_add(ct, A, 1000, tok_a), 0);
	assert_int_equal(conn_restore_owner_add(ct, B, 1001, tok_b), 0);
	/* The daemon stops (or dies: nothing is written at exit). */
	conn_restore_detach(ct);
	conn_purge_client(ct, A); /* a session closing */
	conn_table_free(ct);
	assert_int_equal(nemitted, 0); /* nobody was told */

	ct = open_table(file, 42, &restored);
	assert_int_equal(restored, 1);
	assert_int_equal(total(ct), 3);
	assert_int_equal(count(ct, CONN_ESTABLISHED), 2);
	assert_int_equal(count(ct, CONN_REQ_SENT), 1);
	assert_true(conn_table_next_deadline(ct) ==
		    100 + HS); /* its timer too */
	assert_true(conn_restore_max_client(ct) >= B);
	/* Only A's own token and uid claim A's entries, and only once. */
	assert_int_equal(conn_restore_claim(ct, A, 1000, wrong, 10, new_a),
			 -EPERM);
	assert_int_equal(conn_restore_claim(ct, A, 1001, tok_a, 10, new_a),
			 -EPERM);
	assert_int_equal(conn_restore_claim(ct, 99, 1000, tok_a, 10, new_a),
			 -ENOENT);
	assert_int_equal(conn_restore_claim(ct, A, 1000, tok_a, 10, new_a), 0);
	assert_int_equal(conn_restore_claim(ct, A, 1000, tok_a, 11, new_a),
			 -ENOENT);
	/* A's connections go on, as client 10's, with the same IDs. */
	assert_true(in(ct, CM_ATTR_DREQ, 0x911, h1, 0x11, 1000) == 10);
	out(ct, 10, CM_ATTR_DREP, 0x11, 0x911, 1001);
	assert_true(in(ct, CM_ATTR_REP, 0x912, h2, 0x12, 1002) == 10);
	/* New host IDs do not repeat the old ones. */
	assert_true(out(ct, 10, CM_ATTR_REQ, 0x13, 0, 1003) != h1);
	/* B never came back: its peer hears a DREQ. */
	assert_int_equal(conn_restore_purge_unclaimed(ct), 1);
	assert_int_equal(nemitted, 1);
	assert_int_equal(emitted[0].why, CONN_ANS_DREQ_ABANDONED);
	assert_int_equal(local_of(emitted[0].mad), h3);
	/* What B left draining in TimeWait (beside client 10's own ended
	 * connection) outlives another restart, owned by no client: no
	 * client ID comes from it. */
	assert_int_equal(count(ct, CONN_TIMEWAIT), 2);
	conn_restore_detach(ct);
	conn_table_free(ct);
	ct = open_table(file, 42, &restored);
	assert_int_equal(count(ct, CONN_TIMEWAIT), 2);
	assert_true(conn_restore_max_client(ct) < 1000);
	conn_restore_purge_unclaimed(ct); /* the grace ends */
	assert_int_equal(count(ct, CONN_TIMEWAIT), 2);
	assert_int_equal(in_rc(ct, CM_ATTR_DREP, 0x933, h3, 2000), -ESTALE);
	conn_table_free(ct);

	/* Another port: what was on the old one cannot be kept. */
	ct = open_table(file, 43, &restored);
	assert_int_equal(total(ct), 0);
	conn_table_free(ct);
	unlink(file);
}

/* A daemon restarted with a shorter handshake takes the previous one's
 * timers back no later than the class gives a new entry: otherwise the
 * restored entry heads the class's list past the new ones' deadlines,
 * and they wait behind it. */
static void test_restored_timers_keep_their_order(void **state)
{
	char file[] = "/tmp/rcm-test-state.XXXXXX";
	struct conn_table *ct;
	int restored;

	(void)state;
	ct = open_new_table(file, &restored);
	out(ct, A, CM_ATTR_REQ, 0x21, 0, 0); /* due at HS */
	conn_restore_detach(ct);
	conn_table_free(ct);
	ct = open_table_hs(file, 42, &restored, 1000);
	assert_int_equal(restored, 1);
	assert_true(conn_table_next_deadline(ct) == 1000);
	out(ct, B, CM_ATTR_REQ, 0x22, 0, 10); /* due at 1,010 */
	assert_int_equal(conn_expire(ct, 1000), 1);
	assert_int_equal(conn_expire(ct, 1010), 1);
	assert_int_equal(total(ct), 0);
	conn_table_free(ct);
	unlink(file);
}

/* A state file of the daemon's version whose entries mean other things
 * (a change that forgot to bump the version) is set aside, not misread;
 * one written before the meanings were kept (0) is taken, and given
 * them from then on. */
static void test_entries_of_other_meanings_are_set_aside(void **state)
{
	char file[] = "/tmp/rcm-test-store.XXXXXX", aside[64], err[512];
	struct conn_store_layout lay = {
		.size = { 44, 64, sizeof(struct conn_gid_rec) },
		.cap = { 64, 64, 64 },
		.owner_cap = 4,
		.meanings = 0,
	};
	struct conn_store *st;
	int fd = mkstemp(file), restored;

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	unlink(file);
	snprintf(aside, sizeof(aside), "%s.bad", file);
	st = conn_store_open(file, &lay, &restored, err, sizeof(err));
	assert_non_null(st);
	assert_int_equal(restored, 0);
	conn_store_close(st);
	/* Written without meanings: taken, and given these. */
	lay.meanings = 3;
	st = conn_store_open(file, &lay, &restored, err, sizeof(err));
	assert_non_null(st);
	assert_int_equal(restored, 1);
	conn_store_close(st);
	lay.meanings = 3;
	st = conn_store_open(file, &lay, &restored, err, sizeof(err));
	assert_non_null(st);
	assert_int_equal(restored, 1);
	conn_store_close(st);
	/* Other meanings: set aside whole, and started afresh. */
	lay.meanings = 4;
	st = conn_store_open(file, &lay, &restored, err, sizeof(err));
	assert_non_null(st);
	assert_int_equal(restored, 0);
	assert_non_null(strstr(err, "mean other things"));
	assert_int_equal(access(aside, F_OK), 0);
	conn_store_close(st);
	unlink(aside);
	unlink(file);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_state_survives_the_daemon),
		cmocka_unit_test(test_restored_timers_keep_their_order),
		cmocka_unit_test(test_entries_of_other_meanings_are_set_aside),
	};

	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("conn_restore", tests, NULL, NULL);
}
