/* safetensors.c — safetensors reader: header length, cJSON header, offset checks, sharded index. */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "printable.h"

#define ST_MAX_INDEX (100u << 20) /* an index.json larger than this is not an index */

typedef struct {
    char *path;
    const uint8_t *map;
    size_t size;
    size_t data_start; /* 8 + header length */
} st_shard;

struct st_file {
    char *path;
    st_shard *shards;
    size_t n_shards;
    st_tensor *tensors;
    size_t n_tensors, cap;
    const st_tensor **sorted; /* by name */
};

/* Writes "path: message" into err (one line). Returns -1. */
static int st_fail(char *err, size_t errlen, const char *path, const char *fmt, ...) {
    if (!err || errlen == 0) return -1;
    int n = snprintf(err, errlen, "%s: ", path);
    if (n < 0) n = 0;
    if ((size_t)n < errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    for (char *p = err; *p; p++) if (*p == '\n' || *p == '\r') *p = ' ';
    return -1;
}

/* A JSON number that is an exact non-negative integer below 2^53 (beyond
 * that doubles lose integers, and no real file is that large). */
static int json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return -1;
    double v = item->valuedouble;
    if (!isfinite(v) || v < 0 || v > 9007199254740992.0 || floor(v) != v) return -1;
    *out = (uint64_t)v;
    return 0;
}

/* Maps a file read-only. Empty files are not mapped (size 0, map NULL). */
static int map_file(const char *path, const uint8_t **map, size_t *size, char *err, size_t errlen, const char *ctx) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return st_fail(err, errlen, path, "cannot open%s: %s", ctx, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return st_fail(err, errlen, path, "not a regular file%s", ctx);
    }
    *size = (size_t)st.st_size;
    *map = NULL;
    if (*size > 0) {
        void *m = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            close(fd);
            return st_fail(err, errlen, path, "mmap failed: %s", strerror(errno));
        }
        *map = m;
    }
    close(fd);
    return 0;
}

static int parse_dtype(const char *s, ingot_dtype *out) {
    if (strcmp(s, "F32") == 0) { *out = INGOT_F32; return 0; }
    if (strcmp(s, "F16") == 0) { *out = INGOT_F16; return 0; }
    if (strcmp(s, "BF16") == 0) { *out = INGOT_BF16; return 0; }
    /* the parts of quantized checkpoints (GPTQ/AWQ codes, FP8 weights) */
    if (strcmp(s, "I32") == 0) { *out = INGOT_I32; return 0; }
    if (strcmp(s, "F8_E4M3") == 0) { *out = INGOT_F8_E4M3; return 0; }
    return -1;
}

/* Validates one header entry and appends it to f->tensors. */
static int add_tensor(st_file *f, size_t si, const cJSON *item, char *err, size_t errlen) {
    st_shard *sh = &f->shards[si];
    char nb[160];
    const char *name = load_printable(item->string, nb, sizeof nb);
    if (!cJSON_IsObject(item)) return st_fail(err, errlen, sh->path, "tensor '%s': header entry is not a JSON object", name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(jd)) return st_fail(err, errlen, sh->path, "tensor '%s': missing or non-string \"dtype\"", name);
    if (!cJSON_IsArray(js)) return st_fail(err, errlen, sh->path, "tensor '%s': missing or non-array \"shape\"", name);
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2)
        return st_fail(err, errlen, sh->path, "tensor '%s': \"data_offsets\" must be an array [begin, end]", name);
    st_tensor t = {0};
    t.shard = si;
    if (parse_dtype(jd->valuestring, &t.dtype)) {
        char db[64];
        return st_fail(err, errlen, sh->path, "tensor '%s': unsupported dtype '%s' (supported: F32, F16, BF16, I32, F8_E4M3)", name,
                       load_printable(jd->valuestring, db, sizeof db));
    }
    int nd = cJSON_GetArraySize(js);
    if (nd > ST_MAX_DIMS) return st_fail(err, errlen, sh->path, "tensor '%s': %d dimensions (at most %d supported)", name, nd, ST_MAX_DIMS);
    t.n_dims = nd;
    uint64_t nel = 1;
    for (int i = 0; i < nd; i++) {
        uint64_t d;
        if (json_uint(cJSON_GetArrayItem(js, i), &d))
            return st_fail(err, errlen, sh->path, "tensor '%s': shape[%d] is not a non-negative integer", name, i);
        if (d != 0 && nel > (uint64_t)INT64_MAX / d)
            return st_fail(err, errlen, sh->path, "tensor '%s': shape overflows", name);
        nel *= d;
        t.shape[i] = (int64_t)d;
    }
    uint64_t begin, end;
    if (json_uint(cJSON_GetArrayItem(jo, 0), &begin) || json_uint(cJSON_GetArrayItem(jo, 1), &end))
        return st_fail(err, errlen, sh->path, "tensor '%s': data_offsets are not non-negative integers", name);
    size_t data_size = sh->size - sh->data_start;
    if (begin > end || end > data_size)
        return st_fail(err, errlen, sh->path, "tensor '%s': data_offsets [%llu, %llu] outside the data section (%zu bytes)",
                       name, (unsigned long long)begin, (unsigned long long)end, data_size);
    size_t es = dtype_block_bytes(t.dtype);
    if (nel > UINT64_MAX / es || nel * es != end - begin)
        return st_fail(err, errlen, sh->path,
                       "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but shape and dtype %s need %llu elements x %zu bytes",
                       name, (unsigned long long)begin, (unsigned long long)end, (unsigned long long)(end - begin),
                       jd->valuestring, (unsigned long long)nel, es);
    t.begin = begin;
    t.nbytes = (size_t)(end - begin);
    t.data = sh->map + sh->data_start + begin;
    t.name = strdup(item->string);
    if (!t.name) return st_fail(err, errlen, sh->path, "out of memory");
    if (f->n_tensors == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 64;
        st_tensor *nt = realloc(f->tensors, nc * sizeof *nt);
        if (!nt) { free(t.name); return st_fail(err, errlen, sh->path, "out of memory"); }
        f->tensors = nt;
        f->cap = nc;
    }
    f->tensors[f->n_tensors++] = t;
    return 0;
}

static int cmp_begin(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Rejects overlapping data ranges among tensors [from, to) of one shard. */
static int check_overlaps(st_file *f, size_t from, size_t to, const char *path, char *err, size_t errlen) {
    size_t n = to - from;
    if (n < 2) return 0;
    const st_tensor **v = malloc(n * sizeof *v);
    if (!v) return st_fail(err, errlen, path, "out of memory");
    for (size_t i = 0; i < n; i++) v[i] = &f->tensors[from + i];
    qsort(v, n, sizeof *v, cmp_begin);
    int rc = 0;
    for (size_t i = 1; i < n && rc == 0; i++) {
        const st_tensor *a = v[i - 1], *b = v[i];
        if (a->nbytes && b->nbytes && a->begin + a->nbytes > b->begin) {
            char n1[160], n2[160];
            rc = st_fail(err, errlen, path, "tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                         load_printable(a->name, n1, sizeof n1), (unsigned long long)a->begin,
                         (unsigned long long)(a->begin + a->nbytes), load_printable(b->name, n2, sizeof n2),
                         (unsigned long long)b->begin, (unsigned long long)(b->begin + b->nbytes));
        }
    }
    free(v);
    return rc;
}

/* Maps shard si and appends its tensors. ctx is appended to open errors. */
static int parse_shard(st_file *f, size_t si, char *err, size_t errlen, const char *ctx) {
    st_shard *sh = &f->shards[si];
    if (map_file(sh->path, &sh->map, &sh->size, err, errlen, ctx)) return -1;
    if (sh->size < 8)
        return st_fail(err, errlen, sh->path, "file too small (%zu bytes) for a safetensors header", sh->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | sh->map[i];
    if (hlen > ST_MAX_HEADER)
        return st_fail(err, errlen, sh->path, "safetensors header length %llu is absurd (limit %u bytes)",
                       (unsigned long long)hlen, ST_MAX_HEADER);
    if (hlen > sh->size - 8)
        return st_fail(err, errlen, sh->path, "safetensors header length %llu runs past end of file (%zu bytes)",
                       (unsigned long long)hlen, sh->size);
    sh->data_start = 8 + (size_t)hlen;
    const char *hdr = (const char *)sh->map + 8;
    const char *endp = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &endp, 0);
    if (!root) {
        size_t at = endp && endp >= hdr && endp <= hdr + hlen ? (size_t)(endp - hdr) : 0;
        return st_fail(err, errlen, sh->path, "invalid JSON header (parse error near header byte %zu)", at);
    }
    /* Writers pad the header with spaces; anything else after the object is corruption. */
    for (const char *p = endp; p && p < hdr + hlen; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != '\0') {
            cJSON_Delete(root);
            return st_fail(err, errlen, sh->path, "invalid JSON header: trailing data at header byte %zu", (size_t)(p - hdr));
        }
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return st_fail(err, errlen, sh->path, "invalid JSON header: not a JSON object");
    }
    size_t first = f->n_tensors;
    int rc = 0;
    for (const cJSON *it = root->child; it && rc == 0; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) continue;
        rc = add_tensor(f, si, it, err, errlen);
    }
    cJSON_Delete(root);
    if (rc) return -1;
    return check_overlaps(f, first, f->n_tensors, sh->path, err, errlen);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

/* Builds the by-name index and rejects duplicate names (also across shards). */
static int finish(st_file *f, char *err, size_t errlen) {
    f->sorted = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *f->sorted);
    if (!f->sorted) return st_fail(err, errlen, f->path, "out of memory");
    for (size_t i = 0; i < f->n_tensors; i++) f->sorted[i] = &f->tensors[i];
    qsort(f->sorted, f->n_tensors, sizeof *f->sorted, cmp_name);
    for (size_t i = 1; i < f->n_tensors; i++) {
        if (strcmp(f->sorted[i - 1]->name, f->sorted[i]->name) == 0) {
            char nb[160];
            return st_fail(err, errlen, f->path, "duplicate tensor name '%s'", load_printable(f->sorted[i]->name, nb, sizeof nb));
        }
    }
    return 0;
}

static st_file *new_file(const char *path) {
    st_file *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->path = strdup(path);
    if (!f->path) { free(f); return NULL; }
    return f;
}

/* Adds a shard path; returns its index or -1 on allocation failure. */
static long add_shard(st_file *f, const char *path) {
    st_shard *ns = realloc(f->shards, (f->n_shards + 1) * sizeof *ns);
    if (!ns) return -1;
    f->shards = ns;
    memset(&ns[f->n_shards], 0, sizeof *ns);
    ns[f->n_shards].path = strdup(path);
    if (!ns[f->n_shards].path) return -1;
    return (long)f->n_shards++;
}

st_file *st_open(const char *path, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    st_file *f = new_file(path);
    if (!f || add_shard(f, path) < 0) {
        st_fail(err, errlen, path, "out of memory");
        st_close(f);
        return NULL;
    }
    if (parse_shard(f, 0, err, errlen, "") || finish(f, err, errlen)) {
        st_close(f);
        return NULL;
    }
    return f;
}

/* A shard must be a plain file name in the index's folder. */
static int bad_shard_name(const char *s) {
    return s[0] == 0 || strchr(s, '/') || strchr(s, '\\') || strstr(s, "..");
}

st_file *st_open_index(const char *index_path, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    st_file *f = new_file(index_path);
    cJSON *root = NULL;
    char *dir = NULL, *buf = NULL;
    const uint8_t *map = NULL;
    size_t size = 0;
    char nb[160], sb[160];
    if (!f) { st_fail(err, errlen, index_path, "out of memory"); return NULL; }
    if (map_file(index_path, &map, &size, err, errlen, "")) goto fail;
    if (size > ST_MAX_INDEX) {
        st_fail(err, errlen, index_path, "index file is absurdly large (%zu bytes)", size);
        goto fail;
    }
    root = cJSON_ParseWithLength(size ? (const char *)map : "", size);
    if (!cJSON_IsObject(root)) {
        st_fail(err, errlen, index_path, "invalid JSON in index file");
        goto fail;
    }
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        st_fail(err, errlen, index_path, "index file has no \"weight_map\" object");
        goto fail;
    }
    /* Shards live next to the index. */
    dir = strdup(index_path);
    if (!dir) { st_fail(err, errlen, index_path, "out of memory"); goto fail; }
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = 0; else dir[0] = 0;
    size_t dlen = strlen(dir);
    for (const cJSON *it = wm->child; it; it = it->next) {
        if (!cJSON_IsString(it)) {
            st_fail(err, errlen, index_path, "weight_map entry '%s' is not a string", load_printable(it->string, nb, sizeof nb));
            goto fail;
        }
        if (bad_shard_name(it->valuestring)) {
            st_fail(err, errlen, index_path, "weight_map entry '%s': shard name '%s' must be a plain file name (no '/' or '..')",
                    load_printable(it->string, nb, sizeof nb), load_printable(it->valuestring, sb, sizeof sb));
            goto fail;
        }
        free(buf);
        buf = malloc(dlen + strlen(it->valuestring) + 1);
        if (!buf) { st_fail(err, errlen, index_path, "out of memory"); goto fail; }
        memcpy(buf, dir, dlen);
        strcpy(buf + dlen, it->valuestring);
        size_t k = 0;
        while (k < f->n_shards && strcmp(f->shards[k].path, buf) != 0) k++;
        if (k == f->n_shards && add_shard(f, buf) < 0) { st_fail(err, errlen, index_path, "out of memory"); goto fail; }
    }
    if (f->n_shards == 0) {
        st_fail(err, errlen, index_path, "weight_map is empty");
        goto fail;
    }
    char ctx[200];
    snprintf(ctx, sizeof ctx, " (shard listed in %s)", load_printable(index_path, nb, sizeof nb));
    for (size_t k = 0; k < f->n_shards; k++)
        if (parse_shard(f, k, err, errlen, ctx)) goto fail;
    if (finish(f, err, errlen)) goto fail;
    /* Every mapped name must be in the shard the index says. */
    for (const cJSON *it = wm->child; it; it = it->next) {
        const st_tensor *t = st_find(f, it->string);
        const char *want_shard = it->valuestring;
        if (!t) {
            st_fail(err, errlen, index_path, "tensor '%s' is mapped to shard '%s' but not found there",
                    load_printable(it->string, nb, sizeof nb), load_printable(want_shard, sb, sizeof sb));
            goto fail;
        }
        const char *have = f->shards[t->shard].path + dlen;
        if (strcmp(have, want_shard) != 0) {
            st_fail(err, errlen, index_path, "tensor '%s' is mapped to shard '%s' but not found there (it is in '%s')",
                    load_printable(it->string, nb, sizeof nb), load_printable(want_shard, sb, sizeof sb), have);
            goto fail;
        }
    }
    cJSON_Delete(root);
    free(dir);
    free(buf);
    if (map) munmap((void *)map, size);
    return f;
fail:
    cJSON_Delete(root);
    free(dir);
    free(buf);
    if (map) munmap((void *)map, size);
    st_close(f);
    return NULL;
}

void st_close(st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->sorted);
    for (size_t i = 0; i < f->n_shards; i++) {
        if (f->shards[i].map) munmap((void *)f->shards[i].map, f->shards[i].size);
        free(f->shards[i].path);
    }
    free(f->shards);
    free(f->path);
    free(f);
}

size_t st_n_tensors(const st_file *f) { return f->n_tensors; }
const st_tensor *st_tensor_at(const st_file *f, size_t i) { return i < f->n_tensors ? &f->tensors[i] : NULL; }
size_t st_n_shards(const st_file *f) { return f->n_shards; }
const char *st_shard_path(const st_file *f, size_t i) { return i < f->n_shards ? f->shards[i].path : NULL; }

const st_tensor *st_find(const st_file *f, const char *name) {
    size_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, f->sorted[mid]->name);
        if (c == 0) return f->sorted[mid];
        if (c < 0) hi = mid; else lo = mid + 1;
    }
    return NULL;
}
