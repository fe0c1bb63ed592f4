/* cuda_backend — the CUDA rt_backend: device, stream, memory, copies, sync,
 * and the registration of every op kernel.
 *
 * Memory: allocations come from the device's default stream-ordered pool
 * (cudaMallocAsync/cudaFreeAsync on the backend's stream) with its release
 * threshold raised to "keep everything", which makes the pool a caching
 * allocator: freed blocks return to the pool and later allocations reuse
 * them without a device-wide synchronisation. Since all work runs on one
 * stream, a block freed while kernels still use it is reused only after
 * them. The pool gives memory back when the backend is destroyed.
 *
 * Copies: device->host copies return when the host may read the data (the
 * stream is synchronised: the one sync of a decode step). Host->device
 * copies of up to CUDA_STAGE_CHUNK_BYTES are staged through pinned memory
 * and queued without a sync (the host buffer may be reused at once); larger
 * ones wait for the copy. device->device copies are queued.
 * copy_to_host_async queues a device->host copy into pinned memory and an
 * event behind it (with the error flags), for async scheduling.
 */
#include "backends/cuda/cuda_internal.h"

#include "backends/cuda/cuda_dequant.cuh"
#include "backends/cuda/cuda_gemv_xr.cuh"

extern "C" {
#include "base/log.h"
}

#include <string.h>

extern "C" void cuda_backend_register(void);

bool cuda_pdl_enabled = true;

int cuda_fail(cudaError_t e, const char *expr, const char *file, int line) {
    return vc_err_set(VC_ERR_RUNTIME, "%s:%d: %s: %s (%s)", file, line, expr, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

int cuda_blas_fail(cublasStatus_t s, const char *expr, const char *file, int line) {
    return vc_err_set(VC_ERR_RUNTIME, "%s:%d: %s: cuBLAS status %d (%s)", file, line, expr, (int)s,
                      cublasGetStatusString(s));
}

int cuda_enter(const cuda_ctx *c) {
    int cur = -1;
    CU_TRY(cudaGetDevice(&cur));
    if (cur != c->device) CU_TRY(cudaSetDevice(c->device));
    return VC_OK;
}

cuda_view cuda_view_of(const rt_tensor *t) {
    cuda_view v;
    memset(&v, 0, sizeof v);
    v.data = (char *)t->data;
    v.ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) {
        v.shape[i] = t->shape[i];
        v.stride[i] = t->stride[i];
    }
    return v;
}

int cuda_check_dev(const rt_tensor *t, const char *op) {
    if (t->device != RT_DEV_CUDA)
        return vc_err_set(VC_ERR_INVALID, "cuda %s: tensor is not in device memory", op);
    return VC_OK;
}

void *cuda_tmp_alloc(cuda_ctx *c, size_t bytes) {
    void *p = NULL;
    if (c->capturing) {
        vc_err_set(VC_ERR_UNSUPPORTED, "cuda: an op needs a fresh allocation while a graph is recorded");
        return NULL;
    }
    /* sizes rounded up to 256 bytes: NCCL's LL protocol and vector loads
     * read user buffers in 16-byte granules (a one-element bf16 all-reduce
     * reads 4 bytes of a 2-byte tensor), which must stay inside the block */
    const size_t n = bytes ? (bytes + 255) / 256 * 256 : 256;
    cudaError_t e = n < bytes ? cudaErrorMemoryAllocation : cudaMallocAsync(&p, n, c->pool, c->stream);
    if (e != cudaSuccess) {
        vc_err_set(VC_ERR_OOM, "cuda: cannot allocate %zu bytes: %s", bytes, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

void cuda_tmp_free(cuda_ctx *c, void *p) {
    if (!p) return;
    cudaError_t e = cudaFreeAsync(p, c->stream);
    if (e != cudaSuccess) VC_WARN("cuda: cudaFreeAsync failed: %s", cudaGetErrorString(e));
}

void *cuda_ws_get(cuda_ctx *c, cuda_ws *w, size_t bytes, const char *what) {
    if (bytes <= w->bytes) return w->p;
    size_t want = bytes < ((size_t)16 << 20) ? ((size_t)16 << 20) : bytes;
    if (want < 2 * w->bytes) want = 2 * w->bytes;
    if (w->p && w->n_old == CUDA_WS_OLD) {
        vc_err_set(VC_ERR_OOM, "cuda: %s workspace grown too often", what);
        return NULL;
    }
    void *p = cuda_tmp_alloc(c, want);
    if (!p) return NULL;
    if (w->p) w->old[w->n_old++] = w->p;
    w->p = p;
    w->bytes = want;
    return p;
}

void cuda_ws_release(cuda_ctx *c, cuda_ws *w) {
    if (!c->stream) return;
    if (w->p) cudaFreeAsync(w->p, c->stream);
    for (int i = 0; i < w->n_old; i++) cudaFreeAsync(w->old[i], c->stream);
    memset(w, 0, sizeof *w);
}

/* ---- vtable ------------------------------------------------------------- */

static void *cuda_alloc(rt_backend *be, size_t bytes) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    if (cuda_enter(c) < 0) return NULL;
    void *p = cuda_tmp_alloc(c, bytes);
    if (p && ((uintptr_t)p & 63)) { /* the vtable promises 64-byte alignment */
        cuda_tmp_free(c, p);
        vc_err_set(VC_ERR_RUNTIME, "cuda: pool returned a misaligned block");
        return NULL;
    }
    return p;
}

static void cuda_free(rt_backend *be, void *p) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    if (cuda_enter(c) < 0) return;
    cuda_tmp_free(c, p);
}

/* The error behind device-side flags f (0: none). */
static int flags_error(int f) {
    if (f & CUDA_FLAG_BAD_TOKEN) return vc_err_set(VC_ERR_INVALID, "cuda embed: a token id was out of range");
    if (f & CUDA_FLAG_BAD_SLOT) return vc_err_set(VC_ERR_INVALID, "cuda kv_store: a slot was out of range");
    if (f & CUDA_FLAG_BAD_PAGED)
        return vc_err_set(VC_ERR_INVALID, "cuda paged attention: bad block table or sequence lengths");
    if (f & CUDA_FLAG_BAD_COMBINE) return vc_err_set(VC_ERR_INVALID, "cuda combine: an index was out of range");
    return VC_OK;
}

/* Wait for the stream, then report device-side error flags. */
static int cuda_drain(cuda_ctx *c) {
    CU_TRY(cudaMemcpyAsync(c->h_flags, c->d_flags, sizeof(int), cudaMemcpyDeviceToHost, c->stream));
    CU_TRY(cudaStreamSynchronize(c->stream));
    int f = *c->h_flags;
    if (f) {
        CU_TRY(cudaMemsetAsync(c->d_flags, 0, sizeof(int), c->stream));
        CU_TRY(cudaStreamSynchronize(c->stream));
    }
    return flags_error(f);
}

/* Queue a host->device copy of n <= CUDA_STAGE_CHUNK_BYTES bytes through
 * the pinned staging chunks (see cuda_ctx). */
static int cuda_upload(cuda_ctx *c, void *dst, const void *src, size_t n) {
    if (c->stage_fill + n > CUDA_STAGE_CHUNK_BYTES) {
        c->stage_cur = (c->stage_cur + 1) % CUDA_STAGE_CHUNKS;
        CU_TRY(cudaEventSynchronize(c->stage_ev[c->stage_cur])); /* its last copies are done */
        c->stage_fill = 0;
    }
    char *p = c->stage + (size_t)c->stage_cur * CUDA_STAGE_CHUNK_BYTES + c->stage_fill;
    memcpy(p, src, n);
    CU_TRY(cudaMemcpyAsync(dst, p, n, cudaMemcpyHostToDevice, c->stream));
    CU_TRY(cudaEventRecord(c->stage_ev[c->stage_cur], c->stream));
    c->stage_fill += (n + 63) & ~(size_t)63;
    return VC_OK;
}

static int cuda_copy(rt_backend *be, void *dst, rt_device dst_dev, const void *src, rt_device src_dev,
                     size_t n) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    if ((dst_dev != RT_DEV_CPU && dst_dev != RT_DEV_CUDA) ||
        (src_dev != RT_DEV_CPU && src_dev != RT_DEV_CUDA))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda copy: unknown device");
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    if (n == 0) return VC_OK;
    if (c->capturing && (dst_dev == RT_DEV_CPU || src_dev == RT_DEV_CPU))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda copy: host copies cannot be recorded in a graph");
    if (dst_dev == RT_DEV_CPU && src_dev == RT_DEV_CPU) {
        CU_TRY(cudaStreamSynchronize(c->stream)); /* host data may come from earlier copies */
        memmove(dst, src, n);
        return VC_OK;
    }
    cudaMemcpyKind kind = dst_dev == RT_DEV_CPU   ? cudaMemcpyDeviceToHost
                          : src_dev == RT_DEV_CPU ? cudaMemcpyHostToDevice
                                                  : cudaMemcpyDeviceToDevice;
    if (kind == cudaMemcpyHostToDevice && n <= CUDA_STAGE_CHUNK_BYTES) return cuda_upload(c, dst, src, n);
    CU_TRY(cudaMemcpyAsync(dst, src, n, kind, c->stream));
    if (kind == cudaMemcpyDeviceToHost) return cuda_drain(c);
    if (kind == cudaMemcpyHostToDevice) CU_TRY(cudaStreamSynchronize(c->stream));
    return VC_OK;
}

static int cuda_sync(rt_backend *be) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    if (c->capturing) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda: sync while recording a graph");
    return cuda_drain(c);
}

/* ---- queued device->host copies guarded by events ------------------------ */

/* An event, and the device error flags copied behind the work it guards
 * (so a wait reports them without touching the stream: waits may come from
 * another thread). */
typedef struct {
    cudaEvent_t ev;
    int *h_flags; /* [1] pinned */
} cuda_event;

static void *cuda_host_alloc(rt_backend *be, size_t bytes) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    if (cuda_enter(c) < 0) return NULL;
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        vc_err_set(VC_ERR_OOM, "cuda: cannot allocate %zu bytes of pinned memory: %s", bytes, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

static void cuda_host_free(rt_backend *be, void *p) {
    (void)be;
    if (p) cudaFreeHost(p);
}

static void cuda_event_free(rt_backend *be, void *p) {
    (void)be;
    cuda_event *ev = (cuda_event *)p;
    if (!ev) return;
    if (ev->ev) cudaEventDestroy(ev->ev);
    if (ev->h_flags) cudaFreeHost(ev->h_flags);
    free(ev);
}

static void *cuda_event_create(rt_backend *be) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    if (cuda_enter(c) < 0) return NULL;
    cuda_event *ev = (cuda_event *)calloc(1, sizeof *ev);
    if (!ev) {
        vc_err_set(VC_ERR_OOM, "cuda: out of memory");
        return NULL;
    }
    cudaError_t e = cudaEventCreateWithFlags(&ev->ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaMallocHost((void **)&ev->h_flags, sizeof(int));
    if (e != cudaSuccess) {
        cuda_fail(e, "cuda_event_create", __FILE__, __LINE__);
        cuda_event_free(be, ev);
        return NULL;
    }
    *ev->h_flags = 0;
    return ev;
}

static int cuda_copy_to_host_async(rt_backend *be, void *dst, const void *src, size_t n, void *p) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    cuda_event *ev = (cuda_event *)p;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    if (c->capturing) return vc_err_set(VC_ERR_UNSUPPORTED, "cuda copy: host copies cannot be recorded in a graph");
    if (n) CU_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream));
    /* The flags raised by the work so far travel with the copy; the work
     * after it starts from clear flags. */
    CU_TRY(cudaMemcpyAsync(ev->h_flags, c->d_flags, sizeof(int), cudaMemcpyDeviceToHost, c->stream));
    CU_TRY(cudaMemsetAsync(c->d_flags, 0, sizeof(int), c->stream));
    CU_TRY(cudaEventRecord(ev->ev, c->stream));
    return VC_OK;
}

static int cuda_event_wait(rt_backend *be, void *p) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    cuda_event *ev = (cuda_event *)p;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    CU_TRY(cudaEventSynchronize(ev->ev));
    return flags_error(*ev->h_flags);
}

/* ---- graphs: stream capture of the backend's stream ----------------------- */

static int cuda_graph_begin(rt_backend *be) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    if (c->capturing) return vc_err_set(VC_ERR_INVALID, "cuda: a graph is already being recorded");
    CU_TRY(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capturing = true;
    return VC_OK;
}

static int cuda_graph_end(rt_backend *be, void **graph) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    *graph = NULL;
    if (!c->capturing) return vc_err_set(VC_ERR_INVALID, "cuda: no graph is being recorded");
    c->capturing = false;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (e != cudaSuccess || !g) {
        (void)cudaGetLastError(); /* capture errors are not sticky: clear them */
        if (g) cudaGraphDestroy(g);
        return cuda_fail(e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture",
                         __FILE__, __LINE__);
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) return cuda_fail(e, "cudaGraphInstantiate", __FILE__, __LINE__);
    *graph = (void *)x;
    return VC_OK;
}

static int cuda_graph_launch(rt_backend *be, void *graph) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    CU_TRY(cudaGraphLaunch((cudaGraphExec_t)graph, c->stream));
    return VC_OK;
}

static void cuda_graph_free(rt_backend *be, void *graph) {
    (void)be;
    if (graph) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static void cuda_destroy(rt_backend *be) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    if (c) {
        cudaSetDevice(c->device);
        cuda_profile_report();
        cuda_ws_release(c, &c->xh);
        cuda_ws_release(c, &c->mq);
        if (c->stream) cudaStreamSynchronize(c->stream);
        if (c->blas) cublasDestroy(c->blas);
        if (c->blas_ws) cudaFree(c->blas_ws);
        if (c->d_flags) cudaFree(c->d_flags);
        if (c->fd_ws) cudaFree(c->fd_ws);
        if (c->fd_cnt) cudaFree(c->fd_cnt);
        if (c->h_flags) cudaFreeHost(c->h_flags);
        if (c->stage) cudaFreeHost(c->stage);
        for (int i = 0; i < CUDA_STAGE_CHUNKS; i++)
            if (c->stage_ev[i]) cudaEventDestroy(c->stage_ev[i]);
        if (c->stream) cudaStreamDestroy(c->stream);
        if (c->pool) cudaMemPoolTrimTo(c->pool, 0);
        free(c);
    }
    free(be);
}

bool cuda_float_or_quant(rt_dtype t) { return cuda_has_decoder(t); }

static bool cuda_supports(rt_backend *be, int op, const void *argp) {
    (void)be;
    const rt_op_args *a = (const rt_op_args *)argp;
    switch (op) {
    case RT_OP_MATMUL: return cuda_matmul_supports(a->src[1]->dtype);
    case RT_OP_MATMUL3: return cuda_matmul3_fits((cuda_ctx *)be->ctx, a); /* else the wrapper's three MATMULs */
    case RT_OP_MATMUL_ADD: return cuda_matmul_add_fits((cuda_ctx *)be->ctx, a); /* else MATMUL + ADD */
    case RT_OP_MATMUL_ROPE_STORE: /* else MATMUL + QK_ROPE_STORE */
        return cuda_matmul_rope_store_fits((cuda_ctx *)be->ctx, a);
    case RT_OP_RMSNORM:
    case RT_OP_ADD_RMSNORM: return a->dst->dtype == RT_F32 || a->dst->dtype == RT_BF16; /* cuda_norm.cuh */
    case RT_OP_EMBED: return cuda_has_decoder(a->src[0]->dtype);
    case RT_OP_ATTENTION:
    case RT_OP_PAGED_ATTENTION:
        return (a->src[1]->dtype == RT_F32 || a->src[1]->dtype == RT_F16 || a->src[1]->dtype == RT_BF16) &&
               a->src[0]->shape[2] <= 1024;
    case RT_OP_COPY: {
        rt_dtype s = a->src[0]->dtype, d = a->dst->dtype;
        bool sf = s == RT_F32 || s == RT_F16 || s == RT_BF16;
        bool df = d == RT_F32 || d == RT_F16 || d == RT_BF16;
        return s == d || (sf && df) || (cuda_has_decoder(s) && d == RT_F32);
    }
    default: return true;
    }
}

/* bf16 activations where the matmuls run on cuBLAS, unless
 * VLLM_CUDA_BF16_ACT=0 or the norms cannot write bf16 (read once per
 * backend); the GEMV reads f32 rows, so the answer picks the kernel:
 *  - quantized W: the dp4a GEMV up to 2 tokens, bf16 rows from 3
 *    (cuda_mmq_bf.cu / cuda_mmq.cu on tensor cores; cuda_mmq_min_n, whose
 *    table is in cuda_mmq.cu), unless the skinny kernel takes GGUF blocks
 *    (VLLM_CUDA_SKINNY_QUANT=1): then as below;
 *  - bf16 W with the skinny kernel on (cuda_skinny.cu, the default): the
 *    GEMV at 1 token only. Its table (test_cuda_gemm, session 11) has the
 *    skinny kernel on bf16 rows ahead of the f32-row GEMV at every n >= 2
 *    on every 8B and 0.6B shape (0.6B at 2 rows: QKV 3.2 vs 4.4 us, gate|up
 *    4.4 vs 7.1, down 3.4 vs 3.8, Wo 2.9 vs 3.0);
 *  - other f16 / bf16 / f32 W (or the skinny kernel off): the GEMV while its
 *    f32 x rows stay small, n * in * 4 <= CUDA_GEMV_X_BYTES, and always at
 *    1 token. Each warp reads the x rows once per weight row it takes, so
 *    they must stay in L1 beside the streamed weights. Measured on the H200
 *    (session 10, `vllm bench` 1024 in, one wave of c requests, output
 *    tok/s; cuBLAS for the bf16 rows): 8B (in 4096) at c = 2 / 4 / 8: GEMV
 *    295 / 367 / 421, cuBLAS 376 / 676 / 1,084. 0.6B (in 1024) at c = 2 /
 *    3 / 4 / 8: GEMV 1,514 / 1,788 / 2,352 / 3,123, cuBLAS 1,369 / 1,868 /
 *    2,439 / 3,937. So 8 KB: the 0.6B's 2 rows, the 8B's 1.
 *  VLLM_CUDA_GEMV_MAX_N = k: the GEMV to k tokens over any unquantized W. */
#define CUDA_GEMV_X_BYTES (8 << 10)
int64_t cuda_gemv_rows(cuda_ctx *c, rt_dtype w, int64_t in) {
    if (!c->gemv_max_n) {
        const char *e = getenv("VLLM_CUDA_GEMV_MAX_N");
        int v = e && *e ? atoi(e) : 0;
        c->gemv_max_n = v >= 1 && v <= CUDA_GEMV_MAX_N ? v : -1; /* -1: by x bytes */
    }
    if (rt_dtype_info(w)->quantized && !cuda_skinny_quant_on(c)) {
        const int m = cuda_mmq_min_n(c) - 1;
        return m < 1 ? 1 : m > CUDA_GEMV_MAX_N ? CUDA_GEMV_MAX_N : m;
    }
    if (c->gemv_max_n > 0) return c->gemv_max_n;
    if (w == RT_BF16 && cuda_skinny_on(c)) return 1;
    int64_t lim = CUDA_GEMV_X_BYTES / 4 / (in > 0 ? in : 1);
    return lim < 1 ? 1 : lim > CUDA_GEMV_MAX_N ? CUDA_GEMV_MAX_N : lim;
}

static rt_dtype cuda_act_dtype(rt_backend *be, int64_t n_tokens, rt_dtype w, int64_t in) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    if (c->bf16_act == 0) {
        const char *e = getenv("VLLM_CUDA_BF16_ACT");
        rt_tensor t = rt_tensor_2d(NULL, RT_BF16, RT_DEV_CUDA, 1, 1);
        rt_op_args a;
        memset(&a, 0, sizeof a);
        a.dst = &t;
        c->bf16_act = !(e && !strcmp(e, "0")) && cuda_supports(be, RT_OP_RMSNORM, &a) &&
                              cuda_supports(be, RT_OP_ADD_RMSNORM, &a)
                          ? 2
                          : 1;
    }
    return c->bf16_act == 2 && n_tokens > cuda_gemv_rows(c, w, in) ? RT_BF16 : RT_F32;
}

static int cuda_mem_info(rt_backend *be, size_t *free_bytes, size_t *total_bytes) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    CU_TRY(cudaSetDevice(c->device));
    CU_TRY(cudaMemGetInfo(free_bytes, total_bytes));
    return VC_OK;
}

static const rt_backend_vtable g_cuda_vt = {
    /* .name = */ "cuda",
    /* .device = */ RT_DEV_CUDA,
    /* .destroy = */ cuda_destroy,
    /* .alloc = */ cuda_alloc,
    /* .free = */ cuda_free,
    /* .copy = */ cuda_copy,
    /* .sync = */ cuda_sync,
    /* .supports_op = */ cuda_supports,
    /* .mem_info = */ cuda_mem_info,
    /* .graph_begin = */ cuda_graph_begin,
    /* .graph_end = */ cuda_graph_end,
    /* .graph_launch = */ cuda_graph_launch,
    /* .graph_free = */ cuda_graph_free,
    /* .host_memory = */ false,
    /* .host_alloc = */ cuda_host_alloc,
    /* .host_free = */ cuda_host_free,
    /* .event_create = */ cuda_event_create,
    /* .event_free = */ cuda_event_free,
    /* .copy_to_host_async = */ cuda_copy_to_host_async,
    /* .event_wait = */ cuda_event_wait,
    /* .act_dtype = */ cuda_act_dtype,
};

static int cuda_init_ctx(cuda_ctx *c, int device) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cuda: no CUDA device (%s)",
                          e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
    if (device < 0 || device >= n)
        return vc_err_set(VC_ERR_INVALID, "cuda: device %d out of range (%d devices)", device, n);
    c->device = device;
    CU_TRY(cudaSetDevice(device));
    CU_TRY(cudaDeviceGetAttribute(&c->n_sm, cudaDevAttrMultiProcessorCount, device));
    CU_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CU_TRY(cudaDeviceGetDefaultMemPool(&c->pool, device));
    uint64_t keep = UINT64_MAX;
    CU_TRY(cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &keep));
    const char *prof = getenv("VLLM_CUDA_PROFILE");
    if (prof && *prof && strcmp(prof, "0") != 0 && cuda_profile_init() < 0) return VC_ERR_RUNTIME;
    const char *pdl = getenv("VLLM_CUDA_PDL");
    cuda_pdl_enabled = !(pdl && !strcmp(pdl, "0"));
    CU_TRY(cudaMalloc((void **)&c->d_flags, sizeof(int)));
    CU_TRY(cudaMalloc((void **)&c->fd_ws, CUDA_FD_WS_FLOATS(c->n_sm) * sizeof(float)));
    CU_TRY(cudaMalloc((void **)&c->fd_cnt, 4 * (size_t)c->n_sm * sizeof(int)));
    CU_TRY(cudaMemset(c->fd_cnt, 0, 4 * (size_t)c->n_sm * sizeof(int)));
    CU_TRY(cudaMemset(c->d_flags, 0, sizeof(int)));
    CU_TRY(cudaMallocHost((void **)&c->h_flags, sizeof(int)));
    CU_TRY(cudaMallocHost((void **)&c->stage, CUDA_STAGE_CHUNKS * CUDA_STAGE_CHUNK_BYTES));
    for (int i = 0; i < CUDA_STAGE_CHUNKS; i++)
        CU_TRY(cudaEventCreateWithFlags(&c->stage_ev[i], cudaEventDisableTiming));
    c->blas_ws_bytes = 32u << 20;
    CU_TRY(cudaMalloc(&c->blas_ws, c->blas_ws_bytes));
    CUBLAS_TRY(cublasCreate(&c->blas));
    CUBLAS_TRY(cublasSetStream(c->blas, c->stream));
    CUBLAS_TRY(cublasSetWorkspace(c->blas, c->blas_ws, c->blas_ws_bytes));
    /* Default math: SGEMM stays plain fp32 (TF32 only comes with
     * CUBLAS_TF32_TENSOR_OP_MATH), half-precision GEMMs use tensor cores.
     * test_cuda_ops bounds the SGEMM path at 2e-5, which TF32 would miss. */
    CUBLAS_TRY(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    return VC_OK;
}

static rt_backend *cuda_create(const rt_backend_params *p) {
    rt_backend *be = (rt_backend *)calloc(1, sizeof *be);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        vc_err_set(VC_ERR_OOM, "cuda backend: out of memory");
        return NULL;
    }
    be->vt = &g_cuda_vt;
    be->ctx = c;
    be->device = RT_DEV_CUDA;
    c->device = p->device_id;
    if (cuda_init_ctx(c, p->device_id) < 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", vc_err_msg());
        int st = vc_err_status();
        cuda_destroy(be);
        vc_err_set(st, "%s", msg);
        return NULL;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, c->device) == cudaSuccess)
        VC_INFO("cuda backend: device %d %s (sm_%d%d, %d SMs, %.1f GiB)", c->device, prop.name,
                prop.major, prop.minor, prop.multiProcessorCount,
                (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return be;
}

/* The driver's device count (rt_backend_device_count): 0 where cudaGetDeviceCount
 * fails (no driver, no device, a driver older than the runtime); *mem0:
 * device 0's total memory. */
static int cuda_count(size_t *mem0) {
    int n = 0;
    *mem0 = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it for later calls */
        return 0;
    }
    cudaDeviceProp p;
    if (n > 0 && cudaGetDeviceProperties(&p, 0) == cudaSuccess) *mem0 = p.totalGlobalMem;
    else (void)cudaGetLastError();
    return n;
}

void cuda_backend_register(void) {
    rt_backend_register(RT_DEV_CUDA, cuda_create);
    rt_backend_register_count(RT_DEV_CUDA, cuda_count);
    static rt_op_fn fns[RT_OP_COUNT];
    fns[RT_OP_EMBED] = cuda_op_embed;
    fns[RT_OP_MATMUL] = cuda_op_matmul;
    fns[RT_OP_RMSNORM] = cuda_op_rmsnorm;
    fns[RT_OP_ROPE] = cuda_op_rope;
    fns[RT_OP_GLU] = cuda_op_glu;
    fns[RT_OP_ADD] = cuda_op_add;
    fns[RT_OP_SCALE] = cuda_op_scale;
    fns[RT_OP_SOFTMAX] = cuda_op_softmax;
    fns[RT_OP_ATTENTION] = cuda_op_attention;
    fns[RT_OP_COPY] = cuda_op_copy;
    fns[RT_OP_ARGMAX] = cuda_op_argmax;
    fns[RT_OP_KV_STORE] = cuda_op_kv_store;
    fns[RT_OP_PAGED_ATTENTION] = cuda_op_paged_attention;
    fns[RT_OP_SAMPLE] = cuda_op_sample;
    fns[RT_OP_ADD_RMSNORM] = cuda_op_add_rmsnorm;
    fns[RT_OP_QK_ROPE_STORE] = cuda_op_qk_rope_store;
    fns[RT_OP_MATMUL_GLU] = cuda_op_matmul_glu;
    fns[RT_OP_COMBINE] = cuda_op_combine;
    fns[RT_OP_MATMUL3] = cuda_op_matmul3;
    fns[RT_OP_MATMUL_ROPE_STORE] = cuda_op_matmul_rope_store;
    fns[RT_OP_MATMUL_ADD] = cuda_op_matmul_add;
    const char *prof = getenv("VLLM_CUDA_PROFILE");
    if (prof && *prof && strcmp(prof, "0") != 0) {
        cuda_profile_install(fns);
        return;
    }
    for (int o = 0; o < RT_OP_COUNT; o++)
        if (fns[o]) rt_op_register((rt_op)o, RT_DEV_CUDA, fns[o]);
}
