// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "mux/mux.h"

static const char *const drop_reason_names[DROP_MAX] = {
#define STATS_DROP_NAME(name, text) [DROP_##name] = text,
	ROUTER_VERDICTS(STATS_DROP_NAME)
#undef STATS_DROP_NAME
		[DROP_CLIENT_GONE] = "client_gone",
	[DROP_CLIENT_QUEUE_FULL] = "client_queue_full",
	[DROP_WORKER_QUEUE_FULL] = "worker_queue_full",
};

/* The verdicts' drops are theirs in the same order, one place down
 * (ROUTER_DELIVER has none). */
_Static_assert(DROP_NOT_CM == ROUTER_NOT_CM - 1 &&
		       DROP_OWNER_AWAY == ROUTER_OWNER_AWAY - 1 &&
		       ROUTER_OWNER_AWAY == ROUTER_VERDICT_MAX - 1,
	       "drop reasons follow the router's verdicts");

enum drop_reason stats_drop_for_verdict(enum router_verdict v)
{
	if (v == ROUTER_DELIVER || (unsigned)v >= ROUTER_VERDICT_MAX)
		return DROP_NOT_CM; /* no verdict the router gives */
	return (enum drop_reason)(v - 1);
}

const char *stats_drop_reason_name(enum drop_reason r)
{
	if ((unsigned)r >= DROP_MAX)
		return "invalid";
	return drop_reason_names[r];
}

static const char *const refusal_names[REFUSE_MAX] = {
	[REFUSE_NOT_CM] = "not_cm",
	[REFUSE_METHOD] = "method",
	[REFUSE_ATTRIBUTE] = "attribute",
	[REFUSE_SIZE] = "size",
	[REFUSE_PORT] = "port",
	[REFUSE_PORT_DOWN] = "port_down",
	[REFUSE_SOURCE_GID] = "source_gid",
	[REFUSE_INNER_GID] = "inner_address",
	[REFUSE_STATE] = "state",
	[REFUSE_DESTINATION] = "no_destination",
	[REFUSE_COMM_ID] = "comm_id",
	[REFUSE_PKEY_INDEX] = "pkey_index",
	[REFUSE_RATE] = "rate",
	[REFUSE_QUOTA] = "quota",
	[REFUSE_REMOTE_QPN] = "remote_qpn",
	[REFUSE_QKEY] = "qkey",
	[REFUSE_DEST_GID] = "destination_gid",
	[REFUSE_SL_HOP] = "sl_or_hop_limit",
	[REFUSE_QP_OWNER] = "qp_owner",
};

static const char *stats_refusal_name(enum refusal r)
{
	if ((unsigned)r >= REFUSE_MAX)
		return "invalid";
	return refusal_names[r];
}

/* A counter into o, under name. */
static void stats_set(json_t *o, const char *name, _Atomic uint64_t *counter)
{
	json_object_set_new(o, name,
			    json_integer((json_int_t)atomic_load(counter)));
}

static json_t *stats_attr_counters(_Atomic uint64_t *v)
{
	json_t *o = json_object();
	int i;

	for (i = 0; i < CM_IDX_MAX; i++)
		stats_set(o, cm_attr_index_name(i), &v[i]);
	return o;
}

json_t *stats_to_json(struct mux_stats *st)
{
	json_t *drops = json_object(), *refusals = json_object();
	json_t *answers = json_object();
	int i;

	for (i = 0; i < CONN_ANS_MAX; i++)
		stats_set(answers, conn_answer_name(i), &st->answers[i]);
	stats_set(answers, "failed", &st->answers_failed);
	stats_set(answers, "limited", &st->answers_limited);
	stats_set(answers, "paced", &st->answers_paced);
	for (i = 0; i < REFUSE_MAX; i++)
		stats_set(refusals, stats_refusal_name(i), &st->refusals[i]);
	for (i = 0; i < DROP_MAX; i++)
		stats_set(drops, stats_drop_reason_name(i), &st->drops[i]);
	json_t *o = json_pack(
		"{s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
		"mads_in", stats_attr_counters(st->mads_in), "mads_out",
		stats_attr_counters(st->mads_out), "drops", drops, "refusals",
		refusals, "answers", answers, "tx_refused",
		(json_int_t)atomic_load(&st->tx_refused), "tx_errors",
		(json_int_t)atomic_load(&st->tx_errors), "clients_accepted",
		(json_int_t)atomic_load(&st->clients_accepted),
		"clients_refused",
		(json_int_t)atomic_load(&st->clients_refused),
		"clients_refused_policy",
		(json_int_t)atomic_load(&st->clients_refused_policy),
		"admin_actions", (json_int_t)atomic_load(&st->admin_actions),
		"protocol_errors",
		(json_int_t)atomic_load(&st->protocol_errors),
		"class_requests_answered",
		(json_int_t)atomic_load(&st->class_requests_answered),
		"losses_reported",
		(json_int_t)atomic_load(&st->losses_reported));

	stats_set(o, "clients_refused_uid_limit",
		  &st->clients_refused_uid_limit);
	stats_set(o, "clients_refused_rule_limit",
		  &st->clients_refused_rule_limit);
	stats_set(o, "qemu_adopted_gids", &st->qemu_adopted_gids);
	stats_set(o, "qemu_resets", &st->qemu_resets);
	stats_set(o, "requests_paced", &st->requests_paced);
	stats_set(o, "sends_busy", &st->sends_busy);
	stats_set(o, "hello_timeouts", &st->hello_timeouts);
	stats_set(o, "resumes", &st->resumes);
	stats_set(o, "resumes_refused", &st->resumes_refused);
	json_object_set_new(o, "status",
			    json_pack("{s:I, s:I, s:I}", "queries",
				      (json_int_t)atomic_load(
					      &st->status_queries),
				      "refused",
				      (json_int_t)atomic_load(
					      &st->status_refused),
				      "dropped_slow",
				      (json_int_t)atomic_load(
					      &st->status_dropped_slow)));
	return o;
}
