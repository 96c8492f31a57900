// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * rdmacm-muxctl capture: asks the daemon's admin socket for a capture
 * (the CM MADs it receives and sends, for one client, VM name or GID, or
 * all, each with its verdict), and writes what comes as a pcapng file
 * (muxctl_pcapng.c), to a file or standard output, so that
 * `rdmacm-muxctl capture -w - | tshark -r -` works.  The daemon stops
 * after a count or a time; an interrupt stops it sooner, and the file is
 * whole either way.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/gid.h"
#include "common/number.h"
#include "mux/ctl/muxctl.h"

static int muxctl_capture_hex(const char *hex, uint8_t *out, size_t max,
			      uint16_t *len)
{
	size_t n = strlen(hex), i;
	unsigned hi, lo;

	if (n % 2 || n / 2 > max)
		return -1;
	for (i = 0; i < n / 2; i++) {
		if (sscanf(hex + 2 * i, "%1x%1x", &hi, &lo) != 2)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	*len = (uint16_t)(n / 2);
	return 0;
}

static json_int_t muxctl_capture_int(json_t *o, const char *key, json_int_t max)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > max)
		return -1;
	return json_integer_value(v);
}

int muxctl_capture_parse(json_t *o, struct muxctl_capture_rec *r)
{
	const char *dir = json_string_value(json_object_get(o, "dir")),
		   *verdict = json_string_value(json_object_get(o, "verdict")),
		   *port = json_string_value(json_object_get(o, "port")),
		   *vm = json_string_value(json_object_get(o, "vm")),
		   *mad = json_string_value(json_object_get(o, "mad"));
	struct gid g;
	json_int_t v;

	memset(r, 0, sizeof(*r));
	if (dir == NULL || verdict == NULL || port == NULL || mad == NULL ||
	    muxctl_capture_hex(mad, r->mad, sizeof(r->mad), &r->mad_len) < 0)
		return -1;
	if (gid_parse(json_string_value(json_object_get(o, "src")), &g) < 0)
		return -1;
	memcpy(r->src, g.raw, 16);
	if (gid_parse(json_string_value(json_object_get(o, "dst")), &g) < 0)
		return -1;
	memcpy(r->dst, g.raw, 16);
	r->out = strcmp(dir, "out") == 0;
	if ((v = muxctl_capture_int(o, "sec", INT64_MAX)) < 0)
		return -1;
	r->sec = (uint64_t)v;
	if ((v = muxctl_capture_int(o, "nsec", 999999999)) < 0)
		return -1;
	r->nsec = (uint32_t)v;
	if ((v = muxctl_capture_int(o, "qpn", 0xffffff)) < 0)
		return -1;
	r->qpn = (uint32_t)v;
	r->tclass = (uint8_t)(muxctl_capture_int(o, "tclass", 255) & 0xff);
	r->hop_limit = (uint8_t)(muxctl_capture_int(o, "hop_limit", 255) &
				 0xff);
	v = muxctl_capture_int(o, "flow_label", 0xfffff);
	r->flow_label = v < 0 ? 0 : (uint32_t)v;
	snprintf(r->comment, sizeof(r->comment), "%s %s: %s%s%s%s", dir, port,
		 verdict, vm ? " (" : "", vm ? vm : "", vm ? ")" : "");
	return 0;
}

static volatile sig_atomic_t muxctl_capture_stop;

static void muxctl_capture_on_signal(int sig)
{
	(void)sig;
	muxctl_capture_stop = 1;
}

struct muxctl_capture_opts {
	const char *out;
	char request[256];
};

static int muxctl_capture_usage(void)
{
	fprintf(stderr,
		"rdmacm-muxctl: capture [--client ID | --vm NAME | --gid GID] [-c COUNT] [-s SECONDS] -w FILE|-\n");
	return 2;
}

static int muxctl_capture_args(int argc, char **argv,
			       struct muxctl_capture_opts *o)
{
	static const struct option opts[] = {
		{ "client", required_argument, NULL, 'i' },
		{ "vm", required_argument, NULL, 'v' },
		{ "gid", required_argument, NULL, 'g' },
		{ "count", required_argument, NULL, 'c' },
		{ "seconds", required_argument, NULL, 's' },
		{ "write", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned long long count = 1000, seconds = 60, id;
	json_t *req = json_pack("{s:s}", "op", "capture");
	int c, filters = 0;
	char *text;
	struct gid g;

	o->out = NULL;
	optind = 0;
	while (req &&
	       (c = getopt_long(argc, argv, "+c:s:w:", opts, NULL)) != -1) {
		switch (c) {
		case 'i':
			if (number_parse(optarg, 10, 1, INT64_MAX, &id) < 0)
				goto usage;
			json_object_set_new(req, "client_id",
					    json_integer((json_int_t)id));
			filters++;
			break;
		case 'v':
			json_object_set_new(req, "vm", json_string(optarg));
			filters++;
			break;
		case 'g':
			if (gid_parse(optarg, &g) < 0)
				goto usage;
			json_object_set_new(req, "gid", json_string(optarg));
			filters++;
			break;
		case 'c':
			if (number_parse(optarg, 10, 1, 10000000, &count) < 0)
				goto usage;
			break;
		case 's':
			if (number_parse(optarg, 10, 1, 86400, &seconds) < 0)
				goto usage;
			break;
		case 'w': o->out = optarg; break;
		default: goto usage;
		}
	}
	if (req == NULL || filters > 1 || o->out == NULL || optind < argc)
		goto usage;
	json_object_set_new(req, "count", json_integer((json_int_t)count));
	json_object_set_new(req, "seconds", json_integer((json_int_t)seconds));
	text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (text == NULL || strlen(text) >= sizeof(o->request)) {
		free(text);
		return muxctl_capture_usage();
	}
	snprintf(o->request, sizeof(o->request), "%s", text);
	free(text);
	return 0;
usage:
	json_decref(req);
	return muxctl_capture_usage();
}

/* The daemon's lines, one at a time, from fd. */
struct muxctl_capture_in {
	int fd;
	char buf[65536];
	size_t len;
};

static json_t *muxctl_capture_line(struct muxctl_capture_in *in)
{
	char *nl;
	json_t *o;
	ssize_t n;

	for (;;) {
		nl = memchr(in->buf, '\n', in->len);
		if (nl) {
			*nl = '\0';
			o = json_loads(in->buf, 0, NULL);
			in->len -= (size_t)(nl + 1 - in->buf);
			memmove(in->buf, nl + 1, in->len);
			return o ? o : json_null();
		}
		if (in->len == sizeof(in->buf))
			return NULL; /* no line is that long */
		n = read(in->fd, in->buf + in->len, sizeof(in->buf) - in->len);
		if (n < 0 && errno == EINTR) {
			if (muxctl_capture_stop)
				shutdown(in->fd, SHUT_RDWR);
			continue;
		}
		if (n <= 0)
			return NULL;
		in->len += (size_t)n;
	}
}

/* The records to f until the daemon's end line (its figures said), or
 * the daemon or the reader goes. */
static int muxctl_capture_copy(struct muxctl_capture_in *in, FILE *f)
{
	struct muxctl_capture_rec r;
	unsigned long long bad = 0, n = 0;
	json_t *o;
	int rc = 1;

	while ((o = muxctl_capture_line(in)) != NULL) {
		if (json_is_true(json_object_get(o, "end"))) {
			fprintf(stderr,
				"rdmacm-muxctl: capture: %lld MADs (%s), %lld lost by a slow reader\n",
				(long long)json_integer_value(
					json_object_get(o, "captured")),
				json_string_value(json_object_get(o, "why")),
				(long long)json_integer_value(
					json_object_get(o, "lost")));
			rc = 0;
		} else if (muxctl_capture_parse(o, &r) < 0) {
			bad++;
		} else if (muxctl_pcapng_write(f, &r) < 0 || fflush(f)) {
			fprintf(stderr, "rdmacm-muxctl: capture: write: %s\n",
				strerror(errno));
			json_decref(o);
			return 1;
		} else {
			n++;
		}
		json_decref(o);
		if (rc == 0)
			break;
	}
	if (bad)
		fprintf(stderr,
			"rdmacm-muxctl: capture: %llu records not understood\n",
			bad);
	if (rc && muxctl_capture_stop) {
		fprintf(stderr, "rdmacm-muxctl: capture: stopped, %llu MADs\n",
			n);
		rc = 0;
	} else if (rc) {
		fprintf(stderr, "rdmacm-muxctl: capture: the daemon went\n");
	}
	return rc;
}

int muxctl_capture_main(const char *admin, int argc, char **argv)
{
	struct muxctl_capture_opts o;
	struct muxctl_capture_in *in;
	struct sigaction sa = { .sa_handler = muxctl_capture_on_signal };
	json_t *reply;
	FILE *f;
	int rc = muxctl_capture_args(argc, argv, &o);

	if (rc)
		return rc;
	if (strcmp(o.out, "-") == 0 && isatty(STDOUT_FILENO)) {
		fprintf(stderr,
			"rdmacm-muxctl: capture: not to a terminal (-w FILE, or a pipe)\n");
		return 2;
	}
	in = calloc(1, sizeof(*in));
	if (in == NULL)
		return 1;
	in->fd = muxctl_status_connect(admin, "the admin socket is root's");
	if (in->fd < 0 ||
	    send(in->fd, o.request, strlen(o.request), MSG_NOSIGNAL) < 0 ||
	    send(in->fd, "\n", 1, MSG_NOSIGNAL) < 0) {
		rc = 1;
		goto out;
	}
	reply = muxctl_capture_line(in);
	if (!json_is_true(json_object_get(reply, "ok"))) {
		muxctl_status_printable(reply);
		const char *why = json_string_value(
			json_object_get(json_object_get(reply, "error"),
					"message"));

		fprintf(stderr, "rdmacm-muxctl: capture: %s\n",
			why ? why : "no answer");
		json_decref(reply);
		rc = 1;
		goto out;
	}
	fprintf(stderr, "rdmacm-muxctl: capturing %s\n",
		json_string_value(json_object_get(reply, "capture")));
	json_decref(reply);
	f = strcmp(o.out, "-") == 0 ? stdout : fopen(o.out, "wb");
	if (f == NULL || muxctl_pcapng_start(f) < 0 || fflush(f)) {
		fprintf(stderr, "rdmacm-muxctl: capture: %s: %s\n", o.out,
			strerror(errno));
		rc = 1;
		goto out;
	}
	/* An interrupt ends the capture; the file stays whole. */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	rc = muxctl_capture_copy(in, f);
	if (f != stdout && fclose(f) != 0)
		rc = 1;
out:
	if (in->fd >= 0)
		close(in->fd);
	free(in);
	return rc;
}
