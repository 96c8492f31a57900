// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * rdmacm-muxctl top: a live view of the daemon, as top(1) and iftop(8)
 * give one of a host: the ports' totals, then a line per client with
 * what it did in the last interval (MADs in and out a second,
 * refusals, drops) beside what it holds (connections, GIDs), sorted by
 * one column.  Each refresh is two status snapshots' difference; the
 * daemon keeps no history for it.  With -j each refresh is one JSON line.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "mux/ctl/muxctl.h"

/* The columns a view sorts by: the key, its header, the client field. */
static const struct {
	const char *key;
	char press; /* the key that picks it in the terminal */
	const char *field;
	int ascending; /* names and ids read best in order */
} muxctl_top_sorts[] = {
	{ "mads", 'm', "mads_per_s", 0 },
	{ "in", 'i', "in_per_s", 0 },
	{ "out", 'o', "out_per_s", 0 },
	{ "conns", 'c', "connections", 0 },
	{ "refusals", 'r', "refusals", 0 },
	{ "drops", 'd', "drops", 0 },
	{ "name", 'n', "name", 1 },
	{ "uid", 'u', "uid", 1 },
	{ "id", 'I', "id", 1 },
};

#define MUXCTL_TOP_NSORTS \
	(sizeof(muxctl_top_sorts) / sizeof(muxctl_top_sorts[0]))

static int muxctl_top_sort_index(const char *key)
{
	size_t i;

	for (i = 0; i < MUXCTL_TOP_NSORTS; i++)
		if (strcmp(key, muxctl_top_sorts[i].key) == 0)
			return (int)i;
	return -1;
}

static json_int_t muxctl_top_int(json_t *o, const char *path)
{
	char key[64];
	const char *dot;

	while ((dot = strchr(path, '.')) != NULL) {
		snprintf(key, sizeof(key), "%.*s", (int)(dot - path), path);
		o = json_object_get(o, key);
		path = dot + 1;
	}
	return json_integer_value(json_object_get(o, path));
}

/* The element of arr (clients or ports) whose key matches item's. */
static json_t *muxctl_top_find(json_t *arr, const char *key, json_t *item)
{
	json_t *want = json_object_get(item, key), *e;
	size_t i;

	json_array_foreach(arr, i, e)
		if (json_equal(json_object_get(e, key), want))
			return e;
	return NULL;
}

/* cur's counter at path less prev's (prev NULL: all of cur's, which
 * came within the interval); never below 0 (a restarted daemon). */
static json_int_t muxctl_top_delta(json_t *prev, json_t *cur, const char *path)
{
	json_int_t d = muxctl_top_int(cur, path) -
		       (prev ? muxctl_top_int(prev, path) : 0);

	return d > 0 ? d : 0;
}

/* To a tenth, as printed. */
static double muxctl_top_tenths(double x)
{
	return (double)(long long)(x * 10 + 0.5) / 10;
}

static double muxctl_top_rate(json_int_t n, double dt)
{
	return dt > 0 ? muxctl_top_tenths((double)n / dt) : 0;
}

static json_t *muxctl_top_port(json_t *prev_ports, json_t *p, double dt)
{
	json_t *was = muxctl_top_find(prev_ports, "name", p);
	json_int_t rx = muxctl_top_delta(was, p, "counters.rx"),
		   tx = muxctl_top_delta(was, p, "counters.tx");

	return json_pack("{s:O*, s:O*, s:I, s:I, s:f, s:f, s:I}", "name",
			 json_object_get(p, "name"), "state",
			 json_object_get(p, "state"), "rx", rx, "tx", tx,
			 "rx_per_s", muxctl_top_rate(rx, dt), "tx_per_s",
			 muxctl_top_rate(tx, dt), "errors",
			 muxctl_top_delta(was, p, "counters.tx_errors") +
				 muxctl_top_delta(was, p,
						  "counters.rx_errors"));
}

static json_t *muxctl_top_client(json_t *prev_clients, json_t *c, double dt)
{
	json_t *was = muxctl_top_find(prev_clients, "id", c), *gids, *g;
	json_int_t in = muxctl_top_delta(was, c, "counters.mads_delivered"),
		   out = muxctl_top_delta(was, c, "counters.mads_sent");
	size_t i;

	gids = json_array();
	json_array_foreach(json_object_get(c, "gids"), i, g)
		json_array_append(gids, json_object_get(g, "gid"));
	return json_pack(
		"{s:O*, s:O*, s:O*, s:o, s:I, s:I, s:f, s:f, s:f, s:I, s:I, s:I}",
		"id", json_object_get(c, "id"), "name",
		json_object_get(c, "name"), "uid", json_object_get(c, "uid"),
		"gids", gids, "mads_in", in, "mads_out", out, "in_per_s",
		muxctl_top_rate(in, dt), "out_per_s", muxctl_top_rate(out, dt),
		"mads_per_s", muxctl_top_rate(in + out, dt), "connections",
		muxctl_top_int(c, "connections_total"), "refusals",
		muxctl_top_delta(was, c, "counters.errors"), "drops",
		muxctl_top_delta(was, c, "counters.mads_dropped") +
			muxctl_top_delta(was, c, "counters.mads_lost"));
}

static const char *muxctl_top_sort_field;
static int muxctl_top_sort_up;

static int muxctl_top_cmp(const void *a, const void *b)
{
	json_t *x = json_object_get(*(json_t *const *)a, muxctl_top_sort_field);
	json_t *y = json_object_get(*(json_t *const *)b, muxctl_top_sort_field);
	double dx, dy;
	int r;

	if (json_is_string(x) || json_is_string(y))
		r = strcmp(json_is_string(x) ? json_string_value(x) : "",
			   json_is_string(y) ? json_string_value(y) : "");
	else {
		dx = json_number_value(x);
		dy = json_number_value(y);
		r = dx < dy ? -1 : dx > dy;
	}
	if (r == 0) /* ties by id, so that the order holds still */
		r = json_integer_value(
			    json_object_get(*(json_t *const *)a, "id")) <
				    json_integer_value(
					    json_object_get(*(json_t *const *)b,
							    "id"))
			    ? -1
			    : 1;
	else if (!muxctl_top_sort_up)
		r = -r;
	return r;
}

static json_t *muxctl_top_view(json_t *prev, json_t *cur, double dt, int sort)
{
	json_t *ports = json_array(), *clients, *p, **rows;
	size_t i, n;

	json_array_foreach(json_object_get(cur, "ports"), i, p)
		json_array_append_new(ports,
				      muxctl_top_port(json_object_get(prev,
								      "ports"),
						      p, dt));
	n = json_array_size(json_object_get(cur, "clients"));
	rows = calloc(n ? n : 1, sizeof(*rows));
	if (rows == NULL) {
		json_decref(ports);
		return NULL;
	}
	json_array_foreach(json_object_get(cur, "clients"), i, p)
		rows[i] = muxctl_top_client(json_object_get(prev, "clients"), p,
					    dt);
	muxctl_top_sort_field = muxctl_top_sorts[sort].field;
	muxctl_top_sort_up = muxctl_top_sorts[sort].ascending;
	qsort(rows, n, sizeof(*rows), muxctl_top_cmp);
	clients = json_array();
	for (i = 0; i < n; i++)
		json_array_append_new(clients, rows[i]);
	free(rows);
	return json_pack("{s:f, s:s, s:I, s:o, s:o}", "interval_s",
			 (double)(long long)(dt * 1000 + 0.5) / 1000,
			 "sorted_by", muxctl_top_sorts[sort].key, "uptime_s",
			 muxctl_top_int(cur, "daemon.uptime_s"), "ports", ports,
			 "clients", clients);
}

/* The terminal's view: 80 columns. */
static void muxctl_top_print(FILE *f, json_t *v, int tty)
{
	json_t *p, *c, *gids;
	char name[17];
	size_t i;

	if (tty)
		fputs("\033[H\033[2J", f);
	fprintf(f,
		"rdmacm-muxd up %llds, clients %zu, every %.1fs, sorted by %s%s\n",
		(long long)json_integer_value(json_object_get(v, "uptime_s")),
		json_array_size(json_object_get(v, "clients")),
		json_real_value(json_object_get(v, "interval_s")),
		json_string_value(json_object_get(v, "sorted_by")),
		tty ? " (m i o c r d n u I; q)" : "");
	fprintf(f, "%-20s %-7s %9s %9s %8s\n", "PORT", "STATE", "RX/s", "TX/s",
		"ERRORS");
	json_array_foreach(json_object_get(v, "ports"), i, p)
		fprintf(f, "%-20.20s %-7.7s %9.1f %9.1f %8lld\n",
			json_string_value(json_object_get(p, "name")),
			json_string_value(json_object_get(p, "state")),
			json_real_value(json_object_get(p, "rx_per_s")),
			json_real_value(json_object_get(p, "tx_per_s")),
			(long long)json_integer_value(
				json_object_get(p, "errors")));
	fprintf(f, "\n%6s %-16s %6s %7s %7s %6s %4s %4s %s\n", "ID", "NAME",
		"UID", "IN/s", "OUT/s", "CONNS", "REF", "DROP", "GIDS");
	json_array_foreach(json_object_get(v, "clients"), i, c) {
		gids = json_object_get(c, "gids");
		snprintf(name, sizeof(name), "%s",
			 json_is_string(json_object_get(c, "name"))
				 ? json_string_value(json_object_get(c, "name"))
				 : "-");
		fprintf(f, "%6lld %-16s %6lld %7.1f %7.1f %6lld %4lld %4lld %s",
			(long long)json_integer_value(json_object_get(c, "id")),
			name,
			(long long)json_integer_value(
				json_object_get(c, "uid")),
			json_real_value(json_object_get(c, "in_per_s")),
			json_real_value(json_object_get(c, "out_per_s")),
			(long long)json_integer_value(
				json_object_get(c, "connections")),
			(long long)json_integer_value(
				json_object_get(c, "refusals")),
			(long long)json_integer_value(
				json_object_get(c, "drops")),
			json_array_size(gids)
				? json_string_value(json_array_get(gids, 0))
				: "-");
		if (json_array_size(gids) > 1)
			fprintf(f, " +%zu", json_array_size(gids) - 1);
		fputc('\n', f);
	}
	fflush(f);
}

static double muxctl_top_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The terminal as it was, put back however top ends. */
static struct termios muxctl_top_saved;
static int muxctl_top_raw;

static void muxctl_top_restore(void)
{
	if (muxctl_top_raw)
		tcsetattr(STDIN_FILENO, TCSANOW, &muxctl_top_saved);
	muxctl_top_raw = 0;
}

static void muxctl_top_on_signal(int sig)
{
	muxctl_top_restore();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Keys without Enter, unechoed, when both ends are a terminal. */
static void muxctl_top_keys_on(void)
{
	struct termios t;

	if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO) ||
	    tcgetattr(STDIN_FILENO, &muxctl_top_saved) < 0)
		return;
	t = muxctl_top_saved;
	t.c_lflag &= (tcflag_t) ~(ICANON | ECHO);
	t.c_cc[VMIN] = 0;
	t.c_cc[VTIME] = 0;
	if (tcsetattr(STDIN_FILENO, TCSANOW, &t) < 0)
		return;
	muxctl_top_raw = 1;
	atexit(muxctl_top_restore);
	signal(SIGINT, muxctl_top_on_signal);
	signal(SIGTERM, muxctl_top_on_signal);
}

/* Wait out the interval, taking keys meanwhile: 1 to quit. */
static int muxctl_top_wait(double until, int *sort)
{
	struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
	double left;
	size_t i;
	char key;

	while ((left = until - muxctl_top_now()) > 0) {
		if (!muxctl_top_raw) {
			poll(NULL, 0, (int)(left * 1000) + 1);
			continue;
		}
		if (poll(&pfd, 1, (int)(left * 1000) + 1) <= 0 ||
		    read(STDIN_FILENO, &key, 1) != 1)
			continue;
		if (key == 'q')
			return 1;
		for (i = 0; i < MUXCTL_TOP_NSORTS; i++)
			if (key == muxctl_top_sorts[i].press) {
				*sort = (int)i;
				return 0; /* shown again at once */
			}
	}
	return 0;
}

static json_t *muxctl_top_fetch(const char *path, int timeout_ms)
{
	char *text = muxctl_status_fetch(path, "{\"op\":\"status\"}",
					 timeout_ms);
	json_t *st;

	if (text == NULL)
		return NULL;
	st = json_loads(text, 0, NULL);
	free(text);
	if (st == NULL || !json_is_array(json_object_get(st, "clients"))) {
		fprintf(stderr, "rdmacm-muxctl: top: not a status snapshot\n");
		json_decref(st);
		return NULL;
	}
	return st;
}

static int muxctl_top_usage(void)
{
	fprintf(stderr,
		"rdmacm-muxctl: top [-d SECONDS] [-n COUNT] [-s mads|in|out|conns|refusals|drops|name|uid|id]\n");
	return 2;
}

struct muxctl_top_opts {
	double delay;
	long count; /* refreshes, 0: until quit */
	int sort;
};

static int muxctl_top_args(int argc, char **argv, struct muxctl_top_opts *o)
{
	static const struct option opts[] = {
		{ "delay", required_argument, NULL, 'd' },
		{ "count", required_argument, NULL, 'n' },
		{ "sort", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	int c;

	*o = (struct muxctl_top_opts){ .delay = 1, .sort = 0 };
	optind = 0; /* a fresh scan of top's own words */
	while ((c = getopt_long(argc, argv, "+d:n:s:", opts, NULL)) != -1) {
		errno = 0;
		switch (c) {
		case 'd':
			o->delay = strtod(optarg, &end);
			if (errno || *end || !(o->delay >= 0.1) ||
			    o->delay > 3600)
				return muxctl_top_usage();
			break;
		case 'n':
			o->count = strtol(optarg, &end, 10);
			if (errno || *end || o->count < 1 || o->count > 1000000)
				return muxctl_top_usage();
			break;
		case 's':
			o->sort = muxctl_top_sort_index(optarg);
			if (o->sort < 0)
				return muxctl_top_usage();
			break;
		default: return muxctl_top_usage();
		}
	}
	return optind < argc ? muxctl_top_usage() : 0;
}

/* The first snapshot is the baseline: with -j it is printed as a line
 * of its own (rates over the time since each client connected are not
 * rates), so that a reader knows when the first interval began. */
int muxctl_top_main(const char *path, int timeout_ms, int json_out, int argc,
		    char **argv)
{
	struct muxctl_top_opts o;
	json_t *prev, *cur, *v;
	double t_prev, t_cur;
	long shown = 0;
	char *line;
	int rc = muxctl_top_args(argc, argv, &o);

	if (rc)
		return rc;
	prev = muxctl_top_fetch(path, timeout_ms);
	if (prev == NULL)
		return 1;
	t_prev = muxctl_top_now();
	if (json_out) {
		printf("{\"baseline\":true,\"clients\":%zu}\n",
		       json_array_size(json_object_get(prev, "clients")));
		fflush(stdout);
	} else {
		muxctl_top_keys_on();
	}
	while (o.count == 0 || shown < o.count) {
		if (muxctl_top_wait(t_prev + o.delay, &o.sort))
			break;
		cur = muxctl_top_fetch(path, timeout_ms);
		if (cur == NULL) {
			rc = 1;
			break;
		}
		t_cur = muxctl_top_now();
		v = muxctl_top_view(prev, cur, t_cur - t_prev, o.sort);
		json_decref(prev);
		prev = cur;
		t_prev = t_cur;
		if (v == NULL) {
			rc = 1;
			break;
		}
		if (json_out) {
			line = json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII);
			if (line)
				printf("%s\n", line);
			free(line);
			fflush(stdout);
		} else {
			muxctl_status_printable(v);
			muxctl_top_print(stdout, v, muxctl_top_raw);
		}
		json_decref(v);
		shown++;
	}
	json_decref(prev);
	muxctl_top_restore();
	return rc;
}
