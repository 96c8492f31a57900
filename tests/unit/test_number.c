// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Numbers from a command line: all of the word, in range, never a sign,
 * a space or a tail quietly taken.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/number.h"

static void test_numbers(void **state)
{
	unsigned long long v = 7;

	(void)state;
	assert_int_equal(number_parse("42", 10, 1, 100, &v), 0);
	assert_int_equal(v, 42);
	assert_int_equal(number_parse("0x10", 0, 0, 100, &v), 0);
	assert_int_equal(v, 16);
	assert_int_equal(number_parse("18446744073709551615", 10, 0, UINT64_MAX,
				      &v),
			 0);
	assert_true(v == UINT64_MAX);
	v = 7;
	/* What strtoull() or atoi() would have taken. */
	assert_int_equal(number_parse("-1", 10, 0, UINT64_MAX, &v), -EINVAL);
	assert_int_equal(number_parse("+1", 10, 0, 100, &v), -EINVAL);
	assert_int_equal(number_parse(" 1", 10, 0, 100, &v), -EINVAL);
	assert_int_equal(number_parse("1 ", 10, 0, 100, &v), -EINVAL);
	assert_int_equal(number_parse("5s", 10, 0, 100, &v), -EINVAL);
	assert_int_equal(number_parse("abc", 10, 0, 100, &v), -EINVAL);
	assert_int_equal(number_parse("", 10, 0, 100, &v), -EINVAL);
	assert_int_equal(number_parse("0x10", 10, 0, 100, &v), -EINVAL);
	assert_int_equal(number_parse("18446744073709551616", 10, 0, UINT64_MAX,
				      &v),
			 -ERANGE);
	assert_int_equal(number_parse("0", 10, 1, 100, &v), -ERANGE);
	assert_int_equal(number_parse("101", 10, 1, 100, &v), -ERANGE);
	/* A refusal leaves the value alone. */
	assert_int_equal(v, 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_numbers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
