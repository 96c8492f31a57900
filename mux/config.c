// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The daemon's configuration.  One table of options serves the command
 * line and the configuration file (a JSON object parsed by jansson, keys
 * named as the long options), so that every option exists in both and is
 * checked by the same code.  Errors are collected, not fatal: --check-config
 * reports every one, start-up refuses to run with any, a reload keeps the
 * running configuration.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mux/mux.h"
#include "common/json_file.h"
#include "common/number.h"
#include "common/unix_socket.h"

enum config_kind {
	CK_UINT,      /* unsigned field, decimal */
	CK_LIVE_UINT, /* _Atomic unsigned field: changes on reload */
	CK_INT,       /* int field */
	CK_MODE,      /* mode_t, octal */
	CK_PATH,      /* const char * */
	CK_USER,      /* uid_t */
	CK_GROUP,     /* gid_t */
	CK_LEVEL,     /* log level name */
	CK_TARGET,    /* log target */
	CK_LIST,      /* repeatable: each value through add() */
	CK_SWITCH,    /* takes no value: add(cfg, NULL, ...) */
};

/* Options only the command line has. */
#define CONFIG_CLI_ONLY 0x1
/* Takes effect on SIGHUP (the rest need a restart). */
#define CONFIG_RELOAD 0x2

struct config_option {
	const char *name;
	int short_opt;
	enum config_kind kind;
	size_t offset;
	long min, max;
	unsigned flags;
	int (*add)(struct mux_config *cfg, const char *arg, char *err,
		   size_t errlen);
	/* --help's words: the value's name (NULL for a switch) and what the
	 * option does, a line of at most 48 columns each. */
	const char *arg;
	const char *help;
};

static int config_add_umad_port(struct mux_config *cfg, const char *arg,
				char *err, size_t errlen);
static int config_add_sim_port(struct mux_config *cfg, const char *arg,
			       char *err, size_t errlen);
static int config_add_qemu_socket(struct mux_config *cfg, const char *arg,
				  char *err, size_t errlen);
static int config_set_roce_version(struct mux_config *cfg, const char *arg,
				   char *err, size_t errlen);
static int config_set_ud_sender(struct mux_config *cfg, const char *arg,
				char *err, size_t errlen);
static int config_syslog(struct mux_config *cfg, const char *arg, char *err,
			 size_t errlen);

#define F(field) offsetof(struct mux_config, field)
#define MS_MAX (3600L * 1000)

/*
 * Every option of the daemon, once: its name (the file's key), value,
 * range, whether a reload applies it, and its line of --help, which lists
 * them in this order.  A file's keys are applied in it too: ports before
 * what names them.  Switches set their int field to min (--syslog through
 * add()); --check-config takes its FILE before getopt sees it.
 */
static const struct config_option config_options[] = {
	{ "config", 'c', CK_PATH, F(config_path), 0, 0, CONFIG_CLI_ONLY, NULL,
	  "FILE",
	  "options from FILE (JSON; default\n" MUX_DEFAULT_CONFIG
	  " if it exists;\n"
	  "\"none\": no file); the command line wins" },
	{ "check-config", 0, CK_SWITCH, F(check_config), 1, 0, CONFIG_CLI_ONLY,
	  NULL, "[FILE]",
	  "validate FILE (default: --config's) with the\n"
	  "command line, print each error, exit 0 or 1" },
	{ "port", 'p', CK_LIST, 0, 0, 0, 0, config_add_umad_port, "DEV:PORT",
	  "serve a real RDMA port through umad (repeatable)" },
	{ "sim-port", 0, CK_LIST, 0, 0, 0, 0, config_add_sim_port,
	  "NAME[=GIDS]",
	  "serve a simulated port (repeatable); GIDS is a\n"
	  "comma-separated GID table, GID*N for N in a\n"
	  "row (at most 4096; default: 8 GIDs\n"
	  "fd53:494d::N:1 .. fd53:494d::N:8,\n"
	  "N = port index + 1)" },
	{ "roce-version", 0, CK_LIST, 0, 0, 0, 0, config_set_roce_version,
	  "DEV:PORT=V",
	  "RoCE version (1 or 2) whose GID index the\n"
	  "daemon sends from where an address is in the\n"
	  "port's table twice (default 2)" },
	{ "ud-sender", 0, CK_LIST, 0, 0, 0, 0, config_set_ud_sender, "DEV:PORT",
	  "send clients' MADs on PORT from UD QPs of the\n"
	  "daemon's own, not through umad (opt-in; needs\n"
	  "CAP_NET_RAW on Linux 6.4 and later)" },
	{ "qemu-socket", 0, CK_LIST, 0, 0, 0, 0, config_add_qemu_socket,
	  "PORT[=PATH]",
	  "also serve QEMU's pvrdma on PORT in the\n"
	  "protocol of QEMU's old rdmacm-mux (default\n"
	  "PATH /var/run/rdmacm-mux-DEV-PORTNUM, as it did)" },
	{ "sim-fabric", 0, CK_PATH, F(sim_fabric), 0, 0, 0, NULL, "DIR",
	  "directory shared by sim ports of all daemons\n"
	  "that form one simulated fabric (default: private)" },
	{ "run-dir", 0, CK_PATH, F(run_dir), 0, 0, 0, NULL, "DIR",
	  "where the locks of real ports live (default\n" PROTO_DEFAULT_RUN_DIR
	  "; sockets lock PATH.lock)" },
	{ "state-file", 0, CK_PATH, F(state_path), 0, 0, 0, NULL, "PATH",
	  "connection state kept across restarts (default\n"
	  "SOCKET.state; \"none\": forgotten at exit)" },
	{ "resume-grace-ms", 0, CK_UINT, F(resume_grace_ms), 0, 24 * MS_MAX, 0,
	  NULL, "MS",
	  "how long clients of a previous daemon have to\n"
	  "come back for their connections (default 60000)" },
	{ "socket", 's', CK_PATH, F(socket_path), 0, 0, 0, NULL, "PATH",
	  "client socket (default " PROTO_DEFAULT_SOCKET ")" },
	{ "socket-mode", 0, CK_MODE, F(socket_mode), 0, 0777, 0, NULL, "MODE",
	  "octal mode of the client socket (default 0660)" },
	{ "socket-owner", 0, CK_USER, F(socket_owner), 0, 0, 0, NULL, "USER",
	  "owner of the client socket (default: the daemon's)" },
	{ "socket-group", 0, CK_GROUP, F(socket_group), 0, 0, 0, NULL, "GROUP",
	  "group of the client socket (default: the daemon's)" },
	{ "status-socket", 'S', CK_PATH, F(status_path), 0, 0, 0, NULL, "PATH",
	  "read-only status socket (default\n" PROTO_DEFAULT_STATUS_SOCKET
	  ")" },
	{ "status-mode", 0, CK_MODE, F(status_mode), 0, 0777, 0, NULL, "MODE",
	  "octal mode of the status socket (default 0660)" },
	{ "status-group", 0, CK_GROUP, F(status_group), 0, 0, 0, NULL, "GROUP",
	  "group of the status socket" },
	{ "status-timeout-ms", 0, CK_LIVE_UINT, F(status_timeout_ms), 10,
	  MS_MAX, CONFIG_RELOAD, NULL, "MS",
	  "drop a status reader that takes less than\n"
	  "4 KiB of its answer in MS (default 5000)" },
	{ "admin-socket", 'A', CK_PATH, F(admin_path), 0, 0, 0, NULL, "PATH",
	  "root-only control socket (disconnect a client,\n"
	  "reload the policy); default: none" },
	{ "policy", 'P', CK_PATH, F(policy_path), 0, 0, 0, NULL, "FILE",
	  "who may connect and do what (JSON, see\n"
	  "rdmacm-mux-policy(5)); default: only the daemon's\n"
	  "own user and root" },
	{ "workers", 'w', CK_INT, F(workers), 1, MUX_MAX_WORKERS, 0, NULL, "N",
	  "worker threads (default 2)" },
	{ "poll-us", 0, CK_LIVE_UINT, F(poll_us), 0, 1000, CONFIG_RELOAD, NULL,
	  "US",
	  "a worker polls for US after input before it\n"
	  "sleeps: latency for CPU (default 0: never)" },
	/* Twice this (this life's owners and the last one's) fits the
	 * connection table's 16-bit owner. */
	{ "max-clients", 0, CK_LIVE_UINT, F(max_clients), 1, 32767,
	  CONFIG_RELOAD, NULL, "N", "clients at once (default 1024)" },
	{ "max-clients-per-uid", 0, CK_LIVE_UINT, F(max_clients_per_uid), 1,
	  1 << 20, CONFIG_RELOAD, NULL, "N",
	  "clients of one uid at once (default: half of\n"
	  "--max-clients)" },
	{ "hello-timeout-ms", 0, CK_LIVE_UINT, F(hello_timeout_ms), 10, MS_MAX,
	  CONFIG_RELOAD, NULL, "MS",
	  "close a connection that has not completed\n"
	  "hello in MS (default 5000)" },
	{ "max-gids", 0, CK_LIVE_UINT, F(max_gids_per_client), 1, 1 << 16,
	  CONFIG_RELOAD, NULL, "N", "GIDs per client (default 64)" },
	{ "max-comm-ids", 0, CK_LIVE_UINT, F(max_comm_ids_per_client), 1,
	  1 << 24, CONFIG_RELOAD, NULL, "N",
	  "connections per client: those it started or\n"
	  "answered, until they end (default 4096)" },
	{ "max-peer-records", 0, CK_LIVE_UINT, F(max_peer_records), 1, 1 << 24,
	  CONFIG_RELOAD, NULL, "N",
	  "peers' REQs no client has answered yet, per\n"
	  "port (default 65536; charged to no client)" },
	{ "max-peer-records-per-source", 0, CK_LIVE_UINT,
	  F(max_peer_records_per_source), 1, 1 << 24, CONFIG_RELOAD, NULL, "N",
	  "the same per source GID (default 4096)" },
	{ "max-timewait", 0, CK_LIVE_UINT, F(max_timewait), 1, 1 << 24,
	  CONFIG_RELOAD, NULL, "N",
	  "ended connections draining, in all; above it\n"
	  "the oldest leave early (default 65536)" },
	{ "max-frame", 0, CK_UINT, F(max_payload),
	  PROTO_MAD_ADDR_SIZE + PROTO_MAD_MAX, PROTO_MAX_PAYLOAD_LIMIT, 0, NULL,
	  "BYTES", "largest frame a client may send (default 65536)" },
	{ "client-queue", 0, CK_LIVE_UINT, F(client_outq_max), 4096, 1L << 30,
	  CONFIG_RELOAD, NULL, "BYTES",
	  "output queued to one client before its inbound\n"
	  "MADs are dropped (default 1048576)" },
	{ "handshake-timeout-ms", 0, CK_UINT, F(handshake_ms), 1, MS_MAX, 0,
	  NULL, "MS",
	  "how long a handshake or teardown without\n"
	  "progress keeps its comm-ID mapping (default\n"
	  "60000; an MRA adds its Service Timeout)" },
	{ "timewait-ms", 0, CK_UINT, F(timewait_ms), 0, MS_MAX, 0, NULL, "MS",
	  "how long an ended connection's mapping drains\n"
	  "after DREP or REJ (default 10000)" },
	{ "log-level", 0, CK_LEVEL, F(log_level), 0, 0, CONFIG_RELOAD, NULL,
	  "LEVEL", "err, warning, info (default) or debug" },
	{ "log-target", 0, CK_TARGET, F(log_target), 0, 0, 0, NULL, "TARGET",
	  "auto (default: the journal when stderr is\n"
	  "connected to it, else stderr), stderr, syslog,\n"
	  "journal or journal:PATH" },
	{ "syslog", 0, CK_SWITCH, 0, 0, 0, CONFIG_CLI_ONLY, config_syslog, NULL,
	  "the same as --log-target syslog" },
	{ "verbose", 'v', CK_SWITCH, F(log_level), LOG_LVL_DEBUG, 0,
	  CONFIG_CLI_ONLY, NULL, NULL, "--log-level debug" },
	{ "version", 'V', CK_SWITCH, F(show_version), 1, 0, CONFIG_CLI_ONLY,
	  NULL, NULL, "print the version and exit" },
	{ "help", 'h', CK_SWITCH, F(show_help), 1, 0, CONFIG_CLI_ONLY, NULL,
	  NULL, "this text" },
};

#define NOPTIONS (sizeof(config_options) / sizeof(config_options[0]))

void config_defaults(struct mux_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->config_path = MUX_DEFAULT_CONFIG;
	cfg->socket_path = PROTO_DEFAULT_SOCKET;
	cfg->status_path = PROTO_DEFAULT_STATUS_SOCKET;
	cfg->run_dir = PROTO_DEFAULT_RUN_DIR;
	cfg->socket_mode = 0660;
	cfg->socket_owner = (uid_t)-1;
	cfg->socket_group = (gid_t)-1;
	cfg->status_group = (gid_t)-1;
	cfg->status_mode = 0660;
	cfg->workers = 2;
	cfg->max_clients = 1024;
	cfg->max_clients_per_uid = 0; /* half of max_clients, once known */
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
	cfg->log_level = LOG_LVL_INFO;
	cfg->log_target = "auto";
}

void config_free(struct mux_config *cfg)
{
	int i;

	for (i = 0; i < cfg->nports; i++)
		free(cfg->ports[i].gids);
	cfg->nports = 0;
	json_decref(cfg->file);
	cfg->file = NULL;
}

static void config_error(struct config_errors *errs, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void config_error(struct config_errors *errs, const char *fmt, ...)
{
	va_list ap;

	if (errs->n < CONFIG_MAX_ERRORS) {
		va_start(ap, fmt);
		vsnprintf(errs->msg[errs->n], sizeof(errs->msg[0]), fmt, ap);
		va_end(ap);
	}
	errs->n++;
}

/* A number an admin typed: digits only (number_parse()), in [min, max],
 * 0 <= min. */
static int config_num(const char *s, long min, long max, int base, long *out,
		      char *err, size_t errlen)
{
	unsigned long long v;

	if (number_parse(s, base, (unsigned long long)min,
			 (unsigned long long)max, &v) < 0) {
		if (base == 8)
			snprintf(err, errlen,
				 "'%s' is not an octal mode in [0, %lo]", s,
				 max);
		else
			snprintf(err, errlen,
				 "'%s' is not a number in [%ld, %ld]", s, min,
				 max);
		return -EINVAL;
	}
	*out = (long)v;
	return 0;
}

static int config_add_umad_port(struct mux_config *cfg, const char *arg,
				char *err, size_t errlen)
{
	struct port_spec *ps;
	const char *colon = strrchr(arg, ':');
	long num;

	if (cfg->nports >= MUX_MAX_PORTS) {
		snprintf(err, errlen, "at most %d ports", MUX_MAX_PORTS);
		return -E2BIG;
	}
	if (colon == NULL || colon == arg || (colon - arg) >= 20 ||
	    config_num(colon + 1, 1, 255, 10, &num, err, errlen) < 0) {
		snprintf(
			err, errlen,
			"'%s': expected DEV:PORT with DEV under 20 characters and PORT in [1, 255], e.g. rxe0:1",
			arg);
		return -EINVAL;
	}
	ps = &cfg->ports[cfg->nports++];
	memset(ps, 0, sizeof(*ps));
	ps->kind = PORT_SPEC_UMAD;
	snprintf(ps->name, sizeof(ps->name), "%.*s", (int)(colon - arg), arg);
	ps->port_num = (int)num;
	ps->roce_version = 2;
	return 0;
}

/* PORT[=PATH]: PORT as --port or --sim-port named it; the default path is
 * the old rdmacm-mux's, /var/run/rdmacm-mux-DEV-PORTNUM, so that existing
 * QEMU and libvirt configurations work unchanged. */
static int config_add_qemu_socket(struct mux_config *cfg, const char *arg,
				  char *err, size_t errlen)
{
	static const char prefix[] = "/var/run/rdmacm-mux-";
	const char *eq = strchr(arg, '=');
	struct qemu_socket_spec *q;
	size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
	char *c;

	if (cfg->nqemu >= MUX_MAX_PORTS) {
		snprintf(err, errlen, "at most %d QEMU sockets", MUX_MAX_PORTS);
		return -E2BIG;
	}
	q = &cfg->qemu[cfg->nqemu];
	if (n == 0 || n >= sizeof(q->port)) {
		snprintf(err, errlen, "'%s': expected PORT[=PATH]", arg);
		return -EINVAL;
	}
	memcpy(q->port, arg, n);
	q->port[n] = 0;
	if (eq) {
		if (strlen(eq + 1) == 0 || strlen(eq + 1) >= sizeof(q->path)) {
			snprintf(err, errlen,
				 "'%s': PATH must be 1..%zu characters", arg,
				 sizeof(q->path) - 1);
			return -EINVAL;
		}
		snprintf(q->path, sizeof(q->path), "%s", eq + 1);
	} else {
		if (sizeof(prefix) + strlen(q->port) > sizeof(q->path)) {
			snprintf(err, errlen, "'%s': port name too long", arg);
			return -ENAMETOOLONG;
		}
		memcpy(q->path, prefix, sizeof(prefix) - 1);
		memcpy(q->path + sizeof(prefix) - 1, q->port,
		       strlen(q->port) + 1);
		for (c = q->path + strlen(prefix); *c; c++)
			if (*c == ':')
				*c = '-';
	}
	cfg->nqemu++;
	return 0;
}

/* DEV:PORT=1|2, for a port given before it. */
static int config_set_roce_version(struct mux_config *cfg, const char *arg,
				   char *err, size_t errlen)
{
	const char *eq = strchr(arg, '=');
	char name[64];
	int i;

	if (eq == NULL || (eq[1] != '1' && eq[1] != '2') || eq[2] != 0) {
		snprintf(err, errlen, "'%s': expected DEV:PORT=1 or DEV:PORT=2",
			 arg);
		return -EINVAL;
	}
	for (i = 0; i < cfg->nports; i++) {
		struct port_spec *ps = &cfg->ports[i];

		config_port_name(ps, name, sizeof(name));
		if (ps->kind == PORT_SPEC_UMAD &&
		    strlen(name) == (size_t)(eq - arg) &&
		    strncmp(name, arg, (size_t)(eq - arg)) == 0) {
			ps->roce_version = eq[1] - '0';
			return 0;
		}
	}
	snprintf(err, errlen, "'%s': no port %.*s", arg, (int)(eq - arg), arg);
	return -ENOENT;
}

/* DEV:PORT, a umad port given before it. */
static int config_set_ud_sender(struct mux_config *cfg, const char *arg,
				char *err, size_t errlen)
{
	char name[64];
	int i;

	for (i = 0; i < cfg->nports; i++) {
		struct port_spec *ps = &cfg->ports[i];

		config_port_name(ps, name, sizeof(name));
		if (ps->kind == PORT_SPEC_UMAD && strcmp(name, arg) == 0) {
			ps->ud_sender = 1;
			return 0;
		}
	}
	snprintf(err, errlen,
		 "'%s': no umad port of that name (give --port first)", arg);
	return -ENOENT;
}

/* GID, or GID*N for N consecutive ones (the low 32 bits counting up). */
static int config_add_sim_gids(struct port_spec *ps, char *list, char *err,
			       size_t errlen)
{
	char *tok, *save = NULL;
	long n, i;

	for (tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *star = strchr(tok, '*');
		struct gid g;

		n = 1;
		if (star) {
			*star = '\0';
			if (config_num(star + 1, 1, MUX_SIM_MAX_GIDS, 10, &n,
				       err, errlen))
				return -EINVAL;
		}
		if (gid_parse(tok, &g)) {
			snprintf(err, errlen, "'%s' is not a GID", tok);
			return -EINVAL;
		}
		if (ps->ngids + n > MUX_SIM_MAX_GIDS) {
			snprintf(err, errlen, "at most %d GIDs",
				 MUX_SIM_MAX_GIDS);
			return -E2BIG;
		}
		for (i = 0; i < n; i++) {
			uint32_t low = (uint32_t)g.raw[12] << 24 |
				       (uint32_t)g.raw[13] << 16 |
				       (uint32_t)g.raw[14] << 8 | g.raw[15];

			ps->gids[ps->ngids++] = g;
			low++;
			g.raw[12] = (uint8_t)(low >> 24);
			g.raw[13] = (uint8_t)(low >> 16);
			g.raw[14] = (uint8_t)(low >> 8);
			g.raw[15] = (uint8_t)low;
		}
	}
	return 0;
}

static int config_add_sim_port(struct mux_config *cfg, const char *arg,
			       char *err, size_t errlen)
{
	struct port_spec *ps;
	char *copy, *eq;
	int i, rc = 0;

	if (cfg->nports >= MUX_MAX_PORTS) {
		snprintf(err, errlen, "at most %d ports", MUX_MAX_PORTS);
		return -E2BIG;
	}
	copy = strdup(arg);
	if (copy == NULL)
		return -ENOMEM;
	eq = strchr(copy, '=');
	if (eq)
		*eq = '\0';
	if (copy[0] == '\0' || strlen(copy) >= 32 || strpbrk(copy, "/:. ")) {
		snprintf(
			err, errlen,
			"'%s': NAME must be 1-31 characters without '/', ':', '.' or spaces",
			arg);
		free(copy);
		return -EINVAL;
	}
	ps = &cfg->ports[cfg->nports];
	memset(ps, 0, sizeof(*ps));
	ps->kind = PORT_SPEC_SIM;
	snprintf(ps->name, sizeof(ps->name), "%s", copy);
	ps->gids = calloc(MUX_SIM_MAX_GIDS, sizeof(*ps->gids));
	if (ps->gids == NULL) {
		free(copy);
		return -ENOMEM;
	}
	if (eq) {
		rc = config_add_sim_gids(ps, eq + 1, err, errlen);
	} else {
		/* fd53:494d::N:1 .. N:8, N the port's index + 1 */
		for (i = 0; i < 8; i++) {
			char text[64];

			snprintf(text, sizeof(text), "fd53:494d::%x:%x",
				 cfg->nports + 1, i + 1);
			gid_parse(text, &ps->gids[ps->ngids++]);
		}
	}
	free(copy);
	if (rc < 0) {
		free(ps->gids);
		ps->gids = NULL;
		return rc;
	}
	cfg->nports++;
	return 0;
}

static void *config_field(struct mux_config *cfg, const struct config_option *o)
{
	return (char *)cfg + o->offset;
}

/* A list option given again replaces the list from an earlier source
 * (the command line wins over the file).  Ports name what the others
 * refer to: new ports drop the file's QEMU sockets as well. */
static void config_list_reset(struct mux_config *cfg,
			      const struct config_option *o)
{
	int i;

	if (o->add == config_add_umad_port || o->add == config_add_sim_port) {
		for (i = 0; i < cfg->nports; i++)
			free(cfg->ports[i].gids);
		cfg->nports = 0;
		cfg->nqemu = 0;
	} else if (o->add == config_add_qemu_socket) {
		cfg->nqemu = 0;
	}
}

/* A user or group by name (found: its id, else -1) or by number. */
static int config_account(const char *value, long found, const char *what,
			  long *id, char *err, size_t errlen)
{
	if (found >= 0) {
		*id = found;
		return 0;
	}
	if (config_num(value, 0, 0x7fffffff, 10, id, err, errlen) < 0) {
		snprintf(err, errlen, "'%s' is neither a %s nor a %cid", value,
			 what, what[0]);
		return -ENOENT;
	}
	return 0;
}

static int config_set(struct mux_config *cfg, const struct config_option *o,
		      const char *value, char *err, size_t errlen)
{
	void *field = config_field(cfg, o);
	struct passwd *pw;
	struct group *gr;
	long v;
	int rc;

	switch (o->kind) {
	case CK_UINT:
	case CK_LIVE_UINT:
	case CK_INT:
		rc = config_num(value, o->min, o->max, 10, &v, err, errlen);
		if (rc < 0)
			return rc;
		if (o->kind == CK_INT)
			*(int *)field = (int)v;
		else if (o->kind == CK_UINT)
			*(unsigned *)field = (unsigned)v;
		else
			atomic_store((_Atomic unsigned *)field, (unsigned)v);
		return 0;
	case CK_MODE:
		rc = config_num(value, o->min, o->max, 8, &v, err, errlen);
		if (rc == 0)
			*(mode_t *)field = (mode_t)v;
		return rc;
	case CK_PATH:
		if (value[0] == '\0' || strlen(value) >= PATH_MAX) {
			snprintf(err, errlen, "a path of 1..%d characters",
				 PATH_MAX - 1);
			return -EINVAL;
		}
		*(const char **)field = value;
		return 0;
	case CK_USER:
		pw = getpwnam(value);
		rc = config_account(value, pw ? (long)pw->pw_uid : -1, "user",
				    &v, err, errlen);
		if (rc == 0)
			*(uid_t *)field = (uid_t)v;
		return rc;
	case CK_GROUP:
		gr = getgrnam(value);
		rc = config_account(value, gr ? (long)gr->gr_gid : -1, "group",
				    &v, err, errlen);
		if (rc == 0)
			*(gid_t *)field = (gid_t)v;
		return rc;
	case CK_LEVEL:
		rc = log_level_parse(value);
		if (rc < 0) {
			snprintf(err, errlen,
				 "'%s' is not err, warning, info or debug",
				 value);
			return -EINVAL;
		}
		*(int *)field = rc;
		return 0;
	case CK_TARGET:
		if (!log_target_valid(value)) {
			snprintf(
				err, errlen,
				"'%s' is not auto, stderr, syslog, journal or journal:PATH",
				value);
			return -EINVAL;
		}
		*(const char **)field = value;
		return 0;
	case CK_LIST: return o->add(cfg, value, err, errlen);
	case CK_SWITCH:
		if (o->add)
			return o->add(cfg, NULL, err, errlen);
		*(int *)field = (int)o->min;
		return 0;
	}
	return -EINVAL;
}

static int config_syslog(struct mux_config *cfg, const char *arg, char *err,
			 size_t errlen)
{
	(void)arg;
	(void)err;
	(void)errlen;
	cfg->log_target = "syslog";
	return 0;
}

static const struct config_option *config_by_name(const char *name)
{
	size_t i;

	for (i = 0; i < NOPTIONS; i++)
		if (strcmp(config_options[i].name, name) == 0)
			return &config_options[i];
	return NULL;
}

/* A JSON value as the text the command line would have given, if it is
 * of the option's type: a number for the numeric options, a string for
 * the rest (a user or group may be either). */
static int config_json_text(const struct config_option *o, const json_t *v,
			    char *buf, size_t len, const char **out)
{
	int numeric = o->kind == CK_UINT || o->kind == CK_LIVE_UINT ||
		      o->kind == CK_INT;
	int either = o->kind == CK_USER || o->kind == CK_GROUP;

	if (json_is_string(v) && !numeric) {
		*out = json_string_value(v);
		return 0;
	}
	if (json_is_integer(v) && (numeric || either)) {
		snprintf(buf, len, "%lld", (long long)json_integer_value(v));
		*out = buf;
		return 0;
	}
	return -EINVAL;
}

static void config_apply_file_key(struct mux_config *cfg, const char *path,
				  const struct config_option *o, json_t *v,
				  struct config_errors *errs)
{
	char num[32], err[200];
	const char *text;
	size_t i, n = json_is_array(v) ? json_array_size(v) : 1;

	if (o->kind == CK_MODE && !json_is_string(v)) {
		config_error(
			errs,
			"%s: key '%s': give a mode as a string, e.g. \"0660\"",
			path, o->name);
		return;
	}
	if (json_is_array(v) && o->kind != CK_LIST) {
		config_error(errs, "%s: key '%s': one value, not a list", path,
			     o->name);
		return;
	}
	for (i = 0; i < n; i++) {
		json_t *e = json_is_array(v) ? json_array_get(v, i) : v;

		if (config_json_text(o, e, num, sizeof(num), &text) < 0) {
			config_error(errs, "%s: key '%s': expected %s", path,
				     o->name,
				     o->kind == CK_LIST
					     ? "a string or a list of strings"
				     : (o->kind == CK_UINT ||
					o->kind == CK_LIVE_UINT ||
					o->kind == CK_INT)
					     ? "a number"
				     : (o->kind == CK_USER ||
					o->kind == CK_GROUP)
					     ? "a name or a number"
					     : "a string");
			continue;
		}
		if (config_set(cfg, o, text, err, sizeof(err)) < 0)
			config_error(errs, "%s: key '%s': %s", path, o->name,
				     err);
	}
}

/* The file's keys, in the table's order.  A missing default file is no
 * error; a missing named one is. */
static int config_load_file(struct mux_config *cfg, int named,
			    struct config_errors *errs)
{
	const char *path = cfg->config_path;
	json_error_t jerr;

	if (strcmp(path, "none") == 0)
		return 0;
	if (!named && access(path, F_OK) < 0 && errno == ENOENT)
		return 0;
	cfg->file_read = 1;
	cfg->file = json_file_load(path, JSON_REJECT_DUPLICATES, &jerr);
	if (cfg->file == NULL) {
		if (jerr.line > 0)
			config_error(errs, "%s: line %d, column %d: %s", path,
				     jerr.line, jerr.column, jerr.text);
		else
			config_error(errs, "%s: %s", path, jerr.text);
		return -EINVAL;
	}
	return config_apply_json(cfg, path, errs);
}

int config_apply_json(struct mux_config *cfg, const char *path,
		      struct config_errors *errs)
{
	const char *key;
	json_t *v;
	size_t i;

	if (!json_is_object(cfg->file)) {
		config_error(errs, "%s: expected a JSON object of options",
			     path);
		return -EINVAL;
	}
	json_object_foreach(cfg->file, key, v) {
		const struct config_option *o = config_by_name(key);

		if (o == NULL || (o->flags & CONFIG_CLI_ONLY))
			config_error(errs, "%s: key '%s': no such option", path,
				     key);
	}
	for (i = 0; i < NOPTIONS; i++) {
		v = json_object_get(cfg->file, config_options[i].name);
		if (v && !(config_options[i].flags & CONFIG_CLI_ONLY))
			config_apply_file_key(cfg, path, &config_options[i], v,
					      errs);
	}
	return 0;
}

/* getopt's code for the table's entry i: OPT_TABLE + i. */
enum { OPT_TABLE = 2000 };

/* Where --help's descriptions start, as in most GNU tools' usage. */
#define USAGE_HELP_COLUMN 30

static void config_print_option(FILE *f, const struct config_option *o)
{
	char left[80];
	const char *line, *end;

	snprintf(left, sizeof(left), "  %c%c%c --%s%s%s",
		 o->short_opt ? '-' : ' ', o->short_opt ? o->short_opt : ' ',
		 o->short_opt ? ',' : ' ', o->name, o->arg ? " " : "",
		 o->arg ? o->arg : "");
	/* A long one runs into the column, two spaces before its words. */
	fprintf(f, "%-*s  ", USAGE_HELP_COLUMN - 2, left);
	for (line = o->help;; line = end + 1) {
		end = strchr(line, '\n');
		if (line != o->help)
			fprintf(f, "%*s", USAGE_HELP_COLUMN, "");
		fprintf(f, "%.*s\n",
			end ? (int)(end - line) : (int)strlen(line), line);
		if (end == NULL)
			break;
	}
}

void config_print_usage(FILE *f)
{
	size_t i, col;

	fputs("usage: rdmacm-muxd [options] (--port DEV:PORT | --sim-port NAME[=GID,...])...\n"
	      "       rdmacm-muxd --check-config [FILE] [options]\n",
	      f);
	for (i = 0; i < NOPTIONS; i++)
		config_print_option(f, &config_options[i]);
	fputs("SIGHUP reloads the policy and", f);
	col = 29;
	for (i = 0; i < NOPTIONS; i++) {
		const char *sep = col == 29 ? "" : ",";

		if (!(config_options[i].flags & CONFIG_RELOAD))
			continue;
		if (col + 4 + strlen(config_options[i].name) > 78) {
			fprintf(f, "%s\n", sep);
			sep = "";
			col = 0;
		}
		col += (size_t)fprintf(f, "%s --%s", sep,
				       config_options[i].name);
	}
	fputs(".\n", f);
}

/* --check-config takes its FILE as the next word when that is not an
 * option (getopt's optional arguments only take "=FILE"). */
static int config_take_check(int argc, char **argv, int *i,
			     struct mux_config *cfg)
{
	const char *a = argv[*i];

	if (strcmp(a, "--check-config") == 0) {
		cfg->check_config = 1;
		if (*i + 1 < argc && argv[*i + 1][0] != '-') {
			cfg->config_path = argv[++*i];
			cfg->config_named = 1;
		}
		return 1;
	}
	if (strncmp(a, "--check-config=", 15) == 0) {
		cfg->check_config = 1;
		cfg->config_path = a + 15;
		cfg->config_named = 1;
		return 1;
	}
	return 0;
}

void config_port_name(const struct port_spec *ps, char *buf, size_t len)
{
	if (ps->kind == PORT_SPEC_UMAD)
		snprintf(buf, len, "%s:%d", ps->name, ps->port_num);
	else
		snprintf(buf, len, "%s", ps->name);
}

/* A QEMU socket serves a port the daemon has: what start-up would refuse,
 * --check-config refuses. */
static void config_check_qemu_ports(const struct mux_config *cfg,
				    struct config_errors *errs)
{
	char name[64];
	int i, j, found;

	for (i = 0; i < cfg->nqemu; i++) {
		for (j = 0, found = 0; j < cfg->nports && !found; j++) {
			config_port_name(&cfg->ports[j], name, sizeof(name));
			found = strcmp(name, cfg->qemu[i].port) == 0;
		}
		if (!found)
			config_error(errs, "qemu-socket %s: no such port",
				     cfg->qemu[i].port);
	}
}

/* A port given twice: start-up refuses it, so --check-config does. */
static void config_check_ports(const struct mux_config *cfg,
			       struct config_errors *errs)
{
	char a[64], b[64];
	int i, j;

	for (i = 0; i < cfg->nports; i++) {
		config_port_name(&cfg->ports[i], a, sizeof(a));
		for (j = 0; j < i; j++) {
			config_port_name(&cfg->ports[j], b, sizeof(b));
			if (strcmp(a, b) == 0) {
				config_error(errs, "port %s given twice", a);
				break;
			}
		}
	}
}

/* The sockets the daemon listens on: each a path bind() takes (not the
 * abstract namespace, within sun_path), no two on one path (the second
 * would find the first's lock and refuse to start). */
static void config_check_sockets(const struct mux_config *cfg,
				 struct config_errors *errs)
{
	struct {
		char key[96];
		const char *path;
	} s[3 + MUX_MAX_PORTS];
	int i, j, n = 0;

	snprintf(s[n].key, sizeof(s[n].key), "socket");
	s[n++].path = cfg->socket_path;
	snprintf(s[n].key, sizeof(s[n].key), "status-socket");
	s[n++].path = cfg->status_path;
	if (cfg->admin_path) {
		snprintf(s[n].key, sizeof(s[n].key), "admin-socket");
		s[n++].path = cfg->admin_path;
	}
	for (i = 0; i < cfg->nqemu; i++) {
		snprintf(s[n].key, sizeof(s[n].key), "qemu-socket %s",
			 cfg->qemu[i].port);
		s[n++].path = cfg->qemu[i].path;
	}
	for (i = 0; i < n; i++) {
		if (!unix_socket_path_listenable(s[i].path))
			config_error(
				errs,
				"key '%s': a socket path is 1..%d characters, not starting with '@' (%zu: %.100s)",
				s[i].key, UNIX_SOCKET_PATH_MAX,
				strlen(s[i].path), s[i].path);
		for (j = 0; j < i; j++)
			if (strcmp(s[i].path, s[j].path) == 0)
				config_error(
					errs,
					"keys '%s' and '%s' name one socket, %.200s",
					s[j].key, s[i].key, s[i].path);
	}
}

static void config_finish(struct mux_config *cfg, struct config_errors *errs)
{
	/* One uid never holds every slot unless told it may. */
	if (cfg->max_clients_per_uid == 0)
		cfg->max_clients_per_uid = cfg->max_clients > 1
						   ? cfg->max_clients / 2
						   : 1;
	if (cfg->nports == 0 && errs->n == 0)
		config_error(
			errs,
			"no ports: give --port DEV:PORT or --sim-port NAME (\"port\" or \"sim-port\" in the configuration file)");
	config_check_qemu_ports(cfg, errs);
	config_check_ports(cfg, errs);
	config_check_sockets(cfg, errs);
}

/* The table's option that getopt_long() returned c for, or NULL. */
static const struct config_option *config_option_of(int c)
{
	size_t i;

	if (c >= OPT_TABLE)
		return &config_options[c - OPT_TABLE];
	for (i = 0; i < NOPTIONS; i++)
		if (config_options[i].short_opt == c)
			return &config_options[i];
	return NULL;
}

/* A list the command line gives replaces the file's.  Found before any
 * option is applied, so that their order does not matter: --port and
 * --sim-port fill one list, and a --qemu-socket before the --sim-port it
 * names is kept. */
static void config_reset_cli_lists(struct mux_config *cfg, int nargs,
				   char **args, const char *shortopts,
				   const struct option *longopts)
{
	const struct config_option *o;
	int c;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(nargs, args, shortopts, longopts, NULL)) !=
	       -1) {
		o = config_option_of(c);
		if (o && o->kind == CK_LIST)
			config_list_reset(cfg, o);
	}
}

int config_load(struct mux_config *cfg, int argc, char **argv,
		struct config_errors *errs)
{
	struct option longopts[NOPTIONS + 1];
	char shortopts[64] = ":", err[200];
	char **args;
	size_t i, k = 0;
	int c, j, nargs = 0, so = 1;

	memset(errs, 0, sizeof(*errs));
	args = calloc((size_t)argc + 1, sizeof(*args));
	if (args == NULL) {
		config_error(errs, "out of memory");
		return -ENOMEM;
	}
	/* First pass: the file's name and whether to only check it. */
	for (j = 0; j < argc; j++) {
		if (j > 0 && config_take_check(argc, argv, &j, cfg))
			continue;
		if (j > 0 &&
		    (strcmp(argv[j], "--config") == 0 ||
		     strcmp(argv[j], "-c") == 0) &&
		    j + 1 < argc) {
			cfg->config_path = argv[j + 1];
			cfg->config_named = 1;
		} else if (j > 0 && strncmp(argv[j], "--config=", 9) == 0) {
			cfg->config_path = argv[j] + 9;
			cfg->config_named = 1;
		} else if (j > 0 && strncmp(argv[j], "-c", 2) == 0 &&
			   argv[j][2]) {
			cfg->config_path = argv[j] + 2;
			cfg->config_named = 1;
		}
		args[nargs++] = argv[j];
	}
	for (i = 0; i < NOPTIONS; i++) {
		const struct config_option *o = &config_options[i];

		int has_arg = o->kind == CK_SWITCH ? no_argument
						   : required_argument;

		longopts[k++] = (struct option){ o->name, has_arg, NULL,
						 OPT_TABLE + (int)i };
		if (o->short_opt) {
			shortopts[so++] = (char)o->short_opt;
			if (has_arg == required_argument)
				shortopts[so++] = ':';
		}
	}
	longopts[k] = (struct option){ NULL, 0, NULL, 0 };
	shortopts[so] = '\0';

	config_load_file(cfg, cfg->config_named, errs);
	config_reset_cli_lists(cfg, nargs, args, shortopts, longopts);

	optind = 0; /* GNU: start afresh (a reload parses again) */
	opterr = 0;
	while ((c = getopt_long(nargs, args, shortopts, longopts, NULL)) !=
	       -1) {
		const struct config_option *o = config_option_of(c);

		if (o) {
			if (config_set(cfg, o, optarg, err, sizeof(err)) < 0)
				config_error(errs, "--%s: %s", o->name, err);
			continue;
		}
		switch (c) {
		case ':':
			config_error(errs, "%s: needs a value",
				     args[optind - 1]);
			break;
		default:
			config_error(errs, "%s: no such option",
				     args[optind - 1]);
			break;
		}
	}
	if (optind != nargs)
		config_error(errs, "unexpected argument '%s'", args[optind]);
	free(args);
	if (!cfg->show_help && !cfg->show_version)
		config_finish(cfg, errs);
	return errs->n ? -EINVAL : 0;
}

static uint32_t config_gids_hash(const struct port_spec *ps)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	int i, k;

	for (i = 0; i < ps->ngids; i++)
		for (k = 0; k < 16; k++)
			h = (h ^ ps->gids[i].raw[k]) * 16777619u;
	return h;
}

/* An option's value as text, to compare two configurations and log it. */
static void config_format(struct mux_config *cfg, const struct config_option *o,
			  char *buf, size_t len)
{
	void *field = config_field(cfg, o);
	size_t used = 0;
	int i;

	buf[0] = '\0';
	switch (o->kind) {
	case CK_UINT: snprintf(buf, len, "%u", *(unsigned *)field); break;
	case CK_LIVE_UINT:
		snprintf(buf, len, "%u",
			 atomic_load((_Atomic unsigned *)field));
		break;
	case CK_INT: snprintf(buf, len, "%d", *(int *)field); break;
	case CK_MODE:
		snprintf(buf, len, "%04o", (unsigned)*(mode_t *)field);
		break;
	case CK_PATH:
	case CK_TARGET:
		snprintf(buf, len, "%s",
			 *(const char **)field ? *(const char **)field
					       : "(none)");
		break;
	case CK_USER: snprintf(buf, len, "%d", (int)*(uid_t *)field); break;
	case CK_GROUP: snprintf(buf, len, "%d", (int)*(gid_t *)field); break;
	case CK_LEVEL:
		snprintf(buf, len, "%s", log_level_name(*(int *)field));
		break;
	case CK_SWITCH: break; /* the command line's only */
	case CK_LIST:
		if (o->add == config_add_umad_port ||
		    o->add == config_add_sim_port) {
			int sim = o->add == config_add_sim_port;

			for (i = 0; i < cfg->nports && used < len; i++) {
				struct port_spec *ps = &cfg->ports[i];

				if ((ps->kind == PORT_SPEC_SIM) != sim)
					continue;
				/* A sim port's GIDs by a hash: another table
				 * of the same size is a change too.  (The UD
				 * sender last: the reload's message for a sim
				 * port keeps its old form.) */
				used += (size_t)
					snprintf(buf + used, len - used,
						 "%s%s:%d/%d/%d/%08x/%d",
						 used ? "," : "", ps->name,
						 ps->port_num, ps->roce_version,
						 ps->ngids,
						 config_gids_hash(ps),
						 ps->ud_sender);
			}
		} else if (o->add == config_add_qemu_socket) {
			for (i = 0; i < cfg->nqemu && used < len; i++)
				used += (size_t)snprintf(buf + used, len - used,
							 "%s%s=%s",
							 used ? "," : "",
							 cfg->qemu[i].port,
							 cfg->qemu[i].path);
		}
		break;
	}
}

int config_reload(struct mux_config *live, struct mux_config *fresh,
		  void (*say)(void *arg, const char *name, const char *was,
			      const char *now, int applied),
		  void *arg)
{
	char was[512], now[512];
	size_t i;
	int changed = 0;

	for (i = 0; i < NOPTIONS; i++) {
		const struct config_option *o = &config_options[i];
		void *dst, *src;

		if (o->flags & CONFIG_CLI_ONLY)
			continue;
		config_format(live, o, was, sizeof(was));
		config_format(fresh, o, now, sizeof(now));
		if (strcmp(was, now) == 0)
			continue;
		changed++;
		if (o->flags & CONFIG_RELOAD) {
			dst = config_field(live, o);
			src = config_field(fresh, o);
			if (o->kind == CK_LIVE_UINT)
				atomic_store((_Atomic unsigned *)dst,
					     atomic_load(
						     (_Atomic unsigned *)src));
			else if (o->kind == CK_LEVEL)
				*(int *)dst = *(int *)src;
		}
		say(arg, o->name, was, now, (o->flags & CONFIG_RELOAD) != 0);
	}
	return changed;
}
