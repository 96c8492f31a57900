/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_JSON_FILE_H
#define RCM_JSON_FILE_H

/*
 * A JSON file an admin names (the configuration, the policy), read as
 * jansson's json_load_file() would, but only if it is a regular file of
 * a sane size: a FIFO or a device given by mistake (or by someone else)
 * is refused at once instead of being read for ever.
 */
#include <jansson.h>

/* At most this many bytes: a configuration or a policy is far smaller. */
#define JSON_FILE_MAX (16u << 20)

/* The document, or NULL with err set as json_load_file() sets it (line
 * and column 0 for what is not about the JSON: its source says why). */
json_t *json_file_load(const char *path, size_t flags, json_error_t *err);

#endif
