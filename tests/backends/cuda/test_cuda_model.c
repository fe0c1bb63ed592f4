/* The whole model path on the CUDA backend: mdl_load copies the weights to
 * the device and every forward op runs there. Checked against the same
 * transformers goldens as tests/model/test_model_golden.c (schema in
 * tests/fixtures/README.md), each fixture in two passes:
 *
 *  - upcast (mdl_params.upcast_weights: all weights f32 on the device):
 *    the GPU computes in fp32 throughout (GEMV for n <= 8, SGEMM without
 *    TF32 above), so the CPU test's bounds apply unchanged: HF's top-5
 *    logits within 1e-3 relative (to max(1,|logit|)) at every prompt
 *    position and greedy step, and all 32 greedy tokens identical.
 *  - stored dtypes: f32 fixtures as above. f16 / bf16 weights take the
 *    cuBLAS path for chunks of more than 8 tokens, which rounds the
 *    activations to the weight type (2^-11 for f16, 2^-8 for bf16 relative)
 *    before an fp32-accumulated GEMM; over 2 layers that moves logits of
 *    magnitude ~1-5 by up to a few 1e-3 (f16) / 1e-2 (bf16). Bounds: 5e-3
 *    (f16) and 5e-2 (bf16) relative. The goldens' greedy margins go down to
 *    0.01, under the bf16 bound, so a divergent greedy token is accepted
 *    only as a near-tie: HF's logit of our token within the bound of HF's
 *    top logit at that step; the case stops there (later steps would
 *    compare different sequences).
 *
 * SmolLM2-135M Q4_1 (tests/fixtures/smollm2/golden.json) runs the same
 * quantized-pass rules as tests/model/test_smollm2_golden.c when the model
 * file is present (it is too large to travel to the GPU machine: skipped
 * there). Everything skips when no CUDA device is present.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "model/model.h"
#include "sample/sampler.h"

#define FIXTURES VLLM_SOURCE_DIR "/tests/fixtures/models"
#define SMOL_GOLDEN VLLM_SOURCE_DIR "/tests/fixtures/smollm2/golden.json"

static rt_backend *g_gpu;

typedef struct {
    double rel;      /* bound relative to max(1,|logit|); <= 0: absolute abs_bound */
    double abs_bound;
    bool near_tie;   /* a greedy divergence within near_tie_gap is accepted */
    double near_tie_gap;
    double worst, sum;
    long count;
} cmp_rules;

static double logit_err(const cmp_rules *r, double got, double want) {
    double e = fabs(got - want);
    return r->rel > 0 ? e / fmax(1.0, fabs(want)) : e;
}

static void check_top5(cmp_rules *r, const json_t *top5, const float *lg, const char *what, int pos) {
    size_t i;
    json_t *p;
    json_array_foreach(top5, i, p) {
        int id = (int)json_integer_value(json_array_get(p, 0));
        double want = json_number_value(json_array_get(p, 1));
        double e = logit_err(r, lg[id], want);
        r->worst = fmax(r->worst, e);
        r->sum += fabs(lg[id] - want);
        r->count++;
        double bound = r->rel > 0 ? r->rel : r->abs_bound;
        if (e > bound) fail_msg("%s pos %d: logit[%d] = %.6f, HF %.6f (err %.2e > %.1e)", what, pos, id, lg[id], want, e, bound);
    }
}

/* One prompt: all-logits prefill, then greedy decode with the KV cache. */
static void run_case(mdl_model *m, cmp_rules *r, const char *name, const json_t *pr, const json_t *top5,
                     const json_t *greedy, const json_t *gtop) {
    int64_t V = mdl_get_config(m)->vocab;
    size_t n = json_array_size(pr), ng = json_array_size(greedy);
    int32_t *ids = malloc(n * sizeof *ids);
    float *lg = malloc(n * (size_t)V * sizeof *lg), *step = malloc((size_t)V * sizeof *step);
    assert_true(ids && lg && step);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(pr, i));
    mdl_seq *s = mdl_seq_create(m, (int64_t)(n + ng + 1));
    assert_non_null(s);
    if (mdl_forward(m, s, ids, (int64_t)n, lg, true) < 0) fail_msg("%s forward: %s", name, vc_err_msg());
    for (size_t t = 0; t < n && t < json_array_size(top5); t++) check_top5(r, json_array_get(top5, t), lg + t * V, name, (int)t);
    memcpy(step, lg + (n - 1) * V, (size_t)V * sizeof *step);
    size_t k = 0;
    for (; k < ng; k++) {
        check_top5(r, json_array_get(gtop, k), step, name, (int)(n + k));
        int32_t want = (int32_t)json_integer_value(json_array_get(greedy, k));
        int32_t got = smp_argmax(step, V);
        if (got != want) {
            json_t *hf = json_array_get(gtop, k), *p;
            double top = json_number_value(json_array_get(json_array_get(hf, 0), 1)), ours = -INFINITY;
            size_t j;
            json_array_foreach(hf, j, p) {
                if (json_integer_value(json_array_get(p, 0)) == got) ours = json_number_value(json_array_get(p, 1));
            }
            if (!r->near_tie || !(top - ours <= r->near_tie_gap))
                fail_msg("%s: greedy step %zu: ours %d, HF %d (HF gap %.4f)", name, k, got, want, top - ours);
            print_message("%s: near-tie divergence at greedy step %zu (HF gap %.4f)\n", name, k, top - ours);
            break;
        }
        if (k + 1 < ng && mdl_forward(m, s, &got, 1, step, false) < 0) fail_msg("%s decode: %s", name, vc_err_msg());
    }
    if (k < ng) print_message("%s: %zu/%zu greedy tokens identical\n", name, k, ng);
    mdl_seq_free(s);
    free(ids);
    free(lg);
    free(step);
}

/* Bound for a fixture by the dtype of its weights (first 2-D tensor). */
static void rules_for(const char *dir, bool upcast, cmp_rules *r) {
    memset(r, 0, sizeof *r);
    r->rel = 1e-3;
    if (upcast) return;
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = json_load_file(path, 0, NULL);
    assert_non_null(cfg);
    json_t *dt = json_object_get(cfg, "torch_dtype");
    if (!dt) dt = json_object_get(cfg, "dtype");
    const char *s = dt ? json_string_value(dt) : "float32";
    if (s && !strcmp(s, "float16")) r->rel = 5e-3;
    if (s && !strcmp(s, "bfloat16")) r->rel = 5e-2;
    r->near_tie = r->rel > 1e-3;
    r->near_tie_gap = r->rel * 2.0;
    json_decref(cfg);
}

static void run_fixture(const char *name, bool upcast) {
    char dir[1024], path[1200], what[160];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, name);
    snprintf(path, sizeof path, "%s/golden.json", dir);
    json_t *g = json_load_file(path, 0, NULL);
    assert_non_null(g);
    mdl_params mp = mdl_params_default();
    mp.max_batch = 16; /* chunked prefill: GEMM (16-token) and GEMV (<= 8) chunks */
    mp.upcast_weights = upcast;
    mdl_model *m = mdl_load(dir, g_gpu, &mp);
    if (!m) fail_msg("load %s on cuda: %s", dir, vc_err_msg());
    cmp_rules r;
    rules_for(dir, upcast, &r);
    snprintf(what, sizeof what, "%s (%s)", name, upcast ? "f32 weights" : "stored dtype");
    json_t *prompts = json_object_get(g, "prompts"), *cs;
    size_t ci;
    json_array_foreach(json_object_get(g, "cases"), ci, cs) {
        json_t *pr = json_array_get(prompts, (size_t)json_integer_value(json_object_get(cs, "prompt")));
        run_case(m, &r, what, pr, json_object_get(cs, "top5"), json_object_get(cs, "greedy"),
                 json_object_get(cs, "greedy_top5"));
    }
    print_message("%s: worst relative logit error %.2e (bound %.0e)\n", what, r.worst, r.rel);
    mdl_free(m);
    json_decref(g);
}

static void for_fixtures(bool upcast) {
    if (!g_gpu) skip();
    DIR *d = opendir(FIXTURES);
    assert_non_null(d);
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        run_fixture(e->d_name, upcast);
        count++;
    }
    closedir(d);
    assert_true(count >= 4);
}

static void test_fixtures_upcast(void **st) {
    (void)st;
    for_fixtures(true);
}

static void test_fixtures_stored(void **st) {
    (void)st;
    for_fixtures(false);
}

static void test_bad_inputs(void **st) {
    (void)st;
    if (!g_gpu) skip();
    mdl_model *m = mdl_load(FIXTURES "/tiny-llama", g_gpu, NULL);
    assert_non_null(m);
    mdl_seq *s = mdl_seq_create(m, 4);
    float *lg = malloc((size_t)mdl_get_config(m)->vocab * sizeof *lg);
    int32_t bad = (int32_t)mdl_get_config(m)->vocab;
    assert_true(mdl_forward(m, s, &bad, 1, lg, false) < 0);
    int32_t ok[5] = {1, 2, 3, 4, 5};
    assert_true(mdl_forward(m, s, ok, 5, lg, false) < 0); /* context overflow */
    assert_int_equal(mdl_forward(m, s, ok, 4, lg, false), 0);
    free(lg);
    mdl_seq_free(s);
    mdl_free(m);
}

/* Decode steps replayed as CUDA graphs (model_graph.c: padded to a bucket,
 * recorded on the second step of a shape, replayed after) give the same
 * logits bit for bit as the eager path (VLLM_CUDA_GRAPHS=0): the same
 * kernels run, and every kernel computes a row independently of the batch
 * size on the GEMV path (and the split-KV attention takes two splits of 16
 * keys for a context bound of GMB * GB = 32 keys, whatever the batch). Three sequences prefilled in one batch, then
 * decode steps of 3, 2 (padded to 2) and 3 (padded to 4) sequences. Each
 * step runs twice, the second time through mdl_forward_batch_argmax, whose
 * ids must be the argmax of the first run's logits. */
enum { GS = 3, GB = 4, GMB = 8 };

static void graph_run(mdl_model *m, float *out, int64_t *n_out) {
    const mdl_config *c = mdl_get_config(m);
    int64_t V = c->vocab;
    mdl_kv *kv = mdl_kv_create(m, GS * GMB, GB);
    assert_non_null(kv);
    int32_t bt[GS * GMB], len[GS] = {0, 0, 0};
    for (int i = 0; i < GS * GMB; i++) bt[i] = i;
    int32_t ids[16], pos[16], slots[16], qsl[GS + 1], sl[GS], rows[GS], btb[GS * GMB];
    *n_out = 0;
    for (int step = 0; step < 9; step++) {
        int32_t act[GS], na = 0, T = 0;
        for (int s = 0; s < GS; s++)
            if (step == 0 || !(step >= 3 && step < 6 && s == 1)) act[na++] = s; /* seq 1 pauses */
        qsl[0] = 0;
        for (int k = 0; k < na; k++) {
            int s = act[k], n = step == 0 ? 3 + s : 1;
            for (int i = 0; i < n; i++, T++) {
                ids[T] = (int32_t)((step * 13 + s * 5 + i * 3 + 2) % V);
                pos[T] = len[s] + i;
                slots[T] = bt[s * GMB + pos[T] / GB] * GB + pos[T] % GB;
            }
            len[s] += n;
            qsl[k + 1] = T;
            sl[k] = len[s];
            rows[k] = T - 1;
            memcpy(btb + k * GMB, bt + s * GMB, GMB * sizeof *btb);
        }
        mdl_batch b = {.n_tokens = T, .ids = ids, .positions = pos, .slots = slots, .n_seqs = na, .qsl = qsl,
                       .seq_lens = sl, .block_tables = btb, .max_blocks = GMB, .n_logits = na, .logit_rows = rows};
        if (mdl_forward_batch(m, kv, &b, out + *n_out * V) < 0) fail_msg("step %d: %s", step, vc_err_msg());
        /* the same step again (it stores the same K/V) with the argmax on the device */
        int32_t am[GS];
        if (mdl_forward_batch_argmax(m, kv, &b, am) < 0) fail_msg("step %d argmax: %s", step, vc_err_msg());
        for (int k = 0; k < na; k++) {
            const float *row = out + (*n_out + k) * V;
            int32_t best = 0;
            for (int64_t j = 1; j < V; j++)
                if (row[j] > row[best]) best = (int32_t)j;
            assert_int_equal(am[k], best);
        }
        *n_out += na;
    }
    mdl_kv_free(kv);
}

static void test_graph_decode(void **st) {
    (void)st;
    if (!g_gpu) skip();
    mdl_params mp = mdl_params_default();
    mp.max_batch = 16;
    mdl_model *me = mdl_load(FIXTURES "/tiny-qwen3", g_gpu, &mp), *mg = mdl_load(FIXTURES "/tiny-qwen3", g_gpu, &mp);
    assert_true(me && mg);
    int64_t V = mdl_get_config(me)->vocab, ne = 0, ng = 0;
    float *le = calloc((size_t)(32 * V), sizeof *le), *lg = calloc((size_t)(32 * V), sizeof *lg);
    assert_true(le && lg);
    setenv("VLLM_CUDA_GRAPHS", "0", 1); /* read at a model's first step */
    graph_run(me, le, &ne);
    unsetenv("VLLM_CUDA_GRAPHS");
    graph_run(mg, lg, &ng);
    assert_int_equal(ne, ng);
    for (int64_t r = 0; r < ne; r++)
        if (memcmp(le + r * V, lg + r * V, (size_t)V * sizeof *le))
            fail_msg("graph decode: logits row %lld differ from the eager run", (long long)r);
    print_message("graph decode: %lld logits rows identical to eager (kv cache %s)\n", (long long)ne,
                  rt_dtype_name((rt_dtype)mdl_kv_dtype(mg)));
    free(le);
    free(lg);
    mdl_free(me);
    mdl_free(mg);
}

/* SmolLM2 Q4_1: the quantized-pass rules of test_smollm2_golden.c. */
static void test_smollm2(void **st) {
    (void)st;
    if (!g_gpu) skip();
    json_t *g = json_load_file(SMOL_GOLDEN, 0, NULL);
    if (!g) skip();
    char path[2048];
    const char *env = getenv("VLLM_MODEL");
    if (env && *env) snprintf(path, sizeof path, "%s", env);
    else snprintf(path, sizeof path, "%s/models/%s", VLLM_SOURCE_DIR, json_string_value(json_object_get(g, "model_file")));
    if (access(path, R_OK) != 0) {
        json_decref(g);
        print_message("skipped: %s not present\n", path);
        skip();
    }
    mdl_model *m = mdl_load(path, g_gpu, NULL);
    if (!m) fail_msg("%s", vc_err_msg());
    cmp_rules r = {.rel = 0, .abs_bound = 3.0, .near_tie = true,
                   .near_tie_gap = json_number_value(json_object_get(g, "near_tie_nats"))};
    size_t ci;
    json_t *cs;
    json_array_foreach(json_object_get(g, "cases"), ci, cs) {
        run_case(m, &r, json_string_value(json_object_get(cs, "name")), json_object_get(cs, "prompt_ids"),
                 json_object_get(cs, "top5"), json_object_get(cs, "greedy"), json_object_get(cs, "greedy_top5"));
    }
    double mean = r.sum / (double)(r.count ? r.count : 1);
    print_message("smollm2 q4_1 on cuda: logit abs error max %.4f mean %.4f\n", r.worst, mean);
    assert_true(mean <= 0.3);
    mdl_free(m);
    json_decref(g);
}

static int setup(void **st) {
    (void)st;
    g_gpu = rt_backend_create(RT_DEV_CUDA, NULL);
    if (!g_gpu) print_message("no CUDA device: %s (tests skipped)\n", vc_err_msg());
    return 0;
}

static int teardown(void **st) {
    (void)st;
    rt_backend_free(g_gpu);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures_upcast),
        cmocka_unit_test(test_fixtures_stored),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_graph_decode),
        cmocka_unit_test(test_smollm2),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
