/* cpu_matmul_avx512 — AVX-512 (F/BW/VL/DQ) decode kernels for float
 * weights: 32 elements per step in two zmm accumulators per activation row
 * (same M-independence contract as the AVX2 file).
 *
 * Quantized weights keep the AVX2 kernels: measured on a Xeon (bench/kernels
 * README), packing two Q4_0/Q8_0 blocks per zmm (permute to element order,
 * per-half scale blend, masked negate for the missing vpsignb) ran 10-30%
 * slower than the 256-bit code; the K-quants are bound by unpacking, not
 * vector width. AVX512-VNNI (vpdpbusd) is the next step for them.
 */
#include "backends/cpu/cpu_internal.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

AI float hsum16(__m512 v) { return _mm512_reduce_add_ps(v); }

AI __m512 load_f16x16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

AI __m512 load_bf16x16(const uint16_t *p) {
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

AI __m512 load_f32x16(const float *p) { return _mm512_loadu_ps(p); }

#define FLOAT_KERNEL(NAME, WTYPE, LOAD16, SCALAR)                                                \
    AI void NAME##_m(int64_t k, const WTYPE *w, const char *act, size_t as, float *y, size_t ys, \
                     const int M) {                                                             \
        __m512 acc[CPU_MM_M][2];                                                                \
        _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) acc[j][0] = acc[j][1] =             \
            _mm512_setzero_ps();                                                                \
        int64_t i = 0;                                                                          \
        for (; i + 32 <= k; i += 32) {                                                          \
            __m512 w0 = LOAD16(w + i), w1 = LOAD16(w + i + 16);                                 \
            _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) {                               \
                const float *x = (const float *)(act + j * as);                                 \
                acc[j][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + i), acc[j][0]);             \
                acc[j][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + i + 16), acc[j][1]);        \
            }                                                                                   \
        }                                                                                       \
        _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) {                                   \
            const float *x = (const float *)(act + j * as);                                     \
            float s = hsum16(_mm512_add_ps(acc[j][0], acc[j][1]));                              \
            for (int64_t t = i; t < k; t++) s += SCALAR(w[t]) * x[t];                           \
            y[j * ys] = s;                                                                      \
        }                                                                                       \
    }

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

#define ID(x) (x)
FLOAT_KERNEL(mm_f32, float, load_f32x16, ID)
DISPATCH_M(mm_f32)
FLOAT_KERNEL(mm_f16, uint16_t, load_f16x16, rt_f16_to_f32)
DISPATCH_M(mm_f16)
FLOAT_KERNEL(mm_bf16, uint16_t, load_bf16x16, rt_bf16_to_f32)
DISPATCH_M(mm_bf16)

/* Prefill: up to 4 weight rows x 4 tokens, one 16-wide FMA chain per
 * (row, token): 16 accumulators of the 32 zmm registers. */
#define FLOAT_PREFILL_KERNEL(NAME, WTYPE, LOAD16, SCALAR)                                        \
    AI void NAME##_rm(int64_t k, const char *w, size_t wst, const char *act, size_t as, float *y,  \
                      size_t ys, const int R, const int M) {                                     \
        __m512 acc[CPU_MMP_R][CPU_MM_M];                                                         \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                                      \
            _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) acc[r][j] = _mm512_setzero_ps(); \
        int64_t i = 0;                                                                           \
        for (; i + 16 <= k; i += 16) {                                                           \
            __m512 wv[CPU_MMP_R] = {_mm512_setzero_ps(), _mm512_setzero_ps(),                    \
                                    _mm512_setzero_ps(), _mm512_setzero_ps()};                   \
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                                  \
                wv[r] = LOAD16((const WTYPE *)(w + r * wst) + i);                                \
            _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) {                                \
                __m512 xv = _mm512_loadu_ps((const float *)(act + j * as) + i);                  \
                _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                              \
                    acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);                           \
            }                                                                                    \
        }                                                                                        \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                    \
            const WTYPE *wr = (const WTYPE *)(w + r * wst);                                      \
            _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) {                                \
                const float *x = (const float *)(act + j * as);                                  \
                float s = hsum16(acc[r][j]);                                                     \
                for (int64_t t = i; t < k; t++) s += SCALAR(wr[t]) * x[t];                       \
                y[j * ys + r] = s;                                                               \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
    AI void NAME##_r(int64_t k, const void *w, size_t wst, const void *act, size_t as, int m,     \
                         float *y, size_t ys, const int R) {                                     \
        switch (m) {                                                                             \
        case 1: NAME##_rm(k, w, wst, act, as, y, ys, R, 1); break;                               \
        case 2: NAME##_rm(k, w, wst, act, as, y, ys, R, 2); break;                               \
        case 3: NAME##_rm(k, w, wst, act, as, y, ys, R, 3); break;                               \
        default: NAME##_rm(k, w, wst, act, as, y, ys, R, 4); break;                              \
        }                                                                                        \
    }                                                                                            \
    static void NAME(int64_t k, const void *w, size_t wst, int nr, const void *act, size_t as,  \
                     int m, float *y, size_t ys) {                                               \
        switch (nr) {                                                                            \
        case 1: NAME##_r(k, w, wst, act, as, m, y, ys, 1); break;                                \
        case 2: NAME##_r(k, w, wst, act, as, m, y, ys, 2); break;                                \
        case 3: NAME##_r(k, w, wst, act, as, m, y, ys, 3); break;                                \
        default: NAME##_r(k, w, wst, act, as, m, y, ys, 4); break;                               \
        }                                                                                        \
    }

FLOAT_PREFILL_KERNEL(mmp_f32, float, load_f32x16, ID)
FLOAT_PREFILL_KERNEL(mmp_f16, uint16_t, load_f16x16, rt_f16_to_f32)
FLOAT_PREFILL_KERNEL(mmp_bf16, uint16_t, load_bf16x16, rt_bf16_to_f32)

void cpu_fill_matmul_avx512(cpu_kernels *k) {
    k->mm[RT_F32] = mm_f32;
    k->mm[RT_F16] = mm_f16;
    k->mm[RT_BF16] = mm_bf16;
    k->mmp[RT_F32] = mmp_f32;
    k->mmp[RT_F16] = mmp_f16;
    k->mmp[RT_BF16] = mmp_bf16;
    k->mmp_rows = 4;
}
