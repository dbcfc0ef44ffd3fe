/* grammar.c — GBNF parsing, the pushdown matcher and the token mask; see grammar.h.
 *
 * Compiled form (the layout llama.cpp uses): every rule is a run of
 * elements, its alternatives separated by ALT and the last one closed by
 * END. A character class is CHAR or CHAR_NOT followed by CHAR_RNG_UPPER
 * (the top of a range) and CHAR_ALT (more characters or ranges); RULE_REF
 * names another rule. Characters are Unicode code points; the matcher
 * decodes UTF-8 itself and, in the middle of a code point, keeps only the
 * stacks whose class contains some code point starting with those bytes.
 *
 * A stack is a linked list of element positions in an arena (top first):
 * the top is always a character element still to be matched; the rest are
 * where to continue when the rules above it end. Lists share their tails, so
 * splitting on alternatives copies nothing. A stack is the empty list (-1)
 * when the whole grammar has been matched. Repetition is right recursion
 * (x* is R ::= x R | ""), and a reference in tail position pushes nothing,
 * so loops do not grow stacks.
 */
#include "grammar.h"

#include <assert.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    G_END,            /* end of a rule */
    G_ALT,            /* start of the next alternative */
    G_RULE_REF,       /* value: rule id */
    G_CHAR,           /* value: code point; starts a class */
    G_CHAR_NOT,       /* value: code point; starts a negated class */
    G_CHAR_RNG_UPPER, /* value: upper end of the range begun by the element before */
    G_CHAR_ALT,       /* value: one more code point (or range start) of the class */
    G_CHAR_ANY,       /* any code point: "." */
};

typedef struct {
    uint32_t type, value;
} gelem;

struct gram_grammar {
    atomic_int refs;
    gelem *elems;
    int n_elems;
    int n_rules;
    int32_t *alt_off;  /* [n_rules + 1]: rule r's alternatives are alts[alt_off[r] .. alt_off[r + 1]) */
    int32_t *alts;     /* element position of each alternative's first element */
    int32_t *after;    /* [n_elems]: for a class start, the position after the class */
    uint32_t *ascii;   /* [n_elems * 4]: for a class start, which ASCII bytes it matches */
    int root;
};

static int is_class_start(uint32_t t) { return t == G_CHAR || t == G_CHAR_NOT || t == G_CHAR_ANY; }

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
            if (repeat_last(p, out, last, rule, min, max, at)) return NULL;
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

/* Does the class starting at pos contain cp? *after: the position past the class. */
static int class_match(const gelem *e, int pos, uint32_t cp, int *after) {
    if (e[pos].type == G_CHAR_ANY) {
        *after = pos + 1;
        return 1;
    }
    const int negate = e[pos].type == G_CHAR_NOT;
    int found = 0, i = pos;
    do {
        const uint32_t lo = e[i].value;
        uint32_t hi = lo;
        if (e[i + 1].type == G_CHAR_RNG_UPPER) {
            hi = e[i + 1].value;
            i++;
        }
        if (cp >= lo && cp <= hi) found = 1;
        i++;
    } while (e[i].type == G_CHAR_ALT);
    *after = i;
    return found != negate;
}

/* Could the class at pos contain some code point in [lo, hi]? (Exact for
 * positive classes; for a negated one, unless a single range covers it.) */
static int class_may_match(const gelem *e, int pos, uint32_t lo, uint32_t hi) {
    if (e[pos].type == G_CHAR_ANY) return 1;
    const int negate = e[pos].type == G_CHAR_NOT;
    int i = pos;
    do {
        const uint32_t a = e[i].value;
        uint32_t b = a;
        if (e[i + 1].type == G_CHAR_RNG_UPPER) {
            b = e[i + 1].value;
            i++;
        }
        if (!negate && a <= hi && b >= lo) return 1;
        if (negate && a <= lo && b >= hi) return 0;
        i++;
    } while (e[i].type == G_CHAR_ALT);
    return negate;
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
            if (class_match(g->elems, i, c, &after)) g->ascii[i * 4 + c / 32] |= 1u << (c % 32);
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

/* ---- the matcher ------------------------------------------------------------ */

typedef struct {
    int32_t pos, next; /* element position; the node below (-1: bottom) */
} gnode;

#define GRAM_CACHE 4       /* masks remembered per matcher */
#define GRAM_SIG_MAX 256   /* state signatures longer than this are not cached */

#define GRAM_WALK_STATES 2048 /* automaton states one mask may build (1 KiB of successors each) */

typedef struct {
    int32_t first, n;  /* tops: st_tops[first .. first + n) */
    uint32_t cp, hash;
    int rem;
    int loops_known;   /* loop is computed */
    uint64_t loop[4];  /* the bytes that lead from this state back to itself */
} gstate;

typedef struct {
    const gram_vocab *v;
    int32_t sig[GRAM_SIG_MAX];
    int n_sig;             /* 0: empty */
    uint32_t *bits;
    size_t cap_words;
    int count;
    uint64_t used;
} gram_cached;

struct gram_matcher {
    gram_grammar *g;
    gnode *nodes;      /* arena; the current state's nodes come first */
    int n_nodes, cap_nodes;
    int32_t *stacks;   /* current state: each stack's top node (-1: the grammar is complete) */
    int n_stacks;
    uint32_t cp;       /* a code point's bits so far ... */
    int rem;           /* ... its continuation bytes still due and its length (see step_byte; 0: between code points) */
    int overflow;      /* a limit was hit in the current operation */
    int work;          /* expansions in the current step (bounded: ambiguity can be exponential) */
    int32_t *scratch;  /* sets for accept (2) and the trie walk (one per depth) */
    int scratch_sets;
    uint32_t loops[4]; /* during a plain mask walk: ASCII bytes that lead from the state back to itself */
    gram_cached cache[GRAM_CACHE];
    uint64_t clock;
    /* during a mask: the automaton built lazily over the states the trie walk
     * meets (see walk_memo); nodes are hash-consed so equal stacks are equal ids */
    int interning;     /* node_new returns the existing node for an equal (pos, next) */
    int walk_mark;     /* nodes from here on were made (and interned) by this walk */
    int32_t *ni;       /* node intern table, open addressing (-1: empty) */
    int ni_cap, ni_used;
    gstate *st;        /* the states met, and ... */
    int n_st, cap_st;
    int32_t *st_tops;  /* ... their stack tops (sorted), and ... */
    int n_tops, cap_tops;
    int32_t *st_trans; /* ... per state 256 successors: a state id, -1 rejected, -2 not computed yet */
    int32_t *st_index; /* state hash table (-1: empty) */
    int st_index_cap;
    int memo_full;     /* more than GRAM_WALK_STATES states: the plain walk takes over */
    int masking;       /* a gram_mask is running: its expansions count against GRAM_MAX_MASK_WORK */
    long mask_work;    /* expansions in this mask, over every token tried */
    int mask_over;     /* the budget ran out: the mask is abandoned */
};

#define GRAM_MAX_NODES (1 << 22)
#define GRAM_MAX_DEPTH 10000   /* rules entered at once without matching input */
#define GRAM_MAX_WORK 100000   /* expansions for one code point */

static uint32_t node_hash(int32_t pos, int32_t next) {
    return (uint32_t)pos * 0x9e3779b1u ^ (uint32_t)(next + 1) * 0x85ebca77u;
}

/* Grows the node intern table; every node from walk_mark on is in it. */
static int intern_grow(gram_matcher *m) {
    const int cap = m->ni_cap ? m->ni_cap * 2 : 4096;
    int32_t *t = malloc(sizeof(int32_t) * (size_t)cap);
    if (!t) return -1;
    memset(t, 0xff, sizeof(int32_t) * (size_t)cap);
    for (int i = m->walk_mark; i < m->n_nodes; i++) {
        uint32_t h = node_hash(m->nodes[i].pos, m->nodes[i].next) & (uint32_t)(cap - 1);
        while (t[h] >= 0) h = (h + 1) & (uint32_t)(cap - 1);
        t[h] = i;
    }
    free(m->ni);
    m->ni = t;
    m->ni_cap = cap;
    return 0;
}

static int32_t node_new(gram_matcher *m, int32_t pos, int32_t next) {
    uint32_t slot = 0;
    if (m->interning) {
        if ((m->ni_used + 1) * 2 > m->ni_cap && intern_grow(m) != 0) {
            m->overflow = 1;
            return -1;
        }
        slot = node_hash(pos, next) & (uint32_t)(m->ni_cap - 1);
        for (; m->ni[slot] >= 0; slot = (slot + 1) & (uint32_t)(m->ni_cap - 1))
            if (m->nodes[m->ni[slot]].pos == pos && m->nodes[m->ni[slot]].next == next) return m->ni[slot];
    }
    if (m->n_nodes == m->cap_nodes) {
        if (m->cap_nodes >= GRAM_MAX_NODES) {
            m->overflow = 1;
            return -1;
        }
        const int cap = m->cap_nodes ? m->cap_nodes * 2 : 256;
        gnode *n = realloc(m->nodes, sizeof *n * (size_t)cap);
        if (!n) {
            m->overflow = 1;
            return -1;
        }
        m->nodes = n;
        m->cap_nodes = cap;
    }
    m->nodes[m->n_nodes] = (gnode){pos, next};
    if (m->interning) {
        m->ni[slot] = m->n_nodes;
        m->ni_used++;
    }
    return m->n_nodes++;
}

static int same_stack(const gram_matcher *m, int32_t a, int32_t b) {
    while (a != b) {
        if (a < 0 || b < 0 || m->nodes[a].pos != m->nodes[b].pos) return 0;
        a = m->nodes[a].next;
        b = m->nodes[b].next;
    }
    return 1;
}

static void set_add(gram_matcher *m, int32_t *set, int *n, int32_t top) {
    if (m->masking && (m->mask_work += *n + 1) > GRAM_MAX_MASK_WORK) { /* each comparison walks two stacks */
        m->mask_over = m->overflow = 1;
        return;
    }
    for (int i = 0; i < *n; i++)
        if (same_stack(m, set[i], top)) return;
    if (*n >= GRAM_MAX_STACKS) {
        m->overflow = 1;
        return;
    }
    set[(*n)++] = top;
}

/* Adds to set every stack that continues at element pos with rest below,
 * expanded until each top is a character class: the end of a rule pops,
 * a rule reference splits into its alternatives (pushing the element after
 * the reference, unless the reference was the last of its alternative). */
static void expand(gram_matcher *m, int32_t pos, int32_t rest, int32_t *set, int *n, int depth) {
    const gram_grammar *g = m->g;
    if (m->overflow) return;
    if (depth > GRAM_MAX_DEPTH || ++m->work > GRAM_MAX_WORK) {
        m->overflow = 1;
        return;
    }
    if (m->masking && ++m->mask_work > GRAM_MAX_MASK_WORK) {
        m->mask_over = m->overflow = 1;
        return;
    }
    for (;;) {
        const uint32_t t = g->elems[pos].type;
        if (t == G_END || t == G_ALT) {
            if (rest < 0) {
                set_add(m, set, n, -1);
                return;
            }
            pos = m->nodes[rest].pos;
            rest = m->nodes[rest].next;
            continue;
        }
        if (t == G_RULE_REF) {
            const int r = (int)g->elems[pos].value;
            const uint32_t nt = g->elems[pos + 1].type;
            int32_t below = rest;
            if (nt != G_END && nt != G_ALT) {
                below = node_new(m, pos + 1, rest);
                if (below < 0) return;
            }
            for (int a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) expand(m, g->alts[a], below, set, n, depth + 1);
            return;
        }
        const int32_t top = node_new(m, pos, rest);
        if (top >= 0) set_add(m, set, n, top);
        return;
    }
}

/* The stacks after one more code point. */
static int step_cp(gram_matcher *m, const int32_t *in, int n_in, uint32_t cp, int32_t *out) {
    const gram_grammar *g = m->g;
    int n = 0;
    m->work = 0;
    for (int i = 0; i < n_in; i++) {
        if (in[i] < 0) continue;
        const int32_t pos = m->nodes[in[i]].pos;
        int after;
        if (cp < 128) {
            if (!(g->ascii[pos * 4 + cp / 32] >> (cp % 32) & 1)) continue;
            after = g->after[pos];
        } else if (!class_match(g->elems, pos, cp, &after)) {
            continue;
        }
        expand(m, after, m->nodes[in[i]].next, out, &n, 0);
    }
    return m->overflow ? 0 : n;
}

/* The stacks after one more byte; *cp / *rem carry a partial code point:
 * its bits so far, and in *rem the continuation bytes still due (low 4
 * bits) and the sequence's whole length (bits 4..7), which sets the
 * smallest code point it may encode (overlong forms are invalid UTF-8). */
static int step_byte(gram_matcher *m, const int32_t *in, int n_in, uint32_t *cp, int *rem, unsigned char b,
                     int32_t *out) {
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (*rem == 0) {
        if (b < 0x80) return step_cp(m, in, n_in, b, out);
        if (b >= 0xc2 && b <= 0xdf) *cp = b & 0x1fu, *rem = 1 | 2 << 4;
        else if ((b & 0xf0) == 0xe0) *cp = b & 0x0fu, *rem = 2 | 3 << 4;
        else if (b >= 0xf0 && b <= 0xf4) *cp = b & 0x07u, *rem = 3 | 4 << 4;
        else return 0;
    } else {
        if ((b & 0xc0) != 0x80) return 0;
        *cp = *cp << 6 | (b & 0x3fu);
        if (((*rem = *rem - 1) & 15) == 0) {
            const int len = *rem >> 4;
            *rem = 0;
            if (*cp < min_cp[len] || *cp > 0x10ffff || (*cp >= 0xd800 && *cp <= 0xdfff)) return 0;
            return step_cp(m, in, n_in, *cp, out);
        }
    }
    /* inside a code point: keep the stacks that some completion could satisfy */
    const uint32_t shift = 6u * (uint32_t)(*rem & 15);
    uint32_t lo = *cp << shift, hi = lo | ((1u << shift) - 1);
    if (lo < min_cp[*rem >> 4]) lo = min_cp[*rem >> 4];
    if (hi > 0x10ffff) hi = 0x10ffff;
    if (lo > hi) return 0;
    int n = 0;
    for (int i = 0; i < n_in; i++)
        if (in[i] >= 0 && class_may_match(m->g->elems, m->nodes[in[i]].pos, lo, hi)) out[n++] = in[i];
    return n;
}

static int reserve_scratch(gram_matcher *m, int sets) {
    if (sets <= m->scratch_sets) return 0;
    int32_t *s = realloc(m->scratch, sizeof(int32_t) * GRAM_MAX_STACKS * (size_t)sets);
    if (!s) return -1;
    m->scratch = s;
    m->scratch_sets = sets;
    return 0;
}

/* Copies the current state's stacks to the front of the arena, dropping
 * the nodes of earlier states and of abandoned branches. */
static int compact(gram_matcher *m) {
    int32_t *map = malloc(sizeof(int32_t) * (size_t)(m->n_nodes + 1));
    gnode *fresh = malloc(sizeof(gnode) * (size_t)(m->n_nodes + 1));
    int32_t *chain = malloc(sizeof(int32_t) * (size_t)(m->n_nodes + 1));
    if (!map || !fresh || !chain) {
        free(map);
        free(fresh);
        free(chain);
        return -1;
    }
    for (int i = 0; i < m->n_nodes; i++) map[i] = -1;
    int n_fresh = 0;
    for (int s = 0; s < m->n_stacks; s++) {
        int len = 0;
        for (int32_t t = m->stacks[s]; t >= 0 && map[t] < 0; t = m->nodes[t].next) chain[len++] = t;
        for (int k = len - 1; k >= 0; k--) {
            const int32_t old = chain[k], below = m->nodes[old].next;
            fresh[n_fresh] = (gnode){m->nodes[old].pos, below < 0 ? -1 : map[below]};
            map[old] = n_fresh++;
        }
        if (m->stacks[s] >= 0) m->stacks[s] = map[m->stacks[s]];
    }
    memcpy(m->nodes, fresh, sizeof(gnode) * (size_t)n_fresh);
    m->n_nodes = n_fresh;
    free(map);
    free(fresh);
    free(chain);
    return 0;
}

gram_matcher *gram_matcher_new(gram_grammar *g, char *err, size_t errlen) {
    gram_matcher *m = calloc(1, sizeof *m);
    m = m && reserve_scratch(m, 2) == 0 ? m : (free(m), NULL);
    if (m) m->stacks = malloc(sizeof(int32_t) * GRAM_MAX_STACKS);
    if (!m || !m->stacks) {
        if (m) free(m->scratch);
        free(m);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    atomic_fetch_add(&g->refs, 1);
    m->g = g;
    m->work = 0;
    for (int a = g->alt_off[g->root]; a < g->alt_off[g->root + 1]; a++)
        expand(m, g->alts[a], -1, m->stacks, &m->n_stacks, 0);
    if (m->overflow) {
        snprintf(err, errlen,
                 "the grammar's start exceeds the matcher's limits (%d alternatives alive, %d rules nested, %d "
                 "expansions)", GRAM_MAX_STACKS, GRAM_MAX_DEPTH, GRAM_MAX_WORK);
        gram_matcher_free(m);
        return NULL;
    }
    return m;
}

gram_matcher *gram_matcher_clone(const gram_matcher *m) {
    gram_matcher *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    *c = *m;
    c->nodes = malloc(sizeof(gnode) * (size_t)(m->cap_nodes ? m->cap_nodes : 1));
    c->stacks = malloc(sizeof(int32_t) * GRAM_MAX_STACKS);
    c->scratch = NULL;
    c->scratch_sets = 0;
    memset(c->cache, 0, sizeof c->cache); /* the copy starts with no cached masks ... */
    c->ni = c->st_tops = c->st_trans = c->st_index = NULL; /* ... and no automaton */
    c->st = NULL;
    c->ni_cap = c->ni_used = c->n_st = c->cap_st = c->n_tops = c->cap_tops = c->st_index_cap = 0;
    c->interning = 0;
    if (!c->nodes || !c->stacks || reserve_scratch(c, 2) != 0) {
        free(c->nodes);
        free(c->stacks);
        free(c->scratch);
        free(c);
        return NULL;
    }
    if (m->n_nodes) memcpy(c->nodes, m->nodes, sizeof(gnode) * (size_t)m->n_nodes);
    memcpy(c->stacks, m->stacks, sizeof(int32_t) * (size_t)m->n_stacks);
    atomic_fetch_add(&m->g->refs, 1);
    return c;
}

void gram_matcher_free(gram_matcher *m) {
    if (!m) return;
    gram_free(m->g);
    for (int i = 0; i < GRAM_CACHE; i++) free(m->cache[i].bits);
    free(m->ni);
    free(m->st);
    free(m->st_tops);
    free(m->st_trans);
    free(m->st_index);
    free(m->nodes);
    free(m->stacks);
    free(m->scratch);
    free(m);
}

int gram_accept_bytes(gram_matcher *m, const char *bytes, size_t n) {
    const int mark = m->n_nodes;
    int32_t *a = m->scratch, *b = m->scratch + GRAM_MAX_STACKS;
    memcpy(a, m->stacks, sizeof(int32_t) * (size_t)m->n_stacks);
    int n_cur = m->n_stacks, rem = m->rem;
    uint32_t cp = m->cp;
    m->overflow = 0;
    for (size_t i = 0; i < n; i++) {
        n_cur = step_byte(m, a, n_cur, &cp, &rem, (unsigned char)bytes[i], b);
        if (n_cur == 0 || m->overflow) {
            m->n_nodes = mark;
            m->overflow = 0;
            return -1;
        }
        int32_t *t = a;
        a = b;
        b = t;
    }
    memcpy(m->stacks, a, sizeof(int32_t) * (size_t)n_cur);
    m->n_stacks = n_cur;
    m->cp = cp;
    m->rem = rem;
    if (m->n_nodes > 1024 && compact(m) != 0) return -1;
    return 0;
}

int gram_is_complete(const gram_matcher *m) {
    if (m->rem) return 0;
    for (int i = 0; i < m->n_stacks; i++)
        if (m->stacks[i] < 0) return 1;
    return 0;
}

int gram_can_continue(const gram_matcher *m) {
    for (int i = 0; i < m->n_stacks; i++)
        if (m->stacks[i] >= 0) return 1;
    return 0;
}

/* ---- the vocabulary trie and the mask --------------------------------------- */

struct gram_vocab {
    int n_tokens;
    char **piece;      /* [n_tokens]: each id's bytes (copied) */
    size_t *len;
    uint8_t *usable;   /* [n_tokens]: not excluded and not empty */
    /* the trie in depth-first pre-order: node i's subtree is [i, end[i]),
     * its first child i + 1, the child after c is end[c]; node 0 is the root */
    int n_nodes;
    unsigned char *byte;
    int32_t *end;
    int32_t *tok_first, *tok_n; /* ids spelled exactly by node i: tok_ids[tok_first .. + tok_n) */
    int32_t *tok_ids;
    int32_t *tok_start;  /* [n_nodes + 1]: tok_ids entries of the nodes before i (a subtree's ids are
                            tok_ids[tok_start[i] .. tok_start[end[i]])) */
    uint64_t *sub_bytes; /* [n_nodes * 4]: the bytes of node i's strict descendants, as a 256-bit set */
    int32_t *height;     /* [n_nodes]: how many bytes node i's deepest descendant adds to it */
    int max_len;
};

typedef struct {
    const unsigned char *p;
    size_t len;
    int32_t id;
} vocab_entry;

static int entry_cmp(const void *a, const void *b) {
    const vocab_entry *x = a, *y = b;
    const size_t n = x->len < y->len ? x->len : y->len;
    const int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void gram_vocab_free(gram_vocab *v) {
    if (!v) return;
    if (v->piece)
        for (int i = 0; i < v->n_tokens; i++) free(v->piece[i]);
    free(v->piece);
    free(v->len);
    free(v->usable);
    free(v->byte);
    free(v->end);
    free(v->tok_first);
    free(v->tok_n);
    free(v->tok_ids);
    free(v->tok_start);
    free(v->sub_bytes);
    free(v->height);
    free(v);
}

gram_vocab *gram_vocab_new(int n_tokens, const char *const *pieces, const size_t *lens, const uint8_t *excluded) {
    gram_vocab *v = calloc(1, sizeof *v);
    vocab_entry *ents = malloc(sizeof *ents * (size_t)(n_tokens + 1));
    if (!v || !ents) goto oom;
    v->n_tokens = n_tokens;
    v->piece = calloc((size_t)n_tokens + 1, sizeof *v->piece);
    v->len = calloc((size_t)n_tokens + 1, sizeof *v->len);
    v->usable = calloc((size_t)n_tokens + 1, 1);
    if (!v->piece || !v->len || !v->usable) goto oom;
    size_t total = 1;
    int n_ents = 0;
    for (int i = 0; i < n_tokens; i++) {
        const size_t len = pieces[i] ? lens[i] : 0;
        v->piece[i] = malloc(len + 1);
        if (!v->piece[i]) goto oom;
        if (len) memcpy(v->piece[i], pieces[i], len);
        v->len[i] = len;
        if (len == 0 || (excluded && excluded[i])) continue;
        v->usable[i] = 1;
        ents[n_ents++] = (vocab_entry){(const unsigned char *)v->piece[i], len, i};
        total += len;
        if ((int)len > v->max_len) v->max_len = (int)len;
    }
    qsort(ents, (size_t)n_ents, sizeof *ents, entry_cmp);
    v->byte = malloc(total);
    v->end = malloc(sizeof(int32_t) * total);
    v->tok_first = calloc(total, sizeof(int32_t));
    v->tok_n = calloc(total, sizeof(int32_t));
    v->tok_ids = malloc(sizeof(int32_t) * (size_t)(n_ents + 1));
    int32_t *path = malloc(sizeof(int32_t) * (size_t)(v->max_len + 1));
    if (!v->byte || !v->end || !v->tok_first || !v->tok_n || !v->tok_ids || !path) {
        free(path);
        goto oom;
    }
    v->byte[0] = 0;
    v->n_nodes = 1;
    path[0] = 0;
    int depth = 0, n_ids = 0;
    const unsigned char *prev = NULL;
    for (int k = 0; k < n_ents; k++) {
        const unsigned char *s = ents[k].p;
        const int len = (int)ents[k].len;
        int common = 0;
        while (prev && common < depth && common < len && prev[common] == s[common]) common++;
        while (depth > common) v->end[path[depth--]] = v->n_nodes;
        for (int i = common; i < len; i++) {
            const int nd = v->n_nodes++;
            v->byte[nd] = s[i];
            path[++depth] = nd;
        }
        const int nd = path[depth];
        if (v->tok_n[nd] == 0) v->tok_first[nd] = n_ids;
        v->tok_ids[n_ids++] = ents[k].id;
        v->tok_n[nd]++;
        prev = s;
    }
    while (depth >= 0) v->end[path[depth--]] = v->n_nodes;
    free(path);
    free(ents);
    v->tok_start = malloc(sizeof(int32_t) * ((size_t)v->n_nodes + 1));
    v->sub_bytes = calloc((size_t)v->n_nodes * 4, sizeof(uint64_t));
    v->height = calloc((size_t)v->n_nodes, sizeof(int32_t));
    if (!v->tok_start || !v->sub_bytes || !v->height) {
        gram_vocab_free(v);
        return NULL;
    }
    for (int i = 0, k = 0; i <= v->n_nodes; i++) {
        v->tok_start[i] = k;
        if (i < v->n_nodes) k += v->tok_n[i];
    }
    /* children come after their parent: fold each node's set into its parent's, last node first */
    int32_t *parent = malloc(sizeof(int32_t) * (size_t)v->n_nodes);
    if (!parent) {
        gram_vocab_free(v);
        return NULL;
    }
    for (int i = 0; i < v->n_nodes; i++)
        for (int c = i + 1; c < v->end[i]; c = v->end[c]) parent[c] = i;
    for (int c = v->n_nodes - 1; c > 0; c--) {
        uint64_t *ps = v->sub_bytes + (size_t)parent[c] * 4, *cs = v->sub_bytes + (size_t)c * 4;
        ps[v->byte[c] >> 6] |= 1ull << (v->byte[c] & 63);
        for (int w = 0; w < 4; w++) ps[w] |= cs[w];
        if (v->height[c] + 1 > v->height[parent[c]]) v->height[parent[c]] = v->height[c] + 1;
    }
    free(parent);
    return v;
oom:
    free(ents);
    gram_vocab_free(v);
    return NULL;
}

int gram_vocab_size(const gram_vocab *v) { return v->n_tokens; }

int gram_accept_token(gram_matcher *m, const gram_vocab *v, int id) {
    if (id < 0 || id >= v->n_tokens || !v->usable[id]) return -1;
    return gram_accept_bytes(m, v->piece[id], v->len[id]);
}

/* Do sets a and b hold the same stacks (structurally, in any order)? */
static int same_set(const gram_matcher *m, const int32_t *a, int na, const int32_t *b, int nb) {
    if (na != nb) return 0;
    for (int i = 0; i < na; i++) {
        int found = 0;
        for (int k = 0; k < nb && !found; k++) found = same_stack(m, a[i], b[k]);
        if (!found) return 0;
    }
    return 1;
}

/* Visits node's children with the state (set, cp, rem) reached by node's
 * bytes: a child whose byte is rejected prunes its subtree; otherwise the
 * ids it spells are allowed and its children are visited in turn. The
 * arena above the current state is reclaimed after each child.
 *
 * at_start: the state is the matcher's own (structurally). An ASCII byte in
 * m->loops leads from that state back to itself (inside a JSON string, every
 * ordinary character does), so such a child needs no step at all: most of
 * the vocabulary is then a plain trie walk. */
static void walk(gram_matcher *m, const gram_vocab *v, int node, const int32_t *set, int n, uint32_t cp, int rem,
                 int at_start, int depth, uint32_t *allowed, int *count) {
    if (m->mask_over) return;
    int32_t *out = m->scratch + (size_t)(depth + 2) * GRAM_MAX_STACKS;
    for (int c = node + 1; c < v->end[node]; c = v->end[c]) {
        const unsigned char b = v->byte[c];
        if (at_start && b < 128 && (m->loops[b >> 5] >> (b & 31) & 1)) {
            for (int t = v->tok_first[c]; t < v->tok_first[c] + v->tok_n[c]; t++) {
                const int32_t id = v->tok_ids[t];
                allowed[id >> 5] |= 1u << (id & 31);
                ++*count;
            }
            if (c + 1 < v->end[c]) walk(m, v, c, set, n, cp, rem, 1, depth + 1, allowed, count);
            continue;
        }
        const int mark = m->n_nodes;
        uint32_t ncp = cp;
        int nrem = rem;
        const int k = step_byte(m, set, n, &ncp, &nrem, b, out);
        if (m->overflow) {
            m->overflow = 0; /* a branch past the limits is not allowed */
        } else if (k > 0) {
            for (int t = v->tok_first[c]; t < v->tok_first[c] + v->tok_n[c]; t++) {
                const int32_t id = v->tok_ids[t];
                allowed[id >> 5] |= 1u << (id & 31);
                ++*count;
            }
            if (c + 1 < v->end[c]) walk(m, v, c, out, k, ncp, nrem, 0, depth + 1, allowed, count);
        }
        m->n_nodes = mark;
    }
}

/* ---- the automaton of one mask walk ----
 *
 * Most trie nodes lead to a state the walk has already met: inside a string
 * of at most 24 characters, every token's k-th byte brings the same "24 - k
 * left" state whatever the letters were. Nodes are hash-consed during the
 * walk, so a state (its sorted stack tops, plus a partial code point) is a
 * short key; each state keeps its 256 successors once computed, and a trie
 * node then costs one table lookup instead of a matcher step. */

static uint32_t state_hash(const int32_t *tops, int n, uint32_t cp, int rem) {
    uint32_t h = 2166136261u ^ cp * 0x9e3779b1u ^ (uint32_t)rem * 0x85ebca77u;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)tops[i]) * 16777619u;
    return h ^ (uint32_t)n;
}

static int state_index_grow(gram_matcher *m) {
    const int cap = m->st_index_cap ? m->st_index_cap * 2 : 256;
    int32_t *t = malloc(sizeof(int32_t) * (size_t)cap);
    if (!t) return -1;
    memset(t, 0xff, sizeof(int32_t) * (size_t)cap);
    for (int i = 0; i < m->n_st; i++) {
        uint32_t h = m->st[i].hash & (uint32_t)(cap - 1);
        while (t[h] >= 0) h = (h + 1) & (uint32_t)(cap - 1);
        t[h] = i;
    }
    free(m->st_index);
    m->st_index = t;
    m->st_index_cap = cap;
    return 0;
}

/* The id of the state (set sorted in place, cp, rem), added if new; -1 when
 * the table is full or memory runs out (memo_full set). */
static int32_t state_intern(gram_matcher *m, int32_t *set, int n, uint32_t cp, int rem) {
    for (int i = 1; i < n; i++) { /* insertion sort: sets are small */
        const int32_t x = set[i];
        int k = i;
        while (k > 0 && set[k - 1] > x) {
            set[k] = set[k - 1];
            k--;
        }
        set[k] = x;
    }
    const uint32_t h = state_hash(set, n, cp, rem);
    if (m->st_index_cap) {
        for (uint32_t i = h & (uint32_t)(m->st_index_cap - 1); m->st_index[i] >= 0;
             i = (i + 1) & (uint32_t)(m->st_index_cap - 1)) {
            const gstate *g = &m->st[m->st_index[i]];
            if (g->hash == h && g->n == n && g->cp == cp && g->rem == rem &&
                !memcmp(m->st_tops + g->first, set, sizeof(int32_t) * (size_t)n))
                return m->st_index[i];
        }
    }
    if (m->n_st >= GRAM_WALK_STATES) {
        m->memo_full = 1;
        return -1;
    }
    if (m->n_st == m->cap_st) {
        const int cap = m->cap_st ? m->cap_st * 2 : 64;
        gstate *st = realloc(m->st, sizeof *st * (size_t)cap);
        if (st) m->st = st;
        int32_t *tr = st ? realloc(m->st_trans, sizeof(int32_t) * 256 * (size_t)cap) : NULL;
        if (tr) m->st_trans = tr;
        if (!st || !tr) {
            m->memo_full = 1;
            return -1;
        }
        m->cap_st = cap;
    }
    if (m->n_tops + n > m->cap_tops) {
        int cap = m->cap_tops ? m->cap_tops : 256;
        while (cap < m->n_tops + n) cap *= 2;
        int32_t *t = realloc(m->st_tops, sizeof(int32_t) * (size_t)cap);
        if (!t) {
            m->memo_full = 1;
            return -1;
        }
        m->st_tops = t;
        m->cap_tops = cap;
    }
    if ((m->n_st + 1) * 2 > m->st_index_cap && state_index_grow(m) != 0) {
        m->memo_full = 1;
        return -1;
    }
    const int32_t id = m->n_st++;
    m->st[id] = (gstate){.first = m->n_tops, .n = n, .cp = cp, .hash = h, .rem = rem};
    memcpy(m->st_tops + m->n_tops, set, sizeof(int32_t) * (size_t)n);
    m->n_tops += n;
    for (int i = 0; i < 256; i++) m->st_trans[(size_t)id * 256 + i] = -2;
    uint32_t i = h & (uint32_t)(m->st_index_cap - 1);
    while (m->st_index[i] >= 0) i = (i + 1) & (uint32_t)(m->st_index_cap - 1);
    m->st_index[i] = id;
    return id;
}

/* The successor of state sid by byte b (computed once): a state id, -1
 * rejected, -3 when the automaton is full (memo_full). */
static int32_t transition(gram_matcher *m, int32_t sid, unsigned char b) {
    int32_t next = m->st_trans[(size_t)sid * 256 + b];
    if (next != -2) return next;
    int32_t *out = m->scratch + GRAM_MAX_STACKS;
    const gstate g = m->st[sid]; /* a copy: interning may move the table */
    uint32_t cp = g.cp;
    int rem = g.rem;
    const int k = step_byte(m, m->st_tops + g.first, g.n, &cp, &rem, b, out);
    if (m->overflow || k == 0) {
        m->overflow = 0; /* a branch past the limits is not allowed */
        next = -1;
    } else {
        next = state_intern(m, out, k, cp, rem);
        if (next < 0) return -3;
    }
    m->st_trans[(size_t)sid * 256 + b] = next;
    return next;
}

/* Subtrees smaller than this are walked even when they could be skipped:
 * the check costs up to 128 transitions per level. */
#define GRAM_SKIP_MIN_NODES 64

/* The one state every byte of set leads state sid to, or -1 if they lead
 * to different states or some byte is rejected (-3: the automaton is full). */
static int32_t uniform_successor(gram_matcher *m, int32_t sid, const uint64_t *set) {
    int32_t to = -1;
    for (int w = 0; w < 2; w++) /* ASCII only: the caller checked */
        for (uint64_t bits = set[w]; bits; bits &= bits - 1) {
            const int32_t t = transition(m, sid, (unsigned char)(w * 64 + __builtin_ctzll(bits)));
            if (t < 0) return t == -3 ? -3 : -1;
            if (to >= 0 && t != to) return -1;
            to = t;
        }
    return to;
}

/* Is every token below trie node c allowed from state sid, without walking
 * c's subtree? Yes if every byte of the subtree leads sid to one same
 * state s1, every such byte leads s1 to one same s2, and so on for as many
 * levels as the subtree is deep: then every path below c ends in a live
 * state. Inside an unbounded JSON string each s is sid itself (checked
 * first, from the state's self-loop bytes); inside a string of at most n
 * characters s1, s2, ... are "n - 1 left", "n - 2 left", ... */
static int subtree_allowed(gram_matcher *m, const gram_vocab *v, int c, int32_t sid) {
    if (v->end[c] - c < GRAM_SKIP_MIN_NODES) return 0;
    const uint64_t *sub = v->sub_bytes + (size_t)c * 4;
    if (sub[2] | sub[3]) return 0; /* a byte >= 0x80 starts or continues a code point: partial states differ */
    if (!m->st[sid].loops_known) {
        uint64_t loop[4] = {0};
        for (int b = 0; b < 128; b++) {
            const int32_t t = transition(m, sid, (unsigned char)b);
            if (t == -3) return 0;
            if (t == sid) loop[b >> 6] |= 1ull << (b & 63);
        }
        memcpy(m->st[sid].loop, loop, sizeof loop);
        m->st[sid].loops_known = 1;
    }
    if (!(sub[0] & ~m->st[sid].loop[0]) && !(sub[1] & ~m->st[sid].loop[1])) return 1;
    int32_t s = sid;
    for (int level = 0; level < v->height[c]; level++) {
        s = uniform_successor(m, s, sub);
        if (s < 0) return 0;
    }
    return 1;
}

/* walk() over the automaton: node's bytes led to state sid. */
static void walk_memo(gram_matcher *m, const gram_vocab *v, int node, int32_t sid, uint32_t *allowed, int *count) {
    if (m->mask_over) return;
    for (int c = node + 1; c < v->end[node] && !m->memo_full; c = v->end[c]) {
        const int32_t next = transition(m, sid, v->byte[c]);
        if (next == -3) return;
        if (next < 0) continue;
        const int has_children = c + 1 < v->end[c];
        const int whole = has_children && subtree_allowed(m, v, c, next);
        if (m->memo_full) return;
        const int t_end = whole ? v->tok_start[v->end[c]] : v->tok_first[c] + v->tok_n[c];
        for (int t = whole ? v->tok_start[c] : v->tok_first[c]; t < t_end; t++) {
            const int32_t id = v->tok_ids[t];
            allowed[id >> 5] |= 1u << (id & 31);
            ++*count;
        }
        if (has_children && !whole) walk_memo(m, v, c, next, allowed, count);
    }
}

/* The mask through the automaton; -1 if it outgrew GRAM_WALK_STATES. */
static int mask_memo(gram_matcher *m, const gram_vocab *v, uint32_t *allowed) {
    int count = 0;
    m->walk_mark = m->n_nodes;
    m->interning = 1;
    m->ni_used = 0;
    if (m->st_index) memset(m->st_index, 0xff, sizeof(int32_t) * (size_t)m->st_index_cap);
    m->n_st = m->n_tops = 0;
    m->memo_full = 0;
    m->overflow = 0;
    int32_t *root = m->scratch;
    memcpy(root, m->stacks, sizeof(int32_t) * (size_t)m->n_stacks);
    const int32_t sid = state_intern(m, root, m->n_stacks, m->cp, m->rem);
    if (sid >= 0) walk_memo(m, v, 0, sid, allowed, &count);
    /* empty the intern table for the next walk: newest first, so each
     * node's probe chain is still intact when it is looked up (a table that
     * grew large need not be swept whole for a walk that met few nodes) */
    for (int i = m->n_nodes - 1; i >= m->walk_mark && m->ni; i--) {
        uint32_t h = node_hash(m->nodes[i].pos, m->nodes[i].next) & (uint32_t)(m->ni_cap - 1);
        while (m->ni[h] != i) h = (h + 1) & (uint32_t)(m->ni_cap - 1);
        m->ni[h] = -1;
    }
    m->ni_used = 0;
    m->interning = 0;
    m->n_nodes = m->walk_mark;
    m->overflow = 0;
    return m->memo_full ? -1 : count;
}

/* The mask by the plain walk: a matcher step per trie node (the state's
 * self-looping ASCII bytes aside). */
static void mask_plain(gram_matcher *m, const gram_vocab *v, uint32_t *allowed, int *count) {
    memset(allowed, 0, sizeof(uint32_t) * (size_t)((v->n_tokens + 31) / 32));
    m->overflow = 0;
    memset(m->loops, 0, sizeof m->loops);
    if (m->rem == 0) {
        int32_t *out = m->scratch + GRAM_MAX_STACKS;
        for (uint32_t b = 0; b < 128; b++) {
            const int mark = m->n_nodes;
            const int k = step_cp(m, m->stacks, m->n_stacks, b, out);
            if (!m->overflow && k > 0 && same_set(m, out, k, m->stacks, m->n_stacks)) m->loops[b >> 5] |= 1u << (b & 31);
            m->overflow = 0;
            m->n_nodes = mark;
        }
    }
    walk(m, v, 0, m->stacks, m->n_stacks, m->cp, m->rem, 1, 0, allowed, count);
}

/* The state's signature for the mask cache: cp, rem, then per stack its
 * depth and positions. Returns its length, or -1 if longer than cap. */
static int signature(const gram_matcher *m, int32_t *sig, int cap) {
    int n = 0;
    if (cap < 3) return -1;
    sig[n++] = (int32_t)m->cp;
    sig[n++] = m->rem;
    sig[n++] = m->n_stacks;
    for (int i = 0; i < m->n_stacks; i++) {
        const int at = n++;
        if (n > cap) return -1;
        int d = 0;
        for (int32_t t = m->stacks[i]; t >= 0; t = m->nodes[t].next, d++) {
            if (n >= cap) return -1;
            sig[n++] = m->nodes[t].pos;
        }
        sig[at] = d;
    }
    return n;
}

int gram_mask(gram_matcher *m, const gram_vocab *v, uint32_t *allowed) {
    const size_t words = (size_t)((v->n_tokens + 31) / 32);
    /* a state seen recently (the same string, the same position in a
     * repeated structure) gets its mask from the cache */
    int32_t sig[GRAM_SIG_MAX];
    const int n_sig = signature(m, sig, GRAM_SIG_MAX);
    if (n_sig > 0) {
        for (int i = 0; i < GRAM_CACHE; i++) {
            gram_cached *e = &m->cache[i];
            if (e->v == v && e->n_sig == n_sig && !memcmp(e->sig, sig, sizeof(int32_t) * (size_t)n_sig)) {
                memcpy(allowed, e->bits, sizeof(uint32_t) * words);
                e->used = ++m->clock;
                return e->count;
            }
        }
    }
    memset(allowed, 0, sizeof(uint32_t) * words);
    if (reserve_scratch(m, v->max_len + 3) != 0) return 0;
    m->masking = 1;
    m->mask_work = 0;
    m->mask_over = 0;
    int count = mask_memo(m, v, allowed);
    if (count < 0 && !m->mask_over) { /* too many states for the automaton: the plain walk, step by step */
        count = 0;
        mask_plain(m, v, allowed, &count);
    }
    m->masking = 0;
    if (m->mask_over) { /* nothing is allowed from a mask cut short; it is not cached */
        m->overflow = 0;
        memset(allowed, 0, sizeof(uint32_t) * words);
        return -1;
    }
    if (n_sig > 0) {
        gram_cached *e = &m->cache[0];
        for (int i = 1; i < GRAM_CACHE; i++)
            if (m->cache[i].used < e->used) e = &m->cache[i];
        if (e->cap_words < words) {
            uint32_t *bits = realloc(e->bits, sizeof(uint32_t) * words);
            if (!bits) return count;
            e->bits = bits;
            e->cap_words = words;
        }
        memcpy(e->bits, allowed, sizeof(uint32_t) * words);
        memcpy(e->sig, sig, sizeof(int32_t) * (size_t)n_sig);
        e->n_sig = n_sig;
        e->v = v;
        e->count = count;
        e->used = ++m->clock;
    }
    return count;
}

int gram_mask_stepwise(gram_matcher *m, const gram_vocab *v, uint32_t *allowed) {
    int count = 0;
    if (reserve_scratch(m, v->max_len + 3) != 0) {
        memset(allowed, 0, sizeof(uint32_t) * (size_t)((v->n_tokens + 31) / 32));
        return 0;
    }
    mask_plain(m, v, allowed, &count);
    return count;
}
