/* router.h — several model binaries behind one endpoint (rt_ prefix).
 *
 * ingot-router supervises one `serve` process per model binary, each on a
 * private loopback port, and proxies every request to the process its JSON
 * body's "model" names. A model's process starts on its first request and the
 * least recently used idle one is stopped when starting another would exceed
 * the memory budget; a process that dies is restarted by the next request for
 * it (after a backoff). The files:
 *
 *   main.c          options, the event loop, shutdown
 *   config.c        the models: a JSON config file, or --model NAME BINARY
 *   supervisor.c    child processes: spawn, log relay, readiness, stop, reap,
 *                   the memory budget (LRU), restarts
 *   proxy.c         one request forwarded to a child, its reply streamed back
 *   endpoints.c     what the router answers itself (/v1/models, /health,
 *                   /metrics, errors) and the routing by "model"
 *   metrics_merge.c the children's Prometheus text merged with a model label
 *
 * Everything runs on the one event-loop thread.
 */
#ifndef INGOT_ROUTER_H
#define INGOT_ROUTER_H

#include <stddef.h>
#include <sys/types.h>

#include <event2/event.h>
#include <event2/http.h>

#include "http_guard.h"
#include "metrics.h"

typedef enum {
    RT_STOPPED,  /* no process */
    RT_STARTING, /* spawned; waiting for its "listening on" line and then /ready */
    RT_READY,    /* answering; requests are forwarded */
    RT_STOPPING, /* SIGTERM sent (evicted, or the router shuts down); waiting for the exit */
} rt_state;

typedef struct rt_fwd rt_fwd;
typedef struct rt_router rt_router;

/* A configuration's bounds (config.c): models are looked up by a linear scan, and each one's
 * process gets its serve arguments on a command line */
#define RT_MAX_MODELS 1024
#define RT_MAX_SERVE_ARGS 256

typedef struct rt_model {
    rt_router *router;
    char *name;       /* what requests' "model" field names */
    char *binary;     /* the model binary (build/NAME/NAME) */
    char **serve_args; /* options after `serve`, before the router's --host/--port */
    int n_serve_args;
    char **adapters;  /* the LoRA adapters its serve options load (--lora [NAME=]PATH): their names, which
                         requests route to this model's process by, as by its own */
    int n_adapters;
    double footprint; /* bytes: weights + KV + scratch, from `serve --print-memory` */

    rt_state state;
    pid_t pid;
    int port;                 /* the child's port once it said "listening on" */
    int log_fd;               /* read end of the child's stderr+stdout */
    struct event *log_ev;
    struct evbuffer *log_buf; /* a partial line of the child's log */
    struct event *probe_timer, *kill_timer, *retry_timer;
    struct evhttp_connection *probe_conn;
    double spawned_at, started_at, last_used;
    double backoff, backoff_until; /* seconds; a crash doubles it (0.5 s up to 30 s) */
    int in_flight;                 /* requests forwarded and not finished */
    rt_fwd *pending_head, *pending_tail; /* requests waiting for the process to be ready */
    int n_pending;
    int crashed;                   /* the last exit was not asked for: the next start is a restart */
    double last_alive;             /* when a ready process last answered /alive */
    int probe_busy;                /* an /alive probe is out */
} rt_model;

struct rt_router {
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *listener;
    rt_model *models;
    int n_models;

    char host[256];
    int port;
    const char *api_key;    /* NULL: the router checks nothing (children may still) */
    double memory_budget;   /* bytes; 0: no budget */
    double start_timeout;   /* seconds a request waits for its model's process to become ready */
    double stop_timeout;    /* seconds between SIGTERM and SIGKILL */
    double liveness_timeout; /* seconds a ready process may answer no /alive probe before it is killed (0: never) */
    long max_body;
    double read_timeout;    /* seconds a request may take to arrive, and an idle connection may stay */
    int max_connections;
    int max_pending;        /* requests waiting for one model's start */
    hg_guard *guard;        /* runtime/serve/http_guard: frames, limits and times requests as serve does */
    double created;

    rt_fwd *fwds;           /* every live forwarded or waiting request */
    int draining;
    struct event *sig_chld, *sig_term, *sig_int, *shutdown_timer;

    met_registry *met;
    met_family *m_requests, *m_starts, *m_restarts, *m_crashes, *m_evictions, *m_running, *m_footprint,
        *m_memory_used, *m_memory_budget, *m_pending, *m_in_flight;
};

/* ---- main.c ------------------------------------------------------------------ */

/* While shutting down: exits the loop once no child and no request is left. */
void rt_check_drained(rt_router *r);

/* ---- config.c -------------------------------------------------------------- */

/* Reads {"models": [{"name": N, "binary": PATH, "serve": [ARGS...]}, ...]}
 * from path ("-": stdin) into r->models. 0, or -1 with the reason printed. */
int rt_config_load(rt_router *r, const char *path);
/* Appends a model given on the command line (no serve options of its own). */
int rt_config_add(rt_router *r, const char *name, const char *binary);
/* Options given to every child after its own (after "--" on the router's command line). */
int rt_config_add_common_args(rt_router *r, char **args, int n);
rt_model *rt_find_model(rt_router *r, const char *name);
/* Reads each model's adapter names from its serve options (after every option is in: a config's
 * own and the common ones); a name given twice, or also a model's, is an error. 0, or -1 said. */
int rt_config_adapters(rt_router *r);
/* The model whose process serves `name`: the model itself, or the one that loads an adapter of
 * that name (*adapter set to it, else NULL). */
rt_model *rt_find_served(rt_router *r, const char *name, const char **adapter);
void rt_config_free(rt_router *r);

/* ---- supervisor.c ------------------------------------------------------- */

/* Asks every binary for its footprint (`serve --print-memory` with the
 * model's serve options); a model larger than the budget alone is an error. */
int rt_measure_footprints(rt_router *r);
/* Queues f for its model, starting the process if needed, or forwards it at once. */
void rt_dispatch(rt_router *r, rt_fwd *f);
/* Removes a waiting request from its model's queue (its client went away). */
void rt_unqueue(rt_fwd *f);
/* A forwarded request ended: the model may now be idle (and evictable). */
void rt_request_done(rt_model *m);
/* SIGCHLD: reaps every exited child. */
void rt_reap(rt_router *r);
/* SIGTERM to every child (the router is shutting down). */
void rt_stop_all(rt_router *r);
int rt_children_alive(const rt_router *r);
double rt_memory_used(const rt_router *r);
const char *rt_state_name(rt_state s);
double rt_now(void);

/* ---- proxy.c --------------------------------------------------------------- */

struct rt_fwd {
    rt_router *router;
    rt_model *model;
    struct evhttp_request *client;    /* NULL once answered or gone */
    struct evhttp_connection *client_conn;
    struct event *watch;              /* the client's socket while no reply byte went out */
    struct event *deadline;           /* while waiting for the model's process */
    struct evbuffer *body;
    enum evhttp_cmd_type method;
    char *uri;
    struct evhttp_connection *up_conn;
    struct evhttp_request *up_req;
    int reply_started;                /* status and headers went to the client */
    int forwarded;                    /* counted in model->in_flight */
    rt_fwd *next_pending;
    rt_fwd *prev, *next;              /* router->fwds */
};

/* A request for m, its body copied; the client's disconnect is watched. NULL on OOM. */
rt_fwd *rt_fwd_new(rt_router *r, rt_model *m, struct evhttp_request *req, const char *body, size_t len);
/* Sends f to its model's process (which is ready). */
void rt_forward(rt_fwd *f);
/* Frees a client connection once the current callback has returned (a
 * connection cannot be freed from inside its own request's callback). */
void rt_release_conn(struct event_base *base, struct evhttp_connection *conn);
/* Answers f with an OpenAI-style error and frees it (it must not be forwarded). */
void rt_fwd_fail(rt_fwd *f, int status, const char *type, const char *code, const char *message);

/* ---- endpoints.c ----------------------------------------------------------- */

void rt_on_request(struct evhttp_request *req, void *arg);
/* An OpenAI-style error reply: {"error": {"message", "type", "param", "code"}}. */
void rt_reply_error(rt_router *r, struct evhttp_request *req, int status, const char *type, const char *param,
                    const char *code, const char *message);
void rt_count_status(rt_router *r, int status);

/* ---- metrics_merge.c ---------------------------------------------------- */

/* Appends one child's Prometheus text to the merge, with model="NAME" as the
 * first label of every sample. Families keep the order they first appear in;
 * each gets its HELP and TYPE once. 0, or -1 on OOM. */
typedef struct rt_metrics_merge rt_metrics_merge;
rt_metrics_merge *rt_merge_new(void);
int rt_merge_add(rt_metrics_merge *mm, const char *model, const char *text, size_t len);
/* The merged text (malloc'd, NUL-terminated), after `prefix` (the router's own families). */
char *rt_merge_render(const rt_metrics_merge *mm, const char *prefix, size_t *len);
void rt_merge_free(rt_metrics_merge *mm);

#endif
