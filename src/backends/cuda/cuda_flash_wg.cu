/* cuda_flash_wg — the Hopper (sm_90a) prefill attention kernel: warpgroup
 * MMA (wgmma) over 128-byte swizzled shared-memory tiles, for the common
 * case of cuda_flash.cu's calls: hd 64 / 128, bf16 / f16 cache, causal
 * with or without a sliding window (session 19: a segment's key tiles
 * start at the tile of its first row's first key, fw_lo_tile, and keys
 * before a row's first, fw_rlo, are masked with those past its last), no
 * soft-cap, positive scale. cuda_flash_run sends
 * those here unless VLLM_CUDA_FLASH_WG=0; everything else keeps the
 * mma.sync kernel of cuda_flash.cu, whose header explains the shared
 * scheme (GQA rows packed per kv head, varlen segments, paged K/V by
 * cp.async through the block table, causal skip, log2-domain online
 * softmax). Layout and fragment facts: cuda_flash_wgmma.cuh.
 *
 * CTA: 2 warpgroups (256 threads), 128 packed query rows (QT = 128 / G
 * tokens of kv head g); warpgroup w owns rows 64w .. 64w+63. Q is staged
 * once, converted to the cache dtype, in shared memory (swizzled, the A
 * operand of S by descriptor). Key tiles of FW_BN = 128: K and V [128][hd]
 * come in by 16-byte cp.async (swizzle applied to the shared address) into
 * FW_STAGES = 3 buffers, each thread copying one 16-byte column chunk of
 * FW_LR (8 at hd 128) consecutive keys of one cache block (so one
 * block-table read per tile, issued a tile ahead); each thread fences its
 * copies into the async proxy before the barrier that opens a tile.
 * Per warpgroup: S[64 x 128] = Q K^T is hd/16 wgmma m64n128k16 (both
 * operands from shared memory, K-major); the softmax runs on the
 * accumulator fragments (mask on tiles crossing a row's last key, a quad of
 * lanes shares a row) and rounds P to the cache dtype straight into the
 * register A operand of O[64 x hd] += P V, 8 wgmma m64n{hd}k16 with V read
 * MN-major (transpose bit). The loop is software-pipelined within the
 * warpgroup (FA3's intra-warpgroup overlap): at tile it it issues S of
 * tile it+1 and P V of tile it, waits for S only (wait_group 1), runs the
 * softmax of tile it+1 while P V still runs on the tensor cores, then waits
 * for P V, rescales O and packs the next P; tile it+2 loads meanwhile
 * (three stages: it for V, it+1 for K, it+2 in flight). A warpgroup's key
 * tiles are a prefix (causal): past its rows' last key it only joins the
 * barriers.
 * Registers: S 64 + O hd/2 + P 32 per thread (254 at hd 128), one CTA of 8
 * warps per SM (shared memory: Q 16 KB per 64-wide slab of hd, 3 stages x
 * (K, V) 32 KB per slab: 225 KB at hd 128).
 *
 *
 * Measured on the H200 (test_cuda_flash, 2048-token causal prompt, hd 128,
 * bf16 cache, B 16, same run): 16/8 heads 55-56 us per layer (307-313
 * TFLOP/s of attention work) vs 97-98 us for the mma.sync kernel; 32/8
 * heads 111-113 us (304-309 TFLOP/s) vs 147-149 us. The first, unpipelined
 * version ran 63-65 / 130-132 us. Nsight Compute on the intermediate
 * version (32/8): 0.33 instructions issued per cycle and SMSP, the warps
 * mostly waiting on fixed-latency dependencies, then L1/global loads,
 * dispatch and MIO: two consumer warps per SMSP hide little latency.
 *
 * FA3's warp-specialised TMA producer with mbarriers (here all threads
 * load, one CTA barrier per tile) and the ping-pong that orders the two
 * warpgroups' softmax against each other's GEMMs: k_flash_fa3 below, the
 * default at hd 128 (VLLM_CUDA_FLASH_WG=1: this kernel; 3: with the
 * ping-pong). Measured in session 8 (test_cuda_flash, same run, bf16 q
 * and output): 48.0 vs 54.9 us per layer at 16/8 heads, 99.4 vs 112.2 at
 * 32/8; warm 2048-token prefill TTFT 5.85-5.91 vs 6.10-6.11 ms (0.6B),
 * 48.8-49.0 vs 49.3-49.9 ms (8B).
 */
#include "backends/cuda/cuda_flash_common.cuh"
#include "backends/cuda/cuda_flash_wgmma.cuh"
extern "C" {
#include "base/log.h"
}

#include <cuda.h>
#include <cudaTypedefs.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FW_BM 128      /* packed query rows per CTA (2 warpgroups x 64) */
#define FW_BN 128      /* keys per tile */
#define FW_THREADS 256
#define FW_LR(hd) (FW_BN * ((hd) / 8) / FW_THREADS) /* consecutive K/V rows a thread loads per tile */
#define FW_STAGES 3    /* K/V tiles in shared memory: it (P V), it+1 (S), it+2 (loading) */

/* Bytes of dynamic shared memory: Q [FW_BM][hd], FW_STAGES x (K, V)
 * [FW_BN][hd], bf16/f16, plus 1 KB to align the base to the 1024-byte
 * swizzle period (hd 128: 225 KB of the 227 KB a block may have). */
static size_t fw_smem(int64_t hd) { return (size_t)hd * 2 * (FW_BM + 2 * FW_STAGES * FW_BN) + 1024; }

bool cuda_flash_wg_eligible(int64_t hd, int64_t block_size, float scale, float softcap, int32_t window) {
    (void)window; /* sliding windows: the first key tile and a lower mask (fw_lo_tile, fw_rlo) */
    return (hd == 64 || hd == 128) && block_size >= FW_LR(hd) && !(softcap > 0.0f) && scale > 0.0f;
}

/* cp.async of this thread's FW_LR consecutive keys key0 .. key0+FW_LR-1
 * of a tile (chunk c of each row; keys > khi zero-filled) into the stage
 * whose K / V tiles start at kdst / vdst, both already offset to the
 * thread's first row (swizzled: row r's chunk at (c ^ r % 8) * 16, cx =
 * c % 8 ^ first row % 8, the rows' low 3 bits differ only in it). The keys
 * sit in one cache block (B >= FW_LR, eligible), blk, read from the block
 * table one tile ahead; a bad id reads block 0 and raises the flag. */
template <int HD>
__device__ __forceinline__ void fw_load_tile(const fl_args &a, int32_t blk, int kin, int vin, int key0, int khi,
                                             uint32_t kdst, uint32_t vdst, uint32_t cx) {
    constexpr int LR = FW_BN * (HD / 8) / FW_THREADS;
    const bool ok = (uint32_t)blk < (uint32_t)a.num_blocks;
    if (key0 <= khi && !ok) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
    const uint32_t b = ok ? (uint32_t)blk : 0u, slot = (uint32_t)(key0 & (a.B - 1));
    const char *kp = a.k + ((uint64_t)b * (uint32_t)a.k_s0 + (slot * (uint32_t)a.k_sb + (uint32_t)kin));
    const char *vp = a.v + ((uint64_t)b * (uint32_t)a.v_s0 + (slot * (uint32_t)a.v_sb + (uint32_t)vin));
#pragma unroll
    for (int it = 0; it < LR; it++) {
        const int n = key0 + it <= khi ? 16 : 0;
        const uint32_t off = (uint32_t)it * 128 + (((cx ^ (uint32_t)it) - cx) << 4);
        fl_cp16(kdst + off, kp + it * a.k_sb, n);
        fl_cp16(vdst + off, vp + it * a.v_sb, n);
    }
}

/* The block id of a thread's rows of the tile at kt0 (0 past khi). */
__device__ __forceinline__ int32_t fw_blk(const fl_args &a, const int32_t *btrow, int key0, int khi) {
    return key0 <= khi ? btrow[key0 >> a.bshift] : 0;
}

template <typename KV> __device__ __forceinline__ void fw_ss(float *d, uint64_t da, uint64_t db, int acc) {
    if constexpr (std::is_same<KV, __nv_bfloat16>::value) flw_ss_n128_bf16(d, da, db, acc);
    else flw_ss_n128_f16(d, da, db, acc);
}
template <typename KV, int HD> __device__ __forceinline__ void fw_rs(float *d, const uint32_t *p, uint64_t db) {
    if constexpr (std::is_same<KV, __nv_bfloat16>::value) {
        if constexpr (HD == 128) flw_rs_n128_bf16(d, p, db);
        else flw_rs_n64_bf16(d, p, db);
    } else {
        if constexpr (HD == 128) flw_rs_n128_f16(d, p, db);
        else flw_rs_n64_f16(d, p, db);
    }
}

/* Per-thread softmax state of the warpgroup's S tile: rows prow, prow + 8
 * (i = 0, 1), their running maxima m (log2 domain) and sums l. */
struct fw_rows {
    float m[2], l[2];
    int rhi[2]; /* last key the row sees in this segment, -1: none */
    int rlo[2]; /* its first key: rhi - window + 1 with a window, else 0 */
};

/* The first key a row at position rhi sees (a.window > 0: the last window
 * keys up to it). */
__device__ __forceinline__ int fw_rlo(const fl_args &a, int rhi) {
    return a.window > 0 && rhi - a.window + 1 > 0 ? rhi - a.window + 1 : 0;
}

/* Online softmax of S (keys kt0 ..): mask keys past each row's last key
 * and before its first (a window), new maxima, corr = 2^(m_old - m_new) (1
 * when unchanged), p = 2^(s scl - m) in place, l updated. A row with no
 * key seen yet keeps m = -inf, l = 0 and p = 0. */
__device__ __forceinline__ void fw_softmax(float *sc, fw_rows &st, int kt0, int tq, float scl, float *corr) {
    constexpr int NS = FW_BN / 8;
    float mb[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (kt0 + FW_BN - 1 > st.rhi[i] || kt0 < st.rlo[i]) {
#pragma unroll
            for (int j = 0; j < NS; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int key = kt0 + j * 8 + 2 * tq + e;
                    sc[4 * j + 2 * i + e] = key <= st.rhi[i] && key >= st.rlo[i] ? sc[4 * j + 2 * i + e] : -INFINITY;
                }
        }
        float mv[NS];
#pragma unroll
        for (int j = 0; j < NS; j++) mv[j] = fmaxf(sc[4 * j + 2 * i], sc[4 * j + 2 * i + 1]);
        static_assert(NS == 16, "the max tree below assumes 16 n-tiles");
#pragma unroll
        for (int j = 0; j < 8; j++) mv[j] = fmaxf(mv[j], mv[j + 8]);
#pragma unroll
        for (int j = 0; j < 4; j++) mv[j] = fmaxf(mv[j], mv[j + 4]);
        float mx = fmaxf(fmaxf(mv[0], mv[2]), fmaxf(mv[1], mv[3]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(st.m[i], mx * scl);
        /* no key seen yet or no new maximum: keep the state (corr 1; p =
         * 2^-inf = 0 while no key is seen) */
        mb[i] = mn == -INFINITY ? 0.0f : mn;
        corr[i] = mn == -INFINITY || mn == st.m[i] ? 1.0f : fl_exp2(st.m[i] - mn);
        st.m[i] = mn;
        st.l[i] *= corr[i];
    }
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int j = 0; j < NS; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) sc[4 * j + e] = fl_exp2(fmaf(sc[4 * j + e], scl, -mb[e >> 1]));
        s0 += sc[4 * j] + sc[4 * j + 1];
        s1 += sc[4 * j + 2] + sc[4 * j + 3];
    }
    st.l[0] += s0;
    st.l[1] += s1;
}

/* O *= corr per row, skipped while no row of the warp saw a new maximum. */
template <int HD> __device__ __forceinline__ void fw_rescale(float *o, const float *corr) {
    if (!__all_sync(0xffffffffu, corr[0] == 1.0f && corr[1] == 1.0f)) {
#pragma unroll
        for (int j = 0; j < HD / 8; j++) {
            o[4 * j + 0] *= corr[0];
            o[4 * j + 1] *= corr[0];
            o[4 * j + 2] *= corr[1];
            o[4 * j + 3] *= corr[1];
        }
    }
}

/* P (f32 fragments of S) -> the register A operand of O += P V, rounded to
 * the cache dtype: k-step kk = n-tiles 2kk, 2kk+1. */
template <typename KV> __device__ __forceinline__ void fw_pack(const float *sc, uint32_t (*pa)[4]) {
#pragma unroll
    for (int kk = 0; kk < FW_BN / 16; kk++) {
        pa[kk][0] = fl_pack<KV>(sc[8 * kk + 0], sc[8 * kk + 1]);
        pa[kk][1] = fl_pack<KV>(sc[8 * kk + 2], sc[8 * kk + 3]);
        pa[kk][2] = fl_pack<KV>(sc[8 * kk + 4], sc[8 * kk + 5]);
        pa[kk][3] = fl_pack<KV>(sc[8 * kk + 6], sc[8 * kk + 7]);
    }
}

/* Keeps the P registers alive (unmodified) up to this point: the wgmma
 * reading them runs asynchronously until its wait. */
__device__ __forceinline__ void fw_keep(uint32_t (*pa)[4]) {
#pragma unroll
    for (int kk = 0; kk < FW_BN / 16; kk++)
        asm volatile("" ::"r"(pa[kk][0]), "r"(pa[kk][1]), "r"(pa[kk][2]), "r"(pa[kk][3]) : "memory");
}

/* Issue S = Q K^T (this warpgroup's 64 rows x FW_BN keys; q_a: its Q rows,
 * k_a: the stage's K tile), one commit group. */
template <typename KV, int HD> __device__ __forceinline__ void fw_issue_s(float *sc, uint32_t q_a, uint32_t k_a) {
    constexpr uint32_t hi = flw_desc_hi(1024);
    const uint32_t qlo = flw_desc_lo(q_a, 16), klo = flw_desc_lo(k_a, 16);
    flw_fence();
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++)
        fw_ss<KV>(sc, flw_desc_mk(qlo + (uint32_t)(((ks >> 2) * FW_BM * 128 + (ks & 3) * 32) >> 4), hi),
                  flw_desc_mk(klo + (uint32_t)(((ks >> 2) * FW_BN * 128 + (ks & 3) * 32) >> 4), hi), ks > 0);
    flw_commit();
}

/* Issue O += P V (v_a: the stage's V tile, MN-major), one commit group. */
template <typename KV, int HD> __device__ __forceinline__ void fw_issue_pv(float *o, uint32_t (*pa)[4], uint32_t v_a) {
    const uint32_t vlo = flw_desc_lo(v_a, FW_BN * 128);
    flw_pin<HD / 2>(o); /* the rescale of O lands before the fence */
    flw_fence();
#pragma unroll
    for (int kk = 0; kk < FW_BN / 16; kk++) fw_rs<KV, HD>(o, pa[kk], flw_desc_mk(vlo + (uint32_t)(kk * 2048 >> 4), flw_desc_hi(1024)));
    flw_commit();
}

/* The segment (sequence) that packed-tile token r starts: its end in this
 * tile, the position offset (row i at key base + i), the last key khi of
 * the tile's rows in it (-1 when the sequence's metadata is bad). */
struct fw_seg {
    int s;
    int64_t seg_end, base;
    int khi;
    bool bad;
};
__device__ __forceinline__ fw_seg fw_segment(const fl_args &a, int64_t r, int64_t t1) {
    fw_seg z;
    z.s = cuda_row_seq(a.qsl, a.S, r);
    const int q_len = a.qsl[z.s + 1] - a.qsl[z.s], sl = a.seq_lens[z.s];
    z.seg_end = a.qsl[z.s + 1] < t1 ? a.qsl[z.s + 1] : t1;
    z.bad = q_len <= 0 || q_len > sl || sl > a.max_blocks * a.B || r < a.qsl[z.s] || z.seg_end <= r;
    z.base = (int64_t)sl - q_len - a.qsl[z.s];
    z.khi = z.bad ? -1 : (int)(z.base + z.seg_end - 1);
    return z;
}

/* The first key tile a CTA walks in a segment (its rows from token r on,
 * row i at position base + i; bad: the segment's metadata is): 0, or with
 * a window the tile of the first key its first row sees (every later row
 * starts later). */
__device__ __forceinline__ int fw_lo_tile(const fl_args &a, int64_t base, bool bad, int64_t r) {
    if (a.window <= 0 || bad) return 0;
    const int64_t k = base + r - a.window + 1;
    return k > 0 ? (int)(k / FW_BN) : 0;
}

/* The key tiles of segment z: n_kt up to its last key, n_act those of
 * warpgroup w's rows (up to its last live row's key, clipped to the
 * segment; uniform per warpgroup); rhi[i] / rlo[i]: the last / first key
 * each of this thread's rows prow, prow + 8 sees in the segment (rhi -1:
 * none). */
__device__ __forceinline__ void fw_seg_tiles(const fl_args &a, const fw_seg &z, int w, int g, int64_t t0, int64_t t1,
                                             int64_t r, int prow, int *rhi, int *rlo, int *n_kt, int *n_act) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int64_t tok;
        int hq;
        bool live;
        fl_row(a, g, t0, t1, prow + 8 * i, &tok, &hq, &live);
        rhi[i] = !z.bad && live && tok >= r && tok < z.seg_end ? (int)(z.base + tok) : -1;
        rlo[i] = fw_rlo(a, rhi[i]);
    }
    int whi = -1;
    {
        const int fr = 64 * w, lr = 64 * w + 63 < a.QT * a.G - 1 ? 64 * w + 63 : a.QT * a.G - 1;
        int64_t ftok = t0 + fr / a.G, ltok = t0 + lr / a.G;
        ftok = ftok > r ? ftok : r;
        ltok = ltok < z.seg_end - 1 ? ltok : z.seg_end - 1;
        if (!z.bad && fr <= lr && ftok <= ltok) whi = (int)(z.base + ltok);
    }
    *n_kt = z.khi >= 0 ? z.khi / FW_BN + 1 : 0;
    *n_act = whi >= 0 ? (whi / FW_BN + 1 < *n_kt ? whi / FW_BN + 1 : *n_kt) : 0;
}

/* Eight q values at p (A) -> four registers of cache-dtype pairs; vec:
 * p is 16-byte aligned (one 16-byte load for bf16 q, two for f32). */
template <typename A, typename KV> __device__ __forceinline__ uint4 fw_ld_q8(const char *p, bool vec) {
    if constexpr (std::is_same<A, float>::value) {
        if (vec) {
            const float4 x = *(const float4 *)p, y = *(const float4 *)(p + 16);
            return make_uint4(fl_pack<KV>(x.x, x.y), fl_pack<KV>(x.z, x.w), fl_pack<KV>(y.x, y.y),
                              fl_pack<KV>(y.z, y.w));
        }
    } else if constexpr (std::is_same<KV, __nv_bfloat16>::value) {
        if (vec) return *(const uint4 *)p; /* already the operand */
    } else if (vec) {
        const uint4 u = *(const uint4 *)p;
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
        uint32_t r[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 f = __bfloat1622float2(*(const __nv_bfloat162 *)&w[i]);
            r[i] = fl_pack<KV>(f.x, f.y);
        }
        return make_uint4(r[0], r[1], r[2], r[3]);
    }
    uint4 v; /* unaligned: 4-byte (bf16) or 8-byte (f32) loads */
    v.x = fl_ld_q2<A, KV>(p);
    v.y = fl_ld_q2<A, KV>(p + 2 * sizeof(A));
    v.z = fl_ld_q2<A, KV>(p + 4 * sizeof(A));
    v.w = fl_ld_q2<A, KV>(p + 6 * sizeof(A));
    return v;
}

/* Packed Q rows row0 .. row0 + NR - 1 of the tile -> shared memory in the
 * cache dtype, swizzled (rows past the tile zero); thread t of NT. Thread t
 * takes chunk t % CPR of rows row0 + t / CPR + k NT / CPR: all its loads are
 * issued before its first store (one round trip to memory per CTA, not one
 * per row: session 16's ncu of k_flash_fa3 found ~11% of the consumers'
 * stall samples in the row-by-row version's prologue). The same (row,
 * chunk) pairs and values as a loop over idx = t, t + NT, ... */
template <typename A, typename KV, int CPR, int NR, int NT>
__device__ __forceinline__ void fw_stage_q(const fl_args &a, int g, int64_t t0, int64_t t1, uint8_t *gsm, int row0,
                                           int t) {
    constexpr int RS = NT / CPR, K = NR / RS; /* rows a pass, rows a thread */
    static_assert(NT % CPR == 0 && NR % RS == 0, "fw_stage_q: rows must split evenly over the threads");
    const int c = t % CPR, rr = row0 + t / CPR;
    const bool vec = (((uintptr_t)a.q | (uintptr_t)a.q_s0 | (uintptr_t)a.q_s1) & 15) == 0;
    uint4 v[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        int64_t tok;
        int hq;
        bool live;
        fl_row(a, g, t0, t1, rr + k * RS, &tok, &hq, &live);
        v[k] = make_uint4(0u, 0u, 0u, 0u);
        if (live)
            v[k] = fw_ld_q8<A, KV>(a.q + tok * a.q_s0 + (int64_t)hq * a.q_s1 + (int64_t)c * 8 * (int64_t)sizeof(A), vec);
    }
#pragma unroll
    for (int k = 0; k < K; k++) *(uint4 *)(gsm + flw_off(rr + k * RS, c, FW_BM)) = v[k];
}

/* l of this thread's two rows summed over the quad that shares them. */
__device__ __forceinline__ void fw_quad_sum_l(fw_rows &st) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        st.l[i] += __shfl_xor_sync(0xffffffffu, st.l[i], 1);
        st.l[i] += __shfl_xor_sync(0xffffffffu, st.l[i], 2);
    }
}

/* out = O / l for this thread's rows prow, prow + 8 (l summed over the
 * quad first). */
template <typename A, int HD>
__device__ __forceinline__ void fw_store_out(const fl_args &a, int g, int64_t t0, int64_t t1, int prow, int tq,
                                             fw_rows &st, const float *o) {
    constexpr int NO = HD / 8;
    fw_quad_sum_l(st);
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int64_t tok;
        int hq;
        bool live;
        fl_row(a, g, t0, t1, prow + 8 * i, &tok, &hq, &live);
        if (!live) continue;
        const float inv = st.l[i] > 0.0f ? 1.0f / st.l[i] : 0.0f;
        char *orow = a.out + tok * a.o_s0 + (int64_t)hq * a.o_s1;
#pragma unroll
        for (int j = 0; j < NO; j++)
            fl_st_o2<A>(orow + (j * 8 + 2 * tq) * (int)sizeof(A), o[4 * j + 2 * i] * inv, o[4 * j + 2 * i + 1] * inv);
    }
}

template <typename KV, typename A, int HD>
__global__ void __launch_bounds__(FW_THREADS, 1) k_flash_wg(fl_args a) {
    CUDA_PDL_ENTER();
    constexpr int NSL = HD / 64; /* 64-wide slabs of the head dim */
    constexpr int CPR = HD / 8;  /* 16-byte chunks per row */
    constexpr uint32_t QB = NSL * FW_BM * 128, KVB = NSL * FW_BN * 128; /* bytes: Q, one K or V tile */
    extern __shared__ __align__(16) uint8_t fw_sm[];
    const uint32_t sraw = fl_smem_addr(fw_sm), sb = (sraw + 1023u) & ~1023u;
    uint8_t *const gsm = fw_sm + (sb - sraw);
    const uint32_t skv = sb + QB; /* stage st: K at skv + 2 st KVB, V KVB after it */
    /* wg through a shuffle from lane 0: warp-uniform, so marked the
     * compiler keeps the wgmma descriptors in uniform registers (as in
     * k_flash_fa3; cuobjdump: 80 register-to-uniform moves -> 1) */
    const int tid = (int)threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), warp = (tid >> 5) & 3, lane = tid & 31;
    const int gq = lane >> 2, tq = lane & 3;
    const int g = (int)blockIdx.x;
    const int tile = a.n_tiles - 1 - (a.y0 + (int)blockIdx.y);
    const int64_t t0 = (int64_t)tile * a.QT, t1 = t0 + a.QT < a.T ? t0 + a.QT : a.T;
    const int prow = 64 * wg + 16 * warp + gq; /* this thread's packed rows: prow, prow + 8 */
    const uint32_t q_a = sb + wg * 64 * 128;   /* this warpgroup's Q rows (1024-aligned) */
    /* K/V loads: chunk lc of rows lj0 .. lj0 + LR-1 of each tile */
    constexpr int LR = FW_LR(HD);
    const int lc = tid % CPR, lj0 = tid / CPR * LR;
    const int kin = g * a.k_s1 + lc * 16, vin = g * a.v_s1 + lc * 16;
    const uint32_t ld_off = flw_off(lj0, lc, FW_BN), ld_cx = (uint32_t)((lc & 7) ^ (lj0 & 7));
    auto k_at = [&](int it) { return skv + (uint32_t)(it % FW_STAGES) * 2 * KVB; };

    /* Q [FW_BM][HD] -> shared memory in the cache dtype, swizzled (rows
     * past the tile zero) */
    fw_stage_q<A, KV, CPR, FW_BM, FW_THREADS>(a, g, t0, t1, gsm, 0, tid);
    /* (fenced into the async proxy with the first tile's copies) */

    float o[HD / 2], sc[FW_BN / 2], corr[2];
    uint32_t pa[FW_BN / 16][4];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < FW_BN / 2; i++) sc[i] = 0.0f;
    fw_rows st;
    st.m[0] = st.m[1] = -INFINITY;
    st.l[0] = st.l[1] = 0.0f;
    const float scl = a.scale_log2;

    for (int64_t r = t0; r < t1;) {
        /* (fw_segment + fw_seg_tiles' arithmetic, written out: with the
         * helpers this kernel's SASS changes, so it would need another
         * device run; k_flash_fa3 uses them, SASS unchanged) */
        const int s = cuda_row_seq(a.qsl, a.S, r);
        const int q_len = a.qsl[s + 1] - a.qsl[s], sl = a.seq_lens[s];
        const int64_t seg_end = a.qsl[s + 1] < t1 ? a.qsl[s + 1] : t1;
        const bool bad = q_len <= 0 || q_len > sl || sl > a.max_blocks * a.B || r < a.qsl[s] || seg_end <= r;
        if (bad && tid == 0) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
        const int64_t base = (int64_t)sl - q_len - a.qsl[s]; /* position of row i: base + i */
        const int khi = bad ? -1 : (int)(base + seg_end - 1);
        const int32_t *btrow = a.bt + (int64_t)s * a.max_blocks;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int64_t tok;
            int hq;
            bool live;
            fl_row(a, g, t0, t1, prow + 8 * i, &tok, &hq, &live);
            st.rhi[i] = !bad && live && tok >= r && tok < seg_end ? (int)(base + tok) : -1;
            st.rlo[i] = fw_rlo(a, st.rhi[i]);
        }
        /* the warpgroup's last key in this segment (its last live row,
         * clipped to the segment) and so its key tiles 0 .. n_act-1
         * (uniform per warpgroup) */
        int whi = -1;
        {
            const int fr = 64 * wg, lr = 64 * wg + 63 < a.QT * a.G - 1 ? 64 * wg + 63 : a.QT * a.G - 1;
            int64_t ftok = t0 + fr / a.G, ltok = t0 + lr / a.G;
            ftok = ftok > r ? ftok : r;
            ltok = ltok < seg_end - 1 ? ltok : seg_end - 1;
            if (!bad && fr <= lr && ftok <= ltok) whi = (int)(base + ltok);
        }
        /* key tiles lo .. hi of the segment, counted from lo below (lo > 0
         * only with a window) */
        const int lo = fw_lo_tile(a, base, bad, r), kb = lo * FW_BN;
        const int n_kt = khi >= 0 ? khi / FW_BN + 1 - lo : 0;
        const int n_act = whi >= 0 ? (whi / FW_BN + 1 - lo < n_kt ? whi / FW_BN + 1 - lo : n_kt) : 0;
        __syncthreads(); /* the previous segment is done with the buffers */
        if (n_kt == 0) {
            r = seg_end > r ? seg_end : r + 1;
            continue;
        }
        /* prologue: tiles 0 and 1 in flight, tile 2's block id read; S
         * and softmax of tile 0 */
        fw_load_tile<HD>(a, fw_blk(a, btrow, kb + lj0, khi), kin, vin, kb + lj0, khi, k_at(0) + ld_off,
                         k_at(0) + KVB + ld_off, ld_cx);
        fl_cp_commit();
        if (n_kt > 1)
            fw_load_tile<HD>(a, fw_blk(a, btrow, kb + FW_BN + lj0, khi), kin, vin, kb + FW_BN + lj0, khi,
                             k_at(1) + ld_off, k_at(1) + KVB + ld_off, ld_cx);
        fl_cp_commit();
        int32_t blk_next = fw_blk(a, btrow, kb + 2 * FW_BN + lj0, khi);
        fl_cp_wait<1>();   /* tile 0 landed (this thread's part) */
        flw_fence_proxy(); /* ... visible to wgmma (and Q) */
        __syncthreads();   /* ... everybody's */
        if (n_act > 0) {
            fw_issue_s<KV, HD>(sc, q_a, k_at(0));
            flw_wait<0>();
            flw_pin<FW_BN / 2>(sc);
            fw_softmax(sc, st, kb, tq, scl, corr);
            fw_rescale<HD>(o, corr);
            fw_pack<KV>(sc, pa);
        }
        /* tile it: S of tile it+1 and O += P V of tile it on the tensor
         * cores while the softmax of tile it+1 runs; tile it+2 loading */
        for (int it = 0; it < n_kt; it++) {
            fl_cp_wait<0>();   /* tile it+1 landed */
            flw_fence_proxy();
            __syncthreads();   /* ... everybody's; and everybody is done with tile it-1 */
            /* tile it+2 into the stage of tile it-1; issued after this
             * tile's wgmmas so that the tensor cores start at once and the
             * block-table reads' latency hides behind them */
            auto load_next = [&]() {
                if (it + 2 < n_kt) {
                    fw_load_tile<HD>(a, blk_next, kin, vin, kb + (it + 2) * FW_BN + lj0, khi, k_at(it + 2) + ld_off,
                                     k_at(it + 2) + KVB + ld_off, ld_cx);
                    blk_next = fw_blk(a, btrow, kb + (it + 3) * FW_BN + lj0, khi); /* lands by the next tile */
                }
                fl_cp_commit();
            };
            /* (separate branches: ptxas keeps the wgmmas asynchronous only
             * when it can see which group the wait<1> leaves running) */
            if (it + 1 < n_act) {
                fw_issue_s<KV, HD>(sc, q_a, k_at(it + 1));
                fw_issue_pv<KV, HD>(o, pa, k_at(it) + KVB);
                load_next();
                flw_wait<1>(); /* S of tile it+1 done, P V may still run */
                flw_pin<FW_BN / 2>(sc);
                fw_softmax(sc, st, kb + (it + 1) * FW_BN, tq, scl, corr);
                flw_wait<0>();
                flw_pin<HD / 2>(o);
                fw_keep(pa);
                fw_rescale<HD>(o, corr);
                fw_pack<KV>(sc, pa);
            } else if (it < n_act) { /* the warpgroup's last tile */
                fw_issue_pv<KV, HD>(o, pa, k_at(it) + KVB);
                load_next();
                flw_wait<0>();
                flw_pin<HD / 2>(o);
                fw_keep(pa);
            } else {
                load_next();
            }
        }
        r = seg_end > r ? seg_end : r + 1;
    }
    fl_cp_wait<0>();

    fw_store_out<A, HD>(a, g, t0, t1, prow, tq, st, o);
}

/* ---- the warp-specialised (FA3-style) variant (default at hd 128) ----
 * hd 128 only (hd 64 keeps k_flash_wg). CTA of 3 warpgroups (384 threads):
 * warpgroup 0 is the producer (setmaxnreg down to FA_PRODUCER_REGS; one
 * warp of it works, the other three leave), warpgroups 1 and 2 are the
 * consumers (setmaxnreg up to FA_CONSUMER_REGS) and own the packed query
 * rows 0..63 and 64..127 exactly as k_flash_wg's two warpgroups do, with
 * the same intra-warpgroup pipeline and the same softmax code.
 * K/V come in by TMA (cp.async.bulk.tensor.4d) from the paged cache: the
 * cache [blocks][slots][kv heads][hd] is a 4-D tensor map (dims hd, kv
 * head, slot, block; byte strides of the tensor), the box {64, 1, R, 1}
 * (R = min(B, 128) slots of one block, one 64-wide slab of the head dim)
 * lands with the 128B swizzle that the wgmma descriptors read (R >= 8, so
 * every box starts 1024-byte aligned in the tile). One key tile of 128 is
 * (128 / R) blocks x 2 slabs x (K, V) boxes, issued by the producer warp's
 * lanes in parallel (each lane reads its own block-table entry), all
 * completing on the stage's "full" mbarrier (one arrival with the byte
 * count). FA_STAGES stages; each consumer warp arrives on the stage's
 * "empty" mbarrier (8 arrivals) once its P V of the tile retired, and the
 * producer waits for it before refilling the stage. No CTA-wide barrier
 * after the set-up.
 * A segment's last tile, when it passes the segment's last key khi: only
 * the blocks holding keys <= khi are copied, on a separate barrier the
 * producer itself waits for; it then zeroes the V rows past khi (stale
 * smem or cache slots past the sequence could hold non-finite values, and
 * P = 0 times NaN is NaN; K past khi is masked to -inf by select), fences
 * them into the async proxy and arrives on "full" itself (same contract
 * as k_flash_wg's zero-filled cp.async).
 * Bad block ids raise CUDA_FLAG_BAD_PAGED and read block 0, as k_flash_wg.
 * A consumer warpgroup walks every key tile of every segment (waits on
 * "full", arrives on "empty") even past its own last key, so that both
 * consumers and the producer count the same stage uses.
 * VLLM_CUDA_FLASH_WG=3 adds FA3's ping-pong (PP): the two consumer
 * warpgroups take turns at issuing their wgmmas (named barriers 3 and 4,
 * 256 threads: a warpgroup waits for its turn, issues S of tile it+1 and
 * P V of tile it, then hands the turn over), so that one's softmax runs
 * while the other's GEMMs hold the tensor cores. Both take one turn per
 * key tile plus one per segment (the prologue's S), idle turns included,
 * so the counts match; warpgroup 1 hands the first turn over, warpgroup 0
 * takes a last one to consume the final hand-over. */
#define FA_THREADS 384
#define FA_STAGES 3
/* registers per thread after setmaxnreg: 64 + 2 x 216 = 3 x 168 (the
 * launch's allotment at 384 threads). ptxas -v (CUDA 13.0): 0 spills at
 * 64 / 216; with the descriptors in uniform registers (session 16) the
 * producer spilled 12 bytes at 56 / 224; before, it spilled at 24 / 240
 * (192 bytes) and 40 / 232 (68). */
#define FA_PRODUCER_REGS 64
#define FA_CONSUMER_REGS 216

/* shared memory: k_flash_wg's hd-128 layout (Q, FA_STAGES x (K, V)), then
 * the mbarriers full[FA_STAGES], empty[FA_STAGES], last */
static size_t fa_smem(void) { return (size_t)128 * 2 * (FW_BM + 2 * FA_STAGES * FW_BN) + 1024 + 8 * (2 * FA_STAGES + 1); }

/* The producer warp: every key tile of every segment of the CTA's token
 * range, into stage k % FA_STAGES (k counts tiles over the segments). */
__device__ __forceinline__ void fa_produce(const CUtensorMap *tmk, const CUtensorMap *tmv, const fl_args &a, int g,
                                           int64_t t0, int64_t t1, uint32_t skv, uint32_t bars, int lane) {
    constexpr uint32_t KVB = 2 * FW_BN * 128; /* one K or V tile, 2 slabs */
    const int R = a.B < FW_BN ? a.B : FW_BN, nbt = FW_BN / R;
    const uint32_t last = bars + 16 * FA_STAGES;
    uint32_t st = 0, ph = 0, n_last = 0; /* stage and use parity of the next tile */
    for (int64_t r = t0; r < t1;) {
        const fw_seg z = fw_segment(a, r, t1);
        if (z.bad && lane == 0) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
        const int n_kt = z.khi >= 0 ? z.khi / FW_BN + 1 : 0;
        const int32_t *btrow = a.bt + (int64_t)z.s * a.max_blocks;
        for (int it = fw_lo_tile(a, z.base, z.bad, r); it < n_kt; it++) { /* from the window's first tile */
            const uint32_t full = bars + 8 * st, kst = skv + st * 2 * KVB;
            flw_bar_wait(bars + 8 * (FA_STAGES + st), ph ^ 1); /* the consumers are done with the stage */
            const int kt0 = it * FW_BN;
            const bool part = kt0 + FW_BN - 1 > z.khi;
            const int nb = part ? (z.khi - kt0) / R + 1 : nbt; /* blocks holding keys <= khi */
            const uint32_t bar = part ? last : full;
            if (lane == 0) flw_bar_expect(bar, (uint32_t)nb * (uint32_t)R * 128u * 2u * 2u);
            __syncwarp();
            /* lane bi reads block bi's id (nb <= FW_BN / 8 = 16 blocks);
             * then one elected lane issues every block's four boxes (K
             * slab 0, 1, V slab 0, 1) from values broadcast to the warp, so
             * that the copies' operands are warp-uniform: issued by lanes
             * with their own ids, each copy went through the compiler's
             * loop over the distinct values of the active lanes, with a
             * register-to-uniform move per operand and lane (session 16:
             * 7% of the consumers' stall samples waited for a stage) */
            int32_t myblk = 0;
            if (lane < nb) {
                myblk = btrow[(kt0 + lane * R) >> a.bshift];
                if ((uint32_t)myblk >= (uint32_t)a.num_blocks) {
                    atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
                    myblk = 0;
                }
            }
            const int unb = __shfl_sync(0xffffffffu, nb, 0);
            for (int bi = 0; bi < unb; bi++) {
                const int32_t blk = __shfl_sync(0xffffffffu, myblk, bi);
                if (flw_elect_one()) {
                    const int key0 = kt0 + bi * R;
                    const uint32_t dst = kst + (uint32_t)(bi * R) * 128;
                    const int slot = key0 & (a.B - 1);
#pragma unroll
                    for (int b = 0; b < 4; b++)
                        flw_tma4(dst + (b >> 1) * KVB + (b & 1) * FW_BN * 128,
                                 b >> 1 ? (const void *)tmv : (const void *)tmk, (b & 1) * 64, g, slot, blk, bar);
                }
                __syncwarp();
            }
            if (part) { /* zero V rows past khi, then open the stage */
                flw_bar_wait(last, n_last++ & 1);
                const int z0 = z.khi + 1 - kt0;
                for (int idx = lane; idx < (FW_BN - z0) * 16; idx += 32)
                    flw_st_zero16(kst + KVB + flw_off(z0 + idx / 16, idx % 16, FW_BN));
                flw_fence_proxy();
                __syncwarp();
                if (lane == 0) flw_bar_arrive(full);
            }
            if (++st == FA_STAGES) st = 0, ph ^= 1;
        }
        r = z.seg_end > r ? z.seg_end : r + 1;
    }
    /* Tail: the warp leaves only once the consumers released every stage,
     * so no copy it issued is still in flight (as FA3's and CUTLASS's
     * producers do). An unused stage passes at once (the parity of the
     * phase before its first). */
    for (int i = 0; i < FA_STAGES; i++) {
        flw_bar_wait(bars + 8 * (FA_STAGES + st), ph ^ 1);
        if (++st == FA_STAGES) st = 0, ph ^= 1;
    }
}

/* Ping-pong turns of consumer warpgroup w (named barriers 3 + w). */
template <bool PP> __device__ __forceinline__ void fa_turn_take(int w) {
    if constexpr (PP) flw_named_sync(3 + w, 256);
}
template <bool PP> __device__ __forceinline__ void fa_turn_give(int w) {
    if constexpr (PP) flw_named_arrive(4 - w, 256);
}

/* k_flash_fa3's out = O / l (bf16 out, 16-byte aligned rows; else
 * fw_store_out): the warpgroup's fragments, rounded as fw_store_out rounds
 * them, go to its own Q rows in shared memory (64 rows x 256 bytes, free
 * once its last wgmma retired; no other warpgroup reads them), then out in
 * 16-byte stores along the rows: a warp writes two whole 256-byte rows a
 * store instead of 8 rows x 16 bytes (session 16's ncu: the fragment
 * stores' LG throttle and the exit's drain were ~8% of the consumers'
 * stall samples). Same values as fw_store_out. Thread ctid of the
 * warpgroup's 128; named barrier 1 + w. */
template <typename A, int HD>
__device__ __forceinline__ void fa_store_out(const fl_args &a, int g, int64_t t0, int64_t t1, int w, int prow, int tq,
                                             fw_rows &st, const float *o, uint8_t *gsm, int ctid) {
    constexpr int NO = HD / 8, CPR = HD / 8;
    if constexpr (!std::is_same<A, __nv_bfloat16>::value) {
        fw_store_out<A, HD>(a, g, t0, t1, prow, tq, st, o);
        (void)w, (void)gsm, (void)ctid;
    } else {
        if ((((uintptr_t)a.out | (uintptr_t)a.o_s0 | (uintptr_t)a.o_s1) & 15) != 0) {
            fw_store_out<A, HD>(a, g, t0, t1, prow, tq, st, o);
            return;
        }
        fw_quad_sum_l(st);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float inv = st.l[i] > 0.0f ? 1.0f / st.l[i] : 0.0f;
            const int r = prow + 8 * i;
#pragma unroll
            for (int j = 0; j < NO; j++)
                *(__nv_bfloat162 *)(gsm + flw_off(r, j, FW_BM) + 4 * tq) =
                    __floats2bfloat162_rn(o[4 * j + 2 * i] * inv, o[4 * j + 2 * i + 1] * inv);
        }
        if (w == 0) flw_named_sync(1, 128); /* (constant ids: ptxas counts 3 barriers, not 16) */
        else flw_named_sync(2, 128);
#pragma unroll
        for (int k = 0; k < 64 * CPR / 128; k++) {
            const int id = ctid + 128 * k, r = 64 * w + id / CPR, c = id % CPR;
            int64_t tok;
            int hq;
            bool live;
            fl_row(a, g, t0, t1, r, &tok, &hq, &live);
            if (live)
                *(uint4 *)(a.out + tok * a.o_s0 + (int64_t)hq * a.o_s1 + c * 16) = *(const uint4 *)(gsm + flw_off(r, c, FW_BM));
        }
    }
}

template <typename KV, typename A, bool PP>
__global__ void __launch_bounds__(FA_THREADS, 1)
    k_flash_fa3(const __grid_constant__ CUtensorMap tmk, const __grid_constant__ CUtensorMap tmv, fl_args a) {
    CUDA_PDL_ENTER();
    constexpr int HD = 128, CPR = HD / 8;
    constexpr uint32_t QB = 2 * FW_BM * 128, KVB = 2 * FW_BN * 128; /* bytes: Q, one K or V tile */
    extern __shared__ __align__(16) uint8_t fa_sm[];
    const uint32_t sraw = fl_smem_addr(fa_sm), sb = (sraw + 1023u) & ~1023u;
    uint8_t *const gsm = fa_sm + (sb - sraw);
    const uint32_t skv = sb + QB, bars = skv + FA_STAGES * 2 * KVB; /* full[st], empty[st], last */
    /* wg and the tile counts below go through a shuffle from lane 0: the
     * values are warp-uniform by construction, and so marked the compiler
     * keeps the shared addresses and wgmma descriptors built from them in
     * uniform registers (no register-to-uniform move per wgmma) */
    const int tid = (int)threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), lane = tid & 31;
    const int g = (int)blockIdx.x;
    const int tile = a.n_tiles - 1 - (a.y0 + (int)blockIdx.y);
    const int64_t t0 = (int64_t)tile * a.QT, t1 = t0 + a.QT < a.T ? t0 + a.QT : a.T;
    if (tid == 0) {
        for (int st = 0; st < FA_STAGES; st++) {
            flw_bar_init(bars + 8 * st, 1);                   /* full: the producer's arrival + bytes */
            flw_bar_init(bars + 8 * (FA_STAGES + st), 8);     /* empty: the 8 consumer warps */
        }
        flw_bar_init(bars + 16 * FA_STAGES, 1);
        flw_bar_init_fence();
    }
    __syncthreads();
    if (wg == 0) {
        flw_regs_dec<FA_PRODUCER_REGS>();
        if (tid < 32) fa_produce(&tmk, &tmv, a, g, t0, t1, skv, bars, lane);
        return;
    }
    flw_regs_inc<FA_CONSUMER_REGS>();
    const int w = wg - 1, ctid = tid & 127, warp = ctid >> 5; /* ctid: thread of the warpgroup */
    const int gq = lane >> 2, tq = lane & 3;
    const int prow = 64 * w + 16 * warp + gq; /* this thread's packed rows: prow, prow + 8 */
    const uint32_t q_a = sb + w * 64 * 128;  /* this warpgroup's Q rows (1024-aligned) */
    auto k_at = [&](uint32_t k) { return skv + (k % FA_STAGES) * 2 * KVB; };
    auto full_wait = [&](uint32_t k) { flw_bar_wait(bars + 8 * (k % FA_STAGES), (k / FA_STAGES) & 1); };

    /* this warpgroup's 64 Q rows -> shared memory in the cache dtype */
    fw_stage_q<A, KV, CPR, 64, 128>(a, g, t0, t1, gsm, 64 * w, ctid);
    flw_fence_proxy();
    if (w == 0) flw_named_sync(1, 128);
    else flw_named_sync(2, 128);
    if (PP && w == 1) fa_turn_give<PP>(w); /* warpgroup 0 starts */

    float o[HD / 2], sc[FW_BN / 2], corr[2];
    uint32_t pa[FW_BN / 16][4];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < FW_BN / 2; i++) sc[i] = 0.0f;
    fw_rows st;
    st.m[0] = st.m[1] = -INFINITY;
    st.l[0] = st.l[1] = 0.0f;
    const float scl = a.scale_log2;
    uint32_t kg = 0; /* tiles of the previous segments */

    for (int64_t r = t0; r < t1;) {
        const fw_seg z = fw_segment(a, r, t1);
        int n_kt, n_act;
        fw_seg_tiles(a, z, w, g, t0, t1, r, prow, st.rhi, st.rlo, &n_kt, &n_act);
        /* tiles counted from the first one the CTA walks (the producer's
         * fw_lo_tile: > 0 only with a window) */
        const int lo = fw_lo_tile(a, z.base, z.bad, r), kb = lo * FW_BN;
        n_kt = n_kt > lo ? n_kt - lo : 0, n_act = n_act > lo ? n_act - lo : 0;
        n_kt = __shfl_sync(0xffffffffu, n_kt, 0), n_act = __shfl_sync(0xffffffffu, n_act, 0);
        r = z.seg_end > r ? z.seg_end : r + 1;
        if (n_kt == 0) continue;
        full_wait(kg);
        if (n_act > 0) {
            fa_turn_take<PP>(w);
            fw_issue_s<KV, HD>(sc, q_a, k_at(kg));
            fa_turn_give<PP>(w);
            flw_wait<0>();
            flw_pin<FW_BN / 2>(sc);
            fw_softmax(sc, st, kb, tq, scl, corr);
            fw_rescale<HD>(o, corr);
            fw_pack<KV>(sc, pa);
        } else { /* an idle turn */
            fa_turn_take<PP>(w);
            fa_turn_give<PP>(w);
        }
        for (int it = 0; it < n_kt; it++) {
            const uint32_t k = kg + (uint32_t)it;
            if (it + 1 < n_kt) full_wait(k + 1);
            if (it + 1 < n_act) {
                fa_turn_take<PP>(w);
                fw_issue_s<KV, HD>(sc, q_a, k_at(k + 1));
                fw_issue_pv<KV, HD>(o, pa, k_at(k) + KVB);
                fa_turn_give<PP>(w);
                flw_wait<1>(); /* S of tile it+1 done, P V may still run */
                flw_pin<FW_BN / 2>(sc);
                fw_softmax(sc, st, kb + (it + 1) * FW_BN, tq, scl, corr);
                flw_wait<0>();
                flw_pin<HD / 2>(o);
                fw_keep(pa);
                fw_rescale<HD>(o, corr);
                fw_pack<KV>(sc, pa);
            } else if (it < n_act) { /* the warpgroup's last tile */
                fa_turn_take<PP>(w);
                fw_issue_pv<KV, HD>(o, pa, k_at(k) + KVB);
                fa_turn_give<PP>(w);
                flw_wait<0>();
                flw_pin<HD / 2>(o);
                fw_keep(pa);
            } else { /* an idle turn */
                fa_turn_take<PP>(w);
                fa_turn_give<PP>(w);
            }
            __syncwarp();
            if (lane == 0) flw_bar_arrive(bars + 8 * (FA_STAGES + k % FA_STAGES)); /* stage k free */
        }
        kg += (uint32_t)n_kt;
    }
    if (PP && w == 0) fa_turn_take<PP>(w); /* warpgroup 1's last hand-over */

    fa_store_out<A, HD>(a, g, t0, t1, w, prow, tq, st, o, gsm, ctid);
}

/* cuTensorMapEncodeTiled through the runtime's driver entry point (the
 * backend does not link libcuda); NULL when the driver lacks it. Looked up
 * once (a function-local static: thread-safe for TP's threads). */
static PFN_cuTensorMapEncodeTiled_v12000 fa_encode_lookup(void) {
    void *p = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        return (PFN_cuTensorMapEncodeTiled_v12000)p;
    (void)cudaGetLastError();
    return NULL;
}
static PFN_cuTensorMapEncodeTiled_v12000 fa_encode_fn(void) {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = fa_encode_lookup();
    return fn;
}
void *cuda_tma_encode_fn(void) { return (void *)fa_encode_fn(); }

/* The tensor map of one paged cache (base, byte strides of block / slot /
 * kv head): dims {hd 128, kvh, B, num_blocks}, box {64, 1, min(B, 128), 1},
 * 128B swizzle; false when TMA cannot describe it (alignment, strides). */
static bool fa_map(CUtensorMap *m, const char *base, int32_t s0, int32_t sb, int32_t s1, int64_t kvh, const fl_args &a,
                   rt_dtype kv) {
    PFN_cuTensorMapEncodeTiled_v12000 enc = fa_encode_fn();
    if (!enc || ((uintptr_t)base & 15) || (s0 & 15) || (sb & 15) || (s1 & 15) || s0 <= 0 || sb <= 0 || s1 <= 0)
        return false;
    const cuuint64_t dim[4] = {128, (cuuint64_t)kvh, (cuuint64_t)a.B, (cuuint64_t)a.num_blocks};
    const cuuint64_t stride[3] = {(cuuint64_t)s1, (cuuint64_t)sb, (cuuint64_t)s0};
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)(a.B < FW_BN ? a.B : FW_BN), 1}, es[4] = {1, 1, 1, 1};
    return enc(m, kv == RT_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, (void *)base,
               dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <typename KV, typename A, bool PP>
static int fa_go(cuda_ctx *c, fl_args &a, const CUtensorMap &tmk, const CUtensorMap &tmv, int64_t kvh) {
    const size_t smem = fa_smem();
    cudaError_t e = cudaFuncSetAttribute(k_flash_fa3<KV, A, PP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return cuda_fail(e, "fa3 flash attention smem opt-in", __FILE__, __LINE__);
    for (int64_t y0 = 0; y0 < a.n_tiles; y0 += 65535) {
        a.y0 = (int)y0;
        dim3 grid((unsigned)kvh, (unsigned)(a.n_tiles - y0 < 65535 ? a.n_tiles - y0 : 65535));
        cuda_launch(k_flash_fa3<KV, A, PP>, grid, FA_THREADS, smem, c->stream, tmk, tmv, a);
        CU_LAUNCHED();
    }
    return VC_OK;
}

template <bool PP>
static int fa_go_t(cuda_ctx *c, fl_args &a, const CUtensorMap &tmk, const CUtensorMap &tmv, int64_t kvh, rt_dtype kv,
                   rt_dtype at) {
    if (kv == RT_BF16)
        return at == RT_BF16 ? fa_go<__nv_bfloat16, __nv_bfloat16, PP>(c, a, tmk, tmv, kvh)
                             : fa_go<__nv_bfloat16, float, PP>(c, a, tmk, tmv, kvh);
    return at == RT_BF16 ? fa_go<__half, __nv_bfloat16, PP>(c, a, tmk, tmv, kvh)
                         : fa_go<__half, float, PP>(c, a, tmk, tmv, kvh);
}

static uint64_t g_fa3_launches; /* calls that ran k_flash_fa3 (tests) */

uint64_t cuda_flash_fa3_launches(void) { return __atomic_load_n(&g_fa3_launches, __ATOMIC_RELAXED); }

/* The warp-specialised variant at hd 128 (the default; VLLM_CUDA_FLASH_WG
 * =3: with ping-pong; =1: k_flash_wg for everything): 1 when it does not
 * take the call (the caller runs k_flash_wg; warned once when TMA cannot
 * describe the cache), else the launch's status. */
static int fa_launch(cuda_ctx *c, fl_args &a, int64_t hd, int64_t kvh, rt_dtype kv, rt_dtype at) {
    const char *e = getenv("VLLM_CUDA_FLASH_WG");
    const bool pp = e && !strcmp(e, "3");
    if ((e && *e && strcmp(e, "2") && !pp) || hd != 128 || a.B < 8) return 1;
    CUtensorMap tmk, tmv;
    if (!fa_map(&tmk, a.k, a.k_s0, a.k_sb, a.k_s1, kvh, a, kv) || !fa_map(&tmv, a.v, a.v_s0, a.v_sb, a.v_s1, kvh, a, kv)) {
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            VC_WARN("cuda flash: no TMA tensor map for this KV cache: the wgmma kernel without TMA runs instead");
        return 1;
    }
    __atomic_fetch_add(&g_fa3_launches, 1, __ATOMIC_RELAXED);
    return pp ? fa_go_t<true>(c, a, tmk, tmv, kvh, kv, at) : fa_go_t<false>(c, a, tmk, tmv, kvh, kv, at);
}

template <typename KV, typename A, int HD> static int fw_go(cuda_ctx *c, fl_args &a, int64_t kvh) {
    const size_t smem = fw_smem(HD);
    cudaError_t e = cudaFuncSetAttribute(k_flash_wg<KV, A, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return cuda_fail(e, "wgmma flash attention smem opt-in", __FILE__, __LINE__);
    /* grid.y <= 65535: longer batches take several launches (y0) */
    for (int64_t y0 = 0; y0 < a.n_tiles; y0 += 65535) {
        a.y0 = (int)y0;
        dim3 grid((unsigned)kvh, (unsigned)(a.n_tiles - y0 < 65535 ? a.n_tiles - y0 : 65535));
        cuda_launch(k_flash_wg<KV, A, HD>, grid, FW_THREADS, smem, c->stream, a);
        CU_LAUNCHED();
    }
    return VC_OK;
}

template <typename KV> static int fw_go_kv(cuda_ctx *c, fl_args &a, int64_t hd, int64_t kvh, rt_dtype at) {
    if (at == RT_BF16)
        return hd == 64 ? fw_go<KV, __nv_bfloat16, 64>(c, a, kvh) : fw_go<KV, __nv_bfloat16, 128>(c, a, kvh);
    return hd == 64 ? fw_go<KV, float, 64>(c, a, kvh) : fw_go<KV, float, 128>(c, a, kvh);
}

int cuda_flash_wg_launch(cuda_ctx *c, fl_args &a, int64_t hd, int64_t kvh, rt_dtype kv, rt_dtype at) {
    const int rc = fa_launch(c, a, hd, kvh, kv, at); /* hd 128 unless VLLM_CUDA_FLASH_WG=1 */
    if (rc <= 0) return rc;
    return kv == RT_BF16 ? fw_go_kv<__nv_bfloat16>(c, a, hd, kvh, at) : fw_go_kv<__half>(c, a, hd, kvh, at);
}
