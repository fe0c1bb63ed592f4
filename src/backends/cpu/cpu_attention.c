/* cpu_attention — causal GQA attention over a contiguous KV cache.
 *
 * One task per (query, head); query i (absolute position n_past+i) of head
 * hq reads kv head hq / (h/kvh) at positions lo..hi, hi = n_past+i,
 * lo = max(0, hi-window+1) when window > 0. The row kernel is an online
 * softmax over chunks of keys (one pass over K and V, no score buffer of
 * context length): scores of a chunk, rescale the running sum/output by
 * exp(old_max - new_max), accumulate exp(s - max) * v.
 */
#include "backends/cpu/cpu_internal.h"

#include "base/err.h"

#include <math.h>
#include <string.h>

#define KCHUNK 64
#define MAX_HD 1024

static inline float kv_at(const cpu_attn_job *j, const char *row, int64_t i) {
    return j->kv_f16 ? rt_f16_to_f32(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

void cpu_attn_ref(const cpu_attn_job *j) {
    float acc[MAX_HD], sc[KCHUNK];
    memset(acc, 0, (size_t)j->hd * sizeof(float));
    float m = -INFINITY, l = 0.0f;
    for (int64_t p0 = j->lo; p0 <= j->hi; p0 += KCHUNK) {
        int cnt = (int)(j->hi - p0 + 1 < KCHUNK ? j->hi - p0 + 1 : KCHUNK);
        float cmax = -INFINITY;
        for (int t = 0; t < cnt; t++) {
            const char *k = j->k + (p0 + t) * j->k_stride;
            float s = 0.0f;
            for (int64_t d = 0; d < j->hd; d++) s += j->q[d] * kv_at(j, k, d);
            s *= j->scale;
            if (j->softcap > 0.0f) s = j->softcap * tanhf(s / j->softcap);
            sc[t] = s;
            cmax = s > cmax ? s : cmax;
        }
        if (cmax > m) {
            float corr = expf(m - cmax); /* 0 on the first chunk */
            for (int64_t d = 0; d < j->hd; d++) acc[d] *= corr;
            l *= corr;
            m = cmax;
        }
        for (int t = 0; t < cnt; t++) {
            const char *v = j->v + (p0 + t) * j->v_stride;
            float p = expf(sc[t] - m);
            l += p;
            for (int64_t d = 0; d < j->hd; d++) acc[d] += p * kv_at(j, v, d);
        }
    }
    float inv = 1.0f / l;
    for (int64_t d = 0; d < j->hd; d++) j->out[d] = acc[d] * inv;
}

typedef struct {
    const cpu_kernels *k;
    rt_tensor *dst;
    const rt_tensor *q, *kc, *vc;
    int64_t n_past, h, group;
    float scale, softcap;
    int32_t window;
} attn_op_job;

static void attn_task(void *ctxp, int64_t t, int thread) {
    (void)thread;
    const attn_op_job *o = ctxp;
    int64_t i = t / o->h, hq = t % o->h, g = hq / o->group;
    cpu_attn_job j = {
        .q = (const float *)((const char *)o->q->data + i * o->q->stride[0] + hq * o->q->stride[1]),
        .k = (const char *)o->kc->data + g * o->kc->stride[1],
        .v = (const char *)o->vc->data + g * o->vc->stride[1],
        .k_stride = (size_t)o->kc->stride[0],
        .v_stride = (size_t)o->vc->stride[0],
        .kv_f16 = o->kc->dtype == RT_F16,
        .hd = o->q->shape[2],
        .hi = o->n_past + i,
        .scale = o->scale,
        .softcap = o->softcap,
        .out = (float *)((char *)o->dst->data + i * o->dst->stride[0] + hq * o->dst->stride[1]),
    };
    j.lo = o->window > 0 && j.hi - o->window + 1 > 0 ? j.hi - o->window + 1 : 0;
    o->k->attn(&j);
}

int cpu_op_attention(rt_backend *be, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    const rt_tensor *q = a->src[0], *kc = a->src[1], *vc = a->src[2];
    if (kc->dtype != RT_F32 && kc->dtype != RT_F16)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu attention: cache dtype %s",
                          rt_dtype_name(kc->dtype));
    if (q->shape[2] > MAX_HD)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu attention: head_dim > %d", MAX_HD);
    size_t es = kc->dtype == RT_F16 ? 2 : 4;
    if (q->stride[2] != 4 || a->dst->stride[2] != 4 || kc->stride[2] != (int64_t)es ||
        vc->stride[2] != (int64_t)es)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu attention: head rows must be contiguous");
    attn_op_job o = {.k = c->k, .dst = a->dst, .q = q, .kc = kc, .vc = vc,
                     .n_past = a->p.attn.n_past, .h = q->shape[1],
                     .group = q->shape[1] / kc->shape[1], .scale = a->p.attn.scale,
                     .softcap = a->p.attn.softcap, .window = a->p.attn.window};
    cpu_pool_run(c->pool, q->shape[0] * q->shape[1], attn_task, &o);
    return VC_OK;
}
