/* supervisor.c — one `serve` process per model: started on demand, stopped
 * least-recently-used first to keep the sum of footprints under the memory
 * budget, restarted (after a backoff) when it dies.
 *
 * A model's life: STOPPED → (a request arrives, the budget has room) spawn →
 * STARTING → its "listening on" line gives the port, /ready answers 200 →
 * READY → (evicted, or the router shuts down) SIGTERM → STOPPING → reaped →
 * STOPPED. A process that exits unasked is a crash: requests waiting for its
 * start get a 502, forwarded ones fail in proxy.c, and the next start waits
 * out a backoff that doubles with each crash (0.5 s, 1 s, ... 30 s; back to
 * 0.5 s after a minute of uptime). A ready process that answers no /alive probe
 * for --liveness-timeout seconds (stopped, wedged, swapping to death: its
 * event loop is not turning) is killed, and that is a crash too: the requests
 * it holds fail instead of waiting for clients to give up.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <event2/buffer.h>

#include "router.h"

#define PROBE_PERIOD 0.05   /* seconds between /ready probes of a starting process */
#define LIVENESS_PERIOD 1.0 /* seconds between /alive probes of a ready one */
#define BACKOFF_FIRST 0.5
#define BACKOFF_MAX 30.0
#define STABLE_UPTIME 60.0  /* a process up this long resets the backoff */
#define LOG_LINE_MAX 65536  /* a longer unterminated log line is relayed in pieces */

double rt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static struct timeval tv_of(double s) {
    if (s < 0) s = 0;
    struct timeval tv = {(time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    return tv;
}

const char *rt_state_name(rt_state s) {
    switch (s) {
    case RT_STOPPED: return "stopped";
    case RT_STARTING: return "starting";
    case RT_READY: return "ready";
    case RT_STOPPING: return "stopping";
    }
    return "?";
}

double rt_memory_used(const rt_router *r) {
    double used = 0;
    for (int i = 0; i < r->n_models; i++)
        if (r->models[i].state != RT_STOPPED) used += r->models[i].footprint;
    return used;
}

int rt_children_alive(const rt_router *r) {
    int n = 0;
    for (int i = 0; i < r->n_models; i++) n += r->models[i].pid > 0;
    return n;
}

static void update_gauges(rt_router *r) {
    for (int i = 0; i < r->n_models; i++) {
        const rt_model *m = &r->models[i];
        met_set(r->m_running, m->name, m->state == RT_READY);
        met_set(r->m_pending, m->name, m->n_pending);
        met_set(r->m_in_flight, m->name, m->in_flight);
    }
    met_set(r->m_memory_used, NULL, rt_memory_used(r));
}

/* ---- footprints ------------------------------------------------------------- */

/* Runs `BINARY serve SERVE_ARGS... --print-memory` and reads its JSON line. */
static int measure(rt_router *r, rt_model *m) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    char **argv = calloc((size_t)m->n_serve_args + 4, sizeof *argv);
    if (!argv) return -1;
    int n = 0;
    argv[n++] = m->binary;
    argv[n++] = "serve";
    for (int k = 0; k < m->n_serve_args; k++) argv[n++] = m->serve_args[k];
    argv[n++] = "--print-memory";
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        execv(m->binary, argv);
        fprintf(stderr, "ingot-router: error: cannot run %s: %s\n", m->binary, strerror(errno));
        _exit(127);
    }
    free(argv);
    close(fds[1]);
    char out[4096];
    size_t len = 0;
    ssize_t got;
    while (pid > 0 && len < sizeof out - 1 && ((got = read(fds[0], out + len, sizeof out - 1 - len)) > 0 ||
                                               (got < 0 && errno == EINTR)))
        if (got > 0) len += (size_t)got;
    out[len] = 0;
    close(fds[0]);
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "ingot-router: error: model '%s': '%s serve --print-memory' failed (its options are "
                        "checked there)\n", m->name, m->binary);
        return -1;
    }
    cJSON *j = cJSON_Parse(out);
    const cJSON *total = j ? cJSON_GetObjectItemCaseSensitive(j, "total_bytes") : NULL;
    const cJSON *weights = j ? cJSON_GetObjectItemCaseSensitive(j, "weights_bytes") : NULL;
    const cJSON *kv = j ? cJSON_GetObjectItemCaseSensitive(j, "kv_bytes") : NULL;
    const cJSON *own = j ? cJSON_GetObjectItemCaseSensitive(j, "model") : NULL;
    if (cJSON_IsString(own) && strcmp(own->valuestring, m->name) != 0) {
        /* the process answers only requests naming it, and names itself in every reply */
        fprintf(stderr, "ingot-router: error: '%s' serves the model '%s', not '%s': name it '%s'\n", m->binary,
                own->valuestring, m->name, own->valuestring);
        cJSON_Delete(j);
        return -1;
    }
    if (!cJSON_IsNumber(total) || total->valuedouble <= 0) {
        fprintf(stderr, "ingot-router: error: model '%s': no memory plan from '%s serve --print-memory': %s\n",
                m->name, m->binary, out);
        cJSON_Delete(j);
        return -1;
    }
    m->footprint = total->valuedouble;
    const double mib = 1048576.0;
    fprintf(stderr, "ingot-router: %s: %.1f MiB (weights %.1f MiB + KV cache %.1f MiB + scratch)\n", m->name,
            m->footprint / mib, cJSON_IsNumber(weights) ? weights->valuedouble / mib : 0,
            cJSON_IsNumber(kv) ? kv->valuedouble / mib : 0);
    cJSON_Delete(j);
    if (r->memory_budget > 0 && m->footprint > r->memory_budget) {
        fprintf(stderr, "ingot-router: error: model '%s' needs %.1f MiB, more than the whole --memory-budget of "
                        "%.1f MiB (give it a smaller KV cache: --kv-memory MiB in its serve options)\n",
                m->name, m->footprint / mib, r->memory_budget / mib);
        return -1;
    }
    return 0;
}

int rt_measure_footprints(rt_router *r) {
    for (int i = 0; i < r->n_models; i++)
        if (measure(r, &r->models[i]) != 0) return -1;
    met_set(r->m_memory_budget, NULL, r->memory_budget);
    for (int i = 0; i < r->n_models; i++) met_set(r->m_footprint, r->models[i].name, r->models[i].footprint);
    update_gauges(r);
    return 0;
}

/* ---- the child's log ---------------------------------------------------------- */

static void close_log(rt_model *m) {
    if (m->log_ev) event_free(m->log_ev);
    m->log_ev = NULL;
    if (m->log_fd >= 0) close(m->log_fd);
    m->log_fd = -1;
    if (m->log_buf) evbuffer_free(m->log_buf);
    m->log_buf = NULL;
}

static void arm(struct event *ev, double seconds) {
    const struct timeval tv = tv_of(seconds);
    evtimer_add(ev, &tv);
}

/* Each line goes to the router's stderr prefixed with the model's name; the
 * "listening on http://HOST:PORT" line tells the port of a starting process. */
static void log_line(rt_model *m, const char *line, size_t len) {
    fprintf(stderr, "[%s] %.*s\n", m->name, (int)len, line);
    static const char mark[] = "listening on http://";
    const char *at = memmem(line, len, mark, sizeof mark - 1);
    if (!at || m->state != RT_STARTING || m->port) return;
    const char *colon = memchr(at + sizeof mark - 1, ':', len - (size_t)(at + sizeof mark - 1 - line));
    if (!colon) return;
    const int port = atoi(colon + 1);
    if (port > 0 && port < 65536) {
        m->port = port;
        arm(m->probe_timer, 0); /* probe /ready at once */
    }
}

static void on_log(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    rt_model *m = arg;
    const int got = evbuffer_read(m->log_buf, fd, 4096);
    size_t n;
    char *line;
    while ((line = evbuffer_readln(m->log_buf, &n, EVBUFFER_EOL_LF))) {
        log_line(m, line, n);
        free(line);
    }
    const size_t rest = evbuffer_get_length(m->log_buf);
    if (rest >= LOG_LINE_MAX || (got <= 0 && rest > 0)) {
        line = malloc(rest);
        if (line) {
            evbuffer_remove(m->log_buf, line, rest);
            log_line(m, line, rest);
            free(line);
        } else {
            evbuffer_drain(m->log_buf, rest);
        }
    }
    fflush(stderr);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) close_log(m); /* the process closed it */
}

/* ---- start, readiness, stop --------------------------------------------------- */

static void try_start(rt_router *r, rt_model *m);

/* Every stopped model with waiting requests gets a chance to start. */
static void admit_waiting(rt_router *r) {
    for (int i = 0; i < r->n_models; i++) try_start(r, &r->models[i]);
    update_gauges(r);
}

static void became_ready(rt_model *m) {
    rt_router *r = m->router;
    m->state = RT_READY;
    m->started_at = m->last_used = m->last_alive = rt_now();
    m->probe_busy = 0;
    arm(m->probe_timer, LIVENESS_PERIOD);
    fprintf(stderr, "ingot-router: %s ready on 127.0.0.1:%d (pid %d, %.2f s after spawn)\n", m->name, m->port,
            (int)m->pid, m->started_at - m->spawned_at);
    while (m->pending_head) {
        rt_fwd *f = m->pending_head;
        rt_unqueue(f);
        rt_forward(f);
    }
    update_gauges(r);
}

static void on_probe_done(struct evhttp_request *req, void *arg) {
    rt_model *m = arg;
    const int ok = req && evhttp_request_get_response_code(req) == 200;
    if (m->state == RT_READY) {
        m->probe_busy = 0;
        if (ok) m->last_alive = rt_now();
        return;
    }
    if (m->state != RT_STARTING) return;
    if (ok) {
        became_ready(m);
        return;
    }
    arm(m->probe_timer, PROBE_PERIOD);
}

/* One GET of path on m's port, answered in on_probe_done; 0 when it went out. */
static int send_probe(rt_model *m, const char *path, double timeout) {
    if (m->probe_conn) evhttp_connection_free(m->probe_conn); /* the previous probe's, finished */
    m->probe_conn = evhttp_connection_base_new(m->router->base, NULL, "127.0.0.1", (ev_uint16_t)m->port);
    struct evhttp_request *req = m->probe_conn ? evhttp_request_new(on_probe_done, m) : NULL;
    if (!req) return -1;
    evhttp_connection_set_timeout(m->probe_conn, (int)ceil(timeout));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Host", "127.0.0.1");
    return evhttp_make_request(m->probe_conn, req, EVHTTP_REQ_GET, path);
}

/* A ready process: one /alive probe at a time; none answered for --liveness-timeout kills it. */
static void check_alive(rt_model *m) {
    rt_router *r = m->router;
    const double silent = rt_now() - m->last_alive;
    if (r->liveness_timeout > 0 && silent > r->liveness_timeout) {
        fprintf(stderr, "ingot-router: %s (pid %d) answered no /alive probe for %.0f s; killing it\n", m->name,
                (int)m->pid, silent);
        kill(m->pid, SIGKILL); /* reaped as a crash: what it holds fails with a 502 */
        return;
    }
    if (!m->probe_busy) m->probe_busy = send_probe(m, "/alive", r->liveness_timeout > 0 ? r->liveness_timeout : 5) == 0;
    arm(m->probe_timer, LIVENESS_PERIOD);
}

static void on_probe_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    rt_model *m = arg;
    rt_router *r = m->router;
    if (m->state == RT_READY) {
        check_alive(m);
        return;
    }
    if (m->state != RT_STARTING) return;
    if (rt_now() - m->spawned_at > r->start_timeout) {
        fprintf(stderr, "ingot-router: %s not ready %.0f s after spawn; killing pid %d\n", m->name, r->start_timeout,
                (int)m->pid);
        kill(m->pid, SIGKILL); /* reaped as a crash: its waiting requests get the 502 */
        return;
    }
    if (!m->port) { /* no "listening on" line yet */
        arm(m->probe_timer, PROBE_PERIOD);
        return;
    }
    if (send_probe(m, "/ready", 5) != 0) arm(m->probe_timer, PROBE_PERIOD);
}

static void on_kill_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    rt_model *m = arg;
    if (m->pid > 0) {
        fprintf(stderr, "ingot-router: %s did not exit %.0f s after SIGTERM; SIGKILL to pid %d\n", m->name,
                m->router->stop_timeout, (int)m->pid);
        kill(m->pid, SIGKILL);
    }
}

static void on_retry_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    rt_model *m = arg;
    try_start(m->router, m);
    update_gauges(m->router);
}

static int ensure_timers(rt_model *m) {
    struct event_base *b = m->router->base;
    if (!m->probe_timer) m->probe_timer = evtimer_new(b, on_probe_timer, m);
    if (!m->kill_timer) m->kill_timer = evtimer_new(b, on_kill_timer, m);
    if (!m->retry_timer) m->retry_timer = evtimer_new(b, on_retry_timer, m);
    return m->probe_timer && m->kill_timer && m->retry_timer ? 0 : -1;
}

/* Fails every request waiting for m's start. */
static void fail_pending(rt_model *m, int status, const char *code, const char *message) {
    while (m->pending_head) {
        rt_fwd *f = m->pending_head;
        rt_unqueue(f);
        rt_fwd_fail(f, status, status == 502 ? "server_error" : "service_unavailable", code, message);
    }
}

/* The process: BINARY serve SERVE_ARGS... --host 127.0.0.1 --port 0 (the
 * last --host/--port win), its stdout and stderr into one pipe that we relay,
 * and SIGTERM to it if the router dies without stopping it. */
static int spawn(rt_router *r, rt_model *m) {
    if (ensure_timers(m) != 0) return -1;
    close_log(m);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    char **argv = calloc((size_t)m->n_serve_args + 7, sizeof *argv);
    if (!argv) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    int n = 0;
    argv[n++] = m->binary;
    argv[n++] = "serve";
    for (int k = 0; k < m->n_serve_args; k++) argv[n++] = m->serve_args[k];
    argv[n++] = "--host";
    argv[n++] = "127.0.0.1";
    argv[n++] = "--port";
    argv[n++] = "0";
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1); /* the router died before prctl */
        const int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, STDIN_FILENO);
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        signal(SIGPIPE, SIG_DFL);
        execv(m->binary, argv);
        fprintf(stderr, "cannot run %s: %s\n", m->binary, strerror(errno));
        _exit(127);
    }
    free(argv);
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return -1;
    }
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    m->log_fd = fds[0];
    m->log_buf = evbuffer_new();
    m->log_ev = event_new(r->base, fds[0], EV_READ | EV_PERSIST, on_log, m);
    if (m->log_ev) event_add(m->log_ev, NULL);
    m->pid = pid;
    m->port = 0;
    m->state = RT_STARTING;
    m->spawned_at = rt_now();
    met_inc(r->m_starts, m->name, 1);
    if (m->crashed) met_inc(r->m_restarts, m->name, 1);
    fprintf(stderr, "ingot-router: %s %s (pid %d, %.1f MiB of %.1f MiB budget in use)\n",
            m->crashed ? "restarting" : "starting", m->name, (int)pid, rt_memory_used(r) / 1048576.0,
            r->memory_budget / 1048576.0);
    m->crashed = 0;
    arm(m->probe_timer, PROBE_PERIOD);
    return 0;
}

static void stop(rt_model *m, const char *why) {
    if (m->pid <= 0 || m->state == RT_STOPPING) return;
    fprintf(stderr, "ingot-router: stopping %s (pid %d): %s\n", m->name, (int)m->pid, why);
    m->state = RT_STOPPING;
    kill(m->pid, SIGTERM);
    arm(m->kill_timer, m->router->stop_timeout);
}

/* Starts m if it has waiting requests, is stopped, has waited out its
 * backoff and fits: when the budget would be exceeded, the least recently
 * used idle processes are stopped first (m starts once they have exited). */
static void try_start(rt_router *r, rt_model *m) {
    if (m->state != RT_STOPPED || m->n_pending == 0 || r->draining) return;
    const double now = rt_now();
    if (now < m->backoff_until) {
        if (ensure_timers(m) == 0 && !evtimer_pending(m->retry_timer, NULL)) arm(m->retry_timer, m->backoff_until - now);
        return;
    }
    if (r->memory_budget > 0) {
        double need = rt_memory_used(r) + m->footprint - r->memory_budget;
        for (int i = 0; i < r->n_models; i++)
            if (r->models[i].state == RT_STOPPING) need -= r->models[i].footprint; /* frees on its own */
        if (rt_memory_used(r) + m->footprint > r->memory_budget) {
            if (need <= 0) return; /* enough is being stopped already; its exit admits m */
            /* the idle ones, least recently used first, until enough would be freed */
            rt_model *victims[r->n_models];
            int nv = 0;
            double idle = 0;
            for (int i = 0; i < r->n_models; i++) {
                rt_model *v = &r->models[i];
                if (v != m && v->state == RT_READY && v->in_flight == 0 && v->n_pending == 0) {
                    int k = nv++;
                    while (k > 0 && victims[k - 1]->last_used > v->last_used) {
                        victims[k] = victims[k - 1];
                        k--;
                    }
                    victims[k] = v;
                    idle += v->footprint;
                }
            }
            if (idle < need) return; /* busy: a request that ends calls us again, or the wait times out */
            char why[300];
            snprintf(why, sizeof why, "least recently used, and '%s' needs its memory", m->name);
            for (int k = 0; k < nv && need > 0; k++) {
                met_inc(r->m_evictions, victims[k]->name, 1);
                stop(victims[k], why);
                need -= victims[k]->footprint;
            }
            return;
        }
    }
    if (spawn(r, m) != 0) {
        fprintf(stderr, "ingot-router: error: cannot start %s: %s\n", m->name, strerror(errno));
        m->backoff = BACKOFF_FIRST;
        m->backoff_until = now + m->backoff;
        fail_pending(m, 502, "model_start_failed", "the model's process could not be started");
    }
}

/* ---- requests ------------------------------------------------------------------- */

static void on_wait_deadline(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    rt_fwd *f = arg;
    rt_model *m = f->model;
    char msg[512];
    snprintf(msg, sizeof msg, "model '%s' did not become ready within %.0f s (%s)", m->name,
             m->router->start_timeout, rt_state_name(m->state));
    rt_unqueue(f);
    rt_fwd_fail(f, 503, "service_unavailable", "model_unavailable", msg);
    update_gauges(m->router);
}

void rt_dispatch(rt_router *r, rt_fwd *f) {
    rt_model *m = f->model;
    m->last_used = rt_now();
    if (m->state == RT_READY) {
        rt_forward(f);
        update_gauges(r);
        return;
    }
    if (m->n_pending >= r->max_pending) {
        char msg[300];
        snprintf(msg, sizeof msg, "too many requests waiting for model '%s' to start", m->name);
        rt_fwd_fail(f, 503, "service_unavailable", "model_unavailable", msg);
        return;
    }
    f->deadline = evtimer_new(r->base, on_wait_deadline, f);
    if (!f->deadline) {
        rt_fwd_fail(f, 503, "service_unavailable", "model_unavailable", "out of memory");
        return;
    }
    arm(f->deadline, r->start_timeout);
    f->next_pending = NULL;
    if (m->pending_tail) m->pending_tail->next_pending = f;
    else m->pending_head = f;
    m->pending_tail = f;
    m->n_pending++;
    try_start(r, m);
    update_gauges(r);
}

void rt_unqueue(rt_fwd *f) {
    rt_model *m = f->model;
    rt_fwd **p = &m->pending_head, *prev = NULL;
    while (*p && *p != f) {
        prev = *p;
        p = &(*p)->next_pending;
    }
    if (!*p) return;
    *p = f->next_pending;
    if (m->pending_tail == f) m->pending_tail = prev;
    f->next_pending = NULL;
    m->n_pending--;
    if (f->deadline) event_free(f->deadline);
    f->deadline = NULL;
}

void rt_request_done(rt_model *m) {
    m->in_flight--;
    m->last_used = rt_now();
    /* an idle process may be what another model waits to evict */
    if (m->in_flight == 0 && m->n_pending == 0) admit_waiting(m->router);
    else update_gauges(m->router);
}

/* ---- exits ------------------------------------------------------------------------ */

static void on_exit_status(rt_router *r, rt_model *m, int status) {
    const rt_state was = m->state;
    const double now = rt_now();
    char how[64];
    if (WIFSIGNALED(status)) snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(status));
    else snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(status));
    m->pid = 0;
    m->port = 0;
    if (m->probe_conn) evhttp_connection_free(m->probe_conn);
    m->probe_conn = NULL;
    if (m->probe_timer) evtimer_del(m->probe_timer);
    if (m->kill_timer) evtimer_del(m->kill_timer);
    m->state = RT_STOPPED;
    if (was == RT_STOPPING) {
        fprintf(stderr, "ingot-router: %s stopped (%s)\n", m->name, how);
        m->crashed = 0;
    } else {
        fprintf(stderr, "ingot-router: %s exited unexpectedly (%s); the next request restarts it\n", m->name, how);
        met_inc(r->m_crashes, m->name, 1);
        m->crashed = 1;
        if (m->started_at > 0 && now - m->started_at > STABLE_UPTIME) m->backoff = 0;
        m->backoff = m->backoff > 0 ? (m->backoff * 2 > BACKOFF_MAX ? BACKOFF_MAX : m->backoff * 2) : BACKOFF_FIRST;
        m->backoff_until = now + m->backoff;
        if (was == RT_STARTING) {
            char msg[512];
            snprintf(msg, sizeof msg, "the process of model '%s' exited while starting (%s)", m->name, how);
            fail_pending(m, 502, "model_crashed", msg);
        }
    }
    m->started_at = 0;
    fflush(stderr);
}

void rt_reap(rt_router *r) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        for (int i = 0; i < r->n_models; i++)
            if (r->models[i].pid == pid) on_exit_status(r, &r->models[i], status);
    if (!r->draining) admit_waiting(r);
    else update_gauges(r);
}

void rt_stop_all(rt_router *r) {
    for (int i = 0; i < r->n_models; i++) {
        rt_model *m = &r->models[i];
        fail_pending(m, 503, "shutting_down", "the server is shutting down");
        if (m->retry_timer) evtimer_del(m->retry_timer);
        stop(m, "shutting down");
    }
    update_gauges(r);
}
