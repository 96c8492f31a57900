/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_MUXCTL_H
#define RCM_MUXCTL_H

/* rdmacm-muxctl's private header, by file. */
#include <stdio.h>

#include <jansson.h>

/* ---- muxctl_metrics.c: the status as Prometheus text ------------------ */
void muxctl_metrics_print(FILE *f, json_t *status);

#endif
