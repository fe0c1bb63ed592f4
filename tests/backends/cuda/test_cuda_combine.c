/* COMBINE on the CUDA backend against the CPU op, and the backend's queued
 * device->host copies guarded by events (async scheduling's device mirror):
 *  - random sizes (up to 70,000 entries: several blocks) with distinct
 *    positions: the GPU's dst equals the CPU's, byte for byte;
 *  - an index out of range: the op is queued (VC_OK), the good entries are
 *    written, the bad one is not, and the next sync reports VC_ERR_INVALID
 *    naming combine; the sync after it is clean;
 *  - copy_to_host_async + event_wait: the pinned host copy holds the device
 *    values as of the copy, not those of work queued after it; the wait
 *    works from another thread; a bad COMBINE before the copy fails the
 *    wait (the flags travel with the event) and leaves the stream clean;
 *  - a COMBINE recorded in a graph replays with new values.
 * Skips when no CUDA device is present.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/err.h"
#include "runtime/ops.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static rt_backend *g_cpu, *g_gpu;
static uint64_t g_rng = 0x13198A2E03707344ull;

static uint32_t next(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

#define NEED_GPU()                                                             \
    do {                                                                       \
        if (!g_gpu) skip();                                                    \
    } while (0)

static rt_tensor up(const int32_t *host, int64_t n) {
    rt_tensor d = rt_tensor_alloc(g_gpu, RT_I32, 1, &n);
    assert_non_null(d.data);
    rt_tensor h = rt_tensor_1d((void *)host, RT_I32, RT_DEV_CPU, n);
    if (n) assert_int_equal(rt_tensor_copy_bytes(g_gpu, &d, &h), VC_OK);
    return d;
}

static void down(int32_t *host, const rt_tensor *d) {
    rt_tensor h = rt_tensor_1d(host, RT_I32, RT_DEV_CPU, d->shape[0]);
    assert_int_equal(rt_tensor_copy_bytes(g_gpu, &h, d), VC_OK);
}

static void drop(rt_tensor *d) {
    rt_backend_free_mem(g_gpu, d->data);
    d->data = NULL;
}

static int32_t *xmalloc(size_t n) {
    int32_t *p = calloc(1, n ? n : 1);
    assert_non_null(p);
    return p;
}

static void test_vs_cpu(void **st) {
    (void)st;
    NEED_GPU();
    const int64_t sizes[][3] = {{1, 1, 1}, {7, 3, 7}, {512, 256, 200}, {4096, 4096, 4096}, {100000, 500, 70000}};
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++)
        for (int rep = 0; rep < 3; rep++) {
            int64_t N = sizes[c][0], P = sizes[c][1];
            int64_t n = rep == 0 ? sizes[c][2] : (int64_t)(next() % (sizes[c][2] + 1));
            int32_t *dst = xmalloc((size_t)N * 4), *cpu = xmalloc((size_t)N * 4), *gpu = xmalloc((size_t)N * 4);
            int32_t *vals = xmalloc((size_t)P * 4), *pos = xmalloc((size_t)N * 4), *sel = xmalloc((size_t)N * 4);
            for (int64_t i = 0; i < N; i++) dst[i] = (int32_t)(next() % 1000000);
            for (int64_t i = 0; i < P; i++) vals[i] = 1000000 + (int32_t)(next() % 1000000);
            for (int64_t i = 0; i < N; i++) pos[i] = (int32_t)i;
            for (int64_t i = N - 1; i > 0; i--) {
                int64_t k = next() % (i + 1);
                int32_t t = pos[i];
                pos[i] = pos[k];
                pos[k] = t;
            }
            for (int64_t j = 0; j < n; j++) sel[j] = (int32_t)(next() % P);
            memcpy(cpu, dst, (size_t)N * 4);
            rt_tensor hd = rt_tensor_1d(cpu, RT_I32, RT_DEV_CPU, N), hv = rt_tensor_1d(vals, RT_I32, RT_DEV_CPU, P);
            rt_tensor hp = rt_tensor_1d(pos, RT_I32, RT_DEV_CPU, n), hs = rt_tensor_1d(sel, RT_I32, RT_DEV_CPU, n);
            assert_int_equal(rt_combine(g_cpu, &hd, &hv, &hp, &hs), VC_OK);
            rt_tensor dd = up(dst, N), dv = up(vals, P), dp = up(pos, n), ds = up(sel, n);
            assert_int_equal(rt_combine(g_gpu, &dd, &dv, &dp, &ds), VC_OK);
            down(gpu, &dd);
            assert_memory_equal(gpu, cpu, (size_t)N * 4);
            drop(&dd), drop(&dv), drop(&dp), drop(&ds);
            free(dst), free(cpu), free(gpu), free(vals), free(pos), free(sel);
        }
}

static void test_bad_index(void **st) {
    (void)st;
    NEED_GPU();
    int32_t dst[8] = {1, 2, 3, 4, 5, 6, 7, 8}, vals[3] = {70, 71, 72}, got[8];
    int32_t pos[3] = {0, 9, 5}, sel[3] = {2, 0, 1}; /* entry 1 is out of range */
    rt_tensor dd = up(dst, 8), dv = up(vals, 3), dp = up(pos, 3), ds = up(sel, 3);
    assert_int_equal(rt_combine(g_gpu, &dd, &dv, &dp, &ds), VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_ERR_INVALID);
    assert_non_null(strstr(vc_err_msg(), "combine"));
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    down(got, &dd);
    const int32_t want[8] = {72, 2, 3, 4, 5, 71, 7, 8};
    assert_memory_equal(got, want, sizeof want);
    drop(&dd), drop(&dv), drop(&dp), drop(&ds);
}

typedef struct {
    void *ev;
    int rc;
} wait_arg;

static void *waiter(void *p) {
    wait_arg *w = p;
    w->rc = rt_backend_event_wait(g_gpu, w->ev);
    return NULL;
}

static void test_async_copy(void **st) {
    (void)st;
    NEED_GPU();
    enum { N = 4096 };
    int32_t *a = xmalloc(N * 4), *b = xmalloc(N * 4), *all = xmalloc(N * 4);
    for (int i = 0; i < N; i++) a[i] = i * 7 + 1, b[i] = -i, all[i] = i;
    rt_tensor dx = up(a, N), db = up(b, N), dall = up(all, N);
    int32_t *h = rt_backend_host_alloc(g_gpu, N * 4);
    void *ev = rt_backend_event_create(g_gpu);
    assert_non_null(h);
    assert_non_null(ev);
    for (int round = 0; round < 20; round++) {
        memset(h, 0xff, N * 4);
        assert_int_equal(rt_backend_copy_to_host_async(g_gpu, h, dx.data, N * 4, ev), VC_OK);
        /* queued after the copy: overwrite dx with b, then restore a */
        assert_int_equal(rt_combine(g_gpu, &dx, &db, &dall, &dall), VC_OK);
        wait_arg w = {ev, -1};
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, waiter, &w), 0);
        pthread_join(th, NULL);
        assert_int_equal(w.rc, VC_OK);
        assert_memory_equal(h, a, N * 4);
        rt_tensor da = up(a, N);
        assert_int_equal(rt_combine(g_gpu, &dx, &da, &dall, &dall), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        drop(&da);
    }
    /* flags travel with the event */
    int32_t bad[1] = {N};
    rt_tensor dbad = up(bad, 1), dp = rt_tensor_slice0(&dall, 0, 1);
    assert_int_equal(rt_combine(g_gpu, &dx, &db, &dbad, &dp), VC_OK);
    assert_int_equal(rt_backend_copy_to_host_async(g_gpu, h, dx.data, N * 4, ev), VC_OK);
    assert_int_equal(rt_backend_event_wait(g_gpu, ev), VC_ERR_INVALID);
    assert_non_null(strstr(vc_err_msg(), "combine"));
    assert_memory_equal(h, a, N * 4); /* nothing written */
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    assert_int_equal(rt_backend_copy_to_host_async(g_gpu, h, dx.data, N * 4, ev), VC_OK);
    assert_int_equal(rt_backend_event_wait(g_gpu, ev), VC_OK);
    rt_backend_event_free(g_gpu, ev);
    rt_backend_host_free(g_gpu, h);
    drop(&dx), drop(&db), drop(&dall), drop(&dbad);
    free(a), free(b), free(all);
}

static void test_graph(void **st) {
    (void)st;
    NEED_GPU();
    if (!rt_backend_has_graphs(g_gpu)) skip();
    int32_t dst[6] = {0}, vals[4] = {10, 11, 12, 13}, pos[2] = {4, 1}, sel[2] = {3, 0}, got[6];
    rt_tensor dd = up(dst, 6), dv = up(vals, 4), dp = up(pos, 2), ds = up(sel, 2);
    void *g = NULL;
    assert_int_equal(rt_backend_graph_begin(g_gpu), VC_OK);
    assert_int_equal(rt_combine(g_gpu, &dd, &dv, &dp, &ds), VC_OK);
    assert_int_equal(rt_backend_graph_end(g_gpu, &g), VC_OK);
    assert_non_null(g);
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 4; i++) vals[i] = 100 * k + i;
        rt_tensor h = rt_tensor_1d(vals, RT_I32, RT_DEV_CPU, 4);
        assert_int_equal(rt_tensor_copy_bytes(g_gpu, &dv, &h), VC_OK);
        assert_int_equal(rt_backend_graph_launch(g_gpu, g), VC_OK);
        down(got, &dd);
        const int32_t want[6] = {0, 100 * k, 0, 0, 100 * k + 3, 0};
        assert_memory_equal(got, want, sizeof want);
    }
    rt_backend_graph_free(g_gpu, g);
    drop(&dd), drop(&dv), drop(&dp), drop(&ds);
}

static int setup(void **st) {
    (void)st;
    rt_backend_params p = rt_backend_params_default();
    p.n_threads = 1;
    g_cpu = rt_backend_create(RT_DEV_CPU, &p);
    if (!g_cpu) return -1;
    g_gpu = rt_backend_create(RT_DEV_CUDA, &p);
    if (!g_gpu) print_message("no CUDA device: %s (tests skipped)\n", vc_err_msg());
    return 0;
}

static int teardown(void **st) {
    (void)st;
    rt_backend_free(g_gpu);
    rt_backend_free(g_cpu);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vs_cpu),
        cmocka_unit_test(test_bad_index),
        cmocka_unit_test(test_async_copy),
        cmocka_unit_test(test_graph),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
