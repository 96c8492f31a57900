// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Where the connection table keeps its entries so that they outlive the
 * daemon: fixed-size slots in a file mapped shared (under /run, a tmpfs).
 * Every write to an entry is a write to the file's pages, which the
 * kernel keeps however the process ends, kill -9 included; nothing is
 * written out and nothing is lost but an entry changed at the instant of
 * the crash.  A restarted daemon maps the file again and rebuilds its
 * indexes from the live slots (pointers in them mean nothing any more).
 *
 * Layout: a header page; owner records (a client's id, uid and resume
 * token, for the client to claim its entries back); a live byte per slot
 * (set once a slot is filled, cleared before it is freed); the slots.
 * The file is sparse: pages are used as slots are.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conn_store.h"

#define STORE_MAGIC 0x45544154534d4352ull /* "RCMSTATE" */
#define STORE_VERSION 1
#define STORE_HEADER_SIZE 4096

struct store_header {
	uint64_t magic;
	uint32_t version;
	uint32_t slot_size;
	uint32_t slot_cap;
	uint32_t owner_cap;
	uint32_t hwm; /* slots ever used: the scan's end */
	uint32_t random_operand;
	uint32_t next_host;
	uint32_t tid_seq;
	char boot_id[40];    /* deadlines are this boot's clock */
	uint64_t ports_hash; /* port indexes mean the same ports */
};

struct conn_store {
	int fd;
	void *map;
	size_t map_len;
	struct store_header *hdr;
	struct conn_owner *owners;
	uint8_t *live;
	uint8_t *slots;
	uint32_t *free_slots; /* a stack of free slot indexes */
	uint32_t nfree;
	uint32_t reserved; /* slots whose pages the file has */
};

/* Pages are reserved this many slots at a time. */
#define STORE_RESERVE_STEP 256

/*
 * The file is sparse; a page first written through the mapping on a full
 * tmpfs would kill the daemon with SIGBUS.  So pages are allocated
 * (fallocate) before slots use them, and a full /run refuses a new entry
 * (the client's MAD gets ENOSPC) instead.
 */
static int conn_store_reserve(struct conn_store *s, uint32_t slots)
{
	uint32_t want = slots + STORE_RESERVE_STEP - 1;
	off_t live_off, slot_off;

	want -= want % STORE_RESERVE_STEP;
	if (want > s->hdr->slot_cap)
		want = s->hdr->slot_cap;
	if (want <= s->reserved)
		return 0;
	live_off = (off_t)(s->live - (uint8_t *)s->map);
	slot_off = (off_t)(s->slots - (uint8_t *)s->map);
	if ((fallocate(s->fd, 0, live_off + s->reserved, want - s->reserved) <
		     0 ||
	     fallocate(s->fd, 0,
		       slot_off + (off_t)s->reserved * s->hdr->slot_size,
		       (off_t)(want - s->reserved) * s->hdr->slot_size) < 0) &&
	    errno != EOPNOTSUPP)
		return -errno;
	s->reserved = want;
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

static size_t conn_store_size(uint32_t slot_size, uint32_t slot_cap,
			      uint32_t owner_cap)
{
	return STORE_HEADER_SIZE +
	       (size_t)owner_cap * sizeof(struct conn_owner) +
	       (size_t)slot_cap + (size_t)slot_cap * slot_size;
}

static void conn_store_layout(struct conn_store *s)
{
	uint8_t *p = s->map;

	s->hdr = (struct store_header *)p;
	p += STORE_HEADER_SIZE;
	s->owners = (struct conn_owner *)p;
	p += (size_t)s->hdr->owner_cap * sizeof(struct conn_owner);
	s->live = p;
	p += s->hdr->slot_cap;
	s->slots = p;
}

struct conn_store *conn_store_open(const char *path, uint32_t slot_size,
				   uint32_t slot_cap, uint32_t owner_cap,
				   uint64_t ports_hash, int *restored,
				   char *err, size_t errlen)
{
	struct conn_store *s = calloc(1, sizeof(*s));
	struct store_header h;
	char boot[40];
	size_t size = conn_store_size(slot_size, slot_cap, owner_cap);
	struct stat st;
	uint32_t i;

	*restored = 0;
	if (s == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->free_slots = calloc(slot_cap, sizeof(*s->free_slots));
	s->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (s->free_slots == NULL || s->fd < 0) {
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
			snprintf(err, errlen,
				 "is in use by another rdmacm-muxd "
				 "(pid %d; one daemon per state file)",
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
	    h.magic == STORE_MAGIC && h.version == STORE_VERSION &&
	    h.slot_size == slot_size && h.slot_cap == slot_cap &&
	    h.owner_cap == owner_cap && h.hwm <= slot_cap &&
	    h.ports_hash == ports_hash && strcmp(h.boot_id, boot) == 0) {
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
		s->hdr->slot_size = slot_size;
		s->hdr->slot_cap = slot_cap;
		s->hdr->owner_cap = owner_cap;
		s->hdr->ports_hash = ports_hash;
		memcpy(s->hdr->boot_id, boot, sizeof(s->hdr->boot_id));
		s->hdr->version = STORE_VERSION;
		/* Last: a header without its magic is no state. */
		__atomic_store_n(&s->hdr->magic, STORE_MAGIC, __ATOMIC_RELEASE);
	}
	conn_store_layout(s);
	if (fallocate(s->fd, 0, 0,
		      (off_t)((uint8_t *)s->live - (uint8_t *)s->map)) < 0 &&
	    errno != EOPNOTSUPP) {
		snprintf(err, errlen, "cannot allocate its header: %s",
			 strerror(errno));
		goto fail;
	}
	if (conn_store_reserve(s, s->hdr->hwm) < 0) {
		snprintf(err, errlen,
			 "cannot allocate room for its %u entries: %s",
			 s->hdr->hwm, strerror(errno));
		goto fail;
	}
	/* Free slots below the high-water mark, highest first so that the
	 * lowest are reused first and the file stays compact. */
	for (i = s->hdr->hwm; i-- > 0;)
		if (!s->live[i])
			s->free_slots[s->nfree++] = i;
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
	free(s->free_slots);
	free(s);
}

void *conn_store_alloc(struct conn_store *s)
{
	uint32_t i;
	void *p;

	if (s->nfree)
		i = s->free_slots[--s->nfree];
	else if (s->hdr->hwm < s->hdr->slot_cap &&
		 conn_store_reserve(s, s->hdr->hwm + 1) == 0)
		i = s->hdr->hwm++;
	else
		return NULL;
	p = s->slots + (size_t)i * s->hdr->slot_size;
	memset(p, 0, s->hdr->slot_size);
	return p;
}

static uint32_t conn_store_index(struct conn_store *s, const void *slot)
{
	return (uint32_t)(((const uint8_t *)slot - s->slots) /
			  s->hdr->slot_size);
}

void conn_store_commit(struct conn_store *s, void *slot)
{
	__atomic_store_n(&s->live[conn_store_index(s, slot)], 1,
			 __ATOMIC_RELEASE);
}

void conn_store_free(struct conn_store *s, void *slot)
{
	uint32_t i = conn_store_index(s, slot);

	__atomic_store_n(&s->live[i], 0, __ATOMIC_RELEASE);
	s->free_slots[s->nfree++] = i;
}

void conn_store_foreach(struct conn_store *s, void (*fn)(void *arg, void *slot),
			void *arg)
{
	uint32_t i;

	for (i = 0; i < s->hdr->hwm; i++)
		if (s->live[i])
			fn(arg, s->slots + (size_t)i * s->hdr->slot_size);
}

uint32_t *conn_store_counter(struct conn_store *s,
			     enum conn_store_counter which)
{
	switch (which) {
	case CONN_STORE_RANDOM_OPERAND: return &s->hdr->random_operand;
	case CONN_STORE_NEXT_HOST: return &s->hdr->next_host;
	case CONN_STORE_TID_SEQ: return &s->hdr->tid_seq;
	}
	return NULL;
}

struct conn_owner *conn_store_owners(struct conn_store *s, uint32_t *n)
{
	*n = s->hdr->owner_cap;
	return s->owners;
}
