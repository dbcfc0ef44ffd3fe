/* ingot-tokenize — encodes each line of a file with a GGUF or tokenizer.json tokenizer, one JSON id array per line.
 *
 * usage: ingot-tokenize (--gguf FILE | --json tokenizer.json) [--add-special] [--parse-special] [--decode] INPUT
 *
 * Lines are split on '\n'; inside a line the escapes \n and \\ stand for a newline and a
 * backslash (so a test case can hold newlines). --decode also checks that decoding the ids
 * gives the line back and reports each mismatch on stderr (exit status 1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"
#include "tool_file.h"

static void usage(void) {
    fprintf(stderr, "usage: ingot-tokenize (--gguf FILE | --json tokenizer.json) [--add-special] "
                    "[--parse-special] [--decode] INPUT_FILE\n");
    exit(2);
}

/* Undoes the corpus escapes in place; returns the new length. */
static size_t unescape(char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n && (s[i + 1] == 'n' || s[i + 1] == '\\')) {
            s[o++] = s[i + 1] == 'n' ? '\n' : '\\';
            i++;
        } else {
            s[o++] = s[i];
        }
    }
    return o;
}

int main(int argc, char **argv) {
    const char *gguf_path = NULL, *json_path = NULL, *input = NULL;
    int add_special = 0, parse_special = 0, check = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gguf") && i + 1 < argc) gguf_path = argv[++i];
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
        else if (!strcmp(argv[i], "--add-special")) add_special = 1;
        else if (!strcmp(argv[i], "--parse-special")) parse_special = 1;
        else if (!strcmp(argv[i], "--decode")) check = 1;
        else if (argv[i][0] == '-' || input) usage();
        else input = argv[i];
    }
    if (!input || !!gguf_path == !!json_path) usage();

    char err[512] = "";
    gguf_file *g = NULL;
    tok_tokenizer *t;
    if (gguf_path) {
        g = gguf_open(gguf_path, err, sizeof err);
        if (!g) {
            fprintf(stderr, "ingot-tokenize: %s\n", err);
            return 1;
        }
        t = tok_from_gguf(g, err, sizeof err);
    } else {
        t = tok_from_json_file(json_path, err, sizeof err);
    }
    if (!t) {
        fprintf(stderr, "ingot-tokenize: %s\n", err);
        gguf_close(g);
        return 1;
    }
    size_t n;
    char *data = tool_read_file(input, &n);
    if (!data) {
        fprintf(stderr, "ingot-tokenize: cannot read %s\n", input);
        tok_free(t);
        gguf_close(g);
        return 1;
    }
    int status = 0;
    size_t lineno = 0;
    for (size_t pos = 0; pos < n;) {
        char *line = data + pos;
        char *nl = memchr(line, '\n', n - pos);
        size_t raw = nl ? (size_t)(nl - line) : n - pos;
        pos += raw + (nl != NULL);
        lineno++;
        size_t len = unescape(line, raw);
        int32_t *ids;
        size_t n_ids;
        if (tok_encode(t, line, len, add_special, parse_special, &ids, &n_ids, err, sizeof err)) {
            fprintf(stderr, "ingot-tokenize: line %zu: %s\n", lineno, err);
            status = 1;
            printf("null\n");
            continue;
        }
        putchar('[');
        for (size_t i = 0; i < n_ids; i++) printf(i ? ", %d" : "%d", ids[i]);
        printf("]\n");
        if (check) {
            char *back = tok_decode(t, ids, n_ids, 0);
            if (!back || strlen(back) != len || memcmp(back, line, len) != 0) {
                fprintf(stderr, "ingot-tokenize: line %zu: decode mismatch\n", lineno);
                status = 1;
            }
            free(back);
        }
        free(ids);
    }
    free(data);
    tok_free(t);
    gguf_close(g);
    return status;
}
