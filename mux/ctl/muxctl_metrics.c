// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * rdmacm-muxctl metrics: the daemon's status as Prometheus' text
 * exposition format (version 0.0.4): a HELP and a TYPE line per metric
 * muxctl_metrics_family, counters named *_total, units in names, label values escaped.
 * The names and labels are documented in rdmacm-muxctl(8), METRICS.
 */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "mux/ctl/muxctl.h"

#define NS "rdmacm_mux_"

static void muxctl_metrics_family(FILE *f, const char *name, const char *type,
				  const char *help)
{
	fprintf(f, "# HELP " NS "%s %s\n# TYPE " NS "%s %s\n", name, help, name,
		type);
}

/* A label value: backslash, double quote and newline escaped. */
static void muxctl_metrics_label_value(FILE *f, const char *v)
{
	for (; v && *v; v++) {
		if (*v == '\\')
			fputs("\\\\", f);
		else if (*v == '"')
			fputs("\\\"", f);
		else if (*v == '\n')
			fputs("\\n", f);
		else
			fputc(*v, f);
	}
}

static json_int_t muxctl_metrics_ival(json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

static void muxctl_metrics_sample(FILE *f, const char *name, const char *lk,
				  const char *lv, json_int_t v)
{
	fprintf(f, NS "%s", name);
	if (lk) {
		fprintf(f, "{%s=\"", lk);
		muxctl_metrics_label_value(f, lv);
		fputs("\"}", f);
	}
	fprintf(f, " %lld\n", (long long)v);
}

/* A family of one sample without labels. */
static void muxctl_metrics_single(FILE *f, const char *name, const char *type,
				  const char *help, json_int_t v)
{
	muxctl_metrics_family(f, name, type, help);
	muxctl_metrics_sample(f, name, NULL, NULL, v);
}

/* One muxctl_metrics_family from an object of counters: {"REQ": 3, ...} -> {lk="REQ"}. */
static void muxctl_metrics_by_label(FILE *f, const char *name, const char *type,
				    const char *help, const char *lk,
				    json_t *obj)
{
	const char *key;
	json_t *v;

	muxctl_metrics_family(f, name, type, help);
	json_object_foreach(obj, key, v)
		if (json_is_integer(v))
			muxctl_metrics_sample(f, name, lk, key,
					      json_integer_value(v));
}

static void muxctl_metrics_per_port(FILE *f, json_t *ports, const char *name,
				    const char *type, const char *help,
				    const char *key)
{
	json_t *p;
	size_t i;

	muxctl_metrics_family(f, name, type, help);
	json_array_foreach(ports, i, p) {
		json_t *c = json_object_get(p, "counters");

		muxctl_metrics_sample(
			f, name, "port",
			json_string_value(json_object_get(p, "name")),
			strcmp(key, "up") == 0
				? strcmp(json_string_value(
						 json_object_get(p, "state"))
						 ?: "",
					 "active") == 0
				: muxctl_metrics_ival(c, key));
	}
}

/* Per client: labelled by its id and VM name. */
static void muxctl_metrics_per_client(FILE *f, json_t *clients,
				      const char *name, const char *help,
				      const char *key)
{
	json_t *c;
	size_t i;

	muxctl_metrics_family(f, name, "counter", help);
	json_array_foreach(clients, i, c) {
		fprintf(f, NS "%s{client=\"%lld\",vm=\"", name,
			(long long)muxctl_metrics_ival(c, "id"));
		muxctl_metrics_label_value(f,
					   json_string_value(
						   json_object_get(c, "name")));
		fprintf(f, "\"} %lld\n",
			(long long)
				muxctl_metrics_ival(json_object_get(c,
								    "counters"),
						    key));
	}
}

/* Counters the status keeps as {"label value": count}. */
static const struct {
	const char *name, *help, *label, *key;
} labelled[] = {
	{ "mads_received_total",
	  "CM MADs received from the wire, by attribute.", "attribute",
	  "mads_in" },
	{ "mads_sent_total", "CM MADs sent to the wire, by attribute.",
	  "attribute", "mads_out" },
	{ "mads_dropped_total", "Inbound MADs dropped, by reason.", "reason",
	  "drops" },
	{ "mads_refused_total", "Clients' MADs refused, by reason.", "reason",
	  "refusals" },
	{ "answers_total",
	  "MADs the daemon sent on a client's or nobody's behalf, by kind.",
	  "kind", "answers" },
};

void muxctl_metrics_print(FILE *f, json_t *st)
{
	json_t *d = json_object_get(st, "daemon"),
	       *r = json_object_get(st, "routing");
	json_t *ctr = json_object_get(st, "counters"),
	       *ports = json_object_get(st, "ports");
	json_t *clients = json_object_get(st, "clients");
	json_t *status = json_object_get(ctr, "status");
	static const char *const states[] = { "handshake", "established",
					      "disconnecting", "draining" };
	size_t i;

	muxctl_metrics_single(f, "up", "gauge",
			      "1 while the daemon answers its status socket.",
			      1);
	muxctl_metrics_single(f, "uptime_seconds", "gauge",
			      "Seconds since the daemon started.",
			      muxctl_metrics_ival(d, "uptime_s"));
	muxctl_metrics_single(f, "clients", "gauge", "Clients connected now.",
			      (json_int_t)json_array_size(clients));
	muxctl_metrics_single(f, "clients_accepted_total", "counter",
			      "Client connections accepted.",
			      muxctl_metrics_ival(ctr, "clients_accepted"));
	muxctl_metrics_family(f, "clients_refused_total", "counter",
			      "Client connections refused, by reason.");
	muxctl_metrics_sample(f, "clients_refused_total", "reason", "policy",
			      muxctl_metrics_ival(ctr,
						  "clients_refused_policy"));
	muxctl_metrics_sample(f, "clients_refused_total", "reason", "uid_limit",
			      muxctl_metrics_ival(ctr,
						  "clients_refused_uid_limit"));
	muxctl_metrics_sample(
		f, "clients_refused_total", "reason", "rule_limit",
		muxctl_metrics_ival(ctr, "clients_refused_rule_limit"));
	muxctl_metrics_sample(f, "clients_refused_total", "reason",
			      "hello_timeout",
			      muxctl_metrics_ival(ctr, "hello_timeouts"));
	muxctl_metrics_sample(
		f, "clients_refused_total", "reason", "other",
		muxctl_metrics_ival(ctr, "clients_refused") -
			muxctl_metrics_ival(ctr, "clients_refused_policy") -
			muxctl_metrics_ival(ctr, "clients_refused_uid_limit") -
			muxctl_metrics_ival(ctr, "clients_refused_rule_limit"));
	muxctl_metrics_family(
		f, "resumes_total", "counter",
		"Sessions of a previous daemon's clients taken over, by result.");
	muxctl_metrics_sample(f, "resumes_total", "result", "resumed",
			      muxctl_metrics_ival(ctr, "resumes"));
	muxctl_metrics_sample(f, "resumes_total", "result", "refused",
			      muxctl_metrics_ival(ctr, "resumes_refused"));
	muxctl_metrics_single(f, "protocol_errors_total", "counter",
			      "Malformed requests and frames.",
			      muxctl_metrics_ival(ctr, "protocol_errors"));
	muxctl_metrics_single(
		f, "requests_paced_total", "counter",
		"Times a client's input waited for its request rate.",
		muxctl_metrics_ival(ctr, "requests_paced"));

	for (i = 0; i < sizeof(labelled) / sizeof(labelled[0]); i++)
		muxctl_metrics_by_label(f, labelled[i].name, "counter",
					labelled[i].help, labelled[i].label,
					json_object_get(ctr, labelled[i].key));
	muxctl_metrics_single(f, "mads_lost_reported_total", "counter",
			      "Loss reports (mad_lost events) sent to senders.",
			      muxctl_metrics_ival(ctr, "losses_reported"));

	muxctl_metrics_single(f, "gids", "gauge", "GIDs registered by clients.",
			      muxctl_metrics_ival(r, "gids"));
	muxctl_metrics_family(f, "mappings", "gauge",
			      "Live comm-ID and SIDR mappings, by kind.");
	muxctl_metrics_sample(f, "mappings", "kind", "comm",
			      muxctl_metrics_ival(r, "comm_ids"));
	muxctl_metrics_sample(f, "mappings", "kind", "sidr",
			      muxctl_metrics_ival(r, "sidr_ids"));
	muxctl_metrics_family(f, "connections", "gauge",
			      "Comm-ID mappings, by state.");
	for (i = 0; i < sizeof(states) / sizeof(states[0]); i++)
		muxctl_metrics_sample(f, "connections", "state", states[i],
				      muxctl_metrics_ival(r, states[i]));
	muxctl_metrics_single(f, "peer_records", "gauge",
			      "Peers' REQs no client has answered yet.",
			      muxctl_metrics_ival(r, "peer_records"));

	muxctl_metrics_per_port(f, ports, "port_up", "gauge",
				"1 while the port is active.", "up");
	muxctl_metrics_per_port(f, ports, "port_received_mads_total", "counter",
				"MADs received on the port.", "rx");
	muxctl_metrics_per_port(f, ports, "port_sent_mads_total", "counter",
				"MADs sent on the port.", "tx");
	muxctl_metrics_per_port(f, ports, "port_receive_errors_total",
				"counter", "Receive errors on the port.",
				"rx_errors");
	muxctl_metrics_per_port(f, ports, "port_send_errors_total", "counter",
				"Send errors on the port.", "tx_errors");

	muxctl_metrics_per_client(f, clients, "client_mads_sent_total",
				  "MADs a client sent.", "mads_sent");
	muxctl_metrics_per_client(f, clients, "client_mads_delivered_total",
				  "MADs delivered to a client.",
				  "mads_delivered");
	muxctl_metrics_per_client(
		f, clients, "client_mads_dropped_total",
		"MADs for a client dropped (its queue was full).",
		"mads_dropped");

	muxctl_metrics_single(f, "status_queries_total", "counter",
			      "Status queries answered.",
			      muxctl_metrics_ival(status, "queries"));
	muxctl_metrics_family(
		f, "status_dropped_total", "counter",
		"Status connections refused (limits) or dropped (did not read), by reason.");
	muxctl_metrics_sample(f, "status_dropped_total", "reason", "refused",
			      muxctl_metrics_ival(status, "refused"));
	muxctl_metrics_sample(f, "status_dropped_total", "reason",
			      "slow_reader",
			      muxctl_metrics_ival(status, "dropped_slow"));
}
