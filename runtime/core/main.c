/* main.c — the command line of every generated model binary.
 *
 *   NAME --info                               the descriptor: architecture, dims, dtypes, memory, kernels
 *   NAME generate -p TEXT [-n 64] [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S]
 *   NAME logits --tokens 1,2,3 [--chunk N | --decode] [--out FILE]
 *   NAME perplexity -f FILE [--ctx 512] [--argmax-out FILE]
 *   NAME tokenize -p TEXT
 * Common options: --weights PATH (default: the checkpoint it was built from),
 * --tokenizer PATH (tokenizer.json; default: the GGUF's own, or tokenizer.json
 * beside the safetensors), --threads N (default 2), --mmap (read the weights
 * in place from the file mapping instead of copying them into huge pages), --no-cast (convert
 * the checkpoint at load even where the build cast its weights), --lora [NAME=]PATH (a LoRA
 * adapter: requests of serve and batch choose it by NAME as their "model"; the other commands run
 * with the first one given), --lora-merge PATH (an adapter folded into the weights at load).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

#include <cjson/cJSON.h>

#ifndef INGOT_ISA
#define INGOT_ISA "native" /* build/flags.mk sets it: the x86-64 level the binary was compiled for */
#endif

#include "chat_cli.h"
#include "hugealloc.h"
#include "model_api.h"
#include "sampler.h"
#include "scheduler.h"
#include "server.h"
#include "threadpool.h"
#include "tokenizer.h"

typedef struct {
    const char *weights;
    const char *tokenizer;
    int threads;
    int mmap;       /* --mmap: INGOT_LOAD_MMAP */
    int no_cast;    /* --no-cast: INGOT_LOAD_NO_CAST */
    const char *draft_weights; /* --draft-weights: the draft model's (default: the checkpoint it was built from) */
#define CLI_MAX_LORA 64
    const char *lora[CLI_MAX_LORA]; /* --lora [NAME=]PATH, in order: adapter ids 1, 2, ... */
    int n_lora;
    const char *lora_merge; /* --lora-merge PATH */
    const ingot_model_api *model; /* the generated model the commands drive */
    const ingot_model_api *draft; /* the draft model of speculative decoding, in a binary built with
                                     --draft (build/model.mk links it); NULL otherwise */
} cli_common;

/* The model's name, for messages (die, usage): set by main from the model's descriptor. */
static const char *program_name = "ingot";

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *msg) {
    fprintf(stderr, "%s: error: %s\n", program_name, msg);
    exit(1);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: %s [--weights PATH] [--tokenizer PATH] [--threads N] [--mmap] [--no-cast]\n"
            "       [--lora [NAME=]PATH]... [--lora-merge PATH] COMMAND [options]\n"
            "  --lora [NAME=]PATH              a LoRA adapter (a PEFT folder, or llama.cpp's GGUF for a GGUF build),\n"
            "                                  up to 64: serve and batch requests choose one by NAME as their\n"
            "                                  \"model\" (default NAME: the file or folder's name); the other\n"
            "                                  commands run with the first\n"
            "  --lora-merge PATH               fold an adapter into the weights at load (the base model's speed)\n"
            "  --mmap                          read the weights in place from the file (less memory when\n"
            "                                  processes share it; decode is faster from huge pages, the default)\n"
            "  --no-cast                       convert the checkpoint at load even where the build cast its\n"
            "                                  weights (NAME.weights beside the binary, used when it matches)\n"
            "  --info                          print the model descriptor\n"
            "  generate -p TEXT [-n 64] [--temp 0] [--top-k 0] [--top-p 1] [--min-p 0] [--seed S]\n"
            "           [--repeat-penalty 1] [--ignore-eos] [--ids-out FILE]\n"
            "           [--spec off|ngram|draft] [--spec-k 4] [--spec-ngram-min 1] [--spec-ngram-max 3]\n"
            "           (speculative decoding through the scheduler, the same output: ngram drafts by prompt\n"
            "           lookup, draft by the draft model of a binary built with --draft; --draft-weights PATH)\n"
            "  logits --tokens 1,2,3 [--chunk N | --decode] [--out FILE] [--routing-out FILE]\n"
            "  perplexity (-f TEXT_FILE | --ids IDS_FILE) [--ctx 512] [--argmax-out FILE] [--tokens-out FILE]\n"
            "  chat [--system TEXT] [-n MAX_TOKENS] [--ctx 8192] [--temp 0] [--top-k 0] [--top-p 1] [--min-p 0]\n"
            "       [--seed S] [--repeat-penalty 1]  (a conversation in the terminal: /help inside)\n"
            "  tokenize -p TEXT\n"
            "  batch -f REQUESTS.jsonl [--kv-blocks N] [--max-batch-tokens N] [--max-running N] [--no-prefix-cache]\n"
            "        [--spec off|ngram|draft] [--spec-k 4] [--spec-ngram-min 1] [--spec-ngram-max 3]\n"
            "  cast-weights                    write NAME.weights beside the binary (./ingot build does)\n" SRV_USAGE,
            program_name);
}

static long parse_long(const char *s, const char *what, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s must be an integer in [%ld, %ld], got '%s'", what, lo, hi, s);
        die(msg);
    }
    return v;
}

static float parse_float(const char *s, const char *what) {
    char *end;
    float v = strtof(s, &end);
    if (*end || end == s || v != v) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s must be a number, got '%s'", what, s);
        die(msg);
    }
    return v;
}

/* ---- a single sequence over a private KV pool ------------------------- */

typedef struct {
    const ingot_model_api *api;
    ingot_model *model;
    tp_pool *pool;
    ingot_kv kv;
    int32_t *block_table;
    int capacity; /* tokens the pool holds */
    int len;      /* tokens already in the KV cache */
    float *logits;
    int32_t adapter; /* the LoRA adapter it runs with: the first --lora, else 0 (none) */
} cli_seq;

static void seq_init(cli_seq *s, const ingot_model_api *api, ingot_model *m, tp_pool *pool, int capacity) {
    memset(s, 0, sizeof *s);
    s->api = api;
    s->model = m;
    s->pool = pool;
    if (capacity > api->desc->max_ctx) capacity = api->desc->max_ctx;
    s->capacity = capacity;
    const int blocks = (capacity + INGOT_KV_BLOCK - 1) / INGOT_KV_BLOCK;
    char err[512];
    if (api->kv_alloc(m, &s->kv, blocks, err, sizeof err) != 0 || api->state_alloc(m, &s->kv, 1, err, sizeof err) != 0)
        die(err);
    s->block_table = malloc(sizeof(int32_t) * (size_t)blocks);
    s->logits = malloc(sizeof(float) * (size_t)api->desc->vocab * (size_t)api->max_tokens(m));
    if (!s->kv.data || !s->block_table || !s->logits) die("out of memory for the KV cache");
    for (int i = 0; i < blocks; i++) s->block_table[i] = i;
    s->adapter = api->lora_count(m) > 0;
}

static void seq_free(cli_seq *s) {
    s->api->kv_release(s->model, &s->kv);
    free(s->block_table);
    free(s->logits);
}

/* Feeds n tokens in one step; writes logits for the last `want` of them
 * (want = n for teacher forcing, 1 for generation). */
static void seq_step(cli_seq *s, const int32_t *tokens, int n, int want) {
    if (s->len + n > s->capacity) die("sequence longer than the context");
    int32_t pos[n], seqi[n], rows[n];
    for (int i = 0; i < n; i++) {
        pos[i] = s->len + i;
        seqi[i] = 0;
        rows[i] = n - want + i;
    }
    const int32_t seq_len = s->len + n;
    const int32_t *tables[1] = {s->block_table};
    const int32_t state_slot = 0;
    ingot_batch b = {.n_tokens = n, .tokens = tokens, .pos = pos, .seq = seqi, .n_seqs = 1,
                     .block_tables = tables, .seq_len = &seq_len, .state_slots = &state_slot, .n_logits = want,
                     .logit_rows = rows, .logits = s->logits, .adapters = &s->adapter};
    char err[512];
    if (s->api->forward(s->model, &s->kv, &b, s->pool, err, sizeof err) != 0) die(err);
    s->len += n;
}

/* ---- loading ----------------------------------------------------------- */

static unsigned load_flags(const cli_common *c) {
    return (c->mmap ? INGOT_LOAD_MMAP : 0) | (c->no_cast ? INGOT_LOAD_NO_CAST : 0);
}

/* A --lora argument's name: NAME of NAME=PATH, else the file or folder's own name. */
static void lora_name(const char *spec, char *name, size_t cap, const char **path) {
    const char *eq = strchr(spec, '=');
    if (eq) {
        snprintf(name, cap, "%.*s", (int)(eq - spec), spec);
        *path = eq + 1;
    } else {
        size_t len = strlen(spec);
        while (len > 1 && spec[len - 1] == '/') len--;
        size_t start = len;
        while (start > 0 && spec[start - 1] != '/') start--;
        snprintf(name, cap, "%.*s", (int)(len - start), spec + start);
        *path = spec;
    }
}

/* Requests name an adapter as their "model": a name as unambiguous as the model's own. */
static void check_lora_name(const ingot_model_api *api, const ingot_model *m, const char *name, size_t len) {
    char msg[256];
    int ok = len >= 1 && len <= 63;
    for (size_t k = 0; ok && k < len; k++)
        ok = (name[k] >= 'a' && name[k] <= 'z') || (name[k] >= 'A' && name[k] <= 'Z') || (name[k] >= '0' && name[k] <= '9') ||
             strchr("._-:", name[k]) != NULL;
    if (!ok) {
        snprintf(msg, sizeof msg, "--lora: the name '%.80s' is not 1 to 63 letters, digits and ._-: (NAME=PATH names it)", name);
        die(msg);
    }
    int taken = !strcmp(name, api->desc->name);
    for (int id = 1; id <= api->lora_count(m); id++) taken |= !strcmp(name, api->lora_name(m, id));
    if (taken) {
        snprintf(msg, sizeof msg, "--lora: the name '%s' is already the model's or another adapter's", name);
        die(msg);
    }
}

static ingot_model *load_model(const cli_common *c) {
    const ingot_model_api *api = c->model;
    char err[1024];
    const char *path = c->weights ? c->weights : api->desc->source;
    /* 0: the most tokens per step this build was planned for; every command
     * chunks longer inputs to api->max_tokens() */
    ingot_model *m = api->load_merged(path, c->lora_merge, 0, load_flags(c), err, sizeof err);
    if (!m) die(err);
    for (int i = 0; i < c->n_lora; i++) {
        char name[128];
        const char *lora_path;
        lora_name(c->lora[i], name, sizeof name, &lora_path);
        check_lora_name(api, m, name, strlen(name));
        if (api->add_lora(m, name, lora_path, err, sizeof err) < 0) die(err);
    }
    return m;
}

/* The model's tokenizer; NULL with err filled when it has none. */
static tok_tokenizer *try_load_tokenizer(const cli_common *c, ingot_model *m, char *err, size_t errlen) {
    const ingot_model_api *api = c->model;
    tok_tokenizer *t = NULL;
    if (c->tokenizer) {
        t = tok_from_json_file(c->tokenizer, err, errlen);
    } else {
        t = tok_from_weights(api->weights(m), err, errlen);
    }
    return t;
}

static tok_tokenizer *load_tokenizer(const cli_common *c, ingot_model *m) {
    char err[1024];
    tok_tokenizer *t = try_load_tokenizer(c, m, err, sizeof err);
    if (!t) die(err);
    return t;
}

/* ---- commands ---------------------------------------------------------- */

static int cmd_info(const cli_common *c, int load) {
    const ingot_model_api *api = c->model;
    const ingot_desc *d = api->desc;
    printf("name:            %s\n", d->name);
    printf("architecture:    %s (models.lua entry), %s weights, backend %s, %s\n", d->arch,
           d->source_format, d->backend, d->fused ? "fused" : "unfused (--no-fuse)");
    printf("source:          %s\n", d->source);
    printf("dims:            dim %d, layers %d, heads %d, kv heads %d, head dim %d, ffn %d\n", d->dim,
           d->n_layers, d->n_heads, d->n_kv_heads, d->head_dim, d->ffn_dim);
    printf("vocab, context:  %d, %d\n", d->vocab, d->max_ctx);
    printf("rope theta, eps: %g, %g\n", d->rope_theta, d->norm_eps);
    printf("weight dtypes:   %s\n", d->weight_dtypes);
    if (strcmp(d->backend, "cpu") == 0) {
        /* the x86-64 level this binary's kernels were compiled for (build/flags.mk ISA) */
        const char *choice = getenv("INGOT_ISA_CHOICE"); /* set by the launcher of an --isa all build */
        printf("isa:             %s%s%s%s\n", INGOT_ISA, strcmp(INGOT_ISA, "native") == 0 ? " (-march=native: this machine's)" : "",
               choice ? ", " : "", choice ? choice : "");
    }
    if (c->draft) {
        const ingot_desc *dd = c->draft->desc;
        printf("draft model:     %s (%s, dim %d, layers %d, vocab %d, context %d, %s) from %s: --spec draft\n",
               dd->name, dd->arch, dd->dim, dd->n_layers, dd->vocab, dd->max_ctx, dd->weight_dtypes, dd->source);
    } else {
        printf("draft model:     none (--spec ngram needs none; --spec draft needs ./ingot build --draft)\n");
    }
    printf("KV cache:        %zu bytes/token (%s), %.1f MiB for the full context of one sequence\n",
           d->kv_bytes_per_token, d->kv_dtype, (double)d->kv_bytes_per_token * d->max_ctx / (1 << 20));
    printf("KV per layer:    %s\n", d->kv_layout);
    if (d->state_bytes_per_seq > 0)
        printf("recurrent state: %zu bytes per sequence (%s), held in a slot per running sequence; no prefix "
               "cache, no speculative decoding\n", d->state_bytes_per_seq, d->state_layout);
    printf("scratch arena:   %zu bytes/token of a step\n", d->arena_bytes_per_token);
    printf("kernels:         %d launches per %s, %d distinct\n", d->kernels_per_step,
           strcmp(d->backend, "cpu") ? "decode step" : "step (decode or prefill)", d->n_kernel_kinds);
    if (d->info) printf("%s", d->info);
    printf("generator:       %s\n", d->generator);
    if (load) {
        ingot_model *m = load_model(c);
        const long long huge = ha_process_huge_bytes();
        printf("weights:         %.1f MiB in memory (%s)", (double)api->weight_bytes(m) / (1 << 20),
               api->weight_origin(m));
        if (huge >= 0) printf("; %.1f MiB of the process on huge pages", (double)huge / (1 << 20));
        printf("\n");
        if (*api->merged_lora(m)) printf("merged adapter:  %s\n", api->merged_lora(m));
        for (int id = 1; id <= api->lora_count(m); id++)
            printf("adapter %d:       %s = %s: %s\n", id, api->lora_name(m, id), api->lora_path(m, id),
                   api->lora_summary(m, id));
        if (api->lora_count(m) == 0 && !strcmp(d->backend, "cpu"))
            printf("adapters:        none (--lora [NAME=]PATH, chosen per request; --lora-merge PATH)\n");
        char err[512];
        tok_tokenizer *tok = try_load_tokenizer(c, m, err, sizeof err);
        if (tok) {
            const int32_t *ids;
            const int n = tok_stop_ids(tok, &ids);
            printf("stop tokens:     ");
            for (int i = 0; i < n; i++) {
                size_t len;
                const char *piece = tok_piece(tok, ids[i], &len);
                printf("%s%d %.*s", i ? ", " : "", ids[i], piece ? (int)len : 0, piece ? piece : "");
            }
            printf("%s\n", n ? "" : "none");
            tok_free(tok);
        } else {
            printf("stop tokens:     none (no tokenizer: %s)\n", err);
        }
        api->free(m);
    }
    return 0;
}

static int32_t *parse_token_list(const char *s, int *n) {
    int cap = 16, count = 0;
    int32_t *ids = malloc(sizeof(int32_t) * cap);
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) die("--tokens takes comma-separated token ids");
        if (count == cap) ids = realloc(ids, sizeof(int32_t) * (cap *= 2));
        ids[count++] = (int32_t)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) die("--tokens takes comma-separated token ids");
    }
    *n = count;
    return ids;
}

static FILE *routing_out;
static void write_routing(int layer, int pos, int top_k, const int32_t *experts) {
    fprintf(routing_out, "{\"layer\": %d, \"pos\": %d, \"experts\": [", layer, pos);
    for (int k = 0; k < top_k; k++) fprintf(routing_out, "%s%d", k ? ", " : "", experts[k]);
    fprintf(routing_out, "]}\n");
}

/* Teacher-forced logits for every position, written as raw f32 [n][vocab];
 * --routing-out writes a mixture-of-experts model's routing decisions. */
static int cmd_logits(const cli_common *c, int argc, char **argv) {
    const ingot_model_api *api = c->model;
    const char *tokens_arg = NULL, *out_path = NULL;
    int chunk = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens_arg = argv[++i];
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = (int)parse_long(argv[++i], "--chunk", 1, 1 << 20);
        else if (!strcmp(argv[i], "--decode")) chunk = 1;
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(argv[i], "--routing-out") && i + 1 < argc) {
            routing_out = fopen(argv[++i], "w");
            if (!routing_out) die("cannot open --routing-out file");
            *api->moe_observer = write_routing;
        }
        else die("logits: unknown option (see --help)");
    }
    if (!tokens_arg) die("logits needs --tokens");
    int n;
    int32_t *ids = parse_token_list(tokens_arg, &n);
    ingot_model *m = load_model(c);
    tp_pool *pool = tp_create(c->threads);
    cli_seq s;
    seq_init(&s, api, m, pool, n);
    const int max = api->max_tokens(m);
    if (chunk <= 0 || chunk > max) chunk = max;
    FILE *out = out_path ? fopen(out_path, "wb") : stdout;
    if (!out) die("cannot open --out file");
    for (int i = 0; i < n; i += chunk) {
        const int k = n - i < chunk ? n - i : chunk;
        seq_step(&s, ids + i, k, k);
        fwrite(s.logits, sizeof(float), (size_t)k * api->desc->vocab, out);
    }
    if (out != stdout) fclose(out);
    if (routing_out) fclose(routing_out);
    seq_free(&s);
    tp_free(pool);
    api->free(m);
    free(ids);
    return 0;
}

static char *read_whole_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

/* Perplexity over non-overlapping windows of --ctx tokens, each evaluated from
 * an empty cache; the partial tail window is dropped. */
static int cmd_perplexity(const cli_common *c, int argc, char **argv) {
    const ingot_model_api *api = c->model;
    const char *file = NULL, *argmax_out = NULL, *tokens_out = NULL, *ids_file = NULL;
    int ctx = 512;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-f") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) ctx = (int)parse_long(argv[++i], "--ctx", 2, 1 << 20);
        else if (!strcmp(argv[i], "--argmax-out") && i + 1 < argc) argmax_out = argv[++i];
        else if (!strcmp(argv[i], "--tokens-out") && i + 1 < argc) tokens_out = argv[++i];
        else if (!strcmp(argv[i], "--ids") && i + 1 < argc) ids_file = argv[++i];
        else die("perplexity: unknown option (see --help)");
    }
    if (!file == !ids_file) die("perplexity needs -f TEXT_FILE or --ids IDS_FILE");
    if (ctx > api->desc->max_ctx) die("--ctx exceeds the model's context");
    size_t len;
    char *text = read_whole_file(file ? file : ids_file, &len);
    if (!text) die("cannot read the input file");
    ingot_model *m = load_model(c);
    tok_tokenizer *tok = NULL;
    int32_t *ids;
    size_t n;
    char err[512];
    if (ids_file) {
        /* token ids given directly (any separators: a JSON array works) */
        int count;
        for (char *p = text; *p; p++)
            if (*p != '-' && (*p < '0' || *p > '9')) *p = ',';
        char *start = text;
        while (*start == ',') start++;
        for (char *p = start + strlen(start); p > start && p[-1] == ','; p--) p[-1] = 0;
        for (char *p = start; *p; p++) /* collapse separator runs */
            if (*p == ',' && p[1] == ',') { memmove(p, p + 1, strlen(p)); p--; }
        ids = parse_token_list(start, &count);
        n = (size_t)count;
    } else {
        tok = load_tokenizer(c, m);
        if (tok_encode(tok, text, len, 0, 0, &ids, &n, err, sizeof err) != 0) die(err);
    }
    if (tokens_out) {
        FILE *f = fopen(tokens_out, "wb");
        if (!f) die("cannot open --tokens-out");
        fwrite(ids, sizeof(int32_t), n, f);
        fclose(f);
    }
    const int windows = (int)(n / (size_t)ctx);
    if (windows == 0) die("text shorter than one window");
    tp_pool *pool = tp_create(c->threads);
    FILE *am = argmax_out ? fopen(argmax_out, "wb") : NULL;
    double nll = 0.0;
    long count = 0;
    const int max = api->max_tokens(m);
    const int progress = isatty(STDERR_FILENO);
    const double t0 = now_seconds();
    for (int w = 0; w < windows; w++) {
        cli_seq s;
        seq_init(&s, api, m, pool, ctx);
        const int32_t *win = ids + (size_t)w * ctx;
        for (int i = 0; i < ctx; i += max) {
            const int k = ctx - i < max ? ctx - i : max;
            seq_step(&s, win + i, k, k);
            for (int j = 0; j < k; j++) {
                const int p = i + j; /* logits at p predict token p+1 */
                if (p + 1 >= ctx) break;
                const float *lg = s.logits + (size_t)j * api->desc->vocab;
                nll -= samp_logprob(lg, api->desc->vocab, win[p + 1]);
                count++;
                if (am) {
                    int32_t a = samp_argmax(lg, api->desc->vocab);
                    fwrite(&a, sizeof a, 1, am);
                }
            }
        }
        seq_free(&s);
        if (progress) /* a terminal sees where a long file is; a pipe or a log gets only the result */
            fprintf(stderr, "\rperplexity: window %d/%d, running perplexity %.4f ", w + 1, windows,
                    exp(nll / (count ? count : 1)));
    }
    if (progress) fprintf(stderr, "\n");
    const double dt = now_seconds() - t0;
    if (am) fclose(am);
    printf("tokens %zu windows %d ctx %d predicted %ld mean_nll %.6f perplexity %.4f\n", n, windows, ctx,
           count, nll / count, exp(nll / count));
    fprintf(stderr, "%.1f tokens/s\n", windows * (double)ctx / dt);
    tp_free(pool);
    if (tok) tok_free(tok);
    api->free(m);
    free(ids);
    free(text);
    return 0;
}

/* --spec off|ngram, --spec-k N, --spec-ngram-min N, --spec-ngram-max N at
 * argv[*i] into cfg (generate, batch); 1 when it was one of them. */
static int parse_spec_option(int argc, char **argv, int *i, sched_config *cfg) {
    const char *a = argv[*i];
    if (*i + 1 >= argc) return 0;
    const char *v = argv[*i + 1];
    if (!strcmp(a, "--spec")) {
        if (sched_spec_parse(v, &cfg->spec) != 0) die("--spec is off, ngram or draft");
    } else if (!strcmp(a, "--spec-k")) cfg->spec_k = (int)parse_long(v, "--spec-k", 1, 32);
    else if (!strcmp(a, "--spec-ngram-min")) cfg->spec_ngram_min = (int)parse_long(v, "--spec-ngram-min", 1, 64);
    else if (!strcmp(a, "--spec-ngram-max")) cfg->spec_ngram_max = (int)parse_long(v, "--spec-ngram-max", 1, 64);
    else return 0;
    (*i)++;
    return 1;
}

/* 1 (err filled) when the draft's checkpoint has a tokenizer that numbers
 * tokens otherwise than the model's (the build compared only the sizes);
 * 0 when they agree or either has none to compare. */
static int draft_vocabulary_differs(const tok_tokenizer *tok, const ingot_model_api *api, ingot_model *dm,
                                    char *err, size_t errlen) {
    char why[512];
    tok_tokenizer *dt = tok ? tok_from_weights(api->weights(dm), why, sizeof why) : NULL;
    if (!dt) return 0;
    const int rc = tok_same_vocabulary(tok, dt, why, sizeof why);
    tok_free(dt);
    if (rc == 0) return 0;
    snprintf(err, errlen, "the draft model's tokenizer is not the model's: %s", why);
    return 1;
}

/* --spec draft: loads the draft model into cfg (freed by the caller with
 * cfg->draft->free after the scheduler). */
static void attach_draft(const cli_common *c, sched_config *cfg, const tok_tokenizer *tok) {
    if (cfg->spec != SCHED_SPEC_DRAFT) return;
    if (!c->draft) die("--spec draft needs a binary built with a draft model (./ingot build MODEL --draft DRAFT)");
    char err[1024];
    const char *path = c->draft_weights ? c->draft_weights : c->draft->desc->source;
    cfg->draft = c->draft;
    cfg->draft_model = c->draft->load(path, 0, load_flags(c), err, sizeof err);
    if (!cfg->draft_model) die(err);
    if (draft_vocabulary_differs(tok, c->draft, cfg->draft_model, err, sizeof err)) die(err);
}

static void detach_draft(sched_config *cfg) {
    if (cfg->draft_model) cfg->draft->free(cfg->draft_model);
    cfg->draft_model = NULL;
}

static int cmd_tokenize(const cli_common *c, int argc, char **argv) {
    const ingot_model_api *api = c->model;
    const char *prompt = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-p") && i + 1 < argc) prompt = argv[++i];
        else die("tokenize: unknown option");
    }
    if (!prompt) die("tokenize needs -p TEXT");
    ingot_model *m = load_model(c);
    tok_tokenizer *tok = load_tokenizer(c, m);
    int32_t *ids;
    size_t n;
    char err[512];
    if (tok_encode(tok, prompt, strlen(prompt), 1, 1, &ids, &n, err, sizeof err) != 0) die(err);
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
    free(ids);
    tok_free(tok);
    api->free(m);
    return 0;
}

/* generate --spec ngram: the one request goes through the scheduler, which
 * owns speculative decoding; streams the text as tokens arrive. */
static int generate_scheduled(const cli_common *c, ingot_model *m, tok_tokenizer *tok, sched_config *cfg,
                              const int32_t *prompt_ids, size_t n_prompt, int n_predict, const samp_params *sp,
                              int ignore_eos) {
    const ingot_model_api *api = c->model;
    char err[512];
    cfg->n_threads = c->threads;
    cfg->kv_blocks = (int)((n_prompt + (size_t)n_predict) / INGOT_KV_BLOCK + 1);
    cfg->max_running = 1;
    cfg->prefix_cache = 0;
    cfg->n_stop_ids = tok_stop_ids(tok, &cfg->stop_ids);
    attach_draft(c, cfg, tok);
    sched *s = sched_create(api, m, cfg, err, sizeof err);
    if (!s) die(err);
    sched_request r = {.prompt = prompt_ids, .n_prompt = n_prompt, .sampling = *sp, .max_tokens = n_predict,
                       .top_logprobs = -1, .ignore_eos = ignore_eos, .adapter = api->lora_count(m) > 0};
    uint64_t id;
    const double t0 = now_seconds();
    if (sched_submit(s, &r, &id, err, sizeof err) != 0) die(err);
    tok_stream ts;
    tok_stream_init(&ts);
    char out[256];
    int generated = 0, done = 0;
    double t_first = 0;
    sched_event evs[64];
    while (!done) {
        const size_t n = sched_poll(s, evs, 64);
        if (n == 0) {
            struct timespec pause = {0, 100000};
            nanosleep(&pause, NULL);
            continue;
        }
        for (size_t k = 0; k < n; k++) {
            if (evs[k].kind == SCHED_EV_DONE) {
                if (evs[k].finish == SCHED_FINISH_ERROR) die(evs[k].error);
                done = 1;
                continue;
            }
            if (generated++ == 0) t_first = now_seconds();
            const size_t w = tok_stream_push(&ts, tok, evs[k].token, 1, out, sizeof out);
            fwrite(out, 1, w, stdout);
            fflush(stdout);
        }
    }
    const size_t w = tok_stream_flush(&ts, out, sizeof out);
    fwrite(out, 1, w, stdout);
    printf("\n");
    const double t2 = now_seconds();
    if (generated == 0) t_first = t2; /* a stop id first: nothing was decoded */
    sched_stats st;
    sched_get_stats(s, &st);
    fprintf(stderr, "prefill: %zu tokens in %.3f s (%.1f tokens/s)\n", n_prompt, t_first - t0,
            n_prompt / (t_first - t0));
    fprintf(stderr, "decode:  %d tokens in %.3f s (%.1f tokens/s)\n", generated, t2 - t_first,
            generated > 1 ? (generated - 1) / (t2 - t_first) : 0.0);
    fprintf(stderr, "spec:    %s, %llu drafted tokens, %llu accepted (%.1f%%), %llu steps\n",
            sched_spec_name(cfg->spec), (unsigned long long)st.spec_proposed_tokens,
            (unsigned long long)st.spec_accepted_tokens,
            st.spec_proposed_tokens ? 100.0 * (double)st.spec_accepted_tokens / (double)st.spec_proposed_tokens : 0.0,
            (unsigned long long)st.steps);
    sched_destroy(s);
    detach_draft(cfg);
    return 0;
}

static int cmd_generate(const cli_common *c, int argc, char **argv) {
    const ingot_model_api *api = c->model;
    const char *prompt = NULL, *ids_out = NULL;
    int n_predict = 64, ignore_eos = 0;
    samp_params sp = samp_default_params();
    sched_config spec = {.spec = SCHED_SPEC_OFF};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-p") && v) prompt = argv[++i];
        else if (!strcmp(a, "-n") && v) n_predict = (int)parse_long(argv[++i], "-n", 0, 1 << 20);
        else if (!strcmp(a, "--temp") && v) sp.temperature = parse_float(argv[++i], "--temp");
        else if (!strcmp(a, "--top-k") && v) sp.top_k = (int)parse_long(argv[++i], "--top-k", 0, 1 << 30);
        else if (!strcmp(a, "--top-p") && v) sp.top_p = parse_float(argv[++i], "--top-p");
        else if (!strcmp(a, "--min-p") && v) sp.min_p = parse_float(argv[++i], "--min-p");
        else if (!strcmp(a, "--repeat-penalty") && v) sp.repetition_penalty = parse_float(argv[++i], "--repeat-penalty");
        else if (!strcmp(a, "--seed") && v) sp.seed = (uint64_t)parse_long(argv[++i], "--seed", 0, INT64_MAX);
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = 1;
        else if (!strcmp(a, "--ids-out") && v) ids_out = argv[++i];
        else if (parse_spec_option(argc, argv, &i, &spec)) continue;
        else die("generate: unknown option (see --help)");
    }
    if (!prompt) die("generate needs -p TEXT");
    if (sp.temperature < 0 || sp.top_p <= 0 || sp.top_p > 1 || sp.min_p < 0 || sp.min_p > 1)
        die("sampling parameters out of range");
    ingot_model *m = load_model(c);
    tok_tokenizer *tok = load_tokenizer(c, m);
    int32_t *prompt_ids;
    size_t n_prompt;
    char err[512];
    if (tok_encode(tok, prompt, strlen(prompt), 1, 1, &prompt_ids, &n_prompt, err, sizeof err) != 0) die(err);
    if (n_prompt == 0) die("the prompt encodes to no tokens");
    const int total = (int)n_prompt + n_predict;
    if (total > api->desc->max_ctx) die("prompt plus -n exceeds the model's context");
    if (spec.spec != SCHED_SPEC_OFF) {
        if (ids_out) die("--ids-out needs --spec off");
        if (n_predict < 1) die("--spec needs -n of at least 1");
        generate_scheduled(c, m, tok, &spec, prompt_ids, n_prompt, n_predict, &sp, ignore_eos);
        tok_free(tok);
        api->free(m);
        free(prompt_ids);
        return 0;
    }
    tp_pool *pool = tp_create(c->threads);
    cli_seq s;
    seq_init(&s, api, m, pool, total);
    samp_sampler smp;
    if (samp_init(&smp, api->desc->vocab, &sp) != 0) die("out of memory");
    int32_t *history = malloc(sizeof(int32_t) * (size_t)total);
    memcpy(history, prompt_ids, sizeof(int32_t) * n_prompt);
    int n_hist = (int)n_prompt;

    const int max = api->max_tokens(m);
    const double t0 = now_seconds();
    for (size_t i = 0; i < n_prompt; i += (size_t)max) {
        const int k = (int)(n_prompt - i < (size_t)max ? n_prompt - i : (size_t)max);
        seq_step(&s, prompt_ids + i, k, 1);
    }
    const double t1 = now_seconds();
    tok_stream ts;
    tok_stream_init(&ts);
    char out[256];
    int generated = 0;
    /* --ids-out: one JSON line per generated token with the two best raw
     * logits, for comparisons with other engines (near-ties). */
    FILE *ids_file = ids_out ? fopen(ids_out, "w") : NULL;
    if (ids_out && !ids_file) die("cannot open --ids-out file");
    for (; generated < n_predict; generated++) {
        if (ids_file) {
            const int V = api->desc->vocab;
            int a = samp_argmax(s.logits, V), b2 = a == 0 ? 1 : 0;
            for (int j = 0; j < V; j++)
                if (j != a && s.logits[j] > s.logits[b2]) b2 = j;
            fprintf(ids_file, "{\"top2_ids\": [%d, %d], \"top2_logits\": [%.6f, %.6f]", a, b2, s.logits[a], s.logits[b2]);
        }
        int next = samp_sample(&smp, s.logits, history, (size_t)n_hist);
        history[n_hist++] = next;
        if (ids_file) fprintf(ids_file, ", \"id\": %d}\n", next);
        if (!ignore_eos && tok_is_stop(tok, next)) {
            generated++;
            break;
        }
        size_t w = tok_stream_push(&ts, tok, next, 1, out, sizeof out);
        fwrite(out, 1, w, stdout);
        fflush(stdout);
        if (generated + 1 < n_predict) seq_step(&s, &history[n_hist - 1], 1, 1);
    }
    size_t w = tok_stream_flush(&ts, out, sizeof out);
    fwrite(out, 1, w, stdout);
    printf("\n");
    if (ids_file) fclose(ids_file);
    const double t2 = now_seconds();
    fprintf(stderr, "prefill: %zu tokens in %.3f s (%.1f tokens/s)\n", n_prompt, t1 - t0, n_prompt / (t1 - t0));
    fprintf(stderr, "decode:  %d tokens in %.3f s (%.1f tokens/s)\n", generated, t2 - t1,
            generated > 1 ? (generated - 1) / (t2 - t1) : 0.0);
    free(history);
    samp_free(&smp);
    seq_free(&s);
    tp_free(pool);
    tok_free(tok);
    api->free(m);
    free(prompt_ids);
    return 0;
}


/* One line of a batch file as a scheduler request (the tokenizer is loaded on the first text prompt). */
static void parse_batch_line(const cli_common *c, ingot_model *m, tok_tokenizer **tok, const char *line,
                             sched_request *r) {
    const ingot_model_api *api = c->model;
    cJSON *j = cJSON_Parse(line);
    if (!j) die("batch: a line is not JSON");
    memset(r, 0, sizeof *r);
    r->sampling = samp_default_params();
    r->max_tokens = 16;
    r->top_logprobs = -1;
    const cJSON *p = cJSON_GetObjectItem(j, "prompt");
    int32_t *ids = NULL;
    size_t n = 0;
    if (cJSON_IsArray(p)) {
        n = (size_t)cJSON_GetArraySize(p);
        ids = malloc(sizeof(int32_t) * (n ? n : 1));
        size_t k = 0;
        const cJSON *id;
        cJSON_ArrayForEach(id, p) {
            if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= api->desc->vocab)
                die("batch: a prompt's ids are integers in [0, vocab)");
            ids[k++] = (int32_t)id->valuedouble;
        }
    } else if (cJSON_IsString(p)) {
        if (!*tok) *tok = load_tokenizer(c, m);
        char err[256];
        if (tok_encode(*tok, p->valuestring, strlen(p->valuestring), 1, 1, &ids, &n, err, sizeof err) != 0) die(err);
    } else {
        die("batch: each line needs a prompt (ids or text)");
    }
    r->prompt = ids;
    r->n_prompt = n;
    const cJSON *v;
    if ((v = cJSON_GetObjectItem(j, "max_tokens")) && cJSON_IsNumber(v)) r->max_tokens = v->valueint;
    if ((v = cJSON_GetObjectItem(j, "temperature")) && cJSON_IsNumber(v)) r->sampling.temperature = (float)v->valuedouble;
    if ((v = cJSON_GetObjectItem(j, "top_k")) && cJSON_IsNumber(v)) r->sampling.top_k = v->valueint;
    if ((v = cJSON_GetObjectItem(j, "top_p")) && cJSON_IsNumber(v)) r->sampling.top_p = (float)v->valuedouble;
    if ((v = cJSON_GetObjectItem(j, "seed")) && cJSON_IsNumber(v)) r->sampling.seed = (uint64_t)v->valuedouble;
    if ((v = cJSON_GetObjectItem(j, "ignore_eos")) && cJSON_IsBool(v)) r->ignore_eos = cJSON_IsTrue(v);
    if ((v = cJSON_GetObjectItem(j, "model"))) { /* an adapter's name (--lora NAME=PATH), or the model's own */
        if (!cJSON_IsString(v)) die("batch: \"model\" is a name");
        int found = !strcmp(v->valuestring, api->desc->name);
        for (int id = 1; !found && id <= api->lora_count(m); id++)
            if (!strcmp(v->valuestring, api->lora_name(m, id))) r->adapter = id, found = 1;
        if (!found) die("batch: a line's \"model\" is neither the model's name nor an adapter's (--lora NAME=PATH)");
    }
    if ((v = cJSON_GetObjectItem(j, "embed"))) {
        if (cJSON_IsString(v) && !strcmp(v->valuestring, "last")) r->task = SCHED_EMBED_LAST;
        else if (cJSON_IsString(v) && !strcmp(v->valuestring, "mean")) r->task = SCHED_EMBED_MEAN;
        else die("batch: \"embed\" is \"last\" or \"mean\"");
    }
    cJSON_Delete(j);
}

/* What became of each request of a batch: its tokens and its final event. */
typedef struct {
    int32_t *tokens;
    int n_tokens;
    sched_event done;
} batch_result;

/* Submits every request and polls the scheduler until each has finished; returns the seconds it took. */
static double run_batch(sched *s, sched_request *reqs, int n_req, batch_result *res) {
    char err[512];
    uint64_t *ids = calloc((size_t)n_req, sizeof(uint64_t));
    int *finished = calloc((size_t)n_req, sizeof(int));
    for (int i = 0; i < n_req; i++) {
        res[i].tokens = malloc(sizeof(int32_t) * (size_t)(reqs[i].max_tokens + 1));
        if (sched_submit(s, &reqs[i], &ids[i], err, sizeof err) != 0) {
            finished[i] = 1;
            res[i].done.finish = SCHED_FINISH_ERROR;
            snprintf(res[i].done.error, sizeof res[i].done.error, "%.150s", err);
        }
    }
    const double t0 = now_seconds();
    int remaining = 0;
    for (int i = 0; i < n_req; i++) remaining += !finished[i];
    sched_event evs[256];
    while (remaining > 0) {
        size_t n = sched_poll(s, evs, 256);
        if (n == 0) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
            continue;
        }
        for (size_t k = 0; k < n; k++) {
            int i = 0;
            while (i < n_req && (finished[i] || ids[i] != evs[k].id)) i++;
            if (i == n_req) continue;
            if (evs[k].kind == SCHED_EV_TOKEN) res[i].tokens[res[i].n_tokens++] = evs[k].token;
            else {
                res[i].done = evs[k];
                finished[i] = 1;
                remaining--;
            }
        }
    }
    free(finished);
    free(ids);
    return now_seconds() - t0;
}

/* One JSON line per request, in input order, then the scheduler's stats line. */
static void print_batch_results(const ingot_desc *d, sched *s, const batch_result *res, int n_req, double seconds) {
    static const char *const why[] = {"length", "eos", "cancelled", "error"};
    long total = 0;
    for (int i = 0; i < n_req; i++) {
        const sched_event *done = &res[i].done;
        printf("{\"index\": %d, \"tokens\": [", i);
        for (int k = 0; k < res[i].n_tokens; k++) printf("%s%d", k ? ", " : "", res[i].tokens[k]);
        printf("], \"finish\": \"%s\", \"cached_tokens\": %d", why[done->finish], done->cached_tokens);
        if (done->embedding) {
            printf(", \"embedding\": [");
            for (int k = 0; k < d->dim; k++) printf("%s%.9g", k ? ", " : "", done->embedding[k]);
            printf("]");
        }
        if (done->error[0]) printf(", \"error\": \"%s\"", done->error);
        printf("}\n");
        total += res[i].n_tokens;
    }
    sched_stats st;
    sched_get_stats(s, &st);
    printf("{\"stats\": {\"steps\": %llu, \"preemptions\": %llu, \"prefix_hit_tokens\": %llu, "
           "\"kv_blocks\": %d, \"generated\": %ld, \"seconds\": %.3f, \"forward_seconds\": %.4f, "
           "\"spec_proposed\": %llu, \"spec_accepted\": %llu}}\n",
           (unsigned long long)st.steps, (unsigned long long)st.preemptions,
           (unsigned long long)st.prefix_hit_tokens, st.kv_blocks_total, total, seconds, st.forward_seconds,
           (unsigned long long)st.spec_proposed_tokens, (unsigned long long)st.spec_accepted_tokens);
}

/* Runs many requests through the continuous-batching scheduler at once.
 * Each input line: {"prompt": [ids] | "text", "max_tokens": N, "temperature": T,
 * "seed": S, "top_k": K, "top_p": P, "ignore_eos": bool}, or {"prompt": ...,
 * "embed": "last" | "mean"} for an embedding. Prints one JSON line per request,
 * in input order: {"index", "tokens": [...], "finish", "cached_tokens"} (plus
 * "embedding": [dim floats] for an embedding), then a stats line. For tests
 * and benchmarks of the scheduler without HTTP. */
static int cmd_batch(const cli_common *c, int argc, char **argv) {
    const ingot_model_api *api = c->model;
    const char *file = NULL;
    sched_config cfg = {.n_threads = c->threads, .kv_blocks = 0, .max_batch_tokens = 0, .max_running = 64,
                        .prefix_cache = 1, .max_waiting = 4096};
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-f") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(argv[i], "--kv-blocks") && i + 1 < argc) cfg.kv_blocks = (int)parse_long(argv[++i], "--kv-blocks", 1, 1 << 24);
        else if (!strcmp(argv[i], "--max-batch-tokens") && i + 1 < argc) cfg.max_batch_tokens = (int)parse_long(argv[++i], "--max-batch-tokens", 1, 1 << 20);
        else if (!strcmp(argv[i], "--max-running") && i + 1 < argc) cfg.max_running = (int)parse_long(argv[++i], "--max-running", 1, 4096);
        else if (!strcmp(argv[i], "--no-prefix-cache")) cfg.prefix_cache = 0;
        else if (parse_spec_option(argc, argv, &i, &cfg)) continue;
        else die("batch: unknown option (see --help)");
    }
    if (!file) die("batch needs -f REQUESTS.jsonl");
    size_t len;
    char *text = read_whole_file(file, &len);
    if (!text) die("cannot read the -f file");
    ingot_model *m = load_model(c);
    tok_tokenizer *tok = NULL;
    int n_req = 0, cap = 16;
    sched_request *reqs = calloc((size_t)cap, sizeof *reqs);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (n_req == cap) reqs = realloc(reqs, sizeof *reqs * (size_t)(cap *= 2));
        parse_batch_line(c, m, &tok, line, &reqs[n_req++]);
    }
    char err[512];
    if (n_req < 1 || n_req > 1000000) die("batch: the file holds no requests (or too many)");
    if (!tok) tok = try_load_tokenizer(c, m, err, sizeof err); /* only for EOS: id prompts need none */
    if (tok) cfg.n_stop_ids = tok_stop_ids(tok, &cfg.stop_ids);
    if (cfg.kv_blocks == 0) { /* enough for every request at once */
        for (int i = 0; i < n_req; i++) cfg.kv_blocks += (int)((reqs[i].n_prompt + reqs[i].max_tokens) / INGOT_KV_BLOCK + 1);
    }
    attach_draft(c, &cfg, tok);
    sched *s = sched_create(api, m, &cfg, err, sizeof err);
    if (!s) die(err);
    batch_result *res = calloc((size_t)n_req, sizeof *res);
    print_batch_results(api->desc, s, res, n_req, run_batch(s, reqs, n_req, res));
    sched_destroy(s);
    detach_draft(&cfg);
    for (int i = 0; i < n_req; i++) {
        free(res[i].tokens);
        free(res[i].done.embedding);
        free((void *)reqs[i].prompt);
    }
    free(res);
    free(reqs);
    free(text);
    if (tok) tok_free(tok);
    api->free(m);
    return 0;
}

/* Loads the checkpoint the long way (every check, conversion and interleaving) and writes the
 * weights as the kernels read them to the build's cast file; `./ingot build` runs it. */
static int cmd_cast_weights(cli_common *c) {
    const ingot_model_api *api = c->model;
    c->no_cast = 1;
    ingot_model *m = load_model(c);
    char err[1024];
    const int rc = api->cast(m, err, sizeof err);
    if (rc == 0) printf("cast %.1f MiB of weights for %s\n", (double)api->weight_bytes(m) / (1 << 20), api->desc->name);
    api->free(m);
    if (rc != 0) die(err);
    return 0;
}

static void add_lora_option(cli_common *c, const char *spec) {
    if (c->n_lora >= CLI_MAX_LORA) die("--lora: at most 64 adapters");
    c->lora[c->n_lora++] = spec;
}

int main(int argc, char **argv) {
    /* The one place the generated model's table is named: every command receives it in c. */
#ifdef INGOT_DRAFT
    cli_common c = {.threads = 2, .model = &ingot_generated_model, .draft = &ingot_generated_draft};
#else
    cli_common c = {.threads = 2, .model = &ingot_generated_model};
#endif
    const ingot_model_api *api = c.model;
    program_name = api->desc->name;
    const char *env_threads = getenv("INGOT_THREADS");
    if (env_threads) c.threads = (int)parse_long(env_threads, "INGOT_THREADS", 1, 64);
    int i = 1;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--weights") && i + 1 < argc) c.weights = argv[++i];
        else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) c.tokenizer = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) c.threads = (int)parse_long(argv[++i], "--threads", 1, 64);
        else if (!strcmp(argv[i], "--mmap")) c.mmap = 1;
        else if (!strcmp(argv[i], "--no-cast")) c.no_cast = 1;
        else if (!strcmp(argv[i], "--draft-weights") && i + 1 < argc) c.draft_weights = argv[++i];
        else if (!strcmp(argv[i], "--lora") && i + 1 < argc) add_lora_option(&c, argv[++i]);
        else if (!strcmp(argv[i], "--lora-merge") && i + 1 < argc) c.lora_merge = argv[++i];
        else break;
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[i++];
    /* The common options may also follow the command (`NAME serve --weights
     * other.gguf`): take them out of the command's arguments. Free text (-p)
     * is passed through untouched even if it spells an option. */
    int n_rest = 0;
    for (int j = i; j < argc; j++) {
        if ((!strcmp(argv[j], "-p") || !strcmp(argv[j], "-f")) && j + 1 < argc) {
            argv[i + n_rest++] = argv[j++];
            argv[i + n_rest++] = argv[j];
        } else if (!strcmp(argv[j], "--weights") && j + 1 < argc) c.weights = argv[++j];
        else if (!strcmp(argv[j], "--tokenizer") && j + 1 < argc) c.tokenizer = argv[++j];
        else if (!strcmp(argv[j], "--threads") && j + 1 < argc) c.threads = (int)parse_long(argv[++j], "--threads", 1, 64);
        else if (!strcmp(argv[j], "--mmap")) c.mmap = 1;
        else if (!strcmp(argv[j], "--no-cast")) c.no_cast = 1;
        else if (!strcmp(argv[j], "--draft-weights") && j + 1 < argc) c.draft_weights = argv[++j];
        else if (!strcmp(argv[j], "--lora") && j + 1 < argc) add_lora_option(&c, argv[++j]);
        else if (!strcmp(argv[j], "--lora-merge") && j + 1 < argc) c.lora_merge = argv[++j];
        else argv[i + n_rest++] = argv[j];
    }
    argc = i + n_rest;
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--info") || !strcmp(cmd, "info")) return cmd_info(&c, 1);
    if (!strcmp(cmd, "generate")) return cmd_generate(&c, argc - i, argv + i);
    if (!strcmp(cmd, "logits")) return cmd_logits(&c, argc - i, argv + i);
    if (!strcmp(cmd, "perplexity")) return cmd_perplexity(&c, argc - i, argv + i);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(&c, argc - i, argv + i);
    if (!strcmp(cmd, "chat")) {
        ingot_model *m = load_model(&c);
        tok_tokenizer *tok = load_tokenizer(&c, m);
        const int rc = chat_cli_main(api, m, tok, c.threads, argc - i, argv + i);
        tok_free(tok);
        api->free(m);
        return rc;
    }
    if (!strcmp(cmd, "serve")) {
        const srv_draft draft = {c.draft, c.draft_weights, load_flags(&c)};
        const int pre = server_preflight(api, &draft, argc - i, argv + i); /* before the weights are mapped or copied */
        if (pre != 0) return pre < 0 ? 0 : pre; /* < 0: --print-memory answered */
        ingot_model *m = load_model(&c);
        tok_tokenizer *tok = load_tokenizer(&c, m);
        const int rc = server_main(api, m, tok, c.threads, &draft, argc - i, argv + i);
        tok_free(tok);
        api->free(m);
        return rc;
    }
    if (!strcmp(cmd, "batch")) return cmd_batch(&c, argc - i, argv + i);
    if (!strcmp(cmd, "cast-weights")) return cmd_cast_weights(&c);
    usage(stderr);
    return 2;
}
