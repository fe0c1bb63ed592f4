/* cpu_backend — the CPU rt_backend: host memory, a thread pool, and the
 * registration of every op kernel. */
#include "backends/cpu/cpu_internal.h"

#include "base/err.h"
#include "base/log.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

void cpu_backend_register(void);

static void *cpu_alloc(rt_backend *be, size_t bytes) {
    (void)be;
    size_t n = (bytes + 63) & ~(size_t)63;
    if (n < bytes) n = bytes; /* overflow: let aligned_alloc fail */
    void *p = aligned_alloc(64, n ? n : 64);
    if (!p) vc_err_set(VC_ERR_OOM, "cpu: cannot allocate %zu bytes", bytes);
    return p;
}

static void cpu_free(rt_backend *be, void *p) {
    (void)be;
    free(p);
}

static int cpu_copy(rt_backend *be, void *dst, rt_device dst_dev, const void *src,
                    rt_device src_dev, size_t n) {
    (void)be;
    if (dst_dev != RT_DEV_CPU || src_dev != RT_DEV_CPU)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu backend copies host memory only");
    if (n) memmove(dst, src, n);
    return VC_OK;
}

static int cpu_sync(rt_backend *be) {
    (void)be; /* ops complete before they return */
    return VC_OK;
}

static void cpu_destroy(rt_backend *be) {
    cpu_ctx *c = be->ctx;
    cpu_pool_free(c->pool);
    free(c->scratch);
    free(c);
    free(be);
}

static bool cpu_supports(rt_backend *be, int op, const void *argp) {
    cpu_ctx *c = be->ctx;
    const rt_op_args *a = argp;
    switch (op) {
    /* bf16 activations (rt_backend_act_dtype) are an accelerator's choice:
     * the CPU quantizes or reads f32 rows and never asks for them. */
    case RT_OP_MATMUL:
        return a->src[0]->dtype == RT_F32 && a->dst->dtype == RT_F32 && c->k->mm[a->src[1]->dtype] != NULL;
    case RT_OP_QK_ROPE_STORE:
    case RT_OP_PAGED_ATTENTION: return a->src[0]->dtype == RT_F32;
    case RT_OP_RMSNORM:
    case RT_OP_ADD_RMSNORM: return a->dst->dtype == RT_F32;
    case RT_OP_MATMUL_GLU: return a->dst->dtype == RT_F32 && a->src[0]->dtype == RT_F32;
    case RT_OP_ATTENTION:
        return (a->src[1]->dtype == RT_F32 || a->src[1]->dtype == RT_F16) &&
               a->src[0]->shape[2] <= CPU_ATTN_MAX_HD;
    case RT_OP_EMBED: return a->src[0]->dtype != RT_I32;
    default: return true;
    }
}

static const rt_backend_vtable g_cpu_vt = {
    .name = "cpu",
    .device = RT_DEV_CPU,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .supports_op = cpu_supports,
    .host_memory = true,
};

void *cpu_scratch(cpu_ctx *c, size_t bytes) {
    if (bytes <= c->scratch_bytes) return c->scratch;
    size_t n = (bytes + 4095) & ~(size_t)4095;
    void *p = aligned_alloc(64, n);
    if (!p) {
        vc_err_set(VC_ERR_OOM, "cpu: cannot allocate %zu bytes of scratch", bytes);
        return NULL;
    }
    free(c->scratch);
    c->scratch = p;
    c->scratch_bytes = n;
    return p;
}

void cpu_parallel(cpu_ctx *c, int64_t n_tasks, cpu_task_fn fn, void *ctx, int64_t work) {
    if (work < CPU_MIN_PAR_WORK || c->n_threads == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    cpu_pool_run(c->pool, n_tasks, fn, ctx);
}

/* ---- contiguous ranges with stealing (cpu_parallel_ranges) ---- */

#define RANGES_MAX 64

typedef struct {
    _Alignas(64) _Atomic uint64_t fb; /* front | back << 32, in units */
} range_slot;

typedef struct {
    cpu_range_fn fn;
    void *ctx;
    int64_t claim;
    int n;
    range_slot *r;
} ranges_job;

/* Claims up to `claim` units of slot g, from the front (its owner) or the
 * back (a thief); 0 when it is empty. */
static int range_claim(range_slot *g, int front, int64_t claim, int64_t *u0, int64_t *u1) {
    uint64_t v = atomic_load_explicit(&g->fb, memory_order_relaxed);
    for (;;) {
        uint32_t f = (uint32_t)v, b = (uint32_t)(v >> 32);
        if (f >= b) return 0;
        uint32_t c = (int64_t)(b - f) < claim ? b - f : (uint32_t)claim;
        uint64_t nv = front ? (uint64_t)(f + c) | (uint64_t)b << 32 : (uint64_t)f | (uint64_t)(b - c) << 32;
        if (atomic_compare_exchange_weak_explicit(&g->fb, &v, nv, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *u0 = front ? f : b - c;
            *u1 = front ? f + c : b;
            return 1;
        }
    }
}

static void ranges_task(void *ctxp, int64_t task, int thread) {
    const ranges_job *j = ctxp;
    int64_t u0, u1;
    while (range_claim(&j->r[task], 1, j->claim, &u0, &u1)) j->fn(j->ctx, u0, u1, thread);
    for (int i = 1; i < j->n; i++) {
        range_slot *g = &j->r[(task + i) % j->n];
        while (range_claim(g, 0, j->claim, &u0, &u1)) j->fn(j->ctx, u0, u1, thread);
    }
}

void cpu_parallel_ranges(cpu_ctx *c, int64_t n_units, int64_t claim, cpu_range_fn fn, void *ctx,
                         int64_t work) {
    if (n_units <= 0) return;
    VC_ASSERT(n_units < ((int64_t)1 << 32) && claim > 0);
    range_slot r[RANGES_MAX];
    int n = c->n_threads < RANGES_MAX ? c->n_threads : RANGES_MAX;
    if (n > n_units) n = (int)n_units;
    for (int i = 0; i < n; i++)
        atomic_init(&r[i].fb, (uint64_t)(n_units * i / n) | (uint64_t)(n_units * (i + 1) / n) << 32);
    ranges_job j = {.fn = fn, .ctx = ctx, .claim = claim, .n = n, .r = r};
    cpu_parallel(c, n, ranges_task, &j, work);
}

static rt_backend *cpu_create(const rt_backend_params *p) {
    rt_backend *be = calloc(1, sizeof *be);
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        vc_err_set(VC_ERR_OOM, "cpu backend: out of memory");
        return NULL;
    }
    c->pool = cpu_pool_create(p->n_threads);
    if (!c->pool) {
        free(be);
        free(c);
        return NULL;
    }
    c->n_threads = cpu_pool_size(c->pool);
    c->isa = cpu_isa_select();
    c->k = cpu_kernels_for(c->isa);
    be->vt = &g_cpu_vt;
    be->ctx = c;
    be->device = RT_DEV_CPU;
    VC_INFO("cpu backend: %d threads, %s kernels", c->n_threads, cpu_isa_name(c->isa));
    return be;
}

void cpu_backend_register(void) {
    rt_backend_register(RT_DEV_CPU, cpu_create);
    rt_op_register(RT_OP_EMBED, RT_DEV_CPU, cpu_op_embed);
    rt_op_register(RT_OP_MATMUL, RT_DEV_CPU, cpu_op_matmul);
    rt_op_register(RT_OP_RMSNORM, RT_DEV_CPU, cpu_op_rmsnorm);
    rt_op_register(RT_OP_ROPE, RT_DEV_CPU, cpu_op_rope);
    rt_op_register(RT_OP_GLU, RT_DEV_CPU, cpu_op_glu);
    rt_op_register(RT_OP_ADD, RT_DEV_CPU, cpu_op_add);
    rt_op_register(RT_OP_SCALE, RT_DEV_CPU, cpu_op_scale);
    rt_op_register(RT_OP_SOFTMAX, RT_DEV_CPU, cpu_op_softmax);
    rt_op_register(RT_OP_ATTENTION, RT_DEV_CPU, cpu_op_attention);
    rt_op_register(RT_OP_COPY, RT_DEV_CPU, cpu_op_copy);
    rt_op_register(RT_OP_ARGMAX, RT_DEV_CPU, cpu_op_argmax);
    rt_op_register(RT_OP_KV_STORE, RT_DEV_CPU, cpu_op_kv_store);
    rt_op_register(RT_OP_PAGED_ATTENTION, RT_DEV_CPU, cpu_op_paged_attention);
    rt_op_register(RT_OP_SAMPLE, RT_DEV_CPU, cpu_op_sample);
    rt_op_register(RT_OP_ADD_RMSNORM, RT_DEV_CPU, cpu_op_add_rmsnorm);
    rt_op_register(RT_OP_QK_ROPE_STORE, RT_DEV_CPU, cpu_op_qk_rope_store);
    rt_op_register(RT_OP_COMBINE, RT_DEV_CPU, cpu_op_combine);
}
