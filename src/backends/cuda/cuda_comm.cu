/* cuda_comm — the CUDA backend's collectives over NCCL.
 *
 * One process, one thread per GPU: the group's communicators come from
 * ncclCommInitAll over the ranks' device ordinals (rank r = bes[r]'s
 * device), then each rank's thread enqueues its collectives on its own
 * backend stream, in the same order on every rank; nothing here waits for
 * the host. NVLink SHARP / multicast stays off (NCCL_NVLS_ENABLE=0) unless
 * the user set that variable: the lent machines do not allow it.
 */
#include "cuda_internal.h"

#include <nccl.h>

extern "C" {
#include "runtime/comm.h"
}

#include <string.h>

typedef struct {
    ncclComm_t nccl;
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

static int nccl_all_reduce(rt_comm *c, rt_tensor *t) {
    cuda_ctx *cx = (cuda_ctx *)c->be->ctx;
    cuda_comm_rank *rk = (cuda_comm_rank *)c->ctx;
    ncclDataType_t dt;
    if (!nccl_dtype(t->dtype, &dt)) return vc_err_set(VC_ERR_UNSUPPORTED, "nccl: dtype not supported");
    CU_TRY(cudaSetDevice(cx->device));
    NCCL_TRY(ncclAllReduce(t->data, t->data, (size_t)rt_tensor_nelem(t), dt, ncclSum, rk->nccl, cx->stream));
    nccl_clear_last_error();
    return 0;
}

static int nccl_all_gather(rt_comm *c, const rt_tensor *src, rt_tensor *dst) {
    cuda_ctx *cx = (cuda_ctx *)c->be->ctx;
    cuda_comm_rank *rk = (cuda_comm_rank *)c->ctx;
    ncclDataType_t dt;
    if (!nccl_dtype(src->dtype, &dt)) return vc_err_set(VC_ERR_UNSUPPORTED, "nccl: dtype not supported");
    CU_TRY(cudaSetDevice(cx->device));
    NCCL_TRY(ncclAllGather(src->data, dst->data, (size_t)rt_tensor_nelem(src), dt, rk->nccl, cx->stream));
    nccl_clear_last_error();
    return 0;
}

static void nccl_group_free(rt_comm **comms, int world) {
    for (int r = 0; r < world; r++) {
        cuda_comm_rank *rk = (cuda_comm_rank *)comms[r]->ctx;
        if (rk) {
            ncclCommDestroy(rk->nccl);
            free(rk);
        }
        free(comms[r]);
    }
    nccl_clear_last_error();
}

static const rt_comm_vtable g_nccl_vt = {
    "nccl",
    nccl_all_reduce,
    nccl_all_gather,
    nccl_group_free,
};

static int nccl_group_create(rt_backend **bes, int world, rt_comm **comms) {
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* 0: keep a value the user set */
    int *devs = (int *)calloc((size_t)world, sizeof *devs);
    ncclComm_t *nc = (ncclComm_t *)calloc((size_t)world, sizeof *nc);
    if (!devs || !nc) {
        free(devs);
        free(nc);
        return vc_err_set(VC_ERR_OOM, "out of memory");
    }
    for (int r = 0; r < world; r++) devs[r] = ((cuda_ctx *)bes[r]->ctx)->device;
    ncclResult_t res = ncclCommInitAll(nc, world, devs);
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
