/* model_cast.h — weights cast at build time: written once by `./ingot build`, read at every start.
 *
 * Loading a checkpoint checks every tensor, converts those the build stores in another dtype
 * and rewrites most matrices into the interleaved layouts the kernels read (kc_x16*.h): about a
 * second for a 1B model, ten for an 8B one, at every start. `./ingot build` ends by running the
 * binary's `cast-weights` command, which loads the checkpoint that way once and writes every
 * weight exactly as the kernels read it to BUILD_NAME.weights beside the binary. A later load of
 * the same checkpoint reads that file instead: one sequential read into huge pages (hugealloc.h),
 * or with --mmap the file mapped and used in place, no copy at all.
 *
 * The file is used only when it was cast for this build's weight table and kernel layouts
 * (model_cast_layout) and for the checkpoint being loaded (model_cast_source: its tensor table,
 * size and modification time); otherwise, or when it is missing or damaged, the load converts
 * the checkpoint as before, saying why on stderr when a cast file was there but did not apply.
 *
 * Layout, little-endian, every offset from the start of the file:
 *   model_cast_header
 *   uint64 offset[n_weights], uint64 bytes[n_weights]  each weight's bytes (0, 0: same as another)
 *   the weights, each 64-byte aligned, the first at data_offset (a multiple of 4096, so that a
 *   mapping of the file keeps the alignment)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define MODEL_CAST_MAGIC "ingot weights\n"
#define MODEL_CAST_VERSION 1u
/* Changes whenever a kernel's interleaved layout (kc_x16.h, kc_x16k.h, kc_x16f.h) changes. */
#define MODEL_CAST_KERNEL_LAYOUTS 1u

typedef struct {
    char magic[16];
    uint32_t version, n_weights;
    uint64_t layout;       /* model_cast_layout() of the binary that wrote it */
    uint64_t source;       /* model_cast_source() of the checkpoint it was cast from */
    uint64_t weight_bytes; /* ingot_model_weight_bytes() */
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
static uint64_t model_cast_layout(void) {
    uint64_t h = model_cast_mix_u64(0xcbf29ce484222325ull, ((uint64_t)MODEL_CAST_VERSION << 32) | MODEL_CAST_KERNEL_LAYOUTS);
    h = model_cast_mix_u64(h, N_WEIGHTS);
    for (int i = 0; i < N_WEIGHTS; i++) {
        const weight_spec *s = &WEIGHTS[i];
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

/* BUILD_NAME.weights in the binary's folder (every binary of a build folder, sanitized or
 * launched per ISA, shares the build's weight table, so one file serves them all). */
static int model_cast_path(char *path, size_t cap) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return -1;
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (!slash) return -1;
    *slash = 0;
    const int w = snprintf(path, cap, "%s/%s.weights", self, ingot_model_desc.name);
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

/* Writes the loaded model's weights to its cast file (a temporary name, then renamed: a reader
 * never sees half a file). 0, or -1 with err filled. */
int ingot_model_cast(const ingot_model *m, char *err, size_t errlen) {
    char path[4200], tmp[4300];
    if (model_cast_path(path, sizeof path) != 0) {
        snprintf(err, errlen, "cannot name the cast file: /proc/self/exe is unreadable or too long");
        return -1;
    }
    uint64_t offset[N_WEIGHTS], bytes[N_WEIGHTS], at = 0;
    for (int i = 0; i < N_WEIGHTS; i++) {
        size_t b = 0;
        offset[i] = bytes[i] = 0;
        if (WEIGHTS[i].same_as >= 0) continue;
        if (model_weight_bytes(i, &b) != 0) {
            snprintf(err, errlen, "weight '%s': no row size for %s", WEIGHTS[i].name, dtype_name(WEIGHTS[i].dtype));
            return -1;
        }
        offset[i] = at, bytes[i] = b;
        at += (b + 63) / 64 * 64;
    }
    const size_t table = sizeof(model_cast_header) + 2 * sizeof(uint64_t) * N_WEIGHTS;
    model_cast_header h = {.version = MODEL_CAST_VERSION, .n_weights = N_WEIGHTS, .layout = model_cast_layout(),
                           .source = model_cast_source(m->file), .weight_bytes = m->weight_bytes,
                           .data_offset = (table + 4095) / 4096 * 4096, .data_bytes = at};
    memcpy(h.magic, MODEL_CAST_MAGIC, sizeof MODEL_CAST_MAGIC);
    for (int i = 0; i < N_WEIGHTS; i++) offset[i] += WEIGHTS[i].same_as < 0 ? h.data_offset : 0;
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
        return -1;
    }
    static const unsigned char zeros[4096];
    int bad = model_cast_write_all(fd, &h, sizeof h) || model_cast_write_all(fd, offset, sizeof offset) ||
              model_cast_write_all(fd, bytes, sizeof bytes) ||
              model_cast_write_all(fd, zeros, (size_t)h.data_offset - table);
    for (int i = 0; !bad && i < N_WEIGHTS; i++) {
        if (!bytes[i]) continue;
        bad = model_cast_write_all(fd, m->w[i], (size_t)bytes[i]) ||
              model_cast_write_all(fd, zeros, (size_t)((bytes[i] + 63) / 64 * 64 - bytes[i]));
    }
    if (close(fd) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: %s", bad ? tmp : path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Loads the weights from the cast file when one applies: 0 loaded, 1 none applies (the caller
 * converts the checkpoint), -1 with err filled (out of memory). */
static int model_cast_load(ingot_model *m, unsigned flags, char *err, size_t errlen) {
    char path[4200];
    if ((flags & INGOT_LOAD_NO_CAST) || model_cast_path(path, sizeof path) != 0) return 1;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1; /* no cast file: a build that was not cast, or a binary copied alone */
    const char *why = NULL;
    model_cast_header h;
    uint64_t offset[N_WEIGHTS], bytes[N_WEIGHTS];
    struct stat st;
    if (fstat(fd, &st) != 0 || model_cast_read_all(fd, &h, sizeof h, 0) != 0 ||
        memcmp(h.magic, MODEL_CAST_MAGIC, sizeof MODEL_CAST_MAGIC) != 0 || h.version != MODEL_CAST_VERSION)
        why = "not a cast file of this version";
    else if (h.n_weights != N_WEIGHTS || h.layout != model_cast_layout())
        why = "cast by another build (its weight table or kernel layouts differ)";
    else if (h.source != model_cast_source(m->file))
        why = "cast from another checkpoint (or this one changed since)";
    else if (h.data_offset % 4096 || h.data_offset > (uint64_t)st.st_size ||
             h.data_bytes != (uint64_t)st.st_size - h.data_offset ||
             model_cast_read_all(fd, offset, sizeof offset, sizeof h) != 0 ||
             model_cast_read_all(fd, bytes, sizeof bytes, sizeof h + sizeof offset) != 0)
        why = "truncated or damaged";
    for (int i = 0; !why && i < N_WEIGHTS; i++) {
        size_t want = 0;
        const int same = WEIGHTS[i].same_as >= 0;
        if (!same && model_weight_bytes(i, &want) != 0) want = SIZE_MAX;
        if (same ? bytes[i] != 0 : bytes[i] != want || offset[i] % 64 || offset[i] < h.data_offset ||
                                       offset[i] > (uint64_t)st.st_size || bytes[i] > (uint64_t)st.st_size - offset[i])
            why = "truncated or damaged";
    }
    if (why) {
        /* said only for the build's own checkpoint: loading another one (--weights) is expected to
           convert it */
        if (strcmp(wt_path(m->file), ingot_model_desc.source) == 0)
            fprintf(stderr, "%s: %s: converting the checkpoint at load instead\n", path, why);
        close(fd);
        return 1;
    }
    unsigned char *data; /* the byte at data_offset */
    if (flags & INGOT_LOAD_MMAP) { /* used in place: the page cache's copy, shared between processes */
        void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (map == MAP_FAILED) {
            snprintf(err, errlen, "%s: cannot map %lld bytes: %s", path, (long long)st.st_size, strerror(errno));
            return -1;
        }
        m->cast_map = map, m->cast_map_bytes = (size_t)st.st_size;
        data = (unsigned char *)map + h.data_offset;
    } else { /* one read into huge pages (decode reads them faster than 4 KiB pages of a mapping) */
        if (!(m->wmem = ha_alloc((size_t)h.data_bytes))) {
            close(fd);
            snprintf(err, errlen, "out of memory for %llu bytes of weights", (unsigned long long)h.data_bytes);
            return -1;
        }
        m->wmem_bytes = (size_t)h.data_bytes;
        const int rc = model_cast_read_parallel(fd, m->wmem, (size_t)h.data_bytes, h.data_offset);
        close(fd);
        if (rc != 0) {
            snprintf(err, errlen, "%s: read failed: %s", path, strerror(errno ? errno : EIO));
            return -1;
        }
        data = m->wmem;
    }
    for (int i = 0; i < N_WEIGHTS; i++)
        m->w[i] = WEIGHTS[i].same_as >= 0 ? m->w[WEIGHTS[i].same_as] : data + (offset[i] - h.data_offset);
    m->weight_bytes = (size_t)h.weight_bytes;
    const char *file = strrchr(path, '/') + 1; /* model_cast_path always writes a folder */
    snprintf(m->weight_origin, sizeof m->weight_origin, "all %s %s, cast at build time",
             flags & INGOT_LOAD_MMAP ? "read in place from" : "read from", file);
    return 0;
}

static void model_cast_release(ingot_model *m) {
    if (m->cast_map) munmap(m->cast_map, m->cast_map_bytes);
    m->cast_map = NULL;
}
