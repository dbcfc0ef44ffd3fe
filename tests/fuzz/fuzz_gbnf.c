/* fuzz_gbnf.c — a GBNF grammar (runtime/serve/grammar_parse.c, grammar.c): compiled, then a matcher fed bytes
 * from the grammar text's own literals' alphabet until it refuses. */
#include "fuzz_common.h"
#include "grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char err[256];
    gram_grammar *g = gram_compile((const char *)data, n, err, sizeof err);
    if (!g) return 0;
    gram_matcher *m = gram_matcher_new(g, err, sizeof err);
    if (m) {
        /* walk the input's own bytes: what a grammar names is likely what it accepts */
        for (size_t i = 0; i < n && i < 256; i++)
            if (gram_accept_bytes(m, (const char *)data + i, 1) != 0) break;
        (void)gram_is_complete(m);
        gram_matcher_free(m);
    }
    gram_free(g);
    return 0;
}
