/* cuda_flash_wg — the Hopper (sm_90a) prefill attention kernel: warpgroup
 * MMA (wgmma) over 128-byte swizzled shared-memory tiles, for the common
 * case of cuda_flash.cu's calls: hd 64 / 128, bf16 / f16 cache, causal
 * (no sliding window, no soft-cap), positive scale. cuda_flash_run sends
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
 * a double buffer, the next tile loading while this one computes; each
 * thread fences its copies into the async proxy before the barrier.
 * Per tile and warpgroup: S[64 x 128] = Q K^T as hd/16 wgmma m64n128k16
 * (both operands from shared memory, K-major), the mask on tiles crossing
 * a row's last key, online softmax on the accumulator fragments (a quad of
 * lanes shares a row), P rounded to the cache dtype straight into the
 * register A operand, O[64 x hd] += P V as 8 wgmma m64n{hd}k16 with V
 * read MN-major (transpose bit). A warpgroup whose rows all end before the
 * tile skips its math (uniform per warpgroup, as wgmma requires).
 * Registers: S 64 + O hd/2 + P 32 f32/b32 per thread, one CTA per SM
 * (shared memory: Q 16 KB per 64-wide slab of hd, 2 stages x (K, V)).
 *
 * Not (yet) done: FA3's warp-specialised TMA producer, the ping-pong of
 * two warpgroups' softmax against each other's GEMMs, and intra-warpgroup
 * overlap of S(j+1) with softmax(j): each tile here runs S, softmax, PV in
 * order, overlapped only with the cp.async of the next tile.
 */
#include "backends/cuda/cuda_flash_common.cuh"
#include "backends/cuda/cuda_flash_wgmma.cuh"

#include <math.h>

#define FW_BM 128      /* packed query rows per CTA (2 warpgroups x 64) */
#define FW_BN 128      /* keys per tile */
#define FW_THREADS 256

/* Bytes of dynamic shared memory: Q [FW_BM][hd], 2 stages x (K, V)
 * [FW_BN][hd], bf16/f16, plus 1 KB to align the base to the 1024-byte
 * swizzle period. */
static size_t fw_smem(int64_t hd) { return (size_t)hd * 2 * (FW_BM + 4 * FW_BN) + 1024; }

bool cuda_flash_wg_eligible(int64_t hd, float scale, float softcap, int32_t window) {
    return (hd == 64 || hd == 128) && window <= 0 && !(softcap > 0.0f) && scale > 0.0f;
}

/* cp.async of keys kt0 .. kt0+FW_BN-1 (those > khi zero-filled) into the
 * stage whose K / V tiles start at kdst / vdst, both already offset to this
 * thread's first row j0 and chunk c (swizzled): rows j0, j0 + RPI, ...
 * (RPI a multiple of 8, so every row keeps the swizzle phase of j0). Block
 * table reads first, a bad block id reads block 0 and raises the flag. */
template <int HD>
__device__ __forceinline__ void fw_load_tile(const fl_args &a, const int32_t *btrow, int kin, int vin, int kt0,
                                             int khi, uint32_t kdst, uint32_t vdst) {
    constexpr int CPR = HD / 8, RPI = FW_THREADS / CPR, ITS = FW_BN / RPI;
    const int key0 = kt0 + (int)threadIdx.x / CPR;
    int32_t blk[ITS];
#pragma unroll
    for (int it = 0; it < ITS; it++) {
        const int key = key0 + it * RPI;
        blk[it] = key <= khi ? btrow[key >> a.bshift] : 0;
    }
    bool bad = false;
#pragma unroll
    for (int it = 0; it < ITS; it++) {
        const int key = key0 + it * RPI;
        const bool valid = key <= khi, ok = (uint32_t)blk[it] < (uint32_t)a.num_blocks;
        bad |= valid && !ok;
        const uint32_t b = ok ? (uint32_t)blk[it] : 0u, slot = (uint32_t)(key & (a.B - 1));
        const char *kp = a.k + ((uint64_t)b * (uint32_t)a.k_s0 + (slot * (uint32_t)a.k_sb + (uint32_t)kin));
        const char *vp = a.v + ((uint64_t)b * (uint32_t)a.v_s0 + (slot * (uint32_t)a.v_sb + (uint32_t)vin));
        fl_cp16(kdst + it * RPI * 128, kp, valid ? 16 : 0);
        fl_cp16(vdst + it * RPI * 128, vp, valid ? 16 : 0);
    }
    if (bad) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
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

template <typename KV, typename A, int HD>
__global__ void __launch_bounds__(FW_THREADS, 1) k_flash_wg(fl_args a) {
    CUDA_PDL_ENTER();
    constexpr int NSL = HD / 64;             /* 64-wide slabs of the head dim */
    constexpr int CPR = HD / 8;              /* 16-byte chunks per row */
    constexpr int KS = HD / 16;              /* k-steps of S = Q K^T */
    constexpr int NS = FW_BN / 8;            /* n-tiles of S (8 keys) */
    constexpr int NO = HD / 8;               /* n-tiles of O (8 dims) */
    constexpr uint32_t QB = NSL * FW_BM * 128, KVB = NSL * FW_BN * 128; /* bytes: Q, one K or V tile */
    extern __shared__ __align__(16) uint8_t fw_sm[];
    const uint32_t sraw = fl_smem_addr(fw_sm), sb = (sraw + 1023u) & ~1023u;
    uint8_t *const gsm = fw_sm + (sb - sraw);
    const uint32_t skv = sb + QB; /* stage st: K at skv + 2 st KVB, V KVB after it */
    const int tid = (int)threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int gq = lane >> 2, tq = lane & 3;
    const int g = (int)blockIdx.x;
    const int tile = a.n_tiles - 1 - (a.y0 + (int)blockIdx.y);
    const int64_t t0 = (int64_t)tile * a.QT, t1 = t0 + a.QT < a.T ? t0 + a.QT : a.T;
    const int prow = 64 * wg + 16 * warp + gq; /* this thread's packed rows: prow, prow + 8 */
    /* K/V loads: chunk lc of rows lj0, lj0 + RPI, ... */
    const int lc = tid % CPR, lj0 = tid / CPR;
    const int kin = g * a.k_s1 + lc * 16, vin = g * a.v_s1 + lc * 16;
    const uint32_t ld_off = flw_off(lj0, lc, FW_BN);

    /* Q [FW_BM][HD] -> shared memory in the cache dtype, swizzled (rows
     * past the tile zero) */
    for (int idx = tid; idx < FW_BM * CPR; idx += FW_THREADS) {
        const int r = idx / CPR, c = idx % CPR;
        int64_t tok;
        int hq;
        bool live;
        fl_row(a, g, t0, t1, r, &tok, &hq, &live);
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (live) {
            const char *p = a.q + tok * a.q_s0 + (int64_t)hq * a.q_s1 + (int64_t)c * 8 * (int64_t)sizeof(A);
            v.x = fl_ld_q2<A, KV>(p);
            v.y = fl_ld_q2<A, KV>(p + 2 * sizeof(A));
            v.z = fl_ld_q2<A, KV>(p + 4 * sizeof(A));
            v.w = fl_ld_q2<A, KV>(p + 6 * sizeof(A));
        }
        *(uint4 *)(gsm + flw_off(r, c, FW_BM)) = v;
    }
    /* (fenced into the async proxy with the first tile's copies) */

    float o[HD / 2], sc[FW_BN / 2], m[2], l[2];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < FW_BN / 2; i++) sc[i] = 0.0f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
    const float scl = a.scale_log2;

    for (int64_t r = t0; r < t1;) {
        const int s = cuda_row_seq(a.qsl, a.S, r);
        const int q_len = a.qsl[s + 1] - a.qsl[s], sl = a.seq_lens[s];
        const int64_t seg_end = a.qsl[s + 1] < t1 ? a.qsl[s + 1] : t1;
        const bool bad = q_len <= 0 || q_len > sl || sl > a.max_blocks * a.B || r < a.qsl[s] || seg_end <= r;
        if (bad && tid == 0) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
        const int64_t base = (int64_t)sl - q_len - a.qsl[s]; /* position of row i: base + i */
        const int khi = bad ? -1 : (int)(base + seg_end - 1);
        const int32_t *btrow = a.bt + (int64_t)s * a.max_blocks;
        /* per row: the last key it sees in this segment (-1: not in it) */
        int rhi[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int64_t tok;
            int hq;
            bool live;
            fl_row(a, g, t0, t1, prow + 8 * i, &tok, &hq, &live);
            rhi[i] = !bad && live && tok >= r && tok < seg_end ? (int)(base + tok) : -1;
        }
        /* the warpgroup's last key in this segment (uniform): its last live
         * row, clipped to the segment */
        int whi = -1;
        {
            const int fr = 64 * wg, lr = 64 * wg + 63 < a.QT * a.G - 1 ? 64 * wg + 63 : a.QT * a.G - 1;
            int64_t ftok = t0 + fr / a.G, ltok = t0 + lr / a.G;
            ftok = ftok > r ? ftok : r;
            ltok = ltok < seg_end - 1 ? ltok : seg_end - 1;
            if (!bad && fr <= lr && ftok <= ltok) whi = (int)(base + ltok);
        }
        const int n_kt = khi >= 0 ? khi / FW_BN + 1 : 0;
        __syncthreads(); /* the previous segment is done with the buffers */
        if (n_kt > 0) fw_load_tile<HD>(a, btrow, kin, vin, 0, khi, skv + ld_off, skv + KVB + ld_off);
        fl_cp_commit();
        for (int it = 0; it < n_kt; it++) {
            const int kt0 = it * FW_BN, st = it & 1;
            const uint32_t ks_a = skv + (uint32_t)st * 2 * KVB, vs_a = ks_a + KVB;
            if (it + 1 < n_kt) {
                const uint32_t nk = skv + (uint32_t)(st ^ 1) * 2 * KVB;
                fw_load_tile<HD>(a, btrow, kin, vin, kt0 + FW_BN, khi, nk + ld_off, nk + KVB + ld_off);
            }
            fl_cp_commit();
            fl_cp_wait<1>();   /* tile it landed (this thread's part) */
            flw_fence_proxy(); /* ... visible to wgmma (and Q at the first tile) */
            __syncthreads();   /* ... everybody's */
            if (kt0 <= whi) {
                /* S = Q K^T: 64 rows x 128 keys per warpgroup */
                flw_fence();
#pragma unroll
                for (int ks = 0; ks < KS; ks++)
                    fw_ss<KV>(sc, flw_desc(sb + (ks >> 2) * FW_BM * 128 + wg * 64 * 128 + (ks & 3) * 32, 16, 1024),
                              flw_desc(ks_a + (ks >> 2) * FW_BN * 128 + (ks & 3) * 32, 16, 1024), ks > 0);
                flw_commit();
                flw_wait<0>();
                flw_pin<FW_BN / 2>(sc);

                /* mask keys past a row's last key (tiles crossing it, rows
                 * outside the segment); online softmax per row */
                float mb[2], corr[2];
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    if (kt0 + FW_BN - 1 > rhi[i]) {
#pragma unroll
                        for (int j = 0; j < NS; j++)
#pragma unroll
                            for (int e = 0; e < 2; e++) {
                                const int key = kt0 + j * 8 + 2 * tq + e;
                                sc[4 * j + 2 * i + e] = key <= rhi[i] ? sc[4 * j + 2 * i + e] : -INFINITY;
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
                    const float mn = fmaxf(m[i], mx * scl);
                    mb[i] = mn == -INFINITY ? 0.0f : mn;
                    corr[i] = mn == -INFINITY || mn == m[i] ? 1.0f : fl_exp2(m[i] - mn);
                    m[i] = mn;
                    l[i] *= corr[i];
                }
                if (!__all_sync(0xffffffffu, corr[0] == 1.0f && corr[1] == 1.0f)) {
#pragma unroll
                    for (int j = 0; j < NO; j++) {
                        o[4 * j + 0] *= corr[0];
                        o[4 * j + 1] *= corr[0];
                        o[4 * j + 2] *= corr[1];
                        o[4 * j + 3] *= corr[1];
                    }
                }
                float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
                for (int j = 0; j < NS; j++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) sc[4 * j + e] = fl_exp2(fmaf(sc[4 * j + e], scl, -mb[e >> 1]));
                    s0 += sc[4 * j] + sc[4 * j + 1];
                    s1 += sc[4 * j + 2] + sc[4 * j + 3];
                }
                l[0] += s0;
                l[1] += s1;
                /* P as the register A operand: k-step kk = n-tiles 2kk, 2kk+1 */
                uint32_t pa[FW_BN / 16][4];
#pragma unroll
                for (int kk = 0; kk < FW_BN / 16; kk++) {
                    pa[kk][0] = fl_pack<KV>(sc[8 * kk + 0], sc[8 * kk + 1]);
                    pa[kk][1] = fl_pack<KV>(sc[8 * kk + 2], sc[8 * kk + 3]);
                    pa[kk][2] = fl_pack<KV>(sc[8 * kk + 4], sc[8 * kk + 5]);
                    pa[kk][3] = fl_pack<KV>(sc[8 * kk + 6], sc[8 * kk + 7]);
                }
                /* O += P V: V MN-major, k-step kk = keys 16kk .. 16kk+15 */
                flw_pin<HD / 2>(o);
                flw_fence();
#pragma unroll
                for (int kk = 0; kk < FW_BN / 16; kk++)
                    fw_rs<KV, HD>(o, pa[kk], flw_desc(vs_a + kk * 2048, FW_BN * 128, 1024));
                flw_commit();
                flw_wait<0>();
                flw_pin<HD / 2>(o);
            }
            __syncthreads(); /* everybody done with this stage before it is refilled */
        }
        r = seg_end > r ? seg_end : r + 1;
    }
    fl_cp_wait<0>();

    /* out = O / l; l summed over the quad */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int64_t tok;
        int hq;
        bool live;
        fl_row(a, g, t0, t1, prow + 8 * i, &tok, &hq, &live);
        if (!live) continue;
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        char *orow = a.out + tok * a.o_s0 + (int64_t)hq * a.o_s1;
#pragma unroll
        for (int j = 0; j < NO; j++)
            fl_st_o2<A>(orow + (j * 8 + 2 * tq) * (int)sizeof(A), o[4 * j + 2 * i] * inv, o[4 * j + 2 * i + 1] * inv);
    }
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
    return kv == RT_BF16 ? fw_go_kv<__nv_bfloat16>(c, a, hd, kvh, at) : fw_go_kv<__half>(c, a, hd, kvh, at);
}
