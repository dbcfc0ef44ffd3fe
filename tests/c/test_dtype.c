/* test_dtype.c — unit tests for fp16/bf16 conversion and Q8_0/Q4_0/Q4_1 round trips. */
#include "dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail;

/* Records one check; prints only failures (and at most a few per test) to keep output short. */
#define CHECK(cond, ...) do { \
    if (cond) n_pass++; \
    else { n_fail++; if (n_fail <= 40) { printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } \
} while (0)

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
    CHECK(dtype_from_name("q5_k", &t) == -1, "unknown name rejected");
    size_t rb;
    CHECK(dtype_row_bytes(INGOT_Q4_0, 33, &rb) == -1, "row of 33 q4_0 rejected");
    CHECK(dtype_row_bytes(INGOT_F32, INT64_MAX, &rb) == -1, "overflowing row rejected");
    CHECK(dtype_row_bytes(INGOT_Q8_0, 64, &rb) == 0 && rb == 68, "q8_0 row of 64 = 68 bytes");
    CHECK(dtype_block_bytes(INGOT_Q4_1) == 20 && dtype_block_bytes(INGOT_Q4_0) == 18, "block sizes");
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
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
