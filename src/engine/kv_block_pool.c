/* Block pool: intrusive doubly linked free queue over an array of blocks
 * (two sentinel entries past the end remove the empty-list branches), and
 * an open-addressing hash map from block hash to a chain of blocks.
 *
 * The map has one slot per distinct hash; a slot holds the first 8 bytes of
 * the hash as its key and the head/tail of a doubly linked chain of the
 * blocks carrying that hash (insertion order, so lookups return the oldest,
 * like vLLM's dict). Full 32-byte hashes live in the blocks and are compared
 * on lookup. At most num_blocks hashes exist, so a table of >= 2*num_blocks
 * slots sized at creation never grows; deletion is backward-shift (no
 * tombstones), so probe lengths stay short forever. */
#include "engine/kv_block_pool.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t ref_cnt;
    int32_t prev, next;   /* free-queue neighbours; -1 when not queued */
    int32_t hprev, hnext; /* neighbours in its hash chain; -1 at the ends */
    bool has_hash;
    kv_block_hash hash;
} kv_blk;

typedef struct {
    uint64_t key;       /* kv_hash_key64 of the chain's hash */
    int32_t head, tail; /* chain ends; head == -1: empty slot */
} kv_slot;

struct kv_block_pool {
    int32_t n; /* blocks including the null block */
    bool caching;
    kv_blk *b;   /* n + 2: b[n] is the queue's head sentinel, b[n+1] its tail */
    int32_t qh, qt;
    int32_t nfree;
    kv_slot *map;
    uint32_t map_bits; /* 2^map_bits slots */
    int32_t ncached;
};

/* ---------------------------------------------------------------- queue */

static inline bool q_in(const kv_block_pool *p, int32_t id) { return p->b[id].next != -1; }

static void q_unlink(kv_block_pool *p, int32_t id) {
    kv_blk *x = &p->b[id];
    p->b[x->prev].next = x->next;
    p->b[x->next].prev = x->prev;
    x->prev = x->next = -1;
    p->nfree--;
}

static void q_insert_after(kv_block_pool *p, int32_t at, int32_t id) {
    kv_blk *x = &p->b[id];
    x->prev = at;
    x->next = p->b[at].next;
    p->b[x->next].prev = id;
    p->b[at].next = id;
    p->nfree++;
}

static inline void q_push_head(kv_block_pool *p, int32_t id) { q_insert_after(p, p->qh, id); }
static inline void q_push_tail(kv_block_pool *p, int32_t id) { q_insert_after(p, p->b[p->qt].prev, id); }

/* ------------------------------------------------------------------ map */

static inline uint32_t m_home(const kv_block_pool *p, uint64_t key) {
    /* Fibonacci hashing: the top bits of key * 2^64/phi. */
    return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - p->map_bits));
}

static inline uint32_t m_mask(const kv_block_pool *p) { return (1u << p->map_bits) - 1; }

/* Slot holding hash h, or -1; *empty gets the first empty slot on the
 * probe path (where an insert would go). */
static int64_t m_find(const kv_block_pool *p, const kv_block_hash *h, uint32_t *empty) {
    uint64_t key = kv_hash_key64(h);
    uint32_t mask = m_mask(p);
    for (uint32_t i = m_home(p, key);; i = (i + 1) & mask) {
        const kv_slot *s = &p->map[i];
        if (s->head < 0) {
            if (empty) *empty = i;
            return -1;
        }
        if (s->key == key && kv_hash_eq(&p->b[s->head].hash, h)) return i;
    }
}

static void m_insert(kv_block_pool *p, int32_t id) {
    kv_blk *x = &p->b[id];
    uint32_t empty = 0;
    int64_t si = m_find(p, &x->hash, &empty);
    x->hnext = -1;
    if (si >= 0) { /* a duplicate: append to the chain */
        kv_slot *s = &p->map[si];
        x->hprev = s->tail;
        p->b[s->tail].hnext = id;
        s->tail = id;
    } else {
        kv_slot *s = &p->map[empty];
        s->key = kv_hash_key64(&x->hash);
        s->head = s->tail = id;
        x->hprev = -1;
    }
    p->ncached++;
}

/* Empty slot i and shift later entries of its probe run back into it. */
static void m_delete_slot(kv_block_pool *p, uint32_t i) {
    uint32_t mask = m_mask(p);
    for (;;) {
        uint32_t j = i;
        for (;;) {
            j = (j + 1) & mask;
            if (p->map[j].head < 0) {
                p->map[i].head = p->map[i].tail = -1;
                return;
            }
            uint32_t k = m_home(p, p->map[j].key);
            /* The entry at j may move to i unless its home lies in (i, j]. */
            bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
            if (!stays) break;
        }
        p->map[i] = p->map[j];
        i = j;
    }
}

static void m_remove(kv_block_pool *p, int32_t id) {
    kv_blk *x = &p->b[id];
    int64_t si = m_find(p, &x->hash, NULL);
    VC_ASSERT(si >= 0);
    kv_slot *s = &p->map[si];
    if (x->hprev >= 0)
        p->b[x->hprev].hnext = x->hnext;
    else
        s->head = x->hnext;
    if (x->hnext >= 0)
        p->b[x->hnext].hprev = x->hprev;
    else
        s->tail = x->hprev;
    x->hprev = x->hnext = -1;
    x->has_hash = false;
    p->ncached--;
    if (s->head < 0) m_delete_slot(p, (uint32_t)si);
}

/* ----------------------------------------------------------------- pool */

kv_block_pool *kv_pool_create(int32_t num_blocks, bool enable_caching) {
    if (num_blocks < 2 || num_blocks > (1 << 30)) {
        vc_err_set(VC_ERR_INVALID, "kv pool: num_blocks %d out of range [2, 2^30]", num_blocks);
        return NULL;
    }
    kv_block_pool *p = calloc(1, sizeof *p);
    if (!p) goto oom;
    p->n = num_blocks;
    p->caching = enable_caching;
    p->b = calloc((size_t)num_blocks + 2, sizeof *p->b);
    p->map_bits = 4;
    while ((1u << p->map_bits) < 2u * (uint32_t)num_blocks) p->map_bits++;
    p->map = malloc(sizeof *p->map << p->map_bits);
    if (!p->b || !p->map) goto oom;
    for (uint32_t i = 0; i <= m_mask(p); i++) p->map[i] = (kv_slot){0, -1, -1};
    p->qh = num_blocks;
    p->qt = num_blocks + 1;
    for (int32_t i = 0; i < num_blocks + 2; i++)
        p->b[i] = (kv_blk){.prev = -1, .next = -1, .hprev = -1, .hnext = -1};
    p->b[p->qh].next = p->qt;
    p->b[p->qt].prev = p->qh;
    for (int32_t i = 1; i < num_blocks; i++) q_push_tail(p, i); /* block 0 stays out */
    return p;
oom:
    kv_pool_free(p);
    vc_err_set(VC_ERR_OOM, "kv pool: out of memory for %d blocks", num_blocks);
    return NULL;
}

void kv_pool_free(kv_block_pool *p) {
    if (!p) return;
    free(p->b);
    free(p->map);
    free(p);
}

int32_t kv_pool_num_blocks(const kv_block_pool *p) { return p->n; }
int32_t kv_pool_num_free(const kv_block_pool *p) { return p->nfree; }

double kv_pool_usage(const kv_block_pool *p) {
    return 1.0 - (double)p->nfree / (double)(p->n - 1);
}

void kv_pool_get_new_blocks(kv_block_pool *p, int32_t n, int32_t *out) {
    VC_ASSERT(n >= 0 && n <= p->nfree);
    for (int32_t i = 0; i < n; i++) {
        int32_t id = p->b[p->qh].next;
        q_unlink(p, id);
        kv_blk *x = &p->b[id];
        if (x->has_hash) m_remove(p, id); /* evict: its content is about to be overwritten */
        VC_ASSERT(x->ref_cnt == 0);
        x->ref_cnt = 1;
        out[i] = id;
    }
}

int32_t kv_pool_lookup(const kv_block_pool *p, const kv_block_hash *h) {
    int64_t si = m_find(p, h, NULL);
    return si < 0 ? -1 : p->map[si].head;
}

void kv_pool_cache_full_blocks(kv_block_pool *p, const int32_t *blocks, const kv_block_hash *hashes,
                               int32_t from, int32_t to) {
    VC_ASSERT(p->caching);
    for (int32_t i = from; i < to; i++) {
        int32_t id = blocks[i];
        VC_ASSERT(id >= 0 && id < p->n);
        if (id == KV_NULL_BLOCK) continue;
        kv_blk *x = &p->b[id];
        VC_ASSERT(x->ref_cnt > 0);
        if (x->has_hash) { /* a block that came from a prefix hit */
            VC_ASSERT(kv_hash_eq(&x->hash, &hashes[i]));
            continue;
        }
        x->hash = hashes[i];
        x->has_hash = true;
        m_insert(p, id);
    }
}

void kv_pool_touch(kv_block_pool *p, const int32_t *blocks, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        int32_t id = blocks[i];
        VC_ASSERT(id >= 0 && id < p->n);
        if (id == KV_NULL_BLOCK) continue;
        kv_blk *x = &p->b[id];
        if (x->ref_cnt == 0) {
            VC_ASSERT(q_in(p, id));
            q_unlink(p, id);
        }
        x->ref_cnt++;
    }
}

void kv_pool_free_blocks(kv_block_pool *p, const int32_t *blocks, int32_t n, bool reverse) {
#define AT(k) blocks[reverse ? n - 1 - (k) : (k)]
    for (int32_t k = 0; k < n; k++) {
        int32_t id = AT(k);
        VC_ASSERT(id >= 0 && id < p->n);
        if (id == KV_NULL_BLOCK) continue;
        VC_ASSERT(p->b[id].ref_cnt > 0);
        p->b[id].ref_cnt--;
    }
    /* Cached blocks to the tail in the given order (evicted last)... */
    for (int32_t k = 0; k < n; k++) {
        int32_t id = AT(k);
        kv_blk *x = &p->b[id];
        if (id != KV_NULL_BLOCK && x->ref_cnt == 0 && x->has_hash && !q_in(p, id)) q_push_tail(p, id);
    }
    /* ...blocks without a hash to the head, the first given ending up first:
     * pushing them to the head from last to first. */
    for (int32_t k = n - 1; k >= 0; k--) {
        int32_t id = AT(k);
        kv_blk *x = &p->b[id];
        if (id != KV_NULL_BLOCK && x->ref_cnt == 0 && !x->has_hash && !q_in(p, id)) q_push_head(p, id);
    }
#undef AT
}

bool kv_pool_reset_prefix_cache(kv_block_pool *p) {
    if (p->nfree != p->n - 1) return false;
    for (uint32_t i = 0; i <= m_mask(p); i++) p->map[i] = (kv_slot){0, -1, -1};
    for (int32_t i = 0; i < p->n; i++) {
        p->b[i].has_hash = false;
        p->b[i].hprev = p->b[i].hnext = -1;
    }
    p->ncached = 0;
    return true;
}

bool kv_pool_evict_block(kv_block_pool *p, int32_t block) {
    VC_ASSERT(block >= 0 && block < p->n);
    if (!p->b[block].has_hash) return false;
    m_remove(p, block);
    return true;
}

/* --------------------------------------------------------- introspection */

int32_t kv_pool_ref_cnt(const kv_block_pool *p, int32_t block) {
    VC_ASSERT(block >= 0 && block < p->n);
    return p->b[block].ref_cnt;
}

bool kv_pool_is_free(const kv_block_pool *p, int32_t block) {
    VC_ASSERT(block >= 0 && block < p->n);
    return q_in(p, block);
}

bool kv_pool_block_hash(const kv_block_pool *p, int32_t block, kv_block_hash *out) {
    VC_ASSERT(block >= 0 && block < p->n);
    if (!p->b[block].has_hash) return false;
    if (out) *out = p->b[block].hash;
    return true;
}

int32_t kv_pool_num_cached(const kv_block_pool *p) { return p->ncached; }

int32_t kv_pool_free_queue(const kv_block_pool *p, int32_t *out, int32_t cap) {
    int32_t len = 0;
    for (int32_t id = p->b[p->qh].next; id != p->qt; id = p->b[id].next, len++)
        if (len < cap) out[len] = id;
    return len;
}

/* The message is formatted before `seen` is freed: it may read it. */
#define CHECK(cond, ...)                                                           \
    do {                                                                           \
        if (!(cond)) {                                                             \
            int rc_ = vc_err_set(VC_ERR_RUNTIME, "kv pool invariant: " __VA_ARGS__); \
            free(seen);                                                            \
            return rc_;                                                            \
        }                                                                          \
    } while (0)

int kv_pool_check(const kv_block_pool *p) {
    uint8_t *seen = calloc((size_t)p->n, 1);
    if (!seen) return vc_err_set(VC_ERR_OOM, "kv pool check: out of memory");
    const kv_blk *b = p->b;
    CHECK(b[0].next == -1 && b[0].prev == -1, "null block is in the free queue");
    CHECK(!b[0].has_hash, "null block has a hash");
    /* The queue: well linked, only ref-0 blocks, each once, count matches. */
    int32_t cnt = 0, prev = p->qh;
    for (int32_t id = b[p->qh].next; id != p->qt; prev = id, id = b[id].next) {
        CHECK(id > 0 && id < p->n, "free queue holds id %d", id);
        CHECK(!seen[id], "block %d twice in the free queue", id);
        CHECK(b[id].prev == prev, "block %d: prev link %d != %d", id, b[id].prev, prev);
        CHECK(b[id].ref_cnt == 0, "free block %d has ref_cnt %d", id, b[id].ref_cnt);
        seen[id] = 1;
        CHECK(++cnt <= p->nfree, "free queue longer than nfree %d", p->nfree);
    }
    CHECK(b[p->qt].prev == prev, "tail sentinel link");
    CHECK(cnt == p->nfree, "free queue length %d != nfree %d", cnt, p->nfree);
    /* Every usable block: free (ref 0, queued) xor used (ref > 0). */
    int32_t nhash = 0;
    for (int32_t id = 1; id < p->n; id++) {
        CHECK(b[id].ref_cnt >= 0, "block %d: negative ref_cnt", id);
        CHECK(seen[id] ? b[id].ref_cnt == 0 : b[id].ref_cnt > 0,
              "block %d: ref_cnt %d but %s the free queue", id, b[id].ref_cnt,
              seen[id] ? "in" : "not in");
        nhash += b[id].has_hash;
    }
    CHECK(nhash == p->ncached, "%d blocks with a hash, ncached %d", nhash, p->ncached);
    CHECK(p->caching || nhash == 0, "hashes with caching disabled");
    /* The map: chains consistent, each block with a hash in exactly one
     * chain, probe runs unbroken from each entry's home. */
    memset(seen, 0, (size_t)p->n);
    uint32_t mask = m_mask(p);
    int32_t in_chains = 0;
    for (uint32_t i = 0; i <= mask; i++) {
        const kv_slot *s = &p->map[i];
        if (s->head < 0) continue;
        for (uint32_t j = m_home(p, s->key); j != i; j = (j + 1) & mask)
            CHECK(p->map[j].head >= 0, "map slot %u unreachable from its home", i);
        int32_t last = -1;
        for (int32_t id = s->head; id >= 0; last = id, id = b[id].hnext) {
            CHECK(id > 0 && id < p->n && !seen[id], "map chain of slot %u holds bad id %d", i, id);
            seen[id] = 1;
            CHECK(b[id].has_hash && kv_hash_eq(&b[id].hash, &b[s->head].hash) &&
                      kv_hash_key64(&b[id].hash) == s->key,
                  "block %d in the wrong chain", id);
            CHECK(b[id].hprev == last, "block %d: chain prev link", id);
            in_chains++;
        }
        CHECK(s->tail == last, "map slot %u: tail %d != %d", i, s->tail, last);
    }
    CHECK(in_chains == nhash, "%d blocks in chains, %d with a hash", in_chains, nhash);
    free(seen);
    return VC_OK;
}
