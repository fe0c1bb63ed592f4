/* MATMUL on the CPU backend, through rt_matmul:
 *  - every weight dtype vs dequantize-then-f64-dot, with a rigorous bound
 *    for the Q8 activation quantization (|err| <= amax_block/254 per value);
 *  - every SIMD level vs the scalar kernels (summation order only);
 *  - thread counts 1, 2, 3 give bit-identical outputs;
 *  - bias, strided x rows, shape errors. */
#include "cpu_test_util.h"

#include "base/log.h"
#include "runtime/quant_blocks.h"

typedef struct {
    int64_t n, in, out;
    rt_dtype wt;
    float *x, *w_f, *bias;
    void *w_q;
    float *w_deq;
} mm_case;

static void case_init(mm_case *c, rt_dtype wt, int64_t n, int64_t in, int64_t out, int with_bias) {
    memset(c, 0, sizeof *c);
    c->n = n;
    c->in = in;
    c->out = out;
    c->wt = wt;
    c->x = xmalloc((size_t)(n * in) * 4);
    c->w_f = xmalloc((size_t)(out * in) * 4);
    c->w_deq = xmalloc((size_t)(out * in) * 4);
    size_t rb = rt_dtype_row_bytes(wt, in);
    c->w_q = xmalloc(rb * (size_t)out);
    /* rows of different magnitude, a few outliers */
    for (int64_t t = 0; t < n; t++) fill_rand(c->x + t * in, in, (float)(1 + t % 3));
    for (int64_t i = 0; i < n * in; i += 97) c->x[i] *= 8.0f;
    for (int64_t r = 0; r < out; r++) fill_rand(c->w_f + r * in, in, 0.05f * (float)(1 + r % 4));
    for (int64_t r = 0; r < out; r++) {
        assert_int_equal(rt_quant_row(wt, c->w_f + r * in, (char *)c->w_q + rb * r, in), VC_OK);
        rt_dequant_row(wt, (char *)c->w_q + rb * r, c->w_deq + r * in, in);
    }
    if (with_bias) {
        c->bias = xmalloc((size_t)out * 4);
        fill_rand(c->bias, out, 1.0f);
    }
}

static void case_free(mm_case *c) {
    free(c->x);
    free(c->w_f);
    free(c->w_q);
    free(c->w_deq);
    free(c->bias);
}

static int run_mm(rt_backend *be, const mm_case *c, float *y) {
    rt_tensor x = rt_tensor_2d(c->x, RT_F32, RT_DEV_CPU, c->n, c->in);
    rt_tensor w = rt_tensor_2d(c->w_q, c->wt, RT_DEV_CPU, c->out, c->in);
    rt_tensor d = rt_tensor_2d(y, RT_F32, RT_DEV_CPU, c->n, c->out);
    rt_tensor b = rt_tensor_1d(c->bias, RT_F32, RT_DEV_CPU, c->out);
    return rt_matmul(be, &d, &x, &w, c->bias ? &b : NULL);
}

/* Activation quantization block of the kernel for this weight type. */
static int64_t act_block(rt_dtype wt) {
    if (wt == RT_F32 || wt == RT_F16 || wt == RT_BF16) return 0;
    return rt_dtype_info(wt)->block_elems;
}

static void check_vs_f64(const mm_case *c, const float *y, const char *what) {
    int64_t ab = act_block(c->wt);
    for (int64_t t = 0; t < c->n; t++) {
        const float *x = c->x + t * c->in;
        for (int64_t r = 0; r < c->out; r++) {
            const float *w = c->w_deq + r * c->in;
            double ref = c->bias ? c->bias[r] : 0.0, mag = 0.0, qerr = 0.0;
            for (int64_t i = 0; i < c->in; i++) {
                ref += (double)w[i] * x[i];
                mag += fabs((double)w[i] * x[i]);
            }
            if (ab) {
                for (int64_t b0 = 0; b0 < c->in; b0 += ab) {
                    double amax = 0, wsum = 0;
                    for (int64_t i = b0; i < b0 + ab; i++) {
                        amax = fmax(amax, fabs(x[i]));
                        wsum += fabs(w[i]);
                    }
                    qerr += wsum * amax / 254.0;
                }
            }
            double bound = qerr * 1.001 + 2e-6 * (mag + 1e-3) * sqrt((double)c->in);
            double err = fabs((double)y[t * c->out + r] - ref);
            if (!(err <= bound))
                fail_msg("%s %s n=%lld in=%lld out=%lld: y[%lld,%lld]=%g ref=%g err=%g bound=%g",
                         what, rt_dtype_name(c->wt), (long long)c->n, (long long)c->in,
                         (long long)c->out, (long long)t, (long long)r, y[t * c->out + r], ref,
                         err, bound);
        }
    }
}

static const rt_dtype g_wtypes[] = {RT_F32,  RT_F16,  RT_BF16, RT_Q4_0, RT_Q4_1,
                                    RT_Q8_0, RT_Q4_K, RT_Q5_K, RT_Q6_K};
#define N_WT (sizeof g_wtypes / sizeof g_wtypes[0])

static void shapes_for(rt_dtype wt, int64_t *ins, int *n_in) {
    if (rt_dtype_info(wt)->block_elems == RT_QK_K) {
        ins[0] = 256;
        ins[1] = 768;
        ins[2] = 4096;
    } else {
        ins[0] = 32;
        ins[1] = 544;
        ins[2] = 4096;
    }
    *n_in = 3;
}

static void test_every_dtype_vs_f64(void **state) {
    (void)state;
    const int64_t ns[] = {1, 3, 17}, outs[] = {1, 7, 33};
    for (int isa = 0; isa < N_ISAS; isa++) {
        rt_backend *be = make_backend(g_isas[isa], 2);
        for (size_t k = 0; k < N_WT; k++) {
            int64_t ins[3];
            int nin;
            shapes_for(g_wtypes[k], ins, &nin);
            for (int a = 0; a < nin; a++)
                for (int b = 0; b < 3; b++) {
                    int64_t n = ns[b], out = outs[(a + b) % 3];
                    if (ins[a] == 4096 && n == 17) n = 5; /* keep the test fast */
                    mm_case c;
                    case_init(&c, g_wtypes[k], n, ins[a], out, (a + b) % 2);
                    float *y = xmalloc((size_t)(n * out) * 4);
                    assert_int_equal(run_mm(be, &c, y), VC_OK);
                    check_vs_f64(&c, y, g_isas[isa]);
                    free(y);
                    case_free(&c);
                }
        }
        rt_backend_free(be);
    }
}

static void test_simd_vs_scalar(void **state) {
    (void)state;
    rt_backend *ref = make_backend("scalar", 1);
    for (int isa = 1; isa < N_ISAS; isa++) {
        rt_backend *be = make_backend(g_isas[isa], 2);
        for (size_t k = 0; k < N_WT; k++) {
            int64_t ins[3];
            int nin;
            shapes_for(g_wtypes[k], ins, &nin);
            for (int a = 0; a < nin; a++) {
                const int64_t n = a == 2 ? 6 : 13, out = 19;
                mm_case c;
                case_init(&c, g_wtypes[k], n, ins[a], out, 0);
                float *y0 = xmalloc((size_t)(n * out) * 4), *y1 = xmalloc((size_t)(n * out) * 4);
                assert_int_equal(run_mm(ref, &c, y0), VC_OK);
                assert_int_equal(run_mm(be, &c, y1), VC_OK);
                for (int64_t t = 0; t < n; t++)
                    for (int64_t r = 0; r < out; r++) {
                        double mag = 0;
                        for (int64_t i = 0; i < c.in; i++)
                            mag += fabs((double)c.w_deq[r * c.in + i] * c.x[t * c.in + i]);
                        double err = fabs((double)y0[t * out + r] - y1[t * out + r]);
                        if (!(err <= 1e-5 * mag + 1e-6))
                            fail_msg("%s vs scalar %s in=%lld: y[%lld,%lld] %g vs %g (mag %g)",
                                     g_isas[isa], rt_dtype_name(g_wtypes[k]), (long long)c.in,
                                     (long long)t, (long long)r, y1[t * out + r], y0[t * out + r],
                                     mag);
                    }
                free(y0);
                free(y1);
                case_free(&c);
            }
        }
        rt_backend_free(be);
    }
    rt_backend_free(ref);
}

/* Q4_0, Q4_1, Q8_0, Q4_K, Q6_K follow the chain arithmetic (cpu_internal.h): the
 * SIMD GEMV, the 8-token GEMM tiles and the per-row tail kernel must all
 * equal the scalar reference bit for bit, for every n (full token groups,
 * partial groups, decode), row tails and bias. */
static void test_chain_types_exact(void **state) {
    (void)state;
    const rt_dtype types[] = {RT_Q4_0, RT_Q4_1, RT_Q8_0, RT_Q4_K, RT_Q6_K};
    rt_backend *ref = make_backend("scalar", 1);
    for (int isa = 1; isa < N_ISAS; isa++) {
        rt_backend *be = make_backend(g_isas[isa], 2);
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
            const int64_t ns[] = {1, 4, 8, 21}, outs[] = {37, 72};
            for (int a = 0; a < 4; a++) {
                int64_t in = rt_dtype_info(types[k])->block_elems == RT_QK_K ? 768 : 544;
                mm_case c;
                case_init(&c, types[k], ns[a], in, outs[a % 2], a % 2);
                float *y0 = xmalloc((size_t)(c.n * c.out) * 4), *y1 = xmalloc((size_t)(c.n * c.out) * 4);
                assert_int_equal(run_mm(ref, &c, y0), VC_OK);
                assert_int_equal(run_mm(be, &c, y1), VC_OK);
                for (int64_t i = 0; i < c.n * c.out; i++)
                    if (memcmp(&y0[i], &y1[i], 4))
                        fail_msg("%s %s n=%lld out=%lld: y[%lld,%lld] %.9g != scalar %.9g", g_isas[isa],
                                 rt_dtype_name(types[k]), (long long)c.n, (long long)c.out,
                                 (long long)(i / c.out), (long long)(i % c.out), y1[i], y0[i]);
                free(y0);
                free(y1);
                case_free(&c);
            }
        }
        rt_backend_free(be);
    }
    rt_backend_free(ref);
}

/* Batched decode: every n = 1..64 (GEMV for 1-2 rows, 8-token tiles,
 * a partial last group padded into a tile or left to the GEMV) and row
 * counts that leave 1-3 row tails of the 4-row panels and 8-row GEMV
 * tiles: bit-identical to the scalar reference (chain arithmetic) and
 * within the f64 bound of the Q8 activation quantization. */
static void test_chain_types_every_n(void **state) {
    (void)state;
    const rt_dtype types[] = {RT_Q4_0, RT_Q4_1, RT_Q8_0, RT_Q4_K, RT_Q6_K};
    const int64_t outs[] = {37, 72, 30};
    rt_backend *ref = make_backend("scalar", 1);
    for (int isa = 1; isa < N_ISAS; isa++) {
        rt_backend *be = make_backend(g_isas[isa], 2);
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
            int64_t in = rt_dtype_info(types[k])->block_elems == RT_QK_K ? 512 : 352;
            for (int64_t n = 1; n <= 64; n++) {
                mm_case c;
                case_init(&c, types[k], n, in, outs[n % 3], n % 5 == 0);
                float *y0 = xmalloc((size_t)(c.n * c.out) * 4), *y1 = xmalloc((size_t)(c.n * c.out) * 4);
                assert_int_equal(run_mm(ref, &c, y0), VC_OK);
                assert_int_equal(run_mm(be, &c, y1), VC_OK);
                for (int64_t i = 0; i < c.n * c.out; i++)
                    if (memcmp(&y0[i], &y1[i], 4))
                        fail_msg("%s %s n=%lld out=%lld: y[%lld,%lld] %.9g != scalar %.9g", g_isas[isa],
                                 rt_dtype_name(types[k]), (long long)c.n, (long long)c.out,
                                 (long long)(i / c.out), (long long)(i % c.out), y1[i], y0[i]);
                if (n % 7 == 1 || n >= 62) check_vs_f64(&c, y1, g_isas[isa]);
                free(y0);
                free(y1);
                case_free(&c);
            }
        }
        rt_backend_free(be);
    }
    rt_backend_free(ref);
}

static void test_thread_counts_identical(void **state) {
    (void)state;
    for (int isa = 0; isa < N_ISAS; isa++) {
        rt_backend *be[3];
        for (int t = 0; t < 3; t++) be[t] = make_backend(g_isas[isa], t + 1);
        for (size_t k = 0; k < N_WT; k++) {
            int64_t in = rt_dtype_info(g_wtypes[k])->block_elems == RT_QK_K ? 512 : 320;
            int64_t n = 9, out = 203; /* many row chunks, odd tail */
            mm_case c;
            case_init(&c, g_wtypes[k], n, in, out, 1);
            float *y[3];
            for (int t = 0; t < 3; t++) {
                y[t] = xmalloc((size_t)(n * out) * 4);
                assert_int_equal(run_mm(be[t], &c, y[t]), VC_OK);
            }
            assert_memory_equal(y[0], y[1], (size_t)(n * out) * 4);
            assert_memory_equal(y[0], y[2], (size_t)(n * out) * 4);
            /* decode-sized batches (n <= 4): a row's result does not depend on
             * the other rows of its micro-kernel group */
            mm_case c1 = c;
            c1.n = 1;
            c1.x = c.x + 2 * in;
            float *y1 = xmalloc((size_t)out * 4), *y3 = xmalloc((size_t)(3 * out) * 4);
            assert_int_equal(run_mm(be[1], &c1, y1), VC_OK);
            c1.n = 3;
            c1.x = c.x;
            assert_int_equal(run_mm(be[2], &c1, y3), VC_OK);
            assert_memory_equal(y1, y3 + 2 * out, (size_t)out * 4);
            free(y1);
            free(y3);
            for (int t = 0; t < 3; t++) free(y[t]);
            case_free(&c);
        }
        for (int t = 0; t < 3; t++) rt_backend_free(be[t]);
    }
}

static void test_strided_rows_and_errors(void **state) {
    (void)state;
    rt_backend *be = make_backend("avx512", 2);
    mm_case c;
    case_init(&c, RT_Q8_0, 3, 64, 5, 0);
    /* x rows every 96 floats (a view of a wider buffer) */
    float *xb = xmalloc(3 * 96 * 4);
    for (int t = 0; t < 3; t++) memcpy(xb + t * 96, c.x + t * 64, 64 * 4);
    rt_tensor x = rt_tensor_2d(xb, RT_F32, RT_DEV_CPU, 3, 64);
    x.stride[0] = 96 * 4;
    rt_tensor w = rt_tensor_2d(c.w_q, RT_Q8_0, RT_DEV_CPU, 5, 64);
    float y0[15], y1[15];
    rt_tensor d = rt_tensor_2d(y1, RT_F32, RT_DEV_CPU, 3, 5);
    assert_int_equal(rt_matmul(be, &d, &x, &w, NULL), VC_OK);
    assert_int_equal(run_mm(be, &c, y0), VC_OK);
    assert_memory_equal(y0, y1, sizeof y0);
    /* shape mismatch */
    rt_tensor w2 = rt_tensor_2d(c.w_q, RT_Q8_0, RT_DEV_CPU, 2, 64);
    assert_int_equal(rt_matmul(be, &d, &x, &w2, NULL), VC_ERR_INVALID);
    /* i32 weights are not a matmul type */
    rt_tensor wi = rt_tensor_2d(c.w_q, RT_I32, RT_DEV_CPU, 5, 64);
    assert_int_equal(rt_matmul(be, &d, &x, &wi, NULL), VC_ERR_UNSUPPORTED);
    free(xb);
    case_free(&c);
    rt_backend_free(be);
}

int main(void) {
    vc_log_set_level(VC_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_dtype_vs_f64),
        cmocka_unit_test(test_simd_vs_scalar),
        cmocka_unit_test(test_chain_types_exact),
        cmocka_unit_test(test_chain_types_every_n),
        cmocka_unit_test(test_thread_counts_identical),
        cmocka_unit_test(test_strided_rows_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
