/* proxy.c — one request forwarded to a model's process, the reply streamed back.
 *
 * The request goes out over a fresh loopback connection with the client's
 * method, URI, body and headers (Authorization included: a child started with
 * --api-key checks it). The reply's status and headers go to the client as
 * soon as the child sends them, and every piece of the body as it arrives
 * (evhttp_request_set_chunked_cb), so an SSE stream keeps its latency.
 *
 * A client that goes away closes the connection to the child, which cancels
 * the generation there. A child that dies (or resets the connection) before
 * replying gives the client a 502; one that dies mid-stream ends the stream
 * with an SSE error event.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/keyvalq_struct.h>

#include "router.h"

/* A reply may take as long as a generation does; the child's own
 * --request-timeout is what bounds it. */
#define UPSTREAM_TIMEOUT (7 * 86400)

/* Headers that describe one hop, not the message (RFC 9110 7.6.1), and those
 * libevent writes itself. */
static int hop_by_hop(const char *key) {
    static const char *const names[] = {"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization",
                                        "TE", "Trailer", "Transfer-Encoding", "Upgrade", "Host", "Content-Length"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcasecmp(key, names[i])) return 1;
    return 0;
}

static void unwatch(rt_fwd *f) {
    if (f->watch) event_free(f->watch);
    f->watch = NULL;
}

static void detach_client(rt_fwd *f) {
    unwatch(f);
    if (f->client_conn) evhttp_connection_set_closecb(f->client_conn, NULL, NULL);
    f->client_conn = NULL;
    f->client = NULL;
}

static void fwd_free(rt_fwd *f) {
    rt_router *r = f->router;
    detach_client(f);
    if (f->up_conn) evhttp_connection_free(f->up_conn); /* only when the router stops with f unanswered */
    if (f->deadline) event_free(f->deadline);
    if (f->body) evbuffer_free(f->body);
    free(f->uri);
    if (f->prev) f->prev->next = f->next;
    else r->fwds = f->next;
    if (f->next) f->next->prev = f->prev;
    free(f);
    rt_check_drained(r);
}

static void free_conn_later(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    evhttp_connection_free(arg);
}

void rt_release_conn(struct event_base *base, struct evhttp_connection *conn) {
    const struct timeval now = {0, 0};
    if (event_base_once(base, -1, EV_TIMEOUT, free_conn_later, conn, &now) != 0)
        fprintf(stderr, "ingot-router: out of memory (a connection is left open)\n");
}

static void release_upstream(rt_fwd *f) {
    if (!f->up_conn) return;
    rt_release_conn(f->router->base, f->up_conn);
    f->up_conn = NULL;
    f->up_req = NULL;
}

/* The client disconnected. libevent has already detached a request whose
 * reply was unfinished from the dying connection (we own it and free it). */
static void on_client_close(struct evhttp_connection *conn, void *arg) {
    (void)conn;
    rt_fwd *f = arg;
    struct evhttp_request *h = f->client;
    f->client = NULL;
    f->client_conn = NULL;
    unwatch(f);
    if (h && evhttp_request_get_connection(h) == NULL) evhttp_request_free(h);
    rt_count_status(f->router, 499);
    if (f->deadline) rt_unqueue(f);
    if (f->up_conn) {
        /* closing the child's connection cancels the generation there */
        evhttp_connection_free(f->up_conn);
        f->up_conn = NULL;
        f->up_req = NULL;
    }
    if (f->forwarded) rt_request_done(f->model);
    fwd_free(f);
}

/* libevent does not read from a connection while its reply is pending, so a
 * client that hung up is noticed only when a write fails; a non-streamed
 * reply writes nothing until the end. This watches the socket meanwhile:
 * readable with nothing to read is EOF (or a reset), and freeing the
 * connection runs on_client_close. */
static void on_peer_readable(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    rt_fwd *f = arg;
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) { /* more from the client (a pipelined request): writes will tell */
        unwatch(f);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    struct evhttp_connection *conn = f->client_conn;
    unwatch(f);
    if (conn) evhttp_connection_free(conn); /* f is freed by now */
}

rt_fwd *rt_fwd_new(rt_router *r, rt_model *m, struct evhttp_request *req, const char *body, size_t len) {
    rt_fwd *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->router = r;
    f->model = m;
    f->client = req;
    f->method = evhttp_request_get_command(req);
    f->uri = strdup(evhttp_request_get_uri(req));
    f->body = evbuffer_new();
    if (!f->uri || !f->body || evbuffer_add(f->body, body, len) != 0) {
        free(f->uri);
        if (f->body) evbuffer_free(f->body);
        free(f);
        return NULL;
    }
    f->next = r->fwds;
    if (r->fwds) r->fwds->prev = f;
    r->fwds = f;
    f->client_conn = evhttp_request_get_connection(req);
    if (f->client_conn) {
        evhttp_connection_set_closecb(f->client_conn, on_client_close, f);
        const evutil_socket_t fd = bufferevent_getfd(evhttp_connection_get_bufferevent(f->client_conn));
        if (fd >= 0 && (f->watch = event_new(r->base, fd, EV_READ | EV_PERSIST, on_peer_readable, f)))
            event_add(f->watch, NULL);
    }
    return f;
}

void rt_fwd_fail(rt_fwd *f, int status, const char *type, const char *code, const char *message) {
    if (f->client) {
        struct evhttp_request *req = f->client;
        detach_client(f);
        if (status == 503) evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
        rt_reply_error(f->router, req, status, type, NULL, code, message);
    }
    fwd_free(f);
}

static int on_up_headers(struct evhttp_request *up, void *arg) {
    rt_fwd *f = arg;
    if (!f->client) return -1;
    const int code = evhttp_request_get_response_code(up);
    struct evkeyvalq *out = evhttp_request_get_output_headers(f->client);
    struct evkeyval *h;
    TAILQ_FOREACH(h, evhttp_request_get_input_headers(up), next) {
        /* Content-Length stays: with it libevent sends the body as is rather than chunked */
        if (!strcasecmp(h->key, "Content-Length") || !hop_by_hop(h->key)) evhttp_add_header(out, h->key, h->value);
    }
    const char *reason = evhttp_request_get_response_code_line(up);
    unwatch(f); /* writes now tell whether the client is there */
    evhttp_send_reply_start(f->client, code, reason && *reason ? reason : NULL);
    f->reply_started = code;
    return 0;
}

static void on_up_chunk(struct evhttp_request *up, void *arg) {
    rt_fwd *f = arg;
    struct evbuffer *in = evhttp_request_get_input_buffer(up);
    if (f->client && f->reply_started && evbuffer_get_length(in) > 0) evhttp_send_reply_chunk(f->client, in);
}

static void on_up_done(struct evhttp_request *up, void *arg) {
    rt_fwd *f = arg;
    rt_router *r = f->router;
    rt_model *m = f->model;
    const int code = up ? evhttp_request_get_response_code(up) : 0;
    struct evhttp_request *client = f->client;
    release_upstream(f);
    detach_client(f);
    if (client && !f->reply_started) {
        char msg[512];
        snprintf(msg, sizeof msg, "the process of model '%s' failed before answering (it exited, or closed the "
                                  "connection); the next request restarts it", m->name);
        rt_reply_error(r, client, 502, "server_error", NULL, "model_crashed", msg);
    } else if (client) {
        if (code == 0) {
            /* the child vanished mid-reply: a stream ends with an error event the client can tell from [DONE] */
            const char *type = evhttp_find_header(evhttp_request_get_output_headers(client), "Content-Type");
            if (type && !strncasecmp(type, "text/event-stream", 17)) {
                struct evbuffer *b = evbuffer_new();
                if (b) {
                    evbuffer_add_printf(b, "data: {\"error\": {\"message\": \"the process of model '%s' exited "
                                           "mid-stream\", \"type\": \"server_error\", \"param\": null, \"code\": "
                                           "\"model_crashed\"}}\n\n", m->name);
                    evhttp_send_reply_chunk(client, b);
                    evbuffer_free(b);
                }
            }
            fprintf(stderr, "ingot-router: %s: the reply was cut short (the process exited or reset the "
                            "connection)\n", m->name);
        }
        evhttp_send_reply_end(client);
        rt_count_status(r, f->reply_started);
    }
    if (f->forwarded) rt_request_done(m);
    fwd_free(f);
}

void rt_forward(rt_fwd *f) {
    rt_router *r = f->router;
    rt_model *m = f->model;
    if (!f->client) { /* cannot happen: a gone client's request is freed at once */
        fwd_free(f);
        return;
    }
    f->up_conn = evhttp_connection_base_new(r->base, NULL, "127.0.0.1", (ev_uint16_t)m->port);
    f->up_req = f->up_conn ? evhttp_request_new(on_up_done, f) : NULL;
    if (!f->up_req) {
        if (f->up_conn) evhttp_connection_free(f->up_conn);
        f->up_conn = NULL;
        rt_fwd_fail(f, 503, "service_unavailable", "out_of_memory", "out of memory");
        return;
    }
    evhttp_connection_set_timeout(f->up_conn, UPSTREAM_TIMEOUT);
    evhttp_request_set_header_cb(f->up_req, on_up_headers);
    evhttp_request_set_chunked_cb(f->up_req, on_up_chunk);
    struct evkeyvalq *out = evhttp_request_get_output_headers(f->up_req);
    struct evkeyval *h;
    TAILQ_FOREACH(h, evhttp_request_get_input_headers(f->client), next)
        if (!hop_by_hop(h->key)) evhttp_add_header(out, h->key, h->value);
    char host[32];
    snprintf(host, sizeof host, "127.0.0.1:%d", m->port);
    evhttp_add_header(out, "Host", host);
    evbuffer_add_buffer(evhttp_request_get_output_buffer(f->up_req), f->body);
    if (evhttp_make_request(f->up_conn, f->up_req, f->method, f->uri) != 0) {
        /* libevent freed the request */
        evhttp_connection_free(f->up_conn);
        f->up_conn = NULL;
        f->up_req = NULL;
        rt_fwd_fail(f, 502, "server_error", "model_unreachable", "cannot connect to the model's process");
        return;
    }
    f->forwarded = 1;
    m->in_flight++;
}
