// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* bench_relay's minimal relays (relay.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/wire.h"
#include "tests/bench/relay.h"

/* A client that went away loses what was for it. */
static void relay_write(int fd, const uint8_t *p, size_t len)
{
	ssize_t n;

	while (len) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EAGAIN) {
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };

			poll(&pfd, 1, 100);
			continue;
		}
		if (n <= 0)
			return;
		p += n;
		len -= (size_t)n;
	}
}

static const char relay_ok[] = "{\"ok\":true}";

/* The reply to frame f, with verdict (JSON text), written into out: its
 * length. */
static size_t relay_reply(const struct proto_frame *f, const char *verdict,
			  uint8_t *out)
{
	size_t len = strlen(verdict);

	proto_header_encode(out, PROTO_KIND_JSON, PROTO_FLAG_REPLY,
			    f->request_id, (uint32_t)len);
	memcpy(out + PROTO_HDR_SIZE, verdict, len);
	return PROTO_HDR_SIZE + len;
}

/* Through the port: the frame's MAD to umad, its verdict in the reply
 * (written into out); what comes back is forwarded by
 * relay_umad_input(). */
static size_t relay_umad_send(struct relay *rl, const struct proto_frame *f,
			      const uint8_t *payload, uint8_t *out)
{
	static const char failed[] = "{\"ok\":false,\"error\":\"EIO\"}";
	struct proto_mad m;

	if (proto_mad_decode(payload, f->length, &m) < 0 ||
	    umad_relay_send(rl->ur, &m) < 0)
		return relay_reply(f, failed, out);
	return relay_reply(f, relay_ok, out);
}

/* Client i's GID is the base plus i + 1 in its low 32 bits. */
static int relay_client_of_gid(const struct relay *rl, const uint8_t gid[16])
{
	return (int)(wire_get32(gid + 12) - wire_get32(rl->base.raw + 12)) - 1;
}

/* Each MAD the port received goes to its sender's partner. */
static void relay_umad_input(struct relay *rl)
{
	uint8_t frame[RELAY_FRAME_MAD];
	struct proto_mad m;
	int id, len;

	while (umad_relay_recv(rl->ur, &m) == 1) {
		id = relay_client_of_gid(rl, m.addr.remote_gid);
		if (id < 0 || id >= RELAY_MAX_CLIENTS)
			continue;
		len = proto_mad_encode(&m, frame + PROTO_HDR_SIZE,
				       sizeof(frame) - PROTO_HDR_SIZE);
		if (len < 0)
			continue;
		proto_header_encode(frame, PROTO_KIND_MAD, PROTO_FLAG_EVENT, 0,
				    (uint32_t)len);
		relay_write(rl->fds[id ^ 1], frame,
			    PROTO_HDR_SIZE + (size_t)len);
	}
}

static void *relay_main(void *arg)
{
	struct relay *rl = arg;
	struct epoll_event ev, evs[256];
	static uint8_t umad_mark; /* the port's fd in the epoll set */
	uint8_t out[RELAY_RBUF * 2], fwd[RELAY_RBUF * 2];
	int ep = epoll_create1(EPOLL_CLOEXEC), n, i;

	rl->tid = (pid_t)syscall(SYS_gettid);
	ev.events = EPOLLIN;
	ev.data.ptr = NULL;
	epoll_ctl(ep, EPOLL_CTL_ADD, rl->lfd, &ev);
	if (rl->ur) {
		ev.data.ptr = &umad_mark;
		epoll_ctl(ep, EPOLL_CTL_ADD, umad_relay_fd(rl->ur), &ev);
	}
	while (!rl->stop) {
		n = epoll_wait(ep, evs, 256, 50);
		for (i = 0; i < n; i++) {
			struct rconn *rc = evs[i].data.ptr;
			size_t off = 0, olen = 0, flen = 0;
			struct proto_frame f;
			uint32_t be;
			ssize_t r;
			int fd;

			if ((void *)rc == (void *)&umad_mark) {
				relay_umad_input(rl);
				continue;
			}
			if (rc == NULL) {
				fd = accept4(rl->lfd, NULL, NULL, SOCK_CLOEXEC);
				if (fd < 0 ||
				    recv(fd, &be, 4, MSG_WAITALL) != 4 ||
				    ntohl(be) >= RELAY_MAX_CLIENTS) {
					if (fd >= 0)
						close(fd);
					continue;
				}
				rc = &rl->conns[ntohl(be)];
				rc->fd = fd;
				rc->id = (int)ntohl(be);
				rl->fds[rc->id] = fd;
				fcntl(fd, F_SETFL,
				      fcntl(fd, F_GETFL) | O_NONBLOCK);
				ev.data.ptr = rc;
				epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
				continue;
			}
			r = read(rc->fd, rc->buf + rc->have,
				 sizeof(rc->buf) - rc->have);
			if (r == 0 || (r < 0 && errno != EAGAIN)) {
				epoll_ctl(ep, EPOLL_CTL_DEL, rc->fd, NULL);
				close(rc->fd);
				rc->have = 0;
				continue;
			}
			if (r < 0)
				continue;
			rc->have += (size_t)r;
			/* Each frame: a reply to its sender, the frame (as
			 * an event) to the partner; one write each per read.
			 * Through the port, the MAD goes out and its verdict
			 * is the reply. */
			while (rc->have - off >= PROTO_HDR_SIZE) {
				if (proto_header_decode(rc->buf + off,
							RELAY_RBUF, &f) < 0 ||
				    rc->have - off < PROTO_HDR_SIZE + f.length)
					break;
				if (rl->ur) {
					olen += relay_umad_send(
						rl, &f,
						rc->buf + off + PROTO_HDR_SIZE,
						out + olen);
					off += PROTO_HDR_SIZE + f.length;
					continue;
				}
				olen += relay_reply(&f, relay_ok, out + olen);
				proto_header_encode(fwd + flen, f.kind,
						    PROTO_FLAG_EVENT, 0,
						    f.length);
				memcpy(fwd + flen + PROTO_HDR_SIZE,
				       rc->buf + off + PROTO_HDR_SIZE,
				       f.length);
				flen += PROTO_HDR_SIZE + f.length;
				off += PROTO_HDR_SIZE + f.length;
			}
			memmove(rc->buf, rc->buf + off, rc->have - off);
			rc->have -= off;
			if (olen)
				relay_write(rc->fd, out, olen);
			if (flen)
				relay_write(rl->fds[rc->id ^ 1], fwd, flen);
		}
	}
	close(ep);
	return NULL;
}

void relay_start(struct relay *rl, const char *dir, const char *name,
		 const char *gid_base)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };

	snprintf(rl->path, sizeof(rl->path), "%s/%s.sock", dir, name);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", rl->path);
	rl->conns = calloc(RELAY_MAX_CLIENTS, sizeof(*rl->conns));
	rl->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (gid_parse(gid_base, &rl->base) < 0 || rl->conns == NULL ||
	    rl->lfd < 0 ||
	    bind(rl->lfd, (struct sockaddr *)&sun, sizeof(sun)) < 0 ||
	    listen(rl->lfd, 4096) < 0) {
		perror("relay socket");
		exit(2);
	}
	pthread_create(&rl->thread, NULL, relay_main, rl);
	while (rl->tid == 0)
		usleep(1000);
}

void relay_stop(struct relay *rl)
{
	if (rl->conns == NULL)
		return;
	rl->stop = 1;
	pthread_join(rl->thread, NULL);
	close(rl->lfd);
	unlink(rl->path);
	free(rl->conns);
	umad_relay_close(rl->ur);
}
