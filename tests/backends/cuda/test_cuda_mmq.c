/* cuda_mmq.cu (MATMUL / MATMUL_GLU over GGUF block weights on int8 tensor
 * cores) against a double reference over the dequantized weights, on
 * random inputs:
 *   every format with a device decoder; rows of 5..73 units of 32 (chunks
 *   of 256 values with a partial last one) and of 1..11 K-quant
 *   super-blocks; 1..250 x rows (one to four token tiles, f32 and bf16 x);
 *   f32 and bf16 y, with and without bias; MATMUL_GLU (f32 and bf16 gate |
 *   up scratch); three backends: the split rule, VLLM_CUDA_MMQ_SPLIT=1 (one
 *   CTA walks every chunk) and =3. A launch counter proves the kernel ran.
 *   Bound 2e-2 normalised (x rounded to 8 bits per 32 values, as the d4
 *   GEMV: ~0.4% a value).
 *   Both kernels: bf16 x rows go to cuda_mmq_bf.cu by default (W decoded to
 *   bf16) except over Q8_0; f32 x rows and every call under
 *   VLLM_CUDA_MMQ=int8 to the int8 kernel; a counter per kernel proves which
 *   ran.
 *   test_mmq_speed (VLLM_CUDA_SPEED=0 skips it): the 8B's matmuls at 1..128
 *   bf16 rows in Q4_0 / Q4_K / Q6_K / Q8_0, graph-timed: the default, the
 *   int8 kernel, 32-token tiles (VLLM_CUDA_MMQ_TN=32), cuBLAS over the
 *   dequantized copy (VLLM_CUDA_MMQ=0, eager: it allocates per call),
 *   f32 rows to 8 (the decode GEMVs) and cuBLAS over bf16 W of the shape.
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

uint64_t cuda_mmq_launches(void);
uint64_t cuda_mmq_bf_launches(void);

/* calls that ran either kernel */
static uint64_t mq_launches(void) { return cuda_mmq_launches() + cuda_mmq_bf_launches(); }

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float rnd(void) { return cuda_test_rnd(&g_rng); } /* [-1, 1) */

static double dot_d(const float *w, const float *x, int64_t in) {
    double s = 0.0;
    for (int64_t k = 0; k < in; k++) s += (double)w[k] * x[k];
    return s;
}

static float bf16r(float v) { return rt_bf16_to_f32(rt_f32_to_bf16(v)); }

/* max |got - ref| / max |ref| */
static double max_norm_err(const float *got, const double *ref, int64_t count) {
    double e = 0.0, m = 1e-30;
    for (int64_t i = 0; i < count; i++) {
        const double d = fabs(got[i] - ref[i]);
        if (!(d <= e)) e = d; /* NaN propagates */
        m = fmax(m, fabs(ref[i]));
    }
    return e / m;
}

typedef struct {
    int64_t n, out;
    int in_i;         /* index into the format's row lengths */
    int xb, yb, bias; /* bf16 x, bf16 y, bias */
    int glu;
} mq_case;

static const mq_case CASES[] = {
    {9, 40, 0, 0, 0, 1, 0},   {16, 100, 1, 1, 0, 0, 0},  {17, 130, 2, 1, 1, 1, 0}, {33, 300, 1, 1, 0, 1, 0},
    {64, 128, 2, 0, 1, 0, 0}, {100, 257, 0, 1, 0, 1, 0}, {250, 64, 1, 1, 1, 0, 0}, {3, 50, 2, 1, 0, 1, 0},
    {12, 4100, 1, 1, 0, 0, 0}, {24, 144, 1, 1, 1, 0, 1}, {70, 200, 2, 1, 0, 0, 1},  {40, 96, 0, 0, 0, 0, 1},
};

static void mmq_cases(const char *label, int int8) {
    static const rt_dtype ts[] = {RT_Q4_0, RT_Q4_1, RT_Q8_0, RT_Q4_K, RT_Q5_K, RT_Q6_K};
    static const int64_t in32[3] = {160, 576, 2336}, in256[3] = {256, 1024, 2816};
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
        const rt_dtype t = ts[ti];
        const int kq = rt_dtype_info(t)->block_elems == 256;
        for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
            const mq_case *c = &CASES[k];
            const int64_t in = kq ? in256[c->in_i] : in32[c->in_i], n = c->n, out = c->out;
            const int64_t f = out / 2, yo = c->glu ? f : out;
            /* GLU scratch: bf16 when dst is bf16 (cuda_gemm_glu), gate / up rounded there */
            const int ybf = c->yb;
            void *w = rand_rows(t, out, in, 1.0f, rnd);
            float *wf = xmalloc((size_t)(out * in) * 4), *xf = xmalloc((size_t)(n * in) * 4);
            float *b = xmalloc((size_t)out * 4), *got = xmalloc((size_t)(n * yo) * 4);
            double *ref = xmalloc((size_t)(n * yo) * 8);
            uint16_t *xh = xmalloc((size_t)(n * in) * 2), *yh = xmalloc((size_t)(n * yo) * 2);
            const size_t rb = rt_dtype_row_bytes(t, in);
            for (int64_t r = 0; r < out; r++) rt_dequant_row(t, (char *)w + r * rb, wf + r * in, in);
            for (int64_t i = 0; i < n * in; i++) {
                xf[i] = rnd();
                xh[i] = rt_f32_to_bf16(xf[i]);
                if (c->xb) xf[i] = rt_bf16_to_f32(xh[i]);
            }
            for (int64_t i = 0; i < out; i++) b[i] = 0.5f * rnd();
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = 0; r < yo; r++) {
                    if (c->glu) {
                        double g = dot_d(wf + r * in, xf + i * in, in), u = dot_d(wf + (f + r) * in, xf + i * in, in);
                        if (ybf) g = bf16r((float)g), u = bf16r((float)u);
                        ref[i * yo + r] = g / (1.0 + exp(-g)) * u;
                    } else {
                        ref[i * yo + r] = dot_d(wf + r * in, xf + i * in, in) + (c->bias ? b[r] : 0.0);
                    }
                }
            int64_t sw[2] = {out, in}, sx[2] = {n, in}, sy[2] = {n, yo}, sb[1] = {out}, ss[2] = {n, out};
            rt_tensor dw = up(w, t, 2, sw), db = up(b, RT_F32, 1, sb);
            rt_tensor dx = c->xb ? up(xh, RT_BF16, 2, sx) : up(xf, RT_F32, 2, sx);
            rt_tensor dy = rt_tensor_alloc(g_gpu, ybf ? RT_BF16 : RT_F32, 2, sy);
            rt_tensor ds = rt_tensor_alloc(g_gpu, RT_F32, 2, ss);
            assert_non_null(dy.data);
            assert_non_null(ds.data);
            const uint64_t l0 = mq_launches(), b0 = cuda_mmq_bf_launches();
            if (c->glu) assert_int_equal(rt_matmul_glu(g_gpu, &dy, &dx, &dw, RT_ACT_SILU, &ds), VC_OK);
            else assert_int_equal(rt_matmul(g_gpu, &dy, &dx, &dw, c->bias ? &db : NULL), VC_OK);
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            /* f32 x at <= 8 rows takes the decode GEMV, not this kernel */
            const int want = !(n <= 8 && !c->xb);
            if (want && mq_launches() != l0 + 1)
                fail_msg("mmq did not run: %s n=%lld in=%lld out=%lld", rt_dtype_name(t), (long long)n, (long long)in,
                         (long long)out);
            const int bf = cuda_mmq_bf_launches() != b0;
            if (bf != (want && c->xb && !int8 && t != RT_Q8_0)) /* Q8_0: the int8 kernel */
                fail_msg("wrong kernel (bf16 %d): %s n=%lld", bf, rt_dtype_name(t), (long long)n);
            if (ybf) {
                down(yh, &dy);
                for (int64_t i = 0; i < n * yo; i++) got[i] = rt_bf16_to_f32(yh[i]);
            } else {
                down(got, &dy);
            }
            const double e = max_norm_err(got, ref, n * yo);
            print_message("mmq%s%s %s, %s%s, n=%lld in=%lld out=%lld x %s y %s: %.2e\n", bf ? " bf16" : " int8", label, rt_dtype_name(t),
                          c->glu ? "glu" : "matmul", c->bias ? "+bias" : "", (long long)n, (long long)in,
                          (long long)out, c->xb ? "bf16" : "f32", ybf ? "bf16" : "f32", e);
            assert_true(e <= 2e-2);
            drop(&dw), drop(&dx), drop(&db), drop(&dy), drop(&ds);
            free(w), free(wf), free(xf), free(b), free(got), free(ref), free(xh), free(yh);
        }
    }
}

/* The cases on a backend of their own (variables are read at first use):
 * VLLM_CUDA_MMQ = mmq ("" the default choice, "int8" that kernel for every
 * call), VLLM_CUDA_MMQ_SPLIT = split ("" the rule), rows to 256. */
static void mmq_run(const char *label, const char *mmq, const char *split) {
    setenv("VLLM_CUDA_MMQ", mmq, 1);
    setenv("VLLM_CUDA_MMQ_SPLIT", split, 1);
    setenv("VLLM_CUDA_MMQ_MAX_N", "256", 1); /* the cases go to 250 rows */
    rt_backend_params p = rt_backend_params_default();
    rt_backend *old = g_gpu;
    g_gpu = rt_backend_create(RT_DEV_CUDA, &p);
    assert_non_null(g_gpu);
    mmq_cases(label, !strcmp(mmq, "int8"));
    rt_backend_free(g_gpu);
    g_gpu = old;
    unsetenv("VLLM_CUDA_MMQ");
    unsetenv("VLLM_CUDA_MMQ_SPLIT");
    unsetenv("VLLM_CUDA_MMQ_MAX_N");
}

static void test_mmq(void **st) {
    (void)st;
    NEED_GPU();
    mmq_run("", "", "");
    mmq_run("", "int8", "");
    mmq_run(" (split 1)", "", "1");
    mmq_run(" (split 1)", "int8", "1");
    mmq_run(" (split 3)", "", "3");
    mmq_run(" (split 3)", "int8", "3");
}

/* Recorded graphs replay the kernel with the workspace they saw: a call
 * recorded at 16 rows replayed after an eager call at 512 rows (which grew
 * the workspace past its first 16 MiB) gives the 16-row result bit for bit. */
static void test_mmq_graph(void **st) {
    (void)st;
    NEED_GPU();
    if (!rt_backend_has_graphs(g_gpu)) skip();
    const int64_t in = 16384, out = 192, n = 16, nb = 512;
    void *w = rand_rows(RT_Q4_K, out, in, 1.0f, rnd);
    uint16_t *xh = xmalloc((size_t)(nb * in) * 2);
    for (int64_t i = 0; i < nb * in; i++) xh[i] = rt_f32_to_bf16(rnd());
    float *y1 = xmalloc((size_t)(n * out) * 4), *y2 = xmalloc((size_t)(n * out) * 4);
    int64_t sw[2] = {out, in}, sx[2] = {nb, in}, sy[2] = {nb, out};
    rt_tensor dw = up(w, RT_Q4_K, 2, sw), dx = up(xh, RT_BF16, 2, sx);
    rt_tensor dy = rt_tensor_alloc(g_gpu, RT_F32, 2, sy);
    rt_tensor xs = rt_tensor_slice0(&dx, 0, n), ys = rt_tensor_slice0(&dy, 0, n);
    assert_int_equal(rt_matmul(g_gpu, &ys, &xs, &dw, NULL), VC_OK); /* eager first: sizes the workspace */
    rt_tensor h1 = rt_tensor_make(y1, RT_F32, RT_DEV_CPU, 2, ys.shape);
    assert_int_equal(rt_tensor_copy_bytes(g_gpu, &h1, &ys), VC_OK);
    void *g = NULL;
    assert_int_equal(rt_backend_graph_begin(g_gpu), VC_OK);
    assert_int_equal(rt_matmul(g_gpu, &ys, &xs, &dw, NULL), VC_OK);
    assert_int_equal(rt_backend_graph_end(g_gpu, &g), VC_OK);
    assert_int_equal(rt_matmul(g_gpu, &dy, &dx, &dw, NULL), VC_OK); /* grows it: ~17 MB */
    assert_int_equal(rt_backend_graph_launch(g_gpu, g), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    rt_tensor h2 = rt_tensor_make(y2, RT_F32, RT_DEV_CPU, 2, ys.shape);
    assert_int_equal(rt_tensor_copy_bytes(g_gpu, &h2, &ys), VC_OK);
    assert_memory_equal(y1, y2, (size_t)(n * out) * 4);
    rt_backend_graph_free(g_gpu, g);
    drop(&dw), drop(&dx), drop(&dy);
    free(w), free(xh), free(y1), free(y2);
}

/* us per call (cuda_test_time_mm, 10 calls a graph) */
static double mq_time(int glu, rt_tensor *y, rt_tensor *x, rt_tensor *w, rt_tensor *s, int eager) {
    return cuda_test_time_mm(glu, y, x, w, s, eager, 10);
}

static void test_mmq_speed(void **st) {
    (void)st;
    NEED_GPU();
    const char *e = getenv("VLLM_CUDA_SPEED");
    if (e && !strcmp(e, "0")) skip();
    static const rt_dtype ts[] = {RT_Q4_0, RT_Q4_K, RT_Q6_K, RT_Q8_0, RT_BF16};
    static const struct { const char *name; int64_t out, in; int glu; } shp[4] = {
        {"qkv", 6144, 4096, 0}, {"wo", 4096, 4096, 0}, {"gate_up", 28672, 4096, 1}, {"down", 4096, 14336, 0}};
    static const int ns[] = {1, 2, 4, 8, 16, 32, 64, 128};
    enum { NT = sizeof ts / sizeof ts[0], NN = sizeof ns / sizeof ns[0] };
    static double us[NT][4][NN][5];
    const int nmax = 128;
    rt_backend_params p = rt_backend_params_default();
    /* VLLM_TEST_MMQ_ONE=<type index>,<shape index>[,<config index>]: that
     * pair only, in one config (default 0; 4 = the decode GEMVs on f32 rows),
     * no table (Nsight Compute runs: its first launch is the 1-row call) */
    const char *one = getenv("VLLM_TEST_MMQ_ONE");
    int one_t = -1, one_s = -1, one_c = 0;
    if (one && sscanf(one, "%d,%d,%d", &one_t, &one_s, &one_c) < 2) one_t = one_s = -1;
    if (one_c < 0 || one_c > 4) one_c = 0;
    /* VLLM_CUDA_MMQ, _TN: the default (bf16 x: cuda_mmq_bf.cu but Q8_0), the
     * copy, int8, bf16 in 32-token tiles; then the default with f32 x rows
     * to 8 (the decode GEMVs: cuda_gemv_d4.cu over GGUF blocks) */
    static const char *cfv[5][2] = {{"", ""}, {"0", ""}, {"int8", ""}, {"", "32"}, {"", ""}};
    for (int cf = one_t >= 0 ? one_c : 0; cf < (one_t >= 0 ? one_c + 1 : 5); cf++) {
        setenv("VLLM_CUDA_MMQ", cfv[cf][0], 1);
        setenv("VLLM_CUDA_MMQ_TN", cfv[cf][1], 1);
        setenv("VLLM_CUDA_MMQ_MAX_N", "512", 1); /* the whole table, past the default */
        rt_backend_free(g_gpu);
        g_gpu = rt_backend_create(RT_DEV_CUDA, &p);
        assert_non_null(g_gpu);
        for (int ti = 0; ti < NT; ti++) {
            if ((cf && ts[ti] == RT_BF16) || (one_t >= 0 && ti != one_t)) continue; /* bf16 W: cuBLAS in every config */
            for (int i = 0; i < 4; i++) {
                if (one_s >= 0 && i != one_s) continue;
                const int64_t out = shp[i].out, in = shp[i].in, yo = shp[i].glu ? out / 2 : out;
                const size_t rb = rt_dtype_row_bytes(ts[ti], in);
                char *wh = xmalloc(rb * (size_t)out);
                if (ts[ti] == RT_BF16) {
                    for (int64_t k = 0; k < out * in; k++) ((uint16_t *)wh)[k] = rt_f32_to_bf16(0.01f * (float)(k % 7 - 3));
                } else {
                    void *row = rand_rows(ts[ti], 1, in, 1.0f, rnd); /* one row repeated: speed does not depend on values */
                    for (int64_t r = 0; r < out; r++) memcpy(wh + (size_t)r * rb, row, rb);
                    free(row);
                }
                uint16_t *xh = xmalloc((size_t)(nmax * in) * 2);
                float *xf = xmalloc((size_t)(nmax * in) * 4);
                for (int64_t k = 0; k < nmax * in; k++) {
                    xf[k] = 0.1f * (float)(k % 5 - 2);
                    xh[k] = rt_f32_to_bf16(xf[k]);
                }
                const int f32x = cf == 4; /* f32 x and y rows (what decode steps of <= 8 rows pass) */
                int64_t sw[2] = {out, in}, sx[2] = {nmax, in}, sy[2] = {nmax, yo}, ss[2] = {nmax, out};
                rt_tensor w = up(wh, ts[ti], 2, sw), x = f32x ? up(xf, RT_F32, 2, sx) : up(xh, RT_BF16, 2, sx);
                rt_tensor y = rt_tensor_alloc(g_gpu, shp[i].glu && !f32x ? RT_BF16 : RT_F32, 2, sy); /* GLU -> bf16 rows */
                rt_tensor sc = rt_tensor_alloc(g_gpu, RT_F32, 2, ss);
                assert_non_null(y.data);
                assert_non_null(sc.data);
                for (int k = 0; k < NN; k++) {
                    if (f32x && ns[k] > 8) continue;
                    rt_tensor xv = rt_tensor_slice0(&x, 0, ns[k]), yv = rt_tensor_slice0(&y, 0, ns[k]);
                    rt_tensor sv = rt_tensor_slice0(&sc, 0, ns[k]);
                    us[ti][i][k][cf] = mq_time(shp[i].glu, &yv, &xv, &w, &sv, cf == 1);
                }
                drop(&w), drop(&x), drop(&y), drop(&sc);
                free(wh), free(xh), free(xf);
            }
        }
    }
    unsetenv("VLLM_CUDA_MMQ");
    unsetenv("VLLM_CUDA_MMQ_MAX_N");
    unsetenv("VLLM_CUDA_MMQ_TN");
    rt_backend_free(g_gpu);
    g_gpu = rt_backend_create(RT_DEV_CUDA, &p);
    assert_non_null(g_gpu);
    if (one_t >= 0) return;
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < NN; k++) {
            char line[1024];
            int o = 0;
            for (int ti = 0; ti < NT - 1; ti++) {
                const double gb = (double)rt_dtype_row_bytes(ts[ti], shp[i].in) * (double)shp[i].out * 1e-9;
                o += snprintf(line + o, sizeof line - (size_t)o,
                              " %s dflt %6.1f us (%5.0f GB/s) int8 %6.1f tn32 %6.1f copy %6.1f gemv %6.1f;",
                              rt_dtype_name(ts[ti]), us[ti][i][k][0], gb / (us[ti][i][k][0] * 1e-6), us[ti][i][k][2],
                              us[ti][i][k][3], us[ti][i][k][1], ns[k] <= 8 ? us[ti][i][k][4] : 0.0);
            }
            print_message("speed: mmq llama-8b %-7s n=%3d:%s bf16 W %7.1f us\n", shp[i].name, ns[k], line,
                          us[NT - 1][i][k][0]);
        }
}

int main(void) {
    cuda_test_filter();
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_mmq), cmocka_unit_test(test_mmq_graph),
                                       cmocka_unit_test(test_mmq_speed)};
    return cmocka_run_group_tests(tests, cuda_test_group_setup, cuda_test_group_teardown);
}
