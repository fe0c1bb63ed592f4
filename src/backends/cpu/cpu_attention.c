/* cpu_attention — causal GQA attention over a contiguous KV cache.
 *
 * Work unit: one query i (absolute position hi = n_past+i) and a batch of
 * up to CPU_ATTN_HB query heads that share kv head g, so each K/V chunk is
 * fetched from memory once and reused from L1 by the other heads. Keys
 * lo..hi with lo = max(0, hi-window+1) when window > 0.
 *
 * The row kernel is an online softmax over chunks of keys (one pass over K
 * and V): scores of a chunk, rescale the running sum/output by
 * exp(old_max - new_max), accumulate exp(s - max) * v.
 *
 * Decode (one query) has few units (kv heads), so long contexts are also
 * split into segments of >= SPLIT_MIN keys processed as separate tasks;
 * each writes (m, l, unnormalised acc) and a combine pass merges them:
 * M = max m_s, out = sum_s e^(m_s-M) acc_s / sum_s e^(m_s-M) l_s.
 * The split count depends only on the shapes, so results do not depend on
 * the number of threads.
 */
#include "backends/cpu/cpu_internal.h"

#include "base/err.h"

#include <math.h>
#include <string.h>

#define KCHUNK 64
#define SPLIT_MIN 512
#define MAX_SPLITS 16

static inline float kv_at(const cpu_attn_job *j, const char *row, int64_t i) {
    if (j->kv_f16 == 2) return rt_bf16_to_f32(((const uint16_t *)row)[i]);
    return j->kv_f16 ? rt_f16_to_f32(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

static void attn_one_head(const cpu_attn_job *j, int h) {
    float acc[CPU_ATTN_MAX_HD], sc[KCHUNK];
    const float *q = j->q + h * j->q_stride;
    memset(acc, 0, (size_t)j->hd * sizeof(float));
    float m = -INFINITY, l = 0.0f;
    for (int64_t p0 = j->lo, cnt; p0 <= j->hi; p0 += cnt) {
        cnt = cpu_attn_chunk(j, p0, KCHUNK);
        float cmax = -INFINITY;
        for (int t = 0; t < cnt; t++) {
            const char *k = cpu_attn_row(j, j->k, j->k_stride, j->k_blk, p0 + t);
            float s = 0.0f;
            for (int64_t d = 0; d < j->hd; d++) s += q[d] * kv_at(j, k, d);
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
            const char *v = cpu_attn_row(j, j->v, j->v_stride, j->v_blk, p0 + t);
            float p = expf(sc[t] - m);
            l += p;
            for (int64_t d = 0; d < j->hd; d++) acc[d] += p * kv_at(j, v, d);
        }
    }
    float *out = j->out + h * j->out_stride;
    if (j->ml) {
        memcpy(out, acc, (size_t)j->hd * sizeof(float));
        j->ml[2 * h] = m;
        j->ml[2 * h + 1] = l;
    } else {
        float inv = 1.0f / l;
        for (int64_t d = 0; d < j->hd; d++) out[d] = acc[d] * inv;
    }
}

void cpu_attn_ref(const cpu_attn_job *j) {
    for (int h = 0; h < j->nh; h++) attn_one_head(j, h);
}

typedef struct {
    const cpu_kernels *k;
    rt_tensor *dst;
    const rt_tensor *q, *kc, *vc;
    int64_t n_past, h, kvh, group, hb, nhb, splits;
    float scale, softcap;
    int32_t window;
    float *part; /* splits > 1: [unit][split][hb][hd] */
    float *ml;   /* splits > 1: [unit][split][hb][2] */
} attn_op;

/* task = unit * splits + s; unit = (i * kvh + g) * nhb + b */
static void attn_task(void *ctxp, int64_t task, int thread) {
    (void)thread;
    const attn_op *o = ctxp;
    int64_t unit = task / o->splits, s = task % o->splits;
    int64_t b = unit % o->nhb, g = (unit / o->nhb) % o->kvh, i = unit / (o->nhb * o->kvh);
    int64_t h0 = g * o->group + b * o->hb, hd = o->q->shape[2];
    int nh = (int)(o->group - b * o->hb < o->hb ? o->group - b * o->hb : o->hb);
    int64_t hi = o->n_past + i;
    int64_t lo = o->window > 0 && hi - o->window + 1 > 0 ? hi - o->window + 1 : 0;
    cpu_attn_job j = {
        .q = (const float *)((const char *)o->q->data + i * o->q->stride[0] + h0 * o->q->stride[1]),
        .q_stride = (size_t)o->q->stride[1] / sizeof(float),
        .nh = nh,
        .k = (const char *)o->kc->data + g * o->kc->stride[1],
        .v = (const char *)o->vc->data + g * o->vc->stride[1],
        .k_stride = (size_t)o->kc->stride[0],
        .v_stride = (size_t)o->vc->stride[0],
        .kv_f16 = o->kc->dtype == RT_F16,
        .hd = hd,
        .lo = lo,
        .hi = hi,
        .scale = o->scale,
        .softcap = o->softcap,
    };
    if (o->splits == 1) {
        j.out = (float *)((char *)o->dst->data + i * o->dst->stride[0] + h0 * o->dst->stride[1]);
        j.out_stride = (size_t)o->dst->stride[1] / sizeof(float);
    } else {
        int64_t len = hi - lo + 1, slot = unit * o->splits + s;
        j.lo = lo + len * s / o->splits;
        j.hi = lo + len * (s + 1) / o->splits - 1;
        j.out = o->part + slot * o->hb * hd;
        j.out_stride = (size_t)hd;
        j.ml = o->ml + slot * o->hb * 2;
    }
    o->k->attn(&j);
}

/* Merge the splits of one (unit, head). */
static void combine_task(void *ctxp, int64_t t, int thread) {
    (void)thread;
    const attn_op *o = ctxp;
    int64_t unit = t / o->hb, hh = t % o->hb, hd = o->q->shape[2];
    int64_t b = unit % o->nhb, g = (unit / o->nhb) % o->kvh, i = unit / (o->nhb * o->kvh);
    int64_t head = g * o->group + b * o->hb + hh;
    if (b * o->hb + hh >= o->group) return; /* padding head of the last batch */
    float M = -INFINITY, L = 0.0f, w[MAX_SPLITS];
    for (int64_t s = 0; s < o->splits; s++) {
        float m = o->ml[((unit * o->splits + s) * o->hb + hh) * 2];
        M = m > M ? m : M;
    }
    for (int64_t s = 0; s < o->splits; s++) {
        const float *ml = o->ml + ((unit * o->splits + s) * o->hb + hh) * 2;
        w[s] = ml[1] > 0.0f ? expf(ml[0] - M) : 0.0f;
        L += w[s] * ml[1];
    }
    float *out = (float *)((char *)o->dst->data + i * o->dst->stride[0] + head * o->dst->stride[1]);
    float inv = 1.0f / L;
    for (int64_t d = 0; d < hd; d++) {
        float acc = 0.0f;
        for (int64_t s = 0; s < o->splits; s++)
            if (w[s] > 0.0f) acc += w[s] * o->part[((unit * o->splits + s) * o->hb + hh) * hd + d];
        out[d] = acc * inv;
    }
}

int cpu_op_attention(rt_backend *be, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    const rt_tensor *q = a->src[0], *kc = a->src[1], *vc = a->src[2];
    if (kc->dtype != RT_F32 && kc->dtype != RT_F16)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu attention: cache dtype %s",
                          rt_dtype_name(kc->dtype));
    int64_t n = q->shape[0], hd = q->shape[2];
    if (hd > CPU_ATTN_MAX_HD)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu attention: head_dim > %d", CPU_ATTN_MAX_HD);
    int64_t es = kc->dtype == RT_F16 ? 2 : 4;
    if (q->stride[2] != 4 || a->dst->stride[2] != 4 || kc->stride[2] != es || vc->stride[2] != es ||
        q->stride[1] % 4 || a->dst->stride[1] % 4)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu attention: head rows must be contiguous");
    if (n == 0) return VC_OK;
    attn_op o = {.k = c->k, .dst = a->dst, .q = q, .kc = kc, .vc = vc,
                 .n_past = a->p.attn.n_past, .h = q->shape[1], .kvh = kc->shape[1],
                 .scale = a->p.attn.scale, .softcap = a->p.attn.softcap,
                 .window = a->p.attn.window, .splits = 1};
    o.group = o.h / o.kvh;
    o.hb = o.group < CPU_ATTN_HB ? o.group : CPU_ATTN_HB;
    o.nhb = (o.group + o.hb - 1) / o.hb;
    int64_t units = n * o.kvh * o.nhb;
    if (n == 1) { /* decode: split long contexts (shape-only rule) */
        int64_t len = o.n_past + 1;
        if (o.window > 0 && len > o.window) len = o.window;
        o.splits = len / SPLIT_MIN;
        o.splits = o.splits < 1 ? 1 : o.splits > MAX_SPLITS ? MAX_SPLITS : o.splits;
    }
    if (o.splits > 1) {
        size_t slots = (size_t)(units * o.splits * o.hb);
        float *buf = cpu_scratch(c, slots * (size_t)(hd + 2) * sizeof(float));
        if (!buf) return VC_ERR_OOM;
        o.part = buf;
        o.ml = buf + slots * (size_t)hd;
    }
    int64_t work = n * o.h * hd * 2 * (o.n_past + n / 2 + 1);
    cpu_parallel(c, units * o.splits, attn_task, &o, work);
    if (o.splits > 1) cpu_parallel(c, units * o.hb, combine_task, &o, units * o.hb * hd * o.splits);
    return VC_OK;
}
