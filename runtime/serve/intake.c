/* intake.c — worker threads for requests' CPU work, handing results back to the event loop
 * (intake.h). Two FIFO queues under one mutex: `queued` (loop -> workers, a condition variable
 * wakes a worker) and `finished` (workers -> loop, event_active wakes the loop). */
#include "intake.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct intake_pool {
    pthread_mutex_t mu;
    pthread_cond_t work_ready;
    intake_job *queued_head, *queued_tail;         /* submitted, not yet taken by a worker */
    intake_job *finished_head, *finished_tail; /* worked, done not yet called */
    int pending;                               /* submitted and not yet done (loop thread only) */
    int max_queued;
    int stopping;
    struct event *wake;                        /* drains `finished` on the loop thread */
    pthread_t *threads;
    int n_threads;
};

static void push(intake_job **head, intake_job **tail, intake_job *j) {
    j->next = NULL;
    if (*tail) (*tail)->next = j;
    else *head = j;
    *tail = j;
}

static intake_job *pop(intake_job **head, intake_job **tail) {
    intake_job *j = *head;
    if (j) {
        *head = j->next;
        if (!*head) *tail = NULL;
    }
    return j;
}

static void *worker(void *arg) {
    intake_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        intake_job *j = pop(&p->queued_head, &p->queued_tail);
        if (!j) {
            if (p->stopping) break;
            pthread_cond_wait(&p->work_ready, &p->mu);
            continue;
        }
        pthread_mutex_unlock(&p->mu);
        j->work(j);
        pthread_mutex_lock(&p->mu);
        push(&p->finished_head, &p->finished_tail, j);
        if (p->wake) event_active(p->wake, EV_READ, 0);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Loop thread: every finished job's done, in the order they finished. */
static void drain(intake_pool *p) {
    for (;;) {
        pthread_mutex_lock(&p->mu);
        intake_job *j = pop(&p->finished_head, &p->finished_tail);
        pthread_mutex_unlock(&p->mu);
        if (!j) return;
        p->pending--;
        j->done(j);
    }
}

static void on_wake(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    drain(arg);
}

intake_pool *intake_new(struct event_base *base, int n_threads, int max_queued, char *err, size_t errlen) {
    intake_pool *p = calloc(1, sizeof *p);
    if (!p || n_threads < 1) {
        snprintf(err, errlen, n_threads < 1 ? "intake: at least one worker thread" : "intake: out of memory");
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_ready, NULL);
    p->max_queued = max_queued;
    p->wake = event_new(base, -1, EV_PERSIST | EV_READ, on_wake, p);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->wake || !p->threads) {
        snprintf(err, errlen, "intake: out of memory");
        intake_free(p);
        return NULL;
    }
    for (; p->n_threads < n_threads; p->n_threads++)
        if (pthread_create(&p->threads[p->n_threads], NULL, worker, p) != 0) {
            snprintf(err, errlen, "intake: cannot start worker thread %d", p->n_threads);
            intake_free(p);
            return NULL;
        }
    return p;
}

int intake_submit(intake_pool *p, intake_job *job) {
    if (p->pending >= p->max_queued) return -1;
    p->pending++;
    pthread_mutex_lock(&p->mu);
    push(&p->queued_head, &p->queued_tail, job);
    pthread_cond_signal(&p->work_ready);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int intake_pending(const intake_pool *p) { return p->pending; }

void intake_free(intake_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1; /* workers leave once `queued` is empty */
    pthread_cond_broadcast(&p->work_ready);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    drain(p);
    if (p->wake) event_free(p->wake);
    free(p->threads);
    pthread_cond_destroy(&p->work_ready);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
