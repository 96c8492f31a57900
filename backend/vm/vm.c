// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * rdmacm-mux-vm: a stand-in for one VM's device model.  It links libmuxbe,
 * registers the VM's GID with rdmacm-muxd, and runs a minimal guest CM
 * endpoint over it, active (--connect) or passive (--listen).
 *
 * With --device it also creates a real RC QP on that RDMA device through
 * libmuxbe, announces it in REQ/REP, moves it through RTR/RTS as the CM
 * handshake goes, and exchanges --messages messages both ways the way
 * rdma-core's cmatose does, so that stock ucmatose can be the peer.
 *
 * Exit status: 0 connected (and exchanged data) and disconnected cleanly;
 * 3 rejected (the REJ reason is printed); 4 timed out; 5 data incomplete;
 * 1 other errors; 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/muxbe.h"
#include "backend/vm/guest_cm.h"
#include "backend/vm/vm_data.h"
#include "common/cm_mad.h"
#include "common/number.h"

#define VM_RECV_BUFS 16

struct vm {
	const char *name;
	struct muxbe *mb;
	struct gcm cm;
	uint16_t port_index;
	struct gid gid;
	uint8_t bufs[VM_RECV_BUFS][MUXBE_RECV_BUF_MIN];
	int hold_ms;
	int active;
	int done;
	int exit_code;
	uint64_t disconnect_at;
	int send_errors;
	struct vm_data *data; /* --device: the RC data path */
	int messages;
	int data_sent_posted;
	int connected;
	int send_delay_ms; /* passive: hold before sending */
	uint64_t send_at;
	uint64_t connect_started; /* active: when the REQ went out */
	/* --device-late: the data path opened only when a REQ comes, so
	 * that nothing holds the device before (rxe on Linux 6.1 cannot
	 * be removed while a verbs context is open). */
	const char *late_device;
	int message_size;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int vm_send(void *ctx, const uint8_t *mad, const struct gid *dst)
{
	struct vm *vm = ctx;
	struct muxbe_addr a = {
		.port = vm->port_index,
		.grh = 1,
		.hop_limit = 64,
		.remote_qpn = GSI_QPN,
		.qkey = GSI_QKEY,
	};

	memcpy(a.local_gid, vm->gid.raw, 16);
	memcpy(a.remote_gid, dst->raw, 16);
	return muxbe_send_mad(vm->mb, &a, mad, MAD_SIZE, NULL);
}

static void vm_event(void *ctx, enum gcm_event ev, int detail)
{
	struct vm *vm = ctx;
	char peer[GID_STRLEN];

	gid_format(&vm->cm.p.remote_gid, peer);
	switch (ev) {
	case GCM_EV_CONNECTED:
		printf("%s: connected to %s (local comm id 0x%08x, remote 0x%08x); peer says \"%s\"\n",
		       vm->name, peer, vm->cm.p.local_comm_id,
		       vm->cm.remote_comm_id, vm->cm.peer_data);
		vm->connected = 1;
		if (vm->active)
			printf("%s: connected in %llu ms (REQ to RTU)\n",
			       vm->name,
			       (unsigned long long)(now_ms() -
						    vm->connect_started));
		if (vm->data) {
			printf("%s: RC QP 0x%06x (PSN 0x%06x) <-> peer QP 0x%06x (PSN 0x%06x)\n",
			       vm->name, vm_data_qpn(vm->data),
			       vm_data_psn(vm->data), vm->cm.remote_qpn,
			       vm->cm.remote_psn);
			/* cmatose's order: the passive side sends first
			 * (after --send-delay-ms, to hold the connection). */
			if (!vm->active)
				vm->send_at = now_ms() +
					      (uint64_t)vm->send_delay_ms;
		} else if (vm->active) {
			vm->disconnect_at = now_ms() + (uint64_t)vm->hold_ms;
		}
		break;
	case GCM_EV_REJECTED:
		printf("%s: rejected by %s, reason %d%s\n", vm->name, peer,
		       detail,
		       detail == CM_REJ_REASON_INVALID_SERVICE_ID
			       ? " (invalid service ID: nobody listens)"
			       : "");
		vm->exit_code = 3;
		break;
	case GCM_EV_TIMEOUT:
		printf("%s: no answer from %s after %u retries\n", vm->name,
		       peer, vm->cm.p.max_retries);
		vm->exit_code = 4;
		break;
	case GCM_EV_DISCONNECTED:
		printf("%s: disconnected from %s\n", vm->name, peer);
		break;
	case GCM_EV_CLOSED:
		printf("%s: closed (retransmissions %llu, duplicates answered %llu)\n",
		       vm->name, (unsigned long long)vm->cm.retransmissions,
		       (unsigned long long)vm->cm.duplicates);
		vm->done = 1;
		break;
	}
	fflush(stdout);
}

static int vm_qp_rtr(void *ctx, uint32_t qpn, uint32_t psn,
		     const struct gid *remote)
{
	struct vm *vm = ctx;

	return vm_data_rtr(vm->data, qpn, psn, remote);
}

static int vm_qp_rts(void *ctx)
{
	struct vm *vm = ctx;

	return vm_data_rts(vm->data);
}

static const struct gcm_ops vm_cm_ops = { .send = vm_send, .event = vm_event };
static const struct gcm_ops vm_cm_data_ops = {
	.send = vm_send,
	.event = vm_event,
	.qp_rtr = vm_qp_rtr,
	.qp_rts = vm_qp_rts,
};

/* The data exchange after CONNECTED, in cmatose's order. */
static void vm_data_step(struct vm *vm, uint64_t now)
{
	int n = vm->messages;

	if (!vm->data)
		return;
	/* Data before any RTU: established all the same (COMM_EST). */
	if (vm->cm.state == GCM_REP_SENT && vm_data_received(vm->data) > 0) {
		printf("%s: first data before the RTU: established\n",
		       vm->name);
		gcm_established(&vm->cm);
	}
	if (!vm->connected || vm->cm.state != GCM_ESTABLISHED)
		return;
	if (!vm->active && !vm->data_sent_posted && now >= vm->send_at) {
		vm_data_send_all(vm->data);
		vm->data_sent_posted = 1;
	}
	if (vm->active) {
		if (!vm->data_sent_posted && vm_data_received(vm->data) >= n) {
			vm_data_send_all(vm->data);
			vm->data_sent_posted = 1;
		}
		/* ...then wait for the passive side's DREQ. */
	} else if (vm_data_sent(vm->data) >= n &&
		   vm_data_received(vm->data) >= n) {
		gcm_disconnect(&vm->cm, now);
	}
}

/* The QP the REP names, made as the REQ arrives (--device-late). */
static void vm_open_late(struct vm *vm)
{
	if (vm_data_open(&vm->data, vm->late_device, &vm->gid, vm->messages,
			 vm->message_size, vm->name) < 0) {
		fprintf(stderr, "%s: cannot set up the data path on %s\n",
			vm->name, vm->late_device);
		return;
	}
	vm->cm.p.qpn = vm_data_qpn(vm->data);
	vm->cm.p.psn = vm_data_psn(vm->data);
	vm->cm.ops = &vm_cm_data_ops;
	printf("%s: data path opened on %s for the REQ\n", vm->name,
	       vm->late_device);
}

static void on_recv(void *user, void *buf_ctx, void *buf, size_t mad_len,
		    const struct muxbe_addr *addr)
{
	struct vm *vm = user;
	struct gid src;

	(void)buf_ctx;
	if (addr == NULL)
		return; /* flushed, not received */
	if (vm->late_device && vm->data == NULL &&
	    cm_mad_attr_id((uint8_t *)buf + MUXBE_GRH_SIZE) == CM_ATTR_REQ)
		vm_open_late(vm);
	memcpy(src.raw, addr->remote_gid, 16);
	gcm_input(&vm->cm, (uint8_t *)buf + MUXBE_GRH_SIZE, mad_len, &src,
		  now_ms());
	muxbe_post_recv(vm->mb, buf, MUXBE_RECV_BUF_MIN, NULL);
}

static void on_send_done(void *user, void *send_ctx, int status,
			 const char *message)
{
	struct vm *vm = user;

	(void)send_ctx;
	if (status) {
		fprintf(stderr, "%s: daemon refused a MAD: %s (%s)\n", vm->name,
			message, strerror(-status));
		vm->send_errors++;
	}
}

static void on_disconnected(void *user, int err)
{
	struct vm *vm = user;

	fprintf(stderr, "%s: lost the daemon: %s\n", vm->name, strerror(-err));
	vm->exit_code = 1;
	vm->done = 1;
}

/* The daemon went away and came back (libmuxbe reconnects by itself);
 * the connection lives on if the daemon kept it (status 0). */
static void on_link(void *user, int up, int status, const char *message)
{
	struct vm *vm = user;

	if (up)
		printf("%s: daemon link up: %s%s\n", vm->name, message,
		       status ? " (connections lost)" : "");
	else
		printf("%s: daemon link down: %s\n", vm->name, message);
	fflush(stdout);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rdmacm-mux-vm --gid GID (--listen PORT | --connect GID --rdma-port PORT)\n"
		"                     [--socket PATH] [--name NAME] [--port DAEMON-PORT]\n"
		"                     [--comm-id N] [--data TEXT] [--hold-ms MS]\n"
		"                     [--timeout-ms MS] [--retries N] [--timewait-ms MS]\n"
		"                     [--run-ms MS] [--device DEV [--messages N]\n"
		"                     [--message-size BYTES] [--send-delay-ms MS]]\n"
		"                     [--device-late DEV (--listen only)]\n");
}

/* --data: what a REQ carries after rdma_cm's header, with its NUL. */
#define VM_DATA_MAX (CM_REQ_PRIVATE_DATA_SIZE - CMA_HDR_SIZE - 1)
/* Milliseconds an option may give: a day. */
#define VM_MS_MAX 86400000ULL

/* The options that take a number, and its range. */
static const struct vm_number_option {
	int opt;
	const char *name;
	int base; /* 0: 0x hexadecimal too */
	unsigned long long min, max;
} vm_number_options[] = {
	{ 'l', "listen", 10, 1, 65535 },
	{ 'r', "rdma-port", 10, 1, 65535 },
	{ 'i', "comm-id", 0, 1, UINT32_MAX },
	{ 'H', "hold-ms", 10, 0, VM_MS_MAX },
	{ 'T', "timeout-ms", 10, 1, VM_MS_MAX },
	/* A REQ's Max CM Retries is four bits. */
	{ 'R', "retries", 10, 0, 15 },
	{ 'W', "timewait-ms", 10, 0, VM_MS_MAX },
	{ 'X', "run-ms", 10, 1, VM_MS_MAX },
	{ 'M', "messages", 10, 1, 65536 },
	/* 16 bytes: rdma_client's and rdma_server's messages. */
	{ 'S', "message-size", 10, 16, 1 << 20 },
	{ 'Y', "send-delay-ms", 10, 0, VM_MS_MAX },
};

/* Option c's number, when it takes one, into *out: 0, or -EINVAL when
 * arg is not one in its range (said, with the option's name). */
static int vm_number(int c, const char *arg, unsigned long long *out)
{
	const struct vm_number_option *o;
	size_t i;

	for (i = 0; i < sizeof(vm_number_options) / sizeof(*o); i++) {
		o = &vm_number_options[i];
		if (o->opt != c)
			continue;
		if (number_parse(arg, o->base, o->min, o->max, out) == 0)
			return 0;
		fprintf(stderr,
			"rdmacm-mux-vm: --%s: '%s' is not a number from %llu to %llu\n",
			o->name, arg, o->min, o->max);
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "name", required_argument, NULL, 'n' },
		{ "gid", required_argument, NULL, 'g' },
		{ "port", required_argument, NULL, 'p' },
		{ "listen", required_argument, NULL, 'l' },
		{ "connect", required_argument, NULL, 'c' },
		{ "rdma-port", required_argument, NULL, 'r' },
		{ "comm-id", required_argument, NULL, 'i' },
		{ "data", required_argument, NULL, 'd' },
		{ "hold-ms", required_argument, NULL, 'H' },
		{ "timeout-ms", required_argument, NULL, 'T' },
		{ "retries", required_argument, NULL, 'R' },
		{ "timewait-ms", required_argument, NULL, 'W' },
		{ "run-ms", required_argument, NULL, 'X' },
		{ "device", required_argument, NULL, 'D' },
		{ "device-late", required_argument, NULL, 'L' },
		{ "messages", required_argument, NULL, 'M' },
		{ "message-size", required_argument, NULL, 'S' },
		{ "send-delay-ms", required_argument, NULL, 'Y' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct muxbe_callbacks cb = {
		.recv = on_recv,
		.send_done = on_send_done,
		.disconnected = on_disconnected,
		.link = on_link,
	};
	struct muxbe_options mo = { .cb = &cb };
	struct gcm_params gp = {
		.timeout_ms = 500,
		.max_retries = 5,
		.timewait_ms = 200,
		.psn = 0x4242,
	};
	static struct vm vm;
	const char *daemon_port = NULL, *listen = NULL, *connect_to = NULL;
	const char *device = NULL;
	int message_size = 100;
	char err[256];
	uint64_t run_deadline = 0;
	int c, i, rc, rdma_port = -1, run_ms = 30000;
	unsigned long long n = 0;
	uint16_t listen_port = 0;
	struct pollfd pfd[2];

	setvbuf(stdout, NULL, _IOLBF, 0);
	vm.name = "vm";
	vm.hold_ms = 300;
	vm.messages = 10;
	gp.local_comm_id = (uint32_t)getpid() * 2654435761u;
	while ((c = getopt_long(argc, argv,
				"s:n:g:p:l:c:r:i:d:H:T:R:W:X:D:L:M:S:Y:h", opts,
				NULL)) != -1) {
		if (vm_number(c, optarg, &n) < 0)
			return 2;
		switch (c) {
		case 's': mo.socket_path = optarg; break;
		case 'n': vm.name = optarg; break;
		case 'g':
			if (gid_parse(optarg, &vm.gid)) {
				fprintf(stderr, "bad --gid '%s'\n", optarg);
				return 2;
			}
			break;
		case 'p': daemon_port = optarg; break;
		case 'c': connect_to = optarg; break;
		case 'l':
			listen = optarg;
			listen_port = (uint16_t)n;
			break;
		case 'r': rdma_port = (int)n; break;
		case 'i': gp.local_comm_id = (uint32_t)n; break;
		case 'd':
			/* What a REQ carries after rdma_cm's header. */
			if (strlen(optarg) > VM_DATA_MAX) {
				fprintf(stderr,
					"rdmacm-mux-vm: --data: at most %d bytes\n",
					VM_DATA_MAX);
				return 2;
			}
			snprintf(gp.private_data, sizeof(gp.private_data), "%s",
				 optarg);
			break;
		case 'H': vm.hold_ms = (int)n; break;
		case 'T': gp.timeout_ms = (unsigned)n; break;
		case 'R': gp.max_retries = (unsigned)n; break;
		case 'W': gp.timewait_ms = (unsigned)n; break;
		case 'X': run_ms = (int)n; break;
		case 'D': device = optarg; break;
		case 'L': vm.late_device = optarg; break;
		case 'M': vm.messages = (int)n; break;
		case 'S': message_size = (int)n; break;
		case 'Y': vm.send_delay_ms = (int)n; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (gid_is_zero(&vm.gid) || (!listen == !connect_to) ||
	    (connect_to && rdma_port < 0) || gp.local_comm_id == 0 ||
	    optind < argc) {
		usage(stderr);
		return 2;
	}
	if (gp.private_data[0] == '\0')
		snprintf(gp.private_data, sizeof(gp.private_data),
			 "hello from %s", vm.name);
	gp.local_gid = vm.gid;
	if (connect_to) {
		if (gid_parse(connect_to, &gp.remote_gid)) {
			fprintf(stderr, "bad --connect GID '%s'\n", connect_to);
			return 2;
		}
		gp.port = (uint16_t)rdma_port;
	} else {
		gp.port = listen_port;
	}
	mo.name = vm.name;
	mo.user = &vm;
	mo.errbuf = err;
	mo.errbuf_len = sizeof(err);
	rc = muxbe_connect(&mo, &vm.mb);
	if (rc < 0) {
		fprintf(stderr, "%s: cannot connect to the daemon: %s\n",
			vm.name, err);
		return 1;
	}
	rc = muxbe_register_gid(vm.mb, daemon_port, vm.gid.raw, &vm.port_index);
	if (rc < 0) {
		muxbe_last_error(vm.mb, err, sizeof(err));
		fprintf(stderr, "%s: register_gid: %s\n", vm.name, err);
		muxbe_close(vm.mb);
		return 1;
	}
	for (i = 0; i < VM_RECV_BUFS; i++)
		muxbe_post_recv(vm.mb, vm.bufs[i], sizeof(vm.bufs[i]), NULL);

	if (device) {
		if (vm_data_open(&vm.data, device, &vm.gid, vm.messages,
				 message_size, vm.name) < 0) {
			fprintf(stderr,
				"%s: cannot set up the data path on %s\n",
				vm.name, device);
			muxbe_close(vm.mb);
			return 1;
		}
		gp.qpn = vm_data_qpn(vm.data);
		gp.psn = vm_data_psn(vm.data);
		gp.src_port = (uint16_t)(0x8000 | (getpid() & 0x7fff));
	} else if (!vm.late_device) {
		/* No device, so no QP: a number of this process's, which a
		 * simulated port takes as its own once registered.  A real
		 * port's kernel knows no such QP: the REQs and REPs naming
		 * it are refused, and only the rest (REJ, SIDR) works. */
		gp.qpn = 0x100000u | ((uint32_t)getpid() & 0xfffffu);
		if (muxbe_register_qpn(vm.mb, daemon_port, gp.qpn) < 0) {
			muxbe_last_error(vm.mb, err, sizeof(err));
			printf("%s: no QP of its own (%s): without --device it cannot connect\n",
			       vm.name, err);
		}
	}
	vm.message_size = message_size;
	gcm_init(&vm.cm, &gp, device ? &vm_cm_data_ops : &vm_cm_ops, &vm);
	if (connect_to) {
		vm.active = 1;
		printf("%s: connecting to %s port %d\n", vm.name, connect_to,
		       rdma_port);
		vm.connect_started = now_ms();
		gcm_connect(&vm.cm, vm.connect_started);
	} else {
		printf("%s: listening on port %s\n", vm.name, listen);
		gcm_listen(&vm.cm);
		vm.cm.listening = 0; /* one connection, then exit */
	}
	fflush(stdout);
	run_deadline = now_ms() + (uint64_t)run_ms;
	pfd[0].fd = muxbe_fd(vm.mb);
	pfd[0].events = POLLIN;
	pfd[1].fd = vm.data ? vm_data_fd(vm.data) : -1;
	pfd[1].events = POLLIN;
	while (!vm.done) {
		uint64_t now = now_ms();

		if (now >= run_deadline) {
			fprintf(stderr, "%s: gave up after %d ms in state %s\n",
				vm.name, run_ms, gcm_state_name(vm.cm.state));
			vm.exit_code = vm.exit_code ? vm.exit_code : 4;
			break;
		}
		poll(pfd, 2, 20);
		if (vm.data)
			vm_data_process(vm.data);
		rc = muxbe_process(vm.mb);
		if (rc < 0 && !vm.done) {
			vm.exit_code = 1;
			break;
		}
		now = now_ms();
		gcm_tick(&vm.cm, now);
		vm_data_step(&vm, now);
		if (vm.disconnect_at && now >= vm.disconnect_at &&
		    vm.cm.state == GCM_ESTABLISHED) {
			vm.disconnect_at = 0;
			gcm_disconnect(&vm.cm, now);
		}
	}
	if (vm.send_errors && vm.exit_code == 0)
		vm.exit_code = 1;
	if (vm.data && vm.connected) {
		/* The peer's DREQ comes through the daemon and can overtake
		 * the ACKs of our last sends on the data path: count the
		 * completions still on their way before judging. */
		vm_data_settle(vm.data, vm.messages, 1000);
		printf("%s: data: received %d, sent %d of %d messages; first received: \"%.40s\"\n",
		       vm.name, vm_data_received(vm.data),
		       vm_data_sent(vm.data), vm.messages,
		       vm_data_first(vm.data));
	}
	if (vm.data && vm.exit_code == 0 &&
	    (vm_data_received(vm.data) != vm.messages ||
	     vm_data_sent(vm.data) != vm.messages || vm_data_errors(vm.data)))
		vm.exit_code = 5;
	vm_data_close(vm.data);
	muxbe_close(vm.mb);
	return vm.exit_code;
}
