/* cuda_gemm_glu — MATMUL_GLU of bf16 prefill rows on Hopper with the GLU in
 * the GEMM's epilogue:
 *   h[n, f] = act(x . Wg^T) * (x . Wu^T),  W = [Wg; Wu] [2f, K] bf16,
 *   x [n, K] bf16, h bf16.
 * cuBLAS has no gated epilogue, so the unfused path writes the [n, 2f]
 * product (bf16) and k_glu reads it back (the 8B prefill: 117 MB written
 * and read again a layer). Two kernels: the cooperative one below (both
 * consumer warpgroups on one tile; from K 2048) and the ping-pong one
 * further down (each warpgroup its own tiles, in turns; below K 2048,
 * where a tile has few K stages and the epilogue must hide behind the
 * other warpgroup's products). Taken by default where it measured faster
 * than cuBLAS + k_glu (gg_wanted, gg_variant); VLLM_CUDA_GEMM_GLU=1 takes
 * every eligible call, =0 none.
 *
 * Cooperative (k_gemm_glu).
 * Tile: 128 token rows x 128 features, i.e. the 128 gate and the 128
 * matching up rows of W, so one CTA holds both halves of its outputs.
 * Persistent clusters of 2 CTAs (one CTA an SM) walk pairs of token tiles
 * (2m, 2m + 1) of one feature tile in gg_tile's grouped order; the pair
 * needs the same W tiles, so each CTA loads one of them (rank 0 Wg, rank 1
 * Wu) with a multicast TMA copy into both CTAs and its own x tile (32 KB of
 * L2 reads a stage and CTA instead of 48; cuBLAS's nvjet kernels also run
 * in clusters of 2). 384 threads: warpgroup 0's first warp is the producer,
 * warpgroups 1 and 2 each compute 64 rows x (128 gate + 128 up) with one
 * wgmma m64n256k16 a k-step (Wg and Wu adjacent in the stage form one
 * 256-row K-major B operand; both operands in the 128B-swizzled slabs of
 * cuda_flash_wgmma.cuh). K runs in stages of 64: A 128 x 64, Wg 128 x 64,
 * Wu 128 x 64 (16 KB each) through a ring of 4 stages under full / empty
 * mbarriers that runs on across tiles (the next tile's loads overlap this
 * tile's epilogue). A consumer waits for its stage's products (wait_group
 * 0) and releases the stage at once, in both CTAs (the other warpgroup's
 * products keep the tensor cores busy meanwhile; 3 stages in flight).
 * Rows past n and features past f are TMA's zero fill; their outputs are
 * not stored.
 *
 * Epilogue (gg_store, both kernels): gate and up values sit in the same
 * positions of the two halves of the fragment, each rounded to bf16 first
 * (as the unfused path's bf16 product), then act(g) * u in f32, rounded
 * once to bf16, stored as bf16 pairs. So the value differs from the
 * unfused path only by the GEMM's summation order.
 *
 * Shapes: K a multiple of 64, f a multiple of 8, rows of x and W 16-byte
 * aligned with byte strides multiple of 16 (TMA), h's rows 4-byte aligned.
 *
 * Measured (H200, session 18, scripts/gpu_s18a.sh .. gpu_s18j.sh; the
 * history in docs/BENCHMARKS.md): the 8B's gate|up (2048 x 4096 -> 2 x
 * 14336) 650 us in the engine (ncu) vs nvjet's GEMM 606 + k_glu ~53;
 * tensor pipe 81% active (nvjet 93%, tile 320 x 128). The 0.6B's (2048 x
 * 1024 -> 2 x 3072): 53.7 us in the engine vs 36.8 + 11.9: its 16
 * k-stages a tile left the epilogue (tensor cores idle) a large share.
 * Session 20 (gpu_s20a.sh .. gpu_s20e.sh): a branch-free epilogue
 * (cuda_glu_act_fast) and the ping-pong kernel: the 0.6B's alone 38.0 us
 * vs cuBLAS + k_glu 46.3 (cooperative 41.5), its TTFT -0.2 ms.
 */
#include "backends/cuda/cuda_flash_wgmma.cuh"
#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_store.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

#define GG_BM 128                        /* token rows of a CTA: 2 consumer warpgroups x 64 */
#define GG_BN 128                        /* output features of a CTA (gate and up rows each) */
#define GG_BK 64                         /* K per stage: one 128-byte slab */
#define GG_STAGES 4
#define GG_THREADS 384
#define GG_TILE (GG_BM * GG_BK * 2)      /* bytes of one operand tile (A, Wg or Wu): 16 KB */
#define GG_PRODUCER_REGS 40
#define GG_CONSUMER_REGS 232
#define GG_GROUP 8                       /* token-tile pairs of a raster group (gg_item) */
#define GG_MIN_N 1024                    /* the default's least rows (gg_wanted) */
#define GG_MAX_N 6144                    /* and most rows */
#define GP_MIN_N 1024                    /* the same below K 2048 (the ping-pong kernel) */
#define GP_MAX_N 8192

struct gg_args {
    __nv_bfloat16 *h;
    int64_t h_ld; /* elements between rows of h */
    int n, f, k, act;
    int staged; /* the ping-pong kernel: rows out through the staging (gp_flush), else 4-byte stores */
};

/* bytes of shared memory: 4 stages x 48 KB, 1 KB to align the base to the
 * 1024-byte swizzle period, the mbarriers */
static size_t gg_smem(void) { return (size_t)GG_STAGES * 3 * GG_TILE + 1024 + 8 * 2 * GG_STAGES; }

/* a and b rounded to bf16 and back (one packed conversion, two unpacks) */
__device__ __forceinline__ void gg_bf16r2(float a, float b, float *ra, float *rb) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(a, b);
    const uint32_t u = *(const uint32_t *)&p;
    *ra = __uint_as_float(u << 16), *rb = __uint_as_float(u & 0xFFFF0000u);
}

__device__ __forceinline__ uint32_t gg_cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
/* Every thread of both CTAs (release / acquire): after the barrier inits
 * (a peer's copies and arrivals may target them) and before exit (no
 * remote arrival may reach a CTA that left). */
__device__ __forceinline__ void gg_cluster_sync() {
    asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}
/* One arrival on the mbarrier at the same shared offset in CTA `rank`.
 * Plain (CUTLASS's form): with .release.cluster ptxas put MEMBAR.ALL.GPU
 * and two ERRBARs before every arrival, which cost 0.25-0.43 us a stage
 * (session 18, call 6 -> 7: 1,036 -> 756 us on the 8B shape). */
__device__ __forceinline__ void gg_bar_arrive_at(uint32_t bar, uint32_t rank) {
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
                 "r"(rank)
                 : "memory");
}
/* flw_tma2 into the same shared offset of every CTA in mask, each
 * completing on its own mbarrier at offset bar. */
__device__ __forceinline__ void gg_tma2_mc(uint32_t dst, const void *map, int c0, int c1, uint32_t bar, uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
                 : "memory");
}

/* Work item t (a group of CL token tiles of BM rows, one a CTA of the
 * cluster, of one feature tile) -> this CTA's first token row m0 and
 * feature n0. Token-tile groups run fastest within raster groups of
 * GROUP, so the clusters resident at one time share a few feature tiles
 * of W (one DRAM read each, then L2) over at most CL x GROUP x BM rows of
 * x (the cooperative kernel: 2 x 8 x 128, 4 MB at K 1024, 16 MB at 4096). With the feature tiles
 * fastest the 8B's 235 MB gate|up came from DRAM once per token tile
 * (session 18, call 3: 1,031 -> 781 us). */
template <int BM, int GROUP, int CL = 2, int TW = GG_BN>
__device__ __forceinline__ void gg_item(int t, int n_pt, int n_nt, uint32_t rank, int *m0, int *n0) {
    const int per = GROUP * n_nt, grp = t / per, first = grp * GROUP;
    const int gm = n_pt - first < GROUP ? n_pt - first : GROUP, r = t - grp * per;
    *m0 = (CL * (first + r % gm) + (int)rank) * BM, *n0 = (r / gm) * TW;
}

/* The producer warp of both kernels: walks this cluster's items (token
 * tiles of BM rows in groups of CL, gg_item) and their nk K stages through
 * a ring of STAGES, waiting for a stage's release by the consumers of
 * every CTA ("empty" at bars + 8 (STAGES + st)) before issue(full, st, m0,
 * n0, kc) has one lane start its copies; then waits for the last releases
 * (no copy in flight at exit). */
template <int STAGES, int BM, int GROUP, int CL, int TW, typename Issue>
__device__ __forceinline__ void gg_produce(uint32_t bars, int item0, int n_walk, int n_items, int n_pt, int n_nt,
                                           int nk, uint32_t rank, Issue issue) {
    uint32_t st = 0, ph = 0;
    for (int t = item0; t < n_items; t += n_walk) {
        int m0, n0;
        gg_item<BM, GROUP, CL, TW>(t, n_pt, n_nt, rank, &m0, &n0);
        for (int kc = 0; kc < nk; kc++) {
            flw_bar_wait(bars + 8 * (STAGES + st), ph ^ 1);
            if (flw_elect_one()) issue(bars + 8 * st, st, m0, n0, kc);
            __syncwarp();
            if (++st == STAGES) st = 0, ph ^= 1;
        }
    }
    for (int i = 0; i < STAGES; i++) {
        flw_bar_wait(bars + 8 * (STAGES + st), ph ^ 1);
        if (++st == STAGES) st = 0, ph ^= 1;
    }
}

/* The epilogue of one warpgroup's m64n256 product d (the gate columns in
 * d[0, 64), the up column c at 128 + c of the B operand, so in d[64,
 * 128)): d[4j + 2h + e] = D[r0 + 8h][c0 + 8j + e] with r0 this thread's
 * first row, c0 its first feature (2 tq); rows past n and features past f
 * are not stored. All 64 values first (cuda_glu_act_fast: no branch among
 * them, so their exp2 / reciprocal latencies overlap), then the 32 stores.
 * k_glu takes the same function into bf16, so the unfused path's value
 * differs only by the GEMM's summation order. */
/* o[2j + h]: the bf16 pair of the thread's row r0 + 8h, features c0 +
 * 8j, + 1 of a warpgroup's 64 x (128 gate + 128 up) products d */
template <int ACT> __device__ __forceinline__ void gg_glu_pairs(const float *d, uint32_t *o) {
#pragma unroll
    for (int j = 0; j < 16; j++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int i = 4 * j + 2 * h;
            float g0, g1, u0, u1;
            gg_bf16r2(d[i], d[i + 1], &g0, &g1);
            gg_bf16r2(d[64 + i], d[64 + i + 1], &u0, &u1);
            const __nv_bfloat162 p =
                __floats2bfloat162_rn(cuda_glu_act_fast<ACT>(g0) * u0, cuda_glu_act_fast<ACT>(g1) * u1);
            o[2 * j + h] = *(const uint32_t *)&p;
        }
    }
}

template <int ACT> __device__ __forceinline__ void gg_store_t(const float *d, const gg_args &a, int r0, int c0) {
    uint32_t o[32];
    gg_glu_pairs<ACT>(d, o);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = r0 + 8 * h;
        if (row >= a.n) continue;
        uint32_t *hr = (uint32_t *)(a.h + (int64_t)row * a.h_ld + c0);
#pragma unroll
        for (int j = 0; j < 16; j++)
            if (c0 + 8 * j < a.f) hr[4 * j] = o[2 * j + h]; /* f is a multiple of 8: the pair is in or out */
    }
}
__device__ __forceinline__ void gg_store(const float *d, const gg_args &a, int r0, int c0) {
    if (a.act == RT_ACT_SILU) gg_store_t<RT_ACT_SILU>(d, a, r0, c0);
    else gg_store_t<RT_ACT_GELU_TANH>(d, a, r0, c0);
}

__global__ void __launch_bounds__(GG_THREADS, 1)
    k_gemm_glu(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tg,
               const __grid_constant__ CUtensorMap tu, gg_args a) {
    extern __shared__ __align__(16) uint8_t gg_sm[];
    const uint32_t sraw = (uint32_t)__cvta_generic_to_shared(gg_sm), sb = (sraw + 1023u) & ~1023u;
    const uint32_t bars = sb + GG_STAGES * 3 * GG_TILE; /* full[st], then empty[st] */
    const int tid = (int)threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), lane = tid & 31;
    const int nk = a.k / GG_BK, n_nt = (a.f + GG_BN - 1) / GG_BN, n_pt = ((a.n + GG_BM - 1) / GG_BM + 1) / 2;
    const int n_items = n_nt * n_pt; /* an odd last token tile's pair has rows past n only in rank 1 */
    const uint32_t rank = gg_cluster_rank();
    const int item0 = (int)blockIdx.x / 2, n_walk = (int)gridDim.x / 2;
    if (tid == 0) {
        for (int st = 0; st < GG_STAGES; st++) {
            flw_bar_init(bars + 8 * st, 1);                /* full: the producer's arrival + bytes */
            flw_bar_init(bars + 8 * (GG_STAGES + st), 16); /* empty: the consumer warps of both CTAs */
        }
        flw_bar_init_fence();
    }
    gg_cluster_sync();
    CUDA_PDL_ENTER(); /* x is the previous kernel's output */
    if (wg == 0) {
        flw_regs_dec<GG_PRODUCER_REGS>();
        if (tid < 32) /* the consumers of both CTAs release a stage; the peer's multicast brings one of the W tiles */
            gg_produce<GG_STAGES, GG_BM, GG_GROUP, 2, GG_BN>(
                bars, item0, n_walk, n_items, n_pt, n_nt, nk, rank, [&](uint32_t full, uint32_t st, int m0, int n0, int kc) {
                    const uint32_t s0 = sb + st * 3 * GG_TILE;
                    flw_bar_expect(full, 3 * GG_TILE);
                    flw_tma2(s0, &tx, kc * GG_BK, m0, full);
                    gg_tma2_mc(s0 + (1 + rank) * GG_TILE, rank ? (const void *)&tu : (const void *)&tg, kc * GG_BK,
                               n0, full, (uint16_t)3);
                });
        gg_cluster_sync();
        return;
    }
    flw_regs_inc<GG_CONSUMER_REGS>();
    const int w = wg - 1, warp = (tid >> 5) & 3, gq = lane >> 2, tq = lane & 3;
    constexpr uint32_t hi = flw_desc_hi(1024);
    /* d: one m64n256 product's fragment; the gate columns in d[0, 64), the
     * up column c at 128 + c of the B operand, so in d[64, 128) */
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.0f;
    uint32_t st = 0, ph = 0;
    for (int t = item0; t < n_items; t += n_walk) {
        int m0, n0;
        gg_item<GG_BM, GG_GROUP>(t, n_pt, n_nt, rank, &m0, &n0);
        for (int kc = 0; kc < nk; kc++) {
            flw_bar_wait(bars + 8 * st, ph);
            const uint32_t s0 = sb + st * 3 * GG_TILE;
            const uint32_t alo = flw_desc_lo(s0 + (uint32_t)w * 64 * 128, 16), blo = flw_desc_lo(s0 + GG_TILE, 16);
            flw_pin<128>(d);
            flw_fence();
#pragma unroll
            for (int ks = 0; ks < GG_BK / 16; ks++) {
                const uint32_t o = (uint32_t)(ks * 32) >> 4;
                flw_ss_n256_bf16(d, flw_desc_mk(alo + o, hi), flw_desc_mk(blo + o, hi), kc > 0 || ks > 0);
            }
            flw_commit();
            flw_wait<0>();
            flw_pin<128>(d);
            __syncwarp();
            if (lane == 0) { /* the stage is free: in this CTA and in the peer */
                flw_bar_arrive(bars + 8 * (GG_STAGES + st));
                gg_bar_arrive_at(bars + 8 * (GG_STAGES + st), rank ^ 1u);
            }
            if (++st == GG_STAGES) st = 0, ph ^= 1;
        }
        gg_store(d, a, m0 + 64 * w + 16 * warp + gq, n0 + 2 * tq);
    }
    gg_cluster_sync();
}

/* Ping-pong (k_gemm_glu_pp): each consumer warpgroup computes whole
 * tiles of 64 token rows x 128 features (one m64n256k16 a k-step, as
 * above) and the two take a CTA's items in turns: warpgroup 1 the even
 * ones, 2 the odd. The producer loads the items' K stages in order into
 * one ring (5 stages of 40 KB: x 64 x 64, Wg and Wu 128 x 64), so a
 * warpgroup's item starts at ring position li * nk. A warpgroup waits for
 * its turn (named barrier 1 + w) before its first stage and hands the turn
 * on once it has issued its last stage: the tensor cores run one
 * warpgroup's products at a time while the other one's epilogue (the GLU
 * and the stores) runs beside them. The turn also keeps a warpgroup from
 * waiting on a "full" barrier more than one phase ahead of the ring (a
 * parity wait cannot tell phases two apart). Within its item a warpgroup
 * keeps one stage of products in flight (wait_group 1) and releases the
 * stage before, in every CTA of its cluster.
 *
 * Clusters of CL CTAs (2 or 4) walk groups of CL 64-row token tiles of one
 * feature tile; rank r loads rows [r, r + 1) x 256 / CL of the stage's
 * 256-row [Wg; Wu] operand and multicasts them into every CTA, so a CTA
 * reads 8 KB of x and 32 / CL KB of W from L2 a stage: a W stage serves
 * 64 x CL token rows (the cooperative kernel's serves 256), so clusters of
 * 2 read 1.5x the cooperative kernel's L2 bytes a product, of 4 as many;
 * but only 30 clusters of 4 fit on the H200 (120 of 132 SMs). */
#define GP_BM 64                          /* token rows of a warpgroup's tile */
#define GP_STAGES 5
#define GP_A (GP_BM * GG_BK * 2)          /* bytes of a stage's x tile: 8 KB */
#define GP_STAGE (GP_A + 2 * GG_TILE)     /* 40 KB */

/* dynamic shared memory of a ping-pong kernel: ring, xb bytes for the
 * epilogue (1024-byte multiple), barriers, and the alignment slack */
static size_t gp_smem(int stages = GP_STAGES, int xb = 0) {
    return (size_t)stages * GP_STAGE + (size_t)xb + 1024 + 8 * 2 * stages;
}

/* The ping-pong kernels' output staging (GP_XB bytes, a warp's GP_XWARP):
 * 8 rows (one row half of the warp's 16) x 128 bf16 outputs, rows GP_XROW
 * bytes apart (256 + 16: the quads' 4-byte writes of 8 rows hit 32 banks);
 * lanes 0-7 then hand one row each (up to 256 bytes) to the bulk-copy
 * engine. The fragments' own 4-byte stores (8 rows x 16 bytes a warp
 * store) were the QKV epilogue's cost: 0.6B QKV alone 38.9 us fused, 41.0
 * with stores only, 27.0 without an epilogue; staged 29.8 (session 21).
 * 17 KB keeps the ring's 5 stages (a 4-stage ring with 33 KB of staging
 * starved for data in the engine: 38.1 us vs 36.9 by ncu). */
#define GP_XROW 272
#define GP_XWARP (8 * GP_XROW)
#define GP_XB (8 * GP_XWARP)

__device__ __forceinline__ uint32_t gp_pack_bf16(float a, float b) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(a, b);
    return *(const uint32_t *)&p;
}
__device__ __forceinline__ void gp_sts32(uint32_t a, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(v) : "memory");
}
/* a staged row of `bytes` (a multiple of 16) to global memory by the
 * bulk-copy engine */
__device__ __forceinline__ void gp_bulk_row(void *g, uint32_t src, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(g), "r"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void gp_bulk_commit_wait_read() {
    asm volatile("cp.async.bulk.commit_group;\ncp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void gp_fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* A warp's 8 staged rows out: row rho of the staging at xw to dst(rho)
 * (NULL: not stored), `bytes` each, by lanes 0-7; the staging is free
 * again on return. The rows' st.shared are made visible to the async
 * proxy first. */
template <typename Dst> __device__ __forceinline__ void gp_flush(uint32_t xw, int lane, uint32_t bytes, Dst dst) {
    gp_fence_async_smem();
    __syncwarp();
    if (lane < 8) {
        void *p = dst(lane);
        if (p) gp_bulk_row(p, xw + (uint32_t)(lane * GP_XROW), bytes);
        gp_bulk_commit_wait_read();
    }
    __syncwarp();
}

/* One arrival on the "empty" barrier bar in every CTA of the cluster:
 * lane l < CL of the (converged) warp arrives at rank l. */
template <int CL> __device__ __forceinline__ void gp_release(uint32_t bar, int lane) {
    __syncwarp();
    if (lane < CL) gg_bar_arrive_at(bar, (uint32_t)lane);
}

/* The ping-pong kernel's body over n rows of x, n_out outputs in tiles of
 * TW (the GLU's 128 features from a 256-row [Wg; Wu] block, or 256
 * outputs from W's rows), K k: the producer warp and the two consumer
 * warpgroups; init() fills the epilogue's tables in static shared memory
 * (every thread, before the cluster barrier); epi(d, r0, c0, xw) stores a
 * warpgroup's 64 x 256 product (xw: the warp's XB / 8 bytes of shared
 * memory past the STAGES-stage ring)
 * (r0: the thread's first row, c0: its tile's first output + 2 tq). The W
 * slices of rank r: rows wr = r x 256 / CL of the 256-row block, from tg
 * (wr < 128) or tu, at n0 + wr % 128. */
template <int CL, int TW, int STAGES, int XB, typename Init, typename Epi>
__device__ __forceinline__ void gp_run(const CUtensorMap &tx, const CUtensorMap &tg, const CUtensorMap &tu, int n,
                                       int n_out, int k, Init init, Epi epi) {
    constexpr int GROUP = 32 / CL;          /* token-tile groups of a raster group: 2,048 rows as above */
    constexpr int SR = 2 * GG_BN / CL;      /* W rows a rank loads a stage */
    extern __shared__ __align__(16) uint8_t gg_sm[];
    const uint32_t sraw = (uint32_t)__cvta_generic_to_shared(gg_sm), sb = (sraw + 1023u) & ~1023u;
    const uint32_t xs = sb + STAGES * GP_STAGE, bars = xs + XB; /* the epilogue's XB bytes; full[st], empty[st] */
    const int tid = (int)threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), lane = tid & 31;
    const int nk = k / GG_BK, n_nt = (n_out + TW - 1) / TW, n_pt = ((n + GP_BM - 1) / GP_BM + CL - 1) / CL;
    const int n_items = n_nt * n_pt;
    const uint32_t rank = gg_cluster_rank();
    const int item0 = (int)blockIdx.x / CL, n_walk = (int)gridDim.x / CL;
    if (tid == 0) {
        for (int st = 0; st < STAGES; st++) {
            flw_bar_init(bars + 8 * st, 1);                 /* full: the producer's arrival + bytes */
            flw_bar_init(bars + 8 * (STAGES + st), 4 * CL); /* empty: the consuming warpgroup's warps, every CTA */
        }
        flw_bar_init_fence();
    }
    init(); /* every thread: the epilogue's tables, before the cluster barrier */
    gg_cluster_sync();
    CUDA_PDL_ENTER(); /* x is the previous kernel's output */
    if (wg == 0) {
        flw_regs_dec<GG_PRODUCER_REGS>();
        if (tid < 32) {
            const int wr = (int)rank * SR; /* this rank's first row of [Wg; Wu] */
            const void *wmap = wr < GG_BN ? (const void *)&tg : (const void *)&tu;
            gg_produce<STAGES, GP_BM, GROUP, CL, TW>(
                bars, item0, n_walk, n_items, n_pt, n_nt, nk, rank, [&](uint32_t full, uint32_t st, int m0, int n0, int kc) {
                    const uint32_t s0 = sb + st * GP_STAGE;
                    flw_bar_expect(full, GP_STAGE); /* the peers' multicasts bring the rest of W */
                    flw_tma2(s0, &tx, kc * GG_BK, m0, full);
                    gg_tma2_mc(s0 + GP_A + (uint32_t)wr * (GG_BK * 2), wmap, kc * GG_BK, n0 + wr % GG_BN, full,
                               (uint16_t)((1u << CL) - 1u));
                });
        }
        gg_cluster_sync();
        return;
    }
    flw_regs_inc<GG_CONSUMER_REGS>();
    const int w = wg - 1, warp = (tid >> 5) & 3, gq = lane >> 2, tq = lane & 3;
    constexpr uint32_t hi = flw_desc_hi(1024);
    int li = 0; /* the CTA's item index: warpgroup w takes li % 2 == w */
    for (int t = item0; t < n_items; t += n_walk, li++) {
        if ((li & 1) != w) continue;
        /* an item's products: dead after its epilogue, whose registers the
         * epilogue may then reuse (the first wgmma does not read them) */
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; i++) d[i] = 0.0f;
        if (li > 0) { /* the other warpgroup has issued item li - 1's last stage */
            if (w == 0) flw_named_sync(1, 256);
            else flw_named_sync(2, 256);
        }
        int m0, n0;
        gg_item<GP_BM, GROUP, CL, TW>(t, n_pt, n_nt, rank, &m0, &n0);
        const uint32_t c0 = (uint32_t)li * (uint32_t)nk;
        uint32_t st = c0 % STAGES, ph = (c0 / STAGES) & 1u, pst = 0;
        for (int kc = 0; kc < nk; kc++) {
            flw_bar_wait(bars + 8 * st, ph);
            const uint32_t s0 = sb + st * GP_STAGE;
            const uint32_t alo = flw_desc_lo(s0, 16), blo = flw_desc_lo(s0 + GP_A, 16);
            flw_pin<128>(d);
            flw_fence();
#pragma unroll
            for (int ks = 0; ks < GG_BK / 16; ks++) {
                const uint32_t o = (uint32_t)(ks * 32) >> 4;
                flw_ss_n256_bf16(d, flw_desc_mk(alo + o, hi), flw_desc_mk(blo + o, hi), kc > 0 || ks > 0);
            }
            flw_commit();
            if (kc > 0) { /* the stage before is read: free it in every CTA */
                flw_wait<1>();
                flw_pin<128>(d);
                gp_release<CL>(bars + 8 * (STAGES + pst), lane);
            }
            pst = st;
            if (++st == STAGES) st = 0, ph ^= 1;
        }
        if (t + n_walk < n_items) { /* the other warpgroup's turn (item li + 1) */
            if (w == 0) flw_named_arrive(2, 256);
            else flw_named_arrive(1, 256);
        }
        flw_wait<0>();
        flw_pin<128>(d);
        gp_release<CL>(bars + 8 * (STAGES + pst), lane);
        epi(d, m0 + 16 * warp + gq, n0 + 2 * tq, xs + (uint32_t)(4 * w + warp) * (XB / 8));
    }
    gg_cluster_sync();
}

/* The ping-pong kernel's GLU tile through the warp's staging at xw: each
 * row half's 8 rows x 128 features staged, then out by the bulk-copy
 * engine, 256 bytes a row (the tile's part below f: f a multiple of 8). */
template <int ACT>
__device__ __forceinline__ void gg_store_staged(const float *d, const gg_args &a, int r0, int c0, uint32_t xw) {
    uint32_t o[32];
    gg_glu_pairs<ACT>(d, o);
    const int lane = (int)threadIdx.x & 31, gq = lane >> 2, tq = lane & 3, n0 = c0 - 2 * tq;
    const uint32_t bytes = (uint32_t)(a.f - n0 < GG_BN ? a.f - n0 : GG_BN) * 2;
    const uint32_t wrow = xw + (uint32_t)gq * GP_XROW + (uint32_t)tq * 4;
#pragma unroll
    for (int h = 0; h < 2; h++) {
#pragma unroll
        for (int j = 0; j < 16; j++) gp_sts32(wrow + (uint32_t)j * 16, o[2 * j + h]);
        gp_flush(xw, lane, bytes, [&](int rho) -> void * {
            const int row = r0 - gq + 8 * h + rho;
            return row < a.n ? a.h + (int64_t)row * a.h_ld + n0 : NULL;
        });
    }
}

template <int CL>
__global__ void __launch_bounds__(GG_THREADS, 1)
    k_gemm_glu_pp(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tg,
                  const __grid_constant__ CUtensorMap tu, gg_args a) {
    gp_run<CL, GG_BN, GP_STAGES, GP_XB>(tx, tg, tu, a.n, a.f, a.k, [] {},
                                        [&](const float *d, int r0, int c0, uint32_t xw) {
                                            if (!a.staged) gg_store(d, a, r0, c0); /* uniform */
                                            else if (a.act == RT_ACT_SILU)
                                                gg_store_staged<RT_ACT_SILU>(d, a, r0, c0, xw);
                                            else gg_store_staged<RT_ACT_GELU_TANH>(d, a, r0, c0, xw);
                                        });
}

/* A 2-D tensor map of rows x cols bf16 (row stride ld_bytes), box 64
 * columns x box_rows, 128B swizzle; false when TMA cannot describe it. */
static bool gg_map(CUtensorMap *m, const void *base, int64_t rows, int64_t cols, int64_t ld_bytes, int box_rows) {
    PFN_cuTensorMapEncodeTiled_v12000 enc = (PFN_cuTensorMapEncodeTiled_v12000)cuda_tma_encode_fn();
    if (!enc || ((uintptr_t)base & 15) || (ld_bytes & 15) || rows <= 0 || cols <= 0) return false;
    const cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, stride[1] = {(cuuint64_t)ld_bytes};
    const cuuint32_t box[2] = {GG_BK, (cuuint32_t)box_rows}, es[2] = {1, 1};
    return enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dim, stride, box, es,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

static uint64_t g_gg_launches; /* calls that ran k_gemm_glu (tests) */
static int g_gg_clusters;      /* the last launch's grid, in clusters (tests) */
static int g_gg_variant;       /* the last launch's kernel: 1 cooperative, 2 / 4 ping-pong in clusters of 2 / 4 */

extern "C" uint64_t cuda_gemm_glu_launches(void) { return __atomic_load_n(&g_gg_launches, __ATOMIC_RELAXED); }
extern "C" int cuda_gemm_glu_clusters(void) { return __atomic_load_n(&g_gg_clusters, __ATOMIC_RELAXED); }
extern "C" int cuda_gemm_glu_variant(void) { return __atomic_load_n(&g_gg_variant, __ATOMIC_RELAXED); }

/* ---- MATMUL_ROPE_STORE: the QKV GEMM with QK_ROPE_STORE in the epilogue ----
 * (sessions 20-21.) The ping-pong kernel over W's rows in tiles of 256
 * outputs = two heads of 128; a warpgroup's 64-row tile ends in gq_store:
 * each value rounded to bf16 first (the unfused path's bf16 QKV product),
 * a q / k head row's RMS over its 128 values (32 a thread, then the quad:
 * xor 1, 2), x * s * (w_off + w[i]), the neox rotation of (i, i + 64)
 * (the same thread's d[4j ..] and d[4(j + 8) ..]), theta = pos *
 * inv_freq[i] as the rope kernels; q into dst, k and v into the bf16
 * caches at slots[t] (< 0: padding, not stored; >= n_slots: the bad-slot
 * flag), a head's 8 rows at a time through shared memory and the
 * bulk-copy engine. Not bit-identical to the unfused kernels (the square
 * sum's order, rsqrtf, the SFU's sin / cos), within bf16 rounding. */
typedef struct {
    __nv_bfloat16 *q; /* dst: q[t * q_s0 + head * q_s1 + i] (elements) */
    int64_t q_s0, q_s1, n_slots;
    void *kc, *vc;          /* bf16 [slots, kvh, 128] */
    const float *qn, *kn;   /* QK-norm weights [128] or NULL */
    const int32_t *pos, *slots;
    const float *inv_freq;  /* [64] */
    int *flags;
    int n, n_out, k, h, kvh;
    float eps, w_off, af;
} gq_args;

/* sin and cos of x (|x| up to ~1e5: positions times inverse frequencies)
 * by the SFU: x reduced to [-pi, pi] with 2 pi in two parts (the product
 * k * 2pi_hi is exact inside the FMA), then __sincosf (abs error ~4e-7
 * there). sincosf's accurate path with its large-argument fallback, 32
 * times inlined, made the epilogue ~3x the ping-pong GLU kernel's code
 * and slower than the other warpgroup's products (session 21: 78 us a
 * 0.6B layer vs 41 unfused). */
__device__ __forceinline__ void gq_sincos(float x, float *s, float *c) {
    const float k = rintf(x * 0.159154943f);
    float r = fmaf(-k, 6.28318548f, x);
    r = fmaf(-k, -1.74845553e-7f, r);
    __sincosf(r, s, c);
}

/* The epilogue's constants in shared memory (gq_fill, once a CTA): the
 * inverse frequencies and the q / k norm weights with their offset (1
 * without a norm: the rotation then multiplies by 1). */
typedef struct {
    float freq[64];
    float w[2][128]; /* [q, k][i] */
} gq_tab;

__device__ __forceinline__ void gq_fill(gq_tab *t, const gq_args &r) {
    for (int i = (int)threadIdx.x; i < 64 + 256; i += (int)blockDim.x) {
        if (i < 64) t->freq[i] = r.inv_freq[i];
        else {
            const int j = i - 64, wk = j >> 7, e = j & 127;
            const float *nw = wk ? r.kn : r.qn;
            t->w[wk][e] = nw ? r.w_off + nw[e] : 1.0f;
        }
    }
}

/* The rotated (and normed) heads H0 .. H1 of the tile (both q / k), rows
 * HL .. HR of the thread (0: r0, 1: r0 + 8): the sin / cos of a (row, i)
 * computed once for both heads. d[]: the tile's products (rounded to bf16
 * here, as the unfused path's); s[hh][h] the rows' norm scales times the
 * attention factor; put(h, hh, jj, a0, a1, b0, b1) takes outputs i, i + 1
 * (i = 8 jj + 2 tq) and their partners i + 64, i + 65 of a head row. */
template <int H0, int H1, int HL, int HR, typename Put>
__device__ __forceinline__ void gq_rope(const float *d, const gq_tab *t, const bool *isq, const float (*s)[2],
                                        const float *pf, int tq, Put put) {
#pragma unroll
    for (int jj = 0; jj < 8; jj++) {
        const int i = 8 * jj + 2 * tq;
        const float2 fr = *(const float2 *)(t->freq + i);
        float w[2][4];
#pragma unroll
        for (int hh = H0; hh <= H1; hh++) {
            const float *tw = t->w[isq[hh] ? 0 : 1];
            const float2 a = *(const float2 *)(tw + i), b = *(const float2 *)(tw + i + 64);
            w[hh][0] = a.x, w[hh][1] = a.y, w[hh][2] = b.x, w[hh][3] = b.y;
        }
#pragma unroll
        for (int h = HL; h <= HR; h++) {
            float cs[2], sn[2];
            gq_sincos(pf[h] * fr.x, &sn[0], &cs[0]);
            gq_sincos(pf[h] * fr.y, &sn[1], &cs[1]);
#pragma unroll
            for (int hh = H0; hh <= H1; hh++) {
                float o0[2], o1[2], x0[2], x1[2];
                gg_bf16r2(d[4 * (16 * hh + jj) + 2 * h], d[4 * (16 * hh + jj) + 2 * h + 1], &x0[0], &x0[1]);
                gg_bf16r2(d[4 * (16 * hh + jj + 8) + 2 * h], d[4 * (16 * hh + jj + 8) + 2 * h + 1], &x1[0], &x1[1]);
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float a = x0[e] * w[hh][e], b = x1[e] * w[hh][2 + e];
                    o0[e] = (a * cs[e] - b * sn[e]) * s[hh][h];
                    o1[e] = (a * sn[e] + b * cs[e]) * s[hh][h];
                }
                put(h, hh, jj, o0[0], o0[1], o1[0], o1[1]);
            }
        }
    }
}

/* Head HH of the tile as it is (v), rows HL .. HR of the thread. */
template <int HH, int HL, int HR, typename Put> __device__ __forceinline__ void gq_plain(const float *d, int tq, Put put) {
#pragma unroll
    for (int jj = 0; jj < 8; jj++) {
#pragma unroll
        for (int h = HL; h <= HR; h++) {
            float x0[2], x1[2]; /* rounded as the unfused path's bf16 product */
            gg_bf16r2(d[4 * (16 * HH + jj) + 2 * h], d[4 * (16 * HH + jj) + 2 * h + 1], &x0[0], &x0[1]);
            gg_bf16r2(d[4 * (16 * HH + jj + 8) + 2 * h], d[4 * (16 * HH + jj + 8) + 2 * h + 1], &x1[0], &x1[1]);
            put(h, HH, jj, x0[0], x0[1], x1[0], x1[1]);
        }
    }
}

/* Rows HL .. HR of the tile's two heads through put, by kind (uniform):
 * both q / k (every tile but the boundaries of odd head counts) share the
 * sin / cos; v as it is; past the last head nothing. */
template <int HL, int HR, typename Put>
__device__ __forceinline__ void gq_heads(const float *d, const gq_args &r, const gq_tab *t, const int *kind,
                                         const bool *isq, const float (*s)[2], const float *pf, int tq, Put put) {
    if (kind[0] < 2 && kind[1] < 2) {
        gq_rope<0, 1, HL, HR>(d, t, isq, s, pf, tq, put);
        return;
    }
    if (kind[0] < 2) gq_rope<0, 0, HL, HR>(d, t, isq, s, pf, tq, put);
    else if (kind[0] == 2) gq_plain<0, HL, HR>(d, tq, put);
    if (kind[1] < 2) gq_rope<1, 1, HL, HR>(d, t, isq, s, pf, tq, put);
    else if (kind[1] == 2) gq_plain<1, HL, HR>(d, tq, put);
}

/* A warpgroup's 64 x 256 tile: two heads of 128 (q, k, v or past the
 * last head, uniform over the tile), a row half (8 of the warp's 16 rows)
 * at a time: both heads' values into registers, then each head through
 * the warp's staging at xw. */
__device__ __forceinline__ void gq_store(const float *d, const gq_args &r, const gq_tab *t, int r0, int c0,
                                         uint32_t xw) {
    const int tq = (c0 & 7) >> 1, hb = (c0 & ~7) / 128, nh = r.h + 2 * r.kvh;
    int32_t slot[2];
    float pf[2];
    bool rin[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = r0 + 8 * h;
        rin[h] = row < r.n;
        slot[h] = rin[h] ? r.slots[row] : -1;
        pf[h] = rin[h] ? (float)r.pos[row] : 0.0f;
        if (rin[h] && slot[h] >= r.n_slots) atomicOr(r.flags, CUDA_FLAG_BAD_SLOT);
    }
    int kind[2], head[2]; /* per tile head hh: 0 q, 1 k, 2 v, 3 past the last head (uniform) */
    bool isq[2];
    float s[2][2];
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int g = hb + hh;
        kind[hh] = g < r.h ? 0 : g < r.h + r.kvh ? 1 : g < nh ? 2 : 3;
        head[hh] = kind[hh] == 0 ? g : kind[hh] == 1 ? g - r.h : g - r.h - r.kvh;
        isq[hh] = kind[hh] == 0;
        s[hh][0] = s[hh][1] = r.af;
        if (kind[hh] == 0 ? !r.qn : kind[hh] == 1 ? !r.kn : true) continue; /* uniform: a q / k head's norm */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float ss = 0.0f;
#pragma unroll
            for (int jj = 0; jj < 16; jj++) {
                float a, b;
                gg_bf16r2(d[4 * (16 * hh + jj) + 2 * h], d[4 * (16 * hh + jj) + 2 * h + 1], &a, &b);
                ss = fmaf(a, a, fmaf(b, b, ss));
            }
            ss += __shfl_xor_sync(0xffffffffu, ss, 1);
            ss += __shfl_xor_sync(0xffffffffu, ss, 2);
            s[hh][h] = rsqrtf(ss * (1.0f / 128.0f) + r.eps) * r.af;
        }
    }
    const int lane = (int)threadIdx.x & 31, gq = lane >> 2;
    uint32_t u[2][16]; /* a row half's bf16 pairs: [head][jj, jj + 8 for i + 64] */
    auto put = [&](int, int hh, int jj, float a0, float a1, float b0, float b1) {
        u[hh][jj] = gp_pack_bf16(a0, a1), u[hh][jj + 8] = gp_pack_bf16(b0, b1);
    };
    /* head hh's 8 rows of row half h through the staging: lanes 0-7
     * each copy one 256-byte row out by the bulk-copy engine */
    auto flush = [&](int h, int hh) {
        const uint32_t wrow = xw + (uint32_t)gq * GP_XROW + (uint32_t)tq * 4;
#pragma unroll
        for (int jj = 0; jj < 16; jj++) gp_sts32(wrow + (uint32_t)jj * 16, u[hh][jj]);
        __nv_bfloat16 *const cache = (__nv_bfloat16 *)(kind[hh] == 1 ? r.kc : r.vc);
        gp_fence_async_smem(); /* the rows' st.shared, seen by the bulk copies */
        __syncwarp();
        const int rho = lane & 7, row = r0 - gq + 8 * h + rho;
        const int sl = __shfl_sync(0xffffffffu, slot[h], 4 * rho);
        if (lane < 8) { /* lane rho copies row rho */
            bool ok;
            __nv_bfloat16 *p;
            if (kind[hh] == 0) { /* uniform */
                p = r.q + (int64_t)row * r.q_s0 + (int64_t)head[hh] * r.q_s1;
                ok = row < r.n;
            } else {
                p = cache + ((int64_t)sl * r.kvh + head[hh]) * 128;
                ok = sl >= 0 && sl < r.n_slots; /* sl: -1 past n */
            }
            if (ok) gp_bulk_row(p, xw + (uint32_t)(rho * GP_XROW), 256);
            gp_bulk_commit_wait_read(); /* the staging is free again */
        }
        __syncwarp();
    };
    gq_heads<0, 0>(d, r, t, kind, isq, s, pf, tq, put);
    if (kind[0] < 3) flush(0, 0);
    if (kind[1] < 3) flush(0, 1);
    gq_heads<1, 1>(d, r, t, kind, isq, s, pf, tq, put);
    if (kind[0] < 3) flush(1, 0);
    if (kind[1] < 3) flush(1, 1);
}

template <int CL>
__global__ void __launch_bounds__(GG_THREADS, 1)
    k_gemm_qkv_pp(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tg,
                  const __grid_constant__ CUtensorMap tu, gq_args r) {
    __shared__ gq_tab tab;
    gp_run<CL, 256, GP_STAGES, GP_XB>(
        tx, tg, tu, r.n, r.n_out, r.k, [&] { gq_fill(&tab, r); },
        [&](const float *d, int r0, int c0, uint32_t xw) { gq_store(d, r, &tab, r0, c0, xw); });
}

typedef void (*gg_kernel)(const CUtensorMap, const CUtensorMap, const CUtensorMap, gg_args);

static const struct {
    gg_kernel k;
    unsigned cl; /* CTAs a cluster */
} gg_kernels[3] = {{k_gemm_glu, 2}, {k_gemm_glu_pp<2>, 2}, {k_gemm_glu_pp<4>, 4}};
static size_t gg_smem_of(int v) { return v ? gp_smem(GP_STAGES, GP_XB) : gg_smem(); }

/* Clusters of cl CTAs of kernel k (smem bytes of dynamic shared memory,
 * GG_THREADS threads) resident at once on device dev, asked once a device
 * and cached in known[dev] (the count + 1; 0: not asked yet); -1 when the
 * shared-memory opt-in failed (*err: its status). */
template <typename K>
static int gp_max_clusters(int *known, K k, unsigned cl, size_t smem, int dev, int *err, const char *what) {
    int c = dev >= 0 && dev < 16 ? __atomic_load_n(&known[dev], __ATOMIC_RELAXED) : 0;
    if (c) return c - 1;
    cudaError_t ce = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (ce != cudaSuccess) {
        *err = cuda_fail(ce, what, __FILE__, __LINE__);
        return -1;
    }
    c = cuda_cluster_occupancy(k, cl, GG_THREADS, smem) + 1;
    if (dev >= 0 && dev < 16) __atomic_store_n(&known[dev], c, __ATOMIC_RELAXED);
    return c - 1;
}

/* Clusters of kernel v (0 k_gemm_glu, 1 and 2 k_gemm_glu_pp in clusters
 * of 2 and 4) that can run at once on device dev (one CTA an SM), for the
 * persistent grid; 0 when it cannot run them, -1 when the shared-memory
 * opt-in failed (*err: its status). Asked once a device and kernel. */
static int gg_max_clusters(int v, int dev, int *err) {
    static int known[3][16];
    return gp_max_clusters(known[v], gg_kernels[v].k, gg_kernels[v].cl, gg_smem_of(v), dev, err,
                           "gemm_glu smem opt-in");
}

/* Token tiles of bm rows in groups of g, times feature tiles: the items
 * of a call. */
static int64_t gg_items(int64_t n, int64_t f, int bm, int g) {
    return ((n + bm - 1) / bm + g - 1) / g * ((f + GG_BN - 1) / GG_BN);
}

/* The kernel a call takes (index into gg_kernels). Below K 2048 the
 * ping-pong kernel: in clusters of 4 (W read from L2 once for 4 token
 * tiles) where that gives at least 4 rounds of items, else of 2 (all 132
 * SMs; 30 clusters of 4 fit on the H200). From K 2048 the cooperative one
 * (the 8B's gate|up: the ping-pong kernel in clusters of 2 read twice the
 * W bytes a product and was slower in the engine; clusters of 4 left 12
 * SMs idle). Session 20, alone (graphs of 20 calls), us, cuBLAS + k_glu /
 * cooperative / ping-pong 2 / 4: the 0.6B's 2048 rows 46.3 / 41.5 / 39.7
 * / 38.0, 1024 rows 24.8 / 29.3 / 21.8 / 24.8, 8192 rows 170.9 / 150.7 /
 * 141.7 / 140.5; SmolLM2-135M's (K 576) 19.1 / 22.7 / 16.3 / 18.8;
 * Qwen3-1.7B's (K 2048) 147.4 / 135.2 / 143.9 / 134.8; Qwen3-4B's (K 2560)
 * 282.2 / 276.7 / 281.7 / 292.4. VLLM_CUDA_GEMM_GLU_PP=0 / =1 and
 * VLLM_CUDA_GEMM_GLU_CL=2 / =4 override (read at each call, for A/B). */
static int gg_variant(int dev, int64_t in, int64_t n, int64_t f, int *err) {
    const char *e = getenv("VLLM_CUDA_GEMM_GLU_PP");
    const bool pp = e && *e ? !(e[0] == '0' && e[1] == 0) : in < 2048;
    if (!pp) return 0;
    const char *c = getenv("VLLM_CUDA_GEMM_GLU_CL");
    if (c && *c) return c[0] == '2' && c[1] == 0 ? 1 : 2;
    const int mc4 = gg_max_clusters(2, dev, err);
    return mc4 > 0 && gg_items(n, f, GP_BM, 4) >= 4 * (int64_t)mc4 ? 2 : 1;
}

/* Whether the fused kernel takes a call of this shape: VLLM_CUDA_GEMM_GLU
 * =1 every eligible one, =0 none; unset, where it measured faster than
 * cuBLAS + k_glu. From K 2048 (the cooperative kernel) 1,024 (GG_MIN_N) to
 * 6,144 rows (GG_MAX_N): the 8B's gate|up, TTFT -0.14 to -0.27 ms at 2048
 * tokens in 6 of 6 rounds (session 18), -0.4 / -0.7 ms at 4,096, -1.1 /
 * -1.6 ms at 6,144; at 8,190 rows +3.1 / +3.9 ms and in concurrency-64
 * serving (steps of up to 8,192 rows) 0.4-1.2% fewer tokens a second in 4
 * of 4 rounds (session 19); K 2048 / 2560 (session 20): Llama-3.2-1B-
 * and Gemma-3-4B-attention-shaped TTFT -0.08 to -0.43 ms in 5 of 6 rounds
 * (+0.04 in the sixth).
 * Below K 2048
 * (the ping-pong kernel) 1,024 (GP_MIN_N) to 8,192 rows (GP_MAX_N): the
 * 0.6B's warm TTFT 5.08 / 5.08 / 5.08 vs 5.30 / 5.27 / 5.23 ms at 2048
 * tokens, 28.96 / 28.77 vs 29.73 / 29.76 at 8190, concurrency-64 serving
 * even (session 20); at 512 rows every fused kernel was slower alone. */
static bool gg_wanted(int64_t in, int64_t n) {
    const char *e = getenv("VLLM_CUDA_GEMM_GLU");
    if (e && *e) return e[0] == '1' && e[1] == 0;
    if (in >= 2048) return n >= GG_MIN_N && n <= GG_MAX_N;
    return n >= GP_MIN_N && n <= GP_MAX_N;
}

/* 1 when the fused kernel does not take the call (the caller runs cuBLAS +
 * k_glu), else the launch's status. */
int cuda_gemm_glu_fused(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, void *h,
                        rt_dtype ht, int64_t h_ld, int64_t f, int64_t in, int64_t n, int act) {
    if (!gg_wanted(in, n)) return 1;
    if (w->dtype != RT_BF16 || xt != RT_BF16 || ht != RT_BF16 || w->stride[1] != 2 || in % GG_BK || f % 8 ||
        h_ld % 2 || ((uintptr_t)h & 3) || n < 1 || f > INT_MAX || in > INT_MAX || n > INT_MAX)
        return 1;
    int err = VC_OK;
    const int v = gg_variant(c->device, in, n, f, &err), bm = v ? GP_BM : GG_BM;
    if (err != VC_OK) return err;
    const unsigned cl = gg_kernels[v].cl;
    const int64_t items = gg_items(n, f, bm, (int)cl);
    if (items > INT_MAX) return 1;
    CUtensorMap tx, tg, tu;
    const int64_t ws = w->stride[0];
    const int w_box = v ? 2 * GG_BN / (int)cl : GG_BN; /* W rows a rank loads */
    if (!gg_map(&tx, x, n, in, x_ld * 2, bm) || !gg_map(&tg, w->data, f, in, ws, w_box) ||
        !gg_map(&tu, (const char *)w->data + f * ws, f, in, ws, w_box))
        return 1;
    const int mc = gg_max_clusters(v, c->device, &err);
    if (mc < 0) return err;
    if (mc == 0) return 1; /* no cluster fits: cuBLAS + k_glu */
    const int64_t grid_cl = items < mc ? items : mc; /* persistent: every cluster resident */
    /* the ping-pong kernel's rows out through its staging where h's rows
     * are 16-byte aligned, unless VLLM_CUDA_GEMM_GLU_STAGE=0 (A/B) */
    const char *se = getenv("VLLM_CUDA_GEMM_GLU_STAGE");
    const int staged = v && !((uintptr_t)h & 15) && !(h_ld % 8) && !(se && se[0] == '0' && se[1] == 0);
    gg_args a = {(__nv_bfloat16 *)h, h_ld, (int)n, (int)f, (int)in, act, staged};
    __atomic_store_n(&g_gg_clusters, (int)grid_cl, __ATOMIC_RELAXED);
    __atomic_store_n(&g_gg_variant, v ? (int)cl : 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g_gg_launches, 1, __ATOMIC_RELAXED);
    cudaError_t le = cuda_launch_cluster(gg_kernels[v].k, dim3((unsigned)(cl * grid_cl)), dim3(GG_THREADS),
                                         gg_smem_of(v), c->stream, cl, tx, tg, tu, a);
    if (le != cudaSuccess)
        return vc_err_set(VC_ERR_RUNTIME, "cuda gemm_glu: cluster launch: %s", cudaGetErrorString(le));
    return VC_OK;
}

/* ---- MATMUL_ROPE_STORE host side ---- */

typedef void (*gq_kernel)(const CUtensorMap, const CUtensorMap, const CUtensorMap, gq_args);

/* kernel v: clusters of 2 (0) or 4 (1) */
static gq_kernel gq_kernel_of(int v) {
    return v ? k_gemm_qkv_pp<4> : k_gemm_qkv_pp<2>;
}

/* dynamic shared memory of k_gemm_qkv_pp: the ring and the staging */
static size_t gq_smem(void) { return gp_smem(GP_STAGES, GP_XB); }

/* as gg_max_clusters, for kernel v of gq_kernel_of (0: clusters of 2,
 * 1: of 4) */
static int gq_max_clusters(int v, int dev, int *err) {
    static int known[2][16];
    return gp_max_clusters(known[v], gq_kernel_of(v), v ? 4u : 2u, gq_smem(), dev, err, "qkv_rope smem opt-in");
}

static uint64_t g_gq_launches; /* calls that ran k_gemm_qkv_pp (tests) */
extern "C" uint64_t cuda_qkv_rope_launches(void) { return __atomic_load_n(&g_gq_launches, __ATOMIC_RELAXED); }

static bool gq_vec(const rt_tensor *t, rt_dtype dt, int64_t n) {
    return t && t->dtype == dt && rt_tensor_nelem(t) == n && rt_tensor_is_contiguous(t) && !((uintptr_t)t->data & 7);
}

/* Clusters of 2 CTAs unless VLLM_CUDA_QKV_CL=4 (read at each call, for
 * A/B): alone, 2 were faster at every row count measured (1,024 to 8,192
 * rows, session 21). */
static int gq_cl(void) {
    const char *ce = getenv("VLLM_CUDA_QKV_CL");
    return ce && ce[0] == '4' && ce[1] == 0 ? 4 : 2;
}

/* Items of a call: groups of cl 64-row token tiles x 256-output tiles. */
static int64_t gq_items(int64_t n, int64_t n_out, int cl) {
    return ((n + GP_BM - 1) / GP_BM + cl - 1) / cl * ((n_out + 255) / 256);
}

/* The least fill of the rounds of items (percent) for the default rule:
 * the 0.6B at 1,087 rows (a 1,024-token prefill with 63 decodes, the
 * common step of concurrency-64 serving) fills 3 rounds of 66 clusters
 * 73%, and serving ran 4% fewer tokens a second fused (session 21);
 * 2,048 and 8,192 rows fill 97%. */
#define GQ_MIN_FILL 85

/* Whether k_gemm_qkv_pp takes the call: VLLM_CUDA_QKV_ROPE=0 never, =1
 * every eligible call, unset where its rounds fill GQ_MIN_FILL (read at
 * each call); eligible: bf16 x, W and q, head_dim 128 with full neox rotary, K a
 * multiple of 64 below 2048 (the ping-pong kernel's range for the GLU;
 * larger K not measured for this one), 1024 to 8192 rows,
 * TMA-describable x and W, contiguous bf16 caches, q and cache
 * rows 16-byte aligned, the norm weights and inverse frequencies 8-byte
 * aligned. Measured (session 21, clusters of 2, the 0.6B's 2048 x 1024 ->
 * 4096): alone 30.8 us vs MATMUL + QK_ROPE_STORE 38.3; in the engine
 * (ncu) 37.8 vs 26.7 + 14.3; warm TTFT 5.07 / 5.09 / 5.09 / 5.08 vs
 * 5.18 / 5.15 / 5.13 / 5.10 ms. */
extern "C" bool cuda_matmul_rope_store_fits(cuda_ctx *c, const rt_op_args *a) {
    const char *e = getenv("VLLM_CUDA_QKV_ROPE");
    if (e && e[0] == '0' && e[1] == 0) return false;
    const rt_tensor *x = a->src[0], *w = a->src[1], *dst = a->dst;
    const rt_tensor *kc = a->p.rope_store.k_cache, *vc = a->p.rope_store.v_cache;
    if (x->dtype != RT_BF16 || w->dtype != RT_BF16 || dst->dtype != RT_BF16 || x->ndim != 2 || w->ndim != 2 ||
        dst->ndim != 3 || x->stride[1] != 2 || w->stride[1] != 2 || dst->stride[2] != 2)
        return false;
    const int64_t n = x->shape[0], k = x->shape[1], hd = dst->shape[2];
    if (hd != 128 || k % GG_BK || k >= 2048 || k != w->shape[1] || n < GP_MIN_N || n > GP_MAX_N || (x->stride[0] & 15) ||
        (w->stride[0] & 15) || ((uintptr_t)x->data & 15) || ((uintptr_t)w->data & 15) || w->shape[0] < 256)
        return false;
    if (a->p.rope_store.rot_dim != 128 || !a->p.rope_store.neox || kc->dtype != vc->dtype ||
        kc->dtype != RT_BF16 || !rt_tensor_is_contiguous(kc) ||
        !rt_tensor_is_contiguous(vc) || ((uintptr_t)kc->data & 15) || ((uintptr_t)vc->data & 15) ||
        ((uintptr_t)dst->data & 15) || (dst->stride[0] & 15) || (dst->stride[1] & 15))
        return false; /* 16-byte q rows and cache rows (the bf16 path's stores) */
    const rt_tensor *qn = a->p.rope_store.q_norm, *kn = a->p.rope_store.k_norm;
    if ((qn && !gq_vec(qn, RT_F32, 128)) || (kn && !gq_vec(kn, RT_F32, 128)) || !gq_vec(a->src[4], RT_F32, 64) ||
        !gq_vec(a->src[3], RT_I32, n) || !gq_vec(a->src[5], RT_I32, n))
        return false;
    if (n > INT_MAX || w->shape[0] > INT_MAX || k > INT_MAX) return false;
    if (e && e[0] == '1' && e[1] == 0) return true; /* =1: every eligible call */
    /* unset: where the last round of items is nearly full (the kernel's
     * time goes by rounds; cuBLAS's tiles quantise finer) */
    int err = 0;
    if (cuda_enter(c) < 0) return false;
    const int cl = gq_cl(), mc = gq_max_clusters(cl == 4, c->device, &err);
    if (mc <= 0) return false;
    const int64_t items = gq_items(n, w->shape[0], cl), rounds = (items + mc - 1) / mc;
    return items * 100 >= GQ_MIN_FILL * rounds * mc;
}

extern "C" int cuda_op_matmul_rope_store(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    if (!cuda_matmul_rope_store_fits(c, a)) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul_rope_store: shape");
    const rt_tensor *x = a->src[0], *w = a->src[1], *dst = a->dst;
    const rt_tensor *kc = a->p.rope_store.k_cache, *vc = a->p.rope_store.v_cache;
    const int64_t n = x->shape[0], k = x->shape[1], n_out = w->shape[0], kvh = kc->shape[kc->ndim - 2];
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    int err = VC_OK;
    const int cl = gq_cl(), v = cl == 4;
    const int mc = gq_max_clusters(v, c->device, &err);
    if (mc < 0) return err;
    if (mc == 0) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul_rope_store: no cluster of %d fits", cl);
    /* W's rows from tg, and from tu = W + 128 rows (the producer's second
     * half of a 256-row tile: tu at n0 + wr - 128) */
    CUtensorMap tx, tg, tu;
    const int64_t ws = w->stride[0];
    const int w_box = 2 * GG_BN / cl;
    if (!gg_map(&tx, x->data, n, k, x->stride[0], GP_BM) || !gg_map(&tg, w->data, n_out, k, ws, w_box) ||
        !gg_map(&tu, (const char *)w->data + GG_BN * ws, n_out - GG_BN, k, ws, w_box))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul_rope_store: TMA cannot describe x or W");
    const int64_t items = gq_items(n, n_out, cl);
    const int64_t grid_cl = items < mc ? items : mc;
    gq_args r;
    r.q = (__nv_bfloat16 *)dst->data;
    r.q_s0 = dst->stride[0] / 2, r.q_s1 = dst->stride[1] / 2;
    r.n_slots = rt_tensor_nelem(kc) / (kvh * 128);
    r.kc = kc->data, r.vc = vc->data;
    r.qn = a->p.rope_store.q_norm ? (const float *)a->p.rope_store.q_norm->data : NULL;
    r.kn = a->p.rope_store.k_norm ? (const float *)a->p.rope_store.k_norm->data : NULL;
    r.pos = (const int32_t *)a->src[3]->data, r.slots = (const int32_t *)a->src[5]->data;
    r.inv_freq = (const float *)a->src[4]->data;
    r.flags = c->d_flags;
    r.n = (int)n, r.n_out = (int)n_out, r.k = (int)k, r.h = (int)dst->shape[1], r.kvh = (int)kvh;
    r.eps = a->p.rope_store.eps, r.w_off = a->p.rope_store.w_offset, r.af = a->p.rope_store.attn_factor;
    __atomic_fetch_add(&g_gq_launches, 1, __ATOMIC_RELAXED);
    cudaError_t le = cuda_launch_cluster(gq_kernel_of(v), dim3((unsigned)(cl * grid_cl)), dim3(GG_THREADS), gq_smem(),
                                         c->stream, (unsigned)cl, tx, tg, tu, r);
    if (le != cudaSuccess)
        return vc_err_set(VC_ERR_RUNTIME, "cuda matmul_rope_store: cluster launch: %s", cudaGetErrorString(le));
    return VC_OK;
}
