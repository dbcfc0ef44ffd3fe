/* dtype.c — element types: names, block sizes, fp16/bf16 conversion, row (de)quantization. */
#include "dtype.h"
#include "quantize.h"

#include <math.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

static const char *const dtype_names[INGOT_DTYPE_COUNT] = {
#define INGOT_DTYPE(E, name, elems, bytes, ggml, ctype, role) [INGOT_##E] = #name,
#include "dtype_table.h"
};
static const int dtype_elems[INGOT_DTYPE_COUNT] = {
#define INGOT_DTYPE(E, name, elems, bytes, ggml, ctype, role) [INGOT_##E] = elems,
#include "dtype_table.h"
};
static const size_t dtype_bytes[INGOT_DTYPE_COUNT] = {
#define INGOT_DTYPE(E, name, elems, bytes, ggml, ctype, role) [INGOT_##E] = bytes,
#include "dtype_table.h"
};
/* The table's block bytes are the block structs' sizes (the layouts are GGUF's: dtype.h). */
#define INGOT_DTYPE(E, name, elems, bytes, ggml, ctype, role) \
    _Static_assert(sizeof(ctype) == (bytes), #name ": dtype_table.h's block bytes are not sizeof(" #ctype ")");
#include "dtype_table.h"


const int8_t dtype_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t dtype_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

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

/* 32 or 256 for block-quantized types, 1 for plain floats (and unknown values). */
int dtype_block_elems(ingot_dtype t) { return (unsigned)t < INGOT_DTYPE_COUNT ? dtype_elems[t] : 1; }

/* Bytes per block; 0 for an unknown type so callers' size checks fail. */
size_t dtype_block_bytes(ingot_dtype t) { return (unsigned)t < INGOT_DTYPE_COUNT ? dtype_bytes[t] : 0; }

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

static inline uint32_t ld32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Q5_0, Q5_1 and IQ4_NL: one 32-element block at p (raw bytes). The
 * arithmetic is GGUF's reference, in the same order: d*(q-16), d*q + m,
 * d*value. */
static void dequant_block32(ingot_dtype t, const uint8_t *p, float *y) {
    const float d = fp16_to_f32(ld16(p));
    if (t == INGOT_IQ4_NL) {
        const uint8_t *qs = p + offsetof(block_iq4_nl, qs);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)dtype_iq4_values[qs[j] & 15];
            y[j + 16] = d * (float)dtype_iq4_values[qs[j] >> 4];
        }
        return;
    }
    const int one = t == INGOT_Q5_1;
    const float m = one ? fp16_to_f32(ld16(p + offsetof(block_q5_1, m))) : 0.0f;
    const uint32_t qh = ld32(p + (one ? offsetof(block_q5_1, qh) : offsetof(block_q5_0, qh)));
    const uint8_t *qs = p + (one ? offsetof(block_q5_1, qs) : offsetof(block_q5_0, qs));
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
        int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        if (one) {
            y[j] = d * (float)lo + m;
            y[j + 16] = d * (float)hi + m;
        } else {
            y[j] = d * (float)(lo - 16);
            y[j + 16] = d * (float)(hi - 16);
        }
    }
}

/* One 256-element super-block at p (layouts in dtype.h). Each group's scale
 * is formed first (d*sc in f32, exact: an 11-bit by at most 8-bit product),
 * then multiplied by the code and the min subtracted, as GGUF's reference does. */
static void dequant_superblock(ingot_dtype t, const uint8_t *p, float *y) {
    switch (t) {
    case INGOT_Q2_K: {
        const uint8_t *sc = p + offsetof(block_q2_K, scales), *qs = p + offsetof(block_q2_K, qs);
        const float d = fp16_to_f32(ld16(p + offsetof(block_q2_K, d)));
        const float dmin = fp16_to_f32(ld16(p + offsetof(block_q2_K, dmin)));
        for (int e = 0; e < INGOT_KBLOCK; e++) {
            const int g = e / 32, l = e % 32;
            const int q = (qs[32 * (g / 4) + l] >> (2 * (g % 4))) & 3;
            const float dl = d * (float)(sc[e / 16] & 15), ml = dmin * (float)(sc[e / 16] >> 4);
            y[e] = dl * (float)q - ml;
        }
        break;
    }
    case INGOT_Q3_K: {
        const uint8_t *hm = p + offsetof(block_q3_K, hmask), *qs = p + offsetof(block_q3_K, qs);
        const uint8_t *sc = p + offsetof(block_q3_K, scales);
        const float d = fp16_to_f32(ld16(p + offsetof(block_q3_K, d)));
        for (int e = 0; e < INGOT_KBLOCK; e++) {
            const int g = e / 32, l = e % 32, i = e / 16;
            const int s = ((sc[i % 8] >> (4 * (i / 8))) & 15) | ((sc[8 + i % 4] >> (2 * (i / 4))) & 3) << 4;
            const int q = (((qs[32 * (g / 4) + l] >> (2 * (g % 4))) & 3) | ((hm[l] >> g) & 1) << 2) - 4;
            const float dl = d * (float)(s - 32);
            y[e] = dl * (float)q;
        }
        break;
    }
    case INGOT_Q4_K: case INGOT_Q5_K: {
        const int five = t == INGOT_Q5_K;
        const uint8_t *sc = p + (five ? offsetof(block_q5_K, scales) : offsetof(block_q4_K, scales));
        const uint8_t *qs = p + (five ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs));
        const uint8_t *qh = p + offsetof(block_q5_K, qh);
        const float d = fp16_to_f32(ld16(p)), dmin = fp16_to_f32(ld16(p + 2));
        for (int g = 0; g < 8; g++) {
            int s, m;
            dtype_k4_scale_min(sc, g, &s, &m);
            const float d1 = d * (float)s, m1 = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int q = (qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 15;
                if (five) q |= ((qh[l] >> g) & 1) << 4;
                y[32 * g + l] = d1 * (float)q - m1;
            }
        }
        break;
    }
    case INGOT_Q6_K: {
        const uint8_t *ql = p + offsetof(block_q6_K, ql), *qh = p + offsetof(block_q6_K, qh);
        const int8_t *sc = (const int8_t *)(p + offsetof(block_q6_K, scales));
        const float d = fp16_to_f32(ld16(p + offsetof(block_q6_K, d)));
        for (int e = 0; e < INGOT_KBLOCK; e++) {
            const int g = e / 32, l = e % 32;
            const int lo = (ql[64 * (g / 4) + 32 * (g % 2) + l] >> (4 * ((g % 4) / 2))) & 15;
            const int hi = (qh[32 * (g / 4) + l] >> (2 * (g % 4))) & 3;
            const float dl = d * (float)sc[e / 16];
            y[e] = dl * (float)((lo | hi << 4) - 32);
        }
        break;
    }
    case INGOT_IQ4_XS: {
        const float d = fp16_to_f32(ld16(p + offsetof(block_iq4_xs, d)));
        const unsigned sh = ld16(p + offsetof(block_iq4_xs, scales_h));
        const uint8_t *sl = p + offsetof(block_iq4_xs, scales_l), *qs = p + offsetof(block_iq4_xs, qs);
        for (int g = 0; g < 8; g++) {
            const int s = ((sl[g / 2] >> (4 * (g % 2))) & 15) | (int)((sh >> (2 * g)) & 3) << 4;
            const float dl = d * (float)(s - 32);
            for (int j = 0; j < 16; j++) {
                y[32 * g + j] = dl * (float)dtype_iq4_values[qs[16 * g + j] & 15];
                y[32 * g + j + 16] = dl * (float)dtype_iq4_values[qs[16 * g + j] >> 4];
            }
        }
        break;
    }
    default:
        break;
    }
}

/* E4M3 has the layout of an f16 with 4 exponent bits (bias 7) and 3
 * mantissa bits: shifted into an f16 (bias 15) it is the value times 2^-8,
 * normals and subnormals alike, and both conversions are exact. */
float fp8_e4m3_to_f32(uint8_t b) {
    if ((b & 0x7f) == 0x7f) return NAN;
    return fp16_to_f32((uint16_t)((b & 0x80) << 8 | (b & 0x7f) << 7)) * 256.0f;
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
    case INGOT_Q5_0: case INGOT_Q5_1: case INGOT_IQ4_NL:
        for (int64_t b = 0; b < n / INGOT_QBLOCK; b++, p += dtype_block_bytes(t), dst += INGOT_QBLOCK)
            dequant_block32(t, p, dst);
        break;
    case INGOT_Q2_K: case INGOT_Q3_K: case INGOT_Q4_K: case INGOT_Q5_K: case INGOT_Q6_K: case INGOT_IQ4_XS:
        for (int64_t b = 0; b < n / INGOT_KBLOCK; b++, p += dtype_block_bytes(t), dst += INGOT_KBLOCK)
            dequant_superblock(t, p, dst);
        break;
    case INGOT_F8_E4M3:
        for (int64_t i = 0; i < n; i++) dst[i] = fp8_e4m3_to_f32(p[i]);
        break;
    case INGOT_I32:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int32_t)ld32(p + 4 * i);
        break;
    case INGOT_Q4_Z: /* d*(q-z): q-z is a small integer and d an f16, so the product is exact */
        for (int64_t b = 0; b < n / INGOT_QBLOCK; b++, p += sizeof(block_q4_z), dst += INGOT_QBLOCK) {
            const float d = fp16_to_f32(ld16(p));
            const int z = ld16(p + 2);
            for (int j = 0; j < 16; j++) {
                dst[j] = d * (float)((p[4 + j] & 0x0f) - z);
                dst[j + 16] = d * (float)((p[4 + j] >> 4) - z);
            }
        }
        break;
    case INGOT_Q8_Z:
        for (int64_t b = 0; b < n / INGOT_QBLOCK; b++, p += sizeof(block_q8_z), dst += INGOT_QBLOCK) {
            const float d = fp16_to_f32(ld16(p));
            const int z = ld16(p + 2);
            for (int j = 0; j < 32; j++) dst[j] = d * (float)(p[4 + j] - z);
        }
        break;
    case INGOT_F8_B32:
        for (int64_t b = 0; b < n / INGOT_QBLOCK; b++, p += sizeof(block_f8_b32), dst += INGOT_QBLOCK) {
            float d;
            memcpy(&d, p, 4);
            for (int j = 0; j < 32; j++) dst[j] = d * fp8_e4m3_to_f32(p[4 + j]);
        }
        break;
    case INGOT_MXFP4: /* GGUF's reference: value * 2^(e-128), exact */
        for (int64_t b = 0; b < n / INGOT_QBLOCK; b++, p += sizeof(block_mxfp4), dst += INGOT_QBLOCK) {
            const float d = dtype_e8m0_half(p[0]);
            for (int j = 0; j < 16; j++) {
                dst[j] = (float)dtype_mxfp4_values[p[1 + j] & 15] * d;
                dst[j + 16] = (float)dtype_mxfp4_values[p[1 + j] >> 4] * d;
            }
        }
        break;
    default:
        break;
    }
}

/* Q8_0/Q4_0/Q4_1 per GGUF's reference: scale from the block's extreme
 * value(s), multiply by the reciprocal scale, then round (Q8_0, half away
 * from zero) or truncate after adding the offset (Q4); the other block types
 * through quantize.c. */
int dtype_quantize_row(ingot_dtype t, const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    void (*block)(const float *, uint8_t *) = NULL; /* the types of quantize.c */
    switch (t) {
    case INGOT_Q5_0: block = quant_q5_0_block; break;
    case INGOT_Q2_K: block = quant_q2_k_block; break;
    case INGOT_Q3_K: block = quant_q3_k_block; break;
    case INGOT_Q5_1: block = quant_q5_1_block; break;
    case INGOT_Q4_K: block = quant_q4_k_block; break;
    case INGOT_Q5_K: block = quant_q5_k_block; break;
    case INGOT_Q6_K: block = quant_q6_k_block; break;
    case INGOT_IQ4_NL: block = quant_iq4_nl_block; break;
    case INGOT_IQ4_XS: block = quant_iq4_xs_block; break;
    default: break;
    }
    /* A NaN or an infinity has no place on a block's grid: rather than a
     * block of garbage (or an infinite scale that poisons the whole block),
     * the conversion fails and the loader names the tensor. */
    if (dtype_block_elems(t) > 1)
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(src[i])) return -2;
    if (block) {
        const int be = dtype_block_elems(t);
        const size_t bb = dtype_block_bytes(t);
        for (int64_t b = 0; b < n / be; b++) block(src + b * be, p + (size_t)b * bb);
        return 0;
    }
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
        return -1;
    }
    return 0;
}

int dtype_can_quantize(ingot_dtype t) {
    switch (t) {
    case INGOT_F32: case INGOT_F16: case INGOT_BF16: case INGOT_Q8_0: case INGOT_Q4_0: case INGOT_Q4_1:
    case INGOT_Q5_0: case INGOT_Q5_1: case INGOT_Q2_K: case INGOT_Q3_K: case INGOT_Q4_K: case INGOT_Q5_K:
    case INGOT_Q6_K: case INGOT_IQ4_NL: case INGOT_IQ4_XS:
        return 1;
    default:
        return 0;
    }
}

/* Byte offsets of a type's f16 scale fields within its block (-1: none). */
static void scale_offsets(ingot_dtype t, int *a, int *b) {
    *a = *b = -1;
    switch (t) {
    case INGOT_Q8_0: case INGOT_Q4_0: case INGOT_Q5_0: case INGOT_IQ4_NL: case INGOT_IQ4_XS: *a = 0; break;
    case INGOT_Q4_1: case INGOT_Q5_1: case INGOT_Q4_K: case INGOT_Q5_K: *a = 0; *b = 2; break;
    case INGOT_Q2_K: *a = (int)offsetof(block_q2_K, d); *b = (int)offsetof(block_q2_K, dmin); break;
    case INGOT_Q3_K: *a = (int)offsetof(block_q3_K, d); break;
    case INGOT_Q6_K: *a = (int)offsetof(block_q6_K, d); break;
    case INGOT_Q4_Z: case INGOT_Q8_Z: *a = 0; break;
    default: break;
    }
}

/* An f16 whose exponent bits are all ones is an infinity or a NaN. */
int dtype_check_scales(ingot_dtype t, const void *src, int64_t n, int64_t *bad_block) {
    if (t == INGOT_MXFP4) { /* E8M0: 0xff is NaN */
        const uint8_t *p = src;
        for (int64_t i = 0; i < n / INGOT_QBLOCK; i++, p += sizeof(block_mxfp4))
            if (p[0] == 0xff) {
                *bad_block = i;
                return -1;
            }
        return 0;
    }
    if (t == INGOT_F8_B32) { /* an f32 scale */
        const uint8_t *p = src;
        for (int64_t i = 0; i < n / INGOT_QBLOCK; i++, p += sizeof(block_f8_b32))
            if ((ld32(p) & 0x7f800000u) == 0x7f800000u) {
                *bad_block = i;
                return -1;
            }
        return 0;
    }
    int a, b;
    scale_offsets(t, &a, &b);
    if (a < 0) return 0;
    const uint8_t *p = src;
    const size_t bb = dtype_block_bytes(t);
    const int64_t blocks = n / dtype_block_elems(t);
    for (int64_t i = 0; i < blocks; i++, p += bb) {
        if ((ld16(p + a) & 0x7c00) == 0x7c00 || (b >= 0 && (ld16(p + b) & 0x7c00) == 0x7c00)) {
            *bad_block = i;
            return -1;
        }
    }
    return 0;
}