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
 * Tensor-parallel prefill on a GPU sums bf16 partials (tp_bf16_sums) and
 * runs sequence-parallel (llama_forward_sp: reduce-scatter, norms on the
 * rank's rows, all-gather); with VLLM_TP_SP=0 it all-reduces and runs the
 * row-wise ops in two row halves so that communication overlaps the GEMMs
 * (tp_split_row below; docs/DISTRIBUTED.md).
 */
#include "model/model_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int llama_load(mdl_model *m) {
    const mdl_config *c = &m->cfg;
    int64_t d = c->hidden, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
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
        /* Row-parallel bias: bound on every rank (so all ranks see that it
         * exists and pick the same all-reduce dtype), added by rank 0 only. */
        BIND(bo, "attn_output.bias", false, -1, d);
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
    m->act_w = w0->dtype;
    bool w16 = w0->dtype == RT_BF16 || rt_dtype_info(w0->dtype)->quantized; /* f32 / f16 W keep f32 inputs */
    if (w16 && rt_backend_act_dtype(m->be, m->max_batch, w0->dtype, d) == RT_BF16) {
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


/* Tensor parallelism on bf16 activations (prefill on a GPU: xn16 exists
 * and the backend asks for bf16 at this n), layers without an o bias: the
 * row-parallel GEMMs (Wo, Wdown) write bf16 partial sums into xn (f32
 * accumulation, rounded once), NCCL sums them in bf16 (half the bytes of
 * f32; vLLM all-reduces in the model dtype too) and the next add+RMSNorm
 * reads the bf16 sum and writes its output over it. The last
 * layer's Wdown keeps f32 (its sum goes to a plain add). VLLM_TP_BF16_SUMS=0
 * keeps f32 sums (A/B). */
static bool env_off(const char *name) {
    const char *e = getenv(name);
    return e && !strcmp(e, "0");
}

/* The residual stream in bf16 on steps with prompt rows (n > S) on one
 * rank in one part, where the backend asks for bf16 activations and adds
 * Wo / Wdown into a bf16 residual inside their GEMM (MATMUL_ADD; checked on
 * layer 0's weights at this n): the embedding writes bf16 rows, every norm
 * reads them (half the bytes of f32; HF's and vLLM's bf16 models keep
 * their residual in bf16 too), each GEMM adds its f32 accumulator to the
 * bf16 rows and rounds once, the last layer's Wdown included; the head
 * gathers its rows widened. Decode-only steps keep f32 (their graphs, the
 * GEMVs' fused norms). *x16: the view over x's buffer (its first half).
 * VLLM_BF16_RESIDUAL=0: f32 (A/B). */
static bool bf16_residual(mdl_model *m, const mdl_step_views *sv, const rt_tensor *gh, bool h16, int64_t n,
                          int64_t S, bool one_part, rt_tensor *x16) {
    if (!h16 || n <= S || !one_part || m->tp_size > 1 || env_off("VLLM_BF16_RESIDUAL")) return false;
    const mdl_layer *L0 = &m->layers[0];
    if (!L0->w_down.data || L0->wo.dtype != RT_BF16 || L0->w_down.dtype != RT_BF16) return false;
    for (int64_t l = 0; l < m->cfg.n_layers; l++)
        if (m->layers[l].bo.data) return false;
    /* *x16 is written only when taken: the caller's f32 view stays otherwise
     * (session 25: written first, a step whose Wdown had no MATMUL_ADD at
     * its n, the warm-up's 12 rows, ran f32 ops on bf16 rows and failed) */
    rt_tensor v = rt_tensor_2d(sv->x.data, RT_BF16, sv->x.device, n, m->cfg.hidden);
    rt_tensor gin = rt_tensor_slice0(gh, 0, n);
    if (!rt_matmul_add_native(m->be, &v, &sv->att, &L0->wo, NULL) ||
        !rt_matmul_add_native(m->be, &v, &gin, &L0->w_down, NULL))
        return false;
    *x16 = v;
    return true;
}

static bool tp_bf16_sums(const mdl_model *m, bool h16) {
    if (!h16 || m->tp_size <= 1) return false;
    if (env_off("VLLM_TP_BF16_SUMS")) return false;
    for (int64_t l = 0; l < m->cfg.n_layers; l++)
        if (m->layers[l].bo.data) return false;
    return true;
}

/* Tensor-parallel steps of at least TP_SPLIT_MIN tokens on bf16 activations
 * (prefill on a GPU) run each layer's row-wise ops in two row halves, so
 * that one half's all-reduce (rt_comm_all_reduce_start: NCCL on a second
 * stream) overlaps the other half's GEMMs (Wo, then add+RMSNorm, gate|up,
 * Wdown, then the next layer's add+RMSNorm and QKV); attention runs on all
 * rows at once. Rows are independent in all of those ops, so any cut is
 * correct for any batch (several sequences, chunked prefill). The cut is a
 * multiple of 64 rows (GEMM tiles). VLLM_TP_OVERLAP=0 turns it off;
 * VLLM_TP_OVERLAP=force splits every TP step of 2+ tokens at n/2 on any
 * backend (tests: the CPU runs the same split code). */
#define TP_SPLIT_MIN 1024

static int64_t tp_split_row(const mdl_model *m, int64_t n, bool h16) {
    if (m->tp_size <= 1 || n < 2) return 0;
    const char *e = getenv("VLLM_TP_OVERLAP");
    if (e && !strcmp(e, "force")) return n / 2;
    if (!h16 || n < TP_SPLIT_MIN || (e && !strcmp(e, "0"))) return 0;
    return (n / 2 + 63) / 64 * 64;
}

/* The all-reduce of t (one part's rows): synchronous when the step is not
 * split, else started on slot `part` (waited by tp_wait). */
static int tp_reduce(mdl_model *m, rt_tensor *t, bool split, int part) {
    if (!split) return mdl_tp_all_reduce(m, t);
    return m->comm ? rt_comm_all_reduce_start(m->comm, t, part) : VC_OK;
}

static int tp_wait(mdl_model *m, bool split, int part) {
    return split && m->comm ? rt_comm_wait(m->comm, part) : VC_OK;
}

static int g_tp_told; /* the path of the first TP prefill was logged */

/* Sequence-parallel steps (mdl_sp_plan; tp.c): VLLM_TP_SP_OVERLAP=1
 * gathers the normed rows on the comm's side stream while the GEMMs of
 * the rank's own rows run (then the other rows'); 0 (default): the gather
 * runs before the GEMMs. */
static bool sp_overlap(const mdl_model *m) {
    const char *e = getenv("VLLM_TP_SP_OVERLAP");
    return e && *e ? !strcmp(e, "1") : m->xn16.data != NULL; /* default: on with bf16 GEMM inputs (CUDA) */
}

/* The column-parallel GEMMs of a sequence-parallel layer over rows
 * [r0, r0 + nr) of its input xn: QKV (qkv_rows) or gate|up + GLU
 * (glu_rows). */
typedef struct {
    const mdl_layer *L;
    mdl_step_views *sv;
    rt_tensor *xn, *qkv, *gu, *gh;
    bool fused;
} sp_rows_ctx;

typedef int (*sp_rows_fn)(mdl_model *m, const sp_rows_ctx *x, int64_t r0, int64_t nr);

/* q, k, v of separate (unstacked) weights: one MATMUL3 without biases
 * (one launch on a GPU where the three GGUF types differ), else three
 * MATMULs. */
static int qkv_matmuls(rt_backend *be, const mdl_layer *L, const rt_tensor *xn, rt_tensor *q, rt_tensor *k,
                       rt_tensor *v) {
    if (!L->bq.data && !L->bk.data && !L->bv.data) return rt_matmul3(be, q, k, v, xn, &L->wq, &L->wk, &L->wv);
    MDL_TRY(rt_matmul(be, q, xn, &L->wq, opt(&L->bq)));
    MDL_TRY(rt_matmul(be, k, xn, &L->wk, opt(&L->bk)));
    return rt_matmul(be, v, xn, &L->wv, opt(&L->bv));
}

static int qkv_rows(mdl_model *m, const sp_rows_ctx *x, int64_t r0, int64_t nr) {
    const mdl_layer *L = x->L;
    rt_tensor xn = rt_tensor_slice0(x->xn, r0, nr);
    if (x->fused) {
        rt_tensor o = rt_tensor_slice0(x->qkv, r0, nr);
        return rt_matmul(m->be, &o, &xn, &L->wqkv, opt(&L->bqkv));
    }
    rt_tensor q = rt_tensor_slice0(&x->sv->q, r0, nr), k = rt_tensor_slice0(&x->sv->k, r0, nr),
              v = rt_tensor_slice0(&x->sv->v, r0, nr);
    return qkv_matmuls(m->be, L, &xn, &q, &k, &v);
}

static int glu_rows(mdl_model *m, const sp_rows_ctx *x, int64_t r0, int64_t nr) {
    const mdl_layer *L = x->L;
    rt_tensor xn = rt_tensor_slice0(x->xn, r0, nr);
    if (x->fused) {
        rt_tensor gu = rt_tensor_slice0(x->gu, r0, nr), gh = rt_tensor_slice0(x->gh, r0, nr);
        return rt_matmul_glu(m->be, &gh, &xn, &L->w_gu, RT_ACT_SILU, &gu);
    }
    rt_tensor g = rt_tensor_slice0(&x->sv->gate, r0, nr), u = rt_tensor_slice0(&x->sv->up, r0, nr);
    MDL_TRY(rt_matmul(m->be, &g, &xn, &L->w_gate, NULL));
    MDL_TRY(rt_matmul(m->be, &u, &xn, &L->w_up, NULL));
    return rt_glu(m->be, &g, &g, &u, RT_ACT_SILU);
}

/* All-gather the rank's normed rows of xnF [n_pad, d], then fn over rows
 * [0, n). Overlapped: the gather runs on the comm's side stream while fn
 * runs over the rank's own rows (they are here already), then over the
 * others once it has arrived. fn only reads xn, so the gather may still
 * be sending the own rows meanwhile. */
static int sp_gather_then(mdl_model *m, const mdl_sp *sp, rt_tensor *xnF, bool ovl, sp_rows_fn fn,
                          const sp_rows_ctx *x) {
    if (!ovl) {
        MDL_TRY(mdl_sp_gather(m, sp, xnF, false));
        return fn(m, x, 0, sp->n);
    }
    int64_t a = sp->r0 < sp->n ? sp->r0 : sp->n, b = sp->r0 + sp->m < sp->n ? sp->r0 + sp->m : sp->n;
    MDL_TRY(mdl_sp_gather(m, sp, xnF, true));
    if (b > a) MDL_TRY(fn(m, x, a, b - a));
    MDL_TRY(rt_comm_wait(m->comm, 0));
    if (a > 0) MDL_TRY(fn(m, x, 0, a));
    if (b < sp->n) MDL_TRY(fn(m, x, b, sp->n - b));
    return VC_OK;
}

/* A row-parallel GEMM (Wo, Wdown: in [n, k] x w) of a sequence-parallel
 * layer, the sum of its partials over the ranks for the own rows, and the
 * add + RMSNorm (weight nw) of those rows into xns (x += the sum).
 * Reduce-scatter form: the GEMM of all rows into oF [n_pad, d], its
 * reduce-scatter, one ADD_RMSNORM. All-to-all form (a2a: oF's dtype
 * buffer m->sp_recv): the GEMM of the other ranks' rows first, their
 * partials sent with an all-to-all on the side stream while the GEMM of
 * the own rows runs (NCCL can do it on copy engines: VLLM_TP_SYM=1,
 * VLLM_TP_NCCL_CTA=zero), then x += the own partial and x += each
 * received one, one ADD_RMSNORM each (ADD_RMSNORM has one addend; the
 * last one's norm is the output, the others' land on the addend itself). */
static int sp_row_parallel(mdl_model *m, const mdl_sp *sp, rt_tensor *oF, const rt_tensor *in, const rt_tensor *w,
                           const rt_tensor *bias, bool a2a, rt_tensor *xs, rt_tensor *xns, const rt_tensor *nw) {
    rt_backend *be = m->be;
    float eps = m->cfg.rms_eps;
    rt_tensor os = rt_tensor_slice0(oF, sp->r0, sp->m);
    if (!a2a) {
        rt_tensor o = rt_tensor_slice0(oF, 0, sp->n), x = rt_tensor_slice0(in, 0, sp->n);
        MDL_TRY(rt_matmul(be, &o, &x, w, bias));
        MDL_TRY(mdl_sp_reduce(m, sp, oF));
        return rt_add_rmsnorm(be, xns, xs, &os, nw, eps, 0.0f);
    }
    int64_t n = sp->n, a = sp->r0 < n ? sp->r0 : n, b = sp->r0 + sp->m < n ? sp->r0 + sp->m : n;
    int64_t r0s[3] = {0, b, a}, nrs[3] = {a, n - b, b - a}; /* the others' rows, then the own */
    for (int i = 0; i < 3; i++) {
        if (i == 2) {
            if (sp->n_pad > n) { /* pad rows (the last rank's block) are zero partials */
                rt_tensor pad = rt_tensor_slice0(oF, n, sp->n_pad - n);
                rt_tensor z = rt_tensor_2d(m->sp_zero.data, oF->dtype, oF->device, pad.shape[0], pad.shape[1]);
                MDL_TRY(rt_tensor_copy_bytes(be, &pad, &z));
            }
            rt_tensor recv = rt_tensor_2d(m->sp_recv.data, oF->dtype, oF->device, sp->n_pad, oF->shape[1]);
            MDL_TRY(rt_comm_all_to_all_start(m->comm, oF, &recv, 1));
        }
        if (nrs[i] <= 0) continue;
        rt_tensor o = rt_tensor_slice0(oF, r0s[i], nrs[i]), x = rt_tensor_slice0(in, r0s[i], nrs[i]);
        MDL_TRY(rt_matmul(be, &o, &x, w, bias));
    }
    MDL_TRY(rt_comm_wait(m->comm, 1));
    rt_tensor recv = rt_tensor_2d(m->sp_recv.data, oF->dtype, oF->device, sp->n_pad, oF->shape[1]);
    MDL_TRY(rt_add_rmsnorm(be, &os, xs, &os, nw, eps, 0.0f)); /* x += own partial (the norm is overwritten) */
    int last = m->tp_rank == m->tp_size - 1 ? m->tp_size - 2 : m->tp_size - 1;
    for (int q = 0; q < m->tp_size; q++) {
        if (q == m->tp_rank) continue;
        rt_tensor rq = rt_tensor_slice0(&recv, (int64_t)q * sp->m, sp->m);
        MDL_TRY(rt_add_rmsnorm(be, q == last ? xns : &rq, xs, &rq, nw, eps, 0.0f));
    }
    return VC_OK;
}

/* The all-to-all form of sp_row_parallel: VLLM_TP_SP_A2A=1 (the receive
 * buffer m->sp_recv is made at load then, tp.c) and a partial of its dtype. */
static bool sp_a2a(const mdl_model *m, const rt_tensor *oF) {
    return m->sp_recv.data && m->sp_recv.dtype == oF->dtype;
}

/* A sequence-parallel forward (Megatron-style sequence parallelism; tp.c):
 * the residual stream x is sharded by rows (rank r keeps rows [r0, r0+m)
 * of the padded step), the partial sums of Wo and Wdown are
 * reduce-scattered instead of all-reduced (or exchanged all-to-all:
 * sp_row_parallel), add+RMSNorm runs on the own rows only, and the normed
 * rows are all-gathered into the full input of the next column-parallel
 * GEMM (QKV, gate|up). Attention and the GEMMs run on all n rows as
 * before. The views (sv, qkv, gu, xn dtype) are the caller's; xn here
 * spans the n_pad rows. A layer's Wdown sum is normed with the next
 * layer's attn_norm; the last one's is reduce-scattered in f32 for the
 * logits head. */
static int llama_forward_sp(mdl_model *m, mdl_kv *kv, mdl_step_views *sv, const mdl_sp *sp, rt_tensor *qkv,
                            rt_tensor *gu, bool h16, bool p16, int64_t n_logits) {
    const mdl_config *c = &m->cfg;
    rt_backend *be = m->be;
    int64_t n = sp->n, hd = c->head_dim, qd = m->h_l * hd, kvd = m->kvh_l * hd;
    float scale = 1.0f / sqrtf((float)hd);
    rt_tensor xF = rt_tensor_slice0(&m->x, 0, sp->n_pad), xbF = rt_tensor_slice0(&m->xb, 0, sp->n_pad);
    rt_tensor xnF = h16 ? rt_tensor_slice0(&m->xn16, 0, sp->n_pad) : xbF;
    rt_tensor gh = h16 && m->gate16.data ? rt_tensor_slice0(&m->gate16, 0, n) : sv->gate;
    rt_tensor xs = rt_tensor_slice0(&xF, sp->r0, sp->m), xns = rt_tensor_slice0(&xnF, sp->r0, sp->m);
    rt_tensor *oF = p16 ? &xnF : &xbF; /* partial sums of Wo and (but the last) Wdown */
    bool ovl = sp_overlap(m), a2a = sp_a2a(m, oF);
    MDL_TRY(mdl_embed_sp(m, sp, &xF, &sv->ids));
    MDL_TRY(rt_rmsnorm(be, &xns, &xs, &m->layers[0].attn_norm, c->rms_eps, 0.0f));
    for (int64_t l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        bool has_b = L->bq.data || L->bk.data || L->bv.data;
        bool fqkv = L->wqkv.data && m->qkv.data && (!has_b || L->bqkv.data);
        sp_rows_ctx cx = {.L = L, .sv = sv, .xn = &xnF, .qkv = qkv, .gu = gu, .gh = &gh, .fused = fqkv};
        MDL_TRY(sp_gather_then(m, sp, &xnF, ovl, qkv_rows, &cx));
        rt_tensor q3 = sv->q3, k3 = sv->k3, v3 = sv->v3;
        if (fqkv) {
            q3 = col_view(qkv, n, 0, qd, hd);
            k3 = col_view(qkv, n, qd, kvd, hd);
            v3 = col_view(qkv, n, qd + kvd, kvd, hd);
        }
        rt_rope_store_params rp = {.q_norm = opt(&L->q_norm), .k_norm = opt(&L->k_norm), .eps = c->rms_eps,
                                   .w_offset = 0.0f, .pos = &sv->pos, .inv_freq = &m->inv_freq,
                                   .rot_dim = (int)c->rot_dim, .neox = c->rope_neox, .attn_factor = 1.0f,
                                   .k_cache = &kv->k[l], .v_cache = &kv->v[l], .slots = &sv->slots};
        MDL_TRY(rt_qk_rope_store(be, &sv->q3, &q3, &k3, &v3, &rp));
        MDL_TRY(mdl_paged_attention(m, sv, &kv->k[l], &kv->v[l], scale, 0.0f, (int32_t)c->sliding_window));
        MDL_TRY(sp_row_parallel(m, sp, oF, &sv->att, &L->wo, m->tp_rank == 0 ? opt(&L->bo) : NULL, a2a, &xs, &xns,
                                &L->ffn_norm));
        bool fgu = L->w_gu.data && m->gu.data;
        cx.fused = fgu;
        MDL_TRY(sp_gather_then(m, sp, &xnF, ovl, glu_rows, &cx));
        /* Wdown after all rows' GLU: its output may be xn, which an
         * overlapped gather reads until the wait. */
        rt_tensor din = fgu ? gh : sv->gate;
        if (l < c->n_layers - 1) {
            MDL_TRY(sp_row_parallel(m, sp, oF, &din, &L->w_down, NULL, a2a, &xs, &xns, &m->layers[l + 1].attn_norm));
        } else {
            rt_tensor dn = rt_tensor_slice0(&xbF, 0, n);
            MDL_TRY(rt_matmul(be, &dn, &din, &L->w_down, NULL));
            MDL_TRY(mdl_sp_reduce(m, sp, &xbF));
        }
    }
    return mdl_logits_head_sp(m, sv, sp, n_logits, &xF, &xbF, c->rms_eps, 0.0f);
}

/* The llama forward's part of mdl_last_rows_views: xn, gh, gu, the
 * matmul buffers for the L logit rows, chosen as for any step of L rows. */
static void last_rows_bufs(mdl_model *m, const mdl_step_views *sv, rt_tensor *xn, rt_tensor *gh, rt_tensor *gu) {
    const int64_t L = m->last_rows;
    bool h16 = m->xn16.data && rt_backend_act_dtype(m->be, L, m->act_w, m->cfg.hidden) == RT_BF16;
    *xn = h16 ? rt_tensor_slice0(&m->xn16, 0, L) : sv->xb;
    *gh = h16 && m->gate16.data ? rt_tensor_slice0(&m->gate16, 0, L) : sv->gate;
    *gu = m->gu.data ? rt_tensor_slice0(&m->gu, 0, L) : sv->gate;
}

/* Per layer: [add+]RMSNorm, QKV matmul(s), QK-norm + RoPE + KV store (one
 * op), attention, Wo, add+RMSNorm, gate|up matmul + GLU (one op with
 * stacked weights; a GPU fuses them at decode), Wdown. The
 * residual add of a layer's output is fused into the next RMSNorm (the last
 * one's into the logits head, over its rows only), or into the Wo / Wdown
 * GEMM itself (MATMUL_ADD) where the backend has that for the step. The
 * row-wise ops run per part of rows (one part, or two halves:
 * tp_split_row). */
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
    bool h16 = m->xn16.data && rt_backend_act_dtype(be, n, m->act_w, c->hidden) == RT_BF16;
    rt_tensor xn = h16 ? rt_tensor_slice0(&m->xn16, 0, n) : sv.xb;
    rt_tensor gh = h16 && m->gate16.data ? rt_tensor_slice0(&m->gate16, 0, n) : sv.gate;
    /* The attention chain in bf16 as well on steps with prompt rows (n > S):
     * the QKV matmul writes bf16 (f32 accumulation, rounded once),
     * QK_ROPE_STORE reads it and writes bf16 q, attention reads that and
     * writes bf16 rows, the Wo matmul's input. Views in the first half of
     * the f32 qkv / q / att buffers (half the bytes per element). Decode-only
     * steps keep f32 q for the split-KV kernel (and their CUDA graphs). */
    if (h16 && n > S && !env_off("VLLM_BF16_ATTN") && all_qkv_fused(m)) { /* 0: f32 chain (A/B) */
        qkv = rt_tensor_2d(m->qkv.data, RT_BF16, m->qkv.device, n, m->qkv.shape[1]);
        sv.q3 = rt_tensor_3d(m->q.data, RT_BF16, m->q.device, n, m->h_l, hd);
        sv.att = rt_tensor_2d(m->att.data, RT_BF16, m->att.device, n, qd);
        sv.att3 = rt_tensor_3d(m->att.data, RT_BF16, m->att.device, n, m->h_l, hd);
    }
    bool p16 = tp_bf16_sums(m, h16);
    mdl_sp sp;
    bool seq = mdl_sp_plan(m, n, h16 && n >= TP_SPLIT_MIN, &sp);
    int64_t cut = seq ? 0 : tp_split_row(m, n, h16); /* sequence parallel or row halves, not both */
    bool split = cut > 0;
    if ((p16 || split || seq) && m->tp_rank == 0 && !__atomic_exchange_n(&g_tp_told, 1, __ATOMIC_RELAXED))
        VC_INFO("tensor parallel prefill (%lld tokens): %s partial sums, %s", (long long)n, p16 ? "bf16" : "f32",
                seq ? (sp_overlap(m) ? "sequence parallel (reduce-scatter, norms on own rows, all-gather beside "
                                      "the own rows' GEMMs)"
                                    : "sequence parallel (reduce-scatter, norms on own rows, all-gather)")
                : split ? "rows in two halves (all-reduce of one overlaps the GEMMs of the other)"
                        : "all-reduce, no overlap");
    if (seq) return llama_forward_sp(m, kv, &sv, &sp, &qkv, &gu, h16, p16, n_logits);
    int np = split ? 2 : 1;
    int64_t r0[2] = {0, cut}, nr[2] = {split ? cut : n, n - cut};
#define ROWS(t, p) rt_tensor_slice0(&(t), r0[p], nr[p])
    rt_tensor *o_out = p16 ? &xn : &sv.xb, *d_out = &sv.xb; /* Wo / Wdown outputs (partial sums) */
    /* One rank, one part: Wo and Wdown (but the last layer's, whose add goes
     * to the logits head over its rows only) may add into the residual x
     * inside their GEMM where the backend has MATMUL_ADD for the step
     * (rt_matmul_add_native); the norm after them is then a plain RMSNORM.
     * res_in_x: the last row-parallel GEMM added its output into x. */
    const bool acc_ok = m->tp_size == 1 && np == 1;
    bool res_in_x = false, last = false; /* last: the last layer went to the logit rows (last_rows_views) */
    /* xr: the residual stream, f32 (sv.x) or its bf16 view (bf16_residual) */
    rt_tensor xr = sv.x;
    bool x16 = acc_ok && bf16_residual(m, &sv, &gh, h16, n, S, true, &xr);

    MDL_TRY(mdl_embed(m, &xr, &sv.ids));
    for (int64_t l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        bool has_b = L->bq.data || L->bk.data || L->bv.data;
        bool fqkv = L->wqkv.data && m->qkv.data && (!has_b || L->bqkv.data);
        /* one part, no bias: the QKV GEMM and QK_ROPE_STORE as one op (a
         * backend may fuse them; else the same two ops as below) */
        bool qkv_rs = fqkv && np == 1 && !L->bqkv.data;
        for (int p = 0; p < np; p++) {
            rt_tensor xn_p = ROWS(xn, p), x_p = ROWS(xr, p);
            if (l == 0 || res_in_x) {
                MDL_TRY(rt_rmsnorm(be, &xn_p, &x_p, &L->attn_norm, c->rms_eps, 0.0f));
            } else {
                rt_tensor res_p = ROWS(*d_out, p);
                MDL_TRY(tp_wait(m, split, p));
                MDL_TRY(rt_add_rmsnorm(be, &xn_p, &x_p, &res_p, &L->attn_norm, c->rms_eps, 0.0f));
            }
            if (fqkv && !qkv_rs) { /* (qkv_rs: the GEMM runs below, with QK_ROPE_STORE) */
                rt_tensor qkv_p = ROWS(qkv, p);
                MDL_TRY(rt_matmul(be, &qkv_p, &xn_p, &L->wqkv, opt(&L->bqkv)));
            } else if (!fqkv) {
                rt_tensor q_p = ROWS(sv.q, p), k_p = ROWS(sv.k, p), v_p = ROWS(sv.v, p);
                MDL_TRY(qkv_matmuls(be, L, &xn_p, &q_p, &k_p, &v_p));
            }
        }
        rt_tensor q3 = sv.q3, k3 = sv.k3, v3 = sv.v3;
        if (fqkv) {
            q3 = col_view(&qkv, n, 0, qd, hd);
            k3 = col_view(&qkv, n, qd, kvd, hd);
            v3 = col_view(&qkv, n, qd + kvd, kvd, hd);
        }
        rt_rope_store_params rp = {.q_norm = opt(&L->q_norm), .k_norm = opt(&L->k_norm), .eps = c->rms_eps,
                                   .w_offset = 0.0f, .pos = &sv.pos, .inv_freq = &m->inv_freq,
                                   .rot_dim = (int)c->rot_dim, .neox = c->rope_neox, .attn_factor = 1.0f,
                                   .k_cache = &kv->k[l], .v_cache = &kv->v[l], .slots = &sv.slots};
        if (qkv_rs) {
            rt_tensor xn0 = ROWS(xn, 0), qkv0 = ROWS(qkv, 0);
            MDL_TRY(rt_matmul_rope_store(be, &sv.q3, &xn0, &L->wqkv, &qkv0, &rp));
        } else {
            MDL_TRY(rt_qk_rope_store(be, &sv.q3, &q3, &k3, &v3, &rp));
        }
        if (l == c->n_layers - 1 && m->last_rows > 0 && m->last_rows == n_logits && 4 * n_logits <= n && np == 1) {
            sv.x = xr; /* the rows gathered from the residual as it is (bf16 or f32), into f32 rows */
            MDL_TRY(mdl_last_rows_views(m, &sv, n, max_blocks));
            last_rows_bufs(m, &sv, &xn, &gh, &gu);
            last = true;
            n = m->last_rows, nr[0] = n;
            xr = sv.x, x16 = false; /* the last layer's L rows: f32 */
        }
        MDL_TRY(mdl_paged_attention(m, &sv, &kv->k[l], &kv->v[l], scale, 0.0f, (int32_t)c->sliding_window));
        const rt_tensor *bo = m->tp_rank == 0 ? opt(&L->bo) : NULL;
        for (int p = 0; p < np; p++) {
            rt_tensor att_p = ROWS(sv.att, p), out_p = ROWS(*o_out, p), x_p = ROWS(xr, p);
            res_in_x = acc_ok && rt_matmul_add_native(be, &x_p, &att_p, &L->wo, bo);
            if (x16 && !res_in_x)
                return vc_err_set(VC_ERR_RUNTIME, "bf16 residual: layer %lld's Wo has no MATMUL_ADD", (long long)l);
            if (res_in_x) {
                MDL_TRY(rt_matmul_add(be, &x_p, &att_p, &L->wo, bo, NULL));
                continue;
            }
            MDL_TRY(rt_matmul(be, &out_p, &att_p, &L->wo, bo));
            MDL_TRY(tp_reduce(m, &out_p, split, p));
        }
        d_out = p16 && l < c->n_layers - 1 ? &xn : &sv.xb;
        for (int p = 0; p < np; p++) {
            rt_tensor xn_p = ROWS(xn, p), x_p = ROWS(xr, p), res_p = ROWS(*o_out, p), out_p = ROWS(*d_out, p);
            MDL_TRY(tp_wait(m, split, p));
            if (res_in_x) MDL_TRY(rt_rmsnorm(be, &xn_p, &x_p, &L->ffn_norm, c->rms_eps, 0.0f));
            else MDL_TRY(rt_add_rmsnorm(be, &xn_p, &x_p, &res_p, &L->ffn_norm, c->rms_eps, 0.0f));
            rt_tensor down_in;
            if (L->w_gu.data && m->gu.data) {
                rt_tensor gu_p = ROWS(gu, p);
                down_in = ROWS(gh, p);
                MDL_TRY(rt_matmul_glu(be, &down_in, &xn_p, &L->w_gu, RT_ACT_SILU, &gu_p));
            } else {
                rt_tensor up_p = ROWS(sv.up, p);
                down_in = ROWS(sv.gate, p);
                MDL_TRY(rt_matmul(be, &down_in, &xn_p, &L->w_gate, NULL));
                MDL_TRY(rt_matmul(be, &up_p, &xn_p, &L->w_up, NULL));
                MDL_TRY(rt_glu(be, &down_in, &down_in, &up_p, RT_ACT_SILU));
            }
            /* the last layer's Wdown adds in the head (over its rows only), but into a bf16 stream here */
            res_in_x = acc_ok && (l < c->n_layers - 1 || x16) &&
                       rt_matmul_add_native(be, &x_p, &down_in, &L->w_down, NULL);
            if (x16 && !res_in_x)
                return vc_err_set(VC_ERR_RUNTIME, "bf16 residual: layer %lld's Wdown has no MATMUL_ADD", (long long)l);
            if (res_in_x) {
                MDL_TRY(rt_matmul_add(be, &x_p, &down_in, &L->w_down, NULL, NULL));
                continue;
            }
            MDL_TRY(rt_matmul(be, &out_p, &down_in, &L->w_down, NULL));
            MDL_TRY(tp_reduce(m, &out_p, split, p));
        }
        if (l == c->n_layers - 1)
            for (int p = 0; p < np; p++) MDL_TRY(tp_wait(m, split, p));
    }
#undef ROWS
    if (last) return mdl_logits_head_first(m, &sv, n_logits, &sv.xb, c->rms_eps, 0.0f);
    if (x16) { /* the stream is whole (the last Wdown added into it): gather its rows widened */
        sv.x = xr;
        return mdl_logits_head(m, &sv, n_logits, c->rms_eps, 0.0f);
    }
    return mdl_logits_head_res(m, &sv, n, n_logits, &sv.xb, c->rms_eps, 0.0f);
}

const mdl_arch_impl mdl_arch_llama = {
    .family = "llama",
    .load = llama_load,
    .forward = llama_forward,
    .last_rows = true,
};
