/* The attention split of mixed steps (mdl_paged_attention): a step whose
 * first sequences decode and whose others bring prompt rows attends in two
 * calls (the decode prefix, then the rest with its qsl rebased). Checked on
 * the CPU backend (VLLM_TEST_DEVICE=cuda: the CUDA backend, logits within
 * 1e-4 relative instead of bit for bit) against the same model loaded with
 * VLLM_ATTN_SPLIT=0 (one call per layer), over steps of every kind: all
 * prompts (no split), decodes + a new prompt, decodes + a prompt + a
 * decode after it (prefix of one), all decodes (no split), one sequence.
 * m->att_dec shows which steps split.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/model_impl.h"
#include "model_test_step.h"

#define TINY VLLM_SOURCE_DIR "/tests/fixtures/models/tiny-llama"

static rt_backend *g_be;
static bool g_cuda;

static mdl_model *load(bool split) {
    if (split) unsetenv("VLLM_ATTN_SPLIT");
    else setenv("VLLM_ATTN_SPLIT", "0", 1);
    mdl_model *m = mdl_load(TINY, g_be, NULL);
    unsetenv("VLLM_ATTN_SPLIT");
    if (!m) fail_msg("load: %s", vc_err_msg());
    return m;
}

enum { NS = 4, MB = 4, BS = 4 }; /* sequences, blocks per sequence, block size */

static void test_split_equals_one_call(void **st) {
    (void)st;
    mdl_model *ms = load(true), *m1 = load(false);
    assert_true(ms->att_split);
    assert_false(m1->att_split);
    const int64_t V = mdl_get_config(ms)->vocab;
    mdl_kv *kvs = mdl_kv_create(ms, NS * MB, BS), *kv1 = mdl_kv_create(m1, NS * MB, BS);
    assert_non_null(kvs);
    assert_non_null(kv1);
    float *a = malloc((size_t)(NS * V) * sizeof *a), *b = malloc((size_t)(NS * V) * sizeof *b);
    assert_true(a && b);
    static const struct {
        int k, seqs[NS], n[NS], dec; /* dec: the decode prefix the split model uses (0: one call) */
    } steps[] = {
        {2, {0, 1}, {4, 3}, 0},             /* two prompts */
        {3, {0, 1, 2}, {1, 1, 5}, 2},       /* two decodes, a new prompt */
        {3, {0, 2, 1}, {1, 1, 1}, 0},       /* all decode */
        {4, {0, 3, 1, 2}, {1, 6, 1, 1}, 1}, /* a decode, a prompt, decodes after it */
        {4, {0, 1, 2, 3}, {1, 1, 1, 2}, 3}, /* three decodes, a two-token chunk */
        {1, {3}, {1}, 0},                   /* one sequence */
    };
    int32_t ls[NS] = {0}, l1[NS] = {0};
    for (size_t t = 0; t < sizeof steps / sizeof steps[0]; t++) {
        mts_step(ms, kvs, ls, steps[t].seqs, steps[t].n, steps[t].k, MB, BS, a);
        assert_int_equal(ms->att_dec, steps[t].dec);
        mts_step(m1, kv1, l1, steps[t].seqs, steps[t].n, steps[t].k, MB, BS, b);
        assert_int_equal(m1->att_dec, 0);
        double worst = 0.0;
        for (int64_t e = 0; e < steps[t].k * V; e++) {
            double d = fabs((double)a[e] - b[e]) / (fabs((double)b[e]) + 1e-3);
            if (d > worst) worst = d;
            if (!g_cuda && a[e] != b[e]) fail_msg("step %zu: logit %lld differs: %g vs %g", t, (long long)e, a[e], b[e]);
        }
        if (worst > 1e-4) fail_msg("step %zu: logits differ by %g (relative)", t, worst);
    }
    free(a);
    free(b);
    mdl_kv_free(kvs);
    mdl_kv_free(kv1);
    mdl_free(ms);
    mdl_free(m1);
}

static int setup(void **st) {
    (void)st;
    rt_backend_params p = rt_backend_params_default();
    p.n_threads = 2;
    const char *dev = getenv("VLLM_TEST_DEVICE");
    g_cuda = dev && !strcmp(dev, "cuda");
    g_be = rt_backend_create(g_cuda ? RT_DEV_CUDA : RT_DEV_CPU, &p);
    return g_be ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    rt_backend_free(g_be);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_split_equals_one_call)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
