/* cuda_store — f32 results stored as f32, f16 or bf16 (round to nearest
 * even), one value at a time or four (one 16-byte f32 store, one 8-byte
 * half store: p aligned to that). Overloads on the pointer type, so kernels
 * templated on the element type call cuda_st1 / cuda_st4 as they are.
 * Shared by the norms, QK_ROPE_STORE's K/V cache writes and the GEMM's
 * activation conversions. */
#ifndef CUDA_STORE_CUH
#define CUDA_STORE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ void cuda_st1(float *p, float v) { *p = v; }
__device__ __forceinline__ void cuda_st1(__half *p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void cuda_st1(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

__device__ __forceinline__ void cuda_st4(float *p, float4 v) { *(float4 *)p = v; }
__device__ __forceinline__ void cuda_st4(__half *p, float4 v) {
    __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
    uint2 u;
    u.x = *(const uint32_t *)&a;
    u.y = *(const uint32_t *)&b;
    *(uint2 *)p = u;
}
__device__ __forceinline__ void cuda_st4(__nv_bfloat16 *p, float4 v) {
    __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    uint2 u;
    u.x = *(const uint32_t *)&a;
    u.y = *(const uint32_t *)&b;
    *(uint2 *)p = u;
}

#endif
