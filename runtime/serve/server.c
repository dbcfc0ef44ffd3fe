/* server.c — lifecycle of `NAME serve`: startup, the signals that drain it,
 * shutdown. The request path through the server's files:
 *
 * 0. The HTTP guard (http_guard.c) beneath evhttp checks each request's
 *    head and body, answers what is malformed, too large or too slow with a
 *    JSON error, and passes evhttp only complete, well-formed requests.
 * 1. HTTP thread (libevent evhttp): srv_on_request (routes.c) checks the
 *    route and the API key; a generation's or embedding's body is copied and
 *    queued for an intake worker (prepare.c, intake.c), which parses and
 *    validates it (openai.c), applies the chat template (chat.c), tokenizes
 *    and compiles its grammar; back on the HTTP thread, intake_done charges
 *    the rate limit and sched_submits one sequence per choice. Nothing here
 *    waits on the model or does a request's CPU work: a request that cannot
 *    be answered at once is parked as an srv_req (server_state.h).
 * 2. Scheduler thread (scheduler.c): batches, runs the forward, samples,
 *    queues events, and calls notify.
 * 3. notify (on the scheduler thread) only makes the `wake` event active; the
 *    event loop then drains sched_poll on the HTTP thread (srv_on_wake,
 *    requests.c), and output.c turns each token into text: it detokenizes
 *    incrementally (tok_stream: only complete UTF-8 leaves), holds back text
 *    that may be the start of a stop string (never emitting a stop string),
 *    splits out tool calls, and writes SSE chunks or, at the end, one JSON
 *    reply (openai_response.c, reply.c). A client that disconnects (the
 *    connection's close callback) has its sequences cancelled with
 *    sched_cancel; the scheduler frees their blocks next step.
 *
 * Everything in the server's files runs on the event-loop thread except
 * srv_notify and the prepare_* functions (intake workers, which read only the
 * immutable tokenizer, template, vocabulary and config and write only their
 * own srv_intake), so the request list, the metrics and every srv_req need no
 * lock.
 *
 * Shutdown: SIGTERM/SIGINT closes the listener, answers new requests on open
 * connections with 503, lets in-flight requests finish for --grace seconds,
 * then stops the scheduler (cancelling what is left) and exits 0.
 */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/thread.h>
#include <event2/util.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "constrain.h"
#include "server_state.h"

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

uint64_t srv_splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The HTTP guard answered a request itself (malformed, over a limit, too slow). */
static void guard_replied(int status, void *user) { srv_count_status(user, status); }

/* Scheduler thread: only wake the loop (event_active is thread-safe once
 * evthread_use_pthreads() ran before the base was created). */
static void srv_notify(void *user) {
    server *s = user;
    event_active(s->wake, EV_READ, 0);
}

/* ---- lifecycle ------------------------------------------------------------- */

void srv_check_drained(server *s) {
    if (s->draining && s->n_reqs == 0 && intake_pending(s->intake) == 0 && s->unflushed <= 0)
        event_base_loopexit(s->base, NULL);
}

static void on_grace_over(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    server *s = arg;
    fprintf(stderr, "%s: grace period over with %d request(s) in flight; cancelling them\n",
            s->api->desc->name, s->n_reqs);
    event_base_loopexit(s->base, NULL);
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    (void)what;
    server *s = arg;
    if (s->draining) {
        fprintf(stderr, "%s: second signal; exiting now\n", s->api->desc->name);
        event_base_loopexit(s->base, NULL);
        return;
    }
    s->draining = 1;
    fprintf(stderr, "%s: %s received; no new connections, %d request(s) in flight, grace %.0f s\n",
            s->api->desc->name, sig == SIGTERM ? "SIGTERM" : "SIGINT", s->n_reqs, s->cfg.grace);
    if (s->listener) {
        evhttp_del_accept_socket(s->http, s->listener);
        s->listener = NULL;
    }
    struct timeval tv = {(time_t)s->cfg.grace, (suseconds_t)((s->cfg.grace - floor(s->cfg.grace)) * 1e6)};
    s->grace_timer = evtimer_new(s->base, on_grace_over, s);
    if (s->grace_timer) evtimer_add(s->grace_timer, &tv);
    srv_check_drained(s);
}

/* ---- metrics ------------------------------------------------------------------ */

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

/* ---- startup, step by step -------------------------------------------------- */

/* The model's chat template, and the tool-call format it implies. */
static int load_template(server *s) {
    char err[1024];
    s->chat = chat_load(s->api->weights(s->model), s->tok, err, sizeof err);
    if (!s->chat) {
        fprintf(stderr, "%s: error: %s\n", s->api->desc->name, err);
        return -1;
    }
    s->tool_format = tc_detect(chat_text(s->chat), &s->tools_native);
    s->tool_marker_id = tok_find(s->tok, tc_open_marker(s->tool_format));
    if (s->tool_marker_id >= 0 && !tok_is_special(s->tok, s->tool_marker_id)) s->tool_marker_id = -1;
    return 0;
}

/* The event loop and what lives on it: metrics, the intake workers, the
 * scheduler's wake-up, the signals that start a drain. */
static int create_loop(server *s) {
    const char *name = s->api->desc->name;
    if (s->cfg.rate_rpm > 0 || s->cfg.rate_tpm > 0) {
        if (!(s->rl = rl_create(s->cfg.rate_rpm, s->cfg.rate_tpm))) {
            fprintf(stderr, "%s: error: out of memory\n", name);
            return -1;
        }
    }
    if (s->cfg.responses_store > 0 &&
        !(s->responses = rs_new(s->cfg.responses_store, (size_t)(s->cfg.responses_store_mib * 1048576.0)))) {
        fprintf(stderr, "%s: error: out of memory\n", name);
        return -1;
    }
    if (evthread_use_pthreads() != 0) {
        fprintf(stderr, "%s: error: libevent without pthreads support\n", name);
        return -1;
    }
    s->base = event_base_new();
    s->http = s->base ? evhttp_new(s->base) : NULL;
    s->met = met_create();
    if (!s->http || !s->met) {
        fprintf(stderr, "%s: error: cannot create the event loop\n", name);
        return -1;
    }
    add_metrics(s);
    char ierr[128];
    /* as many requests may be in intake as may be live in the scheduler (running and waiting):
     * a burst that the scheduler would take is never refused while it is being parsed */
    if (!(s->intake = intake_new(s->base, s->cfg.intake_threads, s->cfg.max_running + s->cfg.max_waiting, ierr,
                                 sizeof ierr))) {
        fprintf(stderr, "%s: error: %s\n", name, ierr);
        return -1;
    }
    s->wake = event_new(s->base, -1, EV_PERSIST | EV_READ, srv_on_wake, s);
    s->sig_term = evsignal_new(s->base, SIGTERM, on_signal, s);
    s->sig_int = evsignal_new(s->base, SIGINT, on_signal, s);
    if (!s->wake || !s->sig_term || !s->sig_int) return -1;
    event_add(s->sig_term, NULL);
    event_add(s->sig_int, NULL);
    return 0;
}

/* The HTTP guard and evhttp on the listening socket; *port: the port bound
 * (--port 0 binds a free one). */
static int listen_http(server *s, int *port) {
    const char *name = s->api->desc->name;
    /* the guard frames and limits requests before evhttp sees them and times
     * reads; evhttp gets no timeout of its own, as a long generation is a long
     * write. A reply that makes no progress for an hour is abandoned. */
    const hg_config gc = {.max_body = (size_t)s->cfg.max_body, .read_timeout = s->cfg.read_timeout,
                          .write_timeout = 3600, .max_connections = s->cfg.max_connections,
                          .on_reply = guard_replied, .user = s};
    if (!(s->guard = hg_install(s->http, s->base, &gc))) {
        fprintf(stderr, "%s: error: out of memory\n", name);
        return -1;
    }
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(s->http, srv_on_request, s);

    s->listener = evhttp_bind_socket_with_handle(s->http, s->cfg.host, (ev_uint16_t)s->cfg.port);
    if (!s->listener) {
        fprintf(stderr, "%s: error: cannot listen on %s:%d: %s\n", name, s->cfg.host, s->cfg.port, strerror(errno));
        return -1;
    }
    *port = s->cfg.port;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(evhttp_bound_socket_get_fd(s->listener), (struct sockaddr *)&ss, &sl) == 0)
        *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

/* --spec draft: the draft model loaded and checked against the model's
 * tokenizer, and handed to the scheduler's config. */
static int load_draft(server *s, const srv_draft *draft, sched_config *sc) {
    const char *name = s->api->desc->name;
    char err[1024];
    if (!draft || !draft->api) {
        fprintf(stderr, "%s: error: --spec draft needs a binary built with a draft model (./ingot build MODEL "
                        "--draft DRAFT)\n", name);
        return -1;
    }
    const char *path = draft->weights ? draft->weights : draft->api->desc->source;
    if (!(s->draft_model = draft->api->load(path, 0, draft->load_flags, err, sizeof err))) {
        fprintf(stderr, "%s: error: the draft model: %s\n", name, err);
        return -1;
    }
    s->draft_api = draft->api;
    /* the build compared the vocabularies' sizes; the tokenizers, where the draft has one, here */
    tok_tokenizer *dt = tok_from_weights(draft->api->weights(s->draft_model), err, sizeof err);
    if (dt) {
        const int same = tok_same_vocabulary(s->tok, dt, err, sizeof err);
        tok_free(dt);
        if (same != 0) {
            fprintf(stderr, "%s: error: the draft model's tokenizer is not the model's: %s\n", name, err);
            return -1;
        }
    }
    sc->draft = draft->api;
    sc->draft_model = s->draft_model;
    return 0;
}

/* The scheduler's thread over the planned KV pool, and the grammar vocabulary it masks with. */
static int start_scheduler(server *s, const srv_draft *draft, const srv_mem_plan *mp) {
    const char *name = s->api->desc->name;
    const char *no_prefix_cache = sched_prefix_cache_refusal(s->api->desc);
    if (s->cfg.prefix_cache && no_prefix_cache) {
        s->cfg.prefix_cache = 0;
        fprintf(stderr, "%s: prefix cache off: %s\n", name, no_prefix_cache);
    }
    sched_config sc = {.n_threads = s->n_threads, .kv_blocks = mp->kv_blocks, .max_batch_tokens = mp->batch_tokens,
                       .max_running = s->cfg.max_running, .prefix_cache = s->cfg.prefix_cache,
                       .max_waiting = s->cfg.max_waiting, .notify = srv_notify, .notify_user = s,
                       .spec = s->cfg.spec, .spec_k = s->cfg.spec_k, .spec_ngram_min = s->cfg.spec_ngram_min,
                       .spec_ngram_max = s->cfg.spec_ngram_max};
    sc.n_stop_ids = tok_stop_ids(s->tok, &sc.stop_ids);
    s->stop_ids = sc.stop_ids;
    s->n_stop_ids = sc.n_stop_ids;
    /* structured output's mask walks this trie of every token's bytes; built once */
    if (!(s->vocab = con_vocab_new(s->tok))) {
        fprintf(stderr, "%s: error: out of memory for the grammar vocabulary\n", name);
        return -1;
    }
    if (s->cfg.spec == SCHED_SPEC_DRAFT && load_draft(s, draft, &sc) != 0) return -1;
    char err[1024];
    s->sched = sched_create(s->api, s->model, &sc, err, sizeof err);
    if (!s->sched) {
        fprintf(stderr, "%s: error: scheduler: %s\n", name, err);
        return -1;
    }
    return 0;
}

/* What the server runs with, on stderr once it listens. */
static void print_banner(server *s, const srv_mem_plan *mp, int port) {
    const ingot_desc *d = s->api->desc;
    const size_t block_bytes = d->kv_bytes_per_token * INGOT_KV_BLOCK;
    const int kv_blocks = mp->kv_blocks, mbt = mp->batch_tokens;
    const double mib = 1048576.0, budget = s->cfg.memory_budget;
    char budget_text[64] = "no budget";
    if (budget > 0) snprintf(budget_text, sizeof budget_text, "budget %.1f MiB", budget / mib);
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
            s->cfg.metrics_auth && s->cfg.api_key ? "api key required" : "open", s->cfg.grace, s->n_threads,
            chat_source(s->chat), s->cfg.pooling == SCHED_EMBED_MEAN ? "mean" : "last-token", mp->weights / mib,
            mp->kv / mib, mp->scratch / mib, mp->total / mib, budget_text, rate_text, timeout_text, spec_text);
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
}

/* The KV pool and the memory the server will hold, from what was loaded. */
static int plan_memory(server *s, const srv_draft *draft, srv_mem_plan *mp) {
    /* a device backend sizes its KV pool by its free memory, unless told */
    const int device_blocks = s->cfg.kv_blocks || s->cfg.kv_memory_mib > 0
                                  ? 0 : s->api->kv_fit_blocks(s->model, s->cfg.device_memory_fraction);
    return srv_plan_memory(&s->cfg, draft ? draft->api : NULL, (double)s->api->weight_bytes(s->model),
                           s->api->max_tokens(s->model), device_blocks, mp);
}

/* Everything server_main made, whether it started or not. */
static void server_free(server *s) {
    /* intake first (its last results are discarded, nothing more reaches the scheduler), then
     * the scheduler thread, so notify can no longer touch the loop */
    s->closing = 1;
    intake_free(s->intake);
    if (s->sched) sched_destroy(s->sched);
    if (s->draft_model) s->draft_api->free(s->draft_model);
    srv_free_requests(s);
    if (s->http) evhttp_free(s->http);
    if (s->wake) event_free(s->wake);
    if (s->sig_term) event_free(s->sig_term);
    if (s->sig_int) event_free(s->sig_int);
    if (s->grace_timer) event_free(s->grace_timer);
    if (s->base) event_base_free(s->base);
    hg_free(s->guard); /* connections torn down by the two calls above refer to it */
    rl_free(s->rl);
    rs_free(s->responses);
    met_free(s->met);
    chat_free(s->chat);
    gram_vocab_free(s->vocab);
    free(s);
    libevent_global_shutdown();
}

int server_main(const ingot_model_api *api, ingot_model *m, tok_tokenizer *tok, int n_threads, const srv_draft *draft,
                int argc, char **argv) {
    server *s = calloc(1, sizeof *s);
    if (!s) return 1;
    if (srv_parse_config(&s->cfg, api, argc, argv) != 0) {
        free(s);
        return 2;
    }
    s->api = api;
    s->model = m;
    s->tok = tok;
    s->n_threads = n_threads;
    s->t_start = srv_now();
    s->created = (long long)time(NULL);
    s->rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(srv_now() * 1e9);
    /* a client that vanishes mid-write must not kill the process */
    signal(SIGPIPE, SIG_IGN);

    int rc = 1, port = 0;
    srv_mem_plan mp;
    if (load_template(s) == 0 && plan_memory(s, draft, &mp) == 0 && create_loop(s) == 0 && listen_http(s, &port) == 0 &&
        start_scheduler(s, draft, &mp) == 0) {
        print_banner(s, &mp, port);
        event_base_dispatch(s->base);
        fprintf(stderr, "%s: shutting down (%d request(s) unfinished)\n", s->api->desc->name, s->n_reqs);
        rc = 0;
    }
    server_free(s);
    return rc;
}
