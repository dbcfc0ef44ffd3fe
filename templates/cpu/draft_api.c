/* draft_api.c — the draft model's entry points as one table (ingot_draft_api), in a binary built with
 * --draft: compiled with draft_prefix.h like the draft's own source, so the names below are its. */
#include "model_api.h"

const ingot_model_api ingot_draft_api = {
    .desc = &ingot_model_desc,
    .load = ingot_model_load,
    .free = ingot_model_free,
    .weights = ingot_model_weights,
    .max_tokens = ingot_model_max_tokens,
    .weight_bytes = ingot_model_weight_bytes,
    .scratch_bytes = ingot_model_scratch_bytes,
    .weights_planned_bytes = ingot_weights_planned_bytes,
    .kv_alloc = ingot_kv_alloc,
    .kv_release = ingot_kv_release,
    .forward = ingot_forward,
};
