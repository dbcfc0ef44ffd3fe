/* tokenizer.c — the tokenizer's shared core: the byte-level alphabet, the vocabulary and its
 * piece index, lifecycle and accessors, the ids that end a generation, and decoding (whole
 * sequences and streamed UTF-8). The loaders are tokenizer_gguf.c and tokenizer_json.c, encoding
 * is tokenizer_encode.c (with tokenizer_bpe.c and tokenizer_spm.c); tokenizer_int.h is what they
 * share. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>

#include "tokenizer_int.h"

/* ---------- small helpers ---------- */

void tok_seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
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

size_t tok_to_bytelevel(const uint8_t *s, size_t n, char *o) {
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

int tok_vocab_alloc(tok_tokenizer *t, int n) {
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

/* Sets the piece of id and indexes it. overwrite: a later id with the same piece
 * takes over the lookup (llama.cpp's map assignment); otherwise the first stays. */
int tok_set_piece(tok_tokenizer *t, int id, const char *s, size_t n, int overwrite) {
    if (n > UINT32_MAX - 1) return -1;
    char *c = malloc(n + 1);
    if (!c) return -1;
    memcpy(c, s, n);
    c[n] = 0;
    free(t->text[id]);
    t->text[id] = c;
    t->text_len[id] = (uint32_t)n;
    uint32_t i = (uint32_t)tok_hash(s, n) & t->hmask;
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
int tok_finish_vocab(tok_tokenizer *t) {
    for (int id = 0; id < t->n_vocab; id++) {
        if (!t->text[id] && tok_set_piece(t, id, "", 0, 0)) return -1;
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
        t->byte_id[b] = tok_lookup(t, o, n);
    }
    return 0;
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

tok_tokenizer *tok_new(void) {
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

void tok_add_stop(tok_tokenizer *t, int64_t id) {
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

void tok_add_known_stops(tok_tokenizer *t) {
    tok_add_stop(t, t->eos);
    for (size_t i = 0; i < sizeof END_OF_TURN_TEXTS / sizeof *END_OF_TURN_TEXTS; i++) {
        const int id = tok_lookup(t, END_OF_TURN_TEXTS[i], strlen(END_OF_TURN_TEXTS[i]));
        if (id >= 0 && (t->flags[id] & TF_SPECIAL)) tok_add_stop(t, id);
    }
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
int tok_find(const tok_tokenizer *t, const char *piece) { return tok_lookup(t, piece, strlen(piece)); }

const char *tok_piece(const tok_tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = t->raw_len[id];
    return t->raw[id];
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
