/* main.c — ingot's commands: casts a model into its own binary, and runs it.
 *
 *   ./ingot build MODEL [build options]                   generate + compile build/NAME/NAME
 *   ./ingot run   MODEL [build options] [--] [generate options]
 *   ./ingot serve MODEL [build options] [--] [serve options]   (several models: serve_router.c)
 *   ./ingot chat  MODEL [build options] [--] [chat options]
 *   ./ingot list                                          the models built under build/
 *   ./ingot check ENTRY...                                scripts/check_entry.py
 *   ./ingot help [COMMAND]                                (or --help, COMMAND --help)
 *
 * MODEL is a GGUF file, a .safetensors file or a folder with config.json and model.safetensors
 * (or model.safetensors.index.json). `run`, `serve` and `chat` build the binary on first use and
 * then exec `NAME generate ...` / `NAME serve ...` / `NAME chat ...` with every option that is
 * not a build option; later calls exec at once while nothing the binary is made from has changed
 * (inputs_key.c). Each build leaves build/NAME/BINARY.manifest.json, which `list` reads.
 *
 * ./ingot runs this program as `build/_obj/ingot-frontend ROOT COMMAND ...` (ROOT: the folder
 * ./ingot is in), after make has brought it up to date (tools/frontend/frontend.mk). */
#define _GNU_SOURCE
#include "frontend.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
/* Under ASan (INGOT_FRONTEND_SAN=1): what the front end allocates lives until it execs or exits,
 * after one command; the leak check is for the runtime's long-lived processes. A callback, not
 * ASAN_OPTIONS, so that the binaries it execs keep theirs. */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return 1; }
#endif

const char *fe_root = "";
const char *fe_cmd = "";

_Noreturn void fe_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ingot%s%s: ", *fe_cmd ? " " : "", fe_cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

void fe_vsay(const char *fmt, va_list ap) {
    fputs("ingot: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

_Noreturn void fe_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fe_vsay(fmt, ap);
    va_end(ap);
    exit(1);
}

char *fe_format(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) fe_die("out of memory");
    return s;
}

/* the build options that may also come before MODEL (ingot run --dtype f32 MODEL) */
#define LEADING_VALUE_OPTIONS "--name|--dtype|--backend|--act-quant|--kv-dtype|--max-tokens|--draft|--isa|--cuda-arch"
#define LEADING_FLAGS "--no-fuse|--san|--cudasim|--allow-unused"

static int help_command(int argc, char **argv) {
    if (argc > 1) fe_usage_error("takes at most one command name");
    const char *topic = argc ? argv[0] : "";
    if (strcmp(topic, "-h") == 0 || strcmp(topic, "--help") == 0) topic = "help";
    if (fe_help(topic) != 0) fe_usage_error("unknown command '%s' (build, run, serve, chat, list or help)", topic);
    return 0;
}

static int list_command(int argc, char **argv) {
    if (argc == 0) return fe_list_models();
    if (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0) return fe_help("list");
    fe_usage_error("unknown option '%s' (see ingot list --help)", argv[0]);
}

_Noreturn static void check_command(int argc, char **argv) {
    if (argc && (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)) {
        fe_help("check");
        exit(0);
    }
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) fe_die("out of memory");
    args[0] = "python3";
    args[1] = fe_format("%s/scripts/check_entry.py", fe_root);
    memcpy(args + 2, argv, (size_t)argc * sizeof *argv);
    execvp(args[0], args);
    fe_die("cannot run python3: %s", strerror(errno));
}

/* build, run, serve and chat of one model */
static int model_command(int argc, char **argv) {
    int pre = 0;
    while (pre < argc) {
        if (fe_is_one_of(argv[pre], LEADING_VALUE_OPTIONS) && pre + 1 < argc) pre += 2;
        else if (fe_is_one_of(argv[pre], LEADING_FLAGS)) pre++;
        else break;
    }
    const char *model = pre < argc ? argv[pre] : "";
    if (strcmp(model, "-h") == 0 || strcmp(model, "--help") == 0) return fe_help(fe_cmd);
    if (!*model || model[0] == '-') fe_usage_error("needs a MODEL path (see ingot %s --help)", fe_cmd);
    /* the options before MODEL, then those after it */
    char **opts = calloc((size_t)argc, sizeof *opts);
    if (!opts) fe_die("out of memory");
    memcpy(opts, argv, (size_t)pre * sizeof *argv);
    memcpy(opts + pre, argv + pre + 1, (size_t)(argc - pre - 1) * sizeof *argv);
    fe_build b;
    fe_parse_build_options(&b, argc - 1, opts);
    fe_resolve_model(&b, model);

    if (strcmp(fe_cmd, "build") == 0) {
        int lock = fe_lock_build(&b);
        fe_keys k;
        fe_compute_keys(&b, &k);
        fe_build_model(&b, &k);
        close(lock);
        printf("%s\n", b.bin);
        return 0;
    }
    fe_ensure_built(&b);
    const char *sub = strcmp(fe_cmd, "serve") == 0 ? "serve" : strcmp(fe_cmd, "chat") == 0 ? "chat" : "generate";
    if (b.wasm)
        fe_die("build/%s is a web page's WebAssembly module: serve the folder (python3 -m http.server -d build/%s) and open "
               "it in a browser", b.name, b.name);
    if (!fe_target_runs_here(&b))
        fe_die("%s is a %s binary: scripts/setup.sh --cross lets qemu-user run it here, or copy build/%s to a %s machine",
               b.bin, b.target_arch, b.name, b.target_arch);
    char **args = calloc((size_t)b.n_passthrough + 3, sizeof *args);
    if (!args) fe_die("out of memory");
    args[0] = (char *)b.bin;
    args[1] = (char *)sub;
    memcpy(args + 2, b.passthrough, (size_t)b.n_passthrough * sizeof *args);
    fflush(NULL);
    execv(b.bin, args);
    fe_die("cannot run %s: %s", b.bin, strerror(errno));
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs("usage: build/_obj/ingot-frontend ROOT COMMAND ... (run it as ./ingot)\n", stderr);
        return 2;
    }
    fe_root = argv[1];
    argc -= 2, argv += 2;
    fe_progress_init();
    if (argc < 1) fe_usage_error("a command is needed: build, run, serve, chat, list or help (see ingot --help)");
    const char *cmd = argv[0];
    argc--, argv++;
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) return fe_help("");
    if (strcmp(cmd, "check") == 0) check_command(argc, argv);
    if (!fe_is_one_of(cmd, "build|run|serve|chat|list|help")) {
        if (cmd[0] == '-') fe_usage_error("unknown option '%s' (see ingot --help)", cmd);
        fe_usage_error("unknown command '%s' (build, run, serve, chat, list, check or help)", cmd);
    }
    fe_cmd = cmd;
    if (strcmp(cmd, "help") == 0) return help_command(argc, argv);
    if (strcmp(cmd, "list") == 0) return list_command(argc, argv);
    /* serve with several models (or a config file) runs the router */
    if (strcmp(cmd, "serve") == 0 && fe_serve_has_several_models(argc, argv)) fe_serve_router(argc, argv);
    return model_command(argc, argv);
}
