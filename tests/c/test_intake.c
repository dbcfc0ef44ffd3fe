/* test_intake.c — the intake pool (runtime/serve/intake.h): every job's work runs on a worker
 * and its done on the loop thread, once each; the queue bound refuses the job past max_queued;
 * intake_free finishes what is queued. */
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "intake.h"

typedef struct {
    intake_job job;
    int index;
    atomic_int worked;
    pthread_t worker;
    int done;
    pthread_t done_on;
} test_job;

static pthread_t loop_thread;
static int n_done, expected_done;
static struct event_base *base;
static atomic_int gate = 1; /* 0: workers wait in work until it opens */

static void work(intake_job *j) {
    test_job *t = (test_job *)j;
    while (!atomic_load(&gate)) usleep(100);
    t->worker = pthread_self();
    atomic_fetch_add(&t->worked, 1);
}

static void done(intake_job *j) {
    test_job *t = (test_job *)j;
    t->done++;
    t->done_on = pthread_self();
    if (++n_done == expected_done && base) event_base_loopbreak(base);
}

int main(void) {
    char err[128];
    evthread_use_pthreads();
    base = event_base_new();
    loop_thread = pthread_self();
    check(intake_new(base, 0, 4, err, sizeof err) == NULL && strstr(err, "worker"), "no workers: %s", err);

    enum { N = 200 };
    test_job *jobs = calloc(N, sizeof *jobs);
    intake_pool *p = intake_new(base, 3, N, err, sizeof err);
    check(p != NULL, "pool: %s", err);
    expected_done = N;
    for (int i = 0; i < N; i++) {
        jobs[i] = (test_job){.job = {.work = work, .done = done}, .index = i};
        check(intake_submit(p, &jobs[i].job) == 0, "job %d queued", i);
    }
    check(intake_pending(p) <= N, "pending %d", intake_pending(p));
    event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY); /* the pool's wake event is made active, never added */
    check(n_done == N && intake_pending(p) == 0, "all done on the loop (%d, %d pending)", n_done, intake_pending(p));
    int on_workers = 1, on_loop = 1, once = 1;
    for (int i = 0; i < N; i++) {
        on_workers &= !pthread_equal(jobs[i].worker, loop_thread);
        on_loop &= pthread_equal(jobs[i].done_on, loop_thread) != 0;
        once &= jobs[i].worked == 1 && jobs[i].done == 1;
    }
    check(on_workers, "work ran on worker threads");
    check(on_loop, "done ran on the loop thread");
    check(once, "each job worked and done exactly once");
    intake_free(p);

    /* the bound: with the workers held, max_queued jobs are taken and the next is refused;
     * intake_free then finishes the taken ones (work and done) before returning */
    atomic_store(&gate, 0);
    n_done = 0;
    expected_done = -1;
    p = intake_new(base, 2, 5, err, sizeof err);
    for (int i = 0; i < 6; i++) jobs[i] = (test_job){.job = {.work = work, .done = done}, .index = i};
    int taken = 0;
    for (int i = 0; i < 5; i++) taken += intake_submit(p, &jobs[i].job) == 0;
    check(taken == 5 && intake_pending(p) == 5, "five taken (%d)", taken);
    check(intake_submit(p, &jobs[5].job) == -1, "the sixth refused");
    atomic_store(&gate, 1);
    intake_free(p);
    check(n_done == 5 && jobs[5].worked == 0, "intake_free finished the five (%d), not the refused one", n_done);
    free(jobs);
    event_base_free(base);
    return check_summary();
}
