// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * A client's socket output, shared by the threads that write to it.  Its
 * worker queues replies and events; another worker or the port thread
 * that routed a MAD to the client queues the MAD here and writes it out
 * itself at the end of its pass, so a relayed MAD costs no thread
 * hand-off.  Only the owning worker arms the write event for a full
 * socket: another writer that leaves bytes behind asks it to (once).
 * The file descriptor is the outlet's and is closed with it, after the
 * last thread holding the client has let go, so no writer can reach a
 * reused descriptor.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "mux.h"

void outlet_init(struct outlet *o)
{
	memset(o, 0, sizeof(*o));
	pthread_mutex_init(&o->lock, NULL);
	o->fd = -1;
}

int outlet_open(struct outlet *o, int fd, size_t max_msg_write)
{
	struct evbuffer *buf = evbuffer_new();

	if (buf == NULL)
		return -ENOMEM;
	pthread_mutex_lock(&o->lock);
	o->buf = buf;
	o->fd = fd;
	o->max_msg_write = max_msg_write;
	o->open = 1;
	pthread_mutex_unlock(&o->lock);
	return 0;
}

static void outlet_account(struct outlet *o)
{
	atomic_store(&o->queued, evbuffer_get_length(o->buf));
}

int outlet_append(struct outlet *o, size_t max, const void *hdr, size_t hlen,
		  const void *payload, size_t len)
{
	int rc = 0;

	pthread_mutex_lock(&o->lock);
	if (!o->open)
		rc = -EPIPE;
	else if (max && evbuffer_get_length(o->buf) + hlen + len > max)
		rc = -ENOBUFS;
	else if (evbuffer_add(o->buf, hdr, hlen) ||
		 (len && evbuffer_add(o->buf, payload, len)))
		rc = -ENOMEM;
	else
		outlet_account(o);
	pthread_mutex_unlock(&o->lock);
	return rc;
}

int outlet_write_or_queue(struct outlet *o, const void *msg, size_t len)
{
	ssize_t n = 0;
	int rc = 0;

	pthread_mutex_lock(&o->lock);
	if (!o->open) {
		rc = -EPIPE;
	} else {
		if (evbuffer_get_length(o->buf) == 0) {
			n = send(o->fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (n < 0)
				n = 0; /* full, or an error the next write reports */
		}
		if ((size_t)n == len)
			rc = 1;
		else if (evbuffer_add(o->buf, (const uint8_t *)msg + n,
				      len - (size_t)n))
			rc = -ENOMEM;
		outlet_account(o);
	}
	pthread_mutex_unlock(&o->lock);
	return rc;
}

int outlet_flush(struct outlet *o, int owner, size_t *left, int *ask_owner)
{
	int n, rc = 0;
	size_t len;

	*ask_owner = 0;
	pthread_mutex_lock(&o->lock);
	if (!o->open) {
		*left = 0;
		pthread_mutex_unlock(&o->lock);
		return 0;
	}
	while ((len = evbuffer_get_length(o->buf)) > 0) {
		n = o->max_msg_write
			    ? evbuffer_write_atmost(o->buf, o->fd,
						    (ev_ssize_t)
							    o->max_msg_write)
			    : evbuffer_write(o->buf, o->fd);
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				rc = -errno;
			break;
		}
		if (!o->max_msg_write && (size_t)n < len)
			break; /* the socket is full */
	}
	*left = evbuffer_get_length(o->buf);
	if (owner) {
		o->owner_asked = 0;
	} else if (*left && rc == 0 && !o->owner_asked) {
		o->owner_asked = 1;
		*ask_owner = 1;
	}
	outlet_account(o);
	pthread_mutex_unlock(&o->lock);
	return rc;
}

size_t outlet_len(struct outlet *o)
{
	return atomic_load(&o->queued);
}

int outlet_claim_flush(struct outlet *o, unsigned worker)
{
	uint64_t bit = 1ull << (worker % 64);

	return !(atomic_fetch_or(&o->flushers, bit) & bit);
}

void outlet_release_flush(struct outlet *o, unsigned worker)
{
	atomic_fetch_and(&o->flushers, ~(1ull << (worker % 64)));
}

void outlet_close(struct outlet *o)
{
	pthread_mutex_lock(&o->lock);
	o->open = 0;
	if (o->buf)
		evbuffer_drain(o->buf, evbuffer_get_length(o->buf));
	atomic_store(&o->queued, 0);
	pthread_mutex_unlock(&o->lock);
}

void outlet_fini(struct outlet *o)
{
	if (o->buf)
		evbuffer_free(o->buf);
	if (o->fd >= 0)
		close(o->fd);
	pthread_mutex_destroy(&o->lock);
}
