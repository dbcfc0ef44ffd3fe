/* jinja_value.c — Python-compatible value semantics for the jinja interpreter: str/repr, JSON, equality, ordering, text case. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "jinja_value.h"

jv jv_str(js s) {
    jv v = {.t = JV_STR};
    v.u.s = s;
    return v;
}

jv jv_int(int64_t i) {
    jv v = {.t = JV_INT};
    v.u.i = i;
    return v;
}

jv jv_float(double f) {
    jv v = {.t = JV_FLOAT};
    v.u.f = f;
    return v;
}

jv jv_bool(int b) {
    jv v = {.t = JV_BOOL};
    v.u.b = b != 0;
    return v;
}

jv jv_copy_str(jarena *a, const char *p, size_t n) {
    char *c = jj_alloc(a, n + 1);
    if (n) memcpy(c, p, n);
    c[n] = 0;
    return jv_str((js){c, n});
}

jlist *jl_new(jarena *a, size_t cap) {
    jlist *l = jj_alloc(a, sizeof *l);
    memset(l, 0, sizeof *l);
    if (cap) {
        l->v = jj_alloc(a, cap * sizeof *l->v);
        l->cap = cap;
    }
    return l;
}

void jl_push(jarena *a, jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = jj_alloc(a, cap * sizeof *nv);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jv jv_list(jlist *l) {
    jv v = {.t = JV_LIST};
    v.u.l = l;
    return v;
}

jdict *jd_new(jarena *a) {
    jdict *d = jj_alloc(a, sizeof *d);
    memset(d, 0, sizeof *d);
    return d;
}

jv jv_dict(jdict *d) {
    jv v = {.t = JV_DICT};
    v.u.d = d;
    return v;
}

static int key_eq(jv a, js k) { return a.t == JV_STR && a.u.s.n == k.n && !memcmp(a.u.s.p, k.p, k.n); }

jv *jd_get(jdict *d, jv key) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], key, 0)) return &d->v[i];
    return NULL;
}

jv *jd_gets(jdict *d, js key) {
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->k[i], key)) return &d->v[i];
    return NULL;
}

void jd_set(jarena *a, jdict *d, jv key, jv val) {
    jv *p = jd_get(d, key);
    if (p) {
        *p = val;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        jv *k = jj_alloc(a, cap * sizeof *k), *v = jj_alloc(a, cap * sizeof *v);
        if (d->n) {
            memcpy(k, d->k, d->n * sizeof *k);
            memcpy(v, d->v, d->n * sizeof *v);
        }
        d->k = k;
        d->v = v;
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n++] = val;
}

/* ---------------------------------------------------------------- numbers as Python prints them */

/* repr(float): the shortest digits that read back to the same double, in fixed notation for
 * decimal exponents -4..15 and scientific otherwise. */
void jj_float_repr(double d, char *out, size_t outn) {
    if (isnan(d)) { snprintf(out, outn, "nan"); return; }
    if (isinf(d)) { snprintf(out, outn, d < 0 ? "-inf" : "inf"); return; }
    if (d == 0) { snprintf(out, outn, signbit(d) ? "-0.0" : "0.0"); return; }
    char tmp[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d) break;
    }
    char digits[24];
    int nd = 0, neg = 0;
    const char *p = tmp;
    if (*p == '-') { neg = 1; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < 20) digits[nd++] = *p;
    int exp = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char o[64];
    int k = 0;
    if (neg) o[k++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) o[k++] = i < nd ? digits[i] : '0';
            o[k++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) o[k++] = digits[i];
            else
                o[k++] = '0';
        } else {
            o[k++] = '0';
            o[k++] = '.';
            for (int i = 0; i < -exp - 1; i++) o[k++] = '0';
            for (int i = 0; i < nd; i++) o[k++] = digits[i];
        }
        o[k] = 0;
    } else {
        o[k++] = digits[0];
        if (nd > 1) {
            o[k++] = '.';
            for (int i = 1; i < nd; i++) o[k++] = digits[i];
        }
        snprintf(o + k, sizeof o - (size_t)k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    snprintf(out, outn, "%s", o);
}

/* ---------------------------------------------------------------- str() and repr() */

const char *jv_type_name(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.u.l->tuple ? "tuple" : "list";
    case JV_DICT: return v.u.d->ns ? "Namespace" : "dict";
    case JV_FUNC: return "function";
    default: return "LoopContext";
    }
}

/* Python's str.isprintable(), which decides what repr() escapes */
static int py_printable(uint32_t cp) {
    if (cp < 0x20 || cp == 0x7f) return 0;
    if (cp < 0x7f) return 1;
    if (cp > 0x10ffff) return 0;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    switch (c) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return 0;
    default:
        return 1;
    }
}

static void put_str_repr(jbuf *b, js s) {
    int has_sq = memchr(s.p, '\'', s.n) != NULL, has_dq = memchr(s.p, '"', s.n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jb_putc(b, q);
    size_t i = 0, l;
    while (i < s.n) {
        uint32_t cp = jj_u8dec(s.p + i, s.n - i, &l);
        char e[16];
        if (cp == (uint32_t)q || cp == '\\') {
            e[0] = '\\';
            e[1] = (char)cp;
            jb_put(b, e, 2);
        } else if (cp == '\n') {
            jb_puts(b, "\\n");
        } else if (cp == '\r') {
            jb_puts(b, "\\r");
        } else if (cp == '\t') {
            jb_puts(b, "\\t");
        } else if (l == 1 && cp >= 0x80) {
            /* an invalid byte: Python would hold a surrogate escape; show the byte */
            snprintf(e, sizeof e, "\\x%02x", cp);
            jb_puts(b, e);
        } else if (!py_printable(cp)) {
            if (cp < 0x100) snprintf(e, sizeof e, "\\x%02x", cp);
            else if (cp < 0x10000) snprintf(e, sizeof e, "\\u%04x", cp);
            else snprintf(e, sizeof e, "\\U%08x", cp);
            jb_puts(b, e);
        } else {
            jb_put(b, s.p + i, l);
        }
        i += l;
    }
    jb_putc(b, q);
}

void jv_put(jbuf *b, jv v, int repr, int depth) {
    char num[64];
    if (depth > JINJA_MAX_VDEPTH) jj_fail(b->a->e, 0, "value nested too deeply to print");
    switch (v.t) {
    case JV_UNDEF: if (repr) jb_puts(b, "Undefined"); return;
    case JV_NONE: jb_puts(b, "None"); return;
    case JV_BOOL: jb_puts(b, v.u.b ? "True" : "False"); return;
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); jb_puts(b, num); return;
    case JV_FLOAT: jj_float_repr(v.u.f, num, sizeof num); jb_puts(b, num); return;
    case JV_STR:
        if (repr) put_str_repr(b, v.u.s);
        else jb_put(b, v.u.s.p, v.u.s.n);
        return;
    case JV_LIST: {
        jlist *l = v.u.l;
        jb_putc(b, l->tuple ? '(' : '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) jb_puts(b, ", ");
            jv_put(b, l->v[i], 1, depth + 1);
        }
        if (l->tuple && l->n == 1) jb_putc(b, ',');
        jb_putc(b, l->tuple ? ')' : ']');
        return;
    }
    case JV_DICT: {
        jdict *d = v.u.d;
        if (d->ns) jb_puts(b, "<Namespace ");
        jb_putc(b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i) jb_puts(b, ", ");
            jv_put(b, d->k[i], 1, depth + 1);
            jb_puts(b, ": ");
            jv_put(b, d->v[i], 1, depth + 1);
        }
        jb_putc(b, '}');
        if (d->ns) jb_putc(b, '>');
        return;
    }
    case JV_FUNC: jb_puts(b, "<function>"); return;
    default: jb_puts(b, "<LoopContext>"); return;
    }
}

js jv_to_str(jarena *a, size_t max, jv v) {
    if (v.t == JV_STR) return v.u.s;
    if (v.t == JV_UNDEF) return (js){"", 0};
    jbuf b = {a, NULL, 0, 0, max};
    jb_put(&b, "", 0);
    jv_put(&b, v, 0, 0);
    if (!b.p) return (js){"", 0};
    return (js){b.p, b.n};
}

/* ---------------------------------------------------------------- JSON as Python's json.dumps writes it */

static void json_str(jbuf *b, js s, int ensure_ascii, int html) {
    jb_putc(b, '"');
    size_t i = 0, l;
    while (i < s.n) {
        uint32_t cp = jj_u8dec(s.p + i, s.n - i, &l);
        char e[16];
        if (cp == '"') jb_puts(b, "\\\"");
        else if (cp == '\\') jb_puts(b, "\\\\");
        else if (cp == '\n') jb_puts(b, "\\n");
        else if (cp == '\r') jb_puts(b, "\\r");
        else if (cp == '\t') jb_puts(b, "\\t");
        else if (cp == '\b') jb_puts(b, "\\b");
        else if (cp == '\f') jb_puts(b, "\\f");
        else if (cp < 0x20 || (html && (cp == '<' || cp == '>' || cp == '&' || cp == '\''))) {
            snprintf(e, sizeof e, "\\u%04x", cp);
            jb_puts(b, e);
        } else if (ensure_ascii && cp >= 0x80) {
            if (cp >= 0x10000 && l > 1) {
                uint32_t c = cp - 0x10000;
                snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xd800 + (c >> 10), 0xdc00 + (c & 0x3ff));
            } else {
                snprintf(e, sizeof e, "\\u%04x", cp);
            }
            jb_puts(b, e);
        } else {
            jb_put(b, s.p + i, l);
        }
        i += l;
    }
    jb_putc(b, '"');
}

static void json_newline(jbuf *b, const jjson_opts *o, int level) {
    jb_putc(b, '\n');
    for (int i = 0; i < level; i++) jb_put(b, o->indent.p, o->indent.n);
}

static void json_float(jbuf *b, double f) {
    char num[64];
    if (isnan(f)) jb_puts(b, "NaN");
    else if (isinf(f)) jb_puts(b, f < 0 ? "-Infinity" : "Infinity");
    else {
        jj_float_repr(f, num, sizeof num);
        jb_puts(b, num);
    }
}

/* A dict entry's place and its key, sorted for sort_keys by plain qsort: the element carries its key,
 * so no context pointer (qsort_r) is needed, which not every C library has (Emscripten's). */
typedef struct {
    js key;
    size_t i;
} key_slot;
static int key_slot_cmp(const void *x, const void *y) {
    const key_slot *a = x, *c = y;
    int r = memcmp(a->key.p, c->key.p, a->key.n < c->key.n ? a->key.n : c->key.n);
    if (r) return r;
    if (a->key.n != c->key.n) return (a->key.n > c->key.n) - (a->key.n < c->key.n);
    return (a->i > c->i) - (a->i < c->i);
}

void jv_json(jbuf *b, jv v, const jjson_opts *o, int level) {
    char num[64];
    if (level > JINJA_MAX_VDEPTH) jj_fail(b->a->e, 0, "value nested too deeply for tojson");
    switch (v.t) {
    case JV_NONE: jb_puts(b, "null"); return;
    case JV_BOOL: jb_puts(b, v.u.b ? "true" : "false"); return;
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); jb_puts(b, num); return;
    case JV_FLOAT: json_float(b, v.u.f); return;
    case JV_STR: json_str(b, v.u.s, o->ensure_ascii, o->html); return;
    case JV_LIST: {
        jlist *l = v.u.l;
        if (!l->n) { jb_puts(b, "[]"); return; }
        jb_putc(b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) jb_put(b, o->item_sep.p, o->item_sep.n);
            if (o->has_indent) json_newline(b, o, level + 1);
            jv_json(b, l->v[i], o, level + 1);
        }
        if (o->has_indent) json_newline(b, o, level);
        jb_putc(b, ']');
        return;
    }
    case JV_DICT: {
        jdict *d = v.u.d;
        if (d->ns) break;
        if (!d->n) { jb_puts(b, "{}"); return; }
        key_slot *idx = jj_alloc(b->a, d->n * sizeof *idx);
        int all_str = 1;
        for (size_t i = 0; i < d->n; i++) {
            idx[i].i = i;
            if (d->k[i].t != JV_STR) all_str = 0;
            else idx[i].key = d->k[i].u.s;
        }
        if (o->sort_keys && all_str) qsort(idx, d->n, sizeof *idx, key_slot_cmp);
        jb_putc(b, '{');
        for (size_t j = 0; j < d->n; j++) {
            size_t i = idx[j].i;
            if (j) jb_put(b, o->item_sep.p, o->item_sep.n);
            if (o->has_indent) json_newline(b, o, level + 1);
            jv k = d->k[i];
            /* json.dumps turns scalar keys into strings */
            if (k.t == JV_STR) json_str(b, k.u.s, o->ensure_ascii, o->html);
            else {
                jb_putc(b, '"');
                if (k.t == JV_NONE) jb_puts(b, "null");
                else if (k.t == JV_BOOL) jb_puts(b, k.u.b ? "true" : "false");
                else if (k.t == JV_INT) { snprintf(num, sizeof num, "%lld", (long long)k.u.i); jb_puts(b, num); }
                else if (k.t == JV_FLOAT) json_float(b, k.u.f);
                else jj_fail(b->a->e, 0, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
                jb_putc(b, '"');
            }
            jb_put(b, o->key_sep.p, o->key_sep.n);
            jv_json(b, d->v[i], o, level + 1);
        }
        if (o->has_indent) json_newline(b, o, level);
        jb_putc(b, '}');
        return;
    }
    default: break;
    }
    jj_fail(b->a->e, 0, "Object of type %s is not JSON serializable", jv_type_name(v));
}

/* ---------------------------------------------------------------- truth, equality, ordering */

int jv_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->ns || v.u.d->n != 0;
    default: return 1;
    }
}

int jv_is_num(jv v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }

double jv_num(jv v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.t == JV_BOOL ? v.u.b : 0; }

int jv_eq(jv a, jv b, int depth) {
    if (depth > JINJA_MAX_VDEPTH) return 0;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_BOOL ? a.u.b : a.u.i, y = b.t == JV_BOOL ? b.u.b : b.u.i;
            return x == y;
        }
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
    case JV_LIST:
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_eq(a.u.l->v[i], b.u.l->v[i], depth + 1)) return 0;
        return 1;
    case JV_DICT:
        if (a.u.d->ns || b.u.d->ns) return a.u.d == b.u.d;
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = jd_get(b.u.d, a.u.d->k[i]);
            if (!o || !jv_eq(a.u.d->v[i], *o, depth + 1)) return 0;
        }
        return 1;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return a.u.lp == b.u.lp;
    }
}

/* Python ordering: -1/0/1, or 2 when the types cannot be ordered. */
int jv_cmp(jv a, jv b, int depth) {
    if (depth > JINJA_MAX_VDEPTH) return 2;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_BOOL ? a.u.b : a.u.i, y = b.t == JV_BOOL ? b.u.b : b.u.i;
            return (x > y) - (x < y);
        }
        double x = jv_num(a), y = jv_num(b);
        return (x > y) - (x < y);
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        /* UTF-8 byte order is code point order */
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int r = n ? memcmp(a.u.s.p, b.u.s.p, n) : 0;
        if (r) return r < 0 ? -1 : 1;
        return (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
    }
    if (a.t == JV_LIST && b.t == JV_LIST && a.u.l->tuple == b.u.l->tuple) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_eq(a.u.l->v[i], b.u.l->v[i], depth + 1)) continue;
            return jv_cmp(a.u.l->v[i], b.u.l->v[i], depth + 1);
        }
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    return 2;
}

/* ---------------------------------------------------------------- text helpers */

int jj_py_space(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

static int cased(uint32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

static uint32_t conv(uint32_t c, int mode) {
    if (c > 0x10ffff) return c;
    if (mode == CASE_UPPER) return (uint32_t)utf8proc_toupper((utf8proc_int32_t)c);
    if (mode == CASE_LOWER) return (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
    return (uint32_t)utf8proc_totitle((utf8proc_int32_t)c);
}

static int word_sep(uint32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || jj_py_space(c); }

/* upper/lower, str.capitalize, str.title, and jinja2's title filter (which starts words after
 * whitespace and - ( { [ < rather than after any uncased character). */
js jj_case(jarena *a, size_t max, js s, int mode) {
    jbuf b = {a, NULL, 0, 0, max};
    jb_put(&b, "", 0);
    size_t i = 0, l;
    int prev_cased = 0, first = 1, at_word = 1;
    while (i < s.n) {
        uint32_t c = jj_u8dec(s.p + i, s.n - i, &l), o = c;
        int invalid = l == 1 && c >= 0x80;
        int how = CASE_LOWER; /* what happens to this code point: CASE_UPPER/TITLE/LOWER, or -1 kept */
        switch (mode) {
        case CASE_UPPER: how = CASE_UPPER; break;
        case CASE_LOWER: how = CASE_LOWER; break;
        case CASE_CAPITALIZE: how = first ? CASE_TITLE : CASE_LOWER; break;
        case CASE_TITLE:
            how = cased(c) ? (prev_cased ? CASE_LOWER : CASE_TITLE) : -1;
            prev_cased = cased(c);
            break;
        case CASE_JTITLE:
            if (word_sep(c)) {
                at_word = 1;
                how = -1;
            } else {
                how = at_word ? CASE_UPPER : CASE_LOWER;
                at_word = 0;
            }
            break;
        }
        if (!invalid && how >= 0) o = conv(c, how);
        /* Python's full case mappings where one code point becomes two (utf8proc maps only 1:1) */
        if (!invalid && c == 0xdf && how == CASE_UPPER) {
            jb_puts(&b, "SS");
        } else if (!invalid && c == 0xdf && how == CASE_TITLE) {
            jb_puts(&b, "Ss");
        } else if (!invalid && c == 0x130 && how == CASE_LOWER) {
            jb_puts(&b, "i\xcc\x87");
        } else if (invalid || o == c) {
            jb_put(&b, s.p + i, l);
        } else {
            char e[4];
            jb_put(&b, e, jj_u8enc(o, e));
        }
        first = 0;
        i += l;
    }
    return (js){b.p, b.n};
}
