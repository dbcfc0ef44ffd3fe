/* text_buf.h — a growable NUL-terminated text: what the grammar writers (json_schema.c,
 * json_schema_pattern_dfa.c) and the metrics page (metrics.c) build their output in.
 *
 * Out of memory is sticky: the first failed growth sets oom, every later addition does nothing,
 * and the writer checks oom once at the end (and frees p either way). A zeroed text_buf is an
 * empty one. */
#ifndef INGOT_TEXT_BUF_H
#define INGOT_TEXT_BUF_H

#include <stddef.h>

typedef struct {
    char *p; /* NULL until the first addition; then always NUL-terminated */
    size_t len, cap;
    int oom;
} text_buf;

void text_buf_add(text_buf *b, const char *s, size_t n);
void text_buf_puts(text_buf *b, const char *s);
/* printf of any length into the text */
void text_buf_printf(text_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
