// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The daemon object's small shared helpers and the configuration defaults. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "mux.h"

void config_defaults(struct mux_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->socket_path = MUX_DEFAULT_SOCKET;
	cfg->status_path = MUX_DEFAULT_STATUS;
	cfg->run_dir = MUX_DEFAULT_RUN_DIR;
	cfg->socket_mode = 0660;
	cfg->socket_owner = (uid_t)-1;
	cfg->socket_group = (gid_t)-1;
	cfg->status_group = (gid_t)-1;
	cfg->status_mode = 0660;
	cfg->workers = 2;
	cfg->max_clients = 1024;
	cfg->max_clients_per_uid = 0;   /* half of max_clients, once known */
	cfg->hello_timeout_ms = 5000;
	cfg->status_timeout_ms = 5000;
	cfg->resume_grace_ms = 60000;
	cfg->max_gids_per_client = 64;
	cfg->max_comm_ids_per_client = 4096;
	cfg->client_outq_max = 1u << 20;
	cfg->inbox_max = 65536;
	cfg->max_payload = PROTO_MAX_PAYLOAD_DEFAULT;
	cfg->handshake_ms = 60000;
	cfg->timewait_ms = 10000;
	cfg->max_peer_records = 65536;
	cfg->max_peer_records_per_source = 4096;
	cfg->max_timewait = 65536;
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

struct policy *mux_policy_get(struct mux *mux)
{
	struct policy *p;

	pthread_mutex_lock(&mux->policy_lock);
	p = policy_ref(mux->policy);
	pthread_mutex_unlock(&mux->policy_lock);
	return p;
}

int mux_policy_reload(struct mux *mux, char *err, size_t errlen)
{
	struct policy *p, *old;

	if (mux->cfg.policy_path == NULL) {
		snprintf(err, errlen, "no policy file (the default policy is in force)");
		return -ENOENT;
	}
	p = policy_load(mux->cfg.policy_path, err, errlen);
	if (p == NULL)
		return -EINVAL;
	pthread_mutex_lock(&mux->policy_lock);
	old = mux->policy;
	mux->policy = p;
	pthread_mutex_unlock(&mux->policy_lock);
	policy_unref(old);
	snprintf(err, errlen, "%d rules from %s", p->nrules, p->source);
	return 0;
}

int mux_refusal_log_allowed(struct mux *mux, uint64_t *suppressed)
{
	int ok;

	pthread_mutex_lock(&mux->refusal_lock);
	ok = log_ratelimit_allow(&mux->refusal_rl, suppressed);
	pthread_mutex_unlock(&mux->refusal_lock);
	return ok;
}
