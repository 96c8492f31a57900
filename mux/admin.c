// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The admin socket: the only way to change the daemon while it runs
 * (disconnect a client, reload the policy).  Root (or the daemon's own
 * user) only, checked per connection with SO_PEERCRED; every action is
 * logged with who asked.  One JSON request per line, one reply, close;
 * a capture's reply is followed by its MADs until it ends (capture.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>

#include "mux/mux.h"

#define ADMIN_MAX_REQUEST 4096
/* How long a connection may take to send its request. */
#define ADMIN_REQUEST_WAIT_MS 5000

struct admin_conn {
	TAILQ_ENTRY(admin_conn) link; /* freed at shutdown if still open */
	struct mux *mux;
	struct bufferevent *bev;
	struct ucred cred;
	int answered;
	struct capture *capture; /* streaming its MADs until it ends */
};

static void admin_conn_free(struct admin_conn *ac)
{
	TAILQ_REMOVE(&ac->mux->admin_conns, ac, link);
	capture_free(ac->capture);
	bufferevent_free(ac->bev);
	free(ac);
}

static void admin_reply(struct bufferevent *bev, json_t *reply)
{
	char *text = json_dumps(reply, JSON_COMPACT);

	if (text) {
		evbuffer_add_printf(bufferevent_get_output(bev), "%s\n", text);
		free(text);
	}
	json_decref(reply);
}

static json_t *admin_disconnect(struct admin_conn *ac, json_t *req)
{
	struct mux *mux = ac->mux;
	json_t *id = json_object_get(req, "client_id");
	struct worker_msg *msg;
	uint64_t client;
	int w;

	if (!json_is_integer(id) || json_integer_value(id) <= 0)
		return proto_reply_error(EINVAL,
					 "\"client_id\" must be a client's id");
	client = (uint64_t)json_integer_value(id);
	w = clients_worker_of(mux->clients, client);
	if (w < 0)
		return proto_reply_error(ENOENT, "no client %llu",
					 (unsigned long long)client);
	msg = calloc(1, sizeof(*msg));
	if (msg == NULL)
		return proto_reply_error(ENOMEM, "out of memory");
	msg->type = WMSG_KICK;
	msg->client_id = client;
	msg->text = strdup("disconnected by the administrator");
	worker_post(mux->workers[w], msg);
	log_info("admin: uid %d pid %d disconnected client %llu",
		 (int)ac->cred.uid, (int)ac->cred.pid,
		 (unsigned long long)client);
	return proto_reply_ok();
}

static json_t *admin_reload(struct admin_conn *ac)
{
	char msg[512];
	int rc = mux_policy_reload(ac->mux, msg, sizeof(msg));

	log_info("admin: uid %d pid %d reloaded the policy: %s%s",
		 (int)ac->cred.uid, (int)ac->cred.pid, rc ? "failed: " : "",
		 msg);
	if (rc)
		return proto_reply_error(rc, "%s", msg);
	return json_pack("{s:b, s:s}", "ok", 1, "message", msg);
}

/* The capture is over, its last line written: the connection closes
 * once that is read. */
static void admin_capture_ended(void *arg)
{
	struct admin_conn *ac = arg;

	ac->answered = 1;
}

/* A capture streams on this connection: the reply, then its MADs, then
 * its end; nothing the reader sends is taken, but its close stops it. */
static json_t *admin_capture(struct admin_conn *ac, json_t *req)
{
	struct proto_capture_request cr;
	char what[96], err[160];
	int rc;

	rc = proto_capture_request_parse(req, &cr, err, sizeof(err));
	if (rc)
		return proto_reply_error(rc, "%s", err);
	rc = capture_start(ac->mux, bufferevent_get_base(ac->bev), ac->bev, &cr,
			   admin_capture_ended, ac, &ac->capture);
	if (rc)
		return proto_reply_error(
			rc, "%s",
			rc == -EBUSY ? "as many captures as allowed run already"
				     : "cannot start a capture");
	capture_filter_describe(&cr, what, sizeof(what));
	/* A capture shows private data and addresses: said who. */
	log_info("admin: uid %d pid %d captures %s (%llu MADs, %u s at most)",
		 (int)ac->cred.uid, (int)ac->cred.pid, what,
		 (unsigned long long)cr.count, cr.seconds);
	ac->answered = 0;
	bufferevent_set_timeouts(ac->bev, NULL, NULL);
	bufferevent_enable(ac->bev, EV_READ);
	return json_pack("{s:b, s:s, s:I, s:I}", "ok", 1, "capture", what,
			 "count", (json_int_t)cr.count, "seconds",
			 (json_int_t)cr.seconds);
}

/* The one request (line, len bytes), answered; nothing more is read. */
static void admin_answer(struct admin_conn *ac, const char *line, size_t len)
{
	struct bufferevent *bev = ac->bev;
	const char *err = NULL, *op;
	json_t *req, *reply;

	ac->answered = 1;
	bufferevent_disable(bev, EV_READ);
	if (proto_json_parse((const uint8_t *)line, len, &req, &err) < 0) {
		admin_reply(bev, proto_reply_error(EBADMSG, "%s", err));
		return;
	}
	op = proto_request_op(req, &err);
	atomic_fetch_add(&ac->mux->stats.admin_actions, 1);
	if (op == NULL)
		reply = proto_reply_error(EINVAL, "%s", err);
	else if (strcmp(op, "disconnect_client") == 0)
		reply = admin_disconnect(ac, req);
	else if (strcmp(op, "reload_policy") == 0)
		reply = admin_reload(ac);
	else if (strcmp(op, "capture") == 0)
		reply = admin_capture(ac, req);
	else
		reply = proto_reply_error(EOPNOTSUPP, "unknown admin op \"%s\"",
					  op);
	json_decref(req);
	admin_reply(bev, reply);
}

static void admin_read(struct bufferevent *bev, void *arg)
{
	struct admin_conn *ac = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len;
	char *line;

	if (ac->capture) {
		/* Read only to notice the reader's close. */
		evbuffer_drain(in, evbuffer_get_length(in));
		return;
	}
	line = evbuffer_readln(in, &len, EVBUFFER_EOL_LF);
	if (line == NULL) {
		if (evbuffer_get_length(in) > ADMIN_MAX_REQUEST) {
			ac->answered = 1;
			admin_reply(bev, proto_reply_error(EMSGSIZE,
							   "request too long"));
			bufferevent_disable(bev, EV_READ);
		}
		return;
	}
	admin_answer(ac, line, len);
	free(line);
}

static void admin_written(struct bufferevent *bev, void *arg)
{
	struct admin_conn *ac = arg;

	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0 &&
	    ac->answered)
		admin_conn_free(ac);
}

/* A request that ends where its sender shut down its side, without a
 * newline, is still a request; one that never comes is said and the
 * connection closed. */
static void admin_event(struct bufferevent *bev, short what, void *arg)
{
	struct admin_conn *ac = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in);
	char *text;

	if ((what & BEV_EVENT_READING) && !ac->answered) {
		if ((what & BEV_EVENT_EOF) && len > 0) {
			text = (char *)evbuffer_pullup(in, -1);
			if (text) {
				admin_answer(ac, text, len);
				return;
			}
		}
		if (what & BEV_EVENT_TIMEOUT) {
			ac->answered = 1;
			admin_reply(bev,
				    proto_reply_error(ETIMEDOUT,
						      "no request within %d ms",
						      ADMIN_REQUEST_WAIT_MS));
			return;
		}
	}
	admin_conn_free(ac);
}

static void admin_accept(struct evconnlistener *l, evutil_socket_t fd,
			 struct sockaddr *sa, int salen, void *arg)
{
	struct mux *mux = arg;
	socklen_t clen = sizeof(struct ucred);
	struct admin_conn *ac = calloc(1, sizeof(*ac));
	struct timeval wait = { ADMIN_REQUEST_WAIT_MS / 1000,
				(ADMIN_REQUEST_WAIT_MS % 1000) * 1000 };
	struct bufferevent *bev;

	(void)sa;
	(void)salen;
	if (ac == NULL ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &ac->cred, &clen) < 0 ||
	    (ac->cred.uid != 0 && ac->cred.uid != geteuid())) {
		/* The socket's mode already keeps others out; this holds
		 * even if someone widened it. */
		if (ac)
			log_warnx("admin: refused uid %d pid %d",
				  (int)ac->cred.uid, (int)ac->cred.pid);
		free(ac);
		close(fd);
		return;
	}
	ac->mux = mux;
	bev = bufferevent_socket_new(evconnlistener_get_base(l), fd,
				     BEV_OPT_CLOSE_ON_FREE);
	if (bev == NULL) {
		free(ac);
		close(fd);
		return;
	}
	ac->bev = bev;
	TAILQ_INSERT_TAIL(&mux->admin_conns, ac, link);
	bufferevent_setcb(bev, admin_read, admin_written, admin_event, ac);
	bufferevent_set_timeouts(bev, &wait, NULL);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
}

int admin_listen(struct mux *mux, struct event_base *base)
{
	TAILQ_INIT(&mux->admin_conns);
	if (mux->cfg.admin_path == NULL)
		return 0;
	return unix_listener_open(mux->admin_listener, base,
				  mux->cfg.admin_path, 0600, (uid_t)-1,
				  (gid_t)-1,
				  listen_fds_claim(mux->listen_fds, "admin",
						   mux->cfg.admin_path),
				  0, admin_accept, mux);
}

void admin_close(struct mux *mux)
{
	while (!TAILQ_EMPTY(&mux->admin_conns))
		admin_conn_free(TAILQ_FIRST(&mux->admin_conns));
	unix_listener_close(mux->admin_listener);
}
