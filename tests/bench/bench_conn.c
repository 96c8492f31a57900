// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The connection table at scale: 1,000,000 live comm-ID mappings (1,000
 * clients with 1,000 connections each, every client using the same guest
 * IDs 1..1000, the worst case for translation).  Prints the insertion and
 * lookup times per operation, the memory per entry, and their ratios.
 * Memory is what the process holds resident for the table (its arrays
 * are mappings the entries touch as they come, its sets are on the
 * heap), measured twice: with every handshake just started, and with
 * every connection established (the peer's ID known and indexed).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mux/conn.h"
#include "common/cm_mad.h"
#include "common/wire.h"

#define CLIENTS 1000u
#define PER_CLIENT 1000u
#define N (CLIENTS * PER_CLIENT)

/* Resident bytes of this process. */
static long rss_bytes(void)
{
	long pages = -1, resident = -1;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
			resident = -1;
		fclose(f);
	}
	return resident * sysconf(_SC_PAGESIZE);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void)
{
	struct conn_limits lim = { .max_per_client = PER_CLIENT,
				   .handshake_ms = 60000,
				   .timewait_ms = 10000 };
	struct conn_table *ct;
	long rss0, rss_req, rss_est;
	struct conn_path path;
	uint8_t mad[MAD_SIZE];
	uint32_t *host;
	uint64_t client, found = 0;
	double t0, t_ins, t_look, t_guest, t_est, t_exp;
	unsigned i, c, g, seed = 1;

	memset(&path, 0, sizeof(path));
	gid_parse("fd00::1", &path.local_gid);
	gid_parse("fd00::99", &path.peer_gid);
	host = malloc(sizeof(*host) * N);
	if (host == NULL)
		return 1;
	/* Resident before, so not in the figure (not 0: a zeroing memset
	 * after malloc may become a calloc that touches nothing). */
	memset(host, 0xff, sizeof(*host) * N);
	rss0 = rss_bytes();
	ct = conn_table_new(&lim, 0x9e3779b9, NULL, NULL);

	/* Insertion: each client's REQ for guest IDs 1..1000. */
	t0 = now_s();
	for (c = 0; c < CLIENTS; c++) {
		for (g = 1; g <= PER_CLIENT; g++) {
			cm_mad_init(mad, CM_ATTR_REQ, g);
			wire_put32(mad + 24, g);
			if (conn_outbound(ct, c + 1, 0, mad, &path, 0, 0) != 0)
				return 1;
			host[c * PER_CLIENT + g - 1] = wire_get32(mad + 24);
		}
	}
	t_ins = now_s() - t0;
	rss_req = rss_bytes() - rss0;

	/* Lookup from the wire: REPs naming random host IDs. */
	t0 = now_s();
	for (i = 0; i < N; i++) {
		uint32_t h = host[(unsigned)rand_r(&seed) % N];

		cm_mad_init(mad, CM_ATTR_MRA, 1);
		wire_put32(mad + 24, 0x77);
		wire_put32(mad + 28, h);
		if (conn_inbound(ct, 0, mad, &path, 1, &client) == 0)
			found++;
	}
	t_look = now_s() - t0;

	/* Lookup from a client: a retransmitted REQ, by guest ID. */
	t0 = now_s();
	for (i = 0; i < N; i++) {
		c = (unsigned)rand_r(&seed) % CLIENTS;
		g = 1 + (unsigned)rand_r(&seed) % PER_CLIENT;
		cm_mad_init(mad, CM_ATTR_REQ, g);
		wire_put32(mad + 24, g);
		if (conn_outbound(ct, c + 1, 0, mad, &path, 2, 0) == 0 &&
		    wire_get32(mad + 24) == host[c * PER_CLIENT + g - 1])
			found++;
	}
	t_guest = now_s() - t0;

	/* Every connection established: the peer's REP (its ID now known
	 * and indexed), the client's RTU. */
	t0 = now_s();
	for (c = 0; c < CLIENTS; c++) {
		for (g = 1; g <= PER_CLIENT; g++) {
			uint32_t peer = c * PER_CLIENT + g;

			cm_mad_init(mad, CM_ATTR_REP, 1);
			wire_put32(mad + 24, peer);
			wire_put32(mad + 28, host[peer - 1]);
			if (conn_inbound(ct, 0, mad, &path, 3, &client) != 0)
				return 1;
			cm_mad_init(mad, CM_ATTR_RTU, 1);
			wire_put32(mad + 24, g);
			wire_put32(mad + 28, peer);
			if (conn_outbound(ct, c + 1, 0, mad, &path, 4, 0) != 0)
				return 1;
		}
	}
	t_est = now_s() - t0;
	rss_est = rss_bytes() - rss0;

	/* Every connection torn down and its DREP never coming: expiry of
	 * 1,000,000 entries at once. */
	for (c = 0; c < CLIENTS; c++) {
		for (g = 1; g <= PER_CLIENT; g++) {
			cm_mad_init(mad, CM_ATTR_DREQ, 1);
			wire_put32(mad + 24, g);
			wire_put32(mad + 28, c * PER_CLIENT + g);
			if (conn_outbound(ct, c + 1, 0, mad, &path, 5, 0) != 0)
				return 1;
		}
	}
	t0 = now_s();
	if (conn_expire(ct, 5 + 60000) != N)
		return 1;
	t_exp = now_s() - t0;
	conn_table_free(ct);
	free(host);

	printf("connection table: %u live mappings (%u clients x %u, same guest IDs)\n",
	       N, CLIENTS, PER_CLIENT);
	printf("  insert (outbound REQ, new mapping): %8.1f ns/op  %10.0f ops/s\n",
	       t_ins * 1e9 / N, N / t_ins);
	printf("  lookup by host ID (inbound):        %8.1f ns/op  %10.0f ops/s\n",
	       t_look * 1e9 / N, N / t_look);
	printf("  lookup by guest ID (outbound):      %8.1f ns/op  %10.0f ops/s\n",
	       t_guest * 1e9 / N, N / t_guest);
	printf("  establish (inbound REP, RTU):       %8.1f ns/conn\n",
	       t_est * 1e9 / N);
	printf("  expire (all at once):               %8.1f ns/entry\n",
	       t_exp * 1e9 / N);
	printf("  memory: %.1f bytes per mapping in handshake, %.1f established (%.1f MiB in all)\n",
	       (double)rss_req / N, (double)rss_est / N,
	       (double)rss_est / (1 << 20));
	printf("  ratios: insert/lookup %.2f, guest/host lookup %.2f\n",
	       t_ins / t_look, t_guest / t_look);
	printf("  lookups that found their entry: %llu of %u\n",
	       (unsigned long long)found, 2 * N);
	return found == 2ull * N ? 0 : 1;
}
