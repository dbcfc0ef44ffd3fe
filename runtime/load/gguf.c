/* gguf.c — GGUF v2/v3 reader: mmap, parse and bounds-check header, metadata and tensor infos. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "printable.h"

/* The GGML type ids this engine reads (ggml.h's enum ggml_type): dtype_table.h's GGML column. */
static const struct { int ggml; ingot_dtype dtype; const char *name; } GGML_TYPES[] = {
#define INGOT_DTYPE(E, name, elems, bytes, ggml, ctype, role) {ggml, INGOT_##E, #E},
#include "dtype_table.h"
};
#define N_GGML_TYPES ((int)(sizeof GGML_TYPES / sizeof GGML_TYPES[0]))

/* Smallest possible encodings, used to reject counts that cannot fit in
 * the bytes that remain before trusting them for allocation. */
#define MIN_KV_BYTES 13     /* key length (8) + 1-byte key + type (4) ... value is at least 1 more */
#define MIN_TENSOR_BYTES 24 /* name length (8) + n_dims (4) + type (4) + offset (8) */
#define MAX_ALIGNMENT (1u << 30)

struct gguf_file {
    char *path;
    const uint8_t *map;
    size_t size;
    uint32_t version;
    size_t alignment;
    size_t data_start;      /* file offset of the data section */
    size_t n_kv;
    gguf_kv *kv;
    size_t n_tensors;
    gguf_tensor *tensors;
    const gguf_kv **kv_sorted;        /* by key, for lookup and duplicate detection */
    const gguf_tensor **tn_sorted;    /* by name */
};

/* Parsing cursor. Every read goes through need(), which is the single place
 * that compares against the file size. */
typedef struct {
    gguf_file *f;
    size_t pos;
    char *err;
    size_t errlen;
} reader;

/* Writes "path: message" into err. Always returns -1 for tail calls. */
static int fail(reader *r, const char *fmt, ...) {
    if (!r->err || r->errlen == 0) return -1;
    int n = snprintf(r->err, r->errlen, "%s: ", r->f->path);
    if (n < 0) n = 0;
    if ((size_t)n < r->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    /* The message must stay one line even if it quotes hostile names. */
    for (char *p = r->err; *p; p++) if (*p == '\n' || *p == '\r') *p = ' ';
    return -1;
}

/* Checks that n bytes are available at the cursor. */
static int need(reader *r, uint64_t n, const char *what) {
    if (n > r->f->size - r->pos)
        return fail(r, "truncated: %s needs %llu bytes at offset %zu, file has %zu bytes", what,
                    (unsigned long long)n, r->pos, r->f->size);
    return 0;
}

static int rd_u32(reader *r, uint32_t *v, const char *what) {
    if (need(r, 4, what)) return -1;
    memcpy(v, r->f->map + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int rd_u64(reader *r, uint64_t *v, const char *what) {
    if (need(r, 8, what)) return -1;
    memcpy(v, r->f->map + r->pos, 8);
    r->pos += 8;
    return 0;
}

/* Reads a length-prefixed string into a fresh NUL-terminated copy. */
static int rd_str(reader *r, char **out, uint64_t *len_out, const char *what) {
    uint64_t len;
    if (rd_u64(r, &len, what)) return -1;
    if (len > r->f->size - r->pos)
        return fail(r, "%s: string length %llu at offset %zu runs past end of file (%zu bytes)", what,
                    (unsigned long long)len, r->pos - 8, r->f->size);
    char *s = malloc((size_t)len + 1);
    if (!s) return fail(r, "%s: out of memory for a %llu-byte string", what, (unsigned long long)len);
    memcpy(s, r->f->map + r->pos, (size_t)len);
    s[len] = 0;
    r->pos += (size_t)len;
    *out = s;
    if (len_out) *len_out = len;
    return 0;
}

/* Byte size of a scalar of type t; 0 for string/array/unknown. */
static size_t scalar_size(uint32_t t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static int is_int_type(gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_INT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_INT16 ||
           t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
}

static int is_unsigned_type(gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_UINT64;
}

const char *gguf_type_name(gguf_type t) {
    static const char *const names[GGUF_TYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
        "string", "array", "uint64", "int64", "float64",
    };
    return (unsigned)t < GGUF_TYPE_COUNT ? names[t] : "unknown";
}

/* Decodes the little-endian scalar at p into kv->v according to kv->type. */
static void decode_scalar(gguf_kv *kv, const uint8_t *p) {
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; float f32;
    switch (kv->type) {
    case GGUF_TYPE_UINT8: u8 = p[0]; kv->v.u64 = u8; break;
    case GGUF_TYPE_INT8: memcpy(&i8, p, 1); kv->v.i64 = i8; break;
    case GGUF_TYPE_BOOL: kv->v.b = p[0] != 0; break;
    case GGUF_TYPE_UINT16: memcpy(&u16, p, 2); kv->v.u64 = u16; break;
    case GGUF_TYPE_INT16: memcpy(&i16, p, 2); kv->v.i64 = i16; break;
    case GGUF_TYPE_UINT32: memcpy(&u32, p, 4); kv->v.u64 = u32; break;
    case GGUF_TYPE_INT32: memcpy(&i32, p, 4); kv->v.i64 = i32; break;
    case GGUF_TYPE_FLOAT32: memcpy(&f32, p, 4); kv->v.f64 = f32; break;
    case GGUF_TYPE_UINT64: memcpy(&kv->v.u64, p, 8); break;
    case GGUF_TYPE_INT64: memcpy(&kv->v.i64, p, 8); break;
    case GGUF_TYPE_FLOAT64: memcpy(&kv->v.f64, p, 8); break;
    default: break;
    }
}

/* Parses one key/value pair at the cursor into kv (already zeroed). */
static int parse_kv(reader *r, gguf_kv *kv, uint64_t index) {
    char what[160], nb[160];
    snprintf(what, sizeof what, "metadata key #%llu", (unsigned long long)index);
    if (rd_str(r, &kv->key, NULL, what)) return -1;
    const char *key = load_printable(kv->key, nb, sizeof nb);
    snprintf(what, sizeof what, "type of metadata '%.40s'", key);
    uint32_t type;
    if (rd_u32(r, &type, what)) return -1;
    if (type >= GGUF_TYPE_COUNT) return fail(r, "metadata '%s': unknown value type %u", key, type);
    kv->type = (gguf_type)type;
    snprintf(what, sizeof what, "value of metadata '%.40s'", key);
    if (type == GGUF_TYPE_STRING) return rd_str(r, &kv->v.str, NULL, what);
    if (type != GGUF_TYPE_ARRAY) {
        size_t sz = scalar_size(type);
        if (need(r, sz, what)) return -1;
        decode_scalar(kv, r->f->map + r->pos);
        r->pos += sz;
        return 0;
    }
    uint32_t at;
    uint64_t n;
    if (rd_u32(r, &at, what) || rd_u64(r, &n, what)) return -1;
    if (at == GGUF_TYPE_ARRAY) return fail(r, "metadata '%s': nested arrays are not supported", key);
    if (at >= GGUF_TYPE_COUNT) return fail(r, "metadata '%s': unknown array element type %u", key, at);
    kv->arr_type = (gguf_type)at;
    size_t remaining = r->f->size - r->pos;
    /* Each string element needs at least its 8-byte length. */
    uint64_t min_elem = at == GGUF_TYPE_STRING ? 8 : scalar_size(at);
    if (n > remaining / min_elem)
        return fail(r, "metadata '%s': array of %llu %s elements at offset %zu runs past end of file (%zu bytes)",
                    key, (unsigned long long)n, gguf_type_name((gguf_type)at), r->pos, r->f->size);
    kv->arr_n = n;
    if (at != GGUF_TYPE_STRING) {
        kv->arr_data = r->f->map + r->pos;
        r->pos += (size_t)(n * min_elem);
        return 0;
    }
    kv->arr_str = calloc(n ? n : 1, sizeof *kv->arr_str);
    kv->arr_str_len = calloc(n ? n : 1, sizeof *kv->arr_str_len);
    if (!kv->arr_str || !kv->arr_str_len) return fail(r, "metadata '%s': out of memory", key);
    for (uint64_t i = 0; i < n; i++) {
        snprintf(what, sizeof what, "element %llu of metadata '%.30s'", (unsigned long long)i, key);
        if (rd_str(r, &kv->arr_str[i], &kv->arr_str_len[i], what)) return -1;
    }
    return 0;
}

static int cmp_kv(const void *a, const void *b) {
    return strcmp((*(const gguf_kv *const *)a)->key, (*(const gguf_kv *const *)b)->key);
}
static int cmp_tn(const void *a, const void *b) {
    return strcmp((*(const gguf_tensor *const *)a)->name, (*(const gguf_tensor *const *)b)->name);
}
static int cmp_tn_offset(const void *a, const void *b) {
    uint64_t x = (*(const gguf_tensor *const *)a)->offset, y = (*(const gguf_tensor *const *)b)->offset;
    return x < y ? -1 : x > y;
}

static int map_type(uint32_t g, ingot_dtype *out) {
    for (int i = 0; i < N_GGML_TYPES; i++)
        if (GGML_TYPES[i].ggml >= 0 && (uint32_t)GGML_TYPES[i].ggml == g) {
            *out = GGML_TYPES[i].dtype;
            return 0;
        }
    return -1;
}

/* "F32=0, F16=1, ..." in GGML id order, for the error that names an unsupported type. */
static void supported_types(char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (int id = 0, last = -1; id < 256; id++)
        for (int i = 0; i < N_GGML_TYPES; i++)
            if (GGML_TYPES[i].ggml == id && n < cap) {
                n += (size_t)snprintf(out + n, cap - n, "%s%s=%d", last < 0 ? "" : ", ", GGML_TYPES[i].name, id);
                last = id;
            }
}

/* Parses one tensor info and validates everything that does not depend on
 * the data section start (shape, type, size, alignment of the offset). */
static int parse_tensor(reader *r, gguf_tensor *t, uint64_t index) {
    char what[160], nb[160];
    snprintf(what, sizeof what, "name of tensor #%llu", (unsigned long long)index);
    if (rd_str(r, &t->name, NULL, what)) return -1;
    const char *name = load_printable(t->name, nb, sizeof nb);
    snprintf(what, sizeof what, "info of tensor '%.40s'", name);
    if (rd_u32(r, &t->n_dims, what)) return -1;
    if (t->n_dims < 1 || t->n_dims > 4)
        return fail(r, "tensor '%s': n_dims %u out of range (1..4)", name, t->n_dims);
    for (uint32_t i = 0; i < t->n_dims; i++)
        if (rd_u64(r, &t->ne[i], what)) return -1;
    for (uint32_t i = t->n_dims; i < 4; i++) t->ne[i] = 1;
    if (rd_u32(r, &t->ggml_type, what) || rd_u64(r, &t->offset, what)) return -1;
    if (map_type(t->ggml_type, &t->dtype)) {
        char supported[256];
        supported_types(supported, sizeof supported);
        return fail(r, "tensor '%s': unsupported ggml type %u (supported: %s)", name, t->ggml_type, supported);
    }
    /* Element count must fit in int64 (shapes are exposed as int64). */
    uint64_t nel = 1;
    for (uint32_t i = 0; i < t->n_dims; i++) {
        uint64_t d = t->ne[i];
        if (d > (uint64_t)INT64_MAX || (d != 0 && nel > (uint64_t)INT64_MAX / d))
            return fail(r, "tensor '%s': shape overflows (dimension %u is %llu)", name, i, (unsigned long long)d);
        nel *= d;
    }
    int be = dtype_block_elems(t->dtype);
    if (t->ne[0] % (uint64_t)be != 0)
        return fail(r, "tensor '%s': ne[0] = %llu is not a multiple of the %s block size %d", name,
                    (unsigned long long)t->ne[0], dtype_name(t->dtype), be);
    size_t row;
    if (dtype_row_bytes(t->dtype, (int64_t)t->ne[0], &row))
        return fail(r, "tensor '%s': row size overflows", name);
    uint64_t rows = t->ne[0] ? nel / t->ne[0] : 0;
    if (rows != 0 && row > SIZE_MAX / rows) return fail(r, "tensor '%s': byte size overflows", name);
    t->nbytes = row * (size_t)rows;
    if (t->offset % r->f->alignment != 0)
        return fail(r, "tensor '%s': offset %llu is not a multiple of the alignment %zu", name,
                    (unsigned long long)t->offset, r->f->alignment);
    return 0;
}

/* Reads general.alignment if present; it must be a non-zero power of two. */
static int read_alignment(reader *r) {
    gguf_file *f = r->f;
    f->alignment = 32;
    const gguf_kv *kv = gguf_get(f, "general.alignment");
    if (!kv) return 0;
    int64_t a;
    if (gguf_get_int(f, "general.alignment", &a) != 0)
        return fail(r, "general.alignment has type %s, expected an integer", gguf_type_name(kv->type));
    if (a <= 0 || (a & (a - 1)) != 0 || a > (int64_t)MAX_ALIGNMENT)
        return fail(r, "general.alignment %lld is not a power of two in 1..%u", (long long)a, MAX_ALIGNMENT);
    f->alignment = (size_t)a;
    return 0;
}

/* Parses the whole file; on failure returns -1 with err set and f partially filled. */
static int parse(reader *r) {
    gguf_file *f = r->f;
    char nb[160], nb2[160];
    if (f->size < 4 || memcmp(f->map, "GGUF", 4) != 0) {
        if (f->size < 4) return fail(r, "truncated: only %zu bytes, not a GGUF file", f->size);
        char m[5];
        for (int i = 0; i < 4; i++) m[i] = (f->map[i] >= 0x20 && f->map[i] < 0x7f) ? (char)f->map[i] : '?';
        m[4] = 0;
        return fail(r, "not a GGUF file: bad magic '%s' (expected 'GGUF')", m);
    }
    r->pos = 4;
    if (rd_u32(r, &f->version, "version")) return -1;
    if (f->version == 1) return fail(r, "GGUF version 1 is not supported (only versions 2 and 3)");
    if (f->version != 2 && f->version != 3) {
        if (f->version == 0x02000000u || f->version == 0x03000000u)
            return fail(r, "big-endian GGUF is not supported (version field %u)", f->version);
        return fail(r, "unsupported GGUF version %u (only versions 2 and 3)", f->version);
    }
    uint64_t n_tensors, n_kv;
    if (rd_u64(r, &n_tensors, "tensor count") || rd_u64(r, &n_kv, "metadata count")) return -1;
    size_t remaining = f->size - r->pos;
    if (n_kv > remaining / MIN_KV_BYTES)
        return fail(r, "absurd metadata count n_kv = %llu for a %zu-byte file", (unsigned long long)n_kv, f->size);
    if (n_tensors > remaining / MIN_TENSOR_BYTES)
        return fail(r, "absurd tensor count n_tensors = %llu for a %zu-byte file", (unsigned long long)n_tensors, f->size);
    f->kv = calloc(n_kv ? n_kv : 1, sizeof *f->kv);
    f->kv_sorted = calloc(n_kv ? n_kv : 1, sizeof *f->kv_sorted);
    f->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *f->tensors);
    f->tn_sorted = calloc(n_tensors ? n_tensors : 1, sizeof *f->tn_sorted);
    if (!f->kv || !f->kv_sorted || !f->tensors || !f->tn_sorted) return fail(r, "out of memory");

    for (uint64_t i = 0; i < n_kv; i++) {
        f->n_kv = i + 1; /* so gguf_close frees a partly parsed entry */
        if (parse_kv(r, &f->kv[i], i)) return -1;
        f->kv_sorted[i] = &f->kv[i];
    }
    qsort(f->kv_sorted, f->n_kv, sizeof *f->kv_sorted, cmp_kv);
    for (size_t i = 1; i < f->n_kv; i++)
        if (strcmp(f->kv_sorted[i - 1]->key, f->kv_sorted[i]->key) == 0)
            return fail(r, "duplicate metadata key '%s'", load_printable(f->kv_sorted[i]->key, nb, sizeof nb));
    if (read_alignment(r)) return -1;

    for (uint64_t i = 0; i < n_tensors; i++) {
        f->n_tensors = i + 1;
        if (parse_tensor(r, &f->tensors[i], i)) return -1;
        f->tn_sorted[i] = &f->tensors[i];
    }
    qsort(f->tn_sorted, f->n_tensors, sizeof *f->tn_sorted, cmp_tn);
    for (size_t i = 1; i < f->n_tensors; i++)
        if (strcmp(f->tn_sorted[i - 1]->name, f->tn_sorted[i]->name) == 0)
            return fail(r, "duplicate tensor name '%s'", load_printable(f->tn_sorted[i]->name, nb, sizeof nb));

    /* The data section starts at the next alignment boundary after the infos. */
    size_t pad = (f->alignment - r->pos % f->alignment) % f->alignment;
    if (f->n_tensors == 0) {
        f->data_start = r->pos + pad <= f->size ? r->pos + pad : f->size;
        return 0;
    }
    if (pad > f->size - r->pos)
        return fail(r, "truncated: data section would start at offset %zu, file has %zu bytes", r->pos + pad, f->size);
    f->data_start = r->pos + pad;
    size_t data_size = f->size - f->data_start;
    for (size_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return fail(r, "tensor '%s': data [offset %llu, %zu bytes] runs past end of file (%zu bytes, data section starts at %zu)",
                        load_printable(t->name, nb, sizeof nb), (unsigned long long)t->offset, t->nbytes, f->size, f->data_start);
        t->data = f->map + f->data_start + t->offset;
    }
    /* Overlap check on a by-offset order; tn_sorted is re-sorted by name afterwards. */
    const gguf_tensor **by_off = malloc(f->n_tensors * sizeof *by_off);
    if (!by_off) return fail(r, "out of memory");
    memcpy(by_off, f->tn_sorted, f->n_tensors * sizeof *by_off);
    qsort(by_off, f->n_tensors, sizeof *by_off, cmp_tn_offset);
    for (size_t i = 1; i < f->n_tensors; i++) {
        const gguf_tensor *a = by_off[i - 1], *b = by_off[i];
        if (a->nbytes && b->nbytes && a->offset + a->nbytes > b->offset) {
            fail(r, "tensors '%s' [offset %llu, %zu bytes] and '%s' [offset %llu, %zu bytes] overlap",
                 load_printable(a->name, nb, sizeof nb), (unsigned long long)a->offset, a->nbytes,
                 load_printable(b->name, nb2, sizeof nb2), (unsigned long long)b->offset, b->nbytes);
            free(by_off);
            return -1;
        }
    }
    free(by_off);
    return 0;
}

/* Maps the file read-only and parses it. Returns NULL with err set on any problem. */
gguf_file *gguf_open(const char *path, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) { if (err) snprintf(err, errlen, "%s: out of memory", path); return NULL; }
    reader r = { .f = f, .err = err, .errlen = errlen };
    f->path = strdup(path);
    if (!f->path) { if (err) snprintf(err, errlen, "%s: out of memory", path); free(f); return NULL; }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { fail(&r, "cannot open: %s", strerror(errno)); gguf_close(f); return NULL; }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fail(&r, "not a regular file");
        close(fd);
        gguf_close(f);
        return NULL;
    }
    f->size = (size_t)st.st_size;
    if (f->size == 0) { fail(&r, "truncated: empty file (0 bytes), not a GGUF file"); close(fd); gguf_close(f); return NULL; }
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) { f->size = 0; fail(&r, "mmap failed: %s", strerror(errno)); gguf_close(f); return NULL; }
    f->map = m;
    if (parse(&r)) { gguf_close(f); return NULL; }
    return f;
}

/* Frees everything, including a partly parsed file. */
void gguf_close(gguf_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        free(kv->key);
        if (kv->type == GGUF_TYPE_STRING) free(kv->v.str);
        if (kv->arr_str) {
            for (uint64_t j = 0; j < kv->arr_n; j++) free(kv->arr_str[j]);
            free(kv->arr_str);
        }
        free(kv->arr_str_len);
    }
    for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->kv);
    free(f->kv_sorted);
    free(f->tensors);
    free(f->tn_sorted);
    if (f->map) munmap((void *)f->map, f->size);
    free(f->path);
    free(f);
}

uint32_t gguf_version(const gguf_file *f) { return f->version; }
size_t gguf_n_kv(const gguf_file *f) { return f->n_kv; }
const gguf_kv *gguf_kv_at(const gguf_file *f, size_t i) { return i < f->n_kv ? &f->kv[i] : NULL; }
size_t gguf_n_tensors(const gguf_file *f) { return f->n_tensors; }
const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i) { return i < f->n_tensors ? &f->tensors[i] : NULL; }

/* Binary search over kv_sorted (valid once parsing got past the duplicate check). */
const gguf_kv *gguf_get(const gguf_file *f, const char *key) {
    size_t lo = 0, hi = f->n_kv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(key, f->kv_sorted[mid]->key);
        if (c == 0) return f->kv_sorted[mid];
        if (c < 0) hi = mid; else lo = mid + 1;
    }
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    size_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, f->tn_sorted[mid]->name);
        if (c == 0) return f->tn_sorted[mid];
        if (c < 0) hi = mid; else lo = mid + 1;
    }
    return NULL;
}

/* Integer value of a scalar kv of integer type; uint64 above INT64_MAX fails. */
static int kv_int(const gguf_kv *kv, int64_t *out) {
    if (!kv || !is_int_type(kv->type)) return -1;
    if (is_unsigned_type(kv->type)) {
        if (kv->v.u64 > (uint64_t)INT64_MAX) return -1;
        *out = (int64_t)kv->v.u64;
    } else {
        *out = kv->v.i64;
    }
    return 0;
}

int gguf_get_int(const gguf_file *f, const char *key, int64_t *out) { return kv_int(gguf_get(f, key), out); }

int gguf_get_float(const gguf_file *f, const char *key, double *out) {
    const gguf_kv *kv = gguf_get(f, key);
    if (!kv) return -1;
    if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64) { *out = kv->v.f64; return 0; }
    if (is_unsigned_type(kv->type)) { *out = (double)kv->v.u64; return 0; }
    if (is_int_type(kv->type)) { *out = (double)kv->v.i64; return 0; }
    return -1;
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out) {
    const gguf_kv *kv = gguf_get(f, key);
    if (!kv || kv->type != GGUF_TYPE_BOOL) return -1;
    *out = kv->v.b;
    return 0;
}

const char *gguf_get_str(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_get(f, key);
    return kv && kv->type == GGUF_TYPE_STRING ? kv->v.str : NULL;
}

/* Reads element i of a numeric array into a scratch kv so one decoder serves both. */
static int arr_elem(const gguf_kv *kv, uint64_t i, gguf_kv *tmp) {
    if (!kv || kv->type != GGUF_TYPE_ARRAY || !kv->arr_data || i >= kv->arr_n) return -1;
    size_t sz = scalar_size(kv->arr_type);
    if (sz == 0) return -1;
    memset(tmp, 0, sizeof *tmp);
    tmp->type = kv->arr_type;
    decode_scalar(tmp, (const uint8_t *)kv->arr_data + i * sz);
    return 0;
}

int gguf_arr_int(const gguf_kv *kv, uint64_t i, int64_t *out) {
    gguf_kv tmp;
    if (arr_elem(kv, i, &tmp)) return -1;
    if (tmp.type == GGUF_TYPE_BOOL) { *out = tmp.v.b; return 0; }
    return kv_int(&tmp, out);
}

int gguf_arr_float(const gguf_kv *kv, uint64_t i, double *out) {
    gguf_kv tmp;
    if (arr_elem(kv, i, &tmp)) return -1;
    if (tmp.type == GGUF_TYPE_FLOAT32 || tmp.type == GGUF_TYPE_FLOAT64) *out = tmp.v.f64;
    else if (tmp.type == GGUF_TYPE_BOOL) *out = tmp.v.b;
    else if (is_unsigned_type(tmp.type)) *out = (double)tmp.v.u64;
    else *out = (double)tmp.v.i64;
    return 0;
}
