/* Sampling elsewhere (sample/batch.h "Sampling elsewhere", rt_sample):
 *  - the CPU backend's SAMPLE op, fed as the runner feeds it (plain
 *    parameters, smp_batch_uniforms' uniforms, penalised rows' histories),
 *    gives the host sampler's tokens over several steps of a mixed batch
 *    (greedy, greedy with penalties, seeded and unseeded rows, temperature,
 *    top_k, top_p, min_p, penalties), and both consume the batch generator
 *    identically (the next draws agree);
 *  - smp_row_plain_ok refuses rows that need the host (logprobs, logit
 *    bias, allowed ids, bad words, an active min_tokens ban);
 *  - rt_sample refuses malformed tensors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "runtime/ops.h"
#include "sample/batch.h"

#define V 3001
#define ROWS 29
#define STEPS 6

static rt_backend *g_cpu;

static smp_batch *mk(void) {
    smp_batch_params bp = smp_batch_params_default();
    bp.vocab = V;
    bp.max_batch = 64;
    bp.seed = 4242;
    bp.has_seed = true;
    smp_batch *b = smp_batch_create(&bp);
    assert_non_null(b);
    return b;
}

static smp_req_params row_params(int i) {
    smp_req_params p = smp_req_params_default();
    switch (i % 7) {
    case 0: p.temperature = 0.0f; break;
    case 1: p.temperature = 0.0f; p.repetition_penalty = 1.3f; p.frequency_penalty = 0.4f; break;
    case 2: p.temperature = 0.8f; p.seed = 77 + (uint64_t)i; p.has_seed = true; p.top_k = 20; break;
    case 3: p.temperature = 1.0f; p.top_p = 0.85f; break;
    case 4: p.temperature = 0.6f; p.min_p = 0.1f; p.presence_penalty = 0.7f; p.repetition_penalty = 0.9f; break;
    case 5: p.temperature = 1.2f; p.top_k = 100; p.top_p = 0.7f; p.min_p = 0.02f; p.frequency_penalty = -0.5f;
            p.seed = 5; p.has_seed = true; break;
    default: p.temperature = 0.005f; break; /* raised to 1e-2 */
    }
    return p;
}

/* rt_sample's inputs for rows, as the runner builds them. */
static int64_t pack(const smp_row *rows, int n, const double *us, float *fp, int32_t *ip, int32_t *hist) {
    int64_t nh = 0;
    for (int i = 0; i < n; i++) {
        smp_plain p = smp_row_plain(&rows[i]);
        float *f = fp + i * RT_SAMPLE_NF;
        int32_t *q = ip + i * RT_SAMPLE_NI;
        memset(f, 0, RT_SAMPLE_NF * sizeof *f);
        memset(q, 0, RT_SAMPLE_NI * sizeof *q);
        f[RT_SAMPLE_TEMP] = p.temperature;
        f[RT_SAMPLE_TOP_P] = p.top_p;
        f[RT_SAMPLE_MIN_P] = p.min_p;
        f[RT_SAMPLE_LOG_MIN_P] = p.min_p > 0 ? logf(p.min_p) : -INFINITY;
        f[RT_SAMPLE_REP] = p.repetition;
        f[RT_SAMPLE_FREQ] = p.frequency;
        f[RT_SAMPLE_PRES] = p.presence;
        q[RT_SAMPLE_TOP_K] = p.top_k;
        q[RT_SAMPLE_HIST_OFF] = (int32_t)nh;
        if (p.penalties) {
            int32_t np = p.repetition != 1.0f ? rows[i].n_prompt : 0;
            memcpy(hist + nh, rows[i].prompt, (size_t)np * sizeof *hist);
            memcpy(hist + nh + np, rows[i].output, (size_t)rows[i].n_output * sizeof *hist);
            q[RT_SAMPLE_N_PROMPT] = np;
            q[RT_SAMPLE_N_OUTPUT] = rows[i].n_output;
            nh += np + rows[i].n_output;
        }
        uint64_t b;
        memcpy(&b, &us[i], sizeof b);
        q[RT_SAMPLE_U_LO] = (int32_t)(uint32_t)b;
        q[RT_SAMPLE_U_HI] = (int32_t)(uint32_t)(b >> 32);
    }
    return nh;
}

static void test_op_equals_host(void **st) {
    (void)st;
    smp_batch *host = mk(), *dev = mk();
    smp_req *reqs[ROWS];
    int32_t prompt[ROWS][40], out[ROWS][STEPS + 1];
    uint64_t x = 7;
    for (int i = 0; i < ROWS; i++) {
        smp_req_params p = row_params(i);
        assert_int_equal(smp_req_create(host, &p, &reqs[i]), 0);
        for (int j = 0; j < 40; j++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            prompt[i][j] = (int32_t)((x >> 33) % 50); /* repeats */
        }
    }
    float *lh = malloc(sizeof(float) * ROWS * V), *ld = malloc(sizeof(float) * ROWS * V);
    float fp[ROWS * RT_SAMPLE_NF];
    int32_t ip[ROWS * RT_SAMPLE_NI], hist[ROWS * (40 + STEPS)], tok[ROWS];
    double us[ROWS];
    assert_non_null(lh);
    assert_non_null(ld);
    int n_sampled_rows = 0;
    for (int step = 0; step < STEPS; step++) {
        smp_row rows[ROWS];
        for (int i = 0; i < ROWS; i++) rows[i] = (smp_row){reqs[i], prompt[i], 40, out[i], step};
        for (int64_t k = 0; k < (int64_t)ROWS * V; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            lh[k] = (float)((double)(x >> 11) * 0x1.0p-53 * 8.0 - 4.0);
        }
        for (int i = 0; i < ROWS; i++) { /* make penalties matter: history tokens near the top */
            lh[(int64_t)i * V + prompt[i][0]] = 4.5f;
            if (step) lh[(int64_t)i * V + out[i][step - 1]] = 4.4f;
        }
        memcpy(ld, lh, sizeof(float) * ROWS * V);
        for (int i = 0; i < ROWS; i++) assert_true(smp_row_plain_ok(&rows[i]));
        assert_int_equal(smp_batch_sample(host, lh, rows, ROWS), 0);
        smp_batch_uniforms(dev, rows, ROWS, us);
        int64_t nh = pack(rows, ROWS, us, fp, ip, hist);
        int32_t *cnt = calloc((size_t)ROWS * V, sizeof *cnt);
        assert_non_null(cnt);
        rt_tensor tl = rt_tensor_2d(ld, RT_F32, RT_DEV_CPU, ROWS, V), td = rt_tensor_1d(tok, RT_I32, RT_DEV_CPU, ROWS);
        rt_tensor tf = rt_tensor_2d(fp, RT_F32, RT_DEV_CPU, ROWS, RT_SAMPLE_NF);
        rt_tensor ti = rt_tensor_2d(ip, RT_I32, RT_DEV_CPU, ROWS, RT_SAMPLE_NI);
        rt_tensor th = rt_tensor_1d(hist, RT_I32, RT_DEV_CPU, nh), tc = rt_tensor_2d(cnt, RT_I32, RT_DEV_CPU, ROWS, V);
        assert_int_equal(rt_sample(g_cpu, &td, &tl, &tf, &ti, &th, &tc), 0);
        free(cnt);
        const int32_t *ht = smp_batch_output(host)->tokens;
        for (int i = 0; i < ROWS; i++) {
            if (ht[i] != tok[i]) fail_msg("step %d row %d: host %d, op %d", step, i, ht[i], tok[i]);
            out[i][step] = ht[i];
            n_sampled_rows += us[i] != 0.0;
        }
    }
    assert_true(n_sampled_rows > ROWS * STEPS / 2);
    /* the generators advanced alike */
    smp_req_params p = smp_req_params_default();
    smp_req *r;
    assert_int_equal(smp_req_create(host, &p, &r), 0);
    smp_row row = {r, NULL, 0, NULL, 0};
    double a, b;
    smp_batch_uniforms(host, &row, 1, &a);
    smp_batch_uniforms(dev, &row, 1, &b);
    assert_true(a == b);
    smp_req_free(r);
    for (int i = 0; i < ROWS; i++) smp_req_free(reqs[i]);
    free(lh);
    free(ld);
    smp_batch_free(host);
    smp_batch_free(dev);
}

static void test_plain_ok(void **st) {
    (void)st;
    smp_batch *b = mk();
    smp_bias bias = {3, 1.0f};
    int32_t allowed[2] = {1, 2}, bw[1] = {9}, bwl[1] = {1}, stop[1] = {0}, outp[2] = {4, 5};
    for (int c = 0; c < 6; c++) {
        smp_req_params p = smp_req_params_default();
        if (c == 0) p.logprobs = 1;
        if (c == 1) p.logit_bias = &bias, p.n_logit_bias = 1;
        if (c == 2) p.allowed_ids = allowed, p.n_allowed = 2;
        if (c == 3) p.bad_words = bw, p.bad_word_lens = bwl, p.n_bad_words = 1;
        if (c >= 4) p.min_tokens = 2, p.stop_ids = stop, p.n_stop_ids = 1;
        smp_req *r;
        assert_int_equal(smp_req_create(b, &p, &r), 0);
        smp_row row = {r, NULL, 0, outp, c == 5 ? 2 : 1}; /* c 5: min_tokens reached */
        assert_int_equal(smp_row_plain_ok(&row), c == 5);
        smp_req_free(r);
    }
    smp_batch_free(b);
}

static void test_bad_tensors(void **st) {
    (void)st;
    float lg[2 * 7] = {0}, fp[2 * RT_SAMPLE_NF] = {0};
    int32_t ip[2 * RT_SAMPLE_NI] = {0}, tok[2], h[3] = {1, 2, 99};
    rt_tensor tl = rt_tensor_2d(lg, RT_F32, RT_DEV_CPU, 2, 7), td = rt_tensor_1d(tok, RT_I32, RT_DEV_CPU, 2);
    rt_tensor tf = rt_tensor_2d(fp, RT_F32, RT_DEV_CPU, 2, RT_SAMPLE_NF);
    rt_tensor ti = rt_tensor_2d(ip, RT_I32, RT_DEV_CPU, 2, RT_SAMPLE_NI);
    rt_tensor bad_f = rt_tensor_2d(fp, RT_F32, RT_DEV_CPU, 2, 3), th = rt_tensor_1d(h, RT_I32, RT_DEV_CPU, 3);
    assert_int_equal(rt_sample(g_cpu, &td, &tl, &bad_f, &ti, NULL, NULL), VC_ERR_INVALID);
    assert_int_equal(rt_sample(g_cpu, &td, &tl, &tf, &ti, &th, NULL), VC_ERR_INVALID); /* no counts */
    /* a history outside the given ids, and an id outside the vocabulary */
    int32_t cnt[2 * 7] = {0};
    rt_tensor tc = rt_tensor_2d(cnt, RT_I32, RT_DEV_CPU, 2, 7);
    fp[RT_SAMPLE_TEMP] = fp[RT_SAMPLE_NF + RT_SAMPLE_TEMP] = 1.0f;
    fp[RT_SAMPLE_TOP_P] = fp[RT_SAMPLE_NF + RT_SAMPLE_TOP_P] = 1.0f;
    fp[RT_SAMPLE_REP] = fp[RT_SAMPLE_NF + RT_SAMPLE_REP] = 1.0f;
    fp[RT_SAMPLE_PRES] = 0.5f;
    ip[RT_SAMPLE_N_OUTPUT] = 4;
    assert_int_equal(rt_sample(g_cpu, &td, &tl, &tf, &ti, &th, &tc), VC_ERR_INVALID);
    ip[RT_SAMPLE_N_OUTPUT] = 3;
    assert_int_equal(rt_sample(g_cpu, &td, &tl, &tf, &ti, &th, &tc), VC_ERR_INVALID);
    ip[RT_SAMPLE_N_OUTPUT] = 2;
    assert_int_equal(rt_sample(g_cpu, &td, &tl, &tf, &ti, &th, &tc), VC_OK);
    assert_true(tok[0] >= 0 && tok[0] < 7 && tok[1] >= 0 && tok[1] < 7);
}

static int setup(void **st) {
    (void)st;
    rt_backend_params p = rt_backend_params_default();
    p.n_threads = 1;
    g_cpu = rt_backend_create(RT_DEV_CPU, &p);
    return g_cpu ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    rt_backend_free(g_cpu);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_equals_host),
        cmocka_unit_test(test_plain_ok),
        cmocka_unit_test(test_bad_tensors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
