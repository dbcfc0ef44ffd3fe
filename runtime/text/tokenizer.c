/* tokenizer.c — byte-level BPE tokenizer from GGUF metadata or a Hugging Face tokenizer.json. */
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <sys/stat.h>

#include "pretokenize.h"

#define MAX_VOCAB (1 << 24)
#define MAX_RULES 16
#define MAX_JSON_BYTES ((size_t)1 << 30)

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

/* ---------- small helpers ---------- */

static void seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static uint64_t hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* Byte-level alphabet (GPT-2): printable Latin-1 bytes stand for themselves, the
 * other 68 bytes are shifted to U+0100.. in byte order, so every byte is a visible char. */
static uint32_t byte_cp[256];
static int16_t cp_byte[324];

static void init_bytelevel_once(void) {
    int k = 0;
    for (int i = 0; i < 324; i++) cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        byte_cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + k++);
        cp_byte[byte_cp[b]] = (int16_t)b;
    }
}

/* Tokenizers may be loaded from several threads; the tables are built exactly once. */
static void init_bytelevel(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_bytelevel_once);
}

static size_t put_utf8(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* Maps bytes to the byte-level alphabet; o needs 2*n bytes. Returns the length. */
static size_t to_bytelevel(const uint8_t *s, size_t n, char *o) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += put_utf8(byte_cp[s[i]], o + k);
    return k;
}

/* Maps a byte-level string back to bytes into o (capacity >= n); -1 if a char is outside the alphabet. */
static long from_bytelevel(const char *s, size_t n, char *o) {
    size_t pos = 0, k = 0;
    while (pos < n) {
        uint32_t cp;
        int cls;
        pos += pt_char((const uint8_t *)s, n, pos, &cp, &cls);
        if (cp >= 324 || cp_byte[cp] < 0) return -1;
        o[k++] = (char)cp_byte[cp];
    }
    return (long)k;
}

/* ---------- vocabulary ---------- */

static int vocab_alloc(tok_tokenizer *t, int n) {
    t->n_vocab = n;
    t->text = calloc((size_t)n, sizeof *t->text);
    t->text_len = calloc((size_t)n, sizeof *t->text_len);
    t->raw = calloc((size_t)n, sizeof *t->raw);
    t->raw_len = calloc((size_t)n, sizeof *t->raw_len);
    t->flags = calloc((size_t)n, 1);
    uint32_t cap = 16;
    while (cap < (uint32_t)n * 2u) cap <<= 1;
    t->hslots = malloc(cap * sizeof *t->hslots);
    t->hmask = cap - 1;
    if (!t->text || !t->text_len || !t->raw || !t->raw_len || !t->flags || !t->hslots) return -1;
    memset(t->hslots, 0xff, cap * sizeof *t->hslots);
    return 0;
}

static int lookup(const tok_tokenizer *t, const char *s, size_t n) {
    uint32_t i = (uint32_t)hash_bytes(s, n) & t->hmask;
    for (;;) {
        int32_t id = t->hslots[i];
        if (id < 0) return -1;
        if (t->text_len[id] == n && memcmp(t->text[id], s, n) == 0) return id;
        i = (i + 1) & t->hmask;
    }
}

/* Sets the piece of id and indexes it. overwrite: a later id with the same piece
 * takes over the lookup (llama.cpp's map assignment); otherwise the first stays. */
static int set_piece(tok_tokenizer *t, int id, const char *s, size_t n, int overwrite) {
    if (n > UINT32_MAX - 1) return -1;
    char *c = malloc(n + 1);
    if (!c) return -1;
    memcpy(c, s, n);
    c[n] = 0;
    free(t->text[id]);
    t->text[id] = c;
    t->text_len[id] = (uint32_t)n;
    uint32_t i = (uint32_t)hash_bytes(s, n) & t->hmask;
    for (;;) {
        int32_t o = t->hslots[i];
        if (o < 0) {
            t->hslots[i] = id;
            return 0;
        }
        if (o == id) return 0;
        if (t->text_len[o] == n && memcmp(t->text[o], s, n) == 0) {
            if (overwrite) t->hslots[i] = id;
            return 0;
        }
        i = (i + 1) & t->hmask;
    }
}

/* Fills raw bytes for every token: byte-level decoding, or the text itself for raw tokens. */
static int finish_vocab(tok_tokenizer *t) {
    for (int id = 0; id < t->n_vocab; id++) {
        if (!t->text[id] && set_piece(t, id, "", 0, 0)) return -1;
        size_t n = t->text_len[id];
        char *r = malloc(n + 1);
        if (!r) return -1;
        long k = -1;
        if (!(t->flags[id] & TF_RAW)) k = from_bytelevel(t->text[id], n, r);
        if (k < 0) {
            memcpy(r, t->text[id], n);
            k = (long)n;
        }
        r[k] = 0;
        t->raw[id] = r;
        t->raw_len[id] = (uint32_t)k;
    }
    for (int b = 0; b < 256; b++) {
        char o[4];
        size_t n = put_utf8(byte_cp[b], o);
        t->byte_id[b] = lookup(t, o, n);
    }
    return 0;
}

/* ---------- merges ---------- */

static uint64_t mkey(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1; }

static int merges_alloc(tok_tokenizer *t, size_t n) {
    uint32_t cap = 16;
    while (cap < n * 2 && cap < (1u << 30)) cap <<= 1;
    t->mslots = calloc(cap, sizeof *t->mslots);
    t->mmask = cap - 1;
    return t->mslots ? 0 : -1;
}

static const merge_slot *merge_find(const tok_tokenizer *t, int32_t a, int32_t b) {
    uint64_t k = mkey(a, b);
    uint32_t i = (uint32_t)hash_bytes(&k, sizeof k) & t->mmask;
    for (;;) {
        const merge_slot *m = &t->mslots[i];
        if (m->key == 0) return NULL;
        if (m->key == k) return m;
        i = (i + 1) & t->mmask;
    }
}

/* Adds merge "a"+"b" with the given rank. Merges whose parts or result are not in the
 * vocabulary can never apply and are skipped. overwrite: a later duplicate wins (HF's map). */
static int add_merge(tok_tokenizer *t, const char *a, size_t na, const char *b, size_t nb, int rank,
                     int overwrite, char *buf) {
    int ia = lookup(t, a, na), ib = lookup(t, b, nb);
    if (ia < 0 || ib < 0) return 0;
    memcpy(buf, a, na);
    memcpy(buf + na, b, nb);
    int ir = lookup(t, buf, na + nb);
    if (ir < 0) return 0;
    uint64_t k = mkey(ia, ib);
    uint32_t i = (uint32_t)hash_bytes(&k, sizeof k) & t->mmask;
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

/* ---------- lifecycle ---------- */

void tok_free(tok_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_vocab; i++) {
        if (t->text) free(t->text[i]);
        if (t->raw) free(t->raw[i]);
    }
    free(t->text);
    free(t->text_len);
    free(t->raw);
    free(t->raw_len);
    free(t->flags);
    free(t->hslots);
    free(t->mslots);
    free(t->added);
    free(t->score);
    free(t);
}

static tok_tokenizer *tok_new(void) {
    init_bytelevel();
    tok_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->bos = t->eos = t->unk = t->prefix_id = t->suffix_id = -1;
    return t;
}

int tok_vocab_size(const tok_tokenizer *t) { return t->n_vocab; }
int tok_bos(const tok_tokenizer *t) { return t->bos; }
int tok_eos(const tok_tokenizer *t) { return t->eos; }

/* ---------- stop ids ---------- */

static void add_stop(tok_tokenizer *t, int64_t id) {
    if (id < 0 || id >= t->n_vocab) return;
    for (int i = 0; i < t->n_stop; i++)
        if (t->stop[i] == id) return;
    if (t->n_stop < TOK_MAX_STOP_IDS) t->stop[t->n_stop++] = (int32_t)id;
}

/* Instruct models end a turn with a token of their own that is often not the
 * vocabulary's EOS (Llama 3 <|eot_id|>, ChatML <|im_end|> where EOS is
 * <|endoftext|>, Gemma <end_of_turn>, Phi-3 <|end|>). When the metadata does
 * not list it, these spellings of a control token are taken as end-of-turn,
 * as llama.cpp does for its end-of-generation set. */
static const char *const END_OF_TURN_TEXTS[] = {
    "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "<|return|>", "<|end_of_turn|>",
};

static void add_known_stops(tok_tokenizer *t) {
    add_stop(t, t->eos);
    for (size_t i = 0; i < sizeof END_OF_TURN_TEXTS / sizeof *END_OF_TURN_TEXTS; i++) {
        const int id = lookup(t, END_OF_TURN_TEXTS[i], strlen(END_OF_TURN_TEXTS[i]));
        if (id >= 0 && (t->flags[id] & TF_SPECIAL)) add_stop(t, id);
    }
}

/* eos_token_id of a Hugging Face config: an id or a list of ids. */
static void add_config_stops(tok_tokenizer *t, const cJSON *cfg) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(cfg, "eos_token_id");
    if (cJSON_IsNumber(e)) add_stop(t, (int64_t)e->valuedouble);
    const cJSON *it;
    if (cJSON_IsArray(e))
        cJSON_ArrayForEach(it, e) if (cJSON_IsNumber(it)) add_stop(t, (int64_t)it->valuedouble);
}

int tok_is_stop(const tok_tokenizer *t, int id) {
    for (int i = 0; i < t->n_stop; i++)
        if (t->stop[i] == id) return 1;
    return 0;
}

int tok_stop_ids(const tok_tokenizer *t, const int32_t **ids) {
    *ids = t->stop;
    return t->n_stop;
}
int tok_add_bos(const tok_tokenizer *t) { return t->prefix_id >= 0; }
int tok_is_special(const tok_tokenizer *t, int id) {
    return id >= 0 && id < t->n_vocab && (t->flags[id] & TF_SPECIAL);
}
int tok_find(const tok_tokenizer *t, const char *piece) { return lookup(t, piece, strlen(piece)); }

const char *tok_piece(const tok_tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = t->raw_len[id];
    return t->raw[id];
}

/* ---------- GGUF ---------- */

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

static int cmp_added_len_desc(const void *pa, const void *pb, void *ctx) {
    const tok_tokenizer *t = ctx;
    const added_tok *a = pa, *b = pb;
    uint32_t la = t->text_len[a->id], lb = t->text_len[b->id];
    if (la != lb) return la > lb ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* SentencePiece pieces as text: U+2581 stands for a space in normal pieces; byte pieces
 * <0xNN> are the byte itself; user-defined, control and unknown pieces are their text
 * (control/unknown ones are hidden by skip_special); undefined and unused pieces render
 * as nothing, as llama.cpp suppresses them. */
static int finish_vocab_spm(tok_tokenizer *t, const uint8_t *ttype) {
    for (int id = 0; id < t->n_vocab; id++) {
        if (!t->text[id] && set_piece(t, id, "", 0, 0)) return -1;
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
static void spm_byte_tokens(tok_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int id = lookup(t, hex, 6);
        if (id < 0) {
            char c = (char)b;
            id = lookup(t, &c, 1);
        }
        t->spm_byte[b] = id >= 0 ? id : t->unk;
    }
}

tok_tokenizer *tok_from_gguf(const gguf_file *g, char *err, size_t errlen) {
    const char *model = gguf_get_str(g, "tokenizer.ggml.model");
    if (!model) {
        seterr(err, errlen, "GGUF: no tokenizer.ggml.model");
        return NULL;
    }
    const int spm = strcmp(model, "llama") == 0;
    if (!spm && strcmp(model, "gpt2") != 0) {
        seterr(err, errlen,
               "GGUF: tokenizer.ggml.model is \"%s\"; supported: \"gpt2\" (byte-level BPE), \"llama\" (SentencePiece BPE)",
               model);
        return NULL;
    }
    const char *pre = gguf_get_str(g, "tokenizer.ggml.pre");
    if (!pre) pre = "default"; /* what llama.cpp assumes for old files */
    const gguf_kv *toks = gguf_get(g, "tokenizer.ggml.tokens");
    if (!toks || toks->type != GGUF_TYPE_ARRAY || toks->arr_type != GGUF_TYPE_STRING || !toks->arr_str ||
        toks->arr_n == 0 || toks->arr_n > MAX_VOCAB) {
        seterr(err, errlen, "GGUF: tokenizer.ggml.tokens missing or not a string array of 1..%d entries",
               MAX_VOCAB);
        return NULL;
    }
    const gguf_kv *types = gguf_get(g, "tokenizer.ggml.token_type");
    if (types && (types->type != GGUF_TYPE_ARRAY || types->arr_n != toks->arr_n)) {
        seterr(err, errlen, "GGUF: tokenizer.ggml.token_type does not match the token count");
        return NULL;
    }
    /* SentencePiece merges by score: without one score per token there is no order to merge in. */
    const gguf_kv *scores = gguf_get(g, "tokenizer.ggml.scores");
    if (spm && !scores) {
        seterr(err, errlen, "GGUF: a \"llama\" (SentencePiece) vocabulary needs tokenizer.ggml.scores");
        return NULL;
    }
    if (spm && (scores->type != GGUF_TYPE_ARRAY ||
                (scores->arr_type != GGUF_TYPE_FLOAT32 && scores->arr_type != GGUF_TYPE_FLOAT64) ||
                scores->arr_n != toks->arr_n)) {
        seterr(err, errlen,
               "GGUF: tokenizer.ggml.scores must be a float array with one score per token (%llu scores for %llu tokens)",
               scores->type == GGUF_TYPE_ARRAY ? (unsigned long long)scores->arr_n : 0ull,
               (unsigned long long)toks->arr_n);
        return NULL;
    }
    const gguf_kv *merges = spm ? NULL : gguf_get(g, "tokenizer.ggml.merges");
    if (merges && (merges->type != GGUF_TYPE_ARRAY || merges->arr_type != GGUF_TYPE_STRING ||
                   !merges->arr_str || merges->arr_n > INT_MAX)) {
        seterr(err, errlen, "GGUF: tokenizer.ggml.merges is not a string array");
        return NULL;
    }
    uint8_t *ttype = NULL;
    tok_tokenizer *t = tok_new();
    if (!t) goto oom;
    t->spm = spm;
    if (!spm && rules_from_pre(t, pre)) {
        seterr(err, errlen, "GGUF: unsupported tokenizer.ggml.pre \"%s\" (known: default/gpt2, smollm, "
                            "llama-bpe/llama3, qwen2 and their aliases)", pre);
        tok_free(t);
        return NULL;
    }
    int n = (int)toks->arr_n;
    if (vocab_alloc(t, n)) goto oom;
    ttype = malloc((size_t)n);
    if (!ttype || (spm && !(t->score = malloc((size_t)n * sizeof *t->score)))) goto oom;
    size_t n_special = 0, max_len = 0;
    for (int i = 0; i < n; i++) {
        int64_t ty = 1;
        if (types && gguf_arr_int(types, (uint64_t)i, &ty)) {
            seterr(err, errlen, "GGUF: tokenizer.ggml.token_type[%d] unreadable", i);
            goto fail;
        }
        /* llama.cpp's types: 0 undefined, 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte. */
        if (ty < 0 || ty > 6) {
            seterr(err, errlen, "GGUF: tokenizer.ggml.token_type[%d] is %lld; token types are 0..6", i, (long long)ty);
            goto fail;
        }
        ttype[i] = (uint8_t)ty;
        if (spm) {
            double sc;
            if (gguf_arr_float(scores, (uint64_t)i, &sc)) {
                seterr(err, errlen, "GGUF: tokenizer.ggml.scores[%d] unreadable", i);
                goto fail;
            }
            t->score[i] = (float)sc;
        }
        /* llama.cpp: unknown (2) and control (3) tokens are matched in the text only when
         * parsing specials; user-defined (4) ones always. All three are stored as raw text. */
        if (ty == 2 || ty == 3) t->flags[i] = TF_SPECIAL | TF_ADDED | TF_RAW;
        else if (ty == 4) t->flags[i] = TF_ADDED | TF_ALWAYS | TF_RAW;
        if (t->flags[i] & TF_ADDED) n_special++;
        size_t len = toks->arr_str_len ? toks->arr_str_len[i] : strlen(toks->arr_str[i]);
        if (len > max_len) max_len = len;
        if (set_piece(t, i, toks->arr_str[i], len, 1)) goto oom;
    }
    if (spm ? finish_vocab_spm(t, ttype) : finish_vocab(t)) goto oom;
    free(ttype);
    ttype = NULL;
    t->added = calloc(n_special ? n_special : 1, sizeof *t->added);
    if (!t->added) goto oom;
    for (int i = 0; i < n; i++)
        if ((t->flags[i] & TF_ADDED) && t->text_len[i] > 0) t->added[t->n_added++].id = i;
    /* llama.cpp tries longer special tokens first, over the whole text. */
    qsort_r(t->added, t->n_added, sizeof *t->added, cmp_added_len_desc, t);

    size_t n_merges = merges ? merges->arr_n : 0;
    if (merges_alloc(t, n_merges)) goto oom;
    size_t max_merge = 0;
    for (size_t i = 0; i < n_merges; i++) {
        size_t len = merges->arr_str_len ? merges->arr_str_len[i] : strlen(merges->arr_str[i]);
        if (len > max_merge) max_merge = len;
    }
    char *buf = malloc(max_merge + 1);
    if (!buf) goto oom;
    for (size_t i = 0; i < n_merges; i++) {
        const char *m = merges->arr_str[i];
        size_t len = merges->arr_str_len ? merges->arr_str_len[i] : strlen(m);
        /* "a b": the separator is the first space after the first byte (a part may be a lone space
         * only in non-byte-level vocabularies, which is why the search starts at 1). */
        const char *sp = len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
        if (!sp) continue;
        size_t na = (size_t)(sp - m);
        if (add_merge(t, m, na, sp + 1, len - na - 1, (int)i, 0, buf)) {
            free(buf);
            goto oom;
        }
    }
    free(buf);

    int64_t v;
    if (gguf_get_int(g, "tokenizer.ggml.bos_token_id", &v) == 0 && v >= 0 && v < n) t->bos = (int)v;
    if (gguf_get_int(g, "tokenizer.ggml.eos_token_id", &v) == 0 && v >= 0 && v < n) t->eos = (int)v;
    /* llama.cpp: Llama-3 and SentencePiece vocabularies add BOS unless told otherwise; a
     * SentencePiece one without ids uses <unk>=0, <s>=1, </s>=2. */
    int add_bos = t->ignore_merges || spm;
    int add_eos = 0, b;
    if (spm) {
        if (gguf_get(g, "tokenizer.ggml.bos_token_id") == NULL && n > 1) t->bos = 1;
        if (gguf_get(g, "tokenizer.ggml.eos_token_id") == NULL && n > 2) t->eos = 2;
        t->unk = 0;
        if (gguf_get_int(g, "tokenizer.ggml.unknown_token_id", &v) == 0) t->unk = v >= 0 && v < n ? (int)v : -1;
        t->add_space_prefix = 1;
        if (gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) == 0) t->add_space_prefix = b;
        spm_byte_tokens(t);
    }
    if (gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == 0) add_bos = b;
    if (gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) == 0) add_eos = b;
    if (add_bos) t->prefix_id = t->bos;
    if (add_eos) t->suffix_id = t->eos;
    add_known_stops(t);
    if (gguf_get_int(g, "tokenizer.ggml.eot_token_id", &v) == 0) add_stop(t, v);
    if (gguf_get_int(g, "tokenizer.ggml.eom_token_id", &v) == 0) add_stop(t, v);
    return t;
oom:
    seterr(err, errlen, "tokenizer: out of memory");
fail:
    free(ttype);
    tok_free(t);
    return NULL;
}

/* ---------- tokenizer.json ---------- */

static char *read_file(const char *path, size_t max, size_t *n_out, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        seterr(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (n < cap) break;
        if (cap >= max) {
            seterr(err, errlen, "%s: larger than %zu bytes", path, max);
            free(buf);
            fclose(f);
            return NULL;
        }
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) free(buf);
        buf = nb;
    }
    if (!buf) {
        seterr(err, errlen, "%s: out of memory", path);
        fclose(f);
        return NULL;
    }
    if (ferror(f)) {
        seterr(err, errlen, "%s: read error", path);
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    *n_out = n;
    return buf;
}

static int jbool(const cJSON *o, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    return dflt;
}

static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Appends the rules of one pre_tokenizer node; sets *bytelevel when a ByteLevel step is seen. */
static int parse_pretok(tok_tokenizer *t, const cJSON *p, int *bytelevel, char *err, size_t errlen) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *type = jstr(p, "type");
    if (!type) {
        seterr(err, errlen, "tokenizer.json: pre_tokenizer without a type");
        return -1;
    }
    if (t->n_rules + 2 > MAX_RULES) {
        seterr(err, errlen, "tokenizer.json: pre_tokenizer too deep");
        return -1;
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers"), *it;
        if (!cJSON_IsArray(list)) {
            seterr(err, errlen, "tokenizer.json: Sequence pre_tokenizer without pretokenizers");
            return -1;
        }
        cJSON_ArrayForEach(it, list) if (parse_pretok(t, it, bytelevel, err, errlen)) return -1;
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) {
        *bytelevel = 1;
        if (jbool(p, "add_prefix_space", 1)) t->rules[t->n_rules++] = PT_PREFIX_SPACE;
        if (jbool(p, "use_regex", 1)) t->rules[t->n_rules++] = PT_GPT2;
        return 0;
    }
    if (!strcmp(type, "Metaspace")) {
        const char *rp = jstr(p, "replacement"), *scheme = jstr(p, "prepend_scheme");
        if (rp && strcmp(rp, "\xE2\x96\x81") != 0) {
            seterr(err, errlen, "tokenizer.json: Metaspace replacement \"%s\" is not supported (only U+2581)", rp);
            return -1;
        }
        /* Metaspace does not add a marker where the text already starts with one. */
        if (!scheme) t->hf_prepend = jbool(p, "add_prefix_space", 1) ? HF_PREPEND_UNLESS_MARKED : HF_PREPEND_NEVER;
        else if (!strcmp(scheme, "always")) t->hf_prepend = HF_PREPEND_UNLESS_MARKED;
        else if (!strcmp(scheme, "first")) t->hf_prepend = HF_PREPEND_FIRST_UNLESS_MARKED;
        else if (!strcmp(scheme, "never")) t->hf_prepend = HF_PREPEND_NEVER;
        else {
            seterr(err, errlen, "tokenizer.json: Metaspace prepend_scheme \"%s\" is not supported", scheme);
            return -1;
        }
        t->hf_meta_split = jbool(p, "split", 1);
        t->hfspm = 1;
        return 0;
    }
    if (!strcmp(type, "Digits")) {
        t->rules[t->n_rules++] = jbool(p, "individual_digits", 0) ? PT_DIGITS_EACH : PT_DIGITS_RUNS;
        return 0;
    }
    if (!strcmp(type, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const char *re = pat ? jstr(pat, "Regex") : NULL;
        const char *behavior = jstr(p, "behavior");
        if (!re) {
            const char *lit = pat ? jstr(pat, "String") : NULL;
            seterr(err, errlen, "tokenizer.json: Split pre_tokenizer with %s%s%s is not supported (only known Regex patterns)",
                   lit ? "String pattern \"" : "no pattern", lit ? lit : "", lit ? "\"" : "");
            return -1;
        }
        pt_rule r;
        if (pt_rule_from_pattern(re, &r)) {
            seterr(err, errlen, "tokenizer.json: unsupported Split regex pattern \"%s\" (known: GPT-2, Llama-3, Qwen2, \\p{N})",
                   re);
            return -1;
        }
        if ((behavior && strcmp(behavior, "Isolated") != 0) || jbool(p, "invert", 0)) {
            seterr(err, errlen, "tokenizer.json: Split behavior \"%s\"%s is not supported (only Isolated)",
                   behavior ? behavior : "?", jbool(p, "invert", 0) ? " with invert" : "");
            return -1;
        }
        t->rules[t->n_rules++] = r;
        return 0;
    }
    seterr(err, errlen, "tokenizer.json: unsupported pre_tokenizer type \"%s\"", type);
    return -1;
}

/* Normalizer of a SentencePiece-style tokenizer.json: Prepend("\u2581") and Replace(" ", "\u2581"),
 * alone or in a Sequence; anything else is refused by name. */
static int parse_norm(tok_tokenizer *t, const cJSON *n, int *replace, char *err, size_t errlen) {
    const char *type = jstr(n, "type");
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers"), *it;
        if (!cJSON_IsArray(list)) {
            seterr(err, errlen, "tokenizer.json: Sequence normalizer without normalizers");
            return -1;
        }
        cJSON_ArrayForEach(it, list) if (parse_norm(t, it, replace, err, errlen)) return -1;
        return 0;
    }
    if (type && !strcmp(type, "Prepend")) {
        const char *pp = jstr(n, "prepend");
        if (pp && !strcmp(pp, "\xE2\x96\x81")) {
            t->hf_prepend = HF_PREPEND_ALWAYS;
            return 0;
        }
    }
    if (type && !strcmp(type, "Replace")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
        const char *from = pat ? jstr(pat, "String") : NULL, *to = jstr(n, "content");
        if (from && to && !strcmp(from, " ") && !strcmp(to, "\xE2\x96\x81")) {
            *replace = 1;
            return 0;
        }
    }
    seterr(err, errlen, "tokenizer.json: normalizer \"%s\" is not supported (only null, or Prepend(\"\xE2\x96\x81\") and "
                        "Replace(\" \", \"\xE2\x96\x81\"))", type ? type : "?");
    return -1;
}

/* Decoder: ByteLevel, or the SentencePiece chain (Replace("\u2581", " "), ByteFallback, Fuse,
 * Strip(" ", 0 or 1, 0)) or Metaspace. Sets *spm for the latter two. */
static int parse_decoder(tok_tokenizer *t, const cJSON *d, int *spm, char *err, size_t errlen) {
    const char *type = jstr(d, "type");
    if (type && !strcmp(type, "ByteLevel")) return 0;
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(d, "decoders"), *it;
        if (!cJSON_IsArray(list)) {
            seterr(err, errlen, "tokenizer.json: Sequence decoder without decoders");
            return -1;
        }
        cJSON_ArrayForEach(it, list) {
            const char *dt = jstr(it, "type");
            const cJSON *pat = cJSON_GetObjectItemCaseSensitive(it, "pattern");
            const char *from = pat ? jstr(pat, "String") : NULL, *to = jstr(it, "content");
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(it, "start"), *sp = cJSON_GetObjectItemCaseSensitive(it, "stop");
            if (dt && !strcmp(dt, "ByteFallback")) t->dec_bytes = 1;
            if (dt && (!strcmp(dt, "ByteFallback") || !strcmp(dt, "Fuse"))) continue;
            if (dt && !strcmp(dt, "Replace") && from && to && !strcmp(from, "\xE2\x96\x81") && !strcmp(to, " ")) continue;
            if (dt && !strcmp(dt, "Strip") && to && !strcmp(to, " ") && cJSON_IsNumber(st) && cJSON_IsNumber(sp) &&
                (st->valueint == 0 || st->valueint == 1) && sp->valueint == 0) {
                t->strip_lead = st->valueint;
                continue;
            }
            seterr(err, errlen, "tokenizer.json: decoder \"%s\" in a Sequence is not supported (only Replace(\"\xE2\x96\x81\", \" \"), "
                                "ByteFallback, Fuse, Strip(\" \", 0|1, 0))", dt ? dt : "?");
            return -1;
        }
        *spm = 1;
        return 0;
    }
    if (type && !strcmp(type, "Metaspace")) {
        const char *scheme = jstr(d, "prepend_scheme");
        t->strip_lead = scheme ? strcmp(scheme, "never") != 0 : jbool(d, "add_prefix_space", 1);
        *spm = 1;
        return 0;
    }
    seterr(err, errlen, "tokenizer.json: decoder \"%s\" is not supported (ByteLevel, Metaspace, or the SentencePiece "
                        "Replace/ByteFallback/Fuse/Strip sequence)", type ? type : "?");
    return -1;
}

/* Pieces as text for a SentencePiece-style tokenizer.json: added tokens as they are,
 * <0xNN> as its byte when the decoder has ByteFallback (else as its text, as HF's
 * Metaspace decoder leaves it), U+2581 as a space in the others. */
static int finish_vocab_hfspm(tok_tokenizer *t) {
    uint8_t *ty = malloc((size_t)t->n_vocab);
    if (!ty) return -1;
    for (int id = 0; id < t->n_vocab; id++) {
        const char *s = t->text[id];
        size_t n = t->text[id] ? t->text_len[id] : 0;
        ty[id] = (t->flags[id] & TF_ADDED) ? 4 : 1;
        if (!(t->flags[id] & TF_ADDED) && t->dec_bytes && n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' &&
            strchr("0123456789ABCDEF", s[3]) && strchr("0123456789ABCDEF", s[4]) && s[3] && s[4])
            ty[id] = 6;
    }
    int rc = finish_vocab_spm(t, ty);
    free(ty);
    return rc;
}

/* Looks up the id of a token given as its content string (added tokens included). */
static int id_of(const tok_tokenizer *t, const char *s) { return s ? lookup(t, s, strlen(s)) : -1; }

/* post_processor: TemplateProcessing "single" = [Special X]? $A [Special Y]? gives the prefix/suffix
 * tokens of add_special; ByteLevel and null add nothing. */
static int parse_post(tok_tokenizer *t, const cJSON *p, char *err, size_t errlen) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *type = jstr(p, "type");
    if (!type) {
        seterr(err, errlen, "tokenizer.json: post_processor without a type");
        return -1;
    }
    if (!strcmp(type, "ByteLevel")) return 0;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "processors"), *it;
        cJSON_ArrayForEach(it, list) if (parse_post(t, it, err, errlen)) return -1;
        return 0;
    }
    if (strcmp(type, "TemplateProcessing") != 0) {
        seterr(err, errlen, "tokenizer.json: unsupported post_processor type \"%s\"", type);
        return -1;
    }
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single"), *it;
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(p, "special_tokens");
    int seen_a = 0;
    cJSON_ArrayForEach(it, single) {
        if (cJSON_GetObjectItemCaseSensitive(it, "Sequence")) {
            seen_a = 1;
            continue;
        }
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        const char *name = sp ? jstr(sp, "id") : NULL;
        if (!name) {
            seterr(err, errlen, "tokenizer.json: TemplateProcessing item not understood");
            return -1;
        }
        int id = -1;
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(specials, name);
        const cJSON *ids = st ? cJSON_GetObjectItemCaseSensitive(st, "ids") : NULL;
        if (cJSON_IsArray(ids) && cJSON_GetArraySize(ids) == 1 && cJSON_IsNumber(cJSON_GetArrayItem(ids, 0)))
            id = cJSON_GetArrayItem(ids, 0)->valueint;
        else if (!ids)
            id = id_of(t, name);
        if (id < 0 || id >= t->n_vocab) {
            seterr(err, errlen, "tokenizer.json: TemplateProcessing token \"%s\" unknown or multi-token", name);
            return -1;
        }
        int *slot = seen_a ? &t->suffix_id : &t->prefix_id;
        if (*slot >= 0) {
            seterr(err, errlen, "tokenizer.json: TemplateProcessing with more than one token on a side");
            return -1;
        }
        *slot = id;
    }
    return 0;
}

/* bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}. */
static const char *config_token(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) return jstr(v, "content");
    return NULL;
}

static int cmp_added_id(const void *pa, const void *pb) {
    const added_tok *a = pa, *b = pb;
    return a->id < b->id ? -1 : a->id > b->id;
}

static tok_tokenizer *from_json(const cJSON *root, const char *path, char *err, size_t errlen) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) {
        seterr(err, errlen, "%s: no \"model\" object", path);
        return NULL;
    }
    const char *mtype = jstr(model, "type");
    if (mtype && strcmp(mtype, "BPE") != 0) {
        seterr(err, errlen, "%s: model type \"%s\" is not supported (only BPE)", path, mtype);
        return NULL;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab) || !vocab->child) {
        seterr(err, errlen, "%s: model.vocab missing or empty", path);
        return NULL;
    }
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (merges && !cJSON_IsArray(merges) && !cJSON_IsNull(merges)) {
        seterr(err, errlen, "%s: model.merges is not an array", path);
        return NULL;
    }
    const char *cpre = jstr(model, "continuing_subword_prefix"), *eow = jstr(model, "end_of_word_suffix");
    if ((cpre && *cpre) || (eow && *eow)) {
        seterr(err, errlen, "%s: BPE continuing_subword_prefix/end_of_word_suffix not supported", path);
        return NULL;
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), *it;
    if (added && !cJSON_IsArray(added) && !cJSON_IsNull(added)) {
        seterr(err, errlen, "%s: added_tokens is not an array", path);
        return NULL;
    }

    /* Size: the largest id in vocab or added_tokens. */
    long max_id = -1;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= MAX_VOCAB || !it->string) {
            seterr(err, errlen, "%s: model.vocab entry \"%s\" has no valid id", path, it->string ? it->string : "?");
            return NULL;
        }
        if (it->valueint > max_id) max_id = it->valueint;
    }
    size_t n_added = 0;
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= MAX_VOCAB || !jstr(it, "content")) {
            seterr(err, errlen, "%s: added_tokens entry without a valid id/content", path);
            return NULL;
        }
        if (id->valueint > max_id) max_id = id->valueint;
        n_added++;
    }
    tok_tokenizer *t = tok_new();
    if (!t || vocab_alloc(t, (int)max_id + 1)) goto oom;
    t->hf = 1;
    cJSON_ArrayForEach(it, vocab) {
        if (t->text[it->valueint]) {
            seterr(err, errlen, "%s: model.vocab id %d used twice", path, it->valueint);
            tok_free(t);
            return NULL;
        }
        if (set_piece(t, it->valueint, it->string, strlen(it->string), 0)) goto oom;
    }
    t->added = calloc(n_added ? n_added : 1, sizeof *t->added);
    if (!t->added) goto oom;
    cJSON_ArrayForEach(it, added) {
        int id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
        const char *content = jstr(it, "content");
        if (!*content) continue;
        /* The model's own entry keeps the lookup (BPE merges refer to it); the added token
         * content is what matching and decoding use for this id. */
        if (!t->text[id] || strcmp(t->text[id], content) != 0)
            if (set_piece(t, id, content, strlen(content), 0)) goto oom;
        t->flags[id] |= TF_ADDED | TF_RAW;
        if (jbool(it, "special", 0)) t->flags[id] |= TF_SPECIAL;
        else t->flags[id] |= TF_ALWAYS;
        added_tok *a = &t->added[t->n_added++];
        a->id = id;
        a->lstrip = (uint8_t)jbool(it, "lstrip", 0);
        a->rstrip = (uint8_t)jbool(it, "rstrip", 0);
        a->single_word = (uint8_t)jbool(it, "single_word", 0);
        a->normalized = (uint8_t)jbool(it, "normalized", 0);
    }
    qsort(t->added, t->n_added, sizeof *t->added, cmp_added_id);
    t->ignore_merges = jbool(model, "ignore_merges", 0);
    t->byte_fallback = jbool(model, "byte_fallback", 0);
    t->fuse_unk = jbool(model, "fuse_unk", 0);
    const char *unk = jstr(model, "unk_token");
    if (unk) t->unk = id_of(t, unk);

    int bytelevel = 0, replace = 0, spm_dec = 0;
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if ((norm && !cJSON_IsNull(norm) && parse_norm(t, norm, &replace, err, errlen)) ||
        (dec && !cJSON_IsNull(dec) && parse_decoder(t, dec, &spm_dec, err, errlen)) ||
        parse_pretok(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), &bytelevel, err, errlen)) {
        tok_free(t);
        return NULL;
    }
    /* SentencePiece style: spaces become U+2581 (the normalizer's Replace or Metaspace), no
     * byte-level alphabet, and a decoder that turns the marker back into spaces. */
    if (replace || t->hfspm) {
        if (bytelevel || !spm_dec || (replace && t->hfspm)) {
            seterr(err, errlen, "%s: a U+2581 normalizer or Metaspace needs the SentencePiece decoder and no ByteLevel "
                                "or second Metaspace step", path);
            tok_free(t);
            return NULL;
        }
        t->hfspm = 1;
        if (finish_vocab_hfspm(t)) goto oom;
    } else {
        if (!bytelevel || spm_dec || t->hf_prepend != HF_PREPEND_NEVER || t->byte_fallback) {
            seterr(err, errlen, "%s: no ByteLevel pre_tokenizer and no U+2581 normalizer: neither byte-level nor "
                                "SentencePiece-style BPE", path);
            tok_free(t);
            return NULL;
        }
        if (finish_vocab(t)) goto oom;
    }

    size_t n_merges = merges ? (size_t)cJSON_GetArraySize(merges) : 0;
    if (merges_alloc(t, n_merges)) goto oom;
    size_t max_len = 0;
    for (int i = 0; i < t->n_vocab; i++)
        if (t->text_len[i] > max_len) max_len = t->text_len[i];
    char *buf = malloc(2 * max_len + 2);
    if (!buf) goto oom;
    int rank = 0;
    cJSON_ArrayForEach(it, merges) {
        const char *a, *b;
        size_t na, nb;
        if (cJSON_IsString(it)) {
            const char *m = it->valuestring, *sp = *m ? strchr(m + 1, ' ') : NULL;
            if (!sp) {
                seterr(err, errlen, "%s: merge %d \"%s\" is not \"a b\"", path, rank, m);
                free(buf);
                tok_free(t);
                return NULL;
            }
            a = m;
            na = (size_t)(sp - m);
            b = sp + 1;
            nb = strlen(b);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(it->child) &&
                   cJSON_IsString(it->child->next)) {
            a = it->child->valuestring;
            b = it->child->next->valuestring;
            na = strlen(a);
            nb = strlen(b);
        } else {
            seterr(err, errlen, "%s: merge %d is neither \"a b\" nor [a, b]", path, rank);
            free(buf);
            tok_free(t);
            return NULL;
        }
        /* Parts longer than any token cannot be in the vocabulary. */
        if (na <= max_len && nb <= max_len && add_merge(t, a, na, b, nb, rank, 1, buf)) {
            free(buf);
            goto oom;
        }
        rank++;
    }
    free(buf);
    if (parse_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), err, errlen)) {
        tok_free(t);
        return NULL;
    }
    t->bos = t->prefix_id;
    t->eos = t->suffix_id;
    return t;
oom:
    seterr(err, errlen, "tokenizer: out of memory");
    tok_free(t);
    return NULL;
}

/* The JSON file `name` in the folder of `path`: NULL when there is none, or
 * when it is malformed (then *bad is set and err filled). */
static cJSON *json_beside(const char *path, const char *name, int *bad, char *err, size_t errlen) {
    char p[4096];
    const char *slash = strrchr(path, '/');
    const int dirlen = slash ? (int)(slash - path + 1) : 0;
    if (snprintf(p, sizeof p, "%.*s%s", dirlen, path, name) >= (int)sizeof p) return NULL;
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fclose(f);
    size_t n;
    char cerr[256];
    char *text = read_file(p, 64u << 20, &n, cerr, sizeof cerr);
    cJSON *j = text ? cJSON_ParseWithLength(text, n) : NULL;
    free(text);
    if (!j) {
        seterr(err, errlen, "%s: malformed JSON", p);
        *bad = 1;
    }
    return j;
}

tok_tokenizer *tok_from_json_file(const char *path, char *err, size_t errlen) {
    size_t n;
    char *text = read_file(path, MAX_JSON_BYTES, &n, err, errlen);
    if (!text) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!root) {
        size_t off = end && end >= text && end <= text + n ? (size_t)(end - text) : 0;
        seterr(err, errlen, "%s: malformed JSON near byte %zu", path, off);
        free(text);
        return NULL;
    }
    free(text);
    tok_tokenizer *t = from_json(root, path, err, errlen);
    cJSON_Delete(root);
    if (!t) return NULL;

    /* tokenizer_config.json beside it: bos/eos strings and add_bos_token. */
    int bad = 0;
    cJSON *cfg = json_beside(path, "tokenizer_config.json", &bad, err, errlen);
    if (cfg) {
        int bos = id_of(t, config_token(cfg, "bos_token"));
        int eos = id_of(t, config_token(cfg, "eos_token"));
        if (bos >= 0) t->bos = bos;
        if (eos >= 0) t->eos = eos;
        /* The post_processor decides what add_special adds (as the tokenizers library does);
         * the config flag fills in only when the tokenizer.json template adds nothing. */
        if (t->prefix_id < 0 && jbool(cfg, "add_bos_token", 0)) t->prefix_id = t->bos;
        if (t->suffix_id < 0 && jbool(cfg, "add_eos_token", 0)) t->suffix_id = t->eos;
        cJSON_Delete(cfg);
    }
    add_known_stops(t);
    /* generation_config.json and config.json beside it list the ids that end
     * generation (eos_token_id: one id or several) */
    static const char *const STOP_SOURCES[] = {"generation_config.json", "config.json"};
    for (size_t i = 0; i < 2 && !bad; i++) {
        cfg = json_beside(path, STOP_SOURCES[i], &bad, err, errlen);
        if (cfg) add_config_stops(t, cfg);
        cJSON_Delete(cfg);
    }
    if (bad) {
        tok_free(t);
        return NULL;
    }
    return t;
}

/* ---------- encoding ---------- */

typedef struct {
    int32_t *v;
    size_t n, cap;
} ivec;

static int ivec_push(ivec *a, int32_t x) {
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

static int cand_less(const cand *x, const cand *y) {
    return x->key != y->key ? x->key < y->key : x->l < y->l;
}

static int cand_push(cand_heap *h, cand c) {
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

static cand cand_pop(cand_heap *h) {
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

typedef struct {
    int32_t *id;
    uint32_t *prev, *next;
    cand_heap heap;
    size_t cap;
    char *bl; /* byte-level form of a word (ignore_merges lookups) */
} bpe_scratch;

static int try_pair(const tok_tokenizer *t, bpe_scratch *s, uint32_t l, uint32_t r) {
    if (s->id[l] < 0 || s->id[r] < 0) return 0;
    const merge_slot *m = merge_find(t, s->id[l], s->id[r]);
    if (!m) return 0;
    return cand_push(&s->heap, (cand){(float)m->rank, l, r, s->id[l], s->id[r]});
}

#define NONE UINT32_MAX

static int bpe_reserve(bpe_scratch *s, size_t n) {
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

static int bpe_run(const tok_tokenizer *t, bpe_scratch *s, size_t n, ivec *out);

/* BPE of one pre-token: start from one symbol per byte (its byte-level character) and
 * repeatedly merge the adjacent pair of lowest rank, leftmost first. */
static int bpe_word(const tok_tokenizer *t, bpe_scratch *s, const uint8_t *w, size_t n, ivec *out) {
    if (n == 0) return 0;
    if (bpe_reserve(s, n)) return -1;
    if (t->ignore_merges) {
        /* Llama-3: a pre-token that is itself a token is taken whole. */
        size_t k = to_bytelevel(w, n, s->bl);
        int id = lookup(t, s->bl, k);
        if (id >= 0) return ivec_push(out, id);
    }
    for (size_t i = 0; i < n; i++) {
        s->id[i] = t->byte_id[w[i]];
        s->prev[i] = i ? (uint32_t)(i - 1) : NONE;
        s->next[i] = i + 1 < n ? (uint32_t)(i + 1) : NONE;
    }
    return bpe_run(t, s, n, out);
}

/* Merges the n linked symbols in s (ids set), lowest rank first, leftmost on ties. */
static int bpe_run(const tok_tokenizer *t, bpe_scratch *s, size_t n, ivec *out) {
    s->heap.n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (try_pair(t, s, (uint32_t)i, (uint32_t)(i + 1))) return -1;
    while (s->heap.n) {
        cand c = cand_pop(&s->heap);
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
        if (id >= 0 && ivec_push(out, id)) return -1;
    }
    return 0;
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
    int id = lookup(t, s->buf + s->start[l], size);
    if (id < 0) return 0;
    return cand_push(&s->heap, (cand){-t->score[id], l, r, (int32_t)size, 0});
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
        cand c = cand_pop(&s->heap);
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
        int id = lookup(t, sym, s->len[i]);
        if (id >= 0) {
            if (ivec_push(out, id)) return -1;
            continue;
        }
        for (uint32_t j = 0; j < s->len[i]; j++) {
            int b = t->spm_byte[(uint8_t)sym[j]];
            if (b >= 0 && ivec_push(out, b)) return -1;
        }
    }
    return 0;
}

/* The fragments left by the special-token split: a text fragment gets the space prefix
 * when it opens the input or follows a token, as llama.cpp's SentencePiece path does. */
static int spm_encode(const tok_tokenizer *t, const svec *a, ivec *ids) {
    spm_scratch s = {0};
    int prev_token = 1, rc = 0;
    for (size_t i = 0; i < a->n && rc == 0; i++) {
        if (a->v[i].id >= 0) {
            rc = ivec_push(ids, a->v[i].id);
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

/* HF BPE of one SentencePiece-style word: one symbol per character that is a token; a
 * character that is not is spelled with its <0xNN> tokens (byte_fallback, all of them or
 * none), else it is unk (consecutive ones fused into one with fuse_unk). Then merges by rank. */
static int hfspm_word(const tok_tokenizer *t, bpe_scratch *s, const char *p, size_t n, ivec *out) {
    if (n == 0) return 0;
    if (bpe_reserve(s, n)) return -1;
    size_t nsym = 0;
    int prev_unk = 0;
    for (size_t i = 0; i < n;) {
        size_t l = spm_char_len((uint8_t)p[i]);
        if (l > n - i) l = n - i;
        int id = lookup(t, p + i, l), bytes[4], nb = 0;
        if (id < 0 && t->byte_fallback) {
            for (size_t j = 0; j < l; j++) {
                char hex[8];
                snprintf(hex, sizeof hex, "<0x%02X>", (uint8_t)p[i + j]);
                bytes[nb] = lookup(t, hex, 6);
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
    return bpe_run(t, s, nsym, out);
}

/* Text spans of a SentencePiece-style tokenizer.json: spaces to U+2581, the leading marker
 * as the normalizer or Metaspace asks (first: only the span at the start of the text), then
 * BPE of the whole span or, with Metaspace split, of each U+2581-led word. */
static int hfspm_encode(const tok_tokenizer *t, const svec *a, const char *text, ivec *ids) {
    bpe_scratch s = {0};
    char *buf = NULL;
    size_t bufcap = 0;
    int rc = 0;
    for (size_t i = 0; i < a->n && rc == 0; i++) {
        const span *sp = &a->v[i];
        if (sp->id >= 0) {
            rc = ivec_push(ids, sp->id);
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
    free(s.id);
    free(s.prev);
    free(s.next);
    free(s.heap.v);
    free(s.bl);
    return rc;
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
            seterr(err, errlen, "tok_encode_spans: ranges out of order or past the text");
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
        seterr(err, errlen, "tok_encode: NULL text");
        return -1;
    }
    if (add_special && t->prefix_id >= 0 && ivec_push(&ids, t->prefix_id)) goto oom;
    if (len && svec_push(&a, text, len, -1)) goto oom;
    if (t->hf) {
        for (int pass = 0; pass < 2; pass++) {
            b.n = 0;
            for (size_t i = 0; i < a.n; i++) {
                if (a.v[i].id >= 0) {
                    if (svec_push(&b, a.v[i].p, a.v[i].n, a.v[i].id)) goto oom;
                } else if (hf_split_span(t, &a.v[i], pass, sc, &b)) {
                    goto oom;
                }
            }
            svec tmp = a;
            a = b;
            b = tmp;
        }
    } else if (gguf_split(t, &a, &b, sc)) {
        goto oom;
    }
    if (t->spm || t->hfspm) {
        if (t->spm ? spm_encode(t, &a, &ids) : hfspm_encode(t, &a, text, &ids)) goto oom;
        a.n = 0; /* every fragment is encoded */
    }
    /* Pre-tokenize each text span through the rules, then BPE each piece. */
    for (size_t i = 0; i < a.n; i++) {
        if (a.v[i].id >= 0) {
            if (ivec_push(&ids, a.v[i].id)) goto oom;
            continue;
        }
        svec cur = {0}, nxt = {0};
        if (svec_push(&cur, a.v[i].p, a.v[i].n, -1)) goto oom_pieces;
        for (int r = 0; r < t->n_rules; r++) {
            nxt.n = 0;
            for (size_t j = 0; j < cur.n; j++) {
                const char *p = cur.v[j].p;
                size_t n = cur.v[j].n;
                if (t->rules[r] == PT_PREFIX_SPACE) {
                    if (n == 0 || p[0] != ' ') {
                        p = arena_copy_prefixed(&arena, p, n);
                        if (!p) goto oom_pieces;
                        n++;
                    }
                    if (svec_push(&nxt, p, n, -1)) goto oom_pieces;
                    continue;
                }
                for (size_t pos = 0; pos < n;) {
                    size_t m = pt_match(t->rules[r], (const uint8_t *)p, n, pos);
                    if (svec_push(&nxt, p + pos, m, -1)) goto oom_pieces;
                    pos += m;
                }
            }
            svec tmp = cur;
            cur = nxt;
            nxt = tmp;
        }
        for (size_t j = 0; j < cur.n; j++)
            if (bpe_word(t, &s, (const uint8_t *)cur.v[j].p, cur.v[j].n, &ids)) goto oom_pieces;
        free(cur.v);
        free(nxt.v);
        continue;
    oom_pieces:
        free(cur.v);
        free(nxt.v);
        goto oom;
    }
    if (add_special && t->suffix_id >= 0 && ivec_push(&ids, t->suffix_id)) goto oom;
    *out = ids.v ? ids.v : malloc(sizeof(int32_t));
    if (!*out) goto oom;
    ids.v = NULL;
    *n_out = ids.n;
    rc = 0;
    goto done;
oom:
    seterr(err, errlen, "tok_encode: out of memory");
done:
    free(ids.v);
    free(a.v);
    free(b.v);
    free(s.id);
    free(s.prev);
    free(s.next);
    free(s.heap.v);
    free(s.bl);
    while (arena) {
        arena_blk *nx = arena->next;
        free(arena);
        arena = nx;
    }
    return rc;
}

/* ---------- decoding ---------- */

void tok_stream_init(tok_stream *s) { s->n_pending = 0; }

typedef struct {
    char *out;
    size_t cap, n;
} sink;

static void emit(sink *k, const char *p, size_t n) {
    if (n > k->cap - k->n) n = k->cap - k->n; /* a too-small buffer truncates rather than overflows */
    memcpy(k->out + k->n, p, n);
    k->n += n;
}

static void emit_fffd(sink *k) { emit(k, "\xEF\xBF\xBD", 3); }

/* Expected sequence length for a lead byte, 0 if it cannot start one. */
static int seq_len(uint8_t b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* Whether b can follow the bytes in pending (first continuation ranges exclude overlongs,
 * surrogates and values past U+10FFFF). */
static int cont_ok(const char *pending, size_t np, uint8_t b) {
    if (np == 1) {
        uint8_t l = (uint8_t)pending[0];
        if (l == 0xE0) return b >= 0xA0 && b <= 0xBF;
        if (l == 0xED) return b >= 0x80 && b <= 0x9F;
        if (l == 0xF0) return b >= 0x90 && b <= 0xBF;
        if (l == 0xF4) return b >= 0x80 && b <= 0x8F;
    }
    return (b & 0xC0) == 0x80;
}

static void stream_byte(tok_stream *s, sink *k, uint8_t b) {
    if (s->n_pending) {
        if (cont_ok(s->pending, s->n_pending, b)) {
            s->pending[s->n_pending++] = (char)b;
            if ((int)s->n_pending == seq_len((uint8_t)s->pending[0])) {
                emit(k, s->pending, s->n_pending);
                s->n_pending = 0;
            }
            return;
        }
        /* The incomplete sequence so far is one maximal invalid subpart. */
        emit_fffd(k);
        s->n_pending = 0;
    }
    int l = seq_len(b);
    if (l == 1) {
        char c = (char)b;
        emit(k, &c, 1);
    } else if (l == 0) {
        emit_fffd(k);
    } else {
        s->pending[0] = (char)b;
        s->n_pending = 1;
    }
}

size_t tok_stream_push(tok_stream *s, const tok_tokenizer *t, int id, int skip_special, char *out, size_t cap) {
    size_t n;
    const char *p = tok_piece(t, id, &n);
    if (!p || (skip_special && tok_is_special(t, id))) return 0;
    sink k = {out, cap, 0};
    for (size_t i = 0; i < n; i++) stream_byte(s, &k, (uint8_t)p[i]);
    return k.n;
}

size_t tok_stream_flush(tok_stream *s, char *out, size_t cap) {
    sink k = {out, cap, 0};
    if (s->n_pending) emit_fffd(&k);
    s->n_pending = 0;
    return k.n;
}

char *tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, int skip_special) {
    size_t cap = 64, len = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    tok_stream s;
    tok_stream_init(&s);
    for (size_t i = 0; i < n; i++) {
        size_t pl = 0;
        if (!tok_piece(t, ids[i], &pl)) continue;
        /* Worst case every byte (and the pending ones) becomes a 3-byte U+FFFD. */
        size_t need = len + 3 * (pl + sizeof s.pending) + 1;
        if (need > cap) {
            while (cap < need) cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
        }
        if (i == 0 && t->spm && t->add_space_prefix) {
            /* llama.cpp's detokenizer drops the space the encoder prefixed: one leading
             * space of the first token's text (a hidden first token, such as BOS, ends it). */
            const char *p = tok_piece(t, ids[i], &pl);
            if (pl && p[0] == ' ' && !(skip_special && tok_is_special(t, ids[i]))) {
                sink k = {buf + len, cap - len - 1, 0};
                for (size_t j = 1; j < pl; j++) stream_byte(&s, &k, (uint8_t)p[j]);
                len += k.n;
                continue;
            }
        }
        len += tok_stream_push(&s, t, ids[i], skip_special, buf + len, cap - len - 1);
    }
    if (len + 4 > cap) {
        char *nb = realloc(buf, len + 4);
        if (!nb) {
            free(buf);
            return NULL;
        }
        buf = nb;
        cap = len + 4;
    }
    len += tok_stream_flush(&s, buf + len, cap - len - 1);
    /* HF's Strip/Metaspace decoder: one leading space of the whole text. */
    if (t->hfspm && t->strip_lead && len && buf[0] == ' ') memmove(buf, buf + 1, --len);
    buf[len] = 0;
    return buf;
}

tok_tokenizer *tok_from_weights(const wt_file *w, char *err, size_t errlen) {
    if (wt_gguf(w)) return tok_from_gguf(wt_gguf(w), err, errlen);
    const char *src = wt_path(w);
    char path[4096];
    struct stat st;
    if (stat(src, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(path, sizeof path, "%s/tokenizer.json", src);
    } else {
        snprintf(path, sizeof path, "%s", src);
        char *slash = strrchr(path, '/');
        if (slash) snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "tokenizer.json");
        else snprintf(path, sizeof path, "tokenizer.json");
    }
    return tok_from_json_file(path, err, errlen);
}

/* A token's bytes for a message: printable ASCII as is, others as \\xNN, at most 24 of them. */
static void piece_text(const char *p, size_t len, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; p && i < len && i < 24 && o + 5 < cap; i++) {
        const unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    out[o] = 0;
}

int tok_same_vocabulary(const tok_tokenizer *a, const tok_tokenizer *b, char *err, size_t errlen) {
    const int n = tok_vocab_size(a);
    if (tok_vocab_size(b) != n) {
        snprintf(err, errlen, "the vocabularies have %d and %d tokens", n, tok_vocab_size(b));
        return -1;
    }
    for (int id = 0; id < n; id++) {
        size_t la, lb;
        const char *pa = tok_piece(a, id, &la), *pb = tok_piece(b, id, &lb);
        if (!pa != !pb || (pa && (la != lb || memcmp(pa, pb, la) != 0))) {
            char ta[128], tb[128];
            piece_text(pa, la, ta, sizeof ta);
            piece_text(pb, lb, tb, sizeof tb);
            snprintf(err, errlen, "token %d is '%s' in one vocabulary and '%s' in the other", id, ta, tb);
            return -1;
        }
    }
    return 0;
}
