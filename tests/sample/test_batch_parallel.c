/* Batch sampler on several threads (smp_batch_params.n_threads): every
 * token, logprob block and rank equals the one-thread sampler's, over many
 * steps of a mixed batch (greedy, seeded, unseeded from the batch
 * generator, penalties with histories, top-k/top-p/min-p, logit bias,
 * bad words, logprobs), and an invalid row fails the call cleanly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "sample/batch.h"

#define V 5003
#define ROWS 37
#define STEPS 12

static smp_batch *mk(int32_t threads) {
    smp_batch_params bp = smp_batch_params_default();
    bp.vocab = V;
    bp.max_batch = 64;
    bp.seed = 99;
    bp.has_seed = true;
    bp.max_logprobs = 5;
    bp.n_threads = threads;
    smp_batch *b = smp_batch_create(&bp);
    assert_non_null(b);
    return b;
}

static smp_req_params row_params(int i, const smp_bias *bias, const int32_t *bw, const int32_t *bwl) {
    smp_req_params p = smp_req_params_default();
    switch (i % 6) {
    case 0: p.temperature = 0.0f; break;
    case 1: p.temperature = 0.8f; p.seed = 1000 + (uint64_t)i; p.has_seed = true; p.top_k = 50; break;
    case 2: p.temperature = 1.0f; p.top_p = 0.9f; p.logprobs = 3; break; /* batch generator */
    case 3: p.temperature = 0.7f; p.min_p = 0.05f; p.presence_penalty = 0.5f; p.frequency_penalty = 0.3f;
            p.repetition_penalty = 1.2f; break;
    case 4: p.temperature = 1.3f; p.logit_bias = bias; p.n_logit_bias = 2; p.logprobs = 0; break;
    default: p.temperature = 0.0f; p.bad_words = bw; p.bad_word_lens = bwl; p.n_bad_words = 1;
             p.repetition_penalty = 1.5f; p.logprobs = 2; break;
    }
    return p;
}

static void test_parallel_equals_serial(void **st) {
    (void)st;
    smp_bias bias[2] = {{7, 3.0f}, {11, -2.0f}};
    int32_t bw[2] = {5, 6}, bwl[1] = {2};
    int32_t threads[] = {2, 3, 8};
    for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
        smp_batch *a = mk(1), *b = mk(threads[ti]);
        smp_req *ra[ROWS], *rb[ROWS];
        for (int i = 0; i < ROWS; i++) {
            smp_req_params p = row_params(i, bias, bw, bwl);
            assert_int_equal(smp_req_create(a, &p, &ra[i]), 0);
            assert_int_equal(smp_req_create(b, &p, &rb[i]), 0);
        }
        int32_t hist[ROWS][STEPS + 8];
        for (int i = 0; i < ROWS; i++)
            for (int j = 0; j < 8; j++) hist[i][j] = (i * 31 + j * 17) % V;
        float *la = malloc((size_t)ROWS * V * sizeof *la), *lb = malloc((size_t)ROWS * V * sizeof *lb);
        uint64_t x = 7;
        for (int s = 0; s < STEPS; s++) {
            for (int64_t k = 0; k < (int64_t)ROWS * V; k++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                la[k] = (float)((double)(x >> 11) / 9007199254740992.0 * 12.0 - 6.0);
            }
            memcpy(lb, la, (size_t)ROWS * V * sizeof *la);
            smp_row rwa[ROWS], rwb[ROWS];
            for (int i = 0; i < ROWS; i++) {
                rwa[i] = (smp_row){ra[i], hist[i], 4, hist[i] + 4, 4 + s};
                rwb[i] = (smp_row){rb[i], hist[i], 4, hist[i] + 4, 4 + s};
            }
            assert_int_equal(smp_batch_sample(a, la, rwa, ROWS), 0);
            assert_int_equal(smp_batch_sample(b, lb, rwb, ROWS), 0);
            const smp_batch_out *oa = smp_batch_output(a), *ob = smp_batch_output(b);
            for (int i = 0; i < ROWS; i++) {
                assert_int_equal(oa->tokens[i], ob->tokens[i]);
                assert_int_equal(oa->n_logprobs[i], ob->n_logprobs[i]);
                assert_int_equal(oa->ranks[i], ob->ranks[i]);
                for (int j = 0; j <= oa->n_logprobs[i]; j++) {
                    assert_int_equal(oa->lp_ids[i * oa->stride + j], ob->lp_ids[i * ob->stride + j]);
                    assert_true(oa->lp_vals[i * oa->stride + j] == ob->lp_vals[i * ob->stride + j]);
                }
                hist[i][8 + s] = oa->tokens[i];
            }
            /* the processed rows left in the logits match too */
            assert_memory_equal(la, lb, (size_t)ROWS * V * sizeof *la);
        }
        /* a bad history id fails the call, from whichever thread */
        int32_t bad[1] = {V + 5};
        smp_row rows[ROWS];
        for (int i = 0; i < ROWS; i++) rows[i] = (smp_row){rb[i], NULL, 0, NULL, 0};
        rows[ROWS - 1] = (smp_row){rb[3], bad, 1, NULL, 0}; /* penalties read the prompt */
        assert_true(smp_batch_sample(b, lb, rows, ROWS) < 0);
        for (int i = 0; i < ROWS; i++) {
            smp_req_free(ra[i]);
            smp_req_free(rb[i]);
        }
        free(la);
        free(lb);
        smp_batch_free(a);
        smp_batch_free(b);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_parallel_equals_serial)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
