/* cuda_fused — ADD_RMSNORM and QK_ROPE_STORE: one kernel each where the
 * unfused sequence takes two (add, rmsnorm) or up to six (q-norm, k-norm,
 * rope q, rope k, store k, store v). At batch 1 every kernel of a decode
 * layer costs a few microseconds of latency whatever its size, so fewer
 * kernels is the gain.
 *
 * Arithmetic as cuda_rows.cu (RMSNORM: f32 tree sum, s = 1/sqrtf(ss/d+eps);
 * ROPE: theta = pos * inv_freq in f32) and cuda_attention.cu's KV_STORE
 * (round to nearest into f16/bf16).
 */
#include "backends/cuda/cuda_internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#define AN_THREADS 256

__device__ static float fused_block_sum(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* One block per row: x += res (kept in x), y = rmsnorm(x). y may be res:
 * each thread reads res[i] before it writes y[i], for the same i only. */
__global__ void k_add_rmsnorm(cuda_view x, cuda_view res, cuda_view y, const float *w, int64_t d, int64_t nrows,
                              float eps, float w_off) {
    CUDA_PDL_ENTER();
    __shared__ float sh[32];
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        float *xr = (float *)cuda_row(x, r);
        const float *rr = (const float *)cuda_row(res, r);
        float *yr = (float *)cuda_row(y, r);
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
            float v = xr[i] + rr[i];
            xr[i] = v;
            ss += v * v;
        }
        ss = fused_block_sum(ss, sh);
        float s = 1.0f / sqrtf(ss / (float)d + eps);
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = xr[i] * s * (w_off + w[i]);
    }
}

extern "C" int cuda_op_add_rmsnorm(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *x = a->src[0], *res = a->src[1], *w = a->src[2];
    if (cuda_check_dev(a->dst, "add_rmsnorm") || cuda_check_dev(x, "add_rmsnorm") ||
        cuda_check_dev(res, "add_rmsnorm") || cuda_check_dev(w, "add_rmsnorm"))
        return VC_ERR_INVALID;
    int last = x->ndim - 1;
    if (a->dst->stride[last] != 4 || x->stride[last] != 4 || res->stride[last] != 4 || !rt_tensor_is_contiguous(w))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda add_rmsnorm: rows must be contiguous");
    int64_t nrows = rt_tensor_nrows(x);
    if (nrows == 0) return VC_OK;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    unsigned grid = (unsigned)(nrows < 65535 ? nrows : 65535);
    cuda_launch(k_add_rmsnorm, grid, AN_THREADS, 0, c->stream, cuda_view_of(x), cuda_view_of(res),
                cuda_view_of(a->dst), (const float *)w->data, x->shape[last], nrows, a->p.rmsnorm.eps,
                a->p.rmsnorm.w_offset);
    CU_LAUNCHED();
    return VC_OK;
}

template <typename KV> __device__ __forceinline__ void st_kv(KV *p, float v);
template <> __device__ __forceinline__ void st_kv<float>(float *p, float v) { *p = v; }
template <> __device__ __forceinline__ void st_kv<__half>(__half *p, float v) { *p = __float2half_rn(v); }
template <> __device__ __forceinline__ void st_kv<__nv_bfloat16>(__nv_bfloat16 *p, float v) {
    *p = __float2bfloat16_rn(v);
}

/* Pointers and strides of one QK_ROPE_STORE launch (by value). */
typedef struct {
    const char *q, *k, *v;
    char *dst;
    int64_t q_s0, q_s1, k_s0, k_s1, v_s0, v_s1, d_s0, d_s1; /* bytes */
    const float *qn, *kn;                                    /* NULL: no QK-norm */
    const int32_t *pos, *slots;
    const float *inv_freq;
    void *kc, *vc;
    int64_t h, kvh, hd, n_slots;
    int rot_dim, neox;
    float eps, w_off, af;
    int *flags;
} rs_args;

/* Block (head slot j, token t), one thread per element of a head row:
 * j < h: q head j -> norm -> rope -> dst; j < h + kvh: k head -> norm ->
 * rope -> k cache; else v head -> v cache. */
template <typename KV>
__global__ void k_qk_rope_store(rs_args p) {
    CUDA_PDL_ENTER();
    __shared__ float row[1024];
    __shared__ float sh[32];
    const int64_t t = blockIdx.y, j = blockIdx.x, i = threadIdx.x;
    const bool in = i < p.hd;
    int kind = j < p.h ? 0 : j < p.h + p.kvh ? 1 : 2;
    int64_t head = kind == 0 ? j : kind == 1 ? j - p.h : j - p.h - p.kvh;
    int32_t slot = p.slots[t];
    if (kind > 0 && slot >= p.n_slots) {
        if (i == 0) atomicOr(p.flags, CUDA_FLAG_BAD_SLOT);
        return;
    }
    if (kind > 0 && slot < 0) return; /* padding row: nothing stored (uniform per block) */
    const char *src = kind == 0 ? p.q + t * p.q_s0 + head * p.q_s1
                    : kind == 1 ? p.k + t * p.k_s0 + head * p.k_s1
                                : p.v + t * p.v_s0 + head * p.v_s1;
    float x = in ? ((const float *)src)[i] : 0.0f;
    int64_t coff = ((int64_t)slot * p.kvh + head) * p.hd + i;
    if (kind == 2) {
        if (in) st_kv<KV>((KV *)p.vc + coff, x);
        return;
    }
    const float *nw = kind == 0 ? p.qn : p.kn;
    if (nw) { /* uniform per block */
        float ss = fused_block_sum(x * x, sh);
        float s = 1.0f / sqrtf(ss / (float)p.hd + p.eps);
        if (in) x = x * s * (p.w_off + nw[i]);
    }
    if (in) row[i] = x;
    __syncthreads();
    float y = x;
    int half = p.rot_dim / 2;
    if (in && i < p.rot_dim) {
        int k = p.neox ? (int)(i < half ? i : i - half) : (int)(i / 2);
        bool first = p.neox ? i < half : (i & 1) == 0;
        int ia = p.neox ? k : 2 * k, ib = p.neox ? k + half : 2 * k + 1;
        float theta = (float)p.pos[t] * p.inv_freq[k];
        float c = cosf(theta) * p.af, s = sinf(theta) * p.af;
        float a = row[ia], b = row[ib];
        y = first ? a * c - b * s : a * s + b * c;
    }
    if (!in) return;
    if (kind == 0) ((float *)(p.dst + t * p.d_s0 + head * p.d_s1))[i] = y;
    else st_kv<KV>((KV *)p.kc + coff, y);
}

extern "C" int cuda_op_qk_rope_store(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *q = a->src[0], *k = a->src[1], *v = a->src[2], *pos = a->src[3], *inv = a->src[4],
                    *slots = a->src[5];
    rt_tensor *kc = a->p.rope_store.k_cache, *vc = a->p.rope_store.v_cache;
    const rt_tensor *qn = a->p.rope_store.q_norm, *kn = a->p.rope_store.k_norm;
    const char *nm = "qk_rope_store";
    if (cuda_check_dev(a->dst, nm) || cuda_check_dev(q, nm) || cuda_check_dev(k, nm) || cuda_check_dev(v, nm) ||
        cuda_check_dev(pos, nm) || cuda_check_dev(inv, nm) || cuda_check_dev(slots, nm) || cuda_check_dev(kc, nm) ||
        cuda_check_dev(vc, nm) || (qn && cuda_check_dev(qn, nm)) || (kn && cuda_check_dev(kn, nm)))
        return VC_ERR_INVALID;
    if (kc->dtype != vc->dtype) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda qk_rope_store: K and V caches differ in dtype");
    if (q->stride[2] != 4 || k->stride[2] != 4 || v->stride[2] != 4 || a->dst->stride[2] != 4 ||
        !rt_tensor_is_contiguous(pos) || !rt_tensor_is_contiguous(inv) || !rt_tensor_is_contiguous(slots) ||
        (qn && !rt_tensor_is_contiguous(qn)) || (kn && !rt_tensor_is_contiguous(kn)))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda qk_rope_store: head rows must be contiguous");
    int64_t n = q->shape[0], h = q->shape[1], kvh = k->shape[1], hd = q->shape[2];
    if (hd > 1024) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda qk_rope_store: head_dim %lld > 1024", (long long)hd);
    if (n == 0) return VC_OK;
    if (n > 65535) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda qk_rope_store: more than 65535 tokens");
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    rs_args p;
    memset(&p, 0, sizeof p);
    p.q = (const char *)q->data;
    p.k = (const char *)k->data;
    p.v = (const char *)v->data;
    p.dst = (char *)a->dst->data;
    p.q_s0 = q->stride[0];
    p.q_s1 = q->stride[1];
    p.k_s0 = k->stride[0];
    p.k_s1 = k->stride[1];
    p.v_s0 = v->stride[0];
    p.v_s1 = v->stride[1];
    p.d_s0 = a->dst->stride[0];
    p.d_s1 = a->dst->stride[1];
    p.qn = qn ? (const float *)qn->data : NULL;
    p.kn = kn ? (const float *)kn->data : NULL;
    p.pos = (const int32_t *)pos->data;
    p.slots = (const int32_t *)slots->data;
    p.inv_freq = (const float *)inv->data;
    p.kc = kc->data;
    p.vc = vc->data;
    p.h = h;
    p.kvh = kvh;
    p.hd = hd;
    p.n_slots = rt_tensor_nelem(kc) / (kvh * hd);
    p.rot_dim = a->p.rope_store.rot_dim;
    p.neox = a->p.rope_store.neox;
    p.eps = a->p.rope_store.eps;
    p.w_off = a->p.rope_store.w_offset;
    p.af = a->p.rope_store.attn_factor;
    p.flags = c->d_flags;
    dim3 grid((unsigned)(h + 2 * kvh), (unsigned)n);
    unsigned threads = (unsigned)((hd + 31) / 32 * 32);
    if (kc->dtype == RT_BF16) cuda_launch(k_qk_rope_store<__nv_bfloat16>, grid, threads, 0, c->stream, p);
    else if (kc->dtype == RT_F16) cuda_launch(k_qk_rope_store<__half>, grid, threads, 0, c->stream, p);
    else cuda_launch(k_qk_rope_store<float>, grid, threads, 0, c->stream, p);
    CU_LAUNCHED();
    return VC_OK;
}
