// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * mad_send: one CM REQ through rdmacm-muxd, for lab scenarios that need a
 * client to try something the demo VM would never do (such as a source
 * GID it does not own).  Prints the daemon's verdict; exits 0 when it is
 * the one --expect names.
 *
 *   mad_send --socket PATH --register GID... --from GID --to GID
 *            [--comm-id N] [--qpn N --ca-guid N] [--wait-file FILE]
 *            --expect ok|ERRNO_NAME
 *
 * The REQ names a QP of mad_send's own on the daemon's port (its Local
 * QPN), unless --qpn names another (and --ca-guid its CA GUID): what a
 * tenant would write to have a peer end another's connection as stale.
 *
 * --wait-file: after registering, wait (up to 60 s) until FILE exists
 * before sending, so a scenario can change the port in between.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "backend/muxbe.h"
#include "common/cm_mad.h"
#include "common/gid.h"
#include "protocol/rdmacm_mux_proto.h"
#include "tests/lib/own_qp.h"

/* The name of the daemon's port index (a real one: "DEVICE:PORT"). */
static const char *port_name(struct muxbe *mb, unsigned index)
{
	static char name[64];
	char *reply = NULL;
	json_t *j, *p;

	name[0] = '\0';
	if (muxbe_request(mb, "{\"op\":\"list_ports\"}", &reply) == 0) {
		j = json_loads(reply, 0, NULL);
		p = json_array_get(json_object_get(j, "ports"), index);
		snprintf(name, sizeof(name), "%s",
			 json_string_value(json_object_get(p, "name")) ?: "");
		json_decref(j);
	}
	free(reply);
	return name;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "register", required_argument, NULL, 'r' },
		{ "from", required_argument, NULL, 'f' },
		{ "to", required_argument, NULL, 't' },
		{ "comm-id", required_argument, NULL, 'i' },
		{ "expect", required_argument, NULL, 'e' },
		{ "wait-file", required_argument, NULL, 'w' },
		{ "qpn", required_argument, NULL, 'q' },
		{ "ca-guid", required_argument, NULL, 'g' },
		{ NULL, 0, NULL, 0 },
	};
	struct muxbe_options mo = { 0 };
	struct muxbe_addr a = { .grh = 1,
				.hop_limit = 64,
				.remote_qpn = GSI_QPN,
				.qkey = GSI_QKEY };
	const char *expect = "ok", *got, *wait_file = NULL;
	struct gid from, to, g;
	uint8_t mad[MAD_SIZE];
	uint32_t comm_id = 0x7e570001, qpn = 0;
	uint64_t ca_guid = 0;
	char err[256];
	struct muxbe *mb;
	int c, rc, nreg = 0;
	const char *reg[8];

	memset(&from, 0, sizeof(from));
	memset(&to, 0, sizeof(to));
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's': mo.socket_path = optarg; break;
		case 'r':
			if (nreg < 8)
				reg[nreg++] = optarg;
			break;
		case 'f':
			if (gid_parse(optarg, &from))
				return 2;
			break;
		case 't':
			if (gid_parse(optarg, &to))
				return 2;
			break;
		case 'i': comm_id = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'e': expect = optarg; break;
		case 'w': wait_file = optarg; break;
		case 'q': qpn = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'g': ca_guid = strtoull(optarg, NULL, 0); break;
		default: return 2;
		}
	}
	mo.errbuf = err;
	mo.errbuf_len = sizeof(err);
	mo.name = "mad_send";
	if (muxbe_connect(&mo, &mb) < 0) {
		fprintf(stderr, "mad_send: %s\n", err);
		return 1;
	}
	for (c = 0; c < nreg; c++) {
		gid_parse(reg[c], &g);
		rc = muxbe_register_gid(mb, NULL, g.raw, &a.port);
		if (rc < 0) {
			muxbe_last_error(mb, err, sizeof(err));
			fprintf(stderr, "mad_send: register %s: %s\n", reg[c],
				err);
			return 1;
		}
	}
	if (qpn == 0)
		qpn = own_qp(port_name(mb, a.port));
	printf("mad_send: registered; the REQ names QP %u\n", (unsigned)qpn);
	fflush(stdout);
	for (c = 0; wait_file && access(wait_file, F_OK) != 0; c++) {
		if (c == 1200) {
			fprintf(stderr, "mad_send: %s never appeared\n",
				wait_file);
			return 1;
		}
		poll(NULL, 0, 50);
	}
	cm_mad_init(mad, CM_ATTR_REQ, comm_id);
	cm_field_set(mad, CM_REQ_LOCAL_COMM_ID, comm_id);
	cm_field_set(mad, CM_REQ_LOCAL_QPN, qpn);
	cm_field_set(mad, CM_REQ_LOCAL_CA_GUID, ca_guid);
	cm_field_set(mad, CM_REQ_SERVICE_ID, rdma_service_id(CMA_PS_TCP, 7999));
	cm_set_gid(mad, CM_REQ_OFF_PRIMARY_LOCAL_GID, &from);
	cm_set_gid(mad, CM_REQ_OFF_PRIMARY_REMOTE_GID, &to);
	cma_hdr_build(mad + CM_REQ_OFF_PRIVATE_DATA, &from, &to, 7999);
	memcpy(a.local_gid, from.raw, 16);
	memcpy(a.remote_gid, to.raw, 16);
	rc = muxbe_send_mad_sync(mb, &a, mad, MAD_SIZE);
	got = rc == 0 ? "ok" : proto_errno_name(rc);
	muxbe_last_error(mb, err, sizeof(err));
	printf("mad_send: REQ: %s%s%s\n", got, rc ? " - " : "", rc ? err : "");
	muxbe_close(mb);
	return strcmp(got, expect) == 0 ? 0 : 3;
}
