/* tokenizer_spm.c — SentencePiece BPE: llama.cpp's for a GGUF "llama" vocabulary (pairs of UTF-8
 * characters merged by piece score, <0xNN> byte fallback) and HF's for a SentencePiece-style
 * tokenizer.json (merges by rank, per-character byte fallback, fuse_unk), with the pieces'
 * text for decoding. */
#include <stdio.h>

#include "tokenizer_int.h"

/* ---------- pieces ---------- */

/* SentencePiece pieces as text: U+2581 stands for a space in normal pieces; byte pieces
 * <0xNN> are the byte itself; user-defined, control and unknown pieces are their text
 * (control/unknown ones are hidden by skip_special); undefined and unused pieces render
 * as nothing, as llama.cpp suppresses them. */
int tok_finish_vocab_spm(tok_tokenizer *t, const uint8_t *ttype) {
    for (int id = 0; id < t->n_vocab; id++) {
        if (!t->text[id] && tok_set_piece(t, id, "", 0, 0)) return -1;
        const char *s = t->text[id];
        size_t n = t->text_len[id], k = 0;
        char *r = malloc(n + 1);
        if (!r) return -1;
        unsigned hi, lo;
        switch (ttype[id]) {
        case 1:
            for (size_t i = 0; i < n;) {
                if (n - i >= 3 && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
                    r[k++] = ' ';
                    i += 3;
                } else {
                    r[k++] = s[i++];
                }
            }
            break;
        case 2: case 3: case 4:
            memcpy(r, s, n);
            k = n;
            break;
        case 6:
            if (n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' &&
                sscanf(s + 3, "%1x%1x", &hi, &lo) == 2)
                r[k++] = (char)(hi << 4 | lo);
            break;
        default:
            break;
        }
        r[k] = 0;
        t->raw[id] = r;
        t->raw_len[id] = (uint32_t)k;
        t->flags[id] |= TF_RAW;
    }
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1; /* no byte-level alphabet here */
    return 0;
}

/* llama.cpp's byte fallback: the piece <0xNN>, else the byte as a one-byte piece, else unk. */
void tok_spm_byte_tokens(tok_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int id = tok_lookup(t, hex, 6);
        if (id < 0) {
            char c = (char)b;
            id = tok_lookup(t, &c, 1);
        }
        t->spm_byte[b] = id >= 0 ? id : t->unk;
    }
}

/* ---------- SentencePiece BPE ---------- */

typedef struct {
    uint32_t *start, *len, *prev, *next;
    cand_heap heap; /* candidates: key -score, a the joined length */
    size_t cap;
    char *buf; /* the escaped text */
    size_t bufcap;
} spm_scratch;

static int spm_try(const tok_tokenizer *t, spm_scratch *s, uint32_t l, uint32_t r) {
    if (l == NONE || r == NONE) return 0;
    uint32_t size = s->len[l] + s->len[r];
    int id = tok_lookup(t, s->buf + s->start[l], size);
    if (id < 0) return 0;
    return tok_cand_push(&s->heap, (cand){-t->score[id], l, r, (int32_t)size, 0});
}

/* Byte length of the UTF-8 sequence a lead byte announces (llama.cpp's table: stray
 * continuation bytes count as one, a cut sequence ends at the text's end). */
static size_t spm_char_len(uint8_t b) {
    static const uint8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[b >> 4];
}

/* One text fragment: spaces become U+2581 (and one is prepended when prefix), then the
 * characters are merged pairwise, the pair whose joined piece scores highest first. A
 * final symbol that is no piece is spelled with byte-fallback tokens. */
static int spm_fragment(const tok_tokenizer *t, spm_scratch *s, const char *p, size_t n, int prefix, ivec *out) {
    size_t spaces = prefix;
    for (size_t i = 0; i < n; i++) spaces += p[i] == ' ';
    if (n > (SIZE_MAX - 1) / 4 || spaces > (SIZE_MAX - n) / 3 || n + 3 * spaces > UINT32_MAX) return -1;
    size_t m = n + 3 * spaces, k = 0; /* an upper bound: the prefix adds 3 bytes, each space 2 more */
    if (m > s->bufcap) {
        char *nb = realloc(s->buf, m);
        if (!nb) return -1;
        s->buf = nb;
        s->bufcap = m;
    }
    if (prefix) {
        memcpy(s->buf, "\xE2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] == ' ') {
            memcpy(s->buf + k, "\xE2\x96\x81", 3);
            k += 3;
        } else {
            s->buf[k++] = p[i];
        }
    }
    if (k == 0) return 0;
    if (k > s->cap) {
        size_t nc = k + k / 2;
        uint32_t *a = realloc(s->start, nc * sizeof *a);
        if (a) s->start = a;
        uint32_t *b = realloc(s->len, nc * sizeof *b);
        if (b) s->len = b;
        uint32_t *c = realloc(s->prev, nc * sizeof *c);
        if (c) s->prev = c;
        uint32_t *d = realloc(s->next, nc * sizeof *d);
        if (d) s->next = d;
        if (!a || !b || !c || !d) return -1;
        s->cap = nc;
    }
    uint32_t nsym = 0;
    for (size_t i = 0; i < k;) {
        size_t l = spm_char_len((uint8_t)s->buf[i]);
        if (l > k - i) l = k - i;
        s->start[nsym] = (uint32_t)i;
        s->len[nsym] = (uint32_t)l;
        s->prev[nsym] = nsym ? nsym - 1 : NONE;
        s->next[nsym] = NONE;
        if (nsym) s->next[nsym - 1] = nsym;
        nsym++;
        i += l;
    }
    s->heap.n = 0;
    for (uint32_t i = 0; i + 1 < nsym; i++)
        if (spm_try(t, s, i, i + 1)) return -1;
    while (s->heap.n) {
        cand c = tok_cand_pop(&s->heap);
        /* Stale when either side has changed since the candidate was queued. */
        if (s->len[c.l] == 0 || s->len[c.r] == 0 || s->len[c.l] + s->len[c.r] != (uint32_t)c.a) continue;
        s->len[c.l] += s->len[c.r];
        s->len[c.r] = 0;
        uint32_t nx = s->next[c.r];
        s->next[c.l] = nx;
        if (nx != NONE) s->prev[nx] = c.l;
        if (spm_try(t, s, s->prev[c.l], c.l) || spm_try(t, s, c.l, nx)) return -1;
    }
    for (uint32_t i = 0; i != NONE; i = s->next[i]) {
        const char *sym = s->buf + s->start[i];
        int id = tok_lookup(t, sym, s->len[i]);
        if (id >= 0) {
            if (tok_ivec_push(out, id)) return -1;
            continue;
        }
        for (uint32_t j = 0; j < s->len[i]; j++) {
            int b = t->spm_byte[(uint8_t)sym[j]];
            if (b >= 0 && tok_ivec_push(out, b)) return -1;
        }
    }
    return 0;
}

/* The fragments left by the special-token split: a text fragment gets the space prefix
 * when it opens the input or follows a token, as llama.cpp's SentencePiece path does. */
int tok_spm_encode(const tok_tokenizer *t, const svec *a, ivec *ids) {
    spm_scratch s = {0};
    int prev_token = 1, rc = 0;
    for (size_t i = 0; i < a->n && rc == 0; i++) {
        if (a->v[i].id >= 0) {
            rc = tok_ivec_push(ids, a->v[i].id);
            prev_token = 1;
        } else {
            rc = spm_fragment(t, &s, a->v[i].p, a->v[i].n, t->add_space_prefix && prev_token, ids);
            prev_token = 0;
        }
    }
    free(s.start);
    free(s.len);
    free(s.prev);
    free(s.next);
    free(s.heap.v);
    free(s.buf);
    return rc;
}

/* ---------- tokenizer.json SentencePiece style ---------- */

/* HF BPE of one SentencePiece-style word: one symbol per character that is a token; a
 * character that is not is spelled with its <0xNN> tokens (byte_fallback, all of them or
 * none), else it is unk (consecutive ones fused into one with fuse_unk). Then merges by rank. */
static int hfspm_word(const tok_tokenizer *t, bpe_scratch *s, const char *p, size_t n, ivec *out) {
    if (n == 0) return 0;
    if (tok_bpe_reserve(s, n)) return -1;
    size_t nsym = 0;
    int prev_unk = 0;
    for (size_t i = 0; i < n;) {
        size_t l = spm_char_len((uint8_t)p[i]);
        if (l > n - i) l = n - i;
        int id = tok_lookup(t, p + i, l), bytes[4], nb = 0;
        if (id < 0 && t->byte_fallback) {
            for (size_t j = 0; j < l; j++) {
                char hex[8];
                snprintf(hex, sizeof hex, "<0x%02X>", (uint8_t)p[i + j]);
                bytes[nb] = tok_lookup(t, hex, 6);
                if (bytes[nb++] < 0) break;
            }
            if (bytes[nb - 1] < 0) nb = 0;
        }
        i += l;
        if (id < 0 && nb == 0) { /* unk */
            if (t->fuse_unk && prev_unk) continue;
            prev_unk = 1;
            bytes[nb++] = t->unk;
        } else {
            prev_unk = 0;
            if (id >= 0) bytes[nb++] = id;
        }
        for (int j = 0; j < nb; j++) {
            s->id[nsym] = bytes[j];
            s->prev[nsym] = nsym ? (uint32_t)(nsym - 1) : NONE;
            s->next[nsym] = NONE;
            if (nsym) s->next[nsym - 1] = (uint32_t)nsym;
            nsym++;
        }
    }
    return tok_bpe_run(t, s, nsym, out);
}

/* Text spans of a SentencePiece-style tokenizer.json: spaces to U+2581, the leading marker
 * as the normalizer or Metaspace asks (first: only the span at the start of the text), then
 * BPE of the whole span or, with Metaspace split, of each U+2581-led word. */
int tok_hfspm_encode(const tok_tokenizer *t, const svec *a, const char *text, ivec *ids) {
    bpe_scratch s = {0};
    char *buf = NULL;
    size_t bufcap = 0;
    int rc = 0;
    for (size_t i = 0; i < a->n && rc == 0; i++) {
        const span *sp = &a->v[i];
        if (sp->id >= 0) {
            rc = tok_ivec_push(ids, sp->id);
            continue;
        }
        size_t spaces = 1;
        for (size_t j = 0; j < sp->n; j++) spaces += sp->p[j] == ' ';
        if (sp->n > SIZE_MAX / 4 || spaces > (SIZE_MAX - sp->n) / 3) {
            rc = -1;
            break;
        }
        size_t need = sp->n + 3 * spaces, k = 0;
        if (need > bufcap) {
            char *nb = realloc(buf, need);
            if (!nb) {
                rc = -1;
                break;
            }
            buf = nb;
            bufcap = need;
        }
        int marked = sp->n && (sp->p[0] == ' ' || (sp->n >= 3 && !memcmp(sp->p, "\xE2\x96\x81", 3)));
        int prepend = t->hf_prepend == HF_PREPEND_ALWAYS ||
                      (t->hf_prepend == HF_PREPEND_UNLESS_MARKED && !marked) ||
                      (t->hf_prepend == HF_PREPEND_FIRST_UNLESS_MARKED && !marked && sp->p == text);
        if (prepend) {
            memcpy(buf, "\xE2\x96\x81", 3);
            k = 3;
        }
        for (size_t j = 0; j < sp->n; j++) {
            if (sp->p[j] == ' ') {
                memcpy(buf + k, "\xE2\x96\x81", 3);
                k += 3;
            } else {
                buf[k++] = sp->p[j];
            }
        }
        size_t from = 0;
        for (size_t j = 1; t->hf_meta_split && j + 3 <= k && rc == 0; j++)
            if (!memcmp(buf + j, "\xE2\x96\x81", 3)) {
                rc = hfspm_word(t, &s, buf + from, j - from, ids);
                from = j;
            }
        if (rc == 0) rc = hfspm_word(t, &s, buf + from, k - from, ids);
    }
    free(buf);
    tok_bpe_scratch_free(&s);
    return rc;
}
