/* Batch sampler, processors before sampling: each one (and all together)
 * against the double-precision reference on random logits, their order,
 * parameter validation. Greedy rows leave the processed logits in the row,
 * which is what these tests compare. */
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

#define V 3000

static smp_batch *new_batch(int64_t vocab) {
    smp_batch_params bp = smp_batch_params_default();
    bp.vocab = vocab;
    bp.max_batch = 8;
    bp.seed = 7;
    bp.has_seed = true;
    smp_batch *b = smp_batch_create(&bp);
    assert_non_null(b);
    return b;
}

/* Random history with repeats. */
static void fill_history(int32_t *h, int32_t n) {
    for (int32_t i = 0; i < n; i++) h[i] = (int32_t)(ref_rand() % (i % 3 ? 200 : V));
}

/* Run one greedy row with params p, compare the processed row with
 * ref_process and the token with its argmax. */
static void check_greedy(smp_batch *b, smp_req_params p, const int32_t *prompt, int32_t n_prompt,
                         const int32_t *out, int32_t n_out) {
    static float raw[V], x[V];
    static double l[V];
    p.temperature = 0.0f;
    ref_fill_logits(raw, V, 2.0);
    memcpy(x, raw, sizeof x);
    smp_req *r;
    assert_int_equal(smp_req_create(b, &p, &r), VC_OK);
    smp_row row = {r, prompt, n_prompt, out, n_out};
    assert_int_equal(smp_batch_sample(b, x, &row, 1), VC_OK);
    ref_process(raw, V, &p, prompt, n_prompt, out, n_out, l);
    int32_t want = 0;
    for (int64_t i = 0; i < V; i++) {
        if (isinf(l[i])) {
            assert_true(isinf(x[i]) && (x[i] > 0) == (l[i] > 0));
        } else {
            assert_true(fabs(x[i] - l[i]) <= 1e-5 * (1 + fabs(l[i])));
        }
        if (l[i] > l[want]) want = (int32_t)i;
    }
    assert_int_equal(smp_batch_output(b)->tokens[0], want);
    smp_req_free(r);
}

static void test_each_processor_matches_reference(void **st) {
    (void)st;
    smp_batch *b = new_batch(V);
    static int32_t prompt[300], out[120];
    fill_history(prompt, 300);
    fill_history(out, 120);
    smp_req_params p = smp_req_params_default();
    check_greedy(b, p, prompt, 300, out, 120); /* nothing: row unchanged */

    int32_t allowed[] = {5, 17, 17, 2999, 1000, 0};
    p = smp_req_params_default();
    p.allowed_ids = allowed;
    p.n_allowed = 6;
    check_greedy(b, p, prompt, 300, out, 120);

    /* bad words: single token, a prefix that matches the output's tail,
     * one that does not, one longer than the output. */
    int32_t n_out = 120;
    int32_t words[] = {42, out[n_out - 2], out[n_out - 1], 77, out[n_out - 1], 78, 1, 2, 3, 4, 5, 6};
    int32_t lens[] = {1, 3, 2, 6};
    words[5] = (int32_t)((out[n_out - 2] + 1) % V); /* [x, 78]: x != last output */
    words[4] = words[5];
    p = smp_req_params_default();
    p.bad_words = words;
    p.bad_word_lens = lens;
    p.n_bad_words = 4;
    check_greedy(b, p, prompt, 300, out, n_out);
    check_greedy(b, p, prompt, 300, out, 3); /* shorter output: longer words skip */

    int32_t stops[] = {2, 100, 2500};
    p = smp_req_params_default();
    p.stop_ids = stops;
    p.n_stop_ids = 3;
    p.min_tokens = 121;
    check_greedy(b, p, prompt, 300, out, 120); /* banned */
    p.min_tokens = 120;
    check_greedy(b, p, prompt, 300, out, 120); /* reached: not banned */

    smp_bias bias[] = {{3, 5.0f}, {2000, -3.5f}, {3, 1.25f}, {out[0], 2.0f}};
    p = smp_req_params_default();
    p.logit_bias = bias;
    p.n_logit_bias = 4;
    check_greedy(b, p, prompt, 300, out, 120);

    p = smp_req_params_default();
    p.repetition_penalty = 1.7f;
    check_greedy(b, p, prompt, 300, out, 120);
    p.repetition_penalty = 0.6f;
    check_greedy(b, p, prompt, 300, out, 120);
    p = smp_req_params_default();
    p.frequency_penalty = 0.7f;
    check_greedy(b, p, prompt, 300, out, 120);
    p = smp_req_params_default();
    p.presence_penalty = -1.3f;
    check_greedy(b, p, prompt, 300, out, 120);

    /* all together, with an empty output and with an empty prompt */
    p = smp_req_params_default();
    p.allowed_ids = NULL;
    p.bad_words = words;
    p.bad_word_lens = lens;
    p.n_bad_words = 4;
    p.stop_ids = stops;
    p.n_stop_ids = 3;
    p.min_tokens = 500;
    p.logit_bias = bias;
    p.n_logit_bias = 4;
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    for (int rep = 0; rep < 5; rep++) check_greedy(b, p, prompt, 300, out, 120);
    check_greedy(b, p, prompt, 300, out, 0);
    check_greedy(b, p, NULL, 0, out, 120);
    smp_batch_free(b);
}

/* logit_bias runs before the repetition penalty: logit -1, bias +5,
 * repetition 2 gives (-1 + 5) / 2 = 2; the other order would give
 * -1 * 2 + 5 = 3. */
static void test_bias_before_penalties(void **st) {
    (void)st;
    smp_batch *b = new_batch(8);
    float x[8] = {0, -1, 0, 0, 0, 0, 0, 0};
    int32_t out[] = {1};
    smp_bias bias[] = {{1, 5.0f}};
    smp_req_params p = smp_req_params_default();
    p.temperature = 0;
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    p.repetition_penalty = 2.0f;
    smp_req *r;
    assert_int_equal(smp_req_create(b, &p, &r), VC_OK);
    smp_row row = {r, NULL, 0, out, 1};
    assert_int_equal(smp_batch_sample(b, x, &row, 1), VC_OK);
    assert_float_equal(x[1], 2.0f, 1e-6);
    assert_int_equal(smp_batch_output(b)->tokens[0], 1);
    smp_req_free(r);
    smp_batch_free(b);
}

/* min_tokens bans stop tokens before bias and penalties run, and they
 * cannot bring a banned token back: +100 bias and a -2 presence penalty on
 * the stop token still leave it at -inf, even under random sampling. */
static void test_min_tokens_ban_survives_later_processors(void **st) {
    (void)st;
    smp_batch *b = new_batch(16);
    int32_t stops[] = {3};
    smp_bias bias[] = {{3, 100.0f}};
    int32_t out[] = {3, 3}; /* already emitted (ignore_eos-like history) */
    smp_req_params p = smp_req_params_default();
    p.stop_ids = stops;
    p.n_stop_ids = 1;
    p.min_tokens = 5;
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    p.presence_penalty = -2.0f;
    p.repetition_penalty = 0.5f;
    p.frequency_penalty = -2.0f;
    smp_req *r;
    assert_int_equal(smp_req_create(b, &p, &r), VC_OK);
    for (int i = 0; i < 200; i++) {
        float x[16];
        ref_fill_logits(x, 16, 1.0);
        smp_row row = {r, NULL, 0, out, 2};
        assert_int_equal(smp_batch_sample(b, x, &row, 1), VC_OK);
        assert_int_not_equal(smp_batch_output(b)->tokens[0], 3);
        assert_true(isinf(x[3]) && x[3] < 0);
    }
    smp_req_free(r);
    smp_batch_free(b);
}

static void expect_invalid(smp_batch *b, smp_req_params p, const char *word) {
    smp_req *r = (smp_req *)1;
    assert_int_equal(smp_req_create(b, &p, &r), VC_ERR_INVALID);
    assert_null(r);
    if (!strstr(vc_err_msg(), word)) fail_msg("message '%s' lacks '%s'", vc_err_msg(), word);
}

static void test_validation(void **st) {
    (void)st;
    smp_batch *b = new_batch(100);
    smp_req_params d = smp_req_params_default(), p;
    p = d, p.temperature = -0.1f, expect_invalid(b, p, "temperature");
    p = d, p.temperature = NAN, expect_invalid(b, p, "temperature");
    p = d, p.top_p = 0.0f, expect_invalid(b, p, "top_p");
    p = d, p.top_p = 1.01f, expect_invalid(b, p, "top_p");
    p = d, p.top_k = -2, expect_invalid(b, p, "top_k");
    p = d, p.min_p = 1.5f, expect_invalid(b, p, "min_p");
    p = d, p.min_p = -0.01f, expect_invalid(b, p, "min_p");
    p = d, p.repetition_penalty = 0.0f, expect_invalid(b, p, "repetition_penalty");
    p = d, p.presence_penalty = 2.5f, expect_invalid(b, p, "presence_penalty");
    p = d, p.frequency_penalty = -2.01f, expect_invalid(b, p, "frequency_penalty");
    p = d, p.min_tokens = -1, expect_invalid(b, p, "min_tokens");
    p = d, p.logprobs = 21, expect_invalid(b, p, "logprobs");
    p = d, p.logprobs = -2, expect_invalid(b, p, "logprobs");
    int32_t bad_ids[] = {1, 100};
    p = d, p.allowed_ids = bad_ids, p.n_allowed = 2, expect_invalid(b, p, "allowed_token_ids");
    p = d, p.allowed_ids = bad_ids, p.n_allowed = 0, expect_invalid(b, p, "empty");
    p = d, p.stop_ids = bad_ids, p.n_stop_ids = 2, expect_invalid(b, p, "stop_token_ids");
    smp_bias bb[] = {{-1, 1.0f}};
    p = d, p.logit_bias = bb, p.n_logit_bias = 1, expect_invalid(b, p, "logit_bias");
    smp_bias bi[] = {{1, INFINITY}};
    p = d, p.logit_bias = bi, p.n_logit_bias = 1, expect_invalid(b, p, "logit_bias");
    int32_t lens0[] = {0}, lens2[] = {2};
    p = d, p.bad_words = bad_ids, p.bad_word_lens = lens0, p.n_bad_words = 1, expect_invalid(b, p, "empty");
    p = d, p.bad_words = bad_ids, p.bad_word_lens = lens2, p.n_bad_words = 1, expect_invalid(b, p, "bad_words");
    /* Accepted edges: top_k -1/0/huge, top_p 1, min_p 0 and 1, logprobs 20. */
    smp_req *r;
    p = d, p.top_k = -1, p.top_p = 1.0f, p.min_p = 1.0f, p.logprobs = 20;
    assert_int_equal(smp_req_create(b, &p, &r), VC_OK);
    smp_req_free(r);
    p = d, p.top_k = 1000000, p.presence_penalty = 2.0f, p.frequency_penalty = -2.0f;
    assert_int_equal(smp_req_create(b, &p, &r), VC_OK);
    smp_req_free(r);
    /* Out-of-range history and bad calls are errors, not crashes. */
    p = d, p.repetition_penalty = 1.5f;
    assert_int_equal(smp_req_create(b, &p, &r), VC_OK);
    float x[100] = {0};
    int32_t hist[] = {5, 100};
    smp_row row = {r, hist, 2, NULL, 0};
    assert_int_equal(smp_batch_sample(b, x, &row, 1), VC_ERR_INVALID);
    smp_row row2 = {NULL, NULL, 0, NULL, 0};
    assert_int_equal(smp_batch_sample(b, x, &row2, 1), VC_ERR_INVALID);
    assert_int_equal(smp_batch_sample(b, x, &row, 9), VC_ERR_INVALID);
    smp_req_free(r);
    smp_batch_params bp = smp_batch_params_default();
    assert_null(smp_batch_create(&bp)); /* vocab 0 */
    smp_batch_free(b);
}

/* Parameters are copied: the caller's arrays may change afterwards. */
static void test_params_are_copied(void **st) {
    (void)st;
    smp_batch *b = new_batch(10);
    int32_t allowed[] = {4};
    smp_req_params p = smp_req_params_default();
    p.temperature = 0;
    p.allowed_ids = allowed;
    p.n_allowed = 1;
    smp_req *r;
    assert_int_equal(smp_req_create(b, &p, &r), VC_OK);
    allowed[0] = 9;
    float x[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    smp_row row = {r, NULL, 0, NULL, 0};
    assert_int_equal(smp_batch_sample(b, x, &row, 1), VC_OK);
    assert_int_equal(smp_batch_output(b)->tokens[0], 4);
    assert_int_equal(smp_req_get_params(r)->allowed_ids[0], 4);
    smp_req_free(r);
    /* children: seed + i when seeded, unchanged otherwise */
    p.seed = 100;
    p.has_seed = true;
    assert_true(smp_req_params_child(&p, 3).seed == 103);
    p.has_seed = false;
    assert_true(smp_req_params_child(&p, 3).seed == 100);
    smp_batch_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_processor_matches_reference),
        cmocka_unit_test(test_bias_before_penalties),
        cmocka_unit_test(test_min_tokens_ban_survives_later_processors),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_params_are_copied),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
