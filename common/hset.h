/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_HSET_H
#define RCM_HSET_H

/*
 * A set of indexes into an array its owner keeps (index + 1 in a cell,
 * 0: empty): open addressing, linear probing, deletion by backward shift
 * (no tombstones), at most 3/4 full.  The set stores no keys: the owner's
 * key function derives each element's hash from its index, so one array
 * of elements can be found by several keys through several sets.  Large
 * sets are mappings of their own, so that the arrays a growing set leaves
 * go back to the system.  Not locked: its owner's lock covers it.
 */
#include <stdint.h>

struct hset {
	uint32_t *cell;
	uint32_t cap; /* 0 or a power of 2 */
	uint32_t n;
};

/* The hash of the element at idx, in the owner's array ctx. */
typedef uint32_t (*hset_key_fn)(const void *ctx, uint32_t idx);

/* Room for one more element: 0 or -ENOMEM. */
int hset_reserve(struct hset *h, hset_key_fn key, const void *ctx);
/* Adds idx, after hset_reserve(); idx must not be in the set. */
void hset_insert(struct hset *h, uint32_t idx, hset_key_fn key,
		 const void *ctx);
/* Takes idx out (nothing when it is not in); shrinks a mostly empty set. */
void hset_remove(struct hset *h, uint32_t idx, hset_key_fn key,
		 const void *ctx);
void hset_free(struct hset *h);

/* The cells from a hash's home on, up to the first empty one:
 *   HSET_PROBE(h, hash, j) { idx = h->cell[j] - 1; ... } */
#define HSET_PROBE(h, home, j)                             \
	for ((j) = (h)->cap ? (home) & ((h)->cap - 1) : 0; \
	     (h)->cap && (h)->cell[(j)]; (j) = ((j) + 1) & ((h)->cap - 1))

#endif
