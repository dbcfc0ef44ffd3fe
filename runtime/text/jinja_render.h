/* jinja_render.h — the renderer's state and what its parts share: evaluation (jinja.c), filters and
 * tests (jinja_filters.c), methods and string helpers (jinja_methods.c). */
#ifndef INGOT_JINJA_RENDER_H
#define INGOT_JINJA_RENDER_H

#include <string.h>

#include "jinja_value.h"

typedef struct frame frame; /* a scope of variables (jinja.c) */

typedef struct R {
    jerr *e;
    jarena *a;
    unsigned flags;
    size_t max_out;
    long steps, max_steps;
    int depth;
    jdict *ctx;
    frame *root;
} R;

#define MAXARGS 16
typedef struct jargs {
    jv pos[MAXARGS];
    js kn[MAXARGS];
    jv kv[MAXARGS];
    size_t npos, nkw;
} jargs;

struct jloop {
    int64_t index0, length;
    jlist *items;
};

#define UNDEF ((jv){.t = JV_UNDEF})
#define NONE ((jv){.t = JV_NONE})

static inline js js_cstr(const char *s) { return (js){s, strlen(s)}; }
static inline int js_eq(js a, const char *b) { return a.n == strlen(b) && !memcmp(a.p, b, a.n); }
static inline int64_t jv_ival(jv v) { return v.t == JV_BOOL ? v.u.b : v.u.i; }

static inline jbuf jj_newbuf(R *r) {
    jbuf b = {r->a, NULL, 0, 0, r->max_out};
    jb_put(&b, "", 0);
    return b;
}

static inline jv jj_mkstr(jbuf *b) { return jv_str((js){b->p, b->n}); }
static inline js jj_str_of(R *r, jv v) { return jv_to_str(r->a, r->max_out, v); }

/* ---- evaluation (jinja.c) */

/* Argument i, else the keyword argument name, else dflt. */
jv jj_arg(jargs *A, size_t i, const char *name, jv dflt);
int jj_has_arg(jargs *A, size_t i, const char *name);
int64_t jj_want_int(R *r, jv v, int line, const char *what);
js jj_want_str(R *r, jv v, int line, const char *what);
jlist *jj_iter_items(R *r, jv v, int line);
jlist *jj_dict_items(R *r, jdict *d);
jv jj_getattr(R *r, jv o, js name, int line);
jv jj_getitem(R *r, jv o, jv k, int line);
jv jj_arith(R *r, int op, jv a, jv b, int line);
int jj_contains(R *r, jv hay, jv needle, int line);
int jj_compare(R *r, int op, jv a, jv b, int line);

/* ---- filters and tests (jinja_filters.c) */

jv jj_apply_filter(R *r, int id, jv v, jargs *A, int line);
int jj_apply_test(R *r, int id, jv v, jargs *A, int line);
/* markupsafe.escape: & < > " ' as entities; the result is Markup. */
jv jj_html_escape(R *r, js s);

/* ---- methods (jinja_methods.c) */

/* str methods, then dict methods (from M_ITEMS), then loop.cycle; their names are METHODS in
 * jinja_methods.c */
enum {
    M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_STARTSWITH, M_ENDSWITH, M_UPPER, M_LOWER, M_TITLE,
    M_CAPITALIZE, M_REPLACE, M_FIND, M_RFIND, M_COUNT, M_JOIN, M_ISDIGIT, M_ISALPHA, M_ISALNUM, M_ISSPACE,
    M_ISUPPER, M_ISLOWER, M_SPLITLINES, M_FORMAT, M_INDEX,
    M_ITEMS, M_KEYS, M_VALUES, M_GET, M_CYCLE, M_NMETHODS
};

/* The method called name among ids lo..hi-1 (a type's own methods), -1 if none. */
int jj_method_id(js name, int lo, int hi);
jv jj_call_method(R *r, jv self, int mid, jargs *A, int line);
/* Removes leading/trailing characters: Python whitespace, or any code point of chars. */
js jj_strip(js s, const js *chars, int left, int right);
js jj_replace(R *r, js s, js old, js new_, int64_t count);
/* str.splitlines() (without keepends) */
jlist *jj_splitlines(R *r, js s);

#endif
