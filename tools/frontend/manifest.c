/* manifest.c — build/NAME/BINARY.manifest.json: what a build was made from (its inputs keys, which
 * say when it is up to date) and what it is (ingot list's columns). */
#define _GNU_SOURCE
#include "frontend.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../tool_file.h"

char *fe_read_file(const char *path, size_t *len) {
    size_t n = 0;
    char *text = tool_read_file(path, &n);
    if (text && len) *len = n;
    return text;
}

char *fe_descriptor_field(const char *text, const char *field) {
    char *key = fe_format(".%s = ", field);
    size_t key_len = strlen(key);
    char *found = NULL;
    for (const char *line = text; line && *line && !found; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        const char *p = line;
        while (*p == ' ') p++;
        if (strncmp(p, key, key_len) != 0) continue;
        p += key_len;
        const char *end = strchr(p, '\n');
        if (!end) end = p + strlen(p);
        /* the line ends in `",` (a string) or `,` (a number): the value is what lies between */
        int quoted = *p == '"';
        const char *v = p + quoted, *stop = end - 1 - quoted;
        if (stop < v || *(end - 1) != ',' || (quoted && *(end - 2) != '"')) continue;
        if (memchr(v, '"', (size_t)(stop - v))) continue;
        found = fe_format("%.*s", (int)(stop - v), v);
    }
    free(key);
    return found ? found : fe_format("%s", "");
}

/* The generator's banner records its own inputs hash: "inputs hash: <hex>". */
static char *banner_hash(const char *text) {
    const char *p = strstr(text, "inputs hash: ");
    if (!p) return fe_format("%s", "");
    p += strlen("inputs hash: ");
    size_t n = strspn(p, "0123456789abcdef");
    return fe_format("%.*s", (int)n, p);
}

char *fe_manifest_field(const char *manifest, const char *field) {
    char *text = fe_read_file(manifest, NULL);
    if (!text) return NULL;
    cJSON *doc = cJSON_Parse(text);
    free(text);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, field);
    char *out = NULL;
    if (cJSON_IsString(v)) out = fe_format("%s", v->valuestring);
    else if (cJSON_IsNumber(v)) out = fe_format("%.17g", v->valuedouble);
    cJSON_Delete(doc);
    return out;
}

void fe_write_manifest(const fe_build *b, const fe_keys *k) {
    char *gen = fe_format("%s/gen/model.c", b->out);
    char *text = fe_read_file(gen, NULL);
    if (!text) fe_die("cannot read %s", gen);
    char *arch = fe_descriptor_field(text, "arch"), *weights = fe_descriptor_field(text, "weight_dtypes");
    char *hash = banner_hash(text);
    char built[32];
    time_t now = time(NULL);
    strftime(built, sizeof built, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    int cuda = strcmp(b->backend, "cuda") == 0;
    const char *binary_name = strrchr(b->bin, '/') + 1;

    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "name", binary_name);
    cJSON_AddStringToObject(m, "binary", b->bin);
    cJSON_AddStringToObject(m, "model", b->model);
    cJSON_AddStringToObject(m, "arch", arch);
    cJSON_AddStringToObject(m, "backend", b->cudasim ? "cudasim" : b->backend);
    cJSON_AddBoolToObject(m, "fused", b->fuse);
    cJSON_AddStringToObject(m, "dtype", b->dtype);
    cJSON_AddStringToObject(m, "weights", weights);
    cJSON_AddStringToObject(m, "act_quant", b->act_quant);
    cJSON_AddStringToObject(m, "kv_dtype", b->kv_dtype);
    cJSON_AddStringToObject(m, "isa", b->isa);
    cJSON_AddStringToObject(m, "target", b->target);
    cJSON_AddStringToObject(m, "cuda_arch", cuda ? b->cuda_arch : "");
    cJSON_AddNumberToObject(m, "max_tokens", b->max_tokens);
    cJSON_AddStringToObject(m, "draft", b->draft);
    cJSON_AddBoolToObject(m, "san", b->san);
    cJSON_AddBoolToObject(m, "allow_unused", b->allow_unused);
    cJSON_AddStringToObject(m, "generator_hash", hash);
    cJSON_AddStringToObject(m, "inputs_key", k->inputs);
    cJSON_AddStringToObject(m, "sources_key", k->sources);
    cJSON_AddStringToObject(m, "options_key", k->options);
    cJSON_AddStringToObject(m, "checkpoint_key", k->checkpoint);
    cJSON_AddStringToObject(m, "built", built);
    char *json = cJSON_Print(m);
    if (!json) fe_die("out of memory");

    /* written beside it and renamed: a reader never sees half a manifest */
    char *tmp = fe_format("%s.tmp", b->manifest);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%s\n", json) < 0 || fclose(f) != 0 || rename(tmp, b->manifest) != 0)
        fe_die("cannot write %s", b->manifest);
    free(tmp);
    free(json);
    cJSON_Delete(m);
    free(arch);
    free(weights);
    free(hash);
    free(text);
    free(gen);
}
