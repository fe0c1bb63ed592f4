/* cpu_gemm_avx512vnni — GEMM tiles (lanes = 8 tokens) of Q4_0, Q4_1 and
 * Q8_0 with AVX512-VNNI on 256-bit registers (compiled with
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
#include "backends/cpu/cpu_internal.h"

#include <immintrin.h>
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

/* One panel block: 4 rows x 32 unsigned bytes and per-row scales. Q4_0
 * and Q4_1 keep the nibbles (0..15), Q8_0 keeps w + 128; m is Q4_1's
 * offset (unused otherwise). */
typedef struct {
    uint8_t q[4][RT_QK];
    float d[4], m[4];
} panel_q8;

enum { KIND_Q4_0, KIND_Q4_1, KIND_Q8_0 };

AI __m256i q4_unpack(const uint8_t *qs) { /* elements 0..31 as bytes 0..15 */
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* Unpacks nr rows; meanwhile the next nr rows (one contiguous stretch:
 * the next panel) are prefetched linearly, as the GEMVs do: short row runs
 * read side by side are not followed by the hardware prefetcher, and
 * batched decode unpacks each panel for one token group just before its
 * tiles (kernel lab, Q8_0 [49152,576] x 8 tokens streamed from DRAM, one
 * thread: 2.7 ms with this prefetch, 3.1 without, 3.3 four panels ahead). */
AI void pk_kind(int64_t k, const char *w, size_t ws, int nr, panel_q8 *o, const int kind) {
    const int64_t nb = k / RT_QK;
    const size_t pstep = ((size_t)nr * ws + (size_t)nb - 1) / (size_t)nb;
    const char *pf = w + (size_t)nr * ws;
    for (int64_t b = 0; b < nb; b++, o++) {
        for (size_t off = 0; off < pstep; off += 48) _mm_prefetch(pf + off, _MM_HINT_T0);
        pf += pstep;
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
}
