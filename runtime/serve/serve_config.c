/* serve_config.c — the options of `NAME serve` and the memory plan they give;
 * see serve_config.h. Runs before anything is loaded (server_preflight) and
 * again at the start of server_main.
 */
#include "serve_config.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "byte_count.h"
#include "server.h"

/* ---- values --------------------------------------------------------------- */

/* The served model's name, the prefix of every message below: set by srv_parse_config (which runs
 * before any other thread starts) from the model's descriptor. */
static const char *model_name = "ingot";

static int parse_num(const char *s, const char *what, double lo, double hi, int integer, double *out) {
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi || (integer && v != floor(v))) {
        fprintf(stderr, "%s: error: %s must be %s in [%g, %g], got '%s'\n", model_name, what,
                integer ? "an integer" : "a number", lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* A positive byte count (byte_count.h: 512M, 4GiB, 1.5G). */
static int parse_bytes(const char *v, const char *what, double *out) {
    double x;
    if (byte_count_parse(v, &x) != 0 || x <= 0) {
        fprintf(stderr, "%s: error: %s must be a positive byte count (e.g. 512M, 4G), got '%s'\n",
                model_name, what, v);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_pooling(const char *v, const char *what, sched_task *out) {
    if (!strcmp(v, "last")) *out = SCHED_EMBED_LAST;
    else if (!strcmp(v, "mean")) *out = SCHED_EMBED_MEAN;
    else {
        fprintf(stderr, "%s: error: %s must be last or mean, got '%s'\n", model_name, what, v);
        return -1;
    }
    return 0;
}

static int parse_spec(const char *v, const char *what, sched_spec_mode *out) {
    if (sched_spec_parse(v, out) == 0) return 0;
    fprintf(stderr, "%s: error: %s must be off, ngram or draft, got '%s'\n", model_name, what, v);
    return -1;
}

/* ---- the options ------------------------------------------------------------ */

/* The numeric options, read as numbers and stored once all are read (as
 * --kv-blocks and --kv-memory undo each other, the last one wins). */
typedef struct {
    double port, kv_blocks, kv_mem, mbt, running, waiting, body, grace, dev_frac, read_timeout, max_conns, rpm, tpm,
        req_timeout, spec_k, ngram_min, ngram_max, intake_threads, rs_entries, rs_mib;
} srv_numbers;

/* One option: its flag, its environment variable, and where it goes. */
typedef struct {
    const char *flag, *env;
    double lo, hi;
    int integer;
    size_t at; /* offset of its value in srv_numbers */
} srv_numopt;

static const srv_numopt NUMERIC_OPTIONS[] = {
    {"--device-memory-fraction", "INGOT_DEVICE_MEMORY_FRACTION", 0.01, 1.0, 0, offsetof(srv_numbers, dev_frac)},
    {"--port", "INGOT_PORT", 0, 65535, 1, offsetof(srv_numbers, port)},
    {"--kv-blocks", "INGOT_KV_BLOCKS", 1, 1 << 24, 1, offsetof(srv_numbers, kv_blocks)},
    {"--kv-memory", "INGOT_KV_MEMORY", 1, 1 << 24, 0, offsetof(srv_numbers, kv_mem)},
    {"--max-batch-tokens", "INGOT_MAX_BATCH_TOKENS", 1, 1 << 20, 1, offsetof(srv_numbers, mbt)},
    {"--max-running", "INGOT_MAX_RUNNING", 1, 4096, 1, offsetof(srv_numbers, running)},
    {"--max-waiting", "INGOT_MAX_WAITING", 1, 1 << 20, 1, offsetof(srv_numbers, waiting)},
    {"--intake-threads", "INGOT_INTAKE_THREADS", 1, 64, 1, offsetof(srv_numbers, intake_threads)},
    {"--max-body", "INGOT_MAX_BODY", 1024, 1 << 30, 1, offsetof(srv_numbers, body)},
    {"--grace", "INGOT_GRACE", 0, 86400, 0, offsetof(srv_numbers, grace)},
    {"--read-timeout", "INGOT_READ_TIMEOUT", 0.05, 86400, 0, offsetof(srv_numbers, read_timeout)},
    {"--max-connections", "INGOT_MAX_CONNECTIONS", 1, 1 << 20, 1, offsetof(srv_numbers, max_conns)},
    {"--rate-limit-rpm", "INGOT_RATE_LIMIT_RPM", 0, 1e9, 0, offsetof(srv_numbers, rpm)},
    {"--rate-limit-tpm", "INGOT_RATE_LIMIT_TPM", 0, 1e12, 0, offsetof(srv_numbers, tpm)},
    {"--request-timeout", "INGOT_REQUEST_TIMEOUT", 0, 7 * 86400, 0, offsetof(srv_numbers, req_timeout)},
    {"--spec-k", "INGOT_SPEC_K", 1, 32, 1, offsetof(srv_numbers, spec_k)},
    {"--spec-ngram-min", "INGOT_SPEC_NGRAM_MIN", 1, 64, 1, offsetof(srv_numbers, ngram_min)},
    {"--spec-ngram-max", "INGOT_SPEC_NGRAM_MAX", 1, 64, 1, offsetof(srv_numbers, ngram_max)},
    {"--responses-store", "INGOT_RESPONSES_STORE", 0, 1 << 20, 1, offsetof(srv_numbers, rs_entries)},
    {"--responses-store-memory", "INGOT_RESPONSES_STORE_MEMORY", 1, 1 << 20, 0, offsetof(srv_numbers, rs_mib)},
};
#define N_NUMERIC_OPTIONS ((int)(sizeof NUMERIC_OPTIONS / sizeof NUMERIC_OPTIONS[0]))

/* Parses v as numeric option o into n. */
static int read_number(srv_numbers *n, const srv_numopt *o, const char *v, const char *what) {
    return parse_num(v, what, o->lo, o->hi, o->integer, (double *)((char *)n + o->at));
}

/* The defaults and the environment (INGOT_*). 0, or -1 with the reason printed. */
static int read_environment(srv_config *c, srv_numbers *n) {
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    c->api_key = NULL;
    c->prefix_cache = 1;
    c->web_page = 1;
    const char *v;
    if ((v = getenv("INGOT_HOST")) && *v) snprintf(c->host, sizeof c->host, "%s", v);
    if ((v = getenv("INGOT_API_KEY")) && *v) c->api_key = v;
    if ((v = getenv("INGOT_PREFIX_CACHE")) && !strcmp(v, "0")) c->prefix_cache = 0;
    if ((v = getenv("INGOT_WEB_PAGE")) && !strcmp(v, "0")) c->web_page = 0;
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
    for (int k = 0; k < N_NUMERIC_OPTIONS; k++) {
        const srv_numopt *o = &NUMERIC_OPTIONS[k];
        if ((v = getenv(o->env)) && *v && read_number(n, o, v, o->env) != 0) return -1;
    }
    return 0;
}

/* An option without a value: 1 when a was one. */
static int read_switch(srv_config *c, const char *a) {
    if (!strcmp(a, "--no-prefix-cache")) c->prefix_cache = 0;
    else if (!strcmp(a, "--metrics-auth")) c->metrics_auth = 1;
    else if (!strcmp(a, "--parse-special-in-content")) c->parse_special = 1;
    else if (!strcmp(a, "--print-memory")) c->print_memory = 1;
    else if (!strcmp(a, "--no-web-page")) c->web_page = 0;
    else return 0;
    return 1;
}

/* An option whose value is not a number: 1 when a took val, 0 when a is
 * not one (or has no value), -1 after printing why val is bad. */
static int read_word_option(srv_config *c, const char *a, const char *val) {
    if (!val) return 0;
    if (!strcmp(a, "--host")) snprintf(c->host, sizeof c->host, "%s", val);
    else if (!strcmp(a, "--api-key")) c->api_key = *val ? val : NULL;
    else if (!strcmp(a, "--memory-budget")) return parse_bytes(val, a, &c->memory_budget) != 0 ? -1 : 1;
    else if (!strcmp(a, "--spec")) return parse_spec(val, a, &c->spec) != 0 ? -1 : 1;
    else if (!strcmp(a, "--pooling")) return parse_pooling(val, a, &c->pooling) != 0 ? -1 : 1;
    else return 0;
    return 1;
}

/* A numeric option a and its value. 0, or -1 with the reason printed (an
 * unknown option or a missing value too). */
static int read_numeric_option(srv_config *c, srv_numbers *n, const char *a, const char *val) {
    int k = 0;
    for (; k < N_NUMERIC_OPTIONS; k++)
        if (!strcmp(a, NUMERIC_OPTIONS[k].flag)) break;
    if (k == N_NUMERIC_OPTIONS || !val) {
        fprintf(stderr, "%s: error: serve: unknown option or missing value '%s'\n%s", model_name, a,
                SRV_USAGE);
        return -1;
    }
    if (!strcmp(a, "--kv-blocks") || !strcmp(a, "--kv-memory")) c->kv_explicit = 1;
    if (!strcmp(a, "--kv-blocks")) n->kv_mem = 0; /* the last of the two wins */
    if (!strcmp(a, "--kv-memory")) n->kv_blocks = 0;
    return read_number(n, &NUMERIC_OPTIONS[k], val, a);
}

/* The command line, after the environment: it wins. */
static int read_arguments(srv_config *c, srv_numbers *n, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (read_switch(c, a)) continue;
        const int word = read_word_option(c, a, val);
        if (word < 0 || (word == 0 && read_numeric_option(c, n, a, val) != 0)) return -1;
        i++; /* the value */
    }
    return 0;
}

static int store_numbers(srv_config *c, const srv_numbers *n) {
    c->port = (int)n->port;
    c->kv_blocks = (int)n->kv_blocks;
    c->kv_memory_mib = n->kv_mem;
    c->device_memory_fraction = n->dev_frac;
    c->max_batch_tokens = (int)n->mbt;
    c->max_running = (int)n->running;
    c->max_waiting = (int)n->waiting;
    c->intake_threads = (int)n->intake_threads;
    c->max_body = (long)n->body;
    c->grace = n->grace;
    c->read_timeout = n->read_timeout;
    c->max_connections = (int)n->max_conns;
    c->rate_rpm = n->rpm;
    c->rate_tpm = n->tpm;
    c->request_timeout = n->req_timeout;
    c->spec_k = (int)n->spec_k;
    c->spec_ngram_min = (int)n->ngram_min;
    c->spec_ngram_max = (int)n->ngram_max;
    c->responses_store = (int)n->rs_entries;
    c->responses_store_mib = n->rs_mib;
    if (c->spec_ngram_min > c->spec_ngram_max) {
        fprintf(stderr, "%s: error: --spec-ngram-min (%d) is above --spec-ngram-max (%d)\n", model_name,
                c->spec_ngram_min, c->spec_ngram_max);
        return -1;
    }
    return 0;
}

int srv_parse_config(srv_config *c, const ingot_model_api *model, int argc, char **argv) {
    c->model = model;
    model_name = model->desc->name;
    srv_numbers n = {.port = 8080, .running = 32, .waiting = 1024, .body = 4 << 20, .grace = 30, .dev_frac = 0.90,
                     .read_timeout = 30, .max_conns = 512, .spec_k = 4, .ngram_min = 1, .ngram_max = 3,
                     .intake_threads = 2, .rs_entries = 256, .rs_mib = 64};
    if (read_environment(c, &n) != 0 || read_arguments(c, &n, argc, argv) != 0) return -1;
    return store_numbers(c, &n);
}

/* ---- the memory plan --------------------------------------------------------- */

int srv_plan_memory(const srv_config *c, const ingot_model_api *draft, double weight_bytes, int model_max,
                    int device_blocks, srv_mem_plan *p) {
    const ingot_desc *d = c->model->desc;
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
    const double scratch_bytes = (double)c->model->scratch_bytes(NULL) + (double)sched_scratch_bytes(d, &limits, model_max) +
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

int server_preflight(const ingot_model_api *api, const srv_draft *draft, int argc, char **argv) {
    srv_config c;
    memset(&c, 0, sizeof c);
    if (srv_parse_config(&c, api, argc, argv) != 0) return 2;
    if (c.memory_budget <= 0 && !c.print_memory) return 0;
    /* the device's free memory is not known before the model is loaded: only the budget's own limit here */
    srv_mem_plan p;
    if (srv_plan_memory(&c, draft ? draft->api : NULL, (double)api->weights_planned_bytes(),
                        api->max_tokens(NULL), 0, &p) != 0)
        return 1;
    if (!c.print_memory) return 0;
    /* what a supervisor (ingot-router) adds up against its own budget before starting this process */
    printf("{\"model\": \"%s\", \"weights_bytes\": %.0f, \"kv_bytes\": %.0f, \"kv_blocks\": %d, "
           "\"scratch_bytes\": %.0f, \"total_bytes\": %.0f}\n", api->desc->name, p.weights, p.kv,
           p.kv_blocks, p.scratch, p.total);
    fflush(stdout);
    return -1;
}
