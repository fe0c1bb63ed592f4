#include "runtime/backend.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "runtime/ops.h"

#include <pthread.h>
#include <stdlib.h>

/* Each backend's registration hook, called once from rt_backends_init(). */
void cpu_backend_register(void);
void cpu_comm_register(void);
#ifdef VLLM_CUDA
void cuda_backend_register(void);
void cuda_comm_register(void);
#endif

static rt_backend_factory g_factories[RT_DEV_COUNT];
static rt_backend_counter g_counters[RT_DEV_COUNT];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_once(void) {
    cpu_backend_register();
    cpu_comm_register();
#ifdef VLLM_CUDA
    cuda_backend_register();
    cuda_comm_register();
#endif
}

void rt_backends_init(void) { pthread_once(&g_once, init_once); }

rt_backend_params rt_backend_params_default(void) {
    rt_backend_params p = {.n_threads = 0, .device_id = 0};
    return p;
}

void rt_backend_register(rt_device dev, rt_backend_factory f) {
    VC_ASSERT((unsigned)dev < RT_DEV_COUNT);
    g_factories[dev] = f;
}

bool rt_backend_available(rt_device dev) {
    rt_backends_init();
    return (unsigned)dev < RT_DEV_COUNT && g_factories[dev] != NULL;
}

void rt_backend_register_count(rt_device dev, rt_backend_counter f) {
    VC_ASSERT((unsigned)dev < RT_DEV_COUNT);
    g_counters[dev] = f;
}

int rt_backend_device_count(rt_device dev, size_t *mem0) {
    size_t m = 0;
    int n = !rt_backend_available(dev) ? 0 : g_counters[dev] ? g_counters[dev](&m) : 1;
    if (mem0) *mem0 = m;
    return n;
}

rt_backend *rt_backend_create(rt_device dev, const rt_backend_params *p) {
    rt_backends_init();
    if ((unsigned)dev >= RT_DEV_COUNT || !g_factories[dev]) {
        vc_err_set(VC_ERR_UNSUPPORTED, "backend for device %d is not compiled in", (int)dev);
        return NULL;
    }
    rt_backend_params def = rt_backend_params_default();
    return g_factories[dev](p ? p : &def);
}

void rt_backend_free(rt_backend *be) {
    if (be) be->vt->destroy(be);
}

void *rt_backend_alloc(rt_backend *be, size_t bytes) { return be->vt->alloc(be, bytes); }
void rt_backend_free_mem(rt_backend *be, void *p) {
    if (p) be->vt->free(be, p);
}
int rt_backend_sync(rt_backend *be) { return be->vt->sync(be); }

int rt_backend_mem_info(rt_backend *be, size_t *free_bytes, size_t *total_bytes) {
    if (!be->vt->mem_info) return vc_err_set(VC_ERR_UNSUPPORTED, "backend %s cannot report memory", be->vt->name);
    return be->vt->mem_info(be, free_bytes, total_bytes);
}

/* Fallbacks for backends whose work is done when queued (the CPU). */
static char g_done_event; /* a non-NULL event that is always complete */

void *rt_backend_host_alloc(rt_backend *be, size_t bytes) {
    if (be->vt->host_alloc) return be->vt->host_alloc(be, bytes);
    size_t n = (bytes + 63) & ~(size_t)63;
    void *p = n >= bytes ? aligned_alloc(64, n ? n : 64) : NULL;
    if (!p) vc_err_set(VC_ERR_OOM, "cannot allocate %zu bytes of host memory", bytes);
    return p;
}

void rt_backend_host_free(rt_backend *be, void *p) {
    if (!p) return;
    if (be->vt->host_free) be->vt->host_free(be, p);
    else free(p);
}

void *rt_backend_event_create(rt_backend *be) {
    return be->vt->event_create ? be->vt->event_create(be) : &g_done_event;
}

void rt_backend_event_free(rt_backend *be, void *ev) {
    if (ev && be->vt->event_free) be->vt->event_free(be, ev);
}

int rt_backend_copy_to_host_async(rt_backend *be, void *dst, const void *src, size_t n, void *ev) {
    if (be->vt->copy_to_host_async) return be->vt->copy_to_host_async(be, dst, src, n, ev);
    return be->vt->copy(be, dst, RT_DEV_CPU, src, be->device, n);
}

int rt_backend_event_wait(rt_backend *be, void *ev) {
    return be->vt->event_wait ? be->vt->event_wait(be, ev) : VC_OK;
}

bool rt_backend_has_graphs(const rt_backend *be) { return be->vt->graph_begin != NULL; }

rt_dtype rt_backend_act_dtype(rt_backend *be, int64_t n_tokens, rt_dtype w, int64_t in) {
    return be->vt->act_dtype ? be->vt->act_dtype(be, n_tokens, w, in) : RT_F32;
}

int rt_backend_graph_begin(rt_backend *be) {
    if (!be->vt->graph_begin) return vc_err_set(VC_ERR_UNSUPPORTED, "backend %s has no graphs", be->vt->name);
    return be->vt->graph_begin(be);
}

int rt_backend_graph_end(rt_backend *be, void **graph) {
    *graph = NULL;
    if (!be->vt->graph_end) return vc_err_set(VC_ERR_UNSUPPORTED, "backend %s has no graphs", be->vt->name);
    return be->vt->graph_end(be, graph);
}

int rt_backend_graph_launch(rt_backend *be, void *graph) {
    if (!be->vt->graph_launch) return vc_err_set(VC_ERR_UNSUPPORTED, "backend %s has no graphs", be->vt->name);
    return be->vt->graph_launch(be, graph);
}

void rt_backend_graph_free(rt_backend *be, void *graph) {
    if (graph && be->vt->graph_free) be->vt->graph_free(be, graph);
}

bool rt_backend_is_host(const rt_backend *be) { return be->vt->host_memory; }

int rt_tensor_copy_bytes(rt_backend *be, rt_tensor *dst, const rt_tensor *src) {
    size_t n = rt_tensor_nbytes(src);
    if (n != rt_tensor_nbytes(dst))
        return vc_err_set(VC_ERR_INVALID, "tensor copy: size mismatch (%zu vs %zu bytes)", n,
                          rt_tensor_nbytes(dst));
    if (!vc_step_trace()) return be->vt->copy(be, dst->data, dst->device, src->data, src->device, n);
    const double t0 = vc_now_s(); /* the step trace's host time of copies (ops.h) */
    const int rc = be->vt->copy(be, dst->data, dst->device, src->data, src->device, n);
    rt_op_trace_add(RT_OP_COUNT, vc_now_s() - t0);
    return rc;
}

rt_tensor rt_tensor_alloc(rt_backend *be, rt_dtype dt, int ndim, const int64_t *shape) {
    rt_tensor t = rt_tensor_make(NULL, dt, be->device, ndim, shape);
    size_t n = rt_tensor_nbytes(&t);
    t.data = rt_backend_alloc(be, n ? n : 1);
    return t;
}
