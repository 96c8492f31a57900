// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The minimal relay's umad I/O (umad_relay.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/umad.h>
#include <infiniband/verbs.h>

#include "common/cm_mad.h"
#include "common/wire.h"
#include "tests/bench/umad_relay.h"

#define RELAY_CLASS_VERSION 1
#define RELAY_GIDS 256

struct umad_relay {
	char dev[64];
	int port;
	int fd, agent;
	int ngids;
	uint8_t gids[RELAY_GIDS][16];
	uint8_t v2[RELAY_GIDS]; /* a RoCE v2 entry (the lab's GIDs are) */
};

/* The port's GID table, as the daemon reads it (ibv_query_gid_table). */
static void umad_relay_read_gids(struct umad_relay *ur)
{
	struct ibv_gid_entry ents[RELAY_GIDS];
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	ssize_t n = 0, i;

	for (i = 0; list && list[i]; i++)
		if (strcmp(ibv_get_device_name(list[i]), ur->dev) == 0)
			ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (ctx == NULL)
		return;
	n = ibv_query_gid_table(ctx, ents, RELAY_GIDS, 0);
	ibv_close_device(ctx);
	memset(ur->v2, 0, sizeof(ur->v2));
	for (i = 0; i < n; i++) {
		if (ents[i].port_num != (uint32_t)ur->port ||
		    ents[i].gid_index >= RELAY_GIDS)
			continue;
		memcpy(ur->gids[ents[i].gid_index], ents[i].gid.raw, 16);
		ur->v2[ents[i].gid_index] = ents[i].gid_type ==
					    IBV_GID_TYPE_ROCE_V2;
		if ((int)ents[i].gid_index >= ur->ngids)
			ur->ngids = (int)ents[i].gid_index + 1;
	}
}

static int umad_relay_gid_index(struct umad_relay *ur, const uint8_t gid[16])
{
	int pass, i;

	for (pass = 0; pass < 2; pass++) {
		for (i = 0; i < ur->ngids; i++)
			if (ur->v2[i] && memcmp(ur->gids[i], gid, 16) == 0)
				return i;
		umad_relay_read_gids(ur); /* added since */
	}
	return -ENOENT;
}

struct umad_relay *umad_relay_open(const char *port_spec)
{
	long method_mask[16 / sizeof(long)] = { 0 };
	struct umad_relay *ur = calloc(1, sizeof(*ur));
	const char *colon = strrchr(port_spec, ':');

	if (ur == NULL || colon == NULL ||
	    (size_t)(colon - port_spec) >= sizeof(ur->dev)) {
		fprintf(stderr, "umad relay: bad port %s\n", port_spec);
		free(ur);
		return NULL;
	}
	memcpy(ur->dev, port_spec, (size_t)(colon - port_spec));
	ur->port = atoi(colon + 1);
	ur->fd = umad_open_port(ur->dev, ur->port);
	if (ur->fd < 0) {
		fprintf(stderr, "umad relay: cannot open %s: %s\n", port_spec,
			strerror(-ur->fd));
		free(ur);
		return NULL;
	}
	method_mask[0] = 1L << MAD_METHOD_SEND;
	ur->agent = umad_register(ur->fd, MAD_CLASS_CM, RELAY_CLASS_VERSION, 0,
				  method_mask);
	if (ur->agent < 0) {
		fprintf(stderr,
			"umad relay: cannot register class 0x07 version %d on %s\n",
			RELAY_CLASS_VERSION, port_spec);
		umad_close_port(ur->fd);
		free(ur);
		return NULL;
	}
	umad_relay_read_gids(ur);
	return ur;
}

void umad_relay_close(struct umad_relay *ur)
{
	if (ur == NULL)
		return;
	umad_unregister(ur->fd, ur->agent);
	umad_close_port(ur->fd);
	free(ur);
}

int umad_relay_fd(const struct umad_relay *ur)
{
	return ur->fd;
}

int umad_relay_send(struct umad_relay *ur, const struct proto_mad *m)
{
	uint8_t buf[sizeof(struct ib_user_mad) + PROTO_MAD_MAX];
	struct ib_user_mad *um = (struct ib_user_mad *)buf;
	int idx = umad_relay_gid_index(ur, m->addr.local_gid), rc, tries;
	uint8_t *mad;

	if (idx < 0)
		return idx;
	memset(buf, 0, sizeof(struct ib_user_mad));
	um->addr.qpn = htonl(m->addr.remote_qpn);
	um->addr.qkey = htonl(m->addr.qkey);
	um->addr.grh_present = 1;
	um->addr.gid_index = (uint8_t)idx;
	um->addr.hop_limit = m->addr.hop_limit;
	memcpy(um->addr.gid, m->addr.remote_gid, 16);
	mad = umad_get_mad(buf);
	memcpy(mad, m->mad, m->mad_len);
	mad[MAD_OFF_CLASS_VERSION] = RELAY_CLASS_VERSION;
	/* The TID cm.c would give it, as the daemon's sends carry: the
	 * sender's comm ID (the one it answers, when it has none yet, as
	 * a REJ of a REQ), so that one connection's sends share one TID
	 * here as there.  ib_umad refuses a TID it is still sending
	 * (EINVAL): such a send waits, as port_umad.c's do. */
	wire_put32(mad + MAD_OFF_TID + 4, cm_mad_sender_id(mad)
						  ? cm_mad_sender_id(mad)
						  : cm_mad_receiver_id(mad));
	for (tries = 0;; tries++) {
		errno = 0;
		rc = umad_send(ur->fd, ur->agent, buf, m->mad_len, 0, 0);
		if (rc == 0 || errno != EINVAL || tries == 100)
			break;
		nanosleep(&(struct timespec){ .tv_nsec = 100000 }, NULL);
	}
	return rc == 0 ? 0 : -(errno ? errno : EIO);
}

int umad_relay_recv(struct umad_relay *ur, struct proto_mad *m)
{
	uint8_t buf[sizeof(struct ib_user_mad) + PROTO_MAD_MAX];
	struct ib_user_mad *um = (struct ib_user_mad *)buf;
	int len, rc;

	for (;;) {
		len = PROTO_MAD_MAX;
		rc = umad_recv(ur->fd, buf, &len, 0);
		if (rc == -EAGAIN || rc == -EWOULDBLOCK || rc == -ETIMEDOUT)
			return 0;
		if (rc < 0)
			return rc;
		if (um->status == 0 && len > 0 && len <= PROTO_MAD_MAX)
			break; /* else a send's completion or error */
	}
	memset(&m->addr, 0, sizeof(m->addr));
	m->addr.flags = PROTO_MAD_F_GRH;
	m->addr.remote_qpn = ntohl(um->addr.qpn) & 0xffffff;
	m->addr.qkey = GSI_QKEY;
	m->addr.hop_limit = um->addr.hop_limit;
	memcpy(m->addr.remote_gid, um->addr.gid, 16);
	if (um->addr.gid_index < ur->ngids)
		memcpy(m->addr.local_gid, ur->gids[um->addr.gid_index], 16);
	m->mad_len = (uint16_t)len;
	memcpy(m->mad, umad_get_mad(buf), (size_t)len);
	m->mad[MAD_OFF_CLASS_VERSION] = MAD_CM_CLASS_VERSION;
	return 1;
}
