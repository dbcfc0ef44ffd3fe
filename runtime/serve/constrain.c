/* constrain.c — a grammar matcher behind sched_constraint; see constrain.h. */
#include "constrain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    sched_constraint base;  /* first: the scheduler's pointer is this object's */
    gram_matcher *m;
    const gram_vocab *v;
    const int32_t *stop_ids;
    int n_stop;
    uint32_t *allowed;      /* [ceil(vocab / 32)] bits from gram_mask */
    float *stop_logits;     /* [n_stop]: saved across the mask */
} con_grammar;

static int con_mask(sched_constraint *base, float *logits, int vocab, char *error, size_t errlen) {
    con_grammar *c = (con_grammar *)base;
    const int n_allowed = gram_mask(c->m, c->v, c->allowed);
    if (n_allowed < 0) {
        snprintf(error, errlen,
                 "the grammar is too ambiguous to follow: one token's mask took more than %ld expansions",
                 GRAM_MAX_MASK_WORK);
        return -1;
    }
    const int allow_stop = n_allowed == 0 || gram_is_complete(c->m);
    for (int i = 0; i < c->n_stop; i++)
        c->stop_logits[i] = c->stop_ids[i] >= 0 && c->stop_ids[i] < vocab ? logits[c->stop_ids[i]] : -INFINITY;
    const int nv = gram_vocab_size(c->v) < vocab ? gram_vocab_size(c->v) : vocab;
    for (int w = 0; w * 32 < nv; w++) {
        const uint32_t bits = c->allowed[w];
        if (bits == 0xffffffffu) continue;
        const int hi = (w + 1) * 32 < nv ? (w + 1) * 32 : nv;
        for (int i = w * 32; i < hi; i++)
            if (!(bits >> (i & 31) & 1)) logits[i] = -INFINITY;
    }
    for (int i = nv; i < vocab; i++) logits[i] = -INFINITY; /* ids the tokenizer does not spell */
    if (allow_stop)
        for (int i = 0; i < c->n_stop; i++)
            if (c->stop_ids[i] >= 0 && c->stop_ids[i] < vocab) logits[c->stop_ids[i]] = c->stop_logits[i];
    return 0;
}

static int con_accept(sched_constraint *base, int32_t token) {
    con_grammar *c = (con_grammar *)base;
    if (gram_accept_token(c->m, c->v, token) != 0) return 1; /* only when the mask left nothing: end */
    return gram_is_complete(c->m) && !gram_can_continue(c->m);
}

static void con_free(sched_constraint *base) {
    con_grammar *c = (con_grammar *)base;
    gram_matcher_free(c->m);
    free(c->allowed);
    free(c->stop_logits);
    free(c);
}

sched_constraint *con_grammar_new(gram_grammar *g, const gram_vocab *v, const int32_t *stop_ids, int n_stop,
                                  char *err, size_t errlen) {
    con_grammar *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->base = (sched_constraint){.mask = con_mask, .accept = con_accept, .free = con_free};
    c->v = v;
    c->stop_ids = stop_ids;
    c->n_stop = n_stop;
    c->allowed = malloc(sizeof(uint32_t) * (size_t)((gram_vocab_size(v) + 31) / 32 + 1));
    c->stop_logits = malloc(sizeof(float) * (size_t)(n_stop + 1));
    if (!c->allowed || !c->stop_logits) {
        snprintf(err, errlen, "out of memory");
        con_free(&c->base);
        return NULL;
    }
    c->m = gram_matcher_new(g, err, errlen);
    if (!c->m) {
        con_free(&c->base);
        return NULL;
    }
    return &c->base;
}

gram_vocab *con_vocab_new(const tok_tokenizer *t) {
    const int n = tok_vocab_size(t);
    const char **pieces = calloc((size_t)n + 1, sizeof *pieces);
    size_t *lens = calloc((size_t)n + 1, sizeof *lens);
    uint8_t *excluded = calloc((size_t)n + 1, 1);
    gram_vocab *v = NULL;
    if (pieces && lens && excluded) {
        for (int i = 0; i < n; i++) {
            pieces[i] = tok_piece(t, i, &lens[i]);
            excluded[i] = tok_is_special(t, i) || tok_is_stop(t, i);
        }
        v = gram_vocab_new(n, pieces, lens, excluded);
    }
    free(pieces);
    free(lens);
    free(excluded);
    return v;
}
