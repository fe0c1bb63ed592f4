/* cuda_dequant — device decoders of the GGUF block formats.
 *
 * A quantized row is cut into "units" of 32 consecutive values: one block of
 * Q4_0/Q4_1/Q8_0, one sub-block of a 256-value K-quant super-block. dq_unit
 * decodes unit u of a row into v[32], dq_span a slice of it (the GEMV takes
 * 8 values per lane), with the exact arithmetic of
 * runtime/quant.c (products and differences rounded separately, no FMA
 * contraction), so EMBED and COPY match the CPU bit for bit.
 *
 * Block layouts (byte offsets; see runtime/quant_blocks.h):
 *   Q4_0 18 B  d@0  qs[16]@2
 *   Q4_1 20 B  d@0  m@2  qs[16]@4
 *   Q8_0 34 B  d@0  qs[32]@2
 *   Q4_K 144 B d@0  dmin@2  scales[12]@4  qs[128]@16
 *   Q5_K 176 B d@0  dmin@2  scales[12]@4  qh[32]@16  qs[128]@48
 *   Q6_K 210 B ql[128]@0  qh[64]@128  scales[16]@192  d@208
 * Blocks are only 2-byte aligned, so fields are read as bytes / u16.
 */
#ifndef CUDA_DEQUANT_CUH
#define CUDA_DEQUANT_CUH

#include "backends/cuda/cuda_internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ float cuda_h2f(const uint8_t *p) {
    return __half2float(__ushort_as_half(*(const uint16_t *)p));
}

__device__ __forceinline__ void cuda_q4k_sm(int j, const uint8_t *q, int &sc, int &m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Decode values l0..l0+N-1 (l0 + N <= 32) of unit u of a row of type T. */
template <rt_dtype T, int N> __device__ __forceinline__ void dq_span(const uint8_t *row, int64_t u, int l0, float *v);

template <rt_dtype T, int N> struct dq_impl;

template <int N> struct dq_impl<RT_Q4_0, N> {
    static __device__ __forceinline__ void run(const uint8_t *row, int64_t u, int l0, float *v) {
        const uint8_t *b = row + u * 18;
        float d = cuda_h2f(b);
#pragma unroll
        for (int e = 0; e < N; e++) {
            int l = l0 + e, q = l < 16 ? (b[2 + l] & 0xF) : (b[2 + l - 16] >> 4);
            v[e] = __fmul_rn(d, (float)(q - 8));
        }
    }
};

template <int N> struct dq_impl<RT_Q4_1, N> {
    static __device__ __forceinline__ void run(const uint8_t *row, int64_t u, int l0, float *v) {
        const uint8_t *b = row + u * 20;
        float d = cuda_h2f(b), m = cuda_h2f(b + 2);
#pragma unroll
        for (int e = 0; e < N; e++) {
            int l = l0 + e, q = l < 16 ? (b[4 + l] & 0xF) : (b[4 + l - 16] >> 4);
            v[e] = __fadd_rn(__fmul_rn(d, (float)q), m);
        }
    }
};

template <int N> struct dq_impl<RT_Q8_0, N> {
    static __device__ __forceinline__ void run(const uint8_t *row, int64_t u, int l0, float *v) {
        const uint8_t *b = row + u * 34;
        float d = cuda_h2f(b);
#pragma unroll
        for (int e = 0; e < N; e++) v[e] = __fmul_rn((float)(int8_t)b[2 + l0 + e], d);
    }
};

template <int N> struct dq_impl<RT_Q4_K, N> {
    static __device__ __forceinline__ void run(const uint8_t *row, int64_t u, int l0, float *v) {
        const uint8_t *b = row + (u >> 3) * 144;
        int j = (int)(u & 7), sc, m;
        cuda_q4k_sm(j, b + 4, sc, m);
        float d = __fmul_rn(cuda_h2f(b), (float)sc), mn = __fmul_rn(cuda_h2f(b + 2), (float)m);
        const uint8_t *q = b + 16 + 32 * (j >> 1) + l0;
        int sh = 4 * (j & 1);
#pragma unroll
        for (int e = 0; e < N; e++) v[e] = __fsub_rn(__fmul_rn(d, (float)((q[e] >> sh) & 0xF)), mn);
    }
};

template <int N> struct dq_impl<RT_Q5_K, N> {
    static __device__ __forceinline__ void run(const uint8_t *row, int64_t u, int l0, float *v) {
        const uint8_t *b = row + (u >> 3) * 176;
        int j = (int)(u & 7), sc, m;
        cuda_q4k_sm(j, b + 4, sc, m);
        float d = __fmul_rn(cuda_h2f(b), (float)sc), mn = __fmul_rn(cuda_h2f(b + 2), (float)m);
        const uint8_t *qh = b + 16 + l0, *q = b + 48 + 32 * (j >> 1) + l0;
        int sh = 4 * (j & 1);
#pragma unroll
        for (int e = 0; e < N; e++) {
            int x = ((q[e] >> sh) & 0xF) | (((qh[e] >> j) & 1) << 4);
            v[e] = __fsub_rn(__fmul_rn(d, (float)x), mn);
        }
    }
};

template <int N> struct dq_impl<RT_Q6_K, N> {
    static __device__ __forceinline__ void run(const uint8_t *row, int64_t u, int l0, float *v) {
        const uint8_t *b = row + (u >> 3) * 210;
        int j = (int)(u & 7), h = j >> 2, k = j & 3;
        const uint8_t *ql = b + 64 * h + 32 * (k & 1) + l0, *qh = b + 128 + 32 * h + l0;
        const int8_t *sc = (const int8_t *)(b + 192) + 8 * h + 2 * k;
        float d = cuda_h2f(b + 208);
        int shl = k < 2 ? 0 : 4, shh = 2 * k;
        float d0 = __fmul_rn(d, (float)sc[0]), d1 = __fmul_rn(d, (float)sc[1]);
#pragma unroll
        for (int e = 0; e < N; e++) {
            int x = ((ql[e] >> shl) & 0xF) | (((qh[e] >> shh) & 3) << 4);
            v[e] = __fmul_rn(l0 + e < 16 ? d0 : d1, (float)(x - 32));
        }
    }
};

template <rt_dtype T, int N> __device__ __forceinline__ void dq_span(const uint8_t *row, int64_t u, int l0, float *v) {
    dq_impl<T, N>::run(row, u, l0, v);
}

/* Decode unit u (32 values) of a row of type T. */
template <rt_dtype T> __device__ __forceinline__ void dq_unit(const uint8_t *row, int64_t u, float *v) {
    dq_span<T, 32>(row, u, 0, v);
}

/* Elements of a plain float type. */
template <rt_dtype T> __device__ __forceinline__ float ld_plain(const char *p);
template <> __device__ __forceinline__ float ld_plain<RT_F32>(const char *p) { return *(const float *)p; }
template <> __device__ __forceinline__ float ld_plain<RT_F16>(const char *p) {
    return __half2float(*(const __half *)p);
}
template <> __device__ __forceinline__ float ld_plain<RT_BF16>(const char *p) {
    return __bfloat162float(*(const __nv_bfloat16 *)p);
}

/* Expand a switch over the quantized dtypes with a device decoder. */
#define CUDA_FOR_QUANT(X) X(RT_Q4_0) X(RT_Q4_1) X(RT_Q8_0) X(RT_Q4_K) X(RT_Q5_K) X(RT_Q6_K)

static inline bool cuda_has_decoder(rt_dtype t) {
    switch (t) {
    case RT_F32: case RT_F16: case RT_BF16:
    case RT_Q4_0: case RT_Q4_1: case RT_Q8_0: case RT_Q4_K: case RT_Q5_K: case RT_Q6_K: return true;
    default: return false;
    }
}

#endif
