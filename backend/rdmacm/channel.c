// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Event channels: a queue of events and a pipe whose read end is the
 * channel's fd, one byte per queued event, so that the fd polls readable
 * exactly while rdma_get_cm_event() has something, and blocks (or, with
 * O_NONBLOCK, fails with EAGAIN) as the kernel's rdma_cm fd does.
 */
#include "backend/rdmacm/rcm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct rcm_channel *channel_create(void)
{
	struct rcm_channel *ch = calloc(1, sizeof(*ch));
	int fds[2];

	if (ch == NULL)
		return NULL;
	if (pipe2(fds, O_CLOEXEC) < 0) {
		free(ch);
		return NULL;
	}
	/* The writer never blocks: a pipe holds 64 KiB of events, and an
	 * event nobody reads is counted in the queue, not lost. */
	fcntl(fds[1], F_SETFL, O_NONBLOCK);
	ch->pub.fd = fds[0];
	ch->wfd = fds[1];
	TAILQ_INIT(&ch->events);
	return ch;
}

void channel_destroy(struct rcm_channel *ch)
{
	struct rcm_event *ev;

	while ((ev = TAILQ_FIRST(&ch->events)) != NULL) {
		TAILQ_REMOVE(&ch->events, ev, link);
		free(ev);
	}
	/* A thread blocked in rdma_get_cm_event() on it stays blocked, as
	 * one in the kernel's ucma read stays: rping's event thread does,
	 * while its main thread destroys the channel and returns.  Closing
	 * the pipe would wake it with an error it exits on. */
	if (ch->readers > 0) {
		ch->destroyed = 1;
		return;
	}
	close(ch->pub.fd);
	close(ch->wfd);
	free(ch);
}

struct rcm_event *channel_new_event(struct rcm_id *id,
				    enum rdma_cm_event_type type, int status)
{
	struct rcm_event *ev = calloc(1, sizeof(*ev));

	if (ev == NULL)
		return NULL;
	ev->id = id;
	ev->pub.id = &id->pub;
	ev->pub.event = type;
	ev->pub.status = status;
	return ev;
}

void channel_enqueue(struct rcm_channel *ch, struct rcm_event *ev)
{
	char c = 0;

	TAILQ_INSERT_TAIL(&ch->events, ev, link);
	if (write(ch->wfd, &c, 1) < 0) {
		/* A full pipe: the reader finds the event on its next
		 * wake-up, which the bytes already there guarantee. */
	}
}

void channel_post(struct rcm_id *id, struct rcm_event *ev)
{
	channel_enqueue((struct rcm_channel *)id->pub.channel, ev);
}

void channel_flush_id(struct rcm_id *id)
{
	struct rcm_channel *ch = (struct rcm_channel *)id->pub.channel;
	struct rcm_event *ev, *tmp;

	if (ch == NULL)
		return;
	/* Their bytes stay in the pipe: rdma_get_cm_event() reads on
	 * past a byte with no event behind it. */
	for (ev = TAILQ_FIRST(&ch->events); ev; ev = tmp) {
		tmp = TAILQ_NEXT(ev, link);
		if (ev->id == id || (ev->pub.id == &id->pub)) {
			TAILQ_REMOVE(&ch->events, ev, link);
			/* A request never taken: its REQ is rejected as
			 * cm.c rejects one whose cm_id is destroyed. */
			if (ev->pub.event == RDMA_CM_EVENT_CONNECT_REQUEST &&
			    ev->pub.id != &id->pub) {
				conn_teardown(id_of(ev->pub.id));
				id_free(id_of(ev->pub.id));
			}
			free(ev);
		}
	}
}

struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct rcm_channel *ch;

	if (lib_get() == NULL)
		return NULL;
	ch = channel_create();
	if (ch == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	return &ch->pub;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct rcm_lib *lib = lib_get();

	if (channel == NULL || lib == NULL)
		return;
	pthread_mutex_lock(&lib->lock);
	channel_destroy((struct rcm_channel *)channel);
	pthread_mutex_unlock(&lib->lock);
}

int rdma_get_cm_event(struct rdma_event_channel *channel,
		      struct rdma_cm_event **event)
{
	struct rcm_channel *ch = (struct rcm_channel *)channel;
	struct rcm_lib *lib = lib_get();
	struct rcm_event *ev;
	char c;
	ssize_t n;

	if (lib == NULL)
		return -1;
	if (channel == NULL || event == NULL)
		return lib_err(-EINVAL);
	for (;;) {
		pthread_mutex_lock(&lib->lock);
		ch->readers++;
		pthread_mutex_unlock(&lib->lock);
		n = read(ch->pub.fd, &c, 1);
		pthread_mutex_lock(&lib->lock);
		ch->readers--;
		pthread_mutex_unlock(&lib->lock);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1; /* EAGAIN on a non-blocking channel */
		if (n == 0)
			return lib_err(-ENODATA);
		pthread_mutex_lock(&lib->lock);
		ev = TAILQ_FIRST(&ch->events);
		if (ev) {
			TAILQ_REMOVE(&ch->events, ev, link);
			ev->id->events_out++;
			/* Taken: the request leaves the backlog and its
			 * id is the application's. */
			if (ev->pub.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
				ev->id->backlog++;
				id_of(ev->pub.id)->listener = NULL;
			}
		}
		pthread_mutex_unlock(&lib->lock);
		if (ev)
			break;
	}
	*event = &ev->pub;
	return 0;
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct rcm_lib *lib = lib_get();
	struct rcm_event *ev = (struct rcm_event *)event;

	if (event == NULL)
		return lib_err(-EINVAL);
	if (lib == NULL)
		return -1;
	pthread_mutex_lock(&lib->lock);
	if (ev->id->events_out > 0)
		ev->id->events_out--;
	pthread_cond_broadcast(&ev->id->acked);
	pthread_mutex_unlock(&lib->lock);
	free(ev);
	return 0;
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		[RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
		[RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
		[RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
		[RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
		[RDMA_CM_EVENT_CONNECT_REQUEST] =
			"RDMA_CM_EVENT_CONNECT_REQUEST",
		[RDMA_CM_EVENT_CONNECT_RESPONSE] =
			"RDMA_CM_EVENT_CONNECT_RESPONSE",
		[RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
		[RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
		[RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
		[RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
		[RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
		[RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
		[RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
		[RDMA_CM_EVENT_MULTICAST_ERROR] =
			"RDMA_CM_EVENT_MULTICAST_ERROR",
		[RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
		[RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	if ((unsigned)event < sizeof(names) / sizeof(names[0]) && names[event])
		return names[event];
	return "UNKNOWN EVENT";
}
