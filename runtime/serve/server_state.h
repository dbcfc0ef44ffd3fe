/* server_state.h — the state of `NAME serve` that its files share: a
 * request's state machine (srv_req), the server (struct server), and the
 * functions one server file calls in another. Internal to runtime/serve's
 * server files (server.c, routes.c, prepare.c, requests.c, reply.c);
 * everything else uses server.h.
 *
 * Threads: everything here belongs to the event-loop thread, except what
 * the intake workers read while they prepare a request (the tokenizer,
 * template, vocabulary and config, immutable while the server runs).
 */
#ifndef INGOT_SERVER_STATE_H
#define INGOT_SERVER_STATE_H

#include <event2/event.h>
#include <event2/http.h>
#include <stdint.h>

#include "chat.h"
#include "embeddings.h"
#include "grammar.h"
#include "http_guard.h"
#include "intake.h"
#include "metrics.h"
#include "openai.h"
#include "output.h"
#include "rate_limit.h"
#include "response_store.h"
#include "scheduler.h"
#include "serve_config.h"
#include "server.h"
#include "tokenizer.h"
#include "tool_calls.h"

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
    out_choice out;          /* its text so far, and what of it went out (output.h) */
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
    out_request out;                  /* a generation: how its choices' text is written */
    int n_prompt;
    int adapter;                      /* the LoRA adapter its "model" named (0: the model itself) */
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

/* ---- the server ------------------------------------------------------------- */

struct server {
    srv_config cfg;
    const ingot_model_api *api;       /* the generated model served (main.c hands it over) */
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
    rs_store *responses;    /* past /v1/responses (NULL: --responses-store 0) */
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

/* ---- server.c: lifecycle ------------------------------------------------------ */

double srv_now(void);                 /* monotonic seconds */
uint64_t srv_splitmix(uint64_t *state); /* the next splitmix64 number of state (s->rng) */
/* While draining: ends the loop once nothing is in flight or unwritten. */
void srv_check_drained(server *s);

/* ---- reply.c: complete replies ------------------------------------------------- */

void srv_count_status(server *s, int code);
/* Sends a complete reply with body (taken over, may be NULL), uncounted. A
 * HEAD request gets the same headers, Content-Length included, and no body
 * (evhttp would write one). */
void srv_send_body(struct evhttp_request *r, int code, const char *content_type, char *body, size_t len);
/* Sends a complete reply with body (taken over, may be NULL) and counts it. */
void srv_reply(server *s, struct evhttp_request *r, int code, const char *content_type, char *body, size_t len);
void srv_reply_json(server *s, struct evhttp_request *r, int code, cJSON *j); /* j taken over */
void srv_reply_error(server *s, struct evhttp_request *r, const oai_error *e);
void srv_reply_error_msg(server *s, struct evhttp_request *r, int status, const char *type, const char *code,
                         const char *msg);

/* ---- routes.c: what each path does --------------------------------------------- */

/* evhttp's callback for every request the guard passed. */
void srv_on_request(struct evhttp_request *r, void *arg);

/* ---- prepare.c: a generation or embedding request, from body to sequences ---- */

/* What an intake worker makes of a body. */
typedef enum {
    SRV_GENERATE,     /* a generation through its API */
    SRV_EMBED,        /* /v1/embeddings */
    SRV_COUNT_TOKENS, /* /v1/messages/count_tokens: the prompt's length, nothing generated */
} srv_intake_kind;

/* A generation's, embedding's or count's body copied and queued for an intake worker. */
void srv_start_intake(server *s, struct evhttp_request *r, srv_intake_kind what, oai_api api);

/* ---- requests.c: a request in flight ------------------------------------------- */

/* The wake event: drains the scheduler's events into their requests. */
void srv_on_wake(evutil_socket_t fd, short what, void *arg);
/* out_request's write: one SSE event (taken over) to q's client, dropped
 * once it is gone. */
void srv_write_event(void *q, char *sse);
/* Charges q's rate-limit key one request and `tokens` reserved tokens; on
 * refusal answers r (429 or 413) and returns -1 (q is the caller's to free). */
int srv_admit_rate(server *s, struct evhttp_request *r, srv_req *q, double tokens);
/* Corrects q's reservation to what it used; never_ran: give all back. */
void srv_settle_rate(server *s, srv_req *q, int never_ran);
/* Every sequence of q is submitted: it waits for its events. */
void srv_start_waiting(server *s, srv_req *q, struct evhttp_request *r);
/* sched_submit refused choice i of q: q is abandoned and e answered. */
void srv_refuse_after_submit(server *s, srv_req *q, struct evhttp_request *r, oai_error *e, int i);
/* Shutdown, after the scheduler stopped: every request freed unanswered
 * (evhttp_free frees the requests of open connections). */
void srv_free_requests(server *s);

#endif
