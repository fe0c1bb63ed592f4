/* kv_block_pool — the KV cache's physical blocks, their reference counts,
 * the LRU free queue and the prefix-cache hash map (vLLM's BlockPool).
 *
 * Pure bookkeeping: a block is an id in [0, num_blocks); the device buffers
 * it names belong to the model runner. Everything is allocated at creation,
 * no call allocates afterwards.
 *
 * States of a block (every block is in exactly one):
 *   null     block 0, a placeholder never handed out, never freed, never
 *            cached (its ref count is not maintained);
 *   used     ref_cnt > 0, held by one or more sequences, not in the queue;
 *   free     ref_cnt == 0, in the free queue; it may still carry a hash
 *            ("cached, evictable"): a prefix hit on it takes it back out.
 * A block has a hash iff it is in the hash map.
 *
 * Free queue order (head = next to be handed out = evicted first):
 *   - at creation: ids 1, 2, ..., num_blocks-1;
 *   - kv_pool_free_blocks puts blocks that reach ref 0 WITHOUT a hash at the
 *     head (they hold nothing worth keeping) and blocks WITH a hash at the
 *     tail (most recently used), each group in the order given. A sequence
 *     frees its table in reverse, so its last blocks (longest prefixes, the
 *     least likely to be shared) are evicted before its first ones.
 *   - kv_pool_get_new_blocks pops from the head and evicts the hash of each
 *     popped block.
 *
 * Several blocks may carry the same hash (two requests filled identical
 * blocks before either was cached; vLLM does not deduplicate so that block
 * tables stay append-only). A lookup returns the earliest cached one.
 */
#ifndef KV_BLOCK_POOL_H
#define KV_BLOCK_POOL_H

#include "engine/kv_hash.h"

#include <stdbool.h>
#include <stdint.h>

#define KV_NULL_BLOCK 0

typedef struct kv_block_pool kv_block_pool;

/* num_blocks counts the null block: num_blocks - 1 are usable (>= 1).
 * NULL + vc_err_set on bad arguments or out of memory. */
kv_block_pool *kv_pool_create(int32_t num_blocks, bool enable_caching);
void kv_pool_free(kv_block_pool *p);

int32_t kv_pool_num_blocks(const kv_block_pool *p); /* including the null block */
int32_t kv_pool_num_free(const kv_block_pool *p);   /* in the free queue (cached or not) */
/* Fraction of usable blocks not in the free queue, in [0, 1]. */
double kv_pool_usage(const kv_block_pool *p);

/* Pop n blocks from the head of the free queue into out[0..n), evicting any
 * hash they carry; each gets ref_cnt 1. Asks for more than kv_pool_num_free
 * are a caller bug (the manager checks first): VC_ASSERT. */
void kv_pool_get_new_blocks(kv_block_pool *p, int32_t n, int32_t *out);

/* The block cached under hash h, or -1. */
int32_t kv_pool_lookup(const kv_block_pool *p, const kv_block_hash *h);

/* Mark blocks[from..to) as full and cached with hashes[from..to): each
 * enters the hash map. The null block is skipped; a block that already has
 * a hash must have this one (VC_ASSERT). */
void kv_pool_cache_full_blocks(kv_block_pool *p, const int32_t *blocks, const kv_block_hash *hashes,
                               int32_t from, int32_t to);

/* A prefix hit: ref_cnt++ on each block, taking free ones out of the queue. */
void kv_pool_touch(kv_block_pool *p, const int32_t *blocks, int32_t n);

/* ref_cnt-- on each block; blocks reaching 0 return to the free queue as
 * described above. `blocks` is in eviction priority order (first = evicted
 * first); reverse = true walks it from the end, which is how a sequence
 * frees its table without copying it. */
void kv_pool_free_blocks(kv_block_pool *p, const int32_t *blocks, int32_t n, bool reverse);

/* Drop every hash (after a weight update, or for benchmarks). Only possible
 * when no block is in use: returns false and changes nothing otherwise. */
bool kv_pool_reset_prefix_cache(kv_block_pool *p);

/* Evict the hash of one block if it has one (used or free); returns whether
 * it had one. Used for external invalidation (vLLM evict_blocks). */
bool kv_pool_evict_block(kv_block_pool *p, int32_t block);

/* ---- introspection (tests, metrics, invariant checks) */
int32_t kv_pool_ref_cnt(const kv_block_pool *p, int32_t block);
bool kv_pool_is_free(const kv_block_pool *p, int32_t block);
/* Copies the block's hash to *out when it has one. */
bool kv_pool_block_hash(const kv_block_pool *p, int32_t block, kv_block_hash *out);
int32_t kv_pool_num_cached(const kv_block_pool *p); /* blocks carrying a hash */
/* The free queue from head to tail into out (capacity cap); returns its
 * length. */
int32_t kv_pool_free_queue(const kv_block_pool *p, int32_t *out, int32_t cap);
/* Walk every structure and check the invariants above (O(num_blocks));
 * VC_OK, or VC_ERR_RUNTIME with a message naming the first violation. */
int kv_pool_check(const kv_block_pool *p);

#endif
