/* jinja_arena.c — what every jinja_*.c file stands on: errors that unwind with longjmp, the arenas
 * that make that leak-free, growable buffers, and UTF-8 helpers. */
#include <stdarg.h>
#include <stdint.h>
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
    if (n > SIZE_MAX / 2) jj_fail(a->e, 0, "template needs too much memory");
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
