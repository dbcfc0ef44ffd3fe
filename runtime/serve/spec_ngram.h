/* spec_ngram.h — prompt-lookup drafting for speculative decoding (ngram_ prefix).
 *
 * No second model: when a sequence's last n tokens occurred earlier in it
 * (prompt or generated text), the tokens that followed that occurrence are a
 * good guess for what follows now — summaries quote their source, code edits
 * repeat the code. The longest n in [n_min, n_max] with a match wins, and of
 * its matches the most recent one.
 */
#ifndef INGOT_SPEC_NGRAM_H
#define INGOT_SPEC_NGRAM_H

#include <stdint.h>

/* Writes up to k proposed next tokens of tokens[0..n) to draft; returns how
 * many (0: no earlier occurrence of any suffix of length n_min..n_max). */
int ngram_propose(const int32_t *tokens, int n, int n_min, int n_max, int k, int32_t *draft);

#endif
