/* SHA-256 against the FIPS 180-4 / NIST example vectors, padding boundaries
 * (goldens from Python's hashlib) and streaming in arbitrary pieces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv_sha256.h"

static void hex(const uint8_t *d, char *out) {
    for (int i = 0; i < KV_SHA256_BYTES; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static void check(const void *msg, size_t n, const char *want) {
    uint8_t d[KV_SHA256_BYTES];
    char h[65];
    kv_sha256(msg, n, d);
    hex(d, h);
    assert_string_equal(h, want);
}

static void test_nist_vectors(void **st) {
    (void)st;
    check("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check(m448, strlen(m448), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 =
        "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsm"
        "nopqrstnopqrstu";
    check(m896, strlen(m896), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

static void test_million_a(void **st) {
    (void)st;
    /* One million 'a', fed in uneven pieces. */
    char chunk[1000];
    memset(chunk, 'a', sizeof chunk);
    kv_sha256_ctx c;
    kv_sha256_init(&c);
    size_t left = 1000000, k = 0;
    while (left) {
        size_t n = 1 + (k++ * 37) % 999;
        if (n > left) n = left;
        kv_sha256_update(&c, chunk, n);
        left -= n;
    }
    uint8_t d[32];
    char h[65];
    kv_sha256_final(&c, d);
    hex(d, h);
    assert_string_equal(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* Lengths around the 55/56/64-byte padding edges; goldens from hashlib on
 * the message byte[i] = (7*i + 3) & 0xff. */
static void test_padding_boundaries(void **st) {
    (void)st;
    static const struct {
        size_t n;
        const char *h;
    } g[] = {
        {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
        {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
        {57, "35df609437dcfea3279283ab79fd554e2bf78f8f7ae2de532d8ee300b09e8f73"},
        {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
        {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
        {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
        {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
        {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
        {200, "2c7e18c942ef065b526a2d4e5546283749cd3ddfb51d8fc71f42717363685f46"},
    };
    uint8_t m[200];
    for (int i = 0; i < 200; i++) m[i] = (uint8_t)((i * 7 + 3) & 0xff);
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) check(m, g[i].n, g[i].h);
}

/* Streaming in any split equals one shot. */
static void test_streaming_splits(void **st) {
    (void)st;
    uint8_t m[300];
    for (int i = 0; i < 300; i++) m[i] = (uint8_t)(i * 131 + 17);
    for (size_t n = 0; n <= 300; n += 7) {
        uint8_t a[32], b[32];
        kv_sha256(m, n, a);
        for (size_t split = 0; split <= n; split += 13) {
            kv_sha256_ctx c;
            kv_sha256_init(&c);
            kv_sha256_update(&c, m, split);
            for (size_t i = split; i < n; i++) kv_sha256_update(&c, m + i, 1);
            kv_sha256_final(&c, b);
            assert_memory_equal(a, b, 32);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nist_vectors),
        cmocka_unit_test(test_million_a),
        cmocka_unit_test(test_padding_boundaries),
        cmocka_unit_test(test_streaming_splits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
