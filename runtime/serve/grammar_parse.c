/* grammar_parse.c — GBNF text to the compiled form (grammar_rules.h): the
 * parser, the checks a grammar must pass (every rule defined, a root, no left
 * recursion, the size limits) and gram_compile; see grammar.h.
 */
#include "grammar_rules.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsing ------------------------------------------------------------ */

typedef struct {
    gelem *e;
    int n, cap;
} gseq;

typedef struct {
    const char *src, *end;
    gseq *rules;        /* per symbol: its definition (e == NULL until defined) */
    char **names;
    const char **first_ref, **def_at;
    int n_syms, cap_syms;
    int *by_name;       /* hash table of the named symbols (-1: empty), for sym_id */
    int by_name_cap, by_name_used;
    size_t total;       /* elements in all rules */
    char *err;
    size_t errlen;
    int failed;
    int nesting;        /* parentheses open around the item being parsed */
} parser;

static void line_col(const char *src, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *s = src; s < at; s++) {
        if (*s == '\n') {
            ++*line;
            *col = 1;
        } else {
            ++*col;
        }
    }
}

static const char *fail(parser *p, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static const char *fail(parser *p, const char *at, const char *fmt, ...) {
    if (p->failed) return NULL;
    p->failed = 1;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    line_col(p->src, at ? at : p->end, &line, &col);
    snprintf(p->err, p->errlen, "line %d, column %d: %s", line, col, msg);
    return NULL;
}

static int seq_push(parser *p, gseq *s, uint32_t type, uint32_t value) {
    if (p->total >= GRAM_MAX_ELEMS) {
        fail(p, NULL, "the grammar expands to more than %d elements", GRAM_MAX_ELEMS);
        return -1;
    }
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        gelem *e = realloc(s->e, sizeof *e * (size_t)cap);
        if (!e) {
            fail(p, NULL, "out of memory");
            return -1;
        }
        s->e = e;
        s->cap = cap;
    }
    s->e[s->n++] = (gelem){type, value};
    p->total++;
    return 0;
}

static int sym_add(parser *p, const char *name, size_t n) {
    if (p->n_syms == p->cap_syms) {
        int cap = p->cap_syms ? p->cap_syms * 2 : 32;
        gseq *r = realloc(p->rules, sizeof *r * (size_t)cap);
        if (r) p->rules = r;
        char **nm = realloc(p->names, sizeof *nm * (size_t)cap);
        if (nm) p->names = nm;
        const char **fr = realloc(p->first_ref, sizeof *fr * (size_t)cap);
        if (fr) p->first_ref = fr;
        const char **da = realloc(p->def_at, sizeof *da * (size_t)cap);
        if (da) p->def_at = da;
        if (!r || !nm || !fr || !da) return -1;
        p->cap_syms = cap;
    }
    char *copy = strndup(name, n);
    if (!copy) return -1;
    const int id = p->n_syms++;
    memset(&p->rules[id], 0, sizeof p->rules[id]);
    p->names[id] = copy;
    p->first_ref[id] = NULL;
    p->def_at[id] = NULL;
    return id;
}

static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* The symbol named name[0..n), created on first use. */
static int sym_id(parser *p, const char *name, size_t n) {
    if ((p->by_name_used + 1) * 2 > p->by_name_cap) {
        const int cap = p->by_name_cap ? p->by_name_cap * 2 : 64;
        int *t = malloc(sizeof(int) * (size_t)cap);
        if (!t) {
            fail(p, NULL, "out of memory");
            return -1;
        }
        memset(t, 0xff, sizeof(int) * (size_t)cap);
        for (int i = 0; i < p->by_name_cap; i++) {
            if (p->by_name[i] < 0) continue;
            const char *nm = p->names[p->by_name[i]];
            uint32_t h = name_hash(nm, strlen(nm)) & (uint32_t)(cap - 1);
            while (t[h] >= 0) h = (h + 1) & (uint32_t)(cap - 1);
            t[h] = p->by_name[i];
        }
        free(p->by_name);
        p->by_name = t;
        p->by_name_cap = cap;
    }
    uint32_t h = name_hash(name, n) & (uint32_t)(p->by_name_cap - 1);
    for (; p->by_name[h] >= 0; h = (h + 1) & (uint32_t)(p->by_name_cap - 1)) {
        const char *nm = p->names[p->by_name[h]];
        if (strlen(nm) == n && !memcmp(nm, name, n)) return p->by_name[h];
    }
    const int id = sym_add(p, name, n);
    if (id < 0) {
        fail(p, NULL, "out of memory");
        return -1;
    }
    p->by_name[h] = id;
    p->by_name_used++;
    return id;
}

/* A fresh rule for a group or a repetition inside rule `base`: "base~N"
 * ('~' cannot start or be part of a name in the text, so it never clashes). */
static int sym_generated(parser *p, int base) {
    char name[160];
    snprintf(name, sizeof name, "%.120s~%d", p->names[base], p->n_syms);
    const int id = sym_add(p, name, strlen(name));
    if (id < 0) fail(p, NULL, "out of memory");
    return id;
}

static int is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static const char *skip_space(const parser *p, const char *s, int newline_ok) {
    while (s < p->end) {
        if (*s == ' ' || *s == '\t') {
            s++;
        } else if (*s == '#') {
            while (s < p->end && *s != '\n' && *s != '\r') s++;
        } else if (newline_ok && (*s == '\n' || *s == '\r')) {
            s++;
        } else {
            break;
        }
    }
    return s;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class (an escape or one UTF-8 code point). */
static const char *parse_char(parser *p, const char *s, uint32_t *cp) {
    if (s >= p->end) return fail(p, s, "unexpected end of the grammar");
    const unsigned char c = (unsigned char)*s;
    if (c == '\\') {
        if (s + 1 >= p->end) return fail(p, s, "unexpected end of the grammar after '\\'");
        const char e = s[1];
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                const int h = s + 2 + i < p->end ? hex_value(s[2 + i]) : -1;
                if (h < 0) return fail(p, s, "'\\%c' needs %d hexadecimal digits", e, digits);
                v = v << 4 | (uint32_t)h;
            }
            if (v > 0x10ffff) return fail(p, s, "code point U+%X is beyond U+10FFFF", v);
            if (v >= 0xd800 && v <= 0xdfff)
                return fail(p, s, "U+%X is a UTF-16 surrogate, not a character generated text can hold", v);
            *cp = v;
            return s + 2 + digits;
        }
        switch (e) {
        case 'n': *cp = '\n'; break;
        case 'r': *cp = '\r'; break;
        case 't': *cp = '\t'; break;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': *cp = (uint32_t)e; break;
        default: return fail(p, s, "unknown escape '\\%c'", e);
        }
        return s + 2;
    }
    int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (!len || s + len > p->end) return fail(p, s, "invalid UTF-8");
    uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1fu) : len == 3 ? (c & 0x0fu) : (c & 0x07u);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return fail(p, s, "invalid UTF-8");
        v = v << 6 | ((unsigned char)s[i] & 0x3fu);
    }
    /* overlong forms, surrogates and code points past U+10FFFF are not UTF-8 either; a raw NUL
     * byte is refused as text (the escape \x00 may stand in a negated class) */
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < least[len] || (v >= 0xd800 && v <= 0xdfff) || v > 0x10ffff || v == 0)
        return fail(p, s, "invalid UTF-8");
    *cp = v;
    return s + len;
}

static const char *parse_alternates(parser *p, const char *s, int rule, int id, int nested);

/* Replaces the last item (elements [start, n) of out) by min..max (max < 0:
 * unbounded) copies of it: min copies inline, then nested optional rules
 * x (x (x)?)? for a bounded rest, or R ::= x R | "" for an unbounded one. */
static int repeat_last(parser *p, gseq *out, int start, int rule, long min, long max, const char *at) {
    const int item_n = out->n - start;
    if (item_n <= 0) {
        fail(p, at, "a repetition must follow an item");
        return -1;
    }
    const long copies = min + (max < 0 ? 1 : max - min);
    if (copies * item_n > GRAM_MAX_ELEMS) {
        fail(p, at, "the repetition expands to more than %d elements", GRAM_MAX_ELEMS);
        return -1;
    }
    gelem *item = malloc(sizeof *item * (size_t)item_n);
    if (!item) {
        fail(p, at, "out of memory");
        return -1;
    }
    memcpy(item, out->e + start, sizeof *item * (size_t)item_n);
    /* the item leaves the sequence: it leaves the element count too, which
     * build() sizes and scans the compiled array by */
    out->n = start;
    p->total -= (size_t)item_n;
    int rc = 0;
    for (long i = 0; i < min && rc == 0; i++)
        for (int k = 0; k < item_n && rc == 0; k++) rc = seq_push(p, out, item[k].type, item[k].value);
    if (rc == 0 && max < 0) {
        const int r = sym_generated(p, rule);
        rc = r < 0 ? -1 : 0;
        gseq *def = rc == 0 ? &p->rules[r] : NULL;
        for (int k = 0; k < item_n && rc == 0; k++) rc = seq_push(p, def, item[k].type, item[k].value);
        if (rc == 0) rc = seq_push(p, def, G_RULE_REF, (uint32_t)r);
        if (rc == 0) rc = seq_push(p, def, G_ALT, 0);
        if (rc == 0) rc = seq_push(p, def, G_END, 0);
        if (rc == 0) p->def_at[r] = at;
        if (rc == 0) rc = seq_push(p, out, G_RULE_REF, (uint32_t)r);
    } else if (rc == 0 && max > min) {
        int inner = -1;
        for (long i = 0; i < max - min && rc == 0; i++) {
            const int r = sym_generated(p, rule);
            if (r < 0) {
                rc = -1;
                break;
            }
            gseq *def = &p->rules[r];
            for (int k = 0; k < item_n && rc == 0; k++) rc = seq_push(p, def, item[k].type, item[k].value);
            if (rc == 0 && inner >= 0) rc = seq_push(p, def, G_RULE_REF, (uint32_t)inner);
            if (rc == 0) rc = seq_push(p, def, G_ALT, 0);
            if (rc == 0) rc = seq_push(p, def, G_END, 0);
            p->def_at[r] = at;
            inner = r;
        }
        if (rc == 0) rc = seq_push(p, out, G_RULE_REF, (uint32_t)inner);
    }
    free(item);
    return rc;
}

static const char *parse_count(parser *p, const char *s, long *v) {
    if (s >= p->end || *s < '0' || *s > '9') return fail(p, s, "expected a number");
    long x = 0;
    while (s < p->end && *s >= '0' && *s <= '9') {
        x = x * 10 + (*s++ - '0');
        if (x > 100000) return fail(p, s, "a repetition count is limited to 100000");
    }
    *v = x;
    return s;
}

/* One alternative: items and their repetition suffixes, up to '|', ')' or
 * (outside parentheses) the end of the line. */
static const char *parse_sequence(parser *p, const char *s, int rule, gseq *out, int nested) {
    int last = out->n;
    /* out->n right after `*` or `+` made the item at `last` an unbounded repetition (-1: it is
     * not one), and that repetition's least count (1 for +, 0 for *) */
    int unbounded_end = -1, unbounded_min = 0;
    while (s && s < p->end) {
        const char *at = s;
        if (*s == '"') {
            s++;
            last = out->n;
            while (s && (s >= p->end || *s != '"')) { /* the end checked before the byte is read */
                if (s >= p->end || *s == '\n') return fail(p, at, "unterminated literal");
                uint32_t cp;
                const char *c0 = s;
                s = parse_char(p, s, &cp);
                if (s && cp == 0) return fail(p, c0, "U+0000 is not a character generated text can hold");
                if (s && seq_push(p, out, G_CHAR, cp)) return NULL;
            }
            if (!s) return NULL;
            s = skip_space(p, s + 1, nested);
        } else if (*s == '[') {
            s++;
            uint32_t type = G_CHAR;
            if (s < p->end && *s == '^') {
                type = G_CHAR_NOT;
                s++;
            }
            last = out->n;
            int first = 1;
            while (s && (s >= p->end || *s != ']')) {
                if (s >= p->end || *s == '\n') return fail(p, at, "unterminated character class");
                uint32_t lo, hi;
                const char *c0 = s;
                s = parse_char(p, s, &lo);
                if (!s) return NULL;
                const int range = s + 1 < p->end && s[0] == '-' && s[1] != ']';
                hi = lo;
                if (range) {
                    const char *rng = s;
                    s = parse_char(p, s + 1, &hi);
                    if (!s) return NULL;
                    if (hi < lo) return fail(p, rng, "the range's end is below its start");
                }
                /* generated text never holds U+0000: a class may exclude it ([^\x00-\x1f]), but a
                 * member that is only U+0000 could never be produced, and one from it starts at U+0001 */
                if (type == G_CHAR && lo == 0) {
                    if (hi == 0) return fail(p, c0, "U+0000 is not a character generated text can hold");
                    lo = 1;
                }
                if (seq_push(p, out, first ? type : G_CHAR_ALT, lo)) return NULL;
                first = 0;
                if (range && seq_push(p, out, G_CHAR_RNG_UPPER, hi)) return NULL;
            }
            if (!s) return NULL;
            if (first) return fail(p, at, "empty character class");
            s = skip_space(p, s + 1, nested);
        } else if (is_name_char(*s)) {
            const char *n0 = s;
            while (s < p->end && is_name_char(*s)) s++;
            const int id = sym_id(p, n0, (size_t)(s - n0));
            if (id < 0) return NULL;
            if (!p->first_ref[id]) p->first_ref[id] = n0;
            last = out->n;
            if (seq_push(p, out, G_RULE_REF, (uint32_t)id)) return NULL;
            s = skip_space(p, s, nested);
        } else if (*s == '(') {
            if (p->nesting >= GRAM_MAX_NESTING)
                return fail(p, s, "parentheses nest more than %d deep", GRAM_MAX_NESTING);
            const int id = sym_generated(p, rule);
            if (id < 0) return NULL;
            p->def_at[id] = s;
            p->nesting++;
            s = parse_alternates(p, skip_space(p, s + 1, 1), rule, id, 1);
            p->nesting--;
            if (!s) return NULL;
            if (s >= p->end || *s != ')') return fail(p, s, "expected ')'");
            last = out->n;
            if (seq_push(p, out, G_RULE_REF, (uint32_t)id)) return NULL;
            s = skip_space(p, s + 1, nested);
        } else if (*s == '.') {
            last = out->n;
            if (seq_push(p, out, G_CHAR_ANY, 0)) return NULL;
            s = skip_space(p, s + 1, nested);
        } else if (*s == '*' || *s == '+' || *s == '?') {
            const long min = *s == '+' ? 1 : 0, max = *s == '?' ? 1 : -1;
            if (unbounded_end >= 0 && unbounded_end == out->n) {
                /* A repetition of an unbounded one: (x+)+ is x+; (x*)+, (x*)*, (x*)? are x*; (x+)*
                 * and (x+)? are x*. The same language, where expanding it again would give the
                 * matcher exponentially many ways to split a text (x+ is x R, R ::= x R | ""; x*
                 * is R: the inline copy leaves) */
                if (unbounded_min == 1 && min == 0) {
                    const int item_n = out->n - last - 1;
                    out->e[last] = out->e[out->n - 1];
                    out->n = last + 1;
                    p->total -= (size_t)item_n;
                    unbounded_end = out->n, unbounded_min = 0;
                }
            } else {
                if (repeat_last(p, out, last, rule, min, max, at)) return NULL;
                unbounded_end = max < 0 ? out->n : -1, unbounded_min = (int)min;
            }
            s = skip_space(p, s + 1, nested);
        } else if (*s == '{') {
            long min, max;
            s = parse_count(p, skip_space(p, s + 1, 1), &min);
            if (!s) return NULL;
            s = skip_space(p, s, 1);
            max = min;
            if (s < p->end && *s == ',') {
                s = skip_space(p, s + 1, 1);
                if (s < p->end && *s == '}') {
                    max = -1;
                } else {
                    s = parse_count(p, s, &max);
                    if (!s) return NULL;
                    if (max < min) return fail(p, at, "{m,n} needs m <= n");
                    s = skip_space(p, s, 1);
                }
            }
            if (s >= p->end || *s != '}') return fail(p, s, "expected '}'");
            if (repeat_last(p, out, last, rule, min, max, at)) return NULL;
            unbounded_end = -1;
            s = skip_space(p, s + 1, nested);
        } else {
            break;
        }
    }
    return s;
}

/* Alternatives separated by '|' (a '|' may start a continuation line) into rule id. */
static const char *parse_alternates(parser *p, const char *s, int rule, int id, int nested) {
    gseq def = {0};
    s = parse_sequence(p, s, rule, &def, nested);
    while (s) {
        const char *t = nested ? s : skip_space(p, s, 1);
        if (t >= p->end || *t != '|') break;
        if (seq_push(p, &def, G_ALT, 0)) s = NULL;
        else s = parse_sequence(p, skip_space(p, t + 1, 1), rule, &def, nested);
    }
    if (s && seq_push(p, &def, G_END, 0)) s = NULL;
    if (!s) {
        free(def.e);
        return NULL;
    }
    p->rules[id] = def;
    return s;
}

static const char *parse_rule(parser *p, const char *s) {
    const char *n0 = s;
    while (s < p->end && is_name_char(*s)) s++;
    if (s == n0) return fail(p, s, "expected a rule name");
    const int id = sym_id(p, n0, (size_t)(s - n0));
    if (id < 0) return NULL;
    if (p->rules[id].e) return fail(p, n0, "rule '%.*s' is defined twice", (int)(s - n0), n0);
    s = skip_space(p, s, 0);
    if (p->end - s < 3 || memcmp(s, "::=", 3)) return fail(p, s, "expected '::='");
    p->def_at[id] = n0;
    s = parse_alternates(p, skip_space(p, s + 3, 1), id, id, 0);
    if (!s) return NULL;
    if (s < p->end && *s == '\r') s++;
    if (s < p->end && *s != '\n') return fail(p, s, "unexpected '%c'", *s);
    return skip_space(p, s, 1);
}

/* ---- checks and the compiled form ---------------------------------------- */

/* Left recursion (a rule reaching itself before consuming input) would make
 * the matcher's expansion loop forever. One depth-first walk finds it and
 * which rules match the empty string (nullable): from a rule it follows
 * only the references at the start of an alternative or after nullable
 * elements (the rule "can begin with" them), computing their nullability
 * first; meeting a rule that is still on the path is left recursion. Each
 * element is looked at once, so hostile grammars cost linear time. */
static int check_left_recursion(parser *p) {
    const int n = p->n_syms;
    char *nullable = calloc((size_t)n, 1), *color = calloc((size_t)n, 1); /* color 1: on the path, 2: done */
    int *stack = malloc(sizeof(int) * 4 * (size_t)n), rc = 0; /* frames: rule, element, prefix nullable, rule nullable */
    if (!nullable || !color || !stack) {
        fail(p, NULL, "out of memory");
        rc = -1;
        goto out;
    }
    for (int root = 0; root < n && rc == 0; root++) {
        if (color[root]) continue;
        int sp = 0;
        stack[0] = root, stack[1] = 0, stack[2] = 1, stack[3] = 0;
        sp = 4;
        color[root] = 1;
        while (sp > 0) {
            int *f = stack + sp - 4;
            const gelem *e = p->rules[f[0]].e;
            const gelem x = e[f[1]];
            if (x.type == G_ALT || x.type == G_END) {
                if (f[2]) f[3] = 1;
                if (x.type == G_END) {
                    nullable[f[0]] = (char)f[3];
                    color[f[0]] = 2;
                    sp -= 4;
                    continue;
                }
                f[2] = 1;
            } else if (f[2] && x.type == G_RULE_REF) {
                const int q = (int)x.value;
                if (color[q] == 1) {
                    fail(p, p->def_at[q], "left recursion: rule '%s' can reach itself before matching input",
                         p->names[q]);
                    rc = -1;
                    break;
                }
                if (color[q] == 0) { /* its nullability first; this element is looked at again after */
                    color[q] = 1;
                    stack[sp] = q, stack[sp + 1] = 0, stack[sp + 2] = 1, stack[sp + 3] = 0;
                    sp += 4;
                    continue;
                }
                f[2] = nullable[q];
            } else {
                f[2] = 0; /* a character, or anything after one */
            }
            f[1]++;
        }
    }
out:
    free(nullable);
    free(color);
    free(stack);
    return rc;
}

static void grammar_destroy(gram_grammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->alt_off);
    free(g->alts);
    free(g->after);
    free(g->ascii);
    free(g);
}

static gram_grammar *build(parser *p) {
    gram_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    atomic_init(&g->refs, 1);
    g->n_rules = p->n_syms;
    g->n_elems = (int)p->total;
    g->elems = malloc(sizeof *g->elems * p->total);
    g->alt_off = malloc(sizeof(int32_t) * (size_t)(g->n_rules + 1));
    g->alts = malloc(sizeof(int32_t) * p->total);
    g->after = malloc(sizeof(int32_t) * p->total);
    g->ascii = calloc(p->total * 4, sizeof(uint32_t));
    if (!g->elems || !g->alt_off || !g->alts || !g->after || !g->ascii) {
        grammar_destroy(g);
        return NULL;
    }
    int pos = 0, n_alts = 0;
    for (int r = 0; r < g->n_rules; r++) {
        const gseq *def = &p->rules[r];
        g->alt_off[r] = n_alts;
        g->alts[n_alts++] = pos;
        for (int i = 0; i < def->n; i++) {
            g->elems[pos + i] = def->e[i];
            if (def->e[i].type == G_ALT) g->alts[n_alts++] = pos + i + 1;
        }
        pos += def->n;
    }
    assert((size_t)pos == p->total);
    g->alt_off[g->n_rules] = n_alts;
    for (int i = 0; i < g->n_elems; i++) {
        g->after[i] = -1;
        if (!is_class_start(g->elems[i].type)) continue;
        int after = i;
        for (uint32_t c = 0; c < 128; c++)
            if (gram_class_match(g->elems, i, c, &after)) g->ascii[i * 4 + c / 32] |= 1u << (c % 32);
        g->after[i] = after;
    }
    return g;
}

gram_grammar *gram_compile(const char *text, size_t len, char *err, size_t errlen) {
    if (len > GRAM_MAX_TEXT) {
        snprintf(err, errlen, "the grammar is %zu bytes; at most %d are accepted", len, GRAM_MAX_TEXT);
        return NULL;
    }
    parser p = {.src = text, .end = text + len, .err = err, .errlen = errlen};
    gram_grammar *g = NULL;
    const char *s = skip_space(&p, text, 1);
    while (s && s < p.end) s = parse_rule(&p, s);
    if (!p.failed) {
        for (int i = 0; i < p.n_syms; i++)
            if (!p.rules[i].e) {
                fail(&p, p.first_ref[i], "undefined rule '%s'", p.names[i]);
                break;
            }
    }
    int root = -1;
    if (!p.failed) {
        for (int i = 0; i < p.n_syms; i++)
            if (!strcmp(p.names[i], "root")) root = i;
        if (root < 0) fail(&p, text, "the grammar has no rule named 'root'");
    }
    if (!p.failed) check_left_recursion(&p);
    if (!p.failed) {
        g = build(&p);
        if (!g) fail(&p, NULL, "out of memory");
        else g->root = root;
    }
    for (int i = 0; i < p.n_syms; i++) {
        free(p.rules[i].e);
        free(p.names[i]);
    }
    free(p.rules);
    free(p.names);
    free(p.first_ref);
    free(p.def_at);
    free(p.by_name);
    return g;
}

void gram_free(gram_grammar *g) {
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) grammar_destroy(g);
}

int gram_rule_count(const gram_grammar *g) { return g->n_rules; }
