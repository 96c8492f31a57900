// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* What the connection table's suites share: a table on a fake clock, a
 * peer's path, the MADs the table sends on its own, and messages built
 * and fed in either direction (tests/unit/conn_fixture.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/cm_mad.h"
#include "common/wire.h"
#include "tests/unit/conn_fixture.h"

struct conn_path path;       /* us <-> the peer */
struct conn_path other_path; /* a second peer */

struct fixture_emit emitted[EMIT_MAX];
int nemitted;

void capture(void *arg, const struct conn_emit *e)
{
	(void)arg;
	assert_true(nemitted < EMIT_MAX);
	emitted[nemitted].why = e->why;
	emitted[nemitted].path = *e->path;
	memcpy(emitted[nemitted].mad, e->mad, MAD_SIZE);
	nemitted++;
}

struct conn_table *new_table(uint32_t operand)
{
	struct conn_limits lim = { .max_per_client = 64,
				   .handshake_ms = HS,
				   .timewait_ms = TW };
	struct conn_table *ct = conn_table_new(&lim, operand, capture, NULL);

	memset(&path, 0, sizeof(path));
	gid_parse("fd00::1", &path.local_gid);
	gid_parse("fd00::99", &path.peer_gid);
	other_path = path;
	gid_parse("fd00::98", &other_path.peer_gid);
	nemitted = 0;
	assert_non_null(ct);
	return ct;
}

void mk(uint8_t *mad, uint16_t attr, uint32_t local, uint32_t remote,
	uint64_t tid)
{
	cm_mad_init(mad, attr, tid);
	wire_put32(mad + 24, local);
	wire_put32(mad + 28, remote);
}

uint32_t local_of(const uint8_t *mad)
{
	return wire_get32(mad + 24);
}
uint32_t remote_of(const uint8_t *mad)
{
	return wire_get32(mad + 28);
}

int out_rc(struct conn_table *ct, uint64_t client, uint16_t attr,
	   uint32_t local, uint32_t remote, uint64_t now)
{
	uint8_t mad[MAD_SIZE];

	mk(mad, attr, local, remote, 0x1234000000000000ull | local);
	return conn_outbound(ct, client, 0, mad, &path, now, 0);
}

/* Outbound message from client; returns the host comm ID it carries. */
uint32_t out(struct conn_table *ct, uint64_t client, uint16_t attr,
	     uint32_t local, uint32_t remote, uint64_t now)
{
	uint8_t mad[MAD_SIZE];

	mk(mad, attr, local, remote, 0x1234000000000000ull | local);
	assert_int_equal(conn_outbound(ct, client, 0, mad, &path, now, 0), 0);
	return local_of(mad);
}

/* Inbound message for host ID `remote`: returns the client, checks the
 * guest's ID came back. */
uint64_t in(struct conn_table *ct, uint16_t attr, uint32_t local,
	    uint32_t remote, uint32_t want_guest, uint64_t now)
{
	uint8_t mad[MAD_SIZE];
	uint64_t client = 0;

	mk(mad, attr, local, remote, 0);
	assert_int_equal(conn_inbound(ct, 0, mad, &path, now, &client), 0);
	assert_int_equal(remote_of(mad), want_guest);
	return client;
}

int in_rc(struct conn_table *ct, uint16_t attr, uint32_t local, uint32_t remote,
	  uint64_t now)
{
	uint8_t mad[MAD_SIZE];
	uint64_t client = 0;

	mk(mad, attr, local, remote, 0);
	return conn_inbound(ct, 0, mad, &path, now, &client);
}

void note_req(struct conn_table *ct, uint64_t client, uint32_t peer_id,
	      uint64_t now)
{
	uint8_t mad[MAD_SIZE];

	mk(mad, CM_ATTR_REQ, peer_id, 0, 1);
	assert_int_equal(conn_note_req(ct, client, 0, mad, &path, now), 0);
}

unsigned count(struct conn_table *ct, enum conn_state s)
{
	struct conn_counts c;

	conn_table_counts(ct, &c);
	return c.by_state[s];
}

unsigned total(struct conn_table *ct)
{
	struct conn_counts c;

	conn_table_counts(ct, &c);
	return c.total;
}

/* An established connection of A's: guest ID g, peer ID p; returns the
 * host ID. */
uint32_t established(struct conn_table *ct, uint64_t client, uint32_t g,
		     uint32_t p, uint64_t now)
{
	uint32_t h = out(ct, client, CM_ATTR_REQ, g, 0, now);

	in(ct, CM_ATTR_REP, p, h, g, now);
	out(ct, client, CM_ATTR_RTU, g, p, now);
	return h;
}

struct conn_table *open_table_hs(const char *file, uint64_t port_id,
				 int *restored, unsigned handshake_ms)
{
	struct conn_limits lim = { .max_per_client = 64,
				   .handshake_ms = handshake_ms,
				   .timewait_ms = TW };
	char err[256] = "";
	struct conn_table *ct = conn_restore_open(&lim, 7, capture, NULL, file,
						  1024, 16, 4, &port_id, 1,
						  restored, err, sizeof(err));

	assert_non_null(ct);
	nemitted = 0;
	return ct;
}

struct conn_table *open_table(const char *file, uint64_t port_id, int *restored)
{
	return open_table_hs(file, port_id, restored, HS);
}
