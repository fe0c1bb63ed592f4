/* Vocab-parallel EMBED (rt_embed_shard) on the CPU backend: for W = 2, 3, 4
 * shards of an f32, bf16 and Q8_0 table, each shard's output holds the
 * rows of the ids it owns and zeros elsewhere, and the sum over the shards
 * equals the unsplit lookup bit for bit; negative ids stay an error, and
 * ids beyond a shard (but not beyond the vocabulary) are not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/err.h"
#include "runtime/ops.h"
#include "runtime/quant.h"

#include <stdlib.h>
#include <string.h>

enum { V = 24, D = 64, N = 40 };

static void check_dtype(rt_backend *be, rt_dtype dt) {
    float *tf = malloc(sizeof(float) * V * D);
    size_t rb = rt_dtype_row_bytes(dt, D);
    char *tab = malloc(rb * V);
    for (int i = 0; i < V * D; i++) tf[i] = (float)((i * 37) % 101 - 50) * 0.03125f;
    for (int r = 0; r < V; r++) assert_int_equal(rt_quant_row(dt, tf + r * D, tab + rb * r, D), 0);
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 7 + 3) % V;
    float *full = malloc(sizeof(float) * N * D), *sum = calloc(N * D, sizeof(float)), *part = malloc(sizeof(float) * N * D);
    rt_tensor table = rt_tensor_2d(tab, dt, RT_DEV_CPU, V, D);
    table.stride[0] = (int64_t)rb;
    rt_tensor tid = rt_tensor_1d(ids, RT_I32, RT_DEV_CPU, N);
    rt_tensor out = rt_tensor_2d(full, RT_F32, RT_DEV_CPU, N, D);
    assert_int_equal(rt_embed(be, &out, &table, &tid), VC_OK);
    for (int W = 2; W <= 4; W++) {
        if (V % W) continue;
        int64_t Vl = V / W;
        memset(sum, 0, sizeof(float) * N * D);
        for (int r = 0; r < W; r++) {
            rt_tensor shard = rt_tensor_slice0(&table, r * Vl, Vl);
            rt_tensor po = rt_tensor_2d(part, RT_F32, RT_DEV_CPU, N, D);
            assert_int_equal(rt_embed_shard(be, &po, &shard, &tid, r * Vl), VC_OK);
            for (int i = 0; i < N; i++) {
                bool mine = ids[i] >= r * Vl && ids[i] < (r + 1) * Vl;
                for (int j = 0; j < D; j++) {
                    float v = part[i * D + j];
                    if (mine) assert_true(v == full[i * D + j]);
                    else assert_true(v == 0.0f);
                    sum[i * D + j] += v;
                }
            }
        }
        assert_memory_equal(sum, full, sizeof(float) * N * D);
    }
    /* negative ids: an error in both forms */
    int32_t bad = -1;
    rt_tensor tb = rt_tensor_1d(&bad, RT_I32, RT_DEV_CPU, 1);
    rt_tensor o1 = rt_tensor_2d(part, RT_F32, RT_DEV_CPU, 1, D);
    assert_true(rt_embed_shard(be, &o1, &table, &tb, 0) < 0);
    assert_true(rt_embed(be, &o1, &table, &tb) < 0);
    /* the unsplit lookup still rejects ids past the table */
    int32_t past = V;
    rt_tensor tp = rt_tensor_1d(&past, RT_I32, RT_DEV_CPU, 1);
    assert_true(rt_embed(be, &o1, &table, &tp) < 0);
    assert_int_equal(rt_embed_shard(be, &o1, &table, &tp, 0), VC_OK); /* another rank's row: zeros */
    for (int j = 0; j < D; j++) assert_true(part[j] == 0.0f);
    free(tf);
    free(tab);
    free(full);
    free(sum);
    free(part);
}

static void test_embed_shard(void **st) {
    (void)st;
    rt_backend_params p = rt_backend_params_default();
    p.n_threads = 2;
    rt_backend *be = rt_backend_create(RT_DEV_CPU, &p);
    assert_non_null(be);
    check_dtype(be, RT_F32);
    check_dtype(be, RT_BF16);
    check_dtype(be, RT_Q8_0);
    rt_backend_free(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_embed_shard)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
