/* cuda_gemv — the persistent bulk-copy decode GEMV (cuda_gemv_bulk.cu),
 * called by cuda_matmul.cu for f16/bf16 weights with 16-byte aligned rows
 * when the GEMV variant (VLLM_CUDA_GEMV) picks it.
 *
 * y[t, r] = sum_k x[t, k] W[r, k] (+ bias[r]) for t < n <= CUDA_GEMV_MAX_N,
 * or with glu: y[t, p] = act(g) * u where g, u are rows p and f + p of a
 * stacked [Wg; Wu] (f = items). A grid of at most cps CTAs per SM, each
 * owning an equal run of tiles of 8 items (rows, or gate/up pairs) and
 * streaming them through a ring of shared-memory stages filled by
 * cp.async.bulk (one producer warp, 8 consumer warps). */
#ifndef CUDA_GEMV_H
#define CUDA_GEMV_H

#include "backends/cuda/cuda_internal.h"

/* Tuning of the bulk GEMV: ring bytes per CTA, bytes per row segment
 * (a stage holds 8 or 16 segments), stages issued before the wait on the
 * previous kernel (programmatic dependent launch), CTAs per SM, and
 * whether the weights carry an L2 evict-first hint. */
typedef struct {
    int ring_kb; /* 16..248, multiple of 8 */
    int chunk;   /* bytes: 512..65536, a power of two */
    int pre;     /* 0..15 */
    int cps;     /* 1..3 */
    int ef;      /* 0 or 1 */
} cuda_gemv_bulk_cfg;

/* The default tuning (160,8192,1,1,0), and the one of VLLM_CUDA_GEMV_BULK
 * ("ring_kb,chunk,pre,cps,ef", any prefix; out-of-range fields keep the
 * default). Packed into 15 bits for cuda_ctx.gemv_cfg. */
cuda_gemv_bulk_cfg cuda_gemv_bulk_cfg_env(void);
int cuda_gemv_bulk_pack(cuda_gemv_bulk_cfg c);
cuda_gemv_bulk_cfg cuda_gemv_bulk_unpack(int code); /* 0: the default */

/* Launch on c->stream; w rows ws bytes apart (ws, w, x 16-byte aligned,
 * in % 8 == 0, x_ld % 4 == 0 when n > 1). glu: items = f pairs, bias NULL.
 * Returns VC_OK or a CUDA error (vc_err set). */
int cuda_gemv_bulk(cuda_ctx *c, const cuda_gemv_bulk_cfg *cfg, rt_dtype t, bool glu, const char *w, int64_t ws,
                   const float *x, int64_t x_ld, float *y, int64_t y_ld, const float *bias, int64_t items,
                   int64_t in, int n, int act);

#endif
