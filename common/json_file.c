// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Loading an admin's JSON file, refusing what is not a file (json_file.h). */
#include "common/json_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static json_t *json_file_refuse(json_error_t *err, const char *path,
				const char *why)
{
	memset(err, 0, sizeof(*err));
	snprintf(err->source, sizeof(err->source), "%s", path);
	snprintf(err->text, sizeof(err->text), "%s", why);
	return NULL;
}

json_t *json_file_load(const char *path, size_t flags, json_error_t *err)
{
	struct stat st;
	json_t *root;
	int fd;

	/* O_NONBLOCK: opening a FIFO must not wait for a writer. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return json_file_refuse(err, path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return json_file_refuse(err, path, "not a regular file");
	}
	if ((unsigned long long)st.st_size > JSON_FILE_MAX) {
		close(fd);
		return json_file_refuse(err, path, "larger than 16 MiB");
	}
	if (fcntl(fd, F_SETFL, 0) < 0) {
		close(fd);
		return json_file_refuse(err, path, strerror(errno));
	}
	root = json_loadfd(fd, flags, err);
	close(fd);
	return root;
}
