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

#endif
