// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer: inbound MADs from the wire through the router (with some
 * GIDs and comm IDs registered), and outbound ones from a client, plus
 * the guest CM endpoint's parser and the host library's CM endpoint in
 * each of its states. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mux/router.h"
#include "common/cm_mad.h"
#include "backend/vm/guest_cm.h"
#include "backend/rdmacm/rcm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fz_send(void *ctx, const uint8_t *mad, const struct gid *dst)
{
	(void)ctx;
	(void)mad;
	(void)dst;
	return 0;
}

static void fz_event(void *ctx, enum gcm_event ev, int detail)
{
	(void)ctx;
	(void)ev;
	(void)detail;
}

static const struct gcm_ops fz_ops = { .send = fz_send, .event = fz_event };

static void fz_cep_send(void *ctx, const uint8_t *mad)
{
	(void)ctx;
	(void)mad;
}

static void fz_cep_event(void *ctx, enum cep_event ev, const uint8_t *mad)
{
	(void)ctx;
	(void)ev;
	(void)mad;
}

static const struct cep_ops fz_cep_ops = { fz_cep_send, fz_cep_event };

/* Each MAD into a host-library endpoint in every state it can be in. */
static void fz_cep(const uint8_t *mad)
{
	static const struct gid peer = { { 0xfd, [15] = 2 } };
	uint64_t guid = 1;
	uint8_t m[MAD_SIZE];
	struct cep c;
	int st;

	for (st = 0; st < 6; st++) {
		cep_init(&c, &fz_cep_ops, NULL, cm_mad_receiver_id(mad));
		memset(m, 0, sizeof(m));
		cm_field_set(m, CM_REQ_MAX_CM_RETRIES, 2);
		switch (st) {
		case 0: cep_send_req(&c, m, &peer, 0); break;
		case 1: cep_req_received(&c, mad, &peer); break;
		case 2:
			cep_req_received(&c, mad, &peer);
			cep_send_rep(&c, m, 0);
			break;
		case 3:
			cep_send_req(&c, m, &peer, 0);
			c.state = CEP_REP_RCVD;
			cep_send_rtu(&c);
			break;
		case 4: cep_send_sidr_req(&c, m, &peer, 10, 1, 0); break;
		default: cep_sidr_req_received(&c, mad, &peer); break;
		}
		cep_input(&c, mad, 1);
		cep_tick(&c, 100000);
		cep_input(&c, mad, 100001);
		cep_destroy(&c, &guid, 100002);
	}
}

/* The router's answers go nowhere; every GID is "in the port's table"
 * so that the no-listener answers run too. */
static void fz_router_send(void *arg, enum conn_answer why, unsigned port,
			   const struct conn_path *path, const uint8_t *mad)
{
	(void)arg;
	(void)why;
	(void)port;
	(void)path;
	(void)mad;
}

static int fz_gid_in_table(void *arg, unsigned port, const struct gid *gid)
{
	(void)arg;
	(void)port;
	return gid->raw[15] & 1;
}

static const struct router_ops fz_router_ops = { fz_router_send,
						 fz_gid_in_table };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct router_limits lim = { 4, 16, 1000, 100 };
	struct router *r = router_new(&lim, 0x12345678, &fz_router_ops, NULL);
	struct conn_path path;
	struct gcm_params gp = { .port = 7471,
				 .local_comm_id = 0x10,
				 .timeout_ms = 10,
				 .max_retries = 2,
				 .timewait_ms = 10 };
	uint8_t mad[MAD_SIZE];
	struct gcm g;
	struct gid a, b;
	uint64_t client;
	uint8_t gid_type;

	size_t off;

	gid_parse("fd00::1", &a);
	gid_parse("fd00::2", &b);
	memset(&path, 0, sizeof(path));
	path.local_gid = a;
	path.peer_gid = b;
	router_register_gid(r, 0, &a, 1);
	router_register_gid(r, 0, &b, 2);
	/* The input is a sequence of MADs; each goes out from client 1, then
	 * comes in from the wire (as is, and as a reply naming what went
	 * out), so the table sees every attribute in every state. */
	for (off = 0; off < size; off += MAD_SIZE) {
		size_t n = size - off < MAD_SIZE ? size - off : MAD_SIZE;

		memset(mad, 0, sizeof(mad));
		memcpy(mad, data + off, n);
		router_inbound(r, 0, mad, n, &path, off, &client, NULL);
		memset(mad, 0, sizeof(mad));
		memcpy(mad, data + off, n);
		router_outbound(r, 0, 1 + (off / MAD_SIZE) % 2, NULL, NULL, mad,
				&path, off, 0, &gid_type);
		/* Echo: the host ID it got, as a Remote Comm ID. */
		memcpy(mad + 28, mad + 24, 4);
		router_inbound(r, 0, mad, MAD_SIZE, &path, off + 1, &client,
			       NULL);
		router_expire(r, off * 10);
	}
	router_purge_client(r, 1);
	router_free(r);
	{
		uint8_t resp[MAD_SIZE];

		cm_mad_class_response(data, size, resp);
	}
	memset(mad, 0, sizeof(mad));
	memcpy(mad, data, size < MAD_SIZE ? size : MAD_SIZE);

	gp.local_gid = b;
	gcm_init(&g, &gp, &fz_ops, NULL);
	gcm_listen(&g);
	gcm_input(&g, mad, MAD_SIZE, &a, 1);
	gcm_tick(&g, 100);
	gcm_input(&g, mad, MAD_SIZE, &a, 101);
	fz_cep(mad);
	return 0;
}
