#include "model/model_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const mdl_arch_impl *g_archs[] = {&mdl_arch_llama};

/* Family keys handled by each arch impl (a family may have several config names). */
static const struct {
    const char *arch;
    const mdl_arch_impl *impl;
} g_family_map[] = {
    {"llama", &mdl_arch_llama},
    {"mistral", &mdl_arch_llama},
    {"qwen2", &mdl_arch_llama},
    {"qwen3", &mdl_arch_llama},
};

mdl_params mdl_params_default(void) {
    mdl_params p = {.max_batch = 512, .upcast_weights = false};
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

static int own_tensor(mdl_model *m, rt_tensor *t, rt_dtype dt, int ndim, const int64_t *shape) {
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

int mdl_bind(mdl_model *m, rt_tensor *t, const char *canon, int ndim, const int64_t *shape, bool required) {
    memset(t, 0, sizeof *t);
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
    if (w.dtype < 0)
        return vc_err_set(VC_ERR_UNSUPPORTED, "%s: tensor '%s' has an unsupported dtype", path, w.name);
    rt_tensor host = rt_tensor_make((void *)w.data, (rt_dtype)w.dtype, RT_DEV_CPU, ndim, shape);
    if (rt_tensor_nbytes(&host) != w.nbytes)
        return vc_err_set(VC_ERR_FORMAT, "%s: tensor '%s' holds %zu bytes, expected %zu", path, w.name,
                          w.nbytes, rt_tensor_nbytes(&host));
    if ((ndim == 1 || m->upcast_weights) && w.dtype != RT_F32) {
        /* Norm weights and biases are used as f32 by every op. */
        if (own_tensor(m, t, RT_F32, ndim, shape) < 0) return VC_ERR_OOM;
        if (m->be->device == RT_DEV_CPU) return rt_copy(m->be, t, &host);
        rt_tensor tmp = rt_tensor_make(malloc(rt_tensor_nbytes(t)), RT_F32, RT_DEV_CPU, ndim, shape);
        if (!tmp.data) return vc_err_set(VC_ERR_OOM, "out of memory");
        rt_backend *cpu = rt_backend_create(RT_DEV_CPU, NULL);
        int rc = cpu ? rt_copy(cpu, &tmp, &host) : VC_ERR_RUNTIME;
        rt_backend_free(cpu);
        if (rc == 0) rc = rt_tensor_copy_bytes(m->be, t, &tmp);
        free(tmp.data);
        return rc;
    }
    if (m->be->device == RT_DEV_CPU) { /* zero-copy from the mmap */
        *t = host;
        return VC_OK;
    }
    if (own_tensor(m, t, host.dtype, ndim, shape) < 0) return VC_ERR_OOM;
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
    int rc = own_tensor(m, &m->inv_freq, RT_F32, 1, shape);
    if (rc == 0) {
        rt_tensor host = rt_tensor_1d(f, RT_F32, RT_DEV_CPU, half);
        rc = rt_tensor_copy_bytes(m->be, &m->inv_freq, &host);
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
        int64_t cols;
    } bufs[] = {
        {&m->ids, RT_I32, 0},
        {&m->pos, RT_I32, 0},
        {&m->x, RT_F32, c->hidden},
        {&m->xb, RT_F32, c->hidden},
        {&m->q, RT_F32, c->n_heads * c->head_dim},
        {&m->k, RT_F32, c->n_kv_heads * c->head_dim},
        {&m->v, RT_F32, c->n_kv_heads * c->head_dim},
        {&m->att, RT_F32, c->n_heads * c->head_dim},
        {&m->gate, RT_F32, c->intermediate},
        {&m->up, RT_F32, c->intermediate},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        int64_t s2[2] = {B, bufs[i].cols};
        int rc = bufs[i].cols ? own_tensor(m, bufs[i].t, bufs[i].dt, 2, s2) : own_tensor(m, bufs[i].t, bufs[i].dt, 1, s2);
        if (rc < 0) return rc;
    }
    return VC_OK;
}

mdl_model *mdl_load(const char *path, rt_backend *be, const mdl_params *p) {
    mdl_model *m = calloc(1, sizeof *m);
    if (!m) {
        vc_err_set(VC_ERR_OOM, "out of memory");
        return NULL;
    }
    mdl_params def = mdl_params_default();
    if (!p) p = &def;
    m->be = be;
    m->max_batch = p->max_batch > 0 ? p->max_batch : 512;
    m->upcast_weights = p->upcast_weights;
    m->src = mdl_wsrc_open(path, &m->cfg);
    if (!m->src) goto fail;
    for (size_t i = 0; i < sizeof g_family_map / sizeof g_family_map[0]; i++)
        if (!strcmp(m->cfg.arch, g_family_map[i].arch)) m->arch = g_family_map[i].impl;
    if (!m->arch) {
        vc_err_set(VC_ERR_UNSUPPORTED, "%s: no implementation for architecture '%s'", path, m->cfg.arch);
        goto fail;
    }
    (void)g_archs;
    if (m->arch->load(m) < 0 || make_inv_freq(m) < 0 || alloc_activations(m) < 0) goto fail;
    VC_INFO("loaded %s: %s, %lld layers, hidden %lld, heads %lld/%lld, vocab %lld", path, m->cfg.arch,
            (long long)m->cfg.n_layers, (long long)m->cfg.hidden, (long long)m->cfg.n_heads,
            (long long)m->cfg.n_kv_heads, (long long)m->cfg.vocab);
    return m;
fail:
    mdl_free(m);
    return NULL;
}

void mdl_free(mdl_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) rt_backend_free_mem(m->be, m->owned[i]);
    free(m->owned);
    if (m->logits.data) rt_backend_free_mem(m->be, m->logits.data);
    free(m->layers);
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

mdl_seq *mdl_seq_create(mdl_model *m, int64_t max_ctx) {
    if (max_ctx <= 0 || max_ctx > m->cfg.max_pos) max_ctx = m->cfg.max_pos;
    mdl_seq *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->m = m;
    s->max_ctx = max_ctx;
    s->k_cache = calloc((size_t)m->cfg.n_layers, sizeof(rt_tensor));
    s->v_cache = calloc((size_t)m->cfg.n_layers, sizeof(rt_tensor));
    if (!s->k_cache || !s->v_cache) goto oom;
    int64_t shape[3] = {max_ctx, m->cfg.n_kv_heads, m->cfg.head_dim};
    for (int64_t l = 0; l < m->cfg.n_layers; l++) {
        s->k_cache[l] = rt_tensor_alloc(m->be, RT_F32, 3, shape);
        s->v_cache[l] = rt_tensor_alloc(m->be, RT_F32, 3, shape);
        if (!s->k_cache[l].data || !s->v_cache[l].data) goto oom;
    }
    return s;
oom:
    vc_err_set(VC_ERR_OOM, "out of memory allocating the KV cache for %lld positions", (long long)max_ctx);
    mdl_seq_free(s);
    return NULL;
}

void mdl_seq_free(mdl_seq *s) {
    if (!s) return;
    for (int64_t l = 0; s->k_cache && l < s->m->cfg.n_layers; l++) {
        rt_backend_free_mem(s->m->be, s->k_cache[l].data);
        rt_backend_free_mem(s->m->be, s->v_cache[l].data);
    }
    free(s->k_cache);
    free(s->v_cache);
    free(s);
}

int64_t mdl_seq_len(const mdl_seq *s) { return s->len; }
void mdl_seq_reset(mdl_seq *s) { s->len = 0; }

static int ensure_logits(mdl_model *m, int64_t rows) {
    if (m->logits_rows >= rows) return VC_OK;
    if (m->logits.data) rt_backend_free_mem(m->be, m->logits.data);
    int64_t shape[2] = {rows, m->cfg.vocab};
    m->logits = rt_tensor_alloc(m->be, RT_F32, 2, shape);
    if (!m->logits.data) {
        m->logits_rows = 0;
        return vc_err_set(VC_ERR_OOM, "out of memory for logits");
    }
    m->logits_rows = rows;
    return VC_OK;
}

int mdl_forward(mdl_model *m, mdl_seq *s, const int32_t *ids, int64_t n, float *logits, bool all_logits) {
    if (n <= 0) return vc_err_set(VC_ERR_INVALID, "forward: no tokens");
    if (s->len + n > s->max_ctx)
        return vc_err_set(VC_ERR_INVALID, "context overflow: %lld + %lld tokens > %lld", (long long)s->len,
                          (long long)n, (long long)s->max_ctx);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab)
            return vc_err_set(VC_ERR_INVALID, "token id %d out of range [0, %lld)", ids[i], (long long)m->cfg.vocab);
    int32_t *pos = malloc((size_t)m->max_batch * sizeof *pos);
    if (!pos) return vc_err_set(VC_ERR_OOM, "out of memory");
    int rc = VC_OK;
    for (int64_t done = 0; done < n && rc == VC_OK;) {
        int64_t c = n - done < m->max_batch ? n - done : m->max_batch;
        bool last_chunk = done + c == n;
        for (int64_t i = 0; i < c; i++) pos[i] = (int32_t)(s->len + i);
        rt_tensor hid = rt_tensor_1d((void *)(ids + done), RT_I32, RT_DEV_CPU, c);
        rt_tensor hpos = rt_tensor_1d(pos, RT_I32, RT_DEV_CPU, c);
        rt_tensor did = rt_tensor_slice0(&m->ids, 0, c), dpos = rt_tensor_slice0(&m->pos, 0, c);
        rc = rt_tensor_copy_bytes(m->be, &did, &hid);
        if (rc == 0) rc = rt_tensor_copy_bytes(m->be, &dpos, &hpos);
        int64_t rows = all_logits ? c : 1;
        if (rc == 0 && (all_logits || last_chunk)) rc = ensure_logits(m, rows);
        if (rc == 0) rc = m->arch->forward(m, s, c, all_logits ? c : last_chunk ? 1 : 0);
        if (rc == 0 && (all_logits || last_chunk)) {
            float *dst = all_logits ? logits + done * m->cfg.vocab : logits;
            rt_tensor hl = rt_tensor_2d(dst, RT_F32, RT_DEV_CPU, rows, m->cfg.vocab);
            rt_tensor dl = rt_tensor_slice0(&m->logits, 0, rows);
            rc = rt_tensor_copy_bytes(m->be, &hl, &dl);
        }
        if (rc == 0) s->len += c;
        done += c;
    }
    free(pos);
    return rc;
}
