/* cuda_elementwise — GLU, ADD, SCALE (one thread per element; 2-D views
 * with contiguous rows by rows, as the halves of a fused gate|up output), COPY and
 * EMBED (dtype conversion and dequantization through cuda_dequant.cuh).
 *
 * Views: every tensor is addressed as rows of its own outer dims (cuda_row),
 * so strided views (slices of a cache, head views) need no copies. Element i
 * of a same-shape op is (row i / len, column i % len) in each tensor.
 */
#include "backends/cuda/cuda_dequant.cuh"
#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_store.cuh"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define EW_THREADS 256

enum { EW_GLU_SILU, EW_GLU_GELU, EW_ADD, EW_SCALE };

template <int K>
__global__ void k_ew(cuda_view y, cuda_view a, cuda_view b, int64_t len, int64_t total, float s, int flat) {
    CUDA_PDL_ENTER();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        float *py;
        const float *pa, *pb = NULL;
        if (flat) {
            py = (float *)y.data + i;
            pa = (const float *)a.data + i;
            if (K != EW_SCALE) pb = (const float *)b.data + i;
        } else {
            int64_t r = i / len, j = i % len;
            py = (float *)(cuda_row(y, r) + j * y.stride[y.ndim - 1]);
            pa = (const float *)(cuda_row(a, r) + j * a.stride[a.ndim - 1]);
            if (K != EW_SCALE) pb = (const float *)(cuda_row(b, r) + j * b.stride[b.ndim - 1]);
        }
        float v;
        if (K == EW_GLU_SILU) v = cuda_silu(*pa) * *pb;
        else if (K == EW_GLU_GELU) v = cuda_gelu_tanh(*pa) * *pb;
        else if (K == EW_ADD) v = *pa + *pb;
        else v = *pa * s;
        *py = v;
    }
}

/* 2-D views with contiguous rows (e.g. the gate and up halves of one fused
 * gate|up matmul output): row r, column j at data + r * s0 + j * 4, with no
 * 64-bit divisions per element. blockIdx.y walks rows. */
template <int K>
__global__ void k_ew_rows(char *y, int64_t ys, const char *a, int64_t as, const char *b, int64_t bs, int len,
                          int64_t nrows, float s) {
    CUDA_PDL_ENTER();
    for (int64_t r = blockIdx.y; r < nrows; r += gridDim.y) {
        float *py = (float *)(y + r * ys);
        const float *pa = (const float *)(a + r * as), *pb = K != EW_SCALE ? (const float *)(b + r * bs) : NULL;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < len; j += gridDim.x * blockDim.x) {
            float v;
            if (K == EW_GLU_SILU) v = cuda_silu(pa[j]) * pb[j];
            else if (K == EW_GLU_GELU) v = cuda_gelu_tanh(pa[j]) * pb[j];
            else if (K == EW_ADD) v = pa[j] + pb[j];
            else v = pa[j] * s;
            py[j] = v;
        }
    }
}

static bool rows2d(const rt_tensor *t) { return t->ndim == 2 && t->stride[1] == 4; }

template <int K>
static void launch_rows(cuda_ctx *c, const rt_tensor *y, const rt_tensor *a, const rt_tensor *b, float s) {
    int64_t nrows = y->shape[0], len = y->shape[1];
    unsigned gx = (unsigned)((len + EW_THREADS - 1) / EW_THREADS), gy = (unsigned)(nrows < 65535 ? nrows : 65535);
    cuda_launch(k_ew_rows<K>, dim3(gx, gy), EW_THREADS, 0, c->stream, (char *)y->data, y->stride[0],
                (const char *)a->data, a->stride[0], b ? (const char *)b->data : (const char *)NULL,
                b ? b->stride[0] : (int64_t)0, (int)len, nrows, s);
}

static int ew_run(rt_backend *be, int kind, const rt_op_args *a, const char *name) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *x = a->src[0], *y2 = kind == EW_SCALE ? NULL : a->src[1];
    if (cuda_check_dev(a->dst, name) || cuda_check_dev(x, name) || (y2 && cuda_check_dev(y2, name)))
        return VC_ERR_INVALID;
    int64_t total = rt_tensor_nelem(a->dst);
    if (total == 0) return VC_OK;
    int flat = rt_tensor_is_contiguous(a->dst) && rt_tensor_is_contiguous(x) &&
               (!y2 || rt_tensor_is_contiguous(y2));
    cuda_view vy = cuda_view_of(a->dst), va = cuda_view_of(x), vb = y2 ? cuda_view_of(y2) : va;
    int64_t len = a->dst->shape[a->dst->ndim - 1];
    float s = kind == EW_SCALE ? a->p.scale.s : 0.0f;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    if (!flat && rows2d(a->dst) && rows2d(x) && (!y2 || rows2d(y2)) && len < INT32_MAX) {
        switch (kind) {
        case EW_GLU_SILU: launch_rows<EW_GLU_SILU>(c, a->dst, x, y2, s); break;
        case EW_GLU_GELU: launch_rows<EW_GLU_GELU>(c, a->dst, x, y2, s); break;
        case EW_ADD: launch_rows<EW_ADD>(c, a->dst, x, y2, s); break;
        default: launch_rows<EW_SCALE>(c, a->dst, x, y2, s); break;
        }
        CU_LAUNCHED();
        return VC_OK;
    }
    unsigned g = cuda_blocks(total, EW_THREADS);
    switch (kind) {
    case EW_GLU_SILU: cuda_launch(k_ew<EW_GLU_SILU>, g, EW_THREADS, 0, c->stream, vy, va, vb, len, total, s, flat); break;
    case EW_GLU_GELU: cuda_launch(k_ew<EW_GLU_GELU>, g, EW_THREADS, 0, c->stream, vy, va, vb, len, total, s, flat); break;
    case EW_ADD: cuda_launch(k_ew<EW_ADD>, g, EW_THREADS, 0, c->stream, vy, va, vb, len, total, s, flat); break;
    default: cuda_launch(k_ew<EW_SCALE>, g, EW_THREADS, 0, c->stream, vy, va, vb, len, total, s, flat); break;
    }
    CU_LAUNCHED();
    return VC_OK;
}

extern "C" int cuda_op_glu(rt_backend *be, const rt_op_args *a) {
    if (a->p.glu.act != RT_ACT_SILU && a->p.glu.act != RT_ACT_GELU_TANH)
        return vc_err_set(VC_ERR_INVALID, "glu: unknown activation %d", a->p.glu.act);
    return ew_run(be, a->p.glu.act == RT_ACT_SILU ? EW_GLU_SILU : EW_GLU_GELU, a, "glu");
}
extern "C" int cuda_op_add(rt_backend *be, const rt_op_args *a) { return ew_run(be, EW_ADD, a, "add"); }
extern "C" int cuda_op_scale(rt_backend *be, const rt_op_args *a) { return ew_run(be, EW_SCALE, a, "scale"); }

/* ---- COPY ---------------------------------------------------------------- */

__device__ __forceinline__ float ld_any(rt_dtype t, const char *p) {
    switch (t) {
    case RT_F16: return ld_plain<RT_F16>(p);
    case RT_BF16: return ld_plain<RT_BF16>(p);
    default: return ld_plain<RT_F32>(p);
    }
}

__device__ __forceinline__ void st_any(rt_dtype t, char *p, float v) {
    switch (t) {
    case RT_F16: *(__half *)p = __float2half_rn(v); break;
    case RT_BF16: *(__nv_bfloat16 *)p = __float2bfloat16_rn(v); break;
    default: *(float *)p = v; break;
    }
}

/* Element-wise between plain dtypes: convert (st != dt) or move es bytes. */
__global__ void k_copy_plain(cuda_view d, cuda_view s, rt_dtype dt, rt_dtype st, int es, int64_t len,
                             int64_t total) {
    CUDA_PDL_ENTER();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / len, j = i % len;
        const char *ps = cuda_row(s, r) + j * s.stride[s.ndim - 1];
        char *pd = cuda_row(d, r) + j * d.stride[d.ndim - 1];
        if (st != dt) st_any(dt, pd, ld_any(st, ps));
        else if (es == 4) *(uint32_t *)pd = *(const uint32_t *)ps;
        else if (es == 2) *(uint16_t *)pd = *(const uint16_t *)ps;
        else *pd = *ps;
    }
}

/* Row bytes of a quantized tensor, one thread per byte (same dtype). */
__global__ void k_copy_rows(cuda_view d, cuda_view s, int64_t row_bytes, int64_t total) {
    CUDA_PDL_ENTER();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / row_bytes, j = i % row_bytes;
        cuda_row(d, r)[j] = cuda_row(s, r)[j];
    }
}

/* quantized -> f32, one thread per unit of 32 values. */
template <rt_dtype T> __global__ void k_dequant_rows(cuda_view d, cuda_view s, int64_t units_per_row, int64_t total) {
    CUDA_PDL_ENTER();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / units_per_row, u = i % units_per_row;
        float v[32];
        dq_unit<T>((const uint8_t *)cuda_row(s, r), u, v);
        float *out = (float *)cuda_row(d, r) + u * 32;
#pragma unroll
        for (int l = 0; l < 32; l++) out[l] = v[l];
    }
}

static bool is_plain_float(rt_dtype t) { return t == RT_F32 || t == RT_F16 || t == RT_BF16; }

extern "C" int cuda_op_copy(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *s = a->src[0];
    rt_tensor *d = a->dst;
    if (cuda_check_dev(d, "copy") || cuda_check_dev(s, "copy")) return VC_ERR_INVALID;
    const rt_dtype_traits *stt = rt_dtype_info(s->dtype), *dtt = rt_dtype_info(d->dtype);
    bool sq = stt->quantized, dq = dtt->quantized;
    bool ok = s->dtype == d->dtype || (is_plain_float(s->dtype) && is_plain_float(d->dtype)) ||
              (sq && d->dtype == RT_F32 && cuda_float_or_quant(s->dtype));
    if (!ok)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda copy: %s -> %s", stt->name, dtt->name);
    int64_t len = s->shape[s->ndim - 1], nrows = rt_tensor_nrows(s);
    if ((sq || dq) && len % stt->block_elems)
        return vc_err_set(VC_ERR_INVALID, "cuda copy: row of %lld not a multiple of %d", (long long)len,
                          stt->block_elems);
    if (nrows == 0 || len == 0) return VC_OK;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    if (s->dtype == d->dtype && rt_tensor_is_contiguous(s) && rt_tensor_is_contiguous(d)) {
        CU_TRY(cudaMemcpyAsync(d->data, s->data, rt_tensor_nbytes(s), cudaMemcpyDeviceToDevice, c->stream));
        return VC_OK;
    }
    cuda_view vd = cuda_view_of(d), vs = cuda_view_of(s);
    if (sq && dq) {
        int64_t rb = (int64_t)rt_dtype_row_bytes(s->dtype, len), total = rb * nrows;
        cuda_launch(k_copy_rows, cuda_blocks(total, EW_THREADS), EW_THREADS, 0, c->stream, vd, vs, rb, total);
    } else if (sq) {
        if (d->stride[d->ndim - 1] != 4)
            return vc_err_set(VC_ERR_UNSUPPORTED, "cuda copy: dequantized rows must be contiguous");
        int64_t upr = len / 32, total = upr * nrows;
        unsigned g = cuda_blocks(total, 128);
        switch (s->dtype) {
#define X(T) case T: cuda_launch(k_dequant_rows<T>, g, 128, 0, c->stream, vd, vs, upr, total); break;
            CUDA_FOR_QUANT(X)
#undef X
        default: return vc_err_set(VC_ERR_UNSUPPORTED, "cuda copy: %s", stt->name);
        }
    } else {
        int64_t total = len * nrows;
        cuda_launch(k_copy_plain, cuda_blocks(total, EW_THREADS), EW_THREADS, 0, c->stream, 
            vd, vs, d->dtype, s->dtype, stt->block_bytes, len, total);
    }
    CU_LAUNCHED();
    return VC_OK;
}

/* ---- EMBED --------------------------------------------------------------- */

/* grid.y = token; plain tables: one thread per element; quantized: per unit.
 * OT: f32 rows, or bf16 ones (a bf16 residual stream: rounded once). */
template <rt_dtype T, typename OT = float>
__global__ void k_embed(cuda_view dst, const char *table, int64_t tstride, const int32_t *ids, int64_t V,
                        int64_t dim, int *flags, int shard, int64_t base) {
    CUDA_PDL_ENTER();
    int64_t t = blockIdx.y;
    int64_t id = (int64_t)ids[t] - base;
    OT *out = (OT *)cuda_row(dst, t);
    /* a shard's foreign ids give zero rows; negative ids are always bad */
    bool bad = id < 0 || id >= V;
    if (bad && (!shard || ids[t] < 0) && blockIdx.x == 0 && threadIdx.x == 0) atomicOr(flags, CUDA_FLAG_BAD_TOKEN);
    const char *row = table + (int64_t)(bad ? 0 : id) * tstride;
    if constexpr (T == RT_F32 || T == RT_F16 || T == RT_BF16) {
        const int es = T == RT_F32 ? 4 : 2;
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < dim;
             j += (int64_t)gridDim.x * blockDim.x)
            cuda_st1(out + j, bad ? 0.0f : ld_plain<T>(row + j * es));
    } else {
        for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < dim / 32;
             u += (int64_t)gridDim.x * blockDim.x) {
            float v[32];
            dq_unit<T>((const uint8_t *)row, u, v);
#pragma unroll
            for (int l = 0; l < 32; l++) cuda_st1(out + u * 32 + l, bad ? 0.0f : v[l]);
        }
    }
}

/* Plain tables with 16-byte aligned rows of a multiple of 8 values (the
 * usual case: bf16 embedding tables, the f32 hidden states the logits head
 * gathers): 8 values per thread, 16-byte loads and two float4 stores
 * (the one-value kernel above moved 2-byte loads: a 2048-token bf16
 * lookup took 160 us instead of ~20). grid = (ceil(dim / 8 / 128), n). */
template <rt_dtype T, typename OT = float>
__global__ void k_embed_vec(cuda_view dst, const char *table, int64_t tstride, const int32_t *ids, int64_t V,
                            int64_t dim, int *flags, int shard, int64_t base) {
    CUDA_PDL_ENTER();
    int64_t t = blockIdx.y, g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t id = (int64_t)ids[t] - base;
    bool bad = id < 0 || id >= V;
    if (bad && (!shard || ids[t] < 0) && blockIdx.x == 0 && threadIdx.x == 0) atomicOr(flags, CUDA_FLAG_BAD_TOKEN);
    if (g * 8 >= dim) return;
    OT *out = (OT *)cuda_row(dst, t) + g * 8;
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (!bad) {
        const char *row = table + id * tstride;
        if constexpr (T == RT_F32) {
            const float4 *p = (const float4 *)row + g * 2;
            float4 a = p[0], b = p[1];
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        } else {
            uint4 p = ((const uint4 *)row)[g];
            const uint16_t *h = (const uint16_t *)&p;
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = ld_plain<T>((const char *)(h + e));
        }
    }
    cuda_st4(out, make_float4(v[0], v[1], v[2], v[3]));
    cuda_st4(out + 4, make_float4(v[4], v[5], v[6], v[7]));
}

/* EMBED's launches into OT rows (f32 or bf16). */
template <typename OT>
static void embed_launch(cuda_ctx *c, rt_tensor *dst, const rt_tensor *table, const int32_t *d_ids, int64_t V,
                         int64_t dim, int shard, int64_t base) {
    const rt_dtype_traits *tt = rt_dtype_info(table->dtype);
    int64_t n = rt_tensor_nrows(dst);
    int64_t work = tt->quantized ? dim / 32 : dim;
    dim3 grid(cuda_blocks(work, 128), (unsigned)n);
    if (grid.x > 65535) grid.x = 65535;
    cuda_view vd = cuda_view_of(dst);
    const char *tb = (const char *)table->data;
    int64_t ts = table->stride[0];
    /* 16-byte aligned rows of 8k values in the table and in dst: the vector kernel */
    bool vec = !tt->quantized && dim % 8 == 0 && ts % 16 == 0 && ((uintptr_t)tb & 15) == 0 &&
               ((uintptr_t)dst->data & 15) == 0;
    for (int i = 0; i + 1 < dst->ndim; i++) vec = vec && dst->stride[i] % 16 == 0;
    if (vec) {
        dim3 vg(cuda_blocks(dim / 8, 128), (unsigned)n);
        switch (table->dtype) {
        case RT_F32: cuda_launch(k_embed_vec<RT_F32, OT>, vg, 128, 0, c->stream, vd, tb, ts, d_ids, V, dim, c->d_flags, shard, base); break;
        case RT_F16: cuda_launch(k_embed_vec<RT_F16, OT>, vg, 128, 0, c->stream, vd, tb, ts, d_ids, V, dim, c->d_flags, shard, base); break;
        case RT_BF16: cuda_launch(k_embed_vec<RT_BF16, OT>, vg, 128, 0, c->stream, vd, tb, ts, d_ids, V, dim, c->d_flags, shard, base); break;
        default: vec = false; break;
        }
    }
    if (!vec) switch (table->dtype) {
    case RT_F32: cuda_launch(k_embed<RT_F32, OT>, grid, 128, 0, c->stream, vd, tb, ts, d_ids, V, dim, c->d_flags, shard, base); break;
    case RT_F16: cuda_launch(k_embed<RT_F16, OT>, grid, 128, 0, c->stream, vd, tb, ts, d_ids, V, dim, c->d_flags, shard, base); break;
    case RT_BF16: cuda_launch(k_embed<RT_BF16, OT>, grid, 128, 0, c->stream, vd, tb, ts, d_ids, V, dim, c->d_flags, shard, base); break;
#define X(T) case T: cuda_launch(k_embed<T, OT>, grid, 128, 0, c->stream, vd, tb, ts, d_ids, V, dim, c->d_flags, shard, base); break;
        CUDA_FOR_QUANT(X)
#undef X
    default: break;
    }
}

extern "C" int cuda_op_embed(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *table = a->src[0], *ids = a->src[1];
    rt_tensor *dst = a->dst;
    if (cuda_check_dev(dst, "embed") || cuda_check_dev(table, "embed")) return VC_ERR_INVALID;
    const rt_dtype_traits *tt = rt_dtype_info(table->dtype);
    if (dst->dtype != RT_F32 && dst->dtype != RT_BF16)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda embed: dst must be f32 or bf16");
    if (!rt_tensor_is_contiguous(ids) || dst->stride[dst->ndim - 1] != (dst->dtype == RT_F32 ? 4 : 2) ||
        (!tt->quantized && table->stride[1] != tt->block_bytes))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda embed: rows must be contiguous");
    if (!cuda_float_or_quant(table->dtype))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda embed: table dtype %s", tt->name);
    int64_t n = rt_tensor_nelem(ids), V = table->shape[0], dim = table->shape[1];
    if (n == 0) return VC_OK;
    if (n > 65535) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda embed: more than 65535 tokens in one call");
    int shard = a->p.embed.shard;
    int64_t base = shard ? a->p.embed.base : 0;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    const int32_t *d_ids = (const int32_t *)ids->data;
    void *tmp = NULL;
    if (ids->device == RT_DEV_CPU) { /* host ids: check here, then upload */
        const int32_t *h = (const int32_t *)ids->data;
        for (int64_t i = 0; i < n; i++)
            if (h[i] < 0 || (!shard && h[i] >= V))
                return vc_err_set(VC_ERR_INVALID, "embed: token id %d out of range [0, %lld)", h[i],
                                  (long long)V);
        tmp = cuda_tmp_alloc(c, (size_t)n * 4);
        if (!tmp) return VC_ERR_OOM;
        cudaError_t e = cudaMemcpyAsync(tmp, h, (size_t)n * 4, cudaMemcpyHostToDevice, c->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) {
            cuda_tmp_free(c, tmp);
            return cuda_fail(e, "embed: upload ids", __FILE__, __LINE__);
        }
        d_ids = (const int32_t *)tmp;
    }
    if (dst->dtype == RT_BF16) embed_launch<__nv_bfloat16>(c, dst, table, d_ids, V, dim, shard, base);
    else embed_launch<float>(c, dst, table, d_ids, V, dim, shard, base);
    cudaError_t le = cudaGetLastError();
    cuda_tmp_free(c, tmp);
    if (le != cudaSuccess) return cuda_fail(le, "embed kernel launch", __FILE__, __LINE__);
    return VC_OK;
}
