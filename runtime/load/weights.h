/* weights.h — one view over every checkpoint format (wt_ prefix).
 *
 * wt_open accepts: a .gguf file; a .safetensors file; a folder holding
 * model.safetensors or model.safetensors.index.json (sharded). Tensors are
 * presented in PyTorch order (outermost dimension first), so a GGUF tensor
 * with ne = {576, 1536} appears as shape {1536, 576}: 1536 rows of 576.
 * Data pointers point into read-only mappings (or, for the repacked linears
 * of a GPTQ/AWQ/FP8 checkpoint, memory of the wt_file) that live until wt_close.
 */
#ifndef INGOT_WEIGHTS_H
#define INGOT_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>
#include "dtype.h"
#include "gguf.h"

#define WT_MAX_DIMS 4

typedef enum { WT_FORMAT_GGUF, WT_FORMAT_SAFETENSORS } wt_format;

typedef struct {
    const char *name;
    ingot_dtype dtype;
    int n_dims;
    int64_t shape[WT_MAX_DIMS]; /* outermost first */
    const void *data;
    size_t nbytes;
    int repacked; /* data is the wt_file's own memory (a GPTQ/AWQ/FP8 linear repacked at open), not the
                     file mapping: a loader uses it in place rather than keep a second copy */
} wt_tensor;

typedef struct wt_file wt_file;

wt_file *wt_open(const char *path, char *err, size_t errlen);
void wt_close(wt_file *f);
wt_format wt_get_format(const wt_file *f);
size_t wt_count(const wt_file *f);
const wt_tensor *wt_at(const wt_file *f, size_t i);
const wt_tensor *wt_find(const wt_file *f, const char *name); /* NULL if absent */
const gguf_file *wt_gguf(const wt_file *f); /* NULL unless GGUF */
const char *wt_path(const wt_file *f);      /* the path given to wt_open */
/* "gptq", "awq" or "fp8" for a quantized safetensors checkpoint, whose
 * linears wt_open repacked (quant_ckpt.h) into `<prefix>.weight` tensors of
 * type q4_z, q8_z or f8_b32 (f32 for an act-order GPTQ whose groups
 * interleave); NULL otherwise. */
const char *wt_quant_method(const wt_file *f);

/* Checks that tensor `name` exists with this shape and one of the allowed
 * dtypes (mask of 1u << ingot_dtype). On failure writes e.g.
 *   "model.safetensors: tensor 'model.layers.0.self_attn.q_proj.weight': expected shape [64, 64], found [64, 32]"
 * and returns NULL. A declared vector of n also takes a tensor of any shape holding n values of an
 * element type (f32, f16, bf16), in order. */
const wt_tensor *wt_expect(const wt_file *f, const char *name, int n_dims, const int64_t *shape,
                           unsigned dtype_mask, char *err, size_t errlen);

/* The row length a declared vector of n reads from t: n for a tensor of any shape holding n
 * values of an element type (what wt_expect accepts for a vector), else t's last dimension. */
int64_t wt_vector_cols(const wt_tensor *t, int64_t n);

/* Checks that every f16 scale of a block-quantized tensor is finite (a NaN
 * or infinite scale would turn its whole block into NaN/inf and every
 * logit after it). Returns 0, or -1 with e.g.
 *   "m.gguf: tensor 'blk.0.ffn_down.weight': block 17 (row 2) has a non-finite scale"
 * Reads one header per block: every page of the tensor is touched. */
int wt_check_scales(const wt_file *f, const wt_tensor *t, char *err, size_t errlen);

/* Formats a shape as "[a, b]" into buf. */
const char *wt_shape_str(int n_dims, const int64_t *shape, char *buf, size_t cap);

#endif
