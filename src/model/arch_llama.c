/* arch_llama — the Llama family: Llama 2/3 (SmolLM2, TinyLlama), Mistral,
 * Qwen2 (q/k/v biases), Qwen3 (per-head RMSNorm on q and k).
 *
 * Per layer (pre-norm residual):
 *   h   = x + Wo · attn(rope(Wq·norm(x) [+bq]), rope(Wk·norm(x) [+bk]), Wv·norm(x) [+bv])
 *   out = h + Wdown · (silu(Wgate·norm(h)) * Wup·norm(h))
 * Differences between members are data-driven: biases and QK-norm weights
 * are bound when the checkpoint has them.
 */
#include "model/model_impl.h"

#include "base/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int llama_load(mdl_model *m) {
    const mdl_config *c = &m->cfg;
    int64_t d = c->hidden, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    bool r0 = m->tp_rank == 0;
    int64_t ff = c->intermediate, V = c->vocab;
    int64_t s_vd[2] = {V, d}, s_d[1] = {d};
    if (mdl_bind(m, &m->tok_embd, "token_embd.weight", 2, s_vd, true) < 0) return -1;
    if (mdl_bind(m, &m->out_norm, "output_norm.weight", 1, s_d, true) < 0) return -1;
    if (!c->tie_embeddings) {
        if (mdl_bind_split(m, &m->output, "output.weight", 2, s_vd, 0, false) < 0) return -1;
    }
    /* Tied (or GGUF without output.weight): this rank's vocab rows. */
    if (!m->output.data) m->output = rt_tensor_slice0(&m->tok_embd, m->tp_rank * m->vocab_l, m->vocab_l);
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return vc_err_set(VC_ERR_OOM, "out of memory");
    for (int64_t l = 0; l < c->n_layers; l++) {
        mdl_layer *L = &m->layers[l];
        char name[96];
        /* split: TP shard dimension (0 rows, 1 columns, -1 replicated). */
#define BIND(field, canon, req, split, ...)                                                          \
    do {                                                                                             \
        int64_t shp[] = {__VA_ARGS__};                                                               \
        snprintf(name, sizeof name, "blk.%lld." canon, (long long)l);                                \
        if (mdl_bind_split(m, &L->field, name, (int)(sizeof shp / sizeof shp[0]), shp, split, req) < 0) \
            return -1;                                                                               \
    } while (0)
        BIND(attn_norm, "attn_norm.weight", true, -1, d);
        BIND(wq, "attn_q.weight", true, 0, qd, d);
        BIND(wk, "attn_k.weight", true, 2, kvd, d);
        BIND(wv, "attn_v.weight", true, 2, kvd, d);
        BIND(wo, "attn_output.weight", true, 1, d, qd);
        BIND(bq, "attn_q.bias", false, 0, qd);
        BIND(bk, "attn_k.bias", false, 2, kvd);
        BIND(bv, "attn_v.bias", false, 2, kvd);
        BIND(bo, "attn_output.bias", false, -1, d);
        if (!r0) memset(&L->bo, 0, sizeof L->bo); /* row-parallel bias: rank 0 adds it once */
        BIND(q_norm, "attn_q_norm.weight", !strcmp(c->arch, "qwen3"), -1, c->head_dim);
        BIND(k_norm, "attn_k_norm.weight", !strcmp(c->arch, "qwen3"), -1, c->head_dim);
        BIND(ffn_norm, "ffn_norm.weight", true, -1, d);
        BIND(w_gate, "ffn_gate.weight", true, 0, ff, d);
        BIND(w_up, "ffn_up.weight", true, 0, ff, d);
        BIND(w_down, "ffn_down.weight", true, 1, d, ff);
#undef BIND
    }
    return VC_OK;
}

static const rt_tensor *opt(const rt_tensor *t) { return t->data ? t : NULL; }


static int llama_forward(mdl_model *m, mdl_kv *kv, int64_t n, int64_t S, int64_t max_blocks,
                         int64_t n_logits) {
    const mdl_config *c = &m->cfg;
    rt_backend *be = m->be;
    int64_t hd = c->head_dim;
    mdl_step_views sv;
    mdl_step_views_make(m, n, S, max_blocks, &sv);
    float scale = 1.0f / sqrtf((float)hd);

    MDL_TRY(rt_embed(be, &sv.x, &m->tok_embd, &sv.ids));
    for (int64_t l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        MDL_TRY(rt_rmsnorm(be, &sv.xb, &sv.x, &L->attn_norm, c->rms_eps, 0.0f));
        MDL_TRY(rt_matmul(be, &sv.q, &sv.xb, &L->wq, opt(&L->bq)));
        MDL_TRY(rt_matmul(be, &sv.k, &sv.xb, &L->wk, opt(&L->bk)));
        MDL_TRY(rt_matmul(be, &sv.v, &sv.xb, &L->wv, opt(&L->bv)));
        if (L->q_norm.data) MDL_TRY(rt_rmsnorm(be, &sv.q2, &sv.q2, &L->q_norm, c->rms_eps, 0.0f));
        if (L->k_norm.data) MDL_TRY(rt_rmsnorm(be, &sv.k2, &sv.k2, &L->k_norm, c->rms_eps, 0.0f));
        MDL_TRY(rt_rope(be, &sv.q3, &sv.pos, &m->inv_freq, (int)c->rot_dim, c->rope_neox, 1.0f));
        MDL_TRY(rt_rope(be, &sv.k3, &sv.pos, &m->inv_freq, (int)c->rot_dim, c->rope_neox, 1.0f));
        MDL_TRY(rt_kv_store(be, &kv->k[l], &sv.k3, &sv.slots));
        MDL_TRY(rt_kv_store(be, &kv->v[l], &sv.v3, &sv.slots));
        MDL_TRY(rt_paged_attention(be, &sv.att3, &sv.q3, &kv->k[l], &kv->v[l], &sv.bt, &sv.qsl, &sv.seq_lens, scale, 0.0f,
                               (int32_t)c->sliding_window));
        MDL_TRY(rt_matmul(be, &sv.xb, &sv.att, &L->wo, opt(&L->bo)));
        MDL_TRY(mdl_tp_all_reduce(m, &sv.xb));
        MDL_TRY(rt_add(be, &sv.x, &sv.x, &sv.xb));
        MDL_TRY(rt_rmsnorm(be, &sv.xb, &sv.x, &L->ffn_norm, c->rms_eps, 0.0f));
        MDL_TRY(rt_matmul(be, &sv.gate, &sv.xb, &L->w_gate, NULL));
        MDL_TRY(rt_matmul(be, &sv.up, &sv.xb, &L->w_up, NULL));
        MDL_TRY(rt_glu(be, &sv.gate, &sv.gate, &sv.up, RT_ACT_SILU));
        MDL_TRY(rt_matmul(be, &sv.xb, &sv.gate, &L->w_down, NULL));
        MDL_TRY(mdl_tp_all_reduce(m, &sv.xb));
        MDL_TRY(rt_add(be, &sv.x, &sv.x, &sv.xb));
    }
    return mdl_logits_head(m, &sv, n_logits, c->rms_eps, 0.0f);

}

const mdl_arch_impl mdl_arch_llama = {
    .family = "llama",
    .load = llama_load,
    .forward = llama_forward,
};
