/* KV cache manager: vLLM's prefix-hit arithmetic, allocation and its
 * failure, caching of final tokens only, preemption, salts, statistics and
 * slot mappings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/kv_cache_manager.h"

static kv_manager *mk(int32_t num_blocks, int32_t B, bool caching) {
    kv_mgr_params p = kv_mgr_params_default();
    p.num_blocks = num_blocks;
    p.block_size = B;
    p.enable_caching = caching;
    kv_manager *m = kv_mgr_create(&p);
    assert_non_null(m);
    return m;
}

static void check_pool(kv_manager *m) {
    if (kv_pool_check(kv_mgr_pool(m)) != VC_OK) fail_msg("%s", vc_err_msg());
}

/* tokens[i] = base + i */
static kv_seq *seq_with(kv_manager *m, const kv_seq_params *sp, int32_t base, int32_t n) {
    kv_seq *s = kv_seq_create(m, sp);
    assert_non_null(s);
    int32_t *t = malloc(sizeof *t * (size_t)(n ? n : 1));
    for (int32_t i = 0; i < n; i++) t[i] = base + i;
    assert_int_equal(kv_seq_append_tokens(m, s, t, n), VC_OK);
    free(t);
    return s;
}

/* Admit like the scheduler: lookup, then allocate the rest of the prompt. */
static kv_hit admit(kv_manager *m, kv_seq *s) {
    kv_hit hit;
    kv_mgr_get_computed_blocks(m, s, &hit);
    int r = kv_mgr_allocate_slots(m, s, 0, kv_seq_num_tokens(s) - hit.num_tokens, &hit, 0);
    assert_int_equal(r, KV_ALLOC_OK);
    return hit;
}

static int32_t nblocks(const kv_seq *s) {
    int32_t n;
    kv_seq_block_ids(s, &n);
    return n;
}

/* A second request sharing a 1000-token prefix computes only its new
 * tokens beyond the last full shared block. */
static void test_shared_prefix_hit(void **st) {
    (void)st;
    const int32_t B = 16;
    kv_manager *m = mk(300, B, true);
    kv_seq *a = seq_with(m, NULL, 1000, 1000);
    kv_hit h = admit(m, a);
    assert_int_equal(h.num_tokens, 0);
    assert_int_equal(nblocks(a), 63);              /* ceil(1000 / 16) */
    assert_int_equal(kv_seq_num_cached_blocks(a), 62); /* full blocks only */

    kv_seq *b = seq_with(m, NULL, 1000, 1000);
    int32_t extra[100];
    for (int i = 0; i < 100; i++) extra[i] = 5000 + i;
    assert_int_equal(kv_seq_append_tokens(m, b, extra, 100), VC_OK);
    kv_mgr_get_computed_blocks(m, b, &h);
    assert_int_equal(h.num_blocks, 62);
    assert_int_equal(h.num_tokens, (1000 / B) * B); /* 992 */
    int32_t na;
    const int32_t *ta = kv_seq_block_ids(a, &na);
    assert_memory_equal(h.block_ids, ta, 62 * sizeof(int32_t));
    int32_t free_before = kv_mgr_num_free_blocks(m);
    /* B computes 1100 - 992 = 108 tokens: 7 new blocks (69 - 62). */
    assert_int_equal(kv_mgr_allocate_slots(m, b, 0, 1100 - h.num_tokens, &h, 0), KV_ALLOC_OK);
    assert_int_equal(nblocks(b), 69);
    assert_int_equal(kv_mgr_num_free_blocks(m), free_before - 7);
    for (int i = 0; i < 62; i++) assert_int_equal(kv_pool_ref_cnt(kv_mgr_pool(m), ta[i]), 2);
    assert_int_equal(kv_mgr_num_common_prefix_blocks(m, b), 62);

    kv_prefix_stats ps;
    kv_mgr_take_prefix_stats(m, &ps);
    assert_int_equal(ps.requests, 2);
    assert_int_equal(ps.queries, 2100);
    assert_int_equal(ps.hits, 992);
    assert_int_equal(ps.preempted_requests, 0);
    kv_mgr_take_prefix_stats(m, &ps);
    assert_int_equal(ps.requests + ps.queries + ps.hits, 0);
    check_pool(m);
    kv_seq_release(m, a);
    kv_seq_release(m, b);
    assert_int_equal(kv_mgr_num_free_blocks(m), 299);
    check_pool(m);
    kv_mgr_free(m);
}

/* A fully cached prompt still recomputes its last token; hits are whole
 * blocks, so its whole last block. */
static void test_last_token_recomputed(void **st) {
    (void)st;
    const int32_t B = 16;
    kv_manager *m = mk(200, B, true);
    kv_seq *a = seq_with(m, NULL, 7, 1008); /* 63 full blocks */
    admit(m, a);
    assert_int_equal(kv_seq_num_cached_blocks(a), 63);
    kv_mgr_free_blocks(m, a);

    kv_seq *b = seq_with(m, NULL, 7, 1008);
    kv_hit h = admit(m, b);
    assert_int_equal(h.num_blocks, 62);
    assert_int_equal(h.num_tokens, 992);
    assert_int_equal(nblocks(b), 63);
    /* b's last block is a fresh copy with the same hash: a duplicate. */
    assert_int_equal(kv_pool_num_cached(kv_mgr_pool(m)), 64);

    /* The same prompt minus 8 tokens: cap 999 -> still 62 blocks. */
    kv_seq *c = seq_with(m, NULL, 7, 1000);
    kv_mgr_get_computed_blocks(m, c, &h);
    assert_int_equal(h.num_tokens, 992);
    /* One block exactly: nothing can hit (cap 15 tokens). */
    kv_seq *d = seq_with(m, NULL, 7, 16);
    kv_mgr_get_computed_blocks(m, d, &h);
    assert_int_equal(h.num_blocks, 0);
    /* One block + 1 token: one block hits. */
    kv_seq *e = seq_with(m, NULL, 7, 17);
    kv_mgr_get_computed_blocks(m, e, &h);
    assert_int_equal(h.num_blocks, 1);
    kv_seq_release(m, a);
    kv_seq_release(m, b);
    kv_seq_release(m, c);
    kv_seq_release(m, d);
    kv_seq_release(m, e);
    check_pool(m);
    kv_mgr_free(m);
}

typedef struct {
    int32_t nq, q[64];
    int32_t ref[64];
    bool hashed[64];
    int32_t nfree;
} snap;

static void take(kv_manager *m, snap *s) {
    kv_block_pool *p = kv_mgr_pool(m);
    memset(s, 0, sizeof *s);
    s->nq = kv_pool_free_queue(p, s->q, 64);
    for (int32_t i = 0; i < kv_pool_num_blocks(p); i++) {
        s->ref[i] = kv_pool_ref_cnt(p, i);
        s->hashed[i] = kv_pool_block_hash(p, i, NULL);
    }
    s->nfree = kv_pool_num_free(p);
}

static void same(const snap *a, const snap *b) { assert_memory_equal(a, b, sizeof *a); }

static void test_alloc_failure_changes_nothing(void **st) {
    (void)st;
    const int32_t B = 4;
    kv_manager *m = mk(11, B, true); /* 10 usable */
    kv_seq *a = seq_with(m, NULL, 0, 16);
    admit(m, a);
    assert_int_equal(kv_seq_num_cached_blocks(a), 4);
    kv_mgr_free_blocks(m, a); /* 4 cached blocks now free, at the tail */
    assert_int_equal(kv_mgr_num_free_blocks(m), 10);

    /* 44 tokens sharing a's 16: hit 4 blocks, 11 needed = 7 new + 4 taken
     * from the free queue = 11 > 10. */
    kv_seq *c = seq_with(m, NULL, 0, 44);
    kv_hit h;
    kv_mgr_get_computed_blocks(m, c, &h);
    assert_int_equal(h.num_blocks, 4);
    snap s0, s1;
    take(m, &s0);
    assert_int_equal(kv_mgr_allocate_slots(m, c, 0, 44 - 16, &h, 0), KV_ALLOC_NO_SPACE);
    take(m, &s1);
    same(&s0, &s1);
    assert_int_equal(nblocks(c), 0);
    /* Bad arguments: negative status, nothing changed either. */
    assert_int_equal(kv_mgr_allocate_slots(m, c, 0, 0, &h, 0), VC_ERR_INVALID);
    assert_int_equal(kv_mgr_allocate_slots(m, c, 4, 1, NULL, 0), VC_ERR_INVALID); /* no blocks */
    kv_hit forged = h;
    forged.num_tokens = 3;
    assert_int_equal(kv_mgr_allocate_slots(m, c, 0, 8, &forged, 0), VC_ERR_INVALID);
    take(m, &s1);
    same(&s0, &s1);
    kv_seq_release(m, c);

    /* 40 tokens: 10 blocks = 6 new + 4 evictable hits = 10: fits exactly. */
    kv_seq *d = seq_with(m, NULL, 0, 40);
    h = admit(m, d);
    assert_int_equal(h.num_blocks, 4);
    assert_int_equal(kv_mgr_num_free_blocks(m), 0);
    /* A running sequence needing a block with none free: NO_SPACE. */
    int32_t t = 99;
    assert_int_equal(kv_seq_append_tokens(m, d, &t, 1), VC_OK);
    take(m, &s0);
    assert_int_equal(kv_mgr_allocate_slots(m, d, 40, 1, NULL, 0), KV_ALLOC_NO_SPACE);
    take(m, &s1);
    same(&s0, &s1);
    /* A hit for a sequence already holding blocks is refused. */
    kv_mgr_get_computed_blocks(m, d, &h);
    assert_true(h.num_blocks > 0);
    assert_int_equal(kv_mgr_allocate_slots(m, d, 40, 1, &h, 0), VC_ERR_INVALID);
    check_pool(m);
    kv_seq_release(m, a);
    kv_seq_release(m, d);
    kv_mgr_free(m);
}

static void test_freed_blocks_hit_until_evicted(void **st) {
    (void)st;
    const int32_t B = 16;
    kv_manager *m = mk(9, B, true); /* 8 usable */
    kv_seq *a = seq_with(m, NULL, 0, 33);
    admit(m, a); /* 3 blocks, 2 cached */
    int32_t na;
    int32_t ta[3];
    memcpy(ta, kv_seq_block_ids(a, &na), sizeof ta);
    kv_seq_release(m, a);
    /* Queue: the unhashed third block first, then the 5 never-used, then
     * the cached tail-first: second block, first block. */
    int32_t q[16];
    assert_int_equal(kv_pool_free_queue(kv_mgr_pool(m), q, 16), 8);
    assert_int_equal(q[0], ta[2]);
    assert_int_equal(q[6], ta[1]);
    assert_int_equal(q[7], ta[0]);

    kv_seq *b = seq_with(m, NULL, 0, 40);
    kv_hit h = admit(m, b);
    assert_int_equal(h.num_blocks, 2);
    assert_int_equal(h.block_ids[0], ta[0]);
    kv_seq_release(m, b);
    /* A long unrelated sequence takes all 8 blocks: every cached block is
     * evicted and loses its hash. */
    kv_seq *c = seq_with(m, NULL, 100000, 128);
    h = admit(m, c);
    assert_int_equal(h.num_blocks, 0);
    assert_int_equal(kv_mgr_num_free_blocks(m), 0);
    kv_block_hash hh;
    int32_t nc;
    const int32_t *tc = kv_seq_block_ids(c, &nc);
    for (int32_t i = 0; i < nc; i++) {
        assert_true(kv_pool_block_hash(kv_mgr_pool(m), tc[i], &hh)); /* c's own hash now */
        int32_t nhs;
        const kv_block_hash *hs = kv_seq_block_hashes(c, &nhs);
        assert_true(kv_hash_eq(&hh, &hs[i]));
    }
    kv_seq_release(m, c);
    kv_seq *d = seq_with(m, NULL, 0, 40);
    kv_mgr_get_computed_blocks(m, d, &h);
    assert_int_equal(h.num_blocks, 0);
    kv_seq_release(m, d);
    check_pool(m);
    kv_mgr_free(m);
}

/* A hit whose blocks were evicted by an allocation in between is refused
 * without touching anything. */
static void test_stale_hit_refused(void **st) {
    (void)st;
    kv_manager *m = mk(9, 4, true); /* 8 usable */
    kv_seq *a = seq_with(m, NULL, 0, 8);
    admit(m, a);
    kv_seq_release(m, a); /* 2 cached free blocks at the tail */
    kv_seq *x = seq_with(m, NULL, 0, 12);
    kv_hit h;
    kv_mgr_get_computed_blocks(m, x, &h);
    assert_int_equal(h.num_blocks, 2);
    kv_seq *y = seq_with(m, NULL, 900, 32);
    assert_int_equal(kv_mgr_allocate_slots(m, y, 0, 32, NULL, 0), KV_ALLOC_OK); /* takes all 8 */
    kv_mgr_free_blocks(m, y);
    snap s0, s1;
    take(m, &s0);
    assert_int_equal(kv_mgr_allocate_slots(m, x, 0, 4, &h, 0), VC_ERR_INVALID);
    assert_non_null(strstr(vc_err_msg(), "evicted"));
    take(m, &s1);
    same(&s0, &s1);
    assert_int_equal(nblocks(x), 0);
    kv_mgr_free(m);
}

static const int32_t TOKS[16] = {1, 2, 3, -1, 70000, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 151935};

static void test_salt_and_extra_keys(void **st) {
    (void)st;
    const int32_t B = 16;
    kv_manager *m = mk(64, B, true);
    /* The manager's key order (per-sequence keys, then the salt on block 0)
     * reproduces the serialisation goldens of test_kv_hash. */
    kv_extra_key lora = {KV_EXTRA_LORA, "my-lora", 7};
    kv_seq_params sp = {.cache_salt = "salt!", .cache_salt_len = 5, .extra_keys = &lora, .num_extra_keys = 1};
    kv_seq *g = kv_seq_create(m, &sp);
    int32_t t[32];
    memcpy(t, TOKS, sizeof TOKS);
    for (int i = 0; i < 16; i++) t[16 + i] = 100 + i;
    assert_int_equal(kv_seq_append_tokens(m, g, t, 32), VC_OK);
    int32_t n;
    const kv_block_hash *gh = kv_seq_block_hashes(g, &n);
    assert_int_equal(n, 2);
    char hex[65];
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", gh[0].b[i]);
    assert_string_equal(hex, "750c1b5bd87259cfffd474df927c8dbc9600f99457790c05eabab2019f8fb11a");
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", gh[1].b[i]);
    assert_string_equal(hex, "264f903c6d4dba9238a509dd12156377b9dbb2186ca05c2f1bb1c5d65fb6ce05");
    kv_seq_release(m, g);

    /* The salt enters block 0 only; block 1 differs through the chain. */
    kv_seq_params s1 = {.cache_salt = "s1", .cache_salt_len = 2};
    kv_seq_params s2 = {.cache_salt = "s2", .cache_salt_len = 2};
    kv_seq *a = seq_with(m, &s1, 0, 48);
    kv_seq *nos = seq_with(m, NULL, 0, 48);
    const kv_block_hash *ah = kv_seq_block_hashes(a, &n);
    const kv_block_hash *nh = kv_seq_block_hashes(nos, &n);
    assert_false(kv_hash_eq(&ah[0], &nh[0]));
    assert_false(kv_hash_eq(&ah[1], &nh[1]));
    kv_block_hash re;
    int32_t t1[16];
    for (int i = 0; i < 16; i++) t1[i] = 16 + i;
    kv_hash_block(KV_HASH_SHA256, &ah[0], t1, 16, NULL, 0, &re);
    assert_true(kv_hash_eq(&re, &ah[1]));
    kv_seq_release(m, nos);

    admit(m, a);
    kv_hit h;
    kv_seq *b = seq_with(m, &s2, 0, 48);
    kv_mgr_get_computed_blocks(m, b, &h);
    assert_int_equal(h.num_blocks, 0);
    kv_seq *c = seq_with(m, NULL, 0, 48);
    kv_mgr_get_computed_blocks(m, c, &h);
    assert_int_equal(h.num_blocks, 0);
    kv_seq *d = seq_with(m, &s1, 0, 48);
    kv_mgr_get_computed_blocks(m, d, &h);
    assert_int_equal(h.num_blocks, 2);
    kv_seq_release(m, a);
    kv_seq_release(m, b);
    kv_seq_release(m, c);
    kv_seq_release(m, d);
    check_pool(m);
    kv_mgr_free(m);
}

static void test_incremental_hashing(void **st) {
    (void)st;
    kv_manager *m = mk(8, 5, true);
    kv_seq *a = seq_with(m, NULL, 3, 123);
    kv_seq *b = kv_seq_create(m, NULL);
    int32_t t[123];
    for (int i = 0; i < 123; i++) t[i] = 3 + i;
    for (int32_t i = 0, k = 1; i < 123; k = k % 11 + 1) {
        int32_t n = k < 123 - i ? k : 123 - i;
        assert_int_equal(kv_seq_append_tokens(m, b, t + i, n), VC_OK);
        i += n;
    }
    int32_t na, nb;
    const kv_block_hash *ha = kv_seq_block_hashes(a, &na), *hb = kv_seq_block_hashes(b, &nb);
    assert_int_equal(na, 24);
    assert_int_equal(nb, 24);
    assert_memory_equal(ha, hb, sizeof *ha * 24);
    assert_int_equal(kv_seq_num_tokens(b), 123);
    assert_int_equal(kv_seq_append_tokens(m, b, NULL, 1), VC_ERR_INVALID);
    kv_seq_release(m, a);
    kv_seq_release(m, b);
    kv_mgr_free(m);
}

/* Decode: a block is cached once full AND its tokens are final (appended);
 * with async scheduling the append lags the allocation by a step. */
static void test_decode_caching_and_slots(void **st) {
    (void)st;
    const int32_t B = 4;
    kv_manager *m = mk(16, B, true);
    kv_seq *s = seq_with(m, NULL, 10, 6);
    admit(m, s);
    assert_int_equal(nblocks(s), 2);
    assert_int_equal(kv_seq_num_cached_blocks(s), 1);
    int32_t computed = 6;
    /* Synchronous: sample, append, then allocate the next step. */
    int32_t tok = 50;
    assert_int_equal(kv_seq_append_tokens(m, s, &tok, 1), VC_OK); /* 7 tokens */
    assert_int_equal(kv_mgr_allocate_slots(m, s, computed, 1, NULL, 0), KV_ALLOC_OK);
    computed++;
    assert_int_equal(kv_seq_num_cached_blocks(s), 1);
    tok++;
    assert_int_equal(kv_seq_append_tokens(m, s, &tok, 1), VC_OK); /* 8 tokens */
    assert_int_equal(kv_mgr_allocate_slots(m, s, computed, 1, NULL, 0), KV_ALLOC_OK);
    computed++;
    assert_int_equal(kv_seq_num_cached_blocks(s), 2);
    assert_int_equal(nblocks(s), 2);
    /* Async: allocate for token 9 before token 9 is known. */
    assert_int_equal(kv_mgr_allocate_slots(m, s, computed, 1, NULL, 0), KV_ALLOC_OK);
    computed++;
    assert_int_equal(nblocks(s), 3);
    for (int i = 0; i < 4; i++) { /* tokens 9..12 arrive a step late */
        tok++;
        assert_int_equal(kv_seq_append_tokens(m, s, &tok, 1), VC_OK);
        assert_int_equal(kv_mgr_allocate_slots(m, s, computed, 1, NULL, 0), KV_ALLOC_OK);
        computed++;
    }
    /* 12 tokens appended, 13 computed: block 2 was cached only once its
     * last token had arrived. */
    assert_int_equal(kv_seq_num_tokens(s), 12);
    assert_int_equal(kv_seq_num_cached_blocks(s), 3);
    assert_int_equal(nblocks(s), 4); /* slot for the 13th (in flight) */

    int32_t n;
    const int32_t *tb = kv_seq_block_ids(s, &n);
    int64_t slots[13];
    kv_slot_mapping(tb, n, B, 0, 13, slots);
    for (int32_t p = 0; p < 13; p++) assert_int_equal(slots[p], (int64_t)tb[p / B] * B + p % B);
    kv_seq_release(m, s);
    check_pool(m);
    kv_mgr_free(m);
}

static void test_slot_mapping(void **st) {
    (void)st;
    int32_t table[3] = {5, 2, 9};
    int64_t s[6];
    kv_slot_mapping(table, 3, 4, 3, 6, s);
    int64_t want[6] = {23, 8, 9, 10, 11, 36};
    assert_memory_equal(s, want, sizeof want);
    kv_slot_mapping(table, 3, 4, 12, 0, s); /* empty range at the end */
}

static void test_lookahead_and_max_model_len(void **st) {
    (void)st;
    const int32_t B = 4;
    kv_mgr_params p = kv_mgr_params_default();
    p.num_blocks = 32;
    p.block_size = B;
    p.max_model_len = 10;
    kv_manager *m = kv_mgr_create(&p);
    kv_seq *s = seq_with(m, NULL, 0, 8);
    kv_hit h;
    kv_mgr_get_computed_blocks(m, s, &h);
    /* 8 prompt tokens + 3 lookahead: 11 slots, capped at 10 -> 3 blocks. */
    assert_int_equal(kv_mgr_allocate_slots(m, s, 0, 8, &h, 3), KV_ALLOC_OK);
    assert_int_equal(nblocks(s), 3);
    assert_int_equal(kv_seq_num_cached_blocks(s), 2);
    kv_mgr_free(m); /* frees live sequences too */

    p.max_model_len = 0;
    m = kv_mgr_create(&p);
    s = seq_with(m, NULL, 0, 8);
    /* Lookahead slots are allocated but drafts are never cached. */
    assert_int_equal(kv_mgr_allocate_slots(m, s, 0, 8, NULL, 5), KV_ALLOC_OK);
    assert_int_equal(nblocks(s), 4);
    assert_int_equal(kv_seq_num_cached_blocks(s), 2);
    /* 4 new tokens including 3 unverified drafts: only appended ones cache. */
    int32_t t = 77;
    assert_int_equal(kv_seq_append_tokens(m, s, &t, 1), VC_OK);
    assert_int_equal(kv_mgr_allocate_slots(m, s, 8, 4, NULL, 0), KV_ALLOC_OK);
    assert_int_equal(kv_seq_num_cached_blocks(s), 2);
    kv_mgr_free(m);
}

static void test_preemption_and_readmission(void **st) {
    (void)st;
    const int32_t B = 4;
    kv_manager *m = mk(32, B, true);
    kv_seq *s = seq_with(m, NULL, 0, 40);
    admit(m, s);
    kv_mgr_free_blocks(m, s); /* preempted */
    assert_int_equal(nblocks(s), 0);
    assert_int_equal(kv_mgr_num_free_blocks(m), 31);
    kv_hit h = admit(m, s); /* readmitted: its own blocks still cached */
    assert_int_equal(h.num_blocks, 9);
    kv_prefix_stats ps;
    kv_mgr_take_prefix_stats(m, &ps);
    assert_int_equal(ps.requests, 1);
    assert_int_equal(ps.queries, 40);
    assert_int_equal(ps.hits, 0);
    assert_int_equal(ps.preempted_requests, 1);
    assert_int_equal(ps.preempted_queries, 40);
    assert_int_equal(ps.preempted_hits, 36);
    kv_seq_release(m, s);
    check_pool(m);
    kv_mgr_free(m);
}

static void test_caching_disabled(void **st) {
    (void)st;
    kv_manager *m = mk(16, 4, false);
    kv_seq *a = seq_with(m, NULL, 0, 20);
    int32_t n;
    kv_seq_block_hashes(a, &n);
    assert_int_equal(n, 0);
    admit(m, a);
    kv_seq_release(m, a);
    kv_seq *b = seq_with(m, NULL, 0, 20);
    kv_hit h = admit(m, b);
    assert_int_equal(h.num_blocks, 0);
    assert_int_equal(kv_pool_num_cached(kv_mgr_pool(m)), 0);
    kv_prefix_stats ps;
    kv_mgr_take_prefix_stats(m, &ps);
    assert_int_equal(ps.requests + ps.preempted_requests, 0);
    kv_seq_release(m, b);
    check_pool(m);
    kv_mgr_free(m);
}

static void test_skip_lookup_still_writes(void **st) {
    (void)st;
    kv_manager *m = mk(16, 4, true);
    kv_seq *a = seq_with(m, NULL, 0, 12);
    admit(m, a);
    kv_seq_params sk = {.skip_prefix_lookup = true};
    kv_seq *b = seq_with(m, &sk, 0, 16);
    kv_hit h = admit(m, b);
    assert_int_equal(h.num_blocks, 0);
    assert_int_equal(kv_seq_num_cached_blocks(b), 4);
    kv_seq *c = seq_with(m, NULL, 0, 17);
    kv_mgr_get_computed_blocks(m, c, &h);
    assert_int_equal(h.num_blocks, 4); /* three from a... and b's 4th */
    kv_prefix_stats ps;
    kv_mgr_take_prefix_stats(m, &ps);
    assert_int_equal(ps.requests, 2); /* b's lookup was not counted */
    kv_mgr_free(m);
}

static void test_common_prefix_and_reset(void **st) {
    (void)st;
    kv_manager *m = mk(32, 4, true);
    kv_seq *a = seq_with(m, NULL, 0, 14);
    admit(m, a);
    kv_seq *b = seq_with(m, NULL, 0, 20);
    admit(m, b);
    assert_int_equal(kv_mgr_num_common_prefix_blocks(m, a), 3);
    assert_int_equal(kv_mgr_num_common_prefix_blocks(m, b), 3);
    kv_seq *c = seq_with(m, NULL, 500, 8);
    admit(m, c);
    assert_int_equal(kv_mgr_num_common_prefix_blocks(m, a), 0);
    kv_mgr_free_blocks(m, c);
    assert_int_equal(kv_mgr_num_common_prefix_blocks(m, a), 3);
    assert_int_equal(kv_mgr_num_common_prefix_blocks(m, c), 0);

    assert_false(kv_mgr_reset_prefix_cache(m));
    kv_mgr_free_blocks(m, a);
    kv_mgr_free_blocks(m, b);
    assert_true(kv_mgr_reset_prefix_cache(m));
    kv_prefix_stats ps;
    kv_mgr_take_prefix_stats(m, &ps);
    assert_true(ps.reset);
    kv_hit h;
    kv_mgr_get_computed_blocks(m, b, &h);
    assert_int_equal(h.num_blocks, 0);
    check_pool(m);
    kv_mgr_free(m);
}

static void test_records_recycled_and_bad_params(void **st) {
    (void)st;
    kv_mgr_params p = kv_mgr_params_default();
    p.num_blocks = 8;
    p.block_size = 0;
    assert_null(kv_mgr_create(&p));
    assert_int_equal(vc_err_status(), VC_ERR_INVALID);
    p.block_size = 4;
    p.num_blocks = 1;
    assert_null(kv_mgr_create(&p));
    p.num_blocks = 8;
    kv_manager *m = kv_mgr_create(&p);
    kv_seq *a = seq_with(m, NULL, 0, 100);
    kv_seq_release(m, a);
    kv_seq *b = kv_seq_create(m, NULL);
    assert_ptr_equal(a, b); /* the record and its arrays are reused */
    int32_t n;
    kv_seq_block_hashes(b, &n);
    assert_int_equal(n, 0);
    assert_int_equal(kv_seq_num_tokens(b), 0);
    kv_extra_key bad = {KV_EXTRA_LORA, NULL, 3};
    kv_seq_params sp = {.extra_keys = &bad, .num_extra_keys = 1};
    assert_null(kv_seq_create(m, &sp));
    assert_int_equal(vc_err_status(), VC_ERR_INVALID);
    kv_mgr_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_prefix_hit),
        cmocka_unit_test(test_last_token_recomputed),
        cmocka_unit_test(test_alloc_failure_changes_nothing),
        cmocka_unit_test(test_freed_blocks_hit_until_evicted),
        cmocka_unit_test(test_stale_hit_refused),
        cmocka_unit_test(test_salt_and_extra_keys),
        cmocka_unit_test(test_incremental_hashing),
        cmocka_unit_test(test_decode_caching_and_slots),
        cmocka_unit_test(test_slot_mapping),
        cmocka_unit_test(test_lookahead_and_max_model_len),
        cmocka_unit_test(test_preemption_and_readmission),
        cmocka_unit_test(test_caching_disabled),
        cmocka_unit_test(test_skip_lookup_still_writes),
        cmocka_unit_test(test_common_prefix_and_reset),
        cmocka_unit_test(test_records_recycled_and_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
