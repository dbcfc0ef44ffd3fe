/* sampler.h — next-token selection from logits (samp_ prefix).
 *
 * Order of operations (as the common engines apply them): the request's
 * logit biases added to the raw logits, then penalties on them (repetition, presence, frequency, over the tokens seen so far),
 * then temperature; temperature 0 is greedy (argmax, lowest id on ties);
 * otherwise top-k, top-p and min-p filter the softmax and one token is drawn
 * with the sampler's own seeded generator, so a seed reproduces a run.
 */
#ifndef INGOT_SAMPLER_H
#define INGOT_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    float temperature;        /* 0: greedy */
    int top_k;                /* 0: off */
    float top_p;              /* 1: off */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off; >1 discourages seen tokens (divides positive logits) */
    float presence_penalty;   /* 0: off; subtracted once per seen token */
    float frequency_penalty;  /* 0: off; subtracted per occurrence */
    uint64_t seed;
    const int32_t *bias_ids;  /* logit_bias: bias_values[i] is added to the logit of bias_ids[i] */
    const float *bias_values; /* (copied by samp_init; -100 bans a token, +100 all but forces it) */
    int n_bias;
} samp_params;

typedef struct {
    samp_params p;
    uint64_t rng;
    int vocab;
    float *probs; /* [vocab] scratch */
    int *order;   /* [vocab] scratch */
    int *counts;  /* [vocab] occurrences in the history, for penalties */
    int32_t *bias_ids; /* owned copies of p.bias_* */
    float *bias_values;
    float *dist;  /* [vocab] scratch: the filtered distribution, for speculative verification */
} samp_sampler;

samp_params samp_default_params(void);
int samp_init(samp_sampler *s, int vocab, const samp_params *p); /* -1 on allocation failure */
void samp_free(samp_sampler *s);
/* Picks the next token; may modify logits in place. history: every token of
 * the sequence so far (prompt and generated), for the penalties. */
int samp_sample(samp_sampler *s, float *logits, const int32_t *history, size_t n_history);
/* log-softmax of logits[id] (for logprobs and perplexity), in double. */
double samp_logprob(const float *logits, int vocab, int id);
int samp_argmax(const float *logits, int vocab);

/* Speculative decoding: decides on one drafted token at the position whose
 * logits these are, so that the token returned is distributed exactly as
 * samp_sample's (greedy: it is samp_sample's). The logits get the same
 * processing (bias, penalties over history, temperature, top-k/top-p/min-p).
 * draft_probs: the drafter's distribution over the vocabulary, or NULL for a
 * point mass on draft (n-gram drafts). *accepted is 1 when the token returned
 * is the draft taken as proposed (later drafts may then be checked), 0 when
 * it replaces it (the rest of the draft is void). Draws from the sampler's
 * own generator, so a seeded request stays reproducible. */
int samp_verify(samp_sampler *s, float *logits, const int32_t *history, size_t n_history, int draft,
                const float *draft_probs, int *accepted);
/* A draft model's proposal: processes the draft's logits as samp_sample
 * would and draws a token from the result with the sampler's generator;
 * dist (vocab floats) receives the distribution it was drawn from, which
 * samp_verify needs as draft_probs. Greedy: the argmax, and dist is left
 * alone (greedy verification needs no distribution). */
int samp_draft(samp_sampler *s, float *logits, const int32_t *history, size_t n_history, float *dist);
/* The acceptance rule itself, given its two uniform draws in [0, 1): accept
 * the draft when u1 * q(draft) < p(draft), i.e. with probability
 * min(1, p/q); otherwise draw with u2 from norm(max(0, p - q)). p and q are
 * distributions over vocab tokens; q NULL is the point mass on draft (then
 * a rejection draws from p with the draft removed). Returns the token. */
int samp_spec_pick(const float *p, const float *q, int vocab, int draft, double u1, double u2, int *accepted);

#endif
