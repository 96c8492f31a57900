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
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mux/mux.h"

/* A buffer emptied by a write is kept up to this size, so that steady
 * traffic allocates nothing; a larger one (a burst's) is let go.  Kept
 * up to 16 KiB, 2,048 clients of the benchmark held 23 MB more. */
#define OUTLET_KEEP 4096
#define OUTLET_FIRST 4096

void outlet_init(struct outlet *o)
{
	memset(o, 0, sizeof(*o));
	pthread_mutex_init(&o->lock, NULL);
	o->fd = -1;
}

int outlet_open(struct outlet *o, int fd, size_t max_msg_write)
{
	pthread_mutex_lock(&o->lock);
	o->fd = fd;
	o->max_msg_write = max_msg_write;
	o->open = 1;
	pthread_mutex_unlock(&o->lock);
	return 0;
}

static void outlet_account(struct outlet *o)
{
	atomic_store(&o->queued, o->len);
}

/* Room for need more bytes after what is queued. */
static int outlet_reserve(struct outlet *o, size_t need)
{
	size_t cap;
	uint8_t *nb;

	if (o->head + o->len + need <= o->cap)
		return 0;
	if (o->len + need <= o->cap) {
		memmove(o->buf, o->buf + o->head, o->len);
		o->head = 0;
		return 0;
	}
	for (cap = o->cap ? o->cap : OUTLET_FIRST; cap < o->len + need;
	     cap *= 2)
		;
	nb = malloc(cap);
	if (nb == NULL)
		return -ENOMEM;
	if (o->len)
		memcpy(nb, o->buf + o->head, o->len);
	free(o->buf);
	o->buf = nb;
	o->head = 0;
	o->cap = cap;
	return 0;
}

/* After outlet_reserve(). */
static void outlet_put(struct outlet *o, const void *p, size_t n)
{
	memcpy(o->buf + o->head + o->len, p, n);
	o->len += n;
}

/* n bytes went out. */
static void outlet_consume(struct outlet *o, size_t n)
{
	o->head += n;
	o->len -= n;
	if (o->len)
		return;
	o->head = 0;
	if (o->cap > OUTLET_KEEP) {
		free(o->buf);
		o->buf = NULL;
		o->cap = 0;
	}
}

int outlet_append(struct outlet *o, size_t max, const void *hdr, size_t hlen,
		  const void *payload, size_t len)
{
	int rc = 0;

	pthread_mutex_lock(&o->lock);
	if (!o->open)
		rc = -EPIPE;
	else if (max && o->len + hlen + len > max)
		rc = -ENOBUFS;
	else if (outlet_reserve(o, hlen + len) < 0)
		rc = -ENOMEM;
	else {
		outlet_put(o, hdr, hlen);
		if (len)
			outlet_put(o, payload, len);
		outlet_account(o);
	}
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
		if (o->len == 0) {
			n = send(o->fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (n < 0)
				n = 0; /* full, or an error the next write reports */
		}
		if ((size_t)n == len)
			rc = 1;
		else if (outlet_reserve(o, len - (size_t)n) < 0)
			rc = -ENOMEM;
		else
			outlet_put(o, (const uint8_t *)msg + n,
				   len - (size_t)n);
		outlet_account(o);
	}
	pthread_mutex_unlock(&o->lock);
	return rc;
}

int outlet_flush(struct outlet *o, int owner, size_t *left, int *ask_owner)
{
	ssize_t n;
	size_t chunk;
	int rc = 0;

	*ask_owner = 0;
	pthread_mutex_lock(&o->lock);
	if (!o->open) {
		*left = 0;
		pthread_mutex_unlock(&o->lock);
		return 0;
	}
	while (o->len > 0) {
		chunk = o->max_msg_write && o->max_msg_write < o->len
				? o->max_msg_write
				: o->len;
		n = send(o->fd, o->buf + o->head, chunk,
			 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				rc = -errno;
			break;
		}
		outlet_consume(o, (size_t)n);
		if ((size_t)n < chunk)
			break; /* the socket is full */
	}
	*left = o->len;
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
	if (o->len)
		outlet_consume(o, o->len);
	atomic_store(&o->queued, 0);
	pthread_mutex_unlock(&o->lock);
}

void outlet_fini(struct outlet *o)
{
	free(o->buf);
	o->buf = NULL;
	if (o->fd >= 0)
		close(o->fd);
	pthread_mutex_destroy(&o->lock);
}
