/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_TESTS_CONN_FIXTURE_H
#define RCM_TESTS_CONN_FIXTURE_H
/* The connection table's suites' fixture (conn_fixture.c): the client
 * ids, the lifetimes every table gets, the peer paths, what the table
 * sent on its own, and the messages the tests feed it. */
#include <stdint.h>

#include "mux/conn.h"

#define A 1
#define B 2
#define HS 60000u /* handshake */
#define TW 10000u /* timewait */
#define MIN 60000u

extern struct conn_path path;       /* us <-> the peer */
extern struct conn_path other_path; /* a second peer */

/* What the table sent on its own. */
#define EMIT_MAX 64
struct fixture_emit {
	enum conn_answer why;
	struct conn_path path;
	uint8_t mad[MAD_SIZE];
};
extern struct fixture_emit emitted[EMIT_MAX];
extern int nemitted;

void capture(void *arg, const struct conn_emit *e);
struct conn_table *new_table(uint32_t operand);
void mk(uint8_t *mad, uint16_t attr, uint32_t local, uint32_t remote,
	uint64_t tid);
uint32_t local_of(const uint8_t *mad);
uint32_t remote_of(const uint8_t *mad);
int out_rc(struct conn_table *ct, uint64_t client, uint16_t attr,
	   uint32_t local, uint32_t remote, uint64_t now);
uint32_t out(struct conn_table *ct, uint64_t client, uint16_t attr,
	     uint32_t local, uint32_t remote, uint64_t now);
uint64_t in(struct conn_table *ct, uint16_t attr, uint32_t local,
	    uint32_t remote, uint32_t want_guest, uint64_t now);
int in_rc(struct conn_table *ct, uint16_t attr, uint32_t local, uint32_t remote,
	  uint64_t now);
void note_req(struct conn_table *ct, uint64_t client, uint32_t peer_id,
	      uint64_t now);
unsigned count(struct conn_table *ct, enum conn_state s);
unsigned total(struct conn_table *ct);
uint32_t established(struct conn_table *ct, uint64_t client, uint32_t g,
		     uint32_t p, uint64_t now);
struct conn_table *open_table_hs(const char *file, uint64_t port_id,
				 int *restored, unsigned handshake_ms);
struct conn_table *open_table(const char *file, uint64_t port_id,
			      int *restored);

#endif
