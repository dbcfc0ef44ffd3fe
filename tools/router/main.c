/* main.c — ingot-router: several model binaries behind one endpoint.
 *
 *   ingot-router [--host 127.0.0.1] [--port 8080] [--memory-budget BYTES] [--api-key KEY]
 *                [--start-timeout 120] [--stop-timeout 10] [--max-body BYTES] [--max-waiting 256]
 *                [--read-timeout 30] [--max-connections 512] [--liveness-timeout 10]
 *                (--config FILE | --model NAME BINARY [--model NAME BINARY ...])
 *                [-- SERVE OPTIONS given to every model's process]
 *
 * `ingot serve A.gguf B.gguf ...` and `ingot serve --config models.json` build
 * the binaries and exec this. See tools/router/README.md.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <unistd.h>

#include "byte_count.h"
#include "router.h"

#define USAGE                                                                                                   \
    "usage: ingot-router [--host 127.0.0.1] [--port 8080] [--memory-budget BYTES (512M, 4G)] [--api-key KEY]\n" \
    "                    [--start-timeout 120] [--stop-timeout 10] [--max-body BYTES] [--max-waiting 256]\n"    \
    "                    [--read-timeout 30] [--max-connections 512] [--liveness-timeout 10]\n"                  \
    "                    (--config FILE | --model NAME BINARY [--model NAME BINARY ...])\n"                      \
    "                    [-- SERVE OPTIONS given to every model's process]\n"                                     \
    "  --config FILE: {\"models\": [{\"name\": N, \"binary\": PATH, \"serve\": [OPTIONS...]}, ...]} ('-': stdin)\n"

static int usage_error(const char *fmt, const char *what) {
    fprintf(stderr, "ingot-router: error: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\n%s", USAGE);
    return 2;
}

static int parse_number(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

/* ---- shutdown ---------------------------------------------------------------------- */

void rt_check_drained(rt_router *r) {
    if (r->draining && !r->fwds && rt_children_alive(r) == 0) event_base_loopexit(r->base, NULL);
}

static void on_shutdown_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    rt_router *r = arg;
    fprintf(stderr, "ingot-router: still %d process(es) and %s after the stop timeout; exiting\n",
            rt_children_alive(r), r->fwds ? "requests in flight" : "no requests");
    for (int i = 0; i < r->n_models; i++)
        if (r->models[i].pid > 0) kill(r->models[i].pid, SIGKILL);
    event_base_loopexit(r->base, NULL);
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    (void)what;
    rt_router *r = arg;
    if (sig == SIGCHLD) {
        rt_reap(r);
        rt_check_drained(r);
        return;
    }
    if (r->draining) return;
    fprintf(stderr, "ingot-router: %s received; stopping %d model process(es)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
            rt_children_alive(r));
    r->draining = 1;
    if (r->listener) evhttp_del_accept_socket(r->http, r->listener);
    r->listener = NULL;
    rt_stop_all(r);
    /* the children drain their requests within the stop timeout, then get SIGKILL; a little after that we go */
    const double t = r->stop_timeout + 2;
    const struct timeval tv = {(time_t)t, (suseconds_t)((t - floor(t)) * 1e6)};
    r->shutdown_timer = evtimer_new(r->base, on_shutdown_timer, r);
    if (r->shutdown_timer) evtimer_add(r->shutdown_timer, &tv);
    rt_check_drained(r);
}

/* what the guard answered itself (400, 408, 413, ...) is counted like our own replies */
static void guard_replied(int status, void *user) { rt_count_status(user, status); }

static void add_metrics(rt_router *r) {
    met_registry *m = r->met;
    r->m_requests = met_add(m, MET_COUNTER, "ingot_router_requests_total", "Requests the router answered, by status code (499: the client went away first).", "code");
    r->m_starts = met_add(m, MET_COUNTER, "ingot_router_model_starts_total", "Model processes started (restarts included).", "model");
    r->m_restarts = met_add(m, MET_COUNTER, "ingot_router_model_restarts_total", "Model processes started again after they exited unasked.", "model");
    r->m_crashes = met_add(m, MET_COUNTER, "ingot_router_model_crashes_total", "Model processes that exited without being asked to.", "model");
    r->m_evictions = met_add(m, MET_COUNTER, "ingot_router_model_evictions_total", "Idle model processes stopped to make room under the memory budget.", "model");
    r->m_running = met_add(m, MET_GAUGE, "ingot_router_model_ready", "1 while the model's process answers requests.", "model");
    r->m_footprint = met_add(m, MET_GAUGE, "ingot_router_model_memory_bytes", "What the model's process holds (weights + KV cache + scratch), as it reports before it starts.", "model");
    r->m_pending = met_add(m, MET_GAUGE, "ingot_router_requests_waiting", "Requests waiting for the model's process to start.", "model");
    r->m_in_flight = met_add(m, MET_GAUGE, "ingot_router_requests_in_flight", "Requests forwarded to the model's process and not finished.", "model");
    r->m_memory_used = met_add(m, MET_GAUGE, "ingot_router_memory_used_bytes", "Sum of the footprints of the processes that are running, starting or stopping.", NULL);
    r->m_memory_budget = met_add(m, MET_GAUGE, "ingot_router_memory_budget_bytes", "The --memory-budget (0: none).", NULL);
}

/* The command line into R: returns -1 to go on, or the exit status (0 after --help, 2 for a usage
 * error). *config: the --config file; *first_common: the index after "--" (the options every
 * model's process gets). */
static int parse_args(rt_router *r, int argc, char **argv, const char **config, int *first_common) {
    *first_common = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        if (!strcmp(a, "--")) {
            *first_common = i + 1;
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (!strcmp(a, "--model")) {
            if (i + 2 >= argc) return usage_error("%s needs NAME BINARY", a);
            if (rt_config_add(r, argv[i + 1], argv[i + 2]) != 0) return 2;
            i += 2;
            continue;
        }
        if (!v) return usage_error("%s needs a value (or is unknown)", a);
        if (!strcmp(a, "--config")) *config = v;
        else if (!strcmp(a, "--host")) snprintf(r->host, sizeof r->host, "%s", v);
        else if (!strcmp(a, "--api-key")) r->api_key = *v ? v : NULL;
        else if (!strcmp(a, "--port")) {
            if (parse_number(v, 0, 65535, &d) != 0 || d != floor(d))
                return usage_error("--port must be 0..65535, not '%s'", v);
            r->port = (int)d;
        } else if (!strcmp(a, "--memory-budget")) {
            if (byte_count_parse(v, &r->memory_budget) != 0)
                return usage_error("--memory-budget takes bytes (512M, 4G), not '%s'", v);
        } else if (!strcmp(a, "--max-body")) {
            if (byte_count_parse(v, &d) != 0 || d < 1024 || d > (1 << 30))
                return usage_error("--max-body must be 1K..1G, not '%s'", v);
            r->max_body = (long)d;
        } else if (!strcmp(a, "--start-timeout")) {
            if (parse_number(v, 0.1, 86400, &r->start_timeout) != 0)
                return usage_error("--start-timeout takes seconds, not '%s'", v);
        } else if (!strcmp(a, "--liveness-timeout")) {
            if (parse_number(v, 0, 86400, &r->liveness_timeout) != 0)
                return usage_error("--liveness-timeout takes seconds (0: never), not '%s'", v);
        } else if (!strcmp(a, "--stop-timeout")) {
            if (parse_number(v, 0, 86400, &r->stop_timeout) != 0)
                return usage_error("--stop-timeout takes seconds, not '%s'", v);
        } else if (!strcmp(a, "--read-timeout")) {
            if (parse_number(v, 0.05, 86400, &r->read_timeout) != 0)
                return usage_error("--read-timeout takes seconds, not '%s'", v);
        } else if (!strcmp(a, "--max-connections")) {
            if (parse_number(v, 1, 1 << 20, &d) != 0 || d != floor(d))
                return usage_error("--max-connections must be 1..1048576, not '%s'", v);
            r->max_connections = (int)d;
        } else if (!strcmp(a, "--max-waiting")) {
            if (parse_number(v, 1, 1 << 20, &d) != 0)
                return usage_error("--max-waiting must be 1..1048576, not '%s'", v);
            r->max_pending = (int)d;
        } else {
            return usage_error("unknown option '%s'", a);
        }
        i++;
    }
    return -1;
}

/* The event loop's HTTP server, signals and listening socket; announces the address. 0 or -1. */
static int start_listening(rt_router *r) {
    signal(SIGPIPE, SIG_IGN); /* a client that vanishes mid-write must not kill the router */
    r->created = (double)time(NULL);
    r->base = event_base_new();
    r->http = r->base ? evhttp_new(r->base) : NULL;
    if (!r->http) return -1;
    /* the guard frames and limits requests before evhttp sees them and times
     * reads, as in serve; a reply that makes no progress for an hour is abandoned */
    const hg_config gc = {.max_body = (size_t)r->max_body, .read_timeout = r->read_timeout, .write_timeout = 3600,
                          .max_connections = r->max_connections, .on_reply = guard_replied, .user = r};
    if (!(r->guard = hg_install(r->http, r->base, &gc))) return -1;
    evhttp_set_allowed_methods(r->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(r->http, rt_on_request, r);
    r->sig_chld = evsignal_new(r->base, SIGCHLD, on_signal, r);
    r->sig_term = evsignal_new(r->base, SIGTERM, on_signal, r);
    r->sig_int = evsignal_new(r->base, SIGINT, on_signal, r);
    if (!r->sig_chld || !r->sig_term || !r->sig_int) return -1;
    event_add(r->sig_chld, NULL);
    event_add(r->sig_term, NULL);
    event_add(r->sig_int, NULL);
    r->listener = evhttp_bind_socket_with_handle(r->http, r->host, (ev_uint16_t)r->port);
    if (!r->listener) {
        fprintf(stderr, "ingot-router: error: cannot listen on %s:%d: %s\n", r->host, r->port, strerror(errno));
        return -1;
    }
    int port = r->port;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(evhttp_bound_socket_get_fd(r->listener), (struct sockaddr *)&ss, &sl) == 0)
        port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                              : ((struct sockaddr_in *)&ss)->sin_port);
    char budget[64] = "none";
    if (r->memory_budget > 0) snprintf(budget, sizeof budget, "%.1f MiB", r->memory_budget / 1048576.0);
    fprintf(stderr, "ingot-router: %d model(s), memory budget %s, api key %s; each starts on its first request\n",
            r->n_models, budget, r->api_key ? "required" : "checked by the models' processes (if they have one)");
    fprintf(stderr, "ingot-router: listening on http://%s:%d\n", r->host, port);
    fflush(stderr);
    return 0;
}

/* Fails what is in flight, kills the models' processes and frees everything. */
static void free_router(rt_router *r) {
    while (r->fwds) rt_fwd_fail(r->fwds, 503, "service_unavailable", "shutting_down", "the server stopped");
    for (int i = 0; i < r->n_models; i++) {
        rt_model *m = &r->models[i];
        if (m->pid > 0) kill(m->pid, SIGKILL);
        if (m->probe_conn) evhttp_connection_free(m->probe_conn);
        if (m->probe_timer) event_free(m->probe_timer);
        if (m->kill_timer) event_free(m->kill_timer);
        if (m->retry_timer) event_free(m->retry_timer);
        if (m->log_ev) event_free(m->log_ev);
        if (m->log_buf) evbuffer_free(m->log_buf);
        if (m->log_fd >= 0) close(m->log_fd);
    }
    if (r->http) evhttp_free(r->http);
    if (r->sig_chld) event_free(r->sig_chld);
    if (r->sig_term) event_free(r->sig_term);
    if (r->sig_int) event_free(r->sig_int);
    if (r->shutdown_timer) event_free(r->shutdown_timer);
    if (r->base) event_base_free(r->base);
    hg_free(r->guard); /* connections torn down by the two calls above refer to it */
    met_free(r->met);
    rt_config_free(r);
}

int main(int argc, char **argv) {
    rt_router router, *r = &router;
    memset(r, 0, sizeof *r);
    snprintf(r->host, sizeof r->host, "127.0.0.1");
    r->port = 8080;
    r->start_timeout = 120;
    r->stop_timeout = 10;
    r->liveness_timeout = 10;
    r->max_body = 4 << 20;
    r->max_pending = 256;
    r->read_timeout = 30;
    r->max_connections = 512;
    const char *config = NULL;
    int first_common;
    int rc = parse_args(r, argc, argv, &config, &first_common);
    if (rc >= 0) return rc;
    rc = 2;
    if (config && r->n_models) return usage_error("%s", "--config and --model are alternatives");
    if (config && rt_config_load(r, config) != 0) goto out;
    if (!r->n_models) return usage_error("%s", "no models: --config FILE or --model NAME BINARY");
    if (rt_config_add_common_args(r, argv + first_common, argc - first_common) != 0) goto out;
    if (rt_config_adapters(r) != 0) goto out;
    if (config && !strcmp(config, "-") && !freopen("/dev/null", "r", stdin)) goto out;
    rc = 1;
    r->met = met_create();
    if (!r->met) goto out;
    add_metrics(r);
    if (rt_measure_footprints(r) != 0) goto out;
    if (start_listening(r) != 0) goto out;
    event_base_dispatch(r->base);
    fprintf(stderr, "ingot-router: stopped\n");
    rc = 0;
out:
    free_router(r);
    return rc;
}
