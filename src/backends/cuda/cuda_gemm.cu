/* cuda_gemm — the prefill half of MATMUL and MATMUL_GLU (n > CUDA_GEMV_MAX_N
 * tokens): cuBLAS.
 *
 *  - f32 W: SGEMM in plain fp32 (default math mode, so no TF32).
 *  - f16 / bf16 W: x is converted to W's type into a persistent workspace
 *    (cuda_ctx.xh_ws) and cublasGemmEx runs with fp32 accumulation and an
 *    f32 result.
 *  - quantized W: dequantized into a bf16 scratch copy [out,in] first, then
 *    as bf16. The scratch comes from the stream-ordered pool and is released
 *    right after the GEMM is queued.
 *  - MATMUL_GLU: the GEMM of the stacked [gate; up] matrix into the op's
 *    scratch [n, 2f], then GLU of its two halves into dst [n, f].
 *
 * Row-major to cuBLAS (column-major): W[out,in] with row stride ldw is the
 * column-major matrix W'[in,out]; likewise X'[in,n] and Y'[out,n]. So
 * Y' = W'^T X': gemm(T, N, m=out, n=n, k=in).
 */
#include "backends/cuda/cuda_dequant.cuh"
#include "backends/cuda/cuda_internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ void st_h(__half *p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void st_h(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* x rows (row stride x_ld floats) -> contiguous [n, in] of type H. */
template <typename H>
__global__ void k_to_half(const float *x, int64_t x_ld, H *dst, int64_t in, int64_t total) {
    CUDA_PDL_ENTER();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / in, k = i % in;
        st_h(dst + i, x[t * x_ld + k]);
    }
}

/* The same, 4 values per thread (16-byte loads, 8-byte stores), for in and
 * x_ld multiples of 4 and a 16-byte aligned x (prefill activations); one
 * block row per x row, so no division per element. */
template <typename H> __global__ void k_to_half4(const float *x, int64_t x_ld, H *dst, int in4) {
    CUDA_PDL_ENTER();
    const int64_t t = blockIdx.y;
    const float4 *xr = (const float4 *)(x + t * x_ld);
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < in4; k += gridDim.x * blockDim.x) {
        float4 v = xr[k];
        __align__(8) H o[4];
        st_h(o, v.x);
        st_h(o + 1, v.y);
        st_h(o + 2, v.z);
        st_h(o + 3, v.w);
        *(uint2 *)(dst + (t * in4 + k) * 4) = *(const uint2 *)o;
    }
}

/* Quantized W[out,in] -> bf16 [out,in], one thread per group of 8 values
 * (one 16-byte store; consecutive threads write consecutive groups). */
template <rt_dtype T>
__global__ void k_dequant_bf16(const char *w, int64_t w_stride, __nv_bfloat16 *dst, int64_t in, int64_t total) {
    CUDA_PDL_ENTER();
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
    CUDA_PDL_ENTER();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / out, r = i % out;
        y[t * y_ld + r] += bias[r];
    }
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
    if (in % 4 == 0 && x_ld % 4 == 0 && (uintptr_t)x % 16 == 0 && n <= 65535) {
        dim3 g4((unsigned)((in / 4 + 255) / 256), (unsigned)n);
        if (wt == CUDA_R_16F) cuda_launch(k_to_half4<__half>, g4, 256, 0, c->stream, x, x_ld, (__half *)xh, (int)(in / 4));
        else cuda_launch(k_to_half4<__nv_bfloat16>, g4, 256, 0, c->stream, x, x_ld, (__nv_bfloat16 *)xh, (int)(in / 4));
    } else if (wt == CUDA_R_16F)
        cuda_launch(k_to_half<__half>, g, 256, 0, c->stream, x, x_ld, (__half *)xh, in, n * in);
    else
        cuda_launch(k_to_half<__nv_bfloat16>, g, 256, 0, c->stream, x, x_ld, (__nv_bfloat16 *)xh, in, n * in);
    cudaError_t le = cudaGetLastError();
    if (le != cudaSuccess) return cuda_fail(le, "k_to_half", __FILE__, __LINE__);
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in, &one, w16, wt,
                                     (int)ld_w, xh, wt, (int)in, &zero, y, CUDA_R_32F, (int)y_ld,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return cuda_blas_fail(st, "cublasGemmEx", __FILE__, __LINE__);
    return VC_OK;
}

int cuda_gemm(cuda_ctx *c, const rt_tensor *w, const float *x, int64_t x_ld, float *y, int64_t y_ld,
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
#define X(T) case T: cuda_launch(k_dequant_bf16<T>, g, 256, 0, c->stream, wd, ws, (__nv_bfloat16 *)wb, in, total); break;
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
    cuda_launch(k_add_bias, cuda_blocks(n * out, 256), 256, 0, c->stream, y, y_ld, bias, out, n * out);
    CU_LAUNCHED();
    return VC_OK;
}


/* MATMUL_GLU for n > CUDA_GEMV_MAX_N: MATMUL into the scratch [n, 2f], then
 * GLU of its halves into dst [n, f]. */
int cuda_gemm_glu(rt_backend *be, const rt_op_args *a) {
    const rt_tensor *x = a->src[0], *w = a->src[1], *scratch = a->src[2];
    rt_tensor *dst = a->dst;
    int64_t n = rt_tensor_nrows(x), f = w->shape[0] / 2;
    rt_op_args m;
    memset(&m, 0, sizeof m);
    m.dst = (rt_tensor *)scratch;
    m.src[0] = x;
    m.src[1] = w;
    int rc = cuda_op_matmul(be, &m);
    if (rc < 0) return rc;
    rt_tensor g = rt_tensor_2d(scratch->data, RT_F32, RT_DEV_CUDA, n, f), u = g;
    u.data = (float *)scratch->data + f;
    g.stride[0] = u.stride[0] = 2 * f * (int64_t)sizeof(float);
    rt_tensor d2 = rt_tensor_2d(dst->data, RT_F32, RT_DEV_CUDA, n, f);
    if (dst->ndim == 2) d2 = *dst;
    else if (!rt_tensor_is_contiguous(dst))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul_glu: dst must be 2-D or contiguous");
    rt_op_args gl;
    memset(&gl, 0, sizeof gl);
    gl.dst = &d2;
    gl.src[0] = &g;
    gl.src[1] = &u;
    gl.p.glu.act = a->p.glu.act;
    return cuda_op_glu(be, &gl);
}

