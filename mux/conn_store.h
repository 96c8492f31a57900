/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_CONN_STORE_H
#define RCM_CONN_STORE_H

/*
 * The connection table's arrays in a shared file mapping that survives
 * the daemon (conn_store.c): its entries, its path records and the
 * owners of entries.  Elements are opaque here: whether one is in use is
 * written in it by the table, which walks them again after a restart.
 */
#include <stddef.h>
#include <stdint.h>

struct conn_store;

/* A QEMU client's token is its process's identity (qemu_client.c): 'Q',
 * then at this offset the index of the port whose socket it came in on,
 * big-endian, which a restart with other ports moves with the port's
 * entries (conn_restore.c), then its pid and start time. */
#define CONN_IDENTITY_PORT_OFF 2

/* A client that owns entries, and the token it proves it with. */
struct conn_owner {
	uint64_t client;
	uint32_t uid;
	uint8_t live;
	uint8_t claimed;   /* by a client of this daemon's life */
	uint8_t resumable; /* it was given the token: it may claim */
	uint8_t qemu;      /* token: its process's identity, claimed so */
	uint8_t token[16];
};

/* A GID an owner held, kept so that a restarted daemon holds it for the
 * owner while it may come back (conn_restore.c). */
struct conn_gid_rec {
	uint8_t gid[16];
	uint16_t port;
	uint8_t used;
	uint8_t pad;
};

enum conn_store_array {
	CONN_STORE_ENTRIES,
	CONN_STORE_PATHS,
	CONN_STORE_GIDS, /* owner_cap slices of cap / owner_cap */
	CONN_STORE_N
};

#define CONN_STORE_MAX_PORTS 16

struct conn_store_layout {
	uint32_t size[CONN_STORE_N]; /* bytes per element */
	uint32_t cap[CONN_STORE_N];  /* elements */
	uint32_t owner_cap;
	/* The daemon's ports in index order, each by an ID of its name:
	 * entries name ports by index, so a restart with other ports
	 * maps the old indexes to the new (conn_store_port_map). */
	uint32_t nports;
	uint64_t port_id[CONN_STORE_MAX_PORTS];
	/* What the entries' fields mean (states, timer classes, flags), as
	 * a fingerprint the table makes: a file of other meanings is set
	 * aside, whatever its version says.  0: not checked. */
	uint64_t meanings;
};

/* Opens (or creates) PATH for the arrays of lay.  *restored: 1 when it
 * holds a previous daemon's of this boot (carried into lay's sizes when
 * they differ), 0 when it starts empty.  NULL and a message in err on
 * failure. */
struct conn_store *conn_store_open(const char *path,
				   const struct conn_store_layout *lay,
				   int *restored, char *err, size_t errlen);
/* Where each port of the file's is among lay's: map[old] = new index,
 * or -1 for a port lay does not have; returns 1 when that is not the
 * same list.  conn_store_set_ports() then writes lay's list. */
int conn_store_port_map(struct conn_store *s,
			const struct conn_store_layout *lay,
			int map[CONN_STORE_MAX_PORTS]);
void conn_store_set_ports(struct conn_store *s,
			  const struct conn_store_layout *lay);
void conn_store_close(struct conn_store *s);

void *conn_store_array(struct conn_store *s, enum conn_store_array which);
/* The file is sparse: pages for the first n elements of an array before
 * they are written (0, or -errno: a full /run refuses an entry instead
 * of killing the daemon with SIGBUS). */
int conn_store_reserve(struct conn_store *s, enum conn_store_array which,
		       uint32_t n);

/* The table's counters that must carry over. */
enum conn_store_counter {
	CONN_STORE_RANDOM_OPERAND, /* host IDs are derived with it */
	CONN_STORE_TID_SEQ,        /* TIDs of the table's own sends */
	CONN_STORE_ENTRIES_HWM,    /* entries ever used: the scan's end */
	CONN_STORE_PATHS_HWM,
	CONN_STORE_NOW_LO, /* the latest time the table was given */
	CONN_STORE_NOW_HI,
	CONN_STORE_COUNTERS
};
uint32_t *conn_store_counter(struct conn_store *s,
			     enum conn_store_counter which);
struct conn_owner *conn_store_owners(struct conn_store *s, uint32_t *n);

#endif
