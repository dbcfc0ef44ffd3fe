/* kc_conv.h — the causal depthwise convolution of recurrent layers (LFM2's
 * short convolution, Mamba's conv1d) over the rows of one step.
 *
 * Column i of the output at position p is bias[i] + sum_k w[i][k] x[p - (width-1) + k][i], where
 * positions before 0 read zeros. The inputs a token needs come from the rows of the same
 * sequence earlier in the step (a sequence's tokens are contiguous and in position order) or,
 * before the step, from the sequence's state: its last width - 1 input rows, oldest first. Every
 * output row only reads, so rows run on any thread in any order; the state is rewritten after
 * all of them (kc_causal_conv_keep), once per sequence. A sequence whose step starts at
 * position 0 never reads its state (those positions are before 0), so a fresh slot needs no
 * clearing. The taps are summed in order k = 0 .. width-1 after the bias, in f32. */
#ifndef INGOT_KC_CONV_H
#define INGOT_KC_CONV_H

#include <string.h>

/* Output row of token t at position pos, of n columns. back: how many tokens of t's sequence
 * precede it in the step, counted up to width - 1. x: the step's input rows; state: the
 * sequence's width - 1 rows from before the step; w: [n][width]; bias: [n] or NULL. */
static inline void kc_causal_conv_row(const float *x, int t, int back, int pos, const float *state, const float *w,
                                      const float *bias, int n, int width, float *out) {
    if (bias) memcpy(out, bias, sizeof(float) * (size_t)n);
    else memset(out, 0, sizeof(float) * (size_t)n);
    for (int k = 0; k < width; k++) {
        const int d = width - 1 - k; /* how far back this tap reads */
        if (pos - d < 0) continue;
        const float *src = d <= back ? x + (size_t)(t - d) * n : state + (size_t)(width - 1 - (d - back)) * n;
        for (int i = 0; i < n; i++) out[i] += w[(size_t)i * width + k] * src[i];
    }
}

/* The state of the sequence whose last token in the step is t (at position pos, count tokens
 * of the sequence in the step): the inputs at positions pos - (width - 2) .. pos. Rows older
 * than the step move down from the old state (row r takes old row r + count, a later row, so
 * ascending r never overwrites one still to be read); positions before 0 are zeros. */
static inline void kc_causal_conv_keep(const float *x, int t, int count, int pos, float *state, int n, int width) {
    for (int r = 0; r < width - 1; r++) {
        const int d = width - 2 - r; /* distance back from t */
        float *dst = state + (size_t)r * n;
        if (pos - d < 0) memset(dst, 0, sizeof(float) * (size_t)n);
        else if (d < count) memcpy(dst, x + (size_t)(t - d) * n, sizeof(float) * (size_t)n);
        else memmove(dst, state + (size_t)(r + count) * n, sizeof(float) * (size_t)n);
    }
}

#endif
