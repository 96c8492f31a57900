// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Untrusted text on its way to logs and terminals: what is clean, how
 * the rest is escaped, and that a log line cannot be forged or split.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/log.h"
#include "common/text.h"

static void test_clean(void **state)
{
	(void)state;
	assert_true(text_is_clean("vm-7.example", 12));
	assert_true(text_is_clean("v\xc3\xa9m", 4)); /* é */
	assert_true(text_is_clean("", 0));
	assert_false(text_is_clean("a\nb", 3));
	assert_false(text_is_clean("\x1b[2J", 4));
	assert_false(text_is_clean("a\x7f", 2));
	assert_false(text_is_clean("a\xc2\x9b", 3));    /* C1 CSI */
	assert_false(text_is_clean("a\xc3", 2));        /* cut short */
	assert_false(text_is_clean("\xc0\xaf", 2));     /* overlong */
	assert_false(text_is_clean("\xed\xa0\x80", 3)); /* surrogate */
	assert_false(text_is_clean("a\0b", 3));
	/* Bidirectional overrides (RLO), isolates (LRI, PDI) and the line
	 * and paragraph separators; their neighbours are text. */
	assert_false(text_is_clean("a\xe2\x80\xaez", 5));
	assert_false(text_is_clean("a\xe2\x80\xaaz", 5));
	assert_false(text_is_clean("a\xe2\x81\xa6z", 5));
	assert_false(text_is_clean("a\xe2\x81\xa9z", 5));
	assert_false(text_is_clean("a\xe2\x80\xa8z", 5));
	assert_false(text_is_clean("a\xe2\x80\xa9z", 5));
	assert_true(text_is_clean("a\xe2\x80\xa7z", 5)); /* U+2027 */
	assert_true(text_is_clean("a\xe2\x80\xafz", 5)); /* U+202F */
	assert_true(text_is_clean("a\xe2\x81\xaaz", 5)); /* U+206A */
}

static void test_escape(void **state)
{
	char out[64];

	(void)state;
	text_escape(out, sizeof(out), "a\nb\tc\x1b\\d\xc3\xa9\xff", 11);
	assert_string_equal(out, "a\\nb\\tc\\x1b\\\\d\xc3\xa9\\xff");
	/* An override is escaped byte by byte, as a C1 control is. */
	text_escape(out, sizeof(out), "a\xe2\x80\xaez", 5);
	assert_string_equal(out, "a\\xe2\\x80\\xaez");
	/* Cut to fit, never in the middle of an escape. */
	assert_int_equal(text_escape(out, 5, "ab\x1b", 3), 2);
	assert_string_equal(out, "ab");
	assert_int_equal(text_escape(out, 1, "ab", 2), 0);
	assert_string_equal(out, "");
}

static void test_log_line_cannot_be_forged(void **state)
{
	char path[] = "/tmp/rcm-test-text.XXXXXX", buf[512];
	int fd = mkstemp(path), saved = dup(2);
	ssize_t n;

	(void)state;
	assert_true(fd >= 0 && saved >= 0);
	log_init("test", 1, 0);
	dup2(fd, 2);
	log_warnx("client %d (%s): refused", 7,
		  "vm\nrdmacm-muxd: forged line\r\x1b[2K");
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	unlink(path);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_string_equal(
		buf,
		"client 7 (vm\\nrdmacm-muxd: forged line\\x0d\\x1b[2K): refused\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clean),
		cmocka_unit_test(test_escape),
		cmocka_unit_test(test_log_line_cannot_be_forged),
	};

	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("text", tests, NULL, NULL);
}
