/* quant_rules.c — modules_to_not_convert, ignored_layers and GPTQModel's dynamic rules of a quantization_config. */
#include "quant_rules.h"

/* GPTQModel writes its rules as Python regular expressions (re.match): PCRE2
 * reads that syntax (lookarounds, named groups, \b, classes) as Python does
 * for the ASCII module names matched here, so the rules are compiled as
 * written, anchored at the start. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "printable.h"

typedef struct {
    const char *key; /* the quantization_config key (static) */
    char *entry;     /* the list entry, or the rule's key as written */
    int excluded;
    int bits;
    int64_t group_size;
    pcre2_code *re;         /* a dynamic rule's expression, NULL for a list entry */
    pcre2_match_data *match;
} qr_rule;

struct qr_rules {
    qr_rule *rules;
    size_t n;
};

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
        int code;
        PCRE2_SIZE at;
        q->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED, &code, &at, NULL);
        if (!q->re) {
            PCRE2_UCHAR why[160];
            pcre2_get_error_message(code, why, sizeof why);
            snprintf(err, errlen, "quantization_config.dynamic rule '%s': not a regular expression: %s (at offset %zu)",
                     load_printable(k, pb, sizeof pb), (const char *)why, (size_t)at);
            return -1;
        }
        if (!(q->match = pcre2_match_data_create_from_pattern(q->re, NULL))) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        if (q->excluded) continue;
        if (!cJSON_IsObject(e)) {
            snprintf(err, errlen, "quantization_config.dynamic rule '%s' must map to an object", load_printable(k, pb, sizeof pb));
            return -1;
        }
        const cJSON *bits = cJSON_GetObjectItemCaseSensitive(e, "bits");
        if (bits && !cJSON_IsNull(bits)) {
            if (!cJSON_IsNumber(bits) || (bits->valuedouble != 4 && bits->valuedouble != 8)) {
                snprintf(err, errlen, "quantization_config.dynamic rule '%s': bits must be 4 or 8", load_printable(k, pb, sizeof pb));
                return -1;
            }
            q->bits = (int)bits->valuedouble;
        }
        const cJSON *gs = cJSON_GetObjectItemCaseSensitive(e, "group_size");
        if (gs && !cJSON_IsNull(gs)) {
            const double d = cJSON_IsNumber(gs) ? gs->valuedouble : 0;
            if (!isfinite(d) || floor(d) != d || (d != -1 && (d < 1 || d > INT32_MAX))) {
                snprintf(err, errlen, "quantization_config.dynamic rule '%s': group_size must be -1 or a positive integer",
                         load_printable(k, pb, sizeof pb));
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
        if (q->re ? pcre2_match(q->re, (PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, 0, 0, q->match, NULL) < 0
                  : !names_module(q->entry, name))
            continue;
        if (q->excluded) {
            m.excluded = 1, m.key = q->key, m.entry = q->entry;
            return m;
        }
        if (q->re) { /* the first matching dynamic rule decides */
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
        pcre2_match_data_free(r->rules[i].match);
        pcre2_code_free(r->rules[i].re);
    }
    free(r->rules);
    free(r);
}
