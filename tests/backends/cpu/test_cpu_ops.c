/* The non-matmul CPU ops through runtime/ops.h, at every ISA level and at
 * 1 and 3 threads, against naive double-precision references written here. */
#include "cpu_test_util.h"

#include "base/log.h"

#define FOR_BACKENDS(be)                                                                       \
    for (int bi_ = 0; bi_ < 2 * N_ISAS; bi_++)                                                 \
        for (rt_backend *be = make_backend(g_isas[bi_ / 2], bi_ % 2 ? 3 : 1); be;            \
             rt_backend_free(be), be = NULL)

static void test_rmsnorm(void **state) {
    (void)state;
    const int64_t rows = 19, ds[] = {7, 64, 4099}; /* 19 x 4099: big enough to run threaded */
    FOR_BACKENDS(be) {
        for (int k = 0; k < 3; k++) {
            int64_t d = ds[k];
            float *x = xmalloc((size_t)(rows * d) * 4), *w = xmalloc((size_t)d * 4),
                  *y = xmalloc((size_t)(rows * d) * 4);
            double *ref = xmalloc((size_t)(rows * d) * 8);
            fill_rand(x, rows * d, 3.0f);
            fill_rand(w, d, 1.0f);
            for (int off = 0; off < 2; off++) {
                for (int64_t r = 0; r < rows; r++) {
                    double ss = 0;
                    for (int64_t i = 0; i < d; i++) ss += (double)x[r * d + i] * x[r * d + i];
                    double s = 1.0 / sqrt(ss / d + 1e-5);
                    for (int64_t i = 0; i < d; i++) ref[r * d + i] = x[r * d + i] * s * (off + w[i]);
                }
                rt_tensor tx = rt_tensor_2d(x, RT_F32, RT_DEV_CPU, rows, d);
                rt_tensor tw = rt_tensor_1d(w, RT_F32, RT_DEV_CPU, d);
                rt_tensor ty = rt_tensor_2d(y, RT_F32, RT_DEV_CPU, rows, d);
                assert_int_equal(rt_rmsnorm(be, &ty, &tx, &tw, 1e-5f, (float)off), VC_OK);
                assert_true(rel_max_err(y, ref, rows * d) < 2e-6);
                /* in place */
                float *x2 = xmalloc((size_t)(rows * d) * 4);
                memcpy(x2, x, (size_t)(rows * d) * 4);
                rt_tensor t2 = rt_tensor_2d(x2, RT_F32, RT_DEV_CPU, rows, d);
                assert_int_equal(rt_rmsnorm(be, &t2, &t2, &tw, 1e-5f, (float)off), VC_OK);
                assert_memory_equal(x2, y, (size_t)(rows * d) * 4);
                free(x2);
            }
            free(x);
            free(w);
            free(y);
            free(ref);
        }
    }
}

static void rope_ref(double *out, const float *x, int64_t n, int64_t h, int64_t hd, const int32_t *pos,
                     const float *inv_freq, int rot, int neox, float af) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t hh = 0; hh < h; hh++) {
            const float *v = x + (i * h + hh) * hd;
            double *o = out + (i * h + hh) * hd;
            for (int64_t e = 0; e < hd; e++) o[e] = v[e];
            for (int k = 0; k < rot / 2; k++) {
                double th = (double)((float)pos[i] * inv_freq[k]);
                double c = cos(th) * af, s = sin(th) * af;
                int64_t ia = neox ? k : 2 * k, ib = neox ? k + rot / 2 : 2 * k + 1;
                o[ia] = v[ia] * c - v[ib] * s;
                o[ib] = v[ia] * s + v[ib] * c;
            }
        }
}

static void test_rope(void **state) {
    (void)state;
    const int64_t n = 3, h = 4, hd = 32;
    int32_t pos[3] = {0, 7, 1000};
    float x[3 * 4 * 32], y[3 * 4 * 32];
    double ref[3 * 4 * 32];
    fill_rand(x, n * h * hd, 2.0f);
    FOR_BACKENDS(be) {
        for (int neox = 0; neox < 2; neox++)
            for (int rot = 16; rot <= 32; rot += 16) {
                float inv_freq[16];
                for (int k = 0; k < rot / 2; k++) inv_freq[k] = powf(10000.0f, -2.0f * k / rot);
                float af = rot == 16 ? 1.25f : 1.0f;
                rope_ref(ref, x, n, h, hd, pos, inv_freq, rot, neox, af);
                memcpy(y, x, sizeof x);
                rt_tensor ty = rt_tensor_3d(y, RT_F32, RT_DEV_CPU, n, h, hd);
                rt_tensor tp = rt_tensor_1d(pos, RT_I32, RT_DEV_CPU, n);
                rt_tensor tf = rt_tensor_1d(inv_freq, RT_F32, RT_DEV_CPU, rot / 2);
                assert_int_equal(rt_rope(be, &ty, &tp, &tf, rot, neox, af), VC_OK);
                assert_true(rel_max_err(y, ref, n * h * hd) < 2e-6);
                if (rot == 16) /* dims past rot_dim untouched */
                    for (int64_t r = 0; r < n * h; r++)
                        assert_memory_equal(y + r * hd + 16, x + r * hd + 16, 16 * 4);
            }
        /* normal and neox differ on the same data */
        float inv_freq[16];
        for (int k = 0; k < 16; k++) inv_freq[k] = powf(10000.0f, -2.0f * k / 32);
        float y2[3 * 4 * 32];
        memcpy(y, x, sizeof x);
        memcpy(y2, x, sizeof x);
        rt_tensor t1 = rt_tensor_3d(y, RT_F32, RT_DEV_CPU, n, h, hd);
        rt_tensor t2 = rt_tensor_3d(y2, RT_F32, RT_DEV_CPU, n, h, hd);
        rt_tensor tp = rt_tensor_1d(pos, RT_I32, RT_DEV_CPU, n);
        rt_tensor tf = rt_tensor_1d(inv_freq, RT_F32, RT_DEV_CPU, 16);
        assert_int_equal(rt_rope(be, &t1, &tp, &tf, 32, false, 1.0f), VC_OK);
        assert_int_equal(rt_rope(be, &t2, &tp, &tf, 32, true, 1.0f), VC_OK);
        assert_true(memcmp(y, y2, sizeof y) != 0);
    }
}

static double gelu_d(double g) {
    return 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
}

static void test_elementwise(void **state) {
    (void)state;
    const int64_t sizes[] = {1, 13, 40000, 200003}; /* the last runs threaded */
    FOR_BACKENDS(be) {
        for (int k = 0; k < 4; k++) {
            int64_t n = sizes[k];
            float *a = xmalloc((size_t)n * 4), *b = xmalloc((size_t)n * 4), *y = xmalloc((size_t)n * 4);
            double *ref = xmalloc((size_t)n * 8);
            fill_rand(a, n, k >= 2 ? 60.0f : 6.0f); /* large |g|: exp over/underflow */
            fill_rand(b, n, 2.0f);
            rt_tensor ta = rt_tensor_1d(a, RT_F32, RT_DEV_CPU, n);
            rt_tensor tb = rt_tensor_1d(b, RT_F32, RT_DEV_CPU, n);
            rt_tensor ty = rt_tensor_1d(y, RT_F32, RT_DEV_CPU, n);
            for (int act = 0; act < 2; act++) {
                for (int64_t i = 0; i < n; i++)
                    ref[i] = (act ? gelu_d(a[i]) : a[i] / (1.0 + exp(-(double)a[i]))) * b[i];
                assert_int_equal(rt_glu(be, &ty, &ta, &tb, (rt_act)act), VC_OK);
                /* normalised by |g*u|: 1 + tanh(..) cancels for very negative g */
                for (int64_t i = 0; i < n; i++)
                    if (!(fabs(y[i] - ref[i]) <= 2e-6 * fabs((double)a[i] * b[i]) + 1e-30))
                        fail_msg("glu act %d [%lld]: %g vs %g", act, (long long)i, y[i], ref[i]);
            }
            for (int64_t i = 0; i < n; i++) ref[i] = (double)a[i] + b[i];
            assert_int_equal(rt_add(be, &ty, &ta, &tb), VC_OK);
            assert_true(rel_max_err(y, ref, n) < 1e-7);
            for (int64_t i = 0; i < n; i++) ref[i] = (double)a[i] * 0.37;
            assert_int_equal(rt_scale(be, &ty, &ta, 0.37f), VC_OK);
            assert_true(rel_max_err(y, ref, n) < 1e-7);
            /* in-place add */
            for (int64_t i = 0; i < n; i++) ref[i] = (double)a[i] + b[i];
            assert_int_equal(rt_add(be, &ta, &ta, &tb), VC_OK);
            assert_true(rel_max_err(a, ref, n) < 1e-7);
            free(a);
            free(b);
            free(y);
            free(ref);
        }
        /* bad activation id */
        float g = 1, u = 1, o;
        rt_tensor tg = rt_tensor_1d(&g, RT_F32, RT_DEV_CPU, 1), tu = rt_tensor_1d(&u, RT_F32, RT_DEV_CPU, 1),
                  to = rt_tensor_1d(&o, RT_F32, RT_DEV_CPU, 1);
        assert_int_equal(rt_glu(be, &to, &tg, &tu, (rt_act)7), VC_ERR_INVALID);
    }
}

static void test_softmax_argmax(void **state) {
    (void)state;
    const int64_t rows = 17, cols = 1001; /* threaded */
    float *x = xmalloc(rows * cols * 4), *y = xmalloc(rows * cols * 4);
    double *ref = xmalloc(rows * cols * 8);
    fill_rand(x, rows * cols, 20.0f);
    x[5] = 1000.0f; /* large values must not overflow */
    x[cols + 3] = -INFINITY;
    x[cols + 777] = 99.0f; /* argmax of row 1 below */
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY, s = 0;
        for (int64_t i = 0; i < cols; i++) m = fmax(m, x[r * cols + i]);
        for (int64_t i = 0; i < cols; i++) s += exp(x[r * cols + i] - m);
        for (int64_t i = 0; i < cols; i++) ref[r * cols + i] = exp(x[r * cols + i] - m) / s;
    }
    FOR_BACKENDS(be) {
        rt_tensor tx = rt_tensor_2d(x, RT_F32, RT_DEV_CPU, rows, cols);
        rt_tensor ty = rt_tensor_2d(y, RT_F32, RT_DEV_CPU, rows, cols);
        assert_int_equal(rt_softmax(be, &ty, &tx), VC_OK);
        for (int64_t r = 0; r < rows; r++) {
            double sum = 0;
            for (int64_t i = 0; i < cols; i++) {
                double e = fabs(y[r * cols + i] - ref[r * cols + i]);
                assert_true(e <= 1e-5 * ref[r * cols + i] + 1e-9);
                sum += y[r * cols + i];
            }
            assert_true(fabs(sum - 1.0) < 1e-5);
        }
        /* argmax: ties -> lowest index, NaN ignored */
        float a[3 * 6] = {1, 5, 5, 2, 5, 0, NAN, 3, NAN, 3, -1, 2, NAN, NAN, NAN, NAN, NAN, NAN};
        int32_t idx[3] = {-1, -1, -1};
        rt_tensor ta = rt_tensor_2d(a, RT_F32, RT_DEV_CPU, 3, 6);
        rt_tensor ti = rt_tensor_1d(idx, RT_I32, RT_DEV_CPU, 3);
        assert_int_equal(rt_argmax(be, &ti, &ta), VC_OK);
        assert_int_equal(idx[0], 1);
        assert_int_equal(idx[1], 1);
        assert_int_equal(idx[2], 0);
        int32_t big;
        rt_tensor tb = rt_tensor_1d(&big, RT_I32, RT_DEV_CPU, 1);
        rt_tensor tr = rt_tensor_2d(x + cols, RT_F32, RT_DEV_CPU, 1, cols);
        assert_int_equal(rt_argmax(be, &tb, &tr), VC_OK);
        assert_int_equal(big, 777);
    }
    free(x);
    free(y);
    free(ref);
}

/* Naive attention in double over the dequantized caches. */
static void attn_ref(double *out, const float *q, const float *k, const float *v, int64_t n,
                     int64_t h, int64_t kvh, int64_t hd, int64_t n_past, float scale, float softcap,
                     int32_t window) {
    int64_t ctx = n_past + n;
    double *s = xmalloc((size_t)ctx * 8);
    for (int64_t i = 0; i < n; i++)
        for (int64_t hh = 0; hh < h; hh++) {
            int64_t g = hh / (h / kvh), p = n_past + i;
            double m = -INFINITY;
            for (int64_t t = 0; t <= p; t++) {
                s[t] = -INFINITY;
                if (window > 0 && t <= p - window) continue;
                double d = 0;
                for (int64_t e = 0; e < hd; e++) d += (double)q[(i * h + hh) * hd + e] * k[(t * kvh + g) * hd + e];
                d *= scale;
                if (softcap > 0) d = softcap * tanh(d / softcap);
                s[t] = d;
                m = fmax(m, d);
            }
            double sum = 0;
            for (int64_t t = 0; t <= p; t++) sum += exp(s[t] - m);
            for (int64_t e = 0; e < hd; e++) {
                double acc = 0;
                for (int64_t t = 0; t <= p; t++) acc += exp(s[t] - m) / sum * v[(t * kvh + g) * hd + e];
                out[(i * h + hh) * hd + e] = acc;
            }
        }
    free(s);
}

static void test_attention(void **state) {
    (void)state;
    struct { int64_t n, h, kvh, hd, n_past; float softcap; int32_t window; } cases[] = {
        {1, 4, 4, 16, 0, 0, 0},     {3, 8, 2, 64, 5, 0, 0},    {17, 4, 1, 32, 70, 0, 0},
        {5, 6, 2, 128, 130, 30.0f, 0}, {4, 4, 2, 16, 20, 0, 7},  {2, 2, 1, 80, 200, 10.0f, 64},
        /* decode over long contexts: split into segments + combine; head
         * batches of 8 with a partial last batch (group 12) */
        {1, 12, 1, 64, 1500, 0, 0}, {1, 16, 2, 40, 4999, 20.0f, 0}, {1, 4, 4, 32, 3000, 0, 1100},
        {1, 24, 2, 8, 700, 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t n = cases[c].n, h = cases[c].h, kvh = cases[c].kvh, hd = cases[c].hd;
        int64_t ctx = cases[c].n_past + n + 3; /* cache longer than used */
        float *q = xmalloc((size_t)(n * h * hd) * 4), *k = xmalloc((size_t)(ctx * kvh * hd) * 4),
              *v = xmalloc((size_t)(ctx * kvh * hd) * 4), *y = xmalloc((size_t)(n * h * hd) * 4);
        uint16_t *k16 = xmalloc((size_t)(ctx * kvh * hd) * 2), *v16 = xmalloc((size_t)(ctx * kvh * hd) * 2);
        double *ref = xmalloc((size_t)(n * h * hd) * 8);
        fill_rand(q, n * h * hd, 1.0f);
        fill_rand(k, ctx * kvh * hd, 1.0f);
        fill_rand(v, ctx * kvh * hd, 1.0f);
        rt_quant_row(RT_F16, k, k16, ctx * kvh * hd);
        rt_quant_row(RT_F16, v, v16, ctx * kvh * hd);
        float scale = 1.0f / sqrtf((float)hd) * 2.0f;
        for (int f16 = 0; f16 < 2; f16++) {
            if (f16) { /* reference over the rounded cache */
                rt_dequant_row(RT_F16, k16, k, ctx * kvh * hd);
                rt_dequant_row(RT_F16, v16, v, ctx * kvh * hd);
            }
            attn_ref(ref, q, k, v, n, h, kvh, hd, cases[c].n_past, scale, cases[c].softcap,
                     cases[c].window);
            FOR_BACKENDS(be) {
                rt_tensor tq = rt_tensor_3d(q, RT_F32, RT_DEV_CPU, n, h, hd);
                rt_tensor ty = rt_tensor_3d(y, RT_F32, RT_DEV_CPU, n, h, hd);
                rt_tensor tk = rt_tensor_3d(f16 ? (void *)k16 : k, f16 ? RT_F16 : RT_F32, RT_DEV_CPU, ctx, kvh, hd);
                rt_tensor tv = rt_tensor_3d(f16 ? (void *)v16 : v, f16 ? RT_F16 : RT_F32, RT_DEV_CPU, ctx, kvh, hd);
                memset(y, 0xff, (size_t)(n * h * hd) * 4);
                assert_int_equal(rt_attention(be, &ty, &tq, &tk, &tv, cases[c].n_past, scale,
                                              cases[c].softcap, cases[c].window), VC_OK);
                double e = rel_max_err(y, ref, n * h * hd);
                if (!(e < 2e-5)) fail_msg("attention case %zu f16=%d isa %s: err %g", c, f16, g_isas[bi_ / 2], e);
            }
        }
        free(q); free(k); free(v); free(y); free(k16); free(v16); free(ref);
    }
}

static void test_embed(void **state) {
    (void)state;
    const int64_t V = 11, d = 256;
    float *tab = xmalloc(V * d * 4), *y = xmalloc(4 * d * 4), *row = xmalloc(d * 4);
    fill_rand(tab, V * d, 1.0f);
    int32_t ids[4] = {3, 0, 10, 3};
    rt_dtype types[] = {RT_F32, RT_F16, RT_BF16, RT_Q8_0, RT_Q4_K, RT_Q6_K};
    FOR_BACKENDS(be) {
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
            size_t rb = rt_dtype_row_bytes(types[k], d);
            char *q = xmalloc(rb * V);
            for (int64_t r = 0; r < V; r++) rt_quant_row(types[k], tab + r * d, q + r * rb, d);
            rt_tensor tt = rt_tensor_2d(q, types[k], RT_DEV_CPU, V, d);
            rt_tensor ti = rt_tensor_1d(ids, RT_I32, RT_DEV_CPU, 4);
            rt_tensor ty = rt_tensor_2d(y, RT_F32, RT_DEV_CPU, 4, d);
            assert_int_equal(rt_embed(be, &ty, &tt, &ti), VC_OK);
            for (int i = 0; i < 4; i++) {
                rt_dequant_row(types[k], q + ids[i] * rb, row, d);
                assert_memory_equal(row, y + i * d, d * 4);
            }
            int32_t bad[1] = {11};
            rt_tensor tb = rt_tensor_1d(bad, RT_I32, RT_DEV_CPU, 1);
            rt_tensor ty1 = rt_tensor_2d(y, RT_F32, RT_DEV_CPU, 1, d);
            assert_int_equal(rt_embed(be, &ty1, &tt, &tb), VC_ERR_INVALID);
            bad[0] = -1;
            assert_int_equal(rt_embed(be, &ty1, &tt, &tb), VC_ERR_INVALID);
            free(q);
        }
    }
    free(tab);
    free(y);
    free(row);
}

/* f32 -> f16 (COPY, and the f16 KV-cache stores that use the same row
 * kernel): bit-identical to rt_f32_to_f16 on every ISA for the edge cases
 * of RNE (ties at 1 and in the subnormals, overflow at 65520), zeros,
 * infinities, NaNs (one quiet NaN per sign), f32 subnormals, and a row
 * length with a SIMD tail. */
static void test_copy_f16_edges(void **state) {
    (void)state;
    enum { N = 61 };
    const uint32_t bits[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                             0xffc12345u, 0x00000001u, 0x80400000u, 0x477fe000u, 0x477fefffu, 0x477ff000u,
                             0xc77ff000u, 0x33800000u, 0x33000000u, 0x33400000u, 0x33c00000u, 0x38800000u,
                             0x387fe000u, 0x3f801000u, 0x3f803000u, 0x3f800fffu, 0x3f801001u, 0x38000000u};
    const int nb = (int)(sizeof bits / sizeof bits[0]);
    float src[N];
    uint16_t h[N];
    fill_rand(src, N, 70000.0f);
    for (int i = 0; i < nb; i++) memcpy(&src[2 * i], &bits[i], 4); /* specials at every other lane */
    FOR_BACKENDS(be) {
        rt_tensor ts = rt_tensor_1d(src, RT_F32, RT_DEV_CPU, N);
        rt_tensor th = rt_tensor_1d(h, RT_F16, RT_DEV_CPU, N);
        assert_int_equal(rt_copy(be, &th, &ts), VC_OK);
        for (int i = 0; i < N; i++)
            if (h[i] != rt_f32_to_f16(src[i])) {
                uint32_t u;
                memcpy(&u, &src[i], 4);
                fail_msg("f32 %08x -> f16 %04x, reference %04x", u, h[i], rt_f32_to_f16(src[i]));
            }
    }
}

static void test_copy(void **state) {
    (void)state;
    float src[4 * 64], back[4 * 64];
    fill_rand(src, 4 * 64, 3.0f);
    uint16_t h[4 * 64], hb[4 * 64];
    FOR_BACKENDS(be) {
        rt_tensor ts = rt_tensor_2d(src, RT_F32, RT_DEV_CPU, 4, 64);
        rt_tensor th = rt_tensor_2d(h, RT_F16, RT_DEV_CPU, 4, 64);
        rt_tensor tbk = rt_tensor_2d(back, RT_F32, RT_DEV_CPU, 4, 64);
        assert_int_equal(rt_copy(be, &th, &ts), VC_OK);
        for (int i = 0; i < 256; i++) assert_int_equal(h[i], rt_f32_to_f16(src[i]));
        assert_int_equal(rt_copy(be, &tbk, &th), VC_OK);
        for (int i = 0; i < 256; i++) assert_true(back[i] == rt_f16_to_f32(h[i]));
        rt_tensor tb16 = rt_tensor_2d(hb, RT_BF16, RT_DEV_CPU, 4, 64);
        assert_int_equal(rt_copy(be, &tb16, &ts), VC_OK);
        for (int i = 0; i < 256; i++) assert_int_equal(hb[i], rt_f32_to_bf16(src[i]));
        /* f16 -> bf16 */
        assert_int_equal(rt_copy(be, &tb16, &th), VC_OK);
        for (int i = 0; i < 256; i++) assert_int_equal(hb[i], rt_f32_to_bf16(rt_f16_to_f32(h[i])));
        /* bf16 -> f32 */
        assert_int_equal(rt_copy(be, &tbk, &tb16), VC_OK);
        for (int i = 0; i < 256; i++) assert_true(back[i] == rt_bf16_to_f32(hb[i]));
        /* quantized -> f32 */
        uint8_t q[4 * 34 * 2];
        for (int r = 0; r < 4; r++) rt_quant_row(RT_Q8_0, src + r * 64, q + r * 68, 64);
        rt_tensor tq = rt_tensor_2d(q, RT_Q8_0, RT_DEV_CPU, 4, 64);
        assert_int_equal(rt_copy(be, &tbk, &tq), VC_OK);
        float row[64];
        for (int r = 0; r < 4; r++) {
            rt_dequant_row(RT_Q8_0, q + r * 68, row, 64);
            assert_memory_equal(row, back + r * 64, sizeof row);
        }
        /* strided: transpose a [4,64] into a [64,4] view of back */
        rt_tensor tt = rt_tensor_2d(back, RT_F32, RT_DEV_CPU, 64, 4);
        tt.stride[0] = 4;
        tt.stride[1] = 64 * 4;
        rt_tensor srcT = rt_tensor_2d(src, RT_F32, RT_DEV_CPU, 64, 4); /* contiguous [64,4] */
        assert_int_equal(rt_copy(be, &tt, &srcT), VC_OK);
        for (int i = 0; i < 64; i++)
            for (int j = 0; j < 4; j++) assert_true(back[j * 64 + i] == src[i * 4 + j]);
        /* slice of rows (KV-cache style store) */
        float dst[8 * 64] = {0};
        rt_tensor td = rt_tensor_2d(dst, RT_F32, RT_DEV_CPU, 8, 64);
        rt_tensor sl = rt_tensor_slice0(&td, 3, 4);
        assert_int_equal(rt_copy(be, &sl, &ts), VC_OK);
        assert_memory_equal(dst + 3 * 64, src, sizeof src);
        assert_true(dst[2 * 64 + 63] == 0.0f && dst[7 * 64] == 0.0f);
        /* unsupported: f16 -> q8_0 */
        assert_int_equal(rt_copy(be, &tq, &th), VC_ERR_UNSUPPORTED);
        /* f32 -> quantized uses the reference quantizer; same-type copies are bytes */
        float wide[2 * 256];
        fill_rand(wide, 512, 2.0f);
        uint8_t qk[2 * 144], qk_ref[2 * 144], qk2[2 * 144];
        rt_tensor tw = rt_tensor_2d(wide, RT_F32, RT_DEV_CPU, 2, 256);
        rt_tensor tqk = rt_tensor_2d(qk, RT_Q4_K, RT_DEV_CPU, 2, 256);
        rt_tensor tqk2 = rt_tensor_2d(qk2, RT_Q4_K, RT_DEV_CPU, 2, 256);
        assert_int_equal(rt_copy(be, &tqk, &tw), VC_OK);
        for (int r = 0; r < 2; r++) rt_quant_row(RT_Q4_K, wide + r * 256, qk_ref + r * 144, 256);
        assert_memory_equal(qk, qk_ref, sizeof qk);
        assert_int_equal(rt_copy(be, &tqk2, &tqk), VC_OK);
        assert_memory_equal(qk2, qk_ref, sizeof qk);
    }
}

static void test_alloc_copy(void **state) {
    (void)state;
    rt_backend *be = make_backend("scalar", 2);
    int64_t shape[2] = {3, 5};
    rt_tensor t = rt_tensor_alloc(be, RT_F32, 2, shape);
    assert_non_null(t.data);
    assert_int_equal((uintptr_t)t.data % 64, 0);
    float src[15];
    fill_rand(src, 15, 1);
    rt_tensor s = rt_tensor_2d(src, RT_F32, RT_DEV_CPU, 3, 5);
    assert_int_equal(rt_tensor_copy_bytes(be, &t, &s), VC_OK);
    assert_memory_equal(t.data, src, sizeof src);
    assert_int_equal(rt_backend_sync(be), VC_OK);
    rt_backend_free_mem(be, t.data);
    rt_backend_free(be);
    /* an unknown VLLM_CPU_ISA falls back to detection (with a warning) */
    be = make_backend("bogus", 1);
    rt_backend_free(be);
}

int main(void) {
    vc_log_set_level(VC_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm),   cmocka_unit_test(test_rope),
        cmocka_unit_test(test_elementwise), cmocka_unit_test(test_softmax_argmax),
        cmocka_unit_test(test_attention), cmocka_unit_test(test_embed),
        cmocka_unit_test(test_copy),      cmocka_unit_test(test_copy_f16_edges),      cmocka_unit_test(test_alloc_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
