// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A set of indexes, found by their owner's key function (see hset.h). */
#include "common/hset.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* From this size on, a set's cells are a mapping of their own. */
#define HSET_MAPPED (64u * 1024)

static uint32_t *hset_cells_alloc(uint32_t cap)
{
	size_t bytes = (size_t)cap * sizeof(uint32_t);
	void *p;

	if (bytes < HSET_MAPPED)
		return calloc(cap, sizeof(uint32_t));
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void hset_cells_free(uint32_t *cell, uint32_t cap)
{
	size_t bytes = (size_t)cap * sizeof(uint32_t);

	if (bytes < HSET_MAPPED)
		free(cell);
	else if (cell)
		munmap(cell, bytes);
}

static int hset_resize(struct hset *h, uint32_t cap, hset_key_fn key,
		       const void *ctx)
{
	uint32_t *cell = hset_cells_alloc(cap), i, j;

	if (cell == NULL)
		return -ENOMEM;
	for (i = 0; i < h->cap; i++) {
		if (h->cell[i] == 0)
			continue;
		for (j = key(ctx, h->cell[i] - 1) & (cap - 1); cell[j];
		     j = (j + 1) & (cap - 1))
			;
		cell[j] = h->cell[i];
	}
	hset_cells_free(h->cell, h->cap);
	h->cell = cell;
	h->cap = cap;
	return 0;
}

int hset_reserve(struct hset *h, hset_key_fn key, const void *ctx)
{
	if ((uint64_t)(h->n + 1) * 4 <= (uint64_t)h->cap * 3)
		return 0;
	return hset_resize(h, h->cap ? h->cap * 2 : 8, key, ctx);
}

void hset_insert(struct hset *h, uint32_t idx, hset_key_fn key, const void *ctx)
{
	uint32_t j;

	for (j = key(ctx, idx) & (h->cap - 1); h->cell[j];
	     j = (j + 1) & (h->cap - 1))
		;
	h->cell[j] = idx + 1;
	h->n++;
}

void hset_remove(struct hset *h, uint32_t idx, hset_key_fn key, const void *ctx)
{
	uint32_t mask = h->cap - 1, i, j, k;

	if (h->cap == 0)
		return;
	for (i = key(ctx, idx) & mask; h->cell[i] != idx + 1;
	     i = (i + 1) & mask)
		if (h->cell[i] == 0)
			return;
	for (j = i;;) {
		j = (j + 1) & mask;
		if (h->cell[j] == 0)
			break;
		k = key(ctx, h->cell[j] - 1) & mask;
		/* Stays if its home lies cyclically in (i, j]. */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		h->cell[i] = h->cell[j];
		i = j;
	}
	h->cell[i] = 0;
	h->n--;
	/* Give memory back once mostly empty; a failed shrink keeps the
	 * set as it is, which is still a valid set. */
	if (h->cap > 8 && (uint64_t)h->n * 8 < h->cap)
		hset_resize(h, h->cap / 2, key, ctx);
}

void hset_free(struct hset *h)
{
	hset_cells_free(h->cell, h->cap);
	memset(h, 0, sizeof(*h));
}
