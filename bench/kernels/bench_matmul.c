/* bench_matmul — kernel lab for the CPU MATMUL op.
 *
 * Times rt_matmul on the CPU backend for one weight dtype and shape:
 *   decode (n=1):   GB/s of weight bytes streamed
 *   prefill (n>1):  GFLOP/s (2*n*in*out per call)
 * Usage: bench_matmul DTYPE OUT IN N THREADS [REPS] [COPIES]
 *   e.g. VLLM_CPU_ISA=avx2 ./bench_matmul q4_0 2048 8192 1 2
 * COPIES > 1: the calls rotate over that many copies of W, so with enough
 * copies (their total past the last-level cache) every call streams W from
 * DRAM as decode does (one matrix alone stays in L3 after the first call).
 * Build: see bench/kernels/Makefile (links the vllmcore static library).
 */
#include "base/err.h"
#include "runtime/ops.h"
#include "runtime/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_dtype(const char *s) {
    for (int t = 0; t < RT_DTYPE_COUNT; t++)
        if (strcmp(s, rt_dtype_name((rt_dtype)t)) == 0) return t;
    return -1;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s DTYPE OUT IN N THREADS [REPS]\n", argv[0]);
        return 2;
    }
    int dt = parse_dtype(argv[1]);
    int64_t out = atoll(argv[2]), in = atoll(argv[3]), n = atoll(argv[4]);
    int threads = atoi(argv[5]), reps = argc > 6 ? atoi(argv[6]) : 0;
    int copies = argc > 7 ? atoi(argv[7]) : 1;
    if (copies < 1) copies = 1;
    if (dt < 0 || out <= 0 || in <= 0 || n <= 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    size_t rb = rt_dtype_row_bytes((rt_dtype)dt, in);
    if (!rb) {
        fprintf(stderr, "in=%lld is not a multiple of the %s block\n", (long long)in, argv[1]);
        return 2;
    }
    float *x = malloc((size_t)(n * in) * 4), *y = malloc((size_t)(n * out) * 4);
    float *row = malloc((size_t)in * 4);
    char *w = malloc(rb * (size_t)out * (size_t)copies);
    if (!x || !y || !row || !w) return 1;
    unsigned s = 1;
    for (int64_t i = 0; i < n * in; i++) x[i] = (float)((s = s * 1103515245u + 12345u) >> 16 & 0x7fff) / 16384.0f - 1.0f;
    for (int64_t r = 0; r < out; r++) {
        for (int64_t i = 0; i < in; i++) row[i] = (float)((s = s * 1103515245u + 12345u) >> 16 & 0x7fff) / 300000.0f - 0.05f;
        rt_quant_row((rt_dtype)dt, row, w + rb * (size_t)r, in);
    }
    for (int c = 1; c < copies; c++) memcpy(w + rb * (size_t)out * (size_t)c, w, rb * (size_t)out);
    rt_backend_params p = rt_backend_params_default();
    p.n_threads = threads;
    rt_backend *be = rt_backend_create(RT_DEV_CPU, &p);
    if (!be) {
        fprintf(stderr, "%s\n", vc_err_msg());
        return 1;
    }
    rt_tensor tx = rt_tensor_2d(x, RT_F32, RT_DEV_CPU, n, in);
    rt_tensor tw = rt_tensor_2d(w, (rt_dtype)dt, RT_DEV_CPU, out, in);
    rt_tensor ty = rt_tensor_2d(y, RT_F32, RT_DEV_CPU, n, out);
    for (int i = 0; i < 3; i++)
        if (rt_matmul(be, &ty, &tx, &tw, NULL)) {
            fprintf(stderr, "%s\n", vc_err_msg());
            return 1;
        }
    double flop = 2.0 * (double)n * (double)in * (double)out;
    if (reps <= 0) { /* ~0.5 s of work, estimated from one call */
        double t0 = now_s();
        rt_matmul(be, &ty, &tx, &tw, NULL);
        double dt1 = now_s() - t0;
        reps = dt1 > 0 ? (int)(0.5 / dt1) : 100;
        if (reps < 3) reps = 3;
        if (reps > 2000) reps = 2000;
    }
    double best = 1e30, total = 0;
    for (int i = 0; i < reps; i++) {
        tw.data = w + rb * (size_t)out * (size_t)(i % copies);
        double t0 = now_s();
        rt_matmul(be, &ty, &tx, &tw, NULL);
        double d = now_s() - t0;
        total += d;
        if (d < best) best = d;
    }
    double wbytes = (double)rb * (double)out;
    const char *isa = getenv("VLLM_CPU_ISA");
    printf("%-6s isa=%-6s W[%lld,%lld]x%d n=%-4lld thr=%d  best %8.3f ms  mean %8.3f ms  "
           "%6.2f GB/s(weights, mean %.2f)  %7.2f GFLOP/s\n",
           argv[1], isa ? isa : "auto", (long long)out, (long long)in, copies, (long long)n, threads,
           best * 1e3, total / reps * 1e3, wbytes / best / 1e9, wbytes * reps / total / 1e9,
           flop / best / 1e9);
    rt_backend_free(be);
    free(x);
    free(y);
    free(row);
    free(w);
    return 0;
}
