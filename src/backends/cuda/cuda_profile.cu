/* cuda_profile — GPU time per op (VLLM_CUDA_PROFILE=1).
 *
 * When the variable is set at registration, every CUDA op kernel is wrapped
 * by a trampoline that records a CUDA event before and after the op on the
 * backend's stream (nothing is synchronised per op, unlike runtime/ops.c's
 * VLLM_OP_PROFILE). Event pairs are harvested when the pool fills and when
 * the backend is destroyed; the table (per op and token-count class: first
 * dimension of dst 1, 2-8, 9-64, > 64) goes to stderr then, with the GPU
 * time between the first and the last event for comparison (the rest is
 * idle time between kernels: launch overhead). Ops queued while a graph is
 * recorded are not timed (a replayed graph shows up as idle time), so
 * profile with VLLM_CUDA_GRAPHS=0. One backend in one thread at a time (the
 * event pool is global): not for tensor-parallel runs.
 */
#include "backends/cuda/cuda_internal.h"

#include <utility>

#include <string.h>

#define PROF_PAIRS 4096
#define PROF_CLASSES 4

static rt_op_fn g_real[RT_OP_COUNT];
static struct {
    cudaEvent_t ev[2 * PROF_PAIRS];
    int op[PROF_PAIRS], cls[PROF_PAIRS];
    int used;
    bool ready;
    double ms[RT_OP_COUNT][PROF_CLASSES], span_ms;
    long calls[RT_OP_COUNT][PROF_CLASSES];
} g_p;

static void prof_harvest(void) {
    if (!g_p.used) return;
    if (cudaEventSynchronize(g_p.ev[2 * g_p.used - 1]) != cudaSuccess) {
        g_p.used = 0;
        return;
    }
    for (int i = 0; i < g_p.used; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, g_p.ev[2 * i], g_p.ev[2 * i + 1]) == cudaSuccess) {
            g_p.ms[g_p.op[i]][g_p.cls[i]] += ms;
            g_p.calls[g_p.op[i]][g_p.cls[i]]++;
        }
    }
    float span = 0;
    if (cudaEventElapsedTime(&span, g_p.ev[0], g_p.ev[2 * g_p.used - 1]) == cudaSuccess) g_p.span_ms += span;
    g_p.used = 0;
}

void cuda_profile_report(void) {
    if (!g_p.ready) return;
    prof_harvest();
    double tot = 0;
    for (int o = 0; o < RT_OP_COUNT; o++)
        for (int k = 0; k < PROF_CLASSES; k++) tot += g_p.ms[o][k];
    if (tot <= 0) return;
    static const char *cls[PROF_CLASSES] = {"n=1", "n=2..8", "n=9..64", "n>64"};
    fprintf(stderr, "cuda profile (VLLM_CUDA_PROFILE): %.3f ms in ops, %.3f ms from first to last event\n", tot,
            g_p.span_ms);
    for (int o = 0; o < RT_OP_COUNT; o++)
        for (int k = 0; k < PROF_CLASSES; k++)
            if (g_p.calls[o][k])
                fprintf(stderr, "  %-16s %-8s %8ld calls %10.3f ms %5.1f%% %8.2f us/call\n", rt_op_name((rt_op)o),
                        cls[k], g_p.calls[o][k], g_p.ms[o][k], 100.0 * g_p.ms[o][k] / tot,
                        1e3 * g_p.ms[o][k] / (double)g_p.calls[o][k]);
    memset(g_p.ms, 0, sizeof g_p.ms);
    memset(g_p.calls, 0, sizeof g_p.calls);
    g_p.span_ms = 0;
}

template <int OP> static int prof_tramp(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    if (c->capturing || !g_p.ready) return g_real[OP](be, a);
    if (g_p.used == PROF_PAIRS) prof_harvest();
    int i = g_p.used;
    cudaEventRecord(g_p.ev[2 * i], c->stream);
    int rc = g_real[OP](be, a);
    cudaEventRecord(g_p.ev[2 * i + 1], c->stream);
    int64_t n = a->dst && a->dst->ndim > 0 ? a->dst->shape[0] : 1;
    g_p.op[i] = OP;
    g_p.cls[i] = n <= 1 ? 0 : n <= 8 ? 1 : n <= 64 ? 2 : 3;
    g_p.used++;
    return rc;
}

/* Wrap the registered CUDA kernels (called by cuda_backend_register after
 * registering them, only when VLLM_CUDA_PROFILE is set). */
template <size_t... I> static void install_tramps(const rt_op_fn *real, std::index_sequence<I...>) {
    static const rt_op_fn tr[] = {prof_tramp<(int)I>...}; /* one trampoline per op */
    for (int o = 0; o < RT_OP_COUNT; o++) {
        g_real[o] = real[o];
        if (real[o]) rt_op_register((rt_op)o, RT_DEV_CUDA, tr[o]); /* ops without a kernel stay unregistered */
    }
}

void cuda_profile_install(const rt_op_fn *real) { install_tramps(real, std::make_index_sequence<RT_OP_COUNT>{}); }

/* Events are created lazily by the first backend (they need a context). */
int cuda_profile_init(void) {
    if (g_p.ready) return VC_OK;
    for (int i = 0; i < 2 * PROF_PAIRS; i++) CU_TRY(cudaEventCreate(&g_p.ev[i]));
    g_p.ready = true;
    return VC_OK;
}
