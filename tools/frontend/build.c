/* build.c — the steps of a build: the runtime and tools (make), the checkpoint's inspection
 * (tools/ingot-inspect), the generated sources (generator/main.lua), the binary (build/model.mk),
 * the cast weights (the binary's cast-weights), then the manifest; and the cache in front of them. */
#define _GNU_SOURCE
#include "frontend.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static void make_dirs(const char *path) {
    char *p = fe_format("%s", path);
    for (char *s = p + 1;; s++) {
        int end = *s == 0;
        if (*s == '/' || end) {
            *s = 0;
            if (mkdir(p, 0777) != 0 && errno != EEXIST) fe_die("cannot create %s: %s", p, strerror(errno));
            if (end) break;
            *s = '/';
        }
    }
    free(p);
}

/* the binary as the messages name it: build/NAME/BINARY */
static char *shown_binary(const fe_build *b) {
    return fe_format("build/%s/%s", b->name, base_name(b->bin));
}

static const char *object_dir(int san) {
    return san ? fe_format("%s/build/_obj-san", fe_root) : fe_format("%s/build/_obj", fe_root);
}

/* ---- reading a checkpoint: DIR/inspect.json ---- */

typedef struct {
    const char *inspect, *model, *dir;
} inspection;

static int inspect_work(void *ctx) {
    const inspection *in = ctx;
    char *tmp = fe_format("%s/inspect.json.tmp", in->dir), *done = fe_format("%s/inspect.json", in->dir);
    char *argv[] = {(char *)in->inspect, (char *)in->model, NULL};
    if (fe_run(argv, tmp) != 0) {
        fprintf(stderr, "ingot: cannot read %s\n", in->model);
        return 1;
    }
    return rename(tmp, done) == 0 ? 0 : 1;
}

/* ---- generating DIR/gen from models.lua ---- */

static void generate_sources(const fe_build *b, const char *model, const char *dir, const char *name) {
    const char *argv[40];
    int n = 0;
    char *script = fe_format("%s/generator/main.lua", fe_root), *inspect = fe_format("%s/inspect.json", dir);
    char *gen = fe_format("%s/gen", dir), *max_tokens = fe_format("%d", b->max_tokens);
    const char *fixed[] = {"lua5.4", script, "--inspect", inspect, "--source", model, "--name", name, "--out", gen,
                           "--dtype", b->dtype, "--backend", b->backend, "--max-tokens", max_tokens,
                           "--act-quant", b->act_quant, "--kv-dtype", b->kv_dtype};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) argv[n++] = fixed[i];
    if (!b->fuse) argv[n++] = "--no-fuse";
    if (b->allow_unused) argv[n++] = "--allow-unused";
    if (strcmp(b->backend, "cuda") == 0) argv[n++] = "--cuda-arch", argv[n++] = b->cuda_arch;
    if (*b->models_file) argv[n++] = "--models", argv[n++] = b->models_file;
    struct stat st;
    size_t len = strlen(model);
    if (stat(model, &st) == 0 && S_ISDIR(st.st_mode)) {
        char *config = fe_format("%s/config.json", model);
        if (stat(config, &st) != 0 || !S_ISREG(st.st_mode)) fe_die("%s: no config.json", model);
        argv[n++] = "--hf-config", argv[n++] = config;
    } else if (len > 12 && strcmp(model + len - 12, ".safetensors") == 0) {
        char *folder = fe_format("%.*s", (int)(base_name(model) - 1 - model), model);
        char *config = fe_format("%s/config.json", folder);
        if (stat(config, &st) != 0 || !S_ISREG(st.st_mode)) fe_die("%s: no config.json beside the safetensors file", folder);
        argv[n++] = "--hf-config", argv[n++] = config;
    }
    argv[n] = NULL;
    size_t root_len = strlen(fe_root);
    const char *shown = strncmp(dir, fe_root, root_len) == 0 && dir[root_len] == '/' ? dir + root_len + 1 : dir;
    char *label = fe_format("generating %s/gen from models.lua", shown);
    fe_step(label, fe_exec_work, (void *)argv);
    free(label);
}

/* The descriptor's vocabulary size (`.vocab = N,` within a line of several fields), -1 if absent. */
static long descriptor_vocab(const char *text) {
    const char *p = strstr(text, ".vocab = ");
    return p ? strtol(p + strlen(".vocab = "), NULL, 10) : -1;
}

/* Speculative decoding verifies the draft's tokens with the target's logits row by row: both must
 * number the same tokens the same way. */
static void check_draft_vocabulary(const char *target_gen, const char *draft_gen) {
    char *t = fe_read_file(target_gen, NULL), *d = fe_read_file(draft_gen, NULL);
    if (!t || !d) fe_die("cannot read %s", t ? draft_gen : target_gen);
    long tv = descriptor_vocab(t), dv = descriptor_vocab(d);
    if (tv < 0 || dv < 0) fe_die("no vocabulary size in %s", tv < 0 ? target_gen : draft_gen);
    if (tv != dv)
        fe_die("--draft: the draft's vocabulary has %ld tokens, the target's %ld: a draft model must share the target's "
               "vocabulary (the same tokenizer)", dv, tv);
    free(t), free(d);
}

/* ---- casting the weights ---- */

/* The CPU backend's weights as its kernels read them (converted, interleaved), so that a start
 * reads them instead of converting the checkpoint again (runtime/load/model_cast.h). A checkpoint
 * the binary cannot load still builds (a start then says why, as it would have without a cast);
 * the build says the weights were not cast. */
static int cast_work(void *ctx) {
    const fe_build *b = ctx;
    if (!fe_target_runs_here(b)) {
        fprintf(stderr, "ingot: note: no qemu-%s here to cast the weights with; the binary converts the checkpoint at "
                        "every start\n", b->target_arch);
        return 0;
    }
    char log_path[PATH_MAX];
    const int fd = fe_temp_file("cast", log_path, sizeof log_path);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 1), dup2(fd, 2);
        execl(b->bin, b->bin, "cast-weights", (char *)NULL);
        fprintf(stderr, "cannot run %s: %s\n", b->bin, strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    close(fd);
    if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char *log = fe_read_file(log_path, NULL);
        char *last = log ? log : "";
        size_t n = strlen(last);
        while (n > 0 && last[n - 1] == '\n') last[--n] = 0;
        if (strrchr(last, '\n')) last = strrchr(last, '\n') + 1;
        fprintf(stderr, "ingot: warning: the weights were not cast, the binary converts the checkpoint at every start: %s\n",
                last);
        free(log);
    }
    unlink(log_path);
    return 0;
}

/* ---- the build ---- */

void fe_build_model(const fe_build *b, const fe_keys *k) {
    long long t0 = fe_now_ms();
    char *shown = shown_binary(b);
    char *gen = fe_format("%s/gen", b->out);
    make_dirs(gen);
    char *san = fe_format("SAN=%d", b->san);
    char *make_tools[] = {"make", "-s", "-C", (char *)fe_root, san, "tools", NULL};
    fe_step("building runtime and tools", fe_exec_work, make_tools);
    const char *objdir = object_dir(b->san);
    const char *inspect = fe_format("%s/tools/ingot-inspect", objdir);

    inspection target = {inspect, b->model, b->out};
    char *label = fe_format("reading %s", base_name(b->model));
    fe_step(label, inspect_work, &target);
    generate_sources(b, b->model, b->out, b->name);
    char *draft_dir = fe_format("%s", "");
    if (*b->draft) {
        draft_dir = fe_format("%s/draft", b->out);
        make_dirs(fe_format("%s/gen", draft_dir));
        inspection draft = {inspect, b->draft, draft_dir};
        fe_step(fe_format("reading the draft %s", base_name(b->draft)), inspect_work, &draft);
        generate_sources(b, b->draft, draft_dir, fe_format("%s-draft", b->name));
        check_draft_vocabulary(fe_format("%s/gen/model.c", b->out), fe_format("%s/gen/model.c", draft_dir));
    }
    const char *mk_backend = b->cudasim ? "cudasim" : b->backend;
    char *make_model[] = {"make", "-s", "-f", fe_format("%s/build/model.mk", fe_root), fe_format("MODEL_DIR=%s", b->out),
                          fe_format("NAME=%s", b->name), san, fe_format("BACKEND=%s", mk_backend),
                          fe_format("DRAFT_DIR=%s", draft_dir), fe_format("TARGET=%s", b->target),
                          fe_format("ISAS=%s", b->isa_levels), NULL};
    fe_step(fe_format("compiling %s (%s)", shown, mk_backend), fe_exec_work, make_model);
    if (b->wasm) {
        /* the page fetches model.gguf beside it: the checkpoint, linked */
        char *link = fe_format("%s/model.gguf", b->out);
        unlink(link);
        if (symlink(b->model, link) != 0) fe_die("cannot link %s: %s", link, strerror(errno));
        free(link);
    } else if (strcmp(b->backend, "cpu") == 0) {
        char *weights = fe_format("%s/%s.weights", b->out, b->name);
        unlink(weights);
        fe_step(fe_format("casting the weights into build/%s/%s.weights", b->name, b->name), cast_work, (void *)b);
        free(weights);
    }
    fe_write_manifest(b, k);
    long long ms = fe_now_ms() - t0;
    fe_note("built %s in %lld.%llds", shown, ms / 1000, ms % 1000 / 100);
    free(label);
    free(gen);
    free(shown);
}

int fe_lock_build(const fe_build *b) {
    make_dirs(b->out);
    char *path = fe_format("%s/.lock", b->out);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) fe_die("cannot open %s: %s", path, strerror(errno));
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) fe_die("cannot lock %s: %s", path, strerror(errno));
    free(path);
    return fd;
}

static int up_to_date(const fe_build *b, const fe_keys *k) {
    if (access(b->bin, b->wasm ? R_OK : X_OK) != 0) return 0;
    char *recorded = fe_manifest_field(b->manifest, "inputs_key");
    int same = recorded && strcmp(recorded, k->inputs) == 0;
    free(recorded);
    return same;
}

/* Why a build is needed, for the progress line. */
static char *stale_reason(const fe_build *b, const fe_keys *k) {
    if (access(b->bin, b->wasm ? R_OK : X_OK) != 0 || access(b->manifest, F_OK) != 0) return fe_format("no binary yet");
    static const char *const PARTS[] = {"sources_key", "sources", "options_key", "build options", "checkpoint_key",
                                        "checkpoint"};
    const char *now[] = {k->sources, k->options, k->checkpoint};
    char *what = fe_format("%s", "");
    for (int i = 0; i < 3; i++) {
        char *recorded = fe_manifest_field(b->manifest, PARTS[2 * i]);
        if (!recorded || strcmp(recorded, now[i]) != 0) what = fe_format("%s%s%s", what, *what ? ", " : "", PARTS[2 * i + 1]);
        free(recorded);
    }
    return fe_format("changed: %s", *what ? what : "inputs");
}

void fe_ensure_built(const fe_build *b) {
    fe_keys k;
    fe_compute_keys(b, &k);
    char *shown = shown_binary(b);
    if (up_to_date(b, &k)) {
        fe_note("cached: %s is up to date", shown);
        return;
    }
    int lock = fe_lock_build(b);
    if (up_to_date(b, &k)) fe_note("cached: %s was built meanwhile", shown);
    else {
        fe_note("building %s (%s)", shown, stale_reason(b, &k));
        unlink(b->manifest);
        fe_build_model(b, &k);
    }
    close(lock);
    free(shown);
}
