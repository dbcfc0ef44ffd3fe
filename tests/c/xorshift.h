/* xorshift.h — the C unit tests' deterministic random numbers (xorshift64).
 * A test sets rng_state first when it wants a sequence of its own. */
#ifndef INGOT_TEST_XORSHIFT_H
#define INGOT_TEST_XORSHIFT_H

#include <stdint.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static float rndf(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0); } /* [-1,1) */
static int rndi(int lo, int hi) { return lo + (int)(rnd() % (uint64_t)(hi - lo + 1)); }        /* [lo,hi] */

#endif
