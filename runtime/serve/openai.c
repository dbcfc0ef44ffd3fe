/* openai.c — OpenAI request parsing and validation, and error bodies; see openai.h.
 *
 * Validation follows the OpenAI API reference: a field that is absent or
 * null takes its default; a present field of the wrong type or out of range
 * is a 400 naming the field in "param". Text the model reads (message
 * contents, a text prompt, stop strings) must be valid UTF-8 without NUL
 * characters. Fields outside the OpenAI API are ignored (clients send vendor
 * extensions freely); OpenAI fields this server does not implement are
 * refused, never silently dropped (see check_unsupported for the rule).
 * What a request gets back is written by openai_response.c.
 */
#include "openai.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema.h"

void oai_error_set(oai_error *e, int status, const char *type, const char *param, const char *code,
                   const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

char *oai_error_json(const oai_error *e) {
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    char *msg = oai_utf8_clean(e->message, strlen(e->message));
    cJSON_AddStringToObject(err, "message", msg ? msg : "");
    free(msg);
    cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param);
    else cJSON_AddNullToObject(err, "param");
    if (e->code) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNullToObject(err, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* ---- buffers ------------------------------------------------------------- */

int oai_buf_add(oai_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

void oai_buf_free(oai_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- UTF-8 --------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid
 * (overlongs, surrogates and code points past U+10FFFF are invalid). */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    if (s[0] < 0x80) return 1;
    size_t len;
    unsigned cp;
    if ((s[0] & 0xe0) == 0xc0) len = 2, cp = s[0] & 0x1f;
    else if ((s[0] & 0xf0) == 0xe0) len = 3, cp = s[0] & 0x0f;
    else if ((s[0] & 0xf8) == 0xf0) len = 4, cp = s[0] & 0x07;
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const unsigned min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

char *oai_utf8_clean(const char *s, size_t n) {
    char *o = malloc(n * 3 + 1), *w = o;
    if (!o) return NULL;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t l = u[i] ? utf8_seq(u + i, n - i) : 0;
        if (l == 0) {
            memcpy(w, "\xef\xbf\xbd", 3);
            w += 3;
            i++;
        } else {
            memcpy(w, s + i, l);
            w += l;
            i += l;
        }
    }
    *w = 0;
    return o;
}

/* ---- request parsing ----------------------------------------------------- */

int oai_bad(oai_error *e, const char *param, const char *fmt, const char *what) {
    oai_error_set(e, 400, "invalid_request_error", param, NULL, fmt, param, what);
    return -1;
}

const cJSON *oai_field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int is_empty_array(const cJSON *v) { return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0; }
static int is_empty_object(const cJSON *v) { return cJSON_IsObject(v) && !v->child; }
static int is_string(const cJSON *v, const char *s) { return cJSON_IsString(v) && !strcmp(v->valuestring, s); }

/* ---- text the model reads ----------------------------------------------------
 *
 * cJSON decodes the escape \u0000 into a NUL that ends the C string, so the
 * rest of the text would vanish unseen. Before parsing, every NUL (escaped or
 * raw) becomes the overlong sequence C0 80, which no valid UTF-8 contains;
 * check_text then refuses it by name. */

static char *mark_nuls(const char *body, size_t len, size_t *out_len) {
    char *o = malloc(2 * len + 1); /* a raw NUL takes two bytes */
    if (!o) return NULL;
    size_t w = 0;
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        const char ch = body[i];
        if (ch == 0) {
            o[w++] = '\xc0';
            o[w++] = '\x80';
            continue;
        }
        if (in_string && ch == '\\' && i + 1 < len) {
            if (body[i + 1] == 'u' && i + 5 < len && !memcmp(body + i + 2, "0000", 4)) {
                o[w++] = '\xc0';
                o[w++] = '\x80';
                i += 5;
            } else { /* any other escape passes whole, so an escaped quote is no string end */
                o[w++] = ch;
                o[w++] = body[++i];
            }
            continue;
        }
        if (ch == '"') in_string = !in_string;
        o[w++] = ch;
    }
    o[w] = 0;
    *out_len = w;
    return o;
}

/* ---- JSON that most parsers would read differently ------------------------------
 *
 * A gateway in front of the server validates the body with its own parser; where
 * that parser and cJSON disagree, the gateway checks one request and the server
 * runs another. So the body is held to RFC 8259 where cJSON is lenient: no raw
 * control character in a string or between values (a raw NUL is left to
 * mark_nuls and check_text, which name the field), every key and string UTF-8
 * (unknown fields too), and no object repeats a key (cJSON takes the first,
 * most parsers the last). Nesting is cJSON's to bound (CJSON_NESTING_LIMIT). */

int oai_check_body(const char *body, size_t len, oai_error *e) {
    const unsigned char *u = (const unsigned char *)body;
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = u[i];
        if (in_string && c > 0 && c < 0x20) {
            oai_error_set(e, 400, "invalid_request_error", NULL, NULL,
                          "the body's JSON has a raw control character U+%04X in a string (byte %zu): "
                          "it must be escaped", c, i);
            return -1;
        }
        if (!in_string && c > 0 && c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
            /* cJSON skips every byte up to the space as whitespace; JSON allows four */
            oai_error_set(e, 400, "invalid_request_error", NULL, NULL,
                          "the body's JSON has the control character U+%04X between values (byte %zu)", c, i);
            return -1;
        }
        if (in_string && c == '\\') i++; /* the escaped byte: a quote there ends nothing */
        else if (c == '"') in_string = !in_string;
    }
    return 0;
}

static int key_order(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* UTF-8 (the NUL marks C0 80 aside: check_text names those where the field is read). */
static int utf8_or_nul_marks(const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    const size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        if (u[i] == 0xc0 && i + 1 < n && u[i + 1] == 0x80) {
            i += 2;
            continue;
        }
        const size_t l = utf8_seq(u + i, n - i);
        if (!l) return 0;
        i += l;
    }
    return 1;
}

/* path: where v is ("messages[1].content"), for the error's param; cut short past its
 * buffer, which only shortens a message. */
static int check_json_value(const cJSON *v, char *path, size_t at, size_t cap, oai_error *e) {
    if (cJSON_IsString(v) && !utf8_or_nul_marks(v->valuestring)) {
        oai_error_set(e, 400, "invalid_request_error", path, NULL, "'%s' is not valid UTF-8", path);
        return -1;
    }
    size_t n = 0;
    for (const cJSON *c = v->child; c; c = c->next) n++;
    if (cJSON_IsObject(v) && n > 1) { /* keys sorted: a repeat is a neighbour, n log n */
        const cJSON **keys = malloc(sizeof *keys * n);
        if (!keys) {
            oai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
            return -1;
        }
        size_t k = 0;
        for (const cJSON *c = v->child; c; c = c->next) keys[k++] = c;
        qsort(keys, n, sizeof *keys, key_order);
        for (k = 1; k < n && strcmp(keys[k - 1]->string, keys[k]->string); k++) {}
        if (k < n) {
            snprintf(path + at, cap - at, "%s%s", at ? "." : "", keys[k]->string);
            oai_error_set(e, 400, "invalid_request_error", path, NULL,
                          "'%s' appears twice in one object (most JSON parsers keep the last, this one the first)",
                          path);
            free(keys);
            return -1;
        }
        free(keys);
    }
    size_t i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        size_t w;
        if (cJSON_IsObject(v)) {
            if (!utf8_or_nul_marks(c->string)) {
                oai_error_set(e, 400, "invalid_request_error", path, NULL, "a key in '%s' is not valid UTF-8",
                              at ? path : "the body");
                return -1;
            }
            w = (size_t)snprintf(path + at, cap - at, "%s%s", at ? "." : "", c->string);
        } else {
            w = (size_t)snprintf(path + at, cap - at, "[%zu]", i);
        }
        if (check_json_value(c, path, at + w < cap ? at + w : cap - 1, cap, e)) return -1;
        path[at] = 0;
    }
    return 0;
}

int oai_check_json(const cJSON *root, oai_error *e) {
    char path[256] = "";
    return check_json_value(root, path, 0, sizeof path, e);
}

/* 0, or -1 with a 400 naming param when s is not text a model can read. */
static int check_text(const char *s, const char *param, oai_error *e) {
    const unsigned char *u = (const unsigned char *)s;
    const size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        if (u[i] == 0xc0 && i + 1 < n && u[i + 1] == 0x80) {
            oai_error_set(e, 400, "invalid_request_error", param, NULL, "'%s' contains a NUL character", param);
            return -1;
        }
        const size_t l = utf8_seq(u + i, n - i);
        if (!l) {
            oai_error_set(e, 400, "invalid_request_error", param, NULL,
                          "'%s' is not valid UTF-8 (invalid byte at offset %zu)", param, i);
            return -1;
        }
        i += l;
    }
    return 0;
}

static int get_number(const cJSON *o, const char *name, double lo, double hi, int lo_open, double *out,
                      oai_error *e) {
    const cJSON *v = oai_field(o, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return oai_bad(e, name, "'%s' must be a number%s", "");
    const double x = v->valuedouble;
    if (!isfinite(x) || x < lo || x > hi || (lo_open && x <= lo)) {
        char range[96];
        snprintf(range, sizeof range, " in %s%g, %g]", lo_open ? "(" : "[", lo, hi);
        return oai_bad(e, name, "'%s' must be a number%s", range);
    }
    *out = x;
    return 1;
}

static int get_int(const cJSON *o, const char *name, double lo, double hi, long long *out, oai_error *e) {
    const cJSON *v = oai_field(o, name);
    if (!v) return 0;
    const double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!isfinite(x) || x != floor(x) || x < lo || x > hi) {
        char range[96];
        snprintf(range, sizeof range, " in [%.0f, %.0f]", lo, hi);
        return oai_bad(e, name, "'%s' must be an integer%s", range);
    }
    *out = (long long)x;
    return 1;
}

static int get_bool(const cJSON *o, const char *name, int *out, oai_error *e) {
    const cJSON *v = oai_field(o, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return oai_bad(e, name, "'%s' must be a boolean%s", "");
    *out = cJSON_IsTrue(v);
    return 1;
}

/* Content as one string: a string, or an array of {"type": "text", "text": ...}
 * parts joined without separator (what chat templates of text models do). */
static char *content_text(const cJSON *c, int i, oai_error *e) {
    char param[48];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (cJSON_IsString(c)) {
        if (check_text(c->valuestring, param, e)) return NULL;
        return strdup(c->valuestring);
    }
    if (!cJSON_IsArray(c)) {
        oai_bad(e, param, "'%s' must be a string or an array of text parts%s", "");
        return NULL;
    }
    oai_buf b = {0};
    oai_buf_add(&b, "", 0);
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") ||
            !cJSON_IsString(text)) {
            oai_buf_free(&b);
            oai_bad(e, param, "'%s': only {\"type\": \"text\", \"text\": ...} parts are supported%s", "");
            return NULL;
        }
        if (check_text(text->valuestring, param, e)) {
            oai_buf_free(&b);
            return NULL;
        }
        if (oai_buf_add(&b, text->valuestring, strlen(text->valuestring)) != 0) {
            oai_buf_free(&b);
            oai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
            return NULL;
        }
    }
    return b.p;
}

/* ---- tools ---------------------------------------------------------------- */

/* check_text on every string and key of a JSON value (a schema, arguments):
 * all of it reaches the template. */
static int check_json_text(const cJSON *v, const char *param, oai_error *e) {
    if (v->string && check_text(v->string, param, e)) return -1;
    if (cJSON_IsString(v) && check_text(v->valuestring, param, e)) return -1;
    for (const cJSON *c = v->child; c; c = c->next)
        if (check_json_text(c, param, e)) return -1;
    return 0;
}

/* JSON text with the escape \u0000, which cJSON would decode into a NUL
 * that silently ends the string. */
static int json_escapes_nul(const char *s) {
    for (; *s; s++)
        if (*s == '\\') {
            if (s[1] == 'u' && !strncmp(s + 2, "0000", 4)) return 1;
            if (s[1]) s++;
        }
    return 0;
}

/* OpenAI's rule for function names: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'. */
static int valid_function_name(const char *s) {
    const size_t n = strlen(s);
    return n >= 1 && n <= 64 &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

/* An assistant message's tool_calls, normalized for the template:
 * [{"id", "type": "function", "function": {"name", "arguments"}}] where
 * arguments is the object the client's JSON string holds (Hugging Face
 * templates write it with `| tojson`), or the string itself when it holds no
 * object. NULL with e filled on a malformed call. */
static cJSON *parse_tool_calls(const cJSON *calls, int i, oai_error *e) {
    char param[96];
    snprintf(param, sizeof param, "messages[%d].tool_calls", i);
    if (!cJSON_IsArray(calls)) {
        oai_bad(e, param, "'%s' must be an array%s", "");
        return NULL;
    }
    cJSON *out = cJSON_CreateArray();
    int k = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        const char *what = NULL;
        if (!cJSON_IsObject(c)) what = "";
        else if (!cJSON_IsString(id)) what = ".id";
        else if (type && !cJSON_IsNull(type) && !is_string(type, "function")) what = ".type";
        else if (!cJSON_IsObject(fn)) what = ".function";
        else if (!cJSON_IsString(name)) what = ".function.name";
        else if (!cJSON_IsString(args) && !cJSON_IsObject(args)) what = ".function.arguments";
        if (what) {
            cJSON_Delete(out);
            snprintf(param, sizeof param, "messages[%d].tool_calls[%d]%s", i, k, what);
            oai_bad(e, param,
                !*what ? "'%s' must be an object%s"
                : !strcmp(what, ".type") ? "'%s' must be \"function\"%s"
                : !strcmp(what, ".function") ? "'%s' must be an object with name and arguments%s"
                : !strcmp(what, ".function.arguments") ? "'%s' must be a string (JSON of the arguments)%s"
                                                       : "'%s' must be a string%s",
                "");
            return NULL;
        }
        snprintf(param, sizeof param, "messages[%d].tool_calls[%d].id", i, k);
        if (check_text(id->valuestring, param, e)) goto fail;
        snprintf(param, sizeof param, "messages[%d].tool_calls[%d].function.name", i, k);
        if (check_text(name->valuestring, param, e)) goto fail;
        cJSON *parsed = NULL;
        if (cJSON_IsString(args)) {
            snprintf(param, sizeof param, "messages[%d].tool_calls[%d].function.arguments", i, k);
            if (check_text(args->valuestring, param, e)) goto fail;
            if (json_escapes_nul(args->valuestring)) {
                oai_bad(e, param, "'%s' contains a NUL character%s", "");
                goto fail;
            }
            parsed = cJSON_Parse(args->valuestring);
            if (!cJSON_IsObject(parsed)) {
                cJSON_Delete(parsed);
                parsed = cJSON_CreateString(args->valuestring);
            }
        } else {
            snprintf(param, sizeof param, "messages[%d].tool_calls[%d].function.arguments", i, k);
            if (check_json_text(args, param, e)) goto fail;
            parsed = cJSON_Duplicate(args, 1);
        }
        cJSON *nc = cJSON_CreateObject(), *nf;
        cJSON_AddStringToObject(nc, "id", id->valuestring);
        cJSON_AddStringToObject(nc, "type", "function");
        nf = cJSON_AddObjectToObject(nc, "function");
        cJSON_AddStringToObject(nf, "name", name->valuestring);
        cJSON_AddItemToObject(nf, "arguments", parsed);
        cJSON_AddItemToArray(out, nc);
        k++;
    }
    return out;
fail:
    cJSON_Delete(out);
    return NULL;
}

/* tools: [{"type": "function", "function": {"name", "description"?,
 * "parameters"? (a JSON Schema object), "strict"?}}], at most
 * OAI_MAX_TOOLS, names unique. Kept as given for the template. */
static int parse_tools(const cJSON *root, oai_request *r, oai_error *e) {
    const cJSON *tools = oai_field(root, "tools");
    if (!tools) return 0;
    if (!cJSON_IsArray(tools)) return oai_bad(e, "tools", "'%s' must be an array%s", "");
    const int n = cJSON_GetArraySize(tools);
    if (n > OAI_MAX_TOOLS) return oai_bad(e, "tools", "'%s' has too many entries (at most 128)%s", "");
    char param[64];
    int k = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        snprintf(param, sizeof param, "tools[%d]", k);
        if (!cJSON_IsObject(t)) return oai_bad(e, param, "'%s' must be an object%s", "");
        snprintf(param, sizeof param, "tools[%d].type", k);
        if (!is_string(cJSON_GetObjectItemCaseSensitive(t, "type"), "function"))
            return oai_bad(e, param, "'%s' must be \"function\"%s", "");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        snprintf(param, sizeof param, "tools[%d].function", k);
        if (!cJSON_IsObject(fn)) return oai_bad(e, param, "'%s' must be an object%s", "");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        snprintf(param, sizeof param, "tools[%d].function.name", k);
        if (!cJSON_IsString(name) || !valid_function_name(name->valuestring))
            return oai_bad(e, param, "'%s' must be 1 to 64 letters, digits, '_' or '-'%s", "");
        for (const cJSON *o = tools->child; o != t; o = o->next)
            if (!strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "function"), "name")
                            ->valuestring,
                        name->valuestring))
                return oai_bad(e, param, "'%s' repeats the name of an earlier tool%s", "");
        const cJSON *desc = oai_field(fn, "description");
        snprintf(param, sizeof param, "tools[%d].function.description", k);
        if (desc && !cJSON_IsString(desc)) return oai_bad(e, param, "'%s' must be a string%s", "");
        if (desc && check_text(desc->valuestring, param, e)) return -1;
        const cJSON *params = oai_field(fn, "parameters");
        snprintf(param, sizeof param, "tools[%d].function.parameters", k);
        if (params && !cJSON_IsObject(params)) return oai_bad(e, param, "'%s' must be a JSON Schema object%s", "");
        if (params && check_json_text(params, param, e)) return -1;
        const cJSON *type = params ? cJSON_GetObjectItemCaseSensitive(params, "type") : NULL;
        if (type && !is_string(type, "object"))
            return oai_bad(e, param, "'%s' must describe an object (\"type\": \"object\")%s", "");
        const cJSON *strict = oai_field(fn, "strict");
        snprintf(param, sizeof param, "tools[%d].function.strict", k);
        if (strict && !cJSON_IsBool(strict)) return oai_bad(e, param, "'%s' must be a boolean%s", "");
        k++;
    }
    if (n) r->tools = cJSON_Duplicate(tools, 1);
    return 0;
}

/* tool_choice: "none" | "auto" | "required" | {"type": "function",
 * "function": {"name": one of the tools}}; parallel_tool_calls: a boolean. */
static int parse_tool_choice(const cJSON *root, oai_request *r, oai_error *e) {
    r->parallel_tool_calls = 1;
    if (get_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, e) < 0) return -1;
    r->tool_choice = r->tools ? OAI_TOOLS_AUTO : OAI_TOOLS_NONE;
    const cJSON *tc = oai_field(root, "tool_choice");
    if (!tc) return 0;
    if (is_string(tc, "none")) r->tool_choice = OAI_TOOLS_NONE;
    else if (is_string(tc, "auto")) r->tool_choice = r->tools ? OAI_TOOLS_AUTO : OAI_TOOLS_NONE;
    else if (is_string(tc, "required")) r->tool_choice = OAI_TOOLS_REQUIRED;
    else if (cJSON_IsObject(tc)) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!is_string(cJSON_GetObjectItemCaseSensitive(tc, "type"), "function") || !cJSON_IsString(name))
            return oai_bad(e, "tool_choice",
                       "'%s' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
                       "{\"name\": ...}}%s",
                       "");
        const cJSON *t;
        int found = 0;
        if (r->tools)
            cJSON_ArrayForEach(t, r->tools) {
                const cJSON *tn = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"),
                                                                   "name");
                if (!strcmp(tn->valuestring, name->valuestring)) found = 1;
            }
        if (!found) return oai_bad(e, "tool_choice", "'%s' names a function that is not in 'tools'%s", "");
        r->tool_choice = OAI_TOOLS_NAMED;
        if (!(r->tool_choice_name = strdup(name->valuestring))) return -1;
    } else {
        return oai_bad(e, "tool_choice",
                   "'%s' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
                   "{\"name\": ...}}%s",
                   "");
    }
    if (r->tool_choice == OAI_TOOLS_REQUIRED && !r->tools)
        return oai_bad(e, "tool_choice", "'%s' \"required\" needs 'tools'%s", "");
    return 0;
}

static int parse_messages(const cJSON *root, oai_request *r, oai_error *e) {
    const cJSON *msgs = oai_field(root, "messages");
    if (!msgs) return oai_bad(e, "messages", "'%s' is required%s", "");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return oai_bad(e, "messages", "'%s' must be a non-empty array%s", "");
    r->messages = cJSON_CreateArray();
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        char param[48];
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(m)) return oai_bad(e, param, "'%s' must be an object%s", "");
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        snprintf(param, sizeof param, "messages[%d].role", i);
        if (!cJSON_IsString(role)) return oai_bad(e, param, "'%s' must be a string%s", "");
        const char *rs = role->valuestring;
        /* "developer" is the newer name of "system" (o1 and later). */
        if (!strcmp(rs, "developer")) rs = "system";
        if (!strcmp(rs, "function"))
            return oai_bad(e, param, "'%s': 'function' messages (the deprecated function calling) are not supported; "
                                 "use 'tool' messages%s", "");
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "tool"))
            return oai_bad(e, param, "'%s' must be 'system', 'user', 'assistant' or 'tool'%s", "");
        const int is_tool = !strcmp(rs, "tool");
        const cJSON *calls = oai_field(m, "tool_calls");
        if (calls && strcmp(rs, "assistant")) {
            snprintf(param, sizeof param, "messages[%d].tool_calls", i);
            return oai_bad(e, param, "'%s' is only allowed in assistant messages%s", "");
        }
        if (calls && cJSON_IsArray(calls) && cJSON_GetArraySize(calls) == 0) calls = NULL;
        const cJSON *call_id = oai_field(m, "tool_call_id");
        if (is_tool && !cJSON_IsString(call_id)) {
            snprintf(param, sizeof param, "messages[%d].tool_call_id", i);
            return oai_bad(e, param, call_id ? "'%s' must be a string%s" : "'%s' is required in tool messages%s", "");
        }
        if (call_id) {
            snprintf(param, sizeof param, "messages[%d].tool_call_id", i);
            if (check_text(call_id->valuestring, param, e)) return -1;
        }
        if (oai_field(m, "function_call")) {
            snprintf(param, sizeof param, "messages[%d].function_call", i);
            return oai_bad(e, param, "'%s' (the deprecated function calling) is not supported; use 'tool_calls'%s", "");
        }
        if (oai_field(m, "audio")) {
            snprintf(param, sizeof param, "messages[%d].audio", i);
            return oai_bad(e, param, "'%s' is not supported%s", "");
        }
        cJSON *norm_calls = NULL;
        if (calls && !(norm_calls = parse_tool_calls(calls, i, e))) return -1;
        const cJSON *name = oai_field(m, "name");
        if (name && !cJSON_IsString(name)) {
            cJSON_Delete(norm_calls);
            snprintf(param, sizeof param, "messages[%d].name", i);
            return oai_bad(e, param, "'%s' must be a string%s", "");
        }
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        char *text = NULL;
        if (!content || cJSON_IsNull(content)) {
            /* an assistant turn may have no content (one that called tools
             * usually has none): the template gets "", as llama.cpp passes it.
             * null would be Hugging Face's way, but many templates concatenate
             * or search the content and fail on None (Qwen3, ChatML, Phi-3). */
            if (strcmp(rs, "assistant")) {
                snprintf(param, sizeof param, "messages[%d].content", i);
                cJSON_Delete(norm_calls);
                return oai_bad(e, param, "'%s' is required%s", "");
            }
            text = strdup("");
        } else if (!(text = content_text(content, i, e))) {
            cJSON_Delete(norm_calls);
            return -1;
        }
        cJSON *nm = cJSON_CreateObject();
        cJSON_AddStringToObject(nm, "role", rs);
        if (text) cJSON_AddStringToObject(nm, "content", text);
        else cJSON_AddNullToObject(nm, "content");
        if (norm_calls) cJSON_AddItemToObject(nm, "tool_calls", norm_calls);
        if (call_id) cJSON_AddStringToObject(nm, "tool_call_id", call_id->valuestring);
        if (name) { /* participant names reach the template, which may render them */
            snprintf(param, sizeof param, "messages[%d].name", i);
            if (check_text(name->valuestring, param, e)) {
                free(text);
                cJSON_Delete(nm);
                return -1;
            }
            cJSON_AddStringToObject(nm, "name", name->valuestring);
        }
        free(text);
        cJSON_AddItemToArray(r->messages, nm);
        i++;
    }
    return 0;
}

static int parse_prompt(const cJSON *root, int vocab, oai_request *r, oai_error *e) {
    const cJSON *p = oai_field(root, "prompt");
    if (!p) return oai_bad(e, "prompt", "'%s' is required%s", "");
    /* a one-element array of a string or of a token array: the batch form with one prompt */
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 &&
        (cJSON_IsString(p->child) || cJSON_IsArray(p->child)))
        p = p->child;
    if (cJSON_IsString(p)) {
        if (!p->valuestring[0]) return oai_bad(e, "prompt", "'%s' must not be empty%s", "");
        if (check_text(p->valuestring, "prompt", e)) return -1;
        r->prompt_text = strdup(p->valuestring);
        return r->prompt_text ? 0 : -1;
    }
    const int n = cJSON_IsArray(p) ? cJSON_GetArraySize(p) : 0;
    if (n == 0) return oai_bad(e, "prompt", "'%s' must be a non-empty string or array of token ids%s", "");
    r->prompt_ids = malloc(sizeof(int32_t) * (size_t)n);
    if (!r->prompt_ids) return -1;
    const cJSON *t;
    cJSON_ArrayForEach(t, p) {
        const double x = cJSON_IsNumber(t) ? t->valuedouble : NAN;
        if (!isfinite(x) || x != floor(x) || x < 0 || x >= vocab) {
            if (cJSON_IsString(t))
                return oai_bad(e, "prompt", "'%s': batches of several prompts are not supported%s", "");
            char what[64];
            snprintf(what, sizeof what, " (the vocabulary has %d tokens)", vocab);
            return oai_bad(e, "prompt", "'%s' token ids must be integers in range%s", what);
        }
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)x;
    }
    return 0;
}

static int parse_stop(const cJSON *root, oai_request *r, oai_error *e) {
    const cJSON *s = oai_field(root, "stop");
    if (!s) return 0;
    const cJSON *one = s;
    if (cJSON_IsArray(s)) {
        if (cJSON_GetArraySize(s) > OAI_MAX_STOP)
            return oai_bad(e, "stop", "'%s' takes at most 16 strings%s", "");
        one = s->child;
    } else if (!cJSON_IsString(s)) {
        return oai_bad(e, "stop", "'%s' must be a string or an array of strings%s", "");
    }
    for (; one; one = cJSON_IsArray(s) ? one->next : NULL) {
        if (!cJSON_IsString(one)) return oai_bad(e, "stop", "'%s' must be a string or an array of strings%s", "");
        const size_t l = strlen(one->valuestring);
        if (l == 0 || l > OAI_MAX_STOP_BYTES)
            return oai_bad(e, "stop", "'%s' strings must be 1 to 256 bytes%s", "");
        if (check_text(one->valuestring, "stop", e)) return -1;
        r->stop[r->n_stop++] = strdup(one->valuestring);
    }
    return 0;
}

/* ---- OpenAI fields this server does not implement --------------------------------
 *
 * The rule: a request that uses an OpenAI field the server cannot honour is
 * refused with a 400 whose message and param name the field, rather than
 * answered as if the field were not there. A field is accepted when it
 * cannot change the answer: absent or null; at the value that means "off",
 * which OpenAI clients send routinely (functions: [],
 * function_call: "none" or "auto",
 * modalities: ["text"], suffix: ""); or a field that never
 * affects the output (user, store, metadata, service_tier,
 * prompt_cache_key, safety_identifier). stream_options is honoured. */


/* logit_bias: {"token id": bias, ...}, ids in the vocabulary, biases in
 * [-100, 100] (OpenAI's range), at most OAI_MAX_LOGIT_BIAS entries. */
#define OAI_MAX_LOGIT_BIAS 1024
static int parse_logit_bias(const cJSON *root, int vocab, oai_request *r, oai_error *e) {
    const cJSON *lb = oai_field(root, "logit_bias");
    if (!lb) return 0;
    if (!cJSON_IsObject(lb))
        return oai_bad(e, "logit_bias", "'%s' must be an object mapping token ids to biases%s", "");
    const int n = cJSON_GetArraySize(lb);
    if (n == 0) return 0;
    if (n > OAI_MAX_LOGIT_BIAS)
        return oai_bad(e, "logit_bias", "'%s' has too many entries (at most 1024)%s", "");
    r->bias_ids = malloc(sizeof(int32_t) * (size_t)n);
    r->bias_values = malloc(sizeof(float) * (size_t)n);
    if (!r->bias_ids || !r->bias_values) {
        oai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, lb) {
        char *end;
        const long id = strtol(it->string, &end, 10);
        if (end == it->string || *end || id < 0 || id >= vocab)
            return oai_bad(e, "logit_bias", "'%s' keys must be token ids of this model's vocabulary%s", "");
        if (!cJSON_IsNumber(it) || !(it->valuedouble >= -100 && it->valuedouble <= 100))
            return oai_bad(e, "logit_bias", "'%s' values must be numbers from -100 to 100%s", "");
        r->bias_ids[k] = (int32_t)id;
        r->bias_values[k] = (float)it->valuedouble;
        k++;
    }
    r->sampling.bias_ids = r->bias_ids;
    r->sampling.bias_values = r->bias_values;
    r->sampling.n_bias = k;
    return 0;
}

/* ---- structured output ------------------------------------------------------
 *
 * response_format {"type": "json_object"} or {"type": "json_schema",
 * "json_schema": {"name", "schema", "strict"}}, or the extension field
 * "grammar" (GBNF text), become one compiled grammar; a grammar that does
 * not compile, or a schema outside the supported subset, is a 400 naming
 * the field it came from. strict: false is enforced all the same. */

static int set_grammar(oai_request *r, const char *text, const char *param, oai_error *e) {
    char err[256];
    r->grammar = gram_compile(text, strlen(text), err, sizeof err);
    if (!r->grammar) {
        oai_error_set(e, 400, "invalid_request_error", param, NULL, "'%s': %s", param, err);
        return -1;
    }
    r->grammar_param = param;
    return 0;
}

static int parse_structured(const cJSON *root, oai_request *r, oai_error *e) {
    const cJSON *rf = oai_field(root, "response_format"), *gr = oai_field(root, "grammar");
    const cJSON *type = rf ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
    if (rf && (!cJSON_IsObject(rf) || !cJSON_IsString(type)))
        return oai_bad(e, "response_format", "'%s' must be an object with a string 'type'%s", "");
    const int wants_format = rf && !is_string(type, "text");
    if (gr) {
        if (wants_format) return oai_bad(e, "grammar", "'%s' cannot be combined with a 'response_format' other than text%s", "");
        if (!cJSON_IsString(gr) || !gr->valuestring[0]) return oai_bad(e, "grammar", "'%s' must be a non-empty string%s", "");
        if (check_text(gr->valuestring, "grammar", e)) return -1;
        return set_grammar(r, gr->valuestring, "grammar", e);
    }
    if (!wants_format) return 0;
    if (is_string(type, "json_object")) return set_grammar(r, js_object_grammar(), "response_format", e);
    if (!is_string(type, "json_schema"))
        return oai_bad(e, "response_format", "'%s.type' must be \"text\", \"json_object\" or \"json_schema\"%s", "");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return oai_bad(e, "response_format", "'%s.json_schema' is required with type json_schema and must be an object%s", "");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(js, "name"), *strict = oai_field(js, "strict");
    if (!cJSON_IsString(name) || !name->valuestring[0] || strlen(name->valuestring) > 64)
        return oai_bad(e, "response_format", "'%s.json_schema.name' must be a string of 1 to 64 characters%s", "");
    if (strict && !cJSON_IsBool(strict))
        return oai_bad(e, "response_format", "'%s.json_schema.strict' must be a boolean%s", "");
    const cJSON *schema = oai_field(js, "schema");
    if (!schema) return set_grammar(r, js_object_grammar(), "response_format", e);
    if (!cJSON_IsObject(schema) && !cJSON_IsTrue(schema))
        return oai_bad(e, "response_format", "'%s.json_schema.schema' must be an object%s", "");
    char err[256];
    char *text = js_schema_grammar(schema, err, sizeof err);
    if (!text) {
        oai_error_set(e, 400, "invalid_request_error", "response_format", NULL,
                      "'response_format.json_schema.schema': %s", err);
        return -1;
    }
    const int rc = set_grammar(r, text, "response_format", e);
    free(text);
    return rc;
}

static int check_unsupported(const cJSON *root, oai_kind kind, oai_error *e) {
    const cJSON *v;
    if (kind == OAI_COMPLETION) {
        static const char *const CHAT_ONLY[] = {"tools", "tool_choice", "parallel_tool_calls"};
        for (size_t i = 0; i < sizeof CHAT_ONLY / sizeof CHAT_ONLY[0]; i++)
            if (oai_field(root, CHAT_ONLY[i]))
                return oai_bad(e, CHAT_ONLY[i], "'%s' is only available on /v1/chat/completions%s", "");
    }
    if ((v = oai_field(root, "functions")) && !is_empty_array(v))
        return oai_bad(e, "functions", "'%s' (the deprecated function calling) is not supported; use 'tools'%s", "");
    if ((v = oai_field(root, "function_call")) && !is_string(v, "none") && !is_string(v, "auto"))
        return oai_bad(e, "function_call", "'%s' (the deprecated function calling) is not supported; use 'tool_choice'%s",
                   "");
    if ((v = oai_field(root, "modalities")) &&
        !(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && is_string(v->child, "text")))
        return oai_bad(e, "modalities", "'%s' is not supported: the only modality is [\"text\"]%s", "");
    static const char *const NEVER[] = {"audio", "prediction", "reasoning_effort", "web_search_options",
                                        "verbosity"};
    for (size_t i = 0; i < sizeof NEVER / sizeof NEVER[0]; i++)
        if (oai_field(root, NEVER[i])) return oai_bad(e, NEVER[i], "'%s' is not supported by this server%s", "");
    if (kind == OAI_COMPLETION && (v = oai_field(root, "suffix")) && !is_string(v, ""))
        return oai_bad(e, "suffix", "'%s' is not supported%s", "");
    /* ignored, but held to OpenAI's types: a gateway keying on them reads what the server read */
    static const char *const STRINGS[] = {"user", "prompt_cache_key", "safety_identifier", "service_tier"};
    for (size_t i = 0; i < sizeof STRINGS / sizeof STRINGS[0]; i++)
        if ((v = oai_field(root, STRINGS[i])) && !cJSON_IsString(v))
            return oai_bad(e, STRINGS[i], "'%s' must be a string%s", "");
    if ((v = oai_field(root, "metadata")) && !cJSON_IsObject(v))
        return oai_bad(e, "metadata", "'%s' must be an object%s", "");
    if ((v = oai_field(root, "store")) && !cJSON_IsBool(v))
        return oai_bad(e, "store", "'%s' must be a boolean%s", "");
    return 0;
}

/* The body as one JSON object, held to RFC 8259 first (oai_check_body,
 * oai_check_json) and parsed from a copy whose NULs are marked (mark_nuls).
 * NULL with e filled. */
static cJSON *parse_body(const char *body, size_t len, oai_error *e) {
    if (oai_check_body(body, len, e)) return NULL;
    char *marked = mark_nuls(body, len, &len);
    if (!marked) {
        oai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(marked, len, &end, 0);
    int bad = !root;
    if (bad) {
        oai_error_set(e, 400, "invalid_request_error", NULL, NULL,
                      "the body is not valid JSON (near byte %zu)", end && end >= marked ? (size_t)(end - marked) : 0);
    } else if (end) { /* trailing bytes after the value (whitespace aside) make the body invalid */
        while ((size_t)(end - marked) < len && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')) end++;
        if ((bad = (size_t)(end - marked) < len))
            oai_error_set(e, 400, "invalid_request_error", NULL, NULL, "the body has bytes after the JSON value");
    }
    free(marked); /* the tree holds copies of its strings */
    if (!bad && (bad = !cJSON_IsObject(root)))
        oai_error_set(e, 400, "invalid_request_error", NULL, NULL, "the body must be a JSON object");
    if (bad || oai_check_json(root, e)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* The length limit, the sampling parameters, seed and n. 0, or -1 with e filled. */
static int parse_sampling(const cJSON *root, oai_kind kind, oai_request *r, oai_error *e) {
    long long ll;
    double d;
    int got;
    /* max_completion_tokens is the newer name; it wins when both are given. */
    if ((got = get_int(root, "max_tokens", 1, 1 << 30, &ll, e)) < 0) return -1;
    if (got) r->max_tokens = (int)ll;
    if (kind == OAI_CHAT) {
        if ((got = get_int(root, "max_completion_tokens", 1, 1 << 30, &ll, e)) < 0) return -1;
        if (got) r->max_tokens = (int)ll;
    }
    if ((got = get_number(root, "temperature", 0, 2, 0, &d, e)) < 0) return -1;
    if (got) r->sampling.temperature = (float)d;
    if ((got = get_number(root, "top_p", 0, 1, 1, &d, e)) < 0) return -1;
    if (got) r->sampling.top_p = (float)d;
    if ((got = get_number(root, "presence_penalty", -2, 2, 0, &d, e)) < 0) return -1;
    if (got) r->sampling.presence_penalty = (float)d;
    if ((got = get_number(root, "frequency_penalty", -2, 2, 0, &d, e)) < 0) return -1;
    if (got) r->sampling.frequency_penalty = (float)d;
    if ((got = get_int(root, "top_k", -1, 1 << 30, &ll, e)) < 0) return -1;
    if (got) r->sampling.top_k = ll < 0 ? 0 : (int)ll; /* -1 means off, as in vLLM */
    if ((got = get_number(root, "min_p", 0, 1, 0, &d, e)) < 0) return -1;
    if (got) r->sampling.min_p = (float)d;
    if ((got = get_number(root, "repetition_penalty", 0, 10, 1, &d, e)) < 0) return -1;
    if (got) r->sampling.repetition_penalty = (float)d;
    /* seeds beyond 2^53 lose precision as JSON numbers; any integer is accepted */
    if ((got = get_int(root, "seed", -9007199254740992.0, 9007199254740992.0, &ll, e)) < 0) return -1;
    if (got) {
        r->sampling.seed = (uint64_t)ll;
        r->has_seed = 1;
    }
    if ((got = get_int(root, "n", 1, OAI_MAX_N, &ll, e)) < 0) return -1;
    if (got) r->n = (int)ll;
    return 0;
}

/* stream, ignore_eos and stream_options. 0, or -1 with e filled. */
static int parse_stream(const cJSON *root, oai_request *r, oai_error *e) {
    if (get_bool(root, "stream", &r->stream, e) < 0) return -1;
    if (get_bool(root, "ignore_eos", &r->ignore_eos, e) < 0) return -1;
    const cJSON *so = oai_field(root, "stream_options");
    if (!so) return 0;
    if (!cJSON_IsObject(so)) return oai_bad(e, "stream_options", "'%s' must be an object%s", "");
    if (!r->stream) return oai_bad(e, "stream_options", "'%s' is only allowed when 'stream' is true%s", "");
    return get_bool(so, "include_usage", &r->include_usage, e) < 0 ? -1 : 0;
}

/* logprobs and top_logprobs, which chat and completions spell differently,
 * and completions' echo and best_of. 0, or -1 with e filled. */
static int parse_logprobs(const cJSON *root, oai_kind kind, oai_request *r, oai_error *e) {
    long long ll;
    int b = 0, got;
    if (kind == OAI_CHAT) {
        if (get_bool(root, "logprobs", &b, e) < 0) return -1;
        if ((got = get_int(root, "top_logprobs", 0, OAI_MAX_TOP_LOGPROBS, &ll, e)) < 0) return -1;
        if (got && !b) return oai_bad(e, "top_logprobs", "'%s' requires 'logprobs' to be true%s", "");
        r->logprobs = b;
        r->top_logprobs = got ? (int)ll : 0;
        return 0;
    }
    /* completions: logprobs is the number of alternatives (0 = chosen token only) */
    if ((got = get_int(root, "logprobs", 0, OAI_MAX_TOP_LOGPROBS, &ll, e)) < 0) return -1;
    r->logprobs = got;
    r->top_logprobs = got ? (int)ll : 0;
    if (get_bool(root, "echo", &b, e) < 0) return -1;
    if (b) return oai_bad(e, "echo", "'%s' is not supported%s", "");
    const cJSON *bo = oai_field(root, "best_of");
    if (bo && !(cJSON_IsNumber(bo) && bo->valuedouble == r->n))
        return oai_bad(e, "best_of", "'%s' other than n is not supported%s", "");
    return 0;
}

/* Every field of a parsed body, in the order their errors are reported. 0,
 * or -1 with e filled (left empty on out of memory). */
static int parse_fields(const cJSON *root, oai_kind kind, int vocab, oai_request *r, oai_error *e) {
    const cJSON *model = oai_field(root, "model");
    if (!model) return oai_bad(e, "model", "'%s' is required%s", "");
    if (!cJSON_IsString(model)) return oai_bad(e, "model", "'%s' must be a string%s", "");
    r->model = strdup(model->valuestring);
    if ((kind == OAI_CHAT ? parse_messages(root, r, e) : parse_prompt(root, vocab, r, e)) != 0) return -1;
    if (check_unsupported(root, kind, e) != 0) return -1;
    if (kind == OAI_CHAT && (parse_tools(root, r, e) != 0 || parse_tool_choice(root, r, e) != 0)) return -1;
    if (parse_sampling(root, kind, r, e) != 0 || parse_stream(root, r, e) != 0) return -1;
    if (parse_stop(root, r, e) != 0) return -1;
    if (parse_logit_bias(root, vocab, r, e) != 0) return -1;
    if (parse_structured(root, r, e) != 0) return -1;
    return parse_logprobs(root, kind, r, e);
}

cJSON *oai_parse_object(const char *body, size_t len, oai_error *e) { return parse_body(body, len, e); }

int oai_parse_tree(oai_kind kind, const cJSON *root, int vocab, oai_request *r, oai_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->api = kind == OAI_CHAT ? OAI_API_CHAT : OAI_API_COMPLETIONS;
    r->max_tokens = -1;
    r->n = 1;
    r->sampling = samp_default_params();
    /* OpenAI's default temperature is 1 (sampling); greedy needs temperature 0. */
    r->sampling.temperature = 1.0f;
    const int rc = parse_fields(root, kind, vocab, r, e);
    if (rc != 0) {
        if (e->status == 0) oai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        oai_request_free(r);
    }
    return rc;
}

int oai_parse(oai_kind kind, const char *body, size_t len, int vocab, oai_request *r, oai_error *e) {
    memset(r, 0, sizeof *r);
    cJSON *root = parse_body(body, len, e);
    if (!root) return -1;
    const int rc = oai_parse_tree(kind, root, vocab, r, e);
    cJSON_Delete(root);
    return rc;
}

void oai_request_free(oai_request *r) {
    gram_free(r->grammar);
    free(r->bias_ids);
    free(r->bias_values);
    free(r->model);
    cJSON_Delete(r->messages);
    cJSON_Delete(r->tools);
    free(r->tool_choice_name);
    free(r->prompt_text);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    cJSON_Delete(r->api_echo);
    cJSON_Delete(r->api_history);
    memset(r, 0, sizeof *r);
}

/* ---- shared with the other endpoints' parsers ----------------------------- */

char *oai_mark_nuls(const char *body, size_t len, size_t *out_len) { return mark_nuls(body, len, out_len); }

int oai_check_text(const char *s, const char *param, oai_error *e) { return check_text(s, param, e); }
