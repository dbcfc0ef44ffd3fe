/* quantize.h — block quantizers for Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS (runtime-internal; dtype_quantize_row is the API). */
#ifndef INGOT_QUANTIZE_H
#define INGOT_QUANTIZE_H

#include <stdint.h>

/* One 32-element block, by GGUF's reference formulas (scale from the block's
 * extremes); out receives sizeof(block_q5_0) / sizeof(block_q5_1) bytes. */
void quant_q5_0_block(const float *x, uint8_t *out);
void quant_q5_1_block(const float *x, uint8_t *out);

/* One 256-element super-block. Each group's scale (and min) is chosen by a
 * search that minimizes the group's squared error (see quantize.c), then the
 * group scales are themselves quantized against the super-block scale and
 * the codes recomputed with the scales actually stored. */
void quant_q4_k_block(const float *x, uint8_t *out);
void quant_q5_k_block(const float *x, uint8_t *out);
void quant_q6_k_block(const float *x, uint8_t *out);

/* Q2_K and Q3_K (256 elements, groups of 16): each group's scale (Q2_K: and
 * min) fitted by a least-squares search (Q3_K's |x|-weighted), stored in 4
 * (Q2_K) or 6 (Q3_K) bits against the super-block's f16 scale, each group
 * taking the stored code next to its rounded one with the smallest error. */
void quant_q2_k_block(const float *x, uint8_t *out);
void quant_q3_k_block(const float *x, uint8_t *out);

/* IQ4_NL (32 elements) and IQ4_XS (256): each group of 32 takes the scale
 * that minimizes its x^2-weighted squared error over codes into the
 * non-linear table (a search over trial scales, see quantize.c); IQ4_XS then
 * stores the group scales as 6-bit multiples of one super-block scale. */
void quant_iq4_nl_block(const float *x, uint8_t *out);
void quant_iq4_xs_block(const float *x, uint8_t *out);

#endif
