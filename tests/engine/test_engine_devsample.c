/* Device sampling through the engine (VLLM_DEVICE_SAMPLING, runner_queue.c):
 * 12 seeded requests with mixed sampling parameters (greedy, greedy with
 * penalties, temperature, top_k, top_p, min_p, penalties, tiny temperature)
 * plus one that asks for logprobs and stops early (steps with it fall back
 * to the host sampler, so host and device steps interleave) give the same tokens
 *   - with device sampling off (host sampler: the oracle),
 *   - on, synchronous,
 *   - on, with async scheduling,
 * at two chunked-prefill budgets, and once with no penalties anywhere (no
 * histories travel). On the CPU backend the op is the host
 * sampler itself, so equality is exact; VLLM_TEST_DEVICE=cuda runs it on the
 * GPU, where a differing token needs a uniform within ~1e-7 of a CDF
 * boundary (see tests/backends/cuda/test_cuda_sample.c). */
#include "engine_test_util.h"

#define NREQ 13
#define GEN 16

static int make_model(void **st) {
    (void)st;
    return etest_copy_fixture("devsample");
}

static int rm_model(void **st) {
    (void)st;
    return etest_rm_fixture();
}

typedef struct {
    int32_t toks[NREQ][GEN];
    int32_t n[NREQ];
} results;

static bool g_no_penalties; /* every request without penalties: no history goes to the device */

static ereq_sampling req_params(int i) {
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = GEN;
    sp.ignore_eos = true;
    sp.seed = 1000 + (uint64_t)i;
    sp.has_seed = true;
    switch (i % 7) {
    case 0: sp.temperature = 0.0f; break;
    case 1: sp.temperature = 0.0f; sp.repetition_penalty = 1.4f; sp.frequency_penalty = 0.5f; break;
    case 2: sp.temperature = 0.8f; sp.top_k = 10; break;
    case 3: sp.temperature = 1.0f; sp.top_p = 0.8f; sp.presence_penalty = 1.0f; break;
    case 4: sp.temperature = 1.3f; sp.min_p = 0.05f; sp.repetition_penalty = 1.2f; break;
    case 5: sp.temperature = 1.0f; sp.top_k = 40; sp.top_p = 0.9f; sp.frequency_penalty = -0.3f; break;
    default: sp.temperature = 0.003f; break;
    }
    if (g_no_penalties) sp.repetition_penalty = 1.0f, sp.frequency_penalty = sp.presence_penalty = 0.0f;
    if (i == NREQ - 1) { /* host-only: steps with it fall back; after it ends, the rest go to the device */
        sp.logprobs = 2;
        sp.max_tokens = GEN / 2;
    }
    return sp;
}

static void run(const char *ds, int32_t budget, bool async, results *res) {
    setenv("VLLM_DEVICE_SAMPLING", ds, 1);
    eng_params ep = etest_params(budget, async);
    eng_engine *e = eng_create(&ep);
    unsetenv("VLLM_DEVICE_SAMPLING");
    if (!e) fail_msg("%s", vc_err_msg());
    memset(res, 0, sizeof *res);
    etest_add_prompts(e, NREQ, 99, 5, 5, 40, req_params);
    etest_collect(e, &res->toks[0][0], res->n, GEN);
    eng_free(e);
}

static void check_same(const results *a, const results *b, const char *what) {
    for (int i = 0; i < NREQ; i++) {
        int32_t want = req_params(i).max_tokens;
        if (a->n[i] != want || b->n[i] != want) fail_msg("%s: request %d: %d / %d tokens", what, i, a->n[i], b->n[i]);
        for (int t = 0; t < want; t++)
            if (a->toks[i][t] != b->toks[i][t])
                fail_msg("%s: request %d token %d: %d vs %d", what, i, t, a->toks[i][t], b->toks[i][t]);
    }
}

static void test_device_equals_host(void **st) {
    (void)st;
    static results host, dev, dev_async;
    int32_t budgets[] = {512, 24};
    for (int b = 0; b < 2; b++) {
        run("0", budgets[b], false, &host);
        run("1", budgets[b], false, &dev);
        run("1", budgets[b], true, &dev_async);
        check_same(&host, &dev, budgets[b] == 512 ? "device sampling, budget 512" : "device sampling, budget 24");
        check_same(&host, &dev_async, "device sampling, async");
        print_message("budget %d: host == device == device async over %d requests x %d tokens\n", budgets[b], NREQ,
                      GEN);
    }
    g_no_penalties = true;
    run("0", 512, false, &host);
    run("1", 512, false, &dev);
    g_no_penalties = false;
    check_same(&host, &dev, "device sampling, no penalties");
    /* sampling varied the tokens: not every request greedy-identical */
    int differ = 0;
    for (int i = 2; i < NREQ; i++) differ += memcmp(host.toks[i], host.toks[0], sizeof host.toks[0]) != 0;
    assert_true(differ > 0);
}

static void test_bad_env(void **st) {
    (void)st;
    setenv("VLLM_DEVICE_SAMPLING", "maybe", 1);
    eng_params ep = eng_params_default();
    ep.model = etest_model;
    ep.n_threads = 1;
    ep.kv_cache_memory = (size_t)8 << 20;
    ep.max_model_len = 64;
    eng_engine *e = eng_create(&ep);
    unsetenv("VLLM_DEVICE_SAMPLING");
    assert_null(e);
    assert_non_null(strstr(vc_err_msg(), "VLLM_DEVICE_SAMPLING"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_equals_host),
        cmocka_unit_test(test_bad_env),
    };
    return cmocka_run_group_tests(tests, make_model, rm_model);
}
