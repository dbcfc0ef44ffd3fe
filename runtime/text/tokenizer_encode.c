/* tokenizer_encode.c — text to ids (tok_encode, tok_encode_spans): added and special tokens are
 * split out of the text where they may be recognised (HF's or llama.cpp's matching), the rest goes
 * to SentencePiece (tokenizer_spm.c) or through the pre-tokenizer's split rules to byte-level BPE
 * (tokenizer_bpe.c). */
#include <utf8proc.h>

#include "tokenizer_int.h"

static int svec_push(svec *a, const char *p, size_t n, int32_t id) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 32;
        span *nv = realloc(a->v, nc * sizeof *nv);
        if (!nv) return -1;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = (span){p, n, id};
    return 0;
}

/* Word character for HF single_word: the regex \w of Rust (Alphabetic, marks, Nd, Pc,
 * Join_Control), approximated by general categories plus the circled letters and ZWJ/ZWNJ. */
static int is_word_cp(uint32_t cp) {
    if (cp == 0xFFFFFFFFu) return 0;
    if (cp == 0x200C || cp == 0x200D || (cp >= 0x24B6 && cp <= 0x24E9)) return 1;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

static int word_char_before(const char *p, size_t start) {
    if (start == 0) return 0;
    size_t i = start - 1;
    while (i > 0 && ((uint8_t)p[i] & 0xC0) == 0x80 && start - i < 4) i--;
    uint32_t cp;
    int cls;
    pt_char((const uint8_t *)p, start, i, &cp, &cls);
    return is_word_cp(cp);
}

static int word_char_at(const char *p, size_t n, size_t pos) {
    if (pos >= n) return 0;
    uint32_t cp;
    int cls;
    pt_char((const uint8_t *)p, n, pos, &cp, &cls);
    return is_word_cp(cp);
}

static int is_ws_at(const char *p, size_t n, size_t pos, size_t *len) {
    uint32_t cp;
    int cls;
    *len = pt_char((const uint8_t *)p, n, pos, &cp, &cls);
    return cls == PT_C_SPACE;
}

static int added_enabled(const tok_tokenizer *t, int id, int parse_special) {
    return parse_special || (t->flags[id] & TF_ALWAYS);
}

/* Where special tokens may be recognised in the text being encoded:
 * everywhere when parse_special, except inside the plain ranges (sorted,
 * disjoint byte ranges of base); tokens matched regardless of parse_special
 * (TF_ALWAYS) match there too. */
typedef struct {
    int parse_special;
    const char *base;
    const tok_span *plain;
    size_t n_plain;
} special_scope;

/* 1 if a match of token id at [at, at + len) lies (partly) in a plain range. */
static int in_plain(const tok_tokenizer *t, const special_scope *sc, int id, const char *at, size_t len) {
    if (!sc->n_plain || (t->flags[id] & TF_ALWAYS)) return 0;
    const size_t a = (size_t)(at - sc->base), b = a + len;
    size_t lo = 0, hi = sc->n_plain; /* first range ending after a */
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (sc->plain[mid].start + sc->plain[mid].len <= a) lo = mid + 1;
        else hi = mid;
    }
    return lo < sc->n_plain && sc->plain[lo].start < b;
}

/* HF added-token extraction over one text span (leftmost-longest, non-overlapping), for the
 * tokens whose normalized flag equals pass. */
static int hf_split_span(const tok_tokenizer *t, const span *sp, int pass, const special_scope *sc, svec *out) {
    const char *p = sp->p;
    size_t n = sp->n, start_off = 0, pos = 0;
    while (pos < n) {
        int best = -1;
        size_t best_len = 0, mpos = pos;
        for (; mpos < n && best < 0; mpos++) {
            for (size_t k = 0; k < t->n_added; k++) {
                const added_tok *a = &t->added[k];
                if (a->normalized != pass || !added_enabled(t, a->id, sc->parse_special)) continue;
                size_t len = t->text_len[a->id];
                if (len > best_len && len <= n - mpos && p[mpos] == t->text[a->id][0] &&
                    memcmp(p + mpos, t->text[a->id], len) == 0 && !in_plain(t, sc, a->id, p + mpos, len)) {
                    best = (int)k;
                    best_len = len;
                }
            }
        }
        if (best < 0) break;
        mpos--;
        const added_tok *a = &t->added[best];
        size_t start = mpos, stop = mpos + best_len;
        pos = stop;
        if (a->single_word && (word_char_before(p, start) || word_char_at(p, n, stop))) continue;
        if (a->lstrip) {
            size_t s = start;
            while (s > start_off) {
                size_t i = s - 1, l;
                while (i > start_off && ((uint8_t)p[i] & 0xC0) == 0x80) i--;
                if (!is_ws_at(p, s, i, &l)) break;
                s = i;
            }
            start = s;
        }
        if (a->rstrip) {
            size_t l;
            while (stop < n && is_ws_at(p, n, stop, &l)) stop += l;
            pos = stop;
        }
        if (start > start_off && svec_push(out, p + start_off, start - start_off, -1)) return -1;
        if (svec_push(out, p + start, stop - start, a->id)) return -1;
        start_off = stop;
    }
    if (start_off < n && svec_push(out, p + start_off, n - start_off, -1)) return -1;
    return 0;
}

/* llama.cpp special-token partition: each special token in turn (longest first) splits
 * every remaining text span at all of its occurrences. */
static int gguf_split(const tok_tokenizer *t, svec *a, svec *b, const special_scope *sc) {
    for (size_t k = 0; k < t->n_added; k++) {
        int id = t->added[k].id;
        if (!added_enabled(t, id, sc->parse_special)) continue;
        const char *tk = t->text[id];
        size_t tl = t->text_len[id];
        b->n = 0;
        for (size_t i = 0; i < a->n; i++) {
            span sp = a->v[i];
            if (sp.id >= 0 || sp.n < tl) {
                if (svec_push(b, sp.p, sp.n, sp.id)) return -1;
                continue;
            }
            const char *p = sp.p, *end = sp.p + sp.n, *from = p;
            for (;;) {
                const char *m = memmem(from, (size_t)(end - from), tk, tl);
                if (!m) break;
                if (in_plain(t, sc, id, m, tl)) { /* text inside a plain range stays text */
                    from = m + 1;
                    continue;
                }
                if (m > p && svec_push(b, p, (size_t)(m - p), -1)) return -1;
                if (svec_push(b, m, tl, id)) return -1;
                p = from = m + tl;
            }
            if (p < end && svec_push(b, p, (size_t)(end - p), -1)) return -1;
        }
        svec tmp = *a;
        *a = *b;
        *b = tmp;
    }
    return 0;
}

/* Arena for pieces that ByteLevel's add_prefix_space rewrites. */
typedef struct arena_blk {
    struct arena_blk *next;
    char data[];
} arena_blk;

static char *arena_copy_prefixed(arena_blk **arena, const char *p, size_t n) {
    arena_blk *b = malloc(sizeof *b + n + 1);
    if (!b) return NULL;
    b->next = *arena;
    *arena = b;
    b->data[0] = ' ';
    memcpy(b->data + 1, p, n);
    return b->data;
}

/* The added/special tokens split out of the text spans of a (b is scratch; the result is in a). */
static int split_added(const tok_tokenizer *t, svec *a, svec *b, const special_scope *sc) {
    if (!t->hf) return gguf_split(t, a, b, sc);
    for (int pass = 0; pass < 2; pass++) {
        b->n = 0;
        for (size_t i = 0; i < a->n; i++) {
            if (a->v[i].id >= 0) {
                if (svec_push(b, a->v[i].p, a->v[i].n, a->v[i].id)) return -1;
            } else if (hf_split_span(t, &a->v[i], pass, sc, b)) {
                return -1;
            }
        }
        svec tmp = *a;
        *a = *b;
        *b = tmp;
    }
    return 0;
}

/* Pre-tokenizes one text span through the rules, then BPE of each piece. */
static int bpe_span(const tok_tokenizer *t, const span *sp, bpe_scratch *s, arena_blk **arena, ivec *ids) {
    svec cur = {0}, nxt = {0};
    int rc = -1;
    if (svec_push(&cur, sp->p, sp->n, -1)) goto done;
    for (int r = 0; r < t->n_rules; r++) {
        nxt.n = 0;
        for (size_t j = 0; j < cur.n; j++) {
            const char *p = cur.v[j].p;
            size_t n = cur.v[j].n;
            if (t->rules[r] == PT_PREFIX_SPACE) {
                if (n == 0 || p[0] != ' ') {
                    p = arena_copy_prefixed(arena, p, n);
                    if (!p) goto done;
                    n++;
                }
                if (svec_push(&nxt, p, n, -1)) goto done;
                continue;
            }
            for (size_t pos = 0; pos < n;) {
                size_t m = pt_match(t->rules[r], (const uint8_t *)p, n, pos);
                if (svec_push(&nxt, p + pos, m, -1)) goto done;
                pos += m;
            }
        }
        svec tmp = cur;
        cur = nxt;
        nxt = tmp;
    }
    for (size_t j = 0; j < cur.n; j++)
        if (tok_bpe_word(t, s, (const uint8_t *)cur.v[j].p, cur.v[j].n, ids)) goto done;
    rc = 0;
done:
    free(cur.v);
    free(nxt.v);
    return rc;
}

static int encode_scoped(const tok_tokenizer *t, const char *text, size_t len, int add_special,
                         const special_scope *sc, int32_t **out, size_t *n_out, char *err, size_t errlen);

int tok_encode(const tok_tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
               int32_t **out, size_t *n_out, char *err, size_t errlen) {
    const special_scope sc = {.parse_special = parse_special, .base = text};
    return encode_scoped(t, text, len, add_special, &sc, out, n_out, err, errlen);
}

int tok_encode_spans(const tok_tokenizer *t, const char *text, size_t len, int add_special, const tok_span *plain,
                     size_t n_plain, int32_t **out, size_t *n_out, char *err, size_t errlen) {
    for (size_t i = 0; i < n_plain; i++)
        if (plain[i].start + plain[i].len > len || (i && plain[i].start < plain[i - 1].start + plain[i - 1].len)) {
            tok_seterr(err, errlen, "tok_encode_spans: ranges out of order or past the text");
            return -1;
        }
    const special_scope sc = {.parse_special = 1, .base = text, .plain = plain, .n_plain = n_plain};
    return encode_scoped(t, text, len, add_special, &sc, out, n_out, err, errlen);
}

static int encode_scoped(const tok_tokenizer *t, const char *text, size_t len, int add_special,
                         const special_scope *sc, int32_t **out, size_t *n_out, char *err, size_t errlen) {
    ivec ids = {0};
    svec a = {0}, b = {0};
    bpe_scratch s = {0};
    arena_blk *arena = NULL;
    int rc = -1;
    *out = NULL;
    *n_out = 0;
    if (!text && len) {
        tok_seterr(err, errlen, "tok_encode: NULL text");
        return -1;
    }
    if (add_special && t->prefix_id >= 0 && tok_ivec_push(&ids, t->prefix_id)) goto oom;
    if (len && svec_push(&a, text, len, -1)) goto oom;
    if (split_added(t, &a, &b, sc)) goto oom;
    if (t->spm || t->hfspm) {
        if (t->spm ? tok_spm_encode(t, &a, &ids) : tok_hfspm_encode(t, &a, text, &ids)) goto oom;
        a.n = 0; /* every fragment is encoded */
    }
    for (size_t i = 0; i < a.n; i++) {
        if (a.v[i].id >= 0) {
            if (tok_ivec_push(&ids, a.v[i].id)) goto oom;
        } else if (bpe_span(t, &a.v[i], &s, &arena, &ids)) {
            goto oom;
        }
    }
    if (add_special && t->suffix_id >= 0 && tok_ivec_push(&ids, t->suffix_id)) goto oom;
    *out = ids.v ? ids.v : malloc(sizeof(int32_t));
    if (!*out) goto oom;
    ids.v = NULL;
    *n_out = ids.n;
    rc = 0;
    goto done;
oom:
    tok_seterr(err, errlen, "tok_encode: out of memory");
done:
    free(ids.v);
    free(a.v);
    free(b.v);
    tok_bpe_scratch_free(&s);
    while (arena) {
        arena_blk *nx = arena->next;
        free(arena);
        arena = nx;
    }
    return rc;
}
