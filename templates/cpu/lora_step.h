/* lora_step.h — LoRA adapters inside the step of a generated CPU model.
 *
 * Included by the generated model.c after kargs. A step's sequences each choose
 * an adapter (ingot_batch.adapters: 0 for the base model) and share one step:
 * every linear runs on all of the step's tokens with the base weight, then,
 * before anything reads its output, model_lora_apply adds scale * B (A x) to
 * the rows of the tokens whose adapter updates that weight. The tokens are
 * grouped by adapter, then two phases run across the pool: A x (rank values
 * per token), each work item a few rows of one adapter's A against all of
 * that adapter's tokens, so that A is read once per step; then B's columns
 * times those values, by 16-output blocks, each block's B^T one contiguous
 * run per adapter (the arithmetic: kernels/cpu/kc_lora.h). A token's result depends only on its
 * own row and adapter, not on who else is in the step. An adapter's A and B
 * are a few percent of the linear's weight (rank x (in + out) floats), read
 * once per step per adapter in use.
 */

#define LORA_ROWS_PER_ITEM 4 /* rows of A one work item of the down product takes (kc_lora_down's four chains) */

typedef struct {
    const kargs *a;
    int slot;
    const float *x;
    int in;
    float *y;
    int out;
    int n_groups;          /* adapters in use by the step's tokens for this weight */
    int items_per_group;   /* ceil(the largest rank / LORA_ROWS_PER_ITEM) */
    const lora_delta *group[LORA_MAX_ADAPTERS];
    int first[LORA_MAX_ADAPTERS + 1]; /* group g's tokens: order[first[g] .. first[g + 1]) */
    int order[MAX_TOKENS];
} lora_job;

/* The adapter a token's sequence chose (its id), or 0 for none. */
static inline int lora_id_of_token(const kargs *a, int t) {
    const ingot_batch *b = a->b;
    if (!b->adapters) return 0;
    const int k = b->adapters[b->seq[t]];
    return k >= 1 && k <= a->m->n_lora ? k : 0;
}

/* Work item i: LORA_ROWS_PER_ITEM rows of one group's A against each of that group's tokens, so
 * that every row of every adapter in use is read once per step, by one thread. */
static void lora_down_items(void *vp, int64_t i0, int64_t i1, int tid) {
    const lora_job *j = vp;
    (void)tid;
    for (int64_t i = i0; i < i1; i++) {
        const int g = (int)(i / j->items_per_group), r0 = (int)(i % j->items_per_group) * LORA_ROWS_PER_ITEM;
        const lora_delta *d = j->group[g];
        if (r0 >= d->rank) continue;
        const int rows = d->rank - r0 < LORA_ROWS_PER_ITEM ? d->rank - r0 : LORA_ROWS_PER_ITEM;
        for (int k = j->first[g]; k < j->first[g + 1]; k++) {
            const int t = j->order[k];
            kc_lora_down(d->a + (size_t)r0 * j->in, rows, j->in, j->x + (size_t)t * j->in, d->scale,
                         j->a->m->lora_down + (size_t)t * LORA_MAX_RANK + r0);
        }
    }
}

/* Blocks [c0, c1) of 16 outputs, for every token with an update, group by group. */
static void lora_up_blocks(void *vp, int64_t c0, int64_t c1, int tid) {
    const lora_job *j = vp;
    (void)tid;
    const int o0 = (int)c0 * 16, o1 = (int)c1 * 16 < j->out ? (int)c1 * 16 : j->out;
    for (int g = 0; g < j->n_groups; g++)
        for (int k = j->first[g]; k < j->first[g + 1]; k++) {
            const int t = j->order[k];
            kc_lora_up(j->group[g]->bt, j->group[g]->rank, o0, o1, j->a->m->lora_down + (size_t)t * LORA_MAX_RANK,
                       j->y + (size_t)t * j->out);
        }
}

/* After a linear of weight slot a->slots[k] wrote y [rows][out] from x [rows][in]: adds each token's adapter update. */
static void model_lora_apply(const kargs *a, int k, const float *x, int in, float *y, int out) {
    const int slot = a->slots[k];
    if (!LORA_SITES[slot]) return;
    lora_job j;
    j.a = a, j.slot = slot, j.x = x, j.in = in, j.y = y, j.out = out, j.n_groups = 0;
    /* the step's tokens grouped by adapter (a counting sort; tokens of the base model, or of an
     * adapter that leaves this weight alone, in no group) */
    int count[LORA_MAX_ADAPTERS + 1] = {0}, group_of[LORA_MAX_ADAPTERS + 1], max_rank = 0;
    for (int t = 0; t < a->rows; t++) count[lora_id_of_token(a, t)]++;
    int at = 0;
    for (int id = 1; id <= a->m->n_lora; id++) {
        const lora_delta *d = &a->m->lora[id - 1].delta[slot];
        group_of[id] = -1;
        if (!count[id] || !d->rank) continue;
        group_of[id] = j.n_groups;
        j.group[j.n_groups] = d;
        j.first[j.n_groups++] = at;
        at += count[id];
        max_rank = d->rank > max_rank ? d->rank : max_rank;
    }
    if (j.n_groups == 0) return;
    j.first[j.n_groups] = at;
    int fill[LORA_MAX_ADAPTERS];
    for (int g = 0; g < j.n_groups; g++) fill[g] = j.first[g];
    for (int t = 0; t < a->rows; t++) {
        const int id = lora_id_of_token(a, t);
        if (id && group_of[id] >= 0) j.order[fill[group_of[id]]++] = t;
    }
    j.items_per_group = (max_rank + LORA_ROWS_PER_ITEM - 1) / LORA_ROWS_PER_ITEM;
    tp_parallel_for(a->pool, (int64_t)j.n_groups * j.items_per_group, 1, lora_down_items, &j);
    tp_parallel_for(a->pool, (out + 15) / 16, 1, lora_up_blocks, &j);
}
