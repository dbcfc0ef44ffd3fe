/* tokenizer_json.c — the tokenizer of a Hugging Face tokenizer.json (a BPE model, byte-level or
 * SentencePiece-style), with the tokenizer_config.json, generation_config.json and config.json
 * beside it for BOS/EOS, add_bos_token and the ids that end a generation. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>

#include "tokenizer_int.h"

#define MAX_JSON_BYTES ((size_t)1 << 30)

static char *read_file(const char *path, size_t max, size_t *n_out, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        tok_seterr(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (n < cap) break;
        if (cap >= max) {
            tok_seterr(err, errlen, "%s: larger than %zu bytes", path, max);
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
        tok_seterr(err, errlen, "%s: out of memory", path);
        fclose(f);
        return NULL;
    }
    if (ferror(f)) {
        tok_seterr(err, errlen, "%s: read error", path);
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
        tok_seterr(err, errlen, "tokenizer.json: pre_tokenizer without a type");
        return -1;
    }
    if (t->n_rules + 2 > MAX_RULES) {
        tok_seterr(err, errlen, "tokenizer.json: pre_tokenizer too deep");
        return -1;
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers"), *it;
        if (!cJSON_IsArray(list)) {
            tok_seterr(err, errlen, "tokenizer.json: Sequence pre_tokenizer without pretokenizers");
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
            tok_seterr(err, errlen, "tokenizer.json: Metaspace replacement \"%s\" is not supported (only U+2581)", rp);
            return -1;
        }
        /* Metaspace does not add a marker where the text already starts with one. */
        if (!scheme) t->hf_prepend = jbool(p, "add_prefix_space", 1) ? HF_PREPEND_UNLESS_MARKED : HF_PREPEND_NEVER;
        else if (!strcmp(scheme, "always")) t->hf_prepend = HF_PREPEND_UNLESS_MARKED;
        else if (!strcmp(scheme, "first")) t->hf_prepend = HF_PREPEND_FIRST_UNLESS_MARKED;
        else if (!strcmp(scheme, "never")) t->hf_prepend = HF_PREPEND_NEVER;
        else {
            tok_seterr(err, errlen, "tokenizer.json: Metaspace prepend_scheme \"%s\" is not supported", scheme);
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
            tok_seterr(err, errlen, "tokenizer.json: Split pre_tokenizer with %s%s%s is not supported (only known Regex patterns)",
                       lit ? "String pattern \"" : "no pattern", lit ? lit : "", lit ? "\"" : "");
            return -1;
        }
        pt_rule r;
        if (pt_rule_from_pattern(re, &r)) {
            tok_seterr(err, errlen, "tokenizer.json: unsupported Split regex pattern \"%s\" (known: GPT-2, Llama-3, Qwen2, \\p{N})",
                       re);
            return -1;
        }
        if ((behavior && strcmp(behavior, "Isolated") != 0) || jbool(p, "invert", 0)) {
            tok_seterr(err, errlen, "tokenizer.json: Split behavior \"%s\"%s is not supported (only Isolated)",
                       behavior ? behavior : "?", jbool(p, "invert", 0) ? " with invert" : "");
            return -1;
        }
        t->rules[t->n_rules++] = r;
        return 0;
    }
    tok_seterr(err, errlen, "tokenizer.json: unsupported pre_tokenizer type \"%s\"", type);
    return -1;
}

/* Normalizer of a SentencePiece-style tokenizer.json: Prepend("\u2581") and Replace(" ", "\u2581"),
 * alone or in a Sequence; anything else is refused by name. */
static int parse_norm(tok_tokenizer *t, const cJSON *n, int *replace, char *err, size_t errlen) {
    const char *type = jstr(n, "type");
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers"), *it;
        if (!cJSON_IsArray(list)) {
            tok_seterr(err, errlen, "tokenizer.json: Sequence normalizer without normalizers");
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
    tok_seterr(err, errlen, "tokenizer.json: normalizer \"%s\" is not supported (only null, or Prepend(\"\xE2\x96\x81\") and "
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
            tok_seterr(err, errlen, "tokenizer.json: Sequence decoder without decoders");
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
            tok_seterr(err, errlen, "tokenizer.json: decoder \"%s\" in a Sequence is not supported (only Replace(\"\xE2\x96\x81\", \" \"), "
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
    tok_seterr(err, errlen, "tokenizer.json: decoder \"%s\" is not supported (ByteLevel, Metaspace, or the SentencePiece "
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
    int rc = tok_finish_vocab_spm(t, ty);
    free(ty);
    return rc;
}

/* Looks up the id of a token given as its content string (added tokens included). */
static int id_of(const tok_tokenizer *t, const char *s) { return s ? tok_lookup(t, s, strlen(s)) : -1; }

/* post_processor: TemplateProcessing "single" = [Special X]? $A [Special Y]? gives the prefix/suffix
 * tokens of add_special; ByteLevel and null add nothing. */
static int parse_post(tok_tokenizer *t, const cJSON *p, char *err, size_t errlen) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *type = jstr(p, "type");
    if (!type) {
        tok_seterr(err, errlen, "tokenizer.json: post_processor without a type");
        return -1;
    }
    if (!strcmp(type, "ByteLevel")) return 0;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "processors"), *it;
        cJSON_ArrayForEach(it, list) if (parse_post(t, it, err, errlen)) return -1;
        return 0;
    }
    if (strcmp(type, "TemplateProcessing") != 0) {
        tok_seterr(err, errlen, "tokenizer.json: unsupported post_processor type \"%s\"", type);
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
            tok_seterr(err, errlen, "tokenizer.json: TemplateProcessing item not understood");
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
            tok_seterr(err, errlen, "tokenizer.json: TemplateProcessing token \"%s\" unknown or multi-token", name);
            return -1;
        }
        int *slot = seen_a ? &t->suffix_id : &t->prefix_id;
        if (*slot >= 0) {
            tok_seterr(err, errlen, "tokenizer.json: TemplateProcessing with more than one token on a side");
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

/* The parts of a tokenizer.json's BPE model that the loader reads. */
typedef struct {
    const cJSON *model, *vocab, *merges, *added;
} json_bpe;

static int oom(char *err, size_t errlen) {
    tok_seterr(err, errlen, "tokenizer: out of memory");
    return -1;
}

/* A BPE model with a vocab, its merges and the added_tokens, each of the shape expected. */
static int find_bpe(const cJSON *root, const char *path, json_bpe *m, char *err, size_t errlen) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) {
        tok_seterr(err, errlen, "%s: no \"model\" object", path);
        return -1;
    }
    const char *mtype = jstr(model, "type");
    if (mtype && strcmp(mtype, "BPE") != 0) {
        tok_seterr(err, errlen, "%s: model type \"%s\" is not supported (only BPE)", path, mtype);
        return -1;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab) || !vocab->child) {
        tok_seterr(err, errlen, "%s: model.vocab missing or empty", path);
        return -1;
    }
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (merges && !cJSON_IsArray(merges) && !cJSON_IsNull(merges)) {
        tok_seterr(err, errlen, "%s: model.merges is not an array", path);
        return -1;
    }
    const char *cpre = jstr(model, "continuing_subword_prefix"), *eow = jstr(model, "end_of_word_suffix");
    if ((cpre && *cpre) || (eow && *eow)) {
        tok_seterr(err, errlen, "%s: BPE continuing_subword_prefix/end_of_word_suffix not supported", path);
        return -1;
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsArray(added) && !cJSON_IsNull(added)) {
        tok_seterr(err, errlen, "%s: added_tokens is not an array", path);
        return -1;
    }
    *m = (json_bpe){model, vocab, merges, added};
    return 0;
}

/* Size: the largest id in vocab or added_tokens, plus one; *n_added counts the added_tokens. */
static int count_ids(const json_bpe *m, const char *path, int *n_vocab, size_t *n_added, char *err, size_t errlen) {
    const cJSON *it;
    long max_id = -1;
    cJSON_ArrayForEach(it, m->vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= MAX_VOCAB || !it->string) {
            tok_seterr(err, errlen, "%s: model.vocab entry \"%s\" has no valid id", path, it->string ? it->string : "?");
            return -1;
        }
        if (it->valueint > max_id) max_id = it->valueint;
    }
    *n_added = 0;
    cJSON_ArrayForEach(it, m->added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= MAX_VOCAB || !jstr(it, "content")) {
            tok_seterr(err, errlen, "%s: added_tokens entry without a valid id/content", path);
            return -1;
        }
        if (id->valueint > max_id) max_id = id->valueint;
        (*n_added)++;
    }
    /* A real vocabulary numbers its tokens 0..n-1 (added tokens may leave a few holes). Every
     * id up to the largest gets its own entry, so a file of a few entries with an id near
     * MAX_VOCAB would cost millions of them: ids that leave more holes than tokens are refused. */
    const long n_given = (long)cJSON_GetArraySize(m->vocab) + (long)*n_added;
    if (max_id + 1 > 2 * n_given + 4096) {
        tok_seterr(err, errlen, "%s: the ids leave too many holes: %ld tokens, the largest id %ld", path, n_given,
                   max_id);
        return -1;
    }
    *n_vocab = (int)max_id + 1;
    return 0;
}

static int read_vocab(tok_tokenizer *t, const cJSON *vocab, const char *path, char *err, size_t errlen) {
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (t->text[it->valueint]) {
            tok_seterr(err, errlen, "%s: model.vocab id %d used twice", path, it->valueint);
            return -1;
        }
        if (tok_set_piece(t, it->valueint, it->string, strlen(it->string), 0)) return oom(err, errlen);
    }
    return 0;
}

/* added_tokens, in id order: matched in the text (special ones only where asked) and kept whole. */
static int read_added(tok_tokenizer *t, const cJSON *added, size_t n_added, char *err, size_t errlen) {
    const cJSON *it;
    t->added = calloc(n_added ? n_added : 1, sizeof *t->added);
    if (!t->added) return oom(err, errlen);
    cJSON_ArrayForEach(it, added) {
        int id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
        const char *content = jstr(it, "content");
        if (!*content) continue;
        /* The model's own entry keeps the lookup (BPE merges refer to it); the added token
         * content is what matching and decoding use for this id. */
        if (!t->text[id] || strcmp(t->text[id], content) != 0)
            if (tok_set_piece(t, id, content, strlen(content), 0)) return oom(err, errlen);
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
    return 0;
}

/* The normalizer, decoder and pre_tokenizer together decide the flavour, byte-level or
 * SentencePiece-style, and with it how the pieces read as text. */
static int read_flavour(tok_tokenizer *t, const cJSON *root, const char *path, char *err, size_t errlen) {
    int bytelevel = 0, replace = 0, spm_dec = 0;
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if ((norm && !cJSON_IsNull(norm) && parse_norm(t, norm, &replace, err, errlen)) ||
        (dec && !cJSON_IsNull(dec) && parse_decoder(t, dec, &spm_dec, err, errlen)) ||
        parse_pretok(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), &bytelevel, err, errlen))
        return -1;
    /* SentencePiece style: spaces become U+2581 (the normalizer's Replace or Metaspace), no
     * byte-level alphabet, and a decoder that turns the marker back into spaces. */
    if (replace || t->hfspm) {
        if (bytelevel || !spm_dec || (replace && t->hfspm)) {
            tok_seterr(err, errlen, "%s: a U+2581 normalizer or Metaspace needs the SentencePiece decoder and no ByteLevel "
                                    "or second Metaspace step", path);
            return -1;
        }
        t->hfspm = 1;
        return finish_vocab_hfspm(t) ? oom(err, errlen) : 0;
    }
    if (!bytelevel || spm_dec || t->hf_prepend != HF_PREPEND_NEVER || t->byte_fallback) {
        tok_seterr(err, errlen, "%s: no ByteLevel pre_tokenizer and no U+2581 normalizer: neither byte-level nor "
                                "SentencePiece-style BPE", path);
        return -1;
    }
    return tok_finish_vocab(t) ? oom(err, errlen) : 0;
}

/* model.merges, ranked by position: "a b" strings or [a, b] pairs. */
static int read_merges(tok_tokenizer *t, const cJSON *merges, const char *path, char *err, size_t errlen) {
    size_t n_merges = merges ? (size_t)cJSON_GetArraySize(merges) : 0;
    if (tok_merges_alloc(t, n_merges)) return oom(err, errlen);
    size_t max_len = 0;
    for (int i = 0; i < t->n_vocab; i++)
        if (t->text_len[i] > max_len) max_len = t->text_len[i];
    char *buf = malloc(2 * max_len + 2);
    if (!buf) return oom(err, errlen);
    int rank = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, merges) {
        const char *a, *b;
        size_t na, nb;
        if (cJSON_IsString(it)) {
            const char *m = it->valuestring, *sp = *m ? strchr(m + 1, ' ') : NULL;
            if (!sp) {
                tok_seterr(err, errlen, "%s: merge %d \"%s\" is not \"a b\"", path, rank, m);
                free(buf);
                return -1;
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
            tok_seterr(err, errlen, "%s: merge %d is neither \"a b\" nor [a, b]", path, rank);
            free(buf);
            return -1;
        }
        /* Parts longer than any token cannot be in the vocabulary. */
        if (na <= max_len && nb <= max_len && tok_add_merge(t, a, na, b, nb, rank, 1, buf)) {
            free(buf);
            return oom(err, errlen);
        }
        rank++;
    }
    free(buf);
    return 0;
}

static tok_tokenizer *from_json(const cJSON *root, const char *path, char *err, size_t errlen) {
    json_bpe m;
    int n_vocab;
    size_t n_added;
    if (find_bpe(root, path, &m, err, errlen) || count_ids(&m, path, &n_vocab, &n_added, err, errlen)) return NULL;
    tok_tokenizer *t = tok_new();
    if (!t || tok_vocab_alloc(t, n_vocab)) {
        oom(err, errlen);
        tok_free(t);
        return NULL;
    }
    t->hf = 1;
    if (read_vocab(t, m.vocab, path, err, errlen) || read_added(t, m.added, n_added, err, errlen)) goto fail;
    t->ignore_merges = jbool(m.model, "ignore_merges", 0);
    t->byte_fallback = jbool(m.model, "byte_fallback", 0);
    t->fuse_unk = jbool(m.model, "fuse_unk", 0);
    const char *unk = jstr(m.model, "unk_token");
    if (unk) t->unk = id_of(t, unk);
    if (read_flavour(t, root, path, err, errlen) || read_merges(t, m.merges, path, err, errlen) ||
        parse_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), err, errlen))
        goto fail;
    t->bos = t->prefix_id;
    t->eos = t->suffix_id;
    return t;
fail:
    tok_free(t);
    return NULL;
}

/* eos_token_id of a Hugging Face config: an id or a list of ids. */
static void add_config_stops(tok_tokenizer *t, const cJSON *cfg) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(cfg, "eos_token_id");
    if (cJSON_IsNumber(e)) tok_add_stop(t, (int64_t)e->valuedouble);
    const cJSON *it;
    if (cJSON_IsArray(e))
        cJSON_ArrayForEach(it, e) if (cJSON_IsNumber(it)) tok_add_stop(t, (int64_t)it->valuedouble);
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
        tok_seterr(err, errlen, "%s: malformed JSON", p);
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
        tok_seterr(err, errlen, "%s: malformed JSON near byte %zu", path, off);
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
    tok_add_known_stops(t);
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
