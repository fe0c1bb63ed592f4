/* Batch sampler logprobs: raw mode (vLLM's default) is log_softmax of the
 * logits as they came, before any processing; processed mode is the
 * distribution the token was drawn from. Top-k lists sorted, ranks, rows
 * without logprobs, prompt logprobs, NaN/inf rows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "ref_sampler.h"
#include "sample/batch.h"

static smp_batch *new_batch(int64_t vocab, int32_t max_batch, smp_logprobs_mode mode) {
    smp_batch_params bp = smp_batch_params_default();
    bp.vocab = vocab;
    bp.max_batch = max_batch;
    bp.seed = 17;
    bp.has_seed = true;
    bp.logprobs_mode = mode;
    smp_batch *b = smp_batch_create(&bp);
    assert_non_null(b);
    return b;
}

/* Entry j of a logprob row against reference logprobs lp [V]. */
static void check_entry(const int32_t *ids, const float *vals, int j, const double *lp) {
    double want = lp[ids[j]];
    if (isinf(want)) assert_true(isinf(vals[j]) && vals[j] < 0);
    else if (fabs(vals[j] - want) > 1e-4) fail_msg("entry %d (token %d): %g, want %g", j, ids[j], vals[j], want);
}

/* ids/vals rows: [0] = tok, [1..k] the k largest of lp, descending,
 * ties lowest id first; rank = #{lp >= lp[tok]}. */
static void check_row(const int32_t *ids, const float *vals, int32_t rank, int32_t k, int32_t tok, const double *lp,
                      const float *raw, int64_t V) {
    assert_int_equal(ids[0], tok);
    check_entry(ids, vals, 0, lp);
    float rt = isnan(raw[tok]) ? -INFINITY : raw[tok];
    int32_t want_rank = 0;
    for (int64_t i = 0; i < V; i++) want_rank += (isnan(raw[i]) ? -INFINITY : raw[i]) >= rt;
    assert_int_equal(rank, want_rank);
    for (int j = 1; j <= k; j++) {
        check_entry(ids, vals, j, lp);
        if (j > 1) assert_true(vals[j] <= vals[j - 1]);
        /* nothing outside the list beats the last listed one */
        int32_t better = 0;
        for (int64_t i = 0; i < V; i++) better += lp[i] > lp[ids[j]] || (lp[i] == lp[ids[j]] && i < ids[j]);
        assert_int_equal(better, j - 1);
    }
}

static void test_raw_logprobs(void **st) {
    (void)st;
    enum { V = 4000, B = 6 };
    smp_batch *b = new_batch(V, B, SMP_LOGPROBS_RAW);
    smp_req_params p = smp_req_params_default();
    smp_req *rq[B];
    /* rows: greedy k=5, random k=0, none, random with processors k=20, seeded k=3, none greedy */
    int32_t ks[B] = {5, 0, -1, 20, 3, -1};
    smp_bias bias[] = {{7, 30.0f}};
    for (int i = 0; i < B; i++) {
        p = smp_req_params_default();
        p.logprobs = ks[i];
        if (i == 0 || i == 5) p.temperature = 0;
        if (i == 3) {
            p.temperature = 0.5f, p.top_k = 10, p.repetition_penalty = 1.5f;
            p.logit_bias = bias, p.n_logit_bias = 1;
        }
        if (i == 4) p.seed = 5, p.has_seed = true, p.top_p = 0.8f;
        assert_int_equal(smp_req_create(b, &p, &rq[i]), VC_OK);
    }
    static float raw[B * V], x[B * V];
    static double lp[V];
    int32_t hist[] = {1, 2, 3, 7};
    for (int step = 0; step < 5; step++) {
        ref_fill_logits(raw, (int64_t)B * V, 3.0);
        raw[3 * V + 100] = NAN; /* a NaN in a row with logprobs */
        memcpy(x, raw, sizeof x);
        smp_row rows[B];
        for (int i = 0; i < B; i++) rows[i] = (smp_row){rq[i], hist, 4, hist, 4};
        assert_int_equal(smp_batch_sample(b, x, rows, B), VC_OK);
        const smp_batch_out *o = smp_batch_output(b);
        assert_int_equal(o->stride, 21);
        for (int i = 0; i < B; i++) {
            assert_int_equal(o->n_logprobs[i], ks[i]);
            if (ks[i] < 0) continue;
            ref_log_softmax(raw + (int64_t)i * V, V, lp);
            check_row(o->lp_ids + i * o->stride, o->lp_vals + i * o->stride, o->ranks[i], ks[i], o->tokens[i], lp,
                      raw + (int64_t)i * V, V);
        }
        assert_int_equal(o->tokens[3], 7); /* the bias wins the draw but raw logprobs ignore it */
        assert_true(o->ranks[0] == 1);      /* greedy without processors: the top token */
    }
    for (int i = 0; i < B; i++) smp_req_free(rq[i]);
    smp_batch_free(b);
}

/* processed_logprobs: log_softmax of the row the token was drawn from
 * (scaled, filtered); filtered tokens are -inf. */
static void test_processed_logprobs(void **st) {
    (void)st;
    enum { V = 3000 };
    smp_batch *b = new_batch(V, 1, SMP_LOGPROBS_PROCESSED);
    smp_req_params p = smp_req_params_default();
    p.temperature = 0.7f;
    p.top_k = 8;
    p.logprobs = 10; /* more than top_k: the tail is -inf */
    p.frequency_penalty = 0.4f;
    int32_t hist[] = {11, 11, 12};
    smp_req *r;
    assert_int_equal(smp_req_create(b, &p, &r), VC_OK);
    static float raw[V], x[V];
    static double l[V], q[V], lp[V];
    for (int rep = 0; rep < 5; rep++) {
        ref_fill_logits(raw, V, 2.0);
        memcpy(x, raw, sizeof x);
        smp_row row = {r, NULL, 0, hist, 3};
        assert_int_equal(smp_batch_sample(b, x, &row, 1), VC_OK);
        ref_process(raw, V, &p, NULL, 0, hist, 3, l);
        ref_filter(l, V, &p, q);
        for (int64_t i = 0; i < V; i++) lp[i] = log(q[i]);
        const smp_batch_out *o = smp_batch_output(b);
        check_row(o->lp_ids, o->lp_vals, o->ranks[0], 10, o->tokens[0], lp, x, V);
        for (int j = 9; j <= 10; j++) assert_true(isinf(o->lp_vals[j]));
    }
    smp_req_free(r);
    smp_batch_free(b);
}

/* raw_logits / processed_logits: the values themselves, same ids/ranks. */
static void test_logits_modes(void **st) {
    (void)st;
    enum { V = 1001 };
    static float raw[V], x[V];
    static double ident[V];
    for (int mode = 0; mode < 2; mode++) {
        smp_batch *b = new_batch(V, 1, mode ? SMP_LOGITS_PROCESSED : SMP_LOGITS_RAW);
        smp_req_params p = smp_req_params_default();
        p.temperature = 0.5f;
        p.top_k = 3;
        p.logprobs = 5;
        smp_req *r;
        assert_int_equal(smp_req_create(b, &p, &r), VC_OK);
        ref_fill_logits(raw, V, 2.0);
        memcpy(x, raw, sizeof x);
        smp_row row = {r, NULL, 0, NULL, 0};
        assert_int_equal(smp_batch_sample(b, x, &row, 1), VC_OK);
        const float *src = mode ? x : raw; /* processed: scaled by 1/T, all but 3 at -inf */
        for (int64_t i = 0; i < V; i++) ident[i] = src[i];
        const smp_batch_out *o = smp_batch_output(b);
        check_row(o->lp_ids, o->lp_vals, o->ranks[0], 5, o->tokens[0], ident, src, V);
        if (mode) {
            assert_true(isinf(o->lp_vals[4]) && isinf(o->lp_vals[5]));
            assert_true(fabs(o->lp_vals[1] - 2 * raw[o->lp_ids[1]]) < 1e-5);
        } else {
            assert_true(o->lp_vals[0] == raw[o->tokens[0]]);
        }
        smp_req_free(r);
        smp_batch_free(b);
    }
}

static void test_prompt_logprobs(void **st) {
    (void)st;
    enum { P = 9, V = 1500, K = 4 };
    static float logits[P * V];
    static double lp[V];
    ref_fill_logits(logits, P * V, 2.0);
    logits[2 * V + 5] = INFINITY; /* a row dominated by +inf */
    logits[4 * V + 9] = NAN;
    int32_t next[P] = {0, 5, 5, 1499, 9, 42, 42, 7, 1000};
    int32_t ids[P * (K + 1)], ranks[P];
    float vals[P * (K + 1)];
    assert_int_equal(smp_prompt_logprobs(logits, P, V, next, K, ids, vals, ranks), VC_OK);
    for (int p = 0; p < P; p++) {
        if (p == 2) {
            assert_int_equal(ids[p * (K + 1)], 5);
            assert_float_equal(vals[p * (K + 1)], 0.0f, 1e-6);
            assert_int_equal(ids[p * (K + 1) + 1], 5);
            assert_true(isinf(vals[p * (K + 1) + 2]));
            continue;
        }
        ref_log_softmax(logits + p * V, V, lp);
        check_row(ids + p * (K + 1), vals + p * (K + 1), ranks[p], K, next[p], lp, logits + p * V, V);
    }
    /* k = 0: the token only; bad ids are errors */
    assert_int_equal(smp_prompt_logprobs(logits, P, V, next, 0, ids, vals, ranks), VC_OK);
    ref_log_softmax(logits + V, V, lp);
    assert_true(fabs(vals[1] - lp[5]) < 1e-4);
    next[3] = V;
    assert_int_equal(smp_prompt_logprobs(logits, P, V, next, K, ids, vals, ranks), VC_ERR_INVALID);
    /* k larger than V: padded with id -1 */
    float small[3] = {1, 2, 3};
    int32_t n1[1] = {0}, id5[6], r1;
    float v5[6];
    assert_int_equal(smp_prompt_logprobs(small, 1, 3, n1, 5, id5, v5, &r1), VC_OK);
    assert_int_equal(r1, 3);
    assert_int_equal(id5[1], 2);
    assert_int_equal(id5[3], 0);
    assert_int_equal(id5[4], -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raw_logprobs),
        cmocka_unit_test(test_processed_logprobs),
        cmocka_unit_test(test_logits_modes),
        cmocka_unit_test(test_prompt_logprobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
