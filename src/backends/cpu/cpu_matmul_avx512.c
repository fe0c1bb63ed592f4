/* cpu_matmul_avx512 — AVX-512 (F/BW/VL/DQ) matmul micro-kernels.
 *
 * Float weights run 32 elements per step in two zmm accumulators per
 * activation row. Q4_0/Q4_1/Q8_0 take two 32-element blocks per zmm (one
 * block per 256-bit half, the two scales blended per half); an odd last
 * block goes through the 256-bit path. K-quants keep the AVX2 kernels (the
 * unpacking, not the vector width, bounds them). Same M-independence
 * contract as the AVX2 file. AVX-512 has no vpsignb: sign(a, w) is a
 * masked negate on w's sign bits.
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

/* ---- two 32-element blocks per zmm --------------------------------------- */

/* signed w x signed a, pairwise to 16 int32 (8 per 256-bit half) */
AI __m512i dot2_i8(__m512i w, __m512i a) {
    __mmask64 neg = _mm512_movepi8_mask(w);
    __m512i sa = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(w), sa), _mm512_set1_epi16(1));
}

AI __m256i dot_i8_256(__m256i w, __m256i a) {
    __m256i aw = _mm256_sign_epi8(w, w), sa = _mm256_sign_epi8(a, w);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sa), _mm256_set1_epi16(1));
}

/* two activation blocks' 32 int8 side by side */
AI __m512i load_act2(const cpu_block_q8a *a) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a[0].qs)),
                              _mm256_loadu_si256((const __m256i *)a[1].qs), 1);
}

AI __m512 scales2(float d0, float d1) {
    return _mm512_mask_blend_ps((__mmask16)0xFF00, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
}

/* Q4_0 blocks b, b+1 -> 64 signed values in element order per block */
AI __m512i unpack2_q4(const rt_block_q4_0 *w) {
    __m256i t = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)w[1].qs),
                                 _mm_loadu_si128((const __m128i *)w[0].qs));
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1);
    /* qwords: [b lo, b1 lo, b hi, b1 hi] -> [b lo, b hi, b1 lo, b1 hi] */
    z = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 4, 5, 2, 3, 6, 7), z);
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
}

AI __m256i unpack1_q4(const uint8_t *qs) {
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}

AI void mm_q4_0_m(int64_t k, const rt_block_q4_0 *w, const char *act, size_t as, float *y,
                  size_t ys, const int M) {
    __m512 acc[CPU_MM_M];
    _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) acc[j] = _mm512_setzero_ps();
    const int64_t nb = k / RT_QK;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512i q = _mm512_sub_epi8(unpack2_q4(w + b), _mm512_set1_epi8(8));
        float d0 = _cvtsh_ss(w[b].d), d1 = _cvtsh_ss(w[b + 1].d);
        _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) {
            const cpu_block_q8a *a = (const cpu_block_q8a *)(act + j * as) + b;
            __m512 p = _mm512_cvtepi32_ps(dot2_i8(q, load_act2(a)));
            acc[j] = _mm512_fmadd_ps(scales2(d0 * a[0].d, d1 * a[1].d), p, acc[j]);
        }
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) {
        float s = hsum16(acc[j]);
        if (b < nb) {
            const cpu_block_q8a *a = (const cpu_block_q8a *)(act + j * as) + b;
            __m256i q = _mm256_sub_epi8(unpack1_q4(w[b].qs), _mm256_set1_epi8(8));
            __m256i p = dot_i8_256(q, _mm256_loadu_si256((const __m256i *)a->qs));
            __m256 f = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(w[b].d) * a->d), _mm256_cvtepi32_ps(p));
            __m128 h = _mm_add_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
            h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            s += _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
        }
        y[j * ys] = s;
    }
}
DISPATCH_M(mm_q4_0)

AI void mm_q4_1_m(int64_t k, const rt_block_q4_1 *w, const char *act, size_t as, float *y,
                  size_t ys, const int M) {
    __m512 acc[CPU_MM_M];
    float accm[CPU_MM_M];
    _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) {
        acc[j] = _mm512_setzero_ps();
        accm[j] = 0.0f;
    }
    const int64_t nb = k / RT_QK;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m256i t = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)w[b + 1].qs),
                                     _mm_loadu_si128((const __m128i *)w[b].qs));
        __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1);
        z = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 4, 5, 2, 3, 6, 7), z);
        __m512i q = _mm512_and_si512(z, _mm512_set1_epi8(0x0F)); /* unsigned 0..15 */
        float d0 = _cvtsh_ss(w[b].d), d1 = _cvtsh_ss(w[b + 1].d);
        float m0 = _cvtsh_ss(w[b].m), m1 = _cvtsh_ss(w[b + 1].m);
        _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) {
            const cpu_block_q8a *a = (const cpu_block_q8a *)(act + j * as) + b;
            __m512i s32 = _mm512_madd_epi16(_mm512_maddubs_epi16(q, load_act2(a)), _mm512_set1_epi16(1));
            acc[j] = _mm512_fmadd_ps(scales2(d0 * a[0].d, d1 * a[1].d), _mm512_cvtepi32_ps(s32), acc[j]);
            accm[j] += m0 * a[0].s;
            accm[j] += m1 * a[1].s;
        }
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) {
        float s = hsum16(acc[j]);
        if (b < nb) {
            const cpu_block_q8a *a = (const cpu_block_q8a *)(act + j * as) + b;
            __m256i q = unpack1_q4(w[b].qs);
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)a->qs)),
                                          _mm256_set1_epi16(1));
            __m256 f = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(w[b].d) * a->d), _mm256_cvtepi32_ps(p));
            __m128 h = _mm_add_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
            h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            s += _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
            accm[j] += _cvtsh_ss(w[b].m) * a->s;
        }
        y[j * ys] = s + accm[j];
    }
}
DISPATCH_M(mm_q4_1)

AI void mm_q8_0_m(int64_t k, const rt_block_q8_0 *w, const char *act, size_t as, float *y,
                  size_t ys, const int M) {
    __m512 acc[CPU_MM_M];
    _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) acc[j] = _mm512_setzero_ps();
    const int64_t nb = k / RT_QK;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512i q = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)w[b].qs)),
            _mm256_loadu_si256((const __m256i *)w[b + 1].qs), 1);
        float d0 = _cvtsh_ss(w[b].d), d1 = _cvtsh_ss(w[b + 1].d);
        _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) {
            const cpu_block_q8a *a = (const cpu_block_q8a *)(act + j * as) + b;
            __m512 p = _mm512_cvtepi32_ps(dot2_i8(q, load_act2(a)));
            acc[j] = _mm512_fmadd_ps(scales2(d0 * a[0].d, d1 * a[1].d), p, acc[j]);
        }
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < M; j++) {
        float s = hsum16(acc[j]);
        if (b < nb) {
            const cpu_block_q8a *a = (const cpu_block_q8a *)(act + j * as) + b;
            __m256i p = dot_i8_256(_mm256_loadu_si256((const __m256i *)w[b].qs),
                                   _mm256_loadu_si256((const __m256i *)a->qs));
            __m256 f = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(w[b].d) * a->d), _mm256_cvtepi32_ps(p));
            __m128 h = _mm_add_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
            h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            s += _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
        }
        y[j * ys] = s;
    }
}
DISPATCH_M(mm_q8_0)

void cpu_fill_matmul_avx512(cpu_kernels *k) {
    k->mm[RT_F32] = mm_f32;
    k->mm[RT_F16] = mm_f16;
    k->mm[RT_BF16] = mm_bf16;
    k->mm[RT_Q4_0] = mm_q4_0;
    k->mm[RT_Q4_1] = mm_q4_1;
    k->mm[RT_Q8_0] = mm_q8_0;
}
