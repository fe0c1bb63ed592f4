/* The batch sampler's vectorised row passes (internal, sample_int.h):
 * vector exp against exp(), and every pass against a scalar loop on rows
 * whose length is not a multiple of the vector width. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "ref_sampler.h"
#include "sample/sample_int.h"

static void test_exp_accuracy(void **st) {
    (void)st;
    enum { N = 20001 };
    static float x[N], ev[N];
    for (int i = 0; i < N; i++) x[i] = -90.0f * (float)i / (N - 1); /* 0 .. -90 */
    x[N - 1] = -INFINITY;
    double S = smp_ops_exp_mask(x, ev, N, 0.0f, -INFINITY), S_ref = 0;
    for (int i = 0; i < N; i++) {
        double want = exp((double)x[i]);
        S_ref += want < 1e-38 ? 0 : want; /* below -87.3 the pass flushes to 0 */
        if (x[i] >= -87.0f) {
            if (fabs(ev[i] - want) > 3e-7 * want) fail_msg("exp(%g) = %g, want %g", x[i], ev[i], want);
        } else if (x[i] < -87.4f) {
            assert_true(ev[i] == 0.0f);
        }
    }
    assert_true(fabs(S - S_ref) < 1e-6 * S_ref);
}

static void test_passes_with_tails(void **st) {
    (void)st;
    float x[37], y[37], ev[37], heap[37];
    for (int V = 1; V <= 37; V++) {
        for (int rep = 0; rep < 20; rep++) {
            ref_fill_logits(x, V, 2.0);
            for (int i = 0; i < V; i++)
                if (ref_rand() % 5 == 0) x[i] = (float)(int)x[i]; /* ties */
            if (rep % 3 == 0) x[ref_rand() % V] = NAN;
            memcpy(y, x, sizeof x);
            float m = smp_ops_sanitize_max(y, V), want = -INFINITY;
            for (int i = 0; i < V; i++) {
                float v = isnan(x[i]) ? -INFINITY : x[i];
                assert_true(y[i] == v);
                want = v > want ? v : want;
            }
            assert_true(m == want);
            assert_true(smp_ops_max(y, V) == want);
            assert_int_equal(smp_ops_find(y, V, want), smp_argmax(x, V));
            /* k-th largest among y >= lo, against a sort */
            float s[37];
            float lo = rep % 2 ? -0.5f : -INFINITY;
            int n = 0;
            for (int i = 0; i < V; i++)
                if (y[i] >= lo && y[i] > -INFINITY) s[n++] = y[i];
            for (int i = 1; i < n; i++) /* insertion sort, descending */
                for (int j = i; j > 0 && s[j - 1] < s[j]; j--) {
                    float t = s[j];
                    s[j] = s[j - 1];
                    s[j - 1] = t;
                }
            for (int k = 1; k <= V; k++) {
                float got = smp_ops_kth_largest(y, V, k, lo, heap);
                assert_true(got == (k <= n ? s[k - 1] : -INFINITY));
            }
            /* exp_mask: cut, mask and sum */
            float cut = n > 2 ? s[2] : -INFINITY, z[37];
            memcpy(z, y, sizeof z);
            double S = smp_ops_exp_mask(z, ev, V, want, cut), S_ref = 0;
            for (int i = 0; i < V; i++) {
                if (y[i] >= cut && y[i] > -INFINITY) {
                    assert_true(z[i] == y[i]);
                    assert_true(fabs(ev[i] - exp((double)y[i] - want)) < 1e-6);
                    S_ref += exp((double)y[i] - want);
                } else {
                    assert_true(isinf(z[i]) && z[i] < 0 && ev[i] == 0.0f);
                }
            }
            assert_true(fabs(S - S_ref) < 1e-6 * (1 + S_ref));
            assert_true(fabs(smp_ops_sumexp(x, V, want) - smp_ops_sumexp(y, V, want)) < 1e-12);
            memcpy(z, y, sizeof z);
            float dm = smp_ops_div_max(z, V, 0.7f);
            float dwant = -INFINITY;
            for (int i = 0; i < V; i++) {
                assert_true(z[i] == y[i] / 0.7f);
                dwant = z[i] > dwant ? z[i] : dwant;
            }
            assert_true(dm == dwant);
        }
    }
}

/* Sampling on rows with odd lengths goes through the tail code paths. */
static void test_odd_vocab_rows(void **st) {
    (void)st;
    int64_t Vs[] = {1, 3, 5, 63, 65, 1001};
    for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++) {
        int64_t V = Vs[vi];
        smp_batch_params bp = smp_batch_params_default();
        bp.vocab = V;
        bp.max_batch = 1;
        bp.has_seed = true;
        smp_batch *b = smp_batch_create(&bp);
        smp_req_params p = smp_req_params_default();
        p.top_p = 0.8f;
        p.logprobs = 3;
        smp_req *r;
        assert_int_equal(smp_req_create(b, &p, &r), VC_OK);
        float *x = malloc((size_t)V * sizeof *x), *raw = malloc((size_t)V * sizeof *raw);
        double *l = malloc((size_t)V * sizeof *l), *q = malloc((size_t)V * sizeof *q);
        for (int rep = 0; rep < 30; rep++) {
            ref_fill_logits(raw, V, 2.0);
            memcpy(x, raw, (size_t)V * sizeof *x);
            smp_row row = {r, NULL, 0, NULL, 0};
            assert_int_equal(smp_batch_sample(b, x, &row, 1), VC_OK);
            ref_process(raw, V, &p, NULL, 0, NULL, 0, l);
            ref_filter(l, V, &p, q);
            int32_t tok = smp_batch_output(b)->tokens[0];
            assert_true(tok >= 0 && tok < V && q[tok] > 0);
            assert_int_equal(smp_batch_output(b)->lp_ids[0], tok);
        }
        smp_req_free(r);
        smp_batch_free(b);
        free(x), free(raw), free(l), free(q);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_accuracy),
        cmocka_unit_test(test_passes_with_tails),
        cmocka_unit_test(test_odd_vocab_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
