/* model_api.h — the contract between a generated model and the runtime.
 *
 * A generated model (build/<name>/gen/model.c) exports one table of
 * functions and constants (ingot_model_api, below); the runtime (CLI,
 * scheduler, server) never knows which model or backend it drives. One forward call is one step for many
 * sequences: each sequence brings its new tokens (1 for decode, a chunk for
 * prefill), their positions, and the block table that maps its positions to
 * blocks of the paged KV pool. A step returns next-token logits for the rows
 * that ask for them and, for embeddings, the final hidden state of others.
 */
#ifndef INGOT_MODEL_API_H
#define INGOT_MODEL_API_H

#include <stddef.h>
#include <stdint.h>
#include "threadpool.h"
#include "weights.h"

#define INGOT_KV_BLOCK 16 /* tokens per KV block */

/* Constant descriptor, generated from models.lua + the model's config. */
typedef struct {
    const char *name;          /* build name, e.g. "smollm2" */
    const char *arch;          /* models.lua entry, e.g. "llama" */
    const char *backend;       /* "cpu" */
    const char *source;        /* weights path the binary was built from (default --weights) */
    const char *source_format; /* "gguf" or "safetensors" */
    int fused;                 /* 1: fused kernels; 0: one kernel per op (--no-fuse) */
    int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, vocab, max_ctx;
    double rope_theta, norm_eps;
    const char *weight_dtypes; /* e.g. "q4_1 (210), q8_0 (1), f32 (61)" */
    size_t kv_bytes_per_token; /* all layers, K and V */
    const char *kv_layout;     /* what one layer caches per token (K and V rows, or one shared row) */
    const char *kv_dtype;      /* the KV cache's element: "f32", "f16", "q8_0" or "q4" (--kv-dtype) */
    int kv_window;             /* > 0 when every layer attends to at most this many positions back
                                  (sliding window): KV blocks wholly before pos - kv_window + 1 are
                                  never read again and may be released (block table entry -1) */
    size_t state_bytes_per_seq;/* recurrent layers' state of one sequence (a causal convolution's
                                  last inputs, a state-space or delta-rule scan's state); 0: none. Held in a slot of its own per
                                  sequence (state_alloc), not per position: a step must bring
                                  a sequence's tokens in order from its last one, so the prefix cache
                                  and speculative decoding, which resume or rewind at other
                                  positions, do not apply to such a model */
    const char *state_layout;  /* what that state holds, for --info ("" when none) */
    int kernels_per_step;      /* kernel launches of one forward step (any batch size) */
    int n_kernel_kinds;        /* distinct kernel functions emitted */
    const char *const *kernel_names; /* per launch, in order (kernels_per_step entries) */
    size_t arena_bytes_per_token; /* scratch bytes the buffer plan needs per batch token */
    const char *generator;     /* generator version and input hash */
    const char *info;          /* backend notes for --info (launches per decode step, estimated
                                  bytes moved per token), one item per line; NULL if none */
} ingot_desc;

/* The paged KV pool: n_blocks blocks of INGOT_KV_BLOCK tokens for every
 * layer. Layout is the model's own business (see the generated file); the
 * runtime only allocates kv_bytes_per_token * INGOT_KV_BLOCK * n_blocks bytes. */
typedef struct {
    void *data;
    int n_blocks;
    void *state;              /* n_state_slots x state_bytes_per_seq (state_alloc); NULL when none */
    int n_state_slots;
} ingot_kv;

/* One step. Token i belongs to sequence seq[i] at position pos[i]; a
 * sequence's tokens in the step are contiguous and in position order, and
 * every earlier position of that sequence is already in the KV pool. Positions
 * < seq_len[s] must be covered by block_table[s]. */
typedef struct {
    int n_tokens;
    const int32_t *tokens;    /* [n_tokens] */
    const int32_t *pos;       /* [n_tokens] */
    const int32_t *seq;       /* [n_tokens] index into the per-sequence arrays */
    int n_seqs;
    const int32_t *const *block_tables; /* [n_seqs][ceil(seq_len/INGOT_KV_BLOCK)] */
    const int32_t *seq_len;   /* [n_seqs] length after this step */
    const int32_t *state_slots;/* [n_seqs] each sequence's slot of recurrent state (distinct, in
                                  [0, kv->n_state_slots)); read only by models with state_bytes_per_seq
                                  > 0. A sequence's slot holds what its earlier positions left (a step
                                  starting at position 0 begins afresh), so a sequence keeps its slot
                                  from its first step to its last and its steps bring every position */
    int n_logits;             /* rows of logits wanted */
    const int32_t *logit_rows;/* [n_logits] indices of tokens whose next-token logits are wanted */
    float *logits;            /* [n_logits][vocab], written by the step */
    int n_hidden;             /* rows of final hidden states wanted (embeddings); 0: none */
    const int32_t *hidden_rows;/* [n_hidden] indices of tokens whose hidden state is wanted */
    float *hidden;            /* [n_hidden][dim]: the last layer's output after the final norm (what
                                 the LM head reads; transformers' last_hidden_state), written by the
                                 step. A step with n_logits == 0 skips the LM head. */
    const int32_t *adapters;  /* [n_seqs] the LoRA adapter each sequence runs with: 0 the base model,
                                 k the k-th add_lora; NULL: every sequence the base model */
} ingot_batch;

typedef struct ingot_model ingot_model;

/* A generated model's entry points and constants: the one value through which the runtime (CLI,
 * scheduler, server) reaches a model. Every function of the generated source is static; it
 * exports only this table, as ingot_generated_model, and a binary built with a draft model
 * (./ingot build TARGET --draft DRAFT) holds the draft's as ingot_generated_draft
 * (build/model.mk compiles the draft with INGOT_MODEL_TABLE set to that name). Only main.c names
 * them: everything else receives the table as a value. */
typedef struct {
    const ingot_desc *desc;

    /* Maps weights, checks every tensor's name/shape/dtype against the description, converts where
     * the build asked for another dtype, and allocates the scratch arena for up to max_tokens
     * tokens per step (<= 0: the build's --max-tokens, which max_tokens reports; callers chunk
     * longer inputs). NULL and err filled on failure. flags: INGOT_LOAD_*. */
    ingot_model *(*load)(const char *weights_path, int max_tokens, unsigned flags, char *err, size_t errlen);
    /* The same, with the LoRA adapter at lora_path (runtime/load/lora.h: PEFT's or a GGUF) folded
     * into the weights it updates as they load (W + scale B A, then stored in the compiled dtype):
     * one fine-tune served at the base model's speed (--lora-merge). lora_path NULL: load. A
     * merged load never reads the build's cast file, which holds the base weights. */
    ingot_model *(*load_merged)(const char *weights_path, const char *lora_path, int max_tokens, unsigned flags,
                                char *err, size_t errlen);
    /* What load_merged folded in ("PATH: rank 8, alpha 16, ..."), or "" when nothing. */
    const char *(*merged_lora)(const ingot_model *m);
    /* Adds a LoRA adapter a step's sequences may choose (ingot_batch.adapters), under a name
     * requests give as their "model" (at most 63 bytes, kept): its id (1, 2, ...), or -1 with err
     * filled (a file that is not an adapter of this model, or a backend without them). */
    int (*add_lora)(ingot_model *m, const char *name, const char *path, char *err, size_t errlen);
    int (*lora_count)(const ingot_model *m);
    /* Adapter id's name, path and what it updates ("rank 8, alpha 16, 14 of 30 linears (q_proj, ...)"). */
    const char *(*lora_name)(const ingot_model *m, int id);
    const char *(*lora_path)(const ingot_model *m, int id);
    const char *(*lora_summary)(const ingot_model *m, int id);
    void (*free)(ingot_model *m);
    /* Writes a loaded model's weights, as its kernels read them, to the build's cast file (see
     * INGOT_LOAD_NO_CAST): 0, or -1 with err filled (the CUDA backend has no cast: it uploads). */
    int (*cast)(const ingot_model *m, char *err, size_t errlen);
    const wt_file *(*weights)(const ingot_model *m);
    size_t (*weight_bytes)(const ingot_model *m);
    /* How the load got the weights, counted by kind: "30 read in place from the file, 14 repacked
     * from the checkpoint's quantized format at open, 2 copied, 5 converted to another dtype at
     * load, 2 joined from parts" (the kinds with a count, in that order). */
    const char *(*weight_origin)(const ingot_model *m);
    /* Scratch the model holds besides weights and the KV pool: the activation arena, RoPE tables,
     * attention scores (CUDA: their device copies and the step's logits and hidden rows). A
     * function of the build's constants: m may be NULL (before loading), as for max_tokens. */
    size_t (*scratch_bytes)(const ingot_model *m);
    /* What weight_bytes will report, from the build's weight table (shapes and compiled dtypes),
     * before anything is loaded. */
    size_t (*weights_planned_bytes)(void);
    int (*max_tokens)(const ingot_model *m);

    /* The KV pool lives where the backend computes: host memory for the CPU backend, device memory
     * for CUDA. kv_alloc fills kv with a zeroed pool of n_blocks blocks (0, or -1 with err
     * filled); kv_release frees it. kv_fit_blocks is the number of blocks the backend's own memory
     * holds after weights and scratch at the given utilization fraction (CUDA: free device memory
     * x fraction), or 0 when the backend has no such limit (host memory: the caller's budget
     * decides). */
    int (*kv_alloc)(ingot_model *m, ingot_kv *kv, int n_blocks, char *err, size_t errlen);
    void (*kv_release)(ingot_model *m, ingot_kv *kv);
    /* Gives kv, after kv_alloc, the recurrent state of n_slots sequences (state_bytes_per_seq each,
     * where the model computes; nothing when the model has none): 0, or -1 with err filled.
     * kv_release frees it with the pool. */
    int (*state_alloc)(ingot_model *m, ingot_kv *kv, int n_slots, char *err, size_t errlen);
    int (*kv_fit_blocks)(ingot_model *m, double fraction);

    /* Runs one step; returns 0, or -1 with err filled for a batch that breaks the contract (too
     * many tokens, position beyond the context, bad ids). */
    int (*forward)(ingot_model *m, ingot_kv *kv, const ingot_batch *b, tp_pool *pool, char *err, size_t errlen);

    /* Debugging tap of mixture-of-experts models: when *moe_observer is set, it is called for
     * every token of every MoE layer with the experts chosen, best first. */
    void (**moe_observer)(int moe_layer, int pos, int top_k, const int32_t *experts);
} ingot_model_api;

/* flags of load. By default the CPU backend copies the weights out of the file mapping into huge
 * pages (hugealloc.h: faster decode, a slower start, memory of its own); INGOT_LOAD_MMAP reads
 * them in place. */
#define INGOT_LOAD_MMAP 1u
/* A CPU build reads the weights `./ingot build` cast for its checkpoint (BUILD_NAME.weights beside
 * the binary: runtime/load/model_cast.h) when that file matches the checkpoint loaded;
 * INGOT_LOAD_NO_CAST converts the checkpoint at load even then. */
#define INGOT_LOAD_NO_CAST 2u

extern const ingot_model_api ingot_generated_model;
#ifdef INGOT_DRAFT
extern const ingot_model_api ingot_generated_draft;
#endif

#endif
