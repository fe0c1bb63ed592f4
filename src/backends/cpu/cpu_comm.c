/* cpu_comm — the CPU backend's collectives: ranks are threads of this
 * process sharing host memory (tensor parallelism on one machine, and the
 * reference the NCCL path is tested against).
 *
 * all_reduce_sum over W ranks of n elements: every rank publishes its
 * buffer, rank r sums its slice [r*n/W, (r+1)*n/W) over ranks 0..W-1 in
 * that order in f32 into the group's scratch, then every rank copies the
 * whole scratch back (rounding once to its dtype). The order is fixed, so
 * all ranks end bit-identical and a run repeats exactly. Three barriers
 * per call: publish, reduce, copy-out (the last stops a fast rank from
 * overwriting the scratch with its next collective too early).
 *
 * reduce_scatter_sum: the same sums, but rank r sums only block r (the
 * elements its all-reduce slice would be, in the same order, so the result
 * equals the all-reduce's block bit for bit) straight into its dst; two
 * barriers (publish; everyone has read the sources). all_gather copies the
 * other ranks' sources into dst (its own block only when not in place);
 * all_to_all copies block `rank` of every rank's source.
 */
#include "backends/cpu/cpu_internal.h"
#include "base/err.h"
#include "runtime/comm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int world;
    pthread_barrier_t bar;
    const void **bufs; /* [world] published source buffers */
    float *scratch;    /* reduced values, f32 */
    size_t scratch_cap;
    int err;           /* set by rank 0 when the scratch cannot grow */
} cpu_comm_group;

static float load_f(rt_dtype dt, const void *p, size_t i) {
    switch (dt) {
    case RT_F16: return rt_f16_to_f32(((const uint16_t *)p)[i]);
    case RT_BF16: return rt_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static void store_f(rt_dtype dt, void *p, size_t i, float v) {
    switch (dt) {
    case RT_F16: ((uint16_t *)p)[i] = rt_f32_to_f16(v); break;
    case RT_BF16: ((uint16_t *)p)[i] = rt_f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

static int cpu_all_reduce(rt_comm *c, rt_tensor *t) {
    cpu_comm_group *g = c->ctx;
    size_t n = (size_t)rt_tensor_nelem(t);
    g->bufs[c->rank] = t->data;
    if (c->rank == 0) {
        g->err = 0;
        if (n > g->scratch_cap) {
            float *s = realloc(g->scratch, n * sizeof *s);
            if (s) {
                g->scratch = s;
                g->scratch_cap = n;
            } else {
                g->err = 1;
            }
        }
    }
    pthread_barrier_wait(&g->bar);
    if (g->err) {
        pthread_barrier_wait(&g->bar);
        pthread_barrier_wait(&g->bar);
        return vc_err_set(VC_ERR_OOM, "comm all_reduce: out of memory for %zu elements", n);
    }
    size_t lo = n * (size_t)c->rank / (size_t)g->world, hi = n * (size_t)(c->rank + 1) / (size_t)g->world;
    for (size_t i = lo; i < hi; i++) {
        float acc = 0.0f;
        for (int r = 0; r < g->world; r++) acc += load_f(t->dtype, g->bufs[r], i);
        g->scratch[i] = acc;
    }
    pthread_barrier_wait(&g->bar);
    for (size_t i = 0; i < n; i++) store_f(t->dtype, t->data, i, g->scratch[i]);
    pthread_barrier_wait(&g->bar);
    return 0;
}

static int cpu_all_gather(rt_comm *c, const rt_tensor *src, rt_tensor *dst) {
    cpu_comm_group *g = c->ctx;
    size_t bytes = rt_tensor_nbytes(src);
    g->bufs[c->rank] = src->data;
    pthread_barrier_wait(&g->bar);
    for (int r = 0; r < g->world; r++) {
        char *to = (char *)dst->data + (size_t)r * bytes;
        if (to != g->bufs[r]) memcpy(to, g->bufs[r], bytes); /* own block in place: nothing to copy */
    }
    pthread_barrier_wait(&g->bar);
    return 0;
}

/* dst block q = rank q's src block `rank` (two barriers: publish; read). */
static int cpu_all_to_all(rt_comm *c, const rt_tensor *src, rt_tensor *dst) {
    cpu_comm_group *g = c->ctx;
    size_t bb = rt_tensor_nbytes(src) / (size_t)g->world;
    g->bufs[c->rank] = src->data;
    pthread_barrier_wait(&g->bar);
    for (int q = 0; q < g->world; q++)
        memcpy((char *)dst->data + (size_t)q * bb, (const char *)g->bufs[q] + (size_t)c->rank * bb, bb);
    pthread_barrier_wait(&g->bar);
    return 0;
}

static int cpu_reduce_scatter(rt_comm *c, const rt_tensor *src, rt_tensor *dst) {
    cpu_comm_group *g = c->ctx;
    size_t m = (size_t)rt_tensor_nelem(dst), lo = m * (size_t)c->rank;
    g->bufs[c->rank] = src->data;
    pthread_barrier_wait(&g->bar);
    /* Element i of dst is read from every source before it is written: in
     * place (dst = this rank's block of src) is safe, and other ranks read
     * only their own blocks of this rank's src. */
    for (size_t i = 0; i < m; i++) {
        float acc = 0.0f;
        for (int r = 0; r < g->world; r++) acc += load_f(src->dtype, g->bufs[r], lo + i);
        store_f(dst->dtype, dst->data, i, acc);
    }
    pthread_barrier_wait(&g->bar);
    return 0;
}

static void cpu_group_free(rt_comm **comms, int world) {
    cpu_comm_group *g = comms[0]->ctx;
    pthread_barrier_destroy(&g->bar);
    free(g->bufs);
    free(g->scratch);
    free(g);
    for (int r = 0; r < world; r++) free(comms[r]);
}

static const rt_comm_vtable g_cpu_comm_vt = {
    .name = "cpu-threads",
    .all_reduce_sum = cpu_all_reduce,
    .all_gather = cpu_all_gather,
    .group_free = cpu_group_free,
    .reduce_scatter_sum = cpu_reduce_scatter,
    .all_to_all = cpu_all_to_all,
};

static int cpu_group_create(rt_backend **bes, int world, const rt_comm_opts *opts, rt_comm **comms) {
    (void)opts; /* nothing to prefer between threads */
    cpu_comm_group *g = calloc(1, sizeof *g);
    if (!g || !(g->bufs = calloc((size_t)world, sizeof *g->bufs))) {
        free(g);
        return vc_err_set(VC_ERR_OOM, "out of memory");
    }
    g->world = world;
    if (pthread_barrier_init(&g->bar, NULL, (unsigned)world) != 0) {
        free(g->bufs);
        free(g);
        return vc_err_set(VC_ERR_RUNTIME, "comm: cannot create a barrier for %d ranks", world);
    }
    for (int r = 0; r < world; r++) {
        comms[r] = calloc(1, sizeof **comms);
        if (!comms[r]) {
            for (int q = 0; q < r; q++) free(comms[q]);
            pthread_barrier_destroy(&g->bar);
            free(g->bufs);
            free(g);
            return vc_err_set(VC_ERR_OOM, "out of memory");
        }
        *comms[r] = (rt_comm){.vt = &g_cpu_comm_vt, .ctx = g, .rank = r, .world = world, .be = bes[r]};
    }
    return 0;
}

void cpu_comm_register(void) { rt_comm_register(RT_DEV_CPU, cpu_group_create); }
