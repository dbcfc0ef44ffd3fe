/* json_schema.c — JSON Schema to GBNF; see json_schema.h.
 *
 * Every schema node becomes one rule named "s<N>" (a node reached twice, or
 * through $ref, keeps its first name, which is what makes recursive schemas
 * finite); the shared JSON rules (strings, numbers, any value, bounded
 * whitespace) are appended once at the end. An object's properties are
 * emitted in declared order; for optional ones two rule chains say what may
 * follow, "first" (no member yet, so no comma) and "after" (comma first):
 *   first_i ::= kv_i after_i+1 | first_i+1      (optional i; required: no second branch)
 *   after_i ::= "," ws kv_i after_i+1 | after_i+1
 * A string with a pattern is its own group of rules "s<N>-..." (json_schema_pattern.h): the
 * regular expression as an automaton over JSON-encoded characters, its length bounds included.
 */
#include "json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "json_schema_pattern.h"
#include "text_buf.h"

#define JS_MAX_DEPTH 64

#define JS_COMMON_RULES                                                                                              \
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,16}\n"                                                                        \
    "json-char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"                        \
    "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"                                                                 \
    "json-int ::= \"-\"? json-uint\n"                                                                                \
    "json-uint ::= \"0\" | [1-9] [0-9]{0,15}\n"                                                                      \
    "json-frac ::= \".\" [0-9]{1,16}\n"                                                                             \
    "json-frac-exp ::= json-frac? ([eE] [-+]? [0-9]{1,2})?\n"                                                       \
    "json-number ::= json-int json-frac-exp\n"                                                                       \
    "json-value ::= json-object | json-array | json-string | json-number | \"true\" | \"false\" | \"null\"\n"         \
    "json-object ::= \"{\" ws (json-string ws \":\" ws json-value ws (\",\" ws json-string ws \":\" ws json-value ws)*)? \"}\"\n" \
    "json-array ::= \"[\" ws (json-value ws (\",\" ws json-value ws)*)? \"]\"\n"                                     \
    "json-date ::= [1-2] [0-9]{3} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])" \
    " | (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))\n" \
    "json-time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})?"               \
    " (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"                                                 \
    "json-hex ::= [0-9a-fA-F]\n"                                                                                     \
    "json-uuid ::= json-hex{8} \"-\" json-hex{4} \"-\" json-hex{4} \"-\" json-hex{4} \"-\" json-hex{12}\n"           \
    "json-email ::= [a-zA-Z0-9._%+-]{1,64} \"@\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,30} (\".\" [a-zA-Z]{2,10}){1,3}\n"

const char *js_object_grammar(void) { return "root ::= json-object\n" JS_COMMON_RULES; }

typedef text_buf sbuf;

static void sb_addn(sbuf *b, const char *s, size_t n) { text_buf_add(b, s, n); }
static void sb_add(sbuf *b, const char *s) { text_buf_puts(b, s); }
#define sb_addf text_buf_printf

/* s as a GBNF literal: quotes and backslashes escaped, control bytes as \xHH. */
static void sb_literal(sbuf *b, const char *s) {
    sb_add(b, "\"");
    for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
        if (*u == '"') sb_add(b, "\\\"");
        else if (*u == '\\') sb_add(b, "\\\\");
        else if (*u < 0x20) sb_addf(b, "\\x%02X", *u);
        else sb_addn(b, (const char *)u, 1);
    }
    sb_add(b, "\"");
}

/* A JSON value's compact text as a GBNF literal. */
static int sb_json_literal(sbuf *b, const cJSON *v) {
    char *text = cJSON_PrintUnformatted(v);
    if (!text) return -1;
    sb_literal(b, text);
    free(text);
    return 0;
}

typedef struct {
    const cJSON *node;
    int id;
} named;

typedef struct {
    sbuf rules;
    const cJSON *root;
    named *names;
    int n_names, cap_names, next_id;
    int depth;
    char *err;
    size_t errlen;
    int failed;
} jsctx;

static int js_fail(jsctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int js_fail(jsctx *c, const char *fmt, ...) {
    if (!c->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
        c->failed = 1;
    }
    return -1;
}

static void child_path(char *out, size_t cap, const char *path, const char *a, const char *b) {
    snprintf(out, cap, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

static const char *const KEYWORDS[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
    "anyOf", "$defs", "definitions", "$ref", "format", "minLength", "maxLength", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "title", "description", "default", "examples", "$schema", "$id",
    "$comment", "strict", "minProperties", "maxProperties", "pattern", "multipleOf",
};

static int check_keywords(jsctx *c, const cJSON *s, const char *path) {
    const cJSON *k;
    cJSON_ArrayForEach(k, s) {
        size_t i = 0;
        while (i < sizeof KEYWORDS / sizeof KEYWORDS[0] && strcmp(KEYWORDS[i], k->string)) i++;
        if (i == sizeof KEYWORDS / sizeof KEYWORDS[0])
            return js_fail(c, "unsupported keyword '%.60s' at %.120s", k->string, path);
    }
    return 0;
}

/* "#", "#/$defs/x", or any local JSON pointer ("~1" is "/", "~0" is "~"). */
static const cJSON *resolve_ref(jsctx *c, const char *ref, const char *path) {
    if (ref[0] != '#') {
        js_fail(c, "'$ref' at %.120s: only local references (\"#...\") are supported", path);
        return NULL;
    }
    const cJSON *node = c->root;
    const char *s = ref + 1;
    while (*s) {
        if (*s != '/') break;
        s++;
        char part[128];
        size_t n = 0;
        while (*s && *s != '/' && n + 1 < sizeof part) {
            if (s[0] == '~' && s[1] == '1') part[n++] = '/', s += 2;
            else if (s[0] == '~' && s[1] == '0') part[n++] = '~', s += 2;
            else part[n++] = *s++;
        }
        part[n] = 0;
        node = cJSON_IsObject(node) ? cJSON_GetObjectItemCaseSensitive(node, part) : NULL;
        if (!node) break;
    }
    if (!node || *s) js_fail(c, "'$ref' at %.120s: '%.80s' does not resolve", path, ref);
    return node && !*s ? node : NULL;
}

static int gen(jsctx *c, const cJSON *s, const char *path, char *name);

static int new_rule(jsctx *c, char *name) {
    snprintf(name, 24, "s%d", c->next_id++);
    return 0;
}

static int get_count(jsctx *c, const cJSON *s, const char *key, long dflt, long *out, const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 100000 || v->valuedouble != (long)v->valuedouble)
        return js_fail(c, "'%s' at %.120s must be an integer in [0, 100000]", key, path);
    *out = (long)v->valuedouble;
    return 0;
}

/* "{m,n}", "{m,}", or "" for {1,1} */
static void sb_count(sbuf *b, long min, long max) {
    if (max < 0) sb_addf(b, "{%ld,}", min);
    else if (min != 1 || max != 1) sb_addf(b, "{%ld,%ld}", min, max);
}

static int gen_object(jsctx *c, const cJSON *s, const char *path, sbuf *body) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    char p2[256];
    if (props && !cJSON_IsObject(props)) return js_fail(c, "'properties' at %.120s must be an object", path);
    if (req && !cJSON_IsArray(req)) return js_fail(c, "'required' at %.120s must be an array", path);
    const cJSON *r;
    cJSON_ArrayForEach(r, req) {
        if (!cJSON_IsString(r)) return js_fail(c, "'required' at %.120s must hold strings", path);
        if (!props || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            return js_fail(c, "'required' at %.120s names '%.60s', which is not in 'properties'", path,
                           r->valuestring);
    }
    const int n = props ? cJSON_GetArraySize(props) : 0;
    if (n == 0) { /* a map: keys are any strings, values follow additionalProperties */
        char vname[24] = "json-value";
        if (cJSON_IsFalse(addl)) {
            sb_add(body, "\"{\" ws \"}\"");
            return 0;
        }
        if (addl && !cJSON_IsTrue(addl)) {
            child_path(p2, sizeof p2, path, "additionalProperties", NULL);
            if (gen(c, addl, p2, vname)) return -1;
        }
        long min, max;
        if (get_count(c, s, "minProperties", 0, &min, path) || get_count(c, s, "maxProperties", -1, &max, path))
            return -1;
        if (max >= 0 && max < min) return js_fail(c, "'maxProperties' at %.120s is below 'minProperties'", path);
        if (max == 0) {
            sb_add(body, "\"{\" ws \"}\"");
            return 0;
        }
        sb_addf(body, "\"{\" ws %sjson-string ws \":\" ws %s ws (\",\" ws json-string ws \":\" ws %s ws)",
                min == 0 ? "(" : "", vname, vname);
        sb_count(body, min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1);
        sb_addf(body, "%s \"}\"", min == 0 ? ")?" : "");
        return 0;
    }
    if (cJSON_GetObjectItemCaseSensitive(s, "minProperties") || cJSON_GetObjectItemCaseSensitive(s, "maxProperties"))
        return js_fail(c, "'minProperties' / 'maxProperties' at %.120s: only supported without 'properties'", path);
    if (addl && !cJSON_IsFalse(addl))
        return js_fail(c, "'additionalProperties' at %.120s: only false is supported alongside 'properties'", path);
    /* rules first_i and after_i for i in [0, n); first_n and after_n are "" */
    char (*kv)[24] = calloc((size_t)n, 24);
    int *required = calloc((size_t)n, sizeof(int));
    if (!kv || !required) {
        free(kv);
        free(required);
        return js_fail(c, "out of memory");
    }
    int i = 0, rc = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        char vname[24];
        child_path(p2, sizeof p2, path, "properties", p->string);
        if ((rc = gen(c, p, p2, vname)) != 0) break;
        cJSON_ArrayForEach(r, req) if (!strcmp(r->valuestring, p->string)) required[i] = 1;
        /* kv_i ::= "\"key\"" ws ":" ws value ws */
        new_rule(c, kv[i]);
        cJSON *key = cJSON_CreateString(p->string);
        sb_addf(&c->rules, "%s ::= ", kv[i]);
        rc = key ? sb_json_literal(&c->rules, key) : -1;
        cJSON_Delete(key);
        if (rc) break;
        sb_addf(&c->rules, " ws \":\" ws %s ws\n", vname);
        i++;
    }
    if (rc) {
        free(kv);
        free(required);
        return c->failed ? -1 : js_fail(c, "out of memory");
    }
    char first_next[24] = "\"\"", after_next[24] = "\"\"";
    for (i = n - 1; i >= 0; i--) {
        char first[24], after[24];
        new_rule(c, after);
        new_rule(c, first);
        sb_addf(&c->rules, "%s ::= \",\" ws %s %s", after, kv[i], after_next);
        if (!required[i]) sb_addf(&c->rules, " | %s", after_next);
        sb_addf(&c->rules, "\n%s ::= %s %s", first, kv[i], after_next);
        if (!required[i]) sb_addf(&c->rules, " | %s", first_next);
        sb_add(&c->rules, "\n");
        memcpy(first_next, first, 24);
        memcpy(after_next, after, 24);
    }
    sb_addf(body, "\"{\" ws %s \"}\"", first_next);
    free(kv);
    free(required);
    return 0;
}

static int gen_array(jsctx *c, const cJSON *s, const char *path, sbuf *body) {
    char item[24] = "json-value", p2[256];
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (items) {
        if (cJSON_IsArray(items)) return js_fail(c, "'items' at %.120s must be a schema (tuples are not supported)", path);
        child_path(p2, sizeof p2, path, "items", NULL);
        if (gen(c, items, p2, item)) return -1;
    }
    long min, max;
    if (get_count(c, s, "minItems", 0, &min, path) || get_count(c, s, "maxItems", -1, &max, path)) return -1;
    if (max >= 0 && max < min) return js_fail(c, "'maxItems' at %.120s is below 'minItems'", path);
    if (max == 0) {
        sb_add(body, "\"[\" ws \"]\"");
        return 0;
    }
    sb_addf(body, "\"[\" ws %s%s ws (\",\" ws %s ws)", min == 0 ? "(" : "", item, item);
    sb_count(body, min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1);
    sb_addf(body, "%s \"]\"", min == 0 ? ")?" : "");
    return 0;
}

/* A string with a pattern: its own rules (json_schema_pattern.h), with minLength / maxLength
 * compiled in; the error names the keyword and the path. */
static int gen_pattern(jsctx *c, const cJSON *s, const cJSON *pattern, const char *path, sbuf *body) {
    if (!cJSON_IsString(pattern)) return js_fail(c, "'pattern' at %.120s must be a string", path);
    if (cJSON_GetObjectItemCaseSensitive(s, "format"))
        return js_fail(c, "'pattern' at %.120s cannot be combined with 'format'", path);
    long min, max;
    if (get_count(c, s, "minLength", 0, &min, path) || get_count(c, s, "maxLength", -1, &max, path)) return -1;
    if (max >= 0 && max < min) return js_fail(c, "'maxLength' at %.120s is below 'minLength'", path);
    char name[24], perr[200];
    new_rule(c, name);
    char *rules = jsp_grammar(pattern->valuestring, min, max, name, perr, sizeof perr);
    if (!rules) return js_fail(c, "'pattern' at %.120s: %s", path, perr);
    sb_add(&c->rules, rules);
    free(rules);
    sb_add(body, name);
    return 0;
}

static int gen_string(jsctx *c, const cJSON *s, const char *path, sbuf *body) {
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(s, "format");
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    if (pattern) return gen_pattern(c, s, pattern, path, body);
    if (format) {
        static const char *const FORMATS[] = {"date", "time", "date-time", "uuid", "email"};
        static const char *const RULES[] = {"json-date", "json-time", "json-date \"T\" json-time", "json-uuid",
                                            "json-email"};
        if (!cJSON_IsString(format)) return js_fail(c, "'format' at %.120s must be a string", path);
        for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
            if (!strcmp(format->valuestring, FORMATS[i])) {
                sb_addf(body, "\"\\\"\" %s \"\\\"\"", RULES[i]);
                return 0;
            }
        return js_fail(c, "unsupported format '%.60s' at %.120s (supported: date, time, date-time, uuid, email)",
                       format->valuestring, path);
    }
    long min, max;
    if (get_count(c, s, "minLength", 0, &min, path) || get_count(c, s, "maxLength", -1, &max, path)) return -1;
    if (max >= 0 && max < min) return js_fail(c, "'maxLength' at %.120s is below 'minLength'", path);
    if (min == 0 && max < 0) {
        sb_add(body, "json-string");
        return 0;
    }
    sb_add(body, "\"\\\"\" json-char");
    sb_count(body, min, max);
    sb_add(body, " \"\\\"\"");
    return 0;
}

/* ---- numeric bounds ----------------------------------------------------------------
 *
 * minimum / maximum / exclusiveMinimum / exclusiveMaximum compiled into the digits: a range of
 * magnitudes [lo, hi] becomes, per digit count, the usual split at the first digit where its
 * ends differ ("1" [3-9] | [2-4] [0-9] | "5" [0-7] for 13..57), so every number the grammar
 * allows is in bounds and every one in bounds (within the 16-digit cap) is allowed. A number
 * (not an integer) with bounds has no exponent, and its bounds must be whole numbers: a value
 * is then its integer part's range with any fraction, plus the edges (3 < x: "3" and a fraction
 * that is not all zeros; x <= 7: "7" and a fraction of zeros). */

#define JS_MAX_MAGNITUDE 9999999999999999.0 /* json-uint's 16 digits */

static int all_digit(const char *s, int n, char d) {
    for (int i = 0; i < n; i++)
        if (s[i] != d) return 0;
    return 1;
}

/* Digit strings of length n from lo to hi (both n digits, lo <= hi). */
static void sb_fixed_range(sbuf *b, const char *lo, const char *hi, int n) {
    int i = 0;
    while (i < n && lo[i] == hi[i]) i++;
    if (i > 0) sb_addf(b, " \"%.*s\"", i, lo);
    if (i == n) return;
    const int rest = n - i - 1;
    const int low_full = all_digit(lo + i + 1, rest, '0'), high_full = all_digit(hi + i + 1, rest, '9');
    const char first = (char)(low_full ? lo[i] : lo[i] + 1), last = (char)(high_full ? hi[i] : hi[i] - 1);
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    int alts = 0;
    sb_add(b, " (");
    if (!low_full) {
        sb_addf(b, " \"%c\"", lo[i]);
        sb_fixed_range(b, lo + i + 1, nines, rest);
        alts++;
    }
    if (first <= last) {
        sb_addf(b, "%s [%c-%c]", alts++ ? " |" : "", first, last);
        if (rest) sb_addf(b, " [0-9]{%d}", rest);
    }
    if (!high_full) {
        sb_addf(b, "%s \"%c\"", alts++ ? " |" : "", hi[i]);
        sb_fixed_range(b, zeros, hi + i + 1, rest);
    }
    sb_add(b, " )");
}

/* Integers in [lo, hi] without leading zeros (0 <= lo <= hi <= JS_MAX_MAGNITUDE). */
static void sb_uint_range(sbuf *b, double lo, double hi) {
    char los[24], his[24];
    const int nlo = snprintf(los, sizeof los, "%.0f", lo), nhi = snprintf(his, sizeof his, "%.0f", hi);
    sb_add(b, " (");
    for (int n = nlo; n <= nhi; n++) {
        char a[24], z[24];
        if (n == nlo) memcpy(a, los, (size_t)n);
        else a[0] = '1', memset(a + 1, '0', (size_t)n - 1);
        if (n == nhi) memcpy(z, his, (size_t)n);
        else memset(z, '9', (size_t)n);
        if (n > nlo) sb_add(b, " |");
        sb_fixed_range(b, a, z, n);
    }
    sb_add(b, " )");
}

/* Magnitudes (non-negative) between lo and hi, each end inclusive or not, as alternatives
 * appended to b (*alts counts them): for an integer, whole numbers; for a number, an integer
 * part and a fraction as the edges allow. lo and hi are whole numbers. */
static void sb_magnitudes(sbuf *b, int *alts, double lo, int lo_incl, double hi, int hi_incl, int integer) {
    if (integer) {
        const double a = lo_incl ? lo : lo + 1, z = hi_incl ? hi : hi - 1;
        if (a > z) return;
        sb_add(b, *alts ? " |" : "");
        sb_uint_range(b, a, z);
        ++*alts;
        return;
    }
    /* any fraction: integer parts strictly inside, and lo itself when inclusive */
    const double a = lo_incl ? lo : lo + 1, z = hi - 1;
    if (a <= z) {
        sb_add(b, *alts ? " |" : "");
        sb_uint_range(b, a, z);
        sb_add(b, " json-frac?");
        ++*alts;
    }
    if (!lo_incl && lo < hi) { /* lo itself, above it only by a fraction that is not zero */
        sb_addf(b, "%s \"%.0f\" \".\" \"0\"{0,15} [1-9] [0-9]{0,15}", *alts ? " |" : "", lo);
        ++*alts;
    }
    if (hi_incl && (lo < hi || lo_incl)) { /* hi itself, with a fraction of zeros at most */
        sb_addf(b, "%s \"%.0f\" (\".\" \"0\"{1,16})?", *alts ? " |" : "", hi);
        ++*alts;
    }
}

/* One bound of s: its value in *v and whether it is inclusive; 0 if absent. Draft 4's boolean
 * exclusiveMinimum / exclusiveMaximum make minimum / maximum exclusive. */
static int get_bound(jsctx *c, const cJSON *s, const char *name, const char *exclusive_name, double *v, int *incl,
                     const char *path) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(s, name), *x = cJSON_GetObjectItemCaseSensitive(s, exclusive_name);
    if ((m && !cJSON_IsNumber(m)) || (x && !cJSON_IsNumber(x) && !cJSON_IsBool(x)))
        return js_fail(c, "'%s' at %.120s must be a number", m && !cJSON_IsNumber(m) ? name : exclusive_name, path);
    int found = 0;
    if (cJSON_IsNumber(m)) *v = m->valuedouble, *incl = !cJSON_IsTrue(x), found = 1;
    if (cJSON_IsNumber(x)) {
        const int low = !strcmp(name, "minimum");
        /* the tighter of the two; an exclusive one wins a tie */
        if (!found || (low ? x->valuedouble >= *v : x->valuedouble <= *v)) *v = x->valuedouble, *incl = 0;
        found = 1;
    }
    return found;
}

/* ---- multipleOf (integers) ----------------------------------------------------------
 *
 * The decimal digits of the multiples of k are a regular language: read left to right, the
 * remainder r of what has been read is the state, a digit d moves it to (10 r + d) mod k, and a
 * number ends in state 0. Without bounds (or with only a lower bound of 0 or 1), rules
 * "<name>-<n>-<r>" give each state's moves with n more digits allowed (16 digits at most, as
 * json-uint), the digits grouped by the state they lead to, and only toward states from which
 * a multiple can still be finished (so the sampler never enters a dead end); the first digit is
 * not 0, and "-" may lead (a negative multiple is a multiple). With both bounds, the multiples
 * between them are listed. Other combinations are refused with the reason. */

#define JS_MAX_MODULUS 1000   /* multiples listed between two bounds: any k up to this */
#define JS_MAX_AUTOMATON 100  /* the remainder automaton: 16 x k rules */
#define JS_MAX_MULTIPLES 1000 /* multiples listed between two bounds */
#define JS_MULTIPLE_DIGITS 16 /* json-uint's */

/* alive[n][r]: a multiple can be finished from remainder r with at most n more digits. */
static void modulus_alive(long k, unsigned char alive[JS_MULTIPLE_DIGITS][JS_MAX_AUTOMATON]) {
    for (long r = 0; r < k; r++) alive[0][r] = r == 0;
    for (int n = 1; n < JS_MULTIPLE_DIGITS; n++)
        for (long r = 0; r < k; r++) {
            int ok = r == 0;
            for (int d = 0; d <= 9 && !ok; d++) ok = alive[n - 1][(10 * r + d) % k];
            alive[n][r] = (unsigned char)ok;
        }
}

/* The moves from remainder r with digits [d0, 9] toward live states with n - 1 digits left: one
 * alternative per target state, "[digits] <base>-<n-1>-<t>" (just "[digits]" into state 0 with
 * none left). Returns the alternatives written. */
static int sb_modulus_moves(sbuf *b, const char *base, long k, int n, long r, int d0,
                            unsigned char alive[JS_MULTIPLE_DIGITS][JS_MAX_AUTOMATON]) {
    int alts = 0;
    for (long t = 0; t < k; t++) {
        if (!alive[n - 1][t]) continue;
        char digits[11];
        int m = 0;
        for (int d = d0; d <= 9; d++)
            if ((10 * r + d) % k == t) digits[m++] = (char)('0' + d);
        if (!m) continue;
        digits[m] = 0;
        if (n - 1 == 0) sb_addf(b, "%s [%s]", alts++ ? " |" : "", digits);
        else sb_addf(b, "%s [%s] %s-%d-%ld", alts++ ? " |" : "", digits, base, n - 1, t);
    }
    return alts;
}

/* The automaton's rules base-<n>-<r> (1 <= n < 16 digits left) into c->rules. */
static void sb_modulus_rules(jsctx *c, const char *base, long k, unsigned char alive[JS_MULTIPLE_DIGITS][JS_MAX_AUTOMATON]) {
    for (int n = 1; n < JS_MULTIPLE_DIGITS; n++)
        for (long r = 0; r < k; r++) {
            if (!alive[n][r]) continue;
            sb_addf(&c->rules, "%s-%d-%ld ::= (", base, n, r);
            sb_modulus_moves(&c->rules, base, k, n, r, 0, alive);
            sb_addf(&c->rules, " )%s\n", r == 0 ? "?" : ""); /* state 0 may end the number */
        }
}

/* An integer schema's multipleOf, with the bounds already read (has_lo/has_hi, whole and
 * inclusive); 1 when there is none (the caller compiles the bounds alone), 0 when compiled,
 * -1 with the error set. */
static int gen_multiple_of(jsctx *c, const cJSON *s, const char *path, sbuf *body, int has_lo, double lo,
                           int has_hi, double hi) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(s, "multipleOf");
    if (!m) return 1;
    if (!cJSON_IsNumber(m) || m->valuedouble < 1 || m->valuedouble > JS_MAX_MODULUS || m->valuedouble != floor(m->valuedouble))
        return js_fail(c, "'multipleOf' at %.120s must be a whole number in [1, %d] for an integer", path, JS_MAX_MODULUS);
    const long k = (long)m->valuedouble;
    if (k == 1) return 1; /* every integer */
    if (has_lo && has_hi) { /* the multiples between the bounds, listed */
        const double first = ceil(lo / (double)k) * (double)k, last = floor(hi / (double)k) * (double)k;
        if (first > last) return js_fail(c, "no integer at %.120s is a multiple of %ld within its bounds", path, k);
        if ((last - first) / (double)k + 1 > JS_MAX_MULTIPLES)
            return js_fail(c, "'multipleOf' at %.120s: more than %d multiples of %ld lie within its bounds; narrow "
                              "them, or drop one bound", path, JS_MAX_MULTIPLES, k);
        sb_add(body, "(");
        for (double v = first; v <= last; v += (double)k) sb_addf(body, "%s \"%.0f\"", v > first ? " |" : "", v);
        sb_add(body, " )");
        return 0;
    }
    if (has_hi || (has_lo && lo > 1))
        return js_fail(c, "'multipleOf' at %.120s is enforced with no bounds, with a minimum of 0 or 1, or with both a "
                          "minimum and a maximum", path);
    if (k > JS_MAX_AUTOMATON)
        return js_fail(c, "'multipleOf' at %.120s: without both bounds, at most %d (with both, %d)", path,
                       JS_MAX_AUTOMATON, JS_MAX_MODULUS);
    unsigned char alive[JS_MULTIPLE_DIGITS][JS_MAX_AUTOMATON];
    modulus_alive(k, alive);
    char base[24];
    new_rule(c, base);
    sb_modulus_rules(c, base, k, alive);
    /* "0", or a first digit 1-9 from state 0 with 16 digits in all; "-" where negatives may be */
    sb_addf(body, "(%s%s(", has_lo && lo == 1 ? "" : "\"0\" | ", has_lo ? "" : "\"-\"? ");
    sb_modulus_moves(body, base, k, JS_MULTIPLE_DIGITS, 0, 1, alive);
    sb_add(body, " ) )");
    return 0;
}

static int gen_numeric(jsctx *c, const cJSON *s, const char *path, sbuf *body, int integer) {
    double lo = -JS_MAX_MAGNITUDE, hi = JS_MAX_MAGNITUDE;
    int lo_incl = 1, hi_incl = 1;
    const int has_lo = get_bound(c, s, "minimum", "exclusiveMinimum", &lo, &lo_incl, path);
    const int has_hi = has_lo < 0 ? -1 : get_bound(c, s, "maximum", "exclusiveMaximum", &hi, &hi_incl, path);
    if (has_lo < 0 || has_hi < 0) return -1;
    if (!integer && cJSON_GetObjectItemCaseSensitive(s, "multipleOf"))
        return js_fail(c, "'multipleOf' at %.120s is enforced for integers only (use \"type\": \"integer\", or scale "
                          "the value)", path);
    if (integer) { /* whole bounds, inclusive */
        if (lo != floor(lo) || !lo_incl) lo = lo_incl ? ceil(lo) : floor(lo) + 1, lo_incl = 1;
        if (hi != floor(hi) || !hi_incl) hi = hi_incl ? floor(hi) : ceil(hi) - 1, hi_incl = 1;
        const int rc = gen_multiple_of(c, s, path, body, has_lo, lo, has_hi, hi);
        if (rc <= 0) return rc;
    } else if ((has_lo || has_hi) && (lo != floor(lo) || hi != floor(hi))) {
        return js_fail(c, "the bounds of the number at %.120s must be whole numbers to be enforced "
                          "(use \"type\": \"integer\", or scale the value)", path);
    }
    if (!has_lo && !has_hi) {
        sb_add(body, integer ? "json-int" : "json-number");
        return 0;
    }
    if (lo < -JS_MAX_MAGNITUDE) lo = -JS_MAX_MAGNITUDE, lo_incl = 1;
    if (hi > JS_MAX_MAGNITUDE) hi = JS_MAX_MAGNITUDE, hi_incl = 1;
    int alts = 0;
    sb_add(body, "(");
    if (hi > 0 || (hi == 0 && hi_incl)) /* the non-negative values */
        sb_magnitudes(body, &alts, lo >= 0 ? lo : 0, lo >= 0 ? lo_incl : 1, hi, hi_incl, integer);
    if (lo < 0) { /* the negative ones: "-" and a magnitude, never -0 */
        const size_t mark = body->len;
        const int before = alts;
        sb_add(body, alts ? " | \"-\" (" : " \"-\" (");
        int neg = 0;
        sb_magnitudes(body, &neg, hi < 0 ? -hi : (integer ? 1 : 0), hi < 0 ? hi_incl : integer, -lo, lo_incl, integer);
        if (neg) {
            sb_add(body, " )");
            alts = before + 1;
        } else if (!body->oom) {
            body->len = mark;
            body->p[mark] = 0;
        }
    }
    sb_add(body, " )");
    if (!alts) return js_fail(c, "no %s at %.120s is within its bounds", integer ? "integer" : "number", path);
    return 0;
}

static int gen_type(jsctx *c, const cJSON *s, const char *type, const char *path, sbuf *body) {
    if (!strcmp(type, "object")) return gen_object(c, s, path, body);
    if (!strcmp(type, "array")) return gen_array(c, s, path, body);
    if (!strcmp(type, "string")) return gen_string(c, s, path, body);
    if (!strcmp(type, "number")) return gen_numeric(c, s, path, body, 0);
    if (!strcmp(type, "integer")) return gen_numeric(c, s, path, body, 1);
    if (!strcmp(type, "boolean")) sb_add(body, "\"true\" | \"false\"");
    else if (!strcmp(type, "null")) sb_add(body, "\"null\"");
    else return js_fail(c, "unsupported type '%.40s' at %.120s", type, path);
    return 0;
}

/* The body of the rule for schema s. */
static int gen_body(jsctx *c, const cJSON *s, const char *path, sbuf *body) {
    char p2[256], sub[24];
    if (cJSON_IsTrue(s)) {
        sb_add(body, "json-value");
        return 0;
    }
    if (!cJSON_IsObject(s)) return js_fail(c, "the schema at %.120s must be an object", path);
    if (check_keywords(c, s, path)) return -1;
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        if (!cJSON_IsString(v)) return js_fail(c, "'$ref' at %.120s must be a string", path);
        const cJSON *target = resolve_ref(c, v->valuestring, path);
        if (!target || gen(c, target, v->valuestring, sub)) return -1;
        sb_add(body, sub);
        return 0;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "const"))) return sb_json_literal(body, v) ? js_fail(c, "out of memory") : 0;
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
            return js_fail(c, "'enum' at %.120s must be a non-empty array", path);
        const cJSON *e;
        int first = 1;
        cJSON_ArrayForEach(e, v) {
            if (!first) sb_add(body, " | ");
            first = 0;
            if (sb_json_literal(body, e)) return js_fail(c, "out of memory");
        }
        return 0;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "anyOf"))) {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
            return js_fail(c, "'anyOf' at %.120s must be a non-empty array", path);
        const cJSON *e;
        int i = 0;
        cJSON_ArrayForEach(e, v) {
            char idx[16];
            snprintf(idx, sizeof idx, "%d", i);
            child_path(p2, sizeof p2, path, "anyOf", idx);
            if (gen(c, e, p2, sub)) return -1;
            sb_addf(body, "%s%s", i++ ? " | " : "", sub);
        }
        return 0;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (!type) { /* inferred from the keywords present, else any value */
        const char *t = cJSON_GetObjectItemCaseSensitive(s, "properties") ? "object"
                        : cJSON_GetObjectItemCaseSensitive(s, "items") ? "array"
                                                                      : NULL;
        if (!t && cJSON_GetObjectItemCaseSensitive(s, "multipleOf"))
            return js_fail(c, "'multipleOf' at %.120s is enforced with \"type\": \"integer\"", path);
        if (!t) {
            sb_add(body, "json-value");
            return 0;
        }
        return gen_type(c, s, t, path, body);
    }
    if (cJSON_IsString(type)) return gen_type(c, s, type->valuestring, path, body);
    if (!cJSON_IsArray(type) || cJSON_GetArraySize(type) == 0)
        return js_fail(c, "'type' at %.120s must be a string or a non-empty array of strings", path);
    const cJSON *t;
    int first = 1;
    cJSON_ArrayForEach(t, type) {
        if (!cJSON_IsString(t)) return js_fail(c, "'type' at %.120s must hold strings", path);
        sb_add(body, first ? "(" : " | (");
        first = 0;
        if (gen_type(c, s, t->valuestring, path, body)) return -1;
        sb_add(body, ")");
    }
    return 0;
}

/* The rule name for schema s (generated on first use). */
static int gen(jsctx *c, const cJSON *s, const char *path, char *name) {
    for (int i = 0; i < c->n_names; i++)
        if (c->names[i].node == s) {
            snprintf(name, 24, "s%d", c->names[i].id);
            return 0;
        }
    if (c->depth >= JS_MAX_DEPTH) return js_fail(c, "the schema nests deeper than %d levels at %.120s", JS_MAX_DEPTH, path);
    if (c->n_names == c->cap_names) {
        const int cap = c->cap_names ? c->cap_names * 2 : 32;
        named *n = realloc(c->names, sizeof *n * (size_t)cap);
        if (!n) return js_fail(c, "out of memory");
        c->names = n;
        c->cap_names = cap;
    }
    const int id = c->next_id++;
    c->names[c->n_names++] = (named){s, id};
    snprintf(name, 24, "s%d", id);
    sbuf body = {0};
    c->depth++;
    const int rc = gen_body(c, s, path, &body);
    c->depth--;
    if (rc == 0 && !body.oom) sb_addf(&c->rules, "%s ::= ", name), sb_add(&c->rules, body.p), sb_add(&c->rules, "\n");
    free(body.p);
    if (body.oom) return js_fail(c, "out of memory");
    return rc;
}

char *js_schema_grammar(const cJSON *schema, char *err, size_t errlen) {
    jsctx c = {.root = schema, .err = err, .errlen = errlen};
    char name[24];
    sbuf out = {0};
    if (gen(&c, schema, "#", name) == 0 && !c.rules.oom) {
        sb_addf(&out, "root ::= %s\n", name);
        sb_add(&out, c.rules.p ? c.rules.p : "");
        sb_add(&out, JS_COMMON_RULES);
        if (out.oom) js_fail(&c, "out of memory");
        else if (out.len > GRAM_MAX_TEXT) js_fail(&c, "the schema's grammar is larger than %d bytes", GRAM_MAX_TEXT);
        else {
            /* the grammar is compiled once here so that a schema the compiler would refuse is
             * refused as a schema: {"$ref": "#"} (or an anyOf branch that is one) reaches itself
             * before matching anything, which is left recursion in its grammar */
            char gerr[200];
            gram_grammar *g = gram_compile(out.p, out.len, gerr, sizeof gerr);
            if (!g && strstr(gerr, "left recursion"))
                js_fail(&c, "the schema reaches itself through '$ref' before matching anything");
            else if (!g)
                js_fail(&c, "the schema's grammar: %.160s", gerr);
            gram_free(g);
        }
    } else if (!c.failed) {
        js_fail(&c, "out of memory");
    }
    free(c.rules.p);
    free(c.names);
    if (c.failed) {
        free(out.p);
        return NULL;
    }
    return out.p;
}
