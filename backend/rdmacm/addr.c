// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * Addresses: IP addresses to the daemon's ports and GIDs (RoCE: a GID is
 * the IP address, IPv4 mapped), rdma_bind_addr, rdma_resolve_addr and
 * rdma_resolve_route, and rdma_getaddrinfo on the C library's resolver.
 */
#include "backend/rdmacm/rcm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int addr_to_gid(const struct sockaddr *sa, struct gid *gid)
{
	memset(gid, 0, sizeof(*gid));
	if (sa->sa_family == AF_INET) {
		gid->raw[10] = 0xff;
		gid->raw[11] = 0xff;
		memcpy(gid->raw + 12,
		       &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(gid->raw, &((const struct sockaddr_in6 *)sa)->sin6_addr,
		       16);
		return 0;
	}
	return -EAFNOSUPPORT;
}

void addr_from_gid(const struct gid *gid, uint16_t port,
		   struct sockaddr_storage *ss)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0,    0,
					    0, 0, 0, 0, 0xff, 0xff };

	memset(ss, 0, sizeof(*ss));
	if (memcmp(gid->raw, mapped, sizeof(mapped)) == 0) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;

		in->sin_family = AF_INET;
		in->sin_port = htons(port);
		memcpy(&in->sin_addr, gid->raw + 12, 4);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		memcpy(&in6->sin6_addr, gid->raw, 16);
	}
}

uint16_t addr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

void addr_set_port(struct sockaddr *sa, uint16_t port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = htons(port);
	else if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
}

int addr_is_any(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
		       htonl(INADDR_ANY);
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(
			&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return 0;
}

socklen_t addr_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
					 : sizeof(struct sockaddr_in);
}

static int addr_check(const struct sockaddr *sa)
{
	if (sa == NULL)
		return -EINVAL;
	if (sa->sa_family == AF_IB)
		return -EAFNOSUPPORT; /* rdmacm-mux-run(1): RoCE only */
	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	return 0;
}

/* An ephemeral port for the rdma_cm header, as cma_alloc_any_port()
 * picks one; only this process's ids are known, and only a listener's
 * port is ever looked up (by the daemon, per service ID). */
static uint16_t addr_ephemeral_port(struct rcm_lib *lib)
{
	if (++lib->next_port < 32768 || lib->next_port > 60999)
		lib->next_port = 32768;
	return lib->next_port;
}

/* Take (port, GID) of a local address for id; the lock is not held. */
static int addr_take(struct rcm_id *id, const struct sockaddr *src)
{
	struct rcm_lib *lib = id->lib;
	struct rcm_port *port;
	struct gid gid;
	int idx = 0, rc;

	rc = addr_to_gid(src, &gid);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&lib->lock);
	port = lib_port_of_gid(lib, &gid, &idx);
	pthread_mutex_unlock(&lib->lock);
	if (port == NULL)
		return -EADDRNOTAVAIL;
	rc = lib_share(lib, port, &gid);
	if (rc == -EEXIST)
		return -EADDRINUSE; /* a VM's GID, its own */
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&lib->lock);
	id->port = port;
	id->sgid = gid;
	id->sgid_index = idx;
	id->pub.verbs = lib_port_verbs(port);
	id->pub.port_num = port->port_num ? port->port_num : 1;
	id->pub.route.addr.addr.ibaddr.pkey = 0xffff;
	memcpy(&id->pub.route.addr.addr.ibaddr.sgid, gid.raw, 16);
	pthread_mutex_unlock(&lib->lock);
	return 0;
}

int rdma_bind_addr(struct rdma_cm_id *pub, struct sockaddr *addr)
{
	struct rcm_lib *lib = lib_for(pub);
	struct rcm_id *id = id_of(pub);
	struct sockaddr_storage ss;
	int rc;

	if (lib == NULL)
		return -1;
	rc = addr_check(addr);
	if (rc < 0)
		return lib_err(rc);
	if (id->state != RCM_ID_IDLE)
		return lib_err(-EINVAL);
	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, addr, addr_len(addr));
	if (addr_is_any(addr)) {
		id->wildcard = 1;
	} else {
		rc = addr_take(id, addr);
		if (rc < 0)
			return lib_err(rc);
	}
	pthread_mutex_lock(&lib->lock);
	if (addr_port((struct sockaddr *)&ss) == 0)
		addr_set_port((struct sockaddr *)&ss, addr_ephemeral_port(lib));
	memcpy(&pub->route.addr.src_storage, &ss, sizeof(ss));
	id->state = RCM_ID_BOUND;
	pthread_mutex_unlock(&lib->lock);
	return 0;
}

/* The source address the host's routing picks for dst: what a UDP
 * socket connected to it is bound to (rdma_resolve_ip()'s route lookup,
 * without a netlink socket of our own). */
static int addr_route_src(const struct sockaddr *dst,
			  struct sockaddr_storage *src)
{
	socklen_t len = sizeof(*src);
	int fd, rc = 0;

	fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, dst, addr_len(dst)) < 0 ||
	    getsockname(fd, (struct sockaddr *)src, &len) < 0)
		rc = errno == ENETUNREACH ? -ENETUNREACH : -errno;
	close(fd);
	return rc;
}

static int addr_post(struct rcm_id *id, enum rdma_cm_event_type type,
		     int status)
{
	struct rcm_event *ev = channel_new_event(id, type, status);

	if (ev == NULL)
		return -ENOMEM;
	channel_post(id, ev);
	return 0;
}

int rdma_resolve_addr(struct rdma_cm_id *pub, struct sockaddr *src_addr,
		      struct sockaddr *dst_addr, int timeout_ms)
{
	struct rcm_lib *lib = lib_for(pub);
	struct rcm_id *id = id_of(pub);
	struct sockaddr_storage src;
	int rc, status = 0;

	(void)timeout_ms; /* the answer is local: the GID table */
	if (lib == NULL)
		return -1;
	rc = addr_check(dst_addr);
	if (rc == 0 && src_addr && src_addr->sa_family != AF_UNSPEC)
		rc = addr_check(src_addr);
	if (rc < 0)
		return lib_err(rc);
	if (id->state != RCM_ID_IDLE && id->state != RCM_ID_BOUND)
		return lib_err(-EINVAL);
	memset(&src, 0, sizeof(src));
	if (id->port) {
		memcpy(&src, &pub->route.addr.src_storage, sizeof(src));
	} else {
		if (src_addr && src_addr->sa_family != AF_UNSPEC &&
		    !addr_is_any(src_addr))
			memcpy(&src, src_addr, addr_len(src_addr));
		else
			status = addr_route_src(dst_addr, &src);
		if (status == 0) {
			status = addr_take(id, (struct sockaddr *)&src);
			/* A policy that refuses the address is the
			 * caller's error, as a bind the kernel refuses. */
			if (status == -EACCES || status == -EADDRINUSE)
				return lib_err(status);
		}
		if (status == -EADDRNOTAVAIL)
			status = -ENODEV; /* no RDMA port has it */
	}
	pthread_mutex_lock(&lib->lock);
	if (status == 0) {
		if (addr_port((struct sockaddr *)&src) == 0)
			addr_set_port((struct sockaddr *)&src,
				      addr_ephemeral_port(lib));
		memcpy(&pub->route.addr.src_storage, &src, sizeof(src));
		memset(&pub->route.addr.dst_storage, 0,
		       sizeof(pub->route.addr.dst_storage));
		memcpy(&pub->route.addr.dst_storage, dst_addr,
		       addr_len(dst_addr));
		addr_to_gid(dst_addr, &id->dgid);
		memcpy(&pub->route.addr.addr.ibaddr.dgid, id->dgid.raw, 16);
		id->state = RCM_ID_ADDR_RESOLVED;
	}
	rc = addr_post(id,
		       status ? RDMA_CM_EVENT_ADDR_ERROR
			      : RDMA_CM_EVENT_ADDR_RESOLVED,
		       status);
	pthread_mutex_unlock(&lib->lock);
	if (rc < 0)
		return lib_err(rc);
	return lib_err(id_complete(id));
}

int rdma_resolve_route(struct rdma_cm_id *pub, int timeout_ms)
{
	struct rcm_lib *lib = lib_for(pub);
	struct rcm_id *id = id_of(pub);
	int rc;

	(void)timeout_ms;
	if (lib == NULL)
		return -1;
	pthread_mutex_lock(&lib->lock);
	if (id->state != RCM_ID_ADDR_RESOLVED) {
		pthread_mutex_unlock(&lib->lock);
		return lib_err(-EINVAL);
	}
	/* On RoCE the route is the GIDs; the kernel resolves the next
	 * hop's MAC when the QP goes to RTR. */
	id->state = RCM_ID_ROUTE_RESOLVED;
	rc = addr_post(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	pthread_mutex_unlock(&lib->lock);
	if (rc < 0)
		return lib_err(rc);
	return lib_err(id_complete(id));
}

static int addr_copy(struct sockaddr **dst, socklen_t *len,
		     const struct sockaddr *src, socklen_t src_len)
{
	*dst = malloc(src_len);
	if (*dst == NULL)
		return EAI_MEMORY;
	memcpy(*dst, src, src_len);
	*len = src_len;
	return 0;
}

int rdma_getaddrinfo(const char *node, const char *service,
		     const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo nohints;
	struct addrinfo aih = { 0 }, *ai = NULL;
	struct rdma_addrinfo *rai;
	int rc = 0;

	if (res == NULL || (node == NULL && service == NULL && hints == NULL))
		return lib_err(-EINVAL);
	if (hints == NULL)
		hints = &nohints;
	if ((hints->ai_flags & RAI_FAMILY) && hints->ai_family == AF_IB)
		return lib_err(-EAFNOSUPPORT);
	rai = calloc(1, sizeof(*rai));
	if (rai == NULL)
		return lib_err(-ENOMEM);
	rai->ai_flags = hints->ai_flags & RAI_PASSIVE;
	rai->ai_family = hints->ai_family;
	rai->ai_qp_type = hints->ai_qp_type;
	rai->ai_port_space = hints->ai_port_space;
	if (node || service) {
		if (hints->ai_flags & RAI_PASSIVE)
			aih.ai_flags |= AI_PASSIVE;
		if (hints->ai_flags & RAI_NUMERICHOST)
			aih.ai_flags |= AI_NUMERICHOST;
		if (hints->ai_flags & RAI_FAMILY)
			aih.ai_family = hints->ai_family;
		aih.ai_socktype = hints->ai_qp_type == IBV_QPT_UD ? SOCK_DGRAM
								  : SOCK_STREAM;
		rc = getaddrinfo(node, service, &aih, &ai);
		if (rc) {
			free(rai);
			return rc;
		}
		rai->ai_family = ai->ai_family;
		if (rai->ai_flags & RAI_PASSIVE)
			rc = addr_copy(&rai->ai_src_addr, &rai->ai_src_len,
				       ai->ai_addr, ai->ai_addrlen);
		else
			rc = addr_copy(&rai->ai_dst_addr, &rai->ai_dst_len,
				       ai->ai_addr, ai->ai_addrlen);
		if (rc == 0 && ai->ai_canonname) {
			char **name = rai->ai_flags & RAI_PASSIVE
					      ? &rai->ai_src_canonname
					      : &rai->ai_dst_canonname;
			*name = strdup(ai->ai_canonname);
		}
		freeaddrinfo(ai);
	} else if (hints->ai_dst_len) {
		rc = addr_copy(&rai->ai_dst_addr, &rai->ai_dst_len,
			       hints->ai_dst_addr, hints->ai_dst_len);
	}
	if (rc == 0 && !rai->ai_src_len && hints->ai_src_len)
		rc = addr_copy(&rai->ai_src_addr, &rai->ai_src_len,
			       hints->ai_src_addr, hints->ai_src_len);
	if (!rai->ai_qp_type)
		rai->ai_qp_type = IBV_QPT_RC;
	if (!rai->ai_port_space)
		rai->ai_port_space = rai->ai_qp_type == IBV_QPT_UD
					     ? RDMA_PS_UDP
					     : RDMA_PS_TCP;
	if (rc) {
		rdma_freeaddrinfo(rai);
		return rc;
	}
	*res = rai;
	return 0;
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	struct rdma_addrinfo *next;

	for (; res; res = next) {
		next = res->ai_next;
		free(res->ai_connect);
		free(res->ai_route);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res);
	}
}
