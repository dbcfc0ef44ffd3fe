/* server.h — the OpenAI-compatible HTTP server of a model binary (srv_ prefix).
 *
 *   NAME serve [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--kv-blocks N | --kv-memory MiB]
 *              [--max-batch-tokens N] [--max-running N] [--max-waiting N] [--no-prefix-cache]
 *              [--max-body BYTES] [--grace SECONDS] [--read-timeout SECONDS]
 *              [--max-connections N] [--metrics-auth] [--parse-special-in-content]
 *              [--pooling last|mean] [--memory-budget BYTES] [--rate-limit-rpm N] [--rate-limit-tpm N]
 *              [--request-timeout SECONDS] [--spec off|ngram|draft] [--spec-k 4] [--spec-ngram-min 1]
 *              [--spec-ngram-max 3] [--intake-threads 2] [--responses-store 256]
 *              [--responses-store-memory 64] [--no-web-page] [--print-memory]
 *
 * Each option also reads from the environment (INGOT_HOST, INGOT_PORT,
 * INGOT_API_KEY, INGOT_KV_BLOCKS, INGOT_KV_MEMORY, INGOT_MAX_BATCH_TOKENS,
 * INGOT_MAX_RUNNING, INGOT_MAX_WAITING, INGOT_INTAKE_THREADS, INGOT_PREFIX_CACHE=0,
 * INGOT_MAX_BODY, INGOT_GRACE, INGOT_READ_TIMEOUT, INGOT_MAX_CONNECTIONS,
 * INGOT_METRICS_AUTH=1, INGOT_PARSE_SPECIAL_IN_CONTENT=1, INGOT_POOLING, INGOT_MEMORY_BUDGET,
 * INGOT_RATE_LIMIT_RPM, INGOT_RATE_LIMIT_TPM, INGOT_REQUEST_TIMEOUT, INGOT_SPEC,
 * INGOT_SPEC_K, INGOT_SPEC_NGRAM_MIN, INGOT_SPEC_NGRAM_MAX); the command line
 * wins. --port 0 binds a free port; the "listening on" line names it.
 */
#ifndef INGOT_SERVER_H
#define INGOT_SERVER_H

#include "model_api.h"
#include "tokenizer.h"

#define SRV_USAGE                                                                                          \
    "  serve [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--kv-blocks N | --kv-memory MiB]\n"        \
    "        [--max-batch-tokens N] [--max-running N] [--max-waiting N] [--no-prefix-cache]\n"             \
    "        [--max-body BYTES] [--grace SECONDS] [--device-memory-fraction 0.90]\n"                      \
    "        [--read-timeout 30] [--max-connections 512] [--metrics-auth] [--parse-special-in-content]\n" \
    "        [--pooling last|mean]  (/v1/embeddings: last-token (default) or mean pooling)\n"              \
    "        [--memory-budget BYTES (512M, 4G)] [--rate-limit-rpm N] [--rate-limit-tpm N]\n"               \
    "        [--request-timeout SECONDS] [--intake-threads 2]  (workers that parse, template and tokenize)\n" \
    "        [--spec off|ngram|draft] [--spec-k 4] [--spec-ngram-min 1] [--spec-ngram-max 3]  (speculative\n" \
    "        decoding: drafts from earlier text or the --draft model, verified in one forward; same output)\n" \
    "        [--responses-store 256] [--responses-store-memory MiB (64)]  (/v1/responses kept for\n"     \
    "        previous_response_id and GET /v1/responses/ID; 0: none)\n"                                 \
    "        [--no-web-page]  (no chat page at /)\n"                                                      \
    "        [--print-memory]  (print the memory plan, weights + KV + scratch in bytes, as JSON; exit)\n"      \
    "        OpenAI-compatible HTTP server (CUDA builds: the KV pool defaults to the fraction of free\n"   \
    "        device memory left after weights and scratch)\n"

/* The draft model a binary was built with (--draft), loaded by server_main for --spec draft. */
typedef struct {
    const ingot_model_api *api; /* NULL: the binary has none */
    const char *weights;        /* NULL: the checkpoint it was built from */
    unsigned load_flags;        /* the load's INGOT_LOAD_* */
} srv_draft;

/* Checks the options before the model is loaded and, with --memory-budget,
 * that the weights (their size from the build's weight table), scratch and at
 * least one KV block fit in it, so that a start that cannot fit fails before
 * it maps or copies gigabytes; server_main checks again with what was loaded
 * (and, on a device backend, its free memory). 0 to go on, else the exit
 * status: 2 for bad options, 1 when it does not fit (the reason printed);
 * -1 after --print-memory printed the plan (one JSON line on stdout: weights,
 * KV and scratch bytes the serve options give, what a supervisor such as
 * ingot-router counts against its budget): exit 0 without loading. With
 * --spec draft the draft model's weights, scratch and KV pool (as many blocks
 * as the target's) count too. */
int server_preflight(const ingot_model_api *api, const srv_draft *draft, int argc, char **argv);

/* Runs until SIGTERM/SIGINT and the grace period; returns the exit status
 * (0 after a clean shutdown, 2 for bad options, 1 when it cannot start).
 * argv: the options after "serve". api is the model's table (model_api.h); the model and
 * tokenizer stay the caller's. */
int server_main(const ingot_model_api *api, ingot_model *m, tok_tokenizer *tok, int n_threads, const srv_draft *draft, int argc, char **argv);

#endif
