// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* common/hset.c against a plain array of flags that says what it holds. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/hset.h"

#define N 5000

/* The owner's array: each element's key, which the hash is made from. */
struct owner {
	uint32_t key[N];
	uint32_t mask; /* of the hash: 0 puts every element on one home */
};

static uint32_t owner_hash(const void *ctx, uint32_t idx)
{
	const struct owner *o = ctx;

	return (o->key[idx] * 2654435761u) & o->mask;
}

/* The element whose key is key, found as the table finds its own. */
static int find(const struct hset *h, const struct owner *o, uint32_t key)
{
	uint32_t j;

	HSET_PROBE(h, (key * 2654435761u) & o->mask, j) {
		if (o->key[h->cell[j] - 1] == key)
			return (int)(h->cell[j] - 1);
	}
	return -1;
}

/* Every element in is found, every one out is not, and the count agrees. */
static void check(const struct hset *h, const struct owner *o,
		  const uint8_t *in)
{
	uint32_t i, n = 0;

	for (i = 0; i < N; i++) {
		assert_int_equal(find(h, o, o->key[i]), in[i] ? (int)i : -1);
		n += in[i];
	}
	assert_int_equal(h->n, n);
	assert_true(h->cap == 0 || (uint64_t)h->n * 4 <= (uint64_t)h->cap * 3);
}

static void run(uint32_t mask, unsigned steps)
{
	static struct owner o;
	static uint8_t in[N];
	struct hset h = { 0 };
	uint32_t i, idx;
	unsigned s;

	o.mask = mask;
	memset(in, 0, sizeof(in));
	for (i = 0; i < N; i++)
		o.key[i] = i * 7 + 3;
	srand(1);
	for (s = 0; s < steps; s++) {
		idx = (uint32_t)rand() % N;
		if (in[idx]) {
			hset_remove(&h, idx, owner_hash, &o);
			in[idx] = 0;
		} else {
			assert_int_equal(hset_reserve(&h, owner_hash, &o), 0);
			hset_insert(&h, idx, owner_hash, &o);
			in[idx] = 1;
		}
		/* Removing what is not there changes nothing. */
		if (!in[(idx + 1) % N])
			hset_remove(&h, (idx + 1) % N, owner_hash, &o);
		if (s % 97 == 0)
			check(&h, &o, in);
	}
	check(&h, &o, in);
	/* Emptied, it gives its memory back down to its smallest size. */
	for (i = 0; i < N; i++)
		if (in[i]) {
			hset_remove(&h, i, owner_hash, &o);
			in[i] = 0;
		}
	check(&h, &o, in);
	assert_true(h.cap <= 8);
	hset_free(&h);
	assert_null(h.cell);
	assert_int_equal(h.cap, 0);
}

static void test_random_inserts_and_removes(void **state)
{
	(void)state;
	run(0xffffffffu, 60000);
}

/* Long probe runs that wrap around the end of the cells: a removal must
 * shift back exactly the elements whose home lies behind the hole. */
static void test_colliding_keys_wrap_around(void **state)
{
	(void)state;
	run(0x3f, 20000);
}

static void test_every_key_on_one_home(void **state)
{
	(void)state;
	run(0, 3000);
}

/* Large sets are mappings of their own (from 64 KiB of cells): growing
 * through that size and shrinking back keeps every element. */
#define BIG 40000

struct big_owner {
	uint32_t key[BIG];
};

static uint32_t big_hash(const void *ctx, uint32_t idx)
{
	const struct big_owner *o = ctx;

	return o->key[idx] * 2654435761u;
}

static void test_grows_past_a_mapping(void **state)
{
	static struct big_owner o;
	struct hset h = { 0 };
	uint32_t i, j, found;

	(void)state;
	for (i = 0; i < BIG; i++) {
		o.key[i] = i;
		assert_int_equal(hset_reserve(&h, big_hash, &o), 0);
		hset_insert(&h, i, big_hash, &o);
	}
	assert_true((size_t)h.cap * sizeof(uint32_t) >= 64 * 1024);
	for (i = 0; i < BIG; i += 2)
		hset_remove(&h, i, big_hash, &o);
	for (i = 0; i < BIG; i++) {
		found = 0;
		HSET_PROBE(&h, big_hash(&o, i), j) {
			if (h.cell[j] - 1 == i)
				found = 1;
		}
		assert_int_equal(found, i % 2);
	}
	hset_free(&h);
}

static void test_empty_set_probes_nothing(void **state)
{
	struct hset h = { 0 };
	struct owner o = { .mask = 0xffffffffu };
	uint32_t j, n = 0;

	(void)state;
	HSET_PROBE(&h, 12345u, j)
		n++;
	assert_int_equal(n, 0);
	hset_remove(&h, 3, owner_hash, &o);
	assert_int_equal(h.n, 0);
	hset_free(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_inserts_and_removes),
		cmocka_unit_test(test_colliding_keys_wrap_around),
		cmocka_unit_test(test_every_key_on_one_home),
		cmocka_unit_test(test_grows_past_a_mapping),
		cmocka_unit_test(test_empty_set_probes_nothing),
	};

	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("hset", tests, NULL, NULL);
}
