/* lora_step.c — LoRA adapters' updates inside a step (lora_step.h). */
#include "lora_step.h"

#include <stdlib.h>

#include "kc_lora.h"

#define LORA_ROWS_PER_ITEM 4 /* rows of A one work item of the down product takes (kc_lora_down's four chains) */

/* One linear's update in this step: its tokens grouped by adapter. */
typedef struct {
    lora_linear l;
    int n_groups;          /* adapters in use by the step's tokens for this weight */
    int items_per_group;   /* ceil(the largest rank / LORA_ROWS_PER_ITEM) */
    const lora_delta *group[LORA_MAX_ADAPTERS];
    int first[LORA_MAX_ADAPTERS + 1]; /* group g's tokens: order[first[g] .. first[g + 1]) */
    int *order;
    float *down;           /* [max_tokens][LORA_MAX_RANK] */
} lora_job;

typedef struct {
    int n;
    lora_job job[LORA_MAX_LINEARS];
    int64_t down_end[LORA_MAX_LINEARS], up_end[LORA_MAX_LINEARS]; /* each job's items end there */
} lora_jobs;

int lora_set_scratch(lora_set *s, int max_tokens) {
    lora_set_free_scratch(s);
    s->max_tokens = max_tokens;
    s->down = malloc(sizeof(float) * LORA_MAX_LINEARS * (size_t)max_tokens * LORA_MAX_RANK);
    s->order = malloc(sizeof(int) * LORA_MAX_LINEARS * (size_t)max_tokens);
    return s->down && s->order ? 0 : -1;
}

void lora_set_free_scratch(lora_set *s) {
    free(s->down);
    free(s->order);
    s->down = NULL, s->order = NULL;
}

/* The adapter a token's sequence chose (its id), or 0 for none. */
static inline int id_of_token(const lora_set *s, const ingot_batch *b, int t) {
    if (!b->adapters) return 0;
    const int k = b->adapters[b->seq[t]];
    return k >= 1 && k <= s->n ? k : 0;
}

/* The job an item of the concatenated ranges belongs to, and the item's index within it. */
static inline int job_of(const int64_t *end, int n, int64_t i, int64_t *local) {
    int j = 0;
    while (j + 1 < n && i >= end[j]) j++;
    *local = i - (j ? end[j - 1] : 0);
    return j;
}

/* Work item i: LORA_ROWS_PER_ITEM rows of one group's A against each of that group's tokens, so
 * that every row of every adapter in use is read once per step, by one thread. */
static void down_items(void *vp, int64_t i0, int64_t i1, int tid) {
    const lora_jobs *js = vp;
    (void)tid;
    for (int64_t i = i0; i < i1; i++) {
        int64_t li;
        const lora_job *j = &js->job[job_of(js->down_end, js->n, i, &li)];
        const int g = (int)(li / j->items_per_group), r0 = (int)(li % j->items_per_group) * LORA_ROWS_PER_ITEM;
        const lora_delta *d = j->group[g];
        if (r0 >= d->rank) continue;
        const int rows = d->rank - r0 < LORA_ROWS_PER_ITEM ? d->rank - r0 : LORA_ROWS_PER_ITEM;
        for (int k = j->first[g]; k < j->first[g + 1]; k++) {
            const int t = j->order[k];
            kc_lora_down(d->a + (size_t)r0 * j->l.in, rows, j->l.in, j->l.x + (size_t)t * j->l.in, d->scale,
                         j->down + (size_t)t * LORA_MAX_RANK + r0);
        }
    }
}

/* Blocks of 16 outputs, for every token with an update, group by group. */
static void up_blocks(void *vp, int64_t c0, int64_t c1, int tid) {
    const lora_jobs *js = vp;
    (void)tid;
    for (int64_t c = c0; c < c1; c++) {
        int64_t lc;
        const lora_job *j = &js->job[job_of(js->up_end, js->n, c, &lc)];
        const int o0 = (int)lc * 16, o1 = o0 + 16 < j->l.out ? o0 + 16 : j->l.out;
        for (int g = 0; g < j->n_groups; g++)
            for (int k = j->first[g]; k < j->first[g + 1]; k++) {
                const int t = j->order[k];
                kc_lora_up(j->group[g]->bt, j->group[g]->rank, o0, o1, j->down + (size_t)t * LORA_MAX_RANK,
                           j->l.y + (size_t)t * j->l.out);
            }
    }
}

/* Groups the step's tokens by adapter for one linear (a counting sort; tokens of the base model, or
 * of an adapter that leaves this weight alone, in no group); 0 when no token has an update. */
static int plan(const lora_set *s, const ingot_batch *b, int rows, const lora_linear *l, lora_job *j) {
    j->l = *l, j->n_groups = 0;
    if (!s->sites[l->slot]) return 0;
    int count[LORA_MAX_ADAPTERS + 1] = {0}, group_of[LORA_MAX_ADAPTERS + 1], max_rank = 0, at = 0;
    for (int t = 0; t < rows; t++) count[id_of_token(s, b, t)]++;
    for (int id = 1; id <= s->n; id++) {
        const lora_delta *d = &s->adapters[id - 1].delta[l->slot];
        group_of[id] = -1;
        if (!count[id] || !d->rank) continue;
        group_of[id] = j->n_groups;
        j->group[j->n_groups] = d;
        j->first[j->n_groups++] = at;
        at += count[id];
        max_rank = d->rank > max_rank ? d->rank : max_rank;
    }
    if (j->n_groups == 0) return 0;
    j->first[j->n_groups] = at;
    int fill[LORA_MAX_ADAPTERS];
    for (int g = 0; g < j->n_groups; g++) fill[g] = j->first[g];
    for (int t = 0; t < rows; t++) {
        const int id = id_of_token(s, b, t);
        if (id && group_of[id] >= 0) j->order[fill[group_of[id]]++] = t;
    }
    j->items_per_group = (max_rank + LORA_ROWS_PER_ITEM - 1) / LORA_ROWS_PER_ITEM;
    return 1;
}

void lora_step_apply(const lora_set *s, tp_pool *pool, const ingot_batch *b, int rows, int n, const lora_linear *linears) {
    if (!s->n || rows > s->max_tokens) return; /* rows never exceed the model's step, which sized the scratch */
    lora_jobs js;
    js.n = 0;
    int64_t downs = 0, ups = 0;
    for (int i = 0; i < n && i < LORA_MAX_LINEARS; i++) {
        lora_job *j = &js.job[js.n];
        j->order = s->order + (size_t)js.n * s->max_tokens;
        j->down = s->down + (size_t)js.n * s->max_tokens * LORA_MAX_RANK;
        if (!plan(s, b, rows, &linears[i], j)) continue;
        downs += (int64_t)j->n_groups * j->items_per_group;
        ups += (j->l.out + 15) / 16;
        js.down_end[js.n] = downs, js.up_end[js.n] = ups;
        js.n++;
    }
    if (js.n == 0) return;
    tp_parallel_for(pool, downs, 1, down_items, &js);
    tp_parallel_for(pool, ups, 1, up_blocks, &js);
}
