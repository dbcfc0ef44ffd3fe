/* kv_pool.c — KV block allocation, reference counts and the prefix cache. */
#include "kv_pool.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int refs;
    int published;     /* holds a hashed prefix block */
    uint64_t hash;
    int lru_prev, lru_next; /* on the LRU list when cached (refs == 0 && published) */
    int next_free;
} kv_block;

struct kv_pool {
    int n, block_size;
    kv_block *blocks;
    int32_t *tokens;   /* [n][block_size]: the tokens of published blocks */
    int free_head;     /* singly linked free list */
    int n_free, n_in_use, n_cached;
    int lru_head, lru_tail; /* head = least recently used */
    /* open-addressing hash table: hash -> block id, size a power of two >= 2n */
    int *table;
    int table_mask;
    int n_tombstones;  /* rebuilt before they crowd out empty slots (lookups stop at one) */
};

#define KV_EMPTY -1
#define KV_TOMBSTONE -2

kv_pool *kv_create(int n_blocks, int block_size) {
    if (n_blocks < 1 || block_size < 1) return NULL;
    kv_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_blocks;
    p->block_size = block_size;
    p->blocks = calloc((size_t)n_blocks, sizeof *p->blocks);
    p->tokens = malloc(sizeof(int32_t) * (size_t)n_blocks * block_size);
    int size = 16;
    while (size < 2 * n_blocks) size *= 2;
    p->table = malloc(sizeof(int) * (size_t)size);
    if (!p->blocks || !p->tokens || !p->table) {
        kv_destroy(p);
        return NULL;
    }
    p->table_mask = size - 1;
    for (int i = 0; i < size; i++) p->table[i] = KV_EMPTY;
    for (int i = 0; i < n_blocks; i++) p->blocks[i].next_free = i + 1 < n_blocks ? i + 1 : -1;
    p->free_head = 0;
    p->n_free = n_blocks;
    p->lru_head = p->lru_tail = -1;
    return p;
}

void kv_destroy(kv_pool *p) {
    if (!p) return;
    free(p->blocks);
    free(p->tokens);
    free(p->table);
    free(p);
}

static void lru_remove(kv_pool *p, int b) {
    kv_block *k = &p->blocks[b];
    if (k->lru_prev >= 0) p->blocks[k->lru_prev].lru_next = k->lru_next;
    else p->lru_head = k->lru_next;
    if (k->lru_next >= 0) p->blocks[k->lru_next].lru_prev = k->lru_prev;
    else p->lru_tail = k->lru_prev;
    k->lru_prev = k->lru_next = -1;
}

static void lru_push_tail(kv_pool *p, int b) {
    kv_block *k = &p->blocks[b];
    k->lru_prev = p->lru_tail;
    k->lru_next = -1;
    if (p->lru_tail >= 0) p->blocks[p->lru_tail].lru_next = b;
    else p->lru_head = b;
    p->lru_tail = b;
}

/* Slot of `hash` in the table, or of the first empty slot if absent. */
static int table_find(const kv_pool *p, uint64_t hash, int *found) {
    int i = (int)(hash & (uint64_t)p->table_mask);
    int first_tomb = -1;
    for (;;) {
        const int b = p->table[i];
        if (b == KV_EMPTY) {
            *found = 0;
            return first_tomb >= 0 ? first_tomb : i;
        }
        if (b == KV_TOMBSTONE) {
            if (first_tomb < 0) first_tomb = i;
        } else if (p->blocks[b].hash == hash) {
            *found = 1;
            return i;
        }
        i = (i + 1) & p->table_mask;
    }
}

static void table_rebuild(kv_pool *p) {
    for (int i = 0; i <= p->table_mask; i++) p->table[i] = KV_EMPTY;
    p->n_tombstones = 0;
    for (int b = 0; b < p->n; b++) {
        if (!p->blocks[b].published) continue;
        int found;
        const int slot = table_find(p, p->blocks[b].hash, &found);
        p->table[slot] = b;
    }
}

static void unpublish(kv_pool *p, int b) {
    int found;
    const int slot = table_find(p, p->blocks[b].hash, &found);
    if (found && p->table[slot] == b) {
        p->table[slot] = KV_TOMBSTONE;
        if (++p->n_tombstones > (p->table_mask + 1) / 4) {
            p->blocks[b].published = 0;
            table_rebuild(p);
        }
    }
    p->blocks[b].published = 0;
}

int kv_alloc(kv_pool *p) {
    int b;
    if (p->free_head >= 0) {
        b = p->free_head;
        p->free_head = p->blocks[b].next_free;
        p->n_free--;
    } else if (p->lru_head >= 0) {
        b = p->lru_head; /* evict the least recently used cached block */
        lru_remove(p, b);
        unpublish(p, b);
        p->n_cached--;
    } else {
        return -1;
    }
    p->blocks[b].refs = 1;
    p->blocks[b].lru_prev = p->blocks[b].lru_next = -1;
    p->n_in_use++;
    return b;
}

void kv_ref(kv_pool *p, int b) {
    assert(b >= 0 && b < p->n);
    kv_block *k = &p->blocks[b];
    if (k->refs == 0) {
        assert(k->published);
        lru_remove(p, b);
        p->n_cached--;
        p->n_in_use++;
    }
    k->refs++;
}

void kv_unref(kv_pool *p, int b) {
    assert(b >= 0 && b < p->n && p->blocks[b].refs > 0);
    kv_block *k = &p->blocks[b];
    if (--k->refs > 0) return;
    p->n_in_use--;
    if (k->published) {
        lru_push_tail(p, b);
        p->n_cached++;
    } else {
        k->next_free = p->free_head;
        p->free_head = b;
        p->n_free++;
    }
}

uint64_t kv_hash_block(uint64_t prev, const int32_t *tokens, int block_size) {
    uint64_t h = prev ^ 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < block_size; i++) {
        h ^= (uint64_t)(uint32_t)tokens[i];
        h *= 0x100000001b3ULL; /* FNV-style mix, then avalanche below */
        h ^= h >> 29;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h ? h : 1;
}

int kv_lookup(kv_pool *p, uint64_t hash, const int32_t *tokens) {
    int found;
    const int slot = table_find(p, hash, &found);
    if (!found) return -1;
    const int b = p->table[slot];
    if (memcmp(p->tokens + (size_t)b * p->block_size, tokens, sizeof(int32_t) * p->block_size) != 0)
        return -1;
    kv_ref(p, b);
    return b;
}

void kv_publish(kv_pool *p, int b, uint64_t hash, const int32_t *tokens) {
    assert(b >= 0 && b < p->n && p->blocks[b].refs > 0);
    if (p->blocks[b].published) return;
    int found;
    const int slot = table_find(p, hash, &found);
    if (found) return;
    if (p->table[slot] == KV_TOMBSTONE) p->n_tombstones--;
    p->table[slot] = b;
    p->blocks[b].published = 1;
    p->blocks[b].hash = hash;
    memcpy(p->tokens + (size_t)b * p->block_size, tokens, sizeof(int32_t) * p->block_size);
}

int kv_total(const kv_pool *p) { return p->n; }
int kv_in_use(const kv_pool *p) { return p->n_in_use; }
int kv_cached(const kv_pool *p) { return p->n_cached; }
int kv_available(const kv_pool *p) { return p->n_free + p->n_cached; }
