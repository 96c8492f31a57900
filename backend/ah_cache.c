// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "backend/ah_cache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct ah_entry {
	RB_ENTRY(ah_entry) link;
	struct ibv_pd *pd;
	uint8_t sgid_index;
	uint8_t dgid[16];
	struct ibv_ah *ah;
};

static int ah_cache_entry_cmp(struct ah_entry *a, struct ah_entry *b)
{
	if (a->pd != b->pd)
		return (uintptr_t)a->pd < (uintptr_t)b->pd ? -1 : 1;
	if (a->sgid_index != b->sgid_index)
		return a->sgid_index < b->sgid_index ? -1 : 1;
	return memcmp(a->dgid, b->dgid, sizeof(a->dgid));
}

TREE_GENERATE_STATIC(ah_tree, ah_entry, link, ah_cache_entry_cmp)

void ah_cache_init(struct ah_cache *c, unsigned max)
{
	memset(c, 0, sizeof(*c));
	RB_INIT(&c->tree);
	c->max = max;
}

struct ibv_ah *ah_cache_get(struct ah_cache *c, struct ibv_pd *pd, uint8_t port,
			    uint8_t sgid_index, const uint8_t dgid[16],
			    uint8_t hop_limit)
{
	struct ah_entry probe = { .pd = pd, .sgid_index = sgid_index }, *e;
	struct ibv_ah_attr attr = {
		.is_global = 1,
		.port_num = port,
		.grh = { .sgid_index = sgid_index, .hop_limit = hop_limit },
	};

	memcpy(probe.dgid, dgid, 16);
	e = RB_FIND(ah_tree, &c->tree, &probe);
	if (e) {
		c->hits++;
		return e->ah;
	}
	c->misses++;
	if (c->size >= c->max) {
		errno = ENOSPC;
		return NULL;
	}
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return NULL;
	memcpy(attr.grh.dgid.raw, dgid, 16);
	e->ah = ibv_create_ah(pd, &attr);
	if (e->ah == NULL) {
		free(e);
		return NULL;
	}
	*e = (struct ah_entry){ .pd = pd,
				.sgid_index = sgid_index,
				.ah = e->ah };
	memcpy(e->dgid, dgid, 16);
	RB_INSERT(ah_tree, &c->tree, e);
	c->size++;
	return e->ah;
}

void ah_cache_flush(struct ah_cache *c, struct ibv_pd *pd)
{
	struct ah_entry *e, *next;

	RB_FOREACH_SAFE(e, ah_tree, &c->tree, next) {
		if (pd && e->pd != pd)
			continue;
		RB_REMOVE(ah_tree, &c->tree, e);
		ibv_destroy_ah(e->ah);
		free(e);
		c->size--;
	}
}
