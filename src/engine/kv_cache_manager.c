/* KV cache manager: sequence records (tokens' block hashes, block table)
 * over the block pool, with vLLM's allocation and caching rules. */
#include "engine/kv_cache_manager.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

struct kv_seq {
    kv_seq *prev, *next; /* live list, or (next only) the recycle list */
    int32_t num_tokens;
    int32_t *partial; /* [B] tokens of the not yet full last block */
    int32_t npartial;
    kv_block_hash *hashes; /* [nhashes], capacity cap_hashes */
    int32_t nhashes, cap_hashes;
    int32_t *hit; /* [cap_hashes]: lookup results, never longer than hashes */
    int32_t *blocks; /* block table [nblocks], capacity cap_blocks */
    int32_t nblocks, cap_blocks;
    int32_t num_cached_blocks; /* table prefix entered into the cache */
    int32_t num_frees;         /* > 0: readmitted after preemption */
    bool skip_lookup;
    /* Extra keys: extras[0..nextras) go on every block; when has_salt,
     * extras[nextras] is the cache salt, passed for block 0 only. */
    kv_extra_key *extras;
    int32_t nextras, cap_extras;
    bool has_salt;
    uint8_t *extra_bytes; /* backing store for the keys' bytes */
    size_t cap_extra_bytes;
};

struct kv_manager {
    kv_block_pool *pool;
    int32_t B;
    int32_t max_model_len;
    bool caching;
    kv_hash_mode mode;
    kv_block_hash none_hash;
    kv_seq live;            /* sentinel of the live list */
    kv_seq *recycled;       /* released records kept with their arrays */
    int32_t seqs_with_blocks;
    kv_prefix_stats stats;
};

kv_mgr_params kv_mgr_params_default(void) {
    return (kv_mgr_params){.num_blocks = 0,
                           .block_size = 16,
                           .max_model_len = 0,
                           .enable_caching = true,
                           .hash_mode = KV_HASH_SHA256};
}

kv_manager *kv_mgr_create(const kv_mgr_params *p) {
    if (p->block_size < 1 || p->block_size > 1 << 16) {
        vc_err_set(VC_ERR_INVALID, "kv manager: block_size %d out of range [1, 65536]", p->block_size);
        return NULL;
    }
    if (p->max_model_len < 0) {
        vc_err_set(VC_ERR_INVALID, "kv manager: negative max_model_len %d", p->max_model_len);
        return NULL;
    }
    if (p->hash_mode != KV_HASH_SHA256 && p->hash_mode != KV_HASH_FAST64) {
        vc_err_set(VC_ERR_INVALID, "kv manager: unknown hash mode %d", (int)p->hash_mode);
        return NULL;
    }
    kv_manager *m = calloc(1, sizeof *m);
    if (!m) {
        vc_err_set(VC_ERR_OOM, "kv manager: out of memory");
        return NULL;
    }
    m->pool = kv_pool_create(p->num_blocks, p->enable_caching);
    if (!m->pool) {
        free(m);
        vc_err_prefix("kv manager");
        return NULL;
    }
    m->B = p->block_size;
    m->max_model_len = p->max_model_len;
    m->caching = p->enable_caching;
    m->mode = p->hash_mode;
    kv_hash_none(m->mode, p->hash_seed, p->hash_seed ? p->hash_seed_len : 0, &m->none_hash);
    m->live.prev = m->live.next = &m->live;
    return m;
}

static void seq_destroy(kv_seq *s) {
    free(s->partial);
    free(s->hashes);
    free(s->hit);
    free(s->blocks);
    free(s->extras);
    free(s->extra_bytes);
    free(s);
}

void kv_mgr_free(kv_manager *m) {
    if (!m) return;
    for (kv_seq *s = m->live.next, *n; s != &m->live; s = n) {
        n = s->next;
        seq_destroy(s);
    }
    for (kv_seq *s = m->recycled, *n; s; s = n) {
        n = s->next;
        seq_destroy(s);
    }
    kv_pool_free(m->pool);
    free(m);
}

int32_t kv_mgr_block_size(const kv_manager *m) { return m->B; }
int32_t kv_mgr_num_free_blocks(const kv_manager *m) { return kv_pool_num_free(m->pool); }
double kv_mgr_usage(const kv_manager *m) { return kv_pool_usage(m->pool); }
kv_block_pool *kv_mgr_pool(kv_manager *m) { return m->pool; }

/* Grow *arr (elements of `size` bytes) to hold at least `need`; doubling
 * keeps the cost amortised. Nothing changes on failure. */
static int grow(void **arr, int32_t *cap, int32_t need, size_t size) {
    if (need <= *cap) return VC_OK;
    int64_t c = *cap ? *cap : 8;
    while (c < need) c *= 2;
    if (c > INT32_MAX) c = INT32_MAX;
    void *q = realloc(*arr, (size_t)c * size);
    if (!q) return vc_err_set(VC_ERR_OOM, "kv: out of memory growing a table to %lld entries", (long long)c);
    *arr = q;
    *cap = (int32_t)c;
    return VC_OK;
}

/* ------------------------------------------------------------ sequences */

static int seq_set_extras(kv_seq *s, const kv_seq_params *p) {
    int32_t n = p ? p->num_extra_keys : 0;
    bool salt = p && p->cache_salt && p->cache_salt_len;
    if (n < 0 || (n > 0 && !p->extra_keys)) return vc_err_set(VC_ERR_INVALID, "kv seq: bad extra keys");
    size_t bytes = salt ? p->cache_salt_len : 0;
    for (int32_t i = 0; i < n; i++) {
        if (p->extra_keys[i].len && !p->extra_keys[i].data)
            return vc_err_set(VC_ERR_INVALID, "kv seq: extra key %d has no data", i);
        bytes += p->extra_keys[i].len;
    }
    int rc = grow((void **)&s->extras, &s->cap_extras, n + 1, sizeof *s->extras);
    if (rc) return rc;
    if (bytes > s->cap_extra_bytes) {
        uint8_t *q = realloc(s->extra_bytes, bytes);
        if (!q) return vc_err_set(VC_ERR_OOM, "kv seq: out of memory for %zu key bytes", bytes);
        s->extra_bytes = q;
        s->cap_extra_bytes = bytes;
    }
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        const kv_extra_key *k = &p->extra_keys[i];
        s->extras[i] = (kv_extra_key){k->kind, s->extra_bytes + off, k->len};
        if (k->len) memcpy(s->extra_bytes + off, k->data, k->len);
        off += k->len;
    }
    s->nextras = n;
    s->has_salt = salt;
    if (salt) {
        s->extras[n] = (kv_extra_key){KV_EXTRA_CACHE_SALT, s->extra_bytes + off, p->cache_salt_len};
        memcpy(s->extra_bytes + off, p->cache_salt, p->cache_salt_len);
    }
    return VC_OK;
}

kv_seq *kv_seq_create(kv_manager *m, const kv_seq_params *p) {
    kv_seq *s = m->recycled;
    if (s) {
        m->recycled = s->next;
    } else {
        s = calloc(1, sizeof *s);
        if (s) s->partial = malloc(sizeof *s->partial * (size_t)m->B);
        if (!s || !s->partial) {
            if (s) free(s);
            vc_err_set(VC_ERR_OOM, "kv seq: out of memory");
            return NULL;
        }
    }
    s->num_tokens = s->npartial = s->nhashes = s->nblocks = 0;
    s->num_cached_blocks = s->num_frees = 0;
    s->skip_lookup = p && p->skip_prefix_lookup;
    if (seq_set_extras(s, p) != VC_OK) {
        s->next = m->recycled;
        m->recycled = s;
        return NULL;
    }
    s->next = m->live.next;
    s->prev = &m->live;
    m->live.next->prev = s;
    m->live.next = s;
    return s;
}

void kv_seq_release(kv_manager *m, kv_seq *s) {
    if (!s) return;
    kv_mgr_free_blocks(m, s);
    s->prev->next = s->next;
    s->next->prev = s->prev;
    s->prev = NULL;
    s->next = m->recycled;
    m->recycled = s;
}

/* Hash one full block of tokens as block number s->nhashes. */
static void seq_hash_block(const kv_manager *m, kv_seq *s, const int32_t *tokens) {
    const kv_block_hash *parent = s->nhashes ? &s->hashes[s->nhashes - 1] : &m->none_hash;
    int32_t ne = s->nextras + (s->nhashes == 0 && s->has_salt);
    kv_hash_block(m->mode, parent, tokens, m->B, s->extras, ne, &s->hashes[s->nhashes]);
    s->nhashes++;
}

int kv_seq_append_tokens(kv_manager *m, kv_seq *s, const int32_t *tokens, int32_t n) {
    if (n < 0 || (n > 0 && !tokens)) return vc_err_set(VC_ERR_INVALID, "kv seq: bad token list");
    if (n > INT32_MAX - s->num_tokens) return vc_err_set(VC_ERR_INVALID, "kv seq: too many tokens");
    if (!m->caching) {
        s->num_tokens += n;
        return VC_OK;
    }
    const int32_t B = m->B;
    int32_t need = (s->num_tokens + n) / B;
    if (need > s->cap_hashes) {
        int32_t cap = s->cap_hashes;
        int rc = grow((void **)&s->hashes, &cap, need, sizeof *s->hashes);
        if (rc) return rc;
        int32_t cap2 = s->cap_hashes; /* hit[] tracks the same capacity */
        rc = grow((void **)&s->hit, &cap2, cap, sizeof *s->hit);
        if (rc) return rc;
        s->cap_hashes = cap;
    }
    while (n > 0) {
        if (s->npartial == 0 && n >= B) { /* whole block straight from the input */
            seq_hash_block(m, s, tokens);
            tokens += B;
            n -= B;
            s->num_tokens += B;
            continue;
        }
        int32_t take = B - s->npartial < n ? B - s->npartial : n;
        memcpy(s->partial + s->npartial, tokens, sizeof *tokens * (size_t)take);
        s->npartial += take;
        s->num_tokens += take;
        tokens += take;
        n -= take;
        if (s->npartial == B) {
            seq_hash_block(m, s, s->partial);
            s->npartial = 0;
        }
    }
    return VC_OK;
}

int32_t kv_seq_num_tokens(const kv_seq *s) { return s->num_tokens; }

const int32_t *kv_seq_block_ids(const kv_seq *s, int32_t *n) {
    *n = s->nblocks;
    return s->blocks;
}

const kv_block_hash *kv_seq_block_hashes(const kv_seq *s, int32_t *n) {
    *n = s->nhashes;
    return s->hashes;
}

int32_t kv_seq_num_cached_blocks(const kv_seq *s) { return s->num_cached_blocks; }

/* ----------------------------------------------------------- scheduling */

void kv_mgr_get_computed_blocks(kv_manager *m, kv_seq *s, kv_hit *out) {
    *out = (kv_hit){s->hit, 0, 0};
    if (!m->caching || s->skip_lookup) return;
    /* Cap at num_tokens - 1 so the last token is recomputed for logits;
     * hits are whole blocks, so a fully cached prompt recomputes its whole
     * last block. */
    int32_t max_blocks = s->num_tokens > 0 ? (s->num_tokens - 1) / m->B : 0;
    if (max_blocks > s->nhashes) max_blocks = s->nhashes;
    int32_t nb = 0;
    while (nb < max_blocks) {
        int32_t id = kv_pool_lookup(m->pool, &s->hashes[nb]);
        if (id < 0) break; /* the chain: nothing after a miss can hit */
        s->hit[nb++] = id;
    }
    out->num_blocks = nb;
    out->num_tokens = nb * m->B;
    if (s->num_frees > 0) {
        m->stats.preempted_requests++;
        m->stats.preempted_queries += s->num_tokens;
        m->stats.preempted_hits += out->num_tokens;
    } else {
        m->stats.requests++;
        m->stats.queries += s->num_tokens;
        m->stats.hits += out->num_tokens;
    }
}

static int32_t cdiv(int64_t a, int32_t b) { return (int32_t)((a + b - 1) / b); }

int kv_mgr_allocate_slots(kv_manager *m, kv_seq *s, int32_t num_computed_tokens,
                          int32_t num_new_tokens, const kv_hit *hit, int32_t num_lookahead_tokens) {
    const int32_t B = m->B;
    int32_t nh = hit ? hit->num_blocks : 0;
    if (num_new_tokens <= 0 || num_computed_tokens < 0 || num_lookahead_tokens < 0)
        return vc_err_set(VC_ERR_INVALID, "kv allocate: bad counts (computed %d, new %d, lookahead %d)",
                          num_computed_tokens, num_new_tokens, num_lookahead_tokens);
    if ((int64_t)num_computed_tokens > (int64_t)s->nblocks * B)
        return vc_err_set(VC_ERR_INVALID, "kv allocate: %d computed tokens but only %d blocks",
                          num_computed_tokens, s->nblocks);
    if (nh > 0) {
        if (s->nblocks != 0 || num_computed_tokens != 0)
            return vc_err_set(VC_ERR_INVALID, "kv allocate: a prefix hit for a sequence that holds blocks");
        if (hit->block_ids != s->hit || nh > s->nhashes || hit->num_tokens != nh * B)
            return vc_err_set(VC_ERR_INVALID, "kv allocate: the hit is not this sequence's lookup");
        for (int32_t i = 0; i < nh; i++) { /* still the cached blocks found at lookup */
            kv_block_hash h;
            if (!kv_pool_block_hash(m->pool, hit->block_ids[i], &h) || !kv_hash_eq(&h, &s->hashes[i]))
                return vc_err_set(VC_ERR_INVALID, "kv allocate: hit block %d was evicted since the lookup",
                                  hit->block_ids[i]);
        }
    }
    int64_t local = (int64_t)num_computed_tokens + (int64_t)nh * B;
    int64_t need = local + num_new_tokens + num_lookahead_tokens;
    if (m->max_model_len && need > m->max_model_len) need = m->max_model_len;
    int32_t required = cdiv(need, B);
    int32_t num_new_blocks = required - nh - s->nblocks;
    if (num_new_blocks < 0) num_new_blocks = 0;
    /* Hit blocks that sit free in the queue leave it when touched: they cost
     * free blocks just like new ones. */
    int32_t evictable = 0;
    for (int32_t i = 0; i < nh; i++) evictable += kv_pool_ref_cnt(m->pool, hit->block_ids[i]) == 0;
    if ((int64_t)num_new_blocks + evictable > kv_pool_num_free(m->pool)) return KV_ALLOC_NO_SPACE;
    int rc = grow((void **)&s->blocks, &s->cap_blocks, s->nblocks + nh + num_new_blocks, sizeof *s->blocks);
    if (rc) return rc;

    bool had_blocks = s->nblocks > 0;
    if (nh > 0) {
        kv_pool_touch(m->pool, hit->block_ids, nh);
        memcpy(s->blocks, hit->block_ids, sizeof *s->blocks * (size_t)nh);
        s->nblocks = nh;
        s->num_cached_blocks = nh;
    }
    kv_pool_get_new_blocks(m->pool, num_new_blocks, s->blocks + s->nblocks);
    s->nblocks += num_new_blocks;
    if (!had_blocks && s->nblocks > 0) m->seqs_with_blocks++;

    if (m->caching) {
        /* Cache only final tokens: drafts beyond num_tokens may be rejected. */
        int64_t upto = local + num_new_tokens;
        if (upto > s->num_tokens) upto = s->num_tokens;
        int32_t nfull = (int32_t)(upto / B);
        if (nfull > s->nblocks) nfull = s->nblocks;
        VC_ASSERT(nfull <= s->nhashes);
        if (nfull > s->num_cached_blocks) {
            kv_pool_cache_full_blocks(m->pool, s->blocks, s->hashes, s->num_cached_blocks, nfull);
            s->num_cached_blocks = nfull;
        }
    }
    return KV_ALLOC_OK;
}

void kv_mgr_free_blocks(kv_manager *m, kv_seq *s) {
    if (s->nblocks > 0) {
        kv_pool_free_blocks(m->pool, s->blocks, s->nblocks, true);
        m->seqs_with_blocks--;
    }
    s->nblocks = 0;
    s->num_cached_blocks = 0;
    s->num_frees++;
}

int32_t kv_mgr_num_common_prefix_blocks(const kv_manager *m, const kv_seq *s) {
    int32_t n = 0;
    while (n < s->nblocks && kv_pool_ref_cnt(m->pool, s->blocks[n]) == m->seqs_with_blocks) n++;
    return n;
}

bool kv_mgr_reset_prefix_cache(kv_manager *m) {
    if (!kv_pool_reset_prefix_cache(m->pool)) return false;
    m->stats.reset = true;
    return true;
}

void kv_slot_mapping(const int32_t *block_table, int32_t num_table_blocks, int32_t block_size,
                     int32_t start, int32_t n, int64_t *slots) {
    VC_ASSERT(start >= 0 && n >= 0 && (int64_t)start + n <= (int64_t)num_table_blocks * block_size);
    int32_t bi = start / block_size, off = start % block_size;
    for (int32_t i = 0; i < n; i++) {
        slots[i] = (int64_t)block_table[bi] * block_size + off;
        if (++off == block_size) {
            off = 0;
            bi++;
        }
    }
}

void kv_mgr_take_prefix_stats(kv_manager *m, kv_prefix_stats *out) {
    *out = m->stats;
    memset(&m->stats, 0, sizeof m->stats);
}
