/* model_load.h — load, free and batch checking shared by every generated model (the CPU backend's and
 * the host side of the CUDA backend's).
 *
 * Included by the generated model.c after its WEIGHTS table and constants. The weights' load
 * itself (checks, copies, conversions, interleaving) and the cast file are the library's
 * (runtime/load/model_weights.h, model_cast.h), compiled once; what is here is sized by this
 * model's constants. Weights stored in the dtype the kernels were compiled for are used in place
 * (zero copy, from the mapping); others are converted once at load, row by row through f32.
 */

#ifndef MODEL_HOST_WEIGHTS_IN_PLACE
#define MODEL_HOST_WEIGHTS_IN_PLACE 0 /* 1: a backend that uploads the weights reads them from the mapping */
#endif

#define MODEL_ARENA_BYTES ((size_t)ARENA_BYTES_PER_TOKEN * MAX_TOKENS)

/* This model's weight table, as the library's load takes it. */
static mw_table model_weight_table(void) {
    return (mw_table){WEIGHTS, N_WEIGHTS, ALLOW_UNUSED_TENSORS, model_desc.arch, NULL};
}

static void *model_aligned_alloc(size_t bytes) {
    size_t rounded = (bytes + 63) / 64 * 64;
    return aligned_alloc(64, rounded ? rounded : 64);
}

static void model_free(ingot_model *m) {
    if (!m) return;
#ifdef MODEL_BEFORE_FREE
    MODEL_BEFORE_FREE(m);
#endif
    mw_release(&m->wt);
    for (int i = 0; i < m->n_lora; i++) lora_free(&m->lora[i]);
    free(m->lora);
#ifndef MODEL_NO_LORA_STEP
    lora_set_free_scratch(&m->lora_step);
#endif
    ha_free(m->arena, MODEL_ARENA_BYTES);
    free(m->rope);
    free(m->scratch);
    wt_close(m->wt.file);
    free(m);
}

static const char *model_weight_origin(const ingot_model *m) { return m->wt.origin; }

static ingot_model *model_load_merged(const char *path, const char *lora_path, int max_tokens, unsigned flags,
                                     char *err, size_t errlen) {
    if (max_tokens > STEP_TOKENS) {
        snprintf(err, errlen, "this build plans for at most %d tokens per step, %d requested", STEP_TOKENS, max_tokens);
        return NULL;
    }
    ingot_model *m = calloc(1, sizeof *m);
    if (!m) { snprintf(err, errlen, "out of memory"); return NULL; }
    m->wt.w = m->w.slot;
    m->wt.file = wt_open(path, err, errlen);
    if (!m->wt.file) { free(m); return NULL; }
    mw_table table = model_weight_table();
    lora_adapter merge = {0};
    int rc = 1;
    if (lora_path) { /* any whole or row-sliced matrix may take the update: no sites */
        if (lora_open(lora_path, &table, NULL, model_desc.source_format, &merge, err, errlen) != 0) {
            model_free(m);
            return NULL;
        }
        table.merge = &merge;
        snprintf(m->merged, sizeof m->merged, "%s: %s", lora_path, merge.summary);
    }
#ifdef MODEL_CAST_FILE
    /* 0: the weights cast at build time, 1: none applies (nor to a merge: the cast holds the base weights) */
    if (!lora_path) rc = mc_load(&table, &m->wt, flags, model_desc.name, model_desc.source, err, errlen);
#endif
    if (rc > 0) rc = mw_load(&table, &m->wt, (flags & INGOT_LOAD_MMAP) || MODEL_HOST_WEIGHTS_IN_PLACE, err, errlen);
    lora_free(&merge);
    if (rc != 0) {
        model_free(m);
        return NULL;
    }
    m->arena = ha_alloc(MODEL_ARENA_BYTES);
    m->rope = model_aligned_alloc(sizeof(float) * (size_t)N_ROPE * MAX_CTX * ROPE_DIM);
    m->scratch = model_aligned_alloc(sizeof(float) * ((size_t)MAX_THREADS * SCRATCH_PER_THREAD + ATTN_SPLIT_FLOATS));
    if (!m->arena || !m->rope || !m->scratch) {
        snprintf(err, errlen, "out of memory allocating scratch");
        model_free(m);
        return NULL;
    }
    const kc_rope_params ropes[N_ROPE] = ROPE_TABLES;
    /* a table whose frequencies the checkpoint scales (GGUF rope_freqs): the weight slot, else -1 */
    const int factor_slots[N_ROPE] = ROPE_FACTOR_SLOTS;
    for (int i = 0; i < N_ROPE; i++)
        kc_rope_table_ex(m->rope + (size_t)i * MAX_CTX * ROPE_DIM, MAX_CTX, ROPE_DIM, &ropes[i],
                         factor_slots[i] >= 0 ? (const float *)m->w.slot[factor_slots[i]] : NULL);
#ifdef MODEL_AFTER_LOAD
    if (MODEL_AFTER_LOAD(m, err, errlen) != 0) {
        model_free(m);
        return NULL;
    }
#endif
    return m;
}

static ingot_model *model_load(const char *path, int max_tokens, unsigned flags, char *err, size_t errlen) {
    return model_load_merged(path, NULL, max_tokens, flags, err, errlen);
}

static const wt_file *model_weights_file(const ingot_model *m) { return m->wt.file; }

static const char *model_merged_lora(const ingot_model *m) { return m->merged; }

/* LoRA adapters chosen per sequence (runtime/core/lora_step.h); a backend without them (MODEL_NO_LORA_STEP) refuses. */
static int model_add_lora(ingot_model *m, const char *name, const char *path, char *err, size_t errlen) {
#ifdef MODEL_NO_LORA_STEP
    (void)m, (void)name;
    snprintf(err, errlen, "%s: the %s backend does not apply adapters per request; --lora-merge folds one into the "
                          "weights at load", path, model_desc.backend);
    return -1;
#else
    if (m->n_lora >= LORA_MAX_ADAPTERS) {
        snprintf(err, errlen, "%s: this model serves at most %d adapters", path, LORA_MAX_ADAPTERS);
        return -1;
    }
    const mw_table table = model_weight_table();
    lora_adapter a;
    if (lora_open(path, &table, LORA_SITES, model_desc.source_format, &a, err, errlen) != 0) return -1;
    lora_adapter *grown = realloc(m->lora, sizeof *grown * (size_t)(m->n_lora + 1));
    if (!grown || (!m->lora_step.down && lora_set_scratch(&m->lora_step, MAX_TOKENS) != 0)) {
        if (grown) m->lora = grown;
        lora_free(&a);
        snprintf(err, errlen, "out of memory for adapter %s", path);
        return -1;
    }
    m->lora = grown;
    snprintf(a.name, sizeof a.name, "%s", name);
    m->lora[m->n_lora++] = a;
    m->lora_step.adapters = m->lora, m->lora_step.n = m->n_lora, m->lora_step.sites = LORA_SITES;
    return m->n_lora;
#endif
}
static int model_lora_count(const ingot_model *m) { return m->n_lora; }
static const char *model_lora_name(const ingot_model *m, int id) {
    return id >= 1 && id <= m->n_lora ? m->lora[id - 1].name : NULL;
}
static const char *model_lora_path(const ingot_model *m, int id) {
    return id >= 1 && id <= m->n_lora ? m->lora[id - 1].path : NULL;
}
static const char *model_lora_summary(const ingot_model *m, int id) {
    return id >= 1 && id <= m->n_lora ? m->lora[id - 1].summary : NULL;
}

#ifndef MODEL_DEVICE_KV
static size_t model_kv_bytes(int n_blocks) {
    return (size_t)n_blocks * INGOT_KV_BLOCK * model_desc.kv_bytes_per_token;
}
static int model_kv_alloc(ingot_model *m, ingot_kv *kv, int n_blocks, char *err, size_t errlen) {
    (void)m;
    kv->n_blocks = n_blocks;
    kv->state = NULL; /* model_state_alloc, after this */
    kv->n_state_slots = 0;
    /* huge pages: attention streams the KV of every position it reads */
    kv->data = n_blocks > 0 ? ha_alloc(model_kv_bytes(n_blocks)) : NULL;
    if (!kv->data) {
        snprintf(err, errlen, "out of memory for a KV pool of %d blocks (%zu bytes each)", n_blocks,
                 model_desc.kv_bytes_per_token * INGOT_KV_BLOCK);
        return -1;
    }
    return 0;
}
static void model_kv_release(ingot_model *m, ingot_kv *kv) {
    (void)m;
    ha_free(kv->data, model_kv_bytes(kv->n_blocks));
    kv->data = NULL;
    free(kv->state);
    kv->state = NULL;
    kv->n_state_slots = 0;
}
static int model_state_alloc(ingot_model *m, ingot_kv *kv, int n_slots, char *err, size_t errlen) {
    (void)m;
    free(kv->state);
    kv->state = NULL;
    kv->n_state_slots = 0;
    if (STATE_FLOATS == 0) return 0;
    if (n_slots < 1 || !(kv->state = calloc((size_t)n_slots * STATE_FLOATS, sizeof(float)))) {
        snprintf(err, errlen, "out of memory for the recurrent state of %d sequences (%zu bytes each)", n_slots,
                 sizeof(float) * (size_t)STATE_FLOATS);
        return -1;
    }
    kv->n_state_slots = n_slots;
    return 0;
}
static int model_kv_fit_blocks(ingot_model *m, double fraction) { (void)m; (void)fraction; return 0; }
#endif
static size_t model_weight_bytes(const ingot_model *m) { return m->wt.weight_bytes; }
static size_t model_weights_planned_bytes(void) {
    const mw_table table = model_weight_table();
    return mw_planned_bytes(&table);
}

static size_t model_scratch_bytes(const ingot_model *m) {
    (void)m;
    size_t bytes = (size_t)ARENA_BYTES_PER_TOKEN * MAX_TOKENS + sizeof(float) * (size_t)N_ROPE * MAX_CTX * ROPE_DIM +
                   sizeof(float) * ((size_t)MAX_THREADS * SCRATCH_PER_THREAD + ATTN_SPLIT_FLOATS);
#ifdef MODEL_DEVICE_KV
    bytes += sizeof(float) * (size_t)MAX_TOKENS * (VOCAB + DIM); /* the device's logits and hidden rows */
#endif
    return bytes;
}
static int model_max_tokens(const ingot_model *m) { (void)m; return STEP_TOKENS; }

/* A model with recurrent state reads a sequence's earlier tokens of the step or its slot: each
 * sequence needs a slot of its own, and its tokens contiguous at consecutive positions. */
static int model_check_states(const ingot_kv *kv, const ingot_batch *b, char *err, size_t errlen) {
    if (!kv->state || !b->state_slots) {
        snprintf(err, errlen, "this model has recurrent layers: the batch needs state slots (model_state_alloc)");
        return -1;
    }
    for (int s = 0; s < b->n_seqs; s++) {
        if (b->state_slots[s] < 0 || b->state_slots[s] >= kv->n_state_slots) {
            snprintf(err, errlen, "sequence %d: state slot %d out of range (%d)", s, b->state_slots[s], kv->n_state_slots);
            return -1;
        }
        for (int r = 0; r < s; r++)
            if (b->state_slots[r] == b->state_slots[s]) {
                snprintf(err, errlen, "sequences %d and %d share state slot %d", r, s, b->state_slots[s]);
                return -1;
            }
    }
    unsigned char seen[b->n_seqs];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < b->n_tokens; i++) {
        const int s = b->seq[i];
        const int continues = i > 0 && b->seq[i - 1] == s;
        if ((seen[s] && !continues) || (continues && b->pos[i] != b->pos[i - 1] + 1)) {
            snprintf(err, errlen, "token %d: a sequence's tokens must be contiguous at consecutive positions "
                     "(the model has recurrent layers)", i);
            return -1;
        }
        seen[s] = 1;
    }
    return 0;
}

/* Checks a batch against the contract of model_api.h before any kernel runs,
 * so a bad batch is an error, never an out-of-bounds access. */
static int model_check_batch(const ingot_kv *kv, const ingot_batch *b, const tp_pool *pool, char *err,
                             size_t errlen) {
    if (b->n_tokens < 1 || b->n_tokens > STEP_TOKENS) {
        snprintf(err, errlen, "batch of %d tokens (this build takes 1..%d per step)", b->n_tokens, STEP_TOKENS);
        return -1;
    }
    if (b->n_logits < 0 || b->n_logits > b->n_tokens || (b->n_logits > 0 && !b->logits)) {
        snprintf(err, errlen, "n_logits %d out of range", b->n_logits);
        return -1;
    }
    if (b->n_hidden < 0 || b->n_hidden > b->n_tokens || (b->n_hidden > 0 && (!b->hidden || !b->hidden_rows))) {
        snprintf(err, errlen, "n_hidden %d out of range", b->n_hidden);
        return -1;
    }
    for (int i = 0; i < b->n_hidden; i++)
        if (b->hidden_rows[i] < 0 || b->hidden_rows[i] >= b->n_tokens) {
            snprintf(err, errlen, "hidden row %d: token %d out of range", i, b->hidden_rows[i]);
            return -1;
        }
    if (tp_size(pool) > MAX_THREADS) {
        snprintf(err, errlen, "at most %d threads", MAX_THREADS);
        return -1;
    }
    if (!kv || !kv->data || kv->n_blocks < 1) {
        snprintf(err, errlen, "no KV pool");
        return -1;
    }
    if (b->n_seqs < 1 || b->n_seqs > b->n_tokens) {
        snprintf(err, errlen, "batch of %d sequences for %d tokens", b->n_seqs, b->n_tokens);
        return -1;
    }
    /* The first position of each sequence in the step (its tokens are
     * contiguous and in order): with a sliding window, blocks wholly before
     * that position's window may have been released. */
    int first_pos[b->n_seqs];
    for (int s = 0; s < b->n_seqs; s++) first_pos[s] = -1;
    for (int i = 0; i < b->n_tokens; i++) {
        if (b->seq[i] < 0 || b->seq[i] >= b->n_seqs) {
            snprintf(err, errlen, "token %d: sequence %d out of range", i, b->seq[i]);
            return -1;
        }
        if (first_pos[b->seq[i]] < 0) first_pos[b->seq[i]] = b->pos[i];
    }
    for (int s = 0; s < b->n_seqs; s++) {
        if (b->seq_len[s] < 0 || b->seq_len[s] > MAX_CTX) {
            snprintf(err, errlen, "sequence %d: length %d beyond the context (%d)", s, b->seq_len[s], MAX_CTX);
            return -1;
        }
        int first_block = 0;
        if (KV_WINDOW > 0 && first_pos[s] > KV_WINDOW - 1) first_block = (first_pos[s] - (KV_WINDOW - 1)) / INGOT_KV_BLOCK;
        for (int i = first_block; i < (b->seq_len[s] + INGOT_KV_BLOCK - 1) / INGOT_KV_BLOCK; i++) {
            if (b->block_tables[s][i] < 0 || b->block_tables[s][i] >= kv->n_blocks) {
                snprintf(err, errlen, "sequence %d: block %d out of the pool", s, b->block_tables[s][i]);
                return -1;
            }
        }
    }
    for (int i = 0; i < b->n_tokens; i++) {
        const int s = b->seq[i];
        if (b->tokens[i] < 0 || b->tokens[i] >= VOCAB) {
            snprintf(err, errlen, "token id %d out of the vocabulary (%d)", b->tokens[i], VOCAB);
            return -1;
        }
        if (s < 0 || s >= b->n_seqs || b->pos[i] < 0 || b->pos[i] >= b->seq_len[s]) {
            snprintf(err, errlen, "token %d: sequence %d / position %d inconsistent with the batch", i, s, b->pos[i]);
            return -1;
        }
    }
    for (int i = 0; i < b->n_logits; i++) {
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tokens) {
            snprintf(err, errlen, "logit row %d out of range", b->logit_rows[i]);
            return -1;
        }
    }
    return STATE_FLOATS > 0 ? model_check_states(kv, b, err, errlen) : 0;
}
