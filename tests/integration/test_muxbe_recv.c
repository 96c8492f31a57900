// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * libmuxbe's receive path when memory runs out: a MAD that cannot be
 * placed keeps its posted buffer the caller's and waits, and completes
 * into that buffer once memory is back.  The library's calloc() is
 * wrapped (-Wl,--wrap=calloc) so that the test fails the one it means.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/integration/harness.h"
#include "common/cm_mad.h"

void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);

/* Calls of calloc() to fail from now on (the library's and this
 * program's; the shared libraries' are not wrapped). */
static int fail_callocs;

void *__wrap_calloc(size_t n, size_t size)
{
	if (fail_callocs > 0) {
		fail_callocs--;
		errno = ENOMEM;
		return NULL;
	}
	return __real_calloc(n, size);
}

/* Until the library's descriptor says there is work, then the work,
 * with the next n calloc()s failing. */
static void process_failing(struct tclient *tc, int n)
{
	struct pollfd pfd = { .fd = muxbe_fd(tc->mb), .events = POLLIN };

	assert_true(poll(&pfd, 1, H_DEADLINE_MS) == 1);
	fail_callocs = n;
	assert_true(muxbe_process(tc->mb) >= 0);
	fail_callocs = 0;
}

/*
 * One buffer posted; the peer's REQ arrives while memory is out: the
 * buffer stays posted (the MAD waits), the application's recv callback
 * is not owed a completion that was never made; with memory back, the
 * MAD completes into that very buffer.  Before, the buffer was taken
 * and filled and no completion made: it never came back.
 */
static void test_a_mad_without_memory_keeps_its_buffer(void **state)
{
	static struct tclient tc;
	static uint8_t buf[MUXBE_RECV_BUF_MIN];
	struct muxbe_stats st;
	struct simpeer sp;
	struct hdaemon d;
	uint8_t m[MAD_SIZE];
	char err[256];

	(void)state;
	hd_start(&d, NULL, h_one_port, NULL);
	simpeer_open(&sp, &d, "peer", "fd99::1");
	assert_int_equal(tc_connect(&tc, &d, "vm", 0, 0, err, sizeof(err)), 0);
	assert_int_equal(tc_register(&tc, "fd00::1"), 0);
	tc_barrier(&tc); /* nothing else is pending */
	assert_int_equal(muxbe_post_recv(tc.mb, buf, sizeof(buf), NULL), 0);
	h_req(m, 0x51, "fd99::1", "fd00::1");
	simpeer_send(&sp, "fd00::1", m);
	process_failing(&tc, 1);
	muxbe_get_stats(tc.mb, &st);
	assert_int_equal(st.posted, 1);
	assert_int_equal(st.rx_delivered, 0);
	assert_int_equal(st.rx_queued, 1);
	assert_int_equal(tc.nrx, 0);
	/* Memory is back: the next call places it, in that buffer. */
	assert_true(muxbe_process(tc.mb) >= 0);
	assert_true(tc_pump_until(&tc, tc_has_rx, 1, H_DEADLINE_MS));
	muxbe_get_stats(tc.mb, &st);
	assert_int_equal(st.posted, 0);
	assert_int_equal(st.rx_delivered, 1);
	assert_int_equal(cm_mad_attr_id(tc.rx[0].mad), CM_ATTR_REQ);
	assert_int_equal(cm_mad_attr_id(buf + MUXBE_GRH_SIZE), CM_ATTR_REQ);
	tc_close(&tc);
	simpeer_close(&sp);
	hd_stop(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_mad_without_memory_keeps_its_buffer),
	};

	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("muxbe_recv", tests, NULL, NULL);
}
