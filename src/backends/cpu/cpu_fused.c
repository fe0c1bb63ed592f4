/* cpu_fused — ADD_RMSNORM and QK_ROPE_STORE on the CPU.
 *
 * Both run the very row kernels and arithmetic of the unfused ops
 * (cpu_elementwise.c's add, cpu_norm.c's rmsnorm from the backend's kernel
 * table, cpu_rope.c's rotation, cpu_paged.c's KV_STORE conversion), only in
 * one pass per token, so the results are bit-identical to the unfused
 * sequence (tests/backends/cpu/test_cpu_fused.c). One task per token row.
 */
#include "backends/cpu/cpu_internal.h"

#include "base/err.h"

#include <math.h>
#include <string.h>

#define MAX_PAIRS 512
#define MAX_HD 1024

typedef struct {
    const cpu_kernels *k;
    rt_tensor *dst;
    const rt_tensor *x, *res, *w;
    int64_t d;
    float eps, w_off;
} addnorm_job;

static void addnorm_task(void *ctxp, int64_t r, int thread) {
    (void)thread;
    const addnorm_job *j = ctxp;
    float *x = rt_tensor_row(j->x, r);
    j->k->add(x, rt_tensor_row(j->res, r), x, j->d);
    j->k->rmsnorm(x, j->w->data, rt_tensor_row(j->dst, r), j->d, j->eps, j->w_off);
}

static bool rows_ok(const rt_tensor *t) { return t->stride[t->ndim - 1] == 4; }

int cpu_op_add_rmsnorm(rt_backend *be, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    const rt_tensor *x = a->src[0], *res = a->src[1], *w = a->src[2];
    /* A bf16 addend is the CUDA tensor-parallel path's (bf16 all-reduce of
     * bf16 activations); the CPU never runs bf16 activations. */
    if (res->dtype != RT_F32)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu add_rmsnorm: the addend must be f32 (got %s)",
                          rt_dtype_name(res->dtype));
    if (!rows_ok(a->dst) || !rows_ok(x) || !rows_ok(res) || !rt_tensor_is_contiguous(w))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu add_rmsnorm: rows must be contiguous");
    addnorm_job j = {.k = c->k, .dst = a->dst, .x = x, .res = res, .w = w, .d = x->shape[x->ndim - 1],
                     .eps = a->p.rmsnorm.eps, .w_off = a->p.rmsnorm.w_offset};
    int64_t nrows = rt_tensor_nrows(x);
    cpu_parallel(c, nrows, addnorm_task, &j, nrows * j.d * 2);
    return VC_OK;
}

typedef struct {
    const cpu_kernels *k;
    const rt_op_args *a;
    const int32_t *pos, *slots;
    const float *inv_freq;
    int half;
    int64_t hd;
} rs_job;

/* cpu_rope.c's rotation of one head row, in place. */
static void rotate(float *v, const float *cs, const float *sn, int half, int neox) {
    if (neox) {
        for (int k = 0; k < half; k++) {
            float a = v[k], b = v[k + half];
            v[k] = a * cs[k] - b * sn[k];
            v[k + half] = a * sn[k] + b * cs[k];
        }
    } else {
        for (int k = 0; k < half; k++) {
            float a = v[2 * k], b = v[2 * k + 1];
            v[2 * k] = a * cs[k] - b * sn[k];
            v[2 * k + 1] = a * sn[k] + b * cs[k];
        }
    }
}

/* cpu_paged.c's KV_STORE of one head row at (slot, head). */
static void store_row(const cpu_kernels *k, rt_tensor *cache, int64_t slot, int64_t head, int64_t kvh,
                      const float *x, int64_t hd) {
    int64_t off = (slot * kvh + head) * hd;
    if (cache->dtype == RT_F16) {
        k->f32_to_f16(x, (uint16_t *)cache->data + off, hd);
    } else if (cache->dtype == RT_BF16) {
        uint16_t *d = (uint16_t *)cache->data + off;
        for (int64_t i = 0; i < hd; i++) d[i] = rt_f32_to_bf16(x[i]);
    } else {
        memcpy((float *)cache->data + off, x, (size_t)hd * sizeof(float));
    }
}

static void rs_task(void *ctxp, int64_t t, int thread) {
    (void)thread;
    const rs_job *j = ctxp;
    const rt_op_args *a = j->a;
    const rt_tensor *q = a->src[0], *k = a->src[1], *v = a->src[2];
    const float eps = a->p.rope_store.eps, w_off = a->p.rope_store.w_offset;
    const rt_tensor *qn = a->p.rope_store.q_norm, *kn = a->p.rope_store.k_norm;
    float cs[MAX_PAIRS], sn[MAX_PAIRS], tmp[MAX_HD];
    float p = (float)j->pos[t];
    for (int i = 0; i < j->half; i++) {
        float theta = p * j->inv_freq[i];
        cs[i] = cosf(theta) * a->p.rope_store.attn_factor;
        sn[i] = sinf(theta) * a->p.rope_store.attn_factor;
    }
    int neox = a->p.rope_store.neox;
    for (int64_t h = 0; h < q->shape[1]; h++) {
        const float *src = (const float *)((const char *)q->data + t * q->stride[0] + h * q->stride[1]);
        float *dst = (float *)((char *)a->dst->data + t * a->dst->stride[0] + h * a->dst->stride[1]);
        if (qn) j->k->rmsnorm(src, qn->data, dst, j->hd, eps, w_off);
        else if (dst != src) memmove(dst, src, (size_t)j->hd * sizeof(float));
        rotate(dst, cs, sn, j->half, neox);
    }
    int32_t slot = j->slots[t];
    if (slot < 0) return; /* padding row: nothing stored */
    int64_t kvh = k->shape[1];
    for (int64_t h = 0; h < kvh; h++) {
        const float *src = (const float *)((const char *)k->data + t * k->stride[0] + h * k->stride[1]);
        if (kn) j->k->rmsnorm(src, kn->data, tmp, j->hd, eps, w_off);
        else memcpy(tmp, src, (size_t)j->hd * sizeof(float));
        rotate(tmp, cs, sn, j->half, neox);
        store_row(j->k, a->p.rope_store.k_cache, slot, h, kvh, tmp, j->hd);
        const float *vr = (const float *)((const char *)v->data + t * v->stride[0] + h * v->stride[1]);
        store_row(j->k, a->p.rope_store.v_cache, slot, h, kvh, vr, j->hd);
    }
}

int cpu_op_qk_rope_store(rt_backend *be, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    const rt_tensor *q = a->src[0], *k = a->src[1], *v = a->src[2];
    int64_t n = q->shape[0], hd = q->shape[2], kvh = k->shape[1];
    int half = a->p.rope_store.rot_dim / 2;
    if (hd > MAX_HD)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu qk_rope_store: head_dim %lld > %d", (long long)hd, MAX_HD);
    if (q->stride[2] != 4 || k->stride[2] != 4 || v->stride[2] != 4 || a->dst->stride[2] != 4 ||
        !rt_tensor_is_contiguous(a->src[3]) || !rt_tensor_is_contiguous(a->src[4]) ||
        !rt_tensor_is_contiguous(a->src[5]))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu qk_rope_store: head rows must be contiguous");
    rs_job j = {.k = c->k, .a = a, .pos = a->src[3]->data, .inv_freq = a->src[4]->data,
                .slots = a->src[5]->data, .half = half, .hd = hd};
    const rt_tensor *caches[2] = {a->p.rope_store.k_cache, a->p.rope_store.v_cache};
    for (int i = 0; i < 2; i++) {
        int64_t n_slots = rt_tensor_nelem(caches[i]) / (kvh * hd);
        for (int64_t t = 0; t < n; t++)
            if (j.slots[t] >= n_slots)
                return vc_err_set(VC_ERR_INVALID, "qk_rope_store: slot %d out of range (%lld)", j.slots[t],
                                  (long long)n_slots);
    }
    cpu_parallel(c, n, rs_task, &j, n * (q->shape[1] + 2 * kvh) * hd * 4);
    return VC_OK;
}
