/* metrics_merge.c — the children's Prometheus text as one exposition.
 *
 * Each child exposes the same families. The text format wants every family
 * once (one HELP, one TYPE) with all its samples together, so the children's
 * samples are gathered per family, each with model="NAME" put first among
 * its labels:
 *
 *   ingot_http_requests_total{code="200"} 3   →   ingot_http_requests_total{model="a",code="200"} 3
 *   ingot_batch_size 1                        →   ingot_batch_size{model="a"} 1
 *
 * A sample belongs to the family its HELP/TYPE lines announced last when its
 * name extends that family's (a histogram's _bucket, _sum, _count), else to a
 * family of its own name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "router.h"

typedef struct {
    char *name;
    char *help, *type; /* the whole "# HELP ..." / "# TYPE ..." lines; NULL until seen */
    struct evbuffer *samples;
} family;

struct rt_metrics_merge {
    family *fams;
    int n, cap;
};

rt_metrics_merge *rt_merge_new(void) { return calloc(1, sizeof(rt_metrics_merge)); }

void rt_merge_free(rt_metrics_merge *mm) {
    if (!mm) return;
    for (int i = 0; i < mm->n; i++) {
        free(mm->fams[i].name);
        free(mm->fams[i].help);
        free(mm->fams[i].type);
        evbuffer_free(mm->fams[i].samples);
    }
    free(mm->fams);
    free(mm);
}

static family *get_family(rt_metrics_merge *mm, const char *name, size_t len) {
    for (int i = 0; i < mm->n; i++)
        if (strlen(mm->fams[i].name) == len && !memcmp(mm->fams[i].name, name, len)) return &mm->fams[i];
    if (mm->n == mm->cap) {
        const int cap = mm->cap ? mm->cap * 2 : 32;
        family *grown = realloc(mm->fams, sizeof *grown * (size_t)cap);
        if (!grown) return NULL;
        mm->fams = grown;
        mm->cap = cap;
    }
    family *f = &mm->fams[mm->n];
    memset(f, 0, sizeof *f);
    f->name = strndup(name, len);
    f->samples = evbuffer_new();
    if (!f->name || !f->samples) {
        free(f->name);
        if (f->samples) evbuffer_free(f->samples);
        return NULL;
    }
    mm->n++;
    return f;
}

static size_t name_len(const char *s, size_t n) {
    size_t i = 0;
    while (i < n && s[i] != '{' && s[i] != ' ' && s[i] != '\t') i++;
    return i;
}

/* A "# HELP name ..." or "# TYPE name ..." line: keeps the first of each per family. */
static int add_comment(rt_metrics_merge *mm, const char *line, size_t n, family **current) {
    const int help = n > 7 && !memcmp(line, "# HELP ", 7), type = n > 7 && !memcmp(line, "# TYPE ", 7);
    if (!help && !type) return 0; /* other comments carry nothing */
    const char *name = line + 7;
    family *f = get_family(mm, name, name_len(name, n - 7));
    if (!f) return -1;
    char **slot = help ? &f->help : &f->type;
    if (!*slot && !(*slot = strndup(line, n))) return -1;
    *current = f;
    return 0;
}

static int add_sample(rt_metrics_merge *mm, const char *model, const char *line, size_t n, family **current) {
    const size_t nl = name_len(line, n);
    if (nl == 0 || nl == n) return 0; /* not a sample line */
    family *f = *current;
    const size_t fl = f ? strlen(f->name) : 0;
    if (!f || nl < fl || memcmp(line, f->name, fl) != 0) {
        if (!(f = get_family(mm, line, nl))) return -1;
        *current = f;
    }
    const char *rest = line + nl;
    size_t rest_len = n - nl;
    int rc;
    if (*rest == '{') { /* existing labels follow ours */
        rest++;
        rest_len--;
        const int empty = rest_len > 0 && *rest == '}';
        rc = evbuffer_add_printf(f->samples, "%.*s{model=\"%s\"%s%.*s\n", (int)nl, line, model, empty ? "" : ",",
                                 (int)rest_len, rest);
    } else {
        rc = evbuffer_add_printf(f->samples, "%.*s{model=\"%s\"}%.*s\n", (int)nl, line, model, (int)rest_len, rest);
    }
    return rc < 0 ? -1 : 0;
}

int rt_merge_add(rt_metrics_merge *mm, const char *model, const char *text, size_t len) {
    family *current = NULL;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t n = (size_t)((eol ? eol : end) - p);
        if (n > 0 && p[n - 1] == '\r') n--;
        int rc = 0;
        if (n > 0 && p[0] == '#') rc = add_comment(mm, p, n, &current);
        else if (n > 0) rc = add_sample(mm, model, p, n, &current);
        if (rc != 0) return -1;
        p = eol ? eol + 1 : end;
    }
    return 0;
}

char *rt_merge_render(const rt_metrics_merge *mm, const char *prefix, size_t *len) {
    struct evbuffer *out = evbuffer_new();
    if (!out) return NULL;
    evbuffer_add(out, prefix, strlen(prefix));
    for (int i = 0; i < mm->n; i++) {
        const family *f = &mm->fams[i];
        if (evbuffer_get_length(f->samples) == 0) continue;
        if (f->help) evbuffer_add_printf(out, "%s\n", f->help);
        if (f->type) evbuffer_add_printf(out, "%s\n", f->type);
        evbuffer_add_buffer_reference(out, f->samples);
    }
    const size_t n = evbuffer_get_length(out);
    char *text = malloc(n + 1);
    if (text) {
        evbuffer_remove(out, text, n);
        text[n] = 0;
        *len = n;
    }
    evbuffer_free(out);
    return text;
}
