/* tokenizer_int.h — internals shared by the tokenizer*.c files: the tokenizer itself, the vocabulary
 * index, the loaders' building blocks and the encoder's symbol lists and candidate heap. */
#ifndef INGOT_TOKENIZER_INT_H
#define INGOT_TOKENIZER_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pretokenize.h"
#include "tokenizer.h"

#define MAX_VOCAB (1 << 24)
#define MAX_RULES 16

enum {
    TF_SPECIAL = 1, /* control token: hidden when decoding with skip_special */
    TF_ADDED = 2,   /* matched as a whole in the text before pre-tokenization */
    TF_RAW = 4,     /* stored as raw text, not in the byte-level alphabet */
    TF_ALWAYS = 8,  /* matched even without parse_special (llama.cpp user-defined, HF non-special added) */
};

typedef struct {
    int32_t id;
    uint8_t lstrip, rstrip, single_word, normalized;
} added_tok;

typedef struct {
    uint64_t key; /* (left id << 32) | right id; 0 marks an empty slot (never a real pair: see mkey) */
    int32_t rank;
    int32_t result;
} merge_slot;

struct tok_tokenizer {
    int n_vocab;
    char **text;       /* stored piece (NUL-terminated; may be "" for ids that are holes) */
    uint32_t *text_len;
    char **raw;        /* decoded bytes */
    uint32_t *raw_len;
    uint8_t *flags;
    int32_t *hslots;   /* open addressing piece -> id, -1 empty */
    uint32_t hmask;
    merge_slot *mslots;
    uint32_t mmask;
    int32_t byte_id[256]; /* token of the single byte-level character for each byte, -1 if none */
    added_tok *added;  /* tokens matched in the text, in matching priority order */
    size_t n_added;
    pt_rule rules[MAX_RULES];
    int n_rules;
    int hf;            /* HF matching semantics for added tokens (else llama.cpp's) */
    int ignore_merges;
    int bos, eos, unk;
    int prefix_id, suffix_id; /* added around the text when add_special */
    int32_t stop[TOK_MAX_STOP_IDS]; /* ids that end a generation (see tok_stop_ids) */
    int n_stop;
    /* SentencePiece ("llama" GGUF vocabulary): merges by piece score instead of merge rank. */
    int spm;
    int add_space_prefix; /* prepend U+2581 to text that starts the input or follows a token */
    float *score;
    int32_t spm_byte[256]; /* byte-fallback token of each byte (<0xNN>), else unk, else -1 */
    /* tokenizer.json in SentencePiece style: spaces as U+2581, characters without a token
     * spelled with <0xNN> tokens (byte_fallback), merges by rank as in any HF BPE. */
    int hfspm;
    int hf_prepend;       /* HF_PREPEND_*: when a text span gets a leading U+2581 */
    int hf_meta_split;    /* Metaspace split: BPE each U+2581-led word on its own */
    int byte_fallback, fuse_unk;
    int strip_lead;       /* the decoder drops one leading space of the output */
    int dec_bytes;        /* the decoder has ByteFallback: <0xNN> pieces decode to their byte */
};

enum { HF_PREPEND_NEVER, HF_PREPEND_ALWAYS, HF_PREPEND_FIRST, HF_PREPEND_UNLESS_MARKED, HF_PREPEND_FIRST_UNLESS_MARKED };

/* ---------- vocabulary and lifecycle (tokenizer.c) ---------- */

void tok_seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static inline uint64_t tok_hash(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* The id of a stored piece, -1 if none. Inline: the encoders look up every candidate piece. */
static inline int tok_lookup(const tok_tokenizer *t, const char *s, size_t n) {
    uint32_t i = (uint32_t)tok_hash(s, n) & t->hmask;
    for (;;) {
        int32_t id = t->hslots[i];
        if (id < 0) return -1;
        if (t->text_len[id] == n && memcmp(t->text[id], s, n) == 0) return id;
        i = (i + 1) & t->hmask;
    }
}

tok_tokenizer *tok_new(void);
int tok_vocab_alloc(tok_tokenizer *t, int n);
int tok_set_piece(tok_tokenizer *t, int id, const char *s, size_t n, int overwrite);
int tok_finish_vocab(tok_tokenizer *t);
/* Maps bytes to the byte-level alphabet; o needs 2*n bytes. Returns the length. */
size_t tok_to_bytelevel(const uint8_t *s, size_t n, char *o);
void tok_add_stop(tok_tokenizer *t, int64_t id);
void tok_add_known_stops(tok_tokenizer *t);

/* ---------- merges and byte-level BPE (tokenizer_bpe.c) ---------- */

int tok_merges_alloc(tok_tokenizer *t, size_t n);
int tok_add_merge(tok_tokenizer *t, const char *a, size_t na, const char *b, size_t nb, int rank, int overwrite,
                  char *buf);

typedef struct {
    int32_t *v;
    size_t n, cap;
} ivec;

static inline int tok_ivec_push(ivec *a, int32_t x) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *nv = realloc(a->v, nc * sizeof *nv);
        if (!nv) return -1;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = x;
    return 0;
}

/* A candidate merge of the symbols at l and r, for both BPE flavours: a
 * byte-level merge by rank (key = rank) and a SentencePiece merge by score
 * (key = -score). Lower keys go first, equal keys leftmost first. a and b are
 * the flavour's own record of the pair when it was pushed (byte-level: the
 * two token ids; SentencePiece: the joined length), checked when it is popped
 * because a neighbour may have merged meanwhile. Ranks stay below 2^24, so a
 * float key holds them exactly. */
typedef struct {
    float key;
    uint32_t l, r;
    int32_t a, b;
} cand;

typedef struct {
    cand *v;
    size_t n, cap;
} cand_heap;

int tok_cand_push(cand_heap *h, cand c);
cand tok_cand_pop(cand_heap *h);

/* no neighbour: the end of a symbol list */
#define NONE UINT32_MAX

typedef struct {
    int32_t *id;
    uint32_t *prev, *next;
    cand_heap heap;
    size_t cap;
    char *bl; /* byte-level form of a word (ignore_merges lookups) */
} bpe_scratch;

int tok_bpe_reserve(bpe_scratch *s, size_t n);
void tok_bpe_scratch_free(bpe_scratch *s);
int tok_bpe_word(const tok_tokenizer *t, bpe_scratch *s, const uint8_t *w, size_t n, ivec *out);
int tok_bpe_run(const tok_tokenizer *t, bpe_scratch *s, size_t n, ivec *out);

/* ---------- encoding (tokenizer_encode.c, tokenizer_spm.c) ---------- */

/* A span of text: a token already decided (id >= 0) or text to pre-tokenize (id < 0). */
typedef struct {
    const char *p;
    size_t n;
    int32_t id;
} span;

typedef struct {
    span *v;
    size_t n, cap;
} svec;

/* ---------- SentencePiece (tokenizer_spm.c) ---------- */

int tok_finish_vocab_spm(tok_tokenizer *t, const uint8_t *ttype);
void tok_spm_byte_tokens(tok_tokenizer *t);
int tok_spm_encode(const tok_tokenizer *t, const svec *a, ivec *ids);
int tok_hfspm_encode(const tok_tokenizer *t, const svec *a, const char *text, ivec *ids);

#endif
