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
 */
#include "json_schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

#define JS_MAX_DEPTH 64

#define JS_COMMON_RULES                                                                                              \
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,16}\n"                                                                        \
    "json-char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"                        \
    "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"                                                                 \
    "json-int ::= \"-\"? json-uint\n"                                                                                \
    "json-uint ::= \"0\" | [1-9] [0-9]{0,15}\n"                                                                      \
    "json-frac-exp ::= (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?\n"                                              \
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

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_addn(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_add(sbuf *b, const char *s) { sb_addn(b, s, strlen(s)); }

static void sb_addf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_addf(sbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_addn(b, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

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
    "$comment", "strict", "minProperties", "maxProperties",
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

static int gen_string(jsctx *c, const cJSON *s, const char *path, sbuf *body) {
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(s, "format");
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

static int non_negative_bound(const cJSON *s) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(s, "minimum");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
    return (cJSON_IsNumber(m) && m->valuedouble >= 0) || (cJSON_IsNumber(x) && x->valuedouble >= 0);
}

static int gen_type(jsctx *c, const cJSON *s, const char *type, const char *path, sbuf *body) {
    if (!strcmp(type, "object")) return gen_object(c, s, path, body);
    if (!strcmp(type, "array")) return gen_array(c, s, path, body);
    if (!strcmp(type, "string")) return gen_string(c, s, path, body);
    if (!strcmp(type, "number")) sb_add(body, non_negative_bound(s) ? "json-uint json-frac-exp" : "json-number");
    else if (!strcmp(type, "integer")) sb_add(body, non_negative_bound(s) ? "json-uint" : "json-int");
    else if (!strcmp(type, "boolean")) sb_add(body, "\"true\" | \"false\"");
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
