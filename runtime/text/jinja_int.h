/* jinja_int.h — internals shared by the jinja_*.c files: errors, arenas, values, tokens and the syntax tree. */
#ifndef INGOT_JINJA_INT_H
#define INGOT_JINJA_INT_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

#define JINJA_MAX_NEST 200     /* syntax nesting accepted by the parser */
#define JINJA_MAX_DEPTH 400    /* evaluation recursion (expressions, statements, macro calls) */
#define JINJA_MAX_VDEPTH 1000  /* nesting of values walked by repr/tojson/== */
#define JINJA_MAX_RANGE 100000 /* jinja2's sandbox refuses larger ranges too */

/* Errors unwind with longjmp: every allocation lives in an arena that the caller frees, so
 * nothing leaks on the way out. */
typedef struct jerr {
    jmp_buf jb;
    char *buf;
    size_t len;
    int raised; /* raise_exception: message without the "template:N:" prefix */
} jerr;

_Noreturn void jj_fail(jerr *e, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

typedef struct jchunk {
    struct jchunk *next;
    size_t used, cap, pad; /* pad keeps the data that follows 16-byte aligned */
} jchunk;

typedef struct jarena {
    jchunk *head;
    size_t total, limit;
    jerr *e;
} jarena;

void *jj_alloc(jarena *a, size_t n);
void jj_arena_free(jarena *a);

typedef struct js {
    const char *p;
    size_t n;
} js;

enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_FUNC, JV_LOOP };

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;
typedef struct jloop jloop;

typedef struct jv {
    int t;
    int markup; /* JV_STR: a markupsafe.Markup (from safe/escape): adding a plain str to it escapes that str */
    union {
        int b;
        int64_t i;
        double f;
        js s;
        jlist *l;
        jdict *d;
        jfunc *fn;
        jloop *lp;
    } u;
} jv;

struct jlist {
    size_t n, cap;
    jv *v;
    int tuple;
};

struct jdict {
    size_t n, cap;
    jv *k, *v;
    int ns; /* a namespace(): attributes may be assigned with {% set ns.x = ... %} */
};

/* Growable byte buffer in an arena; max bounds its length. */
typedef struct jbuf {
    jarena *a;
    char *p;
    size_t n, cap, max;
} jbuf;

void jb_put(jbuf *b, const char *s, size_t n);
void jb_putc(jbuf *b, char c);
void jb_puts(jbuf *b, const char *s);

/* UTF-8 helpers: invalid bytes decode as themselves (one code point per byte), never read past n. */
uint32_t jj_u8dec(const char *s, size_t n, size_t *len);
size_t jj_u8enc(uint32_t cp, char *out);
size_t jj_u8count(const char *s, size_t n);

/* ---- tokens and syntax tree ---- */
enum { TK_EOF, TK_DATA, TK_VBEGIN, TK_VEND, TK_BBEGIN, TK_BEND, TK_NAME, TK_STR, TK_INT, TK_FLOAT, TK_OP };

typedef struct jtok {
    int t, line;
    const char *s; /* name, operator or (decoded) string/data text */
    size_t n;
    int64_t i;
    double f;
} jtok;

enum {
    N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_BREAK, N_CONTINUE, N_BODY,
    N_LIT, N_NAME, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_BIN, N_NOT, N_NEG, N_POS,
    N_AND, N_OR, N_COND, N_LIST, N_TUPLE, N_DICT, N_KWARG, N_FILTERBLOCK,
};

/* binary operators */
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
       OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };

typedef struct jnode jnode;
typedef struct jnlist {
    jnode **v;
    size_t n, cap;
} jnlist;

struct jnode {
    int k, line, op, neg;
    js s;   /* name / attribute / text */
    jv lit; /* N_LIT */
    jnode *a, *b, *c;
    jnlist args; /* call/filter arguments (N_KWARG for keywords), list items, targets, params */
    jnlist body, els;
};

struct jinja_template {
    jarena arena;
    jerr perr;
    jnlist body;
    unsigned flags;
};

/* lexer (jinja_lex.c) + parser (jinja_parse.c) */
jtok *jj_lex(jarena *a, jerr *e, const char *src, size_t len, unsigned flags, size_t *ntok);

/* filters and tests are resolved by name at parse time (unknown ones are syntax errors, as in jinja2) */
int jj_filter_id(const char *s, size_t n);
int jj_test_id(const char *s, size_t n);

#endif
