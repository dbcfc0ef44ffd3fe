/* kc_rope.h — RoPE tables with the context-extension schemes configs ask for:
 * none, linear, llama3 and yarn, computed the way the Hugging Face reference
 * computes its inv_freq (in f32) so that logits match it. */
#ifndef INGOT_KC_ROPE_H
#define INGOT_KC_ROPE_H

#include <math.h>
#include <stddef.h>

typedef enum { KC_ROPE_DEFAULT, KC_ROPE_LINEAR, KC_ROPE_LLAMA3, KC_ROPE_YARN } kc_rope_type;

typedef struct {
    kc_rope_type type;
    double theta;
    double factor;              /* linear, llama3, yarn */
    double low_freq_factor;     /* llama3 */
    double high_freq_factor;    /* llama3 */
    double original_max_pos;    /* llama3, yarn: the context the model was trained on */
    double beta_fast, beta_slow;/* yarn: rotation counts bounding the blend */
    double attention_factor;    /* yarn: cos/sin scale; <= 0 derives 0.1 ln(factor) + 1 */
    int freq_dim;               /* the frequencies' dimension, theta^(-2i / freq_dim); 0: rot_dim. An
                                   odd partial rotary width d rotates d + 1 columns at d's frequencies
                                   (transformers' tables have 2 ceil(d / 2) columns) */
    int no_truncate;            /* yarn: 1 keeps the ramp's bounds fractional (transformers' truncate =
                                   false, as gpt-oss's config says); 0 rounds them out (floor, ceil) */
} kc_rope_params;

/* inv_freq[i] for i < rot_dim/2, in f32 as the reference rounds it. */
static inline void kc_rope_inv_freq(const kc_rope_params *p, int rot_dim, float *inv_freq) {
    const int half = rot_dim / 2;
    const int freq_dim = p->freq_dim > 0 ? p->freq_dim : rot_dim;
    for (int i = 0; i < half; i++) {
        const float expo = (float)(2 * i) / (float)freq_dim;
        inv_freq[i] = 1.0f / powf((float)p->theta, expo);
    }
    if (p->type == KC_ROPE_LINEAR) {
        for (int i = 0; i < half; i++) inv_freq[i] = inv_freq[i] / (float)p->factor;
    } else if (p->type == KC_ROPE_LLAMA3) {
        /* long wavelengths are divided by factor, short ones kept, the band
         * between blended linearly in (original context / wavelength) */
        const float factor = (float)p->factor, lo = (float)p->low_freq_factor, hi = (float)p->high_freq_factor;
        const float old_ctx = (float)p->original_max_pos;
        const float low_wavelen = old_ctx / lo, high_wavelen = old_ctx / hi;
        for (int i = 0; i < half; i++) {
            const float f = inv_freq[i];
            const float wavelen = 2.0f * (float)M_PI / f;
            float scaled = wavelen > low_wavelen ? f / factor : f;
            if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
                const float smooth = (old_ctx / wavelen - lo) / (hi - lo);
                scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
            }
            inv_freq[i] = scaled;
        }
    } else if (p->type == KC_ROPE_YARN) {
        /* dimensions rotating fewer than beta_slow times over the original
         * context are interpolated (divided by factor), more than beta_fast
         * extrapolated (kept), with a linear ramp between */
        const double base = p->theta, dim = freq_dim, ctx = p->original_max_pos;
        const double beta_fast = p->beta_fast > 0 ? p->beta_fast : 32.0;
        const double beta_slow = p->beta_slow > 0 ? p->beta_slow : 1.0;
        double low = dim * log(ctx / (beta_fast * 2 * M_PI)) / (2 * log(base));
        double high = dim * log(ctx / (beta_slow * 2 * M_PI)) / (2 * log(base));
        if (!p->no_truncate) low = floor(low), high = ceil(high);
        if (low < 0) low = 0;
        if (high > dim - 1) high = dim - 1;
        if (low == high) high += 0.001;
        for (int i = 0; i < half; i++) {
            const float pos_freq = powf((float)base, (float)(2 * i) / (float)freq_dim);
            const float extrap = 1.0f / pos_freq;
            const float interp = 1.0f / ((float)p->factor * pos_freq);
            float ramp = ((float)i - (float)low) / (float)(high - low);
            ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
            const float extrap_factor = 1.0f - ramp;
            inv_freq[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
        }
    }
}

/* The cos/sin scale: yarn's attention factor, 1 otherwise. */
static inline double kc_rope_attention_scale(const kc_rope_params *p) {
    if (p->type != KC_ROPE_YARN) return 1.0;
    if (p->attention_factor > 0) return p->attention_factor;
    return p->factor > 1 ? 0.1 * log(p->factor) + 1.0 : 1.0;
}

/* Fills [max_ctx][rot_dim/2][2] (cos, sin) for positions 0..max_ctx-1:
 * angle = f32(pos) * inv_freq, as the reference's f32 outer product. */
/* freq_factors (rot_dim / 2 values, or NULL): each frequency divided by its
 * factor, as llama.cpp applies a GGUF's rope_freqs tensor (Llama 3.1's
 * frequency scaling stored as data rather than config). */
static inline void kc_rope_table_ex(float *cos_sin, int max_ctx, int rot_dim, const kc_rope_params *p,
                                    const float *freq_factors) {
    const int half = rot_dim / 2;
    float inv_freq[512];
    kc_rope_inv_freq(p, rot_dim < 1024 ? rot_dim : 1024, inv_freq);
    if (freq_factors)
        for (int i = 0; i < half && i < 512; i++) inv_freq[i] /= freq_factors[i];
    const float scale = (float)kc_rope_attention_scale(p);
    for (int i = 0; i < half && i < 512; i++) {
        for (int pos = 0; pos < max_ctx; pos++) {
            const float ang = (float)pos * inv_freq[i];
            cos_sin[(size_t)pos * rot_dim + 2 * i] = (float)cos((double)ang) * scale;
            cos_sin[(size_t)pos * rot_dim + 2 * i + 1] = (float)sin((double)ang) * scale;
        }
    }
}

#endif
