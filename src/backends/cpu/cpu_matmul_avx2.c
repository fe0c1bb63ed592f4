/* cpu_matmul_avx2 — AVX2/FMA/F16C matmul micro-kernels and activation
 * quantizers (compiled with -mavx2 -mfma -mf16c; called only when
 * cpu_isa_detect() reports AVX2).
 *
 * Each kernel is written for M = 1..4 activation rows sharing one pass over
 * the weight row (the weight block is loaded/unpacked once per M rows);
 * every row keeps its own accumulators, so results are independent of M.
 * Integer dot products of signed int8 use the usual sign trick:
 * maddubs(|w|, sign(a, w)) == w*a pairwise, then madd to int32.
 */
#include "backends/cpu/cpu_internal.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AI __m256 load_f16x8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

AI __m256 load_bf16x8(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* ---- float weights ----------------------------------------------------- */

#define FLOAT_KERNEL(NAME, WTYPE, LOAD8, SCALAR)                                                 \
    AI void NAME##_m(int64_t k, const WTYPE *w, const char *act, size_t as, float *y, size_t ys, \
                     const int M) {                                                             \
        __m256 acc[CPU_MM_M][2];                                                                \
        _Pragma("GCC unroll 8")                                                                 \
        for (int j = 0; j < M; j++) acc[j][0] = acc[j][1] = _mm256_setzero_ps();                \
        int64_t i = 0;                                                                          \
        for (; i + 16 <= k; i += 16) {                                                          \
            __m256 w0 = LOAD8(w + i), w1 = LOAD8(w + i + 8);                                    \
            _Pragma("GCC unroll 8")                                                             \
            for (int j = 0; j < M; j++) {                                                       \
                const float *x = (const float *)(act + j * as);                                 \
                acc[j][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), acc[j][0]);             \
                acc[j][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), acc[j][1]);         \
            }                                                                                   \
        }                                                                                       \
        _Pragma("GCC unroll 8")                                                                 \
        for (int j = 0; j < M; j++) {                                                           \
            const float *x = (const float *)(act + j * as);                                     \
            float s = hsum8(_mm256_add_ps(acc[j][0], acc[j][1]));                               \
            for (int64_t t = i; t < k; t++) s += SCALAR(w[t]) * x[t];                           \
            y[j * ys] = s;                                                                      \
        }                                                                                       \
    }                                                                                           \
    static void NAME(int64_t k, const void *w, const void *act, size_t as, int m, float *y,    \
                     size_t ys) {                                                               \
        switch (m) {                                                                            \
        case 1: NAME##_m(k, w, act, as, y, ys, 1); break;                                       \
        case 2: NAME##_m(k, w, act, as, y, ys, 2); break;                                       \
        case 3: NAME##_m(k, w, act, as, y, ys, 3); break;                                       \
        default: NAME##_m(k, w, act, as, y, ys, 4); break;                                      \
        }                                                                                       \
    }

#define ID(x) (x)
FLOAT_KERNEL(mm_f32, float, _mm256_loadu_ps, ID)
FLOAT_KERNEL(mm_f16, uint16_t, load_f16x8, rt_f16_to_f32)
FLOAT_KERNEL(mm_bf16, uint16_t, load_bf16x8, rt_bf16_to_f32)

/* Prefill: 2 weight rows x up to 4 tokens, one 8-wide FMA chain per
 * (row, token): 8 independent chains hide the FMA latency and each loaded
 * vector feeds 2 (x) or 4 (w) FMAs. */
#define FLOAT_PREFILL_KERNEL(NAME, WTYPE, LOAD8, SCALAR)                                         \
    AI void NAME##_rm(int64_t k, const char *w, size_t wst, const char *act, size_t as, float *y,  \
                      size_t ys, const int R, const int M) {                                     \
        __m256 acc[2][CPU_MM_M];                                                                 \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                                      \
            _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) acc[r][j] = _mm256_setzero_ps(); \
        int64_t i = 0;                                                                           \
        for (; i + 8 <= k; i += 8) {                                                             \
            __m256 wv[2];                                                                        \
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                                  \
                wv[r] = LOAD8((const WTYPE *)(w + r * wst) + i);                                 \
            _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) {                                \
                __m256 xv = _mm256_loadu_ps((const float *)(act + j * as) + i);                  \
                _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                              \
                    acc[r][j] = _mm256_fmadd_ps(wv[r], xv, acc[r][j]);                           \
            }                                                                                    \
        }                                                                                        \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                    \
            const WTYPE *wr = (const WTYPE *)(w + r * wst);                                      \
            _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) {                                \
                const float *x = (const float *)(act + j * as);                                  \
                float s = hsum8(acc[r][j]);                                                      \
                for (int64_t t = i; t < k; t++) s += SCALAR(wr[t]) * x[t];                       \
                y[j * ys + r] = s;                                                               \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
    static void NAME(int64_t k, const void *w, size_t wst, int nr, const void *act, size_t as,  \
                     int m, float *y, size_t ys) {                                               \
        if (nr == 2) {                                                                           \
            switch (m) {                                                                         \
            case 1: NAME##_rm(k, w, wst, act, as, y, ys, 2, 1); break;                           \
            case 2: NAME##_rm(k, w, wst, act, as, y, ys, 2, 2); break;                           \
            case 3: NAME##_rm(k, w, wst, act, as, y, ys, 2, 3); break;                           \
            default: NAME##_rm(k, w, wst, act, as, y, ys, 2, 4); break;                          \
            }                                                                                    \
        } else {                                                                                 \
            switch (m) {                                                                         \
            case 1: NAME##_rm(k, w, wst, act, as, y, ys, 1, 1); break;                           \
            case 2: NAME##_rm(k, w, wst, act, as, y, ys, 1, 2); break;                           \
            case 3: NAME##_rm(k, w, wst, act, as, y, ys, 1, 3); break;                           \
            default: NAME##_rm(k, w, wst, act, as, y, ys, 1, 4); break;                          \
            }                                                                                    \
        }                                                                                        \
    }

FLOAT_PREFILL_KERNEL(mmp_f32, float, _mm256_loadu_ps, ID)
FLOAT_PREFILL_KERNEL(mmp_f16, uint16_t, load_f16x8, rt_f16_to_f32)
FLOAT_PREFILL_KERNEL(mmp_bf16, uint16_t, load_bf16x8, rt_bf16_to_f32)

/* (Q4_0, Q4_1, Q8_0 with Q8a activations: cpu_gemm_avx2.c) */

#define DISPATCH_M(NAME)                                                                        \
    static void NAME(int64_t k, const void *w, const void *act, size_t as, int m, float *y,    \
                     size_t ys) {                                                               \
        switch (m) {                                                                            \
        case 1: NAME##_m(k, w, act, as, y, ys, 1); break;                                       \
        case 2: NAME##_m(k, w, act, as, y, ys, 2); break;                                       \
        case 3: NAME##_m(k, w, act, as, y, ys, 3); break;                                       \
        default: NAME##_m(k, w, act, as, y, ys, 4); break;                                      \
        }                                                                                       \
    }

/* ---- K-quants with Q8_K activations ------------------------------------ */

/* sum over 8 sub-blocks of m_j * (bsums[2j] + bsums[2j+1]) */
AI int kq_min_sum(const uint8_t *mins, const int16_t *bsums) {
    int s = 0;
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 8; j++) s += mins[j] * (bsums[2 * j] + bsums[2 * j + 1]);
    return s;
}

AI void kq_unpack(const uint8_t *scales, uint8_t *sc, uint8_t *mn) {
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 8; j++) rt_q4k_scale_min(j, scales, &sc[j], &mn[j]);
}

/* Q5_K walks the super-block chunk by chunk and feeds each unpacked chunk
 * to all M tokens before the next one (few live registers, no spills at
 * M = 4); per token the integer sums accumulate in chunk order, as in the
 * M = 1 case. (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K: cpu_gemm_avx2.c.) */
AI void mm_q5_K_m(int64_t k, const rt_block_q5_K *w, const char *act, size_t as, float *y,
                  size_t ys, const int M) {
    __m256 acc[CPU_MM_M];
    float accm[CPU_MM_M];
    _Pragma("GCC unroll 8")
    for (int j = 0; j < M; j++) {
        acc[j] = _mm256_setzero_ps();
        accm[j] = 0.0f;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    for (int64_t b = 0; b < k / RT_QK_K; b++) {
        uint8_t sc[8], mn[8];
        kq_unpack(w[b].scales, sc, mn);
        float dw = _cvtsh_ss(w[b].d), dmw = _cvtsh_ss(w[b].dmin);
        __m256i qh = _mm256_loadu_si256((const __m256i *)w[b].qh);
        __m256i sumi[CPU_MM_M];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < M; j++) sumi[j] = _mm256_setzero_si256();
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * c));
            __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one);
            __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(h0, 4));
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                         _mm256_slli_epi16(h1, 4));
            __m256i s0 = _mm256_set1_epi16(sc[2 * c]), s1 = _mm256_set1_epi16(sc[2 * c + 1]);
            _Pragma("GCC unroll 8")
            for (int j = 0; j < M; j++) {
                const int8_t *aq = ((const rt_block_q8_K *)(act + j * as) + b)->qs + 64 * c;
                __m256i p0 = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)aq)), s0);
                __m256i p1 = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(aq + 32))), s1);
                sumi[j] = _mm256_add_epi32(sumi[j], _mm256_add_epi32(p0, p1));
            }
        }
        _Pragma("GCC unroll 8")
        for (int j = 0; j < M; j++) {
            const rt_block_q8_K *a = (const rt_block_q8_K *)(act + j * as) + b;
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a->d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
            accm[j] += dmw * a->d * (float)kq_min_sum(mn, a->bsums);
        }
    }
    _Pragma("GCC unroll 8")
    for (int j = 0; j < M; j++) y[j * ys] = hsum8(acc[j]) - accm[j];
}
DISPATCH_M(mm_q5_K)
/* ---- activation quantizers (bit-identical to the scalar ones) ----------- */

static void quant_q8a(const float *x, cpu_block_q8a *y, int64_t k) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < k / RT_QK; b++, x += RT_QK) {
        __m256 v[4], mx = _mm256_setzero_ps();
        _Pragma("GCC unroll 8")
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 8 * i);
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[i]));
        }
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        float amax = _mm_cvtss_f32(m);
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        __m256 idv = _mm256_set1_ps(id);
        __m256i i32[4];
        _Pragma("GCC unroll 8")
        for (int i = 0; i < 4; i++) i32[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], idv));
        __m256i s = _mm256_add_epi32(_mm256_add_epi32(i32[0], i32[1]), _mm256_add_epi32(i32[2], i32[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_hadd_epi32(s4, s4);
        s4 = _mm_hadd_epi32(s4, s4);
        __m256i p16a = _mm256_packs_epi32(i32[0], i32[1]), p16b = _mm256_packs_epi32(i32[2], i32[3]);
        __m256i p8 = _mm256_packs_epi16(p16a, p16b);
        /* undo the in-lane interleave of the packs */
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)y[b].qs, p8);
        y[b].d = d;
        y[b].sum = _mm_cvtsi128_si32(s4);
        y[b].s = d * (float)y[b].sum;
    }
}

static void quant_q8k(const float *x, rt_block_q8_K *y, int64_t k) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < k / RT_QK_K; b++, x += RT_QK_K) {
        __m256 mx = _mm256_setzero_ps();
        for (int i = 0; i < RT_QK_K; i += 8)
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        float amax = _mm_cvtss_f32(m);
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float max = 0.0f; /* the first element of largest magnitude, with its sign */
        for (int i = 0; i < RT_QK_K; i++)
            if (fabsf(x[i]) == amax) {
                max = x[i];
                break;
            }
        float iscale = -127.0f / max;
        __m256 is = _mm256_set1_ps(iscale);
        for (int i = 0; i < RT_QK_K; i += 32) {
            __m256i i32[4];
            _Pragma("GCC unroll 8")
            for (int t = 0; t < 4; t++)
                i32[t] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * t), is));
            __m256i p8 = _mm256_packs_epi16(_mm256_packs_epi32(i32[0], i32[1]),
                                            _mm256_packs_epi32(i32[2], i32[3]));
            p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            p8 = _mm256_min_epi8(p8, _mm256_set1_epi8(127));
            _mm256_storeu_si256((__m256i *)(y[b].qs + i), p8);
        }
        for (int g = 0; g < RT_QK_K / 16; g++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(y[b].qs + 16 * g));
            __m256i w16 = _mm256_cvtepi8_epi16(v);
            __m256i s = _mm256_madd_epi16(w16, _mm256_set1_epi16(1));
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_hadd_epi32(s4, s4);
            s4 = _mm_hadd_epi32(s4, s4);
            y[b].bsums[g] = (int16_t)_mm_cvtsi128_si32(s4);
        }
        y[b].d = 1.0f / iscale;
    }
}

void cpu_fill_matmul_avx2(cpu_kernels *k) {
    k->mm[RT_F32] = mm_f32;
    k->mm[RT_F16] = mm_f16;
    k->mm[RT_BF16] = mm_bf16;
    k->mmp[RT_F32] = mmp_f32;
    k->mmp[RT_F16] = mmp_f16;
    k->mmp[RT_BF16] = mmp_bf16;
    k->mmp_rows = 2;
    k->mm[RT_Q5_K] = mm_q5_K;
    k->quant_q8a = quant_q8a;
    k->quant_q8k = quant_q8k;
}
