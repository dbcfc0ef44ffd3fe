/* http_guard.c — request framing, limits and read timeouts in front of evhttp;
 * see http_guard.h.
 *
 * Why libevent alone cannot do this: evhttp 2.1 answers a malformed or
 * oversized request itself (evhttp_send_error, an HTML page) without calling
 * the server, so that reply can be neither shaped nor counted, and 2.1 has no
 * error callback to hook. It also takes the first of two different
 * Content-Length headers, treats a Transfer-Encoding other than "chunked" as
 * absent, has one timeout for a connection's reads and writes alike (a long
 * generation is a long write), and no limit on open connections. So the
 * guard sits beneath evhttp as the bufferevent of each connection.
 *
 * How:
 * - The bufferevent evhttp gets is a filter over the socket's bufferevent.
 *   The input filter copies each new byte of a head into its own buffer,
 *   checks every line as it completes, and moves a request to evhttp only
 *   when its head and its whole body are there. evhttp therefore holds zero
 *   or one complete request: it never parses a byte the guard has not
 *   accepted, and a pipelined request waits in the socket's buffer until the
 *   reply before it is written, so replies never interleave with the
 *   guard's own.
 * - Output: libevent's filter only moves output while writing is enabled,
 *   and evhttp queues a whole reply while it is disabled, then enables it;
 *   the reply would stay queued forever. So the guard writes the filter's
 *   output buffer to the socket itself (evbuffer_write) whenever something is
 *   added, and tells evhttp the write is done (its write callback) only once
 *   every byte is in the kernel: evhttp may close the connection right after,
 *   and bytes still queued in user space would be lost.
 * - Chunked request bodies are refused (411) rather than tracked: OpenAI
 *   clients send JSON bodies with Content-Length, and a length known before
 *   the body is read keeps both the size limit and the framing simple.
 * - A refused request is answered with Connection: close. The guard then
 *   shuts down its side for writing once the reply is out, reads and
 *   discards what the client still sends for a short linger (closing with
 *   unread data would reset the connection, which can destroy the reply
 *   before the client reads it), and closes on the client's EOF or when the
 *   linger ends.
 * - Connections end through evhttp's own event callback (EOF, timeout,
 *   error), so evhttp frees its state exactly as for a client that left.
 *   After evhttp freed a connection its bufferevent lives on until libevent
 *   finalizes it (which frees the guard's state too); the guard's events
 *   check that the bufferevent still has evhttp's callbacks before acting.
 */
#include "http_guard.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "openai.h"

/* how long a refused connection is read from after its reply, and the
 * longest its reply may take to go out */
#define HG_LINGER_S 2.0
#define HG_REFUSED_WRITE_S 10.0

struct hg_guard {
    struct event_base *base;
    hg_config cfg;
    int n_conns;
};

typedef enum {
    GC_IDLE,    /* waiting for the first byte of a request */
    GC_HEAD,    /* reading a head */
    GC_BODY,    /* the head is accepted, its body is not all there */
    GC_BUSY,    /* evhttp has the request, until its reply is written */
    GC_CLOSING, /* refused: the reply goes out, input is discarded, then close */
} gc_state;

/* Methods evhttp serves; a body only where evhttp reads one. */
static const struct {
    const char *name;
    int body;
} METHODS[] = {
    {"GET", 1}, {"HEAD", 0}, {"POST", 1}, {"PUT", 1}, {"DELETE", 1}, {"OPTIONS", 1}, {"PATCH", 1},
};

typedef struct {
    hg_guard *g;
    struct bufferevent *bev;   /* the filter: what evhttp reads and writes */
    struct bufferevent *sock;  /* the socket beneath it */
    struct evbuffer_cb_entry *out_cb;
    struct event *timer;       /* read deadline, idle limit, or the end of the linger */
    struct event *kick;        /* work done once evhttp's call stack has returned */
    struct event *writable;    /* the socket, while output waits for room */
    gc_state state;
    int refuse;                /* over the connection limit: 503 at the first kick */
    int write_error;           /* a write failed: evhttp is told at the next kick */
    int shut;                  /* our side is shut down for writing */
    /* the head being read */
    char *head;                /* its first bytes (up to HG_MAX_HEAD + 1) */
    size_t have;               /* bytes copied into head */
    size_t line;               /* offset of the line being read */
    int n_lines;               /* complete lines, the request line included */
    int method;                /* index into METHODS */
    int minor;                 /* HTTP/1.minor */
    int has_cl, has_te, te_chunked, n_auth, n_host, expect_other, expect_continue;
    unsigned long long cl;
    size_t head_len;           /* bytes of the head, its blank line included */
    unsigned long long body_len;
} gconn;

static void arm(gconn *c, double seconds) {
    struct timeval tv = {(time_t)seconds, (suseconds_t)((seconds - floor(seconds)) * 1e6)};
    evtimer_add(c->timer, &tv);
}

/* evhttp's callbacks are set from the moment it takes the connection until
 * it frees it (bufferevent_free clears them). */
static int alive(gconn *c) {
    bufferevent_event_cb ecb = NULL;
    bufferevent_getcb(c->bev, NULL, NULL, &ecb, NULL);
    return ecb != NULL;
}

/* Reports an event to evhttp as the bufferevent would: evhttp frees the
 * connection for EOF, errors and timeouts. */
static void tell_evhttp(gconn *c, short what) {
    bufferevent_event_cb ecb = NULL;
    void *arg = NULL;
    bufferevent_getcb(c->bev, NULL, NULL, &ecb, &arg);
    if (ecb) ecb(c->bev, what, arg);
}

/* ---- output ----------------------------------------------------------------- */

static void flush_output(gconn *c);

static void on_writable(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    gconn *c = arg;
    if (!alive(c)) {
        event_del(c->writable);
        return;
    }
    if (what & EV_TIMEOUT) { /* the client has not read for write_timeout */
        event_del(c->writable);
        tell_evhttp(c, BEV_EVENT_TIMEOUT | BEV_EVENT_WRITING);
        return;
    }
    flush_output(c);
    if (!evbuffer_get_length(bufferevent_get_output(c->bev))) event_active(c->kick, EV_WRITE, 0);
}

/* Writes the filter's output buffer to the socket, as much as it takes now;
 * the rest waits for the socket to be writable. */
static void flush_output(gconn *c) {
    struct evbuffer *out = bufferevent_get_output(c->bev);
    const evutil_socket_t fd = bufferevent_getfd(c->sock);
    if (fd < 0 || c->write_error) return;
    while (evbuffer_get_length(out)) {
        const int n = evbuffer_write(out, fd);
        if (n > 0) continue;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            c->write_error = 1;
            evbuffer_drain(out, evbuffer_get_length(out));
            event_active(c->kick, EV_WRITE, 0);
            return;
        }
        break;
    }
    if (!evbuffer_get_length(out)) {
        if (c->writable) event_del(c->writable);
        return;
    }
    if (!c->writable && !(c->writable = event_new(c->g->base, fd, EV_WRITE | EV_PERSIST, on_writable, c))) {
        c->write_error = 1;
        event_active(c->kick, EV_WRITE, 0);
        return;
    }
    if (!event_pending(c->writable, EV_WRITE, NULL)) {
        const double s = c->g->cfg.write_timeout;
        struct timeval tv = {(time_t)s, (suseconds_t)((s - floor(s)) * 1e6)};
        event_add(c->writable, &tv);
    }
}

/* Something was added to the filter's output (by evhttp or the guard). */
static void on_output_added(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg) {
    (void)buf;
    gconn *c = arg;
    if (!info->n_added) return; /* our own draining */
    flush_output(c);
    /* evhttp expects its write callback once this is out; it sets up what it
     * waits for right after adding, so the callback comes from the kick */
    event_active(c->kick, EV_WRITE, 0);
}

/* The filter's own output path is unused (see the file comment). */
static enum bufferevent_filter_result filter_out(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t limit,
                                                 enum bufferevent_flush_mode mode, void *arg) {
    (void)src, (void)dst, (void)limit, (void)mode, (void)arg;
    return BEV_NEED_MORE;
}

/* ---- refusals ------------------------------------------------------------------ */

static const char *reason(int status) {
    switch (status) {
    case 400: return "Bad Request";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

static const char *error_code(int status) {
    switch (status) {
    case 405: return "method_not_allowed";
    case 408: return "request_timeout";
    case 411: return "length_required";
    case 413: return "request_too_large";
    case 414: return "uri_too_long";
    case 417: return "expectation_failed";
    case 431: return "headers_too_large";
    case 501: return "not_implemented";
    case 503: return "too_many_connections";
    case 505: return "http_version_not_supported";
    default: return "invalid_http_request";
    }
}

/* Answers with a JSON error and Connection: close, then winds the
 * connection down; returns -1 for the callers' convenience. Only called
 * while evhttp is waiting for a request (so nothing of its is being written). */
static int refuse(gconn *c, int status, const char *msg) {
    oai_error e;
    oai_error_set(&e, status, status == 500 || status == 503 ? "server_error" : "invalid_request_error", NULL,
                  error_code(status), "%s", msg);
    char *body = oai_error_json(&e);
    const size_t blen = body ? strlen(body) : 0;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    evbuffer_add_printf(out,
                        "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                        "Connection: close\r\n%s%s\r\n",
                        status, reason(status), blen, status == 503 ? "Retry-After: 1\r\n" : "",
                        status == 405 ? "Allow: GET, HEAD, POST\r\n" : "");
    if (body) evbuffer_add(out, body, blen);
    free(body);
    c->state = GC_CLOSING;
    free(c->head);
    c->head = NULL;
    struct evbuffer *in = bufferevent_get_input(c->sock);
    evbuffer_drain(in, evbuffer_get_length(in));
    arm(c, HG_REFUSED_WRITE_S);
    event_active(c->kick, EV_WRITE, 0);
    if (c->g->cfg.on_reply) c->g->cfg.on_reply(status, c->g->cfg.user);
    return -1;
}

/* ---- request heads -------------------------------------------------------------- */

static int is_tchar(unsigned char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static int name_is(const char *s, size_t n, const char *name) {
    return strlen(name) == n && strncasecmp(s, name, n) == 0;
}

static int request_line(gconn *c, const char *s, size_t len) {
    if (len > HG_MAX_REQUEST_LINE) return refuse(c, 414, "the request line is longer than 8192 bytes");
    const char *sp1 = memchr(s, ' ', len);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', len - (size_t)(sp1 + 1 - s)) : NULL;
    if (!sp1 || !sp2) return refuse(c, 400, "malformed request line (expected METHOD TARGET HTTP/1.1)");
    const size_t mlen = (size_t)(sp1 - s), tlen = (size_t)(sp2 - sp1 - 1), vlen = len - (size_t)(sp2 + 1 - s);
    if (mlen == 0 || mlen > 16) return refuse(c, 400, "malformed request line: bad method");
    for (size_t i = 0; i < mlen; i++)
        if (s[i] < 'A' || s[i] > 'Z') return refuse(c, 400, "malformed request line: bad method");
    if (tlen == 0 || sp1[1] != '/') return refuse(c, 400, "malformed request line: the target must be a path");
    for (size_t i = 0; i < tlen; i++) {
        const unsigned char ch = (unsigned char)sp1[1 + i];
        if (ch <= 0x20 || ch >= 0x7f) return refuse(c, 400, "malformed request line: bad byte in the target");
    }
    const char *v = sp2 + 1;
    if (vlen == 8 && !memcmp(v, "HTTP/1.", 7) && (v[7] == '0' || v[7] == '1')) {
        c->minor = v[7] - '0';
    } else if (vlen == 8 && !memcmp(v, "HTTP/", 5) && v[5] >= '0' && v[5] <= '9' && v[6] == '.' && v[7] >= '0' &&
               v[7] <= '9') {
        return refuse(c, 505, "only HTTP/1.0 and HTTP/1.1 are supported");
    } else {
        return refuse(c, 400, "malformed request line: bad HTTP version");
    }
    c->method = -1;
    for (size_t i = 0; i < sizeof METHODS / sizeof METHODS[0]; i++)
        if (strlen(METHODS[i].name) == mlen && !memcmp(METHODS[i].name, s, mlen)) c->method = (int)i;
    if (c->method < 0) {
        if ((mlen == 5 && !memcmp(s, "TRACE", 5)) || (mlen == 7 && !memcmp(s, "CONNECT", 7)))
            return refuse(c, 405, "method not allowed");
        return refuse(c, 501, "method not implemented");
    }
    /* evhttp parses the target again; what it cannot parse it answers itself */
    char target[HG_MAX_REQUEST_LINE + 1];
    memcpy(target, sp1 + 1, tlen);
    target[tlen] = 0;
    struct evhttp_uri *u = evhttp_uri_parse_with_flags(target, EVHTTP_URI_NONCONFORMANT);
    if (!u) return refuse(c, 400, "malformed request target");
    evhttp_uri_free(u);
    return 0;
}

static int header_line(gconn *c, const char *s, size_t len) {
    if (c->n_lines > HG_MAX_HEADERS + 1) return refuse(c, 431, "more than 100 header lines");
    if (s[0] == ' ' || s[0] == '\t') return refuse(c, 400, "obsolete header line folding");
    size_t k = 0;
    while (k < len && is_tchar((unsigned char)s[k])) k++;
    if (k == 0 || k == len || s[k] != ':') return refuse(c, 400, "malformed header line");
    const char *v = s + k + 1, *end = s + len;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == ' ' || end[-1] == '\t')) end--;
    for (const char *p = v; p < end; p++) {
        const unsigned char ch = (unsigned char)*p;
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) return refuse(c, 400, "control character in a header value");
    }
    const size_t vlen = (size_t)(end - v);
    if (name_is(s, k, "content-length")) {
        unsigned long long n = 0;
        if (vlen == 0 || vlen > 18) return refuse(c, 400, "invalid Content-Length");
        for (size_t i = 0; i < vlen; i++) {
            if (v[i] < '0' || v[i] > '9') return refuse(c, 400, "invalid Content-Length");
            n = n * 10 + (unsigned)(v[i] - '0');
        }
        /* RFC 9112 6.3: differing lengths make the framing unknowable */
        if (c->has_cl && n != c->cl) return refuse(c, 400, "conflicting Content-Length headers");
        c->has_cl = 1;
        c->cl = n;
    } else if (name_is(s, k, "transfer-encoding")) {
        c->has_te = 1;
        c->te_chunked = vlen == 7 && !strncasecmp(v, "chunked", 7);
    } else if (name_is(s, k, "authorization")) {
        if (++c->n_auth > 1) return refuse(c, 400, "more than one Authorization header");
    } else if (name_is(s, k, "host")) {
        if (++c->n_host > 1) return refuse(c, 400, "more than one Host header");
    } else if (name_is(s, k, "expect")) {
        if (vlen == 12 && !strncasecmp(v, "100-continue", 12)) c->expect_continue = 1;
        else c->expect_other = 1;
    }
    return 0;
}

/* The blank line arrived: checks that need the whole head. 1 or -1. */
static int head_done(gconn *c) {
    if (c->head_len > HG_MAX_HEAD) return refuse(c, 431, "the request head is larger than 32768 bytes");
    if (c->minor == 1 && c->n_host == 0) return refuse(c, 400, "HTTP/1.1 requests must carry a Host header");
    if (c->has_te && c->has_cl) return refuse(c, 400, "Content-Length and Transfer-Encoding together");
    if (c->has_te && c->te_chunked)
        return refuse(c, 411, "chunked request bodies are not supported; send Content-Length");
    if (c->has_te) return refuse(c, 501, "unsupported Transfer-Encoding");
    if (c->expect_other) return refuse(c, 417, "the only supported expectation is 100-continue");
    if (c->has_cl && c->cl > c->g->cfg.max_body) {
        char msg[96];
        snprintf(msg, sizeof msg, "request body too large (limit %zu bytes)", c->g->cfg.max_body);
        return refuse(c, 413, msg);
    }
    if (!METHODS[c->method].body && c->has_cl && c->cl > 0)
        return refuse(c, 400, "a HEAD request carries no body");
    c->body_len = c->has_cl ? c->cl : 0;
    return 1;
}

/* One complete line of the head, without its line end. 0: more lines,
 * 1: the head is complete and accepted, -1: refused. */
static int take_line(gconn *c, const char *s, size_t len) {
    if (memchr(s, 0, len)) return refuse(c, 400, "NUL byte in the request head");
    if (memchr(s, '\r', len)) return refuse(c, 400, "bare carriage return in the request head");
    if (c->n_lines++ == 0) {
        if (len == 0) return refuse(c, 400, "empty request line");
        return request_line(c, s, len);
    }
    if (len == 0) return head_done(c);
    return header_line(c, s, len);
}

/* Reads what arrived of the head. 1: complete and accepted, 0: need more,
 * -1: refused. */
static int scan_head(gconn *c, struct evbuffer *src) {
    const size_t n = evbuffer_get_length(src);
    const size_t want = n < HG_MAX_HEAD + 1 ? n : HG_MAX_HEAD + 1;
    if (!c->head && !(c->head = malloc(HG_MAX_HEAD + 1))) return refuse(c, 500, "out of memory");
    if (want > c->have) {
        /* only the new bytes are copied: a head that trickles in a byte at a
         * time costs no more than one that arrives whole */
        struct evbuffer_ptr p;
        if (evbuffer_ptr_set(src, &p, c->have, EVBUFFER_PTR_SET) != 0 ||
            evbuffer_copyout_from(src, &p, c->head + c->have, want - c->have) != (ev_ssize_t)(want - c->have))
            return refuse(c, 500, "cannot read the request head");
        c->have = want; /* may run into the body: only complete head lines are looked at */
    }
    for (;;) {
        const char *nl = memchr(c->head + c->line, '\n', c->have - c->line);
        if (!nl) break;
        const size_t eol = (size_t)(nl - c->head);
        size_t len = eol - c->line;
        if (len && c->head[eol - 1] == '\r') len--;
        const size_t start = c->line;
        c->line = eol + 1;
        const int r = take_line(c, c->head + start, len);
        if (r < 0) return -1;
        if (r > 0) {
            c->head_len = c->line;
            return head_done(c);
        }
    }
    if (c->n_lines == 0 && c->have - c->line > HG_MAX_REQUEST_LINE)
        return refuse(c, 414, "the request line is longer than 8192 bytes");
    if (c->have > HG_MAX_HEAD) return refuse(c, 431, "the request head is larger than 32768 bytes");
    if (c->n_lines > HG_MAX_HEADERS + 1) return refuse(c, 431, "more than 100 header lines");
    return 0;
}

/* The input filter: moves one complete, accepted request to evhttp at a time. */
static enum bufferevent_filter_result filter_in(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t limit,
                                                enum bufferevent_flush_mode mode, void *arg) {
    (void)limit, (void)mode;
    gconn *c = arg;
    if (c->state == GC_CLOSING || c->refuse) { /* a refused connection's 503 comes from the kick */
        evbuffer_drain(src, evbuffer_get_length(src));
        return BEV_NEED_MORE;
    }
    if (c->state == GC_BUSY) {
        /* evhttp waits for a request again once its read callback is back
         * (it has none while writing) and it has consumed the last one */
        bufferevent_data_cb rcb = NULL;
        bufferevent_getcb(c->bev, &rcb, NULL, NULL, NULL);
        if (!rcb || !(bufferevent_get_enabled(c->bev) & EV_READ) || evbuffer_get_length(dst)) return BEV_NEED_MORE;
        c->state = GC_IDLE;
        arm(c, c->g->cfg.read_timeout);
    }
    if (!evbuffer_get_length(src)) return BEV_NEED_MORE;
    if (c->state == GC_IDLE) {
        c->state = GC_HEAD;
        c->have = c->line = 0;
        c->n_lines = 0;
        c->has_cl = c->has_te = c->te_chunked = c->n_auth = c->n_host = 0;
        c->expect_other = c->expect_continue = 0;
        arm(c, c->g->cfg.read_timeout); /* the whole request must arrive by then */
    }
    if (c->state == GC_HEAD) {
        if (scan_head(c, src) <= 0) return BEV_NEED_MORE;
        c->state = GC_BODY;
        free(c->head);
        c->head = NULL;
        if (c->expect_continue && c->minor == 1 && c->body_len && evbuffer_get_length(src) == c->head_len)
            evbuffer_add_printf(bufferevent_get_output(c->bev), "HTTP/1.1 100 Continue\r\n\r\n");
    }
    if (evbuffer_get_length(src) < c->head_len + c->body_len) return BEV_NEED_MORE;
    evbuffer_remove_buffer(src, dst, c->head_len + c->body_len);
    c->state = GC_BUSY;
    evtimer_del(c->timer);
    return BEV_OK;
}

/* ---- connection events ------------------------------------------------------------ */

static void on_kick(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    gconn *c = arg;
    if (!alive(c)) return;
    if (c->write_error) {
        tell_evhttp(c, BEV_EVENT_ERROR | BEV_EVENT_WRITING);
        return;
    }
    if (c->refuse && c->state != GC_CLOSING) {
        refuse(c, 503, "too many open connections; retry later");
        return; /* refuse kicks again */
    }
    if (evbuffer_get_length(bufferevent_get_output(c->bev))) return; /* on_writable kicks when it is out */
    if (c->state == GC_CLOSING) {
        if (!c->shut) {
            c->shut = 1;
            shutdown(bufferevent_getfd(c->sock), SHUT_WR);
            arm(c, HG_LINGER_S);
        }
        return;
    }
    bufferevent_data_cb rcb = NULL, wcb = NULL;
    void *cbarg = NULL;
    bufferevent_getcb(c->bev, &rcb, &wcb, NULL, &cbarg);
    if (!rcb && wcb && (bufferevent_get_enabled(c->bev) & EV_WRITE)) {
        wcb(c->bev, cbarg); /* evhttp: what it wrote is out (the reply may be complete) */
        if (!alive(c)) return;
        bufferevent_getcb(c->bev, &rcb, NULL, NULL, &cbarg);
    }
    if (c->state == GC_BUSY && rcb && (bufferevent_get_enabled(c->bev) & EV_READ) &&
        !evbuffer_get_length(bufferevent_get_input(c->bev))) {
        c->state = GC_IDLE;
        arm(c, c->g->cfg.read_timeout); /* how long an idle keep-alive connection stays */
        /* a pipelined request that arrived meanwhile: no new bytes will come
         * to prompt the filter, so it runs here */
        struct evbuffer *in = bufferevent_get_input(c->sock);
        if (evbuffer_get_length(in) &&
            filter_in(in, bufferevent_get_input(c->bev), -1, BEV_NORMAL, c) == BEV_OK)
            rcb(c->bev, cbarg);
    }
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    gconn *c = arg;
    if (!alive(c)) return;
    switch (c->state) {
    case GC_CLOSING: /* the linger is over, or the refusal could not be written */
        tell_evhttp(c, BEV_EVENT_EOF | BEV_EVENT_READING);
        break;
    case GC_IDLE: /* an idle connection: closed without a word, as a keep-alive timeout */
        tell_evhttp(c, BEV_EVENT_TIMEOUT | BEV_EVENT_READING);
        break;
    case GC_HEAD:
    case GC_BODY: {
        char msg[96];
        snprintf(msg, sizeof msg, "the request did not arrive within %g s", c->g->cfg.read_timeout);
        refuse(c, 408, msg);
        break;
    }
    case GC_BUSY: /* being answered: not a read */
        break;
    }
}

/* libevent finalized the filter (after evhttp freed the connection). */
static void conn_free(void *arg) {
    gconn *c = arg;
    c->g->n_conns--;
    if (c->out_cb) evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->out_cb);
    if (c->timer) event_free(c->timer);
    if (c->kick) event_free(c->kick);
    if (c->writable) event_free(c->writable);
    free(c->head);
    free(c);
}

static struct bufferevent *on_new_connection(struct event_base *base, void *arg) {
    hg_guard *g = arg;
    gconn *c = calloc(1, sizeof *c);
    struct bufferevent *sock = c ? bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE) : NULL;
    if (c) {
        c->g = g;
        c->timer = evtimer_new(base, on_timer, c);
        c->kick = event_new(base, -1, 0, on_kick, c);
    }
    if (!sock || !c->timer || !c->kick) goto fail;
    c->sock = sock;
    c->bev = bufferevent_filter_new(sock, filter_in, filter_out, BEV_OPT_CLOSE_ON_FREE, conn_free, c);
    if (!c->bev) goto fail;
    g->n_conns++; /* conn_free owns c from here */
    c->out_cb = evbuffer_add_cb(bufferevent_get_output(c->bev), on_output_added, c);
    /* the guard writes the socket itself; the socket buffers at most one
     * request beyond the one being answered */
    bufferevent_disable(sock, EV_WRITE);
    bufferevent_setwatermark(sock, EV_READ, 0, HG_MAX_HEAD + g->cfg.max_body + 65536);
    c->state = GC_IDLE;
    if (!c->out_cb) {
        c->write_error = 1;
        event_active(c->kick, 0, 0);
    } else if (g->cfg.max_connections > 0 && g->n_conns > g->cfg.max_connections) {
        c->refuse = 1;
        event_active(c->kick, 0, 0); /* after evhttp has set the connection up */
    } else {
        arm(c, g->cfg.read_timeout);
    }
    return c->bev;
fail:
    /* evhttp then uses a plain bufferevent: the connection works, unguarded */
    if (sock) bufferevent_free(sock);
    if (c && c->timer) event_free(c->timer);
    if (c && c->kick) event_free(c->kick);
    free(c);
    return NULL;
}

hg_guard *hg_install(struct evhttp *http, struct event_base *base, const hg_config *cfg) {
    hg_guard *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->base = base;
    g->cfg = *cfg;
    evhttp_set_bevcb(http, on_new_connection, g);
    /* evhttp's own limits stay above the guard's, so it never answers first */
    evhttp_set_max_headers_size(http, 2 * HG_MAX_HEAD);
    evhttp_set_max_body_size(http, (ev_ssize_t)cfg->max_body);
    return g;
}

void hg_free(hg_guard *g) { free(g); }

int hg_connections(const hg_guard *g) { return g->n_conns; }
