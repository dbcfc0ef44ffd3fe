/* lora.c — reads a LoRA adapter (PEFT's or llama.cpp's GGUF) onto a model's weight table (lora.h). */
#include "lora.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf.h"
#include "hugealloc.h"
#include "weights.h"

#define LORA_MAX_CONFIG (1u << 20) /* an adapter_config.json is a few hundred bytes */

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* The whole of a small file, NUL-terminated; NULL with err filled. */
static char *read_small(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open (a PEFT adapter is a folder with adapter_config.json and "
                              "adapter_model.safetensors)", path);
        return NULL;
    }
    char *buf = malloc(LORA_MAX_CONFIG + 1);
    size_t n = buf ? fread(buf, 1, LORA_MAX_CONFIG + 1, f) : 0;
    fclose(f);
    if (!buf || n > LORA_MAX_CONFIG) {
        snprintf(err, errlen, "%s: %s", path, buf ? "larger than 1 MiB: not an adapter config" : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

/* PEFT's adapter_config.json: what this reader implements, or why not. */
typedef struct {
    double alpha;
    int rslora;
} peft_config;

static int read_peft_config(const char *path, peft_config *c, char *err, size_t errlen) {
    char *text = read_small(path, err, errlen);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    int rc = -1;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "peft_type");
    const cJSON *alpha = cJSON_GetObjectItemCaseSensitive(root, "lora_alpha");
    if (!cJSON_IsObject(root)) snprintf(err, errlen, "%s: not a JSON object", path);
    else if (!cJSON_IsString(type) || strcmp(type->valuestring, "LORA"))
        snprintf(err, errlen, "%s: peft_type is %s%.40s%s, not \"LORA\"", path, cJSON_IsString(type) ? "\"" : "",
                 cJSON_IsString(type) ? type->valuestring : "missing", cJSON_IsString(type) ? "\"" : "");
    else if (!cJSON_IsNumber(alpha) || !isfinite(alpha->valuedouble) || alpha->valuedouble == 0)
        snprintf(err, errlen, "%s: lora_alpha must be a non-zero number", path);
    else {
        rc = 0;
        c->alpha = alpha->valuedouble;
        c->rslora = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "use_rslora"));
        /* what would change the arithmetic: each refused by name rather than computed wrongly */
        static const char *const TRUE_REFUSED[][2] = {
            {"use_dora", "DoRA (weight-decomposed) adapters"},
            {"fan_in_fan_out", "fan_in_fan_out (GPT-2's Conv1D layout)"},
            {"lora_bias", "trained biases of lora_B"},
        };
        for (size_t i = 0; rc == 0 && i < sizeof TRUE_REFUSED / sizeof TRUE_REFUSED[0]; i++)
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, TRUE_REFUSED[i][0]))) {
                snprintf(err, errlen, "%s: %s is set: %s are not implemented", path, TRUE_REFUSED[i][0], TRUE_REFUSED[i][1]);
                rc = -1;
            }
        const cJSON *bias = cJSON_GetObjectItemCaseSensitive(root, "bias");
        if (rc == 0 && bias && !cJSON_IsNull(bias) && !(cJSON_IsString(bias) && !strcmp(bias->valuestring, "none"))) {
            snprintf(err, errlen, "%s: bias is not \"none\": adapters with trained biases are not implemented", path);
            rc = -1;
        }
        /* settings that must be absent, null or empty: each changes what the adapter computes */
        static const char *const EMPTY_REQUIRED[][2] = {
            {"modules_to_save", "an adapter that replaces whole modules is not a low-rank update (merge it into a "
                                "checkpoint of its own)"},
            {"target_parameters", "adapters of parameters (a mixture of experts' stacked experts) are not implemented"},
            {"alpha_pattern", "per-module alphas are not implemented"},
            {"trainable_token_indices", "adapters that retrain token embeddings are not implemented"},
            {"layer_replication", "adapters that replicate layers are not implemented"},
            {"alora_invocation_tokens", "activated LoRA (from its invocation tokens on) is not implemented"},
        };
        for (size_t i = 0; rc == 0 && i < sizeof EMPTY_REQUIRED / sizeof EMPTY_REQUIRED[0]; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, EMPTY_REQUIRED[i][0]);
            if (v && !cJSON_IsNull(v) && !((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child)) {
                snprintf(err, errlen, "%s: %s is set: %s", path, EMPTY_REQUIRED[i][0], EMPTY_REQUIRED[i][1]);
                rc = -1;
            }
        }
    }
    cJSON_Delete(root);
    return rc;
}

/* An adapter tensor's base weight name and which of the pair it is; 0, or -1 for a name of
 * neither form (err filled). */
static int split_name(const char *name, int gguf, char *base, size_t cap, int *is_b, char *err, size_t errlen) {
    static const char PREFIX[] = "base_model.model.";
    const char *suffix_a = gguf ? ".lora_a" : ".lora_A.weight", *suffix_b = gguf ? ".lora_b" : ".lora_B.weight";
    const char *from = name;
    if (!gguf) {
        if (strstr(name, "lora_embedding_") || strstr(name, "lora_magnitude_vector")) {
            snprintf(err, errlen, "adapter tensor '%.200s': %s adapters are not implemented", name,
                     strstr(name, "lora_embedding_") ? "embedding" : "DoRA");
            return -1;
        }
        if (strncmp(name, PREFIX, sizeof PREFIX - 1)) goto bad;
        from += sizeof PREFIX - 1;
    }
    const size_t n = strlen(from);
    const int b = ends_with(from, suffix_b);
    if (!b && !ends_with(from, suffix_a)) goto bad;
    const size_t stem = n - strlen(b ? suffix_b : suffix_a);
    if (stem + sizeof ".weight" > cap) goto bad;
    /* PEFT names the module; the checkpoint names its weight */
    snprintf(base, cap, "%.*s%s", (int)stem, from, gguf ? "" : ".weight");
    *is_b = b;
    return 0;
bad:
    snprintf(err, errlen, "adapter tensor '%.200s' is not a LoRA pair's %s (…%s or …%s)", name,
             gguf ? "half" : "half under base_model.model.", suffix_a, suffix_b);
    return -1;
}

/* Reads rows [r0, r0 + rows) of a 2-D tensor as f32. */
static int read_rows(const wt_tensor *t, int64_t r0, int64_t rows, float *dst) {
    size_t row_bytes;
    const int64_t cols = t->shape[1];
    if (dtype_row_bytes(t->dtype, cols, &row_bytes) != 0) return -1;
    for (int64_t r = 0; r < rows; r++)
        dtype_dequantize_row(t->dtype, (const unsigned char *)t->data + (size_t)(r0 + r) * row_bytes, dst + r * cols, cols);
    return 0;
}

/* The module a weight is (q_proj, attn_q, ...): its name's last part before .weight. */
static void module_of(const char *name, char *out, size_t cap) {
    const char *end = ends_with(name, ".weight") ? name + strlen(name) - 7 : name + strlen(name);
    const char *start = end;
    while (start > name && start[-1] != '.') start--;
    snprintf(out, cap, "%.*s", (int)(end - start), start);
}

static void summarize(lora_adapter *a, const mw_table *t, int n_sites) {
    int used = snprintf(a->summary, sizeof a->summary, "rank %d, alpha %g, %d of %d linears (", a->max_rank,
                        a->alpha, a->n_adapted, n_sites);
    int first = 1;
    for (int i = 0; i < t->n && used < (int)sizeof a->summary; i++) {
        if (!a->delta[i].rank) continue;
        char mod[64];
        module_of(t->spec[i].name, mod, sizeof mod);
        int seen = 0; /* listed once, at its first layer */
        for (int j = 0; j < i && !seen; j++) {
            char other[64];
            if (!a->delta[j].rank) continue;
            module_of(t->spec[j].name, other, sizeof other);
            seen = !strcmp(other, mod);
        }
        if (seen) continue;
        used += snprintf(a->summary + used, sizeof a->summary - (size_t)used, "%s%s", first ? "" : ", ", mod);
        first = 0;
    }
    if (used < (int)sizeof a->summary) snprintf(a->summary + used, sizeof a->summary - (size_t)used, ")");
}

/* Checks the pair (A, B) for table entry i and sets its delta's shape and scale (its values come
 * later: read_pair); -1 with err filled. */
static int check_pair(lora_adapter *a, const mw_table *t, int i, const wt_tensor *A, const wt_tensor *B, double alpha,
                      int rslora, int gguf, char *err, size_t errlen) {
    const weight_spec *s = &t->spec[i];
    const int64_t rows = s->stored_rows ? s->stored_rows : s->shape[0];
    char shape_a[64], shape_b[64];
    if (A->n_dims != 2 || B->n_dims != 2 || A->shape[0] != B->shape[1] || A->shape[1] != s->shape[1] ||
        B->shape[0] != rows || A->shape[0] < 1 || A->shape[0] > LORA_MAX_RANK) {
        snprintf(err, errlen, "adapter of '%s' (%lld x %lld): A is %s and B %s, where A must be [rank][%lld] and B "
                              "[%lld][rank] with rank 1..%d", s->name, (long long)rows, (long long)s->shape[1],
                 wt_shape_str(A->n_dims, A->shape, shape_a, sizeof shape_a), wt_shape_str(B->n_dims, B->shape, shape_b, sizeof shape_b),
                 (long long)s->shape[1], (long long)rows, LORA_MAX_RANK);
        return -1;
    }
    lora_delta *d = &a->delta[i];
    d->rank = (int)A->shape[0];
    d->in = s->shape[1];
    d->out = s->shape[0];
    /* PEFT: alpha / r (alpha / sqrt(r), rsLoRA); llama.cpp: alpha / r, or 1 for an alpha of 0 */
    d->scale = (float)(gguf && alpha == 0 ? 1.0 : rslora ? alpha / sqrt((double)d->rank) : alpha / d->rank);
    a->n_adapted++;
    a->max_rank = d->rank > a->max_rank ? d->rank : a->max_rank;
    return 0;
}

/* Floats of a delta's A and blocked B^T (LORA_BLOCK columns of B^T at a time, the last padded). */
static size_t delta_floats(const lora_delta *d) {
    return (size_t)d->rank * (size_t)d->in + (size_t)(d->out + LORA_BLOCK - 1) / LORA_BLOCK * LORA_BLOCK * (size_t)d->rank;
}

/* Reads the values of a checked pair into d->a and d->bt (memory of delta_floats(d) floats, zeroed); -1 with err. */
static int read_pair(lora_delta *d, const weight_spec *s, const wt_tensor *A, const wt_tensor *B, float *mem,
                     char *err, size_t errlen) {
    d->a = mem;
    d->bt = mem + (size_t)d->rank * (size_t)d->in;
    float *b = malloc(sizeof(float) * (size_t)(d->out * d->rank));
    if (!b || read_rows(A, 0, d->rank, d->a) != 0 || read_rows(B, s->first_row, d->out, b) != 0) {
        free(b);
        snprintf(err, errlen, "adapter of '%s': cannot read A and B (%s, %s)", s->name, dtype_name(A->dtype),
                 dtype_name(B->dtype));
        return -1;
    }
    for (int64_t o = 0; o < d->out; o++)
        for (int j = 0; j < d->rank; j++) d->bt[lora_bt_index(d, o, j)] = b[o * d->rank + j];
    free(b);
    for (size_t k = 0; k < delta_floats(d); k++)
        if (!isfinite(mem[k])) {
            snprintf(err, errlen, "adapter of '%s' holds a NaN or an infinity", s->name);
            return -1;
        }
    return 0;
}

/* Each A/B pair of the adapter file f matched to the weight it updates (src_a[i], src_b[i] for the
 * table's entry i, the ranks and scales in out->delta): 0, or -1 with err filled for a pair the
 * model has no weight for, reads in a way that takes no update, or a half pair. */
static int match_pairs(lora_adapter *out, const mw_table *t, const unsigned char *sites, const wt_file *f, int gguf,
                       const peft_config *peft, const wt_tensor **src_a, const wt_tensor **src_b, const char *path,
                       char *err, size_t errlen) {
    const size_t n = wt_count(f);
    if (n == 0) {
        snprintf(err, errlen, "%s: an adapter with no tensors", path);
        return -1;
    }
    for (size_t k = 0; k < n; k++) {
        const wt_tensor *x = wt_at(f, k);
        char base[400], other[440];
        int is_b;
        if (split_name(x->name, gguf, base, sizeof base, &is_b, err, errlen) != 0) return -1;
        if (is_b) continue; /* found from its A */
        /* the pair's other half */
        const size_t stem = strlen(x->name) - strlen(gguf ? ".lora_a" : ".lora_A.weight");
        snprintf(other, sizeof other, "%.*s%s", (int)stem, x->name, gguf ? ".lora_b" : ".lora_B.weight");
        const wt_tensor *B = wt_find(f, other);
        if (!B) {
            snprintf(err, errlen, "adapter tensor '%.200s' has no '%.200s'", x->name, other);
            return -1;
        }
        int matched = 0;
        for (int i = 0; i < t->n; i++) {
            const weight_spec *s = &t->spec[i];
            int part = 0;
            for (int p = 0; p < s->n_parts; p++) part |= !strcmp(s->parts[p].name, base);
            if (strcmp(s->name, base) && !part) continue;
            if (s->n_dims != 2 || s->n_parts || s->stacked) {
                snprintf(err, errlen, "adapter of '%s': the model reads it as %s (models.lua:%d), which takes no "
                                      "low-rank update", base, s->n_dims != 2 ? "a vector" : s->stacked ?
                                      "one expert of a stacked tensor" : "one part of a weight joined at load", s->line);
                return -1;
            }
            if (sites && !sites[i]) {
                snprintf(err, errlen, "adapter of '%s': the model does not read it as a linear over the step's tokens "
                                      "(models.lua:%d), where adapters apply per request; --lora-merge folds it in",
                         base, s->line);
                return -1;
            }
            if (out->delta[i].rank) {
                snprintf(err, errlen, "adapter of '%s': two pairs update it", s->name);
                return -1;
            }
            if (check_pair(out, t, i, x, B, peft->alpha, peft->rslora, gguf, err, errlen) != 0) return -1;
            src_a[i] = x, src_b[i] = B;
            matched = 1;
        }
        if (!matched) {
            snprintf(err, errlen, "adapter tensor '%.200s': the model has no weight '%.200s' (models.lua entry '%s')",
                     x->name, base, t->arch);
            return -1;
        }
    }
    /* every B had its A: a B alone is a half pair */
    for (size_t k = 0; k < n; k++) {
        const wt_tensor *x = wt_at(f, k);
        char base[400], other[440];
        int is_b;
        if (split_name(x->name, gguf, base, sizeof base, &is_b, err, errlen) != 0 || !is_b) continue;
        const size_t stem = strlen(x->name) - strlen(gguf ? ".lora_b" : ".lora_B.weight");
        snprintf(other, sizeof other, "%.*s%s", (int)stem, x->name, gguf ? ".lora_a" : ".lora_A.weight");
        if (!wt_find(f, other)) {
            snprintf(err, errlen, "adapter tensor '%.200s' has no '%.200s'", x->name, other);
            return -1;
        }
    }
    return 0;
}

int lora_open(const char *path, const mw_table *t, const unsigned char *sites, const char *source_format,
              lora_adapter *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s", path);
    char cfg_path[600], st_path[600];
    const int dir = is_dir(path);
    peft_config peft = {0, 0};
    const char *weights = path;
    if (dir || ends_with(path, ".safetensors") || ends_with(path, "adapter_config.json")) {
        const char *slash = strrchr(path, '/');
        const int stem = dir ? (int)strlen(path) : slash ? (int)(slash - path) : 1;
        snprintf(cfg_path, sizeof cfg_path, "%.*s/adapter_config.json", stem, dir || slash ? path : ".");
        snprintf(st_path, sizeof st_path, "%.*s/adapter_model.safetensors", stem, dir || slash ? path : ".");
        if (!dir && ends_with(path, ".safetensors")) snprintf(st_path, sizeof st_path, "%s", path);
        weights = st_path;
        if (read_peft_config(cfg_path, &peft, err, errlen) != 0) return -1;
    }
    wt_file *f = wt_open(weights, err, errlen);
    if (!f) return -1;
    const wt_tensor **src_a = NULL, **src_b = NULL; /* per table entry, its pair in the file */
    const int gguf = wt_get_format(f) == WT_FORMAT_GGUF;
    int rc = -1;
    if (gguf) {
        const gguf_file *g = wt_gguf(f);
        const char *type = gguf_get_str(g, "general.type"), *kind = gguf_get_str(g, "adapter.type");
        if (!type || strcmp(type, "adapter") || !kind || strcmp(kind, "lora")) {
            snprintf(err, errlen, "%s: a GGUF of general.type '%s' and adapter.type '%s', not a LoRA adapter "
                                  "(general.type \"adapter\", adapter.type \"lora\": convert_lora_to_gguf.py)",
                     path, type ? type : "(none)", kind ? kind : "(none)");
            goto done;
        }
        if (gguf_get_float(g, "adapter.lora.alpha", &peft.alpha) != 0) peft.alpha = 0;
    } else if (peft.alpha == 0) {
        snprintf(err, errlen, "%s: a safetensors adapter comes with adapter_config.json beside it", path);
        goto done;
    }
    /* a checkpoint's names are its format's: an adapter must name the weights as the build's file does */
    if (strcmp(source_format, gguf ? "gguf" : "safetensors")) {
        snprintf(err, errlen, "%s: a %s adapter names the weights of a %s checkpoint, and this binary was built from "
                              "a %s one (%s)", path, gguf ? "GGUF" : "PEFT", gguf ? "GGUF" : "safetensors", source_format,
                 gguf ? "use the PEFT adapter it was converted from" :
                        "convert the adapter with llama.cpp's convert_lora_to_gguf.py");
        goto done;
    }
    out->alpha = peft.alpha;
    out->n_weights = t->n;
    out->delta = calloc((size_t)(t->n ? t->n : 1), sizeof *out->delta);
    if (!out->delta) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    src_a = calloc((size_t)(t->n ? t->n : 1), sizeof *src_a);
    src_b = calloc((size_t)(t->n ? t->n : 1), sizeof *src_b);
    if (!src_a || !src_b) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    if (match_pairs(out, t, sites, f, gguf, &peft, src_a, src_b, path, err, errlen) != 0) goto done;
    /* the values, in one buffer of huge pages: a step streams every adapter it serves */
    size_t floats = 0;
    for (int i = 0; i < t->n; i++) floats += out->delta[i].rank ? delta_floats(&out->delta[i]) : 0;
    out->mem_bytes = floats * sizeof(float);
    if (!(out->mem = ha_alloc(out->mem_bytes ? out->mem_bytes : 1))) {
        snprintf(err, errlen, "out of memory for %zu bytes of adapter", out->mem_bytes);
        goto done;
    }
    memset(out->mem, 0, out->mem_bytes);
    floats = 0;
    for (int i = 0; i < t->n; i++) {
        if (!out->delta[i].rank) continue;
        if (read_pair(&out->delta[i], &t->spec[i], src_a[i], src_b[i], out->mem + floats, err, errlen) != 0) goto done;
        floats += delta_floats(&out->delta[i]);
    }
    int n_sites = 0;
    for (int i = 0; i < t->n; i++) n_sites += sites ? sites[i] : t->spec[i].n_dims == 2;
    summarize(out, t, n_sites);
    rc = 0;
done:
    free(src_a);
    free(src_b);
    wt_close(f);
    if (rc != 0) lora_free(out);
    return rc;
}

void lora_free(lora_adapter *a) {
    ha_free(a->mem, a->mem_bytes ? a->mem_bytes : 1);
    a->mem = NULL, a->mem_bytes = 0;
    free(a->delta);
    a->delta = NULL;
    a->n_weights = a->n_adapted = a->max_rank = 0;
}

void lora_merge_row(const lora_delta *d, int64_t row, float *values) {
    for (int j = 0; j < d->rank; j++) {
        const float s = d->scale * d->bt[lora_bt_index(d, row, j)];
        const float *a = d->a + (int64_t)j * d->in;
        for (int64_t c = 0; c < d->in; c++) values[c] += s * a[c];
    }
}
