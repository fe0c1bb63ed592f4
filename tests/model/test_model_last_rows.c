/* The last layer on the logit rows only (model_impl.h, last_rows): a step
 * whose logit rows are each the last row of its own sequence, and at most
 * a quarter of its rows, runs the last layer past its KV store on those
 * rows alone (one query per sequence). Checked against the same model
 * loaded with VLLM_LAST_ROWS=0 (every row), with VLLM_LAST_ROWS=any (any
 * count of logit rows; the default) and with VLLM_LAST_ROWS=1 (a lone
 * logit row), over steps of every kind: two prompts, decodes + a prompt
 * (the attention split too), all decodes (not taken), a decode, a prompt
 * and decodes after it, one long prompt, one decode, twelve prompts,
 * their decodes, their decodes with a long prompt (12 and 13 logit rows);
 * the tiny Llama and the tiny Gemma 3 (sliding windows, its own forward).
 * Logits within 1e-4 relative on the CPU, 1e-2 of the largest logit on the
 * GPU (the logit rows' attention runs on the decode path, the few-row
 * matmuls on other kernels); m->last_rows shows which steps took it, and
 * the steps after them read the KV cache the pruned steps wrote.
 * VLLM_TEST_DEVICE=cuda: the CUDA backend, each GPU load also against the
 * CPU's all rows (5e-2 of the largest logit: the backends round
 * activations differently); every step is reported before the failure.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/model_impl.h"
#include "model_test_step.h"

#define FIXTURES VLLM_SOURCE_DIR "/tests/fixtures/models/"

static rt_backend *g_be, *g_cpu; /* g_cpu: with VLLM_TEST_DEVICE=cuda, the CPU reference */
/* bound on the logits: 1e-4 relative per logit on the CPU; on the GPU the
 * L-row and the all-row layer run different kernels (the decode attention,
 * GEMVs below the GEMM's row counts) and round activations to bf16 in
 * places, so logits near zero move by more than 1e-4 of themselves: 1e-2
 * of the largest logit there (session 23: the tiny Gemma 3 3e-3 to 4e-3
 * from the CPU on every path, all rows included; the tiny Llama 4e-7) */
static double g_bound = 1e-4;

/* fixture `name` loaded with VLLM_LAST_ROWS=value (NULL: unset) */
static mdl_model *load_on(rt_backend *be, const char *name, const char *value) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s%s", FIXTURES, name);
    if (value) setenv("VLLM_LAST_ROWS", value, 1);
    else unsetenv("VLLM_LAST_ROWS");
    mdl_model *m = mdl_load(dir, be, NULL);
    unsetenv("VLLM_LAST_ROWS");
    if (!m) fail_msg("load: %s", vc_err_msg());
    return m;
}
static mdl_model *load(const char *name, const char *value) { return load_on(g_be, name, value); }

/* max |a - b| over max |b| (the GPU against the CPU: their matmuls round
 * activations differently, so no per-element bound) */
static double norm_err(const float *a, const float *b, int64_t n) {
    double num = 0.0, den = 1e-6;
    for (int64_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / den;
}

enum { NS = 16, MB = 16, BS = 4 }; /* sequences, blocks per sequence, block size */

static void last_rows_equal_all_rows(const char *name) {
    mdl_model *ma = load(name, "any"), *md = load(name, "1"), *m0 = load(name, "0");
    mdl_model *mu = load(name, NULL); /* unset: any */
    assert_true(mu->last_rows_max == INT64_MAX);
    mdl_free(mu);
    /* on the GPU also the CPU's all rows: which of the GPU's paths is off */
    const int nm = g_cpu ? 4 : 3;
    mdl_model *mc = g_cpu ? load_on(g_cpu, name, "0") : NULL;
    const int64_t V = mdl_get_config(ma)->vocab;
    mdl_model *ms[4] = {ma, md, m0, mc};
    mdl_kv *kv[4];
    for (int i = 0; i < nm; i++) assert_non_null(kv[i] = mdl_kv_create(ms[i], NS * MB, BS));
    float *lg[4];
    for (int i = 0; i < nm; i++) assert_non_null(lg[i] = malloc((size_t)(NS * V) * sizeof(float)));
    int bad = 0;
    static const struct {
        int k, seqs[NS], n[NS];
        int64_t any, dflt; /* last_rows of the "any" and the "1" model (0: all rows) */
    } steps[] = {
        {2, {0, 1}, {8, 6}, 2, 0},             /* two prompts */
        {3, {0, 1, 2}, {1, 1, 10}, 3, 0},      /* two decodes, a new prompt */
        {3, {0, 2, 1}, {1, 1, 1}, 0, 0},       /* all decode */
        {4, {0, 3, 1, 2}, {1, 13, 1, 1}, 4, 0}, /* a decode, a prompt, decodes after it */
        {1, {1}, {9}, 1, 1},                   /* one prompt: the "1" model's case */
        {1, {3}, {1}, 0, 0},                   /* one decode */
        /* twelve new prompts (the logit rows past a decode graph's first
         * buckets), then their decodes, then their decodes with a long
         * prompt after them (13 logit rows of 62) */
        {12, {4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5}, 12, 0},
        {12, {4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, 0},
        {13, {4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 49}, 13, 0},
    };
    int32_t len[4][NS] = {{0}};
    const uint64_t count0 = mdl_last_rows_count();
    uint64_t want = 0;
    for (size_t t = 0; t < sizeof steps / sizeof steps[0]; t++) {
        for (int i = 0; i < nm; i++)
            mts_step(ms[i], kv[i], len[i], steps[t].seqs, steps[t].n, steps[t].k, MB, BS, lg[i]);
        assert_int_equal(ma->last_rows, steps[t].any);
        assert_int_equal(md->last_rows, steps[t].dflt);
        assert_int_equal(m0->last_rows, 0);
        want += (steps[t].any > 0) + (steps[t].dflt > 0);
        for (int i = 0; i < 2; i++) {
            double worst = 0.0;
            if (mc) worst = norm_err(lg[i], lg[2], steps[t].k * V);
            else
                for (int64_t e = 0; e < steps[t].k * V; e++) {
                    double d = fabs((double)lg[i][e] - lg[2][e]) / (fabs((double)lg[2][e]) + 1e-3);
                    if (d > worst) worst = d;
                }
            if (worst > g_bound) {
                print_error("%s step %zu, model %d: logits differ from all rows' by %g (relative)\n", name, t, i, worst);
                bad++;
            }
        }
        if (mc) {
            const double e[3] = {norm_err(lg[0], lg[3], steps[t].k * V), norm_err(lg[1], lg[3], steps[t].k * V),
                                 norm_err(lg[2], lg[3], steps[t].k * V)};
            print_message("%s step %zu vs the CPU's all rows: any %.2e, one row %.2e, all rows %.2e\n", name, t, e[0],
                          e[1], e[2]);
            for (int i = 0; i < 3; i++) bad += e[i] > 5e-2;
        }
    }
    if (bad) fail_msg("%s: %d comparisons out of bounds", name, bad);
    assert_true(mdl_last_rows_count() - count0 == want);
    for (int i = 0; i < nm; i++) free(lg[i]), mdl_kv_free(kv[i]), mdl_free(ms[i]);
}

/* a Llama and a Gemma 3 (sliding-window layers, its own forward) */
static void test_last_rows_equal_all_rows(void **st) {
    (void)st;
    last_rows_equal_all_rows("tiny-llama");
    last_rows_equal_all_rows("tiny-gemma3");
}

static int setup(void **st) {
    (void)st;
    rt_backend_params p = rt_backend_params_default();
    p.n_threads = 2;
    const char *dev = getenv("VLLM_TEST_DEVICE");
    const bool cuda = dev && !strcmp(dev, "cuda");
    if (cuda) g_bound = 1e-2;
    g_be = rt_backend_create(cuda ? RT_DEV_CUDA : RT_DEV_CPU, &p);
    if (cuda && g_be && !(g_cpu = rt_backend_create(RT_DEV_CPU, &p))) return -1;
    return g_be ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    rt_backend_free(g_be);
    if (g_cpu) rt_backend_free(g_cpu);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_last_rows_equal_all_rows)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
