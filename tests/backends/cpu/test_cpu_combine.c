/* COMBINE on the CPU backend (dst[pos[j]] = vals[sel[j]]), and the backend
 * seam's queued device->host copies as the CPU serves them:
 *  - random sizes and distinct positions: dst equals the reference, the
 *    other entries are untouched; n = 0 leaves dst as it was;
 *  - an index out of range (pos or sel, below or above) fails with
 *    VC_ERR_INVALID and writes nothing;
 *  - shape / dtype errors of the wrapper (pos and sel lengths differ,
 *    f32 tensors, 2-D dst);
 *  - rt_backend_host_alloc / event_create / copy_to_host_async /
 *    event_wait (the fallbacks: a plain copy, a wait that returns at once).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/err.h"
#include "runtime/ops.h"

#include <stdlib.h>
#include <string.h>

static rt_backend *g_be;
static uint64_t g_rng = 0x243F6A8885A308D3ull;

static uint32_t next(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

static rt_tensor vec(int32_t *p, int64_t n) { return rt_tensor_1d(p, RT_I32, RT_DEV_CPU, n); }

static void test_random(void **st) {
    (void)st;
    enum { NMAX = 600, PMAX = 300 };
    static int32_t dst[NMAX], want[NMAX], vals[PMAX], pos[NMAX], sel[NMAX], perm[NMAX];
    for (int iter = 0; iter < 200; iter++) {
        int64_t N = 1 + next() % NMAX, P = 1 + next() % PMAX, n = next() % (N + 1);
        for (int64_t i = 0; i < N; i++) dst[i] = want[i] = (int32_t)(next() % 100000);
        for (int64_t i = 0; i < P; i++) vals[i] = (int32_t)(next() % 100000) + 100000;
        for (int64_t i = 0; i < N; i++) perm[i] = (int32_t)i;
        for (int64_t i = N - 1; i > 0; i--) { /* distinct positions */
            int64_t k = next() % (i + 1);
            int32_t t = perm[i];
            perm[i] = perm[k];
            perm[k] = t;
        }
        for (int64_t j = 0; j < n; j++) {
            pos[j] = perm[j];
            sel[j] = (int32_t)(next() % P);
            want[pos[j]] = vals[sel[j]];
        }
        rt_tensor d = vec(dst, N), v = vec(vals, P), p = vec(pos, n), s = vec(sel, n);
        assert_int_equal(rt_combine(g_be, &d, &v, &p, &s), VC_OK);
        assert_memory_equal(dst, want, (size_t)N * sizeof *dst);
    }
}

static void test_bad_index(void **st) {
    (void)st;
    int32_t dst[8] = {1, 2, 3, 4, 5, 6, 7, 8}, keep[8], vals[3] = {70, 71, 72};
    memcpy(keep, dst, sizeof dst);
    const int32_t bad[4][2] = {{8, 0}, {-1, 0}, {2, 3}, {2, -1}}; /* (pos, sel) */
    for (int k = 0; k < 4; k++) {
        int32_t pos[2] = {0, bad[k][0]}, sel[2] = {1, bad[k][1]}; /* a good entry first */
        rt_tensor d = vec(dst, 8), v = vec(vals, 3), p = vec(pos, 2), s = vec(sel, 2);
        assert_int_equal(rt_combine(g_be, &d, &v, &p, &s), VC_ERR_INVALID);
        assert_non_null(strstr(vc_err_msg(), "combine"));
        assert_memory_equal(dst, keep, sizeof dst);
    }
    /* the wrapper's checks */
    int32_t pos[2] = {0, 1}, sel[2] = {0, 1};
    rt_tensor d = vec(dst, 8), v = vec(vals, 3), p = vec(pos, 2), s1 = vec(sel, 1), s = vec(sel, 2);
    assert_int_equal(rt_combine(g_be, &d, &v, &p, &s1), VC_ERR_INVALID);
    float fl[8] = {0};
    rt_tensor df = rt_tensor_1d(fl, RT_F32, RT_DEV_CPU, 8);
    assert_int_equal(rt_combine(g_be, &df, &v, &p, &s), VC_ERR_INVALID);
    rt_tensor d2 = rt_tensor_2d(dst, RT_I32, RT_DEV_CPU, 2, 4);
    assert_int_equal(rt_combine(g_be, &d2, &v, &p, &s), VC_ERR_INVALID);
    rt_tensor p0 = vec(pos, 0), s0 = vec(sel, 0);
    assert_int_equal(rt_combine(g_be, &d, &v, &p0, &s0), VC_OK);
    assert_memory_equal(dst, keep, sizeof dst);
}

static void test_async_copy_fallback(void **st) {
    (void)st;
    int32_t *h = rt_backend_host_alloc(g_be, 64 * sizeof *h);
    void *ev = rt_backend_event_create(g_be);
    assert_non_null(h);
    assert_non_null(ev);
    int32_t src[64];
    for (int i = 0; i < 64; i++) src[i] = 3 * i + 1;
    assert_int_equal(rt_backend_copy_to_host_async(g_be, h, src, sizeof src, ev), VC_OK);
    assert_int_equal(rt_backend_event_wait(g_be, ev), VC_OK);
    assert_memory_equal(h, src, sizeof src);
    rt_backend_event_free(g_be, ev);
    rt_backend_host_free(g_be, h);
}

static int setup(void **st) {
    (void)st;
    rt_backend_params p = rt_backend_params_default();
    p.n_threads = 1;
    g_be = rt_backend_create(RT_DEV_CPU, &p);
    return g_be ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    rt_backend_free(g_be);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_bad_index),
        cmocka_unit_test(test_async_copy_fallback),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
