/* Batch sampler, random and greedy sampling: the kept sets of min_p /
 * top_k / top_p against the reference, frequencies (chi-square bounds with
 * fixed seeds), the radix top_p paths (flat and tied distributions),
 * seeded reproducibility whatever the batch, greedy ties, NaN and inf. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "ref_sampler.h"
#include "sample/batch.h"

static smp_batch *new_batch(int64_t vocab, int32_t max_batch, uint64_t seed) {
    smp_batch_params bp = smp_batch_params_default();
    bp.vocab = vocab;
    bp.max_batch = max_batch;
    bp.seed = seed;
    bp.has_seed = true;
    smp_batch *b = smp_batch_create(&bp);
    assert_non_null(b);
    return b;
}

static smp_req *new_req(smp_batch *b, smp_req_params p) {
    smp_req *r;
    if (smp_req_create(b, &p, &r) < 0) fail_msg("%s", vc_err_msg());
    return r;
}

/* Kept set after sampling (finite entries of the processed row) against
 * the reference distribution. top_p's boundary may differ by one token
 * where float and double cumulative sums straddle p; the kept tokens must
 * still be the most probable ones. */
static void check_kept(smp_req_params p, int64_t V, double scale) {
    smp_batch *b = new_batch(V, 1, 3);
    float *raw = malloc((size_t)V * sizeof *raw), *x = malloc((size_t)V * sizeof *x);
    double *l = malloc((size_t)V * sizeof *l), *q = malloc((size_t)V * sizeof *q);
    smp_req *r = new_req(b, p);
    const double T = p.temperature < 1e-2 ? 1e-2 : p.temperature; /* vLLM raises tiny temperatures */
    for (int rep = 0; rep < 4; rep++) {
        ref_fill_logits(raw, V, scale);
        memcpy(x, raw, (size_t)V * sizeof *x);
        smp_row row = {r, NULL, 0, NULL, 0};
        assert_int_equal(smp_batch_sample(b, x, &row, 1), VC_OK);
        ref_process(raw, V, &p, NULL, 0, NULL, 0, l);
        int64_t n_ref = ref_filter(l, V, &p, q), n = 0;
        double min_kept = INFINITY, max_dropped = -INFINITY;
        for (int64_t i = 0; i < V; i++) {
            if (isfinite(x[i])) {
                n++;
                assert_true(fabs(x[i] - l[i] / T) <= 1e-4 * (1 + fabs(l[i] / T)));
                min_kept = fmin(min_kept, l[i]);
            } else {
                max_dropped = fmax(max_dropped, l[i]);
            }
        }
        assert_true(min_kept > max_dropped); /* kept = the most probable */
        if (p.top_p < 1) assert_true(llabs(n - n_ref) <= 1);
        else if (p.top_k > 0 || p.min_p > 0) assert_int_equal(n, n_ref);
        else assert_int_equal(n, V); /* no filter: zero-mass tokens keep their logits, as in vLLM */
        assert_true(q[smp_batch_output(b)->tokens[0]] > 0);
        assert_true(isfinite(x[smp_batch_output(b)->tokens[0]]));
    }
    smp_req_free(r);
    smp_batch_free(b);
    free(raw), free(x), free(l), free(q);
}

static void test_kept_sets_match_reference(void **st) {
    (void)st;
    smp_req_params p = smp_req_params_default();
    struct { float T, min_p, top_p; int32_t top_k; } cases[] = {
        {1.0f, 0.0f, 1.0f, 0},    {0.7f, 0.1f, 1.0f, 0},   {1.3f, 0.0f, 1.0f, 50},  {1.0f, 0.0f, 0.9f, 0},
        {0.5f, 0.0f, 0.5f, 0},    {2.0f, 0.0f, 0.95f, 0},  {0.8f, 0.05f, 0.9f, 40}, {1.0f, 0.0f, 0.3f, 5},
        {1.0f, 0.2f, 1.0f, 1},    {5.0f, 0.0f, 0.99f, 0},  {0.005f, 0.0f, 1.0f, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        p.temperature = cases[c].T;
        p.min_p = cases[c].min_p;
        p.top_p = cases[c].top_p;
        p.top_k = cases[c].top_k;
        check_kept(p, 5000, 2.0);
        check_kept(p, 40000, 0.3); /* flat: many candidates for top_p */
    }
}

/* Draw N tokens of one distribution (rows of one batch, unseeded, or seeded
 * at successive steps) and compare counts with the reference. */
static void check_frequencies(smp_req_params p, bool seeded) {
    enum { V = 12, B = 256, CALLS = 60 };
    float raw[V];
    ref_fill_logits(raw, V, 1.5);
    raw[7] = raw[2]; /* a tie */
    double l[V], q[V];
    ref_process(raw, V, &p, NULL, 0, NULL, 0, l);
    ref_filter(l, V, &p, q);
    smp_batch *b = new_batch(V, B, 11);
    p.seed = 99;
    p.has_seed = seeded;
    smp_req *r = new_req(b, p);
    static float x[B * V];
    smp_row rows[B];
    long cnt[V] = {0};
    for (int c = 0; c < CALLS; c++) {
        for (int i = 0; i < B; i++) {
            memcpy(x + i * V, raw, sizeof raw);
            rows[i] = (smp_row){r, NULL, 0, NULL, 0};
            rows[i].n_output = c * B + i; /* the step: seeded draws differ per row */
        }
        /* history is only read by penalties/bad words/min_tokens (none here) */
        static int32_t dummy[B * CALLS];
        for (int i = 0; i < B; i++) rows[i].output = dummy;
        assert_int_equal(smp_batch_sample(b, x, rows, B), VC_OK);
        for (int i = 0; i < B; i++) cnt[smp_batch_output(b)->tokens[i]]++;
    }
    double N = (double)B * CALLS, chi2 = 0;
    int df = -1;
    for (int i = 0; i < V; i++) {
        if (q[i] == 0) {
            if (cnt[i] != 0) fail_msg("token %d excluded but drawn %ld times", i, cnt[i]);
            continue;
        }
        double e = N * q[i];
        chi2 += (cnt[i] - e) * (cnt[i] - e) / e;
        df++;
    }
    if (df > 0 && chi2 > df + 5 * sqrt(2.0 * df) + 5)
        fail_msg("chi2 %.1f with %d degrees of freedom (seeded %d)", chi2, df, seeded);
    if (df == 0) assert_int_equal((long)N, cnt[smp_argmax(raw, V)]);
    smp_req_free(r);
    smp_batch_free(b);
}

static void test_frequencies(void **st) {
    (void)st;
    smp_req_params p = smp_req_params_default();
    for (int seeded = 0; seeded < 2; seeded++) {
        p = smp_req_params_default();
        check_frequencies(p, seeded);
        p.temperature = 0.6f;
        check_frequencies(p, seeded);
        p.top_k = 4;
        check_frequencies(p, seeded);
        p.top_k = 0;
        p.top_p = 0.7f;
        check_frequencies(p, seeded);
        p.top_p = 1.0f;
        p.min_p = 0.15f;
        check_frequencies(p, seeded);
        p.temperature = 1.4f;
        p.top_k = 6;
        p.top_p = 0.8f;
        p.min_p = 0.05f;
        check_frequencies(p, seeded);
    }
}

/* top_p on ties: a row of three values repeated many times; kept are the
 * highest values, then the lowest ids of the boundary value, until the
 * mass reaches p. The draw stays within them. */
static void test_topp_ties(void **st) {
    (void)st;
    enum { V = 9000 };
    static float x[V];
    static double l[V], q[V];
    smp_batch *b = new_batch(V, 1, 5);
    for (int c = 0; c < 5; c++) {
        float ps[] = {0.5f, 0.9f, 0.2f, 0.5f, 0.3f};
        smp_req_params p = smp_req_params_default();
        p.top_p = ps[c];
        smp_req *r = new_req(b, p);
        for (int i = 0; i < V; i++) x[i] = (float)((i * 7) % 3);
        if (c >= 3) { /* near-equal groups share radix buckets down to the last level */
            for (int i = 0; i < V; i++) x[i] = -1e-5f * (float)((i * 7) % 3);
            x[V / 2] = 1.0f;
        }
        float raw[V];
        memcpy(raw, x, sizeof raw);
        smp_row row = {r, NULL, 0, NULL, 0};
        assert_int_equal(smp_batch_sample(b, x, &row, 1), VC_OK);
        ref_process(raw, V, &p, NULL, 0, NULL, 0, l);
        int64_t n_ref = ref_filter(l, V, &p, q), n = 0;
        for (int i = 0; i < V; i++) {
            n += isfinite(x[i]);
            if ((q[i] > 0) != (isfinite(x[i]) != 0)) fail_msg("token %d: ref %g, got %g", i, q[i], x[i]);
        }
        assert_int_equal(n, n_ref);
        assert_true(q[smp_batch_output(b)->tokens[0]] > 0);
        smp_req_free(r);
    }
    smp_batch_free(b);
}

/* Deterministic "model": logits for (request, step) from a hash. */
static void model_logits(float *x, int64_t V, int req, int step) {
    uint64_t save = ref_rand_state;
    ref_rand_state = 0x9E3779B97F4A7C15ull * (uint64_t)(req * 1000 + step + 1) | 1;
    ref_fill_logits(x, V, 2.5);
    ref_rand_state = save;
}

/* The same seeded request alone and inside batches of other sizes and
 * orders (other seeded, unseeded and greedy requests around it) yields the
 * same tokens step after step; its history feeds penalties. */
static void test_seeded_reproducible_across_batches(void **st) {
    (void)st;
    enum { V = 2000, STEPS = 60, MAXB = 17 };
    smp_batch *b = new_batch(V, MAXB, 1);
    smp_req_params p = smp_req_params_default();
    p.temperature = 0.9f;
    p.top_p = 0.95f;
    p.top_k = 200;
    p.min_p = 0.01f;
    p.presence_penalty = 0.5f;
    p.repetition_penalty = 1.1f;
    p.seed = 1234;
    p.has_seed = true;
    smp_req *target = new_req(b, p);
    smp_req *others[4];
    smp_req_params o = smp_req_params_default();
    others[0] = new_req(b, o); /* unseeded */
    o.seed = 1235, o.has_seed = true;
    others[1] = new_req(b, o); /* a neighbouring seed */
    o.temperature = 0, o.has_seed = false;
    others[2] = new_req(b, o); /* greedy */
    o = smp_req_params_default(), o.top_p = 0.5f;
    others[3] = new_req(b, o);
    int32_t prompt[5] = {1, 2, 3, 4, 5};
    int32_t toks[3][STEPS];
    int sizes[3] = {1, 5, 17}, pos[3] = {0, 3, 0};
    static float x[MAXB * V];
    static int32_t hist[MAXB][STEPS];
    for (int cfg = 0; cfg < 3; cfg++) {
        for (int s = 0; s < STEPS; s++) {
            smp_row rows[MAXB];
            int B = sizes[cfg];
            for (int i = 0; i < B; i++) {
                int ri = i == pos[cfg] ? 0 : 1 + (i + cfg) % 4;
                rows[i] = (smp_row){ri == 0 ? target : others[ri - 1], prompt, 5, hist[i], s};
                model_logits(x + (int64_t)i * V, V, i == pos[cfg] ? 0 : 100 + i, s);
                if (i == pos[cfg]) model_logits(x + (int64_t)i * V, V, 0, s * 1000 + (s ? hist[i][s - 1] : 0));
            }
            assert_int_equal(smp_batch_sample(b, x, rows, B), VC_OK);
            for (int i = 0; i < B; i++) hist[i][s] = smp_batch_output(b)->tokens[i];
            toks[cfg][s] = hist[pos[cfg]][s];
        }
    }
    assert_memory_equal(toks[0], toks[1], sizeof toks[0]);
    assert_memory_equal(toks[0], toks[2], sizeof toks[0]);
    int distinct = 0; /* and it really was random */
    for (int s = 1; s < STEPS; s++) distinct += toks[0][s] != toks[0][s - 1];
    assert_true(distinct > STEPS / 2);
    /* another seed gives another sequence */
    smp_req_params p2 = p;
    p2.seed = 4321;
    smp_req *t2 = new_req(b, p2);
    int same = 0;
    for (int s = 0; s < STEPS; s++) {
        model_logits(x, V, 0, s * 1000 + (s ? hist[0][s - 1] : 0));
        smp_row row = {t2, prompt, 5, hist[0], s};
        assert_int_equal(smp_batch_sample(b, x, &row, 1), VC_OK);
        same += smp_batch_output(b)->tokens[0] == toks[0][s];
    }
    assert_true(same < STEPS);
    smp_req_free(t2);
    smp_req_free(target);
    for (int i = 0; i < 4; i++) smp_req_free(others[i]);
    smp_batch_free(b);
}

static void test_greedy_ties_nan_inf(void **st) {
    (void)st;
    smp_batch *b = new_batch(6, 4, 2);
    smp_req_params p = smp_req_params_default();
    p.temperature = 0;
    smp_req *g = new_req(b, p);
    p = smp_req_params_default();
    smp_req *rnd = new_req(b, p);
    float x[4 * 6] = {
        1, 5, 2, 5, NAN, 0,                      /* greedy tie -> 1 */
        NAN, 2, NAN, 3, 3, NAN,                  /* greedy: 3 */
        NAN, NAN, 1, NAN, NAN, NAN,              /* random: only 2 is a number */
        0, INFINITY, 5, INFINITY, NAN, -INFINITY /* random: +inf tokens only */
    };
    smp_row rows[4] = {{g, NULL, 0, NULL, 0}, {g, NULL, 0, NULL, 0}, {rnd, NULL, 0, NULL, 0}, {rnd, NULL, 0, NULL, 0}};
    int seen_inf[6] = {0};
    for (int rep = 0; rep < 40; rep++) {
        float y[4 * 6];
        memcpy(y, x, sizeof y);
        assert_int_equal(smp_batch_sample(b, y, rows, 4), VC_OK);
        const smp_batch_out *o = smp_batch_output(b);
        assert_int_equal(o->tokens[0], 1);
        assert_int_equal(o->tokens[1], 3);
        assert_int_equal(o->tokens[2], 2);
        assert_true(o->tokens[3] == 1 || o->tokens[3] == 3);
        seen_inf[o->tokens[3]]++;
    }
    assert_true(seen_inf[1] > 5 && seen_inf[3] > 5);
    /* Everything masked: a defined answer (0), no crash. */
    float z[6] = {-INFINITY, -INFINITY, NAN, -INFINITY, -INFINITY, -INFINITY};
    assert_int_equal(smp_batch_sample(b, z, &rows[2], 1), VC_OK);
    assert_int_equal(smp_batch_output(b)->tokens[0], 0);
    smp_req_free(g);
    smp_req_free(rnd);
    smp_batch_free(b);
}

/* Counter-based seeded uniforms: roughly uniform over steps and seeds. */
static void test_seeded_uniform(void **st) {
    (void)st;
    int bins[10] = {0};
    for (int s = 0; s < 10000; s++) {
        double u = smp_seeded_uniform((uint64_t)(s % 7), s / 7);
        assert_true(u >= 0 && u < 1);
        bins[(int)(u * 10)]++;
    }
    double chi2 = 0;
    for (int i = 0; i < 10; i++) chi2 += (bins[i] - 1000.0) * (bins[i] - 1000.0) / 1000.0;
    assert_true(chi2 < 35);
    assert_true(smp_seeded_uniform(5, 3) == smp_seeded_uniform(5, 3));
    assert_true(smp_seeded_uniform(5, 3) != smp_seeded_uniform(6, 2));
}

/* Random valid parameters on rows sprinkled with NaN and +-inf, odd
 * vocab sizes, random histories: always a valid token, consistent
 * logprobs, never a crash (ASan/UBSan builds run this too). */
static void test_random_params_robust(void **st) {
    (void)st;
    for (int it = 0; it < 150; it++) {
        int64_t V = 1 + (int64_t)(ref_rand() % 3000);
        int B = 1 + (int)(ref_rand() % 5);
        smp_batch_params bp = smp_batch_params_default();
        bp.vocab = V;
        bp.max_batch = B;
        bp.has_seed = true;
        bp.seed = (uint64_t)it;
        bp.logprobs_mode = it % 2 ? SMP_LOGPROBS_PROCESSED : SMP_LOGPROBS_RAW;
        smp_batch *b = smp_batch_create(&bp);
        assert_non_null(b);
        smp_req_params p = smp_req_params_default();
        p.temperature = (float)(ref_unif() < 0.2 ? 0 : ref_unif() * 3);
        p.top_p = (float)(ref_unif() < 0.5 ? 1 : 0.01 + 0.99 * ref_unif());
        p.top_k = ref_unif() < 0.5 ? -1 : (int32_t)(ref_rand() % (uint64_t)(V + 3));
        p.min_p = (float)(ref_unif() < 0.5 ? 0 : ref_unif());
        p.presence_penalty = (float)(ref_unif() * 4 - 2);
        p.frequency_penalty = (float)(ref_unif() * 4 - 2);
        p.repetition_penalty = (float)(0.1 + ref_unif() * 3);
        p.has_seed = ref_unif() < 0.5;
        p.seed = ref_rand();
        p.logprobs = (int32_t)(ref_rand() % 22) - 1;
        int32_t stops[2] = {(int32_t)(ref_rand() % V), (int32_t)(ref_rand() % V)};
        p.stop_ids = stops, p.n_stop_ids = 2, p.min_tokens = (int32_t)(ref_rand() % 4);
        smp_req *r;
        assert_int_equal(smp_req_create(b, &p, &r), VC_OK);
        float *x = malloc((size_t)(B * V) * sizeof *x);
        int32_t hist[16];
        for (int i = 0; i < 16; i++) hist[i] = (int32_t)(ref_rand() % V);
        smp_row rows[5];
        for (int step = 0; step < 3; step++) {
            ref_fill_logits(x, B * V, 5.0 * ref_unif());
            for (int64_t i = 0; i < B * V; i++) {
                uint64_t z = ref_rand() % 40;
                if (z == 0) x[i] = NAN;
                else if (z == 1) x[i] = -INFINITY;
                else if (z == 2 && it % 3 == 0) x[i] = INFINITY;
            }
            for (int i = 0; i < B; i++) rows[i] = (smp_row){r, hist, 8, hist + 8, (int32_t)(ref_rand() % 9)};
            assert_int_equal(smp_batch_sample(b, x, rows, B), VC_OK);
            const smp_batch_out *o = smp_batch_output(b);
            for (int i = 0; i < B; i++) {
                assert_true(o->tokens[i] >= 0 && o->tokens[i] < V);
                if (p.logprobs < 0) continue;
                const float *lv = o->lp_vals + i * o->stride;
                assert_true(o->ranks[i] >= 1 && o->ranks[i] <= V);
                for (int j = 0; j <= p.logprobs; j++) assert_false(isnan(lv[j]) || lv[j] > 1e-5f);
            }
        }
        free(x);
        smp_req_free(r);
        smp_batch_free(b);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_sets_match_reference),
        cmocka_unit_test(test_frequencies),
        cmocka_unit_test(test_topp_ties),
        cmocka_unit_test(test_seeded_reproducible_across_batches),
        cmocka_unit_test(test_greedy_ties_nan_inf),
        cmocka_unit_test(test_seeded_uniform),
        cmocka_unit_test(test_random_params_robust),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
