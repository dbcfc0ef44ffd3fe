/* serve_router.c — ingot serve with several models (or --config MODELS.json): builds every model
 * as `serve MODEL` does, then execs the router (build/_obj/ingot-router, tools/router/) with the
 * binaries it got; the resolved configuration reaches it on stdin. */
#define _GNU_SOURCE
#include "frontend.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUILD_VALUE_OPTIONS "--dtype|--backend|--act-quant|--kv-dtype|--max-tokens|--isa|--cuda-arch"
#define BUILD_FLAGS "--no-fuse|--san|--cudasim|--allow-unused"
#define ROUTER_OPTIONS                                                                                         \
    "--host|--port|--memory-budget|--api-key|--start-timeout|--stop-timeout|--max-body|--max-waiting|--read-timeout|" \
    "--max-connections"

/* MODEL paths come before any option but build options (ingot serve --dtype f32 A B) */
int fe_serve_has_several_models(int argc, char **argv) {
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--config") == 0) return 1;
        if (fe_is_one_of(a, BUILD_VALUE_OPTIONS)) i++;
        else if (fe_is_one_of(a, BUILD_FLAGS)) continue;
        else if (a[0] == '-') break;
        else n++;
    }
    return n >= 2;
}

typedef struct {
    const char *path, *name; /* name: NULL when not given */
    const char **build, **serve;
    int n_build, n_serve;
} model_entry;

typedef struct {
    const char **v;
    int n;
} word_list;

static void push(word_list *l, const char *w, int cap) {
    if (l->n >= cap) fe_die("too many arguments");
    l->v[l->n++] = w;
}

_Noreturn static void config_error(const char *path, const char *what) {
    fprintf(stderr, "ingot serve: %s: %s\n", path, what);
    exit(1);
}

/* the strings of the array KEY of model I, which must be one when present */
static const char **string_array(const char *path, const cJSON *m, int i, const char *key, int *n) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(m, key);
    *n = 0;
    if (!a) return NULL;
    char *what = fe_format("models[%d].%s must be an array of strings", i, key);
    if (!cJSON_IsArray(a)) config_error(path, what);
    const char **out = calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof *out);
    if (!out) fe_die("out of memory");
    const cJSON *s;
    cJSON_ArrayForEach(s, a) {
        if (!cJSON_IsString(s)) config_error(path, what);
        out[(*n)++] = s->valuestring;
    }
    free(what);
    return out;
}

/* MODELS.json: {"models": [{"path": ..., "name": ..., "build": [...], "serve": [...]}, ...]}; a
 * relative path is relative to the file's folder */
static model_entry *read_models_config(const char *path, int *n_models) {
    char *text = fe_read_file(path, NULL);
    if (!text) {
        fprintf(stderr, "ingot serve: cannot read %s\n", path);
        exit(1);
    }
    cJSON *cfg = cJSON_Parse(text);
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(cfg, "models");
    if (!cJSON_IsObject(cfg) || !cJSON_IsArray(models) || cJSON_GetArraySize(models) == 0)
        config_error(path, "a JSON object with a non-empty \"models\" array is needed");
    const char *slash = strrchr(path, '/');
    char *dir = slash ? fe_format("%.*s", (int)(slash - path), path) : fe_format(".");
    model_entry *out = calloc((size_t)cJSON_GetArraySize(models), sizeof *out);
    if (!out) fe_die("out of memory");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, models) {
        if (!cJSON_IsObject(m)) config_error(path, fe_format("models[%d] must be an object", i));
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(m, "path"), *name = cJSON_GetObjectItemCaseSensitive(m, "name");
        if (!cJSON_IsString(p) || !*p->valuestring) config_error(path, fe_format("models[%d].path must be a string", i));
        out[i].path = p->valuestring[0] == '/' ? p->valuestring : fe_format("%s/%s", dir, p->valuestring);
        if (name && !cJSON_IsString(name)) config_error(path, fe_format("models[%d].name must be a string", i));
        out[i].name = name ? name->valuestring : NULL;
        out[i].build = string_array(path, m, i, "build", &out[i].n_build);
        out[i].serve = string_array(path, m, i, "serve", &out[i].n_serve);
        i++;
    }
    *n_models = i;
    free(text); /* cfg, whose strings the entries point into, lives until the exec */
    return out;
}

/* A model's build: the options every model gets, its own, and its name. */
static void parse_model(fe_build *b, const model_entry *e, const word_list *common) {
    int cap = common->n + e->n_build + 2;
    char **argv = calloc((size_t)cap + 1, sizeof *argv);
    if (!argv) fe_die("out of memory");
    int n = 0;
    for (int i = 0; i < common->n; i++) argv[n++] = (char *)common->v[i];
    for (int i = 0; i < e->n_build; i++) argv[n++] = (char *)e->build[i];
    if (e->name) argv[n++] = "--name", argv[n++] = (char *)e->name;
    const char *saved = fe_cmd;
    fe_cmd = "build"; /* a model's build options are build options only */
    fe_parse_build_options(b, n, argv);
    fe_cmd = saved;
    fe_resolve_model(b, e->path);
}

_Noreturn void fe_serve_router(int argc, char **argv) {
    const char *config = NULL;
    word_list router = {calloc((size_t)argc + 8, sizeof(char *)), 0}, common = {calloc((size_t)argc + 1, sizeof(char *)), 0};
    word_list positional = {calloc((size_t)argc + 1, sizeof(char *)), 0}, child = {calloc((size_t)argc + 1, sizeof(char *)), 0};
    if (!router.v || !common.v || !positional.v || !child.v) fe_die("out of memory");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--config") == 0) {
            if (i + 1 >= argc) fe_usage_error("--config needs a file");
            config = argv[++i];
        } else if (fe_is_one_of(a, ROUTER_OPTIONS) || fe_is_one_of(a, BUILD_VALUE_OPTIONS)) {
            if (i + 1 >= argc) fe_usage_error("%s needs a value (see ingot serve --help)", a);
            word_list *to = fe_is_one_of(a, ROUTER_OPTIONS) ? &router : &common;
            push(to, a, argc), push(to, argv[++i], argc);
        } else if (strcmp(a, "--name") == 0) {
            fe_usage_error("--name names one model; with several, name each in a --config file");
        } else if (fe_is_one_of(a, BUILD_FLAGS)) {
            push(&common, a, argc);
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fe_help("serve");
            exit(0);
        } else if (strcmp(a, "--") == 0) {
            while (++i < argc) push(&child, argv[i], argc);
        } else if (a[0] == '-') {
            fe_usage_error("unknown option '%s' with several models (serve options for every model go after --)", a);
        } else push(&positional, a, argc);
    }
    model_entry *models;
    int n_models;
    if (config) {
        if (positional.n) fe_usage_error("give the models either on the command line or in --config, not both");
        models = read_models_config(config, &n_models);
    } else {
        models = calloc((size_t)positional.n, sizeof *models);
        if (!models) fe_die("out of memory");
        for (int i = 0; i < positional.n; i++) models[i].path = positional.v[i];
        n_models = positional.n;
    }

    /* two passes: every name is checked before anything is built */
    fe_build *builds = calloc((size_t)n_models, sizeof *builds);
    if (!builds) fe_die("out of memory");
    for (int i = 0; i < n_models; i++) {
        parse_model(&builds[i], &models[i], &common);
        for (int j = 0; j < i; j++)
            if (strcmp(builds[j].name, builds[i].name) == 0)
                fe_usage_error("two models are named '%s' (name them in a --config file)", builds[i].name);
    }
    cJSON *doc = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(doc, "models");
    int router_san = 0;
    for (int i = 0; i < n_models; i++) {
        fe_ensure_built(&builds[i]);
        router_san |= builds[i].san;
        cJSON *entry = cJSON_CreateObject(), *serve = cJSON_AddArrayToObject(entry, "serve");
        cJSON_AddStringToObject(entry, "name", builds[i].name);
        cJSON_AddStringToObject(entry, "binary", builds[i].bin);
        for (int j = 0; j < models[i].n_serve; j++) cJSON_AddItemToArray(serve, cJSON_CreateString(models[i].serve[j]));
        cJSON_AddItemToArray(list, entry);
    }
    char *json = cJSON_PrintUnformatted(doc);
    if (!json) fe_die("out of memory");

    char *san = fe_format("SAN=%d", router_san);
    char *make_router[] = {"make", "-s", "-C", (char *)fe_root, san, "router", NULL};
    fe_step("building the router", fe_exec_work, make_router);
    char *bin = fe_format("%s/build/%s/ingot-router", fe_root, router_san ? "_obj-san" : "_obj");

    /* the configuration on stdin: a file already unlinked, so nothing is left behind */
    char tmp[PATH_MAX];
    const int fd = fe_temp_file("router", tmp, sizeof tmp);
    unlink(tmp);
    size_t len = strlen(json);
    if (write(fd, json, len) != (ssize_t)len || write(fd, "\n", 1) != 1 || lseek(fd, 0, SEEK_SET) != 0 || dup2(fd, 0) < 0)
        fe_die("cannot pass the router its configuration: %s", strerror(errno));
    close(fd);
    const char **args = calloc((size_t)(router.n + child.n + 5), sizeof *args);
    if (!args) fe_die("out of memory");
    int n = 0;
    args[n++] = bin;
    for (int i = 0; i < router.n; i++) args[n++] = router.v[i];
    args[n++] = "--config", args[n++] = "-", args[n++] = "--";
    for (int i = 0; i < child.n; i++) args[n++] = child.v[i];
    args[n] = NULL;
    fflush(NULL);
    execv(bin, (char *const *)args);
    fe_die("cannot run %s: %s", bin, strerror(errno));
}
