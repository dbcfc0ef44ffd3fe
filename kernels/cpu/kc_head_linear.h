/* kc_head_linear.h — a linear per head: each head's group of the input
 * times its own block of rows of one weight matrix.
 *
 * W is [heads * stride][cols]; head h's block is rows
 * [h * stride + first, h * stride + first + rows). Plain: x is [heads][cols],
 * out[h][r] = W_h[r] . x[h] (out [heads][rows]). Transposed: x is
 * [heads][rows], out[h] = sum_r x[h][r] * W_h[r] (out [heads][cols]), the
 * absorbed form of multi-head latent attention (each query head taken into
 * latent space through W_UK^T without materializing per-head keys).
 *
 * Rows are dequantized one at a time through kc_embed_row, so every weight
 * dtype works; cols is a literal at the call site. */
#ifndef KC_HEAD_LINEAR_H
#define KC_HEAD_LINEAR_H

#include "kc_matmul.h"
#include "kc_ops.h"

#define KC_HEAD_LINEAR_MAX_COLS 4096

static inline void kc_head_linear(ingot_dtype t, const void *W, int heads, int stride, int first, int rows,
                                  int cols, int transpose, const float *x, float *out) {
    float w[KC_HEAD_LINEAR_MAX_COLS];
    for (int h = 0; h < heads; h++) {
        const int64_t row0 = (int64_t)h * stride + first;
        if (transpose) {
            const float *xh = x + (size_t)h * rows;
            float *oh = out + (size_t)h * cols;
            memset(oh, 0, sizeof(float) * (size_t)cols);
            for (int r = 0; r < rows; r++) {
                kc_embed_row(t, W, row0 + r, cols, w);
                kc_axpy(xh[r], w, oh, cols);
            }
        } else {
            const float *xh = x + (size_t)h * cols;
            float *oh = out + (size_t)h * rows;
            for (int r = 0; r < rows; r++) {
                kc_embed_row(t, W, row0 + r, cols, w);
                oh[r] = kc_dot(w, xh, cols);
            }
        }
    }
}

#endif
