/* chat.c — finding and rendering the chat template; see chat.h. */
#include "chat.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gguf.h"
#include "jinja.h"

/* Hugging Face's historical default (ChatML); also SmolLM2's own format. */
static const char CHATML[] =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

struct chat_template {
    jinja_template *t;
    const char *source;
    int builtin;
    char *bos, *eos;
    char *text; /* the template's source, for what it says about tools */
};

/* tokenizer_config.json's special-token fields: a string or {"content": "..."}. */
static char *token_string(const cJSON *v) {
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
}

static char *piece_string(const tok_tokenizer *tok, int id) {
    size_t n;
    const char *p = id >= 0 ? tok_piece(tok, id, &n) : NULL;
    return p ? strndup(p, n) : strdup("");
}

static char *read_file(const char *path, size_t max, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && (size_t)n <= max && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            *len = fread(buf, 1, (size_t)n, f);
            buf[*len] = 0;
        }
    }
    fclose(f);
    return buf;
}

/* The tokenizer_config.json beside a safetensors file, or inside its folder. */
static cJSON *tokenizer_config(const char *weights_path) {
    char path[4096];
    struct stat st;
    if (stat(weights_path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", weights_path);
    } else {
        const char *slash = strrchr(weights_path, '/');
        const int dirlen = slash ? (int)(slash - weights_path + 1) : 0;
        snprintf(path, sizeof path, "%.*stokenizer_config.json", dirlen, weights_path);
    }
    size_t len = 0;
    char *text = read_file(path, 64u << 20, &len);
    if (!text) return NULL;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    return j;
}

chat_template *chat_load(const wt_file *w, const tok_tokenizer *tok, char *err, size_t errlen) {
    chat_template *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    const char *src = NULL;
    cJSON *cfg = NULL;
    const gguf_file *g = wt_gguf(w);
    if (g) {
        src = gguf_get_str(g, "tokenizer.chat_template");
        if (src) c->source = "gguf";
    } else if ((cfg = tokenizer_config(wt_path(w)))) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
        if (cJSON_IsArray(t)) { /* named templates: the one called "default" */
            const cJSON *e, *found = NULL;
            cJSON_ArrayForEach(e, t) {
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
                if (cJSON_IsString(name) && !strcmp(name->valuestring, "default"))
                    found = cJSON_GetObjectItemCaseSensitive(e, "template");
            }
            t = found;
        }
        if (cJSON_IsString(t)) {
            src = t->valuestring;
            c->source = "tokenizer_config.json";
        }
        c->bos = token_string(cJSON_GetObjectItemCaseSensitive(cfg, "bos_token"));
        c->eos = token_string(cJSON_GetObjectItemCaseSensitive(cfg, "eos_token"));
    }
    if (!src) {
        src = CHATML;
        c->source = "builtin ChatML";
        c->builtin = 1;
    }
    if (!c->bos) c->bos = piece_string(tok, tok_bos(tok));
    if (!c->eos) c->eos = piece_string(tok, tok_eos(tok));
    char jerr[256];
    c->t = jinja_parse_ex(src, strlen(src), JINJA_HF, jerr, sizeof jerr);
    c->text = strdup(src);
    cJSON_Delete(cfg);
    if (!c->t || !c->bos || !c->eos || !c->text) {
        snprintf(err, errlen, "chat template (%s): %s", c->source, c->t ? "out of memory" : jerr);
        chat_free(c);
        return NULL;
    }
    return c;
}

void chat_free(chat_template *c) {
    if (!c) return;
    if (c->t) jinja_free(c->t);
    free(c->bos);
    free(c->eos);
    free(c->text);
    free(c);
}

const char *chat_source(const chat_template *c) { return c->source; }

int chat_is_builtin(const chat_template *c) { return c->builtin; }

const char *chat_text(const chat_template *c) { return c->text; }

char *chat_render(const chat_template *c, const cJSON *messages, const cJSON *tools, int *user_error, char *err,
                  size_t errlen) {
    *user_error = 0;
    cJSON *ctx = cJSON_CreateObject();
    if (!ctx) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    /* a reference, not a copy: the context is deleted below without touching messages */
    cJSON_AddItemReferenceToObject(ctx, "messages", (cJSON *)messages);
    /* as apply_chat_template: tools and documents are always defined, None when not given */
    if (tools) cJSON_AddItemReferenceToObject(ctx, "tools", (cJSON *)tools);
    else cJSON_AddNullToObject(ctx, "tools");
    cJSON_AddNullToObject(ctx, "documents");
    cJSON_AddTrueToObject(ctx, "add_generation_prompt");
    cJSON_AddStringToObject(ctx, "bos_token", c->bos);
    cJSON_AddStringToObject(ctx, "eos_token", c->eos);
    /* the request body is bounded, so a prompt far beyond it is a runaway template */
    const jinja_limits lim = {.max_output = 32u << 20, .max_memory = 256u << 20, .max_steps = 2000000};
    size_t len = 0;
    int raised = 0;
    char *out = jinja_render_ex(c->t, ctx, &lim, &len, &raised, err, errlen);
    cJSON_Delete(ctx);
    if (!out) *user_error = raised;
    return out;
}

/* ---- where the contents are ---------------------------------------------------
 *
 * Text in a message that spells a control token (<|im_end|>, ...) must stay
 * text; the template's markup must not. To know which bytes of a rendering
 * are whose, the template is rendered a second time with every content
 * replaced by a placeholder no client can forge (a fresh random number
 * between two control bytes, which no filter changes: upper/lower leave
 * digits alone, strip/trim do not take \x02 for space). The markup between
 * placeholders is then matched against the real rendering, each placeholder
 * standing for its content as given or stripped of surrounding whitespace
 * (templates that `trim` it). A template that transforms a content in
 * another way, or branches on it, defeats that match; then each content is
 * searched for in the rendering instead, in order, and one that does not
 * appear verbatim is not protected. The text tokenized is always the real
 * rendering. */

#define PH_OPEN '\x02'
#define PH_CLOSE '\x03'

typedef struct {
    tok_span *v;
    size_t n, cap;
} spanvec;

static int span_add(spanvec *sv, size_t start, size_t len) {
    if (!len) return 0;
    if (sv->n && start < sv->v[sv->n - 1].start + sv->v[sv->n - 1].len) return 0; /* keep them disjoint */
    if (sv->n == sv->cap) {
        const size_t cap = sv->cap ? sv->cap * 2 : 16;
        tok_span *v = realloc(sv->v, cap * sizeof *v);
        if (!v) return -1;
        sv->v = v;
        sv->cap = cap;
    }
    sv->v[sv->n++] = (tok_span){start, len};
    return 0;
}

/* Unguessable from outside: the clock in nanoseconds and a counter, mixed. */
static uint64_t next_nonce(void) {
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec + ++counter * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* If p starts a placeholder of this nonce: its message index and length. */
static int placeholder_at(const char *p, const char *prefix, size_t plen, size_t *idx, size_t *len) {
    if (strncmp(p, prefix, plen) != 0) return 0;
    size_t i = plen, v = 0;
    if (p[i] < '0' || p[i] > '9') return 0;
    while (p[i] >= '0' && p[i] <= '9' && i < plen + 12) v = v * 10 + (size_t)(p[i++] - '0');
    if (p[i] != PH_CLOSE) return 0;
    *idx = v;
    *len = i + 1;
    return 1;
}

/* Python's str.strip() for ASCII whitespace (what trim/strip do to typical text). */
static void stripped(const char *s, size_t *start, size_t *len) {
    static const char WS[] = " \t\n\r\v\f\x1c\x1d\x1e\x1f";
    size_t a = 0, b = strlen(s);
    while (a < b && strchr(WS, s[a])) a++;
    while (b > a && strchr(WS, s[b - 1])) b--;
    *start = a;
    *len = b - a;
}

/* The next placeholder at or after p, or the end of the string. */
static const char *next_placeholder(const char *p, const char *prefix, size_t plen) {
    size_t idx, len;
    for (const char *q = strchr(p, PH_OPEN); q; q = strchr(q + 1, PH_OPEN))
        if (placeholder_at(q, prefix, plen, &idx, &len)) return q;
    return p + strlen(p);
}

/* Matches the skeleton against the real rendering; 1 with the content
 * ranges in sv, 0 when they do not line up. */
static int align(const char *skel, const char *real, const char *const *contents, size_t n_msgs,
                 const char *prefix, size_t plen, spanvec *sv) {
    const char *sp = skel;
    size_t rp = 0;
    const size_t rlen = strlen(real);
    for (;;) {
        const char *q = next_placeholder(sp, prefix, plen);
        const size_t mlen = (size_t)(q - sp);
        if (rlen - rp < mlen || memcmp(real + rp, sp, mlen) != 0) return 0;
        rp += mlen;
        if (!*q) break;
        size_t idx, phlen;
        placeholder_at(q, prefix, plen, &idx, &phlen);
        if (idx >= n_msgs) return 0;
        sp = q + phlen;
        /* the markup that follows must follow the content too */
        const char *after = next_placeholder(sp, prefix, plen);
        const size_t alen = (size_t)(after - sp);
        size_t ts, tl;
        stripped(contents[idx], &ts, &tl);
        const struct {
            const char *p;
            size_t n;
        } cand[2] = {{contents[idx], strlen(contents[idx])}, {contents[idx] + ts, tl}};
        int found = 0;
        for (int k = 0; k < 2 && !found; k++) {
            if (rlen - rp < cand[k].n || memcmp(real + rp, cand[k].p, cand[k].n) != 0) continue;
            if (rlen - rp - cand[k].n < alen || memcmp(real + rp + cand[k].n, sp, alen) != 0) continue;
            if (span_add(sv, rp, cand[k].n)) return -1;
            rp += cand[k].n;
            found = 1;
        }
        if (!found) return 0;
    }
    return rp == rlen;
}

/* The fallback: each content (or its stripped form) where it first appears
 * after the previous one. */
static int search(const char *real, const char *const *contents, size_t n_msgs, spanvec *sv) {
    const size_t rlen = strlen(real);
    size_t cursor = 0;
    for (size_t i = 0; i < n_msgs; i++) {
        size_t ts = 0, tl = strlen(contents[i]);
        const char *m = tl ? memmem(real + cursor, rlen - cursor, contents[i], tl) : NULL;
        if (!m) {
            stripped(contents[i], &ts, &tl);
            m = tl ? memmem(real + cursor, rlen - cursor, contents[i] + ts, tl) : NULL;
        }
        if (!m) continue;
        if (span_add(sv, (size_t)(m - real), tl)) return -1;
        cursor = (size_t)(m - real) + tl;
    }
    return 0;
}

char *chat_render_prompt(const chat_template *c, const cJSON *messages, const cJSON *tools, tok_span **plain,
                         size_t *n_plain, int *user_error, char *err, size_t errlen) {
    *plain = NULL;
    *n_plain = 0;
    char *real = chat_render(c, messages, tools, user_error, err, errlen);
    if (!real) return NULL;
    const size_t n_msgs = (size_t)cJSON_GetArraySize(messages);
    const char **contents = calloc(n_msgs ? n_msgs : 1, sizeof *contents);
    cJSON *skel_msgs = cJSON_Duplicate(messages, 1);
    spanvec sv = {0};
    char prefix[32];
    const int plen = snprintf(prefix, sizeof prefix, "%c%020llu:", PH_OPEN,
                              (unsigned long long)next_nonce());
    int ok = contents && skel_msgs;
    size_t i = 0;
    const cJSON *m;
    /* the duplicate walked beside the original: cJSON_GetArrayItem(skel_msgs, i)
     * walks the list from its head, quadratic in the messages */
    cJSON *sm = skel_msgs ? skel_msgs->child : NULL;
    cJSON_ArrayForEach(m, messages) {
        if (!ok || !sm) break;
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        contents[i] = cJSON_IsString(content) ? content->valuestring : "";
        char ph[64];
        snprintf(ph, sizeof ph, "%s%zu%c", prefix, i, PH_CLOSE);
        if (cJSON_IsString(content) && !cJSON_ReplaceItemInObjectCaseSensitive(sm, "content", cJSON_CreateString(ph)))
            ok = 0;
        sm = sm->next;
        i++;
    }
    int aligned = 0;
    if (ok) {
        int ue = 0;
        char serr[64];
        char *skel = chat_render(c, skel_msgs, tools, &ue, serr, sizeof serr);
        if (skel) aligned = align(skel, real, contents, n_msgs, prefix, (size_t)plen, &sv);
        free(skel);
        if (aligned < 0) ok = 0;
        if (aligned <= 0) sv.n = 0;
        if (ok && !aligned && search(real, contents, n_msgs, &sv) != 0) ok = 0;
    }
    cJSON_Delete(skel_msgs);
    free(contents);
    if (!ok) {
        free(sv.v);
        free(real);
        *user_error = 0;
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    *plain = sv.v;
    *n_plain = sv.n;
    return real;
}

/* ---- strings of the template's own markup that are the client's ----------------
 *
 * Tool definitions and past calls' arguments reach a template as data it
 * writes with tojson, not as message contents, so the nonce-stamped stand-ins
 * of chat_render_prompt never cover them. The server names the strings among them that spell a
 * control token; each of their occurrences becomes a plain range too. */

static int span_cmp(const void *a, const void *b) {
    const tok_span *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* s as json.dumps writes it between the quotes (ASCII controls escaped,
 * everything else as is); NULL on out of memory. */
static char *json_inner(const char *s) {
    cJSON *j = cJSON_CreateString(s);
    char *p = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!p) return NULL;
    const size_t n = strlen(p);
    memmove(p, p + 1, n - 2); /* drop the quotes */
    p[n - 2] = 0;
    return p;
}

int chat_protect(const char *text, const char *const *strs, size_t n, tok_span **plain, size_t *n_plain) {
    spanvec sv = {0};
    const size_t tlen = strlen(text);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        char *esc = json_inner(strs[i]);
        if (!esc) {
            rc = -1;
            break;
        }
        const char *forms[2] = {strs[i], esc};
        for (int f = 0; f < 2 && !rc; f++) {
            const size_t l = strlen(forms[f]);
            if (!l || (f == 1 && !strcmp(esc, strs[i]))) continue;
            for (const char *m = memmem(text, tlen, forms[f], l); m && !rc;
                 m = memmem(m + 1, tlen - (size_t)(m + 1 - text), forms[f], l)) {
                if (sv.n == sv.cap) {
                    const size_t cap = sv.cap ? sv.cap * 2 : 16;
                    tok_span *v = realloc(sv.v, cap * sizeof *v);
                    if (!v) {
                        rc = -1;
                        break;
                    }
                    sv.v = v;
                    sv.cap = cap;
                }
                sv.v[sv.n++] = (tok_span){(size_t)(m - text), l};
            }
        }
        free(esc);
    }
    if (rc || !sv.n) {
        free(sv.v);
        return rc;
    }
    /* the old ranges and the new, sorted and merged where they overlap */
    tok_span *all = malloc((sv.n + *n_plain) * sizeof *all);
    if (!all) {
        free(sv.v);
        return -1;
    }
    if (*n_plain) memcpy(all, *plain, *n_plain * sizeof *all);
    memcpy(all + *n_plain, sv.v, sv.n * sizeof *all);
    free(sv.v);
    size_t total = *n_plain + sv.n, w = 0;
    qsort(all, total, sizeof *all, span_cmp);
    for (size_t i = 0; i < total; i++) {
        if (w && all[i].start <= all[w - 1].start + all[w - 1].len) {
            const size_t end = all[i].start + all[i].len;
            if (end > all[w - 1].start + all[w - 1].len) all[w - 1].len = end - all[w - 1].start;
        } else {
            all[w++] = all[i];
        }
    }
    free(*plain);
    *plain = all;
    *n_plain = w;
    return 0;
}
