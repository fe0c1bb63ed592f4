/* engine_test_util — shared pieces of the engine gate tests (header-only):
 * the device named by VLLM_TEST_DEVICE, a private copy of the tiny Llama
 * fixture, the engine parameters the sampling / async gates share, a batch
 * of pseudo-random prompts, and a loop that steps an engine to the end
 * collecting each request's tokens (request user pointer = its index). */
#ifndef TEST_ENGINE_TEST_UTIL_H
#define TEST_ENGINE_TEST_UTIL_H

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
#include "engine/engine.h"

#define ETEST_FIXTURE VLLM_SOURCE_DIR "/tests/fixtures/models/tiny-llama"

/* VLLM_TEST_DEVICE=cuda runs a gate on the GPU (scripts/gpu_run.sh). */
static inline rt_device etest_device(void) {
    const char *dev = getenv("VLLM_TEST_DEVICE");
    return dev && !strcmp(dev, "cuda") ? RT_DEV_CUDA : RT_DEV_CPU;
}

static char etest_model[200];

/* Copies the fixture's weights and config to /tmp/vllm-test-<tag>-<pid>. */
static inline int etest_copy_fixture(const char *tag) {
    snprintf(etest_model, sizeof etest_model, "/tmp/vllm-test-%s-%d", tag, (int)getpid());
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && cp %s/model.safetensors %s/config.json %s/", etest_model,
             etest_model, ETEST_FIXTURE, ETEST_FIXTURE, etest_model);
    return system(cmd) == 0 ? 0 : -1;
}

static inline int etest_rm_fixture(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", etest_model);
    return system(cmd) == 0 ? 0 : -1;
}

/* The copied fixture on the test device: 16 sequences, 64 MiB of KV, a
 * 128-token context. */
static inline eng_params etest_params(int32_t budget, bool async) {
    eng_params ep = eng_params_default();
    ep.model = etest_model;
    ep.n_threads = 2;
    ep.device = etest_device();
    ep.max_num_batched_tokens = budget;
    ep.max_num_seqs = 16;
    ep.kv_cache_memory = (size_t)64 << 20;
    ep.max_model_len = 128;
    ep.async_scheduling = async;
    return ep;
}

/* Request i: n0 + (i * step) % span prompt ids in [0, 300) from an LCG
 * seeded with seed (n0 + span - 1 <= 48), sampling sp(i). */
static inline void etest_add_prompts(eng_engine *e, int nreq, uint64_t seed, int32_t n0, int32_t step, int32_t span,
                                     ereq_sampling (*sp)(int)) {
    uint64_t x = seed;
    for (int i = 0; i < nreq; i++) {
        int32_t prompt[48];
        int32_t n = n0 + (i * step) % span;
        for (int j = 0; j < n; j++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            prompt[j] = (int32_t)((x >> 33) % 300);
        }
        ereq_sampling s = sp(i);
        int64_t id;
        if (eng_add_tokens(e, prompt, n, &s, (void *)(intptr_t)i, &id) < 0) fail_msg("%s", vc_err_msg());
    }
}

/* Steps e until every request finished; toks[i * cap + t] / n[i] get request
 * i's tokens (at most cap of them). */
static inline void etest_collect(eng_engine *e, int32_t *toks, int32_t *n, int32_t cap) {
    int guard = 0;
    while (eng_has_unfinished(e)) {
        eng_output *o;
        int32_t no;
        if (eng_step(e, &o, &no) < 0) fail_msg("step: %s", vc_err_msg());
        for (int32_t j = 0; j < no; j++) {
            int i = (int)(intptr_t)o[j].user;
            for (int32_t t = 0; t < o[j].n_token_ids && n[i] < cap; t++) toks[(int64_t)i * cap + n[i]++] = o[j].token_ids[t];
        }
        assert_true(++guard < 100000);
    }
}

#endif
