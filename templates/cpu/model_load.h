/* model_load.h — load, free and batch checking shared by every generated CPU model.
 *
 * Included by the generated model.c after its WEIGHTS table and constants,
 * so the code here is specialized by them. Weights stored in the dtype the
 * kernels were compiled for are used in place (zero copy, from the mapping);
 * others are converted once at load, row by row through f32.
 */

#ifndef MODEL_HOST_WEIGHTS_IN_PLACE
#define MODEL_HOST_WEIGHTS_IN_PLACE 0 /* 1: a backend that uploads the weights reads them from the mapping */
#endif

#define MODEL_ARENA_BYTES ((size_t)ARENA_BYTES_PER_TOKEN * MAX_TOKENS)

static void *model_aligned_alloc(size_t bytes) {
    size_t rounded = (bytes + 63) / 64 * 64;
    return aligned_alloc(64, rounded ? rounded : 64);
}

/* Converts rows [first, first + rows) of a tensor to dtype `to` into dst
 * (rows x the row bytes of `to`); -1 on allocation failure or rows that
 * cannot be converted, -2 with *bad_row set (counted from `first`) for a row
 * holding a NaN or an infinity that a block type cannot store. */
static int model_convert(const wt_tensor *t, int64_t first, int64_t rows, ingot_dtype to, unsigned char *dst,
                         int64_t *bad_row) {
    const int64_t cols = t->shape[t->n_dims - 1];
    size_t in_row, out_row;
    if (dtype_row_bytes(t->dtype, cols, &in_row) != 0 || dtype_row_bytes(to, cols, &out_row) != 0) return -1;
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    if (!tmp) return -1;
    for (int64_t r = 0; r < rows; r++) {
        dtype_dequantize_row(t->dtype, (const unsigned char *)t->data + (size_t)(first + r) * in_row, tmp, cols);
        const int rc = dtype_quantize_row(to, tmp, dst + (size_t)r * out_row, cols);
        if (rc != 0) { /* a type with no quantizer (-1), or a NaN/infinity (-2) */
            free(tmp);
            *bad_row = r;
            return rc;
        }
    }
    free(tmp);
    return 0;
}

/* A weight's columns: a vector is a matrix of one column. */
static int64_t model_weight_cols(const weight_spec *s) { return s->n_dims == 1 ? 1 : s->shape[1]; }

/* Finds and checks the parts of a weight the checkpoint stores split
 * (weight_part): each [experts][heads][of][cols], or [..][cols][of] when
 * transposed, without the experts or heads dimension where there are none,
 * and [..][of] for a vector. Returns the first part, NULL with err set. */
static const wt_tensor *model_expect_parts(const wt_file *f, const weight_spec *s, char *err, size_t errlen) {
    const wt_tensor *first = NULL;
    const int64_t cols = model_weight_cols(s);
    for (int p = 0; p < s->n_parts; p++) {
        const weight_part *part = &s->parts[p];
        const int64_t inner[2] = {part->transposed ? cols : part->of, part->transposed ? part->of : cols};
        int64_t shape[4];
        int n_dims = 0;
        if (s->part_experts) shape[n_dims++] = s->part_experts;
        if (s->part_heads) shape[n_dims++] = s->part_heads;
        shape[n_dims++] = inner[0];
        if (s->n_dims == 2) shape[n_dims++] = inner[1];
        const wt_tensor *t = wt_expect(f, part->name, n_dims, shape, ~0u, err, errlen);
        size_t row;
        if (t && dtype_row_bytes(t->dtype, inner[1], &row) != 0) {
            snprintf(err, errlen, "%s: tensor '%s': rows of %lld cannot be %s", wt_path(f), part->name,
                     (long long)inner[1], dtype_name(t->dtype));
            t = NULL;
        }
        if (!t || wt_check_scales(f, t, err, errlen) != 0) {
            size_t used = strlen(err);
            snprintf(err + used, errlen - used, " (part %d of a weight declared at models.lua:%d)", p + 1, s->line);
            return NULL;
        }
        if (!first) first = t;
    }
    return first;
}

/* Assembles a weight stored in parts into dst (rows of dtype s->dtype):
 * head by head, the head's rows of each part in turn (of an expert weight,
 * its expert's block of each part). A part stored in s->dtype and not
 * transposed gives its rows' bytes as they are (the file's blocks:
 * dequantized and quantized again they could change, and some types have no
 * quantizer). Otherwise its head block is dequantized whole; a transposed one
 * ([cols][of]) gives its columns as the rows (the generator makes such a
 * weight f32 when the part is block-quantized). -1 on allocation failure or
 * a dtype with no quantizer. */
static int model_assemble(const wt_file *f, const weight_spec *s, unsigned char *dst) {
    const int64_t cols = model_weight_cols(s), heads = s->part_heads ? s->part_heads : 1;
    size_t out_row;
    if (dtype_row_bytes(s->dtype, cols, &out_row) != 0) return -1;
    int64_t max_of = 0;
    for (int p = 0; p < s->n_parts; p++) max_of = s->parts[p].of > max_of ? s->parts[p].of : max_of;
    float *block = malloc(sizeof(float) * (size_t)(max_of * cols)), *row = malloc(sizeof(float) * (size_t)cols);
    int rc = block && row ? 0 : -1;
    for (int64_t h = 0; rc == 0 && h < heads; h++) {
        for (int p = 0; rc == 0 && p < s->n_parts; p++) {
            const weight_part *part = &s->parts[p];
            const wt_tensor *t = wt_find(f, part->name);
            /* the head's stored rows: how many and how long */
            const int64_t n_in = part->transposed ? cols : part->of, len = part->transposed ? part->of : cols;
            size_t in_row;
            if (!t || dtype_row_bytes(t->dtype, len, &in_row) != 0) { rc = -1; break; }
            const int64_t block_index = s->part_expert * heads + h; /* part_expert is 0 without experts */
            const unsigned char *from = (const unsigned char *)t->data + (size_t)(block_index * n_in) * in_row;
            if (!part->transposed && t->dtype == s->dtype) { /* in_row == out_row: the rows as stored */
                for (int64_t r = 0; r < part->rows; r++, dst += out_row)
                    memcpy(dst, from + (size_t)(part->first + r * part->every) * in_row, out_row);
                continue;
            }
            for (int64_t r = 0; r < n_in; r++) dtype_dequantize_row(t->dtype, from + (size_t)r * in_row, block + r * len, len);
            for (int64_t r = 0; rc == 0 && r < part->rows; r++) {
                const int64_t at = part->first + r * part->every; /* the stored row (column, transposed) */
                const float *src = block + at * cols;
                if (part->transposed) {
                    for (int64_t c = 0; c < cols; c++) row[c] = block[c * part->of + at];
                    src = row;
                }
                rc = dtype_quantize_row(s->dtype, src, dst, cols);
                dst += out_row;
            }
        }
    }
    free(block);
    free(row);
    return rc;
}

void ingot_model_free(ingot_model *m) {
    if (!m) return;
#ifdef MODEL_BEFORE_FREE
    MODEL_BEFORE_FREE(m);
#endif
    ha_free(m->wmem, m->wmem_bytes);
    ha_free(m->arena, MODEL_ARENA_BYTES);
    free(m->rope);
    free(m->scratch);
    wt_close(m->file);
    free(m);
}

/* Every tensor of the file must be read (the generator checked the file the
 * binary was built from; --weights may point at one with more in it): a
 * weight the description does not know would otherwise be dropped silently.
 * Marks what each weight reads through wt_find's sorted index, so a file of
 * tens of thousands of expert tensors costs a few lookups each. The RoPE
 * inverse frequencies older transformers saved are recomputed from the
 * config and accepted. */
static int model_check_all_used(const wt_file *f, char *err, size_t errlen) {
    const size_t n = wt_count(f);
    if (n == 0) return 0;
    unsigned char *used = calloc(n, 1);
    if (!used) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const wt_tensor *base = wt_at(f, 0);
    for (int i = 0; i < N_WEIGHTS; i++) {
        const wt_tensor *t = wt_find(f, WEIGHTS[i].name);
        if (!t && WEIGHTS[i].tied_to) t = wt_find(f, WEIGHTS[i].tied_to);
        if (t) used[t - base] = 1;
        for (int p = 0; p < WEIGHTS[i].n_parts; p++)
            if ((t = wt_find(f, WEIGHTS[i].parts[p].name))) used[t - base] = 1;
    }
    static const char derived_suffix[] = ".rotary_emb.inv_freq";
    const size_t ns = sizeof derived_suffix - 1;
    size_t unused = 0;
    const char *first = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *name = wt_at(f, i)->name;
        const size_t len = strlen(name);
        if (used[i] || (len >= ns && !strcmp(name + len - ns, derived_suffix))) continue;
        if (!first) first = name;
        unused++;
    }
    free(used);
    if (unused == 0) return 0;
    if (ALLOW_UNUSED_TENSORS) {
        fprintf(stderr, "warning: %s: %zu tensors the description does not use, first '%s' (ignored: built with "
                        "--allow-unused)\n", wt_path(f), unused, first);
        return 0;
    }
    snprintf(err, errlen, "%s: %zu tensor%s not used by the description (models.lua entry '%s'), first '%s'",
             wt_path(f), unused, unused == 1 ? " is" : "s are", ingot_model_desc.arch, first);
    return -1;
}

/* m->weight_origin: the kinds of load with a count, in a fixed order. */
static void model_describe_origin(ingot_model *m, int in_place, int repacked, int copied, int converted,
                                  int assembled, int interleaved) {
    const int count[] = {in_place, repacked, copied, converted, assembled};
    static const char *const what[] = {"read in place from the file", "repacked from the checkpoint's quantized "
                                       "format at open", "copied", "converted to another dtype at load",
                                       "joined from parts"};
    size_t used = 0;
    m->weight_origin[0] = 0;
    for (int k = 0; k < 5; k++) {
        if (!count[k] || used >= sizeof m->weight_origin) continue;
        const int n = snprintf(m->weight_origin + used, sizeof m->weight_origin - used, "%s%d %s",
                               used ? ", " : "", count[k], what[k]);
        if (n > 0) used += (size_t)n;
    }
    if (interleaved && used < sizeof m->weight_origin)
        snprintf(m->weight_origin + used, sizeof m->weight_origin - used, "; %d of them interleaved in groups of 16 rows",
                 interleaved);
}

/* Rewrites a weight's rows in place into kc_x16.h's layout (kc_x16k.h for
 * Q5_0, Q5_1, IQ4_NL and the K-quants Q2_K..Q6_K, IQ4_XS; kc_x16f.h for
 * F32, F16 and BF16), one group of 16 rows at a time. A group's
 * tiles take the bytes its rows took, or 4 more per 256 weights and row
 * (Q3_K/Q4_K/Q5_K/IQ4_XS: their packed 6-bit scales one byte each), so the groups are
 * written last to first: group g's tiles then only cover rows of groups
 * already done, and only one group is ever held twice. (The CUDA backend's
 * host shares this loader without the CPU kernels; its generator never asks
 * for x16.) */
#ifndef INGOT_KC_X16K_H
static size_t model_x16_bytes(const weight_spec *s, size_t row_bytes) {
    return row_bytes * (size_t)s->shape[0];
}
static int model_interleave(const weight_spec *s, unsigned char *w) {
    (void)s, (void)w;
    return -1;
}
static int model_interleave_from(const weight_spec *s, const unsigned char *from, unsigned char *to) {
    (void)s, (void)from, (void)to;
    return -1;
}
#else
static int model_x16_type(ingot_dtype t) {
    switch (t) {
    case INGOT_F32: return KC_WF32;
    case INGOT_F16: return KC_WF16;
    case INGOT_BF16: return KC_WBF16;
    case INGOT_Q8_0: return KC_WQ8_0;
    case INGOT_Q4_0: return KC_WQ4_0;
    case INGOT_Q4_1: return KC_WQ4_1;
    case INGOT_Q5_0: return KC_WQ5_0;
    case INGOT_Q5_1: return KC_WQ5_1;
    case INGOT_Q2_K: return KC_WQ2_K;
    case INGOT_Q3_K: return KC_WQ3_K;
    case INGOT_Q4_K: return KC_WQ4_K;
    case INGOT_Q5_K: return KC_WQ5_K;
    case INGOT_Q6_K: return KC_WQ6_K;
    case INGOT_IQ4_NL: return KC_WIQ4_NL;
    case INGOT_IQ4_XS: return KC_WIQ4_XS;
    default: return -1;
    }
}
/* the bytes an x16 weight takes once interleaved (row_bytes: a row-major row's) */
static size_t model_x16_bytes(const weight_spec *s, size_t row_bytes) {
    const int wt = model_x16_type(s->dtype);
    if (wt < 0) return row_bytes * (size_t)s->shape[0];
    return (size_t)(s->shape[0] / KC_X16_ROWS) * (size_t)(s->shape[1] / kc_x16k_cols(wt)) * kc_x16k_tile_bytes(wt);
}
static int model_interleave(const weight_spec *s, unsigned char *w) {
    const int wt = model_x16_type(s->dtype);
    size_t row = 0;
    if (wt < 0 || dtype_row_bytes(s->dtype, s->shape[1], &row) != 0 || s->shape[0] % KC_X16_ROWS != 0 ||
        s->shape[1] % kc_x16k_cols(wt) != 0)
        return -1;
    const size_t group = row * KC_X16_ROWS, tiles = model_x16_bytes(s, row) / (size_t)(s->shape[0] / KC_X16_ROWS);
    unsigned char *tmp = malloc(group);
    if (!tmp) return -1;
    for (int64_t g = s->shape[0] / KC_X16_ROWS - 1; g >= 0; g--) {
        memcpy(tmp, w + (size_t)g * group, group);
        kc_x16k_repack(wt, tmp, w + (size_t)g * tiles, KC_X16_ROWS, (int)s->shape[1]);
    }
    free(tmp);
    return 0;
}
/* The same layout written straight from the file's rows (a weight stored in
 * its own dtype) into its copy: one pass over the bytes instead of a copy
 * and then a rewrite in place. */
static int model_interleave_from(const weight_spec *s, const unsigned char *from, unsigned char *to) {
    const int wt = model_x16_type(s->dtype);
    if (wt < 0 || s->shape[0] % KC_X16_ROWS != 0 || s->shape[1] % kc_x16k_cols(wt) != 0) return -1;
    kc_x16k_repack(wt, from, to, s->shape[0], (int)s->shape[1]);
    return 0;
}
#endif

const char *ingot_model_weight_origin(const ingot_model *m) { return m->weight_origin; }

/* The bytes weight i takes as the kernels read it: its rows in its dtype, or its x16 tiles (what
 * the load lays out for it, and what a cast file holds for it). 0, or -1 for a row size the dtype
 * cannot store. */
static int model_weight_bytes(int i, size_t *bytes) {
    const weight_spec *s = &WEIGHTS[i];
    size_t row = 0;
    if (dtype_row_bytes(s->dtype, s->shape[s->n_dims - 1], &row) != 0) return -1;
    if (s->n_parts > 0 || s->n_dims == 1) *bytes = row * (size_t)(s->n_dims == 1 ? 1 : s->shape[0]);
    else *bytes = s->x16 ? model_x16_bytes(s, row) : row * (size_t)s->shape[0];
    return 0;
}

/* Checks, copies, converts and interleaves every weight of the checkpoint m->file into
 * kernel-ready memory (m->w): 0, or -1 with err filled. */
static int model_load_weights(ingot_model *m, unsigned flags, char *err, size_t errlen) {
    /* Pass 1: find and check every weight, and lay out the ones that get a
     * copy in one huge-page buffer (hugealloc.h): all of them by default,
     * only those converted to another dtype with INGOT_LOAD_MMAP (the rest
     * are read in place from the file mapping: less memory when processes
     * share the file, slower decode). */
    const int in_place = (flags & INGOT_LOAD_MMAP) || MODEL_HOST_WEIGHTS_IN_PLACE;
    const wt_tensor **src = calloc(N_WEIGHTS, sizeof *src);
    size_t *offset = calloc(N_WEIGHTS, sizeof *offset), *src_row = calloc(N_WEIGHTS, sizeof *src_row);
    if (!src || !offset || !src_row) {
        free(src), free(offset), free(src_row);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t wmem_bytes = 0;
    for (int i = 0; i < N_WEIGHTS; i++) {
        const weight_spec *s = &WEIGHTS[i];
        if (s->same_as >= 0) continue;
        if (s->n_parts > 0) { /* assembled: always a copy of its own */
            size_t out_row = 0;
            if (!(src[i] = model_expect_parts(m->file, s, err, errlen))) break;
            if (dtype_row_bytes(s->dtype, model_weight_cols(s), &out_row) != 0) {
                snprintf(err, errlen, "%s: weight '%s': rows of %lld cannot be stored as %s", wt_path(m->file), s->name,
                         (long long)model_weight_cols(s), dtype_name(s->dtype));
                src[i] = NULL;
                break;
            }
            m->weight_bytes += out_row * (size_t)s->shape[0];
            offset[i] = wmem_bytes;
            wmem_bytes += (out_row * (size_t)s->shape[0] + 63) / 64 * 64;
            continue;
        }
        const char *name = s->name;
        if (!wt_find(m->file, name) && s->tied_to) name = s->tied_to;
        int64_t shape[3] = {s->stored_rows ? s->stored_rows : s->shape[0], s->shape[1], 0};
        int n_dims = s->n_dims;
        if (s->stacked) /* [experts][rows][cols], or [experts][n] for a vector */
            shape[0] = s->stacked, shape[1] = s->shape[0], shape[2] = s->shape[1], n_dims = s->n_dims + 1;
        const wt_tensor *t = wt_expect(m->file, name, n_dims, shape, ~0u, err, errlen);
        if (!t) {
            size_t used = strlen(err);
            snprintf(err + used, errlen - used, " (declared at models.lua:%d)", s->line);
            break;
        }
        if (wt_check_scales(m->file, t, err, errlen) != 0) break;
        const int64_t cols = t->shape[t->n_dims - 1];
        size_t out_row = 0;
        if (dtype_row_bytes(t->dtype, cols, &src_row[i]) != 0 || dtype_row_bytes(s->dtype, cols, &out_row) != 0) {
            snprintf(err, errlen, "%s: tensor '%s': rows of %lld cannot be stored as %s", wt_path(m->file), name,
                     (long long)cols, dtype_name(s->dtype));
            break;
        }
        src[i] = t;
        size_t stored = 0;
        (void)model_weight_bytes(i, &stored); /* out_row exists, so the weight's size does */
        m->weight_bytes += stored;
        /* repacked at open (GPTQ/AWQ/FP8): already the process's own memory, used as it is */
        if (t->dtype == s->dtype && (in_place || t->repacked) && !s->x16) continue;
        offset[i] = wmem_bytes;
        wmem_bytes += (stored + 63) / 64 * 64; /* every weight 64-byte aligned */
    }
    int ok = 1;
    for (int i = 0; i < N_WEIGHTS; i++) ok &= WEIGHTS[i].same_as >= 0 || src[i] != NULL;
    if (ok && !(m->wmem = ha_alloc(wmem_bytes))) {
        snprintf(err, errlen, "out of memory for %zu bytes of weights", wmem_bytes);
        ok = 0;
    }
    m->wmem_bytes = wmem_bytes;
    /* Pass 2: point at, copy or convert each weight. Converting (or
     * quantizing) a large checkpoint takes a while: a terminal is told how
     * far it got; a pipe or a log is not. */
    const int progress = isatty(STDERR_FILENO);
    int converted = 0, in_place_n = 0, repacked = 0, copied = 0, assembled = 0, interleaved = 0;
    for (int i = 0; ok && i < N_WEIGHTS; i++) {
        const weight_spec *s = &WEIGHTS[i];
        if (s->same_as >= 0) { m->w[i] = m->w[s->same_as]; continue; }
        const wt_tensor *t = src[i];
        if (s->n_parts > 0) {
            if (model_assemble(m->file, s, m->wmem + offset[i]) != 0) {
                snprintf(err, errlen, "%s: cannot assemble weight '%s' (%d parts) as %s", wt_path(m->file), s->name,
                         s->n_parts, dtype_name(s->dtype));
                ok = 0;
                break;
            }
            m->w[i] = m->wmem + offset[i];
            assembled++;
            continue;
        }
        const int64_t rows = s->n_dims == 1 ? 1 : s->shape[0];
        const unsigned char *from = (const unsigned char *)t->data + (size_t)s->first_row * src_row[i];
        unsigned char *to = m->wmem + offset[i];
        if (t->dtype == s->dtype && !s->x16) {
            if (t->repacked) m->w[i] = from, repacked++;
            else if (in_place) m->w[i] = from, in_place_n++;
            else {
                m->w[i] = memcpy(to, from, src_row[i] * (size_t)rows);
                ha_forget_mapped(from, src_row[i] * (size_t)rows);
                copied++;
            }
            continue;
        }
        if (t->dtype == s->dtype) { /* an x16 weight: always a copy of its own, interleaved as it is copied */
            if (model_interleave_from(s, from, to) != 0) {
                snprintf(err, errlen, "%s: weight '%s' (%lld x %lld %s) cannot take the 16-row interleaved layout",
                         wt_path(m->file), s->name, (long long)s->shape[0], (long long)s->shape[1], dtype_name(s->dtype));
                ok = 0;
                break;
            }
            if (!t->repacked) ha_forget_mapped(from, src_row[i] * (size_t)rows);
            copied++, interleaved++;
            m->w[i] = to;
            continue;
        }
        int64_t bad_row = 0;
        const int crc = model_convert(t, s->first_row, rows, s->dtype, to, &bad_row);
        if (crc == -2) {
            snprintf(err, errlen, "%s: tensor '%s': row %lld holds a NaN or an infinity, which %s cannot store",
                     wt_path(m->file), t->name, (long long)(s->first_row + bad_row), dtype_name(s->dtype));
            ok = 0;
            break;
        }
        if (crc != 0) {
            snprintf(err, errlen, "%s: cannot convert tensor '%s' from %s to %s", wt_path(m->file), t->name,
                     dtype_name(t->dtype), dtype_name(s->dtype));
            ok = 0;
            break;
        }
        converted++;
        if (s->x16) {
            if (model_interleave(s, to) != 0) {
                snprintf(err, errlen, "out of memory interleaving weight '%s'", s->name);
                ok = 0;
                break;
            }
            interleaved++;
        }
        m->w[i] = to;
        if (progress && t->dtype != s->dtype)
            fprintf(stderr, "\rconverting weights at load: tensor %d of %d (%s)", i + 1, N_WEIGHTS, dtype_name(s->dtype));
    }
    free(src), free(offset), free(src_row);
    if (!ok) {
        if (progress && converted) fprintf(stderr, "\n");
        return -1;
    }
    if (progress && converted) fprintf(stderr, "\n");
    model_describe_origin(m, in_place_n, repacked, copied, converted, assembled, interleaved);
    return model_check_all_used(m->file, err, errlen);
}

ingot_model *ingot_model_load(const char *path, int max_tokens, unsigned flags, char *err, size_t errlen) {
    if (max_tokens > STEP_TOKENS) {
        snprintf(err, errlen, "this build plans for at most %d tokens per step, %d requested", STEP_TOKENS, max_tokens);
        return NULL;
    }
    ingot_model *m = calloc(1, sizeof *m);
    if (!m) { snprintf(err, errlen, "out of memory"); return NULL; }
    m->file = wt_open(path, err, errlen);
    if (!m->file) { free(m); return NULL; }
    int rc = 1;
#ifdef MODEL_CAST_LOAD
    rc = MODEL_CAST_LOAD(m, flags, err, errlen); /* 0: the weights cast at build time, 1: none applies */
#endif
    if (rc > 0) rc = model_load_weights(m, flags, err, errlen);
    if (rc != 0) {
        ingot_model_free(m);
        return NULL;
    }
    m->arena = ha_alloc(MODEL_ARENA_BYTES);
    m->rope = model_aligned_alloc(sizeof(float) * (size_t)N_ROPE * MAX_CTX * ROPE_DIM);
    m->scratch = model_aligned_alloc(sizeof(float) * ((size_t)MAX_THREADS * SCRATCH_PER_THREAD + ATTN_SPLIT_FLOATS));
    if (!m->arena || !m->rope || !m->scratch) {
        snprintf(err, errlen, "out of memory allocating scratch");
        ingot_model_free(m);
        return NULL;
    }
    const kc_rope_params ropes[N_ROPE] = ROPE_TABLES;
    /* a table whose frequencies the checkpoint scales (GGUF rope_freqs): the weight slot, else -1 */
    const int factor_slots[N_ROPE] = ROPE_FACTOR_SLOTS;
    for (int i = 0; i < N_ROPE; i++)
        kc_rope_table_ex(m->rope + (size_t)i * MAX_CTX * ROPE_DIM, MAX_CTX, ROPE_DIM, &ropes[i],
                         factor_slots[i] >= 0 ? (const float *)m->w[factor_slots[i]] : NULL);
#ifdef MODEL_AFTER_LOAD
    if (MODEL_AFTER_LOAD(m, err, errlen) != 0) {
        ingot_model_free(m);
        return NULL;
    }
#endif
    return m;
}

const wt_file *ingot_model_weights(const ingot_model *m) { return m->file; }

#ifndef MODEL_DEVICE_KV
static size_t model_kv_bytes(int n_blocks) {
    return (size_t)n_blocks * INGOT_KV_BLOCK * ingot_model_desc.kv_bytes_per_token;
}
int ingot_kv_alloc(ingot_model *m, ingot_kv *kv, int n_blocks, char *err, size_t errlen) {
    (void)m;
    kv->n_blocks = n_blocks;
    /* huge pages: attention streams the KV of every position it reads */
    kv->data = n_blocks > 0 ? ha_alloc(model_kv_bytes(n_blocks)) : NULL;
    if (!kv->data) {
        snprintf(err, errlen, "out of memory for a KV pool of %d blocks (%zu bytes each)", n_blocks,
                 ingot_model_desc.kv_bytes_per_token * INGOT_KV_BLOCK);
        return -1;
    }
    return 0;
}
void ingot_kv_release(ingot_model *m, ingot_kv *kv) {
    (void)m;
    ha_free(kv->data, model_kv_bytes(kv->n_blocks));
    kv->data = NULL;
}
int ingot_kv_fit_blocks(ingot_model *m, double fraction) { (void)m; (void)fraction; return 0; }
#endif
size_t ingot_model_weight_bytes(const ingot_model *m) { return m->weight_bytes; }
size_t ingot_weights_planned_bytes(void) {
    size_t bytes = 0;
    for (int i = 0; i < N_WEIGHTS; i++) {
        const weight_spec *s = &WEIGHTS[i];
        size_t row = 0;
        if (s->same_as >= 0 || dtype_row_bytes(s->dtype, s->shape[s->n_dims - 1], &row) != 0) continue;
        bytes += row * (size_t)(s->n_dims == 1 ? 1 : s->shape[0]);
    }
    return bytes;
}

size_t ingot_model_scratch_bytes(const ingot_model *m) {
    (void)m;
    size_t bytes = (size_t)ARENA_BYTES_PER_TOKEN * MAX_TOKENS + sizeof(float) * (size_t)N_ROPE * MAX_CTX * ROPE_DIM +
                   sizeof(float) * ((size_t)MAX_THREADS * SCRATCH_PER_THREAD + ATTN_SPLIT_FLOATS);
#ifdef MODEL_DEVICE_KV
    bytes += sizeof(float) * (size_t)MAX_TOKENS * (VOCAB + DIM); /* the device's logits and hidden rows */
#endif
    return bytes;
}
int ingot_model_max_tokens(const ingot_model *m) { (void)m; return STEP_TOKENS; }

/* Checks a batch against the contract of model_api.h before any kernel runs,
 * so a bad batch is an error, never an out-of-bounds access. */
static int model_check_batch(const ingot_kv *kv, const ingot_batch *b, const tp_pool *pool, char *err,
                             size_t errlen) {
    if (b->n_tokens < 1 || b->n_tokens > STEP_TOKENS) {
        snprintf(err, errlen, "batch of %d tokens (this build takes 1..%d per step)", b->n_tokens, STEP_TOKENS);
        return -1;
    }
    if (b->n_logits < 0 || b->n_logits > b->n_tokens || (b->n_logits > 0 && !b->logits)) {
        snprintf(err, errlen, "n_logits %d out of range", b->n_logits);
        return -1;
    }
    if (b->n_hidden < 0 || b->n_hidden > b->n_tokens || (b->n_hidden > 0 && (!b->hidden || !b->hidden_rows))) {
        snprintf(err, errlen, "n_hidden %d out of range", b->n_hidden);
        return -1;
    }
    for (int i = 0; i < b->n_hidden; i++)
        if (b->hidden_rows[i] < 0 || b->hidden_rows[i] >= b->n_tokens) {
            snprintf(err, errlen, "hidden row %d: token %d out of range", i, b->hidden_rows[i]);
            return -1;
        }
    if (tp_size(pool) > MAX_THREADS) {
        snprintf(err, errlen, "at most %d threads", MAX_THREADS);
        return -1;
    }
    if (!kv || !kv->data || kv->n_blocks < 1) {
        snprintf(err, errlen, "no KV pool");
        return -1;
    }
    if (b->n_seqs < 1 || b->n_seqs > b->n_tokens) {
        snprintf(err, errlen, "batch of %d sequences for %d tokens", b->n_seqs, b->n_tokens);
        return -1;
    }
    /* The first position of each sequence in the step (its tokens are
     * contiguous and in order): with a sliding window, blocks wholly before
     * that position's window may have been released. */
    int first_pos[b->n_seqs];
    for (int s = 0; s < b->n_seqs; s++) first_pos[s] = -1;
    for (int i = 0; i < b->n_tokens; i++) {
        if (b->seq[i] < 0 || b->seq[i] >= b->n_seqs) {
            snprintf(err, errlen, "token %d: sequence %d out of range", i, b->seq[i]);
            return -1;
        }
        if (first_pos[b->seq[i]] < 0) first_pos[b->seq[i]] = b->pos[i];
    }
    for (int s = 0; s < b->n_seqs; s++) {
        if (b->seq_len[s] < 0 || b->seq_len[s] > MAX_CTX) {
            snprintf(err, errlen, "sequence %d: length %d beyond the context (%d)", s, b->seq_len[s], MAX_CTX);
            return -1;
        }
        int first_block = 0;
        if (KV_WINDOW > 0 && first_pos[s] > KV_WINDOW - 1) first_block = (first_pos[s] - (KV_WINDOW - 1)) / INGOT_KV_BLOCK;
        for (int i = first_block; i < (b->seq_len[s] + INGOT_KV_BLOCK - 1) / INGOT_KV_BLOCK; i++) {
            if (b->block_tables[s][i] < 0 || b->block_tables[s][i] >= kv->n_blocks) {
                snprintf(err, errlen, "sequence %d: block %d out of the pool", s, b->block_tables[s][i]);
                return -1;
            }
        }
    }
    for (int i = 0; i < b->n_tokens; i++) {
        const int s = b->seq[i];
        if (b->tokens[i] < 0 || b->tokens[i] >= VOCAB) {
            snprintf(err, errlen, "token id %d out of the vocabulary (%d)", b->tokens[i], VOCAB);
            return -1;
        }
        if (s < 0 || s >= b->n_seqs || b->pos[i] < 0 || b->pos[i] >= b->seq_len[s]) {
            snprintf(err, errlen, "token %d: sequence %d / position %d inconsistent with the batch", i, s, b->pos[i]);
            return -1;
        }
    }
    for (int i = 0; i < b->n_logits; i++) {
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tokens) {
            snprintf(err, errlen, "logit row %d out of range", b->logit_rows[i]);
            return -1;
        }
    }
    return 0;
}
