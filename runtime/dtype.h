/* dtype.h — element types of weights and their block layouts.
 *
 * The quantized block layouts are byte-identical to GGUF's so that a GGUF
 * tensor is used in place (zero copy). A "row" of n elements of a block type
 * is n/32 consecutive blocks; n must be a multiple of 32.
 */
#ifndef INGOT_DTYPE_H
#define INGOT_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    INGOT_F32 = 0,
    INGOT_F16,
    INGOT_BF16,
    INGOT_Q8_0,  /* 32 elements: f16 scale d, int8 q[32];        x = d*q           */
    INGOT_Q4_0,  /* 32 elements: f16 scale d, 16 bytes of nibbles; x = d*(q-8)     */
    INGOT_Q4_1,  /* 32 elements: f16 scale d, f16 min m, nibbles;  x = d*q + m     */
    INGOT_DTYPE_COUNT
} ingot_dtype;

#define INGOT_QBLOCK 32 /* elements per quantized block */

/* Nibble order inside q4 blocks (as GGUF): byte j holds element j in its low
 * nibble and element j+16 in its high nibble. */
typedef struct { uint16_t d; int8_t qs[32]; } block_q8_0;             /* 34 bytes */
typedef struct { uint16_t d; uint8_t qs[16]; } block_q4_0;            /* 18 bytes */
typedef struct { uint16_t d; uint16_t m; uint8_t qs[16]; } block_q4_1; /* 20 bytes */

/* "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1" */
const char *dtype_name(ingot_dtype t);
/* Parses a name as above (case-insensitive); returns 0 on success, -1 if unknown. */
int dtype_from_name(const char *name, ingot_dtype *out);
/* Elements per block: 1 for float types, 32 for quantized ones. */
int dtype_block_elems(ingot_dtype t);
/* Bytes per block (per element for float types). */
size_t dtype_block_bytes(ingot_dtype t);
/* Bytes for a row of n elements; returns -1 if n is not a multiple of the
 * block size or the result would overflow size_t, else 0. */
int dtype_row_bytes(ingot_dtype t, int64_t n, size_t *out);

/* Scalar conversions (IEEE round-to-nearest-even for the narrowing ones). */
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

/* Converts n elements of type t at src to f32 at dst. */
void dtype_dequantize_row(ingot_dtype t, const void *src, float *dst, int64_t n);
/* Converts n f32 elements to type t (round to nearest; quantization follows
 * the reference rounding GGUF tools use). n must be a multiple of the block size. */
void dtype_quantize_row(ingot_dtype t, const float *src, void *dst, int64_t n);

#endif
