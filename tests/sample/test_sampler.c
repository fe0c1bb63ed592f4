/* Sampler: greedy tie rules, seeded reproducibility, and that each filter
 * only ever returns tokens it should keep. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "sample/sampler.h"

static void test_argmax_ties_and_nan(void **st) {
    (void)st;
    float x[5] = {1.0f, 3.0f, NAN, 3.0f, -1.0f};
    assert_int_equal(smp_argmax(x, 5), 1);
    float y[3] = {NAN, NAN, -INFINITY};
    assert_int_equal(smp_argmax(y, 3), 2);
}

static void fill(float *l, int n) {
    for (int i = 0; i < n; i++) l[i] = sinf((float)i * 0.37f) * 3.0f;
}

static void test_greedy_when_temperature_zero(void **st) {
    (void)st;
    float l[100];
    fill(l, 100);
    smp_params p = smp_params_default();
    p.temperature = 0.0f;
    smp_sampler *s = smp_create(&p, 100);
    assert_non_null(s);
    assert_int_equal(smp_sample(s, l), smp_argmax(l, 100));
    smp_free(s);
}

static void test_seed_reproducible(void **st) {
    (void)st;
    smp_params p = smp_params_default();
    p.seed = 1234;
    p.has_seed = true;
    p.temperature = 1.5f;
    int32_t a[64], b[64];
    for (int pass = 0; pass < 2; pass++) {
        smp_sampler *s = smp_create(&p, 100);
        for (int i = 0; i < 64; i++) {
            float l[100];
            fill(l, 100);
            (pass ? b : a)[i] = smp_sample(s, l);
        }
        smp_free(s);
    }
    assert_memory_equal(a, b, sizeof a);
    /* and not constant: a high temperature over 64 draws varies */
    int distinct = 0;
    for (int i = 1; i < 64; i++) distinct += a[i] != a[0];
    assert_true(distinct > 0);
}

static void test_top_k_and_top_p_restrict(void **st) {
    (void)st;
    float base[50];
    for (int i = 0; i < 50; i++) base[i] = (float)(i % 10) * 0.5f; /* best: ids with i%10==9 */
    smp_params p = smp_params_default();
    p.seed = 7;
    p.has_seed = true;
    p.top_k = 5;
    smp_sampler *s = smp_create(&p, 50);
    for (int t = 0; t < 200; t++) {
        float l[50];
        memcpy(l, base, sizeof l);
        int32_t id = smp_sample(s, l);
        assert_int_equal(id % 10, 9); /* exactly 5 ids tie at the top */
    }
    smp_free(s);
    /* top_p tiny keeps only the most probable token */
    p.top_k = 0;
    p.top_p = 1e-6f;
    float l2[50];
    fill(l2, 50);
    int32_t want = smp_argmax(l2, 50);
    s = smp_create(&p, 50);
    for (int t = 0; t < 50; t++) {
        float l[50];
        memcpy(l, l2, sizeof l);
        assert_int_equal(smp_sample(s, l), want);
    }
    smp_free(s);
}

static void test_min_p(void **st) {
    (void)st;
    float l[4] = {0.0f, 0.0f, 10.0f, 9.0f}; /* p ~ {4.5e-5,4.5e-5,0.73,0.27} */
    smp_params p = smp_params_default();
    p.min_p = 0.1f;
    p.seed = 3;
    p.has_seed = true;
    smp_sampler *s = smp_create(&p, 4);
    int seen3 = 0;
    for (int t = 0; t < 300; t++) {
        float x[4];
        memcpy(x, l, sizeof x);
        int32_t id = smp_sample(s, x);
        assert_true(id == 2 || id == 3);
        seen3 += id == 3;
    }
    assert_true(seen3 > 30 && seen3 < 150); /* ~27% of 300 */
    smp_free(s);
}

static void test_bad_params(void **st) {
    (void)st;
    smp_params p = smp_params_default();
    p.top_p = 0.0f;
    assert_true(smp_params_check(&p) < 0);
    assert_null(smp_create(&p, 10));
    p = smp_params_default();
    p.temperature = -1.0f;
    assert_true(smp_params_check(&p) < 0);
    p = smp_params_default();
    p.min_p = 2.0f;
    assert_true(smp_params_check(&p) < 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argmax_ties_and_nan),
        cmocka_unit_test(test_greedy_when_temperature_zero),
        cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_top_k_and_top_p_restrict),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
