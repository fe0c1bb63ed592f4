/* model_impl — private to src/model: the model struct shared by model.c
 * (loading, sequences) and the architecture files (forward passes). */
#ifndef MDL_MODEL_IMPL_H
#define MDL_MODEL_IMPL_H

#include "model/model.h"
#include "model/weights.h"
#include "runtime/ops.h"

typedef struct {
    rt_tensor attn_norm;           /* [d] f32 */
    rt_tensor wq, wk, wv, wo;      /* [h*hd,d] [kvh*hd,d] [kvh*hd,d] [d,h*hd] any dtype */
    rt_tensor bq, bk, bv, bo;      /* optional biases f32 (data NULL when absent) */
    rt_tensor q_norm, k_norm;      /* optional [hd] f32 (Qwen3 QK-norm) */
    rt_tensor ffn_norm;            /* [d] f32 */
    rt_tensor w_gate, w_up, w_down; /* [ff,d] [ff,d] [d,ff] */
} mdl_layer;

typedef struct mdl_arch_impl mdl_arch_impl;

struct mdl_model {
    mdl_config cfg;
    rt_backend *be;
    mdl_wsrc *src;
    const mdl_arch_impl *arch;
    int64_t max_batch;
    bool upcast_weights;

    rt_tensor tok_embd;   /* [V,d] any dtype */
    rt_tensor out_norm;   /* [d] f32 */
    rt_tensor output;     /* [V,d] (== tok_embd when tied) */
    rt_tensor inv_freq;   /* [rot_dim/2] f32, rope scaling folded in */
    mdl_layer *layers;

    /* Device allocations owned by the model (converted small tensors). */
    void **owned;
    int n_owned, cap_owned;

    /* Activation buffers for max_batch tokens. */
    rt_tensor ids, pos;            /* [B] i32 */
    rt_tensor x, xb;               /* [B,d] */
    rt_tensor q, k, v, att;        /* [B,h*hd] [B,kvh*hd] [B,kvh*hd] [B,h*hd] */
    rt_tensor gate, up;            /* [B,ff] */
    rt_tensor logits;              /* [rows,V], grown on demand */
    int64_t logits_rows;
};

struct mdl_seq {
    mdl_model *m;
    int64_t max_ctx, len;
    rt_tensor *k_cache, *v_cache;  /* per layer [max_ctx, kvh, hd] f32 */
};

struct mdl_arch_impl {
    const char *family;
    /* Bind weights (m->cfg filled, m->src open). */
    int (*load)(mdl_model *m);
    /* Forward n <= max_batch tokens at positions s->len..; ids/pos are
     * already on the device. Writes logits of the last `logit_rows` tokens
     * (0, 1 or n) into m->logits[0..logit_rows). */
    int (*forward)(mdl_model *m, mdl_seq *s, int64_t n, int64_t logit_rows);
};

/* Helpers for architecture files (model.c). */
/* Bind a weight by canonical name with the expected shape; required=false
 * leaves t->data NULL when absent. Small (1-D) tensors are converted to f32. */
int mdl_bind(mdl_model *m, rt_tensor *t, const char *canon, int ndim, const int64_t *shape,
             bool required);

extern const mdl_arch_impl mdl_arch_llama;

#endif
