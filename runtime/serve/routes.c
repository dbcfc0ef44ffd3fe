/* routes.c — what each path does: the route table (path, method, whether
 * it needs the API key), the key check, and the endpoints answered at once
 * (/v1/models, /health, /ready, /alive, /metrics, a stored response). The
 * generation and embedding endpoints hand their body to an intake worker
 * (prepare.c).
 */
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server_state.h"
#include "web_page.h"

/* ---- generation and embeddings ------------------------------------------------- */

static void handle_generate(server *s, struct evhttp_request *r, oai_api api) {
    srv_start_intake(s, r, SRV_GENERATE, api);
}
static void handle_embeddings(server *s, struct evhttp_request *r) { srv_start_intake(s, r, SRV_EMBED, OAI_API_CHAT); }
static void handle_count_tokens(server *s, struct evhttp_request *r) {
    srv_start_intake(s, r, SRV_COUNT_TOKENS, OAI_API_MESSAGES);
}

/* GET /v1/responses/{id}: a stored response object; DELETE forgets it. */
static void handle_stored_response(server *s, struct evhttp_request *r, const char *id) {
    const enum evhttp_cmd_type m = evhttp_request_get_command(r);
    if (m != EVHTTP_REQ_GET && m != EVHTTP_REQ_HEAD && m != EVHTTP_REQ_DELETE) {
        evhttp_add_header(evhttp_request_get_output_headers(r), "Allow", "GET, HEAD, DELETE");
        srv_reply_error_msg(s, r, 405, "invalid_request_error", "method_not_allowed",
                            "/v1/responses/{id} only accepts GET, HEAD and DELETE");
        return;
    }
    char *obj = m == EVHTTP_REQ_DELETE ? NULL : rs_response(s->responses, id);
    const int deleted = m == EVHTTP_REQ_DELETE && rs_delete(s->responses, id);
    if (!obj && !deleted) {
        oai_error e;
        oai_error_set(&e, 404, "invalid_request_error", "response_id", "not_found",
                      "No response with id '%.120s' is stored here", id);
        srv_reply_error(s, r, &e);
        return;
    }
    if (obj) {
        srv_reply(s, r, 200, "application/json", obj, strlen(obj));
        return;
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", id);
    cJSON_AddStringToObject(j, "object", "response");
    cJSON_AddBoolToObject(j, "deleted", 1);
    srv_reply_json(s, r, 200, j);
}

/* ---- other endpoints ------------------------------------------------------- */

/* GET /: the chat page. It is static, so it needs no key; the API calls it makes do. */
static void handle_page(server *s, struct evhttp_request *r) {
    if (!s->cfg.web_page) {
        srv_reply_error_msg(s, r, 404, "invalid_request_error", "not_found", "no route / (the chat page is off)");
        return;
    }
    size_t len;
    const unsigned char *page = web_chat_page(&len);
    char *copy = malloc(len);
    if (!copy) {
        srv_reply_error_msg(s, r, 500, "server_error", NULL, "out of memory");
        return;
    }
    memcpy(copy, page, len);
    struct evkeyvalq *h = evhttp_request_get_output_headers(r);
    /* the page's own script and style only, talking to this server only, never framed */
    evhttp_add_header(h, "Content-Security-Policy",
                      "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                      "frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "Cache-Control", "no-cache");
    srv_reply(s, r, 200, "text/html; charset=utf-8", copy, len);
}

static void handle_models(server *s, struct evhttp_request *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->api->desc->name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created);
    cJSON_AddStringToObject(m, "owned_by", "ingot");
    cJSON_AddNumberToObject(m, "max_model_len", s->api->desc->max_ctx);
    /* "model": the checkpoint's own template; "builtin-chatml": it has none */
    cJSON_AddStringToObject(m, "chat_template", chat_is_builtin(s->chat) ? "builtin-chatml" : "model");
    /* how tool calls are parsed, and whether the template or the server describes the tools */
    cJSON_AddStringToObject(m, "tool_call_format", tc_format_name(s->tool_format));
    cJSON_AddStringToObject(m, "tool_prompt", s->tools_native ? "template" : "server");
    /* the ids that end a generation (EOS, end-of-turn, end-of-message), with their text */
    const int32_t *stop_ids;
    const int n_stop = tok_stop_ids(s->tok, &stop_ids);
    cJSON *stops = cJSON_AddArrayToObject(m, "stop_token_ids");
    cJSON *stop_text = cJSON_AddArrayToObject(m, "stop_tokens");
    for (int i = 0; i < n_stop; i++) {
        size_t len;
        const char *piece = tok_piece(s->tok, stop_ids[i], &len);
        char buf[64];
        snprintf(buf, sizeof buf, "%.*s", piece ? (int)(len < 63 ? len : 63) : 0, piece ? piece : "");
        cJSON_AddItemToArray(stops, cJSON_CreateNumber(stop_ids[i]));
        cJSON_AddItemToArray(stop_text, cJSON_CreateString(buf));
    }
    cJSON_AddItemToArray(data, m);
    /* the LoRA adapters (--lora NAME=PATH), each a model a request may name, over this one */
    for (int id = 1; id <= s->api->lora_count(s->model); id++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "id", s->api->lora_name(s->model, id));
        cJSON_AddStringToObject(a, "object", "model");
        cJSON_AddNumberToObject(a, "created", (double)s->created);
        cJSON_AddStringToObject(a, "owned_by", "ingot");
        cJSON_AddStringToObject(a, "parent", s->api->desc->name);
        cJSON_AddStringToObject(a, "root", s->api->lora_path(s->model, id));
        cJSON_AddStringToObject(a, "lora", s->api->lora_summary(s->model, id));
        cJSON_AddNumberToObject(a, "max_model_len", s->api->desc->max_ctx);
        cJSON_AddItemToArray(data, a);
    }
    srv_reply_json(s, r, 200, root);
}

/* What /health and /ready report. A stalled scheduler (requests wait and
 * none can be admitted) fails both: a load balancer should stop sending
 * requests and an orchestrator may restart the process. Draining fails only
 * /ready: the process is healthy, finishing what it has. */
static const char *health_state(server *s, const sched_stats *st) {
    if (s->draining) return "draining";
    if (st->stalled || s->cfg.fault_stalled) return "stalled";
    return "ready";
}

static void handle_health(server *s, struct evhttp_request *r) {
    sched_stats st;
    sched_get_stats(s->sched, &st);
    const char *state = health_state(s, &st);
    const int ok = strcmp(state, "stalled") != 0;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "status", !strcmp(state, "ready") ? "ok" : state);
    cJSON_AddStringToObject(j, "model", s->api->desc->name);
    cJSON_AddStringToObject(j, "state", state);
    cJSON_AddNumberToObject(j, "kv_blocks_used", st.kv_blocks_used);
    cJSON_AddNumberToObject(j, "kv_blocks_total", st.kv_blocks_total);
    cJSON_AddNumberToObject(j, "kv_blocks_cached", st.kv_blocks_cached);
    cJSON_AddNumberToObject(j, "running", st.running);
    cJSON_AddNumberToObject(j, "waiting", st.waiting);
    /* in intake: parsed, templated, tokenized on a worker, not yet submitted */
    cJSON_AddNumberToObject(j, "requests_in_flight", s->n_reqs + intake_pending(s->intake));
    cJSON_AddNumberToObject(j, "requests_in_intake", intake_pending(s->intake));
    cJSON_AddNumberToObject(j, "connections", hg_connections(s->guard));
    cJSON_AddNumberToObject(j, "uptime_seconds", srv_now() - s->t_start);
    srv_reply_json(s, r, ok ? 200 : 503, j);
}

static void handle_ready(server *s, struct evhttp_request *r) {
    sched_stats st;
    sched_get_stats(s->sched, &st);
    const char *state = health_state(s, &st);
    const int ok = !strcmp(state, "ready");
    cJSON *j = cJSON_CreateObject();
    cJSON_AddBoolToObject(j, "ready", ok);
    cJSON_AddStringToObject(j, "state", state);
    cJSON_AddStringToObject(j, "model", s->api->desc->name);
    srv_reply_json(s, r, ok ? 200 : 503, j);
}

static void handle_alive(server *s, struct evhttp_request *r) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddBoolToObject(j, "alive", 1);
    srv_reply_json(s, r, 200, j);
}

static void handle_metrics(server *s, struct evhttp_request *r) {
    sched_stats st;
    sched_get_stats(s->sched, &st);
    met_set(s->m_running, NULL, st.running);
    met_set(s->m_waiting, NULL, st.waiting);
    met_set(s->m_kv_used, NULL, st.kv_blocks_used);
    met_set(s->m_kv_total, NULL, st.kv_blocks_total);
    met_set(s->m_kv_usage, NULL, st.kv_blocks_total ? (double)st.kv_blocks_used / st.kv_blocks_total : 0);
    met_set(s->m_prefix_hit, NULL, (double)st.prefix_hit_tokens);
    met_set(s->m_prefix_lookup, NULL, (double)st.prefix_lookup_tokens);
    met_set(s->m_preempt, NULL, (double)st.preemptions);
    met_set(s->m_steps, NULL, (double)st.steps);
    met_set(s->m_batch_tokens, NULL, st.last_batch_tokens);
    met_set(s->m_batch_seqs, NULL, st.last_batch_seqs);
    met_set(s->m_step_seconds, NULL, st.last_step_seconds);
    met_set(s->m_forward_seconds, NULL, st.last_forward_seconds);
    met_set(s->m_mask_seconds, NULL, st.mask_seconds);
    met_set(s->m_masked_tokens, NULL, (double)st.masked_tokens);
    met_set(s->m_step_mask_seconds, NULL, st.last_mask_seconds);
    met_set(s->m_spec_proposed, NULL, (double)st.spec_proposed_tokens);
    met_set(s->m_spec_accepted, NULL, (double)st.spec_accepted_tokens);
    met_set(s->m_inflight, NULL, s->n_reqs + intake_pending(s->intake));
    /* this scrape is counted before rendering, so it sees itself */
    srv_count_status(s, 200);
    size_t len = 0;
    char *text = met_render(s->met, &len);
    srv_send_body(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

/* ---- routing --------------------------------------------------------------- */

typedef struct {
    const char *path;
    enum evhttp_cmd_type method;
    int auth; /* 1: needs the API key when one is configured */
    int api;  /* -1: not a generation endpoint, else the oai_api it speaks */
    void (*fn)(server *, struct evhttp_request *);
} srv_route;

static const srv_route ROUTES[] = {
    {"/v1/chat/completions", EVHTTP_REQ_POST, 1, OAI_API_CHAT, NULL},
    {"/v1/completions", EVHTTP_REQ_POST, 1, OAI_API_COMPLETIONS, NULL},
    {"/v1/messages", EVHTTP_REQ_POST, 1, OAI_API_MESSAGES, NULL},
    {"/v1/responses", EVHTTP_REQ_POST, 1, OAI_API_RESPONSES, NULL},
    {"/v1/messages/count_tokens", EVHTTP_REQ_POST, 1, -1, handle_count_tokens},
    {"/v1/embeddings", EVHTTP_REQ_POST, 1, -1, handle_embeddings},
    {"/v1/models", EVHTTP_REQ_GET, 1, -1, handle_models},
    {"/health", EVHTTP_REQ_GET, 0, -1, handle_health},
    {"/ready", EVHTTP_REQ_GET, 0, -1, handle_ready},
    {"/alive", EVHTTP_REQ_GET, 0, -1, handle_alive},
    {"/metrics", EVHTTP_REQ_GET, 0, -1, handle_metrics},
    {"/", EVHTTP_REQ_GET, 0, -1, handle_page},
};

/* Compares in time independent of where the strings first differ, so the
 * key cannot be guessed byte by byte from response times. */
static int key_matches(const char *given, const char *key) {
    const size_t gl = strlen(given), kl = strlen(key);
    unsigned char diff = (unsigned char)(gl != kl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)(key[i] ^ (i < gl ? given[i] : 0));
    return diff == 0;
}

/* The key as OpenAI's clients send it (Authorization: Bearer KEY) or as
 * Anthropic's do (x-api-key: KEY). */
static int authorized(server *s, struct evhttp_request *r) {
    if (!s->cfg.api_key) return 1;
    const struct evkeyvalq *in = evhttp_request_get_input_headers(r);
    const char *h = evhttp_find_header(in, "Authorization");
    const char *x = evhttp_find_header(in, "x-api-key");
    if (!h && x) {
        if (key_matches(x, s->cfg.api_key)) return 1;
        srv_reply_error_msg(s, r, 401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided");
        return 0;
    }
    if (!h) {
        srv_reply_error_msg(s, r, 401, "invalid_request_error", "missing_api_key",
                        "You didn't provide an API key (Authorization: Bearer KEY, or x-api-key: KEY)");
        return 0;
    }
    if (strncasecmp(h, "Bearer ", 7) != 0 || !key_matches(h + 7, s->cfg.api_key)) {
        srv_reply_error_msg(s, r, 401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided");
        return 0;
    }
    return 1;
}

void srv_on_request(struct evhttp_request *r, void *arg) {
    server *s = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(r);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !*path) path = "/";
    /* a trailing slash names the same resource */
    char norm[128];
    size_t pl = strlen(path);
    if (pl >= sizeof norm) {
        srv_reply_error_msg(s, r, 404, "invalid_request_error", "not_found", "no such route");
        return;
    }
    memcpy(norm, path, pl + 1);
    if (pl > 1 && norm[pl - 1] == '/') norm[pl - 1] = 0;
    const enum evhttp_cmd_type method = evhttp_request_get_command(r);
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        const srv_route *rt = &ROUTES[i];
        if (strcmp(rt->path, norm) != 0) continue;
        /* HEAD is GET without the body (srv_send_body) */
        if (method != rt->method && !(method == EVHTTP_REQ_HEAD && rt->method == EVHTTP_REQ_GET)) {
            evhttp_add_header(evhttp_request_get_output_headers(r), "Allow",
                              rt->method == EVHTTP_REQ_GET ? "GET, HEAD" : "POST");
            char msg[96];
            snprintf(msg, sizeof msg, "%s only accepts %s", rt->path,
                     rt->method == EVHTTP_REQ_GET ? "GET and HEAD" : "POST");
            srv_reply_error_msg(s, r, 405, "invalid_request_error", "method_not_allowed", msg);
            return;
        }
        /* scrapers reach /metrics without the key unless --metrics-auth */
        const int auth = rt->auth || (rt->fn == handle_metrics && s->cfg.metrics_auth);
        if (auth && !authorized(s, r)) return;
        if (rt->api >= 0) handle_generate(s, r, (oai_api)rt->api);
        else rt->fn(s, r);
        return;
    }
    static const char STORED[] = "/v1/responses/";
    if (!strncmp(norm, STORED, sizeof STORED - 1) && norm[sizeof STORED - 1] && !strchr(norm + sizeof STORED - 1, '/')) {
        if (authorized(s, r)) handle_stored_response(s, r, norm + sizeof STORED - 1);
        return;
    }
    char msg[200];
    snprintf(msg, sizeof msg, "no route %.120s", norm);
    srv_reply_error_msg(s, r, 404, "invalid_request_error", "not_found", msg);
}
