// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "log.h"
#include "text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

/*
 * The only process-wide state in the tree: where log lines go.  It is set
 * once at start-up, before any thread exists, and read-only after that.
 */
static struct {
	int foreground;
	int verbose;
} log_conf = { .foreground = 1, .verbose = 0 };

void log_init(const char *ident, int foreground, int verbose)
{
	log_conf.foreground = foreground;
	log_conf.verbose = verbose;
	if (!foreground)
		openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void log_set_verbose(int verbose)
{
	log_conf.verbose = verbose;
}

int log_get_verbose(void)
{
	return log_conf.verbose;
}

static void vlog(int pri, const char *fmt, va_list ap, const char *suffix)
	__attribute__((format(printf, 2, 0)));

int log_level_parse(const char *name)
{
	static const char *const names[] = { "err", "warning", "info", "debug" };
	int i;

	for (i = 0; i < 4; i++)
		if (strcmp(name, names[i]) == 0)
			return i - 2;   /* the verbosity it stands for */
	return -100;
}

static void vlog(int pri, const char *fmt, va_list ap, const char *suffix)
{
	/* verbose < 0: --log-level below info (-1 warnings, -2 errors). */
	if ((log_conf.verbose < 0 && pri == LOG_INFO) ||
	    (log_conf.verbose < -1 && pri == LOG_WARNING))
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
	if (log_conf.foreground) {
		flockfile(stderr);
		fprintf(stderr, "%s%s%s\n", line, suffix ? ": " : "",
			suffix ? suffix : "");
		funlockfile(stderr);
	} else {
		syslog(pri, "%s%s%s", line, suffix ? ": " : "",
		       suffix ? suffix : "");
	}
	errno = saved_errno;
}

void log_warn(const char *fmt, ...)
{
	va_list ap;
	const char *err = strerror(errno);

	va_start(ap, fmt);
	vlog(LOG_WARNING, fmt, ap, err);
	va_end(ap);
}

void log_warnx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_WARNING, fmt, ap, NULL);
	va_end(ap);
}

void log_info(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_INFO, fmt, ap, NULL);
	va_end(ap);
}

void log_debug(const char *fmt, ...)
{
	va_list ap;

	if (log_conf.verbose < 1)
		return;
	va_start(ap, fmt);
	vlog(LOG_DEBUG, fmt, ap, NULL);
	va_end(ap);
}

void fatal(const char *fmt, ...)
{
	va_list ap;
	const char *err = strerror(errno);

	va_start(ap, fmt);
	vlog(LOG_CRIT, fmt, ap, err);
	va_end(ap);
	exit(1);
}

void fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_CRIT, fmt, ap, NULL);
	va_end(ap);
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
