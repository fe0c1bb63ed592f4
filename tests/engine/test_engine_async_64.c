/* Async scheduling at scale (issue 6's gate): 64 requests at concurrency 16
 * (max_num_seqs 16), half greedy and half seeded sampling (temperature 0.8,
 * top-k 50, top-p 0.95, penalties on every fourth), prompts of 8 .. Pmax
 * random tokens (every fifth shares a 32-token prefix with the one before,
 * so prefix caching hits), 48 new tokens each (ignore_eos): the engine with
 * async_scheduling must give the same tokens as the synchronous engine.
 *
 * The model: VLLM_TEST_ASYNC_MODEL (scripts/gpu_bench.sh points it at a
 * random Qwen3-0.6B / Llama-8B-shaped checkpoint and sets
 * VLLM_TEST_DEVICE=cuda), else the tiny Llama fixture on the CPU. Pmax is
 * 600 tokens with a model from the environment, 200 with the fixture. */
#include "engine_test_util.h"

#define FIXTURE VLLM_SOURCE_DIR "/tests/fixtures/models/tiny-llama"
#define NREQ 64
#define GEN 48
#define PMAX 600

typedef struct {
    int32_t toks[NREQ][GEN];
    int32_t n[NREQ];
} results;

static int32_t g_prompt[NREQ][PMAX], g_plen[NREQ];
static results g_sync, g_async;

static const char *model_path(void) {
    const char *m = getenv("VLLM_TEST_ASYNC_MODEL");
    return m && *m ? m : FIXTURE;
}

static void make_prompts(int32_t vocab, int32_t pmax) {
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < NREQ; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        g_plen[i] = 8 + (int32_t)((x >> 33) % (uint64_t)(pmax - 8));
        for (int j = 0; j < g_plen[i]; j++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            g_prompt[i][j] = 3 + (int32_t)((x >> 33) % (uint64_t)(vocab - 3));
        }
        if (i % 5 == 4 && g_plen[i - 1] >= 32) {
            if (g_plen[i] < 40) g_plen[i] = 40;
            memcpy(g_prompt[i], g_prompt[i - 1], 32 * sizeof(int32_t));
        }
    }
}

static ereq_sampling sampling(int i) {
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = GEN;
    sp.ignore_eos = true;
    if (i % 2 == 0) {
        sp.temperature = 0.0f;
    } else {
        sp.temperature = 0.8f;
        sp.top_k = 50;
        sp.top_p = 0.95f;
        sp.seed = 1000u + (uint64_t)i;
        sp.has_seed = true;
        if (i % 4 == 3) {
            sp.repetition_penalty = 1.1f;
            sp.presence_penalty = 0.3f;
            sp.frequency_penalty = 0.2f;
        }
    }
    return sp;
}

static void run(bool async, results *res) {
    eng_params ep = eng_params_default();
    ep.model = model_path();
    ep.n_threads = 2;
    ep.device = etest_device();
    ep.max_num_seqs = 16;
    ep.max_num_batched_tokens = 2048;
    ep.enable_prefix_caching = true;
    ep.async_scheduling = async;
    if (ep.device == RT_DEV_CPU) ep.kv_cache_memory = (size_t)64 << 20;
    eng_engine *e = eng_create(&ep);
    if (!e) fail_msg("%s: %s", ep.model, vc_err_msg());
    memset(res, 0, sizeof *res);
    if (!g_plen[0]) { /* the prompts, from the first engine's vocab and context */
        int32_t vocab = (int32_t)eng_model_config(e)->vocab, ctx = eng_max_model_len(e);
        int32_t pmax = getenv("VLLM_TEST_ASYNC_MODEL") && *getenv("VLLM_TEST_ASYNC_MODEL") ? PMAX : 200;
        if (pmax > ctx - GEN) pmax = ctx - GEN;
        assert_true(pmax > 48 && vocab > 16);
        make_prompts(vocab, pmax);
    }
    for (int i = 0; i < NREQ; i++) {
        ereq_sampling sp = sampling(i);
        int64_t id;
        if (eng_add_tokens(e, g_prompt[i], g_plen[i], &sp, (void *)(intptr_t)i, &id) < 0)
            fail_msg("add %d: %s", i, vc_err_msg());
    }
    int finished = 0;
    while (eng_has_unfinished(e)) {
        eng_output *o;
        int32_t n;
        if (eng_step(e, &o, &n) < 0) fail_msg("step: %s", vc_err_msg());
        for (int32_t j = 0; j < n; j++) {
            int i = (int)(intptr_t)o[j].user;
            for (int32_t t = 0; t < o[j].n_token_ids; t++) {
                assert_true(res->n[i] < GEN);
                res->toks[i][res->n[i]++] = o[j].token_ids[t];
            }
            if (o[j].finished) {
                assert_string_equal(o[j].finish_reason, "length");
                finished++;
            }
        }
    }
    assert_int_equal(finished, NREQ);
    esched_stats s;
    eng_stats(e, &s);
    if (s.kv_usage != 0.0) fail_msg("KV blocks still in use at the end (usage %f)", s.kv_usage);
    print_message("%s: prefix hits %lld, preemptions %lld\n", async ? "async" : "sync",
                  (long long)s.prefix_hits_total, (long long)s.num_preemptions_total);
    eng_free(e);
}

static void test_async_64_at_16(void **st) {
    (void)st;
    run(false, &g_sync);
    run(true, &g_async);
    int greedy_same = 0, sampled_same = 0;
    for (int i = 0; i < NREQ; i++) {
        assert_int_equal(g_sync.n[i], GEN);
        assert_int_equal(g_async.n[i], GEN);
        for (int t = 0; t < GEN; t++)
            if (g_sync.toks[i][t] != g_async.toks[i][t])
                fail_msg("request %d (%s) token %d: sync %d, async %d", i, i % 2 ? "sampled" : "greedy", t,
                         g_sync.toks[i][t], g_async.toks[i][t]);
        if (i % 2) sampled_same++;
        else greedy_same++;
    }
    print_message("async == sync: %d greedy + %d sampled requests x %d tokens (%s)\n", greedy_same, sampled_same,
                  GEN, model_path());
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_async_64_at_16)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
