/* arch_gemma3 — the Gemma 3 text family (Gemma3ForCausalLM: 270M, 1B; GGUF
 * arch "gemma3").
 *
 * Per layer ("sandwich" norms, every norm RMSNorm times (off + w)):
 *   h   = x + post_attn_norm(Wo · attn(rope(qnorm(Wq·n)), rope(knorm(Wk·n)), Wv·n)),  n = attn_norm(x)
 *   out = h + post_ffn_norm(Wdown · (gelu_tanh(Wgate·n') * Wup·n')),                 n' = ffn_norm(h)
 * with x0 = embed(ids) * sqrt(hidden) and logits = output_norm(x) · E^T (tied).
 * QK-norm is per head over head_dim, before RoPE. Layers follow the config's
 * local/global pattern (mdl_config_layer_window): sliding layers see the last
 * sliding_window keys and rotate with the local RoPE table (inv_freq_swa,
 * unscaled), global layers see everything and use the scaled global table.
 * Scores are scaled by cfg.attn_scale (query_pre_attn_scalar^-0.5); Gemma 3
 * has no logit softcapping. off = cfg.norm_w_offset: 1 for HF checkpoints
 * (they store w - 1), 0 for GGUF (the converter added the 1).
 *
 * sqrt(hidden) is applied in fp32, as llama.cpp does and as transformers does
 * for fp32 weights; transformers with bf16 weights rounds it to bf16 first
 * (sqrt(640) = 25.298 -> 25.25), a 0.2% difference on the embeddings.
 *
 * Tensor parallelism as arch_llama: Wq/Wk/Wv/Wgate/Wup and the LM head split
 * by rows, Wo/Wdown by columns with an all-reduce after them; the sandwich
 * norms (post_attn_norm, post_ffn_norm) then see the full sum.
 */
#include "model/model_impl.h"

#include "base/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gemma3_load(mdl_model *m) {
    const mdl_config *c = &m->cfg;
    int64_t d = c->hidden, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    int64_t ff = c->intermediate, hd = c->head_dim;
    int64_t s_d[1] = {d};
    if (c->rot_dim != hd) return vc_err_set(VC_ERR_FORMAT, "%s: Gemma 3 rotates the whole head", mdl_get_path(m));
    if (mdl_bind_embedding(m) < 0) return -1;
    if (mdl_bind(m, &m->out_norm, "output_norm.weight", 1, s_d, true) < 0) return -1;
    m->embed_scale = sqrtf((float)d);
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return vc_err_set(VC_ERR_OOM, "out of memory");
    for (int64_t l = 0; l < c->n_layers; l++) {
        mdl_layer *L = &m->layers[l];
        char name[96];
        /* split: TP shard dimension (0 rows, 1 columns, -1 replicated). */
#define BIND(field, canon, split, ...)                                                                 \
    do {                                                                                               \
        int64_t shp[] = {__VA_ARGS__};                                                                 \
        snprintf(name, sizeof name, "blk.%lld." canon, (long long)l);                                  \
        if (mdl_bind_split(m, &L->field, name, (int)(sizeof shp / sizeof shp[0]), shp, split, true) < 0) \
            return -1;                                                                                 \
    } while (0)
        BIND(attn_norm, "attn_norm.weight", -1, d);
        BIND(wq, "attn_q.weight", 0, qd, d);
        BIND(wk, "attn_k.weight", 2, kvd, d);
        BIND(wv, "attn_v.weight", 2, kvd, d);
        BIND(wo, "attn_output.weight", 1, d, qd);
        BIND(q_norm, "attn_q_norm.weight", -1, hd);
        BIND(k_norm, "attn_k_norm.weight", -1, hd);
        BIND(post_attn_norm, "post_attention_norm.weight", -1, d);
        BIND(ffn_norm, "ffn_norm.weight", -1, d);
        BIND(w_gate, "ffn_gate.weight", 0, ff, d);
        BIND(w_up, "ffn_up.weight", 0, ff, d);
        BIND(w_down, "ffn_down.weight", 1, d, ff);
        BIND(post_ffn_norm, "post_ffw_norm.weight", -1, d);
#undef BIND
    }
    return VC_OK;
}


static int gemma3_forward(mdl_model *m, mdl_kv *kv, int64_t n, int64_t S, int64_t max_blocks,
                          int64_t n_logits) {
    const mdl_config *c = &m->cfg;
    rt_backend *be = m->be;
    int64_t hd = c->head_dim;
    float off = c->norm_w_offset, eps = c->rms_eps;
    float scale = c->attn_scale > 0 ? c->attn_scale : 1.0f / sqrtf((float)hd);
    mdl_step_views sv;
    mdl_step_views_make(m, n, S, max_blocks, &sv);

    bool last = false; /* the last layer went to the logit rows (mdl_last_rows_views) */
    MDL_TRY(mdl_embed(m, &sv.x, &sv.ids));
    MDL_TRY(rt_scale(be, &sv.x, &sv.x, m->embed_scale));
    for (int64_t l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        int32_t window = mdl_config_layer_window(c, l);
        const rt_tensor *inv_freq = window > 0 && m->inv_freq_swa.data ? &m->inv_freq_swa : &m->inv_freq;
        MDL_TRY(rt_rmsnorm(be, &sv.xb, &sv.x, &L->attn_norm, eps, off));
        MDL_TRY(rt_matmul3(be, &sv.q, &sv.k, &sv.v, &sv.xb, &L->wq, &L->wk, &L->wv));
        MDL_TRY(rt_rmsnorm(be, &sv.q2, &sv.q2, &L->q_norm, eps, off));
        MDL_TRY(rt_rmsnorm(be, &sv.k2, &sv.k2, &L->k_norm, eps, off));
        MDL_TRY(rt_rope(be, &sv.q3, &sv.pos, inv_freq, (int)c->rot_dim, true, 1.0f));
        MDL_TRY(rt_rope(be, &sv.k3, &sv.pos, inv_freq, (int)c->rot_dim, true, 1.0f));
        MDL_TRY(rt_kv_store(be, &kv->k[l], &sv.k3, &sv.slots));
        MDL_TRY(rt_kv_store(be, &kv->v[l], &sv.v3, &sv.slots));
        if (l == c->n_layers - 1 && m->last_rows > 0 && m->last_rows == n_logits && 4 * n_logits <= n) {
            MDL_TRY(mdl_last_rows_views(m, &sv, n, max_blocks)); /* the rest on the logit rows */
            last = true;
        }
        MDL_TRY(mdl_paged_attention(m, &sv, &kv->k[l], &kv->v[l], scale, 0.0f, window));
        MDL_TRY(rt_matmul(be, &sv.xb, &sv.att, &L->wo, NULL));
        MDL_TRY(mdl_tp_all_reduce(m, &sv.xb));
        MDL_TRY(rt_rmsnorm(be, &sv.xb, &sv.xb, &L->post_attn_norm, eps, off));
        MDL_TRY(rt_add(be, &sv.x, &sv.x, &sv.xb));
        MDL_TRY(rt_rmsnorm(be, &sv.xb, &sv.x, &L->ffn_norm, eps, off));
        MDL_TRY(rt_matmul(be, &sv.gate, &sv.xb, &L->w_gate, NULL));
        MDL_TRY(rt_matmul(be, &sv.up, &sv.xb, &L->w_up, NULL));
        MDL_TRY(rt_glu(be, &sv.gate, &sv.gate, &sv.up, RT_ACT_GELU_TANH));
        MDL_TRY(rt_matmul(be, &sv.xb, &sv.gate, &L->w_down, NULL));
        MDL_TRY(mdl_tp_all_reduce(m, &sv.xb));
        MDL_TRY(rt_rmsnorm(be, &sv.xb, &sv.xb, &L->post_ffn_norm, eps, off));
        MDL_TRY(rt_add(be, &sv.x, &sv.x, &sv.xb));
    }
    if (last) return mdl_logits_head_first(m, &sv, n_logits, NULL, eps, off);
    return mdl_logits_head(m, &sv, n_logits, eps, off);

}

const mdl_arch_impl mdl_arch_gemma3 = {
    .family = "gemma3",
    .load = gemma3_load,
    .forward = gemma3_forward,
    .last_rows = true,
};
