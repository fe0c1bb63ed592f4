/* cpu_gemm_tile — what the GEMM tile files share (cpu_gemm_avx2.c,
 * cpu_gemm_avx512vnni.c; include only from files compiled with AVX2 or
 * more): the 4-byte broadcast of a weight row, the tile store, the linear
 * prefetch of the next panel while one is unpacked, and the unpacking of
 * Q4 nibbles and Q6_K values to bytes. */
#ifndef CPU_GEMM_TILE_H
#define CPU_GEMM_TILE_H

#include "backends/cpu/cpu_internal.h"

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 32")

AI __m256i bcast_u32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* tile result acc[r] (lanes = tokens) -> y[t*ys + r], tokens t < nt */
AI void store_tile(const __m256 *acc, int R, int nt, float *y, size_t ys) {
    float tmp[4][8];
    UNROLL
    for (int r = 0; r < R; r++) _mm256_storeu_ps(tmp[r], acc[r]);
    for (int t = 0; t < nt; t++)
        UNROLL
        for (int r = 0; r < R; r++) y[t * ys + r] = tmp[r][t];
}

/* prefetch `bytes` from p (one line per 48 bytes: no line skipped) */
AI const char *prefetch_step(const char *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 48) _mm_prefetch(p + o, _MM_HINT_T0);
    return p + bytes;
}

/* Panel unpacking prefetches the next nr rows (the next panel, one
 * contiguous stretch), a slice per block (pf = prefetch_step(pf, pstep)):
 * batched decode unpacks each panel for one token group only, and short
 * row runs read side by side are not followed by the hardware prefetcher
 * (kernel lab, Q8_0 [49152,576] x 8 tokens streamed from DRAM, one thread:
 * 2.7 ms with it, 3.1 without, 3.3 four panels ahead). */
#define PK_PREFETCH_INIT(w, ws, nr, nb)                                                        \
    const size_t pstep = ((size_t)(nr) * (ws) + (size_t)(nb) - 1) / (size_t)(nb);            \
    const char *pf = (const char *)(w) + (size_t)(nr) * (ws)

AI __m256i q4_unpack(const uint8_t *qs) { /* elements 0..31 as bytes 0..15 */
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* the 256 values (0..63) of a Q6_K block in element order */
AI void q6k_unpack(const rt_block_q6_K *wb, uint8_t *u) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    UNROLL
    for (int h = 0; h < 2; h++) {
        __m256i l0 = _mm256_loadu_si256((const __m256i *)(wb->ql + 64 * h));
        __m256i l1 = _mm256_loadu_si256((const __m256i *)(wb->ql + 64 * h + 32));
        __m256i hb = _mm256_loadu_si256((const __m256i *)(wb->qh + 32 * h));
        UNROLL
        for (int c = 0; c < 4; c++) {
            __m256i lq = c & 1 ? l1 : l0;
            if (c >= 2) lq = _mm256_srli_epi16(lq, 4);
            __m256i q = _mm256_or_si256(
                _mm256_and_si256(lq, m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), m2), 4));
            _mm256_storeu_si256((__m256i *)(u + 128 * h + 32 * c), q);
        }
    }
}

#endif
