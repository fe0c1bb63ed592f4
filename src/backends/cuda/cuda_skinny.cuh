/* cuda_skinny.cuh — what the skinny kernels share (cuda_skinny.cu: bf16
 * W; cuda_skinny_q.cu: GGUF block W): the block shape, the m16n8k16
 * fragment packing and the epilogue that sums a block's K slices and
 * stores (or applies the GLU). CUDA C++ only.
 *
 * A warp owns 16 weight rows (a "group") and a K slice of 32-value chunks;
 * lane (g = lane / 4, t = lane % 4) holds values 8t .. 8t + 7 of a chunk of
 * rows g and g + 8 and of x rows g (and g + 8 for NT = 2). The chunk is two
 * mma.sync steps over a permuted K: step s takes values 8t + 4s + {0, 1}
 * as the fragment's k {2t, 2t + 1} and 8t + 4s + {2, 3} as {2t + 8, 2t + 9}
 * (the same map for W and x, so the dot products are unchanged).
 */
#ifndef CUDA_SKINNY_CUH
#define CUDA_SKINNY_CUH

#include "backends/cuda/cuda_flash_common.cuh"
#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_store.cuh"

#include <cuda_bf16.h>

#define SK_WARPS 8
#define SK_U 4 /* chunks of 32 values in flight per lane (bf16 W) */

/* bf16 pair: a in the low half (the lower k), b in the high. */
__device__ __forceinline__ uint32_t sk_pack(float a, float b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(const uint32_t *)&h;
}

/* A block's K slices meet in shared memory (summed in slice order:
 * deterministic), then each output is stored: y[tk, r] = sum + bias, or
 * for the GLU (groups in gate / up pairs) y[tk, p] = act(gate) * up, gate
 * and up rounded to bf16 first for a bf16 y (as the cuBLAS path's bf16
 * scratch holds them). acc: the C fragments of this warp (NT tiles of 8
 * tokens); rows: weight rows (GLU: f). */
template <int KS, int NT, bool GLU, typename D>
__device__ __forceinline__ void sk_epilogue(const float (*acc)[4], int n, int64_t rows, D *y, int64_t y_ld,
                                            const float *bias, int act) {
    constexpr int G = SK_WARPS / KS;
    __shared__ float part[SK_WARPS][16][8 * NT];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    /* C fragment: acc[j] = (row g, tokens 8j + 2t, + 1), (row g + 8, same) */
#pragma unroll
    for (int j = 0; j < NT; j++) {
        part[warp][g][8 * j + 2 * t] = acc[j][0];
        part[warp][g][8 * j + 2 * t + 1] = acc[j][1];
        part[warp][g + 8][8 * j + 2 * t] = acc[j][2];
        part[warp][g + 8][8 * j + 2 * t + 1] = acc[j][3];
    }
    __syncthreads();
    constexpr int PER = GLU ? G / 2 : G; /* outputs of 16 rows per block */
    for (int e = threadIdx.x; e < PER * 16 * 8 * NT; e += SK_WARPS * 32) {
        const int tk = e % (8 * NT), i = (e / (8 * NT)) % 16, s = e / (8 * NT * 16);
        if (tk >= n) continue;
        if (GLU) {
            const int64_t p = ((int64_t)blockIdx.x * PER + s) * 16 + i;
            if (p >= rows) continue;
            float gs = 0.0f, us = 0.0f;
#pragma unroll
            for (int k = 0; k < KS; k++) {
                gs += part[(2 * s) * KS + k][i][tk];
                us += part[(2 * s + 1) * KS + k][i][tk];
            }
            if (sizeof(D) == 2) { /* bf16 y: gate and up rounded as the bf16 GEMM scratch holds them */
                gs = __bfloat162float(__float2bfloat16(gs));
                us = __bfloat162float(__float2bfloat16(us));
            }
            cuda_st1(y + (int64_t)tk * y_ld + p, cuda_glu_act(act, gs) * us);
        } else {
            const int64_t r = ((int64_t)blockIdx.x * PER + s) * 16 + i;
            if (r >= rows) continue;
            float v = bias ? bias[r] : 0.0f;
#pragma unroll
            for (int k = 0; k < KS; k++) v += part[s * KS + k][i][tk];
            cuda_st1(y + (int64_t)tk * y_ld + r, v);
        }
    }
}


#endif
