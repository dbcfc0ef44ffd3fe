/* kc_kv_q4.h — the KV cache's 4-bit element (--kv-dtype q4): 18 bytes per
 * 32 values, 0.28x the bytes of f16.
 *
 * Each 32 values of a cached row are quantized, those of a key row rotated
 * first:
 *
 *   rotation   y = H S x / sqrt(32): S flips the signs of the values whose bit
 *              is set in KC_KV_Q4_SIGNS, H is the 32 x 32 Walsh-Hadamard
 *              matrix. Keys have a few channels far larger than the rest; a
 *              block holding one spends its scale on it and rounds the others
 *              to zero. The rotation spreads every channel over all 32 values
 *              (QuaRot's observation), which then look Gaussian whatever the
 *              channel statistics. It is orthogonal, so attention rotates the
 *              query the same way (q.k unchanged; kc_attend.h), and nothing
 *              else sees it. On SmolLM2-135M (GPL-3 text, 7,154 predictions)
 *              4-bit keys raise the perplexity by 13.9% unrotated and 4.7%
 *              rotated (a rotation over the whole head of 64: 6.4%). Values
 *              have no such channels: unrotated they cost 0.1%, rotated 0.7%,
 *              so they are stored as they are (MLA's values are the key rows'
 *              first columns: rotated with them, and attention's output is
 *              rotated back).
 *   levels     16 integer codes: the Lloyd-Max quantizer of a Gaussian (Max,
 *              1960: +-0.1284, +-0.3881, ... +-2.733 standard deviations)
 *              times 127 / 2.733, rounded: +-6, 18, 31, 44, 58, 75, 96, 127.
 *              On rotated blocks (simulated Gaussian, Laplace and
 *              outlier-channel data) they leave 0.83x the squared error of
 *              uniform levels (Q4_0's). Integers let a byte shuffle look up
 *              16 of them at once, after which a block dequantizes as q8_0's.
 *   scale      s0 = max |y| / 127: each value takes its nearest code of
 *              y / s0, then s = sum(y * code) / sum(code^2), the
 *              least-squares scale for those codes (0.93x the error of s0
 *              alone), 127 s rounded to f16 (kc_kv_q4_scale), and each value
 *              its nearest code of y / s again. A value reads back as
 *              s * code.
 *   bytes      [127 s as f16, little-endian][16 bytes]: byte j holds value j's
 *              code index in its low nibble and value j + 16's in its high
 *              one (llama.cpp's Q4_0 order), so 16 consecutive values are one
 *              nibble of 16 consecutive bytes.
 *
 * kernels/cuda/common.cuh stores the same bytes: its warp holds a block one
 * value per lane, and the rotation's butterflies, the sums (a warp's xor
 * reduction: the tree kc__kv_q4_sum32 adds in) and the roundings here are the
 * ones it does, so both backends cache identical rows. */
#ifndef INGOT_KC_KV_Q4_H
#define INGOT_KC_KV_Q4_H

#include <math.h>
#include <stdint.h>

#include "kc_half.h"

#define KC_KV_Q4_BYTES 18 /* per block of 32 values */
/* The sign flips S: the first 32 bits of the fractional part of sqrt(2) (a
 * constant chosen by nobody); bit i flips value i. */
#define KC_KV_Q4_SIGNS 0x6a09e667u
#define KC_KV_Q4_NORM 0.17677669529663687f /* 1 / sqrt(32) */

/* The codes, ascending (as int8 for a byte shuffle, and as floats), and the
 * 15 midpoints between neighbours: a value v takes code index
 * #(midpoints < v). */
static const int8_t kc_kv_q4_codes[16] = {-127, -96, -75, -58, -44, -31, -18, -6, 6, 18, 31, 44, 58, 75, 96, 127};
static const float kc_kv_q4_levels[16] = {-127.0f, -96.0f, -75.0f, -58.0f, -44.0f, -31.0f, -18.0f, -6.0f,
                                          6.0f,    18.0f,  31.0f,  44.0f,  58.0f,  75.0f,  96.0f,  127.0f};
static const float kc_kv_q4_mid[15] = {-111.5f, -85.5f, -66.5f, -51.0f, -37.5f, -24.5f, -12.0f, 0.0f,
                                       12.0f,   24.5f,  37.5f,  51.0f,  66.5f,  85.5f,  111.5f};

/* The Walsh-Hadamard butterflies over 32 values in place (unnormalized):
 * stage o pairs value i with i + o (i without bit o) into (a + b, a - b).
 * A warp does stage o with one xor shuffle: lane i keeps v + other, lane
 * i + o takes other - v (the same two sums). */
static inline void kc__kv_q4_butterflies(float x[32]) {
    for (int o = 1; o < 32; o <<= 1)
        for (int i = 0; i < 32; i++)
            if (!(i & o)) {
                const float a = x[i], b = x[i + o];
                x[i] = a + b, x[i + o] = a - b;
            }
}

/* y = H S x / sqrt(32), in place: what the cache holds (before quantizing). */
static inline void kc_kv_q4_rotate(float x[32]) {
    for (int i = 0; i < 32; i++)
        if (KC_KV_Q4_SIGNS >> i & 1u) x[i] = -x[i];
    kc__kv_q4_butterflies(x);
    for (int i = 0; i < 32; i++) x[i] *= KC_KV_Q4_NORM;
}

/* x = S H y / sqrt(32), in place: the inverse (H is symmetric, H H = 32 I). */
static inline void kc_kv_q4_unrotate(float x[32]) {
    kc__kv_q4_butterflies(x);
    for (int i = 0; i < 32; i++) {
        x[i] *= KC_KV_Q4_NORM;
        if (KC_KV_Q4_SIGNS >> i & 1u) x[i] = -x[i];
    }
}

/* Every 32 values of a row of n (a multiple of 32), rotated or back. */
static inline void kc_kv_q4_rotate_row(float *x, int n) {
    for (int b = 0; b < n / 32; b++) kc_kv_q4_rotate(x + 32 * b);
}
static inline void kc_kv_q4_unrotate_row(float *x, int n) {
    for (int b = 0; b < n / 32; b++) kc_kv_q4_unrotate(x + 32 * b);
}

/* The sum of 32 values in a warp's xor-reduction order: the halves added
 * pairwise (s[i] + s[i + 16]), then again, down to one. */
static inline float kc__kv_q4_sum32(float s[32]) {
    for (int o = 16; o > 0; o >>= 1)
        for (int i = 0; i < o; i++) s[i] = s[i] + s[i + o];
    return s[0];
}

static inline int kc__kv_q4_index(float v) {
    int k = 0;
    for (int j = 0; j < 15; j++) k += v > kc_kv_q4_mid[j];
    return k;
}

/* One block: 32 values into 18 bytes, rotated first for a key row. */
static inline void kc_kv_q4_put_block(uint8_t *blk, const float *src, int rotate) {
    float y[32], xl[32], ll[32];
    int idx[32];
    for (int i = 0; i < 32; i++) y[i] = src[i];
    if (rotate) kc_kv_q4_rotate(y);
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fabsf(y[i]) > amax ? fabsf(y[i]) : amax;
    float d = 0.0f;
    if (amax > 0.0f) {
        const float inv0 = 127.0f / amax;
        for (int i = 0; i < 32; i++) {
            const float l = kc_kv_q4_levels[kc__kv_q4_index(y[i] * inv0)];
            xl[i] = y[i] * l, ll[i] = l * l;
        }
        d = kc__kv_q4_sum32(xl) / kc__kv_q4_sum32(ll);
    }
    const uint16_t dh = kc_f32_to_fp16(d * 127.0f);
    const float ds = kc_fp16_to_f32(dh) * (1.0f / 127.0f), inv = ds > 0.0f ? 1.0f / ds : 0.0f;
    for (int i = 0; i < 32; i++) idx[i] = kc__kv_q4_index(y[i] * inv);
    blk[0] = (uint8_t)dh, blk[1] = (uint8_t)(dh >> 8);
    for (int j = 0; j < 16; j++) blk[2 + j] = (uint8_t)(idx[j] | idx[j + 16] << 4);
}

/* A block's scale s: its f16 holds 127 s (max |y| for the first guess), so
 * that s keeps f16's full precision down to blocks of |y| ~ 6e-5 where s
 * itself would be subnormal (SmolLM2's perplexity: +5.3% against +6.5%). */
static inline float kc_kv_q4_scale(const uint8_t *blk) {
    return kc_fp16_to_f32((uint16_t)(blk[0] | blk[1] << 8)) * (1.0f / 127.0f);
}

/* One block back as 32 floats (a key row's still rotated): s * code. */
static inline void kc_kv_q4_get_block(const uint8_t *blk, float *dst) {
    const float d = kc_kv_q4_scale(blk);
    for (int j = 0; j < 16; j++) {
        dst[j] = d * kc_kv_q4_levels[blk[2 + j] & 15];
        dst[j + 16] = d * kc_kv_q4_levels[blk[2 + j] >> 4];
    }
}

#endif
