/* requests.c — a generation or embedding request in flight (srv_req), from
 * the submission of its sequences to their last DONE event: the scheduler's
 * events routed to their requests (srv_on_wake), the state machine of
 * req_state, the end of the reply, a client that hangs up, and the limits
 * that cut a request short (--rate-limit-*, --request-timeout). The bytes of
 * each token and of the reply are output.c's. Event-loop thread only.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "messages_api.h"
#include "responses_api.h"
#include "server_state.h"

/* ---- request bookkeeping --------------------------------------------------- */

static void unwatch(srv_req *q);

static void req_free(server *s, srv_req *q) {
    unwatch(q);
    srv_settle_rate(s, q, 0);
    if (q->deadline) event_free(q->deadline);
    if (q->prev) q->prev->next = q->next;
    else s->reqs = q->next;
    if (q->next) q->next->prev = q->prev;
    s->n_reqs--;
    for (int i = 0; i < q->n_choices; i++) {
        out_choice_free(&q->choices[i].out);
        free(q->choices[i].embedding);
    }
    free(q->choices);
    oai_request_free(&q->q);
    if (q->emb) emb_request_free(q->emb);
    free(q->emb);
    free(q);
    srv_check_drained(s);
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
    srv_check_drained(s);
}

/* One SSE event (sse, kept by the caller) as the next chunk of h's reply. */
static void send_event(struct evhttp_request *h, const char *sse) {
    struct evbuffer *b = evbuffer_new();
    if (b) {
        evbuffer_add(b, sse, strlen(sse));
        evhttp_send_reply_chunk(h, b);
        evbuffer_free(b);
    }
}

void srv_write_event(void *req, char *sse) {
    srv_req *q = req;
    if (sse && q->http) send_event(q->http, sse);
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
    srv_count_status(s, 499);
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

/* ---- the end of a reply ---------------------------------------------------- */

/* An embedding request's reply: every input's vector, or the error. */
static void reply_embeddings(server *s, srv_req *q, struct evhttp_request *h) {
    if (q->failed) {
        srv_reply_error_msg(s, h, 500, "server_error", NULL, q->error);
        return;
    }
    float **vecs = malloc(sizeof(float *) * (size_t)q->n_choices);
    char *body = NULL;
    if (vecs) {
        for (int i = 0; i < q->n_choices; i++) vecs[i] = q->choices[i].embedding;
        body = emb_response_json(q->emb, s->api->desc->name, vecs, s->api->desc->dim, q->n_prompt);
        free(vecs);
    }
    if (body) srv_reply(s, h, 200, "application/json", body, strlen(body));
    else srv_reply_error_msg(s, h, 500, "server_error", NULL, "out of memory");
}

/* How choice 0 ended, for the Messages and Responses APIs (one choice each). */
static out_summary summary_of(const srv_req *q, int completion) {
    const srv_choice *c = &q->choices[0];
    const int by_stop = c->out.stop_index >= 0 && !strcmp(c->finish_reason, "stop");
    return (out_summary){.finish_reason = c->finish_reason,
                         .stop_sequence = by_stop ? q->q.stop[c->out.stop_index] : NULL,
                         .prompt_tokens = q->n_prompt, .completion_tokens = completion};
}

/* A Responses API reply's object: its conversation and itself kept for
 * previous_response_id and GET /v1/responses/{id} (unless "store": false). */
static void remember_response(server *s, srv_req *q, const cJSON *response) {
    if (!s->responses || cJSON_IsFalse(cJSON_GetObjectItem(q->q.api_echo, "store"))) return;
    char *conv = rsp_conversation(&q->q, &q->choices[0].out);
    char *obj = cJSON_PrintUnformatted(response);
    if (conv && obj) rs_put(s->responses, q->id, conv, obj);
    free(conv);
    free(obj);
}

/* The last events of a Messages or Responses stream. */
static char *api_stream_end(server *s, srv_req *q, int completion) {
    const out_summary sum = summary_of(q, completion);
    out_choice *c = &q->choices[0].out;
    if (q->q.api == OAI_API_MESSAGES) return msg_stream_end(&q->out, c, &sum);
    cJSON *resp = rsp_response(&q->out, c, &sum);
    remember_response(s, q, resp);
    char *last = rsp_stream_end(c, resp);
    cJSON_Delete(resp);
    return last;
}

/* The end of a stream: an error event or the usage chunk, then [DONE]; the
 * Messages and Responses APIs end with their own last events. */
static void end_stream(server *s, srv_req *q, struct evhttp_request *h, int completion) {
    const int own = q->q.api == OAI_API_MESSAGES || q->q.api == OAI_API_RESPONSES;
    char *last = NULL;
    if (q->failed) {
        oai_error e;
        oai_error_set(&e, 500, "server_error", NULL, NULL, "%s", q->error);
        last = out_error_event(&q->out, &q->choices[0].out, &e);
    } else if (own) {
        last = api_stream_end(s, q, completion);
    } else if (q->q.include_usage) {
        last = oai_usage_chunk(&q->meta, q->n_prompt, completion);
    }
    if (last) send_event(h, last);
    free(last);
    if (!own) send_event(h, "data: [DONE]\n\n");
    evhttp_send_reply_end(h);
    srv_count_status(s, 200); /* the status its headers carried */
}

/* A Messages or Responses reply that was not streamed. */
static cJSON *api_reply(server *s, srv_req *q, int completion) {
    const out_summary sum = summary_of(q, completion);
    if (q->q.api == OAI_API_MESSAGES) return msg_reply(&q->out, &q->choices[0].out, &sum);
    cJSON *resp = rsp_response(&q->out, &q->choices[0].out, &sum);
    remember_response(s, q, resp);
    return resp;
}

/* A generation's reply that was not streamed: every choice's text, or the error. */
static void reply_generation(server *s, srv_req *q, struct evhttp_request *h, int completion) {
    if (q->failed && q->q.grammar && !strncmp(q->error, "generation failed: the grammar", 30)) {
        /* the request's own grammar could not be followed within its budget: the client's to fix */
        oai_error e;
        oai_error_set(&e, 400, "invalid_request_error", q->q.grammar_param, NULL, "%s", q->error);
        srv_reply_error(s, h, &e);
    } else if (q->failed) {
        srv_reply_error_msg(s, h, 500, "server_error", NULL, q->error);
    } else if (q->q.api == OAI_API_MESSAGES || q->q.api == OAI_API_RESPONSES) {
        srv_reply_json(s, h, 200, api_reply(s, q, completion));
    } else {
        cJSON *resp = oai_response_new(&q->meta);
        for (int i = 0; i < q->n_choices; i++)
            out_response_add(resp, &q->out, &q->choices[i].out, i, q->choices[i].finish_reason);
        oai_set_usage(resp, q->n_prompt, completion);
        srv_reply_json(s, h, 200, resp);
    }
}

/* Every choice is final: send the end of the stream or the whole reply. */
static void finish_request(server *s, srv_req *q) {
    const double t = srv_now();
    srv_settle_rate(s, q, 0); /* before the reply: the client may send its next request at once */
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
        if (q->emb) reply_embeddings(s, q, h);
        else if (q->q.stream) end_stream(s, q, h, completion);
        else reply_generation(s, q, h, completion);
    }
    if (all_seqs_done(q)) req_free(s, q);
    else q->state = REQ_LINGERING;
}

/* ---- the scheduler's events ------------------------------------------------ */

static int all_finished(const srv_req *q) {
    for (int i = 0; i < q->n_choices; i++)
        if (!q->choices[i].finished) return 0;
    return 1;
}

/* Choice i's text is final; its finish_reason goes out with a stream's last chunk. */
static void choice_finish(srv_req *q, int i, const char *reason) {
    srv_choice *c = &q->choices[i];
    c->finished = 1;
    c->finish_reason = out_finish_reason(&c->out, reason);
    if (q->http) out_end_chunk(&q->out, &c->out, i, c->finish_reason);
}

static void on_token(server *s, srv_req *q, int i, const sched_event *ev) {
    srv_choice *c = &q->choices[i];
    if (q->state == REQ_ABANDONED || q->state == REQ_LINGERING || c->finished) return;
    if (q->state == REQ_WAITING) {
        q->state = REQ_GENERATING;
        q->t_first_token = srv_now();
        met_observe(s->m_ttft, q->t_first_token - q->t_arrival);
    }
    c->n_tokens++;
    if (out_token(&q->out, &c->out, i, ev)) {
        /* a stop string (or the one allowed tool call) ended the text: the sequence is not needed any more */
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
        const int stopped = out_flush(&q->out, &c->out, i);
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

static srv_req *find_seq(server *s, uint64_t id, int *choice) {
    for (srv_req *q = s->reqs; q; q = q->next)
        for (int i = 0; i < q->n_choices; i++)
            if (q->choices[i].seq_id == id && !q->choices[i].seq_done) {
                *choice = i;
                return q;
            }
    return NULL;
}

void srv_on_wake(evutil_socket_t fd, short what, void *arg) {
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
int srv_admit_rate(server *s, struct evhttp_request *r, srv_req *q, double tokens) {
    if (!s->rl) return 0;
    char key[sizeof q->rl_key];
    rate_key(s, r, key, sizeof key);
    double retry = 0;
    const rl_verdict v = rl_admit(s->rl, key, tokens, srv_now(), &retry);
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
        srv_reply_error(s, r, &e);
        return -1;
    }
    char ra[32];
    snprintf(ra, sizeof ra, "%.0f", ceil(retry) < 1 ? 1 : ceil(retry));
    evhttp_add_header(evhttp_request_get_output_headers(r), "Retry-After", ra);
    srv_reply_error(s, r, &e);
    return -1;
}

/* Corrects q's reservation to what it used (the prompt and the tokens
 * generated so far); never_ran: it was refused after admission, give all back. */
void srv_settle_rate(server *s, srv_req *q, int never_ran) {
    if (!s->rl || !q->rl_key[0] || q->rl_settled) return;
    q->rl_settled = 1;
    const double used = never_ran ? 0 : (double)q->n_prompt + total_tokens(q);
    rl_settle(s->rl, q->rl_key, q->rl_reserved, used, never_ran, srv_now());
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
    srv_settle_rate(s, q, 0);
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
            char *event = out_error_event(&q->out, &q->choices[0].out, &e);
            if (event) send_event(h, event);
            free(event);
            evhttp_send_reply_end(h);
            if (conn) evhttp_connection_free_on_completion(conn);
            srv_count_status(s, 504);
        } else {
            srv_reply_error(s, h, &e);
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

/* ---- waiting and refusal ------------------------------------------------------ */

/* Every sequence of q is submitted: it waits for its events, under its
 * deadline (--request-timeout), and a client that hangs up cancels it
 * (on_conn_close, and on_peer_readable while the reply is pending). */
void srv_start_waiting(server *s, srv_req *q, struct evhttp_request *r) {
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
void srv_refuse_after_submit(server *s, srv_req *q, struct evhttp_request *r, oai_error *e, int i) {
    for (int k = i; k < q->n_choices; k++) q->choices[k].seq_done = 1;
    for (int k = 0; k < i; k++) sched_cancel(s->sched, q->choices[k].seq_id);
    q->http = NULL;
    q->state = REQ_ABANDONED;
    srv_settle_rate(s, q, 1);
    if (e->status == 503) {
        evhttp_add_header(evhttp_request_get_output_headers(r), "Retry-After", "1");
        met_inc(s->m_rejected, "queue_full", 1);
    }
    srv_reply_error(s, r, e);
    if (all_seqs_done(q)) req_free(s, q);
}

/* ---- shutdown ----------------------------------------------------------------- */

void srv_free_requests(server *s) {
    while (s->reqs) {
        srv_req *q = s->reqs;
        unwatch(q);
        if (q->conn) evhttp_connection_set_closecb(q->conn, NULL, NULL);
        for (int i = 0; i < q->n_choices; i++) q->choices[i].seq_done = 1;
        q->http = NULL; /* evhttp_free (server.c) frees the requests of open connections */
        req_free(s, q);
    }
}
