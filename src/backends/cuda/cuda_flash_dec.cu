/* cuda_flash_dec — tensor-core decode attention for PAGED_ATTENTION over
 * bf16/f16 caches: batches of decode rows (few queries per sequence),
 * where the SIMT split-KV kernel k_fd (cuda_paged_attn.cu) is bound by its
 * instructions (~0.4-0.5 of the copy bandwidth on the H200 at 64-256 rows
 * of 1,024 keys; this kernel ~0.9).
 *
 * Work split. One warp per item = (query row i, kv head g, split sp): the
 * warp's 16-row m-tile holds the G <= 16 query heads of the group (packed
 * row r = head g*G + r; rows >= G are zero and never stored), so every K/V
 * row is read once per group. A CTA of FD2_NW independent warps (no block
 * barrier) loops over the items, item += all warps of the grid; the grid
 * is at most one wave (n_sm CTAs: the shared memory allows one CTA per SM).
 * When rows x kv heads would not fill that wave, each row's keys are cut
 * into ns splits (flash-decoding: len = ceil(n / ns) rounded up to a tile,
 * so short rows leave late splits empty); each split writes unnormalised
 * partials (O, and per head m in the scores' log2 domain and l) into the
 * persistent workspace, and k_flash_dec_merge (one warp per row and query
 * head) combines them. ns depends on the batch shape and the host's
 * context bound only (CUDA-graph friendly).
 *
 * Each warp has its own FD2_NST-stage ring of K/V tiles of FD2_TN keys in
 * shared memory ([TN][hd + FL_PAD] bf16/f16 for K, then V), filled by
 * 16-byte cp.async from the paged cache (fl_load_rows: keys past the
 * split's last key zero-filled, a bad block id reads block 0 and raises the
 * flag); NST - 1 tiles are in flight while one is computed.
 *
 * Per tile, as k_flash (cuda_flash.cu) for one m-tile: S = Q K^T by
 * mma.sync m16n8k16 (Q fragments in registers, K via ldmatrix), scores in
 * the log2 domain with the scale folded into the exponent's FMA (soft-cap
 * transforms them first), masked only in a tile that crosses the split's
 * last key, online softmax per packed row (a quad of lanes shares a row),
 * P rounded to the cache dtype as the A operand of O += P V (V via
 * ldmatrix.trans). out = O / l (0 for a row with no keys). Precision as
 * the flash kernels: q and p rounded to the cache dtype (~1e-3 normalised
 * against the f32 reference), f32 accumulation.
 *
 * Shapes: cuda_flash_eligible (hd 64/128, power-of-two blocks, 16-byte
 * aligned rows, 32-bit strides) and G <= 16; q / out f32 or bf16 rows.
 */
#include "backends/cuda/cuda_flash.h"
#include "backends/cuda/cuda_flash_common.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FD2_MAXG 16

/* Bytes of shared memory of a CTA: w warps x st stages x (K, V) [n][hd + FL_PAD]. */
static size_t fd2_smem(int hd, int n, int st, int w) { return (size_t)w * st * 2 * n * (hd + FL_PAD) * 2; }

/* The split of the keys (flash-decoding): each (row, kv head) item is cut
 * into ns ranges; with ns > 1 the warps write unnormalised partials (O,
 * and per head (m, l) with m in the log2 domain of the scores) that
 * k_flash_dec_merge combines. */
typedef struct {
    int kvh, n_items, ns; /* n_items = rows x kvh x ns */
    float *part;          /* [T, h, ns, hd] (ns > 1) */
    float *part_ml;       /* [T, h, ns, 2] */
} fd2_split;

__device__ __forceinline__ int kvh_h(const fd2_split &p, int G) { return p.kvh * G; } /* query heads */

/* TN keys per tile, NST stages per warp, NW warps per CTA (one CTA per SM). */
template <typename KV, typename A, int HD, int TN, int NST, int NW>
__global__ void __launch_bounds__(NW * 32, 1) k_flash_dec(fl_args a, fd2_split p) {
    CUDA_PDL_ENTER();
    constexpr int LD = HD + FL_PAD; /* smem row pitch, elements */
    constexpr int KS = HD / 16;     /* k-steps of Q K^T */
    constexpr int NO = HD / 8;      /* n-tiles of O */
    constexpr int NJ = TN / 8;      /* n-tiles of S */
    constexpr uint32_t STAGE = 2 * TN * LD * 2; /* bytes: K then V */
    extern __shared__ __align__(16) uint16_t fd2_sm[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
    const int mi = lane >> 3, rr = lane & 7; /* ldmatrix: matrix and row this lane addresses */
    uint16_t *const ring = fd2_sm + (size_t)warp * NST * 2 * TN * LD;
    const int lc = lane % (HD / 8), lj0 = lane / (HD / 8); /* this lane's 16-byte chunk and first row */
    const uint32_t sm_kv = fl_smem_addr(ring) + (uint32_t)(lj0 * LD + lc * 8) * 2;
    const int G = a.G;

    for (int item = (int)blockIdx.x * NW + warp; item < p.n_items; item += (int)gridDim.x * NW) {
        const int sp = item % p.ns, ig = item / p.ns;
        const int64_t i = ig / p.kvh;
        const int g = ig % p.kvh;
        const int s = cuda_row_seq(a.qsl, a.S, i);
        const int r0 = a.qsl[s], q_len = a.qsl[s + 1] - r0, sl = a.seq_lens[s];
        const bool bad = q_len <= 0 || q_len > sl || sl > a.max_blocks * a.B || i < r0 || i >= r0 + q_len;
        if (bad && lane == 0 && sp == 0) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
        const int rhi = bad ? -1 : sl - q_len + (int)(i - r0);
        const int rlo = a.window > 0 && rhi - a.window + 1 > 0 ? rhi - a.window + 1 : 0;
        /* split sp of the row's n keys: len = ceil(n / ns) rounded up to a
         * tile (at least one tile), so a short row leaves late splits empty */
        const int n = rhi - rlo + 1, len = max(TN, ((n + p.ns - 1) / p.ns + TN - 1) / TN * TN);
        const int lo = rlo + sp * len, hi = min(rhi, lo + len - 1);
        const int32_t *btrow = a.bt + (int64_t)s * a.max_blocks;
        const int kin = g * a.k_s1 + lc * 16, vin = g * a.v_s1 + lc * 16;
        const int n_kt = hi >= lo ? (hi - lo) / TN + 1 : 0;

        /* the first NST - 1 tiles in flight before Q is read */
#pragma unroll
        for (int st = 0; st < NST - 1; st++) {
            if (st < n_kt)
                fl_load_rows<HD, TN, 32>(a, btrow, kin, vin, lo + st * TN, hi, sm_kv + st * STAGE, lane);
            fl_cp_commit();
        }

        /* Q fragments (row-major 16 x HD): rows gq and gq + 8 = heads of the group */
        uint32_t qf[KS][4];
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            const int r = gq + 8 * h2;
            const bool live = r < G && !bad;
            const char *qrow = a.q + i * a.q_s0 + (int64_t)(g * G + (live ? r : 0)) * a.q_s1;
#pragma unroll
            for (int ks = 0; ks < KS; ks++)
#pragma unroll
                for (int half = 0; half < 2; half++)
                    qf[ks][h2 + 2 * half] =
                        live ? fl_ld_q2<A, KV>(qrow + (int64_t)(ks * 16 + half * 8 + 2 * tq) * (int64_t)sizeof(A)) : 0u;
        }

        float o[NO][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < NO; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

        for (int it = 0; it < n_kt; it++) {
            fl_cp_wait<NST - 2>(); /* tile it landed (this lane's part) */
            __syncwarp();             /* ... and the warp's; stage (it - 1) % NST is free */
            {
                const int nx = it + NST - 1;
                if (nx < n_kt)
                    fl_load_rows<HD, TN, 32>(a, btrow, kin, vin, lo + nx * TN, hi,
                                                sm_kv + (uint32_t)(nx % NST) * STAGE, lane);
                fl_cp_commit();
            }
            const int kt0 = lo + it * TN;
            const uint16_t *ks_ = ring + (size_t)(it % NST) * 2 * TN * LD, *vs = ks_ + TN * LD;

            /* S = Q K^T: 16 rows x TN keys, NJ n-tiles of 8 keys */
            float sc[NJ][4];
#pragma unroll
            for (int j = 0; j < NJ; j++) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
#pragma unroll
                for (int jp = 0; jp < NJ / 2; jp++) { /* two n-tiles per ldmatrix.x4 */
                    uint32_t b[4];
                    fl_ldsm_x4(b, ks_ + (jp * 16 + (mi >> 1) * 8 + rr) * LD + ks * 16 + (mi & 1) * 8);
                    fl_mma<KV>(sc[2 * jp], qf[ks], b[0], b[1]);
                    fl_mma<KV>(sc[2 * jp + 1], qf[ks], b[2], b[3]);
                }
            }

            const float scl = fl_log2_scores<NJ>(sc, a); /* scores into the log2 domain: s * scl */
            /* keys past hi (the last tile) masked; tiles start at lo */
            if (kt0 + TN - 1 > hi) {
#pragma unroll
                for (int j = 0; j < NJ; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        sc[j][e] = kt0 + j * 8 + 2 * tq + (e & 1) <= hi ? sc[j][e] : -INFINITY;
            }
            float mb[2], corr[2];
#pragma unroll
            for (int h2 = 0; h2 < 2; h2++) fl_row_max<NJ>(sc, h2, scl, m[h2], l[h2], mb[h2], corr[h2]);
            if (!__all_sync(0xffffffffu, corr[0] == 1.0f && corr[1] == 1.0f)) {
#pragma unroll
                for (int j = 0; j < NO; j++) {
                    o[j][0] *= corr[0];
                    o[j][1] *= corr[0];
                    o[j][2] *= corr[1];
                    o[j][3] *= corr[1];
                }
            }
            float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
            for (int j = 0; j < NJ; j++) {
#pragma unroll
                for (int e = 0; e < 4; e++) sc[j][e] = fl_exp2(fmaf(sc[j][e], scl, -mb[e >> 1]));
                s0 += sc[j][0] + sc[j][1];
                s1 += sc[j][2] + sc[j][3];
            }
            l[0] += s0;
            l[1] += s1;

            /* O += P V: P from the score registers, V via ldmatrix.trans */
#pragma unroll
            for (int kk = 0; kk < TN / 16; kk++) {
                uint32_t pa[4];
                pa[0] = fl_pack<KV>(sc[2 * kk][0], sc[2 * kk][1]);
                pa[1] = fl_pack<KV>(sc[2 * kk][2], sc[2 * kk][3]);
                pa[2] = fl_pack<KV>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
                pa[3] = fl_pack<KV>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
                for (int dp = 0; dp < NO / 2; dp++) {
                    uint32_t b[4];
                    fl_ldsm_x4_t(b, vs + (kk * 16 + (mi & 1) * 8 + rr) * LD + dp * 16 + (mi >> 1) * 8);
                    fl_mma<KV>(o[2 * dp], pa, b[0], b[1]);
                    fl_mma<KV>(o[2 * dp + 1], pa, b[2], b[3]);
                }
            }
        }
        fl_cp_wait<0>();
        __syncwarp(); /* the ring is free for the next item */

        /* l summed over the quad; out = O / l, or the split's partials */
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 1);
            l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 2);
        }
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            const int r = gq + 8 * h2;
            if (r >= G) continue;
            const int64_t hq = (int64_t)g * G + r;
            if (p.ns == 1) {
                const float inv = l[h2] > 0.0f ? 1.0f / l[h2] : 0.0f;
                char *orow = a.out + i * a.o_s0 + hq * a.o_s1;
#pragma unroll
                for (int j = 0; j < NO; j++)
                    fl_st_o2<A>(orow + (j * 8 + 2 * tq) * (int)sizeof(A), o[j][2 * h2] * inv, o[j][2 * h2 + 1] * inv);
            } else {
                const int64_t pi = (i * (kvh_h(p, G)) + hq) * p.ns + sp;
                float *prow = p.part + pi * HD;
#pragma unroll
                for (int j = 0; j < NO; j++) *(float2 *)(prow + j * 8 + 2 * tq) = make_float2(o[j][2 * h2], o[j][2 * h2 + 1]);
                if (tq == 0) *(float2 *)(p.part_ml + pi * 2) = make_float2(m[h2], l[h2]);
            }
        }
    }
}

/* Combine the ns partials of each (row, query head): one warp per pair,
 * lane s < ns holds split s's (m, l); out = sum_s O_s 2^(m_s - M) / L with
 * M = max m_s, L = sum_s l_s 2^(m_s - M) (0 for a row without keys). */
template <typename A, int HD> __global__ void __launch_bounds__(128) k_flash_dec_merge(fl_args a, fd2_split p, int64_t pairs) {
    CUDA_PDL_ENTER();
    constexpr int DPL = HD / 32;
    const int lane = threadIdx.x & 31;
    const int64_t pr = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    if (pr >= pairs) return;
    const int h = kvh_h(p, a.G);
    const int64_t i = pr / h, hq = pr % h;
    const float2 ml = lane < p.ns ? __ldcg((const float2 *)p.part_ml + pr * p.ns + lane) : make_float2(-INFINITY, 0.0f);
    float M = ml.x;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    const float f = ml.x == -INFINITY ? 0.0f : fl_exp2(ml.x - M);
    float L = ml.y * f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
    float acc[DPL] = {0.0f};
    const float *src = p.part + pr * p.ns * HD + lane * DPL;
    for (int sp = 0; sp < p.ns; sp++) {
        const float fs = __shfl_sync(0xffffffffu, f, sp);
        if (fs == 0.0f) continue; /* warp-uniform: an empty split */
#pragma unroll
        for (int d = 0; d < DPL; d++) acc[d] += __ldcg(src + sp * HD + d) * fs;
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    char *orow = a.out + i * a.o_s0 + hq * a.o_s1;
#pragma unroll
    for (int d = 0; d < DPL; d += 2)
        fl_st_o2<A>(orow + (lane * DPL + d) * (int)sizeof(A), acc[d] * inv, acc[d + 1] * inv);
}

/* ---- host side ---------------------------------------------------------- */

static uint64_t g_fd2_launches;
uint64_t cuda_flash_dec_launches(void) { return __atomic_load_n(&g_fd2_launches, __ATOMIC_RELAXED); }

/* VLLM_CUDA_FLASH_DEC: 0 never, 1 every eligible call (tests), unset or
 * any other value: calls of at least VLLM_CUDA_FLASH_DEC_MIN (default
 * FD2_MIN_ITEMS) row x kv-head pairs. H200, 8B heads, 1,024 keys: k_fd is
 * faster at 1-2 rows (11.8 vs 14.0 us: its pre-wait loads and one-kernel
 * merge), this kernel from 4 rows (18.8 vs 20.3 us) to 256 (274 vs 508). */
#define FD2_MIN_ITEMS 32
/* the configuration: keys per tile, stages per warp, warps per CTA (the
 * H200 table in docs/BENCHMARKS.md: 32 / 3 / 4 first or within 3% of the
 * first at 32 to 256 rows) */
#define FD2_TN 32
#define FD2_NST 3
#define FD2_NW 4
#define FD2_MAXS 32 /* splits: k_flash_dec_merge keeps one per lane */

bool cuda_flash_dec_wanted(const cuda_ctx *c, const rt_tensor *q, const rt_tensor *kc) {
    (void)c;
    const int64_t T = q->shape[0], h = q->shape[1], hd = q->shape[2], kvh = kc->shape[2];
    if (hd != 64 && hd != 128) return false; /* (cuda_flash_eligible also passes hd 256, for the prefill kernel) */
    if (kvh <= 0 || h % kvh || h / kvh > FD2_MAXG) return false;
    const char *e = getenv("VLLM_CUDA_FLASH_DEC");
    if (e && !strcmp(e, "0")) return false;
    if (e && !strcmp(e, "1")) return true;
    const char *m = getenv("VLLM_CUDA_FLASH_DEC_MIN");
    const long most = m && atol(m) > 0 ? atol(m) : FD2_MIN_ITEMS;
    return T * kvh >= most;
}

/* Splits per (row, kv head): the most that keep rows x kv heads x splits
 * within one wave of warps (NW per SM), so that the slowest warp does 1/ns
 * of a row (VLLM_CUDA_FLASH_DEC_NSRULE=ceil: the fewest that fill the wave,
 * the first rule: at 32 rows x 8 kv heads it gave 3 splits, 1.45 waves,
 * i.e. 2/3 of a row for the slowest warp instead of 1/2, and at 64 rows 2
 * splits and a merge for nothing); at most FD2_MAXS, no more than the
 * tiles of the longest possible row (the host's bound: block-table width
 * or window), and partials that fit the persistent workspace (graph-safe).
 * VLLM_CUDA_FLASH_DEC_SPLITS=n forces n (tests). */
static int fd2_splits(const cuda_ctx *c, int64_t T, int64_t h, int64_t kvh, int64_t hd, int64_t ctx) {
    const int64_t items = T * kvh, wave = (int64_t)FD2_NW * c->n_sm;
    const char *rule = getenv("VLLM_CUDA_FLASH_DEC_NSRULE");
    int64_t ns = items >= wave ? 1 : rule && !strcmp(rule, "ceil") ? (wave + items - 1) / items : wave / items;
    const char *e = getenv("VLLM_CUDA_FLASH_DEC_SPLITS");
    if (e && atol(e) > 0) ns = atol(e);
    if (ns > FD2_MAXS) ns = FD2_MAXS;
    if (ns > (ctx + FD2_TN - 1) / FD2_TN) ns = (ctx + FD2_TN - 1) / FD2_TN;
    while (ns > 1 && (size_t)(T * h * ns) * (size_t)(hd + 2) > CUDA_FD_WS_FLOATS(c->n_sm)) ns--;
    return ns < 1 ? 1 : (int)ns;
}

template <typename KV, typename A, int HD> static int fd2_go(cuda_ctx *c, const fl_args &a, const fd2_split &p, int64_t T, int64_t h) {
    const size_t smem = fd2_smem(HD, FD2_TN, FD2_NST, FD2_NW);
    auto kern = k_flash_dec<KV, A, HD, FD2_TN, FD2_NST, FD2_NW>;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return cuda_fail(e, "flash decode smem opt-in", __FILE__, __LINE__);
    const int need = (p.n_items + FD2_NW - 1) / FD2_NW;
    const int grid = need < c->n_sm ? need : c->n_sm;
    cuda_launch(kern, dim3((unsigned)grid), FD2_NW * 32, smem, c->stream, a, p);
    CU_LAUNCHED();
    if (p.ns > 1) {
        const int64_t pairs = T * h;
        cuda_launch(k_flash_dec_merge<A, HD>, dim3((unsigned)((pairs + 3) / 4)), 128, 0, c->stream, a, p, pairs);
        CU_LAUNCHED();
    }
    __atomic_add_fetch(&g_fd2_launches, 1, __ATOMIC_RELAXED);
    return VC_OK;
}

template <typename KV>
static int fd2_go_hd(cuda_ctx *c, const fl_args &a, const fd2_split &p, int64_t T, int64_t h, int64_t hd, rt_dtype at) {
    if (at == RT_BF16)
        return hd == 64 ? fd2_go<KV, __nv_bfloat16, 64>(c, a, p, T, h) : fd2_go<KV, __nv_bfloat16, 128>(c, a, p, T, h);
    return hd == 64 ? fd2_go<KV, float, 64>(c, a, p, T, h) : fd2_go<KV, float, 128>(c, a, p, T, h);
}

int cuda_flash_dec_run(cuda_ctx *c, rt_tensor *dst, const rt_tensor *q, const rt_tensor *kc, const rt_tensor *vc,
                       const rt_tensor *bt, const rt_tensor *qsl, const rt_tensor *sl, float scale, float softcap,
                       int32_t window) {
    fl_args a;
    cuda_fl_args(c, &a, dst, q, kc, vc, bt, qsl, sl, scale, softcap, window);
    const int64_t T = q->shape[0], h = q->shape[1], hd = q->shape[2], kvh = kc->shape[2];
    if ((int64_t)a.max_blocks * a.B > INT32_MAX / 2 || T * kvh * FD2_MAXS > INT32_MAX / 2 || (T * h + 3) / 4 > INT32_MAX)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda flash decode: context or batch too large");
    int64_t ctx = (int64_t)a.max_blocks * a.B;
    if (window > 0 && window < ctx) ctx = window;
    fd2_split p;
    p.kvh = (int)kvh;
    p.ns = fd2_splits(c, T, h, kvh, hd, ctx);
    p.n_items = (int)(T * kvh * p.ns);
    p.part = p.ns > 1 ? c->fd_ws : nullptr;
    p.part_ml = p.ns > 1 ? c->fd_ws + (size_t)(T * h * p.ns) * (size_t)hd : nullptr;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    return kc->dtype == RT_BF16 ? fd2_go_hd<__nv_bfloat16>(c, a, p, T, h, hd, q->dtype)
                                : fd2_go_hd<__half>(c, a, p, T, h, hd, q->dtype);
}
