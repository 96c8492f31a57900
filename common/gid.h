/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_COMMON_GID_H
#define RCM_COMMON_GID_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

/* A full 128-bit GID, subnet prefix included, in network byte order. */
struct gid {
	uint8_t raw[16];
};

/* Longest text form: an IPv6 address (INET6_ADDRSTRLEN). */
#define GID_STRLEN 46

/* Accepts IPv6 text ("fe80::1") and IPv4 dotted quads, which become the
 * IPv4-mapped GID RoCE uses (::ffff:a.b.c.d).  Returns 0 or -EINVAL. */
int gid_parse(const char *text, struct gid *out);
/* Writes the IPv6 text form into buf (at least GID_STRLEN bytes). */
const char *gid_format(const struct gid *gid, char *buf);

/* memcmp()'s order, in two 64-bit comparisons the compiler inlines (a
 * libc call per comparison showed in profiles of lookups by GID). */
static inline int gid_cmp(const struct gid *a, const struct gid *b)
{
	uint64_t x, y;
	int i;

	for (i = 0; i < 16; i += 8) {
		memcpy(&x, a->raw + i, 8);
		memcpy(&y, b->raw + i, 8);
		if (x != y)
			return be64toh(x) < be64toh(y) ? -1 : 1;
	}
	return 0;
}

static inline int gid_equal(const struct gid *a, const struct gid *b)
{
	uint64_t a0, a1, b0, b1;

	memcpy(&a0, a->raw, 8);
	memcpy(&a1, a->raw + 8, 8);
	memcpy(&b0, b->raw, 8);
	memcpy(&b1, b->raw + 8, 8);
	return ((a0 ^ b0) | (a1 ^ b1)) == 0;
}

static inline int gid_is_zero(const struct gid *g)
{
	static const struct gid zero;

	return gid_cmp(g, &zero) == 0;
}

/* ff00::/8: a group, never a port's own address. */
static inline int gid_is_multicast(const struct gid *g)
{
	return g->raw[0] == 0xff;
}

#endif
