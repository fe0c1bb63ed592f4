/* cpu_elementwise — GLU, ADD, SCALE (chunk-parallel) and ARGMAX (rows). */
#include "backends/cpu/cpu_internal.h"

#include "base/err.h"

#include <math.h>

#define CHUNK 4096 /* elements per task of a flat elementwise op */

static inline float silu(float g) { return g / (1.0f + expf(-g)); }

static inline float gelu_tanh(float g) {
    const float k0 = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * g * (1.0f + tanhf(k0 * (g + 0.044715f * g * g * g)));
}

void cpu_glu_ref(const float *g, const float *u, float *y, int64_t n, int act) {
    if (act == RT_ACT_GELU_TANH)
        for (int64_t i = 0; i < n; i++) y[i] = gelu_tanh(g[i]) * u[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = silu(g[i]) * u[i];
}

void cpu_add_ref(const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void cpu_scale_ref(const float *a, float s, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] * s;
}

typedef enum { EW_GLU, EW_ADD, EW_SCALE } ew_kind;

typedef struct {
    const cpu_kernels *k;
    ew_kind kind;
    rt_tensor *dst;
    const rt_tensor *a, *b;
    float s;
    int act;
    int flat;      /* all contiguous: one row of nelem */
    int64_t len;   /* row length (or nelem when flat) */
    int64_t nrows; /* rows (1 when flat) */
} ew_job;

static void ew_apply(const ew_job *j, const float *a, const float *b, float *y, int64_t n) {
    switch (j->kind) {
    case EW_GLU: j->k->glu(a, b, y, n, j->act); break;
    case EW_ADD: j->k->add(a, b, y, n); break;
    case EW_SCALE: j->k->scale(a, j->s, y, n); break;
    }
}

static void ew_task(void *ctxp, int64_t t, int thread) {
    (void)thread;
    const ew_job *j = ctxp;
    if (j->flat) {
        int64_t i0 = t * CHUNK, n = j->len - i0 < CHUNK ? j->len - i0 : CHUNK;
        const float *b = j->b ? (const float *)j->b->data + i0 : NULL;
        ew_apply(j, (const float *)j->a->data + i0, b, (float *)j->dst->data + i0, n);
    } else {
        const float *b = j->b ? rt_tensor_row(j->b, t) : NULL;
        ew_apply(j, rt_tensor_row(j->a, t), b, rt_tensor_row(j->dst, t), j->len);
    }
}

static int ew_run(rt_backend *be, ew_kind kind, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    ew_job j = {.k = c->k, .kind = kind, .dst = a->dst, .a = a->src[0],
                .b = kind == EW_SCALE ? NULL : a->src[1]};
    if (kind == EW_GLU) j.act = a->p.glu.act;
    if (kind == EW_SCALE) j.s = a->p.scale.s;
    if (j.act != RT_ACT_SILU && j.act != RT_ACT_GELU_TANH)
        return vc_err_set(VC_ERR_INVALID, "glu: unknown activation %d", j.act);
    j.flat = rt_tensor_is_contiguous(j.dst) && rt_tensor_is_contiguous(j.a) &&
             (!j.b || rt_tensor_is_contiguous(j.b));
    if (j.flat) {
        j.len = rt_tensor_nelem(j.dst);
        /* GLU's exp/divide costs ~8 adds per element */
        cpu_parallel(c, (j.len + CHUNK - 1) / CHUNK, ew_task, &j, kind == EW_GLU ? 8 * j.len : j.len);
        return VC_OK;
    }
    if (j.dst->stride[j.dst->ndim - 1] != 4 || j.a->stride[j.a->ndim - 1] != 4 ||
        (j.b && j.b->stride[j.b->ndim - 1] != 4))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu elementwise: rows must be contiguous");
    j.len = j.dst->shape[j.dst->ndim - 1];
    j.nrows = rt_tensor_nrows(j.dst);
    cpu_parallel(c, j.nrows, ew_task, &j, (kind == EW_GLU ? 8 : 1) * j.nrows * j.len);
    return VC_OK;
}

int cpu_op_glu(rt_backend *be, const rt_op_args *a) { return ew_run(be, EW_GLU, a); }
int cpu_op_add(rt_backend *be, const rt_op_args *a) { return ew_run(be, EW_ADD, a); }
int cpu_op_scale(rt_backend *be, const rt_op_args *a) { return ew_run(be, EW_SCALE, a); }

/* ---- ARGMAX ------------------------------------------------------------- */

typedef struct {
    rt_tensor *dst;
    const rt_tensor *src;
    int64_t len;
} argmax_job;

static void argmax_task(void *ctxp, int64_t r, int thread) {
    (void)thread;
    const argmax_job *j = ctxp;
    const float *x = rt_tensor_row(j->src, r);
    int64_t best = -1;
    float bv = 0.0f;
    for (int64_t i = 0; i < j->len; i++) {
        float v = x[i];
        if (isnan(v)) continue; /* NaN never wins */
        if (best < 0 || v > bv) {
            best = i;
            bv = v;
        }
    }
    ((int32_t *)j->dst->data)[r] = (int32_t)(best < 0 ? 0 : best);
}

int cpu_op_argmax(rt_backend *be, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    const rt_tensor *src = a->src[0];
    if (src->stride[src->ndim - 1] != 4 || !rt_tensor_is_contiguous(a->dst))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu argmax: rows must be contiguous");
    argmax_job j = {.dst = a->dst, .src = src, .len = src->shape[src->ndim - 1]};
    cpu_parallel(c, rt_tensor_nrows(src), argmax_task, &j, rt_tensor_nelem(src));
    return VC_OK;
}
