/* jinja_methods.c — the Python methods templates call on strings (strip, split, replace, find,
 * format, ...), dicts (items, keys, values, get) and loop (cycle), and the string helpers the
 * filters share with them. */
#include <stdlib.h>

#include "jinja_render.h"

/* ---------------------------------------------------------------- names */

/* indexed by the M_ ids of jinja_render.h */
static const char *const METHODS[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower", "title",
    "capitalize", "replace", "find", "rfind", "count", "join", "isdigit", "isalpha", "isalnum", "isspace",
    "isupper", "islower", "splitlines", "format", "index",
    "items", "keys", "values", "get", "cycle",
};
_Static_assert(sizeof METHODS / sizeof *METHODS == M_NMETHODS, "one name per M_ id");

int jj_method_id(js name, int lo, int hi) {
    for (int i = lo; i < hi; i++)
        if (js_eq(name, METHODS[i])) return i;
    return -1;
}

/* ---------------------------------------------------------------- string helpers */

js jj_strip(js s, const js *chars, int left, int right) {
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
                js rest = jj_strip((js){s.p + i, s.n - i}, NULL, 0, 1);
                jl_push(r->a, l, jv_str(rest));
                break;
            }
            size_t st = i;
            while (i < s.n && !jj_py_space(jj_u8dec(s.p + i, s.n - i, &len))) i += len;
            jl_push(r->a, l, jv_str((js){s.p + st, i - st}));
        }
        return jv_list(l);
    }
    js sep = jj_want_str(r, sepv, line, "separator");
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

js jj_replace(R *r, js s, js old, js new_, int64_t count) {
    jbuf o = jj_newbuf(r);
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

jlist *jj_splitlines(R *r, js s) {
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
    js x = jj_want_str(r, p, line, suffix ? "endswith argument" : "startswith argument");
    if (x.n > s.n) return 0;
    return !memcmp(suffix ? s.p + s.n - x.n : s.p, x.p, x.n);
}

/* ---------------------------------------------------------------- methods */

static _Noreturn void no_method(R *r, jv self, int mid, int line) {
    jj_fail(r->e, line, "'%s' object has no method '%s'", jv_type_name(self), METHODS[mid]);
}

/* str.find, str.rfind, str.index: a code point index, -1 when absent (index fails instead) */
static jv str_find(R *r, js s, int mid, jargs *A, int line) {
    js x = jj_want_str(r, jj_arg(A, 0, NULL, UNDEF), line, "find argument");
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

static jv str_count(R *r, js s, jargs *A, int line) {
    js x = jj_want_str(r, jj_arg(A, 0, NULL, UNDEF), line, "count argument");
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

static jv str_join(R *r, js s, jargs *A, int line) {
    jlist *items = jj_iter_items(r, jj_arg(A, 0, NULL, UNDEF), line);
    jbuf o = jj_newbuf(r);
    for (size_t i = 0; i < items->n; i++) {
        if (i) jb_put(&o, s.p, s.n);
        if (items->v[i].t != JV_STR)
            jj_fail(r->e, line, "sequence item %zu: expected str instance, %s found", i, jv_type_name(items->v[i]));
        jb_put(&o, items->v[i].u.s.p, items->v[i].u.s.n);
    }
    return jj_mkstr(&o);
}

/* "{}"/"{0}"/"{name}" replacement fields without format specs */
static jv str_format(R *r, js s, jargs *A, int line) {
    jbuf o = jj_newbuf(r);
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
    return jj_mkstr(&o);
}

static jv string_method(R *r, jv self, int mid, jargs *A, int line) {
    js s = self.u.s;
    switch (mid) {
    case M_STRIP: case M_LSTRIP: case M_RSTRIP: {
        jv c = jj_arg(A, 0, "chars", NONE);
        js chars = c.t == JV_NONE ? (js){0} : jj_want_str(r, c, line, "strip argument");
        return jv_str(jj_strip(s, c.t == JV_NONE ? NULL : &chars, mid != M_RSTRIP, mid != M_LSTRIP));
    }
    case M_SPLIT: case M_RSPLIT:
        return split(r, s, jj_arg(A, 0, "sep", NONE), jj_want_int(r, jj_arg(A, 1, "maxsplit", jv_int(-1)), line, "maxsplit"),
                     mid == M_RSPLIT, line);
    case M_STARTSWITH: case M_ENDSWITH:
        if (!jj_has_arg(A, 0, NULL)) jj_fail(r->e, line, "%s() takes at least 1 argument", METHODS[mid]);
        return jv_bool(prefix_match(r, s, A->pos[0], mid == M_ENDSWITH, line));
    case M_UPPER: return jv_str(jj_case(r->a, r->max_out, s, CASE_UPPER));
    case M_LOWER: return jv_str(jj_case(r->a, r->max_out, s, CASE_LOWER));
    case M_TITLE: return jv_str(jj_case(r->a, r->max_out, s, CASE_TITLE));
    case M_CAPITALIZE: return jv_str(jj_case(r->a, r->max_out, s, CASE_CAPITALIZE));
    case M_REPLACE:
        if (A->npos < 2) jj_fail(r->e, line, "replace() takes at least 2 arguments");
        return jv_str(jj_replace(r, s, jj_want_str(r, A->pos[0], line, "replace argument"),
                                 jj_want_str(r, A->pos[1], line, "replace argument"),
                                 jj_want_int(r, jj_arg(A, 2, "count", jv_int(-1)), line, "count")));
    case M_FIND: case M_RFIND: case M_INDEX: return str_find(r, s, mid, A, line);
    case M_COUNT: return str_count(r, s, A, line);
    case M_JOIN: return str_join(r, s, A, line);
    case M_ISDIGIT: case M_ISALPHA: case M_ISALNUM: case M_ISSPACE: case M_ISUPPER: case M_ISLOWER:
        return jv_bool(str_all(s, mid));
    case M_SPLITLINES: return jv_list(jj_splitlines(r, s));
    case M_FORMAT: return str_format(r, s, A, line);
    }
    no_method(r, self, mid, line);
}

static jv dict_method(R *r, jv self, int mid, jargs *A, int line) {
    jdict *d = self.u.d;
    switch (mid) {
    case M_ITEMS: return jv_list(jj_dict_items(r, d));
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
        jv *p = jd_get(d, jj_arg(A, 0, NULL, UNDEF));
        return p ? *p : jj_arg(A, 1, NULL, NONE);
    }
    }
    no_method(r, self, mid, line);
}

jv jj_call_method(R *r, jv self, int mid, jargs *A, int line) {
    if (self.t == JV_STR) return string_method(r, self, mid, A, line);
    if (self.t == JV_DICT) return dict_method(r, self, mid, A, line);
    if (self.t == JV_LOOP && mid == M_CYCLE) {
        if (!A->npos) jj_fail(r->e, line, "no items for cycling given");
        return A->pos[self.u.lp->index0 % (int64_t)A->npos];
    }
    no_method(r, self, mid, line);
}
