/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_MUX_H
#define RCM_MUX_H

/*
 * rdmacm-muxd's private header, one section per file that implements it,
 * in the order a newcomer follows the daemon: what it is told (config.c)
 * and counts (stats.c), the daemon object (mux.c, struct mux), then the
 * two corridors a MAD walks, then what stands beside them.
 *
 * The inbound corridor, a MAD from the wire to its VM:
 *   port_umad.c / port_sim.c  a port's receive path, on the port thread
 *   port.c                    port_input(): counted, handed to the router
 *   router.c (router.h)       whose is it: REQ/SIDR_REQ by destination
 *                             GID, the rest by comm ID, translated
 *   conn.c, conn_table.c      the CM state machine that says so (conn.h)
 *   delivery.c                to the owner's session, from any thread
 *   session.c                 queued on the client's socket output
 *   outlet.c                  written, by whichever thread may
 *   (worker.c runs the sessions: one libevent base and inbox each)
 *
 * The outbound corridor, a VM's MAD to the wire:
 *   session.c                 a MAD frame read from the client
 *                             (qemu_client.c: a QEMU request)
 *   outbound.c                checked: rate, message, port and policy,
 *                             source GID, address block, the QP it names
 *                             (qp_owner.c, qp_registry.c), then the
 *                             router and connection table (comm IDs,
 *                             states, the GIDs inside)
 *   port.c                    port_send_client_mad(): counted, sent
 *   port_senders.c, port_umad.c  through a sender thread where a send
 *                             blocks (umad), else at once
 *
 * Beside them: control requests (requests.c), the client list
 * (clients.c), the sockets (listener.c, unix_listener.c, status.c,
 * admin.c), start-up and systemd (lockfile.c, listen_fds.c, sdnotify.c,
 * main.c).
 *
 * Threads: the main thread (listeners, signals), the status thread, one
 * port thread (every port's receive path, the router's timers) and a
 * fixed pool of workers, each owning its sessions and a libevent base.
 * Work crosses threads only as typed messages on a worker's inbox, or as
 * output on a client's outlet; sessions are named across threads by
 * client id, never by pointer.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct mnl_socket;

#include <event2/event.h>
#include <event2/listener.h>
#include <jansson.h>

#include "common/cm_mad.h"
#include "common/gid.h"
#include "common/log.h"
#include "common/tree.h"
#include "mux/conn.h"
#include "mux/router.h"
#include "mux/policy.h"
#include "protocol/qemu_msg.h"
#include "protocol/rdmacm_mux_proto.h"

#define MUX_VERSION "0.1.0"
#define MUX_MAX_PORTS 16
#define MUX_MAX_WORKERS 64
#define MUX_SIM_MAX_GIDS 4096
/* Slots in the connection-state file, at most (a sparse file). */
#define MUX_STATE_MAX_ENTRIES (1u << 22)
/* A client's VM name, in bytes. */
#define MUX_NAME_MAX 63
#define MUX_DEFAULT_CONFIG "/etc/rdmacm-mux/rdmacm-muxd.conf"

struct router;
struct mux;
struct port;
struct worker;
struct client_info;
struct clients;
struct client_listener;
struct listen_fds;
struct unix_listener;

/* ---- config.c: options from the command line and the config file ---- */

struct port_spec {
	enum { PORT_SPEC_UMAD, PORT_SPEC_SIM } kind;
	char name[32];    /* sim name, or device */
	int port_num;     /* umad */
	int roce_version; /* umad: 1 or 2, preferred where a GID has both */
	int ud_sender;    /* umad: clients' MADs from UD QPs (port_ud.c) */
	int ngids;
	struct gid *gids; /* sim GID table (allocated) */
};

/* A QEMU (rdmacm-mux protocol) socket for one port. */
struct qemu_socket_spec {
	char port[64]; /* port name, as --port/--sim-port made it */
	char path[108];
};

/*
 * Strings point into argv or into the file's JSON (kept in file).  The
 * _Atomic fields are the limits a reload changes while other threads read
 * them; everything else is fixed once the daemon runs.
 */
struct mux_config {
	const char *config_path; /* "none": no file */
	int config_named;        /* given, so it must exist */
	int file_read;           /* config_path was read (or tried) */
	int check_config, show_help, show_version;
	json_t *file;
	const char *socket_path;
	const char *status_path;
	const char *sim_fabric;   /* NULL: a private directory */
	const char *run_dir;      /* real ports' locks */
	const char *state_path;   /* connection state; NULL: none */
	unsigned resume_grace_ms; /* for clients of a previous daemon */
	const char *policy_path;  /* NULL: the default policy */
	const char *admin_path;   /* NULL: no admin socket */
	mode_t socket_mode;
	mode_t status_mode;
	uid_t socket_owner; /* (uid_t)-1: the daemon's */
	gid_t socket_group; /* (gid_t)-1: the daemon's */
	gid_t status_group;
	int workers;
	_Atomic unsigned max_clients;
	_Atomic unsigned max_clients_per_uid;
	_Atomic unsigned hello_timeout_ms;
	_Atomic unsigned status_timeout_ms; /* a status reader's time to read */
	_Atomic unsigned max_gids_per_client;
	_Atomic unsigned max_comm_ids_per_client;
	_Atomic unsigned client_outq_max; /* bytes queued to one client */
	_Atomic unsigned poll_us; /* a worker's polling after input; 0: none */
	unsigned inbox_max;       /* messages queued to one worker */
	uint32_t max_payload;
	unsigned handshake_ms;
	unsigned timewait_ms;
	_Atomic unsigned
		max_peer_records; /* unanswered peers' REQs, per port */
	_Atomic unsigned max_peer_records_per_source;
	_Atomic unsigned max_timewait; /* draining entries in all */
	int log_level;                 /* enum log_level */
	const char *log_target; /* auto, stderr, syslog, journal[:PATH] */
	int nports;
	struct port_spec ports[MUX_MAX_PORTS];
	int nqemu;
	struct qemu_socket_spec qemu[MUX_MAX_PORTS];
};

#define CONFIG_MAX_ERRORS 32
struct config_errors {
	int n; /* may exceed CONFIG_MAX_ERRORS */
	char msg[CONFIG_MAX_ERRORS][256];
};

void config_defaults(struct mux_config *cfg);
/* Defaults, then the file (--config, or the default one if it exists),
 * then the command line, which wins.  0, or -EINVAL with every error in
 * errs. */
/* A port's name, as --qemu-socket and the status give it: the sim
 * port's, or DEV:PORT. */
void config_port_name(const struct port_spec *ps, char *buf, size_t len);
int config_load(struct mux_config *cfg, int argc, char **argv,
		struct config_errors *errs);
/* The options of cfg->file (a parsed file named path), in the table's
 * order: what config_load() does with the file. */
int config_apply_json(struct mux_config *cfg, const char *path,
		      struct config_errors *errs);
void config_free(struct mux_config *cfg);
void config_print_usage(FILE *f);
/* Compares a freshly loaded configuration with the running one: each
 * option that differs is reported to say(), and those a reload may change
 * are copied into live (applied = 1).  Returns how many differ. */
int config_reload(struct mux_config *live, struct mux_config *fresh,
		  void (*say)(void *arg, const char *name, const char *was,
			      const char *now, int applied),
		  void *arg);

/* ---- stats.c: daemon-wide counters ---------------------------------- */

/* The router's verdicts first (in their order, DROP_x for ROUTER_x),
 * then what befalls a delivered MAD. */
/* clang-format takes the list for the start of a statement. */
/* clang-format off */
enum drop_reason {
#define DROP_REASON_ENUM(name, text) DROP_##name,
	ROUTER_VERDICTS(DROP_REASON_ENUM)
#undef DROP_REASON_ENUM
	DROP_CLIENT_GONE,       /* owner disconnected while in flight */
	DROP_CLIENT_QUEUE_FULL, /* owner's output queue above its limit */
	DROP_WORKER_QUEUE_FULL,
	DROP_MAX
};
/* clang-format on */

const char *stats_drop_reason_name(enum drop_reason r);
/* The drop a router verdict other than ROUTER_DELIVER counts as. */
enum drop_reason stats_drop_for_verdict(enum router_verdict v);

/* Why an outbound MAD was refused (each has its own errno, see
 * rdmacm-mux-protocol(7)). */
enum refusal {
	REFUSE_NOT_CM,      /* EBADMSG: class or class version */
	REFUSE_METHOD,      /* EOPNOTSUPP: not Send */
	REFUSE_ATTRIBUTE,   /* ENOMSG: not a CM message attribute */
	REFUSE_SIZE,        /* EMSGSIZE */
	REFUSE_PORT,        /* ENODEV or EACCES (policy) */
	REFUSE_PORT_DOWN,   /* ENETDOWN */
	REFUSE_SOURCE_GID,  /* EADDRNOTAVAIL */
	REFUSE_INNER_GID,   /* EPERM: a GID or address inside the MAD */
	REFUSE_STATE,       /* EPROTO: not valid in the connection's state */
	REFUSE_DESTINATION, /* EDESTADDRREQ: QEMU client, no peer known */
	REFUSE_COMM_ID,     /* ENOENT / EINVAL */
	REFUSE_PKEY_INDEX,  /* ERANGE */
	REFUSE_RATE,        /* EAGAIN */
	REFUSE_QUOTA,       /* ENOSPC */
	/* The address block is QP1 CM traffic's, nothing else: */
	REFUSE_REMOTE_QPN, /* EPROTOTYPE: not QP1 */
	REFUSE_QKEY,       /* EKEYREJECTED: not the GSI Q_Key */
	REFUSE_DEST_GID,   /* EDESTADDRREQ zero, ENETUNREACH multicast */
	REFUSE_SL_HOP,     /* EDOM: SL above 15, or hop limit 0 */
	REFUSE_QP_OWNER,   /* EPERM: names a QP its client does not own */
	REFUSE_MAX
};

struct mux_stats {
	_Atomic uint64_t mads_in[CM_IDX_MAX];
	_Atomic uint64_t mads_out[CM_IDX_MAX];
	_Atomic uint64_t drops[DROP_MAX];
	_Atomic uint64_t tx_refused;
	_Atomic uint64_t refusals[REFUSE_MAX];
	_Atomic uint64_t clients_refused_policy;
	_Atomic uint64_t admin_actions;
	_Atomic uint64_t tx_errors;
	_Atomic uint64_t clients_accepted;
	_Atomic uint64_t clients_refused;
	_Atomic uint64_t protocol_errors;
	_Atomic uint64_t class_requests_answered; /* CM Get/Set */
	_Atomic uint64_t answers[CONN_ANS_MAX];   /* sent on our own */
	_Atomic uint64_t answers_failed;
	_Atomic uint64_t answers_limited; /* over a source's budget */
	_Atomic uint64_t answers_paced;   /* owed, waited for their budget */
	_Atomic uint64_t losses_reported; /* mad_lost events */
	_Atomic uint64_t clients_refused_uid_limit;  /* --max-clients-per-uid */
	_Atomic uint64_t clients_refused_rule_limit; /* a rule's max_clients */
	_Atomic uint64_t hello_timeouts;      /* closed without hello in time */
	_Atomic uint64_t resumes;             /* sessions taken over */
	_Atomic uint64_t resumes_refused;     /* wrong token, uid, unknown */
	_Atomic uint64_t status_queries;      /* answers sent */
	_Atomic uint64_t status_refused;      /* over the connection limits */
	_Atomic uint64_t status_dropped_slow; /* did not read in time */
	_Atomic uint64_t requests_paced; /* a client over its request rate */
	_Atomic uint64_t qemu_resets; /* a QEMU guest's GID registered again */
	_Atomic uint64_t qemu_adopted_gids; /* registered at a send (above) */
	_Atomic uint64_t sends_busy; /* a client's PORT_CLIENT_SENDS_MAX */
};

json_t *stats_to_json(struct mux_stats *st);

/* ---- lockfile.c: one daemon per socket and per port ------------------ */

struct lockfile {
	int fd; /* -1: not held */
	char path[256];
};

/* 0, or -EADDRINUSE (another daemon holds it), or another negative errno;
 * says why it failed, naming what the lock guards. */
int lockfile_take_or_say(struct lockfile *lf, const char *path,
			 const char *what);
void lockfile_release(struct lockfile *lf);

/* ---- mux.c: the daemon object ------------------------------------------- */

struct mux {
	struct mux_config cfg;
	const struct mux_delivery *deliver; /* wired by main.c */
	int argc;                           /* kept to read the options again */
	char **argv;
	struct timespec started;
	struct mux_stats stats;
	struct clients *clients;
	struct router *router;
	struct qp_registry *qp_registry; /* the simulated ports' QPs */
	int nports;
	struct port *ports; /* MUX_MAX_PORTS of them */
	int nworkers;
	struct worker *workers[MUX_MAX_WORKERS];
	_Atomic unsigned next_worker;
	struct portio *portio;
	struct client_listener *listener;
	int nqemu_listeners;
	struct client_listener *qemu_listeners; /* MUX_MAX_PORTS of them */
	struct status_server *status;
	struct listen_fds *listen_fds; /* socket activation */
	char sim_fabric[256];
	int sim_fabric_owned;
	pthread_mutex_t policy_lock;
	struct policy *policy;
	struct log_ratelimit accept_rl; /* main thread only */
	/* Lines a client can cause once per connection, from any thread
	 * (refusals of admission, hello timeouts, malformed requests, a
	 * session resumed or closed for not reading): one budget for all,
	 * so that reconnecting buys no one more. */
	pthread_mutex_t refusal_lock;
	struct log_ratelimit refusal_rl;
	struct unix_listener *admin_listener;
	TAILQ_HEAD(, admin_conn) admin_conns;
	/* Administrators' captures (capture.c): how many run, and they. */
	_Atomic int capturing;
	struct capture_set *captures;
};

/* The daemon object and the parts it holds, zeroed; NULL without
 * memory.  mux_free() frees what mux_new() made. */
struct mux *mux_new(void);
void mux_free(struct mux *mux);
/* SIGHUP: the configuration file and the command line again; the limits,
 * log level and policy that changed apply, the rest is logged as waiting
 * for a restart.  Errors keep the running configuration. */
void mux_reload(struct mux *mux);
/* The router's limits as cfg sets them (no state file). */
void mux_router_limits(const struct mux_config *cfg, struct router_limits *lim);
/* The policy in force (a reference: policy_unref() it). */
struct policy *mux_policy_get(struct mux *mux);
/* Read the policy file again; the new one applies to clients that connect
 * from now on.  0, or -errno with err set. */
int mux_policy_reload(struct mux *mux, char *err, size_t errlen);

uint64_t mux_now_ms(void);
/* Any thread: may a refusal of admission be logged now (see accept_rl)? */
int mux_refusal_log_allowed(struct mux *mux, uint64_t *suppressed);
struct port *mux_port_by_name(struct mux *mux, const char *name);

/* ==== The inbound corridor ============================================ */

/* ---- port_umad.c: a real port, through umad and verbs ------------------ */

extern const struct port_ops port_umad_ops;

/* ---- port_ud.c: a umad port's clients' MADs from UD QPs (opt-in) ------- */

struct port_ud;
/* nlanes UD QPs on dev's port_num with the GSI Q_Key: 0 with *out, or
 * -errno (-EPERM: the Q_Key needs CAP_NET_RAW). */
int port_ud_open(struct port_ud **out, const char *dev, int port_num,
		 unsigned nlanes);
void port_ud_close(struct port_ud *u);
/* Lane 1..nlanes (one thread each) sends m from gid_index to its QP: 0
 * once posted, -EOPNOTSUPP for a MAD this path does not take (umad
 * does), or -errno. */
int port_ud_send(struct port_ud *u, unsigned lane, const struct proto_mad *m,
		 int gid_index);
/* Any thread: a neighbour changed; every lane makes its address handles
 * again. */
void port_ud_forget(struct port_ud *u);
/* Sends the device completed in error, so far. */
uint64_t port_ud_send_errors(const struct port_ud *u);

/* ---- port_sim.c: a simulated port (a unix datagram "fabric") ---------- */

extern const struct port_ops port_sim_ops;
/* The private fabrics (tmp/prefix*) of daemons of this uid that are
 * provably gone (killed, so they could not remove them): removed, and
 * said in the log. */
void port_sim_sweep_fabrics(const char *tmp, const char *prefix);

/* ---- port.c: the port interface -------------------------------------- */

enum port_state { PORT_STATE_DOWN, PORT_STATE_ACTIVE };

/* Sender threads of a port whose send blocks (port_senders.c). */
#define PORT_SENDERS 8

struct port;

struct port_ops {
	const char *kind;
	/* Main thread, before any thread starts. */
	int (*open)(struct port *p, const struct port_spec *spec);
	/* Port thread: arm receive events on base. */
	int (*start)(struct port *p, struct event_base *base);
	/* Any thread. gid_index is the source GID's index in the port's
	 * table, chosen by the daemon.  lane: 0 for the port's own agent,
	 * 1..PORT_SENDERS for sender thread lane - 1, which a port whose
	 * send blocks gives a way out of its own (port_umad.c). */
	int (*send)(struct port *p, const struct proto_mad *m, int gid_index,
		    unsigned lane);
	/* Whether send sleeps (then clients' sends go through sender
	 * threads, port_senders.c). */
	int send_blocks;
	/* Any thread: the index of a GID in the port's table as last read,
	 * of type (a conn_path's gid_type: IBV_GID_TYPE_* + 1; 0 or a type
	 * it is not there as: the preferred RoCE version where it is there
	 * twice), or -ENOENT.  Never does I/O, so it is safe on every hot
	 * path. */
	int (*gid_index)(struct port *p, const struct gid *gid, int type);
	/* Optional, any thread: read the GID table again now (a client
	 * registers an address that may have just appeared). */
	void (*gid_refresh)(struct port *p);
	/* JSON array of the port's GID table. */
	json_t *(*gid_table)(struct port *p);
	/* Entries in the port's P_Key table. */
	int (*pkey_count)(struct port *p);
	/* Port thread, periodically: re-read the state. */
	void (*poll_state)(struct port *p);
	/* Optional, any thread: the task (a thread ID) that created QP qpn
	 * on this port, as qp_owner_nl_query() says it.  Without it the
	 * port has no QPs of its own (simulated), and the clients'
	 * registrations say who owns one (qp_registry). */
	int (*qp_owner)(struct port *p, uint32_t qpn, pid_t *tid);
	/* Optional, any thread, never blocks: whether a send from gid_index
	 * to dgid would wait for the kernel to resolve the destination's
	 * address (RoCE: ARP or neighbour discovery): 1, and the resolution
	 * has been started; 0 when it would not.  The port tells
	 * port_parked_ready() when a destination resolves. */
	int (*dest_wait)(struct port *p, const uint8_t *dgid, int gid_index,
			 uint64_t now_ms);
	/* Any thread: the node GUID, the Local CA GUID the port's REQs and
	 * REPs carry. */
	uint64_t (*node_guid)(struct port *p);
	void (*close)(struct port *p);
};

/* The daemon's own answers (a REJ for a REQ nobody takes, a DREP for an
 * unknown DREQ; and apart, a gone client's goodbyes) per destination GID:
 * a burst, then a steady rate (port_answers.c). */
#define PORT_ANSWER_BUCKETS 1024
#define PORT_ANSWER_BURST 256
#define PORT_ANSWER_PER_S 256

struct port {
	const struct port_ops *ops;
	struct mux *mux;
	unsigned index;
	char name[64];
	_Atomic int state;
	int roce; /* Ethernet link layer: rdma_cm addresses are GIDs */
	void *priv;
	struct lockfile lock; /* one daemon per port */
	_Atomic uint64_t rx, tx, tx_errors, rx_errors;
	_Atomic uint64_t wire_dropped; /* sim: a receiver's queue was full */
	_Atomic uint64_t gid_table_changes;
	struct port_senders *senders; /* when its send blocks */
	/* MADs waiting for their destination's address (port_parked.c). */
	struct port_parked *parked;
	_Atomic uint64_t parked_now, parked_total, parked_expired;
	/* The daemon's own answers (port_answers.c): each source's budget
	 * for answers to what it sent, each destination's for what it is
	 * owed (a gone client's goodbyes), buckets by a hash keyed with
	 * answer_key; owed answers beyond their budget wait on owed. */
	_Atomic uint64_t answer_budget[PORT_ANSWER_BUCKETS];
	_Atomic uint64_t owed_budget[PORT_ANSWER_BUCKETS];
	uint64_t answer_key;
	pthread_mutex_t owed_lock;
	TAILQ_HEAD(port_owed, port_send) owed;
	struct event *owed_ev; /* on the port thread */
};

json_t *port_json(struct port *p, int with_gids);

/* How the router sends the MADs it answers with (port.c, its send
 * port_answers.c's). */
extern const struct router_ops port_router_ops;

/* Called by port implementations on the port thread; gid_type: the type
 * of the GID it arrived on (IBV_GID_TYPE_* + 1), 0 when unknown. */
void port_input(struct port *p, struct proto_mad *m, int gid_type);
/* A client's MADs on their way out of a port whose send blocks (queued,
 * or waiting for their destination's address), at most. */
#define PORT_CLIENT_SENDS_MAX 256
/* A client's MAD out on p from gid_index, counted.  A port whose send
 * blocks takes it through its sender threads: -EINPROGRESS, and the
 * verdict on request rid reaches the client later
 * (mux->deliver->send_done); -EAGAIN when the client has
 * PORT_CLIENT_SENDS_MAX on their way (or a thread's queue is full).
 * Otherwise 0 or the send's error. */
int port_send_client_mad(struct port *p, struct client_info *ci,
			 const struct proto_mad *m, int gid_index,
			 uint32_t rid);
void port_set_state(struct port *p, enum port_state st);
/* The port's GID table changed (or the device came or went): count it,
 * re-check the registrations and tell the clients. */
void port_gids_changed(struct port *p);
const char *port_state_name(int st);

struct portio;
struct portio *port_io_start(struct mux *mux);
/* Stop receiving (no more inbound MADs reach the workers). */
void port_io_stop(struct portio *pio);
/* Close the ports; after the workers have stopped sending. */
void port_io_free(struct portio *pio);

/* ---- port_answers.c: the MADs the daemon sends on its own --------------- */

/* Its key and owed list, before any thread answers. */
void port_answers_init(struct port *p);
/* The port thread's event that sends what is owed, on base. */
int port_answers_start(struct port *p, struct event_base *base);
/* A router_ops send: the answer, within its budget; one a local event
 * owes a peer waits for its budget instead (answers.paced). */
void port_answers_send(void *arg, enum conn_answer why, unsigned port,
		       const struct conn_path *path, const uint8_t *mad);
/* A sent answer's verdict (rc 0 or the send's error), counted. */
void port_answers_count(struct port *p, int rc);
/* Port thread: the owed answers whose destinations have budget again go
 * out, in order; how many. */
unsigned port_answers_drain(struct port *p, uint64_t now_ms);
/* The port thread and the workers have stopped: what is still owed is
 * dropped (counted failed: the daemon is stopping), its event freed. */
void port_answers_free(struct port *p);

/* ---- delivery.c: from the ports to the sessions, and workers' inboxes -- */

/*
 * How the ports hand what they receive and decide to the clients.  It has
 * one implementation, delivery_to_sessions below, which main.c wires in
 * (mux->deliver); it is a table only to keep the modules' calls a line:
 * the outbound corridor calls port.c (session -> outbound -> port), so a
 * direct call from port.c to delivery.c (-> session) would close a cycle,
 * which scripts/check-house.sh refuses.  Any thread.
 */
struct mux_delivery {
	/* A routed inbound MAD for ci (held by the caller): 0, or -ENOBUFS
	 * when its receiver could not take it, or another negative errno. */
	int (*mad)(struct mux *mux, struct client_info *ci,
		   const struct proto_mad *m);
	/* An inbound MAD was dropped at its receiver's full queue: tell its
	 * sender if it is a client of ours. */
	void (*lost)(struct mux *mux, const struct proto_mad *m);
	/* The verdict on ci's deferred send of request rid. */
	void (*send_done)(struct mux *mux, struct client_info *ci, uint32_t rid,
			  int rc);
	/* A JSON event (text) for every client. */
	void (*broadcast)(struct mux *mux, const char *text);
};

extern const struct mux_delivery delivery_to_sessions;
/* The session layer on a worker: its inbox's messages. */
extern const struct worker_ops delivery_worker_ops;

/* ---- session.c: one client connection on its worker ------------------- */

struct session;
struct session_set;

void session_start(struct worker *w, int fd, struct client_info *info);
/* Deliveries return 0, or -ENOBUFS when the client's queue is full
 * (the MAD is dropped and counted), or another negative errno. */
int session_deliver_mad(struct worker *w, uint64_t client_id,
			const struct proto_mad *m);
/* A MAD routed on worker self for ci, another worker's client (QEMU's
 * protocol excepted): queued on its outlet and written at the end of
 * self's pass.  The caller holds ci. */
int session_deliver_from(struct worker *self, struct client_info *ci,
			 const struct proto_mad *m);
/* The same from a thread that is no worker (a port's): written at once. */
int session_deliver_now(struct mux *mux, struct client_info *ci,
			const struct proto_mad *m);
/* Tell a client of the MADs of its lost at receivers (mad_lost); last
 * describes the latest (JSON object text: port, attr, GIDs). */
void session_note(struct worker *w, uint64_t client_id, const char *last);
/* Another thread left output on the client's socket: the owner takes
 * over writing it. */
void session_flush_client(struct worker *w, uint64_t client_id);
/* The verdict on a MAD request whose send was deferred: by its worker,
 * or (a client of our protocol) from the thread that sent it. */
void session_send_done(struct worker *w, uint64_t client_id, uint32_t rid,
		       int rc);
int session_send_done_now(struct mux *mux, struct client_info *ci, uint32_t rid,
			  int rc);
void session_broadcast_event(struct worker *w, const char *text);
void session_close_all(struct worker *w);
void session_kick(struct worker *w, uint64_t client_id, const char *why);
struct session_set *session_set_new(struct mux *mux, unsigned worker,
				    struct event_base *base);
void session_set_free(struct session_set *set);

/* ---- outlet.c: a client's socket output, shared between threads ------- */

struct outlet {
	pthread_mutex_t lock;
	int fd;               /* -1 until the session starts */
	int open;             /* taking output */
	size_t max_msg_write; /* QEMU: one message per write; else 0 */
	uint8_t *buf;         /* what is queued: buf[head .. head + len) */
	size_t head, len, cap;
	size_t inflight;  /* what a thread writes, outside the lock (0: none) */
	int owner_missed; /* the owner flushed while it wrote */
	int owner_asked;  /* its worker was asked to flush */
	_Atomic size_t queued;     /* len + inflight, for the status */
	_Atomic uint64_t flushers; /* workers that will flush it (bit each) */
};

void outlet_init(struct outlet *o);
/* The session started: output goes to fd, which the outlet now owns. */
int outlet_open(struct outlet *o, int fd, size_t max_msg_write);
/* Queue a frame (header and payload) if it fits below max (0: no limit);
 * -ENOBUFS when it does not, -EPIPE once closed. */
int outlet_append(struct outlet *o, size_t max, const void *hdr, size_t hlen,
		  const void *payload, size_t len);
/* QEMU's messages: written at once when nothing is queued (1), else
 * queued (0). */
int outlet_write_or_queue(struct outlet *o, const void *msg, size_t len);
/* Write what is queued as far as the socket takes it; *left is what
 * remains.  A writer other than the owner gets *ask_owner set the first
 * time it leaves bytes behind, or when the owner flushed while it wrote:
 * the owner must flush again.  One thread writes at a time, without the
 * lock held; a flush that finds another writing leaves it to that one
 * (*left 0). */
int outlet_flush(struct outlet *o, int owner, size_t *left, int *ask_owner);
size_t outlet_len(struct outlet *o);
/* Worker w will flush o at the end of its pass; 1 if it was not yet
 * going to (the caller then lists it).  Release before flushing. */
int outlet_claim_flush(struct outlet *o, unsigned worker);
void outlet_release_flush(struct outlet *o, unsigned worker);
/* The session ended: nothing more is queued or written. */
void outlet_close(struct outlet *o);
/* With the client record: frees the queue, closes the descriptor. */
void outlet_fini(struct outlet *o);

/* ---- worker.c: worker threads, one event base and inbox each ----------- */

enum worker_msg_type {
	WMSG_NEW_CLIENT,
	WMSG_MAD_IN,
	WMSG_EVENT,     /* JSON event text to every ready session */
	WMSG_KICK,      /* admin: disconnect client_id */
	WMSG_FLUSH,     /* client_id's socket has output left */
	WMSG_NOTE,      /* JSON event text for client_id */
	WMSG_SEND_DONE, /* verdict (rc) on client_id's MAD request rid */
	WMSG_STOP,
};

struct worker_msg {
	TAILQ_ENTRY(worker_msg) link;
	enum worker_msg_type type;
	uint64_t client_id;
	int fd;
	struct client_info *info;
	char *text;
	uint32_t rid;
	int rc;
	struct proto_mad mad;
};

struct worker;

/*
 * What a worker runs.  One implementation, delivery_worker_ops
 * (delivery.c: each inbox message to the session layer), which main.c
 * passes to worker_pool_start(); a table because the sessions call the
 * worker (its base, its index, its inbox), so a call back from worker.c
 * into session.c would be a cycle.
 */
struct worker_ops {
	/* Before its thread starts: the state its messages are for. */
	void *(*attach)(struct worker *w);
	/* Each message of the inbox, on the worker's thread (WMSG_STOP
	 * too, after which the loop ends). */
	void (*handle)(struct worker *w, struct worker_msg *m);
	/* Once the thread has ended: each message it never took, then its
	 * state. */
	void (*discard)(struct worker *w, struct worker_msg *m);
	void (*detach)(struct worker *w, void *state);
};

int worker_pool_start(struct mux *mux, const struct worker_ops *ops);
void worker_pool_stop(struct mux *mux);
/* A client's inbound MADs in its worker's inbox, at most: each client's
 * share, so that a flood at one guest's GIDs costs the worker's other
 * clients none of theirs (the inbox bounds only events as a whole). */
#define WORKER_CLIENT_INBOX_MADS 1024
/* Queue a message; the worker owns it from here on.  -ENOBUFS when the
 * inbox is full of events (only EVENT is bounded so: MAD_IN by its
 * client's share, delivery.c; the others are the daemon's own). */
int worker_post(struct worker *w, struct worker_msg *msg);
/* A zeroed message of type for client_id (NULL without memory). */
struct worker_msg *worker_msg_new(enum worker_msg_type type,
				  uint64_t client_id);
struct event_base *worker_base(struct worker *w);
unsigned worker_index(struct worker *w);
struct mux *worker_mux(struct worker *w);
uint64_t worker_inbox_dropped(struct worker *w);
/* Input arrived for w (on its thread): worker_loop keeps polling. */
void worker_note_input(struct worker *w);
/* What ops->attach made for w. */
void *worker_state(struct worker *w);
/* The worker running the calling thread, or NULL. */
struct worker *worker_self(void);

/* ==== The outbound corridor =========================================== */

/* ---- outbound.c: a client's MAD, checked and sent ------------------- */

/* Validate and send one outbound MAD; 0 or negative errno, *why set.
 * A port whose send blocks takes it through its sender threads:
 * -EINPROGRESS, and the verdict on request rid comes later
 * (session_send_done; a QEMU client's is counted only). */
int outbound_send_mad(struct mux *mux, struct client_info *ci,
		      const struct proto_mad *m, uint32_t rid,
		      const char **why);
/* Whether ci's process owns QP qpn on port (the kernel says on a real
 * port, the registrations on a simulated one): 0, or -EPERM with *why. */
int outbound_qp_fault(struct mux *mux, struct client_info *ci,
		      struct port *port, uint32_t qpn, const char **why);

/* ---- qemu_client.c: QEMU's rdmacm-mux protocol, both directions ------- */

struct qemu_client;
struct evbuffer;

/* A session of QEMU's protocol begins: its hello, by the policy rule its
 * identity selects (and the previous daemon's GIDs and connections when
 * it is the same process).  0, or -errno (refused, logged); *out is to
 * be freed either way. */
int qemu_client_open(struct mux *mux, struct client_info *ci,
		     struct qemu_client **out);
void qemu_client_free(struct qemu_client *q);
/* Whole requests from in, at most budget, each answered on the client's
 * outlet, until its output is full: how many were taken; *close set when
 * the session must end (a malformed request). */
int qemu_client_read(struct qemu_client *q, struct evbuffer *in, int budget,
		     int *close);
/* An inbound MAD for the client: 1 when output waits in its outlet (the
 * session flushes it), 0, -ENOBUFS (its queue is full: dropped and
 * counted) or -EMSGSIZE. */
int qemu_client_deliver(struct qemu_client *q, const struct proto_mad *m);
/* Its outlet is empty: the MADs that waited go out; 1 when some wait in
 * the outlet again. */
int qemu_client_pump(struct qemu_client *q);
/* Bytes of inbound MADs waiting (0 for NULL). */
size_t qemu_client_pending(const struct qemu_client *q);
void qemu_client_drop_pending(struct qemu_client *q);

/* ---- qp_owner.c: which process owns a QP -------------------------------- */

/* RDMA netlink's resource tracking, for a real port's QPs: one socket,
 * one query at a time. */
struct qp_owner_nl {
	struct mnl_socket *nl;
	unsigned portid;
	uint32_t seq;
	pthread_mutex_t lock;
};

int qp_owner_nl_open(struct qp_owner_nl *q);
void qp_owner_nl_close(struct qp_owner_nl *q);
/* The task (thread ID) that created QP qpn on a device's port: 0, or
 * -ENOENT (no such QP), -EAGAIN (the QP is on another port, or on none
 * yet: in RESET), -ESRCH (a kernel QP, or its creator has exited),
 * -EINVAL (no such device or port), another -errno. */
int qp_owner_nl_query(struct qp_owner_nl *q, uint32_t dev_index,
		      uint32_t port_num, uint32_t qpn, pid_t *tid);
/* Whether thread tid belongs to process pid. */
int qp_owner_task_of(pid_t pid, pid_t tid);

/* ---- neigh_nl.c: the kernel's neighbour table, as a RoCE send sees it -- */

#define NEIGH_NL_CACHE 1024

struct neigh_nl_cached {
	uint8_t dgid[16];
	int ifindex;
	uint64_t until_ms; /* resolved, as of a moment ago */
};

struct neigh_nl {
	pthread_mutex_t lock; /* q and the cache */
	struct mnl_socket *q; /* queries */
	unsigned q_portid;
	uint32_t seq;
	struct mnl_socket *ev; /* neighbour events, read on the port thread */
	int kick_denied;       /* no CAP_NET_ADMIN: said once */
	struct neigh_nl_cached cache[NEIGH_NL_CACHE];
};

int neigh_nl_open(struct neigh_nl *nl);
void neigh_nl_close(struct neigh_nl *nl);
/* Whether a RoCE send from sgid out of netdev ifindex to dgid would
 * wait for the destination's MAC: 1, and its resolution has been
 * started; 0 when it would not (resolved, local, multicast, or the
 * kernel would refuse the send at once).  Never blocks. */
int neigh_nl_wait(struct neigh_nl *nl, const uint8_t dgid[16],
		  const uint8_t sgid[16], int ifindex, uint64_t now_ms);
/* The socket the kernel's neighbour events arrive on. */
int neigh_nl_event_fd(struct neigh_nl *nl);
/* Read them: ready(arg, gid) for each neighbour now resolved, the GID
 * its address is (IPv4 as ::ffff:a.b.c.d), ready(arg, NULL) when events
 * were lost. */
void neigh_nl_read_events(struct neigh_nl *nl,
			  void (*ready)(void *arg, const uint8_t *gid),
			  void *arg);

/* ---- qp_registry.c: a simulated port's QPs, as its clients register them */

/* (port, QPN) -> the process that registered it first, while one of
 * its connections that registered it lasts.  Locked inside. */
struct qp_registry;

/* What a client may hold registered on simulated ports. */
#define MUX_QPNS_PER_CLIENT 4096

struct qp_registry *qp_registry_new(void);
void qp_registry_free(struct qp_registry *r);
/* 0 (also when pid holds it already), -EADDRINUSE (another process
 * does), -ENOSPC (client holds max_per_client), -ENOMEM. */
int qp_registry_add(struct qp_registry *r, unsigned port, uint32_t qpn,
		    pid_t pid, uint64_t client, unsigned max_per_client);
/* client's registration goes: 0, -ENOENT (it has none), or -EACCES
 * (another process holds the QPN). */
int qp_registry_remove(struct qp_registry *r, unsigned port, uint32_t qpn,
		       pid_t pid, uint64_t client);
void qp_registry_drop_client(struct qp_registry *r, uint64_t client);
/* The process that holds (port, qpn): 0 with *pid, or -ENOENT. */
int qp_registry_owner(struct qp_registry *r, unsigned port, uint32_t qpn,
		      pid_t *pid);

/* ---- port_senders.c: sender threads for ports whose send blocks ------- */

/* A client's MAD on its way out through a sender thread. */
struct port_send {
	TAILQ_ENTRY(port_send) link;
	struct proto_mad m; /* as it goes on the wire */
	int gid_index;
	struct client_info *ci; /* held until the verdict is posted; NULL:
				 * the daemon's own answer */
	uint32_t rid;           /* the request to answer */
	enum conn_answer why;   /* the daemon's own answer: which */
	uint32_t key;           /* its sender thread's (port_senders_queue) */
};

TAILQ_HEAD(port_send_list, port_send);

struct port_senders;

/* What became of a queued send: rc 0 or the send's error, or -ECANCELED
 * for one never made (the daemon is stopping).  It frees ps. */
typedef void (*port_send_done_fn)(struct port *p, struct port_send *ps, int rc);

int port_senders_start(struct port *p, unsigned nthreads, unsigned queue_max,
		       port_send_done_fn done);
/* Queue ps (the pool owns it from here); key picks the thread, so equal
 * keys keep their order.  -EAGAIN when that thread's queue is full
 * (unless beyond_max: what is owed to peers is bounded elsewhere),
 * -ESHUTDOWN once the pool stopped (ps stays the caller's). */
int port_senders_queue(struct port *p, struct port_send *ps, uint32_t key,
		       int beyond_max);
/* Sends that waited for their destination (port_parked.c), in their
 * order, back at the heads of their threads' queues, beyond the limit
 * (they were admitted): each thread takes its share in one go, so that
 * none sends a later one first.  Empties list. */
void port_senders_requeue(struct port *p, struct port_send_list *list);
/* A queued send that will not be made: its verdict rc. */
void port_senders_fail(struct port *p, struct port_send *ps, int rc);
/* Join the threads; queued sends are dropped, later ones refused.
 * Before the workers stop, which may still queue meanwhile. */
void port_senders_stop(struct port *p);
/* After the workers stopped: nothing can queue any more. */
void port_senders_free(struct port *p);

/* ---- port_parked.c: MADs waiting for their destination's address ------ */

/* How long a MAD waits for its destination to resolve: the kernel's own
 * wait in a umad write (rdma_addr_find_l2_eth_by_grh()). */
#define PORT_PARKED_WAIT_MS 1000

struct port_parked;

/* Before the port's senders start; key: the bucket hash's. */
int port_parked_init(struct port *p, uint64_t key);
/* Any thread: port_senders_queue(), unless ps's destination is not
 * resolved yet: then ps waits here (0, the table owns it). */
int port_parked_queue(struct port *p, struct port_send *ps, uint32_t key,
		      int beyond_max);
/* Port thread: gid (NULL: any) may have resolved; what waited for it
 * goes, in order, and what waited too long fails (-EHOSTUNREACH). */
void port_parked_ready(struct port *p, const uint8_t *gid, uint64_t now_ms);
/* Port thread, periodically: every destination asked again. */
void port_parked_tick(struct port *p, uint64_t now_ms);
/* After the senders stopped: what waits is dropped (-ECANCELED). */
void port_parked_free(struct port *p);

/* ==== Beside the corridors ============================================ */

/* ---- capture.c: the MADs and their verdicts, for an administrator ----- */

/* Captures at once, at most. */
#define CAPTURE_SESSIONS 4

struct capture;
struct capture_set;
struct bufferevent;
typedef void (*capture_end_fn)(void *arg);

int capture_set_init(struct mux *mux);
void capture_set_free(struct mux *mux);
/* The taps' test: nothing else is spent while nobody captures.  Built
 * with MUX_NO_CAPTURE_TAPS (bench_relay's baseline daemon, the Makefile's
 * TAPS_SRC), the compiler drops the taps: what "nothing" is measured
 * against. */
#ifdef MUX_NO_CAPTURE_TAPS
static inline int capture_on(struct mux *mux)
{
	(void)mux;
	return 0;
}
#else
static inline int capture_on(struct mux *mux)
{
	return atomic_load_explicit(&mux->capturing, memory_order_relaxed);
}
#endif
/* Any thread, where capture_on(): m as on the wire (out: sent by the
 * daemon), whose client ci (or NULL), and what became of it. */
void capture_mad(struct mux *mux, int out, const struct port *p,
		 const struct proto_mad *m, const struct client_info *ci,
		 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Main thread: capture what req matches to bev, its count of MADs at
 * most, for its seconds at most; end(end_arg) when it is over (its last
 * line written).  -EBUSY with CAPTURE_SESSIONS already running. */
int capture_start(struct mux *mux, struct event_base *base,
		  struct bufferevent *bev,
		  const struct proto_capture_request *req, capture_end_fn end,
		  void *end_arg, struct capture **out);
/* Main thread: a capture that has not ended ends, told to nobody. */
void capture_free(struct capture *c);
/* "client 3", "VM \"x\"", ...: for the log and the reply. */
void capture_filter_describe(const struct proto_capture_request *f, char *buf,
			     size_t len);

/* ---- requests.c: control operations ------------------------------------ */

/* Handle one JSON request from a session; returns the reply (never NULL)
 * and sets *close_after when the connection must end once it is sent. */
json_t *requests_handle(struct mux *mux, struct client_info *ci,
			int *hello_done, json_t *req, int *close_after);
/* Register a GID for a client (shared: with other clients that may
 * share, rdmacm-mux-protocol(7)): the policy's ports, GIDs and limit, the
 * port's table unless in_table_optional, first come first served.  0 with
 * *idx (-1 when not in the table yet), or a negative errno with text. */
int requests_gid_register(struct mux *mux, struct client_info *ci,
			  struct port *port, const struct gid *gid, int shared,
			  int in_table_optional, int *idx, char *text,
			  size_t len);

/* ---- clients.c: who is connected, for routing hand-off and status ---- */

struct client_counters {
	_Atomic uint64_t requests;
	_Atomic uint64_t errors;    /* error replies sent */
	_Atomic uint64_t mads_sent; /* accepted for the wire */
	_Atomic uint64_t mads_delivered;
	_Atomic uint64_t mads_dropped; /* to this client, queue full */
	_Atomic uint64_t mads_lost;    /* from it, dropped at a receiver here */
	_Atomic uint64_t malformed;
	_Atomic uint64_t qemu_pending_bytes; /* MADs waiting for QEMU */
	_Atomic uint64_t sends_busy; /* refused: PORT_CLIENT_SENDS_MAX */
};

struct client_info {
	RB_ENTRY(client_info) link;
	uint64_t id;
	unsigned worker;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	time_t connected;
	char name[MUX_NAME_MAX + 1];
	int qemu_port; /* QEMU's protocol on this port, or -1 */
	struct client_counters ctr;
	_Atomic unsigned refs;            /* the table's, and each borrower's */
	_Atomic int loss_note_posted;     /* a mad_lost report is on its way */
	_Atomic unsigned sends_in_flight; /* port_send_client_mad() */
	_Atomic unsigned inbox_mads;      /* in its worker's inbox (QEMU's) */
	struct outlet out;
	/* Set at hello and used only on the client's worker thread. */
	struct policy *pol;
	const struct policy_rule *rule;
	struct token_bucket tb;
};

struct uid_count;
struct uid_log;

struct clients {
	pthread_mutex_t lock;
	RB_HEAD(client_tree, client_info) tree;
	RB_HEAD(uid_count_tree, uid_count) by_uid;
	RB_HEAD(uid_log_tree, uid_log) uid_logs;
	unsigned nuid_logs;
	struct log_ratelimit uid_log_overflow;
	unsigned count;
	uint64_t next_id;
};

void clients_init(struct clients *c);
void clients_fini(struct clients *c);
/* Adds a client; -EBUSY above max, -EUSERS above max_per_uid of the
 * same uid.  The record is owned by the table. */
int clients_add(struct clients *c, unsigned max, unsigned max_per_uid,
		pid_t pid, uid_t uid, gid_t gid, unsigned worker, int qemu_port,
		struct client_info **out);

void clients_remove(struct clients *c, uint64_t id);
/* May a line a client's request caused be logged now?  Within its uid's
 * budget (5 lines, then one a second), which outlives its clients so that
 * reconnecting buys no tenant a new one, and the daemon's (*suppressed:
 * the lines held back of that uid and of all). */
int clients_log_allowed(struct mux *mux, const struct client_info *ci,
			uint64_t *suppressed);
unsigned clients_count(struct clients *c);
/* Worker index of a live client, or -ENOENT. */
int clients_worker_of(struct clients *c, uint64_t id);
/* A live client, held until clients_put (its record and outlet stay
 * valid after it leaves the table); NULL if there is none. */
struct client_info *clients_get(struct clients *c, uint64_t id);
void clients_put(struct client_info *ci);
/* One more hold on a record the caller already holds. */
struct client_info *clients_hold(struct client_info *ci);
/* Every client for the status, each with its newest conns_max
 * connections; NULL when out of memory. */
json_t *clients_json(struct clients *c, struct router *r, unsigned conns_max,
		     unsigned conns_total);
/* At hello: the name the client gave and the policy rule it runs under
 * (the client_info takes over the reference to pol), or -EUSERS (and pol
 * released) when the rule's max_clients already run under an equal rule
 * of any generation of the policy. */
int clients_set_hello(struct clients *c, struct client_info *ci,
		      const char *name, struct policy *pol,
		      const struct policy_rule *rule);

/* ---- unix_listener.c: the daemon's listening sockets ------------------ */

/* A listening unix socket whose accepting pauses while the process is out
 * of descriptors; accept(l, fd, sa, salen, arg) gets each connection. */
struct unix_listener {
	struct evconnlistener *lev;
	struct event *resume;
	const char *path;     /* unlinked on close */
	struct lockfile lock; /* PATH.lock */
	int given;            /* systemd's: the path is not ours */
	evconnlistener_cb accept;
	void *arg;
	unsigned pause_ms;       /* the last pause; 0 after an accept */
	uint64_t short_since_ms; /* out of descriptors since; 0: not */
};

/* Bind PATH with MODE (and OWNER/GROUP unless -1) and listen on BASE, or
 * listen on given (>= 0: a socket systemd bound to PATH, taken over);
 * 0 or negative errno, logged. */
int unix_listener_open(struct unix_listener *ul, struct event_base *base,
		       const char *path, mode_t mode, uid_t owner, gid_t group,
		       int given, int backlog, evconnlistener_cb accept,
		       void *arg);
/* The listen backlog for want clients connecting at once: at least 128,
 * at most net.core.somaxconn (which bounds it, said in the log). */
int unix_listener_backlog(unsigned want, const char *path);
/* Stop listening and remove the socket; a no-op if it is not open. */
void unix_listener_close(struct unix_listener *ul);

/* ---- listener.c: the client sockets ----------------------------------- */

/* The v1 client socket and each port's QEMU socket. */
struct client_listener {
	struct mux *mux;
	int qemu_port; /* -1: the v1 socket */
	struct unix_listener ul;
};

int listener_start(struct mux *mux, struct event_base *base);
void listener_stop(struct mux *mux);

/* ---- listen_fds.c: systemd's socket activation ------------------------ */

#define LISTEN_FDS_MAX 8

/* Sockets systemd handed over (socket activation). */
struct listen_fds {
	int n;
	int fd[LISTEN_FDS_MAX]; /* -1 once claimed */
	char name[LISTEN_FDS_MAX][32];
};

/* The handed-over sockets, if they are this process's. */
void listen_fds_take(struct listen_fds *lf);
/* The one for name (FileDescriptorName=) or bound to path, or -1. */
int listen_fds_claim(struct listen_fds *lf, const char *name, const char *path);
void listen_fds_close_unclaimed(struct listen_fds *lf);

/* ---- sdnotify.c: systemd's notify protocol ---------------------------- */

/* A message to systemd ("READY=1", "STATUS=...", ...); 0 and nothing
 * done when not run by it with Type=notify. */
int sdnotify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The watchdog interval systemd asks of this process, or 0. */
uint64_t sdnotify_watchdog_usec(void);

/* ---- status.c: the read-only status socket ----------------------------- */

struct status_server;

/* Binds the status socket (and takes its lock); status_start() starts its
 * thread, once the workers exist.  status_close() stops both, in any
 * state. */
int status_listen(struct mux *mux);
int status_start(struct mux *mux);
void status_close(struct mux *mux);

/* ---- admin.c: the root-only control socket -------------------------- */

int admin_listen(struct mux *mux, struct event_base *base);
void admin_close(struct mux *mux);

#endif
