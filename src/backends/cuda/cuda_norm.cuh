/* cuda_norm — the row kernels of RMSNORM (cuda_rows.cu) and ADD_RMSNORM
 * (cuda_fused.cu): y = x * s * (w_off + w), s = 1/sqrtf(mean(x^2) + eps),
 * after x += res for ADD_RMSNORM (the sum stays in x). y is f32 or bf16
 * (rounded to nearest even); w is f32; x is f32, or bf16 for RMSNORM (a
 * bf16 residual stream: XT, widened exactly); res is f32 or bf16 (the
 * bf16 sum of a tensor-parallel all-reduce, widened exactly to f32 before
 * the add).
 *
 * One block per row. The vector kernel keeps the whole row in registers
 * (VPT float4 per thread) between the sum of squares and the scale pass, and
 * w in registers across the rows of a block:
 *   - few rows (decode): up to 1024 threads, so a 4096 row is one 16-byte
 *     load per thread and the call costs one memory round trip plus one
 *     block reduction;
 *   - many rows (prefill): 256 threads x VPT float4, many blocks per SM, so
 *     enough loads are in flight to run at memory bandwidth.
 * Rows that are not 16-byte aligned, or whose length is not a multiple of 4
 * or above 16384, take the scalar loop kernel. y may be x (RMSNORM) or res
 * of y's type (ADD_RMSNORM): each thread reads its elements before writing
 * them.
 */
#ifndef CUDA_NORM_CUH
#define CUDA_NORM_CUH

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_store.cuh"

#include <cuda_bf16.h>
#include <stdlib.h>

/* Loads of the addend, widened to f32. */
__device__ __forceinline__ float4 norm_ld4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 norm_ld4(const __nv_bfloat16 *p) {
    uint2 u = *(const uint2 *)p;
    float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x), b = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ float norm_ld1(const float *p) { return *p; }
__device__ __forceinline__ float norm_ld1(const __nv_bfloat16 *p) { return __bfloat162float(*p); }

/* Sum over the block; every thread gets the result. sh: 32 floats. */
__device__ __forceinline__ float norm_block_sum(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* VLLM_CUDA_ROW_PRE (default 1; 0 off, read at each launch): the row
 * kernels of a decode layer read what no kernel of the step writes (norm
 * weights; QK_ROPE_STORE's slot, position, angles and QK-norm weights)
 * before the programmatic-dependent-launch wait, while the previous kernel
 * still runs, so that after it only the activations are a memory trip. */
static inline int cuda_row_pre(void) {
    const char *e = getenv("VLLM_CUDA_ROW_PRE");
    return !(e && e[0] == '0' && e[1] == 0);
}

template <bool ADD, int VPT, typename OT, typename RT, typename XT = float>
__global__ void __launch_bounds__(VPT <= 4 ? 1024 : 512)
    k_norm_vec(char *x, const char *res, char *y, int64_t xs, int64_t rs, int64_t ys, const float *w, int64_t d,
               int64_t nrows, float eps, float w_off, int pre) {
    static_assert(!ADD || std::is_same<XT, float>::value, "ADD_RMSNORM keeps an f32 sum in x");
    if (!pre) CUDA_PDL_ENTER();
    __shared__ float sh[32];
    const int d4 = (int)(d >> 2), t = threadIdx.x, nt = blockDim.x;
    float4 wv[VPT];
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        int i = t + j * nt;
        wv[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < d4) {
            float4 a = ((const float4 *)w)[i];
            wv[j] = make_float4(w_off + a.x, w_off + a.y, w_off + a.z, w_off + a.w);
        }
    }
    if (pre) CUDA_PDL_ENTER(); /* w is a weight: loaded before the wait */
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        float4 *xr = (float4 *)(x + r * xs);
        const RT *rr = (const RT *)(res + r * rs);
        float4 v[VPT], b[VPT];
#pragma unroll
        for (int j = 0; j < VPT; j++) { /* every load before any store: all in flight at once */
            int i = t + j * nt;
            v[j] = b[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (i < d4) {
                if constexpr (std::is_same<XT, float>::value) v[j] = xr[i];
                else v[j] = norm_ld4((const XT *)(x + r * xs) + 4 * i);
                if (ADD) b[j] = norm_ld4(rr + 4 * i);
            }
        }
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < VPT; j++) {
            int i = t + j * nt;
            if (ADD) {
                v[j].x += b[j].x, v[j].y += b[j].y, v[j].z += b[j].z, v[j].w += b[j].w;
                if (i < d4) xr[i] = v[j];
            }
            ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
        }
        ss = norm_block_sum(ss, sh);
        float s = 1.0f / sqrtf(ss / (float)d + eps); /* IEEE sqrt and divide, not rsqrtf */
        OT *yr = (OT *)(y + r * ys);
#pragma unroll
        for (int j = 0; j < VPT; j++) {
            int i = t + j * nt;
            if (i < d4) {
                float4 o = make_float4(v[j].x * s * wv[j].x, v[j].y * s * wv[j].y, v[j].z * s * wv[j].z,
                                       v[j].w * s * wv[j].w);
                cuda_st4(yr + 4 * i, o);
            }
        }
    }
}

/* Any row length and alignment: two passes over the row in memory. */
template <bool ADD, typename OT, typename RT, typename XT = float>
__global__ void k_norm_loop(cuda_view x, cuda_view res, cuda_view y, const float *w, int64_t d, int64_t nrows,
                            float eps, float w_off) {
    static_assert(!ADD || std::is_same<XT, float>::value, "ADD_RMSNORM keeps an f32 sum in x");
    CUDA_PDL_ENTER();
    __shared__ float sh[32];
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        XT *xr = (XT *)cuda_row(x, r);
        OT *yr = (OT *)cuda_row(y, r);
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
            float v = norm_ld1(xr + i);
            if constexpr (ADD) {
                v += norm_ld1((const RT *)cuda_row(res, r) + i);
                xr[i] = v;
            }
            ss += v * v;
        }
        ss = norm_block_sum(ss, sh);
        float s = 1.0f / sqrtf(ss / (float)d + eps);
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) cuda_st1(yr + i, norm_ld1(xr + i) * s * (w_off + w[i]));
        __syncthreads(); /* in place: all reads of this row done before the next row */
    }
}

/* Row r of t starts at data + r * *rs, on a multiple of `align` bytes (the
 * outer dimensions collapse into one row stride). */
static inline bool norm_rows_flat(const rt_tensor *t, int64_t align, int64_t *rs) {
    *rs = t->ndim >= 2 ? t->stride[t->ndim - 2] : 0;
    if ((uintptr_t)t->data % (uintptr_t)align || *rs % align) return false;
    for (int i = 0; i + 2 < t->ndim; i++)
        if (t->shape[i] > 1 && t->stride[i] != t->stride[i + 1] * t->shape[i + 1]) return false;
    return true;
}

template <bool ADD, typename OT, typename RT, typename XT = float>
static void norm_launch_t(cuda_ctx *c, const rt_tensor *x, const rt_tensor *res, const rt_tensor *y,
                          const rt_tensor *w, float eps, float w_off) {
    int64_t d = x->shape[x->ndim - 1], nrows = rt_tensor_nrows(x), d4 = d / 4;
    unsigned grid = (unsigned)(nrows < 65535 ? nrows : 65535);
    const float *wp = (const float *)w->data;
    int64_t xs = 0, rs = 0, ys = 0;
    bool vec = d % 4 == 0 && norm_rows_flat(x, 4 * (int64_t)sizeof(XT), &xs) &&
               norm_rows_flat(res ? res : x, 4 * (int64_t)sizeof(RT), &rs) &&
               norm_rows_flat(y, 4 * (int64_t)sizeof(OT), &ys) && (uintptr_t)wp % 16 == 0;
    char *px = (char *)x->data, *py = (char *)y->data;
    const char *pr = (const char *)(res ? res : x)->data;
    const int pre = cuda_row_pre();
    /* Few rows: latency (wide blocks); many rows: bandwidth (256 threads). */
    int64_t max_t = nrows < 2 * (int64_t)c->n_sm ? 1024 : 256;
    for (int pass = 0; vec && pass < 2; pass++, max_t = 1024) {
        for (int vpt = 1; vpt <= 8; vpt *= 2) {
            int64_t nt = ((d4 + vpt - 1) / vpt + 31) / 32 * 32;
            if (nt > (vpt == 8 ? 512 : max_t)) continue;
#define NORM_VEC(V)                                                                                   \
    cuda_launch(k_norm_vec<ADD, V, OT, RT, XT>, grid, (unsigned)nt, 0, c->stream, px, pr, py, xs, rs, ys, wp, d, nrows, \
                eps, w_off, pre)
            if (vpt == 1) NORM_VEC(1);
            else if (vpt == 2) NORM_VEC(2);
            else if (vpt == 4) NORM_VEC(4);
            else NORM_VEC(8);
#undef NORM_VEC
            return;
        }
    }
    cuda_launch(k_norm_loop<ADD, OT, RT, XT>, grid, 256, 0, c->stream, cuda_view_of(x), cuda_view_of(res ? res : x),
                cuda_view_of(y), wp, d, nrows, eps, w_off);
}

/* Queues y = rmsnorm(x [+= res]) on c's stream (rows contiguous, checked by
 * the caller); res NULL: plain RMSNORM. y f32 or bf16; res f32 or bf16; x
 * bf16 for plain RMSNORM only. */
template <bool ADD>
static int cuda_norm_launch(cuda_ctx *c, const rt_tensor *x, const rt_tensor *res, const rt_tensor *y,
                            const rt_tensor *w, float eps, float w_off) {
    bool r16 = false;
    if constexpr (ADD) r16 = res->dtype == RT_BF16;
    if (x->dtype == RT_BF16) {
        if constexpr (!ADD) { /* a bf16 residual stream's norm */
            if (y->dtype == RT_BF16)
                norm_launch_t<false, __nv_bfloat16, float, __nv_bfloat16>(c, x, res, y, w, eps, w_off);
            else
                norm_launch_t<false, float, float, __nv_bfloat16>(c, x, res, y, w, eps, w_off);
        }
    } else if (r16) {
        if constexpr (ADD) { /* (no bf16-addend kernels for plain RMSNORM) */
            if (y->dtype == RT_BF16) norm_launch_t<ADD, __nv_bfloat16, __nv_bfloat16>(c, x, res, y, w, eps, w_off);
            else norm_launch_t<ADD, float, __nv_bfloat16>(c, x, res, y, w, eps, w_off);
        }
    } else if (y->dtype == RT_BF16) {
        norm_launch_t<ADD, __nv_bfloat16, float>(c, x, res, y, w, eps, w_off);
    } else {
        norm_launch_t<ADD, float, float>(c, x, res, y, w, eps, w_off);
    }
    CU_LAUNCHED();
    return VC_OK;
}

#endif
