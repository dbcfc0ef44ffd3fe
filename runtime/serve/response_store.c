/* response_store.c — a bounded store of past responses; see response_store.h.
 *
 * A list in the order responses were kept, oldest first, searched from the
 * newest: a continuation names a recent response, and --responses-store
 * keeps the list short (a linear search over a few thousand ids costs
 * microseconds against a request's milliseconds).
 */
#include "response_store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct rs_entry {
    struct rs_entry *prev, *next; /* prev: older */
    char *id, *conversation, *response;
    size_t bytes;
} rs_entry;

struct rs_store {
    pthread_mutex_t lock;
    rs_entry *oldest, *newest;
    int entries, max_entries;
    size_t bytes, max_bytes;
};

rs_store *rs_new(int max_entries, size_t max_bytes) {
    if (max_entries <= 0) return NULL;
    rs_store *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->max_entries = max_entries;
    s->max_bytes = max_bytes;
    return s;
}

static void unlink_entry(rs_store *s, rs_entry *e) {
    if (e->prev) e->prev->next = e->next;
    else s->oldest = e->next;
    if (e->next) e->next->prev = e->prev;
    else s->newest = e->prev;
    s->entries--;
    s->bytes -= e->bytes;
    free(e->id);
    free(e->conversation);
    free(e->response);
    free(e);
}

void rs_free(rs_store *s) {
    if (!s) return;
    while (s->oldest) unlink_entry(s, s->oldest);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static rs_entry *find(rs_store *s, const char *id) {
    for (rs_entry *e = s->newest; e; e = e->prev)
        if (!strcmp(e->id, id)) return e;
    return NULL;
}

int rs_put(rs_store *s, const char *id, const char *conversation, const char *response) {
    if (!s) return -1;
    const size_t bytes = strlen(id) + strlen(conversation) + strlen(response) + sizeof(rs_entry);
    if (bytes > s->max_bytes) return -1;
    rs_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->id = strdup(id)) || !(e->conversation = strdup(conversation)) ||
        !(e->response = strdup(response))) {
        if (e) {
            free(e->id);
            free(e->conversation);
        }
        free(e);
        return -1;
    }
    e->bytes = bytes;
    pthread_mutex_lock(&s->lock);
    rs_entry *old = find(s, id);
    if (old) unlink_entry(s, old);
    while (s->oldest && (s->entries >= s->max_entries || s->bytes + bytes > s->max_bytes)) unlink_entry(s, s->oldest);
    e->prev = s->newest;
    if (s->newest) s->newest->next = e;
    else s->oldest = e;
    s->newest = e;
    s->entries++;
    s->bytes += bytes;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

static char *copy_field(rs_store *s, const char *id, int response) {
    if (!s) return NULL;
    pthread_mutex_lock(&s->lock);
    const rs_entry *e = find(s, id);
    char *copy = e ? strdup(response ? e->response : e->conversation) : NULL;
    pthread_mutex_unlock(&s->lock);
    return copy;
}

char *rs_conversation(rs_store *s, const char *id) { return copy_field(s, id, 0); }
char *rs_response(rs_store *s, const char *id) { return copy_field(s, id, 1); }

int rs_delete(rs_store *s, const char *id) {
    if (!s) return 0;
    pthread_mutex_lock(&s->lock);
    rs_entry *e = find(s, id);
    const int found = e != NULL;
    if (e) unlink_entry(s, e);
    pthread_mutex_unlock(&s->lock);
    return found;
}

void rs_usage(rs_store *s, int *entries, size_t *bytes) {
    *entries = 0;
    *bytes = 0;
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    *entries = s->entries;
    *bytes = s->bytes;
    pthread_mutex_unlock(&s->lock);
}
