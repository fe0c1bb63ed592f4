/* Speed of the model path on the GPU (numbers for docs/BENCHMARKS.md): on
 * the checkpoint named by VLLM_CUDA_BENCH_MODEL (skipped when unset or
 * without a GPU; scripts/gpu_e2e.sh makes a random Qwen3-0.6B-shaped one):
 *
 *  - decode steps of B = 1, 16, 64, 256 sequences at a context of 512, as
 *    the engine runs them (mdl_forward_batch: logits [B, V] to the host)
 *    and with the argmax on the device (mdl_forward_batch_argmax);
 *  - batch-1 decode against the bandwidth roofline: weight bytes per step /
 *    device-to-device copy bandwidth measured here;
 *  - prefill of one 2048-token prompt (one forward) in tok/s and TFLOP/s
 *    of matmul work (2 x parameters x tokens).
 *
 * The KV cache holds whatever memory it got: the speed of a step does not
 * depend on the values. Checks only that the steps succeed.
 *
 * Without a checkpoint: the decode GEMV (n = 1, bf16; VLLM_CUDA_SPEED_N
 * tokens instead, up to 8) on Llama-3-8B and
 * Qwen3-0.6B matrix shapes for every GEMV variant (VLLM_CUDA_GEMV 0..6, a
 * fresh backend each), in GB/s of weights and as a fraction of the
 * device-to-device copy bandwidth. Each timing replays a recorded graph of
 * GEMVs over distinct copies of the matrix (>= 256 MB in all), so the L2
 * (50 MB) does not serve the weights and no launch gap is timed; the
 * variants' outputs must agree within 1e-5 (normalised).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "model/model.h"
#include "runtime/ops.h"

static rt_backend *g_gpu;

enum { CTX = 512, BS = 16, STEPS = 20 };

/* One decode step of B sequences; sequence s owns blocks 1 + s*mb ... */
static int decode_step(mdl_model *m, mdl_kv *kv, int32_t B, int32_t mb, int step, int32_t *buf, float *logits,
                       int32_t *ids_out) {
    int64_t V = mdl_get_config(m)->vocab;
    int32_t *ids = buf, *pos = ids + B, *slots = pos + B, *qsl = slots + B, *sl = qsl + B + 1, *rows = sl + B,
            *bt = rows + B;
    qsl[0] = 0;
    for (int32_t s = 0; s < B; s++) {
        int32_t p = CTX - 1 + step;
        ids[s] = (int32_t)((s * 31 + step * 7 + 11) % V);
        pos[s] = p;
        slots[s] = (1 + s * mb + p / BS) * BS + p % BS;
        qsl[s + 1] = s + 1;
        sl[s] = p + 1;
        rows[s] = s;
        for (int32_t j = 0; j < mb; j++) bt[s * mb + j] = 1 + s * mb + j;
    }
    mdl_batch b = {.n_tokens = B, .ids = ids, .positions = pos, .slots = slots, .n_seqs = B, .qsl = qsl,
                   .seq_lens = sl, .block_tables = bt, .max_blocks = mb, .n_logits = B, .logit_rows = rows};
    return mdl_forward_batch_ex(m, kv, &b, logits, ids_out);
}

static double d2d_bandwidth(void) {
    int64_t n = (int64_t)1 << 28; /* 1 GiB of i32 */
    rt_tensor a = rt_tensor_alloc(g_gpu, RT_I32, 1, &n), b = rt_tensor_alloc(g_gpu, RT_I32, 1, &n);
    double bw = 0;
    if (a.data && b.data) {
        assert_int_equal(rt_tensor_copy_bytes(g_gpu, &b, &a), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        double t0 = vc_now_s();
        for (int i = 0; i < 5; i++) assert_int_equal(rt_tensor_copy_bytes(g_gpu, &b, &a), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        bw = 2.0 * 4.0 * (double)n * 5 / (vc_now_s() - t0);
    }
    rt_backend_free_mem(g_gpu, a.data);
    rt_backend_free_mem(g_gpu, b.data);
    return bw;
}

static void test_speed(void **st) {
    (void)st;
    const char *path = getenv("VLLM_CUDA_BENCH_MODEL");
    if (!g_gpu || !path || !*path) skip();
    mdl_params mp = mdl_params_default();
    mp.max_batch = 2048;
    mdl_model *m = mdl_load(path, g_gpu, &mp);
    if (!m) fail_msg("%s: %s", path, vc_err_msg());
    const mdl_config *c = mdl_get_config(m);
    int64_t V = c->vocab;
    const int32_t Bs[] = {1, 16, 64, 256}, Bmax = 256;
    int32_t mb = (CTX + STEPS + 8 + BS - 1) / BS + 1;
    int32_t nb = 1 + Bmax * mb;
    if (nb < 2048 / BS + 2) nb = 2048 / BS + 2;
    mdl_kv *kv = mdl_kv_create(m, nb, BS);
    if (!kv) fail_msg("kv: %s", vc_err_msg());
    int32_t *buf = malloc((size_t)(Bmax * (7 + mb) + 2048 * 4) * sizeof *buf), *ids = malloc(Bmax * sizeof *ids);
    float *logits = malloc((size_t)(Bmax * V) * sizeof *logits);
    assert_true(buf && ids && logits);
    double bw = d2d_bandwidth(), wb = (double)mdl_weight_bytes(m);
    print_message("speed: model %s, kv cache %s, weights %.3f GB, d2d copy %.0f GB/s -> batch-1 roofline %.0f tok/s\n",
                  path, rt_dtype_name((rt_dtype)mdl_kv_dtype(m)), wb * 1e-9, bw * 1e-9, bw / wb);
    for (size_t k = 0; k < sizeof Bs / sizeof Bs[0]; k++) {
        int32_t B = Bs[k];
        for (int mode = 0; mode < 2; mode++) {
            float *lg = mode ? NULL : logits;
            int32_t *id = mode ? ids : NULL;
            for (int s = 0; s < 3; s++) /* eager, recording, first replay */
                if (decode_step(m, kv, B, mb, s, buf, lg, id) < 0) fail_msg("decode B=%d: %s", B, vc_err_msg());
            double t0 = vc_now_s();
            for (int s = 0; s < STEPS; s++)
                if (decode_step(m, kv, B, mb, 3 + s, buf, lg, id) < 0) fail_msg("decode B=%d: %s", B, vc_err_msg());
            double dt = (vc_now_s() - t0) / STEPS;
            print_message("speed: decode B=%3d ctx %d, %-13s %7.3f ms/step %9.0f tok/s", B, CTX,
                          mode ? "argmax on gpu" : "logits->host", dt * 1e3, B / dt);
            if (B == 1) print_message("  (%.1f%% of roofline)", 100.0 * wb / dt / bw);
            print_message("\n");
        }
    }
    /* prefill: one 2048-token prompt in one forward (positions 0..2047) */
    const int32_t P = 2048;
    int32_t *pid = buf, *ppos = pid + P, *pslot = ppos + P, *pbt = pslot + P, qsl[2] = {0, P}, sl = P, row = P - 1;
    for (int32_t i = 0; i < P; i++) {
        pid[i] = (int32_t)((i * 17 + 5) % V);
        ppos[i] = i;
        pslot[i] = BS + i; /* blocks 1.. */
    }
    for (int32_t j = 0; j < P / BS; j++) pbt[j] = 1 + j;
    mdl_batch b = {.n_tokens = P, .ids = pid, .positions = ppos, .slots = pslot, .n_seqs = 1, .qsl = qsl,
                   .seq_lens = &sl, .block_tables = pbt, .max_blocks = P / BS, .n_logits = 1, .logit_rows = &row};
    assert_int_equal(mdl_forward_batch(m, kv, &b, logits), VC_OK);
    double t0 = vc_now_s();
    for (int r = 0; r < 3; r++) assert_int_equal(mdl_forward_batch(m, kv, &b, logits), VC_OK);
    double dt = (vc_now_s() - t0) / 3;
    double params = (wb - 2.0 * (double)(V * c->hidden)) / 2.0; /* bf16/f16 layer weights */
    print_message("speed: prefill %d tokens: %.1f ms, %.0f tok/s, %.0f TFLOP/s of matmul work\n", P, dt * 1e3,
                  P / dt, 2.0 * params * P / dt * 1e-12);
    free(buf);
    free(ids);
    free(logits);
    mdl_kv_free(kv);
    mdl_free(m);
}

static double gbps_of(rt_backend *be, const rt_tensor *buf, const rt_tensor *x, rt_tensor *y, int64_t out,
                      int64_t in, int64_t ntok, double *us) {
    size_t mb = (size_t)(out * in) * 2, total = rt_tensor_nbytes(buf);
    int64_t copies = (int64_t)(total / mb);
    int K = copies < 48 ? (int)copies : 48;
    if (K < 1) return 0;
    int64_t stride = copies / K; /* spread the K matrices over the whole buffer */
    int64_t sw[2] = {out, in};
    rt_tensor yv = rt_tensor_2d(y->data, RT_F32, y->device, ntok, out), xv = rt_tensor_2d(x->data, RT_F32, x->device, ntok, in);
    void *g = NULL;
    assert_int_equal(rt_backend_graph_begin(be), VC_OK);
    for (int k = 0; k < K; k++) {
        rt_tensor w = rt_tensor_make((char *)buf->data + (size_t)(k * stride) * mb, RT_BF16, buf->device, 2, sw);
        assert_int_equal(rt_matmul(be, &yv, &xv, &w, NULL), VC_OK);
    }
    assert_int_equal(rt_backend_graph_end(be, &g), VC_OK);
    assert_int_equal(rt_backend_graph_launch(be, g), VC_OK);
    assert_int_equal(rt_backend_sync(be), VC_OK);
    int R = 8;
    double t0 = vc_now_s();
    for (int r = 0; r < R; r++) assert_int_equal(rt_backend_graph_launch(be, g), VC_OK);
    assert_int_equal(rt_backend_sync(be), VC_OK);
    double dt = (vc_now_s() - t0) / (R * K);
    rt_backend_graph_free(be, g);
    *us = dt * 1e6;
    return (double)mb / dt;
}

static void test_gemv_bandwidth(void **st) {
    (void)st;
    if (!g_gpu) skip();
    const char *e = getenv("VLLM_CUDA_SPEED");
    if (e && !strcmp(e, "0")) skip();
    static const int64_t shapes[][2] = {
        {4096, 4096}, {1024, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}, /* Llama-3-8B: q/o, k/v, qkv, gate|up, down, head */
        {4096, 1024}, {6144, 1024}, {1024, 3072}, {1024, 2048},                  /* Qwen3-0.6B: qkv, gate|up, down, o */
    };
    enum { NS = sizeof shapes / sizeof shapes[0], NV = 7 };
    const int64_t maxin = 14336, cap = (int64_t)128256 * 4096 * 2; /* bytes: the largest matrix, 1.05 GB */
    const char *en = getenv("VLLM_CUDA_SPEED_N"); /* tokens per GEMV (1..8) */
    int64_t ntok = en && atoi(en) >= 1 && atoi(en) <= 8 ? atoi(en) : 1;
    uint32_t *host = malloc((size_t)cap);
    float *x = malloc((size_t)(ntok * maxin) * 4), *ys[NV];
    assert_true(host && x);
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (int64_t i = 0; i < cap / 4; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        host[i] = (uint32_t)r & 0xBF7FBF7Fu; /* finite bf16 pairs, |v| < 2 */
    }
    for (int64_t i = 0; i < ntok * maxin; i++) x[i] = (float)((i * 7919) % 2001 - 1000) * 1e-3f;
    for (int v = 0; v < NV; v++) ys[v] = malloc((size_t)128256 * 4);
    double gb[NV][NS], us[NV][NS], bw = 0;
    for (int v = 0; v < NV; v++) {
        char val[8];
        snprintf(val, sizeof val, "%d", v);
        setenv("VLLM_CUDA_GEMV", val, 1);
        rt_backend *be = rt_backend_create(RT_DEV_CUDA, NULL);
        assert_non_null(be);
        int64_t sb[1] = {cap / 2}, sx[1] = {ntok * maxin}, sy[1] = {ntok * 128256};
        rt_tensor buf = rt_tensor_alloc(be, RT_BF16, 1, sb), dx = rt_tensor_alloc(be, RT_F32, 1, sx),
                  dy = rt_tensor_alloc(be, RT_F32, 1, sy);
        assert_true(buf.data && dx.data && dy.data);
        rt_tensor hb = rt_tensor_make(host, RT_BF16, RT_DEV_CPU, 1, sb), hx = rt_tensor_make(x, RT_F32, RT_DEV_CPU, 1, sx);
        assert_int_equal(rt_tensor_copy_bytes(be, &buf, &hb), VC_OK);
        assert_int_equal(rt_tensor_copy_bytes(be, &dx, &hx), VC_OK);
        if (v == 0) {
            rt_backend *keep = g_gpu;
            g_gpu = be;
            bw = d2d_bandwidth();
            g_gpu = keep;
        }
        for (int k = 0; k < NS; k++) gb[v][k] = gbps_of(be, &buf, &dx, &dy, shapes[k][0], shapes[k][1], ntok, &us[v][k]);
        /* agreement: 1024 x 4096 (first matrix of the buffer) against variant 0 */
        rt_tensor yv = rt_tensor_2d(dy.data, RT_F32, RT_DEV_CUDA, 1, 1024), xv = rt_tensor_2d(dx.data, RT_F32, RT_DEV_CUDA, 1, 4096);
        int64_t sw[2] = {1024, 4096};
        rt_tensor w = rt_tensor_make(buf.data, RT_BF16, RT_DEV_CUDA, 2, sw), hy = rt_tensor_1d(ys[v], RT_F32, RT_DEV_CPU, 1024);
        assert_int_equal(rt_matmul(be, &yv, &xv, &w, NULL), VC_OK);
        rt_tensor dyv = rt_tensor_1d(dy.data, RT_F32, RT_DEV_CUDA, 1024);
        assert_int_equal(rt_tensor_copy_bytes(be, &hy, &dyv), VC_OK);
        rt_backend_free_mem(be, buf.data);
        rt_backend_free_mem(be, dx.data);
        rt_backend_free_mem(be, dy.data);
        rt_backend_free(be);
        if (v > 0) {
            double em = 0, m = 1e-30;
            for (int i = 0; i < 1024; i++) {
                double d = fabs((double)ys[v][i] - ys[0][i]);
                if (!(d <= em)) em = d;
                if (fabs(ys[0][i]) > m) m = fabs(ys[0][i]);
            }
            print_message("speed: gemv variant %d vs 0: max normalised difference %.2e\n", v, em / m);
            assert_true(em / m <= 1e-5);
        }
    }
    unsetenv("VLLM_CUDA_GEMV");
    print_message("speed: gemv bf16 n=%lld, GB/s of weights (fraction of the %.0f GB/s d2d copy), us per call:\n",
                  (long long)ntok, bw * 1e-9);
    for (int k = 0; k < NS; k++) {
        print_message("speed: gemv %6lldx%-5lld", (long long)shapes[k][0], (long long)shapes[k][1]);
        for (int v = 0; v < NV; v++)
            print_message("  v%d %5.0f (%.2f) %7.1f us", v, gb[v][k] * 1e-9, bw > 0 ? gb[v][k] / bw : 0, us[v][k]);
        print_message("\n");
    }
    for (int v = 0; v < NV; v++) free(ys[v]);
    free(host);
    free(x);
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
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gemv_bandwidth), cmocka_unit_test(test_speed)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
