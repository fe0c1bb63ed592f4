/* cuda_gemm — the cuBLAS half of MATMUL and MATMUL_GLU: steps of more than
 * CUDA_GEMV_MAX_N tokens, and any step with bf16 activations.
 *
 *  - f32 W: SGEMM in plain fp32 (default math mode, so no TF32).
 *  - f16 / bf16 W: cublasGemmEx with fp32 accumulation. x is f32 or bf16
 *    (rt_backend_act_dtype: this backend asks for bf16 activations above
 *    CUDA_GEMV_MAX_N tokens); a bf16 x meets bf16 W as it is, anything else
 *    is converted to W's type into a persistent workspace (cuda_ctx.xh).
 *    The result is f32, or bf16 (a bf16 MATMUL dst: prefill's QKV output,
 *    tensor-parallel partial sums; MATMUL_GLU's scratch, below) for bf16 or
 *    quantized W.
 *  - quantized W: cuda_mmq.cu (int8 tensor cores over the blocks) for the
 *    rows it takes (VLLM_CUDA_MMQ_MAX_N); else dequantized into a bf16
 *    scratch copy [out,in] first, then as bf16. The scratch comes from the stream-ordered pool and is released
 *    right after the GEMM is queued.
 *  - MATMUL_ADD: the GEMM with beta = 1 into the f32 residual (below).
 *  - MATMUL_GLU: the GEMM of the stacked [gate; up] matrix into the op's
 *    scratch [n, 2f], then GLU of its two halves into dst [n, f] (k_glu,
 *    8 values per thread). With a bf16 dst (the bf16-activation mode) and
 *    bf16 or quantized W, the GEMM writes bf16 into the scratch: half the
 *    bytes written and read, and gate/up are rounded to bf16 before the
 *    GLU as in HF's bf16 models (f16 W: f32 scratch; cuBLAS has no f16 x
 *    f16 -> bf16 GEMM). With an f32 dst everything stays f32.
 *
 * Row-major to cuBLAS (column-major): W[out,in] with row stride ldw is the
 * column-major matrix W'[in,out]; likewise X'[in,n] and Y'[out,n]. So
 * Y' = W'^T X': gemm(T, N, m=out, n=n, k=in).
 */
#include "backends/cuda/cuda_dequant.cuh"
#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_store.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>

#include <type_traits>

__device__ __forceinline__ float ld_f(const float *p) { return *p; }
__device__ __forceinline__ float ld_f(const __nv_bfloat16 *p) { return __bfloat162float(*p); }

/* x rows of S (row stride x_ld elements) -> contiguous [n, in] of type H. */
template <typename S, typename H>
__global__ void k_to_half(const S *x, int64_t x_ld, H *dst, int64_t in, int64_t total) {
    CUDA_PDL_ENTER();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / in, k = i % in;
        cuda_st1(dst + i, ld_f(x + t * x_ld + k));
    }
}

/* f32 -> H, 4 values per thread (16-byte loads, 8-byte stores), for in and
 * x_ld multiples of 4 and a 16-byte aligned x (prefill activations); one
 * block row per x row, so no division per element. */
template <typename H> __global__ void k_to_half4(const float *x, int64_t x_ld, H *dst, int in4) {
    CUDA_PDL_ENTER();
    const int64_t t = blockIdx.y;
    const float4 *xr = (const float4 *)(x + t * x_ld);
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < in4; k += gridDim.x * blockDim.x) {
        float4 v = xr[k];
        __align__(8) H o[4];
        cuda_st1(o, v.x);
        cuda_st1(o + 1, v.y);
        cuda_st1(o + 2, v.z);
        cuda_st1(o + 3, v.w);
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

/* y += bias per row (Y: f32, or bf16: the GEMM's rounded result plus the
 * bias, rounded again). */
template <typename Y>
__global__ void k_add_bias(Y *y, int64_t y_ld, const float *bias, int64_t out, int64_t total) {
    CUDA_PDL_ENTER();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / out, r = i % out;
        cuda_st1(y + t * y_ld + r, ld_f(y + t * y_ld + r) + bias[r]);
    }
}

/* x (S rows, x_ld elements apart) -> contiguous [n, in] of H in the
 * workspace; NULL on failure (message in vc_err). */
template <typename S, typename H>
static H *to_half(cuda_ctx *c, const S *x, int64_t x_ld, int64_t in, int64_t n) {
    H *xh = (H *)cuda_ws_get(c, &c->xh, (size_t)(n * in) * sizeof(H), "matmul activation");
    if (!xh) return NULL;
    if (sizeof(S) == 4 && sizeof(H) == 2 && in % 4 == 0 && x_ld % 4 == 0 && (uintptr_t)x % 16 == 0 &&
        n <= 65535) {
        dim3 g4((unsigned)((in / 4 + 255) / 256), (unsigned)n);
        cuda_launch(k_to_half4<H>, g4, 256, 0, c->stream, (const float *)x, x_ld, xh, (int)(in / 4));
    } else {
        cuda_launch(k_to_half<S, H>, cuda_blocks(n * in, 256), 256, 0, c->stream, x, x_ld, xh, in, n * in);
    }
    cudaError_t le = cudaGetLastError();
    if (le != cudaSuccess) {
        cuda_fail(le, "k_to_half", __FILE__, __LINE__);
        return NULL;
    }
    return xh;
}

/* x in the element type H of the GEMM: a bf16 x meets bf16 W as it is
 * (16-byte aligned rows), an f32 x meets f32 W; anything else goes through
 * the workspace. *ld: elements between the rows of the result. */
template <typename H>
static const H *x_as(cuda_ctx *c, const void *x, rt_dtype xt, int64_t x_ld, int64_t in, int64_t n, int64_t *ld) {
    *ld = in;
    if (xt == RT_BF16) {
        if constexpr (std::is_same<H, __nv_bfloat16>::value) {
            if (x_ld % 8 == 0 && (uintptr_t)x % 16 == 0) {
                *ld = x_ld;
                return (const H *)x;
            }
        }
        return to_half<__nv_bfloat16, H>(c, (const __nv_bfloat16 *)x, x_ld, in, n);
    }
    if constexpr (std::is_same<H, float>::value) {
        *ld = x_ld;
        return (const H *)x;
    } else {
        return to_half<float, H>(c, (const float *)x, x_ld, in, n);
    }
}

/* y[n, out] (yt: f32, or bf16 for half W; rows y_ld elements apart) =
 * x[n, in] (xt: f32 or bf16; rows x_ld elements apart) · W^T, plus bias
 * (f32 y only). */
static int gemm_any(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, void *y, rt_dtype yt,
                    int64_t y_ld, const float *bias, int64_t out, int64_t in, int64_t n, bool acc = false) {
    int64_t ws = w->stride[0], ld = 0;
    const float one = 1.0f, zero = 0.0f, *beta = acc ? &one : &zero; /* acc: y += (MATMUL_ADD; C = D = y) */
    if ((w->dtype == RT_F32 || w->dtype == RT_F16) && yt != RT_F32) /* cuBLAS: no f32 / f16 GEMM into bf16 */
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: a bf16 result needs bf16 or quantized W (W is %s)",
                          rt_dtype_name(w->dtype));
    if (w->dtype == RT_F32) {
        if (ws % 4) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: misaligned f32 weight rows");
        const float *xf = x_as<float>(c, x, xt, x_ld, in, n, &ld);
        if (!xf) return VC_ERR_OOM;
        CUBLAS_TRY(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in, &one,
                               (const float *)w->data, (int)(ws / 4), xf, (int)ld, beta, (float *)y, (int)y_ld));
    } else {
        const void *w16 = w->data, *xh = NULL;
        void *wb = NULL;
        int64_t ld_w = ws / 2;
        cudaDataType wt = w->dtype == RT_F16 ? CUDA_R_16F : CUDA_R_16BF;
        if (w->dtype == RT_F16 || w->dtype == RT_BF16) {
            if (ws % 2) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: misaligned weight rows");
        } else if (cuda_mmq_fits(c, w, x, xt, x_ld, in, n)) { /* int8 tensor cores over the blocks, bias included */
            return cuda_mmq(c, w, x, xt, x_ld, y, yt, y_ld, bias, out, in, n);
        } else {
            wb = cuda_tmp_alloc(c, (size_t)(out * in) * 2);
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
            if (le != cudaSuccess) {
                cuda_tmp_free(c, wb);
                return cuda_fail(le, "k_dequant_bf16", __FILE__, __LINE__);
            }
            w16 = wb;
            ld_w = in;
        }
        if (wt == CUDA_R_16F) xh = x_as<__half>(c, x, xt, x_ld, in, n, &ld);
        else xh = x_as<__nv_bfloat16>(c, x, xt, x_ld, in, n, &ld);
        cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
        if (xh)
            st = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in, &one, w16, wt, (int)ld_w,
                              xh, wt, (int)ld, beta, y, yt == RT_BF16 ? CUDA_R_16BF : CUDA_R_32F, (int)y_ld,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cuda_tmp_free(c, wb);
        if (!xh) return VC_ERR_OOM;
        if (st != CUBLAS_STATUS_SUCCESS) return cuda_blas_fail(st, "cublasGemmEx", __FILE__, __LINE__);
    }
    if (!bias) return VC_OK;
    if (yt == RT_BF16)
        cuda_launch(k_add_bias<__nv_bfloat16>, cuda_blocks(n * out, 256), 256, 0, c->stream, (__nv_bfloat16 *)y, y_ld,
                    bias, out, n * out);
    else
        cuda_launch(k_add_bias<float>, cuda_blocks(n * out, 256), 256, 0, c->stream, (float *)y, y_ld, bias, out,
                    n * out);
    CU_LAUNCHED();
    return VC_OK;
}

int cuda_gemm(cuda_ctx *c, const rt_tensor *w, const void *x, rt_dtype xt, int64_t x_ld, float *y, int64_t y_ld,
              const float *bias, int64_t out, int64_t in, int64_t n) {
    return gemm_any(c, w, x, xt, x_ld, y, RT_F32, y_ld, bias, out, in, n);
}

/* Elements between rows of x viewed as [rows, last] (0: not evenly spaced
 * or not contiguous within a row). */
static int64_t row_elems(const rt_tensor *t) {
    size_t es = (size_t)rt_dtype_info(t->dtype)->block_bytes;
    if (t->stride[t->ndim - 1] != (int64_t)es) return 0;
    if (rt_tensor_is_contiguous(t)) return t->shape[t->ndim - 1];
    if (t->ndim == 2 && t->stride[0] % (int64_t)es == 0) return t->stride[0] / (int64_t)es;
    return 0;
}

/* MATMUL with a bf16 x or dst (the bf16-activation mode; any n, cuBLAS):
 * a bf16 dst (prefill's QKV output, the row-parallel partials of tensor
 * parallelism that NCCL sums in bf16) gets cuBLAS's f32 accumulation rounded
 * once, for bf16 or quantized W; an f32 x is converted to bf16 first. */
int cuda_gemm_matmul(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *x = a->src[0], *w = a->src[1], *bias = a->src[2];
    rt_tensor *dst = a->dst;
    if (cuda_check_dev(dst, "matmul") || cuda_check_dev(x, "matmul") || cuda_check_dev(w, "matmul") ||
        (bias && cuda_check_dev(bias, "matmul")))
        return VC_ERR_INVALID;
    int64_t in = w->shape[1], out = w->shape[0], n = rt_tensor_nrows(x);
    int64_t x_ld = row_elems(x), y_ld = row_elems(dst);
    if (!x_ld || !y_ld || (bias && !rt_tensor_is_contiguous(bias)))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: x/dst rows must be evenly strided");
    if (in % rt_dtype_info(w->dtype)->block_elems)
        return vc_err_set(VC_ERR_INVALID, "cuda matmul: in=%lld not a multiple of the %s block", (long long)in,
                          rt_dtype_name(w->dtype));
    if (n == 0 || out == 0) return VC_OK;
    if (out > INT_MAX || in > INT_MAX || n > INT_MAX)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul: dimension over INT_MAX");
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    if (cuda_skinny_fits(c, w, x->data, x->dtype, x_ld, in, n, dst->dtype, false)) /* 2..16 bf16 rows */
        return cuda_skinny_matmul(c, w, x->data, x->dtype, x_ld, dst->data, dst->dtype, y_ld,
                                  bias ? (const float *)bias->data : NULL, out, in, (int)n);
    return gemm_any(c, w, x->data, x->dtype, x_ld, dst->data, dst->dtype, y_ld,
                    bias ? (const float *)bias->data : NULL, out, in, n);
}

/* MATMUL_ADD: dst (f32 residual rows, or bf16 ones over bf16 W: a bf16
 * residual stream) += x W^T (+ bias) as one cuBLAS GEMM with beta = 1 and
 * C = D = dst (the bias kernel, if any, adds after it). The value is the
 * unfused op's, fl(dst + acc): the f32 accumulator added to C once (into
 * a bf16 dst within two bf16 roundings: cuBLAS's bf16-output kernels may
 * round the product first; test_cuda_ops). Taken where MATMUL itself would run on cuBLAS (f16 / bf16 W,
 * more rows than the GEMV and the skinny kernel take); decode steps keep
 * the GEMV with its fused ADD_RMSNORM. VLLM_CUDA_MATMUL_ADD=0: never (the
 * A/B switch; the model then runs MATMUL + ADD_RMSNORM). */
bool cuda_matmul_add_fits(cuda_ctx *c, const rt_op_args *a) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("VLLM_CUDA_MATMUL_ADD");
        on = !(e && e[0] == '0' && e[1] == 0);
    }
    const rt_tensor *x = a->src[0], *w = a->src[1];
    int64_t n = rt_tensor_nrows(x), in = w->shape[1];
    if (!on || (w->dtype != RT_BF16 && w->dtype != RT_F16)) return false;
    if (a->dst->dtype != RT_F32 && !(a->dst->dtype == RT_BF16 && w->dtype == RT_BF16)) return false;
    if (n <= CUDA_GEMV_MAX_N || !row_elems(x) || !row_elems(a->dst) || w->stride[1] != 2) return false;
    return !cuda_skinny_fits(c, w, x->data, x->dtype, row_elems(x), in, n, a->dst->dtype, false);
}

int cuda_op_matmul_add(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *x = a->src[0], *w = a->src[1], *bias = a->src[2];
    rt_tensor *dst = a->dst;
    if (cuda_check_dev(dst, "matmul_add") || cuda_check_dev(x, "matmul_add") || cuda_check_dev(w, "matmul_add") ||
        (bias && cuda_check_dev(bias, "matmul_add")))
        return VC_ERR_INVALID;
    if (!cuda_matmul_add_fits(c, a) || (bias && !rt_tensor_is_contiguous(bias)))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul_add: not a cuBLAS shape (rt_matmul_add_native)");
    int64_t in = w->shape[1], out = w->shape[0], n = rt_tensor_nrows(x);
    if (out > INT_MAX || in > INT_MAX || n > INT_MAX)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul_add: dimension over INT_MAX");
    if (out == 0) return VC_OK;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    return gemm_any(c, w, x->data, x->dtype, row_elems(x), dst->data, dst->dtype, row_elems(dst),
                    bias ? (const float *)bias->data : NULL, out, in, n, true);
}

template <typename S> __device__ __forceinline__ void ld8(const S *p, float *v);
template <> __device__ __forceinline__ void ld8<float>(const float *p, float *v) {
    float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
template <> __device__ __forceinline__ void ld8<__nv_bfloat16>(const __nv_bfloat16 *p, float *v) {
    uint4 u = *(const uint4 *)p;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __bfloat1622float2(h[i]);
        v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
}
template <typename D> __device__ __forceinline__ void st8(D *p, const float *v);
template <> __device__ __forceinline__ void st8<float>(float *p, const float *v) {
    *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
    *(float4 *)(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}
template <> __device__ __forceinline__ void st8<__nv_bfloat16>(__nv_bfloat16 *p, const float *v) {
    uint4 u;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    *(uint4 *)p = u;
}

/* The activation of k_glu: into bf16 the branch-free one of the fused
 * GEMM-GLU (cuda_glu_act_fast: the two paths agree bit for bit where the
 * GEMM sums agree), into f32 the CPU's. */
template <typename D> __device__ __forceinline__ float glu_act(int act, float g) { return cuda_glu_act(act, g); }
template <> __device__ __forceinline__ float glu_act<__nv_bfloat16>(int act, float g) {
    return act == RT_ACT_SILU ? cuda_glu_act_fast<RT_ACT_SILU>(g) : cuda_glu_act_fast<RT_ACT_GELU_TANH>(g);
}

/* GLU of the GEMM result gu [n, 2f] (S: f32 or bf16, rows 2f apart):
 * dst[r, j] = act(gu[r, j]) * gu[r, f + j] (D: f32 or bf16, rows d_ld
 * apart). V: 8 values per thread (f, d_ld multiples of 8, 16-byte aligned
 * rows); else one. blockIdx.y walks rows. */
template <typename S, typename D, bool V>
__global__ void k_glu(const S *gu, int64_t f, D *dst, int64_t d_ld, int64_t n, int act) {
    CUDA_PDL_ENTER();
    for (int64_t r = blockIdx.y; r < n; r += gridDim.y) {
        const S *g = gu + r * 2 * f, *u = g + f;
        D *o = dst + r * d_ld;
        if (V) {
            for (int64_t j = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; j < f;
                 j += (int64_t)gridDim.x * blockDim.x * 8) {
                float gv[8], uv[8];
                ld8<S>(g + j, gv);
                ld8<S>(u + j, uv);
#pragma unroll
                for (int i = 0; i < 8; i++) gv[i] = glu_act<D>(act, gv[i]) * uv[i];
                st8<D>(o + j, gv);
            }
        } else {
            for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < f;
                 j += (int64_t)gridDim.x * blockDim.x)
                cuda_st1(o + j, glu_act<D>(act, ld_f(g + j)) * ld_f(u + j));
        }
    }
}

template <typename S, typename D>
static void launch_glu(cuda_ctx *c, const S *gu, int64_t f, D *dst, int64_t d_ld, int64_t n, int act) {
    bool v = f % 8 == 0 && d_ld % 8 == 0 && (uintptr_t)gu % 16 == 0 && (uintptr_t)dst % 16 == 0;
    int64_t per = v ? 256 * 8 : 256;
    dim3 grid((unsigned)((f + per - 1) / per), (unsigned)(n < 65535 ? n : 65535));
    if (v) cuda_launch(k_glu<S, D, true>, grid, 256, 0, c->stream, gu, f, dst, d_ld, n, act);
    else cuda_launch(k_glu<S, D, false>, grid, 256, 0, c->stream, gu, f, dst, d_ld, n, act);
}

/* MATMUL_GLU through cuBLAS (n > CUDA_GEMV_MAX_N, or any bf16 x / dst):
 * the GEMM into the scratch [n, 2f] (bf16 when dst is bf16 and W is not
 * f32, else f32), then k_glu into dst [n, f]. */
int cuda_gemm_glu(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *x = a->src[0], *w = a->src[1], *scratch = a->src[2];
    rt_tensor *dst = a->dst;
    if (cuda_check_dev(dst, "matmul_glu") || cuda_check_dev(x, "matmul_glu") || cuda_check_dev(w, "matmul_glu") ||
        cuda_check_dev(scratch, "matmul_glu"))
        return VC_ERR_INVALID;
    int64_t in = w->shape[1], out = w->shape[0], n = rt_tensor_nrows(x), f = out / 2;
    int64_t x_ld = row_elems(x), d_ld = dst->ndim == 2 ? row_elems(dst) : rt_tensor_is_contiguous(dst) ? f : 0;
    if (!x_ld || !d_ld)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul_glu: x/dst rows must be evenly strided");
    if (!cuda_matmul_supports(w->dtype))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul_glu: weight dtype %s", rt_dtype_name(w->dtype));
    if (in % rt_dtype_info(w->dtype)->block_elems)
        return vc_err_set(VC_ERR_INVALID, "cuda matmul_glu: in=%lld not a multiple of the %s block", (long long)in,
                          rt_dtype_name(w->dtype));
    if (n == 0 || f == 0) return VC_OK;
    if (out > INT_MAX || in > INT_MAX || n > INT_MAX)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda matmul_glu: dimension over INT_MAX");
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    if (cuda_skinny_fits(c, w, x->data, x->dtype, x_ld, in, n, dst->dtype, true)) /* 2..16 bf16 rows, GLU fused */
        return cuda_skinny_glu(c, w, x->data, x->dtype, x_ld, dst->data, dst->dtype, d_ld, f, in, (int)n,
                               a->p.glu.act);
    int fr = cuda_gemm_glu_fused(c, w, x->data, x->dtype, x_ld, dst->data, dst->dtype, d_ld, f, in, n, a->p.glu.act);
    if (fr <= 0) return fr; /* 1: not taken */
    /* bf16 scratch when the GEMM itself runs in bf16 (bf16 or dequantized W;
     * cuBLAS has no f16 x f16 -> bf16 GEMM). */
    rt_dtype st = dst->dtype == RT_BF16 && w->dtype != RT_F32 && w->dtype != RT_F16 ? RT_BF16 : RT_F32;
    int rc = gemm_any(c, w, x->data, x->dtype, x_ld, scratch->data, st, out, NULL, out, in, n);
    if (rc < 0) return rc;
    int act = a->p.glu.act;
    if (st == RT_BF16) {
        const __nv_bfloat16 *gu = (const __nv_bfloat16 *)scratch->data;
        launch_glu(c, gu, f, (__nv_bfloat16 *)dst->data, d_ld, n, act);
    } else if (dst->dtype == RT_BF16) {
        launch_glu(c, (const float *)scratch->data, f, (__nv_bfloat16 *)dst->data, d_ld, n, act);
    } else {
        launch_glu(c, (const float *)scratch->data, f, (float *)dst->data, d_ld, n, act);
    }
    CU_LAUNCHED();
    return VC_OK;
}
