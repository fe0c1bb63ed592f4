/* cpu_combine — COMBINE: dst[pos[j]] = vals[sel[j]] (async scheduling's
 * splice of the previous step's sampled ids into the next step's inputs).
 * A handful of entries per step: runs on the caller, no pool. Every index
 * is checked before anything is written, so a bad one leaves dst as it was. */
#include "backends/cpu/cpu_internal.h"

#include "base/err.h"

int cpu_op_combine(rt_backend *be, const rt_op_args *a) {
    (void)be;
    int32_t *dst = a->dst->data;
    const int32_t *vals = a->src[0]->data, *pos = a->src[1]->data, *sel = a->src[2]->data;
    int64_t N = a->dst->shape[0], P = a->src[0]->shape[0], n = a->src[1]->shape[0];
    for (int64_t j = 0; j < n; j++)
        if (pos[j] < 0 || pos[j] >= N || sel[j] < 0 || sel[j] >= P)
            return vc_err_set(VC_ERR_INVALID, "combine: entry %lld (pos %d, sel %d) out of range [0, %lld) x [0, %lld)",
                              (long long)j, pos[j], sel[j], (long long)N, (long long)P);
    for (int64_t j = 0; j < n; j++) dst[pos[j]] = vals[sel[j]];
    return VC_OK;
}
