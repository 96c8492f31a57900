/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_COMMON_LOG_H
#define RCM_COMMON_LOG_H

#include <stdarg.h>
#include <stdint.h>
#include <time.h>

/*
 * Logging in the OpenBSD log.c shape: stderr in the foreground, syslog
 * otherwise.  log_warn() appends strerror(errno); log_warnx() does not.
 * Every entry point preserves errno.
 */
enum log_level { LOG_LVL_ERR, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

void log_init(const char *ident, int foreground, int verbose);
void log_set_verbose(int verbose);
/* "err", "warning", "info" or "debug" as a verbosity (-2 .. 1): what
 * log_init() takes; -100 for anything else. */
int log_level_parse(const char *name);
int log_get_verbose(void);

void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/*
 * A token bucket that bounds how often a class of message is logged, so
 * that a misbehaving VM or a noisy wire cannot flood the log.  Suppressed
 * messages are counted and the count is reported with the next one let
 * through.  Not thread-safe by itself: keep one per thread or per object.
 */
struct log_ratelimit {
	uint32_t burst;          /* messages allowed back to back */
	uint32_t per_sec;        /* refill rate */
	double tokens;
	struct timespec last;
	uint64_t suppressed;
};

#define LOG_RATELIMIT_INIT(b, r) { .burst = (b), .per_sec = (r), .tokens = (b) }

/* Returns 1 when the caller may log now; *suppressed gets how many were
 * held back since the last message that was let through. */
int log_ratelimit_allow(struct log_ratelimit *rl, uint64_t *suppressed);

#endif
