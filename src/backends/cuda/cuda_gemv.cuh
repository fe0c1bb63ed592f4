/* cuda_gemv.cuh — the ends of the decode GEMVs (cuda_matmul.cu,
 * cuda_gemv_q.cu): lane sums, the KS warps of a row met in shared memory,
 * bias or the GLU, the store. A block is GEMV_BLOCK threads; a row (or a
 * gate / up pair of rows) is served by KS consecutive warps. */
#ifndef CUDA_GEMV_CUH
#define CUDA_GEMV_CUH

#include "backends/cuda/cuda_internal.h"

#define GEMV_BLOCK 256

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Finish a GEMV row: reduce the per-lane partial sums, add bias, store. */
__device__ __forceinline__ void gemv_store(float *acc, int n, int64_t r, float *y, int64_t y_ld,
                                           const float *bias) {
    float b = bias ? bias[r] : 0.0f;
#pragma unroll
    for (int t = 0; t < CUDA_GEMV_MAX_N; t++) {
        if (t >= n) break;
        float s = warp_sum(acc[t]);
        if ((threadIdx.x & 31) == 0) y[t * y_ld + r] = s + b;
    }
}

/* Each warp's lanes summed per token into part[warp][t]; then the block
 * sees every warp's sums. */
__device__ __forceinline__ void gemv_warp_partials(const float *acc, int n, float (*part)[CUDA_GEMV_MAX_N]) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int t = 0; t < CUDA_GEMV_MAX_N; t++) {
        if (t >= n) break;
        float s = warp_sum(acc[t]);
        if (lane == 0) part[warp][t] = s;
    }
    __syncthreads();
}

/* Reduce the lanes, then the KS warps of each row; store y (+ bias). */
template <int KS>
__device__ __forceinline__ void gemv_finish(float *acc, int n, int64_t r, int64_t out, float *y, int64_t y_ld,
                                            const float *bias) {
    __shared__ float part[GEMV_BLOCK / 32][CUDA_GEMV_MAX_N];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    gemv_warp_partials(acc, n, part);
    if (warp % KS == 0 && lane < n && r < out) {
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < KS; k++) s += part[warp + k][lane];
        y[lane * y_ld + r] = s + (bias ? bias[r] : 0.0f);
    }
}

/* GLU epilogue (MATMUL_GLU): w = [Wg; Wu] with `out` = 2f rows; the KS-warp
 * slots of a block go in pairs, slot 2i on gate row p and 2i+1 on up row
 * f + p, and the pair's first warp writes y[t, p] = act(gate) * up. */
template <int KS>
__device__ __forceinline__ void gemv_finish_glu(float *acc, int n, int64_t p, int64_t f, float *y, int64_t y_ld,
                                                int act) {
    __shared__ float part[GEMV_BLOCK / 32][CUDA_GEMV_MAX_N];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    gemv_warp_partials(acc, n, part);
    if (warp % (2 * KS) == 0 && lane < n && p < f) {
        float g = 0.0f, u = 0.0f;
#pragma unroll
        for (int k = 0; k < KS; k++) {
            g += part[warp + k][lane];
            u += part[warp + KS + k][lane];
        }
        y[lane * y_ld + p] = cuda_glu_act(act, g) * u;
    }
}

#endif
