// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The process's one link to rdmacm-muxd, made on the first call that
 * needs it (librdmacm opens /dev/infiniband/rdma_cm the same way), and
 * the thread that reads MADs from it and runs the CM's timers.  The
 * state is per process because librdmacm's API is: its ids and channels
 * are the process's, whichever thread made them.
 */
#include "backend/rdmacm/rcm.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static struct rcm_lib *lib_singleton;
static int lib_init_errno;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

uint64_t lib_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int lib_err(int negative_errno)
{
	if (negative_errno >= 0)
		return negative_errno;
	errno = -negative_errno;
	return -1;
}

void lib_kick(struct rcm_lib *lib)
{
	char c = 1;

	if (write(lib->wake[1], &c, 1) < 0 && errno != EAGAIN)
		return; /* full: the thread is awake anyway */
}

uint32_t lib_new_comm_id(struct rcm_lib *lib)
{
	/* Never 0, which means "none" on the wire. */
	if (++lib->next_comm_id == 0)
		lib->next_comm_id = 1;
	return lib->next_comm_id;
}

static void lib_recv(void *user, void *buf_ctx, void *buf, size_t mad_len,
		     const struct muxbe_addr *addr)
{
	struct rcm_lib *lib = user;

	(void)buf_ctx;
	if (addr == NULL)
		return; /* flushed */
	if (mad_len >= MAD_SIZE) {
		pthread_mutex_lock(&lib->lock);
		conn_input(lib, (const uint8_t *)buf + MUXBE_GRH_SIZE, addr);
		pthread_mutex_unlock(&lib->lock);
	}
	muxbe_post_recv(lib->mb, buf, MUXBE_RECV_BUF_MIN, NULL);
}

static void lib_send_done(void *user, void *send_ctx, int status,
			  const char *message)
{
	(void)user;
	(void)send_ctx;
	/* A refused MAD is as good as lost: the CM's retries and timeouts
	 * are what the application sees, as with a lossy fabric. */
	if (status < 0 && getenv("RDMACM_MUX_DEBUG"))
		fprintf(stderr, "rdmacm-mux: the daemon refused a MAD: %s\n",
			message ? message : strerror(-status));
}

/* The daemon is gone for good: to the process it is as if its RDMA
 * device went away, so every id on a port hears DEVICE_REMOVAL (what
 * the kernel's rdma_cm says when a device is removed under its ids) and
 * its connections are over. */
static void lib_disconnected(void *user, int err)
{
	struct rcm_lib *lib = user;
	struct rcm_event *ev;
	struct rcm_id *id;

	fprintf(stderr, "rdmacm-mux: lost rdmacm-muxd: %s\n", strerror(-err));
	pthread_mutex_lock(&lib->lock);
	lib->dead = 1;
	TAILQ_FOREACH(id, &lib->ids, link) {
		if (id->port == NULL || id->listener ||
		    id->state == RCM_ID_DESTROYING)
			continue;
		id->cep.state = CEP_IDLE;
		id->cep.deadline_ms = 0;
		if (id->state == RCM_ID_CONNECTED)
			id->state = RCM_ID_DISCONNECTED;
		ev = channel_new_event(id, RDMA_CM_EVENT_DEVICE_REMOVAL, 0);
		if (ev)
			channel_post(id, ev);
	}
	pthread_mutex_unlock(&lib->lock);
}

static const struct muxbe_callbacks lib_callbacks = {
	.recv = lib_recv,
	.send_done = lib_send_done,
	.disconnected = lib_disconnected,
};

/* Run every id's timers; *next: the earliest left (0: none).  A timer's
 * event queues, never frees an id. */
static void lib_tick(struct rcm_lib *lib, uint64_t now, uint64_t *next)
{
	struct rcm_id *id;

	*next = 0;
	TAILQ_FOREACH(id, &lib->ids, link) {
		cep_tick(&id->cep, now);
		if (id->cep.deadline_ms &&
		    (*next == 0 || id->cep.deadline_ms < *next))
			*next = id->cep.deadline_ms;
	}
}

/* The library's thread: it ends with the process, or once the daemon is
 * gone (every id then has its DEVICE_REMOVAL and no timer left). */
static void *lib_thread(void *arg)
{
	struct rcm_lib *lib = arg;
	struct pollfd pfd[2];
	uint64_t next = 0, now;
	char drain[64];
	int timeout;

	pfd[0].fd = muxbe_fd(lib->mb);
	pfd[0].events = POLLIN;
	pfd[1].fd = lib->wake[0];
	pfd[1].events = POLLIN;
	while (!lib->dead) {
		now = lib_now_ms();
		timeout = next == 0     ? 1000
			  : next <= now ? 0
					: (int)(next - now);
		if (timeout > 1000)
			timeout = 1000;
		poll(pfd, 2, timeout);
		if (pfd[1].revents & POLLIN)
			while (read(lib->wake[0], drain, sizeof(drain)) > 0)
				;
		muxbe_process(lib->mb);
		pthread_mutex_lock(&lib->lock);
		lib_tick(lib, lib_now_ms(), &next);
		pthread_mutex_unlock(&lib->lock);
	}
	return NULL;
}

static int lib_load_port(struct rcm_port *p, json_t *o)
{
	const char *name = json_string_value(json_object_get(o, "name"));
	const char *kind = json_string_value(json_object_get(o, "kind"));
	const char *guid = json_string_value(json_object_get(o, "node_guid"));
	json_t *table = json_object_get(o, "gid_table"), *e;
	const char *colon;
	size_t i;
	int max = -1, idx;

	if (name == NULL || kind == NULL || !json_is_array(table))
		return -EPROTO;
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->index = (uint16_t)json_integer_value(json_object_get(o, "index"));
	p->ca_guid = guid ? strtoull(guid, NULL, 16) : 0;
	colon = strrchr(name, ':');
	if (strcmp(kind, "sim") != 0 && colon) {
		snprintf(p->dev, sizeof(p->dev), "%.*s", (int)(colon - name),
			 name);
		p->port_num = (uint8_t)atoi(colon + 1);
	}
	json_array_foreach(table, i, e) {
		idx = (int)json_integer_value(json_object_get(e, "index"));
		if (idx > max)
			max = idx;
	}
	p->ngids = max + 1;
	p->gids = calloc(p->ngids > 0 ? (size_t)p->ngids : 1,
			 sizeof(struct gid));
	if (p->gids == NULL)
		return -ENOMEM;
	json_array_foreach(table, i, e) {
		const char *type = json_string_value(
			json_object_get(e, "type"));

		idx = (int)json_integer_value(json_object_get(e, "index"));
		/* rdma_cm's default on RoCE is v2: a v1 entry of the same
		 * address stays zero so the v2 index is the one found. */
		if (type && strcmp(type, "RoCE v1") == 0)
			continue;
		if (idx >= 0 &&
		    gid_parse(json_string_value(json_object_get(e, "gid")),
			      &p->gids[idx]) < 0)
			memset(&p->gids[idx], 0, sizeof(struct gid));
	}
	return 0;
}

static int lib_load_ports(struct rcm_lib *lib)
{
	char *reply = NULL;
	json_t *root, *ports, *o;
	size_t i;
	int rc;

	rc = muxbe_request(lib->mb, "{\"op\":\"list_ports\"}", &reply);
	if (rc < 0)
		return rc;
	root = json_loads(reply, 0, NULL);
	free(reply);
	ports = json_object_get(root, "ports");
	if (!json_is_array(ports)) {
		json_decref(root);
		return -EPROTO;
	}
	lib->ports = calloc(json_array_size(ports) + 1, sizeof(*lib->ports));
	if (lib->ports == NULL) {
		json_decref(root);
		return -ENOMEM;
	}
	rc = 0;
	json_array_foreach(ports, i, o) {
		rc = lib_load_port(&lib->ports[lib->nports], o);
		if (rc < 0)
			break;
		lib->nports++;
	}
	json_decref(root);
	return rc;
}

static void lib_init(void)
{
	struct rcm_lib *lib = calloc(1, sizeof(*lib));
	struct muxbe_options o = { 0 };
	char name[64], err[256] = "";
	uint32_t seed = 0;
	int i, rc;

	if (lib == NULL) {
		lib_init_errno = ENOMEM;
		return;
	}
	pthread_mutex_init(&lib->lock, NULL);
	TAILQ_INIT(&lib->ids);
	TAILQ_INIT(&lib->shares);
	if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = (uint32_t)getpid() ^ (uint32_t)lib_now_ms();
	lib->next_comm_id = seed;
	lib->next_port = (uint16_t)(32768 + seed % 28232);
	snprintf(name, sizeof(name), "rdmacm:%d", (int)getpid());
	o.name = name;
	o.cb = &lib_callbacks;
	o.user = lib;
	o.errbuf = err;
	o.errbuf_len = sizeof(err);
	/* A process's connections end with it; a daemon that restarts
	 * under it takes them too, as a kernel CM that went away would. */
	o.no_reconnect = 1;
	rc = muxbe_connect(&o, &lib->mb);
	if (rc < 0) {
		fprintf(stderr,
			"rdmacm-mux: cannot reach rdmacm-muxd at %s: %s\n",
			getenv("RDMACM_MUX_SOCKET")
				? getenv("RDMACM_MUX_SOCKET")
				: MUXBE_DEFAULT_SOCKET,
			err[0] ? err : strerror(-rc));
		lib_init_errno = -rc;
		free(lib);
		return;
	}
	rc = lib_load_ports(lib);
	if (rc == 0 && pipe2(lib->wake, O_CLOEXEC | O_NONBLOCK) < 0)
		rc = -errno;
	for (i = 0; rc == 0 && i < RCM_RECV_BUFS; i++)
		rc = muxbe_post_recv(lib->mb, lib->bufs[i], MUXBE_RECV_BUF_MIN,
				     NULL);
	if (rc == 0)
		rc = -pthread_create(&lib->thread, NULL, lib_thread, lib);
	/* Nobody waits for it: it ends with the process or the daemon. */
	if (rc == 0)
		pthread_detach(lib->thread);
	if (rc < 0) {
		fprintf(stderr, "rdmacm-mux: cannot start: %s\n",
			strerror(-rc));
		muxbe_close(lib->mb);
		lib_init_errno = -rc;
		free(lib);
		return;
	}
	lib_singleton = lib;
}

struct rcm_lib *lib_get(void)
{
	pthread_once(&lib_once, lib_init);
	if (lib_singleton == NULL)
		errno = lib_init_errno ? lib_init_errno : ENODEV;
	return lib_singleton;
}

struct rcm_lib *lib_for(const struct rdma_cm_id *pub)
{
	struct rcm_lib *lib = lib_get();

	if (lib && pub == NULL) {
		errno = EINVAL;
		return NULL;
	}
	return lib;
}

struct rcm_port *lib_port_of_gid(struct rcm_lib *lib, const struct gid *gid,
				 int *gid_index)
{
	int i, j;

	for (i = 0; i < lib->nports; i++)
		for (j = 0; j < lib->ports[i].ngids; j++)
			if (gid_equal(&lib->ports[i].gids[j], gid)) {
				if (gid_index)
					*gid_index = j;
				return &lib->ports[i];
			}
	return NULL;
}

struct ibv_context *lib_port_verbs(struct rcm_port *port)
{
	struct ibv_device **list;
	int i, n;

	if (port->verbs || port->dev[0] == '\0')
		return port->verbs;
	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), port->dev) == 0)
			port->verbs = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	return port->verbs;
}

static struct rcm_share *lib_share_find(struct rcm_lib *lib,
					struct rcm_port *port,
					const struct gid *gid)
{
	struct rcm_share *s;

	TAILQ_FOREACH(s, &lib->shares, link) {
		if (s->port == port && gid_equal(&s->gid, gid))
			return s;
	}
	return NULL;
}

/* A process keeps each address it used shared until it exits, as it
 * keeps the host's addresses with the kernel CM: a connection in
 * timewait, or a listener's child, then never outlives its GID. */
int lib_share(struct rcm_lib *lib, struct rcm_port *port, const struct gid *gid)
{
	struct rcm_share *s;
	int rc;

	pthread_mutex_lock(&lib->lock);
	s = lib_share_find(lib, port, gid);
	pthread_mutex_unlock(&lib->lock);
	if (s)
		return 0;
	rc = muxbe_share_gid(lib->mb, port->name, gid->raw, NULL);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&lib->lock);
	if (lib_share_find(lib, port, gid) == NULL) {
		s = calloc(1, sizeof(*s));
		if (s) {
			s->port = port;
			s->gid = *gid;
			TAILQ_INSERT_TAIL(&lib->shares, s, link);
		}
	}
	pthread_mutex_unlock(&lib->lock);
	return s ? 0 : -ENOMEM;
}

int lib_send_mad(struct rcm_lib *lib, struct rcm_port *port,
		 const struct gid *sgid, const struct gid *dgid,
		 const uint8_t *mad, uint8_t tclass)
{
	struct muxbe_addr a = {
		.port = port->index,
		.grh = 1,
		.hop_limit = 64,
		.traffic_class = tclass,
		.remote_qpn = GSI_QPN,
		.qkey = GSI_QKEY,
	};

	memcpy(a.local_gid, sgid->raw, 16);
	memcpy(a.remote_gid, dgid->raw, 16);
	return muxbe_send_mad(lib->mb, &a, mad, MAD_SIZE, NULL);
}
