/* scheduler_draft.c — the drafts of speculative decoding (scheduler.h): how
 * many tokens each decoding sequence may draft in a step, their KV blocks
 * (taken only while the pool has them: drafting never preempts), and where
 * they come from: prompt lookup (spec_ngram.h) or the draft model's
 * forwards, batched over the sequences that draft.
 */
#include "scheduler_state.h"

#include <stdio.h>
#include <string.h>

#include "spec_ngram.h"

/* How many drafts a decoding sequence may bring this step: its spec_k,
 * within room (this step's budget left, the step's draft rows left) and
 * what max_tokens and the context still allow after the token the step
 * samples anyway. */
static int draft_limit(const sched_seq *q, int room, int rows_left) {
    int k = q->spec_k;
    if (k > room) k = room;
    if (k > rows_left) k = rows_left;
    if (k > q->max_tokens - q->generated - 1) k = q->max_tokens - q->generated - 1;
    if (k > q->capacity - q->n_tokens) k = q->capacity - q->n_tokens;
    return k;
}

/* Blocks for draft positions n_tokens .. n_tokens + k - 1 while the pool has
 * them; returns how many of the k they cover. */
static int cover_drafts(sched *s, sched_seq *q, int k) {
    while (k > 0 && blocks_for(s, q->n_tokens + k) > q->n_blocks) {
        const int b = kv_alloc(s->blocks);
        if (b < 0) break;
        q->blocks[q->n_blocks++] = b;
    }
    while (k > 0 && blocks_for(s, q->n_tokens + k) > q->n_blocks) k--;
    return k;
}

/* The drafts of a decoding sequence for this step, written to draft, at
 * positions whose KV blocks the pool can give now (drafting never
 * preempts). Returns how many. */
int sched_draft_tokens(sched *s, sched_seq *q, int room, int rows_left, int32_t *draft) {
    int k = draft_limit(q, room, rows_left);
    if (k <= 0) return 0;
    if (s->cfg.spec == SCHED_SPEC_DRAFT) { /* drafted by draft_round, blocks included */
        if (k > q->n_drafts) k = q->n_drafts;
        while (k > 0 && blocks_for(s, q->n_tokens + k) > q->n_blocks) k--;
        memcpy(draft, q->drafts, sizeof(int32_t) * (size_t)k);
        return k;
    }
    k = ngram_propose(q->tokens, q->n_tokens, s->cfg.spec_ngram_min, s->cfg.spec_ngram_max, k, draft);
    return cover_drafts(s, q, k);
}

/* SCHED_SPEC_DRAFT: runs the draft model for every decoding sequence that
 * may draft this step (in the order step() places them, within the same
 * limits): the first draft forward feeds each its tokens the draft has not
 * seen yet (the whole prompt after an admission, one or two tokens after a
 * step) and the next ones one drafted token each, k forwards in all; each
 * row's token is drawn by samp_draft from the draft's processed logits
 * (greedy: its argmax), with the sequence's tokens and earlier drafts as
 * history (written after n_tokens, where the capacity has room for them). A
 * sequence whose unseen tokens do not fit in one draft forward feeds what
 * fits and drafts nothing this step. */
void sched_draft_round(sched *s) {
    const ingot_model_api *api = s->cfg.draft;
    const int budget = s->cfg.max_batch_tokens, V = s->vocab;
    int n_c = 0, used = 0, rows_left = s->spec_rows, max_want = 0;
    /* none keeps drafts of an earlier step: step() may place a sequence this loop did not reach */
    for (int i = 0; i < s->n_running; i++) s->running[i]->n_drafts = 0;
    for (int i = 0; i < s->n_running && used < budget; i++) {
        sched_seq *q = s->running[i];
        if (q->n_tokens - q->n_computed != 1) continue;
        used++;
        if (!q->spec) continue;
        int k = draft_limit(q, budget - used, rows_left);
        if (k > api->desc->max_ctx - q->n_tokens + 1) k = api->desc->max_ctx - q->n_tokens + 1;
        if (k <= 0 || (k = cover_drafts(s, q, k)) <= 0) continue;
        s->d_cands[n_c] = q;
        s->d_want[n_c++] = k;
        used += k;
        rows_left -= k;
        if (k > max_want) max_want = k;
    }
    char err[256];
    for (int t = 0; t < max_want; t++) {
        int n_tok = 0, n_seq = 0, n_rows = 0;
        for (int c = 0; c < n_c; c++) {
            sched_seq *q = s->d_cands[c];
            s->d_row[c] = -1;
            if (s->d_want[c] <= t) continue;
            if (n_tok >= s->d_max) { /* no room left in this forward: it keeps the drafts it has */
                s->d_want[c] = t;
                continue;
            }
            /* t = 0: everything the draft has not seen; later: the previous draft */
            const int first = q->draft_computed, end = q->n_tokens + t;
            int n = end - first;
            const int fits = n <= s->d_max - n_tok;
            if (!fits) n = s->d_max - n_tok;
            for (int j = 0; j < n; j++) {
                s->d_tokens[n_tok + j] = q->tokens[first + j];
                s->d_pos[n_tok + j] = first + j;
                s->d_seq[n_tok + j] = n_seq;
            }
            s->d_tables[n_seq] = q->blocks;
            s->d_seq_len[n_seq] = first + n;
            n_tok += n;
            n_seq++;
            q->draft_computed = first + n;
            if (!fits) {
                s->d_want[c] = 0;
                continue;
            }
            s->d_row[c] = n_rows;
            s->d_rows[n_rows++] = n_tok - 1;
        }
        if (n_tok == 0) break;
        ingot_batch b = {.n_tokens = n_tok, .tokens = s->d_tokens, .pos = s->d_pos, .seq = s->d_seq,
                         .n_seqs = n_seq, .block_tables = s->d_tables, .seq_len = s->d_seq_len,
                         .n_logits = n_rows, .logit_rows = s->d_rows, .logits = s->d_logits};
        if (api->forward(s->cfg.draft_model, &s->draft_kv, &b, s->pool, err, sizeof err) != 0) {
            fprintf(stderr, "scheduler: the draft model's forward failed (%s); this step decodes plainly\n", err);
            for (int c = 0; c < n_c; c++) {
                s->d_cands[c]->n_drafts = 0;
                s->d_cands[c]->draft_computed = 0;
            }
            return;
        }
        for (int c = 0; c < n_c; c++) {
            if (s->d_row[c] < 0) continue;
            sched_seq *q = s->d_cands[c];
            float *dist = q->draft_dist ? q->draft_dist + (size_t)t * V : NULL;
            const int d = samp_draft(&q->draft_sampler, s->d_logits + (size_t)s->d_row[c] * V, q->tokens,
                                     (size_t)(q->n_tokens + t), dist);
            q->drafts[t] = d;
            q->tokens[q->n_tokens + t] = d; /* history of the next draft; not part of the sequence */
            q->n_drafts = t + 1;
        }
    }
}
