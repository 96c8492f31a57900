// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * QEMU's pvrdma through the compatibility socket (--qemu-socket), on a
 * sim port against a scripted CM peer: QEMU's requests and answers, byte
 * for byte as its rdma_backend.c writes and reads them; every MAD sent
 * to its true peer whatever QEMU wrote as the destination; a QEMU client
 * and a native one on the same port; malformed input.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/integration/harness.h"
#include "common/cm_mad.h"
#include "common/gid.h"
#include "common/wire.h"
#include "protocol/qemu_msg.h"

#define PEER "fd99::1"
#define GUEST "fd00::1"
static const char *const ports[] = { "sim0=fd00::1,fd00::2,fd00::3", NULL };

struct fx {
	struct hdaemon d;
	struct simpeer p;
	char qsock[160];
	int q; /* QEMU's end */
	/* A simulated port has no QPs: what a QEMU client's REQs and REPs
	 * name is registered by a native client of its process. */
	struct tclient qps;
};

static int setup(void **state)
{
	static struct fx f;
	static char arg[200];
	static const char *extra[] = { arg, NULL };
	char err[256];

	memset(&f, 0, sizeof(f));
	snprintf(f.qsock, sizeof(f.qsock), "/tmp/rcm-qemu.%d.sock", getpid());
	snprintf(arg, sizeof(arg), "--qemu-socket=sim0=%s", f.qsock);
	hd_start(&f.d, NULL, ports, extra);
	simpeer_open(&f.p, &f.d, "peer", PEER);
	f.q = raw_connect(f.qsock);
	assert_true(f.q >= 0);
	/* After QEMU's client is in, so that it is the status's first. */
	assert_true(hd_wait_status_at_least(&f.d, "counters.clients_accepted",
					    1, H_DEADLINE_MS));
	assert_int_equal(tc_connect(&f.qps, &f.d, "qemu-qps", 0, 0, err,
				    sizeof(err)),
			 0);
	assert_int_equal(muxbe_register_qpn(f.qps.mb, "sim0", h_qpn()), 0);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (f->q >= 0)
		close(f->q);
	tc_close(&f->qps);
	simpeer_close(&f->p);
	hd_stop(&f->d);
	return 0;
}

/* Read one whole 360-byte message, or fail by the deadline. */
static int q_read(int fd, struct qemu_msg *m, int timeout_ms)
{
	uint8_t buf[QEMU_MSG_SIZE];
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	size_t have = 0;
	ssize_t n;

	while (have < sizeof(buf)) {
		if (poll(&pfd, 1, timeout_ms) <= 0)
			return -ETIMEDOUT;
		n = read(fd, buf + have, sizeof(buf) - have);
		if (n <= 0)
			return -ECONNRESET;
		have += (size_t)n;
	}
	/* Decode as QEMU would: it takes requests (inbound MADs) and
	 * responses alike. */
	memset(m, 0, sizeof(*m));
	qemu_msg_decode(buf, m);
	memcpy(&m->type, buf, 4);
	memcpy(&m->op, buf + 4, 4);
	memcpy(&m->err, buf + 24, 4);
	return 0;
}

static void q_write(int fd, const struct qemu_msg *m)
{
	uint8_t buf[QEMU_MSG_SIZE];

	qemu_msg_encode(m, buf);
	assert_int_equal(send(fd, buf, sizeof(buf), MSG_NOSIGNAL),
			 (ssize_t)sizeof(buf));
}

/* A request and QEMU's blocking read of its response. */
static uint32_t q_request(int fd, struct qemu_msg *req)
{
	struct qemu_msg resp;

	req->type = QEMU_MSG_REQ;
	q_write(fd, req);
	assert_int_equal(q_read(fd, &resp, H_DEADLINE_MS), 0);
	assert_int_equal(resp.type, QEMU_MSG_RESP);
	/* QEMU's async reader must skip a response: never op MAD. */
	assert_true(resp.op != QEMU_MSG_OP_MAD);
	return resp.err;
}

static uint32_t q_reg(int fd, uint32_t op, const char *gid)
{
	struct qemu_msg m = { .op = op };
	struct gid g;

	gid_parse(gid, &g);
	memcpy(m.sgid, g.raw, 16);
	return q_request(fd, &m);
}

/* The MAD message QEMU's mad_send() makes: addressed to the guest's own
 * GID (its bug), with the host GID index it chose. */
static void q_mad_msg(const char *own, const uint8_t *mad, struct qemu_msg *m)
{
	struct gid g;

	*m = (struct qemu_msg){ .type = QEMU_MSG_REQ,
				.op = QEMU_MSG_OP_MAD,
				.umad_len = MAD_SIZE };
	gid_parse(own, &g);
	memcpy(m->sgid, g.raw, 16);
	m->addr.qpn = 1;
	m->addr.grh_present = 1;
	m->addr.gid_index = 1;
	memcpy(m->addr.gid, g.raw, 16);
	m->addr.hop_limit = 0xff;
	memcpy(m->mad, mad, MAD_SIZE);
}

static uint32_t q_mad(int fd, const char *own, const uint8_t *mad)
{
	struct qemu_msg m;

	q_mad_msg(own, mad, &m);
	return q_request(fd, &m);
}

/* The next MAD the peer gets, whatever it is. */
static void peer_expect_any(struct fx *f, uint8_t *mad)
{
	assert_true(simpeer_recv(&f->p, mad, NULL, H_DEADLINE_MS));
}

static void qemu_expect(struct fx *f, uint16_t attr, struct qemu_msg *m)
{
	assert_int_equal(q_read(f->q, m, H_DEADLINE_MS), 0);
	assert_int_equal(m->type, QEMU_MSG_REQ);
	assert_int_equal(m->op, QEMU_MSG_OP_MAD);
	assert_int_equal(cm_mad_attr_id(m->mad), attr);
}

static uint32_t local_of(const uint8_t *m)
{
	return wire_get32(m + 24);
}
static uint32_t remote_of(const uint8_t *m)
{
	return wire_get32(m + 28);
}

/* The guest (its GID registered) connects to the peer: REQ with the
 * guest's comm ID g, REP with the peer's p, RTU.  Returns the host comm
 * ID the peer saw. */
static uint32_t q_establish(struct fx *f, uint32_t g, uint32_t p)
{
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	struct qemu_msg in;
	uint32_t h;

	h_req(m, g, GUEST, PEER);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_OK);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	h = local_of(r);
	h_mad(m, CM_ATTR_REP, p, h, 1);
	simpeer_send(&f->p, GUEST, m);
	qemu_expect(f, CM_ATTR_REP, &in);
	h_mad(m, CM_ATTR_RTU, g, p, 1);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_OK);
	simpeer_expect(&f->p, CM_ATTR_RTU, r);
	return h;
}

/* GID registration with the old codes, by the full 128 bits. */
static void test_register(void **state)
{
	struct fx *f = *state;
	json_t *st, *c;

	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_REG, GUEST), QEMU_MSG_OK);
	/* Again: its guest's reset (test_guest_reset_ends_its_connections),
	 * where the old daemon said EEXIST. */
	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_REG, GUEST), QEMU_MSG_OK);
	/* Same interface ID, other prefix: another GID (the old daemon
	 * keyed by interface ID and took them for one). */
	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_REG, "fd01::1"), QEMU_MSG_OK);
	/* QEMU registers before the host has the address: accepted. */
	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_REG, "fd00::77"), QEMU_MSG_OK);
	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_UNREG, "fd00::77"),
			 QEMU_MSG_OK);
	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_UNREG, "fd00::77"),
			 QEMU_MSG_ENOTFOUND);
	st = hd_status(&f->d);
	c = json_array_get(json_object_get(st, "clients"), 0);
	assert_string_equal(json_string_value(json_object_get(c, "protocol")),
			    "qemu-rdmacm-mux");
	assert_int_equal(json_array_size(json_object_get(c, "gids")), 2);
	json_decref(st);
}

/* QEMU addresses every MAD to the guest's own GID; each goes to its real
 * peer, and the whole connection runs: REQ, REP, RTU, DREQ, DREP. */
static void test_active_connection_repaired(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	struct qemu_msg in;
	struct gid peer, guest;
	uint32_t h;

	gid_parse(PEER, &peer);
	gid_parse(GUEST, &guest);
	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_REG, GUEST), QEMU_MSG_OK);
	h_req(m, 0x5001, GUEST, PEER);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_OK);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	h = local_of(r);
	assert_true(h != 0x5001);
	h_mad(m, CM_ATTR_REP, 0x9001, h, 1);
	simpeer_send(&f->p, GUEST, m);
	qemu_expect(f, CM_ATTR_REP, &in);
	/* The GID it was routed to, and the sender in the address. */
	assert_memory_equal(in.sgid, guest.raw, 16);
	assert_memory_equal(in.addr.gid, peer.raw, 16);
	assert_int_equal(in.umad_len, MAD_SIZE);
	assert_int_equal(remote_of(in.mad), 0x5001);
	h_mad(m, CM_ATTR_RTU, 0x5001, 0x9001, 1);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_OK);
	simpeer_expect(&f->p, CM_ATTR_RTU, r);
	assert_int_equal(local_of(r), h);
	h_mad(m, CM_ATTR_DREQ, 0x9001, h, 2);
	simpeer_send(&f->p, GUEST, m);
	qemu_expect(f, CM_ATTR_DREQ, &in);
	h_mad(m, CM_ATTR_DREP, 0x5001, 0x9001, 2);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_OK);
	simpeer_expect(&f->p, CM_ATTR_DREP, r);
	assert_true(hd_status_int(&f->d, "routing.draining") == 1);
}

/* The guest's connections end with op on its GID (QEMU's REG again, or
 * UNREG): their peers hear what cm_destroy_id() says (a DREQ to the
 * established one, a timeout REJ to the pending REQ), and nothing stays
 * on the client's quota. */
static void guest_connections_end_with(struct fx *f, uint32_t op)
{
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	json_t *st, *c;
	uint32_t h, h2;
	int i, dreq = 0, rej = 0;

	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_REG, GUEST), QEMU_MSG_OK);
	h = q_establish(f, 0x5101, 0x9101);
	h_req(m, 0x5102, GUEST, PEER);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_OK);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	h2 = local_of(r);
	assert_true(hd_status_int(&f->d, "routing.established") == 1);

	assert_int_equal(q_reg(f->q, op, GUEST), QEMU_MSG_OK);
	for (i = 0; i < 2; i++) {
		peer_expect_any(f, r);
		if (cm_mad_attr_id(r) == CM_ATTR_DREQ) {
			dreq++;
			assert_int_equal(local_of(r), h);
			assert_int_equal(remote_of(r), 0x9101);
		} else {
			rej++;
			assert_int_equal(cm_mad_attr_id(r), CM_ATTR_REJ);
			assert_int_equal(local_of(r), h2);
			assert_int_equal(cm_field_get(r, CM_REJ_REASON),
					 CM_REJ_REASON_TIMEOUT);
		}
	}
	assert_true(dreq == 1 && rej == 1);
	assert_true(hd_status_int(&f->d, "routing.established") == 0);
	/* The torn-down one drains in TimeWait, on nobody's quota. */
	assert_true(hd_status_int(&f->d, "routing.draining") == 1);
	st = hd_status(&f->d);
	c = json_array_get(json_object_get(st, "clients"), 0);
	assert_int_equal(json_array_size(json_object_get(c, "connections")), 0);
	json_decref(st);
	/* The peer's DREP is absorbed, shown to no one. */
	h_mad(m, CM_ATTR_DREP, 0x9101, h, 2);
	simpeer_send(&f->p, GUEST, m);
	assert_true(hd_wait_status_int(&f->d, "counters.drops.stale_connection",
				       1));
}

/* A guest that reboots while QEMU stays connected: stock QEMU sends no
 * UNREG, and the rebooted guest adds its GID again; that REG ends the
 * old guest's connections, and the GID stays the guest's (its new REQ
 * goes out).  Before, the REG was answered EEXIST and the connections
 * stayed up at their peers for ever. */
static void test_guest_reset_ends_its_connections(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];

	guest_connections_end_with(f, QEMU_MSG_OP_REG);
	assert_int_equal(hd_status_int(&f->d, "counters.qemu_resets"), 1);
	h_req(m, 0x5103, GUEST, PEER);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_OK);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
}

/* An address removed inside a running guest (QEMU's UNREG): its
 * connections end too, where cm.c keeps them; the GID is free for
 * another tenant, who must not inherit them (rdmacm-mux-cm(7)). */
static void test_address_removed_ends_its_connections(void **state)
{
	guest_connections_end_with(*state, QEMU_MSG_OP_UNREG);
}

/* The peer connects to the guest: REP, MRA and the rest go back to the
 * peer the REQ came from; a SIDR_REP to the SIDR_REQ's sender. */
static void test_passive_connection_and_sidr(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	struct qemu_msg in;
	struct gid s, d;
	uint32_t h;

	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_REG, GUEST), QEMU_MSG_OK);
	h_req(m, 0x7001, PEER, GUEST);
	simpeer_send(&f->p, GUEST, m);
	qemu_expect(f, CM_ATTR_REQ, &in);
	h_mad(m, CM_ATTR_MRA, 0x6001, 0x7001, 1);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_OK);
	simpeer_expect(&f->p, CM_ATTR_MRA, r);
	h_mad(m, CM_ATTR_REP, 0x6001, 0x7001, 1);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_OK);
	simpeer_expect(&f->p, CM_ATTR_REP, r);
	h = local_of(r);
	h_mad(m, CM_ATTR_RTU, 0x7001, h, 1);
	simpeer_send(&f->p, GUEST, m);
	qemu_expect(f, CM_ATTR_RTU, &in);
	assert_int_equal(remote_of(in.mad), 0x6001);
	/* SIDR. */
	gid_parse(PEER, &s);
	gid_parse(GUEST, &d);
	cm_mad_init(m, CM_ATTR_SIDR_REQ, 5);
	cm_field_set(m, CM_SIDR_REQ_REQUEST_ID, 0x42);
	cma_hdr_build(m + CM_SIDR_REQ_OFF_PRIVATE_DATA, &s, &d, 4791);
	simpeer_send(&f->p, GUEST, m);
	qemu_expect(f, CM_ATTR_SIDR_REQ, &in);
	h_mad(m, CM_ATTR_SIDR_REP, 0x42, 0, 5);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_OK);
	simpeer_expect(&f->p, CM_ATTR_SIDR_REP, r);
	assert_int_equal(cm_field_get(r, CM_SIDR_REP_REQUEST_ID), 0x42);
	/* A second answer answers nothing, and goes nowhere. */
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_EINVAL);
	assert_true(hd_status_int(&f->d, "counters.refusals.no_destination") ==
		    1);
}

/* QEMU's REQs name only its process's QPs: another's gets an error
 * response, is counted and never reaches the wire. */
static void test_names_only_its_qps(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];

	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_REG, GUEST), QEMU_MSG_OK);
	h_req(m, 0x8001, GUEST, PEER);
	cm_field_set(m, CM_REQ_LOCAL_QPN, h_qpn() ^ 0x800);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_EACCES);
	assert_int_equal(simpeer_recv(&f->p, r, NULL, 100), 0);
	assert_int_equal(hd_status_int(&f->d, "counters.refusals.qp_owner"), 1);
	h_req(m, 0x8002, GUEST, PEER);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_OK);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	assert_int_equal(cm_field_get(r, CM_REQ_LOCAL_QPN), h_qpn());
}

/* Another process on the QEMU socket sends QEMU's DREQ: 0 when it is
 * not taken (a child: no cmocka assertions). */
static int stranger_sends_dreq(const char *qsock)
{
	uint8_t mad[MAD_SIZE], buf[QEMU_MSG_SIZE];
	struct qemu_msg m;
	int q = raw_connect(qsock);

	if (q < 0)
		return 2;
	h_mad(mad, CM_ATTR_DREQ, 0x5101, 0x9101, 3);
	q_mad_msg(GUEST, mad, &m);
	qemu_msg_encode(&m, buf);
	if (send(q, buf, sizeof(buf), MSG_NOSIGNAL) != (ssize_t)sizeof(buf))
		return 3;
	switch (q_read(q, &m, H_DEADLINE_MS)) {
	case -ECONNRESET: return 0; /* closed on it: not taken */
	case 0: return m.err == QEMU_MSG_OK;
	default: return 4;
	}
}

/* QEMU again after a restart, and the native client that registers its
 * QPN: both resumed. */
static void qemu_again(struct fx *f)
{
	f->q = raw_connect(f->qsock);
	assert_true(f->q >= 0);
	assert_true(tc_pump_until(&f->qps, tc_has_link_ups, 1, H_DEADLINE_MS));
	assert_true(hd_wait_status_int(&f->d, "counters.resumes", 2));
}

/* The peer's DREQ on connection h reaches QEMU by its own IDs (guest g,
 * peer p), and QEMU's DREP goes out by the host's. */
static void peer_dreq_reaches_qemu(struct fx *f, uint32_t h, uint32_t g,
				   uint32_t p)
{
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	struct qemu_msg in;

	h_mad(m, CM_ATTR_DREQ, p, h, 2);
	simpeer_send(&f->p, GUEST, m);
	qemu_expect(f, CM_ATTR_DREQ, &in);
	assert_int_equal(remote_of(in.mad), g);
	h_mad(m, CM_ATTR_DREP, g, p, 2);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_OK);
	simpeer_expect(&f->p, CM_ATTR_DREP, r);
	assert_int_equal(local_of(r), h);
	assert_int_equal(remote_of(r), p);
}

/* The daemon restarts (kill -9) while QEMU holds a connection; QEMU's
 * chardev (reconnect=N) connects again from the same process, which gets
 * back its GID and its connection: the peer's DREQ reaches it by its own
 * IDs and its DREP goes out, without QEMU registering again.  Another
 * process on the QEMU socket gets nothing of it. */
static void test_restart_keeps_qemu_connections(void **state)
{
	struct fx *f = *state;
	uint8_t r[MAD_SIZE];
	int status, other;
	json_t *st;
	pid_t pid;
	uint32_t h;

	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_REG, GUEST), QEMU_MSG_OK);
	h = q_establish(f, 0x5101, 0x9101);

	hd_kill(&f->d, SIGKILL);
	close(f->q);
	hd_restart(&f->d);
	/* Another process first: not the same QEMU, so nothing is its. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(stranger_sends_dreq(f->qsock));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(simpeer_recv(&f->p, r, NULL, 100), 0);

	qemu_again(f);
	st = hd_status(&f->d);
	other = 0;
	{
		json_t *c;
		size_t i;

		json_array_foreach(json_object_get(st, "clients"), i, c)
			if (strcmp(json_string_value(
					   json_object_get(c, "protocol")),
				   "qemu-rdmacm-mux") == 0 &&
			    json_array_size(json_object_get(c, "gids")) == 1)
				other++;
	}
	json_decref(st);
	assert_int_equal(other, 1); /* its GID is back, unregistered */
	peer_dreq_reaches_qemu(f, h, 0x5101, 0x9101);
}

/* The same, with another port list after the restart (one more port,
 * before QEMU's): QEMU's process is known by the port it comes in on,
 * by name, not by its place in the list; it gets its GID and connection
 * back, where it used to find no owner of its own and its guest stayed
 * mute. */
static void test_restart_with_other_ports_keeps_qemu(void **state)
{
	static const char *const more_ports[] = {
		"simx=fd00::9", "sim0=fd00::1,fd00::2,fd00::3", NULL
	};
	struct fx *f = *state;
	uint32_t h;

	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_REG, GUEST), QEMU_MSG_OK);
	h = q_establish(f, 0x5201, 0x9201);
	hd_kill(&f->d, SIGKILL);
	close(f->q);
	f->d.ports = more_ports;
	hd_restart(&f->d);
	qemu_again(f);
	assert_int_equal(hd_status_int(&f->d, "counters.resumes_refused"), 0);
	peer_dreq_reaches_qemu(f, h, 0x5201, 0x9201);
}

/* A QEMU the restarted daemon cannot know again (here its process had
 * two connections on the socket before: which is which, nobody can
 * tell) is not left mute: once the previous owners' grace has ended,
 * its guest's send from its GID registers the GID, as QEMU never
 * registers twice, and goes out.  Before, every MAD of the guest was
 * refused until it rebooted. */
static void test_unknown_qemu_after_restart_is_not_mute(void **state)
{
	static char arg[200];
	static const char *extra[] = { arg, "--resume-grace-ms", "300", NULL };
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];
	uint64_t deadline;
	int twin, err;

	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_REG, GUEST), QEMU_MSG_OK);
	twin = raw_connect(f->qsock);
	assert_true(twin >= 0);
	/* Answered only once its worker has taken the connection up and
	 * recorded its process in the state file: killed before that, the
	 * daemon would restart knowing one connection of the process, and
	 * give it back (the accept count comes before, on another thread). */
	(void)q_reg(twin, QEMU_MSG_OP_UNREG, "fd00::3");
	hd_kill(&f->d, SIGKILL);
	close(f->q);
	close(twin);
	snprintf(arg, sizeof(arg), "--qemu-socket=sim0=%s", f->qsock);
	f->d.extra = extra;
	hd_restart(&f->d);
	f->q = raw_connect(f->qsock);
	assert_true(f->q >= 0);
	assert_true(tc_pump_until(&f->qps, tc_has_link_ups, 1, H_DEADLINE_MS));
	assert_true(hd_wait_status_int(&f->d, "counters.resumes_refused", 1));
	/* Refused while the GID is held for the previous owners (300 ms),
	 * then taken up and sent. */
	deadline = h_now_ms() + (uint64_t)H_DEADLINE_MS;
	do {
		h_req(m, 0x5301, GUEST, PEER);
		err = (int)q_mad(f->q, GUEST, m);
		if (err != QEMU_MSG_OK)
			poll(NULL, 0, 50);
	} while (err != QEMU_MSG_OK && h_now_ms() < deadline);
	assert_int_equal(err, QEMU_MSG_OK);
	simpeer_expect(&f->p, CM_ATTR_REQ, r);
	assert_int_equal(hd_status_int(&f->d, "counters.qemu_adopted_gids"), 1);
}

/* A MAD whose destination follows from nothing is refused, not sent to
 * QEMU's guess; nor is anything from a GID this client does not own. */
static void test_refused(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE], r[MAD_SIZE];

	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_REG, GUEST), QEMU_MSG_OK);
	h_mad(m, CM_ATTR_RTU, 0x1, 0x2, 1);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_EINVAL);
	assert_true(hd_status_int(&f->d, "counters.refusals.no_destination") ==
		    1);
	h_req(m, 0x5002, "fd00::2", PEER);
	assert_int_equal(q_mad(f->q, "fd00::2", m), QEMU_MSG_EACCES);
	assert_int_equal(simpeer_recv(&f->p, r, NULL, 200), 0);
}

/* A native client and QEMU on one port talk to each other. */
static void test_native_and_qemu(void **state)
{
	struct fx *f = *state;
	uint8_t m[MAD_SIZE];
	struct qemu_msg in;
	struct tclient b;
	char err[128];

	assert_int_equal(q_reg(f->q, QEMU_MSG_OP_REG, GUEST), QEMU_MSG_OK);
	assert_int_equal(tc_connect(&b, &f->d, "native", 1, 0, err,
				    sizeof(err)),
			 0);
	assert_int_equal(tc_register(&b, "fd00::2"), 0);
	h_req(m, 0x8001, "fd00::2", GUEST);
	assert_int_equal(tc_send_sync(&b, GUEST, m), 0);
	qemu_expect(f, CM_ATTR_REQ, &in);
	h_mad(m, CM_ATTR_REP, 0x6101, local_of(in.mad), 1);
	assert_int_equal(q_mad(f->q, GUEST, m), QEMU_MSG_OK);
	assert_true(tc_pump_until(&b, tc_has_rx, 1, H_DEADLINE_MS));
	assert_int_equal(cm_mad_attr_id(b.rx[0].mad), CM_ATTR_REP);
	assert_int_equal(remote_of(b.rx[0].mad), 0x8001);
	tc_close(&b);
}

static int q_closed(int fd)
{
	uint8_t buf[QEMU_MSG_SIZE];
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	while (poll(&pfd, 1, H_DEADLINE_MS) > 0) {
		if (read(fd, buf, sizeof(buf)) <= 0)
			return 1;
	}
	return 0;
}

/* Malformed input: a clear log line and a close, and nobody else is
 * affected. */
static void test_malformed_closes(void **state)
{
	struct fx *f = *state;
	struct qemu_msg m = { .type = QEMU_MSG_RESP, .op = QEMU_MSG_OP_REG };
	uint8_t buf[QEMU_MSG_SIZE];
	int other = raw_connect(f->qsock);

	assert_true(other >= 0);
	assert_int_equal(q_reg(other, QEMU_MSG_OP_REG, "fd00::3"), QEMU_MSG_OK);
	q_write(f->q, &m); /* a response from a client */
	assert_true(q_closed(f->q));
	close(f->q);
	f->q = raw_connect(f->qsock);
	m.type = QEMU_MSG_REQ;
	m.op = 9; /* unknown op */
	q_write(f->q, &m);
	assert_true(q_closed(f->q));
	close(f->q);
	f->q = raw_connect(f->qsock);
	m.op = QEMU_MSG_OP_MAD;
	m.umad_len = 4096; /* bad length */
	qemu_msg_encode(&m, buf);
	memcpy(buf + 32, &m.umad_len, 4);
	assert_int_equal(send(f->q, buf, sizeof(buf), MSG_NOSIGNAL),
			 (ssize_t)sizeof(buf));
	assert_true(q_closed(f->q));
	close(f->q);
	/* A short message, then the end. */
	f->q = raw_connect(f->qsock);
	assert_int_equal(send(f->q, buf, 100, MSG_NOSIGNAL), 100);
	close(f->q);
	f->q = -1;
	assert_true(hd_status_int(&f->d, "counters.protocol_errors") == 3);
	/* The other QEMU is still served. */
	assert_int_equal(q_reg(other, QEMU_MSG_OP_REG, "fd00::3"), QEMU_MSG_OK);
	close(other);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_register, setup, teardown),
		cmocka_unit_test_setup_teardown(test_active_connection_repaired,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_passive_connection_and_sidr, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_guest_reset_ends_its_connections, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_address_removed_ends_its_connections, setup,
			teardown),
		cmocka_unit_test_setup_teardown(test_names_only_its_qps, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_restart_keeps_qemu_connections, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_restart_with_other_ports_keeps_qemu, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			test_unknown_qemu_after_restart_is_not_mute, setup,
			teardown),
		cmocka_unit_test_setup_teardown(test_native_and_qemu, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_malformed_closes, setup,
						teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	if (getenv("RCM_TEST_UMAD_PORT"))
		return 0; /* the scripted peer lives on the sim fabric */
	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("qemu", tests, NULL, NULL);
}
