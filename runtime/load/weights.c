/* weights.c — one tensor view over GGUF and safetensors checkpoints (dispatch by content, not name). */
#include "weights.h"
#include "safetensors.h"
#include "quant_ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct wt_file {
    char *path;
    wt_format format;
    gguf_file *gguf;
    st_file *st;
    size_t n;
    wt_tensor *tensors; /* same order as the underlying reader's list, unless repacked */
    qc_result qc;       /* a GPTQ/AWQ/FP8 checkpoint's repacked list (owns tensors then) */
    const wt_tensor **sorted; /* by name, when repacked (the reader's index no longer matches) */
};

/* Fills the tensor list from whichever reader is open. */
static int build_list(wt_file *f) {
    f->n = f->gguf ? gguf_n_tensors(f->gguf) : st_n_tensors(f->st);
    f->tensors = calloc(f->n ? f->n : 1, sizeof *f->tensors);
    if (!f->tensors) return -1;
    for (size_t i = 0; i < f->n; i++) {
        wt_tensor *w = &f->tensors[i];
        if (f->gguf) {
            const gguf_tensor *t = gguf_tensor_at(f->gguf, i);
            w->name = t->name;
            w->dtype = t->dtype;
            w->n_dims = (int)t->n_dims;
            /* GGML lists the innermost dimension first; present outermost first. */
            for (int d = 0; d < w->n_dims; d++) w->shape[d] = (int64_t)t->ne[w->n_dims - 1 - d];
            w->data = t->data;
            w->nbytes = t->nbytes;
        } else {
            const st_tensor *t = st_tensor_at(f->st, i);
            w->name = t->name;
            w->dtype = t->dtype;
            w->n_dims = t->n_dims;
            for (int d = 0; d < w->n_dims; d++) w->shape[d] = t->shape[d];
            w->data = t->data;
            w->nbytes = t->nbytes;
        }
    }
    return 0;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

typedef enum { KIND_GGUF, KIND_ST, KIND_INDEX, KIND_UNKNOWN } file_kind;

/* Sniffs the first bytes. The file extension is used only to pick which
 * reader explains why an unrecognizable file is bad. */
static file_kind sniff(const char *path, char *err, size_t errlen, int *io_error) {
    *io_error = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        *io_error = 1;
        return KIND_UNKNOWN;
    }
    uint8_t b[16] = {0};
    ssize_t got = read(fd, b, sizeof b);
    struct stat st;
    size_t size = fstat(fd, &st) == 0 ? (size_t)st.st_size : 0;
    close(fd);
    if (got >= 4 && memcmp(b, "GGUF", 4) == 0) return KIND_GGUF;
    if (got >= 9) {
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
        if (hlen <= size - 8 && b[8] == '{') return KIND_ST;
    }
    size_t i = 0;
    while (i < (size_t)(got > 0 ? got : 0) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r')) i++;
    if (got > 0 && i < (size_t)got && b[i] == '{') return KIND_INDEX;
    if (ends_with(path, ".safetensors")) return KIND_ST;
    if (ends_with(path, ".gguf")) return KIND_GGUF;
    char m[5];
    for (int k = 0; k < 4; k++) m[k] = (k < got && b[k] >= 0x20 && b[k] < 0x7f) ? (char)b[k] : '?';
    m[4] = 0;
    snprintf(err, errlen, "%s: unrecognized format: not GGUF (bad magic '%s') and not safetensors", path, m);
    return KIND_UNKNOWN;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const wt_tensor *const *)a)->name, (*(const wt_tensor *const *)b)->name);
}

/* A safetensors checkpoint's config.json (in the folder, or beside the
 * file) may declare GPTQ, AWQ or FP8 quantization: its linears are
 * repacked (quant_ckpt.h) and the list is replaced by the repacked one. */
static int repack_quantized(wt_file *f, int is_dir, char *err, size_t errlen) {
    size_t n = strlen(f->path) + sizeof "/config.json";
    char *config = malloc(n);
    if (!config) {
        snprintf(err, errlen, "%s: out of memory", f->path);
        return -1;
    }
    if (is_dir) snprintf(config, n, "%s/config.json", f->path);
    else {
        const char *slash = strrchr(f->path, '/');
        if (slash) snprintf(config, n, "%.*s/config.json", (int)(slash - f->path), f->path);
        else snprintf(config, n, "config.json");
    }
    int rc = qc_repack(f->path, config, f->tensors, f->n, &f->qc, err, errlen);
    free(config);
    if (rc) return -1;
    if (!f->qc.method) { /* not quantized: the reader's list and index as they are */
        qc_free(&f->qc);
        return 0;
    }
    free(f->tensors);
    f->tensors = f->qc.tensors;
    f->n = f->qc.n;
    f->sorted = malloc((f->n ? f->n : 1) * sizeof *f->sorted);
    if (!f->sorted) {
        snprintf(err, errlen, "%s: out of memory", f->path);
        return -1;
    }
    for (size_t i = 0; i < f->n; i++) f->sorted[i] = &f->tensors[i];
    qsort(f->sorted, f->n, sizeof *f->sorted, cmp_name);
    return 0;
}

const char *wt_quant_method(const wt_file *f) { return f->qc.method; }

wt_file *wt_open(const char *path, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    char scratch[32];
    if (!err || errlen == 0) { err = scratch; errlen = sizeof scratch; }
    wt_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        snprintf(err, errlen, "%s: out of memory", path);
        free(f);
        return NULL;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        wt_close(f);
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        size_t n = strlen(path) + 40;
        char *idx = malloc(n), *single = malloc(n);
        if (idx && single) {
            snprintf(idx, n, "%s/model.safetensors.index.json", path);
            snprintf(single, n, "%s/model.safetensors", path);
            if (is_file(idx)) f->st = st_open_index(idx, err, errlen);
            else if (is_file(single)) f->st = st_open(single, err, errlen);
            else snprintf(err, errlen, "%s: folder has neither model.safetensors nor model.safetensors.index.json", path);
        } else {
            snprintf(err, errlen, "%s: out of memory", path);
        }
        free(idx);
        free(single);
        f->format = WT_FORMAT_SAFETENSORS;
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file or folder", path);
    } else {
        int io_error;
        file_kind k = sniff(path, err, errlen, &io_error);
        if (k == KIND_GGUF) { f->gguf = gguf_open(path, err, errlen); f->format = WT_FORMAT_GGUF; }
        else if (k == KIND_ST) { f->st = st_open(path, err, errlen); f->format = WT_FORMAT_SAFETENSORS; }
        else if (k == KIND_INDEX) { f->st = st_open_index(path, err, errlen); f->format = WT_FORMAT_SAFETENSORS; }
    }
    if (!f->gguf && !f->st) { wt_close(f); return NULL; }
    if (build_list(f)) {
        snprintf(err, errlen, "%s: out of memory", path);
        wt_close(f);
        return NULL;
    }
    if (f->st && repack_quantized(f, S_ISDIR(st.st_mode), err, errlen)) {
        wt_close(f);
        return NULL;
    }
    return f;
}

void wt_close(wt_file *f) {
    if (!f) return;
    gguf_close(f->gguf);
    st_close(f->st);
    if (f->qc.tensors == f->tensors) f->tensors = NULL; /* qc_free releases it */
    qc_free(&f->qc);
    free(f->sorted);
    free(f->tensors);
    free(f->path);
    free(f);
}

wt_format wt_get_format(const wt_file *f) { return f->format; }
size_t wt_count(const wt_file *f) { return f->n; }
const wt_tensor *wt_at(const wt_file *f, size_t i) { return i < f->n ? &f->tensors[i] : NULL; }
const gguf_file *wt_gguf(const wt_file *f) { return f->gguf; }
const char *wt_path(const wt_file *f) { return f->path; }

/* Uses the reader's by-name index, then maps back by position. */
const wt_tensor *wt_find(const wt_file *f, const char *name) {
    if (f->gguf) {
        const gguf_tensor *t = gguf_find_tensor(f->gguf, name);
        return t ? &f->tensors[t - gguf_tensor_at(f->gguf, 0)] : NULL;
    }
    if (f->sorted) {
        size_t lo = 0, hi = f->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            int c = strcmp(name, f->sorted[mid]->name);
            if (c == 0) return f->sorted[mid];
            if (c < 0) hi = mid; else lo = mid + 1;
        }
        return NULL;
    }
    const st_tensor *t = st_find(f->st, name);
    return t ? &f->tensors[t - st_tensor_at(f->st, 0)] : NULL;
}

const char *wt_shape_str(int n_dims, const int64_t *shape, char *buf, size_t cap) {
    if (!buf || cap == 0) return buf;
    size_t used = 0;
    buf[0] = 0;
    int n = snprintf(buf, cap, "[");
    if (n > 0) used = (size_t)n;
    for (int i = 0; i < n_dims && used < cap; i++) {
        n = snprintf(buf + used, cap - used, i ? ", %lld" : "%lld", (long long)shape[i]);
        if (n < 0) break;
        used += (size_t)n;
    }
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}

int64_t wt_vector_cols(const wt_tensor *t, int64_t n) {
    int64_t count = 1;
    for (int d = 0; d < t->n_dims; d++) count *= t->shape[d]; /* the loaders checked that this fits */
    if (count == n && dtype_block_elems(t->dtype) == 1) return n;
    return t->n_dims ? t->shape[t->n_dims - 1] : 1;
}

const wt_tensor *wt_expect(const wt_file *f, const char *name, int n_dims, const int64_t *shape,
                           unsigned dtype_mask, char *err, size_t errlen) {
    char want[128], have[128];
    const wt_tensor *t = wt_find(f, name);
    if (!t) {
        if (err) snprintf(err, errlen, "%s: tensor '%s' not found", f->path, name);
        return NULL;
    }
    /* Dimensions of size 1 other than the last are passed over on both sides: the values and
     * their order are the same (transformers stores a depthwise convolution's weight as
     * [channels, 1, width], a description reads [channels, width]); the last dimension, the
     * row length every reader takes from t->shape[n_dims - 1], must match as it is. */
    int same = t->n_dims == 0 || n_dims == 0 ? t->n_dims == n_dims : t->shape[t->n_dims - 1] == shape[n_dims - 1];
    for (int i = 0, j = 0; same;) {
        while (i < t->n_dims - 1 && t->shape[i] == 1) i++;
        while (j < n_dims - 1 && shape[j] == 1) j++;
        if (i >= t->n_dims - 1 || j >= n_dims - 1) {
            same = i >= t->n_dims - 1 && j >= n_dims - 1;
            break;
        }
        same = t->shape[i++] == shape[j++];
    }
    /* A vector stored as a matrix of its values, in an element type: llama.cpp's converters write
     * Mamba-2's A and D as [heads, 1] and its grouped norm as [groups, inner / groups]. The
     * values are the vector's, in order; the loader reads them as one row (wt_vector_cols). */
    if (!same && n_dims == 1) same = wt_vector_cols(t, shape[0]) == shape[0];
    if (!same) {
        if (err)
            snprintf(err, errlen, "%s: tensor '%s': expected shape %s, found %s", f->path, name,
                     wt_shape_str(n_dims, shape, want, sizeof want), wt_shape_str(t->n_dims, t->shape, have, sizeof have));
        return NULL;
    }
    if (!(dtype_mask & (1u << t->dtype))) {
        if (err) {
            size_t used = 0;
            want[0] = 0;
            for (int d = 0; d < INGOT_DTYPE_COUNT && used < sizeof want; d++) {
                if (!(dtype_mask & (1u << d))) continue;
                int n = snprintf(want + used, sizeof want - used, used ? ", %s" : "%s", dtype_name((ingot_dtype)d));
                if (n < 0) break;
                used += (size_t)n;
            }
            snprintf(err, errlen, "%s: tensor '%s': dtype %s not accepted (expected %s)", f->path, name,
                     dtype_name(t->dtype), want[0] ? want : "none");
        }
        return NULL;
    }
    return t;
}

int wt_check_scales(const wt_file *f, const wt_tensor *t, char *err, size_t errlen) {
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= t->shape[d]; /* the loaders checked that this fits */
    int64_t bad = 0;
    if (dtype_check_scales(t->dtype, t->data, n, &bad) == 0) return 0;
    const int64_t row_len = t->n_dims ? t->shape[t->n_dims - 1] : 1;
    const int64_t row = row_len > 0 ? bad * dtype_block_elems(t->dtype) / row_len : 0;
    char name[128]; /* printable, so the message stays one line */
    size_t j = 0;
    for (const char *c = t->name; *c && j + 1 < sizeof name; c++) name[j++] = (*c >= 0x20 && *c < 0x7f) ? *c : '?';
    name[j] = 0;
    if (err)
        snprintf(err, errlen, "%s: tensor '%s': block %lld (row %lld) has a non-finite scale (NaN or infinity)",
                 f->path, name, (long long)bad, (long long)row);
    return -1;
}
