/* cuda_test_util — shared pieces of the CUDA op tests (header-only): the
 * CPU oracle and GPU backends (g_cpu, g_gpu; no GPU: g_gpu NULL and the
 * tests skip), checked host allocation, device upload / download / free,
 * and the normalised error max|a - b| / max|b| used against CPU results.
 * Each test keeps its own random generator (seeds differ per file). */
#ifndef TEST_CUDA_TEST_UTIL_H
#define TEST_CUDA_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/err.h"
#include "runtime/backend.h"
#include "runtime/ops.h"
#include "runtime/quant.h"

static rt_backend *g_cpu, *g_gpu;

#define NEED_GPU()                                                             \
    do {                                                                       \
        if (!g_gpu) skip();                                                    \
    } while (0)

static inline void *xmalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    assert_non_null(p);
    return p;
}

/* A device copy of host bytes with the given dtype/shape (contiguous). */
static inline rt_tensor up(const void *host, rt_dtype dt, int ndim, const int64_t *shape) {
    rt_tensor d = rt_tensor_alloc(g_gpu, dt, ndim, shape);
    assert_non_null(d.data);
    rt_tensor h = rt_tensor_make((void *)host, dt, RT_DEV_CPU, ndim, shape);
    assert_int_equal(rt_tensor_copy_bytes(g_gpu, &d, &h), VC_OK);
    return d;
}

static inline void down(void *host, const rt_tensor *d) {
    rt_tensor h = rt_tensor_make(host, d->dtype, RT_DEV_CPU, d->ndim, d->shape);
    assert_int_equal(rt_tensor_copy_bytes(g_gpu, &h, d), VC_OK);
}

static inline void drop(rt_tensor *d) {
    rt_backend_free_mem(g_gpu, d->data);
    d->data = NULL;
}

static inline double nerr(const float *a, const float *b, int64_t n) {
    double e = 0, m = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= e)) e = d; /* NaN propagates */
        if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
    }
    return e / m;
}

/* xorshift64 step of a file's generator state: a value in [-1, 1). */
static inline float cuda_test_rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((*s >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* rows x n random values in [-amp, amp) from the file's generator rnd,
 * stored as dtype t (quantized types through the reference quantizer). */
static inline void *rand_rows(rt_dtype t, int64_t rows, int64_t n, float amp, float (*rnd)(void)) {
    size_t rb = rt_dtype_row_bytes(t, n);
    char *buf = xmalloc(rb * (size_t)rows);
    float *tmp = xmalloc((size_t)n * 4);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) tmp[i] = amp * rnd();
        assert_int_equal(rt_quant_row(t, tmp, buf + r * rb, n), VC_OK);
    }
    free(tmp);
    return buf;
}

/* One MATMUL (glu 0: y = x W^T) or MATMUL_GLU (SiLU; s the scratch) on g_gpu. */
static inline int cuda_test_mm(int glu, rt_tensor *y, rt_tensor *x, rt_tensor *w, rt_tensor *s) {
    return glu ? rt_matmul_glu(g_gpu, y, x, w, RT_ACT_SILU, s) : rt_matmul(g_gpu, y, x, w, NULL);
}

/* us per call of call(ctx, r) (r: the call's index, 0 .. reps - 1): a
 * graph of reps calls replayed 3 times (one eager call first), or reps
 * eager calls 3 times where there are no graphs or `eager` (a path that
 * allocates per call cannot be recorded). */
static inline double cuda_test_time_calls(int (*call)(void *ctx, int r), void *ctx, int eager, int reps) {
    assert_int_equal(call(ctx, 0), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    void *g = NULL;
    if (!eager && rt_backend_has_graphs(g_gpu)) {
        assert_int_equal(rt_backend_graph_begin(g_gpu), VC_OK);
        for (int r = 0; r < reps; r++) assert_int_equal(call(ctx, r), VC_OK);
        assert_int_equal(rt_backend_graph_end(g_gpu, &g), VC_OK);
        assert_int_equal(rt_backend_graph_launch(g_gpu, g), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    }
    double t0 = vc_now_s();
    for (int k = 0; k < 3; k++) {
        if (g) assert_int_equal(rt_backend_graph_launch(g_gpu, g), VC_OK);
        else
            for (int r = 0; r < reps; r++) assert_int_equal(call(ctx, r), VC_OK);
    }
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    double us = (vc_now_s() - t0) / (3 * reps) * 1e6;
    if (g) rt_backend_graph_free(g_gpu, g);
    return us;
}

typedef struct {
    int glu;
    rt_tensor *y, *x, *w, *s;
} cuda_test_mm_args;

static inline int cuda_test_mm_call(void *ctx, int r) {
    (void)r;
    const cuda_test_mm_args *a = (const cuda_test_mm_args *)ctx;
    return cuda_test_mm(a->glu, a->y, a->x, a->w, a->s);
}

/* us per call of cuda_test_mm (cuda_test_time_calls). */
static inline double cuda_test_time_mm(int glu, rt_tensor *y, rt_tensor *x, rt_tensor *w, rt_tensor *s, int eager,
                                       int reps) {
    cuda_test_mm_args a = {glu, y, x, w, s};
    return cuda_test_time_calls(cuda_test_mm_call, &a, eager, reps);
}

/* Group setup: a CPU backend of cpu_threads threads and the CUDA device. */
static inline int cuda_test_setup(int cpu_threads) {
    rt_backend_params p = rt_backend_params_default();
    p.n_threads = cpu_threads;
    g_cpu = rt_backend_create(RT_DEV_CPU, &p);
    if (!g_cpu) return -1;
    g_gpu = rt_backend_create(RT_DEV_CUDA, &p);
    if (!g_gpu) print_message("no CUDA device: %s (tests skipped)\n", vc_err_msg());
    return 0;
}

static inline int cuda_test_teardown(void) {
    rt_backend_free(g_gpu);
    rt_backend_free(g_cpu);
    return 0;
}

/* The cmocka group fixtures most CUDA tests use: a 2-thread CPU oracle and
 * the device. */
static inline int cuda_test_group_setup(void **st) {
    (void)st;
    return cuda_test_setup(2);
}

static inline int cuda_test_group_teardown(void **st) {
    (void)st;
    return cuda_test_teardown();
}

/* VLLM_TEST_ONLY=<test name>: run that test of the group only. */
static inline void cuda_test_filter(void) {
    const char *only = getenv("VLLM_TEST_ONLY");
    if (only && *only) cmocka_set_test_filter(only);
}

#endif
