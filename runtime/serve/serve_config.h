/* serve_config.h — the options of `NAME serve` (server.h lists them, with
 * their environment variables) and the memory plan they give (srv_ prefix).
 * Used by the server's files; server_preflight (server.h) is defined with
 * them in serve_config.c.
 */
#ifndef INGOT_SERVE_CONFIG_H
#define INGOT_SERVE_CONFIG_H

#include "model_api.h"
#include "scheduler.h"

/* Every option of serve, as parsed. */
typedef struct {
    const ingot_model_api *model; /* the model served: its name for messages, its sizes for the plan */
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
    int responses_store;       /* /v1/responses kept for previous_response_id (0: none) */
    int web_page;              /* 1: the chat page at / (--no-web-page: 0) */
    double responses_store_mib; /* ... and the most memory they may take */
} srv_config;

/* Defaults, then the environment, then the options after "serve" (the
 * command line wins). 0, or -1 with the reason printed (usage included for an
 * unknown option). */
int srv_parse_config(srv_config *c, const ingot_model_api *model, int argc, char **argv);

/* What the process will hold, and the KV pool's size. */
typedef struct {
    int kv_blocks, batch_tokens;
    double weights, kv, scratch, total; /* bytes */
} srv_mem_plan;

/* Sizes the KV pool and, with --memory-budget, checks that the weights
 * (mapped, or converted at load), the KV pool and scratch (the model's
 * activation arena and tables, the scheduler's logits and step arrays) fit:
 * without --kv-blocks/--kv-memory the pool is what the budget leaves (on a
 * device backend at most device_blocks, what its free memory holds; 0: no
 * such limit). 0, or -1 with the reason printed, naming what needs how much. */
int srv_plan_memory(const srv_config *c, const ingot_model_api *draft, double weight_bytes, int model_max,
                    int device_blocks, srv_mem_plan *p);

#endif
