/* jinja_filters.c — jinja2's filters ("value | name(args)") and tests ("value is name(args)"): one
 * function per filter in a table that the id the parser resolved indexes, and the tests. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "jinja_render.h"

static int name_is(const char *name, const char *s, size_t len) { return strlen(name) == len && !memcmp(name, s, len); }

/* ---------------------------------------------------------------- helpers */

jv jj_html_escape(R *r, js s) {
    jbuf o = jj_newbuf(r);
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
    jv v = jj_mkstr(&o);
    v.markup = 1;
    return v;
}

static js str_arg(R *r, jv v) { return jj_str_of(r, v); }

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
        if (digits && part.n < 18) item = jj_getitem(r, item, jv_int(atoll(part.p)), line);
        else item = jj_getitem(r, item, jv_str(part), line);
        if (!dot) break;
        i = e + 1;
    }
    return item;
}

static jv apply_filter_name(R *r, js name, jv v, jargs *A, int line) {
    int id = jj_filter_id(name.p, name.n);
    if (id < 0) jj_fail(r->e, line, "unknown filter '%.*s'", (int)(name.n > 60 ? 60 : name.n), name.p);
    return jj_apply_filter(r, id, v, A, line);
}

/* select/reject/selectattr/rejectattr: test name at position `first`, test arguments after it */
static int run_select_test(R *r, jv item, jargs *A, size_t first, int line) {
    if (A->npos <= first) return jv_truthy(item);
    js tn = jj_want_str(r, A->pos[first], line, "test name");
    int id = jj_test_id(tn.p, tn.n);
    if (id < 0) jj_fail(r->e, line, "unknown test '%.*s'", (int)(tn.n > 60 ? 60 : tn.n), tn.p);
    jargs T = {0};
    for (size_t i = first + 1; i < A->npos; i++) T.pos[T.npos++] = A->pos[i];
    return jj_apply_test(r, id, item, &T, line);
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
        js s = jj_strip(v.u.s, NULL, 1, 1);
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

/* ---------------------------------------------------------------- filters */

/* One signature for every filter, so that the table can hold them all: the value piped in, the
 * arguments in parentheses and the line that errors name; not every filter reads all of them. */
#define MAYBE_UNUSED __attribute__((unused))
#define FILTER(name) static jv name(MAYBE_UNUSED R *r, jv v, MAYBE_UNUSED jargs *A, MAYBE_UNUSED int line)
typedef jv (*filter_fn)(R *r, jv v, jargs *A, int line);

FILTER(filter_abs) {
    if (v.t == JV_INT) {
        if (v.u.i == INT64_MIN) jj_fail(r->e, line, "integer overflow");
        return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    }
    if (v.t == JV_BOOL) return jv_int(v.u.b);
    if (v.t == JV_FLOAT) return jv_float(fabs(v.u.f));
    jj_fail(r->e, line, "bad operand type for abs(): '%s'", jv_type_name(v));
}

FILTER(filter_attr) {
    /* attr() looks up Python attributes only: a dict's keys are not attributes */
    js name = str_arg(r, jj_arg(A, 0, "name", UNDEF));
    if (v.t == JV_DICT && (v.u.d->ns || jj_method_id(name, M_ITEMS, M_CYCLE) < 0)) return v.u.d->ns ? jj_getattr(r, v, name, line) : UNDEF;
    return jj_getattr(r, v, name, line);
}

FILTER(filter_capitalize) { return jv_str(jj_case(r->a, r->max_out, jj_str_of(r, v), CASE_CAPITALIZE)); }

FILTER(filter_title) { return jv_str(jj_case(r->a, r->max_out, jj_str_of(r, v), CASE_JTITLE)); }

FILTER(filter_lower) { return jv_str(jj_case(r->a, r->max_out, jj_str_of(r, v), CASE_LOWER)); }

FILTER(filter_upper) { return jv_str(jj_case(r->a, r->max_out, jj_str_of(r, v), CASE_UPPER)); }

FILTER(filter_length) {
    switch (v.t) {
    case JV_UNDEF: return jv_int(0);
    case JV_STR: return jv_int((int64_t)jj_u8count(v.u.s.p, v.u.s.n));
    case JV_LIST: return jv_int((int64_t)v.u.l->n);
    case JV_DICT: if (!v.u.d->ns) return jv_int((int64_t)v.u.d->n); break;
    default: break;
    }
    jj_fail(r->e, line, "object of type '%s' has no len()", jv_type_name(v));
}

FILTER(filter_default) {
    jv d = jj_arg(A, 0, "default_value", jv_str(js_cstr("")));
    int boolean = jv_truthy(jj_arg(A, 1, "boolean", jv_bool(0)));
    if (v.t == JV_UNDEF || (boolean && !jv_truthy(v))) return d;
    return v;
}

FILTER(filter_dictsort) {
    if (v.t != JV_DICT) jj_fail(r->e, line, "dictsort filter needs a dict, not %s", jv_type_name(v));
    int cs = jv_truthy(jj_arg(A, 0, "case_sensitive", jv_bool(0)));
    js by = str_arg(r, jj_arg(A, 1, "by", jv_str(js_cstr("key"))));
    int rev = jv_truthy(jj_arg(A, 2, "reverse", jv_bool(0)));
    jlist *items = jj_dict_items(r, v.u.d);
    jv *keys = jj_alloc(r->a, (items->n + 1) * sizeof *keys);
    int pos = js_eq(by, "value") ? 1 : 0;
    if (!pos && !js_eq(by, "key")) jj_fail(r->e, line, "You can only sort by either \"key\" or \"value\"");
    for (size_t i = 0; i < items->n; i++) keys[i] = items->v[i].u.l->v[pos];
    sort_by(r, items->v, keys, items->n, !cs, rev, line);
    return jv_list(items);
}

/* escape leaves a Markup alone (it is escaped already); forceescape does not */
FILTER(filter_escape) {
    if (v.t == JV_STR && v.markup) return v;
    return jj_html_escape(r, jj_str_of(r, v));
}

FILTER(filter_forceescape) { return jj_html_escape(r, jj_str_of(r, v)); }

static jv end_item(R *r, jv v, int last, int line) {
    if (v.t == JV_UNDEF) return UNDEF;
    jlist *l = jj_iter_items(r, v, line);
    if (!l->n) return UNDEF;
    return !last ? l->v[0] : l->v[l->n - 1];
}

FILTER(filter_first) { return end_item(r, v, 0, line); }
FILTER(filter_last) { return end_item(r, v, 1, line); }

FILTER(filter_float) {
    jv d = jj_arg(A, 0, "default", jv_float(0.0));
    if (v.t == JV_FLOAT) return v;
    if (v.t == JV_INT || v.t == JV_BOOL) return jv_float(jv_num(v));
    if (v.t == JV_STR) {
        js s = jj_strip(v.u.s, NULL, 1, 1);
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

FILTER(filter_int) {
    jv d = jj_arg(A, 0, "default", jv_int(0));
    int64_t base = jj_want_int(r, jj_arg(A, 1, "base", jv_int(10)), line, "base");
    if (base < 2 || base > 36) base = 10;
    return to_int(r, v, d, base);
}

FILTER(filter_indent) {
    jv w = jj_arg(A, 0, "width", jv_int(4));
    int first = jv_truthy(jj_arg(A, 1, "first", jv_bool(0))), blank = jv_truthy(jj_arg(A, 2, "blank", jv_bool(0)));
    jbuf ind = jj_newbuf(r);
    if (w.t == JV_STR) jb_put(&ind, w.u.s.p, w.u.s.n);
    else {
        int64_t k = jj_want_int(r, w, line, "indent width");
        if (k > 1000) jj_fail(r->e, line, "indent width too large");
        for (int64_t i = 0; i < k; i++) jb_putc(&ind, ' ');
    }
    js s = jj_str_of(r, v);
    jbuf tmp = jj_newbuf(r);
    jb_put(&tmp, s.p, s.n);
    jb_putc(&tmp, '\n'); /* jinja2 appends a newline so splitlines keeps a trailing empty line */
    jlist *lines = jj_splitlines(r, (js){tmp.p, tmp.n});
    jbuf o = jj_newbuf(r);
    for (size_t i = 0; i < lines->n; i++) {
        js ln = lines->v[i].u.s;
        if (i) {
            jb_putc(&o, '\n');
            if (blank || ln.n) jb_put(&o, ind.p, ind.n);
        }
        jb_put(&o, ln.p, ln.n);
    }
    if (first) {
        jbuf o2 = jj_newbuf(r);
        jb_put(&o2, ind.p, ind.n);
        jb_put(&o2, o.p, o.n);
        return jj_mkstr(&o2);
    }
    return jj_mkstr(&o);
}

FILTER(filter_items) {
    if (v.t == JV_UNDEF) return jv_list(jl_new(r->a, 0));
    if (v.t != JV_DICT || v.u.d->ns) jj_fail(r->e, line, "Can only get item pairs from a mapping.");
    return jv_list(jj_dict_items(r, v.u.d));
}

FILTER(filter_join) {
    js sep = str_arg(r, jj_arg(A, 0, "d", jv_str(js_cstr(""))));
    jv at = jj_arg(A, 1, "attribute", NONE);
    jlist *l = jj_iter_items(r, v, line);
    jbuf o = jj_newbuf(r);
    for (size_t i = 0; i < l->n; i++) {
        if (i) jb_put(&o, sep.p, sep.n);
        jv it = at.t == JV_NONE ? l->v[i] : attr_path(r, l->v[i], jj_str_of(r, at), line);
        jv_put(&o, it, 0, 0);
    }
    return jj_mkstr(&o);
}

FILTER(filter_list) {
    jlist *src = jj_iter_items(r, v, line), *l = jl_new(r->a, src->n);
    for (size_t i = 0; i < src->n; i++) l->v[l->n++] = src->v[i];
    return jv_list(l);
}

FILTER(filter_map) {
    /* jinja2's map/select family yields nothing for a falsy value (None included) */
    jlist *src = jv_truthy(v) ? jj_iter_items(r, v, line) : jl_new(r->a, 0), *l = jl_new(r->a, src->n);
    if (jj_has_arg(A, (size_t)-1, "attribute")) {
        js at = jj_str_of(r, jj_arg(A, (size_t)-1, "attribute", UNDEF));
        jv dflt = jj_arg(A, (size_t)-1, "default", UNDEF);
        for (size_t i = 0; i < src->n; i++) {
            jv x = attr_path(r, src->v[i], at, line);
            l->v[l->n++] = x.t == JV_UNDEF ? dflt : x;
        }
        return jv_list(l);
    }
    if (!A->npos) jj_fail(r->e, line, "map requires a filter argument");
    js fname = jj_want_str(r, A->pos[0], line, "filter name");
    jargs B = *A;
    B.npos = 0;
    for (size_t i = 1; i < A->npos; i++) B.pos[B.npos++] = A->pos[i];
    for (size_t i = 0; i < src->n; i++) l->v[l->n++] = apply_filter_name(r, fname, src->v[i], &B, line);
    return jv_list(l);
}

static jv extreme(R *r, jv v, jargs *A, int max, int line) {
    jlist *l = jj_iter_items(r, v, line);
    int cs = jv_truthy(jj_arg(A, 0, "case_sensitive", jv_bool(0)));
    jv at = jj_arg(A, 1, "attribute", NONE);
    if (!l->n) return UNDEF;
    size_t best = 0;
    for (size_t i = 1; i < l->n; i++) {
        jv a = at.t == JV_NONE ? l->v[i] : attr_path(r, l->v[i], jj_str_of(r, at), line);
        jv b = at.t == JV_NONE ? l->v[best] : attr_path(r, l->v[best], jj_str_of(r, at), line);
        int c = sort_cmp_ci(r, a, b, !cs, line);
        if (max ? c > 0 : c < 0) best = i;
    }
    return l->v[best];
}

FILTER(filter_max) { return extreme(r, v, A, 1, line); }
FILTER(filter_min) { return extreme(r, v, A, 0, line); }

/* select/reject (attr = 0) and selectattr/rejectattr (attr = 1): the items whose test result is want */
static jv select_items(R *r, jv v, jargs *A, int attr, int want, int line) {
    jlist *src = jv_truthy(v) ? jj_iter_items(r, v, line) : jl_new(r->a, 0), *l = jl_new(r->a, src->n);
    if (attr && !A->npos) jj_fail(r->e, line, "Missing parameter for attribute name");
    js at = attr ? jj_str_of(r, A->pos[0]) : (js){0};
    for (size_t i = 0; i < src->n; i++) {
        jv x = attr ? attr_path(r, src->v[i], at, line) : src->v[i];
        if (run_select_test(r, x, A, attr ? 1 : 0, line) == want) l->v[l->n++] = src->v[i];
    }
    return jv_list(l);
}

FILTER(filter_select) { return select_items(r, v, A, 0, 1, line); }
FILTER(filter_reject) { return select_items(r, v, A, 0, 0, line); }
FILTER(filter_selectattr) { return select_items(r, v, A, 1, 1, line); }
FILTER(filter_rejectattr) { return select_items(r, v, A, 1, 0, line); }

FILTER(filter_replace) {
    js s = jj_str_of(r, v);
    return jv_str(jj_replace(r, s, str_arg(r, jj_arg(A, 0, "old", jv_str(js_cstr("")))), str_arg(r, jj_arg(A, 1, "new", jv_str(js_cstr("")))),
                             jj_want_int(r, jj_arg(A, 2, "count", jv_int(-1)), line, "count")));
}

FILTER(filter_reverse) {
    if (v.t == JV_STR) {
        jlist *cs = jj_iter_items(r, v, line);
        jbuf o = jj_newbuf(r);
        for (size_t i = cs->n; i-- > 0;) jb_put(&o, cs->v[i].u.s.p, cs->v[i].u.s.n);
        return jj_mkstr(&o);
    }
    jlist *src = jj_iter_items(r, v, line), *l = jl_new(r->a, src->n);
    for (size_t i = src->n; i-- > 0;) l->v[l->n++] = src->v[i];
    return jv_list(l);
}

FILTER(filter_round) {
    return do_round(r, v, jj_want_int(r, jj_arg(A, 0, "precision", jv_int(0)), line, "precision"),
                    str_arg(r, jj_arg(A, 1, "method", jv_str(js_cstr("common")))), line);
}

FILTER(filter_safe) {
    jv m = v.t == JV_STR ? v : jv_str(jj_str_of(r, v));
    m.markup = 1;
    return m;
}

/* sort (sort = 1) and unique (sort = 0): both key the items the same way */
static jv sort_or_unique(R *r, jv v, jargs *A, int sort, int line) {
    int rev = sort && jv_truthy(jj_arg(A, 0, "reverse", jv_bool(0)));
    int cs = jv_truthy(jj_arg(A, sort ? 1 : 0, "case_sensitive", jv_bool(0)));
    jv at = jj_arg(A, sort ? 2 : 1, "attribute", NONE);
    jlist *src = jj_iter_items(r, v, line), *l = jl_new(r->a, src->n);
    jv *keys = jj_alloc(r->a, (src->n + 1) * sizeof *keys);
    for (size_t i = 0; i < src->n; i++) {
        jv k = at.t == JV_NONE ? src->v[i] : attr_path(r, src->v[i], jj_str_of(r, at), line);
        if (!sort) {
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
    if (sort) sort_by(r, l->v, keys, l->n, !cs, rev, line);
    return jv_list(l);
}

FILTER(filter_sort) { return sort_or_unique(r, v, A, 1, line); }
FILTER(filter_unique) { return sort_or_unique(r, v, A, 0, line); }

FILTER(filter_string) { return jv_str(jj_str_of(r, v)); }

FILTER(filter_sum) {
    jv at = jj_arg(A, 0, "attribute", NONE), acc = jj_arg(A, 1, "start", jv_int(0));
    jlist *l = jj_iter_items(r, v, line);
    for (size_t i = 0; i < l->n; i++)
        acc = jj_arith(r, OP_ADD, acc, at.t == JV_NONE ? l->v[i] : attr_path(r, l->v[i], jj_str_of(r, at), line), line);
    return acc;
}

FILTER(filter_tojson) {
    jjson_opts o = {0};
    jv ind = jj_arg(A, 0, "indent", NONE);
    if (ind.t == JV_INT || ind.t == JV_BOOL) {
        int64_t k = jv_ival(ind);
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
    o.item_sep = o.has_indent ? js_cstr(",") : js_cstr(", ");
    o.key_sep = js_cstr(": ");
    jv seps = jj_arg(A, 1, "separators", NONE);
    if (seps.t == JV_LIST && seps.u.l->n == 2 && seps.u.l->v[0].t == JV_STR && seps.u.l->v[1].t == JV_STR) {
        o.item_sep = seps.u.l->v[0].u.s;
        o.key_sep = seps.u.l->v[1].u.s;
    }
    o.ensure_ascii = jv_truthy(jj_arg(A, (size_t)-1, "ensure_ascii", jv_bool(0)));
    o.sort_keys = jv_truthy(jj_arg(A, (size_t)-1, "sort_keys", jv_bool(0)));
    o.html = (r->flags & JINJA_TOJSON_HTMLSAFE) != 0;
    jbuf b = jj_newbuf(r);
    jv_json(&b, v, &o, 0);
    return jj_mkstr(&b);
}

FILTER(filter_trim) {
    jv c = jj_arg(A, 0, "chars", NONE);
    js chars = c.t == JV_STR ? c.u.s : (js){0};
    return jv_str(jj_strip(jj_str_of(r, v), c.t == JV_STR ? &chars : NULL, 1, 1));
}

FILTER(filter_wordcount) {
    js s = jj_str_of(r, v);
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

/* ---------------------------------------------------------------- the filter table */

/* fn NULL: a jinja2 filter that is not implemented; a template naming it parses, and fails where
 * the filter is applied. */
static const struct {
    const char *name;
    filter_fn fn;
} FILTERS[] = {
    {"abs", filter_abs}, {"attr", filter_attr}, {"capitalize", filter_capitalize}, {"count", filter_length},
    {"d", filter_default}, {"default", filter_default}, {"dictsort", filter_dictsort}, {"e", filter_escape},
    {"escape", filter_escape}, {"first", filter_first}, {"float", filter_float}, {"forceescape", filter_forceescape},
    {"indent", filter_indent}, {"int", filter_int}, {"items", filter_items}, {"join", filter_join},
    {"last", filter_last}, {"length", filter_length}, {"list", filter_list}, {"lower", filter_lower},
    {"map", filter_map}, {"max", filter_max}, {"min", filter_min}, {"reject", filter_reject},
    {"rejectattr", filter_rejectattr}, {"replace", filter_replace}, {"reverse", filter_reverse},
    {"round", filter_round}, {"safe", filter_safe}, {"select", filter_select}, {"selectattr", filter_selectattr},
    {"sort", filter_sort}, {"string", filter_string}, {"sum", filter_sum}, {"title", filter_title},
    {"tojson", filter_tojson}, {"trim", filter_trim}, {"unique", filter_unique}, {"upper", filter_upper},
    {"wordcount", filter_wordcount}, {"center", NULL}, {"truncate", NULL}, {"batch", NULL},
};

int jj_filter_id(const char *s, size_t n) {
    for (int i = 0; i < (int)(sizeof FILTERS / sizeof *FILTERS); i++)
        if (name_is(FILTERS[i].name, s, n)) return i;
    return -1;
}

jv jj_apply_filter(R *r, int id, jv v, jargs *A, int line) {
    if (!FILTERS[id].fn) jj_fail(r->e, line, "filter '%s' is not supported", FILTERS[id].name);
    return FILTERS[id].fn(r, v, A, line);
}

/* ---------------------------------------------------------------- tests */

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

int jj_test_id(const char *s, size_t n) {
    for (int i = 0; i < T_NTESTS; i++)
        if (name_is(TESTS[i], s, n)) return i;
    return -1;
}

int jj_apply_test(R *r, int id, jv v, jargs *A, int line) {
    jv a = jj_arg(A, 0, NULL, UNDEF);
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
    case T_IN: return jj_contains(r, a, v, line);
    case T_LOWER: case T_UPPER: {
        js s = jj_str_of(r, v);
        js c = jj_case(r->a, r->max_out, s, id == T_LOWER ? CASE_LOWER : CASE_UPPER);
        return c.n == s.n && !memcmp(c.p, s.p, s.n);
    }
    case T_EVEN: case T_ODD: {
        int64_t x = jj_want_int(r, v, line, "even/odd operand");
        return id == T_EVEN ? x % 2 == 0 : x % 2 != 0;
    }
    case T_DIVISIBLEBY: {
        int64_t x = jj_want_int(r, v, line, "divisibleby operand"), y = jj_want_int(r, a, line, "divisibleby argument");
        if (y == 0) jj_fail(r->e, line, "integer division or modulo by zero");
        return y == -1 || x % y == 0;
    }
    case T_EQ: case T_EQUALTO: return jv_eq(v, a, 0);
    case T_NE: return !jv_eq(v, a, 0);
    case T_LT: case T_LESSTHAN: return jj_compare(r, OP_LT, v, a, line);
    case T_LE: return jj_compare(r, OP_LE, v, a, line);
    case T_GT: case T_GREATERTHAN: return jj_compare(r, OP_GT, v, a, line);
    case T_GE: return jj_compare(r, OP_GE, v, a, line);
    }
    jj_fail(r->e, line, "unknown test");
}

