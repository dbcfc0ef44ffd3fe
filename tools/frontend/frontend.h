/* frontend.h — the ./ingot front end: one C program (tools/frontend/), which ./ingot (a launcher
 * of a few lines) compiles on first use and then execs.
 *
 * Reading order: main.c (the commands and how a command line is split), options.c (the build
 * options and where a build lands), inputs_key.c (when a binary is up to date), build.c (the steps
 * of a build), step.c (how a step runs and shows its progress), manifest.c (what a build records),
 * list.c (ingot list), serve_router.c (several models behind one port), help.c (every help text).
 *
 * The front end is a program that runs other programs (make, lua5.4, the tools, the model
 * binary) and execs the last one; it keeps no state but build/NAME/BINARY.manifest.json. */
#ifndef INGOT_FRONTEND_H
#define INGOT_FRONTEND_H

#include <stdarg.h>
#include <stddef.h>

/* The repository root (the folder ./ingot is in) and the command being run ("build", "run",
 * "serve", "chat", ...; "" before one is known): messages say "ingot COMMAND: ...". */
extern const char *fe_root;
extern const char *fe_cmd;

/* A mistake in the command line: one line on stderr, exit status 2. */
_Noreturn void fe_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Anything else that stops the front end: "ingot: ..." on stderr, exit status 1. */
_Noreturn void fe_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "ingot: MESSAGE" and a newline on stderr. */
void fe_vsay(const char *fmt, va_list ap);
/* malloc'd printf; out of memory is fatal. */
char *fe_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- options.c: the build options and the paths they give ---------------------------------- */

typedef struct {
    /* as given (pointers into argv, or literals for the defaults) */
    const char *name, *dtype, *backend, *act_quant, *kv_dtype, *isa, *cuda_arch, *target;
    const char *models_file; /* absolute, "" when not given */
    const char *draft;       /* absolute after fe_resolve_model, "" when not given */
    int fuse, san, cudasim, allow_unused, max_tokens;
    /* derived: the machine the binary runs on, whether it is another one, the ISA levels */
    const char *target_arch; /* x86_64, aarch64 or wasm32 */
    int cross;
    int wasm;               /* --target wasm32: a web page's module, not a binary that runs here */
    const char *isa_levels; /* "" (native), "avx512 avx2 portable", or one level */
    /* the words that are not build options (run, serve, chat): the binary's */
    const char **passthrough;
    int n_passthrough;
    /* after fe_resolve_model: the checkpoint and where its build lands */
    const char *model;    /* absolute */
    const char *out;      /* build/NAME */
    const char *bin;      /* build/NAME/NAME[-cudasim][-san]; --target wasm32: build/NAME/ingot.js */
    const char *manifest; /* BIN.manifest.json; --target wasm32: build/NAME/NAME.manifest.json */
} fe_build;

/* Parses argv[0..argc) as build options into *b (defaults first). With fe_cmd "build" anything
 * else is a usage error; otherwise it is kept, in order, in b->passthrough. */
void fe_parse_build_options(fe_build *b, int argc, char **argv);
/* MODEL to an absolute path; the build's name, folder, binary and manifest. */
void fe_resolve_model(fe_build *b, const char *model);
/* Whether the build's binary runs on this machine (a cross build: through qemu-user). */
int fe_target_runs_here(const fe_build *b);
/* The --dtype names ("native", then dtype_table.h's build types and mixes), NULL-terminated. */
const char *const *fe_dtype_choices(void);
/* Whether OPT is an option that takes a value / a flag, among LIST ("--a|--b|..."). */
int fe_is_one_of(const char *opt, const char *list);

/* ---- inputs_key.c: when a binary is up to date -------------------------------------------- */

typedef struct {
    char sources[33], options[33], checkpoint[33], inputs[33];
} fe_keys;

void fe_compute_keys(const fe_build *b, fe_keys *k);

/* ---- manifest.c: what a build records beside its binary ----------------------------------- */

/* A string or number field of a manifest as text (malloc'd), NULL when absent or unreadable. */
char *fe_manifest_field(const char *manifest, const char *field);
void fe_write_manifest(const fe_build *b, const fe_keys *k);
/* A field of the generated model descriptor (gen/model.c: `.arch = "llama",`), malloc'd, ""
 * when absent. */
char *fe_descriptor_field(const char *text, const char *field);
/* A whole file, NUL-terminated (malloc'd), NULL when it cannot be read. */
char *fe_read_file(const char *path, size_t *len);

/* ---- step.c: running a build step ---------------------------------------------------------- */

/* How the front end reports its steps: tty (a line with a timer, redrawn), plain (one line per
 * step), none (silence: stderr is not a terminal, or INGOT_PROGRESS=0). */
enum fe_progress { FE_PROGRESS_NONE, FE_PROGRESS_PLAIN, FE_PROGRESS_TTY };
extern enum fe_progress fe_progress;
void fe_progress_init(void);
/* "ingot: ..." on stderr unless progress is none. */
void fe_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Runs WORK(CTX) in a child process as the step LABEL and exits 1 when it fails (its exit status
 * is not 0); WORK's own output is held back until it ends on a terminal. */
void fe_step(const char *label, int (*work)(void *ctx), void *ctx);
/* For fe_step: execs argv (a NULL-terminated array); never returns. */
int fe_exec_work(void *argv);
/* Runs argv to completion with stdout to OUT_PATH ("" or NULL: unchanged); its exit status, or
 * -1 when it could not run. */
int fe_run(char *const argv[], const char *out_path);
/* A new file $TMPDIR/ingot-WHAT-XXXXXX (/tmp without TMPDIR), open for reading and writing: its
 * descriptor, its path in path[cap]; fatal when it cannot be made. */
int fe_temp_file(const char *what, char *path, size_t cap);
/* Milliseconds on a monotonic clock. */
long long fe_now_ms(void);

/* ---- build.c: the build itself ------------------------------------------------------------- */

/* Generates and compiles the binary (the caller holds the build's lock). */
void fe_build_model(const fe_build *b, const fe_keys *k);
/* Builds the binary unless its manifest records the current inputs key; two front ends building
 * the same name wait for each other. */
void fe_ensure_built(const fe_build *b);
/* Takes build/NAME/.lock (blocking); the descriptor to close to release it. */
int fe_lock_build(const fe_build *b);

/* ---- list.c, serve_router.c, help.c -------------------------------------------------------- */

int fe_list_models(void);
/* Whether the serve command line names several models (or --config). */
int fe_serve_has_several_models(int argc, char **argv);
_Noreturn void fe_serve_router(int argc, char **argv);
/* The help of COMMAND ("" for the top level) on stdout; 0, or -1 for an unknown command. */
int fe_help(const char *command);

#endif
