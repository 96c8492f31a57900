// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The daemon object: what it holds, and its small shared helpers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mux/mux.h"

/* What struct mux holds by pointer, so that mux.h can show the daemon
 * object before the sections of these types: one allocation with it. */
struct mux_parts {
	struct mux mux;
	struct clients clients;
	struct port ports[MUX_MAX_PORTS];
	struct client_listener listener;
	struct client_listener qemu_listeners[MUX_MAX_PORTS];
	struct listen_fds listen_fds;
	struct unix_listener admin_listener;
};

struct mux *mux_new(void)
{
	struct mux_parts *p = calloc(1, sizeof(*p));

	if (p == NULL)
		return NULL;
	p->mux.clients = &p->clients;
	p->mux.ports = p->ports;
	p->mux.listener = &p->listener;
	p->mux.qemu_listeners = p->qemu_listeners;
	p->mux.listen_fds = &p->listen_fds;
	p->mux.admin_listener = &p->admin_listener;
	return &p->mux;
}

void mux_free(struct mux *mux)
{
	/* The first member: the parts' address is the daemon's. */
	free((struct mux_parts *)mux);
}

/* The daemon's deadlines and budgets count whole milliseconds, and
 * libevent's timers already run on the coarse clock: the tick-grained
 * clock is read from memory the kernel updates, where the precise one
 * reads the clock source, a device read where that is an emulated HPET
 * (the lab's VMs: 14% of a worker's samples under perf). */
uint64_t mux_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
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
		snprintf(err, errlen,
			 "no policy file (the default policy is in force)");
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

static void mux_reload_say(void *arg, const char *name, const char *was,
			   const char *now, int applied)
{
	(void)arg;
	if (applied)
		log_info("SIGHUP: %s: %s -> %s", name, was, now);
	else
		log_warnx(
			"SIGHUP: %s: %s -> %s needs a restart; %s stays in force",
			name, was, now, was);
}

void mux_router_limits(const struct mux_config *cfg, struct router_limits *lim)
{
	memset(lim, 0, sizeof(*lim));
	lim->max_gids_per_client = cfg->max_gids_per_client;
	lim->max_comm_ids_per_client = cfg->max_comm_ids_per_client;
	lim->timewait_ms = cfg->timewait_ms;
	lim->handshake_ms = cfg->handshake_ms;
	lim->max_peer_records_per_port = cfg->max_peer_records;
	lim->max_peer_records_per_source = cfg->max_peer_records_per_source;
	lim->max_timewait = cfg->max_timewait;
}

void mux_reload(struct mux *mux)
{
	struct router_limits lim;
	struct mux_config fresh;
	struct config_errors errs;
	char msg[512];
	int i, n, rc;

	config_defaults(&fresh);
	if (config_load(&fresh, mux->argc, mux->argv, &errs) < 0) {
		for (i = 0; i < errs.n && i < CONFIG_MAX_ERRORS; i++)
			log_warnx("SIGHUP: %s", errs.msg[i]);
		log_warnx(
			"SIGHUP: %d error(s): nothing reloaded, the running configuration stays in force",
			errs.n);
		config_free(&fresh);
		return;
	}
	n = config_reload(&mux->cfg, &fresh, mux_reload_say, mux);
	config_free(&fresh);
	log_set_level(mux->cfg.log_level);
	mux_router_limits(&mux->cfg, &lim);
	router_set_limits(mux->router, &lim);
	rc = mux_policy_reload(mux, msg, sizeof(msg));
	log_info("SIGHUP: %d option(s) changed; policy %s: %s", n,
		 rc == 0         ? "reloaded"
		 : rc == -ENOENT ? "unchanged"
				 : "NOT reloaded",
		 msg);
}
