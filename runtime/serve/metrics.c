/* metrics.c — Prometheus text exposition; see metrics.h. */
#include "metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text_buf.h"

#define MET_MAX_SERIES 64

typedef struct {
    char label_value[32];
    double value;
} met_series;

struct met_family {
    met_type type;
    const char *name, *help, *label;
    met_series series[MET_MAX_SERIES];
    int n_series;
    /* histogram */
    double *bounds;
    unsigned long long *counts; /* per bucket, not cumulative; [n_bounds + 1], last is +Inf */
    int n_bounds;
    double sum;
    unsigned long long count;
    met_family *next;
};

struct met_registry {
    met_family *first, *last;
};

met_registry *met_create(void) { return calloc(1, sizeof(met_registry)); }

void met_free(met_registry *r) {
    if (!r) return;
    for (met_family *f = r->first, *n; f; f = n) {
        n = f->next;
        free(f->bounds);
        free(f->counts);
        free(f);
    }
    free(r);
}

met_family *met_add(met_registry *r, met_type type, const char *name, const char *help, const char *label) {
    met_family *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->type = type;
    f->name = name;
    f->help = help;
    f->label = label;
    if (r->last) r->last->next = f;
    else r->first = f;
    r->last = f;
    return f;
}

met_family *met_add_histogram(met_registry *r, const char *name, const char *help, const double *bounds,
                              int n_bounds) {
    met_family *f = met_add(r, MET_HISTOGRAM, name, help, NULL);
    if (!f) return NULL;
    f->bounds = malloc(sizeof(double) * (size_t)(n_bounds > 0 ? n_bounds : 1));
    f->counts = calloc((size_t)n_bounds + 1, sizeof(unsigned long long));
    if (!f->bounds || !f->counts) return NULL; /* freed with the registry */
    memcpy(f->bounds, bounds, sizeof(double) * (size_t)n_bounds);
    f->n_bounds = n_bounds;
    return f;
}

/* The series for a label value; created on first use. Unlabeled families
 * have exactly one series. Beyond MET_MAX_SERIES values, updates go to the
 * last series rather than growing without bound (label values come from a
 * small fixed set anyway: status codes). */
static met_series *series_for(met_family *f, const char *lv) {
    if (!f) return NULL;
    if (!f->label || !lv) lv = "";
    for (int i = 0; i < f->n_series; i++)
        if (!strcmp(f->series[i].label_value, lv)) return &f->series[i];
    if (f->n_series == MET_MAX_SERIES) return &f->series[MET_MAX_SERIES - 1];
    met_series *s = &f->series[f->n_series++];
    snprintf(s->label_value, sizeof s->label_value, "%s", lv);
    s->value = 0;
    return s;
}

void met_inc(met_family *f, const char *lv, double by) {
    met_series *s = series_for(f, lv);
    if (s) s->value += by;
}

void met_set(met_family *f, const char *lv, double v) {
    met_series *s = series_for(f, lv);
    if (s) s->value = v;
}

double met_get(const met_family *f, const char *lv) {
    if (!f) return 0;
    if (!f->label || !lv) lv = "";
    for (int i = 0; i < f->n_series; i++)
        if (!strcmp(f->series[i].label_value, lv)) return f->series[i].value;
    return 0;
}

void met_observe(met_family *f, double v) {
    if (!f || f->type != MET_HISTOGRAM || !isfinite(v)) return;
    int b = 0;
    while (b < f->n_bounds && v > f->bounds[b]) b++;
    f->counts[b]++;
    f->sum += v;
    f->count++;
}

/* ---- rendering ----------------------------------------------------------- */

typedef text_buf met_buf;

/* Sample values: integers exactly, others with enough digits to round-trip. */
static void out_value(met_buf *b, double v) {
    if (isnan(v)) text_buf_printf(b, "NaN");
    else if (isinf(v)) text_buf_printf(b, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 1e15) text_buf_printf(b, "%.0f", v);
    else text_buf_printf(b, "%.17g", v);
}

/* HELP text escapes backslash and newline; label values also escape quotes. */
static void out_escaped(met_buf *b, const char *s, int quote) {
    for (; *s; s++) {
        if (*s == '\\') text_buf_printf(b, "\\\\");
        else if (*s == '\n') text_buf_printf(b, "\\n");
        else if (quote && *s == '"') text_buf_printf(b, "\\\"");
        else text_buf_printf(b, "%c", *s);
    }
}

char *met_render(const met_registry *r, size_t *len) {
    met_buf b = {0};
    text_buf_puts(&b, ""); /* "" when nothing is registered */
    static const char *type_names[] = {"counter", "gauge", "histogram"};
    for (const met_family *f = r->first; f; f = f->next) {
        text_buf_printf(&b, "# HELP %s ", f->name);
        out_escaped(&b, f->help, 0);
        text_buf_printf(&b, "\n# TYPE %s %s\n", f->name, type_names[f->type]);
        if (f->type == MET_HISTOGRAM) {
            unsigned long long cum = 0;
            for (int i = 0; i <= f->n_bounds; i++) {
                cum += f->counts[i];
                text_buf_printf(&b, "%s_bucket{le=\"", f->name);
                if (i < f->n_bounds) out_value(&b, f->bounds[i]);
                else text_buf_printf(&b, "+Inf");
                text_buf_printf(&b, "\"} %llu\n", cum);
            }
            text_buf_printf(&b, "%s_sum ", f->name);
            out_value(&b, f->sum);
            text_buf_printf(&b, "\n%s_count %llu\n", f->name, f->count);
            continue;
        }
        if (f->n_series == 0 && !f->label) { /* an unlabeled family always has its one sample */
            text_buf_printf(&b, "%s 0\n", f->name);
            continue;
        }
        for (int i = 0; i < f->n_series; i++) {
            const met_series *s = &f->series[i];
            if (f->label) {
                text_buf_printf(&b, "%s{%s=\"", f->name, f->label);
                out_escaped(&b, s->label_value, 1);
                text_buf_printf(&b, "\"} ");
            } else {
                text_buf_printf(&b, "%s ", f->name);
            }
            out_value(&b, s->value);
            text_buf_printf(&b, "\n");
        }
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (len) *len = b.len;
    return b.p;
}
