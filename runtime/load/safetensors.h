/* safetensors.h — safetensors reader (mmap, bounds-checked), single file or sharded (st_ prefix).
 *
 * st_open maps one .safetensors file read-only and parses its JSON header with
 * cJSON. st_open_index reads a model.safetensors.index.json and opens every
 * shard it names (each once) from the index's folder. Every data_offsets pair
 * is checked against the shape, the dtype and the file size; overlapping
 * tensors and duplicate names are rejected. The `__metadata__` entry is skipped.
 * Supported dtypes: F32, F16, BF16, and I32 and F8_E4M3 (the parts of GPTQ,
 * AWQ and FP8 checkpoints, which quant_ckpt.h repacks). Data pointers point into the mappings
 * (zero copy, not necessarily aligned) and live until st_close.
 */
#ifndef INGOT_SAFETENSORS_H
#define INGOT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "dtype.h"

#define ST_MAX_DIMS 4
#define ST_MAX_HEADER (100u << 20) /* header lengths above 100 MiB are rejected */

typedef struct {
    char *name;
    ingot_dtype dtype;
    int n_dims;                  /* 0 for a scalar */
    int64_t shape[ST_MAX_DIMS];  /* outermost first, as stored */
    const void *data;
    size_t nbytes;
    size_t shard;                /* index of the shard file holding it (0 when not sharded) */
    uint64_t begin;              /* data_offsets[0], relative to that shard's data section */
} st_tensor;

typedef struct st_file st_file;

/* Opens one .safetensors file. NULL with a one-line message in err on failure. */
st_file *st_open(const char *path, char *err, size_t errlen);
/* Opens a sharded checkpoint from its index file; shards are looked up next to it. */
st_file *st_open_index(const char *index_path, char *err, size_t errlen);
void st_close(st_file *f);

size_t st_n_tensors(const st_file *f);              /* in header order, shard after shard */
const st_tensor *st_tensor_at(const st_file *f, size_t i);
const st_tensor *st_find(const st_file *f, const char *name); /* NULL if absent */
size_t st_n_shards(const st_file *f);
const char *st_shard_path(const st_file *f, size_t i);

#endif
