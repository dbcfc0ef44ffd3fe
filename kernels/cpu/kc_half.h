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

/* bf16 is the top half of an f32. */
static inline float kc_bf16_to_f32(uint16_t h) { return kc_bits_f32((uint32_t)h << 16); }

#endif
