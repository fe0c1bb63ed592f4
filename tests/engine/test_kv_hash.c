/* Block hashing: the documented byte serialisation (goldens computed with
 * Python's hashlib from the layout in kv_hash.h), chaining, extra keys and
 * the fast64 mode. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "engine/kv_hash.h"

static void to_hex(const kv_block_hash *h, char *out) {
    for (int i = 0; i < KV_HASH_BYTES; i++) sprintf(out + 2 * i, "%02x", h->b[i]);
}

static void assert_hex(const kv_block_hash *h, const char *want) {
    char s[65];
    to_hex(h, s);
    assert_string_equal(s, want);
}

static const int32_t TOKS[16] = {1, 2, 3, -1, 70000, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 151935};

static void test_serialisation_goldens(void **st) {
    (void)st;
    kv_block_hash none, seeded, h0, h1, h0n;
    kv_hash_none(KV_HASH_SHA256, NULL, 0, &none);
    assert_hex(&none, "ab34441252f94a1f0ce0c9b9406dabdc0642d6de5c6a18b84186886202bb1e1f");
    kv_hash_none(KV_HASH_SHA256, "seed42", 6, &seeded);
    assert_hex(&seeded, "0554d9cbb731d38bfcba597a644833037055d195798acc1f5f7414286b3af474");

    kv_hash_block(KV_HASH_SHA256, &none, TOKS, 16, NULL, 0, &h0n);
    assert_hex(&h0n, "a9ca298deb12a0e6f54855d626d166c6424874f6361c77ef3406c005e7286fb9");

    kv_extra_key ex[2] = {{KV_EXTRA_LORA, "my-lora", 7}, {KV_EXTRA_CACHE_SALT, "salt!", 5}};
    kv_hash_block(KV_HASH_SHA256, &none, TOKS, 16, ex, 2, &h0);
    assert_hex(&h0, "750c1b5bd87259cfffd474df927c8dbc9600f99457790c05eabab2019f8fb11a");
    int32_t t1[16];
    for (int i = 0; i < 16; i++) t1[i] = 100 + i;
    kv_hash_block(KV_HASH_SHA256, &h0, t1, 16, ex, 1, &h1);
    assert_hex(&h1, "264f903c6d4dba9238a509dd12156377b9dbb2186ca05c2f1bb1c5d65fb6ce05");
}

static void test_chain_and_keys(void **st) {
    (void)st;
    for (int mode = 0; mode < 2; mode++) {
        kv_hash_mode md = (kv_hash_mode)mode;
        kv_block_hash none, other, a, b, c;
        kv_hash_none(md, NULL, 0, &none);
        kv_hash_none(md, "x", 1, &other);
        assert_false(kv_hash_eq(&none, &other));
        /* Same tokens, different parent: different hash. */
        kv_hash_block(md, &none, TOKS, 16, NULL, 0, &a);
        kv_hash_block(md, &other, TOKS, 16, NULL, 0, &b);
        assert_false(kv_hash_eq(&a, &b));
        /* Deterministic. */
        kv_hash_block(md, &none, TOKS, 16, NULL, 0, &c);
        assert_true(kv_hash_eq(&a, &c));
        /* One token changed. */
        int32_t t[16];
        memcpy(t, TOKS, sizeof t);
        t[15] ^= 1;
        kv_hash_block(md, &none, t, 16, NULL, 0, &b);
        assert_false(kv_hash_eq(&a, &b));
        /* Length is part of the key: 15 tokens + a 0 is not 16 tokens. */
        int32_t z[16] = {0};
        kv_hash_block(md, &none, z, 15, NULL, 0, &b);
        kv_hash_block(md, &none, z, 16, NULL, 0, &c);
        assert_false(kv_hash_eq(&b, &c));
        /* Kinds are tagged: a salt "x" is not a LoRA "x"; no key != empty key. */
        kv_extra_key s = {KV_EXTRA_CACHE_SALT, "x", 1}, l = {KV_EXTRA_LORA, "x", 1},
                     e = {KV_EXTRA_OPAQUE, NULL, 0};
        kv_hash_block(md, &none, TOKS, 16, &s, 1, &b);
        kv_hash_block(md, &none, TOKS, 16, &l, 1, &c);
        assert_false(kv_hash_eq(&b, &c));
        assert_false(kv_hash_eq(&a, &b));
        kv_hash_block(md, &none, TOKS, 16, &e, 1, &c);
        assert_false(kv_hash_eq(&a, &c));
        /* Key boundaries: ("ab","c") != ("a","bc"). */
        kv_extra_key p1[2] = {{KV_EXTRA_OPAQUE, "ab", 2}, {KV_EXTRA_OPAQUE, "c", 1}};
        kv_extra_key p2[2] = {{KV_EXTRA_OPAQUE, "a", 1}, {KV_EXTRA_OPAQUE, "bc", 2}};
        kv_hash_block(md, &none, TOKS, 16, p1, 2, &b);
        kv_hash_block(md, &none, TOKS, 16, p2, 2, &c);
        assert_false(kv_hash_eq(&b, &c));
    }
}

static void test_fast64_layout_and_spread(void **st) {
    (void)st;
    kv_block_hash none, h;
    kv_hash_none(KV_HASH_FAST64, NULL, 0, &none);
    kv_hash_block(KV_HASH_FAST64, &none, TOKS, 16, NULL, 0, &h);
    for (int i = 8; i < 32; i++) assert_int_equal(h.b[i], 0);
    /* 20000 blocks differing in one token each: no two 64-bit keys equal,
     * and the map key's low bits are spread (each of 256 buckets used). */
    enum { N = 20000 };
    static uint64_t keys[N];
    int bucket[256] = {0};
    int32_t t[16] = {0};
    for (int i = 0; i < N; i++) {
        t[i % 16] = i;
        kv_hash_block(KV_HASH_FAST64, &none, t, 16, NULL, 0, &h);
        keys[i] = kv_hash_key64(&h);
        bucket[keys[i] >> 56]++;
        t[i % 16] = 0;
    }
    for (int b = 0; b < 256; b++) assert_true(bucket[b] > 20);
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < i + 64 && j < N; j++) assert_true(keys[i] != keys[j]);
}

static void test_mode_parse(void **st) {
    (void)st;
    kv_hash_mode m;
    assert_int_equal(kv_hash_mode_parse("sha256", &m), VC_OK);
    assert_int_equal(m, KV_HASH_SHA256);
    assert_int_equal(kv_hash_mode_parse("fast64", &m), VC_OK);
    assert_int_equal(m, KV_HASH_FAST64);
    assert_int_equal(kv_hash_mode_parse("md5", &m), VC_ERR_INVALID);
    assert_non_null(strstr(vc_err_msg(), "md5"));
    assert_int_equal(kv_hash_mode_parse(NULL, &m), VC_ERR_INVALID);
    assert_string_equal(kv_hash_mode_name(KV_HASH_FAST64), "fast64");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serialisation_goldens),
        cmocka_unit_test(test_chain_and_keys),
        cmocka_unit_test(test_fast64_layout_and_spread),
        cmocka_unit_test(test_mode_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
