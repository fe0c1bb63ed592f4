/* cuda_rows — RMSNORM, SOFTMAX and ARGMAX (one thread block per row of the
 * last dimension) and ROPE (one thread per rotated pair).
 *
 * Semantics follow the CPU kernels (backends/cpu/cpu_norm.c, cpu_rope.c,
 * cpu_elementwise.c): RMSNORM y = x * rsqrt(mean(x^2) + eps) * (w_off + w);
 * SOFTMAX of an all -inf row is uniform; ARGMAX skips NaN and the lowest
 * index wins ties (0 for a row of NaN); ROPE uses theta = pos * inv_freq in
 * f32 and cos/sin scaled by attn_factor. Sums run in f32 over a fixed tree,
 * so they differ from the CPU's sequential (double) sums only by rounding.
 */
#include "backends/cuda/cuda_internal.h"

#include <math.h>

#define ROW_THREADS 256

/* Sum (op 0) or max (op 1) over the block; every thread gets the result. */
template <int OP> __device__ float block_reduce(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = OP == 0 ? v + w : fmaxf(v, w);
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (OP == 0 ? 0.0f : -INFINITY);
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = OP == 0 ? v + w : fmaxf(v, w);
    }
    return v;
}

__global__ void k_rmsnorm(cuda_view x, cuda_view y, const float *w, int64_t d, int64_t nrows, float eps,
                          float w_off) {
    CUDA_PDL_ENTER();
    __shared__ float sh[32];
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        const float *xr = (const float *)cuda_row(x, r);
        float *yr = (float *)cuda_row(y, r);
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
        ss = block_reduce<0>(ss, sh);
        float s = 1.0f / sqrtf(ss / (float)d + eps); /* IEEE sqrt and divide, not rsqrtf */
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = xr[i] * s * (w_off + w[i]);
        __syncthreads(); /* in place: all reads of this row done before the next row */
    }
}

__global__ void k_softmax(cuda_view x, cuda_view y, int64_t n, int64_t nrows) {
    CUDA_PDL_ENTER();
    __shared__ float sh[32];
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        const float *xr = (const float *)cuda_row(x, r);
        float *yr = (float *)cuda_row(y, r);
        float mx = -INFINITY;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, xr[i]);
        mx = block_reduce<1>(mx, sh);
        if (mx == -INFINITY) {
            for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = 1.0f / (float)n;
            continue;
        }
        float sum = 0.0f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += expf(xr[i] - mx);
        sum = block_reduce<0>(sum, sh);
        float inv = 1.0f / sum;
        __syncthreads(); /* in place: every thread read x before anyone writes */
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = expf(xr[i] - mx) * inv;
        __syncthreads();
    }
}

__global__ void k_argmax(cuda_view x, int32_t *out, int64_t n, int64_t nrows) {
    CUDA_PDL_ENTER();
    __shared__ float shv[32];
    __shared__ int64_t shi[32];
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        const float *xr = (const float *)cuda_row(x, r);
        float bv = -INFINITY;
        int64_t bi = -1; /* -1: nothing seen (NaN never wins) */
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            float v = xr[i];
            if (isnan(v)) continue;
            if (bi < 0 || v > bv) { /* i increases per thread: first max kept */
                bv = v;
                bi = i;
            }
        }
        /* (value desc, index asc) reduction; bi < 0 loses to anything. */
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
                bv = ov;
                bi = oi;
            }
        }
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
        __syncthreads();
        if (lane == 0) {
            shv[warp] = bv;
            shi[warp] = bi;
        }
        __syncthreads();
        if (warp == 0) {
            bv = lane < nw ? shv[lane] : -INFINITY;
            bi = lane < nw ? shi[lane] : -1;
            for (int o = 16; o > 0; o >>= 1) {
                float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
                if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
                    bv = ov;
                    bi = oi;
                }
            }
            if (lane == 0) out[r] = (int32_t)(bi < 0 ? 0 : bi);
        }
    }
}

/* One thread per (token, head, pair k < half). */
__global__ void k_rope(cuda_view x, const int32_t *pos, const float *inv_freq, int64_t n, int64_t h, int half,
                       int neox, float af) {
    CUDA_PDL_ENTER();
    int64_t total = n * h * half;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int k = (int)(t % half);
        int64_t hh = (t / half) % h, i = t / ((int64_t)half * h);
        float theta = (float)pos[i] * inv_freq[k];
        float c = cosf(theta) * af, s = sinf(theta) * af;
        float *v = (float *)(x.data + i * x.stride[0] + hh * x.stride[1]);
        int ia = neox ? k : 2 * k, ib = neox ? k + half : 2 * k + 1;
        float a = v[ia], b = v[ib];
        v[ia] = a * c - b * s;
        v[ib] = a * s + b * c;
    }
}

static bool rows_ok(const rt_tensor *t) { return t->stride[t->ndim - 1] == 4; }

static unsigned row_grid(int64_t nrows) { return (unsigned)(nrows < 65535 ? (nrows > 0 ? nrows : 1) : 65535); }

extern "C" int cuda_op_rmsnorm(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *x = a->src[0], *w = a->src[1];
    if (cuda_check_dev(a->dst, "rmsnorm") || cuda_check_dev(x, "rmsnorm") || cuda_check_dev(w, "rmsnorm"))
        return VC_ERR_INVALID;
    if (!rows_ok(a->dst) || !rows_ok(x) || !rt_tensor_is_contiguous(w))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda rmsnorm: rows must be contiguous");
    int64_t nrows = rt_tensor_nrows(x);
    if (nrows == 0) return VC_OK;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    cuda_launch(k_rmsnorm, row_grid(nrows), ROW_THREADS, 0, c->stream, 
        cuda_view_of(x), cuda_view_of(a->dst), (const float *)w->data, x->shape[x->ndim - 1], nrows,
        a->p.rmsnorm.eps, a->p.rmsnorm.w_offset);
    CU_LAUNCHED();
    return VC_OK;
}

extern "C" int cuda_op_softmax(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *x = a->src[0];
    if (cuda_check_dev(a->dst, "softmax") || cuda_check_dev(x, "softmax")) return VC_ERR_INVALID;
    if (!rows_ok(a->dst) || !rows_ok(x))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda softmax: rows must be contiguous");
    int64_t nrows = rt_tensor_nrows(x);
    if (nrows == 0) return VC_OK;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    cuda_launch(k_softmax, row_grid(nrows), ROW_THREADS, 0, c->stream, cuda_view_of(x), cuda_view_of(a->dst),
                                                              x->shape[x->ndim - 1], nrows);
    CU_LAUNCHED();
    return VC_OK;
}

extern "C" int cuda_op_argmax(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *x = a->src[0];
    if (cuda_check_dev(a->dst, "argmax") || cuda_check_dev(x, "argmax")) return VC_ERR_INVALID;
    if (!rows_ok(x) || !rt_tensor_is_contiguous(a->dst))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda argmax: rows must be contiguous");
    int64_t nrows = rt_tensor_nrows(x);
    if (nrows == 0) return VC_OK;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    cuda_launch(k_argmax, row_grid(nrows), ROW_THREADS, 0, c->stream, cuda_view_of(x), (int32_t *)a->dst->data,
                                                             x->shape[x->ndim - 1], nrows);
    CU_LAUNCHED();
    return VC_OK;
}

extern "C" int cuda_op_rope(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    rt_tensor *x = a->dst;
    const rt_tensor *pos = a->src[0], *inv = a->src[1];
    if (cuda_check_dev(x, "rope") || cuda_check_dev(pos, "rope") || cuda_check_dev(inv, "rope"))
        return VC_ERR_INVALID;
    if (x->stride[2] != 4 || !rt_tensor_is_contiguous(pos) || !rt_tensor_is_contiguous(inv))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda rope: head rows must be contiguous");
    int half = a->p.rope.rot_dim / 2;
    int64_t total = x->shape[0] * x->shape[1] * half;
    if (total == 0) return VC_OK;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    cuda_launch(k_rope, cuda_blocks(total, 256), 256, 0, c->stream, cuda_view_of(x), (const int32_t *)pos->data,
                                                           (const float *)inv->data, x->shape[0],
                                                           x->shape[1], half, a->p.rope.neox,
                                                           a->p.rope.attn_factor);
    CU_LAUNCHED();
    return VC_OK;
}
