/* The weight prefetch hints of decode steps (VLLM_L2_PREFETCH,
 * rt_backend_prefetch): a model loaded with them gives logits bit-identical
 * to one without, over a prompt and decode steps (CPU: the hint is a no-op
 * and the hinted forward path runs; VLLM_TEST_DEVICE=cuda: the prefetch
 * kernels run between the layer's kernels, eagerly and in decode graphs).
 * A malformed value loads with the hints off. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/model_impl.h"

#define TINY VLLM_SOURCE_DIR "/tests/fixtures/models/tiny-llama"

static rt_backend *g_be;

static mdl_model *load(const char *pf) {
    if (pf) setenv("VLLM_L2_PREFETCH", pf, 1);
    else unsetenv("VLLM_L2_PREFETCH");
    mdl_model *m = mdl_load(TINY, g_be, NULL);
    unsetenv("VLLM_L2_PREFETCH");
    if (!m) fail_msg("load: %s", vc_err_msg());
    return m;
}

/* prompt of 7 then 6 greedy-fed steps; every step's logits into out[step] */
static void run(mdl_model *m, float *out, int64_t V) {
    mdl_seq *s = mdl_seq_create(m, 32);
    assert_non_null(s);
    int32_t ids[7] = {3, 9, 4, 1, 7, 2, 8};
    assert_int_equal(mdl_forward(m, s, ids, 7, out, false), 0);
    for (int step = 1; step <= 6; step++) {
        int32_t next = (int32_t)((5 * step + 1) % V);
        assert_int_equal(mdl_forward(m, s, &next, 1, out + step * V, false), 0);
    }
    mdl_seq_free(s);
}

static void test_prefetch_same_logits(void **st) {
    (void)st;
    mdl_model *a = load(NULL), *b = load("0.01,0.02,0.01"), *bad = load("lots");
    assert_int_equal(a->l2pf[0] + a->l2pf[1] + a->l2pf[2], 0);
    assert_true(b->l2pf[0] > 0 && b->l2pf[1] > 0 && b->l2pf[2] > 0);
    assert_int_equal(bad->l2pf[0] + bad->l2pf[1] + bad->l2pf[2], 0);
    const int64_t V = mdl_get_config(a)->vocab;
    float *la = calloc((size_t)(7 * V), sizeof *la), *lb = calloc((size_t)(7 * V), sizeof *lb);
    assert_true(la && lb);
    run(a, la, V);
    run(b, lb, V);
    assert_memory_equal(la, lb, (size_t)(7 * V) * sizeof *la);
    free(la);
    free(lb);
    mdl_free(a);
    mdl_free(b);
    mdl_free(bad);
}

static int setup(void **st) {
    (void)st;
    rt_backend_params p = rt_backend_params_default();
    p.n_threads = 2;
    const char *dev = getenv("VLLM_TEST_DEVICE");
    g_be = rt_backend_create(dev && !strcmp(dev, "cuda") ? RT_DEV_CUDA : RT_DEV_CPU, &p);
    return g_be ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    rt_backend_free(g_be);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_prefetch_same_logits)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
