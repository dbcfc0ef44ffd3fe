/* intake.h — a request's CPU work (JSON parsing, the chat template, tokenizing, grammar
 * compilation) on worker threads, so that the event-loop thread only moves bytes.
 *
 * One expensive request (a schema bomb, 100,000 messages, a 1 MB prompt) costs a worker some
 * milliseconds; on the event loop it would delay every other client's bytes, /health included.
 *
 *   loop:   job->work = prepare; job->done = finish; intake_submit(pool, job)
 *   worker: work(job)                         (touches only the job and immutable server state)
 *   loop:   done(job)                         (after work, in submission order per worker)
 *
 * Bounded: at most max_queued jobs wait or run; intake_submit refuses more (the server answers
 * 503). Threads: intake_new, intake_submit, intake_pending and intake_free belong to the loop
 * thread; done runs there too, from the pool's own event. The hand-off is a mutex-guarded queue
 * each way and event_active (thread-safe once evthread_use_pthreads() ran).
 */
#ifndef INGOT_INTAKE_H
#define INGOT_INTAKE_H

#include <event2/event.h>

typedef struct intake_job intake_job;
struct intake_job {
    void (*work)(intake_job *job); /* worker thread */
    void (*done)(intake_job *job); /* loop thread, once work returned */
    intake_job *next;              /* the pool's */
};

typedef struct intake_pool intake_pool;

/* n_threads workers (>= 1); NULL with err filled on failure. */
intake_pool *intake_new(struct event_base *base, int n_threads, int max_queued, char *err, size_t errlen);
/* 0: queued; -1: max_queued jobs are already waiting or running (job untouched). */
int intake_submit(intake_pool *p, intake_job *job);
/* Jobs submitted whose done has not run yet. */
int intake_pending(const intake_pool *p);
/* Finishes every job (work, then done on the calling thread), joins the workers, frees. */
void intake_free(intake_pool *p);

#endif
