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
 *   the device-to-device copy rate measured here (report only).
 * Skips without a device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/clock.h"
#include "base/err.h"
#include "runtime/ops.h"

#include "cuda_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cuda_mk_plan cuda_mk_plan;
cuda_mk_plan *cuda_mk_plan_create(rt_backend *be, int n, const rt_tensor *const *w, const int *glu, const int *in_from,
                                  const rt_tensor *const *norm_w, const int *res_from, float eps, const rt_tensor *x,
                                  rt_tensor *out);
int cuda_mk_plan_run(cuda_mk_plan *p);
void cuda_mk_plan_free(cuda_mk_plan *p);

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

static int64_t outs_of(const mk_shape *s) { return s->glu ? s->rows / 2 : s->rows; }

/* bf16 values uniform in +-sqrt(3 / cols) (unit variance of the outputs) */
static uint16_t *rand_w(const mk_shape *s) {
    const int64_t n = s->rows * s->cols;
    uint16_t *w = xmalloc((size_t)n * 2);
    const float a = sqrtf(3.0f / (float)s->cols);
    for (int64_t i = 0; i < n; i++) w[i] = rt_f32_to_bf16(a * rnd());
    return w;
}

/* The wiring of `layers` decode layers without attention, phase 4l + j:
 * 0 QKV over rmsnorm(residual), 1 Wo over QKV's first Wo-cols values
 * (the attention output's stand-in) + residual, 2 gate|up over
 * rmsnorm(that), 3 down + that residual. The residual enters as x. */
static void mk_wire(int layers, int *in_from, int *res_from, int *normed) {
    for (int l = 0; l < layers; l++) {
        const int b = 4 * l, r = l == 0 ? -1 : b - 1;
        in_from[b] = r, res_from[b] = -2, normed[b] = 1;
        in_from[b + 1] = b, res_from[b + 1] = r, normed[b + 1] = 0;
        in_from[b + 2] = b + 1, res_from[b + 2] = -2, normed[b + 2] = 1;
        in_from[b + 3] = b + 2, res_from[b + 3] = b + 1, normed[b + 3] = 0;
    }
}

/* `layers` layers of shape ls with distinct random weights: every phase
 * against a double reference over its own inputs (the kernel's earlier
 * outputs), then a second run against the first. */
static void mk_check(const char *name, const mk_shape *ls, int layers) {
    const int n = 4 * layers;
    const int64_t hid = ls[0].cols;
    uint16_t **hw = xmalloc((size_t)n * sizeof *hw);
    rt_tensor *dw = xmalloc((size_t)n * sizeof *dw), *dn = xmalloc((size_t)n * sizeof *dn);
    const rt_tensor **wp = xmalloc((size_t)n * sizeof *wp), **np = xmalloc((size_t)n * sizeof *np);
    int *glu = xmalloc((size_t)n * sizeof(int)), *in_from = xmalloc((size_t)n * sizeof(int)),
        *res_from = xmalloc((size_t)n * sizeof(int)), *normed = xmalloc((size_t)n * sizeof(int));
    float **hn = xmalloc((size_t)n * sizeof *hn);
    int64_t total = 0, *off = xmalloc((size_t)n * 8);
    mk_wire(layers, in_from, res_from, normed);
    for (int i = 0; i < n; i++) {
        const mk_shape *sh = &ls[i % 4];
        hw[i] = rand_w(sh);
        int64_t s2[2] = {sh->rows, sh->cols}, s1[1] = {sh->cols};
        dw[i] = up(hw[i], RT_BF16, 2, s2);
        wp[i] = &dw[i];
        hn[i] = xmalloc((size_t)sh->cols * 4);
        for (int64_t k = 0; k < sh->cols; k++) hn[i][k] = 1.0f + 0.25f * rnd();
        dn[i] = up(hn[i], RT_F32, 1, s1);
        np[i] = normed[i] ? &dn[i] : NULL;
        glu[i] = sh->glu;
        off[i] = total;
        total += outs_of(sh);
    }
    float *x = xmalloc((size_t)hid * 4);
    for (int64_t k = 0; k < hid; k++) x[k] = 2.0f * rnd();
    int64_t sx[1] = {hid}, so[1] = {total};
    rt_tensor dx = up(x, RT_F32, 1, sx), dout = rt_tensor_alloc(g_gpu, RT_F32, 1, so);
    assert_non_null(dout.data);
    cuda_mk_plan *p = cuda_mk_plan_create(g_gpu, n, wp, glu, in_from, np, res_from, MK_EPS, &dx, &dout);
    if (!p) fail_msg("mk plan: %s", vc_err_msg());
    float *o1 = xmalloc((size_t)total * 4), *o2 = xmalloc((size_t)total * 4);
    assert_int_equal(cuda_mk_plan_run(p), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    down(o1, &dout);
    assert_int_equal(cuda_mk_plan_run(p), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    down(o2, &dout);
    float *ref = xmalloc((size_t)28672 * 4);
    double *v = xmalloc((size_t)16384 * 8);
    for (int i = 0; i < n; i++) {
        const mk_shape *sh = &ls[i % 4];
        const int64_t R = sh->rows, C = sh->cols, no = outs_of(sh);
        const float *in = in_from[i] < 0 ? x : o1 + off[in_from[i]];
        double ss = 0.0;
        for (int64_t k = 0; k < C; k++) ss += (double)in[k] * in[k];
        const double sc = normed[i] ? 1.0 / sqrt(ss / (double)C + (double)MK_EPS) : 1.0;
        for (int64_t k = 0; k < C; k++) v[k] = in[k] * sc * (normed[i] ? hn[i][k] : 1.0);
        double *full = xmalloc((size_t)R * 8);
        for (int64_t r = 0; r < R; r++) {
            double a = 0.0;
            for (int64_t k = 0; k < C; k++) a += (double)rt_bf16_to_f32(hw[i][r * C + k]) * v[k];
            full[r] = a;
        }
        const float *res = res_from[i] == -2 ? NULL : res_from[i] == -1 ? x : o1 + off[res_from[i]];
        for (int64_t r = 0; r < no; r++)
            ref[r] = sh->glu ? (float)(full[r] / (1.0 + exp(-full[r])) * full[no + r])
                             : (float)(full[r] + (res ? (double)res[r] : 0.0));
        const double e = nerr(o1 + off[i], ref, no), e2 = nerr(o2 + off[i], o1 + off[i], no);
        print_message("mk %s phase %2d [%5lld x %5lld]%s%s%s: vs double %.2e, second run vs first %.2e\n", name, i,
                      (long long)R, (long long)C, sh->glu ? " glu" : "", normed[i] ? " normed" : "",
                      res ? " +res" : "", e, e2);
        assert_true(e <= 1e-5);
        assert_true(e2 <= 1e-6);
        free(full);
    }
    cuda_mk_plan_free(p);
    for (int i = 0; i < n; i++) drop(&dw[i]), drop(&dn[i]), free(hw[i]), free(hn[i]);
    drop(&dx), drop(&dout);
    free(hw), free(dw), free(dn), free(wp), free(np), free(glu), free(in_from), free(res_from), free(normed), free(hn);
    free(off), free(x), free(o1), free(o2), free(ref), free(v);
}

static void test_mk(void **st) {
    (void)st;
    NEED_GPU();
    mk_check("8B-shaped", L8B, 1);  /* gate|up rows a chunk each, down rows cut into column ranges */
    mk_check("0.6B-shaped", L06, 2); /* several rows a chunk; residual and norm across layers */
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
    const rt_tensor **wp = xmalloc((size_t)n * sizeof *wp), **np = xmalloc((size_t)n * sizeof *np);
    int *glu = xmalloc((size_t)n * sizeof(int)), *in_from = xmalloc((size_t)n * sizeof(int)),
        *res_from = xmalloc((size_t)n * sizeof(int)), *normed = xmalloc((size_t)n * sizeof(int));
    int64_t total = 0, bytes = 0;
    mk_wire(layers, in_from, res_from, normed);
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
        wp[i] = &dw[i];
        np[i] = normed[i] ? &dn : NULL;
        glu[i] = ls[i % 4].glu;
        total += outs_of(&ls[i % 4]);
        bytes += ls[i % 4].rows * ls[i % 4].cols * 2;
    }
    int64_t sx[1] = {hid}, so[1] = {total}, s2h[2] = {1, hid}, sq[2] = {1, ls[0].rows}, sg[2] = {1, ls[2].rows},
            sh2[2] = {1, ls[2].rows / 2};
    rt_tensor dx = up(x, RT_F32, 1, sx), dout = rt_tensor_alloc(g_gpu, RT_F32, 1, so);
    assert_non_null(dout.data);
    cuda_mk_plan *p = cuda_mk_plan_create(g_gpu, n, wp, glu, in_from, np, res_from, MK_EPS, &dx, &dout);
    if (!p) fail_msg("mk plan: %s", vc_err_msg());
    enum { REPS = 10 };
    assert_int_equal(cuda_mk_plan_run(p), VC_OK);
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
    print_message("speed: mk %s, %d layers without attention (%d GEMVs, %.3f GB): one persistent kernel %.1f us "
                  "(%.0f GB/s, %.2f of d2d %.0f); the engine's kernels, graphed, %.1f us (%.0f GB/s, %.2f)\n",
                  name, layers, n, gb, us_mk, gb / (us_mk * 1e-6), gb / (us_mk * 1e-6) / d2d, d2d, us_ops,
                  us_ops > 0 ? gb / (us_ops * 1e-6) : 0.0, us_ops > 0 ? gb / (us_ops * 1e-6) / d2d : 0.0);
    cuda_mk_plan_free(p);
    for (int i = 0; i < n; i++) drop(&dw[i]);
    drop(&dx), drop(&dout), drop(&dn), drop(&res), drop(&xn), drop(&t), drop(&qkv), drop(&sc), drop(&hh);
    free(dw), free(wp), free(np), free(glu), free(in_from), free(res_from), free(normed), free(nh), free(x);
}

static void test_mk_speed(void **st) {
    (void)st;
    NEED_GPU();
    const char *e = getenv("VLLM_CUDA_SPEED");
    if (e && !strcmp(e, "0")) skip();
    const double d2d = d2d_gbps();
    mk_speed_chain("Qwen3-0.6B-shaped", L06, 28, d2d);
    mk_speed_chain("Llama-3.1-8B-shaped", L8B, 8, d2d);
}

int main(void) {
    cuda_test_filter();
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_mk), cmocka_unit_test(test_mk_speed)};
    return cmocka_run_group_tests(tests, cuda_test_group_setup, cuda_test_group_teardown);
}
