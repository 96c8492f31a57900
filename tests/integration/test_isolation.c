// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * What tenants share is divided: each test puts one client's (or one
 * peer's) worst case beside another client and shows that the other
 * pays nothing for it.  The shared thing is named in each test's
 * comment, as rdmacm-muxd(8) SECURITY lists it.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/integration/harness.h"
#include "common/cm_mad.h"
#include "common/gid.h"
#include "common/hash.h"
#include "common/wire.h"
#include "protocol/rdmacm_mux_proto.h"

#define PEER "fd99::1"

static const char ping_json[] = "{\"op\":\"ping\"}";

/* A daemon on one worker, with a policy (text) in its directory. */
static void start_with_policy(struct hdaemon *d, char *path, size_t len,
			      const char *text)
{
	static const char *extra[] = { "--workers", "1", "--policy", NULL,
				       NULL };
	char dir[] = "/tmp/rcm-isolation.XXXXXX";

	assert_non_null(mkdtemp(dir));
	snprintf(path, len, "%s/policy.json", dir);
	h_write_file(path, text);
	extra[3] = path;
	hd_start(d, NULL, h_one_port, extra);
}

/* One client's pipelined pings, written back to back for as long as the
 * attack lasts while a second thread reads the replies: the client never
 * pauses, and its socket never fills (the daemon never stops reading it
 * for a full output queue). */
struct pipeliner {
	int fd;
	uint64_t until_ms;
	_Atomic int writing;
	_Atomic uint64_t sent, replies;
};

static void *pipeliner_write(void *arg)
{
	struct pipeliner *p = arg;
	uint8_t batch[256 * (PROTO_HDR_SIZE + sizeof(ping_json) - 1)], *b;
	size_t one = PROTO_HDR_SIZE + sizeof(ping_json) - 1, i, off;
	ssize_t n;

	for (i = 0; i < 256; i++) {
		b = batch + i * one;
		proto_header_encode(b, PROTO_KIND_JSON, 0, (uint32_t)i + 2,
				    sizeof(ping_json) - 1);
		memcpy(b + PROTO_HDR_SIZE, ping_json, sizeof(ping_json) - 1);
	}
	while (h_now_ms() < p->until_ms) {
		for (off = 0; off < sizeof(batch); off += (size_t)n) {
			n = send(p->fd, batch + off, sizeof(batch) - off,
				 MSG_NOSIGNAL);
			if (n <= 0)
				goto out;
		}
		atomic_fetch_add(&p->sent, 256);
	}
out:
	atomic_store(&p->writing, 0);
	return NULL;
}

static void *pipeliner_read(void *arg)
{
	struct pipeliner *p = arg;
	size_t one = PROTO_HDR_SIZE + sizeof("{\"ok\":true}") - 1;
	uint8_t buf[65536];
	uint64_t got = 0;
	struct pollfd pfd = { .fd = p->fd, .events = POLLIN };
	ssize_t n;

	/* Until the writer is done and every reply it asked for is in (or
	 * the daemon stops answering for a second). */
	for (;;) {
		if (!atomic_load(&p->writing) &&
		    atomic_load(&p->replies) >= atomic_load(&p->sent))
			break;
		if (poll(&pfd, 1, 1000) <= 0 && !atomic_load(&p->writing))
			break;
		n = recv(p->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			break;
		if (n > 0) {
			got += (uint64_t)n;
			/* Replies are all alike: count them by their size. */
			atomic_store(&p->replies, got / one);
		}
	}
	return NULL;
}

/* A ping's round trip on fd, in microseconds. */
static uint64_t ping_us(int fd, uint32_t rid)
{
	uint8_t kind, flags, buf[256];
	uint32_t got_rid;
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	assert_int_equal(raw_send_json(fd, rid, ping_json), 0);
	assert_true(raw_recv(fd, &kind, &flags, &got_rid, buf, sizeof(buf),
			     H_DEADLINE_MS + 10000) > 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	assert_int_equal(got_rid, rid);
	assert_non_null(strstr((char *)buf, "\"ok\":true"));
	return (uint64_t)(b.tv_sec - a.tv_sec) * 1000000u +
	       (uint64_t)((b.tv_nsec - a.tv_nsec) / 1000);
}

/*
 * A worker thread: a client that pipelines control requests without a
 * pause (here pings, at the rate the machine allows, its replies read
 * at once) shares the only worker with a victim; the victim's pings keep
 * their latency (one turn of the attacker's at most: 64 frames), where
 * the worker used to serve the attacker until it paused.  The attack
 * lasts four times the bound, so that a victim held until it ends
 * cannot pass.
 */
static void test_pipelining_client_leaves_its_worker_to_others(void **state)
{
	const uint64_t bound_us = 250000u * (uint64_t)h_time_scale();
	struct hdaemon d;
	struct pipeliner p = { .writing = 1 };
	pthread_t wr, rd;
	uint64_t worst = 0, us;
	int victim, rounds = 0;
	char policy[256];

	(void)state;
	/* The attacker's requests unbounded: it takes all it can. */
	start_with_policy(&d, policy, sizeof(policy),
			  "{\"policy\": [\n"
			  " {\"match\": {\"uid\": 0}, \"vm\": \"attacker\","
			  " \"request_rate\": 0},\n"
			  " {\"match\": {\"uid\": 0}, \"vm\": \"victim\"}\n"
			  "]}\n");
	victim = raw_hello_ok(d.sock, "victim");
	p.fd = raw_hello_ok(d.sock, "attacker");
	ping_us(victim, 2); /* the victim's path is warm */
	p.until_ms = h_now_ms() + 4 * bound_us / 1000;
	assert_int_equal(pthread_create(&rd, NULL, pipeliner_read, &p), 0);
	assert_int_equal(pthread_create(&wr, NULL, pipeliner_write, &p), 0);
	/* The victim's pings while the attack lasts. */
	while (h_now_ms() + 10 < p.until_ms) {
		us = ping_us(victim, 100 + (uint32_t)rounds++);
		if (us > worst)
			worst = us;
		usleep(5000);
	}
	pthread_join(wr, NULL);
	pthread_join(rd, NULL);
	print_message("victim: %d pings, worst %llu us (bound %llu); "
		      "attacker: %llu pings sent, %llu answered\n",
		      rounds, (unsigned long long)worst,
		      (unsigned long long)bound_us,
		      (unsigned long long)atomic_load(&p.sent),
		      (unsigned long long)atomic_load(&p.replies));
	/* The attack was one: the attacker got far more served than the
	 * victim asked for, every request answered, and still the victim
	 * waited for none of it. */
	assert_true(atomic_load(&p.replies) > 100u * (uint64_t)rounds);
	assert_true(atomic_load(&p.replies) == atomic_load(&p.sent));
	assert_true(rounds >= 5);
	assert_true(worst < bound_us);
	close(p.fd);
	close(victim);
	hd_stop(&d);
}

/*
 * A client's control requests are bounded, as its MADs are: one that
 * pipelines pings under its rule's request_rate (here 10,000 a second,
 * a burst of 1,000; unbounded, the test above has a million answered in
 * a second) has them answered at that rate, none refused (its input
 * waits), and the pacing is counted.
 */
static void test_requests_are_paced_at_the_rule_rate(void **state)
{
	struct hdaemon d;
	struct pipeliner p = { .writing = 1 };
	pthread_t wr, rd;
	uint64_t t0, ms, answered, most;
	char policy[256];

	(void)state;
	start_with_policy(&d, policy, sizeof(policy),
			  "{\"policy\": [\n"
			  " {\"match\": {\"uid\": 0}, \"vm\": \"attacker\","
			  " \"request_rate\": 10000, \"request_burst\": 1000}\n"
			  "]}\n");
	p.fd = raw_hello_ok(d.sock, "attacker");
	t0 = h_now_ms();
	p.until_ms = t0 + 500;
	assert_int_equal(pthread_create(&rd, NULL, pipeliner_read, &p), 0);
	assert_int_equal(pthread_create(&wr, NULL, pipeliner_write, &p), 0);
	pthread_join(wr, NULL);
	pthread_join(rd, NULL);
	ms = h_now_ms() - t0;
	answered = atomic_load(&p.replies);
	/* The daemon's clock is the coarse one (4 ms a tick): a few ticks
	 * of slack, 1% of the run. */
	most = 1000 + 10000 * (ms + 20) / 1000;
	print_message("%llu pings answered in %llu ms (at most %llu), "
		      "%lld pacings\n",
		      (unsigned long long)answered, (unsigned long long)ms,
		      (unsigned long long)most,
		      hd_status_int(&d, "counters.requests_paced"));
	assert_true(answered <= most);
	/* Held back, not starved: at full speed (not under valgrind) at
	 * least half the rate got through. */
	if (h_time_scale() == 1)
		assert_true(answered >= 5000 * ms / 1000);
	assert_true(hd_status_int(&d, "counters.requests_paced") > 0);
	/* Nothing refused: what the reader saw were replies to pings. */
	assert_int_equal(hd_status_int(&d, "counters.protocol_errors"), 0);
	close(p.fd);
	hd_stop(&d);
}

/* The peer's side of the fabric, read as fast as it comes (the sim
 * fabric's queue to a peer holds 10 datagrams), counting the MADs of one
 * attribute until told to stop. */
struct peer_reader {
	struct simpeer *sp;
	uint16_t attr;
	_Atomic int stop;
	_Atomic unsigned got;
};

static void *peer_read(void *arg)
{
	struct peer_reader *r = arg;
	uint8_t mad[MAD_SIZE];

	while (!atomic_load(&r->stop))
		if (simpeer_recv(r->sp, mad, NULL, 50) &&
		    cm_mad_attr_id(mad) == r->attr)
			atomic_fetch_add(&r->got, 1);
	return NULL;
}

/* What the sim wire lost on the first port (a peer's full queue). */
static long long wire_dropped(struct hdaemon *d)
{
	json_t *st = hd_status(d);
	long long v = json_path_int(json_array_get(json_object_get(st, "ports"),
						   0),
				    "counters.wire_dropped");

	json_decref(st);
	return v;
}

static int answers_settled(void *arg)
{
	struct hdaemon *d = arg;

	return hd_status_int(d, "counters.answers.dreq_abandoned") +
		       hd_status_int(d, "counters.answers.limited") +
		       hd_status_int(d, "counters.answers.failed") >=
	       300;
}

/*
 * The daemon's own answers: what it owes the peers of a client that went
 * away (a DREQ for each of its connections) is not a flood to budget.  A
 * client with 300 established connections to one peer closes its socket:
 * all 300 DREQs leave, paced (a burst, then a steady rate), none
 * dropped; before, the per-source budget kept 44 of them for ever, and
 * those connections stayed up at the peer.
 */
static void test_a_gone_clients_peers_are_all_told(void **state)
{
	static struct tclient tc;
	struct peer_reader r = { .attr = CM_ATTR_DREQ };
	uint8_t m[MAD_SIZE], got[MAD_SIZE];
	struct simpeer sp;
	struct hdaemon d;
	pthread_t th;
	uint32_t g, h;
	long long wire = 0;
	int i, n = 0;

	(void)state;
	hd_start(&d, NULL, h_one_port, NULL);
	simpeer_open(&sp, &d, "peer", PEER);
	tc_connect_gid(&tc, &d, "many", "fd00::1");
	for (i = 0; i < 300; i++) {
		g = 0x1000 + (uint32_t)i;
		h_req(m, g, "fd00::1", PEER);
		assert_int_equal(tc_send_sync(&tc, PEER, m), 0);
		assert_true(simpeer_recv(&sp, got, NULL, H_DEADLINE_MS));
		assert_int_equal(cm_mad_attr_id(got), CM_ATTR_REQ);
		h = wire_get32(got + 24);
		h_mad(m, CM_ATTR_REP, 0x9000 + (uint32_t)i, h, 1);
		simpeer_send(&sp, "fd00::1", m);
		assert_true(tc_pump_until(&tc, tc_has_rx, ++n, H_DEADLINE_MS));
		h_mad(m, CM_ATTR_RTU, g, 0x9000 + (uint32_t)i, 1);
		assert_int_equal(tc_send_sync(&tc, PEER, m), 0);
		assert_true(simpeer_recv(&sp, got, NULL, H_DEADLINE_MS));
		assert_int_equal(cm_mad_attr_id(got), CM_ATTR_RTU);
	}
	r.sp = &sp;
	assert_int_equal(pthread_create(&th, NULL, peer_read, &r), 0);
	tc_close(&tc);
	assert_true(h_wait_until(answers_settled, &d, 2 * H_DEADLINE_MS));
	/* The last of them reach the peer a rate's worth later. */
	for (i = 0; i < 100 * h_time_scale() &&
		    atomic_load(&r.got) + (wire = wire_dropped(&d)) < 300;
	     i++)
		usleep(20000);
	atomic_store(&r.stop, 1);
	pthread_join(th, NULL);
	print_message("DREQs: %lld sent (%lld paced), %u received, %lld lost "
		      "on the sim wire, %lld limited\n",
		      hd_status_int(&d, "counters.answers.dreq_abandoned"),
		      hd_status_int(&d, "counters.answers.paced"),
		      atomic_load(&r.got), wire,
		      hd_status_int(&d, "counters.answers.limited"));
	assert_int_equal(hd_status_int(&d, "counters.answers.dreq_abandoned"),
			 300);
	assert_int_equal(hd_status_int(&d, "counters.answers.limited"), 0);
	assert_true(hd_status_int(&d, "counters.answers.paced") > 0);
	/* What the daemon sent, the peer received, but for what the sim
	 * wire lost (a full peer queue, counted as a NIC would). */
	assert_int_equal(atomic_load(&r.got) + wire, 300);
	simpeer_close(&sp);
	hd_stop(&d);
}

/*
 * The port's records of peers' REQs nobody has answered yet are divided
 * between its clients: REQs from 16 sources at one tenant's listener,
 * beyond what its guest answers, fill the port's pool (here 64); another
 * tenant's REQ still gets its record, and its REP goes out, where it
 * used to be refused ENOENT while the flood lasted.
 */
static void test_a_flooded_listener_leaves_the_others_their_records(
	void **state)
{
	static const char *const extra[] = { "--max-peer-records", "64", NULL };
	static struct tclient flooded, other;
	uint8_t m[MAD_SIZE], got[MAD_SIZE];
	struct simpeer sp;
	struct gid g;
	struct hdaemon d;
	char text[GID_STRLEN];
	int i;

	(void)state;
	hd_start(&d, NULL, h_one_port, extra);
	simpeer_open(&sp, &d, "peer", PEER);
	tc_connect_gid(&flooded, &d, "flooded", "fd00::1");
	tc_connect_gid(&other, &d, "other", "fd00::2");
	for (i = 0; i < 128; i++) {
		assert_int_equal(gid_parse("fd98::", &g), 0);
		g.raw[15] = (uint8_t)(i % 16 + 1);
		memcpy(sp.gid, g.raw, 16);
		h_req(m, 0x100 + (uint32_t)i, gid_format(&g, text), "fd00::1");
		simpeer_send(&sp, "fd00::1", m);
	}
	assert_true(hd_wait_status_int(&d, "counters.mads_in.REQ", 128));
	assert_int_equal(hd_status_int(&d, "routing.peer_records"), 64);
	/* The other tenant's REQ, and its answer. */
	assert_int_equal(gid_parse(PEER, &g), 0);
	memcpy(sp.gid, g.raw, 16);
	h_req(m, 0x7001, PEER, "fd00::2");
	simpeer_send(&sp, "fd00::2", m);
	assert_true(tc_pump_until(&other, tc_has_rx, 1, H_DEADLINE_MS));
	h_mad(m, CM_ATTR_REP, 0x21, 0x7001, 1);
	assert_int_equal(tc_send_sync(&other, PEER, m), 0);
	for (;;) {
		assert_true(simpeer_recv(&sp, got, NULL, H_DEADLINE_MS));
		if (cm_mad_attr_id(got) == CM_ATTR_REP)
			break;
	}
	assert_int_equal(wire_get32(got + 28), 0x7001);
	print_message("records %lld, refused %lld, evicted %lld\n",
		      hd_status_int(&d, "routing.peer_records"),
		      hd_status_int(&d, "routing.peer_records_refused"),
		      hd_status_int(&d, "routing.peer_records_evicted"));
	assert_int_equal(hd_status_int(&d, "routing.peer_records_evicted"), 1);
	tc_close(&other);
	tc_close(&flooded);
	simpeer_close(&sp);
	hd_stop(&d);
}

/* The bucket the answers' budget used to put a source in: an unkeyed
 * hash of its GID, which anybody could compute. */
static unsigned unkeyed_bucket(const struct gid *g)
{
	return (unsigned)(hash_mix64(wire_get64(g->raw) ^
				     hash_mix64(wire_get64(g->raw + 8))) %
			  1024);
}

/*
 * The answers' budget per source is in buckets of a keyed hash: a flood
 * from 600 sources chosen to share the victim peer's bucket under the
 * old unkeyed hash (REQs at a GID nobody owns, each answered with a REJ)
 * no longer uses up the victim's budget, and the victim's own REQ there
 * is still answered.
 */
static void test_no_source_can_pick_anothers_budget(void **state)
{
	struct simpeer sp, victim;
	uint8_t m[MAD_SIZE], got[MAD_SIZE];
	struct gid v, g;
	struct hdaemon d;
	char text[GID_STRLEN];
	unsigned want, found = 0, k;

	(void)state;
	hd_start(&d, NULL, h_one_port, NULL);
	/* One peer on the fabric at a time: a peer's send waits for every
	 * other peer's queue, which nobody reads here. */
	simpeer_open(&sp, &d, "flood", "fd98::1");
	assert_int_equal(gid_parse(PEER, &v), 0);
	want = unkeyed_bucket(&v);
	for (k = 1; found < 600; k++) {
		assert_int_equal(gid_parse("fd98::", &g), 0);
		wire_put32(g.raw + 12, k);
		if (unkeyed_bucket(&g) != want)
			continue;
		memcpy(sp.gid, g.raw, 16); /* the flood's source, spoofed */
		h_req(m, 0x100 + found, gid_format(&g, text), "fd00::5");
		simpeer_send(&sp, "fd00::5", m);
		found++;
	}
	assert_true(hd_wait_status_int(&d, "counters.mads_in.REQ", 600));
	simpeer_close(&sp);
	simpeer_open(&victim, &d, "victim", PEER);
	h_req(m, 0x7777, PEER, "fd00::5");
	simpeer_send(&victim, "fd00::5", m);
	assert_true(hd_wait_status_int(&d, "counters.mads_in.REQ", 601));
	print_message("flood: %lld answered, %lld limited\n",
		      hd_status_int(&d, "counters.answers.rej_no_listener"),
		      hd_status_int(&d, "counters.answers.limited"));
	/* Its REJ, among what is on the fabric for it. */
	for (;;) {
		assert_true(simpeer_recv(&victim, got, NULL, H_DEADLINE_MS));
		if (cm_mad_attr_id(got) == CM_ATTR_REJ &&
		    wire_get32(got + 28) == 0x7777)
			break;
	}
	simpeer_close(&victim);
	hd_stop(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
			test_pipelining_client_leaves_its_worker_to_others),
		cmocka_unit_test(test_requests_are_paced_at_the_rule_rate),
		cmocka_unit_test(test_a_gone_clients_peers_are_all_told),
		cmocka_unit_test(test_no_source_can_pick_anothers_budget),
		cmocka_unit_test(
			test_a_flooded_listener_leaves_the_others_their_records),
	};

	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("isolation", tests, NULL, NULL);
}
