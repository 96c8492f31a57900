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
#define STORE_VERSION 3                   /* 3: owners' GIDs */
#define STORE_HEADER_SIZE 4096

struct store_header {
	uint64_t magic;
	uint32_t version;
	uint32_t size[CONN_STORE_N];
	uint32_t cap[CONN_STORE_N];
	uint32_t owner_cap;
	uint32_t counter[CONN_STORE_COUNTERS];
	char boot_id[40]; /* deadlines are this boot's clock */
	uint32_t nports;  /* what port indexes mean */
	uint64_t port_id[CONN_STORE_MAX_PORTS];
	/* The layout's meanings (conn_store.h); 0 in files written before
	 * it was kept, which are taken as they are and given it. */
	uint64_t meanings;
};

_Static_assert(sizeof(struct store_header) <= 4096, "the header fits its page");

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
			      const char *boot)
{
	int a;

	if (h->magic != STORE_MAGIC || h->version != STORE_VERSION ||
	    h->owner_cap != lay->owner_cap ||
	    h->nports > CONN_STORE_MAX_PORTS ||
	    strncmp(h->boot_id, boot, sizeof(h->boot_id)) != 0)
		return 0;
	for (a = 0; a < CONN_STORE_N; a++)
		if (h->size[a] != lay->size[a] || h->cap[a] != lay->cap[a])
			return 0;
	return h->counter[CONN_STORE_ENTRIES_HWM] <= lay->cap[0] &&
	       h->counter[CONN_STORE_PATHS_HWM] <= lay->cap[1];
}

/* Client ids are handed out upwards from 1 and go on above the largest a
 * restored file holds: one near 2^64 would wrap them. */
#define STORE_MAX_CLIENT_ID (1ull << 48)

/* Whether an existing file may be taken as the state file: one the
 * daemon made, which nobody else can have written (another uid's, or one
 * mode 0666, could hand a live connection's DREQ to another tenant).
 * 0, or -EPERM with the reason in err. */
static int conn_store_file_ok(const struct stat *st, char *err, size_t errlen)
{
	if (!S_ISREG(st->st_mode))
		snprintf(err, errlen, "is not a regular file");
	else if (st->st_uid != geteuid())
		snprintf(err, errlen,
			 "is owned by uid %u, not the daemon's (%u)",
			 (unsigned)st->st_uid, (unsigned)geteuid());
	else if ((st->st_mode & 07777) != 0600)
		snprintf(err, errlen, "has mode %04o, not 0600",
			 (unsigned)(st->st_mode & 07777));
	else if (st->st_nlink != 1)
		snprintf(err, errlen, "has %lu links, not 1",
			 (unsigned long)st->st_nlink);
	else
		return 0;
	return -EPERM;
}

/* Opens the state file: created, or an existing one of the daemon's own
 * (a symbolic link is never followed).  *fresh: 1 when created. */
static int conn_store_open_file(const char *path, int *fresh, char *err,
				size_t errlen)
{
	struct stat st;
	int fd;

	*fresh = 0;
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		  0600);
	if (fd >= 0) {
		*fresh = 1;
		if (fchmod(fd, 0600) == 0)
			return fd;
		snprintf(err, errlen, "fchmod: %s", strerror(errno));
		close(fd);
		return -1;
	}
	if (errno != EEXIST) {
		snprintf(err, errlen, "%s", strerror(errno));
		return -1;
	}
	/* O_NONBLOCK: a FIFO planted there must not hold the start-up. */
	fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		snprintf(err, errlen, "%s",
			 errno == ELOOP ? "is a symbolic link"
					: strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "fstat: %s", strerror(errno));
		close(fd);
		return -1;
	}
	if (conn_store_file_ok(&st, err, errlen) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Whether a header page was never written: a daemon that died between
 * creating the file and writing its magic. */
static int conn_store_header_blank(const struct store_header *h)
{
	static const struct store_header zero;

	return memcmp(h, &zero, sizeof(zero)) == 0;
}

/* The owner records of a file whose header fits: each live one a client
 * id that can have been given, each id once.  0, or -EBADMSG. */
static int conn_store_id_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int conn_store_owners_ok(int fd, uint32_t n, char *err, size_t errlen)
{
	struct conn_owner *o = calloc(n ? n : 1, sizeof(*o));
	uint64_t *ids = calloc(n ? n : 1, sizeof(*ids));
	size_t bytes = (size_t)n * sizeof(*o), live;
	uint32_t i;
	int rc = 0;

	if (o == NULL || ids == NULL) {
		free(o);
		free(ids);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (pread(fd, o, bytes, STORE_HEADER_SIZE) != (ssize_t)bytes) {
		snprintf(err, errlen, "its owner records cannot be read");
		rc = -EBADMSG;
	}
	for (i = 0; rc == 0 && i < n; i++) {
		if (o[i].live > 1 || o[i].claimed > 1 || o[i].resumable > 1 ||
		    o[i].qemu > 1 ||
		    (o[i].live && (o[i].client == 0 ||
				   o[i].client >= STORE_MAX_CLIENT_ID))) {
			snprintf(
				err, errlen,
				"owner record %u is not one the daemon writes (client %llu)",
				i, (unsigned long long)o[i].client);
			rc = -EBADMSG;
		}
	}
	/* Each client once. */
	for (i = 0, live = 0; rc == 0 && i < n; i++)
		if (o[i].live)
			ids[live++] = o[i].client;
	qsort(ids, live, sizeof(*ids), conn_store_id_cmp);
	for (i = 1; rc == 0 && i < live; i++)
		if (ids[i] == ids[i - 1]) {
			snprintf(err, errlen,
				 "two owner records name client %llu",
				 (unsigned long long)ids[i]);
			rc = -EBADMSG;
		}
	free(ids);
	free(o);
	return rc;
}

/* A file whose header is the daemon's but whose body is not goes aside
 * whole, for a look, and the daemon starts afresh: never half-restored. */
static int conn_store_set_aside(const char *path, char *aside, size_t len)
{
	snprintf(aside, len, "%s.bad", path);
	return rename(path, aside) < 0 ? -errno : 0;
}

/* A previous daemon's state of this boot and these ports whose limits
 * (--max-clients, --max-comm-ids: the arrays' lengths) were others: its
 * elements are the same, so its entries can be carried over. */
static int conn_store_other_limits(const struct store_header *h,
				   const struct stat *st,
				   const struct conn_store_layout *lay,
				   const char *boot)
{
	size_t off[CONN_STORE_N];
	int a, differ = h->owner_cap != lay->owner_cap;

	if (h->nports > CONN_STORE_MAX_PORTS ||
	    strncmp(h->boot_id, boot, sizeof(h->boot_id)) != 0 ||
	    h->owner_cap == 0 ||
	    (size_t)st->st_size !=
		    conn_store_offsets(h->size, h->cap, h->owner_cap, off))
		return 0;
	for (a = 0; a < CONN_STORE_N; a++) {
		if (h->size[a] != lay->size[a])
			return 0;
		differ |= h->cap[a] != lay->cap[a];
	}
	return differ;
}

/* All of buf at off: 0, or -errno (-ENOSPC from a full file system). */
static int conn_store_pwrite(int fd, const void *buf, size_t len, size_t off)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len) {
		n = pwrite(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
		off += (size_t)n;
	}
	return 0;
}

/* The highest owner record in use, plus one. */
static uint32_t conn_store_top_owner(const struct conn_owner *oo, uint32_t n)
{
	uint32_t i, top = 0;

	for (i = 0; i < n; i++)
		if (oo[i].live)
			top = i + 1;
	return top;
}

/* Each owner's GIDs, as many as its new slice holds, from the old
 * mapping om to nfd: 0 or -errno; *lost counts those left behind. */
static int conn_store_carry_gids(int nfd, const uint8_t *om,
				 const struct store_header *h,
				 const size_t old_off[CONN_STORE_N],
				 const struct conn_store_layout *lay,
				 const size_t new_off[CONN_STORE_N],
				 uint32_t owners, uint32_t *lost)
{
	uint32_t ogpo = h->cap[CONN_STORE_GIDS] / h->owner_cap;
	uint32_t ngpo = lay->cap[CONN_STORE_GIDS] / lay->owner_cap;
	const struct conn_gid_rec *og;
	struct conn_gid_rec *ng = calloc(ngpo ? ngpo : 1, sizeof(*ng));
	uint32_t i, k, used;
	int rc = 0;

	if (ng == NULL)
		return -ENOMEM;
	for (i = 0; rc == 0 && i < owners; i++) {
		og = (const struct conn_gid_rec *)(om +
						   old_off[CONN_STORE_GIDS]) +
		     (size_t)i * ogpo;
		used = 0;
		memset(ng, 0, ngpo * sizeof(*ng));
		for (k = 0; k < ogpo; k++) {
			if (!og[k].used)
				continue;
			if (k < ngpo) {
				ng[k] = og[k];
				used++;
			} else {
				(*lost)++;
			}
		}
		if (used)
			rc = conn_store_pwrite(nfd, ng, ngpo * sizeof(*ng),
					       new_off[CONN_STORE_GIDS] +
						       (size_t)i * ngpo *
							       sizeof(*ng));
	}
	free(ng);
	return rc;
}

/* The old mapping om (header h) written to nfd in layout lay: owners,
 * entries and paths in their slots, GIDs, and the header last (without
 * its magic, no state).  Written, not mapped: a full /run says ENOSPC
 * here, where stores into a new mapping would kill the daemon with
 * SIGBUS.  0 or -errno. */
static int conn_store_carry_write(int nfd, const uint8_t *om,
				  const struct store_header *h,
				  const struct conn_store_layout *lay,
				  uint32_t *lost_gids)
{
	size_t old_off[CONN_STORE_N], new_off[CONN_STORE_N];
	const struct conn_owner *oo =
		(const struct conn_owner *)(om + STORE_HEADER_SIZE);
	uint32_t i, owners = h->owner_cap < lay->owner_cap ? h->owner_cap
							   : lay->owner_cap;
	struct store_header nh = *h;
	int rc;

	conn_store_offsets(h->size, h->cap, h->owner_cap, old_off);
	conn_store_offsets(lay->size, lay->cap, lay->owner_cap, new_off);
	rc = conn_store_pwrite(nfd, oo, owners * sizeof(*oo),
			       STORE_HEADER_SIZE);
	if (rc == 0)
		rc = conn_store_pwrite(
			nfd, om + old_off[CONN_STORE_ENTRIES],
			(size_t)h->counter[CONN_STORE_ENTRIES_HWM] *
				h->size[CONN_STORE_ENTRIES],
			new_off[CONN_STORE_ENTRIES]);
	if (rc == 0)
		rc = conn_store_pwrite(nfd, om + old_off[CONN_STORE_PATHS],
				       (size_t)h->counter
						       [CONN_STORE_PATHS_HWM] *
					       h->size[CONN_STORE_PATHS],
				       new_off[CONN_STORE_PATHS]);
	if (rc == 0)
		rc = conn_store_carry_gids(nfd, om, h, old_off, lay, new_off,
					   owners, lost_gids);
	for (i = 0; i < CONN_STORE_N; i++)
		nh.cap[i] = lay->cap[i];
	nh.owner_cap = lay->owner_cap;
	nh.meanings = lay->meanings;
	if (rc == 0)
		rc = conn_store_pwrite(nfd, &nh, sizeof(nh), 0);
	return rc;
}

/* Copies the state in fd (other limits) into a new file of layout lay
 * that takes path's place: entries and paths keep their slots (host
 * IDs are made of them), owners their records.  0, or -ENOSPC when the
 * new limits cannot hold what is in use, -errno; why says which. */
static int conn_store_carry(int fd, const char *path,
			    const struct conn_store_layout *lay, char *why,
			    size_t len)
{
	size_t old_off[CONN_STORE_N], new_off[CONN_STORE_N], old_size, new_size;
	uint32_t top_owner, lost_gids = 0;
	struct store_header h;
	uint8_t *om;
	char tmp[4200];
	int nfd = -1, rc = 0;

	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		return -EIO;
	old_size = conn_store_offsets(h.size, h.cap, h.owner_cap, old_off);
	new_size = conn_store_offsets(lay->size, lay->cap, lay->owner_cap,
				      new_off);
	om = mmap(NULL, old_size, PROT_READ, MAP_SHARED, fd, 0);
	if (om == MAP_FAILED)
		return -errno;
	top_owner = conn_store_top_owner((const struct conn_owner
						  *)(om + STORE_HEADER_SIZE),
					 h.owner_cap);
	if (h.counter[CONN_STORE_ENTRIES_HWM] > lay->cap[CONN_STORE_ENTRIES] ||
	    h.counter[CONN_STORE_PATHS_HWM] > lay->cap[CONN_STORE_PATHS] ||
	    top_owner > lay->owner_cap) {
		snprintf(
			why, len,
			"it holds the previous daemon's connections, which the new limits cannot hold (%u entry slots and %u owner records in use, room for %u and %u): start with the limits it was written with (--max-clients, --max-comm-ids), or remove it to end those connections without telling their peers",
			h.counter[CONN_STORE_ENTRIES_HWM], top_owner,
			lay->cap[CONN_STORE_ENTRIES], lay->owner_cap);
		rc = -ENOSPC;
		goto out;
	}
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	(void)unlink(tmp); /* a carry a crash cut short */
	nfd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		   0600);
	rc = nfd < 0 || ftruncate(nfd, (off_t)new_size) < 0
		     ? -errno
		     : conn_store_carry_write(nfd, om, &h, lay, &lost_gids);
	if (rc) {
		snprintf(why, len, "cannot write its new copy (.new): %s",
			 strerror(-rc));
		goto out;
	}
	if (rename(tmp, path) < 0) {
		rc = -errno;
		snprintf(why, len,
			 "cannot put its new copy (.new) in its place: %s",
			 strerror(-rc));
		goto out;
	}
	snprintf(
		why, len,
		"written for other limits (--max-clients, --max-comm-ids): its %u entry slots and %u owner records were carried over%s",
		h.counter[CONN_STORE_ENTRIES_HWM], top_owner,
		lost_gids ? ", some GIDs held for absent owners were not" : "");
out:
	munmap(om, old_size);
	if (nfd >= 0)
		close(nfd);
	if (rc && nfd >= 0)
		unlink(tmp);
	return rc;
}

/* What becomes of the file a start-up finds. */
enum store_verdict {
	STORE_ADOPT,   /* a previous daemon's state: restored */
	STORE_FRESH,   /* new, or never written: started afresh, quietly */
	STORE_REPLACE, /* the daemon's, of another boot or ports: afresh */
	STORE_CARRY,   /* the daemon's, of other limits: carried over */
	STORE_ASIDE,   /* the daemon's header, a body or format it cannot
			* read: renamed whole, for a look, and afresh */
	STORE_REFUSE,  /* not the daemon's: start-up fails */
};

static enum store_verdict conn_store_judge(int fd, const struct stat *st,
					   const struct conn_store_layout *lay,
					   const char *boot, size_t size,
					   char *why, size_t len)
{
	struct store_header h;
	int rc;

	if (st->st_size == 0)
		return STORE_FRESH;
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		snprintf(why, len,
			 "is not an rdmacm-muxd state file (%lld bytes)",
			 (long long)st->st_size);
		return STORE_REFUSE;
	}
	if (conn_store_header_blank(&h))
		return STORE_FRESH;
	if (h.magic != STORE_MAGIC) {
		snprintf(why, len,
			 "is not an rdmacm-muxd state file (no magic)");
		return STORE_REFUSE;
	}
	/* Another rdmacm-muxd's format: its connections cannot be read,
	 * but an upgrade must still start. */
	if (h.version != STORE_VERSION) {
		snprintf(why, len, "it holds state version %u, not %u",
			 h.version, STORE_VERSION);
		return STORE_ASIDE;
	}
	/* The same version with entries meant otherwise (a change that
	 * did not bump it): read as ours, they would be misread. */
	if (h.meanings && lay->meanings && h.meanings != lay->meanings) {
		snprintf(
			why, len,
			"its entries mean other things (fingerprint %016llx, not %016llx)",
			(unsigned long long)h.meanings,
			(unsigned long long)lay->meanings);
		return STORE_ASIDE;
	}
	if (conn_store_other_limits(&h, st, lay, boot)) {
		rc = conn_store_owners_ok(fd, h.owner_cap, why, len);
		if (rc == -ENOMEM)
			return STORE_REFUSE;
		return rc < 0 ? STORE_ASIDE : STORE_CARRY;
	}
	if ((size_t)st->st_size != size || !conn_store_matches(&h, lay, boot)) {
		/* Of another boot, its connections ended with it: nothing
		 * to look at.  Of this boot, they may be live at their
		 * peers: kept for a look, and said. */
		if (strncmp(h.boot_id, boot, sizeof(h.boot_id)) != 0) {
			snprintf(
				why, len,
				"it was written before this boot (its connections ended with it)");
			return STORE_REPLACE;
		}
		snprintf(
			why, len,
			"it was written in this boot in a form this daemon cannot read");
		return STORE_ASIDE;
	}
	rc = conn_store_owners_ok(fd, lay->owner_cap, why, len);
	if (rc == -ENOMEM)
		return STORE_REFUSE;
	return rc < 0 ? STORE_ASIDE : STORE_ADOPT;
}

/* One daemon's: nothing may touch another's live state.  0, or -1 with
 * err saying who holds it. */
static int conn_store_lock(int fd, char *err, size_t errlen)
{
	struct flock q = { .l_type = F_WRLCK, .l_whence = SEEK_SET };

	if (fcntl(fd, F_SETLK,
		  &(struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET }) ==
	    0)
		return 0;
	if ((errno == EAGAIN || errno == EACCES) &&
	    fcntl(fd, F_GETLK, &q) == 0 && q.l_type != F_UNLCK)
		snprintf(
			err, errlen,
			"is in use by another rdmacm-muxd (pid %d; one daemon per state file)",
			(int)q.l_pid);
	else
		snprintf(err, errlen, "cannot lock: %s", strerror(errno));
	return -1;
}

/* What start-up did with the file it found, to be said in the log. */
struct conn_store_found {
	enum store_verdict verdict;
	char why[200];
	char aside[4200]; /* the name it was set aside as */
	char carried[600];
};

/* Opens and locks path (s->fd) and judges what it holds; a file of other
 * limits is carried over, one it cannot read set aside, each once, and
 * what takes its place judged again.  0, or -1 with err. */
static int conn_store_settle(struct conn_store *s, const char *path,
			     const struct conn_store_layout *lay,
			     const char *boot, size_t size,
			     struct conn_store_found *f, char *err,
			     size_t errlen)
{
	struct stat st;
	int fresh, rc;

	for (;;) {
		s->fd = conn_store_open_file(path, &fresh, err, errlen);
		if (s->fd < 0 || conn_store_lock(s->fd, err, errlen) < 0)
			return -1;
		if (fstat(s->fd, &st) < 0) {
			snprintf(err, errlen, "fstat: %s", strerror(errno));
			return -1;
		}
		f->verdict = fresh ? STORE_FRESH
				   : conn_store_judge(s->fd, &st, lay, boot,
						      size, f->why,
						      sizeof(f->why));
		if (f->verdict == STORE_REFUSE ||
		    (f->verdict == STORE_ASIDE && f->aside[0])) {
			snprintf(err, errlen, "%s", f->why);
			return -1;
		}
		if (f->verdict == STORE_CARRY && f->carried[0]) {
			snprintf(err, errlen, "%s", f->carried);
			return -1;
		}
		if (f->verdict == STORE_ASIDE) {
			rc = conn_store_set_aside(path, f->aside,
						  sizeof(f->aside));
			if (rc < 0) {
				snprintf(err, errlen,
					 "%s, and it cannot be set aside: %s",
					 f->why, strerror(-rc));
				return -1;
			}
		} else if (f->verdict == STORE_CARRY) {
			rc = conn_store_carry(s->fd, path, lay, f->carried,
					      sizeof(f->carried));
			if (rc < 0) {
				snprintf(err, errlen, "%s", f->carried);
				return -1;
			}
		} else {
			return 0;
		}
		close(s->fd);
	}
}

/* A new store's header: its layout, ports and boot, the magic last (a
 * header without it is no state). */
static void conn_store_init_header(struct conn_store *s,
				   const struct conn_store_layout *lay,
				   const char *boot)
{
	int a;

	memset(s->hdr, 0, sizeof(*s->hdr));
	for (a = 0; a < CONN_STORE_N; a++) {
		s->hdr->size[a] = lay->size[a];
		s->hdr->cap[a] = lay->cap[a];
	}
	s->hdr->owner_cap = lay->owner_cap;
	conn_store_set_ports(s, lay);
	memcpy(s->hdr->boot_id, boot, sizeof(s->hdr->boot_id));
	s->hdr->meanings = lay->meanings;
	s->hdr->version = STORE_VERSION;
	__atomic_store_n(&s->hdr->magic, STORE_MAGIC, __ATOMIC_RELEASE);
}

/* Maps the settled file (made new unless restored) and allocates what
 * its entries use: 0, or -1 with err. */
static int conn_store_map(struct conn_store *s,
			  const struct conn_store_layout *lay, const char *boot,
			  size_t size, int restored, char *err, size_t errlen)
{
	if (!restored &&
	    (ftruncate(s->fd, 0) < 0 || ftruncate(s->fd, (off_t)size) < 0)) {
		snprintf(err, errlen, "%s", strerror(errno));
		return -1;
	}
	s->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	if (s->map == MAP_FAILED) {
		s->map = NULL;
		snprintf(err, errlen, "mmap: %s", strerror(errno));
		return -1;
	}
	s->map_len = size;
	s->hdr = s->map;
	if (!restored)
		conn_store_init_header(s, lay, boot);
	else if (s->hdr->meanings == 0)
		s->hdr->meanings = lay->meanings; /* checked from now on */
	conn_store_layout(s);
	if (fallocate(s->fd, 0, 0, (off_t)(s->array[0] - (uint8_t *)s->map)) <
		    0 &&
	    errno != EOPNOTSUPP) {
		snprintf(err, errlen, "cannot allocate its header: %s",
			 strerror(errno));
		return -1;
	}
	if (conn_store_reserve(s, CONN_STORE_ENTRIES,
			       s->hdr->counter[CONN_STORE_ENTRIES_HWM]) < 0 ||
	    conn_store_reserve(s, CONN_STORE_PATHS,
			       s->hdr->counter[CONN_STORE_PATHS_HWM]) < 0) {
		snprintf(err, errlen,
			 "cannot allocate room for its %u entries: %s",
			 s->hdr->counter[CONN_STORE_ENTRIES_HWM],
			 strerror(errno));
		return -1;
	}
	return 0;
}

struct conn_store *conn_store_open(const char *path,
				   const struct conn_store_layout *lay,
				   int *restored, char *err, size_t errlen)
{
	struct conn_store *s = calloc(1, sizeof(*s));
	struct conn_store_found *f = calloc(1, sizeof(*f));
	size_t off[CONN_STORE_N],
		size = conn_store_offsets(lay->size, lay->cap, lay->owner_cap,
					  off);
	char boot[40];

	*restored = 0;
	if (s == NULL || f == NULL) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	s->fd = -1;
	conn_store_boot_id(boot, sizeof(boot));
	if (conn_store_settle(s, path, lay, boot, size, f, err, errlen) < 0)
		goto fail;
	*restored = f->verdict == STORE_ADOPT;
	/* Not silently: the caller logs what err says of a success. */
	if (f->carried[0])
		snprintf(err, errlen, "%s", f->carried);
	else if (f->aside[0])
		snprintf(
			err, errlen,
			"the previous state was set aside as %s (%s); starting afresh",
			f->aside, f->why);
	else if (f->verdict == STORE_REPLACE)
		snprintf(err, errlen, "%s", f->why);
	if (conn_store_map(s, lay, boot, size, *restored, err, errlen) < 0)
		goto fail;
	free(f);
	return s;
fail:
	*restored = 0;
	free(f);
	if (s)
		conn_store_close(s);
	return NULL;
}

int conn_store_port_map(struct conn_store *s,
			const struct conn_store_layout *lay,
			int map[CONN_STORE_MAX_PORTS])
{
	uint32_t i, j;
	int differ = s->hdr->nports != lay->nports;

	for (i = 0; i < CONN_STORE_MAX_PORTS; i++) {
		map[i] = -1;
		for (j = 0; i < s->hdr->nports && j < lay->nports; j++)
			if (s->hdr->port_id[i] == lay->port_id[j])
				map[i] = (int)j;
		differ |= i < s->hdr->nports && map[i] != (int)i;
	}
	return differ;
}

void conn_store_set_ports(struct conn_store *s,
			  const struct conn_store_layout *lay)
{
	s->hdr->nports = lay->nports;
	memcpy(s->hdr->port_id, lay->port_id, sizeof(s->hdr->port_id));
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
