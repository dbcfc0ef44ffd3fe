/* tool_calls.c — tool-call markup in generated text; see tool_calls.h.
 *
 * The parser is a small state machine over a held buffer. Outside a call it
 * releases every byte that can no longer begin the opening markup (and keeps
 * trailing whitespace, which is dropped if a call follows). Inside a call it
 * waits for the end of the call — the closing tag (Hermes) or the end of the
 * JSON value (Llama 3, Mistral) — and only then decides: a valid call, or
 * the markup given back as content.
 */
#include "tool_calls.h"

#include <stdlib.h>
#include <string.h>

static const char HERMES_OPEN[] = "<tool_call>";
static const char HERMES_CLOSE[] = "</tool_call>";
static const char MISTRAL_OPEN[] = "[TOOL_CALLS]";
static const char PYTHON_TAG[] = "<|python_tag|>";

const char *tc_format_name(tc_format f) {
    switch (f) {
    case TC_HERMES: return "hermes";
    case TC_LLAMA3: return "llama3_json";
    case TC_MISTRAL: return "mistral";
    }
    return "?";
}

tc_format tc_detect(const char *src, int *native) {
    *native = src && strstr(src, "tools") != NULL;
    if (!src || !*native) return TC_HERMES;
    if (strstr(src, MISTRAL_OPEN)) return TC_MISTRAL;
    if (strstr(src, HERMES_OPEN)) return TC_HERMES;
    if (strstr(src, PYTHON_TAG) || strstr(src, "ipython")) return TC_LLAMA3;
    return TC_HERMES;
}

const char *tc_open_marker(tc_format f) {
    switch (f) {
    case TC_HERMES: return HERMES_OPEN;
    case TC_LLAMA3: return PYTHON_TAG;
    case TC_MISTRAL: return MISTRAL_OPEN;
    }
    return NULL;
}

void tc_init(tc_parser *p, tc_format f) {
    memset(p, 0, sizeof *p);
    p->fmt = f;
    p->state = f == TC_LLAMA3 ? TC_START : TC_TEXT;
}

void tc_free(tc_parser *p) { oai_buf_free(&p->held); }

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* Drops the first n bytes of held. */
static void consume(tc_parser *p, size_t n) {
    memmove(p->held.p, p->held.p + n, p->held.len - n);
    p->held.len -= n;
    p->held.p[p->held.len] = 0;
}

/* Content out, except the whitespace that follows a call. */
static int release(tc_parser *p, tc_out *out, const char *s, size_t n) {
    if (p->after_call) {
        while (n && is_ws(*s)) s++, n--;
        if (!n) return 0;
        p->after_call = 0;
    }
    return oai_buf_add(&out->content, s, n);
}

/* ---- calls ------------------------------------------------------------------ */

/* Appends {"name", "arguments"} for one call object; 0, or -1 if o is not a call. */
static int add_call(const cJSON *o, cJSON *calls) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsObject(o) || !cJSON_IsString(name) || !name->valuestring[0]) return -1;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(o, "parameters"); /* Llama 3's spelling */
    char *text = NULL;
    if (!args) {
        text = strdup("{}");
    } else if (cJSON_IsObject(args)) {
        text = cJSON_PrintUnformatted(args);
    } else if (cJSON_IsString(args)) { /* arguments already encoded: taken if they are a JSON object */
        cJSON *inner = cJSON_Parse(args->valuestring);
        const int ok = cJSON_IsObject(inner);
        cJSON_Delete(inner);
        if (!ok) return -1;
        text = strdup(args->valuestring);
    } else {
        return -1;
    }
    if (!text) return -1;
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "name", name->valuestring);
    cJSON_AddStringToObject(c, "arguments", text);
    free(text);
    cJSON_AddItemToArray(calls, c);
    return 0;
}

/* The calls in one JSON text (an object, or an array of objects); all or
 * nothing. Returns how many were added, or -1 when the text holds no valid call. */
static int parse_calls(const char *json, size_t n, cJSON *calls) {
    cJSON *v = cJSON_ParseWithLength(json, n);
    if (!v) return -1;
    cJSON *found = cJSON_CreateArray();
    int ok = 0;
    if (cJSON_IsArray(v)) {
        const cJSON *e;
        ok = cJSON_GetArraySize(v) > 0;
        cJSON_ArrayForEach(e, v) if (ok && add_call(e, found) != 0) ok = 0;
    } else {
        ok = add_call(v, found) == 0;
    }
    cJSON_Delete(v);
    int k = 0;
    if (ok) {
        cJSON *c;
        while ((c = cJSON_DetachItemFromArray(found, 0))) {
            cJSON_AddItemToArray(calls, c);
            k++;
        }
    }
    cJSON_Delete(found);
    return ok ? k : -1;
}

/* Length of the complete JSON object or array starting at s (after leading
 * whitespace); 0 while it is incomplete; -1 if s does not start one. */
static long json_extent(const char *s, size_t n) {
    size_t i = 0;
    while (i < n && is_ws(s[i])) i++;
    if (i == n) return 0;
    if (s[i] != '{' && s[i] != '[') return -1;
    int depth = 0, in_str = 0;
    for (; i < n; i++) {
        const char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return (long)(i + 1);
        }
    }
    return 0;
}

/* ---- the state machine -------------------------------------------------------- */

/* Length of the longest suffix of s[0..n) that is a proper prefix of m. */
static size_t partial_suffix(const char *s, size_t n, const char *m) {
    const size_t ml = strlen(m);
    for (size_t k = ml - 1 < n ? ml - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, m, k)) return k;
    return 0;
}

/* The call's markup (held[0..end)) ends here: a call, or content. */
static int close_call(tc_parser *p, tc_out *out, size_t json_start, size_t json_len, size_t end) {
    const int k = parse_calls(p->held.p + json_start, json_len, out->calls);
    int rc = 0;
    if (k > 0) {
        p->n_calls += k;
        p->after_call = 1;
    } else {
        p->after_call = 0;
        rc = release(p, out, p->held.p, end);
    }
    consume(p, end);
    p->state = p->fmt == TC_LLAMA3 ? (k > 0 ? TC_START : TC_PLAIN) : TC_TEXT;
    return rc;
}

static int step(tc_parser *p, tc_out *out) {
    for (;;) {
        char *h = p->held.p;
        const size_t n = p->held.len;
        if (!n) return 0;
        switch (p->state) {
        case TC_PLAIN: {
            const int rc = release(p, out, h, n);
            consume(p, n);
            return rc;
        }
        case TC_START: { /* Llama 3: a call is the whole reply, or calls separated by ';' */
            size_t i = 0;
            while (i < n && (is_ws(h[i]) || (p->n_calls && h[i] == ';'))) i++;
            if (i == n) return 0;
            const size_t tl = strlen(PYTHON_TAG);
            if (h[i] == '{') {
                p->state = TC_IN_CALL;
                p->body = i;
            } else if (n - i >= tl && !memcmp(h + i, PYTHON_TAG, tl)) {
                p->state = TC_IN_CALL;
                p->body = i + tl;
            } else if (n - i < tl && !memcmp(h + i, PYTHON_TAG, n - i)) {
                return 0; /* the tag may still be arriving */
            } else {
                p->state = TC_PLAIN;
            }
            continue;
        }
        case TC_TEXT: {
            const char *open = tc_open_marker(p->fmt);
            const char *m = memmem(h, n, open, strlen(open));
            if (m) {
                /* whitespace before the markup goes with the call: dropped if
                 * it is one, given back with the markup if not */
                size_t pre = (size_t)(m - h);
                while (pre && is_ws(h[pre - 1])) pre--;
                if (release(p, out, h, pre)) return -1;
                consume(p, pre);
                p->state = TC_IN_CALL;
                p->body = (size_t)(m - h) - pre + strlen(open);
                continue;
            }
            size_t keep = partial_suffix(h, n, open);
            while (keep < n && is_ws(h[n - keep - 1])) keep++;
            if (release(p, out, h, n - keep)) return -1;
            consume(p, n - keep);
            return 0;
        }
        case TC_IN_CALL: {
            if (p->fmt == TC_HERMES) {
                const char *c = memmem(h + p->body, n - p->body, HERMES_CLOSE, strlen(HERMES_CLOSE));
                if (!c) return 0;
                const size_t cpos = (size_t)(c - h);
                if (close_call(p, out, p->body, cpos - p->body, cpos + strlen(HERMES_CLOSE))) return -1;
                continue;
            }
            const long ext = json_extent(h + p->body, n - p->body);
            if (ext == 0) return 0;
            if (ext < 0) { /* the markup is not followed by JSON: it was text after all */
                if (p->fmt == TC_LLAMA3) {
                    p->state = TC_PLAIN;
                } else {
                    p->after_call = 0;
                    if (release(p, out, h, p->body)) return -1;
                    consume(p, p->body);
                    p->state = TC_TEXT;
                }
                continue;
            }
            if (close_call(p, out, p->body, (size_t)ext, p->body + (size_t)ext)) return -1;
            continue;
        }
        }
    }
}

int tc_feed(tc_parser *p, const char *text, size_t n, tc_out *out) {
    if (oai_buf_add(&p->held, text, n) != 0 || oai_buf_add(&out->content, "", 0) != 0) return -1;
    return step(p, out);
}

int tc_finish(tc_parser *p, tc_out *out) {
    if (oai_buf_add(&out->content, "", 0) != 0) return -1;
    const size_t n = p->held.len;
    if (p->state == TC_IN_CALL && n) {
        /* an unclosed call: valid if its JSON is complete */
        size_t a = p->body, b = n;
        while (a < b && is_ws(p->held.p[a])) a++;
        while (b > a && is_ws(p->held.p[b - 1])) b--;
        const int k = a < b ? parse_calls(p->held.p + a, b - a, out->calls) : -1;
        if (k > 0) {
            p->n_calls += k;
            consume(p, n);
            return 0;
        }
        p->after_call = 0;
    }
    int rc = 0;
    size_t i = 0;
    while (i < n && is_ws(p->held.p[i])) i++;
    if (n && (i < n || !p->n_calls)) rc = release(p, out, p->held.p, n);
    if (n) consume(p, n);
    p->state = TC_PLAIN;
    return rc;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void tc_call_id(tc_format f, uint64_t *rng, char out[32]) {
    static const char ALNUM[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const int mistral = f == TC_MISTRAL;
    const int n = mistral ? 9 : 24;
    int w = 0;
    if (!mistral) {
        memcpy(out, "call_", 5);
        w = 5;
    }
    for (int i = 0; i < n; i++) out[w++] = ALNUM[splitmix(rng) % (sizeof ALNUM - 1)];
    out[w] = 0;
}
