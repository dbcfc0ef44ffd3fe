/* tokenizer_bpe.c — BPE merges by rank: the merge table (pair of ids -> rank and result), the
 * candidate heap that both BPE flavours merge from (SentencePiece too, by score), and byte-level BPE
 * of one pre-token. */
#include "tokenizer_int.h"

/* ---------- merges ---------- */

static uint64_t mkey(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1; }

int tok_merges_alloc(tok_tokenizer *t, size_t n) {
    uint32_t cap = 16;
    while (cap < n * 2 && cap < (1u << 30)) cap <<= 1;
    t->mslots = calloc(cap, sizeof *t->mslots);
    t->mmask = cap - 1;
    return t->mslots ? 0 : -1;
}

static const merge_slot *merge_find(const tok_tokenizer *t, int32_t a, int32_t b) {
    uint64_t k = mkey(a, b);
    uint32_t i = (uint32_t)tok_hash(&k, sizeof k) & t->mmask;
    for (;;) {
        const merge_slot *m = &t->mslots[i];
        if (m->key == 0) return NULL;
        if (m->key == k) return m;
        i = (i + 1) & t->mmask;
    }
}

/* Adds merge "a"+"b" with the given rank. Merges whose parts or result are not in the
 * vocabulary can never apply and are skipped. overwrite: a later duplicate wins (HF's map). */
int tok_add_merge(tok_tokenizer *t, const char *a, size_t na, const char *b, size_t nb, int rank, int overwrite,
                  char *buf) {
    int ia = tok_lookup(t, a, na), ib = tok_lookup(t, b, nb);
    if (ia < 0 || ib < 0) return 0;
    memcpy(buf, a, na);
    memcpy(buf + na, b, nb);
    int ir = tok_lookup(t, buf, na + nb);
    if (ir < 0) return 0;
    uint64_t k = mkey(ia, ib);
    uint32_t i = (uint32_t)tok_hash(&k, sizeof k) & t->mmask;
    for (;;) {
        merge_slot *m = &t->mslots[i];
        if (m->key == 0 || m->key == k) {
            if (m->key == k && !overwrite) return 0;
            m->key = k;
            m->rank = rank;
            m->result = ir;
            return 0;
        }
        i = (i + 1) & t->mmask;
    }
}

/* ---------- the candidate heap ---------- */

static int cand_less(const cand *x, const cand *y) {
    return x->key != y->key ? x->key < y->key : x->l < y->l;
}

int tok_cand_push(cand_heap *h, cand c) {
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        cand *nv = realloc(h->v, nc * sizeof *nv);
        if (!nv) return -1;
        h->v = nv;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = c;
    return 0;
}

cand tok_cand_pop(cand_heap *h) {
    cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(&h->v[c + 1], &h->v[c])) c++;
        if (!cand_less(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n) h->v[i] = last;
    return top;
}

/* ---------- byte-level BPE ---------- */

static int try_pair(const tok_tokenizer *t, bpe_scratch *s, uint32_t l, uint32_t r) {
    if (s->id[l] < 0 || s->id[r] < 0) return 0;
    const merge_slot *m = merge_find(t, s->id[l], s->id[r]);
    if (!m) return 0;
    return tok_cand_push(&s->heap, (cand){(float)m->rank, l, r, s->id[l], s->id[r]});
}

int tok_bpe_reserve(bpe_scratch *s, size_t n) {
    if (n > s->cap) {
        size_t nc = n + n / 2;
        int32_t *id = realloc(s->id, nc * sizeof *id);
        if (id) s->id = id;
        uint32_t *pv = realloc(s->prev, nc * sizeof *pv);
        if (pv) s->prev = pv;
        uint32_t *nx = realloc(s->next, nc * sizeof *nx);
        if (nx) s->next = nx;
        char *bl = realloc(s->bl, 2 * nc);
        if (bl) s->bl = bl;
        if (!id || !pv || !nx || !bl) return -1;
        s->cap = nc;
    }
    return 0;
}

void tok_bpe_scratch_free(bpe_scratch *s) {
    free(s->id);
    free(s->prev);
    free(s->next);
    free(s->heap.v);
    free(s->bl);
}

/* BPE of one pre-token: start from one symbol per byte (its byte-level character) and
 * repeatedly merge the adjacent pair of lowest rank, leftmost first. */
int tok_bpe_word(const tok_tokenizer *t, bpe_scratch *s, const uint8_t *w, size_t n, ivec *out) {
    if (n == 0) return 0;
    if (tok_bpe_reserve(s, n)) return -1;
    if (t->ignore_merges) {
        /* Llama-3: a pre-token that is itself a token is taken whole. */
        size_t k = tok_to_bytelevel(w, n, s->bl);
        int id = tok_lookup(t, s->bl, k);
        if (id >= 0) return tok_ivec_push(out, id);
    }
    for (size_t i = 0; i < n; i++) {
        s->id[i] = t->byte_id[w[i]];
        s->prev[i] = i ? (uint32_t)(i - 1) : NONE;
        s->next[i] = i + 1 < n ? (uint32_t)(i + 1) : NONE;
    }
    return tok_bpe_run(t, s, n, out);
}

/* Merges the n linked symbols in s (ids set), lowest rank first, leftmost on ties. */
int tok_bpe_run(const tok_tokenizer *t, bpe_scratch *s, size_t n, ivec *out) {
    s->heap.n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (try_pair(t, s, (uint32_t)i, (uint32_t)(i + 1))) return -1;
    while (s->heap.n) {
        cand c = tok_cand_pop(&s->heap);
        /* Stale when either side has merged since the candidate was queued. */
        if (s->next[c.l] != c.r || s->id[c.l] != c.a || s->id[c.r] != c.b) continue;
        const merge_slot *m = merge_find(t, c.a, c.b);
        s->id[c.l] = m->result;
        s->id[c.r] = -2; /* dead */
        uint32_t nx = s->next[c.r];
        s->next[c.l] = nx;
        s->next[c.r] = NONE;
        if (nx != NONE) s->prev[nx] = c.l;
        if (s->prev[c.l] != NONE && try_pair(t, s, s->prev[c.l], c.l)) return -1;
        if (nx != NONE && try_pair(t, s, c.l, nx)) return -1;
    }
    for (uint32_t i = 0; i != NONE; i = s->next[i]) {
        int32_t id = s->id[i];
        if (id < 0) id = t->hf ? t->unk : -1; /* a byte without a token: HF's unk, llama.cpp drops it */
        if (id >= 0 && tok_ivec_push(out, id)) return -1;
    }
    return 0;
}
