/* cuda_combine — COMBINE: dst[pos[j]] = vals[sel[j]], one thread per entry.
 *
 * Async scheduling splices the ids the previous step sampled (still on the
 * device) into the next step's input ids and sampler history with it, so
 * the next step is queued before those ids reach the host. The indices are
 * device data: an entry out of range writes nothing and raises
 * CUDA_FLAG_BAD_COMBINE (reported by the next sync or event wait).
 */
#include "backends/cuda/cuda_internal.h"

__global__ void k_combine(int32_t *dst, int64_t N, const int32_t *vals, int64_t P, const int32_t *pos,
                          const int32_t *sel, int64_t n, int *flags) {
    CUDA_PDL_ENTER();
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
        int32_t p = pos[j], s = sel[j];
        if (p < 0 || p >= N || s < 0 || s >= P) atomicOr(flags, CUDA_FLAG_BAD_COMBINE);
        else dst[p] = vals[s];
    }
}

extern "C" int cuda_op_combine(rt_backend *be, const rt_op_args *a) {
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    const rt_tensor *vals = a->src[0], *pos = a->src[1], *sel = a->src[2];
    if (cuda_check_dev(a->dst, "combine") || cuda_check_dev(vals, "combine") || cuda_check_dev(pos, "combine") ||
        cuda_check_dev(sel, "combine"))
        return VC_ERR_INVALID;
    int64_t n = pos->shape[0];
    if (n == 0) return VC_OK;
    if (cuda_enter(c) < 0) return VC_ERR_RUNTIME;
    cuda_launch(k_combine, dim3(cuda_blocks(n, 128)), dim3(128), 0, c->stream, (int32_t *)a->dst->data,
                a->dst->shape[0], (const int32_t *)vals->data, vals->shape[0], (const int32_t *)pos->data,
                (const int32_t *)sel->data, n, c->d_flags);
    CU_LAUNCHED();
    return VC_OK;
}
