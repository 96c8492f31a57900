/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_SIM_FABRIC_H
#define RCM_SIM_FABRIC_H

/*
 * The simulated fabric's datagram: an 8-byte magic, then a MAD frame
 * payload (protocol/rdmacm_mux_proto.h) whose local GID is the sender's
 * and remote GID the destination's.  Datagrams go to every "*.sock" in
 * the fabric directory; a port keeps those addressed to its GIDs.  Tests
 * speak it directly to act as a remote CM peer on the wire.
 */
#include <errno.h>
#include <string.h>

#include "protocol/rdmacm_mux_proto.h"

#define SIM_MAGIC "RCMSIM1" /* 8 bytes with its NUL */
#define SIM_MAGIC_LEN 8
#define SIM_DGRAM_MAX (SIM_MAGIC_LEN + PROTO_MAD_ADDR_SIZE + PROTO_MAD_MAX)

static inline int sim_dgram_encode(const struct proto_mad *m, uint8_t *out,
				   size_t cap)
{
	int len;

	if (cap < SIM_MAGIC_LEN)
		return -ENOSPC;
	memcpy(out, SIM_MAGIC, SIM_MAGIC_LEN);
	len = proto_mad_encode(m, out + SIM_MAGIC_LEN, cap - SIM_MAGIC_LEN);
	return len < 0 ? len : len + SIM_MAGIC_LEN;
}

static inline int sim_dgram_decode(const uint8_t *in, size_t len,
				   struct proto_mad *m)
{
	if (len < SIM_MAGIC_LEN || memcmp(in, SIM_MAGIC, SIM_MAGIC_LEN) != 0)
		return -EBADMSG;
	return proto_mad_decode(in + SIM_MAGIC_LEN, len - SIM_MAGIC_LEN, m);
}

#endif
