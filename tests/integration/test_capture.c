// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * rdmacm-muxctl capture (issue 45): a capture of a connection with a peer
 * (REQ, REP, RTU, DREQ, DREP), a rejected one (REQ, REJ) and a MAD the
 * daemon refuses, read by stock tshark: every MAD dissected as RoCE v2 CM
 * with its comm ID, and the daemon's verdict as the packet's comment.
 * And what may start one: the admin socket only, its limits checked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/integration/harness.h"
#include "common/cm_mad.h"
#include "common/wire.h"

#define PEER "fd99::1"
/* rdmacm-muxd(8): captures at once. */
#define CAPTURE_TEST_SESSIONS 4
static const char *const ports[] = { "sim0=fd00::1,fd00::2", NULL };

struct fx {
	struct hdaemon d;
	struct simpeer p;
	struct tclient a;
	char admin[256];
	char file[256];
};

static int setup(void **state)
{
	static struct fx f;
	static char admin_arg[300];
	static const char *extra[2];
	char err[256];

	memset(&f, 0, sizeof(f));
	snprintf(f.admin, sizeof(f.admin), "/tmp/rcm-capture-admin.%d",
		 getpid());
	snprintf(f.file, sizeof(f.file), "/tmp/rcm-capture.%d.pcapng",
		 getpid());
	snprintf(admin_arg, sizeof(admin_arg), "--admin-socket=%s", f.admin);
	extra[0] = admin_arg;
	extra[1] = NULL;
	hd_start(&f.d, NULL, ports, extra);
	simpeer_open(&f.p, &f.d, "peer", PEER);
	assert_int_equal(tc_connect(&f.a, &f.d, "vm-a", 1, 0, err, sizeof(err)),
			 0);
	assert_int_equal(tc_register(&f.a, "fd00::1"), 0);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	tc_close(&f->a);
	simpeer_close(&f->p);
	hd_stop(&f->d);
	if (getenv("KEEP_CAPTURE") == NULL)
		unlink(f->file);
	return 0;
}

/* The MADs of the test, 14 of them as the capture sees them. */
static void traffic(struct fx *f)
{
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	uint32_t h;

	/* A connection and its end: out REQ, in REP, out RTU, out DREQ,
	 * in DREP. */
	h_req(m, 0x1234, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	h = wire_get32(r + 24);
	h_mad(m, CM_ATTR_REP, 0x900a, h, wire_get64(r + 8));
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, 1, CM_ATTR_REP);
	h_mad(m, CM_ATTR_RTU, 0x1234, 0x900a, 1);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_RTU, r);
	h_mad(m, CM_ATTR_DREQ, 0x1234, 0x900a, 2);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_DREQ, r);
	h_mad(m, CM_ATTR_DREP, 0x900a, h, wire_get64(r + 8));
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, 2, CM_ATTR_DREP);
	/* A rejected one: out REQ, in REJ. */
	h_req(m, 0x5678, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f->a, PEER, m), 0);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	h_mad(m, CM_ATTR_REJ, 0x900b, wire_get32(r + 24), wire_get64(r + 8));
	simpeer_send(&f->p, "fd00::1", m);
	tc_expect(&f->a, 3, CM_ATTR_REJ);
	/* And one the daemon refuses: an RTU of no connection. */
	h_mad(m, CM_ATTR_RTU, 0x7777, 0x9999, 3);
	assert_true(tc_send_sync(&f->a, PEER, m) < 0);
}

/* Lines of tshark's fields (tab-separated) for the capture file. */
static int tshark_lines(const char *file, char lines[][512], int max)
{
	char cmd[512];
	FILE *p;
	int n = 0;

	snprintf(cmd, sizeof(cmd),
		 "tshark -r %s -T fields -E separator=/t -e _ws.col.Protocol "
		 "-e _ws.col.Info -e infiniband.cm.req -e frame.comment "
		 "2>/dev/null",
		 file);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (n < max && fgets(lines[n], 512, p))
		n++;
	assert_int_equal(pclose(p), 0);
	return n;
}

static void test_tshark_reads_a_capture(void **state)
{
	struct fx *f = *state;
	char cmd[768], line[512], lines[16][512];
	FILE *p;
	int n;

	if (getenv("RDMACM_MUXCTL") == NULL ||
	    system("command -v tshark >/dev/null 2>&1") != 0)
		skip();
	snprintf(cmd, sizeof(cmd), "%s -A %s capture -c 8 -s 60 -w %s 2>&1",
		 getenv("RDMACM_MUXCTL"), f->admin, f->file);
	p = popen(cmd, "r");
	assert_non_null(p);
	/* Once it says so, the capture runs: the traffic is in it. */
	assert_non_null(fgets(line, sizeof(line), p));
	assert_non_null(strstr(line, "capturing every MAD"));
	traffic(f);
	assert_non_null(fgets(line, sizeof(line), p));
	assert_non_null(strstr(line, "8 MADs (count), 0 lost"));
	assert_int_equal(pclose(p), 0);
	n = tshark_lines(f->file, lines, 16);
	assert_int_equal(n, 8);
	/* Dissected as RoCE v2 CM, the daemon's verdict beside each. */
	assert_non_null(strstr(lines[0], "RRoCE\tCM: ConnectRequest"));
	assert_non_null(strstr(lines[0], "out sim0: sent by client"));
	assert_non_null(strstr(lines[0], "(vm-a)"));
	assert_non_null(strstr(lines[1], "CM: ConnectReply"));
	assert_non_null(strstr(lines[1], "in sim0: delivered to client"));
	assert_non_null(strstr(lines[2], "CM: ReadyToUse"));
	assert_non_null(strstr(lines[3], "CM: DisconnectRequest"));
	assert_non_null(strstr(lines[4], "CM: DisconnectReply"));
	assert_non_null(strstr(lines[5], "CM: ConnectRequest"));
	assert_non_null(strstr(lines[6], "CM: ConnectReject"));
	assert_non_null(strstr(lines[7], "refused client"));
	assert_non_null(strstr(lines[7], "ENOENT"));
	/* The REQ's comm ID as it went on the wire: the host's, not the
	 * guest's 0x1234. */
	assert_null(strstr(lines[0], "0x00001234"));
	assert_non_null(strstr(lines[0], "\t0x"));
}

/* The admin socket's capture request: bad filters and limits refused,
 * a fifth capture at once refused (EBUSY), each logged with who. */
static void test_capture_requests_are_checked(void **state)
{
	static const char *const bad[] = {
		"{\"op\":\"capture\",\"count\":0}",
		"{\"op\":\"capture\",\"count\":\"7\"}",
		"{\"op\":\"capture\",\"seconds\":100000}",
		"{\"op\":\"capture\",\"client_id\":-1}",
		"{\"op\":\"capture\",\"vm\":\"\"}",
		"{\"op\":\"capture\",\"gid\":\"not a gid\"}",
		"{\"op\":\"capture\",\"vm\":\"a\",\"gid\":\"fd00::1\"}",
	};
	struct fx *f = *state;
	char reply[512], log[65536];
	int fds[CAPTURE_TEST_SESSIONS], i;
	size_t k;

	for (k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		assert_true(h_admin(f->admin, bad[k], reply, sizeof(reply)) >
			    0);
		if (strstr(reply, "\"EINVAL\"") == NULL)
			fail_msg("%s: %s", bad[k], reply);
	}
	for (i = 0; i < CAPTURE_TEST_SESSIONS; i++) {
		fds[i] = h_admin_stream(f->admin,
					"{\"op\":\"capture\",\"vm\":\"vm-a\"}",
					reply, sizeof(reply));
		assert_true(fds[i] >= 0);
		assert_non_null(strstr(reply, "\"ok\":true"));
	}
	assert_true(h_admin(f->admin, "{\"op\":\"capture\"}", reply,
			    sizeof(reply)) > 0);
	assert_non_null(strstr(reply, "\"EBUSY\""));
	for (i = 0; i < CAPTURE_TEST_SESSIONS; i++)
		close(fds[i]);
	hd_read_log(&f->d, log, sizeof(log));
	assert_non_null(strstr(log, "captures VM \"vm-a\""));
}

static uint64_t barrier_us(struct tclient *tc)
{
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	tc_barrier(tc);
	clock_gettime(CLOCK_MONOTONIC, &b);
	return (uint64_t)(b.tv_sec - a.tv_sec) * 1000000u +
	       (uint64_t)((b.tv_nsec - a.tv_nsec) / 1000);
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

static uint64_t median_barrier_us(struct tclient *tc)
{
	uint64_t us[21];
	int i;

	for (i = 0; i < 21; i++)
		us[i] = barrier_us(tc);
	qsort(us, 21, sizeof(us[0]), cmp_u64);
	return us[10];
}

/* A capture whose reader does not read, under a flood: the daemon goes
 * on as before (another client's round trips as they were), and the
 * MADs the reader could not take are lost, counted and said at the end,
 * every one of the count accounted for. */
static void test_a_stuck_reader_costs_the_daemon_nothing(void **state)
{
	enum { FLOOD = 14000 };
	struct fx *f = *state;
	struct tclient b;
	uint8_t m[MAD_SIZE];
	char reply[512], buf[65536], *end;
	uint64_t before, during;
	unsigned long long captured = 0, lost = 0;
	size_t len = 0;
	ssize_t n;
	int fd, i;

	tc_connect_gid(&b, &f->d, "vm-b", "fd00::2");
	before = median_barrier_us(&b);
	fd = h_admin_stream(f->admin,
			    "{\"op\":\"capture\",\"client_id\":1,"
			    "\"count\":14000,\"seconds\":600}",
			    reply, sizeof(reply));
	assert_true(fd >= 0);
	assert_non_null(strstr(reply, "\"ok\":true"));
	for (i = 0; i < FLOOD; i++) {
		h_req(m, 0x10000 + (uint32_t)i, "fd00::1", PEER);
		tc_send_sync(&f->a, PEER, m);
	}
	during = median_barrier_us(&b);
	print_message("round trip %llu us before, %llu us with the reader "
		      "stuck\n",
		      (unsigned long long)before, (unsigned long long)during);
	assert_true(during <= 4 * before + 2000);
	/* Now read it all: the end says what was lost. */
	for (;;) {
		n = read(fd, buf + len, sizeof(buf) - 1 - len);
		assert_true(n > 0);
		len += (size_t)n;
		buf[len] = '\0';
		end = strstr(buf, "{\"end\":true");
		if (end && strchr(end, '\n'))
			break;
		/* Keep only the last partial line. */
		end = strrchr(buf, '\n');
		if (end) {
			len = strlen(end + 1);
			memmove(buf, end + 1, len + 1);
		}
	}
	end = strstr(buf, "{\"end\":true");
	assert_int_equal(sscanf(strstr(end, "\"captured\":"),
				"\"captured\":%llu,\"lost\":%llu", &captured,
				&lost),
			 2);
	print_message("captured %llu, lost %llu\n", captured, lost);
	assert_true(lost > 0);
	assert_int_equal(captured + lost, FLOOD);
	close(fd);
	tc_close(&b);
}

/* A record is one JSON object a line whatever the names in it: a VM
 * name with quotes, a backslash and UTF-8 comes back as it was, and
 * every field muxctl reads is there. */
static void test_a_record_is_json_whatever_the_names(void **state)
{
	static const char name[] = "vm \"q\" \\ \xc3\xa4";
	struct fx *f = *state;
	struct tclient b;
	uint8_t m[MAD_SIZE];
	char reply[512], req[256], line[4096], *nl, *quoted;
	size_t len = 0;
	json_t *o, *n;
	ssize_t got;
	int fd;

	tc_connect_gid(&b, &f->d, name, "fd00::2");
	n = json_string(name);
	quoted = json_dumps(n, JSON_ENCODE_ANY);
	assert_non_null(quoted);
	snprintf(req, sizeof(req), "{\"op\":\"capture\",\"vm\":%s,\"count\":1}",
		 quoted);
	free(quoted);
	json_decref(n);
	fd = h_admin_stream(f->admin, req, reply, sizeof(reply));
	assert_true(fd >= 0);
	assert_non_null(strstr(reply, "\"ok\":true"));
	h_req(m, 0x77, "fd00::2", PEER);
	assert_int_equal(tc_send_sync(&b, PEER, m), 0);
	while ((nl = memchr(line, '\n', len)) == NULL) {
		got = read(fd, line + len, sizeof(line) - 1 - len);
		assert_true(got > 0);
		len += (size_t)got;
	}
	*nl = '\0';
	o = json_loads(line, 0, NULL);
	assert_non_null(o);
	assert_string_equal(json_string_value(json_object_get(o, "vm")), name);
	assert_string_equal(json_string_value(json_object_get(o, "dir")),
			    "out");
	assert_string_equal(json_string_value(json_object_get(o, "src")),
			    "fd00::2");
	assert_string_equal(json_string_value(json_object_get(o, "dst")), PEER);
	assert_string_equal(json_string_value(json_object_get(o, "port")),
			    "sim0");
	assert_true(json_integer_value(json_object_get(o, "client")) > 0);
	assert_true(json_integer_value(json_object_get(o, "sec")) > 0);
	assert_true(json_is_integer(json_object_get(o, "nsec")));
	assert_true(json_string_length(json_object_get(o, "verdict")) > 0);
	assert_int_equal(json_string_length(json_object_get(o, "mad")),
			 2 * MAD_SIZE);
	assert_int_equal(json_integer_value(json_object_get(o, "qpn")), 1);
	assert_true(json_is_integer(json_object_get(o, "pkey_index")));
	assert_true(json_is_integer(json_object_get(o, "hop_limit")));
	json_decref(o);
	close(fd);
	tc_close(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_tshark_reads_a_capture,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_capture_requests_are_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_a_stuck_reader_costs_the_daemon_nothing, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			test_a_record_is_json_whatever_the_names, setup,
			teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
