/* endpoints.c — what the router answers itself, and the routing by "model".
 *
 *   GET /health, /ready       the router's own state (and each model's)
 *   GET /metrics              the router's metrics, then every running child's
 *                             with model="NAME" on each sample
 *   GET /v1/models[/ID]       every configured model, running or not
 *   anything else with a JSON body naming a "model": forwarded to that
 *   model's process (started first if needed); an unknown model is a 404
 *   model_not_found, as OpenAI answers it
 *
 * With --api-key the router checks the key for everything but /health,
 * /ready and /metrics; either way the Authorization header is forwarded, so
 * a child started with its own --api-key checks it too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <event2/buffer.h>

#include "router.h"

#define METRICS_TIMEOUT 5 /* seconds a child's /metrics may take */

void rt_count_status(rt_router *r, int status) {
    char code[16];
    snprintf(code, sizeof code, "%d", status);
    met_inc(r->m_requests, code, 1);
}

static void reply_json(rt_router *r, struct evhttp_request *req, int status, cJSON *j) {
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    struct evbuffer *b = evbuffer_new();
    if (b && text) evbuffer_add(b, text, strlen(text));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    const char *reason = status == 200 ? "OK" : status == 400 ? "Bad Request" : status == 401 ? "Unauthorized"
                       : status == 404 ? "Not Found" : status == 502 ? "Bad Gateway"
                       : status == 503 ? "Service Unavailable" : "Error";
    evhttp_send_reply(req, status, reason, b);
    if (b) evbuffer_free(b);
    free(text);
    rt_count_status(r, status);
}

void rt_reply_error(rt_router *r, struct evhttp_request *req, int status, const char *type, const char *param,
                    const char *code, const char *message) {
    cJSON *root = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    reply_json(r, req, status, root);
}

/* Compares in time independent of where the first difference is. */
static int key_matches(const char *given, const char *key) {
    const size_t gl = strlen(given), kl = strlen(key);
    unsigned char diff = (unsigned char)(gl != kl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)(key[i] ^ (i < gl ? given[i] : 0));
    return diff == 0;
}

static int authorized(rt_router *r, struct evhttp_request *req) {
    if (!r->api_key) return 1;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (!h) {
        rt_reply_error(r, req, 401, "invalid_request_error", NULL, "missing_api_key",
                       "You didn't provide an API key (Authorization: Bearer KEY)");
        return 0;
    }
    if (strncasecmp(h, "Bearer ", 7) != 0 || !key_matches(h + 7, r->api_key)) {
        rt_reply_error(r, req, 401, "invalid_request_error", NULL, "invalid_api_key", "Incorrect API key provided");
        return 0;
    }
    return 1;
}

static cJSON *model_object(rt_router *r, const rt_model *m) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", m->name);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", r->created);
    cJSON_AddStringToObject(o, "owned_by", "ingot");
    /* not OpenAI's: whether a process serves it now, and what it takes when it does */
    cJSON_AddStringToObject(o, "state", rt_state_name(m->state));
    cJSON_AddNumberToObject(o, "memory_bytes", m->footprint);
    return o;
}

/* An adapter a model's process loads, listed as a model over it (as the process lists it). */
static cJSON *adapter_object(rt_router *r, const rt_model *m, const char *adapter) {
    cJSON *o = model_object(r, m);
    cJSON_ReplaceItemInObjectCaseSensitive(o, "id", cJSON_CreateString(adapter));
    cJSON_AddStringToObject(o, "parent", m->name);
    return o;
}

static void handle_models(rt_router *r, struct evhttp_request *req, const char *id) {
    if (id) {
        const char *adapter;
        rt_model *m = rt_find_served(r, id, &adapter);
        if (m && adapter) {
            reply_json(r, req, 200, adapter_object(r, m, adapter));
            return;
        }
        if (!m) {
            char msg[400];
            snprintf(msg, sizeof msg, "The model '%.200s' does not exist", id);
            rt_reply_error(r, req, 404, "invalid_request_error", "model", "model_not_found", msg);
            return;
        }
        reply_json(r, req, 200, model_object(r, m));
        return;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    for (int i = 0; i < r->n_models; i++) {
        cJSON_AddItemToArray(data, model_object(r, &r->models[i]));
        for (int k = 0; k < r->models[i].n_adapters; k++)
            cJSON_AddItemToArray(data, adapter_object(r, &r->models[i], r->models[i].adapters[k]));
    }
    reply_json(r, req, 200, root);
}

static void handle_health(rt_router *r, struct evhttp_request *req, int ready_probe) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "status", r->draining ? "draining" : "ok");
    cJSON_AddNumberToObject(j, "memory_used_bytes", rt_memory_used(r));
    cJSON_AddNumberToObject(j, "memory_budget_bytes", r->memory_budget);
    cJSON *models = cJSON_AddObjectToObject(j, "models");
    for (int i = 0; i < r->n_models; i++) {
        const rt_model *m = &r->models[i];
        cJSON *o = cJSON_AddObjectToObject(models, m->name);
        cJSON_AddStringToObject(o, "state", rt_state_name(m->state));
        cJSON_AddNumberToObject(o, "pid", m->pid);
        cJSON_AddNumberToObject(o, "in_flight", m->in_flight);
        cJSON_AddNumberToObject(o, "waiting", m->n_pending);
        cJSON_AddNumberToObject(o, "memory_bytes", m->footprint);
    }
    /* the router itself is healthy while draining; it is not ready for more */
    reply_json(r, req, ready_probe && r->draining ? 503 : 200, j);
}

/* ---- /metrics ------------------------------------------------------------------ */

typedef struct {
    rt_router *router;
    struct evhttp_request *req;
    rt_metrics_merge *merge;
    int waiting;
    int failed;
} metrics_gather;

typedef struct {
    metrics_gather *g;
    rt_model *model;
    struct evhttp_connection *conn;
} metrics_fetch;

static void gather_finish(metrics_gather *g) {
    rt_router *r = g->router;
    size_t own_len, len = 0;
    char *own = met_render(r->met, &own_len);
    char *text = own ? rt_merge_render(g->merge, own, &len) : NULL;
    free(own);
    struct evbuffer *b = evbuffer_new();
    if (b && text) evbuffer_add(b, text, len);
    evhttp_add_header(evhttp_request_get_output_headers(g->req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(g->req, text ? 200 : 500, text ? "OK" : "Internal Server Error", b);
    rt_count_status(r, text ? 200 : 500);
    if (b) evbuffer_free(b);
    free(text);
    rt_merge_free(g->merge);
    free(g);
}

static void on_child_metrics(struct evhttp_request *up, void *arg) {
    metrics_fetch *mf = arg;
    metrics_gather *g = mf->g;
    if (up && evhttp_request_get_response_code(up) == 200) {
        struct evbuffer *in = evhttp_request_get_input_buffer(up);
        const size_t n = evbuffer_get_length(in);
        const char *text = (const char *)evbuffer_pullup(in, (ev_ssize_t)n);
        if (text && rt_merge_add(g->merge, mf->model->name, text, n) != 0) g->failed = 1;
    } else {
        fprintf(stderr, "ingot-router: %s: /metrics answered %d; left out of the merge\n", mf->model->name,
                up ? evhttp_request_get_response_code(up) : 0);
    }
    rt_release_conn(g->router->base, mf->conn);
    free(mf);
    if (--g->waiting == 0) gather_finish(g);
}

static void handle_metrics(rt_router *r, struct evhttp_request *req) {
    metrics_gather *g = calloc(1, sizeof *g);
    if (!g || !(g->merge = rt_merge_new())) {
        free(g);
        rt_reply_error(r, req, 503, "service_unavailable", NULL, NULL, "out of memory");
        return;
    }
    g->router = r;
    g->req = req;
    g->waiting = 1; /* held until every fetch is sent, so a synchronous failure cannot finish early */
    const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    for (int i = 0; i < r->n_models; i++) {
        rt_model *m = &r->models[i];
        if (m->state != RT_READY) continue;
        metrics_fetch *mf = calloc(1, sizeof *mf);
        if (!mf) continue;
        mf->g = g;
        mf->model = m;
        mf->conn = evhttp_connection_base_new(r->base, NULL, "127.0.0.1", (ev_uint16_t)m->port);
        struct evhttp_request *up = mf->conn ? evhttp_request_new(on_child_metrics, mf) : NULL;
        if (!up) {
            if (mf->conn) evhttp_connection_free(mf->conn);
            free(mf);
            continue;
        }
        evhttp_connection_set_timeout(mf->conn, METRICS_TIMEOUT);
        struct evkeyvalq *h = evhttp_request_get_output_headers(up);
        evhttp_add_header(h, "Host", "127.0.0.1");
        if (auth) evhttp_add_header(h, "Authorization", auth); /* a child with --metrics-auth checks it */
        g->waiting++;
        if (evhttp_make_request(mf->conn, up, EVHTTP_REQ_GET, "/metrics") != 0) {
            g->waiting--;
            evhttp_connection_free(mf->conn);
            free(mf);
        }
    }
    if (--g->waiting == 0) gather_finish(g);
}

/* ---- routing --------------------------------------------------------------------- */

static void route_by_model(rt_router *r, struct evhttp_request *req) {
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    const size_t len = evbuffer_get_length(in);
    if (len == 0) {
        rt_reply_error(r, req, 400, "invalid_request_error", "model",
                       "missing_required_parameter", "a JSON body naming a \"model\" is required");
        return;
    }
    /* evhttp refused bodies over --max-body already (413) */
    const char *body = (const char *)evbuffer_pullup(in, (ev_ssize_t)len);
    cJSON *j = body ? cJSON_ParseWithLength(body, len) : NULL;
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        rt_reply_error(r, req, 400, "invalid_request_error", NULL, "invalid_json",
                       "the body must be a JSON object");
        return;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (!model) {
        cJSON_Delete(j);
        rt_reply_error(r, req, 400, "invalid_request_error", "model", "missing_required_parameter",
                       "you must provide a model parameter");
        return;
    }
    if (!cJSON_IsString(model)) {
        cJSON_Delete(j);
        rt_reply_error(r, req, 400, "invalid_request_error", "model", "invalid_type", "'model' must be a string");
        return;
    }
    const char *adapter; /* the process routes it to the adapter itself */
    rt_model *m = rt_find_served(r, model->valuestring, &adapter);
    if (!m) {
        char msg[400];
        snprintf(msg, sizeof msg, "The model '%.200s' does not exist (GET /v1/models lists the models served here)",
                 model->valuestring);
        cJSON_Delete(j);
        rt_reply_error(r, req, 404, "invalid_request_error", "model", "model_not_found", msg);
        return;
    }
    cJSON_Delete(j);
    rt_fwd *f = rt_fwd_new(r, m, req, body, len);
    if (!f) {
        rt_reply_error(r, req, 503, "service_unavailable", NULL, NULL, "out of memory");
        return;
    }
    rt_dispatch(r, f);
}

void rt_on_request(struct evhttp_request *req, void *arg) {
    rt_router *r = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !*path) path = "/";
    const enum evhttp_cmd_type method = evhttp_request_get_command(req);
    const int get = method == EVHTTP_REQ_GET || method == EVHTTP_REQ_HEAD;
    if (get && (!strcmp(path, "/health") || !strcmp(path, "/ready"))) {
        handle_health(r, req, !strcmp(path, "/ready"));
        return;
    }
    if (get && !strcmp(path, "/metrics")) {
        handle_metrics(r, req);
        return;
    }
    if (r->draining) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
        rt_reply_error(r, req, 503, "service_unavailable", NULL, "shutting_down", "the server is shutting down");
        return;
    }
    if (!authorized(r, req)) return;
    if (get && (!strcmp(path, "/v1/models") || !strcmp(path, "/v1/models/"))) {
        handle_models(r, req, NULL);
        return;
    }
    if (get && !strncmp(path, "/v1/models/", 11)) {
        char *id = evhttp_uridecode(path + 11, 0, NULL);
        handle_models(r, req, id ? id : path + 11);
        free(id);
        return;
    }
    if (method == EVHTTP_REQ_POST) {
        route_by_model(r, req);
        return;
    }
    char msg[300];
    snprintf(msg, sizeof msg, "no route for %.200s (the router forwards POST requests by their \"model\")", path);
    rt_reply_error(r, req, 404, "invalid_request_error", NULL, "not_found", msg);
}
