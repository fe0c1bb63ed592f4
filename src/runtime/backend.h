/* backend — the device seam: a vtable per device plus a registry.
 *
 * Model and engine code hold an `rt_backend *` and call ops through
 * runtime/ops.h; they never name a concrete backend. A backend registers
 * itself (factory + its op kernels) from rt_backends_init(), which is the
 * one place that knows the list of compiled-in backends.
 *
 *   rt_backend_params p = rt_backend_params_default();
 *   p.n_threads = 2;
 *   rt_backend *be = rt_backend_create(RT_DEV_CPU, &p);
 *   void *buf = rt_backend_alloc(be, bytes);
 *   ... ops ...
 *   rt_backend_free_mem(be, buf);
 *   rt_backend_free(be);
 */
#ifndef RT_BACKEND_H
#define RT_BACKEND_H

#include "runtime/tensor.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct rt_backend rt_backend;

typedef struct {
    int n_threads; /* CPU worker threads; <= 0: number of online cores */
    int device_id; /* accelerator ordinal */
} rt_backend_params;

typedef struct {
    const char *name;
    rt_device device;
    void (*destroy)(rt_backend *be);
    /* 64-byte aligned device memory, NULL on failure (message in vc_err). */
    void *(*alloc)(rt_backend *be, size_t bytes);
    void (*free)(rt_backend *be, void *p);
    /* Copy n bytes between host and this device, or within the device. */
    int (*copy)(rt_backend *be, void *dst, rt_device dst_dev, const void *src, rt_device src_dev,
                size_t n);
    /* Wait until queued work is done. */
    int (*sync)(rt_backend *be);
    /* Optional (may be NULL): a finer answer than "a kernel is registered",
     * e.g. "this dtype combination is not handled". */
    bool (*supports_op)(rt_backend *be, int op, const void *args);
    /* Optional (may be NULL): device memory free / total in bytes, for
     * sizing the KV cache (`gpu_memory_utilization`). */
    int (*mem_info)(rt_backend *be, size_t *free_bytes, size_t *total_bytes);
    /* Optional (all four NULL, or all set): graphs. Ops queued between
     * graph_begin and graph_end are recorded, not run; graph_end returns a
     * replayable handle (CUDA graphs). While recording, an op that cannot
     * be recorded fails (e.g. one that needs a fresh allocation); graph_end
     * then fails too and the recording is dropped. A graph replays the
     * same kernels on the same buffers: only their contents may change. */
    int (*graph_begin)(rt_backend *be);
    int (*graph_end)(rt_backend *be, void **graph);
    int (*graph_launch)(rt_backend *be, void *graph);
    void (*graph_free)(rt_backend *be, void *graph);
    /* The device computes on host memory: weights in the model file's mmap
     * are used in place, so anything the model builds from them (e.g. fused
     * QKV copies) would be extra resident memory. false: the backend holds
     * its own copies of the weights anyway. */
    bool host_memory;
    /* Optional (all six NULL, or all set): device->host copies queued behind
     * the work before them and awaited later (async scheduling: a step's
     * sampled ids travel to the host while the next step is queued).
     * host_alloc: host memory such copies can target directly (pinned).
     * copy_to_host_async: queue a copy of n bytes from device memory src to
     * host_alloc memory dst, then record ev behind it; returns at once.
     * event_wait: block until the work queued before ev's last record is
     * done, and report device-side errors flagged by that work (as sync
     * does); may be called from another thread than the one queueing work.
     * Without them (the CPU: work is done when queued) copies are plain
     * copies and waits return at once. */
    void *(*host_alloc)(rt_backend *be, size_t bytes);
    void (*host_free)(rt_backend *be, void *p);
    void *(*event_create)(rt_backend *be);
    void (*event_free)(rt_backend *be, void *ev);
    int (*copy_to_host_async)(rt_backend *be, void *dst, const void *src, size_t n, void *ev);
    int (*event_wait)(rt_backend *be, void *ev);
    /* Optional (may be NULL: RT_F32): the dtype in which this backend wants
     * the activations that feed a matmul (normalised rows, GLU outputs) for
     * a forward of n tokens over weights of dtype w whose matmuls take rows
     * of about `in` values (the hidden size): RT_BF16 where its GEMMs run in
     * bf16 and a half-size activation saves a conversion and half the bytes
     * (CUDA: prefill, and batched decode over bf16 weights), RT_F32
     * elsewhere. A backend that answers RT_BF16 for some n supports, for
     * that n: RMSNORM / ADD_RMSNORM / MATMUL_GLU with a bf16 dst, and MATMUL
     * / MATMUL_GLU with a bf16 x. */
    rt_dtype (*act_dtype)(rt_backend *be, int64_t n_tokens, rt_dtype w, int64_t in);
} rt_backend_vtable;

struct rt_backend {
    const rt_backend_vtable *vt;
    void *ctx; /* backend-private state (thread pool, streams, ...) */
    rt_device device;
};

typedef rt_backend *(*rt_backend_factory)(const rt_backend_params *p);

rt_backend_params rt_backend_params_default(void);
/* Registers every compiled-in backend once (idempotent, thread-safe). */
void rt_backends_init(void);
void rt_backend_register(rt_device dev, rt_backend_factory f);
bool rt_backend_available(rt_device dev);
/* Devices of a compiled-in backend this machine has: a backend registers
 * its count with rt_backend_register_count (the CUDA backend: the driver's
 * device count, 0 without a driver or device); 1 for a backend without one
 * (the CPU), 0 for one not compiled in. *mem0 (may be NULL): device 0's
 * total memory in bytes where the backend says (else 0). Never fails. */
typedef int (*rt_backend_counter)(size_t *mem0);
void rt_backend_register_count(rt_device dev, rt_backend_counter f);
int rt_backend_device_count(rt_device dev, size_t *mem0);
/* NULL on failure with a message in vc_err_msg(). */
rt_backend *rt_backend_create(rt_device dev, const rt_backend_params *p);
void rt_backend_free(rt_backend *be);

void *rt_backend_alloc(rt_backend *be, size_t bytes);
void rt_backend_free_mem(rt_backend *be, void *p);
int rt_backend_sync(rt_backend *be);
/* Free/total device memory; VC_ERR_UNSUPPORTED when the backend cannot tell
 * (the CPU backend: use the host's MemAvailable). */
int rt_backend_mem_info(rt_backend *be, size_t *free_bytes, size_t *total_bytes);
/* Graphs (see rt_backend_vtable): VC_ERR_UNSUPPORTED without backend
 * support. rt_backend_graph_end always ends the recording; on failure
 * *graph is NULL. */
bool rt_backend_has_graphs(const rt_backend *be);
/* See rt_backend_vtable.act_dtype (RT_F32 without one). */
rt_dtype rt_backend_act_dtype(rt_backend *be, int64_t n_tokens, rt_dtype w, int64_t in);
/* See rt_backend_vtable.host_memory. */
bool rt_backend_is_host(const rt_backend *be);
int rt_backend_graph_begin(rt_backend *be);
int rt_backend_graph_end(rt_backend *be, void **graph);
int rt_backend_graph_launch(rt_backend *be, void *graph);
void rt_backend_graph_free(rt_backend *be, void *graph);
/* Queued device->host copies (see rt_backend_vtable). host_alloc/
 * event_create return NULL on failure (message in vc_err_msg()). Host
 * memory from host_alloc, and ev, are freed only after a wait observed the
 * last copy / record that used them. */
void *rt_backend_host_alloc(rt_backend *be, size_t bytes);
void rt_backend_host_free(rt_backend *be, void *p);
void *rt_backend_event_create(rt_backend *be);
void rt_backend_event_free(rt_backend *be, void *ev);
int rt_backend_copy_to_host_async(rt_backend *be, void *dst, const void *src, size_t n, void *ev);
int rt_backend_event_wait(rt_backend *be, void *ev);
/* Copy a contiguous tensor's bytes: src and dst must have equal nbytes. */
int rt_tensor_copy_bytes(rt_backend *be, rt_tensor *dst, const rt_tensor *src);
/* Allocate a contiguous tensor on the backend's device (data NULL on failure). */
rt_tensor rt_tensor_alloc(rt_backend *be, rt_dtype dt, int ndim, const int64_t *shape);

#endif
