/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_COMMON_NUMBER_H
#define RCM_COMMON_NUMBER_H

/*
 * Numbers an admin types on a command line.  strtoull() alone takes a
 * sign ("-1" is 2^64 - 1), leading space and a tail of anything, and
 * atoi() takes nonsense as 0: a mistyped option would run with a value
 * nobody gave.
 */

/* s, all of it, as a number in [min, max]: decimal digits, or with base
 * 0 also 0x-prefixed hexadecimal (and 0-prefixed octal, as strtoull()).
 * No sign, no space.  0, or -EINVAL (not a number), -ERANGE (out of
 * [min, max], or of 64 bits). */
int number_parse(const char *s, int base, unsigned long long min,
		 unsigned long long max, unsigned long long *out);

#endif
