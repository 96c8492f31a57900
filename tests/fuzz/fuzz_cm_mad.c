// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer: inbound MADs from the wire through the router (with some
 * GIDs and comm IDs registered), and outbound ones from a client, plus
 * the guest CM endpoint's parser. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../mux/mux.h"
#include "../../backend/vm/guest_cm.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct router_limits lim = { 4, 16, 100 };
	struct router *r = router_new(&lim);
	struct gcm_params gp = { .port = 7471, .local_comm_id = 0x10,
		.timeout_ms = 10, .max_retries = 2, .timewait_ms = 10 };
	uint8_t mad[MAD_SIZE];
	struct gcm g;
	struct gid a, b;
	uint64_t client;

	gid_parse("fd00::1", &a);
	gid_parse("fd00::2", &b);
	router_register_gid(r, 0, &a, 1);
	router_register_gid(r, 0, &b, 2);
	memset(mad, 0, sizeof(mad));
	memcpy(mad, data, size < MAD_SIZE ? size : MAD_SIZE);
	/* The wire side: any bytes, any length up to a MAD. */
	router_inbound(r, 0, data, size < MAD_SIZE ? size : MAD_SIZE, 5, &client);
	router_inbound(r, 0, mad, MAD_SIZE, 5, &client);
	/* The client side, then the wire again with the state it left. */
	router_outbound(r, 0, 1, mad, 6);
	router_inbound(r, 0, mad, MAD_SIZE, 7, &client);
	router_expire(r, 1000);
	router_purge_client(r, 1);
	router_free(r);

	gp.local_gid = b;
	gcm_init(&g, &gp, &fz_ops, NULL);
	gcm_listen(&g);
	gcm_input(&g, mad, MAD_SIZE, &a, 1);
	gcm_tick(&g, 100);
	gcm_input(&g, mad, MAD_SIZE, &a, 101);
	return 0;
}
