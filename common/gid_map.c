// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "common/gid_map.h"
#include "common/hash.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct gid_map_slot {
	struct gid gid;
	uint32_t tag;
	uint32_t used;
	uint64_t value;
};

#define GID_MAP_MIN_CAP 16u

void gid_map_init(struct gid_map *m, uint64_t seed)
{
	memset(m, 0, sizeof(*m));
	m->seed = seed;
}

void gid_map_fini(struct gid_map *m)
{
	free(m->slots);
	gid_map_init(m, m->seed);
}

static uint32_t gid_map_hash(const struct gid_map *m, uint32_t tag,
			     const struct gid *gid)
{
	uint64_t a, b;

	memcpy(&a, gid->raw, 8);
	memcpy(&b, gid->raw + 8, 8);
	return (uint32_t)hash_mix64(hash_mix64(a ^ m->seed) ^ b ^
				    ((uint64_t)tag << 32));
}

static int gid_map_slot_is(const struct gid_map_slot *s, uint32_t tag,
			   const struct gid *gid)
{
	return s->used && s->tag == tag && gid_equal(&s->gid, gid);
}

static int gid_map_grow(struct gid_map *m)
{
	uint32_t cap = m->slots ? (m->mask + 1) * 2 : GID_MAP_MIN_CAP, i, j;
	struct gid_map_slot *old = m->slots, *slots;
	uint32_t old_cap = m->slots ? m->mask + 1 : 0;

	if (cap == 0) /* 2^32 slots: never, at 32 bytes each */
		return -ENOMEM;
	slots = calloc(cap, sizeof(*slots));
	if (slots == NULL)
		return -ENOMEM;
	m->slots = slots;
	m->mask = cap - 1;
	for (i = 0; i < old_cap; i++) {
		if (!old[i].used)
			continue;
		j = gid_map_hash(m, old[i].tag, &old[i].gid) & m->mask;
		while (slots[j].used)
			j = (j + 1) & m->mask;
		slots[j] = old[i];
	}
	free(old);
	return 0;
}

int gid_map_add(struct gid_map *m, uint32_t tag, const struct gid *gid,
		uint64_t value)
{
	uint32_t i;
	int rc;

	/* At most half full: probes stay short. */
	if (m->slots == NULL || 2 * (m->n + 1) > m->mask + 1) {
		rc = gid_map_grow(m);
		if (rc < 0)
			return rc;
	}
	for (i = gid_map_hash(m, tag, gid) & m->mask; m->slots[i].used;
	     i = (i + 1) & m->mask)
		if (gid_map_slot_is(&m->slots[i], tag, gid))
			return -EEXIST;
	m->slots[i] = (struct gid_map_slot){ *gid, tag, 1, value };
	m->n++;
	return 0;
}

static int gid_map_find(const struct gid_map *m, uint32_t tag,
			const struct gid *gid, uint32_t *at)
{
	uint32_t i;

	if (m->slots == NULL)
		return -ENOENT;
	for (i = gid_map_hash(m, tag, gid) & m->mask; m->slots[i].used;
	     i = (i + 1) & m->mask)
		if (gid_map_slot_is(&m->slots[i], tag, gid)) {
			*at = i;
			return 0;
		}
	return -ENOENT;
}

int gid_map_get(const struct gid_map *m, uint32_t tag, const struct gid *gid,
		uint64_t *value)
{
	uint32_t i;

	if (gid_map_find(m, tag, gid, &i) < 0)
		return -ENOENT;
	*value = m->slots[i].value;
	return 0;
}

int gid_map_del(struct gid_map *m, uint32_t tag, const struct gid *gid)
{
	uint32_t hole, i, home;

	if (gid_map_find(m, tag, gid, &hole) < 0)
		return -ENOENT;
	/* Backward shift: move up each later entry of the run that may
	 * sit in the hole (its home is not cyclically in (hole, i]). */
	for (i = (hole + 1) & m->mask; m->slots[i].used;
	     i = (i + 1) & m->mask) {
		home = gid_map_hash(m, m->slots[i].tag, &m->slots[i].gid) &
		       m->mask;
		if (((i - home) & m->mask) >= ((i - hole) & m->mask)) {
			m->slots[hole] = m->slots[i];
			hole = i;
		}
	}
	m->slots[hole].used = 0;
	m->n--;
	return 0;
}

uint32_t gid_map_max_displacement(const struct gid_map *m)
{
	uint32_t i, home, d, max = 0;

	for (i = 0; m->slots && i <= m->mask; i++) {
		if (!m->slots[i].used)
			continue;
		home = gid_map_hash(m, m->slots[i].tag, &m->slots[i].gid) &
		       m->mask;
		d = (i - home) & m->mask;
		if (d > max)
			max = d;
	}
	return max;
}
