/* byte_count.h — the byte counts operators write on command lines and in the environment
 * (serve's --memory-budget and INGOT_MEMORY_BUDGET, the router's --memory-budget and --max-body):
 * both read them alike. */
#ifndef INGOT_BYTE_COUNT_H
#define INGOT_BYTE_COUNT_H

/* s as a number of bytes: a non-negative number with an optional binary suffix K, M, G or T
 * (KiB ... TiB; "i" and "B" may follow: 512M, 4GiB, 1.5G, 100B), rounded down, at most 1e18.
 * 0, or -1 when s is anything else. */
int byte_count_parse(const char *s, double *out);

#endif
