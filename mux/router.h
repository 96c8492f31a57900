/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_ROUTER_H
#define RCM_ROUTER_H

/*
 * The router (router.c): GID ownership, and who gets an inbound CM MAD.
 * A unit below the daemon: it knows the connection table (conn.h) and
 * the wire, nothing of workers, sessions or counters; what it sends on
 * its own leaves through the ops the daemon gives it, and what it drops
 * it says with a verdict the daemon counts.
 */
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/gid.h"
#include "mux/conn.h"
#include "protocol/rdmacm_mux_proto.h"

struct router;

struct router_limits {
	unsigned max_gids_per_client;
	unsigned max_comm_ids_per_client;
	unsigned handshake_ms;
	unsigned timewait_ms;
	unsigned max_peer_records_per_port;
	unsigned max_peer_records_per_source;
	unsigned max_timewait;
	/* Persistence: NULL keeps the table on the heap (it dies with the
	 * daemon). */
	const char *state_path;
	unsigned max_entries, max_owners;
	/* The ports, in index order, each by an ID of its name. */
	unsigned nports;
	uint64_t port_ids[16];
};

/* What the router needs from the daemon: a way to send the MADs it
 * answers with, and whether a GID is in a port's table.  Called without
 * the router's lock held (gid_in_table with it: it must not call back). */
struct router_ops {
	void (*send)(void *arg, enum conn_answer why, unsigned port,
		     const struct conn_path *path, const uint8_t *mad);
	int (*gid_in_table)(void *arg, unsigned port, const struct gid *gid);
};

struct router *router_new(const struct router_limits *lim,
			  uint32_t random_operand, const struct router_ops *ops,
			  void *ops_arg);
void router_free(struct router *r);
/* A reload: the counting limits (not the timers, not the state file). */
void router_set_limits(struct router *r, const struct router_limits *lim);
/* The daemon is stopping: send nothing on anyone's behalf from now on
 * (its clients are not gone, it is). */
void router_stop_answering(struct router *r);
struct router_counts;
/* 1 when the table came from a previous daemon (out: its sizes). */
int router_restored(struct router *r, struct router_counts *out);
/* Clients of the previous daemon that have not claimed their entries by
 * until_ms lose them (no-op when nothing was restored). */
void router_resume_grace(struct router *r, uint64_t until_ms);
uint64_t router_max_client_id(struct router *r);
/* Resume tokens (conn_restore_owner_add, conn_restore_claim). */
int router_owner_add(struct router *r, uint64_t client, uint32_t uid,
		     const uint8_t token[16]);
int router_owner_claim(struct router *r, uint64_t old_client, uint32_t uid,
		       const uint8_t token[16], uint64_t new_client,
		       const uint8_t new_token[16]);
/* QEMU clients: the token is the process's identity (conn.h). */
int router_owner_add_qemu(struct router *r, uint64_t client, uint32_t uid,
			  const uint8_t identity[16]);
int router_owner_claim_identity(struct router *r, uint32_t uid,
				const uint8_t identity[16], uint64_t new_client,
				uint64_t *old_client);

int router_register_gid(struct router *r, unsigned port, const struct gid *gid,
			uint64_t client);
/* A shared GID's owner, as router_gid_owner() and the listings say. */
#define ROUTER_GID_SHARED UINT64_MAX
/* client shares (port, gid) with the other clients that do (the host's
 * own processes, as with the kernel CM): 0 (also when it already does),
 * -EEXIST when a client holds it alone, -ENOSPC at the client's limit
 * of GIDs, -ENOMEM.  router_unregister_gid() ends its share. */
int router_share_gid(struct router *r, unsigned port, const struct gid *gid,
		     uint64_t client);
/* A client's listens, at most. */
#define ROUTER_LISTENS_PER_CLIENT 1024
/* REQs and SIDR_REQs for shared (port, gid) with service_id go to client,
 * which shares it: 0 (also when it already listens), -EADDRINUSE when
 * another member does, -ENOENT when client does not share the GID,
 * -ENOSPC at ROUTER_LISTENS_PER_CLIENT.  Nobody listening: answered as
 * the kernel CM answers (REJ "invalid service ID", SIDR_REP
 * "unsupported"). */
int router_listen(struct router *r, unsigned port, const struct gid *gid,
		  uint64_t service_id, uint64_t client);
/* 0, or -ENOENT when client does not listen there. */
int router_unlisten(struct router *r, unsigned port, const struct gid *gid,
		    uint64_t service_id, uint64_t client);
/* end_connections: the client's connections from the GID end too, as
 * if it had gone (a QEMU guest reset, whose CM went with it). */
int router_unregister_gid(struct router *r, unsigned port,
			  const struct gid *gid, uint64_t client,
			  int end_connections);
/* The client's connections from its GID end, as if it had gone (a QEMU
 * guest that reset), the GID staying its own: 0, -ENOENT or -EACCES. */
int router_reset_gid(struct router *r, unsigned port, const struct gid *gid,
		     uint64_t client);
int router_owns_gid(struct router *r, unsigned port, const struct gid *gid,
		    uint64_t client);
/* GIDs a MAD says are its sender's (its source, a REQ's local port GIDs,
 * rdma_cm's source address): each must be the sender's on the port. */
#define ROUTER_MAX_CLAIMS 4
struct router_claims {
	unsigned n;
	struct gid gid[ROUTER_MAX_CLAIMS];
};
/* An outbound MAD from `client` on path, before it is sent: if a GID in
 * claims (may be NULL) is not the client's on the port, -EADDRNOTAVAIL
 * and its index in *not_owned, and nothing changes; otherwise translated
 * in place (comm ID, request ID, TID): 0 or a negative errno from
 * conn_outbound() (conn.h).  On 0, *gid_type (when not NULL) is the GID
 * type the MAD should leave as (conn_reply_gid_type()). */
int router_outbound(struct router *r, unsigned port, uint64_t client,
		    const struct router_claims *claims, unsigned *not_owned,
		    uint8_t *mad, const struct conn_path *path, uint64_t now_ms,
		    unsigned max_conns, uint8_t *gid_type);
/*
 * Why the router does not deliver an inbound MAD: each verdict is also the
 * first of the daemon's drop reasons (mux.h, enum drop_reason), counted
 * under the name given here (rdmacm-muxctl(8) lists them).  One list, so
 * that the two enums and the names cannot fall out of step.
 */
#define ROUTER_VERDICTS(X)                                                   \
	X(NOT_CM, "not_cm") /* class/version/method not CM Send */           \
	X(BAD_SIZE, "bad_size")                                              \
	/* REQ/SIDR_REQ for a GID not in the port's table */                 \
	X(UNKNOWN_GID, "unknown_gid")                                        \
	/* ... for a GID of the port nobody owns (answered) */               \
	X(NO_LISTENER, "no_listener")                                        \
	X(NO_CMA_HDR, "no_rdma_cm_header") /* SIDR_REQ, no rdma_cm header */ \
	X(UNKNOWN_COMM_ID, "unknown_comm_id")                                \
	/* e.g. timeout REJ: no Remote Comm ID */                            \
	X(ZERO_COMM_ID, "zero_remote_comm_id")                               \
	X(UNKNOWN_REQUEST_ID, "unknown_sidr_request_id")                     \
	/* right host ID, wrong peer comm ID or GID */                       \
	X(PEER_MISMATCH, "peer_mismatch")                                    \
	/* not valid in the connection's state */                            \
	X(WRONG_STATE, "wrong_state")                                        \
	/* for a connection its client abandoned */                          \
	X(STALE_CONN, "stale_connection")                                    \
	X(UNSUPPORTED_ATTR, "unsupported_attribute")                         \
	/* held back: its owner has not come back since a restart */         \
	X(OWNER_AWAY, "owner_away")

/* clang-format takes the list for the start of a statement. */
/* clang-format off */
enum router_verdict {
	ROUTER_DELIVER,
#define ROUTER_VERDICT_ENUM(name, text) ROUTER_##name,
	ROUTER_VERDICTS(ROUTER_VERDICT_ENUM)
#undef ROUTER_VERDICT_ENUM
	ROUTER_VERDICT_MAX
};
/* clang-format on */
/* Decide who gets an inbound MAD arriving on path (peer_gid: the sender)
 * and translate it for them: ROUTER_DELIVER and *client, or why not;
 * answers what a host's CM would answer.  A REQ or SIDR_REQ that made a
 * record sets *noted (when not NULL) for router_forget_noted(). */
enum router_verdict router_inbound(struct router *r, unsigned port,
				   uint8_t *mad, size_t len,
				   const struct conn_path *path,
				   uint64_t now_ms, uint64_t *client,
				   uint32_t *noted);
/* The REQ that made record `noted` never reached client: its record
 * goes, so that it holds no share of the port's. */
void router_forget_noted(struct router *r, uint32_t noted, uint64_t client);
/* The path a MAD's address block describes: outbound (local is ours) or
 * inbound (remote is the sender's). */
void router_path_from_addr(const struct proto_mad_addr *a, int inbound,
			   struct conn_path *out);
/* Forget everything a client owned, telling its peers first. */
void router_purge_client(struct router *r, uint64_t client);
/* Remove entries whose drain time has passed; returns how many. */
unsigned router_expire(struct router *r, uint64_t now_ms);

struct router_counts {
	unsigned gids, comm_ids, sidr_ids;
	unsigned handshake, established, disconnecting, draining;
	unsigned peer_records;
	unsigned listens; /* a client's service IDs (per client only) */
	uint64_t peer_records_refused, peer_records_evicted, timewait_evicted;
};
void router_counts(struct router *r, struct router_counts *out);
void router_client_counts(struct router *r, uint64_t client,
			  struct router_counts *out);
/* A client's live comm-ID and SIDR mappings after the first offset
 * (newest first), at most max; NULL when out of memory. */
json_t *router_conns_json(struct router *r, uint64_t client, unsigned offset,
			  unsigned max, uint64_t now_ms);
/* JSON array of {"port", "gid"} a client owns (all when client == 0). */
json_t *router_gids_json(struct router *r, uint64_t client);
/* fn for each GID a client owns or shares (every GID when client == 0,
 * a shared one's owner ROUTER_GID_SHARED), under the router's lock: fn
 * must not call the router. */
void router_gids_foreach(struct router *r, uint64_t client,
			 void (*fn)(void *arg, unsigned port,
				    const struct gid *gid, uint64_t owner),
			 void *arg);
/* Owner of a GID, ROUTER_GID_SHARED, or 0. */
uint64_t router_gid_owner(struct router *r, unsigned port,
			  const struct gid *gid);
/* Where a client's outbound MAD must go, from its contents and the
 * connection state (for clients, such as QEMU, that cannot say): 0 and
 * *dst, or -ENOENT. */
int router_destination(struct router *r, unsigned port, uint64_t client,
		       const uint8_t *mad, struct gid *dst);

#endif
