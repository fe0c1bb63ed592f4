/* cpu_gemm — MATMUL driver for the "chain" weight types that have GEMV and
 * GEMM-tile kernels (cpu_kernels.gv/gm; see cpu_internal.h):
 *
 * 1. Activations are quantized per row (Q8a / Q8_K), in parallel.
 * 2. Each group of 8 tokens is interleaved (cpu_block_q8a_x8 /
 *    cpu_block_q8k_x8) for the tiles; a partial last group of at least
 *    cpu_kernels.gm_min tokens is padded with zero activations and takes
 *    a tile too (the break-even of that kernel and the GEMV), a smaller
 *    one (so decode of 1-2 rows) goes through the 8-row GEMV.
 * 3. Decode (n <= 8 * DEC_GROUPS tokens) gives each thread one contiguous
 *    range of 8-row units that it walks front to back, one sequential
 *    weight stream: per unit the two 4-row panels are unpacked (the
 *    32-element types' pk prefetches the next panel as it goes) and met
 *    at once by every tile group, then the GEMV takes the tokens left
 *    over on the same rows (it prefetches the next 8 rows itself). A thread that finishes its range
 *    takes units from the back of another's, so a late or preempted
 *    thread does not hold up the step. The weights are read from memory
 *    once per step.
 * 4. Prefill: tasks are rectangles, a chunk of weight rows x a range of
 *    token groups, so both threads have work even when a layer has few
 *    rows; a task unpacks its chunk once and walks its token groups, per
 *    group its rows in tiles of 4 (the chunk's panels stay in L2).
 * Every kernel follows the chain arithmetic over the full k, so a token's
 * row is bit-identical whatever n is, which tile or task it lands in, and
 * how many threads run.
 */
#include "backends/cpu/cpu_internal.h"

#include "base/err.h"

#include <string.h>

#define PANEL_BUDGET (256 * 1024) /* unpacked weight panels of one prefill task (L2) */
/* Token groups up to which a step is decode-shaped (ranges of 8-row units,
 * each panel used by every group as soon as it is unpacked). */
#define DEC_GROUPS 2
#define DEC_CLAIM 2 /* 8-row units per claim */

typedef struct {
    const cpu_kernels *k;
    rt_dtype wt;
    const char *w;
    size_t ws;
    int64_t in, out, n;
    const char *act; /* row layout */
    size_t as;
    const char *act8; /* interleaved groups */
    size_t a8s;       /* bytes per group */
    int64_t ng;       /* groups of 8 tokens through the tiles (the last may be partial) */
    float *y;
    size_t ys;
    const float *bias;
    int64_t rc, n_tc, upt, n_units; /* prefill tasks */
    char *panels;      /* per thread: rc/4 panels (prefill) or 1 (decode) of tile_bytes */
    size_t tile_bytes; /* one panel: 4 rows x in */
} gemm_job;

/* tokens of group u that are real (the last group may be partial) */
static inline int group_count(const gemm_job *j, int64_t u) {
    return j->n - 8 * u < 8 ? (int)(j->n - 8 * u) : 8;
}

/* GEMV of tokens [t0, t1) over rows [r0, r1): 8-row tiles, then the
 * per-row kernel for a tail of < 8 rows */
static void gemv_rows(const gemm_job *j, int64_t t0, int64_t t1, int64_t r0, int64_t r1) {
    cpu_gv_fn gv = j->k->gv[j->wt];
    cpu_mm_fn mm = j->k->mm[j->wt];
    for (int64_t t = t0; t < t1; t += CPU_MM_M) {
        int m = (int)(t1 - t < CPU_MM_M ? t1 - t : CPU_MM_M);
        const char *a = j->act + t * j->as;
        float *y = j->y + t * j->ys;
        int64_t r = r0;
        for (; r + 8 <= r1; r += 8) gv(j->in, j->w + r * j->ws, j->ws, a, j->as, m, y + r, j->ys);
        for (; r < r1; r++) mm(j->in, j->w + r * j->ws, a, j->as, m, y + r, j->ys);
    }
}

static void add_bias(const gemm_job *j, int64_t t0, int64_t t1, int64_t r0, int64_t r1) {
    for (int64_t t = t0; t < t1; t++) {
        float *y = j->y + t * j->ys;
        for (int64_t r = r0; r < r1; r++) y[r] += j->bias[r];
    }
}

/* ---- decode: per-thread ranges of 8-row units -------------------------- */

/* units [u0, u1): rows 8*u0 .. min(8*u1, out), every token */
static void decode_units(void *ctxp, int64_t u0, int64_t u1, int thread) {
    const gemm_job *j = ctxp;
    int64_t r0 = 8 * u0, r1 = 8 * u1 < j->out ? 8 * u1 : j->out;
    if (j->ng) {
        char *panel = j->panels + (size_t)thread * j->tile_bytes;
        cpu_gm_fn gm = j->k->gm[j->wt];
        for (int64_t r = r0; r < r1; r += 4) {
            int nr = (int)(r1 - r < 4 ? r1 - r : 4);
            j->k->pk[j->wt](j->in, j->w + r * j->ws, j->ws, nr, panel);
            for (int64_t g = 0; g < j->ng; g++)
                gm(j->in, panel, nr, j->act8 + g * j->a8s, group_count(j, g), j->y + 8 * g * j->ys + r,
                   j->ys);
        }
    }
    int64_t t0 = 8 * j->ng < j->n ? 8 * j->ng : j->n;
    gemv_rows(j, t0, j->n, r0, r1);
    if (j->bias) add_bias(j, 0, j->n, r0, r1);
}

/* ---- prefill: rectangles of row chunks x token groups ------------------- */

static void gemm_task(void *ctxp, int64_t task, int thread) {
    const gemm_job *j = ctxp;
    int64_t r0 = (task / j->n_tc) * j->rc, u0 = (task % j->n_tc) * j->upt;
    int64_t r1 = r0 + j->rc < j->out ? r0 + j->rc : j->out;
    int64_t u1 = u0 + j->upt < j->n_units ? u0 + j->upt : j->n_units;
    cpu_gm_fn gm = j->k->gm[j->wt];
    char *panels = j->panels + (size_t)thread * (size_t)(j->rc / 4) * j->tile_bytes;
    if (u0 < j->ng)
        for (int64_t r = r0; r < r1; r += 4)
            j->k->pk[j->wt](j->in, j->w + r * j->ws, j->ws, (int)(r1 - r < 4 ? r1 - r : 4),
                            panels + (size_t)((r - r0) / 4) * j->tile_bytes);
    for (int64_t u = u0; u < u1; u++) {
        if (u >= j->ng) { /* a short last group */
            gemv_rows(j, 8 * u, 8 * u + group_count(j, u), r0, r1);
            continue;
        }
        for (int64_t r = r0; r < r1; r += 4) {
            int nr = (int)(r1 - r < 4 ? r1 - r : 4);
            gm(j->in, panels + (size_t)((r - r0) / 4) * j->tile_bytes, nr, j->act8 + u * j->a8s,
               group_count(j, u), j->y + 8 * u * j->ys + r, j->ys);
        }
    }
    if (j->bias) add_bias(j, 8 * u0, 8 * u1 < j->n ? 8 * u1 : j->n, r0, r1);
}

typedef struct {
    int kquant;
    const char *act;
    size_t as;
    char *act8;
    size_t a8s;
    int64_t nb, n;
} ilv_job;

static inline int32_t pair16(int v0, int v1) {
    return (int32_t)((uint32_t)(uint16_t)v0 | (uint32_t)(uint16_t)v1 << 16);
}

/* interleave token group g (8 rows of quantized activations; tokens past
 * n are zeros: d = 0 and sums 0, so their lanes compute 0) */
static void ilv_task(void *ctxp, int64_t g, int thread) {
    (void)thread;
    const ilv_job *j = ctxp;
    const char *rows = j->act + 8 * g * j->as;
    int cnt = j->n - 8 * g < 8 ? (int)(j->n - 8 * g) : 8;
    if (cnt < 8) memset(j->act8 + g * j->a8s, 0, j->a8s);
    if (!j->kquant) {
        cpu_block_q8a_x8 *o = (cpu_block_q8a_x8 *)(j->act8 + g * j->a8s);
        for (int64_t b = 0; b < j->nb; b++, o++)
            for (int t = 0; t < cnt; t++) {
                const cpu_block_q8a *a = (const cpu_block_q8a *)(rows + t * j->as) + b;
                o->d[t] = a->d;
                o->sum[t] = a->sum;
                for (int s = 0; s < RT_QK / 4; s++) memcpy(o->qs + (8 * s + t) * 4, a->qs + 4 * s, 4);
            }
        return;
    }
    cpu_block_q8k_x8 *o = (cpu_block_q8k_x8 *)(j->act8 + g * j->a8s);
    for (int64_t b = 0; b < j->nb; b++, o++)
        for (int t = 0; t < cnt; t++) {
            const rt_block_q8_K *a = (const rt_block_q8_K *)(rows + t * j->as) + b;
            const int16_t *bs = a->bsums;
            o->d[t] = a->d;
            for (int p = 0; p < 8; p++) o->bs[p][t] = pair16(bs[2 * p], bs[2 * p + 1]);
            for (int p = 0; p < 4; p++)
                o->as[p][t] = pair16(bs[4 * p] + bs[4 * p + 1], bs[4 * p + 2] + bs[4 * p + 3]);
            for (int s = 0; s < RT_QK_K / 4; s++) memcpy(o->qs + (8 * s + t) * 4, a->qs + 4 * s, 4);
        }
}

int cpu_matmul_chain(cpu_ctx *c, const rt_tensor *x, size_t xs, const rt_tensor *w, float *y,
                     size_t ys, const float *bias) {
    int64_t in = w->shape[1], out = w->shape[0], n = rt_tensor_nrows(x);
    int kquant = rt_dtype_info(w->dtype)->block_elems == RT_QK_K;
    int64_t nb = kquant ? in / RT_QK_K : in / RT_QK;
    size_t arow = (size_t)nb * (kquant ? sizeof(rt_block_q8_K) : sizeof(cpu_block_q8a));
    size_t a8s = (size_t)nb * (kquant ? sizeof(cpu_block_q8k_x8) : sizeof(cpu_block_q8a_x8));
    int64_t ng = 0, tail_min = c->k->gm_min[w->dtype] ? c->k->gm_min[w->dtype] : 8;
    if (c->k->gm[w->dtype]) ng = n / 8 + (n % 8 >= tail_min ? 1 : 0);
    int decode = n <= 8 * DEC_GROUPS;
    size_t abytes = (arow * (size_t)n + 63) & ~(size_t)63;
    size_t a8bytes = (a8s * (size_t)ng + 63) & ~(size_t)63;
    /* prefill rows per task: as many 4-row panels as fit PANEL_BUDGET, 8..32 */
    size_t tile_bytes = ng ? (c->k->pk_bytes[w->dtype] * (size_t)in + 255) / 256 : 0;
    int64_t rc = 32;
    if (ng) {
        int64_t tiles = (int64_t)(PANEL_BUDGET / tile_bytes);
        rc = 4 * tiles / 8 * 8;
        rc = rc < 8 ? 8 : rc > 32 ? 32 : rc;
    }
    size_t pbytes = ng ? (size_t)c->n_threads * (size_t)(decode ? 1 : rc / 4) * tile_bytes : 0;
    char *act = cpu_scratch(c, abytes + a8bytes + pbytes);
    if (!act) return VC_ERR_OOM;
    cpu_quant_rows(c, kquant, x->data, xs, act, arow, n, in);
    if (ng) {
        ilv_job il = {.kquant = kquant, .act = act, .as = arow, .act8 = act + abytes, .a8s = a8s,
                      .nb = nb, .n = n};
        cpu_parallel(c, ng, ilv_task, &il, ng * 8 * in);
    }
    gemm_job j = {.k = c->k, .wt = w->dtype, .w = w->data, .ws = (size_t)w->stride[0], .in = in,
                  .out = out, .n = n, .act = act, .as = arow, .act8 = act + abytes, .a8s = a8s,
                  .ng = ng, .y = y, .ys = ys, .bias = bias, .n_units = (n + 7) / 8,
                  .panels = act + abytes + a8bytes, .tile_bytes = tile_bytes};
    if (decode) {
        cpu_parallel_ranges(c, (out + 7) / 8, DEC_CLAIM, decode_units, &j, n * in * out);
        return VC_OK;
    }
    /* prefill: rows per task as above, and token ranges split until there
     * are ~8 tasks per thread */
    j.rc = rc;
    int64_t n_rc = (out + rc - 1) / rc;
    int64_t n_tc = ((int64_t)c->n_threads * 8 + n_rc - 1) / n_rc;
    if (n_tc > j.n_units) n_tc = j.n_units;
    if (n_tc < 1) n_tc = 1;
    j.upt = (j.n_units + n_tc - 1) / n_tc;
    j.n_tc = (j.n_units + j.upt - 1) / j.upt;
    cpu_parallel(c, n_rc * j.n_tc, gemm_task, &j, n * in * out);
    return VC_OK;
}
