/* cuda_matmul — MATMUL: y[n,out] = x[n,in] f32 · W[out,in]^T (+ bias[out]).
 *
 * Two paths:
 *  - n <= CUDA_GEMV_MAX_N (decode): a GEMV kernel, one warp per weight row,
 *    that decodes W on the fly (f32/f16/bf16 elements, 16-byte loads of 8
 *    halves when aligned, or 32-value units of the GGUF block formats via
 *    cuda_dequant.cuh) and dots it with up to 8 f32 activation rows in f32.
 *    W is read from memory once per call.
 *  - larger n (prefill): cuBLAS. f32 W: SGEMM in plain fp32 (default math
 *    mode, so no TF32). f16 / bf16 W: x is converted to W's type and
 *    cublasGemmEx runs with fp32 accumulation and an f32 result. Quantized
 *    W: dequantized into a bf16 scratch copy [out,in] first, then as bf16.
 *    The scratch comes from the stream-ordered pool and is released right
 *    after the GEMM is queued.
 *
 * Row-major to cuBLAS (column-major): W[out,in] with row stride ldw is the
 * column-major matrix W'[in,out]; likewise X'[in,n] and Y'[out,n]. So
 * Y' = W'^T X': gemm(T, N, m=out, n=n, k=in).
 */
#include "backends/cuda/cuda_dequant.cuh"
#include "backends/cuda/cuda_internal.h"

#include <limits.h>

#define GEMV_WARPS 4

bool cuda_matmul_supports(rt_dtype w) { return cuda_has_decoder(w); }

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

template <rt_dtype T>
__global__ void k_gemv_plain(const char *w, int64_t w_stride, const float *x, int64_t x_ld, float *y,
                             int64_t y_ld, const float *bias, int64_t out, int64_t in, int n) {
    int64_t r = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (r >= out) return;
    const char *wr = w + r * w_stride;
    const int es = T == RT_F32 ? 4 : 2;
    float acc[CUDA_GEMV_MAX_N] = {0};
    for (int64_t k = threadIdx.x & 31; k < in; k += 32) {
        float wv = ld_plain<T>(wr + k * es);
#pragma unroll
        for (int t = 0; t < CUDA_GEMV_MAX_N; t++)
            if (t < n) acc[t] += wv * x[t * x_ld + k];
    }
    gemv_store(acc, n, r, y, y_ld, bias);
}

/* f16/bf16 rows with 16-byte aligned rows, x and in % 8 == 0: each lane
 * loads 8 weights (one uint4) and 2 float4 of every x row per step. */
template <rt_dtype T>
__global__ void k_gemv_half_v8(const char *w, int64_t w_stride, const float *x, int64_t x_ld, float *y,
                               int64_t y_ld, const float *bias, int64_t out, int64_t in, int n) {
    int64_t r = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (r >= out) return;
    const uint4 *wr = (const uint4 *)(w + r * w_stride);
    float acc[CUDA_GEMV_MAX_N] = {0};
    for (int64_t c = threadIdx.x & 31; c < in / 8; c += 32) {
        uint4 pk = wr[c];
        const uint16_t *h = (const uint16_t *)&pk;
        float wv[8];
#pragma unroll
        for (int e = 0; e < 8; e++) wv[e] = ld_plain<T>((const char *)(h + e));
#pragma unroll
        for (int t = 0; t < CUDA_GEMV_MAX_N; t++) {
            if (t >= n) break;
            const float4 *xv = (const float4 *)(x + t * x_ld + c * 8);
            float4 a = xv[0], b = xv[1];
            acc[t] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x + wv[5] * b.y +
                      wv[6] * b.z + wv[7] * b.w;
        }
    }
    gemv_store(acc, n, r, y, y_ld, bias);
}

/* Quantized rows: lane handles groups of 8 consecutive values (group g =
 * values 8g..8g+7, a quarter of unit g/4), so a warp step covers 256
 * contiguous values and its x reads are coalesced (two float4 per token
 * when VX, i.e. x rows 16-byte aligned). */
template <rt_dtype T, bool VX>
__global__ void k_gemv_quant(const char *w, int64_t w_stride, const float *x, int64_t x_ld, float *y,
                             int64_t y_ld, const float *bias, int64_t out, int64_t in, int n) {
    int64_t r = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (r >= out) return;
    const uint8_t *wr = (const uint8_t *)w + r * w_stride;
    float acc[CUDA_GEMV_MAX_N] = {0};
    for (int64_t g = threadIdx.x & 31; g < in / 8; g += 32) {
        float v[8];
        dq_span<T, 8>(wr, g >> 2, (int)(g & 3) * 8, v);
#pragma unroll
        for (int t = 0; t < CUDA_GEMV_MAX_N; t++) {
            if (t >= n) break;
            const float *xs = x + t * x_ld + g * 8;
            float s;
            if (VX) {
                float4 a = ((const float4 *)xs)[0], b = ((const float4 *)xs)[1];
                s = v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y + v[6] * b.z +
                    v[7] * b.w;
            } else {
                s = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) s += v[e] * xs[e];
            }
            acc[t] += s;
        }
    }
    gemv_store(acc, n, r, y, y_ld, bias);
}

__device__ __forceinline__ void st_h(__half *p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void st_h(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* x rows (row stride x_ld floats) -> contiguous [n, in] of type H. */
template <typename H>
__global__ void k_to_half(const float *x, int64_t x_ld, H *dst, int64_t in, int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / in, k = i % in;
        st_h(dst + i, x[t * x_ld + k]);
    }
}

/* Quantized W[out,in] -> bf16 [out,in], one thread per group of 8 values
 * (one 16-byte store; consecutive threads write consecutive groups). */
template <rt_dtype T>
__global__ void k_dequant_bf16(const char *w, int64_t w_stride, __nv_bfloat16 *dst, int64_t in, int64_t total) {
    int64_t gpr = in / 8;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / gpr, g = i % gpr;
        float v[8];
        dq_span<T, 8>((const uint8_t *)w + r * w_stride, g >> 2, (int)(g & 3) * 8, v);
        __align__(16) __nv_bfloat16 o[8];
#pragma unroll
        for (int l = 0; l < 8; l++) o[l] = __float2bfloat16_rn(v[l]);
        *(uint4 *)(dst + r * in + g * 8) = *(const uint4 *)o;
    }
}

__global__ void k_add_bias(float *y, int64_t y_ld, const float *bias, int64_t out, int64_t total) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / out, r = i % out;
        y[t * y_ld + r] += bias[r];
    }
}

/* Bytes between rows of a tensor viewed as [rows, last], 0 if not evenly spaced. */
static size_t row_stride(const rt_tensor *t) {
    if (rt_tensor_is_contiguous(t)) return rt_dtype_row_bytes(t->dtype, t->shape[t->ndim - 1]);
    if (t->ndim == 2) return (size_t)t->stride[0];
    return 0;
}

static int gemv(cuda_ctx *c, const rt_tensor *w, const float *x, int64_t x_ld, float *y, int64_t y_ld,
                const float *bias, int64_t out, int64_t in, int n) {
    unsigned grid = (unsigned)((out + GEMV_WARPS - 1) / GEMV_WARPS);
    const char *wd = (const char *)w->data;
    int64_t ws = w->stride[0];
    bool vx = ((uintptr_t)x & 15) == 0 && (n == 1 || x_ld % 4 == 0);
    bool v8 = (w->dtype == RT_F16 || w->dtype == RT_BF16) && in % 8 == 0 && ws % 16 == 0 &&
              ((uintptr_t)wd & 15) == 0 && ((uintptr_t)x & 15) == 0 && (n == 1 || x_ld % 4 == 0);
    if (v8 && w->dtype == RT_F16)
        k_gemv_half_v8<RT_F16><<<grid, 32 * GEMV_WARPS, 0, c->stream>>>(wd, ws, x, x_ld, y, y_ld, bias, out, in, n);
    else if (v8)
        k_gemv_half_v8<RT_BF16><<<grid, 32 * GEMV_WARPS, 0, c->stream>>>(wd, ws, x, x_ld, y, y_ld, bias, out, in, n);
    else switch (w->dtype) {
#define X(T) case T: k_gemv_plain<T><<<grid, 32 * GEMV_WARPS, 0, c->stream>>>(wd, ws, x, x_ld, y, y_ld, bias, out, in, n); break;
        X(RT_F32) X(RT_F16) X(RT_BF16)
#undef X
#define X(T)                                                                                              \
    case T:                                                                                               \
        if (vx) k_gemv_quant<T, true><<<grid, 32 * GEMV_WARPS, 0, c->stream>>>(wd, ws, x, x_ld, y, y_ld, bias, out, in, n); \
        else k_gemv_quant<T, false><<<grid, 32 * GEMV_WARPS, 0, c->stream>>>(wd, ws, x, x_ld, y, y_ld, bias, out, in, n); \
        break;
        CUDA_FOR_QUANT(X)
#undef X
    default: return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: weight dtype %s", rt_dtype_name(w->dtype));
    }
    CU_LAUNCHED();
    return VC_OK;
}

/* The persistent workspace for x in f16/bf16 (cuda_ctx.xh_ws), grown
 * stream-ordered when needed; while a graph is recorded it cannot grow
 * (the eager run of the same shape before the recording has grown it). */
static void *xh_workspace(cuda_ctx *c, size_t bytes) {
    if (bytes <= c->xh_bytes) return c->xh_ws;
    size_t want = bytes < ((size_t)16 << 20) ? ((size_t)16 << 20) : bytes;
    void *p = cuda_tmp_alloc(c, want);
    if (!p) return NULL;
    cuda_tmp_free(c, c->xh_ws);
    c->xh_ws = p;
    c->xh_bytes = want;
    return p;
}

/* Half-precision GEMM: x converted to the type of w16 (ld_w elements). */
static int gemm_half(cuda_ctx *c, const void *w16, cudaDataType wt, int64_t ld_w, const float *x, int64_t x_ld,
                     float *y, int64_t y_ld, int64_t out, int64_t in, int64_t n) {
    void *xh = xh_workspace(c, (size_t)(n * in) * 2);
    if (!xh) return VC_ERR_OOM;
    unsigned g = cuda_blocks(n * in, 256);
    if (wt == CUDA_R_16F)
        k_to_half<__half><<<g, 256, 0, c->stream>>>(x, x_ld, (__half *)xh, in, n * in);
    else
        k_to_half<__nv_bfloat16><<<g, 256, 0, c->stream>>>(x, x_ld, (__nv_bfloat16 *)xh, in, n * in);
    cudaError_t le = cudaGetLastError();
    if (le != cudaSuccess) return cuda_fail(le, "k_to_half", __FILE__, __LINE__);
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in, &one, w16, wt,
                                     (int)ld_w, xh, wt, (int)in, &zero, y, CUDA_R_32F, (int)y_ld,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return cuda_blas_fail(st, "cublasGemmEx", __FILE__, __LINE__);
    return VC_OK;
}

static int gemm(cuda_ctx *c, const rt_tensor *w, const float *x, int64_t x_ld, float *y, int64_t y_ld,
                const float *bias, int64_t out, int64_t in, int64_t n) {
    int64_t ws = w->stride[0];
    int rc = VC_OK;
    if (w->dtype == RT_F32) {
        if (ws % 4) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: misaligned f32 weight rows");
        const float one = 1.0f, zero = 0.0f;
        CUBLAS_TRY(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in, &one,
                               (const float *)w->data, (int)(ws / 4), x, (int)x_ld, &zero, y, (int)y_ld));
    } else if (w->dtype == RT_F16 || w->dtype == RT_BF16) {
        if (ws % 2) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: misaligned weight rows");
        rc = gemm_half(c, w->data, w->dtype == RT_F16 ? CUDA_R_16F : CUDA_R_16BF, ws / 2, x, x_ld, y, y_ld,
                       out, in, n);
    } else {
        void *wb = cuda_tmp_alloc(c, (size_t)(out * in) * 2);
        if (!wb) return VC_ERR_OOM;
        int64_t total = out * (in / 8);
        unsigned g = cuda_blocks(total, 256);
        const char *wd = (const char *)w->data;
        switch (w->dtype) {
#define X(T) case T: k_dequant_bf16<T><<<g, 256, 0, c->stream>>>(wd, ws, (__nv_bfloat16 *)wb, in, total); break;
            CUDA_FOR_QUANT(X)
#undef X
        default: break;
        }
        cudaError_t le = cudaGetLastError();
        if (le != cudaSuccess) rc = cuda_fail(le, "k_dequant_bf16", __FILE__, __LINE__);
        else rc = gemm_half(c, wb, CUDA_R_16BF, in, x, x_ld, y, y_ld, out, in, n);
        cuda_tmp_free(c, wb);
    }
    if (rc < 0 || !bias) return rc;
    k_add_bias<<<cuda_blocks(n * out, 256), 256, 0, c->stream>>>(y, y_ld, bias, out, n * out);
    CU_LAUNCHED();
    return VC_OK;
}

extern "C" int cuda_op_matmul(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *x = a->src[0], *w = a->src[1], *bias = a->src[2];
    rt_tensor *dst = a->dst;
    if (cuda_check_dev(dst, "matmul") || cuda_check_dev(x, "matmul") || cuda_check_dev(w, "matmul") ||
        (bias && cuda_check_dev(bias, "matmul")))
        return VC_ERR_INVALID;
    int64_t in = w->shape[1], out = w->shape[0], n = rt_tensor_nrows(x);
    const rt_dtype_traits *wt = rt_dtype_info(w->dtype);
    if (!cuda_matmul_supports(w->dtype))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: weight dtype %s", wt->name);
    if (in % wt->block_elems)
        return vc_err_set(VC_ERR_INVALID, "cuda matmul: in=%lld not a multiple of %s block %d", (long long)in,
                          wt->name, wt->block_elems);
    if (!wt->quantized && w->stride[1] != wt->block_bytes)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: weight rows must be contiguous");
    size_t xs = row_stride(x), ys = row_stride(dst);
    if (!xs || !ys || xs % 4 || ys % 4 || x->stride[x->ndim - 1] != 4 || dst->stride[dst->ndim - 1] != 4 ||
        (bias && !rt_tensor_is_contiguous(bias)))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: x/dst rows must be evenly strided");
    if (n == 0 || out == 0) return VC_OK;
    if (out > INT_MAX || in > INT_MAX || n > INT_MAX)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: dimension over INT_MAX");
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    const float *xd = (const float *)x->data, *bd = bias ? (const float *)bias->data : NULL;
    float *yd = (float *)dst->data;
    int64_t x_ld = (int64_t)xs / 4, y_ld = (int64_t)ys / 4;
    if (n <= CUDA_GEMV_MAX_N) return gemv(c, w, xd, x_ld, yd, y_ld, bd, out, in, (int)n);
    return gemm(c, w, xd, x_ld, yd, y_ld, bd, out, in, n);
}
