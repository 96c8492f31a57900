// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The table of connected clients.  Sessions live on their worker; this
 * table is what other threads use to find a client's worker by id and
 * what the status socket reads.  Records are owned by the table.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mux/mux.h"

static int clients_info_cmp(struct client_info *a, struct client_info *b)
{
	return a->id < b->id ? -1 : a->id > b->id;
}

TREE_GENERATE_STATIC(client_tree, client_info, link, clients_info_cmp)

/* Connected clients per uid, for --max-clients-per-uid. */
struct uid_count {
	RB_ENTRY(uid_count) link;
	uid_t uid;
	unsigned count;
};

static int clients_uid_count_cmp(struct uid_count *a, struct uid_count *b)
{
	return a->uid < b->uid ? -1 : a->uid > b->uid;
}

TREE_GENERATE_STATIC(uid_count_tree, uid_count, link, clients_uid_count_cmp)

/* The log's budget of each uid that has had a client: kept after its
 * clients leave, so that reconnecting buys a tenant no new allowance. */
struct uid_log {
	RB_ENTRY(uid_log) link;
	uid_t uid;
	struct log_ratelimit rl;
};

/* Budgets kept apart; the uids beyond them share one. */
#define CLIENTS_UID_LOGS 1024

static int clients_uid_log_cmp(struct uid_log *a, struct uid_log *b)
{
	return a->uid < b->uid ? -1 : a->uid > b->uid;
}

TREE_GENERATE_STATIC(uid_log_tree, uid_log, link, clients_uid_log_cmp)

static int clients_uid_log_allowed(struct clients *c, uid_t uid,
				   uint64_t *suppressed)
{
	struct uid_log key = { .uid = uid }, *u;
	struct log_ratelimit *rl = &c->uid_log_overflow;
	int ok;

	pthread_mutex_lock(&c->lock);
	u = RB_FIND(uid_log_tree, &c->uid_logs, &key);
	if (u == NULL && c->nuid_logs < CLIENTS_UID_LOGS &&
	    (u = calloc(1, sizeof(*u))) != NULL) {
		u->uid = uid;
		u->rl = (struct log_ratelimit)LOG_RATELIMIT_INIT(5, 1);
		RB_INSERT(uid_log_tree, &c->uid_logs, u);
		c->nuid_logs++;
	}
	if (u)
		rl = &u->rl;
	ok = log_ratelimit_allow(rl, suppressed);
	pthread_mutex_unlock(&c->lock);
	return ok;
}

static struct uid_count *clients_uid(struct clients *c, uid_t uid)
{
	struct uid_count key = { .uid = uid };

	return RB_FIND(uid_count_tree, &c->by_uid, &key);
}

static void clients_uid_drop(struct clients *c, uid_t uid)
{
	struct uid_count *u = clients_uid(c, uid);

	if (u && --u->count == 0) {
		RB_REMOVE(uid_count_tree, &c->by_uid, u);
		free(u);
	}
}

void clients_put(struct client_info *ci)
{
	if (atomic_fetch_sub(&ci->refs, 1) != 1)
		return;
	policy_unref(ci->pol);
	outlet_fini(&ci->out);
	free(ci);
}

struct client_info *clients_hold(struct client_info *ci)
{
	atomic_fetch_add(&ci->refs, 1);
	return ci;
}

struct client_info *clients_get(struct clients *c, uint64_t id)
{
	struct client_info key = { .id = id }, *ci;

	pthread_mutex_lock(&c->lock);
	ci = RB_FIND(client_tree, &c->tree, &key);
	if (ci)
		atomic_fetch_add(&ci->refs, 1);
	pthread_mutex_unlock(&c->lock);
	return ci;
}

void clients_init(struct clients *c)
{
	pthread_mutex_init(&c->lock, NULL);
	RB_INIT(&c->tree);
	RB_INIT(&c->by_uid);
	RB_INIT(&c->uid_logs);
	c->nuid_logs = 0;
	c->uid_log_overflow = (struct log_ratelimit)LOG_RATELIMIT_INIT(5, 1);
	c->count = 0;
	c->next_id = 1;
}

void clients_fini(struct clients *c)
{
	struct client_info *ci, *next;
	struct uid_log *u, *unext;

	RB_FOREACH_SAFE(ci, client_tree, &c->tree, next) {
		RB_REMOVE(client_tree, &c->tree, ci);
		clients_uid_drop(c, ci->uid);
		clients_put(ci);
	}
	RB_FOREACH_SAFE(u, uid_log_tree, &c->uid_logs, unext) {
		RB_REMOVE(uid_log_tree, &c->uid_logs, u);
		free(u);
	}
	pthread_mutex_destroy(&c->lock);
}

int clients_add(struct clients *c, unsigned max, unsigned max_per_uid,
		pid_t pid, uid_t uid, gid_t gid, unsigned worker, int qemu_port,
		struct client_info **out)
{
	struct client_info *ci;
	struct uid_count *u;

	pthread_mutex_lock(&c->lock);
	if (c->count >= max) {
		pthread_mutex_unlock(&c->lock);
		return -EBUSY;
	}
	u = clients_uid(c, uid);
	if (u && max_per_uid && u->count >= max_per_uid) {
		pthread_mutex_unlock(&c->lock);
		return -EUSERS;
	}
	if (u == NULL) {
		u = calloc(1, sizeof(*u));
		if (u == NULL) {
			pthread_mutex_unlock(&c->lock);
			return -ENOMEM;
		}
		u->uid = uid;
		RB_INSERT(uid_count_tree, &c->by_uid, u);
	}
	ci = calloc(1, sizeof(*ci));
	if (ci == NULL) {
		if (u->count == 0) {
			RB_REMOVE(uid_count_tree, &c->by_uid, u);
			free(u);
		}
		pthread_mutex_unlock(&c->lock);
		return -ENOMEM;
	}
	u->count++;
	ci->id = c->next_id++;
	ci->pid = pid;
	ci->uid = uid;
	ci->gid = gid;
	ci->worker = worker;
	ci->connected = time(NULL);
	ci->qemu_port = qemu_port;
	ci->refs = 1;
	outlet_init(&ci->out);
	RB_INSERT(client_tree, &c->tree, ci);
	c->count++;
	pthread_mutex_unlock(&c->lock);
	*out = ci;
	return 0;
}

void clients_remove(struct clients *c, uint64_t id)
{
	struct client_info key = { .id = id }, *ci;

	pthread_mutex_lock(&c->lock);
	ci = RB_FIND(client_tree, &c->tree, &key);
	if (ci) {
		RB_REMOVE(client_tree, &c->tree, ci);
		clients_uid_drop(c, ci->uid);
		c->count--;
	}
	pthread_mutex_unlock(&c->lock);
	if (ci)
		clients_put(ci);
}

int clients_worker_of(struct clients *c, uint64_t id)
{
	struct client_info key = { .id = id }, *ci;
	int w;

	pthread_mutex_lock(&c->lock);
	ci = RB_FIND(client_tree, &c->tree, &key);
	w = ci ? (int)ci->worker : -ENOENT;
	pthread_mutex_unlock(&c->lock);
	return w;
}

static int clients_rule_equal(const struct policy_rule *a,
			      const struct policy_rule *b)
{
	return a->has_uid == b->has_uid && a->has_gid == b->has_gid &&
	       (!a->has_uid || a->uid == b->uid) &&
	       (!a->has_gid || a->gid == b->gid) && strcmp(a->vm, b->vm) == 0;
}

int clients_set_hello(struct clients *c, struct client_info *ci,
		      const char *name, struct policy *pol,
		      const struct policy_rule *rule)
{
	struct client_info *other;
	struct policy *old;
	unsigned n = 0;

	pthread_mutex_lock(&c->lock);
	if (rule->max_clients) {
		RB_FOREACH(other, client_tree, &c->tree)
			n += other->rule &&
			     clients_rule_equal(other->rule, rule);
		if (n >= rule->max_clients) {
			pthread_mutex_unlock(&c->lock);
			policy_unref(pol);
			return -EUSERS;
		}
	}
	if (name)
		snprintf(ci->name, sizeof(ci->name), "%s", name);
	old = ci->pol;
	ci->pol = pol;
	ci->rule = rule;
	pthread_mutex_unlock(&c->lock);
	policy_unref(old);
	return 0;
}

/* What the status shows of a client, copied under the table's lock. */
struct client_view {
	struct client_info *ci; /* held */
	char name[MUX_NAME_MAX + 1];
	int rule; /* 1-based, 0: none yet */
};

static json_t *clients_view_json(const struct client_view *cv, struct router *r,
				 unsigned *conns_left, uint64_t now)
{
	struct client_info *ci = cv->ci;
	struct router_counts rc;
	json_t *o, *conns;

	conns = router_conns_json(r, ci->id, 0, *conns_left, now);
	*conns_left -= conns ? (unsigned)json_array_size(conns) : 0;

	router_client_counts(r, ci->id, &rc);
	o = json_pack(
		"{s:I, s:s, s:i, s:i, s:i, s:i, s:I, s:o, s:o*, s:{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}}",
		"id", (json_int_t)ci->id, "name", cv->name, "pid", (int)ci->pid,
		"uid", (int)ci->uid, "gid", (int)ci->gid, "worker",
		(int)ci->worker, "connected", (json_int_t)ci->connected, "gids",
		router_gids_json(r, ci->id), "connections", conns, "routing",
		"gids", (int)rc.gids, "comm_ids", (int)rc.comm_ids, "sidr_ids",
		(int)rc.sidr_ids, "handshake", (int)rc.handshake, "established",
		(int)rc.established, "disconnecting", (int)rc.disconnecting,
		"draining", (int)rc.draining, "listens", (int)rc.listens,
		"counters", "requests",
		(json_int_t)atomic_load(&ci->ctr.requests), "errors",
		(json_int_t)atomic_load(&ci->ctr.errors), "mads_sent",
		(json_int_t)atomic_load(&ci->ctr.mads_sent), "mads_delivered",
		(json_int_t)atomic_load(&ci->ctr.mads_delivered),
		"mads_dropped", (json_int_t)atomic_load(&ci->ctr.mads_dropped),
		"mads_lost", (json_int_t)atomic_load(&ci->ctr.mads_lost),
		"malformed", (json_int_t)atomic_load(&ci->ctr.malformed),
		"outq_bytes",
		(json_int_t)(outlet_len(&ci->out) +
			     atomic_load(&ci->ctr.qemu_pending_bytes)));
	if (o == NULL)
		return NULL;
	/* The listing is bounded; the rest is paged (status query
	 * "connections"). */
	json_object_set_new(o, "connections_total",
			    json_integer(rc.comm_ids + rc.sidr_ids));
	/* Its share of the port's records of unanswered peers' REQs. */
	json_object_set_new(json_object_get(o, "routing"), "peer_records",
			    json_integer(rc.peer_records));
	/* Its MADs on their way out of a port whose send blocks, and
	 * the ones refused for having PORT_CLIENT_SENDS_MAX there. */
	json_object_set_new(json_object_get(o, "counters"), "sends_in_flight",
			    json_integer(atomic_load(&ci->sends_in_flight)));
	json_object_set_new(json_object_get(o, "counters"), "sends_busy",
			    json_integer((json_int_t)atomic_load(
				    &ci->ctr.sends_busy)));
	json_object_set_new(o, "protocol",
			    json_string(ci->qemu_port >= 0 ? "qemu-rdmacm-mux"
							   : "v1"));
	/* Which policy rule it runs under (set at hello). */
	json_object_set_new(o, "policy_rule",
			    cv->rule ? json_integer(cv->rule) : json_null());
	return o;
}

/* Status: every client with its identity, counters and its first
 * conns_max connections (by comm ID), conns_total in all (clients in
 * order of id): a status answer's size stays bounded however many
 * clients there are.  The table's lock is held only to copy the
 * identities: accepting, hello and routing never wait for the JSON. */
json_t *clients_json(struct clients *c, struct router *r, unsigned conns_max,
		     unsigned conns_total)
{
	json_t *arr = json_array(), *o;
	struct client_view *views;
	struct client_info *ci;
	uint64_t now = mux_now_ms();
	size_t n = 0, i, cap;

	pthread_mutex_lock(&c->lock);
	cap = c->count;
	views = calloc(cap ? cap : 1, sizeof(*views));
	if (views) {
		RB_FOREACH(ci, client_tree, &c->tree) {
			if (n == cap)
				break;
			views[n].ci = clients_hold(ci);
			memcpy(views[n].name, ci->name, sizeof(views[n].name));
			views[n].rule = ci->rule ? (int)(ci->rule -
							 ci->pol->rules) +
							   1
						 : 0;
			n++;
		}
	}
	pthread_mutex_unlock(&c->lock);
	if (views == NULL || arr == NULL) {
		free(views);
		json_decref(arr);
		return NULL;
	}
	for (i = 0; i < n; i++) {
		unsigned left = conns_total < conns_max ? conns_total
							: conns_max;

		conns_total -= left;
		o = clients_view_json(&views[i], r, &left, now);
		conns_total += left; /* what it did not list */
		if (o)
			json_array_append_new(arr, o);
		clients_put(views[i].ci);
	}
	free(views);
	return arr;
}

unsigned clients_count(struct clients *c)
{
	unsigned n;

	pthread_mutex_lock(&c->lock);
	n = c->count;
	pthread_mutex_unlock(&c->lock);
	return n;
}

/* May a line a client's request caused be logged now?  Within its uid's
 * budget, which reconnecting does not renew, and the daemon's
 * (*suppressed: the lines held back of that uid and of all). */
int clients_log_allowed(struct mux *mux, const struct client_info *ci,
			uint64_t *suppressed)
{
	uint64_t all = 0;

	if (!clients_uid_log_allowed(mux->clients, ci->uid, suppressed))
		return 0;
	if (!mux_refusal_log_allowed(mux, &all))
		return 0;
	*suppressed += all;
	return 1;
}
