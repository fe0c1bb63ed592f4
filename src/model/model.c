#include "model/model_impl.h"

#include "base/err.h"
#include "base/log.h"
#include "runtime/quant.h"
#include "runtime/quant_blocks.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const mdl_arch_impl *g_archs[] = {&mdl_arch_llama, &mdl_arch_gemma3};

/* Family keys handled by each arch impl (a family may have several config names). */
static const struct {
    const char *arch;
    const mdl_arch_impl *impl;
} g_family_map[] = {
    {"llama", &mdl_arch_llama},
    {"mistral", &mdl_arch_llama},
    {"qwen2", &mdl_arch_llama},
    {"qwen3", &mdl_arch_llama},
    {"gemma3", &mdl_arch_gemma3},
};

mdl_params mdl_params_default(void) {
    mdl_params p = {.max_batch = 512, .kv_dtype = MDL_KV_AUTO, .upcast_weights = false, .tp_size = 1,
                    .tp_backends = NULL};
    return p;
}

static void *own_alloc(mdl_model *m, size_t bytes) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 64;
        void **p = realloc(m->owned, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        m->owned = p;
        m->cap_owned = cap;
    }
    void *mem = rt_backend_alloc(m->be, bytes ? bytes : 1);
    if (mem) m->owned[m->n_owned++] = mem;
    return mem;
}

int mdl_own_tensor(mdl_model *m, rt_tensor *t, rt_dtype dt, int ndim, const int64_t *shape) {
    *t = rt_tensor_make(NULL, dt, m->be->device, ndim, shape);
    t->data = own_alloc(m, rt_tensor_nbytes(t));
    if (!t->data) return vc_err_set(VC_ERR_OOM, "out of memory allocating %zu bytes", rt_tensor_nbytes(t));
    return VC_OK;
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *s) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && o < cap; i++) o += (size_t)snprintf(buf + o, cap - o, i ? ",%lld" : "%lld", (long long)s[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* Host memory the model keeps until mdl_free: weights repacked at load
 * (weights_repack.c), which CPU tensors then use in place of the mmap. */
static void *host_keep(mdl_model *m, size_t bytes) {
    void **blk = malloc(sizeof(max_align_t) + bytes); /* [next | payload] */
    if (!blk) return NULL;
    *blk = m->host_bufs;
    m->host_bufs = blk;
    return (char *)blk + sizeof(max_align_t);
}

int mdl_bind(mdl_model *m, rt_tensor *t, const char *canon, int ndim, const int64_t *shape, bool required) {
    rt_tensor host;
    memset(t, 0, sizeof *t);
    int rc = mdl_find_host(m, canon, ndim, shape, required, &host);
    if (rc < 0 || !host.data) return rc;
    return mdl_bind_host(m, t, &host, false);
}

int mdl_find_host(mdl_model *m, const char *canon, int ndim, const int64_t *shape, bool required,
                  rt_tensor *out) {
    memset(out, 0, sizeof *out);
    mdl_wt w;
    const char *path = mdl_wsrc_path(m->src);
    if (!mdl_wsrc_find(m->src, canon, &w)) {
        if (!required) return VC_OK;
        return vc_err_set(VC_ERR_FORMAT, "%s: missing tensor '%s'", path, canon);
    }
    bool same = w.ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = w.shape[i] == shape[i];
    /* A [1, n] or [n, 1] file tensor for an expected 1-D [n] is fine. */
    if (!same && ndim == 1) {
        int64_t ne = 1;
        for (int i = 0; i < w.ndim; i++) ne *= w.shape[i];
        same = ne == shape[0];
    }
    if (!same) {
        char e[96], g[96];
        shape_str(e, sizeof e, ndim, shape);
        shape_str(g, sizeof g, w.ndim, w.shape);
        return vc_err_set(VC_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", path, w.name, g, e);
    }
    if (w.dtype < 0 && w.ggml_type == MDL_GGML_Q5_0) { /* value-for-value into Q8_0 */
        int64_t ne = 1;
        for (int i = 0; i < ndim; i++) ne *= shape[i];
        if (shape[ndim - 1] % RT_QK || w.nbytes != (size_t)(ne / RT_QK) * 22)
            return vc_err_set(VC_ERR_FORMAT, "%s: q5_0 tensor '%s' has a bad size", path, w.name);
        void *q8 = host_keep(m, (size_t)(ne / RT_QK) * sizeof(rt_block_q8_0));
        if (!q8) return vc_err_set(VC_ERR_OOM, "out of memory");
        mdl_repack_q5_0_to_q8_0(w.data, q8, ne / RT_QK);
        w.dtype = RT_Q8_0;
        w.data = q8;
        w.nbytes = (size_t)(ne / RT_QK) * sizeof(rt_block_q8_0);
    }
    if (w.dtype < 0)
        return vc_err_set(VC_ERR_UNSUPPORTED, "%s: tensor '%s' has an unsupported dtype", path, w.name);
    rt_tensor host = rt_tensor_make((void *)w.data, (rt_dtype)w.dtype, RT_DEV_CPU, ndim, shape);
    if (rt_tensor_nbytes(&host) != w.nbytes)
        return vc_err_set(VC_ERR_FORMAT, "%s: tensor '%s' holds %zu bytes, expected %zu", path, w.name,
                          w.nbytes, rt_tensor_nbytes(&host));
    *out = host;
    return VC_OK;
}

int mdl_bind_host(mdl_model *m, rt_tensor *t, const rt_tensor *hostp, bool temp) {
    rt_tensor host = *hostp;
    int ndim = host.ndim;
    const int64_t *shape = host.shape;
    if ((ndim == 1 || m->upcast_weights) && host.dtype != RT_F32) {
        /* Norm weights and biases are used as f32 by every op. */
        if (mdl_own_tensor(m, t, RT_F32, ndim, shape) < 0) return VC_ERR_OOM;
        if (m->be->device == RT_DEV_CPU) return rt_copy(m->be, t, &host);
        /* Convert on the host with the reference dequantizer, then upload. */
        rt_tensor tmp = rt_tensor_make(malloc(rt_tensor_nbytes(t)), RT_F32, RT_DEV_CPU, ndim, shape);
        if (!tmp.data) return vc_err_set(VC_ERR_OOM, "out of memory");
        int64_t rows = rt_tensor_nrows(&host), cols = host.shape[host.ndim - 1];
        for (int64_t r = 0; r < rows; r++)
            rt_dequant_row(host.dtype, rt_tensor_row(&host, r), (float *)tmp.data + r * cols, cols);
        int rc = rt_tensor_copy_bytes(m->be, t, &tmp);
        free(tmp.data);
        return rc;
    }
    if (m->be->device == RT_DEV_CPU && !temp) { /* zero-copy from the mmap */
        *t = host;
        return VC_OK;
    }
    if (mdl_own_tensor(m, t, host.dtype, ndim, shape) < 0) return VC_ERR_OOM;
    return rt_tensor_copy_bytes(m->be, t, &host);
}

/* inv_freq[i] = theta^(-2i/rot), then the checkpoint's scaling rule. */
static int make_inv_freq(mdl_model *m) {
    const mdl_config *c = &m->cfg;
    int64_t half = c->rot_dim / 2;
    float *f = malloc((size_t)half * sizeof *f);
    if (!f) return vc_err_set(VC_ERR_OOM, "out of memory");
    for (int64_t i = 0; i < half; i++) {
        float inv = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->rot_dim);
        if (c->rope_scaling == MDL_ROPE_LINEAR) {
            inv /= c->rope_factor;
        } else if (c->rope_scaling == MDL_ROPE_LLAMA3) {
            float lo_wl = (float)c->rope_orig_max_pos / c->rope_low_freq_factor;
            float hi_wl = (float)c->rope_orig_max_pos / c->rope_high_freq_factor;
            float wl = 2.0f * (float)M_PI / inv;
            if (wl > lo_wl) {
                inv = inv / c->rope_factor;
            } else if (wl >= hi_wl) {
                float smooth = ((float)c->rope_orig_max_pos / wl - c->rope_low_freq_factor) /
                               (c->rope_high_freq_factor - c->rope_low_freq_factor);
                inv = (1.0f - smooth) * inv / c->rope_factor + smooth * inv;
            }
        }
        f[i] = inv;
    }
    /* GGUF Llama-3 files carry the scaling as per-frequency divisors. */
    mdl_wt ff;
    if (mdl_wsrc_find(m->src, "rope_freqs.weight", &ff)) {
        if (ff.dtype != RT_F32 || ff.nbytes != (size_t)half * sizeof(float)) {
            free(f);
            return vc_err_set(VC_ERR_FORMAT, "%s: rope_freqs.weight must be f32[%lld]", mdl_wsrc_path(m->src),
                              (long long)half);
        }
        const float *d = ff.data;
        for (int64_t i = 0; i < half; i++) f[i] /= d[i];
    }
    int64_t shape[1] = {half};
    int rc = mdl_own_tensor(m, &m->inv_freq, RT_F32, 1, shape);
    if (rc == 0) {
        rt_tensor host = rt_tensor_1d(f, RT_F32, RT_DEV_CPU, half);
        rc = rt_tensor_copy_bytes(m->be, &m->inv_freq, &host);
    }
    /* Sliding layers with their own base (Gemma 3): plain theta^(-2i/rot). */
    if (rc == 0 && c->rope_theta_swa > 0) {
        for (int64_t i = 0; i < half; i++) f[i] = 1.0f / powf(c->rope_theta_swa, (float)(2 * i) / (float)c->rot_dim);
        rc = mdl_own_tensor(m, &m->inv_freq_swa, RT_F32, 1, shape);
        if (rc == 0) {
            rt_tensor host = rt_tensor_1d(f, RT_F32, RT_DEV_CPU, half);
            rc = rt_tensor_copy_bytes(m->be, &m->inv_freq_swa, &host);
        }
    }
    free(f);
    return rc;
}

static int alloc_activations(mdl_model *m) {
    const mdl_config *c = &m->cfg;
    int64_t B = m->max_batch;
    struct {
        rt_tensor *t;
        rt_dtype dt;
        int64_t rows, cols; /* cols 0: 1-D */
    } bufs[] = {
        {&m->x, RT_F32, B, c->hidden},
        {&m->xb, RT_F32, B, c->hidden},
        {&m->q, RT_F32, B, m->h_l * c->head_dim},
        {&m->k, RT_F32, B, m->kvh_l * c->head_dim},
        {&m->v, RT_F32, B, m->kvh_l * c->head_dim},
        {&m->att, RT_F32, B, m->h_l * c->head_dim},
        {&m->gate, RT_F32, B, m->ff_l},
        {&m->up, RT_F32, B, m->ff_l},
        {&m->ids, RT_I32, B, 0},
        {&m->pos, RT_I32, B, 0},
        {&m->slots, RT_I32, B, 0},
        {&m->qsl, RT_I32, B + 1, 0},
        {&m->qsl_t, RT_I32, B + 1, 0},
        {&m->seq_lens, RT_I32, B, 0},
        {&m->logit_rows, RT_I32, B, 0},
        {&m->qsl_p, RT_I32, B + 1, 0},
        {&m->sl_p, RT_I32, B, 0},
        {&m->samp_f, RT_F32, B, RT_SAMPLE_NF},
        {&m->samp_i, RT_I32, B, RT_SAMPLE_NI},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        int64_t s2[2] = {bufs[i].rows, bufs[i].cols};
        int rc = mdl_own_tensor(m, bufs[i].t, bufs[i].dt, bufs[i].cols ? 2 : 1, s2);
        if (rc < 0) return rc;
    }
    return VC_OK;
}

/* The KV cache dtype for kv_dtype (see model.h), after the weights are bound. */
int mdl_parse_kv_dtype(const char *e, int *out) {
    if (!strcmp(e, "auto")) *out = MDL_KV_AUTO;
    else if (!strcmp(e, "f32") || !strcmp(e, "float32")) *out = RT_F32;
    else if (!strcmp(e, "f16") || !strcmp(e, "float16") || !strcmp(e, "half")) *out = RT_F16;
    else if (!strcmp(e, "bf16") || !strcmp(e, "bfloat16")) *out = RT_BF16;
    else if (!strncmp(e, "fp8", 3))
        return vc_err_set(VC_ERR_UNSUPPORTED, "KV cache dtype '%s': fp8 KV caches are not implemented", e);
    else return vc_err_set(VC_ERR_INVALID, "KV cache dtype '%s': expected auto, float32, float16 or bfloat16", e);
    return VC_OK;
}

static int resolve_kv_dtype(mdl_model *m, int want) {
    if (want == MDL_KV_AUTO) {
        const char *e = getenv("VLLM_KV_CACHE_DTYPE");
        if (e && *e && mdl_parse_kv_dtype(e, &want) < 0) return vc_err_prefix("VLLM_KV_CACHE_DTYPE");
    }
    if (want == MDL_KV_AUTO) {
        const rt_tensor *w0 = m->cfg.n_layers > 0 ? (m->layers[0].wqkv.data ? &m->layers[0].wqkv : &m->layers[0].wq)
                                                  : NULL;
        rt_dtype w = w0 && w0->data ? w0->dtype : RT_F32;
        bool quant = rt_dtype_info(w)->quantized;
        /* CPU: f16 for block-quantized models (llama.cpp's default; decode
         * attention reads the cache every step and is bandwidth-bound: f16
         * decodes ~10% faster at 1k positions on a 1B model), f32 for
         * float checkpoints (their goldens are fp32). */
        if (m->be->device == RT_DEV_CPU) want = quant ? RT_F16 : RT_F32;
        else if (w == RT_F32) want = RT_F32;
        else want = w == RT_BF16 ? RT_BF16 : RT_F16;
    }
    if (want != RT_F32 && want != RT_F16 && want != RT_BF16)
        return vc_err_set(VC_ERR_INVALID, "KV cache dtype must be f32, f16 or bf16");
    m->kv_dtype = (rt_dtype)want;
    return VC_OK;
}

mdl_model *mdl_load(const char *path, rt_backend *be, const mdl_params *p) {
    mdl_params def = mdl_params_default();
    if (!p) p = &def;
    int tp = p->tp_size > 1 ? p->tp_size : 1;
    if (tp > 1 && (!p->tp_backends || p->tp_backends[0] != be)) {
        vc_err_set(VC_ERR_INVALID, "tensor parallel: tp_backends[0] must be the model's backend");
        return NULL;
    }
    mdl_model *m = mdl_load_rank(path, be, p, 0, tp);
    if (m && tp > 1 && mdl_tp_group_start(m, path, p) < 0) {
        mdl_free(m);
        return NULL;
    }
    return m;
}

mdl_model *mdl_load_rank(const char *path, rt_backend *be, const mdl_params *p, int rank, int size) {
    mdl_model *m = calloc(1, sizeof *m);
    if (!m) {
        vc_err_set(VC_ERR_OOM, "out of memory");
        return NULL;
    }
    m->be = be;
    m->max_batch = p->max_batch > 0 ? p->max_batch : 512;
    m->upcast_weights = p->upcast_weights;
    const char *split = getenv("VLLM_ATTN_SPLIT"); /* 0: one attention call per layer (A/B) */
    m->att_split = !(split && !strcmp(split, "0"));
    /* VLLM_LAST_ROWS: any (default) any count of logit rows, 1 a step with
     * one logit row, 0 never (the last layer over every row; A/B) */
    const char *lr = getenv("VLLM_LAST_ROWS");
    m->last_rows_max = lr && !strcmp(lr, "0") ? 0 : lr && !strcmp(lr, "1") ? 1 : INT64_MAX;
    if (lr && *lr && strcmp(lr, "0") && strcmp(lr, "1") && strcmp(lr, "any"))
        VC_WARN("VLLM_LAST_ROWS=%s: expected 0, 1 or any; using any", lr);
    m->src = mdl_wsrc_open(path, &m->cfg);
    if (!m->src) goto fail;
    for (size_t i = 0; i < sizeof g_family_map / sizeof g_family_map[0]; i++)
        if (!strcmp(m->cfg.arch, g_family_map[i].arch)) m->arch = g_family_map[i].impl;
    if (!m->arch) {
        vc_err_set(VC_ERR_UNSUPPORTED, "%s: no implementation for architecture '%s'", path, m->cfg.arch);
        goto fail;
    }
    (void)g_archs;
    if (mdl_tp_setup(m, rank, size) < 0) goto fail;
    if (m->arch->load(m) < 0 || resolve_kv_dtype(m, p->kv_dtype) < 0 || make_inv_freq(m) < 0 ||
        alloc_activations(m) < 0 || (rank == 0 && mdl_mirror_init(m) < 0))
        goto fail;
    VC_INFO("loaded %s: %s, %lld layers, hidden %lld, heads %lld/%lld, vocab %lld, kv cache %s", path,
            m->cfg.arch, (long long)m->cfg.n_layers, (long long)m->cfg.hidden, (long long)m->cfg.n_heads,
            (long long)m->cfg.n_kv_heads, (long long)m->cfg.vocab, rt_dtype_name(m->kv_dtype));
    return m;
fail:
    mdl_free(m);
    return NULL;
}

void mdl_free(mdl_model *m) {
    if (!m) return;
    mdl_mirror_free(m);
    mdl_graph_free_all(m);
    if (m->tp) mdl_tp_group_stop(m);
    if (m->logits_l.data) rt_backend_free_mem(m->be, m->logits_l.data);
    for (int i = 0; i < m->n_owned; i++) rt_backend_free_mem(m->be, m->owned[i]);
    free(m->owned);
    if (m->logits.data) rt_backend_free_mem(m->be, m->logits.data);
    if (m->block_tables.data) rt_backend_free_mem(m->be, m->block_tables.data);
    if (m->bt_p.data) rt_backend_free_mem(m->be, m->bt_p.data);
    if (m->samp_hist.data) rt_backend_free_mem(m->be, m->samp_hist.data);
    if (m->samp_cnt.data) rt_backend_free_mem(m->be, m->samp_cnt.data);
    free(m->layers);
    for (void **b = m->host_bufs; b;) { /* host_keep chain */
        void **next = *b;
        free(b);
        b = next;
    }
    mdl_wsrc_close(m->src);
    free(m);
}

const mdl_config *mdl_get_config(const mdl_model *m) { return &m->cfg; }
const gguf_ctx *mdl_get_gguf(const mdl_model *m) { return mdl_wsrc_gguf(m->src); }
const char *mdl_get_path(const mdl_model *m) { return mdl_wsrc_path(m->src); }

size_t mdl_weight_bytes(const mdl_model *m) {
    size_t b = rt_tensor_nbytes(&m->output) + rt_dtype_row_bytes(m->tok_embd.dtype, m->cfg.hidden);
    for (int64_t l = 0; l < m->cfg.n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        const rt_tensor *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) b += rt_tensor_nbytes(ws[i]);
    }
    return b;
}

size_t mdl_kv_block_bytes(const mdl_model *m, int32_t block_size) {
    const mdl_config *c = &m->cfg;
    /* Per device: under TP each GPU holds its ranks' KV heads; on the CPU
     * all ranks share one memory, so count all heads. */
    int64_t kvh = m->be->device == RT_DEV_CPU ? m->kvh_l * m->tp_size : m->kvh_l;
    return (size_t)2 * (size_t)c->n_layers * (size_t)block_size * (size_t)(kvh * c->head_dim) *
           rt_dtype_info(m->kv_dtype)->block_bytes;
}

int mdl_kv_dtype(const mdl_model *m) { return (int)m->kv_dtype; }

static mdl_kv *kv_create_one(mdl_model *m, int32_t num_blocks, int32_t block_size);

mdl_kv *mdl_kv_create(mdl_model *m, int32_t num_blocks, int32_t block_size) {
    mdl_kv *kv = kv_create_one(m, num_blocks, block_size);
    if (!kv || m->tp_size <= 1) return kv;
    kv->ranks = calloc((size_t)m->tp_size, sizeof *kv->ranks);
    if (!kv->ranks) {
        mdl_kv_free(kv);
        vc_err_set(VC_ERR_OOM, "out of memory");
        return NULL;
    }
    kv->ranks[0] = kv;
    for (int r = 1; r < m->tp_size; r++) {
        kv->ranks[r] = kv_create_one(mdl_tp_rank_model(m, r), num_blocks, block_size);
        if (!kv->ranks[r]) {
            mdl_kv_free(kv);
            return NULL;
        }
    }
    return kv;
}

static mdl_kv *kv_create_one(mdl_model *m, int32_t num_blocks, int32_t block_size) {
    if (num_blocks <= 0 || block_size <= 0) {
        vc_err_set(VC_ERR_INVALID, "KV cache: need num_blocks > 0 and block_size > 0");
        return NULL;
    }
    mdl_kv *kv = calloc(1, sizeof *kv);
    if (!kv) goto oom;
    kv->m = m;
    kv->num_blocks = num_blocks;
    kv->block_size = block_size;
    kv->k = calloc((size_t)m->cfg.n_layers, sizeof(rt_tensor));
    kv->v = calloc((size_t)m->cfg.n_layers, sizeof(rt_tensor));
    if (!kv->k || !kv->v) goto oom;
    int64_t shape[4] = {num_blocks, block_size, m->kvh_l, m->cfg.head_dim};
    for (int64_t l = 0; l < m->cfg.n_layers; l++) {
        kv->k[l] = rt_tensor_alloc(m->be, m->kv_dtype, 4, shape);
        kv->v[l] = rt_tensor_alloc(m->be, m->kv_dtype, 4, shape);
        if (!kv->k[l].data || !kv->v[l].data) goto oom;
    }
    return kv;
oom:
    vc_err_set(VC_ERR_OOM, "out of memory allocating a KV cache of %d blocks x %d tokens", num_blocks, block_size);
    mdl_kv_free(kv);
    return NULL;
}

void mdl_kv_free(mdl_kv *kv) {
    if (!kv) return;
    mdl_graph_drop_kv(kv->m, kv);
    if (kv->ranks) {
        for (int r = 1; r < kv->m->tp_size; r++) mdl_kv_free(kv->ranks[r]);
        free(kv->ranks);
    }
    for (int64_t l = 0; kv->k && l < kv->m->cfg.n_layers; l++) {
        rt_backend_free_mem(kv->m->be, kv->k[l].data);
        rt_backend_free_mem(kv->m->be, kv->v[l].data);
    }
    free(kv->k);
    free(kv->v);
    free(kv);
}

int mdl_ensure_logits(mdl_model *m, int64_t rows) {
    if (m->logits_rows >= rows) return VC_OK;
    if (m->logits.data) rt_backend_free_mem(m->be, m->logits.data);
    if (m->logits_l.data) rt_backend_free_mem(m->be, m->logits_l.data);
    m->logits_l.data = NULL;
    /* [tp * rows, vocab_l]: under TP the gathered [tp, rows, vocab_l]. */
    int64_t shape[2] = {m->tp_size * rows, m->vocab_l}, shape_l[2] = {rows, m->vocab_l};
    m->logits = rt_tensor_alloc(m->be, RT_F32, 2, shape);
    if (m->logits.data && m->tp_size > 1) m->logits_l = rt_tensor_alloc(m->be, RT_F32, 2, shape_l);
    if (!m->logits.data || (m->tp_size > 1 && !m->logits_l.data)) {
        m->logits_rows = 0;
        return vc_err_set(VC_ERR_OOM, "out of memory for logits");
    }
    m->logits_rows = rows;
    return VC_OK;
}

/* An i32 device buffer *t of at least n entries (*cap: its size; grown
 * to twice the need, at least 4096; its contents are not kept). */
static int ensure_i32(mdl_model *m, rt_tensor *t, int64_t *cap, int64_t n, const char *what) {
    if (*cap >= n) return VC_OK;
    if (t->data) rt_backend_free_mem(m->be, t->data);
    int64_t c = n < 4096 ? 4096 : n * 2;
    *t = rt_tensor_alloc(m->be, RT_I32, 1, &c);
    if (!t->data) {
        *cap = 0;
        return vc_err_set(VC_ERR_OOM, "out of memory for %s", what);
    }
    *cap = c;
    return VC_OK;
}

int mdl_ensure_block_tables(mdl_model *m, int64_t n) {
    return ensure_i32(m, &m->block_tables, &m->bt_cap, n, "block tables");
}

int mdl_upload_i32(mdl_model *m, const rt_tensor *dst, const int32_t *src, int64_t n) {
    if (n == 0) return VC_OK;
    rt_tensor h = rt_tensor_1d((void *)src, RT_I32, RT_DEV_CPU, n);
    rt_tensor d = rt_tensor_slice0(dst, 0, n);
    return rt_tensor_copy_bytes(m->be, &d, &h);
}

/* Device buffers of the sampling inputs: the history grows to n ids; the
 * penalty counts to rows [rows, V], zeroed once (the op leaves them zero). */
static int ensure_sample_bufs(mdl_model *m, int64_t n_hist, int64_t rows) {
    if (n_hist > m->samp_hist_cap) {
        if (m->samp_hist.data) rt_backend_free_mem(m->be, m->samp_hist.data);
        int64_t cap = n_hist < 65536 ? 65536 : n_hist * 2;
        m->samp_hist = rt_tensor_alloc(m->be, RT_I32, 1, &cap);
        m->samp_hist_cap = m->samp_hist.data ? cap : 0;
        if (!m->samp_hist.data) return vc_err_set(VC_ERR_OOM, "out of memory for sampling histories");
    }
    if (n_hist > 0 && rows > m->samp_cnt_rows) {
        if (m->samp_cnt.data) rt_backend_free_mem(m->be, m->samp_cnt.data);
        int64_t shape[2] = {(rows + 63) / 64 * 64, m->cfg.vocab};
        m->samp_cnt = rt_tensor_alloc(m->be, RT_I32, 2, shape);
        m->samp_cnt_rows = 0;
        if (!m->samp_cnt.data) return vc_err_set(VC_ERR_OOM, "out of memory for sampling counts");
        void *zeros = calloc((size_t)rt_tensor_nbytes(&m->samp_cnt), 1);
        if (!zeros) return vc_err_set(VC_ERR_OOM, "out of memory");
        rt_tensor hz = rt_tensor_make(zeros, RT_I32, RT_DEV_CPU, 2, shape);
        int rc = rt_tensor_copy_bytes(m->be, &m->samp_cnt, &hz);
        if (rc == 0) rc = rt_backend_sync(m->be); /* the staging may still read `zeros` */
        free(zeros);
        if (rc < 0) return rc;
        m->samp_cnt_rows = shape[0];
    }
    return VC_OK;
}

int mdl_sample_rows(mdl_model *m, int64_t L, rt_tensor *dst, const mdl_sample_args *sa) {
    int rc = ensure_sample_bufs(m, sa->n_hist, L);
    if (rc < 0) return rc;
    rt_tensor dl = rt_tensor_slice0(&m->logits, 0, L);
    rt_tensor df = rt_tensor_slice0(&m->samp_f, 0, L), di = rt_tensor_slice0(&m->samp_i, 0, L);
    rt_tensor hf = rt_tensor_2d((void *)sa->fparams, RT_F32, RT_DEV_CPU, L, RT_SAMPLE_NF);
    rt_tensor hi = rt_tensor_2d((void *)sa->iparams, RT_I32, RT_DEV_CPU, L, RT_SAMPLE_NI);
    rc = rt_tensor_copy_bytes(m->be, &df, &hf);
    if (rc == 0) rc = rt_tensor_copy_bytes(m->be, &di, &hi);
    rt_tensor dh = {0};
    if (sa->n_hist > 0) dh = rt_tensor_slice0(&m->samp_hist, 0, sa->n_hist);
    if (rc == 0 && sa->n_hist > 0) rc = mdl_upload_i32(m, &dh, sa->hist, sa->n_hist);
    if (rc == 0 && sa->n_hist > 0) rc = mdl_splice_hist(m, &dh); /* in-flight ids of the previous step */
    if (rc == 0)
        rc = rt_sample(m->be, dst, &dl, &df, &di, sa->n_hist > 0 ? &dh : NULL, sa->n_hist > 0 ? &m->samp_cnt : NULL);
    return rc;
}

/* The n_logits rows of m->logits to the host (see model_impl.h); under TP
 * the rows are split over the vocabulary, so they are gathered on the host
 * ([tp, L, V/tp] -> [L, V]) and reduced there. */
int mdl_fetch_logits(mdl_model *m, int64_t L, float *logits, int32_t *ids) {
    if (L <= 0) return VC_OK;
    int64_t V = m->cfg.vocab;
    if (m->tp_size == 1) {
        if (!logits) return vc_err_set(VC_ERR_INVALID, "forward: no logits buffer");
        rt_tensor dl = rt_tensor_slice0(&m->logits, 0, L);
        rt_tensor hl = rt_tensor_2d(logits, RT_F32, RT_DEV_CPU, L, V);
        return rt_tensor_copy_bytes(m->be, &hl, &dl);
    }
    int64_t Vl = m->vocab_l, W = m->tp_size;
    float *tmp = malloc((size_t)(W * L * Vl) * sizeof *tmp), *full = logits;
    if (!full) full = malloc((size_t)(L * V) * sizeof *full);
    if (!tmp || !full) {
        free(tmp);
        if (full != logits) free(full);
        return vc_err_set(VC_ERR_OOM, "out of memory");
    }
    rt_tensor ht = rt_tensor_2d(tmp, RT_F32, RT_DEV_CPU, W * L, Vl);
    rt_tensor dl = rt_tensor_slice0(&m->logits, 0, W * L);
    int rc = rt_tensor_copy_bytes(m->be, &ht, &dl);
    for (int64_t r = 0; rc == 0 && r < W; r++)
        for (int64_t l = 0; l < L; l++)
            memcpy(full + l * V + r * Vl, tmp + (r * L + l) * Vl, (size_t)Vl * sizeof *tmp);
    for (int64_t l = 0; rc == 0 && ids && l < L; l++) { /* as rt_argmax: NaN skipped, lowest index on ties */
        const float *row = full + l * V;
        int32_t best = -1;
        for (int64_t j = 0; j < V; j++)
            if (!isnan(row[j]) && (best < 0 || row[j] > row[best])) best = (int32_t)j;
        ids[l] = best < 0 ? 0 : best;
    }
    free(tmp);
    if (full != logits) free(full);
    return rc;
}

static int rank_prepare(mdl_model *m, mdl_kv *kv, void *arg);
static int rank_forward(mdl_model *m, mdl_kv *kv, void *arg);

/* The synchronous entry points: enqueue + collect (model_mirror.c). */
int mdl_forward_batch(mdl_model *m, mdl_kv *kv, const mdl_batch *b, float *logits) {
    return mdl_forward_batch_splice(m, kv, b, NULL, logits);
}

int mdl_forward_batch_argmax(mdl_model *m, mdl_kv *kv, const mdl_batch *b, int32_t *ids) {
    mdl_ticket t;
    int rc = mdl_forward_batch_argmax_async(m, kv, b, NULL, &t);
    return rc < 0 ? rc : mdl_collect(m, t, ids);
}

bool mdl_can_sample(const mdl_model *m) {
    rt_op_args a = {0};
    return m->tp_size == 1 && rt_op_supported(m->be, RT_OP_SAMPLE, &a);
}

int mdl_device(const mdl_model *m) { return m->be->device; }

int mdl_forward_batch_sample(mdl_model *m, mdl_kv *kv, const mdl_batch *b, const mdl_sample_args *sa, int32_t *ids) {
    mdl_ticket t;
    int rc = mdl_forward_batch_sample_async(m, kv, b, sa, NULL, &t);
    return rc < 0 ? rc : mdl_collect(m, t, ids);
}

int mdl_forward_batch_ex(mdl_model *m, mdl_kv *kv, const mdl_batch *b, float *logits, int32_t *ids) {
    if (b->n_logits > 0 && !logits == !ids) return vc_err_set(VC_ERR_INVALID, "forward: give logits or ids, not both");
    return ids ? mdl_forward_batch_argmax(m, kv, b, ids) : mdl_forward_batch(m, kv, b, logits);
}

int mdl_forward_step(mdl_model *m, mdl_kv *kv, const mdl_batch *b) {
    int64_t T = b->n_tokens, S = b->n_seqs, L = b->n_logits, V = m->cfg.vocab;
    if (T <= 0 || T > m->max_batch)
        return vc_err_set(VC_ERR_INVALID, "batch of %lld tokens (max %lld)", (long long)T, (long long)m->max_batch);
    if (S <= 0 || S > T || L < 0 || L > T || b->max_blocks <= 0 || b->qsl[0] != 0 || b->qsl[S] != T)
        return vc_err_set(VC_ERR_INVALID, "malformed batch (%lld tokens, %lld sequences)", (long long)T, (long long)S);
    int64_t slots_total = (int64_t)kv->num_blocks * kv->block_size;
    for (int64_t i = 0; i < T; i++) {
        if (b->ids[i] < 0 || b->ids[i] >= V)
            return vc_err_set(VC_ERR_INVALID, "token id %d out of range [0, %lld)", b->ids[i], (long long)V);
        if (b->positions[i] < 0 || b->positions[i] >= m->cfg.max_pos || b->slots[i] >= slots_total)
            return vc_err_set(VC_ERR_INVALID, "position %d / slot %d out of range", b->positions[i], b->slots[i]);
    }
    for (int64_t i = 0; i < L; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= T) return vc_err_set(VC_ERR_INVALID, "bad logit row");
    int rc = VC_OK;
    if (!m->tp && mdl_graph_step(m, kv, b, &rc)) return rc; /* a decode step replayed as a graph */
    /* Buffers first on every rank, so no rank fails between collectives. */
    rc = m->tp ? mdl_tp_run(m, kv, rank_prepare, (void *)b) : rank_prepare(m, kv, (void *)b);
    if (rc == 0) rc = m->tp ? mdl_tp_run(m, kv, rank_forward, (void *)b) : rank_forward(m, kv, (void *)b);
    return rc;
}

static int rank_prepare(mdl_model *m, mdl_kv *kv, void *arg) {
    (void)kv;
    const mdl_batch *b = arg;
    int rc = mdl_ensure_block_tables(m, (int64_t)b->n_seqs * b->max_blocks);
    /* the logit rows' own (last_rows; a separate buffer: the decode graphs
     * hold block_tables' address, and a move records them all again) */
    if (rc == 0 && m->arch->last_rows && b->n_logits <= m->last_rows_max && 4 * b->n_logits <= b->n_tokens)
        rc = ensure_i32(m, &m->bt_p, &m->bt_p_cap, (int64_t)b->n_logits * b->max_blocks, "block tables");
    if (rc == 0 && b->n_logits > 0) rc = mdl_ensure_logits(m, b->n_logits);
    return rc;
}

/* The step's decode prefix (mdl_paged_attention): D leading sequences of
 * one query each, followed by sequences with more (prompt rows); then the
 * rest's qsl rebased to start at 0 goes to m->qsl_t. m->att_dec = D, or 0
 * when the step is all decode, has no decode prefix, or the split is off. */
static int upload_att_split(mdl_model *m, const mdl_batch *b) {
    const int32_t S = b->n_seqs;
    int32_t D = 0;
    while (D < S && b->qsl[D + 1] - b->qsl[D] == 1) D++;
    m->att_dec = 0;
    if (!m->att_split || D == 0 || D == S) return VC_OK;
    int32_t *qt = malloc((size_t)(S - D + 1) * sizeof *qt);
    if (!qt) return vc_err_set(VC_ERR_OOM, "out of memory");
    for (int32_t k = 0; k <= S - D; k++) qt[k] = b->qsl[D + k] - b->qsl[D];
    int rc = mdl_upload_i32(m, &m->qsl_t, qt, S - D + 1);
    free(qt);
    if (rc == 0) m->att_dec = D;
    return rc;
}

static uint64_t g_last_rows_steps;
uint64_t mdl_last_rows_count(void) { return __atomic_load_n(&g_last_rows_steps, __ATOMIC_RELAXED); }

/* m->last_rows for the step (see model_impl.h): L when the arch can, one
 * rank, L <= last_rows_max, 4 L <= T and logit row k is the last row of a
 * sequence s_k, each sequence once; then its metadata for one query per
 * s_k: bt_p = the s_k's block-table rows, qsl_p = 0 .. L, sl_p =
 * seq_lens[s_k]. */
static int upload_last_rows(mdl_model *m, const mdl_batch *b) {
    const int64_t T = b->n_tokens, S = b->n_seqs, L = b->n_logits, mb = b->max_blocks;
    m->last_rows = 0;
    if (!m->arch->last_rows || L > m->last_rows_max || m->tp_size > 1 || L <= 0 || 4 * L > T) return VC_OK;
    int32_t *meta = malloc((size_t)(2 * L + 1 + L * mb) * sizeof *meta);
    uint8_t *seen = calloc((size_t)S, 1);
    if (!meta || !seen) {
        free(meta), free(seen);
        return vc_err_set(VC_ERR_OOM, "out of memory");
    }
    int32_t *qp = meta, *sl = meta + L + 1, *bt = meta + 2 * L + 1;
    bool ok = true;
    for (int64_t k = 0; k < L && ok; k++) {
        const int32_t r = b->logit_rows[k];
        int64_t lo = 0, hi = S - 1; /* the sequence holding row r: qsl[s] <= r < qsl[s + 1] */
        while (lo < hi) {
            const int64_t mid = (lo + hi + 1) / 2;
            if (b->qsl[mid] <= r) lo = mid;
            else hi = mid - 1;
        }
        ok = r == b->qsl[lo + 1] - 1 && !seen[lo];
        seen[lo] = 1;
        qp[k] = (int32_t)k, sl[k] = b->seq_lens[lo];
        memcpy(bt + k * mb, b->block_tables + lo * mb, (size_t)mb * sizeof *bt);
    }
    qp[L] = (int32_t)L;
    int rc = VC_OK;
    if (ok) {
        rc = mdl_upload_i32(m, &m->qsl_p, qp, L + 1);
        if (rc == 0) rc = mdl_upload_i32(m, &m->sl_p, sl, L);
        if (rc == 0) rc = mdl_upload_i32(m, &m->bt_p, bt, L * mb);
        if (rc == 0) m->last_rows = L, __atomic_fetch_add(&g_last_rows_steps, 1, __ATOMIC_RELAXED);
    }
    free(seen);
    /* the copies are queued from pageable memory: the backend's upload has
     * taken the bytes when it returns (as for the step's other metadata) */
    free(meta);
    return rc;
}

static int rank_forward(mdl_model *m, mdl_kv *kv, void *arg) {
    const mdl_batch *b = arg;
    int64_t T = b->n_tokens, S = b->n_seqs, L = b->n_logits;
    int rc = mdl_upload_i32(m, &m->ids, b->ids, T);
    if (rc == 0) rc = mdl_splice_ids(m, T); /* placeholders: the previous step's ids, on the device */
    if (rc == 0) rc = mdl_upload_i32(m, &m->pos, b->positions, T);
    if (rc == 0) rc = mdl_upload_i32(m, &m->slots, b->slots, T);
    if (rc == 0) rc = mdl_upload_i32(m, &m->qsl, b->qsl, S + 1);
    if (rc == 0) rc = mdl_upload_i32(m, &m->seq_lens, b->seq_lens, S);
    if (rc == 0) rc = mdl_upload_i32(m, &m->logit_rows, b->logit_rows, L);
    if (rc == 0) rc = mdl_upload_i32(m, &m->block_tables, b->block_tables, S * b->max_blocks);
    if (rc == 0) rc = upload_att_split(m, b);
    if (rc == 0) rc = upload_last_rows(m, b);
    if (rc == 0) rc = m->arch->forward(m, kv, T, S, b->max_blocks, L);
    return rc;
}

#define SEQ_BLOCK 16

mdl_seq *mdl_seq_create(mdl_model *m, int64_t max_ctx) {
    if (max_ctx <= 0 || max_ctx > m->cfg.max_pos) max_ctx = m->cfg.max_pos;
    mdl_seq *s = calloc(1, sizeof *s);
    if (!s) {
        vc_err_set(VC_ERR_OOM, "out of memory");
        return NULL;
    }
    s->m = m;
    s->max_ctx = max_ctx;
    s->nb = (int32_t)((max_ctx + SEQ_BLOCK - 1) / SEQ_BLOCK);
    s->block_table = malloc((size_t)s->nb * sizeof *s->block_table);
    s->kv = s->block_table ? mdl_kv_create(m, s->nb, SEQ_BLOCK) : NULL;
    if (!s->kv) {
        mdl_seq_free(s);
        return NULL;
    }
    for (int32_t i = 0; i < s->nb; i++) s->block_table[i] = i;
    return s;
}

void mdl_seq_free(mdl_seq *s) {
    if (!s) return;
    mdl_kv_free(s->kv);
    free(s->block_table);
    free(s);
}

int64_t mdl_seq_len(const mdl_seq *s) { return s->len; }
void mdl_seq_reset(mdl_seq *s) { s->len = 0; }

/* The seq API's forward: chunks of at most max_batch tokens; the last
 * chunk's logits go to logits (all rows with all_logits) or, with argmax
 * non-NULL, only the id of the last row's largest logit (argmax on the
 * device: 4 bytes back instead of a vocabulary of floats). */
static int seq_forward(mdl_model *m, mdl_seq *s, const int32_t *ids, int64_t n, float *logits, bool all_logits,
                       int32_t *argmax) {
    if (n <= 0) return vc_err_set(VC_ERR_INVALID, "forward: no tokens");
    if (s->len + n > s->max_ctx)
        return vc_err_set(VC_ERR_INVALID, "context overflow: %lld + %lld tokens > %lld", (long long)s->len,
                          (long long)n, (long long)s->max_ctx);
    int64_t B = m->max_batch;
    int32_t *meta = malloc((size_t)(3 * B) * sizeof *meta);
    if (!meta) return vc_err_set(VC_ERR_OOM, "out of memory");
    int32_t *pos = meta, *slots = meta + B, *rows = meta + 2 * B;
    int rc = VC_OK;
    for (int64_t done = 0; done < n && rc == VC_OK;) {
        int64_t c = n - done < B ? n - done : B;
        bool last_chunk = done + c == n;
        for (int64_t i = 0; i < c; i++) {
            pos[i] = (int32_t)(s->len + i);
            slots[i] = pos[i]; /* identity block table: slot == position */
            rows[i] = (int32_t)i;
        }
        int32_t qsl[2] = {0, (int32_t)c}, seq_len = (int32_t)(s->len + c);
        int32_t n_logits = all_logits ? (int32_t)c : last_chunk ? 1 : 0;
        if (!all_logits) rows[0] = (int32_t)(c - 1);
        mdl_batch b = {.n_tokens = (int32_t)c, .ids = ids + done, .positions = pos, .slots = slots,
                       .n_seqs = 1, .qsl = qsl, .seq_lens = &seq_len, .block_tables = s->block_table,
                       .max_blocks = s->nb, .n_logits = n_logits, .logit_rows = rows};
        if (argmax && last_chunk) rc = mdl_forward_batch_argmax(m, s->kv, &b, argmax);
        else rc = mdl_forward_batch(m, s->kv, &b, all_logits ? logits + done * m->cfg.vocab : logits);
        if (rc == 0) s->len += c;
        done += c;
    }
    free(meta);
    return rc;
}

int mdl_forward(mdl_model *m, mdl_seq *s, const int32_t *ids, int64_t n, float *logits, bool all_logits) {
    return seq_forward(m, s, ids, n, logits, all_logits, NULL);
}

int mdl_forward_argmax(mdl_model *m, mdl_seq *s, const int32_t *ids, int64_t n, int32_t *next) {
    return seq_forward(m, s, ids, n, NULL, false, next);
}

/* mdl_seq_argmax_async / mdl_seq_sample_async: sa NULL for the argmax */
static int seq_step_async(mdl_model *m, mdl_seq *s, const int32_t *id, mdl_ticket prev, const mdl_sample_args *sa,
                          mdl_ticket *t) {
    *t = 0;
    if (prev <= 0 && !id) return vc_err_set(VC_ERR_INVALID, "forward: no input token");
    if (s->len + 1 > s->max_ctx)
        return vc_err_set(VC_ERR_INVALID, "context overflow: %lld + 1 tokens > %lld", (long long)s->len,
                          (long long)s->max_ctx);
    /* one token at position len (identity block table: slot == position);
     * with prev its host id is a placeholder the splice overwrites */
    int32_t ph = 0, pos = (int32_t)s->len, qsl[2] = {0, 1}, seq_len = pos + 1, row = 0, src = 0;
    mdl_batch b = {.n_tokens = 1, .ids = prev > 0 ? &ph : id, .positions = &pos, .slots = &pos, .n_seqs = 1,
                   .qsl = qsl, .seq_lens = &seq_len, .block_tables = s->block_table, .max_blocks = s->nb,
                   .n_logits = 1, .logit_rows = &row};
    mdl_splice sp = {.prev = prev, .n = 1, .rows = &row, .src = &src};
    int rc = sa ? mdl_forward_batch_sample_async(m, s->kv, &b, sa, prev > 0 ? &sp : NULL, t)
                : mdl_forward_batch_argmax_async(m, s->kv, &b, prev > 0 ? &sp : NULL, t);
    if (rc == 0) s->len++;
    return rc;
}

int mdl_seq_argmax_async(mdl_model *m, mdl_seq *s, const int32_t *id, mdl_ticket prev, mdl_ticket *t) {
    return seq_step_async(m, s, id, prev, NULL, t);
}

int mdl_seq_sample_async(mdl_model *m, mdl_seq *s, const int32_t *id, mdl_ticket prev, const mdl_sample_args *sa,
                         mdl_ticket *t) {
    if (!sa) {
        *t = 0;
        return vc_err_set(VC_ERR_INVALID, "forward: no sampling arguments");
    }
    return seq_step_async(m, s, id, prev, sa, t);
}

void mdl_step_views_make(mdl_model *m, int64_t n, int64_t S, int64_t max_blocks, mdl_step_views *sv) {
    int64_t h = m->h_l, kvh = m->kvh_l, hd = m->cfg.head_dim;
    sv->ids = rt_tensor_slice0(&m->ids, 0, n);
    sv->pos = rt_tensor_slice0(&m->pos, 0, n);
    sv->slots = rt_tensor_slice0(&m->slots, 0, n);
    sv->qsl = rt_tensor_slice0(&m->qsl, 0, S + 1);
    sv->seq_lens = rt_tensor_slice0(&m->seq_lens, 0, S);
    sv->bt = rt_tensor_2d(m->block_tables.data, RT_I32, m->block_tables.device, S, max_blocks);
    sv->dec_S = m->att_dec > 0 && m->att_dec < S && m->att_dec < n ? m->att_dec : 0;
    if (sv->dec_S) sv->qsl_t = rt_tensor_slice0(&m->qsl_t, 0, S - sv->dec_S + 1);
    sv->x = rt_tensor_slice0(&m->x, 0, n);
    sv->xb = rt_tensor_slice0(&m->xb, 0, n);
    sv->q = rt_tensor_slice0(&m->q, 0, n);
    sv->k = rt_tensor_slice0(&m->k, 0, n);
    sv->v = rt_tensor_slice0(&m->v, 0, n);
    sv->att = rt_tensor_slice0(&m->att, 0, n);
    sv->gate = rt_tensor_slice0(&m->gate, 0, n);
    sv->up = rt_tensor_slice0(&m->up, 0, n);
    int64_t s_q3[3] = {n, h, hd}, s_k3[3] = {n, kvh, hd}, s_q2[2] = {n * h, hd}, s_k2[2] = {n * kvh, hd};
    sv->q3 = rt_tensor_reshape(&sv->q, 3, s_q3);
    sv->k3 = rt_tensor_reshape(&sv->k, 3, s_k3);
    sv->v3 = rt_tensor_reshape(&sv->v, 3, s_k3);
    sv->att3 = rt_tensor_reshape(&sv->att, 3, s_q3);
    sv->q2 = rt_tensor_reshape(&sv->q, 2, s_q2);
    sv->k2 = rt_tensor_reshape(&sv->k, 2, s_k2);
}

/* The LM head over the n_logits normed rows xl (under TP: this rank's
 * vocab rows, then the all-gather). */
static int head_matmul(mdl_model *m, const rt_tensor *xl, int64_t n_logits) {
    rt_tensor lg = rt_tensor_slice0(m->tp_size > 1 ? &m->logits_l : &m->logits, 0, n_logits);
    MDL_TRY(rt_matmul(m->be, &lg, xl, &m->output, NULL));
    return m->tp_size > 1 ? mdl_tp_gather_logits(m, n_logits) : VC_OK;
}

/* The LM head's input rows: a bf16 view of xn16 where the backend wants bf16
 * activations for n_logits rows over the head's weights (so a batched
 * decode's head runs on the same kernel as its other matmuls: on CUDA the
 * f32-row GEMV costs 3-4x at 2-8 rows), else f32 (*f32, normed in place). */
static rt_tensor head_x(mdl_model *m, int64_t n_logits, const rt_tensor *f32) {
    if (m->xn16.data && n_logits <= m->xn16.shape[0] &&
        rt_backend_act_dtype(m->be, n_logits, m->output.dtype, m->cfg.hidden) == RT_BF16)
        return rt_tensor_slice0(&m->xn16, 0, n_logits);
    return *f32;
}

int mdl_logits_head_res(mdl_model *m, const mdl_step_views *sv, int64_t n, int64_t n_logits, const rt_tensor *res,
                        float eps, float w_off) {
    if (n_logits <= 0) return VC_OK; /* x is not read after the forward */
    int64_t d = m->cfg.hidden;
    /* Two [n_logits, d] f32 scratch rows in the FFN buffer (free after the
     * last layer's down projection). */
    bool gather = n_logits * 4 <= n && sv->gate.data && 2 * n_logits * d <= n * sv->gate.shape[1];
    if (!gather) {
        MDL_TRY(rt_add(m->be, (rt_tensor *)&sv->x, &sv->x, res));
        return mdl_logits_head(m, sv, n_logits, eps, w_off);
    }
    rt_tensor rows = rt_tensor_slice0(&m->logit_rows, 0, n_logits);
    rt_tensor xl = rt_tensor_slice0(&sv->xb, 0, n_logits);
    float *scratch = (float *)sv->gate.data;
    rt_tensor a = rt_tensor_2d(scratch, RT_F32, sv->gate.device, n_logits, d);
    rt_tensor b = rt_tensor_2d(scratch + n_logits * d, RT_F32, sv->gate.device, n_logits, d);
    MDL_TRY(rt_embed(m->be, &b, res, &rows)); /* res may be xb: gathered before xl overwrites it */
    MDL_TRY(rt_embed(m->be, &a, &sv->x, &rows));
    rt_tensor xh = head_x(m, n_logits, &xl);
    MDL_TRY(rt_add_rmsnorm(m->be, &xh, &a, &b, &m->out_norm, eps, w_off));
    return head_matmul(m, &xh, n_logits);
}

int mdl_last_rows_views(mdl_model *m, mdl_step_views *sv, int64_t n, int64_t max_blocks) {
    rt_backend *be = m->be;
    const int64_t L = m->last_rows, h = m->h_l, hd = m->cfg.head_dim, qd = h * hd;
    rt_tensor rows = rt_tensor_slice0(&m->logit_rows, 0, L);
    rt_tensor q2 = rt_tensor_2d(sv->q3.data, sv->q3.dtype, sv->q3.device, n, qd); /* f32 or the bf16 chain's */
    rt_tensor qp = rt_tensor_2d(m->att.data, RT_F32, m->att.device, L, qd);
    MDL_TRY(rt_embed(be, &qp, &q2, &rows));
    /* the residual rows (sv->x: f32, or a bf16 stream's view) through xb
     * into x's first L rows, f32 (the last layer's L rows run in f32) */
    rt_tensor xg = rt_tensor_slice0(&sv->xb, 0, L),
              x0 = rt_tensor_2d(sv->x.data, RT_F32, sv->x.device, L, m->cfg.hidden);
    MDL_TRY(rt_embed(be, &xg, &sv->x, &rows));
    MDL_TRY(rt_copy(be, &x0, &xg));
    mdl_step_views_make(m, L, L, max_blocks, sv);
    sv->qsl = rt_tensor_slice0(&m->qsl_p, 0, L + 1);
    sv->seq_lens = rt_tensor_slice0(&m->sl_p, 0, L);
    sv->bt = rt_tensor_2d(m->bt_p.data, RT_I32, m->bt_p.device, L, max_blocks);
    sv->dec_S = 0;
    int64_t s3[3] = {L, h, hd};
    sv->q3 = rt_tensor_reshape(&qp, 3, s3);
    sv->att = rt_tensor_2d(m->q.data, RT_F32, m->q.device, L, qd);
    sv->att3 = rt_tensor_reshape(&sv->att, 3, s3);
    return VC_OK;
}

int mdl_logits_head_first(mdl_model *m, const mdl_step_views *sv, int64_t n_logits, const rt_tensor *res, float eps,
                          float w_off) {
    if (n_logits <= 0) return VC_OK;
    rt_tensor a = rt_tensor_slice0(&sv->x, 0, n_logits);
    rt_tensor xh = head_x(m, n_logits, &a);
    if (!res) {
        MDL_TRY(rt_rmsnorm(m->be, &xh, &a, &m->out_norm, eps, w_off));
        return head_matmul(m, &xh, n_logits);
    }
    rt_tensor b = rt_tensor_slice0(res, 0, n_logits);
    if (xh.data != a.data) {
        MDL_TRY(rt_add_rmsnorm(m->be, &xh, &a, &b, &m->out_norm, eps, w_off));
    } else { /* f32 rows: normed in place */
        MDL_TRY(rt_add(m->be, &a, &a, &b));
        MDL_TRY(rt_rmsnorm(m->be, &a, &a, &m->out_norm, eps, w_off));
    }
    return head_matmul(m, &xh, n_logits);
}

int mdl_logits_head(mdl_model *m, const mdl_step_views *sv, int64_t n_logits, float eps, float w_off) {
    if (n_logits <= 0) return VC_OK;
    /* Gather the rows that need logits (EMBED over the f32 hidden states). */
    rt_tensor rows = rt_tensor_slice0(&m->logit_rows, 0, n_logits);
    rt_tensor xl = rt_tensor_slice0(&sv->xb, 0, n_logits);
    MDL_TRY(rt_embed(m->be, &xl, &sv->x, &rows));
    rt_tensor xh = head_x(m, n_logits, &xl);
    MDL_TRY(rt_rmsnorm(m->be, &xh, &xl, &m->out_norm, eps, w_off));
    return head_matmul(m, &xh, n_logits);
}

int mdl_logits_head_sp(mdl_model *m, const mdl_step_views *sv, const mdl_sp *sp, int64_t n_logits,
                       rt_tensor *x_full, const rt_tensor *res_full, float eps, float w_off) {
    if (n_logits <= 0) return VC_OK;
    int64_t d = m->cfg.hidden;
    rt_tensor xs = rt_tensor_slice0(x_full, sp->r0, sp->m), rs = rt_tensor_slice0(res_full, sp->r0, sp->m);
    bool gather = sv->gate.data && sv->gate.dtype == RT_F32 && 2 * n_logits * d <= sp->n * sv->gate.shape[1];
    if (!gather) { /* many rows want logits: finish the own rows, gather them all */
        MDL_TRY(rt_add(m->be, &xs, &xs, &rs));
        MDL_TRY(mdl_sp_gather(m, sp, x_full, false));
        return mdl_logits_head(m, sv, n_logits, eps, w_off);
    }
    /* Each wanted row lives on one rank: every rank gathers the wanted rows
     * of x and res it holds (zeros for the others: EMBED of a shard), and
     * one all-reduce of those 2 x [n_logits, d] f32 rows completes them
     * exactly (adding zeros). Scratch: the FFN buffer, free after the last
     * layer (as mdl_logits_head_res). */
    rt_tensor rows = rt_tensor_slice0(&m->logit_rows, 0, n_logits);
    float *scratch = (float *)sv->gate.data;
    rt_tensor ab = rt_tensor_2d(scratch, RT_F32, sv->gate.device, 2 * n_logits, d);
    rt_tensor a = rt_tensor_slice0(&ab, 0, n_logits), b = rt_tensor_slice0(&ab, n_logits, n_logits);
    MDL_TRY(rt_embed_shard(m->be, &a, &xs, &rows, sp->r0));
    MDL_TRY(rt_embed_shard(m->be, &b, &rs, &rows, sp->r0));
    MDL_TRY(mdl_tp_all_reduce(m, &ab));
    rt_tensor xl = rt_tensor_slice0(&sv->xb, 0, n_logits);
    MDL_TRY(rt_add_rmsnorm(m->be, &xl, &a, &b, &m->out_norm, eps, w_off));
    return head_matmul(m, &xl, n_logits);
}

int mdl_paged_attention(mdl_model *m, const mdl_step_views *sv, const rt_tensor *k_cache, const rt_tensor *v_cache,
                        float scale, float softcap, int32_t window) {
    rt_tensor att3 = sv->att3;
    if (!sv->dec_S)
        return rt_paged_attention(m->be, &att3, &sv->q3, k_cache, v_cache, &sv->bt, &sv->qsl, &sv->seq_lens, scale,
                                  softcap, window);
    /* Decode prefix: sequences 0..D-1 are rows 0..D-1 (qsl[s] = s there). */
    const int64_t D = sv->dec_S, S = sv->bt.shape[0], n = sv->q3.shape[0];
    rt_tensor q0 = rt_tensor_slice0(&sv->q3, 0, D), a0 = rt_tensor_slice0(&sv->att3, 0, D);
    rt_tensor bt0 = rt_tensor_slice0(&sv->bt, 0, D), qsl0 = rt_tensor_slice0(&sv->qsl, 0, D + 1);
    rt_tensor sl0 = rt_tensor_slice0(&sv->seq_lens, 0, D);
    int rc = rt_paged_attention(m->be, &a0, &q0, k_cache, v_cache, &bt0, &qsl0, &sl0, scale, softcap, window);
    if (rc < 0) return rc;
    rt_tensor q1 = rt_tensor_slice0(&sv->q3, D, n - D), a1 = rt_tensor_slice0(&sv->att3, D, n - D);
    rt_tensor bt1 = rt_tensor_slice0(&sv->bt, D, S - D), sl1 = rt_tensor_slice0(&sv->seq_lens, D, S - D);
    return rt_paged_attention(m->be, &a1, &q1, k_cache, v_cache, &bt1, &sv->qsl_t, &sl1, scale, softcap, window);
}
