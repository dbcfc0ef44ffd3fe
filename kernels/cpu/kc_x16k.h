/* kc_x16k.h — the 16-row interleaved layout (kc_x16.h) for Q5_0, Q5_1, IQ4_NL and the K-quants Q2_K..Q6_K, IQ4_XS: tiles, row reads and the integer matmul against kc_q16 activations. */
#ifndef INGOT_KC_X16K_H
#define INGOT_KC_X16K_H

#include "kc_amx.h"
#include "kc_kquant.h"
#include "kc_x16.h"
#include "kc_x16f.h"

/* kc_x16.h's design carried to five more types. A tile is 16 rows by one
 * block (32 columns for Q5_0/Q5_1, a 256-column super-block for the
 * K-quants); every code vector holds the same 4 codes of the 16 rows, so a
 * 4-byte broadcast of kc_q16 digits feeds all 16 rows in one vpdpbusd. The
 * codes are unsigned (at most 63), every offset comes back through the
 * activations' block sums, and the scales of the 16 rows are vectors. Tiles
 * (lane i = row 16g+i; "code vector" = 64 bytes, lane i at bytes 4i..4i+3):
 *
 * Q5_0 / Q5_1, at (g * NB + b) * tile bytes, NB = IN / 32 (352 / 384 bytes,
 * exactly the row-major blocks' bytes):
 *   d[16] f16, m[16] f16 (Q5_1 only)
 *   qh     one code vector: in lane i, byte k holds the fifth bits of
 *          elements 4p+k (bit p) and 16+4p+k (bit 4+p), p = 0..3
 *   codes  4 code vectors as Q4_0's (vector p: low nibbles elements
 *          4p..4p+3, high nibbles 16+4p..19+4p)
 * so one 16-bit shift and a mask bring the fifth bit of vector p's low
 * (shift left by 4-p) or high (right by p) nibble to bit 4 of each byte.
 *
 * Q4_K / Q5_K, at (g * NS + s) * tile bytes, NS = IN / 256 (2368 / 2880
 * bytes: the row-major 144 / 176 per row plus 4, the 6-bit packed scales
 * unpacked to one byte each):
 *   d[16] f16, dmin[16] f16
 *   sc[8][16] u8, m[8][16] u8     group (32 elements) first, then lane
 *   qh (Q5_K)  8 code vectors: vector c, lane i, byte k = qh[4c+k] of row
 *              i (bit g: the fifth bit of element 32g + 4c + k)
 *   codes      for each pair j = 0..3 of groups, 8 code vectors: vector c,
 *              lane i, byte k = qs[32j+4c+k] of row i (low nibble group 2j,
 *              high nibble group 2j+1, element 4c+k of the group)
 * Q6_K, at the same place (3360 bytes, exactly the row-major 210 per row):
 *   d[16] f16
 *   sc[16][16] i8                 sub-block of 16 first, then lane
 *   ql         4 x 8 code vectors: set P = 2h + e (h = 0, 1; e = 0, 1),
 *              vector c, lane i, byte k = ql[64h + 32e + 4c + k]: low
 *              nibble group 4h+e, high nibble group 4h+e+2
 *   qh         2 x 8 code vectors: set h, vector c, lane i, byte k =
 *              qh[32h + 4c + k]: bits 2(g%4), 2(g%4)+1 are the top bits
 *              of group g = 4h + (g%4)
 *
 * Q3_K (1824 bytes: the row-major 110 per row plus 4):
 *   d[16] f16, sc[16][16] i8 (the 6-bit scale - 32)
 *   qs     2 x 8 code vectors: set h, vector c, lane i, byte k =
 *          qs[32h + 4c + k]: bits 2(g%4), 2(g%4)+1 for group g = 4h + g%4
 *   hmask  8 code vectors: vector c, lane i, byte k = hmask[4c + k] (bit g:
 *          group g's third bit)
 * Q2_K (1344 bytes, exactly the row-major 84 per row):
 *   d[16] f16, dmin[16] f16, sc[16][16] u8 as stored (scale | min << 4)
 *   qs     as Q3_K's
 * IQ4_NL: Q4_0's tile (288 bytes), the nibbles indices into
 * dtype_iq4_values. IQ4_XS (2208 bytes: 136 per row plus 2): d[16] f16,
 * sc[8][16] i8 (the 6-bit scale - 32), then per group of 32 IQ4_NL's 4
 * code vectors. A byte shuffle turns indices into values, + 128 for
 * vpdpbusd (-128 d comes back through the block sum), signed for the
 * vpmaddubsw paths (|w| against x with w's sign, as kc_x16.h's Q8_0).
 * Q2_K, Q3_K and Q6_K change scales every 16 weights: their halves of a
 * 32-block keep their own digit chains, and the offsets (-4, -32, and Q2_K's
 * -dmin*m) meet each half's digit sum.
 *
 * Per 32-element group and token the integer dot product of the codes and
 * the digits goes to float and takes the group's scale vector: Q4_K/Q5_K
 * d*sc (and -dmin*m times the block sum s), Q6_K per half of 16 with the
 * -32 offset folded in as integers (the half's digit sum kc_q16.s16, made
 * once per token by the quantizer, times 32), so nothing crosses int32 (at most 63 * 16256 * 16 + 32 * 16256 * 16). */

#define KC_X16K_KB 256 /* columns of a K-quant tile */

KC_INLINE int kc_x16k_kquant(int wt) {
    return wt == KC_WQ2_K || wt == KC_WQ3_K || wt == KC_WQ4_K || wt == KC_WQ5_K || wt == KC_WQ6_K || wt == KC_WIQ4_XS;
}
/* a scale per 16 weights (Q2_K, Q3_K, Q6_K): each half of a 32-block apart */
KC_INLINE int kc__x16k_split(int wt) { return wt == KC_WQ2_K || wt == KC_WQ3_K || wt == KC_WQ6_K; }
/* Without VNNI a code vector's products with a digit broadcast come from vpmaddubsw as 16-bit
 * sums of two (code <= max, |digit| <= 127), and that many of them still add up exactly in 16
 * bits before one vpmaddwd widens them: fewer multiplies for the same integers (so the same
 * bits). 0: none (IQ4's signed table values reach 127, as Q8_0's codes). */
KC_INLINE int kc__x16k_run16(int wt) {
    switch (wt) {
    case KC_WQ2_K: case KC_WQ3_K: case KC_WQ4_K: return 8;  /* codes <= 3, 7, 15: 8 * 2 * 15 * 127 = 30480 */
    case KC_WQ5_0: case KC_WQ5_1: case KC_WQ5_K: return 4; /* codes <= 31: 4 * 2 * 31 * 127 = 31496 */
    case KC_WQ6_K: return 2;                                /* codes <= 63: 2 * 2 * 63 * 127 = 32004 */
    default: return 0;
    }
}
/* the code offset folded through the half digit sums: w = d * (q - off) */
KC_INLINE int kc__x16k_off(int wt) { return wt == KC_WQ6_K ? 32 : wt == KC_WQ3_K ? 4 : 0; }
/* columns per tile */
KC_INLINE int kc_x16k_cols(int wt) { return kc_x16k_kquant(wt) ? KC_X16K_KB : 32; }
KC_INLINE size_t kc_x16k_tile_bytes(int wt) {
    if (kc_x16f_type(wt)) return kc_x16f_tile_bytes(wt);
    switch (wt) {
    case KC_WIQ4_NL: return 288;
    case KC_WIQ4_XS: return 2208;
    case KC_WQ5_0: return 352;
    case KC_WQ5_1: return 384;
    case KC_WQ4_K: return 2368;
    case KC_WQ5_K: return 2880;
    case KC_WQ6_K: return 3360;
    case KC_WQ3_K: return 1824;
    case KC_WQ2_K: return 1344;
    default: return kc_x16_tile_bytes(wt);
    }
}
/* Offsets inside a tile (see above). */
enum {
    KC_X16K_Q5_QH = 32,     /* + 32 for Q5_1's mins */
    KC_X16K_K4_SC = 64,     /* Q4_K/Q5_K: sc[8][16] */
    KC_X16K_K4_M = 192,     /* m[8][16] */
    KC_X16K_K4_QH = 320,    /* Q5_K's qh */
    KC_X16K_Q6_SC = 32,     /* Q6_K: sc[16][16] */
    KC_X16K_Q6_QL = 288,    /* 32 vectors */
    KC_X16K_Q6_QH = 2336,   /* 16 vectors */
    KC_X16K_Q3_SC = 32,     /* Q3_K: sc[16][16] i8 (the 6-bit scale - 32) */
    KC_X16K_Q3_QS = 288,    /* 16 vectors */
    KC_X16K_Q3_HM = 1312,   /* 8 vectors */
    KC_X16K_Q2_SC = 64,     /* Q2_K: sc[16][16] u8 as stored (scale low nibble, min high) */
    KC_X16K_Q2_QS = 320,    /* 16 vectors */
    KC_X16K_XS_SC = 32,     /* IQ4_XS: sc[8][16] i8 (the 6-bit scale - 32) */
    KC_X16K_XS_QS = 160,    /* per group of 32, 4 vectors as IQ4_NL's */
};
KC_INLINE int kc__x16k_q5hdr(int wt) { return wt == KC_WQ5_1 ? 64 : 32; }
KC_INLINE int kc__x16k_k4codes(int wt) { return wt == KC_WQ5_K ? KC_X16K_K4_QH + 512 : KC_X16K_K4_QH; }

/* ---- layout: write, read back ------------------------------------------ */

/* Rewrites rows [0, R) of a row-major block matrix (IN columns) into x16
 * tiles at dst (R a multiple of 16; IN a multiple of 256 for the K-quants).
 * Every x16 type: the ones here, kc_x16.h's three and kc_x16f.h's floats. */
static inline void kc_x16k_repack(int wt, const void *src, void *dst, int64_t R, int IN) {
    if (kc_x16f_type(wt)) {
        kc_x16f_repack(wt, src, dst, R, IN);
        return;
    }
    if (wt == KC_WQ8_0 || wt == KC_WQ4_0 || wt == KC_WQ4_1) {
        kc_x16_repack(wt, src, dst, R, IN);
        return;
    }
    const int NT = IN / kc_x16k_cols(wt);
    const size_t tb = kc_x16k_tile_bytes(wt), bb = kc__kbytes(wt);
    for (int64_t g = 0; g < R / KC_X16_ROWS; g++)
        for (int b = 0; b < NT; b++) {
            uint8_t *t = (uint8_t *)dst + ((size_t)g * (size_t)NT + (size_t)b) * tb;
            for (int i = 0; i < KC_X16_ROWS; i++) {
                const uint8_t *s = (const uint8_t *)src + ((size_t)(g * KC_X16_ROWS + i) * (size_t)NT + (size_t)b) * bb;
                if (wt == KC_WIQ4_NL) { /* Q4_0's tile: the indices are its nibbles */
                    memcpy(t + 2 * i, s, 2);
                    for (int k = 0; k < 16; k++) t[32 + 64 * (k / 4) + 4 * i + k % 4] = s[offsetof(block_iq4_nl, qs) + (size_t)k];
                } else if (wt == KC_WQ5_0 || wt == KC_WQ5_1) {
                    const int one = wt == KC_WQ5_1, hdr = kc__x16k_q5hdr(wt);
                    const uint8_t *qhp = s + (one ? offsetof(block_q5_1, qh) : offsetof(block_q5_0, qh));
                    const uint8_t *qs = s + (one ? offsetof(block_q5_1, qs) : offsetof(block_q5_0, qs));
                    const uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 | (uint32_t)qhp[3] << 24;
                    memcpy(t + 2 * i, s, 2);
                    if (one) memcpy(t + 32 + 2 * i, s + offsetof(block_q5_1, m), 2);
                    for (int k = 0; k < 4; k++) {
                        unsigned byte = 0;
                        for (int p = 0; p < 4; p++)
                            byte |= ((qh >> (4 * p + k)) & 1u) << p | ((qh >> (16 + 4 * p + k)) & 1u) << (4 + p);
                        t[KC_X16K_Q5_QH + (one ? 32 : 0) + 4 * i + k] = (uint8_t)byte;
                    }
                    for (int k = 0; k < 16; k++) t[hdr + 64 + 64 * (k / 4) + 4 * i + k % 4] = qs[k];
                } else if (wt == KC_WQ4_K || wt == KC_WQ5_K) {
                    const int five = wt == KC_WQ5_K;
                    const uint8_t *sc = s + (five ? offsetof(block_q5_K, scales) : offsetof(block_q4_K, scales));
                    const uint8_t *qs = s + (five ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs));
                    memcpy(t + 2 * i, s, 2);
                    memcpy(t + 32 + 2 * i, s + 2, 2);
                    for (int q = 0; q < 8; q++) {
                        int scv, mv;
                        dtype_k4_scale_min(sc, q, &scv, &mv);
                        t[KC_X16K_K4_SC + 16 * q + i] = (uint8_t)scv;
                        t[KC_X16K_K4_M + 16 * q + i] = (uint8_t)mv;
                    }
                    if (five)
                        for (int l = 0; l < 32; l++)
                            t[KC_X16K_K4_QH + 64 * (l / 4) + 4 * i + l % 4] = s[offsetof(block_q5_K, qh) + (size_t)l];
                    const int cb = kc__x16k_k4codes(wt);
                    for (int l = 0; l < 128; l++) t[cb + 512 * (l / 32) + 64 * ((l % 32) / 4) + 4 * i + l % 4] = qs[l];
                } else if (wt == KC_WQ3_K) {
                    const uint8_t *sc = s + offsetof(block_q3_K, scales);
                    memcpy(t + 2 * i, s + offsetof(block_q3_K, d), 2);
                    for (int q = 0; q < 16; q++)
                        t[KC_X16K_Q3_SC + 16 * q + i] =
                            (uint8_t)(int8_t)((((sc[q % 8] >> (4 * (q / 8))) & 15) | ((sc[8 + q % 4] >> (2 * (q / 4))) & 3) << 4) - 32);
                    for (int l = 0; l < 64; l++)
                        t[KC_X16K_Q3_QS + 512 * (l / 32) + 64 * ((l % 32) / 4) + 4 * i + l % 4] = s[offsetof(block_q3_K, qs) + (size_t)l];
                    for (int l = 0; l < 32; l++)
                        t[KC_X16K_Q3_HM + 64 * (l / 4) + 4 * i + l % 4] = s[offsetof(block_q3_K, hmask) + (size_t)l];
                } else if (wt == KC_WIQ4_XS) {
                    const uint8_t *sl = s + offsetof(block_iq4_xs, scales_l);
                    const unsigned sh = (unsigned)s[offsetof(block_iq4_xs, scales_h)] | (unsigned)s[offsetof(block_iq4_xs, scales_h) + 1] << 8;
                    memcpy(t + 2 * i, s + offsetof(block_iq4_xs, d), 2);
                    for (int q = 0; q < 8; q++)
                        t[KC_X16K_XS_SC + 16 * q + i] =
                            (uint8_t)(int8_t)((((sl[q / 2] >> (4 * (q % 2))) & 15) | (int)((sh >> (2 * q)) & 3) << 4) - 32);
                    for (int l = 0; l < 128; l++)
                        t[KC_X16K_XS_QS + 256 * (l / 16) + 64 * ((l % 16) / 4) + 4 * i + l % 4] = s[offsetof(block_iq4_xs, qs) + (size_t)l];
                } else if (wt == KC_WQ2_K) {
                    memcpy(t + 2 * i, s + offsetof(block_q2_K, d), 2);
                    memcpy(t + 32 + 2 * i, s + offsetof(block_q2_K, dmin), 2);
                    for (int q = 0; q < 16; q++) t[KC_X16K_Q2_SC + 16 * q + i] = s[offsetof(block_q2_K, scales) + (size_t)q];
                    for (int l = 0; l < 64; l++)
                        t[KC_X16K_Q2_QS + 512 * (l / 32) + 64 * ((l % 32) / 4) + 4 * i + l % 4] = s[offsetof(block_q2_K, qs) + (size_t)l];
                } else { /* Q6_K */
                    memcpy(t + 2 * i, s + offsetof(block_q6_K, d), 2);
                    for (int q = 0; q < 16; q++) t[KC_X16K_Q6_SC + 16 * q + i] = s[offsetof(block_q6_K, scales) + (size_t)q];
                    for (int l = 0; l < 128; l++) t[KC_X16K_Q6_QL + 512 * (l / 32) + 64 * ((l % 32) / 4) + 4 * i + l % 4] = s[l];
                    for (int l = 0; l < 64; l++)
                        t[KC_X16K_Q6_QH + 512 * (l / 32) + 64 * ((l % 32) / 4) + 4 * i + l % 4] = s[offsetof(block_q6_K, qh) + (size_t)l];
                }
            }
        }
}

/* Lane i's part of 32-element group b (0..IN/32) of a tile row: the 32
 * unsigned codes, and each weight's (d, c) so that the weight is GGUF's
 * d * (q - off) (Q5_0: off 16, Q3_K: 4, Q6_K: 32; c unused) or d * q + c
 * (Q5_1: c = m; Q2_K/Q4_K/Q5_K: d = d*sc, c = -dmin*m); (dA, cA) for
 * elements 0..15, (dB, cB) for 16..31 (equal but for Q2_K/Q3_K/Q6_K). */
static inline void kc__x16k_lane2(const uint8_t *G, int wt, int b, int i, int q[32], float *dA, float *dB, float *cA,
                                  float *cB) {
    uint16_t h;
    const uint8_t *t = G + (size_t)(b / 8) * kc_x16k_tile_bytes(wt);
    const int g = b % 8;
    memcpy(&h, t + 2 * i, 2);
    const float d = kc_fp16_to_f32(h);
    if (wt == KC_WQ3_K) {
        *dA = d * (float)(int8_t)t[KC_X16K_Q3_SC + 16 * (2 * g) + i];
        *dB = d * (float)(int8_t)t[KC_X16K_Q3_SC + 16 * (2 * g + 1) + i];
        *cA = *cB = 0.0f;
        for (int l = 0; l < 32; l++) {
            const size_t at = 64 * (size_t)(l / 4) + 4 * (size_t)i + (size_t)(l % 4);
            q[l] = ((t[KC_X16K_Q3_QS + 512 * (size_t)(g / 4) + at] >> (2 * (g % 4))) & 3) | ((t[KC_X16K_Q3_HM + at] >> g) & 1) << 2;
        }
        return;
    }
    /* Q2_K */
    memcpy(&h, t + 32 + 2 * i, 2);
    const float dmin = kc_fp16_to_f32(h);
    const uint8_t sa = t[KC_X16K_Q2_SC + 16 * (2 * g) + i], sb = t[KC_X16K_Q2_SC + 16 * (2 * g + 1) + i];
    *dA = d * (float)(sa & 15), *dB = d * (float)(sb & 15);
    *cA = -(dmin * (float)(sa >> 4)), *cB = -(dmin * (float)(sb >> 4));
    for (int l = 0; l < 32; l++)
        q[l] = (t[KC_X16K_Q2_QS + 512 * (size_t)(g / 4) + 64 * (size_t)(l / 4) + 4 * (size_t)i + (size_t)(l % 4)] >> (2 * (g % 4))) & 3;
}
static inline void kc__x16k_lane1(const uint8_t *G, int wt, int b, int i, int q[32], float *dA, float *dB, float *c) {
    uint16_t h;
    if (wt == KC_WIQ4_NL || wt == KC_WIQ4_XS) { /* q: the table index */
        const int xs = wt == KC_WIQ4_XS;
        const uint8_t *t = G + (size_t)(xs ? b / 8 : b) * kc_x16k_tile_bytes(wt);
        memcpy(&h, t + 2 * i, 2);
        *dA = *dB = xs ? kc_fp16_to_f32(h) * (float)(int8_t)t[KC_X16K_XS_SC + 16 * (b % 8) + i] : kc_fp16_to_f32(h);
        *c = 0.0f;
        const size_t codes = xs ? KC_X16K_XS_QS + 256 * (size_t)(b % 8) : 32;
        for (int k = 0; k < 16; k++) {
            const uint8_t byte = t[codes + 64 * (size_t)(k / 4) + 4 * (size_t)i + (size_t)(k % 4)];
            q[k] = byte & 15, q[k + 16] = byte >> 4;
        }
        return;
    }
    if (wt == KC_WQ5_0 || wt == KC_WQ5_1) {
        const uint8_t *t = G + (size_t)b * kc_x16k_tile_bytes(wt);
        const int hdr = kc__x16k_q5hdr(wt);
        memcpy(&h, t + 2 * i, 2);
        *dA = *dB = kc_fp16_to_f32(h);
        *c = 0.0f;
        if (wt == KC_WQ5_1) memcpy(&h, t + 32 + 2 * i, 2), *c = kc_fp16_to_f32(h);
        for (int k = 0; k < 16; k++) {
            const uint8_t byte = t[hdr + 64 + 64 * (k / 4) + 4 * i + k % 4];
            const uint8_t hb = t[hdr + 4 * i + k % 4]; /* the fifth bits */
            q[k] = (byte & 15) | ((hb >> (k / 4)) & 1) << 4;
            q[k + 16] = (byte >> 4) | ((hb >> (4 + k / 4)) & 1) << 4;
        }
        return;
    }
    const uint8_t *t = G + (size_t)(b / 8) * kc_x16k_tile_bytes(wt);
    const int g = b % 8;
    memcpy(&h, t + 2 * i, 2);
    const float d = kc_fp16_to_f32(h);
    if (wt == KC_WQ6_K) {
        *dA = d * (float)(int8_t)t[KC_X16K_Q6_SC + 16 * (2 * g) + i];
        *dB = d * (float)(int8_t)t[KC_X16K_Q6_SC + 16 * (2 * g + 1) + i];
        *c = 0.0f;
        const int P = 2 * (g / 4) + g % 2, nib = (g % 4) / 2;
        for (int l = 0; l < 32; l++) {
            const size_t at = 512 * (size_t)P + 64 * (size_t)(l / 4) + 4 * (size_t)i + (size_t)(l % 4);
            const size_t ah = 512 * (size_t)(g / 4) + 64 * (size_t)(l / 4) + 4 * (size_t)i + (size_t)(l % 4);
            q[l] = ((t[KC_X16K_Q6_QL + at] >> (4 * nib)) & 15) | ((t[KC_X16K_Q6_QH + ah] >> (2 * (g % 4))) & 3) << 4;
        }
        return;
    }
    memcpy(&h, t + 32 + 2 * i, 2);
    *dA = *dB = d * (float)t[KC_X16K_K4_SC + 16 * g + i];
    *c = -(kc_fp16_to_f32(h) * (float)t[KC_X16K_K4_M + 16 * g + i]);
    const int cb = kc__x16k_k4codes(wt);
    for (int l = 0; l < 32; l++) {
        const size_t at = 512 * (size_t)(g / 2) + 64 * (size_t)(l / 4) + 4 * (size_t)i + (size_t)(l % 4);
        q[l] = (t[cb + at] >> (4 * (g % 2))) & 15;
        if (wt == KC_WQ5_K) q[l] |= ((t[KC_X16K_K4_QH + 64 * (l / 4) + 4 * i + l % 4] >> g) & 1) << 4;
    }
}

static inline void kc__x16k_lane(const uint8_t *G, int wt, int b, int i, int q[32], float *dA, float *dB, float *cA,
                                 float *cB) {
    if (wt == KC_WQ8_0 || wt == KC_WQ4_0 || wt == KC_WQ4_1) { /* kc_x16.h's types: one (d, c) per 32-block */
        const uint8_t *t = G + (size_t)b * kc_x16_tile_bytes(wt);
        for (int k = 0; k < 32; k++) q[k] = kc__x16_code(t, wt, i, k);
        kc__x16_scales(t, wt, i, dA, cA);
        *dB = *dA, *cB = *cA;
        return;
    }
    if (wt == KC_WQ2_K || wt == KC_WQ3_K) {
        kc__x16k_lane2(G, wt, b, i, q, dA, dB, cA, cB);
        return;
    }
    kc__x16k_lane1(G, wt, b, i, q, dA, dB, cA);
    *cB = *cA;
}

/* Dequantizes row `row` (IN elements) of an x16 matrix into out, bit for
 * bit what kc_embed_row gives for the row-major row; every x16 type. */
static inline void kc_x16k_dequantize_row(int wt, const void *W, int IN, int64_t row, float *out) {
    if (kc_x16f_type(wt)) {
        kc_x16f_row(wt, W, IN, row, out);
        return;
    }
    if (wt == KC_WQ8_0 || wt == KC_WQ4_0 || wt == KC_WQ4_1) {
        kc_x16_dequantize_row(wt, W, IN, row, out);
        return;
    }
    const uint8_t *G = (const uint8_t *)W + (size_t)(row / KC_X16_ROWS) * (size_t)(IN / kc_x16k_cols(wt)) * kc_x16k_tile_bytes(wt);
    const int i = (int)(row % KC_X16_ROWS);
    for (int b = 0; b < IN / 32; b++) {
        int q[32];
        float dA, dB, cA, cB;
        kc__x16k_lane(G, wt, b, i, q, &dA, &dB, &cA, &cB);
        const int off = wt == KC_WQ5_0 ? 16 : kc__x16k_off(wt);
        for (int k = 0; k < 32; k++) {
            const float d = k < 16 ? dA : dB, c = k < 16 ? cA : cB;
            /* each in the order of dtype.c's reference (-m1 added is m1 subtracted) */
            out[32 * b + k] = wt == KC_WIQ4_NL || wt == KC_WIQ4_XS ? d * (float)dtype_iq4_values[q[k]]
                              : off    ? d * (float)(q[k] - off)
                                       : d * (float)q[k] + c;
        }
    }
}

/* ---- decode: integer dot products -------------------------------------- */

#if (defined(__AVX512F__) && defined(__AVX512BW__)) || defined(__AVX2__) || defined(__ARM_NEON) || defined(__wasm_simd128__)
/* One body for AVX-512 (16 lanes, one pass), AVX2 (8 lanes, two passes over the halves of each
 * 64-byte code vector), NEON and SIMD128 (4 lanes, four passes), written against these. */
#if defined(__AVX512F__) && defined(__AVX512BW__)
typedef __m512i kx_vi;
typedef __m512 kx_vf;
#define KX_LANES 16
#define kx_load(p) _mm512_loadu_si512((const void *)(p))
#define kx_and _mm512_and_si512
#define kx_or _mm512_or_si512
#define kx_slli16 _mm512_slli_epi16
#define kx_srli16 _mm512_srli_epi16
#define kx_set1_8(v) _mm512_set1_epi8((char)(v))
#define kx_set1_32 _mm512_set1_epi32
#define kx_zero _mm512_setzero_si512
#define kx_add32 _mm512_add_epi32
#define kx_sub32 _mm512_sub_epi32
#define kx_slli32 _mm512_slli_epi32
#define kx_cvt _mm512_cvtepi32_ps
#define kx_dp kc__x16_dp
#define kx_fzero _mm512_setzero_ps
#define kx_fset1 _mm512_set1_ps
#define kx_fmadd _mm512_fmadd_ps
#define kx_fmul _mm512_mul_ps
#define kx_fadd _mm512_add_ps
#define kx_fload(p) _mm512_loadu_ps(p)
#define kx_fstore(p, v) _mm512_storeu_ps(p, v)
#define kx_f16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define kx_u8f(p) _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#define kx_i8f(p) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#define kx_u8i(p) _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define KX_VNNI KC_X16_VNNI
#define kx_shuffle8 _mm512_shuffle_epi8
#define kx_table(t) _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)(t)))
/* signed w against signed x without VNNI: |w| against x with w's sign (|w| <= 127: exact) */
KC_INLINE __m512i kx_dps(__m512i acc, __m512i w, __m512i x) {
    const __mmask64 neg = _mm512_movepi8_mask(w);
    return kc__x16_dp(acc, _mm512_abs_epi8(w), _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x));
}
#define kx_srli32 _mm512_srli_epi32
#define kx_add16 _mm512_add_epi16
#define kx_maddubs _mm512_maddubs_epi16
#define kx_widen16(v) _mm512_madd_epi16(v, _mm512_set1_epi16(1))
#elif defined(__AVX2__)
typedef __m256i kx_vi;
typedef __m256 kx_vf;
#define KX_LANES 8
#define kx_load(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define kx_and _mm256_and_si256
#define kx_or _mm256_or_si256
#define kx_slli16 _mm256_slli_epi16
#define kx_srli16 _mm256_srli_epi16
#define kx_set1_8(v) _mm256_set1_epi8((char)(v))
#define kx_set1_32 _mm256_set1_epi32
#define kx_zero _mm256_setzero_si256
#define kx_add32 _mm256_add_epi32
#define kx_sub32 _mm256_sub_epi32
#define kx_slli32 _mm256_slli_epi32
#define kx_cvt _mm256_cvtepi32_ps
#define kx_dp kc__dot
#define kx_fzero _mm256_setzero_ps
#define kx_fset1 _mm256_set1_ps
#define kx_fmadd _mm256_fmadd_ps
#define kx_fmul _mm256_mul_ps
#define kx_fadd _mm256_add_ps
#define kx_fload(p) _mm256_loadu_ps(p)
#define kx_fstore(p, v) _mm256_storeu_ps(p, v)
#define kx_f16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define kx_u8f(p) _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p))))
#define kx_i8f(p) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p))))
#define kx_u8i(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p)))
#define KX_VNNI KC_HAVE_VNNI
#define kx_shuffle8 _mm256_shuffle_epi8
#define kx_table(t) _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(t)))
KC_INLINE __m256i kx_dps(__m256i acc, __m256i w, __m256i x) {
    return kc__dot(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}
#define kx_srli32 _mm256_srli_epi32
#define kx_add16 _mm256_add_epi16
#define kx_maddubs _mm256_maddubs_epi16
#define kx_widen16(v) _mm256_madd_epi16(v, _mm256_set1_epi16(1))
#elif defined(__ARM_NEON)
/* NEON (kc_neon.h): 4 lanes, four passes over the quarters of each code vector. Its dot product
 * is signed by signed (sdot), so KX_VNNI is 0: the codes (at most 6 bits) go in as they are and
 * IQ4's table values signed, as on the paths without VNNI; no AVX2 16-bit runs (KX_LANES 4). The
 * shift counts come from loop variables: register shifts (vshlq by a vector, negative = right). */
typedef int32x4_t kx_vi;
typedef float32x4_t kx_vf;
#define KX_LANES 4
#define kx_load(p) vreinterpretq_s32_u8(vld1q_u8((const uint8_t *)(const void *)(p)))
#define kx_and vandq_s32
#define kx_or vorrq_s32
#define kx_slli16(v, n) vreinterpretq_s32_u16(vshlq_u16(vreinterpretq_u16_s32(v), vdupq_n_s16((int16_t)(n))))
#define kx_srli16(v, n) vreinterpretq_s32_u16(vshlq_u16(vreinterpretq_u16_s32(v), vdupq_n_s16((int16_t)-(int)(n))))
#define kx_set1_8(v) vreinterpretq_s32_s8(vdupq_n_s8((int8_t)(v)))
#define kx_set1_32 vdupq_n_s32
#define kx_zero() vdupq_n_s32(0)
#define kx_add32 vaddq_s32
#define kx_sub32 vsubq_s32
#define kx_slli32(v, n) vshlq_s32(v, vdupq_n_s32((int)(n)))
#define kx_cvt vcvtq_f32_s32
#define kx_dp(acc, w, x) kc_neon_dot4(acc, vreinterpretq_s8_s32(w), vreinterpretq_s8_s32(x))
#define kx_fzero() vdupq_n_f32(0.0f)
#define kx_fset1 vdupq_n_f32
#define kx_fmadd(a, b, c) vfmaq_f32(c, a, b)
#define kx_fmul vmulq_f32
#define kx_fadd vaddq_f32
#define kx_fload(p) vld1q_f32(p)
#define kx_fstore(p, v) vst1q_f32(p, v)
#define kx_f16(p) kc_neon_f16x4(p)
#define kx_u8f(p) vcvtq_f32_s32(kc_neon_u8x4(p))
#define kx_i8f(p) vcvtq_f32_s32(kc_neon_i8x4(p))
#define kx_u8i(p) kc_neon_u8x4(p)
#define KX_VNNI 0
#define kx_shuffle8(t, i) vreinterpretq_s32_s8(vqtbl1q_s8(vreinterpretq_s8_s32(t), vreinterpretq_u8_s32(i)))
#define kx_table(t) kx_load(t)
#define kx_dps kx_dp
#define kx_srli32(v, n) vreinterpretq_s32_u32(vshlq_u32(vreinterpretq_u32_s32(v), vdupq_n_s32(-(int)(n))))
#define kx_add16(a, b) vreinterpretq_s32_s16(vaddq_s16(vreinterpretq_s16_s32(a), vreinterpretq_s16_s32(b)))
/* x86's vpmaddubsw and vpmaddwd (unsigned by signed bytes, pairs summed in 16 bits; 16-bit pairs
 * into 32): only the 8-lane runs use them, kept for the shared body's sake */
KC_INLINE kx_vi kx_maddubs(kx_vi u, kx_vi s) {
    const uint8x16_t a = vreinterpretq_u8_s32(u);
    const int8x16_t b = vreinterpretq_s8_s32(s);
    const int16x8_t lo = vmulq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(a))), vmovl_s8(vget_low_s8(b)));
    const int16x8_t hi = vmulq_s16(vreinterpretq_s16_u16(vmovl_high_u8(a)), vmovl_high_s8(b));
    return vreinterpretq_s32_s16(vqaddq_s16(vuzp1q_s16(lo, hi), vuzp2q_s16(lo, hi)));
}
KC_INLINE kx_vi kx_widen16(kx_vi v) { return vpaddlq_s16(vreinterpretq_s16_s32(v)); }
#else
/* WebAssembly SIMD128 (kc_wasm.h): 4 lanes as NEON's, its dot product signed by signed
 * (kc_wasm_dot4), so KX_VNNI is 0 here too; no fused multiply-add: a multiply and an add. */
typedef v128_t kx_vi;
typedef v128_t kx_vf;
#define KX_LANES 4
#define kx_load(p) wasm_v128_load((const void *)(p))
#define kx_and wasm_v128_and
#define kx_or wasm_v128_or
#define kx_slli16(v, n) wasm_i16x8_shl(v, (uint32_t)(n))
#define kx_srli16(v, n) wasm_u16x8_shr(v, (uint32_t)(n))
#define kx_set1_8(v) wasm_i8x16_splat((int8_t)(v))
#define kx_set1_32 wasm_i32x4_splat
#define kx_zero() wasm_i32x4_splat(0)
#define kx_add32 wasm_i32x4_add
#define kx_sub32 wasm_i32x4_sub
#define kx_slli32(v, n) wasm_i32x4_shl(v, (uint32_t)(n))
#define kx_cvt wasm_f32x4_convert_i32x4
#define kx_dp kc_wasm_dot4
#define kx_fzero() wasm_f32x4_splat(0.0f)
#define kx_fset1 wasm_f32x4_splat
#define kx_fmadd(a, b, c) wasm_f32x4_add(wasm_f32x4_mul(a, b), c)
#define kx_fmul wasm_f32x4_mul
#define kx_fadd wasm_f32x4_add
#define kx_fload(p) wasm_v128_load(p)
#define kx_fstore(p, v) wasm_v128_store(p, v)
#define kx_f16(p) kc_wasm_f16x4(p)
#define kx_u8f(p) wasm_f32x4_convert_i32x4(kc_wasm_u8x4(p))
#define kx_i8f(p) wasm_f32x4_convert_i32x4(kc_wasm_i8x4(p))
#define kx_u8i(p) kc_wasm_u8x4(p)
#define KX_VNNI 0
#define kx_shuffle8(t, i) wasm_i8x16_swizzle(t, i)
#define kx_table(t) kx_load(t)
#define kx_dps kx_dp
#define kx_srli32(v, n) wasm_u32x4_shr(v, (uint32_t)(n))
#define kx_add16 wasm_i16x8_add
/* x86's vpmaddubsw and vpmaddwd: only the 8-lane runs use them, kept for the shared body's sake */
KC_INLINE kx_vi kx_maddubs(kx_vi u, kx_vi s) {
    const v128_t lo = wasm_i16x8_mul(wasm_u16x8_extend_low_u8x16(u), wasm_i16x8_extend_low_i8x16(s));
    const v128_t hi = wasm_i16x8_mul(wasm_u16x8_extend_high_u8x16(u), wasm_i16x8_extend_high_i8x16(s));
    return wasm_i16x8_add_sat(wasm_i16x8_shuffle(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14),
                              wasm_i16x8_shuffle(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15));
}
KC_INLINE kx_vi kx_widen16(kx_vi v) { return wasm_i32x4_extadd_pairwise_i16x8(v); }
#endif
/* KX_PIN(p): p computed once into a register, so that the code vectors' loads take it plus an
 * immediate (NEON: GCC otherwise re-added each vector's offset to the tile's base, one add per
 * load); nothing elsewhere */
#if KX_LANES == 4 && defined(__ARM_NEON)
#define KX_PIN(p) __asm__("" : "+r"(p))
#else
#define KX_PIN(p) ((void)0)
#endif
/* a 16-bit shift left by s (right by -s): used to move one bit of each
 * byte to bit 4 (or two to bits 4-5) without crossing into the next byte */
#define kx_shl(v, s) ((s) >= 0 ? kx_slli16(v, (unsigned)(s)) : kx_srli16(v, (unsigned)(-(s))))

/* The 8 code vectors (elements 4c..4c+3 of the group in vector c) of group
 * b of a tile row, lanes [lo, lo + KX_LANES) (byte offset vo = 4 * lo in
 * each code vector), and the group's scales: weight = dA*q + c (Q5_0: c =
 * -16 d; Q4_K/Q5_K: -dmin*m), dA/dB per half for Q6_K (its -32 apart). */
KC_INLINE void kc__x16k_unpack(const uint8_t *G, int wt, int b, int lo, kx_vi w[8], kx_vf *dA, kx_vf *dB, kx_vf *c,
                               kx_vf *cB) {
    const int vo = 4 * lo;
    const kx_vi m4 = kx_set1_8(0x0f);
    if (wt == KC_WIQ4_NL || wt == KC_WIQ4_XS) {
        /* table values: + 128 for vpdpbusd's unsigned side (the -128 comes
         * back as -128 d times the block sum), signed for the |w| fallback */
        static const uint8_t kc__iq4_u8[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};
        const int xs = wt == KC_WIQ4_XS;
        const uint8_t *t = G + (size_t)(xs ? b / 8 : b) * kc_x16k_tile_bytes(wt);
        const uint8_t *codes = t + (xs ? KC_X16K_XS_QS + 256 * (b % 8) : 32) + vo;
        KX_PIN(codes);
        const kx_vi tbl = kx_table(KX_VNNI ? (const void *)kc__iq4_u8 : (const void *)dtype_iq4_values);
        *dA = xs ? kx_fmul(kx_f16(t + 2 * lo), kx_i8f(t + KC_X16K_XS_SC + 16 * (b % 8) + lo)) : kx_f16(t + 2 * lo);
        *c = KX_VNNI ? kx_fmul(*dA, kx_fset1(-128.0f)) : kx_fzero();
        KC_UNROLL for (int p = 0; p < 4; p++) {
            const kx_vi v = kx_load(codes + 64 * p);
            w[p] = kx_shuffle8(tbl, kx_and(v, m4));
            w[p + 4] = kx_shuffle8(tbl, kx_and(kx_srli16(v, 4), m4));
        }
        return;
    }
    if (wt == KC_WQ5_0 || wt == KC_WQ5_1) {
        const uint8_t *t = G + (size_t)b * kc_x16k_tile_bytes(wt);
        const int hdr = kc__x16k_q5hdr(wt);
        *dA = kx_f16(t + 2 * lo);
        *c = wt == KC_WQ5_1 ? kx_f16(t + 32 + 2 * lo) : kx_fmul(*dA, kx_fset1(-16.0f));
        const kx_vi qh = kx_load(t + hdr + vo), m16 = kx_set1_8(0x10);
        KC_UNROLL for (int p = 0; p < 4; p++) {
            const kx_vi v = kx_load(t + hdr + 64 + 64 * p + vo);
            w[p] = kx_or(kx_and(v, m4), kx_and(kx_shl(qh, 4 - p), m16));
            w[p + 4] = kx_or(kx_and(kx_srli16(v, 4), m4), kx_and(kx_srli16(qh, (unsigned)p), m16));
        }
        return;
    }
    const uint8_t *t = G + (size_t)(b / 8) * kc_x16k_tile_bytes(wt);
    const int g = b % 8;
    const kx_vf d = kx_f16(t + 2 * lo);
    if (wt == KC_WQ3_K) {
        *dA = kx_fmul(d, kx_i8f(t + KC_X16K_Q3_SC + 16 * (2 * g) + lo));
        *dB = kx_fmul(d, kx_i8f(t + KC_X16K_Q3_SC + 16 * (2 * g + 1) + lo));
        const uint8_t *qs = t + KC_X16K_Q3_QS + 512 * (g / 4) + vo, *hm = t + KC_X16K_Q3_HM + vo;
        KX_PIN(qs);
        const kx_vi m3 = kx_set1_8(3), m4b = kx_set1_8(4);
        KC_UNROLL for (int k = 0; k < 8; k++)
            w[k] = kx_or(kx_and(kx_srli16(kx_load(qs + 64 * k), (unsigned)(2 * (g % 4))), m3),
                         kx_and(kx_shl(kx_load(hm + 64 * k), 2 - g), m4b));
        return;
    }
    if (wt == KC_WQ2_K) {
        const kx_vf dm = kx_fmul(kx_f16(t + 32 + 2 * lo), kx_fset1(-1.0f));
        const kx_vi sa = kx_u8i(t + KC_X16K_Q2_SC + 16 * (2 * g) + lo), sb = kx_u8i(t + KC_X16K_Q2_SC + 16 * (2 * g + 1) + lo);
        const kx_vi m15 = kx_set1_32(15);
        *dA = kx_fmul(d, kx_cvt(kx_and(sa, m15)));
        *dB = kx_fmul(d, kx_cvt(kx_and(sb, m15)));
        *c = kx_fmul(dm, kx_cvt(kx_srli32(sa, 4)));
        *cB = kx_fmul(dm, kx_cvt(kx_srli32(sb, 4)));
        const uint8_t *qs = t + KC_X16K_Q2_QS + 512 * (g / 4) + vo;
        KX_PIN(qs);
        const kx_vi m3 = kx_set1_8(3);
        KC_UNROLL for (int k = 0; k < 8; k++) w[k] = kx_and(kx_srli16(kx_load(qs + 64 * k), (unsigned)(2 * (g % 4))), m3);
        return;
    }
    if (wt == KC_WQ6_K) {
        *dA = kx_fmul(d, kx_i8f(t + KC_X16K_Q6_SC + 16 * (2 * g) + lo));
        *dB = kx_fmul(d, kx_i8f(t + KC_X16K_Q6_SC + 16 * (2 * g + 1) + lo));
        const uint8_t *ql = t + KC_X16K_Q6_QL + 512 * (2 * (g / 4) + g % 2) + vo, *qh = t + KC_X16K_Q6_QH + 512 * (g / 4) + vo;
        KX_PIN(ql);
        KX_PIN(qh);
        const kx_vi m48 = kx_set1_8(0x30);
        KC_UNROLL for (int k = 0; k < 8; k++) {
            const kx_vi v = kx_load(ql + 64 * k);
            const kx_vi nib = (g % 4) / 2 ? kx_and(kx_srli16(v, 4), m4) : kx_and(v, m4);
            w[k] = kx_or(nib, kx_and(kx_shl(kx_load(qh + 64 * k), 4 - 2 * (g % 4)), m48));
        }
        return;
    }
    *dA = kx_fmul(d, kx_u8f(t + KC_X16K_K4_SC + 16 * g + lo));
    *c = kx_fmul(kx_fmul(kx_f16(t + 32 + 2 * lo), kx_u8f(t + KC_X16K_K4_M + 16 * g + lo)), kx_fset1(-1.0f));
    const uint8_t *qs = t + kc__x16k_k4codes(wt) + 512 * (g / 2) + vo;
    KX_PIN(qs);
    KC_UNROLL for (int k = 0; k < 8; k++) {
        const kx_vi v = kx_load(qs + 64 * k);
        w[k] = g % 2 ? kx_and(kx_srli16(v, 4), m4) : kx_and(v, m4);
        if (wt == KC_WQ5_K)
            w[k] = kx_or(w[k], kx_and(kx_shl(kx_load(t + KC_X16K_K4_QH + 64 * k + vo), 4 - g), kx_set1_8(0x10)));
    }
}

/* The integer chains of one group (or half group) of 32 columns for NT tokens: over code vectors
 * k in [k0, k1), ih[j] = sum of w[k] times token j's high digits 4k..4k+3 (xh[j] + 4k), il[j]
 * the same with the low digits (a8: the low digits are 0, il is left 0). Each code vector meets
 * every token in turn: 2 NT independent chains keep the multiply ports busy where one token's
 * 8-long chains waited on their latency (Q4_K prefill 211 -> 273 GFLOP/s, Q5_0 209 -> 249 on
 * 2048->5632). */
KC_INLINE void kc__x16k_chains(const kx_vi w[8], int k0, int k1, const int8_t *const xh[], const int8_t *const xl[],
                               int NT, int wt, int a8, kx_vi ih[], kx_vi il[]) {
    /* AVX2 without VNNI: runs of kc__x16k_run16 vpmaddubsw results summed in 16 bits (sh, sl),
       each run widened into ih, il by one vpmaddwd */
#if KX_LANES == 4 && defined(__ARM_NEON)
    if (NT == 1) { /* NEON, one token: its 32 digits in two vectors, sdot's indexed form takes each 4 (no
                      load and broadcast per code vector) */
        const int8x16_t h[2] = {vld1q_s8(xh[0]), vld1q_s8(xh[0] + 16)};
        const int8x16_t l[2] = {vld1q_s8(xl[0]), vld1q_s8(xl[0] + 16)};
        ih[0] = il[0] = kx_zero();
        KC_UNROLL for (int k = 0; k < 8; k++) {
            if (k < k0 || k >= k1) continue;
            ih[0] = kc_neon_dot4_lane(ih[0], vreinterpretq_s8_s32(w[k]), h[k / 4], k);
            if (!a8) il[0] = kc_neon_dot4_lane(il[0], vreinterpretq_s8_s32(w[k]), l[k / 4], k);
        }
        (void)wt;
        return;
    }
#endif
    const int run = KX_LANES == 8 && !KX_VNNI ? kc__x16k_run16(wt) : 0;
    kx_vi sh[KC_X16_NT], sl[KC_X16_NT];
    KC_UNROLL for (int j = 0; j < NT; j++) ih[j] = il[j] = sh[j] = sl[j] = kx_zero();
    KC_UNROLL for (int k = 0; k < 8; k++) {
        if (k < k0 || k >= k1) continue;
        KC_UNROLL for (int j = 0; j < NT; j++) {
            int32_t h, l;
            memcpy(&h, xh[j] + 4 * k, 4);
            memcpy(&l, xl[j] + 4 * k, 4);
            const kx_vi vh = kx_set1_32(h), vl = kx_set1_32(l);
            if (run) {
                sh[j] = kx_add16(sh[j], kx_maddubs(w[k], vh));
                if (!a8) sl[j] = kx_add16(sl[j], kx_maddubs(w[k], vl));
            } else if ((wt == KC_WIQ4_NL || wt == KC_WIQ4_XS) && !KX_VNNI) { /* signed table values */
                ih[j] = kx_dps(ih[j], w[k], vh);
                if (!a8) il[j] = kx_dps(il[j], w[k], vl);
            } else {
                ih[j] = kx_dp(ih[j], w[k], vh);
                if (!a8) il[j] = kx_dp(il[j], w[k], vl); /* a8: the low digits are 0 */
            }
        }
        if (run && ((k - k0 + 1) % (run ? run : 1) == 0 || k == k1 - 1)) { /* (run ? : 1): no /0 where run is 0 */
            KC_UNROLL for (int j = 0; j < NT; j++) {
                ih[j] = kx_add32(ih[j], kx_widen16(sh[j]));
                if (!a8) il[j] = kx_add32(il[j], kx_widen16(sl[j]));
                sh[j] = sl[j] = kx_zero();
            }
        }
    }
}

/* A row group's float sums for lanes lo.. out to Y: sum + bias, then + Y when accumulating. */
KC_INLINE void kc__x16k_store(float *Y, int ldy, const kx_vf *acc, int NT, int lo, const float *bias, int accumulate) {
    const kx_vf bv = bias ? kx_fload(bias + lo) : kx_fzero();
    KC_UNROLL for (int j = 0; j < NT; j++) {
        float *y = Y + (size_t)j * (size_t)ldy + lo;
        kx_vf v = kx_fadd(acc[j], bv);
        if (accumulate) v = kx_fadd(kx_fload(y), v);
        kx_fstore(y, v);
    }
}

/* Block b (32 columns) of lanes [lo, lo + KX_LANES) of a row group against NT tokens, into
 * acc[0..NT). */
KC_INLINE void kc__x16k_block(const uint8_t *G, int wt, int b, int lo, const kc_q16 *X, int ldxb, int NT, kx_vf acc[],
                              int a8) {
    kx_vi w[8];
    kx_vf dA, dB = kx_fzero(), c = kx_fzero(), cB = kx_fzero();
    kc__x16k_unpack(G, wt, b, lo, w, &dA, &dB, &c, &cB);
    /* A type with a scale per 16 (split) takes its halves one after the other, each
     * folded into the accumulator as it ends. */
    const int split = kc__x16k_split(wt);
    KC_UNROLL for (int hf = 0; hf < 2; hf++) { /* constant trip counts, so that the loops unroll */
        if (hf && !split) break;
        kx_vi ih[KC_X16_NT], il[KC_X16_NT];
        const int8_t *xh[KC_X16_NT], *xl[KC_X16_NT];
        KC_UNROLL for (int j = 0; j < NT; j++) {
            xh[j] = X[(size_t)j * (size_t)ldxb + (size_t)b].h;
            xl[j] = X[(size_t)j * (size_t)ldxb + (size_t)b].l;
        }
        kc__x16k_chains(w, split ? 4 * hf : 0, split ? 4 * hf + 4 : 8, xh, xl, NT, wt, a8, ih, il);
        KC_UNROLL for (int j = 0; j < NT; j++) {
            const kc_q16 *x = &X[(size_t)j * (size_t)ldxb + (size_t)b];
            const kx_vf xd = kx_fset1(x->d);
            if (split) {
                const kx_vi a = kx_sub32(kx_add32(kx_slli32(ih[j], 7), il[j]),
                                         kx_set1_32(kc__x16k_off(wt) * x->s16[hf]));
                acc[j] = kx_fmadd(hf ? dB : dA, kx_fmul(kx_cvt(a), xd), acc[j]);
                if (wt == KC_WQ2_K && hf) { /* -dmin*m per half against the half's sum */
                    acc[j] = kx_fmadd(c, kx_fset1((float)x->s16[0] * x->d), acc[j]);
                    acc[j] = kx_fmadd(cB, kx_fset1((float)x->s16[1] * x->d), acc[j]);
                }
            } else {
                const kx_vf f = kx_cvt(kx_add32(kx_slli32(ih[j], 7), il[j]));
                acc[j] = kx_fmadd(dA, kx_fmul(f, xd), acc[j]);
                acc[j] = kx_fmadd(c, kx_fset1(x->s), acc[j]);
            }
        }
    }
}

/* One group of 16 rows, NT tokens (at most KC_X16_NT): Y[t][0..16). */
KC_INLINE void kc__x16k_group(const uint8_t *G, int wt, int NB, const kc_q16 *X, int ldxb, int NT, float *Y, int ldy,
                              const float *bias, int accumulate, int a8) {
    const size_t bpb = kc_x16k_tile_bytes(wt) / (size_t)(kc_x16k_cols(wt) / 32); /* bytes per 32 columns */
    if (KX_LANES < KC_X16_ROWS && NT == 1) {
        /* one token (decode) on 8-lane vectors: both halves of each block in turn, a prefetch per
         * block throughout (as kc_x16.h's kc__x16_group) */
        kx_vf acc[KC_X16_ROWS / KX_LANES];
        KC_UNROLL for (int h = 0; h < KC_X16_ROWS / KX_LANES; h++) acc[h] = kx_fzero();
        for (int b = 0; b < NB; b++) {
            kc__x16_prefetch(G + (size_t)b * bpb, bpb);
            KC_UNROLL for (int h = 0; h < KC_X16_ROWS / KX_LANES; h++) kc__x16k_block(G, wt, b, KX_LANES * h, X, ldxb, 1, &acc[h], a8);
        }
        KC_UNROLL for (int h = 0; h < KC_X16_ROWS / KX_LANES; h++) kc__x16k_store(Y, ldy, &acc[h], 1, KX_LANES * h, bias, accumulate);
        return;
    }
    for (int lo = 0; lo < KC_X16_ROWS; lo += KX_LANES) {
        kx_vf acc[KC_X16_NT];
        KC_UNROLL for (int j = 0; j < NT; j++) acc[j] = kx_fzero();
        for (int b = 0; b < NB; b++) {
            if (!lo) kc__x16_prefetch(G + (size_t)b * bpb, bpb); /* a K-quant tile: its eighths in turn */
            kc__x16k_block(G, wt, b, lo, X, ldxb, NT, acc, a8);
        }
        kc__x16k_store(Y, ldy, acc, NT, lo, bias, accumulate);
    }
}
#else
/* Portable: the same integer dot products, one (row, group) at a time (a8's
 * low digits are 0 and add nothing: one loop serves both). */
KC_INLINE void kc__x16k_group(const uint8_t *G, int wt, int NB, const kc_q16 *X, int ldxb, int NT, float *Y, int ldy,
                              const float *bias, int accumulate, int a8) {
    (void)a8;
    for (int j = 0; j < NT; j++) {
        float acc[KC_X16_ROWS] = {0};
        const size_t bpb = kc_x16k_tile_bytes(wt) / (size_t)(kc_x16k_cols(wt) / 32);
        for (int b = 0; b < NB; b++) {
            const kc_q16 *x = &X[(size_t)j * (size_t)ldxb + (size_t)b];
            if (!j) kc__x16_prefetch(G + (size_t)b * bpb, bpb);
            for (int i = 0; i < KC_X16_ROWS; i++) {
                int q[32];
                float dA, dB, c, cB;
                kc__x16k_lane(G, wt, b, i, q, &dA, &dB, &c, &cB);
                int32_t dot[2] = {0, 0};
                if (wt == KC_WIQ4_NL || wt == KC_WIQ4_XS)
                    for (int k = 0; k < 32; k++) q[k] = dtype_iq4_values[q[k]]; /* signed: no offset to fold */
                for (int k = 0; k < 32; k++) dot[kc__x16k_split(wt) ? k / 16 : 0] += q[k] * (128 * x->h[k] + x->l[k]);
                if (kc__x16k_split(wt)) {
                    const int off = kc__x16k_off(wt);
                    acc[i] = fmaf(dA, (float)(dot[0] - off * x->s16[0]) * x->d, acc[i]);
                    acc[i] = fmaf(dB, (float)(dot[1] - off * x->s16[1]) * x->d, acc[i]);
                    if (wt == KC_WQ2_K) {
                        acc[i] = fmaf(c, (float)x->s16[0] * x->d, acc[i]);
                        acc[i] = fmaf(cB, (float)x->s16[1] * x->d, acc[i]);
                    }
                } else {
                    if (wt == KC_WQ5_0) c = -16.0f * dA;
                    acc[i] = fmaf(dA, (float)dot[0] * x->d, acc[i]);
                    acc[i] = fmaf(c, x->s, acc[i]);
                }
            }
        }
        float *y = Y + (size_t)j * (size_t)ldy;
        for (int i = 0; i < KC_X16_ROWS; i++) {
            const float v = acc[i] + (bias ? bias[i] : 0.0f);
            y[i] = accumulate ? y[i] + v : v;
        }
    }
}
#endif

/* Y[t*ldy + r] = (accumulate ? Y : 0) + W[r] . X[t] (+ bias[r]) for rows
 * r0 <= r < r1 (multiples of 16), T tokens of kc_q16 activations: as
 * kc_x16.h's kc__mmp (the same arithmetic for every T), for the types here. */
KC_INLINE void kc__x16k_mmp(const void *W, int wt, const kc_q16 *X, int ldxb, float *Y, int ldy, int T, int IN, int r0,
                            int r1, const float *bias, int accumulate, int a8) {
    const int NB = IN / 32;
    const size_t gb = (size_t)(IN / kc_x16k_cols(wt)) * kc_x16k_tile_bytes(wt);
    for (int r = r0; r < r1; r += KC_X16_ROWS) {
        const uint8_t *G = (const uint8_t *)W + (size_t)(r / KC_X16_ROWS) * gb;
        const float *bi = bias ? bias + r : NULL;
        int t = 0;
#define KC__X16K_STEP(t, nt) \
    kc__x16k_group(G, wt, NB, X + (size_t)(t) * (size_t)ldxb, ldxb, nt, Y + (size_t)(t) * (size_t)ldy + r, ldy, bi, accumulate, a8)
        KC_X16_TOKEN_TILES(t, T, KC_X16_NT, KC__X16K_STEP);
#undef KC__X16K_STEP
    }
}

#if KC_AMX && KC_X16_VNNI
/* ---- AMX: steps of 16 tokens or more, for the types with one scale per 32 ----
 * Q8_0, Q4_0, Q4_1 (kc_x16.h) and Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q4_K, Q5_K here
 * (those whose scale does not change inside a block of 32; kc_x16s.h takes
 * Q4_K/Q5_K/Q6_K in the default numerics). The same integers as the
 * vpdpbusd kernels (the codes as their vectors hold them, against the
 * digits) and the same float steps per block, so the same bits: a tile
 * product per digit gives a block's int32 dot products for 16 tokens x 16
 * rows. Each 32-column product must stay apart for its block's scales, at
 * half the tile unit's width (a tile product costs the same for 32 columns
 * as for 64) and with two 1 KiB tile stores per 16x16 step, so this gains
 * less than kc_x16s.h's super-blocks (bench/RESULTS.md). The arrangement is
 * that kernel's: a pass of up to 64 tokens copied into tile order (their
 * kc_q16 blocks are 80 bytes x IN/32 apart), row groups in chunks of 8 with
 * blocks outermost, the float sums in acc, each step's int32 tiles folded
 * one step later, and a block's code bytes and scales made one step ahead. */
#define KC_X16_AMX_TOKENS 64
#define KC_X16_AMX_GROUPS 8
#define KC_X16_AMX_STEP 640 /* a step's B tile (8 x 64 code bytes) and two scale vectors */

/* Block b of a row group: its 8 code vectors (elements 4c..4c+3 in vector c: the B layout) and
 * the vectors of its fold, as the vector kernels take them: Q4_0/Q8_0's d (and the code
 * offset below), else d (times sc) and the c that meets the block sum. */
KC_AMX_INLINE void kc__x16_amx_block(const uint8_t *G, int wt, int b, uint8_t *S) {
    if (wt == KC_WQ8_0 || wt == KC_WQ4_0 || wt == KC_WQ4_1) {
        const uint8_t *t = G + (size_t)b * kc_x16_tile_bytes(wt);
        const int hdr = kc_x16_hdr(wt);
        for (int c = 0; c < 4; c++) {
            if (wt == KC_WQ8_0) {
                _mm512_store_si512(S + 64 * c, _mm512_loadu_si512((const void *)(t + hdr + 64 * c)));
                _mm512_store_si512(S + 256 + 64 * c, _mm512_loadu_si512((const void *)(t + hdr + 256 + 64 * c)));
            } else {
                const __m512i v = _mm512_loadu_si512((const void *)(t + hdr + 64 * c));
                _mm512_store_si512(S + 64 * c, _mm512_and_si512(v, _mm512_set1_epi8(0x0f)));
                _mm512_store_si512(S + 256 + 64 * c, _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f)));
            }
        }
        _mm512_store_ps((float *)(void *)(S + 512), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)t)));
        _mm512_store_ps((float *)(void *)(S + 576), wt == KC_WQ4_1 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(t + 32)))
                                                                   : _mm512_setzero_ps());
        return;
    }
    __m512i w[8];
    __m512 dA, dB = _mm512_setzero_ps(), c = _mm512_setzero_ps(), cB = _mm512_setzero_ps();
    kc__x16k_unpack(G, wt, b, 0, w, &dA, &dB, &c, &cB);
    for (int k = 0; k < 8; k++) _mm512_store_si512(S + 64 * k, w[k]);
    _mm512_store_ps((float *)(void *)(S + 512), dA);
    _mm512_store_ps((float *)(void *)(S + 576), wt == KC_WQ5_0 ? _mm512_mul_ps(dA, _mm512_set1_ps(-16.0f)) : c);
}

/* A step's int32 tiles (high and low digits) folded into its 16 tokens' float sums: the
 * vector kernel's float steps for the block (kc_x16.h's for Q4_0/Q8_0, kc_x16k.h's else). */
KC_AMX_INLINE void kc__x16_amx_fold(int32_t (*cb)[16][16], float *acc, const kc_q16 *x, int ldxb, const uint8_t *S, int wt,
                                    int a8) {
    const __m512 dA = _mm512_load_ps((const float *)(const void *)(S + 512)), c = _mm512_load_ps((const float *)(const void *)(S + 576));
    const int offset = wt == KC_WQ4_0 || wt == KC_WQ8_0;
    const float off = wt == KC_WQ4_0 ? -8.0f : -128.0f;
    for (int j = 0; j < 16; j++) {
        const kc_q16 *xj = &x[(size_t)j * (size_t)ldxb];
        const __m512i ih = _mm512_load_si512(cb[0][j]), il = a8 ? _mm512_setzero_si512() : _mm512_load_si512(cb[1][j]);
        const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(ih, 7), il));
        __m512 a = _mm512_load_ps(acc + 16 * j);
        if (offset)
            a = _mm512_fmadd_ps(dA, _mm512_fmadd_ps(f, _mm512_set1_ps(xj->d), _mm512_set1_ps(off * xj->s)), a);
        else {
            a = _mm512_fmadd_ps(dA, _mm512_mul_ps(f, _mm512_set1_ps(xj->d)), a);
            a = _mm512_fmadd_ps(c, _mm512_set1_ps(xj->s), a);
        }
        _mm512_store_ps(acc + 16 * j, a);
    }
}

/* Rows r0..r1 (multiples of 16), tokens [0, T16) (a multiple of 16). */
KC_AMX_TARGET static void kc__x16_amx(const void *W, int wt, const kc_q16 *X, int ldxb, float *Y, int ldy, int T16, int IN,
                                      int r0, int r1, const float *bias, int accumulate, int a8, uint8_t *P, float *acc,
                                      uint8_t *A) {
    const int NB = IN / 32, NG = (r1 - r0) / KC_X16_ROWS;
    const size_t gb = (size_t)(IN / kc_x16k_cols(wt)) * kc_x16k_tile_bytes(wt);
    const uint8_t *W0 = (const uint8_t *)W + (size_t)(r0 / KC_X16_ROWS) * gb;
    /* C: 0, 1 (high, low digits) and 2, 3 in turn; A: 4, 5 (16 tokens x 32 digits); B: 6 (8 x 64) */
    static const uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 8, 8};
    static const uint16_t colsb[8] = {64, 64, 64, 64, 32, 32, 64, 64};
    kc_amx_configure(rows, colsb);
    int32_t cb[2][2][16][16] __attribute__((aligned(64)));
    for (int tc = 0; tc < T16; tc += KC_X16_AMX_TOKENS) {
        const int nt = T16 - tc < KC_X16_AMX_TOKENS ? T16 - tc : KC_X16_AMX_TOKENS, ntl = nt / 16;
        /* A: [block][token tile][high, low][16 tokens][32 bytes] */
        for (int j = 0; j < nt; j++)
            for (int b = 0; b < NB; b++) {
                const kc_q16 *x = &X[(size_t)(tc + j) * (size_t)ldxb + (size_t)b];
                uint8_t *a = A + ((size_t)b * (size_t)ntl + (size_t)(j / 16)) * 1024 + 32 * (size_t)(j % 16);
                memcpy(a, x->h, 32);
                memcpy(a + 512, x->l, 32);
            }
        int step = 0, have = 0, cur = 0;
        float *pend_acc = NULL;
        const kc_q16 *pend_x = NULL;
        const uint8_t *pend_s = NULL;
        kc__x16_amx_block(W0, wt, 0, P);
        for (int g0 = 0; g0 < NG; g0 += KC_X16_AMX_GROUPS) {
            const int cg = NG - g0 < KC_X16_AMX_GROUPS ? NG - g0 : KC_X16_AMX_GROUPS;
            memset(acc, 0, sizeof(float) * (size_t)nt * (size_t)cg * 16);
            for (int b = 0; b < NB; b++)
                for (int gi = 0; gi < cg; gi++, step++) {
                    const uint8_t *S = P + KC_X16_AMX_STEP * (size_t)(step % 3);
                    for (int tt = 0; tt < ntl; tt++) {
                        const uint8_t *A0 = A + ((size_t)b * (size_t)ntl + (size_t)tt) * 1024;
                        _tile_loadd(4, A0, 32);
                        _tile_loadd(6, S, 64);
                        /* tile numbers are immediates: one body per pair of C tiles */
#define KC_X16_AMX_PRODUCTS(CH, CL, out)                                                                               \
    do {                                                                                                               \
        _tile_zero(CH);                                                                                                \
        _tile_dpbsud(CH, 4, 6);                                                                                        \
        if (!a8) {                                                                                                     \
            _tile_zero(CL);                                                                                            \
            _tile_loadd(5, A0 + 512, 32);                                                                              \
            _tile_dpbsud(CL, 5, 6);                                                                                    \
            _tile_stored(CL, (out)[1], 64);                                                                            \
        }                                                                                                              \
        _tile_stored(CH, (out)[0], 64);                                                                                \
    } while (0)
                        if (cur) KC_X16_AMX_PRODUCTS(2, 3, cb[1]);
                        else KC_X16_AMX_PRODUCTS(0, 1, cb[0]);
#undef KC_X16_AMX_PRODUCTS
                        if (have) kc__x16_amx_fold(cb[cur ^ 1], pend_acc, pend_x, ldxb, pend_s, wt, a8);
                        pend_acc = acc + ((size_t)gi * (size_t)nt + 16 * (size_t)tt) * 16;
                        pend_x = X + (size_t)(tc + 16 * tt) * (size_t)ldxb + (size_t)b, pend_s = S;
                        have = 1, cur ^= 1;
                    }
                    /* the next (block, group)'s codes: this chunk's next group, its next block, the
                     * next chunk (three step buffers: the one folded late, this one, the next) */
                    int ngi, nb;
                    kc_amx_next_step(g0, gi, cg, b, NB, KC_X16_AMX_GROUPS, &ngi, &nb);
                    if (ngi < NG) kc__x16_amx_block(W0 + (size_t)ngi * gb, wt, nb, P + KC_X16_AMX_STEP * (size_t)((step + 1) % 3));
                }
            if (have) kc__x16_amx_fold(cb[cur ^ 1], pend_acc, pend_x, ldxb, pend_s, wt, a8);
            have = 0;
            kc_amx_write_sums(Y + (size_t)tc * (size_t)ldy, ldy, acc, nt, cg, r0 + KC_X16_ROWS * g0, bias, accumulate);
        }
    }
    _tile_release();
}
#endif

/* kc_x16.h's and this file's matmuls with whole tiles of 16 tokens through AMX where the
 * process has it and the type has one scale per 32 (the same bits), the rest as before. */
KC_INLINE void kc__x16a_mmp(const void *W, int wt, const kc_q16 *X, int ldxb, float *Y, int ldy, int T, int IN, int r0,
                            int r1, const float *bias, int accumulate, int a8) {
    int t0 = 0;
#if KC_AMX && KC_X16_VNNI
    if (T >= 16 && !kc__x16k_split(wt) && kc_amx_ready()) { /* a scale per 32 (or per super-block) */
        const size_t acc_bytes = sizeof(float) * KC_X16_AMX_TOKENS * KC_X16_AMX_GROUPS * KC_X16_ROWS;
        uint8_t *P = kc_amx_scratch(3 * KC_X16_AMX_STEP + acc_bytes + (size_t)KC_X16_AMX_TOKENS * (size_t)IN * 2);
        if (P) {
            t0 = T / 16 * 16;
            kc__x16_amx(W, wt, X, ldxb, Y, ldy, t0, IN, r0, r1, bias, accumulate, a8, P,
                        (float *)(void *)(P + 3 * KC_X16_AMX_STEP), P + 3 * KC_X16_AMX_STEP + acc_bytes);
        }
    }
#endif
    if (t0 == T) return;
    X += (size_t)t0 * (size_t)ldxb, Y += (size_t)t0 * (size_t)ldy;
    if (wt == KC_WQ8_0 || wt == KC_WQ4_0 || wt == KC_WQ4_1) kc__mmp(W, wt, X, ldxb, Y, ldy, T - t0, IN, r0, r1, bias, accumulate, a8);
    else kc__x16k_mmp(W, wt, X, ldxb, Y, ldy, T - t0, IN, r0, r1, bias, accumulate, a8);
}

/* kc_mmp_TYPE: against kc_quantize_q16's activations (two digits); kc_mmp8_TYPE: against
 * kc_quantize_q16a8's (--act-quant q8: the high digit only, one integer chain per weight instead
 * of two). Every x16 type, kc_x16.h's three included. */
#define KC_X16K_MMP(name, WT)                                                                                          \
    static inline void kc_mmp_##name(const void *W, const kc_q16 *X, int ldxb, float *Y, int ldy, int T, int IN, int r0, \
                                     int r1, const float *bias, int accumulate) {                                      \
        kc__x16a_mmp(W, WT, X, ldxb, Y, ldy, T, IN, r0, r1, bias, accumulate, 0);                                      \
    }                                                                                                                  \
    static inline void kc_mmp8_##name(const void *W, const kc_q16 *X, int ldxb, float *Y, int ldy, int T, int IN,       \
                                      int r0, int r1, const float *bias, int accumulate) {                             \
        kc__x16a_mmp(W, WT, X, ldxb, Y, ldy, T, IN, r0, r1, bias, accumulate, 1);                                      \
    }
KC_X16K_MMP(q8_0, KC_WQ8_0)
KC_X16K_MMP(q4_0, KC_WQ4_0)
KC_X16K_MMP(q4_1, KC_WQ4_1)
KC_X16K_MMP(iq4_nl, KC_WIQ4_NL)
KC_X16K_MMP(iq4_xs, KC_WIQ4_XS)
KC_X16K_MMP(q5_0, KC_WQ5_0)
KC_X16K_MMP(q5_1, KC_WQ5_1)
KC_X16K_MMP(q2_k, KC_WQ2_K)
KC_X16K_MMP(q3_k, KC_WQ3_K)
KC_X16K_MMP(q4_k, KC_WQ4_K)
KC_X16K_MMP(q5_k, KC_WQ5_K)
KC_X16K_MMP(q6_k, KC_WQ6_K)
#undef KC_X16K_MMP

#endif
