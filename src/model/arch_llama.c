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

#define TRY(x)                                                                   \
    do {                                                                         \
        int rc_ = (x);                                                           \
        if (rc_ < 0) return rc_;                                                 \
    } while (0)

static int llama_forward(mdl_model *m, mdl_kv *kv, int64_t n, int64_t S, int64_t max_blocks,
                         int64_t n_logits) {
    const mdl_config *c = &m->cfg;
    rt_backend *be = m->be;
    int64_t h = m->h_l, kvh = m->kvh_l, hd = c->head_dim; /* this rank's heads */
    rt_tensor ids = rt_tensor_slice0(&m->ids, 0, n), pos = rt_tensor_slice0(&m->pos, 0, n);
    rt_tensor slots = rt_tensor_slice0(&m->slots, 0, n);
    rt_tensor qsl = rt_tensor_slice0(&m->qsl, 0, S + 1), seq_lens = rt_tensor_slice0(&m->seq_lens, 0, S);
    rt_tensor bt = rt_tensor_2d(m->block_tables.data, RT_I32, m->block_tables.device, S, max_blocks);
    rt_tensor x = rt_tensor_slice0(&m->x, 0, n), xb = rt_tensor_slice0(&m->xb, 0, n);
    rt_tensor q = rt_tensor_slice0(&m->q, 0, n), k = rt_tensor_slice0(&m->k, 0, n);
    rt_tensor v = rt_tensor_slice0(&m->v, 0, n), att = rt_tensor_slice0(&m->att, 0, n);
    rt_tensor gate = rt_tensor_slice0(&m->gate, 0, n), up = rt_tensor_slice0(&m->up, 0, n);
    /* Head views: [n, heads, hd] and [n*heads, hd] (for QK-norm). */
    int64_t s_q3[3] = {n, h, hd}, s_k3[3] = {n, kvh, hd}, s_q2[2] = {n * h, hd}, s_k2[2] = {n * kvh, hd};
    rt_tensor q3 = rt_tensor_reshape(&q, 3, s_q3), k3 = rt_tensor_reshape(&k, 3, s_k3);
    rt_tensor v3 = rt_tensor_reshape(&v, 3, s_k3), att3 = rt_tensor_reshape(&att, 3, s_q3);
    rt_tensor q2 = rt_tensor_reshape(&q, 2, s_q2), k2 = rt_tensor_reshape(&k, 2, s_k2);
    float scale = 1.0f / sqrtf((float)hd);

    TRY(rt_embed(be, &x, &m->tok_embd, &ids));
    for (int64_t l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        TRY(rt_rmsnorm(be, &xb, &x, &L->attn_norm, c->rms_eps, 0.0f));
        TRY(rt_matmul(be, &q, &xb, &L->wq, opt(&L->bq)));
        TRY(rt_matmul(be, &k, &xb, &L->wk, opt(&L->bk)));
        TRY(rt_matmul(be, &v, &xb, &L->wv, opt(&L->bv)));
        if (L->q_norm.data) TRY(rt_rmsnorm(be, &q2, &q2, &L->q_norm, c->rms_eps, 0.0f));
        if (L->k_norm.data) TRY(rt_rmsnorm(be, &k2, &k2, &L->k_norm, c->rms_eps, 0.0f));
        TRY(rt_rope(be, &q3, &pos, &m->inv_freq, (int)c->rot_dim, c->rope_neox, 1.0f));
        TRY(rt_rope(be, &k3, &pos, &m->inv_freq, (int)c->rot_dim, c->rope_neox, 1.0f));
        TRY(rt_kv_store(be, &kv->k[l], &k3, &slots));
        TRY(rt_kv_store(be, &kv->v[l], &v3, &slots));
        TRY(rt_paged_attention(be, &att3, &q3, &kv->k[l], &kv->v[l], &bt, &qsl, &seq_lens, scale, 0.0f,
                               (int32_t)c->sliding_window));
        TRY(rt_matmul(be, &xb, &att, &L->wo, opt(&L->bo)));
        TRY(mdl_tp_all_reduce(m, &xb));
        TRY(rt_add(be, &x, &x, &xb));
        TRY(rt_rmsnorm(be, &xb, &x, &L->ffn_norm, c->rms_eps, 0.0f));
        TRY(rt_matmul(be, &gate, &xb, &L->w_gate, NULL));
        TRY(rt_matmul(be, &up, &xb, &L->w_up, NULL));
        TRY(rt_glu(be, &gate, &gate, &up, RT_ACT_SILU));
        TRY(rt_matmul(be, &xb, &gate, &L->w_down, NULL));
        TRY(mdl_tp_all_reduce(m, &xb));
        TRY(rt_add(be, &x, &x, &xb));
    }
    if (n_logits > 0) {
        /* Gather the rows that need logits (EMBED over the f32 hidden states). */
        rt_tensor rows = rt_tensor_slice0(&m->logit_rows, 0, n_logits);
        rt_tensor xl = rt_tensor_slice0(&xb, 0, n_logits);
        rt_tensor lg = rt_tensor_slice0(m->tp_size > 1 ? &m->logits_l : &m->logits, 0, n_logits);
        TRY(rt_embed(be, &xl, &x, &rows));
        TRY(rt_rmsnorm(be, &xl, &xl, &m->out_norm, c->rms_eps, 0.0f));
        TRY(rt_matmul(be, &lg, &xl, &m->output, NULL));
        if (m->tp_size > 1) TRY(mdl_tp_gather_logits(m, n_logits));
    }
    return VC_OK;
}

const mdl_arch_impl mdl_arch_llama = {
    .family = "llama",
    .load = llama_load,
    .forward = llama_forward,
};
