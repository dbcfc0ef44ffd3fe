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
#define LORA_MAX_LINEARS 8   /* linears of one matmul kernel (q, k, v; gate, up; ...) updated together */

/* One linear of a matmul kernel, as the generated call names it: weight a->slots[k], y [rows][out]
 * written from x [rows][in]. */
typedef struct {
    int k;
    const float *x;
    int in;
    float *y;
    int out;
} lora_linear;

/* One linear's update in this step: its tokens grouped by adapter. */
typedef struct {
    lora_linear l;
    int n_groups;          /* adapters in use by the step's tokens for this weight */
    int items_per_group;   /* ceil(the largest rank / LORA_ROWS_PER_ITEM) */
    const lora_delta *group[LORA_MAX_ADAPTERS];
    int first[LORA_MAX_ADAPTERS + 1]; /* group g's tokens: order[first[g] .. first[g + 1]) */
    int order[MAX_TOKENS];
} lora_job;

/* Every linear of a kernel at once: one dispatch of the pool for all their down products, one for
 * all their up products (a decode step of one sequence is short enough for dispatches to count). */
typedef struct {
    const kargs *a;
    int n;
    lora_job job[LORA_MAX_LINEARS];
    int64_t down_end[LORA_MAX_LINEARS], up_end[LORA_MAX_LINEARS]; /* each job's items end there */
} lora_jobs;

/* The adapter a token's sequence chose (its id), or 0 for none. */
static inline int lora_id_of_token(const kargs *a, int t) {
    const ingot_batch *b = a->b;
    if (!b->adapters) return 0;
    const int k = b->adapters[b->seq[t]];
    return k >= 1 && k <= a->m->n_lora ? k : 0;
}

/* The job an item of the concatenated ranges belongs to, and the item's index within it. */
static inline int lora_job_of(const int64_t *end, int n, int64_t i, int64_t *local) {
    int j = 0;
    while (j + 1 < n && i >= end[j]) j++;
    *local = i - (j ? end[j - 1] : 0);
    return j;
}

/* Work item i: LORA_ROWS_PER_ITEM rows of one group's A against each of that group's tokens, so
 * that every row of every adapter in use is read once per step, by one thread. */
static void lora_down_items(void *vp, int64_t i0, int64_t i1, int tid) {
    const lora_jobs *js = vp;
    (void)tid;
    for (int64_t i = i0; i < i1; i++) {
        int64_t li;
        const lora_job *j = &js->job[lora_job_of(js->down_end, js->n, i, &li)];
        const int g = (int)(li / j->items_per_group), r0 = (int)(li % j->items_per_group) * LORA_ROWS_PER_ITEM;
        const lora_delta *d = j->group[g];
        if (r0 >= d->rank) continue;
        const int rows = d->rank - r0 < LORA_ROWS_PER_ITEM ? d->rank - r0 : LORA_ROWS_PER_ITEM;
        /* each linear has its own row of lora_down per token: the kernel's linears run together */
        float *down = js->a->m->lora_down + (size_t)(j - js->job) * MAX_TOKENS * LORA_MAX_RANK;
        for (int k = j->first[g]; k < j->first[g + 1]; k++) {
            const int t = j->order[k];
            kc_lora_down(d->a + (size_t)r0 * j->l.in, rows, j->l.in, j->l.x + (size_t)t * j->l.in, d->scale,
                         down + (size_t)t * LORA_MAX_RANK + r0);
        }
    }
}

/* Blocks of 16 outputs, for every token with an update, group by group. */
static void lora_up_blocks(void *vp, int64_t c0, int64_t c1, int tid) {
    const lora_jobs *js = vp;
    (void)tid;
    for (int64_t c = c0; c < c1; c++) {
        int64_t lc;
        const lora_job *j = &js->job[lora_job_of(js->up_end, js->n, c, &lc)];
        const float *down = js->a->m->lora_down + (size_t)(j - js->job) * MAX_TOKENS * LORA_MAX_RANK;
        const int o0 = (int)lc * 16, o1 = o0 + 16 < j->l.out ? o0 + 16 : j->l.out;
        for (int g = 0; g < j->n_groups; g++)
            for (int k = j->first[g]; k < j->first[g + 1]; k++) {
                const int t = j->order[k];
                kc_lora_up(j->group[g]->bt, j->group[g]->rank, o0, o1, down + (size_t)t * LORA_MAX_RANK,
                           j->l.y + (size_t)t * j->l.out);
            }
    }
}

/* Groups the step's tokens by adapter for one linear (a counting sort; tokens of the base model, or
 * of an adapter that leaves this weight alone, in no group); 0 when no token has an update. */
static int lora_plan(const kargs *a, const lora_linear *l, lora_job *j) {
    const int slot = a->slots[l->k];
    j->l = *l, j->n_groups = 0;
    if (!LORA_SITES[slot]) return 0;
    int count[LORA_MAX_ADAPTERS + 1] = {0}, group_of[LORA_MAX_ADAPTERS + 1], max_rank = 0, at = 0;
    for (int t = 0; t < a->rows; t++) count[lora_id_of_token(a, t)]++;
    for (int id = 1; id <= a->m->n_lora; id++) {
        const lora_delta *d = &a->m->lora[id - 1].delta[slot];
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
    for (int t = 0; t < a->rows; t++) {
        const int id = lora_id_of_token(a, t);
        if (id && group_of[id] >= 0) j->order[fill[group_of[id]]++] = t;
    }
    j->items_per_group = (max_rank + LORA_ROWS_PER_ITEM - 1) / LORA_ROWS_PER_ITEM;
    return 1;
}

/* After a matmul kernel's linears wrote their outputs: adds each token's adapter update to each. */
static void model_lora_apply(const kargs *a, int n, const lora_linear *linears) {
    lora_jobs js;
    js.a = a, js.n = 0;
    int64_t downs = 0, ups = 0;
    for (int i = 0; i < n && i < LORA_MAX_LINEARS; i++) {
        lora_job *j = &js.job[js.n];
        if (!lora_plan(a, &linears[i], j)) continue;
        downs += (int64_t)j->n_groups * j->items_per_group;
        ups += (j->l.out + 15) / 16;
        js.down_end[js.n] = downs, js.up_end[js.n] = ups;
        js.n++;
    }
    if (js.n == 0) return;
    tp_parallel_for(a->pool, downs, 1, lora_down_items, &js);
    tp_parallel_for(a->pool, ups, 1, lora_up_blocks, &js);
}
