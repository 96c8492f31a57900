/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_GID_MAP_H
#define RCM_GID_MAP_H

/*
 * A hash map from (tag, GID) to a 64-bit value: open addressing with
 * linear probing, keys stored in the slots (a lookup reads one or two
 * cache lines, where a search tree of thousands of GIDs reads a dozen),
 * deletion by backward shift (no tombstones).  Keyed with a seed, so
 * that GIDs chosen to collide cannot be chosen without it.  Not locked:
 * its owner's lock covers it.
 */
#include <stdint.h>

#include "common/gid.h"

struct gid_map_slot;

struct gid_map {
	struct gid_map_slot *slots;
	uint32_t mask; /* capacity - 1; capacity 0: no slots yet */
	uint32_t n;
	uint64_t seed;
};

void gid_map_init(struct gid_map *m, uint64_t seed);
void gid_map_fini(struct gid_map *m);
/* Add a key: 0, -EEXIST (value unchanged) or -ENOMEM. */
int gid_map_add(struct gid_map *m, uint32_t tag, const struct gid *gid,
		uint64_t value);
/* 0 and *value, or -ENOENT. */
int gid_map_get(const struct gid_map *m, uint32_t tag, const struct gid *gid,
		uint64_t *value);
/* 0, or -ENOENT. */
int gid_map_del(struct gid_map *m, uint32_t tag, const struct gid *gid);
/* How far the farthest key sits from its hash's slot: what the longest
 * lookup probes (for tests of the hash's spread). */
uint32_t gid_map_max_displacement(const struct gid_map *m);

#endif
