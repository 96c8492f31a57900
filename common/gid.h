/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_COMMON_GID_H
#define RCM_COMMON_GID_H

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

static inline int gid_cmp(const struct gid *a, const struct gid *b)
{
	return memcmp(a->raw, b->raw, sizeof(a->raw));
}

static inline int gid_is_zero(const struct gid *g)
{
	static const struct gid zero;

	return gid_cmp(g, &zero) == 0;
}

#endif
