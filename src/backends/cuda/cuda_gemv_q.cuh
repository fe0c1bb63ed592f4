/* cuda_gemv_q.cuh — what the GGUF decode GEMVs (cuda_gemv_q.cu,
 * cuda_gemv_d4.cu) share: the formats' super-units and the segment loads
 * (16-byte loads from the boundary at or below a segment's first byte). */
#ifndef CUDA_GEMV_Q_CUH
#define CUDA_GEMV_Q_CUH

#include "backends/cuda/cuda_gemv.cuh"

/* Values per super-unit (SV), its bytes (SB), super-units per segment (SEG). */
template <rt_dtype T> struct gq_fmt;
template <> struct gq_fmt<RT_Q4_0> { enum { SV = 32, SB = 18, SEG = 128 }; };
template <> struct gq_fmt<RT_Q4_1> { enum { SV = 32, SB = 20, SEG = 96 }; };
template <> struct gq_fmt<RT_Q8_0> { enum { SV = 32, SB = 34, SEG = 64 }; };
template <> struct gq_fmt<RT_Q4_K> { enum { SV = 256, SB = 144, SEG = 16 }; };
template <> struct gq_fmt<RT_Q5_K> { enum { SV = 256, SB = 176, SEG = 12 }; };
template <> struct gq_fmt<RT_Q6_K> { enum { SV = 256, SB = 210, SEG = 8 }; };

/* 16-byte vectors per lane for a segment of M x SEG super-units: M SEG SB bytes plus up to 15 of
 * alignment, and one more vector for a straddled end. */
template <rt_dtype T, int M = 1> __host__ __device__ constexpr int gq_nv() {
    return ((M * gq_fmt<T>::SEG * gq_fmt<T>::SB + 30) / 16 + 31) / 32;
}

/* Request m super-units of a row from super-unit s: the vectors from the
 * 16-byte boundary at or below their first byte. */
template <rt_dtype T, int M = 1>
__device__ __forceinline__ void gq_load(uint4 *q, const char *row, int64_t s, int64_t m, int lane) {
    constexpr int NV = gq_nv<T, M>();
    const uintptr_t a = (uintptr_t)(row + s * gq_fmt<T>::SB), a0 = a & ~(uintptr_t)15;
    const int nvec = (int)((a + (uintptr_t)m * gq_fmt<T>::SB - a0 + 15) / 16);
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const int i = lane + 32 * j;
        q[j] = i < nvec ? cuda_ld_stream16((const uint4 *)a0 + i) : make_uint4(0, 0, 0, 0);
    }
}

#endif
