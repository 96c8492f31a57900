// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * A client's socket output, shared by the threads that write to it.  Its
 * worker queues replies and events; another worker or the port thread
 * that routed a MAD to the client queues the MAD here and writes it out
 * itself at the end of its pass, so a relayed MAD costs no thread
 * hand-off.  Only the owning worker arms the write event for a full
 * socket: another writer that leaves bytes behind asks it to (once).
 * One thread writes at a time, and not under the lock: send() wakes the
 * reader, which often runs at once on the writer's CPU, and a writer
 * put off its CPU with the lock held kept every other thread with
 * output for the same client waiting on it (a futex sleep in a fifth of
 * the MADs of one pair's handshakes with the daemon on one CPU).  The
 * writer takes the queue with it, and what others queue meanwhile it
 * writes after.
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
	atomic_store(&o->queued, o->len + o->inflight);
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

/* max bounds what is queued and what a writer took with it: both can
 * end up queued again (a full socket), and the bound is the client's
 * memory. */
int outlet_append(struct outlet *o, size_t max, const void *hdr, size_t hlen,
		  const void *payload, size_t len)
{
	int rc = 0;

	pthread_mutex_lock(&o->lock);
	if (!o->open)
		rc = -EPIPE;
	else if (max && o->len + o->inflight + hlen + len > max)
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
		/* (Only QEMU's worker writes QEMU's outlet: the send
		 * under the lock holds up nobody.) */
		if (o->len == 0 && !o->inflight) {
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

/* Write b[0 .. n) in chunks the socket takes whole (QEMU's: one
 * message each); what went out is in *sent.  0, or a write's error. */
static int outlet_send(int fd, const uint8_t *b, size_t n, size_t max_msg_write,
		       size_t *sent)
{
	size_t chunk;
	ssize_t w;

	*sent = 0;
	while (*sent < n) {
		chunk = max_msg_write && max_msg_write < n - *sent
				? max_msg_write
				: n - *sent;
		w = send(fd, b + *sent, chunk, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		*sent += (size_t)w;
		if ((size_t)w < chunk)
			break; /* the socket is full */
	}
	return 0;
}

/* Back under the lock with the writer's buffer b, of which n bytes from
 * `from` did not go out: they go in front of what others queued
 * meanwhile.  An emptied b stays the queue's buffer if nobody made
 * another and it is not a burst's (OUTLET_KEEP). */
static int outlet_requeue(struct outlet *o, uint8_t *b, size_t cap, size_t from,
			  size_t n)
{
	uint8_t *meanwhile = o->buf;
	size_t mhead = o->head, mlen = o->len;
	int rc = 0;

	if (!o->open || (n == 0 && (meanwhile != NULL || cap > OUTLET_KEEP))) {
		free(b);
		return 0;
	}
	o->buf = b;
	o->cap = cap;
	o->head = n ? from : 0;
	o->len = n;
	if (mlen) {
		if (outlet_reserve(o, mlen) < 0)
			rc = -ENOMEM; /* the stream would have a hole: it ends */
		else
			outlet_put(o, meanwhile + mhead, mlen);
	}
	free(meanwhile);
	return rc;
}

int outlet_flush(struct outlet *o, int owner, size_t *left, int *ask_owner)
{
	size_t head, n, cap, sent, max_msg_write;
	uint8_t *b;
	int rc = 0, rq, fd;

	*ask_owner = 0;
	*left = 0;
	pthread_mutex_lock(&o->lock);
	if (!o->open) {
		pthread_mutex_unlock(&o->lock);
		return 0;
	}
	if (o->inflight) {
		/* The writer takes what is queued now too; the owner is
		 * asked to flush once it is done, for what the socket
		 * did not take and what the owner waits for (a closing
		 * session's last words, reading resumed). */
		if (owner) {
			o->owner_missed = 1;
			o->owner_asked = 0;
		}
		pthread_mutex_unlock(&o->lock);
		return 0;
	}
	/* (Once closed, nothing is queued.) */
	fd = o->fd;
	max_msg_write = o->max_msg_write;
	while (o->len > 0) {
		b = o->buf;
		head = o->head;
		n = o->len;
		cap = o->cap;
		o->buf = NULL;
		o->head = o->len = o->cap = 0;
		o->inflight = n;
		pthread_mutex_unlock(&o->lock);
		rc = outlet_send(fd, b + head, n, max_msg_write, &sent);
		pthread_mutex_lock(&o->lock);
		o->inflight = 0;
		rq = outlet_requeue(o, b, cap, head + sent, n - sent);
		if (rc == 0)
			rc = rq;
		if (rc < 0 || sent < n)
			break;
	}
	*left = o->len;
	if (owner) {
		o->owner_asked = 0;
		o->owner_missed = 0;
	} else if (((*left && rc == 0) || o->owner_missed) && !o->owner_asked) {
		o->owner_asked = 1;
		o->owner_missed = 0;
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
	/* (A writer still out frees what it took when it is back.) */
	free(o->buf);
	o->buf = NULL;
	o->head = o->len = o->cap = 0;
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
