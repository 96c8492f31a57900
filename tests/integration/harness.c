// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "tests/integration/harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/cm_mad.h"
#include "common/gid.h"
#include "common/wire.h"
#include "protocol/rdmacm_mux_proto.h"
#include "mux/sim_fabric.h"
#include "tests/lib/own_qp.h"

int h_time_scale(void)
{
	const char *s = getenv("RCM_TIME_SCALE");
	int v = s ? atoi(s) : 1;

	return v > 0 ? v : 1;
}

uint64_t h_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void nap_ms(int ms)
{
	struct timespec ts = { 0, ms * 1000000L };

	nanosleep(&ts, NULL);
}

int raw_connect(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

static void hd_spawn(struct hdaemon *d);

void hd_start(struct hdaemon *d, const char *fabric, const char *const *ports,
	      const char *const *extra)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/rcm-test.XXXXXX");
	assert_non_null(mkdtemp(d->dir));
	/* Let other uids reach the sockets; their modes decide the rest. */
	chmod(d->dir, 0755);
	snprintf(d->sock, sizeof(d->sock), "%s/mux.sock", d->dir);
	snprintf(d->status, sizeof(d->status), "%s/status.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/daemon.log", d->dir);
	snprintf(d->fabric, sizeof(d->fabric), "%s", fabric ? fabric : d->dir);
	if (fabric == NULL)
		strncat(d->fabric, "/fabric",
			sizeof(d->fabric) - strlen(d->fabric) - 1);
	d->ports = ports;
	d->extra = extra;
	hd_spawn(d);
}

void hd_restart(struct hdaemon *d)
{
	assert_int_equal(d->pid, 0);
	hd_spawn(d);
}

static void hd_spawn(struct hdaemon *d)
{
	const char *bin = getenv("RDMACM_MUXD");
	const char *wrapper = getenv("RDMACM_MUXD_WRAPPER");
	const char *const *ports = d->ports, *const *extra = d->extra;
	const char *argv[96];
	char portargs[8][256], wrap[512], *tok, *save = NULL;
	uint64_t deadline;
	int argc = 0, i, fd, status;
	pid_t parent;

	assert_non_null(bin);
	/* e.g. RDMACM_MUXD_WRAPPER="valgrind -q --error-exitcode=99" */
	if (wrapper) {
		snprintf(wrap, sizeof(wrap), "%s", wrapper);
		for (tok = strtok_r(wrap, " ", &save); tok && argc < 32;
		     tok = strtok_r(NULL, " ", &save))
			argv[argc++] = tok;
	}
	argv[argc++] = bin;
	argv[argc++] = "-s";
	argv[argc++] = d->sock;
	argv[argc++] = "-S";
	argv[argc++] = d->status;
	argv[argc++] = "--sim-fabric";
	argv[argc++] = d->fabric;
	/* Not the host's configuration file (a test's own comes later). */
	argv[argc++] = "--config";
	argv[argc++] = "none";
	if (getenv("RCM_TEST_UMAD_PORT")) {
		/* The real port in the lab instead of the sim ports. */
		snprintf(portargs[0], sizeof(portargs[0]), "--port=%s",
			 getenv("RCM_TEST_UMAD_PORT"));
		argv[argc++] = portargs[0];
	} else {
		for (i = 0; ports && ports[i] && i < 8; i++) {
			snprintf(portargs[i], sizeof(portargs[i]),
				 "--sim-port=%s", ports[i]);
			argv[argc++] = portargs[i];
		}
	}
	for (i = 0; extra && extra[i]; i++)
		argv[argc++] = extra[i];
	argv[argc] = NULL;

	parent = getpid();
	d->pid = fork();
	assert_true(d->pid >= 0);
	if (d->pid == 0) {
		/* A test that fails half-way (or is killed) leaves no daemon
		 * behind: it dies with the suite. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
			_exit(126);
		fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 2);
			dup2(fd, 1);
		}
		if (getenv("RCM_TEST_NOFILE")) {
			/* For the descriptor-exhaustion test. */
			struct rlimit rl;

			rl.rlim_cur = rl.rlim_max = (rlim_t)atoi(
				getenv("RCM_TEST_NOFILE"));
			setrlimit(RLIMIT_NOFILE, &rl);
		}
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	deadline = h_now_ms() + (uint64_t)H_DEADLINE_MS;
	for (;;) {
		fd = raw_connect(d->status);
		if (fd >= 0) {
			close(fd);
			break;
		}
		if (waitpid(d->pid, &status, WNOHANG) == d->pid)
			fail_msg("daemon exited during start-up (see %s)",
				 d->log);
		if (h_now_ms() > deadline)
			fail_msg("daemon not ready in %d ms", H_DEADLINE_MS);
		nap_ms(10);
	}
}

/* A daemon that will not stop: its log, and where each of its threads
 * is (gdb, where installed), so that a failure in CI explains itself. */
static void hd_dump_stuck(const struct hdaemon *d)
{
	char cmd[512];

	snprintf(
		cmd, sizeof(cmd),
		"{ echo '--- daemon log:'; cat %s; grep -H '^Sig\\|^ShdPnd' /proc/%d/task/*/status; } >&2; command -v gdb >/dev/null && timeout 60 gdb -p %d -batch -nx -ex 'thread apply all bt' 2>&1 | grep -v '^\\[New LWP' >&2",
		d->log, (int)d->pid, (int)d->pid);
	if (system(cmd) < 0)
		perror("system");
}

void hd_stop(struct hdaemon *d)
{
	uint64_t deadline = h_now_ms() + H_DEADLINE_MS;
	char cmd[300];
	int status = 0;

	if (d->pid <= 0)
		return;
	kill(d->pid, SIGTERM);
	while (waitpid(d->pid, &status, WNOHANG) != d->pid) {
		if (h_now_ms() > deadline) {
			hd_dump_stuck(d);
			kill(d->pid, SIGKILL);
			waitpid(d->pid, &status, 0);
			fail_msg("daemon did not stop on SIGTERM within %d ms",
				 H_DEADLINE_MS);
		}
		nap_ms(5);
	}
	d->pid = 0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		snprintf(cmd, sizeof(cmd), "cat %s >&2", d->log);
		if (system(cmd) < 0)
			perror("system");
		fail_msg("daemon exit status 0x%x", status);
	}
	/* The sockets and their locks are gone after a clean stop. */
	assert_int_equal(access(d->sock, F_OK), -1);
	assert_int_equal(access(d->status, F_OK), -1);
	snprintf(cmd, sizeof(cmd), "%s.lock", d->sock);
	assert_int_equal(access(cmd, F_OK), -1);
	snprintf(cmd, sizeof(cmd), "%s.lock", d->status);
	assert_int_equal(access(cmd, F_OK), -1);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", d->dir);
	if (system(cmd) != 0)
		perror("rm");
}

int hd_run(const char *const *args, char *out, size_t cap)
{
	const char *bin = getenv("RDMACM_MUXD");
	const char *argv[40];
	uint64_t deadline = h_now_ms() + (uint64_t)H_DEADLINE_MS;
	int pfd[2], status, argc = 0;
	size_t len = 0;
	ssize_t n;
	pid_t pid;

	assert_non_null(bin);
	argv[argc++] = bin;
	argv[argc++] = "--config"; /* not the host's; a test's own wins */
	argv[argc++] = "none";
	while (*args && argc < 39)
		argv[argc++] = *args++;
	argv[argc] = NULL;
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		close(pfd[0]);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	close(pfd[1]);
	for (;;) {
		struct pollfd pf = { .fd = pfd[0], .events = POLLIN };

		if (h_now_ms() > deadline)
			break;
		if (poll(&pf, 1, 50) <= 0)
			continue;
		n = read(pfd[0], out + len, cap - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == cap - 1)
			break;
	}
	out[len] = '\0';
	close(pfd[0]);
	while (waitpid(pid, &status, WNOHANG) != pid) {
		if (h_now_ms() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fail_msg(
				"daemon (expected to exit) still running after %d ms",
				H_DEADLINE_MS);
		}
		nap_ms(5);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int h_shell_run(const char *cmd, char *out, size_t cap)
{
	size_t len = 0;
	FILE *p;
	int st;

	p = popen(cmd, "r");
	assert_non_null(p);
	while (len < cap - 1 && fgets(out + len, (int)(cap - len), p))
		len += strlen(out + len);
	out[len] = '\0';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

json_t *hd_status_query(struct hdaemon *d, const char *query)
{
	static char *buf;
	const size_t cap = 64u << 20;
	size_t len = 0;
	json_error_t jerr;
	struct pollfd pfd;
	uint64_t deadline = h_now_ms() + H_DEADLINE_MS;
	ssize_t n;
	json_t *j;
	int fd = raw_connect(d->status);

	if (buf == NULL)
		buf = malloc(cap);
	assert_non_null(buf);
	assert_true(fd >= 0);
	if (query) {
		assert_int_equal(write(fd, query, strlen(query)),
				 (ssize_t)strlen(query));
		assert_int_equal(write(fd, "\n", 1), 1);
	}
	pfd.fd = fd;
	pfd.events = POLLIN;
	for (;;) {
		assert_true(h_now_ms() < deadline);
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		n = read(fd, buf + len, cap - len - 1);
		assert_true(n >= 0);
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	j = json_loads(buf, 0, &jerr);
	assert_non_null(j);
	return j;
}

void hd_read_log(const struct hdaemon *d, char *buf, size_t cap)
{
	FILE *f = fopen(d->log, "r");
	size_t n;

	assert_non_null(f);
	n = fread(buf, 1, cap - 1, f);
	buf[n] = '\0';
	fclose(f);
}

json_t *hd_status(struct hdaemon *d)
{
	return hd_status_query(d, "{\"op\":\"status\"}");
}

long long json_path_int(json_t *root, const char *path)
{
	char copy[256], *tok, *save = NULL;
	json_t *cur = root;

	snprintf(copy, sizeof(copy), "%s", path);
	for (tok = strtok_r(copy, ".", &save); tok && cur;
	     tok = strtok_r(NULL, ".", &save))
		cur = json_object_get(cur, tok);
	assert_true(json_is_integer(cur));
	return json_integer_value(cur);
}

json_t *h_client(json_t *status, const char *name)
{
	json_t *c;
	size_t i;

	json_array_foreach(json_object_get(status, "clients"), i, c)
		if (strcmp(json_string_value(json_object_get(c, "name")),
			   name) == 0)
			return c;
	return NULL;
}

long long hd_status_int(struct hdaemon *d, const char *path)
{
	json_t *st = hd_status(d);
	long long v = json_path_int(st, path);

	json_decref(st);
	return v;
}

const char *const h_one_port[] = { H_SIM0, NULL };

int h_setup_daemon(void **state)
{
	static struct h_fixture f;

	hd_start(&f.d, NULL, h_one_port, NULL);
	*state = &f;
	return 0;
}

int h_teardown_daemon(void **state)
{
	struct h_fixture *f = *state;

	hd_stop(&f->d);
	return 0;
}

void tc_connect_gid(struct tclient *tc, struct hdaemon *d, const char *name,
		    const char *gid)
{
	char err[256];

	assert_int_equal(tc_connect(tc, d, name, 1, 0, err, sizeof(err)), 0);
	if (gid)
		assert_int_equal(tc_register(tc, gid), 0);
}

void tc_barrier(struct tclient *tc)
{
	assert_int_equal(muxbe_ping(tc->mb), 0);
	muxbe_process(tc->mb);
}

int h_wait_until(int (*cond)(void *arg), void *arg, int timeout_ms)
{
	uint64_t deadline = h_now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		if (cond(arg))
			return 1;
		if (h_now_ms() >= deadline)
			return 0;
		poll(NULL, 0, 10);
	}
}

struct h_status_want {
	struct hdaemon *d;
	const char *path;
	long long want;
	int at_least;
};

static int h_status_reads(void *arg)
{
	struct h_status_want *w = arg;
	long long v = hd_status_int(w->d, w->path);

	return w->at_least ? v >= w->want : v == w->want;
}

int hd_wait_status_int_within(struct hdaemon *d, const char *path,
			      long long want, int timeout_ms)
{
	struct h_status_want w = { d, path, want, 0 };

	return h_wait_until(h_status_reads, &w, timeout_ms);
}

int hd_wait_status_at_least(struct hdaemon *d, const char *path, long long min,
			    int timeout_ms)
{
	struct h_status_want w = { d, path, min, 1 };

	return h_wait_until(h_status_reads, &w, timeout_ms);
}

int hd_wait_status_int(struct hdaemon *d, const char *path, long long want)
{
	return hd_wait_status_int_within(d, path, want, H_DEADLINE_MS);
}

struct h_client_want {
	struct hdaemon *d;
	const char *name;
};

static int h_client_is_gone(void *arg)
{
	struct h_client_want *w = arg;
	json_t *st = hd_status(w->d);
	int gone = h_client(st, w->name) == NULL;

	json_decref(st);
	return gone;
}

int hd_wait_client_gone(struct hdaemon *d, const char *name)
{
	struct h_client_want w = { d, name };

	return h_wait_until(h_client_is_gone, &w, H_DEADLINE_MS);
}

static void tc_recv(void *user, void *buf_ctx, void *buf, size_t mad_len,
		    const struct muxbe_addr *addr)
{
	struct tclient *tc = user;
	struct tc_rx *r;

	(void)buf_ctx;
	if (addr == NULL)
		return; /* flushed, not received */
	if (tc->nrx < TC_RX_MAX) {
		r = &tc->rx[tc->nrx++];
		r->addr = *addr;
		r->len = mad_len;
		memcpy(r->grh, buf, MUXBE_GRH_SIZE);
		memcpy(r->mad, (uint8_t *)buf + MUXBE_GRH_SIZE, mad_len);
	}
	if (tc->repost)
		muxbe_post_recv(tc->mb, buf, MUXBE_RECV_BUF_MIN, NULL);
}

static void tc_send_done(void *user, void *ctx, int status, const char *msg)
{
	struct tclient *tc = user;

	(void)ctx;
	(void)msg;
	tc->sends_done++;
	if (status) {
		tc->sends_failed++;
		tc->last_send_status = status;
	}
}

static void tc_port_event(void *user, uint16_t port, const char *name,
			  int active)
{
	struct tclient *tc = user;

	(void)port;
	(void)name;
	tc->port_events++;
	tc->port_active = active;
}

static void tc_disconnected(void *user, int err)
{
	struct tclient *tc = user;

	(void)err;
	tc->disconnected = 1;
}

static void tc_mad_lost(void *user, uint16_t port, unsigned count,
			const char *message)
{
	struct tclient *tc = user;

	(void)port;
	tc->lost += (int)count;
	snprintf(tc->last_lost, sizeof(tc->last_lost), "%s", message);
}

static void tc_link(void *user, int up, int status, const char *message)
{
	struct tclient *tc = user;

	if (up)
		tc->link_ups++;
	else
		tc->link_downs++;
	tc->link_status = status;
	snprintf(tc->link_message, sizeof(tc->link_message), "%s", message);
}

static const struct muxbe_callbacks tc_cb = {
	.recv = tc_recv,
	.send_done = tc_send_done,
	.port_event = tc_port_event,
	.disconnected = tc_disconnected,
	.mad_lost = tc_mad_lost,
	.link = tc_link,
};

int tc_has_link_ups(struct tclient *tc, int n)
{
	return tc->link_ups >= n;
}

void hd_kill(struct hdaemon *d, int sig)
{
	int status;

	assert_true(d->pid > 0);
	kill(d->pid, sig);
	assert_int_equal(waitpid(d->pid, &status, 0), d->pid);
	d->pid = 0;
}

int tc_has_lost(struct tclient *tc, int n)
{
	return tc->lost >= n;
}

int tc_connect(struct tclient *tc, struct hdaemon *d, const char *name,
	       int post_buffers, unsigned rx_queue_max, char *err,
	       size_t errlen)
{
	struct muxbe_options o = {
		.socket_path = d->sock,
		.name = name,
		.cb = &tc_cb,
		.user = tc,
		.rx_queue_max = rx_queue_max,
		.timeout_ms = H_DEADLINE_MS,
		.errbuf = err,
		.errbuf_len = errlen,
	};
	int i, rc;

	memset(tc, 0, sizeof(*tc));
	rc = muxbe_connect(&o, &tc->mb);
	if (rc < 0)
		return rc;
	tc->repost = post_buffers;
	for (i = 0; post_buffers && i < TC_BUFS; i++)
		assert_int_equal(muxbe_post_recv(tc->mb, tc->bufs[i],
						 sizeof(tc->bufs[i]), NULL),
				 0);
	return 0;
}

void tc_close(struct tclient *tc)
{
	muxbe_close(tc->mb);
	tc->mb = NULL;
}

const char *h_port0(void)
{
	const char *umad = getenv("RCM_TEST_UMAD_PORT");

	return umad ? umad : "sim0";
}

int h_real_port(void)
{
	return getenv("RCM_TEST_UMAD_PORT") != NULL;
}

int tc_register(struct tclient *tc, const char *gid)
{
	struct gid g;
	int rc;

	assert_int_equal(gid_parse(gid, &g), 0);
	memcpy(tc->gid, g.raw, 16);
	rc = muxbe_register_gid(tc->mb, h_port0(), g.raw, &tc->port);
	/* The QP that h_mad()'s REQs, REPs and SIDR_REPs name. */
	if (rc == 0)
		assert_int_equal(muxbe_register_qpn(tc->mb, h_port0(), h_qpn()),
				 0);
	return rc;
}

int tc_pump_until(struct tclient *tc, int (*cond)(struct tclient *, int),
		  int arg, int timeout_ms)
{
	uint64_t deadline = h_now_ms() + (uint64_t)timeout_ms;
	struct pollfd pfd = { .fd = muxbe_fd(tc->mb), .events = POLLIN };

	for (;;) {
		muxbe_process(tc->mb);
		if (cond(tc, arg))
			return 1;
		if (h_now_ms() >= deadline)
			return 0;
		poll(&pfd, 1, 10);
	}
}

int tc_has_rx(struct tclient *tc, int n)
{
	return tc->nrx >= n;
}

int tc_has_sends(struct tclient *tc, int n)
{
	return tc->sends_done >= n;
}

static void tc_addr(struct tclient *tc, const char *dst, struct muxbe_addr *a)
{
	struct gid g;

	memset(a, 0, sizeof(*a));
	assert_int_equal(gid_parse(dst, &g), 0);
	a->port = tc->port;
	a->grh = 1;
	a->hop_limit = 64;
	a->remote_qpn = GSI_QPN;
	a->qkey = GSI_QKEY;
	memcpy(a->local_gid, tc->gid, 16);
	memcpy(a->remote_gid, g.raw, 16);
}

int tc_send(struct tclient *tc, const char *dst, const uint8_t *mad)
{
	struct muxbe_addr a;

	tc_addr(tc, dst, &a);
	return muxbe_send_mad(tc->mb, &a, mad, MAD_SIZE, NULL);
}

int tc_send_sync(struct tclient *tc, const char *dst, const uint8_t *mad)
{
	struct muxbe_addr a;

	tc_addr(tc, dst, &a);
	return muxbe_send_mad_sync(tc->mb, &a, mad, MAD_SIZE);
}

int raw_send(int fd, uint8_t kind, uint8_t flags, uint32_t rid,
	     const void *payload, size_t len)
{
	uint8_t hdr[PROTO_HDR_SIZE];

	proto_header_encode(hdr, kind, flags, rid, (uint32_t)len);
	if (send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL) != (ssize_t)sizeof(hdr))
		return -errno;
	if (len && send(fd, payload, len, MSG_NOSIGNAL) != (ssize_t)len)
		return -errno;
	return 0;
}

void h_write_file(const char *path, const char *text)
{
	FILE *fp = fopen(path, "w");

	assert_non_null(fp);
	fputs(text, fp);
	assert_int_equal(fclose(fp), 0);
}

int raw_hello_ok(const char *path, const char *name)
{
	uint8_t kind, flags, buf[1024];
	char hello[256];
	uint32_t rid;
	int s = raw_connect(path);

	assert_true(s >= 0);
	snprintf(
		hello, sizeof(hello),
		"{\"op\":\"hello\",\"protocol\":{\"major\":1,\"minor\":0},\"name\":\"%s\"}",
		name);
	assert_int_equal(raw_send_json(s, 1, hello), 0);
	assert_true(raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf),
			     H_DEADLINE_MS) > 0);
	assert_non_null(strstr((char *)buf, "\"ok\":true"));
	return s;
}

int raw_hello_gid(const char *path, const char *name, const char *gid)
{
	uint8_t kind, flags, buf[1024];
	char reg[128];
	uint32_t rid;
	int s = raw_hello_ok(path, name);

	snprintf(reg, sizeof(reg), "{\"op\":\"register_gid\",\"gid\":\"%s\"}",
		 gid);
	assert_int_equal(raw_send_json(s, 2, reg), 0);
	assert_true(raw_recv(s, &kind, &flags, &rid, buf, sizeof(buf),
			     H_DEADLINE_MS) > 0);
	assert_non_null(strstr((char *)buf, "\"ok\":true"));
	return s;
}

int raw_send_json(int fd, uint32_t rid, const char *json)
{
	return raw_send(fd, PROTO_KIND_JSON, 0, rid, json, strlen(json));
}

static int read_full(int fd, uint8_t *buf, size_t len, uint64_t deadline)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		if (h_now_ms() >= deadline)
			return -ETIMEDOUT;
		if (poll(&pfd, 1, 20) <= 0)
			continue;
		n = read(fd, buf + got, len - got);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return -errno;
		got += (size_t)n;
	}
	return 0;
}

int raw_recv(int fd, uint8_t *kind, uint8_t *flags, uint32_t *rid, uint8_t *buf,
	     size_t cap, int timeout_ms)
{
	uint64_t deadline = h_now_ms() + (uint64_t)timeout_ms;
	uint8_t hdr[PROTO_HDR_SIZE];
	uint32_t len;
	int rc;

	rc = read_full(fd, hdr, sizeof(hdr), deadline);
	if (rc < 0)
		return rc;
	*kind = hdr[0];
	*flags = hdr[1];
	*rid = wire_get32(hdr + 4);
	len = wire_get32(hdr + 8);
	assert_true(len < cap);
	rc = read_full(fd, buf, len, deadline);
	if (rc < 0)
		return rc;
	buf[len] = '\0';
	return (int)len;
}

int raw_read_to_end(int fd, char *out, size_t cap, int timeout_ms)
{
	uint64_t deadline = h_now_ms() + (uint64_t)timeout_ms;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	size_t have = 0, take;
	char buf[4096];
	ssize_t n;
	int rc = -ETIMEDOUT;

	while (h_now_ms() < deadline) {
		if (poll(&pfd, 1, 20) <= 0)
			continue;
		n = read(fd, buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0) {
			rc = n == 0 ? 0 : -errno;
			break;
		}
		take = out && cap > have + 1 ? cap - 1 - have : 0;
		take = (size_t)n < take ? (size_t)n : take;
		if (take)
			memcpy(out + have, buf, take);
		have += take;
	}
	if (out && cap)
		out[have] = '\0';
	return rc;
}

int raw_wait_eof(int fd, int timeout_ms)
{
	int rc = raw_read_to_end(fd, NULL, 0, timeout_ms);

	return rc == 0 || rc == -ECONNRESET;
}

void simpeer_open(struct simpeer *sp, struct hdaemon *d, const char *name,
		  const char *gid)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct gid g;

	memset(sp, 0, sizeof(*sp));
	assert_int_equal(gid_parse(gid, &g), 0);
	memcpy(sp->gid, g.raw, 16);
	snprintf(sp->fabric, sizeof(sp->fabric), "%s", d->fabric);
	assert_true((size_t)snprintf(sp->path, sizeof(sp->path), "%s/%s.sock",
				     d->fabric, name) < sizeof(sun.sun_path));
	sp->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(sp->fd >= 0);
	memcpy(sun.sun_path, sp->path, strlen(sp->path) + 1);
	unlink(sp->path);
	assert_int_equal(bind(sp->fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
}

void simpeer_close(struct simpeer *sp)
{
	close(sp->fd);
	unlink(sp->path);
}

void simpeer_send(struct simpeer *sp, const char *dst, const uint8_t *mad)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	uint8_t buf[SIM_DGRAM_MAX];
	struct proto_mad m;
	struct dirent *de;
	struct gid g;
	DIR *dir;
	int len;

	memset(&m, 0, sizeof(m));
	assert_int_equal(gid_parse(dst, &g), 0);
	m.addr.flags = PROTO_MAD_F_GRH;
	m.addr.hop_limit = 64;
	m.addr.remote_qpn = GSI_QPN;
	m.addr.qkey = GSI_QKEY;
	memcpy(m.addr.local_gid, sp->gid, 16);
	memcpy(m.addr.remote_gid, g.raw, 16);
	m.mad_len = MAD_SIZE;
	memcpy(m.mad, mad, MAD_SIZE);
	len = sim_dgram_encode(&m, buf, sizeof(buf));
	assert_true(len > 0);
	/* The daemons' sim ports: every socket in the fabric but ours. */
	dir = opendir(sp->fabric);
	assert_non_null(dir);
	while ((de = readdir(dir)) != NULL) {
		size_t nl = strlen(de->d_name);

		if (nl < 6 || strcmp(de->d_name + nl - 5, ".sock") != 0)
			continue;
		if ((size_t)snprintf(sun.sun_path, sizeof(sun.sun_path),
				     "%s/%s", sp->fabric,
				     de->d_name) >= sizeof(sun.sun_path) ||
		    strcmp(sun.sun_path, sp->path) == 0)
			continue;
		sendto(sp->fd, buf, (size_t)len, 0, (struct sockaddr *)&sun,
		       sizeof(sun));
	}
	closedir(dir);
}

int simpeer_recv(struct simpeer *sp, uint8_t *mad, uint8_t *src, int timeout_ms)
{
	uint64_t deadline = h_now_ms() + (uint64_t)timeout_ms;
	struct pollfd pfd = { .fd = sp->fd, .events = POLLIN };
	uint8_t buf[SIM_DGRAM_MAX + 1];
	struct proto_mad m;
	ssize_t n;

	while (h_now_ms() < deadline) {
		if (poll(&pfd, 1, 20) <= 0)
			continue;
		n = recv(sp->fd, buf, sizeof(buf), 0);
		if (n <= 0 || sim_dgram_decode(buf, (size_t)n, &m) < 0)
			continue;
		if (memcmp(m.addr.remote_gid, sp->gid, 16) != 0)
			continue; /* broadcast to somebody else */
		memcpy(mad, m.mad, MAD_SIZE);
		if (src)
			memcpy(src, m.addr.local_gid, 16);
		return 1;
	}
	return 0;
}

void simpeer_expect(struct simpeer *sp, uint16_t attr, uint8_t *mad)
{
	assert_true(simpeer_recv(sp, mad, NULL, H_DEADLINE_MS));
	assert_int_equal(cm_mad_attr_id(mad), attr);
}

void tc_expect(struct tclient *tc, int n, uint16_t attr)
{
	assert_true(tc_pump_until(tc, tc_has_rx, n, H_DEADLINE_MS));
	assert_int_equal(cm_mad_attr_id(tc->rx[n - 1].mad), attr);
}

uint32_t h_qpn(void)
{
	return own_qp(h_port0());
}

void h_mad(uint8_t *mad, uint16_t attr, uint32_t local, uint32_t remote,
	   uint64_t tid)
{
	cm_mad_init(mad, attr, tid);
	wire_put32(mad + MAD_HDR_SIZE, local);
	wire_put32(mad + MAD_HDR_SIZE + 4, remote);
	/* The daemon sends these only for the QP's owner: this process. */
	if (attr == CM_ATTR_REQ)
		cm_field_set(mad, CM_REQ_LOCAL_QPN, h_qpn());
	else if (attr == CM_ATTR_REP)
		cm_field_set(mad, CM_REP_LOCAL_QPN, h_qpn());
	else if (attr == CM_ATTR_SIDR_REP)
		cm_field_set(mad, CM_SIDR_REP_QPN, h_qpn());
}

void h_req(uint8_t *mad, uint32_t local, const char *src, const char *dst)
{
	struct gid s, d;

	assert_int_equal(gid_parse(src, &s), 0);
	assert_int_equal(gid_parse(dst, &d), 0);
	h_mad(mad, CM_ATTR_REQ, local, 0, 0x42000000ull | local);
	cm_field_set(mad, CM_REQ_STARTING_PSN, local & 0xffffff);
	/* rdma_cm's timing (CMA_CM_RESPONSE_TIMEOUT, CMA_MAX_CM_RETRIES). */
	cm_field_set(mad, CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT, 20);
	cm_field_set(mad, CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT, 20);
	cm_field_set(mad, CM_REQ_MAX_CM_RETRIES, 15);
	cm_field_set(mad, CM_REQ_SERVICE_ID, rdma_service_id(CMA_PS_TCP, 7471));
	cm_set_gid(mad, CM_REQ_OFF_PRIMARY_LOCAL_GID, &s);
	cm_set_gid(mad, CM_REQ_OFF_PRIMARY_REMOTE_GID, &d);
	cma_hdr_build(mad + CM_REQ_OFF_PRIVATE_DATA, &s, &d, 7471);
}

int h_admin_raw(const char *path, const char *bytes, int shut, int wait_ms,
		char *reply, size_t cap)
{
	struct pollfd pfd;
	size_t len = 0;
	ssize_t n;
	int s = raw_connect(path);

	if (s < 0)
		return s;
	if (write(s, bytes, strlen(bytes)) != (ssize_t)strlen(bytes) ||
	    (shut && shutdown(s, SHUT_WR) < 0)) {
		close(s);
		return -EIO;
	}
	pfd.fd = s;
	pfd.events = POLLIN;
	while (len < cap - 1 && poll(&pfd, 1, wait_ms) > 0) {
		n = read(s, reply + len, cap - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	reply[len] = '\0';
	close(s);
	return (int)len;
}

int h_admin_stream(const char *path, const char *request, char *reply,
		   size_t cap)
{
	struct pollfd pfd;
	size_t len = 0;
	ssize_t n;
	int s = raw_connect(path);

	if (s < 0)
		return s;
	if (write(s, request, strlen(request)) != (ssize_t)strlen(request) ||
	    write(s, "\n", 1) != 1) {
		close(s);
		return -EIO;
	}
	pfd.fd = s;
	pfd.events = POLLIN;
	/* One byte at a time: what follows the first line is the stream's. */
	while (len < cap - 1 && poll(&pfd, 1, H_DEADLINE_MS) > 0) {
		n = read(s, reply + len, 1);
		if (n <= 0 || reply[len] == '\n')
			break;
		len++;
	}
	reply[len] = '\0';
	return s;
}

int h_admin(const char *path, const char *request, char *reply, size_t cap)
{
	char line[4096];

	snprintf(line, sizeof(line), "%s\n", request);
	return h_admin_raw(path, line, 0, H_DEADLINE_MS, reply, cap);
}
