/* prepare.c — a generation or embedding request from its body to sequences
 * in the scheduler.
 *
 * The loop copies a generation or embedding request's body into an srv_intake and queues it
 * (intake.h); a worker parses it, renders the template, tokenizes and compiles its grammar
 * (prepare_*); back on the loop, intake_done admits it (rate limit) and submits it (submit_*),
 * or answers its error. A client that hangs up meanwhile only clears in->r (on_intake_close):
 * the worker's result is then freed unseen. From then on the request is requests.c's.
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "constrain.h"
#include "messages_api.h"
#include "responses_api.h"
#include "server_state.h"
#include "tool_grammar.h"
#include "tool_prompt.h"

typedef struct srv_intake {
    intake_job job;                 /* first: the pool hands this back */
    server *s;
    struct evhttp_request *r;       /* loop thread; NULL once the client left */
    struct evhttp_connection *conn; /* its close callback points here while r is set */
    srv_intake_kind what;           /* a generation (or count) through `api`, or embeddings */
    oai_api api;
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

/* The body of a generation or embeddings request, or NULL once the refusal
 * is sent: 503 while draining, 413 past --max-body (the HTTP guard refused
 * such bodies already; this is belt and braces). */
static const char *request_body(server *s, struct evhttp_request *r, size_t *len) {
    if (s->draining) {
        srv_reply_error_msg(s, r, 503, "server_error", "shutting_down", "the server is shutting down");
        return NULL;
    }
    struct evbuffer *in = evhttp_request_get_input_buffer(r);
    *len = evbuffer_get_length(in);
    if (*len > (size_t)s->cfg.max_body) {
        srv_reply_error_msg(s, r, 413, "invalid_request_error", NULL, "request body too large");
        return NULL;
    }
    return *len ? (const char *)evbuffer_pullup(in, (ev_ssize_t)*len) : "";
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

/* ---- generations ------------------------------------------------------------- */

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

/* What a request's "model" names: 0 for the model this server serves, k for its k-th LoRA adapter
 * (--lora NAME=PATH); else -1 with a 404 in e. */
static int check_model(const server *s, const char *model, oai_error *e) {
    const ingot_desc *d = s->api->desc;
    if (strcmp(model, d->name) == 0) return 0;
    const int n = s->api->lora_count(s->model);
    for (int id = 1; id <= n; id++)
        if (!strcmp(model, s->api->lora_name(s->model, id))) return id;
    oai_error_set(e, 404, "invalid_request_error", "model", "model_not_found",
                  "The model '%.100s' does not exist; this server serves '%s'%s", model, d->name,
                  n ? " and its adapters (GET /v1/models lists them)" : "");
    return -1;
}

/* A chat request's prompt: its messages through the chat template (with the
 * tools where the template renders them, else the server's own tool prompt),
 * tokenized. 0, or -1 with e filled (*ids stays NULL). */
static int chat_prompt(server *s, oai_request *q, int32_t **ids, size_t *n_ids, oai_error *e) {
    char err[512];
    int user_error = 0;
    tok_span *plain = NULL;
    size_t n_plain = 0;
    /* tool_choice "none": the tools are neither shown to the model nor parsed */
    const int tools_on = q->tools && q->tool_choice != OAI_TOOLS_NONE;
    if (tools_on && q->tool_choice != OAI_TOOLS_AUTO && constrain_tool_call(s, q, e) != 0) return -1;
    cJSON *own = s->tools_native ? NULL : tp_messages(q->messages, tools_on ? q->tools : NULL);
    if (!s->tools_native && !own) {
        oai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    char *text = chat_render_prompt(s->chat, own ? own : q->messages, s->tools_native && tools_on ? q->tools : NULL,
                                    &plain, &n_plain, &user_error, err, sizeof err);
    cJSON_Delete(own);
    if (!text) {
        oai_error_set(e, user_error ? 400 : 500, user_error ? "invalid_request_error" : "server_error",
                      user_error ? "messages" : NULL, NULL, "chat template: %s", err);
        return -1;
    }
    if (s->tools_native && !s->cfg.parse_special &&
        protect_tool_text(s, text, tools_on ? q->tools : NULL, q->messages, &plain, &n_plain) != 0) {
        free(plain);
        free(text);
        oai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    /* the template writes BOS itself where the model wants one (as HF's
     * apply_chat_template, which tokenizes without adding special tokens).
     * Only the template's markup may yield control tokens: text in a
     * message that spells one stays text (unless --parse-special-in-content). */
    int rc = s->cfg.parse_special
                 ? tok_encode(s->tok, text, strlen(text), 0, 1, ids, n_ids, err, sizeof err)
                 : tok_encode_spans(s->tok, text, strlen(text), 0, plain, n_plain, ids, n_ids, err, sizeof err);
    free(plain);
    free(text);
    if (rc != 0) {
        oai_error_set(e, 400, "invalid_request_error", "messages", NULL, "tokenizer: %s", err);
        return -1;
    }
    return 0;
}

/* A completions request's prompt: its text tokenized, or its token ids taken
 * over. 0, or -1 with e filled (*ids stays NULL). */
static int completion_prompt(server *s, oai_request *q, int32_t **ids, size_t *n_ids, oai_error *e) {
    if (!q->prompt_text) {
        *ids = q->prompt_ids;
        *n_ids = q->n_prompt_ids;
        q->prompt_ids = NULL;
        q->n_prompt_ids = 0;
        return 0;
    }
    char err[512];
    /* a text prompt is the client's text: control-token spellings in it stay text */
    if (tok_encode(s->tok, q->prompt_text, strlen(q->prompt_text), 1, s->cfg.parse_special, ids, n_ids, err,
                   sizeof err) != 0) {
        oai_error_set(e, 400, "invalid_request_error", "prompt", NULL, "tokenizer: %s", err);
        return -1;
    }
    return 0;
}

/* The prompt has tokens and fits the context with max_tokens. 0, or -1 with e filled. */
static int check_prompt_length(const server *s, const oai_request *q, size_t n_ids, oai_error *e) {
    const char *pparam = q->kind == OAI_CHAT ? "messages" : "prompt";
    if (n_ids == 0) {
        oai_error_set(e, 400, "invalid_request_error", pparam, NULL, "the prompt encodes to no tokens");
        return -1;
    }
    const long ctx = s->api->desc->max_ctx;
    if ((long)n_ids < ctx && (q->max_tokens <= 0 || (long)n_ids + q->max_tokens <= ctx)) return 0;
    if (q->max_tokens > 0)
        oai_error_set(e, 400, "invalid_request_error", pparam, "context_length_exceeded",
                      "This model's maximum context length is %ld tokens. However, you requested %ld tokens "
                      "(%zu in the prompt, %d for the completion). Please reduce the prompt or max_tokens.",
                      ctx, (long)n_ids + q->max_tokens, n_ids, q->max_tokens);
    else
        oai_error_set(e, 400, "invalid_request_error", pparam, "context_length_exceeded",
                      "This model's maximum context length is %ld tokens. However, the prompt is %zu tokens.",
                      ctx, n_ids);
    return -1;
}

/* Structured output: one matcher per choice, made before anything is
 * submitted. 0, or -1 with e filled and none left in cons. */
static int make_constraints(server *s, const oai_request *q, sched_constraint **cons, oai_error *e) {
    if (!q->grammar) return 0;
    char err[512];
    for (int i = 0; i < q->n; i++) {
        cons[i] = con_grammar_new(q->grammar, s->vocab, s->stop_ids, s->n_stop_ids, err, sizeof err);
        if (!cons[i]) {
            for (int k = 0; k < i; k++) {
                cons[k]->free(cons[k]);
                cons[k] = NULL;
            }
            oai_error_set(e, 400, "invalid_request_error", q->grammar_param, NULL, "'%s': %s", q->grammar_param,
                          err);
            return -1;
        }
    }
    return 0;
}

/* Intake worker: the request parsed, its prompt tokenized and checked against the context, one
 * grammar matcher per choice; nothing of the loop's touched (the server's tokenizer, template,
 * vocabulary and config are immutable while it serves). 0, or -1 with in->e and all freed. */
static int prepare_generate(server *s, srv_intake *in) {
    oai_error e = {0};
    srv_req *q = calloc(1, sizeof *q);
    if (!q) {
        oai_error_set(&in->e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    const int vocab = tok_vocab_size(s->tok);
    const int count = in->what == SRV_COUNT_TOKENS;
    const int parsed = in->api == OAI_API_MESSAGES    ? msg_parse(in->body, in->len, vocab, count, &q->q, &e)
                       : in->api == OAI_API_RESPONSES ? rsp_parse(in->body, in->len, vocab, s->responses, &q->q, &e)
                       : oai_parse(in->api == OAI_API_CHAT ? OAI_CHAT : OAI_COMPLETION, in->body, in->len, vocab,
                                   &q->q, &e);
    if (parsed != 0) {
        free(q);
        in->e = e;
        return -1;
    }
    /* the prompt's tokens */
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if ((q->adapter = check_model(s, q->q.model, &e)) < 0 ||
        (q->q.kind == OAI_CHAT ? chat_prompt(s, &q->q, &ids, &n_ids, &e)
                              : completion_prompt(s, &q->q, &ids, &n_ids, &e)) != 0)
        goto fail;
    /* a count needs no room to generate and no grammar */
    if (!count && (check_prompt_length(s, &q->q, n_ids, &e) != 0 || make_constraints(s, &q->q, in->cons, &e) != 0)) {
        free(ids);
        goto fail;
    }
    q->n_prompt = (int)n_ids;
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

/* Loop thread, once admitted: q takes the client's request and room for n
 * choices. 0, or -1 out of memory (the reservation given back). */
static int take_request(server *s, srv_intake *in, int n_choices) {
    srv_req *q = in->q;
    q->srv = s;
    q->http = in->r;
    q->t_arrival = in->t0;
    q->n_choices = n_choices;
    q->choices = calloc((size_t)n_choices, sizeof *q->choices);
    if (q->choices) return 0;
    srv_settle_rate(s, q, 1);
    return -1;
}

/* Links q into the server's requests before any of its sequences is
 * submitted: a submit failure cancels what was submitted, and the DONE events
 * of those sequences must find this request. */
static void link_request(server *s, srv_req *q) {
    q->next = s->reqs;
    if (s->reqs) s->reqs->prev = q;
    s->reqs = q;
    s->n_reqs++;
}

/* The stream's headers and its 200, sent before any token. */
static void start_stream(struct evhttp_request *r) {
    struct evkeyvalq *h = evhttp_request_get_output_headers(r);
    evhttp_add_header(h, "Content-Type", "text/event-stream");
    evhttp_add_header(h, "Cache-Control", "no-cache");
    evhttp_send_reply_start(r, 200, "OK");
}

/* Loop thread, after prepare_generate: admission (the rate limit), the request's choices
 * submitted to the scheduler, the reply started. */
static void submit_generate(server *s, srv_intake *in) {
    struct evhttp_request *r = in->r;
    const ingot_desc *d = s->api->desc;
    srv_req *q = in->q;
    sched_constraint **cons = in->cons;
    oai_error e = {0};
    char err[512];
    const int max_tokens = q->q.max_tokens > 0 ? q->q.max_tokens : (int)(d->max_ctx - (long)in->n_ids);
    /* the token limit reserves the prompt and the most every choice may generate */
    if (srv_admit_rate(s, r, q, (double)in->n_ids + (double)max_tokens * q->q.n) != 0) {
        discard_generate(in);
        return;
    }
    if (take_request(s, in, q->q.n) != 0) {
        discard_generate(in);
        srv_reply_error_msg(s, r, 500, "server_error", NULL, "out of memory");
        return;
    }
    static const char *const ID_PREFIX[] = {[OAI_API_CHAT] = "chatcmpl-", [OAI_API_COMPLETIONS] = "cmpl-",
                                            [OAI_API_MESSAGES] = "msg_", [OAI_API_RESPONSES] = "resp_"};
    snprintf(q->id, sizeof q->id, "%s%016llx%08llx", ID_PREFIX[q->q.api], (unsigned long long)srv_splitmix(&s->rng),
             (unsigned long long)++s->next_id);
    q->meta = (oai_meta){.kind = q->q.kind, .id = q->id, .created = (long long)time(NULL),
                         .model = q->adapter ? s->api->lora_name(s->model, q->adapter) : d->name};
    q->out = (out_request){.q = &q->q, .meta = &q->meta, .tok = s->tok, .tool_format = s->tool_format,
                           .tool_marker_id = s->tool_marker_id, .rng = &s->rng, .write = srv_write_event, .user = q,
                           .prompt_tokens = (int)in->n_ids};
    link_request(s, q);
    for (int i = 0; i < q->n_choices; i++) {
        srv_choice *c = &q->choices[i];
        out_choice_init(&q->out, &c->out);
        sched_request sr = {.prompt = in->ids, .n_prompt = in->n_ids, .sampling = q->q.sampling,
                            .max_tokens = max_tokens, .top_logprobs = q->q.logprobs ? q->q.top_logprobs : -1,
                            .ignore_eos = q->q.ignore_eos, .constraint = cons[i], .adapter = q->adapter};
        /* n choices from one seed must differ, yet the same request must repeat */
        sr.sampling.seed =
            q->q.has_seed ? q->q.sampling.seed + (uint64_t)i * 0x9e3779b97f4a7c15ULL : srv_splitmix(&s->rng);
        if (sched_submit(s->sched, &sr, &c->seq_id, err, sizeof err) != 0) {
            submit_error(&e, err);
            for (int k = i + 1; k < q->n_choices; k++) /* cons[i] went with the refused submit */
                if (cons[k]) cons[k]->free(cons[k]);
            free(in->ids);
            srv_refuse_after_submit(s, q, r, &e, i);
            return;
        }
    }
    free(in->ids);
    srv_start_waiting(s, q, r);
    if (q->q.stream) {
        start_stream(r);
        srv_write_event(q, out_stream_start(&q->out, &q->choices[0].out));
    }
}

/* ---- embeddings ------------------------------------------------------------- */

/* POST /v1/embeddings: each input becomes one prefill-only sequence (see
 * sched_task); the reply waits for all of them. Text goes through the
 * tokenizer as a completions prompt does (BOS where the model wants one). */
/* Intake worker: the request parsed and every input tokenized and checked (as
 * prepare_generate). 0, or -1 with in->e and all freed. */
static int prepare_embeddings(server *s, srv_intake *in) {
    const ingot_desc *d = s->api->desc;
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
    if ((q->adapter = check_model(s, er->model, &e)) < 0) goto fail;
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
    if (srv_admit_rate(s, r, q, (double)q->n_prompt) != 0) {
        discard_embeddings(in);
        return;
    }
    if (take_request(s, in, er->n_inputs) != 0) {
        discard_embeddings(in);
        srv_reply_error_msg(s, r, 500, "server_error", NULL, "out of memory");
        return;
    }
    link_request(s, q);
    for (int i = 0; i < q->n_choices; i++) {
        char err[512];
        sched_request sr = {.prompt = er->inputs[i].ids, .n_prompt = er->inputs[i].n_ids,
                            .sampling = samp_default_params(), .top_logprobs = -1, .task = s->cfg.pooling,
                            .adapter = q->adapter};
        if (sched_submit(s->sched, &sr, &q->choices[i].seq_id, err, sizeof err) != 0) {
            submit_error(&e, err);
            if (e.status == 400) snprintf(e.param, sizeof e.param, "input");
            srv_refuse_after_submit(s, q, r, &e, i);
            return;
        }
    }
    /* the ids were copied by sched_submit */
    for (int i = 0; i < er->n_inputs; i++) {
        free(er->inputs[i].ids);
        er->inputs[i].ids = NULL;
    }
    srv_start_waiting(s, q, r);
}

/* ---- the intake job ---------------------------------------------------------- */

static void intake_work(intake_job *job) {
    srv_intake *in = (srv_intake *)job;
    if (in->what == SRV_EMBED ? prepare_embeddings(in->s, in) : prepare_generate(in->s, in)) in->q = NULL;
}

/* /v1/messages/count_tokens: {"input_tokens": N}, the prompt the same body would have. */
static void reply_count(server *s, srv_intake *in) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "input_tokens", (double)in->n_ids);
    srv_reply_json(s, in->r, 200, j);
    discard_generate(in);
}

static void intake_done(intake_job *job) {
    srv_intake *in = (srv_intake *)job;
    server *s = in->s;
    if (in->r && in->conn) evhttp_connection_set_closecb(in->conn, NULL, NULL);
    if (!in->r || s->closing) {
        if (in->q) in->what == SRV_EMBED ? discard_embeddings(in) : discard_generate(in);
    } else if (!in->q) {
        srv_reply_error(s, in->r, &in->e);
    } else if (in->what == SRV_COUNT_TOKENS) {
        reply_count(s, in);
    } else if (in->what == SRV_EMBED) {
        submit_embeddings(s, in);
    } else {
        submit_generate(s, in);
    }
    free(in->body);
    free(in);
    if (!s->closing) srv_check_drained(s);
}

static void on_intake_close(struct evhttp_connection *conn, void *arg) {
    (void)conn;
    srv_intake *in = arg;
    in->r = NULL; /* evhttp frees the request with the connection */
}

/* POST /v1/chat/completions, /v1/completions, /v1/messages, /v1/responses (SRV_GENERATE),
 * /v1/messages/count_tokens (SRV_COUNT_TOKENS) and /v1/embeddings (SRV_EMBED): the body copied
 * and queued for an intake worker. */
void srv_start_intake(server *s, struct evhttp_request *r, srv_intake_kind what, oai_api api) {
    size_t len;
    const char *body = request_body(s, r, &len);
    if (!body) return;
    srv_intake *in = calloc(1, sizeof *in);
    char *copy = malloc(len + 1);
    if (!in || !copy) {
        free(in);
        free(copy);
        srv_reply_error_msg(s, r, 500, "server_error", NULL, "out of memory");
        return;
    }
    memcpy(copy, body, len);
    copy[len] = 0;
    *in = (srv_intake){.job = {.work = intake_work, .done = intake_done}, .s = s, .r = r,
                       .conn = evhttp_request_get_connection(r), .what = what, .api = api,
                       .body = copy, .len = len, .t0 = srv_now()};
    if (intake_submit(s->intake, &in->job) != 0) {
        free(copy);
        free(in);
        evhttp_add_header(evhttp_request_get_output_headers(r), "Retry-After", "1");
        met_inc(s->m_rejected, "queue_full", 1);
        srv_reply_error_msg(s, r, 503, "server_error", "queue_full",
                        "too many requests are being parsed; try again shortly");
        return;
    }
    if (in->conn) evhttp_connection_set_closecb(in->conn, on_intake_close, in);
}
