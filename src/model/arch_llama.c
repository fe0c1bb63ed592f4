/* arch_llama — the Llama family: Llama 2/3 (SmolLM2, TinyLlama), Mistral,
 * Qwen2 (q/k/v biases), Qwen3 (per-head RMSNorm on q and k).
 *
 * Per layer (pre-norm residual):
 *   h   = x + Wo · attn(rope(Wq·norm(x) [+bq]), rope(Wk·norm(x) [+bk]), Wv·norm(x) [+bv])
 *   out = h + Wdown · (silu(Wgate·norm(h)) * Wup·norm(h))
 * Differences between members are data-driven: biases and QK-norm weights
 * are bound when the checkpoint has them. Where the backend holds weight
 * copies (GPUs), Wq|Wk|Wv and Wgate|Wup are stacked into one matrix each
 * (weights_fuse.c) and the step uses the fused ops ADD_RMSNORM,
 * QK_ROPE_STORE, and MATMUL_GLU: 8 kernels per decode layer instead of ~20.
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
    int64_t ff = c->intermediate;
    int64_t s_d[1] = {d};
    if (mdl_bind_embedding(m) < 0) return -1;
    if (mdl_bind(m, &m->out_norm, "output_norm.weight", 1, s_d, true) < 0) return -1;
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
        /* One QKV and one gate|up matrix where the backend copies weights
         * anyway (weights_fuse.c); else separate matrices in the mmap. */
        char nq[96], nk[96], nv[96], ng[96], nu[96];
        snprintf(nq, sizeof nq, "blk.%lld.attn_q.weight", (long long)l);
        snprintf(nk, sizeof nk, "blk.%lld.attn_k.weight", (long long)l);
        snprintf(nv, sizeof nv, "blk.%lld.attn_v.weight", (long long)l);
        snprintf(ng, sizeof ng, "blk.%lld.ffn_gate.weight", (long long)l);
        snprintf(nu, sizeof nu, "blk.%lld.ffn_up.weight", (long long)l);
        const char *qkv_names[3] = {nq, nk, nv}, *gu_names[2] = {ng, nu};
        const int64_t qkv_shapes[3][2] = {{qd, d}, {kvd, d}, {kvd, d}}, gu_shapes[2][2] = {{ff, d}, {ff, d}};
        const int qkv_split[3] = {0, 2, 2}, gu_split[2] = {0, 0};
        rt_tensor *qkv_parts[3] = {&L->wq, &L->wk, &L->wv}, *gu_parts[2] = {&L->w_gate, &L->w_up};
        int st = mdl_bind_stacked(m, &L->wqkv, 3, qkv_parts, qkv_names, qkv_shapes, qkv_split);
        if (st < 0) return -1;
        if (!st) {
            BIND(wq, "attn_q.weight", true, 0, qd, d);
            BIND(wk, "attn_k.weight", true, 2, kvd, d);
            BIND(wv, "attn_v.weight", true, 2, kvd, d);
        }
        BIND(wo, "attn_output.weight", true, 1, d, qd);
        BIND(bq, "attn_q.bias", false, 0, qd);
        BIND(bk, "attn_k.bias", false, 2, kvd);
        BIND(bv, "attn_v.bias", false, 2, kvd);
        if (L->wqkv.data) {
            rt_tensor *bp[3] = {&L->bq, &L->bk, &L->bv};
            if (mdl_stack_bound(m, &L->bqkv, 3, bp) < 0) return -1;
        }
        BIND(bo, "attn_output.bias", false, -1, d);
        if (!r0) memset(&L->bo, 0, sizeof L->bo); /* row-parallel bias: rank 0 adds it once */
        BIND(q_norm, "attn_q_norm.weight", !strcmp(c->arch, "qwen3"), -1, c->head_dim);
        BIND(k_norm, "attn_k_norm.weight", !strcmp(c->arch, "qwen3"), -1, c->head_dim);
        BIND(ffn_norm, "ffn_norm.weight", true, -1, d);
        st = mdl_bind_stacked(m, &L->w_gu, 2, gu_parts, gu_names, gu_shapes, gu_split);
        if (st < 0) return -1;
        if (!st) {
            BIND(w_gate, "ffn_gate.weight", true, 0, ff, d);
            BIND(w_up, "ffn_up.weight", true, 0, ff, d);
        }
        BIND(w_down, "ffn_down.weight", true, 1, d, ff);
#undef BIND
    }
    /* Outputs of the stacked matmuls (this rank's widths). */
    int64_t hd = c->head_dim, wqkv = (m->h_l + 2 * m->kvh_l) * hd;
    bool any_qkv = false, any_gu = false;
    for (int64_t l = 0; l < c->n_layers; l++) {
        any_qkv |= m->layers[l].wqkv.data != NULL;
        any_gu |= m->layers[l].w_gu.data != NULL;
    }
    int64_t s_qkv[2] = {m->max_batch, wqkv}, s_gu[2] = {m->max_batch, 2 * m->ff_l};
    if (any_qkv && mdl_own_tensor(m, &m->qkv, RT_F32, 2, s_qkv) < 0) return -1;
    if (any_gu && mdl_own_tensor(m, &m->gu, RT_F32, 2, s_gu) < 0) return -1;
    /* bf16 matmul inputs where the backend wants them for large steps
     * (prefill on a GPU: no f32 -> bf16 conversion before each GEMM, half
     * the bytes between the norms, the GLU and the GEMMs), for bf16 or
     * quantized weights (GEMMs in bf16 anyway); f32 weights keep f32
     * activations, f16 weights their f16 conversion (finer than bf16). */
    const rt_tensor *w0 = m->layers[0].wqkv.data ? &m->layers[0].wqkv : &m->layers[0].wq;
    bool w16 = w0->dtype == RT_BF16 || rt_dtype_info(w0->dtype)->quantized; /* f32 / f16 W keep f32 inputs */
    if (w16 && rt_backend_act_dtype(m->be, m->max_batch) == RT_BF16) {
        int64_t s_xn[2] = {m->max_batch, d}, s_g[2] = {m->max_batch, m->ff_l};
        if (mdl_own_tensor(m, &m->xn16, RT_BF16, 2, s_xn) < 0) return -1;
        if (any_gu && mdl_own_tensor(m, &m->gate16, RT_BF16, 2, s_g) < 0) return -1;
    }
    return VC_OK;
}

static const rt_tensor *opt(const rt_tensor *t) { return t->data ? t : NULL; }

/* A strided view [n, cols] (or [n, cols/hd, hd] with hd > 0) of columns
 * [c0, c0 + cols) of a contiguous [n, W] f32 or bf16 buffer. */
static rt_tensor col_view(const rt_tensor *buf, int64_t n, int64_t c0, int64_t cols, int64_t hd) {
    int64_t W = buf->shape[1], es = rt_dtype_info(buf->dtype)->block_bytes;
    char *p = (char *)buf->data + c0 * es;
    rt_tensor t = hd > 0 ? rt_tensor_3d(p, buf->dtype, buf->device, n, cols / hd, hd)
                         : rt_tensor_2d(p, buf->dtype, buf->device, n, cols);
    t.stride[0] = W * es;
    return t;
}

/* Every layer's q, k, v come from one stacked QKV matmul (weights_fuse.c). */
static bool all_qkv_fused(const mdl_model *m) {
    for (int64_t l = 0; l < m->cfg.n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        bool has_b = L->bq.data || L->bk.data || L->bv.data;
        if (!L->wqkv.data || (has_b && !L->bqkv.data)) return false;
    }
    return m->qkv.data != NULL;
}

/* Per layer: [add+]RMSNorm, QKV matmul(s), QK-norm + RoPE + KV store (one
 * op), attention, Wo, add+RMSNorm, gate|up matmul + GLU (one op with
 * stacked weights; a GPU fuses them at decode), Wdown. The
 * residual add of a layer's output is fused into the next RMSNorm (the last
 * one's into a plain add before the logits head). */
static int llama_forward(mdl_model *m, mdl_kv *kv, int64_t n, int64_t S, int64_t max_blocks,
                         int64_t n_logits) {
    const mdl_config *c = &m->cfg;
    rt_backend *be = m->be;
    int64_t hd = c->head_dim, qd = m->h_l * hd, kvd = m->kvh_l * hd;
    mdl_step_views sv;
    mdl_step_views_make(m, n, S, max_blocks, &sv);
    float scale = 1.0f / sqrtf((float)hd);
    rt_tensor qkv = m->qkv.data ? rt_tensor_slice0(&m->qkv, 0, n) : sv.q;
    rt_tensor gu = m->gu.data ? rt_tensor_slice0(&m->gu, 0, n) : sv.gate;
    /* Matmul inputs: bf16 buffers when the backend asks for them at this n
     * (xn: normed rows; gh: the fused GLU's output), else the f32 ones
     * (xb is then normed in place). */
    bool h16 = m->xn16.data && rt_backend_act_dtype(be, n) == RT_BF16;
    rt_tensor xn = h16 ? rt_tensor_slice0(&m->xn16, 0, n) : sv.xb;
    rt_tensor gh = h16 && m->gate16.data ? rt_tensor_slice0(&m->gate16, 0, n) : sv.gate;
    /* The attention chain in bf16 as well on steps with prompt rows (n > S):
     * the QKV matmul writes bf16 (f32 accumulation, rounded once),
     * QK_ROPE_STORE reads it and writes bf16 q, attention reads that and
     * writes bf16 rows, the Wo matmul's input. Views in the first half of
     * the f32 qkv / q / att buffers (half the bytes per element). Decode-only
     * steps keep f32 q for the split-KV kernel (and their CUDA graphs). */
    const char *e16 = h16 && n > S ? getenv("VLLM_BF16_ATTN") : NULL; /* 0: f32 chain (A/B; docs/CONFIG.md) */
    if (h16 && n > S && !(e16 && !strcmp(e16, "0")) && all_qkv_fused(m)) {
        qkv = rt_tensor_2d(m->qkv.data, RT_BF16, m->qkv.device, n, m->qkv.shape[1]);
        sv.q3 = rt_tensor_3d(m->q.data, RT_BF16, m->q.device, n, m->h_l, hd);
        sv.att = rt_tensor_2d(m->att.data, RT_BF16, m->att.device, n, qd);
        sv.att3 = rt_tensor_3d(m->att.data, RT_BF16, m->att.device, n, m->h_l, hd);
    }

    MDL_TRY(mdl_embed(m, &sv.x, &sv.ids));
    for (int64_t l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        if (l == 0) MDL_TRY(rt_rmsnorm(be, &xn, &sv.x, &L->attn_norm, c->rms_eps, 0.0f));
        else MDL_TRY(rt_add_rmsnorm(be, &xn, &sv.x, &sv.xb, &L->attn_norm, c->rms_eps, 0.0f));
        bool has_b = L->bq.data || L->bk.data || L->bv.data;
        rt_tensor q3 = sv.q3, k3 = sv.k3, v3 = sv.v3;
        if (L->wqkv.data && m->qkv.data && (!has_b || L->bqkv.data)) {
            MDL_TRY(rt_matmul(be, &qkv, &xn, &L->wqkv, opt(&L->bqkv)));
            q3 = col_view(&qkv, n, 0, qd, hd);
            k3 = col_view(&qkv, n, qd, kvd, hd);
            v3 = col_view(&qkv, n, qd + kvd, kvd, hd);
        } else {
            MDL_TRY(rt_matmul(be, &sv.q, &xn, &L->wq, opt(&L->bq)));
            MDL_TRY(rt_matmul(be, &sv.k, &xn, &L->wk, opt(&L->bk)));
            MDL_TRY(rt_matmul(be, &sv.v, &xn, &L->wv, opt(&L->bv)));
        }
        rt_rope_store_params rp = {.q_norm = opt(&L->q_norm), .k_norm = opt(&L->k_norm), .eps = c->rms_eps,
                                   .w_offset = 0.0f, .pos = &sv.pos, .inv_freq = &m->inv_freq,
                                   .rot_dim = (int)c->rot_dim, .neox = c->rope_neox, .attn_factor = 1.0f,
                                   .k_cache = &kv->k[l], .v_cache = &kv->v[l], .slots = &sv.slots};
        MDL_TRY(rt_qk_rope_store(be, &sv.q3, &q3, &k3, &v3, &rp));
        MDL_TRY(rt_paged_attention(be, &sv.att3, &sv.q3, &kv->k[l], &kv->v[l], &sv.bt, &sv.qsl, &sv.seq_lens,
                                   scale, 0.0f, (int32_t)c->sliding_window));
        MDL_TRY(rt_matmul(be, &sv.xb, &sv.att, &L->wo, opt(&L->bo)));
        MDL_TRY(mdl_tp_all_reduce(m, &sv.xb));
        MDL_TRY(rt_add_rmsnorm(be, &xn, &sv.x, &sv.xb, &L->ffn_norm, c->rms_eps, 0.0f));
        const rt_tensor *down_in = &sv.gate;
        if (L->w_gu.data && m->gu.data) {
            MDL_TRY(rt_matmul_glu(be, &gh, &xn, &L->w_gu, RT_ACT_SILU, &gu));
            down_in = &gh;
        } else {
            MDL_TRY(rt_matmul(be, &sv.gate, &xn, &L->w_gate, NULL));
            MDL_TRY(rt_matmul(be, &sv.up, &xn, &L->w_up, NULL));
            MDL_TRY(rt_glu(be, &sv.gate, &sv.gate, &sv.up, RT_ACT_SILU));
        }
        MDL_TRY(rt_matmul(be, &sv.xb, down_in, &L->w_down, NULL));
        MDL_TRY(mdl_tp_all_reduce(m, &sv.xb));
        if (l == c->n_layers - 1) MDL_TRY(rt_add(be, &sv.x, &sv.x, &sv.xb));
    }
    return mdl_logits_head(m, &sv, n_logits, c->rms_eps, 0.0f);
}

const mdl_arch_impl mdl_arch_llama = {
    .family = "llama",
    .load = llama_load,
    .forward = llama_forward,
};
