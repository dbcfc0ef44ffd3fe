/* response_store.h — the Responses API's memory of past responses (rs_
 * prefix): for each stored response, its conversation (the chat messages
 * that led to it and its own reply, as JSON text), which a later request's
 * previous_response_id continues, and its response object, which
 * GET /v1/responses/{id} returns.
 *
 * Bounded by a count and by bytes (serve's --responses-store and
 * --responses-store-memory): the oldest responses are forgotten first, and a
 * response larger than the whole budget is not kept. Thread-safe: the intake
 * workers read it while the event loop writes.
 */
#ifndef INGOT_RESPONSE_STORE_H
#define INGOT_RESPONSE_STORE_H

#include <stddef.h>

typedef struct rs_store rs_store;

/* A store of at most max_entries responses and max_bytes of JSON text; NULL
 * when max_entries is 0 (nothing is stored) or out of memory. */
rs_store *rs_new(int max_entries, size_t max_bytes);
void rs_free(rs_store *s);

/* Keeps copies of a response's conversation and object under id (replacing
 * an entry of that id). 0, or -1 when it was not kept (too large, out of
 * memory, no store). */
int rs_put(rs_store *s, const char *id, const char *conversation, const char *response);
/* A malloc'd copy of id's conversation or response object, or NULL when the
 * store does not hold id. */
char *rs_conversation(rs_store *s, const char *id);
char *rs_response(rs_store *s, const char *id);
/* Forgets id: 1, or 0 when it was not held. */
int rs_delete(rs_store *s, const char *id);
/* The responses held, and their bytes. */
void rs_usage(rs_store *s, int *entries, size_t *bytes);

#endif
