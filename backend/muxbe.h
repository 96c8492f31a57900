/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef MUXBE_H
#define MUXBE_H

/*
 * libmuxbe: the backend library a VM's device model links to delegate its
 * QP1 (GSI) CM traffic to rdmacm-muxd.  See muxbe(3).
 *
 * Every function returns 0 (or a count) on success and a negative errno
 * on failure.  All functions are thread-safe.  Callbacks run from
 * muxbe_process() only, never with a library lock held, so they may call
 * back into the library (e.g. muxbe_post_recv() from the recv callback).
 */
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MUXBE_GRH_SIZE 40
#define MUXBE_MAD_SIZE 256
/* A receive buffer holds a GRH then the MAD, as on a UD QP. */
#define MUXBE_RECV_BUF_MIN (MUXBE_GRH_SIZE + MUXBE_MAD_SIZE)
#define MUXBE_DEFAULT_SOCKET "/run/rdmacm-mux/mux.sock"

struct muxbe;

/* Addressing of one MAD.  Outbound: local_gid is the source GID (one the
 * client registered on `port`); the daemon picks its GID index.  Inbound:
 * local_gid is the GID the MAD was routed to, remote_gid the sender. */
struct muxbe_addr {
	uint16_t port; /* port index from muxbe_register_gid() */
	uint8_t grh;   /* GRH present */
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint8_t sl;
	uint32_t flow_label;
	uint32_t remote_qpn; /* 1 for GSI */
	uint32_t qkey;       /* 0x80010000 for GSI */
	uint16_t lid;
	uint16_t pkey_index;
	uint8_t local_gid[16];
	uint8_t remote_gid[16];
};

struct muxbe_callbacks {
	/* A posted buffer was filled with a GRH and a MAD of mad_len bytes,
	 * or (addr == NULL, mad_len 0) flushed by muxbe_flush_recv(). */
	void (*recv)(void *user, void *buf_ctx, void *buf, size_t mad_len,
		     const struct muxbe_addr *addr);
	/* The daemon's verdict on muxbe_send_mad(): 0 or a negative errno,
	 * with the daemon's message. */
	void (*send_done)(void *user, void *send_ctx, int status,
			  const char *message);
	/* A port changed state. */
	void (*port_event)(void *user, uint16_t port, const char *port_name,
			   int active);
	/* The connection to the daemon is gone for good (err is
	 * negative): with no_reconnect, or muxbe_close() pending. */
	void (*disconnected)(void *user, int err);
	/* MADs this client sent, which the daemon had accepted, were lost
	 * at their receiver on this host (whose queue was full): the
	 * daemon's drop policy (rdmacm-muxd(8)).  count is how many since
	 * the last report; message names the latest one's attribute and
	 * GIDs.  The guest's CM retransmits on its own timeout. */
	void (*mad_lost)(void *user, uint16_t port, unsigned count,
			 const char *message);
	/* The link to the daemon went down (up 0, status the negative
	 * errno) or came back (up 1).  While it is down the library
	 * reconnects by itself (after 10 ms, then twice as long each time,
	 * at most MUXBE_RECONNECT_MAX_MS apart), sends and requests fail
	 * at once with -ENOTCONN, and posted buffers stay posted.  Back up,
	 * it has registered the client's GIDs again; status 0: the daemon
	 * kept this client's connections (a daemon restart costs none);
	 * -ESTALE: it did not (they are gone, as after a reboot); message
	 * says more. */
	void (*link)(void *user, int up, int status, const char *message);
};

#define MUXBE_RECONNECT_MAX_MS 1000

struct muxbe_options {
	const char *socket_path; /* NULL: $RDMACM_MUX_SOCKET or default */
	const char *name;        /* shown by rdmacm-muxctl status */
	const struct muxbe_callbacks *cb;
	void *user;
	unsigned rx_queue_max; /* MADs held with no buffer posted (256) */
	unsigned max_posted;   /* posted receive buffers (1024) */
	int timeout_ms;        /* blocking calls (5000) */
	char *errbuf;          /* optional: why muxbe_connect failed */
	size_t errbuf_len;
	int no_reconnect; /* 1: a lost link stays lost */
};

struct muxbe_stats {
	uint64_t rx_delivered; /* MADs placed in posted buffers */
	uint64_t rx_queued;    /* MADs that had to wait for a buffer */
	uint64_t rx_dropped;   /* MADs lost: queue was full */
	uint64_t tx_ok;
	uint64_t tx_errors; /* refused by the daemon or failed */
	uint64_t tx_lost;   /* accepted, then lost at a receiver */
	unsigned rx_queue_len;
	unsigned posted;
};

int muxbe_connect(const struct muxbe_options *opts, struct muxbe **out);
void muxbe_close(struct muxbe *mb);

/* Pollable fd (readable when muxbe_process() has work) and the call that
 * does that work without blocking.  Returns callbacks run, or -errno. */
int muxbe_fd(struct muxbe *mb);
int muxbe_process(struct muxbe *mb);

/* Blocking control calls. */
int muxbe_ping(struct muxbe *mb);
int muxbe_register_gid(struct muxbe *mb, const char *port,
		       const uint8_t gid[16], uint16_t *port_index);
int muxbe_unregister_gid(struct muxbe *mb, const char *port,
			 const uint8_t gid[16]);
/* The QP a REQ, REP or SIDR_REP names must be the client's own.  On a
 * real port the kernel says whose a QP is, and registering only asks
 * it early (-EPERM: not this process's); on a simulated port, which has
 * no QPs, the first process to register a QPN owns it while this
 * connection lasts (-EADDRINUSE: another process has it).  Registered
 * again after a reconnect, as GIDs are. */
int muxbe_register_qpn(struct muxbe *mb, const char *port, uint32_t qpn);
int muxbe_unregister_qpn(struct muxbe *mb, const char *port, uint32_t qpn);
/* Shared GIDs (protocol 1.1, rdmacm-mux-protocol(7) SHARED GIDS): the
 * host's own processes on one address, each reached by the service IDs
 * it listens on.  muxbe_unregister_gid() leaves a shared GID and its
 * listens.  Registered again after a reconnect, in the order made. */
int muxbe_share_gid(struct muxbe *mb, const char *port, const uint8_t gid[16],
		    uint16_t *port_index);
int muxbe_listen(struct muxbe *mb, const char *port, const uint8_t gid[16],
		 uint64_t service_id);
int muxbe_unlisten(struct muxbe *mb, const char *port, const uint8_t gid[16],
		   uint64_t service_id);
/* Any control request as JSON text; *reply (malloc'd JSON) on success. */
int muxbe_request(struct muxbe *mb, const char *request_json, char **reply);

/* Send a MAD.  Asynchronous: the verdict arrives through send_done. */
int muxbe_send_mad(struct muxbe *mb, const struct muxbe_addr *addr,
		   const void *mad, size_t len, void *send_ctx);
/* The same, waiting for the verdict. */
int muxbe_send_mad_sync(struct muxbe *mb, const struct muxbe_addr *addr,
			const void *mad, size_t len);

/* Post a receive buffer of at least MUXBE_RECV_BUF_MIN bytes. */
int muxbe_post_recv(struct muxbe *mb, void *buf, size_t len, void *buf_ctx);

/* Give back every posted receive buffer through the recv callback with
 * addr == NULL; returns how many. */
int muxbe_flush_recv(struct muxbe *mb);

/* Replace the callbacks (e.g. when a muxbe_dev takes over a handle). */
void muxbe_set_callbacks(struct muxbe *mb, const struct muxbe_callbacks *cb,
			 void *user);

void muxbe_get_stats(struct muxbe *mb, struct muxbe_stats *st);
/* The daemon's message for the last failed call on this handle. */
void muxbe_last_error(struct muxbe *mb, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
