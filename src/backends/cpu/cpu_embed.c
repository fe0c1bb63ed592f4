/* cpu_embed — EMBED: dst[i,:] = dequant(table[ids[i], :]), one task per token.
 * Vocab-parallel shard (p.embed.shard): row ids[i] - base, or zeros when
 * this rank does not hold it. */
#include "backends/cpu/cpu_internal.h"

#include "base/err.h"
#include "runtime/quant.h"

#include <string.h>

typedef struct {
    const cpu_kernels *k;
    rt_tensor *dst;
    const rt_tensor *table;
    const int32_t *ids;
    int shard;
    int64_t base;
} embed_job;

static void embed_task(void *ctxp, int64_t i, int thread) {
    (void)thread;
    const embed_job *j = ctxp;
    int64_t id = (int64_t)j->ids[i] - j->base;
    float *out = rt_tensor_row(j->dst, i);
    if (j->shard && (id < 0 || id >= j->table->shape[0])) {
        memset(out, 0, (size_t)j->table->shape[1] * sizeof *out);
        return;
    }
    const char *row = (const char *)j->table->data + id * j->table->stride[0];
    if (j->table->dtype == RT_F16)
        j->k->f16_to_f32((const uint16_t *)row, out, j->table->shape[1]);
    else if (j->table->dtype == RT_BF16)
        j->k->bf16_to_f32((const uint16_t *)row, out, j->table->shape[1]);
    else
        rt_dequant_row(j->table->dtype, row, out, j->table->shape[1]);
}

int cpu_op_embed(rt_backend *be, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    const rt_tensor *table = a->src[0], *ids = a->src[1];
    if (a->dst->dtype != RT_F32)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu embed: f32 dst only (got %s)", rt_dtype_name(a->dst->dtype));
    if (!rt_tensor_is_contiguous(ids) || a->dst->stride[a->dst->ndim - 1] != 4 ||
        (!rt_dtype_info(table->dtype)->quantized && table->stride[1] != rt_dtype_info(table->dtype)->block_bytes))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu embed: rows must be contiguous");
    const int32_t *id = ids->data;
    int64_t n = rt_tensor_nelem(ids), V = table->shape[0];
    int shard = a->p.embed.shard;
    int64_t base = shard ? a->p.embed.base : 0;
    for (int64_t i = 0; i < n; i++)
        if (id[i] < 0 || (!shard && id[i] >= V))
            return vc_err_set(VC_ERR_INVALID, "embed: token id %d out of range [0, %lld)", id[i],
                              (long long)V);
    embed_job j = {.k = c->k, .dst = a->dst, .table = table, .ids = id, .shard = shard, .base = base};
    cpu_parallel(c, n, embed_task, &j, n * table->shape[1]);
    return VC_OK;
}
