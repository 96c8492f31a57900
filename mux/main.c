// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * rdmacm-muxd: options, start-up in dependency order, signals, and a
 * shutdown that mirrors start-up.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "mux/mux.h"
#include "common/log.h"

static int main_setup_sim_fabric(struct mux *mux)
{
	char tmpl[] = "/tmp/rdmacm-mux-sim.XXXXXX";
	int i, any = 0;

	for (i = 0; i < mux->cfg.nports; i++)
		any |= mux->cfg.ports[i].kind == PORT_SPEC_SIM;
	if (!any)
		return 0;
	if (mux->cfg.sim_fabric) {
		if (mkdir(mux->cfg.sim_fabric, 0700) < 0 && errno != EEXIST) {
			log_warn("--sim-fabric %s", mux->cfg.sim_fabric);
			return -1;
		}
		snprintf(mux->sim_fabric, sizeof(mux->sim_fabric), "%s",
			 mux->cfg.sim_fabric);
		return 0;
	}
	/* A daemon killed with -9 could not remove its own. */
	port_sim_sweep_fabrics("/tmp", "rdmacm-mux-sim.");
	if (mkdtemp(tmpl) == NULL) {
		log_warn("sim fabric: mkdtemp");
		return -1;
	}
	snprintf(mux->sim_fabric, sizeof(mux->sim_fabric), "%s", tmpl);
	mux->sim_fabric_owned = 1;
	return 0;
}

static void main_remove_sim_fabric(struct mux *mux)
{
	if (mux->sim_fabric_owned && rmdir(mux->sim_fabric) < 0)
		log_warn("cannot remove the sim fabric %s", mux->sim_fabric);
	mux->sim_fabric_owned = 0;
}

/* Ports are named first: the QEMU sockets name them, and those are
 * opened before anything outside the daemon's own files changes.  A
 * port given twice never gets here (config_check_ports()). */
static void main_name_ports(struct mux *mux)
{
	const struct port_spec *ps;
	struct port *p;
	int i;

	for (i = 0; i < mux->cfg.nports; i++) {
		ps = &mux->cfg.ports[i];
		p = &mux->ports[i];
		p->mux = mux;
		p->index = (unsigned)i;
		p->lock.fd = -1;
		p->ops = ps->kind == PORT_SPEC_SIM ? &port_sim_ops
						   : &port_umad_ops;
		config_port_name(ps, p->name, sizeof(p->name));
		mux->nports = i + 1;
	}
}

/* One daemon per port: a sim port's lock is in its fabric, a real
 * port's in the run directory, where every daemon on the host looks. */
static int main_lock_port(struct mux *mux, struct port *p,
			  const struct port_spec *ps)
{
	char path[sizeof(p->lock.path)], what[96];
	int n;

	if (ps->kind == PORT_SPEC_SIM) {
		n = snprintf(path, sizeof(path), "%s/%s.lock", mux->sim_fabric,
			     ps->name);
	} else {
		if (mkdir(mux->cfg.run_dir, 0755) < 0 && errno != EEXIST) {
			log_warn("--run-dir %s", mux->cfg.run_dir);
			return -errno;
		}
		n = snprintf(path, sizeof(path), "%s/port-%s-%d.lock",
			     mux->cfg.run_dir, ps->name, ps->port_num);
	}
	if (n < 0 || (size_t)n >= sizeof(path)) {
		log_warnx("port %s: lock path too long", p->name);
		return -ENAMETOOLONG;
	}
	snprintf(what, sizeof(what), "port %s", p->name);
	return lockfile_take_or_say(&p->lock, path, what);
}

static int main_open_ports(struct mux *mux)
{
	const struct port_spec *ps;
	struct port *p;
	int i, rc;

	for (i = 0; i < mux->cfg.nports; i++) {
		ps = &mux->cfg.ports[i];
		p = &mux->ports[i];
		rc = main_lock_port(mux, p, ps);
		if (rc < 0)
			return rc;
		port_answers_init(p);
		rc = p->ops->open(p, ps);
		if (rc < 0) {
			log_warnx("port %s: cannot open (%s)", p->name,
				  strerror(-rc));
			return rc;
		}
		log_info("port %d: %s (%s) %s", i, p->name, p->ops->kind,
			 port_state_name(atomic_load(&p->state)));
	}
	return 0;
}

/* Ports that main_open_ports() reached, in any state. */
static void main_close_ports(struct mux *mux)
{
	int i;

	for (i = 0; i < mux->nports; i++) {
		if (mux->ports[i].ops && mux->ports[i].priv)
			mux->ports[i].ops->close(&mux->ports[i]);
		lockfile_release(&mux->ports[i].lock);
	}
}

/* systemd's watchdog and status line (no-ops without systemd). */
static void main_on_service_tick(evutil_socket_t fd, short what, void *arg)
{
	struct mux *mux = arg;
	struct router_counts rc;

	(void)fd;
	(void)what;
	router_counts(mux->router, &rc);
	sdnotify(
		"%sSTATUS=%u client(s), %u connection(s) established, %u in handshake",
		sdnotify_watchdog_usec() ? "WATCHDOG=1\n" : "",
		clients_count(mux->clients), rc.established, rc.handshake);
}

/*
 * The signals the daemon acts on are blocked in every thread from the
 * start and read from a signalfd on the main loop: no handler runs at an
 * arbitrary point of an arbitrary thread (ThreadSanitizer's deferred
 * handlers lost about one SIGTERM in fifty that way), one that comes while
 * the ports open waits for the loop (a SIGHUP then used to kill the
 * daemon), and the log says who sent it.
 */
struct main_signals {
	struct mux *mux;
	struct event_base *base;
	struct event *ev;
	int fd;
};

static void main_on_signals(evutil_socket_t fd, short what, void *arg)
{
	struct main_signals *ms = arg;
	struct signalfd_siginfo si;

	(void)what;
	while (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			log_info("signal %u from pid %u: reloading",
				 si.ssi_signo, si.ssi_pid);
			sdnotify("RELOADING=1");
			mux_reload(ms->mux);
			sdnotify("READY=1");
		} else {
			log_info("signal %u from pid %u: shutting down",
				 si.ssi_signo, si.ssi_pid);
			event_base_loopexit(ms->base, NULL);
		}
	}
}

static int main_signals_open(struct main_signals *ms, struct mux *mux,
			     struct event_base *base)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	/* Before any thread exists: they all inherit the mask. */
	errno = pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (errno)
		return -errno;
	ms->mux = mux;
	ms->base = base;
	ms->fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (ms->fd < 0)
		return -errno;
	ms->ev = event_new(base, ms->fd, EV_READ | EV_PERSIST, main_on_signals,
			   ms);
	if (ms->ev == NULL || event_add(ms->ev, NULL) < 0)
		return -ENOMEM;
	return 0;
}

static void main_signals_close(struct main_signals *ms)
{
	if (ms->ev)
		event_free(ms->ev);
	if (ms->fd >= 0)
		close(ms->fd);
}

/* --help, --version, --check-config, or a configuration with errors:
 * nothing starts.  Exit codes: 0, 1 for a file that --check-config
 * found wrong, 2 for a configuration the daemon would not start with. */
static int main_config_only(struct mux *mux, struct config_errors *errs)
{
	struct mux_config *cfg = &mux->cfg;
	int i, code = 0;

	if (cfg->show_help) {
		config_print_usage(stdout);
	} else if (cfg->show_version) {
		printf("rdmacm-muxd %s\n", MUX_VERSION);
	} else {
		if (errs->n == 0 && cfg->check_config && cfg->policy_path) {
			char perr[512];
			struct policy *pol = policy_load(cfg->policy_path, perr,
							 sizeof(perr));

			if (pol == NULL)
				snprintf(errs->msg[errs->n++],
					 sizeof(errs->msg[0]), "policy: %.200s",
					 perr);
			policy_unref(pol);
		}
		for (i = 0; i < errs->n && i < CONFIG_MAX_ERRORS; i++)
			fprintf(stderr, "rdmacm-muxd: %s\n", errs->msg[i]);
		if (errs->n > CONFIG_MAX_ERRORS)
			fprintf(stderr,
				"rdmacm-muxd: ... and %d more error(s)\n",
				errs->n - CONFIG_MAX_ERRORS);
		if (cfg->check_config)
			printf("%s: %s\n",
			       cfg->file_read ? cfg->config_path
					      : "command line",
			       errs->n ? "errors" : "ok");
		if (errs->n)
			code = cfg->check_config ? 1 : 2;
		if (errs->n && !cfg->check_config)
			fprintf(stderr,
				"usage: rdmacm-muxd [options]; --help lists them\n");
	}
	config_free(cfg);
	mux_free(mux);
	return code;
}

/* A port's identity in the state file: FNV-1a of its name, so that an
 * entry finds its port again when the list changed. */
static uint64_t main_port_id(const struct port_spec *ps)
{
	char pn[64];
	const char *c;
	uint64_t id = 1469598103934665603ull;

	snprintf(pn, sizeof(pn), "%s:%d;", ps->name,
		 ps->kind == PORT_SPEC_SIM ? -1 : ps->port_num);
	for (c = pn; *c; c++)
		id = (id ^ (uint8_t)*c) * 1099511628211ull;
	return id;
}

/* The connection table's limits: the configuration's, its state file,
 * and room for every entry the limits allow. */
static void main_router_limits(const struct mux_config *cfg,
			       struct router_limits *lim, char *state_path,
			       size_t len)
{
	uint64_t max_entries;
	int i;

	mux_router_limits(cfg, lim);
	if (cfg->state_path == NULL) {
		snprintf(state_path, len, "%s.state", cfg->socket_path);
		lim->state_path = state_path;
	} else if (strcmp(cfg->state_path, "none") != 0) {
		lim->state_path = cfg->state_path;
	}
	/* Every entry the limits allow, and every owner of this life and
	 * the last one. */
	max_entries = (uint64_t)cfg->max_clients *
			      cfg->max_comm_ids_per_client +
		      (uint64_t)cfg->max_peer_records * (unsigned)cfg->nports +
		      cfg->max_timewait;
	lim->max_entries = max_entries > MUX_STATE_MAX_ENTRIES
				   ? MUX_STATE_MAX_ENTRIES
				   : (unsigned)max_entries;
	lim->max_owners = 2 * cfg->max_clients;
	lim->nports = (unsigned)cfg->nports;
	for (i = 0; i < cfg->nports; i++)
		lim->port_ids[i] = main_port_id(&cfg->ports[i]);
}

/* The router (with what a previous daemon left), the QP registry and
 * the client list; exits when one cannot be made. */
static void main_make_tables(struct mux *mux, const struct router_limits *lim)
{
	struct router_counts was;
	uint32_t random_operand;

	/* Host comm IDs are XORed with this, as the kernel CM does, so that
	 * they are not predictable from outside. */
	if (getrandom(&random_operand, sizeof(random_operand), 0) !=
	    (ssize_t)sizeof(random_operand))
		random_operand = (uint32_t)time(NULL) ^ (uint32_t)getpid();
	mux->router = router_new(lim, random_operand, &port_router_ops, mux);
	if (mux->router == NULL)
		fatalx("cannot set up the routing table");
	mux->qp_registry = qp_registry_new();
	if (mux->qp_registry == NULL)
		fatalx("cannot set up the QP registry");
	clients_init(mux->clients);
	if (router_restored(mux->router, &was)) {
		/* New clients never take a previous client's id. */
		mux->clients->next_id = router_max_client_id(mux->router) + 1;
		log_info(
			"connection state %s: %u comm-ID and %u SIDR mapping(s) of the previous daemon, kept for its clients for %u ms",
			lim->state_path, was.comm_ids, was.sidr_ids,
			mux->cfg.resume_grace_ms);
	}
}

/* The policy and the log budgets of refusals; exits on a bad policy. */
static void main_load_policy(struct mux *mux)
{
	char err[512];

	pthread_mutex_init(&mux->policy_lock, NULL);
	mux->accept_rl = (struct log_ratelimit)LOG_RATELIMIT_INIT(10, 1);
	pthread_mutex_init(&mux->refusal_lock, NULL);
	mux->refusal_rl = (struct log_ratelimit)LOG_RATELIMIT_INIT(10, 1);
	if (mux->cfg.policy_path) {
		mux->policy = policy_load(mux->cfg.policy_path, err,
					  sizeof(err));
		if (mux->policy == NULL)
			fatalx("policy: %s", err);
	} else {
		mux->policy = policy_default(geteuid());
	}
	log_info("policy: %d rule(s) from %s", mux->policy->nrules,
		 mux->policy->source);
}

/* The threads: workers, the port thread, the status thread; then the
 * daemon says it is ready. */
static void main_start_threads(struct mux *mux)
{
	mux->nworkers = mux->cfg.workers;
	worker_pool_start(mux, &delivery_worker_ops);
	mux->portio = port_io_start(mux);
	if (status_start(mux) < 0)
		fatal("status thread");
	router_resume_grace(mux->router,
			    mux_now_ms() + mux->cfg.resume_grace_ms);
	log_info(
		"rdmacm-muxd %s ready: %d port(s), %d worker(s), clients on %s, status on %s",
		MUX_VERSION, mux->nports, mux->nworkers, mux->cfg.socket_path,
		mux->cfg.status_path);
	/* Every port's agent is registered and the sockets listen. */
	sdnotify("READY=1\nMAINPID=%d\nSTATUS=%d port(s), clients on %s",
		 (int)getpid(), mux->nports, mux->cfg.socket_path);
}

/* systemd's watchdog, twice per its interval, and the status line every
 * 10 s; NULL without memory (then neither). */
static struct event *main_service_timer(struct mux *mux,
					struct event_base *base)
{
	struct event *service;
	uint64_t wd = sdnotify_watchdog_usec();
	struct timeval tv = { 10, 0 };

	service = event_new(base, -1, EV_PERSIST, main_on_service_tick, mux);
	if (service == NULL)
		return NULL;
	if (wd && wd / 2 < 10000000u)
		tv = (struct timeval){ (time_t)(wd / 2000000u),
				       (suseconds_t)(wd / 2 % 1000000u) };
	event_add(service, &tv);
	return service;
}

/* The loop has ended: the threads stop, in the order that lets each
 * finish what the others handed it. */
static void main_stop_threads(struct mux *mux)
{
	listener_stop(mux);
	status_close(mux);
	admin_close(mux);
	port_io_stop(mux->portio);
	/* The VMs are not going away, the daemon is: closing their sessions
	 * must not tear down their connections at the peers. */
	router_stop_answering(mux->router);
	worker_pool_stop(mux);
	/* Ports' events live on the port thread's base: before it goes. */
	main_close_ports(mux);
	port_io_free(mux->portio);
}

/* What start-up made, after a stop or a failed start-up alike. */
static void main_release(struct mux *mux, struct main_signals *signals,
			 struct event_base *base)
{
	/* Whatever made start-up fail, the connections in the state are
	 * not this daemon's to end. */
	router_stop_answering(mux->router);
	main_close_ports(mux);
	main_remove_sim_fabric(mux);
	listener_stop(mux);
	status_close(mux);
	admin_close(mux);
	capture_set_free(mux);
	router_free(mux->router);
	qp_registry_free(mux->qp_registry);
	clients_fini(mux->clients);
	policy_unref(mux->policy);
	pthread_mutex_destroy(&mux->policy_lock);
	pthread_mutex_destroy(&mux->refusal_lock);
	main_signals_close(signals);
	event_base_free(base);
	config_free(&mux->cfg);
}

int main(int argc, char **argv)
{
	struct router_limits lim;
	struct main_signals signals = { .fd = -1 };
	struct event *service;
	struct event_base *base;
	char state_path[256];
	int rc, exit_code = 1;
	struct config_errors errs;
	char logerr[256];
	struct mux *mux;

	mux = mux_new();
	if (mux == NULL)
		return 1;
	config_defaults(&mux->cfg);
	mux->deliver = &delivery_to_sessions;
	mux->argc = argc;
	mux->argv = argv;
	if (config_load(&mux->cfg, argc, argv, &errs) < 0 ||
	    mux->cfg.show_help || mux->cfg.show_version ||
	    mux->cfg.check_config)
		return main_config_only(mux, &errs);
	if (log_open("rdmacm-muxd", mux->cfg.log_target, mux->cfg.log_level,
		     logerr, sizeof(logerr)) < 0)
		log_warnx("logging on stderr: %s", logerr);
	/* Sockets systemd may have handed over (descriptors 3 and up). */
	listen_fds_take(mux->listen_fds);
	/* A client that vanishes mid-write must cost an EPIPE, not us. */
	signal(SIGPIPE, SIG_IGN);
	if (evthread_use_pthreads() < 0)
		fatalx("libevent without pthreads support");
	clock_gettime(CLOCK_MONOTONIC, &mux->started);

	base = event_base_new();
	if (base == NULL)
		fatalx("event_base_new failed");
	/* Before anything a client can see exists: a SIGTERM that arrives
	 * during start-up is then a clean shutdown once the loop runs. */
	rc = main_signals_open(&signals, mux, base);
	if (rc < 0)
		fatalx("signals: %s", strerror(-rc));
	main_router_limits(&mux->cfg, &lim, state_path, sizeof(state_path));
	main_make_tables(mux, &lim);
	main_load_policy(mux);
	/* Everything that can fail for a reason outside the daemon (a lock
	 * another daemon holds, a socket path, a port) comes before the
	 * threads, and every failure leaves as a clean shutdown would,
	 * removing what the daemon made. */
	main_name_ports(mux);
	if (main_setup_sim_fabric(mux) < 0 || main_open_ports(mux) < 0)
		goto fail;
	/* The sockets last: once they exist, the daemon is ready (its sim
	 * fabric and ports are there).  Each says why it failed. */
	if (capture_set_init(mux) < 0)
		fatalx("cannot set up captures");
	if (listener_start(mux, base) < 0 || status_listen(mux) < 0 ||
	    admin_listen(mux, base) < 0)
		goto fail;
	listen_fds_close_unclaimed(mux->listen_fds);

	main_start_threads(mux);
	service = main_service_timer(mux, base);
	event_base_dispatch(base);
	sdnotify("STOPPING=1\nSTATUS=stopping");
	if (service)
		event_free(service);
	main_stop_threads(mux);
	exit_code = 0;
fail:
	main_release(mux, &signals, base);
	mux_free(mux);
	if (exit_code)
		log_warnx("rdmacm-muxd: not started");
	else
		log_info("rdmacm-muxd: exiting");
	log_close();
	return exit_code;
}
