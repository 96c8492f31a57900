// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * A capture file Wireshark and tshark read: pcapng, each MAD as the RoCE
 * v2 packet that carries it (Ethernet, IPv4 or IPv6, UDP 4791, BTH and
 * DETH of QP1, the MAD), with the daemon's verdict as the packet's
 * comment, which Wireshark shows beside it (frame.comment).
 *
 * Written here rather than through libpcap: libpcap writes only the pcap
 * format, which has no place for a comment, and pcapng's three blocks
 * used here are fixed layouts (the IETF's pcapng draft, sections 4.1,
 * 4.2 and 4.3).  The MAC addresses are placeholders (the daemon never
 * sees them) and the ICRC is zero; Wireshark dissects the rest.
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "mux/ctl/muxctl.h"

#define PCAPNG_SHB 0x0A0D0D0Au
#define PCAPNG_IDB 1u
#define PCAPNG_EPB 6u
#define PCAPNG_LINKTYPE_ETHERNET 1
#define PCAPNG_OPT_COMMENT 1
#define PCAPNG_OPT_IF_TSRESOL 9
#define ROCE_V2_UDP_PORT 4791
#define BTH_UD_SEND_ONLY 0x64
#define GSI_QKEY 0x80010000u

static size_t muxctl_pcapng_pad(size_t n)
{
	return (n + 3) & ~(size_t)3;
}

static int muxctl_pcapng_put(FILE *f, const void *p, size_t n)
{
	static const uint8_t zero[4];
	size_t padded = muxctl_pcapng_pad(n);

	return fwrite(p, 1, n, f) == n &&
			       fwrite(zero, 1, padded - n, f) == padded - n
		       ? 0
		       : -1;
}

static int muxctl_pcapng_u32(FILE *f, uint32_t v)
{
	return fwrite(&v, sizeof(v), 1, f) == 1 ? 0 : -1;
}

int muxctl_pcapng_start(FILE *f)
{
	/* The section: byte-order magic, version 1.0, length unknown. */
	const uint32_t shb[] = { PCAPNG_SHB,  28,          0x1A2B3C4Du, 1,
				 0xffffffffu, 0xffffffffu, 28 };
	/* One Ethernet interface, timestamps in nanoseconds. */
	const uint32_t idb[] = { PCAPNG_IDB,
				 32,
				 PCAPNG_LINKTYPE_ETHERNET,
				 0,
				 PCAPNG_OPT_IF_TSRESOL | (1u << 16),
				 9,
				 0,
				 32 };

	return fwrite(shb, sizeof(shb), 1, f) == 1 &&
			       fwrite(idb, sizeof(idb), 1, f) == 1
		       ? 0
		       : -1;
}

/* The one's complement sum of an IPv4 header. */
static uint16_t muxctl_pcapng_ip_sum(const uint8_t *h, size_t n)
{
	uint32_t sum = 0;
	size_t i;

	for (i = 0; i + 1 < n; i += 2)
		sum += (uint32_t)(h[i] << 8 | h[i + 1]);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

static int muxctl_pcapng_v4mapped(const uint8_t *gid)
{
	static const uint8_t prefix[12] = { [10] = 0xff, [11] = 0xff };

	return memcmp(gid, prefix, sizeof(prefix)) == 0;
}

/* The RoCE v2 packet that carries r's MAD, into pkt: its length. */
static size_t muxctl_pcapng_packet(const struct muxctl_capture_rec *r,
				   uint8_t *pkt)
{
	int v4 = muxctl_pcapng_v4mapped(r->src) &&
		 muxctl_pcapng_v4mapped(r->dst);
	size_t ip = v4 ? 20 : 40, l4 = 8 + 12 + 8 + r->mad_len + 4;
	uint8_t *p = pkt, hop = r->hop_limit ? r->hop_limit : 64;

	/* Ethernet: placeholders, locally administered; the sender's
	 * ends in 1. */
	memcpy(p, (uint8_t[]){ 2, 0, 0, 0, 0, r->out ? 2 : 1 }, 6);
	memcpy(p + 6, (uint8_t[]){ 2, 0, 0, 0, 0, r->out ? 1 : 2 }, 6);
	p[12] = v4 ? 0x08 : 0x86;
	p[13] = v4 ? 0x00 : 0xdd;
	p += 14;
	memset(p, 0, ip);
	if (v4) {
		p[0] = 0x45;
		p[1] = r->tclass;
		p[2] = (uint8_t)((ip + l4) >> 8);
		p[3] = (uint8_t)(ip + l4);
		p[6] = 0x40; /* don't fragment */
		p[8] = hop;
		p[9] = 17;
		memcpy(p + 12, r->src + 12, 4);
		memcpy(p + 16, r->dst + 12, 4);
		p[10] = (uint8_t)(muxctl_pcapng_ip_sum(p, 20) >> 8);
		p[11] = (uint8_t)muxctl_pcapng_ip_sum(p, 20);
	} else {
		p[0] = (uint8_t)(0x60 | r->tclass >> 4);
		p[1] = (uint8_t)((r->tclass & 15) << 4 |
				 ((r->flow_label >> 16) & 15));
		p[2] = (uint8_t)(r->flow_label >> 8);
		p[3] = (uint8_t)r->flow_label;
		p[4] = (uint8_t)(l4 >> 8);
		p[5] = (uint8_t)l4;
		p[6] = 17;
		p[7] = hop;
		memcpy(p + 8, r->src, 16);
		memcpy(p + 24, r->dst, 16);
	}
	p += ip;
	/* UDP: RoCE v2's port; no checksum, as RoCE v2 sends it. */
	memcpy(p,
	       (uint8_t[]){ 0xc0, 0x00, ROCE_V2_UDP_PORT >> 8,
			    ROCE_V2_UDP_PORT & 0xff, (uint8_t)(l4 >> 8),
			    (uint8_t)l4, 0, 0 },
	       8);
	p += 8;
	/* BTH: a UD Send to the QP the address block names, the default
	 * P_Key (the block has only its index). */
	memset(p, 0, 12);
	p[0] = BTH_UD_SEND_ONLY;
	p[2] = p[3] = 0xff;
	p[5] = (uint8_t)(r->qpn >> 16);
	p[6] = (uint8_t)(r->qpn >> 8);
	p[7] = (uint8_t)r->qpn;
	p += 12;
	/* DETH: the GSI Q_Key, from QP1. */
	memcpy(p,
	       (uint8_t[]){ GSI_QKEY >> 24, (GSI_QKEY >> 16) & 0xff, 0, 0, 0, 0,
			    0, 1 },
	       8);
	p += 8;
	memcpy(p, r->mad, r->mad_len);
	p += r->mad_len;
	memset(p, 0, 4); /* ICRC */
	p += 4;
	return (size_t)(p - pkt);
}

int muxctl_pcapng_write(FILE *f, const struct muxctl_capture_rec *r)
{
	uint8_t pkt[14 + 40 + 8 + 12 + 8 + MUXCTL_CAPTURE_MAD_MAX + 4];
	size_t len = muxctl_pcapng_packet(r, pkt), clen = strlen(r->comment),
	       total;
	uint64_t ts = (uint64_t)r->sec * 1000000000u + r->nsec;
	uint32_t opt = PCAPNG_OPT_COMMENT | (uint32_t)clen << 16;

	if (clen > 0xffff)
		return -1;
	total = 28 + muxctl_pcapng_pad(len) + 4 + muxctl_pcapng_pad(clen) + 4 +
		4;
	if (muxctl_pcapng_u32(f, PCAPNG_EPB) ||
	    muxctl_pcapng_u32(f, (uint32_t)total) || muxctl_pcapng_u32(f, 0) ||
	    muxctl_pcapng_u32(f, (uint32_t)(ts >> 32)) ||
	    muxctl_pcapng_u32(f, (uint32_t)ts) ||
	    muxctl_pcapng_u32(f, (uint32_t)len) ||
	    muxctl_pcapng_u32(f, (uint32_t)len) ||
	    muxctl_pcapng_put(f, pkt, len) || muxctl_pcapng_u32(f, opt) ||
	    muxctl_pcapng_put(f, r->comment, clen) ||
	    muxctl_pcapng_u32(f, 0) /* opt_endofopt */ ||
	    muxctl_pcapng_u32(f, (uint32_t)total))
		return -1;
	return 0;
}
