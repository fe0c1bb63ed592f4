/* kv_sha256 — SHA-256 (FIPS 180-4), the default block hash of the prefix
 * cache (vLLM's default is sha256 too).
 *
 * Streaming use:
 *   kv_sha256_ctx c; kv_sha256_init(&c);
 *   kv_sha256_update(&c, p, n); ...            any number of pieces
 *   uint8_t d[KV_SHA256_BYTES]; kv_sha256_final(&c, d);   big-endian digest
 * One shot: kv_sha256(p, n, d).
 *
 * Portable C, no allocation, no table beyond the 64 round constants. Speed
 * is not critical here: a 16-token block is ~100 bytes, two compressions.
 */
#ifndef KV_SHA256_H
#define KV_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define KV_SHA256_BYTES 32

typedef struct {
    uint32_t h[8];     /* chaining state */
    uint64_t nbytes;   /* message length so far */
    uint8_t buf[64];   /* partial input block */
    uint32_t nbuf;     /* bytes used in buf, < 64 */
} kv_sha256_ctx;

void kv_sha256_init(kv_sha256_ctx *c);
void kv_sha256_update(kv_sha256_ctx *c, const void *data, size_t n);
/* Writes the 32-byte digest; `c` must be re-initialised before reuse. */
void kv_sha256_final(kv_sha256_ctx *c, uint8_t out[KV_SHA256_BYTES]);
void kv_sha256(const void *data, size_t n, uint8_t out[KV_SHA256_BYTES]);

#endif
