/* threadpool.h — a fixed pool of worker threads for data-parallel loops (tp_ prefix).
 *
 * tp_parallel_for splits [0, n) into contiguous chunks of at least `grain`
 * items, runs fn on them across the pool (the caller's thread takes part) and
 * returns when all are done. No allocation per call. Not reentrant: a task
 * must not call tp_parallel_for on the same pool.
 */
#ifndef INGOT_THREADPOOL_H
#define INGOT_THREADPOOL_H

#include <stdint.h>

typedef struct tp_pool tp_pool;
typedef void (*tp_fn)(void *ctx, int64_t begin, int64_t end, int thread_id);

tp_pool *tp_create(int n_threads); /* n_threads >= 1, includes the caller */
void tp_free(tp_pool *p);
int tp_size(const tp_pool *p);
void tp_parallel_for(tp_pool *p, int64_t n, int64_t grain, tp_fn fn, void *ctx);

#endif
