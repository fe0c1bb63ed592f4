/* cpu_paged — KV_STORE and PAGED_ATTENTION over the block-paged KV cache.
 *
 * Cache layout [num_blocks, B, kvh, hd]: a token slot s = block * B + j
 * holds kvh rows of hd values. PAGED_ATTENTION runs one task per (query
 * row, kv head): the group of h/kvh query heads sharing that kv head walks
 * the sequence's keys block by block with an online softmax, so each key
 * row is loaded once per group. Accumulation order is fixed (key order), so
 * a query's result does not depend on what else is in the batch.
 */
#include "backends/cpu/cpu_internal.h"

#include "base/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GROUP 64 /* query heads per kv head handled by one task */

static inline void load_row(const char *p, int f16, int64_t hd, float *out) {
    if (f16) {
        const uint16_t *h = (const uint16_t *)p;
        for (int64_t i = 0; i < hd; i++) out[i] = rt_f16_to_f32(h[i]);
    } else {
        memcpy(out, p, (size_t)hd * sizeof(float));
    }
}

int cpu_op_kv_store(rt_backend *be, const rt_op_args *a) {
    (void)be;
    rt_tensor *cache = a->dst;
    const rt_tensor *src = a->src[0], *slots = a->src[1];
    int64_t T = src->shape[0], row = src->shape[1] * src->shape[2];
    int64_t n_slots = rt_tensor_nelem(cache) / row;
    const int32_t *sl = slots->data;
    int f16 = cache->dtype == RT_F16;
    for (int64_t t = 0; t < T; t++) {
        int32_t s = sl[t];
        if (s < 0) continue;
        if (s >= n_slots) return vc_err_set(VC_ERR_INVALID, "kv_store: slot %d out of range (%lld)", s, (long long)n_slots);
        const float *x = (const float *)rt_tensor_row(src, t * src->shape[1]);
        if (f16) {
            uint16_t *d = (uint16_t *)cache->data + (int64_t)s * row;
            for (int64_t i = 0; i < row; i++) d[i] = rt_f32_to_f16(x[i]);
        } else {
            memcpy((float *)cache->data + (int64_t)s * row, x, (size_t)row * sizeof(float));
        }
    }
    return VC_OK;
}

typedef struct {
    const rt_op_args *a;
    const int32_t *tok_seq; /* [T] sequence of each query row */
    int64_t T, h, kvh, hd, B, max_blocks, num_blocks;
    int f16;
    int err;
} paged_job;

static void paged_task(void *ctxp, int64_t task, int thread) {
    (void)thread;
    paged_job *j = ctxp;
    const rt_op_args *a = j->a;
    int64_t t = task / j->kvh, g = task % j->kvh, group = j->h / j->kvh;
    int32_t s = j->tok_seq[t];
    const int32_t *qsl = a->src[4]->data, *seq_lens = a->src[5]->data;
    const int32_t *bt = (const int32_t *)a->src[3]->data + (int64_t)s * j->max_blocks;
    int64_t q_len = qsl[s + 1] - qsl[s];
    int64_t pos = seq_lens[s] - q_len + (t - qsl[s]);
    int64_t lo = 0;
    if (a->p.paged.window > 0 && pos - a->p.paged.window + 1 > 0) lo = pos - a->p.paged.window + 1;
    int64_t hd = j->hd;
    float scale = a->p.paged.scale, softcap = a->p.paged.softcap;
    const float *q = (const float *)a->src[0]->data + (t * j->h + g * group) * hd;
    float *out = (float *)a->dst->data + (t * j->h + g * group) * hd;
    float m[MAX_GROUP], l[MAX_GROUP];
    float *acc = out; /* accumulate in place: [group, hd] */
    for (int64_t i = 0; i < group; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    memset(acc, 0, (size_t)(group * hd) * sizeof(float));
    float kbuf[512], vbuf[512];
    const char *kc = a->src[1]->data, *vc = a->src[2]->data;
    size_t esz = j->f16 ? 2 : 4, slot_bytes = (size_t)(j->kvh * hd) * esz;
    for (int64_t key = lo; key <= pos; key++) {
        int32_t blk = bt[key / j->B];
        if (blk < 0 || blk >= j->num_blocks) {
            j->err = 1;
            return;
        }
        size_t off = ((size_t)blk * (size_t)j->B + (size_t)(key % j->B)) * slot_bytes + (size_t)(g * hd) * esz;
        const float *kr, *vr;
        if (j->f16) {
            load_row(kc + off, 1, hd, kbuf);
            load_row(vc + off, 1, hd, vbuf);
            kr = kbuf;
            vr = vbuf;
        } else {
            kr = (const float *)(kc + off);
            vr = (const float *)(vc + off);
        }
        for (int64_t i = 0; i < group; i++) {
            const float *qi = q + i * hd;
            float dot = 0.0f;
            for (int64_t d = 0; d < hd; d++) dot += qi[d] * kr[d];
            float sc = dot * scale;
            if (softcap > 0.0f) sc = softcap * tanhf(sc / softcap);
            float *ai = acc + i * hd;
            if (sc > m[i]) {
                float c = expf(m[i] - sc); /* 0 on the first key */
                l[i] *= c;
                for (int64_t d = 0; d < hd; d++) ai[d] *= c;
                m[i] = sc;
            }
            float p = expf(sc - m[i]);
            l[i] += p;
            for (int64_t d = 0; d < hd; d++) ai[d] += p * vr[d];
        }
    }
    for (int64_t i = 0; i < group; i++) {
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        for (int64_t d = 0; d < hd; d++) acc[i * hd + d] *= inv;
    }
}

int cpu_op_paged_attention(rt_backend *be, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    const rt_tensor *q = a->src[0], *kc = a->src[1], *bt = a->src[3], *qsl_t = a->src[4], *sl_t = a->src[5];
    paged_job j = {.a = a, .T = q->shape[0], .h = q->shape[1], .kvh = kc->shape[2], .hd = q->shape[2],
                   .B = kc->shape[1], .max_blocks = bt->shape[1], .num_blocks = kc->shape[0],
                   .f16 = kc->dtype == RT_F16};
    if (j.h / j.kvh > MAX_GROUP || (j.f16 && j.hd > 512))
        return vc_err_set(VC_ERR_UNSUPPORTED, "paged attention: group %lld / head_dim %lld too large",
                          (long long)(j.h / j.kvh), (long long)j.hd);
    if (!rt_tensor_is_contiguous(q) || !rt_tensor_is_contiguous(a->dst) || !rt_tensor_is_contiguous(bt))
        return vc_err_set(VC_ERR_UNSUPPORTED, "paged attention: contiguous q/dst/block_tables required");
    int64_t S = bt->shape[0];
    const int32_t *qsl = qsl_t->data, *seq_lens = sl_t->data;
    if (qsl[0] != 0 || qsl[S] != j.T) return vc_err_set(VC_ERR_INVALID, "paged attention: qsl must span [0, T]");
    int32_t *tok_seq = cpu_scratch(c, (size_t)j.T * sizeof(int32_t));
    if (!tok_seq && j.T) return VC_ERR_OOM;
    for (int64_t s = 0; s < S; s++) {
        int64_t q_len = qsl[s + 1] - qsl[s];
        if (q_len < 0 || q_len > seq_lens[s] || seq_lens[s] > j.max_blocks * j.B)
            return vc_err_set(VC_ERR_INVALID, "paged attention: sequence %lld has q_len %lld, seq_len %d", (long long)s,
                              (long long)q_len, seq_lens[s]);
        for (int64_t t = qsl[s]; t < qsl[s + 1]; t++) tok_seq[t] = (int32_t)s;
    }
    j.tok_seq = tok_seq;
    if (j.T) cpu_pool_run(c->pool, j.T * j.kvh, paged_task, &j);
    if (j.err) return vc_err_set(VC_ERR_INVALID, "paged attention: block id out of range");
    return VC_OK;
}
