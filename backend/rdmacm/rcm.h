/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_RDMACM_H
#define RCM_RDMACM_H

/*
 * librdmacm-mux: librdmacm's API (rdma/rdma_cma.h) for the host's own
 * processes, on rdmacm-muxd instead of the kernel's rdma_cm.  See
 * rdmacm-mux-run(1).  One private header, sectioned by file; every
 * function is prefixed by its file's name.
 *
 * One lock (rcm_lib.lock) guards every id, channel and CM endpoint of the
 * process: the API's calls and the library's thread, which reads MADs
 * from the daemon and runs the CM's timers, take it in turn.  It is never
 * held across a blocking call to the daemon or a wait for an event.
 */
#include <pthread.h>
#include <stdint.h>
#include <sys/queue.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "backend/muxbe.h"
#include "common/cm_mad.h"
#include "common/gid.h"

/* ---- cep.c: one CM endpoint (cm.c's states, no I/O) ---------------- */

enum cep_state {
	CEP_IDLE,
	CEP_REQ_SENT,
	CEP_REQ_RCVD,
	CEP_REP_SENT,
	CEP_REP_RCVD,
	CEP_ESTABLISHED,
	CEP_DREQ_SENT,
	CEP_DREQ_RCVD,
	CEP_TIMEWAIT,
	CEP_SIDR_REQ_SENT,
	CEP_SIDR_REQ_RCVD,
	CEP_STATE_MAX
};

enum cep_event {
	CEP_EV_REP,          /* REQ_SENT -> REP_RCVD */
	CEP_EV_RTU,          /* REP_SENT -> ESTABLISHED (mad NULL) */
	CEP_EV_REJ,          /* the peer rejected or gave up */
	CEP_EV_TIMEOUT,      /* REQ, REP or SIDR_REQ unanswered */
	CEP_EV_DREQ,         /* -> DREQ_RCVD */
	CEP_EV_DREP,         /* DREQ_SENT -> TIMEWAIT */
	CEP_EV_DREQ_TIMEOUT, /* DREQ unanswered -> TIMEWAIT */
	CEP_EV_TIMEWAIT_EXIT,
	CEP_EV_SIDR_REP,
};

struct cep_ops {
	void (*send)(void *ctx, const uint8_t *mad);
	/* mad: the message that caused it, NULL for timers. */
	void (*event)(void *ctx, enum cep_event ev, const uint8_t *mad);
};

/* rdma_cm's packet lifetime on RoCE (cma.c's CMA_IBOE_PACKET_LIFETIME)
 * and its CM timing (CMA_CM_RESPONSE_TIMEOUT, CMA_MAX_CM_RETRIES). */
#define CEP_PACKET_LIFETIME 16
#define CEP_CM_RESPONSE_TIMEOUT 20
#define CEP_MAX_CM_RETRIES 15
#define CEP_TIMEWAIT_MS 512

struct cep {
	const struct cep_ops *ops;
	void *ctx;
	enum cep_state state;
	uint32_t local_id;
	uint32_t remote_id;
	uint32_t remote_qpn;
	struct gid remote_gid;
	uint64_t tid;
	uint32_t tid_seq;
	unsigned timeout_ms;
	unsigned max_retries;
	unsigned retries;
	unsigned timewait_ms;
	uint64_t deadline_ms; /* 0: no timer */
	uint8_t last_sent[MAD_SIZE];
	uint64_t retransmissions;
	uint64_t duplicates;
};

const char *cep_state_name(enum cep_state s);
void cep_init(struct cep *c, const struct cep_ops *ops, void *ctx,
	      uint32_t local_id);
/* The caller fills the REQ's body; this sets its header and IDs. */
int cep_send_req(struct cep *c, uint8_t *mad, const struct gid *remote,
		 uint64_t now_ms);
void cep_req_received(struct cep *c, const uint8_t *req, const struct gid *src);
int cep_send_rep(struct cep *c, uint8_t *mad, uint64_t now_ms);
int cep_send_rtu(struct cep *c);
int cep_send_rej(struct cep *c, unsigned reason, const uint8_t *ari,
		 unsigned ari_len, const void *pd, size_t pd_len,
		 uint64_t now_ms);
int cep_send_dreq(struct cep *c, uint64_t now_ms);
int cep_send_drep(struct cep *c, uint64_t now_ms);
int cep_send_sidr_req(struct cep *c, uint8_t *mad, const struct gid *remote,
		      unsigned timeout_ms, unsigned max_retries,
		      uint64_t now_ms);
void cep_sidr_req_received(struct cep *c, const uint8_t *req,
			   const struct gid *src);
int cep_send_sidr_rep(struct cep *c, uint8_t *mad, uint64_t now_ms);
/* The passive side is up without its RTU: the RTU came, or data on the
 * QP did (the kernel's ib_cm_notify(IB_EVENT_COMM_EST)). */
void cep_established(struct cep *c);
/* Any CM message but REQ and SIDR_REQ addressed to this endpoint. */
void cep_input(struct cep *c, const uint8_t *mad, uint64_t now_ms);
void cep_tick(struct cep *c, uint64_t now_ms);
/* What cm_destroy_id() tells the peer, then idle. */
void cep_destroy(struct cep *c, const uint64_t *ca_guid, uint64_t now_ms);

/* ---- lib.c: the process's link to the daemon and the library thread - */

struct rcm_port {
	char name[64];  /* the daemon's port name: "rxe0:1", "sim0" */
	uint16_t index; /* the daemon's port index */
	char dev[64];   /* RDMA device, "" on a simulated port */
	uint8_t port_num;
	int ngids;
	struct gid *gids;          /* the GID table, by index */
	struct ibv_context *verbs; /* opened on first use */
	uint64_t ca_guid;
};

/* A GID this process shares with the others on the host. */
struct rcm_share {
	TAILQ_ENTRY(rcm_share) link;
	struct rcm_port *port;
	struct gid gid;
};

struct rcm_id;
struct rcm_channel;

#define RCM_RECV_BUFS 64

struct rcm_lib {
	pthread_mutex_t lock;
	struct muxbe *mb;
	pthread_t thread;
	int wake[2];
	int dead; /* the daemon is gone: DEVICE_REMOVAL was posted */
	int nports;
	struct rcm_port *ports;
	TAILQ_HEAD(, rcm_id) ids;
	TAILQ_HEAD(, rcm_share) shares;
	uint32_t next_comm_id;
	uint16_t next_port;
	uint8_t bufs[RCM_RECV_BUFS][MUXBE_RECV_BUF_MIN];
};

/* The library, connected to the daemon on first use; NULL with errno set
 * (and why said once on stderr) when the daemon cannot be reached. */
struct rcm_lib *lib_get(void);
/* The library for a call on pub: NULL with errno set, EINVAL for no id. */
struct rcm_lib *lib_for(const struct rdma_cm_id *pub);
uint64_t lib_now_ms(void);
/* Wake the thread: a timer was armed. */
void lib_kick(struct rcm_lib *lib);
struct rcm_port *lib_port_of_gid(struct rcm_lib *lib, const struct gid *gid,
				 int *gid_index);
struct ibv_context *lib_port_verbs(struct rcm_port *port);
/* Share a GID of a port with the daemon, once for the process's life;
 * lock not held. */
int lib_share(struct rcm_lib *lib, struct rcm_port *port,
	      const struct gid *gid);
int lib_send_mad(struct rcm_lib *lib, struct rcm_port *port,
		 const struct gid *sgid, const struct gid *dgid,
		 const uint8_t *mad, uint8_t tclass);
uint32_t lib_new_comm_id(struct rcm_lib *lib);
/* Errors travel as librdmacm reports them: -1 with errno. */
int lib_err(int negative_errno);

/* ---- channel.c: event channels and events -------------------------- */

struct rcm_event {
	struct rdma_cm_event pub;
	TAILQ_ENTRY(rcm_event) link;
	struct rcm_id *id;    /* whose it is (the listener's for a
				   * CONNECT_REQUEST) */
	uint8_t pd[MAD_SIZE]; /* the private data pub points into */
};

struct rcm_channel {
	struct rdma_event_channel pub;
	int wfd;
	int readers;   /* threads in rdma_get_cm_event() on it */
	int destroyed; /* with readers blocked: left to them */
	TAILQ_HEAD(, rcm_event) events;
};

struct rcm_channel *channel_create(void);
void channel_destroy(struct rcm_channel *ch);
/* Lock held.  Queue an event on id's channel, or on a given one (the
 * id's next, in rdma_migrate_id()); the channel owns ev. */
void channel_post(struct rcm_id *id, struct rcm_event *ev);
void channel_enqueue(struct rcm_channel *ch, struct rcm_event *ev);
struct rcm_event *channel_new_event(struct rcm_id *id,
				    enum rdma_cm_event_type type, int status);
/* Lock held.  Drop id's queued events (it is being destroyed). */
void channel_flush_id(struct rcm_id *id);

/* ---- id.c: rdma_cm_id ---------------------------------------------- */

enum rcm_id_state {
	RCM_ID_IDLE,
	RCM_ID_BOUND,
	RCM_ID_ADDR_RESOLVED,
	RCM_ID_ROUTE_RESOLVED,
	RCM_ID_LISTEN,
	RCM_ID_CONNECT, /* REQ sent or received, not yet up */
	RCM_ID_CONNECTED,
	RCM_ID_DISCONNECTED,
	RCM_ID_DESTROYING,
};

/* One (port, GID) a listener hears on. */
struct rcm_listen_at {
	struct rcm_port *port;
	struct gid gid;
};

struct rcm_id {
	struct rdma_cm_id pub;
	TAILQ_ENTRY(rcm_id) link;
	struct rcm_lib *lib;
	enum rcm_id_state state;
	int sync; /* made without a channel: the calls wait */
	/* Addressing: the port and GIDs the addresses map to. */
	struct rcm_port *port;
	int sgid_index;
	struct gid sgid, dgid;
	int wildcard; /* listens on every address of the host */
	uint64_t service_id;
	int listening; /* the daemon routes its REQs here */
	struct rcm_listen_at *at;
	int nat;
	/* A listener's backlog (ucma's): CONNECT_REQUESTs not yet taken. */
	int backlog;
	struct rcm_id *listener; /* a child not yet reported, or NULL */
	struct cep cep;
	/* What the connection was set up with. */
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t path_mtu;
	uint8_t tos;
	uint8_t ack_timeout;
	uint32_t psn;        /* our send queue's starting PSN */
	uint32_t remote_psn; /* the peer's */
	uint32_t qpn;        /* announced, with or without id->qp */
	uint32_t qkey;       /* UD */
	int qpn_registered;
	int connect_error;
	unsigned events_out; /* retrieved, not yet acked */
	pthread_cond_t acked;
	struct ibv_qp_init_attr *qp_init_attr; /* rdma_create_ep passive */
	int own_cqs; /* rdma_create_qp made the CQs and their channels */
	void *connect_pd;
	size_t connect_pd_len;
};

struct rcm_id *id_of(struct rdma_cm_id *pub);
/* Lock held. */
struct rcm_id *id_alloc(struct rcm_lib *lib, struct rcm_channel *ch,
			void *context, enum rdma_port_space ps,
			enum ibv_qp_type qp_type);
void id_free(struct rcm_id *id);
/* Lock held: wait until id's retrieved events are all acked. */
void id_wait_acked(struct rcm_id *id);
/* A synchronous id (made with no channel) waits for its operation's
 * event: 0, or the negative errno librdmacm's ucma_complete() gives. */
int id_complete(struct rcm_id *id);

/* ---- addr.c: addresses to ports and GIDs ---------------------------- */

/* The GID an IP address is on RoCE (IPv4 mapped). */
int addr_to_gid(const struct sockaddr *sa, struct gid *gid);
void addr_from_gid(const struct gid *gid, uint16_t port,
		   struct sockaddr_storage *ss);
uint16_t addr_port(const struct sockaddr *sa);
void addr_set_port(struct sockaddr *sa, uint16_t port);
int addr_is_any(const struct sockaddr *sa);
socklen_t addr_len(const struct sockaddr *sa);

/* ---- conn.c: the CM of an id ----------------------------------------- */

extern const struct cep_ops conn_cep_ops;
/* Lock held.  One inbound MAD from the daemon. */
void conn_input(struct rcm_lib *lib, const uint8_t *mad,
		const struct muxbe_addr *a);
/* Lock held: what destroying an id tells its peer. */
void conn_teardown(struct rcm_id *id);
/* Lock not held: what listening took from the daemon. */
void conn_unlisten(struct rcm_id *id);
uint16_t conn_ps_of(enum rdma_port_space ps);
/* Lock held.  Queue an event of id, with private data if pd. */
void conn_post(struct rcm_id *id, enum rdma_cm_event_type type, int status,
	       const uint8_t *pd, size_t pd_len);
struct rcm_id *conn_find_listener(struct rcm_lib *lib, uint64_t sid,
				  const struct gid *dst);
/* Send mad back to where a (not otherwise matched) MAD came from. */
void conn_answer(struct rcm_lib *lib, const struct muxbe_addr *a,
		 const uint8_t *mad);
struct rcm_id *conn_child(struct rcm_lib *lib, struct rcm_id *listener,
			  const struct gid *src, const struct gid *dst,
			  const struct gid *hdr_src, const struct gid *hdr_dst,
			  uint16_t hdr_port);
/* rdma_reject() with a given REJ reason (rdma_reject_ece()'s 35). */
#define CONN_REJ_REASON_VENDOR_OPTION 35
int conn_reject(struct rdma_cm_id *pub, unsigned reason,
		const void *private_data, uint8_t private_data_len);

/* ---- sidr.c: SIDR for UD ids ----------------------------------------- */

/* Lock held. */
void sidr_on_req(struct rcm_lib *lib, const uint8_t *mad,
		 const struct muxbe_addr *a);
void sidr_on_rep(struct rcm_id *id, const uint8_t *mad);
int sidr_reject(struct rcm_id *id, const void *private_data,
		uint8_t private_data_len);
/* Lock not held. */
int sidr_connect(struct rcm_id *id, const struct rdma_conn_param *p);
int sidr_accept(struct rcm_id *id, const struct rdma_conn_param *p);

/* ---- qp.c: the id's QP through the connection's life ----------------- */

int qp_to_rtr(struct rcm_id *id);
int qp_to_rts(struct rcm_id *id);
void qp_to_err(struct rcm_id *id);
/* The QP number the daemon must know is ours (sim ports: claims it). */
int qp_register(struct rcm_id *id);

#endif
