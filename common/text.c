// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "common/text.h"

#include <stdint.h>
#include <stdio.h>

/* The length of the valid UTF-8 sequence at s (at most left bytes) and
 * its code point, or 0 when it is not one (overlong, surrogate, beyond
 * U+10FFFF, cut short). */
static size_t text_utf8_seq(const unsigned char *s, size_t left, uint32_t *cp)
{
	static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
	size_t n, i;
	uint32_t c;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
		c = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		c = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		c = s[0] & 0x07;
	} else {
		return 0;
	}
	if (n > left)
		return 0;
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	if (c < min[n] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return n;
}

/* C0, DEL and C1; and the format characters that change what a reader
 * sees without being seen: the bidirectional embeddings and overrides
 * (U+202A..U+202E) and isolates (U+2066..U+2069), which reorder the rest
 * of a line, and the line and paragraph separators (U+2028, U+2029),
 * which break one. */
static int text_is_control(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) ||
	       (cp >= 0x2028 && cp <= 0x2029) ||
	       (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

int text_is_clean(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, n;
	uint32_t cp;

	while (i < len) {
		n = text_utf8_seq(p + i, len - i, &cp);
		if (n == 0 || text_is_control(cp))
			return 0;
		i += n;
	}
	return 1;
}

size_t text_escape(char *dst, size_t cap, const char *src, size_t len)
{
	const unsigned char *p = (const unsigned char *)src;
	size_t i = 0, o = 0, n, k;
	char esc[8];
	uint32_t cp;

	if (cap == 0)
		return 0;
	while (i < len) {
		n = text_utf8_seq(p + i, len - i, &cp);
		if (n == 0 || text_is_control(cp)) {
			if (n == 0)
				n = 1;
			/* One escape per byte: \x escapes a byte, not a
			 * code point, so that the original is recoverable. */
			for (k = 0; k < n; k++) {
				int w;

				if (p[i + k] == '\n')
					w = snprintf(esc, sizeof(esc), "\\n");
				else if (p[i + k] == '\t')
					w = snprintf(esc, sizeof(esc), "\\t");
				else
					w = snprintf(esc, sizeof(esc),
						     "\\x%02x", p[i + k]);
				if (o + (size_t)w >= cap)
					goto out;
				for (int j = 0; j < w; j++)
					dst[o++] = esc[j];
			}
		} else if (n == 1 && p[i] == '\\') {
			if (o + 2 >= cap)
				goto out;
			dst[o++] = '\\';
			dst[o++] = '\\';
		} else {
			if (o + n >= cap)
				goto out;
			for (k = 0; k < n; k++)
				dst[o++] = (char)p[i + k];
		}
		i += n;
	}
out:
	dst[o] = '\0';
	return o;
}
