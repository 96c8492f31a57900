// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Numbers from a command line (number.h). */
#include <errno.h>
#include <stdlib.h>

#include "common/number.h"

int number_parse(const char *s, int base, unsigned long long min,
		 unsigned long long max, unsigned long long *out)
{
	unsigned long long v;
	char *end;

	if (s[0] < '0' || s[0] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, base);
	if (*end != '\0')
		return -EINVAL;
	if (errno == ERANGE || v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}
