/* cuda_rows — RMSNORM, SOFTMAX and ARGMAX (one thread block per row of the
 * last dimension) and ROPE (one thread per rotated pair).
 *
 * Semantics follow the CPU kernels (backends/cpu/cpu_norm.c, cpu_rope.c,
 * cpu_elementwise.c): RMSNORM y = x * rsqrt(mean(x^2) + eps) * (w_off + w)
 * into an f32 or bf16 y (kernels in cuda_norm.cuh, shared with
 * cuda_fused.cu's ADD_RMSNORM); SOFTMAX of an all -inf row is uniform;
 * ARGMAX skips NaN and the lowest
 * index wins ties (0 for a row of NaN); ROPE uses theta = pos * inv_freq in
 * f32 and cos/sin scaled by attn_factor. Sums run in f32 over a fixed tree,
 * so they differ from the CPU's sequential (double) sums only by rounding.
 */
#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_norm.cuh"

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
    if ((a->dst->dtype != RT_F32 && a->dst->dtype != RT_BF16) || (x->dtype != RT_F32 && x->dtype != RT_BF16))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda rmsnorm: x and dst must be f32 or bf16");
    if (a->dst->stride[a->dst->ndim - 1] != (a->dst->dtype == RT_F32 ? 4 : 2) ||
        (x->dtype == RT_BF16 ? x->stride[x->ndim - 1] != 2 : !rows_ok(x)) ||
        !rt_tensor_is_contiguous(w))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda rmsnorm: rows must be contiguous");
    if (rt_tensor_nrows(x) == 0) return VC_OK;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    return cuda_norm_launch<false>(c, x, NULL, a->dst, w, a->p.rmsnorm.eps, a->p.rmsnorm.w_offset);
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

/* Split argmax for long rows (the LM head's 152k logits): a grid of
 * (splits, rows) blocks each scans a chunk and folds its best (value desc,
 * index asc) into keys[r] with one 64-bit atomicMax; the key orders by the
 * value's bits made monotonic, then by the complement of the index. A row
 * with no candidate (all NaN) keeps key 0 -> index 0, as k_argmax. One
 * block per row left ~1 SM busy: 0.15 ms for one row of 152k. */
__device__ static inline unsigned long long argmax_key(float v, int64_t i) {
    uint32_t u = __float_as_uint(v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (unsigned long long)(0xFFFFFFFFu - (uint32_t)i);
}

__global__ void k_argmax_split(cuda_view x, unsigned long long *keys, int64_t n, int64_t chunk) {
    CUDA_PDL_ENTER();
    __shared__ unsigned long long sh[32];
    int64_t r = blockIdx.y, lo = (int64_t)blockIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
    const float *xr = (const float *)cuda_row(x, r);
    unsigned long long best = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float v = xr[i];
        if (isnan(v)) continue;
        unsigned long long k = argmax_key(v, i);
        best = k > best ? k : best;
    }
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long w = __shfl_xor_sync(0xffffffffu, best, o);
        best = w > best ? w : best;
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    if (lane == 0) sh[warp] = best;
    __syncthreads();
    if (warp == 0) {
        best = lane < nw ? sh[lane] : 0;
        for (int o = 16; o > 0; o >>= 1) {
            unsigned long long w = __shfl_xor_sync(0xffffffffu, best, o);
            best = w > best ? w : best;
        }
        if (lane == 0 && best) atomicMax(&keys[r], best);
    }
}

__global__ void k_argmax_finish(const unsigned long long *keys, int32_t *out, int64_t nrows) {
    CUDA_PDL_ENTER();
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < nrows) out[r] = keys[r] ? (int32_t)(0xFFFFFFFFu - (uint32_t)(keys[r] & 0xFFFFFFFFull)) : 0;
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
    int64_t n = x->shape[x->ndim - 1];
    /* Enough blocks to fill the GPU: ~4 per SM in all, chunks of >= 4096. */
    int64_t want = (4 * (int64_t)c->n_sm + nrows - 1) / nrows, chunk = (n + want - 1) / want;
    if (chunk < 4096) chunk = 4096;
    int64_t splits = (n + chunk - 1) / chunk;
    unsigned long long *keys = NULL;
    if (splits > 1 && nrows <= 65535 && n < 0xFFFFFFFFll && !c->capturing)
        keys = (unsigned long long *)cuda_tmp_alloc(c, (size_t)nrows * sizeof *keys);
    if (!keys) { /* short rows, or while recording a graph: one block per row */
        vc_err_clear();
        cuda_launch(k_argmax, row_grid(nrows), ROW_THREADS, 0, c->stream, cuda_view_of(x), (int32_t *)a->dst->data,
                    n, nrows);
        CU_LAUNCHED();
        return VC_OK;
    }
    CU_TRY(cudaMemsetAsync(keys, 0, (size_t)nrows * sizeof *keys, c->stream));
    cuda_launch(k_argmax_split, dim3((unsigned)splits, (unsigned)nrows), ROW_THREADS, 0, c->stream, cuda_view_of(x),
                keys, n, chunk);
    CU_LAUNCHED();
    cuda_launch(k_argmax_finish, cuda_blocks(nrows, 256), 256, 0, c->stream, (const unsigned long long *)keys,
                (int32_t *)a->dst->data, nrows);
    CU_LAUNCHED();
    cuda_tmp_free(c, keys);
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
