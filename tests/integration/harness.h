/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_TEST_HARNESS_H
#define RCM_TEST_HARNESS_H

/*
 * Integration harness: starts the real rdmacm-muxd ($RDMACM_MUXD) on sim
 * ports in a private directory, talks to it through libmuxbe or raw
 * sockets, and reads its status socket.  Every wait has a deadline.
 */
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "backend/muxbe.h"

/* Deadlines and latency bounds are multiplied by $RCM_TIME_SCALE (for
 * runs under valgrind, which slows the daemon some 20-50 times). */
int h_time_scale(void);
#define H_DEADLINE_MS (5000 * h_time_scale())

struct hdaemon {
	pid_t pid;
	char dir[128];
	char sock[192];
	char status[192];
	char fabric[192];
	char log[192];
	const char *const *ports, *const *extra; /* kept for hd_restart() */
};

/* Start a daemon: `ports` are its --sim-port arguments (NULL-terminated),
 * extra are more arguments (NULL-terminated).  fabric may be shared. */
void hd_start(struct hdaemon *d, const char *fabric, const char *const *ports,
	      const char *const *extra);
/* The same daemon again, on the same paths, once it has stopped (or was
 * killed and reaped, with pid set to 0). */
void hd_restart(struct hdaemon *d);
/* Signal the daemon and reap it, leaving its files (for hd_restart). */
void hd_kill(struct hdaemon *d, int sig);
/* SIGTERM, and require a clean exit within the deadline. */
void hd_stop(struct hdaemon *d);
json_t *hd_status(struct hdaemon *d);
/* What the daemon has logged so far, NUL-terminated (the first cap - 1
 * bytes). */
void hd_read_log(const struct hdaemon *d, char *buf, size_t cap);
/* The answer to one status query line (NULL: send none, get the default). */
json_t *hd_status_query(struct hdaemon *d, const char *query);
/* Run the daemon with args (NULL-terminated) to its exit, which must come
 * within the deadline: its exit status, its output in out. */
int hd_run(const char *const *args, char *out, size_t cap);
/* cmd through sh: its standard output in out, its exit status (-1 if a
 * signal ended it). */
int h_shell_run(const char *cmd, char *out, size_t cap);
/* A counter from the status: path like "counters.drops.client_queue_full". */
long long hd_status_int(struct hdaemon *d, const char *path);
long long json_path_int(json_t *root, const char *path);
/* The status entry of the client that said this name in its hello. */
json_t *h_client(json_t *status, const char *name);

/* The suites' common daemon: one sim port with seven GIDs, started
 * before a test and stopped after it (cmocka's setup and teardown; the
 * state is a struct h_fixture). */
#define H_SIM0 "sim0=fd00::1,fd00::2,fd00::3,fd00::4,fd00::5,10.1.0.1,10.1.0.2"
extern const char *const h_one_port[];
struct h_fixture {
	struct hdaemon d;
};
int h_setup_daemon(void **state);
int h_teardown_daemon(void **state);

/* Every "until the daemon says so" of the suites: polls cond(arg) every
 * 10 ms until it holds (1) or timeout_ms have passed (0). */
int h_wait_until(int (*cond)(void *arg), void *arg, int timeout_ms);
/* Until the status counter at path reads want: 1, or 0 at H_DEADLINE_MS
 * (or after timeout_ms). */
int hd_wait_status_int(struct hdaemon *d, const char *path, long long want);
int hd_wait_status_int_within(struct hdaemon *d, const char *path,
			      long long want, int timeout_ms);
/* Until it reads at least min: 1, or 0 after timeout_ms. */
int hd_wait_status_at_least(struct hdaemon *d, const char *path, long long min,
			    int timeout_ms);
/* Until the status no longer lists the client of that name: 1, or 0. */
int hd_wait_client_gone(struct hdaemon *d, const char *name);

#define TC_BUFS 32
#define TC_RX_MAX 4096

struct tc_rx {
	struct muxbe_addr addr;
	uint8_t grh[MUXBE_GRH_SIZE];
	uint8_t mad[MUXBE_MAD_SIZE];
	size_t len;
};

/* A test client on libmuxbe that records what it receives. */
struct tclient {
	struct muxbe *mb;
	uint16_t port;
	uint8_t gid[16];
	uint8_t bufs[TC_BUFS][MUXBE_RECV_BUF_MIN];
	int repost;
	int nrx;
	struct tc_rx rx[TC_RX_MAX];
	int sends_done, sends_failed, last_send_status;
	int port_events, port_active;
	int disconnected;
	int lost; /* mad_lost reports */
	char last_lost[160];
	int link_ups, link_downs, link_status;
	char link_message[160];
};

/* Connect (hello included); posts TC_BUFS receive buffers unless
 * post_buffers is 0.  Returns the muxbe_connect() result. */
int tc_connect(struct tclient *tc, struct hdaemon *d, const char *name,
	       int post_buffers, unsigned rx_queue_max, char *err,
	       size_t errlen);
void tc_close(struct tclient *tc);
/* The first port's name: "sim0", or $RCM_TEST_UMAD_PORT when the suite
 * runs against a real port in the lab (then sim-only tests skip). */
const char *h_port0(void);
int h_real_port(void);

/* Register a GID on sim0 and remember it as the client's source. */
int tc_register(struct tclient *tc, const char *gid);
/* tc_connect() (with buffers) and, unless gid is NULL, tc_register(), both
 * required to succeed. */
void tc_connect_gid(struct tclient *tc, struct hdaemon *d, const char *name,
		    const char *gid);
/* A ping round trip is a barrier: everything the daemon queued to this
 * client before the reply has been read by the time it returns. */
void tc_barrier(struct tclient *tc);
/* Run the client's callbacks until cond(tc) or the deadline; returns
 * whether cond held. */
int tc_pump_until(struct tclient *tc, int (*cond)(struct tclient *, int),
		  int arg, int timeout_ms);
int tc_has_rx(struct tclient *tc, int n);
/* The client's n-th MAD received (from 1) comes by the deadline and is
 * of attr (asserted). */
void tc_expect(struct tclient *tc, int n, uint16_t attr);
int tc_has_sends(struct tclient *tc, int n);
int tc_has_lost(struct tclient *tc, int n);
int tc_has_link_ups(struct tclient *tc, int n);
/* Build and send a CM MAD from this client to dst (GSI). */
int tc_send(struct tclient *tc, const char *dst, const uint8_t *mad);
int tc_send_sync(struct tclient *tc, const char *dst, const uint8_t *mad);

/* Raw protocol access for misbehaving clients. */
int raw_connect(const char *path);
int raw_send(int fd, uint8_t kind, uint8_t flags, uint32_t rid,
	     const void *payload, size_t len);
int raw_send_json(int fd, uint32_t rid, const char *json);
/* Read one frame; returns payload length, -ETIMEDOUT, or -ECONNRESET on
 * EOF.  JSON payloads are NUL-terminated in buf. */
int raw_recv(int fd, uint8_t *kind, uint8_t *flags, uint32_t *rid, uint8_t *buf,
	     size_t cap, int timeout_ms);
/* A raw connection to path that has said hello as name and been
 * answered ok (asserted); its descriptor. */
int raw_hello_ok(const char *path, const char *name);
/* raw_hello_ok(), then gid registered on the default port, both required
 * to succeed: the descriptor of a client the test drives by hand. */
int raw_hello_gid(const char *path, const char *name, const char *gid);
/* Waits for EOF; returns 1 if the peer closed within the deadline. */
int raw_wait_eof(int fd, int timeout_ms);
/* What fd gives until its end, into out (cap bytes, NUL-terminated; the
 * rest dropped; out may be NULL): 0 at a clean end of file, -errno
 * (-ECONNRESET: the peer closed with bytes of ours unread), or
 * -ETIMEDOUT. */
int raw_read_to_end(int fd, char *out, size_t cap, int timeout_ms);

uint64_t h_now_ms(void);
/* Write text to path (created or emptied), asserting it worked. */
void h_write_file(const char *path, const char *text);

/* One request line to the admin socket; the reply text in reply.
 * Returns its length or a negative errno. */
int h_admin(const char *path, const char *request, char *reply, size_t cap);
/* A request whose reply is followed by a stream (a capture): the reply's
 * first line in reply, the connection's fd to read on or close. */
int h_admin_stream(const char *path, const char *request, char *reply,
		   size_t cap);
/* bytes as they are (no newline added) to the admin socket at path, its
 * sending side then shut down or not; the answer into reply, waiting
 * wait_ms for each piece: its length, or -errno. */
int h_admin_raw(const char *path, const char *bytes, int shut, int wait_ms,
		char *reply, size_t cap);

/* CM MADs for tests: any attribute with its comm IDs at P+0 and P+4, and
 * a REQ from src to dst with rdma_cm's header (Starting PSN = local, a
 * marker that survives comm-ID translation; TID 0x42000000 | local). */
/* The QP this process owns on h_port0(), which h_mad()'s REQs, REPs and
 * SIDR_REPs name and tc_register() registers (tests/lib/own_qp.h). */
uint32_t h_qpn(void);
void h_mad(uint8_t *mad, uint16_t attr, uint32_t local, uint32_t remote,
	   uint64_t tid);
void h_req(uint8_t *mad, uint32_t local, const char *src, const char *dst);

/* A scripted CM peer on the sim fabric: a remote host's CM, as the
 * daemon's sim port sees it (only on sim ports). */
struct simpeer {
	int fd;
	char path[256];
	char fabric[192];
	uint8_t gid[16];
};

void simpeer_open(struct simpeer *sp, struct hdaemon *d, const char *name,
		  const char *gid);
void simpeer_close(struct simpeer *sp);
/* Send a MAD from the peer's GID to dst on the fabric. */
void simpeer_send(struct simpeer *sp, const char *dst, const uint8_t *mad);
/* The next MAD addressed to the peer, or 0 by the deadline; *src gets the
 * sender's GID when not NULL. */
int simpeer_recv(struct simpeer *sp, uint8_t *mad, uint8_t *src,
		 int timeout_ms);
/* The peer's next MAD, into mad: it must come by the deadline and be
 * of attr (asserted). */
void simpeer_expect(struct simpeer *sp, uint16_t attr, uint8_t *mad);

#endif
