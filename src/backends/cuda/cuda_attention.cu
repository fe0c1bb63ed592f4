/* cuda_attention — causal GQA attention over a contiguous KV cache.
 *
 * dst[n,h,hd] f32 from q[n,h,hd] f32 and k/v caches [ctx,kvh,hd] (f32 or
 * f16). One thread block per (head hq, query i); query i sits at absolute
 * position n_past+i and reads kv head hq / (h/kvh) at positions lo..hi,
 * hi = n_past+i, lo = max(0, hi-window+1) when window > 0.
 *
 * The block walks the keys in tiles of TK positions (TK chosen so q, one
 * tile and TK scores fit 48 KiB of shared memory):
 *   1. the K tile is loaded to shared memory as f32;
 *   2. each warp computes the scores of every 4th key of the tile
 *      (lanes split hd, shuffle reduction), scaled and soft-capped;
 *   3. online softmax: the running max m grows to the tile max, the running
 *      output and sum are rescaled by exp(m_old - m_new), p_j = exp(s_j - m);
 *   4. the V tile replaces the K tile and each thread accumulates the
 *      dimensions it owns (d = tid + k*128, k < 8, so hd <= 1024).
 * Nothing of context length is stored, so any context fits. This is the
 * straightforward correct kernel; paged flash-decoding (split-KV) replaces
 * it with the engine's block tables.
 */
#include "backends/cuda/cuda_flash.h"
#include "backends/cuda/cuda_internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>

#include <type_traits>

#define ATT_THREADS 128
#define ATT_MAX_HD 1024
#define ATT_DPT (ATT_MAX_HD / ATT_THREADS)
#define ATT_SMEM (48 * 1024)

__device__ __forceinline__ float kv_ld(const float *p) { return *p; }
__device__ __forceinline__ float kv_ld(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ float kv_ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }

typedef struct {
    const char *q, *k, *v;
    char *out;
    int64_t q_s0, q_s1, o_s0, o_s1; /* bytes */
    /* contiguous: position j at j*k_s0 + g*k_s1; paged: slot (blk, j%B) at
     * blk*k_s0 + (j%B)*k_sb + g*k_s1 (same for v) */
    int64_t k_s0, k_sb, k_s1, v_s0, v_sb, v_s1;
    int hd, group, tk, window;
    int64_t n_past;
    float scale, softcap;
    /* paged only: device metadata (see ops.h PAGED_ATTENTION) */
    const int32_t *bt, *qsl, *seq_lens;
    int64_t S, max_blocks, B, num_blocks;
    int *flags;
} att_args;

/* Address of key/value position j (paged: through the block table). */
template <bool PAGED>
__device__ __forceinline__ const char *kv_pos(const att_args &a, const char *base, int64_t s0, int64_t sb,
                                              const int32_t *btrow, int64_t j) {
    if (!PAGED) return base + j * s0;
    int32_t blk = btrow[j / a.B];
    if (blk < 0 || blk >= a.num_blocks) { /* bad table: flag it, read block 0 */
        atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
        blk = 0;
    }
    return base + blk * s0 + (j % a.B) * sb;
}

template <typename KV, bool PAGED> __global__ void __launch_bounds__(ATT_THREADS) k_attn(att_args a) {
    CUDA_PDL_ENTER();
    extern __shared__ float sm[];
    const int hd = a.hd, tk = a.tk, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int nw = ATT_THREADS / 32;
    float *qs = sm, *tile = sm + hd, *sc = tile + (size_t)tk * hd;
    const int64_t hq = blockIdx.x, i = blockIdx.y, g = hq / a.group;
    const float *qr = (const float *)(a.q + i * a.q_s0 + hq * a.q_s1);
    float *orow = (float *)(a.out + i * a.o_s0 + hq * a.o_s1);
    for (int d = tid; d < hd; d += ATT_THREADS) qs[d] = qr[d];
    const char *kb = a.k + g * a.k_s1, *vb = a.v + g * a.v_s1;
    const int32_t *btrow = NULL;
    int64_t hi = a.n_past + i;
    if (PAGED) { /* sequence of query row i: last s with qsl[s] <= i */
        const int64_t s0 = cuda_row_seq(a.qsl, (int)a.S, i);
        int64_t q_len = a.qsl[s0 + 1] - a.qsl[s0], sl = a.seq_lens[s0];
        if (q_len <= 0 || q_len > sl || sl > a.max_blocks * a.B || i < a.qsl[s0] || i >= a.qsl[s0 + 1]) {
            if (tid == 0) atomicOr(a.flags, CUDA_FLAG_BAD_PAGED);
            for (int d = tid; d < hd; d += ATT_THREADS) orow[d] = 0.0f;
            return;
        }
        btrow = a.bt + s0 * a.max_blocks;
        hi = sl - q_len + (i - a.qsl[s0]);
    }
    const int64_t lo = a.window > 0 && hi - a.window + 1 > 0 ? hi - a.window + 1 : 0;

    float m = -INFINITY, l = 0.0f, acc[ATT_DPT];
#pragma unroll
    for (int k = 0; k < ATT_DPT; k++) acc[k] = 0.0f;

    for (int64_t p0 = lo; p0 <= hi; p0 += tk) {
        const int cnt = (int)(hi - p0 + 1 < tk ? hi - p0 + 1 : tk);
        __syncthreads(); /* previous tile's V reads done (and q stored) */
        for (int e = tid; e < cnt * hd; e += ATT_THREADS) {
            int j = e / hd, d = e % hd;
            tile[e] = kv_ld((const KV *)kv_pos<PAGED>(a, kb, a.k_s0, a.k_sb, btrow, p0 + j) + d);
        }
        __syncthreads();
        for (int j = warp; j < cnt; j += nw) {
            float s = 0.0f;
            for (int d = lane; d < hd; d += 32) s += qs[d] * tile[j * hd + d];
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0) {
                s *= a.scale;
                if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
                sc[j] = s;
            }
        }
        __syncthreads();
        float cmax = -INFINITY;
        for (int j = 0; j < cnt; j++) cmax = fmaxf(cmax, sc[j]);
        if (cmax > m) { /* every thread takes the same branch */
            float corr = expf(m - cmax); /* 0 on the first tile */
#pragma unroll
            for (int k = 0; k < ATT_DPT; k++) acc[k] *= corr;
            l *= corr;
            m = cmax;
        }
        __syncthreads(); /* all maxima read before the scores become weights */
        for (int j = tid; j < cnt; j += ATT_THREADS) sc[j] = expf(sc[j] - m);
        for (int e = tid; e < cnt * hd; e += ATT_THREADS) {
            int j = e / hd, d = e % hd;
            tile[e] = kv_ld((const KV *)kv_pos<PAGED>(a, vb, a.v_s0, a.v_sb, btrow, p0 + j) + d);
        }
        __syncthreads();
        for (int j = 0; j < cnt; j++) l += sc[j];
#pragma unroll
        for (int k = 0; k < ATT_DPT; k++) {
            int d = tid + k * ATT_THREADS;
            if (d < hd) {
                float s = acc[k];
                for (int j = 0; j < cnt; j++) s += sc[j] * tile[j * hd + d];
                acc[k] = s;
            }
        }
    }
    float inv = 1.0f / l;
#pragma unroll
    for (int k = 0; k < ATT_DPT; k++) {
        int d = tid + k * ATT_THREADS;
        if (d < hd) orow[d] = acc[k] * inv;
    }
}

/* Tile size and launch, shared by both ops. */
static int attn_launch(cuda_ctx *c, att_args *aa, rt_dtype kvt, bool paged, int64_t h, int64_t rows) {
    int64_t hd = aa->hd;
    /* floats: hd (q) + tk*hd (tile) + tk (scores) <= ATT_SMEM/4 */
    int64_t tk = (ATT_SMEM / 4 - hd) / (hd + 1);
    aa->tk = (int)(tk > 64 ? 64 : tk);
    size_t smem = (size_t)(hd + (int64_t)aa->tk * hd + aa->tk) * 4;
    if (rows > 65535) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda attention: more than 65535 query rows");
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    dim3 grid((unsigned)h, (unsigned)rows);
    if (kvt == RT_F16 && paged) cuda_launch(k_attn<__half, true>, grid, ATT_THREADS, smem, c->stream, *aa);
    else if (kvt == RT_F16) cuda_launch(k_attn<__half, false>, grid, ATT_THREADS, smem, c->stream, *aa);
    else if (kvt == RT_BF16 && paged) cuda_launch(k_attn<__nv_bfloat16, true>, grid, ATT_THREADS, smem, c->stream, *aa);
    else if (kvt == RT_BF16) cuda_launch(k_attn<__nv_bfloat16, false>, grid, ATT_THREADS, smem, c->stream, *aa);
    else if (paged) cuda_launch(k_attn<float, true>, grid, ATT_THREADS, smem, c->stream, *aa);
    else cuda_launch(k_attn<float, false>, grid, ATT_THREADS, smem, c->stream, *aa);
    CU_LAUNCHED();
    return VC_OK;
}

static att_args args_common(const rt_tensor *dst, const rt_tensor *q, const rt_tensor *kc, const rt_tensor *vc,
                            float scale, float softcap, int32_t window) {
    att_args aa;
    memset(&aa, 0, sizeof aa);
    aa.q = (const char *)q->data;
    aa.k = (const char *)kc->data;
    aa.v = (const char *)vc->data;
    aa.out = (char *)dst->data;
    aa.q_s0 = q->stride[0];
    aa.q_s1 = q->stride[1];
    aa.o_s0 = dst->stride[0];
    aa.o_s1 = dst->stride[1];
    aa.hd = (int)q->shape[2];
    aa.scale = scale;
    aa.softcap = softcap;
    aa.window = window;
    return aa;
}

extern "C" int cuda_op_attention(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *q = a->src[0], *kc = a->src[1], *vc = a->src[2];
    rt_tensor *dst = a->dst;
    if (cuda_check_dev(dst, "attention") || cuda_check_dev(q, "attention") || cuda_check_dev(kc, "attention") ||
        cuda_check_dev(vc, "attention"))
        return VC_ERR_INVALID;
    if (kc->dtype != RT_F32 && kc->dtype != RT_F16 && kc->dtype != RT_BF16)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda attention: cache dtype %s", rt_dtype_name(kc->dtype));
    int64_t n = q->shape[0], h = q->shape[1], hd = q->shape[2];
    if (hd > ATT_MAX_HD) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda attention: head_dim > %d", ATT_MAX_HD);
    size_t es = kc->dtype == RT_F32 ? 4 : 2;
    if (q->stride[2] != 4 || dst->stride[2] != 4 || kc->stride[2] != (int64_t)es || vc->stride[2] != (int64_t)es)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda attention: head rows must be contiguous");
    if (n == 0 || h == 0 || hd == 0) return VC_OK;
    att_args aa = args_common(dst, q, kc, vc, a->p.attn.scale, a->p.attn.softcap, a->p.attn.window);
    aa.k_s0 = kc->stride[0];
    aa.k_s1 = kc->stride[1];
    aa.v_s0 = vc->stride[0];
    aa.v_s1 = vc->stride[1];
    aa.group = (int)(h / kc->shape[1]);
    aa.n_past = a->p.attn.n_past;
    return attn_launch(c, &aa, kc->dtype, false, h, n);
}

/* VLLM_CUDA_FLASH=0 keeps prompt-heavy batches on the SIMT kernels (A/B
 * measurements); read at each prefill-sized call, which is rare. */
static bool flash_enabled(void) {
    const char *e = getenv("VLLM_CUDA_FLASH");
    return !(e && !strcmp(e, "0"));
}

/* f32 <-> bf16 head rows [T, h, hd] between strided views (cvt_rows). */
template <typename S, typename D>
__global__ void k_cvt_rows(const char *src, int64_t s0, int64_t s1, char *dst, int64_t d0, int64_t d1, int64_t h,
                           int64_t hd, int64_t total) {
    CUDA_PDL_ENTER();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t e = i % hd, r = i / hd, t = r / h, g = r % h;
        const float v = kv_ld((const S *)(src + t * s0 + g * s1) + e);
        D *o = (D *)(dst + t * d0 + g * d1) + e;
        if constexpr (std::is_same<D, float>::value) *o = v;
        else *o = __float2bfloat16_rn(v);
    }
}

template <typename S, typename D> static int cvt_rows(cuda_ctx *c, const rt_tensor *src, rt_tensor *dst) {
    const int64_t total = rt_tensor_nelem(src);
    cuda_launch(k_cvt_rows<S, D>, cuda_blocks(total, 256), 256, 0, c->stream, (const char *)src->data,
                src->stride[0], src->stride[1], (char *)dst->data, dst->stride[0], dst->stride[1], src->shape[1],
                src->shape[2], total);
    CU_LAUNCHED();
    return VC_OK;
}

static int paged_f32(cuda_ctx *c, const rt_op_args *a, rt_tensor *dst, const rt_tensor *q);

/* PAGED_ATTENTION: caches [num_blocks, B, kvh, hd]; metadata on the device is
 * validated by the kernel (bad tables or lengths: CUDA_FLAG_BAD_PAGED, the
 * rows become 0 and the next sync reports VC_ERR_INVALID). q and dst are
 * f32, or both bf16 (bf16 activations): the flash kernel reads and writes
 * bf16 rows itself; the other kernels read f32 q, so a bf16 q is widened
 * into temporary memory and their f32 result rounded into dst
 * (two small copies; the model sends bf16 rows only with prompt rows in the
 * step, which flash takes when they dominate). */
extern "C" int cuda_op_paged_attention(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *q = a->src[0], *kc = a->src[1], *vc = a->src[2], *bt = a->src[3], *qsl = a->src[4],
                    *sl = a->src[5];
    rt_tensor *dst = a->dst;
    for (int i = 0; i < 6; i++)
        if (cuda_check_dev(a->src[i], "paged attention")) return VC_ERR_INVALID;
    if (cuda_check_dev(dst, "paged attention")) return VC_ERR_INVALID;
    int64_t T = q->shape[0], h = q->shape[1], hd = q->shape[2];
    if (hd > ATT_MAX_HD) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda paged attention: head_dim > %d", ATT_MAX_HD);
    if ((q->dtype != RT_F32 && q->dtype != RT_BF16) || dst->dtype != q->dtype)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda paged attention: q and dst must be both f32 or both bf16");
    size_t es = kc->dtype == RT_F32 ? 4 : 2, qes = q->dtype == RT_F32 ? 4 : 2;
    if (q->stride[2] != (int64_t)qes || dst->stride[2] != (int64_t)qes || kc->stride[3] != (int64_t)es ||
        vc->stride[3] != (int64_t)es || !rt_tensor_is_contiguous(bt) || !rt_tensor_is_contiguous(qsl) ||
        !rt_tensor_is_contiguous(sl))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda paged attention: head rows and metadata must be contiguous");
    if (T == 0 || h == 0 || hd == 0) return VC_OK;
    if (bt->shape[0] <= 0) return vc_err_set(VC_ERR_INVALID, "cuda paged attention: no sequences");
    if (q->dtype == RT_F32) return paged_f32(c, a, dst, q);
    if (T >= 4 * bt->shape[0] && T >= 64 && flash_enabled() && cuda_flash_eligible(q, dst, kc, vc))
        return cuda_flash_run(c, dst, q, kc, vc, bt, qsl, sl, a->p.paged.scale, a->p.paged.softcap, a->p.paged.window);
    if (cuda_flash_dec_wanted(c, q, kc) && cuda_flash_eligible(q, dst, kc, vc))
        return cuda_flash_dec_run(c, dst, q, kc, vc, bt, qsl, sl, a->p.paged.scale, a->p.paged.softcap,
                                  a->p.paged.window);
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    const size_t n = (size_t)(T * h * hd);
    /* stream-ordered scratch, not a persistent workspace: no pointer for a
     * recorded graph to keep (decode graphs keep f32 q; this fails cleanly
     * while recording) */
    float *ws = (float *)cuda_tmp_alloc(c, 2 * n * sizeof(float));
    if (!ws) return VC_ERR_OOM;
    rt_tensor qf = rt_tensor_3d(ws, RT_F32, RT_DEV_CUDA, T, h, hd), of = rt_tensor_3d(ws + n, RT_F32, RT_DEV_CUDA, T, h, hd);
    int rc = cvt_rows<__nv_bfloat16, float>(c, q, &qf);
    if (rc == 0) rc = paged_f32(c, a, &of, &qf);
    if (rc == 0) rc = cvt_rows<float, __nv_bfloat16>(c, &of, dst);
    cuda_tmp_free(c, ws);
    return rc;
}

/* PAGED_ATTENTION with f32 q and dst: mostly prompt rows (>= 4 per sequence
 * on average) over a bf16/f16 cache take the tensor-core flash kernel
 * (cuda_flash.cu); else split-KV flash-decoding, or the tiled kernel. */
static int paged_f32(cuda_ctx *c, const rt_op_args *a, rt_tensor *dst, const rt_tensor *q) {
    const rt_tensor *kc = a->src[1], *vc = a->src[2], *bt = a->src[3], *qsl = a->src[4], *sl = a->src[5];
    const int64_t T = q->shape[0], h = q->shape[1];
    if (T >= 4 * bt->shape[0] && T >= 64 && flash_enabled() && cuda_flash_eligible(q, dst, kc, vc))
        return cuda_flash_run(c, dst, q, kc, vc, bt, qsl, sl, a->p.paged.scale, a->p.paged.softcap, a->p.paged.window);
    if (cuda_flash_dec_wanted(c, q, kc) && cuda_flash_eligible(q, dst, kc, vc))
        return cuda_flash_dec_run(c, dst, q, kc, vc, bt, qsl, sl, a->p.paged.scale, a->p.paged.softcap,
                                  a->p.paged.window);
    if (cuda_fd_eligible(q, kc, vc))
        return cuda_fd_run(c, dst, q, kc, vc, bt, qsl, sl, a->p.paged.scale, a->p.paged.softcap, a->p.paged.window);
    att_args aa = args_common(dst, q, kc, vc, a->p.paged.scale, a->p.paged.softcap, a->p.paged.window);
    aa.k_s0 = kc->stride[0];
    aa.k_sb = kc->stride[1];
    aa.k_s1 = kc->stride[2];
    aa.v_s0 = vc->stride[0];
    aa.v_sb = vc->stride[1];
    aa.v_s1 = vc->stride[2];
    aa.group = (int)(h / kc->shape[2]);
    aa.bt = (const int32_t *)bt->data;
    aa.qsl = (const int32_t *)qsl->data;
    aa.seq_lens = (const int32_t *)sl->data;
    aa.S = bt->shape[0];
    aa.max_blocks = bt->shape[1];
    aa.B = kc->shape[1];
    aa.num_blocks = kc->shape[0];
    aa.flags = c->d_flags;
    if (aa.S <= 0) return vc_err_set(VC_ERR_INVALID, "cuda paged attention: no sequences");
    return attn_launch(c, &aa, kc->dtype, true, h, T);
}

/* KV_STORE: cache slot slots[t] <- src row t ([kvh, hd] f32), converted to
 * the cache dtype; slot < 0 skips; slot >= n_slots flags CUDA_FLAG_BAD_SLOT. */
template <typename KV>
__global__ void k_kv_store(KV *cache, const char *src, int64_t s_s0, int64_t s_s1, const int32_t *slots,
                           int64_t kvh, int64_t hd, int64_t n_slots, int64_t total, int *flags) {
    CUDA_PDL_ENTER();
    int64_t row = kvh * hd;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / row, e = i % row;
        int32_t s = slots[t];
        if (s < 0) continue;
        if (s >= n_slots) {
            atomicOr(flags, CUDA_FLAG_BAD_SLOT);
            continue;
        }
        float v = *(const float *)(src + t * s_s0 + (e / hd) * s_s1 + (e % hd) * 4);
        if constexpr (std::is_same<KV, __half>::value) cache[s * row + e] = __float2half_rn(v);
        else if constexpr (std::is_same<KV, __nv_bfloat16>::value) cache[s * row + e] = __float2bfloat16_rn(v);
        else cache[s * row + e] = v;
    }
}

extern "C" int cuda_op_kv_store(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    rt_tensor *cache = a->dst;
    const rt_tensor *src = a->src[0], *slots = a->src[1];
    if (cuda_check_dev(cache, "kv_store") || cuda_check_dev(src, "kv_store") || cuda_check_dev(slots, "kv_store"))
        return VC_ERR_INVALID;
    if (src->stride[2] != 4 || !rt_tensor_is_contiguous(slots))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda kv_store: src head rows and slots must be contiguous");
    int64_t T = src->shape[0], kvh = src->shape[1], hd = src->shape[2];
    int64_t total = T * kvh * hd, n_slots = rt_tensor_nelem(cache) / (kvh * hd);
    if (total == 0) return VC_OK;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    unsigned g = cuda_blocks(total, 256);
    const char *sp = (const char *)src->data;
    const int32_t *sl = (const int32_t *)slots->data;
    if (cache->dtype == RT_BF16)
        cuda_launch(k_kv_store<__nv_bfloat16>, g, 256, 0, c->stream, (__nv_bfloat16 *)cache->data, sp, src->stride[0],
                                                             src->stride[1], sl, kvh, hd, n_slots, total, c->d_flags);
    else if (cache->dtype == RT_F16)
        cuda_launch(k_kv_store<__half>, g, 256, 0, c->stream, (__half *)cache->data, sp, src->stride[0], src->stride[1], sl, kvh,
                                                     hd, n_slots, total, c->d_flags);
    else
        cuda_launch(k_kv_store<float>, g, 256, 0, c->stream, (float *)cache->data, sp, src->stride[0], src->stride[1], sl, kvh,
                                                    hd, n_slots, total, c->d_flags);
    CU_LAUNCHED();
    return VC_OK;
}
