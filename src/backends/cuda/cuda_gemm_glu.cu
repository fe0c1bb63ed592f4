/* cuda_gemm_glu — MATMUL_GLU of bf16 prefill rows on Hopper with the GLU in
 * the GEMM's epilogue (VLLM_CUDA_GEMM_GLU=1; off by default until measured
 * on the device):
 *   h[n, f] = act(x . Wg^T) * (x . Wu^T),  W = [Wg; Wu] [2f, K] bf16,
 *   x [n, K] bf16, h bf16.
 * cuBLAS has no gated epilogue, so the unfused path writes the [n, 2f]
 * product (bf16) and k_glu reads it back: on the 0.6B prefill 25 MB
 * written and read again, 11.9 us a layer in k_glu (session 17's ncu).
 *
 * Tile: 128 token rows x 128 features, i.e. 128 gate and the 128
 * matching up rows of W, so one CTA holds both halves of its outputs; one
 * persistent CTA an SM walks the tiles (branch s17-ggp; main's first
 * version launched a CTA a tile: 2.9 waves at the 0.6B's shape, no
 * overlap of a tile's epilogue with the next tile's loads). 384
 * threads: warpgroup 0's first warp is the producer (TMA), warpgroups 1 and
 * 2 each compute 64 rows x (128 gate + 128 up) with wgmma m64n128k16 (both
 * operands K-major in shared memory, the 128B-swizzled slabs of
 * cuda_flash_wgmma.cuh). K runs in stages of 64 (one slab): A 128 x 64,
 * Wg 128 x 64, Wu 128 x 64 (16 KB each) through a ring of GG_STAGES stages
 * under full / empty mbarriers (the k_flash_fa3 pattern). Each consumer
 * keeps one stage's wgmma group in flight while the next is issued
 * (wait_group 1, as CUTLASS's mainloop), then releases the older stage.
 * Rows past n and features past f are TMA's zero fill; their outputs are
 * not stored.
 *
 * Epilogue: gate and up values sit in the same registers of the two
 * accumulators (fragment layout in cuda_flash_wgmma.cuh), each rounded to
 * bf16 first (as the unfused path's bf16 product), then act(g) * u in f32,
 * rounded once to bf16, stored as bf16 pairs. So the value differs from the
 * unfused path only by the GEMM's summation order.
 *
 * Shapes: K a multiple of 64, f a multiple of 8, rows of x and W 16-byte
 * aligned with byte strides multiple of 16 (TMA), h's rows 4-byte aligned.
 *
 * Measured (H200, session 17, scripts/gpu_s17h.sh): correct at the first
 * run (equal to cuBLAS + k_glu on 5 of 6 test shapes, memcheck clean), but
 * 50.9 us vs cuBLAS + k_glu's 49.3 at 2048 x 1024 -> 2 x 3072 and slower in
 * the engine (0.6B TTFT +0.23 ms), hence off by default. What it lacks
 * against cuBLAS: one CTA an SM (192 KB of stages) in 2.9 waves with no
 * overlap of a tile's epilogue and the next tile's loads (a persistent
 * tile loop, or two tiles per CTA with ping-pong consumers, would give it).
 */
#include "backends/cuda/cuda_flash_wgmma.cuh"
#include "backends/cuda/cuda_internal.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define GG_BM 128                        /* token rows of a CTA: 2 consumer warpgroups x 64 */
#define GG_BN 128                        /* output features of a CTA (gate and up rows each) */
#define GG_BK 64                         /* K per stage: one 128-byte slab */
#define GG_STAGES 4
#define GG_THREADS 384
#define GG_TILE (GG_BM * GG_BK * 2)      /* bytes of one operand tile (A, Wg or Wu): 16 KB */
#define GG_PRODUCER_REGS 40
#define GG_CONSUMER_REGS 232

struct gg_args {
    __nv_bfloat16 *h;
    int64_t h_ld; /* elements between rows of h */
    int n, f, k, act;
    int group; /* token tiles of a raster group (gg_tile); 0: feature tiles fastest */
};

/* Tile t's first token row m0 and feature n0. Token tiles run fastest
 * within groups of a.group token tiles, so the CTAs resident at one time
 * share a few feature tiles of W (one DRAM read each, then L2) over at
 * most a.group x 128 rows of x (4 MB at K 1024, 16 MB at 4096): W is read
 * from DRAM about once per group instead of once per token tile (the 8B's
 * 235 MB gate|up at 2048 rows: 16 times with the feature tiles fastest). */
__device__ __forceinline__ void gg_tile(const gg_args &a, int t, int n_mt, int n_nt, int *m0, int *n0) {
    if (a.group <= 0) {
        *n0 = (t % n_nt) * GG_BN, *m0 = (t / n_nt) * GG_BM;
        return;
    }
    const int per = a.group * n_nt, grp = t / per, first = grp * a.group;
    const int gm = n_mt - first < a.group ? n_mt - first : a.group, r = t - grp * per;
    *m0 = (first + r % gm) * GG_BM, *n0 = (r / gm) * GG_BN;
}

/* bytes of shared memory: the stages (4 x 48 KB), the output tile for the
 * TMA store (128 x 128 bf16, 32 KB), 1 KB to align the base to the 1024-byte
 * swizzle period, the mbarriers: 230,464 of the 232,448 a block may have */
#define GG_CB (GG_BM * GG_BN * 2)
static size_t gg_smem(void) { return (size_t)GG_STAGES * 3 * GG_TILE + GG_CB + 1024 + 8 * 2 * GG_STAGES; }

__device__ __forceinline__ float gg_bf16r(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

/* ---- 2-CTA clusters (CL): the pair's CTAs take token tiles m and m + 1 of
 * the same feature tile, so they need the same Wg and Wu tiles; each loads
 * one of them (rank 0 Wg, rank 1 Wu) with a multicast copy into both CTAs'
 * shared memory, and its own x tile: 32 KB of L2 reads a stage and CTA
 * instead of 48 (cuBLAS's nvjet kernels run in clusters of 2 too). A
 * stage is refilled only once the consumers of both CTAs released it:
 * each consumer warp arrives on its own and on its peer's "empty". */
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
/* One arrival on the mbarrier at the same shared offset in CTA `rank`. */
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

/* Work item t's tile: without clusters tile t in gg_tile's order; with
 * them pair t of token tiles (2m, 2m + 1) and this CTA's half of it. */
template <bool CL>
__device__ __forceinline__ void gg_item(const gg_args &a, int t, int n_mt, int n_nt, uint32_t rank, int *m0, int *n0) {
    if constexpr (CL) {
        gg_args b = a;
        b.group = a.group > 1 ? a.group / 2 : a.group;
        gg_tile(b, t, (n_mt + 1) / 2, n_nt, m0, n0);
        *m0 = 2 * *m0 + (int)rank * GG_BM;
    } else {
        gg_tile(a, t, n_mt, n_nt, m0, n0);
        (void)rank;
    }
}

/* TMA store of the box at (c0, c1) of the 2-D tensor map from shared memory
 * at src, in this thread's bulk group. */
__device__ __forceinline__ void gg_tma_store2(const void *map, uint32_t src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"((uint64_t)map),
                 "r"(src), "r"(c0), "r"(c1)
                 : "memory");
}

/* CL: clusters of 2 (above). W0: a consumer waits for all its products of a
 * stage (wait_group 0) and releases the stage at once, as the fast
 * hand-written Hopper GEMMs do: the other consumer warpgroup's products keep
 * the tensor cores busy meanwhile, and 3 of the 4 stages are in flight
 * instead of 2 (wait_group 1 holds the previous stage one more step). TS:
 * the epilogue writes its 64 x 128 bf16 rows to shared memory (128B
 * swizzle, conflict-free) and one thread stores them with two TMA boxes,
 * asynchronously: the next tile's products start while the store drains. */
template <bool CL, bool W0, bool TS>
__global__ void __launch_bounds__(GG_THREADS, 1)
    k_gemm_glu(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tg,
               const __grid_constant__ CUtensorMap tu, const __grid_constant__ CUtensorMap th, gg_args a) {
    constexpr int STAGES = GG_STAGES;
    constexpr uint32_t TILE = GG_TILE;
    extern __shared__ __align__(16) uint8_t gg_sm[];
    const uint32_t sraw = (uint32_t)__cvta_generic_to_shared(gg_sm), sb = (sraw + 1023u) & ~1023u;
    const uint32_t sc = sb + STAGES * 3 * TILE; /* the output tile (TS) */
    const uint32_t bars = sc + GG_CB;           /* full[st], then empty[st] */
    const int tid = (int)threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0), lane = tid & 31;
    const int nk = a.k / GG_BK, n_nt = (a.f + GG_BN - 1) / GG_BN, n_mt = (a.n + GG_BM - 1) / GG_BM;
    /* work items: tiles, or pairs of token tiles with clusters */
    const int n_items = n_nt * (CL ? (n_mt + 1) / 2 : n_mt);
    const uint32_t rank = CL ? gg_cluster_rank() : 0;
    const int item0 = CL ? (int)blockIdx.x / 2 : (int)blockIdx.x, n_walk = CL ? (int)gridDim.x / 2 : (int)gridDim.x;
    if (tid == 0) {
        for (int st = 0; st < STAGES; st++) {
            flw_bar_init(bars + 8 * st, 1);                           /* full: the producer's arrival + bytes */
            flw_bar_init(bars + 8 * (STAGES + st), CL ? 16 : 8);      /* empty: the consumer warps (of both CTAs) */
        }
        flw_bar_init_fence();
    }
    if constexpr (CL) gg_cluster_sync();
    else __syncthreads();
    CUDA_PDL_ENTER(); /* x is the previous kernel's output */
    /* Items item0, + n_walk, .. in gg_item's order. The stage ring runs on
     * across tiles, so the producer loads the next tile's first stages
     * while the consumers run this tile's epilogue. */
    if (wg == 0) {
        flw_regs_dec<GG_PRODUCER_REGS>();
        if (tid < 32) {
            uint32_t st = 0, ph = 0;
            for (int t = item0; t < n_items; t += n_walk) {
                int m0, n0;
                gg_item<CL>(a, t, n_mt, n_nt, rank, &m0, &n0);
                for (int kc = 0; kc < nk; kc++) {
                    flw_bar_wait(bars + 8 * (STAGES + st), ph ^ 1); /* the consumers are done with the stage */
                    if (flw_elect_one()) {
                        const uint32_t full = bars + 8 * st, s0 = sb + st * 3 * TILE;
                        flw_bar_expect(full, 3 * TILE); /* with CL, the peer's multicast brings one W tile */
                        flw_tma2(s0, &tx, kc * GG_BK, m0, full);
                        if constexpr (CL) {
                            gg_tma2_mc(s0 + (1 + rank) * TILE, rank ? (const void *)&tu : (const void *)&tg,
                                       kc * GG_BK, n0, full, (uint16_t)3);
                        } else {
                            flw_tma2(s0 + TILE, &tg, kc * GG_BK, n0, full);
                            flw_tma2(s0 + 2 * TILE, &tu, kc * GG_BK, n0, full);
                        }
                    }
                    __syncwarp();
                    if (++st == STAGES) st = 0, ph ^= 1;
                }
            }
            for (int i = 0; i < STAGES; i++) { /* no copy in flight at exit */
                flw_bar_wait(bars + 8 * (STAGES + st), ph ^ 1);
                if (++st == STAGES) st = 0, ph ^= 1;
            }
        }
        if constexpr (CL) gg_cluster_sync();
        return;
    }
    flw_regs_inc<GG_CONSUMER_REGS>();
    const int w = wg - 1, ctid = tid & 127, warp = (tid >> 5) & 3, gq = lane >> 2, tq = lane & 3;
    constexpr uint32_t hi = flw_desc_hi(1024);
    /* d: one m64n256 product's fragment; the gate columns in d[0, 64), the
     * up column c at 128 + c of the B operand, so in d[64, 128) */
    float d[128];
    float *const g = d, *const u = d + 64;
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.0f;
    /* release a stage: this CTA's "empty", and with CL the peer's */
    auto release = [&](uint32_t s) {
        __syncwarp();
        if (lane == 0) {
            flw_bar_arrive(bars + 8 * (STAGES + s));
            if constexpr (CL) gg_bar_arrive_at(bars + 8 * (STAGES + s), rank ^ 1u);
        }
    };
    const uint32_t cw = sc + (uint32_t)w * (GG_CB / 2); /* this warpgroup's 64 output rows: two 64 x 64 boxes */
    uint32_t st = 0, ph = 0, prev = 0;
    for (int t = item0; t < n_items; t += n_walk) {
        int m0, n0;
        gg_item<CL>(a, t, n_mt, n_nt, rank, &m0, &n0);
        for (int kc = 0; kc < nk; kc++) {
            flw_bar_wait(bars + 8 * st, ph);
            const uint32_t s0 = sb + st * 3 * TILE;
            const uint32_t alo = flw_desc_lo(s0 + (uint32_t)w * 64 * 128, 16), glo = flw_desc_lo(s0 + TILE, 16);
            flw_pin<128>(d);
            flw_fence();
#pragma unroll
            for (int ks = 0; ks < GG_BK / 16; ks++) {
                const uint32_t o = (uint32_t)(ks * 32) >> 4;
                const int acc = kc > 0 || ks > 0; /* the tile's first product overwrites */
                /* Wg and Wu are adjacent in the stage: one 256-row B operand */
                flw_ss_n256_bf16(d, flw_desc_mk(alo + o, hi), flw_desc_mk(glo + o, hi), acc);
            }
            flw_commit();
            if constexpr (W0) {
                flw_wait<0>(); /* this stage's products are done: release it */
                flw_pin<128>(d);
                release(st);
            } else {
                flw_wait<1>(); /* the previous stage's products are done: release it */
                flw_pin<128>(d);
                if (kc > 0) release(prev);
            }
            prev = st;
            if (++st == STAGES) st = 0, ph ^= 1;
        }
        if constexpr (!W0) {
            flw_wait<0>();
            flw_pin<128>(d);
            release(prev); /* the tile's last stage */
        }
        /* d[4j + 2h + e] = D[16 warp + gq + 8h][8j + 2tq + e] of this warpgroup's 64 rows */
        if constexpr (TS) {
            /* the previous tile's store has read the buffer (its issuing thread
             * waits, the named barrier tells the others) */
            if (ctid == 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
            if (w == 0) flw_named_sync(1, 128);
            else flw_named_sync(2, 128);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = 16 * warp + gq + 8 * h; /* row of the box; r & 7 == gq */
#pragma unroll
                for (int j = 0; j < 16; j++) {
                    const int i = 4 * j + 2 * h;
                    const float v0 = cuda_glu_act(a.act, gg_bf16r(g[i])) * gg_bf16r(u[i]);
                    const float v1 = cuda_glu_act(a.act, gg_bf16r(g[i + 1])) * gg_bf16r(u[i + 1]);
                    const __nv_bfloat162 v = __floats2bfloat162_rn(v0, v1);
                    /* box j / 8, 16-byte chunk j % 8 of row r, swizzled by r & 7 */
                    const uint32_t ad = cw + (uint32_t)(j >> 3) * (64 * 128) + (uint32_t)r * 128 +
                                        (uint32_t)(((j & 7) ^ gq) << 4) + 4u * (uint32_t)tq;
                    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ad), "r"(*(const uint32_t *)&v) : "memory");
                }
            }
            flw_fence_proxy(); /* the writes, visible to the TMA store */
            if (w == 0) flw_named_sync(1, 128);
            else flw_named_sync(2, 128);
            if (ctid == 0) { /* rows past n and features past f are clipped by TMA */
                gg_tma_store2(&th, cw, n0, m0 + 64 * w);
                gg_tma_store2(&th, cw + 64 * 128, n0 + 64, m0 + 64 * w);
                asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
            }
        } else {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = m0 + 64 * w + 16 * warp + gq + 8 * h;
                if (row >= a.n) continue;
                __nv_bfloat16 *hr = a.h + (int64_t)row * a.h_ld;
#pragma unroll
                for (int j = 0; j < 16; j++) {
                    const int col = n0 + 8 * j + 2 * tq;
                    if (col >= a.f) continue;
                    const int i = 4 * j + 2 * h;
                    const float v0 = cuda_glu_act(a.act, gg_bf16r(g[i])) * gg_bf16r(u[i]);
                    const float v1 = cuda_glu_act(a.act, gg_bf16r(g[i + 1])) * gg_bf16r(u[i + 1]);
                    *(__nv_bfloat162 *)(hr + col) = __floats2bfloat162_rn(v0, v1);
                }
            }
        }
    }
    if constexpr (TS) {
        if (ctid == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); /* the stores done */
    }
    if constexpr (CL) gg_cluster_sync();
}

/* A 2-D tensor map of rows x cols bf16 (row stride ld_bytes), box 64 x
 * box_rows, 128B swizzle; false when TMA cannot describe it. */
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

extern "C" uint64_t cuda_gemm_glu_launches(void) { return __atomic_load_n(&g_gg_launches, __ATOMIC_RELAXED); }
static int g_gg_clusters; /* the last cluster launch's grid, in clusters (tests) */
extern "C" int cuda_gemm_glu_clusters(void) { return __atomic_load_n(&g_gg_clusters, __ATOMIC_RELAXED); }

typedef void (*gg_kern)(CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, gg_args);

/* Clusters of 2 that can run at once (one CTA an SM), for the persistent
 * grid; 0 when the device cannot run them. Asked once a process. */
static int gg_max_clusters(gg_kern kern, size_t smem) {
    static int n = -1;
    int v = __atomic_load_n(&n, __ATOMIC_RELAXED);
    if (v >= 0) return v;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 2;
    at[0].val.clusterDim.y = at[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(2);
    cfg.blockDim = dim3(GG_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&v, kern, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        v = 0;
    }
    __atomic_store_n(&n, v, __ATOMIC_RELAXED);
    return v;
}

/* 1 when the fused kernel does not take the call (the caller runs cuBLAS +
 * k_glu), else the launch's status. VLLM_CUDA_GEMM_GLU (experiments of
 * session 18): 1 the kernel as measured in calls 1-7, 2 the same in
 * clusters of 2, 3 W0, 4 W0 + clusters, 5 W0 + TS, 6 W0 + TS + clusters. */
int cuda_gemm_glu_fused(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, void *h,
                        rt_dtype ht, int64_t h_ld, int64_t f, int64_t in, int64_t n, int act) {
    const char *e = getenv("VLLM_CUDA_GEMM_GLU");
    if (!(e && e[0] >= '1' && e[0] <= '6' && e[1] == 0)) return 1;
    const int mode = e[0] - '0';
    const bool cl = mode % 2 == 0, ts = mode >= 5;
    if (w->dtype != RT_BF16 || xt != RT_BF16 || ht != RT_BF16 || w->stride[1] != 2 || in % GG_BK || f % 8 ||
        h_ld % 2 || ((uintptr_t)h & 3) || n < 1 || f > INT_MAX || in > INT_MAX || n > INT_MAX)
        return 1;
    CUtensorMap tx, tg, tu, th;
    const int64_t ws = w->stride[0];
    if (!gg_map(&tx, x, n, in, x_ld * 2, GG_BM) || !gg_map(&tg, w->data, f, in, ws, GG_BN) ||
        !gg_map(&tu, (const char *)w->data + f * ws, f, in, ws, GG_BN))
        return 1;
    if (ts && !gg_map(&th, h, n, f, h_ld * 2, 64)) return 1; /* the output: boxes of 64 x 64 */
    if (!ts) memset(&th, 0, sizeof th);
    const size_t smem = gg_smem();
    const gg_kern kern = mode == 6   ? k_gemm_glu<true, true, true>
                         : mode == 5 ? k_gemm_glu<false, true, true>
                         : mode == 4 ? k_gemm_glu<true, true, false>
                         : mode == 3 ? k_gemm_glu<false, true, false>
                         : mode == 2 ? k_gemm_glu<true, false, false>
                                     : k_gemm_glu<false, false, false>;
    cudaError_t ce = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (ce != cudaSuccess) return cuda_fail(ce, "gemm_glu smem opt-in", __FILE__, __LINE__);
    const char *ge = getenv("VLLM_CUDA_GG_GROUP");
    gg_args a = {(__nv_bfloat16 *)h, h_ld, (int)n, (int)f, (int)in, act, ge && *ge ? atoi(ge) : 16};
    const int64_t n_mt = (n + GG_BM - 1) / GG_BM, n_nt = (f + GG_BN - 1) / GG_BN;
    if (n_mt * n_nt > INT_MAX) return 1;
    if (!cl) {
        const int64_t tiles = n_mt * n_nt;
        const unsigned grid = (unsigned)(tiles < c->n_sm ? tiles : c->n_sm); /* persistent: one CTA an SM */
        __atomic_fetch_add(&g_gg_launches, 1, __ATOMIC_RELAXED);
        cuda_launch(kern, dim3(grid), GG_THREADS, smem, c->stream, tx, tg, tu, th, a);
        CU_LAUNCHED();
        return VC_OK;
    }
    int mc = gg_max_clusters(kern, smem);
    const char *me = getenv("VLLM_CUDA_GG_CLUSTERS"); /* experiment: the grid's clusters */
    if (me && atoi(me) > 0) mc = atoi(me);
    __atomic_store_n(&g_gg_clusters, mc, __ATOMIC_RELAXED);
    if (mc < 1) return 1;
    const int64_t pairs = ((n_mt + 1) / 2) * n_nt;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 2;
    at[0].val.clusterDim.y = at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(2 * (pairs < mc ? pairs : mc))); /* persistent: every cluster resident */
    cfg.blockDim = dim3(GG_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cfg.attrs = at;
    cfg.numAttrs = cuda_pdl_enabled ? 2 : 1;
    __atomic_fetch_add(&g_gg_launches, 1, __ATOMIC_RELAXED);
    cudaError_t le = cudaLaunchKernelEx(&cfg, kern, tx, tg, tu, th, a);
    if (le != cudaSuccess) {
        (void)cudaGetLastError();
        return vc_err_set(VC_ERR_RUNTIME, "cuda gemm_glu: cluster launch: %s", cudaGetErrorString(le));
    }
    return VC_OK;
}
