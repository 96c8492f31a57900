/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_MUXCTL_H
#define RCM_MUXCTL_H

/* rdmacm-muxctl's private header, by file. */
#include <stdint.h>
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

/* ---- muxctl_capture.c: the daemon's capture, as a file ---------------- */

#define MUXCTL_CAPTURE_MAD_MAX 2048

/* One MAD of a capture, as the daemon describes it. */
struct muxctl_capture_rec {
	uint64_t sec;
	uint32_t nsec;
	int out; /* sent by the daemon */
	uint8_t src[16], dst[16];
	uint32_t qpn, flow_label;
	uint8_t tclass, hop_limit;
	uint16_t mad_len;
	uint8_t mad[MUXCTL_CAPTURE_MAD_MAX];
	char comment[512]; /* direction, port, verdict, VM */
};

/* rdmacm-muxctl capture's words after "capture": the exit status. */
int muxctl_capture_main(const char *admin, int argc, char **argv);
/* A record line of the daemon's into r: 0, or -1 when it is not one. */
int muxctl_capture_parse(json_t *o, struct muxctl_capture_rec *r);

/* ---- muxctl_pcapng.c: a pcapng file of RoCE v2 packets ---------------- */

/* The section and interface blocks: 0, or -1 (errno). */
int muxctl_pcapng_start(FILE *f);
/* r as a packet with its comment: 0, or -1 (errno). */
int muxctl_pcapng_write(FILE *f, const struct muxctl_capture_rec *r);

/* ---- muxctl_top.c: a live view, refreshed ------------------------------ */

/* rdmacm-muxctl top's words after "top" (argv[0] is "top"): the exit
 * status. */
int muxctl_top_main(const char *path, int timeout_ms, int json_out, int argc,
		    char **argv);

#endif
