/* matmul_ref.h — the C kernel tests' reference for a block-type matmul: Y rows [r0, r1) of OUT for T
 * tokens against the double-precision product of dtype_dequantize_row's weights with X (plus the
 * bias and, with acc, the Y the kernel started from); rows outside the range and Y's padding
 * columns must be left as they were. */
#ifndef INGOT_TEST_MATMUL_REF_H
#define INGOT_TEST_MATMUL_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

/* Returns the number of bad values (the first 3 printed); *worst (may be NULL) gets the largest
 * |error| / sum |w x| seen. rel_tol bounds the error relative to sum |w x| (the summation order's
 * rounding); the final adds of bias and Y0 round at the size of each addend, which may cancel. */
static int matmul_ref_check(ingot_dtype t, const uint8_t *W, size_t rb, const float *X, int ldx, const float *Y,
                            const float *Y0, int ldy, int T, int IN, int OUT, int r0, int r1, const float *bias,
                            int acc, double rel_tol, double *worst) {
    float *wf = malloc(sizeof(float) * (size_t)IN);
    int bad = 0;
    double w_rel = 0;
    for (int r = 0; wf && r < OUT; r++) {
        dtype_dequantize_row(t, W + (size_t)r * rb, wf, IN);
        for (int tt = 0; tt < T; tt++) {
            const size_t yi = (size_t)tt * ldy + r;
            if (r < r0 || r >= r1) {
                if (memcmp(&Y[yi], &Y0[yi], sizeof(float)) != 0) bad++;
                continue;
            }
            double dot = 0, mag = 0;
            for (int k = 0; k < IN; k++) {
                dot += (double)wf[k] * X[(size_t)tt * ldx + k];
                mag += fabs((double)wf[k] * X[(size_t)tt * ldx + k]);
            }
            const double y0 = acc ? Y0[yi] : 0.0, b = bias ? bias[r] : 0.0, ref = dot + y0 + b;
            const double tol = rel_tol * mag + 4 * 1.2e-7 * (fabs(y0) + fabs(b) + fabs(ref)) + 1e-30;
            const double err = fabs((double)Y[yi] - ref);
            if (!(err <= tol) && bad++ < 3)
                printf("  %s IN=%d T=%d r=%d t=%d: got %.9g want %.9g (err %.3g tol %.3g)\n", dtype_name(t), IN, T, r,
                       tt, Y[yi], ref, err, tol);
            if (mag > 0 && err / mag > w_rel) w_rel = err / mag;
        }
    }
    for (int tt = 0; tt < T; tt++)
        for (int r = OUT; r < ldy; r++)
            if (memcmp(&Y[(size_t)tt * ldy + r], &Y0[(size_t)tt * ldy + r], sizeof(float)) != 0) bad++;
    if (!wf) bad++;
    free(wf);
    if (worst) *worst = w_rel;
    return bad;
}

#endif
