/* server.c — lifecycle, routes and the request state machine of `NAME serve`.
 *
 * Request path:
 * 0. The HTTP guard (http_guard.c) beneath evhttp checks each request's
 *    head and body, answers what is malformed, too large or too slow with a
 *    JSON error, and passes evhttp only complete, well-formed requests.
 * 1. HTTP thread (libevent evhttp): copy the body and queue it for an intake
 *    worker (intake.c), which parses and validates it (openai.c), applies the
 *    chat template (chat.c), tokenizes and compiles its grammar; back on the
 *    HTTP thread, intake_done charges the rate limit and sched_submits one
 *    sequence per choice. Nothing here waits on the model or does a request's
 *    CPU work: a request that cannot be answered at once is parked as an
 *    srv_req.
 * 2. Scheduler thread (sched.c): batches, runs the forward, samples, queues
 *    events, and calls notify.
 * 3. notify (on the scheduler thread) only makes the `wake` event active; the
 *    event loop then drains sched_poll on the HTTP thread, detokenizes
 *    incrementally (tok_stream: only complete UTF-8 leaves), holds back text
 *    that may be the start of a stop string (never emitting a stop string),
 *    and writes SSE chunks or, at the end, one JSON reply. A client that
 *    disconnects (the connection's close callback) has its sequences
 *    cancelled with sched_cancel; the scheduler frees their blocks next step.
 *
 * Everything in this file runs on the event-loop thread except srv_notify and
 * the prepare_* functions (intake workers, which read only the immutable
 * tokenizer, template, vocabulary and config and write only their own
 * srv_intake), so the request list, the metrics and every srv_req need no lock.
 *
 * Shutdown: SIGTERM/SIGINT closes the listener, answers new requests on open
 * connections with 503, lets in-flight requests finish for --grace seconds,
 * then stops the scheduler (cancelling what is left) and exits 0.
 */
#include "server.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>
#include <event2/util.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "chat.h"
#include "embeddings.h"
#include "constrain.h"
#include "http_guard.h"
#include "intake.h"
#include "metrics.h"
#include "openai.h"
#include "rate_limit.h"
#include "scheduler.h"
#include "tool_calls.h"
#include "tool_grammar.h"
#include "tool_prompt.h"

/* ---- configuration -------------------------------------------------------- */

typedef struct {
    char host[256];
    int port;
    const char *api_key;   /* NULL: no authentication */
    int kv_blocks;         /* 0: from kv_memory_mib */
    double kv_memory_mib;
    double device_memory_fraction; /* device backends: share of free device memory for the KV pool */
    int max_batch_tokens;
    int max_running;
    int max_waiting;
    int intake_threads;    /* workers that parse, template, tokenize and compile requests */
    int prefix_cache;
    long max_body;
    double grace;
    double read_timeout;   /* seconds a request may take to arrive, and an idle connection may stay */
    int max_connections;
    int metrics_auth;      /* 1: /metrics needs the API key too */
    int fault_stalled;     /* INGOT_FAULT_STALLED=1: probes answer as if the scheduler were stalled */
    int parse_special;     /* 1: control-token text in message contents and prompts becomes control tokens */
    sched_task pooling;    /* /v1/embeddings: SCHED_EMBED_LAST (default) or SCHED_EMBED_MEAN */
    double memory_budget;  /* bytes for weights + KV pool + scratch; 0: none */
    int kv_explicit;       /* --kv-blocks or --kv-memory was given */
    double rate_rpm, rate_tpm; /* per key and minute; 0: none */
    double request_timeout;    /* seconds a request may run before it is cut off (504); 0: none */
    sched_spec_mode spec;      /* speculative decoding (--spec) */
    int spec_k, spec_ngram_min, spec_ngram_max;
    int print_memory;          /* --print-memory: print the memory plan as JSON and exit */
} srv_config;

/* ---- requests ------------------------------------------------------------- */

/* The life of a generation request after it was submitted (requests that fail
 * validation are answered at once and never get an srv_req). */
typedef enum {
    REQ_WAITING,    /* submitted; no token has arrived yet (time to first token still running) */
    REQ_GENERATING, /* tokens are arriving: streamed as SSE chunks, or gathered for one JSON reply */
    REQ_LINGERING,  /* the reply is complete and handed to libevent, but sequences cancelled
                       for a stop string have not reported DONE yet; nothing more is written */
    REQ_ABANDONED,  /* the client disconnected (or the reply failed): every sequence is cancelled
                       and we wait for their DONE events before freeing; nothing is written */
} req_state;

typedef struct {
    uint64_t seq_id;
    int seq_done;            /* the scheduler reported DONE for this sequence */
    int finished;            /* the client's view is final (finish_reason chosen) */
    const char *finish_reason;
    int n_tokens;            /* completion tokens received */
    tok_stream ts;
    oai_buf held;            /* text that might begin a stop string */
    oai_buf text;            /* non-streaming: the reply text so far */
    size_t emitted;          /* bytes of text released so far (completions text_offset) */
    cJSON *logprobs;         /* non-streaming logprobs accumulator */
    int sent_first;          /* streaming: the chunk carrying the role went out */
    int tools;               /* tool calls are parsed out of this choice's text */
    tc_parser tc;            /* the text after stop strings, split into content and calls */
    cJSON *calls;            /* the calls so far (oai_tool_call objects) */
    float *embedding;        /* an embedding request: this input's pooled vector, once DONE */
} srv_choice;

typedef struct server server;

typedef struct srv_req {
    struct srv_req *prev, *next;
    server *srv;
    req_state state;
    struct evhttp_request *http;      /* NULL once the reply is done or the client is gone */
    struct evhttp_connection *conn;   /* its close callback points at this request while http is set */
    struct event *watch;              /* readable socket while we generate: the client hung up */
    oai_request q;
    emb_request *emb;                 /* an embedding request (one sequence per input), else NULL */
    char id[48];
    oai_meta meta;
    int n_prompt;
    int n_choices;
    srv_choice *choices;
    double t_arrival, t_first_token;
    int failed;                       /* a sequence ended with SCHED_FINISH_ERROR */
    char error[160];
    struct event *deadline;           /* --request-timeout: fires on_deadline */
    char rl_key[136];                 /* rate-limit key ("" : not charged) */
    double rl_reserved;               /* tokens reserved at admission (rate_limit.h) */
    int rl_settled;                   /* the reservation was corrected */
} srv_req;

struct server {
    srv_config cfg;
    ingot_model *model;
    const ingot_model_api *draft_api; /* --spec draft: the draft model and its entry points */
    ingot_model *draft_model;
    tok_tokenizer *tok;
    chat_template *chat;
    tc_format tool_format;  /* how this model writes tool calls (from its template) */
    int tools_native;       /* the template renders tools itself (else tool_prompt.h) */
    int tool_marker_id;     /* the special token that opens a call, or -1 */
    gram_vocab *vocab;      /* the tokenizer's byte strings as a trie, for grammar masks */
    const int32_t *stop_ids;
    int n_stop_ids;
    sched *sched;
    int n_threads;
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *listener;
    hg_guard *guard;
    rl_limiter *rl;         /* --rate-limit-rpm / --rate-limit-tpm, NULL without */
    intake_pool *intake;    /* parses, templates, tokenizes and compiles requests off the loop */
    struct event *wake, *sig_term, *sig_int, *grace_timer;
    srv_req *reqs;          /* in flight, most recent first */
    int n_reqs;
    int unflushed;          /* final replies libevent has not finished writing */
    int draining;
    int closing;            /* the loop has returned: intake results are discarded, not submitted */
    double t_start;
    long long created;
    uint64_t rng, next_id;
    /* metrics */
    met_registry *met;
    met_family *m_requests, *m_prompt_tokens, *m_gen_tokens, *m_ttft, *m_e2e, *m_tpot, *m_running,
        *m_waiting, *m_kv_usage, *m_kv_used, *m_kv_total, *m_prefix_hit, *m_prefix_lookup, *m_preempt,
        *m_batch_tokens, *m_batch_seqs, *m_steps, *m_inflight, *m_step_seconds, *m_forward_seconds,
        *m_cancelled, *m_rejected, *m_mask_seconds, *m_masked_tokens, *m_step_mask_seconds, *m_spec_proposed,
        *m_spec_accepted;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* ---- replies -------------------------------------------------------------- */

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

static void count_status(server *s, int code) {
    char lv[16];
    snprintf(lv, sizeof lv, "%d", code);
    met_inc(s->m_requests, lv, 1);
}

/* The HTTP guard answered a request itself (malformed, over a limit, too slow). */
static void guard_replied(int status, void *user) { count_status(user, status); }

/* Sends a complete reply with body (taken over, may be NULL), uncounted. A
 * HEAD request gets the same headers, Content-Length included, and no body
 * (evhttp would write one). */
static void send_body(struct evhttp_request *r, int code, const char *content_type, char *body, size_t len) {
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
static void reply(server *s, struct evhttp_request *r, int code, const char *content_type, char *body,
                  size_t len) {
    send_body(r, code, content_type, body, len);
    count_status(s, code);
}

static void reply_json(server *s, struct evhttp_request *r, int code, cJSON *j) {
    char *body = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    reply(s, r, code, "application/json", body, body ? strlen(body) : 0);
}

static void reply_error(server *s, struct evhttp_request *r, const oai_error *e) {
    char *body = oai_error_json(e);
    reply(s, r, e->status, "application/json", body, body ? strlen(body) : 0);
}

static void reply_error_msg(server *s, struct evhttp_request *r, int status, const char *type,
                            const char *code, const char *msg) {
    oai_error e;
    oai_error_set(&e, status, type, NULL, code, "%s", msg);
    reply_error(s, r, &e);
}

/* ---- request bookkeeping --------------------------------------------------- */

static void check_drained(server *s);

static void unwatch(srv_req *q);

static void settle_rate(server *s, srv_req *q, int never_ran);

static void req_free(server *s, srv_req *q) {
    unwatch(q);
    settle_rate(s, q, 0);
    if (q->deadline) event_free(q->deadline);
    if (q->prev) q->prev->next = q->next;
    else s->reqs = q->next;
    if (q->next) q->next->prev = q->prev;
    s->n_reqs--;
    for (int i = 0; i < q->n_choices; i++) {
        oai_buf_free(&q->choices[i].held);
        oai_buf_free(&q->choices[i].text);
        cJSON_Delete(q->choices[i].logprobs);
        tc_free(&q->choices[i].tc);
        cJSON_Delete(q->choices[i].calls);
        free(q->choices[i].embedding);
    }
    free(q->choices);
    oai_request_free(&q->q);
    if (q->emb) emb_request_free(q->emb);
    free(q->emb);
    free(q);
    check_drained(s);
}

static int all_seqs_done(const srv_req *q) {
    for (int i = 0; i < q->n_choices; i++)
        if (!q->choices[i].seq_done) return 0;
    return 1;
}

/* Forgets the evhttp request: its connection's close callback no longer
 * points at us. */
static void unwatch(srv_req *q) {
    if (q->watch) event_free(q->watch);
    q->watch = NULL;
}

static void detach_http(srv_req *q) {
    unwatch(q);
    if (q->conn) evhttp_connection_set_closecb(q->conn, NULL, NULL);
    q->conn = NULL;
    q->http = NULL;
}

static void on_reply_complete(struct evhttp_request *r, void *arg) {
    (void)r;
    server *s = arg;
    s->unflushed--;
    check_drained(s);
}

static void write_chunk(srv_req *q, char *sse) {
    if (!sse || !q->http) {
        free(sse);
        return;
    }
    struct evbuffer *b = evbuffer_new();
    if (b) {
        evbuffer_add(b, sse, strlen(sse));
        evhttp_send_reply_chunk(q->http, b);
        evbuffer_free(b);
    }
    free(sse);
}

/* The client disconnected. libevent has already detached a request whose
 * reply was unfinished from the dying connection (we own it and free it);
 * any other request it frees itself right after this callback. */
static void on_conn_close(struct evhttp_connection *conn, void *arg) {
    (void)conn;
    srv_req *q = arg;
    server *s = q->srv;
    struct evhttp_request *h = q->http;
    unwatch(q);
    q->conn = NULL;
    q->http = NULL;
    if (h && evhttp_request_get_connection(h) == NULL) evhttp_request_free(h);
    /* nginx's "client closed request", streamed or not: a stream's 200 is
     * counted only when it ends */
    count_status(s, 499);
    met_inc(s->m_cancelled, NULL, 1);
    q->state = REQ_ABANDONED;
    for (int i = 0; i < q->n_choices; i++)
        if (!q->choices[i].seq_done) sched_cancel(s->sched, q->choices[i].seq_id);
    if (all_seqs_done(q)) req_free(s, q);
}

/* libevent 2.1 does not read from a connection while its reply is pending,
 * so it notices a client that hung up only when a write fails; a
 * non-streamed reply writes nothing until the end. This event watches the
 * socket meanwhile: readable with nothing to read is EOF (or a reset), and
 * freeing the connection runs on_conn_close, which cancels the sequences. */
static void on_peer_readable(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    srv_req *q = arg;
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) { /* the client sent more (a pipelined request): stop watching, writes will tell */
        unwatch(q);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    struct evhttp_connection *conn = q->conn;
    unwatch(q);
    if (conn) evhttp_connection_free(conn); /* q may be freed by now */
}

static int max_choice_tokens(const srv_req *q) {
    int m = 0;
    for (int i = 0; i < q->n_choices; i++)
        if (q->choices[i].n_tokens > m) m = q->choices[i].n_tokens;
    return m;
}

static int total_tokens(const srv_req *q) {
    int t = 0;
    for (int i = 0; i < q->n_choices; i++) t += q->choices[i].n_tokens;
    return t;
}

/* Every choice is final: send the end of the stream or the whole reply. */
static void finish_request(server *s, srv_req *q) {
    const double t = now_s();
    settle_rate(s, q, 0); /* before the reply: the client may send its next request at once */
    const int completion = total_tokens(q);
    met_inc(s->m_prompt_tokens, NULL, q->n_prompt);
    met_inc(s->m_gen_tokens, NULL, completion);
    met_observe(s->m_e2e, t - q->t_arrival);
    const int most = max_choice_tokens(q);
    if (most > 1 && q->t_first_token > 0) met_observe(s->m_tpot, (t - q->t_first_token) / (most - 1));
    struct evhttp_request *h = q->http;
    if (h) {
        detach_http(q);
        evhttp_request_set_on_complete_cb(h, on_reply_complete, s);
        s->unflushed++;
        if (q->emb) {
            if (q->failed) {
                reply_error_msg(s, h, 500, "server_error", NULL, q->error);
            } else {
                float **vecs = malloc(sizeof(float *) * (size_t)q->n_choices);
                char *body = NULL;
                if (vecs) {
                    for (int i = 0; i < q->n_choices; i++) vecs[i] = q->choices[i].embedding;
                    body = emb_response_json(q->emb, ingot_model_desc.name, vecs, ingot_model_desc.dim, q->n_prompt);
                    free(vecs);
                }
                if (body) reply(s, h, 200, "application/json", body, strlen(body));
                else reply_error_msg(s, h, 500, "server_error", NULL, "out of memory");
            }
        } else if (q->q.stream) {
            if (q->failed) {
                oai_error e;
                oai_error_set(&e, 500, "server_error", NULL, NULL, "%s", q->error);
                char *j = oai_error_json(&e);
                if (j) {
                    struct evbuffer *b = evbuffer_new();
                    evbuffer_add_printf(b, "data: %s\n\n", j);
                    evhttp_send_reply_chunk(h, b);
                    evbuffer_free(b);
                }
                free(j);
            } else if (q->q.include_usage) {
                char *u = oai_usage_chunk(&q->meta, q->n_prompt, completion);
                if (u) {
                    struct evbuffer *b = evbuffer_new();
                    evbuffer_add(b, u, strlen(u));
                    evhttp_send_reply_chunk(h, b);
                    evbuffer_free(b);
                }
                free(u);
            }
            struct evbuffer *b = evbuffer_new();
            evbuffer_add(b, "data: [DONE]\n\n", 14);
            evhttp_send_reply_chunk(h, b);
            evbuffer_free(b);
            evhttp_send_reply_end(h);
            count_status(s, 200); /* the status its headers carried */
        } else if (q->failed && q->q.grammar && !strncmp(q->error, "generation failed: the grammar", 30)) {
            /* the request's own grammar could not be followed within its budget: the client's to fix */
            oai_error e;
            oai_error_set(&e, 400, "invalid_request_error", q->q.grammar_param, NULL, "%s", q->error);
            reply_error(s, h, &e);
        } else if (q->failed) {
            reply_error_msg(s, h, 500, "server_error", NULL, q->error);
        } else {
            cJSON *resp = oai_response_new(&q->meta);
            for (int i = 0; i < q->n_choices; i++) {
                srv_choice *c = &q->choices[i];
                oai_response_add_choice(resp, q->q.kind, i, c->text.p, c->text.len, c->logprobs, c->finish_reason);
                c->logprobs = NULL; /* taken over */
                if (c->calls && cJSON_GetArraySize(c->calls) > 0) {
                    oai_response_set_tool_calls(resp, i, c->calls);
                    c->calls = NULL;
                }
            }
            oai_set_usage(resp, q->n_prompt, completion);
            reply_json(s, h, 200, resp);
        }
    }
    if (all_seqs_done(q)) req_free(s, q);
    else q->state = REQ_LINGERING;
}

static int all_finished(const srv_req *q) {
    for (int i = 0; i < q->n_choices; i++)
        if (!q->choices[i].finished) return 0;
    return 1;
}

/* Releases text of choice i: to the stream as a chunk, or to the reply. */
static void emit_text(srv_req *q, int i, const char *text, size_t n, cJSON *lp, const char *finish) {
    srv_choice *c = &q->choices[i];
    c->emitted += n;
    if (q->q.stream) {
        if (!n && !lp && !finish && c->sent_first) return;
        write_chunk(q, oai_chunk(&q->meta, i, !c->sent_first, text, n, lp, finish, q->q.include_usage));
        c->sent_first = 1;
    } else {
        oai_buf_add(&c->text, text, n);
        if (lp) cJSON_Delete(lp);
    }
}

/* Text past the stop-string matcher: straight out, or through the tool-call
 * parser (final: the choice's text is complete, flush it). Calls go out as
 * delta.tool_calls chunks (name first, then the arguments) or are kept for
 * the reply. Returns 1 when the choice has made the one call that
 * parallel_tool_calls=false allows. */
static int release_text(server *s, srv_req *q, int i, const char *text, size_t n, cJSON *lp, int final) {
    srv_choice *c = &q->choices[i];
    if (!c->tools) {
        emit_text(q, i, text, n, lp, NULL);
        return 0;
    }
    tc_out o = {.calls = cJSON_CreateArray()};
    tc_feed(&c->tc, text, n, &o);
    if (final) tc_finish(&c->tc, &o);
    /* a constrained reply is nothing but calls: what is not a complete call
     * (a call cut short by max_tokens) is dropped, never shown as content */
    const int calls_only = q->q.tool_choice == OAI_TOOLS_REQUIRED || q->q.tool_choice == OAI_TOOLS_NAMED;
    emit_text(q, i, o.content.p ? o.content.p : "", calls_only ? 0 : o.content.len, lp, NULL);
    const cJSON *call;
    cJSON_ArrayForEach(call, o.calls) {
        const int k = cJSON_GetArraySize(c->calls);
        if (!q->q.parallel_tool_calls && k >= 1) break;
        const char *name = cJSON_GetObjectItem(call, "name")->valuestring;
        const char *args = cJSON_GetObjectItem(call, "arguments")->valuestring;
        char id[32];
        tc_call_id(s->tool_format, &s->rng, id);
        if (q->q.stream) {
            write_chunk(q, oai_tool_call_chunk(&q->meta, i, !c->sent_first, k, id, name, "", q->q.include_usage));
            c->sent_first = 1;
            write_chunk(q, oai_tool_call_chunk(&q->meta, i, 0, k, NULL, NULL, args, q->q.include_usage));
        }
        cJSON_AddItemToArray(c->calls, oai_tool_call(id, name, args));
    }
    oai_buf_free(&o.content);
    cJSON_Delete(o.calls);
    return !q->q.parallel_tool_calls && cJSON_GetArraySize(c->calls) >= 1;
}

/* Passes new text through the stop-string matcher; returns 1 on a stop, 2
 * when the choice made its one allowed tool call. */
static int feed_text(server *s, srv_req *q, int i, const char *text, size_t n, cJSON *lp) {
    srv_choice *c = &q->choices[i];
    oai_buf out = {0};
    oai_buf_add(&out, "", 0);
    const int stopped = oai_stop_feed(q->q.stop, q->q.n_stop, &c->held, text, n, &out);
    const int one_call = release_text(s, q, i, out.p ? out.p : "", out.len, lp, stopped);
    oai_buf_free(&out);
    return stopped ? 1 : one_call ? 2 : 0;
}

/* A choice that made tool calls and ended on its own (EOS or a stop string)
 * finishes with "tool_calls", as OpenAI's do. */
static void choice_finish(srv_req *q, int i, const char *reason) {
    srv_choice *c = &q->choices[i];
    c->finished = 1;
    if (c->calls && cJSON_GetArraySize(c->calls) > 0 && !strcmp(reason, "stop")) reason = "tool_calls";
    c->finish_reason = reason;
    if (q->q.stream && q->http) emit_text(q, i, "", 0, NULL, reason);
}

static void on_token(server *s, srv_req *q, int i, const sched_event *ev) {
    srv_choice *c = &q->choices[i];
    if (q->state == REQ_ABANDONED || q->state == REQ_LINGERING || c->finished) return;
    if (q->state == REQ_WAITING) {
        q->state = REQ_GENERATING;
        q->t_first_token = now_s();
        met_observe(s->m_ttft, q->t_first_token - q->t_arrival);
    }
    c->n_tokens++;
    size_t plen = 0;
    const char *piece = tok_piece(s->tok, ev->token, &plen);
    /* worst case every byte (and the pending ones) becomes a 3-byte U+FFFD */
    const size_t cap = 3 * (plen + sizeof c->ts.pending) + 1;
    char small[512];
    char *buf = cap <= sizeof small ? small : malloc(cap);
    size_t n = buf ? tok_stream_push(&c->ts, s->tok, ev->token, 1, buf, cap) : 0;
    cJSON *lp = NULL;
    if (q->q.logprobs) {
        oai_token_lp t = {.piece = piece, .piece_len = piece ? plen : 0, .logprob = ev->logprob};
        t.n_top = ev->n_top < q->q.top_logprobs ? ev->n_top : q->q.top_logprobs;
        for (int k = 0; k < t.n_top; k++) {
            t.top_piece[k] = tok_piece(s->tok, ev->top_ids[k], &t.top_len[k]);
            if (!t.top_piece[k]) t.top_len[k] = 0;
            t.top_logprob[k] = ev->top_logprobs[k];
        }
        if (q->q.stream) {
            lp = oai_logprobs_new(q->q.kind);
            oai_logprobs_add(q->q.kind, lp, &t, c->emitted + c->held.len);
        } else {
            if (!c->logprobs) c->logprobs = oai_logprobs_new(q->q.kind);
            oai_logprobs_add(q->q.kind, c->logprobs, &t, c->emitted + c->held.len);
        }
    }
    int stopped = feed_text(s, q, i, buf ? buf : "", n, lp);
    if (buf != small) free(buf);
    /* the token that opens a call is a control token, which the detokenizer skips */
    if (!stopped && c->tools && ev->token == s->tool_marker_id) {
        const char *marker = tc_open_marker(s->tool_format);
        stopped = feed_text(s, q, i, marker, strlen(marker), NULL);
    }
    if (stopped) {
        /* a stop string ends the text (the parser was flushed); so does the one allowed call */
        if (stopped == 2) release_text(s, q, i, "", 0, NULL, 1);
        choice_finish(q, i, "stop");
        sched_cancel(s->sched, c->seq_id);
        if (all_finished(q)) finish_request(s, q);
    }
}

/* An embedding request's input i is done: keep its vector; the reply goes
 * out when every input has one. */
static void on_embedding_done(server *s, srv_req *q, int i, const sched_event *ev) {
    srv_choice *c = &q->choices[i];
    c->embedding = ev->embedding; /* taken over */
    c->finished = 1;
    if (!c->embedding && !q->failed) {
        q->failed = 1;
        snprintf(q->error, sizeof q->error, "embedding failed: %s",
                 ev->finish == SCHED_FINISH_ERROR ? ev->error : "cancelled");
        for (int k = 0; k < q->n_choices; k++)
            if (!q->choices[k].seq_done) sched_cancel(s->sched, q->choices[k].seq_id);
        for (int k = 0; k < q->n_choices; k++) q->choices[k].finished = 1;
    }
    if (all_finished(q)) finish_request(s, q);
}

static void on_done(server *s, srv_req *q, int i, const sched_event *ev) {
    srv_choice *c = &q->choices[i];
    c->seq_done = 1;
    if (q->state == REQ_ABANDONED || q->state == REQ_LINGERING) {
        free(ev->embedding);
        if (all_seqs_done(q)) req_free(s, q);
        return;
    }
    if (q->emb) {
        on_embedding_done(s, q, i, ev);
        return;
    }
    if (!c->finished) {
        /* the sequence ended on its own: release the incomplete UTF-8 tail and
         * the held-back text (no stop string can complete any more) */
        char tail[16];
        const size_t n = tok_stream_flush(&c->ts, tail, sizeof tail);
        const int stopped = feed_text(s, q, i, tail, n, NULL);
        if (!stopped && (c->held.len || c->tools)) {
            release_text(s, q, i, c->held.p ? c->held.p : "", c->held.len, NULL, 1);
            c->held.len = 0;
        }
        const char *reason = "length";
        switch (ev->finish) {
        case SCHED_FINISH_EOS: reason = "stop"; break;
        case SCHED_FINISH_LENGTH: reason = "length"; break;
        /* cancelled by shutdown: the text was cut short, which is what "length" tells a client */
        case SCHED_FINISH_CANCELLED: reason = "length"; break;
        case SCHED_FINISH_ERROR:
            q->failed = 1;
            snprintf(q->error, sizeof q->error, "generation failed: %s", ev->error);
            break;
        }
        if (stopped) reason = "stop";
        if (q->failed) {
            c->finished = 1;
            c->finish_reason = reason;
            /* the other choices cannot make the reply whole any more */
            for (int k = 0; k < q->n_choices; k++)
                if (!q->choices[k].seq_done) sched_cancel(s->sched, q->choices[k].seq_id);
            for (int k = 0; k < q->n_choices; k++) q->choices[k].finished = 1;
        } else {
            choice_finish(q, i, reason);
        }
    }
    if (all_finished(q)) finish_request(s, q);
}

/* Scheduler thread: only wake the loop (event_active is thread-safe once
 * evthread_use_pthreads() ran before the base was created). */
static void srv_notify(void *user) {
    server *s = user;
    event_active(s->wake, EV_READ, 0);
}

static srv_req *find_seq(server *s, uint64_t id, int *choice) {
    for (srv_req *q = s->reqs; q; q = q->next)
        for (int i = 0; i < q->n_choices; i++)
            if (q->choices[i].seq_id == id && !q->choices[i].seq_done) {
                *choice = i;
                return q;
            }
    return NULL;
}

static void on_wake(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    server *s = arg;
    static sched_event evs[64];
    size_t n;
    while ((n = sched_poll(s->sched, evs, 64)) > 0) {
        for (size_t k = 0; k < n; k++) {
            int i;
            srv_req *q = find_seq(s, evs[k].id, &i);
            if (!q) { /* a request already freed (e.g. its reply failed to start) */
                if (evs[k].kind == SCHED_EV_DONE) free(evs[k].embedding);
                continue;
            }
            if (evs[k].kind == SCHED_EV_TOKEN) on_token(s, q, i, &evs[k]);
            else on_done(s, q, i, &evs[k]);
        }
    }
}

/* ---- limits: rate, time ------------------------------------------------------- */

/* The rate-limit key of a request: the bearer token when the server has an
 * API key (authorized() has checked it), else the client's address. */
static void rate_key(server *s, struct evhttp_request *r, char *out, size_t cap) {
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(r), "Authorization");
    if (s->cfg.api_key && h && !strncasecmp(h, "Bearer ", 7)) {
        snprintf(out, cap, "key:%s", h + 7);
        return;
    }
    char *addr = NULL;
    ev_uint16_t port = 0;
    struct evhttp_connection *c = evhttp_request_get_connection(r);
    if (c) evhttp_connection_get_peer(c, &addr, &port);
    snprintf(out, cap, "addr:%s", addr ? addr : "?");
}

/* Charges q's rate-limit key one request and `tokens` reserved tokens; on
 * refusal answers 429 with Retry-After (413 without, for a request larger than a minute's
 * tokens) and returns -1 (q is the caller's to
 * free). */
static int admit_rate(server *s, struct evhttp_request *r, srv_req *q, double tokens) {
    if (!s->rl) return 0;
    char key[sizeof q->rl_key];
    rate_key(s, r, key, sizeof key);
    double retry = 0;
    const rl_verdict v = rl_admit(s->rl, key, tokens, now_s(), &retry);
    if (v == RL_OK) {
        snprintf(q->rl_key, sizeof q->rl_key, "%s", key);
        q->rl_reserved = tokens;
        return 0;
    }
    oai_error e;
    if (v == RL_REQUESTS)
        oai_error_set(&e, 429, "requests", NULL, "rate_limit_exceeded",
                      "Rate limit reached on requests per minute: limit %g. Please try again in %.1fs.",
                      s->cfg.rate_rpm, retry);
    else if (v == RL_TOKENS)
        oai_error_set(&e, 429, "tokens", NULL, "rate_limit_exceeded",
                      "Rate limit reached on tokens per minute: limit %g, requested %.0f (the prompt and the most "
                      "it may generate). Please try again in %.1fs.", s->cfg.rate_tpm, tokens, retry);
    else
        /* 413 without Retry-After: waiting never admits it, and a client that honours a 429's
         * Retry-After would retry forever */
        oai_error_set(&e, 413, "tokens", NULL, "request_too_large",
                      "Request too large for the tokens-per-minute limit: limit %g, requested %.0f (the prompt and "
                      "the most it may generate). Lower max_tokens or the input.", s->cfg.rate_tpm, tokens);
    met_inc(s->m_rejected,
            v == RL_REQUESTS ? "rate_limit_requests" : v == RL_TOKENS ? "rate_limit_tokens" : "rate_limit_too_large", 1);
    if (v == RL_TOO_LARGE) {
        reply_error(s, r, &e);
        return -1;
    }
    char ra[32];
    snprintf(ra, sizeof ra, "%.0f", ceil(retry) < 1 ? 1 : ceil(retry));
    evhttp_add_header(evhttp_request_get_output_headers(r), "Retry-After", ra);
    reply_error(s, r, &e);
    return -1;
}

/* Corrects q's reservation to what it used (the prompt and the tokens
 * generated so far); never_ran: it was refused after admission, give all back. */
static void settle_rate(server *s, srv_req *q, int never_ran) {
    if (!s->rl || !q->rl_key[0] || q->rl_settled) return;
    q->rl_settled = 1;
    const double used = never_ran ? 0 : (double)q->n_prompt + total_tokens(q);
    rl_settle(s->rl, q->rl_key, q->rl_reserved, used, never_ran, now_s());
}

/* --request-timeout: the request is still running. Its sequences are
 * cancelled (their blocks are freed at the next step) and the client gets a
 * 504, or, on a stream whose 200 went out, an error event after which the
 * stream ends and the connection closes. */
static void on_deadline(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    srv_req *q = arg;
    server *s = q->srv;
    if (q->state != REQ_WAITING && q->state != REQ_GENERATING) return;
    met_inc(s->m_rejected, "request_timeout", 1);
    for (int i = 0; i < q->n_choices; i++) {
        q->choices[i].finished = 1;
        if (!q->choices[i].seq_done) sched_cancel(s->sched, q->choices[i].seq_id);
    }
    settle_rate(s, q, 0);
    oai_error e;
    oai_error_set(&e, 504, "server_error", NULL, "request_timeout",
                  "The request did not finish within the server's request timeout (%g s)", s->cfg.request_timeout);
    struct evhttp_request *h = q->http;
    if (h) {
        struct evhttp_connection *conn = q->conn;
        detach_http(q);
        evhttp_request_set_on_complete_cb(h, on_reply_complete, s);
        s->unflushed++;
        if (q->q.stream) {
            char *j = oai_error_json(&e);
            struct evbuffer *b = evbuffer_new();
            if (b && j) {
                evbuffer_add_printf(b, "data: %s\n\n", j);
                evhttp_send_reply_chunk(h, b);
            }
            if (b) evbuffer_free(b);
            free(j);
            evhttp_send_reply_end(h);
            if (conn) evhttp_connection_free_on_completion(conn);
            count_status(s, 504);
        } else {
            reply_error(s, h, &e);
        }
    }
    if (all_seqs_done(q)) req_free(s, q);
    else q->state = REQ_LINGERING;
}

static void arm_deadline(server *s, srv_req *q) {
    if (s->cfg.request_timeout <= 0) return;
    q->deadline = evtimer_new(s->base, on_deadline, q);
    const double t = s->cfg.request_timeout;
    struct timeval tv = {(time_t)t, (suseconds_t)((t - floor(t)) * 1e6)};
    if (q->deadline) evtimer_add(q->deadline, &tv);
}

/* ---- generation endpoints -------------------------------------------------- */

/* Maps a sched_submit refusal to a status: a full queue is temporary (503,
 * and the caller adds Retry-After), anything else is about this request (400). */
static void submit_error(oai_error *e, const char *msg) {
    static const char FULL[] = "the waiting queue is full";
    if (strstr(msg, "context_length") || strstr(msg, "context length"))
        oai_error_set(e, 400, "invalid_request_error", "messages", "context_length_exceeded", "%s", msg);
    else if (!strncmp(msg, FULL, sizeof FULL - 1))
        oai_error_set(e, 503, "server_error", NULL, "server_busy", "%s", msg);
    else
        oai_error_set(e, 400, "invalid_request_error", NULL, NULL, "%s", msg);
}

/* ---- client text in a template's markup ---------------------------------------- */

typedef struct {
    const char **v;
    size_t n, cap;
    int oom;
} strlist;

/* 1 when s, parsed with special tokens on, holds a control token. */
static int spells_control(const server *s, const char *str) {
    if (!str[0] || !str[1]) return 0; /* no control token is one byte */
    int32_t *ids = NULL;
    size_t n = 0;
    char err[64];
    int found = 0;
    if (tok_encode(s->tok, str, strlen(str), 0, 1, &ids, &n, err, sizeof err) == 0)
        for (size_t i = 0; i < n && !found; i++) found = tok_is_special(s->tok, ids[i]);
    free(ids);
    return found;
}

/* The strings and keys under v that spell a control token. */
static void control_strings(const server *s, const cJSON *v, strlist *l) {
    const char *cand[2] = {v->string, cJSON_IsString(v) ? v->valuestring : NULL};
    for (int k = 0; k < 2; k++) {
        if (!cand[k] || !spells_control(s, cand[k])) continue;
        if (l->n == l->cap) {
            const size_t cap = l->cap ? l->cap * 2 : 8;
            const char **p = realloc(l->v, cap * sizeof *p);
            if (!p) {
                l->oom = 1;
                return;
            }
            l->v = p;
            l->cap = cap;
        }
        l->v[l->n++] = cand[k];
    }
    for (const cJSON *c = v->child; c; c = c->next) control_strings(s, c, l);
}

/* A template that renders tools writes the tool definitions and past calls'
 * arguments as its own markup; the strings in them that spell a control
 * token become plain ranges of the prompt, so they stay text as contents do
 * (chat_protect). 0, or -1 on out of memory. */
static int protect_tool_text(const server *s, const char *text, const cJSON *tools, const cJSON *messages,
                             tok_span **plain, size_t *n_plain) {
    strlist l = {0};
    if (tools) control_strings(s, tools, &l);
    const cJSON *m;
    cJSON_ArrayForEach(m, messages) {
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (calls) control_strings(s, calls, &l);
    }
    const int rc = l.oom ? -1 : l.n ? chat_protect(text, l.v, l.n, plain, n_plain) : 0;
    free(l.v);
    return rc;
}

/* tool_choice "required" or a named function: the reply must be a call, so
 * decoding follows the grammar of the model's call markup around the
 * allowed tools' arguments schemas (tool_grammar.h). 0, or -1 with e filled. */
static int constrain_tool_call(server *s, oai_request *q, oai_error *e) {
    if (q->grammar) {
        oai_error_set(e, 400, "invalid_request_error", "tool_choice", NULL,
                      "'tool_choice' \"required\" or a named function cannot be combined with 'response_format' or "
                      "'grammar'");
        return -1;
    }
    int bad_tool = -1;
    char err[320];
    char *text = tg_grammar(s->tool_format, q->tools, q->tool_choice == OAI_TOOLS_NAMED ? q->tool_choice_name : NULL,
                            /* a named function is called once (as vLLM); "required" allows several */
                            q->tool_choice == OAI_TOOLS_REQUIRED && q->parallel_tool_calls, s->tool_marker_id < 0,
                            &bad_tool, err, sizeof err);
    if (!text) {
        char param[64];
        snprintf(param, sizeof param, "tools[%d].function.parameters", bad_tool);
        oai_error_set(e, 400, "invalid_request_error", bad_tool >= 0 ? param : "tool_choice", NULL,
                      "'%s' cannot constrain a tool call: %s", bad_tool >= 0 ? param : "tool_choice", err);
        return -1;
    }
    q->grammar = gram_compile(text, strlen(text), err, sizeof err);
    free(text);
    if (!q->grammar) {
        oai_error_set(e, 400, "invalid_request_error", "tool_choice", NULL,
                      "'tool_choice': the grammar of the tools' calls does not compile: %s", err);
        return -1;
    }
    q->grammar_param = "tool_choice";
    return 0;
}

/* The body of a generation or embeddings request, or NULL once the refusal
 * is sent: 503 while draining, 413 past --max-body (the HTTP guard refused
 * such bodies already; this is belt and braces). */
static const char *request_body(server *s, struct evhttp_request *r, size_t *len) {
    if (s->draining) {
        reply_error_msg(s, r, 503, "server_error", "shutting_down", "the server is shutting down");
        return NULL;
    }
    struct evbuffer *in = evhttp_request_get_input_buffer(r);
    *len = evbuffer_get_length(in);
    if (*len > (size_t)s->cfg.max_body) {
        reply_error_msg(s, r, 413, "invalid_request_error", NULL, "request body too large");
        return NULL;
    }
    return *len ? (const char *)evbuffer_pullup(in, (ev_ssize_t)*len) : "";
}

/* Every sequence of q is submitted: it waits for its events, under its
 * deadline (--request-timeout), and a client that hangs up cancels it
 * (on_conn_close, and on_peer_readable while the reply is pending). */
static void start_waiting(server *s, srv_req *q, struct evhttp_request *r) {
    q->state = REQ_WAITING;
    arm_deadline(s, q);
    q->conn = evhttp_request_get_connection(r);
    if (q->conn) {
        evhttp_connection_set_closecb(q->conn, on_conn_close, q);
        const evutil_socket_t fd = bufferevent_getfd(evhttp_connection_get_bufferevent(q->conn));
        if (fd >= 0 && (q->watch = event_new(s->base, fd, EV_READ | EV_PERSIST, on_peer_readable, q)))
            event_add(q->watch, NULL);
    }
}

/* sched_submit refused choice i of q: the earlier ones are cancelled, the
 * later ones never submitted; the request is abandoned and e answered (a full
 * queue, 503, with Retry-After: a slot frees as soon as any request ends, and
 * a second is a fair first guess). */
static void refuse_after_submit(server *s, srv_req *q, struct evhttp_request *r, oai_error *e, int i) {
    for (int k = i; k < q->n_choices; k++) q->choices[k].seq_done = 1;
    for (int k = 0; k < i; k++) sched_cancel(s->sched, q->choices[k].seq_id);
    q->http = NULL;
    q->state = REQ_ABANDONED;
    settle_rate(s, q, 1);
    if (e->status == 503) {
        evhttp_add_header(evhttp_request_get_output_headers(r), "Retry-After", "1");
        met_inc(s->m_rejected, "queue_full", 1);
    }
    reply_error(s, r, e);
    if (all_seqs_done(q)) req_free(s, q);
}

/* ---- intake: a request's CPU work off the event loop ------------------------------
 *
 * The loop copies a generation or embedding request's body into an srv_intake and queues it
 * (intake.h); a worker parses it, renders the template, tokenizes and compiles its grammar
 * (prepare_*); back on the loop, intake_done admits it (rate limit) and submits it (submit_*),
 * or answers its error. A client that hangs up meanwhile only clears in->r (on_intake_close):
 * the worker's result is then freed unseen. */

typedef struct srv_intake {
    intake_job job;                 /* first: the pool hands this back */
    server *s;
    struct evhttp_request *r;       /* loop thread; NULL once the client left */
    struct evhttp_connection *conn; /* its close callback points here while r is set */
    int embeddings;                 /* /v1/embeddings, else a generation of `kind` */
    oai_kind kind;
    char *body;                     /* a NUL-terminated copy */
    size_t len;
    double t0;                      /* arrival */
    /* the worker's result: q, or NULL with e */
    srv_req *q;
    oai_error e;
    int32_t *ids;                   /* a generation's prompt */
    size_t n_ids;
    sched_constraint *cons[OAI_MAX_N];
} srv_intake;

/* Intake worker: the request parsed, its prompt tokenized and checked against the context, one
 * grammar matcher per choice; nothing of the loop's touched (the server's tokenizer, template,
 * vocabulary and config are immutable while it serves). 0, or -1 with in->e and all freed. */
static int prepare_generate(server *s, srv_intake *in) {
    const oai_kind kind = in->kind;
    oai_error e = {0};
    srv_req *q = calloc(1, sizeof *q);
    if (!q) {
        oai_error_set(&in->e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    if (oai_parse(kind, in->body, in->len, tok_vocab_size(s->tok), &q->q, &e) != 0) {
        free(q);
        in->e = e;
        return -1;
    }
    const ingot_desc *d = &ingot_model_desc;
    if (strcmp(q->q.model, d->name) != 0) {
        oai_error_set(&e, 404, "invalid_request_error", "model", "model_not_found",
                      "The model '%.100s' does not exist; this server serves '%s'", q->q.model, d->name);
        goto fail;
    }
    /* the prompt's tokens */
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char err[512];
    if (kind == OAI_CHAT) {
        int user_error = 0;
        tok_span *plain = NULL;
        size_t n_plain = 0;
        /* tool_choice "none": the tools are neither shown to the model nor parsed */
        const int tools_on = q->q.tools && q->q.tool_choice != OAI_TOOLS_NONE;
        if (tools_on && q->q.tool_choice != OAI_TOOLS_AUTO && constrain_tool_call(s, &q->q, &e) != 0) goto fail;
        cJSON *own = s->tools_native ? NULL : tp_messages(q->q.messages, tools_on ? q->q.tools : NULL);
        if (!s->tools_native && !own) {
            oai_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
            goto fail;
        }
        char *text = chat_render_prompt(s->chat, own ? own : q->q.messages,
                                        s->tools_native && tools_on ? q->q.tools : NULL, &plain, &n_plain,
                                        &user_error, err, sizeof err);
        cJSON_Delete(own);
        if (!text) {
            oai_error_set(&e, user_error ? 400 : 500, user_error ? "invalid_request_error" : "server_error",
                          user_error ? "messages" : NULL, NULL, "chat template: %s", err);
            goto fail;
        }
        if (s->tools_native && !s->cfg.parse_special &&
            protect_tool_text(s, text, tools_on ? q->q.tools : NULL, q->q.messages, &plain, &n_plain) != 0) {
            free(plain);
            free(text);
            oai_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
            goto fail;
        }
        /* the template writes BOS itself where the model wants one (as HF's
         * apply_chat_template, which tokenizes without adding special tokens).
         * Only the template's markup may yield control tokens: text in a
         * message that spells one stays text (unless --parse-special-in-content). */
        int rc = s->cfg.parse_special
                     ? tok_encode(s->tok, text, strlen(text), 0, 1, &ids, &n_ids, err, sizeof err)
                     : tok_encode_spans(s->tok, text, strlen(text), 0, plain, n_plain, &ids, &n_ids, err, sizeof err);
        free(plain);
        free(text);
        if (rc != 0) {
            oai_error_set(&e, 400, "invalid_request_error", "messages", NULL, "tokenizer: %s", err);
            goto fail;
        }
    } else if (q->q.prompt_text) {
        /* a text prompt is the client's text: control-token spellings in it stay text */
        if (tok_encode(s->tok, q->q.prompt_text, strlen(q->q.prompt_text), 1, s->cfg.parse_special, &ids, &n_ids,
                       err, sizeof err) != 0) {
            oai_error_set(&e, 400, "invalid_request_error", "prompt", NULL, "tokenizer: %s", err);
            goto fail;
        }
    } else {
        ids = q->q.prompt_ids;
        n_ids = q->q.n_prompt_ids;
        q->q.prompt_ids = NULL;
        q->q.n_prompt_ids = 0;
    }
    const char *pparam = kind == OAI_CHAT ? "messages" : "prompt";
    if (n_ids == 0) {
        free(ids);
        oai_error_set(&e, 400, "invalid_request_error", pparam, NULL, "the prompt encodes to no tokens");
        goto fail;
    }
    const long ctx = d->max_ctx;
    if ((long)n_ids >= ctx || (q->q.max_tokens > 0 && (long)n_ids + q->q.max_tokens > ctx)) {
        free(ids);
        if (q->q.max_tokens > 0)
            oai_error_set(&e, 400, "invalid_request_error", pparam, "context_length_exceeded",
                          "This model's maximum context length is %ld tokens. However, you requested %ld tokens "
                          "(%zu in the prompt, %d for the completion). Please reduce the prompt or max_tokens.",
                          ctx, (long)n_ids + q->q.max_tokens, n_ids, q->q.max_tokens);
        else
            oai_error_set(&e, 400, "invalid_request_error", pparam, "context_length_exceeded",
                          "This model's maximum context length is %ld tokens. However, the prompt is %zu tokens.",
                          ctx, n_ids);
        goto fail;
    }
    q->n_prompt = (int)n_ids;
    /* structured output: one matcher per choice, made before anything is submitted */
    sched_constraint **cons = in->cons;
    if (q->q.grammar) {
        for (int i = 0; i < q->q.n; i++) {
            cons[i] = con_grammar_new(q->q.grammar, s->vocab, s->stop_ids, s->n_stop_ids, err, sizeof err);
            if (!cons[i]) {
                for (int k = 0; k < i; k++) {
                    cons[k]->free(cons[k]);
                    cons[k] = NULL;
                }
                free(ids);
                oai_error_set(&e, 400, "invalid_request_error", q->q.grammar_param, NULL, "'%s': %s",
                              q->q.grammar_param, err);
                goto fail;
            }
        }
    }
    in->q = q;
    in->ids = ids;
    in->n_ids = n_ids;
    return 0;
fail:
    oai_request_free(&q->q);
    free(q);
    in->e = e;
    return -1;
}

static void discard_generate(srv_intake *in) {
    for (int k = 0; k < OAI_MAX_N; k++)
        if (in->cons[k]) in->cons[k]->free(in->cons[k]);
    free(in->ids);
    oai_request_free(&in->q->q);
    free(in->q);
}

/* Loop thread, after prepare_generate: admission (the rate limit), the request's choices
 * submitted to the scheduler, the reply started. */
static void submit_generate(server *s, srv_intake *in) {
    struct evhttp_request *r = in->r;
    const oai_kind kind = in->kind;
    const ingot_desc *d = &ingot_model_desc;
    srv_req *q = in->q;
    int32_t *ids = in->ids;
    const size_t n_ids = in->n_ids;
    sched_constraint **cons = in->cons;
    oai_error e = {0};
    char err[512];
    const long ctx = d->max_ctx;
    const int max_tokens = q->q.max_tokens > 0 ? q->q.max_tokens : (int)(ctx - (long)n_ids);
    /* the token limit reserves the prompt and the most every choice may generate */
    if (admit_rate(s, r, q, (double)n_ids + (double)max_tokens * q->q.n) != 0) {
        discard_generate(in);
        return;
    }
    q->srv = s;
    q->http = r;
    q->t_arrival = in->t0;
    q->n_choices = q->q.n;
    q->choices = calloc((size_t)q->n_choices, sizeof *q->choices);
    if (!q->choices) {
        for (int k = 0; k < q->q.n; k++)
            if (cons[k]) cons[k]->free(cons[k]);
        free(ids);
        settle_rate(s, q, 1);
        oai_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    snprintf(q->id, sizeof q->id, "%s%016llx%08llx", kind == OAI_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long long)splitmix(&s->rng), (unsigned long long)++s->next_id);
    q->meta = (oai_meta){.kind = kind, .id = q->id, .created = (long long)time(NULL), .model = d->name};
    /* link first: a submit failure below cancels what was submitted, and the
     * DONE events of those sequences must find this request */
    q->next = s->reqs;
    if (s->reqs) s->reqs->prev = q;
    s->reqs = q;
    s->n_reqs++;
    for (int i = 0; i < q->n_choices; i++) {
        srv_choice *c = &q->choices[i];
        tok_stream_init(&c->ts);
        tc_init(&c->tc, s->tool_format);
        if (kind == OAI_CHAT && q->q.tools && q->q.tool_choice != OAI_TOOLS_NONE) {
            c->tools = 1;
            c->calls = cJSON_CreateArray();
            /* a constrained call whose opening markup is a control token: the grammar starts after it */
            if (q->q.tool_choice != OAI_TOOLS_AUTO && s->tool_marker_id >= 0) {
                const char *marker = tc_open_marker(s->tool_format);
                tc_out o = {.calls = cJSON_CreateArray()};
                tc_feed(&c->tc, marker, strlen(marker), &o);
                oai_buf_free(&o.content);
                cJSON_Delete(o.calls);
            }
        }
        sched_request sr = {.prompt = ids, .n_prompt = n_ids, .sampling = q->q.sampling, .max_tokens = max_tokens,
                            .top_logprobs = q->q.logprobs ? q->q.top_logprobs : -1, .ignore_eos = q->q.ignore_eos,
                            .constraint = cons[i]};
        /* n choices from one seed must differ, yet the same request must repeat */
        sr.sampling.seed = q->q.has_seed ? q->q.sampling.seed + (uint64_t)i * 0x9e3779b97f4a7c15ULL : splitmix(&s->rng);
        if (sched_submit(s->sched, &sr, &c->seq_id, err, sizeof err) != 0) {
            submit_error(&e, err);
            for (int k = i + 1; k < q->n_choices; k++) /* cons[i] went with the refused submit */
                if (cons[k]) cons[k]->free(cons[k]);
            free(ids);
            refuse_after_submit(s, q, r, &e, i);
            return;
        }
    }
    free(ids);
    start_waiting(s, q, r);
    if (q->q.stream) {
        struct evkeyvalq *h = evhttp_request_get_output_headers(r);
        evhttp_add_header(h, "Content-Type", "text/event-stream");
        evhttp_add_header(h, "Cache-Control", "no-cache");
        evhttp_send_reply_start(r, 200, "OK");
    }
    return;
fail:
    oai_request_free(&q->q);
    free(q);
    reply_error(s, r, &e);
}

/* ---- embeddings ------------------------------------------------------------- */

/* POST /v1/embeddings: each input becomes one prefill-only sequence (see
 * sched_task); the reply waits for all of them. Text goes through the
 * tokenizer as a completions prompt does (BOS where the model wants one). */
/* Intake worker: the request parsed and every input tokenized and checked (as
 * prepare_generate). 0, or -1 with in->e and all freed. */
static int prepare_embeddings(server *s, srv_intake *in) {
    const ingot_desc *d = &ingot_model_desc;
    oai_error e = {0};
    srv_req *q = calloc(1, sizeof *q);
    emb_request *er = calloc(1, sizeof *er);
    if (!q || !er) {
        free(q);
        free(er);
        oai_error_set(&in->e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    /* every input is a live sequence: a request must fit in the queue */
    int max_inputs = s->cfg.max_running + s->cfg.max_waiting;
    if (max_inputs > EMB_MAX_INPUTS) max_inputs = EMB_MAX_INPUTS;
    if (emb_parse(in->body, in->len, tok_vocab_size(s->tok), d->dim, max_inputs, er, &e) != 0) {
        free(q);
        free(er);
        in->e = e;
        return -1;
    }
    q->emb = er;
    if (strcmp(er->model, d->name) != 0) {
        oai_error_set(&e, 404, "invalid_request_error", "model", "model_not_found",
                      "The model '%.100s' does not exist; this server serves '%s'", er->model, d->name);
        goto fail;
    }
    /* tokenize every input first: a bad one refuses the request before anything runs */
    for (int i = 0; i < er->n_inputs; i++) {
        emb_input *x = &er->inputs[i];
        char param[32], err[512];
        snprintf(param, sizeof param, er->n_inputs == 1 ? "input" : "input[%d]", i);
        if (x->text) {
            if (tok_encode(s->tok, x->text, strlen(x->text), 1, s->cfg.parse_special, &x->ids, &x->n_ids, err,
                           sizeof err) != 0) {
                oai_error_set(&e, 400, "invalid_request_error", param, NULL, "tokenizer: %s", err);
                goto fail;
            }
            free(x->text);
            x->text = NULL;
        }
        if (x->n_ids == 0) {
            oai_error_set(&e, 400, "invalid_request_error", param, NULL, "'%s' encodes to no tokens", param);
            goto fail;
        }
        if ((long)x->n_ids > d->max_ctx) {
            oai_error_set(&e, 400, "invalid_request_error", param, "context_length_exceeded",
                          "This model's maximum context length is %d tokens. However, '%s' is %zu tokens.",
                          d->max_ctx, param, x->n_ids);
            goto fail;
        }
        q->n_prompt += (int)x->n_ids;
    }
    in->q = q;
    return 0;
fail:
    emb_request_free(er);
    free(er);
    free(q);
    in->e = e;
    return -1;
}

static void discard_embeddings(srv_intake *in) {
    emb_request_free(in->q->emb);
    free(in->q->emb);
    free(in->q);
}

/* Loop thread, after prepare_embeddings: admission, one sequence per input submitted. */
static void submit_embeddings(server *s, srv_intake *in) {
    struct evhttp_request *r = in->r;
    srv_req *q = in->q;
    emb_request *er = q->emb;
    oai_error e = {0};
    if (admit_rate(s, r, q, (double)q->n_prompt) != 0) {
        discard_embeddings(in);
        return;
    }
    q->srv = s;
    q->http = r;
    q->t_arrival = in->t0;
    q->n_choices = er->n_inputs;
    q->choices = calloc((size_t)q->n_choices, sizeof *q->choices);
    if (!q->choices) {
        settle_rate(s, q, 1);
        oai_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    q->next = s->reqs;
    if (s->reqs) s->reqs->prev = q;
    s->reqs = q;
    s->n_reqs++;
    for (int i = 0; i < q->n_choices; i++) {
        char err[512];
        sched_request sr = {.prompt = er->inputs[i].ids, .n_prompt = er->inputs[i].n_ids,
                            .sampling = samp_default_params(), .top_logprobs = -1, .task = s->cfg.pooling};
        if (sched_submit(s->sched, &sr, &q->choices[i].seq_id, err, sizeof err) != 0) {
            submit_error(&e, err);
            if (e.status == 400) snprintf(e.param, sizeof e.param, "input");
            refuse_after_submit(s, q, r, &e, i);
            return;
        }
    }
    /* the ids were copied by sched_submit */
    for (int i = 0; i < er->n_inputs; i++) {
        free(er->inputs[i].ids);
        er->inputs[i].ids = NULL;
    }
    start_waiting(s, q, r);
    return;
fail:
    emb_request_free(er);
    free(er);
    free(q->choices);
    free(q);
    reply_error(s, r, &e);
}

static void intake_work(intake_job *job) {
    srv_intake *in = (srv_intake *)job;
    if (in->embeddings ? prepare_embeddings(in->s, in) : prepare_generate(in->s, in)) in->q = NULL;
}

static void intake_done(intake_job *job) {
    srv_intake *in = (srv_intake *)job;
    server *s = in->s;
    if (in->r && in->conn) evhttp_connection_set_closecb(in->conn, NULL, NULL);
    if (!in->r || s->closing) {
        if (in->q) in->embeddings ? discard_embeddings(in) : discard_generate(in);
    } else if (!in->q) {
        reply_error(s, in->r, &in->e);
    } else if (in->embeddings) {
        submit_embeddings(s, in);
    } else {
        submit_generate(s, in);
    }
    free(in->body);
    free(in);
    if (!s->closing) check_drained(s);
}

static void on_intake_close(struct evhttp_connection *conn, void *arg) {
    (void)conn;
    srv_intake *in = arg;
    in->r = NULL; /* evhttp frees the request with the connection */
}

/* POST /v1/chat/completions, /v1/completions (embeddings 0, kind) and /v1/embeddings
 * (embeddings 1): the body copied and queued for an intake worker. */
static void start_intake(server *s, struct evhttp_request *r, int embeddings, oai_kind kind) {
    size_t len;
    const char *body = request_body(s, r, &len);
    if (!body) return;
    srv_intake *in = calloc(1, sizeof *in);
    char *copy = malloc(len + 1);
    if (!in || !copy) {
        free(in);
        free(copy);
        reply_error_msg(s, r, 500, "server_error", NULL, "out of memory");
        return;
    }
    memcpy(copy, body, len);
    copy[len] = 0;
    *in = (srv_intake){.job = {.work = intake_work, .done = intake_done}, .s = s, .r = r,
                       .conn = evhttp_request_get_connection(r), .embeddings = embeddings, .kind = kind,
                       .body = copy, .len = len, .t0 = now_s()};
    if (intake_submit(s->intake, &in->job) != 0) {
        free(copy);
        free(in);
        evhttp_add_header(evhttp_request_get_output_headers(r), "Retry-After", "1");
        met_inc(s->m_rejected, "queue_full", 1);
        reply_error_msg(s, r, 503, "server_error", "queue_full",
                        "too many requests are being parsed; try again shortly");
        return;
    }
    if (in->conn) evhttp_connection_set_closecb(in->conn, on_intake_close, in);
}

static void handle_generate(server *s, struct evhttp_request *r, oai_kind kind) { start_intake(s, r, 0, kind); }
static void handle_embeddings(server *s, struct evhttp_request *r) { start_intake(s, r, 1, OAI_CHAT); }

/* ---- other endpoints ------------------------------------------------------- */

static void handle_models(server *s, struct evhttp_request *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", ingot_model_desc.name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created);
    cJSON_AddStringToObject(m, "owned_by", "ingot");
    cJSON_AddNumberToObject(m, "max_model_len", ingot_model_desc.max_ctx);
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
    reply_json(s, r, 200, root);
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
    cJSON_AddStringToObject(j, "model", ingot_model_desc.name);
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
    cJSON_AddNumberToObject(j, "uptime_seconds", now_s() - s->t_start);
    reply_json(s, r, ok ? 200 : 503, j);
}

static void handle_ready(server *s, struct evhttp_request *r) {
    sched_stats st;
    sched_get_stats(s->sched, &st);
    const char *state = health_state(s, &st);
    const int ok = !strcmp(state, "ready");
    cJSON *j = cJSON_CreateObject();
    cJSON_AddBoolToObject(j, "ready", ok);
    cJSON_AddStringToObject(j, "state", state);
    cJSON_AddStringToObject(j, "model", ingot_model_desc.name);
    reply_json(s, r, ok ? 200 : 503, j);
}

static void handle_alive(server *s, struct evhttp_request *r) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddBoolToObject(j, "alive", 1);
    reply_json(s, r, 200, j);
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
    count_status(s, 200);
    size_t len = 0;
    char *text = met_render(s->met, &len);
    send_body(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

/* ---- routing --------------------------------------------------------------- */

typedef struct {
    const char *path;
    enum evhttp_cmd_type method;
    int auth; /* 1: needs the API key when one is configured */
    int kind; /* -1: not a generation endpoint, else an oai_kind */
    void (*fn)(server *, struct evhttp_request *);
} srv_route;

static const srv_route ROUTES[] = {
    {"/v1/chat/completions", EVHTTP_REQ_POST, 1, OAI_CHAT, NULL},
    {"/v1/completions", EVHTTP_REQ_POST, 1, OAI_COMPLETION, NULL},
    {"/v1/embeddings", EVHTTP_REQ_POST, 1, -1, handle_embeddings},
    {"/v1/models", EVHTTP_REQ_GET, 1, -1, handle_models},
    {"/health", EVHTTP_REQ_GET, 0, -1, handle_health},
    {"/ready", EVHTTP_REQ_GET, 0, -1, handle_ready},
    {"/alive", EVHTTP_REQ_GET, 0, -1, handle_alive},
    {"/metrics", EVHTTP_REQ_GET, 0, -1, handle_metrics},
};

/* Compares in time independent of where the strings first differ, so the
 * key cannot be guessed byte by byte from response times. */
static int key_matches(const char *given, const char *key) {
    const size_t gl = strlen(given), kl = strlen(key);
    unsigned char diff = (unsigned char)(gl != kl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)(key[i] ^ (i < gl ? given[i] : 0));
    return diff == 0;
}

static int authorized(server *s, struct evhttp_request *r) {
    if (!s->cfg.api_key) return 1;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(r), "Authorization");
    if (!h) {
        reply_error_msg(s, r, 401, "invalid_request_error", "missing_api_key",
                        "You didn't provide an API key (Authorization: Bearer KEY)");
        return 0;
    }
    if (strncasecmp(h, "Bearer ", 7) != 0 || !key_matches(h + 7, s->cfg.api_key)) {
        reply_error_msg(s, r, 401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided");
        return 0;
    }
    return 1;
}

static void on_request(struct evhttp_request *r, void *arg) {
    server *s = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(r);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !*path) path = "/";
    /* a trailing slash names the same resource */
    char norm[128];
    size_t pl = strlen(path);
    if (pl >= sizeof norm) {
        reply_error_msg(s, r, 404, "invalid_request_error", "not_found", "no such route");
        return;
    }
    memcpy(norm, path, pl + 1);
    if (pl > 1 && norm[pl - 1] == '/') norm[pl - 1] = 0;
    const enum evhttp_cmd_type method = evhttp_request_get_command(r);
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        const srv_route *rt = &ROUTES[i];
        if (strcmp(rt->path, norm) != 0) continue;
        /* HEAD is GET without the body (send_body) */
        if (method != rt->method && !(method == EVHTTP_REQ_HEAD && rt->method == EVHTTP_REQ_GET)) {
            evhttp_add_header(evhttp_request_get_output_headers(r), "Allow",
                              rt->method == EVHTTP_REQ_GET ? "GET, HEAD" : "POST");
            char msg[96];
            snprintf(msg, sizeof msg, "%s only accepts %s", rt->path,
                     rt->method == EVHTTP_REQ_GET ? "GET and HEAD" : "POST");
            reply_error_msg(s, r, 405, "invalid_request_error", "method_not_allowed", msg);
            return;
        }
        /* scrapers reach /metrics without the key unless --metrics-auth */
        const int auth = rt->auth || (rt->fn == handle_metrics && s->cfg.metrics_auth);
        if (auth && !authorized(s, r)) return;
        if (rt->kind >= 0) handle_generate(s, r, (oai_kind)rt->kind);
        else rt->fn(s, r);
        return;
    }
    char msg[200];
    snprintf(msg, sizeof msg, "no route %.120s", norm);
    reply_error_msg(s, r, 404, "invalid_request_error", "not_found", msg);
}

/* ---- lifecycle ------------------------------------------------------------- */

static void check_drained(server *s) {
    if (s->draining && s->n_reqs == 0 && intake_pending(s->intake) == 0 && s->unflushed <= 0)
        event_base_loopexit(s->base, NULL);
}

static void on_grace_over(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    server *s = arg;
    fprintf(stderr, "%s: grace period over with %d request(s) in flight; cancelling them\n",
            ingot_model_desc.name, s->n_reqs);
    event_base_loopexit(s->base, NULL);
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    (void)what;
    server *s = arg;
    if (s->draining) {
        fprintf(stderr, "%s: second signal; exiting now\n", ingot_model_desc.name);
        event_base_loopexit(s->base, NULL);
        return;
    }
    s->draining = 1;
    fprintf(stderr, "%s: %s received; no new connections, %d request(s) in flight, grace %.0f s\n",
            ingot_model_desc.name, sig == SIGTERM ? "SIGTERM" : "SIGINT", s->n_reqs, s->cfg.grace);
    if (s->listener) {
        evhttp_del_accept_socket(s->http, s->listener);
        s->listener = NULL;
    }
    struct timeval tv = {(time_t)s->cfg.grace, (suseconds_t)((s->cfg.grace - floor(s->cfg.grace)) * 1e6)};
    s->grace_timer = evtimer_new(s->base, on_grace_over, s);
    if (s->grace_timer) evtimer_add(s->grace_timer, &tv);
    check_drained(s);
}

static int parse_num(const char *s, const char *what, double lo, double hi, int integer, double *out) {
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi || (integer && v != floor(v))) {
        fprintf(stderr, "%s: error: %s must be %s in [%g, %g], got '%s'\n", ingot_model_desc.name, what,
                integer ? "an integer" : "a number", lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* A byte count: a number with an optional binary suffix K, M, G or T
 * (KiB ... TiB; "B" or "iB" may follow: 512M, 4GiB, 1.5G). */
static int parse_bytes(const char *v, const char *what, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    double unit = 1;
    switch (*end) {
    case 'k': case 'K': unit = 1024.0; end++; break;
    case 'm': case 'M': unit = 1048576.0; end++; break;
    case 'g': case 'G': unit = 1073741824.0; end++; break;
    case 't': case 'T': unit = 1099511627776.0; end++; break;
    default: break;
    }
    if (unit > 1 && *end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (errno || end == v || *end || !isfinite(x) || x <= 0 || x * unit > 1e18) {
        fprintf(stderr, "%s: error: %s must be a positive byte count (e.g. 512M, 4G), got '%s'\n",
                ingot_model_desc.name, what, v);
        return -1;
    }
    *out = floor(x * unit);
    return 0;
}

static int parse_pooling(const char *v, const char *what, sched_task *out) {
    if (!strcmp(v, "last")) *out = SCHED_EMBED_LAST;
    else if (!strcmp(v, "mean")) *out = SCHED_EMBED_MEAN;
    else {
        fprintf(stderr, "%s: error: %s must be last or mean, got '%s'\n", ingot_model_desc.name, what, v);
        return -1;
    }
    return 0;
}

static int parse_spec(const char *v, const char *what, sched_spec_mode *out) {
    if (sched_spec_parse(v, out) == 0) return 0;
    fprintf(stderr, "%s: error: %s must be off, ngram or draft, got '%s'\n", ingot_model_desc.name, what, v);
    return -1;
}

/* One option: its flag, its environment variable, and where it goes. */
typedef struct {
    const char *flag, *env;
    double lo, hi;
    int integer;
    double *dst;
} srv_numopt;

static int parse_config(srv_config *c, int argc, char **argv) {
    double port = 8080, kv_blocks = 0, kv_mem = 0, mbt = 0, running = 32, waiting = 1024, body = 4 << 20,
           grace = 30, dev_frac = 0.90, read_timeout = 30, max_conns = 512, rpm = 0, tpm = 0, req_timeout = 0,
           spec_k = 4, ngram_min = 1, ngram_max = 3, intake_threads = 2;
    const srv_numopt opts[] = {
        {"--device-memory-fraction", "INGOT_DEVICE_MEMORY_FRACTION", 0.01, 1.0, 0, &dev_frac},
        {"--port", "INGOT_PORT", 0, 65535, 1, &port},
        {"--kv-blocks", "INGOT_KV_BLOCKS", 1, 1 << 24, 1, &kv_blocks},
        {"--kv-memory", "INGOT_KV_MEMORY", 1, 1 << 24, 0, &kv_mem},
        {"--max-batch-tokens", "INGOT_MAX_BATCH_TOKENS", 1, 1 << 20, 1, &mbt},
        {"--max-running", "INGOT_MAX_RUNNING", 1, 4096, 1, &running},
        {"--max-waiting", "INGOT_MAX_WAITING", 1, 1 << 20, 1, &waiting},
        {"--intake-threads", "INGOT_INTAKE_THREADS", 1, 64, 1, &intake_threads},
        {"--max-body", "INGOT_MAX_BODY", 1024, 1 << 30, 1, &body},
        {"--grace", "INGOT_GRACE", 0, 86400, 0, &grace},
        {"--read-timeout", "INGOT_READ_TIMEOUT", 0.05, 86400, 0, &read_timeout},
        {"--max-connections", "INGOT_MAX_CONNECTIONS", 1, 1 << 20, 1, &max_conns},
        {"--rate-limit-rpm", "INGOT_RATE_LIMIT_RPM", 0, 1e9, 0, &rpm},
        {"--rate-limit-tpm", "INGOT_RATE_LIMIT_TPM", 0, 1e12, 0, &tpm},
        {"--request-timeout", "INGOT_REQUEST_TIMEOUT", 0, 7 * 86400, 0, &req_timeout},
        {"--spec-k", "INGOT_SPEC_K", 1, 32, 1, &spec_k},
        {"--spec-ngram-min", "INGOT_SPEC_NGRAM_MIN", 1, 64, 1, &ngram_min},
        {"--spec-ngram-max", "INGOT_SPEC_NGRAM_MAX", 1, 64, 1, &ngram_max},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    c->api_key = NULL;
    c->prefix_cache = 1;
    const char *v;
    if ((v = getenv("INGOT_HOST")) && *v) snprintf(c->host, sizeof c->host, "%s", v);
    if ((v = getenv("INGOT_API_KEY")) && *v) c->api_key = v;
    if ((v = getenv("INGOT_PREFIX_CACHE")) && !strcmp(v, "0")) c->prefix_cache = 0;
    if ((v = getenv("INGOT_METRICS_AUTH")) && !strcmp(v, "1")) c->metrics_auth = 1;
    if ((v = getenv("INGOT_PARSE_SPECIAL_IN_CONTENT")) && !strcmp(v, "1")) c->parse_special = 1;
    c->pooling = SCHED_EMBED_LAST;
    if ((v = getenv("INGOT_MEMORY_BUDGET")) && *v && parse_bytes(v, "INGOT_MEMORY_BUDGET", &c->memory_budget) != 0)
        return -1;
    if ((v = getenv("INGOT_KV_BLOCKS")) && *v) c->kv_explicit = 1;
    if ((v = getenv("INGOT_KV_MEMORY")) && *v) c->kv_explicit = 1;
    if ((v = getenv("INGOT_POOLING")) && *v && parse_pooling(v, "INGOT_POOLING", &c->pooling) != 0) return -1;
    if ((v = getenv("INGOT_SPEC")) && *v && parse_spec(v, "INGOT_SPEC", &c->spec) != 0) return -1;
    /* a stall means something is broken, so nothing from outside can cause
     * one; this lets the probes' answer to it (and what a load balancer or
     * orchestrator does with that) be tried */
    if ((v = getenv("INGOT_FAULT_STALLED")) && !strcmp(v, "1")) c->fault_stalled = 1;
    for (int k = 0; k < n_opts; k++)
        if ((v = getenv(opts[k].env)) && *v &&
            parse_num(v, opts[k].env, opts[k].lo, opts[k].hi, opts[k].integer, opts[k].dst) != 0)
            return -1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-prefix-cache")) {
            c->prefix_cache = 0;
            continue;
        }
        if (!strcmp(a, "--metrics-auth")) {
            c->metrics_auth = 1;
            continue;
        }
        if (!strcmp(a, "--parse-special-in-content")) {
            c->parse_special = 1;
            continue;
        }
        if (!strcmp(a, "--print-memory")) {
            c->print_memory = 1;
            continue;
        }
        if (!strcmp(a, "--host") && val) {
            snprintf(c->host, sizeof c->host, "%s", val);
            i++;
            continue;
        }
        if (!strcmp(a, "--memory-budget") && val) {
            if (parse_bytes(val, "--memory-budget", &c->memory_budget) != 0) return -1;
            i++;
            continue;
        }
        if (!strcmp(a, "--spec") && val) {
            if (parse_spec(val, "--spec", &c->spec) != 0) return -1;
            i++;
            continue;
        }
        if (!strcmp(a, "--pooling") && val) {
            if (parse_pooling(val, "--pooling", &c->pooling) != 0) return -1;
            i++;
            continue;
        }
        if (!strcmp(a, "--api-key") && val) {
            c->api_key = *val ? val : NULL;
            i++;
            continue;
        }
        int k = 0;
        for (; k < n_opts; k++)
            if (!strcmp(a, opts[k].flag)) break;
        if (k == n_opts || !val) {
            fprintf(stderr, "%s: error: serve: unknown option or missing value '%s'\n%s", ingot_model_desc.name, a,
                    SRV_USAGE);
            return -1;
        }
        if (!strcmp(a, "--kv-blocks") || !strcmp(a, "--kv-memory")) c->kv_explicit = 1;
        if (!strcmp(a, "--kv-blocks")) kv_mem = 0; /* the last of the two wins */
        if (!strcmp(a, "--kv-memory")) kv_blocks = 0;
        if (parse_num(val, a, opts[k].lo, opts[k].hi, opts[k].integer, opts[k].dst) != 0) return -1;
        i++;
    }
    c->port = (int)port;
    c->kv_blocks = (int)kv_blocks;
    c->kv_memory_mib = kv_mem;
    c->device_memory_fraction = dev_frac;
    c->max_batch_tokens = (int)mbt;
    c->max_running = (int)running;
    c->max_waiting = (int)waiting;
    c->intake_threads = (int)intake_threads;
    c->max_body = (long)body;
    c->grace = grace;
    c->read_timeout = read_timeout;
    c->max_connections = (int)max_conns;
    c->rate_rpm = rpm;
    c->rate_tpm = tpm;
    c->request_timeout = req_timeout;
    c->spec_k = (int)spec_k;
    c->spec_ngram_min = (int)ngram_min;
    c->spec_ngram_max = (int)ngram_max;
    if (c->spec_ngram_min > c->spec_ngram_max) {
        fprintf(stderr, "%s: error: --spec-ngram-min (%d) is above --spec-ngram-max (%d)\n", ingot_model_desc.name,
                c->spec_ngram_min, c->spec_ngram_max);
        return -1;
    }
    return 0;
}

static void add_metrics(server *s) {
    static const double latency[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
    static const double per_token[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.075, 0.1, 0.15,
                                       0.25, 0.5, 1, 2.5};
    met_registry *r = s->met;
    const int nl = (int)(sizeof latency / sizeof latency[0]), nt = (int)(sizeof per_token / sizeof per_token[0]);
    s->m_requests = met_add(r, MET_COUNTER, "ingot_http_requests_total", "HTTP requests answered, by status code (499: client went away first).", "code");
    s->m_prompt_tokens = met_add(r, MET_COUNTER, "ingot_prompt_tokens_total", "Prompt tokens of finished generation requests.", NULL);
    s->m_gen_tokens = met_add(r, MET_COUNTER, "ingot_generation_tokens_total", "Tokens generated for finished requests.", NULL);
    s->m_cancelled = met_add(r, MET_COUNTER, "ingot_client_disconnects_total", "Generation requests whose client disconnected before the end.", NULL);
    s->m_rejected = met_add(r, MET_COUNTER, "ingot_requests_rejected_total", "Requests refused or cut short by a limit, by reason (rate_limit_requests, rate_limit_tokens: 429; rate_limit_too_large: 413; request_timeout: 504; queue_full: 503).", "reason");
    s->m_ttft = met_add_histogram(r, "ingot_time_to_first_token_seconds", "Time from request arrival to its first generated token.", latency, nl);
    s->m_e2e = met_add_histogram(r, "ingot_e2e_request_latency_seconds", "Time from request arrival to its last token.", latency, nl);
    s->m_tpot = met_add_histogram(r, "ingot_time_per_output_token_seconds", "Mean time between generated tokens, per request.", per_token, nt);
    s->m_inflight = met_add(r, MET_GAUGE, "ingot_requests_in_flight", "Generation requests the server is handling.", NULL);
    s->m_running = met_add(r, MET_GAUGE, "ingot_num_requests_running", "Sequences in the running batch.", NULL);
    s->m_waiting = met_add(r, MET_GAUGE, "ingot_num_requests_waiting", "Sequences queued for admission (queue depth).", NULL);
    s->m_kv_usage = met_add(r, MET_GAUGE, "ingot_kv_cache_usage_ratio", "Fraction of KV blocks in use.", NULL);
    s->m_kv_used = met_add(r, MET_GAUGE, "ingot_kv_blocks_used", "KV blocks in use.", NULL);
    s->m_kv_total = met_add(r, MET_GAUGE, "ingot_kv_blocks_capacity", "KV blocks in the pool.", NULL);
    s->m_prefix_hit = met_add(r, MET_COUNTER, "ingot_prefix_cache_hit_tokens_total", "Prompt tokens served from the prefix cache.", NULL);
    s->m_prefix_lookup = met_add(r, MET_COUNTER, "ingot_prefix_cache_queried_tokens_total", "Prompt tokens looked up in the prefix cache.", NULL);
    s->m_preempt = met_add(r, MET_COUNTER, "ingot_preemptions_total", "Sequences preempted for lack of KV blocks.", NULL);
    s->m_steps = met_add(r, MET_COUNTER, "ingot_scheduler_steps_total", "Forward steps run by the scheduler.", NULL);
    s->m_batch_tokens = met_add(r, MET_GAUGE, "ingot_batch_tokens", "Tokens in the last forward step.", NULL);
    s->m_batch_seqs = met_add(r, MET_GAUGE, "ingot_batch_size", "Sequences in the last forward step.", NULL);
    s->m_step_seconds = met_add(r, MET_GAUGE, "ingot_last_step_seconds", "Duration of the last scheduler step.", NULL);
    /* from the same snapshot as the step: step - forward is the scheduler's own time in that step */
    s->m_forward_seconds = met_add(r, MET_GAUGE, "ingot_last_forward_seconds",
                                   "Duration of the model forward pass inside the last scheduler step.", NULL);
    s->m_mask_seconds = met_add(r, MET_COUNTER, "ingot_grammar_mask_seconds_total", "Time spent computing grammar token masks (structured output).", NULL);
    s->m_masked_tokens = met_add(r, MET_COUNTER, "ingot_grammar_masked_tokens_total", "Tokens sampled under a grammar mask.", NULL);
    s->m_step_mask_seconds = met_add(r, MET_GAUGE, "ingot_last_step_mask_seconds", "Grammar mask time of the last step that had any.", NULL);
    s->m_spec_proposed = met_add(r, MET_COUNTER, "ingot_spec_proposed_tokens_total", "Drafted tokens verified by speculative decoding.", NULL);
    s->m_spec_accepted = met_add(r, MET_COUNTER, "ingot_spec_accepted_tokens_total", "Drafted tokens accepted by speculative decoding's verification.", NULL);
}

/* What the process will hold, and the KV pool's size. */
typedef struct {
    int kv_blocks, batch_tokens;
    double weights, kv, scratch, total; /* bytes */
} mem_plan;

/* Sizes the KV pool and, with --memory-budget, checks that the weights
 * (mapped, or converted at load), the KV pool and scratch (the model's
 * activation arena and tables, the scheduler's logits and step arrays) fit:
 * without --kv-blocks/--kv-memory the pool is what the budget leaves (on a
 * device backend at most device_blocks, what its free memory holds; 0: no
 * such limit). 0, or -1 with the reason printed, naming what needs how much. */
static int plan_memory(const srv_config *c, const ingot_model_api *draft, double weight_bytes, int model_max,
                       int device_blocks, mem_plan *p) {
    const ingot_desc *d = &ingot_model_desc;
    const double mib = 1048576.0, budget = c->memory_budget;
    /* --spec draft: the draft's weights, scratch and a KV pool of as many blocks as the target's */
    if (c->spec != SCHED_SPEC_DRAFT) draft = NULL;
    const size_t block_bytes = (d->kv_bytes_per_token + (draft ? draft->desc->kv_bytes_per_token : 0)) * INGOT_KV_BLOCK;
    if (draft) weight_bytes += (double)draft->weights_planned_bytes();
    const int ctx_blocks = (d->max_ctx + INGOT_KV_BLOCK - 1) / INGOT_KV_BLOCK;
    int kv_blocks = c->kv_blocks;
    if (device_blocks > 0) kv_blocks = device_blocks;
    if (!kv_blocks) {
        /* default: 1 GiB, but always room for one full context */
        const double kv_mib = c->kv_memory_mib > 0 ? c->kv_memory_mib : 1024;
        kv_blocks = (int)(kv_mib * mib / (double)block_bytes);
        if (c->kv_memory_mib <= 0 && kv_blocks < ctx_blocks) kv_blocks = ctx_blocks;
        if (kv_blocks < 1) kv_blocks = 1;
    }
    int mbt = c->max_batch_tokens ? c->max_batch_tokens : model_max;
    if (mbt > model_max) mbt = model_max;
    const sched_config limits = {.max_batch_tokens = mbt, .max_running = c->max_running, .spec = c->spec,
                                 .spec_k = c->spec_k};
    const double scratch_bytes = (double)ingot_model_scratch_bytes(NULL) + (double)sched_scratch_bytes(&limits, model_max) +
                                 (draft ? (double)draft->scratch_bytes(NULL) +
                                              sizeof(float) * (double)c->max_running * (double)d->vocab : 0.0);
    if (budget > 0 && !c->kv_explicit) {
        const double fit = floor((budget - weight_bytes - scratch_bytes) / (double)block_bytes);
        if (fit < 1) {
            fprintf(stderr, "%s: error: --memory-budget %.1f MiB leaves no room for the KV cache: weights need %.1f "
                            "MiB and scratch %.1f MiB, and one KV block of %d tokens %.2f MiB\n", d->name,
                    budget / mib, weight_bytes / mib, scratch_bytes / mib, INGOT_KV_BLOCK, (double)block_bytes / mib);
            return -1;
        }
        if (device_blocks <= 0 || fit < device_blocks) kv_blocks = fit > (1 << 24) ? 1 << 24 : (int)fit;
    }
    p->kv_blocks = kv_blocks;
    p->batch_tokens = mbt;
    p->weights = weight_bytes;
    p->kv = (double)block_bytes * kv_blocks;
    p->scratch = scratch_bytes;
    p->total = weight_bytes + p->kv + scratch_bytes;
    if (budget > 0 && p->total > budget) {
        fprintf(stderr, "%s: error: --memory-budget %.1f MiB is too small: weights need %.1f MiB + KV cache %.1f MiB "
                        "(%d blocks of %d tokens) + scratch %.1f MiB = %.1f MiB\n", d->name, budget / mib,
                weight_bytes / mib, p->kv / mib, kv_blocks, INGOT_KV_BLOCK, scratch_bytes / mib, p->total / mib);
        return -1;
    }
    return 0;
}

int server_preflight(const srv_draft *draft, int argc, char **argv) {
    srv_config c;
    memset(&c, 0, sizeof c);
    if (parse_config(&c, argc, argv) != 0) return 2;
    if (c.memory_budget <= 0 && !c.print_memory) return 0;
    /* the device's free memory is not known before the model is loaded: only the budget's own limit here */
    mem_plan p;
    if (plan_memory(&c, draft ? draft->api : NULL, (double)ingot_weights_planned_bytes(), ingot_model_max_tokens(NULL), 0,
                    &p) != 0)
        return 1;
    if (!c.print_memory) return 0;
    /* what a supervisor (ingot-router) adds up against its own budget before starting this process */
    printf("{\"model\": \"%s\", \"weights_bytes\": %.0f, \"kv_bytes\": %.0f, \"kv_blocks\": %d, "
           "\"scratch_bytes\": %.0f, \"total_bytes\": %.0f}\n", ingot_model_desc.name, p.weights, p.kv,
           p.kv_blocks, p.scratch, p.total);
    fflush(stdout);
    return -1;
}

int server_main(ingot_model *m, tok_tokenizer *tok, int n_threads, const srv_draft *draft, int argc, char **argv) {
    const ingot_desc *d = &ingot_model_desc;
    server *s = calloc(1, sizeof *s);
    if (!s) return 1;
    int rc = 1;
    if (parse_config(&s->cfg, argc, argv) != 0) {
        free(s);
        return 2;
    }
    s->model = m;
    s->tok = tok;
    s->n_threads = n_threads;
    s->t_start = now_s();
    s->created = (long long)time(NULL);
    s->rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(now_s() * 1e9);
    /* a client that vanishes mid-write must not kill the process */
    signal(SIGPIPE, SIG_IGN);

    char err[1024];
    s->chat = chat_load(ingot_model_weights(m), tok, err, sizeof err);
    if (!s->chat) {
        fprintf(stderr, "%s: error: %s\n", d->name, err);
        goto out;
    }
    s->tool_format = tc_detect(chat_text(s->chat), &s->tools_native);
    s->tool_marker_id = tok_find(tok, tc_open_marker(s->tool_format));
    if (s->tool_marker_id >= 0 && !tok_is_special(tok, s->tool_marker_id)) s->tool_marker_id = -1;
    /* a device backend sizes its KV pool by its free memory, unless told */
    const int device_blocks = s->cfg.kv_blocks || s->cfg.kv_memory_mib > 0
                                  ? 0 : ingot_kv_fit_blocks(m, s->cfg.device_memory_fraction);
    mem_plan mp;
    if (plan_memory(&s->cfg, draft ? draft->api : NULL, (double)ingot_model_weight_bytes(m), ingot_model_max_tokens(m),
                    device_blocks, &mp) != 0)
        goto out;
    const size_t block_bytes = d->kv_bytes_per_token * INGOT_KV_BLOCK;
    const int kv_blocks = mp.kv_blocks, mbt = mp.batch_tokens;
    const double mib = 1048576.0, budget = s->cfg.memory_budget;
    const double weight_bytes = mp.weights, kv_bytes = mp.kv, scratch_bytes = mp.scratch, total_bytes = mp.total;
    char budget_text[64] = "no budget";
    if (budget > 0) snprintf(budget_text, sizeof budget_text, "budget %.1f MiB", budget / mib);
    if (s->cfg.rate_rpm > 0 || s->cfg.rate_tpm > 0) {
        if (!(s->rl = rl_create(s->cfg.rate_rpm, s->cfg.rate_tpm))) {
            fprintf(stderr, "%s: error: out of memory\n", d->name);
            goto out;
        }
    }

    if (evthread_use_pthreads() != 0) {
        fprintf(stderr, "%s: error: libevent without pthreads support\n", d->name);
        goto out;
    }
    s->base = event_base_new();
    s->http = s->base ? evhttp_new(s->base) : NULL;
    s->met = met_create();
    if (!s->http || !s->met) {
        fprintf(stderr, "%s: error: cannot create the event loop\n", d->name);
        goto out;
    }
    add_metrics(s);
    {
        char ierr[128];
        /* as many requests may be in intake as may be live in the scheduler (running and waiting):
         * a burst that the scheduler would take is never refused while it is being parsed */
        if (!(s->intake = intake_new(s->base, s->cfg.intake_threads, s->cfg.max_running + s->cfg.max_waiting, ierr,
                                     sizeof ierr))) {
            fprintf(stderr, "%s: error: %s\n", d->name, ierr);
            goto out;
        }
    }
    s->wake = event_new(s->base, -1, EV_PERSIST | EV_READ, on_wake, s);
    s->sig_term = evsignal_new(s->base, SIGTERM, on_signal, s);
    s->sig_int = evsignal_new(s->base, SIGINT, on_signal, s);
    if (!s->wake || !s->sig_term || !s->sig_int) goto out;
    event_add(s->sig_term, NULL);
    event_add(s->sig_int, NULL);

    /* the guard frames and limits requests before evhttp sees them and times
     * reads; evhttp gets no timeout of its own, as a long generation is a long
     * write. A reply that makes no progress for an hour is abandoned. */
    const hg_config gc = {.max_body = (size_t)s->cfg.max_body, .read_timeout = s->cfg.read_timeout,
                          .write_timeout = 3600, .max_connections = s->cfg.max_connections,
                          .on_reply = guard_replied, .user = s};
    if (!(s->guard = hg_install(s->http, s->base, &gc))) {
        fprintf(stderr, "%s: error: out of memory\n", d->name);
        goto out;
    }
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(s->http, on_request, s);

    s->listener = evhttp_bind_socket_with_handle(s->http, s->cfg.host, (ev_uint16_t)s->cfg.port);
    if (!s->listener) {
        fprintf(stderr, "%s: error: cannot listen on %s:%d: %s\n", d->name, s->cfg.host, s->cfg.port,
                strerror(errno));
        goto out;
    }
    int port = s->cfg.port;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(evhttp_bound_socket_get_fd(s->listener), (struct sockaddr *)&ss, &sl) == 0)
        port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                              : ((struct sockaddr_in *)&ss)->sin_port);

    sched_config sc = {.n_threads = n_threads, .kv_blocks = kv_blocks, .max_batch_tokens = mbt,
                       .max_running = s->cfg.max_running, .prefix_cache = s->cfg.prefix_cache,
                       .max_waiting = s->cfg.max_waiting, .notify = srv_notify, .notify_user = s,
                       .spec = s->cfg.spec, .spec_k = s->cfg.spec_k, .spec_ngram_min = s->cfg.spec_ngram_min,
                       .spec_ngram_max = s->cfg.spec_ngram_max};
    sc.n_stop_ids = tok_stop_ids(tok, &sc.stop_ids);
    s->stop_ids = sc.stop_ids;
    s->n_stop_ids = sc.n_stop_ids;
    /* structured output's mask walks this trie of every token's bytes; built once */
    if (!(s->vocab = con_vocab_new(tok))) {
        fprintf(stderr, "%s: error: out of memory for the grammar vocabulary\n", d->name);
        goto out;
    }
    if (s->cfg.spec == SCHED_SPEC_DRAFT) {
        if (!draft || !draft->api) {
            fprintf(stderr, "%s: error: --spec draft needs a binary built with a draft model (./ingot build MODEL "
                            "--draft DRAFT)\n", d->name);
            goto out;
        }
        const char *path = draft->weights ? draft->weights : draft->api->desc->source;
        if (!(s->draft_model = draft->api->load(path, 0, draft->load_flags, err, sizeof err))) {
            fprintf(stderr, "%s: error: the draft model: %s\n", d->name, err);
            goto out;
        }
        s->draft_api = draft->api;
        /* the build compared the vocabularies' sizes; the tokenizers, where the draft has one, here */
        tok_tokenizer *dt = tok_from_weights(draft->api->weights(s->draft_model), err, sizeof err);
        if (dt) {
            const int same = tok_same_vocabulary(tok, dt, err, sizeof err);
            tok_free(dt);
            if (same != 0) {
                fprintf(stderr, "%s: error: the draft model's tokenizer is not the model's: %s\n", d->name, err);
                goto out;
            }
        }
        sc.draft = draft->api;
        sc.draft_model = s->draft_model;
    }
    s->sched = sched_create(m, &sc, err, sizeof err);
    if (!s->sched) {
        fprintf(stderr, "%s: error: scheduler: %s\n", d->name, err);
        goto out;
    }
    char rate_text[96] = "none", timeout_text[32] = "none", spec_text[96] = "off";
    if (s->cfg.spec == SCHED_SPEC_NGRAM)
        snprintf(spec_text, sizeof spec_text, "ngram (%d drafted tokens per step, n-grams of %d..%d tokens)",
                 s->cfg.spec_k, s->cfg.spec_ngram_min, s->cfg.spec_ngram_max);
    else if (s->cfg.spec == SCHED_SPEC_DRAFT)
        snprintf(spec_text, sizeof spec_text, "draft model %s (%d drafted tokens per step)", s->draft_api->desc->name,
                 s->cfg.spec_k);
    if (s->rl)
        snprintf(rate_text, sizeof rate_text, "%g requests, %g tokens per minute and key (0: no limit)",
                 s->cfg.rate_rpm, s->cfg.rate_tpm);
    if (s->cfg.request_timeout > 0) snprintf(timeout_text, sizeof timeout_text, "%g s", s->cfg.request_timeout);
    fprintf(stderr,
            "%s serve:\n"
            "  model             %s (%s, context %d, vocab %d)\n"
            "  host, port        %s, %d\n"
            "  api key           %s\n"
            "  kv cache          %d blocks of %d tokens (%d tokens, %.1f MiB)\n"
            "  max batch tokens  %d\n"
            "  max running       %d\n"
            "  max waiting       %d\n"
            "  prefix cache      %s\n"
            "  max body          %ld bytes\n"
            "  read timeout      %g s\n"
            "  max connections   %d\n"
            "  metrics           %s\n"
            "  grace             %g s\n"
            "  threads           %d\n"
            "  chat template     %s\n"
            "  embeddings        %s pooling, L2-normalised\n"
            "  memory            weights %.1f MiB + KV cache %.1f MiB + scratch %.1f MiB = %.1f MiB (%s)\n"
            "  rate limits       %s\n"
            "  request timeout   %s\n"
            "  speculative       %s\n",
            d->name, d->name, d->arch, d->max_ctx, d->vocab, s->cfg.host, port,
            s->cfg.api_key ? "required" : "none", kv_blocks, INGOT_KV_BLOCK, kv_blocks * INGOT_KV_BLOCK,
            (double)block_bytes * kv_blocks / 1048576.0, mbt, s->cfg.max_running, s->cfg.max_waiting,
            s->cfg.prefix_cache ? "on" : "off", s->cfg.max_body, s->cfg.read_timeout, s->cfg.max_connections,
            s->cfg.metrics_auth && s->cfg.api_key ? "api key required" : "open", s->cfg.grace, n_threads,
            chat_source(s->chat), s->cfg.pooling == SCHED_EMBED_MEAN ? "mean" : "last-token", weight_bytes / mib,
            kv_bytes / mib, scratch_bytes / mib, total_bytes / mib, budget_text, rate_text, timeout_text, spec_text);
    if (chat_is_builtin(s->chat))
        fprintf(stderr, "%s: the model has no chat template; chat requests use the built-in ChatML template\n",
                d->name);
    fprintf(stderr, "%s: tool calls: %s format, tools described by the %s\n", d->name,
            tc_format_name(s->tool_format), s->tools_native ? "chat template" : "server (the template has no tools)");
    if (s->cfg.parse_special)
        fprintf(stderr, "%s: --parse-special-in-content: control-token text in contents and prompts becomes "
                        "control tokens\n", d->name);
    if (s->cfg.fault_stalled)
        fprintf(stderr, "%s: INGOT_FAULT_STALLED=1: /health and /ready answer 503 as for a stalled scheduler\n",
                d->name);
    fprintf(stderr, "%s: listening on http://%s:%d\n", d->name, s->cfg.host, port);
    fflush(stderr);

    event_base_dispatch(s->base);

    fprintf(stderr, "%s: shutting down (%d request(s) unfinished)\n", d->name, s->n_reqs);
    rc = 0;
out:
    /* intake first (its last results are discarded, nothing more reaches the scheduler), then
     * the scheduler thread, so notify can no longer touch the loop */
    s->closing = 1;
    intake_free(s->intake);
    if (s->sched) sched_destroy(s->sched);
    if (s->draft_model) s->draft_api->free(s->draft_model);
    while (s->reqs) {
        srv_req *q = s->reqs;
        unwatch(q);
        if (q->conn) evhttp_connection_set_closecb(q->conn, NULL, NULL);
        for (int i = 0; i < q->n_choices; i++) q->choices[i].seq_done = 1;
        q->http = NULL; /* evhttp_free below frees the requests of open connections */
        req_free(s, q);
    }
    if (s->http) evhttp_free(s->http);
    if (s->wake) event_free(s->wake);
    if (s->sig_term) event_free(s->sig_term);
    if (s->sig_int) event_free(s->sig_int);
    if (s->grace_timer) event_free(s->grace_timer);
    if (s->base) event_base_free(s->base);
    hg_free(s->guard); /* connections torn down by the two calls above refer to it */
    rl_free(s->rl);
    met_free(s->met);
    chat_free(s->chat);
    gram_vocab_free(s->vocab);
    free(s);
    libevent_global_shutdown();
    return rc;
}
