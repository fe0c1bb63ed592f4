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
#include "backends/cuda/cuda_internal.h"

#include <cuda_fp16.h>
#include <math.h>

#define ATT_THREADS 128
#define ATT_MAX_HD 1024
#define ATT_DPT (ATT_MAX_HD / ATT_THREADS)
#define ATT_SMEM (48 * 1024)

__device__ __forceinline__ float kv_ld(const float *p) { return *p; }
__device__ __forceinline__ float kv_ld(const __half *p) { return __half2float(*p); }

typedef struct {
    const char *q, *k, *v;
    char *out;
    int64_t q_s0, q_s1, o_s0, o_s1, k_s0, k_s1, v_s0, v_s1; /* bytes */
    int hd, group, tk, window;
    int64_t n_past;
    float scale, softcap;
} att_args;

template <typename KV> __global__ void __launch_bounds__(ATT_THREADS) k_attn(att_args a) {
    extern __shared__ float sm[];
    const int hd = a.hd, tk = a.tk, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int nw = ATT_THREADS / 32;
    float *qs = sm, *tile = sm + hd, *sc = tile + (size_t)tk * hd;
    const int64_t hq = blockIdx.x, i = blockIdx.y, g = hq / a.group;
    const float *qr = (const float *)(a.q + i * a.q_s0 + hq * a.q_s1);
    for (int d = tid; d < hd; d += ATT_THREADS) qs[d] = qr[d];
    const char *kb = a.k + g * a.k_s1, *vb = a.v + g * a.v_s1;
    const int64_t hi = a.n_past + i;
    const int64_t lo = a.window > 0 && hi - a.window + 1 > 0 ? hi - a.window + 1 : 0;

    float m = -INFINITY, l = 0.0f, acc[ATT_DPT];
#pragma unroll
    for (int k = 0; k < ATT_DPT; k++) acc[k] = 0.0f;

    for (int64_t p0 = lo; p0 <= hi; p0 += tk) {
        const int cnt = (int)(hi - p0 + 1 < tk ? hi - p0 + 1 : tk);
        __syncthreads(); /* previous tile's V reads done (and q stored) */
        for (int e = tid; e < cnt * hd; e += ATT_THREADS) {
            int j = e / hd, d = e % hd;
            tile[e] = kv_ld((const KV *)(kb + (p0 + j) * a.k_s0) + d);
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
            tile[e] = kv_ld((const KV *)(vb + (p0 + j) * a.v_s0) + d);
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
    float *orow = (float *)(a.out + i * a.o_s0 + hq * a.o_s1);
#pragma unroll
    for (int k = 0; k < ATT_DPT; k++) {
        int d = tid + k * ATT_THREADS;
        if (d < hd) orow[d] = acc[k] * inv;
    }
}

extern "C" int cuda_op_attention(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *q = a->src[0], *kc = a->src[1], *vc = a->src[2];
    rt_tensor *dst = a->dst;
    if (cuda_check_dev(dst, "attention") || cuda_check_dev(q, "attention") || cuda_check_dev(kc, "attention") ||
        cuda_check_dev(vc, "attention"))
        return VC_ERR_INVALID;
    if (kc->dtype != RT_F32 && kc->dtype != RT_F16)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda attention: cache dtype %s", rt_dtype_name(kc->dtype));
    int64_t n = q->shape[0], h = q->shape[1], hd = q->shape[2];
    if (hd > ATT_MAX_HD) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda attention: head_dim > %d", ATT_MAX_HD);
    size_t es = kc->dtype == RT_F16 ? 2 : 4;
    if (q->stride[2] != 4 || dst->stride[2] != 4 || kc->stride[2] != (int64_t)es || vc->stride[2] != (int64_t)es)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda attention: head rows must be contiguous");
    if (n == 0 || h == 0 || hd == 0) return VC_OK;
    if (n > 65535) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda attention: more than 65535 queries");
    att_args aa;
    aa.q = (const char *)q->data;
    aa.k = (const char *)kc->data;
    aa.v = (const char *)vc->data;
    aa.out = (char *)dst->data;
    aa.q_s0 = q->stride[0];
    aa.q_s1 = q->stride[1];
    aa.o_s0 = dst->stride[0];
    aa.o_s1 = dst->stride[1];
    aa.k_s0 = kc->stride[0];
    aa.k_s1 = kc->stride[1];
    aa.v_s0 = vc->stride[0];
    aa.v_s1 = vc->stride[1];
    aa.hd = (int)hd;
    aa.group = (int)(h / kc->shape[1]);
    aa.window = a->p.attn.window;
    aa.n_past = a->p.attn.n_past;
    aa.scale = a->p.attn.scale;
    aa.softcap = a->p.attn.softcap;
    /* floats: hd (q) + tk*hd (tile) + tk (scores) <= ATT_SMEM/4 */
    int64_t tk = (ATT_SMEM / 4 - hd) / (hd + 1);
    aa.tk = (int)(tk > 64 ? 64 : tk);
    size_t smem = (size_t)(hd + (int64_t)aa.tk * hd + aa.tk) * 4;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    dim3 grid((unsigned)h, (unsigned)n);
    if (kc->dtype == RT_F16)
        k_attn<__half><<<grid, ATT_THREADS, smem, c->stream>>>(aa);
    else
        k_attn<float><<<grid, ATT_THREADS, smem, c->stream>>>(aa);
    CU_LAUNCHED();
    return VC_OK;
}
