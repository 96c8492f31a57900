// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * What librdmacm offers and this library does not (yet): each fails with
 * a clear errno and says so once on stderr, and rdmacm-mux-run(1) lists
 * them.  Defined here so that a call never falls through to the stock
 * librdmacm, which would try the kernel's rdma_cm that is not there.
 */
#include "backend/rdmacm/rcm.h"

#include <errno.h>
#include <stdio.h>

static void unsupported_say(const char *what, const char *why)
{
	static int said;

	if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		fprintf(stderr, "rdmacm-mux: %s is not supported: %s\n", what,
			why);
}

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr,
			void *context)
{
	(void)id;
	(void)addr;
	(void)context;
	unsupported_say("rdma_join_multicast",
			"multicast needs the SA and IGMP, which the daemon "
			"does not relay");
	return lib_err(-EOPNOTSUPP);
}

int rdma_join_multicast_ex(struct rdma_cm_id *id,
			   struct rdma_cm_join_mc_attr_ex *mc_join_attr,
			   void *context)
{
	(void)mc_join_attr;
	return rdma_join_multicast(id, NULL, context);
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	(void)id;
	(void)addr;
	return lib_err(-EADDRNOTAVAIL); /* nothing was joined */
}

int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id;
	(void)ece;
	unsupported_say("rdma_set_local_ece",
			"enhanced connection establishment is not carried");
	return lib_err(-EOPNOTSUPP);
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id;
	(void)ece;
	return lib_err(-EOPNOTSUPP);
}

int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
		    uint8_t private_data_len)
{
	/* What librdmacm sends: the vendor option is not supported. */
	return conn_reject(id, CONN_REJ_REASON_VENDOR_OPTION, private_data,
			   private_data_len);
}
