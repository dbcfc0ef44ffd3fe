/* model_cast.h — weights cast at build time: written once by `./ingot build`, read at every start
 * (mc_ prefix).
 *
 * Loading a checkpoint checks every tensor, converts those the build stores in another dtype
 * and rewrites most matrices into the interleaved layouts the kernels read (kc_x16*.h): about a
 * second for a 1B model, ten for an 8B one, at every start. `./ingot build` ends by running the
 * binary's `cast-weights` command, which loads the checkpoint that way once and writes every
 * weight exactly as the kernels read it to NAME.weights beside the binary. A later load of
 * the same checkpoint reads that file instead: one sequential read into huge pages (hugealloc.h),
 * or with --mmap the file mapped and used in place, no copy at all.
 *
 * The file is used only when it was cast for this build's weight table and kernel layouts
 * (the table's hash) and for the checkpoint being loaded (its tensor table,
 * size and modification time); otherwise, or when it is missing or damaged, the load converts
 * the checkpoint as before, saying why on stderr when a cast file was there but did not apply.
 *
 * Layout, little-endian, every offset from the start of the file:
 *   model_cast_header
 *   uint64 offset[n_weights], uint64 bytes[n_weights]  each weight's bytes (0, 0: same as another)
 *   the weights, each 64-byte aligned, the first at data_offset (a multiple of 4096, so that a
 *   mapping of the file keeps the alignment)
 */
#ifndef INGOT_MODEL_CAST_H
#define INGOT_MODEL_CAST_H

#include <stddef.h>
#include "model_weights.h"

/* Writes the loaded weights w of table t to NAME.weights beside the running binary (a temporary
 * name, then renamed: a reader never sees half a file). 0, or -1 with err filled. */
int mc_write(const mw_table *t, const mw_weights *w, const char *name, char *err, size_t errlen);

/* Loads the weights of table t from NAME.weights beside the running binary when it applies to
 * the checkpoint w->file (flags: model_api.h's INGOT_LOAD_*): 0 loaded (w->w, w->wmem or
 * w->cast_map, w->weight_bytes, w->origin set), 1 none applies (the caller converts the
 * checkpoint; why is said on stderr when the checkpoint is source, the build's own), -1 with err
 * filled (out of memory, a failed read). */
int mc_load(const mw_table *t, mw_weights *w, unsigned flags, const char *name, const char *source, char *err,
            size_t errlen);

#endif
