/* gguf.h — GGUF v2/v3 reader (mmap, bounds-checked).
 *
 * gguf_open maps the file read-only, parses the header, every metadata value
 * and every tensor info, and checks every length and offset against the file
 * size before use. Strings (keys, string values, arrays of strings) are copied
 * into NUL-terminated heap strings; numeric arrays point into the mapping.
 * Tensor data pointers point into the mapping (zero copy).
 */
#ifndef INGOT_GGUF_H
#define INGOT_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include "dtype.h"

typedef enum {
    GGUF_TYPE_UINT8 = 0, GGUF_TYPE_INT8 = 1, GGUF_TYPE_UINT16 = 2, GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4, GGUF_TYPE_INT32 = 5, GGUF_TYPE_FLOAT32 = 6, GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8, GGUF_TYPE_ARRAY = 9, GGUF_TYPE_UINT64 = 10, GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12, GGUF_TYPE_COUNT
} gguf_type;

typedef struct {
    char *key;
    gguf_type type;        /* for GGUF_TYPE_ARRAY see arr_type / arr_n */
    union { uint64_t u64; int64_t i64; double f64; int b; char *str; } v; /* scalars */
    gguf_type arr_type;    /* element type of an array */
    uint64_t arr_n;        /* element count of an array */
    char **arr_str;        /* array of strings: arr_n NUL-terminated copies */
    uint64_t *arr_str_len; /* their byte lengths (strings may contain NUL) */
    const void *arr_data;  /* array of numbers: packed little-endian, maybe unaligned */
} gguf_kv;

typedef struct {
    char *name;
    uint32_t ggml_type;    /* raw GGML type id as stored */
    ingot_dtype dtype;     /* mapped type (only supported ones pass gguf_open) */
    uint32_t n_dims;
    uint64_t ne[4];        /* GGML order: ne[0] is the innermost (contiguous) dim */
    uint64_t offset;       /* relative to the start of the data section */
    const void *data;
    size_t nbytes;
} gguf_tensor;

typedef struct gguf_file gguf_file;

gguf_file *gguf_open(const char *path, char *err, size_t errlen);
void gguf_close(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
size_t gguf_n_kv(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, size_t i);
const gguf_kv *gguf_get(const gguf_file *f, const char *key); /* NULL if absent */

/* Scalar readers: accept any integer (resp. numeric) type; 0 on success,
 * -1 if the key is absent or of the wrong kind. */
int gguf_get_int(const gguf_file *f, const char *key, int64_t *out);
int gguf_get_float(const gguf_file *f, const char *key, double *out);
int gguf_get_bool(const gguf_file *f, const char *key, int *out);
const char *gguf_get_str(const gguf_file *f, const char *key); /* NULL if absent/not a string */
/* Element i of a numeric array, converted; 0 on success, -1 on type/range error. */
int gguf_arr_int(const gguf_kv *kv, uint64_t i, int64_t *out);
int gguf_arr_float(const gguf_kv *kv, uint64_t i, double *out);

size_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

const char *gguf_type_name(gguf_type t);

#endif
