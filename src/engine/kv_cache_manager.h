/* kv_cache_manager — per-engine KV cache bookkeeping for the scheduler
 * (vLLM's KVCacheManager for one full-attention KV cache group).
 *
 * Pure logic, no device code: it decides which block ids each sequence's
 * tokens live in; the runner copies block tables and slot mappings to the
 * device and the paged attention kernel reads them.
 *
 * Shapes:
 *   B           tokens per block (block_size)
 *   block table int32 [ceil(slots / B)] block ids of a sequence, append-only
 *               while it runs (ids never change position)
 *   slot(pos)   block_table[pos / B] * B + pos % B, an index into the cache
 *               viewed as [num_blocks * B] token slots (kv_slot_mapping)
 *   hashes      kv_block_hash [num_tokens / B], one per full block
 *
 * Tour — how the scheduler uses it:
 *   m = kv_mgr_create(&params)                   once per engine
 *   s = kv_seq_create(m, &seq_params)             per request (salt, LoRA)
 *   kv_seq_append_tokens(m, s, prompt, n)         hashes full blocks now
 *   -- admitting a waiting request (num_computed == 0):
 *   kv_mgr_get_computed_blocks(m, s, &hit)        prefix-cache lookup;
 *         hit.num_tokens of the prompt are already in the cache (a multiple
 *         of B, at most num_tokens - 1: the last token is always recomputed
 *         so the step produces logits)
 *   n = tokens to compute this step (budget, chunking) beyond hit.num_tokens
 *   r = kv_mgr_allocate_slots(m, s, 0, n, &hit, 0)
 *         KV_ALLOC_OK: table covers hit + n tokens; the request starts at
 *         num_computed = hit.num_tokens and advances by n once scheduled
 *         KV_ALLOC_NO_SPACE: nothing changed, try later / preempt
 *   -- each later step of a running request:
 *   r = kv_mgr_allocate_slots(m, s, num_computed, n, NULL, lookahead)
 *   kv_seq_block_ids(s, &nb) / kv_slot_mapping(...) feed the runner
 *   kv_seq_append_tokens(m, s, &sampled, 1)       after each sampled token
 *   -- preemption: kv_mgr_free_blocks(m, s); the sequence keeps its hashes
 *      and is looked up again when readmitted (its own blocks may still be
 *      cached).
 *   -- finished or aborted: kv_seq_release(m, s) (frees blocks, recycles s).
 *
 * Blocks become cached (shareable) once full and their tokens final:
 * allocate_slots caches blocks up to min(computed + new, tokens appended),
 * the vLLM rule that keeps unverified draft tokens out of the cache.
 *
 * Memory: the pool is allocated at creation; sequence records are recycled
 * and their arrays only grow (amortised), so a steady-state step does not
 * allocate. Not thread-safe: the scheduler thread owns it.
 */
#ifndef KV_CACHE_MANAGER_H
#define KV_CACHE_MANAGER_H

#include "engine/kv_block_pool.h"
#include "engine/kv_hash.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kv_manager kv_manager;
typedef struct kv_seq kv_seq;

typedef struct {
    int32_t num_blocks;    /* including the null block; usable = num_blocks - 1 */
    int32_t block_size;    /* B, tokens per block */
    int32_t max_model_len; /* slots per sequence are capped here; 0 = no cap */
    bool enable_caching;   /* automatic prefix caching; off = no hashing, no hits */
    kv_hash_mode hash_mode;
    const void *hash_seed; /* bytes mixed into the none hash (copied); NULL = none */
    size_t hash_seed_len;
} kv_mgr_params;

/* num_blocks 0 (must be set), block_size 16, no length cap, caching on,
 * sha256, no seed. */
kv_mgr_params kv_mgr_params_default(void);

/* NULL + vc_err_set on bad parameters or out of memory. */
kv_manager *kv_mgr_create(const kv_mgr_params *p);
/* Frees the manager and every sequence record still alive. */
void kv_mgr_free(kv_manager *m);

int32_t kv_mgr_block_size(const kv_manager *m);
int32_t kv_mgr_num_free_blocks(const kv_manager *m);
double kv_mgr_usage(const kv_manager *m); /* fraction of usable blocks in use */
kv_block_pool *kv_mgr_pool(kv_manager *m); /* for metrics and tests */

/* ---- sequences */

typedef struct {
    const void *cache_salt; /* enters the first block's hash only; NULL = none */
    uint32_t cache_salt_len;
    const kv_extra_key *extra_keys; /* on every block, e.g. the LoRA name (copied) */
    int32_t num_extra_keys;
    bool skip_prefix_lookup; /* never read the cache (e.g. prompt logprobs) */
} kv_seq_params;

/* A fresh sequence with no tokens and no blocks; params may be NULL.
 * NULL + vc_err_set on out of memory. */
kv_seq *kv_seq_create(kv_manager *m, const kv_seq_params *p);
/* Frees the sequence's blocks and recycles its record. NULL is a no-op. */
void kv_seq_release(kv_manager *m, kv_seq *s);

/* Append final tokens (prompt, then each sampled token); every block that
 * becomes full is hashed (when caching is on). VC_ERR_OOM only when an
 * array must grow and cannot. */
int kv_seq_append_tokens(kv_manager *m, kv_seq *s, const int32_t *tokens, int32_t n);

int32_t kv_seq_num_tokens(const kv_seq *s);
/* The block table: *n ids, valid until the next call that changes s. */
const int32_t *kv_seq_block_ids(const kv_seq *s, int32_t *n);
/* Hashes of full blocks so far (*n of them). */
const kv_block_hash *kv_seq_block_hashes(const kv_seq *s, int32_t *n);
/* Blocks of the table already entered into the prefix cache. */
int32_t kv_seq_num_cached_blocks(const kv_seq *s);

/* ---- scheduling */

typedef struct {
    const int32_t *block_ids; /* [num_blocks], owned by the sequence */
    int32_t num_blocks;
    int32_t num_tokens; /* num_blocks * B */
} kv_hit;

/* The longest cached prefix of s, left to right up to the first miss,
 * capped at (num_tokens - 1) rounded down to whole blocks. An empty hit when
 * caching is off or the sequence skips lookups. Counts a prefix-cache query
 * (num_tokens) and its hits (hit tokens) in the stats. *out stays valid
 * until the next lookup or append on s; pass it to kv_mgr_allocate_slots
 * before any other allocation (which could evict its blocks: allocate_slots
 * then refuses it with VC_ERR_INVALID). */
void kv_mgr_get_computed_blocks(kv_manager *m, kv_seq *s, kv_hit *out);

enum { KV_ALLOC_OK = 0, KV_ALLOC_NO_SPACE = 1 };

/* Give s slots for num_new_tokens more tokens (plus num_lookahead_tokens
 * speculative slots) after num_computed_tokens already computed tokens and
 * the hit (NULL or empty for a running sequence; only a sequence holding no
 * blocks may take a hit). Hit blocks that sit free in the queue count
 * against the free blocks, since taking them removes them from it.
 * KV_ALLOC_OK: the table covers min(computed + hit + new + lookahead,
 * max_model_len) tokens, newly full final blocks are cached. The table only
 * grows while s runs: the ids this call added are table[n_before, n_after)
 * (what the runner copies to its device row).
 * KV_ALLOC_NO_SPACE: not enough free blocks; nothing changed.
 * Negative vc_status: inconsistent arguments (scheduler bug) or out of
 * memory growing the table; nothing changed. */
int kv_mgr_allocate_slots(kv_manager *m, kv_seq *s, int32_t num_computed_tokens,
                          int32_t num_new_tokens, const kv_hit *hit, int32_t num_lookahead_tokens);

/* Return s's blocks to the pool, last block first (so its tail is evicted
 * before its shared head). Hashes and tokens stay: s can be readmitted. */
void kv_mgr_free_blocks(kv_manager *m, kv_seq *s);

/* Leading blocks of s shared by every sequence that holds blocks (for
 * cascade attention); 0 when s holds none. */
int32_t kv_mgr_num_common_prefix_blocks(const kv_manager *m, const kv_seq *s);

/* Drop all cached hashes; only when no sequence holds blocks (false and no
 * change otherwise). Sequences keep their own hashes. */
bool kv_mgr_reset_prefix_cache(kv_manager *m);

/* slots[i] = table[(start + i) / B] * B + (start + i) % B for i < n; the
 * positions must be covered by the table (VC_ASSERT). */
void kv_slot_mapping(const int32_t *block_table, int32_t num_table_blocks, int32_t block_size,
                     int32_t start, int32_t n, int64_t *slots);

/* ---- prefix cache statistics (in tokens, vLLM's PrefixCacheStats) */

typedef struct {
    int64_t requests, queries, hits; /* lookups of never-preempted sequences */
    int64_t preempted_requests, preempted_queries, preempted_hits; /* readmissions */
    bool reset; /* the cache was reset since the last take */
} kv_prefix_stats;

/* Copy the counters accumulated since the last take and zero them. */
void kv_mgr_take_prefix_stats(kv_manager *m, kv_prefix_stats *out);

#endif
