/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_COMMON_HASH_H
#define RCM_COMMON_HASH_H

#include <stdint.h>
#include <string.h>

/* splitmix64's finaliser: every input bit reaches every output bit, the
 * low ones that index a power-of-two table included. */
static inline uint64_t hash_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* A GID's 16 bytes under a key: every bit of both reaches the result, and
 * who does not know the key cannot pick GIDs that collide. */
static inline uint64_t hash_gid(const uint8_t raw[16], uint64_t key)
{
	uint64_t a, b;

	memcpy(&a, raw, 8);
	memcpy(&b, raw + 8, 8);
	return hash_mix64(a ^ key) ^ hash_mix64(b + key);
}

#endif
