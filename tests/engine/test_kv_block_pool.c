/* Block pool: the null block, LRU order of the free queue, hash map with
 * duplicates and colliding map keys, touch, reset, and invariants after
 * random sequences of operations (kv_pool_check plus the test's own
 * accounting). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/kv_block_pool.h"

static kv_block_hash mk_hash(uint64_t key, uint64_t tail) {
    kv_block_hash h;
    memset(&h, 0, sizeof h);
    for (int i = 0; i < 8; i++) h.b[i] = (uint8_t)(key >> (8 * i));
    for (int i = 0; i < 8; i++) h.b[8 + i] = (uint8_t)(tail >> (8 * i));
    h.b[31] = 0x5a;
    return h;
}

static void check_ok(const kv_block_pool *p) {
    int rc = kv_pool_check(p);
    if (rc != VC_OK) fail_msg("%s", vc_err_msg());
}

static void test_create_and_null_block(void **st) {
    (void)st;
    assert_null(kv_pool_create(1, true));
    assert_int_equal(vc_err_status(), VC_ERR_INVALID);
    kv_block_pool *p = kv_pool_create(9, true);
    assert_non_null(p);
    assert_int_equal(kv_pool_num_blocks(p), 9);
    assert_int_equal(kv_pool_num_free(p), 8);
    assert_true(kv_pool_usage(p) == 0.0);
    int32_t q[16];
    assert_int_equal(kv_pool_free_queue(p, q, 16), 8);
    for (int i = 0; i < 8; i++) assert_int_equal(q[i], i + 1); /* in id order, 0 absent */
    int32_t ids[8];
    kv_pool_get_new_blocks(p, 8, ids);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(ids[i], i + 1);
        assert_int_equal(kv_pool_ref_cnt(p, ids[i]), 1);
    }
    assert_int_equal(kv_pool_num_free(p), 0);
    assert_true(kv_pool_usage(p) == 1.0);
    check_ok(p);
    /* The null block is ignored by touch and free. */
    int32_t z = KV_NULL_BLOCK;
    kv_pool_touch(p, &z, 1);
    kv_pool_free_blocks(p, &z, 1, false);
    assert_int_equal(kv_pool_num_free(p), 0);
    kv_pool_free_blocks(p, ids, 8, false);
    assert_int_equal(kv_pool_num_free(p), 8);
    check_ok(p);
    kv_pool_free(p);
}

/* Freed blocks without a hash go to the head (reused first), with a hash to
 * the tail (kept longest), each group in the order given; allocation pops
 * the head and evicts the hash. */
static void test_lru_order_and_eviction(void **st) {
    (void)st;
    kv_block_pool *p = kv_pool_create(11, true); /* usable 1..10 */
    int32_t a[4], b[3];
    kv_pool_get_new_blocks(p, 4, a); /* 1 2 3 4 */
    kv_pool_get_new_blocks(p, 3, b); /* 5 6 7 */
    kv_block_hash h[4] = {mk_hash(11, 0), mk_hash(12, 0), mk_hash(13, 0), mk_hash(14, 0)};
    kv_pool_cache_full_blocks(p, a, h, 0, 3); /* 1 2 3 cached, 4 not */
    assert_int_equal(kv_pool_num_cached(p), 3);
    assert_int_equal(kv_pool_lookup(p, &h[1]), 2);
    assert_int_equal(kv_pool_lookup(p, &h[3]), -1);
    /* A sequence frees its table in reverse: 4 (no hash) to the head, then
     * 3 2 1 to the tail. */
    kv_pool_free_blocks(p, a, 4, true);
    int32_t q[16];
    int32_t n = kv_pool_free_queue(p, q, 16);
    int32_t want[] = {4, 8, 9, 10, 3, 2, 1};
    assert_int_equal(n, 7);
    assert_memory_equal(q, want, sizeof want);
    /* Freed cached blocks still hit. */
    assert_int_equal(kv_pool_lookup(p, &h[0]), 1);
    check_ok(p);
    /* Fresh blocks freed in order 5 6 7 land at the head as 5 6 7. */
    kv_pool_free_blocks(p, b, 3, false);
    n = kv_pool_free_queue(p, q, 16);
    int32_t want2[] = {5, 6, 7, 4, 8, 9, 10, 3, 2, 1};
    assert_int_equal(n, 10);
    assert_memory_equal(q, want2, sizeof want2);
    /* Take 8 blocks: the cached ones survive... */
    int32_t c[10];
    kv_pool_get_new_blocks(p, 8, c);
    assert_int_equal(c[7], 3); /* the 8th pops 3, the LRU cached block */
    assert_int_equal(kv_pool_lookup(p, &h[2]), -1);
    assert_false(kv_pool_block_hash(p, 3, NULL));
    assert_int_equal(kv_pool_lookup(p, &h[1]), 2);
    assert_int_equal(kv_pool_num_cached(p), 2);
    /* ...until allocation reaches them: 2 then 1 (tail block of the chain
     * goes first). */
    kv_pool_get_new_blocks(p, 1, c + 8);
    assert_int_equal(c[8], 2);
    assert_int_equal(kv_pool_lookup(p, &h[0]), 1);
    kv_pool_get_new_blocks(p, 1, c + 9);
    assert_int_equal(c[9], 1);
    assert_int_equal(kv_pool_num_cached(p), 0);
    check_ok(p);
    kv_pool_free(p);
}

static void test_touch(void **st) {
    (void)st;
    kv_block_pool *p = kv_pool_create(6, true);
    int32_t a[3];
    kv_pool_get_new_blocks(p, 3, a);
    kv_block_hash h[3] = {mk_hash(1, 1), mk_hash(2, 2), mk_hash(3, 3)};
    kv_pool_cache_full_blocks(p, a, h, 0, 3);
    kv_pool_touch(p, a, 2); /* a second user while in use */
    assert_int_equal(kv_pool_ref_cnt(p, a[0]), 2);
    kv_pool_free_blocks(p, a, 3, true);
    assert_int_equal(kv_pool_ref_cnt(p, a[0]), 1);
    assert_true(kv_pool_is_free(p, a[2]));
    assert_false(kv_pool_is_free(p, a[0]));
    assert_int_equal(kv_pool_num_free(p), 3);
    /* A hit on a free cached block takes it out of the queue. */
    kv_pool_touch(p, &a[2], 1);
    assert_false(kv_pool_is_free(p, a[2]));
    assert_int_equal(kv_pool_ref_cnt(p, a[2]), 1);
    assert_int_equal(kv_pool_num_free(p), 2);
    check_ok(p);
    kv_pool_free(p);
}

/* Duplicates: several blocks under one hash, lookups return the oldest;
 * distinct hashes sharing the 8-byte map key stay apart. */
static void test_duplicates_and_key_collisions(void **st) {
    (void)st;
    kv_block_pool *p = kv_pool_create(8, true);
    int32_t a[7];
    kv_pool_get_new_blocks(p, 7, a);
    kv_block_hash same = mk_hash(77, 1), twin = mk_hash(77, 2), other = mk_hash(78, 1);
    kv_block_hash hs[7] = {same, twin, same, other, same, twin, other};
    kv_pool_cache_full_blocks(p, a, hs, 0, 7);
    assert_int_equal(kv_pool_num_cached(p), 7);
    assert_int_equal(kv_pool_lookup(p, &same), a[0]);
    assert_int_equal(kv_pool_lookup(p, &twin), a[1]);
    assert_int_equal(kv_pool_lookup(p, &other), a[3]);
    check_ok(p);
    assert_true(kv_pool_evict_block(p, a[0]));
    assert_false(kv_pool_evict_block(p, a[0]));
    assert_int_equal(kv_pool_lookup(p, &same), a[2]);
    assert_true(kv_pool_evict_block(p, a[4])); /* from the chain's end */
    assert_int_equal(kv_pool_lookup(p, &same), a[2]);
    assert_true(kv_pool_evict_block(p, a[2]));
    assert_int_equal(kv_pool_lookup(p, &same), -1);
    assert_int_equal(kv_pool_lookup(p, &twin), a[1]);
    check_ok(p);
    kv_pool_free_blocks(p, a, 7, false);
    check_ok(p);
    kv_pool_free(p);
}

static void test_reset_prefix_cache(void **st) {
    (void)st;
    kv_block_pool *p = kv_pool_create(5, true);
    int32_t a[2];
    kv_pool_get_new_blocks(p, 2, a);
    kv_block_hash h[2] = {mk_hash(5, 5), mk_hash(6, 6)};
    kv_pool_cache_full_blocks(p, a, h, 0, 2);
    assert_false(kv_pool_reset_prefix_cache(p)); /* blocks in use */
    assert_int_equal(kv_pool_lookup(p, &h[0]), a[0]);
    kv_pool_free_blocks(p, a, 2, true);
    assert_true(kv_pool_reset_prefix_cache(p));
    assert_int_equal(kv_pool_lookup(p, &h[0]), -1);
    assert_int_equal(kv_pool_num_cached(p), 0);
    assert_int_equal(kv_pool_num_free(p), 4);
    check_ok(p);
    kv_pool_free(p);
}

/* Random operations on a pool with a small map-key space (to force probe
 * runs and backward-shift deletions), checked against the test's own
 * record of who holds what. */
static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

enum { NB = 97, MAXH = 8 };

static void test_random_invariants(void **st) {
    (void)st;
    kv_block_pool *p = kv_pool_create(NB, true);
    /* holders: up to 12 owners, each with a list of blocks it holds once. */
    int32_t own[12][NB];
    int32_t nown[12] = {0};
    int32_t refs[NB] = {0};
    for (int step = 0; step < 20000; step++) {
        int o = (int)rnd(12);
        uint32_t op = rnd(10);
        if (op < 4) { /* allocate */
            int32_t k = (int32_t)rnd(6);
            if (k > kv_pool_num_free(p)) k = kv_pool_num_free(p);
            if (nown[o] + k > NB) k = 0;
            int32_t *dst = own[o] + nown[o];
            kv_pool_get_new_blocks(p, k, dst);
            for (int32_t i = 0; i < k; i++) {
                assert_true(dst[i] > 0 && dst[i] < NB);
                assert_int_equal(refs[dst[i]], 0);
                refs[dst[i]] = 1;
                assert_false(kv_pool_block_hash(p, dst[i], NULL));
            }
            nown[o] += k;
        } else if (op < 6 && nown[o] > 0) { /* cache some of the owner's blocks */
            kv_block_hash hs[NB];
            for (int32_t i = 0; i < nown[o]; i++) {
                if (!kv_pool_block_hash(p, own[o][i], &hs[i]))
                    hs[i] = mk_hash(rnd(MAXH), rnd(3)); /* colliding keys, few values */
            }
            int32_t from = (int32_t)rnd((uint32_t)nown[o]);
            kv_pool_cache_full_blocks(p, own[o], hs, from, nown[o]);
        } else if (op < 8 && nown[o] > 0) { /* free all, either order */
            kv_pool_free_blocks(p, own[o], nown[o], rnd(2));
            for (int32_t i = 0; i < nown[o]; i++) refs[own[o][i]]--;
            nown[o] = 0;
        } else if (op < 9) { /* hit: another owner shares a cached block */
            kv_block_hash h = mk_hash(rnd(MAXH), rnd(3));
            int32_t id = kv_pool_lookup(p, &h);
            if (id > 0 && nown[o] < NB) {
                bool mine = false;
                for (int32_t i = 0; i < nown[o]; i++) mine |= own[o][i] == id;
                if (!mine) {
                    kv_block_hash got;
                    assert_true(kv_pool_block_hash(p, id, &got) && kv_hash_eq(&got, &h));
                    kv_pool_touch(p, &id, 1);
                    own[o][nown[o]++] = id;
                    refs[id]++;
                }
            }
        } else if (rnd(50) == 0) {
            bool all_free = kv_pool_num_free(p) == NB - 1;
            assert_int_equal(kv_pool_reset_prefix_cache(p), all_free);
        }
        int32_t used = 0;
        for (int32_t id = 1; id < NB; id++) {
            assert_int_equal(kv_pool_ref_cnt(p, id), refs[id]);
            assert_int_equal(kv_pool_is_free(p, id), refs[id] == 0);
            used += refs[id] > 0;
        }
        assert_int_equal(kv_pool_num_free(p) + used, NB - 1);
        if (step % 16 == 0) check_ok(p);
    }
    check_ok(p);
    kv_pool_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_and_null_block),
        cmocka_unit_test(test_lru_order_and_eviction),
        cmocka_unit_test(test_touch),
        cmocka_unit_test(test_duplicates_and_key_collisions),
        cmocka_unit_test(test_reset_prefix_cache),
        cmocka_unit_test(test_random_invariants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
