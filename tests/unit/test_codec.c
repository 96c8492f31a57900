// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The protocol codec: round trips of every message, every split point of
 * the byte stream, and every malformed case with its specific error. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "protocol/rdmacm_mux_proto.h"
#include "common/wire.h"

struct msg {
	uint8_t kind, flags;
	uint32_t rid;
	uint8_t payload[512];
	size_t len;
};

static void msg_json(struct msg *m, uint8_t flags, uint32_t rid, json_t *j)
{
	char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);

	assert_non_null(text);
	m->kind = PROTO_KIND_JSON;
	m->flags = flags;
	m->rid = rid;
	m->len = strlen(text);
	assert_true(m->len <= sizeof(m->payload));
	memcpy(m->payload, text, m->len);
	free(text);
	json_decref(j);
}

static void sample_mad(struct proto_mad *pm, uint16_t port)
{
	int i;

	memset(pm, 0, sizeof(*pm));
	pm->addr.port = port;
	pm->addr.flags = PROTO_MAD_F_GRH;
	pm->addr.hop_limit = 64;
	pm->addr.traffic_class = 0x20;
	pm->addr.sl = 3;
	pm->addr.flow_label = 0xabcde;
	pm->addr.remote_qpn = 1;
	pm->addr.qkey = 0x80010000u;
	pm->addr.lid = 0x1234;
	pm->addr.pkey_index = 2;
	for (i = 0; i < 16; i++) {
		pm->addr.local_gid[i] = (uint8_t)(i + 1);
		pm->addr.remote_gid[i] = (uint8_t)(0xf0 | i);
	}
	pm->mad_len = 256;
	for (i = 0; i < 256; i++)
		pm->mad[i] = (uint8_t)(i * 7);
}

static void msg_mad(struct msg *m, uint8_t flags, uint32_t rid)
{
	struct proto_mad pm;
	int n;

	sample_mad(&pm, 1);
	n = proto_mad_encode(&pm, m->payload, sizeof(m->payload));
	assert_int_equal(n, PROTO_MAD_ADDR_SIZE + 256);
	m->kind = PROTO_KIND_MAD;
	m->flags = flags;
	m->rid = rid;
	m->len = (size_t)n;
}

/* One of every message in protocol v1. */
static size_t all_messages(struct msg *out)
{
	uint8_t gid[16] = { 0xfe, 0x80 };
	size_t n = 0;

	gid[15] = 1;
	msg_json(&out[n++], 0, 1,
		 json_pack("{s:s, s:{s:i, s:i}, s:s, s:[s, s]}", "op", "hello",
			   "protocol", "major", 1, "minor", 0, "name", "vm1",
			   "features", "mad", "port-events"));
	msg_json(&out[n++], PROTO_FLAG_REPLY, 1,
		 json_pack("{s:b, s:{s:i, s:i}, s:[s], s:i, s:s, s:i}", "ok", 1,
			   "protocol", "major", 1, "minor", 0, "features",
			   "mad", "client_id", 7, "daemon", "rdmacm-muxd 0.1.0",
			   "max_payload", 65536));
	msg_json(&out[n++], 0, 2,
		 json_pack("{s:s, s:s, s:o}", "op", "register_gid", "port",
			   "sim0", "gid", proto_gid_to_json(gid)));
	msg_json(&out[n++], PROTO_FLAG_REPLY, 2,
		 json_pack("{s:b, s:i, s:s, s:i}", "ok", 1, "port", 0,
			   "port_name", "sim0", "gid_index", 3));
	msg_json(&out[n++], 0, 3,
		 json_pack("{s:s, s:i, s:o}", "op", "unregister_gid", "port", 0,
			   "gid", proto_gid_to_json(gid)));
	msg_json(&out[n++], 0, 4, json_pack("{s:s}", "op", "list_gids"));
	msg_json(&out[n++], 0, 5, json_pack("{s:s}", "op", "list_ports"));
	msg_json(&out[n++], 0, 0xffffffffu, json_pack("{s:s}", "op", "ping"));
	msg_json(&out[n++], PROTO_FLAG_REPLY, 6,
		 proto_reply_error(EEXIST, "GID %s taken", "fe80::1"));
	msg_json(&out[n++], PROTO_FLAG_EVENT, 0,
		 json_pack("{s:s, s:i, s:s, s:s}", "event", "port_state",
			   "port", 0, "port_name", "sim0", "state", "down"));
	msg_mad(&out[n++], 0, 9);
	msg_mad(&out[n++], PROTO_FLAG_EVENT, 0);
	return n;
}

static size_t encode_stream(const struct msg *msgs, size_t n, uint8_t *out)
{
	size_t off = 0, i;

	for (i = 0; i < n; i++) {
		proto_header_encode(out + off, msgs[i].kind, msgs[i].flags,
				    msgs[i].rid, (uint32_t)msgs[i].len);
		off += PROTO_HDR_SIZE;
		memcpy(out + off, msgs[i].payload, msgs[i].len);
		off += msgs[i].len;
	}
	return off;
}

/* Feed `len` bytes in chunks cut at the given points; check each frame. */
static void decode_and_check(const uint8_t *stream, size_t len,
			     const size_t *cuts, size_t ncuts,
			     const struct msg *msgs, size_t nmsgs)
{
	struct proto_decoder dec;
	struct proto_frame f;
	size_t start = 0, end, used, got = 0, c;
	int rc;

	proto_decoder_init(&dec, 0);
	for (c = 0; c <= ncuts; c++) {
		end = c < ncuts ? cuts[c] : len;
		while (start < end) {
			rc = proto_decoder_feed(&dec, stream + start,
						end - start, &used, &f);
			assert_true(rc >= 0);
			start += used;
			if (rc == 1) {
				assert_true(got < nmsgs);
				assert_int_equal(f.kind, msgs[got].kind);
				assert_int_equal(f.flags, msgs[got].flags);
				assert_int_equal(f.request_id, msgs[got].rid);
				assert_int_equal(f.length, msgs[got].len);
				assert_memory_equal(f.payload,
						    msgs[got].payload,
						    msgs[got].len);
				got++;
			}
		}
	}
	assert_int_equal(got, nmsgs);
	assert_int_equal(dec.hdr_have, 0);
	proto_decoder_fini(&dec);
}

static void test_every_split_point(void **state)
{
	static struct msg msgs[16];
	static uint8_t stream[16 * 600];
	size_t n = all_messages(msgs), len, cut;

	(void)state;
	len = encode_stream(msgs, n, stream);
	decode_and_check(stream, len, NULL, 0, msgs, n);
	for (cut = 1; cut < len; cut++)
		decode_and_check(stream, len, &cut, 1, msgs, n);
}

static void test_byte_at_a_time(void **state)
{
	static struct msg msgs[16];
	static uint8_t stream[16 * 600];
	static size_t cuts[16 * 600];
	size_t n = all_messages(msgs), len, i;

	(void)state;
	len = encode_stream(msgs, n, stream);
	for (i = 0; i + 1 < len; i++)
		cuts[i] = i + 1;
	decode_and_check(stream, len, cuts, len - 1, msgs, n);
}

static void test_json_messages_round_trip(void **state)
{
	static struct msg msgs[16];
	size_t n = all_messages(msgs), i;
	const char *err, *op, *message;
	json_t *j;

	(void)state;
	for (i = 0; i < n; i++) {
		if (msgs[i].kind != PROTO_KIND_JSON)
			continue;
		assert_int_equal(proto_json_parse(msgs[i].payload, msgs[i].len,
						  &j, &err),
				 0);
		if (msgs[i].flags == 0) {
			op = proto_request_op(j, &err);
			assert_non_null(op);
		} else if (msgs[i].flags == PROTO_FLAG_REPLY) {
			int st = proto_reply_status(j, &message);

			if (json_is_true(json_object_get(j, "ok")))
				assert_int_equal(st, 0);
			else {
				assert_int_equal(st, -EEXIST);
				assert_string_equal(message,
						    "GID fe80::1 taken");
			}
		}
		json_decref(j);
	}
}

static void test_mad_round_trip(void **state)
{
	uint8_t buf[PROTO_MAD_ADDR_SIZE + PROTO_MAD_MAX];
	struct proto_mad in, out;
	int n;

	(void)state;
	sample_mad(&in, 7);
	in.addr.status = 5;
	n = proto_mad_encode(&in, buf, sizeof(buf));
	assert_int_equal(n, 320);
	/* Spot-check the documented byte order and offsets. */
	assert_int_equal(wire_get16(buf + 0), 7);
	assert_int_equal(wire_get16(buf + 2), 256);
	assert_int_equal(buf[4], PROTO_MAD_F_GRH);
	assert_int_equal(buf[5], 64);
	assert_int_equal(wire_get32(buf + 8), 0xabcde);
	assert_int_equal(wire_get32(buf + 12), 1);
	assert_int_equal(wire_get32(buf + 16), 0x80010000u);
	assert_int_equal(wire_get16(buf + 20), 0x1234);
	assert_int_equal(wire_get16(buf + 22), 2);
	assert_int_equal(buf[24], 1);
	assert_int_equal(buf[40], 0xf0);
	assert_int_equal(buf[64 + 1], 7);
	/* Zeroed so that struct padding compares equal; every field of
	 * `in` is non-zero, so a field the decoder skips still shows. */
	memset(&out, 0, sizeof(out));
	assert_int_equal(proto_mad_decode(buf, (size_t)n, &out), 0);
	assert_memory_equal(&in.addr, &out.addr, sizeof(in.addr));
	assert_int_equal(out.mad_len, 256);
	assert_memory_equal(in.mad, out.mad, 256);
	/* Shorter MADs are framed too (the daemon checks CM sizes). */
	in.mad_len = 24;
	n = proto_mad_encode(&in, buf, sizeof(buf));
	assert_int_equal(n, 88);
	assert_int_equal(proto_mad_decode(buf, 88, &out), 0);
	assert_int_equal(out.mad_len, 24);
}

static void test_mad_malformed(void **state)
{
	uint8_t buf[PROTO_MAD_ADDR_SIZE + PROTO_MAD_MAX], bad[sizeof(buf)];
	struct proto_mad m;

	(void)state;
	sample_mad(&m, 0);
	assert_int_equal(proto_mad_encode(&m, buf, sizeof(buf)), 320);
	assert_int_equal(proto_mad_decode(buf, 63, &m), -EMSGSIZE);
	assert_int_equal(proto_mad_decode(buf, 319, &m), -EMSGSIZE);
	memcpy(bad, buf, sizeof(buf));
	wire_put16(bad + 2, 0);
	assert_int_equal(proto_mad_decode(bad, 64, &m), -EMSGSIZE);
	wire_put16(bad + 2, 257);
	assert_int_equal(proto_mad_decode(bad, 320, &m), -EMSGSIZE);
	memcpy(bad, buf, sizeof(buf));
	bad[4] = 0x02;
	assert_int_equal(proto_mad_decode(bad, 320, &m), -EINVAL);
	memcpy(bad, buf, sizeof(buf));
	wire_put32(bad + 8, 0x100000);
	assert_int_equal(proto_mad_decode(bad, 320, &m), -EINVAL);
	memcpy(bad, buf, sizeof(buf));
	wire_put32(bad + 12, 0x1000000);
	assert_int_equal(proto_mad_decode(bad, 320, &m), -EINVAL);
	memcpy(bad, buf, sizeof(buf));
	bad[63] = 1;
	assert_int_equal(proto_mad_decode(bad, 320, &m), -EINVAL);
	/* Encoder refuses what the decoder would refuse. */
	sample_mad(&m, 0);
	m.mad_len = 0;
	assert_int_equal(proto_mad_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.mad_len = 257;
	assert_int_equal(proto_mad_encode(&m, buf, sizeof(buf)), -EINVAL);
	m.mad_len = 256;
	assert_int_equal(proto_mad_encode(&m, buf, 100), -ENOSPC);
}

static int feed_header(uint8_t kind, uint8_t flags, uint16_t reserved,
		       uint32_t rid, uint32_t len, uint32_t max)
{
	struct proto_decoder dec;
	struct proto_frame f;
	uint8_t hdr[PROTO_HDR_SIZE];
	size_t used;
	int rc, rc2;

	proto_header_encode(hdr, kind, flags, rid, len);
	wire_put16(hdr + 2, reserved);
	proto_decoder_init(&dec, max);
	rc = proto_decoder_feed(&dec, hdr, sizeof(hdr), &used, &f);
	if (rc < 0) {
		/* Sticky: framing is lost for good. */
		rc2 = proto_decoder_feed(&dec, hdr, sizeof(hdr), &used, &f);
		assert_int_equal(rc2, rc);
		assert_int_equal(used, 0);
	}
	proto_decoder_fini(&dec);
	return rc;
}

static void test_header_malformed(void **state)
{
	(void)state;
	assert_int_equal(feed_header(0, 0, 0, 1, 0, 0), -EBADMSG);
	assert_int_equal(feed_header(3, 0, 0, 1, 0, 0), -EBADMSG);
	assert_int_equal(feed_header(PROTO_KIND_JSON, 0x04, 0, 1, 0, 0),
			 -EBADMSG);
	assert_int_equal(feed_header(PROTO_KIND_JSON,
				     PROTO_FLAG_REPLY | PROTO_FLAG_EVENT, 0, 1,
				     0, 0),
			 -EBADMSG);
	assert_int_equal(feed_header(PROTO_KIND_JSON, 0, 1, 1, 0, 0), -EBADMSG);
	assert_int_equal(feed_header(PROTO_KIND_JSON, 0, 0, 0, 2, 0), -EPROTO);
	assert_int_equal(feed_header(PROTO_KIND_MAD, PROTO_FLAG_REPLY, 0, 0, 2,
				     0),
			 -EPROTO);
	assert_int_equal(feed_header(PROTO_KIND_JSON, PROTO_FLAG_EVENT, 0, 5, 2,
				     0),
			 -EPROTO);
	/* Oversize is refused from the header alone, before buffering. */
	assert_int_equal(feed_header(PROTO_KIND_JSON, 0, 0, 1, 65537, 65536),
			 -EMSGSIZE);
	assert_int_equal(feed_header(PROTO_KIND_JSON, 0, 0, 1, 0xffffffffu, 0),
			 -EMSGSIZE);
	/* And the well-formed neighbours are accepted. */
	assert_int_equal(feed_header(PROTO_KIND_JSON, 0, 0, 1, 65536, 65536),
			 0);
	assert_int_equal(feed_header(PROTO_KIND_JSON, 0, 0, 1, 0, 0), 1);
	assert_int_equal(feed_header(PROTO_KIND_MAD, PROTO_FLAG_EVENT, 0, 0, 0,
				     0),
			 1);
}

static void test_json_malformed(void **state)
{
	static const char *const bad[] = {
		"",
		"not json",
		"[1,2]",
		"\"op\"",
		"42",
		"{\"op\":\"a\",\"op\":\"b\"}",
		"{\"a\":[[[[[[[[[[1]]]]]]]]]]}",
		"{\"op\":\"ping\"} trailing",
	};
	const char *err = NULL;
	json_t *j;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err = NULL;
		assert_int_equal(proto_json_parse((const uint8_t *)bad[i],
						  strlen(bad[i]), &j, &err),
				 -EBADMSG);
		assert_null(j);
		assert_non_null(err);
	}
	assert_int_equal(proto_json_parse((const uint8_t *)"{\"x\":1}", 7, &j,
					  &err),
			 0);
	err = NULL;
	assert_null(proto_request_op(j, &err));
	assert_non_null(err);
	json_decref(j);
	j = json_pack("{s:i}", "op", 3);
	assert_null(proto_request_op(j, &err));
	json_decref(j);
	/* A reply without a boolean "ok" is a protocol error. */
	j = json_pack("{s:s}", "ok", "yes");
	assert_int_equal(proto_reply_status(j, &err), -EPROTO);
	json_decref(j);
}

static void test_errno_names(void **state)
{
	static const int errs[] = {
		EEXIST,          EACCES,        EINVAL,     ENOENT,   ENODEV,
		EPROTONOSUPPORT, EADDRNOTAVAIL, EADDRINUSE, ENOSPC,   ENOTCONN,
		EOPNOTSUPP,      ENETDOWN,      EBADMSG,    EMSGSIZE, EALREADY,
		EBUSY,           ENOMSG,        ERANGE,     EAGAIN
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
		assert_int_equal(proto_errno_from_name(
					 proto_errno_name(errs[i])),
				 errs[i]);
	assert_string_equal(proto_errno_name(-EEXIST), "EEXIST");
	assert_int_equal(proto_errno_from_name("ENOTANERRNO"), EPROTO);
}

static void test_gid_json(void **state)
{
	uint8_t gid[16];
	static const uint8_t v4[16] = { 0, 0, 0,    0,    0,  0,  0, 0,
					0, 0, 0xff, 0xff, 10, 77, 0, 1 };
	json_t *j;

	(void)state;
	j = json_string("10.77.0.1");
	assert_int_equal(proto_gid_from_json(j, gid), 0);
	assert_memory_equal(gid, v4, 16);
	json_decref(j);
	j = proto_gid_to_json(v4);
	assert_string_equal(json_string_value(j), "::ffff:10.77.0.1");
	json_decref(j);
	j = json_string("fe80::zz");
	assert_int_equal(proto_gid_from_json(j, gid), -EINVAL);
	json_decref(j);
	j = json_integer(5);
	assert_int_equal(proto_gid_from_json(j, gid), -EINVAL);
	json_decref(j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_split_point),
		cmocka_unit_test(test_byte_at_a_time),
		cmocka_unit_test(test_json_messages_round_trip),
		cmocka_unit_test(test_mad_round_trip),
		cmocka_unit_test(test_mad_malformed),
		cmocka_unit_test(test_header_malformed),
		cmocka_unit_test(test_json_malformed),
		cmocka_unit_test(test_errno_names),
		cmocka_unit_test(test_gid_json),
	};

	/* RCM_TEST_FILTER=test_name runs one (a pattern, see cmocka). */
	if (getenv("RCM_TEST_FILTER"))
		cmocka_set_test_filter(getenv("RCM_TEST_FILTER"));
	return cmocka_run_group_tests_name("codec", tests, NULL, NULL);
}
