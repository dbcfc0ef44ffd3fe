/* metrics.h — Prometheus text exposition (met_ prefix).
 *
 * A registry of metric families, each a counter, gauge or histogram with at
 * most one label (e.g. code="200"). Every update and the rendering happen on
 * the server's event-loop thread, so nothing here locks. met_render writes
 * the text format version 0.0.4: one HELP and one TYPE line per family, then
 * its samples; histograms as cumulative _bucket{le="..."} series ending in
 * le="+Inf", plus _sum and _count.
 */
#ifndef INGOT_METRICS_H
#define INGOT_METRICS_H

#include <stddef.h>

typedef enum { MET_COUNTER, MET_GAUGE, MET_HISTOGRAM } met_type;

typedef struct met_registry met_registry;
typedef struct met_family met_family;

met_registry *met_create(void);
void met_free(met_registry *r);

/* Registers a family. name must be a valid metric name; label is the one label
 * key its samples carry (NULL: none). Histograms take ascending upper bounds
 * (+Inf is implicit). The strings must outlive the registry. NULL on OOM. */
met_family *met_add(met_registry *r, met_type type, const char *name, const char *help, const char *label);
met_family *met_add_histogram(met_registry *r, const char *name, const char *help, const double *bounds,
                              int n_bounds);

/* label_value: the value of the family's label (NULL for unlabeled families).
 * A new label value creates its series on first use (at most 64 per family). */
void met_inc(met_family *f, const char *label_value, double by); /* counters and gauges */
void met_set(met_family *f, const char *label_value, double v);  /* gauges (and counters mirrored from elsewhere) */
void met_observe(met_family *f, double v);                       /* histograms */
double met_get(const met_family *f, const char *label_value);    /* current value (0 if none) */

/* The exposition text, malloc'd and NUL-terminated; *len gets its length. */
char *met_render(const met_registry *r, size_t *len);

#endif
