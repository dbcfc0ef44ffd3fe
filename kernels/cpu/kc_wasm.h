/* kc_wasm.h — the WebAssembly SIMD128 primitives the kernels share (./ingot build --target wasm32).
 *
 * SIMD128 is WebAssembly's one vector level: 128-bit vectors of 4 floats, 8 int16 or 16 bytes, in
 * every browser since 2021, so these need no test at run time. It has no byte dot product (that is
 * the relaxed-SIMD proposal's, not every browser's), no fused multiply-add and no half-precision
 * conversion; what it has is i32x4.dot_i16x8_s, which multiplies 8 int16 pairs and adds each
 * adjacent two into a 32-bit lane. So the integer kernels widen a 16-byte vector of codes (4 codes of
 * each of 4 rows, the x16 layout's quarter) to two int16 vectors (rows 0-1 and 2-3) and multiply them
 * by the token's 4 digits widened and repeated twice: each 32-bit lane holds half of a row's 4
 * products. A block's products stay in that form until its end, where one pair of shuffles and an
 * add turns them into the 4 rows' sums (kc_wasm_row_sums): the horizontal step is once per block,
 * not once per code vector. Every product and sum is an exact integer, so the logits match the
 * portable C path's integers. */
#ifndef INGOT_KC_WASM_H
#define INGOT_KC_WASM_H

#include <stdint.h>
#include <string.h>
#include <wasm_simd128.h>

/* The 4 signed bytes at p as int16 lanes x0 x1 x2 x3 x0 x1 x2 x3: a token's digits for one code
 * vector, against the two rows each half of a widened quarter holds. */
static inline __attribute__((always_inline)) v128_t kc_wasm_digits4(const int8_t *p) {
    return wasm_i16x8_extend_low_i8x16(wasm_v128_load32_splat(p));
}

/* The rows' sums of a quarter: lo holds rows 0 and 1 as pairs of 32-bit halves
 * (r0a r0b r1a r1b), hi rows 2 and 3; the result is r0 r1 r2 r3. */
static inline __attribute__((always_inline)) v128_t kc_wasm_row_sums(v128_t lo, v128_t hi) {
    return wasm_i32x4_add(wasm_i32x4_shuffle(lo, hi, 0, 2, 4, 6), wasm_i32x4_shuffle(lo, hi, 1, 3, 5, 7));
}

/* acc[i] += sum over k < 4 of w[4i + k] * x[4i + k] (signed bytes) for each 32-bit lane i, as NEON's
 * sdot or x86's vpdpbusd with signed bytes: the 16 products in 16 bits (|w x| <= 128 * 128 fits
 * with its sign), adjacent pairs into 32 bits, then pairs of pairs (a shuffle each way and an add).
 * The K-quant bodies' dot product (kc_x16k.h), where a row's 4 codes must meet in one lane. */
static inline __attribute__((always_inline)) v128_t kc_wasm_dot4(v128_t acc, v128_t w, v128_t x) {
    const v128_t lo = wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_extmul_low_i8x16(w, x));
    const v128_t hi = wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_extmul_high_i8x16(w, x));
    return wasm_i32x4_add(acc, kc_wasm_row_sums(lo, hi));
}

/* 4 IEEE halves at p as floats, exactly as kc_fp16_to_f32 gives them: the half's exponent and
 * mantissa moved up into a float's (<< 13) and scaled by 2^112, which rebiases the exponent and
 * normalizes a subnormal in one exact multiply; infinities and NaNs keep an all-ones exponent. */
static inline __attribute__((always_inline)) v128_t kc_wasm_f16x4(const void *p) {
    const v128_t h = wasm_u32x4_extend_low_u16x8(wasm_v128_load64_zero(p));
    const v128_t mag = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x7fff)), 13);
    const v128_t sign = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x8000)), 16);
    v128_t f = wasm_f32x4_mul(mag, wasm_f32x4_splat(0x1p112f));
    const v128_t special = wasm_i32x4_eq(wasm_v128_and(h, wasm_i32x4_splat(0x7c00)), wasm_i32x4_splat(0x7c00));
    f = wasm_v128_bitselect(wasm_v128_or(mag, wasm_i32x4_splat(0x7f800000)), f, special);
    return wasm_v128_or(f, sign);
}

/* The 4 bytes at p widened to 32-bit lanes, unsigned or signed */
static inline __attribute__((always_inline)) v128_t kc_wasm_u8x4(const void *p) {
    return wasm_u32x4_extend_low_u16x8(wasm_u16x8_extend_low_u8x16(wasm_v128_load32_zero(p)));
}
static inline __attribute__((always_inline)) v128_t kc_wasm_i8x4(const void *p) {
    return wasm_i32x4_extend_low_i16x8(wasm_i16x8_extend_low_i8x16(wasm_v128_load32_zero(p)));
}

/* The sum of a vector's 4 floats, (a0 + a2) + (a1 + a3). */
static inline __attribute__((always_inline)) float kc_wasm_sum4(v128_t a) {
    const v128_t s = wasm_f32x4_add(a, wasm_i32x4_shuffle(a, a, 2, 3, 0, 1));
    return wasm_f32x4_extract_lane(s, 0) + wasm_f32x4_extract_lane(s, 1);
}

#endif
