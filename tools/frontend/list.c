/* list.c — ingot list: one row per binary under build/, from its manifest, or for a build made
 * before manifests existed, from the descriptor in its generated source. */
#define _GNU_SOURCE
#include "frontend.h"

#include <cjson/cJSON.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { COLUMNS = 7 };
typedef struct {
    char *cell[COLUMNS];
} row;

typedef struct {
    row *rows;
    size_t n, cap;
} table;

static void add_row(table *t, char *cells[COLUMNS]) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 16;
        t->rows = realloc(t->rows, t->cap * sizeof *t->rows);
        if (!t->rows) fe_die("out of memory");
    }
    memcpy(t->rows[t->n++].cell, cells, sizeof(char *) * COLUMNS);
}

/* the size of a regular file, -1 when there is none */
static long long size_of(const char *path) {
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISREG(st.st_mode) ? (long long)st.st_size : -1;
}

static char *human(long long bytes) {
    static const char *const UNITS[] = {"B", "KB", "MB", "GB", "TB"};
    double v = (double)bytes;
    int i = 0;
    while (v >= 1000 && i < 4) v /= 1000, i++;
    return i == 0 ? fe_format("%lld B", bytes) : fe_format("%.1f %s", v, UNITS[i]);
}

/* paths under the repository relative to it */
static char *shown(const char *path) {
    size_t n = strlen(fe_root);
    if (!path) path = "";
    return fe_format("%s", strncmp(path, fe_root, n) == 0 && path[n] == '/' ? path + n + 1 : path);
}

static char *string_of(const cJSON *m, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, key);
    return fe_format("%s", cJSON_IsString(v) ? v->valuestring : "?");
}

static char *folder_of(const char *path) {
    return fe_format("%.*s", (int)(strrchr(path, '/') - path), path);
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const row *)a)->cell[0], ((const row *)b)->cell[0]);
}

/* the rows of the manifests; the folders they describe into *described */
static void manifest_rows(table *t, glob_t *described) {
    char *pattern = fe_format("%s/build/*/*.manifest.json", fe_root);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            char *text = fe_read_file(g.gl_pathv[i], NULL);
            cJSON *m = text ? cJSON_Parse(text) : NULL;
            const cJSON *binary = cJSON_GetObjectItemCaseSensitive(m, "binary");
            long long size = cJSON_IsString(binary) ? size_of(binary->valuestring) : -1;
            if (size >= 0) {
                described->gl_pathv[described->gl_pathc++] = folder_of(g.gl_pathv[i]);
                const cJSON *model = cJSON_GetObjectItemCaseSensitive(m, "model");
                char *cells[COLUMNS] = {string_of(m, "name"), string_of(m, "arch"), string_of(m, "backend"),
                                        fe_format("%s", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "fused")) ? "yes" : "no"),
                                        string_of(m, "weights"), human(size),
                                        shown(cJSON_IsString(model) ? model->valuestring : "")};
                add_row(t, cells);
            }
            cJSON_Delete(m);
            free(text);
        }
        globfree(&g);
    }
    free(pattern);
}

static char *field_or_unknown(const char *text, const char *key) {
    char *v = fe_descriptor_field(text, key);
    if (*v) return v;
    free(v);
    return fe_format("?");
}

/* the rows of builds without a manifest, from their generated descriptor */
static void descriptor_rows(table *t, const glob_t *described) {
    char *pattern = fe_format("%s/build/*/gen/model.c", fe_root);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            char *dir = fe_format("%.*s", (int)(strlen(g.gl_pathv[i]) - strlen("/gen/model.c")), g.gl_pathv[i]);
            int seen = 0;
            for (size_t j = 0; j < described->gl_pathc; j++) seen |= strcmp(described->gl_pathv[j], dir) == 0;
            char *text = seen ? NULL : fe_read_file(g.gl_pathv[i], NULL);
            const char *name = strrchr(dir, '/') + 1;
            static const char *const SUFFIXES[] = {"", "-cudasim", "-san", "-cudasim-san"};
            for (size_t s = 0; text && s < 4; s++) {
                char *bin = fe_format("%s/%s%s", dir, name, SUFFIXES[s]);
                long long size = size_of(bin);
                if (size >= 0) {
                    char *fused = fe_descriptor_field(text, "fused"), *source = fe_descriptor_field(text, "source");
                    char *cells[COLUMNS] = {fe_format("%s%s", name, SUFFIXES[s]), field_or_unknown(text, "arch"),
                                            strstr(SUFFIXES[s], "cudasim") ? fe_format("cudasim") : field_or_unknown(text, "backend"),
                                            fe_format("%s", strcmp(fused, "1") == 0 ? "yes" : "no"),
                                            field_or_unknown(text, "weight_dtypes"), human(size), shown(source)};
                    add_row(t, cells);
                    free(fused), free(source);
                }
                free(bin);
            }
            free(text);
            free(dir);
        }
        globfree(&g);
    }
    free(pattern);
}

int fe_list_models(void) {
    table t = {0};
    glob_t described = {0};
    char *pattern = fe_format("%s/build/*/*.manifest.json", fe_root);
    glob_t count;
    size_t most = glob(pattern, 0, NULL, &count) == 0 ? count.gl_pathc : 0;
    if (most) globfree(&count);
    described.gl_pathv = calloc(most + 1, sizeof(char *));
    if (!described.gl_pathv) fe_die("out of memory");
    manifest_rows(&t, &described);
    descriptor_rows(&t, &described);
    if (t.n == 0) {
        fputs("no models built yet (try: ingot build MODEL)\n", stderr);
        return 0;
    }
    qsort(t.rows, t.n, sizeof *t.rows, by_name);
    static const char *const HEADER[COLUMNS] = {"NAME", "ARCH", "BACKEND", "FUSED", "WEIGHTS", "SIZE", "MODEL"};
    size_t width[COLUMNS];
    for (int c = 0; c < COLUMNS; c++) width[c] = strlen(HEADER[c]);
    for (size_t r = 0; r < t.n; r++)
        for (int c = 0; c < COLUMNS; c++)
            if (strlen(t.rows[r].cell[c]) > width[c]) width[c] = strlen(t.rows[r].cell[c]);
    for (size_t r = 0; r <= t.n; r++) {
        const char *const *cells = r == 0 ? HEADER : (const char *const *)t.rows[r - 1].cell;
        for (int c = 0; c < COLUMNS - 1; c++) printf("%-*s  ", (int)width[c], cells[c]);
        printf("%s\n", cells[COLUMNS - 1]);
    }
    free(pattern);
    return 0;
}
