// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "common/ibdev.h"

#include <errno.h>
#include <string.h>

struct ibv_context *ibdev_open(const char *name)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	int i, n;

	errno = 0;
	list = ibv_get_device_list(&n);
	if (list == NULL)
		return NULL;
	for (i = 0; i < n && ctx == NULL; i++)
		if (name == NULL ||
		    strcmp(ibv_get_device_name(list[i]), name) == 0)
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (ctx == NULL && errno == 0)
		errno = ENODEV;
	return ctx;
}
