/* The async device mirror through the engine (VLLM_ASYNC_DEVICE_IDS,
 * runner_queue.c): 13 seeded requests with mixed sampling parameters
 * (greedy, greedy with penalties, temperature, top_k, top_p, min_p,
 * penalties, one with logprobs that stops early: its steps sample on the
 * host, so argmax, device-sampled and host-sampled steps follow each other)
 * give the same tokens as the synchronous engine
 *   - async with the mirror (placeholders spliced on the device), device
 *     sampling on and off (off: every step host-sampled, its ids put back
 *     on the device for the next step's splice),
 *   - async with VLLM_ASYNC_DEVICE_IDS=0 (the host fill),
 * at chunked-prefill budgets 512 and 24; a bad VLLM_ASYNC_DEVICE_IDS fails
 * engine creation with a message. VLLM_TEST_DEVICE=cuda runs it on the GPU
 * (device-sampled rows then compare as in test_engine_devsample.c). */
#include "engine_test_util.h"

#define NREQ 13
#define GEN 16

static int make_model(void **st) {
    (void)st;
    return etest_copy_fixture("mirror");
}

static int rm_model(void **st) {
    (void)st;
    return etest_rm_fixture();
}

typedef struct {
    int32_t toks[NREQ][GEN];
    int32_t n[NREQ];
} results;

static ereq_sampling req_params(int i) {
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = GEN;
    sp.seed = 500 + (uint64_t)i;
    sp.has_seed = true;
    switch (i % 6) {
    case 0: sp.temperature = 0.0f; break;
    case 1: sp.temperature = 0.0f; sp.repetition_penalty = 1.3f; sp.frequency_penalty = 0.7f; break;
    case 2: sp.temperature = 0.9f; sp.top_k = 12; break;
    case 3: sp.temperature = 1.0f; sp.top_p = 0.85f; sp.presence_penalty = 1.2f; break;
    case 4: sp.temperature = 1.2f; sp.min_p = 0.05f; sp.repetition_penalty = 1.15f; break;
    default: sp.temperature = 0.0f; sp.presence_penalty = 2.0f; break;
    }
    if (i == NREQ - 1) { /* host-sampled steps while it runs */
        sp.logprobs = 1;
        sp.max_tokens = GEN / 2;
    }
    return sp;
}

/* mirror: VLLM_ASYNC_DEVICE_IDS ("0", "1"); ds: VLLM_DEVICE_SAMPLING */
static void run(bool async, const char *mirror, const char *ds, int32_t budget, results *res) {
    setenv("VLLM_ASYNC_DEVICE_IDS", mirror, 1);
    setenv("VLLM_DEVICE_SAMPLING", ds, 1);
    eng_params ep = etest_params(budget, async);
    eng_engine *e = eng_create(&ep);
    unsetenv("VLLM_ASYNC_DEVICE_IDS");
    unsetenv("VLLM_DEVICE_SAMPLING");
    if (!e) fail_msg("%s", vc_err_msg());
    memset(res, 0, sizeof *res);
    etest_add_prompts(e, NREQ, 7, 3, 7, 41, req_params);
    etest_collect(e, &res->toks[0][0], res->n, GEN);
    eng_free(e);
}

static void check_same(const results *a, const results *b, const char *what, int32_t budget) {
    for (int i = 0; i < NREQ; i++) {
        int32_t want = req_params(i).max_tokens;
        if (a->n[i] != want || b->n[i] != want)
            fail_msg("%s (budget %d): request %d: %d / %d tokens", what, budget, i, a->n[i], b->n[i]);
        for (int t = 0; t < want; t++)
            if (a->toks[i][t] != b->toks[i][t])
                fail_msg("%s (budget %d): request %d token %d: %d vs %d", what, budget, i, t, a->toks[i][t],
                         b->toks[i][t]);
    }
}

static void test_async_equals_sync(void **st) {
    (void)st;
    static results sync_host, sync_dev, r;
    int32_t budgets[] = {512, 24};
    for (int b = 0; b < 2; b++) {
        int32_t B = budgets[b];
        run(false, "1", "0", B, &sync_host);
        run(false, "1", "1", B, &sync_dev);
        check_same(&sync_host, &sync_dev, "sync: device sampling", B);
        run(true, "1", "1", B, &r);
        check_same(&sync_dev, &r, "async, mirror, device sampling", B);
        run(true, "1", "0", B, &r);
        check_same(&sync_host, &r, "async, mirror, host sampling", B);
        run(true, "0", "1", B, &r);
        check_same(&sync_dev, &r, "async, host fill, device sampling", B);
        run(true, "0", "0", B, &r);
        check_same(&sync_host, &r, "async, host fill, host sampling", B);
        print_message("budget %d: sync == async (mirror / host fill, device / host sampling)\n", B);
    }
    /* the requests did not all decode alike */
    int differ = 0;
    for (int i = 1; i < NREQ; i++)
        differ += memcmp(sync_host.toks[i], sync_host.toks[0], sizeof sync_host.toks[0]) != 0;
    assert_true(differ > 0);
}

static void test_bad_env(void **st) {
    (void)st;
    setenv("VLLM_ASYNC_DEVICE_IDS", "yes", 1);
    eng_params ep = eng_params_default();
    ep.model = etest_model;
    ep.n_threads = 1;
    ep.kv_cache_memory = (size_t)8 << 20;
    ep.max_model_len = 64;
    eng_engine *e = eng_create(&ep);
    unsetenv("VLLM_ASYNC_DEVICE_IDS");
    assert_null(e);
    assert_non_null(strstr(vc_err_msg(), "VLLM_ASYNC_DEVICE_IDS"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_async_equals_sync),
        cmocka_unit_test(test_bad_env),
    };
    return cmocka_run_group_tests(tests, make_model, rm_model);
}
