/* jinja_parse.c — Jinja2-subset lexer (with jinja2's whitespace control) and recursive-descent parser. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

/* ---------------------------------------------------------------- errors, arenas, buffers */

void jj_fail(jerr *e, int line, const char *fmt, ...) {
    if (e->buf && e->len) {
        int k = 0;
        if (line > 0) k = snprintf(e->buf, e->len, "template:%d: ", line);
        if (k < 0) k = 0;
        if ((size_t)k < e->len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(e->buf + k, e->len - (size_t)k, fmt, ap);
            va_end(ap);
        }
        /* the message is one line: a newline inside (from raise_exception or a name) becomes a space */
        for (char *c = e->buf; *c; c++)
            if (*c == '\n' || *c == '\r') *c = ' ';
    }
    longjmp(e->jb, 1);
}

void *jj_alloc(jarena *a, size_t n) {
    if (n > ((size_t)1 << 40)) jj_fail(a->e, 0, "template needs too much memory");
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    jchunk *h = a->head;
    if (!h || h->cap - h->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->total + cap > a->limit)
            jj_fail(a->e, 0, "template needs more than %zu MiB of memory", a->limit >> 20);
        jchunk *c = malloc(sizeof *c + cap);
        if (!c) jj_fail(a->e, 0, "out of memory");
        c->cap = cap;
        c->used = 0;
        a->total += cap;
        if (h && cap == n) {
            /* a big one-off block goes behind the head so the head's free space is still used */
            c->next = h->next;
            h->next = c;
            c->used = n;
            return (char *)(c + 1);
        }
        c->next = h;
        a->head = h = c;
    }
    void *p = (char *)(h + 1) + h->used;
    h->used += n;
    return p;
}

void jj_arena_free(jarena *a) {
    jchunk *c = a->head;
    while (c) {
        jchunk *nx = c->next;
        free(c);
        c = nx;
    }
    a->head = NULL;
    a->total = 0;
}

void jb_put(jbuf *b, const char *s, size_t n) {
    if (n == 0 && b->p) return; /* an empty put still allocates, so b->p is never NULL afterwards */
    if (n > b->max || b->n > b->max - n) jj_fail(b->a->e, 0, "template output exceeds %zu bytes", b->max);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = jj_alloc(b->a, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jb_putc(jbuf *b, char c) { jb_put(b, &c, 1); }
void jb_puts(jbuf *b, const char *s) { jb_put(b, s, strlen(s)); }

/* ---------------------------------------------------------------- UTF-8 */

uint32_t jj_u8dec(const char *s, size_t n, size_t *len) {
    const unsigned char *u = (const unsigned char *)s;
    uint32_t c = u[0];
    size_t need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (need <= 1 || need > n) {
        *len = 1;
        return c;
    }
    uint32_t cp = c & (0x7f >> need);
    for (size_t i = 1; i < need; i++) {
        if ((u[i] & 0xc0) != 0x80) {
            *len = 1;
            return c;
        }
        cp = (cp << 6) | (u[i] & 0x3f);
    }
    *len = need;
    return cp;
}

size_t jj_u8enc(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    if (cp > 0x10ffff) cp = 0xfffd;
    if (cp > 0xffff && cp <= 0x10ffff) {
        o[0] = (char)(0xf0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
        return 4;
    }
    return jj_u8enc(cp, o);
}

size_t jj_u8count(const char *s, size_t n) {
    size_t c = 0, i = 0, l;
    while (i < n) {
        jj_u8dec(s + i, n - i, &l);
        i += l;
        c++;
    }
    return c;
}

/* ---------------------------------------------------------------- lexer */

typedef struct lexer {
    jarena *a;
    jerr *e;
    const char *s;
    size_t n, i;
    int line;
    unsigned flags;
    jtok *t;
    size_t nt, cap;
} lexer;

static jtok *push(lexer *L, int type, int line) {
    if (L->nt == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jtok *nt = jj_alloc(L->a, cap * sizeof *nt);
        if (L->nt) memcpy(nt, L->t, L->nt * sizeof *nt);
        L->t = nt;
        L->cap = cap;
    }
    jtok *t = &L->t[L->nt++];
    memset(t, 0, sizeof *t);
    t->t = type;
    t->line = line;
    return t;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static void count_lines(lexer *L, size_t from, size_t to) {
    for (size_t k = from; k < to; k++)
        if (L->s[k] == '\n') L->line++;
}

/* Skips the whitespace a tag end consumes: everything after "-%}", one newline after "%}" with
 * trim_blocks. Returns whether the consumed text ended in a newline (jinja2's line_starting,
 * which decides whether lstrip_blocks applies to the next tag). */
static int after_tag(lexer *L, int strip, int trim) {
    size_t k = L->i;
    if (strip) {
        while (k < L->n && is_ws(L->s[k])) k++;
    } else if (trim && k < L->n && L->s[k] == '\n') {
        k++;
    }
    int nl = k > L->i && L->s[k - 1] == '\n';
    count_lines(L, L->i, k);
    L->i = k;
    return nl;
}

/* Applies the begin tag's whitespace control to the data before it: returns the new end. */
static size_t strip_before(lexer *L, size_t ds, size_t de, char sign, int lstrip_kind, int line_starting) {
    if (sign == '-') {
        while (de > ds && is_ws(L->s[de - 1])) de--;
    } else if (sign != '+' && lstrip_kind && (L->flags & JINJA_LSTRIP_BLOCKS)) {
        size_t lp = de;
        while (lp > ds && L->s[lp - 1] != '\n') lp--;
        if ((lp > ds || line_starting) && lp < de) {
            size_t k = lp;
            while (k < de && is_ws(L->s[k])) k++;
            if (k == de) de = lp;
        }
    }
    return de;
}

/* Matches "{%[-+]? *WORD *[-+]?%}" at p; returns the end offset or 0. */
static size_t match_word_tag(lexer *L, size_t p, const char *word, char *lsign, char *rsign) {
    const char *s = L->s;
    size_t n = L->n, k = p + 2, wl = strlen(word);
    *lsign = *rsign = 0;
    if (k < n && (s[k] == '-' || s[k] == '+')) *lsign = s[k++];
    while (k < n && is_ws(s[k])) k++;
    if (k + wl > n || memcmp(s + k, word, wl)) return 0;
    k += wl;
    if (k < n && (isalnum((unsigned char)s[k]) || s[k] == '_')) return 0;
    while (k < n && is_ws(s[k])) k++;
    if (k < n && (s[k] == '-' || s[k] == '+')) *rsign = s[k++];
    if (k + 2 > n || s[k] != '%' || s[k + 1] != '}') return 0;
    return k + 2;
}

static void lex_string(lexer *L, jtok *t) {
    const char *s = L->s;
    char q = s[L->i];
    size_t k = L->i + 1;
    int line0 = L->line;
    jbuf b = {L->a, NULL, 0, 0, (size_t)1 << 30};
    jb_put(&b, "", 0);
    /* Python's unicode-escape rules, which jinja2 applies to string literals */
    while (k < L->n && s[k] != q) {
        if (s[k] != '\\') {
            if (s[k] == '\n') L->line++;
            jb_putc(&b, s[k++]);
            continue;
        }
        if (k + 1 >= L->n) break;
        char c = s[k + 1];
        k += 2;
        char ch = 0;
        switch (c) {
        case '\n': L->line++; continue;
        case '\\': ch = '\\'; break;
        case '\'': ch = '\''; break;
        case '"': ch = '"'; break;
        case 'a': ch = '\a'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'v': ch = '\v'; break;
        case 'x': case 'u': case 'U': {
            int nd = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int d = 0; d < nd; d++, k++) {
                if (k >= L->n || !isxdigit((unsigned char)s[k]))
                    jj_fail(L->e, L->line, "invalid \\%c escape in string literal", c);
                char h = s[k];
                cp = cp * 16 + (uint32_t)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
            }
            if (cp > 0x10ffff) jj_fail(L->e, L->line, "invalid \\U escape in string literal");
            char o[4];
            jb_put(&b, o, jj_u8enc(cp, o));
            continue;
        }
        default:
            if (c >= '0' && c <= '7') {
                uint32_t cp = (uint32_t)(c - '0');
                for (int d = 0; d < 2 && k < L->n && s[k] >= '0' && s[k] <= '7'; d++, k++) cp = cp * 8 + (uint32_t)(s[k] - '0');
                char o[4];
                jb_put(&b, o, jj_u8enc(cp, o));
                continue;
            }
            /* unknown escapes keep their backslash */
            jb_putc(&b, '\\');
            k--;
            continue;
        }
        jb_putc(&b, ch);
    }
    if (k >= L->n) jj_fail(L->e, line0, "unterminated string literal");
    L->i = k + 1;
    t->s = b.p;
    t->n = b.n;
}

static void lex_number(lexer *L, jtok *t) {
    const char *s = L->s;
    size_t k = L->i;
    char buf[128];
    size_t bn = 0;
    int isf = 0;
#define DIGITS()                                                                              \
    while (k < L->n && (isdigit((unsigned char)s[k]) || (s[k] == '_' && k + 1 < L->n && isdigit((unsigned char)s[k + 1])))) { \
        if (s[k] != '_' && bn < sizeof buf - 1) buf[bn++] = s[k];                             \
        k++;                                                                                  \
    }
    DIGITS();
    if (k + 1 < L->n && s[k] == '.' && isdigit((unsigned char)s[k + 1])) {
        isf = 1;
        buf[bn++] = s[k++];
        DIGITS();
    }
    if (k < L->n && (s[k] == 'e' || s[k] == 'E')) {
        size_t k2 = k + 1;
        if (k2 < L->n && (s[k2] == '+' || s[k2] == '-')) k2++;
        if (k2 < L->n && isdigit((unsigned char)s[k2])) {
            isf = 1;
            while (k < k2 && bn < sizeof buf - 1) buf[bn++] = s[k++];
            DIGITS();
        }
    }
#undef DIGITS
    buf[bn] = 0;
    if (bn >= sizeof buf - 1) jj_fail(L->e, L->line, "number literal too long");
    L->i = k;
    errno = 0;
    if (isf) {
        t->t = TK_FLOAT;
        t->f = strtod(buf, NULL);
    } else {
        t->t = TK_INT;
        t->i = strtoll(buf, NULL, 10);
        if (errno == ERANGE) jj_fail(L->e, L->line, "integer literal too large: %s", buf);
    }
}

static const char *const OPS[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                  "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", NULL};

/* Tokens of one {{ }} or {% %} tag, up to and including its end. */
static int lex_tag(lexer *L, int block, int tag_line) {
    const char *s = L->s;
    int depth = 0;
    for (;;) {
        while (L->i < L->n && is_ws(s[L->i])) {
            if (s[L->i] == '\n') L->line++;
            L->i++;
        }
        if (L->i >= L->n)
            jj_fail(L->e, tag_line, "unexpected end of template: %s tag never closed", block ? "'{%'" : "'{{'");
        size_t i = L->i, rest = L->n - i;
        if (depth == 0) {
            char c = block ? '%' : '}';
            if (rest >= 3 && s[i] == '-' && s[i + 1] == c && s[i + 2] == '}') {
                L->i += 3;
                push(L, block ? TK_BEND : TK_VEND, L->line);
                return after_tag(L, 1, 0);
            }
            if (block && rest >= 3 && s[i] == '+' && s[i + 1] == '%' && s[i + 2] == '}') {
                L->i += 3;
                push(L, TK_BEND, L->line);
                return after_tag(L, 0, 0);
            }
            if (rest >= 2 && s[i] == c && s[i + 1] == '}') {
                L->i += 2;
                push(L, block ? TK_BEND : TK_VEND, L->line);
                return after_tag(L, 0, block && (L->flags & JINJA_TRIM_BLOCKS));
            }
        }
        unsigned char ch = (unsigned char)s[i];
        if (isalpha(ch) || ch == '_') {
            size_t k = i;
            while (k < L->n && (isalnum((unsigned char)s[k]) || s[k] == '_')) k++;
            jtok *t = push(L, TK_NAME, L->line);
            t->s = s + i;
            t->n = k - i;
            L->i = k;
        } else if (isdigit(ch)) {
            jtok *t = push(L, TK_INT, L->line);
            lex_number(L, t);
        } else if (ch == '\'' || ch == '"') {
            jtok *t = push(L, TK_STR, L->line);
            lex_string(L, t);
        } else {
            int found = 0;
            for (int o = 0; OPS[o]; o++) {
                size_t ol = strlen(OPS[o]);
                if (rest >= ol && !memcmp(s + i, OPS[o], ol)) {
                    jtok *t = push(L, TK_OP, L->line);
                    t->s = OPS[o];
                    t->n = ol;
                    L->i += ol;
                    if (ol == 1 && strchr("([{", OPS[o][0])) depth++;
                    if (ol == 1 && strchr(")]}", OPS[o][0]) && depth > 0) depth--;
                    found = 1;
                    break;
                }
            }
            if (!found) {
                if (ch == '!') jj_fail(L->e, L->line, "unexpected char '!' (use 'not')");
                if (ch >= 0x20 && ch < 0x7f) jj_fail(L->e, L->line, "unexpected char '%c'", ch);
                jj_fail(L->e, L->line, "unexpected byte 0x%02x in tag", ch);
            }
        }
    }
}

/* jinja2 first normalizes line endings as str.splitlines() sees them, and drops one trailing newline. */
static char *normalize(jarena *a, const char *src, size_t len, unsigned flags, size_t *outn) {
    char *o = jj_alloc(a, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c == '\r') {
            if (i + 1 < len && src[i + 1] == '\n') i++;
            o[n++] = '\n';
        } else if (c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e) {
            o[n++] = '\n';
        } else if (c == 0xc2 && i + 1 < len && (unsigned char)src[i + 1] == 0x85) {
            o[n++] = '\n';
            i++;
        } else if (c == 0xe2 && i + 2 < len && (unsigned char)src[i + 1] == 0x80 &&
                   ((unsigned char)src[i + 2] == 0xa8 || (unsigned char)src[i + 2] == 0xa9)) {
            o[n++] = '\n';
            i += 2;
        } else {
            o[n++] = (char)c;
        }
    }
    if (!(flags & JINJA_KEEP_TRAILING_NEWLINE) && n && o[n - 1] == '\n') n--;
    o[n] = 0;
    *outn = n;
    return o;
}

jtok *jj_lex(jarena *a, jerr *e, const char *src, size_t len, unsigned flags, size_t *ntok) {
    lexer L = {0};
    L.a = a;
    L.e = e;
    L.flags = flags;
    L.line = 1;
    L.s = normalize(a, src, len, flags, &L.n);
    int line_starting = 1;
    const char *s = L.s;
    while (L.i < L.n) {
        size_t j = L.i;
        while (j + 1 < L.n && !(s[j] == '{' && (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#'))) j++;
        if (j + 1 >= L.n) j = L.n;
        size_t ds = L.i, de = j;
        int dline = L.line;
        char kind = j < L.n ? s[j + 1] : 0;
        char sign = (j < L.n && j + 2 < L.n && (s[j + 2] == '-' || s[j + 2] == '+')) ? s[j + 2] : 0;
        char rs1, rs2;
        size_t rawend = kind == '%' ? match_word_tag(&L, j, "raw", &rs1, &rs2) : 0;
        if (kind) de = strip_before(&L, ds, de, sign, kind != '{', line_starting);
        if (de > ds) {
            jtok *t = push(&L, TK_DATA, dline);
            t->s = s + ds;
            t->n = de - ds;
        }
        count_lines(&L, L.i, j);
        if (!kind) {
            L.i = L.n;
            break;
        }
        int tag_line = L.line;
        if (kind == '#') {
            size_t k = j + 2;
            while (k + 1 < L.n && !(s[k] == '#' && s[k + 1] == '}')) k++;
            if (k + 1 >= L.n) jj_fail(e, tag_line, "unexpected end of template: comment never closed");
            int strip = k > j + 2 && s[k - 1] == '-';
            count_lines(&L, j, k + 2);
            L.i = k + 2;
            line_starting = after_tag(&L, strip, (L.flags & JINJA_TRIM_BLOCKS) != 0);
        } else if (rawend) {
            count_lines(&L, j, rawend);
            L.i = rawend;
            /* jinja2 applies trim_blocks to endraw but not to raw itself */
            line_starting = after_tag(&L, rs2 == '-', 0);
            size_t k = L.i, end = 0;
            char es1 = 0, es2 = 0;
            for (; k + 1 < L.n; k++)
                if (s[k] == '{' && s[k + 1] == '%' && (end = match_word_tag(&L, k, "endraw", &es1, &es2))) break;
            if (!end) jj_fail(e, tag_line, "unexpected end of template: raw block never closed");
            size_t rs = L.i, re = strip_before(&L, rs, k, es1, 1, line_starting);
            if (re > rs) {
                jtok *t = push(&L, TK_DATA, L.line);
                t->s = s + rs;
                t->n = re - rs;
            }
            count_lines(&L, L.i, end);
            L.i = end;
            line_starting = after_tag(&L, es2 == '-', es2 != '+' && (L.flags & JINJA_TRIM_BLOCKS));
        } else {
            push(&L, kind == '%' ? TK_BBEGIN : TK_VBEGIN, tag_line);
            L.i = j + 2 + (sign ? 1 : 0);
            line_starting = lex_tag(&L, kind == '%', tag_line);
        }
    }
    push(&L, TK_EOF, L.line);
    *ntok = L.nt;
    return L.t;
}

/* ---------------------------------------------------------------- parser */

typedef struct parser {
    jarena *a;
    jerr *e;
    jtok *t;
    size_t nt, pos;
    int depth, loops;
    int soft; /* inside an {% if %} (jinja2's "soft" frame): an unknown filter or test fails only when evaluated */
} parser;

static jtok *peek(parser *P) { return &P->t[P->pos]; }
static jtok *peek2(parser *P) { return &P->t[P->pos + 1 < P->nt ? P->pos + 1 : P->pos]; }
static jtok *next(parser *P) {
    jtok *t = &P->t[P->pos];
    if (P->pos + 1 < P->nt) P->pos++;
    return t;
}
static int tok_is(jtok *t, int type, const char *s) {
    return t->t == type && (!s || (t->n == strlen(s) && !memcmp(t->s, s, t->n)));
}
static int is_op(parser *P, const char *s) { return tok_is(peek(P), TK_OP, s); }
static int is_name(parser *P, const char *s) { return tok_is(peek(P), TK_NAME, s); }

static const char *tok_desc(jtok *t, char *buf, size_t n) {
    switch (t->t) {
    case TK_EOF: return "end of template";
    case TK_VEND: return "'}}'";
    case TK_BEND: return "'%}'";
    case TK_STR: return "string";
    case TK_INT: case TK_FLOAT: return "number";
    case TK_NAME: case TK_OP: snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
    default: return "text";
    }
}

static _Noreturn void unexpected(parser *P, const char *want) {
    char b[64];
    jtok *t = peek(P);
    jj_fail(P->e, t->line, "unexpected %s, expected %s", tok_desc(t, b, sizeof b), want);
}

static void expect_op(parser *P, const char *s) {
    if (!is_op(P, s)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", s);
        unexpected(P, w);
    }
    next(P);
}

static void expect_end(parser *P) {
    if (peek(P)->t != TK_BEND) unexpected(P, "'%}'");
    next(P);
}

static jnode *mk(parser *P, int k, int line) {
    jnode *n = jj_alloc(P->a, sizeof *n);
    memset(n, 0, sizeof *n);
    n->k = k;
    n->line = line;
    return n;
}

static void nl_push(jarena *a, jnlist *l, jnode *n) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jnode **v = jj_alloc(a, cap * sizeof *v);
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = n;
}

static void enter(parser *P) {
    if (++P->depth > JINJA_MAX_NEST) jj_fail(P->e, peek(P)->line, "template nesting too deep");
}

static jnode *parse_expr(parser *P);
static jnode *parse_or(parser *P);
static jnode *parse_unary(parser *P, int with_filter);

static jnode *parse_tuple(parser *P, int condexpr) {
    int line = peek(P)->line;
    jnode *first = condexpr ? parse_expr(P) : parse_or(P);
    if (!is_op(P, ",")) return first;
    jnode *t = mk(P, N_TUPLE, line);
    nl_push(P->a, &t->args, first);
    while (is_op(P, ",")) {
        next(P);
        jtok *k = peek(P);
        if (k->t == TK_VEND || k->t == TK_BEND || tok_is(k, TK_OP, ")") || tok_is(k, TK_NAME, "if")) break;
        nl_push(P->a, &t->args, condexpr ? parse_expr(P) : parse_or(P));
    }
    return t;
}

/* Call arguments after '(' : positional expressions, then name=value keywords. */
static void parse_args(parser *P, jnlist *args) {
    expect_op(P, "(");
    while (!is_op(P, ")")) {
        if (args->n) {
            expect_op(P, ",");
            if (is_op(P, ")")) break;
        }
        if (peek(P)->t == TK_NAME && tok_is(peek2(P), TK_OP, "=")) {
            jtok *nm = next(P);
            next(P);
            jnode *kw = mk(P, N_KWARG, nm->line);
            kw->s.p = nm->s;
            kw->s.n = nm->n;
            kw->a = parse_expr(P);
            nl_push(P->a, args, kw);
        } else {
            if (is_op(P, "*") || is_op(P, "**")) jj_fail(P->e, peek(P)->line, "*args and **kwargs in calls are not supported");
            for (size_t i = 0; i < args->n; i++)
                if (args->v[i]->k == N_KWARG) jj_fail(P->e, peek(P)->line, "positional argument follows keyword argument");
            nl_push(P->a, args, parse_expr(P));
        }
    }
    next(P);
}

static jnode *parse_primary(parser *P) {
    jtok *t = peek(P);
    jnode *n;
    if (t->t == TK_NAME) {
        next(P);
        n = mk(P, N_LIT, t->line);
        if (tok_is(t, TK_NAME, "true") || tok_is(t, TK_NAME, "True")) {
            n->lit.t = JV_BOOL;
            n->lit.u.b = 1;
        } else if (tok_is(t, TK_NAME, "false") || tok_is(t, TK_NAME, "False")) {
            n->lit.t = JV_BOOL;
        } else if (tok_is(t, TK_NAME, "none") || tok_is(t, TK_NAME, "None")) {
            n->lit.t = JV_NONE;
        } else {
            n->k = N_NAME;
            n->s.p = t->s;
            n->s.n = t->n;
        }
        return n;
    }
    if (t->t == TK_STR) {
        /* adjacent string literals concatenate, as in Python */
        jbuf b = {P->a, NULL, 0, 0, (size_t)1 << 30};
        jb_put(&b, "", 0);
        while (peek(P)->t == TK_STR) {
            jtok *s = next(P);
            jb_put(&b, s->s, s->n);
        }
        n = mk(P, N_LIT, t->line);
        n->lit.t = JV_STR;
        n->lit.u.s.p = b.p;
        n->lit.u.s.n = b.n;
        return n;
    }
    if (t->t == TK_INT || t->t == TK_FLOAT) {
        next(P);
        n = mk(P, N_LIT, t->line);
        if (t->t == TK_INT) {
            n->lit.t = JV_INT;
            n->lit.u.i = t->i;
        } else {
            n->lit.t = JV_FLOAT;
            n->lit.u.f = t->f;
        }
        return n;
    }
    if (tok_is(t, TK_OP, "(")) {
        next(P);
        if (is_op(P, ")")) {
            next(P);
            return mk(P, N_TUPLE, t->line);
        }
        n = parse_tuple(P, 1);
        if (n->k == N_TUPLE && n->args.n == 1 && !is_op(P, ")")) unexpected(P, "')'");
        expect_op(P, ")");
        return n;
    }
    if (tok_is(t, TK_OP, "[")) {
        next(P);
        n = mk(P, N_LIST, t->line);
        while (!is_op(P, "]")) {
            if (n->args.n) {
                expect_op(P, ",");
                if (is_op(P, "]")) break;
            }
            nl_push(P->a, &n->args, parse_expr(P));
        }
        next(P);
        return n;
    }
    if (tok_is(t, TK_OP, "{")) {
        next(P);
        n = mk(P, N_DICT, t->line);
        while (!is_op(P, "}")) {
            if (n->args.n) {
                expect_op(P, ",");
                if (is_op(P, "}")) break;
            }
            nl_push(P->a, &n->args, parse_expr(P));
            expect_op(P, ":");
            nl_push(P->a, &n->args, parse_expr(P));
        }
        next(P);
        return n;
    }
    unexpected(P, "an expression");
}

static jnode *parse_postfix(parser *P, jnode *n) {
    for (;;) {
        jtok *t = peek(P);
        if (tok_is(t, TK_OP, ".")) {
            next(P);
            jtok *a = next(P);
            jnode *x;
            if (a->t == TK_NAME) {
                x = mk(P, N_ATTR, a->line);
                x->s.p = a->s;
                x->s.n = a->n;
            } else if (a->t == TK_INT) {
                /* foo.0 is foo[0] */
                x = mk(P, N_ITEM, a->line);
                x->b = mk(P, N_LIT, a->line);
                x->b->lit.t = JV_INT;
                x->b->lit.u.i = a->i;
            } else {
                P->pos--;
                unexpected(P, "an attribute name");
            }
            x->a = n;
            n = x;
        } else if (tok_is(t, TK_OP, "[")) {
            next(P);
            jnode *idx[3] = {NULL, NULL, NULL};
            int colons = 0;
            for (;;) {
                if (is_op(P, ":")) {
                    if (++colons > 2) unexpected(P, "']'");
                    next(P);
                    continue;
                }
                if (is_op(P, "]")) break;
                if (idx[colons]) unexpected(P, "']'");
                idx[colons] = parse_expr(P);
            }
            next(P);
            jnode *x;
            if (colons == 0) {
                if (!idx[0]) unexpected(P, "a subscript");
                x = mk(P, N_ITEM, t->line);
                x->b = idx[0];
            } else {
                x = mk(P, N_SLICE, t->line);
                x->b = idx[0];
                x->c = idx[1];
                if (idx[2]) nl_push(P->a, &x->args, idx[2]);
            }
            x->a = n;
            n = x;
        } else if (tok_is(t, TK_OP, "(")) {
            jnode *x = mk(P, N_CALL, t->line);
            x->a = n;
            parse_args(P, &x->args);
            n = x;
        } else {
            return n;
        }
    }
}

/* One filter after '|': name and optional arguments, applied to n. */
static jnode *parse_one_filter(parser *P, jnode *n) {
    jtok *nm = next(P);
    if (nm->t != TK_NAME) {
        P->pos--;
        unexpected(P, "a filter name");
    }
    int id = jj_filter_id(nm->s, nm->n);
    if (id < 0 && !P->soft) jj_fail(P->e, nm->line, "unknown filter '%.*s'", (int)(nm->n > 60 ? 60 : nm->n), nm->s);
    jnode *x = mk(P, N_FILTER, nm->line);
    x->op = id;
    x->a = n;
    x->s.p = nm->s;
    x->s.n = nm->n;
    if (is_op(P, "(")) parse_args(P, &x->args);
    n = x;
    return x;
}

static jnode *parse_filters(parser *P, jnode *n) {
    for (;;) {
        jtok *t = peek(P);
        if (tok_is(t, TK_OP, "|")) {
            next(P);
            n = parse_one_filter(P, n);
        } else if (tok_is(t, TK_NAME, "is")) {
            next(P);
            jnode *x = mk(P, N_TEST, t->line);
            if (is_name(P, "not")) {
                next(P);
                x->neg = 1;
            }
            jtok *nm = next(P);
            if (nm->t != TK_NAME) {
                P->pos--;
                unexpected(P, "a test name");
            }
            /* "is none"/"is true" lex as names too; ==, < etc. are test aliases */
            int id = jj_test_id(nm->s, nm->n);
            if (id < 0 && !P->soft)
                jj_fail(P->e, nm->line, "unknown test '%.*s'", (int)(nm->n > 60 ? 60 : nm->n), nm->s);
            x->op = id;
            x->a = n;
            x->s.p = nm->s;
            x->s.n = nm->n;
            jtok *k = peek(P);
            if (tok_is(k, TK_OP, "(")) {
                parse_args(P, &x->args);
            } else if ((k->t == TK_NAME || k->t == TK_STR || k->t == TK_INT || k->t == TK_FLOAT || tok_is(k, TK_OP, "[") ||
                        tok_is(k, TK_OP, "{")) &&
                       !tok_is(k, TK_NAME, "else") && !tok_is(k, TK_NAME, "or") && !tok_is(k, TK_NAME, "and") &&
                       !tok_is(k, TK_NAME, "if") && !tok_is(k, TK_NAME, "is") && !tok_is(k, TK_NAME, "in") &&
                       !tok_is(k, TK_NAME, "not")) {
                /* one bare argument: "x is divisibleby 3", "x is sameas false" */
                jnode *arg = parse_postfix(P, parse_primary(P));
                nl_push(P->a, &x->args, arg);
            }
            n = x;
        } else if (tok_is(t, TK_OP, "(")) {
            jnode *x = mk(P, N_CALL, t->line);
            x->a = n;
            parse_args(P, &x->args);
            n = x;
        } else {
            return n;
        }
    }
}

static jnode *parse_unary(parser *P, int with_filter) {
    enter(P);
    jtok *t = peek(P);
    jnode *n;
    if (tok_is(t, TK_OP, "-") || tok_is(t, TK_OP, "+")) {
        next(P);
        n = mk(P, t->s[0] == '-' ? N_NEG : N_POS, t->line);
        n->a = parse_unary(P, 0);
    } else {
        n = parse_postfix(P, parse_primary(P));
    }
    if (with_filter) n = parse_filters(P, n);
    P->depth--;
    return n;
}

static jnode *bin(parser *P, int op, jnode *a, jnode *b, int line) {
    jnode *n = mk(P, N_BIN, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *P) {
    jnode *n = parse_unary(P, 1);
    while (is_op(P, "**")) {
        int line = next(P)->line;
        n = bin(P, OP_POW, n, parse_unary(P, 1), line);
    }
    return n;
}

static jnode *parse_mul(parser *P) {
    jnode *n = parse_pow(P);
    for (;;) {
        int op = is_op(P, "*") ? OP_MUL : is_op(P, "/") ? OP_DIV : is_op(P, "//") ? OP_FLOORDIV : is_op(P, "%") ? OP_MOD : -1;
        if (op < 0) return n;
        int line = next(P)->line;
        n = bin(P, op, n, parse_pow(P), line);
    }
}

static jnode *parse_concat(parser *P) {
    jnode *n = parse_mul(P);
    while (is_op(P, "~")) {
        int line = next(P)->line;
        n = bin(P, OP_CONCAT, n, parse_mul(P), line);
    }
    return n;
}

static jnode *parse_add(parser *P) {
    jnode *n = parse_concat(P);
    for (;;) {
        int op = is_op(P, "+") ? OP_ADD : is_op(P, "-") ? OP_SUB : -1;
        if (op < 0) return n;
        int line = next(P)->line;
        n = bin(P, op, n, parse_concat(P), line);
    }
}

static jnode *parse_compare(parser *P) {
    jnode *n = parse_add(P);
    for (;;) {
        jtok *t = peek(P);
        int op = -1;
        if (t->t == TK_OP) {
            op = tok_is(t, TK_OP, "==") ? OP_EQ : tok_is(t, TK_OP, "!=") ? OP_NE : tok_is(t, TK_OP, "<") ? OP_LT
               : tok_is(t, TK_OP, "<=") ? OP_LE : tok_is(t, TK_OP, ">") ? OP_GT : tok_is(t, TK_OP, ">=") ? OP_GE : -1;
            if (op >= 0) next(P);
        } else if (tok_is(t, TK_NAME, "in")) {
            op = OP_IN;
            next(P);
        } else if (tok_is(t, TK_NAME, "not") && tok_is(peek2(P), TK_NAME, "in")) {
            op = OP_NOTIN;
            next(P);
            next(P);
        }
        if (op < 0) return n;
        /* chained comparisons (a < b < c) are rare in templates; they evaluate left to right here */
        n = bin(P, op, n, parse_add(P), t->line);
    }
}

static jnode *parse_not(parser *P) {
    if (is_name(P, "not")) {
        enter(P);
        int line = next(P)->line;
        jnode *n = mk(P, N_NOT, line);
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P) {
    jnode *n = parse_not(P);
    while (is_name(P, "and")) {
        jnode *x = mk(P, N_AND, next(P)->line);
        x->a = n;
        x->b = parse_not(P);
        n = x;
    }
    return n;
}

static jnode *parse_or(parser *P) {
    jnode *n = parse_and(P);
    while (is_name(P, "or")) {
        jnode *x = mk(P, N_OR, next(P)->line);
        x->a = n;
        x->b = parse_and(P);
        n = x;
    }
    return n;
}

static jnode *parse_expr(parser *P) {
    enter(P);
    jnode *n = parse_or(P);
    while (is_name(P, "if")) {
        jnode *x = mk(P, N_COND, next(P)->line);
        x->a = parse_or(P);
        x->b = n;
        if (is_name(P, "else")) {
            next(P);
            x->c = parse_expr(P);
        }
        n = x;
    }
    P->depth--;
    return n;
}

/* ---- statements */

static jtok *parse_body(parser *P, jnlist *out, const char *const *enders, int open_line, const char *open_tag);

static int name_in(jtok *t, const char *const *list) {
    for (; list && *list; list++)
        if (tok_is(t, TK_NAME, *list)) return 1;
    return 0;
}

/* Assignment targets: name, ns.attr, or a comma list of names. */
static void parse_targets(parser *P, jnlist *out, int allow_attr) {
    for (;;) {
        int paren = 0;
        if (is_op(P, "(")) {
            next(P);
            paren = 1;
        }
        jtok *t = next(P);
        if (t->t != TK_NAME) {
            P->pos--;
            unexpected(P, "a variable name");
        }
        jnode *n = mk(P, N_NAME, t->line);
        n->s.p = t->s;
        n->s.n = t->n;
        if (allow_attr && is_op(P, ".")) {
            next(P);
            jtok *a = next(P);
            if (a->t != TK_NAME) {
                P->pos--;
                unexpected(P, "an attribute name");
            }
            jnode *x = mk(P, N_ATTR, a->line);
            x->a = n;
            x->s.p = a->s;
            x->s.n = a->n;
            n = x;
        }
        nl_push(P->a, out, n);
        if (paren) {
            while (is_op(P, ",")) {
                next(P);
                jtok *t2 = next(P);
                if (t2->t != TK_NAME) {
                    P->pos--;
                    unexpected(P, "a variable name");
                }
                jnode *m = mk(P, N_NAME, t2->line);
                m->s.p = t2->s;
                m->s.n = t2->n;
                nl_push(P->a, out, m);
            }
            expect_op(P, ")");
        }
        if (!is_op(P, ",")) return;
        next(P);
    }
}

static jnode *parse_statement(parser *P) {
    jtok *kw = next(P);
    int line = kw->line;
    char b[64];
    if (kw->t != TK_NAME) {
        P->pos--;
        unexpected(P, "a tag name");
    }
    enter(P);
    jnode *n;
    const int soft = P->soft; /* restored below: only an if's test and bodies are soft */
    if (tok_is(kw, TK_NAME, "if")) {
        P->soft = 1;
        n = mk(P, N_IF, line);
        n->a = parse_tuple(P, 1);
        expect_end(P);
        static const char *const E1[] = {"elif", "else", "endif", NULL};
        static const char *const E2[] = {"endif", NULL};
        jnode *cur = n;
        for (;;) {
            jtok *end = parse_body(P, &cur->body, E1, line, "if");
            if (tok_is(end, TK_NAME, "elif")) {
                jnode *x = mk(P, N_IF, end->line);
                x->a = parse_tuple(P, 1);
                expect_end(P);
                nl_push(P->a, &cur->els, x);
                cur = x;
                continue;
            }
            if (tok_is(end, TK_NAME, "else")) {
                expect_end(P);
                parse_body(P, &cur->els, E2, line, "if");
            }
            break;
        }
        expect_end(P);
    } else if (tok_is(kw, TK_NAME, "for")) {
        n = mk(P, N_FOR, line);
        parse_targets(P, &n->args, 0);
        if (!is_name(P, "in")) unexpected(P, "'in'");
        next(P);
        n->a = parse_tuple(P, 0);
        P->soft = 0; /* the loop's own frame (jinja2's frame.inner()) */
        if (is_name(P, "if")) {
            next(P);
            n->b = parse_expr(P);
        }
        if (is_name(P, "recursive")) jj_fail(P->e, line, "recursive loops are not supported");
        expect_end(P);
        static const char *const E1[] = {"else", "endfor", NULL};
        static const char *const E2[] = {"endfor", NULL};
        P->loops++;
        jtok *end = parse_body(P, &n->body, E1, line, "for");
        P->loops--;
        if (tok_is(end, TK_NAME, "else")) {
            expect_end(P);
            parse_body(P, &n->els, E2, line, "for");
        }
        expect_end(P);
    } else if (tok_is(kw, TK_NAME, "set")) {
        n = mk(P, N_SET, line);
        parse_targets(P, &n->args, 1);
        if (is_op(P, "=")) {
            next(P);
            n->a = parse_tuple(P, 1);
            expect_end(P);
        } else {
            n->k = N_SETBLOCK;
            P->soft = 0;
            if (n->args.n != 1 || n->args.v[0]->k != N_NAME) unexpected(P, "'='");
            if (is_op(P, "|")) n->a = parse_filters(P, mk(P, N_BODY, line));
            expect_end(P);
            static const char *const E[] = {"endset", NULL};
            parse_body(P, &n->body, E, line, "set");
            expect_end(P);
        }
    } else if (tok_is(kw, TK_NAME, "macro")) {
        P->soft = 0;
        n = mk(P, N_MACRO, line);
        jtok *nm = next(P);
        if (nm->t != TK_NAME) {
            P->pos--;
            unexpected(P, "a macro name");
        }
        n->s.p = nm->s;
        n->s.n = nm->n;
        expect_op(P, "(");
        while (!is_op(P, ")")) {
            if (n->args.n) expect_op(P, ",");
            jtok *pn = next(P);
            if (pn->t != TK_NAME) {
                P->pos--;
                unexpected(P, "a parameter name");
            }
            jnode *pm = mk(P, N_KWARG, pn->line);
            pm->s.p = pn->s;
            pm->s.n = pn->n;
            if (is_op(P, "=")) {
                next(P);
                pm->a = parse_expr(P);
            }
            nl_push(P->a, &n->args, pm);
        }
        next(P);
        expect_end(P);
        static const char *const E[] = {"endmacro", NULL};
        int saved = P->loops;
        P->loops = 0;
        parse_body(P, &n->body, E, line, "macro");
        P->loops = saved;
        if (peek(P)->t == TK_NAME) next(P); /* {% endmacro name %} */
        expect_end(P);
    } else if (tok_is(kw, TK_NAME, "break") || tok_is(kw, TK_NAME, "continue")) {
        if (!P->loops) jj_fail(P->e, line, "'%.*s' outside of a loop", (int)kw->n, kw->s);
        n = mk(P, kw->s[0] == 'b' ? N_BREAK : N_CONTINUE, line);
        expect_end(P);
    } else if (tok_is(kw, TK_NAME, "generation")) {
        /* Hugging Face's AssistantTracker tag: marks assistant text, renders its body unchanged */
        n = mk(P, N_BODY, line);
        expect_end(P);
        static const char *const E[] = {"endgeneration", NULL};
        parse_body(P, &n->body, E, line, "generation");
        expect_end(P);
    } else if (tok_is(kw, TK_NAME, "filter")) {
        P->soft = 0;
        n = mk(P, N_FILTERBLOCK, line);
        /* the first filter is written without a leading '|' */
        n->a = parse_filters(P, parse_one_filter(P, mk(P, N_BODY, line)));
        expect_end(P);
        static const char *const E[] = {"endfilter", NULL};
        parse_body(P, &n->body, E, line, "filter");
        expect_end(P);
    } else {
        static const char *const unsupported[] = {"include", "import", "from", "extends", "block", "call", "with",
                                                  "do", "autoescape", "trans", NULL};
        if (name_in(kw, unsupported))
            jj_fail(P->e, line, "unsupported tag '%.*s'", (int)kw->n, kw->s);
        jj_fail(P->e, line, "unknown tag %s", tok_desc(kw, b, sizeof b));
    }
    P->soft = soft;
    P->depth--;
    return n;
}

/* Parses statements until one of enders (consumed with its tag-begin; the rest of that tag is
 * left to the caller) or, with no enders, to the end of the template. */
static jtok *parse_body(parser *P, jnlist *out, const char *const *enders, int open_line, const char *open_tag) {
    for (;;) {
        jtok *t = peek(P);
        if (t->t == TK_EOF) {
            if (enders)
                jj_fail(P->e, t->line, "unexpected end of template: '%s' block opened on line %d is never closed with 'end%s'",
                        open_tag, open_line, open_tag);
            return t;
        }
        if (t->t == TK_DATA) {
            next(P);
            jnode *n = mk(P, N_TEXT, t->line);
            n->s.p = t->s;
            n->s.n = t->n;
            nl_push(P->a, out, n);
        } else if (t->t == TK_VBEGIN) {
            next(P);
            jnode *n = mk(P, N_OUT, t->line);
            n->a = parse_tuple(P, 1);
            if (peek(P)->t != TK_VEND) unexpected(P, "'}}'");
            next(P);
            nl_push(P->a, out, n);
        } else if (t->t == TK_BBEGIN) {
            next(P);
            jtok *k = peek(P);
            if (enders && name_in(k, enders)) {
                next(P);
                return k;
            }
            static const char *const closers[] = {"endif", "endfor", "endset", "endmacro", "elif", "else",
                                                  "endgeneration", "endfilter", "endraw", NULL};
            if (name_in(k, closers)) {
                char b[64];
                if (enders)
                    jj_fail(P->e, k->line, "unexpected %s inside '%s' block opened on line %d", tok_desc(k, b, sizeof b),
                            open_tag, open_line);
                jj_fail(P->e, k->line, "unexpected %s with no open block", tok_desc(k, b, sizeof b));
            }
            nl_push(P->a, out, parse_statement(P));
        } else {
            unexpected(P, "text or a tag");
        }
    }
}

static void parse_all(jinja_template *t, const char *src, size_t len, unsigned flags) {
    parser P = {0};
    P.a = &t->arena;
    P.e = &t->perr;
    P.t = jj_lex(&t->arena, &t->perr, src, len, flags, &P.nt);
    parse_body(&P, &t->body, NULL, 0, NULL);
}

/* setjmp lives here, where nothing it must preserve is modified after it */
static jinja_template *parse_guarded(jinja_template *t, const char *src, size_t len, unsigned flags) {
    if (setjmp(t->perr.jb)) {
        jj_arena_free(&t->arena);
        free(t);
        return NULL;
    }
    parse_all(t, src, len, flags);
    t->perr.buf = NULL;
    t->perr.len = 0;
    return t;
}

jinja_template *jinja_parse_ex(const char *src, size_t len, unsigned flags, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    jinja_template *t = calloc(1, sizeof *t);
    if (!t) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->flags = flags;
    t->perr.buf = err;
    t->perr.len = errlen;
    t->arena.e = &t->perr;
    t->arena.limit = (size_t)1 << 30;
    return parse_guarded(t, src ? src : "", src ? len : 0, flags);
}

jinja_template *jinja_parse(const char *src, size_t len, char *err, size_t errlen) {
    return jinja_parse_ex(src, len, 0, err, errlen);
}

void jinja_free(jinja_template *t) {
    if (!t) return;
    jj_arena_free(&t->arena);
    free(t);
}
