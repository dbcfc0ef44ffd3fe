/* hugealloc.h — large buffers on transparent huge pages (ha_ prefix).
 *
 * Decode reads every weight once per token, in one stream per matmul. On 4 KiB
 * pages that stream crosses a page, and so needs a TLB entry and a fresh
 * start of the hardware prefetchers, every 4 KiB; on 2 MiB pages it does not.
 * On SmolLM2-135M Q4_1 (2-core Xeon, 1 thread) decode went from 53-58 to
 * 67-69 tokens/s with the weights copied from the file mapping into huge
 * pages. Weights, the KV pool and the scratch arena are
 * allocated here.
 *
 * The kernel grants huge pages only to 2 MiB-aligned ranges it was asked to
 * (transparent_hugepage "madvise", the common default) or to every large
 * range ("always"); where it grants none the buffer is ordinary memory and
 * everything still works.
 */
#ifndef INGOT_HUGEALLOC_H
#define INGOT_HUGEALLOC_H

#include <stddef.h>

#define HA_PAGE ((size_t)2 << 20)

/* bytes of zeroed memory, 2 MiB-aligned, huge pages requested; NULL when
 * out of memory (bytes == 0 also gives a valid, freeable buffer). */
void *ha_alloc(size_t bytes);
/* Frees a buffer of ha_alloc (p may be NULL); bytes as allocated. */
void ha_free(void *p, size_t bytes);
/* Drops this process's page-table entries for the whole pages inside
 * [p, p + bytes) of a read-only file mapping it has copied and will not read
 * again: the copy no longer counts twice in its resident memory (the file's
 * pages stay in the page cache, and a later read would fault them back in). */
void ha_forget_mapped(const void *p, size_t bytes);
/* Bytes of this process's memory on transparent huge pages now
 * (AnonHugePages of /proc/self/smaps_rollup), or -1 if the kernel does not say. */
long long ha_process_huge_bytes(void);

#endif
