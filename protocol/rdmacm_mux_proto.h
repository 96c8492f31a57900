/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RDMACM_MUX_PROTO_H
#define RDMACM_MUX_PROTO_H

/*
 * rdmacm-mux client protocol, version 1 (see rdmacm-mux-protocol(7)).
 *
 * A stream of frames over a unix stream socket.  Every frame starts with a
 * 12-byte header in network byte order:
 *
 *   0  u8   kind        PROTO_KIND_JSON (control) or PROTO_KIND_MAD
 *   1  u8   flags       PROTO_FLAG_REPLY or PROTO_FLAG_EVENT, or 0 for a request
 *   2  u16  reserved    must be zero
 *   4  u32  request id  non-zero in requests, echoed in the reply, 0 in events
 *   8  u32  length      payload bytes that follow (at most the peer's maximum)
 *
 * This codec is pure: no I/O, no global state; the same bytes split at
 * any points decode to the same frames.
 */
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PROTO_VERSION_MAJOR 1
#define PROTO_VERSION_MINOR 1

/* Where the daemon's sockets are unless told otherwise (rdmacm-muxd(8),
 * FILES): the clients', the read-only status socket, and the admin
 * socket, which the daemon opens only when --admin-socket names it. */
#define PROTO_DEFAULT_RUN_DIR "/run/rdmacm-mux"
#define PROTO_DEFAULT_SOCKET PROTO_DEFAULT_RUN_DIR "/mux.sock"
#define PROTO_DEFAULT_STATUS_SOCKET PROTO_DEFAULT_RUN_DIR "/status.sock"
#define PROTO_DEFAULT_ADMIN_SOCKET PROTO_DEFAULT_RUN_DIR "/admin.sock"

#define PROTO_HDR_SIZE 12
#define PROTO_MAX_PAYLOAD_DEFAULT 65536u
#define PROTO_MAX_PAYLOAD_LIMIT (16u * 1024 * 1024)

enum proto_kind {
	PROTO_KIND_JSON = 1,
	PROTO_KIND_MAD = 2,
};

#define PROTO_FLAG_REPLY 0x01
#define PROTO_FLAG_EVENT 0x02

struct proto_frame {
	uint8_t kind;
	uint8_t flags;
	uint32_t request_id;
	uint32_t length;
	const uint8_t *payload; /* valid until the next decoder call */
};

/* Incremental decoder.  Embed it; call proto_decoder_init() first and
 * proto_decoder_fini() to release the payload buffer. */
struct proto_decoder {
	uint32_t max_payload;
	uint8_t hdr[PROTO_HDR_SIZE];
	size_t hdr_have;
	uint8_t *buf;
	size_t buf_cap;
	size_t payload_have;
	int error; /* sticky: once malformed, always malformed */
};

void proto_decoder_init(struct proto_decoder *dec, uint32_t max_payload);
void proto_decoder_fini(struct proto_decoder *dec);

/*
 * Consume bytes from data[0..len).  *consumed is set to how many were
 * used.  Returns 1 when *frame holds a complete frame (the caller then
 * calls again with the remaining bytes), 0 when all bytes were consumed
 * without completing a frame, or a negative errno:
 *   -EMSGSIZE  length above the maximum (rejected before buffering)
 *   -EBADMSG   unknown kind, bad flags or non-zero reserved bits
 *   -EPROTO    request id rules broken (0 in a request or a reply,
 *              non-zero in an event)
 *   -ENOMEM    no memory for the payload
 * After an error the decoder stays failed: the stream has lost framing.
 */
int proto_decoder_feed(struct proto_decoder *dec, const uint8_t *data,
		       size_t len, size_t *consumed, struct proto_frame *frame);

/* Encode a frame header into out[PROTO_HDR_SIZE]. */
void proto_header_encode(uint8_t *out, uint8_t kind, uint8_t flags,
			 uint32_t request_id, uint32_t length);
/* Validate a header on its own (what the decoder checks). */
int proto_header_decode(const uint8_t *in, uint32_t max_payload,
			struct proto_frame *frame);

/*
 * MAD frame payload: a 64-byte address block then the MAD.
 *
 *   0  u16 port index      outbound: port to send on; inbound: port received on
 *   2  u16 MAD length      1..256, equal to payload length - 64
 *   4  u8  flags           PROTO_MAD_F_GRH
 *   5  u8  hop limit
 *   6  u8  traffic class
 *   7  u8  service level
 *   8  u32 flow label      low 20 bits
 *  12  u32 remote QPN      low 24 bits
 *  16  u32 remote Q_Key
 *  20  u16 remote LID
 *  22  u16 P_Key index
 *  24  u8[16] local GID    outbound: source GID; inbound: the GID it was routed to
 *  40  u8[16] remote GID   outbound: destination; inbound: sender
 *  56  u32 status          0 (reserved for send completions)
 *  60  u32 reserved        0
 *  64  MAD
 */
#define PROTO_MAD_ADDR_SIZE 64
#define PROTO_MAD_MAX 256
#define PROTO_MAD_F_GRH 0x01

struct proto_mad_addr {
	uint16_t port;
	uint8_t flags;
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint8_t sl;
	uint32_t flow_label;
	uint32_t remote_qpn;
	uint32_t qkey;
	uint16_t lid;
	uint16_t pkey_index;
	uint8_t local_gid[16];
	uint8_t remote_gid[16];
	uint32_t status;
};

struct proto_mad {
	struct proto_mad_addr addr;
	uint16_t mad_len;
	uint8_t mad[PROTO_MAD_MAX];
};

/* Returns the payload size written, or -ENOSPC / -EINVAL. */
int proto_mad_encode(const struct proto_mad *m, uint8_t *out, size_t cap);
/* Returns 0, or -EMSGSIZE (sizes), -EINVAL (reserved bits or fields out
 * of range). */
int proto_mad_decode(const uint8_t *in, size_t len, struct proto_mad *m);

/*
 * JSON control payloads.  Requests are objects with a string "op";
 * replies carry "ok": true, or "ok": false with
 * "error": {"code": "EEXIST", "errno": 17, "message": "..."};
 * events carry a string "event".
 */
#define PROTO_JSON_MAX_DEPTH 8

/* Parse a control payload into an object.  -EBADMSG if it is not a JSON
 * object (or nests deeper than PROTO_JSON_MAX_DEPTH); *err says why. */
int proto_json_parse(const uint8_t *payload, size_t len, json_t **out,
		     const char **err);
/* A request's "op", or NULL with *err set. */
const char *proto_request_op(json_t *req, const char **err);

json_t *proto_reply_ok(void);
json_t *proto_reply_error(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* From a reply: 0 when ok, else the negative errno it names (-EPROTO if
 * the reply is malformed); message points into the reply. */
int proto_reply_status(json_t *reply, const char **message);

/* Errno values by their names (as used in error replies). */
const char *proto_errno_name(int err);
int proto_errno_from_name(const char *name);

/* The GID helpers accept IPv6 text and dotted IPv4 (IPv4-mapped). */
int proto_gid_from_json(json_t *value, uint8_t gid[16]);
json_t *proto_gid_to_json(const uint8_t gid[16]);

/* Status socket queries (rdmacm-muxd(8), STATUS). */
#define PROTO_STATUS_QUERY_MAX 1024
#define PROTO_STATUS_PAGE_DEFAULT 256
#define PROTO_STATUS_PAGE_MAX 4096

enum proto_status_op { PROTO_STATUS_SNAPSHOT, PROTO_STATUS_CONNECTIONS };

struct proto_status_query {
	enum proto_status_op op;
	uint64_t client; /* CONNECTIONS */
	uint32_t offset, limit;
};

/* 0 and *q, or -EMSGSIZE, -EBADMSG, -EOPNOTSUPP, -EINVAL with err set. */
int proto_status_query_parse(const char *line, size_t len,
			     struct proto_status_query *q, char *err,
			     size_t errlen);

/* The admin socket's capture request (rdmacm-muxd(8), ADMIN SOCKET). */
#define PROTO_CAPTURE_COUNT 1000
#define PROTO_CAPTURE_COUNT_MAX 10000000
#define PROTO_CAPTURE_SECONDS 60
#define PROTO_CAPTURE_SECONDS_MAX 86400

enum proto_capture_by {
	PROTO_CAPTURE_ALL,
	PROTO_CAPTURE_CLIENT,
	PROTO_CAPTURE_VM,
	PROTO_CAPTURE_GID
};

struct proto_capture_request {
	enum proto_capture_by by;
	uint64_t client;
	char vm[64];
	uint8_t gid[16];
	uint64_t count;
	unsigned seconds;
};

/* 0 and *r, or -EINVAL with err set. */
int proto_capture_request_parse(json_t *req, struct proto_capture_request *r,
				char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
