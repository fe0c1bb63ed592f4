/* cpu_gemm_avx2 — chain-arithmetic matmul kernels for Q4_0, Q4_1, Q8_0,
 * Q4_K and Q6_K
 * (compiled with -mavx2 -mfma -mf16c; see "Chain" in cpu_internal.h).
 *
 * Two shapes, the same per-element arithmetic (so decode and prefill give
 * bit-identical rows, and both equal the scalar reference):
 *  - GEMV (gv_*): lanes = 8 weight rows. Per row the block's integer dot
 *    products are formed as 8 int32 partials (maddubs/madd), then one
 *    horizontal tree (reduce8) turns the 8 rows' partials into one vector
 *    of exact block sums, scaled and accumulated with one FMA per block.
 *  - GEMM tile (gm_*): lanes = 8 tokens (interleaved activations). The
 *    weights are unpacked once per task into panels of 4 rows (pk_*:
 *    values as bytes, scales ready for madd), and 4 bytes of each row are
 *    broadcast against a 32-byte step of 8 tokens (maddubs, int16 sums of
 *    16 products, one madd per 32 elements): a 4 x 8 tile does 1024
 *    multiply-adds per 32 elements of k with no horizontal adds.
 * Weights are unsigned in the products (Q4: 0..15, Q6_K: 0..63) and the
 * offsets (-8, -32) are applied through exact activation sums; Q4_1's
 * offset m adds (m*da)*sum(a) per block; Q8_0 (signed) multiplies |w| by
 * sign(a, w) and widens each step to int32 (two steps would overflow
 * int16). All five tiles have VNNI versions (cpu_gemm_avx512vnni.c).
 */
#include "backends/cpu/cpu_gemm_tile.h"

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef SUNROLL
#define SUNROLL _Pragma("GCC unroll 2")
#endif

/* lane r = sum of the 8 int32 of v[r] */
AI __m256i reduce8(const __m256i *v) {
    __m256i t0 = _mm256_hadd_epi32(v[0], v[1]), t1 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i t2 = _mm256_hadd_epi32(v[4], v[5]), t3 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20),
                            _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* 8 f16 scales, one per row, at byte offset `off` of row r's block b
 * (built in a register: 8 small stores + one wide load would stall on
 * store forwarding once per block) */
AI __m256 gather_f16(const char *w, size_t ws, size_t off) {
    uint16_t h[8];
    UNROLL
    for (int r = 0; r < 8; r++) memcpy(&h[r], w + r * ws + off, 2);
    __m128i v = _mm_setr_epi16((short)h[0], (short)h[1], (short)h[2], (short)h[3], (short)h[4],
                               (short)h[5], (short)h[6], (short)h[7]);
    return _mm256_cvtph_ps(v);
}




/* K-quant GEMV: the 8 rows are read one after the other in runs of GV_K
 * elements (576 bytes of Q4_K), block partials parked in L1. */
#define GV_K 1024


/* ---- Q4_0 --------------------------------------------------------------- */


/* lanes r of the low / high 128 bits = sum of int16 elements 0..7 / 8..15
 * of v[r]: a 3-level hadd tree, exact while every sum fits int16 (Q4 x Q8:
 * 8 maddubs outputs of |x| <= 3840 give |sum| <= 30720) */
AI __m256i reduce8_16(const __m256i *v) {
    __m256i t0 = _mm256_hadd_epi16(v[0], v[1]), t1 = _mm256_hadd_epi16(v[2], v[3]);
    __m256i t2 = _mm256_hadd_epi16(v[4], v[5]), t3 = _mm256_hadd_epi16(v[6], v[7]);
    __m256i u = _mm256_hadd_epi16(_mm256_hadd_epi16(t0, t1), _mm256_hadd_epi16(t2, t3));
    return _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(u)),
                            _mm256_cvtepi16_epi32(_mm256_extracti128_si256(u, 1)));
}

/* Q4_0 rows are read side by side, block by block (18-byte blocks: the
 * per-row runs below measured ~15% slower here). The 8 rows span one
 * contiguous stretch of 8*ws bytes; rows of 1-2 KiB are too short for the
 * hardware prefetcher (and it stops at every 4 KiB page), so the next 8
 * rows are prefetched linearly, 144 bytes per block step, while these are
 * computed. */
static void gv_q4_0(int64_t k, const void *wp, size_t ws, const void *actp, size_t as, int m,
                    float *y, size_t ys) {
    const char *w = wp, *act = actp;
    const int64_t nb = k / RT_QK;
    const __m256i m4 = _mm256_set1_epi8(0x0F), sh = _mm256_setr_epi64x(0, 0, 4, 4);
    const size_t pstep = (8 * ws + (size_t)nb - 1) / (size_t)nb; /* next tile bytes per block */
    for (int j = 0; j < m; j++) {
        const cpu_block_q8a *a = (const cpu_block_q8a *)(act + j * as);
        const char *pf = w + 8 * ws;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            if (j == 0) {
                for (size_t o = 0; o < pstep; o += 48) _mm_prefetch(pf + o, _MM_HINT_T0);
                pf += pstep;
            }
            __m256i av = _mm256_loadu_si256((const __m256i *)a[b].qs), p[8];
            UNROLL
            for (int r = 0; r < 8; r++) {
                const rt_block_q4_0 *wb = (const rt_block_q4_0 *)(w + r * ws) + b;
                __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)wb->qs));
                q = _mm256_and_si256(_mm256_srlv_epi64(q, sh), m4); /* elements 0..31 */
                p[r] = _mm256_maddubs_epi16(q, av);
            }
            __m256i isum = _mm256_sub_epi32(reduce8_16(p), _mm256_set1_epi32(8 * a[b].sum));
            __m256 d = _mm256_mul_ps(gather_f16(w, ws, (size_t)b * sizeof(rt_block_q4_0)),
                                     _mm256_set1_ps(a[b].d));
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc);
        }
        _mm256_storeu_ps(y + j * ys, acc);
    }
}

typedef struct { /* 4 rows x 32 elements, unpacked */
    uint8_t q[4][RT_QK];
    float d[4];
} panel_q4_0;

static void pk_q4_0(int64_t k, const void *wp, size_t ws, int nr, void *panel) {
    const char *w = wp;
    panel_q4_0 *o = panel;
    PK_PREFETCH_INIT(w, ws, nr, k / RT_QK);
    for (int64_t b = 0; b < k / RT_QK; b++, o++) {
        pf = prefetch_step(pf, pstep);
        for (int r = 0; r < nr; r++) {
            const rt_block_q4_0 *wb = (const rt_block_q4_0 *)(w + r * ws) + b;
            _mm256_storeu_si256((__m256i *)o->q[r], q4_unpack(wb->qs));
            o->d[r] = _cvtsh_ss(wb->d);
        }
    }
}

AI void gm_q4_0_r(int64_t k, const panel_q4_0 *pw, const cpu_block_q8a_x8 *a, int nt, float *y,
                  size_t ys, const int R) {
    __m256 acc[4];
    UNROLL
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    const int64_t nb = k / RT_QK;
    for (int64_t b = 0; b < nb; b++) {
        const cpu_block_q8a_x8 *ab = a + b;
        const panel_q4_0 *wb = pw + b;
        __m256i s16[4];
        UNROLL
        for (int r = 0; r < R; r++) s16[r] = _mm256_setzero_si256();
        SUNROLL
        for (int s = 0; s < 8; s++) {
            __m256i av = _mm256_loadu_si256((const __m256i *)(ab->qs + 32 * s));
            UNROLL
            for (int r = 0; r < R; r++)
                s16[r] = _mm256_add_epi16(s16[r], _mm256_maddubs_epi16(bcast_u32(wb->q[r] + 4 * s), av));
        }
        __m256i corr = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)ab->sum), 3);
        __m256 da = _mm256_loadu_ps(ab->d);
        UNROLL
        for (int r = 0; r < R; r++) {
            __m256i isum = _mm256_sub_epi32(_mm256_madd_epi16(s16[r], ones), corr);
            __m256 d = _mm256_mul_ps(_mm256_broadcast_ss(&wb->d[r]), da);
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc[r]);
        }
    }
    store_tile(acc, R, nt, y, ys);
}

#define DISPATCH_R(NAME)                                                                       \
    static void NAME(int64_t k, const void *pw, int nr, const void *a, int nt, float *y,       \
                     size_t ys) {                                                              \
        switch (nr) {                                                                          \
        case 1: NAME##_r(k, pw, a, nt, y, ys, 1); break;                                       \
        case 2: NAME##_r(k, pw, a, nt, y, ys, 2); break;                                       \
        case 3: NAME##_r(k, pw, a, nt, y, ys, 3); break;                                       \
        default: NAME##_r(k, pw, a, nt, y, ys, 4); break;                                      \
        }                                                                                      \
    }
DISPATCH_R(gm_q4_0)

/* ---- Q4_1 --------------------------------------------------------------- */

/* As Q4_0 (rows side by side, next tile prefetched), without the -8 and
 * with the offset m: acc += (d*da)*isum, then acc += (m*da)*sum(a). */
static void gv_q4_1(int64_t k, const void *wp, size_t ws, const void *actp, size_t as, int m,
                    float *y, size_t ys) {
    const char *w = wp, *act = actp;
    const int64_t nb = k / RT_QK;
    const __m256i m4 = _mm256_set1_epi8(0x0F), sh = _mm256_setr_epi64x(0, 0, 4, 4);
    const size_t pstep = (8 * ws + (size_t)nb - 1) / (size_t)nb;
    for (int j = 0; j < m; j++) {
        const cpu_block_q8a *a = (const cpu_block_q8a *)(act + j * as);
        const char *pf = w + 8 * ws;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            if (j == 0) {
                for (size_t o = 0; o < pstep; o += 48) _mm_prefetch(pf + o, _MM_HINT_T0);
                pf += pstep;
            }
            __m256i av = _mm256_loadu_si256((const __m256i *)a[b].qs), p[8];
            UNROLL
            for (int r = 0; r < 8; r++) {
                const rt_block_q4_1 *wb = (const rt_block_q4_1 *)(w + r * ws) + b;
                __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)wb->qs));
                q = _mm256_and_si256(_mm256_srlv_epi64(q, sh), m4);
                p[r] = _mm256_maddubs_epi16(q, av);
            }
            size_t off = (size_t)b * sizeof(rt_block_q4_1);
            __m256 da = _mm256_set1_ps(a[b].d);
            __m256 d = _mm256_mul_ps(gather_f16(w, ws, off), da);
            __m256 dm = _mm256_mul_ps(gather_f16(w, ws, off + 2), da);
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(reduce8_16(p)), acc);
            acc = _mm256_fmadd_ps(dm, _mm256_set1_ps((float)a[b].sum), acc);
        }
        _mm256_storeu_ps(y + j * ys, acc);
    }
}

typedef struct { /* 4 rows x 32 elements, unpacked */
    uint8_t q[4][RT_QK];
    float d[4], m[4];
} panel_q4_1;

static void pk_q4_1(int64_t k, const void *wp, size_t ws, int nr, void *panel) {
    const char *w = wp;
    panel_q4_1 *o = panel;
    PK_PREFETCH_INIT(w, ws, nr, k / RT_QK);
    for (int64_t b = 0; b < k / RT_QK; b++, o++) {
        pf = prefetch_step(pf, pstep);
        for (int r = 0; r < nr; r++) {
            const rt_block_q4_1 *wb = (const rt_block_q4_1 *)(w + r * ws) + b;
            _mm256_storeu_si256((__m256i *)o->q[r], q4_unpack(wb->qs));
            o->d[r] = _cvtsh_ss(wb->d);
            o->m[r] = _cvtsh_ss(wb->m);
        }
    }
}

AI void gm_q4_1_r(int64_t k, const panel_q4_1 *pw, const cpu_block_q8a_x8 *a, int nt, float *y,
                  size_t ys, const int R) {
    __m256 acc[4];
    UNROLL
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    const int64_t nb = k / RT_QK;
    for (int64_t b = 0; b < nb; b++) {
        const cpu_block_q8a_x8 *ab = a + b;
        const panel_q4_1 *wb = pw + b;
        __m256i s16[4];
        UNROLL
        for (int r = 0; r < R; r++) s16[r] = _mm256_setzero_si256();
        SUNROLL
        for (int s = 0; s < 8; s++) {
            __m256i av = _mm256_loadu_si256((const __m256i *)(ab->qs + 32 * s));
            UNROLL
            for (int r = 0; r < R; r++)
                s16[r] = _mm256_add_epi16(s16[r], _mm256_maddubs_epi16(bcast_u32(wb->q[r] + 4 * s), av));
        }
        __m256 da = _mm256_loadu_ps(ab->d);
        __m256 sa = _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)ab->sum));
        UNROLL
        for (int r = 0; r < R; r++) {
            __m256i isum = _mm256_madd_epi16(s16[r], ones);
            __m256 d = _mm256_mul_ps(_mm256_broadcast_ss(&wb->d[r]), da);
            __m256 dm = _mm256_mul_ps(_mm256_broadcast_ss(&wb->m[r]), da);
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc[r]);
            acc[r] = _mm256_fmadd_ps(dm, sa, acc[r]);
        }
    }
    store_tile(acc, R, nt, y, ys);
}
DISPATCH_R(gm_q4_1)

/* ---- Q8_0 --------------------------------------------------------------- */

/* Signed x signed: maddubs(|w|, sign(a, w)) pairs (|pair| <= 2*128*127 fits
 * int16, two do not), widened to int32 at once; then the int32 tree. */
static void gv_q8_0(int64_t k, const void *wp, size_t ws, const void *actp, size_t as, int m,
                    float *y, size_t ys) {
    const char *w = wp, *act = actp;
    const int64_t nb = k / RT_QK;
    const __m256i ones = _mm256_set1_epi16(1);
    const size_t pstep = (8 * ws + (size_t)nb - 1) / (size_t)nb;
    for (int j = 0; j < m; j++) {
        const cpu_block_q8a *a = (const cpu_block_q8a *)(act + j * as);
        const char *pf = w + 8 * ws;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            if (j == 0) {
                for (size_t o = 0; o < pstep; o += 48) _mm_prefetch(pf + o, _MM_HINT_T0);
                pf += pstep;
            }
            __m256i av = _mm256_loadu_si256((const __m256i *)a[b].qs), p[8];
            UNROLL
            for (int r = 0; r < 8; r++) {
                const rt_block_q8_0 *wb = (const rt_block_q8_0 *)(w + r * ws) + b;
                __m256i q = _mm256_loadu_si256((const __m256i *)wb->qs);
                p[r] = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(av, q)), ones);
            }
            __m256 d = _mm256_mul_ps(gather_f16(w, ws, (size_t)b * sizeof(rt_block_q8_0)),
                                     _mm256_set1_ps(a[b].d));
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(reduce8(p)), acc);
        }
        _mm256_storeu_ps(y + j * ys, acc);
    }
}

typedef struct { /* 4 rows x 32 elements: |w| and w (for the sign) */
    uint8_t u[4][RT_QK];
    int8_t q[4][RT_QK];
    float d[4];
} panel_q8_0;

static void pk_q8_0(int64_t k, const void *wp, size_t ws, int nr, void *panel) {
    const char *w = wp;
    panel_q8_0 *o = panel;
    PK_PREFETCH_INIT(w, ws, nr, k / RT_QK);
    for (int64_t b = 0; b < k / RT_QK; b++, o++) {
        pf = prefetch_step(pf, pstep);
        for (int r = 0; r < nr; r++) {
            const rt_block_q8_0 *wb = (const rt_block_q8_0 *)(w + r * ws) + b;
            __m256i q = _mm256_loadu_si256((const __m256i *)wb->qs);
            _mm256_storeu_si256((__m256i *)o->u[r], _mm256_sign_epi8(q, q));
            _mm256_storeu_si256((__m256i *)o->q[r], q);
            o->d[r] = _cvtsh_ss(wb->d);
        }
    }
}

AI void gm_q8_0_r(int64_t k, const panel_q8_0 *pw, const cpu_block_q8a_x8 *a, int nt, float *y,
                  size_t ys, const int R) {
    __m256 acc[4];
    UNROLL
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    const int64_t nb = k / RT_QK;
    for (int64_t b = 0; b < nb; b++) {
        const cpu_block_q8a_x8 *ab = a + b;
        const panel_q8_0 *wb = pw + b;
        __m256i s32[4];
        UNROLL
        for (int r = 0; r < R; r++) s32[r] = _mm256_setzero_si256();
        SUNROLL
        for (int s = 0; s < 8; s++) {
            __m256i av = _mm256_loadu_si256((const __m256i *)(ab->qs + 32 * s));
            UNROLL
            for (int r = 0; r < R; r++) {
                __m256i p = _mm256_maddubs_epi16(bcast_u32(wb->u[r] + 4 * s),
                                                 _mm256_sign_epi8(av, bcast_u32((const uint8_t *)wb->q[r] + 4 * s)));
                s32[r] = _mm256_add_epi32(s32[r], _mm256_madd_epi16(p, ones));
            }
        }
        __m256 da = _mm256_loadu_ps(ab->d);
        UNROLL
        for (int r = 0; r < R; r++) {
            __m256 d = _mm256_mul_ps(_mm256_broadcast_ss(&wb->d[r]), da);
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s32[r]), acc[r]);
        }
    }
    store_tile(acc, R, nt, y, ys);
}
DISPATCH_R(gm_q8_0)

/* ---- Q4_K --------------------------------------------------------------- */

/* scales (as int16 for madd) and mins of the 8 sub-blocks */
AI void q4k_scales(const uint8_t *scales, int16_t *sc, int32_t *mpair) {
    uint8_t s[8], m[8];
    UNROLL
    for (int j = 0; j < 8; j++) rt_q4k_scale_min(j, scales, &s[j], &m[j]);
    UNROLL
    for (int j = 0; j < 8; j++) sc[j] = s[j];
    UNROLL
    for (int p = 0; p < 4; p++) mpair[p] = (int32_t)((uint32_t)m[2 * p] | (uint32_t)m[2 * p + 1] << 16);
}

/* shuffle masks: int16 word j of each 128-bit half in all 8 words of it */
AI __m256i word_bcast_mask(int lo, int hi) {
    return _mm256_setr_epi8((char)(2 * lo), (char)(2 * lo + 1), (char)(2 * lo), (char)(2 * lo + 1),
                            (char)(2 * lo), (char)(2 * lo + 1), (char)(2 * lo), (char)(2 * lo + 1),
                            (char)(2 * lo), (char)(2 * lo + 1), (char)(2 * lo), (char)(2 * lo + 1),
                            (char)(2 * lo), (char)(2 * lo + 1), (char)(2 * lo), (char)(2 * lo + 1),
                            (char)(2 * hi), (char)(2 * hi + 1), (char)(2 * hi), (char)(2 * hi + 1),
                            (char)(2 * hi), (char)(2 * hi + 1), (char)(2 * hi), (char)(2 * hi + 1),
                            (char)(2 * hi), (char)(2 * hi + 1), (char)(2 * hi), (char)(2 * hi + 1),
                            (char)(2 * hi), (char)(2 * hi + 1), (char)(2 * hi), (char)(2 * hi + 1));
}

/* The K-quant GEMVs read each of the 8 rows in runs of GV_K elements and,
 * as they go, prefetch the next 8 rows (one contiguous stretch) linearly:
 * ws/nb bytes per row-block step, so it is all requested by the end. */
/* Q4_K scales and mins of the 8 sub-blocks (rt_q4k_scale_min for all at
 * once) in a register: bytes 0..7 scales, 8..15 mins. The 12 packed bytes
 * are at q; the 4 after them (inside the block) are read and ignored. */
AI __m128i q4k_unpack16_v(const uint8_t *q) {
    __m128i v = _mm_loadu_si128((const __m128i *)q);                 /* u0 u1 u2 . */
    __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));       /* u0 u2 u1 u2 */
    __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));       /* u0 u0 u1 u1 */
    __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                               _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    __m128i hi = _mm_and_si128(_mm_srli_epi32(b, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(lo, hi);
}

static void gv_q4_K(int64_t k, const void *wp, size_t ws, const void *actp, size_t as, int m,
                    float *y, size_t ys) {
    enum { KC = GV_K / RT_QK_K };
    const char *w = wp, *act = actp;
    const int64_t nb = k / RT_QK_K;
    const size_t pstep = (ws + (size_t)nb - 1) / (size_t)nb;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i P[KC][8];
    __m128i MP[KC][8];
    for (int j = 0; j < m; j++) {
        const rt_block_q8_K *a = (const rt_block_q8_K *)(act + j * as);
        const char *pf = w + 8 * ws;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b0 = 0; b0 < nb; b0 += KC) {
            int kc = (int)(nb - b0 < KC ? nb - b0 : KC);
            __m128i as16[KC]; /* 32-element sums of the activation as 8 int16 */
            for (int i = 0; i < kc; i++) {
                __m256i bs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[b0 + i].bsums),
                                               _mm256_set1_epi16(1));
                as16[i] = _mm_packs_epi32(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            }
            for (int r = 0; r < 8; r++) {
                const rt_block_q4_K *wb = (const rt_block_q4_K *)(w + r * ws) + b0;
                for (int i = 0; i < kc; i++) {
                    if (j == 0) pf = prefetch_step(pf, pstep);
                    __m128i s8 = q4k_unpack16_v(wb[i].scales); /* sc[0..7], mn[0..7] */
                    __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(s8));
                    MP[i][r] = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(s8, 8)), as16[i]);
                    const int8_t *aq0 = a[b0 + i].qs;
                    __m256i s = _mm256_setzero_si256();
                    UNROLL
                    for (int c = 0; c < 4; c++) {
                        __m256i q = _mm256_loadu_si256((const __m256i *)(wb[i].qs + 32 * c));
                        __m256i lo = _mm256_and_si256(q, m4);
                        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                        const int8_t *aq = aq0 + 64 * c;
                        __m256i p0 = _mm256_madd_epi16(
                            _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)aq)),
                            _mm256_shuffle_epi8(sc16, word_bcast_mask(2 * c, 2 * c)));
                        __m256i p1 = _mm256_madd_epi16(
                            _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(aq + 32))),
                            _mm256_shuffle_epi8(sc16, word_bcast_mask(2 * c + 1, 2 * c + 1)));
                        s = _mm256_add_epi32(s, _mm256_add_epi32(p0, p1));
                    }
                    P[i][r] = s;
                }
            }
            for (int i = 0; i < kc; i++) {
                int64_t b = b0 + i;
                const __m128i *mp = MP[i];
                /* lane r = sum of mp[r]'s 4 partials */
                __m128i h0 = _mm_hadd_epi32(_mm_hadd_epi32(mp[0], mp[1]), _mm_hadd_epi32(mp[2], mp[3]));
                __m128i h1 = _mm_hadd_epi32(_mm_hadd_epi32(mp[4], mp[5]), _mm_hadd_epi32(mp[6], mp[7]));
                __m256i msum = _mm256_set_m128i(h1, h0);
                size_t off = (size_t)b * sizeof(rt_block_q4_K);
                __m256 da = _mm256_set1_ps(a[b].d);
                __m256 d = _mm256_mul_ps(gather_f16(w, ws, off), da);
                __m256 dm = _mm256_mul_ps(gather_f16(w, ws, off + 2), da);
                acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(reduce8(P[i])), acc);
                acc = _mm256_fnmadd_ps(dm, _mm256_cvtepi32_ps(msum), acc);
            }
        }
        _mm256_storeu_ps(y + j * ys, acc);
    }
}

typedef struct { /* 4 rows x 256 elements, unpacked */
    uint8_t q[4][RT_QK_K];
    int32_t sc[4][8]; /* scale of sub-block j in both int16 halves */
    int32_t mp[4][4]; /* mins 2p, 2p+1 as an int16 pair */
    float d[4], dm[4];
} panel_q4_K;

static void pk_q4_K(int64_t k, const void *wp, size_t ws, int nr, void *panel) {
    const char *w = wp;
    panel_q4_K *o = panel;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < k / RT_QK_K; b++, o++)
        for (int r = 0; r < nr; r++) {
            const rt_block_q4_K *wb = (const rt_block_q4_K *)(w + r * ws) + b;
            for (int c = 0; c < 4; c++) {
                __m256i q = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * c));
                _mm256_storeu_si256((__m256i *)(o->q[r] + 64 * c), _mm256_and_si256(q, m4));
                _mm256_storeu_si256((__m256i *)(o->q[r] + 64 * c + 32),
                                    _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
            }
            int16_t sc[8];
            q4k_scales(wb->scales, sc, o->mp[r]);
            for (int j = 0; j < 8; j++) o->sc[r][j] = (int32_t)((uint32_t)sc[j] * 0x10001u);
            o->d[r] = _cvtsh_ss(wb->d);
            o->dm[r] = _cvtsh_ss(wb->dmin);
        }
}

AI void gm_q4_K_r(int64_t k, const panel_q4_K *pw, const cpu_block_q8k_x8 *a, int nt, float *y,
                  size_t ys, const int R) {
    __m256 acc[4];
    UNROLL
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const int64_t nb = k / RT_QK_K;
    for (int64_t b = 0; b < nb; b++) {
        const cpu_block_q8k_x8 *ab = a + b;
        const panel_q4_K *wb = pw + b;
        __m256i isum[4];
        UNROLL
        for (int r = 0; r < R; r++) isum[r] = _mm256_setzero_si256();
        for (int jb = 0; jb < 8; jb++) { /* sub-block of 32 = 8 steps */
            __m256i s16[4];
            UNROLL
            for (int r = 0; r < R; r++) s16[r] = _mm256_setzero_si256();
            SUNROLL
            for (int s = 0; s < 8; s++) {
                __m256i av = _mm256_loadu_si256((const __m256i *)(ab->qs + 32 * (8 * jb + s)));
                UNROLL
                for (int r = 0; r < R; r++)
                    s16[r] = _mm256_add_epi16(
                        s16[r], _mm256_maddubs_epi16(bcast_u32(wb->q[r] + 32 * jb + 4 * s), av));
            }
            UNROLL
            for (int r = 0; r < R; r++)
                isum[r] = _mm256_add_epi32(
                    isum[r], _mm256_madd_epi16(s16[r], _mm256_set1_epi32(wb->sc[r][jb])));
        }
        __m256 da = _mm256_loadu_ps(ab->d);
        UNROLL
        for (int r = 0; r < R; r++) {
            __m256i ms = _mm256_setzero_si256();
            UNROLL
            for (int p = 0; p < 4; p++)
                ms = _mm256_add_epi32(ms, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)ab->as[p]),
                                                            _mm256_set1_epi32(wb->mp[r][p])));
            __m256 d = _mm256_mul_ps(_mm256_broadcast_ss(&wb->d[r]), da);
            __m256 dm = _mm256_mul_ps(_mm256_broadcast_ss(&wb->dm[r]), da);
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum[r]), acc[r]);
            acc[r] = _mm256_fnmadd_ps(dm, _mm256_cvtepi32_ps(ms), acc[r]);
        }
    }
    store_tile(acc, R, nt, y, ys);
}
DISPATCH_R(gm_q4_K)

/* ---- Q6_K --------------------------------------------------------------- */


static void gv_q6_K(int64_t k, const void *wp, size_t ws, const void *actp, size_t as, int m,
                    float *y, size_t ys) {
    enum { KC = GV_K / RT_QK_K };
    const char *w = wp, *act = actp;
    const int64_t nb = k / RT_QK_K;
    const size_t pstep = (ws + (size_t)nb - 1) / (size_t)nb;
    _Alignas(32) uint8_t u[RT_QK_K];
    __m256i P[KC][8];
    for (int j = 0; j < m; j++) {
        const rt_block_q8_K *a = (const rt_block_q8_K *)(act + j * as);
        const char *pf = w + 8 * ws;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b0 = 0; b0 < nb; b0 += KC) {
            int kc = (int)(nb - b0 < KC ? nb - b0 : KC);
            for (int r = 0; r < 8; r++) {
                const rt_block_q6_K *wr = (const rt_block_q6_K *)(w + r * ws) + b0;
                for (int i = 0; i < kc; i++) {
                    if (j == 0) pf = prefetch_step(pf, pstep);
                    const rt_block_q6_K *wb = wr + i;
                    const rt_block_q8_K *ab = a + b0 + i;
                    q6k_unpack(wb, u);
                    /* the 16 group scales as int16: groups 0..7 / 8..15 in
                     * both halves; 32 elements c = groups 2c (low half of
                     * the products), 2c+1 (high half) */
                    __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wb->scales));
                    __m256i slo = _mm256_permute2x128_si256(sc16, sc16, 0x00);
                    __m256i shi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
                    __m256i s = _mm256_setzero_si256();
                    UNROLL
                    for (int c = 0; c < 8; c++) {
                        __m256i q = _mm256_load_si256((const __m256i *)(u + 32 * c));
                        __m256i av = _mm256_loadu_si256((const __m256i *)(ab->qs + 32 * c));
                        __m256i scv = _mm256_shuffle_epi8(c < 4 ? slo : shi,
                                                          word_bcast_mask(2 * (c & 3), 2 * (c & 3) + 1));
                        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(q, av), scv));
                    }
                    __m256i bsum = _mm256_loadu_si256((const __m256i *)ab->bsums);
                    P[i][r] = _mm256_sub_epi32(s, _mm256_slli_epi32(_mm256_madd_epi16(sc16, bsum), 5));
                }
            }
            for (int i = 0; i < kc; i++) {
                int64_t b = b0 + i;
                __m256 d = _mm256_mul_ps(
                    gather_f16(w, ws, (size_t)b * sizeof(rt_block_q6_K) + offsetof(rt_block_q6_K, d)),
                    _mm256_set1_ps(a[b].d));
                acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(reduce8(P[i])), acc);
            }
        }
        _mm256_storeu_ps(y + j * ys, acc);
    }
}

typedef struct { /* 4 rows x 256 elements, unpacked */
    uint8_t q[4][RT_QK_K];
    int32_t sc[4][16]; /* scale of group g in both int16 halves */
    int32_t scp[4][8]; /* scales 2p, 2p+1 as an int16 pair */
    float d[4];
} panel_q6_K;

static void pk_q6_K(int64_t k, const void *wp, size_t ws, int nr, void *panel) {
    const char *w = wp;
    panel_q6_K *o = panel;
    for (int64_t b = 0; b < k / RT_QK_K; b++, o++)
        for (int r = 0; r < nr; r++) {
            const rt_block_q6_K *wb = (const rt_block_q6_K *)(w + r * ws) + b;
            _Alignas(32) uint8_t u[RT_QK_K];
            q6k_unpack(wb, u);
            memcpy(o->q[r], u, RT_QK_K);
            for (int g = 0; g < 16; g++) o->sc[r][g] = (int32_t)((uint32_t)(uint16_t)wb->scales[g] * 0x10001u);
            for (int p = 0; p < 8; p++)
                o->scp[r][p] = (int32_t)((uint32_t)(uint16_t)wb->scales[2 * p] |
                                         (uint32_t)(uint16_t)wb->scales[2 * p + 1] << 16);
            o->d[r] = _cvtsh_ss(wb->d);
        }
}

AI void gm_q6_K_r(int64_t k, const panel_q6_K *pw, const cpu_block_q8k_x8 *a, int nt, float *y,
                  size_t ys, const int R) {
    __m256 acc[4];
    UNROLL
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const int64_t nb = k / RT_QK_K;
    for (int64_t b = 0; b < nb; b++) {
        const cpu_block_q8k_x8 *ab = a + b;
        const panel_q6_K *wb = pw + b;
        __m256i isum[4];
        UNROLL
        for (int r = 0; r < R; r++) isum[r] = _mm256_setzero_si256();
        SUNROLL
        for (int h = 0; h < 32; h++) { /* 8 elements = 2 steps; 2 halves per group of 16 */
            __m256i a0 = _mm256_loadu_si256((const __m256i *)(ab->qs + 64 * h));
            __m256i a1 = _mm256_loadu_si256((const __m256i *)(ab->qs + 64 * h + 32));
            UNROLL
            for (int r = 0; r < R; r++) {
                __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(bcast_u32(wb->q[r] + 8 * h), a0),
                                               _mm256_maddubs_epi16(bcast_u32(wb->q[r] + 8 * h + 4), a1));
                isum[r] = _mm256_add_epi32(isum[r],
                                           _mm256_madd_epi16(s16, _mm256_set1_epi32(wb->sc[r][h >> 1])));
            }
        }
        __m256 da = _mm256_loadu_ps(ab->d);
        UNROLL
        for (int r = 0; r < R; r++) {
            __m256i off = _mm256_setzero_si256();
            UNROLL
            for (int p = 0; p < 8; p++)
                off = _mm256_add_epi32(off, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)ab->bs[p]),
                                                              _mm256_set1_epi32(wb->scp[r][p])));
            __m256i is = _mm256_sub_epi32(isum[r], _mm256_slli_epi32(off, 5));
            __m256 d = _mm256_mul_ps(_mm256_broadcast_ss(&wb->d[r]), da);
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(is), acc[r]);
        }
    }
    store_tile(acc, R, nt, y, ys);
}
DISPATCH_R(gm_q6_K)

void cpu_fill_gemm_avx2(cpu_kernels *k) {
    /* per-row kernels of the chain types: the scalar reference (tail rows) */
    k->mm[RT_Q4_0] = cpu_mm_q4_0_ref;
    k->mm[RT_Q4_1] = cpu_mm_q4_1_ref;
    k->mm[RT_Q8_0] = cpu_mm_q8_0_ref;
    k->mm[RT_Q4_K] = cpu_mm_q4_K_ref;
    k->mm[RT_Q6_K] = cpu_mm_q6_K_ref;
    k->gv[RT_Q4_0] = gv_q4_0;
    k->gv[RT_Q4_1] = gv_q4_1;
    k->gv[RT_Q8_0] = gv_q8_0;
    k->gv[RT_Q4_K] = gv_q4_K;
    k->gv[RT_Q6_K] = gv_q6_K;
    k->gm[RT_Q4_0] = gm_q4_0;
    k->gm[RT_Q4_1] = gm_q4_1;
    k->gm[RT_Q8_0] = gm_q8_0;
    k->gm[RT_Q4_K] = gm_q4_K;
    k->gm[RT_Q6_K] = gm_q6_K;
    k->pk[RT_Q4_0] = pk_q4_0;
    k->pk[RT_Q4_1] = pk_q4_1;
    k->pk[RT_Q8_0] = pk_q8_0;
    k->pk[RT_Q4_K] = pk_q4_K;
    k->pk[RT_Q6_K] = pk_q6_K;
    /* padded-tile break-even vs the GEMV (kernel lab, 2 threads: Q4_0
     * [2048,2048], Q4_1 [1536,576], Q8_0 [49152,576], K-quants [2048,2048];
     * the Q8_0 tile pays the sign trick every step) */
    k->gm_min[RT_Q4_0] = 4;
    k->gm_min[RT_Q4_1] = 4;
    k->gm_min[RT_Q8_0] = 7;
    k->gm_min[RT_Q4_K] = 7;
    k->gm_min[RT_Q6_K] = 7;
    k->pk_bytes[RT_Q4_0] = sizeof(panel_q4_0) * (RT_QK_K / RT_QK);
    k->pk_bytes[RT_Q4_1] = sizeof(panel_q4_1) * (RT_QK_K / RT_QK);
    k->pk_bytes[RT_Q8_0] = sizeof(panel_q8_0) * (RT_QK_K / RT_QK);
    k->pk_bytes[RT_Q4_K] = sizeof(panel_q4_K);
    k->pk_bytes[RT_Q6_K] = sizeof(panel_q6_K);
}
