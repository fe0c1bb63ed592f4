/* cuda_paged_attn — PAGED_ATTENTION, flash-decoding style (split-KV, GQA).
 *
 * One CTA (4 warps) per (kv head g, query row i, split sp). It serves all G
 * = h / kvh query heads of its kv head, so every K/V row is read once for
 * the whole group. The context of row i, keys lo..hi (see ops.h), is cut
 * into n_splits ranges of split_len keys; split sp takes keys
 * lo + sp*split_len .. that + split_len - 1 (clipped to hi; possibly none).
 *
 * Inside a CTA, warp w takes keys in runs of FD_U = 4 (keys kb + 4w ..,
 * then + 16, ...): it loads the 4 K rows (lane l holds dims l*DPL ..
 * l*DPL+DPL-1, hd = 32*DPL), forms the 4 x G scores with warp reductions,
 * updates its own online softmax (running max m, sum l, accumulator acc per
 * head), then loads the 4 V rows. The 4 warps' states are merged through
 * shared memory. With one split the CTA writes the normalised output; with
 * several it writes (acc, m, l) partials, and the last CTA of the row and
 * kv head to finish (an atomic counter) merges them:
 *   M = max m_s, L = sum l_s e^(m_s - M), out = sum acc_s e^(m_s - M) / L.
 *
 * n_splits is chosen from the host-known upper bound of the context
 * (block-table width x block size), not from the device-side seq_lens, so
 * the launch shape depends only on the batch shape (CUDA-graph friendly);
 * splits past a sequence's end exit after writing an empty partial.
 *
 * K/V: f32, f16 or bf16 caches [num_blocks, B, kvh, hd]; hd in {64, 128,
 * 256}, G <= 8 and vector-aligned rows (cuda_fd_eligible); other shapes use
 * the tiled kernel of cuda_attention.cu. Scores and softmax are f32 with
 * expf, like the CPU reference.
 */
#include "backends/cuda/cuda_internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>

#define FD_WARPS 4
#define FD_U 4

typedef struct {
    const char *q, *k, *v;
    char *out;
    int64_t q_s0, q_s1, o_s0, o_s1;       /* bytes */
    int64_t k_s0, k_sb, k_s1, v_s0, v_sb, v_s1; /* bytes: block, slot, kv head */
    const int32_t *bt, *qsl, *seq_lens;
    int S, max_blocks, B, num_blocks, G, h, window, n_splits, split_len;
    float scale, softcap;
    float *part;    /* [T, h, n_splits, hd] unnormalised acc */
    float *part_ml; /* [T, h, n_splits, 2] (m, l) */
    int *counters;  /* [T, kvh] finished splits (zero between launches) */
    int *flags;
} fd_args;

/* DPL consecutive cache elements -> f32 (16-, 8- or 4-byte loads). */
template <typename KV, int DPL> __device__ __forceinline__ void fd_load(const char *p, float *f);

template <int DPL> __device__ __forceinline__ void fd_load_u16(const char *p, uint16_t *u) {
    if constexpr (DPL == 8) {
        uint4 w = *(const uint4 *)p;
        memcpy(u, &w, 16);
    } else if constexpr (DPL == 4) {
        uint2 w = *(const uint2 *)p;
        memcpy(u, &w, 8);
    } else {
        uint32_t w = *(const uint32_t *)p;
        memcpy(u, &w, 4);
    }
}

template <> __device__ __forceinline__ void fd_load<__nv_bfloat16, 8>(const char *p, float *f) {
    uint16_t u[8];
    fd_load_u16<8>(p, u);
#pragma unroll
    for (int e = 0; e < 8; e++) f[e] = __uint_as_float((uint32_t)u[e] << 16);
}
template <> __device__ __forceinline__ void fd_load<__nv_bfloat16, 4>(const char *p, float *f) {
    uint16_t u[4];
    fd_load_u16<4>(p, u);
#pragma unroll
    for (int e = 0; e < 4; e++) f[e] = __uint_as_float((uint32_t)u[e] << 16);
}
template <> __device__ __forceinline__ void fd_load<__nv_bfloat16, 2>(const char *p, float *f) {
    uint16_t u[2];
    fd_load_u16<2>(p, u);
#pragma unroll
    for (int e = 0; e < 2; e++) f[e] = __uint_as_float((uint32_t)u[e] << 16);
}
template <> __device__ __forceinline__ void fd_load<__half, 8>(const char *p, float *f) {
    uint16_t u[8];
    fd_load_u16<8>(p, u);
#pragma unroll
    for (int e = 0; e < 8; e++) f[e] = __half2float(__ushort_as_half(u[e]));
}
template <> __device__ __forceinline__ void fd_load<__half, 4>(const char *p, float *f) {
    uint16_t u[4];
    fd_load_u16<4>(p, u);
#pragma unroll
    for (int e = 0; e < 4; e++) f[e] = __half2float(__ushort_as_half(u[e]));
}
template <> __device__ __forceinline__ void fd_load<__half, 2>(const char *p, float *f) {
    uint16_t u[2];
    fd_load_u16<2>(p, u);
#pragma unroll
    for (int e = 0; e < 2; e++) f[e] = __half2float(__ushort_as_half(u[e]));
}
template <> __device__ __forceinline__ void fd_load<float, 8>(const char *p, float *f) {
    float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
template <> __device__ __forceinline__ void fd_load<float, 4>(const char *p, float *f) {
    float4 a = *(const float4 *)p;
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
}
template <> __device__ __forceinline__ void fd_load<float, 2>(const char *p, float *f) {
    float2 a = *(const float2 *)p;
    f[0] = a.x, f[1] = a.y;
}

/* Block of key j (through the block table; a bad block id is flagged and
 * block 0 read instead, so memory stays in bounds). */
__device__ __forceinline__ int fd_block(const fd_args &a, const int32_t *btrow, int j) {
    int32_t blk = btrow[j / a.B];
    if (blk < 0 || blk >= a.num_blocks) {
        atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
        blk = 0;
    }
    return blk;
}

template <typename KV, int DPL, int GM> __global__ void __launch_bounds__(FD_WARPS * 32) k_fd(fd_args a) {
    CUDA_PDL_ENTER();
    constexpr int HD = 32 * DPL;
    __shared__ float sm_acc[FD_WARPS][GM][HD];
    __shared__ float sm_m[FD_WARPS][GM], sm_l[FD_WARPS][GM];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = blockIdx.x, sp = blockIdx.z, G = a.G;
    const int64_t i = blockIdx.y;

    /* The sequence of row i: the last s with qsl[s] <= i. */
    int s0 = 0, s1 = a.S - 1;
    while (s0 < s1) {
        int mid = (s0 + s1 + 1) / 2;
        if (a.qsl[mid] <= i) s0 = mid;
        else s1 = mid - 1;
    }
    const int q_len = a.qsl[s0 + 1] - a.qsl[s0], sl = a.seq_lens[s0];
    const bool bad = q_len <= 0 || q_len > sl || sl > a.max_blocks * a.B || i < a.qsl[s0] || i >= a.qsl[s0 + 1];
    if (bad && threadIdx.x == 0 && sp == 0) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
    const int hi = bad ? -1 : sl - q_len + (int)(i - a.qsl[s0]);
    const int lo = a.window > 0 && hi - a.window + 1 > 0 ? hi - a.window + 1 : 0;
    const int kb = lo + sp * a.split_len;
    const int ke = min(hi, kb + a.split_len - 1); /* kb > ke: no keys */
    const int32_t *btrow = a.bt + (int64_t)s0 * a.max_blocks;
    const char *kbase = a.k + (int64_t)g * a.k_s1 + lane * DPL * (int)sizeof(KV);
    const char *vbase = a.v + (int64_t)g * a.v_s1 + lane * DPL * (int)sizeof(KV);

    float qr[GM][DPL], acc[GM][DPL], m[GM], l[GM];
#pragma unroll
    for (int gg = 0; gg < GM; gg++) {
        m[gg] = -INFINITY;
        l[gg] = 0.0f;
#pragma unroll
        for (int d = 0; d < DPL; d++) acc[gg][d] = qr[gg][d] = 0.0f;
        if (gg < G) {
            const float *qp = (const float *)(a.q + i * a.q_s0 + (int64_t)(g * G + gg) * a.q_s1) + lane * DPL;
#pragma unroll
            for (int d = 0; d < DPL; d++) qr[gg][d] = qp[d];
        }
    }

    for (int j0 = kb + warp * FD_U; j0 <= ke; j0 += FD_WARPS * FD_U) {
        float kf[FD_U][DPL];
        int blk[FD_U], slot[FD_U];
#pragma unroll
        for (int u = 0; u < FD_U; u++) {
            int j = j0 + u;
            blk[u] = j <= ke ? fd_block(a, btrow, j) : 0;
            slot[u] = j % a.B;
            if (j <= ke) fd_load<KV, DPL>(kbase + blk[u] * a.k_s0 + slot[u] * a.k_sb, kf[u]);
            else {
#pragma unroll
                for (int d = 0; d < DPL; d++) kf[u][d] = 0.0f;
            }
        }
        float s[FD_U][GM];
#pragma unroll
        for (int u = 0; u < FD_U; u++)
#pragma unroll
            for (int gg = 0; gg < GM; gg++) {
                float t = 0.0f;
#pragma unroll
                for (int d = 0; d < DPL; d++) t += qr[gg][d] * kf[u][d];
                s[u][gg] = t;
            }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int u = 0; u < FD_U; u++)
#pragma unroll
                for (int gg = 0; gg < GM; gg++) s[u][gg] += __shfl_xor_sync(0xffffffffu, s[u][gg], o);
        float p[FD_U][GM];
#pragma unroll
        for (int gg = 0; gg < GM; gg++) {
            float mx = m[gg];
#pragma unroll
            for (int u = 0; u < FD_U; u++) {
                float t = s[u][gg] * a.scale;
                if (a.softcap > 0.0f) t = a.softcap * tanhf(t / a.softcap);
                s[u][gg] = t;
                if (j0 + u <= ke) mx = fmaxf(mx, t);
            }
            float corr = expf(m[gg] - mx); /* 0 on the first run (m = -inf) */
            m[gg] = mx;
            l[gg] *= corr;
#pragma unroll
            for (int d = 0; d < DPL; d++) acc[gg][d] *= corr;
#pragma unroll
            for (int u = 0; u < FD_U; u++) {
                p[u][gg] = j0 + u <= ke ? expf(s[u][gg] - mx) : 0.0f;
                l[gg] += p[u][gg];
            }
        }
#pragma unroll
        for (int u = 0; u < FD_U; u++) {
            if (j0 + u > ke) break;
            float vf[DPL];
            fd_load<KV, DPL>(vbase + blk[u] * a.v_s0 + slot[u] * a.v_sb, vf);
#pragma unroll
            for (int gg = 0; gg < GM; gg++)
#pragma unroll
                for (int d = 0; d < DPL; d++) acc[gg][d] += p[u][gg] * vf[d];
        }
    }

    /* Merge the warps. */
#pragma unroll
    for (int gg = 0; gg < GM; gg++) {
#pragma unroll
        for (int d = 0; d < DPL; d++) sm_acc[warp][gg][lane * DPL + d] = acc[gg][d];
        if (lane == 0) {
            sm_m[warp][gg] = m[gg];
            sm_l[warp][gg] = l[gg];
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < G * HD; e += FD_WARPS * 32) {
        int gg = e / HD, d = e % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < FD_WARPS; w++) M = fmaxf(M, sm_m[w][gg]);
        float L = 0.0f, A = 0.0f;
#pragma unroll
        for (int w = 0; w < FD_WARPS; w++) {
            float f = sm_m[w][gg] == -INFINITY ? 0.0f : expf(sm_m[w][gg] - M);
            L += sm_l[w][gg] * f;
            A += sm_acc[w][gg][d] * f;
        }
        int64_t hq = (int64_t)g * G + gg;
        if (a.n_splits == 1) {
            ((float *)(a.out + i * a.o_s0 + hq * a.o_s1))[d] = L > 0.0f ? A / L : 0.0f;
        } else {
            int64_t pi = (i * a.h + hq) * a.n_splits + sp;
            a.part[pi * HD + d] = A;
            if (d == 0) {
                a.part_ml[pi * 2] = M;
                a.part_ml[pi * 2 + 1] = L;
            }
        }
    }
    if (a.n_splits == 1) return;
    /* The last CTA of (row i, kv head g) to finish merges the n_splits
     * partials (threadfence + counter: the others' writes are visible to
     * it) and resets the counter for the next launch or graph replay. */
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int *cnt = a.counters + i * gridDim.x + g;
        last = atomicAdd(cnt, 1) == a.n_splits - 1;
        if (last) *cnt = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int e = threadIdx.x; e < G * HD; e += FD_WARPS * 32) {
        int gg = e / HD, d = e % HD;
        int64_t hq = (int64_t)g * G + gg, base = (i * a.h + hq) * a.n_splits;
        float M = -INFINITY;
        for (int t = 0; t < a.n_splits; t++) M = fmaxf(M, __ldcg(a.part_ml + (base + t) * 2));
        float L = 0.0f, A = 0.0f;
        for (int t = 0; t < a.n_splits; t++) {
            float ms = __ldcg(a.part_ml + (base + t) * 2);
            float f = ms == -INFINITY ? 0.0f : expf(ms - M);
            L += __ldcg(a.part_ml + (base + t) * 2 + 1) * f;
            A += __ldcg(a.part + (base + t) * HD + d) * f;
        }
        ((float *)(a.out + i * a.o_s0 + hq * a.o_s1))[d] = L > 0.0f ? A / L : 0.0f;
    }
}

/* ---- prefill: query tiles sharing K/V tiles in shared memory ------------
 *
 * For batches that are mostly prompt rows, one CTA (8 warps) serves PF_Q =
 * 32 queries of one kv head: QT = PF_Q / G consecutive rows x the G heads
 * of the group (query qi: row r0 + qi / G, head g*G + qi % G). Rows of
 * different sequences in a tile are handled one sequence ("segment") after
 * the other. For each tile of PF_KT keys of the segment's key range, K and V
 * are loaded once into shared memory (f32; K rows padded by one float so the
 * lanes' rows fall into different banks) and every query of the CTA uses
 * them: warp w owns queries w, w+8, w+16, w+24; lane j scores key j of the
 * tile (masked to the query's lo..hi), the warp updates its online softmax
 * and accumulates P.V with lane l owning dims l*DPL..l*DPL+DPL-1.
 * hd in {64, 128}. */
#define PF_WARPS 8
#define PF_Q 32
#define PF_KT 32

static size_t pf_smem(int hd) { return (size_t)(PF_Q * hd + PF_KT * (hd + 1) + PF_KT * hd) * sizeof(float); }

/* Sequence of row i: the last s with qsl[s] <= i. */
__device__ __forceinline__ int pf_seq(const fd_args &a, int64_t i) {
    int s0 = 0, s1 = a.S - 1;
    while (s0 < s1) {
        int mid = (s0 + s1 + 1) / 2;
        if (a.qsl[mid] <= i) s0 = mid;
        else s1 = mid - 1;
    }
    return s0;
}

template <typename KV, int DPL> __global__ void __launch_bounds__(PF_WARPS * 32) k_pf(fd_args a, int64_t T) {
    constexpr int HD = 32 * DPL;
    extern __shared__ float pf_sm[];
    float *qs = pf_sm, *ks = qs + PF_Q * HD, *vs = ks + PF_KT * (HD + 1);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, G = a.G, QT = PF_Q / G, g = blockIdx.x;
    const int64_t r0 = (int64_t)blockIdx.y * QT, r1 = r0 + QT < T ? r0 + QT : T;
    for (int64_t r = r0; r < r1;) {
        const int s = pf_seq(a, r);
        const int q_len = a.qsl[s + 1] - a.qsl[s], sl = a.seq_lens[s];
        const int64_t seg_end = a.qsl[s + 1] < r1 ? a.qsl[s + 1] : r1;
        const bool bad = q_len <= 0 || q_len > sl || sl > a.max_blocks * a.B || r < a.qsl[s] || seg_end <= r;
        const int nq = bad ? 0 : (int)(seg_end - r) * G;
        if (bad && threadIdx.x == 0) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
        const int base = sl - q_len - a.qsl[s]; /* position of row i: base + i */
        const int hi_max = bad ? -1 : base + (int)(seg_end - 1);
        const int hi_min = base + (int)r;
        const int lo_min = a.window > 0 && hi_min - a.window + 1 > 0 ? hi_min - a.window + 1 : 0;
        const int32_t *btrow = a.bt + (int64_t)s * a.max_blocks;
        __syncthreads(); /* the previous segment is done with qs */
        for (int e = threadIdx.x; e < nq * HD; e += PF_WARPS * 32) {
            int qi = e / HD, d = e % HD;
            int64_t row = r + qi / G, hq = (int64_t)g * G + qi % G;
            qs[e] = ((const float *)(a.q + row * a.q_s0 + hq * a.q_s1))[d];
        }
        float m[4], l[4], acc[4][DPL];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            m[k] = -INFINITY;
            l[k] = 0.0f;
#pragma unroll
            for (int e = 0; e < DPL; e++) acc[k][e] = 0.0f;
        }
        for (int kt0 = lo_min; kt0 <= hi_max; kt0 += PF_KT) {
            const int cnt = hi_max - kt0 + 1 < PF_KT ? hi_max - kt0 + 1 : PF_KT;
            __syncthreads(); /* previous tile consumed (and qs stored) */
            for (int e = threadIdx.x; e < PF_KT * (HD / DPL); e += PF_WARPS * 32) {
                int j = e / (HD / DPL), d0 = (e % (HD / DPL)) * DPL;
                float kf[DPL], vf[DPL];
                if (j < cnt) {
                    int key = kt0 + j, blk = fd_block(a, btrow, key), slot = key % a.B;
                    fd_load<KV, DPL>(a.k + blk * a.k_s0 + slot * a.k_sb + (int64_t)g * a.k_s1 + d0 * (int)sizeof(KV), kf);
                    fd_load<KV, DPL>(a.v + blk * a.v_s0 + slot * a.v_sb + (int64_t)g * a.v_s1 + d0 * (int)sizeof(KV), vf);
                } else {
#pragma unroll
                    for (int x = 0; x < DPL; x++) kf[x] = vf[x] = 0.0f;
                }
#pragma unroll
                for (int x = 0; x < DPL; x++) {
                    ks[j * (HD + 1) + d0 + x] = kf[x];
                    vs[j * HD + d0 + x] = vf[x];
                }
            }
            __syncthreads();
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int qi = warp + PF_WARPS * k;
                if (qi >= nq) break;
                const int hi = base + (int)(r + qi / G);
                const int lo = a.window > 0 && hi - a.window + 1 > 0 ? hi - a.window + 1 : 0;
                if (kt0 > hi || kt0 + cnt - 1 < lo) continue; /* warp-uniform */
                const int key = kt0 + lane;
                const bool valid = lane < cnt && key >= lo && key <= hi;
                const float *qr = qs + qi * HD, *kr = ks + lane * (HD + 1);
                float sc = 0.0f;
#pragma unroll 8
                for (int d = 0; d < HD; d++) sc += qr[d] * kr[d];
                sc *= a.scale;
                if (a.softcap > 0.0f) sc = a.softcap * tanhf(sc / a.softcap);
                float mt = valid ? sc : -INFINITY;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
                const float mn = fmaxf(m[k], mt), corr = expf(m[k] - mn);
                float p = valid ? expf(sc - mn) : 0.0f, ps = p;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
                l[k] = l[k] * corr + ps;
                m[k] = mn;
#pragma unroll
                for (int e = 0; e < DPL; e++) acc[k][e] *= corr;
                for (int j = 0; j < cnt; j++) {
                    float pj = __shfl_sync(0xffffffffu, p, j);
                    const float *vr = vs + j * HD + lane * DPL;
#pragma unroll
                    for (int e = 0; e < DPL; e++) acc[k][e] += pj * vr[e];
                }
            }
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int qi = warp + PF_WARPS * k;
            if (qi >= nq) break;
            int64_t row = r + qi / G, hq = (int64_t)g * G + qi % G;
            float *o = (float *)(a.out + row * a.o_s0 + hq * a.o_s1) + lane * DPL;
#pragma unroll
            for (int e = 0; e < DPL; e++) o[e] = l[k] > 0.0f ? acc[k][e] / l[k] : 0.0f;
        }
        if (bad) { /* zero the rows of a bad segment */
            for (int64_t row = r; row < (seg_end > r ? seg_end : r + 1); row++)
                for (int e = threadIdx.x; e < G * HD; e += PF_WARPS * 32)
                    ((float *)(a.out + row * a.o_s0 + ((int64_t)g * G + e / HD) * a.o_s1))[e % HD] = 0.0f;
        }
        r = seg_end > r ? seg_end : r + 1;
    }
}

bool cuda_fd_eligible(const rt_tensor *q, const rt_tensor *kc, const rt_tensor *vc) {
    int64_t h = q->shape[1], hd = q->shape[2], kvh = kc->shape[2];
    if (hd != 64 && hd != 128 && hd != 256) return false;
    if (kvh <= 0 || h % kvh || h / kvh > 8) return false;
    if (kc->dtype != RT_F32 && kc->dtype != RT_F16 && kc->dtype != RT_BF16) return false;
    int64_t vec = (hd / 32) * (int64_t)rt_dtype_info(kc->dtype)->block_bytes; /* bytes a lane loads */
    const rt_tensor *ts[2] = {kc, vc};
    for (int t = 0; t < 2; t++)
        if ((uintptr_t)ts[t]->data % (uintptr_t)vec || ts[t]->stride[0] % vec || ts[t]->stride[1] % vec ||
            ts[t]->stride[2] % vec || ts[t]->stride[3] != rt_dtype_info(kc->dtype)->block_bytes)
            return false;
    return q->stride[2] == 4 && q->stride[1] % 4 == 0 && q->stride[0] % 4 == 0;
}

template <typename KV, int DPL> static void fd_launch_g(const fd_args &a, dim3 grid, cudaStream_t st) {
    if (a.G <= 2) cuda_launch(k_fd<KV, DPL, 2>, grid, FD_WARPS * 32, 0, st, a);
    else cuda_launch(k_fd<KV, DPL, 8>, grid, FD_WARPS * 32, 0, st, a);
}

template <typename KV> static void fd_launch_kv(const fd_args &a, int hd, dim3 grid, cudaStream_t st) {
    if (hd == 64) fd_launch_g<KV, 2>(a, grid, st);
    else if (hd == 128) fd_launch_g<KV, 4>(a, grid, st);
    else fd_launch_g<KV, 8>(a, grid, st);
}

int cuda_fd_run(cuda_ctx *c, rt_tensor *dst, const rt_tensor *q, const rt_tensor *kc, const rt_tensor *vc,
                const rt_tensor *bt, const rt_tensor *qsl, const rt_tensor *sl, float scale, float softcap,
                int32_t window) {
    fd_args a;
    memset(&a, 0, sizeof a);
    int64_t T = q->shape[0], h = q->shape[1], hd = q->shape[2], kvh = kc->shape[2];
    a.q = (const char *)q->data;
    a.k = (const char *)kc->data;
    a.v = (const char *)vc->data;
    a.out = (char *)dst->data;
    a.q_s0 = q->stride[0];
    a.q_s1 = q->stride[1];
    a.o_s0 = dst->stride[0];
    a.o_s1 = dst->stride[1];
    a.k_s0 = kc->stride[0];
    a.k_sb = kc->stride[1];
    a.k_s1 = kc->stride[2];
    a.v_s0 = vc->stride[0];
    a.v_sb = vc->stride[1];
    a.v_s1 = vc->stride[2];
    a.bt = (const int32_t *)bt->data;
    a.qsl = (const int32_t *)qsl->data;
    a.seq_lens = (const int32_t *)sl->data;
    a.S = (int)bt->shape[0];
    a.max_blocks = (int)bt->shape[1];
    a.B = (int)kc->shape[1];
    a.num_blocks = (int)kc->shape[0];
    a.G = (int)(h / kvh);
    a.h = (int)h;
    a.window = window;
    a.scale = scale;
    a.softcap = softcap;
    a.flags = c->d_flags;
    if ((int64_t)a.max_blocks * a.B > INT32_MAX / 2 || T > 65535 || kvh > 65535)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda paged attention: context or batch too large");
    /* Mostly prompt rows (T >= 4 rows per sequence on average): the
     * prefill kernel, whose K/V tiles serve 32 queries at once. */
    if (T >= 4 * (int64_t)a.S && T >= 64 && (hd == 64 || hd == 128)) {
        int QT = PF_Q / a.G;
        dim3 pgrid((unsigned)kvh, (unsigned)((T + QT - 1) / QT));
        size_t smem = pf_smem((int)hd);
        cudaError_t e = cudaSuccess;
/* The opt-in to > 48 KiB of shared memory is per device: set it at every
 * (prefill-sized, so rare) launch rather than caching it in a static. */
#define PF_GO(KV, DPL)                                                                                   \
    do {                                                                                                 \
        e = cudaFuncSetAttribute(k_pf<KV, DPL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);  \
        if (e == cudaSuccess) cuda_launch(k_pf<KV, DPL>, pgrid, PF_WARPS * 32, smem, c->stream, a, T);  \
    } while (0)
        if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
        if (kc->dtype == RT_BF16) {
            if (hd == 64) PF_GO(__nv_bfloat16, 2);
            else PF_GO(__nv_bfloat16, 4);
        } else if (kc->dtype == RT_F16) {
            if (hd == 64) PF_GO(__half, 2);
            else PF_GO(__half, 4);
        } else {
            if (hd == 64) PF_GO(float, 2);
            else PF_GO(float, 4);
        }
#undef PF_GO
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e != cudaSuccess) return cuda_fail(e, "prefill attention launch", __FILE__, __LINE__);
        return VC_OK;
    }
    /* Upper bound of a row's context, then enough splits for ~4 CTAs per SM
     * (each split at least 16 keys: one run of FD_U keys per warp, so a
     * decode row's CTAs finish after few dependent memory round trips). */
    int64_t ctx = (int64_t)a.max_blocks * a.B;
    if (window > 0 && window < ctx) ctx = window;
    int64_t want = (4 * (int64_t)c->n_sm + T * kvh - 1) / (T * kvh);
    int64_t most = (ctx + FD_WARPS * FD_U - 1) / (FD_WARPS * FD_U);
    int64_t ns = want < most ? want : most;
    if (ns < 1) ns = 1;
    if (ns > 1024) ns = 1024;
    a.n_splits = (int)ns;
    a.split_len = (int)((ctx + ns - 1) / ns);
    void *tmp = NULL;
    if (ns > 1) { /* partials in the persistent workspace (graph-safe); the bound always holds */
        size_t n = (size_t)(T * h * ns);
        if (n * (size_t)(hd + 2) <= CUDA_FD_WS_FLOATS(c->n_sm)) {
            a.part = c->fd_ws;
        } else {
            tmp = cuda_tmp_alloc(c, n * (size_t)(hd + 2) * 4);
            if (!tmp) return VC_ERR_OOM;
            a.part = (float *)tmp;
        }
        a.part_ml = a.part + n * (size_t)hd;
        a.counters = c->fd_cnt; /* T * kvh < 4 * n_sm when ns > 1 */
    }
    if (cuda_enter(c) < 0) {
        cuda_tmp_free(c, tmp);
        return VC_ERR_RUNTIME;
    }
    dim3 grid((unsigned)kvh, (unsigned)T, (unsigned)ns);
    switch (kc->dtype) {
    case RT_BF16: fd_launch_kv<__nv_bfloat16>(a, (int)hd, grid, c->stream); break;
    case RT_F16: fd_launch_kv<__half>(a, (int)hd, grid, c->stream); break;
    default: fd_launch_kv<float>(a, (int)hd, grid, c->stream); break;
    }
    cudaError_t e = cudaGetLastError();
    cuda_tmp_free(c, tmp);
    if (e != cudaSuccess) return cuda_fail(e, "paged attention launch", __FILE__, __LINE__);
    return VC_OK;
}
