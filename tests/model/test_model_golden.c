/* Model forward vs Hugging Face transformers goldens.
 *
 * tests/fixtures/models/<name>/ holds a random-weight tiny checkpoint
 * (config.json + model.safetensors) and golden.json recorded by
 * tools/make_goldens.py (fp32, greedy). For every prompt we check:
 *  - prefill logits: HF's top-5 (id, logit) at every position match ours
 *    within 1e-3 relative (to max(1, |logit|));
 *  - 32 greedy tokens generated with our KV cache are identical, and the
 *    top-5 logits at every generated step match as above.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/model.h"
#include "model/model_impl.h" /* mdl_last_rows_count */
#include "sample/sampler.h"

#define FIXTURES VLLM_SOURCE_DIR "/tests/fixtures/models"

static rt_backend *g_be;

static double g_worst;

static void check_top5(const json_t *top5, const float *logits, const char *what, int pos) {
    size_t i;
    json_t *pair;
    json_array_foreach(top5, i, pair) {
        int id = (int)json_integer_value(json_array_get(pair, 0));
        double want = json_number_value(json_array_get(pair, 1));
        double got = logits[id];
        double err = fabs(got - want) / fmax(1.0, fabs(want));
        if (err > g_worst) g_worst = err;
        if (err > 1e-3) {
            fail_msg("%s pos %d: logit[%d] = %.6f, HF %.6f (rel err %.2e)", what, pos, id, got, want, err);
        }
    }
}

static void run_model(const char *name) {
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, name);
    snprintf(path, sizeof path, "%s/golden.json", dir);
    json_error_t jerr;
    json_t *g = json_load_file(path, 0, &jerr);
    if (!g) fail_msg("%s: %s", path, jerr.text);
    mdl_params mp = mdl_params_default();
    mp.max_batch = 16; /* exercise chunked prefill on the 17- and 40-token prompts */
    mdl_model *m = mdl_load(dir, g_be, &mp);
    if (!m) fail_msg("load %s: %s", dir, vc_err_msg());
    const mdl_config *c = mdl_get_config(m);
    int64_t V = c->vocab;
    json_t *prompts = json_object_get(g, "prompts"), *cases = json_object_get(g, "cases");
    assert_true(json_array_size(cases) > 0);
    size_t ci;
    json_t *cs;
    g_worst = 0;
    int n_last = 0;
    json_array_foreach(cases, ci, cs) {
        json_t *pr = json_array_get(prompts, (size_t)json_integer_value(json_object_get(cs, "prompt")));
        size_t n = json_array_size(pr);
        int32_t *ids = malloc(n * sizeof *ids);
        for (size_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(pr, i));
        json_t *greedy = json_object_get(cs, "greedy"), *gtop = json_object_get(cs, "greedy_top5");
        size_t ng = json_array_size(greedy);
        mdl_seq *s = mdl_seq_create(m, (int64_t)(n + ng + 1));
        assert_non_null(s);
        float *lg = malloc(n * V * sizeof *lg);
        if (mdl_forward(m, s, ids, (int64_t)n, lg, true) < 0) fail_msg("forward: %s", vc_err_msg());
        json_t *top5 = json_object_get(cs, "top5");
        for (size_t t = 0; t < n; t++) check_top5(json_array_get(top5, t), lg + t * V, name, (int)t);
        const float *last = lg + (n - 1) * V;
        /* The prompt again with its last row's logits only: where the final
         * chunk has >= 4 rows the last layer runs past its KV store on that
         * row alone (model_impl.h, last_rows): HF's top-5 and our all-rows
         * logits again (same sums per row: within float rounding). */
        mdl_seq *s1 = mdl_seq_create(m, (int64_t)n);
        assert_non_null(s1);
        float *l1 = malloc(V * sizeof *l1);
        const uint64_t lr0 = mdl_last_rows_count();
        if (mdl_forward(m, s1, ids, (int64_t)n, l1, false) < 0) fail_msg("forward (last row): %s", vc_err_msg());
        if (n % 16 >= 4 && !getenv("VLLM_LAST_ROWS"))
            assert_int_equal(mdl_last_rows_count(), lr0 + 1); /* (chunks of 16: the last one's rows) */
        n_last += mdl_last_rows_count() - lr0;
        check_top5(json_array_get(top5, n - 1), l1, name, (int)n - 1);
        for (int64_t v = 0; v < V; v++)
            if (fabsf(l1[v] - last[v]) > 1e-4f * fmaxf(1.0f, fabsf(last[v])))
                fail_msg("%s case %zu: last-row logit %lld %.6f vs all rows %.6f", name, ci, (long long)v, l1[v],
                         last[v]);
        free(l1);
        mdl_seq_free(s1);
        float *step = malloc(V * sizeof *step);
        memcpy(step, last, V * sizeof *step);
        for (size_t k = 0; k < ng; k++) {
            check_top5(json_array_get(gtop, k), step, name, (int)(n + k));
            int32_t want = (int32_t)json_integer_value(json_array_get(greedy, k));
            int32_t got = smp_argmax(step, V);
            if (got != want) fail_msg("%s case %zu: greedy token %zu is %d, HF %d", name, ci, k, got, want);
            if (mdl_forward(m, s, &got, 1, step, false) < 0) fail_msg("decode: %s", vc_err_msg());
        }
        free(step);
        free(lg);
        free(ids);
        mdl_seq_free(s);
    }
    print_message("%s: worst relative logit error %.2e (%d prompts' last layer on the last row only)\n", name, g_worst,
                  n_last);
    mdl_free(m);
    json_decref(g);
}

static void test_all_fixtures(void **st) {
    (void)st;
    DIR *d = opendir(FIXTURES);
    assert_non_null(d);
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        run_model(e->d_name);
        count++;
    }
    closedir(d);
    assert_true(count >= 4);
}

static void test_bad_inputs(void **st) {
    (void)st;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tiny-llama", FIXTURES);
    mdl_model *m = mdl_load(dir, g_be, NULL);
    assert_non_null(m);
    mdl_seq *s = mdl_seq_create(m, 4);
    float *lg = malloc(mdl_get_config(m)->vocab * sizeof *lg);
    int32_t bad = (int32_t)mdl_get_config(m)->vocab;
    assert_true(mdl_forward(m, s, &bad, 1, lg, false) < 0);
    int32_t ok[5] = {1, 2, 3, 4, 5};
    assert_true(mdl_forward(m, s, ok, 5, lg, false) < 0); /* context overflow */
    assert_int_equal(mdl_forward(m, s, ok, 4, lg, false), 0);
    free(lg);
    mdl_seq_free(s);
    mdl_free(m);
    assert_null(mdl_load(FIXTURES "/does-not-exist", g_be, NULL));
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
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_fixtures),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
