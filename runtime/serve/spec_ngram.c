/* spec_ngram.c — prompt-lookup drafting: the continuation of the latest earlier match of the last n tokens. */
#include "spec_ngram.h"

#include <string.h>

int ngram_propose(const int32_t *tokens, int n, int n_min, int n_max, int k, int32_t *draft) {
    if (k <= 0 || n_min < 1) return 0;
    for (int g = n_max < n - 1 ? n_max : n - 1; g >= n_min; g--) {
        const int32_t *suffix = tokens + n - g;
        /* an occurrence starting at p is followed by tokens[p + g]; p + g < n
         * keeps at least one token after it, and p < n - g excludes the suffix itself */
        for (int p = n - g - 1; p >= 0; p--) {
            if (tokens[p] != suffix[0] || memcmp(tokens + p, suffix, sizeof(int32_t) * (size_t)g) != 0) continue;
            int m = n - (p + g);
            if (m > k) m = k;
            memcpy(draft, tokens + p + g, sizeof(int32_t) * (size_t)m);
            return m;
        }
    }
    return 0;
}
