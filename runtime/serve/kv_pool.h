/* kv_pool.h — KV block bookkeeping: allocation, reference counts, prefix cache (kv_ prefix).
 *
 * The KV memory itself is one array owned by the scheduler; this module only
 * decides which block ids are free, shared or cached. A block is in exactly
 * one of three states:
 *   free      on the free list, content meaningless;
 *   in use    refcount >= 1 (one per sequence whose block table holds it);
 *   cached    refcount 0 but published under a content hash: kept on an LRU
 *             list so a later prompt with the same prefix can reuse it, and
 *             evicted (oldest first) when a fresh block is needed.
 * Only full blocks are published, and a sequence only ever writes into its
 * own last, partial block, so a shared block is never written: sharing needs
 * no copy-on-write.
 *
 * The hash of block i chains the hash of block i-1 with the block's token
 * ids, so equal hashes mean equal whole prefixes (up to 64-bit collisions,
 * which the cache also guards against by storing the tokens).
 */
#ifndef INGOT_KV_POOL_H
#define INGOT_KV_POOL_H

#include <stdint.h>

typedef struct kv_pool kv_pool;

kv_pool *kv_create(int n_blocks, int block_size);
void kv_destroy(kv_pool *p);

/* A fresh block (refcount 1), evicting the least recently used cached block
 * if no free one is left; -1 if every block is in use. */
int kv_alloc(kv_pool *p);
void kv_ref(kv_pool *p, int block);
/* Drops one reference; at zero the block becomes cached (if published) or free. */
void kv_unref(kv_pool *p, int block);

/* Chained content hash of one full block following the block whose hash is prev (0 for the first). */
uint64_t kv_hash_block(uint64_t prev, const int32_t *tokens, int block_size);
/* The cached or in-use block holding exactly this prefix block, with a new
 * reference taken; -1 if none. */
int kv_lookup(kv_pool *p, uint64_t hash, const int32_t *tokens);
/* Records that `block` (full, written) holds the block with this hash and
 * tokens. A block already published, or a hash already present, is left as is. */
void kv_publish(kv_pool *p, int block, uint64_t hash, const int32_t *tokens);

int kv_total(const kv_pool *p);
int kv_in_use(const kv_pool *p);     /* refcount >= 1 */
int kv_cached(const kv_pool *p);     /* refcount 0, reusable by prefix */
int kv_available(const kv_pool *p);  /* free + cached: what kv_alloc can still return */

#endif
