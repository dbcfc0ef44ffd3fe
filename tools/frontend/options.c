/* options.c — the build options (they choose the binary; run, serve and chat take them too), and
 * where a build of MODEL lands: build/NAME/NAME. */
#define _GNU_SOURCE
#include "frontend.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

/* The --dtype choices from the one table of weight types: its "build" rows and its preset
 * mixes, in the table's order, each once (q2_k is both a type and a mix). */
static const struct { const char *name, *role; } DTYPE_ROWS[] = {
#define INGOT_DTYPE(ENUM, name, elems, bytes, ggml, ctype, role) {#name, #role},
#define INGOT_DTYPE_MIX(name, base) {#name, "build"},
#include "../../runtime/load/dtype_table.h"
};

const char *const *fe_dtype_choices(void) {
    static const char *choices[sizeof DTYPE_ROWS / sizeof DTYPE_ROWS[0] + 2];
    if (choices[0]) return choices;
    size_t n = 0;
    choices[n++] = "native";
    for (size_t i = 0; i < sizeof DTYPE_ROWS / sizeof DTYPE_ROWS[0]; i++) {
        if (strcmp(DTYPE_ROWS[i].role, "build") != 0) continue;
        int seen = 0;
        for (size_t j = 0; j < n; j++) seen |= strcmp(choices[j], DTYPE_ROWS[i].name) == 0;
        if (!seen) choices[n++] = DTYPE_ROWS[i].name;
    }
    choices[n] = NULL;
    return choices;
}

int fe_is_one_of(const char *opt, const char *list) {
    size_t n = strlen(opt);
    for (const char *p = list; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, opt, n) == 0) return 1;
        p += len + (bar != NULL);
    }
    return 0;
}

/* "a, b, c or d" of a NULL-terminated list */
static char *choice_text(const char *const *list) {
    char *text = fe_format("%s", list[0]);
    for (size_t i = 1; list[i]; i++) {
        char *t = fe_format("%s%s%s", text, list[i + 1] ? ", " : " or ", list[i]);
        free(text);
        text = t;
    }
    return text;
}

/* the options that take a value, and the flags */
#define VALUE_OPTIONS "--name|--dtype|--backend|--act-quant|--kv-dtype|--max-tokens|--draft|--isa|--cuda-arch|--models|--target"
/* words after which the next one is free text (a prompt, a file, a key), even if it spells an option */
#define TEXT_OPTIONS "-p|-f|--api-key|--system"

/* --cuda-arch: all, or a comma-separated list of 80, 86, 89, 90 */
static int cuda_arch_valid(const char *s) {
    if (strcmp(s, "all") == 0) return 1;
    for (;;) {
        if (!(s[0] == '8' && (s[1] == '0' || s[1] == '6' || s[1] == '9')) && !(s[0] == '9' && s[1] == '0')) return 0;
        s += 2;
        if (*s == 0) return 1;
        if (*s++ != ',') return 0;
    }
}

static const char *host_arch(void) {
    struct utsname u;
    if (uname(&u) == 0 && (strcmp(u.machine, "aarch64") == 0 || strcmp(u.machine, "arm64") == 0)) return "aarch64";
    return "x86_64";
}

void fe_parse_build_options(fe_build *b, int argc, char **argv) {
    *b = (fe_build){.name = "", .dtype = "native", .backend = "cpu", .act_quant = "auto", .kv_dtype = "auto",
                    .isa = "native", .cuda_arch = "all", .target = "host", .models_file = "", .draft = "",
                    .fuse = 1, .max_tokens = 512};
    const char *max_tokens = "512";
    int building = strcmp(fe_cmd, "build") == 0;
    b->passthrough = calloc((size_t)argc + 1, sizeof *b->passthrough);
    if (!b->passthrough) fe_die("out of memory");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (fe_is_one_of(a, VALUE_OPTIONS)) {
            if (i + 1 >= argc) fe_usage_error("%s needs a value (see ingot %s --help)", a, fe_cmd);
            const char *v = argv[++i];
            if (strcmp(a, "--name") == 0) b->name = v;
            else if (strcmp(a, "--dtype") == 0) b->dtype = v;
            else if (strcmp(a, "--backend") == 0) b->backend = v;
            else if (strcmp(a, "--act-quant") == 0) b->act_quant = v;
            else if (strcmp(a, "--kv-dtype") == 0) b->kv_dtype = v;
            else if (strcmp(a, "--max-tokens") == 0) max_tokens = v;
            else if (strcmp(a, "--draft") == 0) b->draft = v;
            else if (strcmp(a, "--isa") == 0) b->isa = v;
            else if (strcmp(a, "--cuda-arch") == 0) b->cuda_arch = v;
            else if (strcmp(a, "--target") == 0) b->target = v;
            else { /* --models */
                struct stat st;
                char *abs = stat(v, &st) == 0 && S_ISREG(st.st_mode) ? realpath(v, NULL) : NULL;
                if (!abs) fe_usage_error("--models: no file '%s'", v);
                b->models_file = abs;
            }
        } else if (strcmp(a, "--no-fuse") == 0) b->fuse = 0;
        else if (strcmp(a, "--san") == 0) b->san = 1;
        else if (strcmp(a, "--cudasim") == 0) b->cudasim = 1;
        else if (strcmp(a, "--allow-unused") == 0) b->allow_unused = 1;
        else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fe_help(fe_cmd);
            exit(0);
        } else if (strcmp(a, "--") == 0) {
            if (building) fe_usage_error("unexpected '--' (see ingot build --help)");
            while (++i < argc) b->passthrough[b->n_passthrough++] = argv[i];
        } else {
            if (building) fe_usage_error("unknown option '%s' (see ingot build --help)", a);
            b->passthrough[b->n_passthrough++] = a;
            if (fe_is_one_of(a, TEXT_OPTIONS) && i + 1 < argc) b->passthrough[b->n_passthrough++] = argv[++i];
        }
    }

    int known = 0;
    for (const char *const *d = fe_dtype_choices(); *d; d++) known |= strcmp(*d, b->dtype) == 0;
    if (!known) fe_usage_error("unknown --dtype '%s' (%s)", b->dtype, choice_text(fe_dtype_choices()));
    if (!fe_is_one_of(b->backend, "cpu|cuda")) fe_usage_error("unknown --backend '%s' (cpu or cuda)", b->backend);
    if (!fe_is_one_of(b->act_quant, "auto|k8|q16|q8|none"))
        fe_usage_error("unknown --act-quant '%s' (auto, k8, q16, q8 or none)", b->act_quant);
    if (!fe_is_one_of(b->kv_dtype, "auto|f32|f16|q8_0|q4"))
        fe_usage_error("unknown --kv-dtype '%s' (f32, f16, q8_0 or q4)", b->kv_dtype);
    size_t digits = strspn(max_tokens, "0123456789");
    long mt = digits >= 1 && digits <= 5 && max_tokens[digits] == 0 ? strtol(max_tokens, NULL, 10) : 0;
    if (mt < 1 || mt > 65536) fe_usage_error("--max-tokens must be an integer in 1..65536, not '%s'", max_tokens);
    b->max_tokens = (int)mt;
    int cuda = strcmp(b->backend, "cuda") == 0;
    if (b->cudasim && !cuda) fe_usage_error("--cudasim needs --backend cuda");
    if (cuda && !fe_is_one_of(b->act_quant, "none|auto")) fe_usage_error("--act-quant %s is a CPU option", b->act_quant);
    if (*b->draft && cuda) fe_usage_error("--draft is a CPU option (the draft model runs on the CPU backend)");
    if (!fe_is_one_of(b->target, "host|aarch64-linux|wasm32"))
        fe_usage_error("unknown --target '%s' (host, aarch64-linux or wasm32)", b->target);
    int host = strcmp(b->target, "host") == 0;
    if (!host && cuda) fe_usage_error("--target %s is a CPU option", b->target);
    if (!host && b->san) fe_usage_error("--san runs on the host (no --target)");

    if (!cuda_arch_valid(b->cuda_arch))
        fe_usage_error("--cuda-arch is all or a comma-separated list of 80, 86, 89, 90, not '%s'", b->cuda_arch);
    if (strcmp(b->cuda_arch, "all") != 0 && !cuda) fe_usage_error("--cuda-arch is a CUDA option (--backend cuda)");

    b->wasm = strcmp(b->target, "wasm32") == 0;
    b->target_arch = host ? host_arch() : b->wasm ? "wasm32" : "aarch64";
    b->cross = strcmp(b->target_arch, host_arch()) != 0;
    if (b->wasm) {
        /* WebAssembly has one vector level, SIMD128 (build/flags.mk), and a page one module */
        if (!fe_is_one_of(b->isa, "native|all|simd128"))
            fe_usage_error("unknown --isa '%s' for wasm32 (simd128, its one level)", b->isa);
        if (*b->draft) fe_usage_error("--draft is not supported with --target wasm32 (a page runs one model)");
        b->isa = "simd128";
        b->isa_levels = "";
        return;
    }
    int arm = strcmp(b->target_arch, "aarch64") == 0;
    const char *levels = arm ? "i8mm dotprod armv8" : "avx512 avx2 portable";
    const char *level_list = arm ? "i8mm|dotprod|armv8" : "avx512|avx2|portable";
    /* a cross build cannot know the machine's own level: every level and the launcher */
    if (b->cross && strcmp(b->isa, "native") == 0) b->isa = "all";
    if (!fe_is_one_of(b->isa, "native|all") && !fe_is_one_of(b->isa, level_list))
        fe_usage_error("unknown --isa '%s' for %s (native, all, %s)", b->isa, b->target_arch,
                       arm ? "i8mm, dotprod, armv8" : "avx512, avx2, portable");
    if (strcmp(b->isa, "native") != 0 && cuda) fe_usage_error("--isa %s is a CPU option", b->isa);
    b->isa_levels = strcmp(b->isa, "native") == 0 ? "" : strcmp(b->isa, "all") == 0 ? levels : b->isa;
}

/* PATH as an absolute path the way the shell's `cd "$(dirname PATH)" && pwd` gives it: the
 * folder made absolute against the working directory and "." and ".." removed by name (a
 * symbolic link in the path stays as written), then the last component. */
static char *absolute_path(const char *path) {
    char *p = fe_format("%s", path);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0; /* "dir/" is dir */
    char *joined;
    if (p[0] == '/') joined = p;
    else {
        const char *pwd = getenv("PWD");
        struct stat a, b;
        char cwd[PATH_MAX];
        /* $PWD when it is this folder (the shell's logical name for it), else the physical one */
        if (!(pwd && pwd[0] == '/' && stat(pwd, &a) == 0 && stat(".", &b) == 0 && a.st_dev == b.st_dev &&
              a.st_ino == b.st_ino))
            pwd = getcwd(cwd, sizeof cwd) ? cwd : "/";
        joined = fe_format("%s/%s", pwd, p);
        free(p);
    }
    /* split into components, dropping "" and "." and letting ".." take one back; the last
     * component is kept as written even when it is "." or ".." (basename's) */
    size_t len = strlen(joined);
    char *out = malloc(len + 2);
    if (!out) fe_die("out of memory");
    char *last = strrchr(joined, '/');
    *last = 0;
    size_t o = 0;
    for (char *tok = strtok(joined, "/"); tok; tok = strtok(NULL, "/")) {
        if (strcmp(tok, ".") == 0) continue;
        if (strcmp(tok, "..") == 0) {
            while (o > 0 && out[o - 1] != '/') o--;
            if (o > 0) o--;
            continue;
        }
        out[o++] = '/';
        memcpy(out + o, tok, strlen(tok));
        o += strlen(tok);
    }
    out[o++] = '/';
    strcpy(out + o, last + 1);
    free(joined);
    return out;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

void fe_resolve_model(fe_build *b, const char *model) {
    struct stat st;
    if (stat(model, &st) != 0) fe_die("%s: no such file or folder", model);
    b->model = absolute_path(model);
    if (!*b->name) {
        char *name = fe_format("%s", base_name(b->model));
        if (ends_with(name, ".gguf")) name[strlen(name) - 5] = 0;
        if (ends_with(name, ".safetensors")) name[strlen(name) - 12] = 0;
        for (char *c = name; *c; c++) {
            *c = (char)tolower((unsigned char)*c);
            if (!(islower((unsigned char)*c) || isdigit((unsigned char)*c) || strchr("_.-", *c))) *c = '-';
        }
        if (!b->fuse) name = fe_format("%s-nofuse", name);
        if (b->cross) name = fe_format("%s-%s", name, b->target_arch);
        b->name = name;
    }
    if (!*b->name || b->name[0] == '_' || b->name[0] == '.' || strchr(b->name, '/'))
        fe_usage_error("bad --name '%s'", b->name);
    b->out = fe_format("%s/build/%s", fe_root, b->name);
    if (b->wasm) {
        /* the page's folder: its module (ingot.js, ingot.wasm), index.html, and the checkpoint as
         * model.gguf, which the page fetches: a GGUF file is what a page can load */
        if (!S_ISREG(st.st_mode) || !ends_with(b->model, ".gguf"))
            fe_usage_error("--target wasm32 needs a GGUF file (a page loads one file), not '%s'", model);
        b->bin = fe_format("%s/ingot.js", b->out);
        b->manifest = fe_format("%s/%s.manifest.json", b->out, b->name);
        return;
    }
    b->bin = fe_format("%s/%s%s%s", b->out, b->name, b->cudasim ? "-cudasim" : "", b->san ? "-san" : "");
    b->manifest = fe_format("%s.manifest.json", b->bin);
    if (*b->draft) {
        if (stat(b->draft, &st) != 0) fe_die("%s: no such file or folder (--draft)", b->draft);
        b->draft = absolute_path(b->draft);
    }
}

/* A binary of another architecture runs here when the kernel hands it to qemu-user (Debian's
 * qemu-user-binfmt registers it; scripts/setup.sh --cross where nothing does), so that it runs,
 * execs its level (templates/cpu/isa_launcher.c) and serves as it would on its machine. */
int fe_target_runs_here(const fe_build *b) {
    if (b->wasm) return 0; /* a page's module: a browser runs it */
    if (!b->cross) return 1;
    char *path = fe_format("/proc/sys/fs/binfmt_misc/qemu-%s", b->target_arch);
    FILE *f = fopen(path, "r");
    free(path);
    if (!f) return 0;
    char line[256];
    int enabled = 0;
    while (!enabled && fgets(line, sizeof line, f)) enabled = strcmp(line, "enabled\n") == 0 || strcmp(line, "enabled") == 0;
    fclose(f);
    return enabled;
}
