/* kc_neon.h — the 64-bit ARM (AArch64 NEON) primitives the kernels share.
 *
 * Every AArch64 CPU has NEON (128-bit vectors of 4 floats or 16 bytes), so these need no test at
 * run time; the levels (build/flags.mk) differ in the integer dot products:
 *   armv8    Armv8-A: no dot-product instruction; kc_neon_dot4 widens (smull, then two pairwise
 *            adds), 4 instructions for 16 multiplies (Cortex-A53, A72);
 *   dotprod  Armv8.2-A + sdot: one instruction (Neoverse N1, Cortex-A76 and later, Apple M1);
 *   i8mm     Armv8.6-A (Neoverse V1/N2, Graviton 3, Apple M2): today the dotprod kernels compiled for
 *            it; smmla (a 2x8 by 8x2 int8 product) wants a layout of its own (kernels/cpu/README).
 * Each gives the same integers, so the same bits: the levels' logits are identical.
 */
#ifndef INGOT_KC_NEON_H
#define INGOT_KC_NEON_H

#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

/* acc[i] += sum over k < 4 of w[4i + k] * x[4i + k] (signed bytes), for each 32-bit lane i. Without
 * sdot: the 16 products in 16 bits (|w x| <= 128 * 127, two of them still fit), then pairs of
 * pairs into the lanes. */
static inline __attribute__((always_inline)) int32x4_t kc_neon_dot4(int32x4_t acc, int8x16_t w, int8x16_t x) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, w, x);
#else
    const int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(x)), hi = vmull_high_s8(w, x);
    return vpadalq_s16(acc, vpaddq_s16(lo, hi));
#endif
}

/* x's 32-bit lane `lane` (4 bytes) in every lane: the activations one code vector meets. The lane
 * must be a constant after inlining; the switch makes it one whatever the caller's loop. */
static inline __attribute__((always_inline)) int8x16_t kc_neon_dup4(int8x16_t x, int lane) {
    const int32x4_t v = vreinterpretq_s32_s8(x);
    switch (lane & 3) {
    case 0: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 0));
    case 1: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 1));
    case 2: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 2));
    default: return vreinterpretq_s8_s32(vdupq_laneq_s32(v, 3));
    }
}

/* kc_neon_dot4 against x's lane `lane` broadcast (sdot's indexed form where it exists). */
static inline __attribute__((always_inline)) int32x4_t kc_neon_dot4_lane(int32x4_t acc, int8x16_t w, int8x16_t x,
                                                                          int lane) {
#if defined(__ARM_FEATURE_DOTPROD)
    switch (lane & 3) {
    case 0: return vdotq_laneq_s32(acc, w, x, 0);
    case 1: return vdotq_laneq_s32(acc, w, x, 1);
    case 2: return vdotq_laneq_s32(acc, w, x, 2);
    default: return vdotq_laneq_s32(acc, w, x, 3);
    }
#else
    return kc_neon_dot4(acc, w, kc_neon_dup4(x, lane));
#endif
}

/* 4 IEEE halves at p (2-byte aligned, as every scale of a tile is: tiles have even sizes) as floats */
static inline __attribute__((always_inline)) float32x4_t kc_neon_f16x4(const void *p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p)));
}

/* 4 bytes at p widened to 32-bit lanes, unsigned or signed */
static inline __attribute__((always_inline)) int32x4_t kc_neon_u8x4(const void *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(v))))));
}
static inline __attribute__((always_inline)) int32x4_t kc_neon_i8x4(const void *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(v)))));
}

#endif
