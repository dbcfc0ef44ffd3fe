/* quant_ckpt.c — GPTQ/AWQ (zero-point int4/int8) and FP8 (E4M3) linears repacked into Q4_Z, Q8_Z, F8_B32. */
#include "quant_ckpt.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "hugealloc.h"
#include "quant_rules.h"
#include "printable.h"

#define QC_MAX_CONFIG (16u << 20) /* a config.json larger than this is not a config */

typedef enum { QC_NONE, QC_GPTQ, QC_AWQ, QC_FP8 } qc_method;

typedef struct {
    qc_method method;
    int bits;            /* GPTQ/AWQ: 4 or 8 */
    int64_t group_size;  /* GPTQ/AWQ: inputs per group, -1 = one group per row */
    int zero_plus;       /* classic GPTQ stores zero - 1 */
    int64_t block[2];    /* FP8: weight_block_size [rows, cols], 0 = per-tensor or per-row scales */
    qr_rules *rules;     /* modules left unquantized, per-module settings (quant_rules.h) */
} qc_config;

typedef struct {
    const char *label; /* the checkpoint's path, first in every message */
    const wt_tensor *in;
    size_t n;
    const wt_tensor **sorted; /* by name */
    unsigned char *consumed;  /* parts folded into a repacked tensor */
    qc_result *out;
    char *err;
    size_t errlen;
    char **perm_families; /* expert families (expert_family) whose act-order makes every member reordered */
    size_t n_perm_families;
} qc_ctx;

static int qc_fail(qc_ctx *c, const char *fmt, ...) {
    if (!c->err || c->errlen == 0) return -1;
    int n = snprintf(c->err, c->errlen, "%s: ", c->label);
    if (n < 0) n = 0;
    if ((size_t)n < c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    for (char *p = c->err; *p; p++) if (*p == '\n' || *p == '\r') *p = ' ';
    return -1;
}

static inline uint32_t ld32(const void *base, size_t i) {
    const uint8_t *p = (const uint8_t *)base + 4 * i;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint16_t ld16(const void *base, size_t i) {
    const uint8_t *p = (const uint8_t *)base + 2 * i;
    return (uint16_t)(p[0] | p[1] << 8);
}

/* ---- configuration ---- */

/* The whole file as a NUL-terminated string; NULL with *missing set when it does not exist. */
static char *read_small_file(const char *path, int *missing) {
    *missing = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        *missing = errno == ENOENT;
        return NULL;
    }
    char *buf = NULL;
    struct stat st;
    if (fstat(fileno(fp), &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size <= QC_MAX_CONFIG &&
        (buf = malloc((size_t)st.st_size + 1)) != NULL) {
        size_t got = fread(buf, 1, (size_t)st.st_size, fp);
        buf[got] = 0;
    }
    fclose(fp);
    return buf;
}

/* An integer-valued JSON number in [lo, hi]. */
static int json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    const double d = v->valuedouble;
    if (!isfinite(d) || floor(d) != d || d < (double)lo || d > (double)hi) return -1;
    *out = (int64_t)d;
    return 0;
}

static int parse_config(qc_ctx *c, const char *config_path, qc_config *q) {
    memset(q, 0, sizeof *q);
    int missing;
    char *text = read_small_file(config_path, &missing);
    if (!text) {
        if (missing) return 0;
        return qc_fail(c, "cannot read %s", config_path);
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return qc_fail(c, "%s: invalid JSON", config_path);
    }
    const cJSON *qcfg = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    int rc = 0;
    char vb[64];
    if (!qcfg || cJSON_IsNull(qcfg)) goto done;
    if (!cJSON_IsObject(qcfg)) { rc = qc_fail(c, "%s: quantization_config is not an object", config_path); goto done; }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(qcfg, "quant_method");
    if (!cJSON_IsString(m)) { rc = qc_fail(c, "%s: quantization_config.quant_method is missing", config_path); goto done; }
    if (strcasecmp(m->valuestring, "gptq") == 0) q->method = QC_GPTQ;
    else if (strcasecmp(m->valuestring, "awq") == 0) q->method = QC_AWQ;
    else if (strcasecmp(m->valuestring, "fp8") == 0) q->method = QC_FP8;
    else {
        rc = qc_fail(c, "%s: quantization_config.quant_method '%s' is not supported (gptq, awq, fp8)", config_path,
                     load_printable(m->valuestring, vb, sizeof vb));
        goto done;
    }
    if (q->method == QC_GPTQ || q->method == QC_AWQ) {
        const char *name = q->method == QC_GPTQ ? "gptq" : "awq";
        int64_t bits = 0;
        if (json_int(cJSON_GetObjectItemCaseSensitive(qcfg, "bits"), 0, 64, &bits) ||
            (bits != 4 && (bits != 8 || q->method == QC_AWQ))) {
            rc = qc_fail(c, "%s: quantization_config.bits must be %s for %s", config_path,
                         q->method == QC_GPTQ ? "4 or 8" : "4", name);
            goto done;
        }
        q->bits = (int)bits;
        const cJSON *gs = cJSON_GetObjectItemCaseSensitive(qcfg, "group_size");
        if (!gs) gs = cJSON_GetObjectItemCaseSensitive(qcfg, "q_group_size");
        if (json_int(gs, -1, INT32_MAX, &q->group_size) || q->group_size == 0) {
            rc = qc_fail(c, "%s: quantization_config.group_size must be -1 or a positive integer", config_path);
            goto done;
        }
        if (q->method == QC_GPTQ) {
            const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(qcfg, "checkpoint_format");
            q->zero_plus = 1;
            if (fmt && !cJSON_IsNull(fmt)) {
                if (cJSON_IsString(fmt) && strcasecmp(fmt->valuestring, "gptq_v2") == 0) q->zero_plus = 0;
                else if (!cJSON_IsString(fmt) || strcasecmp(fmt->valuestring, "gptq") != 0) {
                    rc = qc_fail(c, "%s: quantization_config.checkpoint_format must be \"gptq\" or \"gptq_v2\"", config_path);
                    goto done;
                }
            }
        } else {
            const cJSON *ver = cJSON_GetObjectItemCaseSensitive(qcfg, "version");
            if (ver && !cJSON_IsNull(ver) && (!cJSON_IsString(ver) || strcasecmp(ver->valuestring, "gemm") != 0)) {
                rc = qc_fail(c, "%s: quantization_config.version '%s' is not supported (AWQ's \"gemm\" packing only)",
                             config_path, cJSON_IsString(ver) ? load_printable(ver->valuestring, vb, sizeof vb) : "?");
                goto done;
            }
            const cJSON *zp = cJSON_GetObjectItemCaseSensitive(qcfg, "zero_point");
            if (zp && cJSON_IsFalse(zp)) {
                rc = qc_fail(c, "%s: quantization_config.zero_point false is not supported (AWQ with zero points only)",
                             config_path);
                goto done;
            }
        }
    } else {
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(qcfg, "activation_scheme");
        if (act && !cJSON_IsNull(act) && (!cJSON_IsString(act) || strcasecmp(act->valuestring, "dynamic") != 0)) {
            rc = qc_fail(c, "%s: quantization_config.activation_scheme must be \"dynamic\" (static activation scales "
                            "are not supported)", config_path);
            goto done;
        }
        const cJSON *bs = cJSON_GetObjectItemCaseSensitive(qcfg, "weight_block_size");
        if (bs && !cJSON_IsNull(bs)) {
            if (!cJSON_IsArray(bs) || cJSON_GetArraySize(bs) != 2 ||
                json_int(cJSON_GetArrayItem(bs, 0), 1, INT32_MAX, &q->block[0]) ||
                json_int(cJSON_GetArrayItem(bs, 1), 1, INT32_MAX, &q->block[1])) {
                rc = qc_fail(c, "%s: quantization_config.weight_block_size must be [rows, columns]", config_path);
                goto done;
            }
            if (q->block[1] % INGOT_QBLOCK != 0) {
                rc = qc_fail(c, "%s: quantization_config.weight_block_size [%lld, %lld]: columns must be a multiple of %d",
                             config_path, (long long)q->block[0], (long long)q->block[1], INGOT_QBLOCK);
                goto done;
            }
        }
    }
    if (q->method != QC_NONE) {
        char rerr[256];
        if (!(q->rules = qr_parse(qcfg, q->method == QC_GPTQ, rerr, sizeof rerr))) rc = qc_fail(c, "%s: %s", config_path, rerr);
    }
done:
    cJSON_Delete(root);
    return rc;
}

/* ---- lookups and output ---- */

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const wt_tensor *const *)a)->name, (*(const wt_tensor *const *)b)->name);
}

static const wt_tensor *find(qc_ctx *c, const char *name) {
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = strcmp(name, c->sorted[mid]->name);
        if (r == 0) return c->sorted[mid];
        if (r < 0) hi = mid; else lo = mid + 1;
    }
    return NULL;
}

/* prefix + suffix in buf; -1 when it does not fit. */
static int join(char *buf, size_t cap, const char *prefix, size_t plen, const char *suffix) {
    size_t sl = strlen(suffix);
    if (plen + sl + 1 > cap) return -1;
    memcpy(buf, prefix, plen);
    memcpy(buf + plen, suffix, sl + 1);
    return 0;
}

/* The part `prefix + suffix`, marked consumed; NULL when absent. */
static const wt_tensor *part(qc_ctx *c, const char *prefix, size_t plen, const char *suffix) {
    char name[1024];
    if (join(name, sizeof name, prefix, plen, suffix)) return NULL;
    const wt_tensor *t = find(c, name);
    if (t) c->consumed[t - c->in] = 1;
    return t;
}

#define QC_CHUNK ((size_t)64 << 20) /* repacked weights are carved from chunks of this size (or larger) */

/* Records p (a name: bytes 0; a chunk: its size) as the result's. */
static int own(qc_ctx *c, void *p, size_t bytes) {
    qc_block *no = realloc(c->out->owned, (c->out->n_owned + 1) * sizeof *no);
    if (!no) return -1;
    c->out->owned = no;
    no[c->out->n_owned++] = (qc_block){p, bytes};
    return 0;
}

/* Zeroed, 64-byte aligned memory for a repacked weight, carved from huge-page chunks: one stream
 * of weights as the loader's own copy would be (the loader uses them in place). Freed with the
 * result only; NULL when out of memory. */
static void *weight_alloc(qc_ctx *c, size_t bytes) {
    qc_result *r = c->out;
    bytes = (bytes + 63) / 64 * 64;
    if (bytes == 0 || bytes > r->chunk_cap - r->chunk_used) {
        const size_t cap = bytes > QC_CHUNK ? bytes : QC_CHUNK;
        void *p = ha_alloc(cap);
        if (!p) return NULL;
        if (own(c, p, cap)) {
            ha_free(p, cap);
            return NULL;
        }
        r->chunk = p, r->chunk_used = 0, r->chunk_cap = cap;
    }
    void *p = r->chunk + r->chunk_used;
    r->chunk_used += bytes;
    return p;
}

/* Appends the repacked tensor `prefix + suffix` (data from weight_alloc; the name becomes owned): [rows, cols], or
 * [cols] when rows is 0. */
static int emit_named(qc_ctx *c, const char *prefix, size_t plen, const char *suffix, ingot_dtype dt, int64_t rows,
                      int64_t cols, void *data, size_t nbytes) {
    const size_t slen = strlen(suffix) + 1;
    char *name = malloc(plen + slen);
    if (!name || own(c, name, 0)) {
        free(name);
        return qc_fail(c, "out of memory");
    }
    memcpy(name, prefix, plen);
    memcpy(name + plen, suffix, slen);
    wt_tensor *t = &c->out->tensors[c->out->n++];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = dt;
    t->n_dims = rows ? 2 : 1;
    t->shape[0] = rows ? rows : cols;
    t->shape[1] = rows ? cols : 0;
    t->data = data;
    t->nbytes = nbytes;
    t->repacked = 1;
    return 0;
}

static int emit(qc_ctx *c, const char *prefix, size_t plen, ingot_dtype dt, int64_t rows, int64_t cols, void *data,
                size_t nbytes) {
    return emit_named(c, prefix, plen, ".weight", dt, rows, cols, data, nbytes);
}



static int shape_is(const wt_tensor *t, int n_dims, int64_t a, int64_t b) {
    return t->n_dims == n_dims && t->shape[0] == a && (n_dims < 2 || t->shape[1] == b);
}

static const char *shape_str(const wt_tensor *t, char *buf, size_t cap) { return wt_shape_str(t->n_dims, t->shape, buf, cap); }

/* ---- GPTQ and AWQ ---- */

/* AWQ's GEMM packing: output 8c + e of a word is in nibble awq_nibble[e]
 * (AutoAWQ packs outputs in the order 0 2 4 6 1 3 5 7). */
static const int awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

typedef struct {
    const wt_tensor *qweight, *qzeros, *scales, *g_idx;
    int awq, bits, pack, zero_plus;
    uint32_t mask;
    int64_t in, out, groups, group_size;
} zp_linear;

/* The code of weight (output j, input i). GPTQ packs pack inputs per word
 * along the input dimension (qweight [in/pack, out]); AWQ packs 8 outputs
 * per word (qweight [in, out/8]). */
static inline uint32_t zp_code(const zp_linear *L, int64_t i, int64_t j) {
    if (L->awq) return ld32(L->qweight->data, (size_t)(i * (L->out / 8) + j / 8)) >> (4 * awq_nibble[j % 8]) & 15u;
    return ld32(L->qweight->data, (size_t)((i / L->pack) * L->out + j)) >> (L->bits * (i % L->pack)) & L->mask;
}
/* The zero point of group g, output j, after the format's convention. */
static inline uint32_t zp_zero(const zp_linear *L, int64_t g, int64_t j) {
    const int64_t words = L->out / L->pack;
    if (L->awq) return ld32(L->qzeros->data, (size_t)(g * words + j / 8)) >> (4 * awq_nibble[j % 8]) & 15u;
    return (ld32(L->qzeros->data, (size_t)(g * words + j / L->pack)) >> (L->bits * (j % L->pack)) & L->mask) +
           (uint32_t)L->zero_plus;
}
static inline int64_t zp_group(const zp_linear *L, int64_t i) {
    if (L->g_idx) return (int32_t)ld32(L->g_idx->data, (size_t)i);
    return L->group_size < 0 ? 0 : i / L->group_size;
}

/* The inputs in the order that makes act-order groups contiguous: by group, then by input (a
 * stable counting sort). */
static int32_t *group_order(qc_ctx *c, const zp_linear *L) {
    int32_t *perm = weight_alloc(c, (size_t)L->in * sizeof *perm);
    int64_t *start = calloc((size_t)L->groups + 1, sizeof *start);
    if (!perm || !start) {
        free(start);
        return NULL;
    }
    for (int64_t i = 0; i < L->in; i++) start[zp_group(L, i) + 1]++;
    for (int64_t g = 0; g < L->groups; g++) start[g + 1] += start[g];
    for (int64_t i = 0; i < L->in; i++) perm[start[zp_group(L, i)]++] = (int32_t)i;
    free(start);
    return perm;
}

/* force_perm: reorder the inputs by group even when the stored order already keeps each block of 32
 * in one group (an expert whose siblings need the order: the kernels read every expert's
 * activations the same way). */
static int repack_zero_point(qc_ctx *c, const qc_config *q, const wt_tensor *qw, const char *prefix, size_t plen,
                             int force_perm) {
    char nb[160], sb[64];
    zp_linear L = {0};
    L.awq = q->method == QC_AWQ;
    L.bits = q->bits;
    L.pack = 32 / q->bits;
    L.mask = (1u << q->bits) - 1;
    L.zero_plus = q->method == QC_GPTQ ? q->zero_plus : 0;
    L.group_size = q->group_size;
    L.qweight = qw;
    char qb[160];
    const char *qname = load_printable(qw->name, qb, sizeof qb);
    if (qw->dtype != INGOT_I32 || qw->n_dims != 2)
        return qc_fail(c, "tensor '%s': expected a 2-D int32 tensor, found %s %s", qname, dtype_name(qw->dtype),
                       shape_str(qw, sb, sizeof sb));
    /* the shapes are bounded by the file size, so these products fit */
    L.in = L.awq ? qw->shape[0] : qw->shape[0] * L.pack;
    L.out = L.awq ? qw->shape[1] * 8 : qw->shape[1];
    if (L.in == 0 || L.out == 0) return qc_fail(c, "tensor '%s': empty shape %s", qname, shape_str(qw, sb, sizeof sb));
    if (L.in > INT32_MAX || L.out > INT32_MAX)
        return qc_fail(c, "tensor '%s': shape %s is too large", qname, shape_str(qw, sb, sizeof sb));
    if (L.out % L.pack != 0)
        return qc_fail(c, "tensor '%s': %lld outputs are not a multiple of %d (the zero points pack %d per word)", qname,
                       (long long)L.out, L.pack, L.pack);
    if (L.in % INGOT_QBLOCK != 0)
        return qc_fail(c, "tensor '%s': %lld inputs are not a multiple of %d", qname, (long long)L.in, INGOT_QBLOCK);
    if (L.group_size > 0 && L.awq && L.in % L.group_size != 0)
        return qc_fail(c, "tensor '%s': %lld inputs are not a multiple of group_size %lld", qname, (long long)L.in,
                       (long long)L.group_size);
    L.groups = L.group_size < 0 ? 1 : (L.in + L.group_size - 1) / L.group_size;
    L.scales = part(c, prefix, plen, ".scales");
    L.qzeros = part(c, prefix, plen, ".qzeros");
    L.g_idx = L.awq ? NULL : part(c, prefix, plen, ".g_idx");
    if (!L.scales || !L.qzeros) {
        char want[1024], wb[160];
        join(want, sizeof want, prefix, plen, L.scales ? ".qzeros" : ".scales");
        return qc_fail(c, "tensor '%s' has no '%s' beside it", qname, load_printable(want, wb, sizeof wb));
    }
    if (force_perm && !L.g_idx)
        return qc_fail(c, "tensor '%s' has no g_idx beside it, but other experts of its layer are act-order (their g_idx "
                          "mixes groups)", qname);
    if (L.scales->dtype != INGOT_F16 || !shape_is(L.scales, 2, L.groups, L.out))
        return qc_fail(c, "tensor '%s': expected f16 [%lld, %lld] (%lld groups of %lld inputs), found %s %s",
                       load_printable(L.scales->name, nb, sizeof nb), (long long)L.groups, (long long)L.out,
                       (long long)L.groups, (long long)(L.group_size < 0 ? L.in : L.group_size),
                       dtype_name(L.scales->dtype), shape_str(L.scales, sb, sizeof sb));
    if (L.qzeros->dtype != INGOT_I32 || !shape_is(L.qzeros, 2, L.groups, L.out / L.pack))
        return qc_fail(c, "tensor '%s': expected i32 [%lld, %lld], found %s %s", load_printable(L.qzeros->name, nb, sizeof nb),
                       (long long)L.groups, (long long)(L.out / L.pack), dtype_name(L.qzeros->dtype),
                       shape_str(L.qzeros, sb, sizeof sb));
    if (L.g_idx) {
        if (L.g_idx->dtype != INGOT_I32 || !shape_is(L.g_idx, 1, L.in, 0))
            return qc_fail(c, "tensor '%s': expected i32 [%lld], found %s %s", load_printable(L.g_idx->name, nb, sizeof nb),
                           (long long)L.in, dtype_name(L.g_idx->dtype), shape_str(L.g_idx, sb, sizeof sb));
        for (int64_t i = 0; i < L.in; i++) {
            const int64_t g = (int32_t)ld32(L.g_idx->data, (size_t)i);
            if (g < 0 || g >= L.groups)
                return qc_fail(c, "tensor '%s': entry %lld is group %lld, outside [0, %lld)",
                               load_printable(L.g_idx->name, nb, sizeof nb), (long long)i, (long long)g, (long long)L.groups);
        }
    }
    for (int64_t g = 0; g < L.groups; g++)
        for (int64_t j = 0; j < L.out; j++)
            if ((ld16(L.scales->data, (size_t)(g * L.out + j)) & 0x7c00) == 0x7c00)
                return qc_fail(c, "tensor '%s': the scale of group %lld, output %lld is not finite (NaN or infinity)",
                               load_printable(L.scales->name, nb, sizeof nb), (long long)g, (long long)j);
    /* Blocks of 32 inputs with one group each take the block types. An
     * act-order g_idx that mixes groups inside a block is reordered: the
     * inputs sorted by group (`<prefix>.weight.perm`, the kernels read the
     * activations in that order); when even then a block would straddle two
     * groups (a group whose size is not a multiple of 32), the weights are
     * f32. */
    int blocked = 1;
    for (int64_t i = 0; i < L.in && blocked; i++) blocked = zp_group(&L, i) == zp_group(&L, i - i % INGOT_QBLOCK);
    const int64_t nb32 = L.in / INGOT_QBLOCK;
    int32_t *perm = NULL;
    if (!blocked || (force_perm && L.g_idx)) {
        if (!(perm = group_order(c, &L))) return qc_fail(c, "out of memory repacking '%s'", qname);
        blocked = 1;
        for (int64_t i = 0; i < L.in && blocked; i++)
            blocked = zp_group(&L, perm[i]) == zp_group(&L, perm[i - i % INGOT_QBLOCK]);
        if (!blocked) perm = NULL; /* its memory stays in the chunk */
    }
    if (!blocked) {
        float *w = weight_alloc(c, (size_t)L.out * (size_t)L.in * sizeof *w);
        if (!w) return qc_fail(c, "out of memory repacking '%s'", qname);
        for (int64_t j = 0; j < L.out; j++)
            for (int64_t i = 0; i < L.in; i++) {
                const int64_t g = zp_group(&L, i);
                const float d = fp16_to_f32(ld16(L.scales->data, (size_t)(g * L.out + j)));
                w[j * L.in + i] = d * (float)((int64_t)zp_code(&L, i, j) - (int64_t)zp_zero(&L, g, j));
            }
        return emit(c, prefix, plen, INGOT_F32, L.out, L.in, w, (size_t)L.out * (size_t)L.in * sizeof *w);
    }
    const ingot_dtype dt = L.bits == 4 ? INGOT_Q4_Z : INGOT_Q8_Z;
    const size_t bb = dtype_block_bytes(dt), nbytes = (size_t)L.out * (size_t)nb32 * bb;
    uint8_t *w = weight_alloc(c, nbytes);
    if (!w) {
        return qc_fail(c, "out of memory repacking '%s'", qname);
    }
    for (int64_t j = 0; j < L.out; j++)
        for (int64_t b = 0; b < nb32; b++) {
            uint8_t *blk = w + ((size_t)j * (size_t)nb32 + (size_t)b) * bb;
            const int64_t i0 = b * INGOT_QBLOCK, g = zp_group(&L, perm ? perm[i0] : i0);
            const uint16_t d = ld16(L.scales->data, (size_t)(g * L.out + j)), z = (uint16_t)zp_zero(&L, g, j);
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &z, 2);
            for (int l = 0; l < INGOT_QBLOCK; l++) {
                const uint32_t v = zp_code(&L, perm ? perm[i0 + l] : i0 + l, j);
                if (dt == INGOT_Q8_Z) blk[4 + l] = (uint8_t)v;
                else blk[4 + l % 16] |= (uint8_t)(v << (4 * (l / 16))); /* Q4_0's nibble order */
            }
        }
    if (emit(c, prefix, plen, dt, L.out, L.in, w, nbytes)) return -1;
    return perm ? emit_named(c, prefix, plen, ".weight.perm", INGOT_I32, 0, L.in, perm, (size_t)L.in * sizeof *perm) : 0;
}

/* ---- FP8 ---- */

/* A scale tensor's element k as f32 (f32 or bf16; both exact). */
static float scale_at(const wt_tensor *t, size_t k) {
    if (t->dtype == INGOT_BF16) return bf16_to_f32(ld16(t->data, k));
    const uint32_t u = ld32(t->data, k);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int repack_fp8(qc_ctx *c, const qc_config *q, const wt_tensor *wq, const char *prefix, size_t plen) {
    char nb[160], sb[64];
    char wb[160];
    const char *wname = load_printable(wq->name, wb, sizeof wb);
    if (wq->n_dims != 2 || wq->shape[0] == 0 || wq->shape[1] == 0)
        return qc_fail(c, "tensor '%s': expected a 2-D float8_e4m3fn matrix, found %s", wname, shape_str(wq, sb, sizeof sb));
    const int64_t rows = wq->shape[0], cols = wq->shape[1];
    if (rows > INT32_MAX || cols > INT32_MAX) return qc_fail(c, "tensor '%s': shape %s is too large", wname, shape_str(wq, sb, sizeof sb));
    if (cols % INGOT_QBLOCK != 0)
        return qc_fail(c, "tensor '%s': %lld columns are not a multiple of %d", wname, (long long)cols, INGOT_QBLOCK);
    const wt_tensor *inp = part(c, prefix, plen, ".input_scale");
    if (inp)
        return qc_fail(c, "tensor '%s': static activation scales are not supported (activation_scheme \"dynamic\" only)",
                       load_printable(inp->name, nb, sizeof nb));
    const wt_tensor *s;
    int64_t srows = 1, scols = 1; /* the scale grid */
    if (q->block[0]) {
        s = part(c, prefix, plen, ".weight_scale_inv");
        srows = (rows + q->block[0] - 1) / q->block[0];
        scols = (cols + q->block[1] - 1) / q->block[1];
        if (!s) return qc_fail(c, "tensor '%s' has no weight_scale_inv beside it (weight_block_size is set)", wname);
        if (!shape_is(s, 2, srows, scols))
            return qc_fail(c, "tensor '%s': expected [%lld, %lld] (blocks of %lldx%lld over %lldx%lld), found %s",
                           load_printable(s->name, nb, sizeof nb), (long long)srows, (long long)scols, (long long)q->block[0],
                           (long long)q->block[1], (long long)rows, (long long)cols, shape_str(s, sb, sizeof sb));
    } else {
        s = part(c, prefix, plen, ".weight_scale");
        if (!s) return qc_fail(c, "tensor '%s' has no weight_scale beside it", wname);
        int64_t nel = 1;
        for (int d = 0; d < s->n_dims; d++) nel *= s->shape[d];
        if (nel == rows && rows > 1 && s->n_dims >= 1 && s->shape[0] == rows) srows = rows; /* one per output row */
        else if (nel != 1)
            return qc_fail(c, "tensor '%s': expected one scale or one per row (%lld), found %s",
                           load_printable(s->name, nb, sizeof nb), (long long)rows, shape_str(s, sb, sizeof sb));
    }
    if (s->dtype != INGOT_F32 && s->dtype != INGOT_BF16)
        return qc_fail(c, "tensor '%s': scales must be f32 or bf16, found %s", load_printable(s->name, nb, sizeof nb),
                       dtype_name(s->dtype));
    for (int64_t k = 0; k < srows * scols; k++)
        if (!isfinite(scale_at(s, (size_t)k)))
            return qc_fail(c, "tensor '%s': scale %lld (block row %lld, column %lld) is not finite (NaN or infinity)",
                           load_printable(s->name, nb, sizeof nb), (long long)k, (long long)(k / scols), (long long)(k % scols));
    const int64_t nb32 = cols / INGOT_QBLOCK;
    const size_t nbytes = (size_t)rows * (size_t)nb32 * sizeof(block_f8_b32);
    uint8_t *w = weight_alloc(c, nbytes);
    if (!w) return qc_fail(c, "out of memory repacking '%s'", wname);
    const uint8_t *codes = wq->data;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < nb32; b++) {
            const int64_t c0 = b * INGOT_QBLOCK;
            const int64_t sr = srows == 1 ? 0 : (q->block[0] ? r / q->block[0] : r), sc = scols == 1 ? 0 : c0 / q->block[1];
            const float d = scale_at(s, (size_t)(sr * scols + sc));
            uint8_t *blk = w + ((size_t)r * (size_t)nb32 + (size_t)b) * sizeof(block_f8_b32);
            memcpy(blk, &d, 4);
            for (int l = 0; l < INGOT_QBLOCK; l++) {
                const uint8_t v = codes[(size_t)r * (size_t)cols + (size_t)(c0 + l)];
                if ((v & 0x7f) == 0x7f) {
                    return qc_fail(c, "tensor '%s': element [%lld, %lld] is NaN", wname, (long long)r, (long long)(c0 + l));
                }
                blk[4 + l] = v;
            }
        }
    return emit(c, prefix, plen, INGOT_F8_B32, rows, cols, w, nbytes);
}

/* ---- mixture-of-experts families ---- */

/* The expert index of a name: the digits after its first ".experts." (then "." or the end), as
 * [*d0, *d1); 0 when the name has none. The family of an expert linear is its name with that
 * index left out: the experts of one layer and matrix. */
static int expert_digits(const char *name, size_t len, size_t *d0, size_t *d1) {
    static const char tag[] = ".experts.";
    for (const char *p = name; (p = strstr(p, tag)) != NULL && (size_t)(p - name) + sizeof tag - 1 < len; p++) {
        size_t i = (size_t)(p - name) + sizeof tag - 1, j = i;
        while (j < len && name[j] >= '0' && name[j] <= '9') j++;
        if (j > i && (j == len || name[j] == '.')) {
            *d0 = i, *d1 = j;
            return 1;
        }
    }
    return 0;
}

/* name[0, len) with its expert index replaced by '*' (malloc'd); NULL when not an expert's or out of memory. */
static char *expert_family(const char *name, size_t len) {
    size_t d0, d1;
    if (!expert_digits(name, len, &d0, &d1)) return NULL;
    char *f = malloc(len - (d1 - d0) + 2);
    if (!f) return NULL;
    memcpy(f, name, d0);
    f[d0] = '*';
    memcpy(f + d0 + 1, name + d1, len - d1);
    f[len - (d1 - d0) + 1] = 0;
    return f;
}

/* Act-order experts: when the stored order of any expert of a family mixes groups inside a block
 * of 32, every expert of the family is reordered (the MoE kernels gather each expert's
 * activations by its order, for all experts or none). A malformed g_idx is left to
 * repack_zero_point to name. */
static int find_perm_families(qc_ctx *c) {
    for (size_t i = 0; i < c->n; i++) {
        size_t plen;
        const wt_tensor *t = &c->in[i];
        const size_t len = strlen(t->name);
        if (len < 8 || strcmp(t->name + len - 8, ".qweight") != 0) continue;
        plen = len - 8;
        char *fam = expert_family(t->name, plen);
        if (!fam) continue;
        char gname[1024];
        const wt_tensor *g = join(gname, sizeof gname, t->name, plen, ".g_idx") ? NULL : find(c, gname);
        int mixed = 0;
        if (g && g->dtype == INGOT_I32 && g->n_dims == 1)
            for (int64_t k = 0; k < g->shape[0] && !mixed; k++)
                mixed = ld32(g->data, (size_t)k) != ld32(g->data, (size_t)(k - k % INGOT_QBLOCK));
        for (size_t k = 0; mixed && k < c->n_perm_families; k++) mixed = strcmp(c->perm_families[k], fam) != 0;
        char **nf = mixed ? realloc(c->perm_families, (c->n_perm_families + 1) * sizeof *nf) : NULL;
        if (mixed && !nf) {
            free(fam);
            return qc_fail(c, "out of memory");
        }
        if (mixed) {
            c->perm_families = nf;
            c->perm_families[c->n_perm_families++] = fam;
        } else {
            free(fam);
        }
    }
    return 0;
}

static int in_perm_family(const qc_ctx *c, const char *prefix, size_t plen) {
    char *fam = expert_family(prefix, plen);
    int found = 0;
    for (size_t k = 0; fam && k < c->n_perm_families && !found; k++) found = strcmp(c->perm_families[k], fam) == 0;
    free(fam);
    return found;
}

typedef struct {
    char *family;
    size_t index; /* in the result's list */
} family_member;

static int cmp_member(const void *a, const void *b) {
    const family_member *x = a, *y = b;
    int r = strcmp(x->family, y->family);
    return r ? r : (x->index > y->index) - (x->index < y->index);
}

/* Every expert of a family has one type and shape (the generated code reads the layer's experts
 * as one stack of matrices): a disagreement is named here, at load, with both tensors. */
static int check_expert_families(qc_ctx *c) {
    const qc_result *r = c->out;
    family_member *m = malloc((r->n ? r->n : 1) * sizeof *m);
    if (!m) return qc_fail(c, "out of memory");
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; i < r->n && rc == 0; i++) {
        size_t d0, d1;
        const char *name = r->tensors[i].name;
        if (!expert_digits(name, strlen(name), &d0, &d1)) continue;
        if (!(m[n].family = expert_family(name, strlen(name)))) rc = qc_fail(c, "out of memory");
        else m[n++].index = i;
    }
    if (rc == 0) qsort(m, n, sizeof *m, cmp_member);
    for (size_t i = 1, first = 0; i < n && rc == 0; i++) {
        if (strcmp(m[first].family, m[i].family) != 0) {
            first = i; /* the first member of the next family */
            continue;
        }
        const wt_tensor *a = &r->tensors[m[first].index], *b = &r->tensors[m[i].index];
        int same = a->dtype == b->dtype && a->n_dims == b->n_dims;
        for (int d = 0; same && d < a->n_dims; d++) same = a->shape[d] == b->shape[d];
        if (!same) {
            char na[160], nb[160], sa[64], sb[64];
            rc = qc_fail(c, "tensor '%s' is %s %s, but '%s' is %s %s: every expert of a layer must have the same shape "
                            "and type", load_printable(b->name, nb, sizeof nb), dtype_name(b->dtype), shape_str(b, sb, sizeof sb),
                         load_printable(a->name, na, sizeof na), dtype_name(a->dtype), shape_str(a, sa, sizeof sa));
        }
    }
    for (size_t i = 0; i < n; i++) free(m[i].family);
    free(m);
    return rc;
}

/* ---- driver ---- */

static int ends_with(const char *s, const char *suffix, size_t *prefix_len) {
    size_t n = strlen(s), m = strlen(suffix);
    if (n < m || strcmp(s + n - m, suffix) != 0) return 0;
    *prefix_len = n - m;
    return 1;
}

int qc_repack(const char *label, const char *config_path, const wt_tensor *in, size_t n, qc_result *out, char *err,
              size_t errlen) {
    memset(out, 0, sizeof *out);
    qc_ctx c = {.label = label, .in = in, .n = n, .out = out, .err = err, .errlen = errlen};
    qc_config q;
    char nb[160];
    if (parse_config(&c, config_path, &q)) return -1;
    out->tensors = calloc(n ? n : 1, sizeof *out->tensors);
    c.sorted = malloc((n ? n : 1) * sizeof *c.sorted);
    c.consumed = calloc(n ? n : 1, 1);
    if (!out->tensors || !c.sorted || !c.consumed) {
        free(c.sorted), free(c.consumed);
        qr_free(q.rules);
        qc_free(out);
        return qc_fail(&c, "out of memory");
    }
    for (size_t i = 0; i < n; i++) c.sorted[i] = &in[i];
    qsort(c.sorted, n, sizeof *c.sorted, cmp_tensor_name);
    int rc = 0;
    if (q.method == QC_NONE) {
        for (size_t i = 0; i < n && rc == 0; i++)
            if (in[i].dtype == INGOT_I32 || in[i].dtype == INGOT_F8_E4M3)
                rc = qc_fail(&c, "tensor '%s' is %s: a quantized checkpoint needs its quantization_config in %s",
                             load_printable(in[i].name, nb, sizeof nb), dtype_name(in[i].dtype), config_path);
    }
    if (q.method == QC_GPTQ && rc == 0) rc = find_perm_families(&c);
    /* Pass 1: repack each quantized linear (marking its parts consumed), with the settings the
     * configuration gives its module; a module it leaves unquantized must not be stored quantized. */
    for (size_t i = 0; i < n && rc == 0; i++) {
        size_t plen;
        const wt_tensor *t = &in[i];
        if (q.method == QC_GPTQ || q.method == QC_AWQ) {
            if (!ends_with(t->name, ".qweight", &plen)) continue;
        } else if (q.method == QC_FP8) {
            if (t->dtype != INGOT_F8_E4M3) continue;
            if (!ends_with(t->name, ".weight", &plen)) {
                rc = qc_fail(&c, "tensor '%s': a float8_e4m3fn tensor must be a linear's .weight", load_printable(t->name, nb, sizeof nb));
                break;
            }
        } else {
            continue;
        }
        char module[1024], eb[96], mb[160];
        if (plen >= sizeof module) {
            rc = qc_fail(&c, "tensor '%s': name too long", load_printable(t->name, nb, sizeof nb));
            break;
        }
        memcpy(module, t->name, plen);
        module[plen] = 0;
        const qr_match m = qr_lookup(q.rules, module);
        if (m.excluded) {
            rc = qc_fail(&c, "tensor '%s' is quantized, but quantization_config.%s entry '%s' leaves module '%s' unquantized",
                         load_printable(t->name, nb, sizeof nb), m.key, load_printable(m.entry, eb, sizeof eb),
                         load_printable(module, mb, sizeof mb));
            break;
        }
        c.consumed[i] = 1;
        if (q.method == QC_FP8) {
            rc = repack_fp8(&c, &q, t, t->name, plen);
        } else {
            qc_config mq = q;
            if (m.bits) mq.bits = m.bits;
            if (m.group_size) mq.group_size = m.group_size;
            rc = repack_zero_point(&c, &mq, t, t->name, plen, in_perm_family(&c, t->name, plen));
        }
    }
    /* Pass 2: the rest as they are; a part left over means a broken checkpoint. */
    const size_t repacked = out->n;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (c.consumed[i]) continue;
        if (in[i].dtype == INGOT_I32 || in[i].dtype == INGOT_F8_E4M3) {
            rc = qc_fail(&c, "tensor '%s' (%s) belongs to no quantized linear of this %s checkpoint",
                         load_printable(in[i].name, nb, sizeof nb), dtype_name(in[i].dtype),
                         q.method == QC_GPTQ ? "GPTQ" : q.method == QC_AWQ ? "AWQ" : "FP8");
            break;
        }
        for (size_t k = 0; k < repacked; k++)
            if (strcmp(out->tensors[k].name, in[i].name) == 0) {
                rc = qc_fail(&c, "tensor '%s' is stored both quantized and as it is", load_printable(in[i].name, nb, sizeof nb));
                break;
            }
        out->tensors[out->n++] = in[i];
    }
    if (rc == 0 && q.method != QC_NONE) rc = check_expert_families(&c);
    free(c.sorted);
    free(c.consumed);
    for (size_t k = 0; k < c.n_perm_families; k++) free(c.perm_families[k]);
    free(c.perm_families);
    qr_free(q.rules);
    if (rc) {
        qc_free(out);
        return -1;
    }
    out->method = q.method == QC_GPTQ ? "gptq" : q.method == QC_AWQ ? "awq" : q.method == QC_FP8 ? "fp8" : NULL;
    return 0;
}

void qc_free(qc_result *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_owned; i++) {
        if (r->owned[i].bytes) ha_free(r->owned[i].p, r->owned[i].bytes);
        else free(r->owned[i].p);
    }
    free(r->owned);
    free(r->tensors);
    memset(r, 0, sizeof *r);
}
