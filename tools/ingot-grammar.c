/* ingot-grammar — checks a grammar or JSON schema against a text, and times the token mask along it.
 *
 * usage: ingot-grammar --gguf FILE (--grammar FILE | --schema FILE | --json-object) [--print]
 *                      TEXT_FILE
 *
 * Compiles the grammar (a JSON schema is converted first; --print shows the
 * GBNF), builds the vocabulary trie from the GGUF's tokenizer as the server
 * does (control tokens and stop ids excluded), tokenizes TEXT_FILE and walks
 * it token by token: at each position the mask is computed once, as the
 * server does (so the matcher's mask cache helps exactly as much as it does
 * there), the token must be in it, and then it is accepted. Prints
 * one JSON object: tokens, whether the text was accepted and complete, the
 * vocabulary build time, and the mask time per token (mean, p50, p90, max,
 * milliseconds) with the mean allowed count. Exit status 1 if the text is
 * rejected or the grammar does not compile (the error on stderr).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "constrain.h"
#include "gguf.h"
#include "grammar.h"
#include "json_schema.h"
#include "tokenizer.h"
#include "tool_file.h"

static void usage(void) {
    fprintf(stderr, "usage: ingot-grammar --gguf FILE (--grammar FILE | --schema FILE | --json-object) [--print] "
                    "TEXT_FILE\n");
    exit(2);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *gguf_path = NULL, *grammar_path = NULL, *schema_path = NULL, *text_path = NULL;
    int json_object = 0, print = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gguf") && i + 1 < argc) gguf_path = argv[++i];
        else if (!strcmp(argv[i], "--grammar") && i + 1 < argc) grammar_path = argv[++i];
        else if (!strcmp(argv[i], "--schema") && i + 1 < argc) schema_path = argv[++i];
        else if (!strcmp(argv[i], "--json-object")) json_object = 1;
        else if (!strcmp(argv[i], "--print")) print = 1;
        else if (argv[i][0] == '-' || text_path) usage();
        else text_path = argv[i];
    }
    if (!gguf_path || !text_path || (!!grammar_path + !!schema_path + json_object) != 1) usage();

    char err[512] = "";
    size_t n;
    char *text = NULL;
    if (grammar_path) {
        text = tool_read_file(grammar_path, &n);
    } else if (schema_path) {
        char *js = tool_read_file(schema_path, &n);
        cJSON *schema = js ? cJSON_Parse(js) : NULL;
        free(js);
        if (!schema) {
            fprintf(stderr, "ingot-grammar: %s is not JSON\n", schema_path);
            return 1;
        }
        text = js_schema_grammar(schema, err, sizeof err);
        cJSON_Delete(schema);
        if (!text) {
            fprintf(stderr, "ingot-grammar: schema: %s\n", err);
            return 1;
        }
    } else {
        text = strdup(js_object_grammar());
    }
    if (!text) {
        fprintf(stderr, "ingot-grammar: cannot read the grammar\n");
        return 1;
    }
    if (print) fputs(text, stderr);
    gram_grammar *gr = gram_compile(text, strlen(text), err, sizeof err);
    free(text);
    if (!gr) {
        fprintf(stderr, "ingot-grammar: grammar: %s\n", err);
        return 1;
    }
    gguf_file *g = gguf_open(gguf_path, err, sizeof err);
    tok_tokenizer *t = g ? tok_from_gguf(g, err, sizeof err) : NULL;
    if (!t) {
        fprintf(stderr, "ingot-grammar: %s\n", err);
        return 1;
    }
    double t0 = now_s();
    gram_vocab *v = con_vocab_new(t);
    const double vocab_s = now_s() - t0;
    char *input = tool_read_file(text_path, &n);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (!v || !input || tok_encode(t, input, n, 0, 0, &ids, &n_ids, err, sizeof err) != 0) {
        fprintf(stderr, "ingot-grammar: cannot tokenize %s: %s\n", text_path, err);
        return 1;
    }
    gram_matcher *m = gram_matcher_new(gr, err, sizeof err);
    if (!m) {
        fprintf(stderr, "ingot-grammar: %s\n", err);
        return 1;
    }
    const int vocab = gram_vocab_size(v);
    uint32_t *bits = malloc(sizeof(uint32_t) * (size_t)(vocab / 32 + 1));
    double *times = malloc(sizeof(double) * (n_ids + 1));
    double allowed_sum = 0;
    int accepted = 1;
    size_t done = 0;
    for (; done < n_ids; done++) {
        t0 = now_s();
        const int count = gram_mask(m, v, bits);
        times[done] = (now_s() - t0) * 1e3;
        allowed_sum += count;
        const int id = ids[done];
        if (!(bits[id >> 5] >> (id & 31) & 1) || gram_accept_token(m, v, id) != 0) {
            size_t len;
            const char *piece = tok_piece(t, id, &len);
            fprintf(stderr, "ingot-grammar: token %zu (id %d, '%.*s') is not allowed here\n", done, id, (int)len,
                    piece ? piece : "");
            accepted = 0;
            break;
        }
    }
    const int complete = accepted && gram_is_complete(m);
    double mean = 0, mx = 0;
    for (size_t i = 0; i < done; i++) {
        mean += times[i];
        if (times[i] > mx) mx = times[i];
    }
    mean = done ? mean / (double)done : 0;
    qsort(times, done, sizeof *times, cmp_double);
    printf("{\"tokens\": %zu, \"accepted\": %s, \"complete\": %s, \"vocab_build_ms\": %.2f, \"mask_ms_mean\": %.4f, "
           "\"mask_ms_p50\": %.4f, \"mask_ms_p90\": %.4f, \"mask_ms_max\": %.4f, \"allowed_mean\": %.1f}\n",
           n_ids, accepted ? "true" : "false", complete ? "true" : "false", vocab_s * 1e3, mean,
           done ? times[done / 2] : 0, done ? times[done * 9 / 10] : 0, mx, done ? allowed_sum / (double)done : 0);
    free(bits);
    free(times);
    free(ids);
    free(input);
    gram_matcher_free(m);
    gram_free(gr);
    gram_vocab_free(v);
    tok_free(t);
    gguf_close(g);
    return accepted ? 0 : 1;
}
