/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_COMMON_IBDEV_H
#define RCM_COMMON_IBDEV_H

#include <infiniband/verbs.h>

/* Open an RDMA device by name, or the first one when name is NULL; NULL
 * with errno set (ENODEV when there is no such device). */
struct ibv_context *ibdev_open(const char *name);

#endif
