/* cuda_dequant — device decoders of the GGUF block formats.
 *
 * A quantized row is cut into "units" of 32 consecutive values: one block of
 * Q4_0/Q4_1/Q8_0, one sub-block of a 256-value K-quant super-block. dq_unit
 * decodes unit u of a row into v[32] with the exact arithmetic of
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

/* Decode unit u (32 values) of a row of type T. */
template <rt_dtype T> __device__ __forceinline__ void dq_unit(const uint8_t *row, int64_t u, float *v);

template <> __device__ __forceinline__ void dq_unit<RT_Q4_0>(const uint8_t *row, int64_t u, float *v) {
    const uint8_t *b = row + u * 18;
    float d = cuda_h2f(b);
#pragma unroll
    for (int l = 0; l < 16; l++) {
        int q = b[2 + l];
        v[l] = __fmul_rn(d, (float)((q & 0xF) - 8));
        v[l + 16] = __fmul_rn(d, (float)((q >> 4) - 8));
    }
}

template <> __device__ __forceinline__ void dq_unit<RT_Q4_1>(const uint8_t *row, int64_t u, float *v) {
    const uint8_t *b = row + u * 20;
    float d = cuda_h2f(b), m = cuda_h2f(b + 2);
#pragma unroll
    for (int l = 0; l < 16; l++) {
        int q = b[4 + l];
        v[l] = __fadd_rn(__fmul_rn(d, (float)(q & 0xF)), m);
        v[l + 16] = __fadd_rn(__fmul_rn(d, (float)(q >> 4)), m);
    }
}

template <> __device__ __forceinline__ void dq_unit<RT_Q8_0>(const uint8_t *row, int64_t u, float *v) {
    const uint8_t *b = row + u * 34;
    float d = cuda_h2f(b);
#pragma unroll
    for (int l = 0; l < 32; l++) v[l] = __fmul_rn((float)(int8_t)b[2 + l], d);
}

template <> __device__ __forceinline__ void dq_unit<RT_Q4_K>(const uint8_t *row, int64_t u, float *v) {
    const uint8_t *b = row + (u >> 3) * 144;
    int j = (int)(u & 7), sc, m;
    cuda_q4k_sm(j, b + 4, sc, m);
    float d = __fmul_rn(cuda_h2f(b), (float)sc), mn = __fmul_rn(cuda_h2f(b + 2), (float)m);
    const uint8_t *q = b + 16 + 32 * (j >> 1);
    int sh = 4 * (j & 1);
#pragma unroll
    for (int l = 0; l < 32; l++) v[l] = __fsub_rn(__fmul_rn(d, (float)((q[l] >> sh) & 0xF)), mn);
}

template <> __device__ __forceinline__ void dq_unit<RT_Q5_K>(const uint8_t *row, int64_t u, float *v) {
    const uint8_t *b = row + (u >> 3) * 176;
    int j = (int)(u & 7), sc, m;
    cuda_q4k_sm(j, b + 4, sc, m);
    float d = __fmul_rn(cuda_h2f(b), (float)sc), mn = __fmul_rn(cuda_h2f(b + 2), (float)m);
    const uint8_t *qh = b + 16, *q = b + 48 + 32 * (j >> 1);
    int sh = 4 * (j & 1);
#pragma unroll
    for (int l = 0; l < 32; l++) {
        int x = ((q[l] >> sh) & 0xF) | (((qh[l] >> j) & 1) << 4);
        v[l] = __fsub_rn(__fmul_rn(d, (float)x), mn);
    }
}

template <> __device__ __forceinline__ void dq_unit<RT_Q6_K>(const uint8_t *row, int64_t u, float *v) {
    const uint8_t *b = row + (u >> 3) * 210;
    int j = (int)(u & 7), h = j >> 2, k = j & 3;
    const uint8_t *ql = b + 64 * h + 32 * (k & 1), *qh = b + 128 + 32 * h;
    const int8_t *sc = (const int8_t *)(b + 192) + 8 * h + 2 * k;
    float d = cuda_h2f(b + 208);
    int shl = k < 2 ? 0 : 4, shh = 2 * k;
    float d0 = __fmul_rn(d, (float)sc[0]), d1 = __fmul_rn(d, (float)sc[1]);
#pragma unroll
    for (int l = 0; l < 32; l++) {
        int x = ((ql[l] >> shl) & 0xF) | (((qh[l] >> shh) & 3) << 4);
        v[l] = __fmul_rn(l < 16 ? d0 : d1, (float)(x - 32));
    }
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
