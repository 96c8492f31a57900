// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "common/gid.h"

#include <arpa/inet.h>
#include <errno.h>

int gid_parse(const char *text, struct gid *out)
{
	struct in_addr v4;

	if (text == NULL)
		return -EINVAL;
	if (inet_pton(AF_INET6, text, out->raw) == 1)
		return 0;
	if (inet_pton(AF_INET, text, &v4) == 1) {
		memset(out->raw, 0, 10);
		out->raw[10] = 0xff;
		out->raw[11] = 0xff;
		memcpy(out->raw + 12, &v4, 4);
		return 0;
	}
	return -EINVAL;
}

const char *gid_format(const struct gid *gid, char *buf)
{
	if (inet_ntop(AF_INET6, gid->raw, buf, GID_STRLEN) == NULL)
		buf[0] = '\0';
	return buf;
}
