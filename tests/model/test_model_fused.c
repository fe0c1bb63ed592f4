/* The stacked-weight path of the Llama family (weights_fuse.c: one QKV and
 * one gate|up matrix, outputs used as strided views) on the CPU: a CPU
 * backend whose vtable says it holds weight copies (host_memory = false,
 * as a GPU's) takes that path; its prompt logits and greedy tokens must
 * equal the plain CPU backend's (separate matrices in the mmap) on the tiny
 * fixtures, at TP 1 and TP 2 (each rank stacks its own shards), including
 * Qwen2's q/k/v biases, Qwen3's QK-norm and Mistral's replicated KV head.
 * Also checks that the path is taken (wqkv/w_gu bound) and that the plain
 * CPU backend does not stack (no extra resident memory).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/model_impl.h"

#define FIXTURES VLLM_SOURCE_DIR "/tests/fixtures/models"
#define MAX_TP 2

static rt_backend_vtable g_copy_vt;

typedef struct {
    rt_backend *cpu[MAX_TP];  /* the real CPU backends */
    rt_backend *wrap[MAX_TP]; /* the same with host_memory = false (stacking) */
    rt_backend *use[MAX_TP];
    mdl_model *m;
    int tp;
} fx_model;

static int fx_open(fx_model *t, const char *path, int tp, bool stacked) {
    memset(t, 0, sizeof *t);
    t->tp = tp;
    rt_backend_params bp = rt_backend_params_default();
    bp.n_threads = 1;
    for (int r = 0; r < tp; r++) {
        t->cpu[r] = rt_backend_create(RT_DEV_CPU, &bp);
        assert_non_null(t->cpu[r]);
        g_copy_vt = *t->cpu[r]->vt;
        g_copy_vt.host_memory = false;
        t->wrap[r] = malloc(sizeof *t->wrap[r]);
        assert_non_null(t->wrap[r]);
        *t->wrap[r] = *t->cpu[r];
        t->wrap[r]->vt = &g_copy_vt;
        t->use[r] = stacked ? t->wrap[r] : t->cpu[r];
    }
    mdl_params mp = mdl_params_default();
    mp.max_batch = 16;
    mp.tp_size = tp;
    mp.tp_backends = t->use;
    t->m = mdl_load(path, t->use[0], &mp);
    return t->m ? 0 : -1;
}

static void fx_close(fx_model *t) {
    mdl_free(t->m);
    for (int r = 0; r < t->tp; r++) {
        free(t->wrap[r]);
        rt_backend_free(t->cpu[r]);
    }
}

static int argmax(const float *x, int64_t n) {
    int b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int)i;
    return b;
}

static void run(mdl_model *m, const int32_t *ids, int64_t n, int ng, float *lg, int32_t *out) {
    int64_t V = mdl_get_config(m)->vocab;
    mdl_seq *s = mdl_seq_create(m, n + ng + 1);
    assert_non_null(s);
    if (mdl_forward(m, s, ids, n, lg, true) < 0) fail_msg("forward: %s", vc_err_msg());
    float *step = malloc((size_t)V * sizeof *step);
    assert_non_null(step);
    int32_t next = argmax(lg + (n - 1) * V, V);
    for (int i = 0; i < ng; i++) {
        out[i] = next;
        if (mdl_forward(m, s, &next, 1, step, false) < 0) fail_msg("decode: %s", vc_err_msg());
        next = argmax(step, V);
    }
    free(step);
    mdl_seq_free(s);
}

static void compare(const char *name, int tp) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, name);
    fx_model a, b;
    if (fx_open(&a, dir, tp, false) < 0) fail_msg("load %s: %s", dir, vc_err_msg());
    if (fx_open(&b, dir, tp, true) < 0) fail_msg("load %s stacked: %s", dir, vc_err_msg());
    assert_null(a.m->layers[0].wqkv.data);
    assert_null(a.m->layers[0].w_gu.data);
    assert_non_null(b.m->layers[0].wqkv.data);
    assert_non_null(b.m->layers[0].w_gu.data);
    if (b.m->layers[0].bq.data) assert_non_null(b.m->layers[0].bqkv.data);
    int64_t V = mdl_get_config(a.m)->vocab, n = 11;
    int32_t ids[11], ga[24], gb[24];
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + 5) % V);
    float *la = malloc((size_t)(n * V) * sizeof *la), *lb = malloc((size_t)(n * V) * sizeof *lb);
    assert_true(la && lb);
    run(a.m, ids, n, 24, la, ga);
    run(b.m, ids, n, 24, lb, gb);
    double worst = 0;
    for (int64_t i = 0; i < n * V; i++) {
        double e = fabs((double)la[i] - lb[i]) / fmax(1.0, fabs(la[i]));
        if (e > worst) worst = e;
    }
    printf("  %s tp=%d: stacked vs separate weights: worst relative logit difference %.2e\n", name, tp, worst);
    assert_true(worst == 0.0); /* same row kernels, same order: bit-identical */
    assert_memory_equal(ga, gb, sizeof ga);
    free(la);
    free(lb);
    fx_close(&a);
    fx_close(&b);
}

static void test_stacked_equals_separate(void **st) {
    (void)st;
    compare("tiny-llama", 1);
    compare("tiny-qwen2", 1); /* q/k/v biases stacked too */
    compare("tiny-qwen3", 1); /* bf16, QK-norm */
    compare("tiny-llama", 2);
    compare("tiny-qwen2", 2);
    compare("tiny-qwen3", 2);
    compare("tiny-mistral", 2); /* one KV head replicated on both ranks */
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_stacked_equals_separate)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
