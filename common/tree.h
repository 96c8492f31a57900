/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_COMMON_TREE_H
#define RCM_COMMON_TREE_H

/*
 * OpenBSD's queue(3) and tree(3) macros, from libbsd.  libbsd leaves
 * __unused undefined (it clashes with Linux headers), so static trees are
 * generated through this wrapper instead of RB_GENERATE_STATIC.
 */
#include <bsd/sys/queue.h>
#include <bsd/sys/tree.h>

#define TREE_GENERATE_STATIC(name, type, field, cmp) \
	RB_GENERATE_INTERNAL(name, type, field, cmp, \
			     __attribute__((__unused__)) static)

#endif
