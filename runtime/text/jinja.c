/* jinja.c — the jinja renderer: evaluates the parsed template against a JSON context with jinja2's
 * semantics: scopes, attribute and item access, operators, calls (macros, globals), expressions and
 * statements. Filters and tests are in jinja_filters.c, methods in jinja_methods.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja_render.h"

/* ---------------------------------------------------------------- callables */

enum { FN_RANGE, FN_NAMESPACE, FN_RAISE, FN_STRFTIME, FN_DICT, FN_MACRO, FN_METHOD };

struct jfunc {
    int kind, mid;
    jv self;
    const jnode *macro;
};

/* ---------------------------------------------------------------- render state */

typedef struct var {
    js name;
    jv v;
} var;

struct frame {
    struct frame *parent;
    var *v;
    size_t n, cap;
};

enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };

static struct jfunc G_RANGE = {FN_RANGE, 0, {0}, NULL}, G_NAMESPACE = {FN_NAMESPACE, 0, {0}, NULL},
                    G_RAISE = {FN_RAISE, 0, {0}, NULL}, G_STRFTIME = {FN_STRFTIME, 0, {0}, NULL},
                    G_DICT = {FN_DICT, 0, {0}, NULL};

static void step(R *r, int line) {
    if (++r->steps > r->max_steps) jj_fail(r->e, line, "template exceeded %ld steps", r->max_steps);
}

static void enter(R *r, int line) {
    if (++r->depth > JINJA_MAX_DEPTH) jj_fail(r->e, line, "template recursion too deep");
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

jv jj_arg(jargs *A, size_t i, const char *name, jv dflt) {
    if (i < A->npos) return A->pos[i];
    for (size_t k = 0; name && k < A->nkw; k++)
        if (js_eq(A->kn[k], name)) return A->kv[k];
    return dflt;
}

int jj_has_arg(jargs *A, size_t i, const char *name) {
    if (i < A->npos) return 1;
    for (size_t k = 0; name && k < A->nkw; k++)
        if (js_eq(A->kn[k], name)) return 1;
    return 0;
}

int64_t jj_want_int(R *r, jv v, int line, const char *what) {
    if (v.t == JV_INT) return v.u.i;
    if (v.t == JV_BOOL) return v.u.b;
    jj_fail(r->e, line, "%s must be an integer, not %s", what, jv_type_name(v));
}

js jj_want_str(R *r, jv v, int line, const char *what) {
    if (v.t == JV_STR) return v.u.s;
    jj_fail(r->e, line, "%s must be a string, not %s", what, jv_type_name(v));
}

/* ---------------------------------------------------------------- iteration and access */

/* The items a for loop (or a filter) walks: list items, dict keys, string characters. */
jlist *jj_iter_items(R *r, jv v, int line) {
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

jlist *jj_dict_items(R *r, jdict *d) {
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


jv jj_getattr(R *r, jv o, js name, int line) {
    int m;
    switch (o.t) {
    case JV_DICT:
        if (!o.u.d->ns && (m = jj_method_id(name, M_ITEMS, M_CYCLE)) >= 0) return fnval(r, FN_METHOD, m, o, NULL);
        {
            jv *p = jd_gets(o.u.d, name);
            return p ? *p : UNDEF;
        }
    case JV_STR:
        if ((m = jj_method_id(name, M_STRIP, M_ITEMS)) >= 0) return fnval(r, FN_METHOD, m, o, NULL);
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

jv jj_getitem(R *r, jv o, jv k, int line) {
    if (o.t == JV_DICT) {
        jv *p = o.u.d->ns ? (k.t == JV_STR ? jd_gets(o.u.d, k.u.s) : NULL) : jd_get(o.u.d, k);
        if (p) return *p;
        if (k.t == JV_STR && !o.u.d->ns) return jj_getattr(r, o, k.u.s, line);
        return UNDEF;
    }
    if ((o.t == JV_LIST || o.t == JV_STR) && (k.t == JV_INT || k.t == JV_BOOL)) {
        int64_t i = k.t == JV_INT ? k.u.i : k.u.b;
        if (o.t == JV_LIST) {
            int64_t n = (int64_t)o.u.l->n;
            if (i < 0) i += n;
            return i >= 0 && i < n ? o.u.l->v[i] : UNDEF;
        }
        jlist *cs = jj_iter_items(r, o, line);
        int64_t n = (int64_t)cs->n;
        if (i < 0) i += n;
        return i >= 0 && i < n ? cs->v[i] : UNDEF;
    }
    if (k.t == JV_STR) return jj_getattr(r, o, k.u.s, line);
    return UNDEF;
}

/* Python slice semantics (negative indices, clamping, negative steps). */
static jv slice(R *r, jv o, jv a, jv b, jv c, int line) {
    if (o.t == JV_UNDEF) return UNDEF;
    if (o.t != JV_LIST && o.t != JV_STR) jj_fail(r->e, line, "'%s' object is not subscriptable", jv_type_name(o));
    int64_t st = c.t == JV_NONE || c.t == JV_UNDEF ? 1 : jj_want_int(r, c, line, "slice step");
    if (st == 0) jj_fail(r->e, line, "slice step cannot be zero");
    jlist *items = o.t == JV_LIST ? o.u.l : jj_iter_items(r, o, line);
    int64_t n = (int64_t)items->n, lo, hi;
    if (a.t == JV_NONE || a.t == JV_UNDEF) lo = st < 0 ? n - 1 : 0;
    else {
        lo = jj_want_int(r, a, line, "slice index");
        if (lo < 0) { lo += n; if (lo < 0) lo = st < 0 ? -1 : 0; }
        else if (lo >= n) lo = st < 0 ? n - 1 : n;
    }
    if (b.t == JV_NONE || b.t == JV_UNDEF) hi = st < 0 ? -1 : n;
    else {
        hi = jj_want_int(r, b, line, "slice index");
        if (hi < 0) { hi += n; if (hi < 0) hi = st < 0 ? -1 : 0; }
        else if (hi >= n) hi = st < 0 ? n - 1 : n;
    }
    if (o.t == JV_LIST) {
        jlist *l = jl_new(r->a, 0);
        l->tuple = o.u.l->tuple;
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) jl_push(r->a, l, items->v[i]);
        return jv_list(l);
    }
    jbuf out = jj_newbuf(r);
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) jb_put(&out, items->v[i].u.s.p, items->v[i].u.s.n);
    return jj_mkstr(&out);
}

/* ---------------------------------------------------------------- arithmetic */

static _Noreturn void bad_operands(R *r, const char *op, jv a, jv b, int line) {
    jj_fail(r->e, line, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

jv jj_arith(R *r, int op, jv a, jv b, int line) {
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (a.t == JV_UNDEF || b.t == JV_UNDEF) jj_fail(r->e, line, "undefined value used with '%s'", names[op]);
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
        /* Markup + str and str + Markup escape the plain side and stay Markup (markupsafe) */
        const int markup = a.markup || b.markup;
        if (markup && !a.markup) a = jj_html_escape(r, a.u.s);
        if (markup && !b.markup) b = jj_html_escape(r, b.u.s);
        jbuf o = jj_newbuf(r);
        jb_put(&o, a.u.s.p, a.u.s.n);
        jb_put(&o, b.u.s.p, b.u.s.n);
        jv out = jj_mkstr(&o);
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
        int64_t k = jv_ival(a.t == JV_STR || a.t == JV_LIST ? b : a);
        if (k < 0) k = 0;
        size_t unit = s.t == JV_STR ? s.u.s.n : s.u.l->n * sizeof(jv);
        if (unit && (uint64_t)k > r->max_out / unit) jj_fail(r->e, line, "repetition result too large");
        if (s.t == JV_STR) {
            jbuf o = jj_newbuf(r);
            for (int64_t i = 0; i < k; i++) jb_put(&o, s.u.s.p, s.u.s.n);
            return jj_mkstr(&o);
        }
        jlist *l = jl_new(r->a, s.u.l->n * (size_t)k);
        l->tuple = s.u.l->tuple;
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < s.u.l->n; j++) l->v[l->n++] = s.u.l->v[j];
        return jv_list(l);
    }
    if (!jv_is_num(a) || !jv_is_num(b)) bad_operands(r, names[op], a, b, line);
    if (a.t != JV_FLOAT && b.t != JV_FLOAT && op != OP_DIV) {
        int64_t x = jv_ival(a), y = jv_ival(b), z = 0;
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

int jj_contains(R *r, jv hay, jv needle, int line) {
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

int jj_compare(R *r, int op, jv a, jv b, int line) {
    switch (op) {
    case OP_EQ: return jv_eq(a, b, 0);
    case OP_NE: return !jv_eq(a, b, 0);
    case OP_IN: return jj_contains(r, b, a, line);
    case OP_NOTIN: return !jj_contains(r, b, a, line);
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

/* ---------------------------------------------------------------- calls */

static jv eval(R *r, frame *f, const jnode *n);
static int exec_list(R *r, frame *f, const jnlist *l, jbuf *out);

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
    jbuf out = jj_newbuf(r);
    exec_list(r, f, &m->body, &out);
    r->depth--;
    return jj_mkstr(&out);
}

static jv call(R *r, jv fn, jargs *A, int line) {
    if (fn.t != JV_FUNC) {
        if (fn.t == JV_UNDEF) jj_fail(r->e, line, "'Undefined' object is not callable");
        jj_fail(r->e, line, "'%s' object is not callable", jv_type_name(fn));
    }
    jfunc *F = fn.u.fn;
    switch (F->kind) {
    case FN_MACRO: return call_macro(r, F->macro, A, line);
    case FN_METHOD: return jj_call_method(r, F->self, F->mid, A, line);
    case FN_RAISE: {
        js msg = jj_str_of(r, jj_arg(A, 0, NULL, UNDEF));
        r->e->raised = 1;
        jj_fail(r->e, 0, "%.*s", (int)(msg.n > 4000 ? 4000 : msg.n), msg.p);
    }
    case FN_RANGE: {
        int64_t a = 0, b, s = 1;
        if (A->npos == 0 || A->npos > 3) jj_fail(r->e, line, "range expected 1 to 3 arguments, got %zu", A->npos);
        if (A->npos == 1) b = jj_want_int(r, A->pos[0], line, "range argument");
        else {
            a = jj_want_int(r, A->pos[0], line, "range argument");
            b = jj_want_int(r, A->pos[1], line, "range argument");
            if (A->npos == 3) s = jj_want_int(r, A->pos[2], line, "range argument");
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
        js fmt = jj_want_str(r, jj_arg(A, 0, "format", UNDEF), line, "strftime_now format");
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

/* ---------------------------------------------------------------- expressions */

static jv eval(R *r, frame *f, const jnode *n) {
    enter(r, n->line);
    jv v = UNDEF;
    jargs A;
    switch (n->k) {
    case N_LIT: v = n->lit; break;
    case N_NAME: v = lookup(r, f, n->s); break;
    case N_ATTR: v = jj_getattr(r, eval(r, f, n->a), n->s, n->line); break;
    case N_ITEM: {
        jv o = eval(r, f, n->a);
        v = jj_getitem(r, o, eval(r, f, n->b), n->line);
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
        v = jj_apply_filter(r, n->op, x, &A, n->line);
        break;
    }
    case N_TEST: {
        if (n->op < 0) jj_fail(r->e, n->line, "No test named '%.*s'", (int)(n->s.n > 60 ? 60 : n->s.n), n->s.p);
        jv x = eval(r, f, n->a);
        eval_args(r, f, &n->args, &A, 0, n->line);
        int t = jj_apply_test(r, n->op, x, &A, n->line);
        v = jv_bool(n->neg ? !t : t);
        break;
    }
    case N_BIN: {
        jv a = eval(r, f, n->a), b = eval(r, f, n->b);
        if (n->op == OP_CONCAT) {
            jbuf o = jj_newbuf(r);
            jv_put(&o, a, 0, 0);
            jv_put(&o, b, 0, 0);
            v = jj_mkstr(&o);
        } else if (n->op >= OP_EQ) {
            v = jv_bool(jj_compare(r, n->op, a, b, n->line));
        } else {
            v = jj_arith(r, n->op, a, b, n->line);
        }
        break;
    }
    case N_NOT: v = jv_bool(!jv_truthy(eval(r, f, n->a))); break;
    case N_NEG: case N_POS: {
        jv a = eval(r, f, n->a);
        if (a.t == JV_INT || a.t == JV_BOOL) {
            int64_t x = jv_ival(a);
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
    jlist *items = jj_iter_items(r, v, line);
    if (items->n != targets->n)
        jj_fail(r->e, line, items->n > targets->n ? "too many values to unpack (expected %zu)" : "not enough values to unpack (expected %zu)",
                targets->n);
    for (size_t i = 0; i < targets->n; i++) frame_set(r, f, targets->v[i]->s, items->v[i]);
}

static int exec_for(R *r, frame *f, const jnode *n, jbuf *out) {
    jlist *src = jj_iter_items(r, eval(r, f, n->a), n->line), *items = src;
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
        frame_set(r, lf, js_cstr("loop"), lv);
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
            jlist *items = jj_iter_items(r, v, n->line);
            if (items->n != n->args.n) jj_fail(r->e, n->line, "cannot unpack %zu values into %zu names", items->n, n->args.n);
            for (size_t i = 0; i < items->n; i++) assign(r, f, n->args.v[i], items->v[i], n->line);
        }
        return FLOW_NORMAL;
    }
    case N_SETBLOCK: case N_FILTERBLOCK: {
        jbuf b = jj_newbuf(r);
        int fl = exec_list(r, f, &n->body, &b);
        jv v = jj_mkstr(&b);
        /* filters of "{% set x | f %}" / "{% filter f %}" wrap an N_BODY placeholder for the captured text */
        const jnode *chain[64];
        size_t nc = 0;
        for (const jnode *x = n->a; x && x->k == N_FILTER && nc < 64; x = x->a) chain[nc++] = x;
        for (size_t i = nc; i-- > 0;) {
            jargs A;
            eval_args(r, f, &chain[i]->args, &A, 0, chain[i]->line);
            v = jj_apply_filter(r, chain[i]->op, v, &A, chain[i]->line);
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
        jbuf out = jj_newbuf(r);
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
