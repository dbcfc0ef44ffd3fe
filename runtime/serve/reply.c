/* reply.c — complete HTTP replies of the server: a body with its status,
 * JSON, OpenAI-shaped errors; HEAD answered as GET without the body; every
 * reply counted in ingot_http_requests_total by status. See server_state.h.
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "messages_api.h"
#include "server_state.h"

static const char *reason_phrase(int code) {
    switch (code) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
    }
}

void srv_count_status(server *s, int code) {
    char lv[16];
    snprintf(lv, sizeof lv, "%d", code);
    met_inc(s->m_requests, lv, 1);
}

/* Sends a complete reply with body (taken over, may be NULL), uncounted. A
 * HEAD request gets the same headers, Content-Length included, and no body
 * (evhttp would write one). */
void srv_send_body(struct evhttp_request *r, int code, const char *content_type, char *body, size_t len) {
    struct evkeyvalq *h = evhttp_request_get_output_headers(r);
    evhttp_add_header(h, "Content-Type", content_type);
    struct evbuffer *buf = NULL;
    if (evhttp_request_get_command(r) == EVHTTP_REQ_HEAD) {
        char n[32];
        snprintf(n, sizeof n, "%zu", body ? len : 0);
        evhttp_add_header(h, "Content-Length", n);
    } else if ((buf = evbuffer_new()) && body) {
        evbuffer_add(buf, body, len);
    }
    free(body);
    evhttp_send_reply(r, code, reason_phrase(code), buf);
    if (buf) evbuffer_free(buf);
}

/* Sends a complete reply with body (taken over, may be NULL) and counts it. */
void srv_reply(server *s, struct evhttp_request *r, int code, const char *content_type, char *body, size_t len) {
    srv_send_body(r, code, content_type, body, len);
    srv_count_status(s, code);
}

void srv_reply_json(server *s, struct evhttp_request *r, int code, cJSON *j) {
    char *body = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    srv_reply(s, r, code, "application/json", body, body ? strlen(body) : 0);
}

/* 1 when r came to the Messages API, whose clients read Anthropic's error shape. */
static int messages_route(struct evhttp_request *r) {
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(r);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    return path && !strncmp(path, "/v1/messages", 12) && (!path[12] || path[12] == '/');
}

void srv_reply_error(server *s, struct evhttp_request *r, const oai_error *e) {
    char *body = messages_route(r) ? msg_error_json(e) : oai_error_json(e);
    srv_reply(s, r, e->status, "application/json", body, body ? strlen(body) : 0);
}

void srv_reply_error_msg(server *s, struct evhttp_request *r, int status, const char *type, const char *code,
                         const char *msg) {
    oai_error e;
    oai_error_set(&e, status, type, NULL, code, "%s", msg);
    srv_reply_error(s, r, &e);
}
