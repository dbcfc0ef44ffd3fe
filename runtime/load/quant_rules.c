/* quant_rules.c — modules_to_not_convert, ignored_layers and GPTQModel's dynamic rules of a quantization_config. */
#include "quant_rules.h"

#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *key; /* the quantization_config key (static) */
    char *entry;     /* the list entry, or the rule's key as written */
    int excluded;
    int bits;
    int64_t group_size;
    int has_regex;
    regex_t re;
} qr_rule;

struct qr_rules {
    qr_rule *rules;
    size_t n;
};

/* Printable, truncated copy of an untrusted string for messages. */
static const char *printable(const char *s, char *buf, size_t cap) {
    size_t j = 0;
    for (size_t i = 0; s[i] && j + 4 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        buf[j++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
        if (i >= 80) { memcpy(buf + j, "...", 3); j += 3; break; }
    }
    buf[j] = 0;
    return buf;
}

static qr_rule *add_rule(qr_rules *r, const char *key, const char *entry) {
    qr_rule *nr = realloc(r->rules, (r->n + 1) * sizeof *nr);
    if (!nr) return NULL;
    r->rules = nr;
    qr_rule *q = &nr[r->n];
    memset(q, 0, sizeof *q);
    q->key = key;
    if (!(q->entry = strdup(entry))) return NULL;
    r->n++;
    return q;
}

static size_t put(char *out, size_t o, const char *s) {
    const size_t l = strlen(s);
    memcpy(out + o, s, l);
    return o + l;
}

/* Python regular expression -> POSIX extended, anchored at the start as re.match is. NULL with
 * *why set when the expression uses a form POSIX lacks. The result is malloc'd. */
static char *python_to_posix(const char *py, const char **why) {
    const size_t n = strlen(py);
    char *out = malloc(n * 14 + 8); /* \w inside brackets is the longest expansion (11 bytes) */
    if (!out) { *why = "out of memory"; return NULL; }
    size_t o = 0;
    out[o++] = '^', out[o++] = '(';
    int in_bracket = 0;
    for (size_t i = 0; i < n; i++) {
        const char ch = py[i];
        if (ch == '\\' && i + 1 < n) {
            const char e = py[++i];
            const char *cls = e == 'd' ? "0-9" : e == 'w' ? "A-Za-z0-9_" : e == 's' ? "[:space:]" : NULL;
            const char *neg = e == 'D' ? "0-9" : e == 'W' ? "A-Za-z0-9_" : e == 'S' ? "[:space:]" : NULL;
            if (in_bracket) {
                if (neg) { *why = "a negated class (\\D, \\W, \\S) inside [...]"; free(out); return NULL; }
                if (e == ']' || e == '-') { /* POSIX has no escape in brackets: these would close it or make a range */
                    *why = "an escaped ] or - inside [...]";
                    free(out);
                    return NULL;
                }
                if (cls) o = put(out, o, cls);
                else out[o++] = e; /* a backslash is literal inside a POSIX bracket expression */
            } else if (cls) {
                out[o++] = '[';
                o = put(out, o, cls);
                out[o++] = ']';
            } else if (neg) {
                out[o++] = '[', out[o++] = '^';
                o = put(out, o, neg);
                out[o++] = ']';
            } else if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
                *why = "an escape POSIX regular expressions lack";
                free(out);
                return NULL;
            } else {
                out[o++] = '\\', out[o++] = e;
            }
            continue;
        }
        if (in_bracket) {
            if (ch == ']' && !(py[i - 1] == '[' || (i >= 2 && py[i - 1] == '^' && py[i - 2] == '['))) in_bracket = 0;
            out[o++] = ch;
            continue;
        }
        if (ch == '[') {
            in_bracket = 1;
            out[o++] = ch;
        } else if (ch == '(' && py[i + 1] == '?') {
            if (py[i + 2] != ':') { *why = "a (?...) form other than (?:...)"; free(out); return NULL; }
            out[o++] = '(';
            i += 2;
        } else if (ch == '?' && i > 0 && (py[i - 1] == '*' || py[i - 1] == '+' || py[i - 1] == '?' || py[i - 1] == '}')) {
            /* lazy: matches the same prefixes */
        } else {
            out[o++] = ch;
        }
    }
    out[o++] = ')';
    out[o] = 0;
    return out;
}

static int parse_list(qr_rules *r, const cJSON *qcfg, const char *key, char *err, size_t errlen) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(qcfg, key);
    if (!list || cJSON_IsNull(list)) return 0;
    if (!cJSON_IsArray(list)) {
        snprintf(err, errlen, "quantization_config.%s must be a list of module names", key);
        return -1;
    }
    int i = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e) || !e->valuestring[0]) {
            snprintf(err, errlen, "quantization_config.%s[%d] must be a non-empty module name", key, i);
            return -1;
        }
        qr_rule *q = add_rule(r, key, e->valuestring);
        if (!q) { snprintf(err, errlen, "out of memory"); return -1; }
        q->excluded = 1;
    }
    return 0;
}

static int parse_dynamic(qr_rules *r, const cJSON *qcfg, char *err, size_t errlen) {
    const cJSON *dyn = cJSON_GetObjectItemCaseSensitive(qcfg, "dynamic");
    if (!dyn || cJSON_IsNull(dyn)) return 0;
    if (!cJSON_IsObject(dyn)) {
        snprintf(err, errlen, "quantization_config.dynamic must be an object of rules");
        return -1;
    }
    char pb[96];
    for (const cJSON *e = dyn->child; e; e = e->next) {
        const char *k = e->string;
        qr_rule *q = add_rule(r, "dynamic", k);
        if (!q) { snprintf(err, errlen, "out of memory"); return -1; }
        q->excluded = strncmp(k, "-:", 2) == 0;
        const char *pattern = k + (q->excluded || strncmp(k, "+:", 2) == 0 ? 2 : 0);
        const char *why = NULL;
        char *posix = python_to_posix(pattern, &why);
        if (!posix || regcomp(&q->re, posix, REG_EXTENDED | REG_NOSUB) != 0) {
            snprintf(err, errlen, "quantization_config.dynamic rule '%s': not a regular expression ingot can match%s%s",
                     printable(k, pb, sizeof pb), why ? ": " : "", why ? why : "");
            free(posix);
            return -1;
        }
        free(posix);
        q->has_regex = 1;
        if (q->excluded) continue;
        if (!cJSON_IsObject(e)) {
            snprintf(err, errlen, "quantization_config.dynamic rule '%s' must map to an object", printable(k, pb, sizeof pb));
            return -1;
        }
        const cJSON *bits = cJSON_GetObjectItemCaseSensitive(e, "bits");
        if (bits && !cJSON_IsNull(bits)) {
            if (!cJSON_IsNumber(bits) || (bits->valuedouble != 4 && bits->valuedouble != 8)) {
                snprintf(err, errlen, "quantization_config.dynamic rule '%s': bits must be 4 or 8", printable(k, pb, sizeof pb));
                return -1;
            }
            q->bits = (int)bits->valuedouble;
        }
        const cJSON *gs = cJSON_GetObjectItemCaseSensitive(e, "group_size");
        if (gs && !cJSON_IsNull(gs)) {
            const double d = cJSON_IsNumber(gs) ? gs->valuedouble : 0;
            if (!isfinite(d) || floor(d) != d || (d != -1 && (d < 1 || d > INT32_MAX))) {
                snprintf(err, errlen, "quantization_config.dynamic rule '%s': group_size must be -1 or a positive integer",
                         printable(k, pb, sizeof pb));
                return -1;
            }
            q->group_size = (int64_t)d;
        }
    }
    return 0;
}

qr_rules *qr_parse(const cJSON *qcfg, int dynamic_allowed, char *err, size_t errlen) {
    qr_rules *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (parse_list(r, qcfg, "modules_to_not_convert", err, errlen) || parse_list(r, qcfg, "ignored_layers", err, errlen) ||
        (dynamic_allowed && parse_dynamic(r, qcfg, err, errlen))) {
        qr_free(r);
        return NULL;
    }
    if (!dynamic_allowed && cJSON_GetObjectItemCaseSensitive(qcfg, "dynamic") &&
        !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(qcfg, "dynamic"))) {
        snprintf(err, errlen, "quantization_config.dynamic is a GPTQ field (per-module rules are not defined for this method)");
        qr_free(r);
        return NULL;
    }
    return r;
}

/* entry is a run of whole dot-separated components of name. */
static int names_module(const char *entry, const char *name) {
    const size_t el = strlen(entry);
    for (const char *p = name; (p = strstr(p, entry)) != NULL; p++) {
        const int starts = p == name || p[-1] == '.';
        const int ends = p[el] == 0 || p[el] == '.';
        if (starts && ends) return 1;
    }
    return 0;
}

qr_match qr_lookup(const qr_rules *r, const char *name) {
    qr_match m = {0};
    for (size_t i = 0; r && i < r->n; i++) {
        const qr_rule *q = &r->rules[i];
        if (q->has_regex ? regexec(&q->re, name, 0, NULL, 0) != 0 : !names_module(q->entry, name)) continue;
        if (q->excluded) {
            m.excluded = 1, m.key = q->key, m.entry = q->entry;
            return m;
        }
        if (q->has_regex) { /* the first matching dynamic rule decides */
            m.bits = q->bits, m.group_size = q->group_size;
            return m;
        }
    }
    return m;
}

void qr_free(qr_rules *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        free(r->rules[i].entry);
        if (r->rules[i].has_regex) regfree(&r->rules[i].re);
    }
    free(r->rules);
    free(r);
}
