/* weights_fuse — stacked weight copies for fewer, larger matmuls.
 *
 * A batch-1 decode layer on a GPU is bound by the number of kernels, not by
 * their size: [Wq; Wk; Wv] as one [qd + 2*kvd, d] matrix turns three GEMVs
 * into one (and [Wgate; Wup] two into one). The stacked tensor is the only
 * copy: wq/wk/wv become row views of it, so device memory does not grow.
 * Only for backends that copy the weights anyway (rt_backend_is_host false);
 * the CPU computes on the mmap and keeps separate matrices (no RSS growth).
 * Under tensor parallelism each rank stacks its own shards (after the split).
 */
#include "model/model_impl.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

#define MAX_PARTS 4

int mdl_bind_stacked(mdl_model *m, rt_tensor *whole, int n, rt_tensor *const *parts, const char *const *canon,
                     const int64_t (*shapes)[2], const int *split) {
    memset(whole, 0, sizeof *whole);
    if (rt_backend_is_host(m->be) || m->upcast_weights || n < 1 || n > MAX_PARTS) return 0;
    rt_tensor host[MAX_PARTS];
    int64_t rows = 0;
    for (int i = 0; i < n; i++) {
        int rc = mdl_find_split_host(m, canon[i], 2, shapes[i], split[i], false, &host[i]);
        if (rc < 0) return rc;
        if (!host[i].data || host[i].dtype != host[0].dtype || host[i].shape[1] != host[0].shape[1] ||
            !rt_tensor_is_contiguous(&host[i]))
            return 0;
        rows += host[i].shape[0];
    }
    int64_t s[2] = {rows, host[0].shape[1]};
    MDL_TRY(mdl_own_tensor(m, whole, host[0].dtype, 2, s));
    int64_t r0 = 0;
    for (int i = 0; i < n; i++) {
        *parts[i] = rt_tensor_slice0(whole, r0, host[i].shape[0]);
        MDL_TRY(rt_tensor_copy_bytes(m->be, parts[i], &host[i]));
        r0 += host[i].shape[0];
    }
    return 1;
}

int mdl_stack_bound(mdl_model *m, rt_tensor *whole, int n, rt_tensor *const *parts) {
    memset(whole, 0, sizeof *whole);
    int64_t len = 0;
    for (int i = 0; i < n; i++) {
        if (!parts[i]->data || parts[i]->dtype != RT_F32 || !rt_tensor_is_contiguous(parts[i])) return 0;
        len += rt_tensor_nelem(parts[i]);
    }
    MDL_TRY(mdl_own_tensor(m, whole, RT_F32, 1, &len));
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t k = rt_tensor_nelem(parts[i]);
        rt_tensor dst = rt_tensor_slice0(whole, off, k);
        MDL_TRY(rt_tensor_copy_bytes(m->be, &dst, parts[i]));
        *parts[i] = dst; /* the separate copy stays allocated (a few KiB) */
        off += k;
    }
    return 1;
}
