// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "common/log.h"
#include "common/text.h"
#include "common/unix_socket.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/*
 * The only process-wide state in the tree: where log lines go.  The
 * target is set once at start-up, before any thread exists; the level may
 * change later (a reload), hence atomic.
 */
static struct {
	enum { LOG_TO_STDERR, LOG_TO_SYSLOG, LOG_TO_JOURNAL } target;
	const char *ident;
	int journal_fd;
	_Atomic int level; /* enum log_level */
} log_conf = { .target = LOG_TO_STDERR,
	       .ident = "",
	       .journal_fd = -1,
	       .level = LOG_LVL_INFO };

static const char log_journal_default[] = "/run/systemd/journal/socket";
static const char *const log_level_names[] = { "err", "warning", "info",
					       "debug" };

void log_init(const char *ident, int foreground, int verbose)
{
	log_conf.ident = ident;
	log_conf.target = foreground ? LOG_TO_STDERR : LOG_TO_SYSLOG;
	log_set_level(LOG_LVL_INFO + verbose);
	if (!foreground)
		openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

/* The target a name stands for ("auto" resolved later), and for the
 * journal the socket's path; -EINVAL for no target. */
static int log_target_parse(const char *target, const char **journal_path)
{
	if (strcmp(target, "stderr") == 0 || strcmp(target, "auto") == 0)
		return LOG_TO_STDERR;
	if (strcmp(target, "syslog") == 0)
		return LOG_TO_SYSLOG;
	if (strcmp(target, "journal") == 0) {
		*journal_path = log_journal_default;
		return LOG_TO_JOURNAL;
	}
	if (strncmp(target, "journal:", 8) == 0 && target[8]) {
		*journal_path = target + 8;
		return LOG_TO_JOURNAL;
	}
	return -EINVAL;
}

int log_target_valid(const char *target)
{
	const char *path;

	return log_target_parse(target, &path) >= 0;
}

/* systemd sets JOURNAL_STREAM to the device and inode of the stream it
 * connected stderr to (systemd.exec(5)): stderr is the journal then. */
static int log_stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (js == NULL || sscanf(js, "%llu:%llu", &dev, &ino) != 2 ||
	    fstat(STDERR_FILENO, &st) < 0)
		return 0;
	return (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

static int log_journal_connect(const char *path, char *err, size_t errlen)
{
	int fd = unix_socket_connect(path, SOCK_DGRAM);

	if (fd < 0)
		snprintf(err, errlen, "journal socket %s: %s", path,
			 strerror(-fd));
	return fd;
}

int log_open(const char *ident, const char *target, int level, char *err,
	     size_t errlen)
{
	const char *path = NULL;
	int to, fd;

	log_conf.ident = ident;
	log_set_level(level);
	if (strcmp(target, "auto") == 0 && log_stderr_is_journal())
		target = "journal";
	to = log_target_parse(target, &path);
	if (to < 0) {
		snprintf(err, errlen, "unknown log target '%s'", target);
		return to;
	}
	if (to == LOG_TO_JOURNAL) {
		fd = log_journal_connect(path, err, errlen);
		if (fd < 0)
			return fd;
		log_conf.journal_fd = fd;
	} else if (to == LOG_TO_SYSLOG) {
		openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
	}
	log_conf.target = to;
	return 0;
}

void log_close(void)
{
	if (log_conf.journal_fd >= 0)
		close(log_conf.journal_fd);
	log_conf.journal_fd = -1;
	if (log_conf.target == LOG_TO_SYSLOG)
		closelog();
	log_conf.target = LOG_TO_STDERR;
}

void log_set_level(int level)
{
	if (level < LOG_LVL_ERR)
		level = LOG_LVL_ERR;
	if (level > LOG_LVL_DEBUG)
		level = LOG_LVL_DEBUG;
	atomic_store(&log_conf.level, level);
}

int log_get_level(void)
{
	return atomic_load_explicit(&log_conf.level, memory_order_relaxed);
}

int log_level_parse(const char *name)
{
	int i;

	for (i = LOG_LVL_ERR; i <= LOG_LVL_DEBUG; i++)
		if (strcmp(name, log_level_names[i]) == 0)
			return i;
	return -EINVAL;
}

const char *log_level_name(int level)
{
	return level >= LOG_LVL_ERR && level <= LOG_LVL_DEBUG
		       ? log_level_names[level]
		       : "invalid";
}

static void log_to_stderr(const char *line, const char *suffix)
{
	flockfile(stderr);
	fprintf(stderr, "%s%s%s\n", line, suffix ? ": " : "",
		suffix ? suffix : "");
	funlockfile(stderr);
}

/* KEY=value lines of the journal's native protocol (sd_journal_send's
 * wire format); values are escaped text, so none holds a newline. */
static size_t log_journal_field(char *buf, size_t used, size_t len,
				const char *key, const char *value)
{
	char esc[256];
	int n;

	if (used >= len)
		return used;
	text_escape(esc, sizeof(esc), value, strlen(value));
	n = snprintf(buf + used, len - used, "%s=%s\n", key, esc);
	return n < 0 ? used : used + (size_t)n;
}

static void log_journal_send(int pri, const struct log_fields *f,
			     const char *line, const char *suffix, int err)
{
	char buf[2048], num[32];
	size_t used;
	int n;

	n = snprintf(buf, sizeof(buf),
		     "PRIORITY=%d\nSYSLOG_IDENTIFIER=%s\nSYSLOG_PID=%d\n"
		     "MESSAGE=%s%s%s\n",
		     pri, log_conf.ident, (int)getpid(), line,
		     suffix ? ": " : "", suffix ? suffix : "");
	used = n < 0 ? 0 : (size_t)n;
	if (err) {
		snprintf(num, sizeof(num), "%d", err);
		used = log_journal_field(buf, used, sizeof(buf), "ERRNO", num);
	}
	if (f && f->client_id) {
		snprintf(num, sizeof(num), "%llu",
			 (unsigned long long)f->client_id);
		used = log_journal_field(buf, used, sizeof(buf), "CLIENT_ID",
					 num);
	}
	if (f && f->vm && f->vm[0])
		used = log_journal_field(buf, used, sizeof(buf), "VM", f->vm);
	if (f && f->port)
		used = log_journal_field(buf, used, sizeof(buf), "PORT",
					 f->port);
	if (f && f->gid)
		used = log_journal_field(buf, used, sizeof(buf), "GID", f->gid);
	if (used > sizeof(buf))
		used = sizeof(buf);
	/* A journal that went away costs the line on stderr, not the line. */
	if (send(log_conf.journal_fd, buf, used, MSG_NOSIGNAL) < 0)
		log_to_stderr(line, suffix);
}

static void vlog(int pri, const struct log_fields *f, int err, const char *fmt,
		 va_list ap) __attribute__((format(printf, 4, 0)));

static void vlog(int pri, const struct log_fields *f, int err, const char *fmt,
		 va_list ap)
{
	int level = log_get_level();
	const char *suffix = err ? strerror(err) : NULL;

	if ((level < LOG_LVL_INFO && pri == LOG_INFO) ||
	    (level < LOG_LVL_WARN && pri == LOG_WARNING) ||
	    (level < LOG_LVL_DEBUG && pri == LOG_DEBUG))
		return;
	char raw[1024], line[1024];
	int saved_errno = errno;
	int n;

	/* Messages carry text from VMs and the wire: escaped, a line can
	 * be neither forged nor cut in two. */
	n = vsnprintf(raw, sizeof(raw), fmt, ap);
	if (n < 0)
		n = 0;
	text_escape(line, sizeof(line), raw,
		    (size_t)n < sizeof(raw) ? (size_t)n : sizeof(raw) - 1);
	if (log_conf.target == LOG_TO_JOURNAL) {
		log_journal_send(pri, f, line, suffix, err);
	} else if (log_conf.target == LOG_TO_STDERR) {
		log_to_stderr(line, suffix);
	} else {
		syslog(pri, "%s%s%s", line, suffix ? ": " : "",
		       suffix ? suffix : "");
	}
	errno = saved_errno;
}

#define LOG_VA(pri, f, err)                       \
	do {                                      \
		va_list ap;                       \
		va_start(ap, fmt);                \
		vlog((pri), (f), (err), fmt, ap); \
		va_end(ap);                       \
	} while (0)

void log_warn(const char *fmt, ...)
{
	LOG_VA(LOG_WARNING, NULL, errno);
}

void log_warnx(const char *fmt, ...)
{
	LOG_VA(LOG_WARNING, NULL, 0);
}

void log_info(const char *fmt, ...)
{
	LOG_VA(LOG_INFO, NULL, 0);
}

void log_debug(const char *fmt, ...)
{
	LOG_VA(LOG_DEBUG, NULL, 0);
}

void log_fwarn(const struct log_fields *f, int err, const char *fmt, ...)
{
	LOG_VA(LOG_WARNING, f, err);
}

void log_finfo(const struct log_fields *f, const char *fmt, ...)
{
	LOG_VA(LOG_INFO, f, 0);
}

void log_fdebug(const struct log_fields *f, const char *fmt, ...)
{
	LOG_VA(LOG_DEBUG, f, 0);
}

void fatal(const char *fmt, ...)
{
	LOG_VA(LOG_CRIT, NULL, errno);
	exit(1);
}

void fatalx(const char *fmt, ...)
{
	LOG_VA(LOG_CRIT, NULL, 0);
	exit(1);
}

int log_ratelimit_allow(struct log_ratelimit *rl, uint64_t *suppressed)
{
	struct timespec now;
	double elapsed;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (rl->last.tv_sec == 0 && rl->last.tv_nsec == 0)
		rl->last = now;
	elapsed = (double)(now.tv_sec - rl->last.tv_sec) +
		  (double)(now.tv_nsec - rl->last.tv_nsec) / 1e9;
	rl->last = now;
	rl->tokens += elapsed * rl->per_sec;
	if (rl->tokens > rl->burst)
		rl->tokens = rl->burst;
	if (rl->tokens < 1.0) {
		rl->suppressed++;
		return 0;
	}
	rl->tokens -= 1.0;
	*suppressed = rl->suppressed;
	rl->suppressed = 0;
	return 1;
}
