/* cuda_mk.h — the megakernel lab's C interface (cuda_mk.cu; used by
 * tests/backends/cuda/test_cuda_mk.c): a chain of decode-layer phases run
 * by one persistent kernel. */
#ifndef CUDA_MK_H
#define CUDA_MK_H

#include "runtime/backend.h"
#include "runtime/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CUDA_MK_GEMV = 0, CUDA_MK_ATTN = 1 };

/* One phase. Outputs lie one after another in the plan's out buffer
 * (f32); inputs are x (-1) or an earlier phase's output (its index).
 *   GEMV: out = W v (+ res), W bf16 [R, C] contiguous (C % 256 == 0); v =
 *     the first C values of in_from's output, RMS-normalised by norm_w (f32
 *     C; NULL: not) with the plan's eps; glu: W holds gate | up rows, out
 *     = SiLU(gate) * up (R / 2 values); res_from: -2 none, -1 x, else an
 *     earlier output added to the R outputs (not with glu).
 *   ATTN: one decode token's attention, head_dim 128: in_from's output is
 *     q | k | v (n_heads, n_kv_heads, n_kv_heads heads of 128), q and k
 *     RMS-normalised per head by q_norm / k_norm (f32 128; NULL: not),
 *     rotated (neox) by pos * inv_freq (f32 64); the new k, v stored as
 *     bf16 at position pos of the paged cache (k_cache, v_cache bf16
 *     [blocks, B, n_kv_heads, 128], block_table i32, B a power of two);
 *     out = softmax(q K^T scale) V over positions 0 .. pos (n_heads x 128).
 *     `splits` CTAs a kv head share the keys (partials merged by the last
 *     one of the head). */
typedef struct {
    int kind;
    int in_from;
    /* GEMV */
    const rt_tensor *w;
    int glu;
    const rt_tensor *norm_w;
    int res_from;
    /* ATTN */
    const rt_tensor *k_cache, *v_cache, *block_table, *inv_freq, *q_norm, *k_norm;
    int64_t n_heads, n_kv_heads, pos;
    float scale;
    int splits;
} cuda_mk_desc;

typedef struct cuda_mk_plan cuda_mk_plan;

/* NULL (error set) when the chain does not fit the lab's limits. */
cuda_mk_plan *cuda_mk_plan_create(rt_backend *be, int n, const cuda_mk_desc *d, float eps, const rt_tensor *x,
                                  rt_tensor *out);
/* Queues one run on the backend's stream. */
int cuda_mk_plan_run(cuda_mk_plan *p);
void cuda_mk_plan_free(cuda_mk_plan *p);

#ifdef __cplusplus
}
#endif

#endif
