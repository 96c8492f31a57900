// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Policy files: parsing, every error named, matching, prefixes, the
 * token bucket. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "mux/policy.h"

static char path[] = "/tmp/rcm-policy.XXXXXX";

static struct policy *load(const char *text, char *err, size_t errlen)
{
	int fd = mkstemp(path);
	struct policy *p;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	err[0] = '\0';
	p = policy_load(path, err, errlen);
	unlink(path);
	strcpy(path, "/tmp/rcm-policy.XXXXXX");
	return p;
}

static struct gid G(const char *s) {
	struct gid g;

	assert_int_equal(gid_parse(s, &g), 0);
	return g;
}

static void
test_full_policy(void **state)
{
	char err[256];
	struct policy *p = load(
		"{\"policy\": [ {\"match\": {\"uid\": 1000}, \"vm\": \"web1\", \"ports\": [\"rxe0:1\"],  \"gids\": [\"10.0.1.0/24\", \"fd00:1::/64\"], \"max_gids\": 2,  \"max_connections\": 100, \"max_clients\": 3, \"mad_rate\": 50}, {\"match\": {\"uid\": 1000}, \"gids\": [\"10.0.9.9\"], \"share_gids\": true}, {\"match\": {\"gid\": 0}}]}",
		err, sizeof(err));
	const struct policy_rule *r;
	struct gid g;

	(void)state;
	assert_non_null(p);
	assert_int_equal(p->nrules, 3);
	assert_true(policy_admits(p, 1000, 1000));
	assert_true(policy_admits(p, 5, 0)); /* by group */
	assert_false(policy_admits(p, 1001, 1001));
	/* The VM name counts only where a rule binds it. */
	r = policy_select(p, 1000, 1000, "web1");
	assert_ptr_equal(r, &p->rules[0]);
	assert_int_equal(r->mad_burst, 50); /* defaults to the rate */
	assert_int_equal(r->max_clients, 3);
	r = policy_select(p, 1000, 1000, "db7");
	assert_ptr_equal(r, &p->rules[1]);
	assert_null(policy_select(p, 1001, 1001, "web1"));
	r = &p->rules[0];
	assert_true(policy_rule_allows_port(r, "rxe0:1"));
	assert_false(policy_rule_allows_port(r, "rxe1:1"));
	g = G("10.0.1.77");
	assert_true(policy_rule_allows_gid(r, &g));
	g = G("10.0.2.1");
	assert_false(policy_rule_allows_gid(r, &g));
	g = G("fd00:1::5");
	assert_true(policy_rule_allows_gid(r, &g));
	g = G("fd00:2::5");
	assert_false(policy_rule_allows_gid(r, &g));
	g = G("10.0.9.9");
	assert_true(policy_rule_allows_gid(&p->rules[1], &g));
	g = G("10.0.9.8");
	assert_false(policy_rule_allows_gid(&p->rules[1], &g));
	assert_true(policy_rule_allows_port(&p->rules[2], "anything"));
	/* Sharing GIDs is given, never assumed. */
	assert_false(p->rules[0].share_gids);
	assert_true(p->rules[1].share_gids);
	assert_false(p->rules[2].share_gids);
	policy_unref(p);
}

static void test_errors_name_the_problem(void **state)
{
	static const struct {
		const char *text, *want;
	} cases[] = {
		{ "{", "rcm-policy" },
		{ "[]", "needs \"policy\"" },
		{ "{\"policy\": 3}", "needs \"policy\"" },
		{ "{\"policy\": [], \"extra\": 1}", "unknown key \"extra\"" },
		{ "{\"policy\": [3]}", "rule 1 is not an object" },
		{ "{\"policy\": [{}]}", "rule 1: needs \"match\"" },
		{ "{\"policy\": [{\"match\": {}}]}",
		  "match takes one key, \"uid\" or \"gid\"" },
		{ "{\"policy\": [{\"match\": {\"uid\": 1, \"gid\": 1}}]}",
		  "match takes one key" },
		{ "{\"policy\": [{\"match\": {\"uid\": 1, \"gidd\": 1}}]}",
		  "match takes one key" },
		{ "{\"policy\": [{\"match\": {\"user\": 1}}]}",
		  "match takes one key" },
		{ "{\"policy\": [{\"match\": {\"uid\": \"no-such-user-xyz\"}}]}",
		  "match.uid: not a user's name" },
		{ "{\"policy\": [{\"match\": {\"gid\": \"no-such-group-xyz\"}}]}",
		  "match.gid: not a group's name" },
		/* Not cut to 32 bits: 2^32 would match root, 2^32 + 1000 uid
		 * 1000; (uid_t)-1 is nobody's. */
		{ "{\"policy\": [{\"match\": {\"uid\": 4294967296}}]}",
		  "nor a number from 0 to 4294967294" },
		{ "{\"policy\": [{\"match\": {\"gid\": 4294967296000}}]}",
		  "match.gid" },
		{ "{\"policy\": [{\"match\": {\"uid\": 4294967295}}]}",
		  "match.uid" },
		{ "{\"policy\": [{\"match\": {\"uid\": 1}, \"color\": 1}]}",
		  "unknown key \"color\"" },
		{ "{\"policy\": [{\"match\": {\"uid\": 1}, \"gids\": [\"10.0.0.0/33\"]}]}",
		  "not a GID or IP prefix" },
		{ "{\"policy\": [{\"match\": {\"uid\": 1}, \"gids\": [\"nonsense\"]}]}",
		  "not a GID or IP prefix" },
		{ "{\"policy\": [{\"match\": {\"uid\": 1}, \"max_gids\": -1}]}",
		  "whole numbers" },
		{ "{\"policy\": [{\"match\": {\"uid\": 1}, \"vm\": \"\"}]}",
		  "\"vm\" must be" },
		{ "{\"policy\": [{\"match\": {\"uid\": 1}}, {\"match\": {\"uid\": 2}, \"ports\": 5}]}",
		  "rule 2: \"ports\"" },
		{ "{\"policy\": [{\"match\": {\"uid\": 1}, \"share_gids\": 1}]}",
		  "\"share_gids\" must be true or false" },
	};
	char err[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_null(load(cases[i].text, err, sizeof(err)));
		if (strstr(err, cases[i].want) == NULL)
			fail_msg("case %zu: \"%s\" does not say \"%s\"", i, err,
				 cases[i].want);
	}
}

static void test_default_policy(void **state)
{
	struct policy *p = policy_default(1234);

	(void)state;
	assert_true(policy_admits(p, 1234, 99));
	assert_true(policy_admits(p, 0, 0));
	assert_false(policy_admits(p, 1235, 1235));
	assert_non_null(policy_select(p, 1234, 99, "anything"));
	/* The host's own processes share its addresses. */
	assert_true(policy_select(p, 1234, 99, "anything")->share_gids);
	policy_unref(p);
	p = policy_default(0);
	assert_int_equal(p->nrules, 1);
	assert_false(policy_admits(p, 1000, 1000));
	policy_unref(p);
}

static void test_prefixes(void **state)
{
	struct gid_prefix pf;

	(void)state;
	assert_int_equal(policy_gid_prefix_parse("10.0.0.0/8", &pf), 0);
	assert_int_equal(pf.len, 104);
	assert_int_equal(policy_gid_prefix_parse("fe80::/10", &pf), 0);
	assert_int_equal(pf.len, 10);
	assert_int_equal(policy_gid_prefix_parse("fd00::1", &pf), 0);
	assert_int_equal(pf.len, 128);
	assert_int_equal(policy_gid_prefix_parse("fd00::/129", &pf), -EINVAL);
	assert_int_equal(policy_gid_prefix_parse("10.0.0.0/", &pf), -EINVAL);
	assert_int_equal(policy_gid_prefix_parse(NULL, &pf), -EINVAL);
}

static void test_token_bucket(void **state)
{
	struct token_bucket tb;
	int i, n = 0;

	(void)state;
	policy_token_bucket_init(&tb, 100, 10, 0);
	for (i = 0; i < 50; i++)
		n += policy_token_bucket_take(&tb, 0);
	assert_int_equal(n, 10);                        /* the burst */
	assert_false(policy_token_bucket_take(&tb, 5)); /* half a token */
	assert_true(
		policy_token_bucket_take(&tb, 10)); /* one more after 10 ms */
	for (n = 0, i = 0; i < 1000; i++)
		n += policy_token_bucket_take(
			&tb, 10 + (uint64_t)i); /* 1 s at 1/ms */
	assert_true(n >= 99 && n <= 101);
	policy_token_bucket_init(&tb, 0, 0, 0);
	for (i = 0; i < 1000; i++)
		assert_true(policy_token_bucket_take(&tb, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_policy),
		cmocka_unit_test(test_errors_name_the_problem),
		cmocka_unit_test(test_default_policy),
		cmocka_unit_test(test_prefixes),
		cmocka_unit_test(test_token_bucket),
	};

	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
