// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Attacks through the files the daemon reads: a state file planted where
 * it looks (by another uid, writable by anyone, a link, a FIFO, an
 * ordinary file) or forged inside, and a configuration or policy that is
 * of the wrong type or no file at all.  Each must be refused, or set
 * aside, with words that say why, and never adopted.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/integration/harness.h"
#include "mux/conn_store.h"

/* One start of the daemon on state as its --state-file, expected to be
 * refused: its exit status 1 and its words name the file and why. */
static void state_file_refused(const char *dir, const char *state,
			       const char *why)
{
	char sock[256], status[256], arg[300], out[4096];
	const char *args[] = {
		"-s", sock, "-S", status, "--sim-port=sim0=fd00::1", arg, NULL
	};

	snprintf(sock, sizeof(sock), "%s/mux.sock", dir);
	snprintf(status, sizeof(status), "%s/status.sock", dir);
	snprintf(arg, sizeof(arg), "--state-file=%s", state);
	assert_int_equal(hd_run(args, out, sizeof(out)), 1);
	if (strstr(out, state) == NULL || strstr(out, why) == NULL)
		fail_msg("expected '%s' about %s, got: %s", why, state, out);
}

static off_t file_size(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 ? st.st_size : -1;
}

/* The daemon stopped, its state file (statep) gets len bytes of what at
 * off, and the next daemon sets it aside (as aside) and says why. */
static void state_planted_set_aside(struct hdaemon *d, const char *statep,
				    const char *aside, const void *what,
				    size_t len, off_t off, const char *why)
{
	char log[16384];
	struct stat st;
	int fd;

	hd_kill(d, SIGTERM);
	assert_int_equal(unlink(aside), 0);
	fd = open(statep, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, what, len, off), (ssize_t)len);
	close(fd);
	hd_restart(d);
	assert_int_equal(stat(aside, &st), 0);
	hd_read_log(d, log, sizeof(log));
	if (strstr(log, why) == NULL)
		fail_msg("no word '%s' in the log: %s", why, log);
}

/* The state file is the daemon's alone: what another uid planted, what
 * anyone may write, a link, a FIFO or an ordinary file it did not make
 * is refused at start-up, named with its reason, and left as it was; the
 * file it makes itself is mode 0600; a file whose header is the daemon's
 * but whose owners are not is set aside whole and the daemon starts
 * afresh. */
static void test_state_file_trusts_no_one(void **state)
{
	static const char *const sim0[] = { "sim0=fd00::1", NULL };
	char dir[] = "/tmp/rcm-statefile.XXXXXX", path[256], other[300],
	     statep[256], log[64 * 1024];
	struct conn_owner forged = { .client = ~0ull - 15, .live = 1 };
	struct conn_owner twin = { .client = 7, .live = 1 };
	/* More owner records (8,192) than a pairwise check would compare. */
	static const char *const big[] = { "--max-clients=4096", NULL };
	uint32_t version = 1, entry_size = 48;
	struct hdaemon d;
	struct stat st;
	int fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/planted.state", dir);
	snprintf(other, sizeof(other), "%s/other", dir);

	/* Another uid's, mode 0600 (only root can give it away). */
	h_write_file(path, "planted");
	assert_int_equal(chmod(path, 0600), 0);
	if (geteuid() == 0) {
		assert_int_equal(chown(path, 65534, 65534), 0);
		state_file_refused(dir, path, "is owned by uid 65534");
		assert_int_equal(chown(path, geteuid(), getegid()), 0);
	}
	/* The daemon's uid, but anyone may write it. */
	assert_int_equal(chmod(path, 0666), 0);
	state_file_refused(dir, path, "has mode 0666, not 0600");
	/* A second name for it. */
	assert_int_equal(chmod(path, 0600), 0);
	assert_int_equal(link(path, other), 0);
	state_file_refused(dir, path, "has 2 links, not 1");
	assert_int_equal(unlink(other), 0);
	/* A symbolic link, to the daemon's own kind of file. */
	assert_int_equal(symlink(path, other), 0);
	state_file_refused(dir, other, "is a symbolic link");
	assert_int_equal(unlink(other), 0);
	/* A FIFO: refused, not read for ever. */
	assert_int_equal(mkfifo(other, 0600), 0);
	state_file_refused(dir, other, "is not a regular file");
	assert_int_equal(unlink(other), 0);
	/* An ordinary file of the daemon's uid, 0600: not its state, so it
	 * is refused and not truncated (it grew to 453 MB). */
	state_file_refused(dir, path, "is not an rdmacm-muxd state file");
	assert_int_equal(file_size(path), strlen("planted"));

	/* What the daemon makes itself is 0600, its own. */
	hd_start(&d, NULL, sim0, big);
	snprintf(statep, sizeof(statep), "%s.state", d.sock);
	assert_int_equal(stat(statep, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(st.st_uid, geteuid());
	hd_kill(&d, SIGTERM);

	/* Its header checks out, an owner record does not (a client id no
	 * daemon gives): the file goes aside whole, the daemon starts. */
	fd = open(statep, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, &forged, sizeof(forged), 4096),
			 sizeof(forged));
	close(fd);
	hd_restart(&d);
	snprintf(other, sizeof(other), "%s.bad", statep);
	assert_int_equal(stat(other, &st), 0);
	assert_int_equal(stat(statep, &st), 0);
	assert_int_equal(hd_status_int(&d, "routing.comm_ids"), 0);
	hd_read_log(&d, log, sizeof(log));
	if (strstr(log, "set aside as") == NULL ||
	    strstr(log, "is not one the daemon writes") == NULL)
		fail_msg("no word of the state set aside: %s", log);

	/* Another version of the daemon's format (an upgrade): set aside
	 * too, and the daemon starts. */
	state_planted_set_aside(&d, statep, other, &version, sizeof(version), 8,
				"holds state version 1, not");
	/* Of this boot but in a form the daemon does not write (entries of
	 * another size): its connections may be live at their peers, so it
	 * is set aside for a look, not truncated. */
	state_planted_set_aside(
		&d, statep, other, &entry_size, sizeof(entry_size), 12,
		"in this boot in a form this daemon cannot read");

	/* Two owner records for one client: set aside as well. */
	hd_kill(&d, SIGTERM);
	assert_int_equal(unlink(other), 0);
	fd = open(statep, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, &twin, sizeof(twin), 4096), sizeof(twin));
	assert_int_equal(pwrite(fd, &twin, sizeof(twin),
				4096 + 8000 * sizeof(twin)),
			 sizeof(twin));
	close(fd);
	hd_restart(&d);
	assert_int_equal(stat(other, &st), 0);
	hd_read_log(&d, log, sizeof(log));
	hd_stop(&d);
	if (strstr(log, "two owner records name client 7") == NULL)
		fail_msg("no word of the twin owners: %s", log);
	unlink(path);
	rmdir(dir);
}

/* --check-config on a file of text: exit status 1 and the words expected. */
static void config_refused(const char *file, const char *text, const char *why)
{
	const char *args[] = { "--check-config", file, NULL };
	char out[4096];

	if (text)
		h_write_file(file, text);
	assert_int_equal(hd_run(args, out, sizeof(out)), 1);
	if (strstr(out, why) == NULL)
		fail_msg("expected '%s', got: %s", why, out);
}

/* A configuration an admin got wrong, or someone else planted, is
 * refused as start-up would refuse it: a value of the wrong type, a QEMU
 * socket for no port, a port given twice, a UD sender for a port that
 * is not umad's, a socket path bind() cannot
 * take, two sockets on one path, and a FIFO for the file or the policy
 * (refused at once, not read for ever). */
static void test_hostile_configuration(void **state)
{
	char dir[] = "/tmp/rcm-config.XXXXXX", conf[256], fifo[256], text[512];

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(conf, sizeof(conf), "%s/muxd.conf", dir);
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	config_refused(
		conf,
		"{\"sim-port\": \"sim0=fd00::1\", \"max-clients\": \"10\"}",
		"key 'max-clients': expected a number");
	config_refused(conf, "{\"sim-port\": \"sim0=fd00::1\", \"socket\": 5}",
		       "key 'socket': expected a string");
	config_refused(
		conf,
		"{\"sim-port\": \"sim0=fd00::1\", \"qemu-socket\": \"mlx9_0:1\"}",
		"qemu-socket mlx9_0:1: no such port");
	config_refused(conf, "{\"sim-port\": [\"sim0\", \"sim1\", \"sim0\"]}",
		       "port sim0 given twice");
	/* The UD sender is a umad port's: a sim port has no QPs. */
	config_refused(
		conf,
		"{\"sim-port\": \"sim0=fd00::1\", \"ud-sender\": \"sim0\"}",
		"'sim0': no umad port of that name");
	snprintf(text, sizeof(text),
		 "{\"sim-port\": \"sim0\", \"status-socket\": \"/tmp/%0120d\"}",
		 0);
	config_refused(
		conf, text,
		"key 'status-socket': a socket path is 1..107 characters");
	config_refused(
		conf,
		"{\"sim-port\": \"sim0\", \"socket\": \"/tmp/x.sock\", \"qemu-socket\": \"sim0=/tmp/x.sock\"}",
		"keys 'socket' and 'qemu-socket sim0' name one socket");
	assert_int_equal(mkfifo(fifo, 0600), 0);
	config_refused(fifo, NULL, "not a regular file");
	snprintf(text, sizeof(text),
		 "{\"sim-port\": \"sim0=fd00::1\", \"policy\": \"%s\"}", fifo);
	config_refused(conf, text, "not a regular file");
	/* A user may be named or numbered; this one is a number. */
	h_write_file(conf,
		     "{\"sim-port\": \"sim0=fd00::1\", \"socket-owner\": 0}");
	{
		const char *args[] = { "--check-config", conf, NULL };
		char out[4096];

		assert_int_equal(hd_run(args, out, sizeof(out)), 0);
	}
	unlink(fifo);
	unlink(conf);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_state_file_trusts_no_one),
		cmocka_unit_test(test_hostile_configuration),
	};

	signal(SIGPIPE, SIG_IGN);
	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	if (getenv("RCM_TEST_UMAD_PORT"))
		return 0; /* the daemons here run on sim ports of their own */
	return cmocka_run_group_tests_name("attacks on files", tests, NULL,
					   NULL);
}
