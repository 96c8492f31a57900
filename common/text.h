/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_COMMON_TEXT_H
#define RCM_COMMON_TEXT_H

#include <stddef.h>

/*
 * Text from outside (a VM's name, a string in a request, a status
 * document) on its way to a log line or a terminal.  Control characters
 * are what forge a line or drive a terminal: C0 (including newline and
 * escape), DEL, C1 (U+0080..U+009F, which some terminals obey as CSI and
 * friends), the bidirectional embeddings, overrides and isolates
 * (U+202A..U+202E, U+2066..U+2069) and the line and paragraph separators
 * (U+2028, U+2029).  Everything else, UTF-8 included, is left alone.
 */

/* 1 when s (len bytes) is valid UTF-8 without control characters. */
int text_is_clean(const char *s, size_t len);

/* src with every control character (and every byte that is not part of
 * valid UTF-8) written as \n, \t, \\ or \xNN, NUL-terminated and cut to
 * fit cap bytes.  Returns the length written. */
size_t text_escape(char *dst, size_t cap, const char *src, size_t len);

#endif
