/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_COMMON_LOG_H
#define RCM_COMMON_LOG_H

#include <stdarg.h>
#include <stdint.h>
#include <time.h>

/*
 * Logging in the OpenBSD log.c shape: stderr, syslog, or the systemd
 * journal's native protocol (which also carries the structured fields of
 * struct log_fields).  log_warn() appends strerror(errno); log_warnx() does
 * not.  Every entry point preserves errno.
 */
enum log_level { LOG_LVL_ERR, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

/* What a line is about, as journal fields (CLIENT_ID, VM, PORT, GID); the
 * text of the message says it as well, for the other targets. */
struct log_fields {
	uint64_t client_id; /* 0: none */
	const char *vm;     /* NULL or "": none */
	const char *port;
	const char *gid; /* as text */
};

/* stderr (foreground) or syslog, at verbosity verbose (0: info). */
void log_init(const char *ident, int foreground, int verbose);
/* target: "auto" (the journal when stderr is connected to it, else
 * stderr), "stderr", "syslog", "journal" or "journal:SOCKETPATH"; level an
 * enum log_level.  0, or -errno with err set (logging stays on stderr). */
int log_open(const char *ident, const char *target, int level, char *err,
	     size_t errlen);
void log_close(void);
/* Whether log_open() knows target. */
int log_target_valid(const char *target);
/* What is logged from now on: an enum log_level (any thread). */
void log_set_level(int level);
int log_get_level(void);
/* "err", "warning", "info" or "debug" as an enum log_level, or -EINVAL;
 * and back. */
int log_level_parse(const char *name);
const char *log_level_name(int level);

void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* With fields; err (a positive errno, 0: none) is appended as log_warn
 * does and sent as ERRNO. */
void log_fwarn(const struct log_fields *f, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void log_finfo(const struct log_fields *f, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void log_fdebug(const struct log_fields *f, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void fatal(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));
void fatalx(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));

/*
 * A token bucket that bounds how often a class of message is logged, so
 * that a misbehaving VM or a noisy wire cannot flood the log.  Suppressed
 * messages are counted and the count is reported with the next one let
 * through.  Not thread-safe by itself: keep one per thread or per object.
 */
struct log_ratelimit {
	uint32_t burst;   /* messages allowed back to back */
	uint32_t per_sec; /* refill rate */
	double tokens;
	struct timespec last;
	uint64_t suppressed;
};

#define LOG_RATELIMIT_INIT(b, r)                            \
	{                                                   \
		.burst = (b), .per_sec = (r), .tokens = (b) \
	}

/* Returns 1 when the caller may log now; *suppressed gets how many were
 * held back since the last message that was let through. */
int log_ratelimit_allow(struct log_ratelimit *rl, uint64_t *suppressed);

#endif
