/* cuda_flash — tensor-core prefill attention (FlashAttention-2 style) for
 * PAGED_ATTENTION over bf16/f16 caches. cuda_flash_run hands the common
 * case (hd 64/128, causal, any window, no soft-cap, blocks of 8+ slots) to the
 * Hopper wgmma kernel of cuda_flash_wg.cu unless VLLM_CUDA_FLASH_WG=0; the
 * mma.sync kernel below takes the rest (and everything with the switch 0).
 *
 * Work split. Query rows are packed per kv head g: packed row r of a tile is
 * token t0 + r / G, head g*G + r % G (G = h / kvh), so one K/V tile in
 * shared memory serves the whole GQA group. A CTA (4 warps) owns BM = 64*MT
 * packed rows (QT = BM / G tokens; rows past QT*G idle), warp w rows
 * 16*MT*w .. +16*MT-1 as MT m-tiles of 16. MT 2 (BM 128) halves the K/V
 * loads per query row and the ldmatrix per mma (B fragments serve two
 * m-tiles) but keeps Q in shared memory (bf16 [128][hd+8]) since O (128 f32
 * per thread at hd 128) and S (64) fill the registers; MT 1 keeps its Q
 * fragments in registers (168 registers: 3 CTAs, 12 warps per SM; MT 2 needs
 * 255: 2 CTAs). MT 1 is the default: it measured faster (see the host side);
 * VLLM_CUDA_FLASH_TILE=128 selects MT 2 (tests, A/B).
 * Grid (kvh, tiles): block (x, y) is kv head x of tile n_tiles-1 - y, so
 * the longest causal rows of every head are issued first and the short
 * ones fill the tail.
 *
 * Rows of a tile may belong to several sequences (varlen batch); the CTA
 * takes them one sequence ("segment") after the other with the same
 * accumulators: a row outside the current segment sees only masked keys,
 * which leaves its state unchanged (p = 0, correction 1). Segment rows at
 * positions pos = seq_len - q_len + i see keys lo..pos (lo = pos-window+1
 * with a window, else 0); the segment's key range is walked in tiles of
 * FL_N = 64 keys, from the smallest lo to the largest pos (causal skip); a
 * warp none of whose rows sees a key of the tile (past its diagonal,
 * before its window) skips the tile's math.
 *
 * Per key tile: K and V rows [64][hd] (bf16/f16) come from the paged cache
 * by 16-byte cp.async (block-table reads issued together first; keys past
 * the range zero-filled so that masked p = 0 never meets a NaN) into a
 * double buffer; the next tile loads while this one computes. S = Q K^T with
 * mma.sync m16n8k16 (A via ldmatrix or registers, K via ldmatrix), f32
 * scores; softmax in the log2 domain with the scale folded into the
 * exponent's FMA (p = 2^(s*scale*log2e - m), ex2.approx; soft-capping
 * transforms the scores first), masked only in tiles that cross a row's
 * key range, online per row (the four lanes of a quad share a row), P
 * converted to the cache dtype and reused in registers as the A operand of
 * O += P V (V via ldmatrix.trans). f32 accumulation throughout; out = O / l
 * (0 for a row with no keys).
 *
 * Measured on the H200 (test_cuda_flash, 2048-token causal prompt, hd 128,
 * bf16 cache, B 16): 16/8 heads (Qwen3-0.6B) 102 us per layer, 169 TFLOP/s
 * of attention work (MT 2: 137 us); 32/8 (Llama-3.1-8B) 158 us, 217 TFLOP/s
 * (MT 2: 179 us); the earlier BM-64-only kernel (2 CTAs/SM, 1-D tile order
 * per head, 64-bit paged addressing): 150 / 238 us. Nsight Compute on an
 * intermediate version (193 us at 32/8): tensor pipe 28% busy, ~1,200
 * instructions per warp and key tile (192 of them mma/ldmatrix), stalls
 * mostly on fixed-latency dependencies; instruction count and occupancy
 * are the levers left, then wgmma/TMA (FA3).
 *
 * q and out are f32 or bf16 rows (A; bf16 with bf16 activations: the
 * prefill's QK_ROPE_STORE writes bf16 q, the Wo GEMM reads bf16 rows), two
 * elements per load / store.
 *
 * hd 256 (Gemma 2 / 3 below 27B; session 19): MT 1 with Q staged in shared
 * memory as MT 2 does (O is 128 f32 a thread), 169 KB of shared memory, so
 * one CTA of 4 warps an SM; the wgmma kernels stay at hd 64 / 128.
 *
 * Shapes: hd 64, 128 or 256, G <= 64, block size a power of two, cache rows
 * 16-byte aligned, 32-bit byte strides (cuda_flash_eligible). Precision: q and p rounded to the cache dtype
 * (normalised error ~1e-3 vs the f32 reference); f32 caches and other
 * shapes keep the SIMT kernels of cuda_paged_attn.cu.
 */
#include "backends/cuda/cuda_flash.h"
#include "backends/cuda/cuda_flash_common.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FL_WARPS 4
#define FL_M 64 /* packed query rows per CTA at MT 1 (16 per warp) */
#define FL_N 64 /* keys per tile */

/* Q in shared memory rather than as register fragments: MT 2, and hd 256
 * (its O alone is 128 f32 per thread at MT 1). */
__host__ __device__ static constexpr bool fl_q_smem(int hd, int mt) { return mt == 2 || hd > 128; }

/* Bytes of shared memory: 2 stages x (K, V) [FL_N][hd + FL_PAD], after Q
 * [64 MT][hd + FL_PAD] when fl_q_smem; bf16/f16 elements (hd 256: 169 KB,
 * one CTA an SM). */
static size_t fl_smem(int hd, int mt) {
    return ((size_t)4 * FL_N + (fl_q_smem(hd, mt) ? (size_t)FL_WARPS * 16 * mt : 0)) * (hd + FL_PAD) * 2;
}

/* ---- the kernel --------------------------------------------------------- */

/* The CTA's cp.async loads of key tile kt0 .. kt0+FL_N-1 (fl_load_rows). */
template <int HD>
__device__ __forceinline__ void fl_load_tile(const fl_args &a, const int32_t *btrow, int kin, int vin, int kt0,
                                             int khi, uint32_t sdst) {
    fl_load_rows<HD, FL_N, FL_WARPS * 32>(a, btrow, kin, vin, kt0, khi, sdst, (int)threadIdx.x);
}

/* MT m-tiles of 16 rows per warp: BM = 64 * MT packed rows per CTA. */
template <typename KV, typename A, int HD, int MT>
__global__ void __launch_bounds__(FL_WARPS * 32, HD > 128 ? 1 : MT == 1 ? 3 : 2) k_flash(fl_args a) {
    CUDA_PDL_ENTER();
    constexpr int LD = HD + FL_PAD; /* smem row pitch, elements */
    constexpr int KS = HD / 16;     /* k-steps of Q K^T */
    constexpr int NO = HD / 8;      /* n-tiles of O */
    constexpr int R = 2 * MT;       /* rows per thread: i = 2 * mt + h2 */
    constexpr int BM = FL_WARPS * 16 * MT;
    extern __shared__ __align__(16) uint16_t fl_sm[];
    /* MT 2: Q [BM][LD] first; stage st: K at kvs + st * 2 * FL_N * LD, V FL_N * LD after it */
    constexpr bool QS = fl_q_smem(HD, MT);
    uint16_t *const qs = fl_sm, *const kvs = fl_sm + (QS ? BM * LD : 0);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
    const int mi = lane >> 3, rr = lane & 7; /* ldmatrix: matrix and row this lane addresses */
    /* Block (x, y): kv head x of tile n_tiles-1 - (y0 + y): the longest rows
     * of every head start first, the short ones fill the tail. (A 1-D grid
     * with g = b % kvh costs this kernel register spills.) */
    const int g = (int)blockIdx.x;
    const int tile = a.n_tiles - 1 - (a.y0 + (int)blockIdx.y);
    const int64_t t0 = (int64_t)tile * a.QT, t1 = t0 + a.QT < a.T ? t0 + a.QT : a.T;
    const int wrow = warp * 16 * MT; /* first packed row of this warp */
    /* K/V loads: this thread's 16-byte chunk c of rows j0, j0 + RPI, ... */
    const int lc = (int)threadIdx.x % (HD / 8), lj0 = (int)threadIdx.x / (HD / 8);
    const int kin = g * a.k_s1 + lc * 16, vin = g * a.v_s1 + lc * 16;
    const uint32_t sm_kv = fl_smem_addr(kvs) + (uint32_t)(lj0 * LD + lc * 8) * 2;

    /* Q: MT 1 keeps the A fragments (row-major 16 x HD) in registers, MT 2
     * (too many registers) stages Q in shared memory for ldmatrix. */
    uint32_t qf[QS ? 1 : KS][4];
    if constexpr (!QS) {
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            int64_t tok;
            int hq;
            bool live;
            fl_row(a, g, t0, t1, wrow + gq + 8 * h2, &tok, &hq, &live);
#pragma unroll
            for (int ks = 0; ks < KS; ks++)
#pragma unroll
                for (int half = 0; half < 2; half++)
                    qf[ks][h2 + 2 * half] =
                        live ? fl_ld_q2<A, KV>(a.q + tok * a.q_s0 + (int64_t)hq * a.q_s1 +
                                               (int64_t)(ks * 16 + half * 8 + 2 * tq) * (int64_t)sizeof(A))
                             : 0u;
        }
    } else {
        for (int idx = threadIdx.x; idx < BM * HD / 2; idx += FL_WARPS * 32) {
            const int r = idx / (HD / 2), c2 = idx % (HD / 2);
            int64_t tok;
            int hq;
            bool live;
            fl_row(a, g, t0, t1, r, &tok, &hq, &live);
            *(uint32_t *)(qs + r * LD + 2 * c2) =
                live ? fl_ld_q2<A, KV>(a.q + tok * a.q_s0 + (int64_t)hq * a.q_s1 + (int64_t)c2 * 2 * (int64_t)sizeof(A))
                     : 0u;
        }
        /* visible to ldmatrix after the __syncthreads opening the first segment */
    }

    float o[MT][NO][4], m[R], l[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < NO; j++) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.0f;

    for (int64_t r = t0; r < t1;) {
        const int s = cuda_row_seq(a.qsl, a.S, r);
        const int q_len = a.qsl[s + 1] - a.qsl[s], sl = a.seq_lens[s];
        const int64_t seg_end = a.qsl[s + 1] < t1 ? a.qsl[s + 1] : t1;
        const bool bad = q_len <= 0 || q_len > sl || sl > a.max_blocks * a.B || r < a.qsl[s] || seg_end <= r;
        if (bad && threadIdx.x == 0) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
        const int64_t base = (int64_t)sl - q_len - a.qsl[s]; /* position of row i: base + i */
        const int khi = bad ? -1 : (int)(base + seg_end - 1);
        const int pos_min = (int)(base + r);
        const int klo = a.window > 0 && pos_min - a.window + 1 > 0 ? pos_min - a.window + 1 : 0;
        const int32_t *btrow = a.bt + (int64_t)s * a.max_blocks;
        /* Per row: the last key it sees in this segment (-1: not in it); its
         * first, rlo(i), follows from the window (registers are scarce). */
        int rhi[R];
#pragma unroll
        for (int i = 0; i < R; i++) {
            int64_t tok;
            int hq;
            bool live;
            fl_row(a, g, t0, t1, wrow + (i >> 1) * 16 + gq + 8 * (i & 1), &tok, &hq, &live);
            const bool in = !bad && live && tok >= r && tok < seg_end;
            rhi[i] = in ? (int)(base + tok) : -1;
        }
        const int n_kt = khi >= klo ? (khi - klo) / FL_N + 1 : 0;
        auto rlo = [&](int i) { return a.window > 0 && rhi[i] - a.window + 1 > 0 ? rhi[i] - a.window + 1 : 0; };
        __syncthreads(); /* the previous segment is done with the buffers (and Q is staged) */
        if (n_kt > 0) fl_load_tile<HD>(a, btrow, kin, vin, klo, khi, sm_kv);
        fl_cp_commit();
        for (int it = 0; it < n_kt; it++) {
            const int kt0 = klo + it * FL_N, st = it & 1;
            if (it + 1 < n_kt)
                fl_load_tile<HD>(a, btrow, kin, vin, kt0 + FL_N, khi, sm_kv + (st ^ 1) * 2 * FL_N * LD * 2);
            fl_cp_commit();
            fl_cp_wait<1>(); /* tile it landed (this thread's part) */
            __syncthreads(); /* ... and everybody's */
            const uint16_t *ks = kvs + st * 2 * FL_N * LD, *vs = ks + FL_N * LD;

            /* A warp whose rows all miss this key tile (past the causal
             * diagonal, before the window) skips it. */
            bool act = false;
#pragma unroll
            for (int i = 0; i < R; i++) act |= kt0 <= rhi[i] && kt0 + FL_N - 1 >= rlo(i);
            if (__any_sync(0xffffffffu, act)) {
                /* S = Q K^T: 16 MT rows x 64 keys per warp, 8 n-tiles of 8 keys. */
                float sc[MT][FL_N / 8][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int j = 0; j < FL_N / 8; j++) sc[mt][j][0] = sc[mt][j][1] = sc[mt][j][2] = sc[mt][j][3] = 0.0f;
#pragma unroll
                for (int ks_ = 0; ks_ < KS; ks_++) {
                    uint32_t qa[MT][4];
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        if constexpr (!QS) {
#pragma unroll
                            for (int e = 0; e < 4; e++) qa[mt][e] = qf[ks_][e];
                        } else {
                            fl_ldsm_x4(qa[mt],
                                       qs + (wrow + mt * 16 + (mi & 1) * 8 + rr) * LD + ks_ * 16 + (mi >> 1) * 8);
                        }
                    }
#pragma unroll
                    for (int jp = 0; jp < FL_N / 16; jp++) { /* two n-tiles per ldmatrix.x4 */
                        uint32_t b[4];
                        fl_ldsm_x4(b, ks + (jp * 16 + (mi >> 1) * 8 + rr) * LD + ks_ * 16 + (mi & 1) * 8);
#pragma unroll
                        for (int mt = 0; mt < MT; mt++) {
                            fl_mma<KV>(sc[mt][2 * jp], qa[mt], b[0], b[1]);
                            fl_mma<KV>(sc[mt][2 * jp + 1], qa[mt], b[2], b[3]);
                        }
                    }
                }

                /* Scores into the log2 domain: s * scl. */
                float scl = a.scale_log2;
#pragma unroll
                for (int mt = 0; mt < MT; mt++) scl = fl_log2_scores<FL_N / 8>(sc[mt], a);
                /* Mask only where the tile crosses a row's range (the diagonal,
                 * the window edge, rows outside the segment); online softmax. */
                float mb[R], corr[R];
#pragma unroll
                for (int i = 0; i < R; i++) {
                    const int mt = i >> 1, h2 = i & 1;
                    const int lo = rlo(i);
                    if (!(kt0 >= lo && kt0 + FL_N - 1 <= rhi[i])) {
#pragma unroll
                        for (int j = 0; j < FL_N / 8; j++)
#pragma unroll
                            for (int e = 2 * h2; e < 2 * h2 + 2; e++) {
                                const int key = kt0 + j * 8 + 2 * tq + (e & 1);
                                sc[mt][j][e] = key >= lo && key <= rhi[i] ? sc[mt][j][e] : -INFINITY;
                            }
                    }
                    fl_row_max<FL_N / 8>(sc[mt], h2, scl, m[i], l[i], mb[i], corr[i]);
                }
                /* O *= corr, skipped while no row of the warp saw a new
                 * maximum (most tiles once the running maxima settle) */
                bool keep = true;
#pragma unroll
                for (int i = 0; i < R; i++) keep &= corr[i] == 1.0f;
                if (!__all_sync(0xffffffffu, keep)) {
#pragma unroll
                    for (int mt = 0; mt < MT; mt++)
#pragma unroll
                        for (int j = 0; j < NO; j++) {
                            o[mt][j][0] *= corr[2 * mt];
                            o[mt][j][1] *= corr[2 * mt];
                            o[mt][j][2] *= corr[2 * mt + 1];
                            o[mt][j][3] *= corr[2 * mt + 1];
                        }
                }
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    /* p, and per row the lane's tile sum in two chains
                     * (the quad is summed at the end) */
                    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
                    for (int j = 0; j < FL_N / 8; j++) {
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            sc[mt][j][e] = fl_exp2(fmaf(sc[mt][j][e], scl, -mb[2 * mt + (e >> 1)]));
                        s0 += sc[mt][j][0] + sc[mt][j][1];
                        s1 += sc[mt][j][2] + sc[mt][j][3];
                    }
                    l[2 * mt] += s0;
                    l[2 * mt + 1] += s1;
                }

                /* O += P V: P from the score registers (A operand, 4 k-steps of 16
                 * keys), V via ldmatrix.trans (two n-tiles of 8 dims per x4). */
#pragma unroll
                for (int kk = 0; kk < FL_N / 16; kk++) {
                    uint32_t pa[MT][4];
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        pa[mt][0] = fl_pack<KV>(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
                        pa[mt][1] = fl_pack<KV>(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
                        pa[mt][2] = fl_pack<KV>(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
                        pa[mt][3] = fl_pack<KV>(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
                    }
#pragma unroll
                    for (int dp = 0; dp < NO / 2; dp++) {
                        uint32_t b[4];
                        fl_ldsm_x4_t(b, vs + (kk * 16 + (mi & 1) * 8 + rr) * LD + dp * 16 + (mi >> 1) * 8);
#pragma unroll
                        for (int mt = 0; mt < MT; mt++) {
                            fl_mma<KV>(o[mt][2 * dp], pa[mt], b[0], b[1]);
                            fl_mma<KV>(o[mt][2 * dp + 1], pa[mt], b[2], b[3]);
                        }
                    }
                }
            }
            __syncthreads(); /* everybody done with this stage before it is refilled */
        }
        r = seg_end > r ? seg_end : r + 1;
    }
    fl_cp_wait<0>();

    /* out = O / l; l summed over the quad (each lane summed its own keys). */
#pragma unroll
    for (int i = 0; i < R; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
#pragma unroll
    for (int i = 0; i < R; i++) {
        const int mt = i >> 1, h2 = i & 1;
        int64_t tok;
        int hq;
        bool live;
        fl_row(a, g, t0, t1, wrow + mt * 16 + gq + 8 * h2, &tok, &hq, &live);
        if (!live) continue;
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        char *orow = a.out + tok * a.o_s0 + (int64_t)hq * a.o_s1;
#pragma unroll
        for (int j = 0; j < NO; j++)
            fl_st_o2<A>(orow + (j * 8 + 2 * tq) * (int)sizeof(A), o[mt][j][2 * h2] * inv, o[mt][j][2 * h2 + 1] * inv);
    }
}

/* ---- host side ---------------------------------------------------------- */

bool cuda_flash_eligible(const rt_tensor *q, const rt_tensor *dst, const rt_tensor *kc, const rt_tensor *vc) {
    const int64_t h = q->shape[1], hd = q->shape[2], kvh = kc->shape[2];
    if (hd != 64 && hd != 128 && hd != 256) return false; /* 256: the mma.sync kernel only */
    if (kc->dtype != vc->dtype || (kc->dtype != RT_BF16 && kc->dtype != RT_F16)) return false;
    if (kvh <= 0 || h % kvh || h / kvh > FL_M) return false;
    /* block size a power of two (shift/mask); 32-bit byte strides (the
     * offset within a block is 32-bit, blocks are 64-bit apart) */
    const int64_t B = kc->shape[1];
    if (B <= 0 || B > (1 << 30) || (B & (B - 1)) || vc->shape[1] != B) return false;
    const rt_tensor *ts[2] = {kc, vc};
    for (int t = 0; t < 2; t++) {
        if ((uintptr_t)ts[t]->data % 16 || ts[t]->stride[0] % 16 || ts[t]->stride[1] % 16 || ts[t]->stride[2] % 16 ||
            ts[t]->stride[3] != 2)
            return false;
        const int64_t *st = ts[t]->stride;
        if (st[0] <= 0 || st[1] <= 0 || st[2] <= 0 || st[0] > INT32_MAX ||
            st[1] * (B - 1) + st[2] * (kvh - 1) + hd * 2 > INT32_MAX)
            return false;
    }
    /* q and out: f32 or bf16 rows (one type), read and written two elements at a time */
    if (q->dtype != dst->dtype || (q->dtype != RT_F32 && q->dtype != RT_BF16)) return false;
    const int64_t es = q->dtype == RT_F32 ? 4 : 2, pair = 2 * es;
    return q->stride[2] == es && q->stride[1] % pair == 0 && q->stride[0] % pair == 0 &&
           (uintptr_t)q->data % pair == 0 && dst->stride[2] == es && dst->stride[1] % pair == 0 &&
           dst->stride[0] % pair == 0 && (uintptr_t)dst->data % pair == 0;
}

template <typename KV, typename A, int HD, int MT> static int fl_go(cuda_ctx *c, const fl_args &a, dim3 grid) {
    const size_t smem = fl_smem(HD, MT);
    /* The opt-in to > 48 KiB of shared memory is per device: set it at every
     * (prefill-sized, so rare) launch. */
    cudaError_t e =
        cudaFuncSetAttribute(k_flash<KV, A, HD, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return cuda_fail(e, "flash attention smem opt-in", __FILE__, __LINE__);
    cuda_launch(k_flash<KV, A, HD, MT>, grid, FL_WARPS * 32, smem, c->stream, a);
    CU_LAUNCHED();
    return VC_OK;
}

template <typename KV, int MT>
static int fl_go_hd(cuda_ctx *c, const fl_args &a, dim3 grid, int64_t hd, rt_dtype at) {
    if (at == RT_BF16)
        return hd == 64    ? fl_go<KV, __nv_bfloat16, 64, MT>(c, a, grid)
               : hd == 128 ? fl_go<KV, __nv_bfloat16, 128, MT>(c, a, grid)
                           : fl_go<KV, __nv_bfloat16, 256, 1>(c, a, grid);
    return hd == 64    ? fl_go<KV, float, 64, MT>(c, a, grid)
           : hd == 128 ? fl_go<KV, float, 128, MT>(c, a, grid)
                       : fl_go<KV, float, 256, 1>(c, a, grid);
}

void cuda_fl_args(cuda_ctx *c, fl_args *ap, rt_tensor *dst, const rt_tensor *q, const rt_tensor *kc,
                  const rt_tensor *vc, const rt_tensor *bt, const rt_tensor *qsl, const rt_tensor *sl, float scale,
                  float softcap, int32_t window) {
    fl_args &a = *ap;
    memset(&a, 0, sizeof a);
    const int64_t h = q->shape[1], kvh = kc->shape[2];
    a.q = (const char *)q->data;
    a.k = (const char *)kc->data;
    a.v = (const char *)vc->data;
    a.out = (char *)dst->data;
    a.q_s0 = q->stride[0];
    a.q_s1 = q->stride[1];
    a.o_s0 = dst->stride[0];
    a.o_s1 = dst->stride[1];
    a.k_s0 = (int32_t)kc->stride[0];
    a.k_sb = (int32_t)kc->stride[1];
    a.k_s1 = (int32_t)kc->stride[2];
    a.v_s0 = (int32_t)vc->stride[0];
    a.v_sb = (int32_t)vc->stride[1];
    a.v_s1 = (int32_t)vc->stride[2];
    a.bt = (const int32_t *)bt->data;
    a.qsl = (const int32_t *)qsl->data;
    a.seq_lens = (const int32_t *)sl->data;
    a.T = q->shape[0];
    a.S = (int)bt->shape[0];
    a.max_blocks = (int)bt->shape[1];
    a.B = (int)kc->shape[1];
    a.num_blocks = (int)kc->shape[0];
    a.G = (int)(h / kvh);
    a.window = window;
    a.bshift = 0;
    while ((1 << a.bshift) < a.B) a.bshift++; /* B is a power of two (eligible) */
    a.scale_log2 = scale * 1.4426950408889634f;
    a.softcap = softcap;
    a.flags = c->d_flags;
}

int cuda_flash_run(cuda_ctx *c, rt_tensor *dst, const rt_tensor *q, const rt_tensor *kc, const rt_tensor *vc,
                   const rt_tensor *bt, const rt_tensor *qsl, const rt_tensor *sl, float scale, float softcap,
                   int32_t window) {
    fl_args a;
    cuda_fl_args(c, &a, dst, q, kc, vc, bt, qsl, sl, scale, softcap, window);
    const int64_t T = q->shape[0], hd = q->shape[2], kvh = kc->shape[2];
    /* Tile height: 64 packed rows (MT 1, 3 CTAs per SM) unless
     * VLLM_CUDA_FLASH_TILE=128 asks for MT 2 (2 CTAs per SM), which measured
     * slower on the H200 at 2048 tokens (179 vs 158 us at 32/8 heads, 137 vs
     * 102 us at 16/8): fewer warps to hide latency, and a lone wave of big
     * tiles at 16/8 heads. */
    int mt = 1;
    const char *forced = getenv("VLLM_CUDA_FLASH_TILE"); /* 64 | 128: tests, A/B (prefill calls are rare) */
    if (forced && !strcmp(forced, "64")) mt = 1;
    if (forced && !strcmp(forced, "128") && hd <= 128) mt = 2; /* hd 256: MT 1 only (registers) */
    /* Hopper wgmma kernel (cuda_flash_wg.cu, 128 packed rows per CTA) for
     * the common case unless VLLM_CUDA_FLASH_WG=0 (A/B, tests) */
    const char *wge = getenv("VLLM_CUDA_FLASH_WG");
    const bool wg = !(wge && !strcmp(wge, "0")) && cuda_flash_wg_eligible(hd, a.B, scale, softcap, window);
    a.QT = (wg ? 128 : mt * FL_M) / a.G;
    const int64_t tiles = (T + a.QT - 1) / a.QT;
    if ((int64_t)a.max_blocks * a.B > INT32_MAX / 2 || tiles > INT32_MAX || kvh > 65535)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda flash attention: context or batch too large");
    a.n_tiles = (int)tiles;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    if (wg) return cuda_flash_wg_launch(c, a, hd, kvh, kc->dtype, q->dtype);
    /* grid.y <= 65535: longer batches take several launches (y0) */
    for (int64_t y0 = 0; y0 < tiles; y0 += 65535) {
        a.y0 = (int)y0;
        dim3 grid((unsigned)kvh, (unsigned)(tiles - y0 < 65535 ? tiles - y0 : 65535));
        int rc;
        const rt_dtype at = q->dtype;
        if (kc->dtype == RT_BF16)
            rc = mt == 2 ? fl_go_hd<__nv_bfloat16, 2>(c, a, grid, hd, at) : fl_go_hd<__nv_bfloat16, 1>(c, a, grid, hd, at);
        else
            rc = mt == 2 ? fl_go_hd<__half, 2>(c, a, grid, hd, at) : fl_go_hd<__half, 1>(c, a, grid, hd, at);
        if (rc < 0) return rc;
    }
    return VC_OK;
}
