/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_TESTS_STATUS_QUERY_H
#define RCM_TESTS_STATUS_QUERY_H

#include <jansson.h>

/*
 * The daemon's status document, for the test programs that check its
 * counters (rdmacm-muxd(8), STATUS SOCKET): one {"op":"status"} query on
 * the socket at path.  NULL when the daemon does not answer.
 */
json_t *status_query(const char *path);
/* The integer at a dotted path ("routing.comm_ids"), or -1. */
long long status_int_at(json_t *status, const char *path);

#endif
