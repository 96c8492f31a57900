// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The attack suite: one client (the attacker) tries every spoof and
 * hijack against another (the victim), which has an established
 * connection and a pending incoming one with a scripted peer.  Each
 * attempt must get its exact refusal and counter, and leave the victim's
 * connections and MADs untouched.  Also: identities outside the policy,
 * the rate limit under a flood, the admin socket, descriptor exhaustion.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/integration/harness.h"
#include "common/cm_mad.h"
#include "common/gid.h"
#include "common/wire.h"
#include "protocol/rdmacm_mux_proto.h"

#define PEER "fd99::1"
static const char *const ports[] = {
	"sim0=fd00::1,fd00::2,fd00::3,fd00::4,fd00::5", NULL
};

static const char policy_text[] =
	"{\"policy\": [\n"
	" {\"match\": {\"uid\": 0}, \"vm\": \"victim\", \"gids\": [\"fd00::1\", \"fd00::2\"]},\n"
	" {\"match\": {\"uid\": 0}, \"vm\": \"attacker\", \"gids\": [\"fd00::3\", \"fd00::4\"],\n"
	"  \"max_gids\": 1, \"max_connections\": 4, \"mad_rate\": 50, \"mad_burst\": 20},\n"
	" {\"match\": {\"uid\": 0}, \"vm\": \"good\", \"gids\": [\"fd00::5\"]}\n"
	"]}\n";

struct fx {
	struct hdaemon d;
	struct simpeer p;
	struct tclient victim, attacker, good;
	char policy[256], admin[256];
	uint32_t victim_host;  /* the victim's established connection */
	uint32_t peer_pending; /* the peer's pending REQ to the victim */
};

static int setup(void **state)
{
	static struct fx f;
	static char pol_arg[300], admin_arg[300];
	static const char *extra[8];
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	char err[256];

	memset(&f, 0, sizeof(f));
	snprintf(f.policy, sizeof(f.policy), "/tmp/rcm-attack-policy.%d",
		 getpid());
	snprintf(f.admin, sizeof(f.admin), "/tmp/rcm-attack-admin.%d",
		 getpid());
	h_write_file(f.policy, policy_text);
	snprintf(pol_arg, sizeof(pol_arg), "--policy=%s", f.policy);
	snprintf(admin_arg, sizeof(admin_arg), "--admin-socket=%s", f.admin);
	extra[0] = pol_arg;
	extra[1] = admin_arg;
	extra[2] = "--socket-mode=0666";
	extra[3] = NULL;
	hd_start(&f.d, NULL, ports, extra);
	simpeer_open(&f.p, &f.d, "peer", PEER);
	assert_int_equal(tc_connect(&f.victim, &f.d, "victim", 1, 0, err,
				    sizeof(err)),
			 0);
	assert_int_equal(tc_register(&f.victim, "fd00::1"), 0);
	assert_int_equal(tc_connect(&f.attacker, &f.d, "attacker", 1, 0, err,
				    sizeof(err)),
			 0);
	assert_int_equal(tc_register(&f.attacker, "fd00::3"), 0);
	assert_int_equal(tc_connect(&f.good, &f.d, "good", 1, 0, err,
				    sizeof(err)),
			 0);
	assert_int_equal(tc_register(&f.good, "fd00::5"), 0);

	/* The victim's established connection with the peer... */
	h_req(m, 0x1234, "fd00::1", PEER);
	assert_int_equal(tc_send_sync(&f.victim, PEER, m), 0);
	assert_true(simpeer_recv(&f.p, r, NULL, H_DEADLINE_MS));
	f.victim_host = wire_get32(r + 24);
	h_mad(m, CM_ATTR_REP, 0x9001, f.victim_host, 1);
	simpeer_send(&f.p, "fd00::1", m);
	assert_true(tc_pump_until(&f.victim, tc_has_rx, 1, H_DEADLINE_MS));
	h_mad(m, CM_ATTR_RTU, 0x1234, 0x9001, 1);
	assert_int_equal(tc_send_sync(&f.victim, PEER, m), 0);
	assert_true(simpeer_recv(&f.p, r, NULL, H_DEADLINE_MS));
	/* ...and a REQ from the peer it has not answered yet. */
	f.peer_pending = 0x9002;
	h_req(m, f.peer_pending, PEER, "fd00::1");
	simpeer_send(&f.p, "fd00::1", m);
	assert_true(tc_pump_until(&f.victim, tc_has_rx, 2, H_DEADLINE_MS));
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (f->victim.mb)
		tc_close(&f->victim);
	if (f->attacker.mb)
		tc_close(&f->attacker);
	if (f->good.mb)
		tc_close(&f->good);
	simpeer_close(&f->p);
	hd_stop(&f->d);
	unlink(f->policy);
	return 0;
}

/* The victim is as it was: its connection established, nothing new
 * delivered to it, nothing from the attacker on the wire. */
static void victim_untouched(struct fx *f, int victim_rx)
{
	uint8_t r[MAD_SIZE];
	json_t *st, *v, *c;
	size_t i;
	int established = 0;

	assert_int_equal(muxbe_ping(f->victim.mb), 0);
	muxbe_process(f->victim.mb);
	assert_int_equal(f->victim.nrx, victim_rx);
	assert_int_equal(simpeer_recv(&f->p, r, NULL, 100), 0);
	st = hd_status(&f->d);
	v = h_client(st, "victim");
	assert_non_null(v);
	json_array_foreach(json_object_get(v, "connections"), i, c)
		if (json_integer_value(json_object_get(c, "host_id")) ==
			    f->victim_host &&
		    strcmp(json_string_value(json_object_get(c, "state")),
			   "established") == 0)
			established = 1;
	assert_true(established);
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(json_object_get(v, "gids"),
						   0),
				    "gid")),
			    "fd00::1");
	json_decref(st);
}

static long long refusals(struct fx *f, const char *reason)
{
	char path[64];

	snprintf(path, sizeof(path), "counters.refusals.%s", reason);
	return hd_status_int(&f->d, path);
}

static void test_gid_hijacks(void **state)
{
	struct fx *f = *state;
	struct gid g;
	json_t *st;

	/* The status shows the policy and each client's rule. */
	st = hd_status(&f->d);
	assert_int_equal(json_path_int(st, "policy.rules"), 3);
	assert_string_equal(json_string_value(
				    json_object_get(json_object_get(st,
								    "policy"),
						    "source")),
			    f->policy);
	assert_int_equal(json_path_int(h_client(st, "victim"), "policy_rule"),
			 1);
	assert_int_equal(json_path_int(h_client(st, "attacker"), "policy_rule"),
			 2);
	json_decref(st);

	gid_parse("fd00::1", &g);
	/* Outside the attacker's policy, and owned by the victim. */
	assert_int_equal(muxbe_register_gid(f->attacker.mb, NULL, g.raw, NULL),
			 -EACCES);
	assert_int_equal(muxbe_unregister_gid(f->attacker.mb, NULL, g.raw),
			 -EACCES);
	gid_parse("fd00::2", &g); /* free, but the victim's by policy */
	assert_int_equal(muxbe_register_gid(f->attacker.mb, NULL, g.raw, NULL),
			 -EACCES);
	gid_parse("fd00::4", &g); /* allowed, but over max_gids (1) */
	assert_int_equal(muxbe_register_gid(f->attacker.mb, NULL, g.raw, NULL),
			 -ENOSPC);
	victim_untouched(f, 2);
}

static void test_mad_spoofs(void **state)
{
	struct fx *f = *state;
	struct muxbe_addr a = { .grh = 1, .remote_qpn = 1, .qkey = GSI_QKEY };
	uint8_t m[MAD_SIZE];
	struct gid g;

	/* A foreign source GID. */
	h_req(m, 0x66, "fd00::1", PEER);
	gid_parse("fd00::1", &g);
	memcpy(a.local_gid, g.raw, 16);
	gid_parse(PEER, &g);
	memcpy(a.remote_gid, g.raw, 16);
	assert_int_equal(muxbe_send_mad_sync(f->attacker.mb, &a, m, MAD_SIZE),
			 -EADDRNOTAVAIL);
	assert_true(refusals(f, "source_gid") == 1);

	/* The victim's connection, by its guest ID and by its host ID. */
	h_mad(m, CM_ATTR_DREQ, 0x1234, 0x9001, 1);
	assert_int_equal(tc_send_sync(&f->attacker, PEER, m), -ENOENT);
	h_mad(m, CM_ATTR_DREQ, f->victim_host, 0x9001, 1);
	assert_int_equal(tc_send_sync(&f->attacker, PEER, m), -ENOENT);
	h_mad(m, CM_ATTR_RTU, 0x1234, 0x9001, 1);
	assert_int_equal(tc_send_sync(&f->attacker, PEER, m), -ENOENT);
	h_mad(m, CM_ATTR_DREP, 0x1234, 0x9001, 1);
	assert_int_equal(tc_send_sync(&f->attacker, PEER, m), -ENOENT);
	/* A REJ of the peer's side of it (REJ of a REP, which the kernel CM
	 * accepts by the Remote Comm ID alone), with and without an ID. */
	h_mad(m, CM_ATTR_REJ, 0x77, 0x9001, 1);
	cm_field_set(m, CM_REJ_MESSAGE_REJECTED, CM_MSG_RESPONSE_REP);
	assert_int_equal(tc_send_sync(&f->attacker, PEER, m), -ENOENT);
	h_mad(m, CM_ATTR_REJ, 0, 0x9001, 1);
	assert_int_equal(tc_send_sync(&f->attacker, PEER, m), -ENOENT);
	/* Answering the REQ that went to the victim. */
	h_mad(m, CM_ATTR_REP, 0x78, f->peer_pending, 1);
	assert_int_equal(tc_send_sync(&f->attacker, PEER, m), -ENOENT);
	h_mad(m, CM_ATTR_MRA, 0x79, f->peer_pending, 1);
	assert_int_equal(tc_send_sync(&f->attacker, PEER, m), -ENOENT);
	h_mad(m, CM_ATTR_REJ, 0, f->peer_pending, 1);
	assert_int_equal(tc_send_sync(&f->attacker, PEER, m), -ENOENT);
	assert_true(refusals(f, "comm_id") == 9);
	victim_untouched(f, 2);
}

static void test_malformed_mads(void **state)
{
	struct fx *f = *state;
	struct muxbe_addr a = { .grh = 1, .remote_qpn = 1, .qkey = GSI_QKEY };
	uint8_t m[MAD_SIZE], buf[PROTO_HDR_SIZE + 64 + 300];
	struct gid g;

	h_req(m, 0x70, "fd00::3", PEER);
	m[MAD_OFF_MGMT_CLASS] = 0x04; /* SA */
	assert_int_equal(tc_send_sync(&f->attacker, PEER, m), -EBADMSG);
	h_req(m, 0x70, "fd00::3", PEER);
	m[MAD_OFF_CLASS_VERSION] = 1;
	assert_int_equal(tc_send_sync(&f->attacker, PEER, m), -EBADMSG);
	h_req(m, 0x70, "fd00::3", PEER);
	m[MAD_OFF_METHOD] = MAD_METHOD_GET;
	assert_int_equal(tc_send_sync(&f->attacker, PEER, m), -EOPNOTSUPP);
	h_mad(m, CM_ATTR_CLASS_PORT_INFO, 0x70, 0, 1);
	assert_int_equal(tc_send_sync(&f->attacker, PEER, m), -ENOMSG);
	h_mad(m, 0x001b, 0x70, 0, 1); /* SAP */
	assert_int_equal(tc_send_sync(&f->attacker, PEER, m), -ENOMSG);
	/* A P_Key index beyond the port's table (the sim port has one). */
	h_req(m, 0x70, "fd00::3", PEER);
	gid_parse("fd00::3", &g);
	memcpy(a.local_gid, g.raw, 16);
	gid_parse(PEER, &g);
	memcpy(a.remote_gid, g.raw, 16);
	a.pkey_index = 1;
	assert_int_equal(muxbe_send_mad_sync(f->attacker.mb, &a, m, MAD_SIZE),
			 -ERANGE);
	a.pkey_index = 0;
	/* Undersize. */
	assert_int_equal(muxbe_send_mad_sync(f->attacker.mb, &a, m, 200),
			 -EMSGSIZE);
	assert_true(refusals(f, "not_cm") == 2);
	assert_true(refusals(f, "method") == 1);
	assert_true(refusals(f, "attribute") == 2);
	assert_true(refusals(f, "pkey_index") == 1);
	assert_true(refusals(f, "size") == 1);
	/* Oversize never gets past the frame decoder: 300 bytes of MAD. */
	{
		int s = raw_connect(f->d.sock), n;
		uint8_t kind, flags, reply[1024];
		uint32_t rid;

		raw_send_json(
			s, 1,
			"{\"op\":\"hello\",\"name\":\"good\",\"protocol\":{\"major\":1,\"minor\":0}}");
		assert_true(raw_recv(s, &kind, &flags, &rid, reply,
				     sizeof(reply), H_DEADLINE_MS) > 0);
		memset(buf, 0, sizeof(buf));
		wire_put16(buf, 0);
		wire_put16(buf + 2, 300);
		assert_int_equal(raw_send(s, PROTO_KIND_MAD, 0, 2, buf,
					  64 + 300),
				 0);
		n = raw_recv(s, &kind, &flags, &rid, reply, sizeof(reply),
			     H_DEADLINE_MS);
		assert_true(n > 0);
		assert_int_equal(rid, 2);
		assert_non_null(strstr((char *)reply, "EMSGSIZE"));
		close(s);
	}
	victim_untouched(f, 2);
}

/* Issue 11, item 7: version numbers out of range are refused; requests
 * before hello count as malformed, and the limit is exact: the 64th is
 * answered, then the connection closes. */
/* A hello that is answered with code, then the connection closed. */
static void hello_refused(struct fx *f, const char *hello, const char *code)
{
	uint8_t kind, flags, buf[1024];
	uint32_t rid;
	int s = raw_connect(f->d.sock);

	assert_true(s >= 0);
	assert_int_equal(raw_send_json(s, 1, hello), 0);
	assert_true(raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf),
			     H_DEADLINE_MS) > 0);
	assert_non_null(strstr((char *)buf, code));
	assert_true(raw_wait_eof(s, H_DEADLINE_MS));
	close(s);
}

static void test_protocol_edges(void **state)
{
	static const char *const bad_hello[] = {
		"{\"op\":\"hello\",\"protocol\":{\"major\":1,\"minor\":-1}}",
		"{\"op\":\"hello\",\"protocol\":{\"major\":-1,\"minor\":0}}",
		"{\"op\":\"hello\",\"protocol\":{\"major\":1,\"minor\":65536}}",
	};
	struct fx *f = *state;
	uint8_t kind, flags, buf[1024];
	long long errors0 = hd_status_int(&f->d, "counters.protocol_errors");
	uint32_t rid;
	size_t i;
	int s, n;

	for (i = 0; i < sizeof(bad_hello) / sizeof(bad_hello[0]); i++)
		hello_refused(f, bad_hello[i], "\"EINVAL\"");
	s = raw_connect(f->d.sock);
	assert_true(s >= 0);
	for (i = 1; i <= 64; i++) {
		assert_int_equal(raw_send_json(s, (uint32_t)i,
					       "{\"op\":\"ping\"}"),
				 0);
		n = raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf),
			     H_DEADLINE_MS);
		assert_true(n > 0);
		assert_int_equal(rid, i);
		assert_non_null(strstr((char *)buf, "\"ENOTCONN\""));
	}
	/* The 64th was answered; nothing more is read. */
	assert_true(raw_wait_eof(s, H_DEADLINE_MS));
	close(s);
	assert_int_equal(hd_status_int(&f->d, "counters.protocol_errors") -
				 errors0,
			 64);
	victim_untouched(f, 2);
}

/* However a client's bytes are cut into writes, every frame is taken, in
 * order: 200 in one write (past what one read handles before the other
 * clients' turn), then 20 a byte at a time. */
static void test_frames_across_reads(void **state)
{
	struct fx *f = *state;
	uint8_t kind, flags, buf[1024], frames[220 * 64];
	const char *ping = "{\"op\":\"ping\"}";
	size_t len = 0, one = PROTO_HDR_SIZE + strlen(ping), i;
	uint32_t rid;
	int s, n;

	s = raw_hello_ok(f->d.sock, "attacker");
	for (i = 0; i < 220; i++) {
		proto_header_encode(frames + len, PROTO_KIND_JSON, 0,
				    (uint32_t)(100 + i),
				    (uint32_t)strlen(ping));
		memcpy(frames + len + PROTO_HDR_SIZE, ping, strlen(ping));
		len += one;
	}
	assert_int_equal(send(s, frames, 200 * one, MSG_NOSIGNAL),
			 (ssize_t)(200 * one));
	for (i = 200 * one; i < len; i++)
		assert_int_equal(send(s, frames + i, 1, MSG_NOSIGNAL), 1);
	for (i = 0; i < 220; i++) {
		n = raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf),
			     H_DEADLINE_MS);
		assert_true(n > 0);
		assert_int_equal(rid, 100 + i);
		assert_non_null(strstr((char *)buf, "\"ok\":true"));
	}
	close(s);
	victim_untouched(f, 2);
}

static void test_flood_is_rate_limited(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE];
	uint64_t t0, worst = 0, dt;
	int i, refused;

	/* RTUs for a connection it does not have: each would be refused
	 * anyway; the rate limit must refuse them first. */
	h_mad(m, CM_ATTR_RTU, 0x55, 0x1, 1);
	for (i = 0; i < 600; i++) {
		assert_int_equal(tc_send(&f->attacker, PEER, m), 0);
		if (i % 60 == 0) {
			t0 = h_now_ms();
			assert_int_equal(muxbe_ping(f->good.mb), 0);
			dt = h_now_ms() - t0;
			if (dt > worst)
				worst = dt;
		}
	}
	assert_true(
		tc_pump_until(&f->attacker, tc_has_sends, 600, H_DEADLINE_MS));
	refused = f->attacker.sends_failed;
	assert_int_equal(refused, 600);
	/* At 50/s with a burst of 20, nearly all of them hit the limit. */
	/* (With slow builds the flood takes longer and earns more tokens.) */
	assert_true(refusals(f, "rate") >= 600 - 20 - 100 * h_time_scale());
	assert_true(refusals(f, "rate") + refusals(f, "comm_id") == 600);
	print_message(
		"flood: %lld rate-limited, worst ping of a good client %llu ms\n",
		refusals(f, "rate"), (unsigned long long)worst);
	assert_true(worst < 100u * (unsigned)h_time_scale());
	/* 600 refusals, but the log holds a handful of lines for them. */
	{
		char line[512];
		int lines = 0;
		FILE *log = fopen(f->d.log, "r");

		assert_non_null(log);
		while (fgets(line, sizeof(line), log))
			if (strstr(line, "(attacker,") &&
			    strstr(line, "MAD refused"))
				lines++;
		fclose(log);
		print_message("flood: %d log lines for 600 refusals\n", lines);
		assert_true(lines >= 1 && lines <= 15);
	}
	/* The good client's MADs still go. */
	h_req(m, 0x5151, "fd00::5", PEER);
	assert_int_equal(tc_send_sync(&f->good, PEER, m), 0);
	{
		uint8_t r[MAD_SIZE];

		assert_true(simpeer_recv(&f->p, r, NULL, H_DEADLINE_MS));
	}
	victim_untouched(f, 2);
}

static void test_identity_outside_policy(void **state)
{
	struct fx *f = *state;
	struct tclient t;
	char err[256];
	pid_t pid;
	int status;

	/* A VM name the policy does not bind to this uid. */
	assert_true(tc_connect(&t, &f->d, "mallory", 1, 0, err, sizeof(err)) <
		    0);
	assert_non_null(strstr(err, "no policy rule"));
	/* A uid no rule mentions: refused before its hello. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct tclient c;
		char e[256] = "";

		if (setgid(65534) || setuid(65534))
			_exit(3);
		if (tc_connect(&c, &f->d, "victim", 1, 0, e, sizeof(e)) == 0)
			_exit(1);
		_exit(strstr(e, "not allowed by policy") ? 0 : 2);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_true(hd_status_int(&f->d, "counters.clients_refused_policy") ==
		    1);
	victim_untouched(f, 2);
}

static int tc_gone(struct tclient *tc, int arg)
{
	(void)arg;
	return tc->disconnected;
}

static void test_admin_socket(void **state)
{
	struct fx *f = *state;
	struct tclient t;
	char reply[1024], err[256], req_text[128];
	long long attacker_id;
	json_t *st;
	pid_t pid;
	int status;

	st = hd_status(&f->d);
	attacker_id = json_path_int(h_client(st, "attacker"), "id");
	json_decref(st);
	/* Root disconnects the attacker; it is told, and it is gone. */
	snprintf(req_text, sizeof(req_text),
		 "{\"op\":\"disconnect_client\",\"client_id\":%lld}",
		 attacker_id);
	assert_true(h_admin(f->admin, req_text, reply, sizeof(reply)) > 0);
	assert_non_null(strstr(reply, "\"ok\":true"));
	assert_true(tc_pump_until(&f->attacker, tc_gone, 0, H_DEADLINE_MS));
	assert_true(h_admin(f->admin, req_text, reply, sizeof(reply)) > 0);
	assert_non_null(strstr(reply, "ENOENT"));
	assert_true(h_admin(f->admin, "{\"op\":\"format_disk\"}", reply,
			    sizeof(reply)) > 0);
	assert_non_null(strstr(reply, "EOPNOTSUPP"));
	/* A reload drops the "good" rule: new "good" clients are refused,
	 * the connected one keeps working. */
	h_write_file(
		f->policy,
		"{\"policy\": [{\"match\": {\"uid\": 0}, \"vm\": \"victim\"}]}");
	assert_true(h_admin(f->admin, "{\"op\":\"reload_policy\"}", reply,
			    sizeof(reply)) > 0);
	assert_non_null(strstr(reply, "\"ok\":true"));
	assert_true(tc_connect(&t, &f->d, "good", 1, 0, err, sizeof(err)) < 0);
	assert_int_equal(muxbe_ping(f->good.mb), 0);
	/* A broken policy file is refused, and the old one stays. */
	h_write_file(f->policy, "{\"policy\": [{\"match\": {}}]}");
	assert_true(h_admin(f->admin, "{\"op\":\"reload_policy\"}", reply,
			    sizeof(reply)) > 0);
	assert_non_null(strstr(reply, "match takes one key"));
	assert_int_equal(tc_connect(&t, &f->d, "victim", 1, 0, err,
				    sizeof(err)),
			 0);
	tc_close(&t);
	/* A request that ends at the sender's shutdown, without a newline,
	 * is answered; a connection that sends none is told so and closed,
	 * not held for ever. */
	assert_true(h_admin_raw(f->admin, "{\"op\":\"format_disk\"}", 1,
				H_DEADLINE_MS, reply, sizeof(reply)) > 0);
	assert_non_null(strstr(reply, "EOPNOTSUPP"));
	assert_true(h_admin_raw(f->admin, "", 0, 10000, reply, sizeof(reply)) >
		    0);
	assert_non_null(strstr(reply, "ETIMEDOUT"));
	/* Only root may use the admin socket (and the socket is 0600). */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char r[256];

		if (setgid(65534) || setuid(65534))
			_exit(3);
		_exit(h_admin(f->admin, "{\"op\":\"reload_policy\"}", r,
			      sizeof(r)) > 0
			      ? 1
			      : 0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_true(hd_status_int(&f->d, "counters.admin_actions") == 6);
	/* Every action is in the daemon's log with who asked. */
	{
		char line[512], want[128];
		int seen_kick = 0, seen_reload = 0;
		FILE *log = fopen(f->d.log, "r");

		assert_non_null(log);
		snprintf(want, sizeof(want), "disconnected client %lld",
			 attacker_id);
		while (fgets(line, sizeof(line), log)) {
			if (strstr(line, "admin: uid 0 pid ") &&
			    strstr(line, want))
				seen_kick = 1;
			if (strstr(line, "admin: uid 0 pid ") &&
			    strstr(line, "reloaded the policy"))
				seen_reload++;
		}
		fclose(log);
		assert_true(seen_kick);
		assert_int_equal(seen_reload, 2);
	}
	victim_untouched(f, 2);
}

/* Every descriptor below the daemon's limit is in use. */
static int daemon_out_of_fds(pid_t pid, int limit)
{
	char path[64];
	struct dirent *de;
	DIR *dir;
	int used = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (dir == NULL)
		return 0;
	while ((de = readdir(dir)) != NULL)
		if (de->d_name[0] != '.' && atoi(de->d_name) < limit)
			used++;
	closedir(dir);
	return used == limit;
}

static int daemon_out_of_40_fds(void *pid)
{
	return daemon_out_of_fds(*(pid_t *)pid, 40);
}

/* Nothing but the listener is open on the status socket's path: no
 * connection accepted, none waiting to be (/proc/net/unix lists both
 * under the listener's path; the listener alone is __SO_ACCEPTCON). */
static int status_socket_idle(void *path)
{
	char line[512], sock_path[256];
	unsigned flags;
	int others = 0;
	FILE *f = fopen("/proc/net/unix", "r");

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %*s %*s %x %*s %*s %*s %255s", &flags,
			   sock_path) == 2 &&
		    !(flags & 0x10000) && strcmp(sock_path, path) == 0)
			others++;
	fclose(f);
	return others == 0;
}

/* Out of descriptors, the daemon pauses accepting on every socket (the
 * clients', the status and the admin one) instead of spinning, and takes
 * connections again once descriptors are free. */
static void test_fd_exhaustion_does_not_spin(void **state)
{
	static const char *const one[] = { "sim0=fd00::1", NULL };
	static char admin_path[64], admin_arg[80];
	/* No hello timeout within the test: one closing a silent client
	 * would free a descriptor and let the queued ones in, on a machine
	 * slow enough (TSan on a loaded CI) to take 5 s to get here. */
	static const char *extra[] = { admin_arg, "--hello-timeout-ms=600000",
				       NULL };
	struct hdaemon d;
	struct tclient t;
	char path[64], stat_line[1024], err[256], reply[256];
	unsigned long long u0, s0, u1, s1;
	struct pollfd queued[2];
	int fds[66], n = 0, i;
	FILE *fp;
	json_t *st;

	(void)state;
	snprintf(admin_path, sizeof(admin_path), "/tmp/rcm-nofile-admin.%d",
		 getpid());
	snprintf(admin_arg, sizeof(admin_arg), "--admin-socket=%s", admin_path);
	setenv("RCM_TEST_NOFILE", "40", 1);
	hd_start(&d, NULL, one, extra);
	unsetenv("RCM_TEST_NOFILE");
	/* The harness's readiness probe connects as soon as the socket
	 * listens; the daemon may accept it only now (late, under TSan) and
	 * hold it until it reads its end: out of descriptors with that one
	 * counted is not out of them. */
	assert_true(h_wait_until(status_socket_idle, d.status, H_DEADLINE_MS));
	for (i = 0; i < 64; i++) {
		fds[n] = raw_connect(d.sock);
		if (fds[n] >= 0)
			n++;
	}
	assert_true(h_wait_until(daemon_out_of_40_fds, &d.pid, H_DEADLINE_MS));
	/* Queued while the daemon is out of descriptors. */
	fds[n] = raw_connect(d.status);
	assert_true(fds[n++] >= 0);
	fds[n] = raw_connect(admin_path);
	assert_true(fds[n++] >= 0);
	poll(NULL, 0, 300);
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)d.pid);
#define READ_TIMES(u, s)                                                       \
	do {                                                                   \
		fp = fopen(path, "r");                                         \
		assert_non_null(fp);                                           \
		assert_non_null(fgets(stat_line, sizeof(stat_line), fp));      \
		fclose(fp);                                                    \
		assert_int_equal(sscanf(strrchr(stat_line, ')') + 2,           \
					"%*c %*d %*d %*d %*d %*d %*u %*u %*u " \
					"%*u %*u %llu %llu",                   \
					&u, &s),                               \
				 2);                                           \
	} while (0)
	READ_TIMES(u0, s0);
	poll(NULL, 0, 1000);
	READ_TIMES(u1, s1);
	print_message(
		"daemon CPU while out of descriptors: %llu ticks in 1 s\n",
		(u1 + s1) - (u0 + s0));
	assert_true((u1 + s1) - (u0 + s0) < 20); /* under 20% of a core */
	/* Both were still waiting: the measurement covered their sockets. */
	queued[0] = (struct pollfd){ .fd = fds[n - 2], .events = POLLIN };
	queued[1] = (struct pollfd){ .fd = fds[n - 1], .events = POLLIN };
	assert_int_equal(poll(queued, 2, 0), 0);
	for (i = 0; i < n; i++)
		close(fds[i]);
	assert_int_equal(tc_connect(&t, &d, "late", 1, 0, err, sizeof(err)), 0);
	tc_close(&t);
	st = hd_status(&d);
	assert_non_null(st);
	json_decref(st);
	assert_true(h_admin(admin_path, "{\"op\":\"reload_policy\"}", reply,
			    sizeof(reply)) > 0);
	hd_stop(&d);
}

/* The sockets get the owner, group and mode asked for; a frame above
 * --max-frame is refused from its header. */
static void test_socket_permissions_and_frame_limit(void **state)
{
	static const char *const one[] = { "sim0=fd00::1", NULL };
	static const char *const extra[] = {
		"--socket-group=65534", "--socket-mode=0660",
		"--status-group=65534", "--status-mode=0640",
		"--max-frame=1024",     NULL
	};
	struct hdaemon d;
	struct stat st;
	uint8_t hdr[PROTO_HDR_SIZE], buf[256], kind, flags;
	uint32_t rid;
	int s;

	(void)state;
	hd_start(&d, NULL, one, extra);
	assert_int_equal(stat(d.sock, &st), 0);
	assert_int_equal(st.st_gid, 65534);
	assert_int_equal(st.st_mode & 0777, 0660);
	assert_int_equal(stat(d.status, &st), 0);
	assert_int_equal(st.st_gid, 65534);
	assert_int_equal(st.st_mode & 0777, 0640);
	s = raw_connect(d.sock);
	proto_header_encode(hdr, PROTO_KIND_JSON, 0, 1, 1025);
	assert_int_equal(send(s, hdr, sizeof(hdr), MSG_NOSIGNAL),
			 (ssize_t)sizeof(hdr));
	assert_true(raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf),
			     H_DEADLINE_MS) > 0);
	assert_non_null(strstr((char *)buf, "EMSGSIZE"));
	assert_true(raw_wait_eof(s, H_DEADLINE_MS));
	close(s);
	hd_stop(&d);
}

static int count_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	int c, n = 0;

	assert_non_null(f);
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

/* One request in QEMU's 360-byte message on a fresh connection to path:
 * register gid; the response's error code. */
static int qemu_register_once(const char *path, const char *gid)
{
	uint8_t msg[360] = { 0 }, resp[360];
	struct gid g;
	size_t got = 0;
	ssize_t n;
	uint32_t code;
	int fd = raw_connect(path);

	assert_true(fd >= 0);
	assert_int_equal(gid_parse(gid, &g), 0);
	memcpy(msg + 8, g.raw, 16); /* msg_type 0 (request), op 0 (register) */
	assert_int_equal(write(fd, msg, sizeof(msg)), sizeof(msg));
	while (got < sizeof(resp)) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };

		assert_int_equal(poll(&pf, 1, H_DEADLINE_MS), 1);
		n = read(fd, resp + got, sizeof(resp) - got);
		assert_true(n > 0);
		got += (size_t)n;
	}
	close(fd);
	memcpy(&code, resp + 24, sizeof(code));
	return (int)code;
}

/* A daemon of its own on sim0 (fd00::1) that also serves QEMU's protocol
 * at qemu_path (cap bytes, made from tag). */
static void start_with_qemu(struct hdaemon *d, const char *tag, char *qemu_path,
			    size_t cap)
{
	static const char *const sim0[] = { "sim0=fd00::1", NULL };
	static char qemu_arg[300];
	static const char *extra[] = { qemu_arg, NULL };

	snprintf(qemu_path, cap, "/tmp/rcm-qemu-%s.%d", tag, getpid());
	snprintf(qemu_arg, sizeof(qemu_arg), "--qemu-socket=sim0=%s",
		 qemu_path);
	hd_start(d, NULL, sim0, extra);
}

/* A tenant that reconnects buys no new allowance of log lines: 1,000
 * native clients with two refused registrations each, and 1,000 QEMU
 * connections with one each, add at most 50 lines to the log. */
static void test_reconnects_buy_no_log_lines(void **state)
{
	char qemu_path[256], reg[128], buf[1024];
	uint8_t kind, flags;
	struct hdaemon d;
	struct tclient owner;
	uint32_t rid;
	int lines0, i, s, k;

	(void)state;
	start_with_qemu(&d, "churn", qemu_path, sizeof(qemu_path));
	tc_connect_gid(&owner, &d, "owner", "fd00::1");
	lines0 = count_lines(d.log);
	for (i = 0; i < 1000; i++) {
		s = raw_hello_ok(d.sock, "churn");
		for (k = 0; k < 2; k++) {
			/* Not in the port's table: refused, and worth a line. */
			snprintf(
				reg, sizeof(reg),
				"{\"op\":\"register_gid\",\"gid\":\"fd00::%d\"}",
				9 + k);
			assert_int_equal(raw_send_json(s, 2 + (uint32_t)k, reg),
					 0);
			assert_true(raw_recv(s, &kind, &flags, &rid,
					     (uint8_t *)buf, sizeof(buf),
					     H_DEADLINE_MS) > 0);
			assert_null(strstr(buf, "\"ok\":true"));
		}
		close(s);
	}
	if (count_lines(d.log) - lines0 > 50)
		fail_msg("1,000 native reconnects added %d lines",
			 count_lines(d.log) - lines0);
	lines0 = count_lines(d.log);
	/* Another client's GID: EACCES (3), a line each time it is worth
	 * one. */
	for (i = 0; i < 1000; i++)
		assert_int_equal(qemu_register_once(qemu_path, "fd00::1"), 3);
	if (count_lines(d.log) - lines0 > 50)
		fail_msg("1,000 QEMU connections added %d lines",
			 count_lines(d.log) - lines0);
	tc_close(&owner);
	hd_stop(&d);
}

/* QEMU registers a guest's GID before the host adds its address, so the
 * daemon takes one that is not in the port's table yet; but never one
 * that cannot be an address of the port (the zero GID, a multicast
 * group), which a tenant could otherwise hold against every other. */
static void test_qemu_registers_only_unicast(void **state)
{
	char qemu_path[256];
	struct hdaemon d;

	(void)state;
	start_with_qemu(&d, "gids", qemu_path, sizeof(qemu_path));
	assert_int_equal(qemu_register_once(qemu_path, "::"), 3);
	assert_int_equal(qemu_register_once(qemu_path, "ff02::1"), 3);
	assert_int_equal(qemu_register_once(qemu_path, "ff0e::1:2"), 3);
	/* Not in the table yet, and unicast: taken (as QEMU needs). */
	assert_int_equal(qemu_register_once(qemu_path, "fd00::7"), 0);
	assert_int_equal(hd_status_int(&d, "counters.clients_accepted"), 4);
	hd_stop(&d);
}

/* Names reach logs, the status and terminals: control characters and
 * oversize names are refused at hello, and churn is not logged. */
static void test_untrusted_text(void **state)
{
	static const char *const bad_names[] = {
		"victim\\nrdmacm-muxd: forged line",
		"\\u001b[2Jvictim",
		"vic\\u0085tim", /* C1: NEL */
		"vic\\u007ftim",
		/* Bidirectional overrides and isolates reorder what an admin
		 * reads; line and paragraph separators break lines. */
		"vic\\u202etim",
		"vic\\u2066tim",
		"vic\\u2028tim",
		"vic\\u2029tim",
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	};
	struct fx *f = *state;
	uint8_t gid[16];
	char hello[256];
	long long errors0;
	int lines0, i;

	for (i = 0; i < (int)(sizeof(bad_names) / sizeof(bad_names[0])); i++) {
		snprintf(
			hello, sizeof(hello),
			"{\"op\":\"hello\",\"protocol\":{\"major\":1,\"minor\":0},\"name\":\"%s\"}",
			bad_names[i]);
		hello_refused(f, hello, "\"EINVAL\"");
	}
	/* 63 bytes is a name (no rule matches it: EACCES, not EINVAL). */
	snprintf(
		hello, sizeof(hello),
		"{\"op\":\"hello\",\"protocol\":{\"major\":1,\"minor\":0},\"name\":\"%.63s\"}",
		bad_names[8]);
	hello_refused(f, hello, "\"EACCES\"");

	/* 10,000 registrations and unregistrations: a bounded log. */
	lines0 = count_lines(f->d.log);
	assert_int_equal(gid_parse("fd00::5", (struct gid *)gid), 0);
	for (i = 0; i < 5000; i++) {
		assert_int_equal(muxbe_unregister_gid(f->good.mb, h_port0(),
						      gid),
				 0);
		assert_int_equal(muxbe_register_gid(f->good.mb, h_port0(), gid,
						    NULL),
				 0);
	}
	assert_true(count_lines(f->d.log) - lines0 <= 10);

	/* A tenant that reconnects for a fresh allowance of warnings gets
	 * none: 50 connections, each closed for 64 malformed requests. */
	lines0 = count_lines(f->d.log);
	errors0 = hd_status_int(&f->d, "counters.protocol_errors");
	for (i = 0; i < 50; i++) {
		int s = raw_hello_ok(f->d.sock, "attacker"), j;

		for (j = 0; j < 64; j++)
			if (raw_send_json(s, (uint32_t)j + 2, "{\"op\":") < 0)
				break;
		assert_true(raw_wait_eof(s, H_DEADLINE_MS));
		close(s);
	}
	assert_true(hd_status_int(&f->d, "counters.protocol_errors") -
			    errors0 >=
		    50 * 64);
	assert_true(count_lines(f->d.log) - lines0 <= 20);
	victim_untouched(f, 2);
}

/* rdmacm-muxctl against a status socket that serves hostile strings (an
 * old or subverted daemon): no control character reaches the terminal. */
static void test_muxctl_escapes(void **state)
{
	static const char doc[] =
		"{\"daemon\":{\"version\":\"x\\u001b]0;pwned\\u0007\",\"pid\":1,\"socket\":\"/s\\n FORGED\",\"status_socket\":\"/t\"},\"ports\":[{\"index\":0,\"name\":\"p\\u009b1m\",\"kind\":\"sim\",\"state\":\"active\",\"gid_table\":[]}],\"clients\":[{\"id\":1,\"name\":\"\\u001b[2Jvm\",\"protocol\":\"v1\",\"counters\":{},\"gids\":[],\"connections\":[]}],\"routing\":{},\"counters\":{},\"policy\":{\"source\":\"\\r\",\"rules\":1}}\n";
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	char out[8192], path[108];
	int ls, cs, pfd[2], status, json_mode;
	const char *muxctl = getenv("RDMACM_MUXCTL");
	size_t len;
	ssize_t r;
	pid_t pid;

	(void)state;
	assert_non_null(muxctl);
	snprintf(path, sizeof(path), "/tmp/rcm-fake-status.%d", getpid());
	for (json_mode = 0; json_mode < 2; json_mode++) {
		unlink(path);
		snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
		ls = socket(AF_UNIX, SOCK_STREAM, 0);
		assert_int_equal(bind(ls, (struct sockaddr *)&sun, sizeof(sun)),
				 0);
		assert_int_equal(listen(ls, 1), 0);
		assert_int_equal(pipe(pfd), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			dup2(pfd[1], 1);
			close(pfd[0]);
			execl(muxctl, muxctl, "-S", path,
			      json_mode ? "-j" : "status", (char *)NULL);
			_exit(127);
		}
		close(pfd[1]);
		cs = accept(ls, NULL, NULL);
		assert_true(cs >= 0);
		/* Its query, read as the daemon does (unread bytes at close
		 * would reset the connection). */
		{
			char q[256];
			size_t ql = 0;

			while (ql < sizeof(q) &&
			       (r = read(cs, q + ql, sizeof(q) - ql)) > 0) {
				ql += (size_t)r;
				if (memchr(q, '\n', ql))
					break;
			}
		}
		assert_int_equal(write(cs, doc, sizeof(doc) - 1),
				 (ssize_t)sizeof(doc) - 1);
		close(cs);
		len = 0;
		while (len < sizeof(out) - 1 &&
		       (r = read(pfd[0], out + len, sizeof(out) - 1 - len)) > 0)
			len += (size_t)r;
		out[len] = '\0';
		close(pfd[0]);
		close(ls);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		for (size_t k = 0; k < len; k++) {
			unsigned char c = (unsigned char)out[k];

			assert_false(c < 0x20 && c != '\n');
			assert_false(c == 0x7f || c >= 0x80);
		}
		assert_null(strstr(out, "\n FORGED"));
		assert_non_null(strcasestr(out, json_mode ? "\\u001b[2Jvm"
							  : "\\x1b[2Jvm"));
	}
	unlink(path);
}

/* The attacker (uid 65534) in a child: it holds silent connections up to
 * its uid's share, is refused beyond it (200 times), then sees its
 * connections closed at the hello deadline and can connect again. */
static int fair_attacker(struct hdaemon *d, int ready_fd, int go_fd)
{
	int held[4], i, s, n;
	uint8_t kind, flags, buf[512];
	struct tclient t;
	uint32_t rid;
	char c, e[256] = "";

	if (setgid(65534) || setuid(65534))
		return 10;
	for (i = 0; i < 4; i++) {
		held[i] = raw_connect(d->sock);
		if (held[i] < 0)
			return 11;
	}
	for (i = 0; i < 200; i++) {
		s = raw_connect(d->sock);
		if (s < 0)
			return 12;
		n = raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf),
			     H_DEADLINE_MS);
		if (n <= 0 || strstr((char *)buf, "\"EUSERS\"") == NULL)
			return 13;
		close(s);
	}
	if (write(ready_fd, "R", 1) != 1 || read(go_fd, &c, 1) != 1)
		return 14;
	/* The deadline closes what never said hello, with a reason. */
	for (i = 0; i < 4; i++) {
		n = raw_recv(held[i], &kind, &flags, &rid, buf, sizeof(buf),
			     2 * H_DEADLINE_MS);
		if (n <= 0 || strstr((char *)buf, "\"ETIMEDOUT\"") == NULL)
			return 15;
		if (!raw_wait_eof(held[i], H_DEADLINE_MS))
			return 16;
		close(held[i]);
	}
	if (tc_connect(&t, d, "anyvm", 0, 0, e, sizeof(e)) != 0)
		return 17;
	tc_close(&t);
	return 0;
}

static void test_fair_admission(void **state)
{
	static const char pol[] =
		"{\"policy\": [\n"
		" {\"match\": {\"uid\": 0}, \"vm\": \"capped\", \"max_clients\": 1},\n"
		" {\"match\": {\"uid\": 0}},\n"
		" {\"match\": {\"uid\": 65534}}\n"
		"]}\n";
	char policy[128], pol_arg[160], timeout_arg[64], err[256];
	const char *extra[8];
	struct hdaemon d;
	struct tclient good, capped, capped2;
	int ready[2], go[2], status, lines0;
	char c;
	pid_t pid;

	(void)state;
	snprintf(policy, sizeof(policy), "/tmp/rcm-fair-policy.%d", getpid());
	h_write_file(policy, pol);
	snprintf(pol_arg, sizeof(pol_arg), "--policy=%s", policy);
	snprintf(timeout_arg, sizeof(timeout_arg), "--hello-timeout-ms=%d",
		 3000 * h_time_scale());
	extra[0] = pol_arg;
	extra[1] = "--socket-mode=0666";
	extra[2] = "--max-clients=8";
	extra[3] = "--max-clients-per-uid=4";
	extra[4] = timeout_arg;
	extra[5] = NULL;
	hd_start(&d, NULL, ports, extra);
	lines0 = count_lines(d.log);
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(go), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(fair_attacker(&d, ready[1], go[0]));
	assert_int_equal(read(ready[0], &c, 1), 1);

	/* The attacker holds its whole share (none of it timed out yet):
	 * another tenant connects. */
	assert_int_equal(tc_connect(&good, &d, "good", 1, 0, err, sizeof(err)),
			 0);
	assert_int_equal(hd_status_int(&d, "counters.hello_timeouts"), 0);
	/* A rule's own limit: one "capped" VM at a time. */
	assert_int_equal(tc_connect(&capped, &d, "capped", 1, 0, err,
				    sizeof(err)),
			 0);
	assert_true(tc_connect(&capped2, &d, "capped", 1, 0, err, sizeof(err)) <
		    0);
	assert_non_null(strstr(err, "allows 1 clients at once"));
	assert_int_equal(hd_status_int(&d,
				       "counters.clients_refused_uid_limit"),
			 200);
	assert_int_equal(hd_status_int(&d,
				       "counters.clients_refused_rule_limit"),
			 1);
	/* 200 refusals, a bounded log. */
	assert_true(count_lines(d.log) - lines0 <= 15);

	assert_int_equal(write(go[1], "G", 1), 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(hd_status_int(&d, "counters.hello_timeouts"), 4);
	tc_close(&good);
	tc_close(&capped);
	hd_stop(&d);
	unlink(policy);
}

/* ---- the status socket cannot be blinded ---------------------------- */

#define BLIND_CLIENTS 200
#define BLIND_MAPPINGS 256
#define BLIND_READERS 10
#define BLIND_HELLOS 60

struct status_reader {
	pthread_t thread;
	const char *path;
	atomic_int *stop;
	long queries;
	size_t last_len;
};

/* The status socket's default query, as a reader sends it. */
static const char status_query[] = "{\"op\":\"status\"}\n";

/* A full status query, read to the end: no cmocka here (threads). */
static void *status_reader_loop(void *arg)
{
	struct status_reader *r = arg;
	char *buf = malloc(1 << 20);
	size_t len;
	ssize_t n;
	int fd;

	while (buf && !atomic_load(r->stop)) {
		fd = raw_connect(r->path);
		if (fd < 0)
			continue;
		if (send(fd, status_query, sizeof(status_query) - 1,
			 MSG_NOSIGNAL) == (ssize_t)sizeof(status_query) - 1) {
			len = 0;
			while ((n = read(fd, buf, 1 << 20)) > 0)
				len += (size_t)n;
			r->last_len = len;
			r->queries++;
		}
		close(fd);
	}
	free(buf);
	return NULL;
}

/* Connect and complete hello; the time it took, in microseconds. */
static uint64_t timed_hello(struct hdaemon *d)
{
	struct timespec a, b;
	int s;

	clock_gettime(CLOCK_MONOTONIC, &a);
	s = raw_hello_ok(d->sock, "timed");
	clock_gettime(CLOCK_MONOTONIC, &b);
	close(s);
	/* Whole nanoseconds first: tv_nsec alone may go backwards. */
	return (uint64_t)((b.tv_sec - a.tv_sec) * 1000000000ll +
			  (b.tv_nsec - a.tv_nsec)) /
	       1000u;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void hello_times(struct hdaemon *d, uint64_t *p50, uint64_t *p95,
			uint64_t *max)
{
	uint64_t t[BLIND_HELLOS];
	int i;

	for (i = 0; i < BLIND_HELLOS; i++)
		t[i] = timed_hello(d);
	qsort(t, BLIND_HELLOS, sizeof(t[0]), cmp_u64);
	*p50 = t[BLIND_HELLOS / 2];
	*p95 = t[BLIND_HELLOS * 95 / 100];
	*max = t[BLIND_HELLOS - 1];
}

/* 200 clients with 256 mappings each, 10 status readers querying all the
 * time: a client's hello is not held up; the document is bounded and
 * paged; readers that do not read are dropped; one uid cannot hold the
 * status connections. */
static void test_status_cannot_be_blinded(void **state)
{
	static const char *const many_gids[] = { "sim0=fd00::1*200", NULL };
	static struct muxbe *mb[BLIND_CLIENTS];
	const char *extra[] = { "--status-timeout-ms=1000",
				"--status-mode=0666", "--max-clients=600",
				NULL };
	struct status_reader readers[BLIND_READERS];
	struct muxbe_options o = { .timeout_ms = H_DEADLINE_MS };
	struct muxbe_addr a = { .grh = 1,
				.hop_limit = 64,
				.remote_qpn = GSI_QPN,
				.qkey = GSI_QKEY };
	uint64_t b50, b95, bmax, l50, l95, lmax;
	uint8_t m[MAD_SIZE];
	char gid[64], name[32], err[256];
	atomic_int stop = 0;
	struct hdaemon d;
	json_t *st, *cl, *page;
	struct gid g;
	int i, k, fds[40], pid_status;
	pid_t pid, parent;

	(void)state;
	hd_start(&d, NULL, many_gids, extra);
	o.socket_path = d.sock;
	o.errbuf = err;
	o.errbuf_len = sizeof(err);
	assert_int_equal(gid_parse(PEER, &g), 0);
	memcpy(a.remote_gid, g.raw, 16);
	for (i = 0; i < BLIND_CLIENTS; i++) {
		snprintf(name, sizeof(name), "vm%d", i);
		o.name = name;
		assert_int_equal(muxbe_connect(&o, &mb[i]), 0);
		snprintf(gid, sizeof(gid), "fd00::%x", i + 1);
		assert_int_equal(gid_parse(gid, &g), 0);
		assert_int_equal(muxbe_register_gid(mb[i], h_port0(), g.raw,
						    &a.port),
				 0);
		assert_int_equal(muxbe_register_qpn(mb[i], h_port0(), h_qpn()),
				 0);
		memcpy(a.local_gid, g.raw, 16);
		for (k = 0; k < BLIND_MAPPINGS; k++) {
			h_req(m, (uint32_t)(i * 1000 + k + 1), gid, PEER);
			assert_int_equal(muxbe_send_mad(mb[i], &a, m, MAD_SIZE,
							NULL),
					 0);
		}
	}
	assert_true(hd_wait_status_at_least(&d, "routing.comm_ids",
					    BLIND_CLIENTS * BLIND_MAPPINGS,
					    6 * H_DEADLINE_MS));

	/* Bounded: 64 listed per client, all counted, the rest paged. */
	st = hd_status(&d);
	cl = h_client(st, "vm7");
	assert_non_null(cl);
	assert_int_equal(json_array_size(json_object_get(cl, "connections")),
			 64);
	assert_int_equal(json_path_int(cl, "connections_total"),
			 BLIND_MAPPINGS);
	/* And 4,096 in all (clients in order of id): the answer's size
	 * does not grow with the clients; the last one is counted only. */
	{
		size_t listed = 0, j;
		json_t *c;

		json_array_foreach(json_object_get(st, "clients"), j, c)
			listed += json_array_size(
				json_object_get(c, "connections"));
		assert_int_equal(listed, 4096);
		cl = h_client(st, "vm199");
		assert_non_null(cl);
		assert_int_equal(json_array_size(
					 json_object_get(cl, "connections")),
				 0);
		assert_int_equal(json_path_int(cl, "connections_total"),
				 BLIND_MAPPINGS);
	}
	{
		char q[128];
		json_int_t id = json_integer_value(json_object_get(cl, "id"));

		snprintf(
			q, sizeof(q),
			"{\"op\":\"connections\",\"client\":%lld,\"offset\":200,\"limit\":100}",
			(long long)id);
		page = hd_status_query(&d, q);
		assert_true(json_is_true(json_object_get(page, "ok")));
		assert_int_equal(json_path_int(page, "total"), BLIND_MAPPINGS);
		assert_int_equal(json_array_size(
					 json_object_get(page, "connections")),
				 56);
		json_decref(page);
		/* The same page through rdmacm-muxctl: 56 rows. */
		{
			char cmd[512], line[256];
			int rows = 0;
			FILE *p;

			snprintf(cmd, sizeof(cmd),
				 "%s -S %s connections %lld 200 100",
				 getenv("RDMACM_MUXCTL"), d.status,
				 (long long)id);
			p = popen(cmd, "r");
			assert_non_null(p);
			while (fgets(line, sizeof(line), p))
				rows += strstr(line, "req_sent") != NULL;
			assert_int_equal(pclose(p), 0);
			assert_int_equal(rows, 56);
		}
		page = hd_status_query(&d, "{\"op\":\"unregister_gid\"}");
		assert_false(json_is_true(json_object_get(page, "ok")));
		json_decref(page);
	}
	json_decref(st);

	/* Hello with and without ten readers querying all the time. */
	hello_times(&d, &b50, &b95, &bmax);
	for (i = 0; i < BLIND_READERS; i++) {
		readers[i] = (struct status_reader){ .path = d.status,
						     .stop = &stop };
		assert_int_equal(pthread_create(&readers[i].thread, NULL,
						status_reader_loop,
						&readers[i]),
				 0);
	}
	while (readers[0].queries == 0)
		usleep(1000);
	hello_times(&d, &l50, &l95, &lmax);
	atomic_store(&stop, 1);
	for (i = 0; i < BLIND_READERS; i++)
		pthread_join(readers[i].thread, NULL);
	printf("status document: %zu bytes, %ld queries by reader 0\n",
	       readers[0].last_len, readers[0].queries);
	printf("hello, us: alone p50 %llu p95 %llu max %llu; with %d readers p50 %llu p95 %llu max %llu\n",
	       (unsigned long long)b50, (unsigned long long)b95,
	       (unsigned long long)bmax, BLIND_READERS, (unsigned long long)l50,
	       (unsigned long long)l95, (unsigned long long)lmax);
	assert_true(readers[0].queries > 0);
	/* A few ms at most (a scheduler tick on this 2-vCPU machine). */
	assert_true(l95 <= b95 + 5000u * (unsigned)h_time_scale());
	/* Readers that read all along were never taken for slow ones,
	 * however long the status thread kept them waiting; nor is one
	 * that takes 4 KiB every 100 ms for three seconds.  Dropped, it
	 * would reach the end of what its socket holds (about a dozen such
	 * reads) within the 30. */
	{
		char buf[4096];
		ssize_t n = 1;
		int fd = raw_connect(d.status), reads = 0;

		assert_true(fd >= 0);
		assert_int_equal(send(fd, status_query,
				      sizeof(status_query) - 1, MSG_NOSIGNAL),
				 (ssize_t)sizeof(status_query) - 1);
		usleep(300 * 1000); /* the answer fills the socket */
		while (reads++ < 30 && (n = read(fd, buf, sizeof(buf))) > 0)
			usleep(100 * 1000);
		assert_true(n > 0);
		close(fd);
	}
	assert_int_equal(hd_status_int(&d, "counters.status.dropped_slow"), 0);

	/* Readers that never read: dropped after the timeout.  Those
	 * of one uid beyond its share: refused at once.  Another uid's
	 * query is answered all along. */
	parent = getpid();
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Gone with the test, even one that fails before its kill
		 * (set after setuid(), which clears it). */
		if (setgid(65534) || setuid(65534) ||
		    prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
			_exit(10);
		for (i = 0; i < 40; i++) {
			fds[i] = raw_connect(d.status);
			if (fds[i] < 0 ||
			    send(fds[i], status_query, sizeof(status_query) - 1,
				 MSG_NOSIGNAL) < 0)
				_exit(11);
			/* Small buffers: the answer cannot be taken by the
			 * kernel on the reader's behalf. */
			k = 4096;
			setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &k,
				   sizeof(k));
		}
		pause();
		_exit(0);
	}
	{
		/* The status thread builds each accepted reader its 1.7 MB
		 * answer before it reaches the next connection: on a loaded
		 * machine that takes a while (the wait ends when done). */
		assert_true(hd_wait_status_at_least(&d,
						    "counters.status.refused",
						    24, 6 * H_DEADLINE_MS));
		assert_int_equal(hd_status_int(&d, "counters.status.refused"),
				 24);
		assert_true(
			hd_wait_status_at_least(&d,
						"counters.status.dropped_slow",
						16, 6 * H_DEADLINE_MS));
		assert_int_equal(hd_status_int(&d,
					       "counters.status.dropped_slow"),
				 16);
	}
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &pid_status, 0), pid);

	for (i = 0; i < BLIND_CLIENTS; i++)
		muxbe_close(mb[i]);
	hd_stop(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_gid_hijacks, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_mad_spoofs, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_malformed_mads, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_protocol_edges, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_frames_across_reads, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_flood_is_rate_limited,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_identity_outside_policy,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_admin_socket, setup,
						teardown),
		cmocka_unit_test(test_fd_exhaustion_does_not_spin),
		cmocka_unit_test(test_socket_permissions_and_frame_limit),
		cmocka_unit_test_setup_teardown(test_untrusted_text, setup,
						teardown),
		cmocka_unit_test(test_muxctl_escapes),
		cmocka_unit_test(test_fair_admission),
		cmocka_unit_test(test_status_cannot_be_blinded),
		cmocka_unit_test(test_reconnects_buy_no_log_lines),
		cmocka_unit_test(test_qemu_registers_only_unicast),
	};

	signal(SIGPIPE, SIG_IGN);
	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	if (getenv("RCM_TEST_UMAD_PORT"))
		return 0; /* the scripted peer lives on the sim fabric */
	return cmocka_run_group_tests_name("attacks", tests, NULL, NULL);
}
