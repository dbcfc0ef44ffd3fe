/* dtype.h — element types of weights and their block layouts.
 *
 * The quantized block layouts are byte-identical to GGUF's so that a GGUF
 * tensor is used in place (zero copy). A "row" of n elements of a block type
 * is n/B consecutive blocks, B = dtype_block_elems (32, or 256 for the
 * K-quants and IQ4_XS); n must be a multiple of B.
 */
#ifndef INGOT_DTYPE_H
#define INGOT_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* INGOT_F32, INGOT_F16, ...: one per row of dtype_table.h, in its order (what each block holds:
 * the table's comments and the layouts below). */
typedef enum {
#define INGOT_DTYPE(E, name, elems, bytes, ggml, ctype, role) INGOT_##E,
#include "dtype_table.h"
    INGOT_DTYPE_COUNT
} ingot_dtype;

#define INGOT_QBLOCK 32  /* elements per 32-block (Q8_0 .. Q5_1, IQ4_NL, MXFP4) */
#define INGOT_KBLOCK 256 /* elements per super-block (K-quants, IQ4_XS) */

/* Nibble order inside q4 blocks (as GGUF): byte j holds element j in its low
 * nibble and element j+16 in its high nibble. */
typedef struct { uint16_t d; int8_t qs[32]; } block_q8_0;             /* 34 bytes */
typedef struct { uint16_t d; uint8_t qs[16]; } block_q4_0;            /* 18 bytes */
typedef struct { uint16_t d; uint16_t m; uint8_t qs[16]; } block_q4_1; /* 20 bytes */

/* Q5: nibbles as in Q4; bit j of the little-endian 32-bit qh is bit 4 of element j. */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } block_q5_0;             /* 22 bytes */
typedef struct { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[16]; } block_q5_1; /* 24 bytes */
/* IQ4_NL: nibbles as in Q4_0, each an index into dtype_iq4_values; x = d*value. */
typedef struct { uint16_t d; uint8_t qs[16]; } block_iq4_nl;                          /* 18 bytes */

/* Zero-point blocks (GPTQ, AWQ): z is 0..16 (Q4_Z) or 0..256 (Q8_Z), the
 * checkpoint's zero point after its format's convention; Q4_Z's nibbles are
 * ordered as Q4_0's, Q8_Z's bytes are the unsigned codes in order. F8_B32:
 * the scale is the checkpoint's (per tensor or per 128x128 block) as f32,
 * the codes its E4M3 bytes in order. */
typedef struct { uint16_t d; uint16_t z; uint8_t qs[16]; } block_q4_z; /* 20 bytes */
typedef struct { uint16_t d; uint16_t z; uint8_t qs[32]; } block_q8_z; /* 36 bytes */
typedef struct { float d; uint8_t qs[32]; } block_f8_b32;              /* 36 bytes */

/* An E4M3 (float8_e4m3fn) byte as f32, exactly; 0x7f and 0xff are NaN. */
float fp8_e4m3_to_f32(uint8_t b);

/* Super-blocks of 256 (GGUF's QK_K). Element e = 32*g + l of a super-block
 * (g = 0..7 its group of 32, l = 0..31) is stored as:
 *   Q2_K  q = (qs[32*(g/4) + l] >> 2*(g%4)) & 3; group of 16 e/16 has the byte
 *         scales[e/16]: x = d*(sc & 15)*q - dmin*(sc >> 4)
 *   Q3_K  q = ((qs[..] as Q2_K) | ((hmask[l] >> g) & 1) << 2) - 4; 16 6-bit
 *         scales s (low 4 bits in scales[0..7], nibble e/16/8 of byte (e/16)%8;
 *         high 2 bits: (scales[8 + (e/16)%4] >> 2*((e/16)/4)) & 3): x = d*(s-32)*q
 *   Q4_K  q = (qs[32*(g/2) + l] >> 4*(g%2)) & 15; 6-bit scale and min of group
 *         g packed in scales[12] (see dtype.c): x = d*sc*q - dmin*m
 *   Q5_K  q = Q4_K's nibble | ((qh[l] >> g) & 1) << 4; x = d*sc*q - dmin*m
 *   Q6_K  q = (((ql[64*(g/4) + 32*(g%2) + l] >> 4*((g%4)/2)) & 15)
 *             | ((qh[32*(g/4) + l] >> 2*(g%4)) & 3) << 4) - 32; x = d*scales[e/16]*q
 *   IQ4_XS group g: bytes qs[16g .. 16g+15], low nibbles elements 0..15, high
 *         nibbles 16..31; 6-bit scale s = (scales_l[g/2] >> 4*(g%2) & 15) |
 *         ((scales_h >> 2g) & 3) << 4: x = d*(s-32)*dtype_iq4_values[q] */
typedef struct { uint8_t scales[16]; uint8_t qs[64]; uint16_t d; uint16_t dmin; } block_q2_K;          /* 84 */
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; } block_q3_K;     /* 110 */
typedef struct { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qs[128]; } block_q4_K;        /* 144 */
typedef struct { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } block_q5_K; /* 176 */
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } block_q6_K;        /* 210 */
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; } block_iq4_xs;  /* 136 */

/* The 16 values an IQ4 index selects (GGUF's kvalues_iq4nl). */
extern const int8_t dtype_iq4_values[16];

/* MXFP4: nibbles as in Q4_0, each an E2M1 code; the scale byte e is a power of two, 2^(e-127), and
 * the table holds twice the E2M1 values (GGUF's kvalues_mxfp4), so x = 2^(e-128) * value. e = 255
 * is the format's NaN. */
typedef struct { uint8_t e; uint8_t qs[16]; } block_mxfp4; /* 17 bytes */
extern const int8_t dtype_mxfp4_values[16];
/* 2^(e-128) as f32, exactly (e 0 and 1 give the subnormals 2^-128 and 2^-127). */
static inline float dtype_e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The 6-bit scale and min of group g (0..7) of a Q4_K/Q5_K super-block. */
static inline void dtype_k4_scale_min(const uint8_t *scales, int g, int *sc, int *m) {
    if (g < 4) {
        *sc = scales[g] & 63;
        *m = scales[g + 4] & 63;
    } else {
        *sc = (scales[g + 4] & 15) | ((scales[g - 4] >> 6) << 4);
        *m = (scales[g + 4] >> 4) | ((scales[g] >> 6) << 4);
    }
}

/* "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k",
 * "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "i32", "f8_e4m3", "q4_z", "q8_z", "f8_b32", "mxfp4" */
const char *dtype_name(ingot_dtype t);
/* Parses a name as above (case-insensitive); returns 0 on success, -1 if unknown. */
int dtype_from_name(const char *name, ingot_dtype *out);
/* Elements per block: 1 for float types, 32 or 256 for quantized ones. */
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
/* Converts n f32 elements to type t (round to nearest; Q8_0/Q4_0/Q4_1 follow
 * the reference rounding GGUF tools use, the others quantize.c's error-minimizing
 * search). n must be a multiple of the block size. Returns 0, -1 for a type
 * with no quantizer (the raw I32/F8 elements and the checkpoint-only Q4_Z,
 * Q8_Z, F8_B32), or -2 when a block type is asked for and src holds a NaN or
 * an infinity. */
int dtype_quantize_row(ingot_dtype t, const float *src, void *dst, int64_t n);
/* Whether dtype_quantize_row can produce type t. */
int dtype_can_quantize(ingot_dtype t);

/* Checks the f16 scales (d, and m/dmin where the type has one) of the n
 * elements at src: returns 0 if all are finite, else -1 with *bad_block set
 * to the index of the first block holding a NaN or infinite scale. Float
 * types always pass (their values are data, not scales). */
int dtype_check_scales(ingot_dtype t, const void *src, int64_t n, int64_t *bad_block);

#endif
