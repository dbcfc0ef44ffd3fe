/* jinja_value.h — value constructors and Python-compatible value semantics used by the jinja interpreter. */
#ifndef INGOT_JINJA_VALUE_H
#define INGOT_JINJA_VALUE_H

#include "jinja_int.h"

jv jv_str(js s);
jv jv_int(int64_t i);
jv jv_float(double f);
jv jv_bool(int b);
jv jv_copy_str(jarena *a, const char *p, size_t n);
jv jv_list(jlist *l);
jv jv_dict(jdict *d);
jlist *jl_new(jarena *a, size_t cap);
void jl_push(jarena *a, jlist *l, jv v);
jdict *jd_new(jarena *a);
jv *jd_get(jdict *d, jv key);
jv *jd_gets(jdict *d, js key);
void jd_set(jarena *a, jdict *d, jv key, jv val);

void jj_float_repr(double d, char *out, size_t outn);
const char *jv_type_name(jv v);
/* str(v) (repr=0) or repr(v) (repr=1) appended to b */
void jv_put(jbuf *b, jv v, int repr, int depth);
js jv_to_str(jarena *a, size_t max, jv v);

typedef struct jjson_opts {
    int has_indent, ensure_ascii, sort_keys, html;
    js indent, item_sep, key_sep;
} jjson_opts;
void jv_json(jbuf *b, jv v, const jjson_opts *o, int level);

int jv_truthy(jv v);
int jv_is_num(jv v);
double jv_num(jv v);
int jv_eq(jv a, jv b, int depth);
int jv_cmp(jv a, jv b, int depth);

int jj_py_space(uint32_t c);
enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE, CASE_JTITLE };
js jj_case(jarena *a, size_t max, js s, int mode);

#endif
