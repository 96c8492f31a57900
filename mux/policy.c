// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "mux/policy.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/json_file.h"

#define POLICY_MAX_RULES 1024

static struct policy *policy_alloc(int nrules, const char *source)
{
	struct policy *p = calloc(1, sizeof(*p) + (size_t)nrules *
							  sizeof(p->rules[0]));

	if (p == NULL)
		return NULL;
	atomic_store(&p->refs, 1);
	p->nrules = nrules;
	snprintf(p->source, sizeof(p->source), "%s", source);
	return p;
}

struct policy *policy_default(uid_t daemon_uid)
{
	struct policy *p = policy_alloc(daemon_uid == 0 ? 1 : 2, "default");
	int i;

	if (p == NULL)
		return NULL;
	for (i = 0; i < p->nrules; i++) {
		p->rules[i].has_uid = 1;
		p->rules[i].uid = i == 0 ? daemon_uid : 0;
		p->rules[i].request_rate = POLICY_REQUEST_RATE;
		p->rules[i].request_burst = POLICY_REQUEST_RATE;
		p->rules[i].share_gids = 1;
	}
	return p;
}

struct policy *policy_ref(struct policy *p)
{
	atomic_fetch_add(&p->refs, 1);
	return p;
}

void policy_unref(struct policy *p)
{
	if (p && atomic_fetch_sub(&p->refs, 1) == 1)
		free(p);
}

int policy_gid_prefix_parse(const char *text, struct gid_prefix *out)
{
	char buf[64], *slash;
	long len;
	char *end;
	int v4;

	if (text == NULL || strlen(text) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, text);
	slash = strchr(buf, '/');
	if (slash)
		*slash = '\0';
	v4 = strchr(buf, ':') == NULL;
	if (gid_parse(buf, &out->gid))
		return -EINVAL;
	if (slash == NULL) {
		out->len = 128;
		return 0;
	}
	errno = 0;
	len = strtol(slash + 1, &end, 10);
	if (errno || *end || slash[1] == '\0' || len < 0 ||
	    len > (v4 ? 32 : 128))
		return -EINVAL;
	/* An IPv4 prefix covers the IPv4-mapped GIDs (::ffff:0:0/96). */
	out->len = (unsigned)(v4 ? 96 + len : len);
	return 0;
}

static int policy_prefix_match(const struct gid_prefix *p, const struct gid *g)
{
	unsigned full = p->len / 8, rest = p->len % 8;

	if (memcmp(p->gid.raw, g->raw, full) != 0)
		return 0;
	if (rest == 0)
		return 1;
	return ((p->gid.raw[full] ^ g->raw[full]) & (0xff << (8 - rest))) == 0;
}

/* A user or group by name, or by number: 0 to 2^32 - 2, as uid_t holds
 * them ((uid_t)-1 means none), not cut to 32 bits (2^32 would be root). */
static int policy_id_from_json(json_t *v, int is_group, unsigned *out)
{
	if (json_is_integer(v) && json_integer_value(v) >= 0 &&
	    json_integer_value(v) < (json_int_t)UINT32_MAX) {
		*out = (unsigned)json_integer_value(v);
		return 0;
	}
	if (json_is_string(v)) {
		if (is_group) {
			struct group *g = getgrnam(json_string_value(v));

			if (g) {
				*out = g->gr_gid;
				return 0;
			}
		} else {
			struct passwd *pw = getpwnam(json_string_value(v));

			if (pw) {
				*out = pw->pw_uid;
				return 0;
			}
		}
	}
	return -EINVAL;
}

static int policy_uint_field(json_t *rule, const char *key, unsigned *out)
{
	json_t *v = json_object_get(rule, key);

	if (v == NULL)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > 1000000000)
		return -EINVAL;
	*out = (unsigned)json_integer_value(v);
	return 0;
}

#define BAD(...)                                    \
	do {                                        \
		snprintf(err, errlen, __VA_ARGS__); \
		goto fail;                          \
	} while (0)

static const char *const rule_keys[] = {
	"match",
	"vm",
	"ports",
	"gids",
	"max_gids",
	"max_connections",
	"max_clients",
	"mad_rate",
	"mad_burst",
	"request_rate",
	"request_burst",
	"share_gids",
	NULL,
};

/* A rule's errors: said in err, -EINVAL. */
#define RULE_BAD(...)                               \
	do {                                        \
		snprintf(err, errlen, __VA_ARGS__); \
		return -EINVAL;                     \
	} while (0)

/* A rule's keys are all known ones. */
static int policy_rule_keys(json_t *rule, const char *path, size_t i, char *err,
			    size_t errlen)
{
	const char *key;
	json_t *v;
	int k, known;

	json_object_foreach(rule, key, v) {
		known = 0;
		for (k = 0; rule_keys[k]; k++)
			known |= strcmp(rule_keys[k], key) == 0;
		if (!known)
			RULE_BAD("%s: rule %zu: unknown key \"%s\"", path,
				 i + 1, key);
	}
	return 0;
}

/* Whom the rule is for: its "match" of one uid or one gid. */
static int policy_rule_match(json_t *rule, struct policy_rule *r,
			     const char *path, size_t i, char *err,
			     size_t errlen)
{
	json_t *v, *match = json_object_get(rule, "match");
	unsigned id;

	if (!json_is_object(match))
		RULE_BAD(
			"%s: rule %zu: needs \"match\": {\"uid\": ...} or {\"gid\": ...}",
			path, i + 1);
	/* One of the two: both would read as "this user in that group" and
	 * match either. */
	if (json_object_size(match) != 1 ||
	    (json_object_get(match, "uid") == NULL &&
	     json_object_get(match, "gid") == NULL))
		RULE_BAD(
			"%s: rule %zu: match takes one key, \"uid\" or \"gid\"",
			path, i + 1);
	if ((v = json_object_get(match, "uid")) != NULL) {
		if (policy_id_from_json(v, 0, &id))
			RULE_BAD(
				"%s: rule %zu: match.uid: not a user's name, nor a number from 0 to 4294967294",
				path, i + 1);
		r->has_uid = 1;
		r->uid = (uid_t)id;
	}
	if ((v = json_object_get(match, "gid")) != NULL) {
		if (policy_id_from_json(v, 1, &id))
			RULE_BAD(
				"%s: rule %zu: match.gid: not a group's name, nor a number from 0 to 4294967294",
				path, i + 1);
		r->has_gid = 1;
		r->gid = (gid_t)id;
	}
	return 0;
}

/* What the rule allows: its VM name, ports and GID prefixes. */
static int policy_rule_scope(json_t *rule, struct policy_rule *r,
			     const char *path, size_t i, char *err,
			     size_t errlen)
{
	json_t *v, *e;
	size_t j;

	if ((v = json_object_get(rule, "vm")) != NULL) {
		if (!json_is_string(v) || json_string_length(v) == 0 ||
		    json_string_length(v) >= sizeof(r->vm))
			RULE_BAD(
				"%s: rule %zu: \"vm\" must be a name of 1-63 characters",
				path, i + 1);
		strcpy(r->vm, json_string_value(v));
	}
	if ((v = json_object_get(rule, "ports")) != NULL) {
		if (!json_is_array(v) || json_array_size(v) > 16)
			RULE_BAD(
				"%s: rule %zu: \"ports\" must be a list of at most 16 names",
				path, i + 1);
		json_array_foreach(v, j, e) {
			if (!json_is_string(e) || json_string_length(e) >= 64)
				RULE_BAD("%s: rule %zu: bad port name", path,
					 i + 1);
			strcpy(r->ports[r->nports++], json_string_value(e));
		}
	}
	if ((v = json_object_get(rule, "gids")) != NULL) {
		if (!json_is_array(v) || json_array_size(v) > 32)
			RULE_BAD(
				"%s: rule %zu: \"gids\" must be a list of at most 32 prefixes",
				path, i + 1);
		json_array_foreach(v, j, e) {
			if (policy_gid_prefix_parse(json_string_value(e),
						    &r->prefixes
							     [r->nprefixes++]))
				RULE_BAD(
					"%s: rule %zu: \"%s\" is not a GID or IP prefix",
					path, i + 1,
					json_string_value(e) ?: "?");
		}
	}
	return 0;
}

/* Rule i of the file: 0, or -EINVAL with err. */
static int policy_rule_from_json(json_t *rule, struct policy_rule *r,
				 const char *path, size_t i, char *err,
				 size_t errlen)
{
	json_t *v;

	if (!json_is_object(rule))
		RULE_BAD("%s: rule %zu is not an object", path, i + 1);
	if (policy_rule_keys(rule, path, i, err, errlen) ||
	    policy_rule_match(rule, r, path, i, err, errlen) ||
	    policy_rule_scope(rule, r, path, i, err, errlen))
		return -EINVAL;
	r->request_rate = POLICY_REQUEST_RATE;
	if (policy_uint_field(rule, "max_gids", &r->max_gids) ||
	    policy_uint_field(rule, "max_connections", &r->max_connections) ||
	    policy_uint_field(rule, "max_clients", &r->max_clients) ||
	    policy_uint_field(rule, "mad_rate", &r->mad_rate) ||
	    policy_uint_field(rule, "mad_burst", &r->mad_burst) ||
	    policy_uint_field(rule, "request_rate", &r->request_rate) ||
	    policy_uint_field(rule, "request_burst", &r->request_burst))
		RULE_BAD("%s: rule %zu: limits must be whole numbers", path,
			 i + 1);
	if ((v = json_object_get(rule, "share_gids")) != NULL) {
		if (!json_is_boolean(v))
			RULE_BAD(
				"%s: rule %zu: \"share_gids\" must be true or false",
				path, i + 1);
		r->share_gids = json_is_true(v);
	}
	if (r->mad_rate && r->mad_burst == 0)
		r->mad_burst = r->mad_rate;
	if (r->request_rate && r->request_burst == 0)
		r->request_burst = r->request_rate;
	return 0;
}

/* A policy from its JSON (taken over); path names it in messages. */
static struct policy *policy_from_json(json_t *root, const char *path,
				       char *err, size_t errlen)
{
	struct policy *p = NULL;
	json_t *rules, *rule, *v;
	const char *key;
	size_t i;

	rules = json_object_get(root, "policy");
	if (!json_is_array(rules))
		BAD("%s: needs \"policy\": [ rules ]", path);
	if (json_array_size(rules) > POLICY_MAX_RULES)
		BAD("%s: more than %d rules", path, POLICY_MAX_RULES);
	json_object_foreach(root, key, v)
		if (strcmp(key, "policy") != 0)
			BAD("%s: unknown key \"%s\"", path, key);
	p = policy_alloc((int)json_array_size(rules), path);
	if (p == NULL)
		BAD("%s: out of memory", path);
	json_array_foreach(rules, i, rule) {
		if (policy_rule_from_json(rule, &p->rules[i], path, i, err,
					  errlen))
			goto fail;
	}
	json_decref(root);
	return p;
fail:
	json_decref(root);
	policy_unref(p);
	return NULL;
}

struct policy *policy_load(const char *path, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *root;

	root = json_file_load(path, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL && jerr.line <= 0) {
		snprintf(err, errlen, "%s: %s", path, jerr.text);
		return NULL;
	}
	if (root == NULL) {
		snprintf(err, errlen, "%s:%d:%d: %s", path, jerr.line,
			 jerr.column, jerr.text);
		return NULL;
	}
	return policy_from_json(root, path, err, errlen);
}

struct policy *policy_parse(const char *text, size_t len, const char *source,
			    char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *root;

	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL) {
		snprintf(err, errlen, "%s:%d:%d: %s", source, jerr.line,
			 jerr.column, jerr.text);
		return NULL;
	}
	return policy_from_json(root, source, err, errlen);
}

static int policy_rule_matches(const struct policy_rule *r, uid_t uid,
			       gid_t gid)
{
	return (r->has_uid && r->uid == uid) || (r->has_gid && r->gid == gid);
}

int policy_admits(const struct policy *p, uid_t uid, gid_t gid)
{
	int i;

	for (i = 0; i < p->nrules; i++)
		if (policy_rule_matches(&p->rules[i], uid, gid))
			return 1;
	return 0;
}

const struct policy_rule *policy_select(const struct policy *p, uid_t uid,
					gid_t gid, const char *vm)
{
	int i;

	for (i = 0; i < p->nrules; i++) {
		const struct policy_rule *r = &p->rules[i];

		if (!policy_rule_matches(r, uid, gid))
			continue;
		if (r->vm[0] && (vm == NULL || strcmp(r->vm, vm) != 0))
			continue;
		return r;
	}
	return NULL;
}

int policy_rule_allows_port(const struct policy_rule *r, const char *port)
{
	int i;

	if (r->nports == 0)
		return 1;
	for (i = 0; i < r->nports; i++)
		if (strcmp(r->ports[i], port) == 0)
			return 1;
	return 0;
}

int policy_rule_allows_gid(const struct policy_rule *r, const struct gid *gid)
{
	int i;

	if (r->nprefixes == 0)
		return 1;
	for (i = 0; i < r->nprefixes; i++)
		if (policy_prefix_match(&r->prefixes[i], gid))
			return 1;
	return 0;
}

void policy_token_bucket_init(struct token_bucket *tb, unsigned rate,
			      unsigned burst, uint64_t now_ms)
{
	tb->rate = rate;
	tb->burst = burst ? burst : rate;
	tb->tokens = tb->burst;
	tb->last_ms = now_ms;
}

int policy_token_bucket_take(struct token_bucket *tb, uint64_t now_ms)
{
	if (tb->rate == 0)
		return 1;
	if (now_ms > tb->last_ms) {
		tb->tokens += (double)(now_ms - tb->last_ms) * tb->rate /
			      1000.0;
		if (tb->tokens > tb->burst)
			tb->tokens = tb->burst;
		tb->last_ms = now_ms;
	}
	if (tb->tokens < 1.0)
		return 0;
	tb->tokens -= 1.0;
	return 1;
}

unsigned policy_token_bucket_charge(struct token_bucket *tb, uint64_t now_ms)
{
	if (policy_token_bucket_take(tb, now_ms))
		return 0;
	tb->tokens -= 1.0; /* below 0: what is owed */
	return (unsigned)((1.0 - tb->tokens) * 1000.0 / tb->rate) + 1;
}
