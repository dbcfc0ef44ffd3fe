/* jinja.c — the jinja renderer: evaluates the parsed template against a JSON context with jinja2's semantics. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja_value.h"

/* ---------------------------------------------------------------- filters, tests, methods, globals */

enum {
    F_ABS, F_ATTR, F_CAPITALIZE, F_COUNT, F_D, F_DEFAULT, F_DICTSORT, F_E, F_ESCAPE, F_FIRST, F_FLOAT, F_FORCEESCAPE,
    F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN, F_REJECT,
    F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SORT, F_STRING, F_SUM, F_TITLE,
    F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER, F_WORDCOUNT, F_CENTER, F_TRUNCATE, F_BATCH, F_NFILTERS
};
static const char *const FILTERS[] = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "forceescape",
    "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject",
    "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title",
    "tojson", "trim", "unique", "upper", "wordcount", "center", "truncate", "batch",
};

enum {
    T_DEFINED, T_UNDEFINED, T_NONE, T_BOOLEAN, T_FALSE, T_TRUE, T_INTEGER, T_FLOAT, T_NUMBER, T_STRING, T_MAPPING,
    T_ITERABLE, T_SEQUENCE, T_CALLABLE, T_SAMEAS, T_ESCAPED, T_IN, T_LOWER, T_UPPER, T_EVEN, T_ODD,
    T_DIVISIBLEBY, T_EQ, T_EQUALTO, T_NE, T_LT, T_LESSTHAN, T_LE, T_GT, T_GREATERTHAN, T_GE, T_NTESTS
};
static const char *const TESTS[] = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number", "string", "mapping",
    "iterable", "sequence", "callable", "sameas", "escaped", "in", "lower", "upper", "even", "odd",
    "divisibleby", "eq", "equalto", "ne", "lt", "lessthan", "le", "gt", "greaterthan", "ge",
};

enum {
    M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_STARTSWITH, M_ENDSWITH, M_UPPER, M_LOWER, M_TITLE,
    M_CAPITALIZE, M_REPLACE, M_FIND, M_RFIND, M_COUNT, M_JOIN, M_ISDIGIT, M_ISALPHA, M_ISALNUM, M_ISSPACE,
    M_ISUPPER, M_ISLOWER, M_SPLITLINES, M_FORMAT, M_INDEX,
    M_ITEMS, M_KEYS, M_VALUES, M_GET, M_CYCLE, M_NMETHODS
};
static const char *const METHODS[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower", "title",
    "capitalize", "replace", "find", "rfind", "count", "join", "isdigit", "isalpha", "isalnum", "isspace",
    "isupper", "islower", "splitlines", "format", "index",
    "items", "keys", "values", "get", "cycle",
};

enum { FN_RANGE, FN_NAMESPACE, FN_RAISE, FN_STRFTIME, FN_DICT, FN_MACRO, FN_METHOD };

struct jfunc {
    int kind, mid;
    jv self;
    const jnode *macro;
};

struct jloop {
    int64_t index0, length;
    jlist *items;
};

static int lookup_name(const char *const *tab, int n, const char *s, size_t len) {
    for (int i = 0; i < n; i++)
        if (strlen(tab[i]) == len && !memcmp(tab[i], s, len)) return i;
    return -1;
}

int jj_filter_id(const char *s, size_t n) { return lookup_name(FILTERS, F_NFILTERS, s, n); }
int jj_test_id(const char *s, size_t n) { return lookup_name(TESTS, T_NTESTS, s, n); }

/* ---------------------------------------------------------------- render state */

typedef struct var {
    js name;
    jv v;
} var;

typedef struct frame {
    struct frame *parent;
    var *v;
    size_t n, cap;
} frame;

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

enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };

#define MAXARGS 16
typedef struct jargs {
    jv pos[MAXARGS];
    js kn[MAXARGS];
    jv kv[MAXARGS];
    size_t npos, nkw;
} jargs;

static jv UNDEF = {.t = JV_UNDEF};
static jv NONE = {.t = JV_NONE};

static struct jfunc G_RANGE = {FN_RANGE, 0, {0}, NULL}, G_NAMESPACE = {FN_NAMESPACE, 0, {0}, NULL},
                    G_RAISE = {FN_RAISE, 0, {0}, NULL}, G_STRFTIME = {FN_STRFTIME, 0, {0}, NULL},
                    G_DICT = {FN_DICT, 0, {0}, NULL};

static js S(const char *s) { return (js){s, strlen(s)}; }
static int js_eq(js a, const char *b) { return a.n == strlen(b) && !memcmp(a.p, b, a.n); }

static void step(R *r, int line) {
    if (++r->steps > r->max_steps) jj_fail(r->e, line, "template exceeded %ld steps", r->max_steps);
}

static void enter(R *r, int line) {
    if (++r->depth > JINJA_MAX_DEPTH) jj_fail(r->e, line, "template recursion too deep");
}

static jbuf newbuf(R *r) {
    jbuf b = {r->a, NULL, 0, 0, r->max_out};
    jb_put(&b, "", 0);
    return b;
}

static jv fnval(R *r, int kind, int mid, jv self, const jnode *m) {
    jfunc *f = jj_alloc(r->a, sizeof *f);
    f->kind = kind;
    f->mid = mid;
    f->self = self;
    f->macro = m;
    jv v = {.t = JV_FUNC};
    v.u.fn = f;
    return v;
}

static jv gfn(jfunc *f) {
    jv v = {.t = JV_FUNC};
    v.u.fn = f;
    return v;
}

static js str_of(R *r, jv v) { return jv_to_str(r->a, r->max_out, v); }

static jv mkstr(R *r, jbuf *b) {
    (void)r;
    return jv_str((js){b->p, b->n}); }

/* markupsafe.escape: & < > " ' as entities; the result is Markup. */
static jv html_escape(R *r, js s) {
    jbuf o = newbuf(r);
    for (size_t i = 0; i < s.n; i++) {
        switch (s.p[i]) {
        case '&': jb_puts(&o, "&amp;"); break;
        case '<': jb_puts(&o, "&lt;"); break;
        case '>': jb_puts(&o, "&gt;"); break;
        case '"': jb_puts(&o, "&#34;"); break;
        case '\'': jb_puts(&o, "&#39;"); break;
        default: jb_putc(&o, s.p[i]);
        }
    }
    jv v = mkstr(r, &o);
    v.markup = 1;
    return v;
}

/* ---------------------------------------------------------------- frames */

static frame *frame_new(R *r, frame *parent) {
    frame *f = jj_alloc(r->a, sizeof *f);
    memset(f, 0, sizeof *f);
    f->parent = parent;
    return f;
}

static void frame_set(R *r, frame *f, js name, jv v) {
    for (size_t i = 0; i < f->n; i++)
        if (f->v[i].name.n == name.n && !memcmp(f->v[i].name.p, name.p, name.n)) {
            f->v[i].v = v;
            return;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        var *nv = jj_alloc(r->a, cap * sizeof *nv);
        if (f->n) memcpy(nv, f->v, f->n * sizeof *nv);
        f->v = nv;
        f->cap = cap;
    }
    f->v[f->n].name = name;
    f->v[f->n++].v = v;
}

static jv lookup(R *r, frame *f, js name) {
    for (; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (f->v[i].name.n == name.n && !memcmp(f->v[i].name.p, name.p, name.n)) return f->v[i].v;
    jv *c = jd_gets(r->ctx, name);
    if (c) return *c;
    if (js_eq(name, "range")) return gfn(&G_RANGE);
    if (js_eq(name, "namespace")) return gfn(&G_NAMESPACE);
    if (js_eq(name, "raise_exception")) return gfn(&G_RAISE);
    if (js_eq(name, "strftime_now")) return gfn(&G_STRFTIME);
    if (js_eq(name, "dict")) return gfn(&G_DICT);
    return UNDEF;
}

/* ---------------------------------------------------------------- arguments */

static jv arg(jargs *A, size_t i, const char *name, jv dflt) {
    if (i < A->npos) return A->pos[i];
    for (size_t k = 0; name && k < A->nkw; k++)
        if (js_eq(A->kn[k], name)) return A->kv[k];
    return dflt;
}

static int has_arg(jargs *A, size_t i, const char *name) {
    if (i < A->npos) return 1;
    for (size_t k = 0; name && k < A->nkw; k++)
        if (js_eq(A->kn[k], name)) return 1;
    return 0;
}

static int64_t want_int(R *r, jv v, int line, const char *what) {
    if (v.t == JV_INT) return v.u.i;
    if (v.t == JV_BOOL) return v.u.b;
    jj_fail(r->e, line, "%s must be an integer, not %s", what, jv_type_name(v));
}

static js want_str(R *r, jv v, int line, const char *what) {
    if (v.t == JV_STR) return v.u.s;
    jj_fail(r->e, line, "%s must be a string, not %s", what, jv_type_name(v));
}

/* ---------------------------------------------------------------- iteration and access */

/* The items a for loop (or a filter) walks: list items, dict keys, string characters. */
static jlist *iter_items(R *r, jv v, int line) {
    switch (v.t) {
    case JV_UNDEF: return jl_new(r->a, 0);
    case JV_LIST: return v.u.l;
    case JV_DICT: {
        if (v.u.d->ns) break;
        jlist *l = jl_new(r->a, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) l->v[l->n++] = v.u.d->k[i];
        return l;
    }
    case JV_STR: {
        jlist *l = jl_new(r->a, v.u.s.n);
        size_t i = 0, len;
        while (i < v.u.s.n) {
            jj_u8dec(v.u.s.p + i, v.u.s.n - i, &len);
            l->v[l->n++] = jv_str((js){v.u.s.p + i, len});
            i += len;
        }
        return l;
    }
    default: break;
    }
    jj_fail(r->e, line, "'%s' object is not iterable", jv_type_name(v));
}

static jlist *dict_items(R *r, jdict *d) {
    jlist *l = jl_new(r->a, d->n);
    for (size_t i = 0; i < d->n; i++) {
        jlist *t = jl_new(r->a, 2);
        t->tuple = 1;
        t->v[0] = d->k[i];
        t->v[1] = d->v[i];
        t->n = 2;
        l->v[l->n++] = jv_list(t);
    }
    return l;
}

static int method_id(js name, int lo, int hi) {
    for (int i = lo; i < hi; i++)
        if (js_eq(name, METHODS[i])) return i;
    return -1;
}

static jv getattr_(R *r, jv o, js name, int line) {
    int m;
    switch (o.t) {
    case JV_DICT:
        if (!o.u.d->ns && (m = method_id(name, M_ITEMS, M_CYCLE)) >= 0) return fnval(r, FN_METHOD, m, o, NULL);
        {
            jv *p = jd_gets(o.u.d, name);
            return p ? *p : UNDEF;
        }
    case JV_STR:
        if ((m = method_id(name, M_STRIP, M_ITEMS)) >= 0) return fnval(r, FN_METHOD, m, o, NULL);
        return UNDEF;
    case JV_LIST: {
        static const char *const mut[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", NULL};
        for (int i = 0; mut[i]; i++)
            if (js_eq(name, mut[i]))
                jj_fail(r->e, line, "access to attribute '%s' of '%s' object is unsafe.", mut[i], jv_type_name(o));
        return UNDEF;
    }
    case JV_LOOP: {
        jloop *L = o.u.lp;
        int64_t i = L->index0, n = L->length;
        if (js_eq(name, "index")) return jv_int(i + 1);
        if (js_eq(name, "index0")) return jv_int(i);
        if (js_eq(name, "revindex")) return jv_int(n - i);
        if (js_eq(name, "revindex0")) return jv_int(n - i - 1);
        if (js_eq(name, "first")) return jv_bool(i == 0);
        if (js_eq(name, "last")) return jv_bool(i == n - 1);
        if (js_eq(name, "length")) return jv_int(n);
        if (js_eq(name, "depth")) return jv_int(1);
        if (js_eq(name, "depth0")) return jv_int(0);
        if (js_eq(name, "previtem")) return i > 0 ? L->items->v[i - 1] : UNDEF;
        if (js_eq(name, "nextitem")) return i + 1 < n ? L->items->v[i + 1] : UNDEF;
        if (js_eq(name, "cycle")) return fnval(r, FN_METHOD, M_CYCLE, o, NULL);
        return UNDEF;
    }
    default:
        /* jinja2 raises here for an undefined object; a chat server is better served by staying lenient */
        return UNDEF;
    }
}

static jv getitem(R *r, jv o, jv k, int line) {
    if (o.t == JV_DICT) {
        jv *p = o.u.d->ns ? (k.t == JV_STR ? jd_gets(o.u.d, k.u.s) : NULL) : jd_get(o.u.d, k);
        if (p) return *p;
        if (k.t == JV_STR && !o.u.d->ns) return getattr_(r, o, k.u.s, line);
        return UNDEF;
    }
    if ((o.t == JV_LIST || o.t == JV_STR) && (k.t == JV_INT || k.t == JV_BOOL)) {
        int64_t i = k.t == JV_INT ? k.u.i : k.u.b;
        if (o.t == JV_LIST) {
            int64_t n = (int64_t)o.u.l->n;
            if (i < 0) i += n;
            return i >= 0 && i < n ? o.u.l->v[i] : UNDEF;
        }
        jlist *cs = iter_items(r, o, line);
        int64_t n = (int64_t)cs->n;
        if (i < 0) i += n;
        return i >= 0 && i < n ? cs->v[i] : UNDEF;
    }
    if (k.t == JV_STR) return getattr_(r, o, k.u.s, line);
    return UNDEF;
}

/* Python slice semantics (negative indices, clamping, negative steps). */
static jv slice(R *r, jv o, jv a, jv b, jv c, int line) {
    if (o.t == JV_UNDEF) return UNDEF;
    if (o.t != JV_LIST && o.t != JV_STR) jj_fail(r->e, line, "'%s' object is not subscriptable", jv_type_name(o));
    int64_t st = c.t == JV_NONE || c.t == JV_UNDEF ? 1 : want_int(r, c, line, "slice step");
    if (st == 0) jj_fail(r->e, line, "slice step cannot be zero");
    jlist *items = o.t == JV_LIST ? o.u.l : iter_items(r, o, line);
    int64_t n = (int64_t)items->n, lo, hi;
    if (a.t == JV_NONE || a.t == JV_UNDEF) lo = st < 0 ? n - 1 : 0;
    else {
        lo = want_int(r, a, line, "slice index");
        if (lo < 0) { lo += n; if (lo < 0) lo = st < 0 ? -1 : 0; }
        else if (lo >= n) lo = st < 0 ? n - 1 : n;
    }
    if (b.t == JV_NONE || b.t == JV_UNDEF) hi = st < 0 ? -1 : n;
    else {
        hi = want_int(r, b, line, "slice index");
        if (hi < 0) { hi += n; if (hi < 0) hi = st < 0 ? -1 : 0; }
        else if (hi >= n) hi = st < 0 ? n - 1 : n;
    }
    if (o.t == JV_LIST) {
        jlist *l = jl_new(r->a, 0);
        l->tuple = o.u.l->tuple;
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) jl_push(r->a, l, items->v[i]);
        return jv_list(l);
    }
    jbuf out = newbuf(r);
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) jb_put(&out, items->v[i].u.s.p, items->v[i].u.s.n);
    return mkstr(r, &out);
}

/* ---------------------------------------------------------------- arithmetic */

static _Noreturn void bad_operands(R *r, const char *op, jv a, jv b, int line) {
    jj_fail(r->e, line, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

static int64_t ival(jv v) { return v.t == JV_BOOL ? v.u.b : v.u.i; }

static jv arith(R *r, int op, jv a, jv b, int line) {
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (a.t == JV_UNDEF || b.t == JV_UNDEF) jj_fail(r->e, line, "undefined value used with '%s'", names[op]);
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
        /* Markup + str and str + Markup escape the plain side and stay Markup (markupsafe) */
        const int markup = a.markup || b.markup;
        if (markup && !a.markup) a = html_escape(r, a.u.s);
        if (markup && !b.markup) b = html_escape(r, b.u.s);
        jbuf o = newbuf(r);
        jb_put(&o, a.u.s.p, a.u.s.n);
        jb_put(&o, b.u.s.p, b.u.s.n);
        jv out = mkstr(r, &o);
        out.markup = markup;
        return out;
    }
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST && a.u.l->tuple == b.u.l->tuple) {
        jlist *l = jl_new(r->a, a.u.l->n + b.u.l->n);
        l->tuple = a.u.l->tuple;
        for (size_t i = 0; i < a.u.l->n; i++) l->v[l->n++] = a.u.l->v[i];
        for (size_t i = 0; i < b.u.l->n; i++) l->v[l->n++] = b.u.l->v[i];
        return jv_list(l);
    }
    if (op == OP_MUL && (((a.t == JV_STR || a.t == JV_LIST) && (b.t == JV_INT || b.t == JV_BOOL)) ||
                         ((b.t == JV_STR || b.t == JV_LIST) && (a.t == JV_INT || a.t == JV_BOOL)))) {
        jv s = a.t == JV_STR || a.t == JV_LIST ? a : b;
        int64_t k = ival(a.t == JV_STR || a.t == JV_LIST ? b : a);
        if (k < 0) k = 0;
        size_t unit = s.t == JV_STR ? s.u.s.n : s.u.l->n * sizeof(jv);
        if (unit && (uint64_t)k > r->max_out / unit) jj_fail(r->e, line, "repetition result too large");
        if (s.t == JV_STR) {
            jbuf o = newbuf(r);
            for (int64_t i = 0; i < k; i++) jb_put(&o, s.u.s.p, s.u.s.n);
            return mkstr(r, &o);
        }
        jlist *l = jl_new(r->a, s.u.l->n * (size_t)k);
        l->tuple = s.u.l->tuple;
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < s.u.l->n; j++) l->v[l->n++] = s.u.l->v[j];
        return jv_list(l);
    }
    if (!jv_is_num(a) || !jv_is_num(b)) bad_operands(r, names[op], a, b, line);
    if (a.t != JV_FLOAT && b.t != JV_FLOAT && op != OP_DIV) {
        int64_t x = ival(a), y = ival(b), z = 0;
        int ovf = 0;
        switch (op) {
        case OP_ADD: ovf = __builtin_add_overflow(x, y, &z); break;
        case OP_SUB: ovf = __builtin_sub_overflow(x, y, &z); break;
        case OP_MUL: ovf = __builtin_mul_overflow(x, y, &z); break;
        case OP_FLOORDIV: case OP_MOD:
            if (y == 0) jj_fail(r->e, line, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) { ovf = 1; break; }
            z = op == OP_FLOORDIV ? x / y : x % y;
            if (op == OP_FLOORDIV && (x % y != 0) && ((x < 0) != (y < 0))) z--;
            if (op == OP_MOD && z != 0 && ((z < 0) != (y < 0))) z += y;
            break;
        case OP_POW:
            if (y < 0) return jv_float(pow((double)x, (double)y));
            z = 1;
            for (int64_t i = 0; i < y && !ovf; i++) {
                ovf = __builtin_mul_overflow(z, x, &z);
                if (z == 0 || z == 1) break;
                if (z == -1) { z = (y % 2) ? -1 : 1; break; }
            }
            break;
        }
        if (ovf) jj_fail(r->e, line, "integer overflow");
        return jv_int(z);
    }
    double x = jv_num(a), y = jv_num(b);
    switch (op) {
    case OP_ADD: return jv_float(x + y);
    case OP_SUB: return jv_float(x - y);
    case OP_MUL: return jv_float(x * y);
    case OP_DIV:
        if (y == 0) jj_fail(r->e, line, "division by zero");
        return jv_float(x / y);
    case OP_FLOORDIV:
        if (y == 0) jj_fail(r->e, line, "float divmod()");
        return jv_float(floor(x / y));
    case OP_MOD: {
        if (y == 0) jj_fail(r->e, line, "float modulo");
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return jv_float(m);
    }
    default: return jv_float(pow(x, y));
    }
}

static int contains(R *r, jv hay, jv needle, int line) {
    switch (hay.t) {
    case JV_UNDEF: return 0;
    case JV_STR: {
        if (needle.t != JV_STR) jj_fail(r->e, line, "'in <string>' requires string as left operand, not %s", jv_type_name(needle));
        if (!needle.u.s.n) return 1;
        return memmem(hay.u.s.p, hay.u.s.n, needle.u.s.p, needle.u.s.n) != NULL;
    }
    case JV_LIST:
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (jv_eq(hay.u.l->v[i], needle, 0)) return 1;
        return 0;
    case JV_DICT:
        if (hay.u.d->ns) break;
        return jd_get(hay.u.d, needle) != NULL;
    default: break;
    }
    jj_fail(r->e, line, "argument of type '%s' is not iterable", jv_type_name(hay));
}

static int compare(R *r, int op, jv a, jv b, int line) {
    switch (op) {
    case OP_EQ: return jv_eq(a, b, 0);
    case OP_NE: return !jv_eq(a, b, 0);
    case OP_IN: return contains(r, b, a, line);
    case OP_NOTIN: return !contains(r, b, a, line);
    default: break;
    }
    int c = jv_cmp(a, b, 0);
    static const char *const names[] = {"<", "<=", ">", ">="};
    if (c == 2)
        jj_fail(r->e, line, "'%s' not supported between instances of '%s' and '%s'", names[op - OP_LT], jv_type_name(a),
                jv_type_name(b));
    switch (op) {
    case OP_LT: return c < 0;
    case OP_LE: return c <= 0;
    case OP_GT: return c > 0;
    default: return c >= 0;
    }
}

/* ---------------------------------------------------------------- string helpers */

/* Removes leading/trailing characters: Python whitespace, or any code point of chars. */
static js strip(js s, const js *chars, int left, int right) {
    size_t i = 0, e = s.n, l;
    while (left && i < e) {
        uint32_t c = jj_u8dec(s.p + i, e - i, &l);
        int hit = 0;
        if (chars) {
            size_t k = 0, l2;
            while (k < chars->n && !hit) {
                hit = jj_u8dec(chars->p + k, chars->n - k, &l2) == c;
                k += l2;
            }
        } else {
            hit = jj_py_space(c) && !(l == 1 && c >= 0x80);
        }
        if (!hit) break;
        i += l;
    }
    while (right && e > i) {
        size_t st = e - 1;
        while (st > i && ((unsigned char)s.p[st] & 0xc0) == 0x80 && e - st < 4) st--;
        uint32_t c = jj_u8dec(s.p + st, e - st, &l);
        if (st + l != e) {
            st = e - 1;
            c = (unsigned char)s.p[st];
            l = 1;
        }
        int hit = 0;
        if (chars) {
            size_t k = 0, l2;
            while (k < chars->n && !hit) {
                hit = jj_u8dec(chars->p + k, chars->n - k, &l2) == c;
                k += l2;
            }
        } else {
            hit = jj_py_space(c) && !(l == 1 && c >= 0x80);
        }
        if (!hit) break;
        e = st;
    }
    return (js){s.p + i, e - i};
}

static jv split(R *r, js s, jv sepv, int64_t maxsplit, int from_right, int line) {
    jlist *l = jl_new(r->a, 0);
    if (sepv.t == JV_NONE || sepv.t == JV_UNDEF) {
        /* runs of whitespace separate; no empty strings */
        size_t i = 0, len;
        if (from_right) {
            /* rsplit(None, n): split from the right, result in original order */
            size_t e = s.n;
            jlist *rev = jl_new(r->a, 0);
            while (e > 0) {
                while (e > 0 && jj_py_space((unsigned char)s.p[e - 1])) e--;
                if (!e) break;
                size_t st = e;
                if (maxsplit >= 0 && (int64_t)rev->n == maxsplit) {
                    jl_push(r->a, rev, jv_str((js){s.p, e}));
                    break;
                }
                while (st > 0 && !jj_py_space((unsigned char)s.p[st - 1])) st--;
                jl_push(r->a, rev, jv_str((js){s.p + st, e - st}));
                e = st;
            }
            for (size_t k = rev->n; k-- > 0;) jl_push(r->a, l, rev->v[k]);
            return jv_list(l);
        }
        while (i < s.n) {
            while (i < s.n && jj_py_space(jj_u8dec(s.p + i, s.n - i, &len))) i += len;
            if (i >= s.n) break;
            if (maxsplit >= 0 && (int64_t)l->n == maxsplit) {
                js rest = strip((js){s.p + i, s.n - i}, NULL, 0, 1);
                jl_push(r->a, l, jv_str(rest));
                break;
            }
            size_t st = i;
            while (i < s.n && !jj_py_space(jj_u8dec(s.p + i, s.n - i, &len))) i += len;
            jl_push(r->a, l, jv_str((js){s.p + st, i - st}));
        }
        return jv_list(l);
    }
    js sep = want_str(r, sepv, line, "separator");
    if (!sep.n) jj_fail(r->e, line, "empty separator");
    if (from_right && maxsplit >= 0) {
        jlist *rev = jl_new(r->a, 0);
        size_t e = s.n;
        while ((int64_t)rev->n < maxsplit) {
            size_t found = (size_t)-1;
            for (size_t k = e; k >= sep.n; k--)
                if (!memcmp(s.p + k - sep.n, sep.p, sep.n)) { found = k - sep.n; break; }
            if (found == (size_t)-1) break;
            jl_push(r->a, rev, jv_str((js){s.p + found + sep.n, e - found - sep.n}));
            e = found;
        }
        jl_push(r->a, rev, jv_str((js){s.p, e}));
        for (size_t k = rev->n; k-- > 0;) jl_push(r->a, l, rev->v[k]);
        return jv_list(l);
    }
    size_t i = 0;
    for (;;) {
        const char *f = (maxsplit < 0 || (int64_t)l->n < maxsplit) ? memmem(s.p + i, s.n - i, sep.p, sep.n) : NULL;
        if (!f) {
            jl_push(r->a, l, jv_str((js){s.p + i, s.n - i}));
            break;
        }
        jl_push(r->a, l, jv_str((js){s.p + i, (size_t)(f - (s.p + i))}));
        i = (size_t)(f - s.p) + sep.n;
    }
    return jv_list(l);
}

static js replace(R *r, js s, js old, js new_, int64_t count) {
    jbuf o = newbuf(r);
    size_t i = 0;
    int64_t done = 0;
    if (!old.n) {
        /* Python inserts new_ between every character (and at both ends) */
        size_t len;
        while (count < 0 || done < count) {
            jb_put(&o, new_.p, new_.n);
            done++;
            if (i >= s.n) break;
            jj_u8dec(s.p + i, s.n - i, &len);
            jb_put(&o, s.p + i, len);
            i += len;
        }
        jb_put(&o, s.p + i, s.n - i);
        return (js){o.p, o.n};
    }
    while (i <= s.n) {
        const char *f = (count < 0 || done < count) ? memmem(s.p + i, s.n - i, old.p, old.n) : NULL;
        if (!f) break;
        jb_put(&o, s.p + i, (size_t)(f - (s.p + i)));
        jb_put(&o, new_.p, new_.n);
        i = (size_t)(f - s.p) + old.n;
        done++;
    }
    jb_put(&o, s.p + i, s.n - i);
    return (js){o.p, o.n};
}

/* code point index of a byte offset */
static int64_t cp_index(js s, size_t off) { return (int64_t)jj_u8count(s.p, off); }

/* str.splitlines() (without keepends) */
static jlist *splitlines(R *r, js s) {
    jlist *l = jl_new(r->a, 0);
    size_t i = 0, st = 0, len;
    while (i < s.n) {
        uint32_t c = jj_u8dec(s.p + i, s.n - i, &len);
        int brk = c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e || c == 0x85 ||
                  c == 0x2028 || c == 0x2029;
        if (!brk || (len == 1 && c >= 0x80)) {
            i += len;
            continue;
        }
        jl_push(r->a, l, jv_str((js){s.p + st, i - st}));
        i += len;
        if (c == '\r' && i < s.n && s.p[i] == '\n') i++;
        st = i;
    }
    if (st < s.n) jl_push(r->a, l, jv_str((js){s.p + st, s.n - st}));
    return l;
}

static int str_all(js s, int kind) {
    if (!s.n) return 0;
    size_t i = 0, len;
    int any_cased = 0;
    while (i < s.n) {
        uint32_t c = jj_u8dec(s.p + i, s.n - i, &len);
        i += len;
        int alpha = c < 0x80 ? ((c | 32) >= 'a' && (c | 32) <= 'z') : 1;
        int digit = c >= '0' && c <= '9';
        switch (kind) {
        case M_ISDIGIT: if (!digit) return 0; break;
        case M_ISALPHA: if (!alpha) return 0; break;
        case M_ISALNUM: if (!alpha && !digit) return 0; break;
        case M_ISSPACE: if (!jj_py_space(c)) return 0; break;
        case M_ISUPPER: if (c < 0x80 && c >= 'a' && c <= 'z') return 0; if (c < 0x80 && c >= 'A' && c <= 'Z') any_cased = 1; break;
        case M_ISLOWER: if (c < 0x80 && c >= 'A' && c <= 'Z') return 0; if (c < 0x80 && c >= 'a' && c <= 'z') any_cased = 1; break;
        }
    }
    return (kind == M_ISUPPER || kind == M_ISLOWER) ? any_cased : 1;
}

static int prefix_match(R *r, js s, jv p, int suffix, int line) {
    if (p.t == JV_LIST && p.u.l->tuple) {
        for (size_t i = 0; i < p.u.l->n; i++)
            if (prefix_match(r, s, p.u.l->v[i], suffix, line)) return 1;
        return 0;
    }
    js x = want_str(r, p, line, suffix ? "endswith argument" : "startswith argument");
    if (x.n > s.n) return 0;
    return !memcmp(suffix ? s.p + s.n - x.n : s.p, x.p, x.n);
}

/* ---------------------------------------------------------------- calls */

static jv eval(R *r, frame *f, const jnode *n);
static int exec_list(R *r, frame *f, const jnlist *l, jbuf *out);
static jv apply_filter(R *r, frame *f, int id, jv v, jargs *A, int line);
static int apply_test(R *r, int id, jv v, jargs *A, int line);

static void eval_args(R *r, frame *f, const jnlist *args, jargs *A, size_t skip_first, int line) {
    A->npos = A->nkw = 0;
    for (size_t i = skip_first; i < args->n; i++) {
        const jnode *x = args->v[i];
        if (x->k == N_KWARG) {
            if (A->nkw == MAXARGS) jj_fail(r->e, line, "too many arguments");
            A->kn[A->nkw] = x->s;
            A->kv[A->nkw++] = eval(r, f, x->a);
        } else {
            if (A->npos == MAXARGS) jj_fail(r->e, line, "too many arguments");
            A->pos[A->npos++] = eval(r, f, x);
        }
    }
}

static jv call_macro(R *r, const jnode *m, jargs *A, int line) {
    enter(r, line);
    step(r, line);
    frame *f = frame_new(r, r->root);
    if (A->npos > m->args.n)
        jj_fail(r->e, line, "macro '%.*s' takes not more than %zu argument(s)", (int)m->s.n, m->s.p, m->args.n);
    for (size_t k = 0; k < A->nkw; k++) {
        size_t i = 0;
        while (i < m->args.n && !(m->args.v[i]->s.n == A->kn[k].n && !memcmp(m->args.v[i]->s.p, A->kn[k].p, A->kn[k].n))) i++;
        if (i == m->args.n)
            jj_fail(r->e, line, "macro '%.*s' takes no keyword argument '%.*s'", (int)m->s.n, m->s.p, (int)A->kn[k].n, A->kn[k].p);
    }
    for (size_t i = 0; i < m->args.n; i++) {
        const jnode *p = m->args.v[i];
        jv v = UNDEF;
        int got = 0;
        if (i < A->npos) {
            v = A->pos[i];
            got = 1;
        }
        for (size_t k = 0; !got && k < A->nkw; k++)
            if (A->kn[k].n == p->s.n && !memcmp(A->kn[k].p, p->s.p, p->s.n)) {
                v = A->kv[k];
                got = 1;
            }
        if (!got && p->a) v = eval(r, f, p->a);
        frame_set(r, f, p->s, v);
    }
    jbuf out = newbuf(r);
    exec_list(r, f, &m->body, &out);
    r->depth--;
    return mkstr(r, &out);
}

static jv call_method(R *r, jv self, int mid, jargs *A, int line) {
    if (self.t == JV_STR) {
        js s = self.u.s;
        switch (mid) {
        case M_STRIP: case M_LSTRIP: case M_RSTRIP: {
            jv c = arg(A, 0, "chars", NONE);
            js chars = c.t == JV_NONE ? (js){0} : want_str(r, c, line, "strip argument");
            return jv_str(strip(s, c.t == JV_NONE ? NULL : &chars, mid != M_RSTRIP, mid != M_LSTRIP));
        }
        case M_SPLIT: case M_RSPLIT:
            return split(r, s, arg(A, 0, "sep", NONE), want_int(r, arg(A, 1, "maxsplit", jv_int(-1)), line, "maxsplit"),
                         mid == M_RSPLIT, line);
        case M_STARTSWITH: case M_ENDSWITH:
            if (!has_arg(A, 0, NULL)) jj_fail(r->e, line, "%s() takes at least 1 argument", METHODS[mid]);
            return jv_bool(prefix_match(r, s, A->pos[0], mid == M_ENDSWITH, line));
        case M_UPPER: return jv_str(jj_case(r->a, r->max_out, s, CASE_UPPER));
        case M_LOWER: return jv_str(jj_case(r->a, r->max_out, s, CASE_LOWER));
        case M_TITLE: return jv_str(jj_case(r->a, r->max_out, s, CASE_TITLE));
        case M_CAPITALIZE: return jv_str(jj_case(r->a, r->max_out, s, CASE_CAPITALIZE));
        case M_REPLACE:
            if (A->npos < 2) jj_fail(r->e, line, "replace() takes at least 2 arguments");
            return jv_str(replace(r, s, want_str(r, A->pos[0], line, "replace argument"),
                                  want_str(r, A->pos[1], line, "replace argument"),
                                  want_int(r, arg(A, 2, "count", jv_int(-1)), line, "count")));
        case M_FIND: case M_RFIND: case M_INDEX: {
            js x = want_str(r, arg(A, 0, NULL, UNDEF), line, "find argument");
            const char *hit = NULL;
            if (mid == M_RFIND) {
                for (size_t k = s.n + 1; k-- > 0;)
                    if (k + x.n <= s.n && !memcmp(s.p + k, x.p, x.n)) { hit = s.p + k; break; }
            } else {
                hit = x.n ? memmem(s.p, s.n, x.p, x.n) : s.p;
            }
            if (!hit && mid == M_INDEX) jj_fail(r->e, line, "substring not found");
            return jv_int(hit ? cp_index(s, (size_t)(hit - s.p)) : -1);
        }
        case M_COUNT: {
            js x = want_str(r, arg(A, 0, NULL, UNDEF), line, "count argument");
            if (!x.n) return jv_int((int64_t)jj_u8count(s.p, s.n) + 1);
            int64_t c = 0;
            size_t i = 0;
            const char *h;
            while (i <= s.n && (h = memmem(s.p + i, s.n - i, x.p, x.n))) {
                c++;
                i = (size_t)(h - s.p) + x.n;
            }
            return jv_int(c);
        }
        case M_JOIN: {
            jlist *items = iter_items(r, arg(A, 0, NULL, UNDEF), line);
            jbuf o = newbuf(r);
            for (size_t i = 0; i < items->n; i++) {
                if (i) jb_put(&o, s.p, s.n);
                if (items->v[i].t != JV_STR)
                    jj_fail(r->e, line, "sequence item %zu: expected str instance, %s found", i, jv_type_name(items->v[i]));
                jb_put(&o, items->v[i].u.s.p, items->v[i].u.s.n);
            }
            return mkstr(r, &o);
        }
        case M_ISDIGIT: case M_ISALPHA: case M_ISALNUM: case M_ISSPACE: case M_ISUPPER: case M_ISLOWER:
            return jv_bool(str_all(s, mid));
        case M_SPLITLINES: return jv_list(splitlines(r, s));
        case M_FORMAT: {
            /* "{}"/"{0}"/"{name}" replacement fields without format specs */
            jbuf o = newbuf(r);
            size_t i = 0, auto_i = 0;
            while (i < s.n) {
                char c = s.p[i];
                if ((c == '{' || c == '}') && i + 1 < s.n && s.p[i + 1] == c) {
                    jb_putc(&o, c);
                    i += 2;
                    continue;
                }
                if (c != '{') {
                    jb_putc(&o, c);
                    i++;
                    continue;
                }
                const char *e = memchr(s.p + i, '}', s.n - i);
                if (!e) jj_fail(r->e, line, "Single '{' encountered in format string");
                js field = {s.p + i + 1, (size_t)(e - s.p) - i - 1};
                jv v = UNDEF;
                if (!field.n) {
                    if (auto_i >= A->npos) jj_fail(r->e, line, "Replacement index %zu out of range", auto_i);
                    v = A->pos[auto_i++];
                } else if (field.p[0] >= '0' && field.p[0] <= '9') {
                    size_t k = (size_t)atoi(field.p);
                    if (k >= A->npos) jj_fail(r->e, line, "Replacement index %zu out of range", k);
                    v = A->pos[k];
                } else {
                    size_t k = 0;
                    while (k < A->nkw && !(A->kn[k].n == field.n && !memcmp(A->kn[k].p, field.p, field.n))) k++;
                    if (k == A->nkw) jj_fail(r->e, line, "format: missing key '%.*s'", (int)field.n, field.p);
                    v = A->kv[k];
                }
                jv_put(&o, v, 0, 0);
                i = (size_t)(e - s.p) + 1;
            }
            return mkstr(r, &o);
        }
        }
    } else if (self.t == JV_DICT) {
        jdict *d = self.u.d;
        switch (mid) {
        case M_ITEMS: return jv_list(dict_items(r, d));
        case M_KEYS: {
            jlist *l = jl_new(r->a, d->n);
            for (size_t i = 0; i < d->n; i++) l->v[l->n++] = d->k[i];
            return jv_list(l);
        }
        case M_VALUES: {
            jlist *l = jl_new(r->a, d->n);
            for (size_t i = 0; i < d->n; i++) l->v[l->n++] = d->v[i];
            return jv_list(l);
        }
        case M_GET: {
            jv *p = jd_get(d, arg(A, 0, NULL, UNDEF));
            return p ? *p : arg(A, 1, NULL, NONE);
        }
        }
    } else if (self.t == JV_LOOP && mid == M_CYCLE) {
        if (!A->npos) jj_fail(r->e, line, "no items for cycling given");
        return A->pos[self.u.lp->index0 % (int64_t)A->npos];
    }
    jj_fail(r->e, line, "'%s' object has no method '%s'", jv_type_name(self), METHODS[mid]);
}

static jv call(R *r, jv fn, jargs *A, int line) {
    if (fn.t != JV_FUNC) {
        if (fn.t == JV_UNDEF) jj_fail(r->e, line, "'Undefined' object is not callable");
        jj_fail(r->e, line, "'%s' object is not callable", jv_type_name(fn));
    }
    jfunc *F = fn.u.fn;
    switch (F->kind) {
    case FN_MACRO: return call_macro(r, F->macro, A, line);
    case FN_METHOD: return call_method(r, F->self, F->mid, A, line);
    case FN_RAISE: {
        js msg = str_of(r, arg(A, 0, NULL, UNDEF));
        r->e->raised = 1;
        jj_fail(r->e, 0, "%.*s", (int)(msg.n > 4000 ? 4000 : msg.n), msg.p);
    }
    case FN_RANGE: {
        int64_t a = 0, b, s = 1;
        if (A->npos == 0 || A->npos > 3) jj_fail(r->e, line, "range expected 1 to 3 arguments, got %zu", A->npos);
        if (A->npos == 1) b = want_int(r, A->pos[0], line, "range argument");
        else {
            a = want_int(r, A->pos[0], line, "range argument");
            b = want_int(r, A->pos[1], line, "range argument");
            if (A->npos == 3) s = want_int(r, A->pos[2], line, "range argument");
        }
        if (s == 0) jj_fail(r->e, line, "range() arg 3 must not be zero");
        double cnt = s > 0 ? ceil(((double)b - (double)a) / (double)s) : ceil(((double)a - (double)b) / (double)-s);
        if (cnt < 0) cnt = 0;
        if (cnt > JINJA_MAX_RANGE)
            jj_fail(r->e, line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", JINJA_MAX_RANGE);
        jlist *l = jl_new(r->a, (size_t)cnt);
        for (int64_t i = a; s > 0 ? i < b : i > b; i += s) l->v[l->n++] = jv_int(i);
        return jv_list(l);
    }
    case FN_NAMESPACE: case FN_DICT: {
        jdict *d = jd_new(r->a);
        d->ns = F->kind == FN_NAMESPACE;
        for (size_t i = 0; i < A->npos; i++) {
            jv p = A->pos[i];
            if (p.t == JV_DICT && !p.u.d->ns)
                for (size_t k = 0; k < p.u.d->n; k++) jd_set(r->a, d, p.u.d->k[k], p.u.d->v[k]);
            else if (p.t != JV_UNDEF)
                jj_fail(r->e, line, "%s() positional argument must be a mapping", F->kind == FN_DICT ? "dict" : "namespace");
        }
        for (size_t k = 0; k < A->nkw; k++) jd_set(r->a, d, jv_str(A->kn[k]), A->kv[k]);
        return jv_dict(d);
    }
    case FN_STRFTIME: {
        js fmt = want_str(r, arg(A, 0, "format", UNDEF), line, "strftime_now format");
        char *z = jj_alloc(r->a, fmt.n + 1);
        memcpy(z, fmt.p, fmt.n);
        z[fmt.n] = 0;
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char buf[512];
        size_t k = fmt.n ? strftime(buf, sizeof buf, z, &tm) : 0;
        return jv_copy_str(r->a, buf, k);
    }
    }
    jj_fail(r->e, line, "not callable");
}

/* ---------------------------------------------------------------- filters */

static js str_arg(R *r, jv v) { return str_of(r, v); }

static jv attr_path(R *r, jv item, js path, int line) {
    /* "a.b.0" looks up nested attributes/items, as jinja2's make_attrgetter does */
    size_t i = 0;
    while (i <= path.n) {
        const char *dot = memchr(path.p + i, '.', path.n - i);
        size_t e = dot ? (size_t)(dot - path.p) : path.n;
        js part = {path.p + i, e - i};
        int digits = part.n > 0;
        for (size_t k = 0; k < part.n; k++)
            if (part.p[k] < '0' || part.p[k] > '9') digits = 0;
        if (digits && part.n < 18) item = getitem(r, item, jv_int(atoll(part.p)), line);
        else item = getitem(r, item, jv_str(part), line);
        if (!dot) break;
        i = e + 1;
    }
    return item;
}

static jv apply_filter_name(R *r, frame *f, js name, jv v, jargs *A, int line) {
    int id = jj_filter_id(name.p, name.n);
    if (id < 0) jj_fail(r->e, line, "unknown filter '%.*s'", (int)(name.n > 60 ? 60 : name.n), name.p);
    return apply_filter(r, f, id, v, A, line);
}

/* select/reject/selectattr/rejectattr: test name at position `first`, test arguments after it */
static int run_select_test(R *r, jv item, jargs *A, size_t first, int line) {
    if (A->npos <= first) return jv_truthy(item);
    js tn = want_str(r, A->pos[first], line, "test name");
    int id = jj_test_id(tn.p, tn.n);
    if (id < 0) jj_fail(r->e, line, "unknown test '%.*s'", (int)(tn.n > 60 ? 60 : tn.n), tn.p);
    jargs T = {0};
    for (size_t i = first + 1; i < A->npos; i++) T.pos[T.npos++] = A->pos[i];
    return apply_test(r, id, item, &T, line);
}

static int sort_cmp_ci(R *r, jv a, jv b, int ci, int line) {
    if (ci && a.t == JV_STR && b.t == JV_STR) {
        a = jv_str(jj_case(r->a, r->max_out, a.u.s, CASE_LOWER));
        b = jv_str(jj_case(r->a, r->max_out, b.u.s, CASE_LOWER));
    }
    int c = jv_cmp(a, b, 0);
    if (c == 2)
        jj_fail(r->e, line, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
    return c;
}

/* stable merge sort on keys (Python's sort is stable) */
static void sort_by(R *r, jv *items, jv *keys, size_t n, int ci, int reverse, int line) {
    if (n < 2) return;
    jv *ti = jj_alloc(r->a, n * sizeof *ti), *tk = jj_alloc(r->a, n * sizeof *tk);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int c = sort_cmp_ci(r, keys[j], keys[i], ci, line);
                int take_right = reverse ? c > 0 : c < 0;
                if (take_right) { ti[k] = items[j]; tk[k++] = keys[j++]; }
                else { ti[k] = items[i]; tk[k++] = keys[i++]; }
            }
            while (i < mid) { ti[k] = items[i]; tk[k++] = keys[i++]; }
            while (j < hi) { ti[k] = items[j]; tk[k++] = keys[j++]; }
        }
        memcpy(items, ti, n * sizeof *ti);
        memcpy(keys, tk, n * sizeof *tk);
    }
}

static jv do_round(R *r, jv v, int64_t prec, js method, int line) {
    if (!jv_is_num(v)) jj_fail(r->e, line, "round filter needs a number, not %s", jv_type_name(v));
    double x = jv_num(v), p = pow(10.0, (double)prec);
    if (js_eq(method, "common")) {
        if (v.t != JV_FLOAT) return v.t == JV_BOOL ? jv_int(v.u.b) : v;
        /* Python's round(): correctly rounded decimal, ties to even, as printf does */
        if (!isfinite(x) || prec > 300) return jv_float(x);
        char buf[400];
        if (prec >= 0) {
            snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
            return jv_float(strtod(buf, NULL));
        }
        return jv_float(nearbyint(x * p) / p);
    }
    if (js_eq(method, "floor")) return jv_float(floor(x * p) / p);
    if (js_eq(method, "ceil")) return jv_float(ceil(x * p) / p);
    jj_fail(r->e, line, "method must be common, ceil or floor");
}

static jv to_int(R *r, jv v, jv dflt, int64_t base) {
    (void)r;
    switch (v.t) {
    case JV_INT: return v;
    case JV_BOOL: return jv_int(v.u.b);
    case JV_FLOAT:
        if (isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) return jv_int((int64_t)v.u.f);
        return dflt;
    case JV_STR: {
        char buf[64];
        js s = strip(v.u.s, NULL, 1, 1);
        if (!s.n || s.n >= sizeof buf) return dflt;
        size_t o = 0;
        for (size_t i = 0; i < s.n; i++)
            if (s.p[i] != '_') buf[o++] = s.p[i];
        buf[o] = 0;
        char *end;
        errno = 0;
        long long x = strtoll(buf, &end, (int)base);
        if (!*end && errno == 0) return jv_int(x);
        double d = strtod(buf, &end);
        if (!*end && isfinite(d) && fabs(d) < 9.2e18) return jv_int((int64_t)d);
        return dflt;
    }
    default: return dflt;
    }
}

static jv apply_filter(R *r, frame *f, int id, jv v, jargs *A, int line) {
    switch (id) {
    case F_ABS:
        if (v.t == JV_INT) {
            if (v.u.i == INT64_MIN) jj_fail(r->e, line, "integer overflow");
            return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        }
        if (v.t == JV_BOOL) return jv_int(v.u.b);
        if (v.t == JV_FLOAT) return jv_float(fabs(v.u.f));
        jj_fail(r->e, line, "bad operand type for abs(): '%s'", jv_type_name(v));
    case F_ATTR: {
        /* attr() looks up Python attributes only: a dict's keys are not attributes */
        js name = str_arg(r, arg(A, 0, "name", UNDEF));
        if (v.t == JV_DICT && (v.u.d->ns || method_id(name, M_ITEMS, M_CYCLE) < 0)) return v.u.d->ns ? getattr_(r, v, name, line) : UNDEF;
        return getattr_(r, v, name, line);
    }
    case F_CAPITALIZE: return jv_str(jj_case(r->a, r->max_out, str_of(r, v), CASE_CAPITALIZE));
    case F_TITLE: return jv_str(jj_case(r->a, r->max_out, str_of(r, v), CASE_JTITLE));
    case F_LOWER: return jv_str(jj_case(r->a, r->max_out, str_of(r, v), CASE_LOWER));
    case F_UPPER: return jv_str(jj_case(r->a, r->max_out, str_of(r, v), CASE_UPPER));
    case F_COUNT: case F_LENGTH:
        switch (v.t) {
        case JV_UNDEF: return jv_int(0);
        case JV_STR: return jv_int((int64_t)jj_u8count(v.u.s.p, v.u.s.n));
        case JV_LIST: return jv_int((int64_t)v.u.l->n);
        case JV_DICT: if (!v.u.d->ns) return jv_int((int64_t)v.u.d->n); break;
        default: break;
        }
        jj_fail(r->e, line, "object of type '%s' has no len()", jv_type_name(v));
    case F_D: case F_DEFAULT: {
        jv d = arg(A, 0, "default_value", jv_str(S("")));
        int boolean = jv_truthy(arg(A, 1, "boolean", jv_bool(0)));
        if (v.t == JV_UNDEF || (boolean && !jv_truthy(v))) return d;
        return v;
    }
    case F_DICTSORT: {
        if (v.t != JV_DICT) jj_fail(r->e, line, "dictsort filter needs a dict, not %s", jv_type_name(v));
        int cs = jv_truthy(arg(A, 0, "case_sensitive", jv_bool(0)));
        js by = str_arg(r, arg(A, 1, "by", jv_str(S("key"))));
        int rev = jv_truthy(arg(A, 2, "reverse", jv_bool(0)));
        jlist *items = dict_items(r, v.u.d);
        jv *keys = jj_alloc(r->a, (items->n + 1) * sizeof *keys);
        int pos = js_eq(by, "value") ? 1 : 0;
        if (!pos && !js_eq(by, "key")) jj_fail(r->e, line, "You can only sort by either \"key\" or \"value\"");
        for (size_t i = 0; i < items->n; i++) keys[i] = items->v[i].u.l->v[pos];
        sort_by(r, items->v, keys, items->n, !cs, rev, line);
        return jv_list(items);
    }
    case F_E: case F_ESCAPE: case F_FORCEESCAPE:
        /* escape leaves a Markup alone (it is escaped already); forceescape does not */
        if (id != F_FORCEESCAPE && v.t == JV_STR && v.markup) return v;
        return html_escape(r, str_of(r, v));
    case F_FIRST: case F_LAST: {
        if (v.t == JV_UNDEF) return UNDEF;
        jlist *l = iter_items(r, v, line);
        if (!l->n) return UNDEF;
        return id == F_FIRST ? l->v[0] : l->v[l->n - 1];
    }
    case F_FLOAT: {
        jv d = arg(A, 0, "default", jv_float(0.0));
        if (v.t == JV_FLOAT) return v;
        if (v.t == JV_INT || v.t == JV_BOOL) return jv_float(jv_num(v));
        if (v.t == JV_STR) {
            js s = strip(v.u.s, NULL, 1, 1);
            char buf[128];
            if (!s.n || s.n >= sizeof buf) return d;
            memcpy(buf, s.p, s.n);
            buf[s.n] = 0;
            char *end;
            double x = strtod(buf, &end);
            if (*end || (buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X'))) return d;
            return jv_float(x);
        }
        return d;
    }
    case F_INT: {
        jv d = arg(A, 0, "default", jv_int(0));
        int64_t base = want_int(r, arg(A, 1, "base", jv_int(10)), line, "base");
        if (base < 2 || base > 36) base = 10;
        return to_int(r, v, d, base);
    }
    case F_INDENT: {
        jv w = arg(A, 0, "width", jv_int(4));
        int first = jv_truthy(arg(A, 1, "first", jv_bool(0))), blank = jv_truthy(arg(A, 2, "blank", jv_bool(0)));
        jbuf ind = newbuf(r);
        if (w.t == JV_STR) jb_put(&ind, w.u.s.p, w.u.s.n);
        else {
            int64_t k = want_int(r, w, line, "indent width");
            if (k > 1000) jj_fail(r->e, line, "indent width too large");
            for (int64_t i = 0; i < k; i++) jb_putc(&ind, ' ');
        }
        js s = str_of(r, v);
        jbuf tmp = newbuf(r);
        jb_put(&tmp, s.p, s.n);
        jb_putc(&tmp, '\n'); /* jinja2 appends a newline so splitlines keeps a trailing empty line */
        jlist *lines = splitlines(r, (js){tmp.p, tmp.n});
        jbuf o = newbuf(r);
        for (size_t i = 0; i < lines->n; i++) {
            js ln = lines->v[i].u.s;
            if (i) {
                jb_putc(&o, '\n');
                if (blank || ln.n) jb_put(&o, ind.p, ind.n);
            }
            jb_put(&o, ln.p, ln.n);
        }
        if (first) {
            jbuf o2 = newbuf(r);
            jb_put(&o2, ind.p, ind.n);
            jb_put(&o2, o.p, o.n);
            return mkstr(r, &o2);
        }
        return mkstr(r, &o);
    }
    case F_ITEMS:
        if (v.t == JV_UNDEF) return jv_list(jl_new(r->a, 0));
        if (v.t != JV_DICT || v.u.d->ns) jj_fail(r->e, line, "Can only get item pairs from a mapping.");
        return jv_list(dict_items(r, v.u.d));
    case F_JOIN: {
        js sep = str_arg(r, arg(A, 0, "d", jv_str(S(""))));
        jv at = arg(A, 1, "attribute", NONE);
        jlist *l = iter_items(r, v, line);
        jbuf o = newbuf(r);
        for (size_t i = 0; i < l->n; i++) {
            if (i) jb_put(&o, sep.p, sep.n);
            jv it = at.t == JV_NONE ? l->v[i] : attr_path(r, l->v[i], str_of(r, at), line);
            jv_put(&o, it, 0, 0);
        }
        return mkstr(r, &o);
    }
    case F_LIST: {
        jlist *src = iter_items(r, v, line), *l = jl_new(r->a, src->n);
        for (size_t i = 0; i < src->n; i++) l->v[l->n++] = src->v[i];
        return jv_list(l);
    }
    case F_MAP: {
        /* jinja2's map/select family yields nothing for a falsy value (None included) */
        jlist *src = jv_truthy(v) ? iter_items(r, v, line) : jl_new(r->a, 0), *l = jl_new(r->a, src->n);
        if (has_arg(A, (size_t)-1, "attribute")) {
            js at = str_of(r, arg(A, (size_t)-1, "attribute", UNDEF));
            jv dflt = arg(A, (size_t)-1, "default", UNDEF);
            for (size_t i = 0; i < src->n; i++) {
                jv x = attr_path(r, src->v[i], at, line);
                l->v[l->n++] = x.t == JV_UNDEF ? dflt : x;
            }
            return jv_list(l);
        }
        if (!A->npos) jj_fail(r->e, line, "map requires a filter argument");
        js fname = want_str(r, A->pos[0], line, "filter name");
        jargs B = *A;
        B.npos = 0;
        for (size_t i = 1; i < A->npos; i++) B.pos[B.npos++] = A->pos[i];
        for (size_t i = 0; i < src->n; i++) l->v[l->n++] = apply_filter_name(r, f, fname, src->v[i], &B, line);
        return jv_list(l);
    }
    case F_MAX: case F_MIN: {
        jlist *l = iter_items(r, v, line);
        int cs = jv_truthy(arg(A, 0, "case_sensitive", jv_bool(0)));
        jv at = arg(A, 1, "attribute", NONE);
        if (!l->n) return UNDEF;
        size_t best = 0;
        for (size_t i = 1; i < l->n; i++) {
            jv a = at.t == JV_NONE ? l->v[i] : attr_path(r, l->v[i], str_of(r, at), line);
            jv b = at.t == JV_NONE ? l->v[best] : attr_path(r, l->v[best], str_of(r, at), line);
            int c = sort_cmp_ci(r, a, b, !cs, line);
            if (id == F_MAX ? c > 0 : c < 0) best = i;
        }
        return l->v[best];
    }
    case F_SELECT: case F_REJECT: case F_SELECTATTR: case F_REJECTATTR: {
        jlist *src = jv_truthy(v) ? iter_items(r, v, line) : jl_new(r->a, 0), *l = jl_new(r->a, src->n);
        int attr = id == F_SELECTATTR || id == F_REJECTATTR, want = id == F_SELECT || id == F_SELECTATTR;
        if (attr && !A->npos) jj_fail(r->e, line, "Missing parameter for attribute name");
        js at = attr ? str_of(r, A->pos[0]) : (js){0};
        for (size_t i = 0; i < src->n; i++) {
            jv x = attr ? attr_path(r, src->v[i], at, line) : src->v[i];
            if (run_select_test(r, x, A, attr ? 1 : 0, line) == want) l->v[l->n++] = src->v[i];
        }
        return jv_list(l);
    }
    case F_REPLACE: {
        js s = str_of(r, v);
        return jv_str(replace(r, s, str_arg(r, arg(A, 0, "old", jv_str(S("")))), str_arg(r, arg(A, 1, "new", jv_str(S("")))),
                              want_int(r, arg(A, 2, "count", jv_int(-1)), line, "count")));
    }
    case F_REVERSE: {
        if (v.t == JV_STR) {
            jlist *cs = iter_items(r, v, line);
            jbuf o = newbuf(r);
            for (size_t i = cs->n; i-- > 0;) jb_put(&o, cs->v[i].u.s.p, cs->v[i].u.s.n);
            return mkstr(r, &o);
        }
        jlist *src = iter_items(r, v, line), *l = jl_new(r->a, src->n);
        for (size_t i = src->n; i-- > 0;) l->v[l->n++] = src->v[i];
        return jv_list(l);
    }
    case F_ROUND:
        return do_round(r, v, want_int(r, arg(A, 0, "precision", jv_int(0)), line, "precision"),
                        str_arg(r, arg(A, 1, "method", jv_str(S("common")))), line);
    case F_SAFE: {
        jv m = v.t == JV_STR ? v : jv_str(str_of(r, v));
        m.markup = 1;
        return m;
    }
    case F_SORT: case F_UNIQUE: {
        int rev = id == F_SORT && jv_truthy(arg(A, 0, "reverse", jv_bool(0)));
        int cs = jv_truthy(arg(A, id == F_SORT ? 1 : 0, "case_sensitive", jv_bool(0)));
        jv at = arg(A, id == F_SORT ? 2 : 1, "attribute", NONE);
        jlist *src = iter_items(r, v, line), *l = jl_new(r->a, src->n);
        jv *keys = jj_alloc(r->a, (src->n + 1) * sizeof *keys);
        for (size_t i = 0; i < src->n; i++) {
            jv k = at.t == JV_NONE ? src->v[i] : attr_path(r, src->v[i], str_of(r, at), line);
            if (id == F_UNIQUE) {
                jv kc = !cs && k.t == JV_STR ? jv_str(jj_case(r->a, r->max_out, k.u.s, CASE_LOWER)) : k;
                size_t j = 0;
                while (j < l->n && !jv_eq(keys[j], kc, 0)) j++;
                if (j < l->n) continue;
                keys[l->n] = kc;
            } else {
                keys[l->n] = k;
            }
            l->v[l->n++] = src->v[i];
        }
        if (id == F_SORT) sort_by(r, l->v, keys, l->n, !cs, rev, line);
        return jv_list(l);
    }
    case F_STRING: return jv_str(str_of(r, v));
    case F_SUM: {
        jv at = arg(A, 0, "attribute", NONE), acc = arg(A, 1, "start", jv_int(0));
        jlist *l = iter_items(r, v, line);
        for (size_t i = 0; i < l->n; i++)
            acc = arith(r, OP_ADD, acc, at.t == JV_NONE ? l->v[i] : attr_path(r, l->v[i], str_of(r, at), line), line);
        return acc;
    }
    case F_TOJSON: {
        jjson_opts o = {0};
        jv ind = arg(A, 0, "indent", NONE);
        if (ind.t == JV_INT || ind.t == JV_BOOL) {
            int64_t k = ival(ind);
            if (k > 1000) jj_fail(r->e, line, "indent too large");
            char *sp = jj_alloc(r->a, (size_t)(k > 0 ? k : 0) + 1);
            memset(sp, ' ', (size_t)(k > 0 ? k : 0));
            o.indent = (js){sp, (size_t)(k > 0 ? k : 0)};
            o.has_indent = 1;
        } else if (ind.t == JV_STR) {
            o.indent = ind.u.s;
            o.has_indent = 1;
        } else if (ind.t != JV_NONE && ind.t != JV_UNDEF) {
            jj_fail(r->e, line, "tojson indent must be an int or a string");
        }
        o.item_sep = o.has_indent ? S(",") : S(", ");
        o.key_sep = S(": ");
        jv seps = arg(A, 1, "separators", NONE);
        if (seps.t == JV_LIST && seps.u.l->n == 2 && seps.u.l->v[0].t == JV_STR && seps.u.l->v[1].t == JV_STR) {
            o.item_sep = seps.u.l->v[0].u.s;
            o.key_sep = seps.u.l->v[1].u.s;
        }
        o.ensure_ascii = jv_truthy(arg(A, (size_t)-1, "ensure_ascii", jv_bool(0)));
        o.sort_keys = jv_truthy(arg(A, (size_t)-1, "sort_keys", jv_bool(0)));
        o.html = (r->flags & JINJA_TOJSON_HTMLSAFE) != 0;
        jbuf b = newbuf(r);
        jv_json(&b, v, &o, 0);
        return mkstr(r, &b);
    }
    case F_TRIM: {
        jv c = arg(A, 0, "chars", NONE);
        js chars = c.t == JV_STR ? c.u.s : (js){0};
        return jv_str(strip(str_of(r, v), c.t == JV_STR ? &chars : NULL, 1, 1));
    }
    case F_WORDCOUNT: {
        js s = str_of(r, v);
        int64_t n = 0;
        int in = 0;
        for (size_t i = 0; i < s.n; i++) {
            unsigned char c = (unsigned char)s.p[i];
            int w = c >= 0x80 || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z') || c == '_';
            if (w && !in) n++;
            in = w;
        }
        return jv_int(n);
    }
    default:
        jj_fail(r->e, line, "filter '%s' is not supported", FILTERS[id]);
    }
}

/* ---------------------------------------------------------------- tests */

static int apply_test(R *r, int id, jv v, jargs *A, int line) {
    jv a = arg(A, 0, NULL, UNDEF);
    switch (id) {
    case T_DEFINED: return v.t != JV_UNDEF;
    case T_UNDEFINED: return v.t == JV_UNDEF;
    case T_NONE: return v.t == JV_NONE;
    case T_BOOLEAN: return v.t == JV_BOOL;
    case T_FALSE: return v.t == JV_BOOL && !v.u.b;
    case T_TRUE: return v.t == JV_BOOL && v.u.b;
    case T_INTEGER: return v.t == JV_INT;
    case T_FLOAT: return v.t == JV_FLOAT;
    case T_NUMBER: return jv_is_num(v);
    case T_STRING: return v.t == JV_STR;
    case T_MAPPING: return v.t == JV_DICT && !v.u.d->ns;
    case T_ITERABLE: return v.t == JV_STR || v.t == JV_LIST || (v.t == JV_DICT && !v.u.d->ns) || v.t == JV_UNDEF;
    case T_SEQUENCE: return v.t == JV_STR || v.t == JV_LIST || (v.t == JV_DICT && !v.u.d->ns);
    case T_CALLABLE: return v.t == JV_FUNC;
    case T_SAMEAS:
        if (v.t != a.t) return 0;
        if (v.t == JV_NONE || v.t == JV_UNDEF) return 1;
        if (v.t == JV_BOOL) return v.u.b == a.u.b;
        if (v.t == JV_INT) return v.u.i == a.u.i && v.u.i >= -5 && v.u.i <= 256; /* CPython's small-int cache */
        if (v.t == JV_LIST) return v.u.l == a.u.l;
        if (v.t == JV_DICT) return v.u.d == a.u.d;
        if (v.t == JV_STR) return v.u.s.p == a.u.s.p && v.u.s.n == a.u.s.n;
        return 0;
    case T_ESCAPED: return v.t == JV_STR && v.markup;
    case T_IN: return contains(r, a, v, line);
    case T_LOWER: case T_UPPER: {
        js s = str_of(r, v);
        js c = jj_case(r->a, r->max_out, s, id == T_LOWER ? CASE_LOWER : CASE_UPPER);
        return c.n == s.n && !memcmp(c.p, s.p, s.n);
    }
    case T_EVEN: case T_ODD: {
        int64_t x = want_int(r, v, line, "even/odd operand");
        return id == T_EVEN ? x % 2 == 0 : x % 2 != 0;
    }
    case T_DIVISIBLEBY: {
        int64_t x = want_int(r, v, line, "divisibleby operand"), y = want_int(r, a, line, "divisibleby argument");
        if (y == 0) jj_fail(r->e, line, "integer division or modulo by zero");
        return y == -1 || x % y == 0;
    }
    case T_EQ: case T_EQUALTO: return jv_eq(v, a, 0);
    case T_NE: return !jv_eq(v, a, 0);
    case T_LT: case T_LESSTHAN: return compare(r, OP_LT, v, a, line);
    case T_LE: return compare(r, OP_LE, v, a, line);
    case T_GT: case T_GREATERTHAN: return compare(r, OP_GT, v, a, line);
    case T_GE: return compare(r, OP_GE, v, a, line);
    }
    jj_fail(r->e, line, "unknown test");
}

/* ---------------------------------------------------------------- expressions */

static jv eval(R *r, frame *f, const jnode *n) {
    enter(r, n->line);
    jv v = UNDEF;
    jargs A;
    switch (n->k) {
    case N_LIT: v = n->lit; break;
    case N_NAME: v = lookup(r, f, n->s); break;
    case N_ATTR: v = getattr_(r, eval(r, f, n->a), n->s, n->line); break;
    case N_ITEM: {
        jv o = eval(r, f, n->a);
        v = getitem(r, o, eval(r, f, n->b), n->line);
        break;
    }
    case N_SLICE: {
        jv o = eval(r, f, n->a);
        jv a = n->b ? eval(r, f, n->b) : NONE, b = n->c ? eval(r, f, n->c) : NONE;
        jv c = n->args.n ? eval(r, f, n->args.v[0]) : NONE;
        v = slice(r, o, a, b, c, n->line);
        break;
    }
    case N_CALL: {
        jv fn = eval(r, f, n->a);
        eval_args(r, f, &n->args, &A, 0, n->line);
        step(r, n->line);
        v = call(r, fn, &A, n->line);
        break;
    }
    case N_FILTER: {
        /* an unknown name inside an {% if %} was let through by the parser, as jinja2 does */
        if (n->op < 0) jj_fail(r->e, n->line, "No filter named '%.*s'", (int)(n->s.n > 60 ? 60 : n->s.n), n->s.p);
        jv x = eval(r, f, n->a);
        eval_args(r, f, &n->args, &A, 0, n->line);
        v = apply_filter(r, f, n->op, x, &A, n->line);
        break;
    }
    case N_TEST: {
        if (n->op < 0) jj_fail(r->e, n->line, "No test named '%.*s'", (int)(n->s.n > 60 ? 60 : n->s.n), n->s.p);
        jv x = eval(r, f, n->a);
        eval_args(r, f, &n->args, &A, 0, n->line);
        int t = apply_test(r, n->op, x, &A, n->line);
        v = jv_bool(n->neg ? !t : t);
        break;
    }
    case N_BIN: {
        jv a = eval(r, f, n->a), b = eval(r, f, n->b);
        if (n->op == OP_CONCAT) {
            jbuf o = newbuf(r);
            jv_put(&o, a, 0, 0);
            jv_put(&o, b, 0, 0);
            v = mkstr(r, &o);
        } else if (n->op >= OP_EQ) {
            v = jv_bool(compare(r, n->op, a, b, n->line));
        } else {
            v = arith(r, n->op, a, b, n->line);
        }
        break;
    }
    case N_NOT: v = jv_bool(!jv_truthy(eval(r, f, n->a))); break;
    case N_NEG: case N_POS: {
        jv a = eval(r, f, n->a);
        if (a.t == JV_INT || a.t == JV_BOOL) {
            int64_t x = ival(a);
            if (n->k == N_NEG && x == INT64_MIN) jj_fail(r->e, n->line, "integer overflow");
            v = jv_int(n->k == N_NEG ? -x : x);
        } else if (a.t == JV_FLOAT) {
            v = jv_float(n->k == N_NEG ? -a.u.f : a.u.f);
        } else {
            jj_fail(r->e, n->line, "bad operand type for unary %c: '%s'", n->k == N_NEG ? '-' : '+', jv_type_name(a));
        }
        break;
    }
    case N_AND: {
        jv a = eval(r, f, n->a);
        v = jv_truthy(a) ? eval(r, f, n->b) : a;
        break;
    }
    case N_OR: {
        jv a = eval(r, f, n->a);
        v = jv_truthy(a) ? a : eval(r, f, n->b);
        break;
    }
    case N_COND:
        if (jv_truthy(eval(r, f, n->a))) v = eval(r, f, n->b);
        else v = n->c ? eval(r, f, n->c) : UNDEF;
        break;
    case N_LIST: case N_TUPLE: {
        jlist *l = jl_new(r->a, n->args.n);
        l->tuple = n->k == N_TUPLE;
        for (size_t i = 0; i < n->args.n; i++) l->v[l->n++] = eval(r, f, n->args.v[i]);
        v = jv_list(l);
        break;
    }
    case N_DICT: {
        jdict *d = jd_new(r->a);
        for (size_t i = 0; i + 1 < n->args.n; i += 2) {
            jv k = eval(r, f, n->args.v[i]);
            if (k.t == JV_LIST && !k.u.l->tuple) jj_fail(r->e, n->line, "unhashable type: 'list'");
            if (k.t == JV_DICT) jj_fail(r->e, n->line, "unhashable type: 'dict'");
            jd_set(r->a, d, k, eval(r, f, n->args.v[i + 1]));
        }
        v = jv_dict(d);
        break;
    }
    default:
        jj_fail(r->e, n->line, "unexpected expression");
    }
    r->depth--;
    return v;
}

/* ---------------------------------------------------------------- statements */

static void unpack(R *r, frame *f, const jnlist *targets, jv v, int line) {
    if (targets->n == 1) {
        frame_set(r, f, targets->v[0]->s, v);
        return;
    }
    jlist *items = iter_items(r, v, line);
    if (items->n != targets->n)
        jj_fail(r->e, line, items->n > targets->n ? "too many values to unpack (expected %zu)" : "not enough values to unpack (expected %zu)",
                targets->n);
    for (size_t i = 0; i < targets->n; i++) frame_set(r, f, targets->v[i]->s, items->v[i]);
}

static int exec_for(R *r, frame *f, const jnode *n, jbuf *out) {
    jlist *src = iter_items(r, eval(r, f, n->a), n->line), *items = src;
    frame *lf = frame_new(r, f);
    if (n->b) {
        items = jl_new(r->a, src->n);
        for (size_t i = 0; i < src->n; i++) {
            step(r, n->line);
            lf->n = 0;
            unpack(r, lf, &n->args, src->v[i], n->line);
            if (jv_truthy(eval(r, lf, n->b))) items->v[items->n++] = src->v[i];
        }
    } else if (src->n) {
        /* iterate over a snapshot: the body cannot change what the loop walks */
        items = jl_new(r->a, src->n);
        memcpy(items->v, src->v, src->n * sizeof *src->v);
        items->n = src->n;
    }
    if (!items->n) {
        lf->n = 0;
        return exec_list(r, lf, &n->els, out);
    }
    jloop *L = jj_alloc(r->a, sizeof *L);
    L->length = (int64_t)items->n;
    L->items = items;
    jv lv = {.t = JV_LOOP};
    lv.u.lp = L;
    for (size_t i = 0; i < items->n; i++) {
        step(r, n->line);
        L->index0 = (int64_t)i;
        /* each iteration starts from a fresh scope, as in jinja2 */
        lf->n = 0;
        unpack(r, lf, &n->args, items->v[i], n->line);
        frame_set(r, lf, S("loop"), lv);
        int fl = exec_list(r, lf, &n->body, out);
        if (fl == FLOW_BREAK) break;
    }
    return FLOW_NORMAL;
}

static void assign(R *r, frame *f, const jnode *t, jv v, int line) {
    if (t->k == N_NAME) {
        frame_set(r, f, t->s, v);
        return;
    }
    jv o = lookup(r, f, t->a->s);
    if (o.t != JV_DICT || !o.u.d->ns) jj_fail(r->e, line, "cannot assign attribute on non-namespace object");
    jd_set(r->a, o.u.d, jv_str(t->s), v);
}

static int exec_node(R *r, frame *f, const jnode *n, jbuf *out) {
    step(r, n->line);
    switch (n->k) {
    case N_TEXT: jb_put(out, n->s.p, n->s.n); return FLOW_NORMAL;
    case N_OUT: jv_put(out, eval(r, f, n->a), 0, 0); return FLOW_NORMAL;
    case N_IF:
        if (jv_truthy(eval(r, f, n->a))) return exec_list(r, f, &n->body, out);
        return exec_list(r, f, &n->els, out);
    case N_FOR: return exec_for(r, f, n, out);
    case N_SET: {
        jv v = eval(r, f, n->a);
        if (n->args.n == 1) {
            assign(r, f, n->args.v[0], v, n->line);
        } else {
            jlist *items = iter_items(r, v, n->line);
            if (items->n != n->args.n) jj_fail(r->e, n->line, "cannot unpack %zu values into %zu names", items->n, n->args.n);
            for (size_t i = 0; i < items->n; i++) assign(r, f, n->args.v[i], items->v[i], n->line);
        }
        return FLOW_NORMAL;
    }
    case N_SETBLOCK: case N_FILTERBLOCK: {
        jbuf b = newbuf(r);
        int fl = exec_list(r, f, &n->body, &b);
        jv v = mkstr(r, &b);
        /* filters of "{% set x | f %}" / "{% filter f %}" wrap an N_BODY placeholder for the captured text */
        const jnode *chain[64];
        size_t nc = 0;
        for (const jnode *x = n->a; x && x->k == N_FILTER && nc < 64; x = x->a) chain[nc++] = x;
        for (size_t i = nc; i-- > 0;) {
            jargs A;
            eval_args(r, f, &chain[i]->args, &A, 0, chain[i]->line);
            v = apply_filter(r, f, chain[i]->op, v, &A, chain[i]->line);
        }
        if (n->k == N_SETBLOCK) frame_set(r, f, n->args.v[0]->s, v);
        else jv_put(out, v, 0, 0);
        return fl;
    }
    case N_MACRO: frame_set(r, f, n->s, fnval(r, FN_MACRO, 0, UNDEF, n)); return FLOW_NORMAL;
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    case N_BODY: return exec_list(r, f, &n->body, out);
    }
    jj_fail(r->e, n->line, "unexpected statement");
}

static int exec_list(R *r, frame *f, const jnlist *l, jbuf *out) {
    enter(r, 0);
    int fl = FLOW_NORMAL;
    for (size_t i = 0; i < l->n && fl == FLOW_NORMAL; i++) fl = exec_node(r, f, l->v[i], out);
    r->depth--;
    return fl;
}

/* ---------------------------------------------------------------- context and entry points */

static jv from_json(R *r, const cJSON *j, int depth) {
    if (depth > JINJA_MAX_VDEPTH) jj_fail(r->e, 0, "context nested too deeply");
    if (!j || cJSON_IsNull(j)) return NONE;
    if (cJSON_IsBool(j)) return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        /* cJSON keeps only a double: integral values within 2^53 are ints, as Python's json reads them */
        double d = j->valuedouble;
        if (isfinite(d) && d == floor(d) && fabs(d) <= 9007199254740992.0) return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j)) return jv_str((js){j->valuestring ? j->valuestring : "", j->valuestring ? strlen(j->valuestring) : 0});
    if (cJSON_IsArray(j)) {
        jlist *l = jl_new(r->a, 0);
        for (const cJSON *c = j->child; c; c = c->next) jl_push(r->a, l, from_json(r, c, depth + 1));
        return jv_list(l);
    }
    if (cJSON_IsObject(j)) {
        jdict *d = jd_new(r->a);
        for (const cJSON *c = j->child; c; c = c->next) {
            js k = {c->string ? c->string : "", c->string ? strlen(c->string) : 0};
            jd_set(r->a, d, jv_str(k), from_json(r, c, depth + 1));
        }
        return jv_dict(d);
    }
    return UNDEF;
}

char *jinja_render_ex(const jinja_template *t, const cJSON *context, const jinja_limits *lim, size_t *out_len,
                      int *raised, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (raised) *raised = 0;
    if (out_len) *out_len = 0;
    if (!t) {
        if (err && errlen) snprintf(err, errlen, "no template");
        return NULL;
    }
    jerr *e = calloc(1, sizeof *e);
    R *r = calloc(1, sizeof *r);
    jarena *a = calloc(1, sizeof *a);
    if (!e || !r || !a) {
        free(e);
        free(r);
        free(a);
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return NULL;
    }
    e->buf = err;
    e->len = errlen;
    a->e = e;
    a->limit = lim && lim->max_memory ? lim->max_memory : (size_t)512 << 20;
    r->e = e;
    r->a = a;
    r->flags = t->flags;
    r->max_out = lim && lim->max_output ? lim->max_output : (size_t)64 << 20;
    r->max_steps = lim && lim->max_steps ? lim->max_steps : 5000000;
    /* volatile: assigned after setjmp and read after a possible longjmp */
    char *volatile res = NULL;
    if (setjmp(e->jb) == 0) {
        jv c = from_json(r, context, 0);
        r->ctx = c.t == JV_DICT ? c.u.d : jd_new(a);
        r->root = frame_new(r, NULL);
        jbuf out = newbuf(r);
        exec_list(r, r->root, &t->body, &out);
        res = malloc(out.n + 1);
        if (res) {
            memcpy(res, out.p, out.n);
            res[out.n] = 0;
            if (out_len) *out_len = out.n;
        } else if (err && errlen) {
            snprintf(err, errlen, "out of memory");
        }
    } else if (raised) {
        *raised = e->raised;
    }
    jj_arena_free(a);
    free(a);
    free(r);
    free(e);
    return res;
}

char *jinja_render(const jinja_template *t, const cJSON *context, char *err, size_t errlen) {
    return jinja_render_ex(t, context, NULL, NULL, NULL, err, errlen);
}
