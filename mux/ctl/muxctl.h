/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_MUXCTL_H
#define RCM_MUXCTL_H

/* rdmacm-muxctl's private header, by file. */
#include <stdio.h>

#include <jansson.h>

/* ---- muxctl_status.c: the daemon's sockets, read --------------------- */

/* A connected unix stream socket, or -1 after saying why (with hint). */
int muxctl_status_connect(const char *path, const char *hint);
/* One query line to the status socket; its answer, whole (NULL after
 * saying why). */
char *muxctl_status_fetch(const char *path, const char *query, int timeout_ms);
/* Strings from VMs escaped in place before they reach a terminal. */
void muxctl_status_printable(json_t *v);

/* ---- muxctl_metrics.c: the status as Prometheus text ------------------ */
void muxctl_metrics_print(FILE *f, json_t *status);

/* ---- muxctl_top.c: a live view, refreshed ------------------------------ */

/* rdmacm-muxctl top's words after "top" (argv[0] is "top"): the exit
 * status. */
int muxctl_top_main(const char *path, int timeout_ms, int json_out, int argc,
		    char **argv);

#endif
