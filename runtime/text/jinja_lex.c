/* jinja_lex.c — the Jinja2-subset lexer: template text to tokens, with jinja2's line-ending
 * normalization and whitespace control (trim_blocks, lstrip_blocks, the -/+ tag markers). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

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
        if (bn < sizeof buf - 1) buf[bn++] = s[k]; /* a full buffer is refused below, as too long */
        k++;
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
