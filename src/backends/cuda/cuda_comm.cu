/* cuda_comm — the CUDA backend's collectives over NCCL.
 *
 * One process, one thread per GPU: the group's communicators come from
 * ncclCommInitAll over the ranks' device ordinals (rank r = bes[r]'s
 * device), then each rank's thread enqueues its collectives on its own
 * backend stream, in the same order on every rank; nothing here waits for
 * the host. rt_comm_all_reduce_start queues NCCL on a second stream of the
 * rank (high priority, created at the first start) after an event of the
 * backend stream, so the GEMMs queued next overlap the transfer;
 * rt_comm_wait makes the backend stream wait for the event recorded after
 * it. NCCL runs one communicator's collectives in the order they reach the
 * GPU, and they reach it in issue order: a start is ordered after the
 * backend stream's earlier work (synchronous collectives included), and the
 * model waits every start before its next synchronous collective. While a
 * graph is recorded a start stays on the backend stream.
 * VLLM_TP_SM_MARGIN leaves SMs to NCCL beside the GEMMs (sm_margin). NVLink SHARP / multicast stays off (NCCL_NVLS_ENABLE=0) unless
 * the user set that variable: the lent machines do not allow it.
 */
#include "cuda_internal.h"

#include <nccl.h>

extern "C" {
#include "base/log.h"
#include "runtime/comm.h"
}

#include <string.h>

/* ncclAlltoAll: NCCL 2.28; symmetric windows: 2.27 (older: unsupported). */
#define VC_NCCL_HAS_A2A (NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0))
#define VC_NCCL_HAS_WIN (NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0))

/* A symmetric buffer of the rank (rt_comm_group_alloc_sym). */
typedef struct {
    void *ptr;
    size_t bytes;
#if VC_NCCL_HAS_WIN
    ncclWindow_t win;
#endif
} sym_buf;

typedef struct {
    ncclComm_t nccl;
    sym_buf *sym; /* [n_sym], freed with the group */
    int n_sym;
    cudaStream_t side; /* asynchronous collectives; NULL until the first start */
    cudaEvent_t fork[RT_COMM_SLOTS], done[RT_COMM_SLOTS];
    bool pending[RT_COMM_SLOTS]; /* started, not yet waited */
} cuda_comm_rank;

/* NCCL may leave a benign error in the thread's last-error slot (e.g. from
 * probing peer access or pointer attributes); the backend's launch checks
 * read that slot, so it is cleared after every NCCL call of this thread. */
static void nccl_clear_last_error(void) { (void)cudaGetLastError(); }

static int nccl_fail(ncclResult_t r, const char *expr, const char *file, int line) {
    return vc_err_set(VC_ERR_RUNTIME, "%s:%d: %s: %s", file, line, expr, ncclGetErrorString(r));
}

#define NCCL_TRY(call)                                                        \
    do {                                                                      \
        ncclResult_t r_ = (call);                                             \
        if (r_ != ncclSuccess) return nccl_fail(r_, #call, __FILE__, __LINE__); \
    } while (0)

static bool nccl_dtype(rt_dtype dt, ncclDataType_t *out) {
    switch (dt) {
    case RT_F32: *out = ncclFloat32; return true;
    case RT_F16: *out = ncclFloat16; return true;
    case RT_BF16: *out = ncclBfloat16; return true;
    default: return false;
    }
}

/* Collectives on symmetric buffers (NCCL's symmetric kernels) take only
 * per-rank blocks that start and end on 16-byte boundaries: on the H200
 * machine NCCL 2.28.3 and 2.28.9 both returned wrong sums for bf16
 * reduce-scatters of odd block lengths there (the first values of rank 1's
 * block; test_cuda_comm's symmetric rounds), while every aligned size from
 * 64 k to 16 M values was exact. The model's blocks (rows x hidden, bf16)
 * always are; anything else gets an error before NCCL is called, on every
 * rank alike (no rank is left waiting in the collective). */
static bool in_sym(const cuda_comm_rank *rk, const void *p) {
    for (int i = 0; i < rk->n_sym; i++) {
        const char *b = (const char *)rk->sym[i].ptr;
        if ((const char *)p >= b && (const char *)p < b + rk->sym[i].bytes) return true;
    }
    return false;
}

static int sym_aligned(const cuda_comm_rank *rk, const void *a, const void *b, size_t block_bytes, const char *what) {
    if (!in_sym(rk, a) && !in_sym(rk, b)) return 0;
    if (block_bytes % 16 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0) return 0;
    return vc_err_set(VC_ERR_UNSUPPORTED,
                      "nccl: %s in symmetric buffers needs blocks of a multiple of 16 bytes at 16-byte "
                      "addresses (got %zu bytes): NCCL's symmetric kernels sum misaligned blocks wrongly",
                      what, block_bytes);
}

/* The checks of every collective before NCCL is called: a dtype NCCL
 * sums (dt), and in symmetric buffers whole 16-byte blocks of `block`
 * bytes (sym_aligned). */
static int coll_prep(const cuda_comm_rank *rk, const rt_tensor *src, const rt_tensor *dst, size_t block,
                     const char *what, ncclDataType_t *dt) {
    if (!nccl_dtype(src->dtype, dt)) return vc_err_set(VC_ERR_UNSUPPORTED, "nccl: dtype not supported");
    return sym_aligned(rk, src->data, dst->data, block, what);
}

/* An all-reduce's per-rank share: 1 (never aligned) when the bytes do not
 * split evenly. */
static size_t sym_ar_block(const rt_tensor *t, int world) {
    size_t nb = rt_tensor_nbytes(t);
    return nb % (size_t)world ? 1 : nb / (size_t)world;
}

static int nccl_all_reduce(rt_comm *c, rt_tensor *t) {
    cuda_ctx *cx = (cuda_ctx *)c->be->ctx;
    cuda_comm_rank *rk = (cuda_comm_rank *)c->ctx;
    ncclDataType_t dt;
    if (coll_prep(rk, t, t, sym_ar_block(t, c->world), "all_reduce", &dt) < 0) return VC_ERR_UNSUPPORTED;
    CU_TRY(cudaSetDevice(cx->device));
    NCCL_TRY(ncclAllReduce(t->data, t->data, (size_t)rt_tensor_nelem(t), dt, ncclSum, rk->nccl, cx->stream));
    nccl_clear_last_error();
    return 0;
}

static int nccl_all_gather(rt_comm *c, const rt_tensor *src, rt_tensor *dst) {
    cuda_ctx *cx = (cuda_ctx *)c->be->ctx;
    cuda_comm_rank *rk = (cuda_comm_rank *)c->ctx;
    ncclDataType_t dt;
    if (coll_prep(rk, src, dst, rt_tensor_nbytes(src), "all_gather", &dt) < 0) return VC_ERR_UNSUPPORTED;
    CU_TRY(cudaSetDevice(cx->device));
    NCCL_TRY(ncclAllGather(src->data, dst->data, (size_t)rt_tensor_nelem(src), dt, rk->nccl, cx->stream));
    nccl_clear_last_error();
    return 0;
}

/* The side stream and its events, made on the rank's thread at its first
 * start (the device is current). */
static int side_init(cuda_comm_rank *rk) {
    int lo = 0, hi = 0;
    CU_TRY(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    CU_TRY(cudaStreamCreateWithPriority(&rk->side, cudaStreamNonBlocking, hi));
    for (int s = 0; s < RT_COMM_SLOTS; s++) {
        CU_TRY(cudaEventCreateWithFlags(&rk->fork[s], cudaEventDisableTiming));
        CU_TRY(cudaEventCreateWithFlags(&rk->done[s], cudaEventDisableTiming));
    }
    return 0;
}

/* The side stream's half of a start: it waits for the work queued so far
 * on the backend stream (slot's fork event); the caller queues its NCCL
 * call on rk->side, then side_done records the slot's completion. */
static int side_fork(cuda_ctx *cx, cuda_comm_rank *rk, int slot) {
    CU_TRY(cudaSetDevice(cx->device));
    if (!rk->side && side_init(rk) < 0) return VC_ERR_RUNTIME;
    /* A slot still pending (a forward that failed before its wait) is
     * waited first: the stream never runs ahead of a collective it lost. */
    if (rk->pending[slot]) CU_TRY(cudaStreamWaitEvent(cx->stream, rk->done[slot], 0));
    rk->pending[slot] = false;
    CU_TRY(cudaEventRecord(rk->fork[slot], cx->stream));
    CU_TRY(cudaStreamWaitEvent(rk->side, rk->fork[slot], 0));
    return 0;
}

static int side_done(cuda_comm_rank *rk, int slot) {
    nccl_clear_last_error();
    CU_TRY(cudaEventRecord(rk->done[slot], rk->side));
    rk->pending[slot] = true;
    return 0;
}

static int nccl_all_reduce_start(rt_comm *c, rt_tensor *t, int slot) {
    cuda_ctx *cx = (cuda_ctx *)c->be->ctx;
    cuda_comm_rank *rk = (cuda_comm_rank *)c->ctx;
    if (cx->capturing) return nccl_all_reduce(c, t); /* one stream inside a graph */
    ncclDataType_t dt;
    if (coll_prep(rk, t, t, sym_ar_block(t, c->world), "all_reduce", &dt) < 0) return VC_ERR_UNSUPPORTED;
    if (side_fork(cx, rk, slot) < 0) return VC_ERR_RUNTIME;
    NCCL_TRY(ncclAllReduce(t->data, t->data, (size_t)rt_tensor_nelem(t), dt, ncclSum, rk->nccl, rk->side));
    return side_done(rk, slot);
}

static int nccl_all_gather_start(rt_comm *c, const rt_tensor *src, rt_tensor *dst, int slot) {
    cuda_ctx *cx = (cuda_ctx *)c->be->ctx;
    cuda_comm_rank *rk = (cuda_comm_rank *)c->ctx;
    if (cx->capturing) return nccl_all_gather(c, src, dst);
    ncclDataType_t dt;
    if (coll_prep(rk, src, dst, rt_tensor_nbytes(src), "all_gather", &dt) < 0) return VC_ERR_UNSUPPORTED;
    if (side_fork(cx, rk, slot) < 0) return VC_ERR_RUNTIME;
    NCCL_TRY(ncclAllGather(src->data, dst->data, (size_t)rt_tensor_nelem(src), dt, rk->nccl, rk->side));
    return side_done(rk, slot);
}

#if VC_NCCL_HAS_A2A
static int nccl_all_to_all(rt_comm *c, const rt_tensor *src, rt_tensor *dst) {
    cuda_ctx *cx = (cuda_ctx *)c->be->ctx;
    cuda_comm_rank *rk = (cuda_comm_rank *)c->ctx;
    ncclDataType_t dt;
    if (coll_prep(rk, src, dst, rt_tensor_nbytes(src) / (size_t)c->world, "all_to_all", &dt) < 0)
        return VC_ERR_UNSUPPORTED;
    CU_TRY(cudaSetDevice(cx->device));
    NCCL_TRY(ncclAlltoAll(src->data, dst->data, (size_t)(rt_tensor_nelem(src) / c->world), dt, rk->nccl, cx->stream));
    nccl_clear_last_error();
    return 0;
}

static int nccl_all_to_all_start(rt_comm *c, const rt_tensor *src, rt_tensor *dst, int slot) {
    cuda_ctx *cx = (cuda_ctx *)c->be->ctx;
    cuda_comm_rank *rk = (cuda_comm_rank *)c->ctx;
    if (cx->capturing) return nccl_all_to_all(c, src, dst);
    ncclDataType_t dt;
    if (coll_prep(rk, src, dst, rt_tensor_nbytes(src) / (size_t)c->world, "all_to_all", &dt) < 0)
        return VC_ERR_UNSUPPORTED;
    if (side_fork(cx, rk, slot) < 0) return VC_ERR_RUNTIME;
    NCCL_TRY(ncclAlltoAll(src->data, dst->data, (size_t)(rt_tensor_nelem(src) / c->world), dt, rk->nccl, rk->side));
    return side_done(rk, slot);
}
#endif

/* In place when dst is src's block `rank` (NCCL's own in-place form). */
static int nccl_reduce_scatter(rt_comm *c, const rt_tensor *src, rt_tensor *dst) {
    cuda_ctx *cx = (cuda_ctx *)c->be->ctx;
    cuda_comm_rank *rk = (cuda_comm_rank *)c->ctx;
    ncclDataType_t dt;
    if (coll_prep(rk, src, dst, rt_tensor_nbytes(dst), "reduce_scatter", &dt) < 0) return VC_ERR_UNSUPPORTED;
    CU_TRY(cudaSetDevice(cx->device));
    NCCL_TRY(ncclReduceScatter(src->data, dst->data, (size_t)rt_tensor_nelem(dst), dt, ncclSum, rk->nccl, cx->stream));
    nccl_clear_last_error();
    return 0;
}

static int nccl_wait(rt_comm *c, int slot) {
    cuda_ctx *cx = (cuda_ctx *)c->be->ctx;
    cuda_comm_rank *rk = (cuda_comm_rank *)c->ctx;
    if (!rk->pending[slot]) return 0;
    rk->pending[slot] = false;
    CU_TRY(cudaSetDevice(cx->device));
    CU_TRY(cudaStreamWaitEvent(cx->stream, rk->done[slot], 0));
    return 0;
}

/* Deregisters (a collective: every rank in one group call) and frees the
 * ranks' symmetric buffers. */
static void sym_free_all(rt_comm **comms, int world) {
#if VC_NCCL_HAS_WIN
    bool any = false;
    for (int r = 0; r < world; r++) any |= ((cuda_comm_rank *)comms[r]->ctx)->n_sym > 0;
    if (!any) return;
    (void)ncclGroupStart();
    for (int r = 0; r < world; r++) {
        cuda_comm_rank *rk = (cuda_comm_rank *)comms[r]->ctx;
        (void)cudaSetDevice(((cuda_ctx *)comms[r]->be->ctx)->device);
        for (int i = 0; i < rk->n_sym; i++)
            if (rk->sym[i].win) (void)ncclCommWindowDeregister(rk->nccl, rk->sym[i].win);
    }
    (void)ncclGroupEnd();
    for (int r = 0; r < world; r++) {
        cuda_comm_rank *rk = (cuda_comm_rank *)comms[r]->ctx;
        (void)cudaSetDevice(((cuda_ctx *)comms[r]->be->ctx)->device);
        for (int i = 0; i < rk->n_sym; i++) (void)ncclMemFree(rk->sym[i].ptr);
        free(rk->sym);
        rk->sym = NULL;
        rk->n_sym = 0;
    }
#else
    (void)comms;
    (void)world;
#endif
}

static void nccl_group_free(rt_comm **comms, int world) {
    for (int r = 0; r < world; r++) { /* the ranks' last collectives end first */
        cuda_comm_rank *rk = (cuda_comm_rank *)comms[r]->ctx;
        cuda_ctx *cx = (cuda_ctx *)comms[r]->be->ctx;
        if (!rk) continue;
        (void)cudaSetDevice(cx->device);
        if (rk->side) (void)cudaStreamSynchronize(rk->side);
        (void)cudaStreamSynchronize(cx->stream);
    }
    bool all = true;
    for (int r = 0; r < world; r++) all &= comms[r]->ctx != NULL;
    if (all) sym_free_all(comms, world);
    for (int r = 0; r < world; r++) {
        cuda_comm_rank *rk = (cuda_comm_rank *)comms[r]->ctx;
        if (rk) {
            ncclCommDestroy(rk->nccl);
            if (rk->side) {
                for (int s = 0; s < RT_COMM_SLOTS; s++) {
                    if (rk->fork[s]) cudaEventDestroy(rk->fork[s]);
                    if (rk->done[s]) cudaEventDestroy(rk->done[s]);
                }
                cudaStreamDestroy(rk->side);
            }
            free(rk);
        }
        free(comms[r]);
    }
    nccl_clear_last_error();
}

/* ncclMemAlloc on every rank, then one group of ncclCommWindowRegister
 * (a collective) with NCCL_WIN_COLL_SYMMETRIC. */
#if VC_NCCL_HAS_WIN
static int nccl_group_alloc_sym(rt_comm **comms, int world, size_t bytes, void **ptrs) {
    size_t al = NCCL_WIN_REQUIRED_ALIGNMENT;
    bytes = (bytes + al - 1) / al * al;
    int rc = 0, dev0 = ((cuda_ctx *)comms[0]->be->ctx)->device;
    ncclWindow_t *wins = (ncclWindow_t *)calloc((size_t)world, sizeof *wins);
    if (!wins) return vc_err_set(VC_ERR_OOM, "out of memory");
    for (int r = 0; r < world && rc == 0; r++) {
        cuda_comm_rank *rk = (cuda_comm_rank *)comms[r]->ctx;
        sym_buf *nb = (sym_buf *)realloc(rk->sym, (size_t)(rk->n_sym + 1) * sizeof *nb);
        if (!nb) {
            rc = vc_err_set(VC_ERR_OOM, "out of memory");
            break;
        }
        rk->sym = nb;
        (void)cudaSetDevice(((cuda_ctx *)comms[r]->be->ctx)->device);
        ncclResult_t e = ncclMemAlloc(&ptrs[r], bytes);
        if (e != ncclSuccess) {
            ptrs[r] = NULL;
            rc = vc_err_set(VC_ERR_RUNTIME, "nccl: ncclMemAlloc of %zu bytes on rank %d: %s", bytes, r,
                            ncclGetErrorString(e));
        }
    }
    if (rc == 0) {
        ncclResult_t e = ncclGroupStart();
        for (int r = 0; r < world && e == ncclSuccess; r++) {
            (void)cudaSetDevice(((cuda_ctx *)comms[r]->be->ctx)->device);
            e = ncclCommWindowRegister(((cuda_comm_rank *)comms[r]->ctx)->nccl, ptrs[r], bytes, &wins[r],
                                       NCCL_WIN_COLL_SYMMETRIC);
        }
        ncclResult_t e2 = ncclGroupEnd();
        if (e == ncclSuccess) e = e2;
        if (e != ncclSuccess)
            rc = vc_err_set(VC_ERR_RUNTIME, "nccl: symmetric window registration: %s", ncclGetErrorString(e));
    }
    for (int r = 0; r < world; r++) {
        if (!ptrs[r]) continue;
        cuda_comm_rank *rk = (cuda_comm_rank *)comms[r]->ctx;
        if (rc == 0) {
            rk->sym[rk->n_sym++] = (sym_buf){ptrs[r], bytes, wins[r]};
        } else {
            (void)cudaSetDevice(((cuda_ctx *)comms[r]->be->ctx)->device);
            (void)ncclMemFree(ptrs[r]);
            ptrs[r] = NULL;
        }
    }
    free(wins);
    (void)cudaSetDevice(dev0);
    nccl_clear_last_error();
    return rc;
}
#endif

static const rt_comm_vtable g_nccl_vt = {
    "nccl",
    nccl_all_reduce,
    nccl_all_gather,
    nccl_group_free,
    nccl_all_reduce_start,
    nccl_wait,
    nccl_reduce_scatter,
    nccl_all_gather_start,
#if VC_NCCL_HAS_WIN
    nccl_group_alloc_sym,
#else
    NULL,
#endif
#if VC_NCCL_HAS_A2A
    nccl_all_to_all,
    nccl_all_to_all_start,
#else
    NULL,
    NULL,
#endif
};

/* VLLM_TP_SM_MARGIN=k (world > 1): cuBLAS plans its GEMMs for k fewer SMs
 * on every rank (cublasSetSmCountTarget), leaving them to the NCCL kernels
 * that run beside the GEMMs in the overlapped prefill (arch_llama.c), as
 * Transformer Engine's sm_margin. 0 (default, not measured yet): all SMs. */
static int sm_margin(rt_backend **bes, int world) {
    const char *e = getenv("VLLM_TP_SM_MARGIN");
    int k = e ? atoi(e) : 0;
    if (world < 2 || k <= 0) return 0;
    for (int r = 0; r < world; r++) {
        cuda_ctx *cx = (cuda_ctx *)bes[r]->ctx;
        if (k >= cx->n_sm) return vc_err_set(VC_ERR_INVALID, "VLLM_TP_SM_MARGIN=%d: the GPU has %d SMs", k, cx->n_sm);
        CU_TRY(cudaSetDevice(cx->device));
        CUBLAS_TRY(cublasSetSmCountTarget(cx->blas, cx->n_sm - k));
    }
    return 0;
}

/* VLLM_TP_NCCL_CTA=efficiency|zero (NCCL >= 2.27): the communicators'
 * CTA policy (ncclConfig_t.CTAPolicy: fewest CTAs for a decent bandwidth,
 * or none where NCCL can use copy engines), so that collectives running
 * beside the GEMMs take fewer SMs; an explicit value this NCCL lacks is
 * an error. Unset: the group's preference (rt_comm_opts.prefer_zero_cta,
 * the TP layer's default with symmetric buffers) where this NCCL has the
 * zero policy, else ncclCommInitAll's defaults. Returns 1 with a policy
 * in *out (2: only preferred), 0 for the defaults, < 0 on a bad value. */
static int cta_policy(const rt_comm_opts *opts, int *out) {
    const char *e = getenv("VLLM_TP_NCCL_CTA");
    if (!e || !*e) {
#if defined(NCCL_CTA_POLICY_ZERO)
        if (opts && opts->prefer_zero_cta) {
            *out = NCCL_CTA_POLICY_ZERO;
            return 2;
        }
#endif
        (void)opts;
        return 0;
    }
    if (!strcmp(e, "default")) return 0;
#if defined(NCCL_CTA_POLICY_EFFICIENCY)
    if (!strcmp(e, "efficiency")) *out = NCCL_CTA_POLICY_EFFICIENCY;
#if defined(NCCL_CTA_POLICY_ZERO)
    else if (!strcmp(e, "zero")) *out = NCCL_CTA_POLICY_ZERO;
#endif
    else return vc_err_set(VC_ERR_INVALID, "VLLM_TP_NCCL_CTA=%s: expected default, efficiency or zero", e);
    return 1;
#else
    (void)out;
    return vc_err_set(VC_ERR_UNSUPPORTED, "VLLM_TP_NCCL_CTA=%s: this NCCL has no CTA policies", e);
#endif
}

static ncclResult_t init_comms(ncclComm_t *nc, int world, const int *devs, int policy, bool with_policy) {
    if (!with_policy) return ncclCommInitAll(nc, world, devs);
#if defined(NCCL_CTA_POLICY_EFFICIENCY)
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return r;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.CTAPolicy = policy;
    r = ncclGroupStart();
    for (int i = 0; i < world && r == ncclSuccess; i++) {
        if (cudaSetDevice(devs[i]) != cudaSuccess) r = ncclUnhandledCudaError;
        else r = ncclCommInitRankConfig(&nc[i], world, id, i, &cfg);
    }
    ncclResult_t e = ncclGroupEnd();
    (void)cudaSetDevice(devs[0]); /* the caller is rank 0's thread */
    return r != ncclSuccess ? r : e;
#else
    (void)policy;
    return ncclInvalidUsage;
#endif
}

static int nccl_group_create(rt_backend **bes, int world, const rt_comm_opts *opts, rt_comm **comms) {
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* 0: keep a value the user set */
    if (sm_margin(bes, world) < 0) return VC_ERR_INVALID;
    int policy = 0, with_policy = cta_policy(opts, &policy);
    if (with_policy < 0) return with_policy;
    int *devs = (int *)calloc((size_t)world, sizeof *devs);
    ncclComm_t *nc = (ncclComm_t *)calloc((size_t)world, sizeof *nc);
    if (!devs || !nc) {
        free(devs);
        free(nc);
        return vc_err_set(VC_ERR_OOM, "out of memory");
    }
    for (int r = 0; r < world; r++) devs[r] = ((cuda_ctx *)bes[r]->ctx)->device;
    ncclResult_t res = init_comms(nc, world, devs, policy, with_policy > 0);
    if (res != ncclSuccess && with_policy == 2) { /* only preferred: the defaults then */
        VC_WARN("nccl: the zero-CTA policy was refused (%s): default policy", ncclGetErrorString(res));
        nccl_clear_last_error();
        res = init_comms(nc, world, devs, 0, false);
    }
    free(devs);
    nccl_clear_last_error();
    if (res != ncclSuccess) {
        free(nc);
        return vc_err_set(VC_ERR_RUNTIME, "nccl: cannot create a group of %d GPUs: %s", world,
                          ncclGetErrorString(res));
    }
    int rc = 0;
    for (int r = 0; r < world; r++) {
        comms[r] = (rt_comm *)calloc(1, sizeof **comms);
        cuda_comm_rank *rk = (cuda_comm_rank *)calloc(1, sizeof *rk);
        if (!comms[r] || !rk) {
            free(rk);
            rc = vc_err_set(VC_ERR_OOM, "out of memory");
            break;
        }
        rk->nccl = nc[r];
        nc[r] = NULL;
        comms[r]->vt = &g_nccl_vt;
        comms[r]->ctx = rk;
        comms[r]->rank = r;
        comms[r]->world = world;
        comms[r]->be = bes[r];
    }
    if (rc < 0) {
        for (int r = 0; r < world; r++) {
            if (nc[r]) ncclCommDestroy(nc[r]);
            if (comms[r]) {
                cuda_comm_rank *rk = (cuda_comm_rank *)comms[r]->ctx;
                if (rk) ncclCommDestroy(rk->nccl);
                free(rk);
                free(comms[r]);
                comms[r] = NULL;
            }
        }
    }
    free(nc);
    return rc;
}

extern "C" void cuda_comm_register(void) { rt_comm_register(RT_DEV_CUDA, nccl_group_create); }
