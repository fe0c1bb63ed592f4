/* Async scheduling gate (issue 4): the engine with async_scheduling gives
 * token-identical output to the synchronous engine on the 16-request
 * batch-invariance set — greedy and seeded sampling (with penalties,
 * logprobs and prompt logprobs), prefix caching on and off, small
 * chunked-prefill budgets, forced preemption (tiny KV budget) — while
 * requests finish by max_tokens, EOS, stop token ids (with min_tokens),
 * stop strings, and aborts mid-generation; every KV block is free at the
 * end. Also: request timestamps are ordered, and n > 1 fan-out (ids,
 * seeds, abort of the parent) in both modes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "engine/engine.h"

#define FIXTURE VLLM_SOURCE_DIR "/tests/fixtures/models/tiny-llama"
#define TEXT_GGUF VLLM_SHARED_DIR "/models/llama-2-tiny-random-gguf/llama-2-tiny-random.gguf"
#define NREQ 16
#define GEN 24
#define ABORT_AT 3 /* requests i % 4 == 1 are aborted once they have this many tokens */

static char g_model[200]; /* copy of the fixture with a 2048-token context */

static int make_model(void **st) {
    (void)st;
    snprintf(g_model, sizeof g_model, "/tmp/vllm-test-engine-async-%d", (int)getpid());
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
    char reason[NREQ][16];
    char text[NREQ][1024];
    int32_t lp_ids[NREQ][GEN][4], lp_rank[NREQ][GEN];
    float lp_vals[NREQ][GEN][4];
    int32_t n_lp[NREQ];
    float plp[NREQ][128 * 3];
    int32_t n_plp[NREQ];
} results;

static results g_a, g_b, g_ref;

typedef struct {
    const char *model;
    int32_t budget;
    bool caching, async;
    size_t kv;
} cfg_t;

static eng_params params(const cfg_t *c) {
    eng_params ep = eng_params_default();
    ep.model = c->model ? c->model : g_model;
    ep.n_threads = 2;
    ep.max_num_batched_tokens = c->budget;
    ep.max_num_seqs = c->budget < 16 ? c->budget : 16;
    ep.enable_prefix_caching = c->caching;
    ep.kv_cache_memory = c->kv ? c->kv : (size_t)64 << 20;
    ep.max_model_len = 96;
    ep.async_scheduling = c->async;
    return ep;
}

static void check_times(const eng_times *t) {
    assert_true(t->arrival > 0);
    assert_true(t->first_scheduled >= t->arrival);
    assert_true(t->finished >= t->first_scheduled);
    if (t->first_token > 0) {
        assert_true(t->first_token >= t->first_scheduled);
        assert_true(t->last_token >= t->first_token);
        assert_true(t->finished >= t->last_token);
    }
}

/* Runs the requests (texts[i] when given, else prompts) with sps[i];
 * aborts[i]: abort request i once it has ABORT_AT tokens. Checks that all
 * requests finished and every block is free at the end. */
static void run(const cfg_t *c, const prompt_t *p, const char *const *texts, const ereq_sampling *sps,
                const bool *aborts, results *res, esched_stats *stats) {
    eng_params ep = params(c);
    eng_engine *e = eng_create(&ep);
    if (!e) fail_msg("%s", vc_err_msg());
    memset(res, 0, sizeof *res);
    int64_t ids[NREQ];
    for (int i = 0; i < NREQ; i++) {
        int rc = texts ? eng_add_text(e, texts[i], &sps[i], (void *)(intptr_t)i, &ids[i])
                       : eng_add_tokens(e, p[i].ids, p[i].n, &sps[i], (void *)(intptr_t)i, &ids[i]);
        if (rc < 0) fail_msg("add %d: %s", i, vc_err_msg());
    }
    int guard = 0, finished = 0;
    while (eng_has_unfinished(e)) {
        eng_output *o;
        int32_t n;
        if (eng_step(e, &o, &n) < 0) fail_msg("step: %s", vc_err_msg());
        for (int32_t j = 0; j < n; j++) {
            int i = (int)(intptr_t)o[j].user;
            assert_int_equal(o[j].id, ids[i]);
            assert_int_equal(o[j].parent_id, ids[i]);
            assert_false(res->reason[i][0]); /* nothing after the final delta */
            for (int32_t t = 0; t < o[j].n_token_ids; t++) {
                assert_true(res->n[i] < GEN);
                res->toks[i][res->n[i]++] = o[j].token_ids[t];
            }
            if (o[j].n_lp) {
                assert_int_equal(o[j].n_token_ids, 1);
                int k = res->n_lp[i]++;
                for (int32_t q = 0; q < o[j].n_lp && q < 4; q++) {
                    res->lp_ids[i][k][q] = o[j].lp_ids[q];
                    res->lp_vals[i][k][q] = o[j].lp_vals[q];
                }
                res->lp_rank[i][k] = o[j].lp_rank;
            }
            if (o[j].n_plp) {
                assert_int_equal(res->n_plp[i], 0);
                res->n_plp[i] = o[j].n_plp;
                for (int32_t q = 0; q < o[j].n_plp * o[j].plp_stride && q < 128 * 3; q++)
                    res->plp[i][q] = o[j].plp_vals[q];
            }
            size_t tl = strlen(res->text[i]);
            assert_true(tl + o[j].text_len < sizeof res->text[i]);
            memcpy(res->text[i] + tl, o[j].text, o[j].text_len);
            res->text[i][tl + o[j].text_len] = 0;
            if (o[j].finished) {
                snprintf(res->reason[i], sizeof res->reason[i], "%s", o[j].finish_reason);
                assert_true(o[j].parent_finished);
                check_times(&o[j].times);
                finished++;
            } else if (aborts && aborts[i] && res->n[i] >= ABORT_AT) {
                assert_int_equal(eng_abort(e, ids[i]), 0);
            }
        }
        assert_true(++guard < 100000);
    }
    assert_int_equal(finished, NREQ);
    esched_stats s;
    eng_stats(e, &s);
    assert_int_equal(s.num_running, 0);
    assert_int_equal(s.num_waiting, 0);
    if (s.kv_usage != 0.0) fail_msg("KV blocks still in use at the end (usage %f)", s.kv_usage);
    if (stats) *stats = s;
    eng_free(e);
}

static void check_same(const results *a, const results *b, const char *what) {
    for (int i = 0; i < NREQ; i++) {
        if (a->n[i] != b->n[i]) fail_msg("%s: request %d produced %d vs %d tokens", what, i, b->n[i], a->n[i]);
        for (int t = 0; t < a->n[i]; t++)
            if (a->toks[i][t] != b->toks[i][t]) fail_msg("%s: request %d token %d differs", what, i, t);
        if (strcmp(a->reason[i], b->reason[i]))
            fail_msg("%s: request %d finished '%s' vs '%s'", what, i, b->reason[i], a->reason[i]);
        if (strcmp(a->text[i], b->text[i])) fail_msg("%s: request %d text differs", what, i);
        if (a->n_lp[i] != b->n_lp[i]) fail_msg("%s: request %d: %d vs %d logprobs", what, i, b->n_lp[i], a->n_lp[i]);
        if (memcmp(a->lp_ids[i], b->lp_ids[i], sizeof a->lp_ids[i]) ||
            memcmp(a->lp_rank[i], b->lp_rank[i], sizeof a->lp_rank[i]))
            fail_msg("%s: request %d logprob ids differ", what, i);
        for (int t = 0; t < a->n_lp[i]; t++)
            for (int q = 0; q < 4; q++)
                if (fabsf(a->lp_vals[i][t][q] - b->lp_vals[i][t][q]) > 1e-4f)
                    fail_msg("%s: request %d logprob %d differs", what, i, t);
        if (a->n_plp[i] != b->n_plp[i]) fail_msg("%s: request %d prompt logprobs missing", what, i);
        for (int q = 0; q < 128 * 3; q++)
            if (fabsf(a->plp[i][q] - b->plp[i][q]) > 1e-4f) fail_msg("%s: request %d prompt logprobs differ", what, i);
    }
}

/* Per-request finishing rules from a reference run (ignore_eos, GEN
 * tokens): i%4 0 max_tokens; 1 aborted; 2 EOS = its 5th token; 3 stop id =
 * its 4th token with min_tokens 2 and a shorter max_tokens. */
static void finishing_rules(const results *ref, ereq_sampling *sps, bool *aborts) {
    for (int i = 0; i < NREQ; i++) {
        aborts[i] = i % 4 == 1;
        if (i % 4 == 2) {
            sps[i].ignore_eos = false;
            sps[i].eos_token_id = ref->toks[i][4];
        } else if (i % 4 == 3) {
            sps[i].stop_token_ids[0] = ref->toks[i][3];
            sps[i].n_stop_token_ids = 1;
            sps[i].min_tokens = 2;
            sps[i].max_tokens = 6 + i % 5;
        }
    }
}

static const cfg_t k_cfgs[] = {
    {NULL, 2048, false, false, 0},
    {NULL, 2048, true, false, 0},
    {NULL, 64, true, false, 0},
    {NULL, 7, false, false, 0},
    {NULL, 32, true, false, 2 * 2 * 16 * 32 * sizeof(float) * 14}, /* tiny KV: preemption */
};
static const char *const k_names[] = {"no caching", "prefix caching", "budget 64", "budget 7", "tiny KV"};

static void gate(ereq_sampling *sps) {
    prompt_t p[NREQ];
    make_prompts(p);
    bool aborts[NREQ];
    cfg_t c0 = k_cfgs[0];
    run(&c0, p, NULL, sps, NULL, &g_ref, NULL);
    finishing_rules(&g_ref, sps, aborts);
    for (size_t k = 0; k < sizeof k_cfgs / sizeof k_cfgs[0]; k++) {
        cfg_t c = k_cfgs[k];
        esched_stats ss, sa;
        run(&c, p, NULL, sps, aborts, &g_a, &ss);
        c.async = true;
        run(&c, p, NULL, sps, aborts, &g_b, &sa);
        check_same(&g_a, &g_b, k_names[k]);
        if (c.kv) assert_true(sa.num_preemptions_total > 0);
        int stopped = 0, aborted = 0, length = 0;
        for (int i = 0; i < NREQ; i++) {
            stopped += !strcmp(g_b.reason[i], "stop");
            aborted += !strcmp(g_b.reason[i], "abort");
            length += !strcmp(g_b.reason[i], "length");
        }
        assert_int_equal(aborted, NREQ / 4);
        for (int i = 0; i < NREQ; i++)
            if (sps[i].prompt_logprobs >= 0) assert_int_equal(g_b.n_plp[i], p[i].n);
        assert_true(stopped > 0 && length > 0);
        print_message("%s: async == sync (stop %d, length %d, abort %d; preemptions %lld/%lld, "
                      "prefix hits %lld/%lld)\n",
                      k_names[k], stopped, length, aborted, (long long)ss.num_preemptions_total,
                      (long long)sa.num_preemptions_total, (long long)ss.prefix_hits_total,
                      (long long)sa.prefix_hits_total);
    }
}

static void test_async_greedy(void **st) {
    (void)st;
    ereq_sampling sps[NREQ];
    for (int i = 0; i < NREQ; i++) {
        sps[i] = ereq_sampling_default();
        sps[i].temperature = 0.0f;
        sps[i].max_tokens = GEN;
        sps[i].ignore_eos = true;
        if (i % 5 == 0) sps[i].logprobs = 3;
    }
    gate(sps);
}

static void test_async_seeded(void **st) {
    (void)st;
    ereq_sampling sps[NREQ];
    for (int i = 0; i < NREQ; i++) {
        sps[i] = ereq_sampling_default();
        sps[i].temperature = 0.9f;
        sps[i].top_p = 0.9f;
        sps[i].top_k = i % 2 ? 50 : 0;
        sps[i].seed = 1000 + (uint64_t)i;
        sps[i].has_seed = true;
        sps[i].max_tokens = GEN;
        sps[i].ignore_eos = true;
        /* penalties read the history, in-flight token included */
        if (i % 3 == 0) sps[i].repetition_penalty = 1.3f;
        if (i % 3 == 1) sps[i].presence_penalty = 0.8f;
        if (i % 3 == 2) sps[i].frequency_penalty = 0.5f;
        if (i % 5 == 0) sps[i].logprobs = 3;
        if (i % 7 == 2) sps[i].prompt_logprobs = 2;
    }
    gate(sps);
}

/* Stop strings need text: the tiny random GGUF with a Llama-2 vocabulary. */
static void test_async_stop_strings(void **st) {
    (void)st;
    if (access(TEXT_GGUF, R_OK) != 0) skip();
    static char texts[NREQ][64];
    const char *tp[NREQ];
    for (int i = 0; i < NREQ; i++) {
        snprintf(texts[i], sizeof texts[i], "Once upon a time %d there was %d", i, i * 37);
        tp[i] = texts[i];
    }
    ereq_sampling sps[NREQ];
    for (int i = 0; i < NREQ; i++) {
        sps[i] = ereq_sampling_default();
        sps[i].temperature = i % 2 ? 0.0f : 1.0f;
        sps[i].seed = (uint64_t)i;
        sps[i].has_seed = true;
        sps[i].max_tokens = GEN;
        sps[i].ignore_eos = true;
    }
    cfg_t c = {TEXT_GGUF, 64, true, false, 0};
    run(&c, NULL, tp, sps, NULL, &g_ref, NULL);
    /* a stop string from the middle of each reference text */
    static char stops[NREQ][8];
    char *stop_ptr[NREQ];
    int with_stop = 0;
    for (int i = 0; i < NREQ; i++) {
        size_t n = strlen(g_ref.text[i]);
        if (n < 8) continue;
        memcpy(stops[i], g_ref.text[i] + n / 2, 3);
        stop_ptr[i] = stops[i];
        sps[i].stop = &stop_ptr[i];
        sps[i].n_stop = 1;
        sps[i].include_stop_str_in_output = i % 3 == 0;
        with_stop++;
    }
    assert_true(with_stop >= NREQ / 2);
    bool aborts[NREQ];
    for (int i = 0; i < NREQ; i++) aborts[i] = i % 5 == 4;
    run(&c, NULL, tp, sps, aborts, &g_a, NULL);
    c.async = true;
    run(&c, NULL, tp, sps, aborts, &g_b, NULL);
    check_same(&g_a, &g_b, "stop strings");
    int stopped = 0;
    for (int i = 0; i < NREQ; i++) stopped += !strcmp(g_b.reason[i], "stop");
    assert_true(stopped >= with_stop / 2);
}

/* n > 1: children with seed + i equal single requests with those seeds;
 * outputs carry parent id and index; the parent finishes with its last
 * child; aborting the parent aborts every child and frees every block. */
static void fanout(bool async) {
    cfg_t c = {NULL, 64, true, async, 0};
    eng_params ep = params(&c);
    eng_engine *e = eng_create(&ep);
    assert_non_null(e);
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = (i * 31 + 7) % 384;
    ereq_sampling sp = ereq_sampling_default();
    sp.temperature = 1.0f;
    sp.seed = 42;
    sp.has_seed = true;
    sp.max_tokens = 10;
    sp.ignore_eos = true;
    sp.n = 3;
    int64_t pid, single[3], aborted_pid;
    assert_int_equal(eng_add_tokens(e, prompt, 40, &sp, (void *)1, &pid), 0);
    ereq_sampling one = sp;
    one.n = 1;
    for (int i = 0; i < 3; i++) {
        one.seed = 42 + (uint64_t)i;
        assert_int_equal(eng_add_tokens(e, prompt, 40, &one, (void *)(intptr_t)(10 + i), &single[i]), 0);
    }
    sp.max_tokens = 200;
    assert_int_equal(eng_add_tokens(e, prompt, 40, &sp, (void *)2, &aborted_pid), 0);
    int32_t toks[2][3][200] = {{{0}}}, n[2][3] = {{0}}, ntok_single[3] = {0}, single_toks[3][10];
    int parent_done = 0, finals[2] = {0, 0}, aborted = 0;
    bool abort_sent = false;
    while (eng_has_unfinished(e)) {
        eng_output *o;
        int32_t no;
        assert_int_equal(eng_step(e, &o, &no), 0);
        for (int32_t j = 0; j < no; j++) {
            intptr_t u = (intptr_t)o[j].user;
            if (u >= 10) {
                int i = (int)(u - 10);
                assert_int_equal(o[j].parent_id, single[i]);
                for (int32_t t = 0; t < o[j].n_token_ids; t++) single_toks[i][ntok_single[i]++] = o[j].token_ids[t];
                continue;
            }
            int w = (int)u - 1;
            assert_int_equal(o[j].parent_id, w ? aborted_pid : pid);
            assert_true(o[j].index >= 0 && o[j].index < 3);
            assert_int_equal(o[j].id, o[j].parent_id + 1 + o[j].index);
            for (int32_t t = 0; t < o[j].n_token_ids; t++) toks[w][o[j].index][n[w][o[j].index]++] = o[j].token_ids[t];
            if (o[j].finished) {
                finals[w]++;
                if (w) aborted += !strcmp(o[j].finish_reason, "abort");
                check_times(&o[j].times);
            }
            if (o[j].parent_finished) {
                assert_true(o[j].finished);
                assert_int_equal(finals[w], 3);
                parent_done++;
            }
            if (w && !abort_sent && n[1][o[j].index] >= 4) {
                assert_int_equal(eng_abort(e, aborted_pid), 0);
                abort_sent = true;
            }
        }
    }
    assert_int_equal(parent_done, 2);
    assert_int_equal(aborted, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(n[0][i], 10);
        assert_int_equal(ntok_single[i], 10);
        assert_memory_equal(toks[0][i], single_toks[i], sizeof single_toks[i]);
        assert_true(n[1][i] < 200);
        assert_memory_equal(toks[1][i], toks[0][i], (size_t)(n[1][i] < 10 ? n[1][i] : 10) * sizeof(int32_t));
    }
    assert_true(memcmp(toks[0][0], toks[0][1], sizeof single_toks[0]) != 0); /* different seeds */
    esched_stats s;
    eng_stats(e, &s);
    assert_true(s.prefix_hits_total >= 32); /* the siblings share the prompt's full blocks */
    assert_true(s.kv_usage == 0.0);
    /* bad n */
    sp.n = -1;
    assert_true(eng_add_tokens(e, prompt, 40, &sp, NULL, &pid) < 0);
    eng_free(e);
}

static void test_fanout_sync(void **st) {
    (void)st;
    fanout(false);
}

static void test_fanout_async(void **st) {
    (void)st;
    fanout(true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_async_greedy),  cmocka_unit_test(test_async_seeded),
        cmocka_unit_test(test_async_stop_strings), cmocka_unit_test(test_fanout_sync),
        cmocka_unit_test(test_fanout_async),
    };
    return cmocka_run_group_tests(tests, make_model, rm_model);
}
