/* tokenizer_gguf.c — the tokenizer of a GGUF file: the vocabulary, token types, scores and merges of
 * tokenizer.ggml.*, as llama.cpp reads them ("gpt2": byte-level BPE, "llama": SentencePiece BPE). */
#include <limits.h>
#include <stdio.h>

#include "tokenizer_int.h"

/* tokenizer.ggml.pre -> split rules, following llama.cpp's grouping of pre-tokenizer names. */
static int rules_from_pre(tok_tokenizer *t, const char *pre) {
    static const char *gpt2[] = {"default", "gpt2", "gpt-2", "phi-2", "jina-es", "jina-de",
                                 "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code",
                                 "roberta-bpe", "gigachat", NULL};
    static const char *smollm[] = {"smollm", "starcoder", "refact", "command-r", "codeshell",
                                   "exaone", "minerva-7b", NULL};
    static const char *llama3[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", NULL};
    static const char *qwen2[] = {"qwen2", "deepseek-r1-qwen", "megrez", NULL};
    for (int i = 0; gpt2[i]; i++)
        if (!strcmp(pre, gpt2[i])) {
            /* llama.cpp's "default" additionally isolates some punctuation and 3-digit
             * groups; GPT-2's own rule is what "default" means for HF-converted models. */
            t->rules[t->n_rules++] = PT_GPT2;
            return 0;
        }
    for (int i = 0; smollm[i]; i++)
        if (!strcmp(pre, smollm[i])) {
            t->rules[t->n_rules++] = PT_DIGITS_EACH;
            t->rules[t->n_rules++] = PT_GPT2;
            return 0;
        }
    for (int i = 0; llama3[i]; i++)
        if (!strcmp(pre, llama3[i])) {
            t->rules[t->n_rules++] = PT_LLAMA3;
            t->ignore_merges = 1;
            return 0;
        }
    for (int i = 0; qwen2[i]; i++)
        if (!strcmp(pre, qwen2[i])) {
            t->rules[t->n_rules++] = PT_QWEN2;
            return 0;
        }
    return -1;
}

/* An added token and its text's length, sorted by plain qsort: the element carries the length, so
 * no context pointer (qsort_r) is needed, which not every C library has (Emscripten's). */
typedef struct {
    uint32_t len;
    added_tok tok;
} added_by_len;
static int cmp_added_len_desc(const void *pa, const void *pb) {
    const added_by_len *a = pa, *b = pb;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->tok.id < b->tok.id ? -1 : a->tok.id > b->tok.id;
}

/* The tokenizer.ggml.* entries a vocabulary is built from, their shapes checked. */
typedef struct {
    int spm;                /* "llama": SentencePiece BPE; else "gpt2", byte-level BPE */
    const char *pre;        /* the pre-tokenizer's name */
    const gguf_kv *toks;    /* pieces: a string array of 1..MAX_VOCAB entries */
    const gguf_kv *types;   /* token types, one per token; may be NULL */
    const gguf_kv *scores;  /* SentencePiece only: one float score per token */
    const gguf_kv *merges;  /* byte-level only: "a b" strings by rank; may be NULL */
} gguf_vocab;

static int find_vocab(const gguf_file *g, gguf_vocab *v, char *err, size_t errlen) {
    const char *model = gguf_get_str(g, "tokenizer.ggml.model");
    if (!model) {
        tok_seterr(err, errlen, "GGUF: no tokenizer.ggml.model");
        return -1;
    }
    const int spm = strcmp(model, "llama") == 0;
    if (!spm && strcmp(model, "gpt2") != 0) {
        tok_seterr(err, errlen,
                   "GGUF: tokenizer.ggml.model is \"%s\"; supported: \"gpt2\" (byte-level BPE), \"llama\" (SentencePiece BPE)",
                   model);
        return -1;
    }
    const char *pre = gguf_get_str(g, "tokenizer.ggml.pre");
    if (!pre) pre = "default"; /* what llama.cpp assumes for old files */
    const gguf_kv *toks = gguf_get(g, "tokenizer.ggml.tokens");
    if (!toks || toks->type != GGUF_TYPE_ARRAY || toks->arr_type != GGUF_TYPE_STRING || !toks->arr_str ||
        toks->arr_n == 0 || toks->arr_n > MAX_VOCAB) {
        tok_seterr(err, errlen, "GGUF: tokenizer.ggml.tokens missing or not a string array of 1..%d entries",
                   MAX_VOCAB);
        return -1;
    }
    const gguf_kv *types = gguf_get(g, "tokenizer.ggml.token_type");
    if (types && (types->type != GGUF_TYPE_ARRAY || types->arr_n != toks->arr_n)) {
        tok_seterr(err, errlen, "GGUF: tokenizer.ggml.token_type does not match the token count");
        return -1;
    }
    /* SentencePiece merges by score: without one score per token there is no order to merge in. */
    const gguf_kv *scores = gguf_get(g, "tokenizer.ggml.scores");
    if (spm && !scores) {
        tok_seterr(err, errlen, "GGUF: a \"llama\" (SentencePiece) vocabulary needs tokenizer.ggml.scores");
        return -1;
    }
    if (spm && (scores->type != GGUF_TYPE_ARRAY ||
                (scores->arr_type != GGUF_TYPE_FLOAT32 && scores->arr_type != GGUF_TYPE_FLOAT64) ||
                scores->arr_n != toks->arr_n)) {
        tok_seterr(err, errlen,
                   "GGUF: tokenizer.ggml.scores must be a float array with one score per token (%llu scores for %llu tokens)",
                   scores->type == GGUF_TYPE_ARRAY ? (unsigned long long)scores->arr_n : 0ull,
                   (unsigned long long)toks->arr_n);
        return -1;
    }
    const gguf_kv *merges = spm ? NULL : gguf_get(g, "tokenizer.ggml.merges");
    if (merges && (merges->type != GGUF_TYPE_ARRAY || merges->arr_type != GGUF_TYPE_STRING ||
                   !merges->arr_str || merges->arr_n > INT_MAX)) {
        tok_seterr(err, errlen, "GGUF: tokenizer.ggml.merges is not a string array");
        return -1;
    }
    *v = (gguf_vocab){spm, pre, toks, types, scores, merges};
    return 0;
}

/* Every token's piece, flags and (SentencePiece) score; ttype gets its llama.cpp type and
 * *n_added counts the tokens matched in the text. */
static int read_tokens(tok_tokenizer *t, const gguf_vocab *v, uint8_t *ttype, size_t *n_added, char *err,
                       size_t errlen) {
    for (int i = 0; i < t->n_vocab; i++) {
        int64_t ty = 1;
        if (v->types && gguf_arr_int(v->types, (uint64_t)i, &ty)) {
            tok_seterr(err, errlen, "GGUF: tokenizer.ggml.token_type[%d] unreadable", i);
            return -1;
        }
        /* llama.cpp's types: 0 undefined, 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte. */
        if (ty < 0 || ty > 6) {
            tok_seterr(err, errlen, "GGUF: tokenizer.ggml.token_type[%d] is %lld; token types are 0..6", i, (long long)ty);
            return -1;
        }
        ttype[i] = (uint8_t)ty;
        if (v->spm) {
            double sc;
            if (gguf_arr_float(v->scores, (uint64_t)i, &sc)) {
                tok_seterr(err, errlen, "GGUF: tokenizer.ggml.scores[%d] unreadable", i);
                return -1;
            }
            t->score[i] = (float)sc;
        }
        /* llama.cpp: unknown (2) and control (3) tokens are matched in the text only when
         * parsing specials; user-defined (4) ones always. All three are stored as raw text. */
        if (ty == 2 || ty == 3) t->flags[i] = TF_SPECIAL | TF_ADDED | TF_RAW;
        else if (ty == 4) t->flags[i] = TF_ADDED | TF_ALWAYS | TF_RAW;
        if (t->flags[i] & TF_ADDED) (*n_added)++;
        size_t len = v->toks->arr_str_len ? v->toks->arr_str_len[i] : strlen(v->toks->arr_str[i]);
        if (tok_set_piece(t, i, v->toks->arr_str[i], len, 1)) {
            tok_seterr(err, errlen, "tokenizer: out of memory");
            return -1;
        }
    }
    return 0;
}

/* The tokens matched in the text before BPE, in the order they are tried. */
static int list_added(tok_tokenizer *t, size_t n_added) {
    t->added = calloc(n_added ? n_added : 1, sizeof *t->added);
    if (!t->added) return -1;
    for (int i = 0; i < t->n_vocab; i++)
        if ((t->flags[i] & TF_ADDED) && t->text_len[i] > 0) t->added[t->n_added++].id = i;
    /* llama.cpp tries longer special tokens first, over the whole text. */
    added_by_len *order = malloc((t->n_added ? t->n_added : 1) * sizeof *order);
    if (!order) return -1;
    for (size_t k = 0; k < t->n_added; k++) order[k] = (added_by_len){t->text_len[t->added[k].id], t->added[k]};
    qsort(order, t->n_added, sizeof *order, cmp_added_len_desc);
    for (size_t k = 0; k < t->n_added; k++) t->added[k] = order[k].tok;
    free(order);
    return 0;
}

/* tokenizer.ggml.merges, ranked by position. -1: out of memory. */
static int read_merges(tok_tokenizer *t, const gguf_kv *merges) {
    size_t n_merges = merges ? merges->arr_n : 0;
    if (tok_merges_alloc(t, n_merges)) return -1;
    size_t max_merge = 0;
    for (size_t i = 0; i < n_merges; i++) {
        size_t len = merges->arr_str_len ? merges->arr_str_len[i] : strlen(merges->arr_str[i]);
        if (len > max_merge) max_merge = len;
    }
    char *buf = malloc(max_merge + 1);
    if (!buf) return -1;
    for (size_t i = 0; i < n_merges; i++) {
        const char *m = merges->arr_str[i];
        size_t len = merges->arr_str_len ? merges->arr_str_len[i] : strlen(m);
        /* "a b": the separator is the first space after the first byte (a part may be a lone space
         * only in non-byte-level vocabularies, which is why the search starts at 1). */
        const char *sp = len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
        if (!sp) continue;
        size_t na = (size_t)(sp - m);
        if (tok_add_merge(t, m, na, sp + 1, len - na - 1, (int)i, 0, buf)) {
            free(buf);
            return -1;
        }
    }
    free(buf);
    return 0;
}

/* BOS and EOS, what add_special adds around the text, SentencePiece's unk, space prefix and
 * byte tokens, and the ids that end a generation. */
static void read_special_ids(tok_tokenizer *t, const gguf_file *g) {
    const int n = t->n_vocab;
    int64_t v;
    if (gguf_get_int(g, "tokenizer.ggml.bos_token_id", &v) == 0 && v >= 0 && v < n) t->bos = (int)v;
    if (gguf_get_int(g, "tokenizer.ggml.eos_token_id", &v) == 0 && v >= 0 && v < n) t->eos = (int)v;
    /* llama.cpp: Llama-3 and SentencePiece vocabularies add BOS unless told otherwise; a
     * SentencePiece one without ids uses <unk>=0, <s>=1, </s>=2. */
    int add_bos = t->ignore_merges || t->spm;
    int add_eos = 0, b;
    if (t->spm) {
        if (gguf_get(g, "tokenizer.ggml.bos_token_id") == NULL && n > 1) t->bos = 1;
        if (gguf_get(g, "tokenizer.ggml.eos_token_id") == NULL && n > 2) t->eos = 2;
        t->unk = 0;
        if (gguf_get_int(g, "tokenizer.ggml.unknown_token_id", &v) == 0) t->unk = v >= 0 && v < n ? (int)v : -1;
        t->add_space_prefix = 1;
        if (gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) == 0) t->add_space_prefix = b;
        tok_spm_byte_tokens(t);
    }
    if (gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == 0) add_bos = b;
    if (gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) == 0) add_eos = b;
    if (add_bos) t->prefix_id = t->bos;
    if (add_eos) t->suffix_id = t->eos;
    tok_add_known_stops(t);
    if (gguf_get_int(g, "tokenizer.ggml.eot_token_id", &v) == 0) tok_add_stop(t, v);
    if (gguf_get_int(g, "tokenizer.ggml.eom_token_id", &v) == 0) tok_add_stop(t, v);
}

tok_tokenizer *tok_from_gguf(const gguf_file *g, char *err, size_t errlen) {
    gguf_vocab v;
    if (find_vocab(g, &v, err, errlen)) return NULL;
    uint8_t *ttype = NULL;
    size_t n_added = 0;
    tok_tokenizer *t = tok_new();
    if (!t) goto oom;
    t->spm = v.spm;
    if (!v.spm && rules_from_pre(t, v.pre)) {
        tok_seterr(err, errlen, "GGUF: unsupported tokenizer.ggml.pre \"%s\" (known: default/gpt2, smollm, "
                                "llama-bpe/llama3, qwen2 and their aliases)", v.pre);
        tok_free(t);
        return NULL;
    }
    int n = (int)v.toks->arr_n;
    if (tok_vocab_alloc(t, n)) goto oom;
    ttype = malloc((size_t)n);
    if (!ttype || (v.spm && !(t->score = malloc((size_t)n * sizeof *t->score)))) goto oom;
    if (read_tokens(t, &v, ttype, &n_added, err, errlen)) goto fail;
    if (v.spm ? tok_finish_vocab_spm(t, ttype) : tok_finish_vocab(t)) goto oom;
    free(ttype);
    ttype = NULL;
    if (list_added(t, n_added) || read_merges(t, v.merges)) goto oom;
    read_special_ids(t, g);
    return t;
oom:
    tok_seterr(err, errlen, "tokenizer: out of memory");
fail:
    free(ttype);
    tok_free(t);
    return NULL;
}
