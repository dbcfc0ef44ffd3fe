/* lora.h — LoRA adapters mapped onto a model's weight table.
 *
 * An adapter holds, for some of a model's linears W [out][in], two small
 * matrices A [rank][in] and B [out][rank]; the adapted linear computes
 * W x + scale * B (A x). Two stored forms are read:
 *   - PEFT's: a directory with adapter_config.json (peft_type LORA, r,
 *     lora_alpha, use_rslora) and adapter_model.safetensors, whose tensors
 *     are `base_model.model.<module>.lora_A.weight` / `.lora_B.weight`; the
 *     base weight is `<module>.weight`, a checkpoint name of a model built
 *     from safetensors. scale = lora_alpha / r (lora_alpha / sqrt(r) with
 *     use_rslora).
 *   - llama.cpp's (convert_lora_to_gguf.py): a GGUF of general.type
 *     "adapter", adapter.type "lora", adapter.lora.alpha, tensors
 *     `<gguf weight name>.lora_a` [rank][in] and `.lora_b` [out][rank],
 *     for a model built from a GGUF (the converter already permuted B's
 *     rows as it permutes Q and K). scale = alpha / rank, or 1 when alpha is
 *     0, as llama.cpp takes it.
 * A weight stored as a row slice of a fused tensor (Phi-3's qkv_proj read as
 * q, k and v) takes its rows of B. An adapter is refused whole, with the
 * reason, when any of its tensors does not fit: a module the model does not
 * have, a weight the model cannot adapt (see lora_open's sites), a shape that
 * does not match, a configuration this reader does not implement (DoRA,
 * trained biases, modules_to_save, per-module alphas, fan_in_fan_out).
 * A and B are kept in f32, whatever the file stores (f16/bf16 values are exact in f32).
 */
#ifndef INGOT_LORA_H
#define INGOT_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "model_weights.h"

#define LORA_MAX_ADAPTERS 64 /* adapters one model serves (each a few percent of the weights' memory) */
#define LORA_MAX_RANK 256 /* larger ranks are refused: a low-rank update of more is a fine-tune of its own */

/* B^T is stored LORA_BLOCK output columns at a time, [out / LORA_BLOCK][rank][LORA_BLOCK] (the last
 * block padded with zeros): the step adds one block of outputs over every rank from one contiguous
 * run of memory, where [rank][out] would touch a page per rank (kernels/cpu/kc_lora.h). */
#define LORA_BLOCK 16

/* One weight's update. rank 0: the adapter leaves the weight as it is. */
typedef struct {
    int rank;
    float scale;
    int64_t in, out;
    float *a;  /* [rank][in] */
    float *bt; /* B transposed and blocked: B[o][j] is bt[lora_bt_index(d, o, j)] */
} lora_delta;

static inline size_t lora_bt_index(const lora_delta *d, int64_t o, int j) {
    return ((size_t)(o / LORA_BLOCK) * (size_t)d->rank + (size_t)j) * LORA_BLOCK + (size_t)(o % LORA_BLOCK);
}

typedef struct lora_adapter {
    char name[64];          /* what requests call it (the caller's: lora_open leaves it empty) */
    char path[512];
    int n_weights;          /* the model's weight table entries */
    lora_delta *delta;      /* [n_weights] */
    int n_adapted;          /* entries with rank > 0 */
    int max_rank;
    double alpha;
    float *mem;             /* every delta's A and B^T, one huge-page buffer (hugealloc.h) */
    size_t mem_bytes;
    char summary[256];      /* for --info and /v1/models: "rank 8, alpha 16, 14 of 30 linears (q, k, ...)" */
} lora_adapter;

/* Reads the adapter at path (a PEFT directory or its adapter_model.safetensors, or a GGUF) for
 * the model of table t, built from source_format ("safetensors" or "gguf"). sites: per table
 * entry, 1 where the model's step applies an adapter (a linear over the step's tokens), or NULL
 * when the adapter is to be merged into the weights at load (any whole or row-sliced matrix).
 * 0, or -1 with err filled and nothing kept. */
int lora_open(const char *path, const mw_table *t, const unsigned char *sites, const char *source_format,
              lora_adapter *out, char *err, size_t errlen);
void lora_free(lora_adapter *a);

/* Adds scale * B[row] A to one row of a weight's values (its `in` columns): a merge at load. */
void lora_merge_row(const lora_delta *d, int64_t row, float *values);

#endif
