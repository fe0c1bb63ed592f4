/* Block hash serialisation (see kv_hash.h) over two hash functions behind
 * one small streaming interface. */
#include "engine/kv_hash.h"

#include "base/err.h"
#include "engine/kv_sha256.h"

#include <string.h>

static const char NONE_TAG[] = "vllm.c/kv/none-hash/v1";

/* ---- FAST64: word-at-a-time multiply/rotate mix, murmur-style finaliser. */

#define F64_P1 0x9e3779b97f4a7c15ull
#define F64_P2 0xbf58476d1ce4e5b9ull
#define F64_P3 0x94d049bb133111ebull

typedef struct {
    uint64_t h;
    uint64_t total;
    uint8_t buf[8];
    uint32_t nbuf;
} fast64_ctx;

static inline uint64_t rotl64(uint64_t x, unsigned r) { return (x << r) | (x >> (64 - r)); }

static inline void f64_word(fast64_ctx *c, uint64_t w) {
    c->h ^= w * F64_P1;
    c->h = rotl64(c->h, 29) * F64_P2 + F64_P3;
}

static inline uint64_t load_le64(const uint8_t *p) {
    uint64_t w = 0;
    for (int i = 7; i >= 0; i--) w = (w << 8) | p[i];
    return w;
}

static void f64_update(fast64_ctx *c, const uint8_t *p, size_t n) {
    c->total += n;
    while (n && c->nbuf) { /* top up a partial word */
        c->buf[c->nbuf++] = *p++;
        n--;
        if (c->nbuf == 8) {
            f64_word(c, load_le64(c->buf));
            c->nbuf = 0;
        }
    }
    for (; n >= 8; p += 8, n -= 8) f64_word(c, load_le64(p));
    for (; n; n--) c->buf[c->nbuf++] = *p++;
}

static uint64_t f64_final(fast64_ctx *c) {
    if (c->nbuf) { /* zero-padded last word; the length below disambiguates */
        memset(c->buf + c->nbuf, 0, 8 - c->nbuf);
        f64_word(c, load_le64(c->buf));
    }
    uint64_t x = c->h ^ (c->total * F64_P3);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* ---- one streaming interface over both modes */

typedef struct {
    kv_hash_mode mode;
    union {
        kv_sha256_ctx sha;
        fast64_ctx f64;
    } u;
} hasher;

static void h_init(hasher *h, kv_hash_mode mode) {
    h->mode = mode;
    if (mode == KV_HASH_SHA256) {
        kv_sha256_init(&h->u.sha);
    } else {
        memset(&h->u.f64, 0, sizeof h->u.f64);
        h->u.f64.h = F64_P2;
    }
}

static void h_update(hasher *h, const void *p, size_t n) {
    if (h->mode == KV_HASH_SHA256)
        kv_sha256_update(&h->u.sha, p, n);
    else
        f64_update(&h->u.f64, p, n);
}

static void h_u32(hasher *h, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    h_update(h, b, 4);
}

static void h_final(hasher *h, kv_block_hash *out) {
    if (h->mode == KV_HASH_SHA256) {
        kv_sha256_final(&h->u.sha, out->b);
    } else {
        uint64_t x = f64_final(&h->u.f64);
        memset(out->b, 0, sizeof out->b);
        for (int i = 0; i < 8; i++) out->b[i] = (uint8_t)(x >> (8 * i));
    }
}

int kv_hash_mode_parse(const char *s, kv_hash_mode *out) {
    if (s && strcmp(s, "sha256") == 0) {
        *out = KV_HASH_SHA256;
        return VC_OK;
    }
    if (s && strcmp(s, "fast64") == 0) {
        *out = KV_HASH_FAST64;
        return VC_OK;
    }
    return vc_err_set(VC_ERR_INVALID, "unknown prefix-cache hash '%s' (expected sha256 or fast64)",
                      s ? s : "(null)");
}

const char *kv_hash_mode_name(kv_hash_mode m) { return m == KV_HASH_SHA256 ? "sha256" : "fast64"; }

void kv_hash_none(kv_hash_mode mode, const void *seed, size_t seed_len, kv_block_hash *out) {
    hasher h;
    h_init(&h, mode);
    h_update(&h, NONE_TAG, sizeof NONE_TAG - 1);
    if (seed_len) h_update(&h, seed, seed_len);
    h_final(&h, out);
}

void kv_hash_block(kv_hash_mode mode, const kv_block_hash *parent, const int32_t *tokens, int32_t n,
                   const kv_extra_key *extras, int32_t n_extras, kv_block_hash *out) {
    VC_ASSERT(n >= 0 && n_extras >= 0 && (n_extras == 0 || extras));
    hasher h;
    h_init(&h, mode);
    h_update(&h, parent->b, KV_HASH_BYTES);
    h_u32(&h, (uint32_t)n);
    /* Tokens go through a small staging buffer as little-endian u32 so the
     * bytes do not depend on the host's endianness. */
    uint8_t buf[256];
    int32_t i = 0;
    while (i < n) {
        int32_t m = n - i < 64 ? n - i : 64;
        for (int32_t j = 0; j < m; j++) {
            uint32_t v = (uint32_t)tokens[i + j];
            buf[4 * j + 0] = (uint8_t)v;
            buf[4 * j + 1] = (uint8_t)(v >> 8);
            buf[4 * j + 2] = (uint8_t)(v >> 16);
            buf[4 * j + 3] = (uint8_t)(v >> 24);
        }
        h_update(&h, buf, (size_t)m * 4);
        i += m;
    }
    h_u32(&h, (uint32_t)n_extras);
    for (int32_t e = 0; e < n_extras; e++) {
        h_u32(&h, extras[e].kind);
        h_u32(&h, extras[e].len);
        if (extras[e].len) h_update(&h, extras[e].data, extras[e].len);
    }
    h_final(&h, out);
}
