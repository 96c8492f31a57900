// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer: untrusted text on its way to logs and terminals.  What
 * comes out of the escaper is clean, and clean text goes through it as
 * it is (backslashes doubled). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t cap = size * 4 + 1, n;
	char *out = malloc(cap), *small = malloc(8);
	int clean = text_is_clean((const char *)data, size);

	if (out == NULL || small == NULL)
		goto out;
	n = text_escape(out, cap, (const char *)data, size);
	if (n != strlen(out) || !text_is_clean(out, n))
		__builtin_trap();
	if (clean && memchr(data, '\\', size) == NULL &&
	    (n != size || memcmp(out, data, size) != 0))
		__builtin_trap();
	/* Cut short: still terminated, still clean. */
	n = text_escape(small, 8, (const char *)data, size);
	if (n >= 8 || n != strlen(small) || !text_is_clean(small, n))
		__builtin_trap();
out:
	free(out);
	free(small);
	return 0;
}
