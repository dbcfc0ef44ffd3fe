/* config.c — the models the router serves: a JSON file or --model NAME BINARY.
 *
 *   {"models": [{"name": "smollm2", "binary": "build/smollm2/smollm2",
 *                "serve": ["--kv-memory", "256"]}, ...]}
 *
 * `ingot serve` writes this (with the binaries it built) from the user's own
 * config, whose entries name checkpoints and build options instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "router.h"

/* A name a request's "model" field can carry and a log line can show. */
static int valid_name(const char *s) {
    if (!s || !*s || strlen(s) > 128) return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_' || *p == '.' || *p == ':' || *p == '/'))
            return 0;
    return 1;
}

rt_model *rt_find_model(rt_router *r, const char *name) {
    for (int i = 0; i < r->n_models; i++)
        if (!strcmp(r->models[i].name, name)) return &r->models[i];
    return NULL;
}

rt_model *rt_find_served(rt_router *r, const char *name, const char **adapter) {
    *adapter = NULL;
    rt_model *m = rt_find_model(r, name);
    for (int i = 0; !m && i < r->n_models; i++)
        for (int k = 0; k < r->models[i].n_adapters; k++)
            if (!strcmp(r->models[i].adapters[k], name)) {
                *adapter = r->models[i].adapters[k];
                return &r->models[i];
            }
    return m;
}

int rt_config_adapters(rt_router *r) {
    for (int i = 0; i < r->n_models; i++) {
        rt_model *m = &r->models[i];
        for (int k = 0; k + 1 < m->n_serve_args; k++) {
            if (strcmp(m->serve_args[k], "--lora")) continue;
            /* NAME=PATH, else the file or folder's own name, as the model binary names it */
            const char *spec = m->serve_args[++k], *eq = strchr(spec, '=');
            size_t len = eq ? (size_t)(eq - spec) : strlen(spec), start = 0;
            if (!eq) {
                while (len > 1 && spec[len - 1] == '/') len--;
                for (start = len; start > 0 && spec[start - 1] != '/'; start--) {}
            }
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(len - start), spec + start);
            const char *taken;
            if (!valid_name(name) || len - start > 63) {
                fprintf(stderr, "ingot-router: error: model '%s': bad adapter name '%s' (--lora NAME=PATH)\n", m->name, name);
                return -1;
            }
            if (rt_find_served(r, name, &taken)) {
                fprintf(stderr, "ingot-router: error: model '%s': the adapter name '%s' is already a model's or an "
                                "adapter's (--lora NAME=PATH names it)\n", m->name, name);
                return -1;
            }
            char **grown = realloc(m->adapters, sizeof *grown * (size_t)(m->n_adapters + 1));
            if (!grown) return -1;
            m->adapters = grown;
            if (!(m->adapters[m->n_adapters] = strdup(name))) return -1;
            m->n_adapters++;
        }
    }
    return 0;
}

static rt_model *add_model(rt_router *r, const char *name, const char *binary) {
    if (!valid_name(name)) {
        fprintf(stderr, "ingot-router: error: bad model name '%s' (letters, digits and -_.:/ only)\n", name);
        return NULL;
    }
    if (r->n_models >= RT_MAX_MODELS) {
        fprintf(stderr, "ingot-router: error: more than %d models\n", RT_MAX_MODELS);
        return NULL;
    }
    if (rt_find_model(r, name)) {
        fprintf(stderr, "ingot-router: error: model '%s' is configured twice\n", name);
        return NULL;
    }
    rt_model *grown = realloc(r->models, sizeof *grown * (size_t)(r->n_models + 1));
    if (!grown) return NULL;
    r->models = grown;
    rt_model *m = &r->models[r->n_models++];
    memset(m, 0, sizeof *m);
    m->router = r;
    m->name = strdup(name);
    m->binary = strdup(binary);
    m->log_fd = -1;
    if (!m->name || !m->binary) return NULL;
    return m;
}

static int add_arg(rt_model *m, const char *a) {
    if (m->n_serve_args >= RT_MAX_SERVE_ARGS) {
        fprintf(stderr, "ingot-router: error: model '%s': more than %d serve arguments\n", m->name, RT_MAX_SERVE_ARGS);
        return -1;
    }
    char **grown = realloc(m->serve_args, sizeof *grown * (size_t)(m->n_serve_args + 1));
    if (!grown) return -1;
    m->serve_args = grown;
    if (!(m->serve_args[m->n_serve_args] = strdup(a))) return -1;
    m->n_serve_args++;
    return 0;
}

int rt_config_add(rt_router *r, const char *name, const char *binary) {
    return add_model(r, name, binary) ? 0 : -1;
}

int rt_config_add_common_args(rt_router *r, char **args, int n) {
    for (int i = 0; i < r->n_models; i++)
        for (int k = 0; k < n; k++)
            if (add_arg(&r->models[i], args[k]) != 0) return -1;
    return 0;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *grown = cap < (16u << 20) ? realloc(buf, cap *= 2) : NULL; /* a config is small */
            if (!grown) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
        }
        const size_t got = fread(buf + n, 1, cap - n - 1, f);
        if (got == 0) break;
        n += got;
    }
    if (f != stdin) fclose(f);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

int rt_config_load(rt_router *r, const char *path) {
    size_t len;
    char *text = read_all(path, &len);
    if (!text) {
        fprintf(stderr, "ingot-router: error: cannot read the config %s\n", path);
        return -1;
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    int rc = -1;
    const cJSON *models = root ? cJSON_GetObjectItemCaseSensitive(root, "models") : NULL;
    if (!cJSON_IsArray(models) || cJSON_GetArraySize(models) == 0) {
        fprintf(stderr, "ingot-router: error: %s: a JSON object with a non-empty \"models\" array is needed\n", path);
        goto out;
    }
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, models) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *binary = cJSON_GetObjectItemCaseSensitive(e, "binary");
        const cJSON *serve = cJSON_GetObjectItemCaseSensitive(e, "serve");
        if (!cJSON_IsString(name) || !cJSON_IsString(binary)) {
            fprintf(stderr, "ingot-router: error: %s: models[%d] needs string \"name\" and \"binary\"\n", path, i);
            goto out;
        }
        rt_model *m = add_model(r, name->valuestring, binary->valuestring);
        if (!m) goto out;
        if (serve && !cJSON_IsArray(serve)) {
            fprintf(stderr, "ingot-router: error: %s: models[%d].serve must be an array of strings\n", path, i);
            goto out;
        }
        const cJSON *a;
        cJSON_ArrayForEach(a, serve) {
            if (!cJSON_IsString(a)) {
                fprintf(stderr, "ingot-router: error: %s: models[%d].serve must be an array of strings\n", path, i);
                goto out;
            }
            if (add_arg(m, a->valuestring) != 0) goto out;
        }
        i++;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

void rt_config_free(rt_router *r) {
    for (int i = 0; i < r->n_models; i++) {
        rt_model *m = &r->models[i];
        free(m->name);
        free(m->binary);
        for (int k = 0; k < m->n_serve_args; k++) free(m->serve_args[k]);
        free(m->serve_args);
        for (int k = 0; k < m->n_adapters; k++) free(m->adapters[k]);
        free(m->adapters);
    }
    free(r->models);
    r->models = NULL;
    r->n_models = 0;
}
