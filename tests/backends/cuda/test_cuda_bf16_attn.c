/* The bf16 attention chain of a GPU prefill (rt_backend_act_dtype RT_BF16)
 * on the CUDA backend against the CPU ops on f32 rows of the same values:
 *   MATMUL        bf16 dst (the QKV output): bf16 / Q8_0 W, bf16 or f32 x,
 *                 with and without bias, a strided dst view; f16 / f32 W
 *                 refuse a bf16 dst (cuBLAS has no such GEMM);
 *   QK_ROPE_STORE bf16 q/k/v views of one stacked bf16 QKV buffer -> bf16 q
 *                 (scalar kernel at n <= 8, vector kernel above), QK-norm
 *                 on/off, f32/f16/bf16 caches;
 *   PAGED_ATTENTION bf16 q and dst on the paths other than the flash kernel
 *                 (test_cuda_flash.c has those): split-KV decode rows, an
 *                 f32 cache, and a mixed op of f32 q with bf16 dst refused.
 * The inputs are bf16 values on both sides, so the GPU differs from the CPU
 * by its own roundings: one bf16 rounding of the result (2^-9 relative) on
 * top of what the f32 op allows. Error: max |gpu - cpu| / max |cpu|.
 * Skips when no CUDA device is present.
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

static uint64_t g_rng = 0x6A09E667F3BCC909ull;
static float rnd(void) { return cuda_test_rnd(&g_rng); } /* [-1, 1) */

/* n random values in [-amp, amp), rounded to bf16: f (as f32) and h (bits). */
static void fill16(float *f, uint16_t *h, int64_t n, float amp) {
    for (int64_t i = 0; i < n; i++) {
        h[i] = rt_f32_to_bf16(amp * rnd());
        f[i] = rt_bf16_to_f32(h[i]);
    }
}

static void to_f32(const uint16_t *h, float *f, int64_t n) {
    for (int64_t i = 0; i < n; i++) f[i] = rt_bf16_to_f32(h[i]);
}

/* y[n, out] bf16 (a view of a [n, out + pad] buffer) = x . W^T (+ b). */
static void mm16_case(rt_dtype wt, rt_dtype xt, int64_t n, int64_t in, int64_t out, bool bias, int64_t pad) {
    void *w = rand_rows(wt, out, in, 1.0f, rnd);
    float *xf = xmalloc((size_t)(n * in) * 4), *b = xmalloc((size_t)out * 4), *ref = xmalloc((size_t)(n * out) * 4);
    uint16_t *xh = xmalloc((size_t)(n * in) * 2), *yh = xmalloc((size_t)(n * (out + pad)) * 2);
    float *got = xmalloc((size_t)(n * out) * 4);
    fill16(xf, xh, n * in, 1.5f);
    for (int64_t i = 0; i < out; i++) b[i] = 0.5f * rnd();
    int64_t s_w[2] = {out, in}, s_x[2] = {n, in}, s_y[2] = {n, out}, s_yp[2] = {n, out + pad}, s_b[1] = {out};
    rt_tensor hw = rt_tensor_make(w, wt, RT_DEV_CPU, 2, s_w), hx = rt_tensor_make(xf, RT_F32, RT_DEV_CPU, 2, s_x);
    rt_tensor hb = rt_tensor_make(b, RT_F32, RT_DEV_CPU, 1, s_b), hy = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 2, s_y);
    assert_int_equal(rt_matmul(g_cpu, &hy, &hx, &hw, bias ? &hb : NULL), VC_OK);
    rt_tensor dw = up(w, wt, 2, s_w), db = up(b, RT_F32, 1, s_b);
    rt_tensor dx = xt == RT_BF16 ? up(xh, RT_BF16, 2, s_x) : up(xf, RT_F32, 2, s_x);
    rt_tensor dyp = rt_tensor_alloc(g_gpu, RT_BF16, 2, s_yp), dy = dyp;
    assert_non_null(dyp.data);
    dy.shape[1] = out; /* rows out + pad elements apart */
    int rc = rt_matmul(g_gpu, &dy, &dx, &dw, bias ? &db : NULL);
    if (wt == RT_F16 || wt == RT_F32) {
        assert_int_equal(rc, VC_ERR_UNSUPPORTED);
        print_message("matmul %s W -> bf16 dst refused: %s\n", rt_dtype_name(wt), vc_err_msg());
    } else {
        if (rc) fail_msg("matmul %s -> bf16: %s", rt_dtype_name(wt), vc_err_msg());
        down(yh, &dyp);
        for (int64_t i = 0; i < n; i++) to_f32(yh + i * (out + pad), got + i * out, out);
        const double e = nerr(got, ref, n * out);
        print_message("matmul %s W, %s x -> bf16 n=%lld in=%lld out=%lld bias=%d pad=%lld: %.3e\n",
                      rt_dtype_name(wt), rt_dtype_name(xt), (long long)n, (long long)in, (long long)out, bias,
                      (long long)pad, e);
        /* f32 x is rounded to bf16 by the GEMM (same values here); quantized
         * W: the CPU's dot products use x quantized to 8 bits */
        const double bound = rt_dtype_info(wt)->quantized ? 5e-2 : 1e-2; /* the CPU quantizes x for Q8_0 */
        if (!(e <= bound)) fail_msg("normalised error %.3e > %.1e", e, bound);
    }
    drop(&dw), drop(&db), drop(&dx), drop(&dyp);
    free(w), free(xf), free(b), free(ref), free(xh), free(yh), free(got);
}

static void test_matmul_bf16_dst(void **st) {
    (void)st;
    NEED_GPU();
    mm16_case(RT_BF16, RT_BF16, 64, 256, 384, false, 0);
    mm16_case(RT_BF16, RT_BF16, 33, 128, 200, true, 8);
    mm16_case(RT_BF16, RT_F32, 17, 128, 96, true, 0);
    mm16_case(RT_BF16, RT_BF16, 3, 64, 40, false, 0); /* decode-sized: cuBLAS too */
    mm16_case(RT_BF16, RT_F32, 2, 64, 40, true, 0);   /* f32 x at n <= 8: not the GEMV (f32 only) */
    mm16_case(RT_Q8_0, RT_BF16, 40, 256, 128, true, 0);
    mm16_case(RT_F16, RT_BF16, 16, 64, 32, false, 0);
    mm16_case(RT_F32, RT_BF16, 16, 64, 32, false, 0);
}

typedef struct {
    int64_t n, h, kvh, hd;
    int norm;
    rt_dtype kv;
} rs16_case;

static void cache_f32(const void *c, rt_dtype dt, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = dt == RT_F32 ? ((const float *)c)[i]
               : dt == RT_F16 ? rt_f16_to_f32(((const uint16_t *)c)[i])
                              : rt_bf16_to_f32(((const uint16_t *)c)[i]);
}

static void rs16_run(const rs16_case *cs) {
    const int64_t n = cs->n, h = cs->h, kvh = cs->kvh, hd = cs->hd, qd = h * hd, kvd = kvh * hd, W = qd + 2 * kvd;
    const int64_t B = 4, nb = n / 4 + 3 + ((n / 4 + 3) % 7 == 0), n_slots = nb * B, half = hd / 2;
    float *qkv = xmalloc((size_t)(n * W) * 4), *qn = xmalloc((size_t)hd * 4), *kn = xmalloc((size_t)hd * 4);
    uint16_t *qkv16 = xmalloc((size_t)(n * W) * 2), *q16 = xmalloc((size_t)(n * qd) * 2);
    float *inv = xmalloc((size_t)half * 4), *qc = xmalloc((size_t)(n * qd) * 4), *qg = xmalloc((size_t)(n * qd) * 4);
    int32_t *pos = xmalloc((size_t)n * 4), *slots = xmalloc((size_t)n * 4);
    fill16(qkv, qkv16, n * W, 3.0f);
    for (int64_t i = 0; i < hd; i++) qn[i] = rnd(), kn[i] = rnd();
    for (int64_t i = 0; i < half; i++) inv[i] = powf(5e5f, -2.0f * (float)i / (float)hd);
    for (int64_t t = 0; t < n; t++) {
        pos[t] = (int32_t)(7 + 311 * t);
        slots[t] = (n > 1 && t == n - 1) ? -1 : (int32_t)((t * 7 + 2) % n_slots);
    }
    size_t es = cs->kv == RT_F32 ? 4 : 2, cbytes = (size_t)(n_slots * kvd) * es;
    char *kc = xmalloc(cbytes), *vc = xmalloc(cbytes), *kg = xmalloc(cbytes), *vg = xmalloc(cbytes);
    float *fc = xmalloc((size_t)(n_slots * kvd) * 4), *fg = xmalloc((size_t)(n_slots * kvd) * 4);
    int64_t s4[4] = {nb, B, kvh, hd}, sq[3] = {n, h, hd}, sb[2] = {n, W}, shd[1] = {hd}, sh[1] = {half}, sn[1] = {n};
    /* CPU on the f32 values of the bf16 inputs */
    rt_tensor hkc = rt_tensor_make(kc, cs->kv, RT_DEV_CPU, 4, s4), hvc = rt_tensor_make(vc, cs->kv, RT_DEV_CPU, 4, s4);
    rt_tensor hqn = rt_tensor_1d(qn, RT_F32, RT_DEV_CPU, hd), hkn = rt_tensor_1d(kn, RT_F32, RT_DEV_CPU, hd);
    rt_tensor hpos = rt_tensor_1d(pos, RT_I32, RT_DEV_CPU, n), hsl = rt_tensor_1d(slots, RT_I32, RT_DEV_CPU, n);
    rt_tensor hinv = rt_tensor_1d(inv, RT_F32, RT_DEV_CPU, half), hq = rt_tensor_make(qc, RT_F32, RT_DEV_CPU, 3, sq);
    rt_tensor vq = rt_tensor_3d(qkv, RT_F32, RT_DEV_CPU, n, h, hd), vk = rt_tensor_3d(qkv + qd, RT_F32, RT_DEV_CPU, n, kvh, hd);
    rt_tensor vv = rt_tensor_3d(qkv + qd + kvd, RT_F32, RT_DEV_CPU, n, kvh, hd);
    vq.stride[0] = vk.stride[0] = vv.stride[0] = W * 4;
    rt_rope_store_params p = {.q_norm = cs->norm ? &hqn : NULL, .k_norm = cs->norm ? &hkn : NULL, .eps = 1e-6f,
                              .pos = &hpos, .inv_freq = &hinv, .rot_dim = (int)hd, .neox = true,
                              .attn_factor = 1.0f, .k_cache = &hkc, .v_cache = &hvc, .slots = &hsl};
    assert_int_equal(rt_qk_rope_store(g_cpu, &hq, &vq, &vk, &vv, &p), VC_OK);
    /* GPU on bf16 views of one stacked bf16 buffer */
    rt_tensor dbuf = up(qkv16, RT_BF16, 2, sb), dkc = up(kg, cs->kv, 4, s4), dvc = up(vg, cs->kv, 4, s4);
    rt_tensor dqn = up(qn, RT_F32, 1, shd), dkn = up(kn, RT_F32, 1, shd), dpos = up(pos, RT_I32, 1, sn);
    rt_tensor dsl = up(slots, RT_I32, 1, sn), dinv = up(inv, RT_F32, 1, sh), dq = rt_tensor_alloc(g_gpu, RT_BF16, 3, sq);
    assert_non_null(dq.data);
    uint16_t *base = dbuf.data;
    rt_tensor gq = rt_tensor_3d(base, RT_BF16, RT_DEV_CUDA, n, h, hd);
    rt_tensor gk = rt_tensor_3d(base + qd, RT_BF16, RT_DEV_CUDA, n, kvh, hd);
    rt_tensor gv = rt_tensor_3d(base + qd + kvd, RT_BF16, RT_DEV_CUDA, n, kvh, hd);
    gq.stride[0] = gk.stride[0] = gv.stride[0] = W * 2;
    rt_rope_store_params g = p;
    g.q_norm = cs->norm ? &dqn : NULL;
    g.k_norm = cs->norm ? &dkn : NULL;
    g.pos = &dpos, g.inv_freq = &dinv, g.k_cache = &dkc, g.v_cache = &dvc, g.slots = &dsl;
    int rc = rt_qk_rope_store(g_gpu, &dq, &gq, &gk, &gv, &g);
    if (rc) fail_msg("qk_rope_store bf16: %s", vc_err_msg());
    down(q16, &dq);
    down(kg, &dkc);
    down(vg, &dvc);
    to_f32(q16, qg, n * qd);
    const double eq = nerr(qg, qc, n * qd);
    cache_f32(kg, cs->kv, fg, n_slots * kvd);
    cache_f32(kc, cs->kv, fc, n_slots * kvd);
    const double ek = nerr(fg, fc, n_slots * kvd);
    cache_f32(vg, cs->kv, fg, n_slots * kvd);
    cache_f32(vc, cs->kv, fc, n_slots * kvd);
    const double ev = nerr(fg, fc, n_slots * kvd);
    print_message("qk_rope_store bf16 n=%lld h=%lld/%lld hd=%lld norm=%d %s cache: q %.2e k %.2e v %.2e\n",
                  (long long)n, (long long)h, (long long)kvh, (long long)hd, cs->norm, rt_dtype_name(cs->kv), eq, ek,
                  ev);
    /* q: one bf16 rounding (2^-9 of the largest); k: both sides round to
     * the cache type (an f32 ulp apart may round apart); v: bf16
     * values stored exactly in f32/bf16, once rounded in f16 */
    assert_true(eq <= 1.0 / 200);
    assert_true(ek <= (cs->kv == RT_F32 ? 1e-5 : cs->kv == RT_F16 ? 2e-3 : 1e-2)); /* bf16: a flipped rounding */
    assert_true(cs->kv == RT_F16 ? ev <= 2e-3 : ev == 0.0);
    drop(&dbuf), drop(&dkc), drop(&dvc), drop(&dqn), drop(&dkn), drop(&dpos), drop(&dsl), drop(&dinv), drop(&dq);
    free(qkv), free(qn), free(kn), free(qkv16), free(q16), free(inv), free(qc), free(qg), free(pos), free(slots);
    free(kc), free(vc), free(kg), free(vg), free(fc), free(fg);
}

static void test_qk_rope_store_bf16(void **st) {
    (void)st;
    NEED_GPU();
    const rs16_case cases[] = {
        {1, 32, 8, 128, 0, RT_BF16}, {3, 16, 8, 64, 1, RT_F16},    {5, 4, 2, 128, 1, RT_F32}, /* scalar kernel */
        {300, 32, 8, 128, 0, RT_BF16}, {100, 16, 8, 128, 1, RT_BF16}, {40, 8, 2, 64, 0, RT_F16},
        {20, 4, 1, 256, 1, RT_F32}, /* vector kernel */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) rs16_run(&cases[i]);
}

/* PAGED_ATTENTION with bf16 q and dst where the flash kernel does not run:
 * S sequences with q_lens[s] rows over seq_lens[s] keys. */
static void pa16_case(int S, const int32_t *seq_lens, const int32_t *q_lens, int64_t h, int64_t kvh, int64_t hd,
                      rt_dtype kvt) {
    const int64_t B = 16;
    int64_t maxlen = 0, T = 0;
    for (int s = 0; s < S; s++) {
        maxlen = seq_lens[s] > maxlen ? seq_lens[s] : maxlen;
        T += q_lens[s];
    }
    const int64_t MB = maxlen / B + 1, NB = S * MB;
    int32_t *bt = xmalloc((size_t)NB * 4), *qsl = xmalloc((size_t)(S + 1) * 4);
    for (int64_t i = 0; i < NB; i++) bt[i] = (int32_t)i;
    for (int64_t i = NB - 1; i > 0; i--) { /* shuffle the blocks */
        int64_t j = (int64_t)((rnd() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
        int32_t t = bt[i];
        bt[i] = bt[j];
        bt[j] = t;
    }
    qsl[0] = 0;
    for (int s = 0; s < S; s++) qsl[s + 1] = qsl[s] + q_lens[s];
    int64_t sq[3] = {T, h, hd}, sc[4] = {NB, B, kvh, hd}, sbt[2] = {S, MB}, ssl[1] = {S}, sqsl[1] = {S + 1};
    float *qf = xmalloc((size_t)(T * h * hd) * 4), *ref = xmalloc((size_t)(T * h * hd) * 4),
          *got = xmalloc((size_t)(T * h * hd) * 4);
    uint16_t *q16 = xmalloc((size_t)(T * h * hd) * 2), *o16 = xmalloc((size_t)(T * h * hd) * 2);
    fill16(qf, q16, T * h * hd, 1.0f);
    void *k = rand_rows(kvt, NB * B * kvh, hd, 1.0f, rnd), *v = rand_rows(kvt, NB * B * kvh, hd, 1.0f, rnd);
    const float scale = 2.0f / sqrtf((float)hd);
    rt_tensor hq = rt_tensor_make(qf, RT_F32, RT_DEV_CPU, 3, sq), ho = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 3, sq);
    rt_tensor hk = rt_tensor_make(k, kvt, RT_DEV_CPU, 4, sc), hv = rt_tensor_make(v, kvt, RT_DEV_CPU, 4, sc);
    rt_tensor hbt = rt_tensor_make(bt, RT_I32, RT_DEV_CPU, 2, sbt), hqsl = rt_tensor_make(qsl, RT_I32, RT_DEV_CPU, 1, sqsl);
    rt_tensor hsl = rt_tensor_make((void *)seq_lens, RT_I32, RT_DEV_CPU, 1, ssl);
    assert_int_equal(rt_paged_attention(g_cpu, &ho, &hq, &hk, &hv, &hbt, &hqsl, &hsl, scale, 0.0f, 0), VC_OK);
    rt_tensor dq = up(q16, RT_BF16, 3, sq), dk = up(k, kvt, 4, sc), dv = up(v, kvt, 4, sc);
    rt_tensor dbt = up(bt, RT_I32, 2, sbt), dqsl = up(qsl, RT_I32, 1, sqsl), dsl = up(seq_lens, RT_I32, 1, ssl);
    rt_tensor dout = rt_tensor_alloc(g_gpu, RT_BF16, 3, sq);
    assert_non_null(dout.data);
    int rc = rt_paged_attention(g_gpu, &dout, &dq, &dk, &dv, &dbt, &dqsl, &dsl, scale, 0.0f, 0);
    if (rc) fail_msg("paged attention bf16: %s", vc_err_msg());
    down(o16, &dout);
    to_f32(o16, got, T * h * hd);
    const double e = nerr(got, ref, T * h * hd);
    print_message("paged attention bf16 q/out T=%lld S=%d h=%lld/%lld hd=%lld %s cache: %.3e\n", (long long)T, S,
                  (long long)h, (long long)kvh, (long long)hd, rt_dtype_name(kvt), e);
    assert_true(e <= 1.0 / 256); /* the f32 kernels' result, rounded once */
    /* f32 q with a bf16 dst: refused before any kernel */
    rt_tensor dqf = up(qf, RT_F32, 3, sq);
    assert_int_equal(rt_paged_attention(g_gpu, &dout, &dqf, &dk, &dv, &dbt, &dqsl, &dsl, scale, 0.0f, 0),
                     VC_ERR_INVALID);
    drop(&dqf), drop(&dq), drop(&dk), drop(&dv), drop(&dbt), drop(&dqsl), drop(&dsl), drop(&dout);
    free(bt), free(qsl), free(qf), free(ref), free(got), free(q16), free(o16), free(k), free(v);
}

static void test_paged_attention_bf16(void **st) {
    (void)st;
    NEED_GPU();
    /* decode rows (split-KV kernel), then a short chunk beside them */
    static const int32_t sl1[6] = {40, 200, 17, 90, 300, 64}, ql1[6] = {1, 1, 1, 1, 1, 1};
    pa16_case(6, sl1, ql1, 32, 8, 128, RT_BF16);
    static const int32_t sl2[3] = {120, 33, 250}, ql2[3] = {1, 9, 1};
    pa16_case(3, sl2, ql2, 16, 4, 64, RT_F16);
    /* a prompt over an f32 cache (the SIMT prefill kernel) */
    static const int32_t sl3[1] = {150}, ql3[1] = {150};
    pa16_case(1, sl3, ql3, 8, 2, 128, RT_F32);
}

static int setup(void **st) {
    (void)st;
    /* the paged case checks the bf16 conversion around the f32 decode
     * kernel (result rounded once); the tensor-core decode kernel's bf16 q
     * path is test_cuda_attn_mixed's */
    setenv("VLLM_CUDA_FLASH_DEC", "0", 1);
    return cuda_test_setup(4);
}

static int teardown(void **st) {
    (void)st;
    return cuda_test_teardown();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_bf16_dst),
        cmocka_unit_test(test_qk_rope_store_bf16),
        cmocka_unit_test(test_paged_attention_bf16),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
