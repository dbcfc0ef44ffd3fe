/* fuzz_http_head.c — bytes from a client through the HTTP guard (runtime/serve/http_guard.c) and
 * libevent's evhttp behind it: request lines, header lines, Content-Length and bodies, pipelined
 * requests, heads cut anywhere. A real event loop serves a loopback socket, as in `serve`; the
 * harness writes the input, half-closes, and runs the loop until the server closes.
 *
 * Besides ASan/UBSan's findings, two properties abort (a finding like a crash):
 *   - every reply starts with an HTTP status line (nothing else ever reaches the client);
 *   - the server closes the connection, and frees it, within a few read timeouts: a connection
 *     the guard forgets would hold a slot of --max-connections forever. */
#include "fuzz_common.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "http_guard.h"

#define READ_TIMEOUT 0.25 /* seconds: the guard's read timeout here */
#define DEADLINE 3.0      /* seconds the harness waits for the server to close and free a connection */

static struct event_base *base;
static hg_guard *guard;
static struct sockaddr_in server_addr;

/* What the model server's handlers stand for: a reply naming the body's length. */
static void answer(struct evhttp_request *req, void *arg) {
    (void)arg;
    struct evbuffer *b = evbuffer_new();
    if (!b) abort();
    evbuffer_add_printf(b, "{\"body_bytes\": %zu}", evbuffer_get_length(evhttp_request_get_input_buffer(req)));
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    base = event_base_new();
    struct evhttp *http = base ? evhttp_new(base) : NULL;
    const hg_config cfg = {.max_body = 4096, .read_timeout = READ_TIMEOUT, .write_timeout = 1, .max_connections = 16};
    if (!http || !(guard = hg_install(http, base, &cfg))) abort();
    /* the methods serve allows: the guard refuses the rest itself */
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                         EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(http, answer, NULL);
    struct evhttp_bound_socket *listener = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
    socklen_t len = sizeof server_addr;
    if (!listener || getsockname(evhttp_bound_socket_get_fd(listener), (struct sockaddr *)&server_addr, &len) != 0)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) abort();
    if (connect(fd, (struct sockaddr *)&server_addr, sizeof server_addr) != 0 && errno != EINPROGRESS) abort();
    size_t sent = 0, received = 0;
    int half_closed = 0;
    char head[8];
    const double deadline = now() + DEADLINE;
    for (;;) {
        if (sent < n) {
            const ssize_t w = send(fd, data + sent, n - sent, MSG_NOSIGNAL);
            if (w > 0) sent += (size_t)w;
            else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN) sent = n; /* closed on us */
        }
        if (sent == n && !half_closed) {
            shutdown(fd, SHUT_WR); /* fails only where the server has closed already */
            half_closed = 1;
        }
        event_base_loop(base, EVLOOP_NONBLOCK);
        char buf[4096];
        const ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r > 0) {
            for (ssize_t i = 0; i < r && received < sizeof head; i++) head[received++] = buf[i];
            if (received >= 7 && memcmp(head, "HTTP/1.", 7) != 0) {
                fprintf(stderr, "fuzz_http_head: a reply that is not HTTP: %.8s\n", head);
                abort();
            }
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN)) break; /* closed */
        if (now() > deadline) {
            fprintf(stderr, "fuzz_http_head: the connection is open %.0f s after the input ended (read timeout %.2f s)\n",
                    DEADLINE, READ_TIMEOUT);
            abort();
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 1);
    }
    close(fd);
    while (hg_connections(guard) > 0) { /* the server's side goes once the loop sees the close */
        if (now() > deadline + DEADLINE) {
            fprintf(stderr, "fuzz_http_head: %d connection(s) never freed\n", hg_connections(guard));
            abort();
        }
        event_base_loop(base, EVLOOP_NONBLOCK);
        poll(NULL, 0, 1);
    }
    return 0;
}
