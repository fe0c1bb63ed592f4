/* Shared helpers for the CPU backend tests: deterministic random data,
 * backend creation at a forced ISA level, error metrics. */
#ifndef CPU_TEST_UTIL_H
#define CPU_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/err.h"
#include "runtime/ops.h"
#include "runtime/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_isas[] = {"scalar", "avx2", "avx512"};
#define N_ISAS 3

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static inline float rnd_uniform(void) { /* [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static inline void fill_rand(float *x, int64_t n, float amp) {
    for (int64_t i = 0; i < n; i++) x[i] = amp * rnd_uniform();
}

/* A CPU backend with n_threads and the kernels of `isa` (capped to what
 * this CPU runs). */
static inline rt_backend *make_backend(const char *isa, int n_threads) {
    setenv("VLLM_CPU_ISA", isa, 1);
    rt_backend_params p = rt_backend_params_default();
    p.n_threads = n_threads;
    rt_backend *be = rt_backend_create(RT_DEV_CPU, &p);
    unsetenv("VLLM_CPU_ISA");
    assert_non_null(be);
    return be;
}

static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

/* max_i |a_i - b_i| / (max_i |b_i| + tiny) */
static inline double rel_max_err(const float *a, const double *b, int64_t n) {
    double e = 0, m = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d; /* NaN propagates */
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return e / m;
}

static inline double rel_max_err_f(const float *a, const float *b, int64_t n) {
    double e = 0, m = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= e)) e = d;
        if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
    }
    return e / m;
}

#endif

/* Naive causal GQA attention in double for ONE query row q[h, hd] at
 * position pos over contiguous logical caches k/v[ctx, kvh, hd]. */
static inline void attn_ref_row(double *out, const float *q, const float *k, const float *v,
                                int64_t h, int64_t kvh, int64_t hd, int64_t pos, float scale,
                                float softcap, int32_t window) {
    double *s = (double *)malloc((size_t)(pos + 1) * sizeof(double));
    assert_non_null(s);
    for (int64_t hh = 0; hh < h; hh++) {
        int64_t g = hh / (h / kvh);
        double m = -INFINITY;
        for (int64_t t = 0; t <= pos; t++) {
            s[t] = -INFINITY;
            if (window > 0 && t <= pos - window) continue;
            double d = 0;
            for (int64_t e = 0; e < hd; e++) d += (double)q[hh * hd + e] * k[(t * kvh + g) * hd + e];
            d *= scale;
            if (softcap > 0) d = softcap * tanh(d / softcap);
            s[t] = d;
            m = fmax(m, d);
        }
        double sum = 0;
        for (int64_t t = 0; t <= pos; t++) sum += exp(s[t] - m);
        for (int64_t e = 0; e < hd; e++) {
            double acc = 0;
            for (int64_t t = 0; t <= pos; t++) acc += exp(s[t] - m) / sum * v[(t * kvh + g) * hd + e];
            out[hh * hd + e] = acc;
        }
    }
    free(s);
}
