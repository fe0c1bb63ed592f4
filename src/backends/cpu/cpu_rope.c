/* cpu_rope — rotary embedding in place on x[n,h,hd], one task per token.
 *
 * For pair k < rot_dim/2 at position p: theta = p * inv_freq[k] (f32, as
 * HF and ggml compute it), c = cos(theta)*attn_factor,
 * s = sin(theta)*attn_factor, and (a, b) -> (a*c - b*s, a*s + b*c) where
 * (a, b) = (x[2k], x[2k+1]) (normal) or (x[k], x[k + rot_dim/2]) (neox).
 */
#include "backends/cpu/cpu_internal.h"

#include "base/err.h"

#include <math.h>

#define MAX_PAIRS 512

typedef struct {
    rt_tensor *x;
    const int32_t *pos;
    const float *inv_freq;
    int half, neox;
    float attn_factor;
} rope_job;

static void rope_task(void *ctxp, int64_t i, int thread) {
    (void)thread;
    const rope_job *j = ctxp;
    float cs[MAX_PAIRS], sn[MAX_PAIRS];
    float p = (float)j->pos[i];
    for (int k = 0; k < j->half; k++) {
        float theta = p * j->inv_freq[k];
        cs[k] = cosf(theta) * j->attn_factor;
        sn[k] = sinf(theta) * j->attn_factor;
    }
    int64_t h = j->x->shape[1];
    for (int64_t head = 0; head < h; head++) {
        float *v = (float *)((char *)j->x->data + i * j->x->stride[0] + head * j->x->stride[1]);
        if (j->neox) {
            for (int k = 0; k < j->half; k++) {
                float a = v[k], b = v[k + j->half];
                v[k] = a * cs[k] - b * sn[k];
                v[k + j->half] = a * sn[k] + b * cs[k];
            }
        } else {
            for (int k = 0; k < j->half; k++) {
                float a = v[2 * k], b = v[2 * k + 1];
                v[2 * k] = a * cs[k] - b * sn[k];
                v[2 * k + 1] = a * sn[k] + b * cs[k];
            }
        }
    }
}

int cpu_op_rope(rt_backend *be, const rt_op_args *a) {
    cpu_ctx *c = be->ctx;
    rt_tensor *x = a->dst;
    int half = a->p.rope.rot_dim / 2;
    if (half > MAX_PAIRS)
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu rope: rot_dim %d > %d", a->p.rope.rot_dim,
                          2 * MAX_PAIRS);
    if (x->stride[2] != 4 || !rt_tensor_is_contiguous(a->src[0]) ||
        !rt_tensor_is_contiguous(a->src[1]))
        return vc_err_set(VC_ERR_UNSUPPORTED, "cpu rope: head rows must be contiguous");
    rope_job j = {.x = x, .pos = a->src[0]->data, .inv_freq = a->src[1]->data, .half = half,
                  .neox = a->p.rope.neox, .attn_factor = a->p.rope.attn_factor};
    cpu_parallel(c, x->shape[0], rope_task, &j, x->shape[0] * x->shape[1] * half * 8);
    return VC_OK;
}
