// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "conn_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cm_mad.h"
#include "../common/tree.h"
#include "../common/wire.h"

enum conn_kind { CK_COMM, CK_SIDR };
enum timer_class { TC_NONE, TC_HANDSHAKE, TC_TIMEWAIT, TC_MAX };

struct conn {
	RB_ENTRY(conn) host_link;       /* by (kind, port, host_id) */
	RB_ENTRY(conn) guest_link;      /* by (kind, client, port, guest_id) */
	RB_ENTRY(conn) peer_link;       /* by (port, peer_id, peer_gid) */
	TAILQ_ENTRY(conn) timer_link;
	LIST_ENTRY(conn) client_link;
	uint8_t kind, state, timer;
	uint8_t in_host, in_guest, in_peer;
	unsigned port;
	uint64_t client;
	uint32_t host_id, guest_id, peer_id;
	struct gid peer_gid;
	uint64_t guest_tid;
	uint64_t deadline_ms;
};

struct conn_client {
	RB_ENTRY(conn_client) link;
	uint64_t id;
	unsigned n;
	LIST_HEAD(, conn) conns;
};

static int host_cmp(struct conn *a, struct conn *b)
{
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	return a->host_id < b->host_id ? -1 : a->host_id > b->host_id;
}

static int guest_cmp(struct conn *a, struct conn *b)
{
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	if (a->client != b->client)
		return a->client < b->client ? -1 : 1;
	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	return a->guest_id < b->guest_id ? -1 : a->guest_id > b->guest_id;
}

static int peer_cmp(struct conn *a, struct conn *b)
{
	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	if (a->peer_id != b->peer_id)
		return a->peer_id < b->peer_id ? -1 : 1;
	return gid_cmp(&a->peer_gid, &b->peer_gid);
}

static int cclient_cmp(struct conn_client *a, struct conn_client *b)
{
	return a->id < b->id ? -1 : a->id > b->id;
}

RB_HEAD(host_tree, conn);
RB_HEAD(guest_tree, conn);
RB_HEAD(peer_tree, conn);
RB_HEAD(cclient_tree, conn_client);
TREE_GENERATE_STATIC(host_tree, conn, host_link, host_cmp)
TREE_GENERATE_STATIC(guest_tree, conn, guest_link, guest_cmp)
TREE_GENERATE_STATIC(peer_tree, conn, peer_link, peer_cmp)
TREE_GENERATE_STATIC(cclient_tree, conn_client, link, cclient_cmp)

struct conn_table {
	struct conn_limits lim;
	uint32_t random_operand;
	uint32_t next;
	struct host_tree hosts;
	struct guest_tree guests;
	struct peer_tree peers;
	struct cclient_tree clients;
	TAILQ_HEAD(, conn) timers[TC_MAX];
	unsigned timer_ms[TC_MAX];
	struct conn_counts counts;
	unsigned call_max;              /* the current call's client limit */
};

static const char *const conn_state_names[CONN_STATE_MAX] = {
	[CONN_REQ_RCVD] = "req_rcvd",
	[CONN_HANDSHAKE] = "handshake",
	[CONN_ESTABLISHED] = "established",
	[CONN_DISCONNECTING] = "disconnecting",
	[CONN_TIMEWAIT] = "timewait",
};

const char *conn_state_name(enum conn_state s)
{
	return (unsigned)s < CONN_STATE_MAX ? conn_state_names[s] : "invalid";
}

struct conn_table *conn_table_new(const struct conn_limits *lim,
				  uint32_t random_operand)
{
	struct conn_table *ct = calloc(1, sizeof(*ct));
	int i;

	if (ct == NULL)
		return NULL;
	ct->lim = *lim;
	ct->random_operand = random_operand;
	ct->next = 1;
	RB_INIT(&ct->hosts);
	RB_INIT(&ct->guests);
	RB_INIT(&ct->peers);
	RB_INIT(&ct->clients);
	for (i = 0; i < TC_MAX; i++)
		TAILQ_INIT(&ct->timers[i]);
	ct->timer_ms[TC_HANDSHAKE] = lim->handshake_ms;
	ct->timer_ms[TC_TIMEWAIT] = lim->timewait_ms;
	return ct;
}

/* ---- timers: one FIFO per duration class -------------------------------- */

static void timer_stop(struct conn_table *ct, struct conn *c)
{
	if (c->timer != TC_NONE) {
		TAILQ_REMOVE(&ct->timers[c->timer], c, timer_link);
		c->timer = TC_NONE;
		c->deadline_ms = 0;
	}
}

/* (Re-)arm: to the tail, as every entry of a class has the same length. */
static void timer_arm(struct conn_table *ct, struct conn *c,
		      enum timer_class tc, uint64_t now_ms)
{
	timer_stop(ct, c);
	c->timer = (uint8_t)tc;
	c->deadline_ms = now_ms + ct->timer_ms[tc];
	TAILQ_INSERT_TAIL(&ct->timers[tc], c, timer_link);
}

/* ---- entries ------------------------------------------------------------ */

static struct conn_client *cclient_get(struct conn_table *ct, uint64_t id,
				       int create)
{
	struct conn_client key = { .id = id }, *cc;

	cc = RB_FIND(cclient_tree, &ct->clients, &key);
	if (cc || !create)
		return cc;
	cc = calloc(1, sizeof(*cc));
	if (cc == NULL)
		return NULL;
	cc->id = id;
	LIST_INIT(&cc->conns);
	RB_INSERT(cclient_tree, &ct->clients, cc);
	return cc;
}

static void set_state(struct conn_table *ct, struct conn *c, enum conn_state s)
{
	ct->counts.by_state[c->state]--;
	c->state = (uint8_t)s;
	ct->counts.by_state[s]++;
}

static void conn_remove(struct conn_table *ct, struct conn *c)
{
	struct conn_client *cc = cclient_get(ct, c->client, 0);

	timer_stop(ct, c);
	if (c->in_host)
		RB_REMOVE(host_tree, &ct->hosts, c);
	if (c->in_guest)
		RB_REMOVE(guest_tree, &ct->guests, c);
	if (c->in_peer)
		RB_REMOVE(peer_tree, &ct->peers, c);
	LIST_REMOVE(c, client_link);
	ct->counts.total--;
	ct->counts.by_state[c->state]--;
	if (c->kind == CK_COMM)
		ct->counts.comm--;
	else
		ct->counts.sidr--;
	if (cc && --cc->n == 0) {
		RB_REMOVE(cclient_tree, &ct->clients, cc);
		free(cc);
	}
	free(c);
}

static struct conn *conn_new(struct conn_table *ct, enum conn_kind kind,
			     uint64_t client, unsigned port,
			     enum conn_state state, int *err)
{
	struct conn_client *cc = cclient_get(ct, client, 1);
	unsigned max = ct->lim.max_per_client;
	struct conn *c;

	if (cc == NULL) {
		*err = -ENOMEM;
		return NULL;
	}
	if (ct->call_max && ct->call_max < max)
		max = ct->call_max;
	if (cc->n >= max) {
		*err = -ENOSPC;
		if (cc->n == 0) {
			RB_REMOVE(cclient_tree, &ct->clients, cc);
			free(cc);
		}
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		*err = -ENOMEM;
		return NULL;
	}
	c->kind = (uint8_t)kind;
	c->state = (uint8_t)state;
	c->client = client;
	c->port = port;
	LIST_INSERT_HEAD(&cc->conns, c, client_link);
	cc->n++;
	ct->counts.total++;
	ct->counts.by_state[state]++;
	if (kind == CK_COMM)
		ct->counts.comm++;
	else
		ct->counts.sidr++;
	return c;
}

static struct conn *host_find(struct conn_table *ct, enum conn_kind kind,
			      unsigned port, uint32_t host_id)
{
	struct conn key = { .kind = (uint8_t)kind, .port = port, .host_id = host_id };

	return RB_FIND(host_tree, &ct->hosts, &key);
}

static struct conn *guest_find(struct conn_table *ct, enum conn_kind kind,
			       uint64_t client, unsigned port, uint32_t guest_id)
{
	struct conn key = { .kind = (uint8_t)kind, .client = client, .port = port,
			    .guest_id = guest_id };

	return RB_FIND(guest_tree, &ct->guests, &key);
}

static struct conn *peer_find(struct conn_table *ct, unsigned port,
			      uint32_t peer_id, const struct gid *gid)
{
	struct conn key = { .port = port, .peer_id = peer_id, .peer_gid = *gid };

	return RB_FIND(peer_tree, &ct->peers, &key);
}

static void peer_set(struct conn_table *ct, struct conn *c, uint32_t peer_id,
		     const struct gid *gid)
{
	if (c->in_peer || peer_id == 0)
		return;
	c->peer_id = peer_id;
	c->peer_gid = *gid;
	if (peer_find(ct, c->port, peer_id, gid) == NULL) {
		RB_INSERT(peer_tree, &ct->peers, c);
		c->in_peer = 1;
	}
}

/* A host ID nobody on this port uses: cyclic, XORed with a random
 * operand as the kernel CM does, never 0. */
static uint32_t alloc_host_id(struct conn_table *ct, enum conn_kind kind,
			      unsigned port)
{
	uint32_t id;
	unsigned tries;

	for (tries = 0; tries < (1u << 22); tries++) {
		id = ct->next++ ^ ct->random_operand;
		if (id != 0 && host_find(ct, kind, port, id) == NULL)
			return id;
	}
	return 0;
}

/* Give an entry its guest and host IDs and index it by both. */
static int conn_bind(struct conn_table *ct, struct conn *c, uint32_t guest_id)
{
	c->host_id = alloc_host_id(ct, (enum conn_kind)c->kind, c->port);
	if (c->host_id == 0)
		return -ENOSPC;
	c->guest_id = guest_id;
	RB_INSERT(host_tree, &ct->hosts, c);
	RB_INSERT(guest_tree, &ct->guests, c);
	c->in_host = c->in_guest = 1;
	return 0;
}

static struct conn *conn_create_bound(struct conn_table *ct, enum conn_kind kind,
				      uint64_t client, unsigned port,
				      uint32_t guest_id, enum conn_state state,
				      int *err)
{
	struct conn *c = conn_new(ct, kind, client, port, state, err);

	if (c == NULL)
		return NULL;
	*err = conn_bind(ct, c, guest_id);
	if (*err) {
		conn_remove(ct, c);
		return NULL;
	}
	return c;
}

/* The wire TID's low 32 bits name the entry; ib_umad owns the high 32. */
static void tid_out(struct conn *c, uint8_t *mad)
{
	uint64_t tid = wire_get64(mad + MAD_OFF_TID);

	c->guest_tid = tid;
	wire_put64(mad + MAD_OFF_TID, (tid & 0xffffffff00000000ull) | c->host_id);
}

static void tid_in(struct conn *c, uint8_t *mad)
{
	if ((wire_get64(mad + MAD_OFF_TID) & 0xffffffffull) == c->host_id)
		wire_put64(mad + MAD_OFF_TID, c->guest_tid);
}

static void put_local_id(uint8_t *mad, uint32_t id)
{
	wire_put32(mad + MAD_HDR_SIZE, id);
}

static void put_remote_id(uint8_t *mad, uint32_t id)
{
	wire_put32(mad + MAD_HDR_SIZE + 4, id);
}

/* The client's reply (REP, MRA, REJ) to a peer's REQ: reuse the peer
 * record the REQ left, or make a new entry. */
static struct conn *conn_for_reply(struct conn_table *ct, uint64_t client,
				   unsigned port, uint32_t guest_id,
				   uint32_t peer_id, const struct gid *dst,
				   enum conn_state state, int *err)
{
	struct conn *c = peer_find(ct, port, peer_id, dst);

	/* Only an answer to a REQ this client received: otherwise a VM
	 * could accept (or reject) a connection meant for another. */
	if (c == NULL || c->client != client || c->state != CONN_REQ_RCVD) {
		*err = -ENOENT;
		return NULL;
	}
	*err = conn_bind(ct, c, guest_id);
	if (*err)
		return NULL;
	set_state(ct, c, state);
	return c;
}

static int conn_outbound_locked(struct conn_table *ct, uint64_t client,
				unsigned port, uint8_t *mad,
				const struct gid *dst, uint64_t now_ms);

int conn_outbound(struct conn_table *ct, uint64_t client, unsigned port,
		  uint8_t *mad, const struct gid *dst, uint64_t now_ms,
		  unsigned max_conns)
{
	int rc;

	ct->call_max = max_conns;
	rc = conn_outbound_locked(ct, client, port, mad, dst, now_ms);
	ct->call_max = 0;
	return rc;
}

static int conn_outbound_locked(struct conn_table *ct, uint64_t client,
				unsigned port, uint8_t *mad,
				const struct gid *dst, uint64_t now_ms)
{
	uint16_t attr = cm_mad_attr_id(mad);
	uint32_t local = wire_get32(mad + MAD_HDR_SIZE);
	uint32_t remote = wire_get32(mad + MAD_HDR_SIZE + 4);
	struct conn *c;
	int err = 0;

	switch (attr) {
	case CM_ATTR_REQ:
		if (local == 0)
			return -EINVAL;
		c = guest_find(ct, CK_COMM, client, port, local);
		if (c == NULL)
			c = conn_create_bound(ct, CK_COMM, client, port, local,
					      CONN_HANDSHAKE, &err);
		else if (c->state == CONN_TIMEWAIT)
			set_state(ct, c, CONN_HANDSHAKE);      /* ID reused */
		if (c == NULL)
			return err;
		if (c->state == CONN_HANDSHAKE)
			timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		break;
	case CM_ATTR_REP:
	case CM_ATTR_MRA:
		if (local == 0)
			return -EINVAL;
		c = guest_find(ct, CK_COMM, client, port, local);
		if (c == NULL)
			c = conn_for_reply(ct, client, port, local, remote, dst,
					   CONN_HANDSHAKE, &err);
		if (c == NULL)
			return err;
		if (c->state == CONN_HANDSHAKE)
			timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		break;
	case CM_ATTR_REJ:
		if (local == 0) {
			/* Rejecting a REQ before replying: nothing to map,
			 * but it must be a REQ this client received. */
			c = peer_find(ct, port, remote, dst);
			if (c == NULL || c->client != client)
				return -ENOENT;
			if (c->state == CONN_REQ_RCVD) {
				set_state(ct, c, CONN_TIMEWAIT);
				timer_arm(ct, c, TC_TIMEWAIT, now_ms);
			}
			return 0;
		}
		c = guest_find(ct, CK_COMM, client, port, local);
		if (c == NULL)
			c = conn_for_reply(ct, client, port, local, remote, dst,
					   CONN_TIMEWAIT, &err);
		if (c == NULL)
			return err;
		set_state(ct, c, CONN_TIMEWAIT);
		timer_arm(ct, c, TC_TIMEWAIT, now_ms);
		break;
	case CM_ATTR_RTU:
	case CM_ATTR_DREQ:
	case CM_ATTR_DREP:
	case CM_ATTR_LAP:
	case CM_ATTR_APR:
		c = local ? guest_find(ct, CK_COMM, client, port, local) : NULL;
		if (c == NULL)
			return -ENOENT;
		if (attr == CM_ATTR_RTU) {
			set_state(ct, c, CONN_ESTABLISHED);
			timer_stop(ct, c);
		} else if (attr == CM_ATTR_DREQ) {
			set_state(ct, c, CONN_DISCONNECTING);
			timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		} else if (attr == CM_ATTR_DREP) {
			set_state(ct, c, CONN_TIMEWAIT);
			timer_arm(ct, c, TC_TIMEWAIT, now_ms);
		}
		break;
	case CM_ATTR_SIDR_REQ:
		if (local == 0)
			return -EINVAL;
		c = guest_find(ct, CK_SIDR, client, port, local);
		if (c == NULL)
			c = conn_create_bound(ct, CK_SIDR, client, port, local,
					      CONN_HANDSHAKE, &err);
		if (c == NULL)
			return err;
		set_state(ct, c, CONN_HANDSHAKE);
		timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		break;
	default:
		/* SIDR_REP names the requester's ID: nothing of ours. */
		return 0;
	}
	put_local_id(mad, c->host_id);
	tid_out(c, mad);
	return 0;
}

int conn_inbound(struct conn_table *ct, unsigned port, uint8_t *mad,
		 const struct gid *src, uint64_t now_ms, uint64_t *client)
{
	uint16_t attr = cm_mad_attr_id(mad);
	uint32_t local = wire_get32(mad + MAD_HDR_SIZE);
	uint32_t remote = wire_get32(mad + MAD_HDR_SIZE + 4);
	struct conn *c;

	if (attr == CM_ATTR_SIDR_REP) {
		c = host_find(ct, CK_SIDR, port, local);
		if (c == NULL)
			return -ENOENT;
		*client = c->client;
		put_local_id(mad, c->guest_id);
		tid_in(c, mad);
		set_state(ct, c, CONN_TIMEWAIT);
		timer_arm(ct, c, TC_TIMEWAIT, now_ms);
		return 0;
	}
	if (remote == 0) {
		/* Only a REJ may come without our ID (the active side's
		 * timeout REJ after an abandoned REQ): route it by the peer
		 * record its REQ left. */
		if (attr != CM_ATTR_REJ)
			return -EBADR;
		c = peer_find(ct, port, local, src);
		if (c == NULL)
			return -EBADR;
		*client = c->client;
		set_state(ct, c, CONN_TIMEWAIT);
		timer_arm(ct, c, TC_TIMEWAIT, now_ms);
		return 0;
	}
	c = host_find(ct, CK_COMM, port, remote);
	if (c == NULL)
		return -ENOENT;
	*client = c->client;
	put_remote_id(mad, c->guest_id);
	tid_in(c, mad);
	switch (attr) {
	case CM_ATTR_REP:
		peer_set(ct, c, local, src);
		/* fall through */
	case CM_ATTR_MRA:
		if (c->state == CONN_HANDSHAKE)
			timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		break;
	case CM_ATTR_RTU:
		if (c->state == CONN_HANDSHAKE) {
			set_state(ct, c, CONN_ESTABLISHED);
			timer_stop(ct, c);
		}
		break;
	case CM_ATTR_DREQ:
		if (c->state != CONN_TIMEWAIT) {
			set_state(ct, c, CONN_DISCONNECTING);
			timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		} else {
			/* Our DREP was lost: the guest answers again. */
			timer_arm(ct, c, TC_TIMEWAIT, now_ms);
		}
		break;
	case CM_ATTR_DREP:
	case CM_ATTR_REJ:
		set_state(ct, c, CONN_TIMEWAIT);
		timer_arm(ct, c, TC_TIMEWAIT, now_ms);
		break;
	default:
		break;
	}
	return 0;
}

int conn_note_req(struct conn_table *ct, uint64_t client, unsigned port,
		  const uint8_t *mad, const struct gid *src, uint64_t now_ms)
{
	uint32_t peer_id = wire_get32(mad + MAD_HDR_SIZE);
	struct conn *c;
	int err = 0;

	if (peer_id == 0)
		return -EINVAL;
	c = peer_find(ct, port, peer_id, src);
	if (c) {
		/* A retransmitted REQ: keep the record as long. */
		if (c->client == client && c->timer == TC_HANDSHAKE)
			timer_arm(ct, c, TC_HANDSHAKE, now_ms);
		return 0;
	}
	c = conn_new(ct, CK_COMM, client, port, CONN_REQ_RCVD, &err);
	if (c == NULL)
		return err;
	peer_set(ct, c, peer_id, src);
	timer_arm(ct, c, TC_HANDSHAKE, now_ms);
	return 0;
}

unsigned conn_expire(struct conn_table *ct, uint64_t now_ms)
{
	struct conn *c;
	unsigned n = 0;
	int tc;

	for (tc = TC_HANDSHAKE; tc < TC_MAX; tc++) {
		while ((c = TAILQ_FIRST(&ct->timers[tc])) != NULL &&
		       c->deadline_ms <= now_ms) {
			conn_remove(ct, c);
			n++;
		}
	}
	return n;
}

uint64_t conn_next_deadline(struct conn_table *ct)
{
	uint64_t next = UINT64_MAX;
	struct conn *c;
	int tc;

	for (tc = TC_HANDSHAKE; tc < TC_MAX; tc++) {
		c = TAILQ_FIRST(&ct->timers[tc]);
		if (c && c->deadline_ms < next)
			next = c->deadline_ms;
	}
	return next;
}

void conn_purge_client(struct conn_table *ct, uint64_t client)
{
	struct conn_client *cc = cclient_get(ct, client, 0);
	struct conn *c;

	/* conn_remove frees cc with the last entry. */
	while (cc && (c = LIST_FIRST(&cc->conns)) != NULL) {
		int last = cc->n == 1;

		conn_remove(ct, c);
		if (last)
			break;
	}
}

void conn_table_free(struct conn_table *ct)
{
	struct conn_client *cc, *next;

	if (ct == NULL)
		return;
	RB_FOREACH_SAFE(cc, cclient_tree, &ct->clients, next)
		conn_purge_client(ct, cc->id);
	free(ct);
}

void conn_counts(struct conn_table *ct, struct conn_counts *out)
{
	*out = ct->counts;
}

void conn_client_counts(struct conn_table *ct, uint64_t client,
			struct conn_counts *out)
{
	struct conn_client *cc = cclient_get(ct, client, 0);
	struct conn *c;

	memset(out, 0, sizeof(*out));
	if (cc == NULL)
		return;
	LIST_FOREACH(c, &cc->conns, client_link) {
		out->total++;
		out->by_state[c->state]++;
		if (c->kind == CK_COMM)
			out->comm++;
		else
			out->sidr++;
	}
}

json_t *conn_client_json(struct conn_table *ct, uint64_t client,
			 unsigned max, uint64_t now_ms)
{
	struct conn_client *cc = cclient_get(ct, client, 0);
	json_t *arr = json_array(), *o;
	char buf[GID_STRLEN];
	struct conn *c;
	unsigned n = 0;

	if (cc == NULL)
		return arr;
	LIST_FOREACH(c, &cc->conns, client_link) {
		if (n++ >= max)
			break;
		o = json_pack("{s:s, s:s, s:i, s:I, s:I}",
			      "kind", c->kind == CK_COMM ? "comm" : "sidr",
			      "state", conn_state_name(c->state),
			      "port", (int)c->port,
			      "guest_id", (json_int_t)c->guest_id,
			      "host_id", (json_int_t)c->host_id);
		if (c->in_peer) {
			json_object_set_new(o, "peer_id", json_integer(c->peer_id));
			json_object_set_new(o, "peer_gid",
					    json_string(gid_format(&c->peer_gid, buf)));
		}
		json_object_set_new(o, "expires_in_ms", c->timer == TC_NONE ?
			json_null() : json_integer(c->deadline_ms > now_ms ?
				(json_int_t)(c->deadline_ms - now_ms) : 0));
		json_array_append_new(arr, o);
	}
	return arr;
}
