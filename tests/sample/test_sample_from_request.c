/* from_request: ereq_sampling -> smp_req (EOS joins the min_tokens stop set
 * unless ignore_eos) and ereq -> smp_row (prompt / output split). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "sample/from_request.h"

static void test_from_ereq(void **st) {
    (void)st;
    smp_batch_params bp = smp_batch_params_default();
    bp.vocab = 10;
    bp.max_batch = 1;
    bp.has_seed = true;
    smp_batch *b = smp_batch_create(&bp);
    assert_non_null(b);
    ereq_sampling sp = ereq_sampling_default();
    sp.temperature = 0;
    sp.min_tokens = 3;
    sp.stop_token_ids[0] = 4;
    sp.n_stop_token_ids = 1;
    sp.repetition_penalty = 2.0f;
    int32_t prompt[] = {1, 2}, eos[] = {9};
    ereq *e = ereq_create(1, prompt, 2, &sp);
    assert_non_null(e);
    assert_int_equal(ereq_append_token(e, 5), VC_OK);
    for (int ignore = 0; ignore < 2; ignore++) {
        e->sp.ignore_eos = ignore;
        smp_req *r;
        assert_int_equal(smp_req_create_from_ereq(b, &e->sp, eos, 1, &r), VC_OK);
        smp_row row = smp_row_from_ereq(r, e);
        assert_int_equal(row.n_prompt, 2);
        assert_int_equal(row.n_output, 1);
        assert_int_equal(row.output[0], 5);
        float x[10] = {0, 4, 4, 0, 8, 6, 0, 0, 0, 7};
        assert_int_equal(smp_batch_sample(b, x, &row, 1), VC_OK);
        assert_true(isinf(x[4]));               /* stop token banned (1 output < 3) */
        assert_true(x[1] == 2.0f && x[2] == 2.0f); /* prompt tokens penalised */
        assert_true(x[5] == 3.0f);              /* output token penalised */
        assert_int_equal(smp_batch_output(b)->tokens[0], ignore ? 9 : 5);
        assert_true(ignore ? x[9] == 7.0f : isinf(x[9]));
        smp_req_free(r);
    }
    /* logit_bias, allowed_token_ids and bad_words reach the sampler */
    ereq_sampling s2 = ereq_sampling_default();
    s2.temperature = 0;
    int32_t bias_ids[] = {3}, allowed[] = {1, 3, 6}, bw[] = {6}, bwl[] = {1};
    float bias_vals[] = {0.5f};
    s2.logit_bias_ids = bias_ids, s2.logit_bias_vals = bias_vals, s2.n_logit_bias = 1;
    s2.allowed_token_ids = allowed, s2.n_allowed_token_ids = 3;
    s2.bad_words_ids = bw, s2.bad_words_lens = bwl, s2.n_bad_words = 1;
    smp_req *r2;
    assert_int_equal(smp_req_create_from_ereq(b, &s2, eos, 1, &r2), VC_OK);
    float y[10] = {9, 1, 9, 0.75f, 9, 9, 2, 9, 9, 9};
    smp_row row2 = {r2, prompt, 2, NULL, 0};
    assert_int_equal(smp_batch_sample(b, y, &row2, 1), VC_OK);
    assert_int_equal(smp_batch_output(b)->tokens[0], 3); /* 0.75 + 0.5 beats 1; 6 is a bad word */
    assert_true(isinf(y[0]) && isinf(y[6]) && y[3] == 1.25f);
    smp_req_free(r2);
    bias_ids[0] = 10; /* out of vocab: rejected, nothing leaks */
    assert_int_equal(smp_req_create_from_ereq(b, &s2, eos, 1, &r2), VC_ERR_INVALID);
    assert_null(r2);

    sp.prompt_logprobs = 21;
    smp_req *r;
    assert_int_equal(smp_req_create_from_ereq(b, &sp, eos, 1, &r), VC_ERR_INVALID);
    sp.prompt_logprobs = -1;
    sp.top_p = 0;
    assert_int_equal(smp_req_create_from_ereq(b, &sp, eos, 1, &r), VC_ERR_INVALID);
    ereq_free(e);
    smp_batch_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_from_ereq)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
