/* Collectives of the CPU backend (rank = thread): all_reduce_sum (odd
 * rounds through all_reduce_start + wait, which run it at once here),
 * all_gather, and reduce_scatter_sum followed by an in-place all_gather
 * (the sequence-parallel pair; in place and not), all_to_all against a serial reference, for several world sizes and
 * dtypes, many back-to-back calls of changing sizes, and bad arguments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "base/err.h"
#include "runtime/comm.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_W 4
#define ROUNDS 40

typedef struct {
    rt_comm *c;
    rt_dtype dt;
    int failures;
} rank_arg;

/* Value of element i on rank r in round k: distinct, exactly representable. */
static float val(int r, int k, size_t i) { return (float)((int)((i * 7 + (size_t)r * 13 + (size_t)k) % 97) - 48) * 0.25f; }

static size_t round_n(int k) { return (size_t)(1 + (k * 131) % 1000); }

static void *rank_main(void *p) {
    rank_arg *a = p;
    rt_comm *c = a->c;
    int W = c->world;
    for (int k = 0; k < ROUNDS; k++) {
        size_t n = round_n(k);
        size_t es = a->dt == RT_F32 ? 4 : 2;
        void *buf = malloc(n * es);
        for (size_t i = 0; i < n; i++) {
            float v = val(c->rank, k, i);
            if (a->dt == RT_F32) ((float *)buf)[i] = v;
            else ((uint16_t *)buf)[i] = rt_f32_to_bf16(v);
        }
        rt_tensor t = rt_tensor_1d(buf, a->dt, RT_DEV_CPU, (int64_t)n);
        if (k % 2 == 0) {
            if (rt_comm_all_reduce_sum(c, &t) < 0) a->failures++;
        } else {
            int slot = (k / 2) % RT_COMM_SLOTS;
            if (rt_comm_all_reduce_start(c, &t, slot) < 0 || rt_comm_wait(c, slot) < 0) a->failures++;
        }
        for (size_t i = 0; i < n; i++) {
            float want = 0;
            for (int r = 0; r < W; r++) want += val(r, k, i);
            float got = a->dt == RT_F32 ? ((float *)buf)[i] : rt_bf16_to_f32(((uint16_t *)buf)[i]);
            if (got != want) a->failures++;
        }
        /* all_gather of a rank-specific block */
        float *src = malloc(n * sizeof *src), *dst = malloc((size_t)W * n * sizeof *dst);
        for (size_t i = 0; i < n; i++) src[i] = val(c->rank, k + 1, i);
        rt_tensor ts = rt_tensor_1d(src, RT_F32, RT_DEV_CPU, (int64_t)n);
        rt_tensor td = rt_tensor_2d(dst, RT_F32, RT_DEV_CPU, W, (int64_t)n);
        if (rt_comm_all_gather(c, &ts, &td) < 0) a->failures++;
        for (int r = 0; r < W; r++)
            for (size_t i = 0; i < n; i++)
                if (dst[(size_t)r * n + i] != val(r, k + 1, i)) a->failures++;
        free(src);
        free(dst);
        free(buf);
        /* reduce_scatter [W * n] -> block rank of the sum (even rounds out
         * of place, odd rounds in place into the own block), then the
         * all_gather of those blocks in place (odd rounds through
         * all_gather_start + wait): every rank ends with the full sum. */
        char *whole = malloc((size_t)W * n * es), *part = malloc(n * es);
        for (size_t i = 0; i < (size_t)W * n; i++) {
            float v = val(c->rank, k + 2, i);
            if (a->dt == RT_F32) ((float *)whole)[i] = v;
            else ((uint16_t *)whole)[i] = rt_f32_to_bf16(v);
        }
        rt_tensor tw = rt_tensor_1d(whole, a->dt, RT_DEV_CPU, (int64_t)(W * n));
        rt_tensor own = rt_tensor_1d(whole + (size_t)c->rank * n * es, a->dt, RT_DEV_CPU, (int64_t)n);
        rt_tensor tp = k % 2 ? own : rt_tensor_1d(part, a->dt, RT_DEV_CPU, (int64_t)n);
        if (rt_comm_reduce_scatter_sum(c, &tw, &tp) < 0) a->failures++;
        if (tp.data != own.data) memcpy(own.data, tp.data, n * es);
        int slot = k % RT_COMM_SLOTS;
        if (k % 2 == 0 ? rt_comm_all_gather(c, &own, &tw) < 0
                       : rt_comm_all_gather_start(c, &own, &tw, slot) < 0 || rt_comm_wait(c, slot) < 0)
            a->failures++;
        for (size_t i = 0; i < (size_t)W * n; i++) {
            float want = 0;
            for (int r = 0; r < W; r++) want += val(r, k + 2, i);
            if (a->dt == RT_BF16) want = rt_bf16_to_f32(rt_f32_to_bf16(want));
            float got = a->dt == RT_F32 ? ((float *)whole)[i] : rt_bf16_to_f32(((uint16_t *)whole)[i]);
            if (got != want) a->failures++;
        }
        free(whole);
        free(part);
        /* all_to_all (odd rounds through the start + wait): block q of dst
         * = rank q's block `rank` of src */
        float *as = malloc((size_t)W * n * sizeof *as), *ad = malloc((size_t)W * n * sizeof *ad);
        for (size_t i = 0; i < (size_t)W * n; i++) as[i] = val(c->rank, k + 4, i);
        rt_tensor tas = rt_tensor_1d(as, RT_F32, RT_DEV_CPU, (int64_t)(W * n)),
                  tad = rt_tensor_1d(ad, RT_F32, RT_DEV_CPU, (int64_t)(W * n));
        if (k % 2 == 0 ? rt_comm_all_to_all(c, &tas, &tad) < 0
                       : rt_comm_all_to_all_start(c, &tas, &tad, slot) < 0 || rt_comm_wait(c, slot) < 0)
            a->failures++;
        for (int q = 0; q < W; q++)
            for (size_t i = 0; i < n; i++)
                if (ad[(size_t)q * n + i] != val(q, k + 4, (size_t)c->rank * n + i)) a->failures++;
        free(as);
        free(ad);
    }
    return NULL;
}

static void run_group(int W, rt_dtype dt) {
    rt_backend_params bp = rt_backend_params_default();
    bp.n_threads = 1;
    rt_backend *be = rt_backend_create(RT_DEV_CPU, &bp);
    assert_non_null(be);
    rt_backend *bes[MAX_W];
    for (int r = 0; r < W; r++) bes[r] = be; /* ranks may share one CPU backend */
    rt_comm *c[MAX_W];
    assert_int_equal(rt_comm_group_create(bes, W, c), 0);
    pthread_t th[MAX_W];
    rank_arg args[MAX_W];
    for (int r = 0; r < W; r++) {
        assert_int_equal(c[r]->rank, r);
        assert_int_equal(c[r]->world, W);
        args[r] = (rank_arg){.c = c[r], .dt = dt};
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &args[r]), 0);
    }
    for (int r = 0; r < W; r++) {
        pthread_join(th[r], NULL);
        assert_int_equal(args[r].failures, 0);
    }
    rt_comm_group_free(c, W);
    rt_backend_free(be);
}

static void test_world_sizes_f32(void **s) {
    (void)s;
    for (int W = 1; W <= MAX_W; W++) run_group(W, RT_F32);
}

static void test_world_sizes_bf16(void **s) {
    (void)s;
    run_group(2, RT_BF16);
    run_group(3, RT_BF16);
}

static void test_bad_arguments(void **s) {
    (void)s;
    rt_backend_params bp = rt_backend_params_default();
    bp.n_threads = 1;
    rt_backend *be = rt_backend_create(RT_DEV_CPU, &bp);
    rt_backend *bes[2] = {be, be};
    rt_comm *c[2];
    assert_int_equal(rt_comm_group_create(bes, 0, c), VC_ERR_INVALID);
    rt_backend *nobe[2] = {be, NULL};
    assert_int_equal(rt_comm_group_create(nobe, 2, c), VC_ERR_INVALID);
    assert_int_equal(rt_comm_group_create(bes, 1, c), 0);
    int32_t ids[4] = {0};
    rt_tensor ti = rt_tensor_1d(ids, RT_I32, RT_DEV_CPU, 4);
    assert_int_equal(rt_comm_all_reduce_sum(c[0], &ti), VC_ERR_INVALID);
    float a[4] = {1, 2, 3, 4}, b[3];
    rt_tensor ta = rt_tensor_1d(a, RT_F32, RT_DEV_CPU, 4), tb = rt_tensor_1d(b, RT_F32, RT_DEV_CPU, 3);
    assert_int_equal(rt_comm_all_gather(c[0], &ta, &tb), VC_ERR_INVALID);
    assert_int_equal(rt_comm_all_reduce_sum(c[0], &ta), 0); /* world 1: identity */
    assert_int_equal(rt_comm_all_reduce_start(c[0], &ta, RT_COMM_SLOTS), VC_ERR_INVALID);
    assert_int_equal(rt_comm_all_reduce_start(c[0], &ta, -1), VC_ERR_INVALID);
    assert_int_equal(rt_comm_wait(c[0], RT_COMM_SLOTS), VC_ERR_INVALID);
    assert_int_equal(rt_comm_all_reduce_start(c[0], &ti, 0), VC_ERR_INVALID);
    assert_int_equal(rt_comm_all_reduce_start(c[0], &ta, 1), 0);
    assert_int_equal(rt_comm_wait(c[0], 1), 0);
    assert_true(a[0] == 1 && a[3] == 4);
    float d[4];
    rt_tensor td = rt_tensor_1d(d, RT_F32, RT_DEV_CPU, 4);
    assert_int_equal(rt_comm_all_gather(c[0], &ta, &td), 0);
    assert_memory_equal(a, d, sizeof d);
    /* reduce_scatter: the whole must be world x the part; a part that
     * overlaps the whole must be exactly its own block */
    assert_int_equal(rt_comm_reduce_scatter_sum(c[0], &ta, &tb), VC_ERR_INVALID);
    assert_int_equal(rt_comm_reduce_scatter_sum(c[0], &ta, &td), 0);
    assert_memory_equal(a, d, sizeof d);
    rt_tensor inner = rt_tensor_1d(a + 1, RT_F32, RT_DEV_CPU, 3);
    float e[3];
    rt_tensor te = rt_tensor_1d(e, RT_F32, RT_DEV_CPU, 3);
    assert_int_equal(rt_comm_all_gather(c[0], &inner, &te), 0); /* disjoint: fine */
    assert_int_equal(rt_comm_all_gather_start(c[0], &ta, &td, RT_COMM_SLOTS), VC_ERR_INVALID);
    assert_int_equal(rt_comm_all_to_all(c[0], &ta, &ta), VC_ERR_INVALID); /* src and dst overlap */
    assert_int_equal(rt_comm_all_to_all(c[0], &ta, &tb), VC_ERR_INVALID); /* sizes differ */
    memset(d, 0, sizeof d);
    assert_int_equal(rt_comm_all_to_all(c[0], &ta, &td), 0);             /* world 1: a copy */
    assert_memory_equal(a, d, sizeof d);
    rt_comm_group_free(c, 1);
    rt_comm *c2[2];
    assert_int_equal(rt_comm_group_create(bes, 2, c2), 0);
    float w4[4] = {0};
    rt_tensor whole4 = rt_tensor_1d(w4, RT_F32, RT_DEV_CPU, 4), mid = rt_tensor_1d(w4 + 1, RT_F32, RT_DEV_CPU, 2);
    assert_int_equal(rt_comm_reduce_scatter_sum(c2[0], &whole4, &mid), VC_ERR_INVALID); /* not block 0 */
    assert_non_null(strstr(vc_err_msg(), "overlaps"));
    rt_comm_group_free(c2, 2);
    rt_backend_free(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_world_sizes_f32),
        cmocka_unit_test(test_world_sizes_bf16),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
