/* cpu_attention_avx2 — the attention row kernel with AVX2/FMA: the same
 * chunked online softmax as cpu_attn_ref, vectorised over head_dim (f16
 * caches converted with F16C) and over a chunk's exp(). */
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_simd_avx2.h"

#include <math.h>
#include <string.h>

#define KCHUNK 64

/* f16: 0 f32, 1 f16, 2 bf16 (cpu_attn_job.kv_f16) */
static inline __m256 load8(const char *row, int64_t i, int f16) {
    if (f16 == 2) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)))
               : _mm256_loadu_ps((const float *)row + i);
}

static inline float load1(const char *row, int64_t i, int f16) {
    if (f16 == 2) return rt_bf16_to_f32(((const uint16_t *)row)[i]);
    return f16 ? _cvtsh_ss(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

/* acc[0..hd) += sum_t p[t] * v_t, 32 output floats per register block so
 * the accumulator is loaded and stored once per chunk, not once per key. */
static void accumulate_v(const cpu_attn_job *j, const char *v0, const float *p, int cnt,
                         float *acc) {
    const int64_t hd = j->hd;
    const int f16 = j->kv_f16;
    int64_t d = 0;
    for (; d + 32 <= hd; d += 32) {
        __m256 r0 = _mm256_load_ps(acc + d), r1 = _mm256_load_ps(acc + d + 8);
        __m256 r2 = _mm256_load_ps(acc + d + 16), r3 = _mm256_load_ps(acc + d + 24);
        const char *v = v0;
        for (int t = 0; t < cnt; t++, v += j->v_stride) {
            __m256 pv = _mm256_set1_ps(p[t]);
            r0 = _mm256_fmadd_ps(pv, load8(v, d, f16), r0);
            r1 = _mm256_fmadd_ps(pv, load8(v, d + 8, f16), r1);
            r2 = _mm256_fmadd_ps(pv, load8(v, d + 16, f16), r2);
            r3 = _mm256_fmadd_ps(pv, load8(v, d + 24, f16), r3);
        }
        _mm256_store_ps(acc + d, r0);
        _mm256_store_ps(acc + d + 8, r1);
        _mm256_store_ps(acc + d + 16, r2);
        _mm256_store_ps(acc + d + 24, r3);
    }
    for (; d + 8 <= hd; d += 8) {
        __m256 r0 = _mm256_load_ps(acc + d);
        const char *v = v0;
        for (int t = 0; t < cnt; t++, v += j->v_stride)
            r0 = _mm256_fmadd_ps(_mm256_set1_ps(p[t]), load8(v, d, f16), r0);
        _mm256_store_ps(acc + d, r0);
    }
    for (; d < hd; d++) {
        const char *v = v0;
        for (int t = 0; t < cnt; t++, v += j->v_stride) acc[d] += p[t] * load1(v, d, f16);
    }
}

/* Scores of keys 0..cnt-1 (cnt a multiple of 8, hd of 8), 8 keys at a
 * time: one FMA chain per key over head_dim, then one transpose-add tree
 * gives the 8 scores in a vector. Returns their max. */
static inline __attribute__((always_inline)) float scores8(const cpu_attn_job *j, const float *q,
                                                           const char *k0, int cnt, float *sc,
                                                           const int f16) {
    const __m256 scale = _mm256_set1_ps(j->scale);
    __m256 mv = _mm256_set1_ps(-INFINITY);
    for (int t = 0; t < cnt; t += 8) {
        const char *k = k0 + t * j->k_stride;
        __m256 s[8];
        _Pragma("GCC unroll 8")
        for (int i = 0; i < 8; i++) s[i] = _mm256_setzero_ps();
        for (int64_t d = 0; d < j->hd; d += 8) {
            __m256 qv = _mm256_loadu_ps(q + d);
            _Pragma("GCC unroll 8")
            for (int i = 0; i < 8; i++)
                s[i] = _mm256_fmadd_ps(qv, load8(k + i * j->k_stride, d, f16), s[i]);
        }
        __m256 t0 = _mm256_hadd_ps(s[0], s[1]), t1 = _mm256_hadd_ps(s[2], s[3]);
        __m256 t2 = _mm256_hadd_ps(s[4], s[5]), t3 = _mm256_hadd_ps(s[6], s[7]);
        __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
        __m256 v = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                                 _mm256_permute2f128_ps(u0, u1, 0x31));
        v = _mm256_mul_ps(v, scale);
        _mm256_storeu_ps(sc + t, v);
        mv = _mm256_max_ps(mv, v);
    }
    return cpu_hmax8(mv);
}

/* Scores of one head for keys p0..p0+cnt-1 into sc (scaled, soft-capped). */
static float chunk_scores(const cpu_attn_job *j, const float *q, const char *k0, int cnt, float *sc) {
    const int64_t hd = j->hd, hd8 = hd & ~(int64_t)7;
    const int f16 = j->kv_f16;
    float cmax = -INFINITY;
    int t = 0;
    if (hd8 == hd && j->softcap <= 0.0f) {
        t = cnt & ~7;
        /* constant f16 per call so the inlined load8 is specialised */
        cmax = f16 == 2 ? scores8(j, q, k0, t, sc, 2) : f16 ? scores8(j, q, k0, t, sc, 1) : scores8(j, q, k0, t, sc, 0);
    }
    for (; t < cnt; t++) {
        const char *k = k0 + t * j->k_stride;
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        int64_t d = 0;
        for (; d + 16 <= hd8; d += 16) {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(k, d, f16), s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), load8(k, d + 8, f16), s1);
        }
        for (; d < hd8; d += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(k, d, f16), s0);
        float s = cpu_hsum8(_mm256_add_ps(s0, s1));
        for (; d < hd; d++) s += q[d] * load1(k, d, f16);
        s *= j->scale;
        if (j->softcap > 0.0f) s = j->softcap * tanhf(s / j->softcap);
        sc[t] = s;
        cmax = s > cmax ? s : cmax;
    }
    return cmax;
}

/* All nh heads walk the same K/V chunk back to back, so the chunk is read
 * from memory once and from L1 by the other heads. */
static void attn(const cpu_attn_job *j) {
    static _Thread_local float acc[CPU_ATTN_HB][CPU_ATTN_MAX_HD] __attribute__((aligned(32)));
    float sc[KCHUNK] __attribute__((aligned(32)));
    float m[CPU_ATTN_HB], l[CPU_ATTN_HB];
    const int64_t hd = j->hd, hd8 = hd & ~(int64_t)7;
    for (int h = 0; h < j->nh; h++) {
        memset(acc[h], 0, (size_t)hd * sizeof(float));
        m[h] = -INFINITY;
        l[h] = 0.0f;
    }
    for (int64_t p0 = j->lo, cnt; p0 <= j->hi; p0 += cnt) {
        cnt = cpu_attn_chunk(j, p0, KCHUNK);
        const char *k0 = cpu_attn_row(j, j->k, j->k_stride, j->k_blk, p0);
        const char *v0 = cpu_attn_row(j, j->v, j->v_stride, j->v_blk, p0);
        for (int h = 0; h < j->nh; h++) {
            float cmax = chunk_scores(j, j->q + h * j->q_stride, k0, (int)cnt, sc);
            if (cmax > m[h]) {
                float corr = expf(m[h] - cmax); /* 0 on the first chunk */
                __m256 cv = _mm256_set1_ps(corr);
                int64_t d = 0;
                for (; d < hd8; d += 8) _mm256_store_ps(acc[h] + d, _mm256_mul_ps(_mm256_load_ps(acc[h] + d), cv));
                for (; d < hd; d++) acc[h][d] *= corr;
                l[h] *= corr;
                m[h] = cmax;
            }
            /* p = exp(s - m), 8 at a time (padding lanes give 0) */
            for (int t = (int)cnt; t < (((int)cnt + 7) & ~7); t++) sc[t] = -INFINITY;
            __m256 mv = _mm256_set1_ps(m[h]), lv = _mm256_setzero_ps();
            for (int t = 0; t < cnt; t += 8) {
                __m256 e = cpu_exp8(_mm256_sub_ps(_mm256_load_ps(sc + t), mv));
                _mm256_store_ps(sc + t, e);
                lv = _mm256_add_ps(lv, e);
            }
            l[h] += cpu_hsum8(lv);
            accumulate_v(j, v0, sc, (int)cnt, acc[h]);
        }
    }
    for (int h = 0; h < j->nh; h++) {
        float *out = j->out + h * j->out_stride;
        if (j->ml) {
            memcpy(out, acc[h], (size_t)hd * sizeof(float));
            j->ml[2 * h] = m[h];
            j->ml[2 * h + 1] = l[h];
        } else {
            float inv = 1.0f / l[h];
            for (int64_t d = 0; d < hd; d++) out[d] = acc[h][d] * inv;
        }
    }
}

void cpu_fill_attention_avx2(cpu_kernels *k) { k->attn = attn; }
