/* http_guard.h — the connection layer in front of libevent's evhttp (hg_ prefix).
 *
 * Every connection evhttp accepts gets a filtering bufferevent from here
 * (evhttp_set_bevcb). The filter reads each request head and body before
 * evhttp sees a byte of it, hands evhttp only complete, well-formed requests,
 * one at a time, and answers everything else itself with an OpenAI-shaped
 * JSON error and `Connection: close`:
 *
 *   400  malformed request line or header line, NUL in the head, bad or
 *        conflicting Content-Length, Content-Length with Transfer-Encoding,
 *        two Authorization or Host headers, no Host on HTTP/1.1, a body on HEAD
 *   405  TRACE, CONNECT
 *   408  a request not complete within the read timeout
 *   411  Transfer-Encoding: chunked (request bodies must carry Content-Length)
 *   413  Content-Length over the body limit
 *   414  request line over 8 KiB
 *   417  an Expect other than 100-continue
 *   431  head over 32 KiB or more than 100 header lines
 *   501  an unknown method, or a transfer coding other than chunked
 *   503  more open connections than allowed (with Retry-After)
 *   505  an HTTP version other than 1.0 and 1.1
 *
 * It also times reads: a connection idle for read_timeout seconds between
 * requests is closed, and a request whose head and body have not all arrived
 * read_timeout seconds after its first byte gets the 408. The time a request
 * spends being answered (generation, streaming) is never a read.
 */
#ifndef INGOT_HTTP_GUARD_H
#define INGOT_HTTP_GUARD_H

#include <stddef.h>
#include <event2/event.h>
#include <event2/http.h>

#define HG_MAX_REQUEST_LINE 8192
#define HG_MAX_HEAD 32768
#define HG_MAX_HEADERS 100

typedef struct {
    size_t max_body;        /* Content-Length above this is refused (413) */
    double read_timeout;    /* seconds */
    double write_timeout;   /* seconds a reply may make no progress before the connection is dropped */
    int max_connections;    /* open connections; more are answered 503 and closed */
    /* called for every reply the guard sends itself (for the request counter) */
    void (*on_reply)(int status, void *user);
    void *user;
} hg_config;

typedef struct hg_guard hg_guard;

/* Installs the guard on http (evhttp_set_bevcb); NULL on allocation failure.
 * Free with hg_free after evhttp_free and event_base_free: connections still
 * being torn down refer to the guard until then. */
hg_guard *hg_install(struct evhttp *http, struct event_base *base, const hg_config *cfg);
void hg_free(hg_guard *g);

int hg_connections(const hg_guard *g); /* connections open now */

#endif
