/* cuda_fused — ADD_RMSNORM and QK_ROPE_STORE: one kernel each where the
 * unfused sequence takes two (add, rmsnorm) or up to six (q-norm, k-norm,
 * rope q, rope k, store k, store v). At batch 1 every kernel of a decode
 * layer costs a few microseconds of latency whatever its size, so fewer
 * kernels is the gain.
 *
 * Arithmetic as cuda_rows.cu (RMSNORM: f32 tree sum, s = 1/sqrtf(ss/d+eps);
 * ROPE: theta = pos * inv_freq in f32) and cuda_attention.cu's KV_STORE
 * (round to nearest into f16/bf16). ADD_RMSNORM shares RMSNORM's kernels
 * (cuda_norm.cuh; f32 or bf16 dst; f32 or bf16 addend). QK_ROPE_STORE reads f32 or bf16 q/k/v
 * (A: prefill's bf16 QKV GEMM output) and writes q in the same type, the
 * math in f32 either way. It has a vector kernel (one
 * warp per head row, cos/sin once per token and block) for more than
 * RS_SCALAR_MAX_N tokens with aligned rows and head_dim % 4 == 0, and a
 * scalar one (a block per head row) for decode and the rest.
 */
#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_norm.cuh"
#include "backends/cuda/cuda_store.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#define RS_WARPS 8 /* max warps per QK_ROPE_STORE block (vector kernel) */

/* ADD_RMSNORM: x += res; dst = rmsnorm(x). res is f32, or bf16 (the bf16
 * sum of a tensor-parallel all-reduce, arch_llama.c), which dst may
 * overwrite when dst is bf16 too. */
extern "C" int cuda_op_add_rmsnorm(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *x = a->src[0], *res = a->src[1], *w = a->src[2];
    if (cuda_check_dev(a->dst, "add_rmsnorm") || cuda_check_dev(x, "add_rmsnorm") ||
        cuda_check_dev(res, "add_rmsnorm") || cuda_check_dev(w, "add_rmsnorm"))
        return VC_ERR_INVALID;
    if (a->dst->dtype != RT_F32 && a->dst->dtype != RT_BF16)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda add_rmsnorm: dst must be f32 or bf16");
    int last = x->ndim - 1;
    bool res16 = res->dtype == RT_BF16;
    if (a->dst->stride[a->dst->ndim - 1] != (a->dst->dtype == RT_F32 ? 4 : 2) || x->stride[last] != 4 ||
        res->stride[res->ndim - 1] != (res16 ? 2 : 4) || !rt_tensor_is_contiguous(w))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda add_rmsnorm: rows must be contiguous");
    if (res16 && a->dst->data == res->data && a->dst->dtype != RT_BF16)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda add_rmsnorm: dst may alias a bf16 addend only as bf16");
    if (rt_tensor_nrows(x) == 0) return VC_OK;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    return cuda_norm_launch<true>(c, x, res, a->dst, w, a->p.rmsnorm.eps, a->p.rmsnorm.w_offset);
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
    int pre; /* decode kernel: slot, position, angles and norm weights read before the PDL wait */
} rs_args;

/* One activation element / four of them (A: f32 or bf16) as f32. */
__device__ __forceinline__ float rs_ld1(const float *p) { return *p; }
__device__ __forceinline__ float rs_ld1(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float4 rs_ld4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 rs_ld4(const __nv_bfloat16 *p) {
    uint2 u = *(const uint2 *)p;
    float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x), b = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}

/* Block (head slot j, token t), one thread per element of a head row:
 * j < h: q head j -> norm -> rope -> dst; j < h + kvh: k head -> norm ->
 * rope -> k cache; else v head -> v cache. */
template <typename KV, typename A>
__global__ void k_qk_rope_store(rs_args p) {
    if (!p.pre) CUDA_PDL_ENTER();
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
    const float *nw = kind == 0 ? p.qn : p.kn;
    const int half = p.rot_dim / 2;
    float wn = 0.0f, rc = 0.0f, rsn = 0.0f; /* norm weight, rotation cos / sin of element i */
    if (p.pre) { /* before the wait: inputs that no kernel of the step writes */
        if (kind < 2 && nw && in) wn = p.w_off + nw[i];
        if (kind < 2 && in && i < p.rot_dim) {
            int k = p.neox ? (int)(i < half ? i : i - half) : (int)(i / 2);
            float theta = (float)p.pos[t] * p.inv_freq[k];
            rc = cosf(theta) * p.af, rsn = sinf(theta) * p.af;
        }
        CUDA_PDL_ENTER();
    }
    const char *src = kind == 0 ? p.q + t * p.q_s0 + head * p.q_s1
                    : kind == 1 ? p.k + t * p.k_s0 + head * p.k_s1
                                : p.v + t * p.v_s0 + head * p.v_s1;
    float x = in ? rs_ld1((const A *)src + i) : 0.0f;
    int64_t coff = ((int64_t)slot * p.kvh + head) * p.hd + i;
    if (kind == 2) {
        if (in) cuda_st1((KV *)p.vc + coff, x);
        return;
    }
    if (nw) { /* uniform per block */
        float ss = norm_block_sum(x * x, sh);
        float s = 1.0f / sqrtf(ss / (float)p.hd + p.eps);
        if (in) x = x * s * (p.pre ? wn : p.w_off + nw[i]);
    }
    if (in) row[i] = x;
    __syncthreads();
    float y = x;
    if (in && i < p.rot_dim) {
        int k = p.neox ? (int)(i < half ? i : i - half) : (int)(i / 2);
        bool first = p.neox ? i < half : (i & 1) == 0;
        int ia = p.neox ? k : 2 * k, ib = p.neox ? k + half : 2 * k + 1;
        float c = rc, s = rsn;
        if (!p.pre) {
            float theta = (float)p.pos[t] * p.inv_freq[k];
            c = cosf(theta) * p.af, s = sinf(theta) * p.af;
        }
        float a = row[ia], b = row[ib];
        y = first ? a * c - b * s : a * s + b * c;
    }
    if (!in) return;
    if (kind == 0) cuda_st1((A *)(p.dst + t * p.d_s0 + head * p.d_s1) + i, y);
    else cuda_st1((KV *)p.kc + coff, y);
}

/* Head row j of token t (j < h: q, then k, then v). */
template <typename A> __device__ __forceinline__ const A *rs_src(const rs_args &p, int64_t t, int j) {
    if (j < p.h) return (const A *)(p.q + t * p.q_s0 + j * p.q_s1);
    if (j < p.h + p.kvh) return (const A *)(p.k + t * p.k_s0 + (j - p.h) * p.k_s1);
    return (const A *)(p.v + t * p.v_s0 + (j - p.h - p.kvh) * p.v_s1);
}

#include "backends/cuda/cuda_rope_pf.cuh" /* the prefill kernel (hd 128), VLLM_CUDA_RS_PF */

/* Lane l holds elements 4 (c * 32 + l) .. +3 of a head row (CH * 128 >= hd). */
template <typename A, int CH>
__device__ __forceinline__ void rs_load(const rs_args &p, int64_t t, int j, int hd, int lane, float4 *v) {
    const A *src = rs_src<A>(p, t, j);
#pragma unroll
    for (int c = 0; c < CH; c++) {
        int e = (c * 32 + lane) * 4;
        v[c] = e < hd ? rs_ld4(src + e) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

/* Up to this many tokens QK_ROPE_STORE takes the scalar kernel: at batch 1
 * (Llama-3-8B heads, ncu on the H200) it ran in 3.3-3.6 us, the vector
 * kernel in 3.7-4.0 us (its per-block cos/sin table and barrier cost more
 * than 48 small blocks do); at 2048 tokens the vector kernel is 4x faster. */
#define RS_SCALAR_MAX_N 8

/* Shared memory of the vector kernel (floats, float4-aligned parts): cos and
 * sin of the token's angles [rot_dim/2 each, padded to 4], w_off + QK-norm
 * weights of q and k [hd each], one row buffer per warp [hd]. */
struct rs_smem_t {
    float *cs, *sn, *qw, *kw, *buf;
};

/* One head row j of token t (in registers, `v`) through QK-norm and RoPE
 * into dst / the caches. */
template <typename KV, typename A, int CH>
__device__ __forceinline__ void rs_row(const rs_args &p, int64_t t, int j, int32_t slot, bool store, float4 *v,
                                       const rs_smem_t &sm, int lane) {
    const int hd = (int)p.hd, half = p.rot_dim / 2;
    const int kind = j < p.h ? 0 : j < p.h + p.kvh ? 1 : 2;
    const int head = kind == 0 ? j : kind == 1 ? j - (int)p.h : j - (int)(p.h + p.kvh);
    const int64_t coff = ((int64_t)slot * p.kvh + head) * hd;
    if (kind == 2) {
        if (store)
#pragma unroll
            for (int c = 0; c < CH; c++) {
                int e = (c * 32 + lane) * 4;
                if (e < hd) cuda_st4((KV *)p.vc + coff + e, v[c]);
            }
        return;
    }
    if (kind == 0 ? p.qn != NULL : p.kn != NULL) { /* warp-uniform */
        const float4 *wv = (const float4 *)(kind == 0 ? sm.qw : sm.kw);
        float ss = 0.0f;
#pragma unroll
        for (int c = 0; c < CH; c++) ss += v[c].x * v[c].x + v[c].y * v[c].y + v[c].z * v[c].z + v[c].w * v[c].w;
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        float s = 1.0f / sqrtf(ss / (float)hd + p.eps);
#pragma unroll
        for (int c = 0; c < CH; c++) {
            float4 w = (c * 32 + lane) * 4 < hd ? wv[c * 32 + lane] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            v[c] = make_float4(v[c].x * s * w.x, v[c].y * s * w.y, v[c].z * s * w.z, v[c].w * s * w.w);
        }
    }
#pragma unroll
    for (int c = 0; c < CH; c++) {
        int e = (c * 32 + lane) * 4;
        if (e < hd) *(float4 *)(sm.buf + e) = v[c];
    }
    __syncwarp();
#pragma unroll
    for (int c = 0; c < CH; c++) {
        int e = (c * 32 + lane) * 4;
        float o[4] = {v[c].x, v[c].y, v[c].z, v[c].w};
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int i = e + u;
            if (i >= p.rot_dim) continue;
            bool first = p.neox ? i < half : (i & 1) == 0;
            int k = p.neox ? (first ? i : i - half) : i >> 1;
            int partner = p.neox ? (first ? i + half : i - half) : i ^ 1;
            float xp = sm.buf[partner];
            o[u] = first ? o[u] * sm.cs[k] - xp * sm.sn[k] : xp * sm.sn[k] + o[u] * sm.cs[k];
        }
        v[c] = make_float4(o[0], o[1], o[2], o[3]);
    }
    __syncwarp(); /* buf is rewritten by the next row */
#pragma unroll
    for (int c = 0; c < CH; c++) {
        int e = (c * 32 + lane) * 4;
        if (e >= hd) continue;
        if (kind == 0) cuda_st4((A *)(p.dst + t * p.d_s0 + head * p.d_s1) + e, v[c]);
        else if (store) cuda_st4((KV *)p.kc + coff + e, v[c]);
    }
}

/* The vector kernel (hd % 4 == 0, 16-byte aligned rows): block (x, t) of
 * nw warps handles head rows j = x * nw + warp, stepping by gridDim.x * nw,
 * of token t, one warp per row, rows in registers, the next row loaded while
 * this one is worked on (loading two ahead measured no faster). cos/sin of the token's rot_dim/2 angles are
 * computed once per block into shared memory, not once per element and
 * head; QK-norm is a warp reduction; the rotation's partner elements come
 * through the warp's row buffer. Arithmetic as k_qk_rope_store. Every load
 * the block depends on (slot, position, inverse frequencies, first row) is
 * issued up front. Many tokens: gridDim.x = 1 (a block per token); fewer:
 * a token's rows spread over more blocks. The register cap (40 at hd <= 128:
 * 6 blocks of 8 warps per SM, no spills) keeps enough rows in flight. */
template <typename KV, typename A, int CH>
__global__ void __launch_bounds__(RS_WARPS * 32, CH == 1 ? 6 : CH == 2 ? 4 : 1) k_qk_rope_store_vec(rs_args p) {
    CUDA_PDL_ENTER();
    extern __shared__ float4 rs_smem4[];
    const int half = p.rot_dim / 2, tab = (2 * half + 3) / 4 * 4, hd = (int)p.hd;
    const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t t = blockIdx.y;
    const int rows = (int)(p.h + 2 * p.kvh), step = gridDim.x * nw;
    rs_smem_t sm;
    sm.cs = (float *)rs_smem4;
    sm.sn = sm.cs + half;
    sm.qw = sm.cs + tab;
    sm.kw = sm.qw + hd;
    sm.buf = sm.kw + hd + warp * hd;
    int j = blockIdx.x * nw + warp;
    const int32_t slot = p.slots[t];
    const float pf = (float)p.pos[t];
    const float f0 = (int)threadIdx.x < half ? p.inv_freq[threadIdx.x] : 0.0f;
    float4 cur[CH];
    if (j < rows) rs_load<A, CH>(p, t, j, hd, lane, cur);
    for (int k = threadIdx.x; k < half; k += blockDim.x) {
        float sv, cv;
        sincosf(pf * (k == (int)threadIdx.x ? f0 : p.inv_freq[k]), &sv, &cv);
        sm.cs[k] = cv * p.af;
        sm.sn[k] = sv * p.af;
    }
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        if (p.qn) sm.qw[i] = p.w_off + p.qn[i];
        if (p.kn) sm.kw[i] = p.w_off + p.kn[i];
    }
    __syncthreads();
    const bool store = slot >= 0 && slot < p.n_slots; /* < 0: padding row, nothing stored */
    for (; j < rows; j += step) {
        float4 nxt[CH];
        if (j + step < rows) rs_load<A, CH>(p, t, j + step, hd, lane, nxt);
        rs_row<KV, A, CH>(p, t, j, slot, store, cur, sm, lane);
#pragma unroll
        for (int c = 0; c < CH; c++) cur[c] = nxt[c];
    }
    if (slot >= p.n_slots && blockIdx.x == 0 && threadIdx.x == 0) atomicOr(p.flags, CUDA_FLAG_BAD_SLOT);
}

template <typename KV, typename A>
static void rs_launch_vec(cuda_ctx *c, const rs_args &p, int64_t n) {
    /* Few tokens: 4-warp blocks, enough of them to cover every head row of a
     * token with one warp; many: one 8-warp block per token. */
    int64_t rows = p.h + 2 * p.kvh, nw = n < (int64_t)c->n_sm ? 4 : RS_WARPS, max_gx = (rows + nw - 1) / nw;
    int64_t gx = (2 * (int64_t)c->n_sm + n - 1) / n;
    if (gx > max_gx) gx = max_gx;
    int half = p.rot_dim / 2, tab = (2 * half + 3) / 4 * 4;
    size_t smem = (size_t)(tab + (2 + nw) * p.hd) * sizeof(float);
    dim3 grid((unsigned)gx, (unsigned)n);
    unsigned threads = (unsigned)(nw * 32);
    int ch = (int)((p.hd + 127) / 128);
    if (ch <= 1) cuda_launch(k_qk_rope_store_vec<KV, A, 1>, grid, threads, smem, c->stream, p);
    else if (ch <= 2) cuda_launch(k_qk_rope_store_vec<KV, A, 2>, grid, threads, smem, c->stream, p);
    else if (ch <= 4) cuda_launch(k_qk_rope_store_vec<KV, A, 4>, grid, threads, smem, c->stream, p);
    else cuda_launch(k_qk_rope_store_vec<KV, A, 8>, grid, threads, smem, c->stream, p);
}

/* The vector kernel, or (decode, odd head_dim or unaligned views) the
 * scalar one with a block per (head row, token); A: the activation type. */
template <typename A> static void rs_launch(cuda_ctx *c, const rs_args &p, int64_t n, bool vec, rt_dtype kvt) {
    if (vec) {
        if (kvt == RT_BF16) rs_launch_vec<__nv_bfloat16, A>(c, p, n);
        else if (kvt == RT_F16) rs_launch_vec<__half, A>(c, p, n);
        else rs_launch_vec<float, A>(c, p, n);
        return;
    }
    dim3 grid((unsigned)(p.h + 2 * p.kvh), (unsigned)n);
    unsigned threads = (unsigned)((p.hd + 31) / 32 * 32);
    if (kvt == RT_BF16) cuda_launch(k_qk_rope_store<__nv_bfloat16, A>, grid, threads, 0, c->stream, p);
    else if (kvt == RT_F16) cuda_launch(k_qk_rope_store<__half, A>, grid, threads, 0, c->stream, p);
    else cuda_launch(k_qk_rope_store<float, A>, grid, threads, 0, c->stream, p);
}

/* Every head row of t starts on a 16-byte boundary. */
static bool rs_aligned(const rt_tensor *t) {
    if (!t) return true;
    if ((uintptr_t)t->data % 16) return false;
    for (int i = 0; i < t->ndim - 1; i++)
        if (t->shape[i] > 1 && t->stride[i] % 16) return false;
    return true;
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
    const rt_dtype at = q->dtype; /* f32 or bf16, one for q, k, v and dst (ops.c) */
    const int64_t es = at == RT_BF16 ? 2 : 4;
    if ((at != RT_F32 && at != RT_BF16) || k->dtype != at || v->dtype != at || a->dst->dtype != at)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda qk_rope_store: q/k/v/dst must be all f32 or all bf16");
    if (q->stride[2] != es || k->stride[2] != es || v->stride[2] != es || a->dst->stride[2] != es ||
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
    p.pre = cuda_row_pre();
    bool vec = n > RS_SCALAR_MAX_N && hd % 4 == 0 && rs_aligned(q) && rs_aligned(k) && rs_aligned(v) && rs_aligned(a->dst) &&
               (uintptr_t)kc->data % 16 == 0 && (uintptr_t)vc->data % 16 == 0 && rs_aligned(qn) && rs_aligned(kn);
    if (const int pf = rs_pf_use(p, n, vec)) { /* cuda_rope_pf.cuh */
        if (at == RT_BF16) rs_launch_pf<__nv_bfloat16>(c, p, n, kc->dtype, pf);
        else rs_launch_pf<float>(c, p, n, kc->dtype, pf);
    } else if (at == RT_BF16) {
        rs_launch<__nv_bfloat16>(c, p, n, vec, kc->dtype);
    } else {
        rs_launch<float>(c, p, n, vec, kc->dtype);
    }
    CU_LAUNCHED();
    return VC_OK;
}
