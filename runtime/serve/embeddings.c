/* embeddings.c — /v1/embeddings requests and responses (see embeddings.h). */
#include "embeddings.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>



/* Token ids of a token-array input; param names it in errors. */
static int parse_ids(const cJSON *a, const char *param, int vocab, emb_input *in, oai_error *e) {
    const int n = cJSON_GetArraySize(a);
    if (n == 0) return oai_bad(e, param, "'%s' must not be empty%s", "");
    in->ids = malloc(sizeof(int32_t) * (size_t)n);
    if (!in->ids) {
        oai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, a) {
        const double x = cJSON_IsNumber(t) ? t->valuedouble : NAN;
        if (!isfinite(x) || x != floor(x) || x < 0 || x >= vocab) {
            char what[64];
            snprintf(what, sizeof what, " (the vocabulary has %d tokens)", vocab);
            return oai_bad(e, param, "'%s' token ids must be integers in range%s", what);
        }
        in->ids[in->n_ids++] = (int32_t)x;
    }
    return 0;
}

static int parse_text(const cJSON *s, const char *param, emb_input *in, oai_error *e) {
    if (!s->valuestring[0]) return oai_bad(e, param, "'%s' must not be an empty string%s", "");
    if (oai_check_text(s->valuestring, param, e)) return -1;
    if (!(in->text = strdup(s->valuestring))) {
        oai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    return 0;
}

/* input: a string, an array of strings, an array of token ids, or an array of such arrays. */
static int parse_input(const cJSON *root, int vocab, int max_inputs, emb_request *r, oai_error *e) {
    const cJSON *in = oai_field(root, "input");
    if (!in) return oai_bad(e, "input", "'%s' is required%s", "");
    if (cJSON_IsString(in)) {
        if (!(r->inputs = calloc(1, sizeof *r->inputs))) goto oom;
        r->n_inputs = 1;
        return parse_text(in, "input", &r->inputs[0], e);
    }
    if (!cJSON_IsArray(in))
        return oai_bad(e, "input", "'%s' must be a string, an array of strings, an array of token ids or an array of "
                               "token-id arrays%s", "");
    const int n = cJSON_GetArraySize(in);
    if (n == 0) return oai_bad(e, "input", "'%s' must not be empty%s", "");
    if (cJSON_IsNumber(in->child)) { /* one token-array input */
        if (!(r->inputs = calloc(1, sizeof *r->inputs))) goto oom;
        r->n_inputs = 1;
        return parse_ids(in, "input", vocab, &r->inputs[0], e);
    }
    if (n > max_inputs) {
        char what[96];
        snprintf(what, sizeof what, " (got %d; this server takes at most %d per request)", n, max_inputs);
        return oai_bad(e, "input", "'%s' has too many inputs%s", what);
    }
    if (!(r->inputs = calloc((size_t)n, sizeof *r->inputs))) goto oom;
    const cJSON *x;
    cJSON_ArrayForEach(x, in) {
        char param[32];
        snprintf(param, sizeof param, "input[%d]", r->n_inputs);
        emb_input *slot = &r->inputs[r->n_inputs++];
        if (cJSON_IsString(x)) {
            if (parse_text(x, param, slot, e)) return -1;
        } else if (cJSON_IsArray(x)) {
            if (parse_ids(x, param, vocab, slot, e)) return -1;
        } else {
            return oai_bad(e, param, "'%s' must be a string or an array of token ids%s", "");
        }
    }
    return 0;
oom:
    oai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return -1;
}

int emb_parse(const char *body, size_t len, int vocab, int dim, int max_inputs, emb_request *r, oai_error *e) {
    memset(r, 0, sizeof *r);
    if (oai_check_body(body, len, e)) return -1;
    size_t mlen = 0;
    char *marked = oai_mark_nuls(body, len, &mlen);
    if (!marked) {
        oai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(marked, mlen, &end, 0);
    if (!root) {
        oai_error_set(e, 400, "invalid_request_error", NULL, NULL, "the body is not valid JSON (near byte %zu)",
                      end && end >= marked ? (size_t)(end - marked) : 0);
        free(marked);
        return -1;
    }
    free(marked);
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        oai_error_set(e, 400, "invalid_request_error", NULL, NULL, "the body must be a JSON object");
        goto out;
    }
    if (oai_check_json(root, e)) goto out;
    const cJSON *v = oai_field(root, "model");
    if (!v || !cJSON_IsString(v)) {
        oai_bad(e, "model", "'%s' is required and must be a string%s", "");
        goto out;
    }
    if (!(r->model = strdup(v->valuestring))) {
        oai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        goto out;
    }
    if ((v = oai_field(root, "encoding_format"))) {
        if (cJSON_IsString(v) && !strcmp(v->valuestring, "float")) r->base64 = 0;
        else if (cJSON_IsString(v) && !strcmp(v->valuestring, "base64")) r->base64 = 1;
        else {
            oai_bad(e, "encoding_format", "'%s' must be \"float\" or \"base64\"%s", "");
            goto out;
        }
    }
    if ((v = oai_field(root, "dimensions"))) {
        const double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        if (!isfinite(x) || x != floor(x) || x < 1 || x > dim) {
            char what[64];
            snprintf(what, sizeof what, " in [1, %d] (this model's width)", dim);
            oai_bad(e, "dimensions", "'%s' must be an integer%s", what);
            goto out;
        }
        r->dimensions = (int)x;
    }
    if ((v = oai_field(root, "user")) && !cJSON_IsString(v)) { /* accepted; it never changes the answer */
        oai_bad(e, "user", "'%s' must be a string%s", "");
        goto out;
    }
    if (parse_input(root, vocab, max_inputs, r, e) != 0) goto out;
    rc = 0;
out:
    cJSON_Delete(root);
    if (rc != 0) emb_request_free(r);
    return rc;
}

void emb_request_free(emb_request *r) {
    for (int i = 0; i < r->n_inputs; i++) {
        free(r->inputs[i].text);
        free(r->inputs[i].ids);
    }
    free(r->inputs);
    free(r->model);
    memset(r, 0, sizeof *r);
}

/* RFC 4648 base64 of n bytes, NUL-terminated (malloc'd). */
static char *base64(const unsigned char *p, size_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc((n + 2) / 3 * 4 + 1), *w = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        const unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) |
                           (i + 2 < n ? p[i + 2] : 0);
        *w++ = A[v >> 18 & 63];
        *w++ = A[v >> 12 & 63];
        *w++ = i + 1 < n ? A[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? A[v & 63] : '=';
    }
    *w = 0;
    return o;
}

char *emb_response_json(const emb_request *r, const char *model, float *const *vectors, int dim,
                        int prompt_tokens) {
    const int k = r->dimensions > 0 && r->dimensions < dim ? r->dimensions : dim;
    float *v = malloc(sizeof(float) * (size_t)k);
    cJSON *root = cJSON_CreateObject();
    if (!v || !root) goto oom;
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    for (int i = 0; i < r->n_inputs; i++) {
        /* the first k values of a unit vector, scaled back to unit length */
        double norm = 0.0;
        for (int j = 0; j < k; j++) norm += (double)vectors[i][j] * vectors[i][j];
        const double scale = norm > 0.0 ? 1.0 / sqrt(norm) : 0.0;
        for (int j = 0; j < k; j++) v[j] = (float)(vectors[i][j] * scale);
        cJSON *item = cJSON_CreateObject();
        cJSON_AddItemToArray(data, item);
        cJSON_AddStringToObject(item, "object", "embedding");
        cJSON_AddNumberToObject(item, "index", i);
        if (r->base64) {
            unsigned char *bytes = malloc(sizeof(float) * (size_t)k);
            if (!bytes) goto oom;
            for (int j = 0; j < k; j++) { /* little-endian float32, whatever the host's order */
                uint32_t u;
                memcpy(&u, &v[j], 4);
                for (int b = 0; b < 4; b++) bytes[4 * j + b] = (unsigned char)(u >> (8 * b));
            }
            char *b64 = base64(bytes, sizeof(float) * (size_t)k);
            free(bytes);
            if (!b64) goto oom;
            cJSON_AddStringToObject(item, "embedding", b64);
            free(b64);
        } else {
            cJSON *arr = cJSON_AddArrayToObject(item, "embedding");
            for (int j = 0; j < k; j++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(v[j]));
        }
    }
    cJSON_AddStringToObject(root, "model", model);
    cJSON *usage = cJSON_AddObjectToObject(root, "usage");
    cJSON_AddNumberToObject(usage, "prompt_tokens", prompt_tokens);
    cJSON_AddNumberToObject(usage, "total_tokens", prompt_tokens);
    free(v);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
oom:
    free(v);
    cJSON_Delete(root);
    return NULL;
}
