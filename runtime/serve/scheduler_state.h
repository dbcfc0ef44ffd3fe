/* scheduler_state.h — the scheduler's state, shared by scheduler.c (admission,
 * the step, the thread) and scheduler_draft.c (drafting for speculative
 * decoding). Internal to those files; everything else uses scheduler.h.
 */
#ifndef INGOT_SCHEDULER_STATE_H
#define INGOT_SCHEDULER_STATE_H

#include <pthread.h>

#include "kv_pool.h"
#include "scheduler.h"
#include "threadpool.h"

typedef struct sched_seq {
    uint64_t id;
    int32_t *tokens;     /* [capacity]: prompt then generated */
    int capacity;        /* n_prompt + max_tokens, capped at the context */
    int n_prompt, n_tokens, n_computed;
    int max_tokens, generated;
    int32_t *blocks;     /* block table, [ceil(capacity / BLOCK)] */
    int n_blocks;
    int n_published;     /* leading blocks already published to the prefix cache */
    uint64_t last_hash;  /* chained hash of block n_published - 1 */
    int matched;         /* prefix lookup done for this admission */
    int cached_tokens;   /* prompt tokens served from the prefix cache (first admission) */
    int admissions;
    uint64_t admit_order;
    int state_slot;      /* its slot of recurrent state while running (models with state_bytes_per_seq) */
    int32_t adapter;     /* the LoRA adapter it runs with (0: none); also the seed of its prefix hashes,
                            since a cached block holds the KV that adapter computed */
    samp_sampler sampler;
    int top_logprobs, ignore_eos;
    sched_task task;
    double *pool_sum;    /* embeddings: running sum of hidden rows (mean) or the last row, [dim] */
    int cancelled;
    sched_constraint *constraint; /* NULL or owned */
    int spec;            /* 1: drafts tokens when decoding (speculative decoding) */
    int spec_k;          /* drafts it asks for next: grows by one after a step that accepted all of
                            them, falls to one more than were accepted after a rejection, so a
                            sequence whose drafts keep failing stops paying for long ones */
    /* draft model (SCHED_SPEC_DRAFT): its KV holds positions [0, draft_computed) of tokens (always
     * recomputed from 0 after an admission: the prefix cache holds target KV only); this step's
     * drafts, and for sampled requests the distribution each was drawn from */
    int draft_computed, n_drafts;
    int32_t *drafts;     /* [spec_k] */
    float *draft_dist;   /* [spec_k][vocab], sampled requests only */
    samp_sampler draft_sampler;
    struct sched_seq *next; /* waiting list / submission list */
} sched_seq;

struct sched {
    const ingot_model_api *api; /* the model's table (model_api.h), as sched_create was given it */
    ingot_model *model;
    sched_config cfg;
    tp_pool *pool;
    ingot_kv kv;
    kv_pool *blocks;
    int max_ctx, vocab, block;

    pthread_t thread;
    pthread_mutex_t mu;      /* guards: incoming, cancels, events, stats, stop */
    pthread_cond_t wake;
    int stop;
    sched_seq *incoming_head, *incoming_tail;
    int n_incoming;
    uint64_t *cancels;
    int n_cancels, cap_cancels;
    sched_event *events;
    size_t n_events, cap_events;
    sched_stats stats;
    uint64_t next_id;
    int n_live;              /* submitted and not yet finished (guarded by mu) */
    int32_t *stop_ids;
    int n_stop_ids;

    /* scheduler-thread state */
    sched_seq *waiting_head, *waiting_tail;
    int n_waiting;
    sched_seq **running;
    int n_running;
    int *free_slots;         /* state slots no running sequence holds, [max_running] */
    int n_free_slots;
    uint64_t admit_counter;

    /* step buffers */
    int32_t *b_tokens, *b_pos, *b_seq, *b_rows, *b_seq_len, *b_state_slots, *b_adapters;
    const int32_t **b_tables;
    sched_seq **b_seqs;       /* per sequence slot in the batch */
    int *b_first, *b_count;   /* per slot: first token index, token count */
    int *b_drafts;            /* per slot: drafted tokens among its count (after its last sampled token) */
    int spec_rows;            /* logits rows for drafts in one step, beyond one per sequence */
    float *logits;            /* [max_running + spec_rows][vocab] */
    float *raw_logits;        /* [vocab]: a row before sampling modifies it, for logprobs */
    int32_t *b_hidden_rows;   /* [max_batch_tokens]: rows whose final hidden state is wanted */
    float *hidden;            /* [max_batch_tokens][dim] */
    int dim;

    /* the draft model's step (SCHED_SPEC_DRAFT) */
    ingot_kv draft_kv;
    int d_max;                /* tokens per draft forward */
    int32_t *d_tokens, *d_pos, *d_seq, *d_rows, *d_seq_len; /* [d_max], [d_max], [d_max], [R], [R] */
    const int32_t **d_tables; /* [R] */
    sched_seq **d_cands;      /* [R] */
    int *d_want, *d_row;      /* [R] */
    float *d_logits;          /* [R][vocab] */
};

static inline int blocks_for(const sched *s, int tokens) { return (tokens + s->block - 1) / s->block; }

/* scheduler_draft.c: the drafts of a decoding sequence for this step, written
 * to draft (at most room tokens of the budget, rows_left of the step's draft
 * rows); and SCHED_SPEC_DRAFT's draft forwards, run before the step places
 * its decodes. */
int sched_draft_tokens(sched *s, sched_seq *q, int room, int rows_left, int32_t *draft);
void sched_draft_round(sched *s);

#endif
