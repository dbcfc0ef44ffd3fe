/* scheduler.h — the continuous-batching scheduler (sched_ prefix).
 *
 * The scheduler owns the model, the paged KV pool and its own thread. Each
 * step it admits waiting requests while KV blocks and the token budget allow
 * (prefix-cache lookup first), forms one batch of prefill chunks plus one
 * decode token per running sequence, calls the generated forward once,
 * samples, and queues events. Other threads talk to it only through
 * sched_submit / sched_cancel (a locked queue) and sched_poll (events out);
 * after queuing events the scheduler calls cfg.notify so the consumer's event
 * loop wakes up. When KV blocks run out it preempts the most recently
 * admitted sequence: its blocks are freed and it is requeued to recompute
 * its prompt and the tokens generated so far, then continues where it was.
 *
 * Speculative decoding (cfg.spec): a decoding sequence brings its last token
 * plus up to spec_k drafted tokens at the following positions and gets logits
 * for all of them in the same forward; drafts are accepted left to right
 * while they pass samp_verify (greedy: equal to the argmax plain decoding
 * takes), and the first rejected one is replaced by the token verification
 * drew, so every step emits between 1 and spec_k + 1 tokens and the output is
 * what plain decoding gives (greedy) or is distributed as it (sampling).
 */
#ifndef INGOT_SCHEDULER_H
#define INGOT_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

#include "model_api.h"
#include "sampler.h"

#define SCHED_MAX_TOP_LOGPROBS 20

/* How decoding sequences draft tokens for speculative decoding. */
typedef enum {
    SCHED_SPEC_OFF = 0,
    SCHED_SPEC_NGRAM,       /* prompt lookup: what followed the latest earlier occurrence of the last n tokens */
    SCHED_SPEC_DRAFT,       /* a draft model (cfg.draft) proposes spec_k tokens, one draft forward each */
} sched_spec_mode;

/* "off", "ngram", "draft" → the mode (0), or -1 for another word. */
int sched_spec_parse(const char *name, sched_spec_mode *out);
const char *sched_spec_name(sched_spec_mode mode);

typedef struct {
    int n_threads;          /* forward threads (default 2) */
    int kv_blocks;          /* blocks of INGOT_KV_BLOCK tokens in the pool */
    int max_batch_tokens;   /* token budget of one step (<= the model's max tokens) */
    int max_running;        /* sequences decoding at once */
    int prefix_cache;       /* 1: share full prompt blocks by content hash */
    int max_waiting;        /* requests queued beyond the running set; more are refused (queue full) */
    const int32_t *stop_ids;/* token ids that end a sequence (SCHED_FINISH_EOS) unless ignore_eos: */
    int n_stop_ids;         /* the model's EOS, end-of-turn and end-of-message ids (copied) */
    void (*notify)(void *user); /* called on the scheduler thread after events are queued */
    void *notify_user;
    sched_spec_mode spec;   /* speculative decoding of unconstrained generation (constrained sequences
                               decode plainly: their grammar state is not advanced through drafts) */
    int spec_k;             /* tokens drafted per step and sequence (default 4) */
    int spec_ngram_min, spec_ngram_max; /* n-gram lengths tried, longest first (default 1..3) */
    const ingot_model_api *draft; /* SCHED_SPEC_DRAFT: the draft model built into the binary (same
                               vocabulary) and its loaded instance; its KV pool mirrors the target's
                               block for block, addressed by the same block tables */
    ingot_model *draft_model;
} sched_config;

/* What a request computes: generated tokens, or one embedding of its prompt
 * (a prefill-only sequence: its prompt goes through in chunks like any
 * other, no token is sampled, the final hidden states after the final norm
 * are pooled, and its KV blocks are freed when it ends; full blocks stay in
 * the prefix cache). */
typedef enum {
    SCHED_GENERATE = 0,
    SCHED_EMBED_LAST,       /* the last token's hidden state (prefix-cache hits still apply) */
    SCHED_EMBED_MEAN,       /* the mean over every prompt token (no prefix-cache lookup: each token's
                               hidden state is needed) */
} sched_task;

/* A constraint on what one sequence may generate (structured output): the
 * scheduler calls mask on the sequence's logits row before each sampling
 * (after logprobs took the raw row, before logit_bias, penalties and
 * temperature) and accept with each token sampled, never with a stop id.
 * It advances only on newly sampled tokens, so recomputing a preempted
 * sequence leaves it consistent. Freed (free) when the sequence ends. The
 * scheduler knows nothing else of it. */
typedef struct sched_constraint sched_constraint;
struct sched_constraint {
    /* disallowed tokens' logits to -INFINITY; -1 (error filled) when the mask cannot be computed within
     * its budget: the sequence ends with SCHED_FINISH_ERROR */
    int (*mask)(sched_constraint *c, float *logits, int vocab, char *error, size_t errlen);
    /* 1: nothing but a stop may follow; the sequence ends as if a stop id had been sampled */
    int (*accept)(sched_constraint *c, int32_t token);
    void (*free)(sched_constraint *c);
};

typedef struct {
    const int32_t *prompt;  /* copied by sched_submit */
    size_t n_prompt;
    samp_params sampling;
    int max_tokens;         /* new tokens at most (>= 1) */
    int top_logprobs;       /* -1: no logprobs; 0..SCHED_MAX_TOP_LOGPROBS: chosen token's logprob + that many alternatives */
    int ignore_eos;         /* stop ids are generated as text (not with a constraint: a stop it allows ends) */
    sched_task task;        /* SCHED_GENERATE (0), or an embedding: then max_tokens and sampling are unused */
    sched_constraint *constraint; /* NULL, or taken over by sched_submit (freed even when it fails) */
    int adapter;            /* 0: the base model; k: the model's k-th LoRA adapter (the model's add_lora) */
} sched_request;

typedef enum {
    SCHED_EV_TOKEN,         /* one generated token */
    SCHED_EV_DONE,          /* the request ended; no more events for this id */
} sched_event_kind;

typedef enum {
    SCHED_FINISH_LENGTH,    /* max_tokens or the context reached */
    SCHED_FINISH_EOS,       /* one of cfg.stop_ids (not emitted as a TOKEN) */
    SCHED_FINISH_CANCELLED, /* sched_cancel */
    SCHED_FINISH_ERROR,     /* see error */
} sched_finish;

typedef struct {
    uint64_t id;
    sched_event_kind kind;
    /* SCHED_EV_TOKEN */
    int32_t token;
    float logprob;          /* of the chosen token under the model's raw distribution (if requested) */
    int n_top;
    int32_t top_ids[SCHED_MAX_TOP_LOGPROBS];
    float top_logprobs[SCHED_MAX_TOP_LOGPROBS];
    /* SCHED_EV_DONE */
    sched_finish finish;
    int prompt_tokens, completion_tokens, cached_tokens;
    float *embedding;       /* an embedding request that completed: [dim] floats, L2-normalised
                               (owned by the consumer, which frees it); NULL otherwise */
    char error[160];
} sched_event;

typedef struct {
    int kv_blocks_total, kv_blocks_used, kv_blocks_cached; /* cached: unreferenced, kept for prefix reuse */
    int running, waiting;   /* live requests: admitted, and submitted but not admitted */
    int stalled;            /* 1: requests wait, nothing runs and none can be admitted (never expected;
                               reported so /health can say so) */
    uint64_t steps, prefix_hit_tokens, prefix_lookup_tokens, preemptions;
    uint64_t prompt_tokens, generated_tokens;
    int last_batch_tokens, last_batch_seqs;
    double last_step_seconds, last_forward_seconds; /* the whole step, and the forward call inside it */
    double forward_seconds;     /* every step's forward call, in total */
    double last_mask_seconds;   /* the constraint masks of the last step that had any */
    double mask_seconds;        /* constraint masks, in total */
    uint64_t masked_tokens;     /* tokens sampled under a constraint */
    uint64_t spec_proposed_tokens, spec_accepted_tokens; /* drafted tokens verified, and of them accepted */
} sched_stats;

typedef struct sched sched;

/* Bytes sched_create allocates besides the KV pool for cfg on a model that
 * takes model_max_tokens per step (logits of every running sequence, hidden
 * rows of a step, the step's index arrays): for memory budgets. */
size_t sched_scratch_bytes(const ingot_desc *d, const sched_config *cfg, int model_max_tokens);

/* Why the prefix cache serves no prompt of this model, or NULL when it does: a model with
 * recurrent layers carries each sequence's state in a slot, not per KV block, so a prompt cannot
 * resume from cached blocks. sched_create turns the cache off for it. */
const char *sched_prefix_cache_refusal(const ingot_desc *d);

/* Starts the scheduler thread; NULL and err filled on failure. A model with recurrent layers gets a
 * state slot per running sequence; speculative decoding is refused for it (a rejected draft would
 * have advanced the state). */
sched *sched_create(const ingot_model_api *api, ingot_model *m, const sched_config *cfg, char *err, size_t errlen);
/* Stops the thread (in-flight requests end with SCHED_FINISH_CANCELLED) and frees everything. */
void sched_destroy(sched *s);

/* Queues a request; 0 and *id on success. -1 with err filled if it can never
 * run: empty prompt, prompt + max_tokens beyond the context
 * ("context_length_exceeded"; an embedding may fill the whole context), more
 * KV blocks than the whole pool; or if the
 * queue is full: max_running + max_waiting requests are already live
 * (submitted and not finished), an error starting "the waiting queue is full".
 * Thread-safe. */
int sched_submit(sched *s, const sched_request *r, uint64_t *id, char *err, size_t errlen);
/* Ends a request early (client gone, stop string matched); its blocks are
 * freed at the next step and a DONE event with SCHED_FINISH_CANCELLED
 * follows. Unknown or finished ids are ignored. Thread-safe. */
void sched_cancel(sched *s, uint64_t id);
/* Moves up to cap queued events to out; returns how many. Thread-safe. */
size_t sched_poll(sched *s, sched_event *out, size_t cap);
void sched_get_stats(sched *s, sched_stats *out);

#endif
