/* tool_file.h — whole-file reading for the command-line tools (ingot-grammar,
 * ingot-jinja, ingot-tokenize), which each take their input as a file. */
#ifndef INGOT_TOOL_FILE_H
#define INGOT_TOOL_FILE_H

#include <stdio.h>
#include <stdlib.h>

/* The file's bytes, NUL-terminated (malloc'd), and their count in *n; NULL
 * when it cannot be opened or memory runs out. */
static char *tool_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) free(buf);
        buf = nb;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[len] = 0;
    *n = len;
    return buf;
}

#endif
