/* json_schema_pattern.c — a pattern's syntax (the subset json_schema_pattern.h lists) into a
 * syntax tree, and the tree into the NFA of json_schema_pattern_nfa.h.
 *
 * The parser is recursive descent; it recurses once per group, and groups nest at most
 * JSP_MAX_GROUP_DEPTH deep. Character sets are kept as sorted code point ranges without
 * surrogates. The NFA is built backwards (each piece is given the state that follows it), so a
 * repetition {n,m} is its item built n + (m - n) times, each copy with its own states; the
 * number of states and the steps taken are both capped, since nested counts multiply.
 */
#include "json_schema_pattern.h"
#include "json_schema_pattern_nfa.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_EMPTY, N_SET, N_CAT, N_ALT, N_REP };

typedef struct {
    int kind;
    int a, b;     /* N_CAT, N_ALT: the two parts; N_REP: a is the item */
    int set;      /* N_SET */
    int min, max; /* N_REP; max -1: unbounded */
} node;

typedef struct {
    jsp_range *r;
    int n, cap;
} rbuf;

typedef struct {
    const char *src, *s, *end;
    node *nodes;
    int n_nodes, cap_nodes;
    rbuf ranges;  /* every set's ranges, one after the other */
    int *set_off; /* set i starts at set_off[i]; set_off[n_sets] is ranges.n */
    int n_sets, cap_sets;
    int universe; /* the set of every character */
    int depth;
    jsp_state *states;
    int n_states, cap_states;
    long work;
    char *err;
    size_t errlen;
    int failed;
} pctx;

static int fail(pctx *c, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(pctx *c, const char *at, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at) snprintf(c->err, c->errlen, "%s (at offset %d)", msg, (int)(at - c->src));
    else snprintf(c->err, c->errlen, "%s", msg);
    return -1;
}

/* ---- character sets ------------------------------------------------------------- */

static int rb_add(pctx *c, rbuf *b, uint32_t lo, uint32_t hi) {
    if (b->n == b->cap) {
        const int cap = b->cap ? b->cap * 2 : 8;
        jsp_range *r = realloc(b->r, sizeof *r * (size_t)cap);
        if (!r) return fail(c, NULL, "out of memory");
        b->r = r;
        b->cap = cap;
    }
    b->r[b->n++] = (jsp_range){lo, hi};
    return 0;
}

static int range_cmp(const void *a, const void *b) {
    const jsp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Surrogates cut out of b, then its ranges sorted, overlapping and adjacent ones merged (a merge
 * never reaches across the surrogates once none of them is left). */
static int rb_finish(pctx *c, rbuf *b) {
    const int n0 = b->n;
    for (int i = 0; i < n0; i++) /* a range spanning them: split in two */
        if (b->r[i].lo < JSP_SURR_LO && b->r[i].hi > JSP_SURR_HI) {
            const uint32_t hi = b->r[i].hi;
            b->r[i].hi = JSP_SURR_LO - 1;
            if (rb_add(c, b, JSP_SURR_HI + 1, hi)) return -1;
        }
    int n = 0;
    for (int i = 0; i < b->n; i++) { /* trimmed at them, or dropped when wholly inside */
        jsp_range r = b->r[i];
        if (r.lo >= JSP_SURR_LO && r.lo <= JSP_SURR_HI) r.lo = JSP_SURR_HI + 1;
        if (r.hi >= JSP_SURR_LO && r.hi <= JSP_SURR_HI) r.hi = JSP_SURR_LO - 1;
        if (r.lo <= r.hi) b->r[n++] = r;
    }
    b->n = n;
    if (b->n > 1) qsort(b->r, (size_t)b->n, sizeof *b->r, range_cmp);
    n = 0;
    for (int i = 0; i < b->n; i++) {
        if (n > 0 && b->r[i].lo <= b->r[n - 1].hi + 1) {
            if (b->r[i].hi > b->r[n - 1].hi) b->r[n - 1].hi = b->r[i].hi;
        } else {
            b->r[n++] = b->r[i];
        }
    }
    b->n = n;
    return 0;
}

/* Every character b (normalized) does not hold. */
static int rb_complement(pctx *c, rbuf *b) {
    rbuf out = {0};
    uint32_t next = 0;
    int rc = 0;
    for (int i = 0; i < b->n && rc == 0; i++) {
        if (b->r[i].lo > next) rc = rb_add(c, &out, next, b->r[i].lo - 1);
        next = b->r[i].hi + 1;
    }
    if (rc == 0 && next <= JSP_MAX_CP) rc = rb_add(c, &out, next, JSP_MAX_CP);
    if (rc == 0) rc = rb_finish(c, &out);
    free(b->r);
    *b = out;
    return rc;
}

/* \d \D \w \W \s \S and "." (ECMA-262's classes; "." leaves out "\n" only, as PCRE2 does) */
static int rb_add_class(pctx *c, rbuf *b, char kind) {
    static const jsp_range DIGIT[] = {{'0', '9'}};
    static const jsp_range WORD[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const jsp_range SPACE[] = {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680},
                                      {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                      {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    static const jsp_range NEWLINE[] = {{0x0A, 0x0A}};
    const jsp_range *src;
    int n;
    switch (kind) {
    case 'd': case 'D': src = DIGIT, n = 1; break;
    case 'w': case 'W': src = WORD, n = 4; break;
    case 's': case 'S': src = SPACE, n = (int)(sizeof SPACE / sizeof *SPACE); break;
    default: src = NEWLINE, n = 1; break; /* '.': everything but these */
    }
    rbuf t = {0};
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) rc = rb_add(c, &t, src[i].lo, src[i].hi);
    if (rc == 0 && (kind == 'D' || kind == 'W' || kind == 'S' || kind == '.')) rc = rb_complement(c, &t);
    for (int i = 0; i < t.n && rc == 0; i++) rc = rb_add(c, b, t.r[i].lo, t.r[i].hi);
    free(t.r);
    return rc;
}

/* b (normalized here) as a new set; its id. b is emptied. */
static int set_commit(pctx *c, rbuf *b) {
    int id = -1;
    if (rb_finish(c, b) == 0 && c->n_sets + 2 > c->cap_sets) {
        const int cap = c->cap_sets ? c->cap_sets * 2 : 32;
        int *o = realloc(c->set_off, sizeof *o * (size_t)cap);
        if (!o) fail(c, NULL, "out of memory");
        else c->set_off = o, c->cap_sets = cap;
    }
    if (!c->failed) {
        if (c->n_sets == 0) c->set_off[0] = 0;
        int rc = 0;
        for (int i = 0; i < b->n && rc == 0; i++) rc = rb_add(c, &c->ranges, b->r[i].lo, b->r[i].hi);
        if (rc == 0) {
            id = c->n_sets++;
            c->set_off[c->n_sets] = c->ranges.n;
        }
    }
    free(b->r);
    *b = (rbuf){0};
    return c->failed ? -1 : id;
}

/* ---- syntax ----------------------------------------------------------------------- */

static int new_node(pctx *c, int kind, int a, int b, int set) {
    if (c->n_nodes == c->cap_nodes) {
        const int cap = c->cap_nodes ? c->cap_nodes * 2 : 64;
        node *n = realloc(c->nodes, sizeof *n * (size_t)cap);
        if (!n) return fail(c, NULL, "out of memory");
        c->nodes = n;
        c->cap_nodes = cap;
    }
    c->nodes[c->n_nodes] = (node){kind, a, b, set, 0, 0};
    return c->n_nodes++;
}

static int set_node(pctx *c, rbuf *b) {
    const int set = set_commit(c, b);
    return set < 0 ? -1 : new_node(c, N_SET, -1, -1, set);
}

/* One UTF-8 character at c->s into *cp. */
static int next_cp(pctx *c, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)c->s;
    const int len = u[0] < 0x80 ? 1 : (u[0] & 0xe0) == 0xc0 ? 2 : (u[0] & 0xf0) == 0xe0 ? 3
                    : (u[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (!len || c->end - c->s < len) return fail(c, c->s, "the pattern is not valid UTF-8");
    uint32_t v = len == 1 ? u[0] : len == 2 ? (u[0] & 0x1fu) : len == 3 ? (u[0] & 0x0fu) : (u[0] & 0x07u);
    for (int i = 1; i < len; i++) {
        if ((u[i] & 0xc0) != 0x80) return fail(c, c->s, "the pattern is not valid UTF-8");
        v = v << 6 | (u[i] & 0x3fu);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < least[len] || (v >= JSP_SURR_LO && v <= JSP_SURR_HI) || v > JSP_MAX_CP)
        return fail(c, c->s, "the pattern is not valid UTF-8");
    *cp = v;
    c->s += len;
    return 0;
}

static int hex_digits(pctx *c, const char *at, int n, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < n; i++) {
        const char h = c->s + i < c->end ? c->s[i] : 0;
        const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                      : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return fail(c, at, "'\\%c' needs %d hexadecimal digits", at[1], n);
        *v = *v << 4 | (uint32_t)d;
    }
    c->s += n;
    return 0;
}

/* An escape at c->s ('\\'): 1 with *cp for a character, 2 for a class (its ranges added to b),
 * -1 on an error. In a class, \b is a backspace. */
static int parse_escape(pctx *c, int in_class, rbuf *b, uint32_t *cp) {
    const char *at = c->s;
    if (c->s + 1 >= c->end) return fail(c, at, "the pattern ends with '\\'");
    const char e = c->s[1];
    c->s += 2;
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': return rb_add_class(c, b, e) ? -1 : 2;
    case 't': *cp = '\t'; return 1;
    case 'n': *cp = '\n'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    case 'x': return hex_digits(c, at, 2, cp) ? -1 : 1;
    case 'u':
        if (c->s < c->end && *c->s == '{') return fail(c, at, "'\\u{...}' is not supported; write '\\uHHHH'");
        if (hex_digits(c, at, 4, cp)) return -1;
        if (*cp >= JSP_SURR_LO && *cp <= JSP_SURR_HI)
            return fail(c, at, "the surrogate '\\u%04X' is not supported; write the character itself", (unsigned)*cp);
        return 1;
    case '0':
        if (c->s < c->end && *c->s >= '0' && *c->s <= '9') return fail(c, at, "octal escapes are not supported");
        *cp = 0;
        return 1;
    case 'b':
        if (in_class) {
            *cp = '\b';
            return 1;
        }
        return fail(c, at, "the word boundary '\\b' is not supported");
    case 'B': return fail(c, at, "'\\B' (not a word boundary) is not supported");
    case 'c': return fail(c, at, "the control escape '\\c' is not supported");
    case 'p': case 'P': return fail(c, at, "the Unicode property class '\\%c' is not supported", e);
    case 'k': return fail(c, at, "the named backreference '\\k' is not supported");
    default: break;
    }
    if (e >= '1' && e <= '9') return fail(c, at, "the backreference '\\%c' is not supported", e);
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return fail(c, at, "the escape '\\%c' is not supported", e);
    c->s--; /* punctuation or any other character stands for itself */
    return next_cp(c, cp) ? -1 : 1;
}

/* One member of a class: 1 with *cp, 2 for a class escape (added to b), -1. */
static int class_member(pctx *c, rbuf *b, uint32_t *cp) {
    if (*c->s == '\\') return parse_escape(c, 1, b, cp);
    if (*c->s == '[' && c->s + 1 < c->end && (c->s[1] == ':' || c->s[1] == '=' || c->s[1] == '.'))
        return fail(c, c->s, "the POSIX class '[%c' is not supported; write '\\[' for the character '['", c->s[1]);
    return next_cp(c, cp) ? -1 : 1;
}

static int parse_class(pctx *c) {
    const char *at = c->s++;
    const int negated = c->s < c->end && *c->s == '^';
    if (negated) c->s++;
    if (c->s < c->end && *c->s == ']')
        return fail(c, at, "an empty class ('[]' or '[^]') is not supported; write '\\]' for the character ']'");
    rbuf b = {0};
    for (;;) {
        if (c->s >= c->end) {
            fail(c, at, "'[' without its closing ']'");
            break;
        }
        if (*c->s == ']') {
            c->s++;
            break;
        }
        const char *m = c->s;
        uint32_t lo, hi;
        const int k = class_member(c, &b, &lo);
        if (k < 0) break;
        const int range = c->s + 1 < c->end && c->s[0] == '-' && c->s[1] != ']';
        if (k == 2) {
            if (range) {
                fail(c, m, "a range cannot start at a class escape ('\\d', '\\w', '\\s', ...)");
                break;
            }
            continue;
        }
        hi = lo;
        if (range) {
            const char *h = ++c->s;
            const int k2 = class_member(c, &b, &hi);
            if (k2 < 0) break;
            if (k2 == 2) {
                fail(c, h, "a range cannot end at a class escape ('\\d', '\\w', '\\s', ...)");
                break;
            }
            if (hi < lo) {
                fail(c, m, "the range ends below its start");
                break;
            }
        }
        if (rb_add(c, &b, lo, hi)) break;
    }
    if (!c->failed && negated && rb_finish(c, &b) == 0) rb_complement(c, &b);
    if (c->failed) {
        free(b.r);
        return -1;
    }
    return set_node(c, &b);
}

static int parse_group_body(pctx *c);

static int parse_group(pctx *c) {
    const char *at = c->s++;
    if (c->depth >= JSP_MAX_GROUP_DEPTH) return fail(c, at, "groups nest more than %d deep", JSP_MAX_GROUP_DEPTH);
    if (c->s < c->end && *c->s == '?') {
        const char k = c->s + 1 < c->end ? c->s[1] : 0, k2 = c->s + 2 < c->end ? c->s[2] : 0;
        if (k == ':') c->s += 2;
        else if (k == '=') return fail(c, at, "the lookahead '(?=' is not supported");
        else if (k == '!') return fail(c, at, "the negative lookahead '(?!' is not supported");
        else if (k == '<' && (k2 == '=' || k2 == '!'))
            return fail(c, at, "the lookbehind '(?<%c' is not supported", k2);
        else if (k == '<' || k == 'P') return fail(c, at, "the named group '(?%c' is not supported; write '(?:'", k);
        else return fail(c, at, "'(?' is supported only as the non-capturing group '(?:' (no flags)");
    }
    c->depth++;
    const int n = parse_group_body(c);
    c->depth--;
    if (n < 0) return -1;
    if (c->s >= c->end || *c->s != ')') return fail(c, at, "'(' without its closing ')'");
    c->s++;
    return n;
}

static int parse_atom(pctx *c) {
    rbuf b = {0};
    uint32_t cp;
    int k = 1;
    if (*c->s == '(') return parse_group(c);
    if (*c->s == '[') return parse_class(c);
    if (*c->s == '.') {
        c->s++;
        k = rb_add_class(c, &b, '.') ? -1 : 2;
    } else if (*c->s == '\\') {
        k = parse_escape(c, 0, &b, &cp);
    } else {
        k = next_cp(c, &cp) ? -1 : 1;
    }
    if (k == 1 && rb_add(c, &b, cp, cp)) k = -1;
    if (k < 0) {
        free(b.r);
        return -1;
    }
    return set_node(c, &b);
}

/* {n}, {n,} or {n,m} at c->s; max -1 for unbounded. */
static int parse_count(pctx *c, int *min, int *max) {
    const char *at = c->s++;
    int v[2] = {-1, -1}, which = 0;
    for (;;) {
        while (c->s < c->end && *c->s >= '0' && *c->s <= '9') {
            v[which] = (v[which] < 0 ? 0 : v[which] * 10) + (*c->s++ - '0');
            if (v[which] > JSP_MAX_COUNT) return fail(c, at, "a count in '{...}' is limited to %d", JSP_MAX_COUNT);
        }
        if (which == 0 && v[0] >= 0 && c->s < c->end && *c->s == ',') {
            c->s++;
            which = 1;
            continue;
        }
        break;
    }
    if (v[0] < 0 || c->s >= c->end || *c->s != '}')
        return fail(c, at, "'{' must start a count {n}, {n,} or {n,m}; write '\\{' for the character '{'");
    c->s++;
    *min = v[0];
    *max = which == 0 ? v[0] : v[1];
    if (*max >= 0 && *max < *min) return fail(c, at, "the count {n,m} needs n <= m");
    return 0;
}

static int is_quantifier(char ch) { return ch == '*' || ch == '+' || ch == '?' || ch == '{'; }

static int parse_quantifier(pctx *c, int item) {
    if (c->s >= c->end || !is_quantifier(*c->s)) return item;
    int min = 0, max = -1;
    if (*c->s == '{') {
        if (parse_count(c, &min, &max)) return -1;
    } else {
        min = *c->s == '+';
        max = *c->s == '?' ? 1 : -1;
        c->s++;
    }
    if (c->s < c->end && *c->s == '?') c->s++; /* lazy: the same strings match */
    if (c->s < c->end && is_quantifier(*c->s)) return fail(c, c->s, "a quantifier cannot follow another");
    const int n = new_node(c, N_REP, item, -1, -1);
    if (n >= 0) c->nodes[n].min = min, c->nodes[n].max = max;
    return n;
}

/* Items up to '|', ')' or the end. At the top level (top != 0) '^' may open it and '$' close it
 * (*a_start, *a_end); anywhere else they are refused. */
static int parse_sequence(pctx *c, int top, int *a_start, int *a_end) {
    const char *begin = c->s;
    int seq = -1;
    while (c->s < c->end) {
        const char *at = c->s;
        const char ch = *c->s;
        if (ch == '|' || ch == ')') break;
        if (ch == '^') {
            if (!top || at != begin)
                return fail(c, at, "'^' is supported only at the start of the pattern or of a top-level alternative");
            *a_start = 1;
            c->s++;
            continue;
        }
        if (ch == '$') {
            c->s++;
            if (top && (c->s == c->end || *c->s == '|')) {
                *a_end = 1;
                break;
            }
            return fail(c, at, "'$' is supported only at the end of the pattern or of a top-level alternative");
        }
        if (is_quantifier(ch)) return fail(c, at, "'%c' has nothing to repeat", ch);
        int item = parse_atom(c);
        if (item >= 0) item = parse_quantifier(c, item);
        if (item < 0) return -1;
        seq = seq < 0 ? item : new_node(c, N_CAT, seq, item, -1);
        if (seq < 0) return -1;
    }
    return seq >= 0 ? seq : new_node(c, N_EMPTY, -1, -1, -1);
}

static int parse_group_body(pctx *c) {
    int n = parse_sequence(c, 0, NULL, NULL);
    while (n >= 0 && c->s < c->end && *c->s == '|') {
        c->s++;
        const int m = parse_sequence(c, 0, NULL, NULL);
        n = m < 0 ? -1 : new_node(c, N_ALT, n, m, -1);
    }
    return n;
}

/* ---- the NFA ----------------------------------------------------------------------- */

static int new_state(pctx *c, int kind, int set, int out, int out2) {
    if (c->failed) return -1;
    if (c->n_states >= JSP_MAX_NFA)
        return fail(c, NULL, "the pattern expands to more than %d states (its counts {n,m} multiply)", JSP_MAX_NFA);
    if (c->n_states == c->cap_states) {
        const int cap = c->cap_states ? c->cap_states * 2 : 64;
        jsp_state *s = realloc(c->states, sizeof *s * (size_t)cap);
        if (!s) return fail(c, NULL, "out of memory");
        c->states = s;
        c->cap_states = cap;
    }
    c->states[c->n_states] = (jsp_state){kind, set, out, out2};
    return c->n_states++;
}

static int build(pctx *c, int n, int next);

/* item{min,max} followed by next: min copies, then (max - min) nested optional ones, or a loop. */
static int build_repeat(pctx *c, int item, int min, int max, int next) {
    int tail = next;
    if (max < 0) { /* a loop L: SPLIT(item -> L, next); item+ is entered at the item itself */
        const int loop = new_state(c, JSP_SPLIT, -1, -1, next);
        const int body = loop < 0 ? -1 : build(c, item, loop);
        if (body < 0) return -1;
        c->states[loop].out = body;
        tail = min > 0 ? body : loop;
        if (min > 0) min--;
    } else {
        for (int i = 0; i < max - min && !c->failed; i++) {
            const int body = build(c, item, tail);
            tail = body < 0 ? -1 : new_state(c, JSP_SPLIT, -1, body, next);
        }
    }
    for (int i = 0; i < min && !c->failed; i++) tail = build(c, item, tail);
    return c->failed ? -1 : tail;
}

/* The start of node n's states, which go on to next. */
static int build(pctx *c, int n, int next) {
    if (c->failed) return -1;
    if (++c->work > JSP_MAX_WORK) return fail(c, NULL, "the pattern is too complex (its counts {n,m} multiply)");
    const node x = c->nodes[n];
    switch (x.kind) {
    case N_EMPTY: return next;
    case N_SET: return new_state(c, JSP_SET, x.set, next, -1);
    case N_CAT: {
        const int b = build(c, x.b, next);
        return b < 0 ? -1 : build(c, x.a, b);
    }
    case N_ALT: {
        const int a = build(c, x.a, next), b = a < 0 ? -1 : build(c, x.b, next);
        return b < 0 ? -1 : new_state(c, JSP_SPLIT, -1, a, b);
    }
    default: return build_repeat(c, x.a, x.min, x.max, next);
    }
}

/* "any character, then back to split" loop in front of entry: SPLIT(any -> SPLIT, entry). */
static int any_prefix(pctx *c, int entry) {
    const int split = new_state(c, JSP_SPLIT, -1, -1, entry);
    const int any = split < 0 ? -1 : new_state(c, JSP_SET, c->universe, split, -1);
    if (any < 0) return -1;
    c->states[split].out = any;
    return split;
}

typedef struct {
    int node, a_start, a_end;
} alternative;

/* The top-level alternatives into the NFA: each one's unanchored start gets the any-character
 * loop in front, its unanchored end goes to the shared loop after MATCH. */
static int build_nfa(pctx *c, const alternative *alts, int n_alts, jsp_nfa *nfa) {
    int match = new_state(c, JSP_MATCH, -1, -1, -1), after = -1, any_loop = -1;
    for (int i = 0; i < n_alts; i++)
        if (!alts[i].a_end && after < 0) { /* after: SPLIT(any -> after, MATCH) */
            after = new_state(c, JSP_SPLIT, -1, -1, match);
            any_loop = after < 0 ? -1 : new_state(c, JSP_SET, c->universe, after, -1);
            if (any_loop < 0) return -1;
            c->states[after].out = any_loop;
        }
    int start = -1;
    for (int i = n_alts - 1; i >= 0 && !c->failed; i--) {
        int f = build(c, alts[i].node, alts[i].a_end ? match : after);
        if (f >= 0 && !alts[i].a_start) f = any_prefix(c, f);
        if (f >= 0) start = start < 0 ? f : new_state(c, JSP_SPLIT, -1, f, start);
    }
    if (c->failed) return -1;
    *nfa = (jsp_nfa){c->states, c->n_states, c->ranges.r, c->set_off, c->n_sets, start, match, any_loop};
    return 0;
}

int jsp_nfa_build(const char *pattern, jsp_nfa *nfa, char *err, size_t errlen) {
    const size_t len = strlen(pattern);
    pctx c = {.src = pattern, .s = pattern, .end = pattern + len, .err = err, .errlen = errlen};
    alternative *alts = NULL;
    int n_alts = 0;
    memset(nfa, 0, sizeof *nfa);
    if (len > JSP_MAX_PATTERN)
        fail(&c, NULL, "the pattern is %zu bytes; at most %d are accepted", len, JSP_MAX_PATTERN);
    rbuf all = {0};
    if (!c.failed && rb_add(&c, &all, 0, JSP_MAX_CP) == 0) c.universe = set_commit(&c, &all);
    if (!c.failed && !(alts = malloc(sizeof *alts * (len + 1)))) fail(&c, NULL, "out of memory");
    while (!c.failed) {
        alternative a = {0, 0, 0};
        a.node = parse_sequence(&c, 1, &a.a_start, &a.a_end);
        if (a.node < 0) break;
        alts[n_alts++] = a;
        if (c.s < c.end && *c.s == ')') fail(&c, c.s, "')' without its opening '('");
        else if (c.s < c.end) c.s++; /* '|' */
        else break;
    }
    if (!c.failed) build_nfa(&c, alts, n_alts, nfa);
    free(alts);
    free(c.nodes);
    if (c.failed) {
        free(c.states);
        free(c.ranges.r);
        free(c.set_off);
        memset(nfa, 0, sizeof *nfa);
        return -1;
    }
    return 0;
}

void jsp_nfa_free(jsp_nfa *nfa) {
    free(nfa->states);
    free(nfa->ranges);
    free(nfa->set_off);
    memset(nfa, 0, sizeof *nfa);
}

int jsp_set_has(const jsp_nfa *nfa, int set, uint32_t cp) {
    int lo = nfa->set_off[set], hi = nfa->set_off[set + 1] - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        if (cp < nfa->ranges[mid].lo) hi = mid - 1;
        else if (cp > nfa->ranges[mid].hi) lo = mid + 1;
        else return 1;
    }
    return 0;
}
