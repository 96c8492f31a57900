/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_POLICY_H
#define RCM_POLICY_H

/*
 * Who may use the daemon, and for what.  A policy is an ordered list of
 * rules read from a JSON file (rdmacm-muxd(8), POLICY); a client's
 * identity comes from SO_PEERCRED, never from what it says.  A peer is
 * let in when some rule matches its uid or gid; at hello, the first rule
 * that matches its identity and (when the rule names one) the VM name it
 * gives decides its ports, GIDs, limits and MAD rate.
 *
 * Policies are immutable once loaded and shared by reference: a reload
 * makes a new one, and sessions keep the one they started with.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/gid.h"

struct gid_prefix {
	struct gid gid;
	unsigned len; /* bits */
};

struct policy_rule {
	int has_uid, has_gid;
	uid_t uid;
	gid_t gid;
	char vm[64]; /* "" when the rule names no VM */
	int nports;  /* 0: every port */
	char ports[16][64];
	int nprefixes; /* 0: any GID in the port's table */
	struct gid_prefix prefixes[32];
	unsigned max_gids;        /* 0: the daemon's limit */
	unsigned max_connections; /* 0: the daemon's limit */
	unsigned max_clients;     /* clients under this rule; 0: no limit */
	unsigned mad_rate;        /* MADs per second; 0: unlimited */
	unsigned mad_burst;
	/* Control requests per second: beyond them the client's input is
	 * not read until it may go on; 0: unlimited. */
	unsigned request_rate;
	unsigned request_burst;
	/* May register its GIDs shared with other clients of such rules
	 * (the host's own processes, as with the kernel CM). */
	int share_gids;
};

/* A rule's request_rate when it says none: far above what a device model
 * asks (a hello, its GIDs, a QPN a QP), far below what a worker serves. */
#define POLICY_REQUEST_RATE 10000

struct policy {
	_Atomic int refs;
	char source[256]; /* file, or "default" */
	int nrules;
	struct policy_rule rules[];
};

/* Parse a policy file; NULL with a message in err on any error (the
 * message names the file, the rule and the field). */
struct policy *policy_load(const char *path, char *err, size_t errlen);
/* The same from text in memory; source names it in messages. */
struct policy *policy_parse(const char *text, size_t len, const char *source,
			    char *err, size_t errlen);
/* The default without a file: the daemon's own user and root, with
 * everything allowed within the daemon's limits. */
struct policy *policy_default(uid_t daemon_uid);
struct policy *policy_ref(struct policy *p);
void policy_unref(struct policy *p);

/* Is any rule for this identity? */
int policy_admits(const struct policy *p, uid_t uid, gid_t gid);
/* The rule for an identity and VM name (may be NULL or ""), or NULL. */
const struct policy_rule *policy_select(const struct policy *p, uid_t uid,
					gid_t gid, const char *vm);
int policy_rule_allows_port(const struct policy_rule *r, const char *port);
int policy_rule_allows_gid(const struct policy_rule *r, const struct gid *gid);
int policy_gid_prefix_parse(const char *text, struct gid_prefix *out);

/* A token bucket, for a client's MAD and request rates; driven by the
 * caller's clock (milliseconds). */
struct token_bucket {
	double tokens;
	uint64_t last_ms;
	unsigned rate, burst;
};

void policy_token_bucket_init(struct token_bucket *tb, unsigned rate,
			      unsigned burst, uint64_t now_ms);
/* 1 and one token taken, or 0 when empty (always 1 when rate is 0). */
int policy_token_bucket_take(struct token_bucket *tb, uint64_t now_ms);
/* Take a token whether or not one is there, going into debt: the
 * milliseconds until the debt is paid (0: there was one). */
unsigned policy_token_bucket_charge(struct token_bucket *tb, uint64_t now_ms);

#endif
