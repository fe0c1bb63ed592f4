/* cpu_gemm_avx512vnni — GEMM tiles (lanes = 8 tokens) of Q4_0, Q4_1,
 * Q8_0, Q4_K and Q6_K with AVX512-VNNI on 256-bit registers (compiled with
 * -mavx512vnni -mavx512vl ...; installed in the avx512 table only when the
 * CPU has VNNI, see cpu_features.c).
 *
 * Same layout and chain arithmetic as the AVX2 tiles (cpu_gemm_avx2.c):
 * 4 bytes of each weight row are broadcast against a 32-byte step of 8
 * interleaved tokens, but vpdpbusd multiplies u8 x s8 and adds the four
 * products straight into int32 lanes: one instruction per step and row
 * instead of maddubs + add (+ madd per block for Q4, per step for Q8_0),
 * and no int16 saturation, so Q8_0 needs no sign trick: its weights are
 * stored biased, u = w + 128, and 128*sum(a) (exact) is taken off.
 * Integer block sums are exact either way, so every output equals the
 * scalar reference bit for bit. Two accumulators per row (even / odd
 * steps) keep 8 independent dpbusd chains in flight.
 */
#include "backends/cpu/cpu_gemm_tile.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>




/* One panel block: 4 rows x 32 unsigned bytes and per-row scales. Q4_0
 * and Q4_1 keep the nibbles (0..15), Q8_0 keeps w + 128; m is Q4_1's
 * offset (unused otherwise). */
typedef struct {
    uint8_t q[4][RT_QK];
    float d[4], m[4];
} panel_q8;

enum { KIND_Q4_0, KIND_Q4_1, KIND_Q8_0 };

/* Unpacks nr rows, prefetching the next panel (PK_PREFETCH_INIT,
 * cpu_gemm_tile.h). */
AI void pk_kind(int64_t k, const char *w, size_t ws, int nr, panel_q8 *o, const int kind) {
    const int64_t nb = k / RT_QK;
    PK_PREFETCH_INIT(w, ws, nr, nb);
    for (int64_t b = 0; b < nb; b++, o++) {
        pf = prefetch_step(pf, pstep);
        for (int r = 0; r < nr; r++) {
            const char *row = w + r * ws;
            if (kind == KIND_Q4_0) {
                const rt_block_q4_0 *wb = (const rt_block_q4_0 *)row + b;
                _mm256_storeu_si256((__m256i *)o->q[r], q4_unpack(wb->qs));
                o->d[r] = _cvtsh_ss(wb->d);
                o->m[r] = 0.0f;
            } else if (kind == KIND_Q4_1) {
                const rt_block_q4_1 *wb = (const rt_block_q4_1 *)row + b;
                _mm256_storeu_si256((__m256i *)o->q[r], q4_unpack(wb->qs));
                o->d[r] = _cvtsh_ss(wb->d);
                o->m[r] = _cvtsh_ss(wb->m);
            } else {
                const rt_block_q8_0 *wb = (const rt_block_q8_0 *)row + b;
                __m256i q = _mm256_loadu_si256((const __m256i *)wb->qs);
                _mm256_storeu_si256((__m256i *)o->q[r], _mm256_xor_si256(q, _mm256_set1_epi8(-128)));
                o->d[r] = _cvtsh_ss(wb->d);
                o->m[r] = 0.0f;
            }
        }
    }
}

static void pk_q4_0(int64_t k, const void *w, size_t ws, int nr, void *panel) {
    pk_kind(k, w, ws, nr, panel, KIND_Q4_0);
}
static void pk_q4_1(int64_t k, const void *w, size_t ws, int nr, void *panel) {
    pk_kind(k, w, ws, nr, panel, KIND_Q4_1);
}
static void pk_q8_0(int64_t k, const void *w, size_t ws, int nr, void *panel) {
    pk_kind(k, w, ws, nr, panel, KIND_Q8_0);
}

/* Per block: isum = sum(u*a) - off*sum(a) with off = 8 (Q4_0), 0 (Q4_1),
 * 128 (Q8_0); acc = fma(d*da, isum, acc); Q4_1 then acc = fma(m*da,
 * sum(a), acc). */
AI void gm_kind(int64_t k, const panel_q8 *pw, const cpu_block_q8a_x8 *a, int nt, float *y,
                size_t ys, const int R, const int kind) {
    __m256 acc[4];
    UNROLL
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const int64_t nb = k / RT_QK;
    for (int64_t b = 0; b < nb; b++) {
        const cpu_block_q8a_x8 *ab = a + b;
        const panel_q8 *wb = pw + b;
        __m256i s0[4], s1[4];
        UNROLL
        for (int r = 0; r < R; r++) s0[r] = s1[r] = _mm256_setzero_si256();
        UNROLL
        for (int s = 0; s < 8; s += 2) {
            __m256i a0 = _mm256_loadu_si256((const __m256i *)(ab->qs + 32 * s));
            __m256i a1 = _mm256_loadu_si256((const __m256i *)(ab->qs + 32 * s + 32));
            UNROLL
            for (int r = 0; r < R; r++) {
                s0[r] = _mm256_dpbusd_epi32(s0[r], bcast_u32(wb->q[r] + 4 * s), a0);
                s1[r] = _mm256_dpbusd_epi32(s1[r], bcast_u32(wb->q[r] + 4 * s + 4), a1);
            }
        }
        __m256i sum = _mm256_loadu_si256((const __m256i *)ab->sum);
        __m256i corr = kind == KIND_Q4_0 ? _mm256_slli_epi32(sum, 3)
                       : kind == KIND_Q8_0 ? _mm256_slli_epi32(sum, 7)
                                           : _mm256_setzero_si256();
        __m256 da = _mm256_loadu_ps(ab->d);
        UNROLL
        for (int r = 0; r < R; r++) {
            __m256i isum = _mm256_add_epi32(s0[r], s1[r]);
            if (kind != KIND_Q4_1) isum = _mm256_sub_epi32(isum, corr);
            __m256 d = _mm256_mul_ps(_mm256_broadcast_ss(&wb->d[r]), da);
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc[r]);
            if (kind == KIND_Q4_1)
                acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_broadcast_ss(&wb->m[r]), da),
                                         _mm256_cvtepi32_ps(sum), acc[r]);
        }
    }
    store_tile(acc, R, nt, y, ys);
}

#define GM(NAME, KIND)                                                                         \
    static void NAME(int64_t k, const void *pw, int nr, const void *a, int nt, float *y,       \
                     size_t ys) {                                                              \
        switch (nr) {                                                                          \
        case 1: gm_kind(k, pw, a, nt, y, ys, 1, KIND); break;                                  \
        case 2: gm_kind(k, pw, a, nt, y, ys, 2, KIND); break;                                  \
        case 3: gm_kind(k, pw, a, nt, y, ys, 3, KIND); break;                                  \
        default: gm_kind(k, pw, a, nt, y, ys, 4, KIND); break;                                 \
        }                                                                                      \
    }
GM(gm_q4_0, KIND_Q4_0)
GM(gm_q4_1, KIND_Q4_1)
GM(gm_q8_0, KIND_Q8_0)

/* ---- Q4_K and Q6_K ------------------------------------------------------ */

/* The K-quant tiles keep their integer sums per scale group: dpbusd of the
 * group's steps into int32 (two chains, even / odd steps), then one exact
 * int32 multiply by the group's scale (vpmulld) instead of maddubs + add16
 * per step and a madd per 8 (Q6_K) or 32 (Q4_K) elements. The offsets
 * (Q4_K mins, Q6_K's -32) stay int16 pairs against the activation group
 * sums, added with vpdpwssd. Every partial is an exact integer, so isum
 * and the output equal the AVX2 tile and the scalar reference bit for bit. */

/* the 8 scales and mins of a Q4_K block (rt_q4k_scale_min) */
AI void q4k_scales(const uint8_t *scales, int32_t *sc, int32_t *mpair) {
    uint8_t s[8], m[8];
    UNROLL
    for (int j = 0; j < 8; j++) rt_q4k_scale_min(j, scales, &s[j], &m[j]);
    UNROLL
    for (int j = 0; j < 8; j++) sc[j] = s[j];
    UNROLL
    for (int p = 0; p < 4; p++) mpair[p] = (int32_t)((uint32_t)m[2 * p] | (uint32_t)m[2 * p + 1] << 16);
}

typedef struct { /* 4 rows x 256 elements, unpacked */
    uint8_t q[4][RT_QK_K]; /* nibbles 0..15 in element order */
    int32_t sc[4][8];      /* scale of sub-block j (int32) */
    int32_t mp[4][4];      /* mins 2p, 2p+1 as an int16 pair */
    float d[4], dm[4];
} panel_q4_K;

/* Unpacks nr rows. No prefetch of the next panel here (unlike pk_kind and
 * pk_q6_K): it made the tile slower both in cache and from DRAM (kernel
 * lab, [2048,2048] x 8 tokens, 2 threads: 0.27 vs 0.23 ms in cache, 0.44
 * vs 0.36 ms over 16 copies). */
static void pk_q4_K(int64_t k, const void *wp, size_t ws, int nr, void *panel) {
    const char *w = wp;
    panel_q4_K *o = panel;
    const int64_t nb = k / RT_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; b++, o++) {
        for (int r = 0; r < nr; r++) {
            const rt_block_q4_K *wb = (const rt_block_q4_K *)(w + r * ws) + b;
            for (int c = 0; c < 4; c++) {
                __m256i q = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * c));
                _mm256_storeu_si256((__m256i *)(o->q[r] + 64 * c), _mm256_and_si256(q, m4));
                _mm256_storeu_si256((__m256i *)(o->q[r] + 64 * c + 32),
                                    _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
            }
            q4k_scales(wb->scales, o->sc[r], o->mp[r]);
            o->d[r] = _cvtsh_ss(wb->d);
            o->dm[r] = _cvtsh_ss(wb->dmin);
        }
    }
}

/* isum = sum_j sc_j * (sub-block j's u.a); acc = fma(d*da, isum, acc),
 * then acc = fnma(dmin*da, sum_j m_j * s_j, acc) */
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
            const int8_t *aq = ab->qs + 256 * jb;
            __m256i s0[4], s1[4];
            UNROLL
            for (int r = 0; r < R; r++) s0[r] = s1[r] = _mm256_setzero_si256();
            UNROLL
            for (int s = 0; s < 8; s += 2) {
                __m256i a0 = _mm256_loadu_si256((const __m256i *)(aq + 32 * s));
                __m256i a1 = _mm256_loadu_si256((const __m256i *)(aq + 32 * s + 32));
                UNROLL
                for (int r = 0; r < R; r++) {
                    s0[r] = _mm256_dpbusd_epi32(s0[r], bcast_u32(wb->q[r] + 32 * jb + 4 * s), a0);
                    s1[r] = _mm256_dpbusd_epi32(s1[r], bcast_u32(wb->q[r] + 32 * jb + 4 * s + 4), a1);
                }
            }
            UNROLL
            for (int r = 0; r < R; r++)
                isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(_mm256_add_epi32(s0[r], s1[r]),
                                                                       _mm256_set1_epi32(wb->sc[r][jb])));
        }
        __m256 da = _mm256_loadu_ps(ab->d);
        UNROLL
        for (int r = 0; r < R; r++) {
            __m256i ms = _mm256_setzero_si256();
            UNROLL
            for (int p = 0; p < 4; p++)
                ms = _mm256_dpwssd_epi32(ms, _mm256_loadu_si256((const __m256i *)ab->as[p]),
                                         _mm256_set1_epi32(wb->mp[r][p]));
            __m256 d = _mm256_mul_ps(_mm256_broadcast_ss(&wb->d[r]), da);
            __m256 dm = _mm256_mul_ps(_mm256_broadcast_ss(&wb->dm[r]), da);
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum[r]), acc[r]);
            acc[r] = _mm256_fnmadd_ps(dm, _mm256_cvtepi32_ps(ms), acc[r]);
        }
    }
    store_tile(acc, R, nt, y, ys);
}


typedef struct { /* 4 rows x 256 elements, unpacked */
    uint8_t q[4][RT_QK_K]; /* values 0..63 in element order */
    int32_t sc[4][16];     /* scale of group g (int32) */
    int32_t scp[4][8];     /* scales 2p, 2p+1 as an int16 pair */
    float d[4];
} panel_q6_K;

/* next panel prefetched a slice per block, as pk_kind does (from DRAM at
 * 8 tokens: 0.30 ms with, 0.32 without; in cache no difference) */
static void pk_q6_K(int64_t k, const void *wp, size_t ws, int nr, void *panel) {
    const char *w = wp;
    panel_q6_K *o = panel;
    const int64_t nb = k / RT_QK_K;
    PK_PREFETCH_INIT(w, ws, nr, nb);
    for (int64_t b = 0; b < nb; b++, o++) {
        pf = prefetch_step(pf, pstep);
        for (int r = 0; r < nr; r++) {
            const rt_block_q6_K *wb = (const rt_block_q6_K *)(w + r * ws) + b;
            q6k_unpack(wb, o->q[r]);
            for (int g = 0; g < 16; g++) o->sc[r][g] = wb->scales[g];
            for (int p = 0; p < 8; p++)
                o->scp[r][p] = (int32_t)((uint32_t)(uint16_t)wb->scales[2 * p] |
                                         (uint32_t)(uint16_t)wb->scales[2 * p + 1] << 16);
            o->d[r] = _cvtsh_ss(wb->d);
        }
    }
}

/* isum = sum_g sc_g * (group g's u.a) - 32 * sum_g sc_g * bsum_g;
 * acc = fma(d*da, isum, acc) */
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
        _Pragma("GCC unroll 2")
        for (int g = 0; g < 16; g++) { /* group of 16 = 4 steps */
            const int8_t *aq = ab->qs + 128 * g;
            __m256i s0[4], s1[4];
            UNROLL
            for (int r = 0; r < R; r++) s0[r] = s1[r] = _mm256_setzero_si256();
            UNROLL
            for (int s = 0; s < 4; s += 2) {
                __m256i a0 = _mm256_loadu_si256((const __m256i *)(aq + 32 * s));
                __m256i a1 = _mm256_loadu_si256((const __m256i *)(aq + 32 * s + 32));
                UNROLL
                for (int r = 0; r < R; r++) {
                    s0[r] = _mm256_dpbusd_epi32(s0[r], bcast_u32(wb->q[r] + 16 * g + 4 * s), a0);
                    s1[r] = _mm256_dpbusd_epi32(s1[r], bcast_u32(wb->q[r] + 16 * g + 4 * s + 4), a1);
                }
            }
            UNROLL
            for (int r = 0; r < R; r++)
                isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(_mm256_add_epi32(s0[r], s1[r]),
                                                                       _mm256_set1_epi32(wb->sc[r][g])));
        }
        __m256 da = _mm256_loadu_ps(ab->d);
        UNROLL
        for (int r = 0; r < R; r++) {
            __m256i off = _mm256_setzero_si256();
            UNROLL
            for (int p = 0; p < 8; p++)
                off = _mm256_dpwssd_epi32(off, _mm256_loadu_si256((const __m256i *)ab->bs[p]),
                                          _mm256_set1_epi32(wb->scp[r][p]));
            __m256i is = _mm256_sub_epi32(isum[r], _mm256_slli_epi32(off, 5));
            __m256 d = _mm256_mul_ps(_mm256_broadcast_ss(&wb->d[r]), da);
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(is), acc[r]);
        }
    }
    store_tile(acc, R, nt, y, ys);
}

#define GM_R(NAME)                                                                             \
    static void NAME(int64_t k, const void *pw, int nr, const void *a, int nt, float *y,       \
                     size_t ys) {                                                              \
        switch (nr) {                                                                          \
        case 1: NAME##_r(k, pw, a, nt, y, ys, 1); break;                                       \
        case 2: NAME##_r(k, pw, a, nt, y, ys, 2); break;                                       \
        case 3: NAME##_r(k, pw, a, nt, y, ys, 3); break;                                       \
        default: NAME##_r(k, pw, a, nt, y, ys, 4); break;                                      \
        }                                                                                      \
    }
GM_R(gm_q4_K)
GM_R(gm_q6_K)

/* Overrides the tiles (and their panel layout) of a table that already has
 * the AVX2 chain kernels (the GEMVs and tail rows stay). */
void cpu_fill_gemm_avx512vnni(cpu_kernels *k) {
    const rt_dtype types[] = {RT_Q4_0, RT_Q4_1, RT_Q8_0};
    const cpu_gm_fn gm[] = {gm_q4_0, gm_q4_1, gm_q8_0};
    const cpu_pk_fn pk[] = {pk_q4_0, pk_q4_1, pk_q8_0};
    /* padded-tile break-even vs the GEMV (kernel lab, 2 threads, shapes as
     * in cpu_gemm_avx2.c) */
    const unsigned char gm_min[] = {4, 3, 4};
    for (int i = 0; i < 3; i++) {
        k->gm[types[i]] = gm[i];
        k->pk[types[i]] = pk[i];
        k->pk_bytes[types[i]] = sizeof(panel_q8) * (RT_QK_K / RT_QK);
        k->gm_min[types[i]] = gm_min[i];
    }
    /* K-quants: break-even 5 tokens (AVX2 tiles: 7), [2048,2048], 2
     * threads, in cache and from DRAM */
    k->gm[RT_Q4_K] = gm_q4_K;
    k->pk[RT_Q4_K] = pk_q4_K;
    k->pk_bytes[RT_Q4_K] = sizeof(panel_q4_K);
    k->gm_min[RT_Q4_K] = 5;
    k->gm[RT_Q6_K] = gm_q6_K;
    k->pk[RT_Q6_K] = pk_q6_K;
    k->pk_bytes[RT_Q6_K] = sizeof(panel_q6_K);
    k->gm_min[RT_Q6_K] = 5;
}
