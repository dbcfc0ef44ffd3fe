/* check.h — the C unit tests' checks and their closing line.
 *
 * CHECK(cond, fmt, ...) records one check with its file and line; check(ok,
 * fmt, ...) the same without them. Only failures are printed (the first 40),
 * and check_summary() prints the closing "N passed, N failed" line the test
 * runner reads and returns the exit status. */
#ifndef INGOT_TEST_CHECK_H
#define INGOT_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int n_pass, n_fail;

#define CHECK(cond, ...) do { \
    if (cond) n_pass++; \
    else { n_fail++; if (n_fail <= 40) { printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } \
} while (0)

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    if (ok) {
        n_pass++;
        return;
    }
    if (++n_fail > 40) return;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static int check_summary(void) {
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}

#endif
