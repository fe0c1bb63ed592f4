/* The megakernel lab (cuda_mk.cu): a chain of dependent bf16 GEMV phases
 * in one persistent kernel with grid barriers and a producer warp that
 * streams the weights ahead.
 *   test_mk: a chain of one Llama-3.1-8B-shaped layer's GEMVs (QKV 6144 x
 *   4096, Wo 4096 x 4096, gate|up 28672 x 4096 as GLU: 16 KB rows a
 *   chunk, down 4096 x 14336: rows longer than a ring stage, cut into
 *   column ranges) and two Qwen3-0.6B-shaped layers (4096 x 1024, 1024 x
 *   2048, 6144 x 1024 GLU, 1024 x 3072), distinct random weights; every
 *   phase's output against a double reference on the CPU over that
 *   phase's own input (the kernel's previous output): 1e-5 normalised
 *   (f32 sums in another order). Run twice: the second run must agree
 *   with the first to 1e-6 (the shared-atomic order of a row's warp sums
 *   varies).
 *   test_mk_speed (VLLM_CUDA_SPEED=0 skips it): 28 0.6B-shaped layers and
 *   8 8B-shaped ones (distinct device copies of one random matrix per
 *   shape, so the L2 holds none), one launch a chain vs the same chain as
 *   one MATMUL / MATMUL_GLU a phase recorded in a CUDA graph, GB/s of
 *   weights and the fraction of the device-to-device copy rate measured
 *   here (report only).
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
cuda_mk_plan *cuda_mk_plan_create(rt_backend *be, int n, const rt_tensor *const *w, const int *glu, const rt_tensor *x,
                                  rt_tensor *out);
int cuda_mk_plan_run(cuda_mk_plan *p);
void cuda_mk_plan_free(cuda_mk_plan *p);

static uint64_t g_rng = 0x3C6EF372FE94F82Bull;
static float rnd(void) { return cuda_test_rnd(&g_rng); } /* [-1, 1) */

typedef struct {
    int64_t rows, cols;
    int glu;
} mk_shape;

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

static void test_mk(void **st) {
    (void)st;
    NEED_GPU();
    enum { NP = 12 };
    mk_shape sh[NP];
    for (int i = 0; i < 4; i++) sh[i] = L8B[i], sh[4 + i] = L06[i], sh[8 + i] = L06[i];
    /* the 8B layer's down output (4096) feeds the 0.6B QKV (cols 1024): a prefix */
    uint16_t *hw[NP];
    rt_tensor dw[NP];
    const rt_tensor *wp[NP];
    int glu[NP];
    int64_t total = 0, off[NP];
    for (int i = 0; i < NP; i++) {
        hw[i] = rand_w(&sh[i]);
        int64_t s2[2] = {sh[i].rows, sh[i].cols};
        dw[i] = up(hw[i], RT_BF16, 2, s2);
        wp[i] = &dw[i];
        glu[i] = sh[i].glu;
        off[i] = total;
        total += outs_of(&sh[i]);
    }
    float *x = xmalloc((size_t)sh[0].cols * 4);
    for (int64_t k = 0; k < sh[0].cols; k++) x[k] = rnd();
    int64_t sx[1] = {sh[0].cols}, so[1] = {total};
    rt_tensor dx = up(x, RT_F32, 1, sx), dout = rt_tensor_alloc(g_gpu, RT_F32, 1, so);
    assert_non_null(dout.data);
    cuda_mk_plan *p = cuda_mk_plan_create(g_gpu, NP, wp, glu, &dx, &dout);
    if (!p) fail_msg("mk plan: %s", vc_err_msg());
    float *o1 = xmalloc((size_t)total * 4), *o2 = xmalloc((size_t)total * 4);
    assert_int_equal(cuda_mk_plan_run(p), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    down(o1, &dout);
    assert_int_equal(cuda_mk_plan_run(p), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    down(o2, &dout);
    /* every phase against a double reference over its own input */
    float *ref = xmalloc((size_t)28672 * 4);
    for (int i = 0; i < NP; i++) {
        const float *in = i == 0 ? x : o1 + off[i - 1];
        const int64_t R = sh[i].rows, C = sh[i].cols, no = outs_of(&sh[i]);
        double *full = xmalloc((size_t)R * 8);
        for (int64_t r = 0; r < R; r++) {
            double s = 0.0;
            for (int64_t k = 0; k < C; k++) s += (double)rt_bf16_to_f32(hw[i][r * C + k]) * in[k];
            full[r] = s;
        }
        for (int64_t r = 0; r < no; r++)
            ref[r] = sh[i].glu ? (float)(full[r] / (1.0 + exp(-full[r])) * full[no + r]) : (float)full[r];
        const double e = nerr(o1 + off[i], ref, no), e2 = nerr(o2 + off[i], o1 + off[i], no);
        print_message("mk phase %2d [%5lld x %5lld]%s: vs double %.2e, second run vs first %.2e\n", i, (long long)R,
                      (long long)C, sh[i].glu ? " glu" : "    ", e, e2);
        assert_true(e <= 1e-5);
        assert_true(e2 <= 1e-6);
        free(full);
    }
    free(ref);
    cuda_mk_plan_free(p);
    for (int i = 0; i < NP; i++) drop(&dw[i]), free(hw[i]);
    drop(&dx), drop(&dout);
    free(x), free(o1), free(o2);
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

/* One chain of `layers` copies of a layer's four shapes: mk vs a graph of
 * one op a phase. */
static void mk_speed_chain(const char *name, const mk_shape *ls, int layers, double d2d) {
    const int n = 4 * layers;
    rt_tensor *dw = xmalloc((size_t)n * sizeof *dw);
    const rt_tensor **wp = xmalloc((size_t)n * sizeof *wp);
    int *glu = xmalloc((size_t)n * sizeof *glu);
    int64_t total = 0, bytes = 0, *off = xmalloc((size_t)n * 8);
    for (int j = 0; j < 4; j++) {
        uint16_t *h = rand_w(&ls[j]);
        int64_t s2[2] = {ls[j].rows, ls[j].cols};
        for (int l = 0; l < layers; l++) dw[4 * l + j] = up(h, RT_BF16, 2, s2);
        free(h);
    }
    for (int i = 0; i < n; i++) {
        wp[i] = &dw[i];
        glu[i] = ls[i % 4].glu;
        off[i] = total;
        total += outs_of(&ls[i % 4]);
        bytes += ls[i % 4].rows * ls[i % 4].cols * 2;
    }
    float *x = xmalloc((size_t)ls[0].cols * 4);
    for (int64_t k = 0; k < ls[0].cols; k++) x[k] = rnd();
    int64_t sx[1] = {ls[0].cols}, so[1] = {total}, ss[2] = {1, 28672};
    rt_tensor dx = up(x, RT_F32, 1, sx), dout = rt_tensor_alloc(g_gpu, RT_F32, 1, so),
              dsc = rt_tensor_alloc(g_gpu, RT_F32, 2, ss);
    assert_non_null(dout.data);
    assert_non_null(dsc.data);
    cuda_mk_plan *p = cuda_mk_plan_create(g_gpu, n, wp, glu, &dx, &dout);
    if (!p) fail_msg("mk plan: %s", vc_err_msg());
    enum { REPS = 10 };
    assert_int_equal(cuda_mk_plan_run(p), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    double t0 = vc_now_s();
    for (int r = 0; r < REPS; r++) assert_int_equal(cuda_mk_plan_run(p), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    const double us_mk = (vc_now_s() - t0) / REPS * 1e6;
    /* the same chain, one op a phase, recorded once and replayed */
    void *g = NULL;
    double us_ops = 0.0;
    if (rt_backend_has_graphs(g_gpu)) {
        assert_int_equal(rt_backend_graph_begin(g_gpu), VC_OK);
        for (int i = 0; i < n; i++) {
            const mk_shape *s = &ls[i % 4];
            rt_tensor xin = i == 0 ? rt_tensor_2d(dx.data, RT_F32, RT_DEV_CUDA, 1, s->cols)
                                   : rt_tensor_2d((float *)dout.data + off[i - 1], RT_F32, RT_DEV_CUDA, 1, s->cols);
            rt_tensor y = rt_tensor_2d((float *)dout.data + off[i], RT_F32, RT_DEV_CUDA, 1, outs_of(s));
            rt_tensor sc = rt_tensor_2d(dsc.data, RT_F32, RT_DEV_CUDA, 1, s->rows);
            assert_int_equal(cuda_test_mm(s->glu, &y, &xin, &dw[i], &sc), VC_OK);
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
    print_message("speed: mk %s, %d layers (%d GEMVs, %.3f GB): one persistent kernel %.1f us (%.0f GB/s, %.2f of d2d "
                  "%.0f); one op a phase, graphed %.1f us (%.0f GB/s, %.2f)\n",
                  name, layers, n, gb, us_mk, gb / (us_mk * 1e-6), gb / (us_mk * 1e-6) / d2d, d2d, us_ops,
                  us_ops > 0 ? gb / (us_ops * 1e-6) : 0.0, us_ops > 0 ? gb / (us_ops * 1e-6) / d2d : 0.0);
    cuda_mk_plan_free(p);
    for (int i = 0; i < n; i++) drop(&dw[i]);
    drop(&dx), drop(&dout), drop(&dsc);
    free(dw), free(wp), free(glu), free(off), free(x);
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
