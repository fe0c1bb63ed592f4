/* Tensor parallelism in the model layer, on the CPU backend (ranks are
 * threads, collectives over shared memory): TP=2 against TP=1 and against
 * the transformers goldens of the tiny fixtures (tests/fixtures/models),
 * (tiny Mistral's single KV head replicated at TP=2 and 4), and against
 * TP=1 on SmolLM2 with TP=3 (Q4_1 weights split by rows and
 * by whole column blocks) when the default model is present.
 *
 * Checks: prompt logits at every position within 1e-4 relative of TP=1
 * (the all-reduce sums partial dot products in another order, so bits may
 * differ), 32 greedy tokens identical to TP=1 and to HF's, and a clear
 * error when the TP size does not divide the heads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "model/model.h"
#include "model/model_impl.h" /* mdl_sp_step_count */

#define FIXTURES VLLM_SOURCE_DIR "/tests/fixtures/models"
#define MAX_TP 4

static bool g_upcast; /* f32 weights: exact arithmetic, tight bound */

typedef struct {
    rt_backend *bes[MAX_TP];
    mdl_model *m;
    int tp;
} tp_model;

static int tp_open(tp_model *t, const char *path, int tp) {
    memset(t, 0, sizeof *t);
    t->tp = tp;
    rt_backend_params bp = rt_backend_params_default();
    bp.n_threads = 1;
    for (int r = 0; r < tp; r++) t->bes[r] = rt_backend_create(RT_DEV_CPU, &bp);
    mdl_params mp = mdl_params_default();
    mp.max_batch = 16; /* chunked prefill on the longer prompts */
    mp.tp_size = tp;
    mp.tp_backends = t->bes;
    mp.upcast_weights = g_upcast;
    t->m = mdl_load(path, t->bes[0], &mp);
    return t->m ? 0 : -1;
}

static void tp_close(tp_model *t) {
    mdl_free(t->m);
    for (int r = 0; r < t->tp; r++) rt_backend_free(t->bes[r]);
}

static int argmax(const float *x, int64_t n) {
    int b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int)i;
    return b;
}

/* Prompt logits [n, V] and `ng` greedy ids. */
static void run(mdl_model *m, const int32_t *ids, int64_t n, int ng, float *lg, int32_t *out) {
    int64_t V = mdl_get_config(m)->vocab;
    mdl_seq *s = mdl_seq_create(m, n + ng + 1);
    assert_non_null(s);
    if (mdl_forward(m, s, ids, n, lg, true) < 0) fail_msg("forward: %s", vc_err_msg());
    float *step = malloc((size_t)V * sizeof *step);
    int32_t next = argmax(lg + (n - 1) * V, V);
    for (int i = 0; i < ng; i++) {
        out[i] = next;
        if (mdl_forward(m, s, &next, 1, step, false) < 0) fail_msg("decode: %s", vc_err_msg());
        next = argmax(step, V);
    }
    free(step);
    mdl_seq_free(s);
}

/* bound: max relative logit difference to tp=1 allowed; mean_bound: mean
 * absolute difference. */
static void compare(const char *path, int tp, const json_t *prompts, const json_t *cases, int ng, double bound,
                    double mean_bound) {
    tp_model a, b;
    if (tp_open(&a, path, 1) < 0) fail_msg("load %s: %s", path, vc_err_msg());
    if (tp_open(&b, path, tp) < 0) fail_msg("load %s tp=%d: %s", path, tp, vc_err_msg());
    int64_t V = mdl_get_config(a.m)->vocab;
    double worst = 0, sum = 0;
    int64_t cnt = 0;
    for (size_t pi = 0; pi < json_array_size(prompts); pi++) {
        const json_t *pr = json_array_get(prompts, pi);
        int64_t n = (int64_t)json_array_size(pr);
        int32_t *ids = malloc((size_t)n * sizeof *ids);
        for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(pr, (size_t)i));
        float *la = malloc((size_t)(n * V) * sizeof *la), *lb = malloc((size_t)(n * V) * sizeof *lb);
        int32_t ga[64], gb[64];
        run(a.m, ids, n, ng, la, ga);
        run(b.m, ids, n, ng, lb, gb);
        for (int64_t i = 0; i < n * V; i++) {
            double e = fabs((double)la[i] - lb[i]) / fmax(1.0, fabs(la[i]));
            if (e > worst) worst = e;
            sum += fabs((double)la[i] - lb[i]);
        }
        cnt += n * V;
        for (int i = 0; i < ng; i++)
            if (ga[i] != gb[i]) fail_msg("%s tp=%d prompt %zu: greedy token %d: %d vs tp=1 %d", path, tp, pi, i, gb[i], ga[i]);
        if (cases) { /* the HF golden of this prompt */
            const json_t *cs = json_array_get(cases, pi);
            const json_t *gr = json_object_get(cs, "greedy");
            for (int i = 0; i < ng && i < (int)json_array_size(gr); i++)
                assert_int_equal(gb[i], json_integer_value(json_array_get(gr, (size_t)i)));
        }
        free(ids);
        free(la);
        free(lb);
    }
    printf("  %s tp=%d%s: logits vs tp=1: worst relative difference %.2e, mean absolute %.2e\n", path, tp,
           g_upcast ? " (f32 weights)" : "", worst, sum / (double)cnt);
    if (worst > bound || sum / (double)cnt > mean_bound)
        fail_msg("%s tp=%d: logits differ from tp=1 by %.2e relative (mean abs %.2e)", path, tp, worst,
                 sum / (double)cnt);
    tp_close(&a);
    tp_close(&b);
}

/* The fixture directory of `name` into dir and its golden.json (the
 * caller json_decref's it). */
static json_t *load_golden(const char *name, char *dir, size_t dir_size) {
    char path[1200];
    snprintf(dir, dir_size, "%s/%s", FIXTURES, name);
    snprintf(path, sizeof path, "%s/golden.json", dir);
    json_error_t jerr;
    json_t *g = json_load_file(path, 0, &jerr);
    if (!g) fail_msg("%s: %s", path, jerr.text);
    return g;
}

static void fixture(const char *name, int tp) {
    char dir[1024];
    json_t *g = load_golden(name, dir, sizeof dir);
    const json_t *cases = json_object_get(g, "cases");
    /* golden cases are in prompt order, one per prompt */
    assert_int_equal(json_array_size(cases), json_array_size(json_object_get(g, "prompts")));
    compare(dir, tp, json_object_get(g, "prompts"), cases, 32, 1e-4, 1e-5);
    json_decref(g);
}

static void test_tiny_fixtures_tp2(void **st) {
    (void)st;
    fixture("tiny-llama", 2);  /* f32, llama3 rope, untied LM head split by rows */
    fixture("tiny-qwen2", 2);  /* q/k/v biases split, tied LM head */
    fixture("tiny-qwen3", 2);  /* bf16 weights, QK-norm */
    fixture("tiny-mistral", 2); /* 1 KV head, replicated on both ranks */
    fixture("tiny-mistral", 4); /* one query head per rank, all on the replicated KV head */
    fixture("tiny-gemma3", 2);  /* sandwich norms after the all-reduce, sliding window, 1 KV head replicated */
}

/* The two-half row split of a TP step (arch_llama.c: all-reduce of one half
 * overlapped with the other's GEMMs on a GPU), forced on the CPU for every
 * step of 2+ tokens: the same logits and greedy ids as TP=1 and HF (the
 * split runs the rows' ops in two calls; the CPU's start is the all-reduce
 * itself). */
static void test_split_rows_tp2(void **st) {
    (void)st;
    assert_int_equal(setenv("VLLM_TP_OVERLAP", "force", 1), 0);
    fixture("tiny-llama", 2);
    fixture("tiny-qwen2", 2);  /* biases: unfused q/k/v on the CPU, per half */
    fixture("tiny-qwen3", 2);
    fixture("tiny-mistral", 4);
    unsetenv("VLLM_TP_OVERLAP");
}

/* Last-position logits of a prefill (n_logits = 1 per chunk): under
 * sequence parallelism the logits head then gathers the wanted row from
 * the rank that holds it (mdl_logits_head_sp's gather path; all-position
 * logits take its all-gather path). */
static void compare_last(const char *name, int tp) {
    char dir[1024];
    json_t *g = load_golden(name, dir, sizeof dir);
    const json_t *prompts = json_object_get(g, "prompts");
    tp_model a, b;
    if (tp_open(&a, dir, 1) < 0 || tp_open(&b, dir, tp) < 0) fail_msg("load %s: %s", dir, vc_err_msg());
    int64_t V = mdl_get_config(a.m)->vocab;
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    for (size_t pi = 0; pi < json_array_size(prompts); pi++) {
        const json_t *pr = json_array_get(prompts, pi);
        int64_t n = (int64_t)json_array_size(pr);
        int32_t ids[64];
        assert_true(n <= 64);
        for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(pr, (size_t)i));
        mdl_seq *sa = mdl_seq_create(a.m, n + 1), *sb = mdl_seq_create(b.m, n + 1);
        assert_int_equal(mdl_forward(a.m, sa, ids, n, la, false), 0);
        if (mdl_forward(b.m, sb, ids, n, lb, false) < 0) fail_msg("forward: %s", vc_err_msg());
        for (int64_t i = 0; i < V; i++)
            if (fabs((double)la[i] - lb[i]) > 1e-4 * fmax(1.0, fabs(la[i])))
                fail_msg("%s tp=%d prompt %zu: last logit %lld: %g vs tp=1 %g", name, tp, pi, (long long)i, lb[i],
                         la[i]);
        mdl_seq_free(sa);
        mdl_seq_free(sb);
    }
    free(la);
    free(lb);
    tp_close(&a);
    tp_close(&b);
    json_decref(g);
}

/* Sequence-parallel steps (reduce-scatter, norms on the own rows,
 * all-gather; arch_llama.c llama_forward_sp), forced on the CPU for every
 * TP step of 2+ tokens: row counts that W does not divide (padded: 5 and
 * 17-token prompts, 16-token chunks at TP=4... ), unfused q/k/v with biases
 * (qwen2), both logits-head paths, and the all-gather beside the own
 * rows' GEMMs (VLLM_TP_SP_OVERLAP=1; the CPU gathers at once but the GEMMs
 * still run per row range), and the partial sums exchanged all-to-all
 * instead of reduce-scattered (VLLM_TP_SP_A2A=1). Logits and greedy ids as
 * TP=1 and HF. */
static void test_sequence_parallel(void **st) {
    (void)st;
    assert_int_equal(setenv("VLLM_TP_SP", "force", 1), 0);
    uint64_t before = mdl_sp_step_count();
    fixture("tiny-llama", 2);
    fixture("tiny-qwen2", 2);
    fixture("tiny-qwen3", 2);
    fixture("tiny-mistral", 4);
    compare_last("tiny-llama", 2);
    compare_last("tiny-mistral", 4);
    assert_int_equal(setenv("VLLM_TP_SP_OVERLAP", "1", 1), 0);
    fixture("tiny-llama", 2);
    fixture("tiny-qwen2", 2);
    compare_last("tiny-mistral", 4);
    /* the partial sums exchanged all-to-all (own rows' GEMM last), summed
     * by one ADD_RMSNORM per rank: W = 2 and 4, padded row counts */
    assert_int_equal(setenv("VLLM_TP_SP_A2A", "1", 1), 0);
    fixture("tiny-llama", 2);
    fixture("tiny-qwen3", 2);
    fixture("tiny-mistral", 4);
    compare_last("tiny-mistral", 4);
    unsetenv("VLLM_TP_SP_OVERLAP");
    fixture("tiny-qwen2", 2);
    unsetenv("VLLM_TP_SP_A2A");
    uint64_t ran = mdl_sp_step_count() - before;
    unsetenv("VLLM_TP_SP");
    print_message("  %llu sequence-parallel steps\n", (unsigned long long)ran);
    assert_true(ran >= 20);
    /* Not forced: the CPU's f32 steps keep the all-reduce. */
    before = mdl_sp_step_count();
    compare_last("tiny-llama", 2);
    assert_int_equal(mdl_sp_step_count(), before);
}

static void test_indivisible(void **st) {
    (void)st;
    tp_model t;
    assert_int_equal(tp_open(&t, FIXTURES "/tiny-llama", 3), -1); /* 4 heads, 2 KV heads */
    assert_non_null(strstr(vc_err_msg(), "must divide the heads"));
    tp_close(&t);
}

static void test_smollm2_tp3(void **st) {
    (void)st;
    const char *path = VLLM_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (access(path, R_OK) != 0) skip();
    json_t *prompts = json_array();
    json_t *p = json_array();
    for (int i = 0; i < 24; i++) json_array_append_new(p, json_integer(1 + (i * 977) % 49000));
    json_array_append_new(prompts, p);
    /* f32 weights: only the summation order differs -> tight. */
    g_upcast = true;
    compare(path, 3, prompts, NULL, 16, 1e-4, 1e-5);
    g_upcast = false;
    /* Q4_1 weights with Q8 activations: a last-bit difference of the
     * all-reduce can flip an activation's int8 rounding, and 30 layers
     * spread that to ~0.16 mean logit noise — the size of quantization
     * noise itself (measured 2026-11-29: tp=1 and tp=3 are each 0.16-0.17
     * mean abs from the f32-weight logits). Greedy tokens must agree. */
    compare(path, 3, prompts, NULL, 16, 2.0, 0.25);
    json_decref(prompts);
}

/* Gemma 3 270M (scripts/fetch_model.sh --gemma models): 4 query heads, 1 KV
 * head (replicated), vocab 262144, at TP 2 with the weights upcast to f32
 * (only the all-reduce order differs). Skipped when not fetched. */
static void test_gemma3_tp2(void **st) {
    (void)st;
    const char *path = VLLM_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";
    if (access(path, R_OK) != 0) skip();
    json_t *prompts = json_array();
    json_t *p = json_array();
    for (int i = 0; i < 16; i++) json_array_append_new(p, json_integer(2 + (i * 7919) % 200000));
    json_array_append_new(prompts, p);
    g_upcast = true;
    compare(path, 2, prompts, NULL, 8, 1e-3, 1e-4);
    g_upcast = false;
    json_decref(prompts);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_fixtures_tp2),
        cmocka_unit_test(test_split_rows_tp2),
        cmocka_unit_test(test_sequence_parallel),
        cmocka_unit_test(test_indivisible),
        cmocka_unit_test(test_smollm2_tp3),
        cmocka_unit_test(test_gemma3_tp2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
