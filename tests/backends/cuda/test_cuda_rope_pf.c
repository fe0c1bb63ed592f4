/* QK_ROPE_STORE's prefill kernel (cuda_rope_pf.cuh; VLLM_CUDA_RS_PF=1: every
 * lane its own angles, 2 / unset: the half-warp's angles shared) against
 * the vector kernel it replaces (VLLM_CUDA_RS_PF=0) and the CPU op,
 * on random inputs at prefill sizes (>= RS_PF_MIN_N = 512 tokens, head_dim
 * 128, full rotary): q/k/v as strided views of one stacked QKV buffer in
 * bf16 or f32, QK-norm on/off, neox/pairwise, bf16/f16/f32 caches, odd
 * head counts (a warp's two half-warps on rows of different kinds), a
 * padding slot (-1: nothing stored), q written in place, and a slot past
 * the cache (reported by the next sync). The two kernels do the same f32
 * arithmetic in the same order, so their outputs should agree bit for bit
 * (reported per output; asserted: q within 1e-6 in f32, one rounding in
 * 16 bits); against the CPU: f32 within 1e-5, f16/bf16 within one
 * rounding (1e-2).
 * Then both kernels timed at 2048 tokens (Qwen3-0.6B and Llama-8B heads;
 * report only). Skips without a CUDA device.
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
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t g_rng = 0x7F4A7C159E3779B9ull;
static float rnd(void) { return cuda_test_rnd(&g_rng); } /* [-1, 1) */

typedef struct {
    int64_t n, h, kvh;
    int neox, norm;
    rt_dtype act, kv;
} pf_case;

static void to_f32(const void *c, rt_dtype dt, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = dt == RT_F32 ? ((const float *)c)[i]
               : dt == RT_F16 ? rt_f16_to_f32(((const uint16_t *)c)[i])
                              : rt_bf16_to_f32(((const uint16_t *)c)[i]);
}

/* Device state of one case: the stacked buffer, caches, q out. */
typedef struct {
    rt_tensor buf, kc, vc, q, qn, kn, pos, sl, inv;
    rt_tensor gq, gk, gv;
    rt_rope_store_params g;
} pf_dev;

/* Kernel k: 0 the vector kernel, 1 the prefill kernel with every lane's
 * own angles (session 7's), 2 the default (the half-warp's 64 angles once,
 * shared by shuffles; the default since session 15). */
enum { PF_K = 3 };
static const char *const pf_mode[PF_K] = {"0", "1", "2"};
static void pf_setenv(int k) { setenv("VLLM_CUDA_RS_PF", pf_mode[k], 1); }

static void run_case(const pf_case *cs) {
    const int64_t n = cs->n, h = cs->h, kvh = cs->kvh, hd = 128, qd = h * hd, kvd = kvh * hd;
    const int64_t W = qd + 2 * kvd, B = 16, nb = n / 8 + 5, n_slots = nb * B, half = 64;
    const size_t ae = cs->act == RT_F32 ? 4 : 2, ce = cs->kv == RT_F32 ? 4 : 2;
    float *qkv = xmalloc((size_t)(n * W) * 4), *qn = xmalloc((size_t)hd * 4), *kn = xmalloc((size_t)hd * 4);
    float *inv = xmalloc((size_t)half * 4);
    int32_t *pos = xmalloc((size_t)n * 4), *slots = xmalloc((size_t)n * 4);
    void *qkv_a = xmalloc((size_t)(n * W) * ae);
    for (int64_t i = 0; i < n * W; i++) { /* the activation type's values, also for the CPU */
        float v = 3.0f * rnd();
        if (cs->act == RT_BF16) {
            ((uint16_t *)qkv_a)[i] = rt_f32_to_bf16(v);
            v = rt_bf16_to_f32(((uint16_t *)qkv_a)[i]);
        } else {
            ((float *)qkv_a)[i] = v;
        }
        qkv[i] = v;
    }
    for (int64_t i = 0; i < hd; i++) qn[i] = rnd(), kn[i] = rnd();
    for (int64_t i = 0; i < half; i++) inv[i] = powf(1e6f, -2.0f * (float)i / 128.0f);
    for (int64_t t = 0; t < n; t++) {
        pos[t] = (int32_t)(5 + 3 * t);
        slots[t] = t == n / 2 ? -1 : (int32_t)((t * 7 + 3) % n_slots); /* distinct: 7 does not divide n_slots */
    }
    if (n_slots % 7 == 0) fail_msg("n_slots %lld divisible by 7", (long long)n_slots);
    const size_t cbytes = (size_t)(n_slots * kvd) * ce;
    int64_t s4[4] = {nb, B, kvh, hd}, sq[3] = {n, h, hd}, sb[2] = {n, W}, shd[1] = {hd}, sh[1] = {half}, sn[1] = {n};

    /* CPU on the same (rounded) values in f32 */
    char *kc = xmalloc(cbytes), *vc = xmalloc(cbytes);
    float *qc = xmalloc((size_t)(n * qd) * 4);
    rt_tensor hkc = rt_tensor_make(kc, cs->kv, RT_DEV_CPU, 4, s4), hvc = rt_tensor_make(vc, cs->kv, RT_DEV_CPU, 4, s4);
    rt_tensor hqn = rt_tensor_1d(qn, RT_F32, RT_DEV_CPU, hd), hkn = rt_tensor_1d(kn, RT_F32, RT_DEV_CPU, hd);
    rt_tensor hpos = rt_tensor_1d(pos, RT_I32, RT_DEV_CPU, n), hsl = rt_tensor_1d(slots, RT_I32, RT_DEV_CPU, n);
    rt_tensor hinv = rt_tensor_1d(inv, RT_F32, RT_DEV_CPU, half), hq = rt_tensor_make(qc, RT_F32, RT_DEV_CPU, 3, sq);
    rt_tensor vq = rt_tensor_3d(qkv, RT_F32, RT_DEV_CPU, n, h, hd), vk = rt_tensor_3d(qkv + qd, RT_F32, RT_DEV_CPU, n, kvh, hd);
    rt_tensor vv = rt_tensor_3d(qkv + qd + kvd, RT_F32, RT_DEV_CPU, n, kvh, hd);
    vq.stride[0] = vk.stride[0] = vv.stride[0] = W * 4;
    rt_rope_store_params p = {.q_norm = cs->norm ? &hqn : NULL, .k_norm = cs->norm ? &hkn : NULL, .eps = 1e-6f,
                              .pos = &hpos, .inv_freq = &hinv, .rot_dim = 128, .neox = cs->neox,
                              .attn_factor = 1.0f, .k_cache = &hkc, .v_cache = &hvc, .slots = &hsl};
    assert_int_equal(rt_qk_rope_store(g_cpu, &hq, &vq, &vk, &vv, &p), VC_OK);

    /* GPU, both kernels on the same inputs; caches start as zeros */
    void *zero = xmalloc(cbytes);
    void *qo[PF_K], *ko[PF_K], *vo[PF_K], *bo[PF_K];
    rt_tensor dqn = up(qn, RT_F32, 1, shd), dkn = up(kn, RT_F32, 1, shd), dpos = up(pos, RT_I32, 1, sn);
    rt_tensor dsl = up(slots, RT_I32, 1, sn), dinv = up(inv, RT_F32, 1, sh);
    for (int k = 0; k < PF_K; k++) {
        rt_tensor dbuf = up(qkv_a, cs->act, 2, sb), dkc = up(zero, cs->kv, 4, s4), dvc = up(zero, cs->kv, 4, s4);
        rt_tensor dq = rt_tensor_alloc(g_gpu, cs->act, 3, sq);
        assert_non_null(dq.data);
        rt_tensor gq = rt_tensor_3d(dbuf.data, cs->act, RT_DEV_CUDA, n, h, hd);
        rt_tensor gk = rt_tensor_3d((char *)dbuf.data + qd * ae, cs->act, RT_DEV_CUDA, n, kvh, hd);
        rt_tensor gv = rt_tensor_3d((char *)dbuf.data + (qd + kvd) * ae, cs->act, RT_DEV_CUDA, n, kvh, hd);
        gq.stride[0] = gk.stride[0] = gv.stride[0] = W * (int64_t)ae;
        rt_rope_store_params g = p;
        g.q_norm = cs->norm ? &dqn : NULL;
        g.k_norm = cs->norm ? &dkn : NULL;
        g.pos = &dpos, g.inv_freq = &dinv, g.k_cache = &dkc, g.v_cache = &dvc, g.slots = &dsl;
        pf_setenv(k);
        assert_int_equal(rt_qk_rope_store(g_gpu, &dq, &gq, &gk, &gv, &g), VC_OK);
        qo[k] = xmalloc((size_t)(n * qd) * ae), ko[k] = xmalloc(cbytes), vo[k] = xmalloc(cbytes);
        down(qo[k], &dq);
        down(ko[k], &dkc);
        down(vo[k], &dvc);
        /* in place on the stacked buffer's q columns */
        assert_int_equal(rt_qk_rope_store(g_gpu, &gq, &gq, &gk, &gv, &g), VC_OK);
        bo[k] = xmalloc((size_t)(n * W) * ae);
        down(bo[k], &dbuf);
        /* a slot past the cache: flagged, reported by the next sync */
        int32_t bad = (int32_t)n_slots;
        rt_tensor hb = rt_tensor_1d(&bad, RT_I32, RT_DEV_CPU, 1), one = rt_tensor_slice0(&dsl, 1, 1);
        assert_int_equal(rt_tensor_copy_bytes(g_gpu, &one, &hb), VC_OK);
        assert_int_equal(rt_qk_rope_store(g_gpu, &dq, &gq, &gk, &gv, &g), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_ERR_INVALID);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        rt_tensor hs = rt_tensor_1d(&slots[1], RT_I32, RT_DEV_CPU, 1);
        assert_int_equal(rt_tensor_copy_bytes(g_gpu, &one, &hs), VC_OK);
        drop(&dbuf), drop(&dkc), drop(&dvc), drop(&dq);
    }
    unsetenv("VLLM_CUDA_RS_PF");
    bool same_q = !memcmp(qo[0], qo[1], (size_t)(n * qd) * ae), same_k = !memcmp(ko[0], ko[1], cbytes);
    bool same_v = !memcmp(vo[0], vo[1], cbytes), same_b = !memcmp(bo[0], bo[1], (size_t)(n * W) * ae);
    /* against the CPU */
    float *fq = xmalloc((size_t)(n * qd) * 4), *fg = xmalloc((size_t)(n_slots * kvd) * 4);
    float *fc = xmalloc((size_t)(n_slots * kvd) * 4);
    to_f32(qo[1], cs->act, fq, n * qd);
    double eq = nerr(fq, qc, n * qd);
    to_f32(ko[1], cs->kv, fg, n_slots * kvd);
    to_f32(kc, cs->kv, fc, n_slots * kvd);
    double ek = nerr(fg, fc, n_slots * kvd);
    to_f32(vo[1], cs->kv, fg, n_slots * kvd);
    to_f32(vc, cs->kv, fc, n_slots * kvd);
    double ev = nerr(fg, fc, n_slots * kvd);
    print_message("rope_pf n=%lld h=%lld kvh=%lld neox=%d norm=%d act %s kv %s: vs CPU q %.2e k %.2e v %.2e; "
                  "vs the vector kernel: q %s, k %s, v %s, in place %s\n",
                  (long long)n, (long long)h, (long long)kvh, cs->neox, cs->norm, rt_dtype_name(cs->act),
                  rt_dtype_name(cs->kv), eq, ek, ev, same_q ? "identical" : "DIFFERS", same_k ? "identical" : "DIFFERS",
                  same_v ? "identical" : "DIFFERS", same_b ? "identical" : "DIFFERS");
    assert_true(eq <= (cs->act == RT_F32 ? 1e-5 : 1e-2));
    assert_true(ek <= (cs->kv == RT_F32 ? 1e-5 : 1e-2));
    assert_true(ev <= (cs->kv == RT_F32 ? 0.0 : 1e-2));
    /* bit-identity is expected but depends on nvcc contracting the same
     * sums into the same FMAs in both kernels: reported, and bounded like
     * the CPU comparison */
    float *fq0 = xmalloc((size_t)(n * qd) * 4);
    to_f32(qo[0], cs->act, fq0, n * qd);
    assert_true(nerr(fq, fq0, n * qd) <= (cs->act == RT_F32 ? 1e-6 : 1e-2));
    free(fq0);
    /* shared angles: the same sincosf of the same products, so the
     * outputs equal those of every lane computing its own, bit for bit */
    if (memcmp(qo[1], qo[2], (size_t)(n * qd) * ae) || memcmp(ko[1], ko[2], cbytes) || memcmp(vo[1], vo[2], cbytes) ||
        memcmp(bo[1], bo[2], (size_t)(n * W) * ae))
        fail_msg("rope_pf with shared angles differs from the lanes' own angles");
    drop(&dqn), drop(&dkn), drop(&dpos), drop(&dsl), drop(&dinv);
    for (int k = 0; k < PF_K; k++) free(qo[k]), free(ko[k]), free(vo[k]), free(bo[k]);
    free(qkv), free(qn), free(kn), free(inv), free(pos), free(slots), free(qkv_a), free(kc), free(vc), free(qc);
    free(zero), free(fq), free(fg), free(fc);
}

static void test_rope_pf_cases(void **st) {
    (void)st;
    NEED_GPU();
    const pf_case cases[] = {
        {600, 16, 8, 1, 1, RT_BF16, RT_BF16}, /* Qwen3 heads, the prefill's bf16 chain */
        {517, 32, 8, 1, 0, RT_BF16, RT_F16},  /* Llama-8B heads, a partial last block of tokens */
        {530, 6, 3, 0, 1, RT_F32, RT_F32},    /* odd head counts: half-warps on q and k rows together */
        {512, 5, 1, 1, 1, RT_BF16, RT_F32},
        {513, 7, 2, 0, 0, RT_F32, RT_BF16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* 2048 tokens, bf16 chain, bf16 cache, QK-norm: mean us per call of 50
 * queued calls (host-timed around a sync; report only). */
static void test_rope_pf_speed(void **st) {
    (void)st;
    NEED_GPU();
    const int64_t hs[2][2] = {{16, 8}, {32, 8}};
    for (int s = 0; s < 2; s++) {
        const int64_t n = 2048, h = hs[s][0], kvh = hs[s][1], hd = 128, W = (h + 2 * kvh) * hd;
        const int64_t B = 16, nb = n / B, half = 64;
        int64_t s4[4] = {nb, B, kvh, hd}, sq[3] = {n, h, hd}, sb[2] = {n, W}, shd[1] = {hd}, sh[1] = {half},
                sn[1] = {n};
        uint16_t *a = xmalloc((size_t)(n * W) * 2);
        float *w = xmalloc((size_t)hd * 4), *inv = xmalloc((size_t)half * 4);
        int32_t *pos = xmalloc((size_t)n * 4), *sl = xmalloc((size_t)n * 4);
        for (int64_t i = 0; i < n * W; i++) a[i] = rt_f32_to_bf16(rnd());
        for (int64_t i = 0; i < hd; i++) w[i] = 1.0f + 0.1f * rnd();
        for (int64_t i = 0; i < half; i++) inv[i] = powf(1e6f, -2.0f * (float)i / 128.0f);
        for (int64_t t = 0; t < n; t++) pos[t] = (int32_t)t, sl[t] = (int32_t)t;
        rt_tensor dbuf = up(a, RT_BF16, 2, sb), dkc = rt_tensor_alloc(g_gpu, RT_BF16, 4, s4);
        rt_tensor dvc = rt_tensor_alloc(g_gpu, RT_BF16, 4, s4), dq = rt_tensor_alloc(g_gpu, RT_BF16, 3, sq);
        rt_tensor dw = up(w, RT_F32, 1, shd), dinv = up(inv, RT_F32, 1, sh), dpos = up(pos, RT_I32, 1, sn);
        rt_tensor dsl = up(sl, RT_I32, 1, sn);
        rt_tensor gq = rt_tensor_3d(dbuf.data, RT_BF16, RT_DEV_CUDA, n, h, hd);
        rt_tensor gk = rt_tensor_3d((uint16_t *)dbuf.data + h * hd, RT_BF16, RT_DEV_CUDA, n, kvh, hd);
        rt_tensor gv = rt_tensor_3d((uint16_t *)dbuf.data + (h + kvh) * hd, RT_BF16, RT_DEV_CUDA, n, kvh, hd);
        gq.stride[0] = gk.stride[0] = gv.stride[0] = W * 2;
        rt_rope_store_params g = {.q_norm = &dw, .k_norm = &dw, .eps = 1e-6f, .pos = &dpos, .inv_freq = &dinv,
                                  .rot_dim = 128, .neox = true, .attn_factor = 1.0f, .k_cache = &dkc,
                                  .v_cache = &dvc, .slots = &dsl};
        double us[PF_K];
        for (int k = 0; k < PF_K; k++) {
            pf_setenv(k);
            for (int r = 0; r < 5; r++) assert_int_equal(rt_qk_rope_store(g_gpu, &dq, &gq, &gk, &gv, &g), VC_OK);
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            double t0 = now_us();
            for (int r = 0; r < 50; r++) assert_int_equal(rt_qk_rope_store(g_gpu, &dq, &gq, &gk, &gv, &g), VC_OK);
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            us[k] = (now_us() - t0) / 50;
        }
        unsetenv("VLLM_CUDA_RS_PF");
        print_message("qk_rope_store 2048 tokens, %lld/%lld heads, bf16: vector kernel %.1f us, prefill kernel %.1f us "
                      "per call, with shared angles (the default) %.1f us\n",
                      (long long)h, (long long)kvh, us[0], us[1], us[2]);
        drop(&dbuf), drop(&dkc), drop(&dvc), drop(&dq), drop(&dw), drop(&dinv), drop(&dpos), drop(&dsl);
        free(a), free(w), free(inv), free(pos), free(sl);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rope_pf_cases), cmocka_unit_test(test_rope_pf_speed)};
    cuda_test_filter(); /* VLLM_TEST_ONLY=<test name> */
    return cmocka_run_group_tests(tests, cuda_test_group_setup, cuda_test_group_teardown);
}
