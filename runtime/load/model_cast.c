/* model_cast.c — the cast file of a build (model_cast.h). */
#include "model_cast.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hugealloc.h"
#include "model_api.h"

#define MODEL_CAST_MAGIC "ingot weights\n"
#define MODEL_CAST_VERSION 1u
/* Changes whenever a kernel's interleaved layout (kc_x16.h, kc_x16k.h, kc_x16f.h) changes. */
#define MODEL_CAST_KERNEL_LAYOUTS 1u

typedef struct {
    char magic[16];
    uint32_t version, n_weights;
    uint64_t layout;       /* model_cast_layout() of the binary that wrote it */
    uint64_t source;       /* model_cast_source() of the checkpoint it was cast from */
    uint64_t weight_bytes; /* the model table's weight_bytes() */
    uint64_t data_offset, data_bytes;
} model_cast_header;

static uint64_t model_cast_mix(uint64_t h, const void *p, size_t n) { /* FNV-1a, 64 bits */
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
static uint64_t model_cast_mix_str(uint64_t h, const char *s) { return model_cast_mix(h, s ? s : "", s ? strlen(s) + 1 : 1); }
static uint64_t model_cast_mix_u64(uint64_t h, uint64_t v) { return model_cast_mix(h, &v, sizeof v); }

/* The weight table this binary was generated with (names, dtypes, shapes, slices, layouts) and
 * the kernels' layout version: a cast file from another build of the same checkpoint is refused. */
static uint64_t model_cast_layout(const mw_table *t) {
    uint64_t h = model_cast_mix_u64(0xcbf29ce484222325ull, ((uint64_t)MODEL_CAST_VERSION << 32) | MODEL_CAST_KERNEL_LAYOUTS);
    h = model_cast_mix_u64(h, (uint64_t)t->n);
    for (int i = 0; i < t->n; i++) {
        const weight_spec *s = &t->spec[i];
        h = model_cast_mix_str(model_cast_mix_str(h, s->name), s->tied_to);
        const int64_t v[] = {s->n_dims, s->shape[0], s->shape[1], s->first_row, s->stored_rows, s->stacked,
                             s->n_parts, s->part_heads, s->part_experts, s->part_expert, s->dtype, s->same_as, s->x16};
        h = model_cast_mix(h, v, sizeof v);
        for (int p = 0; p < s->n_parts; p++) {
            const weight_part *part = &s->parts[p];
            const int64_t pv[] = {part->rows, part->transposed, part->first, part->every, part->of};
            h = model_cast_mix(model_cast_mix_str(h, part->name), pv, sizeof pv);
        }
    }
    return h;
}

/* What identifies a checkpoint without reading its gigabytes: its tensor table (names, dtypes,
 * shapes, sizes) and the size and modification time of its file, or of every file of its folder
 * (combined in an order-free way, as a folder lists its files in no fixed order). */
static uint64_t model_cast_stat(uint64_t h, const struct stat *st) {
    h = model_cast_mix_u64(h, (uint64_t)st->st_size);
    h = model_cast_mix_u64(h, (uint64_t)st->st_mtim.tv_sec);
    return model_cast_mix_u64(h, (uint64_t)st->st_mtim.tv_nsec);
}
static uint64_t model_cast_source(const wt_file *f) {
    uint64_t h = model_cast_mix_u64(0xcbf29ce484222325ull, wt_count(f));
    for (size_t i = 0; i < wt_count(f); i++) {
        const wt_tensor *t = wt_at(f, i);
        h = model_cast_mix_str(h, t->name);
        const int64_t v[] = {t->dtype, t->n_dims, t->shape[0], t->shape[1], t->shape[2], t->shape[3],
                             (int64_t)t->nbytes, t->repacked};
        h = model_cast_mix(h, v, sizeof v);
    }
    struct stat st;
    if (stat(wt_path(f), &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return model_cast_stat(h, &st);
    DIR *d = opendir(wt_path(f));
    if (!d) return 0;
    uint64_t files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
        files += model_cast_stat(model_cast_mix_str(0xcbf29ce484222325ull, e->d_name), &st);
    }
    closedir(d);
    return model_cast_mix_u64(h, files);
}

/* NAME.weights in the binary's folder (every binary of a build folder, sanitized or
 * launched per ISA, shares the build's weight table, so one file serves them all). */
static int model_cast_path(const char *name, char *path, size_t cap) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return -1;
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (!slash) return -1;
    *slash = 0;
    const int w = snprintf(path, cap, "%s/%s.weights", self, name);
    return w > 0 && (size_t)w < cap ? 0 : -1;
}

static int model_cast_write_all(int fd, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n > 0) {
        const ssize_t w = write(fd, b, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w, n -= (size_t)w;
    }
    return 0;
}

static int model_cast_read_all(int fd, void *p, size_t n, uint64_t at) {
    unsigned char *b = p;
    while (n > 0) {
        const ssize_t r = pread(fd, b, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        b += r, n -= (size_t)r, at += (uint64_t)r;
    }
    return 0;
}

/* Reads [at, at + n) of fd into p in up to MODEL_CAST_READERS slices at once: one thread's copy out
 * of the page cache (and the zeroing of each fresh huge page it lands on) runs at a few GB/s, well
 * under what the memory does, so the threads of a start divide it. */
#define MODEL_CAST_READERS 4
typedef struct {
    int fd, rc;
    unsigned char *p;
    size_t n;
    uint64_t at;
} model_cast_slice;
static void *model_cast_read_slice(void *arg) {
    model_cast_slice *s = arg;
    s->rc = model_cast_read_all(s->fd, s->p, s->n, s->at);
    return NULL;
}
static int model_cast_read_parallel(int fd, unsigned char *p, size_t n, uint64_t at) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const int k = n < ((size_t)64 << 20) || cpus < 2 ? 1 : cpus < MODEL_CAST_READERS ? (int)cpus : MODEL_CAST_READERS;
    model_cast_slice sl[MODEL_CAST_READERS];
    pthread_t th[MODEL_CAST_READERS];
    int started[MODEL_CAST_READERS] = {0}, rc = 0;
    const size_t step = (n / (size_t)k + HA_PAGE - 1) / HA_PAGE * HA_PAGE; /* whole huge pages per slice */
    for (int i = 0; i < k; i++) {
        const size_t from = step * (size_t)i < n ? step * (size_t)i : n;
        sl[i] = (model_cast_slice){fd, 0, p + from, (i == k - 1 ? n : from + step < n ? from + step : n) - from,
                                   at + from};
        started[i] = i > 0 && pthread_create(&th[i], NULL, model_cast_read_slice, &sl[i]) == 0;
        if (i > 0 && !started[i]) model_cast_read_slice(&sl[i]);
    }
    model_cast_read_slice(&sl[0]);
    for (int i = 0; i < k; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        rc |= sl[i].rc;
    }
    return rc;
}

int mc_write(const mw_table *t, const mw_weights *w, const char *name, char *err, size_t errlen) {
    char path[4200], tmp[4300];
    if (model_cast_path(name, path, sizeof path) != 0) {
        snprintf(err, errlen, "cannot name the cast file: /proc/self/exe is unreadable or too long");
        return -1;
    }
    const size_t n = (size_t)t->n;
    uint64_t *offset = calloc(2 * n + 1, sizeof *offset), *bytes = offset + n, at = 0;
    if (!offset) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        size_t b = 0;
        if (t->spec[i].same_as >= 0) continue;
        if (mw_weight_bytes(&t->spec[i], &b) != 0) {
            snprintf(err, errlen, "weight '%s': no row size for %s", t->spec[i].name, dtype_name(t->spec[i].dtype));
            free(offset);
            return -1;
        }
        offset[i] = at, bytes[i] = b;
        at += (b + 63) / 64 * 64;
    }
    const size_t table = sizeof(model_cast_header) + 2 * sizeof(uint64_t) * n;
    model_cast_header h = {.version = MODEL_CAST_VERSION, .n_weights = (uint32_t)n, .layout = model_cast_layout(t),
                           .source = model_cast_source(w->file), .weight_bytes = w->weight_bytes,
                           .data_offset = (table + 4095) / 4096 * 4096, .data_bytes = at};
    memcpy(h.magic, MODEL_CAST_MAGIC, sizeof MODEL_CAST_MAGIC);
    for (size_t i = 0; i < n; i++) offset[i] += t->spec[i].same_as < 0 ? h.data_offset : 0;
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
        free(offset);
        return -1;
    }
    static const unsigned char zeros[4096];
    int bad = model_cast_write_all(fd, &h, sizeof h) || model_cast_write_all(fd, offset, n * sizeof *offset) ||
              model_cast_write_all(fd, bytes, n * sizeof *bytes) ||
              model_cast_write_all(fd, zeros, (size_t)h.data_offset - table);
    for (size_t i = 0; !bad && i < n; i++) {
        if (!bytes[i]) continue;
        bad = model_cast_write_all(fd, w->w[i], (size_t)bytes[i]) ||
              model_cast_write_all(fd, zeros, (size_t)((bytes[i] + 63) / 64 * 64 - bytes[i]));
    }
    free(offset);
    if (close(fd) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: %s", bad ? tmp : path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* A cast file's problem, or NULL when it applies: its header and tables (offset, bytes: n each,
 * read here) against table t, checkpoint f and the file's size. */
static const char *model_cast_check(int fd, const struct stat *st, const mw_table *t, const wt_file *f,
                                    model_cast_header *h, uint64_t *offset, uint64_t *bytes) {
    const size_t n = (size_t)t->n;
    if (model_cast_read_all(fd, h, sizeof *h, 0) != 0 || memcmp(h->magic, MODEL_CAST_MAGIC, sizeof MODEL_CAST_MAGIC) != 0 ||
        h->version != MODEL_CAST_VERSION)
        return "not a cast file of this version";
    if (h->n_weights != n || h->layout != model_cast_layout(t))
        return "cast by another build (its weight table or kernel layouts differ)";
    if (h->source != model_cast_source(f)) return "cast from another checkpoint (or this one changed since)";
    if (h->data_offset % 4096 || h->data_offset > (uint64_t)st->st_size ||
        h->data_bytes != (uint64_t)st->st_size - h->data_offset ||
        model_cast_read_all(fd, offset, n * sizeof *offset, sizeof *h) != 0 ||
        model_cast_read_all(fd, bytes, n * sizeof *bytes, sizeof *h + n * sizeof *offset) != 0)
        return "truncated or damaged";
    for (size_t i = 0; i < n; i++) {
        size_t want = 0;
        const int same = t->spec[i].same_as >= 0;
        if (!same && mw_weight_bytes(&t->spec[i], &want) != 0) want = SIZE_MAX;
        if (same ? bytes[i] != 0 : bytes[i] != want || offset[i] % 64 || offset[i] < h->data_offset ||
                                       offset[i] > (uint64_t)st->st_size || bytes[i] > (uint64_t)st->st_size - offset[i])
            return "truncated or damaged";
    }
    return NULL;
}

int mc_load(const mw_table *t, mw_weights *w, unsigned flags, const char *name, const char *source, char *err,
            size_t errlen) {
    char path[4200];
    if ((flags & INGOT_LOAD_NO_CAST) || model_cast_path(name, path, sizeof path) != 0) return 1;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1; /* no cast file: a build that was not cast, or a binary copied alone */
    const size_t n = (size_t)t->n;
    uint64_t *offset = calloc(2 * n + 1, sizeof *offset), *bytes = offset + n;
    model_cast_header h;
    struct stat st;
    const char *why = !offset ? "out of memory for its tables"
                      : fstat(fd, &st) != 0 ? "not a cast file of this version"
                                             : model_cast_check(fd, &st, t, w->file, &h, offset, bytes);
    if (why) {
        /* said only for the build's own checkpoint: loading another one (--weights) is expected to
           convert it */
        if (strcmp(wt_path(w->file), source) == 0)
            fprintf(stderr, "%s: %s: converting the checkpoint at load instead\n", path, why);
        free(offset);
        close(fd);
        return 1;
    }
    unsigned char *data; /* the byte at data_offset */
    if (flags & INGOT_LOAD_MMAP) { /* used in place: the page cache's copy, shared between processes */
        void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (map == MAP_FAILED) {
            snprintf(err, errlen, "%s: cannot map %lld bytes: %s", path, (long long)st.st_size, strerror(errno));
            free(offset);
            return -1;
        }
        w->cast_map = map, w->cast_map_bytes = (size_t)st.st_size;
        data = (unsigned char *)map + h.data_offset;
    } else { /* one read into huge pages (decode reads them faster than 4 KiB pages of a mapping) */
        if (!(w->wmem = ha_alloc((size_t)h.data_bytes))) {
            close(fd);
            free(offset);
            snprintf(err, errlen, "out of memory for %llu bytes of weights", (unsigned long long)h.data_bytes);
            return -1;
        }
        w->wmem_bytes = (size_t)h.data_bytes;
        const int rc = model_cast_read_parallel(fd, w->wmem, (size_t)h.data_bytes, h.data_offset);
        close(fd);
        if (rc != 0) {
            snprintf(err, errlen, "%s: read failed: %s", path, strerror(errno ? errno : EIO));
            free(offset);
            return -1;
        }
        data = w->wmem;
    }
    for (size_t i = 0; i < n; i++)
        w->w[i] = t->spec[i].same_as >= 0 ? w->w[t->spec[i].same_as] : data + (offset[i] - h.data_offset);
    free(offset);
    w->weight_bytes = (size_t)h.weight_bytes;
    const char *file = strrchr(path, '/') + 1; /* model_cast_path always writes a folder */
    snprintf(w->origin, sizeof w->origin, "all %s %s, cast at build time",
             flags & INGOT_LOAD_MMAP ? "read in place from" : "read from", file);
    return 0;
}
