/* model_weights.c — the load every generated model shares: a checkpoint's weights made into what
 * the model's kernels read (model_weights.h). */
#include "model_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hugealloc.h"
#include "kc_x16k.h"
#include "lora.h"

/* Converts rows [first, first + rows) of a tensor to dtype `to` into dst
 * (rows x the row bytes of `to`), with merge's update added to each row where
 * merge is not NULL; -1 on allocation failure or rows that
 * cannot be converted, -2 with *bad_row set (counted from `first`) for a row
 * holding a NaN or an infinity that a block type cannot store. */
static int convert(const wt_tensor *t, int64_t first, int64_t rows, int64_t cols, ingot_dtype to, unsigned char *dst,
                   const lora_delta *merge, int64_t *bad_row) {
    size_t in_row, out_row;
    if (dtype_row_bytes(t->dtype, cols, &in_row) != 0 || dtype_row_bytes(to, cols, &out_row) != 0) return -1;
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    if (!tmp) return -1;
    for (int64_t r = 0; r < rows; r++) {
        dtype_dequantize_row(t->dtype, (const unsigned char *)t->data + (size_t)(first + r) * in_row, tmp, cols);
        if (merge) lora_merge_row(merge, r, tmp);
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

/* The update --lora-merge's adapter makes to table entry i, or NULL. */
static const lora_delta *merged_at(const mw_table *tab, int i) {
    return tab->merge && tab->merge->delta[i].rank ? &tab->merge->delta[i] : NULL;
}

/* The row length of weight s as tensor t stores it: a vector's row is all of it, whatever matrix
 * of its values the file stores (wt_vector_cols). */
static int64_t source_cols(const weight_spec *s, const wt_tensor *t) {
    return s->n_dims == 1 && !s->stacked ? wt_vector_cols(t, s->shape[0]) : t->shape[t->n_dims - 1];
}

/* A weight's columns: a vector is a matrix of one column. */
static int64_t weight_cols(const weight_spec *s) { return s->n_dims == 1 ? 1 : s->shape[1]; }

/* Finds and checks the parts of a weight the checkpoint stores split
 * (weight_part): each [experts][heads][of][cols], or [..][cols][of] when
 * transposed, without the experts or heads dimension where there are none,
 * and [..][of] for a vector. Returns the first part, NULL with err set. */
static const wt_tensor *expect_parts(const wt_file *f, const weight_spec *s, char *err, size_t errlen) {
    const wt_tensor *first = NULL;
    const int64_t cols = weight_cols(s);
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
static int assemble(const wt_file *f, const weight_spec *s, unsigned char *dst) {
    const int64_t cols = weight_cols(s), heads = s->part_heads ? s->part_heads : 1;
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

/* Every tensor of the file must be read (the generator checked the file the
 * binary was built from; --weights may point at one with more in it): a
 * weight the description does not know would otherwise be dropped silently.
 * Marks what each weight reads through wt_find's sorted index, so a file of
 * tens of thousands of expert tensors costs a few lookups each. The RoPE
 * inverse frequencies older transformers saved are recomputed from the
 * config and accepted. */
static int check_all_used(const mw_table *tab, const wt_file *f, char *err, size_t errlen) {
    const size_t n = wt_count(f);
    if (n == 0) return 0;
    unsigned char *used = calloc(n, 1);
    if (!used) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const wt_tensor *base = wt_at(f, 0);
    for (int i = 0; i < tab->n; i++) {
        const weight_spec *s = &tab->spec[i];
        const wt_tensor *t = wt_find(f, s->name);
        if (!t && s->tied_to) t = wt_find(f, s->tied_to);
        if (t) used[t - base] = 1;
        for (int p = 0; p < s->n_parts; p++)
            if ((t = wt_find(f, s->parts[p].name))) used[t - base] = 1;
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
    if (tab->allow_unused) {
        fprintf(stderr, "warning: %s: %zu tensors the description does not use, first '%s' (ignored: built with "
                        "--allow-unused)\n", wt_path(f), unused, first);
        return 0;
    }
    snprintf(err, errlen, "%s: %zu tensor%s not used by the description (models.lua entry '%s'), first '%s'",
             wt_path(f), unused, unused == 1 ? " is" : "s are", tab->arch, first);
    return -1;
}

/* w->origin: the kinds of load with a count, in a fixed order. */
static void describe_origin(mw_weights *w, int in_place, int repacked, int copied, int converted, int assembled,
                            int interleaved) {
    const int count[] = {in_place, repacked, copied, converted, assembled};
    static const char *const what[] = {"read in place from the file",
                                       "repacked from the checkpoint's quantized format at open", "copied",
                                       "converted to another dtype at load", "joined from parts"};
    size_t used = 0;
    w->origin[0] = 0;
    for (int k = 0; k < 5; k++) {
        if (!count[k] || used >= sizeof w->origin) continue;
        const int n = snprintf(w->origin + used, sizeof w->origin - used, "%s%d %s",
                               used ? ", " : "", count[k], what[k]);
        if (n > 0) used += (size_t)n;
    }
    if (interleaved && used < sizeof w->origin)
        snprintf(w->origin + used, sizeof w->origin - used, "; %d of them interleaved in groups of 16 rows",
                 interleaved);
}

/* Rewrites a weight's rows in place into kc_x16.h's layout (kc_x16k.h for
 * Q5_0, Q5_1, IQ4_NL and the K-quants Q2_K..Q6_K, IQ4_XS; kc_x16f.h for
 * F32, F16 and BF16), one group of 16 rows at a time. A group's
 * tiles take the bytes its rows took, or 4 more per 256 weights and row
 * (Q3_K/Q4_K/Q5_K/IQ4_XS: their packed 6-bit scales one byte each), so the groups are
 * written last to first: group g's tiles then only cover rows of groups
 * already done, and only one group is ever held twice. (The CUDA backend's
 * generator never asks for x16.) */
static int x16_type(ingot_dtype t) {
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
static size_t x16_bytes(const weight_spec *s, size_t row_bytes) {
    const int wt = x16_type(s->dtype);
    if (wt < 0) return row_bytes * (size_t)s->shape[0];
    return (size_t)(s->shape[0] / KC_X16_ROWS) * (size_t)(s->shape[1] / kc_x16k_cols(wt)) * kc_x16k_tile_bytes(wt);
}
static int interleave(const weight_spec *s, unsigned char *w) {
    const int wt = x16_type(s->dtype);
    size_t row = 0;
    if (wt < 0 || dtype_row_bytes(s->dtype, s->shape[1], &row) != 0 || s->shape[0] % KC_X16_ROWS != 0 ||
        s->shape[1] % kc_x16k_cols(wt) != 0)
        return -1;
    const size_t group = row * KC_X16_ROWS, tiles = x16_bytes(s, row) / (size_t)(s->shape[0] / KC_X16_ROWS);
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
static int interleave_from(const weight_spec *s, const unsigned char *from, unsigned char *to) {
    const int wt = x16_type(s->dtype);
    if (wt < 0 || s->shape[0] % KC_X16_ROWS != 0 || s->shape[1] % kc_x16k_cols(wt) != 0) return -1;
    kc_x16k_repack(wt, from, to, s->shape[0], (int)s->shape[1]);
    return 0;
}

int mw_weight_bytes(const weight_spec *s, size_t *bytes) {
    size_t row = 0;
    if (dtype_row_bytes(s->dtype, s->shape[s->n_dims - 1], &row) != 0) return -1;
    if (s->n_parts > 0 || s->n_dims == 1) *bytes = row * (size_t)(s->n_dims == 1 ? 1 : s->shape[0]);
    else *bytes = s->x16 ? x16_bytes(s, row) : row * (size_t)s->shape[0];
    return 0;
}

/* Pass 1 of mw_load: finds and checks every weight (src[i] its tensor, src_row[i] the bytes of
 * one stored row) and lays out the ones that get a copy in one huge-page buffer (hugealloc.h):
 * all of them by default, only those converted to another dtype with INGOT_LOAD_MMAP (the rest
 * are read in place from the file mapping: less memory when processes share the file, slower
 * decode). Returns the buffer's bytes; a weight it cannot use stops it with src[i] NULL and err
 * filled. */
static size_t plan_weights(const mw_table *tab, mw_weights *out, int in_place, const wt_tensor **src, size_t *offset,
                           size_t *src_row, char *err, size_t errlen) {
    size_t wmem_bytes = 0;
    for (int i = 0; i < tab->n; i++) {
        const weight_spec *s = &tab->spec[i];
        if (s->same_as >= 0) continue;
        if (s->n_parts > 0) { /* assembled: always a copy of its own */
            size_t out_row = 0;
            if (!(src[i] = expect_parts(out->file, s, err, errlen))) break;
            if (dtype_row_bytes(s->dtype, weight_cols(s), &out_row) != 0) {
                snprintf(err, errlen, "%s: weight '%s': rows of %lld cannot be stored as %s", wt_path(out->file), s->name,
                         (long long)weight_cols(s), dtype_name(s->dtype));
                src[i] = NULL;
                break;
            }
            out->weight_bytes += out_row * (size_t)s->shape[0];
            offset[i] = wmem_bytes;
            wmem_bytes += (out_row * (size_t)s->shape[0] + 63) / 64 * 64;
            continue;
        }
        const char *name = s->name;
        if (!wt_find(out->file, name) && s->tied_to) name = s->tied_to;
        int64_t shape[3] = {s->stored_rows ? s->stored_rows : s->shape[0], s->shape[1], 0};
        int n_dims = s->n_dims;
        if (s->stacked) /* [experts][rows][cols], or [experts][n] for a vector */
            shape[0] = s->stacked, shape[1] = s->shape[0], shape[2] = s->shape[1], n_dims = s->n_dims + 1;
        const wt_tensor *t = wt_expect(out->file, name, n_dims, shape, ~0u, err, errlen);
        if (!t) {
            size_t used = strlen(err);
            snprintf(err + used, errlen - used, " (declared at models.lua:%d)", s->line);
            break;
        }
        if (wt_check_scales(out->file, t, err, errlen) != 0) break;
        const int64_t cols = source_cols(s, t);
        size_t out_row = 0;
        if (dtype_row_bytes(t->dtype, cols, &src_row[i]) != 0 || dtype_row_bytes(s->dtype, cols, &out_row) != 0) {
            snprintf(err, errlen, "%s: tensor '%s': rows of %lld cannot be stored as %s", wt_path(out->file), name,
                     (long long)cols, dtype_name(s->dtype));
            break;
        }
        src[i] = t;
        size_t stored = 0;
        (void)mw_weight_bytes(s, &stored); /* out_row exists, so the weight's size does */
        out->weight_bytes += stored;
        /* repacked at open (GPTQ/AWQ/FP8): already the process's own memory, used as it is */
        if (t->dtype == s->dtype && (in_place || t->repacked) && !s->x16 && !merged_at(tab, i)) continue;
        offset[i] = wmem_bytes;
        wmem_bytes += (stored + 63) / 64 * 64; /* every weight 64-byte aligned */
    }
    return wmem_bytes;
}

/* How many weights mw_load got each way (describe_origin). */
typedef struct { int converted, in_place, repacked, copied, assembled, interleaved, merged; } load_counts;

/* Pass 2 of mw_load: points at, copies or converts each weight as pass 1 planned. Converting (or
 * quantizing) a large checkpoint takes a while: a terminal (progress) is told how far it got; a
 * pipe or a log is not. 1, or 0 with err filled. */
static int place_weights(const mw_table *tab, mw_weights *out, int in_place, const wt_tensor *const *src,
                         const size_t *offset, const size_t *src_row, int progress, load_counts *n, char *err,
                         size_t errlen) {
    int ok = 1;
    for (int i = 0; ok && i < tab->n; i++) {
        const weight_spec *s = &tab->spec[i];
        if (s->same_as >= 0) { out->w[i] = out->w[s->same_as]; continue; }
        const wt_tensor *t = src[i];
        if (s->n_parts > 0) {
            if (assemble(out->file, s, out->wmem + offset[i]) != 0) {
                snprintf(err, errlen, "%s: cannot assemble weight '%s' (%d parts) as %s", wt_path(out->file), s->name,
                         s->n_parts, dtype_name(s->dtype));
                ok = 0;
                break;
            }
            out->w[i] = out->wmem + offset[i];
            n->assembled++;
            continue;
        }
        const int64_t rows = s->n_dims == 1 ? 1 : s->shape[0];
        const unsigned char *from = (const unsigned char *)t->data + (size_t)s->first_row * src_row[i];
        unsigned char *to = out->wmem + offset[i];
        const lora_delta *merge = merged_at(tab, i);
        n->merged += merge != NULL;
        if (t->dtype == s->dtype && !s->x16 && !merge) {
            if (t->repacked) out->w[i] = from, n->repacked++;
            else if (in_place) out->w[i] = from, n->in_place++;
            else {
                out->w[i] = memcpy(to, from, src_row[i] * (size_t)rows);
                ha_forget_mapped(from, src_row[i] * (size_t)rows);
                n->copied++;
            }
            continue;
        }
        if (t->dtype == s->dtype && !merge) { /* an x16 weight: always a copy of its own, interleaved as it is copied */
            if (interleave_from(s, from, to) != 0) {
                snprintf(err, errlen, "%s: weight '%s' (%lld x %lld %s) cannot take the 16-row interleaved layout",
                         wt_path(out->file), s->name, (long long)s->shape[0], (long long)s->shape[1], dtype_name(s->dtype));
                ok = 0;
                break;
            }
            if (!t->repacked) ha_forget_mapped(from, src_row[i] * (size_t)rows);
            n->copied++, n->interleaved++;
            out->w[i] = to;
            continue;
        }
        int64_t bad_row = 0;
        const int64_t cols = source_cols(s, t);
        const int crc = convert(t, s->first_row, rows, cols, s->dtype, to, merge, &bad_row);
        if (crc == -2) {
            snprintf(err, errlen, "%s: tensor '%s': row %lld holds a NaN or an infinity, which %s cannot store",
                     wt_path(out->file), t->name, (long long)(s->first_row + bad_row), dtype_name(s->dtype));
            ok = 0;
            break;
        }
        if (crc != 0) {
            snprintf(err, errlen, "%s: cannot convert tensor '%s' from %s to %s", wt_path(out->file), t->name,
                     dtype_name(t->dtype), dtype_name(s->dtype));
            ok = 0;
            break;
        }
        n->converted++;
        if (s->x16) {
            if (interleave(s, to) != 0) {
                snprintf(err, errlen, "out of memory interleaving weight '%s'", s->name);
                ok = 0;
                break;
            }
            n->interleaved++;
        }
        out->w[i] = to;
        if (progress && t->dtype != s->dtype)
            fprintf(stderr, "\rconverting weights at load: tensor %d of %d (%s)", i + 1, tab->n, dtype_name(s->dtype));
    }
    return ok;
}

int mw_load(const mw_table *tab, mw_weights *out, int in_place, char *err, size_t errlen) {
    const wt_tensor **src = calloc(tab->n, sizeof *src);
    size_t *offset = calloc(tab->n, sizeof *offset), *src_row = calloc(tab->n, sizeof *src_row);
    if (!src || !offset || !src_row) {
        free(src), free(offset), free(src_row);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const size_t wmem_bytes = plan_weights(tab, out, in_place, src, offset, src_row, err, errlen);
    int ok = 1;
    for (int i = 0; i < tab->n; i++) ok &= tab->spec[i].same_as >= 0 || src[i] != NULL;
    if (ok && !(out->wmem = ha_alloc(wmem_bytes))) {
        snprintf(err, errlen, "out of memory for %zu bytes of weights", wmem_bytes);
        ok = 0;
    }
    out->wmem_bytes = wmem_bytes;
    const int progress = isatty(STDERR_FILENO);
    load_counts n = {0};
    ok = ok && place_weights(tab, out, in_place, src, offset, src_row, progress, &n, err, errlen);
    free(src), free(offset), free(src_row);
    if (progress && n.converted) fprintf(stderr, "\n");
    if (!ok) return -1;
    describe_origin(out, n.in_place, n.repacked, n.copied, n.converted, n.assembled, n.interleaved);
    const size_t used = strlen(out->origin);
    if (n.merged && used < sizeof out->origin)
        snprintf(out->origin + used, sizeof out->origin - used, "; %d with a LoRA adapter merged in", n.merged);
    return check_all_used(tab, out->file, err, errlen);
}

size_t mw_planned_bytes(const mw_table *t) {
    size_t bytes = 0;
    for (int i = 0; i < t->n; i++) {
        const weight_spec *s = &t->spec[i];
        size_t row = 0;
        if (s->same_as >= 0 || dtype_row_bytes(s->dtype, s->shape[s->n_dims - 1], &row) != 0) continue;
        bytes += row * (size_t)(s->n_dims == 1 ? 1 : s->shape[0]);
    }
    return bytes;
}

void mw_release(mw_weights *w) {
    ha_free(w->wmem, w->wmem_bytes);
    w->wmem = NULL, w->wmem_bytes = 0;
    if (w->cast_map) munmap(w->cast_map, w->cast_map_bytes);
    w->cast_map = NULL, w->cast_map_bytes = 0;
}
