/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_AH_CACHE_H
#define RCM_AH_CACHE_H

/*
 * Address handles for UD sends, cached per (PD, source GID index,
 * destination GID): creating one is a device command, and a UD QP sends
 * to the same few peers over and over.  Bounded; not thread-safe (the
 * device serialises access).
 */
#include <stdint.h>

#include <infiniband/verbs.h>

#include "common/tree.h"

struct ah_entry;
RB_HEAD(ah_tree, ah_entry);

struct ah_cache {
	struct ah_tree tree;
	unsigned size;
	unsigned max;
	uint64_t hits, misses;
};

void ah_cache_init(struct ah_cache *c, unsigned max);
/* The cached AH, or a new one; NULL with errno set (ENOSPC when full). */
struct ibv_ah *ah_cache_get(struct ah_cache *c, struct ibv_pd *pd, uint8_t port,
			    uint8_t sgid_index, const uint8_t dgid[16],
			    uint8_t hop_limit);
/* Destroy every AH of a PD (before the PD goes), or all when pd is NULL. */
void ah_cache_flush(struct ah_cache *c, struct ibv_pd *pd);

#endif
