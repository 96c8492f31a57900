// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * rdmacm-muxd: options, start-up in dependency order, signals, and a
 * shutdown that mirrors start-up.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "mux.h"
#include "../common/log.h"


static void usage(FILE *f)
{
	fprintf(f,
"usage: rdmacm-muxd [options] (--port DEV:PORT | --sim-port NAME[=GID,...])...\n"
"  -p, --port DEV:PORT         serve a real RDMA port through umad (repeatable)\n"
"      --qemu-socket PORT[=PATH]  also serve QEMU's pvrdma on PORT in the\n"
"                              protocol of QEMU's old rdmacm-mux (default\n"
"                              PATH /var/run/rdmacm-mux-DEV-PORTNUM, as it did)\n"
"      --roce-version DEV:PORT=V  RoCE version (1 or 2) whose GID index the\n"
"                              daemon sends from where an address is in the\n"
"                              port's table twice (default 2)\n"
"      --sim-port NAME[=GIDS]  serve a simulated port (repeatable); GIDS is a\n"
"                              comma-separated GID table, GID*N for N in a\n"
"                              row (at most 4096; default: 8 GIDs\n"
"                              fd53:494d::N:1 .. fd53:494d::N:8, N = port index + 1)\n"
"      --sim-fabric DIR        directory shared by sim ports of all daemons\n"
"                              that form one simulated fabric (default: private)\n"
"  -s, --socket PATH           client socket (default " MUX_DEFAULT_SOCKET ")\n"
"      --state-file PATH       connection state kept across restarts (default\n"
"                              SOCKET.state; \"none\": forgotten at exit)\n"
"      --resume-grace-ms MS    how long clients of a previous daemon have to\n"
"                              come back for their connections (default 60000)\n"
"      --run-dir DIR           where the locks of real ports live (default\n"
"                              " MUX_DEFAULT_RUN_DIR "; sockets lock PATH.lock)\n"
"  -S, --status-socket PATH    read-only status socket (default " MUX_DEFAULT_STATUS ")\n"
"      --socket-mode MODE      octal mode of the client socket (default 0660)\n"
"      --socket-owner USER     owner of the client socket (default: the daemon's)\n"
"      --socket-group GROUP    group of the client socket (default: the daemon's)\n"
"      --status-mode MODE      octal mode of the status socket (default 0660)\n"
"      --status-group GROUP    group of the status socket\n"
"      --status-timeout-ms MS  drop a status reader that has not taken its\n"
"                              answer in MS (default 5000)\n"
"  -A, --admin-socket PATH     root-only control socket (disconnect a client,\n"
"                              reload the policy); default: none\n"
"  -P, --policy FILE           who may connect and do what (JSON, see\n"
"                              rdmacm-muxd(8)); default: only the daemon's own\n"
"                              user and root; SIGHUP reloads it\n"
"  -w, --workers N             worker threads (default 2)\n"
"      --max-clients N         (default 1024)\n"
"      --max-clients-per-uid N  clients of one uid at once (default: half of\n"
"                              --max-clients)\n"
"      --hello-timeout-ms MS   close a connection that has not completed\n"
"                              hello in MS (default 5000)\n"
"      --max-gids N            GIDs per client (default 64)\n"
"      --max-comm-ids N        connections per client: those it started or\n"
"                              answered, until they end (default 4096)\n"
"      --max-peer-records N    peers' REQs no client has answered yet, per\n"
"                              port (default 65536; charged to no client)\n"
"      --max-peer-records-per-source N  the same per source GID (default 4096)\n"
"      --max-timewait N        ended connections draining, in all; above it\n"
"                              the oldest leave early (default 65536)\n"
"      --max-frame BYTES       largest frame a client may send (default 65536)\n"
"      --client-queue BYTES    output queued to one client before its inbound\n"
"                              MADs are dropped (default 1048576)\n"
"      --handshake-timeout-ms MS  how long a handshake or teardown without\n"
"                              progress keeps its comm-ID mapping (default\n"
"                              60000; an MRA adds its Service Timeout)\n"
"      --timewait-ms MS        how long an ended connection's mapping drains\n"
"                              after DREP or REJ (default 10000)\n"
"      --syslog                log to syslog instead of stderr\n"
"  -v, --verbose               more logging (repeatable)\n"
"      --log-level LEVEL       err, warning, info (default) or debug\n"
"  -V, --version               print the version and exit\n"
"  -h, --help                  this text\n");
}

static long parse_num(const char *opt, const char *s, long min, long max, int base)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, base);
	if (errno || *s == '\0' || *end != '\0' || v < min || v > max)
		fatalx("%s: '%s' is not a number in [%ld, %ld]", opt, s, min, max);
	return v;
}

static uid_t parse_user(const char *s)
{
	struct passwd *pw = getpwnam(s);

	if (pw)
		return pw->pw_uid;
	return (uid_t)parse_num("user", s, 0, 0x7fffffff, 10);
}

static gid_t parse_group(const char *s)
{
	struct group *gr = getgrnam(s);

	if (gr)
		return gr->gr_gid;
	return (gid_t)parse_num("group", s, 0, 0x7fffffff, 10);
}

static void add_umad_port(struct mux_config *cfg, const char *arg)
{
	struct port_spec *ps;
	const char *colon = strrchr(arg, ':');

	if (cfg->nports >= MUX_MAX_PORTS)
		fatalx("at most %d ports", MUX_MAX_PORTS);
	if (colon == NULL || colon == arg || (colon - arg) >= 20)
		fatalx("--port '%s': expected DEV:PORT with DEV under 20 characters, e.g. rxe0:1", arg);
	ps = &cfg->ports[cfg->nports++];
	ps->kind = PORT_SPEC_UMAD;
	snprintf(ps->name, sizeof(ps->name), "%.*s", (int)(colon - arg), arg);
	ps->port_num = (int)parse_num("--port", colon + 1, 1, 255, 10);
	ps->roce_version = 2;
}

/* --qemu-socket PORT[=PATH]: PORT as --port or --sim-port named it; the
 * default path is the old rdmacm-mux's, /var/run/rdmacm-mux-DEV-PORTNUM,
 * so that existing QEMU and libvirt configurations work unchanged. */
static void add_qemu_socket(struct mux_config *cfg, const char *arg)
{
	const char *eq = strchr(arg, '=');
	struct qemu_socket_spec *q;
	size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
	char *c;

	if (cfg->nqemu >= MUX_MAX_PORTS)
		fatalx("at most %d --qemu-socket", MUX_MAX_PORTS);
	q = &cfg->qemu[cfg->nqemu++];
	if (n == 0 || n >= sizeof(q->port))
		fatalx("--qemu-socket '%s': expected PORT[=PATH]", arg);
	memcpy(q->port, arg, n);
	q->port[n] = 0;
	if (eq) {
		if (strlen(eq + 1) == 0 || strlen(eq + 1) >= sizeof(q->path))
			fatalx("--qemu-socket '%s': PATH must be 1..%zu characters",
			       arg, sizeof(q->path) - 1);
		snprintf(q->path, sizeof(q->path), "%s", eq + 1);
	} else {
		char path[sizeof(q->path)];
		int w = snprintf(path, sizeof(path), "/var/run/rdmacm-mux-%s", q->port);

		if (w < 0 || (size_t)w >= sizeof(path))
			fatalx("--qemu-socket '%s': port name too long", arg);
		for (c = path + strlen("/var/run/rdmacm-mux-"); *c; c++)
			if (*c == ':')
				*c = '-';
		memcpy(q->path, path, sizeof(path));
	}
}

/* --roce-version DEV:PORT=1|2, after that port's --port. */
static void set_roce_version(struct mux_config *cfg, const char *arg)
{
	const char *eq = strchr(arg, '=');
	char name[64];
	int i;

	if (eq == NULL || (eq[1] != '1' && eq[1] != '2') || eq[2] != 0)
		fatalx("--roce-version '%s': expected DEV:PORT=1 or DEV:PORT=2", arg);
	for (i = 0; i < cfg->nports; i++) {
		struct port_spec *ps = &cfg->ports[i];

		snprintf(name, sizeof(name), "%s:%d", ps->name, ps->port_num);
		if (ps->kind == PORT_SPEC_UMAD && strlen(name) == (size_t)(eq - arg) &&
		    strncmp(name, arg, (size_t)(eq - arg)) == 0) {
			ps->roce_version = eq[1] - '0';
			return;
		}
	}
	fatalx("--roce-version '%s': no --port %.*s before it", arg,
	       (int)(eq - arg), arg);
}

static void add_sim_port(struct mux_config *cfg, const char *arg)
{
	struct port_spec *ps;
	char *copy, *tok, *save = NULL, *eq;
	int i;

	if (cfg->nports >= MUX_MAX_PORTS)
		fatalx("at most %d ports", MUX_MAX_PORTS);
	ps = &cfg->ports[cfg->nports++];
	ps->kind = PORT_SPEC_SIM;
	copy = strdup(arg);
	if (copy == NULL)
		fatal("strdup");
	eq = strchr(copy, '=');
	if (eq)
		*eq = '\0';
	if (copy[0] == '\0' || strlen(copy) >= 32 || strpbrk(copy, "/:. "))
		fatalx("--sim-port '%s': NAME must be 1-31 characters without "
		       "'/', ':', '.' or spaces", arg);
	snprintf(ps->name, sizeof(ps->name), "%s", copy);
	ps->gids = calloc(MUX_SIM_MAX_GIDS, sizeof(*ps->gids));
	if (ps->gids == NULL)
		fatal("calloc");
	if (eq) {
		/* GID, or GID*N for N consecutive ones (the low 32 bits
		 * counting up). */
		for (tok = strtok_r(eq + 1, ",", &save); tok;
		     tok = strtok_r(NULL, ",", &save)) {
			char *star = strchr(tok, '*');
			long n = 1;
			struct gid g;

			if (star) {
				*star = '\0';
				n = parse_num("--sim-port", star + 1, 1, MUX_SIM_MAX_GIDS, 10);
			}
			if (gid_parse(tok, &g))
				fatalx("--sim-port %s: '%s' is not a GID", ps->name, tok);
			if (ps->ngids + n > MUX_SIM_MAX_GIDS)
				fatalx("--sim-port %s: at most %d GIDs", ps->name,
				       MUX_SIM_MAX_GIDS);
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
	} else {
		for (i = 0; i < 8; i++) {
			char text[64];

			snprintf(text, sizeof(text), "fd53:494d::%x:%x",
				 cfg->nports, i + 1);
			gid_parse(text, &ps->gids[ps->ngids++]);
		}
	}
	free(copy);
}

enum {
	OPT_SIM_PORT = 256, OPT_SIM_FABRIC, OPT_SOCKET_MODE, OPT_STATUS_MODE,
	OPT_MAX_CLIENTS, OPT_MAX_GIDS, OPT_MAX_COMM, OPT_CLIENT_QUEUE,
	OPT_TIMEWAIT, OPT_SYSLOG, OPT_HANDSHAKE, OPT_ROCE_VERSION, OPT_QEMU_SOCKET,
	OPT_SOCKET_OWNER,
	OPT_SOCKET_GROUP, OPT_STATUS_GROUP, OPT_MAX_FRAME, OPT_MAX_PEER_RECORDS,
	OPT_MAX_PEER_RECORDS_SOURCE, OPT_MAX_TIMEWAIT, OPT_RUN_DIR,
	OPT_MAX_CLIENTS_PER_UID, OPT_HELLO_TIMEOUT, OPT_STATUS_TIMEOUT, OPT_STATE_FILE,
	OPT_LOG_LEVEL,
	OPT_RESUME_GRACE,
};

static void parse_args(struct mux_config *cfg, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "sim-port", required_argument, NULL, OPT_SIM_PORT },
		{ "roce-version", required_argument, NULL, OPT_ROCE_VERSION },
		{ "qemu-socket", required_argument, NULL, OPT_QEMU_SOCKET },
		{ "sim-fabric", required_argument, NULL, OPT_SIM_FABRIC },
		{ "run-dir", required_argument, NULL, OPT_RUN_DIR },
		{ "state-file", required_argument, NULL, OPT_STATE_FILE },
		{ "resume-grace-ms", required_argument, NULL, OPT_RESUME_GRACE },
		{ "socket", required_argument, NULL, 's' },
		{ "status-socket", required_argument, NULL, 'S' },
		{ "socket-mode", required_argument, NULL, OPT_SOCKET_MODE },
		{ "status-mode", required_argument, NULL, OPT_STATUS_MODE },
		{ "workers", required_argument, NULL, 'w' },
		{ "max-clients", required_argument, NULL, OPT_MAX_CLIENTS },
		{ "max-clients-per-uid", required_argument, NULL, OPT_MAX_CLIENTS_PER_UID },
		{ "hello-timeout-ms", required_argument, NULL, OPT_HELLO_TIMEOUT },
		{ "status-timeout-ms", required_argument, NULL, OPT_STATUS_TIMEOUT },
		{ "max-gids", required_argument, NULL, OPT_MAX_GIDS },
		{ "max-comm-ids", required_argument, NULL, OPT_MAX_COMM },
		{ "client-queue", required_argument, NULL, OPT_CLIENT_QUEUE },
		{ "max-frame", required_argument, NULL, OPT_MAX_FRAME },
		{ "timewait-ms", required_argument, NULL, OPT_TIMEWAIT },
		{ "max-peer-records", required_argument, NULL, OPT_MAX_PEER_RECORDS },
		{ "max-peer-records-per-source", required_argument, NULL,
		  OPT_MAX_PEER_RECORDS_SOURCE },
		{ "max-timewait", required_argument, NULL, OPT_MAX_TIMEWAIT },
		{ "handshake-timeout-ms", required_argument, NULL, OPT_HANDSHAKE },
		{ "socket-owner", required_argument, NULL, OPT_SOCKET_OWNER },
		{ "socket-group", required_argument, NULL, OPT_SOCKET_GROUP },
		{ "status-group", required_argument, NULL, OPT_STATUS_GROUP },
		{ "admin-socket", required_argument, NULL, 'A' },
		{ "policy", required_argument, NULL, 'P' },
		{ "syslog", no_argument, NULL, OPT_SYSLOG },
		{ "verbose", no_argument, NULL, 'v' },
		{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "p:s:S:w:A:P:vVh", opts, NULL)) != -1) {
		switch (c) {
		case 'p': add_umad_port(cfg, optarg); break;
		case OPT_SIM_PORT: add_sim_port(cfg, optarg); break;
		case OPT_ROCE_VERSION: set_roce_version(cfg, optarg); break;
		case OPT_QEMU_SOCKET: add_qemu_socket(cfg, optarg); break;
		case OPT_SIM_FABRIC: cfg->sim_fabric = optarg; break;
		case OPT_RUN_DIR: cfg->run_dir = optarg; break;
		case OPT_STATE_FILE: cfg->state_path = optarg; break;
		case OPT_RESUME_GRACE:
			cfg->resume_grace_ms = (unsigned)parse_num(
				"--resume-grace-ms", optarg, 0, 24 * 3600 * 1000, 10);
			break;
		case 's': cfg->socket_path = optarg; break;
		case 'S': cfg->status_path = optarg; break;
		case OPT_SOCKET_MODE:
			cfg->socket_mode = (mode_t)parse_num("--socket-mode", optarg, 0, 0777, 8);
			break;
		case OPT_STATUS_MODE:
			cfg->status_mode = (mode_t)parse_num("--status-mode", optarg, 0, 0777, 8);
			break;
		case 'w':
			cfg->workers = (int)parse_num("--workers", optarg, 1, MUX_MAX_WORKERS, 10);
			break;
		case OPT_MAX_CLIENTS:
			cfg->max_clients = (unsigned)parse_num("--max-clients", optarg, 1, 1 << 20, 10);
			break;
		case OPT_MAX_CLIENTS_PER_UID:
			cfg->max_clients_per_uid = (unsigned)parse_num(
				"--max-clients-per-uid", optarg, 1, 1 << 20, 10);
			break;
		case OPT_STATUS_TIMEOUT:
			cfg->status_timeout_ms = (unsigned)parse_num(
				"--status-timeout-ms", optarg, 10, 3600 * 1000, 10);
			break;
		case OPT_HELLO_TIMEOUT:
			cfg->hello_timeout_ms = (unsigned)parse_num(
				"--hello-timeout-ms", optarg, 10, 3600 * 1000, 10);
			break;
		case OPT_MAX_GIDS:
			cfg->max_gids_per_client = (unsigned)parse_num("--max-gids", optarg, 1, 1 << 16, 10);
			break;
		case OPT_MAX_COMM:
			cfg->max_comm_ids_per_client = (unsigned)parse_num("--max-comm-ids", optarg, 1, 1 << 24, 10);
			break;
		case OPT_CLIENT_QUEUE:
			cfg->client_outq_max = (size_t)parse_num("--client-queue", optarg, 4096, 1L << 30, 10);
			break;
		case OPT_MAX_FRAME:
			cfg->max_payload = (uint32_t)parse_num("--max-frame", optarg,
				PROTO_MAD_ADDR_SIZE + PROTO_MAD_MAX, PROTO_MAX_PAYLOAD_LIMIT, 10);
			break;
		case OPT_TIMEWAIT:
			cfg->timewait_ms = (unsigned)parse_num("--timewait-ms", optarg, 0, 3600000, 10);
			break;
		case OPT_MAX_PEER_RECORDS:
			cfg->max_peer_records = (unsigned)parse_num("--max-peer-records", optarg, 1, 1 << 24, 10);
			break;
		case OPT_MAX_PEER_RECORDS_SOURCE:
			cfg->max_peer_records_per_source = (unsigned)parse_num(
				"--max-peer-records-per-source", optarg, 1, 1 << 24, 10);
			break;
		case OPT_MAX_TIMEWAIT:
			cfg->max_timewait = (unsigned)parse_num("--max-timewait", optarg, 1, 1 << 24, 10);
			break;
		case OPT_HANDSHAKE:
			cfg->handshake_ms = (unsigned)parse_num("--handshake-timeout-ms", optarg, 1, 3600000, 10);
			break;
		case OPT_SYSLOG: cfg->foreground = 0; break;
		case OPT_SOCKET_OWNER: cfg->socket_owner = parse_user(optarg); break;
		case OPT_SOCKET_GROUP: cfg->socket_group = parse_group(optarg); break;
		case OPT_STATUS_GROUP: cfg->status_group = parse_group(optarg); break;
		case 'A': cfg->admin_path = optarg; break;
		case 'P': cfg->policy_path = optarg; break;
		case 'v': cfg->verbose++; break;
		case OPT_LOG_LEVEL:
			cfg->verbose = log_level_parse(optarg);
			if (cfg->verbose == -100)
				fatalx("--log-level: '%s' is not err, warning, info or debug",
				       optarg);
			break;
		case 'V': printf("rdmacm-muxd %s\n", MUX_VERSION); exit(0);
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind != argc) {
		fprintf(stderr, "rdmacm-muxd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		exit(2);
	}
	/* One uid never holds every slot unless told it may. */
	if (cfg->max_clients_per_uid == 0)
		cfg->max_clients_per_uid = cfg->max_clients > 1 ? cfg->max_clients / 2 : 1;
	if (cfg->nports == 0) {
		fprintf(stderr, "rdmacm-muxd: no ports: give --port DEV:PORT or "
			"--sim-port NAME\n");
		exit(2);
	}
}

static int setup_sim_fabric(struct mux *mux)
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
	if (mkdtemp(tmpl) == NULL) {
		log_warn("sim fabric: mkdtemp");
		return -1;
	}
	snprintf(mux->sim_fabric, sizeof(mux->sim_fabric), "%s", tmpl);
	mux->sim_fabric_owned = 1;
	return 0;
}

static void remove_sim_fabric(struct mux *mux)
{
	if (mux->sim_fabric_owned && rmdir(mux->sim_fabric) < 0)
		log_warn("cannot remove the sim fabric %s", mux->sim_fabric);
	mux->sim_fabric_owned = 0;
}

/* Ports are named first: the QEMU sockets name them, and those are
 * opened before anything outside the daemon's own files changes. */
static int name_ports(struct mux *mux)
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
		if (ps->kind == PORT_SPEC_SIM) {
			p->ops = &port_sim_ops;
			snprintf(p->name, sizeof(p->name), "%s", ps->name);
		} else {
			p->ops = &port_umad_ops;
			snprintf(p->name, sizeof(p->name), "%s:%d", ps->name,
				 ps->port_num);
		}
		if (mux_port_by_name(mux, p->name)) {
			log_warnx("port %s given twice", p->name);
			return -EINVAL;
		}
		mux->nports = i + 1;
	}
	return 0;
}

/* One daemon per port: a sim port's lock is in its fabric, a real
 * port's in the run directory, where every daemon on the host looks. */
static int lock_port(struct mux *mux, struct port *p, const struct port_spec *ps)
{
	char path[sizeof(p->lock.path)], what[96];
	int n;

	if (ps->kind == PORT_SPEC_SIM) {
		n = snprintf(path, sizeof(path), "%s/%s.lock", mux->sim_fabric, ps->name);
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

static int open_ports(struct mux *mux)
{
	const struct port_spec *ps;
	struct port *p;
	int i, rc;

	for (i = 0; i < mux->cfg.nports; i++) {
		ps = &mux->cfg.ports[i];
		p = &mux->ports[i];
		rc = lock_port(mux, p, ps);
		if (rc < 0)
			return rc;
		rc = p->ops->open(p, ps);
		if (rc < 0) {
			log_warnx("port %s: cannot open (%s)", p->name, strerror(-rc));
			return rc;
		}
		log_info("port %d: %s (%s) %s", i, p->name, p->ops->kind,
			 port_state_name(atomic_load(&p->state)));
	}
	return 0;
}

/* Ports that open_ports() reached, in any state. */
static void close_ports(struct mux *mux)
{
	int i;

	for (i = 0; i < mux->nports; i++) {
		if (mux->ports[i].ops && mux->ports[i].priv)
			mux->ports[i].ops->close(&mux->ports[i]);
		lockfile_release(&mux->ports[i].lock);
	}
}

static void on_sighup(evutil_socket_t sig, short what, void *arg)
{
	struct mux *mux = arg;
	char msg[512];
	int rc;

	(void)sig;
	(void)what;
	sdnotify("RELOADING=1");
	rc = mux_policy_reload(mux, msg, sizeof(msg));
	log_info("SIGHUP: policy reload %s: %s", rc ? "failed" : "done", msg);
	sdnotify("READY=1");
}

/* systemd's watchdog and status line (no-ops without systemd). */
static void on_service_tick(evutil_socket_t fd, short what, void *arg)
{
	struct mux *mux = arg;
	struct router_counts rc;

	(void)fd;
	(void)what;
	router_counts(mux->router, &rc);
	sdnotify("%sSTATUS=%u client(s), %u connection(s) established, %u in "
		 "handshake", sdnotify_watchdog_usec() ? "WATCHDOG=1\n" : "",
		 clients_count(&mux->clients), rc.established, rc.handshake);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	log_info("signal %d: shutting down", (int)sig);
	event_base_loopexit(arg, NULL);
}

int main(int argc, char **argv)
{
	struct router_limits lim;
	struct event *sigint, *sigterm, *sighup, *service;
	uint32_t random_operand;
	struct event_base *base;
	char state_path[256];
	uint64_t max_entries;
	int i, exit_code = 1;
	struct mux *mux;

	mux = calloc(1, sizeof(*mux));
	if (mux == NULL)
		return 1;
	config_defaults(&mux->cfg);
	mux->cfg.foreground = 1;
	parse_args(&mux->cfg, argc, argv);
	log_init("rdmacm-muxd", mux->cfg.foreground, mux->cfg.verbose);
	/* Sockets systemd may have handed over (descriptors 3 and up). */
	listen_fds_take(&mux->listen_fds);
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
	sigint = evsignal_new(base, SIGINT, on_signal, base);
	sigterm = evsignal_new(base, SIGTERM, on_signal, base);
	event_add(sigint, NULL);
	event_add(sigterm, NULL);
	lim.max_gids_per_client = mux->cfg.max_gids_per_client;
	lim.max_comm_ids_per_client = mux->cfg.max_comm_ids_per_client;
	lim.timewait_ms = mux->cfg.timewait_ms;
	lim.handshake_ms = mux->cfg.handshake_ms;
	lim.max_peer_records_per_port = mux->cfg.max_peer_records;
	lim.max_peer_records_per_source = mux->cfg.max_peer_records_per_source;
	lim.max_timewait = mux->cfg.max_timewait;
	lim.state_path = NULL;
	if (mux->cfg.state_path == NULL) {
		snprintf(state_path, sizeof(state_path), "%s.state", mux->cfg.socket_path);
		lim.state_path = state_path;
	} else if (strcmp(mux->cfg.state_path, "none") != 0) {
		lim.state_path = mux->cfg.state_path;
	}
	/* Every entry the limits allow, and every owner of this life and
	 * the last one. */
	max_entries = (uint64_t)mux->cfg.max_clients * mux->cfg.max_comm_ids_per_client +
		      (uint64_t)mux->cfg.max_peer_records * (unsigned)mux->cfg.nports +
		      mux->cfg.max_timewait;
	lim.max_entries = max_entries > MUX_STATE_MAX_ENTRIES ? MUX_STATE_MAX_ENTRIES
							      : (unsigned)max_entries;
	lim.max_owners = 2 * mux->cfg.max_clients;
	/* Entries name ports by index: kept only for the same ports. */
	lim.ports_hash = 1469598103934665603ull;        /* FNV-1a */
	for (i = 0; i < mux->cfg.nports; i++) {
		char pn[64];
		const char *c;

		snprintf(pn, sizeof(pn), "%s:%d;", mux->cfg.ports[i].name,
			 mux->cfg.ports[i].kind == PORT_SPEC_SIM ? -1
								  : mux->cfg.ports[i].port_num);
		for (c = pn; *c; c++)
			lim.ports_hash = (lim.ports_hash ^ (uint8_t)*c) * 1099511628211ull;
	}
	/* Host comm IDs are XORed with this, as the kernel CM does, so that
	 * they are not predictable from outside. */
	if (getrandom(&random_operand, sizeof(random_operand), 0) !=
	    (ssize_t)sizeof(random_operand))
		random_operand = (uint32_t)time(NULL) ^ (uint32_t)getpid();
	mux->router = router_new(&lim, random_operand, &port_router_ops, mux);
	if (mux->router == NULL)
		fatalx("cannot set up the routing table");
	clients_init(&mux->clients);
	{
		struct router_counts was;

		if (router_restored(mux->router, &was)) {
			/* New clients never take a previous client's id. */
			mux->clients.next_id = router_max_client_id(mux->router) + 1;
			log_info("connection state %s: %u comm-ID and %u SIDR "
				 "mapping(s) of the previous daemon, kept for its "
				 "clients for %u ms", lim.state_path, was.comm_ids,
				 was.sidr_ids, mux->cfg.resume_grace_ms);
		}
	}
	pthread_mutex_init(&mux->policy_lock, NULL);
	mux->accept_rl = (struct log_ratelimit)LOG_RATELIMIT_INIT(10, 1);
	pthread_mutex_init(&mux->refusal_lock, NULL);
	mux->refusal_rl = (struct log_ratelimit)LOG_RATELIMIT_INIT(10, 1);
	if (mux->cfg.policy_path) {
		char err[512];

		mux->policy = policy_load(mux->cfg.policy_path, err, sizeof(err));
		if (mux->policy == NULL)
			fatalx("policy: %s", err);
	} else {
		mux->policy = policy_default(geteuid());
	}
	log_info("policy: %d rule(s) from %s", mux->policy->nrules,
		 mux->policy->source);
	/* Everything that can fail for a reason outside the daemon (a lock
	 * another daemon holds, a socket path, a port) comes before the
	 * threads, and every failure leaves as a clean shutdown would,
	 * removing what the daemon made. */
	if (name_ports(mux) < 0 || setup_sim_fabric(mux) < 0 || open_ports(mux) < 0)
		goto fail;
	/* The sockets last: once they exist, the daemon is ready (its sim
	 * fabric and ports are there).  Each says why it failed. */
	if (listener_start(mux, base) < 0 || status_listen(mux) < 0 ||
	    admin_listen(mux, base) < 0)
		goto fail;
	listen_fds_close_unclaimed(&mux->listen_fds);

	mux->nworkers = mux->cfg.workers;
	worker_pool_start(mux);
	mux->portio = portio_start(mux);
	if (status_start(mux) < 0)
		fatal("status thread");
	sighup = evsignal_new(base, SIGHUP, on_sighup, mux);
	event_add(sighup, NULL);
	router_resume_grace(mux->router, mux_now_ms() + mux->cfg.resume_grace_ms);

	log_info("rdmacm-muxd %s ready: %d port(s), %d worker(s), clients on %s, "
		 "status on %s", MUX_VERSION, mux->nports, mux->nworkers,
		 mux->cfg.socket_path, mux->cfg.status_path);
	/* Every port's agent is registered and the sockets listen. */
	sdnotify("READY=1\nMAINPID=%d\nSTATUS=%d port(s), clients on %s",
		 (int)getpid(), mux->nports, mux->cfg.socket_path);
	service = event_new(base, -1, EV_PERSIST, on_service_tick, mux);
	if (service) {
		uint64_t wd = sdnotify_watchdog_usec();
		/* Twice per watchdog interval, and the status line every 10 s. */
		struct timeval tv = { 10, 0 };

		if (wd && wd / 2 < 10000000u)
			tv = (struct timeval){ (time_t)(wd / 2000000u),
					       (suseconds_t)(wd / 2 % 1000000u) };
		event_add(service, &tv);
	}

	event_base_dispatch(base);
	sdnotify("STOPPING=1\nSTATUS=stopping");
	if (service)
		event_free(service);

	listener_stop(mux);
	status_close(mux);
	admin_close(mux);
	portio_stop(mux->portio);
	/* The VMs are not going away, the daemon is: closing their sessions
	 * must not tear down their connections at the peers. */
	router_stop_answering(mux->router);
	worker_pool_stop(mux);
	/* Ports' events live on the port thread's base: before it goes. */
	close_ports(mux);
	portio_free(mux->portio);
	event_free(sighup);
	exit_code = 0;
fail:
	/* Whatever made start-up fail, the connections in the state are
	 * not this daemon's to end. */
	router_stop_answering(mux->router);
	close_ports(mux);
	remove_sim_fabric(mux);
	listener_stop(mux);
	status_close(mux);
	admin_close(mux);
	router_free(mux->router);
	clients_fini(&mux->clients);
	policy_unref(mux->policy);
	pthread_mutex_destroy(&mux->policy_lock);
	pthread_mutex_destroy(&mux->refusal_lock);
	event_free(sigint);
	event_free(sigterm);
	event_base_free(base);
	for (i = 0; i < mux->cfg.nports; i++)
		free(mux->cfg.ports[i].gids);
	free(mux);
	if (exit_code)
		log_warnx("rdmacm-muxd: not started");
	else
		log_info("rdmacm-muxd: exiting");
	return exit_code;
}
