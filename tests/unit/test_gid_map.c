// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* common/gid_map.c against a plain array that says what it must hold. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/gid_map.h"

static struct gid gid_n(uint32_t n)
{
	struct gid g = { { 0xfd, 0x00 } };

	g.raw[12] = (uint8_t)(n >> 24);
	g.raw[13] = (uint8_t)(n >> 16);
	g.raw[14] = (uint8_t)(n >> 8);
	g.raw[15] = (uint8_t)n;
	return g;
}

static void test_add_get_del(void **state)
{
	struct gid_map m;
	struct gid a = gid_n(1), b = gid_n(2);
	uint64_t v = 0;

	(void)state;
	gid_map_init(&m, 42);
	assert_int_equal(gid_map_get(&m, 0, &a, &v), -ENOENT);
	assert_int_equal(gid_map_del(&m, 0, &a), -ENOENT);
	assert_int_equal(gid_map_add(&m, 0, &a, 7), 0);
	assert_int_equal(gid_map_add(&m, 0, &a, 8), -EEXIST);
	/* The tag is part of the key: the same GID on another port. */
	assert_int_equal(gid_map_add(&m, 1, &a, 9), 0);
	assert_int_equal(gid_map_get(&m, 0, &a, &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(gid_map_get(&m, 1, &a, &v), 0);
	assert_int_equal(v, 9);
	assert_int_equal(gid_map_get(&m, 0, &b, &v), -ENOENT);
	assert_int_equal(gid_map_del(&m, 0, &a), 0);
	assert_int_equal(gid_map_get(&m, 0, &a, &v), -ENOENT);
	assert_int_equal(gid_map_get(&m, 1, &a, &v), 0);
	assert_int_equal(m.n, 1);
	gid_map_fini(&m);
}

/* Random adds and deletes against a model, through growth and long
 * probe runs: every key the model holds is found with its value, none
 * it does not hold is.  A wrong backward shift loses keys here. */
static void test_against_model(void **state)
{
	enum { KEYS = 3000, OPS = 200000 };
	static uint64_t model[KEYS]; /* 0: absent, else value */
	struct gid_map m;
	uint64_t v, seed = 0x1234567;
	unsigned i, k, held = 0;
	struct gid g;

	(void)state;
	memset(model, 0, sizeof(model));
	gid_map_init(&m, 7);
	for (i = 0; i < OPS; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		k = (unsigned)(seed >> 33) % KEYS;
		g = gid_n(k * 2654435761u);
		if (model[k] == 0) {
			assert_int_equal(gid_map_add(&m, k % 3, &g, i + 1), 0);
			model[k] = i + 1;
			held++;
		} else if (seed & (1ull << 20)) {
			assert_int_equal(gid_map_del(&m, k % 3, &g), 0);
			model[k] = 0;
			held--;
		}
		if (i % 9973 == 0)
			for (k = 0; k < KEYS; k++) {
				g = gid_n(k * 2654435761u);
				if (model[k]) {
					assert_int_equal(gid_map_get(&m, k % 3,
								     &g, &v),
							 0);
					assert_int_equal(v, model[k]);
				} else {
					assert_int_equal(gid_map_get(&m, k % 3,
								     &g, &v),
							 -ENOENT);
				}
			}
	}
	assert_int_equal(m.n, held);
	/* At most half full. */
	assert_true(2 * m.n <= m.mask + 1);
	gid_map_fini(&m);
}

/* gid_cmp() orders as memcmp() does, gid_equal() agrees with it. */
static void test_gid_cmp_is_memcmp_order(void **state)
{
	uint64_t seed = 99;
	struct gid a, b;
	int i, j, want, got;

	(void)state;
	for (i = 0; i < 100000; i++) {
		for (j = 0; j < 16; j++) {
			seed = seed * 6364136223846793005ull + 1;
			a.raw[j] = (uint8_t)(seed >> 56);
			/* Equal prefixes of every length happen often. */
			b.raw[j] = (seed >> 8) % 4 ? a.raw[j]
						   : (uint8_t)(seed >> 40);
		}
		want = memcmp(a.raw, b.raw, 16);
		got = gid_cmp(&a, &b);
		assert_true((want < 0 && got < 0) || (want > 0 && got > 0) ||
			    (want == 0 && got == 0));
		assert_int_equal(gid_equal(&a, &b), want == 0);
	}
}

/* The GIDs of one port differ in a few bytes: in the last ones (a sim
 * port's fd00::1*4096), in the middle (IPv4-mapped RoCE addresses), or
 * in the subnet prefix.  However they differ, no lookup probes far (a
 * hash that leaves bits unmixed makes runs of thousands here). */
static void test_spread_of_port_like_gids(void **state)
{
	struct gid_map m;
	struct gid g;
	uint32_t i, kind;

	(void)state;
	for (kind = 0; kind < 3; kind++) {
		gid_map_init(&m, kind);
		for (i = 0; i < 4096; i++) {
			memset(&g, 0, sizeof(g));
			g.raw[0] = 0xfd;
			if (kind == 0) { /* fd00::1 + i */
				g.raw[14] = (uint8_t)((i + 1) >> 8);
				g.raw[15] = (uint8_t)(i + 1);
			} else if (kind == 1) { /* ::ffff:10.0.x.y */
				g.raw[0] = 0;
				g.raw[10] = g.raw[11] = 0xff;
				g.raw[12] = 10;
				g.raw[14] = (uint8_t)(i >> 8);
				g.raw[15] = (uint8_t)i;
			} else { /* fd00:0:0:i::1 */
				g.raw[6] = (uint8_t)(i >> 8);
				g.raw[7] = (uint8_t)i;
				g.raw[15] = 1;
			}
			assert_int_equal(gid_map_add(&m, i % 2, &g, i), 0);
		}
		assert_true(gid_map_max_displacement(&m) < 48);
		gid_map_fini(&m);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gid_cmp_is_memcmp_order),
		cmocka_unit_test(test_add_get_del),
		cmocka_unit_test(test_against_model),
		cmocka_unit_test(test_spread_of_port_like_gids),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
