/* test_dtype.c — unit tests for fp16/bf16 conversion, quantized round trips and hand-computed blocks of every type. */
#include "dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Independent reference for a half's value, from the IEEE definition. */
static double half_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0) v = ldexp((double)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp((double)(m | 0x400), e - 25);
    return s ? -v : v;
}

/* All 65536 halves: widening matches the definition, narrowing is the exact inverse. */
static void test_fp16_exhaustive(void) {
    int bad_val = 0, bad_rt = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fp16_to_f32((uint16_t)h);
        double ref = half_value((uint16_t)h);
        if (isnan(ref)) {
            if (!isnan(f)) bad_val++;
            uint16_t back = f32_to_fp16(f);
            if ((back & 0x7c00) != 0x7c00 || (back & 0x3ff) == 0 || (back & 0x8000) != (h & 0x8000)) bad_rt++;
        } else {
            if ((double)f != ref || !signbit(f) != !signbit(ref)) bad_val++;
            if (f32_to_fp16(f) != h) bad_rt++;
        }
    }
    CHECK(bad_val == 0, "fp16_to_f32 wrong for %d values", bad_val);
    CHECK(bad_rt == 0, "fp16 round trip wrong for %d values", bad_rt);
}

/* Between each pair of adjacent finite halves: the exact midpoint rounds to
 * the even one, one float ulp either side rounds to the nearer one. */
static void test_fp16_rounding(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        float a = fp16_to_f32((uint16_t)h), b = fp16_to_f32((uint16_t)(h + 1));
        float mid = (float)(((double)a + (double)b) / 2);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        if (f32_to_fp16(mid) != even) bad++;
        if (f32_to_fp16(nextafterf(mid, 0.0f)) != h) bad++;
        if (f32_to_fp16(nextafterf(mid, INFINITY)) != h + 1) bad++;
        if (f32_to_fp16(-mid) != (even | 0x8000)) bad++;
        if (f32_to_fp16(-nextafterf(mid, INFINITY)) != ((h + 1) | 0x8000)) bad++;
    }
    CHECK(bad == 0, "fp16 rounding: %d midpoint cases wrong", bad);
    CHECK(f32_to_fp16(65504.0f) == 0x7bff, "65504 -> max half");
    CHECK(f32_to_fp16(nextafterf(65520.0f, 0.0f)) == 0x7bff, "just below 65520 -> max half");
    CHECK(f32_to_fp16(65520.0f) == 0x7c00, "65520 -> inf");
    CHECK(f32_to_fp16(1e10f) == 0x7c00, "1e10 -> inf");
    CHECK(f32_to_fp16(-1e10f) == 0xfc00, "-1e10 -> -inf");
    CHECK(f32_to_fp16(INFINITY) == 0x7c00, "inf");
    CHECK(f32_to_fp16(-INFINITY) == 0xfc00, "-inf");
    CHECK(f32_to_fp16(ldexpf(1.0f, -25)) == 0, "2^-25 ties to 0");
    CHECK(f32_to_fp16(nextafterf(ldexpf(1.0f, -25), 1.0f)) == 1, "just above 2^-25 -> smallest subnormal");
    CHECK(f32_to_fp16(ldexpf(1.0f, -30)) == 0, "tiny -> 0");
    CHECK(f32_to_fp16(-ldexpf(1.0f, -30)) == 0x8000, "-tiny -> -0");
    CHECK(f32_to_fp16(-0.0f) == 0x8000, "-0");
    CHECK(f32_to_fp16(1.0f) == 0x3c00, "1.0");
    CHECK(f32_to_fp16(1.0f + ldexpf(1.0f, -11)) == 0x3c00, "1 + half ulp ties to even 1.0");
    CHECK(f32_to_fp16(1.0f + 3 * ldexpf(1.0f, -11)) == 0x3c02, "1 + 1.5 ulp ties to even");
    CHECK(f32_to_fp16(nextafterf(ldexpf(1.0f, -14), 0.0f)) == 0x0400, "just below min normal rounds up to it");
    uint16_t qn = f32_to_fp16(NAN);
    CHECK((qn & 0x7c00) == 0x7c00 && (qn & 0x3ff) != 0, "NaN stays NaN (0x%04x)", qn);
    /* A signalling NaN whose payload lives only in the low bits must not become inf. */
    uint16_t sn = f32_to_fp16(from_bits(0x7f800001u));
    CHECK((sn & 0x7c00) == 0x7c00 && (sn & 0x3ff) != 0, "low-payload NaN stays NaN (0x%04x)", sn);
}

/* All 65536 bf16 values widen exactly and narrow back to themselves. */
static void test_bf16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = bf16_to_f32((uint16_t)h);
        if (bits(f) != h << 16) bad++;
        uint16_t back = f32_to_bf16(f);
        if (isnan(f)) { if ((back & 0x7f80) != 0x7f80 || (back & 0x7f) == 0) bad++; }
        else if (back != h) bad++;
    }
    CHECK(bad == 0, "bf16 exhaustive: %d wrong", bad);
    bad = 0;
    for (uint32_t h = 0; h < 0x7f7f; h++) {
        uint32_t mid = (h << 16) | 0x8000;
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        if (f32_to_bf16(from_bits(mid)) != even) bad++;
        if (f32_to_bf16(from_bits(mid - 1)) != h) bad++;
        if (f32_to_bf16(from_bits(mid + 1)) != h + 1) bad++;
    }
    CHECK(bad == 0, "bf16 rounding: %d midpoint cases wrong", bad);
    CHECK(f32_to_bf16(from_bits(0x7f7fffffu)) == 0x7f80, "FLT_MAX rounds to inf in bf16");
    CHECK(f32_to_bf16(INFINITY) == 0x7f80, "inf");
    uint16_t n = f32_to_bf16(from_bits(0x7f800001u));
    CHECK((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0, "low-payload NaN stays NaN (0x%04x)", n);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Round trip of n random values (scaled per block so blocks differ) within
 * the bound each format guarantees: half a step plus the fp16 error of the scale. */
static void test_quant_roundtrip(ingot_dtype t) {
    enum { N = 32 * 256 };
    static float x[N], y[N];
    static uint8_t q[N * 2];
    for (int i = 0; i < N; i++) x[i] = frand() * ((i / 32) % 7 + 1) * ((i / 32) % 3 == 0 ? 100.0f : 0.01f);
    for (int j = 0; j < 32; j++) x[32 + j] = 0.0f;          /* an all-zero block */
    for (int j = 0; j < 32; j++) x[64 + j] = 5.0f;          /* a constant block */
    for (int j = 0; j < 32; j++) x[96 + j] = -2.0f + j / 8.0f;
    size_t rb = 0;
    CHECK(dtype_row_bytes(t, N, &rb) == 0 && rb == N / 32 * dtype_block_bytes(t), "row bytes %s", dtype_name(t));
    dtype_quantize_row(t, x, q, N);
    dtype_dequantize_row(t, q, y, N);
    int bad = 0;
    for (int b = 0; b < N / 32; b++) {
        float mn = x[b * 32], mx = x[b * 32], amax = 0;
        for (int j = 0; j < 32; j++) {
            float v = x[b * 32 + j];
            mn = fminf(mn, v); mx = fmaxf(mx, v); amax = fmaxf(amax, fabsf(v));
        }
        float bound;
        if (t == INGOT_Q8_0) bound = amax / 127 * 0.5f + amax * 2e-3f;
        else if (t == INGOT_Q4_0) bound = amax / 8 * 1.0f + amax * 2e-3f;  /* clamp at 15 costs one step */
        else if (t == INGOT_Q5_0) bound = amax / 16 * 1.0f + amax * 2e-3f; /* clamp at 31 costs one step */
        else if (t == INGOT_Q5_1) bound = (mx - mn) / 31 * 0.5f + (fabsf(mn) + (mx - mn)) * 2e-3f;
        else bound = (mx - mn) / 15 * 0.5f + (fabsf(mn) + (mx - mn)) * 2e-3f;
        for (int j = 0; j < 32; j++) {
            float e = fabsf(x[b * 32 + j] - y[b * 32 + j]);
            if (!(e <= bound + 1e-30f)) { if (bad < 3) printf("  %s block %d elem %d: x=%g y=%g bound %g\n", dtype_name(t), b, j, x[b*32+j], y[b*32+j], bound); bad++; }
        }
    }
    CHECK(bad == 0, "%s round trip: %d elements out of bound", dtype_name(t), bad);
    for (int j = 0; j < 32; j++) {
        if (y[32 + j] != 0.0f) bad++;
        if (t != INGOT_Q4_0 && fabsf(y[64 + j] - 5.0f) > 5e-3f) bad++;
    }
    CHECK(bad == 0, "%s zero/constant blocks reproduced", dtype_name(t));
}

/* Hand-computed blocks pinning the exact reference formulas. */
static void test_quant_exact(void) {
    float x[32], y[32];
    uint8_t q[64];
    /* Q8_0: amax 127 -> d = 1, q = round(x) with halves away from zero. */
    for (int j = 0; j < 32; j++) x[j] = (float)(j * 8 - 127) + (j == 5 ? 0.5f : 0.0f);
    x[31] = 127.0f; x[6] = -2.5f;
    dtype_quantize_row(INGOT_Q8_0, x, q, 32);
    CHECK(q[0] == 0x00 && q[1] == 0x3c, "q8_0 d = 1.0 (fp16 0x3c00)");
    CHECK((int8_t)q[2 + 5] == -87, "q8_0 round(-86.5) = -87, got %d", (int8_t)q[2 + 5]);
    CHECK((int8_t)q[2 + 6] == -3, "q8_0 round(-2.5) = -3 (away from zero), got %d", (int8_t)q[2 + 6]);
    CHECK((int8_t)q[2 + 31] == 127 && (int8_t)q[2 + 0] == -127, "q8_0 extremes");
    /* Q4_0: max by magnitude is -16 -> d = 2; q = min(15, (int)(x/2 + 8.5)). */
    for (int j = 0; j < 32; j++) x[j] = 0.0f;
    x[0] = -16.0f; x[1] = 14.0f; x[2] = 1.0f; x[16] = 15.9f; x[17] = -3.0f;
    dtype_quantize_row(INGOT_Q4_0, x, q, 32);
    CHECK(q[0] == 0x00 && q[1] == 0x40, "q4_0 d = 2.0 (0x%02x%02x)", q[1], q[0]);
    CHECK((q[2] & 0xf) == 0 && (q[3] & 0xf) == 15 && (q[4] & 0xf) == 9, "q4_0 low nibbles %x %x %x", q[2] & 0xf, q[3] & 0xf, q[4] & 0xf);
    CHECK((q[2] >> 4) == 15 && (q[3] >> 4) == 7, "q4_0 high nibbles (elements 16, 17): %x %x", q[2] >> 4, q[3] >> 4);
    dtype_dequantize_row(INGOT_Q4_0, q, y, 32);
    CHECK(y[0] == -16.0f && y[1] == 14.0f && y[2] == 2.0f && y[16] == 14.0f && y[17] == -2.0f && y[5] == 0.0f,
          "q4_0 dequant %g %g %g %g %g", y[0], y[1], y[2], y[16], y[17]);
    /* Q4_1: min -1, max 14 -> d = 1, m = -1. */
    for (int j = 0; j < 32; j++) x[j] = (float)(j % 16) - 1.0f + (j >= 16 && j < 31 ? 0.49f : 0.0f);
    dtype_quantize_row(INGOT_Q4_1, x, q, 32);
    dtype_dequantize_row(INGOT_Q4_1, q, y, 32);
    int bad = 0;
    for (int j = 0; j < 32; j++) if (y[j] != (float)(j % 16) - 1.0f) bad++;
    CHECK(bad == 0, "q4_1 exact grid values");
}

static void test_names(void) {
    ingot_dtype t;
    for (int i = 0; i < INGOT_DTYPE_COUNT; i++)
        CHECK(dtype_from_name(dtype_name((ingot_dtype)i), &t) == 0 && t == (ingot_dtype)i, "name round trip %d", i);
    CHECK(dtype_from_name("Q4_1", &t) == 0 && t == INGOT_Q4_1, "case-insensitive name");
    CHECK(dtype_from_name("q7_k", &t) == -1, "unknown name rejected");
    CHECK(dtype_from_name("IQ4_XS", &t) == 0 && t == INGOT_IQ4_XS, "iq4_xs by name");
    size_t rb;
    CHECK(dtype_row_bytes(INGOT_Q4_0, 33, &rb) == -1, "row of 33 q4_0 rejected");
    CHECK(dtype_row_bytes(INGOT_F32, INT64_MAX, &rb) == -1, "overflowing row rejected");
    CHECK(dtype_row_bytes(INGOT_Q8_0, 64, &rb) == 0 && rb == 68, "q8_0 row of 64 = 68 bytes");
    CHECK(dtype_block_bytes(INGOT_Q4_1) == 20 && dtype_block_bytes(INGOT_Q4_0) == 18, "block sizes");
    /* GGUF's block sizes and bytes (gguf-py GGML_QUANT_SIZES) */
    static const struct { ingot_dtype t; int elems; size_t bytes; } sizes[] = {
        {INGOT_Q5_0, 32, 22}, {INGOT_Q5_1, 32, 24}, {INGOT_Q2_K, 256, 84}, {INGOT_Q3_K, 256, 110},
        {INGOT_Q4_K, 256, 144}, {INGOT_Q5_K, 256, 176}, {INGOT_Q6_K, 256, 210}, {INGOT_IQ4_NL, 32, 18},
        {INGOT_IQ4_XS, 256, 136},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        CHECK(dtype_block_elems(sizes[i].t) == sizes[i].elems && dtype_block_bytes(sizes[i].t) == sizes[i].bytes,
              "%s block: %d elements, %zu bytes", dtype_name(sizes[i].t), dtype_block_elems(sizes[i].t),
              dtype_block_bytes(sizes[i].t));
    CHECK(dtype_row_bytes(INGOT_Q4_K, 128, &rb) == -1, "row of 128 q4_k rejected (not a multiple of 256)");
    CHECK(dtype_row_bytes(INGOT_Q6_K, 512, &rb) == 0 && rb == 420, "q6_k row of 512 = 420 bytes");
}

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

/* One block of each new type built byte by byte, with values worked out by
 * hand from GGUF's definitions (the layouts in dtype.h). Unset bytes are 0. */
static void test_new_types_exact(void) {
    uint8_t b[256];
    float y[256];
    /* Q5_0: d = 0.5; qh bits 0 and 31; qs[0] = 0x3f, qs[15] = 0xa0.
     * e0 = (15 | 16) - 16 = 15 -> 7.5; e16 = 3 - 16 -> -6.5; e15 = 0 - 16 -> -8;
     * e31 = (10 | 16) - 16 = 10 -> 5. */
    memset(b, 0, sizeof b);
    put16(b, 0x3800); b[2] = 0x01; b[5] = 0x80; b[6] = 0x3f; b[6 + 15] = 0xa0;
    dtype_dequantize_row(INGOT_Q5_0, b, y, 32);
    CHECK(y[0] == 7.5f && y[16] == -6.5f && y[15] == -8.0f && y[31] == 5.0f && y[1] == -8.0f,
          "q5_0: %g %g %g %g %g", y[0], y[16], y[15], y[31], y[1]);
    /* Q5_1: d = 0.25, m = -1, same codes unsigned: 31 -> 6.75, 3 -> -0.25, 0 -> -1, 26 -> 5.5 */
    memset(b, 0, sizeof b);
    put16(b, 0x3400); put16(b + 2, 0xbc00); b[4] = 0x01; b[7] = 0x80; b[8] = 0x3f; b[8 + 15] = 0xa0;
    dtype_dequantize_row(INGOT_Q5_1, b, y, 32);
    CHECK(y[0] == 6.75f && y[16] == -0.25f && y[15] == -1.0f && y[31] == 5.5f, "q5_1: %g %g %g %g", y[0], y[16], y[15],
          y[31]);
    /* IQ4_NL: d = 2; qs[0] = 0xf0: e0 = table[0] = -127 -> -254, e16 = table[15] = 113 -> 226;
     * qs[1] = 0x78: e1 = table[8] = 1 -> 2, e17 = table[7] = -10 -> -20 */
    memset(b, 0, sizeof b);
    put16(b, 0x4000); b[2] = 0xf0; b[3] = 0x78;
    dtype_dequantize_row(INGOT_IQ4_NL, b, y, 32);
    CHECK(y[0] == -254.0f && y[16] == 226.0f && y[1] == 2.0f && y[17] == -20.0f, "iq4_nl: %g %g %g %g", y[0], y[16], y[1],
          y[17]);
    /* Q2_K: d = 1, dmin = 0.5, scales[i] = i | 1 << 4 (group of 16 i: x = i*q - 0.5).
     * qs[0] = 0xe4 holds codes 0,1,2,3 of elements 0, 32, 64, 96 (groups 0, 2, 4, 6);
     * qs[33] = 0x0c: code 3 at shift 2 -> element 32*5 + 1 = 161, group 10. */
    memset(b, 0, sizeof b);
    for (int i = 0; i < 16; i++) b[i] = (uint8_t)(i | 1 << 4);
    b[16 + 0] = 0xe4; b[16 + 33] = 0x0c;
    put16(b + 80, 0x3c00); put16(b + 82, 0x3800);
    dtype_dequantize_row(INGOT_Q2_K, b, y, 256);
    CHECK(y[0] == -0.5f && y[32] == 1.5f && y[64] == 7.5f && y[96] == 17.5f && y[161] == 29.5f && y[255] == -0.5f,
          "q2_k: %g %g %g %g %g %g", y[0], y[32], y[64], y[96], y[161], y[255]);
    /* Q3_K: d = 0.5; 6-bit scales s0 = 33, s10 = 20, s15 = 63, all others 0
     * (low nibbles: byte 0 low = 1, byte 2 high = 4, byte 7 high = 15; high
     * pairs: byte 8 bits 0-1 = 2, byte 10 bits 4-5 = 1, byte 11 bits 6-7 = 3).
     * hmask all ones except element 1. e0: code 3 -> 0.5*1*3 = 1.5;
     * e1: code 2, no high bit -> q = -2 -> -1; e163 (group 10): code 3 ->
     * 0.5*(20-32)*3 = -18; e255 (group 15): code 3 -> 0.5*31*3 = 46.5;
     * e197 (group 12, s = 0): code 2 -> 0.5*(-32)*2 = -32; e2: q = 0 -> 0. */
    memset(b, 0, sizeof b);
    memset(b, 0xff, 32); b[1] = 0xfe;
    b[32 + 0] = 0x03; b[32 + 1] = 0x02; b[32 + 32 + 3] = 0x0c; b[32 + 32 + 31] = 0xc0; b[32 + 32 + 5] = 0x20;
    b[96 + 0] = 0x01; b[96 + 2] = 0x40; b[96 + 7] = 0xf0; b[96 + 8] = 0x02; b[96 + 10] = 0x10; b[96 + 11] = 0xc0;
    put16(b + 108, 0x3800);
    dtype_dequantize_row(INGOT_Q3_K, b, y, 256);
    CHECK(y[0] == 1.5f && y[1] == -1.0f && y[163] == -18.0f && y[255] == 46.5f && y[197] == -32.0f && y[2] == 0.0f,
          "q3_k: %g %g %g %g %g %g", y[0], y[1], y[163], y[255], y[197], y[2]);
    /* Q4_K: d = 0.5, dmin = 0.25; group 0: sc 10, m 4; group 5: sc 53, m 35
     * (scales[9] = 0x35 low parts, top bits in scales[1] and scales[5]).
     * e0: q 7 -> 0.5*10*7 - 0.25*4 = 34; e162 (group 5, high nibbles of
     * qs[64..95]): q 15 -> 0.5*53*15 - 0.25*35 = 388.75; e1: -1; e160: -8.75;
     * group 4 (sc = m = 0): 0. */
    memset(b, 0, sizeof b);
    put16(b, 0x3800); put16(b + 2, 0x3400);
    b[4 + 0] = 10; b[4 + 4] = 4; b[4 + 9] = 0x35; b[4 + 1] = 0xc0; b[4 + 5] = 0x80;
    b[16 + 0] = 0x07; b[16 + 64 + 2] = 0xf0;
    dtype_dequantize_row(INGOT_Q4_K, b, y, 256);
    CHECK(y[0] == 34.0f && y[162] == 388.75f && y[1] == -1.0f && y[160] == -8.75f && y[130] == 0.0f,
          "q4_k: %g %g %g %g %g", y[0], y[162], y[1], y[160], y[130]);
    /* Q5_K: the same scales and nibbles, plus fifth bits qh[0] bit 0 (e0: q
     * 23 -> 114) and qh[2] bit 5 (e162: q 31 -> 812.75). */
    memset(b, 0, sizeof b);
    put16(b, 0x3800); put16(b + 2, 0x3400);
    b[4 + 0] = 10; b[4 + 4] = 4; b[4 + 9] = 0x35; b[4 + 1] = 0xc0; b[4 + 5] = 0x80;
    b[16 + 0] = 0x01; b[16 + 2] = 0x20;
    b[48 + 0] = 0x07; b[48 + 64 + 2] = 0xf0;
    dtype_dequantize_row(INGOT_Q5_K, b, y, 256);
    CHECK(y[0] == 114.0f && y[162] == 812.75f && y[1] == -1.0f, "q5_k: %g %g %g", y[0], y[162], y[1]);
    /* Q6_K: d = 0.5, scales[0] = 2, scales[13] = -3. e0: ql[0] = 0x0f,
     * qh[0] = 0x03 -> q = 63 - 32 = 31 -> 31; e210 (group of 32 g = 6, l = 18):
     * high nibble of ql[82] = 5, bits 4-5 of qh[50] = 1 -> q = 21 - 32 = -11,
     * group of 16 13 -> 0.5*-3*-11 = 16.5; e1: q = -32 -> -32. */
    memset(b, 0, sizeof b);
    b[0] = 0x0f; b[82] = 0x50; b[128 + 0] = 0x03; b[128 + 50] = 0x10;
    b[192 + 0] = 2; b[192 + 13] = (uint8_t)-3;
    put16(b + 208, 0x3800);
    dtype_dequantize_row(INGOT_Q6_K, b, y, 256);
    CHECK(y[0] == 31.0f && y[210] == 16.5f && y[1] == -32.0f, "q6_k: %g %g %g", y[0], y[210], y[1]);
    /* IQ4_XS: d = 0.25; group 3 scale 40 (scales_l[1] high nibble 8,
     * scales_h bits 6-7 = 2) -> 0.25*8 = 2; group 0 scale 0 -> -8.
     * qs[48] = 0x3c: e96 = 2*table[12] = 106, e112 = 2*table[3] = -130;
     * e0 = -8*table[0] = 1016. */
    memset(b, 0, sizeof b);
    put16(b, 0x3400); put16(b + 2, 0x0080); b[4 + 1] = 0x80; b[8 + 48] = 0x3c;
    dtype_dequantize_row(INGOT_IQ4_XS, b, y, 256);
    CHECK(y[96] == 106.0f && y[112] == -130.0f && y[0] == 1016.0f, "iq4_xs: %g %g %g", y[96], y[112], y[0]);
}

/* The quantizers of the new types: errors within what each format's step
 * allows on uniform data, exact zeros, and the packing read back by the
 * dequantizer (a round trip through both). */
static void test_new_quantizers(void) {
    enum { N = 256 * 32 };
    static float x[N], y[N];
    static uint8_t q[N * 2];
    static const struct { ingot_dtype t; double rmse; } cases[] = {
        /* uniform [-1, 1): step/sqrt(12) with step = 2/(levels - 1), plus
         * headroom for the 6/8-bit group scales (K) and fp16 scales */
        {INGOT_Q5_0, 2.0 / 31 / 3.464 * 1.25}, {INGOT_Q5_1, 2.0 / 31 / 3.464 * 1.1},
        {INGOT_Q4_K, 2.0 / 15 / 3.464 * 1.1}, {INGOT_Q5_K, 2.0 / 31 / 3.464 * 1.1},
        {INGOT_Q6_K, 2.0 / 63 / 3.464 * 1.25},
        /* the non-linear table's 16 levels span 240 of its 254 units, denser near 0: on uniform
         * data its error is about 1.2x that of 16 even levels (measured 0.037 for both, q4_k 0.032) */
        {INGOT_IQ4_NL, 2.0 / 15 / 3.464 * 1.25}, {INGOT_IQ4_XS, 2.0 / 15 / 3.464 * 1.25},
        /* 4 (Q2_K) and 8 (Q3_K) levels over [-1, 1) with 10% for the 4/6-bit group scales;
         * a group of 16 spans less than 2 and the search may clip its extremes, so these
         * are met with room (measured 0.126 and 0.069) */
        {INGOT_Q2_K, 2.0 / 3 / 3.464 * 1.1}, {INGOT_Q3_K, 2.0 / 7 / 3.464 * 1.1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const ingot_dtype t = cases[c].t;
        for (int i = 0; i < N; i++) x[i] = frand();
        for (int i = 256; i < 512; i++) x[i] = 0.0f; /* an all-zero super-block */
        CHECK(dtype_can_quantize(t) && dtype_quantize_row(t, x, q, N) == 0, "%s quantizes", dtype_name(t));
        dtype_dequantize_row(t, q, y, N);
        double se = 0;
        int zero_bad = 0;
        for (int i = 0; i < N; i++) se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        for (int i = 256; i < 512; i++) zero_bad += y[i] != 0.0f;
        const double rmse = sqrt(se / N);
        CHECK(rmse <= cases[c].rmse, "%s rmse %.5f > %.5f", dtype_name(t), rmse, cases[c].rmse);
        CHECK(zero_bad == 0, "%s zero block: %d nonzero", dtype_name(t), zero_bad);
    }
    /* Q4_K on groups that differ in range (x100): a group's error is at most
     * one step (the squared-error search may clip an extreme value by up to a
     * step when that lowers the group's total error), plus 16 half-steps of the super-block scale d (its own
     * scale is rounded to a multiple of d, and q <= 15 multiplies that) plus
     * half a step of dmin (its min is rounded to a multiple of dmin); d and
     * dmin are set by the wide groups: about 200/15/63 and 100/63. */
    for (int i = 0; i < N; i++) x[i] = frand() * ((i / 32) % 4 == 0 ? 100.0f : 1.0f);
    dtype_quantize_row(INGOT_Q4_K, x, q, N);
    dtype_dequantize_row(INGOT_Q4_K, q, y, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const float range = (i / 32) % 4 == 0 ? 200.0f : 2.0f;
        if (!(fabsf(x[i] - y[i]) <= range / 15 + 8 * (200.0f / 15 / 63) + 0.5f * (100.0f / 63) + 1e-3f)) bad++;
    }
    CHECK(bad == 0, "q4_k mixed ranges: %d elements beyond a step", bad);
    CHECK(dtype_can_quantize(INGOT_Q4_Z) == 0 && dtype_quantize_row(INGOT_Q4_Z, x, q, 32) == -1,
          "q4_z (checkpoints only) has no quantizer");
}

static float half_at(const uint8_t *p) { return fp16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* Q2_K and Q3_K element by element, on groups of 16 whose ranges differ.
 * Q2_K stores x ~= d*ls*q - dmin*lm (q <= 3, ls and lm 4-bit), Q3_K
 * x ~= d*sc*q (q in [-4, 3], sc signed 6-bit). An element's error is at most:
 *  - one step of its group's own grid, (max - min(0, min))/3 for Q2_K and
 *    (largest magnitude)/4 for Q3_K: the weighted search may clip an extreme
 *    value by up to a step when that lowers the group's error;
 *  - plus the group scale stored up to one code of d off its fit (the search
 *    over neighbouring codes), times the largest |q| (3, 4); and for Q2_K the
 *    min one code of dmin off.
 * d and dmin are read from each block. Measured at most 0.8 of that bound. */
static void test_q23_k_bounds(void) {
    enum { N = 256 * 64 };
    static float x[N], y[N];
    static uint8_t q[N];
    for (int t = 0; t < 2; t++) {
        const ingot_dtype type = t == 0 ? INGOT_Q2_K : INGOT_Q3_K;
        const size_t bb = dtype_block_bytes(type);
        for (int mode = 0; mode < 3; mode++) {
            for (int i = 0; i < N; i++) {
                const float r = frand(), u = frand();
                x[i] = r * (mode == 0 ? 1.0f : mode == 1 ? ((i / 16) % 4 == 0 ? 100.0f : 1.0f) : powf(10.0f, 4.0f * u));
            }
            CHECK(dtype_quantize_row(type, x, q, N) == 0, "%s quantizes", dtype_name(type));
            dtype_dequantize_row(type, q, y, N);
            int bad = 0;
            for (int b = 0; b < N / 256; b++) {
                const uint8_t *blk = q + (size_t)b * bb;
                const float d = fabsf(half_at(blk + (t == 0 ? 80 : 108))), dmin = t == 0 ? half_at(blk + 82) : 0.0f;
                for (int g = 16 * b; g < 16 * b + 16; g++) {
                    float lo = 0.0f, hi = x[16 * g], amax = 0.0f;
                    for (int l = 0; l < 16; l++) {
                        const float v = x[16 * g + l];
                        lo = fminf(lo, v), hi = fmaxf(hi, v), amax = fmaxf(amax, fabsf(v));
                    }
                    const float bound = t == 0 ? (hi - lo) / 3 + 3 * d + dmin : amax / 4 + 4 * d;
                    for (int l = 0; l < 16; l++)
                        if (!(fabsf(x[16 * g + l] - y[16 * g + l]) <= bound)) {
                            if (bad++ < 3)
                                printf("  %s mode %d elem %d: x=%g y=%g bound %g\n", dtype_name(type), mode, 16 * g + l,
                                       x[16 * g + l], y[16 * g + l], bound);
                        }
                }
            }
            CHECK(bad == 0, "%s ranges (mode %d): %d elements beyond the bound", dtype_name(type), mode, bad);
        }
        /* One super-block at a time: zeros stay exactly zero; blocks scaled by 1e4
         * (f16 scales well inside their range) and by 1e-4 (d an f16 subnormal:
         * about 4e-6 for Q2_K, 8e-7 for Q3_K, still 6+ significant bits) keep the
         * relative error of the unit block within 1% and 5%; one whose scales
         * would be below the smallest f16 subnormal (1e-8) is stored as zeros,
         * never worse; one far beyond what f16 scales reach (1e12) stays finite,
         * clipped to the largest representable magnitude (65504 times the largest
         * scale and code). */
        float unit[256], big[256], out[256];
        uint8_t blk[256];
        for (int i = 0; i < 256; i++) unit[i] = frand();
        memset(big, 0, sizeof big);
        CHECK(dtype_quantize_row(type, big, blk, 256) == 0, "%s zeros", dtype_name(type));
        dtype_dequantize_row(type, blk, out, 256);
        int nonzero = 0;
        for (int i = 0; i < 256; i++) nonzero += out[i] != 0.0f;
        CHECK(nonzero == 0, "%s all-zero block: %d nonzero", dtype_name(type), nonzero);
        double e_unit = 0, e_big = 0;
        dtype_quantize_row(type, unit, blk, 256);
        dtype_dequantize_row(type, blk, out, 256);
        for (int i = 0; i < 256; i++) e_unit += (double)(unit[i] - out[i]) * (unit[i] - out[i]);
        for (int i = 0; i < 256; i++) big[i] = unit[i] * 1e4f;
        dtype_quantize_row(type, big, blk, 256);
        dtype_dequantize_row(type, blk, out, 256);
        for (int i = 0; i < 256; i++) e_big += ((double)big[i] - out[i]) * ((double)big[i] - out[i]);
        CHECK(fabs(sqrt(e_big) / 1e4 / sqrt(e_unit) - 1) < 0.01, "%s x1e4: relative error %g vs %g", dtype_name(type),
              sqrt(e_big) / 1e4, sqrt(e_unit));
        double e_small = 0;
        for (int i = 0; i < 256; i++) big[i] = unit[i] * 1e-4f;
        dtype_quantize_row(type, big, blk, 256);
        dtype_dequantize_row(type, blk, out, 256);
        for (int i = 0; i < 256; i++) e_small += ((double)big[i] - out[i]) * ((double)big[i] - out[i]);
        CHECK(fabs(sqrt(e_small) / 1e-4 / sqrt(e_unit) - 1) < 0.05, "%s x1e-4: relative error %g vs %g",
              dtype_name(type), sqrt(e_small) / 1e-4, sqrt(e_unit));
        for (int i = 0; i < 256; i++) big[i] = unit[i] * 1e-8f;
        dtype_quantize_row(type, big, blk, 256);
        dtype_dequantize_row(type, blk, out, 256);
        nonzero = 0;
        for (int i = 0; i < 256; i++) nonzero += out[i] != 0.0f;
        CHECK(nonzero == 0, "%s x1e-8: %d elements not stored as zero", dtype_name(type), nonzero);
        for (int i = 0; i < 256; i++) big[i] = unit[i] * 1e12f;
        CHECK(dtype_quantize_row(type, big, blk, 256) == 0, "%s x1e12 quantizes", dtype_name(type));
        dtype_dequantize_row(type, blk, out, 256);
        const float reach = 65504.0f * (t == 0 ? 15 * 3 : 32 * 4);
        int wild = 0;
        for (int i = 0; i < 256; i++) wild += !(fabsf(out[i]) <= reach);
        CHECK(wild == 0, "%s x1e12: %d elements not finite or beyond %g", dtype_name(type), wild, reach);
    }
}

/* A NaN or an infinity in the input of any block type: dtype_quantize_row
 * fails (-2) rather than storing a garbage block; f16/bf16 keep them. */
static void test_quantize_non_finite(void) {
    static const ingot_dtype types[] = {INGOT_Q8_0, INGOT_Q4_0, INGOT_Q5_1, INGOT_Q2_K, INGOT_Q3_K, INGOT_Q4_K,
                                        INGOT_Q6_K, INGOT_IQ4_XS};
    float x[512];
    uint8_t q[1024];
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        for (int i = 0; i < 512; i++) x[i] = frand();
        CHECK(dtype_quantize_row(types[k], x, q, 512) == 0, "%s finite row", dtype_name(types[k]));
        x[300] = NAN;
        CHECK(dtype_quantize_row(types[k], x, q, 512) == -2, "%s NaN rejected", dtype_name(types[k]));
        x[300] = -INFINITY;
        CHECK(dtype_quantize_row(types[k], x, q, 512) == -2, "%s -inf rejected", dtype_name(types[k]));
    }
    x[0] = NAN;
    CHECK(dtype_quantize_row(INGOT_F16, x, q, 512) == 0 && dtype_quantize_row(INGOT_BF16, x, q, 512) == 0,
          "f16/bf16 store NaN and infinities as they are");
}

/* Non-finite f16 scales are found, with the index of their block. */
static void test_check_scales(void) {
    uint8_t b[4 * 210];
    int64_t bad = -1;
    memset(b, 0, sizeof b);
    CHECK(dtype_check_scales(INGOT_Q5_K, b, 4 * 256, &bad) == 0, "zero scales pass");
    put16(b + 2 * 176 + 2, 0x7e00); /* dmin of block 2: NaN */
    CHECK(dtype_check_scales(INGOT_Q5_K, b, 4 * 256, &bad) == -1 && bad == 2, "q5_k NaN dmin in block 2 (%lld)",
          (long long)bad);
    memset(b, 0, sizeof b);
    put16(b + 3 * 210 + 208, 0xfc00); /* d of Q6_K block 3: -inf */
    CHECK(dtype_check_scales(INGOT_Q6_K, b, 3 * 256, &bad) == 0, "only the blocks asked for are read");
    CHECK(dtype_check_scales(INGOT_Q6_K, b, 4 * 256, &bad) == -1 && bad == 3, "q6_k -inf d in block 3");
    memset(b, 0, sizeof b);
    put16(b + 22, 0x7c00); /* Q5_0 block 1: inf */
    CHECK(dtype_check_scales(INGOT_Q5_0, b, 64, &bad) == -1 && bad == 1, "q5_0 inf d in block 1");
    CHECK(dtype_check_scales(INGOT_F16, b, 64, &bad) == 0, "f16 data is not a scale");
}

int main(void) {
    test_names();
    test_fp16_exhaustive();
    test_fp16_rounding();
    test_bf16();
    test_quant_exact();
    test_quant_roundtrip(INGOT_Q8_0);
    test_quant_roundtrip(INGOT_Q4_0);
    test_quant_roundtrip(INGOT_Q4_1);
    test_quant_roundtrip(INGOT_Q5_0);
    test_quant_roundtrip(INGOT_Q5_1);
    test_new_types_exact();
    test_new_quantizers();
    test_q23_k_bounds();
    test_quantize_non_finite();
    test_check_scales();
    return check_summary();
}
