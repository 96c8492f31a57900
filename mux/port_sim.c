// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The simulated port: a GID table given on the command line and a
 * "fabric" that is a directory of unix datagram sockets, one per sim port
 * of every daemon sharing it.  A send is offered to every socket in the
 * directory, and a port keeps only datagrams addressed to a GID in its
 * table, as a broadcast LAN would.  Traffic between GIDs of one port is
 * looped back in process, as a NIC loops back to its own addresses.  Like a real wire it
 * is lossy under pressure: a full receiver drops.
 *
 * Test hook: while a file "<fabric>/<name>.down" exists the port is down.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mux/mux.h"
#include "mux/sim_fabric.h"
#include "common/gid_map.h"
#include "common/log.h"

#define SIM_RX_BUDGET 256 /* datagrams per wake-up */

struct sim_port {
	char fabric[256];
	char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char down_path[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];
	int fd;
	struct event *rx_ev;
	int ngids;
	struct gid gids[MUX_SIM_MAX_GIDS];
	/* GID -> its first index, for lookups in O(1): a benchmark's port
	 * has thousands of GIDs.  Written only while the port opens. */
	struct gid_map index;
};

static int port_sim_open(struct port *p, const struct port_spec *spec)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct sim_port *sp = calloc(1, sizeof(*sp));
	int bufsz = 1 << 20, i;

	if (sp == NULL)
		return -ENOMEM;
	p->priv = sp;
	p->roce = 1; /* the sim wire carries RoCE-style GIDs */
	sp->fd = -1;
	snprintf(sp->fabric, sizeof(sp->fabric), "%s", p->mux->sim_fabric);
	if ((size_t)snprintf(sp->sock_path, sizeof(sp->sock_path), "%s/%s.sock",
			     sp->fabric, spec->name) >= sizeof(sp->sock_path)) {
		log_warnx("sim port %s: fabric path too long", spec->name);
		return -ENAMETOOLONG;
	}
	snprintf(sp->down_path, sizeof(sp->down_path), "%.*s.down",
		 (int)(strlen(sp->sock_path) - 5), sp->sock_path);
	sp->ngids = spec->ngids;
	memcpy(sp->gids, spec->gids, sizeof(*sp->gids) * (size_t)spec->ngids);
	gid_map_init(&sp->index, 0);
	for (i = 0; i < sp->ngids; i++)
		if (gid_map_add(&sp->index, 0, &sp->gids[i], (uint64_t)i) ==
		    -ENOMEM)
			return -ENOMEM;
	sp->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (sp->fd < 0)
		return -errno;
	setsockopt(sp->fd, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof(bufsz));
	strcpy(sun.sun_path, sp->sock_path);
	unlink(sp->sock_path);
	if (bind(sp->fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		log_warn("sim port %s: bind %s", spec->name, sp->sock_path);
		return -errno;
	}
	atomic_store(&p->state, access(sp->down_path, F_OK) == 0
					? PORT_STATE_DOWN
					: PORT_STATE_ACTIVE);
	return 0;
}

static int port_sim_gid_index(struct port *p, const struct gid *gid, int type)
{
	struct sim_port *sp = p->priv;
	uint64_t i;

	(void)type; /* one GID, one type */
	return gid_map_get(&sp->index, 0, gid, &i) == 0 ? (int)i : -ENOENT;
}

/* What a datagram addressed to one of our GIDs looks like from here: the
 * sender is remote, the destination GID is ours. */
static void port_sim_receive(struct port *p, const struct proto_mad *wire)
{
	struct proto_mad in;
	struct gid dst;

	memcpy(dst.raw, wire->addr.remote_gid, 16);
	if (port_sim_gid_index(p, &dst, 0) < 0 ||
	    atomic_load(&p->state) != PORT_STATE_ACTIVE)
		return;
	memset(&in, 0, sizeof(in));
	in.addr = wire->addr;
	memcpy(in.addr.local_gid, wire->addr.remote_gid, 16);
	memcpy(in.addr.remote_gid, wire->addr.local_gid, 16);
	in.addr.remote_qpn = GSI_QPN;
	in.addr.qkey = GSI_QKEY;
	in.addr.flags = PROTO_MAD_F_GRH;
	in.addr.lid = 0;
	in.mad_len = wire->mad_len;
	memcpy(in.mad, wire->mad, wire->mad_len);
	port_input(p, &in, 0);
}

static void port_sim_rx(evutil_socket_t fd, short what, void *arg)
{
	struct port *p = arg;
	uint8_t buf[SIM_DGRAM_MAX + 1];
	struct proto_mad wire;
	ssize_t n;
	int budget = SIM_RX_BUDGET;

	(void)what;
	while (budget-- > 0) {
		n = recv(fd, buf, sizeof(buf), 0);
		if (n < 0)
			return;
		if (sim_dgram_decode(buf, (size_t)n, &wire) < 0) {
			atomic_fetch_add(&p->rx_errors, 1);
			continue;
		}
		port_sim_receive(p, &wire);
	}
}

static int port_sim_start(struct port *p, struct event_base *base)
{
	struct sim_port *sp = p->priv;

	sp->rx_ev = event_new(base, sp->fd, EV_READ | EV_PERSIST, port_sim_rx,
			      p);
	return sp->rx_ev ? event_add(sp->rx_ev, NULL) : -ENOMEM;
}

static int port_sim_send(struct port *p, const struct proto_mad *m,
			 int gid_index, unsigned lane)
{
	struct sim_port *sp = p->priv;
	uint8_t buf[SIM_DGRAM_MAX];
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct proto_mad wire = *m;
	struct gid dst;
	struct dirent *de;
	size_t nlen;
	DIR *dir;
	int len;

	(void)lane; /* a datagram socket: nothing to share */

	memcpy(wire.addr.local_gid, sp->gids[gid_index].raw, 16);
	memcpy(dst.raw, wire.addr.remote_gid, 16);
	if (port_sim_gid_index(p, &dst, 0) >= 0) {
		/* Between two GIDs of this port: the port's own loopback,
		 * which never congests (the kernel's unix datagram queue
		 * holds only net.unix.max_dgram_qlen datagrams). */
		port_sim_receive(p, &wire);
		return 0;
	}
	len = sim_dgram_encode(&wire, buf, sizeof(buf));
	if (len < 0)
		return len;
	dir = opendir(sp->fabric);
	if (dir == NULL)
		return -errno;
	while ((de = readdir(dir)) != NULL) {
		nlen = strlen(de->d_name);
		if (nlen < 6 || strcmp(de->d_name + nlen - 5, ".sock") != 0)
			continue;
		if ((size_t)snprintf(sun.sun_path, sizeof(sun.sun_path),
				     "%s/%s", sp->fabric,
				     de->d_name) >= sizeof(sun.sun_path))
			continue;
		/* A full peer loses the datagram, as a congested wire
		 * would (the guest CM retransmits); counted, not silent.
		 * A gone peer (stale socket file) is not a loss. */
		if (sendto(sp->fd, buf, (size_t)len, MSG_DONTWAIT,
			   (struct sockaddr *)&sun, sizeof(sun)) < 0 &&
		    (errno == EAGAIN || errno == ENOBUFS))
			atomic_fetch_add(&p->wire_dropped, 1);
	}
	closedir(dir);
	return 0;
}

static json_t *port_sim_gid_table(struct port *p)
{
	struct sim_port *sp = p->priv;
	json_t *arr = json_array();
	char buf[GID_STRLEN];
	int i;

	for (i = 0; i < sp->ngids; i++)
		json_array_append_new(arr,
				      json_pack("{s:i, s:s}", "index", i, "gid",
						gid_format(&sp->gids[i], buf)));
	return arr;
}

/* The sim port has the default partition only. */
static int port_sim_pkey_count(struct port *p)
{
	(void)p;
	return 1;
}

/* A simulated port's node GUID follows from its name, so that a
 * restarted daemon's port keeps it: FNV-1a, the vendor byte cleared. */
static uint64_t port_sim_node_guid(struct port *p)
{
	uint64_t h = 14695981039346656037ull;
	const char *c;

	for (c = p->name; *c; c++)
		h = (h ^ (uint8_t)*c) * 1099511628211ull;
	return (h & 0x00ffffffffffffffull) | 0x0200000000000000ull;
}

static void port_sim_poll_state(struct port *p)
{
	struct sim_port *sp = p->priv;

	port_set_state(p, access(sp->down_path, F_OK) == 0 ? PORT_STATE_DOWN
							   : PORT_STATE_ACTIVE);
}

static void port_sim_close(struct port *p)
{
	struct sim_port *sp = p->priv;

	if (sp == NULL)
		return;
	if (sp->rx_ev)
		event_free(sp->rx_ev);
	if (sp->fd >= 0) {
		close(sp->fd);
		unlink(sp->sock_path);
	}
	gid_map_fini(&sp->index);
	free(sp);
	p->priv = NULL;
}

/* What a daemon's private fabric holds: its ports' sockets, their lock
 * files and the test hook.  Anything else makes the directory no one's
 * to judge. */
static int port_sim_fabric_entry(int dfd, const char *name, int *locks,
				 int *held)
{
	size_t n = strlen(name);
	struct flock q = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	struct stat st;
	int fd;

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -1;
	if (n > 5 && strcmp(name + n - 5, ".sock") == 0)
		return S_ISSOCK(st.st_mode) ? 0 : -1;
	if (n > 5 && strcmp(name + n - 5, ".down") == 0)
		return S_ISREG(st.st_mode) ? 0 : -1;
	if (n <= 5 || strcmp(name + n - 5, ".lock") != 0 ||
	    !S_ISREG(st.st_mode))
		return -1;
	/* A live daemon holds a write lock on each of its ports' files for
	 * its whole life; the kernel drops it when the daemon dies. */
	fd = openat(dfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	(*locks)++;
	if (fcntl(fd, F_GETLK, &q) < 0 || q.l_type != F_UNLCK)
		(*held)++;
	close(fd);
	return 0;
}

/* dir, one daemon's private fabric, if its owner is provably dead: ours,
 * holding only what a fabric holds, with a lock file per port and none
 * of them held.  An empty one could be a daemon's that has not locked
 * its ports yet: only once it is a minute old.  1 when removed. */
static int port_sim_sweep_one(const char *dir)
{
	int dfd, locks = 0, held = 0, bad = 0;
	struct dirent *de;
	struct stat st;
	DIR *d;

	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return 0;
	if (fstat(dfd, &st) < 0 || st.st_uid != geteuid() ||
	    (d = fdopendir(dfd)) == NULL) {
		close(dfd);
		return 0;
	}
	while (!bad && (de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			bad = port_sim_fabric_entry(dfd, de->d_name, &locks,
						    &held) < 0;
	if (bad || held || (locks == 0 && time(NULL) - st.st_mtime < 60)) {
		closedir(d);
		return 0;
	}
	rewinddir(d);
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			unlinkat(dirfd(d), de->d_name, 0);
	closedir(d);
	return rmdir(dir) == 0;
}

void port_sim_sweep_fabrics(const char *tmp, const char *prefix)
{
	char path[PATH_MAX];
	struct dirent *de;
	size_t plen = strlen(prefix);
	DIR *d = opendir(tmp);
	int n = 0;

	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		if (strncmp(de->d_name, prefix, plen) != 0 ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s", tmp,
				     de->d_name) >= sizeof(path))
			continue;
		n += port_sim_sweep_one(path);
	}
	closedir(d);
	if (n)
		log_info(
			"removed %d sim fabric(s) of daemons that are gone from %s",
			n, tmp);
}

const struct port_ops port_sim_ops = {
	.kind = "sim",
	.open = port_sim_open,
	.start = port_sim_start,
	.send = port_sim_send,
	.gid_index = port_sim_gid_index,
	.gid_table = port_sim_gid_table,
	.pkey_count = port_sim_pkey_count,
	.poll_state = port_sim_poll_state,
	.node_guid = port_sim_node_guid,
	.close = port_sim_close,
};
