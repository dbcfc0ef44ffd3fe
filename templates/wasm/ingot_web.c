/* ingot_web.c — the entry points of a `--target wasm32` build: one conversation in a web page.
 *
 * The page's worker (templates/wasm/worker.js) calls these through Emscripten's ccall: load a GGUF
 * (written into Emscripten's in-memory file system), then for each answer start a generation from
 * the conversation's messages and pull its text one token at a time, so that the page shows each
 * token as it comes. A page gets one thread here (WebAssembly threads need a cross-origin-isolated
 * page, which a static file server does not give), so there is no scheduler: one sequence steps
 * through the model's forward over a private KV pool, as `NAME generate` does (runtime/core/main.c),
 * with the same tokenizer, chat template, sampler and incremental decoder as the native binary.
 *
 * Between turns the KV cache keeps what it holds: a new prompt that begins with the tokens already
 * cached (the conversation so far, as the template renders it again) runs only its new tokens.
 *
 * Every function reports failure by its return value, the reason in ingot_web_error(); nothing
 * here exits, since exiting would end the page's module. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "model_api.h"
#include "sampler.h"
#include "tokenizer.h"

#define WEB_DEFAULT_CTX 2048      /* the KV pool's tokens when the page asks for 0 */
#define WEB_MAX_MESSAGES (1 << 20) /* the most bytes of conversation JSON a start accepts */

static struct {
    const ingot_model_api *api;
    ingot_model *m;
    tok_tokenizer *tok;
    chat_template *tpl;
    tp_pool *pool;
    ingot_kv kv;
    int kv_ready;
    int32_t *block_table;
    int capacity;      /* tokens the KV pool holds */
    int32_t *cached;   /* [capacity] the tokens whose keys and values the pool holds, in order */
    int n_cached;
    float *logits;     /* [vocab] the next token's, after the last step */
    float *scored;     /* ingot_web_logits' [n][vocab] */
    int32_t *history;  /* [capacity] prompt and answer so far, for the sampler's penalties */
    int n_history;
    samp_sampler smp;
    int sampler_ready;
    tok_stream ts;
    int remaining;     /* tokens the answer may still have */
    int generating;    /* a start succeeded and the answer has not ended */
    int last_token;    /* the last token sampled, -1 before any */
    char piece[512];
    char err[1024];
    char info[2048];
} web = {.last_token = -1};

static int fail(const char *fmt, const char *arg) {
    snprintf(web.err, sizeof web.err, fmt, arg);
    return -1;
}

const char *ingot_web_error(void) { return web.err; }

/* Runs tokens [0, n) at the positions after the cached ones, at most `chunk` a step: the last one's
 * logits into web.logits, or every token's into all ([n][vocab]) when it is not NULL. */
static int step(const int32_t *tokens, int n, int chunk, float *all) {
    const size_t vocab = (size_t)web.api->desc->vocab;
    for (int done = 0; done < n;) {
        const int k = n - done < chunk ? n - done : chunk;
        int32_t *pos = malloc(sizeof(int32_t) * (size_t)k * 3);
        if (!pos) return fail("%s", "out of memory for a step");
        int32_t *seqi = pos + k, *rows = pos + 2 * k;
        for (int i = 0; i < k; i++) pos[i] = web.n_cached + i, seqi[i] = 0, rows[i] = i;
        const int32_t seq_len = web.n_cached + k, state_slot = 0, adapter = 0;
        const int32_t *tables[1] = {web.block_table};
        ingot_batch b = {.n_tokens = k, .tokens = tokens + done, .pos = pos, .seq = seqi, .n_seqs = 1,
                         .block_tables = tables, .seq_len = &seq_len, .state_slots = &state_slot,
                         .n_logits = all ? k : 1, .logit_rows = all ? rows : rows + k - 1,
                         .logits = all ? all + (size_t)done * vocab : web.logits, .adapters = &adapter};
        const int rc = web.api->forward(web.m, &web.kv, &b, web.pool, web.err, sizeof web.err);
        free(pos);
        if (rc != 0) return -1;
        memcpy(web.cached + web.n_cached, tokens + done, sizeof(int32_t) * (size_t)k);
        web.n_cached += k;
        done += k;
    }
    return 0;
}

/* Frees what a load made; the last error stays, since a failed load reports it after this. */
static void unload(void) {
    if (web.sampler_ready) samp_free(&web.smp);
    if (web.kv_ready) web.api->kv_release(web.m, &web.kv);
    if (web.tpl) chat_free(web.tpl);
    if (web.tok) tok_free(web.tok);
    if (web.m) web.api->free(web.m);
    if (web.pool) tp_free(web.pool);
    free(web.block_table), free(web.cached), free(web.logits), free(web.history), free(web.scored);
    char err[sizeof web.err];
    memcpy(err, web.err, sizeof err);
    memset(&web, 0, sizeof web);
    memcpy(web.err, err, sizeof err);
    web.last_token = -1;
}

/* Loads the model from a GGUF at path with a KV pool of ctx tokens (0: WEB_DEFAULT_CTX, at most the
 * model's context). 0, or -1. A second load replaces the first. */
int ingot_web_load(const char *path, int ctx) {
    unload();
    web.err[0] = 0;
    web.api = &ingot_generated_model;
    const ingot_desc *d = web.api->desc;
    if (ctx <= 0) ctx = WEB_DEFAULT_CTX;
    if (ctx > d->max_ctx) ctx = d->max_ctx;
    /* the weights are read in place from the file's mapping (one copy in the page's memory, not two);
     * a page has no cast file beside it */
    web.m = web.api->load(path, 0, INGOT_LOAD_MMAP | INGOT_LOAD_NO_CAST, web.err, sizeof web.err);
    if (!web.m) return -1;
    if (!(web.tok = tok_from_weights(web.api->weights(web.m), web.err, sizeof web.err))) return unload(), -1;
    if (!(web.tpl = chat_load(web.api->weights(web.m), web.tok, web.err, sizeof web.err))) return unload(), -1;
    if (!(web.pool = tp_create(1))) return unload(), fail("%s", "out of memory for the thread pool");
    const int blocks = (ctx + INGOT_KV_BLOCK - 1) / INGOT_KV_BLOCK;
    if (web.api->kv_alloc(web.m, &web.kv, blocks, web.err, sizeof web.err) != 0) return unload(), -1;
    web.kv_ready = 1;
    if (web.api->state_alloc(web.m, &web.kv, 1, web.err, sizeof web.err) != 0) return unload(), -1;
    web.capacity = ctx;
    web.block_table = malloc(sizeof(int32_t) * (size_t)blocks);
    web.cached = malloc(sizeof(int32_t) * (size_t)ctx);
    web.history = malloc(sizeof(int32_t) * (size_t)ctx);
    web.logits = malloc(sizeof(float) * (size_t)d->vocab);
    if (!web.block_table || !web.cached || !web.history || !web.logits) return unload(), fail("%s", "out of memory");
    for (int i = 0; i < blocks; i++) web.block_table[i] = i;
    snprintf(web.info, sizeof web.info,
             "{\"name\": \"%s\", \"arch\": \"%s\", \"weights\": \"%s\", \"context\": %d, \"kv_dtype\": \"%s\", "
             "\"vocab\": %d, \"template\": \"%s\", \"isa\": \"%s\"}",
             d->name, d->arch, d->weight_dtypes, ctx, d->kv_dtype, d->vocab, chat_source(web.tpl), INGOT_ISA);
    return 0;
}

/* What was loaded, as a JSON object (name, arch, weights, context, kv_dtype, vocab, template, isa). */
const char *ingot_web_info(void) { return web.info; }

/* Starts an answer to the prompt ids[0, n): reuses the cached tokens it begins with, runs the rest.
 * Takes ownership of ids. The prompt's length, or -1. */
static int start_ids(int32_t *ids, size_t n, int max_tokens, double temperature, int seed) {
    web.generating = 0;
    if (n == 0) return free(ids), fail("%s", "the prompt encodes to no tokens");
    if (n >= (size_t)web.capacity) {
        free(ids);
        char what[96];
        snprintf(what, sizeof what, "%zu tokens, room for %d", n, web.capacity);
        return fail("the conversation no longer fits the context (%s)", what);
    }
    int common = 0;
    while (common < web.n_cached && (size_t)common < n && web.cached[common] == ids[common]) common++;
    /* a recurrent layer's state holds only the end of what it read: it cannot go back */
    if (web.api->desc->state_bytes_per_seq > 0 && common < web.n_cached) common = 0;
    if ((size_t)common == n) common--; /* the last prompt token runs again: its logits are the answer's first */
    web.n_cached = common;
    const int rc = step(ids + common, (int)n - common, web.api->max_tokens(web.m), NULL);
    if (rc != 0) {
        web.n_cached = 0; /* what the pool holds past the reused part is unknown after a failed step */
        return free(ids), -1;
    }
    memcpy(web.history, ids, sizeof(int32_t) * n);
    web.n_history = (int)n;
    free(ids);
    samp_params sp = samp_default_params();
    sp.temperature = (float)temperature;
    sp.seed = (uint64_t)(seed < 0 ? 0 : seed);
    if (web.sampler_ready) samp_free(&web.smp);
    if (samp_init(&web.smp, web.api->desc->vocab, &sp) != 0) return web.sampler_ready = 0, fail("%s", "out of memory");
    web.sampler_ready = 1;
    tok_stream_init(&web.ts);
    const int room = web.capacity - (int)n;
    web.remaining = max_tokens > 0 && max_tokens < room ? max_tokens : room;
    web.generating = 1;
    web.last_token = -1;
    return (int)n;
}

/* Starts an answer to a conversation: messages is a JSON array of {role, content}, rendered with the
 * model's chat template and tokenized as the server does (only the template's markup yields control
 * tokens). max_tokens <= 0: the rest of the context. temperature 0: greedy. The prompt's length in
 * tokens, or -1. */
int ingot_web_start(const char *messages, int max_tokens, double temperature, int seed) {
    if (!web.m) return fail("%s", "no model is loaded");
    if (strlen(messages) > WEB_MAX_MESSAGES) return fail("%s", "the conversation is longer than 1 MiB");
    cJSON *all = cJSON_Parse(messages);
    if (!cJSON_IsArray(all)) return cJSON_Delete(all), fail("%s", "messages is not a JSON array");
    tok_span *plain = NULL;
    size_t n_plain = 0;
    int user_error = 0;
    char *text = chat_render_prompt(web.tpl, all, NULL, &plain, &n_plain, &user_error, web.err, sizeof web.err);
    cJSON_Delete(all);
    if (!text) return -1;
    int32_t *ids = NULL;
    size_t n = 0;
    const int rc = tok_encode_spans(web.tok, text, strlen(text), 0, plain, n_plain, &ids, &n, web.err, sizeof web.err);
    free(plain), free(text);
    if (rc != 0) return -1;
    return start_ids(ids, n, max_tokens, temperature, seed);
}

/* Starts an answer continuing a raw prompt, tokenized as `NAME generate -p` does (BOS where the
 * tokenizer asks for one, control tokens recognized): what the native binary's greedy tokens are
 * compared with. The prompt's length in tokens, or -1. */
int ingot_web_start_text(const char *prompt, int max_tokens, double temperature, int seed) {
    if (!web.m) return fail("%s", "no model is loaded");
    int32_t *ids = NULL;
    size_t n = 0;
    if (tok_encode(web.tok, prompt, strlen(prompt), 1, 1, &ids, &n, web.err, sizeof web.err) != 0) return -1;
    return start_ids(ids, n, max_tokens, temperature, seed);
}

/* The answer's next piece of text (possibly "", while a character's bytes are incomplete), or NULL
 * when it has ended (a stop token, max_tokens, or an error: ingot_web_error() is then not ""). */
const char *ingot_web_next(void) {
    if (!web.generating) return NULL;
    web.err[0] = 0;
    if (web.remaining <= 0) {
        web.generating = 0;
        web.last_token = -1; /* what is left is the incomplete bytes of earlier tokens */
        const size_t w = tok_stream_flush(&web.ts, web.piece, sizeof web.piece - 1);
        web.piece[w] = 0;
        return w ? web.piece : NULL;
    }
    const int next = samp_sample(&web.smp, web.logits, web.history, (size_t)web.n_history);
    web.last_token = next;
    web.history[web.n_history++] = next;
    web.remaining--;
    if (tok_is_stop(web.tok, next)) {
        web.remaining = 0;
        return ingot_web_next();
    }
    const size_t w = tok_stream_push(&web.ts, web.tok, next, 1, web.piece, sizeof web.piece - 1);
    web.piece[w] = 0;
    /* the token's own step, for the logits of the one after (none is needed after the last) */
    if (web.remaining > 0) {
        const int32_t tok = next;
        if (step(&tok, 1, 1, NULL) != 0) {
            web.generating = 0;
            web.n_cached = 0;
            return NULL;
        }
    }
    return web.piece;
}

/* The token whose text the last ingot_web_next returned; -1 before any, and for the answer's
 * trailing piece (an incomplete character's bytes, flushed as U+FFFD: no token of its own). */
int ingot_web_token(void) { return web.last_token; }

/* Teacher-forced logits of ids[0, n) from position 0 (the cache starts over): [n][vocab], valid until
 * the next call, or NULL. one_at_a_time: a step per token, as decoding runs; else steps of the
 * build's --max-tokens, as a prompt runs. What tests compare with the native build's `logits`. */
const float *ingot_web_logits(const int32_t *ids, int n, int one_at_a_time) {
    if (!web.m) return fail("%s", "no model is loaded"), NULL;
    if (n < 1 || n > web.capacity) return fail("%s", "the tokens do not fit the context"), NULL;
    const int vocab = web.api->desc->vocab;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) return fail("%s", "a token id is out of the vocabulary"), NULL;
    free(web.scored);
    web.scored = malloc(sizeof(float) * (size_t)n * (size_t)vocab);
    if (!web.scored) return fail("%s", "out of memory for the logits"), NULL;
    web.generating = 0;
    web.n_cached = 0;
    if (step(ids, n, one_at_a_time ? 1 : web.api->max_tokens(web.m), web.scored) != 0) {
        web.n_cached = 0;
        return NULL;
    }
    return web.scored;
}
