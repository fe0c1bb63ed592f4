/* Async engine: 64 requests submitted from 4 threads (at most 16 in flight
 * per thread pool of the engine) give the same greedy and seeded tokens as
 * the sync engine; aborts from a callback and from another thread finish the
 * request with "abort"; shutdown with work pending delivers final deltas.
 * Each also with the engine's async scheduling on. CPU only: the threads'
 * timing decides which requests share a batch, and only the CPU backend's
 * rows are independent of their batch (on CUDA the kernels differ by batch
 * size: GEMV vs GEMM, k_fd vs the tensor-core decode kernel); the GPU's
 * async == sync gate is test_engine_async_64 (same batches both ways). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "engine/async_engine.h"

#define FIXTURE VLLM_SOURCE_DIR "/tests/fixtures/models/tiny-qwen3"
#define NREQ 64
#define GEN 12

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t toks[NREQ][GEN + 1];
    int32_t n[NREQ];
    const char *reason[NREQ];
    int done;
} collector;

static collector g;

typedef struct {
    int idx;
    bool abort_self; /* abort from inside the callback after the first token */
    aeng *a;
    int64_t id;
} ctx_t;

static void on_delta(void *user, const eng_output *o) {
    ctx_t *c = user;
    pthread_mutex_lock(&g.mu);
    for (int32_t t = 0; t < o->n_token_ids && g.n[c->idx] <= GEN; t++) g.toks[c->idx][g.n[c->idx]++] = o->token_ids[t];
    bool fin = o->finished;
    if (fin) {
        g.reason[c->idx] = o->finish_reason;
        g.done++;
        pthread_cond_broadcast(&g.cv);
    }
    pthread_mutex_unlock(&g.mu);
    if (!fin && c->abort_self) aeng_abort(c->a, c->id);
}

static void prompt_of(int i, int32_t *p, int32_t *n) {
    *n = 1 + (i * 5) % 30;
    for (int j = 0; j < *n; j++) p[j] = (int32_t)((i * 131 + j * 17) % 384);
}

static bool g_async_sched; /* the engine's async scheduling (runner worker) */

static eng_params params(void) {
    eng_params ep = eng_params_default();
    ep.async_scheduling = g_async_sched;
    ep.model = FIXTURE;
    ep.n_threads = 2;
    ep.max_num_seqs = 16;
    ep.max_num_batched_tokens = 64;
    ep.kv_cache_memory = 32 << 20;
    ep.max_model_len = 128;
    return ep;
}

static ereq_sampling sampling(int i) {
    ereq_sampling sp = ereq_sampling_default();
    sp.max_tokens = GEN;
    sp.ignore_eos = true;
    if (i % 2) {
        sp.temperature = 0.0f;
    } else {
        sp.temperature = 0.9f;
        sp.seed = (uint64_t)i;
        sp.has_seed = true;
    }
    return sp;
}

typedef struct {
    aeng *a;
    int first;
    ctx_t *ctx;
} submitter;

static void *submit_thread(void *arg) {
    submitter *s = arg;
    for (int i = s->first; i < NREQ; i += 4) {
        int32_t p[64], n;
        prompt_of(i, p, &n);
        ereq_sampling sp = sampling(i);
        s->ctx[i] = (ctx_t){.idx = i, .a = s->a};
        if (aeng_submit_tokens(s->a, p, n, &sp, on_delta, &s->ctx[i], &s->ctx[i].id) < 0)
            fprintf(stderr, "submit: %s\n", vc_err_msg());
        usleep(1000 * (i % 3));
    }
    return NULL;
}

static void test_async_matches_sync(void **st) {
    (void)st;
    /* reference: the sync engine, all at once */
    eng_params ep = params();
    ep.async_scheduling = false;
    eng_engine *e = eng_create(&ep);
    if (!e) fail_msg("%s", vc_err_msg());
    int32_t ref[NREQ][GEN], nref[NREQ] = {0};
    for (int i = 0; i < NREQ; i++) {
        int32_t p[64], n;
        prompt_of(i, p, &n);
        ereq_sampling sp = sampling(i);
        int64_t id;
        assert_int_equal(eng_add_tokens(e, p, n, &sp, (void *)(intptr_t)i, &id), 0);
    }
    while (eng_has_unfinished(e)) {
        eng_output *o;
        int32_t n;
        assert_int_equal(eng_step(e, &o, &n), 0);
        for (int32_t j = 0; j < n; j++) {
            int i = (int)(intptr_t)o[j].user;
            for (int32_t t = 0; t < o[j].n_token_ids; t++) ref[i][nref[i]++] = o[j].token_ids[t];
        }
    }
    eng_free(e);

    memset(&g, 0, sizeof g);
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    ep.async_scheduling = g_async_sched;
    aeng *a = aeng_create(&ep);
    assert_non_null(a);
    static ctx_t ctx[NREQ];
    submitter subs[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
        subs[t] = (submitter){.a = a, .first = t, .ctx = ctx};
        pthread_create(&th[t], NULL, submit_thread, &subs[t]);
    }
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    pthread_mutex_lock(&g.mu);
    while (g.done < NREQ) pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
    for (int i = 0; i < NREQ; i++) {
        assert_int_equal(g.n[i], GEN);
        assert_string_equal(g.reason[i], "length");
        if (memcmp(g.toks[i], ref[i], sizeof ref[i])) fail_msg("request %d: async tokens differ from sync", i);
    }
    assert_true(aeng_alive(a));
    aeng_free(a);
}

static void test_abort_and_shutdown(void **st) {
    (void)st;
    memset(&g, 0, sizeof g);
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    eng_params ep = params();
    aeng *a = aeng_create(&ep);
    assert_non_null(a);
    static ctx_t ctx[3];
    int32_t p[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ereq_sampling sp = sampling(1);
    sp.max_tokens = 100;
    ctx[0] = (ctx_t){.idx = 0, .abort_self = true, .a = a};
    assert_int_equal(aeng_submit_tokens(a, p, 8, &sp, on_delta, &ctx[0], &ctx[0].id), 0);
    pthread_mutex_lock(&g.mu);
    while (g.done < 1) pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
    assert_string_equal(g.reason[0], "abort");
    assert_true(g.n[0] >= 1 && g.n[0] < 100);
    /* bad input is refused synchronously */
    int64_t id;
    assert_true(aeng_submit_tokens(a, p, 0, &sp, on_delta, &ctx[1], &id) < 0);
    /* shutdown with a long request in flight: it still gets a final delta */
    ctx[2] = (ctx_t){.idx = 2, .a = a};
    sp.max_tokens = 100;
    assert_int_equal(aeng_submit_tokens(a, p, 8, &sp, on_delta, &ctx[2], &ctx[2].id), 0);
    aeng_free(a);
    assert_int_equal(g.done, 2);
    assert_non_null(g.reason[2]);
}

/* n > 1 through the async engine: three children on one callback, each
 * finished once, the parent's end flagged on the very last delta. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_tok[3], finished[3], parent_done, calls_after_done;
} fan_t;

static void on_fan(void *user, const eng_output *o) {
    fan_t *f = user;
    pthread_mutex_lock(&f->mu);
    if (f->parent_done) f->calls_after_done++;
    if (o->index >= 0 && o->index < 3) {
        f->n_tok[o->index] += o->n_token_ids;
        f->finished[o->index] += o->finished;
    }
    if (o->parent_finished) {
        f->parent_done = 1;
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
}

static void test_fanout(void **st) {
    (void)st;
    for (int mode = 0; mode < 2; mode++) {
        g_async_sched = mode == 1;
        eng_params ep = params();
        aeng *a = aeng_create(&ep);
        assert_non_null(a);
        static fan_t f;
        memset(&f, 0, sizeof f);
        pthread_mutex_init(&f.mu, NULL);
        pthread_cond_init(&f.cv, NULL);
        int32_t p[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        ereq_sampling sp = sampling(0);
        sp.n = 3;
        int64_t id;
        assert_int_equal(aeng_submit_tokens(a, p, 8, &sp, on_fan, &f, &id), 0);
        pthread_mutex_lock(&f.mu);
        while (!f.parent_done) pthread_cond_wait(&f.cv, &f.mu);
        pthread_mutex_unlock(&f.mu);
        aeng_free(a);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(f.n_tok[i], GEN);
            assert_int_equal(f.finished[i], 1);
        }
        assert_int_equal(f.calls_after_done, 0);
    }
    g_async_sched = false;
}

/* The same with async scheduling: the engine thread pipelines steps on
 * the runner's worker. */
static void test_async_sched_matches_sync(void **st) {
    g_async_sched = true;
    test_async_matches_sync(st);
    g_async_sched = false;
}

static void test_async_sched_abort_and_shutdown(void **st) {
    g_async_sched = true;
    test_abort_and_shutdown(st);
    g_async_sched = false;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_async_matches_sync),
        cmocka_unit_test(test_abort_and_shutdown),
        cmocka_unit_test(test_async_sched_matches_sync),
        cmocka_unit_test(test_async_sched_abort_and_shutdown),
        cmocka_unit_test(test_fanout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
