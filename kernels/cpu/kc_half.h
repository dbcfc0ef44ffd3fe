/* kc_half.h — inline fp16/bf16 -> f32 conversion for the CPU kernels (no dependency on dtype.c). */
#ifndef INGOT_KC_HALF_H
#define INGOT_KC_HALF_H

#include <stdint.h>
#include <string.h>
#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

static inline float kc_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE binary16 -> binary32 (exact). F16C does it in one instruction; the
 * portable path rebuilds the bit pattern: normals re-bias the exponent by
 * 127-15, subnormals are scaled by 2^-24 through a float multiply, and
 * inf/NaN keep their payload with an all-ones exponent. */
static inline float kc_fp16_to_f32(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
#elif defined(__aarch64__)
    __fp16 f; /* AArch64's half type is IEEE binary16: one fcvt */
    memcpy(&f, &h, sizeof f);
    return (float)f;
#else
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: man * 2^-24 */
        float v = (float)man * kc_bits_f32(0x33800000u);
        uint32_t u;
        memcpy(&u, &v, 4);
        return kc_bits_f32(u | sign);
    }
    if (exp == 31) return kc_bits_f32(sign | 0x7f800000u | (man << 13));
    return kc_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
#endif
}

/* binary32 -> binary16, rounded to nearest even (as numpy and F16C do):
 * overflow gives inf, NaN stays NaN. The portable path (float_to_half with
 * round-to-nearest-even by integer arithmetic): values below 2^-14 become
 * subnormals through a float addition that rounds them at 2^-24; normals are
 * re-biased and rounded by adding 0xfff plus the lowest kept bit. */
static inline uint16_t kc_f32_to_fp16(float f) {
#if defined(__F16C__)
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#elif defined(__aarch64__)
    const __fp16 v = (__fp16)f; /* fcvt, under the default rounding: nearest even */
    uint16_t h;
    memcpy(&h, &v, sizeof h);
    return h;
#else
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u); /* inf, NaN */
    if (ax >= 0x477ff000u) return sign | 0x7c00u;                                     /* >= 65520: inf */
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal half (or zero) */
        const float a = kc_bits_f32(ax) + 0.5f;
        uint32_t u;
        memcpy(&u, &a, 4);
        return sign | (uint16_t)(u - 0x3f000000u);
    }
    ax += 0xc8000fffu + ((ax >> 13) & 1u); /* exponent - 112, then round to nearest even */
    return sign | (uint16_t)(ax >> 13);
#endif
}

/* bf16 is the top half of an f32. */
static inline float kc_bf16_to_f32(uint16_t h) { return kc_bits_f32((uint32_t)h << 16); }

#endif
