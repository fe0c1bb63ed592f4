/* Every op of runtime/ops.h on the CUDA backend against the same op on the
 * CPU backend (the reference), on random inputs and odd shapes.
 *
 * KV_STORE and PAGED_ATTENTION (block tables, varlen batches) likewise.
 *
 * Error measure: max_i |gpu_i - cpu_i| / max_i |cpu_i| ("normalised").
 * Bounds per op: exact (bit-identical) for EMBED, COPY and ARGMAX, whose
 * GPU kernels do the same IEEE operations; ~1e-5 for f32 arithmetic that
 * only reorders sums or uses CUDA's expf/tanhf/cosf (<= 2 ulp); for MATMUL
 * see test_matmul. The largest error seen per op is printed at the end.
 * Skips (cmocka skip) when no CUDA device is present.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/err.h"
#include "runtime/ops.h"
#include "runtime/quant.h"

#include "cuda_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double g_worst[RT_OP_COUNT];
static double g_worst_bf16; /* RMSNORM into bf16 */

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float rnd(void) { return cuda_test_rnd(&g_rng); } /* [-1, 1) */
static void fill(float *x, int64_t n, float amp) {
    for (int64_t i = 0; i < n; i++) x[i] = amp * rnd();
}
static void note(rt_op op, double e, double bound, const char *what) {
    if (!(e <= g_worst[op])) g_worst[op] = e;
    if (!(e <= bound)) fail_msg("%s: %s normalised error %.3e > %.1e", rt_op_name(op), what, e, bound);
}

static const rt_dtype g_wtypes[] = {RT_F32, RT_F16, RT_BF16, RT_Q4_0, RT_Q4_1, RT_Q8_0, RT_Q4_K, RT_Q5_K, RT_Q6_K};
#define N_WTYPES (sizeof g_wtypes / sizeof g_wtypes[0])

/* ---- EMBED ------------------------------------------------------------- */

static void test_embed(void **st) {
    (void)st;
    NEED_GPU();
    const int64_t V = 37, n = 6;
    int32_t ids[6] = {0, 36, 5, 5, 17, 1};
    /* plain tables twice: 71 values (the one-value kernel) and 136 (16-byte
     * rows of 8k values: the vector kernel) */
    for (size_t kk = 0; kk < 2 * N_WTYPES; kk++) {
        size_t k = kk % N_WTYPES;
        rt_dtype t = g_wtypes[k];
        if (kk >= N_WTYPES && rt_dtype_info(t)->quantized) continue;
        int64_t d = rt_dtype_info(t)->block_elems == 256 ? 512
                    : rt_dtype_info(t)->quantized       ? 96
                    : kk >= N_WTYPES                     ? 136
                                                         : 71;
        void *tab = rand_rows(t, V, d, 2.0f, rnd);
        int64_t s_tab[2] = {V, d}, s_ids[1] = {n}, s_out[2] = {n, d};
        rt_tensor ht = rt_tensor_make(tab, t, RT_DEV_CPU, 2, s_tab);
        rt_tensor hi = rt_tensor_make(ids, RT_I32, RT_DEV_CPU, 1, s_ids);
        float *ref = xmalloc((size_t)(n * d) * 4), *got = xmalloc((size_t)(n * d) * 4);
        rt_tensor hr = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 2, s_out);
        assert_int_equal(rt_embed(g_cpu, &hr, &ht, &hi), VC_OK);
        rt_tensor dt = up(tab, t, 2, s_tab), di = up(ids, RT_I32, 1, s_ids);
        rt_tensor dout = rt_tensor_alloc(g_gpu, RT_F32, 2, s_out);
        assert_int_equal(rt_embed(g_gpu, &dout, &dt, &di), VC_OK); /* device ids */
        down(got, &dout);
        assert_memory_equal(got, ref, (size_t)(n * d) * 4);
        memset(got, 0, (size_t)(n * d) * 4);
        assert_int_equal(rt_embed(g_gpu, &dout, &dt, &hi), VC_OK); /* host ids */
        down(got, &dout);
        assert_memory_equal(got, ref, (size_t)(n * d) * 4);
        note(RT_OP_EMBED, nerr(got, ref, n * d), 0.0, rt_dtype_name(t));
        /* bf16 rows (a bf16 residual stream): the f32 rows rounded once */
        {
            rt_tensor d16 = rt_tensor_alloc(g_gpu, RT_BF16, 2, s_out);
            uint16_t *g16 = xmalloc((size_t)(n * d) * 2);
            assert_int_equal(rt_embed(g_gpu, &d16, &dt, &di), VC_OK);
            down(g16, &d16);
            for (int64_t i = 0; i < n * d; i++)
                if (g16[i] != rt_f32_to_bf16(ref[i]))
                    fail_msg("embed %s into bf16: element %lld is %04x, expected %04x", rt_dtype_name(t),
                             (long long)i, g16[i], rt_f32_to_bf16(ref[i]));
            drop(&d16);
            free(g16);
        }
        /* out-of-range ids: host ids fail at once, device ids at the next sync */
        int32_t bad[2] = {3, (int32_t)V};
        int64_t s2[1] = {2}, so2[2] = {2, d};
        rt_tensor hb = rt_tensor_make(bad, RT_I32, RT_DEV_CPU, 1, s2);
        rt_tensor o2 = rt_tensor_slice0(&dout, 0, 2);
        (void)so2;
        assert_int_equal(rt_embed(g_gpu, &o2, &dt, &hb), VC_ERR_INVALID);
        rt_tensor db = up(bad, RT_I32, 1, s2);
        assert_int_equal(rt_embed(g_gpu, &o2, &dt, &db), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_ERR_INVALID);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK); /* the flag is cleared */
        drop(&db);
        drop(&dt);
        drop(&di);
        drop(&dout);
        free(tab);
        free(ref);
        free(got);
    }
}

/* ---- MATMUL ------------------------------------------------------------ */

/* Bounds vs the exact product of the stored weights (double reference):
 * GEMV (n <= CUDA_GEMV_MAX_N = 8) computes in f32: 2e-5, except over
 * quantized weights, where cuda_gemv_d4.cu quantizes x to 8 bits per 32
 * values (as the CPU op does): 2e-2 (~4e-3 seen). GEMM: f32 SGEMM 2e-5; f16 weights
 * with x rounded to f16 (2^-11): 3e-3; bf16 / quantized (dequantized to
 * bf16) with x rounded to bf16 (2^-8 per factor): 2e-2. Against the CPU op
 * (which quantizes activations to 8 bits for quantized weights): 5e-2. */
static double mm_bound(rt_dtype t, int64_t n) {
    if (n <= 8 && rt_dtype_info(t)->quantized) return 2e-2;
    if (n <= 8 || t == RT_F32) return 2e-5;
    if (t == RT_F16) return 3e-3;
    return 2e-2;
}

static void matmul_case(rt_dtype t, int64_t n, int64_t in, int64_t out, int bias, int strided) {
    void *w = rand_rows(t, out, in, 1.0f, rnd);
    int64_t xcols = strided ? in + 5 : in; /* strided: x rows are a view of wider rows */
    float *x = xmalloc((size_t)(n * xcols) * 4), *b = xmalloc((size_t)out * 4);
    fill(x, n * xcols, 1.5f);
    fill(b, out, 0.5f);
    float *ref = xmalloc((size_t)(n * out) * 4), *got = xmalloc((size_t)(n * out) * 4);
    double *exact = xmalloc((size_t)(n * out) * 8);
    float *wf = xmalloc((size_t)in * 4);
    size_t rb = rt_dtype_row_bytes(t, in);
    for (int64_t r = 0; r < out; r++) {
        rt_dequant_row(t, (char *)w + r * rb, wf, in);
        for (int64_t i = 0; i < n; i++) {
            double s = bias ? b[r] : 0.0;
            for (int64_t k = 0; k < in; k++) s += (double)wf[k] * x[i * xcols + k];
            exact[i * out + r] = s;
        }
    }
    int64_t s_w[2] = {out, in}, s_xw[2] = {n, xcols}, s_y[2] = {n, out}, s_b[1] = {out};
    rt_tensor hw = rt_tensor_make(w, t, RT_DEV_CPU, 2, s_w);
    rt_tensor hxw = rt_tensor_make(x, RT_F32, RT_DEV_CPU, 2, s_xw), hx = hxw;
    hx.shape[1] = in;
    rt_tensor hb = rt_tensor_make(b, RT_F32, RT_DEV_CPU, 1, s_b);
    rt_tensor hy = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 2, s_y);
    assert_int_equal(rt_matmul(g_cpu, &hy, &hx, &hw, bias ? &hb : NULL), VC_OK);
    rt_tensor dw = up(w, t, 2, s_w), dxw = up(x, RT_F32, 2, s_xw), db = up(b, RT_F32, 1, s_b);
    rt_tensor dx = dxw;
    dx.shape[1] = in;
    rt_tensor dy = rt_tensor_alloc(g_gpu, RT_F32, 2, s_y);
    int rc = rt_matmul(g_gpu, &dy, &dx, &dw, bias ? &db : NULL);
    if (rc) fail_msg("matmul %s: %s", rt_dtype_name(t), vc_err_msg());
    down(got, &dy);
    double e_exact = 0, m = 1e-30;
    for (int64_t i = 0; i < n * out; i++) {
        e_exact = fmax(e_exact, fabs(got[i] - exact[i]));
        m = fmax(m, fabs(exact[i]));
    }
    e_exact /= m;
    char what[96];
    snprintf(what, sizeof what, "%s n=%lld in=%lld out=%lld vs exact", rt_dtype_name(t), (long long)n,
             (long long)in, (long long)out);
    if (!(e_exact <= mm_bound(t, n))) fail_msg("matmul: %s: %.3e > %.1e", what, e_exact, mm_bound(t, n));
    snprintf(what, sizeof what, "%s n=%lld vs cpu", rt_dtype_name(t), (long long)n);
    note(RT_OP_MATMUL, nerr(got, ref, n * out), rt_dtype_info(t)->quantized || n > 8 ? 5e-2 : 2e-5, what);
    drop(&dw);
    drop(&dxw);
    drop(&db);
    drop(&dy);
    free(w);
    free(x);
    free(b);
    free(ref);
    free(got);
    free(exact);
    free(wf);
}

static void test_matmul(void **st) {
    (void)st;
    NEED_GPU();
    const int64_t ns[] = {1, 3, 8, 9, 33};
    for (size_t k = 0; k < N_WTYPES; k++) {
        rt_dtype t = g_wtypes[k];
        int be = rt_dtype_info(t)->block_elems;
        int64_t in = be == 256 ? 512 : be == 32 ? 96 : 67;
        for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++)
            matmul_case(t, ns[j], in, j % 2 ? 45 : 130, (int)(j % 2), j == 2 || j == 4);
    /* the K-split GEMV (few rows, long rows: several warps per row) */
    matmul_case(RT_BF16, 8, 3072, 96, 1, 0);
    matmul_case(RT_Q4_K, 2, 4096, 64, 0, 0);
    matmul_case(RT_Q8_0, 1, 2048, 33, 1, 0);
    }
    /* aligned f16/bf16 rows: the 16-byte-load GEMV */
    matmul_case(RT_F16, 1, 1024, 130, 1, 0);
    matmul_case(RT_BF16, 5, 256, 45, 0, 0);
    matmul_case(RT_BF16, 8, 512, 64, 0, 1);
    /* a larger prefill-shaped GEMM */
    matmul_case(RT_BF16, 64, 1024, 768, 1, 0);
    matmul_case(RT_Q4_K, 40, 1024, 256, 0, 0);
}

/* Every f16/bf16 GEMV variant (VLLM_CUDA_GEMV 0..6, read once per backend:
 * a fresh backend each; their kernels and KS choices differ) on one token
 * row with long rows (KS 1..8, a row length that is not a whole number of
 * rounds, few rows, a grid of several waves) and on small batches. */
static void test_matmul_variants(void **st) {
    (void)st;
    NEED_GPU();
    rt_backend *keep = g_gpu;
    for (int v = 0; v < 7; v++) {
        char val[8];
        snprintf(val, sizeof val, "%d", v);
        setenv("VLLM_CUDA_GEMV", val, 1);
        g_gpu = rt_backend_create(RT_DEV_CUDA, NULL);
        assert_non_null(g_gpu);
        matmul_case(RT_BF16, 1, 4096, 1000, 1, 0);
        matmul_case(RT_F16, 1, 2056, 300, 0, 0);
        matmul_case(RT_BF16, 1, 14336, 64, 1, 0);
        matmul_case(RT_BF16, 4, 2048, 130, 0, 1);
        matmul_case(RT_BF16, 1, 2048, 6000, 1, 0); /* > 1 wave of blocks at KS 1 (H200): variant 4 takes KS 4 */
        matmul_case(RT_F16, 3, 2048, 6000, 0, 0);
        rt_backend_free(g_gpu);
        g_gpu = keep;
    }
    unsetenv("VLLM_CUDA_GEMV");
}

/* Many short f16/bf16 rows (k_gemv_half_rows: rows of 512 / 1024 / 2048
 * values, >= 4 waves of 8-row blocks; e.g. the 0.6B's LM head): against
 * the CPU and the exact product (matmul_case), and bit for bit against
 * k_gemv_half_u at KS 1 (VLLM_CUDA_GEMV=3 on these shapes: its lane order
 * and warp sum are the rows kernel's). */
static void gemv_rows_case(rt_dtype t, int64_t n, int64_t in, int64_t out) {
    matmul_case(t, n, in, out, 1, 0);
    void *w = rand_rows(t, out, in, 1.0f, rnd);
    float *x = xmalloc((size_t)(n * in) * 4), *b = xmalloc((size_t)out * 4);
    float *y1 = xmalloc((size_t)(n * out) * 4), *y2 = xmalloc((size_t)(n * out) * 4);
    fill(x, n * in, 1.5f);
    fill(b, out, 0.5f);
    int64_t s_w[2] = {out, in}, s_x[2] = {n, in}, s_y[2] = {n, out}, s_b[1] = {out};
    rt_backend *keep = g_gpu;
    for (int k = 0; k < 2; k++) {
        if (k == 1) {
            setenv("VLLM_CUDA_GEMV", "3", 1);
            g_gpu = rt_backend_create(RT_DEV_CUDA, NULL);
            assert_non_null(g_gpu);
        }
        rt_tensor dw = up(w, t, 2, s_w), dx = up(x, RT_F32, 2, s_x), db = up(b, RT_F32, 1, s_b);
        rt_tensor dy = rt_tensor_alloc(g_gpu, RT_F32, 2, s_y);
        assert_int_equal(rt_matmul(g_gpu, &dy, &dx, &dw, &db), VC_OK);
        down(k ? y2 : y1, &dy);
        drop(&dw), drop(&dx), drop(&db), drop(&dy);
    }
    rt_backend_free(g_gpu);
    g_gpu = keep;
    unsetenv("VLLM_CUDA_GEMV");
    if (memcmp(y1, y2, (size_t)(n * out) * 4))
        fail_msg("gemv rows %s n=%lld in=%lld out=%lld: differs from k_gemv_half_u at KS 1", rt_dtype_name(t),
                 (long long)n, (long long)in, (long long)out);
    free(w), free(x), free(b), free(y1), free(y2);
}

static void test_gemv_rows(void **st) {
    (void)st;
    NEED_GPU();
    gemv_rows_case(RT_BF16, 1, 1024, 20011); /* a ragged last pass of the grid's warps */
    gemv_rows_case(RT_F16, 3, 512, 20000);
    gemv_rows_case(RT_BF16, 8, 2048, 13000);
}

/* ---- MATMUL_ADD --------------------------------------------------------- */

/* dst += x W^T (+ bias) on the residual rows dst0. The GPU op against the
 * CPU's (MATMUL + ADD through the wrapper's fallback: the CPU backend has
 * no MATMUL_ADD kernel) within MATMUL's bound, and against the GPU's own
 * MATMUL then ADD within f32 reordering (the GEMM with beta = 1 adds the
 * same f32 accumulator to C once; cuBLAS may pick another kernel for it).
 * native: whether the GPU runs it as one GEMM (rows past the GEMV / skinny
 * kernels, f16 / bf16 W); otherwise the wrapper's fallback runs there too. */
static void matmul_add_case(rt_dtype t, int64_t n, int64_t in, int64_t out, int bias, bool native) {
    void *w = rand_rows(t, out, in, 1.0f, rnd);
    float *x = xmalloc((size_t)(n * in) * 4), *b = xmalloc((size_t)out * 4), *d0 = xmalloc((size_t)(n * out) * 4);
    fill(x, n * in, 1.5f);
    fill(b, out, 0.5f);
    fill(d0, n * out, 8.0f);
    float *ref = xmalloc((size_t)(n * out) * 4), *got = xmalloc((size_t)(n * out) * 4),
          *two = xmalloc((size_t)(n * out) * 4), *scr = xmalloc((size_t)(n * out) * 4);
    memcpy(ref, d0, (size_t)(n * out) * 4);
    int64_t s_w[2] = {out, in}, s_x[2] = {n, in}, s_y[2] = {n, out}, s_b[1] = {out};
    rt_tensor hw = rt_tensor_make(w, t, RT_DEV_CPU, 2, s_w), hx = rt_tensor_make(x, RT_F32, RT_DEV_CPU, 2, s_x);
    rt_tensor hb = rt_tensor_make(b, RT_F32, RT_DEV_CPU, 1, s_b), hy = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 2, s_y);
    rt_tensor hs = rt_tensor_make(scr, RT_F32, RT_DEV_CPU, 2, s_y);
    assert_false(rt_matmul_add_native(g_cpu, &hy, &hx, &hw, NULL));
    assert_int_equal(rt_matmul_add(g_cpu, &hy, &hx, &hw, bias ? &hb : NULL, &hs), VC_OK);
    rt_tensor dw = up(w, t, 2, s_w), dx = up(x, RT_F32, 2, s_x), db = up(b, RT_F32, 1, s_b);
    rt_tensor dy = up(d0, RT_F32, 2, s_y), dy2 = up(d0, RT_F32, 2, s_y), ds = rt_tensor_alloc(g_gpu, RT_F32, 2, s_y);
    const rt_tensor *pb = bias ? &db : NULL;
    if (rt_matmul_add_native(g_gpu, &dy, &dx, &dw, pb) != native)
        fail_msg("matmul_add %s n=%lld: native %d, expected %d", rt_dtype_name(t), (long long)n, !native, native);
    int rc = rt_matmul_add(g_gpu, &dy, &dx, &dw, pb, native ? NULL : &ds);
    if (rc) fail_msg("matmul_add %s n=%lld: %s", rt_dtype_name(t), (long long)n, vc_err_msg());
    assert_int_equal(rt_matmul(g_gpu, &ds, &dx, &dw, pb), VC_OK);
    assert_int_equal(rt_add(g_gpu, &dy2, &dy2, &ds), VC_OK);
    down(got, &dy);
    down(two, &dy2);
    char what[96];
    snprintf(what, sizeof what, "%s n=%lld in=%lld out=%lld%s vs cpu", rt_dtype_name(t), (long long)n,
             (long long)in, (long long)out, bias ? " +bias" : "");
    note(RT_OP_MATMUL_ADD, nerr(got, ref, n * out), n > 8 ? 5e-2 : 2e-5, what);
    double e2 = nerr(got, two, n * out);
    if (!(e2 <= 1e-5)) fail_msg("matmul_add %s: vs the gpu's MATMUL + ADD %.3e > 1e-5", what, e2);
    drop(&dw);
    drop(&dx);
    drop(&db);
    drop(&dy);
    drop(&dy2);
    drop(&ds);
    free(w);
    free(x);
    free(b);
    free(d0);
    free(ref);
    free(got);
    free(two);
    free(scr);
}

/* dst bf16 (a bf16 residual stream) += x W^T over bf16 W, one GEMM with
 * C = D bf16: against the CPU's f32 MATMUL + ADD on the same widened
 * residual (MATMUL's bound) and against the GPU's own f32 MATMUL_ADD of
 * the same values rounded (within two bf16 roundings: one is up to 2^-8 of
 * an element, and cuBLAS's bf16-output kernels may round the product
 * before C is added: session 25 measured 5.5e-3 at n = 2048, more than one
 * rounding's 1/256 normalised). Where the GPU has no
 * kernel (decode rows, f16 W) and on the CPU, a bf16 dst is refused. */
static void matmul_add_bf16_case(rt_dtype t, int64_t n, int64_t in, int64_t out, bool native) {
    void *w = rand_rows(t, out, in, 1.0f, rnd);
    float *x = xmalloc((size_t)(n * in) * 4), *d0 = xmalloc((size_t)(n * out) * 4);
    float *ref = xmalloc((size_t)(n * out) * 4), *got = xmalloc((size_t)(n * out) * 4),
          *f32 = xmalloc((size_t)(n * out) * 4), *scr = xmalloc((size_t)(n * out) * 4);
    uint16_t *d16 = xmalloc((size_t)(n * out) * 2);
    fill(x, n * in, 1.5f);
    fill(d0, n * out, 8.0f);
    for (int64_t i = 0; i < n * out; i++) d16[i] = rt_f32_to_bf16(d0[i]), d0[i] = rt_bf16_to_f32(d16[i]);
    memcpy(ref, d0, (size_t)(n * out) * 4);
    int64_t s_w[2] = {out, in}, s_x[2] = {n, in}, s_y[2] = {n, out};
    rt_tensor hw = rt_tensor_make(w, t, RT_DEV_CPU, 2, s_w), hx = rt_tensor_make(x, RT_F32, RT_DEV_CPU, 2, s_x);
    rt_tensor hy = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 2, s_y), hs = rt_tensor_make(scr, RT_F32, RT_DEV_CPU, 2, s_y);
    rt_tensor hy16 = rt_tensor_make(d16, RT_BF16, RT_DEV_CPU, 2, s_y);
    assert_int_equal(rt_matmul_add(g_cpu, &hy16, &hx, &hw, NULL, &hs), VC_ERR_INVALID); /* no CPU kernel */
    assert_int_equal(rt_matmul_add(g_cpu, &hy, &hx, &hw, NULL, &hs), VC_OK);
    rt_tensor dw = up(w, t, 2, s_w), dx = up(x, RT_F32, 2, s_x), dy = up(d16, RT_BF16, 2, s_y);
    rt_tensor dyf = up(d0, RT_F32, 2, s_y);
    if (rt_matmul_add_native(g_gpu, &dy, &dx, &dw, NULL) != native)
        fail_msg("matmul_add bf16 dst %s n=%lld: native %d, expected %d", rt_dtype_name(t), (long long)n, !native,
                 native);
    if (!native) {
        assert_int_equal(rt_matmul_add(g_gpu, &dy, &dx, &dw, NULL, NULL), VC_ERR_INVALID);
    } else {
        assert_int_equal(rt_matmul_add(g_gpu, &dy, &dx, &dw, NULL, NULL), VC_OK);
        assert_int_equal(rt_matmul_add(g_gpu, &dyf, &dx, &dw, NULL, NULL), VC_OK);
        down(d16, &dy);
        down(f32, &dyf);
        for (int64_t i = 0; i < n * out; i++) got[i] = rt_bf16_to_f32(d16[i]);
        char what[96];
        snprintf(what, sizeof what, "bf16 dst, %s n=%lld in=%lld out=%lld vs cpu", rt_dtype_name(t), (long long)n,
                 (long long)in, (long long)out);
        note(RT_OP_MATMUL_ADD, nerr(got, ref, n * out), 5e-2, what);
        double e = nerr(got, f32, n * out);
        if (!(e <= 2.0 / 256)) fail_msg("matmul_add %s: vs the gpu's f32 MATMUL_ADD %.3e > 2/256", what, e);
    }
    drop(&dw);
    drop(&dx);
    drop(&dy);
    drop(&dyf);
    free(w);
    free(x);
    free(d0);
    free(ref);
    free(got);
    free(f32);
    free(scr);
    free(d16);
}

static void test_matmul_add(void **st) {
    (void)st;
    NEED_GPU();
    matmul_add_bf16_case(RT_BF16, 2048, 1024, 1024, true); /* the 0.6B's Wo at a 2048-token prefill */
    matmul_add_bf16_case(RT_BF16, 300, 3072, 1024, true);  /* its Wdown, rows not a multiple of the tiles */
    matmul_add_bf16_case(RT_F16, 64, 512, 256, false);     /* cuBLAS has no f16 GEMM into bf16 */
    matmul_add_bf16_case(RT_BF16, 1, 1024, 256, false);    /* decode rows: no bf16 residual there */
    matmul_add_case(RT_BF16, 64, 1024, 768, 0, true);   /* a prefill-shaped GEMM (Wo of a small model) */
    matmul_add_case(RT_BF16, 300, 2048, 1024, 1, true); /* + bias, rows not a multiple of the tiles */
    matmul_add_case(RT_F16, 40, 512, 256, 0, true);
    matmul_add_case(RT_BF16, 1, 1024, 256, 1, false);   /* decode rows: the GEMV, then ADD */
    matmul_add_case(RT_BF16, 4, 1024, 256, 0, false);
    matmul_add_case(RT_Q8_0, 64, 1024, 256, 0, false);  /* GGUF blocks: MATMUL (int8 GEMM) + ADD */
}

/* ---- RMSNORM / SOFTMAX / ARGMAX ---------------------------------------- */

/* Row shapes pick the kernel (cuda_norm.cuh): 7 and 4099 the loop kernel,
 * 1 x 4096 one float4 per thread, 300 rows the 256-thread blocks, 8192 and
 * 16384 more float4 per thread, prefill rows of 128 .. 1024 one float4 a
 * thread; f32 dst (also in place) and bf16 dst, the
 * latter against the CPU's f32 result within one bf16 rounding. */
/* A bf16 RMSNORM result dh against the f32 reference: within one
 * rounding (1/256 normalised); gh / got: host scratch of nd values. */
static void rmsnorm_bf16_check(uint16_t *gh, float *got, rt_tensor *dh, const float *ref, int64_t nd, const char *what) {
    down(gh, dh);
    for (int64_t i = 0; i < nd; i++) got[i] = rt_bf16_to_f32(gh[i]);
    double e = nerr(got, ref, nd);
    if (e > g_worst_bf16) g_worst_bf16 = e;
    if (!(e <= 1.0 / 256)) fail_msg("rmsnorm: %s normalised error %.3e > 1/256", what, e);
}

static void test_rmsnorm(void **st) {
    (void)st;
    NEED_GPU();
    const int64_t cs[][2] = {{5, 7},    {5, 64},    {5, 4099},   {1, 4096},  {300, 4096}, {2, 8192},
                             {300, 2048}, {1, 16384}, {300, 1024}, {600, 896}, {400, 128}};
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++)
        for (int off = 0; off < 2; off++) {
            int64_t rows = cs[k][0], d = cs[k][1], nd = rows * d, s[2] = {rows, d}, sw[1] = {d};
            float *x = xmalloc((size_t)nd * 4), *w = xmalloc((size_t)d * 4);
            float *ref = xmalloc((size_t)nd * 4), *got = xmalloc((size_t)nd * 4);
            uint16_t *gh = xmalloc((size_t)nd * 2);
            fill(x, nd, 3.0f);
            fill(w, d, 1.0f);
            rt_tensor hx = rt_tensor_make(x, RT_F32, RT_DEV_CPU, 2, s), hw = rt_tensor_make(w, RT_F32, RT_DEV_CPU, 1, sw);
            rt_tensor hy = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 2, s);
            assert_int_equal(rt_rmsnorm(g_cpu, &hy, &hx, &hw, 1e-5f, (float)off), VC_OK);
            rt_tensor dx = up(x, RT_F32, 2, s), dw = up(w, RT_F32, 1, sw);
            rt_tensor dy = rt_tensor_alloc(g_gpu, RT_F32, 2, s), dh = rt_tensor_alloc(g_gpu, RT_BF16, 2, s);
            assert_int_equal(rt_rmsnorm(g_gpu, &dh, &dx, &dw, 1e-5f, (float)off), VC_OK);
            rmsnorm_bf16_check(gh, got, &dh, ref, nd, "bf16 dst");
            assert_int_equal(rt_rmsnorm(g_gpu, &dy, &dx, &dw, 1e-5f, (float)off), VC_OK);
            down(got, &dy);
            note(RT_OP_RMSNORM, nerr(got, ref, nd), 1e-5, "out of place");
            assert_int_equal(rt_rmsnorm(g_gpu, &dx, &dx, &dw, 1e-5f, (float)off), VC_OK); /* in place */
            down(got, &dx);
            note(RT_OP_RMSNORM, nerr(got, ref, nd), 1e-5, "in place");
            /* bf16 x (a bf16 residual stream): against the CPU on the same
             * values widened, f32 dst within f32 reordering, bf16 dst
             * within one rounding */
            {
                uint16_t *xb = xmalloc((size_t)nd * 2);
                for (int64_t i = 0; i < nd; i++) xb[i] = rt_f32_to_bf16(x[i]), x[i] = rt_bf16_to_f32(xb[i]);
                assert_int_equal(rt_rmsnorm(g_cpu, &hy, &hx, &hw, 1e-5f, (float)off), VC_OK);
                rt_tensor dxb = up(xb, RT_BF16, 2, s);
                assert_int_equal(rt_rmsnorm(g_gpu, &dy, &dxb, &dw, 1e-5f, (float)off), VC_OK);
                down(got, &dy);
                note(RT_OP_RMSNORM, nerr(got, ref, nd), 1e-5, "bf16 x");
                assert_int_equal(rt_rmsnorm(g_gpu, &dh, &dxb, &dw, 1e-5f, (float)off), VC_OK);
                rmsnorm_bf16_check(gh, got, &dh, ref, nd, "bf16 x, bf16 dst");
                drop(&dxb);
                free(xb);
            }
            drop(&dx);
            drop(&dw);
            drop(&dy);
            drop(&dh);
            free(x);
            free(w);
            free(ref);
            free(got);
            free(gh);
        }
}

static void test_softmax(void **st) {
    (void)st;
    NEED_GPU();
    const int64_t rows = 3, cs[] = {1, 17, 5000};
    for (int k = 0; k < 3; k++) {
        int64_t c = cs[k], s[2] = {rows, c};
        float *x = xmalloc((size_t)(rows * c) * 4), *ref = xmalloc((size_t)(rows * c) * 4),
              *got = xmalloc((size_t)(rows * c) * 4);
        fill(x, rows * c, 8.0f);
        for (int64_t i = 0; i < c; i++) x[c + i] = -INFINITY; /* row 1: nothing to attend */
        if (c > 2) x[2 * c + 1] = -INFINITY;
        rt_tensor hx = rt_tensor_make(x, RT_F32, RT_DEV_CPU, 2, s), hy = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 2, s);
        assert_int_equal(rt_softmax(g_cpu, &hy, &hx), VC_OK);
        rt_tensor dx = up(x, RT_F32, 2, s);
        assert_int_equal(rt_softmax(g_gpu, &dx, &dx), VC_OK); /* in place */
        down(got, &dx);
        note(RT_OP_SOFTMAX, nerr(got, ref, rows * c), 1e-5, "in place");
        drop(&dx);
        free(x);
        free(ref);
        free(got);
    }
}

static void test_argmax(void **st) {
    (void)st;
    NEED_GPU();
    /* 50000 and 151936 (a vocab) take the split kernel: ties and NaN across chunks. */
    const int64_t rows = 4, cs[] = {1, 1000, 50000, 151936};
    for (int k = 0; k < 4; k++) {
        int64_t c = cs[k], s[2] = {rows, c}, sr[1] = {rows};
        float *x = xmalloc((size_t)(rows * c) * 4);
        fill(x, rows * c, 1.0f);
        if (c > 10) {
            x[0 * c + 3] = 5.0f; /* tie: lowest index wins */
            x[0 * c + c - 2] = 5.0f;
            x[1 * c + 7] = NAN; /* NaN never wins */
            x[1 * c + 9] = 7.0f;
            for (int64_t i = 0; i < c; i++) x[2 * c + i] = 0.25f; /* all equal -> 0 */
        }
        for (int64_t i = 0; i < c; i++) x[3 * c + i] = NAN; /* all NaN -> 0 */
        int32_t ref[4], got[4];
        rt_tensor hx = rt_tensor_make(x, RT_F32, RT_DEV_CPU, 2, s), hr = rt_tensor_make(ref, RT_I32, RT_DEV_CPU, 1, sr);
        assert_int_equal(rt_argmax(g_cpu, &hr, &hx), VC_OK);
        rt_tensor dx = up(x, RT_F32, 2, s), dr = rt_tensor_alloc(g_gpu, RT_I32, 1, sr);
        assert_int_equal(rt_argmax(g_gpu, &dr, &dx), VC_OK);
        down(got, &dr);
        assert_memory_equal(got, ref, sizeof ref);
        if (c > 10) {
            assert_int_equal(got[0], 3);
            assert_int_equal(got[1], 9);
        }
        drop(&dx);
        drop(&dr);
        free(x);
    }
}

/* ---- ROPE ---------------------------------------------------------------- */

static void test_rope(void **st) {
    (void)st;
    NEED_GPU();
    const int64_t n = 5, h = 3;
    int32_t pos[5] = {0, 1, 7, 1000, 4095};
    const int64_t hds[] = {32, 48, 128};
    for (int hi = 0; hi < 3; hi++) {
        int64_t hd = hds[hi], s[3] = {n, h, hd}, sp[1] = {n};
        float *x = xmalloc((size_t)(n * h * hd) * 4), *ref = xmalloc((size_t)(n * h * hd) * 4),
              *got = xmalloc((size_t)(n * h * hd) * 4);
        fill(x, n * h * hd, 2.0f);
        for (int neox = 0; neox < 2; neox++)
            for (int rot = 16; rot <= hd; rot += (int)hd - 16 > 16 ? (int)hd - 16 : 16) {
                float inv[64];
                for (int k = 0; k < rot / 2; k++) inv[k] = powf(10000.0f, -2.0f * k / rot);
                float af = rot < hd ? 1.25f : 1.0f;
                int64_t sf[1] = {rot / 2};
                memcpy(ref, x, (size_t)(n * h * hd) * 4);
                rt_tensor hx = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 3, s);
                rt_tensor hp = rt_tensor_make(pos, RT_I32, RT_DEV_CPU, 1, sp), hf = rt_tensor_make(inv, RT_F32, RT_DEV_CPU, 1, sf);
                assert_int_equal(rt_rope(g_cpu, &hx, &hp, &hf, rot, neox, af), VC_OK);
                rt_tensor dx = up(x, RT_F32, 3, s), dp = up(pos, RT_I32, 1, sp), df = up(inv, RT_F32, 1, sf);
                assert_int_equal(rt_rope(g_gpu, &dx, &dp, &df, rot, neox, af), VC_OK);
                down(got, &dx);
                note(RT_OP_ROPE, nerr(got, ref, n * h * hd), 1e-5, neox ? "neox" : "normal");
                drop(&dx);
                drop(&dp);
                drop(&df);
            }
        free(x);
        free(ref);
        free(got);
    }
}

/* ---- GLU / ADD / SCALE --------------------------------------------------- */

static void ew_case(int64_t rows, int64_t cols, int64_t pad) {
    /* tensors are [rows, cols] views of [rows, cols+pad] buffers */
    int64_t sb[2] = {rows, cols + pad};
    size_t nb = (size_t)(rows * (cols + pad));
    float *a = xmalloc(nb * 4), *b = xmalloc(nb * 4), *ref = xmalloc(nb * 4), *got = xmalloc(nb * 4);
    fill(a, (int64_t)nb, 6.0f);
    fill(b, (int64_t)nb, 2.0f);
    for (int kind = 0; kind < 4; kind++) {
        memset(ref, 0, nb * 4);
        rt_tensor ha = rt_tensor_make(a, RT_F32, RT_DEV_CPU, 2, sb), hb = rt_tensor_make(b, RT_F32, RT_DEV_CPU, 2, sb);
        rt_tensor hy = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 2, sb);
        rt_tensor da = up(a, RT_F32, 2, sb), db = up(b, RT_F32, 2, sb), dy = up(ref, RT_F32, 2, sb);
        ha.shape[1] = hb.shape[1] = hy.shape[1] = cols;
        da.shape[1] = db.shape[1] = dy.shape[1] = cols;
        rt_op op;
        if (kind < 2) {
            op = RT_OP_GLU;
            assert_int_equal(rt_glu(g_cpu, &hy, &ha, &hb, (rt_act)kind), VC_OK);
            assert_int_equal(rt_glu(g_gpu, &dy, &da, &db, (rt_act)kind), VC_OK);
        } else if (kind == 2) {
            op = RT_OP_ADD;
            assert_int_equal(rt_add(g_cpu, &hy, &ha, &hb), VC_OK);
            assert_int_equal(rt_add(g_gpu, &dy, &da, &db), VC_OK);
        } else {
            op = RT_OP_SCALE;
            assert_int_equal(rt_scale(g_cpu, &hy, &ha, -0.37f), VC_OK);
            assert_int_equal(rt_scale(g_gpu, &dy, &da, -0.37f), VC_OK);
        }
        dy.shape[1] = cols + pad;
        down(got, &dy);
        note(op, nerr(got, ref, (int64_t)nb), 1e-6, pad ? "strided" : "contiguous");
        drop(&da);
        drop(&db);
        drop(&dy);
    }
    free(a);
    free(b);
    free(ref);
    free(got);
}

static void test_elementwise(void **st) {
    (void)st;
    NEED_GPU();
    ew_case(1, 1, 0);
    ew_case(1, 13, 0);
    ew_case(4, 10000, 0);
    ew_case(7, 10, 6);
}

/* ---- ATTENTION ----------------------------------------------------------- */

static void attn_case(int64_t n, int64_t h, int64_t kvh, int64_t hd, int64_t n_past, int32_t window,
                      float softcap, rt_dtype kvt) {
    int64_t ctx = n_past + n + 3, sq[3] = {n, h, hd}, sk[3] = {ctx, kvh, hd};
    float *q = xmalloc((size_t)(n * h * hd) * 4), *ref = xmalloc((size_t)(n * h * hd) * 4),
          *got = xmalloc((size_t)(n * h * hd) * 4);
    fill(q, n * h * hd, 1.0f);
    void *k = rand_rows(kvt, ctx * kvh, hd, 1.0f, rnd), *v = rand_rows(kvt, ctx * kvh, hd, 1.0f, rnd);
    float scale = 1.0f / sqrtf((float)hd) * 3.0f; /* sharpen: softmax far from uniform */
    rt_tensor hq = rt_tensor_make(q, RT_F32, RT_DEV_CPU, 3, sq), ho = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 3, sq);
    rt_tensor hk = rt_tensor_make(k, kvt, RT_DEV_CPU, 3, sk), hv = rt_tensor_make(v, kvt, RT_DEV_CPU, 3, sk);
    assert_int_equal(rt_attention(g_cpu, &ho, &hq, &hk, &hv, n_past, scale, softcap, window), VC_OK);
    rt_tensor dq = up(q, RT_F32, 3, sq), dk = up(k, kvt, 3, sk), dv = up(v, kvt, 3, sk);
    rt_tensor dout = rt_tensor_alloc(g_gpu, RT_F32, 3, sq);
    assert_int_equal(rt_attention(g_gpu, &dout, &dq, &dk, &dv, n_past, scale, softcap, window), VC_OK);
    down(got, &dout);
    char what[96];
    snprintf(what, sizeof what, "n=%lld h=%lld/%lld hd=%lld past=%lld win=%d cap=%g %s", (long long)n, (long long)h,
             (long long)kvh, (long long)hd, (long long)n_past, window, softcap, rt_dtype_name(kvt));
    note(RT_OP_ATTENTION, nerr(got, ref, n * h * hd), 1e-5, what);
    drop(&dq);
    drop(&dk);
    drop(&dv);
    drop(&dout);
    free(q);
    free(ref);
    free(got);
    free(k);
    free(v);
}

static void test_attention(void **st) {
    (void)st;
    NEED_GPU();
    attn_case(7, 4, 2, 16, 0, 0, 0.0f, RT_F32);     /* prefill */
    attn_case(1, 8, 2, 128, 100, 0, 0.0f, RT_F16);  /* decode, f16 cache, 2 tiles */
    attn_case(9, 4, 4, 64, 20, 5, 30.0f, RT_F32);   /* sliding window + softcap */
    attn_case(3, 2, 1, 256, 70, 0, 0.0f, RT_F16);   /* hd 256: smaller tiles */
    attn_case(5, 6, 2, 80, 130, 0, 0.0f, RT_F32);   /* group 3, odd hd */
    attn_case(2, 2, 1, 512, 30, 0, 0.0f, RT_F32);   /* largest head the CPU reference takes */
    attn_case(40, 4, 2, 32, 300, 64, 0.0f, RT_F16); /* long context, window */
}

/* ---- KV_STORE / PAGED_ATTENTION ------------------------------------------ */

static void test_kv_store(void **st) {
    (void)st;
    NEED_GPU();
    const int64_t T = 6, kvh = 2, hd = 24, NB = 4, B = 4;
    int32_t slots[6] = {3, -1, 15, 0, 7, 8};
    for (int kind = 0; kind < 3; kind++) {
        rt_dtype ct = kind == 2 ? RT_BF16 : kind ? RT_F16 : RT_F32;
        int64_t sc[4] = {NB, B, kvh, hd}, ss[3] = {T, kvh, hd}, sl[1] = {T};
        void *cache = rand_rows(ct, NB * B * kvh, hd, 1.0f, rnd);
        size_t cb = rt_dtype_row_bytes(ct, hd) * (size_t)(NB * B * kvh);
        float *src = xmalloc((size_t)(T * kvh * hd) * 4);
        char *got = xmalloc(cb);
        fill(src, T * kvh * hd, 2.0f);
        rt_tensor dc = up(cache, ct, 4, sc), ds = up(src, RT_F32, 3, ss), dsl = up(slots, RT_I32, 1, sl);
        rt_tensor hc = rt_tensor_make(cache, ct, RT_DEV_CPU, 4, sc), hs = rt_tensor_make(src, RT_F32, RT_DEV_CPU, 3, ss);
        rt_tensor hsl = rt_tensor_make(slots, RT_I32, RT_DEV_CPU, 1, sl);
        assert_int_equal(rt_kv_store(g_cpu, &hc, &hs, &hsl), VC_OK);
        assert_int_equal(rt_kv_store(g_gpu, &dc, &ds, &dsl), VC_OK);
        down(got, &dc);
        assert_memory_equal(got, cache, cb);
        note(RT_OP_KV_STORE, 0.0, 0.0, "exact");
        int32_t bad[6] = {0, 1, 2, 3, 4, (int32_t)(NB * B)};
        rt_tensor dbad = up(bad, RT_I32, 1, sl);
        assert_int_equal(rt_kv_store(g_gpu, &dc, &ds, &dbad), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_ERR_INVALID);
        drop(&dbad);
        drop(&dc);
        drop(&ds);
        drop(&dsl);
        free(cache);
        free(src);
        free(got);
    }
}

/* The bound of a PAGED_ATTENTION call against the CPU op: prompt-heavy
 * batches over bf16/f16 caches take the tensor-core kernel (cuda_flash.cu:
 * q and p rounded to the cache dtype; test_cuda_flash), decode batches of
 * >= 32 rows x kv heads the tensor-core decode kernel (cuda_flash_dec.cu,
 * same rounding; test_cuda_attn_mixed); the f32 SIMT kernels 1e-5. */
static double paged_bound(rt_dtype kvt, int64_t hd, int64_t B, int64_t h, int64_t kvh, int64_t T, int64_t S) {
    const bool tc = kvt != RT_F32 && (hd == 64 || hd == 128) && (B & (B - 1)) == 0;
    const bool flash = tc && ((T >= 64 && T >= 4 * S) || (h / kvh <= 16 && T * kvh >= 32));
    return flash ? (kvt == RT_BF16 ? 1.5e-2 : 3e-3) : 1e-5;
}

static void paged_case(int64_t h, int64_t kvh, int64_t hd, int32_t window, float softcap, rt_dtype kvt) {
    enum { S = 3, NB = 20, B = 4, MB = 6 };
    int32_t seq_lens[S] = {5, 17, 9}, qsl[S + 1] = {0, 5, 6, 9}, bt[S * MB];
    int32_t perm[NB];
    for (int i = 0; i < NB; i++) perm[i] = i;
    for (int i = NB - 1; i > 0; i--) { /* shuffle the blocks */
        int j = (int)((rnd() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int used = 0;
    for (int s = 0; s < S; s++)
        for (int b = 0; b < MB; b++) bt[s * MB + b] = b * B < seq_lens[s] ? perm[used++] : -1;
    int64_t T = qsl[S], sq[3] = {T, h, hd}, sc[4] = {NB, B, kvh, hd}, sbt[2] = {S, MB}, ssl[1] = {S}, sqsl[1] = {S + 1};
    float *q = xmalloc((size_t)(T * h * hd) * 4), *ref = xmalloc((size_t)(T * h * hd) * 4),
          *got = xmalloc((size_t)(T * h * hd) * 4);
    fill(q, T * h * hd, 1.0f);
    void *k = rand_rows(kvt, NB * B * kvh, hd, 1.0f, rnd), *v = rand_rows(kvt, NB * B * kvh, hd, 1.0f, rnd);
    float scale = 3.0f / sqrtf((float)hd);
    rt_tensor hq = rt_tensor_make(q, RT_F32, RT_DEV_CPU, 3, sq), ho = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 3, sq);
    rt_tensor hk = rt_tensor_make(k, kvt, RT_DEV_CPU, 4, sc), hv = rt_tensor_make(v, kvt, RT_DEV_CPU, 4, sc);
    rt_tensor hbt = rt_tensor_make(bt, RT_I32, RT_DEV_CPU, 2, sbt), hqsl = rt_tensor_make(qsl, RT_I32, RT_DEV_CPU, 1, sqsl);
    rt_tensor hsl = rt_tensor_make(seq_lens, RT_I32, RT_DEV_CPU, 1, ssl);
    assert_int_equal(rt_paged_attention(g_cpu, &ho, &hq, &hk, &hv, &hbt, &hqsl, &hsl, scale, softcap, window), VC_OK);
    rt_tensor dq = up(q, RT_F32, 3, sq), dk = up(k, kvt, 4, sc), dv = up(v, kvt, 4, sc);
    rt_tensor dbt = up(bt, RT_I32, 2, sbt), dqsl = up(qsl, RT_I32, 1, sqsl), dsl = up(seq_lens, RT_I32, 1, ssl);
    rt_tensor dout = rt_tensor_alloc(g_gpu, RT_F32, 3, sq);
    assert_int_equal(rt_paged_attention(g_gpu, &dout, &dq, &dk, &dv, &dbt, &dqsl, &dsl, scale, softcap, window), VC_OK);
    down(got, &dout);
    char what[96];
    snprintf(what, sizeof what, "h=%lld/%lld hd=%lld win=%d cap=%g %s", (long long)h, (long long)kvh, (long long)hd,
             window, softcap, rt_dtype_name(kvt));
    note(RT_OP_PAGED_ATTENTION, nerr(got, ref, T * h * hd), paged_bound(kvt, hd, B, h, kvh, T, S), what);
    /* a block id out of range (the block of sequence 1's last key, which
     * every window reads) is reported at the next sync */
    bt[MB + (seq_lens[1] - 1) / B] = NB;
    rt_tensor dbad = up(bt, RT_I32, 2, sbt);
    assert_int_equal(rt_paged_attention(g_gpu, &dout, &dq, &dk, &dv, &dbad, &dqsl, &dsl, scale, softcap, window), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_ERR_INVALID);
    drop(&dbad);
    drop(&dq);
    drop(&dk);
    drop(&dv);
    drop(&dbt);
    drop(&dqsl);
    drop(&dsl);
    drop(&dout);
    free(q);
    free(ref);
    free(got);
    free(k);
    free(v);
}

/* A varlen batch of S <= 8 sequences (q_lens[s] rows over seq_lens[s]
 * cached tokens) over a shuffled block pool, against the CPU op. */
static void paged_batch_case(int64_t h, int64_t kvh, int64_t hd, int32_t window, float softcap, rt_dtype kvt,
                             int64_t B, int S, const int32_t *seq_lens, const int32_t *q_lens) {
    int64_t maxlen = 0;
    for (int i = 0; i < S; i++) maxlen = seq_lens[i] > maxlen ? seq_lens[i] : maxlen;
    const int64_t MB = maxlen / B + 2, NB = S * MB;
    int32_t qsl[9];
    qsl[0] = 0;
    for (int i = 0; i < S; i++) qsl[i + 1] = qsl[i] + q_lens[i];
    int32_t *bt = xmalloc((size_t)(S * MB) * 4), *perm = xmalloc((size_t)NB * 4);
    for (int64_t i = 0; i < NB; i++) perm[i] = (int32_t)i;
    for (int64_t i = NB - 1; i > 0; i--) {
        int64_t j = (int64_t)((rnd() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int64_t used = 0;
    for (int s = 0; s < S; s++)
        for (int64_t b = 0; b < MB; b++) bt[s * MB + b] = b * B < seq_lens[s] ? perm[used++] : -1;
    int64_t T = qsl[S], sq[3] = {T, h, hd}, sc[4] = {NB, B, kvh, hd}, sbt[2] = {S, MB}, ssl[1] = {S}, sqsl[1] = {S + 1};
    float *q = xmalloc((size_t)(T * h * hd) * 4), *ref = xmalloc((size_t)(T * h * hd) * 4),
          *got = xmalloc((size_t)(T * h * hd) * 4);
    fill(q, T * h * hd, 1.0f);
    void *k = rand_rows(kvt, NB * B * kvh, hd, 1.0f, rnd), *v = rand_rows(kvt, NB * B * kvh, hd, 1.0f, rnd);
    float scale = 2.0f / sqrtf((float)hd);
    rt_tensor hq = rt_tensor_make(q, RT_F32, RT_DEV_CPU, 3, sq), ho = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 3, sq);
    rt_tensor hk = rt_tensor_make(k, kvt, RT_DEV_CPU, 4, sc), hv = rt_tensor_make(v, kvt, RT_DEV_CPU, 4, sc);
    rt_tensor hbt = rt_tensor_make(bt, RT_I32, RT_DEV_CPU, 2, sbt), hqsl = rt_tensor_make(qsl, RT_I32, RT_DEV_CPU, 1, sqsl);
    rt_tensor hsl = rt_tensor_make((void *)seq_lens, RT_I32, RT_DEV_CPU, 1, ssl);
    assert_int_equal(rt_paged_attention(g_cpu, &ho, &hq, &hk, &hv, &hbt, &hqsl, &hsl, scale, softcap, window), VC_OK);
    rt_tensor dq = up(q, RT_F32, 3, sq), dk = up(k, kvt, 4, sc), dv = up(v, kvt, 4, sc);
    rt_tensor dbt = up(bt, RT_I32, 2, sbt), dqsl = up(qsl, RT_I32, 1, sqsl), dsl = up(seq_lens, RT_I32, 1, ssl);
    rt_tensor dout = rt_tensor_alloc(g_gpu, RT_F32, 3, sq);
    assert_int_equal(rt_paged_attention(g_gpu, &dout, &dq, &dk, &dv, &dbt, &dqsl, &dsl, scale, softcap, window), VC_OK);
    down(got, &dout);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    char what[112];
    snprintf(what, sizeof what, "batch T=%lld h=%lld/%lld hd=%lld B=%lld win=%d cap=%g %s", (long long)T, (long long)h,
             (long long)kvh, (long long)hd, (long long)B, window, softcap, rt_dtype_name(kvt));
    note(RT_OP_PAGED_ATTENTION, nerr(got, ref, T * h * hd), paged_bound(kvt, hd, B, h, kvh, T, S), what);
    drop(&dq);
    drop(&dk);
    drop(&dv);
    drop(&dbt);
    drop(&dqsl);
    drop(&dsl);
    drop(&dout);
    free(q);
    free(ref);
    free(got);
    free(k);
    free(v);
    free(bt);
    free(perm);
}

/* Decode-heavy batches (split-KV path): long and short contexts, a
 * prefill chunk among them. */
static void paged_long_case(int64_t h, int64_t kvh, int64_t hd, int32_t window, float softcap, rt_dtype kvt,
                            int64_t B) {
    const int32_t sl[4] = {650, 1, 300, 77}, ql[4] = {1, 1, 7, 1};
    paged_batch_case(h, kvh, hd, window, softcap, kvt, B, 4, sl, ql);
}

/* Prompt-heavy batches (the query-tiled prefill kernel): a chunk after a
 * cached prefix, a whole prompt, a decode row, tiles spanning sequences. */
static void paged_prefill_case(int64_t h, int64_t kvh, int64_t hd, int32_t window, rt_dtype kvt) {
    const int32_t sl[3] = {150, 45, 90}, ql[3] = {100, 45, 1};
    paged_batch_case(h, kvh, hd, window, 0.0f, kvt, 16, 3, sl, ql);
}

static void test_paged_attention(void **st) {
    (void)st;
    NEED_GPU();
    paged_case(4, 2, 16, 0, 0.0f, RT_F32);
    paged_case(8, 2, 128, 0, 0.0f, RT_F16);
    paged_case(6, 2, 80, 5, 30.0f, RT_F32);
    paged_case(2, 1, 256, 0, 0.0f, RT_F16);
    paged_case(8, 4, 128, 0, 0.0f, RT_BF16);
    paged_case(16, 2, 64, 3, 0.0f, RT_F32);
    paged_long_case(16, 8, 128, 0, 0.0f, RT_BF16, 16);
    paged_long_case(32, 4, 128, 0, 0.0f, RT_F16, 16);
    paged_long_case(8, 2, 64, 100, 0.0f, RT_F32, 32);
    paged_long_case(8, 2, 256, 0, 50.0f, RT_BF16, 16);
    paged_long_case(12, 12, 128, 0, 0.0f, RT_BF16, 16);
    paged_prefill_case(16, 8, 128, 0, RT_BF16);
    paged_prefill_case(32, 4, 128, 0, RT_F16);
    paged_prefill_case(8, 2, 64, 37, RT_F32);
    paged_prefill_case(12, 4, 64, 0, RT_BF16);
    paged_prefill_case(7, 7, 128, 0, RT_F32);
}

/* ---- COPY ---------------------------------------------------------------- */

static void copy_case(rt_dtype st, rt_dtype dt, int64_t rows, int64_t cols, int strided_dst) {
    int64_t s[2] = {rows, cols};
    void *src = rand_rows(st, rows, cols, 3.0f, rnd);
    /* strided_dst: dst is rows [1, 1+rows) x cols of a [rows+2, cols+8] plain buffer */
    int64_t sd[2] = {strided_dst ? rows + 2 : rows, strided_dst ? cols + 8 : cols};
    size_t dbytes = rt_dtype_row_bytes(dt, sd[1]) * (size_t)sd[0];
    char *ref = xmalloc(dbytes), *got = xmalloc(dbytes);
    rt_tensor hs = rt_tensor_make(src, st, RT_DEV_CPU, 2, s);
    rt_tensor hdw = rt_tensor_make(ref, dt, RT_DEV_CPU, 2, sd);
    rt_tensor ddw = up(ref, dt, 2, sd); /* zeros */
    rt_tensor hd = hdw, dd = ddw;
    if (strided_dst) {
        hd = rt_tensor_slice0(&hdw, 1, rows);
        dd = rt_tensor_slice0(&ddw, 1, rows);
        hd.shape[1] = dd.shape[1] = cols;
    }
    assert_int_equal(rt_copy(g_cpu, &hd, &hs), VC_OK);
    rt_tensor ds = up(src, st, 2, s);
    int rc = rt_copy(g_gpu, &dd, &ds);
    if (rc) fail_msg("copy %s -> %s: %s", rt_dtype_name(st), rt_dtype_name(dt), vc_err_msg());
    down(got, &ddw);
    if (memcmp(got, ref, dbytes))
        fail_msg("copy %s -> %s (%lldx%lld%s) differs from the CPU", rt_dtype_name(st), rt_dtype_name(dt),
                 (long long)rows, (long long)cols, strided_dst ? ", strided" : "");
    note(RT_OP_COPY, 0.0, 0.0, "exact");
    drop(&ds);
    drop(&ddw);
    free(src);
    free(ref);
    free(got);
}

static void test_copy(void **st) {
    (void)st;
    NEED_GPU();
    const rt_dtype fl[] = {RT_F32, RT_F16, RT_BF16};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            copy_case(fl[a], fl[b], 5, 37, 0);
            copy_case(fl[a], fl[b], 5, 37, 1);
        }
    for (size_t k = 3; k < N_WTYPES; k++) {
        rt_dtype t = g_wtypes[k];
        int64_t cols = rt_dtype_info(t)->block_elems == 256 ? 512 : 96;
        copy_case(t, RT_F32, 3, cols, 0);
        copy_case(t, RT_F32, 3, cols, 1);
        copy_case(t, t, 3, cols, 0);
    }
    /* f32 -> quantized is not done on the GPU: reported, not crashed */
    int64_t s[2] = {2, 32};
    rt_tensor a = rt_tensor_alloc(g_gpu, RT_F32, 2, s), q = rt_tensor_alloc(g_gpu, RT_Q8_0, 2, s);
    assert_int_equal(rt_copy(g_gpu, &q, &a), VC_ERR_UNSUPPORTED);
    drop(&a);
    drop(&q);
}

/* ---- errors -------------------------------------------------------------- */

static void test_errors(void **st) {
    (void)st;
    NEED_GPU();
    float x[8] = {0};
    int64_t s[2] = {2, 4};
    rt_tensor hx = rt_tensor_make(x, RT_F32, RT_DEV_CPU, 2, s);
    rt_tensor dx = rt_tensor_alloc(g_gpu, RT_F32, 2, s);
    assert_int_equal(rt_add(g_gpu, &dx, &dx, &hx), VC_ERR_INVALID); /* host tensor */
    assert_int_equal(rt_scale(g_gpu, &dx, &dx, 2.0f), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    drop(&dx);
}

/* Informational: achieved weight bandwidth of the decode GEMV (n=1) and
 * the prefill GEMM rate on a Llama-8B FFN-shaped matrix (random bytes as
 * weights: speed does not depend on the values). Checks only that the
 * calls succeed; the numbers are for the report. VLLM_CUDA_SPEED=0 skips it
 * (scripts/gpu_run.sh does under compute-sanitizer). */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_speed_report(void **st) {
    (void)st;
    NEED_GPU();
    const char *env = getenv("VLLM_CUDA_SPEED");
    if (env && !strcmp(env, "0")) skip();
    const int64_t out = 14336, in = 4096, nmax = 512;
    size_t maxb = (size_t)(out * in) * 4;
    uint32_t *bytes = xmalloc(maxb);
    for (size_t i = 0; i < maxb / 4; i++) bytes[i] = (uint32_t)(rnd() * 2147483647.0f) & 0x3BFF3BFFu; /* finite halves */
    float *x = xmalloc((size_t)(nmax * in) * 4);
    fill(x, nmax * in, 1.0f);
    int64_t sx[2] = {nmax, in}, sy[2] = {nmax, out};
    rt_tensor dx = up(x, RT_F32, 2, sx), dy = rt_tensor_alloc(g_gpu, RT_F32, 2, sy);
    const rt_dtype ts[] = {RT_F32, RT_F16, RT_BF16, RT_Q8_0, RT_Q4_0, RT_Q4_1, RT_Q4_K, RT_Q6_K};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
        int64_t sw[2] = {out, in};
        size_t wb = rt_dtype_row_bytes(ts[k], in) * (size_t)out;
        rt_tensor dw = up(bytes, ts[k], 2, sw);
        (void)wb;
        for (int pass = 0; pass < 2; pass++) {
            int64_t n = pass ? 256 : 1;
            rt_tensor x1 = rt_tensor_slice0(&dx, 0, n), y1 = rt_tensor_slice0(&dy, 0, n);
            assert_int_equal(rt_matmul(g_gpu, &y1, &x1, &dw, NULL), VC_OK); /* warm-up */
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            int iters = pass ? 5 : 20;
            double t0 = now_s();
            for (int i = 0; i < iters; i++) assert_int_equal(rt_matmul(g_gpu, &y1, &x1, &dw, NULL), VC_OK);
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            double dt = (now_s() - t0) / iters;
            if (pass == 0)
                print_message("speed: gemv  %-5s %lldx%lld n=1: %8.1f us, %6.0f GB/s of weights\n", rt_dtype_name(ts[k]),
                              (long long)out, (long long)in, dt * 1e6, (double)wb / dt * 1e-9);
            else
                print_message("speed: gemm  %-5s %lldx%lld n=%lld: %8.1f us, %6.1f TFLOP/s\n", rt_dtype_name(ts[k]),
                              (long long)out, (long long)in, (long long)n, dt * 1e6, 2.0 * n * in * out / dt * 1e-12);
        }
        drop(&dw);
    }
    drop(&dx);
    drop(&dy);
    free(bytes);
    free(x);
    /* device-to-device copy bandwidth (bytes read + written): the decode roofline's denominator */
    int64_t sc[1] = {(int64_t)1 << 27};
    rt_tensor a = rt_tensor_alloc(g_gpu, RT_I32, 1, sc), b = rt_tensor_alloc(g_gpu, RT_I32, 1, sc);
    if (a.data && b.data) {
        assert_int_equal(rt_tensor_copy_bytes(g_gpu, &b, &a), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        double t0 = now_s();
        for (int i = 0; i < 10; i++) assert_int_equal(rt_tensor_copy_bytes(g_gpu, &b, &a), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        double dt = (now_s() - t0) / 10;
        print_message("speed: d2d copy 512 MiB: %8.1f us, %6.0f GB/s (read + write)\n", dt * 1e6,
                      8.0 * (double)sc[0] / dt * 1e-9);
    }
    drop(&a);
    drop(&b);
}

static void test_report(void **st) {
    (void)st;
    NEED_GPU();
    for (int op = 0; op < RT_OP_COUNT; op++)
        print_message("cuda vs cpu: %-9s max normalised error %.3e\n", rt_op_name((rt_op)op), g_worst[op]);
    print_message("cuda vs cpu: rmsnorm to bf16 max normalised error %.3e\n", g_worst_bf16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embed),     cmocka_unit_test(test_matmul),  cmocka_unit_test(test_matmul_variants),
        cmocka_unit_test(test_gemv_rows), cmocka_unit_test(test_matmul_add), cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_softmax),   cmocka_unit_test(test_argmax),  cmocka_unit_test(test_rope),
        cmocka_unit_test(test_elementwise), cmocka_unit_test(test_attention), cmocka_unit_test(test_copy),
        cmocka_unit_test(test_kv_store),  cmocka_unit_test(test_paged_attention),
        cmocka_unit_test(test_errors),    cmocka_unit_test(test_speed_report), cmocka_unit_test(test_report),
    };
    cuda_test_filter();
    return cmocka_run_group_tests(tests, cuda_test_group_setup, cuda_test_group_teardown);
}
