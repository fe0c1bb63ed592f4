/* model_impl — private to src/model: the model struct shared by model.c
 * (loading, batches, sequences) and the architecture files (forward). */
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
    rt_tensor ffn_norm;            /* [d] f32 (Gemma: pre_feedforward_layernorm) */
    rt_tensor post_attn_norm;      /* optional [d] f32 (Gemma sandwich norm on the attn output) */
    rt_tensor post_ffn_norm;       /* optional [d] f32 (Gemma sandwich norm on the FFN output) */
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
    rt_tensor inv_freq_swa; /* [rot_dim/2] f32 for sliding layers when cfg.rope_theta_swa > 0
                               (Gemma 3: local base, unscaled), else data NULL */
    float embed_scale;    /* token embeddings are multiplied by this (0 = not at all) */
    mdl_layer *layers;

    /* Device allocations owned by the model (converted weights, buffers). */
    void **owned;
    int n_owned, cap_owned;

    /* Activation buffers for max_batch tokens. */
    rt_tensor x, xb;               /* [B,d] */
    rt_tensor q, k, v, att;        /* [B,h*hd] [B,kvh*hd] [B,kvh*hd] [B,h*hd] */
    rt_tensor gate, up;            /* [B,ff] */
    /* Batch metadata on the device (mdl_batch copied in). */
    rt_tensor ids, pos, slots;     /* [B] i32 */
    rt_tensor qsl, seq_lens;       /* [B+1], [B] i32 */
    rt_tensor logit_rows;          /* [B] i32 */
    rt_tensor block_tables;        /* [bt_cap] i32, grown on demand */
    int64_t bt_cap;
    rt_tensor logits;              /* [rows,V], grown on demand */
    int64_t logits_rows;
};

struct mdl_kv {
    mdl_model *m;
    int32_t num_blocks, block_size;
    rt_tensor *k, *v;  /* per layer [num_blocks, B, kvh, hd] f32 */
};

struct mdl_seq {
    mdl_model *m;
    mdl_kv *kv;
    int64_t max_ctx, len;
    int32_t *block_table; /* identity 0..nb-1 */
    int32_t nb;
};

struct mdl_arch_impl {
    const char *family;
    /* Bind weights (m->cfg filled, m->src open). */
    int (*load)(mdl_model *m);
    /* Forward the batch whose metadata is on the device (T tokens, S
     * sequences, max_blocks per block-table row); writes logits of the
     * n_logits rows listed in m->logit_rows into m->logits. */
    int (*forward)(mdl_model *m, mdl_kv *kv, int64_t T, int64_t S, int64_t max_blocks, int64_t n_logits);
};

/* Bind a weight by canonical name with the expected shape; required=false
 * leaves t->data NULL when absent. Small (1-D) tensors are converted to f32. */
int mdl_bind(mdl_model *m, rt_tensor *t, const char *canon, int ndim, const int64_t *shape,
             bool required);

extern const mdl_arch_impl mdl_arch_llama;
extern const mdl_arch_impl mdl_arch_gemma3;

#endif
