/* dtype.c — element types: names, block sizes, fp16/bf16 conversion, row (de)quantization. */
#include "dtype.h"

#include <math.h>
#include <string.h>
#include <strings.h>

static const char *const dtype_names[INGOT_DTYPE_COUNT] = {
    [INGOT_F32] = "f32", [INGOT_F16] = "f16", [INGOT_BF16] = "bf16",
    [INGOT_Q8_0] = "q8_0", [INGOT_Q4_0] = "q4_0", [INGOT_Q4_1] = "q4_1",
};

/* Returns the lowercase name, or "?" for an out-of-range value. */
const char *dtype_name(ingot_dtype t) {
    return (unsigned)t < INGOT_DTYPE_COUNT ? dtype_names[t] : "?";
}

/* Case-insensitive inverse of dtype_name. */
int dtype_from_name(const char *name, ingot_dtype *out) {
    if (!name) return -1;
    for (int i = 0; i < INGOT_DTYPE_COUNT; i++) {
        if (strcasecmp(name, dtype_names[i]) == 0) {
            *out = (ingot_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* 32 for block-quantized types, 1 for plain floats (and unknown values). */
int dtype_block_elems(ingot_dtype t) {
    return (t == INGOT_Q8_0 || t == INGOT_Q4_0 || t == INGOT_Q4_1) ? INGOT_QBLOCK : 1;
}

/* Bytes per block; 0 for an unknown type so callers' size checks fail. */
size_t dtype_block_bytes(ingot_dtype t) {
    switch (t) {
    case INGOT_F32: return 4;
    case INGOT_F16: return 2;
    case INGOT_BF16: return 2;
    case INGOT_Q8_0: return sizeof(block_q8_0);
    case INGOT_Q4_0: return sizeof(block_q4_0);
    case INGOT_Q4_1: return sizeof(block_q4_1);
    default: return 0;
    }
}

/* Row size in bytes with overflow and block-multiple checks. */
int dtype_row_bytes(ingot_dtype t, int64_t n, size_t *out) {
    size_t bb = dtype_block_bytes(t);
    int be = dtype_block_elems(t);
    if (bb == 0 || n < 0 || n % be != 0) return -1;
    uint64_t blocks = (uint64_t)n / (uint64_t)be;
    if (blocks != 0 && bb > SIZE_MAX / blocks) return -1;
    *out = (size_t)(blocks * bb);
    return 0;
}

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Exact: every half is representable as a float. Subnormal halves are
 * renormalized by shifting the mantissa up to the implicit-bit position. */
float fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        if (mant == 0) return bits_f32(sign);
        uint32_t e = 113; /* exponent of 2^-14 in float bias, for mant bit 10 */
        while (!(mant & 0x400)) { mant <<= 1; e--; }
        return bits_f32(sign | (e << 23) | ((mant & 0x3ff) << 13));
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/* Round-to-nearest-even narrowing. NaN stays NaN (quieted, top payload bits
 * kept); values at or beyond 65520 (halfway past the largest half) become inf. */
uint16_t f32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) {
        /* Result is subnormal (or rounds up to the smallest normal): count in
         * units of 2^-24. At most 2^-25 rounds to zero (2^-25 itself is a tie to even 0). */
        if (ax <= 0x33000000u) return sign;
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t h = (ax >> 13) - (112u << 10);
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* carry may bump the exponent: still correct */
    return (uint16_t)(sign | h);
}

/* bf16 is the top half of a float: exact. */
float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* Round-to-nearest-even on the dropped 16 bits; NaN is quieted rather than
 * rounded so it can never turn into inf. */
uint16_t f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* Unaligned little-endian loads/stores: tensor data comes straight from a
 * file mapping, so block fields need not be aligned. */
static inline uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline void st16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

/* Float to int with clamping; NaN goes to lo. Avoids the undefined behaviour
 * of casting an out-of-range float. */
static inline int clamp_to_int(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* src is treated as raw bytes so it may be unaligned. */
void dtype_dequantize_row(ingot_dtype t, const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    switch (t) {
    case INGOT_F32:
        memcpy(dst, p, (size_t)n * 4);
        break;
    case INGOT_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_f32(ld16(p + 2 * i));
        break;
    case INGOT_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(ld16(p + 2 * i));
        break;
    case INGOT_Q8_0:
        for (int64_t b = 0; b < n / INGOT_QBLOCK; b++, p += sizeof(block_q8_0), dst += INGOT_QBLOCK) {
            float d = fp16_to_f32(ld16(p));
            for (int j = 0; j < INGOT_QBLOCK; j++) dst[j] = d * (float)(int8_t)p[2 + j];
        }
        break;
    case INGOT_Q4_0:
        for (int64_t b = 0; b < n / INGOT_QBLOCK; b++, p += sizeof(block_q4_0), dst += INGOT_QBLOCK) {
            float d = fp16_to_f32(ld16(p));
            for (int j = 0; j < 16; j++) {
                dst[j] = d * (float)((p[2 + j] & 0x0f) - 8);
                dst[j + 16] = d * (float)((p[2 + j] >> 4) - 8);
            }
        }
        break;
    case INGOT_Q4_1:
        for (int64_t b = 0; b < n / INGOT_QBLOCK; b++, p += sizeof(block_q4_1), dst += INGOT_QBLOCK) {
            float d = fp16_to_f32(ld16(p));
            float m = fp16_to_f32(ld16(p + 2));
            for (int j = 0; j < 16; j++) {
                dst[j] = d * (float)(p[4 + j] & 0x0f) + m;
                dst[j + 16] = d * (float)(p[4 + j] >> 4) + m;
            }
        }
        break;
    default:
        break;
    }
}

/* Quantizes one block per GGUF's reference: scale from the block's extreme
 * value(s), multiply by the reciprocal scale, then round (Q8_0, half away
 * from zero) or truncate after adding the offset (Q4). */
void dtype_quantize_row(ingot_dtype t, const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    switch (t) {
    case INGOT_F32:
        memcpy(p, src, (size_t)n * 4);
        break;
    case INGOT_F16:
        for (int64_t i = 0; i < n; i++) st16(p + 2 * i, f32_to_fp16(src[i]));
        break;
    case INGOT_BF16:
        for (int64_t i = 0; i < n; i++) st16(p + 2 * i, f32_to_bf16(src[i]));
        break;
    case INGOT_Q8_0:
        for (int64_t b = 0; b < n / INGOT_QBLOCK; b++, p += sizeof(block_q8_0), src += INGOT_QBLOCK) {
            float amax = 0.0f;
            for (int j = 0; j < INGOT_QBLOCK; j++) amax = fmaxf(amax, fabsf(src[j]));
            float d = amax / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            st16(p, f32_to_fp16(d));
            for (int j = 0; j < INGOT_QBLOCK; j++)
                p[2 + j] = (uint8_t)(int8_t)clamp_to_int(roundf(src[j] * id), -127, 127);
        }
        break;
    case INGOT_Q4_0:
        for (int64_t b = 0; b < n / INGOT_QBLOCK; b++, p += sizeof(block_q4_0), src += INGOT_QBLOCK) {
            float amax = 0.0f, max = 0.0f;
            for (int j = 0; j < INGOT_QBLOCK; j++) {
                if (amax < fabsf(src[j])) { amax = fabsf(src[j]); max = src[j]; }
            }
            float d = max / -8.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            st16(p, f32_to_fp16(d));
            for (int j = 0; j < 16; j++) {
                int q0 = clamp_to_int(src[j] * id + 8.5f, 0, 15);
                int q1 = clamp_to_int(src[j + 16] * id + 8.5f, 0, 15);
                p[2 + j] = (uint8_t)(q0 | (q1 << 4));
            }
        }
        break;
    case INGOT_Q4_1:
        for (int64_t b = 0; b < n / INGOT_QBLOCK; b++, p += sizeof(block_q4_1), src += INGOT_QBLOCK) {
            float min = src[0], max = src[0];
            for (int j = 1; j < INGOT_QBLOCK; j++) {
                if (src[j] < min) min = src[j];
                if (src[j] > max) max = src[j];
            }
            float d = (max - min) / 15.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            st16(p, f32_to_fp16(d));
            st16(p + 2, f32_to_fp16(min));
            for (int j = 0; j < 16; j++) {
                int q0 = clamp_to_int((src[j] - min) * id + 0.5f, 0, 15);
                int q1 = clamp_to_int((src[j + 16] - min) * id + 0.5f, 0, 15);
                p[4 + j] = (uint8_t)(q0 | (q1 << 4));
            }
        }
        break;
    default:
        break;
    }
}
