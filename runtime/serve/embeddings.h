/* embeddings.h — the wire format of /v1/embeddings (emb_ prefix): request
 * parsing and validation, pooled-vector post-processing (dimensions), and
 * the response JSON (float arrays or base64 of little-endian float32, as
 * OpenAI sends them).
 *
 * Like openai.h, nothing here touches sockets, the model or the scheduler.
 */
#ifndef INGOT_EMBEDDINGS_H
#define INGOT_EMBEDDINGS_H

#include <stddef.h>
#include <stdint.h>

#include "openai.h"

#define EMB_MAX_INPUTS 2048 /* OpenAI's limit on inputs per request */

typedef struct {
    char *text;       /* a text input (valid UTF-8, no NUL), or NULL */
    int32_t *ids;     /* a token-array input (ids within the vocabulary), or NULL */
    size_t n_ids;
} emb_input;

typedef struct {
    char *model;
    emb_input *inputs;
    int n_inputs;
    int base64;       /* encoding_format "base64" */
    int dimensions;   /* 0: the model's width; else the first that many, re-normalized */
} emb_request;

/* Parses and validates a request body of len bytes. vocab bounds token ids,
 * dim bounds "dimensions", max_inputs bounds how many inputs one request may
 * carry. 0 on success (free with emb_request_free), -1 with e filled (a 400
 * naming the field: "input", "input[3]", "dimensions", ...). */
int emb_parse(const char *body, size_t len, int vocab, int dim, int max_inputs, emb_request *r, oai_error *e);
void emb_request_free(emb_request *r);

/* The response: {"object": "list", "data": [{"object": "embedding", "index",
 * "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}}.
 * vectors[i] has dim floats, L2-normalised; with r->dimensions each is cut
 * to its first r->dimensions values and normalised again. NULL on OOM. */
char *emb_response_json(const emb_request *r, const char *model, float *const *vectors, int dim,
                        int prompt_tokens);

#endif
