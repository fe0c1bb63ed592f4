/* cpu_paged — KV_STORE and PAGED_ATTENTION over the block-paged KV cache.
 *
 * Cache layout [num_blocks, B, kvh, hd]: a token slot s = block * B + j
 * holds kvh rows of hd values. PAGED_ATTENTION runs the attention row
 * kernel of cpu_attention.c (scalar/AVX2 per the backend's table) with the
 * block table for addressing: one task per (query row, kv head, batch of
 * up to CPU_ATTN_HB query heads sharing it, context split), so each K/V
 * chunk is fetched once per head batch. Accumulation order depends only on
 * the row's own keys, so a query's result does not depend on what else is
 * in the batch nor on the thread count.
 */
#include "backends/cpu/cpu_internal.h"

#include "base/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const cpu_kernels *k;
    rt_tensor *cache;
    const rt_tensor *src;
    const int32_t *slots;
    int64_t row; /* kvh * hd values per slot */
} store_job;

static void store_task(void *ctxp, int64_t t, int thread) {
    (void)thread;
    const store_job *j = ctxp;
    int32_t s = j->slots[t];
    if (s < 0) return; /* padding row */
    const float *x = (const float *)rt_tensor_row(j->src, t * j->src->shape[1]);
    if (j->cache->dtype == RT_F16) {
        j->k->f32_to_f16(x, (uint16_t *)j->cache->data + (int64_t)s * j->row, j->row);
    } else if (j->cache->dtype == RT_BF16) {
        uint16_t *d = (uint16_t *)j->cache->data + (int64_t)s * j->row;
        for (int64_t i = 0; i < j->row; i++) d[i] = rt_f32_to_bf16(x[i]);
    } else {
        memcpy((float *)j->cache->data + (int64_t)s * j->row, x, (size_t)j->row * sizeof(float));
    }
}

int cpu_op_kv_store(rt_backend *be, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    store_job j = {.k = c->k, .cache = a->dst, .src = a->src[0], .slots = a->src[1]->data,
                   .row = a->src[0]->shape[1] * a->src[0]->shape[2]};
    int64_t T = j.src->shape[0], n_slots = rt_tensor_nelem(j.cache) / j.row;
    if (j.src->stride[2] != 4 || j.src->stride[1] != j.src->shape[2] * 4)
        return vc_err_set(VC_ERR_UNSUPPORTED, "kv_store: src rows [kvh, hd] must be contiguous");
    for (int64_t t = 0; t < T; t++)
        if (j.slots[t] >= n_slots)
            return vc_err_set(VC_ERR_INVALID, "kv_store: slot %d out of range (%lld)", j.slots[t],
                              (long long)n_slots);
    cpu_parallel(c, T, store_task, &j, T * j.row);
    return VC_OK;
}

/* One query row of the batch. */
typedef struct {
    int32_t seq, splits;
    int64_t pos, lo;  /* keys lo..pos */
    int64_t task0;    /* first task of this row */
    int64_t slot0;    /* first partial-result slot (splits > 1) */
} prow;

typedef struct {
    const cpu_kernels *k;
    const rt_op_args *a;
    const prow *rows;
    int64_t T, h, kvh, hd, group, hb, nhb, max_blocks;
    float *part, *ml; /* [slot][hb][hd], [slot][hb][2] */
} paged_op;

/* Long contexts are split into segments of >= SPLIT_MIN keys (decode has
 * few units of work otherwise); the rule uses the row's own length only, so
 * a query's result does not depend on the batch or the thread count. */
#define SPLIT_MIN 512
#define MAX_SPLITS 16

static int64_t find_row(const paged_op *o, int64_t task) {
    int64_t lo = 0, hi = o->T - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (o->rows[mid].task0 <= task) lo = mid; else hi = mid - 1;
    }
    return lo;
}

/* task -> (row t, kv head g, head batch b, split s) */
static void paged_task(void *ctxp, int64_t task, int thread) {
    (void)thread;
    const paged_op *o = ctxp;
    const rt_op_args *a = o->a;
    int64_t t = find_row(o, task);
    const prow *r = &o->rows[t];
    int64_t local = task - r->task0, s = local % r->splits, unit = local / r->splits;
    int64_t b = unit % o->nhb, g = unit / o->nhb, h0 = g * o->group + b * o->hb;
    const rt_tensor *kc = a->src[1], *vc = a->src[2];
    cpu_attn_job j = {
        .q = (const float *)a->src[0]->data + (t * o->h + h0) * o->hd,
        .q_stride = (size_t)o->hd,
        .nh = (int)(o->group - b * o->hb < o->hb ? o->group - b * o->hb : o->hb),
        .k = (const char *)kc->data + g * kc->stride[2],
        .v = (const char *)vc->data + g * vc->stride[2],
        .k_stride = (size_t)kc->stride[1],
        .v_stride = (size_t)vc->stride[1],
        .bt = (const int32_t *)a->src[3]->data + (int64_t)r->seq * o->max_blocks,
        .B = kc->shape[1],
        .k_blk = (size_t)kc->stride[0],
        .v_blk = (size_t)vc->stride[0],
        .kv_f16 = kc->dtype == RT_F16 ? 1 : kc->dtype == RT_BF16 ? 2 : 0,
        .hd = o->hd,
        .lo = r->lo,
        .hi = r->pos,
        .scale = a->p.paged.scale,
        .softcap = a->p.paged.softcap,
    };
    if (r->splits == 1) {
        j.out = (float *)a->dst->data + (t * o->h + h0) * o->hd;
        j.out_stride = (size_t)o->hd;
    } else {
        int64_t len = r->pos - r->lo + 1, slot = r->slot0 + unit * r->splits + s;
        j.lo = r->lo + len * s / r->splits;
        j.hi = r->lo + len * (s + 1) / r->splits - 1;
        j.out = o->part + slot * o->hb * o->hd;
        j.out_stride = (size_t)o->hd;
        j.ml = o->ml + slot * o->hb * 2;
    }
    o->k->attn(&j);
}

/* Merge the splits of every head of row t (rows with splits == 1: nothing). */
static void combine_task(void *ctxp, int64_t t, int thread) {
    (void)thread;
    const paged_op *o = ctxp;
    const prow *r = &o->rows[t];
    if (r->splits == 1) return;
    for (int64_t unit = 0; unit < o->kvh * o->nhb; unit++) {
        int64_t b = unit % o->nhb, g = unit / o->nhb;
        for (int64_t hh = 0; hh < o->hb && b * o->hb + hh < o->group; hh++) {
            float M = -INFINITY, L = 0.0f, w[MAX_SPLITS];
            int64_t slot0 = r->slot0 + unit * r->splits;
            for (int64_t s = 0; s < r->splits; s++) {
                float m = o->ml[((slot0 + s) * o->hb + hh) * 2];
                M = m > M ? m : M;
            }
            for (int64_t s = 0; s < r->splits; s++) {
                const float *ml = o->ml + ((slot0 + s) * o->hb + hh) * 2;
                w[s] = ml[1] > 0.0f ? expf(ml[0] - M) : 0.0f;
                L += w[s] * ml[1];
            }
            float *out = (float *)o->a->dst->data + (t * o->h + g * o->group + b * o->hb + hh) * o->hd;
            float inv = 1.0f / L;
            for (int64_t d = 0; d < o->hd; d++) {
                float acc = 0.0f;
                for (int64_t s = 0; s < r->splits; s++)
                    if (w[s] > 0.0f) acc += w[s] * o->part[((slot0 + s) * o->hb + hh) * o->hd + d];
                out[d] = acc * inv;
            }
        }
    }
}

int cpu_op_paged_attention(rt_backend *be, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    const rt_tensor *q = a->src[0], *kc = a->src[1], *vc = a->src[2], *bt = a->src[3];
    const int32_t *qsl = a->src[4]->data, *seq_lens = a->src[5]->data;
    paged_op o = {.k = c->k, .a = a, .T = q->shape[0], .h = q->shape[1], .kvh = kc->shape[2],
                  .hd = q->shape[2], .max_blocks = bt->shape[1]};
    int64_t B = kc->shape[1], num_blocks = kc->shape[0], S = bt->shape[0];
    int64_t es = kc->dtype == RT_F32 ? 4 : 2;
    if (kc->dtype != RT_F32 && kc->dtype != RT_F16 && kc->dtype != RT_BF16)
        return vc_err_set(VC_ERR_UNSUPPORTED, "paged attention: cache dtype %s", rt_dtype_name(kc->dtype));
    if (o.hd > CPU_ATTN_MAX_HD)
        return vc_err_set(VC_ERR_UNSUPPORTED, "paged attention: head_dim %lld > %d", (long long)o.hd,
                          CPU_ATTN_MAX_HD);
    if (!rt_tensor_is_contiguous(q) || !rt_tensor_is_contiguous(a->dst) || !rt_tensor_is_contiguous(bt) ||
        kc->stride[3] != es || vc->stride[3] != es)
        return vc_err_set(VC_ERR_UNSUPPORTED, "paged attention: contiguous q/dst/block_tables/head rows required");
    if (qsl[0] != 0 || qsl[S] != o.T) return vc_err_set(VC_ERR_INVALID, "paged attention: qsl must span [0, T]");
    o.group = o.h / o.kvh;
    o.hb = o.group < CPU_ATTN_HB ? o.group : CPU_ATTN_HB;
    o.nhb = (o.group + o.hb - 1) / o.hb;
    /* validate sequences and their block ids once, so kernels never see a bad one */
    for (int64_t s = 0; s < S; s++) {
        int64_t q_len = qsl[s + 1] - qsl[s];
        if (q_len < 0 || q_len > seq_lens[s] || seq_lens[s] > o.max_blocks * B)
            return vc_err_set(VC_ERR_INVALID, "paged attention: sequence %lld has q_len %lld, seq_len %d",
                              (long long)s, (long long)q_len, seq_lens[s]);
        const int32_t *row = (const int32_t *)bt->data + s * o.max_blocks;
        for (int64_t blk = 0; blk < (seq_lens[s] + B - 1) / B; blk++)
            if (row[blk] < 0 || row[blk] >= num_blocks)
                return vc_err_set(VC_ERR_INVALID, "paged attention: block id %d out of range", row[blk]);
    }
    if (o.T == 0) return VC_OK;
    /* rows, task and slot offsets; then the partial-result area */
    size_t rows_bytes = ((size_t)o.T * sizeof(prow) + 63) & ~(size_t)63;
    int64_t units = o.kvh * o.nhb, tasks = 0, slots = 0, work = 0;
    for (int pass = 0; pass < 2; pass++) {
        prow *rows = NULL;
        if (pass == 1) {
            size_t need = rows_bytes + (size_t)slots * (size_t)o.hb * (size_t)(o.hd + 2) * sizeof(float);
            char *buf = cpu_scratch(c, need);
            if (!buf) return VC_ERR_OOM;
            rows = (prow *)buf;
            o.rows = rows;
            o.part = (float *)(buf + rows_bytes);
            o.ml = o.part + (size_t)slots * (size_t)o.hb * (size_t)o.hd;
            tasks = slots = 0;
        }
        for (int64_t s = 0; s < S; s++) {
            int64_t q_len = qsl[s + 1] - qsl[s];
            for (int64_t t = qsl[s]; t < qsl[s + 1]; t++) {
                int64_t pos = seq_lens[s] - q_len + (t - qsl[s]);
                int64_t lo = a->p.paged.window > 0 && pos - a->p.paged.window + 1 > 0
                                 ? pos - a->p.paged.window + 1 : 0;
                int64_t sp = (pos - lo + 1) / SPLIT_MIN;
                sp = sp < 1 ? 1 : sp > MAX_SPLITS ? MAX_SPLITS : sp;
                if (rows) {
                    rows[t] = (prow){.seq = (int32_t)s, .splits = (int32_t)sp, .pos = pos, .lo = lo,
                                     .task0 = tasks, .slot0 = sp > 1 ? slots : -1};
                }
                tasks += units * sp;
                if (sp > 1) slots += units * sp;
                if (pass == 0) work += (pos - lo + 1) * o.h * o.hd * 2;
            }
        }
    }
    cpu_parallel(c, tasks, paged_task, &o, work);
    if (slots) cpu_parallel(c, o.T, combine_task, &o, slots * o.hb * o.hd);
    return VC_OK;
}
