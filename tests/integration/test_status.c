// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The status socket, read-only for everyone, and rdmacm-muxctl, which
 * reads it: its views and its Prometheus metrics.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/integration/harness.h"
#include "common/cm_mad.h"
#include "common/gid.h"
#include "common/wire.h"
#include "protocol/rdmacm_mux_proto.h"

static void test_status_socket_is_read_only(void **state)
{
	struct h_fixture *f = *state;
	struct tclient a;
	json_t *st, *cl;
	int s;

	tc_connect_gid(&a, &f->d, "a", "fd00::1");
	/* Whatever is written to the status socket is never read. */
	s = raw_connect(f->d.status);
	assert_true(s >= 0);
	raw_send_json(s, 1, "{\"op\":\"unregister_gid\",\"gid\":\"fd00::1\"}");
	assert_true(raw_wait_eof(s, H_DEADLINE_MS));
	close(s);
	st = hd_status(&f->d);
	assert_int_equal(json_path_int(st, "routing.gids"), 1);
	assert_int_equal(json_path_int(st, "daemon.protocol_major"), 1);
	assert_true(json_path_int(st, "daemon.uptime_s") >= 0);
	assert_string_equal(json_string_value(
				    json_object_get(json_object_get(st,
								    "daemon"),
						    "version")),
			    "0.1.0");
	assert_int_equal(json_array_size(json_object_get(st, "ports")), 1);
	/* Identity comes from the kernel (SO_PEERCRED), not the client. */
	cl = h_client(st, "a");
	assert_non_null(cl);
	assert_int_equal(json_path_int(cl, "pid"), getpid());
	assert_int_equal(json_path_int(cl, "uid"), getuid());
	assert_int_equal(json_path_int(cl, "gid"), getgid());
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(json_object_get(cl, "gids"),
						   0),
				    "gid")),
			    "fd00::1");
	assert_int_equal(json_path_int(cl, "routing.gids"), 1);
	json_decref(st);
	tc_close(&a);
}

/* len bytes to the status socket, its sending side then shut down or
 * not; the answer read to its end into answer (cap bytes): 0 when it
 * ended in a clean end of file, else -errno (raw_read_to_end()). */
static int status_exchange(const char *path, const char *bytes, size_t len,
			   int shut, char *answer, size_t cap)
{
	int s = raw_connect(path), rc;

	assert_true(s >= 0);
	assert_int_equal(send(s, bytes, len, MSG_NOSIGNAL), (ssize_t)len);
	if (shut)
		assert_int_equal(shutdown(s, SHUT_WR), 0);
	rc = raw_read_to_end(s, answer, cap, H_DEADLINE_MS);
	close(s);
	return rc;
}

/* "One answer, then the connection is closed" (rdmacm-muxd(8)): a clean
 * end of file after the answer, also when the reader sent more than its
 * query (a line over 1024 bytes, or bytes after the line), which af_unix
 * would report as a reset were they left unread. */
static void test_status_closes_cleanly(void **state)
{
	struct h_fixture *f = *state;
	char junk[3000], answer[65536];

	memset(junk, 'x', sizeof(junk));
	assert_int_equal(status_exchange(f->d.status, junk, sizeof(junk), 0,
					 answer, sizeof(answer)),
			 0);
	assert_non_null(strstr(answer, "\"EMSGSIZE\""));
	memcpy(junk, "{\"op\":\"status\"}\n", 16);
	assert_int_equal(status_exchange(f->d.status, junk, sizeof(junk), 0,
					 answer, sizeof(answer)),
			 0);
	assert_non_null(strstr(answer, "\"protocol_major\""));
}

/* A query its sender ends by shutting down its side, without a newline,
 * is answered as that query ("printf QUERY | socat"), not with the
 * default snapshot; with nothing sent, the snapshot.  The page of a
 * client that is connected says so; an id that names no client, and no
 * connections held for one, is ENOENT, not an empty page. */
static void test_query_ended_by_shutdown(void **state)
{
	struct h_fixture *f = *state;
	char answer[65536], query[96];
	struct tclient a;
	json_t *st;

	tc_connect_gid(&a, &f->d, "vm-a", "fd00::1");
	st = hd_status(&f->d);
	snprintf(query, sizeof(query),
		 "{\"op\":\"connections\",\"client\":%lld,\"limit\":5}",
		 (long long)json_integer_value(
			 json_object_get(h_client(st, "vm-a"), "id")));
	json_decref(st);
	assert_int_equal(status_exchange(f->d.status, query, strlen(query), 1,
					 answer, sizeof(answer)),
			 0);
	assert_non_null(strstr(answer, "\"connected\":true"));
	assert_non_null(strstr(answer, "\"total\":0"));
	tc_close(&a);
	assert_true(hd_wait_client_gone(&f->d, "vm-a"));
	assert_int_equal(status_exchange(f->d.status, query, strlen(query), 1,
					 answer, sizeof(answer)),
			 0);
	assert_non_null(strstr(answer, "\"ENOENT\""));
	assert_null(strstr(answer, "\"protocol_major\""));
	assert_int_equal(status_exchange(f->d.status, "", 0, 1, answer,
					 sizeof(answer)),
			 0);
	assert_non_null(strstr(answer, "\"protocol_major\""));
}

/* rdmacm-muxctl metrics: Prometheus' text format, as the prometheus_client
 * library's parser reads it (tests/integration/check_metrics.py), with the
 * daemon's figures and a VM name that needs escaping in a label. */
static void test_metrics(void **state)
{
	struct h_fixture *f = *state;
	struct tclient a;
	char cmd[768], line[512];
	int clients = 0, gids = 0, port_up = 0, named = 0;
	FILE *p;

	if (getenv("RDMACM_MUXCTL") == NULL)
		skip();
	tc_connect_gid(&a, &f->d, "vm\"7", "fd00::1");
	snprintf(
		cmd, sizeof(cmd),
		"%s -S %s metrics | /usr/bin/python3 tests/integration/check_metrics.py",
		getenv("RDMACM_MUXCTL"), f->d.status);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		clients += strcmp(line, "metric rdmacm_mux_clients{} 1\n") == 0;
		gids += strcmp(line, "metric rdmacm_mux_gids{} 1\n") == 0;
		port_up += strncmp(line, "metric rdmacm_mux_port_up{port=\"",
				   32) == 0 &&
			   strncmp(line + 32, h_port0(), strlen(h_port0())) ==
				   0 &&
			   strstr(line, "} 1\n") != NULL;
		/* The parser gives the label back unescaped. */
		named += strstr(line, "rdmacm_mux_client_mads_sent_total{") &&
			 strstr(line, "vm=\"vm\"7\"");
	}
	assert_int_equal(pclose(p), 0);
	assert_int_equal(clients, 1);
	assert_int_equal(gids, 1);
	assert_int_equal(port_up, 1);
	assert_int_equal(named, 1);
	tc_close(&a);
}

/* rdmacm-muxctl ARGS: its standard output in out, its exit status. */
static int muxctl_run(const char *args, char *out, size_t cap)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "%s %s 2>/dev/null", getenv("RDMACM_MUXCTL"),
		 args);
	return h_shell_run(cmd, out, cap);
}

/* rdmacm-muxctl's views: each answers in at most 80 columns, with -j the
 * matching part of the status, and exit codes scripts can rely on (0, 1
 * daemon unreachable, 2 usage). */
static void test_muxctl_views(void **state)
{
	static const char *const views[] = {
		"status", "clients", "ports", "gids", "connections", "counters"
	};
	struct h_fixture *f = *state;
	char args[256], out[16384], *line, *save = NULL;
	struct tclient a;
	json_t *j;
	size_t i;

	if (getenv("RDMACM_MUXCTL") == NULL)
		skip();
	tc_connect_gid(&a, &f->d, "view-a", "fd00::1");
	for (i = 0; i < sizeof(views) / sizeof(views[0]); i++) {
		snprintf(args, sizeof(args), "-S %s %s", f->d.status, views[i]);
		assert_int_equal(muxctl_run(args, out, sizeof(out)), 0);
		if (i < 4) /* the client's or its GID's row */
			assert_true(
				strstr(out, i == 3 ? "client " : "view-a") ||
				strcmp(views[i], "ports") == 0);
		for (line = strtok_r(out, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save))
			assert_true(strlen(line) <= 80);
	}
	snprintf(args, sizeof(args), "-S %s -j clients", f->d.status);
	assert_int_equal(muxctl_run(args, out, sizeof(out)), 0);
	j = json_loads(out, 0, NULL);
	assert_true(json_is_array(j) && json_array_size(j) == 1);
	json_decref(j);
	snprintf(args, sizeof(args), "-S %s gids", f->d.status);
	muxctl_run(args, out, sizeof(out));
	assert_non_null(strstr(out, "fd00::1"));
	snprintf(args, sizeof(args), "-S %s no-such-view", f->d.status);
	assert_int_equal(muxctl_run(args, out, sizeof(out)), 2);
	/* Words it cannot take are usage errors (2), never ignored nor
	 * folded into range: a timeout or watch period out of range, a
	 * client id past 64 bits, a word after a command. */
	{
		static const char *const bad[] = {
			"-t 0 status",
			"-t 5s status",
			"-w 0 status",
			"status extra",
			"connections 18446744073709551617",
			"connections 1 -- -1",
			"connections 1 0 4097",
			"connections 1 0 1 extra",
			"disconnect 1 2",
			"reload now",
			"-S '' status",
			"-A '' reload",
			"top -d 0",
			"top -n 0",
			"top -s nothing",
			"top extra",
		};

		for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			snprintf(args, sizeof(args), "-S %s %s", f->d.status,
				 bad[i]);
			if (muxctl_run(args, out, sizeof(out)) != 2)
				fail_msg("rdmacm-muxctl %s: not a usage error",
					 bad[i]);
		}
	}
	snprintf(args, sizeof(args), "-S %s.none status", f->d.status);
	assert_int_equal(muxctl_run(args, out, sizeof(out)), 1);
	/* No such client: the daemon's ENOENT, exit 1. */
	snprintf(args, sizeof(args), "-S %s connections 999999", f->d.status);
	assert_int_equal(muxctl_run(args, out, sizeof(out)), 1);
	/* An empty $RDMACM_MUX_STATUS is unset: the default socket. */
	{
		char cmd[512];

		snprintf(cmd, sizeof(cmd),
			 "RDMACM_MUX_STATUS= %s status 2>&1 >/dev/null",
			 getenv("RDMACM_MUXCTL"));
		if (h_shell_run(cmd, out, sizeof(out)) != 0 &&
		    !strstr(out, PROTO_DEFAULT_STATUS_SOCKET))
			fail_msg("RDMACM_MUX_STATUS=\"\": %s", out);
	}
	/* --help: the usage, in plain words, every line in 80 columns. */
	assert_int_equal(muxctl_run("--help", out, sizeof(out)), 0);
	assert_true(strncmp(out, "usage: rdmacm-muxctl ", 21) == 0);
	assert_non_null(strstr(out, "--watch SECONDS       show the view"));
	for (line = strtok_r(out, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save))
		assert_true(strlen(line) <= 80);
	tc_close(&a);
}

/* rdmacm-muxctl top -j: a baseline line, then one line per refresh with
 * what each client did in the interval, sorted; top-a sends 20 REQs to
 * top-b between the two snapshots.  The terminal view keeps to 80
 * columns. */
static void test_muxctl_top(void **state)
{
	struct h_fixture *f = *state;
	char cmd[512], args[256], line[8192], *l, *save = NULL;
	struct tclient a, b;
	uint8_t mad[MAD_SIZE];
	json_t *v, *c0, *c1;
	FILE *p;
	int i;

	if (getenv("RDMACM_MUXCTL") == NULL)
		skip();
	tc_connect_gid(&a, &f->d, "top-a", "fd00::1");
	tc_connect_gid(&b, &f->d, "top-b", "fd00::2");
	snprintf(cmd, sizeof(cmd), "%s -S %s -j top -n 1 -d %d -s out",
		 getenv("RDMACM_MUXCTL"), f->d.status, 3 * h_time_scale());
	p = popen(cmd, "r");
	assert_non_null(p);
	/* The baseline is taken: what follows is in the interval. */
	assert_non_null(fgets(line, sizeof(line), p));
	assert_non_null(strstr(line, "\"baseline\":true"));
	for (i = 0; i < 20; i++) {
		h_req(mad, 0x500 + (uint32_t)i, "fd00::1", "fd00::2");
		assert_int_equal(tc_send_sync(&a, "fd00::2", mad), 0);
	}
	assert_true(tc_pump_until(&b, tc_has_rx, 20, H_DEADLINE_MS));
	assert_non_null(fgets(line, sizeof(line), p));
	assert_int_equal(pclose(p), 0);
	v = json_loads(line, 0, NULL);
	assert_non_null(v);
	c0 = json_array_get(json_object_get(v, "clients"), 0);
	c1 = json_array_get(json_object_get(v, "clients"), 1);
	assert_string_equal(json_string_value(json_object_get(c0, "name")),
			    "top-a");
	assert_int_equal(json_integer_value(json_object_get(c0, "mads_out")),
			 20);
	assert_true(json_real_value(json_object_get(c0, "out_per_s")) > 0);
	assert_int_equal(json_integer_value(json_object_get(c0, "connections")),
			 20);
	assert_string_equal(json_string_value(json_object_get(c1, "name")),
			    "top-b");
	assert_int_equal(json_integer_value(json_object_get(c1, "mads_in")),
			 20);
	assert_string_equal(json_string_value(
				    json_array_get(json_object_get(c1, "gids"),
						   0)),
			    "fd00::2");
	json_decref(v);
	snprintf(args, sizeof(args), "-S %s top -n 1 -d 0.2 -s name",
		 f->d.status);
	assert_int_equal(muxctl_run(args, line, sizeof(line)), 0);
	assert_non_null(strstr(line, "top-b"));
	for (l = strtok_r(line, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save))
		assert_true(strlen(l) <= 80);
	tc_close(&a);
	tc_close(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_status_socket_is_read_only,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_status_closes_cleanly,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_query_ended_by_shutdown,
						h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_metrics, h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_muxctl_top, h_setup_daemon,
						h_teardown_daemon),
		cmocka_unit_test_setup_teardown(test_muxctl_views,
						h_setup_daemon,
						h_teardown_daemon),
	};

	signal(SIGPIPE, SIG_IGN);
	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("status", tests, NULL, NULL);
}
