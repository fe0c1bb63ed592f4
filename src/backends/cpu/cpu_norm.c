/* cpu_norm — RMSNORM and SOFTMAX: row-parallel drivers + scalar rows. */
#include "backends/cpu/cpu_internal.h"

#include "base/err.h"

#include <math.h>

void cpu_rmsnorm_ref(const float *x, const float *w, float *y, int64_t d, float eps, float w_off) {
    double ss = 0.0;
    for (int64_t i = 0; i < d; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
    for (int64_t i = 0; i < d; i++) y[i] = x[i] * r * (w_off + w[i]);
}

/* exp(x - max) / sum; a row of all -inf (nothing to attend) becomes uniform. */
void cpu_softmax_ref(const float *x, float *y, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    if (mx == -INFINITY) {
        for (int64_t i = 0; i < n; i++) y[i] = 1.0f / (float)n;
        return;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        y[i] = expf(x[i] - mx);
        sum += y[i];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) y[i] *= inv;
}

typedef struct {
    const cpu_kernels *k;
    rt_tensor *dst;
    const rt_tensor *x, *w;
    float eps, w_off;
    int64_t d, rows_per_task, nrows;
} rows_job;

static int64_t rows_per_task(int64_t nrows, int64_t d, int n_threads) {
    /* ~16K elements per task, but at least one task per thread when possible */
    int64_t r = 16384 / (d > 0 ? d : 1);
    if (r < 1) r = 1;
    int64_t cap = (nrows + n_threads - 1) / n_threads;
    return r > cap ? (cap > 0 ? cap : 1) : r;
}

static void rmsnorm_task(void *ctxp, int64_t t, int thread) {
    (void)thread;
    const rows_job *j = ctxp;
    int64_t r1 = (t + 1) * j->rows_per_task;
    for (int64_t r = t * j->rows_per_task; r < r1 && r < j->nrows; r++)
        j->k->rmsnorm(rt_tensor_row(j->x, r), j->w->data, rt_tensor_row(j->dst, r), j->d, j->eps,
                      j->w_off);
}

static void softmax_task(void *ctxp, int64_t t, int thread) {
    (void)thread;
    const rows_job *j = ctxp;
    int64_t r1 = (t + 1) * j->rows_per_task;
    for (int64_t r = t * j->rows_per_task; r < r1 && r < j->nrows; r++)
        j->k->softmax(rt_tensor_row(j->x, r), rt_tensor_row(j->dst, r), j->d);
}

static bool rows_ok(const rt_tensor *t) { return t->stride[t->ndim - 1] == 4; }

int cpu_op_rmsnorm(rt_backend *be, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    if (a->src[0]->dtype != RT_F32 || a->dst->dtype != RT_F32)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu rmsnorm: f32 x and dst only (got %s, %s)",
                          rt_dtype_name(a->src[0]->dtype), rt_dtype_name(a->dst->dtype));
    if (!rows_ok(a->dst) || !rows_ok(a->src[0]) || !rt_tensor_is_contiguous(a->src[1]))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu rmsnorm: rows must be contiguous");
    rows_job j = {.k = c->k, .dst = a->dst, .x = a->src[0], .w = a->src[1],
                  .eps = a->p.rmsnorm.eps, .w_off = a->p.rmsnorm.w_offset,
                  .d = a->src[0]->shape[a->src[0]->ndim - 1], .nrows = rt_tensor_nrows(a->src[0])};
    j.rows_per_task = rows_per_task(j.nrows, j.d, c->n_threads);
    cpu_parallel(c, (j.nrows + j.rows_per_task - 1) / j.rows_per_task, rmsnorm_task, &j,
                 j.nrows * j.d);
    return VC_OK;
}

int cpu_op_softmax(rt_backend *be, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    if (!rows_ok(a->dst) || !rows_ok(a->src[0]))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu softmax: rows must be contiguous");
    rows_job j = {.k = c->k, .dst = a->dst, .x = a->src[0],
                  .d = a->src[0]->shape[a->src[0]->ndim - 1], .nrows = rt_tensor_nrows(a->src[0])};
    j.rows_per_task = rows_per_task(j.nrows, j.d, c->n_threads);
    cpu_parallel(c, (j.nrows + j.rows_per_task - 1) / j.rows_per_task, softmax_task, &j,
                 j.nrows * j.d * 4);
    return VC_OK;
}
