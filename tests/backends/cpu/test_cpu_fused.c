/* The fused CPU ops (cpu_fused.c) against the unfused sequences they
 * replace, bit for bit, at every ISA level and at 1 and 3 threads:
 *   ADD_RMSNORM   == ADD then RMSNORM (also with dst == res);
 *   QK_ROPE_STORE == RMSNORM (q, k heads) + ROPE + KV_STORE (k, v), with
 *                    q/k/v as strided views of one stacked QKV buffer, with
 *                    and without QK-norm, neox and pairwise RoPE, partial
 *                    rot_dim, f32/f16/bf16 caches and padding slots (-1);
 *   MATMUL_ADD    == MATMUL into the scratch then ADD (the wrapper's
 *                    fallback: the CPU has no kernel for it).
 * And bf16 activations (an accelerator's choice, rt_backend_act_dtype): the
 * CPU never asks for them and rejects them with a clear error.
 */
#include "cpu_test_util.h"

static void test_add_rmsnorm(void **st) {
    (void)st;
    const int64_t n = 5, d = 384;
    float *x = xmalloc((size_t)(n * d) * 4), *r = xmalloc((size_t)(n * d) * 4), *w = xmalloc((size_t)d * 4);
    float *x1 = xmalloc((size_t)(n * d) * 4), *y1 = xmalloc((size_t)(n * d) * 4);
    float *x2 = xmalloc((size_t)(n * d) * 4), *y2 = xmalloc((size_t)(n * d) * 4);
    fill_rand(x, n * d, 2.0f);
    fill_rand(r, n * d, 1.0f);
    fill_rand(w, d, 1.0f);
    for (int isa = 0; isa < N_ISAS; isa++)
        for (int th = 1; th <= 3; th += 2) {
            rt_backend *be = make_backend(g_isas[isa], th);
            for (int alias = 0; alias < 2; alias++) {
                rt_tensor tw = rt_tensor_1d(w, RT_F32, RT_DEV_CPU, d);
                memcpy(x1, x, (size_t)(n * d) * 4);
                rt_tensor tx1 = rt_tensor_2d(x1, RT_F32, RT_DEV_CPU, n, d), tr = rt_tensor_2d(r, RT_F32, RT_DEV_CPU, n, d);
                rt_tensor ty1 = rt_tensor_2d(y1, RT_F32, RT_DEV_CPU, n, d);
                assert_int_equal(rt_add(be, &tx1, &tx1, &tr), VC_OK);
                assert_int_equal(rt_rmsnorm(be, &ty1, &tx1, &tw, 1e-6f, alias ? 1.0f : 0.0f), VC_OK);
                memcpy(x2, x, (size_t)(n * d) * 4);
                memcpy(y2, r, (size_t)(n * d) * 4);
                rt_tensor tx2 = rt_tensor_2d(x2, RT_F32, RT_DEV_CPU, n, d), ty2 = rt_tensor_2d(y2, RT_F32, RT_DEV_CPU, n, d);
                /* alias: res is dst (the model's xb += pattern) */
                const rt_tensor *res = alias ? &ty2 : &tr;
                assert_int_equal(rt_add_rmsnorm(be, &ty2, &tx2, res, &tw, 1e-6f, alias ? 1.0f : 0.0f), VC_OK);
                assert_memory_equal(x1, x2, (size_t)(n * d) * 4);
                assert_memory_equal(y1, y2, (size_t)(n * d) * 4);
            }
            rt_tensor tx2 = rt_tensor_2d(x2, RT_F32, RT_DEV_CPU, n, d), tw = rt_tensor_1d(w, RT_F32, RT_DEV_CPU, d);
            assert_int_equal(rt_add_rmsnorm(be, &tx2, &tx2, &tx2, &tw, 1e-6f, 0.0f), VC_ERR_INVALID);
            rt_backend_free(be);
        }
    free(x), free(r), free(w), free(x1), free(y1), free(x2), free(y2);
}

typedef struct {
    int64_t n, h, kvh, hd;
    int rot, neox, norm;
    rt_dtype kv;
} rs_case;

static size_t esize(rt_dtype t) { return t == RT_F32 ? 4 : 2; }

static void run_rs_case(rt_backend *be, const rs_case *cs) {
    const int64_t n = cs->n, h = cs->h, kvh = cs->kvh, hd = cs->hd, qd = h * hd, kvd = kvh * hd;
    const int64_t W = qd + 2 * kvd, nb = 4, B = 4, n_slots = nb * B;
    float *qkv = xmalloc((size_t)(n * W) * 4), *qn = xmalloc((size_t)hd * 4), *kn = xmalloc((size_t)hd * 4);
    float *inv = xmalloc((size_t)(cs->rot / 2) * 4);
    int32_t *pos = xmalloc((size_t)n * 4), *slots = xmalloc((size_t)n * 4);
    fill_rand(qkv, n * W, 3.0f);
    fill_rand(qn, hd, 1.0f);
    fill_rand(kn, hd, 1.0f);
    for (int64_t i = 0; i < cs->rot / 2; i++) inv[i] = powf(10000.0f, -2.0f * (float)i / (float)cs->rot);
    for (int64_t t = 0; t < n; t++) {
        pos[t] = (int32_t)(7 + 13 * t);
        slots[t] = t == 1 ? -1 : (int32_t)((t * 5 + 3) % n_slots);
    }
    size_t cbytes = (size_t)(n_slots * kvd) * esize(cs->kv);
    char *kc1 = xmalloc(cbytes), *vc1 = xmalloc(cbytes), *kc2 = xmalloc(cbytes), *vc2 = xmalloc(cbytes);
    memset(kc1, 0x5a, cbytes), memset(vc1, 0x5a, cbytes), memset(kc2, 0x5a, cbytes), memset(vc2, 0x5a, cbytes);
    int64_t s4[4] = {nb, B, kvh, hd};
    rt_tensor tkc1 = rt_tensor_make(kc1, cs->kv, RT_DEV_CPU, 4, s4), tvc1 = rt_tensor_make(vc1, cs->kv, RT_DEV_CPU, 4, s4);
    rt_tensor tkc2 = rt_tensor_make(kc2, cs->kv, RT_DEV_CPU, 4, s4), tvc2 = rt_tensor_make(vc2, cs->kv, RT_DEV_CPU, 4, s4);
    rt_tensor tqn = rt_tensor_1d(qn, RT_F32, RT_DEV_CPU, hd), tkn = rt_tensor_1d(kn, RT_F32, RT_DEV_CPU, hd);
    rt_tensor tpos = rt_tensor_1d(pos, RT_I32, RT_DEV_CPU, n), tsl = rt_tensor_1d(slots, RT_I32, RT_DEV_CPU, n);
    rt_tensor tinv = rt_tensor_1d(inv, RT_F32, RT_DEV_CPU, cs->rot / 2);

    /* unfused on contiguous copies */
    float *q1 = xmalloc((size_t)(n * qd) * 4), *k1 = xmalloc((size_t)(n * kvd) * 4), *v1 = xmalloc((size_t)(n * kvd) * 4);
    for (int64_t t = 0; t < n; t++) {
        memcpy(q1 + t * qd, qkv + t * W, (size_t)qd * 4);
        memcpy(k1 + t * kvd, qkv + t * W + qd, (size_t)kvd * 4);
        memcpy(v1 + t * kvd, qkv + t * W + qd + kvd, (size_t)kvd * 4);
    }
    rt_tensor tq1 = rt_tensor_3d(q1, RT_F32, RT_DEV_CPU, n, h, hd), tk1 = rt_tensor_3d(k1, RT_F32, RT_DEV_CPU, n, kvh, hd);
    rt_tensor tv1 = rt_tensor_3d(v1, RT_F32, RT_DEV_CPU, n, kvh, hd);
    if (cs->norm) {
        rt_tensor q2 = rt_tensor_2d(q1, RT_F32, RT_DEV_CPU, n * h, hd), k2 = rt_tensor_2d(k1, RT_F32, RT_DEV_CPU, n * kvh, hd);
        assert_int_equal(rt_rmsnorm(be, &q2, &q2, &tqn, 1e-6f, 0.0f), VC_OK);
        assert_int_equal(rt_rmsnorm(be, &k2, &k2, &tkn, 1e-6f, 0.0f), VC_OK);
    }
    assert_int_equal(rt_rope(be, &tq1, &tpos, &tinv, cs->rot, cs->neox, 1.0f), VC_OK);
    assert_int_equal(rt_rope(be, &tk1, &tpos, &tinv, cs->rot, cs->neox, 1.0f), VC_OK);
    assert_int_equal(rt_kv_store(be, &tkc1, &tk1, &tsl), VC_OK);
    assert_int_equal(rt_kv_store(be, &tvc1, &tv1, &tsl), VC_OK);

    /* fused on strided views of the stacked buffer */
    float *q2 = xmalloc((size_t)(n * qd) * 4);
    rt_tensor vq = rt_tensor_3d(qkv, RT_F32, RT_DEV_CPU, n, h, hd), vk = rt_tensor_3d(qkv + qd, RT_F32, RT_DEV_CPU, n, kvh, hd);
    rt_tensor vv = rt_tensor_3d(qkv + qd + kvd, RT_F32, RT_DEV_CPU, n, kvh, hd);
    vq.stride[0] = vk.stride[0] = vv.stride[0] = W * 4;
    rt_tensor tq2 = rt_tensor_3d(q2, RT_F32, RT_DEV_CPU, n, h, hd);
    rt_rope_store_params p = {.q_norm = cs->norm ? &tqn : NULL, .k_norm = cs->norm ? &tkn : NULL, .eps = 1e-6f,
                              .pos = &tpos, .inv_freq = &tinv, .rot_dim = cs->rot, .neox = cs->neox,
                              .attn_factor = 1.0f, .k_cache = &tkc2, .v_cache = &tvc2, .slots = &tsl};
    assert_int_equal(rt_qk_rope_store(be, &tq2, &vq, &vk, &vv, &p), VC_OK);
    assert_memory_equal(q1, q2, (size_t)(n * qd) * 4);
    assert_memory_equal(kc1, kc2, cbytes);
    assert_memory_equal(vc1, vc2, cbytes);
    /* in place on q (dst == q) gives the same q */
    assert_int_equal(rt_qk_rope_store(be, &vq, &vq, &vk, &vv, &p), VC_OK);
    for (int64_t t = 0; t < n; t++) assert_memory_equal(qkv + t * W, q1 + t * qd, (size_t)qd * 4);
    /* a slot past the cache is an error, not a write */
    slots[0] = (int32_t)n_slots;
    assert_int_equal(rt_qk_rope_store(be, &tq2, &vq, &vk, &vv, &p), VC_ERR_INVALID);
    free(qkv), free(qn), free(kn), free(inv), free(pos), free(slots), free(kc1), free(vc1), free(kc2), free(vc2);
    free(q1), free(k1), free(v1), free(q2);
}

static void test_qk_rope_store(void **st) {
    (void)st;
    const rs_case cases[] = {
        {3, 4, 2, 64, 64, 1, 1, RT_BF16}, {3, 4, 2, 64, 64, 1, 0, RT_F32}, {2, 6, 3, 32, 16, 0, 1, RT_F16},
        {4, 2, 2, 128, 128, 0, 0, RT_F32}, {3, 8, 1, 96, 64, 1, 1, RT_F16},
    };
    for (int isa = 0; isa < N_ISAS; isa++)
        for (int th = 1; th <= 3; th += 2) {
            rt_backend *be = make_backend(g_isas[isa], th);
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_rs_case(be, &cases[i]);
            rt_backend_free(be);
        }
}

/* MATMUL_ADD on the CPU: no kernel, so the wrapper runs MATMUL into the
 * scratch then ADD, bit for bit that sequence (with a bias too); without
 * a scratch of dst's shape, or with a non-f32 dst, a clear error and dst
 * untouched. */
static void test_matmul_add(void **st) {
    (void)st;
    enum { n = 3, d = 48, o = 20 };
    float x[n * d], w[o * d], b[o], r[n * o], y1[n * o], y2[n * o], sc[n * o], sc2[n * o];
    fill_rand(x, n * d, 1.0f);
    fill_rand(w, o * d, 1.0f);
    fill_rand(b, o, 0.5f);
    fill_rand(r, n * o, 4.0f);
    for (int th = 1; th <= 3; th += 2) {
        rt_backend *be = make_backend(g_isas[0], th);
        rt_tensor tx = rt_tensor_2d(x, RT_F32, RT_DEV_CPU, n, d), tw = rt_tensor_2d(w, RT_F32, RT_DEV_CPU, o, d);
        rt_tensor tb = rt_tensor_1d(b, RT_F32, RT_DEV_CPU, o), ts = rt_tensor_2d(sc, RT_F32, RT_DEV_CPU, n, o);
        rt_tensor t1 = rt_tensor_2d(y1, RT_F32, RT_DEV_CPU, n, o), t2 = rt_tensor_2d(y2, RT_F32, RT_DEV_CPU, n, o);
        rt_tensor ts2 = rt_tensor_2d(sc2, RT_F32, RT_DEV_CPU, n, o);
        for (int bias = 0; bias < 2; bias++) {
            memcpy(y1, r, sizeof r);
            memcpy(y2, r, sizeof r);
            assert_false(rt_matmul_add_native(be, &t1, &tx, &tw, bias ? &tb : NULL));
            assert_int_equal(rt_matmul_add(be, &t1, &tx, &tw, bias ? &tb : NULL, &ts), VC_OK);
            assert_int_equal(rt_matmul(be, &ts2, &tx, &tw, bias ? &tb : NULL), VC_OK);
            assert_int_equal(rt_add(be, &t2, &t2, &ts2), VC_OK);
            assert_memory_equal(y1, y2, sizeof y1);
        }
        memcpy(y1, r, sizeof r);
        assert_int_equal(rt_matmul_add(be, &t1, &tx, &tw, NULL, NULL), VC_ERR_INVALID);
        assert_true(strstr(vc_err_msg(), "scratch") != NULL);
        rt_tensor tsw = rt_tensor_2d(sc, RT_F32, RT_DEV_CPU, o, n); /* wrong shape */
        assert_int_equal(rt_matmul_add(be, &t1, &tx, &tw, NULL, &tsw), VC_ERR_INVALID);
        assert_memory_equal(y1, r, sizeof r);
        uint16_t h[n * o];
        rt_tensor th16 = rt_tensor_2d(h, RT_BF16, RT_DEV_CPU, n, o);
        assert_int_equal(rt_matmul_add(be, &th16, &tx, &tw, NULL, &ts), VC_ERR_INVALID);
        assert_true(strstr(vc_err_msg(), "f32") != NULL);
        assert_false(rt_matmul_add_native(be, &th16, &tx, &tw, NULL));
        rt_tensor tww = rt_tensor_2d(w, RT_F32, RT_DEV_CPU, o, d - 1); /* in mismatch */
        assert_int_equal(rt_matmul_add(be, &t1, &tx, &tww, NULL, &ts), VC_ERR_INVALID);
        rt_backend_free(be);
    }
}

static void test_bf16_acts_rejected(void **st) {
    (void)st;
    rt_backend *be = make_backend(g_isas[0], 1);
    assert_int_equal(rt_backend_act_dtype(be, 1, RT_BF16, 64), RT_F32);
    assert_int_equal(rt_backend_act_dtype(be, 4096, RT_BF16, 64), RT_F32);
    const int64_t n = 3, d = 64, f = 32;
    float x[3 * 64] = {0}, w[64], y[3 * 64], wm[2 * 32 * 64] = {0}, sc[3 * 2 * 32];
    uint16_t h[3 * 64] = {0};
    fill_rand(w, d, 1.0f);
    rt_tensor tx = rt_tensor_2d(x, RT_F32, RT_DEV_CPU, n, d), tw = rt_tensor_1d(w, RT_F32, RT_DEV_CPU, d);
    rt_tensor th = rt_tensor_2d(h, RT_BF16, RT_DEV_CPU, n, d), ty = rt_tensor_2d(y, RT_F32, RT_DEV_CPU, n, d);
    rt_tensor tm = rt_tensor_2d(wm, RT_F32, RT_DEV_CPU, 2 * f, d), ts = rt_tensor_2d(sc, RT_F32, RT_DEV_CPU, n, 2 * f);
    rt_tensor tg = rt_tensor_2d(h, RT_BF16, RT_DEV_CPU, n, f), tmm = rt_tensor_2d(wm, RT_F32, RT_DEV_CPU, d, d);
    assert_int_equal(rt_rmsnorm(be, &th, &tx, &tw, 1e-6f, 0.0f), VC_ERR_UNSUPPORTED);
    assert_int_equal(rt_add_rmsnorm(be, &th, &tx, &ty, &tw, 1e-6f, 0.0f), VC_ERR_UNSUPPORTED);
    assert_int_equal(rt_matmul(be, &ty, &th, &tmm, NULL), VC_ERR_UNSUPPORTED);
    assert_int_equal(rt_matmul_glu(be, &tg, &tx, &tm, RT_ACT_SILU, &ts), VC_ERR_UNSUPPORTED);
    assert_int_equal(rt_matmul_glu(be, &ty, &th, &tm, RT_ACT_SILU, &ts), VC_ERR_INVALID); /* dst width != f */
    rt_tensor tyf = rt_tensor_2d(y, RT_F32, RT_DEV_CPU, n, f);
    assert_int_equal(rt_matmul_glu(be, &tyf, &th, &tm, RT_ACT_SILU, &ts), VC_ERR_UNSUPPORTED);
    assert_true(strstr(vc_err_msg(), "not supported") != NULL);
    /* a bf16 addend (the CUDA TP path's bf16 all-reduce sum), f32 and bf16 dst */
    assert_int_equal(rt_add_rmsnorm(be, &ty, &tx, &th, &tw, 1e-6f, 0.0f), VC_ERR_UNSUPPORTED);
    assert_true(strstr(vc_err_msg(), "addend") != NULL);
    assert_int_equal(rt_add_rmsnorm(be, &th, &tx, &th, &tw, 1e-6f, 0.0f), VC_ERR_UNSUPPORTED);
    assert_true(strstr(vc_err_msg(), "addend") != NULL);
    /* a bf16 matmul dst (a GPU's QKV output or TP partial sums, with or
     * without a bias): not on the CPU */
    assert_int_equal(rt_matmul(be, &th, &th, &tmm, &tw), VC_ERR_UNSUPPORTED);
    assert_int_equal(rt_matmul(be, &th, &tx, &tmm, NULL), VC_ERR_UNSUPPORTED);
    assert_int_equal(rt_matmul(be, &th, &th, &tmm, NULL), VC_ERR_UNSUPPORTED);
    rt_backend_free(be);
}

/* The bf16 attention chain of a GPU prefill (bf16 QKV output, QK_ROPE_STORE
 * and PAGED_ATTENTION on bf16 rows) is refused by the CPU with a message,
 * never run on the wrong element type. */
static void test_bf16_attention_rejected(void **st) {
    (void)st;
    rt_backend *be = make_backend(g_isas[0], 1);
    enum { n = 2, h = 2, kvh = 1, hd = 16, NB = 2, B = 4 };
    uint16_t q16[n * h * hd] = {0}, k16[n * kvh * hd] = {0}, v16[n * kvh * hd] = {0}, o16[n * h * hd];
    float x[n * hd] = {0}, wm[hd * hd] = {0}, kc[NB * B * kvh * hd], vc[NB * B * kvh * hd], inv[hd / 2] = {0};
    int32_t pos[n] = {0, 1}, slots[n] = {0, 1}, bt[1 * NB] = {0, 1}, qsl[2] = {0, n}, sl[1] = {n};
    rt_tensor tx = rt_tensor_2d(x, RT_F32, RT_DEV_CPU, n, hd), tw = rt_tensor_2d(wm, RT_F32, RT_DEV_CPU, hd, hd);
    rt_tensor ty16 = rt_tensor_2d(o16, RT_BF16, RT_DEV_CPU, n, hd);
    assert_int_equal(rt_matmul(be, &ty16, &tx, &tw, NULL), VC_ERR_UNSUPPORTED);
    assert_true(strstr(vc_err_msg(), "not supported") != NULL);
    rt_tensor tq = rt_tensor_3d(q16, RT_BF16, RT_DEV_CPU, n, h, hd), to = rt_tensor_3d(o16, RT_BF16, RT_DEV_CPU, n, h, hd);
    rt_tensor tk = rt_tensor_3d(k16, RT_BF16, RT_DEV_CPU, n, kvh, hd), tv = rt_tensor_3d(v16, RT_BF16, RT_DEV_CPU, n, kvh, hd);
    int64_t sc4[4] = {NB, B, kvh, hd}, sbt[2] = {1, NB};
    rt_tensor tkc = rt_tensor_make(kc, RT_F32, RT_DEV_CPU, 4, sc4), tvc = rt_tensor_make(vc, RT_F32, RT_DEV_CPU, 4, sc4);
    rt_tensor tpos = rt_tensor_1d(pos, RT_I32, RT_DEV_CPU, n), tsl = rt_tensor_1d(slots, RT_I32, RT_DEV_CPU, n);
    rt_tensor tinv = rt_tensor_1d(inv, RT_F32, RT_DEV_CPU, hd / 2);
    rt_rope_store_params rp = {.eps = 1e-6f, .pos = &tpos, .inv_freq = &tinv, .rot_dim = hd, .attn_factor = 1.0f,
                               .k_cache = &tkc, .v_cache = &tvc, .slots = &tsl};
    assert_int_equal(rt_qk_rope_store(be, &to, &tq, &tk, &tv, &rp), VC_ERR_UNSUPPORTED);
    assert_true(strstr(vc_err_msg(), "bf16") != NULL);
    rt_tensor tbt = rt_tensor_make(bt, RT_I32, RT_DEV_CPU, 2, sbt), tqsl = rt_tensor_1d(qsl, RT_I32, RT_DEV_CPU, 2);
    rt_tensor tlen = rt_tensor_1d(sl, RT_I32, RT_DEV_CPU, 1);
    assert_int_equal(rt_paged_attention(be, &to, &tq, &tkc, &tvc, &tbt, &tqsl, &tlen, 0.25f, 0.0f, 0),
                     VC_ERR_UNSUPPORTED);
    assert_true(strstr(vc_err_msg(), "not supported") != NULL);
    rt_backend_free(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_add_rmsnorm), cmocka_unit_test(test_qk_rope_store),
                                       cmocka_unit_test(test_matmul_add), cmocka_unit_test(test_bf16_acts_rejected),
                                       cmocka_unit_test(test_bf16_attention_rejected)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
