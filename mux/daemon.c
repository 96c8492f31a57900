// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The daemon object's small shared helpers and the configuration defaults. */
#include <string.h>
#include <time.h>

#include "mux.h"

void config_defaults(struct mux_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->socket_path = MUX_DEFAULT_SOCKET;
	cfg->status_path = MUX_DEFAULT_STATUS;
	cfg->socket_mode = 0660;
	cfg->status_mode = 0660;
	cfg->workers = 2;
	cfg->max_clients = 1024;
	cfg->max_gids_per_client = 64;
	cfg->max_comm_ids_per_client = 4096;
	cfg->client_outq_max = 1u << 20;
	cfg->inbox_max = 65536;
	cfg->max_payload = PROTO_MAX_PAYLOAD_DEFAULT;
	cfg->handshake_ms = 60000;
	cfg->timewait_ms = 10000;
}

uint64_t mux_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct port *mux_port_by_name(struct mux *mux, const char *name)
{
	int i;

	for (i = 0; i < mux->nports; i++)
		if (strcmp(mux->ports[i].name, name) == 0)
			return &mux->ports[i];
	return NULL;
}
