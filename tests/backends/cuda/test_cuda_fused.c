/* The fused decode-layer ops on the CUDA backend (cuda_fused.cu) against
 * the same ops on the CPU backend (bit-identical to the unfused sequence,
 * tests/backends/cpu/test_cpu_fused.c), on random inputs:
 *   ADD_RMSNORM   x and dst, also with dst == res;
 *   (both, and QK_ROPE_STORE, with VLLM_CUDA_ROW_PRE = 0 and 1)
 *   QK_ROPE_STORE q/k/v as strided views of one stacked QKV buffer (the
 *                 model's layout), QK-norm on/off, neox/pairwise RoPE,
 *                 partial rot_dim, f32/f16/bf16 caches, a padding slot;
 *                 a slot past the cache is reported by the next sync;
 *   MATMUL_GLU    fused GEMV + GLU epilogue (n <= 8), MATMUL + GLU above;
 *   GLU / ADD     over the strided halves of one [n, 2f] buffer (the fused
 *                 gate|up output), the 2-D row path.
 * Error: max |gpu - cpu| / max |cpu| per output; f32 results within 1e-5
 * (reordered sums, CUDA's cosf/sinf), f16/bf16 caches within one rounding
 * of the stored type. Skips when no CUDA device is present.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/err.h"
#include "runtime/ops.h"

#include "cuda_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double g_worst[4];

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float rnd(void) { return cuda_test_rnd(&g_rng); } /* [-1, 1) */
static void fill(float *x, int64_t n, float amp) {
    for (int64_t i = 0; i < n; i++) x[i] = amp * rnd();
}
static void note(int k, double e) {
    if (e > g_worst[k]) g_worst[k] = e;
}

static void bf16_to_f32(const uint16_t *h, float *f, int64_t n) {
    for (int64_t i = 0; i < n; i++) f[i] = rt_bf16_to_f32(h[i]);
}

/* Row shapes pick the kernel: 1 x 4096 one float4 per thread (1024
 * threads), 300 rows the 256-thread bandwidth blocks, 8192 / 12288 two and
 * four float4 per thread, 100 (not a multiple of 4) and 20000 (too long to
 * keep in registers) the loop kernel; `shift` views rows one float off
 * 16-byte alignment (loop kernel too). dst f32 (also dst == res) or bf16,
 * the latter against the CPU's f32 result within one bf16 rounding. */
/* Each row-kernel case runs with VLLM_CUDA_ROW_PRE = 0 and 1 (weights,
 * positions and slots read after / before the PDL wait). */
static void add_rmsnorm_cases(void);
static void rs_cases(void);

static void test_add_rmsnorm(void **st) {
    (void)st;
    NEED_GPU();
    for (int pre = 0; pre < 2; pre++) {
        setenv("VLLM_CUDA_ROW_PRE", pre ? "1" : "0", 1);
        add_rmsnorm_cases();
    }
    unsetenv("VLLM_CUDA_ROW_PRE");
}

static void add_rmsnorm_cases(void) {
    const struct { int64_t n, d; int shift; } shapes[] = {
        {1, 1024, 0}, {1, 4096, 0}, {5, 4096, 0}, {3, 100, 0}, {17, 896, 0}, {300, 4096, 0},
        {2, 8192, 0}, {3, 12288, 0}, {300, 8192, 0}, {1, 20000, 0}, {4, 1024, 1},
        {300, 1024, 0}, {2048, 1024, 0}, {300, 896, 0}, {400, 128, 0}, {300, 1024, 1}, /* prefill rows, d <= 1024 */
    };
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (int mode = 0; mode < 3; mode++) { /* 0: f32 dst, 1: f32 dst == res, 2: bf16 dst */
            const int64_t n = shapes[c].n, d = shapes[c].d, sh = shapes[c].shift, s[2] = {n, d};
            const int64_t sb[2] = {n, d + sh}, nd = n * d;
            size_t bytes = (size_t)nd * 4;
            float *x = xmalloc(bytes), *r = xmalloc(bytes), *w = xmalloc((size_t)d * 4);
            float *xc = xmalloc(bytes), *yc = xmalloc(bytes), *xg = xmalloc((size_t)(n * (d + sh)) * 4),
                  *yg = xmalloc(bytes);
            uint16_t *yh = xmalloc((size_t)nd * 2);
            fill(x, nd, 2.0f);
            fill(r, nd, 1.0f);
            fill(w, d, 1.0f);
            float w_off = mode == 1 ? 1.0f : 0.0f;
            /* CPU */
            memcpy(xc, x, bytes);
            memcpy(yc, r, bytes);
            rt_tensor hx = rt_tensor_make(xc, RT_F32, RT_DEV_CPU, 2, s), hy = rt_tensor_make(yc, RT_F32, RT_DEV_CPU, 2, s);
            rt_tensor hr = rt_tensor_make(r, RT_F32, RT_DEV_CPU, 2, s), hw = rt_tensor_1d(w, RT_F32, RT_DEV_CPU, d);
            assert_int_equal(rt_add_rmsnorm(g_cpu, &hy, &hx, mode == 1 ? &hy : &hr, &hw, 1e-6f, w_off), VC_OK);
            /* GPU: x as [n, d] view of an [n, d + shift] buffer at column shift */
            float *xb = xmalloc((size_t)(n * (d + sh)) * 4);
            for (int64_t i = 0; i < n; i++) memcpy(xb + i * (d + sh) + sh, x + i * d, (size_t)d * 4);
            rt_tensor dxb = up(xb, RT_F32, 2, sb), dr = up(r, RT_F32, 2, s), dy = up(r, RT_F32, 2, s);
            rt_tensor dx = rt_tensor_2d((float *)dxb.data + sh, RT_F32, RT_DEV_CUDA, n, d);
            dx.stride[0] = (d + sh) * 4;
            rt_tensor dyh = rt_tensor_alloc(g_gpu, RT_BF16, 2, s);
            int64_t sw[1] = {d};
            rt_tensor dw = up(w, RT_F32, 1, sw);
            rt_tensor *dst = mode == 2 ? &dyh : &dy;
            assert_int_equal(rt_add_rmsnorm(g_gpu, dst, &dx, mode == 1 ? &dy : &dr, &dw, 1e-6f, w_off), VC_OK);
            down(xb, &dxb);
            for (int64_t i = 0; i < n; i++) memcpy(xg + i * d, xb + i * (d + sh) + sh, (size_t)d * 4);
            if (mode == 2) {
                down(yh, &dyh);
                bf16_to_f32(yh, yg, nd);
            } else {
                down(yg, &dy);
            }
            double ex = nerr(xg, xc, nd), ey = nerr(yg, yc, nd);
            note(mode == 2 ? 3 : 0, ex > ey ? ex : ey);
            print_message("add_rmsnorm %lld x %lld%s %s: x %.2e y %.2e\n", (long long)n, (long long)d,
                          sh ? " (unaligned)" : "", mode == 2 ? "bf16" : mode == 1 ? "f32 dst=res" : "f32", ex, ey);
            assert_true(ex <= 1e-6);
            assert_true(ey <= (mode == 2 ? 1.0 / 256 : 1e-5));
            drop(&dxb), drop(&dr), drop(&dy), drop(&dw), drop(&dyh);
            free(x), free(r), free(w), free(xc), free(yc), free(xg), free(yg), free(yh), free(xb);
        }
}

typedef struct {
    int64_t n, h, kvh, hd;
    int rot, neox, norm;
    rt_dtype kv;
} rs_case;

static void cache_to_f32(const void *c, rt_dtype dt, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = dt == RT_F32 ? ((const float *)c)[i]
               : dt == RT_F16 ? rt_f16_to_f32(((const uint16_t *)c)[i])
                              : rt_bf16_to_f32(((const uint16_t *)c)[i]);
}

static void run_rs(const rs_case *cs) {
    const int64_t n = cs->n, h = cs->h, kvh = cs->kvh, hd = cs->hd, qd = h * hd, kvd = kvh * hd;
    /* slots (7t + 2) mod n_slots: distinct per token (7 does not divide n_slots) */
    int64_t nb = n / 4 + 3;
    if (nb % 7 == 0) nb++;
    const int64_t W = qd + 2 * kvd, B = 4, n_slots = nb * B, half = cs->rot / 2;
    float *qkv = xmalloc((size_t)(n * W) * 4), *qn = xmalloc((size_t)hd * 4), *kn = xmalloc((size_t)hd * 4);
    float *inv = xmalloc((size_t)half * 4);
    int32_t *pos = xmalloc((size_t)n * 4), *slots = xmalloc((size_t)n * 4);
    fill(qkv, n * W, 3.0f);
    fill(qn, hd, 1.0f);
    fill(kn, hd, 1.0f);
    for (int64_t i = 0; i < half; i++) inv[i] = powf(1e6f, -2.0f * (float)i / (float)cs->rot);
    for (int64_t t = 0; t < n; t++) {
        pos[t] = (int32_t)(3 + 977 * t);
        slots[t] = (n > 1 && t == n - 1) ? -1 : (int32_t)((t * 7 + 2) % n_slots);
    }
    size_t es = cs->kv == RT_F32 ? 4 : 2, cbytes = (size_t)(n_slots * kvd) * es;
    char *kc = xmalloc(cbytes), *vc = xmalloc(cbytes), *kg = xmalloc(cbytes), *vg = xmalloc(cbytes);
    float *qc = xmalloc((size_t)(n * qd) * 4), *qg = xmalloc((size_t)(n * qd) * 4);
    float *fc = xmalloc((size_t)(n_slots * kvd) * 4), *fg = xmalloc((size_t)(n_slots * kvd) * 4);
    int64_t s4[4] = {nb, B, kvh, hd}, sq[3] = {n, h, hd}, sb[2] = {n, W}, shd[1] = {hd}, sh[1] = {half}, sn[1] = {n};

    /* CPU reference */
    rt_tensor hkc = rt_tensor_make(kc, cs->kv, RT_DEV_CPU, 4, s4), hvc = rt_tensor_make(vc, cs->kv, RT_DEV_CPU, 4, s4);
    rt_tensor hqn = rt_tensor_1d(qn, RT_F32, RT_DEV_CPU, hd), hkn = rt_tensor_1d(kn, RT_F32, RT_DEV_CPU, hd);
    rt_tensor hpos = rt_tensor_1d(pos, RT_I32, RT_DEV_CPU, n), hsl = rt_tensor_1d(slots, RT_I32, RT_DEV_CPU, n);
    rt_tensor hinv = rt_tensor_1d(inv, RT_F32, RT_DEV_CPU, half), hq = rt_tensor_make(qc, RT_F32, RT_DEV_CPU, 3, sq);
    rt_tensor vq = rt_tensor_3d(qkv, RT_F32, RT_DEV_CPU, n, h, hd), vk = rt_tensor_3d(qkv + qd, RT_F32, RT_DEV_CPU, n, kvh, hd);
    rt_tensor vv = rt_tensor_3d(qkv + qd + kvd, RT_F32, RT_DEV_CPU, n, kvh, hd);
    vq.stride[0] = vk.stride[0] = vv.stride[0] = W * 4;
    rt_rope_store_params p = {.q_norm = cs->norm ? &hqn : NULL, .k_norm = cs->norm ? &hkn : NULL, .eps = 1e-6f,
                              .pos = &hpos, .inv_freq = &hinv, .rot_dim = cs->rot, .neox = cs->neox,
                              .attn_factor = 1.0f, .k_cache = &hkc, .v_cache = &hvc, .slots = &hsl};
    assert_int_equal(rt_qk_rope_store(g_cpu, &hq, &vq, &vk, &vv, &p), VC_OK);

    /* GPU: caches start as zeros on both sides (xmalloc is calloc) */
    rt_tensor dbuf = up(qkv, RT_F32, 2, sb), dkc = up(kg, cs->kv, 4, s4), dvc = up(vg, cs->kv, 4, s4);
    rt_tensor dqn = up(qn, RT_F32, 1, shd), dkn = up(kn, RT_F32, 1, shd), dpos = up(pos, RT_I32, 1, sn);
    rt_tensor dsl = up(slots, RT_I32, 1, sn), dinv = up(inv, RT_F32, 1, sh), dq = rt_tensor_alloc(g_gpu, RT_F32, 3, sq);
    rt_tensor gq = rt_tensor_3d(dbuf.data, RT_F32, RT_DEV_CUDA, n, h, hd);
    rt_tensor gk = rt_tensor_3d((float *)dbuf.data + qd, RT_F32, RT_DEV_CUDA, n, kvh, hd);
    rt_tensor gv = rt_tensor_3d((float *)dbuf.data + qd + kvd, RT_F32, RT_DEV_CUDA, n, kvh, hd);
    gq.stride[0] = gk.stride[0] = gv.stride[0] = W * 4;
    rt_rope_store_params g = p;
    g.q_norm = cs->norm ? &dqn : NULL;
    g.k_norm = cs->norm ? &dkn : NULL;
    g.pos = &dpos, g.inv_freq = &dinv, g.k_cache = &dkc, g.v_cache = &dvc, g.slots = &dsl;
    assert_int_equal(rt_qk_rope_store(g_gpu, &dq, &gq, &gk, &gv, &g), VC_OK);
    down(qg, &dq);
    down(kg, &dkc);
    down(vg, &dvc);
    double eq = nerr(qg, qc, n * qd);
    cache_to_f32(kg, cs->kv, fg, n_slots * kvd);
    cache_to_f32(kc, cs->kv, fc, n_slots * kvd);
    double ek = nerr(fg, fc, n_slots * kvd);
    cache_to_f32(vg, cs->kv, fg, n_slots * kvd);
    cache_to_f32(vc, cs->kv, fc, n_slots * kvd);
    double ev = nerr(fg, fc, n_slots * kvd);
    double tol = cs->kv == RT_F32 ? 1e-5 : cs->kv == RT_F16 ? 2e-3 : 1e-2;
    note(1, eq > ek ? eq : ek);
    print_message("qk_rope_store n=%lld h=%lld kvh=%lld hd=%lld rot=%d neox=%d norm=%d %s: q %.2e k %.2e v %.2e\n",
                  (long long)n, (long long)h, (long long)kvh, (long long)hd, cs->rot, cs->neox, cs->norm,
                  rt_dtype_name(cs->kv), eq, ek, ev);
    assert_true(eq <= 1e-5);
    assert_true(ek <= tol);
    assert_true(cs->kv == RT_F32 ? ev == 0.0 : ev <= tol); /* v is only converted */
    /* in place on the stacked buffer's q columns */
    assert_int_equal(rt_qk_rope_store(g_gpu, &gq, &gq, &gk, &gv, &g), VC_OK);
    float *bg = xmalloc((size_t)(n * W) * 4);
    down(bg, &dbuf);
    for (int64_t t = 0; t < n; t++) assert_true(nerr(bg + t * W, qc + t * qd, qd) <= 1e-5);
    free(bg);
    /* a slot past the cache: flagged, reported by the next sync */
    if (n > 1) {
        int32_t bad = (int32_t)n_slots;
        rt_tensor hb = rt_tensor_1d(&bad, RT_I32, RT_DEV_CPU, 1), one = rt_tensor_slice0(&dsl, 0, 1);
        assert_int_equal(rt_tensor_copy_bytes(g_gpu, &one, &hb), VC_OK);
        assert_int_equal(rt_qk_rope_store(g_gpu, &dq, &gq, &gk, &gv, &g), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_ERR_INVALID);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    }
    drop(&dbuf), drop(&dkc), drop(&dvc), drop(&dqn), drop(&dkn), drop(&dpos), drop(&dsl), drop(&dinv), drop(&dq);
    free(qkv), free(qn), free(kn), free(inv), free(pos), free(slots), free(kc), free(vc), free(kg), free(vg);
    free(qc), free(qg), free(fc), free(fg);
}

static void test_qk_rope_store(void **st) {
    (void)st;
    NEED_GPU();
    for (int pre = 0; pre < 2; pre++) {
        setenv("VLLM_CUDA_ROW_PRE", pre ? "1" : "0", 1);
        rs_cases();
    }
    unsetenv("VLLM_CUDA_ROW_PRE");
}

static void rs_cases(void) {
    /* n <= 8: the scalar kernel (decode); more tokens: the vector kernel
     * (cuda_fused.cu), whose row chunks per lane follow head_dim (<= 128,
     * 256, 512, 1024), over one block per token (n >= the SM count) or
     * several. */
    const rs_case cases[] = {
        {1, 16, 8, 128, 128, 1, 1, RT_BF16}, {3, 16, 8, 128, 128, 1, 1, RT_F32}, {4, 4, 2, 64, 64, 0, 0, RT_F16},
        {2, 6, 3, 96, 32, 1, 0, RT_BF16},    {5, 8, 1, 256, 256, 1, 1, RT_F32},  {3, 2, 2, 40, 40, 0, 1, RT_F32},
        {1, 32, 8, 128, 128, 1, 0, RT_BF16}, {3, 3, 1, 34, 18, 1, 1, RT_F16},    {2, 2, 2, 30, 30, 0, 0, RT_F32},
        /* vector kernel; Llama-3-8B heads as a batch (two rows per warp) and a prefill */
        {100, 32, 8, 128, 128, 1, 0, RT_BF16}, {300, 32, 8, 128, 128, 1, 1, RT_BF16}, {300, 8, 2, 64, 64, 0, 0, RT_F16},
        {12, 6, 3, 96, 32, 1, 0, RT_BF16},     {13, 8, 1, 256, 256, 1, 1, RT_F32},   {10, 4, 2, 512, 512, 1, 1, RT_F32},
        {9, 3, 1, 1024, 256, 1, 1, RT_BF16},   {11, 2, 2, 40, 40, 0, 1, RT_F16},
        /* head_dim % 4 != 0 with many tokens: the scalar kernel */
        {20, 3, 1, 34, 18, 1, 1, RT_F16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_rs(&cases[i]);
}

/* GLU and ADD over the two halves of one [n, 2f] buffer (the fused gate|up
 * output) into a contiguous [n, f]: the row-wise 2-D path of
 * cuda_elementwise.cu. */
static void test_glu_views(void **st) {
    (void)st;
    NEED_GPU();
    const int64_t shapes[][2] = {{1, 3072}, {7, 100}, {300, 1536}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (int kind = 0; kind < 3; kind++) {
            int64_t n = shapes[c][0], f = shapes[c][1], sb[2] = {n, 2 * f}, so[2] = {n, f};
            float *buf = xmalloc((size_t)(n * 2 * f) * 4), *oc = xmalloc((size_t)(n * f) * 4),
                  *og = xmalloc((size_t)(n * f) * 4);
            fill(buf, n * 2 * f, 4.0f);
            rt_tensor hg = rt_tensor_2d(buf, RT_F32, RT_DEV_CPU, n, f), hu = rt_tensor_2d(buf + f, RT_F32, RT_DEV_CPU, n, f);
            hg.stride[0] = hu.stride[0] = 2 * f * 4;
            rt_tensor ho = rt_tensor_make(oc, RT_F32, RT_DEV_CPU, 2, so);
            rt_tensor db = up(buf, RT_F32, 2, sb), dout = rt_tensor_alloc(g_gpu, RT_F32, 2, so);
            rt_tensor dg = rt_tensor_2d(db.data, RT_F32, RT_DEV_CUDA, n, f),
                      du = rt_tensor_2d((float *)db.data + f, RT_F32, RT_DEV_CUDA, n, f);
            dg.stride[0] = du.stride[0] = 2 * f * 4;
            if (kind < 2) {
                rt_act act = kind ? RT_ACT_GELU_TANH : RT_ACT_SILU;
                assert_int_equal(rt_glu(g_cpu, &ho, &hg, &hu, act), VC_OK);
                assert_int_equal(rt_glu(g_gpu, &dout, &dg, &du, act), VC_OK);
            } else {
                assert_int_equal(rt_add(g_cpu, &ho, &hg, &hu), VC_OK);
                assert_int_equal(rt_add(g_gpu, &dout, &dg, &du), VC_OK);
            }
            down(og, &dout);
            double e = nerr(og, oc, n * f);
            assert_true(kind == 2 ? e == 0.0 : e <= 1e-5);
            drop(&db), drop(&dout);
            free(buf), free(oc), free(og);
        }
}

/* MATMUL_GLU over a stacked [Wg; Wu]: the GEMV with the GLU epilogue at
 * n <= 8 (f16/bf16), MATMUL + GLU above; against the CPU (MATMUL + GLU). */
static void glu_cases(void) {
    const struct { int64_t n, f, d; rt_dtype t; rt_act act; } cs[] = {
        {1, 3072, 1024, RT_BF16, RT_ACT_SILU}, {3, 100, 64, RT_BF16, RT_ACT_GELU_TANH},
        {8, 512, 256, RT_F16, RT_ACT_SILU},    {1, 7, 4096, RT_BF16, RT_ACT_SILU},
        {20, 200, 128, RT_BF16, RT_ACT_SILU},  {5, 64, 72, RT_F32, RT_ACT_SILU},
        {1, 1100, 2048, RT_BF16, RT_ACT_SILU}, {1, 300, 4104, RT_F16, RT_ACT_GELU_TANH},
        {1, 3000, 2048, RT_BF16, RT_ACT_SILU}, {2, 3000, 2048, RT_F16, RT_ACT_SILU}, /* several waves: KS 4 */
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        int64_t n = cs[k].n, f = cs[k].f, d = cs[k].d, es = cs[k].t == RT_F32 ? 4 : 2;
        float *x = xmalloc((size_t)(n * d) * 4), *wf = xmalloc((size_t)(2 * f * d) * 4);
        uint16_t *wh = xmalloc((size_t)(2 * f * d) * 2);
        float *oc = xmalloc((size_t)(n * f) * 4), *og = xmalloc((size_t)(n * f) * 4), *sc = xmalloc((size_t)(n * 2 * f) * 4);
        fill(x, n * d, 1.0f);
        fill(wf, 2 * f * d, 0.1f);
        for (int64_t i = 0; i < 2 * f * d; i++)
            wh[i] = cs[k].t == RT_F16 ? rt_f32_to_f16(wf[i]) : rt_f32_to_bf16(wf[i]);
        const void *wd = cs[k].t == RT_F32 ? (const void *)wf : (const void *)wh;
        int64_t sx[2] = {n, d}, sw[2] = {2 * f, d}, so[2] = {n, f}, ss[2] = {n, 2 * f};
        rt_tensor hx = rt_tensor_make(x, RT_F32, RT_DEV_CPU, 2, sx), hw = rt_tensor_make((void *)wd, cs[k].t, RT_DEV_CPU, 2, sw);
        rt_tensor ho = rt_tensor_make(oc, RT_F32, RT_DEV_CPU, 2, so), hs = rt_tensor_make(sc, RT_F32, RT_DEV_CPU, 2, ss);
        assert_int_equal(rt_matmul_glu(g_cpu, &ho, &hx, &hw, cs[k].act, &hs), VC_OK);
        rt_tensor dx = up(x, RT_F32, 2, sx), dw = up(wd, cs[k].t, 2, sw), dout = rt_tensor_alloc(g_gpu, RT_F32, 2, so);
        rt_tensor ds = rt_tensor_alloc(g_gpu, RT_F32, 2, ss);
        assert_int_equal(rt_matmul_glu(g_gpu, &dout, &dx, &dw, cs[k].act, &ds), VC_OK);
        down(og, &dout);
        double e = nerr(og, oc, n * f), bound = n <= 8 || cs[k].t == RT_F32 ? 5e-5 : 1e-1;
        print_message("matmul_glu %s n=%lld f=%lld d=%lld: %.2e (bound %.0e)\n", rt_dtype_name(cs[k].t), (long long)n,
                      (long long)f, (long long)d, e, bound);
        note(2, e);
        assert_true(e <= bound);
        (void)es;
        drop(&dx), drop(&dw), drop(&dout), drop(&ds);
        free(x), free(wf), free(wh), free(oc), free(og), free(sc);
    }
}

/* The default GEMV variant, then every variant with the GLU epilogue
 * (VLLM_CUDA_GEMV 1..6, a fresh backend each: their KS choices differ). */
static void test_matmul_glu(void **st) {
    (void)st;
    NEED_GPU();
    glu_cases();
    rt_backend *keep = g_gpu;
    for (int v = 1; v < 7; v++) {
        char val[8];
        snprintf(val, sizeof val, "%d", v);
        setenv("VLLM_CUDA_GEMV", val, 1);
        g_gpu = rt_backend_create(RT_DEV_CUDA, NULL);
        assert_non_null(g_gpu);
        glu_cases();
        rt_backend_free(g_gpu);
        g_gpu = keep;
    }
    unsetenv("VLLM_CUDA_GEMV");
}

static void test_report(void **st) {
    (void)st;
    NEED_GPU();
    print_message("cuda vs cpu: add_rmsnorm     max normalised error %.3e\n", g_worst[0]);
    print_message("cuda vs cpu: qk_rope_store   max normalised error %.3e\n", g_worst[1]);
    print_message("cuda vs cpu: matmul_glu      max normalised error %.3e\n", g_worst[2]);
    print_message("cuda vs cpu: add_rmsnorm bf16 max normalised error %.3e\n", g_worst[3]);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_add_rmsnorm), cmocka_unit_test(test_qk_rope_store),
                                       cmocka_unit_test(test_glu_views), cmocka_unit_test(test_matmul_glu),
                                       cmocka_unit_test(test_report)};
    return cmocka_run_group_tests(tests, cuda_test_group_setup, cuda_test_group_teardown);
}
