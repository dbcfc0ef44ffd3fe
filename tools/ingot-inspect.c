/* ingot-inspect.c — prints a checkpoint's format, metadata and tensor list as JSON; dumps a tensor as f32.
 *
 *   ingot-inspect [--full-arrays] FILE_OR_DIR [--dump NAME OUT.f32 [--as TYPE]]
 *
 * Output (stable; the Lua generator reads it):
 *   {"format":"gguf"|"safetensors", "gguf_version":3 (GGUF only),
 *    "metadata":{key: value, ...},
 *    "tensors":[{"name":..., "dtype":"q4_1", "shape":[1536,576], "nbytes":...}, ...]}
 * Integers are printed exactly (64-bit), float32 values with the shortest
 * digits that read back to the same float, NaN/inf as null. Strings are JSON
 * escaped; invalid UTF-8 bytes and embedded NULs become U+FFFD. Arrays of more
 * than 64 elements are summarized as {"array_type":T,"length":N} unless
 * --full-arrays is given. Safetensors metadata (__metadata__) is not reported.
 * Exit status: 0 success, 1 bad file or failed dump, 2 usage.
 */
#include "dtype.h"
#include "gguf.h"
#include "weights.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INLINE_ARRAY 64

/* Copies n bytes as valid UTF-8: each invalid byte (and each NUL, which a C
 * string cannot carry) becomes U+FFFD, so the JSON output always parses. */
static char *utf8_clean(const char *s, size_t n) {
    char *out = malloc(n * 3 + 1);
    if (!out) return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, j = 0;
    while (i < n) {
        unsigned c = p[i];
        int len = c < 0x80 ? 1 : (c >= 0xc2 && c <= 0xdf) ? 2 : (c >= 0xe0 && c <= 0xef) ? 3 : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
        int ok = len > 0 && c != 0 && i + (size_t)len <= n;
        for (int k = 1; ok && k < len; k++) ok = (p[i + k] & 0xc0) == 0x80;
        if (ok && len == 3) {
            unsigned c1 = p[i + 1];
            ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0); /* overlong, surrogates */
        }
        if (ok && len == 4) {
            unsigned c1 = p[i + 1];
            ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90); /* overlong, > U+10FFFF */
        }
        if (ok) {
            memcpy(out + j, p + i, (size_t)len);
            j += (size_t)len;
            i += (size_t)len;
        } else {
            memcpy(out + j, "\xef\xbf\xbd", 3);
            j += 3;
            i++;
        }
    }
    out[j] = 0;
    return out;
}

static cJSON *json_string(const char *s, size_t n) {
    char *c = utf8_clean(s, n);
    if (!c) return NULL;
    cJSON *j = cJSON_CreateString(c);
    free(c);
    return j;
}

/* JSON numbers printed from exact text, so 64-bit integers survive. */
static cJSON *json_u64(uint64_t v) { char b[32]; snprintf(b, sizeof b, "%" PRIu64, v); return cJSON_CreateRaw(b); }
static cJSON *json_i64(int64_t v) { char b[32]; snprintf(b, sizeof b, "%" PRId64, v); return cJSON_CreateRaw(b); }

/* Shortest decimal that reads back to the same value (as float if is_f32). */
static cJSON *json_real(double v, int is_f32) {
    if (!isfinite(v)) return cJSON_CreateNull();
    char b[40];
    for (int prec = is_f32 ? 6 : 15; prec <= 17; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, v);
        if (is_f32 ? strtof(b, NULL) == (float)v : strtod(b, NULL) == v) break;
    }
    /* Keep it a float for readers that care about the distinction. */
    if (!strpbrk(b, ".eEn")) strcat(b, ".0");
    return cJSON_CreateRaw(b);
}

/* Element i of a numeric array as a JSON value. */
static cJSON *array_elem(const gguf_kv *kv, uint64_t i) {
    int64_t iv;
    double dv;
    switch (kv->arr_type) {
    case GGUF_TYPE_BOOL:
        gguf_arr_int(kv, i, &iv);
        return cJSON_CreateBool(iv != 0);
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64:
        gguf_arr_float(kv, i, &dv);
        return json_real(dv, kv->arr_type == GGUF_TYPE_FLOAT32);
    case GGUF_TYPE_UINT64: {
        uint64_t u;
        memcpy(&u, (const uint8_t *)kv->arr_data + i * 8, 8);
        return json_u64(u);
    }
    default:
        if (gguf_arr_int(kv, i, &iv)) return cJSON_CreateNull();
        return json_i64(iv);
    }
}

static cJSON *kv_value(const gguf_kv *kv, int full_arrays) {
    switch (kv->type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        return json_u64(kv->v.u64);
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        return json_i64(kv->v.i64);
    case GGUF_TYPE_FLOAT32: return json_real(kv->v.f64, 1);
    case GGUF_TYPE_FLOAT64: return json_real(kv->v.f64, 0);
    case GGUF_TYPE_BOOL: return cJSON_CreateBool(kv->v.b);
    case GGUF_TYPE_STRING: return json_string(kv->v.str, strlen(kv->v.str));
    case GGUF_TYPE_ARRAY: break;
    default: return cJSON_CreateNull();
    }
    if (kv->arr_n > MAX_INLINE_ARRAY && !full_arrays) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "array_type", gguf_type_name(kv->arr_type));
        cJSON_AddItemToObject(o, "length", json_u64(kv->arr_n));
        return o;
    }
    cJSON *a = cJSON_CreateArray();
    for (uint64_t i = 0; a && i < kv->arr_n; i++) {
        cJSON *e = kv->arr_type == GGUF_TYPE_STRING ? json_string(kv->arr_str[i], kv->arr_str_len[i]) : array_elem(kv, i);
        if (!e) { cJSON_Delete(a); return NULL; }
        cJSON_AddItemToArray(a, e);
    }
    return a;
}

/* Builds the whole document; NULL only on allocation failure. */
static cJSON *describe(const wt_file *wf, int full_arrays) {
    cJSON *root = cJSON_CreateObject();
    int is_gguf = wt_get_format(wf) == WT_FORMAT_GGUF;
    cJSON_AddStringToObject(root, "format", is_gguf ? "gguf" : "safetensors");
    const gguf_file *g = wt_gguf(wf);
    if (g) cJSON_AddItemToObject(root, "gguf_version", json_u64(gguf_version(g)));
    cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
    for (size_t i = 0; g && i < gguf_n_kv(g); i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        cJSON *v = kv_value(kv, full_arrays);
        if (!v) { cJSON_Delete(root); return NULL; }
        char *key = utf8_clean(kv->key, strlen(kv->key));
        if (!key) { cJSON_Delete(v); cJSON_Delete(root); return NULL; }
        cJSON_AddItemToObject(meta, key, v);
        free(key);
    }
    cJSON *tensors = cJSON_AddArrayToObject(root, "tensors");
    for (size_t i = 0; i < wt_count(wf); i++) {
        const wt_tensor *t = wt_at(wf, i);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "name", json_string(t->name, strlen(t->name)));
        cJSON_AddStringToObject(o, "dtype", dtype_name(t->dtype));
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(shape, json_i64(t->shape[d]));
        cJSON_AddItemToObject(o, "nbytes", json_u64(t->nbytes));
        cJSON_AddItemToArray(tensors, o);
    }
    return root;
}

/* Writes tensor `name` as raw little-endian f32, a chunk of rows at a time. With as_type set
 * (--as), each row goes through ingot's load-time quantizer first (dtype_quantize_row, what
 * --dtype does) and back: the values a build converted to that type computes with. */
static int dump(const wt_file *wf, const char *name, const char *out, const char *as_type) {
    const wt_tensor *t = wt_find(wf, name);
    if (!t) { fprintf(stderr, "%s: tensor '%s' not found\n", wt_path(wf), name); return 1; }
    int64_t row = t->n_dims ? t->shape[t->n_dims - 1] : 1;
    int64_t rows = 1;
    for (int d = 0; d + 1 < t->n_dims; d++) rows *= t->shape[d];
    size_t row_bytes;
    if (dtype_row_bytes(t->dtype, row, &row_bytes)) { fprintf(stderr, "%s: tensor '%s': bad row size\n", wt_path(wf), name); return 1; }
    ingot_dtype as = INGOT_F32;
    size_t as_row_bytes = 0;
    if (as_type) {
        if (dtype_from_name(as_type, &as) != 0 || !dtype_can_quantize(as)) {
            fprintf(stderr, "--as %s: not a type ingot quantizes to\n", as_type);
            return 1;
        }
        if (dtype_row_bytes(as, row, &as_row_bytes)) {
            fprintf(stderr, "%s: tensor '%s': rows of %lld are not whole %s blocks\n", wt_path(wf), name, (long long)row, as_type);
            return 1;
        }
    }
    FILE *fp = fopen(out, "wb");
    if (!fp) { perror(out); return 1; }
    int64_t chunk = row > 0 ? (1 << 20) / row : rows;
    if (chunk < 1) chunk = 1;
    int64_t buf_elems = row * (chunk < rows ? chunk : rows);
    float *buf = malloc((size_t)(buf_elems > 0 ? buf_elems : 1) * sizeof(float)); /* never malloc(0) */
    uint8_t *qbuf = as_type ? malloc(as_row_bytes > 0 ? as_row_bytes : 1) : NULL;
    int rc = buf && (qbuf || !as_type) ? 0 : 1;
    if (rc) fprintf(stderr, "out of memory\n");
    for (int64_t r = 0; rc == 0 && row > 0 && r < rows; r += chunk) {
        int64_t nr = rows - r < chunk ? rows - r : chunk;
        dtype_dequantize_row(t->dtype, (const uint8_t *)t->data + (size_t)r * row_bytes, buf, nr * row);
        for (int64_t i = 0; as_type && rc == 0 && i < nr; i++) {
            if (dtype_quantize_row(as, buf + i * row, qbuf, row) != 0) {
                fprintf(stderr, "%s: tensor '%s': row %lld holds a NaN or an infinity, which %s cannot store\n",
                        wt_path(wf), name, (long long)(r + i), as_type);
                rc = 1;
                break;
            }
            dtype_dequantize_row(as, qbuf, buf + i * row, row);
        }
        if (rc) break;
        if (fwrite(buf, sizeof(float), (size_t)(nr * row), fp) != (size_t)(nr * row)) { perror(out); rc = 1; }
    }
    free(buf);
    free(qbuf);
    if (fclose(fp) != 0 && rc == 0) { perror(out); rc = 1; }
    return rc;
}

static int usage(void) {
    fprintf(stderr, "usage: ingot-inspect [--full-arrays] FILE_OR_DIR [--dump NAME OUT.f32 [--as TYPE]]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *path = NULL, *dump_name = NULL, *dump_out = NULL, *as_type = NULL;
    int full_arrays = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--full-arrays") == 0) full_arrays = 1;
        else if (strcmp(argv[i], "--dump") == 0 && i + 2 < argc) { dump_name = argv[i + 1]; dump_out = argv[i + 2]; i += 2; }
        else if (strcmp(argv[i], "--as") == 0 && i + 1 < argc) as_type = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1] != 0) return usage();
        else if (!path) path = argv[i];
        else return usage();
    }
    if (!path || (as_type && !dump_name)) return usage();
    {
        /* dtype_dequantize_row writes host floats; the dump format is little-endian. */
        const uint32_t one = 1;
        if (*(const uint8_t *)&one != 1 && dump_name) { fprintf(stderr, "--dump needs a little-endian host\n"); return 1; }
    }
    char err[1024];
    wt_file *wf = wt_open(path, err, sizeof err);
    if (!wf) { fprintf(stderr, "%s\n", err); return 1; }
    int rc = 0;
    if (dump_name) {
        rc = dump(wf, dump_name, dump_out, as_type);
    } else {
        cJSON *doc = describe(wf, full_arrays);
        char *text = doc ? cJSON_Print(doc) : NULL;
        if (!text) { fprintf(stderr, "out of memory\n"); rc = 1; }
        else if (fputs(text, stdout) == EOF || fputc('\n', stdout) == EOF || fflush(stdout) != 0) rc = 1;
        free(text);
        cJSON_Delete(doc);
    }
    wt_close(wf);
    return rc;
}
