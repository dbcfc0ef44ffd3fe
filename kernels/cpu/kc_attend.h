/* kc_attend.h — paged causal attention of one token and one KV head's query
 * group, on the cache kc_ops.h stores (included at the end of kc_ops.h).
 *
 * Positions are cut into fixed chunks of KC_ATTN_CHUNK, aligned to absolute
 * positions. Each chunk yields a partial result (its own softmax max, sum of
 * exponentials and unnormalized weighted sum of V rows, kc_attend_chunk), and
 * the partials are merged in chunk order (kc_attend_merge, flash-decoding's
 * rescaling). kc_attend_kv runs the chunks one after another; a generated
 * model may instead run the chunks of a decode token on different threads and
 * merge them afterwards. The operations, and so the bits, are the same either
 * way, so a sequence's logits do not depend on how its step was divided
 * among threads or on what else was in its batch. */
#ifndef INGOT_KC_ATTEND_H
#define INGOT_KC_ATTEND_H

/* Positions per chunk: a multiple of the 16-position score tiles. 128 cuts a
 * 4096-position decode into 32 pieces of work per KV head (enough to keep
 * every thread busy with one token), while the merge's cost per chunk
 * (group x value_dim multiply-adds) stays small next to the chunk's. */
#define KC_ATTN_CHUNK 128
/* Floats of one chunk's partial: [group][value_dim] sums, [group] maxima,
 * [group] sums of exponentials. */
#define KC_ATTN_PART(group, value_dim) ((size_t)(group) * ((size_t)(value_dim) + 2))
/* Floats of scratch kc_attend_chunk needs: the chunk's scores and, for a q4
 * cache, the group's queries rotated as its rows are (kc_kv_q4.h). */
#define KC_ATTN_SCORES(group, head_dim) ((size_t)(group) * (KC_ATTN_CHUNK + (KC_KV_Q4 ? (size_t)(head_dim) : 0)))
/* Floats of scratch kc_attend_kv needs: a chunk's scores, its partial, and
 * the running maxima and sums. */
#define KC_ATTN_SCRATCH(group, head_dim, value_dim) \
    (KC_ATTN_SCORES(group, head_dim) + (size_t)(group) * ((size_t)(value_dim) + 4))
/* How far ahead (in positions) the AVX-512 loops prefetch K and V rows. A
 * sequence's blocks need not have consecutive ids, and a KV head's rows in
 * blocks that do not are runs of one block (2 KiB for 16 f16 rows of 64),
 * too short for the hardware prefetcher to lock on (kc_ops.h's head-major
 * layout makes consecutive blocks one run): without the prefetch such a
 * 4096-position decode read the cache at ~60% of the speed it computes at. */
#define KC_ATTN_PREFETCH 32

/* The chunks a token at pos sees from first on. */
static inline int kc_attn_chunks(int first, int pos) { return pos / KC_ATTN_CHUNK - first / KC_ATTN_CHUNK + 1; }

#if defined(__AVX512F__)
/* Horizontal sums of 16 vectors at once: lane j of the result is the sum of
 * v[j]'s 16 lanes. Four halving rounds, each pairing vectors with a shuffle
 * and adding (30 shuffles + 15 adds for 16 sums, instead of ~8 operations
 * per sum with one reduction each):
 *   unpack lo/hi: pairs (2i, 2i+1) -> per 128-bit lane [a b a b] partials,
 *   shuffle_ps 0x44/0xee: quads -> per 128-bit lane [v0 v1 v2 v3] partials,
 *   shuffle_f32x4 0x88/0xdd twice: the four 128-bit lanes summed into place. */
KC_OPS_INLINE __m512 kc__hsum16x16(__m512 v[16]) {
    __m512 a[8], b[4], c[2];
    KC_OPS_UNROLL for (int i = 0; i < 8; i++)
        a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    KC_OPS_UNROLL for (int i = 0; i < 4; i++)
        b[i] = _mm512_add_ps(_mm512_shuffle_ps(a[2 * i], a[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(a[2 * i], a[2 * i + 1], 0xee));
    KC_OPS_UNROLL for (int i = 0; i < 2; i++)
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88), _mm512_shuffle_f32x4(c[0], c[1], 0xdd));
}

#endif

#if !defined(__AVX512F__) && KC_OPS_AVX2
/* Horizontal sums of 8 vectors at once (AVX2): lane j of the result is the
 * sum of v[j]'s 8 lanes. Two rounds of hadd leave, per 128-bit half, the
 * four vectors' partial sums over that half; adding the halves finishes. */
KC_OPS_INLINE __m256 kc__hsum8x8(const __m256 v[8]) {
    const __m256 a0 = _mm256_hadd_ps(v[0], v[1]), a1 = _mm256_hadd_ps(v[2], v[3]);
    const __m256 a2 = _mm256_hadd_ps(v[4], v[5]), a3 = _mm256_hadd_ps(v[6], v[7]);
    const __m256 b0 = _mm256_hadd_ps(a0, a1), b1 = _mm256_hadd_ps(a2, a3);
    return _mm256_add_ps(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31));
}
#endif

/* A softmax weight e^x (x <= 0: a score minus the maximum), or 0 below
 * e^-64 (1.6e-28, far under f32's resolution of the sum, which is >= 1):
 * weights that small would make subnormal products in the values' pass,
 * which the FPU handles by a microcode assist ~100 times slower. */
#define KC_ATTN_EXP_MIN (-64.0f)
static inline float kc__softmax_exp(float x) { return x < KC_ATTN_EXP_MIN ? 0.0f : expf(x); }
#if defined(__AVX512F__)
KC_OPS_INLINE __m512 kc__softmax_exp16(__m512 x) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(KC_ATTN_EXP_MIN), _CMP_GE_OQ), kc__exp16(x));
}

/* Prefetches one cached row of `bytes` into L1 (or L2). */
KC_OPS_INLINE void kc__prefetch_row(const void *row, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)row + o, _MM_HINT_T0);
}
KC_OPS_INLINE void kc__prefetch_row_l2(const void *row, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)row + o, _MM_HINT_T1);
}
#endif

/* Chunk c (0 = the one holding `first`) of the causal attention of the
 * `group` query heads that share one KV head, for one token at position pos
 * over positions [first, pos] of its sequence (first > 0 only for a sliding
 * window). Each K and V row is loaded once for the whole group (GQA).
 * q: the group's heads, contiguous [group][head_dim]. scores: scratch of
 * KC_ATTN_SCORES(group, head_dim) floats. part (KC_ATTN_PART floats): the chunk's
 * partial, see above. softcap > 0 applies tanh soft-capping to the scaled
 * scores. Values are value_dim columns, read from the V half of the pool or,
 * with shared_value, from the first value_dim columns of the key rows
 * themselves (the pool then has no V half: MLA's cached latent is both).
 * A q4 cache holds key rows rotated, each 32 values (kc_kv_q4.h): the
 * chunk scores the queries rotated the same way (an orthogonal map keeps
 * q.k). Value rows are not rotated, but shared values are key columns: their
 * weighted sum stays rotated until kc_attend_finish.
 *
 * With AVX-512 and head_dim, value_dim multiples of 16 (64 for most models):
 *  - scores: 16 positions at a time; their K rows are located once (block
 *    table lookups) and widened once into an f32 tile for all the group's
 *    heads; per query head, 16 dot-product accumulators are reduced together
 *    by kc__hsum16x16 into one vector of 16 scores;
 *  - values: sum_p e_p * V_p is accumulated in registers for up to 4 heads
 *    x 64 dims (16 accumulators): each V row is loaded once per 4 heads and
 *    the partial is written once;
 *  - rows KC_ATTN_PREFETCH positions ahead are prefetched.
 * Other shapes use the plain loops (kc_dot / kc_axpy). */
KC_OPS_INLINE void kc_attend_chunk(const kc_kv_t *kv, int n_layers, int layer, int n_blocks, int kv_heads,
                                   int block_size, int head_dim, int value_dim, int shared_value,
                                   const int32_t *block_table, int kv_head, int group, int first, int pos, int c,
                                   const float *q, float scale, float softcap, float *scores, float *part) {
    const size_t v_base = shared_value ? 0 : (size_t)n_layers * n_blocks * kv_heads * block_size * KC_KV_ROW(head_dim);
    const int c0 = (first / KC_ATTN_CHUNK + c) * KC_ATTN_CHUNK;
    const int p0 = c0 > first ? c0 : first, p1 = c0 + KC_ATTN_CHUNK - 1 < pos ? c0 + KC_ATTN_CHUNK - 1 : pos;
    const int n = p1 - p0 + 1;
    float *acc_out = part, *m_out = part + (size_t)group * value_dim, *l_out = m_out + group;
#if KC_KV_Q4
    {
        float *qr = scores + (size_t)group * KC_ATTN_CHUNK;
        memcpy(qr, q, sizeof(float) * (size_t)group * head_dim);
        kc_kv_q4_rotate_row(qr, group * head_dim); /* head_dim is a multiple of 32: each head's blocks */
        q = qr;
    }
#endif
#define KC_KROW(p)                                                                                          \
    (kv + kc_kv_offset(layer, n_blocks, kv_heads, block_size, head_dim, block_table[(p) / block_size], kv_head, \
                       (p) % block_size))
#if defined(__AVX512F__)
    if (head_dim % 16 == 0 && value_dim % 16 == 0 && block_size % 16 == 0) {
        const int HK = head_dim / 16, HV = value_dim / 16;
        /* 16 positions from a multiple of 16 on are 16 consecutive rows of
         * one block: a run, located by one block-table lookup */
        const size_t KR = KC_KV_ROW(head_dim), run_bytes = 16 * KR * sizeof(kc_kv_t);
        /* [p0, pa): before the first run (a sliding window's start), [pa,
         * pb): whole runs, [pb, p1]: after the last. The scores take the
         * last, partial run as a whole one too (ps: the runs' end): its 16
         * rows lie in one allocated block, the pool is zeroed at allocation,
         * and a row past p1 (zero, or a freed sequence's) only makes its own
         * lane of the tile's sums, which is not stored. One row at a time, a
         * decode of a short sequence spent a fifth of its attention on up to
         * 15 such rows (a dependent FMA chain and a horizontal sum each).
         * The values' pass reads only [p0, p1]. */
        const int pa = (p0 + 15) / 16 * 16 < p1 + 1 ? (p0 + 15) / 16 * 16 : p1 + 1;
        const int pb = pa + (p1 + 1 - pa) / 16 * 16, ps = pa + (p1 + 1 - pa + 15) / 16 * 16;
        /* cached rows that are not f32 are widened once per run for the
         * whole group (f32 rows are read in place) */
        enum { WIDEN_MAX = 256 };
        const int widen = (KC_KV_F16 || KC_KV_Q8 || KC_KV_Q4) && head_dim <= WIDEN_MAX;
        float kt[16 * WIDEN_MAX] __attribute__((aligned(64)));
        for (int p = p0; p < pa; p++) {
            float tmp[KC_KV_MAX_HEAD_DIM];
            const float *k = kc__kv_row(KC_KROW(p), head_dim, tmp);
            for (int g = 0; g < group; g++)
                scores[(size_t)g * n + (p - p0)] = kc_dot(q + (size_t)g * head_dim, k, head_dim) * scale;
        }
        /* the chunk's first runs now (a chunk may start on another thread
         * than the one before it), then K runs KC_ATTN_PREFETCH positions
         * ahead, and each run's V rows into L2 for the values' pass */
        for (int p = pa; p < pa + KC_ATTN_PREFETCH && p < ps; p += 16) kc__prefetch_row(KC_KROW(p), run_bytes);
        for (int p = pa; p < ps; p += 16) {
            const kc_kv_t *kb = KC_KROW(p);
            /* the lanes of positions up to p1: all 16 but in the partial run */
            const __mmask16 rows = p1 + 1 - p >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (p1 + 1 - p)) - 1);
            if (p + KC_ATTN_PREFETCH <= pos) kc__prefetch_row(KC_KROW(p + KC_ATTN_PREFETCH), run_bytes);
            if (!shared_value) kc__prefetch_row_l2(v_base + kb, run_bytes);
            if (widen)
                KC_OPS_UNROLL for (int j = 0; j < 16; j++) for (int d = 0; d < HK; d++)
                    _mm512_store_ps(kt + j * head_dim + 16 * d, kc__kv_load16(kb + j * KR, d));
            for (int g = 0; g < group; g++) {
                const float *qg = q + (size_t)g * head_dim;
                __m512 acc[16];
                KC_OPS_UNROLL for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
                for (int d = 0; d < HK; d++) {
                    const __m512 qv = _mm512_loadu_ps(qg + 16 * d);
                    if (widen)
                        KC_OPS_UNROLL for (int j = 0; j < 16; j++)
                            acc[j] = _mm512_fmadd_ps(qv, _mm512_load_ps(kt + j * head_dim + 16 * d), acc[j]);
                    else
                        KC_OPS_UNROLL for (int j = 0; j < 16; j++)
                            acc[j] = _mm512_fmadd_ps(qv, kc__kv_load16(kb + j * KR, d), acc[j]);
                }
                _mm512_mask_storeu_ps(scores + (size_t)g * n + (p - p0), rows,
                                      _mm512_mul_ps(kc__hsum16x16(acc), _mm512_set1_ps(scale)));
            }
        }
        for (int g = 0; g < group; g++) {
            float *sc = scores + (size_t)g * n;
            if (softcap > 0.0f)
                for (int i = 0; i < n; i++) sc[i] = softcap * tanhf(sc[i] / softcap);
            __m512 mv = _mm512_set1_ps(-INFINITY);
            int i = 0;
            for (; i + 16 <= n; i += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(sc + i));
            float maxv = _mm512_reduce_max_ps(mv);
            for (; i < n; i++) maxv = sc[i] > maxv ? sc[i] : maxv;
            __m512 sv = _mm512_setzero_ps();
            const __m512 mxv = _mm512_set1_ps(maxv);
            for (i = 0; i + 16 <= n; i += 16) {
                const __m512 e = kc__softmax_exp16(_mm512_sub_ps(_mm512_loadu_ps(sc + i), mxv));
                _mm512_storeu_ps(sc + i, e);
                sv = _mm512_add_ps(sv, e);
            }
            float sum = _mm512_reduce_add_ps(sv);
            for (; i < n; i++) {
                sc[i] = kc__softmax_exp(sc[i] - maxv);
                sum += sc[i];
            }
            m_out[g] = maxv, l_out[g] = sum;
        }
        /* acc[g] = sum_p sc[g][p] * V_p, for heads in chunks of 4 and value
         * dims in chunks of 64 (DV vectors), positions in order */
        for (int g0 = 0; g0 < group; g0 += 4) {
            const int G = group - g0 < 4 ? group - g0 : 4;
            for (int d0 = 0; d0 < HV; d0 += 4) {
                const int DV = HV - d0 < 4 ? HV - d0 : 4;
                __m512 acc[4][4];
                KC_OPS_UNROLL for (int g = 0; g < 4; g++) KC_OPS_UNROLL for (int d = 0; d < 4; d++) acc[g][d] =
                    _mm512_setzero_ps();
#define KC_VROW(v, i)                                                                                           \
    do {                                                                                                      \
        __m512 vv[4];                                                                                         \
        KC_OPS_UNROLL for (int d = 0; d < 4; d++) vv[d] = d < DV ? kc__kv_load16((v), d0 + d) : _mm512_setzero_ps(); \
        KC_OPS_UNROLL for (int g = 0; g < 4; g++) {                                                           \
            if (g >= G) break;                                                                                \
            const __m512 s = _mm512_set1_ps(scores[(size_t)(g0 + g) * n + (i)]);                              \
            KC_OPS_UNROLL for (int d = 0; d < 4; d++) if (d < DV) acc[g][d] = _mm512_fmadd_ps(s, vv[d], acc[g][d]); \
        }                                                                                                     \
    } while (0)
                for (int p = p0; p < pa; p++) KC_VROW(v_base + KC_KROW(p), p - p0);
                for (int p = pa; p < pb; p += 16) {
                    const kc_kv_t *vb = v_base + KC_KROW(p);
                    /* once per run, from L2 (or for shared values, the key rows read above) */
                    if (g0 == 0 && d0 == 0 && p + 16 < pb) kc__prefetch_row(v_base + KC_KROW(p + 16), run_bytes);
                    for (int j = 0; j < 16; j++) KC_VROW(vb + j * KR, p - p0 + j);
                }
                for (int p = pb; p <= p1; p++) KC_VROW(v_base + KC_KROW(p), p - p0);
#undef KC_VROW
                KC_OPS_UNROLL for (int g = 0; g < 4; g++) {
                    if (g >= G) break;
                    KC_OPS_UNROLL for (int d = 0; d < 4; d++) if (d < DV)
                        _mm512_storeu_ps(acc_out + (size_t)(g0 + g) * value_dim + 16 * (d0 + d), acc[g][d]);
                }
            }
        }
        return;
    }
#endif
#if !defined(__AVX512F__) && KC_OPS_AVX2
    /* AVX2: the AVX-512 path's scheme with 8 lanes (runs of 8 positions, the
     * last partial run scored whole, 8 dot products reduced together, the
     * softmax 8 at a time (kc__exp8), values accumulated for up to 4 heads x
     * 32 dims in registers); the rows before the first run take kc_dot. */
    if (head_dim % 8 == 0 && value_dim % 8 == 0 && block_size % 8 == 0) {
        const int HK = head_dim / 8, HV = value_dim / 8;
        const size_t KR = KC_KV_ROW(head_dim), run_bytes = 8 * KR * sizeof(kc_kv_t);
        const int pa = (p0 + 7) / 8 * 8 < p1 + 1 ? (p0 + 7) / 8 * 8 : p1 + 1;
        const int pb = pa + (p1 + 1 - pa) / 8 * 8, ps = pa + (p1 + 1 - pa + 7) / 8 * 8;
        enum { WIDEN_MAX = 256 };
        const int widen = (KC_KV_F16 || KC_KV_Q8 || KC_KV_Q4) && head_dim <= WIDEN_MAX;
        float kt[8 * WIDEN_MAX] __attribute__((aligned(32)));
        for (int p = p0; p < pa; p++) {
            float tmp[KC_KV_MAX_HEAD_DIM];
            const float *k = kc__kv_row(KC_KROW(p), head_dim, tmp);
            for (int g = 0; g < group; g++)
                scores[(size_t)g * n + (p - p0)] = kc_dot(q + (size_t)g * head_dim, k, head_dim) * scale;
        }
        for (int p = pa; p < ps; p += 8) {
            const kc_kv_t *kb = KC_KROW(p);
            const int lanes = p1 + 1 - p < 8 ? p1 + 1 - p : 8;
            if (p + KC_ATTN_PREFETCH <= pos)
                for (size_t o = 0; o < run_bytes; o += 64) _mm_prefetch((const char *)KC_KROW(p + KC_ATTN_PREFETCH) + o, _MM_HINT_T0);
            if (widen)
                for (int j = 0; j < 8; j++) for (int d = 0; d < HK; d++)
                    _mm256_store_ps(kt + j * head_dim + 8 * d, kc__kv_load8(kb + j * KR, d));
            for (int g = 0; g < group; g++) {
                const float *qg = q + (size_t)g * head_dim;
                __m256 acc[8];
                KC_OPS_UNROLL for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
                for (int d = 0; d < HK; d++) {
                    const __m256 qv = _mm256_loadu_ps(qg + 8 * d);
                    if (widen)
                        KC_OPS_UNROLL for (int j = 0; j < 8; j++)
                            acc[j] = _mm256_fmadd_ps(qv, _mm256_load_ps(kt + j * head_dim + 8 * d), acc[j]);
                    else
                        KC_OPS_UNROLL for (int j = 0; j < 8; j++)
                            acc[j] = _mm256_fmadd_ps(qv, kc__kv_load8(kb + j * KR, d), acc[j]);
                }
                float s8[8];
                _mm256_storeu_ps(s8, _mm256_mul_ps(kc__hsum8x8(acc), _mm256_set1_ps(scale)));
                memcpy(scores + (size_t)g * n + (p - p0), s8, sizeof(float) * (size_t)lanes);
            }
        }
        for (int g = 0; g < group; g++) {
            float *sc = scores + (size_t)g * n;
            if (softcap > 0.0f)
                for (int i = 0; i < n; i++) sc[i] = softcap * tanhf(sc[i] / softcap);
            __m256 mv = _mm256_set1_ps(-INFINITY);
            int i = 0;
            for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(sc + i));
            float m8[8], maxv = -INFINITY;
            _mm256_storeu_ps(m8, mv);
            for (int j = 0; j < 8; j++) maxv = m8[j] > maxv ? m8[j] : maxv;
            for (; i < n; i++) maxv = sc[i] > maxv ? sc[i] : maxv;
            __m256 sv = _mm256_setzero_ps();
            const __m256 mxv = _mm256_set1_ps(maxv), lo = _mm256_set1_ps(KC_ATTN_EXP_MIN);
            for (i = 0; i + 8 <= n; i += 8) {
                const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(sc + i), mxv);
                const __m256 e = _mm256_and_ps(_mm256_cmp_ps(x, lo, _CMP_GE_OQ), kc__exp8(x));
                _mm256_storeu_ps(sc + i, e);
                sv = _mm256_add_ps(sv, e);
            }
            float s8[8], sum = 0.0f;
            _mm256_storeu_ps(s8, sv);
            for (int j = 0; j < 8; j++) sum += s8[j];
            for (; i < n; i++) {
                sc[i] = kc__softmax_exp(sc[i] - maxv);
                sum += sc[i];
            }
            m_out[g] = maxv, l_out[g] = sum;
        }
        for (int g0 = 0; g0 < group; g0 += 4) {
            const int G = group - g0 < 4 ? group - g0 : 4;
            for (int d0 = 0; d0 < HV; d0 += 4) {
                const int DV = HV - d0 < 4 ? HV - d0 : 4;
                __m256 acc[4][4];
                KC_OPS_UNROLL for (int g = 0; g < 4; g++) KC_OPS_UNROLL for (int d = 0; d < 4; d++) acc[g][d] =
                    _mm256_setzero_ps();
#define KC_VROW8(v, i)                                                                                        \
    do {                                                                                                      \
        __m256 vv[4];                                                                                         \
        KC_OPS_UNROLL for (int d = 0; d < 4; d++) vv[d] = d < DV ? kc__kv_load8((v), d0 + d) : _mm256_setzero_ps(); \
        KC_OPS_UNROLL for (int g = 0; g < 4; g++) {                                                           \
            if (g >= G) break;                                                                                \
            const __m256 s = _mm256_set1_ps(scores[(size_t)(g0 + g) * n + (i)]);                              \
            KC_OPS_UNROLL for (int d = 0; d < 4; d++) if (d < DV) acc[g][d] = _mm256_fmadd_ps(s, vv[d], acc[g][d]); \
        }                                                                                                     \
    } while (0)
                for (int p = p0; p < pa; p++) KC_VROW8(v_base + KC_KROW(p), p - p0);
                for (int p = pa; p < pb; p += 8) {
                    const kc_kv_t *vb = v_base + KC_KROW(p);
                    if (g0 == 0 && d0 == 0 && p + 8 < pb)
                        for (size_t o = 0; o < run_bytes; o += 64) _mm_prefetch((const char *)(v_base + KC_KROW(p + 8)) + o, _MM_HINT_T0);
                    for (int j = 0; j < 8; j++) KC_VROW8(vb + j * KR, p - p0 + j);
                }
                for (int p = pb; p <= p1; p++) KC_VROW8(v_base + KC_KROW(p), p - p0);
#undef KC_VROW8
                KC_OPS_UNROLL for (int g = 0; g < 4; g++) {
                    if (g >= G) break;
                    KC_OPS_UNROLL for (int d = 0; d < 4; d++) if (d < DV)
                        _mm256_storeu_ps(acc_out + (size_t)(g0 + g) * value_dim + 8 * (d0 + d), acc[g][d]);
                }
            }
        }
        return;
    }
#endif
    float tmp[KC_KV_MAX_HEAD_DIM];
    for (int p = p0; p <= p1; p++) {
        const float *k = kc__kv_row(KC_KROW(p), head_dim, tmp);
        for (int g = 0; g < group; g++) {
            float s = kc_dot(q + (size_t)g * head_dim, k, head_dim) * scale;
            if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
            scores[(size_t)g * n + (p - p0)] = s;
        }
    }
    for (int g = 0; g < group; g++) {
        float *sc = scores + (size_t)g * n;
        float maxv = -INFINITY;
        for (int i = 0; i < n; i++) maxv = sc[i] > maxv ? sc[i] : maxv;
        float sum = 0.0f;
        for (int i = 0; i < n; i++) {
            sc[i] = kc__softmax_exp(sc[i] - maxv);
            sum += sc[i];
        }
        m_out[g] = maxv, l_out[g] = sum;
        memset(acc_out + (size_t)g * value_dim, 0, sizeof(float) * value_dim);
    }
    for (int p = p0; p <= p1; p++) {
        const float *v = kc__kv_row(v_base + KC_KROW(p), value_dim, tmp);
        for (int g = 0; g < group; g++)
            kc_axpy(scores[(size_t)g * n + (p - p0)], v, acc_out + (size_t)g * value_dim, value_dim);
    }
#undef KC_KROW
}

/* Folds chunk c's partial into the running result: out ([group][value_dim])
 * holds the weighted sums so far and ml ([group] maxima, then [group] sums)
 * their softmax state. Chunk 0 initializes them. Each later chunk rescales
 * the side with the smaller maximum by exp(its max - the new max) (exactly 1
 * for the other side). */
static inline void kc_attend_merge(int group, int value_dim, int c, const float *part, float *out, float *ml) {
    const float *acc = part, *m = part + (size_t)group * value_dim, *l = m + group;
    float *M = ml, *L = ml + group;
    if (c == 0) {
        memcpy(out, acc, sizeof(float) * group * value_dim);
        memcpy(M, m, sizeof(float) * group);
        memcpy(L, l, sizeof(float) * group);
        return;
    }
    for (int g = 0; g < group; g++) {
        const float mx = m[g] > M[g] ? m[g] : M[g];
        const float a = kc__softmax_exp(M[g] - mx), b = kc__softmax_exp(m[g] - mx);
        L[g] = L[g] * a + l[g] * b;
        float *o = out + (size_t)g * value_dim;
        const float *x = acc + (size_t)g * value_dim;
        for (int d = 0; d < value_dim; d++) o[d] = o[d] * a + x[d] * b;
        M[g] = mx;
    }
}

/* The merged result divided by the softmax's sum: the attention output (for
 * shared values in a q4 cache, rotated back each 32 values). sinks (one
 * logit per head of the group, or NULL): gpt-oss's attention sinks, a logit
 * that joins the softmax's sum and weighs no value: with the maximum
 * M' = max(M, sink), out = acc e^(M - M') / (L e^(M - M') + e^(sink - M')),
 * as the reference's softmax over the scores and the sink together. */
static inline void kc_attend_finish(int group, int value_dim, int shared_value, const float *sinks, float *out,
                                    const float *ml) {
    for (int g = 0; g < group; g++) {
        float inv = 1.0f / ml[group + g];
        if (sinks) {
            const float m = ml[g], mx = sinks[g] > m ? sinks[g] : m;
            const float a = kc__softmax_exp(m - mx);
            inv = a / (ml[group + g] * a + kc__softmax_exp(sinks[g] - mx));
        }
        for (int d = 0; d < value_dim; d++) out[(size_t)g * value_dim + d] *= inv;
#if KC_KV_Q4
        if (shared_value) kc_kv_q4_unrotate_row(out + (size_t)g * value_dim, value_dim);
#endif
    }
#if !KC_KV_Q4
    (void)shared_value;
#endif
}

/* The whole attention of one token and KV head group, chunk after chunk:
 * out is [group][value_dim]; sinks: as kc_attend_finish; scratch holds KC_ATTN_SCRATCH(group, head_dim, value_dim)
 * floats. */
KC_OPS_INLINE void kc_attend_kv(const kc_kv_t *kv, int n_layers, int layer, int n_blocks, int kv_heads,
                                int block_size, int head_dim, int value_dim, int shared_value,
                                const int32_t *block_table, int kv_head, int group, int first, int pos,
                                const float *q, float scale, float softcap, const float *sinks, float *scratch,
                                float *out) {
    float *scores = scratch, *part = scores + KC_ATTN_SCORES(group, head_dim), *ml = part + KC_ATTN_PART(group, value_dim);
    const int nc = kc_attn_chunks(first, pos);
    for (int c = 0; c < nc; c++) {
        kc_attend_chunk(kv, n_layers, layer, n_blocks, kv_heads, block_size, head_dim, value_dim, shared_value,
                        block_table, kv_head, group, first, pos, c, q, scale, softcap, scores, part);
        kc_attend_merge(group, value_dim, c, part, out, ml);
    }
    kc_attend_finish(group, value_dim, shared_value, sinks, out, ml);
}

/* Attention with separate K and V rows of head_dim each (every family but MLA). */
KC_OPS_INLINE void kc_attend(const kc_kv_t *kv, int n_layers, int layer, int n_blocks, int kv_heads,
                             int block_size, int head_dim, const int32_t *block_table, int kv_head,
                             int group, int first, int pos, const float *q, float scale,
                             float softcap, float *scratch, float *out) {
    kc_attend_kv(kv, n_layers, layer, n_blocks, kv_heads, block_size, head_dim, head_dim, 0, block_table, kv_head,
                 group, first, pos, q, scale, softcap, NULL, scratch, out);
}

#endif
