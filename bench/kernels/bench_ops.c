/* bench_ops — kernel lab for the small CPU ops of a decode step.
 *
 * Prints microseconds per call (best of many) for:
 *   dispatch   cpu_pool_run of one empty task per thread: the pool's
 *              wake-up + join latency (ops this small run serially)
 *   rmsnorm    [1, 4096]; glu [1, 11008]; rope [1, 32, 128]
 *   attention  decode, h=32 kvh=8 hd=128 over a context of CTX (f16 cache)
 *   attention  prefill of 256 queries at n_past 0 (f32 cache)
 * Usage: bench_ops THREADS [CTX]
 */
#include "backends/cpu/cpu_threadpool.h"
#include "base/err.h"
#include "runtime/ops.h"
#include "runtime/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define TIME(label, reps, call)                                                                \
    do {                                                                                       \
        double best_ = 1e30;                                                                   \
        for (int r_ = 0; r_ < (reps); r_++) {                                                  \
            double t0_ = now_s();                                                              \
            if ((call) != 0) {                                                                 \
                fprintf(stderr, "%s: %s\n", label, vc_err_msg());                             \
                return 1;                                                                      \
            }                                                                                  \
            double d_ = now_s() - t0_;                                                         \
            if (d_ < best_) best_ = d_;                                                        \
        }                                                                                      \
        printf("%-28s %10.2f us\n", label, best_ * 1e6);                                       \
    } while (0)

static float *frand(int64_t n, float amp) {
    float *x = malloc((size_t)n * 4);
    if (!x) exit(1);
    unsigned s = 7;
    for (int64_t i = 0; i < n; i++) x[i] = amp * ((float)((s = s * 1103515245u + 12345u) >> 16 & 0x7fff) / 16384.0f - 1.0f);
    return x;
}

static void noop_task(void *ctx, int64_t t, int thread) {
    (void)ctx;
    (void)t;
    (void)thread;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s THREADS [CTX]\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[1]);
    int64_t ctx = argc > 2 ? atoll(argv[2]) : 2048;
    rt_backend_params p = rt_backend_params_default();
    p.n_threads = threads;
    rt_backend *be = rt_backend_create(RT_DEV_CPU, &p);
    if (!be) return 1;
    int nt = threads > 0 ? threads : 1;
    float *x = frand(64 * 64, 1), *w = frand(11008, 1), *y = frand(11008 * 2, 1);
    rt_tensor tx = rt_tensor_2d(x, RT_F32, RT_DEV_CPU, nt, 64), tw = rt_tensor_1d(w, RT_F32, RT_DEV_CPU, 64);
    (void)tx;
    (void)tw;
    cpu_pool *pool = cpu_pool_create(nt);
    if (!pool) return 1;
    TIME("pool dispatch (nt empty tasks)", 20000, (cpu_pool_run(pool, nt, noop_task, NULL), 0));
    cpu_pool_free(pool);
    float *h = frand(4096, 1);
    rt_tensor th = rt_tensor_2d(h, RT_F32, RT_DEV_CPU, 1, 4096), tw2 = rt_tensor_1d(w, RT_F32, RT_DEV_CPU, 4096);
    TIME("rmsnorm [1,4096]", 5000, rt_rmsnorm(be, &th, &th, &tw2, 1e-5f, 0.0f));
    rt_tensor tg = rt_tensor_2d(w, RT_F32, RT_DEV_CPU, 1, 11008), tu = rt_tensor_2d(y, RT_F32, RT_DEV_CPU, 1, 11008),
              to = rt_tensor_2d(y + 11008, RT_F32, RT_DEV_CPU, 1, 11008);
    TIME("glu silu [1,11008]", 5000, rt_glu(be, &to, &tg, &tu, RT_ACT_SILU));
    float *q = frand(256 * 32 * 128, 1), *inv = frand(64, 1), *o = frand(256 * 32 * 128, 1);
    for (int i = 0; i < 64; i++) inv[i] = powf(10000.0f, -(float)i / 64);
    int32_t pos[256];
    for (int i = 0; i < 256; i++) pos[i] = 100 + i;
    rt_tensor tq1 = rt_tensor_3d(q, RT_F32, RT_DEV_CPU, 1, 32, 128), tp = rt_tensor_1d(pos, RT_I32, RT_DEV_CPU, 1),
              ti = rt_tensor_1d(inv, RT_F32, RT_DEV_CPU, 64);
    TIME("rope [1,32,128]", 5000, rt_rope(be, &tq1, &tp, &ti, 128, true, 1.0f));
    float *kf = frand(ctx * 8 * 128, 1), *vf = frand(ctx * 8 * 128, 1);
    uint16_t *k16 = malloc((size_t)ctx * 8 * 128 * 2), *v16 = malloc((size_t)ctx * 8 * 128 * 2);
    rt_quant_row(RT_F16, kf, k16, ctx * 8 * 128);
    rt_quant_row(RT_F16, vf, v16, ctx * 8 * 128);
    rt_tensor tk = rt_tensor_3d(k16, RT_F16, RT_DEV_CPU, ctx, 8, 128), tv = rt_tensor_3d(v16, RT_F16, RT_DEV_CPU, ctx, 8, 128);
    rt_tensor to1 = rt_tensor_3d(o, RT_F32, RT_DEV_CPU, 1, 32, 128);
    rt_tensor tkf = rt_tensor_3d(kf, RT_F32, RT_DEV_CPU, ctx, 8, 128), tvf = rt_tensor_3d(vf, RT_F32, RT_DEV_CPU, ctx, 8, 128);
    char label[64];
    snprintf(label, sizeof label, "attn decode ctx=%lld f16", (long long)ctx);
    TIME(label, 200, rt_attention(be, &to1, &tq1, &tk, &tv, ctx - 1, 0.088f, 0.0f, 0));
    /* f32 cache (the CPU default): past ~4K positions it no longer fits the
     * last-level cache and the call streams it from DRAM, as decode does */
    snprintf(label, sizeof label, "attn decode ctx=%lld f32", (long long)ctx);
    TIME(label, 50, rt_attention(be, &to1, &tq1, &tkf, &tvf, ctx - 1, 0.088f, 0.0f, 0));
    int64_t np = ctx < 256 ? ctx : 256;
    rt_tensor tqp = rt_tensor_3d(q, RT_F32, RT_DEV_CPU, np, 32, 128), top = rt_tensor_3d(o, RT_F32, RT_DEV_CPU, np, 32, 128);
    snprintf(label, sizeof label, "attn prefill %lld f32", (long long)np);
    TIME(label, 5, rt_attention(be, &top, &tqp, &tkf, &tvf, 0, 0.088f, 0.0f, 0));
    rt_backend_free(be);
    free(x); free(w); free(y); free(h); free(q); free(inv); free(o); free(kf); free(vf); free(k16); free(v16);
    return 0;
}
