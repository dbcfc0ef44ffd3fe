/* sampler.c — next-token selection: penalties, temperature, top-k/top-p/min-p, seeded draws. */
#include "sampler.h"

#include <math.h>
#if defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

samp_params samp_default_params(void) {
    samp_params p = {0};
    p.temperature = 0.0f;
    p.top_p = 1.0f;
    p.repetition_penalty = 1.0f;
    p.seed = 0x5eed;
    return p;
}

/* splitmix64: a small, well-mixed generator; the seed alone fixes the stream. */
static uint64_t samp_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double samp_uniform(uint64_t *state) { return (double)(samp_next(state) >> 11) * 0x1.0p-53; }

int samp_init(samp_sampler *s, int vocab, const samp_params *p) {
    memset(s, 0, sizeof *s);
    s->p = *p;
    s->rng = p->seed;
    s->vocab = vocab;
    s->probs = malloc(sizeof(float) * (size_t)vocab);
    s->order = malloc(sizeof(int) * (size_t)vocab);
    s->counts = calloc((size_t)vocab, sizeof(int));
    s->dist = malloc(sizeof(float) * (size_t)vocab);
    if (!s->probs || !s->order || !s->counts || !s->dist) {
        samp_free(s);
        return -1;
    }
    if (p->n_bias > 0) { /* the caller's arrays need not outlive this call */
        s->bias_ids = malloc(sizeof(int32_t) * (size_t)p->n_bias);
        s->bias_values = malloc(sizeof(float) * (size_t)p->n_bias);
        if (!s->bias_ids || !s->bias_values) {
            samp_free(s);
            return -1;
        }
        memcpy(s->bias_ids, p->bias_ids, sizeof(int32_t) * (size_t)p->n_bias);
        memcpy(s->bias_values, p->bias_values, sizeof(float) * (size_t)p->n_bias);
    }
    s->p.bias_ids = s->bias_ids;
    s->p.bias_values = s->bias_values;
    return 0;
}

void samp_free(samp_sampler *s) {
    free(s->probs);
    free(s->order);
    free(s->counts);
    free(s->bias_ids);
    free(s->bias_values);
    free(s->dist);
    s->dist = NULL;
    s->probs = NULL;
    s->order = NULL;
    s->counts = NULL;
    s->bias_ids = NULL;
    s->bias_values = NULL;
}

/* The first index of the largest logit, as a scan keeping the strictly larger would find it
 * (a NaN never wins; one at index 0 returns 0). In two passes that vectorize, the largest value
 * and then its first index: the scan carried a load and a compare through every element, about
 * 100 us for a 49152-entry vocabulary, 6% of a 16-sequence decode step (SmolLM2, perf). */
int samp_argmax(const float *logits, int vocab) {
    if (vocab <= 1 || isnan(logits[0])) return 0;
    float m = logits[0];
    int i = 1;
#if defined(__AVX512F__)
    __m512 vm = _mm512_set1_ps(m);
    for (; i + 16 <= vocab; i += 16) vm = _mm512_max_ps(_mm512_loadu_ps(logits + i), vm); /* a NaN keeps vm */
    m = _mm512_reduce_max_ps(vm);
#elif defined(__AVX__)
    __m256 vm = _mm256_set1_ps(m);
    for (; i + 8 <= vocab; i += 8) vm = _mm256_max_ps(_mm256_loadu_ps(logits + i), vm);
    float lanes[8];
    _mm256_storeu_ps(lanes, vm);
    for (int k = 0; k < 8; k++) m = lanes[k] > m ? lanes[k] : m;
#endif
    for (; i < vocab; i++) m = logits[i] > m ? logits[i] : m;
    for (i = 0; i < vocab; i++)
        if (logits[i] == m) return i;
    return 0;
}

double samp_logprob(const float *logits, int vocab, int id) {
    double maxv = logits[0];
    for (int i = 1; i < vocab; i++)
        if (logits[i] > maxv) maxv = logits[i];
    double sum = 0.0;
    for (int i = 0; i < vocab; i++) sum += exp((double)logits[i] - maxv);
    return (double)logits[id] - maxv - log(sum);
}

static void samp_penalize(samp_sampler *s, float *logits, const int32_t *hist, size_t n) {
    const samp_params *p = &s->p;
    if (p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f)
        return;
    for (size_t i = 0; i < n; i++)
        if (hist[i] >= 0 && hist[i] < s->vocab) s->counts[hist[i]]++;
    for (size_t i = 0; i < n; i++) {
        const int id = hist[i];
        if (id < 0 || id >= s->vocab || s->counts[id] == 0) continue;
        float l = logits[id];
        if (p->repetition_penalty != 1.0f)
            l = l > 0 ? l / p->repetition_penalty : l * p->repetition_penalty;
        l -= p->presence_penalty + p->frequency_penalty * (float)s->counts[id];
        logits[id] = l;
        s->counts[id] = 0; /* each distinct token once; also resets for the next call */
    }
}

static const float *samp_sort_key;
static int samp_by_prob_desc(const void *a, const void *b) {
    const float pa = samp_sort_key[*(const int *)a], pb = samp_sort_key[*(const int *)b];
    if (pa != pb) return pa < pb ? 1 : -1;
    return *(const int *)a - *(const int *)b;
}

/* Bias, penalties and temperature; then the candidates (top-k, min-p,
 * top-p) sorted by probability in s->order[0..n). Returns n and their total
 * probability in *total; -1 for greedy (temperature 0: nothing computed
 * beyond the processed logits). */
static int samp_candidates(samp_sampler *s, float *logits, const int32_t *history, size_t n_history,
                           double *total_out) {
    for (int i = 0; i < s->p.n_bias; i++)
        if (s->bias_ids[i] >= 0 && s->bias_ids[i] < s->vocab) logits[s->bias_ids[i]] += s->bias_values[i];
    samp_penalize(s, logits, history, n_history);
    const int V = s->vocab;
    if (s->p.temperature <= 0.0f) return -1;

    /* Softmax at temperature, in f32 with the max subtracted. */
    float maxv = logits[samp_argmax(logits, V)];
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        s->probs[i] = expf((logits[i] - maxv) / s->p.temperature);
        sum += s->probs[i];
    }
    for (int i = 0; i < V; i++) s->probs[i] = (float)(s->probs[i] / sum);

    /* Candidates sorted by probability; top-k, min-p and top-p cut the tail. */
    int n = 0;
    const float floor_p = s->p.min_p > 0.0f ? s->p.min_p * s->probs[samp_argmax(s->probs, V)] : 0.0f;
    for (int i = 0; i < V; i++)
        if (s->probs[i] >= floor_p && s->probs[i] > 0.0f) s->order[n++] = i;
    samp_sort_key = s->probs;
    qsort(s->order, (size_t)n, sizeof(int), samp_by_prob_desc);
    if (s->p.top_k > 0 && n > s->p.top_k) n = s->p.top_k;
    if (s->p.top_p < 1.0f) {
        double cum = 0.0;
        for (int i = 0; i < n; i++) {
            cum += s->probs[s->order[i]];
            if (cum >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    double total = 0.0;
    for (int i = 0; i < n; i++) total += s->probs[s->order[i]];
    *total_out = total;
    return n;
}

int samp_sample(samp_sampler *s, float *logits, const int32_t *history, size_t n_history) {
    double total;
    const int n = samp_candidates(s, logits, history, n_history, &total);
    if (n < 0) return samp_argmax(logits, s->vocab);
    double r = samp_uniform(&s->rng) * total;
    for (int i = 0; i < n; i++) {
        r -= s->probs[s->order[i]];
        if (r <= 0.0) return s->order[i];
    }
    return s->order[n > 0 ? n - 1 : 0];
}

int samp_draft(samp_sampler *s, float *logits, const int32_t *history, size_t n_history, float *dist) {
    double total;
    const int n = samp_candidates(s, logits, history, n_history, &total);
    if (n < 0) return samp_argmax(logits, s->vocab);
    memset(dist, 0, sizeof(float) * (size_t)s->vocab);
    for (int i = 0; i < n; i++) dist[s->order[i]] = (float)(s->probs[s->order[i]] / total);
    /* the draw walks the same normalised values it reports, so the token is distributed exactly as dist */
    double r = samp_uniform(&s->rng);
    int last = s->order[0];
    for (int i = 0; i < n; i++) {
        const int id = s->order[i];
        if (dist[id] <= 0.0f) continue;
        last = id;
        r -= dist[id];
        if (r < 0.0) return id;
    }
    return last;
}

int samp_spec_pick(const float *p, const float *q, int vocab, int draft, double u1, double u2, int *accepted) {
    const double qd = q ? q[draft] : 1.0;
    if (u1 * qd < (double)p[draft]) {
        *accepted = 1;
        return draft;
    }
    *accepted = 0;
    /* the residual max(0, p - q): what p puts where the drafter under-proposes */
    double sum = 0.0;
    int last = -1;
    for (int i = 0; i < vocab; i++) {
        const double r = (double)p[i] - (q ? (double)q[i] : (i == draft ? 1.0 : 0.0));
        if (r > 0.0) {
            sum += r;
            last = i;
        }
    }
    if (last < 0) return draft; /* p == q: a rejection has probability 0; rounding got here */
    double r = u2 * sum;
    for (int i = 0; i < vocab; i++) {
        const double ri = (double)p[i] - (q ? (double)q[i] : (i == draft ? 1.0 : 0.0));
        if (ri <= 0.0) continue;
        r -= ri;
        if (r < 0.0) return i;
    }
    return last;
}

int samp_verify(samp_sampler *s, float *logits, const int32_t *history, size_t n_history, int draft,
                const float *draft_probs, int *accepted) {
    double total;
    const int n = samp_candidates(s, logits, history, n_history, &total);
    if (n < 0) { /* greedy: the argmax is the only token plain decoding can emit */
        const int tok = samp_argmax(logits, s->vocab);
        *accepted = tok == draft;
        return tok;
    }
    /* p as samp_sample draws from it: the candidates, renormalised */
    memset(s->dist, 0, sizeof(float) * (size_t)s->vocab);
    for (int i = 0; i < n; i++) s->dist[s->order[i]] = (float)(s->probs[s->order[i]] / total);
    const double u1 = samp_uniform(&s->rng);
    double u2 = 0.0;
    const double qd = draft_probs ? draft_probs[draft] : 1.0;
    if (!(u1 * qd < (double)s->dist[draft])) u2 = samp_uniform(&s->rng); /* drawn only on a rejection */
    return samp_spec_pick(s->dist, draft_probs, s->vocab, draft, u1, u2, accepted);
}
