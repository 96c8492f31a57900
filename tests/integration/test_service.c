// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The daemon as a system service: a SIGTERM at any moment, named
 * threads, one daemon per socket and port, systemd's readiness,
 * watchdog and socket activation, the configuration file and its
 * reloads, and journald's fields.
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
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/integration/harness.h"
#include "tests/lib/proc_figures.h"
#include "common/cm_mad.h"
#include "common/gid.h"
#include "common/wire.h"
#include "protocol/rdmacm_mux_proto.h"

/* Regression: a SIGTERM that lands as soon as the sockets exist (before
 * the event loop ran) once killed the daemon without its clean-up.  The
 * window was short; this catches it reliably where start-up is slow:
 * under valgrind (scripts/check.sh) and in the lab (scenario 08). */
static void test_sigterm_right_after_start(void **state)
{
	struct hdaemon d;
	int i;

	(void)state;
	for (i = 0; i < 5; i++) {
		hd_start(&d, NULL, h_one_port, NULL);
		hd_stop(&d); /* asserts exit status 0 and the sockets gone */
	}
}

/* How many of the daemon's threads carry each of want's names. */
static int count_named_threads(pid_t pid, const char *const *want, int *seen)
{
	char path[64], name[32];
	struct dirent *e;
	int n = 0, i;
	DIR *dir;
	FILE *fp;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	assert_non_null(dir);
	for (i = 0; want[i] != NULL; i++)
		seen[i] = 0;
	while ((e = readdir(dir)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/comm",
			 (int)pid, e->d_name);
		fp = fopen(path, "r");
		if (fp == NULL)
			continue; /* a thread that has just ended */
		if (fgets(name, sizeof(name), fp) != NULL) {
			name[strcspn(name, "\n")] = '\0';
			for (i = 0; want[i] != NULL; i++)
				if (strcmp(name, want[i]) == 0 &&
				    seen[i]++ == 0)
					n++;
		}
		fclose(fp);
	}
	closedir(dir);
	return n;
}

/* Every thread says what it is, as rdmacm-muxd(8) lists them, one per
 * worker (three asked for here). */
static void test_threads_are_named(void **state)
{
	static const char *const extra[] = { "--workers", "3", NULL };
	static const char *const want[] = { "muxd-worker0", "muxd-worker1",
					    "muxd-worker2", "muxd-ports",
					    "muxd-status",  NULL };
	enum { NWANT = sizeof(want) / sizeof(want[0]) - 1 };
	uint64_t deadline = h_now_ms() + H_DEADLINE_MS;
	int seen[NWANT], found = 0;
	struct hdaemon d;

	(void)state;
	hd_start(&d, NULL, h_one_port, extra);
	/* A thread names itself as it starts: wait for the last one. */
	while (h_now_ms() < deadline &&
	       (found = count_named_threads(d.pid, want, seen)) < NWANT)
		usleep(10000);
	hd_stop(&d); /* first: a failed assertion would leave it running */
	for (int i = 0; i < NWANT; i++)
		if (!seen[i])
			print_error("no thread named %s\n", want[i]);
	assert_int_equal(found, NWANT);
	assert_int_equal(seen[0] + seen[1] + seen[2], 3);
}

/* The names in /tmp like the daemon's private sim fabrics, as
 * "|name|name|" (the daemons' own sweep may remove some of them). */
static void private_fabrics(char *out, size_t cap)
{
	struct dirent *e;
	DIR *dir = opendir("/tmp");
	size_t len = 0;

	assert_non_null(dir);
	out[len++] = '|';
	out[len] = '\0';
	while ((e = readdir(dir)) != NULL)
		if (strncmp(e->d_name, "rdmacm-mux-sim.", 15) == 0 &&
		    len + strlen(e->d_name) + 2 < cap)
			len += (size_t)snprintf(out + len, cap - len, "%s|",
						e->d_name);
	closedir(dir);
}

/* No private fabric in /tmp now that was not there in before. */
static int no_new_private_fabric(const char *before)
{
	char now[8192], *name, *save = NULL, want[300];

	private_fabrics(now, sizeof(now));
	for (name = strtok_r(now, "|", &save); name;
	     name = strtok_r(NULL, "|", &save)) {
		snprintf(want, sizeof(want), "|%s|", name);
		if (strstr(before, want) == NULL)
			return 0;
	}
	return 1;
}

/* A private sim fabric's directory, the one whose sim0.lock names pid
 * (its daemon writes its pid there): 0 and path, or -1. */
static int fabric_of(pid_t pid, char *path, size_t cap)
{
	char all[8192], *name, *save = NULL, lock[300], text[32] = "";
	FILE *f;

	private_fabrics(all, sizeof(all));
	for (name = strtok_r(all, "|", &save); name;
	     name = strtok_r(NULL, "|", &save)) {
		snprintf(lock, sizeof(lock), "/tmp/%s/sim0.lock", name);
		f = fopen(lock, "r");
		if (f == NULL)
			continue;
		if (fgets(text, sizeof(text), f) && atoi(text) == (int)pid) {
			fclose(f);
			snprintf(path, cap, "/tmp/%s", name);
			return 0;
		}
		fclose(f);
	}
	return -1;
}

/* A daemon of its own (no --sim-fabric: a private fabric in /tmp) on
 * sockets in dir, ready: its pid. */
static pid_t start_private(const char *dir, const char *tag)
{
	char sock[256], status[256];
	uint64_t deadline = h_now_ms() + (uint64_t)H_DEADLINE_MS;
	pid_t pid;
	int fd;

	snprintf(sock, sizeof(sock), "%s/%s.sock", dir, tag);
	snprintf(status, sizeof(status), "%s/%s-status.sock", dir, tag);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		/* A test that fails half-way leaves no daemon behind. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);

		dup2(null, 1);
		dup2(null, 2);
		execl(getenv("RDMACM_MUXD"), "rdmacm-muxd", "--config", "none",
		      "-s", sock, "-S", status, "--sim-port", "sim0=fd00::1",
		      (char *)NULL);
		_exit(127);
	}
	while ((fd = raw_connect(status)) < 0) {
		assert_true(h_now_ms() < deadline);
		poll(NULL, 0, 10);
	}
	close(fd);
	return pid;
}

/* A daemon killed with -9 cannot remove its private sim fabric; the next
 * daemon removes it, having proved its owner gone (none of its port
 * locks is held), and keeps a live daemon's. */
static void test_killed_daemons_fabric_is_removed(void **state)
{
	char dir[] = "/tmp/rcm-sweep.XXXXXX", killed[300], live[300],
	     fresh[300];
	pid_t a, b, c;
	int status;

	(void)state;
	if (h_real_port())
		skip(); /* sim fabrics only */
	assert_non_null(mkdtemp(dir));
	a = start_private(dir, "a");
	c = start_private(dir, "c");
	assert_int_equal(fabric_of(a, killed, sizeof(killed)), 0);
	assert_int_equal(fabric_of(c, live, sizeof(live)), 0);
	kill(a, SIGKILL);
	assert_int_equal(waitpid(a, &status, 0), a);
	assert_int_equal(access(killed, F_OK), 0);
	b = start_private(dir, "b");
	assert_int_equal(access(killed, F_OK), -1);
	assert_int_equal(access(live, F_OK), 0);
	assert_int_equal(fabric_of(b, fresh, sizeof(fresh)), 0);
	kill(b, SIGTERM);
	kill(c, SIGTERM);
	assert_int_equal(waitpid(b, &status, 0), b);
	assert_int_equal(waitpid(c, &status, 0), c);
	/* A clean stop removes its own. */
	assert_int_equal(access(fresh, F_OK), -1);
	assert_int_equal(access(live, F_OK), -1);
	rmdir(dir);
}

/* One daemon per socket and per port: a second one says who holds what
 * and exits 1, having removed what it made; a crashed daemon's socket
 * is taken over; a file that is not a socket is never removed. */
static void test_one_daemon_per_socket_and_port(void **state)
{
	struct h_fixture *f = *state;
	char out[4096], pid[32], other_sock[256], other_status[256], file[320];
	char run_dir[256];
	char fabrics[8192];
	int fd;

	if (h_real_port())
		skip();
	snprintf(pid, sizeof(pid), "(pid %d;", (int)f->d.pid);
	snprintf(other_sock, sizeof(other_sock), "%s/other.sock", f->d.dir);
	snprintf(other_status, sizeof(other_status), "%s/other-status.sock",
		 f->d.dir);
	snprintf(run_dir, sizeof(run_dir), "%s/run", f->d.dir);

	/* The same client socket. */
	{
		const char *const args[] = { "--sim-port=sim0", "-s",
					     f->d.sock,         "-S",
					     other_status,      NULL };

		private_fabrics(fabrics, sizeof(fabrics));
		assert_int_equal(hd_run(args, out, sizeof(out)), 1);
		assert_non_null(
			strstr(out, "is in use by another rdmacm-muxd"));
		assert_non_null(strstr(out, pid));
		assert_true(no_new_private_fabric(fabrics));
		assert_int_equal(access(other_status, F_OK), -1);
	}
	/* The same sim port on the same fabric. */
	{
		const char *const args[] = { "--sim-port=sim0", "--sim-fabric",
					     f->d.fabric,       "-s",
					     other_sock,        "-S",
					     other_status,      NULL };

		assert_int_equal(hd_run(args, out, sizeof(out)), 1);
		assert_non_null(
			strstr(out,
			       "port sim0 is in use by another rdmacm-muxd"));
		assert_non_null(strstr(out, pid));
		assert_int_equal(access(other_sock, F_OK), -1);
		assert_int_equal(access(other_status, F_OK), -1);
	}
	/* A port that fails after a sim port opened in a private fabric:
	 * the fabric goes, with everything in it. */
	{
		const char *args[] = { "--sim-port=simX",
				       "--port=nosuchdev0:1",
				       "--run-dir",
				       run_dir,
				       "-s",
				       other_sock,
				       "-S",
				       other_status,
				       NULL };

		private_fabrics(fabrics, sizeof(fabrics));
		assert_int_equal(hd_run(args, out, sizeof(out)), 1);
		assert_non_null(strstr(out, "nosuchdev0:1"));
		assert_true(no_new_private_fabric(fabrics));
		assert_int_equal(access(other_sock, F_OK), -1);
		snprintf(file, sizeof(file), "%s/port-nosuchdev0-1.lock",
			 run_dir);
		assert_int_equal(access(file, F_OK), -1);
	}
	/* Not a socket: left alone. */
	{
		const char *const args[] = {
			"--sim-port=simY", "-s", file, "-S", other_status, NULL
		};

		snprintf(file, sizeof(file), "%s/not-a-socket", f->d.dir);
		fd = open(file, O_WRONLY | O_CREAT, 0600);
		assert_true(fd >= 0);
		close(fd);
		assert_int_equal(hd_run(args, out, sizeof(out)), 1);
		assert_non_null(strstr(out, "is not a socket"));
		assert_int_equal(access(file, F_OK), 0);
	}
	/* kill -9: its sockets and locks stay behind, and are taken over. */
	kill(f->d.pid, SIGKILL);
	waitpid(f->d.pid, NULL, 0);
	f->d.pid = 0;
	assert_int_equal(access(f->d.sock, F_OK), 0);
	hd_restart(&f->d);
	assert_int_equal(hd_status_int(&f->d, "daemon.pid"), f->d.pid);
}

/* systemd: Type=notify (READY=1 once the sockets listen, STATUS=, the
 * watchdog, STOPPING=1) and socket activation (the client and status
 * sockets handed over as descriptors 3 and 4, matched by path; their
 * paths stay when the daemon stops).  A fake NOTIFY_SOCKET and
 * LISTEN_FDS, no systemd. */
static int bound_stream(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	assert_int_equal(listen(fd, 16), 0);
	return fd;
}

static int notify_wait(int fd, const char *what, char *msg, size_t cap)
{
	uint64_t deadline = h_now_ms() + (uint64_t)H_DEADLINE_MS;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ssize_t n;

	while (h_now_ms() < deadline) {
		if (poll(&pfd, 1, 50) <= 0)
			continue;
		n = recv(fd, msg, cap - 1, 0);
		if (n <= 0)
			continue;
		msg[n] = '\0';
		if (strstr(msg, what))
			return 1;
	}
	return 0;
}

static void test_systemd_notify_and_activation(void **state)
{
	char dir[] = "/tmp/rcm-sd.XXXXXX", notify[64], sock[64], status[64];
	char fabric[64], msg[512], pidtext[32], cmd[160];
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	const char *bin = getenv("RDMACM_MUXD");
	int nfd, cfd, sfd, s, st;
	pid_t pid;

	(void)state;
	if (h_real_port() || getenv("RDMACM_MUXD_WRAPPER"))
		skip();
	assert_non_null(mkdtemp(dir));
	snprintf(notify, sizeof(notify), "%s/notify", dir);
	snprintf(sock, sizeof(sock), "%s/mux.sock", dir);
	snprintf(status, sizeof(status), "%s/status.sock", dir);
	snprintf(fabric, sizeof(fabric), "%s/fabric", dir);
	nfd = socket(AF_UNIX, SOCK_DGRAM, 0);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", notify);
	assert_int_equal(bind(nfd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	cfd = bound_stream(sock);
	sfd = bound_stream(status);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int a = fcntl(cfd, F_DUPFD, 10), b = fcntl(sfd, F_DUPFD, 10);

		dup2(a, 3);
		dup2(b, 4);
		snprintf(pidtext, sizeof(pidtext), "%d", (int)getpid());
		setenv("LISTEN_PID", pidtext, 1);
		setenv("LISTEN_FDS", "2", 1);
		setenv("NOTIFY_SOCKET", notify, 1);
		setenv("WATCHDOG_USEC", "200000", 1);
		execl(bin, bin, "--config", "none", "-s", sock, "-S", status,
		      "--sim-fabric", fabric, "--sim-port=sim0=fd00::1",
		      (char *)NULL);
		_exit(127);
	}
	close(cfd);
	close(sfd);
	assert_true(notify_wait(nfd, "READY=1", msg, sizeof(msg)));
	assert_non_null(strstr(msg, "STATUS=1 port(s)"));
	snprintf(pidtext, sizeof(pidtext), "MAINPID=%d", (int)pid);
	assert_non_null(strstr(msg, pidtext));
	assert_true(notify_wait(nfd, "WATCHDOG=1", msg, sizeof(msg)));
	/* Clients are served on the sockets systemd made. */
	s = raw_hello_ok(sock, "sd");
	close(s);
	s = raw_connect(status);
	assert_true(s >= 0);
	close(s);
	kill(pid, SIGTERM);
	assert_true(notify_wait(nfd, "STOPPING=1", msg, sizeof(msg)));
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* systemd's paths stay, for the next start. */
	assert_int_equal(access(sock, F_OK), 0);
	assert_int_equal(access(status, F_OK), 0);
	close(nfd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* Waits until the daemon's log has a line containing each of the texts. */
static int log_has(struct hdaemon *d, const char *const *texts)
{
	uint64_t deadline = h_now_ms() + (uint64_t)H_DEADLINE_MS;
	char line[1024];
	int found, i;

	do {
		FILE *fp = fopen(d->log, "r");

		found = 0;
		for (i = 0; fp && texts[i]; i++) {
			rewind(fp);
			while (fgets(line, sizeof(line), fp))
				if (strstr(line, texts[i])) {
					found++;
					break;
				}
		}
		if (fp)
			fclose(fp);
		if (texts[found] == NULL)
			return 1;
		poll(NULL, 0, 20);
	} while (h_now_ms() < deadline);
	for (i = 0; texts[i]; i++)
		print_error("log lacks: %s\n", texts[i]);
	return 0;
}

/* How many times the daemon's workers went to sleep while a client made
 * n pings, one at a time (each a request its worker reads). */
static uint64_t worker_sleeps_for_pings(struct hdaemon *d, struct tclient *tc,
					int n)
{
	struct proc_sched before, after;
	int i;

	before = proc_figures_sched_named(d->pid, "muxd-worker");
	for (i = 0; i < n; i++)
		tc_barrier(tc);
	after = proc_figures_sched_named(d->pid, "muxd-worker");
	return after.sleeps - before.sleeps;
}

/* Until the daemon's status shows --poll-us at want: 1, or 0. */
static int wait_poll_us(struct hdaemon *d, long long want)
{
	return hd_wait_status_int(d, "daemon.poll_us", want);
}

/* --poll-us: a worker that has had input keeps polling instead of
 * sleeping, so a client's next request finds it on a CPU; once the input
 * stops it sleeps again (a worker that went on polling would burn the
 * CPU of an idle daemon); the setting changes on reload; and a daemon
 * that polls stops on SIGTERM as one that sleeps does. */
static void test_poll_us_keeps_a_worker_awake_between_requests(void **state)
{
	char dir[] = "/tmp/rcm-poll.XXXXXX", conf[64], cmd[128];
	const char *const extra[] = { "--config", conf, NULL };
	uint64_t polled, slept;
	struct proc_sched a0, a1;
	struct tclient a;
	struct hdaemon d;

	(void)state;
	if (h_real_port())
		skip();
	assert_non_null(mkdtemp(dir));
	snprintf(conf, sizeof(conf), "%s/rdmacm-muxd.conf", dir);
	h_write_file(conf, "{\"sim-port\": \"sim0=fd00::1*2\", \"workers\": 1,"
			   " \"poll-us\": 1000}\n");
	hd_start(&d, NULL, NULL, extra);
	assert_int_equal(hd_status_int(&d, "daemon.poll_us"), 1000);
	tc_connect_gid(&a, &d, "a", "fd00::1");
	polled = worker_sleeps_for_pings(&d, &a, 200);

	/* Idle for 300 ms: the worker is back asleep within 1 ms of the
	 * last ping, so it spends next to nothing (polling on, 300 ms). */
	a0 = proc_figures_sched_named(d.pid, "muxd-worker");
	poll(NULL, 0, 300);
	a1 = proc_figures_sched_named(d.pid, "muxd-worker");
	print_message("idle worker: %.2f ms of CPU in 300 ms\n",
		      (double)(a1.cpu_ns - a0.cpu_ns) / 1e6);
	assert_true(a1.cpu_ns - a0.cpu_ns < 30000000u);

	h_write_file(conf, "{\"sim-port\": \"sim0=fd00::1*2\", \"workers\": 1,"
			   " \"poll-us\": 0}\n");
	kill(d.pid, SIGHUP);
	assert_true(wait_poll_us(&d, 0));
	slept = worker_sleeps_for_pings(&d, &a, 200);
	print_message("worker sleeps in 200 pings: %llu polling, %llu not\n",
		      (unsigned long long)polled, (unsigned long long)slept);
	/* Without polling, the worker sleeps between many two pings (not
	 * where the next came before it was back in epoll_wait(), which a
	 * busy machine makes more often), and polling between few.  Only
	 * at full speed: a daemon slowed 3-10 times (TSan, valgrind) is
	 * rarely back in epoll_wait() before the client's next ping (7 and
	 * 8 sleeps in 200 without polling), and may take longer than the
	 * poll's millisecond. */
	if (h_time_scale() == 1)
		assert_true(polled * 4 < slept);

	/* Stopping while it polls: on again, pinged, and SIGTERM within
	 * the millisecond the worker polls after the ping. */
	h_write_file(conf, "{\"sim-port\": \"sim0=fd00::1*2\", \"workers\": 1,"
			   " \"poll-us\": 1000}\n");
	kill(d.pid, SIGHUP);
	assert_true(wait_poll_us(&d, 1000));
	tc_barrier(&a);
	hd_stop(&d); /* asserts a clean exit within the deadline */
	tc_close(&a);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* The configuration file: its options apply, the command line wins over
 * it, --check-config reports every error with its line or key, and
 * SIGHUP applies what may change, says what waits for a restart, and
 * keeps everything when the file is wrong. */
static void test_config_file_and_reload(void **state)
{
	struct h_fixture f;
	char dir[] = "/tmp/rcm-conf.XXXXXX", conf[64], text[1024], out[8192];
	char cmd[128];
	struct tclient a, b, c;
	char err[256] = "";
	json_t *st;

	(void)state;
	if (h_real_port())
		skip();
	assert_non_null(mkdtemp(dir));
	snprintf(conf, sizeof(conf), "%s/rdmacm-muxd.conf", dir);
	/* "socket" is overridden by the harness's -s: the command line wins. */
	snprintf(
		text, sizeof(text),
		"{\n  \"sim-port\": [\"sim0=fd00::1*4\"],\n  \"socket\": \"%s/not-used.sock\",\n"
		"  \"workers\": 1,\n  \"max-clients\": 3,\n  \"max-clients-per-uid\": 3,\n"
		"  \"hello-timeout-ms\": 3000,\n  \"log-level\": \"info\"\n}\n",
		dir);
	h_write_file(conf, text);
	{
		const char *const ok[] = { "--check-config", conf, NULL };

		assert_int_equal(hd_run(ok, out, sizeof(out)), 0);
		assert_non_null(strstr(out, ": ok"));
	}
	{
		/* --help: every line fits an 80-column terminal. */
		const char *const help[] = { "--help", NULL };
		char *line, *save = NULL;

		assert_int_equal(hd_run(help, out, sizeof(out)), 0);
		assert_true(strncmp(out, "usage: rdmacm-muxd ", 19) == 0);
		for (line = strtok_r(out, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save))
			assert_true(strlen(line) <= 80);
	}
	{
		const char *const extra[] = { "--config", conf, NULL };

		hd_start(&f.d, NULL, NULL, extra);
	}
	st = hd_status(&f.d);
	assert_int_equal(json_path_int(st, "daemon.limits.max_clients"), 3);
	assert_int_equal(json_path_int(st, "daemon.limits.hello_timeout_ms"),
			 3000);
	assert_int_equal(json_array_size(json_object_get(st, "workers")), 1);
	json_decref(st);
	snprintf(out, sizeof(out), "%s/not-used.sock", dir);
	assert_int_equal(access(out, F_OK), -1);

	/* A reload: two limits and the level change, workers and the sim
	 * port's GID table (as many GIDs, one other) must wait. */
	tc_connect_gid(&a, &f.d, "a", "fd00::1");
	tc_connect_gid(&b, &f.d, "b", NULL);
	snprintf(
		text, sizeof(text),
		"{\"sim-port\": \"sim0=fd00::1*3,fd00::9\", \"workers\": 2, \"max-clients\": 2, \"max-clients-per-uid\": 2, \"hello-timeout-ms\": 3000, \"log-level\": \"debug\"}\n");
	h_write_file(conf, text);
	kill(f.d.pid, SIGHUP);
	{
		const char *const said[] = {
			"SIGHUP: max-clients: 3 -> 2",
			"SIGHUP: log-level: info -> debug",
			"SIGHUP: workers: 1 -> 2 needs a restart",
			"SIGHUP: sim-port: sim0:0/0/4/",
			"SIGHUP: 5 option(s) changed",
			NULL
		};

		assert_true(log_has(&f.d, said));
	}
	assert_int_equal(hd_status_int(&f.d, "daemon.limits.max_clients"), 2);
	assert_true(tc_connect(&c, &f.d, "c", 1, 0, err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "too many clients"));
	/* debug is in force: GID churn is logged now. */
	assert_int_equal(tc_register(&b, "fd00::2"), 0);
	{
		const char *const said[] = { "(b): registered fd00::2", NULL };

		assert_true(log_has(&f.d, said));
	}

	/* A broken file: every error said, nothing changed. */
	h_write_file(
		conf,
		"{\"sim-port\": \"sim0\", \"max-clients\": 0,\n"
		" \"workers\": \"many\", \"log-level\": \"loud\", \"colour\": 1}\n");
	{
		const char *const bad[] = { "--check-config", conf, NULL };

		assert_int_equal(hd_run(bad, out, sizeof(out)), 1);
		assert_non_null(
			strstr(out, "key 'max-clients': '0' is not a number"));
		assert_non_null(
			strstr(out, "key 'workers': expected a number"));
		assert_non_null(strstr(out, "key 'log-level': 'loud' is not"));
		assert_non_null(strstr(out, "key 'colour': no such option"));
	}
	kill(f.d.pid, SIGHUP);
	{
		const char *const said[] = {
			"SIGHUP: 4 error(s): nothing reloaded", NULL
		};

		assert_true(log_has(&f.d, said));
	}
	h_write_file(conf, "{\"sim-port\": \"sim0\",\n \"workers\": 2\n");
	{
		const char *const bad[] = { "--check-config", conf, NULL };

		assert_int_equal(hd_run(bad, out, sizeof(out)), 1);
		assert_non_null(strstr(out, "line 3"));
	}
	kill(f.d.pid, SIGHUP);
	{
		const char *const said[] = {
			"SIGHUP: 1 error(s): nothing reloaded", NULL
		};

		assert_true(log_has(&f.d, said));
	}
	assert_int_equal(hd_status_int(&f.d, "daemon.limits.max_clients"), 2);
	/* Options on the command line are checked with the file's. */
	{
		const char *const bad[] = { "--check-config", "--sim-port=sim0",
					    "--max-gids", "-3", NULL };

		assert_int_equal(hd_run(bad, out, sizeof(out)), 1);
		assert_non_null(
			strstr(out, "--max-gids: '-3' is not a number"));
	}
	/* Digits only, as the other tools take numbers: a sign or a space
	 * is a typo, not a value. */
	{
		const char *const plus[] = { "--check-config",
					     "--sim-port=sim0", "--workers",
					     "+2", NULL };
		const char *const space[] = { "--check-config",
					      "--sim-port=sim0",
					      "--socket-mode", " 660", NULL };

		assert_int_equal(hd_run(plus, out, sizeof(out)), 1);
		assert_non_null(
			strstr(out, "--workers: '+2' is not a number in [1, "));
		assert_int_equal(hd_run(space, out, sizeof(out)), 1);
		assert_non_null(
			strstr(out,
			       "--socket-mode: ' 660' is not an octal mode"));
	}
	tc_close(&a);
	tc_close(&b);
	hd_stop(&f.d);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* Lists on the command line in any order: --port and --sim-port fill one
 * list, and a --qemu-socket may come before the port it names; none
 * drops what came before it (the first of them used to drop the rest's
 * earlier values, with the file's). */
static void test_command_line_lists_in_any_order(void **state)
{
	char dir[] = "/tmp/rcm-lists.XXXXXX", qsock[64], cmd[128];
	const char *const extra[] = {
		"--qemu-socket", qsock,          "--sim-port", "sima=fd00::1",
		"--sim-port",    "simb=fd00::2", NULL
	};
	struct hdaemon d;
	struct stat st;
	json_t *status;

	(void)state;
	if (h_real_port())
		skip();
	assert_non_null(mkdtemp(dir));
	snprintf(qsock, sizeof(qsock), "simb=%s/q.sock", dir);
	hd_start(&d, NULL, NULL, extra);
	status = hd_status(&d);
	assert_int_equal(json_array_size(json_object_get(status, "ports")), 2);
	json_decref(status);
	assert_int_equal(stat(qsock + 5, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	hd_stop(&d);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* As a service, the daemon writes the journal's native protocol, with a
 * client's identity in fields of their own (a fake journal socket). */
static void test_journal_fields(void **state)
{
	struct h_fixture f;
	char dir[] = "/tmp/rcm-journal.XXXXXX", path[64], target[96], cmd[96];
	char buf[4096], text[8192] = "";
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	uint8_t mad[MAD_SIZE];
	struct tclient a, b;
	uint64_t deadline;
	ssize_t n;
	int jfd, i;

	(void)state;
	if (h_real_port())
		skip();
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/journal", dir);
	snprintf(target, sizeof(target), "--log-target=journal:%s", path);
	jfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	assert_int_equal(bind(jfd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	{
		const char *const extra[] = { target, NULL };

		hd_start(&f.d, NULL, h_one_port, extra);
	}
	tc_connect_gid(&a, &f.d, "tenant-a", "fd00::1");
	tc_connect_gid(&b, &f.d, "tenant-b", NULL);
	/* A GID someone else holds: a warning about tenant-b. */
	assert_true(tc_register(&b, "fd00::1") < 0);
	deadline = h_now_ms() + (uint64_t)H_DEADLINE_MS;
	while (h_now_ms() < deadline &&
	       strlen(text) < sizeof(text) - sizeof(buf)) {
		n = recv(jfd, buf, sizeof(buf) - 1, 0);
		if (n < 0) {
			poll(NULL, 0, 20);
			continue;
		}
		buf[n] = '\0';
		if (strstr(buf, "VM=tenant-b\n")) {
			strcat(text, buf);
			break;
		}
	}
	assert_non_null(strstr(text, "PRIORITY=4\n"));
	assert_non_null(strstr(text, "SYSLOG_IDENTIFIER=rdmacm-muxd\n"));
	assert_non_null(strstr(text, "MESSAGE=client "));
	assert_non_null(strstr(text, "CLIENT_ID="));
	assert_non_null(strstr(text, "PORT=sim0\n"));
	assert_non_null(strstr(text, "GID=fd00::1\n"));
	assert_non_null(strstr(text, "ERRNO=17\n")); /* EEXIST */
	/* At the default level nothing is logged per MAD or per request. */
	while (recv(jfd, buf, sizeof(buf), 0) >= 0)
		;
	assert_int_equal(tc_register(&b, "fd00::2"), 0);
	for (i = 0; i < 100; i++) {
		h_req(mad, 0x700 + (uint32_t)i, "fd00::1", "fd00::2");
		assert_int_equal(tc_send_sync(&a, "fd00::2", mad), 0);
	}
	assert_true(tc_pump_until(&b, tc_has_rx, 100, H_DEADLINE_MS));
	n = recv(jfd, buf, sizeof(buf) - 1, 0);
	if (n >= 0) {
		buf[n] = '\0';
		fail_msg("logged during traffic: %s", buf);
	}
	tc_close(&a);
	tc_close(&b);
	hd_stop(&f.d);
	close(jfd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* n clients connect while the daemon is stopped (SIGSTOP), so that every
 * connect waits in its listen backlog at once, as after a restart; then
 * it runs again and each says hello and is let in. */
static void storm(struct hdaemon *d, int *fds, int n)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	long long accepted = hd_status_int(d, "counters.clients_accepted");
	uint8_t buf[1024], kind, flags;
	uint32_t rid;
	int i;

	assert_true(strlen(d->sock) < sizeof(sun.sun_path));
	memcpy(sun.sun_path, d->sock, strlen(d->sock) + 1);
	assert_int_equal(kill(d->pid, SIGSTOP), 0);
	for (i = 0; i < n; i++) {
		fds[i] = socket(AF_UNIX,
				SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		assert_true(fds[i] >= 0);
		if (connect(fds[i], (struct sockaddr *)&sun, sizeof(sun)) < 0)
			fail_msg(
				"connect %d of %d while the daemon is stopped: %s",
				i + 1, n, strerror(errno));
	}
	assert_int_equal(kill(d->pid, SIGCONT), 0);
	for (i = 0; i < n; i++) {
		assert_int_equal(
			raw_send_json(
				fds[i], 1,
				"{\"op\":\"hello\",\"protocol\":{\"major\":1,\"minor\":0}}"),
			0);
		assert_true(raw_recv(fds[i], &kind, &flags, &rid, buf,
				     sizeof(buf), H_DEADLINE_MS) > 0);
		if (strstr((char *)buf, "\"ok\":true") == NULL)
			fail_msg("client %d of %d: %s", i + 1, n, (char *)buf);
	}
	assert_int_equal(hd_status_int(d, "counters.clients_accepted"),
			 accepted + n);
	for (i = 0; i < n; i++)
		close(fds[i]);
}

/* 2,000 clients connecting at once all get in, on a fresh daemon and on
 * a restarted one: the listen backlog follows --max-clients (a backlog
 * of 128 turned all but 129 away with EAGAIN). */
static void test_storm_of_clients_all_get_in(void **state)
{
	static const char *const extra[] = { "--max-clients=4096",
					     "--max-clients-per-uid=4096",
					     NULL };
	/* Under valgrind, enough to overflow the old backlog. */
	int n = getenv("RDMACM_MUXD_WRAPPER") ? 300 : 2000, *fds;
	struct rlimit rl;
	struct hdaemon d;

	(void)state;
	if (h_real_port())
		skip(); /* the listener is the same on every port */
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < (rlim_t)n * 2 + 100)
		skip(); /* the daemon inherits the limit too */
	fds = calloc((size_t)n, sizeof(*fds));
	assert_non_null(fds);
	hd_start(&d, NULL, h_one_port, extra);
	storm(&d, fds, n);
	hd_kill(&d, SIGTERM);
	hd_restart(&d);
	storm(&d, fds, n);
	hd_stop(&d);
	free(fds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sigterm_right_after_start),
		cmocka_unit_test(test_threads_are_named),
		cmocka_unit_test(test_killed_daemons_fabric_is_removed),
		cmocka_unit_test(test_storm_of_clients_all_get_in),
		cmocka_unit_test_setup_teardown(
			test_one_daemon_per_socket_and_port, h_setup_daemon,
			h_teardown_daemon),
		cmocka_unit_test(test_systemd_notify_and_activation),
		cmocka_unit_test(test_config_file_and_reload),
		cmocka_unit_test(
			test_poll_us_keeps_a_worker_awake_between_requests),
		cmocka_unit_test(test_command_line_lists_in_any_order),
		cmocka_unit_test(test_journal_fields),
	};

	signal(SIGPIPE, SIG_IGN);
	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("service", tests, NULL, NULL);
}
