/* quant_ckpt.h — GPTQ, AWQ and FP8 safetensors checkpoints, repacked at load (qc_ prefix).
 *
 * A checkpoint whose config.json has a `quantization_config` stores each
 * quantized linear as parts: GPTQ and AWQ as `qweight`/`qzeros` (int32
 * words of packed codes) and `scales` (f16) per group of inputs (GPTQ also
 * `g_idx`, the group of each input); FP8 as a float8_e4m3fn `weight` with a
 * `weight_scale` per tensor or a `weight_scale_inv` per 128x128 block.
 * qc_repack turns each linear's parts into one tensor `<prefix>.weight`
 * [out, in] of an ingot block type that holds exactly the same weights:
 *
 *   GPTQ/AWQ 4-bit -> Q4_Z, 8-bit -> Q8_Z: per 32 inputs of a row the
 *     group's f16 scale d and integer zero z (x = d*(q - z), z after the
 *     format's convention: classic GPTQ stores z - 1, gptq_v2 and AWQ z);
 *   FP8 -> F8_B32: per 32 inputs the f32 scale of their 128x128 block (or
 *     of the tensor) and the E4M3 codes (x = scale*e4m3(q)).
 *
 * A GPTQ checkpoint with act-order (desc_act) whose g_idx mixes groups
 * within 32 consecutive inputs has its inputs reordered by group (a stable
 * sort): the block tensor holds W[:, perm] and a second tensor
 * `<prefix>.weight.perm` (i32 [in]) holds perm; the matmul reads activation
 * perm[k] for weight column k (the generator gathers the activations once
 * per matmul). When even sorted a block of 32 would straddle two groups (a
 * group size that is not a multiple of 32), the weights are dequantized
 * once to f32 instead (d*(q - z) is exact in f32), the same values, four to
 * eight times the memory.
 *
 * Every shape, packed width, group index, zero, scale and code is checked
 * against the configuration; an error names the tensor and the value.
 */
#ifndef INGOT_QUANT_CKPT_H
#define INGOT_QUANT_CKPT_H

#include <stddef.h>

#include "weights.h"

/* Memory the result owns: a chunk the repacked weights are carved from
 * (huge pages: the model loader uses them in place, and decode streams
 * every weight each token), or a name. */
typedef struct {
    void *p;
    size_t bytes; /* > 0: a chunk of ha_alloc; 0: malloc'd */
} qc_block;

/* The result of repacking: the new tensor list and the memory behind the
 * repacked tensors and their names (qc_free releases it). */
typedef struct {
    wt_tensor *tensors; /* the checkpoint's other tensors, then the repacked ones */
    size_t n;
    qc_block *owned;
    size_t n_owned;
    unsigned char *chunk;         /* the chunk weights are carved from now */
    size_t chunk_used, chunk_cap; /* of that chunk */
    const char *method; /* "gptq", "awq", "fp8"; NULL when the checkpoint is not quantized */
} qc_result;

/* Reads config_path's quantization_config (a missing file or key: not
 * quantized, *out is the input list unchanged with method NULL) and repacks
 * the quantized linears among the n tensors of `in` (names and data of `in`
 * are borrowed, and stay the reader's). Returns 0, or -1 with one line in err
 * naming the tensor or key. Without a quantization_config, an int32 or
 * float8 tensor is an error (it means a quantized checkpoint without its
 * configuration). */
int qc_repack(const char *label, const char *config_path, const wt_tensor *in, size_t n, qc_result *out, char *err,
              size_t errlen);
void qc_free(qc_result *r);

#endif
