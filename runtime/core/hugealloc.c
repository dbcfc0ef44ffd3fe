/* hugealloc.c — large buffers on transparent huge pages (see hugealloc.h). */
#include "hugealloc.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

void *ha_alloc(size_t bytes) {
    const size_t len = round_up(bytes ? bytes : 1, HA_PAGE);
    if (len < bytes || len > SIZE_MAX - HA_PAGE) return NULL;
    /* over-allocate by one huge page and trim both ends, so the buffer
     * starts on a 2 MiB boundary (an unaligned start would leave the first
     * and last partial 2 MiB on small pages) */
    unsigned char *raw = mmap(NULL, len + HA_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    unsigned char *p = (unsigned char *)round_up((uintptr_t)raw, HA_PAGE);
    if (p > raw) munmap(raw, (size_t)(p - raw));
    const size_t tail = (size_t)(raw + len + HA_PAGE - (p + len));
    if (tail) munmap(p + len, tail);
    /* advice, not a requirement: a kernel without THP leaves small pages */
    (void)madvise(p, len, MADV_HUGEPAGE);
    return p;
}

void ha_free(void *p, size_t bytes) {
    if (p) munmap(p, round_up(bytes ? bytes : 1, HA_PAGE));
}

void ha_forget_mapped(const void *p, size_t bytes) {
    const size_t page = 4096;
    const uintptr_t start = round_up((uintptr_t)p, page), end = ((uintptr_t)p + bytes) / page * page;
    if (end > start) (void)madvise((void *)start, end - start, MADV_DONTNEED);
}

long long ha_process_huge_bytes(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}
