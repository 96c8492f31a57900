/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_CONN_STORE_H
#define RCM_CONN_STORE_H

/*
 * The connection table's entries in a shared file mapping that survives
 * the daemon (conn_store.c).  Slots are opaque here: the table fills a
 * slot, then commits it; a restarted daemon walks the committed ones.
 */
#include <stddef.h>
#include <stdint.h>

struct conn_store;

/* A client that owns entries, and the token it proves it with. */
struct conn_owner {
	uint64_t client;
	uint32_t uid;
	uint8_t live;
	uint8_t claimed; /* by a client of this daemon's life */
	uint8_t pad[2];
	uint8_t token[16];
};

/* Opens (or creates) PATH for slot_cap slots of slot_size bytes and
 * owner_cap owners.  *restored: 1 when it holds a previous daemon's
 * entries (same layout, same ports_hash, same boot), 0 when it starts
 * empty.  NULL and a message in err on failure. */
struct conn_store *conn_store_open(const char *path, uint32_t slot_size,
				   uint32_t slot_cap, uint32_t owner_cap,
				   uint64_t ports_hash, int *restored,
				   char *err, size_t errlen);
void conn_store_close(struct conn_store *s);

/* A zeroed slot, or NULL when all are in use. */
void *conn_store_alloc(struct conn_store *s);
/* The slot is whole: a restart will see it. */
void conn_store_commit(struct conn_store *s, void *slot);
void conn_store_free(struct conn_store *s, void *slot);
/* Every committed slot. */
void conn_store_foreach(struct conn_store *s, void (*fn)(void *arg, void *slot),
			void *arg);

/* The table's counters that must carry over (host-ID and TID sequences,
 * so that a restarted daemon reuses neither). */
enum conn_store_counter {
	CONN_STORE_RANDOM_OPERAND,
	CONN_STORE_NEXT_HOST,
	CONN_STORE_TID_SEQ,
};
uint32_t *conn_store_counter(struct conn_store *s,
			     enum conn_store_counter which);
struct conn_owner *conn_store_owners(struct conn_store *s, uint32_t *n);

#endif
