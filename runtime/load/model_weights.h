/* model_weights.h — a generated model's weight table, and the load every generated model shares
 * (mw_ prefix).
 *
 * The generator writes each model's table of weights (weight_spec: the tensor's name, shape,
 * slice, parts, the dtype its kernels were compiled for, the models.lua line); mw_load turns a
 * checkpoint into what those kernels read: every tensor found and checked, used in place where
 * the file holds it as the kernels want it, otherwise copied, converted or assembled from parts
 * and, for the CPU's interleaved kernels, rewritten 16 rows at a time (kernels/cpu/kc_x16*.h).
 * This is the same code for every model, so it lives in the library, compiled once, and not in
 * each model's source (where it cost about a second of every build). model_cast.h reads and
 * writes the same weights as a cast file.
 */
#ifndef INGOT_MODEL_WEIGHTS_H
#define INGOT_MODEL_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>
#include "dtype.h"
#include "weights.h"

/* One stored part of a weight the checkpoint splits (models.lua `gguf =
 * {heads = .., {NAME, rows = .., first = .., every = .., of = ..}, ..}`):
 * per head, `rows` of the `of` rows stored (row first, first + every, ...),
 * stored [heads][of][cols], or [heads][cols][of] when transposed; a vector
 * is a matrix of one column. */
#define MAX_WEIGHT_PARTS 4 /* generator/main.lua */
typedef struct {
    const char *name;
    int64_t rows;
    int transposed;
    int64_t first, every, of;
} weight_part;

/* A weight the description uses: stored name (and the name it is tied to,
 * when the checkpoint omits it), shape, the dtype the kernels were compiled
 * for, and the models.lua line that declared it. */
typedef struct {
    const char *name;
    const char *tied_to;
    int n_dims;
    int64_t shape[2];        /* of this weight; of the stored tensor when sliced: (stored_rows, shape[1]) */
    int64_t first_row, stored_rows; /* a row slice of the stored tensor (Phi-3's fused qkv_proj); 0, 0 if whole */
    int64_t stacked;         /* > 0: the stored tensor is [stacked][shape[0]][shape[1]], a layer's experts
                                (GGUF ffn_*_exps), and this weight is one expert's rows from first_row */
    int n_parts;             /* > 0: assembled at load from parts[], head by head (each head's rows of */
    int64_t part_heads;      /* every part in turn); part_heads 0: one block, parts stored 2-D */
    int64_t part_experts, part_expert; /* part_experts > 0: each part holds the layer's experts stacked
                                          ([experts][...]), this weight is expert part_expert's block */
    weight_part parts[MAX_WEIGHT_PARTS];
    ingot_dtype dtype;
    int same_as; /* index of an earlier entry naming the same tensor, rows and dtype, or -1 */
    int x16;     /* 1: rewritten at load into kernels/cpu/kc_x16.h's 16-row interleaved layout */
    int line;
} weight_spec;

/* A model's weight table, as its generated source declares it. */
typedef struct {
    const weight_spec *spec;
    int n;
    int allow_unused; /* built with --allow-unused: tensors no weight reads are reported, not refused */
    const char *arch; /* the models.lua entry, for the error that names an unused tensor */
    const struct lora_adapter *merge; /* NULL, or an adapter (lora.h) folded into the weights it updates */
} mw_table;

/* What a load made of a checkpoint's weights. w is the model's own array of n pointers. */
typedef struct {
    wt_file *file;
    const void **w;          /* [n]: kernel-ready weight data, in the table's order */
    unsigned char *wmem;     /* the weights copied or converted, one hugealloc.h buffer */
    size_t wmem_bytes;
    size_t weight_bytes;     /* what the kernels read, in all */
    char origin[192];        /* how the load got each weight: the model table's weight_origin */
    void *cast_map;          /* the mapped cast file of a load with --mmap (model_cast.h), else NULL */
    size_t cast_map_bytes;
} mw_weights;

/* Checks, copies, converts and interleaves every weight of the checkpoint out->file into
 * kernel-ready memory (out->w, out->wmem). in_place: weights stored as the kernels read them are
 * used from the file mapping, not copied. 0, or -1 with err filled (out->wmem may be set: release
 * with mw_release). */
int mw_load(const mw_table *t, mw_weights *out, int in_place, char *err, size_t errlen);

/* Frees what mw_load (or a cast file's load) allocated or mapped; the checkpoint stays open. */
void mw_release(mw_weights *w);

/* The bytes a weight takes as the kernels read it: its rows in its dtype, or its x16 tiles (what
 * the load lays out for it, and what a cast file holds for it). 0, or -1 for a row size the
 * dtype cannot store. */
int mw_weight_bytes(const weight_spec *s, size_t *bytes);

/* The bytes of every distinct weight in its compiled dtype, before any load (--info). */
size_t mw_planned_bytes(const mw_table *t);

#endif
