// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * The admin socket: the only way to change the daemon while it runs
 * (disconnect a client, reload the policy).  Root (or the daemon's own
 * user) only, checked per connection with SO_PEERCRED; every action is
 * logged with who asked.  One JSON request per line, one reply, close.
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

struct admin_conn {
	TAILQ_ENTRY(admin_conn) link; /* freed at shutdown if still open */
	struct mux *mux;
	struct bufferevent *bev;
	struct ucred cred;
};

static void admin_conn_free(struct admin_conn *ac)
{
	TAILQ_REMOVE(&ac->mux->admin_conns, ac, link);
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
	w = clients_worker_of(&mux->clients, client);
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

static void admin_read(struct bufferevent *bev, void *arg)
{
	struct admin_conn *ac = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	const char *err = NULL, *op;
	json_t *req, *reply;
	size_t len;
	char *line;

	line = evbuffer_readln(in, &len, EVBUFFER_EOL_LF);
	if (line == NULL) {
		if (evbuffer_get_length(in) > ADMIN_MAX_REQUEST) {
			admin_reply(bev, proto_reply_error(EMSGSIZE,
							   "request too long"));
			bufferevent_disable(bev, EV_READ);
		}
		return;
	}
	bufferevent_disable(bev, EV_READ);
	if (proto_json_parse((uint8_t *)line, len, &req, &err) < 0) {
		admin_reply(bev, proto_reply_error(EBADMSG, "%s", err));
		free(line);
		return;
	}
	free(line);
	op = proto_request_op(req, &err);
	atomic_fetch_add(&ac->mux->stats.admin_actions, 1);
	if (op == NULL)
		reply = proto_reply_error(EINVAL, "%s", err);
	else if (strcmp(op, "disconnect_client") == 0)
		reply = admin_disconnect(ac, req);
	else if (strcmp(op, "reload_policy") == 0)
		reply = admin_reload(ac);
	else
		reply = proto_reply_error(EOPNOTSUPP, "unknown admin op \"%s\"",
					  op);
	json_decref(req);
	admin_reply(bev, reply);
}

static void admin_written(struct bufferevent *bev, void *arg)
{
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0 &&
	    !(bufferevent_get_enabled(bev) & EV_READ))
		admin_conn_free(arg);
}

static void admin_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	admin_conn_free(arg);
}

static void admin_accept(struct evconnlistener *l, evutil_socket_t fd,
			 struct sockaddr *sa, int salen, void *arg)
{
	struct mux *mux = arg;
	socklen_t clen = sizeof(struct ucred);
	struct admin_conn *ac = calloc(1, sizeof(*ac));
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
	bufferevent_enable(bev, EV_READ | EV_WRITE);
}

int admin_listen(struct mux *mux, struct event_base *base)
{
	TAILQ_INIT(&mux->admin_conns);
	if (mux->cfg.admin_path == NULL)
		return 0;
	return unix_listener_open(&mux->admin_listener, base,
				  mux->cfg.admin_path, 0600, (uid_t)-1,
				  (gid_t)-1,
				  listen_fds_claim(&mux->listen_fds, "admin",
						   mux->cfg.admin_path),
				  0, admin_accept, mux);
}

void admin_close(struct mux *mux)
{
	while (!TAILQ_EMPTY(&mux->admin_conns))
		admin_conn_free(TAILQ_FIRST(&mux->admin_conns));
	unix_listener_close(&mux->admin_listener);
}
