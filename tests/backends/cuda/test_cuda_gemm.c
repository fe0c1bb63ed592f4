/* The bf16-activation paths of the CUDA GEMMs (cuda_gemm.cu) against the
 * CPU ops with the same values in f32, on random inputs:
 *   MATMUL      x in bf16 (dense and strided rows, aligned and not), f32 /
 *               f16 / bf16 W, n from 1 (cuBLAS even where the GEMV would
 *               take f32 rows) to 130, with a bias;
 *   MATMUL_GLU  bf16 dst from bf16 or f32 x (the GEMM writes bf16 gate|up
 *               into the scratch), f32 dst from bf16 x, SiLU and GELU-tanh,
 *               f and d not multiples of 8 (the scalar GLU path).
 * The CPU oracle gets x rounded to bf16 (what the GPU reads); f32 results
 * are then within fp32 accumulation-order noise (5e-5), bf16 results within
 * a few bf16 roundings of gate, up and the output (2e-2 normalised).
 * rt_backend_act_dtype over bf16 W (VLLM_CUDA_GEMV_MAX_N unset): f32 (the
 * GEMV) while n x in f32 values fit 8 KB (hidden 4096: 1 token; 1024: 2),
 * bf16 above; over quantized W f32 up to 2 tokens (the dp4a GEMV), bf16
 * from 3 (cuda_mmq; up to 8 with VLLM_CUDA_MMQ=0); when the backend can
 * write normed rows in bf16. Skips without a device.
 */
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

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float rnd(void) { return cuda_test_rnd(&g_rng); } /* [-1, 1) */

/* n values in [-amp, amp), rounded to bf16: f32 copy in xf, bits in xh. */
static void fill_bf16(float *xf, uint16_t *xh, int64_t n, float amp) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t b = rt_f32_to_bf16(amp * rnd());
        if (xh) xh[i] = b;
        xf[i] = rt_bf16_to_f32(b);
    }
}

/* W [out, in] of dtype t from f32 values (rounded to t; wf gets the rounded values). */
static void *make_w(rt_dtype t, float *wf, int64_t n) {
    if (t == RT_F32) return wf;
    uint16_t *h = xmalloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) {
        h[i] = t == RT_F16 ? rt_f32_to_f16(wf[i]) : rt_f32_to_bf16(wf[i]);
        wf[i] = t == RT_F16 ? rt_f16_to_f32(h[i]) : rt_bf16_to_f32(h[i]);
    }
    return h;
}

static void test_matmul_bf16_x(void **st) {
    (void)st;
    NEED_GPU();
    /* n 2..16 over bf16 W with in % 32 == 0 and 16-byte x rows: the tensor-core
     * skinny kernel (cuda_skinny.cu; NT 1 / 2, KS 1..8, rows not a multiple
     * of 16, bf16 dst); the rest cuBLAS */
    const struct { int64_t n, in, out, pad; rt_dtype t; int bias; rt_dtype dt; } cs[] = {
        {1, 64, 40, 0, RT_BF16, 0, RT_F32},      {9, 256, 96, 0, RT_BF16, 1, RT_F32},
        {64, 512, 200, 8, RT_BF16, 0, RT_F32},   {130, 128, 64, 0, RT_F16, 1, RT_F32},
        {17, 96, 48, 3, RT_BF16, 0, RT_F32},     {33, 64, 32, 0, RT_F32, 1, RT_F32},
        {2, 4096, 100, 0, RT_BF16, 1, RT_F32},   {3, 256, 40, 8, RT_BF16, 0, RT_F32},
        {8, 1024, 272, 0, RT_BF16, 1, RT_BF16},  {16, 512, 33, 0, RT_BF16, 1, RT_F32},
        {11, 2048, 64, 24, RT_BF16, 0, RT_BF16}, {5, 96, 48, 3, RT_BF16, 0, RT_F32},
        {6, 80, 24, 0, RT_BF16, 1, RT_F32},      {4, 14336, 48, 0, RT_BF16, 0, RT_F32},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        int64_t n = cs[k].n, in = cs[k].in, out = cs[k].out, ld = in + cs[k].pad;
        float *xf = xmalloc((size_t)(n * ld) * 4), *wf = xmalloc((size_t)(out * in) * 4), *b = xmalloc((size_t)out * 4);
        uint16_t *xh = xmalloc((size_t)(n * ld) * 2);
        float *yc = xmalloc((size_t)(n * out) * 4), *yg = xmalloc((size_t)(n * out) * 4);
        fill_bf16(xf, xh, n * ld, 1.0f);
        fill_bf16(wf, NULL, out * in, 0.1f);
        fill_bf16(b, NULL, out, 0.5f);
        void *wd = make_w(cs[k].t, wf, out * in);
        int64_t sxp[2] = {n, ld}, sw[2] = {out, in}, sy[2] = {n, out}, sb[1] = {out};
        /* CPU: f32 x rows (a strided view when padded) */
        rt_tensor hx = rt_tensor_2d(xf, RT_F32, RT_DEV_CPU, n, in);
        hx.stride[0] = ld * 4;
        rt_tensor hw = rt_tensor_make(wd, cs[k].t, RT_DEV_CPU, 2, sw), hy = rt_tensor_make(yc, RT_F32, RT_DEV_CPU, 2, sy);
        rt_tensor hb = rt_tensor_make(b, RT_F32, RT_DEV_CPU, 1, sb);
        assert_int_equal(rt_matmul(g_cpu, &hy, &hx, &hw, cs[k].bias ? &hb : NULL), VC_OK);
        rt_tensor dxp = up(xh, RT_BF16, 2, sxp), dw = up(wd, cs[k].t, 2, sw), db = up(b, RT_F32, 1, sb);
        rt_tensor dy = rt_tensor_alloc(g_gpu, cs[k].dt, 2, sy);
        rt_tensor dx = rt_tensor_2d(dxp.data, RT_BF16, RT_DEV_CUDA, n, in);
        dx.stride[0] = ld * 2;
        assert_int_equal(rt_matmul(g_gpu, &dy, &dx, &dw, cs[k].bias ? &db : NULL), VC_OK);
        if (cs[k].dt == RT_BF16) {
            uint16_t *yh = xmalloc((size_t)(n * out) * 2);
            down(yh, &dy);
            for (int64_t i = 0; i < n * out; i++) yg[i] = rt_bf16_to_f32(yh[i]);
            free(yh);
        } else {
            down(yg, &dy);
        }
        double e = nerr(yg, yc, n * out), bound = cs[k].dt == RT_BF16 ? 1e-2 : 5e-5; /* bf16: one rounding */
        print_message("matmul bf16 x, %s W, %s dst, n=%lld in=%lld out=%lld pad=%lld: %.2e\n", rt_dtype_name(cs[k].t),
                      rt_dtype_name(cs[k].dt), (long long)n, (long long)in, (long long)out, (long long)cs[k].pad, e);
        assert_true(e <= bound);
        drop(&dxp), drop(&dw), drop(&db), drop(&dy);
        if (wd != wf) free(wd);
        free(xf), free(wf), free(b), free(xh), free(yc), free(yg);
    }
}

static void test_matmul_glu_bf16(void **st) {
    (void)st;
    NEED_GPU();
    const struct { int64_t n, f, d; rt_dtype t, xt, dt; rt_act act; } cs[] = {
        {20, 200, 128, RT_BF16, RT_BF16, RT_BF16, RT_ACT_SILU},
        {77, 512, 256, RT_BF16, RT_F32, RT_BF16, RT_ACT_GELU_TANH},
        {9, 96, 64, RT_F16, RT_BF16, RT_BF16, RT_ACT_SILU},
        {12, 37, 72, RT_BF16, RT_BF16, RT_BF16, RT_ACT_SILU}, /* f % 8 != 0: scalar GLU */
        {33, 64, 128, RT_F32, RT_BF16, RT_BF16, RT_ACT_SILU}, /* f32 W: f32 scratch, bf16 dst */
        {4, 128, 64, RT_BF16, RT_BF16, RT_F32, RT_ACT_SILU},  /* 2..16 bf16 rows: the skinny kernel, f32 dst */
        {2, 1024, 1024, RT_BF16, RT_BF16, RT_BF16, RT_ACT_SILU},
        {7, 37, 96, RT_BF16, RT_BF16, RT_BF16, RT_ACT_SILU},    /* f % 16 != 0 */
        {16, 200, 256, RT_BF16, RT_BF16, RT_F32, RT_ACT_GELU_TANH},
        {13, 64, 4096, RT_BF16, RT_BF16, RT_BF16, RT_ACT_SILU},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        int64_t n = cs[k].n, f = cs[k].f, d = cs[k].d;
        float *xf = xmalloc((size_t)(n * d) * 4), *wf = xmalloc((size_t)(2 * f * d) * 4);
        uint16_t *xh = xmalloc((size_t)(n * d) * 2), *oh = xmalloc((size_t)(n * f) * 2);
        float *oc = xmalloc((size_t)(n * f) * 4), *og = xmalloc((size_t)(n * f) * 4);
        float *sc = xmalloc((size_t)(n * 2 * f) * 4);
        fill_bf16(xf, xh, n * d, 1.0f);
        fill_bf16(wf, NULL, 2 * f * d, 0.15f);
        void *wd = make_w(cs[k].t, wf, 2 * f * d);
        int64_t sx[2] = {n, d}, sw[2] = {2 * f, d}, so[2] = {n, f}, ss[2] = {n, 2 * f};
        rt_tensor hx = rt_tensor_make(xf, RT_F32, RT_DEV_CPU, 2, sx), hw = rt_tensor_make(wd, cs[k].t, RT_DEV_CPU, 2, sw);
        rt_tensor ho = rt_tensor_make(oc, RT_F32, RT_DEV_CPU, 2, so), hs = rt_tensor_make(sc, RT_F32, RT_DEV_CPU, 2, ss);
        assert_int_equal(rt_matmul_glu(g_cpu, &ho, &hx, &hw, cs[k].act, &hs), VC_OK);
        rt_tensor dx = cs[k].xt == RT_BF16 ? up(xh, RT_BF16, 2, sx) : up(xf, RT_F32, 2, sx);
        rt_tensor dw = up(wd, cs[k].t, 2, sw), dout = rt_tensor_alloc(g_gpu, cs[k].dt, 2, so);
        rt_tensor ds = rt_tensor_alloc(g_gpu, RT_F32, 2, ss);
        assert_non_null(dout.data);
        assert_int_equal(rt_matmul_glu(g_gpu, &dout, &dx, &dw, cs[k].act, &ds), VC_OK);
        if (cs[k].dt == RT_BF16) {
            down(oh, &dout);
            for (int64_t i = 0; i < n * f; i++) og[i] = rt_bf16_to_f32(oh[i]);
        } else {
            down(og, &dout);
        }
        double e = nerr(og, oc, n * f), bound = cs[k].dt == RT_BF16 ? 2e-2 : 5e-5;
        print_message("matmul_glu x %s -> dst %s, %s W, n=%lld f=%lld d=%lld: %.2e (bound %.0e)\n",
                      rt_dtype_name(cs[k].xt), rt_dtype_name(cs[k].dt), rt_dtype_name(cs[k].t), (long long)n,
                      (long long)f, (long long)d, e, bound);
        assert_true(e <= bound);
        drop(&dx), drop(&dw), drop(&dout), drop(&ds);
        if (wd != wf) free(wd);
        free(xf), free(wf), free(xh), free(oh), free(oc), free(og), free(sc);
    }
}

/* MATMUL_GLU with the GLU in a wgmma GEMM's epilogue (cuda_gemm_glu.cu,
 * VLLM_CUDA_GEMM_GLU=1 forces it, =0 keeps cuBLAS + k_glu; read at each
 * call): bf16 x, W and h, against the CPU op (f32 product and GLU, the
 * bound of test_matmul_glu_bf16) and against the GPU's cuBLAS + k_glu path
 * within two bf16 roundings (only the GEMM's summation order differs,
 * which may move a bf16 gate / up value by one step); the launch counter
 * proves which path ran. Shapes: the 0.6B and 8B-like gate|up, rows and
 * features past the 128 x 128 tile (TMA's zero fill, unstored outputs), an
 * odd number of token tiles (a cluster's second CTA past n) and a single
 * one, one K stage, GELU; every kernel (the cooperative one, ping-pong in
 * clusters of 2 and of 4), the ping-pong one also with many items a CTA
 * over fewer K stages than its ring (2 and 5: several items in the ring
 * at once, the warpgroups' turns). Then the default rule by the launch
 * counter and the kernel it took (unset: from K 2048 the cooperative
 * kernel at 1024 to 6144 rows; below, the ping-pong one at 1024 to 8192
 * rows, in clusters of 4 where that fills 4 rounds, else of 2) and the
 * speed of every path at gate|up shapes from SmolLM2-135M to the 8B
 * (VLLM_CUDA_SPEED=2: the 0.6B's and the 8B's only). */
/* The MATMUL_GLU path of the calls that follow: 0 cuBLAS + k_glu, 1 the
 * cooperative kernel, 2 / 3 ping-pong in clusters of 2 / 4; -1 the
 * default rule (the variables unset). */
static void glu_path(int v) {
    if (v < 0) {
        unsetenv("VLLM_CUDA_GEMM_GLU"), unsetenv("VLLM_CUDA_GEMM_GLU_PP"), unsetenv("VLLM_CUDA_GEMM_GLU_CL");
        return;
    }
    setenv("VLLM_CUDA_GEMM_GLU", v ? "1" : "0", 1);
    setenv("VLLM_CUDA_GEMM_GLU_PP", v >= 2 ? "1" : "0", 1);
    setenv("VLLM_CUDA_GEMM_GLU_CL", v == 2 ? "2" : "4", 1);
}

uint64_t cuda_gemm_glu_launches(void);
int cuda_gemm_glu_clusters(void);
int cuda_gemm_glu_variant(void);

static void test_gemm_glu_fused(void **st) {
    (void)st;
    NEED_GPU();
    const struct { int64_t n, f, d; rt_act act; } cs[] = {
        {2048, 3072, 1024, RT_ACT_SILU}, {300, 200, 512, RT_ACT_SILU}, {129, 136, 4096, RT_ACT_SILU},
        {64, 128, 64, RT_ACT_SILU},      {200, 96, 256, RT_ACT_GELU_TANH}, {1000, 1408, 2048, RT_ACT_SILU},
        {4096, 4096, 128, RT_ACT_SILU},  {777, 2056, 320, RT_ACT_SILU},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        int64_t n = cs[k].n, f = cs[k].f, d = cs[k].d;
        float *xf = xmalloc((size_t)(n * d) * 4), *wf = xmalloc((size_t)(2 * f * d) * 4);
        uint16_t *xh = xmalloc((size_t)(n * d) * 2), *oh = xmalloc((size_t)(n * f) * 2);
        float *oc = xmalloc((size_t)(n * f) * 4), *og = xmalloc((size_t)(n * f) * 4), *ou = xmalloc((size_t)(n * f) * 4);
        float *sc = xmalloc((size_t)(n * 2 * f) * 4);
        fill_bf16(xf, xh, n * d, 1.0f);
        fill_bf16(wf, NULL, 2 * f * d, 0.15f);
        void *wd = make_w(RT_BF16, wf, 2 * f * d);
        int64_t sx[2] = {n, d}, sw[2] = {2 * f, d}, so[2] = {n, f}, ss[2] = {n, 2 * f};
        rt_tensor hx = rt_tensor_make(xf, RT_F32, RT_DEV_CPU, 2, sx), hw = rt_tensor_make(wd, RT_BF16, RT_DEV_CPU, 2, sw);
        rt_tensor ho = rt_tensor_make(oc, RT_F32, RT_DEV_CPU, 2, so), hs = rt_tensor_make(sc, RT_F32, RT_DEV_CPU, 2, ss);
        assert_int_equal(rt_matmul_glu(g_cpu, &ho, &hx, &hw, cs[k].act, &hs), VC_OK);
        rt_tensor dx = up(xh, RT_BF16, 2, sx), dw = up(wd, RT_BF16, 2, sw);
        rt_tensor dout = rt_tensor_alloc(g_gpu, RT_BF16, 2, so), ds = rt_tensor_alloc(g_gpu, RT_F32, 2, ss);
        assert_non_null(dout.data);
        for (int v = 0; v < 4; v++) { /* cuBLAS + k_glu, the cooperative kernel, ping-pong in clusters of 2, 4 */
            const int fused = v > 0;
            glu_path(v);
            const uint64_t before = cuda_gemm_glu_launches();
            assert_int_equal(rt_matmul_glu(g_gpu, &dout, &dx, &dw, cs[k].act, &ds), VC_OK);
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            if ((cuda_gemm_glu_launches() != before) != (fused > 0))
                fail_msg("gemm_glu: the fused kernel %s with VLLM_CUDA_GEMM_GLU=%d", fused ? "did not run" : "ran",
                         fused);
            down(oh, &dout);
            for (int64_t i = 0; i < n * f; i++) (fused ? og : ou)[i] = rt_bf16_to_f32(oh[i]);
            if (!fused) continue;
            double e = nerr(og, oc, n * f), eu = nerr(og, ou, n * f);
            print_message("gemm_glu fused (%s) n=%lld f=%lld d=%lld: vs cpu %.2e, vs cuBLAS + k_glu %.2e\n",
                          v == 1 ? "cooperative" : v == 2 ? "ping-pong, clusters of 2" : "ping-pong, clusters of 4",
                          (long long)n, (long long)f, (long long)d, e, eu);
            assert_true(e <= 2e-2);
            assert_true(eu <= 1.6e-2);
        }
        glu_path(-1);
        drop(&dx), drop(&dw), drop(&dout), drop(&ds);
        free(wd);
        free(xf), free(wf), free(xh), free(oh), free(oc), free(og), free(ou), free(sc);
    }
    /* the default rule, by the launch counter (the values: the loop above) */
    /* fused: 0 not taken, else the kernel (cuda_gemm_glu_variant: 1 the
     * cooperative one, 2 / 4 ping-pong in clusters of 2 / 4; 4 where its
     * items fill 4 rounds of the H200's 30 clusters of 4) */
    const struct { int64_t n, d, f; int fused; } rule[] = {
        {1024, 4096, 128, 1},  {6144, 4096, 128, 1},  {6145, 4096, 128, 0}, {512, 4096, 128, 0},
        {2048, 2048, 128, 1},  {2048, 1024, 3072, 4}, {8192, 1024, 3072, 4}, {1024, 1024, 3072, 2},
        {1023, 1024, 3072, 0}, {8193, 1024, 128, 0},  {2048, 576, 1536, 2}};
    for (size_t k = 0; k < sizeof rule / sizeof rule[0]; k++) {
        const int64_t n = rule[k].n, f = rule[k].f, d = rule[k].d;
        int64_t sx[2] = {n, d}, sw[2] = {2 * f, d}, so[2] = {n, f}, ss[2] = {n, 2 * f};
        rt_tensor dx = rt_tensor_alloc(g_gpu, RT_BF16, 2, sx), dw = rt_tensor_alloc(g_gpu, RT_BF16, 2, sw);
        rt_tensor dout = rt_tensor_alloc(g_gpu, RT_BF16, 2, so), ds = rt_tensor_alloc(g_gpu, RT_F32, 2, ss);
        assert_non_null(dx.data);
        assert_non_null(dw.data);
        assert_non_null(dout.data);
        assert_non_null(ds.data);
        const uint64_t before = cuda_gemm_glu_launches();
        assert_int_equal(rt_matmul_glu(g_gpu, &dout, &dx, &dw, RT_ACT_SILU, &ds), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        if ((cuda_gemm_glu_launches() != before) != (rule[k].fused != 0))
            fail_msg("gemm_glu default: n=%lld K=%lld should %s the fused kernel", (long long)n, (long long)d,
                     rule[k].fused ? "take" : "not take");
        if (rule[k].fused) assert_true(cuda_gemm_glu_clusters() > 0);
        if (rule[k].fused && cuda_gemm_glu_variant() != rule[k].fused)
            fail_msg("gemm_glu default: n=%lld K=%lld took kernel %d, not %d", (long long)n, (long long)d,
                     cuda_gemm_glu_variant(), rule[k].fused);
        drop(&dx), drop(&dw), drop(&dout), drop(&ds);
    }
    const char *sp = getenv("VLLM_CUDA_SPEED");
    if (sp && !strcmp(sp, "0")) return;
    /* gate|up shapes (rows n, features f, K d): the 0.6B's at 512 to 8192
     * rows, SmolLM2-135M's, Qwen3-1.7B's, Qwen3-4B's and the 8B's at 2048;
     * VLLM_CUDA_SPEED=2 only the 0.6B's and the 8B's at 2048 */
    static const struct { int64_t n, f, d; } shp[] = {{2048, 3072, 1024}, {2048, 14336, 4096}, {512, 3072, 1024},
                                                     {1024, 3072, 1024},  {4096, 3072, 1024},   {8192, 3072, 1024},
                                                     {2048, 1536, 576},   {2048, 6144, 2048},   {2048, 9728, 2560}};
    const size_t n_sp = sp && !strcmp(sp, "2") ? 2 : sizeof shp / sizeof shp[0];
    for (size_t shape = 0; shape < n_sp; shape++) {
        const int64_t n = shp[shape].n, f = shp[shape].f, d = shp[shape].d;
        int64_t sx[2] = {n, d}, sw[2] = {2 * f, d}, so[2] = {n, f}, ss[2] = {n, 2 * f};
        uint16_t *xh = xmalloc((size_t)(n * d) * 2), *wh = xmalloc((size_t)(2 * f * d) * 2);
        for (int64_t i = 0; i < n * d; i++) xh[i] = rt_f32_to_bf16(0.1f * (float)(i % 5 - 2));
        for (int64_t i = 0; i < 2 * f * d; i++) wh[i] = rt_f32_to_bf16(0.01f * (float)(i % 7 - 3));
        rt_tensor dx = up(xh, RT_BF16, 2, sx), dw = up(wh, RT_BF16, 2, sw);
        rt_tensor dout = rt_tensor_alloc(g_gpu, RT_BF16, 2, so), ds = rt_tensor_alloc(g_gpu, RT_F32, 2, ss);
        assert_non_null(dout.data);
        assert_non_null(ds.data);
        static const char *const vname[4] = {"cuBLAS + k_glu", "fused, cooperative", "fused, ping-pong, clusters of 2",
                                             "fused, ping-pong, clusters of 4"};
        for (int v = 0; v < 4; v++) {
            glu_path(v);
            double us = cuda_test_time_mm(1, &dout, &dx, &dw, &ds, 0, 20); /* a graph of 20 calls */
            print_message("speed: matmul_glu %lld x %lld -> 2 x %lld bf16, %s: %.1f us (%.0f TFLOP/s)\n",
                          (long long)n, (long long)d, (long long)f, vname[v], us, 2.0 * n * d * 2 * f / us * 1e-6);
        }
        free(xh), free(wh);
        glu_path(-1);
        drop(&dx), drop(&dw), drop(&dout), drop(&ds);
    }
}

/* One call of rope_store_speed's graphs: the 32 MB copy (dirty), then
 * MATMUL_ROPE_STORE (op) with W copy and slot range r % 8. */
typedef struct {
    int dirty, op;
    rt_tensor *dd, *ds, *dq, *dx, *dw, *dqkv;
    const rt_rope_store_params *rp;
} rs_call_args;

static int rs_call(void *ctx, int r) {
    const rs_call_args *a = (const rs_call_args *)ctx;
    int rc = a->dirty ? rt_copy(g_gpu, a->dd, a->ds) : VC_OK;
    if (rc == VC_OK && a->op) rc = rt_matmul_rope_store(g_gpu, a->dq, a->dx, &a->dw[r % 8], a->dqkv, &a->rp[r % 8]);
    return rc;
}

/* us a MATMUL_ROPE_STORE call at the 0.6B's QKV shape (K 1024 -> 16 / 8
 * heads of 128, QK-norm) over n rows, graphs of 20 calls as a forward
 * sees them: 8 copies of W (64 MB, past the 50 MB L2) and 8 slot ranges of
 * 256 K-slot caches taken in turn; unfused (MATMUL + QK_ROPE_STORE), fused
 * in clusters of 2 and of 4; each also after a 32 MB copy that leaves L2
 * full of written lines ("L2 dirty", the copy's own time subtracted): in
 * the engine the fused kernel ran ~6 us longer than alone (session 21). */
static void rope_store_speed(int64_t n) {
    const int64_t d = 1024, h = 16, kvh = 8, hd = 128, out = (h + 2 * kvh) * hd, big = 262144;
    uint16_t *xh = xmalloc((size_t)(n * d) * 2), *wh = xmalloc((size_t)(out * d) * 2);
    for (int64_t i = 0; i < n * d; i++) xh[i] = rt_f32_to_bf16(rnd());
    for (int64_t i = 0; i < out * d; i++) wh[i] = rt_f32_to_bf16(0.03f * rnd());
    int32_t *pos = xmalloc((size_t)n * 4), *sl = xmalloc((size_t)n * 4);
    float invf[64], nw[128];
    for (int i = 0; i < 64; i++) invf[i] = powf(1e6f, -(float)i / 64.0f);
    for (int i = 0; i < 128; i++) nw[i] = 1.0f + 0.2f * rnd();
    for (int64_t t = 0; t < n; t++) pos[t] = (int32_t)t;
    int64_t sx[2] = {n, d}, sw[2] = {out, d}, sq[3] = {n, h, hd}, sqkv[2] = {n, out}, sc[3] = {big, kvh, hd};
    int64_t sn[1] = {n}, sf[1] = {64}, snw[1] = {128};
    rt_tensor dx = up(xh, RT_BF16, 2, sx), dpos = up(pos, RT_I32, 1, sn), dif = up(invf, RT_F32, 1, sf),
              dnw = up(nw, RT_F32, 1, snw);
    rt_tensor dq = rt_tensor_alloc(g_gpu, RT_BF16, 3, sq), dqkv = rt_tensor_alloc(g_gpu, RT_BF16, 2, sqkv);
    rt_tensor dk = rt_tensor_alloc(g_gpu, RT_BF16, 3, sc), dv = rt_tensor_alloc(g_gpu, RT_BF16, 3, sc);
    assert_non_null(dq.data);
    assert_non_null(dqkv.data);
    assert_non_null(dk.data);
    assert_non_null(dv.data);
    rt_tensor dw[8], dsl[8];
    rt_rope_store_params rp[8];
    for (int c = 0; c < 8; c++) {
        for (int64_t t = 0; t < n; t++) sl[t] = (int32_t)(c * 16384 + t);
        dw[c] = up(wh, RT_BF16, 2, sw), dsl[c] = up(sl, RT_I32, 1, sn);
        rp[c] = (rt_rope_store_params){.q_norm = &dnw, .k_norm = &dnw, .eps = 1e-6f, .pos = &dpos, .inv_freq = &dif,
                                       .rot_dim = 128, .neox = true, .attn_factor = 1.0f, .k_cache = &dk,
                                       .v_cache = &dv, .slots = &dsl[c]};
    }
    /* dirty: before each call a 32 MB copy leaves L2 full of written lines
     * (as a forward's earlier kernels do), the call's stores then evict
     * them; its time is the graph's minus the copies' alone */
    const int64_t sd[1] = {16 << 20};
    rt_tensor ds = rt_tensor_alloc(g_gpu, RT_BF16, 1, sd), dd = rt_tensor_alloc(g_gpu, RT_BF16, 1, sd);
    assert_non_null(ds.data);
    assert_non_null(dd.data);
    static const struct { const char *name, *on, *cl; } vs[] = {{"the copies alone", NULL, NULL},
                                                               {"MATMUL + QK_ROPE_STORE", "0", "2"},
                                                               {"fused, clusters of 2", "1", "2"},
                                                               {"fused, clusters of 4", "1", "4"}};
    double copies = 0.0;
    for (int dirty = 1; dirty >= 0; dirty--)
        for (size_t v = 0; v < sizeof vs / sizeof vs[0]; v++) {
            if (!vs[v].on && !dirty) continue;
            if (vs[v].on) setenv("VLLM_CUDA_QKV_ROPE", vs[v].on, 1), setenv("VLLM_CUDA_QKV_CL", vs[v].cl, 1);
            rs_call_args ca = {dirty, vs[v].on != NULL, &dd, &ds, &dq, &dx, dw, &dqkv, rp};
            double us = cuda_test_time_calls(rs_call, &ca, 0, 20);
            if (!vs[v].on) { /* first: subtracted from the dirty lines below */
                copies = us;
                continue;
            }
            if (dirty) us -= copies;
            print_message("speed: matmul_rope_store %lld x %lld -> %lld, %s%s: %.1f us (%.0f TFLOP/s)\n", (long long)n,
                          (long long)d, (long long)out, vs[v].name, dirty ? ", L2 dirty" : "", us,
                          2.0 * n * d * out / us * 1e-6);
        }
    drop(&ds), drop(&dd);
    unsetenv("VLLM_CUDA_QKV_ROPE"), unsetenv("VLLM_CUDA_QKV_CL");
    for (int c = 0; c < 8; c++) drop(&dw[c]), drop(&dsl[c]);
    drop(&dx), drop(&dpos), drop(&dif), drop(&dnw), drop(&dq), drop(&dqkv), drop(&dk), drop(&dv);
    free(xh), free(wh), free(pos), free(sl);
}

/* MATMUL_ROPE_STORE: the QKV GEMM with QK-norm, RoPE and the KV store in
 * the ping-pong kernel's epilogue (VLLM_CUDA_QKV_ROPE=1: every eligible
 * call) against the runtime's MATMUL + QK_ROPE_STORE on the same backend
 * (=0): q and both caches within two bf16 roundings (the GEMM's sum order
 * moves a bf16 q / k / v value by a step; the norm's sum order differs),
 * the untouched cache rows still zero in both; the launch counter proves
 * which path ran. Shapes: the 0.6B's (16 / 8 heads, QK-norm, 2048 tokens)
 * and an odd head count (5 / 1: the last 256-output tile half past W, no
 * norm) with padding slots and positions far into a sequence; clusters of
 * 2 and 4. Then the default rule (unset) by the launch counter, and the
 * speed lines (rope_store_speed; skipped with VLLM_CUDA_SPEED=0;
 * VLLM_TEST_RS_N=n: only n rows). */
uint64_t cuda_qkv_rope_launches(void);

static void test_matmul_rope_store(void **st) {
    (void)st;
    NEED_GPU();
    const struct { int64_t n, d, h, kvh; int norm, pos0; } cs[] = {{2048, 1024, 16, 8, 1, 0}, {1100, 512, 5, 1, 0, 30000}};
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        const int64_t n = cs[k].n, d = cs[k].d, h = cs[k].h, kvh = cs[k].kvh, hd = 128, out = (h + 2 * kvh) * hd;
        const int64_t n_slots = n + 64;
        float *xf = xmalloc((size_t)(n * d) * 4), *wf = xmalloc((size_t)(out * d) * 4);
        uint16_t *xh = xmalloc((size_t)(n * d) * 2);
        fill_bf16(xf, xh, n * d, 1.0f);
        for (int64_t i = 0; i < out * d; i++) wf[i] = 0.06f * rnd();
        void *wd = make_w(RT_BF16, wf, out * d);
        int32_t *pos = xmalloc((size_t)n * 4), *slots = xmalloc((size_t)n * 4);
        for (int64_t t = 0; t < n; t++) {
            pos[t] = (int32_t)(cs[k].pos0 + t);
            slots[t] = t % 97 == 5 ? -1 : (int32_t)((t * 7 + 3) % n_slots); /* a permutation of slots, some padding */
        }
        float invf[64], qn[128], kn[128];
        for (int i = 0; i < 64; i++) invf[i] = powf(1e6f, -(float)i / 64.0f);
        for (int i = 0; i < 128; i++) qn[i] = 1.0f + 0.2f * rnd(), kn[i] = 1.0f + 0.2f * rnd();
        int64_t sx[2] = {n, d}, sw[2] = {out, d}, sq[3] = {n, h, hd}, sqkv[2] = {n, out}, sc[3] = {n_slots, kvh, hd};
        int64_t sn[1] = {n}, sf[1] = {64}, snw[1] = {128};
        rt_tensor dx = up(xh, RT_BF16, 2, sx), dw = up(wd, RT_BF16, 2, sw), dpos = up(pos, RT_I32, 1, sn),
                  dsl = up(slots, RT_I32, 1, sn), dif = up(invf, RT_F32, 1, sf), dqn = up(qn, RT_F32, 1, snw),
                  dkn = up(kn, RT_F32, 1, snw);
        rt_tensor dqkv = rt_tensor_alloc(g_gpu, RT_BF16, 2, sqkv);
        assert_non_null(dqkv.data);
        const size_t cbytes = (size_t)(n_slots * kvh * hd) * 2, qbytes = (size_t)(n * h * hd) * 2;
        uint16_t *zero = xmalloc(cbytes > qbytes ? cbytes : qbytes);
        uint16_t *res[3][3]; /* [path][q, k cache, v cache] */
        for (int v = 0; v < 3; v++) { /* unfused, fused in clusters of 2, of 4 */
            setenv("VLLM_CUDA_QKV_ROPE", v ? "1" : "0", 1);
            setenv("VLLM_CUDA_QKV_CL", v == 2 ? "4" : "2", 1);
            rt_tensor dq = up(zero, RT_BF16, 3, sq), dk = up(zero, RT_BF16, 3, sc), dv = up(zero, RT_BF16, 3, sc);
            rt_rope_store_params rp = {.q_norm = cs[k].norm ? &dqn : NULL, .k_norm = cs[k].norm ? &dkn : NULL,
                                       .eps = 1e-6f, .w_offset = 0.0f, .pos = &dpos, .inv_freq = &dif,
                                       .rot_dim = 128, .neox = true, .attn_factor = 1.0f,
                                       .k_cache = &dk, .v_cache = &dv, .slots = &dsl};
            const uint64_t before = cuda_qkv_rope_launches();
            assert_int_equal(rt_matmul_rope_store(g_gpu, &dq, &dx, &dw, &dqkv, &rp), VC_OK);
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            if ((cuda_qkv_rope_launches() != before) != (v > 0))
                fail_msg("matmul_rope_store: the fused kernel %s (path %d)", v ? "did not run" : "ran", v);
            for (int o = 0; o < 3; o++) res[v][o] = xmalloc(o ? cbytes : qbytes);
            down(res[v][0], &dq), down(res[v][1], &dk), down(res[v][2], &dv);
            drop(&dq), drop(&dk), drop(&dv);
        }
        for (int v = 1; v < 3; v++)
            for (int o = 0; o < 3; o++) {
                const int64_t cnt = (int64_t)((o ? cbytes : qbytes) / 2);
                float *a = xmalloc((size_t)cnt * 4), *b = xmalloc((size_t)cnt * 4);
                int64_t zero_mismatch = 0;
                for (int64_t i = 0; i < cnt; i++) {
                    a[i] = rt_bf16_to_f32(res[0][o][i]), b[i] = rt_bf16_to_f32(res[v][o][i]);
                    zero_mismatch += (res[0][o][i] == 0) != (res[v][o][i] == 0) && (a[i] == 0.0f || b[i] == 0.0f) &&
                                     fabsf(a[i] - b[i]) > 1e-2f;
                }
                const double e = nerr(b, a, cnt);
                print_message("matmul_rope_store n=%lld d=%lld heads %lld/%lld %s, clusters of %d, %s: %.2e\n",
                              (long long)n, (long long)d, (long long)h, (long long)kvh, cs[k].norm ? "qk-norm" : "no norm",
                              v == 2 ? 4 : 2, o == 0 ? "q" : o == 1 ? "k cache" : "v cache", e);
                assert_true(e <= 1.6e-2);
                assert_int_equal(zero_mismatch, 0); /* rows written by one path only */
                free(a), free(b);
            }
        for (int v = 0; v < 3; v++)
            for (int o = 0; o < 3; o++) free(res[v][o]);
        unsetenv("VLLM_CUDA_QKV_ROPE");
        unsetenv("VLLM_CUDA_QKV_CL");
        drop(&dx), drop(&dw), drop(&dpos), drop(&dsl), drop(&dif), drop(&dqn), drop(&dkn), drop(&dqkv);
        free(xf), free(wf), free(xh), free(wd), free(pos), free(slots), free(zero);
    }
    /* the default rule (the variables unset), by the launch counter: the
     * 0.6B's shape at 2,048 rows fused; at 1,087 (its 3 rounds of items
     * 73% full) and 1,000 (below 1,024) not */
    const struct { int64_t n; int fused; } rule[] = {{2048, 1}, {1087, 0}, {1000, 0}, {8192, 1}};
    for (size_t k = 0; k < sizeof rule / sizeof rule[0]; k++) {
        const int64_t n = rule[k].n, d = 1024, h = 16, kvh = 8, hd = 128, out = (h + 2 * kvh) * hd;
        int64_t sx[2] = {n, d}, sw[2] = {out, d}, sq[3] = {n, h, hd}, sqkv[2] = {n, out}, sc[3] = {n, kvh, hd};
        int64_t sn[1] = {n}, sf[1] = {64};
        int32_t *sl = xmalloc((size_t)n * 4);
        for (int64_t t = 0; t < n; t++) sl[t] = -1; /* padding rows: nothing stored */
        float invf[64] = {0};
        rt_tensor dx = rt_tensor_alloc(g_gpu, RT_BF16, 2, sx), dw = rt_tensor_alloc(g_gpu, RT_BF16, 2, sw);
        rt_tensor dq = rt_tensor_alloc(g_gpu, RT_BF16, 3, sq), dqkv = rt_tensor_alloc(g_gpu, RT_BF16, 2, sqkv);
        rt_tensor dk = rt_tensor_alloc(g_gpu, RT_BF16, 3, sc), dv = rt_tensor_alloc(g_gpu, RT_BF16, 3, sc);
        rt_tensor dsl = up(sl, RT_I32, 1, sn), dpos = up(sl, RT_I32, 1, sn), dif = up(invf, RT_F32, 1, sf);
        assert_non_null(dx.data);
        assert_non_null(dw.data);
        assert_non_null(dq.data);
        assert_non_null(dqkv.data);
        assert_non_null(dk.data);
        assert_non_null(dv.data);
        rt_rope_store_params rp = {.eps = 1e-6f, .pos = &dpos, .inv_freq = &dif, .rot_dim = 128, .neox = true,
                                   .attn_factor = 1.0f, .k_cache = &dk, .v_cache = &dv, .slots = &dsl};
        const uint64_t before = cuda_qkv_rope_launches();
        assert_int_equal(rt_matmul_rope_store(g_gpu, &dq, &dx, &dw, &dqkv, &rp), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        if ((cuda_qkv_rope_launches() != before) != (rule[k].fused != 0))
            fail_msg("matmul_rope_store default: n=%lld should %s the fused kernel", (long long)n,
                     rule[k].fused ? "take" : "not take");
        drop(&dx), drop(&dw), drop(&dq), drop(&dqkv), drop(&dk), drop(&dv), drop(&dsl), drop(&dpos), drop(&dif);
        free(sl);
    }
    const char *sp = getenv("VLLM_CUDA_SPEED");
    if (sp && !strcmp(sp, "0")) return;
    static const int64_t ns[] = {1024, 2048, 4096, 8192};
    const char *only = getenv("VLLM_TEST_RS_N"); /* one row count (a profiler's run) */
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        if (!only || atoll(only) == ns[i]) rope_store_speed(ns[i]);
}

/* Swap g_gpu for a CUDA backend made while the variable `name` is `value`
 * (for settings a backend reads once); returns the one swapped out. */
/* A backend of its own with one variable set, until gpu_swap_back: the
 * backend reads its variables at first use, not when created. */
static rt_backend *gpu_swap_with(const char *name, const char *value) {
    setenv(name, value, 1);
    rt_backend_params p = rt_backend_params_default();
    rt_backend *old = g_gpu;
    g_gpu = rt_backend_create(RT_DEV_CUDA, &p);
    assert_non_null(g_gpu);
    return old;
}

static void gpu_swap_back(rt_backend *old, const char *name) {
    rt_backend_free(g_gpu);
    g_gpu = old;
    unsetenv(name);
}

/* The skinny kernel on f32 x rows (VLLM_CUDA_SKINNY_F32X=1, a backend of
 * its own): MATMUL and MATMUL_GLU at 2..8 rows of hidden sizes where the
 * GEMV would be bound by them, against the CPU in f32 (x split into bf16
 * hi + lo inside the kernel: within 1e-4 normalised, where one bf16
 * rounding of x would give ~2e-3). */
static void test_skinny_f32x(void **st) {
    (void)st;
    NEED_GPU();
    rt_backend *gpu = gpu_swap_with("VLLM_CUDA_SKINNY_F32X", "1");
    const struct { int64_t n, in, out, pad; int glu, bias; } cs[] = {
        {2, 4096, 100, 0, 0, 1}, {8, 4096, 272, 4, 0, 0}, {5, 14336, 48, 0, 0, 1}, {3, 1024, 33, 0, 0, 0},
        {4, 2048, 200, 0, 1, 0}, {8, 4096, 74, 0, 1, 0},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        const int64_t n = cs[k].n, in = cs[k].in, out = cs[k].out, ld = in + cs[k].pad, f = out / 2;
        const int64_t yo = cs[k].glu ? f : out;
        float *xf = xmalloc((size_t)(n * ld) * 4), *wf = xmalloc((size_t)(out * in) * 4), *b = xmalloc((size_t)out * 4);
        float *yc = xmalloc((size_t)(n * yo) * 4), *yg = xmalloc((size_t)(n * yo) * 4);
        float *sc = xmalloc((size_t)(n * out) * 4);
        for (int64_t i = 0; i < n * ld; i++) xf[i] = rnd();
        fill_bf16(wf, NULL, out * in, 0.1f);
        fill_bf16(b, NULL, out, 0.5f);
        void *wd = make_w(RT_BF16, wf, out * in);
        int64_t sxp[2] = {n, ld}, sw[2] = {out, in}, sy[2] = {n, yo}, sb[1] = {out}, ss[2] = {n, out};
        rt_tensor hx = rt_tensor_2d(xf, RT_F32, RT_DEV_CPU, n, in);
        hx.stride[0] = ld * 4;
        rt_tensor hw = rt_tensor_make(wd, RT_BF16, RT_DEV_CPU, 2, sw), hy = rt_tensor_make(yc, RT_F32, RT_DEV_CPU, 2, sy);
        rt_tensor hb = rt_tensor_make(b, RT_F32, RT_DEV_CPU, 1, sb), hs = rt_tensor_make(sc, RT_F32, RT_DEV_CPU, 2, ss);
        if (cs[k].glu) assert_int_equal(rt_matmul_glu(g_cpu, &hy, &hx, &hw, RT_ACT_SILU, &hs), VC_OK);
        else assert_int_equal(rt_matmul(g_cpu, &hy, &hx, &hw, cs[k].bias ? &hb : NULL), VC_OK);
        rt_tensor dxp = up(xf, RT_F32, 2, sxp), dw = up(wd, RT_BF16, 2, sw), db = up(b, RT_F32, 1, sb);
        rt_tensor dy = rt_tensor_alloc(g_gpu, RT_F32, 2, sy), ds = rt_tensor_alloc(g_gpu, RT_F32, 2, ss);
        rt_tensor dx = rt_tensor_2d(dxp.data, RT_F32, RT_DEV_CUDA, n, in);
        dx.stride[0] = ld * 4;
        if (cs[k].glu) assert_int_equal(rt_matmul_glu(g_gpu, &dy, &dx, &dw, RT_ACT_SILU, &ds), VC_OK);
        else assert_int_equal(rt_matmul(g_gpu, &dy, &dx, &dw, cs[k].bias ? &db : NULL), VC_OK);
        down(yg, &dy);
        const double e = nerr(yg, yc, n * yo);
        print_message("skinny f32 x, %s, n=%lld in=%lld out=%lld pad=%lld: %.2e\n", cs[k].glu ? "glu" : "matmul",
                      (long long)n, (long long)in, (long long)out, (long long)cs[k].pad, e);
        assert_true(e <= 1e-4);
        drop(&dxp), drop(&dw), drop(&db), drop(&dy), drop(&ds);
        free(wd), free(xf), free(wf), free(b), free(yc), free(yg), free(sc);
    }
    gpu_swap_back(gpu, "VLLM_CUDA_SKINNY_F32X");
}

/* The skinny kernel over GGUF block weights (VLLM_CUDA_SKINNY_QUANT=1, a
 * backend of its own): MATMUL (f32 y, with and without bias) and
 * MATMUL_GLU (bf16 y) of 2..16 bf16 x rows for every format with a device
 * decoder, against a double reference over the dequantized weights rounded
 * to bf16 (what the kernel feeds the tensor cores): f32 y within 5e-5
 * normalised, bf16 y (gate / up and the result rounded) within 1e-2. */
/* max |got - ref| / max |ref| */
static double max_norm_err(const float *got, const double *ref, int64_t count) {
    double e = 0.0, m = 1e-30;
    for (int64_t i = 0; i < count; i++) {
        e = fmax(e, fabs(got[i] - ref[i]));
        m = fmax(m, fabs(ref[i]));
    }
    return e / m;
}

static double skq_dot(const float *w, const float *x, int64_t in) {
    double s = 0.0;
    for (int64_t k = 0; k < in; k++) s += (double)w[k] * x[k];
    return s;
}

static void test_skinny_quant(void **st) {
    (void)st;
    NEED_GPU();
    rt_backend *gpu = gpu_swap_with("VLLM_CUDA_SKINNY_QUANT", "1");
    static const rt_dtype ts[] = {RT_Q4_0, RT_Q4_1, RT_Q8_0, RT_Q4_K, RT_Q5_K, RT_Q6_K};
    static const struct { int64_t n, out; int glu, bias; } cs[] = {
        {2, 40, 0, 1}, {7, 100, 0, 0}, {16, 48, 0, 1}, {4, 64, 1, 0}, {13, 36, 1, 0},
    };
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
        const rt_dtype t = ts[ti];
        const int64_t in = rt_dtype_info(t)->block_elems == 256 ? 512 : 160;
        for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
            const int64_t n = cs[k].n, out = cs[k].out, f = out / 2, yo = cs[k].glu ? f : out;
            void *w = rand_rows(t, out, in, 1.0f, rnd);
            float *wf = xmalloc((size_t)(out * in) * 4), *xf = xmalloc((size_t)(n * in) * 4);
            float *b = xmalloc((size_t)out * 4), *got = xmalloc((size_t)(n * yo) * 4);
            double *ref = xmalloc((size_t)(n * yo) * 8);
            uint16_t *xh = xmalloc((size_t)(n * in) * 2), *yh = xmalloc((size_t)(n * yo) * 2);
            const size_t rb = rt_dtype_row_bytes(t, in);
            for (int64_t r = 0; r < out; r++) {
                rt_dequant_row(t, (char *)w + r * rb, wf + r * in, in);
                for (int64_t i = 0; i < in; i++) wf[r * in + i] = rt_bf16_to_f32(rt_f32_to_bf16(wf[r * in + i]));
            }
            fill_bf16(xf, xh, n * in, 1.0f);
            fill_bf16(b, NULL, out, 0.5f);
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = 0; r < yo; r++) {
                    if (cs[k].glu) {
                        float g = rt_bf16_to_f32(rt_f32_to_bf16((float)skq_dot(wf + r * in, xf + i * in, in)));
                        float u = rt_bf16_to_f32(rt_f32_to_bf16((float)skq_dot(wf + (f + r) * in, xf + i * in, in)));
                        ref[i * yo + r] = (double)(g / (1.0f + expf(-g))) * u;
                    } else {
                        ref[i * yo + r] = skq_dot(wf + r * in, xf + i * in, in) + (cs[k].bias ? b[r] : 0.0);
                    }
                }
            int64_t sw[2] = {out, in}, sx[2] = {n, in}, sy[2] = {n, yo}, sb[1] = {out}, ss[2] = {n, out};
            rt_tensor dw = up(w, t, 2, sw), dx = up(xh, RT_BF16, 2, sx), db = up(b, RT_F32, 1, sb);
            rt_tensor dy = rt_tensor_alloc(g_gpu, cs[k].glu ? RT_BF16 : RT_F32, 2, sy);
            rt_tensor ds = rt_tensor_alloc(g_gpu, RT_F32, 2, ss);
            if (cs[k].glu) assert_int_equal(rt_matmul_glu(g_gpu, &dy, &dx, &dw, RT_ACT_SILU, &ds), VC_OK);
            else assert_int_equal(rt_matmul(g_gpu, &dy, &dx, &dw, cs[k].bias ? &db : NULL), VC_OK);
            if (cs[k].glu) {
                down(yh, &dy);
                for (int64_t i = 0; i < n * yo; i++) got[i] = rt_bf16_to_f32(yh[i]);
            } else {
                down(got, &dy);
            }
            const double e = max_norm_err(got, ref, n * yo);
            const double bound = cs[k].glu ? 1e-2 : 5e-5;
            print_message("skinny %s, %s, n=%lld in=%lld out=%lld: %.2e (bound %.0e)\n", rt_dtype_name(t),
                          cs[k].glu ? "glu" : cs[k].bias ? "matmul+bias" : "matmul", (long long)n, (long long)in,
                          (long long)out, e, bound);
            assert_true(e <= bound);
            drop(&dw), drop(&dx), drop(&db), drop(&dy), drop(&ds);
            free(w), free(wf), free(xf), free(b), free(got), free(ref), free(xh), free(yh);
        }
    }
    gpu_swap_back(gpu, "VLLM_CUDA_SKINNY_QUANT");
}

/* The decode GEMVs over GGUF block weights: MATMUL (with and without
 * bias) and MATMUL_GLU of 1, 3 and 8 f32 x rows for every format with a
 * device decoder, against a double reference over the dequantized weights.
 * Twice: the default backend (cuda_gemv_d4.cu, x quantized to 8 bits per
 * 32 values: within 2e-2 normalised, ~0.4% a value) and one with VLLM_CUDA_GEMV_D4=0 (cuda_gemv_q.cu at every
 * n, f32 x: within 5e-5). Rows long enough for several segments (in = 8352
 * / 9472), short rows, rows that are not 16-byte multiples (Q4_0 in 160:
 * 90 bytes, Q6_K in 1024: 840) whose loads start below the row, and 4,100
 * rows (more than one row per warp of the persistent d4 grid). */
static void gemv_quant_cases(int d4);

static void test_gemv_quant(void **st) {
    (void)st;
    NEED_GPU();
    gemv_quant_cases(1);
    rt_backend *gpu = gpu_swap_with("VLLM_CUDA_GEMV_D4", "0");
    gemv_quant_cases(0);
    gpu_swap_back(gpu, "VLLM_CUDA_GEMV_D4");
}

static void gemv_quant_cases(int d4) {
    static const rt_dtype ts[] = {RT_Q4_0, RT_Q4_1, RT_Q8_0, RT_Q4_K, RT_Q5_K, RT_Q6_K};
    static const struct { int64_t n, out; int glu, bias, big; } cs[] = {
        {1, 40, 0, 1, 1}, {3, 100, 0, 0, 0}, {8, 48, 0, 1, 1}, {1, 64, 1, 0, 1}, {3, 36, 1, 0, 0}, {8, 200, 1, 0, 1},
        {1, 4100, 0, 0, 0},
    };
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
        const rt_dtype t = ts[ti];
        const int kq = rt_dtype_info(t)->block_elems == 256;
        for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
            const int64_t in = cs[k].big ? (kq ? 9472 : 8352) : (kq ? 1024 : 160);
            const int64_t n = cs[k].n, out = cs[k].out, f = out / 2, yo = cs[k].glu ? f : out;
            void *w = rand_rows(t, out, in, 1.0f, rnd);
            float *wf = xmalloc((size_t)(out * in) * 4), *xf = xmalloc((size_t)(n * in) * 4);
            float *b = xmalloc((size_t)out * 4), *got = xmalloc((size_t)(n * yo) * 4);
            double *ref = xmalloc((size_t)(n * yo) * 8);
            const size_t rb = rt_dtype_row_bytes(t, in);
            for (int64_t r = 0; r < out; r++) rt_dequant_row(t, (char *)w + r * rb, wf + r * in, in);
            for (int64_t i = 0; i < n * in; i++) xf[i] = rnd();
            for (int64_t i = 0; i < out; i++) b[i] = 0.5f * rnd();
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = 0; r < yo; r++) {
                    if (cs[k].glu) {
                        double g = skq_dot(wf + r * in, xf + i * in, in), u = skq_dot(wf + (f + r) * in, xf + i * in, in);
                        ref[i * yo + r] = g / (1.0 + exp(-g)) * u;
                    } else {
                        ref[i * yo + r] = skq_dot(wf + r * in, xf + i * in, in) + (cs[k].bias ? b[r] : 0.0);
                    }
                }
            int64_t sw[2] = {out, in}, sx[2] = {n, in}, sy[2] = {n, yo}, sb[1] = {out}, ss[2] = {n, out};
            rt_tensor dw = up(w, t, 2, sw), dx = up(xf, RT_F32, 2, sx), db = up(b, RT_F32, 1, sb);
            rt_tensor dy = rt_tensor_alloc(g_gpu, RT_F32, 2, sy), ds = rt_tensor_alloc(g_gpu, RT_F32, 2, ss);
            if (cs[k].glu) assert_int_equal(rt_matmul_glu(g_gpu, &dy, &dx, &dw, RT_ACT_SILU, &ds), VC_OK);
            else assert_int_equal(rt_matmul(g_gpu, &dy, &dx, &dw, cs[k].bias ? &db : NULL), VC_OK);
            down(got, &dy);
            const double e = max_norm_err(got, ref, n * yo);
            const double bound = d4 ? 2e-2 : 5e-5;
            print_message("gemv%s %s, %s, n=%lld in=%lld out=%lld: %.2e (bound %.0e)\n", d4 ? "" : " (d4 off)",
                          rt_dtype_name(t), cs[k].glu ? "glu" : cs[k].bias ? "matmul+bias" : "matmul", (long long)n,
                          (long long)in, (long long)out, e, bound);
            assert_true(e <= bound);
            drop(&dw), drop(&dx), drop(&db), drop(&dy), drop(&ds);
            free(w), free(wf), free(xf), free(b), free(got), free(ref);
        }
    }
}

static void test_act_dtype(void **st) {
    (void)st;
    NEED_GPU();
    assert_int_equal(rt_backend_act_dtype(g_gpu, 1, RT_BF16, 4096), RT_F32);
    assert_int_equal(rt_backend_act_dtype(g_gpu, 1, RT_BF16, 1 << 20), RT_F32); /* at least one row */
    assert_int_equal(rt_backend_act_dtype(g_gpu, 1, RT_Q4_0, 4096), RT_F32);
    assert_int_equal(rt_backend_act_dtype(g_gpu, 2, RT_Q4_0, 4096), RT_F32);
    rt_dtype big = rt_backend_act_dtype(g_gpu, 2048, RT_BF16, 4096);
    assert_true(big == RT_F32 || big == RT_BF16);
    const char *mq = getenv("VLLM_CUDA_MMQ"), *mqn = getenv("VLLM_CUDA_MMQ_MIN_N");
    if ((!mq || strcmp(mq, "0")) && (!mqn || !*mqn)) /* GGUF: the tensor-core kernels from 3 rows */
        assert_int_equal(rt_backend_act_dtype(g_gpu, 3, RT_Q4_K, 4096), big);
    else
        assert_int_equal(rt_backend_act_dtype(g_gpu, 8, RT_Q4_0, 4096), RT_F32);
    const char *e = getenv("VLLM_CUDA_GEMV_MAX_N");
    if (!e || !*e) { /* the default: by the bytes of the x rows */
        assert_int_equal(rt_backend_act_dtype(g_gpu, 2, RT_BF16, 4096), big);
        assert_int_equal(rt_backend_act_dtype(g_gpu, 8, RT_F16, 4096), big);
        assert_int_equal(rt_backend_act_dtype(g_gpu, 2, RT_F16, 1024), RT_F32); /* 8 KB of f32 rows */
        assert_int_equal(rt_backend_act_dtype(g_gpu, 3, RT_F16, 1024), big);
        const char *sk = getenv("VLLM_CUDA_SKINNY"); /* bf16 W: the skinny kernel from 2 rows */
        assert_int_equal(rt_backend_act_dtype(g_gpu, 2, RT_BF16, 1024), sk && !strcmp(sk, "0") ? RT_F32 : big);
    }
    assert_int_equal(rt_backend_act_dtype(g_gpu, 9, RT_Q4_0, 4096), big);
    if (big == RT_BF16) { /* then the norms write bf16 (the contract of act_dtype) */
        const int64_t n = 16, d = 256;
        float *x = xmalloc((size_t)(n * d) * 4), *w = xmalloc((size_t)d * 4);
        for (int64_t i = 0; i < n * d; i++) x[i] = rnd();
        for (int64_t i = 0; i < d; i++) w[i] = 1.0f + 0.1f * rnd();
        int64_t sx[2] = {n, d}, sw[1] = {d};
        rt_tensor dx = up(x, RT_F32, 2, sx), dw = up(w, RT_F32, 1, sw), dr = up(x, RT_F32, 2, sx);
        rt_tensor dy = rt_tensor_alloc(g_gpu, RT_BF16, 2, sx);
        assert_int_equal(rt_rmsnorm(g_gpu, &dy, &dx, &dw, 1e-6f, 0.0f), VC_OK);
        assert_int_equal(rt_add_rmsnorm(g_gpu, &dy, &dx, &dr, &dw, 1e-6f, 0.0f), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        drop(&dx), drop(&dw), drop(&dr), drop(&dy);
        free(x), free(w);
    }
    print_message("act_dtype: n=1 f32, n=2048 %s\n", rt_dtype_name(big));
}

/* test_skinny_speed (skipped when VLLM_CUDA_SPEED=0): the decode matmuls of
 * the Llama-3.1-8B and Qwen3-0.6B shapes (QKV, Wo, gate|up with the GLU,
 * down) at n = 2, 4, 8, 16 bf16 rows, each as a CUDA graph of 20 calls
 * (no launch gaps), with the skinny kernel's KS by its rule and forced to
 * 1 / 2 / 4 / 8 (VLLM_CUDA_SKINNY_KS), and cuBLAS (VLLM_CUDA_SKINNY=0);
 * next to the n = 1 f32-row GEMV. One line per shape and n: us and W's
 * GB/s per configuration ("speed: skinny ..."). A backend is made per
 * configuration (both variables are read once per backend). */
typedef struct {
    const char *model, *name;
    int64_t out, in;
    int glu;
} sk_shape;

static const sk_shape SK_SHAPES[] = {
    {"llama-8b", "qkv", 6144, 4096, 0},    {"llama-8b", "wo", 4096, 4096, 0},   {"llama-8b", "gate_up", 28672, 4096, 1},
    {"llama-8b", "down", 4096, 14336, 0},  {"qwen3-0.6b", "qkv", 4096, 1024, 0}, {"qwen3-0.6b", "wo", 1024, 2048, 0},
    {"qwen3-0.6b", "gate_up", 6144, 1024, 1}, {"qwen3-0.6b", "down", 1024, 3072, 0},
};
#define SK_NS 5 /* n = 1 (the GEMV), 2, 4, 8, 16 */
#define SK_CFGS 8

/* us per call (cuda_test_time_mm, 20 calls a graph) */
static double sk_time_x(int glu, rt_tensor *y, rt_tensor *x, rt_tensor *w, rt_tensor *s, int eager) {
    return cuda_test_time_mm(glu, y, x, w, s, eager, 20);
}

static double sk_time(int glu, rt_tensor *y, rt_tensor *x, rt_tensor *w, rt_tensor *s) {
    return sk_time_x(glu, y, x, w, s, 0);
}

static void test_skinny_speed(void **st) {
    (void)st;
    NEED_GPU();
    const char *e = getenv("VLLM_CUDA_SPEED");
    if (e && !strcmp(e, "0")) skip();
    /* the last two take f32 x rows (n <= 8): the skinny kernel's hi / lo
     * split (VLLM_CUDA_SKINNY_F32X=1) and the f32-row GEMV (VLLM_CUDA_GEMV_MAX_N=8) */
    static const char *cfg_name[SK_CFGS] = {"rule", "ks1", "ks2", "ks4", "ks8", "cublas", "f32x", "gemv-f32"};
    static const char *cfg_ks[SK_CFGS] = {"", "1", "2", "4", "8", "", "", ""};
    static const int ns[SK_NS] = {1, 2, 4, 8, 16};
    const int nshape = (int)(sizeof SK_SHAPES / sizeof SK_SHAPES[0]);
    static double us[sizeof SK_SHAPES / sizeof SK_SHAPES[0]][SK_NS][SK_CFGS];
    int64_t maxw = 0, maxin = 0, maxout = 0;
    for (int i = 0; i < nshape; i++) {
        if (SK_SHAPES[i].out * SK_SHAPES[i].in > maxw) maxw = SK_SHAPES[i].out * SK_SHAPES[i].in;
        if (SK_SHAPES[i].in > maxin) maxin = SK_SHAPES[i].in;
        if (SK_SHAPES[i].out > maxout) maxout = SK_SHAPES[i].out;
    }
    uint16_t *wh = xmalloc((size_t)maxw * 2), *xh = xmalloc((size_t)(16 * maxin) * 2);
    float *xf = xmalloc((size_t)(8 * maxin) * 4);
    for (int64_t i = 0; i < maxw; i++) wh[i] = rt_f32_to_bf16(0.01f * (float)(i % 7 - 3));
    for (int64_t i = 0; i < 16 * maxin; i++) xh[i] = rt_f32_to_bf16(0.1f * (float)(i % 5 - 2));
    for (int64_t i = 0; i < 8 * maxin; i++) xf[i] = 0.1f * (float)(i % 5 - 2);
    rt_backend_params p = rt_backend_params_default();
    for (int c = 0; c < SK_CFGS; c++) {
        const int f32x = c >= 6;
        setenv("VLLM_CUDA_SKINNY_KS", cfg_ks[c], 1);
        setenv("VLLM_CUDA_SKINNY", c == 5 ? "0" : "16", 1);
        setenv("VLLM_CUDA_SKINNY_F32X", c == 6 ? "1" : "0", 1);
        setenv("VLLM_CUDA_GEMV_MAX_N", c == 7 ? "8" : "", 1);
        rt_backend_free(g_gpu);
        g_gpu = rt_backend_create(RT_DEV_CUDA, &p);
        assert_non_null(g_gpu);
        for (int i = 0; i < nshape; i++) {
            const sk_shape *sh = &SK_SHAPES[i];
            const int64_t f = sh->out / 2, yo = sh->glu ? f : sh->out;
            int64_t sw[2] = {sh->out, sh->in}, sx[2] = {16, sh->in}, sx1[2] = {f32x ? 8 : 1, sh->in};
            int64_t sy[2] = {16, yo}, ss[2] = {16, sh->out};
            rt_tensor w = up(wh, RT_BF16, 2, sw), xb = up(xh, RT_BF16, 2, sx), x1 = up(xf, RT_F32, 2, sx1);
            rt_tensor yb = rt_tensor_alloc(g_gpu, sh->glu ? RT_BF16 : RT_F32, 2, sy); /* decode: GLU -> bf16 rows */
            rt_tensor yf = rt_tensor_alloc(g_gpu, RT_F32, 2, sy), sc = rt_tensor_alloc(g_gpu, RT_F32, 2, ss);
            assert_non_null(yb.data);
            assert_non_null(yf.data);
            assert_non_null(sc.data);
            for (int k = 0; k < SK_NS; k++) {
                const int n = ns[k];
                if ((n == 1 && c) || (f32x && n > 8)) continue; /* the GEMV: once; f32 rows: to 8 */
                rt_tensor xv = n == 1 || f32x ? rt_tensor_slice0(&x1, 0, n) : rt_tensor_slice0(&xb, 0, n);
                rt_tensor yv = rt_tensor_slice0(n == 1 || f32x ? &yf : &yb, 0, n), sv = rt_tensor_slice0(&sc, 0, n);
                us[i][k][c] = sk_time(sh->glu, &yv, &xv, &w, &sv);
            }
            drop(&w), drop(&xb), drop(&x1), drop(&yb), drop(&yf), drop(&sc);
        }
    }
    unsetenv("VLLM_CUDA_SKINNY_KS");
    unsetenv("VLLM_CUDA_SKINNY");
    unsetenv("VLLM_CUDA_SKINNY_F32X");
    unsetenv("VLLM_CUDA_GEMV_MAX_N");
    rt_backend_free(g_gpu);
    g_gpu = rt_backend_create(RT_DEV_CUDA, &p);
    assert_non_null(g_gpu);
    for (int i = 0; i < nshape; i++) {
        const sk_shape *sh = &SK_SHAPES[i];
        const double gb = (double)(sh->out * sh->in * 2) * 1e-9;
        print_message("speed: skinny %-10s %-7s %6lld x %6lld, n=1 GEMV: %7.1f us = %5.0f GB/s\n", sh->model, sh->name,
                      (long long)sh->out, (long long)sh->in, us[i][0][0], gb / (us[i][0][0] * 1e-6));
        for (int k = 1; k < SK_NS; k++) {
            char line[512];
            int o = 0;
            for (int c = 0; c < SK_CFGS; c++) {
                if (c >= 6 && ns[k] > 8) continue;
                o += snprintf(line + o, sizeof line - (size_t)o, " %s %6.1f us %5.0f GB/s;", cfg_name[c], us[i][k][c],
                              gb / (us[i][k][c] * 1e-6));
            }
            print_message("speed: skinny %-10s %-7s n=%2d:%s\n", sh->model, sh->name, ns[k], line);
        }
    }
    free(wh), free(xh), free(xf);
}

/* test_skinny_quant_speed (skipped when VLLM_CUDA_SPEED=0): the 8B's decode
 * matmuls (QKV, gate|up + GLU, down) in Q4_0, Q4_K, Q6_K and Q8_0 at n =
 * 1..16 rows, graph-timed as test_skinny_speed, seven backends: the
 * default (cuda_gemv_d4.cu to 4 rows, cuda_gemv_q.cu to 8, cuBLAS over a
 * dequantized copy at 16), "gemv-q" (VLLM_CUDA_GEMV_D4=0), d4 tunings
 * (VLLM_CUDA_GEMV_D4_CPS 3, VLLM_CUDA_GEMV_D4_N1 0, VLLM_CUDA_GEMV_D4_SEG 1), "old" (VLLM_CUDA_GEMV_Q=0: k_gemv_quant, and MATMUL_GLU over
 * the dequantized copy at every n) and "skinny" (VLLM_CUDA_SKINNY_QUANT=1:
 * bf16 x from 2 rows). Paths that dequantize allocate a copy per call,
 * which a graph cannot record: those are timed eager. One row repeated as
 * the weights (the speed does not depend on the values). */
static void test_skinny_quant_speed(void **st) {
    (void)st;
    NEED_GPU();
    const char *e = getenv("VLLM_CUDA_SPEED");
    if (e && !strcmp(e, "0")) skip();
    static const rt_dtype ts[] = {RT_Q4_0, RT_Q4_K, RT_Q6_K, RT_Q8_0};
    enum { NT = sizeof ts / sizeof ts[0], NC = 7 };
    /* name, then VLLM_CUDA_GEMV_Q, _GEMV_D4, _SKINNY_QUANT, _GEMV_D4_SEG, _GEMV_D4_CPS, _GEMV_D4_N1 */
    static const char *cfg[NC][7] = {{"default", "", "", "0", "", "", ""},   {"old", "0", "", "0", "", "", ""},
                                     {"skinny", "", "", "1", "", "", ""},     {"gemv-q", "", "0", "0", "", "", ""},
                                     {"d4-cps3", "", "", "0", "", "3", ""},   {"d4-n1off", "", "", "0", "", "", "0"},
                                     {"d4-seg1", "", "", "0", "1", "", ""}};
    static const char *cvar[6] = {"VLLM_CUDA_GEMV_Q",      "VLLM_CUDA_GEMV_D4",     "VLLM_CUDA_SKINNY_QUANT",
                                  "VLLM_CUDA_GEMV_D4_SEG", "VLLM_CUDA_GEMV_D4_CPS", "VLLM_CUDA_GEMV_D4_N1"};
    static const int ns[5] = {1, 2, 4, 8, 16};
    static const sk_shape shp[3] = {
        {"llama-8b", "qkv", 6144, 4096, 0}, {"llama-8b", "gate_up", 28672, 4096, 1}, {"llama-8b", "down", 4096, 14336, 0}};
    static double us[NT][3][5][NC];
    rt_backend_params p = rt_backend_params_default();
    for (int cf = 0; cf < NC; cf++) {
        for (int v = 0; v < 6; v++) setenv(cvar[v], cfg[cf][v + 1], 1);
        rt_backend_free(g_gpu);
        g_gpu = rt_backend_create(RT_DEV_CUDA, &p);
        assert_non_null(g_gpu);
        for (int ti = 0; ti < NT; ti++)
            for (int i = 0; i < 3; i++) {
                const sk_shape *sh = &shp[i];
                const size_t rb = rt_dtype_row_bytes(ts[ti], sh->in);
                void *row = rand_rows(ts[ti], 1, sh->in, 1.0f, rnd);
                char *wh = xmalloc(rb * (size_t)sh->out);
                for (int64_t r = 0; r < sh->out; r++) memcpy(wh + (size_t)r * rb, row, rb);
                uint16_t *xh = xmalloc((size_t)(16 * sh->in) * 2);
                float *xf = xmalloc((size_t)(16 * sh->in) * 4);
                for (int64_t k = 0; k < 16 * sh->in; k++) {
                    xf[k] = 0.1f * (float)(k % 5 - 2);
                    xh[k] = rt_f32_to_bf16(xf[k]);
                }
                const int64_t yo = sh->glu ? sh->out / 2 : sh->out;
                int64_t sw[2] = {sh->out, sh->in}, sx[2] = {16, sh->in}, sy[2] = {16, yo}, ss[2] = {16, sh->out};
                rt_tensor w = up(wh, ts[ti], 2, sw), xb = up(xh, RT_BF16, 2, sx), x32 = up(xf, RT_F32, 2, sx);
                rt_tensor yf = rt_tensor_alloc(g_gpu, RT_F32, 2, sy), yb = rt_tensor_alloc(g_gpu, RT_BF16, 2, sy);
                rt_tensor sc = rt_tensor_alloc(g_gpu, RT_F32, 2, ss);
                for (int k = 0; k < 5; k++) {
                    const int n = ns[k], bx = n > 1 && (cf == 2 || n > 8); /* bf16 rows, as the backend would ask */
                    rt_tensor xv = rt_tensor_slice0(bx ? &xb : &x32, 0, n);
                    rt_tensor yv = rt_tensor_slice0(sh->glu && bx ? &yb : &yf, 0, n), sv = rt_tensor_slice0(&sc, 0, n);
                    const int eager = (n > 8 && cf != 2) || (cf == 1 && sh->glu); /* cuBLAS over a fresh copy */
                    us[ti][i][k][cf] = sk_time_x(sh->glu, &yv, &xv, &w, &sv, eager);
                }
                drop(&w), drop(&xb), drop(&x32), drop(&yf), drop(&yb), drop(&sc);
                free(row), free(wh), free(xh), free(xf);
            }
    }
    for (int v = 0; v < 6; v++) unsetenv(cvar[v]);
    rt_backend_free(g_gpu);
    g_gpu = rt_backend_create(RT_DEV_CUDA, &p);
    assert_non_null(g_gpu);
    for (int ti = 0; ti < NT; ti++)
        for (int i = 0; i < 3; i++) {
            const double gb = (double)rt_dtype_row_bytes(ts[ti], shp[i].in) * (double)shp[i].out * 1e-9;
            for (int k = 0; k < 5; k++) {
                char line[768];
                int o = 0;
                for (int cf = 0; cf < NC; cf++)
                    o += snprintf(line + o, sizeof line - (size_t)o, " %s %7.1f us %5.0f GB/s;", cfg[cf][0],
                                  us[ti][i][k][cf], gb / (us[ti][i][k][cf] * 1e-6));
                print_message("speed: quant %s llama-8b %-7s n=%2d:%s\n", rt_dtype_name(ts[ti]), shp[i].name, ns[k], line);
            }
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_matmul_bf16_x), cmocka_unit_test(test_matmul_glu_bf16),
                                       cmocka_unit_test(test_gemm_glu_fused),
                                       cmocka_unit_test(test_matmul_rope_store),
                                       cmocka_unit_test(test_act_dtype), cmocka_unit_test(test_skinny_f32x), cmocka_unit_test(test_skinny_quant), cmocka_unit_test(test_gemv_quant),
                                       cmocka_unit_test(test_skinny_speed), cmocka_unit_test(test_skinny_quant_speed)};
    cuda_test_filter(); /* VLLM_TEST_ONLY=<test name> */
    return cmocka_run_group_tests(tests, cuda_test_group_setup, cuda_test_group_teardown);
}
