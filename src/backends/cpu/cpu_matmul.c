/* cpu_matmul — MATMUL driver: y[n,out] = x[n,in] · W[out,in]^T (+ bias).
 *
 * Weight types with GEMV/GEMM-tile kernels (cpu_kernels.gv) go to
 * cpu_gemm.c; the others take the path below.
 * 1. Activations are prepared once: f32 rows as they are for f32/f16/bf16
 *    weights, else quantized into scratch (Q8a for Q4_0/Q4_1/Q8_0, Q8_K for
 *    K-quants), in parallel over rows when there are many.
 * 2. Output columns are split into chunks of R weight rows (one task each,
 *    claimed dynamically; decode: one contiguous range per thread, see
 *    cpu_parallel_ranges, with the weights prefetched PF_BYTES ahead). A task walks k in slices of KB elements; per
 *    slice, each group of CPU_MM_M tokens (in L1) meets each of the task's
 *    R weight-row slices (sized to stay in L2 for prefill), and the slice's
 *    partial dot products are added to y. Weights come from memory once
 *    per task.
 * An output element's accumulation order depends only on n and the shapes
 * (never on the thread count), so results are identical for any number of
 * threads, and not on n either: decode and prefill take the same k slices
 * and kernels, so a token's result is the same alone or in any batch.
 */
#include "backends/cpu/cpu_internal.h"

#include "base/err.h"

#include <string.h>

#define L2_BUDGET (256 * 1024) /* weight bytes of one k-slice per prefill task */
#define KB 1024                 /* k-slice: a multiple of every block size */
#define PF_BYTES 8192           /* decode: weights requested this far ahead */

typedef struct {
    cpu_mm_fn fn;
    cpu_mmp_fn fnp; /* prefill multi-row kernel or NULL */
    int mmp_rows;
    rt_dtype wt;
    int64_t act_blk;          /* activation block: elements and bytes */
    size_t act_blk_bytes;
    const char *w;
    size_t w_stride; /* bytes between weight rows */
    const char *act;
    size_t act_stride; /* bytes between prepared activation rows */
    float *y;
    size_t y_stride; /* floats between output rows */
    const float *bias;
    int64_t n, out, in, rows_per_task, kslice;
} mm_job;

/* all cache lines of [p, p + bytes) */
static inline void prefetch_lines(const char *p, size_t bytes) {
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)63, e = (uintptr_t)p + bytes;
    for (; a < e; a += 64) __builtin_prefetch((const void *)a, 0, 3);
}

/* weight rows [r0, r1) against all n tokens */
static void mm_rows(const mm_job *j, int64_t r0, int64_t r1) {
    for (int64_t k0 = 0; k0 < j->in; k0 += j->kslice) {
        int64_t klen = j->in - k0 < j->kslice ? j->in - k0 : j->kslice;
        size_t woff = rt_dtype_row_bytes(j->wt, k0), aoff = (size_t)(k0 / j->act_blk) * j->act_blk_bytes;
        /* decode streams each row slice once: the hardware prefetcher does
         * not follow short strided runs (nor cross 4 KiB pages), so the
         * slice PF_BYTES ahead is requested before each row is computed */
        size_t sbytes = rt_dtype_row_bytes(j->wt, klen);
        int64_t ahead = j->n <= CPU_MM_M ? (int64_t)((PF_BYTES + sbytes - 1) / sbytes) : 0;
        for (int64_t t = 0; t < j->n; t += CPU_MM_M) {
            int m = (int)(j->n - t < CPU_MM_M ? j->n - t : CPU_MM_M);
            const char *act = j->act + t * j->act_stride + aoff;
            float *y = j->y + t * j->y_stride;
            for (int64_t r = r0; r < r1;) {
                float part[CPU_MM_M * CPU_MMP_R];
                int nr = 1;
                if (ahead && r + ahead < j->out)
                    for (int rr = 0; rr < (j->fnp ? j->mmp_rows : 1); rr++)
                        prefetch_lines(j->w + (r + ahead + rr) * j->w_stride + woff, sbytes);
                if (j->fnp) {
                    nr = (int)(r1 - r < j->mmp_rows ? r1 - r : j->mmp_rows);
                    j->fnp(klen, j->w + r * j->w_stride + woff, j->w_stride, nr, act,
                           j->act_stride, m, part, CPU_MMP_R);
                } else {
                    j->fn(klen, j->w + r * j->w_stride + woff, act, j->act_stride, m, part,
                          CPU_MMP_R);
                }
                for (int rr = 0; rr < nr; rr++, r++) {
                    if (k0 == 0)
                        for (int i = 0; i < m; i++) y[i * j->y_stride + r] = part[i * CPU_MMP_R + rr];
                    else
                        for (int i = 0; i < m; i++) y[i * j->y_stride + r] += part[i * CPU_MMP_R + rr];
                }
            }
        }
    }
    if (j->bias)
        for (int64_t t = 0; t < j->n; t++) {
            float *y = j->y + t * j->y_stride;
            for (int64_t r = r0; r < r1; r++) y[r] += j->bias[r];
        }
}

/* prefill: row chunks claimed dynamically */
static void mm_task(void *ctxp, int64_t task, int thread) {
    (void)thread;
    const mm_job *j = ctxp;
    int64_t r0 = task * j->rows_per_task;
    mm_rows(j, r0, r0 + j->rows_per_task < j->out ? r0 + j->rows_per_task : j->out);
}

/* decode: units of MM_UNIT rows, one contiguous range per thread */
#define MM_UNIT 8
static void mm_units(void *ctxp, int64_t u0, int64_t u1, int thread) {
    (void)thread;
    const mm_job *j = ctxp;
    mm_rows(j, u0 * MM_UNIT, u1 * MM_UNIT < j->out ? u1 * MM_UNIT : j->out);
}

typedef struct {
    const cpu_kernels *k;
    int kquant;
    const char *x;
    size_t x_stride;
    char *act;
    size_t act_stride;
    int64_t in;
} quant_job;

static void quant_task(void *ctxp, int64_t t, int thread) {
    (void)thread;
    const quant_job *q = ctxp;
    const float *x = (const float *)(q->x + t * q->x_stride);
    if (q->kquant)
        q->k->quant_q8k(x, (rt_block_q8_K *)(q->act + t * q->act_stride), q->in);
    else
        q->k->quant_q8a(x, (cpu_block_q8a *)(q->act + t * q->act_stride), q->in);
}

void cpu_quant_rows(cpu_ctx *c, int kquant, const void *x, size_t xs, char *act, size_t arow,
                    int64_t n, int64_t in) {
    quant_job q = {.k = c->k, .kquant = kquant, .x = x, .x_stride = xs, .act = act,
                   .act_stride = arow, .in = in};
    cpu_parallel(c, n, quant_task, &q, n * in);
}

/* Bytes between rows of a tensor viewed as [rows, last], or 0 when the rows
 * are not evenly spaced (a view we do not handle here). */
static size_t row_stride(const rt_tensor *t) {
    if (rt_tensor_is_contiguous(t)) return rt_dtype_row_bytes(t->dtype, t->shape[t->ndim - 1]);
    if (t->ndim == 2) return (size_t)t->stride[0];
    return 0;
}

int cpu_op_matmul(rt_backend *be, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    const rt_tensor *x = a->src[0], *w = a->src[1], *bias = a->src[2];
    rt_tensor *dst = a->dst;
    int64_t in = w->shape[1], out = w->shape[0], n = rt_tensor_nrows(x);
    const rt_dtype_traits *wt = rt_dtype_info(w->dtype);
    cpu_mm_fn fn = c->k->mm[w->dtype];
    if (!fn) return vc_err_set(VC_ERR_UNSUPPORTED, "cpu matmul: weight dtype %s", wt->name);
    if (in % wt->block_elems)
        return vc_err_set(VC_ERR_INVALID, "cpu matmul: in=%lld not a multiple of %s block %d",
                          (long long)in, wt->name, wt->block_elems);
    size_t xs = row_stride(x), ys = row_stride(dst);
    if (!xs || !ys || (x->stride[x->ndim - 1] != 4) || dst->stride[dst->ndim - 1] != 4 ||
        (bias && !rt_tensor_is_contiguous(bias)))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu matmul: x/dst rows must be evenly strided");
    if (n == 0 || out == 0) return VC_OK;
    if (c->k->gv[w->dtype])
        return cpu_matmul_chain(c, x, xs, w, dst->data, ys / sizeof(float), bias ? bias->data : NULL);

    mm_job j = {.fn = fn, .wt = w->dtype, .w = w->data, .w_stride = (size_t)w->stride[0], .y = dst->data,
                .y_stride = ys / sizeof(float), .bias = bias ? bias->data : NULL, .n = n,
                .out = out, .in = in};
    if (w->dtype == RT_F32 || w->dtype == RT_F16 || w->dtype == RT_BF16) {
        j.act = x->data;
        j.act_stride = xs;
        j.act_blk = 1;
        j.act_blk_bytes = sizeof(float);
    } else {
        int kquant = wt->block_elems == RT_QK_K;
        size_t arow = kquant ? (size_t)(in / RT_QK_K) * sizeof(rt_block_q8_K)
                             : (size_t)(in / RT_QK) * sizeof(cpu_block_q8a);
        char *act = cpu_scratch(c, arow * (size_t)n);
        if (!act) return VC_ERR_OOM;
        cpu_quant_rows(c, kquant, x->data, xs, act, arow, n, in);
        j.act = act;
        j.act_stride = arow;
        j.act_blk = kquant ? RT_QK_K : RT_QK;
        j.act_blk_bytes = kquant ? sizeof(rt_block_q8_K) : sizeof(cpu_block_q8a);
    }
    /* ~8 tasks per thread for balance, chunks of 8..128 rows; for prefill
     * also at most ~256 KiB of weights per task so they stay in L2 while
     * every token group passes over them. */
    int64_t rpt = out / ((int64_t)c->n_threads * 8);
    if (n > CPU_MM_M) {
        int64_t l2rows = (int64_t)(L2_BUDGET / rt_dtype_row_bytes(w->dtype, in < KB ? in : KB));
        if (rpt > l2rows) rpt = l2rows;
    }
    rpt = rpt < 8 ? 8 : rpt > 128 ? 128 : (rpt + 7) & ~(int64_t)7;
    /* and at least ~CPU_MIN_PAR_WORK/4 multiply-adds per task */
    int64_t min_rows = (CPU_MIN_PAR_WORK / 4) / (n * in) + 1;
    if (rpt < min_rows) rpt = (min_rows + 7) & ~(int64_t)7;
    j.rows_per_task = rpt;
    /* Batch invariance: every n walks k in the same KB slices with the same
     * kernels, so a token's outputs are bit-identical alone (decode) and
     * inside any batch (prefill, mixed steps). Seeded sampling and greedy
     * ties then do not depend on what else the engine runs. */
    j.kslice = c->k->chain[w->dtype] ? in : KB; /* chain types: one pass over k */
    j.fnp = c->k->mmp[w->dtype];
    j.mmp_rows = c->k->mmp_rows;
    if (n <= CPU_MM_M) /* decode: claims of 2 units (results do not depend on the split) */
        cpu_parallel_ranges(c, (out + MM_UNIT - 1) / MM_UNIT, 2, mm_units, &j, n * in * out);
    else
        cpu_parallel(c, (out + rpt - 1) / rpt, mm_task, &j, n * in * out);
    return VC_OK;
}
