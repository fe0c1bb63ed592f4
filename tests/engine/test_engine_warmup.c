/* The engine's start-up warm-up (engine.c warm_up, VLLM_WARMUP): forced on
 * the CPU with VLLM_WARMUP=1 it runs a full-budget forward on a throw-away
 * sequence and leaves no trace: the same requests give the same tokens
 * (greedy and seeded sampling) and the same KV block count as an engine
 * without it, and its steps of 1 .. max_num_seqs rows ran (the last layer
 * on their logit rows, counted); VLLM_WARMUP=0 skips it. On the GPU (VLLM_TEST_DEVICE=cuda) the
 * default (auto) warm-up is compared with VLLM_WARMUP=0 the same way.
 * Where the step budget exceeds the model length the budget forward runs in
 * several sequences (at most max_num_seqs of them, as a step), and the
 * KV block count stays that of an engine without a warm-up.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "engine_test_util.h"
#include "engine/engine_int.h" /* e->warm_tokens, e->warm_seqs */
#include "model/model_impl.h"   /* mdl_last_rows_count */

#define NREQ 6
#define CAP 24

static ereq_sampling samp(int i) {
    ereq_sampling s = ereq_sampling_default();
    s.max_tokens = 8 + 3 * i;
    s.ignore_eos = true;
    if (i % 2) {
        s.temperature = 0.8f;
        s.seed = 1234 + (uint64_t)i;
        s.has_seed = true;
    } else {
        s.temperature = 0.0f;
    }
    return s;
}

/* Runs the request set on a new engine with VLLM_WARMUP=mode (NULL: unset);
 * *lr: the steps that ran the last layer on their logit rows while the
 * engine was made (the warm-up's row steps take it: 1 .. 16 rows). */
static void run(const char *mode, int32_t *toks, int32_t *n, int32_t *blocks, uint64_t *lr) {
    if (mode) setenv("VLLM_WARMUP", mode, 1);
    else unsetenv("VLLM_WARMUP");
    eng_params ep = etest_params(64, false);
    const uint64_t lr0 = mdl_last_rows_count();
    eng_engine *e = eng_create(&ep);
    if (!e) fail_msg("engine: %s", vc_err_msg());
    *lr = mdl_last_rows_count() - lr0;
    *blocks = eng_num_blocks(e);
    etest_add_prompts(e, NREQ, 99, 5, 7, 30, samp);
    memset(n, 0, NREQ * sizeof *n);
    etest_collect(e, toks, n, CAP);
    eng_free(e);
    unsetenv("VLLM_WARMUP");
}

static void test_warmup_leaves_no_trace(void **st) {
    (void)st;
    static int32_t a[NREQ * CAP], b[NREQ * CAP];
    int32_t na[NREQ], nb[NREQ], ba = 0, bb = 0;
    uint64_t la = 0, lb = 0;
    bool gpu = etest_device() != RT_DEV_CPU;
    run("0", a, na, &ba, &la);
    run(gpu ? NULL : "1", b, nb, &bb, &lb);
    assert_true(la == 0);
    assert_true(lb >= 16); /* the row steps ran (max_num_seqs 16, a quarter of the 64-token budget) */
    assert_int_equal(ba, bb);
    for (int i = 0; i < NREQ; i++) {
        assert_int_equal(na[i], samp(i).max_tokens);
        assert_int_equal(na[i], nb[i]);
        assert_memory_equal(a + i * CAP, b + i * CAP, (size_t)na[i] * sizeof *a);
    }
}

/* The budget forward's tokens and sequences by model length and sequence
 * cap (budget 64): 24 -> 3 sequences of 23 + 23 + 18; two at most -> 46
 * tokens; 128 -> one sequence of the whole budget. */
static void test_warmup_budget_in_sequences(void **st) {
    (void)st;
    const struct {
        int32_t max_len, max_seqs;
        int64_t tokens, seqs;
    } cases[] = {{24, 16, 64, 3}, {24, 2, 46, 2}, {128, 16, 64, 1}, {65, 16, 64, 1}, {33, 16, 64, 2}};
    bool gpu = etest_device() != RT_DEV_CPU;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t blocks[2];
        for (int w = 0; w < 2; w++) {
            if (w == 0) setenv("VLLM_WARMUP", "0", 1);
            else if (gpu) unsetenv("VLLM_WARMUP");
            else setenv("VLLM_WARMUP", "1", 1);
            eng_params ep = etest_params(64, false);
            ep.max_model_len = cases[i].max_len;
            ep.max_num_seqs = cases[i].max_seqs;
            eng_engine *e = eng_create(&ep);
            if (!e) fail_msg("engine: %s", vc_err_msg());
            blocks[w] = eng_num_blocks(e);
            if (w == 0) {
                assert_int_equal(e->warm_tokens, 0);
            } else {
                if (e->warm_tokens != cases[i].tokens || e->warm_seqs != cases[i].seqs)
                    fail_msg("max_model_len %d, max_num_seqs %d: %lld tokens in %lld sequences, expected %lld in %lld",
                             cases[i].max_len, cases[i].max_seqs, (long long)e->warm_tokens,
                             (long long)e->warm_seqs, (long long)cases[i].tokens, (long long)cases[i].seqs);
            }
            eng_free(e);
        }
        assert_int_equal(blocks[0], blocks[1]);
    }
    unsetenv("VLLM_WARMUP");
}

static int setup(void **st) {
    (void)st;
    return etest_copy_fixture("warmup");
}

static int teardown(void **st) {
    (void)st;
    return etest_rm_fixture();
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_warmup_leaves_no_trace),
                                       cmocka_unit_test(test_warmup_budget_in_sequences)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
