#include "runtime/ops.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rt_op_fn g_kernels[RT_OP_COUNT][RT_DEV_COUNT];

static const char *g_names[RT_OP_COUNT] = {
    "embed", "matmul", "rmsnorm", "rope", "glu", "add", "scale", "softmax", "attention", "copy",
    "argmax", "kv_store", "paged_attention", "sample", "add_rmsnorm", "qk_rope_store",
    "matmul_glu", "combine", "matmul3", "matmul_add", "matmul_rope_store",
};

const char *rt_op_name(rt_op op) { return (unsigned)op < RT_OP_COUNT ? g_names[op] : "?"; }

void rt_op_register(rt_op op, rt_device dev, rt_op_fn fn) {
    VC_ASSERT((unsigned)op < RT_OP_COUNT && (unsigned)dev < RT_DEV_COUNT);
    g_kernels[op][dev] = fn;
}

bool rt_op_supported(rt_backend *be, rt_op op, const rt_op_args *a) {
    if ((unsigned)op >= RT_OP_COUNT || !g_kernels[op][be->device]) return false;
    if (be->vt->supports_op && !be->vt->supports_op(be, (int)op, a)) return false;
    return true;
}

/* Per-op profile (VLLM_OP_PROFILE=1): every op is followed by a backend
 * sync and its wall time (queue + run) is summed per op; the table goes to
 * stderr at exit. The syncs serialise host and device, so totals are an
 * upper bound of the device time; the split between ops is what matters.
 * Matmuls are also split by the token count class (1, 2-8, > 8 rows).
 * A debugging aid for one thread: tensor-parallel ranks would race on the
 * counters. */
enum { PROF_ROWS = RT_OP_COUNT + 2 };
static int g_prof = -1; /* -1 unknown, 0 off, 1 on */
static double g_prof_s[PROF_ROWS];
static long g_prof_n[PROF_ROWS];

static void prof_report(void) {
    double tot = 0;
    for (int i = 0; i < PROF_ROWS; i++) tot += g_prof_s[i];
    if (tot <= 0) return;
    fprintf(stderr, "op profile (VLLM_OP_PROFILE, synced per op): %.3f s total\n", tot);
    for (int i = 0; i < PROF_ROWS; i++) {
        if (!g_prof_n[i]) continue;
        const char *name = i < RT_OP_COUNT ? g_names[i] : i == RT_OP_COUNT ? "matmul n=2..8" : "matmul n>8";
        if (i == RT_OP_MATMUL) name = "matmul n=1";
        fprintf(stderr, "  %-16s %9ld calls %10.3f ms %5.1f%% %8.2f us/call\n", name, g_prof_n[i],
                g_prof_s[i] * 1e3, 100.0 * g_prof_s[i] / tot, g_prof_s[i] * 1e6 / (double)g_prof_n[i]);
    }
}

static bool prof_on(void) {
    if (g_prof < 0) {
        const char *e = getenv("VLLM_OP_PROFILE");
        g_prof = e && *e && strcmp(e, "0") != 0;
        if (g_prof) atexit(prof_report);
    }
    return g_prof == 1;
}

/* Host time of op calls for the step trace (VLLM_STEP_TRACE=1, per
 * thread): each op's call (its queueing on an asynchronous backend; no
 * sync added) and each backend copy, summed per op since the last
 * rt_op_trace_take, with the longest single call: an op whose call holds
 * the host for the device's time hides a synchronisation. */
enum { TRACE_COPY = RT_OP_COUNT, TRACE_ROWS };
static _Thread_local double t_host_s[TRACE_ROWS], t_max_s;
static _Thread_local long t_host_n[TRACE_ROWS];
static _Thread_local int t_max_row;

void rt_op_trace_add(int row, double s) {
    if (row < 0 || row >= TRACE_ROWS) row = TRACE_COPY;
    t_host_s[row] += s;
    t_host_n[row]++;
    if (s > t_max_s) t_max_s = s, t_max_row = row;
}

static const char *trace_name(int row) { return row == TRACE_COPY ? "copy" : g_names[row]; }

void rt_op_trace_take(char *buf, size_t n) {
    size_t at = 0;
    bool used[TRACE_ROWS] = {false};
    if (n) buf[0] = 0;
    for (int k = 0; k < 3 && at < n; k++) { /* the three largest sums (a full buffer ends the text, not the reset) */
        int best = -1;
        for (int i = 0; i < TRACE_ROWS; i++)
            if (!used[i] && t_host_n[i] && (best < 0 || t_host_s[i] > t_host_s[best])) best = i;
        if (best < 0) break;
        used[best] = true;
        int w = snprintf(buf + at, n - at, "%s%s %.3f ms / %ld", k ? ", " : "", trace_name(best), t_host_s[best] * 1e3,
                         t_host_n[best]);
        at = w < 0 ? n : at + (size_t)w;
    }
    if (at && at < n && t_max_s > 0)
        snprintf(buf + at, n - at, "; longest %s %.3f ms", trace_name(t_max_row), t_max_s * 1e3);
    memset(t_host_s, 0, sizeof t_host_s);
    memset(t_host_n, 0, sizeof t_host_n);
    t_max_s = 0.0;
}

int rt_op_exec(rt_backend *be, rt_op op, const rt_op_args *a) {
    if (!rt_op_supported(be, op, a))
        return vc_err_set(VC_ERR_UNSUPPORTED, "op %s not supported by backend %s", rt_op_name(op),
                          be->vt->name);
    if (vc_step_trace() && !prof_on()) {
        const double t0 = vc_now_s();
        const int rc = g_kernels[op][be->device](be, a);
        rt_op_trace_add((int)op, vc_now_s() - t0);
        return rc;
    }
    if (!prof_on()) return g_kernels[op][be->device](be, a);
    double t0 = vc_now_s();
    int rc = g_kernels[op][be->device](be, a);
    if (rc == 0) rc = rt_backend_sync(be);
    int row = (int)op;
    if (op == RT_OP_MATMUL) {
        int64_t n = rt_tensor_nrows(a->src[0]);
        row = n <= 1 ? RT_OP_MATMUL : n <= 8 ? RT_OP_COUNT : RT_OP_COUNT + 1;
    }
    g_prof_s[row] += vc_now_s() - t0;
    g_prof_n[row]++;
    return rc;
}

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) return vc_err_set(VC_ERR_INVALID, __VA_ARGS__);           \
    } while (0)

static int64_t last(const rt_tensor *t) { return t->shape[t->ndim - 1]; }

int rt_embed(rt_backend *be, rt_tensor *dst, const rt_tensor *table, const rt_tensor *ids) {
    CHECK(ids->dtype == RT_I32 && (dst->dtype == RT_F32 || dst->dtype == RT_BF16),
          "embed: ids must be i32, dst f32 or bf16 (a bf16 residual stream)");
    CHECK(table->ndim == 2 && last(dst) == last(table) &&
              rt_tensor_nrows(dst) == rt_tensor_nelem(ids),
          "embed: shape mismatch");
    rt_op_args a = {.dst = dst, .src = {table, ids}};
    return rt_op_exec(be, RT_OP_EMBED, &a);
}

int rt_embed_shard(rt_backend *be, rt_tensor *dst, const rt_tensor *table, const rt_tensor *ids, int64_t base) {
    CHECK(ids->dtype == RT_I32 && (dst->dtype == RT_F32 || dst->dtype == RT_BF16),
          "embed: ids must be i32, dst f32 or bf16 (a bf16 residual stream)");
    CHECK(table->ndim == 2 && last(dst) == last(table) && rt_tensor_nrows(dst) == rt_tensor_nelem(ids) && base >= 0,
          "embed: shape mismatch");
    rt_op_args a = {.dst = dst, .src = {table, ids}};
    a.p.embed.shard = 1;
    a.p.embed.base = base;
    return rt_op_exec(be, RT_OP_EMBED, &a);
}

/* MATMUL's shape and dtype checks (also MATMUL3's, per pair). */
static int matmul_check(const rt_tensor *dst, const rt_tensor *x, const rt_tensor *w, const rt_tensor *bias) {
    CHECK((x->dtype == RT_F32 || x->dtype == RT_BF16) && (dst->dtype == RT_F32 || dst->dtype == RT_BF16),
          "matmul: x and dst must be f32 or bf16 (rt_backend_act_dtype)");
    CHECK(w->ndim == 2 && last(x) == last(w) && last(dst) == w->shape[0] &&
              rt_tensor_nrows(x) == rt_tensor_nrows(dst),
          "matmul: shape mismatch (x[..,%lld] w[%lld,%lld] dst[..,%lld])", (long long)last(x),
          (long long)w->shape[0], (long long)last(w), (long long)last(dst));
    CHECK(!bias || (bias->dtype == RT_F32 && rt_tensor_nelem(bias) == w->shape[0]),
          "matmul: bias must be f32[out]");
    return VC_OK;
}

int rt_matmul(rt_backend *be, rt_tensor *dst, const rt_tensor *x, const rt_tensor *w,
              const rt_tensor *bias) {
    int rc = matmul_check(dst, x, w, bias);
    if (rc < 0) return rc;
    rt_op_args a = {.dst = dst, .src = {x, w, bias}};
    return rt_op_exec(be, RT_OP_MATMUL, &a);
}

int rt_matmul3(rt_backend *be, rt_tensor *y0, rt_tensor *y1, rt_tensor *y2, const rt_tensor *x, const rt_tensor *w0,
               const rt_tensor *w1, const rt_tensor *w2) {
    rt_tensor *ys[3] = {y0, y1, y2};
    const rt_tensor *ws[3] = {w0, w1, w2};
    for (int i = 0; i < 3; i++) {
        int rc = matmul_check(ys[i], x, ws[i], NULL);
        if (rc < 0) return rc;
    }
    rt_op_args a = {.dst = y0, .src = {x, w0, w1, w2}};
    a.p.mm3.y1 = y1;
    a.p.mm3.y2 = y2;
    if (rt_op_supported(be, RT_OP_MATMUL3, &a)) return rt_op_exec(be, RT_OP_MATMUL3, &a);
    for (int i = 0; i < 3; i++) { /* checked above: the MATMULs themselves */
        rt_op_args m = {.dst = ys[i], .src = {x, ws[i], NULL}};
        int rc = rt_op_exec(be, RT_OP_MATMUL, &m);
        if (rc < 0) return rc;
    }
    return VC_OK;
}

static int matmul_add_check(const rt_tensor *dst, const rt_tensor *x, const rt_tensor *w, const rt_tensor *bias) {
    CHECK(dst->dtype == RT_F32 || dst->dtype == RT_BF16, "matmul_add: dst must be f32 or bf16 (the residual stream)");
    return matmul_check(dst, x, w, bias);
}

bool rt_matmul_add_native(rt_backend *be, rt_tensor *dst, const rt_tensor *x, const rt_tensor *w,
                          const rt_tensor *bias) {
    if (matmul_add_check(dst, x, w, bias) < 0) {
        vc_err_clear();
        return false;
    }
    rt_op_args a = {.dst = dst, .src = {x, w, bias, NULL}};
    return rt_op_supported(be, RT_OP_MATMUL_ADD, &a);
}

int rt_matmul_add(rt_backend *be, rt_tensor *dst, const rt_tensor *x, const rt_tensor *w, const rt_tensor *bias,
                  rt_tensor *scratch) {
    int rc = matmul_add_check(dst, x, w, bias);
    if (rc < 0) return rc;
    rt_op_args a = {.dst = dst, .src = {x, w, bias, scratch}};
    if (rt_op_supported(be, RT_OP_MATMUL_ADD, &a)) return rt_op_exec(be, RT_OP_MATMUL_ADD, &a);
    CHECK(dst->dtype == RT_F32,
          "matmul_add: a bf16 dst needs the backend's own MATMUL_ADD (rt_matmul_add_native); the fallback takes f32");
    CHECK(scratch && scratch->dtype == RT_F32 && rt_tensor_is_contiguous(scratch) && scratch->ndim == dst->ndim &&
              !memcmp(scratch->shape, dst->shape, sizeof(int64_t) * (size_t)dst->ndim),
          "matmul_add: backend %s needs an f32 scratch of dst's shape", be->vt->name);
    rc = rt_matmul(be, scratch, x, w, bias);
    return rc < 0 ? rc : rt_add(be, dst, dst, scratch);
}

int rt_rmsnorm(rt_backend *be, rt_tensor *dst, const rt_tensor *x, const rt_tensor *w, float eps,
               float w_offset) {
    CHECK((x->dtype == RT_F32 || x->dtype == RT_BF16) && (dst->dtype == RT_F32 || dst->dtype == RT_BF16) &&
              w->dtype == RT_F32,
          "rmsnorm: f32 or bf16 x (a bf16 residual stream), f32 weight, f32 or bf16 dst required");
    CHECK(rt_tensor_same_shape(dst, x) && rt_tensor_nelem(w) == last(x), "rmsnorm: shape mismatch");
    rt_op_args a = {.dst = dst, .src = {x, w}};
    a.p.rmsnorm.eps = eps;
    a.p.rmsnorm.w_offset = w_offset;
    return rt_op_exec(be, RT_OP_RMSNORM, &a);
}

int rt_rope(rt_backend *be, rt_tensor *x, const rt_tensor *pos, const rt_tensor *inv_freq,
            int rot_dim, bool neox, float attn_factor) {
    CHECK(x->dtype == RT_F32 && x->ndim == 3, "rope: x must be f32 [n,h,hd]");
    CHECK(pos->dtype == RT_I32 && rt_tensor_nelem(pos) == x->shape[0], "rope: pos must be i32[n]");
    CHECK(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= x->shape[2] &&
              inv_freq->dtype == RT_F32 && rt_tensor_nelem(inv_freq) == rot_dim / 2,
          "rope: bad rot_dim/inv_freq");
    rt_op_args a = {.dst = x, .src = {pos, inv_freq}};
    a.p.rope.rot_dim = rot_dim;
    a.p.rope.neox = neox;
    a.p.rope.attn_factor = attn_factor;
    return rt_op_exec(be, RT_OP_ROPE, &a);
}

int rt_glu(rt_backend *be, rt_tensor *dst, const rt_tensor *gate, const rt_tensor *up, rt_act act) {
    CHECK(dst->dtype == RT_F32 && gate->dtype == RT_F32 && up->dtype == RT_F32, "glu: f32 required");
    CHECK(rt_tensor_same_shape(dst, gate) && rt_tensor_same_shape(dst, up), "glu: shape mismatch");
    rt_op_args a = {.dst = dst, .src = {gate, up}};
    a.p.glu.act = act;
    return rt_op_exec(be, RT_OP_GLU, &a);
}

int rt_add(rt_backend *be, rt_tensor *dst, const rt_tensor *x, const rt_tensor *y) {
    CHECK(dst->dtype == RT_F32 && x->dtype == RT_F32 && y->dtype == RT_F32, "add: f32 required");
    CHECK(rt_tensor_same_shape(dst, x) && rt_tensor_same_shape(dst, y), "add: shape mismatch");
    rt_op_args a = {.dst = dst, .src = {x, y}};
    return rt_op_exec(be, RT_OP_ADD, &a);
}

int rt_scale(rt_backend *be, rt_tensor *dst, const rt_tensor *x, float s) {
    CHECK(dst->dtype == RT_F32 && x->dtype == RT_F32 && rt_tensor_same_shape(dst, x),
          "scale: f32 tensors of one shape required");
    rt_op_args a = {.dst = dst, .src = {x}};
    a.p.scale.s = s;
    return rt_op_exec(be, RT_OP_SCALE, &a);
}

int rt_softmax(rt_backend *be, rt_tensor *dst, const rt_tensor *src) {
    CHECK(dst->dtype == RT_F32 && src->dtype == RT_F32 && rt_tensor_same_shape(dst, src),
          "softmax: f32 tensors of one shape required");
    rt_op_args a = {.dst = dst, .src = {src}};
    return rt_op_exec(be, RT_OP_SOFTMAX, &a);
}

int rt_attention(rt_backend *be, rt_tensor *dst, const rt_tensor *q, const rt_tensor *k_cache,
                 const rt_tensor *v_cache, int64_t n_past, float scale, float softcap,
                 int32_t window) {
    CHECK(q->ndim == 3 && dst->ndim == 3 && q->dtype == RT_F32 && dst->dtype == RT_F32,
          "attention: q/dst must be f32 [n,h,hd]");
    CHECK(k_cache->ndim == 3 && v_cache->ndim == 3 && k_cache->dtype == v_cache->dtype,
          "attention: caches must be [ctx,kvh,hd] of one dtype");
    int64_t h = q->shape[1], hd = q->shape[2], kvh = k_cache->shape[1];
    CHECK(kvh > 0 && h % kvh == 0 && k_cache->shape[2] == hd && v_cache->shape[1] == kvh &&
              v_cache->shape[2] == hd && rt_tensor_same_shape(dst, q),
          "attention: head shape mismatch");
    CHECK(n_past >= 0 && n_past + q->shape[0] <= k_cache->shape[0], "attention: context overflow");
    rt_op_args a = {.dst = dst, .src = {q, k_cache, v_cache}};
    a.p.attn.n_past = n_past;
    a.p.attn.scale = scale;
    a.p.attn.softcap = softcap;
    a.p.attn.window = window;
    return rt_op_exec(be, RT_OP_ATTENTION, &a);
}

int rt_copy(rt_backend *be, rt_tensor *dst, const rt_tensor *src) {
    CHECK(rt_tensor_same_shape(dst, src), "copy: shape mismatch");
    rt_op_args a = {.dst = dst, .src = {src}};
    return rt_op_exec(be, RT_OP_COPY, &a);
}

int rt_argmax(rt_backend *be, rt_tensor *dst, const rt_tensor *src) {
    CHECK(dst->dtype == RT_I32 && src->dtype == RT_F32 &&
              rt_tensor_nelem(dst) == rt_tensor_nrows(src),
          "argmax: dst i32[rows], src f32[rows, c]");
    rt_op_args a = {.dst = dst, .src = {src}};
    return rt_op_exec(be, RT_OP_ARGMAX, &a);
}

void rt_sample_row(float *f, int32_t *i, float temperature, float top_p, float min_p, int32_t top_k, float repetition,
                   float frequency, float presence, int32_t hist_off, int32_t n_prompt, int32_t n_output, double u) {
    memset(f, 0, RT_SAMPLE_NF * sizeof *f);
    memset(i, 0, RT_SAMPLE_NI * sizeof *i);
    f[RT_SAMPLE_TEMP] = temperature;
    f[RT_SAMPLE_TOP_P] = top_p;
    f[RT_SAMPLE_MIN_P] = min_p;
    f[RT_SAMPLE_LOG_MIN_P] = min_p > 0.0f ? logf(min_p) : -INFINITY;
    f[RT_SAMPLE_REP] = repetition;
    f[RT_SAMPLE_FREQ] = frequency;
    f[RT_SAMPLE_PRES] = presence;
    i[RT_SAMPLE_TOP_K] = top_k;
    i[RT_SAMPLE_HIST_OFF] = hist_off;
    i[RT_SAMPLE_N_PROMPT] = n_prompt;
    i[RT_SAMPLE_N_OUTPUT] = n_output;
    uint64_t bits;
    memcpy(&bits, &u, sizeof bits);
    i[RT_SAMPLE_U_LO] = (int32_t)(uint32_t)bits;
    i[RT_SAMPLE_U_HI] = (int32_t)(uint32_t)(bits >> 32);
}

int rt_sample(rt_backend *be, rt_tensor *dst, rt_tensor *logits, const rt_tensor *fparams, const rt_tensor *iparams,
              const rt_tensor *hist, const rt_tensor *counts) {
    CHECK(logits->dtype == RT_F32 && logits->ndim == 2 && rt_tensor_is_contiguous(logits),
          "sample: logits must be contiguous f32 [rows, V]");
    int64_t R = logits->shape[0], V = logits->shape[1];
    CHECK(dst->dtype == RT_I32 && rt_tensor_nelem(dst) == R && rt_tensor_is_contiguous(dst),
          "sample: dst must be i32 [rows]");
    CHECK(fparams->dtype == RT_F32 && fparams->ndim == 2 && fparams->shape[0] == R &&
              fparams->shape[1] == RT_SAMPLE_NF && rt_tensor_is_contiguous(fparams),
          "sample: fparams must be f32 [rows, RT_SAMPLE_NF]");
    CHECK(iparams->dtype == RT_I32 && iparams->ndim == 2 && iparams->shape[0] == R &&
              iparams->shape[1] == RT_SAMPLE_NI && rt_tensor_is_contiguous(iparams),
          "sample: iparams must be i32 [rows, RT_SAMPLE_NI]");
    CHECK(!hist || (hist->dtype == RT_I32 && hist->ndim == 1 && rt_tensor_is_contiguous(hist)),
          "sample: hist must be i32 [n]");
    CHECK(!hist || (counts && counts->dtype == RT_I32 && rt_tensor_nelem(counts) >= R * V &&
                    rt_tensor_is_contiguous(counts)),
          "sample: counts must be i32 [rows, V] when hist is given");
    CHECK(V > 0 && V < INT32_MAX, "sample: vocab out of range");
    rt_op_args a = {.dst = dst, .src = {logits, fparams, iparams, hist, counts}};
    return rt_op_exec(be, RT_OP_SAMPLE, &a);
}

int rt_combine(rt_backend *be, rt_tensor *dst, const rt_tensor *vals, const rt_tensor *pos, const rt_tensor *sel) {
    CHECK(dst->dtype == RT_I32 && vals->dtype == RT_I32 && pos->dtype == RT_I32 && sel->dtype == RT_I32,
          "combine: i32 tensors required");
    CHECK(dst->ndim == 1 && vals->ndim == 1 && pos->ndim == 1 && sel->ndim == 1 && rt_tensor_is_contiguous(dst) &&
              rt_tensor_is_contiguous(vals) && rt_tensor_is_contiguous(pos) && rt_tensor_is_contiguous(sel),
          "combine: contiguous 1-D tensors required");
    CHECK(pos->shape[0] == sel->shape[0], "combine: pos and sel differ in length");
    if (pos->shape[0] == 0) return VC_OK;
    rt_op_args a = {.dst = dst, .src = {vals, pos, sel}};
    return rt_op_exec(be, RT_OP_COMBINE, &a);
}

int rt_kv_store(rt_backend *be, rt_tensor *cache, const rt_tensor *src, const rt_tensor *slots) {
    CHECK(src->dtype == RT_F32 && src->ndim == 3 && slots->dtype == RT_I32 &&
              rt_tensor_nelem(slots) == src->shape[0],
          "kv_store: src f32 [T,kvh,hd], slots i32 [T]");
    CHECK((cache->dtype == RT_F32 || cache->dtype == RT_F16 || cache->dtype == RT_BF16) && cache->ndim >= 3 &&
              cache->shape[cache->ndim - 1] == src->shape[2] &&
              cache->shape[cache->ndim - 2] == src->shape[1] && rt_tensor_is_contiguous(cache),
          "kv_store: cache must be contiguous f32/f16/bf16 [..., kvh, hd] matching src");
    rt_op_args a = {.dst = cache, .src = {src, slots}};
    return rt_op_exec(be, RT_OP_KV_STORE, &a);
}

int rt_paged_attention(rt_backend *be, rt_tensor *dst, const rt_tensor *q, const rt_tensor *k_cache,
                       const rt_tensor *v_cache, const rt_tensor *block_tables,
                       const rt_tensor *qsl, const rt_tensor *seq_lens, float scale,
                       float softcap, int32_t window) {
    CHECK(q->ndim == 3 && (q->dtype == RT_F32 || q->dtype == RT_BF16) && dst->dtype == q->dtype &&
              rt_tensor_same_shape(dst, q),
          "paged_attention: q/dst f32 or bf16 [T,h,hd] of one dtype");
    CHECK(k_cache->ndim == 4 && v_cache->ndim == 4 && k_cache->dtype == v_cache->dtype &&
              (k_cache->dtype == RT_F32 || k_cache->dtype == RT_F16 || k_cache->dtype == RT_BF16),
          "paged_attention: caches f32/f16/bf16 [num_blocks,B,kvh,hd]");
    int64_t h = q->shape[1], hd = q->shape[2], kvh = k_cache->shape[2];
    CHECK(kvh > 0 && h % kvh == 0 && k_cache->shape[3] == hd && v_cache->shape[2] == kvh &&
              v_cache->shape[3] == hd && v_cache->shape[0] == k_cache->shape[0] &&
              v_cache->shape[1] == k_cache->shape[1],
          "paged_attention: head shape mismatch");
    CHECK(block_tables->dtype == RT_I32 && block_tables->ndim == 2 && qsl->dtype == RT_I32 &&
              seq_lens->dtype == RT_I32 && rt_tensor_nelem(seq_lens) == block_tables->shape[0] &&
              rt_tensor_nelem(qsl) == block_tables->shape[0] + 1,
          "paged_attention: block_tables i32 [S,M], qsl i32 [S+1], seq_lens i32 [S]");
    rt_op_args a = {.dst = dst, .src = {q, k_cache, v_cache, block_tables, qsl, seq_lens}};
    a.p.paged.scale = scale;
    a.p.paged.softcap = softcap;
    a.p.paged.window = window;
    return rt_op_exec(be, RT_OP_PAGED_ATTENTION, &a);
}

/* The fused ops check what their unfused sequence would, then run the fused
 * kernel, or that sequence where the backend has none. */
int rt_add_rmsnorm(rt_backend *be, rt_tensor *dst, rt_tensor *x, const rt_tensor *res, const rt_tensor *w,
                   float eps, float w_offset) {
    CHECK((dst->dtype == RT_F32 || dst->dtype == RT_BF16) && x->dtype == RT_F32 &&
              (res->dtype == RT_F32 || res->dtype == RT_BF16) && w->dtype == RT_F32,
          "add_rmsnorm: f32 x and weight, f32 or bf16 res and dst required");
    CHECK(rt_tensor_same_shape(dst, x) && rt_tensor_same_shape(res, x) && rt_tensor_nelem(w) == last(x),
          "add_rmsnorm: shape mismatch");
    CHECK(dst->data != x->data, "add_rmsnorm: dst must not be x");
    rt_op_args a = {.dst = dst, .src = {x, res, w}};
    a.p.rmsnorm.eps = eps;
    a.p.rmsnorm.w_offset = w_offset;
    if (!rt_op_supported(be, RT_OP_ADD_RMSNORM, &a)) {
        if (res->dtype != RT_F32)
            return vc_err_set(VC_ERR_UNSUPPORTED, "add_rmsnorm: backend %s has no fused op for a %s addend",
                              be->vt->name, rt_dtype_name(res->dtype));
        int rc = rt_add(be, x, x, res);
        return rc < 0 ? rc : rt_rmsnorm(be, dst, x, w, eps, w_offset);
    }
    return rt_op_exec(be, RT_OP_ADD_RMSNORM, &a);
}

static bool is_norm_w(const rt_tensor *t, int64_t hd) {
    return !t || (t->dtype == RT_F32 && rt_tensor_nelem(t) == hd);
}

/* QK_ROPE_STORE's (and MATMUL_ROPE_STORE's) parameters into a's op union */
static void rope_store_op_params(rt_op_args *a, const rt_rope_store_params *p) {
    a->p.rope_store.k_cache = p->k_cache;
    a->p.rope_store.v_cache = p->v_cache;
    a->p.rope_store.q_norm = p->q_norm;
    a->p.rope_store.k_norm = p->k_norm;
    a->p.rope_store.eps = p->eps;
    a->p.rope_store.w_offset = p->w_offset;
    a->p.rope_store.rot_dim = p->rot_dim;
    a->p.rope_store.neox = p->neox;
    a->p.rope_store.attn_factor = p->attn_factor;
}

int rt_qk_rope_store(rt_backend *be, rt_tensor *dst, const rt_tensor *q, const rt_tensor *k, const rt_tensor *v,
                     const rt_rope_store_params *p) {
    CHECK((q->dtype == RT_F32 || q->dtype == RT_BF16) && k->dtype == q->dtype && v->dtype == q->dtype &&
              dst->dtype == q->dtype && q->ndim == 3 && k->ndim == 3 && rt_tensor_same_shape(dst, q) &&
              rt_tensor_same_shape(k, v),
          "qk_rope_store: q/dst [n,h,hd], k/v [n,kvh,hd], all f32 or all bf16");
    int64_t n = q->shape[0], hd = q->shape[2];
    CHECK(k->shape[0] == n && k->shape[2] == hd, "qk_rope_store: q and k disagree on tokens/head_dim");
    CHECK(is_norm_w(p->q_norm, hd) && is_norm_w(p->k_norm, hd), "qk_rope_store: QK-norm weights f32 [hd]");
    CHECK(p->pos->dtype == RT_I32 && rt_tensor_nelem(p->pos) == n && p->slots->dtype == RT_I32 &&
              rt_tensor_nelem(p->slots) == n,
          "qk_rope_store: pos and slots must be i32[n]");
    CHECK(p->rot_dim > 0 && p->rot_dim % 2 == 0 && p->rot_dim <= hd && p->inv_freq->dtype == RT_F32 &&
              rt_tensor_nelem(p->inv_freq) == p->rot_dim / 2,
          "qk_rope_store: bad rot_dim/inv_freq");
    const rt_tensor *cs[2] = {p->k_cache, p->v_cache};
    for (int i = 0; i < 2; i++)
        CHECK((cs[i]->dtype == RT_F32 || cs[i]->dtype == RT_F16 || cs[i]->dtype == RT_BF16) && cs[i]->ndim >= 3 &&
                  cs[i]->shape[cs[i]->ndim - 1] == hd && cs[i]->shape[cs[i]->ndim - 2] == k->shape[1] &&
                  rt_tensor_is_contiguous(cs[i]),
              "qk_rope_store: caches must be contiguous f32/f16/bf16 [..., kvh, hd] matching k");
    rt_op_args a = {.dst = dst, .src = {q, k, v, p->pos, p->inv_freq, p->slots}};
    rope_store_op_params(&a, p);
    if (rt_op_supported(be, RT_OP_QK_ROPE_STORE, &a)) return rt_op_exec(be, RT_OP_QK_ROPE_STORE, &a);
    if (q->dtype != RT_F32) /* the unfused ops take f32 rows only */
        return vc_err_set(VC_ERR_UNSUPPORTED, "qk_rope_store: backend %s has no kernel for bf16 q/k/v",
                          be->vt->name);
    /* Unfused, in place on dst and on k (so this path modifies k). */
    rt_tensor kk = *k;
    int rc = dst->data != q->data ? rt_copy(be, dst, q) : VC_OK;
    if (rc == 0 && p->q_norm) rc = rt_rmsnorm(be, dst, dst, p->q_norm, p->eps, p->w_offset);
    if (rc == 0 && p->k_norm) rc = rt_rmsnorm(be, &kk, &kk, p->k_norm, p->eps, p->w_offset);
    if (rc == 0) rc = rt_rope(be, dst, p->pos, p->inv_freq, p->rot_dim, p->neox, p->attn_factor);
    if (rc == 0) rc = rt_rope(be, &kk, p->pos, p->inv_freq, p->rot_dim, p->neox, p->attn_factor);
    if (rc == 0) rc = rt_kv_store(be, p->k_cache, &kk, p->slots);
    if (rc == 0) rc = rt_kv_store(be, p->v_cache, v, p->slots);
    return rc;
}

/* [n, cols / hd, hd] view of the column block [c0, c0 + cols) of the 2-D
 * rows of buf */
static rt_tensor heads_view(const rt_tensor *buf, int64_t c0, int64_t cols, int64_t hd) {
    int64_t es = rt_dtype_info(buf->dtype)->block_bytes;
    rt_tensor t = rt_tensor_3d((char *)buf->data + c0 * es, buf->dtype, buf->device, buf->shape[0], cols / hd, hd);
    t.stride[0] = buf->stride[0];
    return t;
}

int rt_matmul_rope_store(rt_backend *be, rt_tensor *dst, const rt_tensor *x, const rt_tensor *w, rt_tensor *qkv,
                         const rt_rope_store_params *p) {
    CHECK(dst->ndim == 3 && qkv->ndim == 2 && x->ndim == 2 && w->ndim == 2 && p->k_cache->ndim >= 3 &&
              qkv->stride[1] == (int64_t)rt_dtype_info(qkv->dtype)->block_bytes,
          "matmul_rope_store: dst [n,h,hd], x [n,d], w [out,d], qkv [n,out] with contiguous rows");
    int64_t n = dst->shape[0], h = dst->shape[1], hd = dst->shape[2];
    int64_t kvh = p->k_cache->shape[p->k_cache->ndim - 2];
    CHECK(qkv->shape[0] == n && x->shape[0] == n && qkv->shape[1] == (h + 2 * kvh) * hd && w->shape[0] == qkv->shape[1],
          "matmul_rope_store: qkv must be [n, (h + 2 kvh) hd] = x . w^T");
    rt_op_args a = {.dst = dst, .src = {x, w, qkv, p->pos, p->inv_freq, p->slots}};
    rope_store_op_params(&a, p);
    if (rt_op_supported(be, RT_OP_MATMUL_ROPE_STORE, &a)) return rt_op_exec(be, RT_OP_MATMUL_ROPE_STORE, &a);
    int rc = rt_matmul(be, qkv, x, w, NULL);
    if (rc < 0) return rc;
    rt_tensor q3 = heads_view(qkv, 0, h * hd, hd), k3 = heads_view(qkv, h * hd, kvh * hd, hd),
              v3 = heads_view(qkv, (h + kvh) * hd, kvh * hd, hd);
    return rt_qk_rope_store(be, dst, &q3, &k3, &v3, p);
}

int rt_matmul_glu(rt_backend *be, rt_tensor *dst, const rt_tensor *x, const rt_tensor *w, rt_act act,
                  rt_tensor *scratch) {
    CHECK((x->dtype == RT_F32 || x->dtype == RT_BF16) && (dst->dtype == RT_F32 || dst->dtype == RT_BF16) &&
              scratch->dtype == RT_F32,
          "matmul_glu: x and dst f32 or bf16, scratch f32");
    CHECK(w->ndim == 2 && w->shape[0] % 2 == 0 && last(x) == last(w) && last(dst) == w->shape[0] / 2 &&
              rt_tensor_nrows(x) == rt_tensor_nrows(dst) && scratch->ndim == 2 &&
              scratch->shape[0] == rt_tensor_nrows(x) && scratch->shape[1] == w->shape[0] &&
              rt_tensor_is_contiguous(scratch),
          "matmul_glu: shape mismatch (x[..,%lld] w[%lld,%lld] dst[..,%lld], scratch [n, out] contiguous)",
          (long long)last(x), (long long)w->shape[0], (long long)last(w), (long long)last(dst));
    CHECK(act == RT_ACT_SILU || act == RT_ACT_GELU_TANH, "matmul_glu: unknown activation %d", (int)act);
    rt_op_args a = {.dst = dst, .src = {x, w, scratch}};
    a.p.glu.act = act;
    if (rt_op_supported(be, RT_OP_MATMUL_GLU, &a)) return rt_op_exec(be, RT_OP_MATMUL_GLU, &a);
    if (dst->dtype != RT_F32)
        return vc_err_set(VC_ERR_UNSUPPORTED, "matmul_glu: bf16 dst not supported by backend %s", be->vt->name);
    int rc = rt_matmul(be, scratch, x, w, NULL);
    if (rc < 0) return rc;
    int64_t n = scratch->shape[0], f = last(dst);
    rt_tensor g = rt_tensor_2d(scratch->data, RT_F32, scratch->device, n, f), u = g;
    u.data = (float *)scratch->data + f;
    g.stride[0] = u.stride[0] = 2 * f * (int64_t)sizeof(float);
    rt_tensor d2 = *dst;
    if (dst->ndim != 2) { /* a [n, f] view of dst's rows (contiguous rows) */
        if (!rt_tensor_is_contiguous(dst)) return vc_err_set(VC_ERR_UNSUPPORTED, "matmul_glu: dst must be 2-D or contiguous");
        d2 = rt_tensor_2d(dst->data, RT_F32, dst->device, n, f);
    }
    return rt_glu(be, &d2, &g, &u, act);
}
