/* cuda_mmq.cuh — what the two GGUF tile-GEMM kernels share (cuda_mmq.cu:
 * int8 x on s8 tensor cores; cuda_mmq_bf.cu: W decoded to bf16 in
 * registers): the CTA's W rows, the pipeline depth, cp.async, unaligned
 * shared words, the y store and the K-split rule. */
#ifndef CUDA_MMQ_CUH
#define CUDA_MMQ_CUH

#include "backends/cuda/cuda_dequant.cuh"
#include "backends/cuda/cuda_gemv_q.cuh"

#include <cuda_bf16.h>

#define MQ_TR 128    /* W rows per CTA */
#define MQ_STAGES 3

/* An unaligned (2-byte aligned) 32-bit word of shared memory. */
__device__ __forceinline__ int mq_w2(const uint8_t *p) {
    const uint16_t *h = (const uint16_t *)p;
    return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}

__device__ __forceinline__ void mq_cp16(void *dst, const void *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
/* the same, zero-filled past src_bytes (0: all zeros; src must still be a valid address) */
__device__ __forceinline__ void mq_cp16z(void *dst, const void *src, int src_bytes) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void mq_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void mq_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* A chunk is 256 values of a W row: 8 units of 32 (Q4_0 / Q4_1 / Q8_0 blocks)
 * or one K-quant super-block. mq_cb: its bytes when it holds nu units (the
 * last chunk of a row of the 32-value formats may be partial); mq_nv: the
 * 16-byte vectors it spans from the boundary at or below it; mq_rs: the
 * shared row stride, an odd number of vectors so that the 8 rows a
 * fragment load touches fall on different banks. */
template <rt_dtype T> __host__ __device__ constexpr int mq_cb(int nu) {
    return gq_fmt<T>::SV == 32 ? nu * gq_fmt<T>::SB : gq_fmt<T>::SB;
}
template <rt_dtype T> __host__ __device__ constexpr int mq_cb_full() { return mq_cb<T>(8); }
template <rt_dtype T> __host__ __device__ constexpr int mq_nv() { return (mq_cb_full<T>() + 15 + 15) / 16; }
template <rt_dtype T> __host__ __device__ constexpr int mq_rs() { return (mq_nv<T>() | 1) * 16; }

/* The CTA's share of a chunk of its MQ_TR W rows (both kernels run 256 =
 * 2 MQ_TR threads): thread tid copies row tid / 2 (wrow: that row's start,
 * clamped to the last row, set once per CTA), vectors tid % 2, + 2, ...,
 * from the 16-byte boundary at or below the chunk's first byte. */
template <rt_dtype T>
__device__ __forceinline__ void mq_load_w(uint8_t *sw, const char *wrow, int c, int nu, int tid) {
    constexpr int NV = mq_nv<T>(), RS = mq_rs<T>();
    const uintptr_t a = (uintptr_t)(wrow + (int64_t)c * mq_cb_full<T>()), a0 = a & ~(uintptr_t)15;
    const int nvec = (int)((a - a0 + (uintptr_t)mq_cb<T>(nu) + 15) >> 4);
    uint8_t *d = sw + (tid >> 1) * RS;
#pragma unroll
    for (int k = 0; k < (NV + 1) / 2; k++) {
        const int v = (tid & 1) + 2 * k;
        if (v < nvec) mq_cp16(d + 16 * v, (const void *)(a0 + 16 * v));
    }
}

template <bool YB> __device__ __forceinline__ void mq_store(void *y, int64_t i, float v) {
    if (YB) ((__nv_bfloat16 *)y)[i] = __float2bfloat16_rn(v);
    else ((float *)y)[i] = v;
}

/* y[tok, row] = sum over the S splits in order of part + bias. */
template <bool YB>
__global__ void k_mq_reduce(const float *part, int S, int n, int out, void *y, int64_t y_ld, const float *bias) {
    CUDA_PDL_ENTER();
    const int64_t total = (int64_t)n * out;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t tok = i / out, row = i % out;
        float v = 0.0f;
        for (int z = 0; z < S; z++) v += part[(int64_t)z * total + i];
        mq_store<YB>(y, tok * y_ld + row, v + (bias ? bias[row] : 0.0f));
    }
}

/* K splits of a call. A split count S gives each CTA cps = ceil(nch / S)
 * chunks; the call takes about waves x (cps + 1) chunk times (the + 1: a
 * CTA's pipeline fill and its partials), waves = ceil(tiles S / (n_sm
 * per_sm)). The rule takes the S of least cost, the fewest at a tie. E.g.
 * 8B shapes at 16 rows, two CTAs an SM: gate|up (224 row tiles, 16 chunks)
 * 1 split; QKV (48, 16) 4; down (32, 56) 8. forced: VLLM_CUDA_MMQ_SPLIT
 * (0: the rule). Returns S; *cps its chunks per split. */
static inline int mq_splits(int n_sm, int forced, int64_t tiles, int nch, int per_sm, int *cps) {
    const int64_t slots = (int64_t)n_sm * per_sm;
    int best = 1;
    if (forced) {
        best = forced < nch ? forced : nch;
    } else {
        int64_t best_cost = -1;
        for (int s = 1; s <= nch; s++) {
            const int c = (nch + s - 1) / s;
            if ((nch + c - 1) / c != s) continue; /* the same chunks per split as a smaller s */
            const int64_t cost = (tiles * s + slots - 1) / slots * (c + 1);
            if (best_cost < 0 || cost < best_cost) best_cost = cost, best = s;
        }
    }
    *cps = (nch + best - 1) / best;
    return (nch + *cps - 1) / *cps;
}

#endif
