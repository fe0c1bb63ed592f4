/* The megakernel lab (cuda_mk.cu): a chain of dependent bf16 GEMV phases
 * in one persistent kernel with grid barriers and a producer warp that
 * streams the weights ahead.
 *   test_mk: decode layers without attention (RMSNorm + QKV, Wo +
 *   residual over QKV's first values, RMSNorm + gate|up GLU, down +
 *   residual): one Llama-3.1-8B-shaped layer (QKV 6144 x 4096, Wo 4096 x
 *   4096, gate|up 28672 x 4096: one row pair a chunk, down 4096 x 14336:
 *   rows longer than a ring stage, cut into column ranges) and two
 *   Qwen3-0.6B-shaped ones (4096 x 1024, 1024 x 2048, 6144 x 1024, 1024 x
 *   3072: several rows a chunk), distinct random weights and norm
 *   weights; every phase's output against a double reference on the CPU
 *   over that phase's own inputs (the kernel's earlier outputs): 1e-5
 *   normalised (f32 sums in another order). Run twice: the second run
 *   must agree with the first to 1e-6 (the shared-atomic order of a
 *   row's warp sums varies).
 *   test_mk_speed (VLLM_CUDA_SPEED=0 skips it): 28 0.6B-shaped layers and
 *   8 8B-shaped ones (distinct device copies of one random matrix per
 *   shape, so the L2 holds none), one launch a chain vs the engine's
 *   decode-layer kernels without rope and attention (ADD_RMSNORM, the
 *   GEMVs) recorded in a CUDA graph, GB/s of weights and the fraction of
 *   the device-to-device copy rate measured here; then whole layers with
 *   the attention phase at position 640 (28 0.6B-shaped, 32 8B-shaped:
 *   a decode step's layers), us a step, to set beside the engine's
 *   `vllm run` decode step (report only). VLLM_MK_SPEED=chain: the layers
 *   without attention only; =latency: 28 tiny layers (~1.4 MB each), whose
 *   time is the phases' latency, beside the engine's kernels. The kernel
 *   variant and its settings come from VLLM_MK_MODE / VLLM_MK_SB /
 *   VLLM_MK_PF (cuda_mk.cu, docs/CONFIG.md).
 * Skips without a device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/clock.h"
#include "base/err.h"
#include "runtime/ops.h"

#include "backends/cuda/cuda_mk.h"
#include "cuda_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x3C6EF372FE94F82Bull;
static float rnd(void) { return cuda_test_rnd(&g_rng); } /* [-1, 1) */

#define MK_EPS 1e-6f

typedef struct {
    int64_t rows, cols;
    int glu;
} mk_shape;

/* a decode layer's GEMVs: QKV, Wo, gate|up (GLU), down */
static const mk_shape L8B[4] = {{6144, 4096, 0}, {4096, 4096, 0}, {28672, 4096, 1}, {4096, 14336, 0}};
static const mk_shape L06[4] = {{4096, 1024, 0}, {1024, 2048, 0}, {6144, 1024, 1}, {1024, 3072, 0}};
/* tiny (~1.4 MB a layer): the chain's time is its phases' latency */
static const mk_shape LT[4] = {{1024, 256, 0}, {256, 256, 0}, {1024, 256, 1}, {256, 512, 0}};

static int64_t outs_of(const mk_shape *s) { return s->glu ? s->rows / 2 : s->rows; }

/* the lab's A/B settings as set (cuda_mk.cu reads them at plan creation) */
static const char *mk_setting(void) {
    static char b[96];
    const char *m = getenv("VLLM_MK_MODE"), *sb = getenv("VLLM_MK_SB");
    snprintf(b, sizeof b, "mode %s stage %s", m && *m ? m : "0", sb && *sb ? sb : "16384");
    return b;
}

/* bf16 values uniform in +-sqrt(3 / cols) (unit variance of the outputs) */
static uint16_t *rand_w(const mk_shape *s) {
    const int64_t n = s->rows * s->cols;
    uint16_t *w = xmalloc((size_t)n * 2);
    const float a = sqrtf(3.0f / (float)s->cols);
    for (int64_t i = 0; i < n; i++) w[i] = rt_f32_to_bf16(a * rnd());
    return w;
}

/* The phases of `layers` decode layers without attention, 4l + j: 0 QKV
 * over rmsnorm(residual), 1 Wo over QKV's first Wo-cols values (the
 * attention output's stand-in) + residual, 2 gate|up over rmsnorm(that),
 * 3 down + that residual. The residual enters as x. w[i] and nw[i]
 * (NULL: not normalised) per phase. */
static void mk_wire(int layers, const rt_tensor *w, const rt_tensor *const *nw, const int *glu, cuda_mk_desc *d) {
    for (int l = 0; l < layers; l++) {
        const int b = 4 * l, r = l == 0 ? -1 : b - 1;
        const int in[4] = {r, b, b + 1, b + 2}, res[4] = {-2, r, -2, b + 1};
        for (int j = 0; j < 4; j++) {
            cuda_mk_desc e = {.kind = CUDA_MK_GEMV, .in_from = in[j], .w = &w[b + j], .glu = glu[b + j],
                              .norm_w = nw[b + j], .res_from = res[j]};
            d[b + j] = e;
        }
    }
}

/* Phase i's output against a double reference over its own inputs (the
 * kernel's earlier outputs o): v = in (normalised by nw), W v (+ res) or
 * the GLU. Returns the normalised error. */
static double gemv_ref_err(const cuda_mk_desc *e, const uint16_t *hw, const float *nw, const float *in, const float *res,
                           const float *got) {
    const int64_t R = e->w->shape[0], C = e->w->shape[1], no = e->glu ? R / 2 : R;
    double ss = 0.0;
    for (int64_t k = 0; k < C; k++) ss += (double)in[k] * in[k];
    const double sc = nw ? 1.0 / sqrt(ss / (double)C + (double)MK_EPS) : 1.0;
    double *v = xmalloc((size_t)C * 8), *full = xmalloc((size_t)R * 8);
    float *ref = xmalloc((size_t)no * 4);
    for (int64_t k = 0; k < C; k++) v[k] = in[k] * sc * (nw ? nw[k] : 1.0);
    for (int64_t r = 0; r < R; r++) {
        double a = 0.0;
        for (int64_t k = 0; k < C; k++) a += (double)rt_bf16_to_f32(hw[r * C + k]) * v[k];
        full[r] = a;
    }
    for (int64_t r = 0; r < no; r++)
        ref[r] = e->glu ? (float)(full[r] / (1.0 + exp(-full[r])) * full[no + r]) : (float)(full[r] + (res ? (double)res[r] : 0.0));
    const double err = nerr(got, ref, no);
    free(v), free(full), free(ref);
    return err;
}

/* `layers` layers of shape ls with distinct random weights: every phase
 * against a double reference over its own inputs (the kernel's earlier
 * outputs), then a second run against the first. */
static void mk_check(const char *name, const mk_shape *ls, int layers) {
    const int n = 4 * layers;
    const int64_t hid = ls[0].cols;
    uint16_t **hw = xmalloc((size_t)n * sizeof *hw);
    rt_tensor *dw = xmalloc((size_t)n * sizeof *dw), *dn = xmalloc((size_t)n * sizeof *dn);
    const rt_tensor **np = xmalloc((size_t)n * sizeof *np);
    int *glu = xmalloc((size_t)n * sizeof(int));
    float **hn = xmalloc((size_t)n * sizeof *hn);
    int64_t total = 0, *off = xmalloc((size_t)n * 8);
    cuda_mk_desc *d = xmalloc((size_t)n * sizeof *d);
    for (int i = 0; i < n; i++) {
        const mk_shape *sh = &ls[i % 4];
        hw[i] = rand_w(sh);
        int64_t s2[2] = {sh->rows, sh->cols}, s1[1] = {sh->cols};
        dw[i] = up(hw[i], RT_BF16, 2, s2);
        hn[i] = xmalloc((size_t)sh->cols * 4);
        for (int64_t k = 0; k < sh->cols; k++) hn[i][k] = 1.0f + 0.25f * rnd();
        dn[i] = up(hn[i], RT_F32, 1, s1);
        np[i] = i % 2 == 0 ? &dn[i] : NULL; /* QKV and gate|up take the norm */
        glu[i] = sh->glu;
        off[i] = total;
        total += outs_of(sh);
    }
    mk_wire(layers, dw, np, glu, d);
    float *x = xmalloc((size_t)hid * 4);
    for (int64_t k = 0; k < hid; k++) x[k] = 2.0f * rnd();
    int64_t sx[1] = {hid}, so[1] = {total};
    rt_tensor dx = up(x, RT_F32, 1, sx), dout = rt_tensor_alloc(g_gpu, RT_F32, 1, so);
    assert_non_null(dout.data);
    cuda_mk_plan *p = cuda_mk_plan_create(g_gpu, n, d, MK_EPS, &dx, &dout);
    if (!p) fail_msg("mk plan: %s", vc_err_msg());
    float *o1 = xmalloc((size_t)total * 4), *o2 = xmalloc((size_t)total * 4);
    assert_int_equal(cuda_mk_plan_run(p), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    down(o1, &dout);
    assert_int_equal(cuda_mk_plan_run(p), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    down(o2, &dout);
    for (int i = 0; i < n; i++) {
        const cuda_mk_desc *e = &d[i];
        const float *in = e->in_from < 0 ? x : o1 + off[e->in_from];
        const float *res = e->res_from == -2 ? NULL : e->res_from == -1 ? x : o1 + off[e->res_from];
        const int64_t no = outs_of(&ls[i % 4]);
        const double err = gemv_ref_err(e, hw[i], np[i] ? hn[i] : NULL, in, res, o1 + off[i]),
                     e2 = nerr(o2 + off[i], o1 + off[i], no);
        print_message("mk %s phase %2d [%5lld x %5lld]%s%s%s: vs double %.2e, second run vs first %.2e\n", name, i,
                      (long long)ls[i % 4].rows, (long long)ls[i % 4].cols, glu[i] ? " glu" : "", np[i] ? " normed" : "",
                      res ? " +res" : "", err, e2);
        assert_true(err <= 1e-5);
        assert_true(e2 <= 1e-6);
    }
    cuda_mk_plan_free(p);
    for (int i = 0; i < n; i++) drop(&dw[i]), drop(&dn[i]), free(hw[i]), free(hn[i]);
    drop(&dx), drop(&dout);
    free(hw), free(dw), free(dn), free(np), free(glu), free(hn), free(off), free(d), free(x), free(o1), free(o2);
}

static void test_mk(void **st) {
    (void)st;
    NEED_GPU();
    mk_check("8B-shaped", L8B, 1);  /* gate|up rows a chunk each, down rows cut into column ranges */
    mk_check("0.6B-shaped", L06, 2); /* several rows a chunk; residual and norm across layers */
}

/* The attention phase between QKV and Wo (Qwen3 style: q / k RMSNorm,
 * neox rope, GQA): RMSNorm + QKV, ATTN over a paged bf16 cache holding
 * random keys at positions < pos (blocks in a shuffled order), Wo +
 * residual. Checked: the new k, v the kernel stored at pos (against a
 * double computation, within one bf16 rounding), the attention output
 * against a double softmax over the cache as the kernel left it (so the
 * new row is the kernel's own rounding), Wo against double. */
static void mk_attn_case(int64_t hid, int64_t h, int64_t kvh, int64_t B, int64_t pos, int splits) {
    const int64_t hd = 128, qkv_rows = (h + 2 * kvh) * hd, nblk = (pos + 1 + B - 1) / B + 3;
    const mk_shape sq = {qkv_rows, hid, 0}, so_ = {hid, h * hd, 0};
    uint16_t *wq = rand_w(&sq), *wo = rand_w(&so_);
    float *an = xmalloc((size_t)hid * 4), *qn = xmalloc(hd * 4), *kn = xmalloc(hd * 4), *inv = xmalloc(64 * 4);
    for (int64_t k = 0; k < hid; k++) an[k] = 1.0f + 0.25f * rnd();
    for (int64_t k = 0; k < hd; k++) qn[k] = 1.0f + 0.25f * rnd(), kn[k] = 1.0f + 0.25f * rnd();
    for (int k = 0; k < 64; k++) inv[k] = powf(1e6f, -2.0f * (float)k / 128.0f);
    const int64_t cn = nblk * B * kvh * hd;
    uint16_t *kc = xmalloc((size_t)cn * 2), *vc = xmalloc((size_t)cn * 2);
    for (int64_t i = 0; i < cn; i++) kc[i] = rt_f32_to_bf16(2.0f * rnd()), vc[i] = rt_f32_to_bf16(rnd());
    int32_t *bt = xmalloc((size_t)nblk * 4);
    for (int64_t i = 0; i < nblk; i++) bt[i] = (int32_t)i;
    for (int64_t i = nblk - 1; i > 0; i--) { /* shuffled blocks */
        const int64_t j = (int64_t)((rnd() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
        const int32_t t = bt[i];
        bt[i] = bt[j], bt[j] = t;
    }
    int64_t s2q[2] = {qkv_rows, hid}, s2o[2] = {hid, h * hd}, s1h[1] = {hid}, s1d[1] = {hd}, s164[1] = {64},
            s4[4] = {nblk, B, kvh, hd}, sbt[1] = {nblk};
    rt_tensor dwq = up(wq, RT_BF16, 2, s2q), dwo = up(wo, RT_BF16, 2, s2o), dan = up(an, RT_F32, 1, s1h),
              dqn = up(qn, RT_F32, 1, s1d), dkn = up(kn, RT_F32, 1, s1d), dinv = up(inv, RT_F32, 1, s164),
              dkc = up(kc, RT_BF16, 4, s4), dvc = up(vc, RT_BF16, 4, s4), dbt = up(bt, RT_I32, 1, sbt);
    float *x = xmalloc((size_t)hid * 4);
    for (int64_t k = 0; k < hid; k++) x[k] = 2.0f * rnd();
    const int64_t total = qkv_rows + h * hd + hid;
    int64_t sx[1] = {hid}, sot[1] = {total};
    rt_tensor dx = up(x, RT_F32, 1, sx), dout = rt_tensor_alloc(g_gpu, RT_F32, 1, sot);
    assert_non_null(dout.data);
    const float scale = 1.0f / sqrtf((float)hd);
    cuda_mk_desc d[3] = {
        {.kind = CUDA_MK_GEMV, .in_from = -1, .w = &dwq, .norm_w = &dan, .res_from = -2},
        {.kind = CUDA_MK_ATTN, .in_from = 0, .k_cache = &dkc, .v_cache = &dvc, .block_table = &dbt, .inv_freq = &dinv,
         .q_norm = &dqn, .k_norm = &dkn, .n_heads = h, .n_kv_heads = kvh, .pos = pos, .scale = scale, .splits = splits},
        {.kind = CUDA_MK_GEMV, .in_from = 1, .w = &dwo, .res_from = -1},
    };
    cuda_mk_plan *p = cuda_mk_plan_create(g_gpu, 3, d, MK_EPS, &dx, &dout);
    if (!p) fail_msg("mk plan (attention): %s", vc_err_msg());
    assert_int_equal(cuda_mk_plan_run(p), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    float *o = xmalloc((size_t)total * 4);
    uint16_t *kc2 = xmalloc((size_t)cn * 2), *vc2 = xmalloc((size_t)cn * 2);
    down(o, &dout);
    down(kc2, &dkc);
    down(vc2, &dvc);
    const float *qkv = o, *att = o + qkv_rows, *y = o + qkv_rows + h * hd;
    const double e_qkv = gemv_ref_err(&d[0], wq, an, x, NULL, qkv);
    /* q, k normalised and rotated in double */
    const int64_t G = h / kvh;
    double *qr = xmalloc((size_t)(h * hd) * 8), *kr = xmalloc((size_t)(kvh * hd) * 8);
    for (int64_t j = 0; j < h + kvh; j++) {
        const float *src = qkv + j * hd, *nw = j < h ? qn : kn;
        double *dst = j < h ? qr + j * hd : kr + (j - h) * hd, ss = 0.0, t[128];
        for (int64_t k = 0; k < hd; k++) ss += (double)src[k] * src[k];
        const double sc = 1.0 / sqrt(ss / 128.0 + (double)MK_EPS);
        for (int64_t k = 0; k < hd; k++) t[k] = src[k] * sc * nw[k];
        for (int64_t k = 0; k < hd; k++) {
            const double a = (double)((float)pos * inv[k & 63]), c = cos(a), sn = sin(a);
            dst[k] = k < 64 ? t[k] * c - t[k + 64] * sn : t[k] * c + t[k - 64] * sn;
        }
    }
    /* the stored row at pos: k rotated, v as is, one bf16 rounding */
    float *kst = xmalloc((size_t)(kvh * hd) * 4), *kref = xmalloc((size_t)(kvh * hd) * 4),
          *vst = xmalloc((size_t)(kvh * hd) * 4), *vref = xmalloc((size_t)(kvh * hd) * 4);
    const int64_t prow = ((int64_t)bt[pos / B] * B + pos % B) * kvh * hd;
    for (int64_t i = 0; i < kvh * hd; i++) {
        kst[i] = rt_bf16_to_f32(kc2[prow + i]), kref[i] = (float)kr[i];
        vst[i] = rt_bf16_to_f32(vc2[prow + i]), vref[i] = qkv[(h + kvh) * hd + i];
    }
    const double e_k = nerr(kst, kref, kvh * hd), e_v = nerr(vst, vref, kvh * hd);
    /* attention in double over the cache as the kernel left it */
    float *aref = xmalloc((size_t)(h * hd) * 4);
    double *sc = xmalloc((size_t)(pos + 1) * 8);
    for (int64_t hq = 0; hq < h; hq++) {
        const int64_t g = hq / G;
        double mx = -INFINITY;
        for (int64_t t = 0; t <= pos; t++) {
            const int64_t r = ((int64_t)bt[t / B] * B + t % B) * kvh * hd + g * hd;
            double a = 0.0;
            for (int64_t k = 0; k < hd; k++) a += qr[hq * hd + k] * rt_bf16_to_f32(kc2[r + k]);
            sc[t] = a * scale;
            if (sc[t] > mx) mx = sc[t];
        }
        double l = 0.0, acc[128] = {0};
        for (int64_t t = 0; t <= pos; t++) {
            const int64_t r = ((int64_t)bt[t / B] * B + t % B) * kvh * hd + g * hd;
            const double pe = exp(sc[t] - mx);
            l += pe;
            for (int64_t k = 0; k < hd; k++) acc[k] += pe * rt_bf16_to_f32(vc2[r + k]);
        }
        for (int64_t k = 0; k < hd; k++) aref[hq * hd + k] = (float)(acc[k] / l);
    }
    const double e_att = nerr(att, aref, h * hd);
    const double e_wo = gemv_ref_err(&d[2], wo, NULL, att, x, y);
    print_message("mk attention h=%lld/%lld B=%lld pos=%lld splits=%d: QKV %.2e, stored k %.2e v %.2e, attention "
                  "%.2e, Wo %.2e\n",
                  (long long)h, (long long)kvh, (long long)B, (long long)pos, splits, e_qkv, e_k, e_v, e_att, e_wo);
    assert_true(e_qkv <= 1e-5);
    assert_true(e_k <= 1e-2 && e_v <= 1e-2); /* one bf16 rounding (2^-8 relative) */
    assert_true(e_att <= 1e-4);
    assert_true(e_wo <= 1e-5);
    cuda_mk_plan_free(p);
    drop(&dwq), drop(&dwo), drop(&dan), drop(&dqn), drop(&dkn), drop(&dinv), drop(&dkc), drop(&dvc), drop(&dbt);
    drop(&dx), drop(&dout);
    free(wq), free(wo), free(an), free(qn), free(kn), free(inv), free(kc), free(vc), free(bt), free(x), free(o);
    free(kc2), free(vc2), free(qr), free(kr), free(kst), free(kref), free(vst), free(vref), free(aref), free(sc);
}

static void test_mk_attn(void **st) {
    (void)st;
    NEED_GPU();
    mk_attn_case(1024, 16, 8, 16, 700, 4);  /* Qwen3-0.6B heads, G = 2 */
    mk_attn_case(4096, 32, 8, 32, 1500, 16); /* Llama-8B heads, G = 4, 128 of the 132 CTAs */
    mk_attn_case(1024, 16, 8, 16, 0, 1);     /* the first token: the key range is the new row alone */
}

/* GB/s of a device-to-device copy (bytes read + written) of 1 GiB */
static double d2d_gbps(void) {
    int64_t s[1] = {(int64_t)1 << 29};
    rt_tensor a = rt_tensor_alloc(g_gpu, RT_BF16, 1, s), b = rt_tensor_alloc(g_gpu, RT_BF16, 1, s);
    assert_non_null(a.data);
    assert_non_null(b.data);
    assert_int_equal(rt_tensor_copy_bytes(g_gpu, &b, &a), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    const double t0 = vc_now_s();
    for (int k = 0; k < 10; k++) assert_int_equal(rt_tensor_copy_bytes(g_gpu, &b, &a), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    const double gbps = 2.0 * 2.0 * (double)s[0] * 10 / (vc_now_s() - t0) / 1e9;
    drop(&a), drop(&b);
    return gbps;
}

/* `layers` layers (distinct device copies of one random matrix per shape):
 * one persistent kernel vs the engine's unfused decode-layer sequence
 * without rope and attention (RMSNORM or ADD_RMSNORM, MATMUL QKV, MATMUL
 * Wo, ADD_RMSNORM, MATMUL_GLU, MATMUL down) recorded in a CUDA graph. */
static void mk_speed_chain(const char *name, const mk_shape *ls, int layers, double d2d) {
    const int n = 4 * layers;
    const int64_t hid = ls[0].cols;
    rt_tensor *dw = xmalloc((size_t)n * sizeof *dw);
    const rt_tensor **np = xmalloc((size_t)n * sizeof *np);
    int *glu = xmalloc((size_t)n * sizeof(int));
    cuda_mk_desc *d = xmalloc((size_t)n * sizeof *d);
    int64_t total = 0, bytes = 0;
    for (int j = 0; j < 4; j++) {
        uint16_t *h = rand_w(&ls[j]);
        int64_t s2[2] = {ls[j].rows, ls[j].cols};
        for (int l = 0; l < layers; l++) dw[4 * l + j] = up(h, RT_BF16, 2, s2);
        free(h);
    }
    float *nh = xmalloc((size_t)hid * 4), *x = xmalloc((size_t)hid * 4);
    for (int64_t k = 0; k < hid; k++) nh[k] = 1.0f + 0.25f * rnd(), x[k] = 2.0f * rnd();
    int64_t s1[1] = {hid};
    rt_tensor dn = up(nh, RT_F32, 1, s1);
    for (int i = 0; i < n; i++) {
        np[i] = i % 2 == 0 ? &dn : NULL;
        glu[i] = ls[i % 4].glu;
        total += outs_of(&ls[i % 4]);
        bytes += ls[i % 4].rows * ls[i % 4].cols * 2;
    }
    mk_wire(layers, dw, np, glu, d);
    int64_t sx[1] = {hid}, so[1] = {total}, s2h[2] = {1, hid}, sq[2] = {1, ls[0].rows}, sg[2] = {1, ls[2].rows},
            sh2[2] = {1, ls[2].rows / 2};
    rt_tensor dx = up(x, RT_F32, 1, sx), dout = rt_tensor_alloc(g_gpu, RT_F32, 1, so);
    assert_non_null(dout.data);
    cuda_mk_plan *p = cuda_mk_plan_create(g_gpu, n, d, MK_EPS, &dx, &dout);
    if (!p) fail_msg("mk plan: %s", vc_err_msg());
    enum { REPS = 10 };
    if (cuda_mk_plan_run(p) != VC_OK) fail_msg("mk run: %s", vc_err_msg());
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    double t0 = vc_now_s();
    for (int r = 0; r < REPS; r++) assert_int_equal(cuda_mk_plan_run(p), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    const double us_mk = (vc_now_s() - t0) / REPS * 1e6;
    /* the engine's sequence, recorded once and replayed */
    rt_tensor res = up(x, RT_F32, 2, s2h), xn = rt_tensor_alloc(g_gpu, RT_F32, 2, s2h),
              t = rt_tensor_alloc(g_gpu, RT_F32, 2, s2h), qkv = rt_tensor_alloc(g_gpu, RT_F32, 2, sq),
              sc = rt_tensor_alloc(g_gpu, RT_F32, 2, sg), hh = rt_tensor_alloc(g_gpu, RT_F32, 2, sh2);
    double us_ops = 0.0;
    void *g = NULL;
    if (rt_backend_has_graphs(g_gpu)) {
        assert_int_equal(rt_backend_graph_begin(g_gpu), VC_OK);
        for (int l = 0; l < layers; l++) {
            rt_tensor *w = &dw[4 * l];
            if (l == 0) assert_int_equal(rt_rmsnorm(g_gpu, &xn, &res, &dn, MK_EPS, 0.0f), VC_OK);
            else assert_int_equal(rt_add_rmsnorm(g_gpu, &xn, &res, &t, &dn, MK_EPS, 0.0f), VC_OK);
            assert_int_equal(rt_matmul(g_gpu, &qkv, &xn, &w[0], NULL), VC_OK);
            rt_tensor att = rt_tensor_2d(qkv.data, RT_F32, RT_DEV_CUDA, 1, ls[1].cols);
            assert_int_equal(rt_matmul(g_gpu, &t, &att, &w[1], NULL), VC_OK);
            assert_int_equal(rt_add_rmsnorm(g_gpu, &xn, &res, &t, &dn, MK_EPS, 0.0f), VC_OK);
            assert_int_equal(rt_matmul_glu(g_gpu, &hh, &xn, &w[2], RT_ACT_SILU, &sc), VC_OK);
            assert_int_equal(rt_matmul(g_gpu, &t, &hh, &w[3], NULL), VC_OK);
        }
        assert_int_equal(rt_backend_graph_end(g_gpu, &g), VC_OK);
        assert_int_equal(rt_backend_graph_launch(g_gpu, g), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        t0 = vc_now_s();
        for (int r = 0; r < REPS; r++) assert_int_equal(rt_backend_graph_launch(g_gpu, g), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        us_ops = (vc_now_s() - t0) / REPS * 1e6;
        rt_backend_graph_free(g_gpu, g);
    }
    const double gb = (double)bytes * 1e-9;
    print_message("speed: mk %s, %d layers without attention (%d GEMVs, %.3f GB), %s: one persistent kernel %.1f us "
                  "(%.0f GB/s, %.2f of d2d %.0f, %.2f us a phase); the engine's kernels, graphed, %.1f us (%.0f GB/s, "
                  "%.2f, %.2f us a GEMV)\n",
                  name, layers, n, gb, mk_setting(), us_mk, gb / (us_mk * 1e-6), gb / (us_mk * 1e-6) / d2d, d2d,
                  us_mk / n, us_ops, us_ops > 0 ? gb / (us_ops * 1e-6) : 0.0,
                  us_ops > 0 ? gb / (us_ops * 1e-6) / d2d : 0.0, us_ops / n);
    cuda_mk_plan_free(p);
    for (int i = 0; i < n; i++) drop(&dw[i]);
    drop(&dx), drop(&dout), drop(&dn), drop(&res), drop(&xn), drop(&t), drop(&qkv), drop(&sc), drop(&hh);
    free(dw), free(np), free(glu), free(d), free(nh), free(x);
}

/* A whole decode step's layers in the lab: per layer RMSNorm + QKV,
 * attention at position pos over a per-layer paged cache (B 16, blocks in
 * order), Wo + residual, RMSNorm + gate|up, down + residual. Reported
 * against the weight bytes (the attention's cache reads are extra) and
 * to compare with the engine's `vllm run` decode step of the same shape
 * (which adds the LM head and sampling). */
static void mk_speed_full(const char *name, const mk_shape *ls, int layers, int64_t h, int64_t kvh, int64_t pos,
                          int splits, double d2d) {
    const int n = 5 * layers;
    const int64_t hid = ls[0].cols, B = 16, nblk = (pos + 1 + B - 1) / B;
    rt_tensor *dw = xmalloc((size_t)(4 * layers) * sizeof *dw), *kc = xmalloc((size_t)layers * sizeof *kc),
              *vc = xmalloc((size_t)layers * sizeof *vc);
    cuda_mk_desc *d = xmalloc((size_t)n * sizeof *d);
    int64_t total = 0, bytes = 0;
    for (int j = 0; j < 4; j++) {
        uint16_t *hm = rand_w(&ls[j]);
        int64_t s2[2] = {ls[j].rows, ls[j].cols};
        for (int l = 0; l < layers; l++) dw[4 * l + j] = up(hm, RT_BF16, 2, s2);
        bytes += ls[j].rows * ls[j].cols * 2 * layers;
        free(hm);
    }
    const int64_t cn = nblk * B * kvh * 128;
    uint16_t *hc = xmalloc((size_t)cn * 2);
    for (int64_t i = 0; i < cn; i++) hc[i] = rt_f32_to_bf16(rnd());
    int64_t s4[4] = {nblk, B, kvh, 128}, sbt[1] = {nblk}, s1[1] = {hid}, sd[1] = {128}, s64[1] = {64};
    for (int l = 0; l < layers; l++) kc[l] = up(hc, RT_BF16, 4, s4), vc[l] = up(hc, RT_BF16, 4, s4);
    int32_t *bt = xmalloc((size_t)nblk * 4);
    for (int64_t i = 0; i < nblk; i++) bt[i] = (int32_t)i;
    float *nh = xmalloc((size_t)hid * 4), *x = xmalloc((size_t)hid * 4), *qn = xmalloc(128 * 4), *inv = xmalloc(64 * 4);
    for (int64_t k = 0; k < hid; k++) nh[k] = 1.0f + 0.25f * rnd(), x[k] = 2.0f * rnd();
    for (int k = 0; k < 128; k++) qn[k] = 1.0f + 0.25f * rnd();
    for (int k = 0; k < 64; k++) inv[k] = powf(1e6f, -2.0f * (float)k / 128.0f);
    rt_tensor dn = up(nh, RT_F32, 1, s1), dqn = up(qn, RT_F32, 1, sd), dinv = up(inv, RT_F32, 1, s64),
              dbt = up(bt, RT_I32, 1, sbt);
    for (int l = 0; l < layers; l++) {
        const int b = 5 * l, r = l == 0 ? -1 : b - 1;
        rt_tensor *w = &dw[4 * l];
        d[b] = (cuda_mk_desc){.kind = CUDA_MK_GEMV, .in_from = r, .w = &w[0], .norm_w = &dn, .res_from = -2};
        d[b + 1] = (cuda_mk_desc){.kind = CUDA_MK_ATTN, .in_from = b, .k_cache = &kc[l], .v_cache = &vc[l],
                                  .block_table = &dbt, .inv_freq = &dinv, .q_norm = &dqn, .k_norm = &dqn,
                                  .n_heads = h, .n_kv_heads = kvh, .pos = pos, .scale = 0.0883883f, .splits = splits};
        d[b + 2] = (cuda_mk_desc){.kind = CUDA_MK_GEMV, .in_from = b + 1, .w = &w[1], .res_from = r};
        d[b + 3] = (cuda_mk_desc){.kind = CUDA_MK_GEMV, .in_from = b + 2, .w = &w[2], .glu = 1, .norm_w = &dn,
                                  .res_from = -2};
        d[b + 4] = (cuda_mk_desc){.kind = CUDA_MK_GEMV, .in_from = b + 3, .w = &w[3], .res_from = b + 2};
        total += ls[0].rows + h * 128 + ls[1].rows + ls[2].rows / 2 + ls[3].rows;
    }
    int64_t sx[1] = {hid}, so[1] = {total};
    rt_tensor dx = up(x, RT_F32, 1, sx), dout = rt_tensor_alloc(g_gpu, RT_F32, 1, so);
    assert_non_null(dout.data);
    cuda_mk_plan *p = cuda_mk_plan_create(g_gpu, n, d, MK_EPS, &dx, &dout);
    if (!p) fail_msg("mk plan (full layers): %s", vc_err_msg());
    enum { REPS = 10 };
    assert_int_equal(cuda_mk_plan_run(p), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    const double t0 = vc_now_s();
    for (int r = 0; r < REPS; r++) assert_int_equal(cuda_mk_plan_run(p), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    const double us = (vc_now_s() - t0) / REPS * 1e6, gb = (double)bytes * 1e-9;
    print_message("speed: mk %s, %d whole layers (attention at position %lld, %d splits a kv head), %s: %.1f us a "
                  "step of layers (%.0f GB/s of weights, %.2f of d2d %.0f)\n",
                  name, layers, (long long)pos, splits, mk_setting(), us, gb / (us * 1e-6), gb / (us * 1e-6) / d2d, d2d);
    cuda_mk_plan_free(p);
    for (int i = 0; i < 4 * layers; i++) drop(&dw[i]);
    for (int l = 0; l < layers; l++) drop(&kc[l]), drop(&vc[l]);
    drop(&dn), drop(&dqn), drop(&dinv), drop(&dbt), drop(&dx), drop(&dout);
    free(dw), free(kc), free(vc), free(d), free(hc), free(bt), free(nh), free(x), free(qn), free(inv);
}

static void test_mk_speed(void **st) {
    (void)st;
    NEED_GPU();
    const char *e = getenv("VLLM_CUDA_SPEED");
    if (e && !strcmp(e, "0")) skip();
    const double d2d = d2d_gbps();
    const char *only = getenv("VLLM_MK_SPEED"); /* "chain": the layers without attention only; "latency": tiny ones */
    if (only && !strcmp(only, "latency")) {
        mk_speed_chain("tiny", LT, 28, d2d);
        return;
    }
    mk_speed_chain("Qwen3-0.6B-shaped", L06, 28, d2d);
    mk_speed_chain("Llama-3.1-8B-shaped", L8B, 8, d2d);
    if (only && !strcmp(only, "chain")) return;
    /* `vllm run` decodes 256 tokens after a 512-token prompt: position 640
     * on average (engine: 0.6B 1,013 tok/s = 987 us a step with the LM
     * head, 8B 224 tok/s = 4.46 ms) */
    mk_speed_full("Qwen3-0.6B-shaped", L06, 28, 16, 8, 640, 16, d2d);
    mk_speed_full("Llama-3.1-8B-shaped", L8B, 32, 32, 8, 640, 16, d2d);
}

int main(void) {
    cuda_test_filter();
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_mk), cmocka_unit_test(test_mk_attn),
                                       cmocka_unit_test(test_mk_speed)};
    return cmocka_run_group_tests(tests, cuda_test_group_setup, cuda_test_group_teardown);
}
