// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Where the connection table keeps its entries so that they outlive the
 * daemon: arrays in a file mapped shared (under /run, a tmpfs).  Every
 * write to an entry is a write to the file's pages, which the kernel
 * keeps however the process ends, kill -9 included; nothing is written
 * out and nothing is lost but an entry changed at the instant of the
 * crash.  A restarted daemon maps the file again and rebuilds its indexes
 * from the elements in use (the table marks them).
 *
 * Layout: a header page; owner records (a client's id, uid and resume
 * token, for the client to claim its entries back); the entries; the
 * path records.  The file is sparse: pages are used as elements are.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mux/conn_store.h"

#define STORE_MAGIC 0x45544154534d4352ull /* "RCMSTATE" */
#define STORE_VERSION 2
#define STORE_HEADER_SIZE 4096

struct store_header {
	uint64_t magic;
	uint32_t version;
	uint32_t size[CONN_STORE_N];
	uint32_t cap[CONN_STORE_N];
	uint32_t owner_cap;
	uint32_t counter[CONN_STORE_COUNTERS];
	char boot_id[40];    /* deadlines are this boot's clock */
	uint64_t ports_hash; /* port indexes mean the same ports */
};

struct conn_store {
	int fd;
	void *map;
	size_t map_len;
	struct store_header *hdr;
	struct conn_owner *owners;
	uint8_t *array[CONN_STORE_N];
	uint32_t reserved[CONN_STORE_N]; /* elements whose pages the file has */
};

/* Pages are reserved this many elements at a time. */
#define STORE_RESERVE_STEP 1024

int conn_store_reserve(struct conn_store *s, enum conn_store_array which,
		       uint32_t n)
{
	uint32_t want = n + STORE_RESERVE_STEP - 1, size = s->hdr->size[which];
	off_t off = (off_t)(s->array[which] - (uint8_t *)s->map);

	want -= want % STORE_RESERVE_STEP;
	if (want > s->hdr->cap[which])
		want = s->hdr->cap[which];
	if (n > want)
		return -ENOSPC;
	if (want <= s->reserved[which])
		return 0;
	if (fallocate(s->fd, 0, off + (off_t)s->reserved[which] * size,
		      (off_t)(want - s->reserved[which]) * size) < 0 &&
	    errno != EOPNOTSUPP)
		return -errno;
	s->reserved[which] = want;
	return 0;
}

static void conn_store_boot_id(char *out, size_t len)
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

	memset(out, 0, len);
	if (f) {
		if (fgets(out, (int)len, f) == NULL)
			out[0] = '\0';
		fclose(f);
	}
}

/* Where each array starts (off[]), 64-byte aligned after the header
 * page and the owner records; returns the file's size. */
static size_t conn_store_offsets(const uint32_t size[CONN_STORE_N],
				 const uint32_t cap[CONN_STORE_N],
				 uint32_t owner_cap, size_t off[CONN_STORE_N])
{
	size_t at = STORE_HEADER_SIZE +
		    (size_t)owner_cap * sizeof(struct conn_owner);
	int a;

	for (a = 0; a < CONN_STORE_N; a++) {
		at = (at + 63) & ~(size_t)63;
		off[a] = at;
		at += (size_t)size[a] * cap[a];
	}
	return at;
}

static void conn_store_layout(struct conn_store *s)
{
	uint8_t *base = s->map;
	size_t off[CONN_STORE_N];
	int a;

	s->hdr = (struct store_header *)base;
	s->owners = (struct conn_owner *)(base + STORE_HEADER_SIZE);
	conn_store_offsets(s->hdr->size, s->hdr->cap, s->hdr->owner_cap, off);
	for (a = 0; a < CONN_STORE_N; a++)
		s->array[a] = base + off[a];
}

static int conn_store_matches(const struct store_header *h,
			      const struct conn_store_layout *lay,
			      uint64_t ports_hash, const char *boot)
{
	int a;

	if (h->magic != STORE_MAGIC || h->version != STORE_VERSION ||
	    h->owner_cap != lay->owner_cap || h->ports_hash != ports_hash ||
	    strncmp(h->boot_id, boot, sizeof(h->boot_id)) != 0)
		return 0;
	for (a = 0; a < CONN_STORE_N; a++)
		if (h->size[a] != lay->size[a] || h->cap[a] != lay->cap[a])
			return 0;
	return h->counter[CONN_STORE_ENTRIES_HWM] <= lay->cap[0] &&
	       h->counter[CONN_STORE_PATHS_HWM] <= lay->cap[1];
}

struct conn_store *conn_store_open(const char *path,
				   const struct conn_store_layout *lay,
				   uint64_t ports_hash, int *restored,
				   char *err, size_t errlen)
{
	struct conn_store *s = calloc(1, sizeof(*s));
	struct store_header h;
	char boot[40];
	size_t off[CONN_STORE_N],
		size = conn_store_offsets(lay->size, lay->cap, lay->owner_cap,
					  off);
	struct stat st;
	int a;

	*restored = 0;
	if (s == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (s->fd < 0) {
		snprintf(err, errlen, "%s", strerror(errno));
		goto fail;
	}
	/* One daemon's: nothing below may touch another's live state. */
	if (fcntl(s->fd, F_SETLK,
		  &(struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET }) <
	    0) {
		struct flock q = { .l_type = F_WRLCK, .l_whence = SEEK_SET };

		if ((errno == EAGAIN || errno == EACCES) &&
		    fcntl(s->fd, F_GETLK, &q) == 0 && q.l_type != F_UNLCK)
			snprintf(
				err, errlen,
				"is in use by another rdmacm-muxd (pid %d; one daemon per state file)",
				(int)q.l_pid);
		else
			snprintf(err, errlen, "cannot lock: %s",
				 strerror(errno));
		goto fail;
	}
	conn_store_boot_id(boot, sizeof(boot));
	/* Keep what a previous daemon left only if it is whole, of this
	 * layout, these ports and this boot; anything else starts afresh. */
	if (fstat(s->fd, &st) == 0 && (size_t)st.st_size == size &&
	    pread(s->fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
	    conn_store_matches(&h, lay, ports_hash, boot)) {
		*restored = 1;
	} else if (ftruncate(s->fd, 0) < 0 ||
		   ftruncate(s->fd, (off_t)size) < 0) {
		snprintf(err, errlen, "%s", strerror(errno));
		goto fail;
	}
	s->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	if (s->map == MAP_FAILED) {
		s->map = NULL;
		snprintf(err, errlen, "mmap: %s", strerror(errno));
		goto fail;
	}
	s->map_len = size;
	s->hdr = s->map;
	if (!*restored) {
		memset(s->hdr, 0, sizeof(*s->hdr));
		for (a = 0; a < CONN_STORE_N; a++) {
			s->hdr->size[a] = lay->size[a];
			s->hdr->cap[a] = lay->cap[a];
		}
		s->hdr->owner_cap = lay->owner_cap;
		s->hdr->ports_hash = ports_hash;
		memcpy(s->hdr->boot_id, boot, sizeof(s->hdr->boot_id));
		s->hdr->version = STORE_VERSION;
		/* Last: a header without its magic is no state. */
		__atomic_store_n(&s->hdr->magic, STORE_MAGIC, __ATOMIC_RELEASE);
	}
	conn_store_layout(s);
	if (fallocate(s->fd, 0, 0, (off_t)(s->array[0] - (uint8_t *)s->map)) <
		    0 &&
	    errno != EOPNOTSUPP) {
		snprintf(err, errlen, "cannot allocate its header: %s",
			 strerror(errno));
		goto fail;
	}
	if (conn_store_reserve(s, CONN_STORE_ENTRIES,
			       s->hdr->counter[CONN_STORE_ENTRIES_HWM]) < 0 ||
	    conn_store_reserve(s, CONN_STORE_PATHS,
			       s->hdr->counter[CONN_STORE_PATHS_HWM]) < 0) {
		snprintf(err, errlen,
			 "cannot allocate room for its %u entries: %s",
			 s->hdr->counter[CONN_STORE_ENTRIES_HWM],
			 strerror(errno));
		goto fail;
	}
	return s;
fail:
	conn_store_close(s);
	return NULL;
}

void conn_store_close(struct conn_store *s)
{
	if (s == NULL)
		return;
	if (s->map)
		munmap(s->map, s->map_len);
	if (s->fd >= 0)
		close(s->fd);
	free(s);
}

void *conn_store_array(struct conn_store *s, enum conn_store_array which)
{
	return s->array[which];
}

uint32_t *conn_store_counter(struct conn_store *s,
			     enum conn_store_counter which)
{
	return &s->hdr->counter[which];
}

struct conn_owner *conn_store_owners(struct conn_store *s, uint32_t *n)
{
	*n = s->hdr->owner_cap;
	return s->owners;
}
