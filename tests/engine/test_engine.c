/* Engine gates (issue 4) on the tiny-llama HF fixture:
 *  - batch invariance: 16 requests run alone and together give identical
 *    greedy tokens, with prefix caching on and off, at several
 *    chunked-prefill budgets, and under forced preemption (tiny KV budget);
 *  - seeded sampling is reproducible across batch compositions;
 *  - a request sharing a 1,000-token prefix with an earlier one computes only
 *    its new tokens (prefix-cache counters) and gives identical output;
 *  - bad input is refused with a clear error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include <math.h>

#include "base/err.h"
#include "engine/engine.h"

#define FIXTURE VLLM_SOURCE_DIR "/tests/fixtures/models/tiny-llama"
#define NREQ 16
#define GEN 20

static char g_model[200]; /* copy of the fixture with a 2048-token context */

static int make_model(void **st) {
    (void)st;
    snprintf(g_model, sizeof g_model, "/tmp/vllm-test-engine-%d", (int)getpid());
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "rm -rf %s && mkdir -p %s && cp %s/model.safetensors %s/ && "
             "sed 's/\"max_position_embeddings\": *[0-9]*/\"max_position_embeddings\": 2048/' %s/config.json > "
             "%s/config.json",
             g_model, g_model, FIXTURE, g_model, FIXTURE, g_model);
    return system(cmd) == 0 ? 0 : -1;
}

static int rm_model(void **st) {
    (void)st;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_model);
    return system(cmd) == 0 ? 0 : -1;
}

typedef struct {
    int32_t ids[128];
    int32_t n;
} prompt_t;

static void make_prompts(prompt_t *p) {
    uint64_t x = 12345;
    for (int i = 0; i < NREQ; i++) {
        p[i].n = 1 + (i * 7) % 60;
        for (int j = 0; j < p[i].n; j++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            p[i].ids[j] = (int32_t)((x >> 33) % 384);
        }
        if (i % 4 == 3 && p[i - 1].n >= 34) { /* shares two blocks with the previous prompt */
            if (p[i].n < 40) p[i].n = 40;
            memcpy(p[i].ids, p[i - 1].ids, 34 * sizeof(int32_t));
        }
    }
}

typedef struct {
    int32_t toks[NREQ][GEN];
    int32_t n[NREQ];
} results;

static void run(const eng_params *ep, const prompt_t *p, const int *which, int nw, const ereq_sampling *sp,
                results *res, esched_stats *stats) {
    eng_engine *e = eng_create(ep);
    if (!e) fail_msg("%s", vc_err_msg());
    for (int k = 0; k < nw; k++) {
        int i = which[k];
        int64_t id;
        res->n[i] = 0;
        if (eng_add_tokens(e, p[i].ids, p[i].n, sp, (void *)(intptr_t)i, &id) < 0) fail_msg("%s", vc_err_msg());
    }
    int guard = 0;
    while (eng_has_unfinished(e)) {
        eng_output *o;
        int32_t n;
        if (eng_step(e, &o, &n) < 0) fail_msg("step: %s", vc_err_msg());
        for (int32_t j = 0; j < n; j++) {
            int i = (int)(intptr_t)o[j].user;
            for (int32_t t = 0; t < o[j].n_token_ids; t++) res->toks[i][res->n[i]++] = o[j].token_ids[t];
        }
        assert_true(++guard < 100000);
    }
    if (stats) eng_stats(e, stats);
    eng_free(e);
}

static eng_params params(int32_t budget, bool caching, size_t kv_bytes) {
    eng_params ep = eng_params_default();
    ep.model = g_model;
    ep.n_threads = 2;
    ep.max_num_batched_tokens = budget;
    ep.max_num_seqs = budget < 16 ? budget : 16;
    ep.enable_prefix_caching = caching;
    ep.kv_cache_memory = kv_bytes;
    ep.max_model_len = 256;
    return ep;
}

static void check_same(const results *a, const results *b, const char *what) {
    for (int i = 0; i < NREQ; i++) {
        if (a->n[i] != b->n[i]) fail_msg("%s: request %d produced %d vs %d tokens", what, i, b->n[i], a->n[i]);
        for (int t = 0; t < a->n[i]; t++)
            if (a->toks[i][t] != b->toks[i][t]) fail_msg("%s: request %d token %d differs", what, i, t);
    }
}

static void test_batch_invariance(void **st) {
    (void)st;
    prompt_t p[NREQ];
    make_prompts(p);
    ereq_sampling sp = ereq_sampling_default();
    sp.temperature = 0.0f;
    sp.max_tokens = GEN;
    sp.ignore_eos = true;
    results alone, together;
    eng_params ep = params(2048, false, 64 << 20);
    for (int i = 0; i < NREQ; i++) run(&ep, p, &i, 1, &sp, &alone, NULL);
    int all[NREQ];
    for (int i = 0; i < NREQ; i++) all[i] = i;
    struct {
        int32_t budget;
        bool caching;
        size_t kv;
        const char *what;
    } cfgs[] = {
        {2048, false, 64 << 20, "together, no caching"},
        {2048, true, 64 << 20, "together, prefix caching"},
        {64, true, 64 << 20, "budget 64"},
        {7, false, 64 << 20, "budget 7"},
        {32, true, 0, "tiny KV (preemption)"},
    };
    /* tiny KV: blocks for ~2 full-length sequences (256 tokens each). */
    size_t per_block = 2 * 2 * 16 * 32 * sizeof(float); /* layers * (k,v) * B * kvh*hd */
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        size_t kv = cfgs[c].kv ? cfgs[c].kv : per_block * 40;
        eng_params e2 = params(cfgs[c].budget, cfgs[c].caching, kv);
        esched_stats stats;
        run(&e2, p, all, NREQ, &sp, &together, &stats);
        check_same(&alone, &together, cfgs[c].what);
        if (!cfgs[c].kv) assert_true(stats.num_preemptions_total > 0);
        print_message("%s: identical (preemptions %lld, prefix hits %lld tokens)\n", cfgs[c].what,
                      (long long)stats.num_preemptions_total, (long long)stats.prefix_hits_total);
    }
}

/* Tensor parallelism through the engine: 2 ranks (CPU threads) give the
 * same greedy tokens as 1 on the 16 requests, sync and async-scheduled,
 * with chunked prefill and prefix caching (f32 weights: the all-reduce
 * order moves only last bits, far from every greedy margin here). */
static void test_tensor_parallel(void **st) {
    (void)st;
    prompt_t p[NREQ];
    make_prompts(p);
    ereq_sampling sp = ereq_sampling_default();
    sp.temperature = 0.0f;
    sp.max_tokens = GEN;
    sp.ignore_eos = true;
    int all[NREQ];
    for (int i = 0; i < NREQ; i++) all[i] = i;
    results one, two;
    eng_params ep = params(64, true, 64 << 20);
    run(&ep, p, all, NREQ, &sp, &one, NULL);
    ep.tensor_parallel_size = 2;
    run(&ep, p, all, NREQ, &sp, &two, NULL);
    check_same(&one, &two, "tp=2");
    ep.async_scheduling = true;
    run(&ep, p, all, NREQ, &sp, &two, NULL);
    check_same(&one, &two, "tp=2 async");
    ep.tensor_parallel_size = 3; /* 4 heads, 2 KV heads: refused */
    assert_null(eng_create(&ep));
    assert_non_null(strstr(vc_err_msg(), "must divide"));
}

static void test_seeded_reproducible(void **st) {
    (void)st;
    prompt_t p[NREQ];
    make_prompts(p);
    ereq_sampling sp = ereq_sampling_default();
    sp.temperature = 1.0f;
    sp.top_p = 0.9f;
    sp.max_tokens = GEN;
    sp.ignore_eos = true;
    sp.seed = 77;
    sp.has_seed = true;
    results alone, together, again;
    eng_params ep = params(2048, true, 64 << 20);
    for (int i = 0; i < NREQ; i++) run(&ep, p, &i, 1, &sp, &alone, NULL);
    int all[NREQ], rev[NREQ];
    for (int i = 0; i < NREQ; i++) {
        all[i] = i;
        rev[i] = NREQ - 1 - i;
    }
    run(&ep, p, all, NREQ, &sp, &together, NULL);
    check_same(&alone, &together, "seeded, together");
    eng_params small = params(16, false, 64 << 20);
    run(&small, p, rev, NREQ, &sp, &again, NULL);
    check_same(&alone, &again, "seeded, reversed order, budget 16");
}

static void test_shared_prefix(void **st) {
    (void)st;
    static int32_t a[1010], b[1010];
    uint64_t x = 99;
    for (int i = 0; i < 1010; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = b[i] = (int32_t)((x >> 33) % 384);
    }
    for (int i = 1000; i < 1010; i++) b[i] = (a[i] + 1) % 384;
    ereq_sampling sp = ereq_sampling_default();
    sp.temperature = 0.0f;
    sp.max_tokens = 8;
    sp.ignore_eos = true;
    eng_params ep = params(2048, true, 256 << 20);
    ep.max_model_len = 2048;
    prompt_t dummy[1];
    (void)dummy;
    eng_engine *e = eng_create(&ep);
    assert_non_null(e);
    int32_t out[2][8];
    int32_t no[2] = {0, 0};
    for (int r = 0; r < 2; r++) {
        int64_t id;
        assert_int_equal(eng_add_tokens(e, r ? b : a, 1010, &sp, (void *)(intptr_t)r, &id), 0);
        while (eng_has_unfinished(e)) {
            eng_output *o;
            int32_t n;
            assert_int_equal(eng_step(e, &o, &n), 0);
            for (int32_t j = 0; j < n; j++)
                for (int32_t t = 0; t < o[j].n_token_ids; t++) out[r][no[r]++] = o[j].token_ids[t];
        }
    }
    esched_stats stats;
    eng_stats(e, &stats);
    /* second request: 1000 shared tokens = 62 full blocks of 16 (992 tokens) hit */
    assert_int_equal(stats.prefix_hits_total, 992);
    eng_free(e);
    /* and its output equals a run without the cache */
    ep.enable_prefix_caching = false;
    e = eng_create(&ep);
    int64_t id;
    assert_int_equal(eng_add_tokens(e, b, 1010, &sp, NULL, &id), 0);
    int32_t ref[8], nr = 0;
    while (eng_has_unfinished(e)) {
        eng_output *o;
        int32_t n;
        assert_int_equal(eng_step(e, &o, &n), 0);
        for (int32_t j = 0; j < n; j++)
            for (int32_t t = 0; t < o[j].n_token_ids; t++) ref[nr++] = o[j].token_ids[t];
    }
    assert_int_equal(nr, 8);
    assert_memory_equal(ref, out[1], sizeof ref);
    eng_free(e);
}

static void test_bad_input(void **st) {
    (void)st;
    eng_params ep = params(256, true, 16 << 20);
    eng_engine *e = eng_create(&ep);
    assert_non_null(e);
    ereq_sampling sp = ereq_sampling_default();
    int64_t id;
    int32_t big[300];
    for (int i = 0; i < 300; i++) big[i] = 1;
    assert_true(eng_add_tokens(e, big, 0, &sp, NULL, &id) < 0);   /* empty */
    assert_true(eng_add_tokens(e, big, 300, &sp, NULL, &id) < 0); /* > max_model_len */
    int32_t bad = 384;
    assert_true(eng_add_tokens(e, &bad, 1, &sp, NULL, &id) < 0);  /* id out of vocab */
    sp.max_tokens = 0;
    assert_true(eng_add_tokens(e, big, 3, &sp, NULL, &id) < 0);   /* max_tokens <= 0 */
    sp = ereq_sampling_default();
    sp.top_p = 0.0f;
    assert_true(eng_add_tokens(e, big, 3, &sp, NULL, &id) < 0);  /* bad sampling parameters */
    assert_true(strstr(vc_err_msg(), "top_p") != NULL);
    eng_free(e);
    ep.model = "/nonexistent";
    assert_null(eng_create(&ep));
}

static void test_logprobs(void **st) {
    (void)st;
    eng_params ep = params(256, true, 16 << 20);
    eng_engine *e = eng_create(&ep);
    assert_non_null(e);
    ereq_sampling sp = ereq_sampling_default();
    sp.temperature = 0.0f;
    sp.max_tokens = 5;
    sp.ignore_eos = true;
    sp.logprobs = 3;
    int32_t p[4] = {5, 6, 7, 8};
    int64_t id;
    assert_int_equal(eng_add_tokens(e, p, 4, &sp, NULL, &id), 0);
    int got = 0;
    while (eng_has_unfinished(e)) {
        eng_output *o;
        int32_t n;
        assert_int_equal(eng_step(e, &o, &n), 0);
        for (int32_t j = 0; j < n; j++) {
            if (o[j].n_token_ids == 0) continue;
            assert_int_equal(o[j].n_lp, 4);
            assert_int_equal(o[j].lp_ids[0], o[j].token_ids[0]);
            assert_int_equal(o[j].lp_rank, 1); /* greedy picks the most likely */
            assert_int_equal(o[j].lp_ids[1], o[j].token_ids[0]);
            for (int k = 1; k < 4; k++) {
                assert_true(o[j].lp_vals[k] <= 0.0f);
                if (k > 1) assert_true(o[j].lp_vals[k] <= o[j].lp_vals[k - 1]);
            }
            got++;
        }
    }
    assert_int_equal(got, 5);
    eng_free(e);
}

static int gen(eng_engine *e, const ereq_sampling *sp, int32_t *out) {
    int32_t p[4] = {5, 6, 7, 8};
    int64_t id;
    if (eng_add_tokens(e, p, 4, sp, NULL, &id) < 0) return -1;
    int n_out = 0;
    while (eng_has_unfinished(e)) {
        eng_output *o;
        int32_t n;
        assert_int_equal(eng_step(e, &o, &n), 0);
        for (int32_t j = 0; j < n; j++)
            for (int32_t t = 0; t < o[j].n_token_ids; t++) out[n_out++] = o[j].token_ids[t];
    }
    return n_out;
}

static void test_token_controls(void **st) {
    (void)st;
    eng_params ep = params(256, true, 16 << 20);
    eng_engine *e = eng_create(&ep);
    assert_non_null(e);
    int32_t out[32];
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = 12;
    sp.ignore_eos = true;
    sp.seed = 3;
    sp.has_seed = true;
    int32_t allowed[2] = {7, 9};
    sp.allowed_token_ids = allowed;
    sp.n_allowed_token_ids = 2;
    assert_int_equal(gen(e, &sp, out), 12);
    for (int i = 0; i < 12; i++) assert_true(out[i] == 7 || out[i] == 9);
    sp.allowed_token_ids = NULL;
    sp.n_allowed_token_ids = 0;
    int32_t bias_id = 42;
    float bias_val = 100.0f;
    sp.logit_bias_ids = &bias_id;
    sp.logit_bias_vals = &bias_val;
    sp.n_logit_bias = 1;
    assert_int_equal(gen(e, &sp, out), 12);
    for (int i = 0; i < 12; i++) assert_int_equal(out[i], 42);
    /* ban 42 as a bad word while it is biased: never produced */
    int32_t bad_len = 1;
    sp.bad_words_ids = &bias_id;
    sp.bad_words_lens = &bad_len;
    sp.n_bad_words = 1;
    assert_int_equal(gen(e, &sp, out), 12);
    for (int i = 0; i < 12; i++) assert_int_not_equal(out[i], 42);
    /* an out-of-vocab allowed id is refused */
    int32_t bad_allowed = 100000;
    sp = ereq_sampling_default();
    sp.allowed_token_ids = &bad_allowed;
    sp.n_allowed_token_ids = 1;
    assert_true(gen(e, &sp, out) < 0);
    eng_free(e);
}

/* prompt_logprobs against transformers' prefill logits (golden.json top5):
 * the top-k ids at each prompt position are HF's, and logprob differences
 * equal logit differences. */
static void test_prompt_logprobs(void **st) {
    (void)st;
    char path[600];
    snprintf(path, sizeof path, "%s/golden.json", FIXTURE);
    json_t *g = json_load_file(path, 0, NULL);
    assert_non_null(g);
    json_t *cs = json_array_get(json_object_get(g, "cases"), 3); /* the 40-token prompt */
    json_t *pr = json_array_get(json_object_get(g, "prompts"), (size_t)json_integer_value(json_object_get(cs, "prompt")));
    json_t *top5 = json_object_get(cs, "top5");
    int32_t n = (int32_t)json_array_size(pr), ids[64];
    for (int32_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(pr, (size_t)i));
    eng_params ep = params(16, true, 16 << 20); /* chunked: positions arrive over several steps */
    eng_engine *e = eng_create(&ep);
    assert_non_null(e);
    ereq_sampling sp = ereq_sampling_default();
    sp.temperature = 0.0f;
    sp.max_tokens = 2;
    sp.prompt_logprobs = 4;
    int64_t id;
    assert_int_equal(eng_add_tokens(e, ids, n, &sp, NULL, &id), 0);
    int seen = 0;
    while (eng_has_unfinished(e)) {
        eng_output *o;
        int32_t no;
        assert_int_equal(eng_step(e, &o, &no), 0);
        for (int32_t j = 0; j < no; j++) {
            if (!o[j].n_plp) continue;
            seen++;
            assert_int_equal(o[j].n_plp, n);
            assert_int_equal(o[j].plp_stride, 5);
            assert_int_equal(o[j].plp_ranks[0], 0);
            for (int32_t p = 1; p < n; p++) {
                const int32_t *pi = o[j].plp_ids + p * 5;
                const float *pv = o[j].plp_vals + p * 5;
                assert_int_equal(pi[0], ids[p]);
                assert_true(o[j].plp_ranks[p] >= 1);
                json_t *hf = json_array_get(top5, (size_t)(p - 1));
                double l0 = json_number_value(json_array_get(json_array_get(hf, 0), 1));
                for (int k = 0; k < 4; k++) {
                    json_t *pair = json_array_get(hf, (size_t)k);
                    assert_int_equal(pi[1 + k], (int32_t)json_integer_value(json_array_get(pair, 0)));
                    double want = json_number_value(json_array_get(pair, 1)) - l0, got = pv[1 + k] - pv[1];
                    if (fabs(got - want) > 1e-3) fail_msg("pos %d top %d: %f vs %f", p, k, got, want);
                }
            }
        }
    }
    assert_int_equal(seen, 1);
    eng_free(e);
    json_decref(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_seeded_reproducible),
        cmocka_unit_test(test_tensor_parallel),
        cmocka_unit_test(test_shared_prefix),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_token_controls),
        cmocka_unit_test(test_prompt_logprobs),
    };
    return cmocka_run_group_tests(tests, make_model, rm_model);
}
