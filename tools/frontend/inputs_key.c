/* inputs_key.c — the hashes of everything a binary is made from, in three parts (so that a
 * rebuild can say which changed) combined into the inputs key. A binary whose manifest records
 * the same key is up to date.
 *
 *   sources:    the content of models.lua, ./ingot, the Makefile, build/flags.mk and build/model.mk, generator/,
 *               templates/, runtime/, kernels/ and tools/ (this program's sources among them):
 *               what a build reads besides the checkpoint;
 *   options:    the build options and the compiler environment (CC, CFLAGS, CUDA_HOME);
 *   checkpoint: the checkpoint's files by path, size and modification time (reading gigabytes of
 *               weights on every run would defeat the cache).
 *
 * SHA-256 (OpenSSL's libcrypto), each key its first 128 bits in hex. */
#define _GNU_SOURCE
#include "frontend.h"

#include <dirent.h>
#include <ftw.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    EVP_MD_CTX *ctx;
} hasher;

static hasher hash_begin(void) {
    hasher h = {EVP_MD_CTX_new()};
    if (!h.ctx || EVP_DigestInit_ex(h.ctx, EVP_sha256(), NULL) != 1) fe_die("cannot start SHA-256 (libcrypto)");
    return h;
}

static void hash_add(hasher *h, const void *bytes, size_t n) {
    if (EVP_DigestUpdate(h->ctx, bytes, n) != 1) fe_die("SHA-256 failed (libcrypto)");
}

static void hash_line(hasher *h, const char *line) {
    hash_add(h, line, strlen(line));
    hash_add(h, "\n", 1);
}

/* the digest in hex: all 64 digits into hex[65], or (the keys) the first 32 into hex[33] */
static void hash_end(hasher *h, char *hex, size_t digits) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_DigestFinal_ex(h->ctx, md, &n) != 1) fe_die("SHA-256 failed (libcrypto)");
    EVP_MD_CTX_free(h->ctx);
    for (size_t i = 0; i < digits / 2 && i < n; i++) sprintf(hex + 2 * i, "%02x", md[i]);
    hex[digits] = 0;
}

/* 0, or -1 when PATH cannot be read */
static int hash_file(const char *path, char hex[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    hasher h = hash_begin();
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) hash_add(&h, buf, n);
    int failed = ferror(f);
    fclose(f);
    hash_end(&h, hex, 64);
    return failed ? -1 : 0;
}

/* ---- the sources ---- */

typedef struct {
    char **paths;
    size_t n, cap;
} path_list;

static path_list walked; /* nftw's callback has no context argument */
static size_t root_len;

static void add_path(path_list *l, const char *path) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->paths = realloc(l->paths, l->cap * sizeof *l->paths);
        if (!l->paths) fe_die("out of memory");
    }
    l->paths[l->n++] = fe_format("%s", path);
}

static int walk_one(const char *path, const struct stat *st, int kind, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t n = strlen(base);
    if (kind == FTW_F && !(n > 4 && strcmp(base + n - 4, ".pyc") == 0) && !strstr(path, "/__pycache__/"))
        add_path(&walked, path + root_len);
    return 0;
}

static int by_bytes(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void sources_key(char out[33]) {
    static const char *const TREE[] = {"models.lua", "ingot", "Makefile", "build/flags.mk", "build/model.mk",
                                       "generator", "templates", "runtime", "kernels", "tools"};
    walked.n = 0;
    root_len = strlen(fe_root) + 1;
    for (size_t i = 0; i < sizeof TREE / sizeof TREE[0]; i++) {
        char *path = fe_format("%s/%s", fe_root, TREE[i]);
        /* FTW_PHYS: a symbolic link is not followed (find -type f) */
        if (nftw(path, walk_one, 32, FTW_PHYS) != 0) fe_die("cannot read %s", path);
        free(path);
    }
    qsort(walked.paths, walked.n, sizeof *walked.paths, by_bytes);
    hasher h = hash_begin();
    for (size_t i = 0; i < walked.n; i++) {
        char hex[65], *full = fe_format("%s/%s", fe_root, walked.paths[i]);
        /* a file removed since the walk (another process at work in the tree) counts as changed */
        if (hash_file(full, hex) != 0) strcpy(hex, "-");
        char *line = fe_format("%s  %s", hex, walked.paths[i]);
        hash_line(&h, line);
        free(line);
        free(full);
        free(walked.paths[i]);
    }
    hash_end(&h, out, 32);
}

/* ---- the options ---- */

static void options_key(const fe_build *b, char out[33]) {
    char models_sha[65] = "";
    if (*b->models_file && hash_file(b->models_file, models_sha) != 0) fe_die("cannot read %s", b->models_file);
    const char *cc = getenv("CC"), *cflags = getenv("CFLAGS"), *cuda_home = getenv("CUDA_HOME");
    char *lines[] = {
        fe_format("model=%s", b->model), fe_format("name=%s", b->name), fe_format("dtype=%s", b->dtype),
        fe_format("backend=%s", b->backend), fe_format("fuse=%d", b->fuse), fe_format("act_quant=%s", b->act_quant),
        fe_format("kv_dtype=%s", b->kv_dtype), fe_format("max_tokens=%d", b->max_tokens), fe_format("san=%d", b->san),
        fe_format("cudasim=%d", b->cudasim), fe_format("allow_unused=%d", b->allow_unused),
        fe_format("isa=%s", b->isa), fe_format("target=%s", b->target), fe_format("cuda_arch=%s", b->cuda_arch),
        fe_format("models=%s", b->models_file), fe_format("models_sha=%s", models_sha),
        fe_format("draft=%s", b->draft), fe_format("CC=%s", cc ? cc : ""), fe_format("CFLAGS=%s", cflags ? cflags : ""),
        fe_format("CUDA_HOME=%s", cuda_home ? cuda_home : "")};
    hasher h = hash_begin();
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        hash_line(&h, lines[i]);
        free(lines[i]);
    }
    hash_end(&h, out, 32);
}

/* ---- the checkpoint ---- */

/* The files of a checkpoint that the build reads: the GGUF or safetensors file(s), config.json and
 * the tokenizer files beside them; a folder's every regular file. */
static void checkpoint_files(const char *model, path_list *out) {
    struct stat st;
    if (stat(model, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR *d = opendir(model);
        if (!d) fe_die("cannot read %s", model);
        size_t first = out->n;
        for (struct dirent *e; (e = readdir(d));) {
            char *path = fe_format("%s/%s", model, e->d_name);
            struct stat fst;
            if (lstat(path, &fst) == 0 && S_ISREG(fst.st_mode)) add_path(out, path);
            free(path);
        }
        closedir(d);
        qsort(out->paths + first, out->n - first, sizeof *out->paths, by_bytes);
        return;
    }
    add_path(out, model);
    size_t n = strlen(model);
    if (n < 12 || strcmp(model + n - 12, ".safetensors") != 0) return;
    static const char *const BESIDE[] = {"config.json", "tokenizer.json", "tokenizer_config.json"};
    const char *slash = strrchr(model, '/');
    for (size_t i = 0; i < sizeof BESIDE / sizeof BESIDE[0]; i++) {
        char *path = fe_format("%.*s/%s", (int)(slash - model), model, BESIDE[i]);
        struct stat fst;
        if (stat(path, &fst) == 0 && S_ISREG(fst.st_mode)) add_path(out, path);
        free(path);
    }
}

static void checkpoint_key(const fe_build *b, char out[33]) {
    path_list files = {0};
    checkpoint_files(b->model, &files);
    if (*b->draft) checkpoint_files(b->draft, &files);
    hasher h = hash_begin();
    for (size_t i = 0; i < files.n; i++) {
        struct stat st;
        if (stat(files.paths[i], &st) != 0) fe_die("cannot read %s", files.paths[i]);
        char *line = fe_format("%s %lld %lld.%09ld", files.paths[i], (long long)st.st_size,
                               (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
        hash_line(&h, line);
        free(line);
        free(files.paths[i]);
    }
    free(files.paths);
    hash_end(&h, out, 32);
}

void fe_compute_keys(const fe_build *b, fe_keys *k) {
    sources_key(k->sources);
    options_key(b, k->options);
    checkpoint_key(b, k->checkpoint);
    hasher h = hash_begin();
    hash_line(&h, "ingot inputs 1");
    hash_line(&h, k->sources);
    hash_line(&h, k->options);
    hash_line(&h, k->checkpoint);
    hash_end(&h, k->inputs, 32);
}
