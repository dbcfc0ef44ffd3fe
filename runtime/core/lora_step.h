/* lora_step.h — LoRA adapters inside a generated CPU model's step (lora_step_apply).
 *
 * A step's sequences each choose an adapter (ingot_batch.adapters: 0 for the
 * base model) and share one step: every linear runs on all of the step's
 * tokens with the base weight, then, before anything reads its output, the
 * generated kernel calls lora_step_apply for its linears, which adds
 * scale * B (A x) to the rows of the tokens whose adapter updates that
 * weight. The tokens are grouped by adapter, then two phases run across the
 * pool for all of the kernel's linears at once (a decode step of one sequence
 * is short enough for dispatches to count): A x (rank values per token), each
 * work item a few rows of one adapter's A against all of that adapter's
 * tokens, so that A is read once per step; then B's columns times those
 * values, by 16-output blocks, each block's B^T one contiguous run per
 * adapter (the arithmetic: kernels/cpu/kc_lora.h). A token's result depends
 * only on its own row and adapter, not on who else is in the step. Compiled
 * once in the library (for each ISA level of an --isa all build), not in
 * every model.
 */
#ifndef INGOT_LORA_STEP_H
#define INGOT_LORA_STEP_H

#include "lora.h"
#include "model_api.h"
#include "threadpool.h"

#define LORA_MAX_LINEARS 8 /* linears of one matmul kernel (q, k, v; gate, up; ...) updated together */

/* One linear of a matmul kernel, as the generated call names it: weight table entry slot, y
 * [rows][out] written from x [rows][in]. */
typedef struct {
    int slot;
    const float *x;
    int in;
    float *y;
    int out;
} lora_linear;

/* A model's adapters, as its step reads them. */
typedef struct {
    const lora_adapter *adapters; /* [n] ids 1..n */
    int n;
    const unsigned char *sites;   /* per weight table entry: 1 where an update applies (LORA_SITES) */
    int max_tokens;               /* of a step */
    float *down;                  /* [LORA_MAX_LINEARS][max_tokens][LORA_MAX_RANK]: A x of each token */
    int *order;                   /* [LORA_MAX_LINEARS][max_tokens]: each linear's tokens by adapter */
} lora_set;

/* The scratch of a set for steps of max_tokens (down, order): 0, or -1 out of memory. */
int lora_set_scratch(lora_set *s, int max_tokens);
void lora_set_free_scratch(lora_set *s);

/* After a matmul kernel's n linears wrote their outputs for the step's `rows` tokens (b's): adds
 * each token's adapter update to each. */
void lora_step_apply(const lora_set *s, tp_pool *pool, const ingot_batch *b, int rows, int n, const lora_linear *linears);

#endif
