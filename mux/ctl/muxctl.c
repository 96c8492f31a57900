// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * rdmacm-muxctl: reads the daemon's status socket (read-only) and prints
 * it as tables, or as the raw JSON with -j.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "common/number.h"
#include "common/text.h"
#include "mux/ctl/muxctl.h"
#include "protocol/rdmacm_mux_proto.h"
#include "common/unix_socket.h"

static void muxctl_usage(FILE *f)
{
	fprintf(f,
		"usage: rdmacm-muxctl [-S PATH] [-j] [-t MS] [-w SECONDS] [VIEW]\n"
		"       VIEW: status (default), clients, ports, gids, counters, metrics,\n"
		"             connections [CLIENT-ID [OFFSET [LIMIT]]]\n"
		"       rdmacm-muxctl [-j] top [-d SECONDS] [-n COUNT] [-s COLUMN]\n"
		"       rdmacm-muxctl [-A PATH] disconnect CLIENT-ID | reload\n"
		"       rdmacm-muxctl [-A PATH] capture [--client ID | --vm NAME | --gid GID]\n"
		"                     [-c COUNT] [-s SECONDS] -w FILE|-\n"
		"  -S, --status-socket PATH  daemon status socket (default $RDMACM_MUX_STATUS\n"
		"                            or " PROTO_DEFAULT_STATUS_SOCKET
		")\n"
		"  -j, --json                print the status as JSON\n"
		"  -t, --timeout MS          give up after MS milliseconds (default 5000)\n"
		"  -w, --watch SECONDS       show the view again every SECONDS\n"
		"  -A, --admin-socket PATH   the daemon's admin socket, root only (default\n"
		"                            $RDMACM_MUX_ADMIN or " PROTO_DEFAULT_ADMIN_SOCKET
		")\n"
		"  connections ID [OFF [N]]  a client's connections, N "
		"(default 256) from OFF\n"
		"  metrics                   the counters in Prometheus' text "
		"format\n"
		"  top                       live, per client: MADs a second, "
		"refusals, drops\n"
		"  disconnect ID             close a client's connection "
		"(audited)\n"
		"  reload                    read the policy file again "
		"(audited)\n"
		"  capture                   the CM MADs and their verdicts, "
		"as pcapng (audited)\n"
		"  -h, --help                this text\n");
}

static json_int_t muxctl_jint(json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

static const char *muxctl_jstr(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "-";
}

static void muxctl_print_counter_row(const char *label, json_t *obj)
{
	const char *key;
	json_t *v;
	int any = 0;

	printf("  %-10s", label);
	json_object_foreach(obj, key, v) {
		if (json_integer_value(v) == 0)
			continue;
		printf(" %s=%lld", key, (long long)json_integer_value(v));
		any = 1;
	}
	printf("%s\n", any ? "" : " (none)");
}

static void muxctl_print_connection_header(void)
{
	printf("  %-4s %-5s %-13s %-10s %-10s %-10s %s\n", "CLI", "KIND",
	       "STATE", "GUEST ID", "HOST ID", "PEER ID", "EXPIRES IN");
}

static void muxctl_print_connection_rows(json_int_t client, json_t *conns)
{
	json_t *e, *left;
	size_t j;

	json_array_foreach(conns, j, e) {
		left = json_object_get(e, "expires_in_ms");
		printf("  %-4lld %-5s %-13s 0x%08llx 0x%08llx ",
		       (long long)client, muxctl_jstr(e, "kind"),
		       muxctl_jstr(e, "state"),
		       (long long)muxctl_jint(e, "guest_id"),
		       (long long)muxctl_jint(e, "host_id"));
		if (json_is_integer(json_object_get(e, "peer_id")))
			printf("0x%08llx ",
			       (long long)muxctl_jint(e, "peer_id"));
		else
			printf("%-10s ", "-");
		if (json_is_integer(left))
			printf("%.1f s\n",
			       (double)json_integer_value(left) / 1000);
		else
			printf("-\n");
	}
}

/* Live comm-ID and SIDR mappings, per client: the first of each (by
 * comm ID), and how to page through the rest. */
static void muxctl_print_connections(json_t *clients)
{
	json_t *c;
	size_t i, n = 0;

	json_array_foreach(clients, i, c)
		n += (size_t)muxctl_jint(c, "connections_total");
	printf("\nCONNECTIONS (%zu)\n", n);
	if (n == 0)
		return;
	muxctl_print_connection_header();
	json_array_foreach(clients, i, c)
		muxctl_print_connection_rows(muxctl_jint(c, "id"),
					     json_object_get(c, "connections"));
	json_array_foreach(clients, i, c) {
		size_t shown = json_array_size(
			json_object_get(c, "connections"));

		if ((size_t)muxctl_jint(c, "connections_total") > shown)
			printf("  client %lld: %lld more (rdmacm-muxctl connections %lld %zu)\n",
			       (long long)muxctl_jint(c, "id"),
			       (long long)muxctl_jint(c, "connections_total") -
				       (long long)shown,
			       (long long)muxctl_jint(c, "id"), shown);
	}
}

/* One page of a client's connections. */
static void muxctl_print_connection_page(json_t *page)
{
	size_t shown = json_array_size(json_object_get(page, "connections"));

	printf("CONNECTIONS of client %lld: %lld to %lld of %lld%s\n",
	       (long long)muxctl_jint(page, "client"),
	       (long long)muxctl_jint(page, "offset"),
	       (long long)muxctl_jint(page, "offset") + (long long)shown,
	       (long long)muxctl_jint(page, "total"),
	       json_is_false(json_object_get(page, "connected"))
		       ? " (gone; held for its return)"
		       : "");
	if (shown == 0)
		return;
	muxctl_print_connection_header();
	muxctl_print_connection_rows(muxctl_jint(page, "client"),
				     json_object_get(page, "connections"));
}

static void muxctl_print_header(json_t *st)
{
	json_t *d = json_object_get(st, "daemon");

	printf("rdmacm-muxd %s  pid %lld  up %llds  protocol v%lld\n",
	       muxctl_jstr(d, "version"), (long long)muxctl_jint(d, "pid"),
	       (long long)muxctl_jint(d, "uptime_s"),
	       (long long)muxctl_jint(d, "protocol_major"));
	printf("clients: %s\n", muxctl_jstr(d, "socket"));
	printf("policy: %s (%lld rules)\n",
	       muxctl_jstr(json_object_get(st, "policy"), "source"),
	       (long long)muxctl_jint(json_object_get(st, "policy"), "rules"));
}

static void muxctl_print_ports(json_t *st)
{
	json_t *ports = json_object_get(st, "ports"), *p;
	size_t i;

	printf("\nPORTS (%zu)\n  %-3s %-16s %-5s %-8s %10s %10s %6s %5s\n",
	       json_array_size(ports), "IDX", "NAME", "KIND", "STATE", "RX",
	       "TX", "ERRORS", "GIDS");
	json_array_foreach(ports, i, p) {
		json_t *pc = json_object_get(p, "counters");

		printf("  %-3lld %-16.16s %-5s %-8s %10lld %10lld %6lld %5zu\n",
		       (long long)muxctl_jint(p, "index"),
		       muxctl_jstr(p, "name"), muxctl_jstr(p, "kind"),
		       muxctl_jstr(p, "state"),
		       (long long)muxctl_jint(pc, "rx"),
		       (long long)muxctl_jint(pc, "tx"),
		       (long long)(muxctl_jint(pc, "rx_errors") +
				   muxctl_jint(pc, "tx_errors")),
		       json_array_size(json_object_get(p, "gid_table")));
	}
}

static void muxctl_print_clients(json_t *st)
{
	json_t *clients = json_object_get(st, "clients"), *c;
	size_t i;

	printf("\nCLIENTS (%zu)\n  %-4s %-14s %-4s %-7s %-6s %6s %7s %7s %5s %5s\n",
	       json_array_size(clients), "ID", "NAME", "PROT", "PID", "UID",
	       "CONNS", "MAD>", "MAD<", "DROP", "GIDS");
	json_array_foreach(clients, i, c) {
		json_t *cc = json_object_get(c, "counters");

		printf("  %-4lld %-14.14s %-4s %-7lld %-6lld %6lld %7lld %7lld %5lld %5zu\n",
		       (long long)muxctl_jint(c, "id"),
		       json_string_length(json_object_get(c, "name"))
			       ? muxctl_jstr(c, "name")
			       : "-",
		       strcmp(muxctl_jstr(c, "protocol"), "v1") == 0 ? "v1"
								     : "qemu",
		       (long long)muxctl_jint(c, "pid"),
		       (long long)muxctl_jint(c, "uid"),
		       (long long)muxctl_jint(c, "connections_total"),
		       (long long)muxctl_jint(cc, "mads_sent"),
		       (long long)muxctl_jint(cc, "mads_delivered"),
		       (long long)muxctl_jint(cc, "mads_dropped"),
		       json_array_size(json_object_get(c, "gids")));
	}
}

/* Every GID in the ports' tables, and who owns it. */
static void muxctl_print_gids(json_t *st)
{
	json_t *ports = json_object_get(st, "ports"), *p, *g, *owner;
	size_t i, j;

	printf("\nGIDS\n  %-16s %-5s %-39s %s\n", "PORT", "INDEX", "GID",
	       "OWNER");
	json_array_foreach(ports, i, p) {
		json_array_foreach(json_object_get(p, "gid_table"), j, g) {
			owner = json_object_get(g, "owner");
			printf("  %-16.16s %-5lld %-39s ",
			       muxctl_jstr(p, "name"),
			       (long long)muxctl_jint(g, "index"),
			       muxctl_jstr(g, "gid"));
			if (json_is_integer(owner))
				printf("client %lld\n",
				       (long long)json_integer_value(owner));
			else if (json_is_string(owner))
				printf("%s\n", json_string_value(owner));
			else
				printf("-\n");
		}
	}
}

static void muxctl_print_counters(json_t *st)
{
	json_t *routing = json_object_get(st, "routing");
	json_t *ctr = json_object_get(st, "counters");

	printf("\nROUTING  gids=%lld comm_ids=%lld sidr_ids=%lld\n"
	       "  handshake=%lld established=%lld disconnecting=%lld "
	       "draining=%lld\n",
	       (long long)muxctl_jint(routing, "gids"),
	       (long long)muxctl_jint(routing, "comm_ids"),
	       (long long)muxctl_jint(routing, "sidr_ids"),
	       (long long)muxctl_jint(routing, "handshake"),
	       (long long)muxctl_jint(routing, "established"),
	       (long long)muxctl_jint(routing, "disconnecting"),
	       (long long)muxctl_jint(routing, "draining"));
	printf("\nCOUNTERS\n");
	muxctl_print_counter_row("mads in", json_object_get(ctr, "mads_in"));
	muxctl_print_counter_row("mads out", json_object_get(ctr, "mads_out"));
	muxctl_print_counter_row("drops", json_object_get(ctr, "drops"));
	muxctl_print_counter_row("refusals", json_object_get(ctr, "refusals"));
	muxctl_print_counter_row("answers", json_object_get(ctr, "answers"));
	printf("  %-10s refused=%lld errors=%lld\n", "tx",
	       (long long)muxctl_jint(ctr, "tx_refused"),
	       (long long)muxctl_jint(ctr, "tx_errors"));
	printf("  %-10s accepted=%lld refused=%lld hello timeouts=%lld resumed=%lld\n",
	       "clients", (long long)muxctl_jint(ctr, "clients_accepted"),
	       (long long)muxctl_jint(ctr, "clients_refused"),
	       (long long)muxctl_jint(ctr, "hello_timeouts"),
	       (long long)muxctl_jint(ctr, "resumes"));
	printf("  %-10s protocol errors=%lld class requests answered=%lld\n",
	       "other", (long long)muxctl_jint(ctr, "protocol_errors"),
	       (long long)muxctl_jint(ctr, "class_requests_answered"));
}

/* The summary: the daemon, its ports and clients, the counters. */
static void muxctl_print_status(json_t *st)
{
	muxctl_print_header(st);
	muxctl_print_ports(st);
	muxctl_print_clients(st);
	muxctl_print_counters(st);
}

/* One request on the admin socket; prints the reply, exits 0 when ok. */
static int muxctl_admin_request(const char *path, const char *request,
				int timeout_ms)
{
	char reply[4096];
	struct pollfd pfd;
	size_t len = 0;
	json_t *j;
	ssize_t n;
	int fd, ok;

	fd = muxctl_status_connect(
		path,
		"admin commands need root and the daemon's --admin-socket");
	if (fd < 0)
		return 1;
	if (write(fd, request, strlen(request)) < 0 || write(fd, "\n", 1) < 0) {
		fprintf(stderr, "rdmacm-muxctl: write: %s\n", strerror(errno));
		close(fd);
		return 1;
	}
	pfd.fd = fd;
	pfd.events = POLLIN;
	while (len < sizeof(reply) - 1 && poll(&pfd, 1, timeout_ms) > 0) {
		n = read(fd, reply + len, sizeof(reply) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	reply[len] = '\0';
	j = json_loads(reply, 0, NULL);
	if (j == NULL) {
		fprintf(stderr, "rdmacm-muxctl: no answer from the daemon\n");
		return 1;
	}
	muxctl_status_printable(j);
	ok = json_is_true(json_object_get(j, "ok"));
	if (ok)
		printf("ok%s%s\n", json_object_get(j, "message") ? ": " : "",
		       json_string_value(json_object_get(j, "message")) ?: "");
	else
		fprintf(stderr, "rdmacm-muxctl: %s: %s\n",
			json_string_value(
				json_object_get(json_object_get(j, "error"),
						"code"))
				?: "?",
			json_string_value(
				json_object_get(json_object_get(j, "error"),
						"message"))
				?: "");
	json_decref(j);
	return ok ? 0 : 1;
}

enum view {
	V_NONE,
	V_STATUS,
	V_CLIENTS,
	V_PORTS,
	V_GIDS,
	V_CONNECTIONS,
	V_PAGE,
	V_COUNTERS,
	V_METRICS
};

static const struct {
	const char *name;
	enum view view;
} views[] = {
	{ "status", V_STATUS },
	{ "clients", V_CLIENTS },
	{ "ports", V_PORTS },
	{ "gids", V_GIDS },
	{ "connections", V_CONNECTIONS },
	{ "counters", V_COUNTERS },
	{ "metrics", V_METRICS },
};

/* What -j prints for a view: the part of the status it shows. */
static json_t *muxctl_view_json(json_t *st, enum view view)
{
	json_t *out, *c, *o;
	size_t i;

	switch (view) {
	case V_CLIENTS: return json_incref(json_object_get(st, "clients"));
	case V_PORTS:
	case V_GIDS: return json_incref(json_object_get(st, "ports"));
	case V_CONNECTIONS:
		out = json_array();
		json_array_foreach(json_object_get(st, "clients"), i, c) {
			o = json_pack("{s:O*, s:O*, s:O*, s:O*}", "id",
				      json_object_get(c, "id"), "name",
				      json_object_get(c, "name"),
				      "connections_total",
				      json_object_get(c, "connections_total"),
				      "connections",
				      json_object_get(c, "connections"));
			json_array_append_new(out, o);
		}
		return out;
	case V_COUNTERS:
		return json_pack("{s:O*, s:O*}", "routing",
				 json_object_get(st, "routing"), "counters",
				 json_object_get(st, "counters"));
	default: return json_incref(st);
	}
}

static int muxctl_print_json(json_t *v)
{
	/* JSON escapes C0 itself; ASCII-only escapes the rest. */
	char *pretty = v ? json_dumps(v, JSON_INDENT(2) | JSON_ENSURE_ASCII |
						 JSON_ENCODE_ANY)
			 : NULL;

	if (pretty == NULL) {
		fprintf(stderr, "rdmacm-muxctl: out of memory\n");
		return -1;
	}
	printf("%s\n", pretty);
	free(pretty);
	return 0;
}

static int muxctl_show(const char *path, const char *query, int timeout_ms,
		       enum view view, int json_out);

/* An option's number, 1 to max, into *out; said when it is not one. */
static int muxctl_option(const char *name, const char *unit, const char *arg,
			 unsigned long long max, int *out)
{
	unsigned long long n;

	if (number_parse(arg, 10, 1, max, &n) < 0) {
		fprintf(stderr,
			"rdmacm-muxctl: --%s: %s is a number from 1 to %llu, not '%s'\n",
			name, unit, max, arg);
		return -1;
	}
	*out = (int)n;
	return 0;
}

/* Words after a command that takes no more: a usage error, not ignored. */
static int muxctl_no_more(int argc, char **argv, int next)
{
	if (next >= argc)
		return 0;
	fprintf(stderr, "rdmacm-muxctl: unexpected argument '%s'\n",
		argv[next]);
	return -1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "status-socket", required_argument, NULL, 'S' },
		{ "json", no_argument, NULL, 'j' },
		{ "timeout", required_argument, NULL, 't' },
		{ "admin-socket", required_argument, NULL, 'A' },
		{ "watch", required_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = getenv("RDMACM_MUX_STATUS");
	const char *admin = getenv("RDMACM_MUX_ADMIN");
	int json_out = 0, timeout_ms = 5000, c, watch_s = 0;
	char query[160] = "{\"op\":\"status\"}";
	enum view view = V_NONE;
	size_t i;

	/* Empty is unset, as the shell's ${VAR:-default}. */
	if (path == NULL || path[0] == '\0')
		path = PROTO_DEFAULT_STATUS_SOCKET;
	if (admin == NULL || admin[0] == '\0')
		admin = PROTO_DEFAULT_ADMIN_SOCKET;
	while ((c = getopt_long(argc, argv, "+S:jt:A:w:h", opts, NULL)) != -1) {
		switch (c) {
		case 'w':
			if (muxctl_option("watch", "SECONDS", optarg, 86400,
					  &watch_s) < 0)
				return 2;
			break;
		case 'A':
		case 'S':
			if (optarg[0] == '\0') {
				fprintf(stderr,
					"rdmacm-muxctl: --%s: a socket path, not empty\n",
					c == 'A' ? "admin-socket"
						 : "status-socket");
				return 2;
			}
			*(c == 'A' ? &admin : &path) = optarg;
			break;
		case 'j': json_out = 1; break;
		case 't':
			if (muxctl_option("timeout", "MS", optarg, 3600000,
					  &timeout_ms) < 0)
				return 2;
			break;
		case 'h': muxctl_usage(stdout); return 0;
		default: muxctl_usage(stderr); return 2;
		}
	}
	if (optind < argc && strcmp(argv[optind], "capture") == 0)
		return muxctl_capture_main(admin, argc - optind, argv + optind);
	if (optind < argc && strcmp(argv[optind], "top") == 0)
		return muxctl_top_main(path, timeout_ms, json_out,
				       argc - optind, argv + optind);
	if (optind < argc && strcmp(argv[optind], "reload") == 0)
		return muxctl_no_more(argc, argv, optind + 1) < 0
			       ? 2
			       : muxctl_admin_request(
					 admin, "{\"op\":\"reload_policy\"}",
					 timeout_ms);
	if (optind < argc && strcmp(argv[optind], "disconnect") == 0) {
		char req[128];
		unsigned long long id;

		if (optind + 1 >= argc ||
		    number_parse(argv[optind + 1], 10, 1, INT64_MAX, &id) < 0) {
			fprintf(stderr,
				"rdmacm-muxctl: disconnect needs a client id (see rdmacm-muxctl status)\n");
			return 2;
		}
		if (muxctl_no_more(argc, argv, optind + 2) < 0)
			return 2;
		snprintf(req, sizeof(req),
			 "{\"op\":\"disconnect_client\",\"client_id\":%llu}",
			 id);
		return muxctl_admin_request(admin, req, timeout_ms);
	}
	if (optind < argc && strcmp(argv[optind], "connections") == 0 &&
	    optind + 1 < argc) {
		unsigned long long id = 0, offset = 0, limit = 256;

		if (number_parse(argv[optind + 1], 10, 1, INT64_MAX, &id) < 0 ||
		    (optind + 2 < argc &&
		     number_parse(argv[optind + 2], 10, 0, INT64_MAX, &offset) <
			     0) ||
		    (optind + 3 < argc &&
		     number_parse(argv[optind + 3], 10, 1, 4096, &limit) < 0)) {
			fprintf(stderr,
				"rdmacm-muxctl: connections [CLIENT-ID [OFFSET [LIMIT]]] (LIMIT 1..4096)\n");
			return 2;
		}
		if (muxctl_no_more(argc, argv, optind + 4) < 0)
			return 2;
		snprintf(
			query, sizeof(query),
			"{\"op\":\"connections\",\"client\":%llu,\"offset\":%llu,\"limit\":%llu}",
			id, offset, limit);
		view = V_PAGE;
	} else if (optind < argc) {
		for (i = 0; i < sizeof(views) / sizeof(views[0]); i++)
			if (strcmp(argv[optind], views[i].name) == 0)
				view = views[i].view;
		if (view == V_NONE) {
			fprintf(stderr, "rdmacm-muxctl: unknown command '%s'\n",
				argv[optind]);
			muxctl_usage(stderr);
			return 2;
		}
		if (muxctl_no_more(argc, argv, optind + 1) < 0)
			return 2;
	} else {
		view = V_STATUS;
	}
	if (watch_s <= 0)
		return muxctl_show(path, query, timeout_ms, view, json_out);
	/* --watch: again every N seconds, until interrupted; a daemon that
	 * does not answer is said and tried again. */
	for (;;) {
		if (isatty(STDOUT_FILENO))
			printf("\033[H\033[2J");
		muxctl_show(path, query, timeout_ms, view, json_out);
		fflush(stdout);
		sleep((unsigned)watch_s);
	}
}

/* One query and its view; the exit status (rdmacm-muxctl(8)). */
static int muxctl_show(const char *path, const char *query, int timeout_ms,
		       enum view view, int json_out)
{
	json_error_t jerr;
	json_t *st, *out;
	char *text;

	text = muxctl_status_fetch(path, query, timeout_ms);
	if (text == NULL)
		return 1;
	st = json_loads(text, 0, &jerr);
	free(text);
	if (st == NULL) {
		fprintf(stderr, "rdmacm-muxctl: daemon sent invalid JSON: %s\n",
			jerr.text);
		return 1;
	}
	if (json_object_get(st, "error") &&
	    !json_is_true(json_object_get(st, "ok"))) {
		muxctl_status_printable(st);
		fprintf(stderr, "rdmacm-muxctl: %s: %s\n",
			muxctl_jstr(json_object_get(st, "error"), "code"),
			muxctl_jstr(json_object_get(st, "error"), "message"));
		json_decref(st);
		return 1;
	}
	if (view == V_METRICS) {
		/* Label values are escaped as the format wants. */
		muxctl_status_printable(st);
		muxctl_metrics_print(stdout, st);
	} else if (json_out) {
		out = muxctl_view_json(st, view);
		if (muxctl_print_json(out) < 0) {
			json_decref(out);
			json_decref(st);
			return 1;
		}
		json_decref(out);
	} else {
		muxctl_status_printable(st);
		switch (view) {
		case V_PAGE: muxctl_print_connection_page(st); break;
		case V_CLIENTS: muxctl_print_clients(st); break;
		case V_PORTS: muxctl_print_ports(st); break;
		case V_GIDS: muxctl_print_gids(st); break;
		case V_CONNECTIONS:
			muxctl_print_connections(
				json_object_get(st, "clients"));
			break;
		case V_COUNTERS: muxctl_print_counters(st); break;
		default: muxctl_print_status(st); break;
		}
	}
	json_decref(st);
	return 0;
}
