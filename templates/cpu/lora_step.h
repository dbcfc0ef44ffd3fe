/* lora_step.h — LoRA adapters inside the step of a generated CPU model.
 *
 * Included by the generated model.c after kargs. A step's sequences each choose
 * an adapter (ingot_batch.adapters: 0 for the base model) and share one step:
 * every linear runs on all of the step's tokens with the base weight, then,
 * before anything reads its output, model_lora_apply adds scale * B (A x) to
 * the rows of the tokens whose adapter updates that weight. Two phases, each
 * across the pool: A x per token (rank values), then B's columns times those
 * values, by 16-row chunks of the output so that each thread keeps a chunk of
 * B^T's rows in cache for every token. A token's result depends only on its
 * own row and adapter, not on who else is in the step. An adapter's A and B
 * are a few percent of the linear's weight (rank x (in + out) floats), read
 * once per step per adapter in use.
 */

typedef struct {
    const kargs *a;
    int slot;
    const float *x;
    int in;
    float *y;
    int out;
} lora_job;

/* The adapter a token's sequence chose, and its update of table entry slot; NULL for none. */
static inline const lora_delta *lora_of_token(const kargs *a, int slot, int t) {
    const ingot_batch *b = a->b;
    if (!b->adapters) return NULL;
    const int k = b->adapters[b->seq[t]];
    if (k < 1 || k > a->m->n_lora) return NULL;
    const lora_delta *d = &a->m->lora[k - 1].delta[slot];
    return d->rank ? d : NULL;
}

static void lora_down_rows(void *vp, int64_t t0, int64_t t1, int tid) {
    const lora_job *j = vp;
    (void)tid;
    for (int64_t t = t0; t < t1; t++) {
        const lora_delta *d = lora_of_token(j->a, j->slot, (int)t);
        if (!d) continue;
        float *down = j->a->m->lora_down + (size_t)t * LORA_MAX_RANK;
        const float *x = j->x + (size_t)t * j->in;
        for (int r = 0; r < d->rank; r++) down[r] = d->scale * kc_dot(d->a + (size_t)r * j->in, x, j->in);
    }
}

static void lora_up_rows(void *vp, int64_t c0, int64_t c1, int tid) {
    const lora_job *j = vp;
    (void)tid;
    const int o0 = (int)c0 * 16, o1 = (int)c1 * 16 < j->out ? (int)c1 * 16 : j->out;
    for (int t = 0; t < j->a->rows; t++) {
        const lora_delta *d = lora_of_token(j->a, j->slot, t);
        if (!d) continue;
        const float *down = j->a->m->lora_down + (size_t)t * LORA_MAX_RANK;
        float *y = j->y + (size_t)t * j->out;
        for (int r = 0; r < d->rank; r++) kc_axpy(down[r], d->bt + (size_t)r * d->out + o0, y + o0, o1 - o0);
    }
}

/* After a linear of weight slot a->slots[k] wrote y [rows][out] from x [rows][in]: adds each token's adapter update. */
static void model_lora_apply(const kargs *a, int k, const float *x, int in, float *y, int out) {
    const int slot = a->slots[k];
    if (!LORA_SITES[slot]) return;
    int any = 0;
    for (int t = 0; t < a->rows && !any; t++) any = lora_of_token(a, slot, t) != NULL;
    if (!any) return;
    lora_job j = {a, slot, x, in, y, out};
    tp_parallel_for(a->pool, a->rows, 1, lora_down_rows, &j);
    tp_parallel_for(a->pool, (out + 15) / 16, 1, lora_up_rows, &j);
}
