/* The KV cache dtype choice (mdl_params.kv_dtype, VLLM_KV_CACHE_DTYPE) and
 * mdl_forward_batch_argmax on the CPU backend:
 *  - auto is f32 on the CPU; f16 / bf16 caches can be asked for and give
 *    logits close to the f32 cache's; a bad VLLM_KV_CACHE_DTYPE fails the
 *    load with a message; mdl_kv_block_bytes follows the dtype;
 *  - mdl_forward_batch_argmax returns the argmax of the logits that
 *    mdl_forward_batch gives for the same step (two sequences, a prefill
 *    then decode steps), and rejects a call with both or no outputs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/model.h"
#include "runtime/dtype.h"

#define TINY VLLM_SOURCE_DIR "/tests/fixtures/models/tiny-llama"

static rt_backend *g_be;

static mdl_model *load(int kv_dtype) {
    mdl_params mp = mdl_params_default();
    mp.kv_dtype = kv_dtype;
    mdl_model *m = mdl_load(TINY, g_be, &mp);
    if (!m) fail_msg("load: %s", vc_err_msg());
    return m;
}

/* Prompt {1..5} then 3 greedy steps; logits of the last step into out. */
static void run_seq(mdl_model *m, float *out) {
    int64_t V = mdl_get_config(m)->vocab;
    mdl_seq *s = mdl_seq_create(m, 16);
    assert_non_null(s);
    int32_t ids[5] = {1, 2, 3, 4, 5};
    assert_int_equal(mdl_forward(m, s, ids, 5, out, false), 0);
    for (int step = 0; step < 3; step++) {
        int32_t next = (int32_t)((7 * step + 3) % V);
        assert_int_equal(mdl_forward(m, s, &next, 1, out, false), 0);
    }
    mdl_seq_free(s);
}

static void test_kv_dtype(void **st) {
    (void)st;
    mdl_model *m32 = load(MDL_KV_AUTO), *m16 = load(RT_F16), *mb16 = load(RT_BF16);
    assert_int_equal(mdl_kv_dtype(m32), RT_F32);
    assert_int_equal(mdl_kv_dtype(m16), RT_F16);
    assert_int_equal(mdl_kv_dtype(mb16), RT_BF16);
    assert_int_equal(mdl_kv_block_bytes(m32, 16), 2 * mdl_kv_block_bytes(m16, 16));
    assert_int_equal(mdl_kv_block_bytes(m16, 16), mdl_kv_block_bytes(mb16, 16));
    int64_t V = mdl_get_config(m32)->vocab;
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b), *c = malloc((size_t)V * sizeof *c);
    assert_true(a && b && c);
    run_seq(m32, a);
    run_seq(m16, b);
    run_seq(mb16, c);
    double e16 = 0, eb16 = 0, mx = 1;
    for (int64_t i = 0; i < V; i++) {
        e16 = fmax(e16, fabs((double)b[i] - a[i]));
        eb16 = fmax(eb16, fabs((double)c[i] - a[i]));
        mx = fmax(mx, fabs((double)a[i]));
    }
    /* rounding K/V to 2^-11 (f16) / 2^-8 (bf16) relative moves the logits a little, not a lot */
    assert_true(e16 / mx < 1e-2);
    assert_true(eb16 / mx < 5e-2);
    assert_true(e16 > 0 || eb16 > 0); /* the caches really differ */
    free(a);
    free(b);
    free(c);
    mdl_free(m32);
    mdl_free(m16);
    mdl_free(mb16);

    setenv("VLLM_KV_CACHE_DTYPE", "bf16", 1);
    mdl_model *me = load(MDL_KV_AUTO);
    assert_int_equal(mdl_kv_dtype(me), RT_BF16);
    mdl_free(me);
    setenv("VLLM_KV_CACHE_DTYPE", "fp8", 1);
    mdl_params mp = mdl_params_default();
    assert_null(mdl_load(TINY, g_be, &mp));
    assert_non_null(strstr(vc_err_msg(), "VLLM_KV_CACHE_DTYPE"));
    unsetenv("VLLM_KV_CACHE_DTYPE");
    mp.kv_dtype = RT_Q8_0;
    assert_null(mdl_load(TINY, g_be, &mp));
}

static void test_argmax(void **st) {
    (void)st;
    mdl_model *m = load(MDL_KV_AUTO);
    int64_t V = mdl_get_config(m)->vocab;
    enum { B = 4, MB = 4 };
    mdl_kv *kv = mdl_kv_create(m, 2 * MB, B);
    assert_non_null(kv);
    int32_t bt[2 * MB] = {0, 1, 2, 3, 4, 5, 6, 7}, len[2] = {0, 0};
    float *lg = malloc((size_t)(2 * V) * sizeof *lg);
    assert_non_null(lg);
    for (int step = 0; step < 4; step++) {
        int32_t ids[8], pos[8], slots[8], qsl[3] = {0}, sl[2], rows[2], T = 0;
        for (int s = 0; s < 2; s++) {
            int n = step == 0 ? 3 + s : 1;
            for (int i = 0; i < n; i++, T++) {
                ids[T] = (int32_t)((11 * step + 5 * s + i + 1) % V);
                pos[T] = len[s] + i;
                slots[T] = bt[s * MB + pos[T] / B] * B + pos[T] % B;
            }
            len[s] += n;
            qsl[s + 1] = T;
            sl[s] = len[s];
            rows[s] = T - 1;
        }
        mdl_batch b = {.n_tokens = T, .ids = ids, .positions = pos, .slots = slots, .n_seqs = 2, .qsl = qsl,
                       .seq_lens = sl, .block_tables = bt, .max_blocks = MB, .n_logits = 2, .logit_rows = rows};
        assert_int_equal(mdl_forward_batch(m, kv, &b, lg), 0);
        int32_t am[2] = {-1, -1}; /* the same step again stores the same K/V */
        assert_int_equal(mdl_forward_batch_argmax(m, kv, &b, am), 0);
        for (int s = 0; s < 2; s++) {
            int32_t best = 0;
            for (int64_t j = 1; j < V; j++)
                if (lg[s * V + j] > lg[s * V + best]) best = (int32_t)j;
            assert_int_equal(am[s], best);
        }
        assert_true(mdl_forward_batch_ex(m, kv, &b, lg, am) < 0);
        assert_true(mdl_forward_batch_ex(m, kv, &b, NULL, NULL) < 0);
    }
    free(lg);
    mdl_kv_free(kv);
    mdl_free(m);
}

static int32_t host_argmax(const float *lg, int64_t V) {
    int32_t best = 0;
    for (int64_t j = 1; j < V; j++)
        if (lg[j] > lg[best]) best = (int32_t)j;
    return best;
}

static void test_seq_argmax(void **st) {
    (void)st;
    for (int chunked = 0; chunked < 2; chunked++) {
        mdl_params mp = mdl_params_default();
        if (chunked) mp.max_batch = 4;
        mdl_model *m = mdl_load(TINY, g_be, &mp);
        assert_non_null(m);
        int64_t V = mdl_get_config(m)->vocab;
        float *lg = malloc((size_t)V * sizeof *lg);
        assert_non_null(lg);
        mdl_seq *a = mdl_seq_create(m, 32), *b = mdl_seq_create(m, 32);
        assert_non_null(a);
        assert_non_null(b);
        int32_t ids[9] = {1, 5, 9, 2, 6, 3, 7, 4, 8}, na = 0, nb = 0;
        assert_int_equal(mdl_forward(m, a, ids, 9, lg, false), 0);
        na = host_argmax(lg, V);
        assert_int_equal(mdl_forward_argmax(m, b, ids, 9, &nb), 0);
        for (int step = 0; step < 6; step++) {
            assert_int_equal(nb, na);
            assert_int_equal(mdl_forward(m, a, &na, 1, lg, false), 0);
            na = host_argmax(lg, V);
            assert_int_equal(mdl_forward_argmax(m, b, &nb, 1, &nb), 0);
        }
        assert_int_equal(nb, na);
        assert_int_equal(mdl_seq_len(b), 15);
        assert_true(mdl_forward_argmax(m, b, ids, 0, &nb) < 0);
        mdl_seq_free(a);
        mdl_seq_free(b);
        free(lg);
        mdl_free(m);
    }
}

static int setup(void **st) {
    (void)st;
    rt_backend_params p = rt_backend_params_default();
    p.n_threads = 2;
    g_be = rt_backend_create(RT_DEV_CPU, &p);
    return g_be ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    rt_backend_free(g_be);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_kv_dtype), cmocka_unit_test(test_argmax),
                                       cmocka_unit_test(test_seq_argmax)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
