/* cpu_copy — COPY between views of one shape, row by row (rows in linear
 * order of each tensor's own outer dims).
 *   same dtype              byte copy (strided elements for plain types)
 *   f32/f16/bf16 <-> each   converted element by element (RNE)
 *   quantized -> f32        dequantized (runtime/quant.c)
 *   f32 -> quantized        reference quantizer
 */
#include "backends/cpu/cpu_internal.h"

#include "base/err.h"
#include "runtime/quant.h"

#include <string.h>

void cpu_f16_to_f32_ref(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = rt_f16_to_f32(x[i]);
}

void cpu_bf16_to_f32_ref(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = rt_bf16_to_f32(x[i]);
}

void cpu_f32_to_f16_ref(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = rt_f32_to_f16(x[i]);
}

typedef struct {
    const cpu_kernels *k;
    rt_tensor *dst;
    const rt_tensor *src;
    int64_t len;
} copy_job;

static inline float load_f(rt_dtype t, const char *p) {
    switch (t) {
    case RT_F16: return rt_f16_to_f32(*(const uint16_t *)p);
    case RT_BF16: return rt_bf16_to_f32(*(const uint16_t *)p);
    default: return *(const float *)p;
    }
}

static inline void store_f(rt_dtype t, char *p, float v) {
    switch (t) {
    case RT_F16: *(uint16_t *)p = rt_f32_to_f16(v); break;
    case RT_BF16: *(uint16_t *)p = rt_f32_to_bf16(v); break;
    default: *(float *)p = v; break;
    }
}

static void copy_task(void *ctxp, int64_t r, int thread) {
    (void)thread;
    const copy_job *j = ctxp;
    const rt_tensor *s = j->src;
    rt_tensor *d = j->dst;
    const char *sp = rt_tensor_row(s, r);
    char *dp = rt_tensor_row(d, r);
    const rt_dtype_traits *st = rt_dtype_info(s->dtype), *dt = rt_dtype_info(d->dtype);
    int64_t ss = s->stride[s->ndim - 1], ds = d->stride[d->ndim - 1];
    if (st->quantized || dt->quantized) {
        if (s->dtype == d->dtype)
            memmove(dp, sp, rt_dtype_row_bytes(s->dtype, j->len));
        else if (st->quantized)
            rt_dequant_row(s->dtype, sp, (float *)dp, j->len);
        else
            rt_quant_row(d->dtype, (const float *)sp, dp, j->len);
        return;
    }
    if (d->dtype == RT_F16 && ds == 2 && s->dtype == RT_F32 && ss == 4) {
        j->k->f32_to_f16((const float *)sp, (uint16_t *)dp, j->len);
        return;
    }
    if (d->dtype == RT_F32 && ds == 4 && ss == 2 && (s->dtype == RT_F16 || s->dtype == RT_BF16)) {
        if (s->dtype == RT_F16)
            j->k->f16_to_f32((const uint16_t *)sp, (float *)dp, j->len);
        else
            j->k->bf16_to_f32((const uint16_t *)sp, (float *)dp, j->len);
        return;
    }
    if (s->dtype == d->dtype) {
        if (ss == st->block_bytes && ds == dt->block_bytes) {
            memmove(dp, sp, (size_t)j->len * (size_t)st->block_bytes);
        } else {
            for (int64_t i = 0; i < j->len; i++)
                memcpy(dp + i * ds, sp + i * ss, (size_t)st->block_bytes);
        }
        return;
    }
    for (int64_t i = 0; i < j->len; i++) store_f(d->dtype, dp + i * ds, load_f(s->dtype, sp + i * ss));
}

static bool is_float(rt_dtype t) { return t == RT_F32 || t == RT_F16 || t == RT_BF16; }

int cpu_op_copy(rt_backend *be, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    const rt_tensor *s = a->src[0];
    rt_tensor *d = a->dst;
    bool sq = rt_dtype_info(s->dtype)->quantized, dq = rt_dtype_info(d->dtype)->quantized;
    bool ok = s->dtype == d->dtype || (is_float(s->dtype) && is_float(d->dtype)) ||
              (sq && d->dtype == RT_F32) || (dq && s->dtype == RT_F32);
    if (!ok)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu copy: %s -> %s", rt_dtype_name(s->dtype),
                          rt_dtype_name(d->dtype));
    if ((sq && !dq && d->stride[d->ndim - 1] != 4) || (dq && !sq && s->stride[s->ndim - 1] != 4))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu copy: (de)quantized rows must be contiguous");
    int64_t len = s->shape[s->ndim - 1];
    const rt_dtype_traits *qt = rt_dtype_info(sq ? s->dtype : d->dtype);
    if ((sq || dq) && len % qt->block_elems)
        return vc_err_set(VC_ERR_INVALID, "cpu copy: row of %lld not a multiple of %d",
                          (long long)len, qt->block_elems);
    copy_job j = {.k = c->k, .dst = d, .src = s, .len = len};
    cpu_parallel(c, rt_tensor_nrows(s), copy_task, &j, rt_tensor_nelem(s));
    return VC_OK;
}
