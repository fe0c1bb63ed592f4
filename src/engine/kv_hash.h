/* kv_hash — block hashes for automatic prefix caching.
 *
 * A full block of B tokens is named by a chained hash
 *     h[i] = H(h[i-1], tokens[i*B .. i*B+B), extra keys of block i)
 * with h[-1] = the "none hash" made from a seed. Equal hashes mean equal
 * token prefixes (and equal extra keys along the chain), so a block can be
 * shared between requests by looking its hash up (kv_block_pool).
 *
 * Byte serialisation fed to H (all integers little-endian, fixed width):
 *     parent      32 bytes   h[i-1] (the none hash for block 0)
 *     n_tokens    u32        B
 *     tokens      n_tokens x u32   token ids (int32 as two's complement)
 *     n_extras    u32        number of extra keys (0 if none)
 *     per extra:  kind u32, len u32, len bytes
 * The none hash is H("vllm.c/kv/none-hash/v1" || seed bytes), seed empty by
 * default, so hashes are reproducible across processes and machines.
 *
 * Modes:
 *   KV_HASH_SHA256 (default, like vLLM): the 32-byte SHA-256 digest of the
 *     serialisation. Collisions are not a practical concern, so a hit is
 *     trusted without comparing tokens.
 *   KV_HASH_FAST64: a 64-bit non-cryptographic hash of the same bytes,
 *     stored in bytes 0..7 (little-endian), bytes 8..31 zero. Several times
 *     cheaper; collisions are possible (about n^2/2^65 for n live blocks) and
 *     can be provoked on purpose, so cache_salt isolation is weaker. Use it
 *     only for trusted single-tenant workloads.
 *
 * Extra keys are opaque byte strings with a kind tag, so a salt "x" never
 * equals a LoRA name "x". vLLM puts the LoRA name on every block, multimodal
 * ids on the blocks they overlap and cache_salt on the first block only;
 * kv_cache_manager does the salt and per-sequence keys, and this low-level
 * entry point takes any list for future per-block keys.
 */
#ifndef KV_HASH_H
#define KV_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define KV_HASH_BYTES 32

typedef enum { KV_HASH_SHA256 = 0, KV_HASH_FAST64 = 1 } kv_hash_mode;

typedef struct {
    uint8_t b[KV_HASH_BYTES];
} kv_block_hash;

typedef enum {
    KV_EXTRA_CACHE_SALT = 1, /* first block only */
    KV_EXTRA_LORA = 2,       /* adapter name, every block */
    KV_EXTRA_MM = 3,         /* multimodal item id (+offset), blocks it overlaps */
    KV_EXTRA_OPAQUE = 4      /* anything else a caller wants in the key */
} kv_extra_kind;

typedef struct {
    uint32_t kind; /* kv_extra_kind */
    const void *data;
    uint32_t len;
} kv_extra_key;

/* Parse "sha256" / "fast64" (as a CLI flag would); negative vc_status on
 * anything else. */
int kv_hash_mode_parse(const char *s, kv_hash_mode *out);
const char *kv_hash_mode_name(kv_hash_mode m);

/* The parent hash of block 0. */
void kv_hash_none(kv_hash_mode mode, const void *seed, size_t seed_len, kv_block_hash *out);

/* h = H(parent, tokens[0..n), extras[0..n_extras)); see the serialisation
 * above. `extras` may be NULL when n_extras == 0. */
void kv_hash_block(kv_hash_mode mode, const kv_block_hash *parent, const int32_t *tokens, int32_t n,
                   const kv_extra_key *extras, int32_t n_extras, kv_block_hash *out);

static inline bool kv_hash_eq(const kv_block_hash *a, const kv_block_hash *b) {
    for (int i = 0; i < KV_HASH_BYTES; i++)
        if (a->b[i] != b->b[i]) return false;
    return true;
}

/* The first 8 bytes as a little-endian integer: the hash-map key. */
static inline uint64_t kv_hash_key64(const kv_block_hash *h) {
    uint64_t k = 0;
    for (int i = 7; i >= 0; i--) k = (k << 8) | h->b[i];
    return k;
}

#endif
