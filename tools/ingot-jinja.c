/* ingot-jinja — renders a chat template file with a JSON context (the test driver for runtime/text/jinja.c).
 *
 * usage: ingot-jinja [--trim-blocks] [--lstrip-blocks] [--keep-trailing-newline] [--max-steps N]
 *                    TEMPLATE_FILE CONTEXT_JSON_FILE
 *
 * Writes the exact rendered bytes to stdout; on error prints the one-line message on stderr and
 * exits 1 (with "raise_exception: " in front when the template raised it itself).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "jinja.h"
#include "tool_file.h"

static void usage(void) {
    fprintf(stderr, "usage: ingot-jinja [--trim-blocks] [--lstrip-blocks] [--keep-trailing-newline] [--max-steps N] "
                    "TEMPLATE_FILE CONTEXT_JSON_FILE\n");
    exit(2);
}

int main(int argc, char **argv) {
    unsigned flags = 0;
    const char *paths[2] = {NULL, NULL};
    int np = 0;
    jinja_limits lim = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--trim-blocks")) flags |= JINJA_TRIM_BLOCKS;
        else if (!strcmp(argv[i], "--lstrip-blocks")) flags |= JINJA_LSTRIP_BLOCKS;
        else if (!strcmp(argv[i], "--keep-trailing-newline")) flags |= JINJA_KEEP_TRAILING_NEWLINE;
        else if (!strcmp(argv[i], "--max-steps") && i + 1 < argc) lim.max_steps = atol(argv[++i]);
        else if (argv[i][0] == '-' && argv[i][1]) usage();
        else if (np < 2) paths[np++] = argv[i];
        else usage();
    }
    if (np != 2) usage();
    size_t tn = 0, cn = 0;
    char *tsrc = tool_read_file(paths[0], &tn), *csrc = tool_read_file(paths[1], &cn);
    if (!tsrc || !csrc) {
        fprintf(stderr, "cannot read %s\n", !tsrc ? paths[0] : paths[1]);
        free(tsrc);
        free(csrc);
        return 2;
    }
    cJSON *ctx = cJSON_ParseWithLength(csrc, cn);
    free(csrc);
    if (!ctx || !cJSON_IsObject(ctx)) {
        fprintf(stderr, "%s: context must be a JSON object\n", paths[1]);
        cJSON_Delete(ctx);
        free(tsrc);
        return 2;
    }
    char err[512];
    jinja_template *t = jinja_parse_ex(tsrc, tn, flags, err, sizeof err);
    free(tsrc);
    int rc = 0;
    if (!t) {
        fprintf(stderr, "%s\n", err);
        rc = 1;
    } else {
        size_t n = 0;
        int raised = 0;
        char *out = jinja_render_ex(t, ctx, &lim, &n, &raised, err, sizeof err);
        if (out) {
            fwrite(out, 1, n, stdout);
            free(out);
        } else {
            fprintf(stderr, "%s%s\n", raised ? "raise_exception: " : "", err);
            rc = 1;
        }
        jinja_free(t);
    }
    cJSON_Delete(ctx);
    return rc;
}
