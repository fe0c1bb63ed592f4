/* tp_probe — the pieces of a tensor-parallel prefill step timed on their
 * own, one thread per rank (as the model runs them), on W accelerators:
 *
 *   tp_probe [--device cuda] [--tp W] [--n ROWS] [--d HIDDEN] [--ff FFN_PER_RANK] [--reps R]
 *
 * Defaults: cuda, W 2, the 8B prefill of scripts/gpu_tp.sh (n 8000, d 4096,
 * ff 7168 = 14336 / 2), 10 repetitions. Per repetition, in ms:
 *   - all-reduce of [n, d] bf16 and f32 (rt_comm_all_reduce_sum), with the
 *     bus bandwidth NCCL reports as busbw (bytes * 2 (W-1) / W / time);
 *   - one rank's gate|up GEMM ([n, d] x [2 ff, d] bf16 -> bf16);
 *   - that GEMM with a bf16 all-reduce of [n/2, d] started before it
 *     (rt_comm_all_reduce_start / rt_comm_wait: the overlap arch_llama.c
 *     uses), against the two one after the other;
 *   - ADD_RMSNORM over [n, d] with a bf16 addend and a bf16 dst (replicated
 *     work: every rank runs it on all n rows), and over n/W rows (a
 *     sequence-parallel rank's share);
 *   - the sequence-parallel collectives: reduce-scatter and all-gather of
 *     [n, d] bf16 in place, and the all-gather followed by the gate|up GEMM
 *     in two row halves, serial (gather, GEMM, GEMM) against overlapped
 *     (rt_comm_all_gather_start, the GEMM of the own half, wait, the other
 *     half: arch_llama.c's VLLM_TP_SP_OVERLAP=1);
 *   - the all-to-all of [n, d] bf16 (VLLM_TP_SP_A2A=1's exchange of the
 *     partials) alone, and started between the GEMMs of the two halves.
 * VLLM_TP_SYM=1 puts the bf16 buffer of the collectives in a symmetric
 * window (rt_comm_group_alloc_sym); with VLLM_TP_NCCL_CTA=zero NCCL may
 * then all-gather with copy engines (compare the overlapped gather).
 * Ranks meet at a barrier before each measurement and sync their backend
 * after it; rank 0 prints. Weights and activations are small constants:
 * the timings do not depend on the values. Exits 1 with a message when the
 * device or W accelerators are missing.
 */
#include "base/clock.h"
#include "base/err.h"
#include "runtime/comm.h"
#include "runtime/ops.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_W 8

typedef struct {
    int64_t n, d, ff;
    int reps, W;
    pthread_barrier_t bar;
    rt_comm *comms[MAX_W];
    void *sym[MAX_W], *sym2[MAX_W]; /* VLLM_TP_SYM=1: the [n, d] bf16 buffers of the collectives, symmetric */
    double ms[MAX_W][16]; /* [rank][measurement] */
    int failed;
} probe;

typedef struct {
    probe *p;
    int rank;
} rank_arg;

enum { M_AR16, M_AR32, M_GEMM, M_SERIAL, M_OVERLAP, M_NORM, M_RS16, M_AG16, M_AG_SER, M_AG_OVL, M_NORM_SP, M_A2A, M_A2A_OVL, M_AG_OOP,
       M_AG_OOP_OVL, M_COUNT };

/* A device tensor filled with v (f32 or bf16), NULL data on failure. */
static rt_tensor filled(rt_backend *be, rt_dtype dt, int64_t rows, int64_t cols, float v) {
    int64_t s[2] = {rows, cols};
    rt_tensor t = rt_tensor_alloc(be, dt, 2, s);
    if (!t.data) return t;
    size_t ne = (size_t)(rows * cols), es = dt == RT_F32 ? 4 : 2;
    void *h = malloc(ne * es);
    if (!h) {
        rt_backend_free_mem(be, t.data);
        t.data = NULL;
        return t;
    }
    uint16_t hv = rt_f32_to_bf16(v);
    for (size_t i = 0; i < ne; i++) {
        if (dt == RT_F32) ((float *)h)[i] = v;
        else ((uint16_t *)h)[i] = hv;
    }
    rt_tensor ht = rt_tensor_2d(h, dt, RT_DEV_CPU, rows, cols);
    if (rt_tensor_copy_bytes(be, &t, &ht) < 0 || rt_backend_sync(be) < 0) {
        rt_backend_free_mem(be, t.data);
        t.data = NULL;
    }
    free(h);
    return t;
}

/* Times `reps` runs of one measurement on this rank, between barriers. */
#define TIMED(p, r, slot, body)                                                                       \
    do {                                                                                               \
        pthread_barrier_wait(&(p)->bar);                                                               \
        double t0_ = vc_now_s();                                                                       \
        for (int k_ = 0; k_ < (p)->reps && ok; k_++) { body; }                                         \
        if (rt_backend_sync(be) < 0) ok = false;                                                       \
        (p)->ms[r][slot] = (vc_now_s() - t0_) * 1e3 / (p)->reps;                                       \
        pthread_barrier_wait(&(p)->bar);                                                               \
    } while (0)

static void *rank_main(void *argp) {
    rank_arg *a = argp;
    probe *p = a->p;
    int r = a->rank;
    rt_comm *c = p->comms[r];
    rt_backend *be = c->be;
    int64_t n = p->n, d = p->d, ff = p->ff, h = n / 2;
    rt_tensor a16 = filled(be, RT_BF16, n, d, 0.25f), a32 = filled(be, RT_F32, n, d, 0.25f);
    rt_tensor b16 = filled(be, RT_BF16, n, d, 0.0f); /* the all-to-all's destination */
    void *own16 = a16.data, *ownb = b16.data; /* freed here; symmetric ones go with the group */
    if (a16.data && p->sym[r]) {
        rt_tensor s16 = rt_tensor_2d(p->sym[r], RT_BF16, a16.device, n, d);
        if (rt_tensor_copy_bytes(be, &s16, &a16) < 0) s16.data = NULL;
        a16 = s16;
    }
    if (b16.data && p->sym2[r]) b16.data = p->sym2[r];
    rt_tensor x = filled(be, RT_BF16, n, d, 0.5f), w = filled(be, RT_BF16, 2 * ff, d, 0.01f);
    rt_tensor y = filled(be, RT_BF16, n, 2 * ff, 0.0f), res = filled(be, RT_F32, n, d, 1.0f);
    rt_tensor nw = filled(be, RT_F32, 1, d, 1.0f);
    bool ok = a16.data && b16.data && a32.data && x.data && w.data && y.data && res.data && nw.data;
    if (!ok) fprintf(stderr, "tp_probe rank %d: out of device memory: %s\n", r, vc_err_msg());
    rt_tensor half = rt_tensor_slice0(&a16, 0, h), nw1 = rt_tensor_1d(nw.data, RT_F32, nw.device, d);
    /* warm-up: NCCL channels, cuBLAS heuristics, the side stream */
    if (ok && (rt_comm_all_reduce_sum(c, &a16) < 0 || rt_comm_all_reduce_sum(c, &a32) < 0 ||
               rt_matmul(be, &y, &x, &w, NULL) < 0 || rt_comm_all_reduce_start(c, &half, 0) < 0 ||
               rt_comm_wait(c, 0) < 0 || rt_add_rmsnorm(be, &a16, &res, &a16, &nw1, 1e-6f, 0.0f) < 0 ||
               rt_backend_sync(be) < 0))
        ok = false;
    /* every rank takes every barrier, whatever failed (ok only skips work) */
    TIMED(p, r, M_AR16, ok = rt_comm_all_reduce_sum(c, &a16) == 0);
    TIMED(p, r, M_AR32, ok = rt_comm_all_reduce_sum(c, &a32) == 0);
    TIMED(p, r, M_GEMM, ok = rt_matmul(be, &y, &x, &w, NULL) == 0);
    TIMED(p, r, M_SERIAL, ok = rt_comm_all_reduce_sum(c, &half) == 0 && rt_matmul(be, &y, &x, &w, NULL) == 0);
    TIMED(p, r, M_OVERLAP,
          ok = rt_comm_all_reduce_start(c, &half, 0) == 0 && rt_matmul(be, &y, &x, &w, NULL) == 0 &&
               rt_comm_wait(c, 0) == 0);
    TIMED(p, r, M_NORM, ok = rt_add_rmsnorm(be, &a16, &res, &a16, &nw1, 1e-6f, 0.0f) == 0);
    /* sequence parallelism: rank r's block of n/W rows (n rounded down to W) */
    int64_t mr = n / p->W;
    rt_tensor whole = rt_tensor_slice0(&a16, 0, mr * p->W), own = rt_tensor_slice0(&a16, mr * r, mr);
    rt_tensor own_res = rt_tensor_slice0(&res, mr * r, mr);
    rt_tensor x0 = rt_tensor_slice0(&x, 0, h), x1 = rt_tensor_slice0(&x, h, n - h);
    rt_tensor y0 = rt_tensor_slice0(&y, 0, h), y1 = rt_tensor_slice0(&y, h, n - h);
    TIMED(p, r, M_RS16, ok = rt_comm_reduce_scatter_sum(c, &whole, &own) == 0);
    TIMED(p, r, M_AG16, ok = rt_comm_all_gather(c, &own, &whole) == 0);
    TIMED(p, r, M_AG_SER,
          ok = rt_comm_all_gather(c, &own, &whole) == 0 && rt_matmul(be, &y0, &x0, &w, NULL) == 0 &&
               rt_matmul(be, &y1, &x1, &w, NULL) == 0);
    TIMED(p, r, M_AG_OVL,
          ok = rt_comm_all_gather_start(c, &own, &whole, 0) == 0 && rt_matmul(be, &y0, &x0, &w, NULL) == 0 &&
               rt_comm_wait(c, 0) == 0 && rt_matmul(be, &y1, &x1, &w, NULL) == 0);
    TIMED(p, r, M_NORM_SP, ok = rt_add_rmsnorm(be, &own, &own_res, &own, &nw1, 1e-6f, 0.0f) == 0);
    /* the all-to-all of the partials (arch_llama.c VLLM_TP_SP_A2A=1), alone
     * and started before the GEMM of one row half */
    rt_tensor wb = rt_tensor_slice0(&b16, 0, mr * p->W);
    TIMED(p, r, M_A2A, ok = rt_comm_all_to_all(c, &whole, &wb) == 0);
    TIMED(p, r, M_A2A_OVL,
          ok = rt_matmul(be, &y1, &x1, &w, NULL) == 0 && rt_comm_all_to_all_start(c, &whole, &wb, 1) == 0 &&
               rt_matmul(be, &y0, &x0, &w, NULL) == 0 && rt_comm_wait(c, 1) == 0);
    /* the gather out of place from a send buffer (arch_llama.c
     * VLLM_TP_SP_AG=oop: b16, symmetric with VLLM_TP_SYM=1), alone and
     * beside the own half's GEMM */
    rt_tensor send = rt_tensor_slice0(&b16, mr * r, mr);
    TIMED(p, r, M_AG_OOP, ok = rt_comm_all_gather(c, &send, &whole) == 0);
    TIMED(p, r, M_AG_OOP_OVL,
          ok = rt_comm_all_gather_start(c, &send, &whole, 0) == 0 && rt_matmul(be, &y0, &x0, &w, NULL) == 0 &&
               rt_comm_wait(c, 0) == 0 && rt_matmul(be, &y1, &x1, &w, NULL) == 0);
    if (!ok) {
        fprintf(stderr, "tp_probe rank %d: %s\n", r, vc_err_msg());
        __atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED);
    }
    if (own16) rt_backend_free_mem(be, own16);
    if (ownb) rt_backend_free_mem(be, ownb);
    rt_tensor *all[] = {&a32, &x, &w, &y, &res, &nw};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->data) rt_backend_free_mem(be, all[i]->data);
    return NULL;
}

static double worst(const probe *p, int W, int m) {
    double v = 0;
    for (int r = 0; r < W; r++)
        if (p->ms[r][m] > v) v = p->ms[r][m];
    return v;
}

int main(int argc, char **argv) {
    const char *dev_name = "cuda";
    int W = 2;
    probe p = {.n = 8000, .d = 4096, .ff = 7168, .reps = 10};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--device")) dev_name = v;
        else if (!strcmp(k, "--tp")) W = atoi(v);
        else if (!strcmp(k, "--n")) p.n = atoll(v);
        else if (!strcmp(k, "--d")) p.d = atoll(v);
        else if (!strcmp(k, "--ff")) p.ff = atoll(v);
        else if (!strcmp(k, "--reps")) p.reps = atoi(v);
        else {
            fprintf(stderr, "usage: tp_probe [--device cuda] [--tp W] [--n ROWS] [--d HIDDEN] [--ff FFN_PER_RANK] "
                            "[--reps R]\n");
            return 1;
        }
    }
    if (argc % 2 == 0 || W < 1 || W > MAX_W || p.n < 2 || p.d < 8 || p.d % 8 || p.ff < 8 || p.reps < 1) {
        fprintf(stderr, "tp_probe: bad arguments (W 1..%d, n >= 2, d and ff multiples of 8, reps >= 1)\n", MAX_W);
        return 1;
    }
    rt_device dev = !strcmp(dev_name, "cpu") ? RT_DEV_CPU : RT_DEV_CUDA;
    rt_backends_init();
    rt_backend_params bp = rt_backend_params_default();
    rt_backend *bes[MAX_W];
    if (rt_backends_create_group(dev, W, &bp, bes) < 0) {
        fprintf(stderr, "tp_probe: %d %s backend(s): %s\n", W, dev_name, vc_err_msg());
        return 1;
    }
    if (rt_comm_group_create(bes, W, p.comms) < 0) {
        fprintf(stderr, "tp_probe: comm group: %s\n", vc_err_msg());
        rt_backends_free_group(bes, W);
        return 1;
    }
    p.W = W;
    const char *sym = getenv("VLLM_TP_SYM");
    if (sym && !strcmp(sym, "1") && (rt_comm_group_alloc_sym(p.comms, W, (size_t)(p.n * p.d) * 2, p.sym) < 0 ||
                                     rt_comm_group_alloc_sym(p.comms, W, (size_t)(p.n * p.d) * 2, p.sym2) < 0))
        fprintf(stderr, "tp_probe: no symmetric buffers (%s): ordinary memory\n", vc_err_msg());
    pthread_barrier_init(&p.bar, NULL, (unsigned)W);
    pthread_t th[MAX_W];
    rank_arg args[MAX_W];
    int started = 0;
    for (int r = 0; r < W; r++) {
        args[r] = (rank_arg){.p = &p, .rank = r};
        if (pthread_create(&th[r], NULL, rank_main, &args[r]) != 0) break;
        started++;
    }
    if (started < W) { /* the started ranks would wait at the barrier forever */
        fprintf(stderr, "tp_probe: cannot start %d threads\n", W);
        return 1;
    }
    for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&p.bar);
    rt_comm_group_free(p.comms, W);
    rt_backends_free_group(bes, W);
    if (p.failed) return 1;
    double nd = (double)(p.n * p.d), bus = 2.0 * (W - 1) / W;
    double ar16 = worst(&p, W, M_AR16), ar32 = worst(&p, W, M_AR32), g = worst(&p, W, M_GEMM);
    const char *cta = getenv("VLLM_TP_NCCL_CTA");
    printf("tp_probe W=%d n=%lld d=%lld ff/rank=%lld (%s; bf16 collectives in %s memory, NCCL CTA policy %s), ms "
           "per call, slowest rank:\n",
           W, (long long)p.n, (long long)p.d, (long long)p.ff, dev_name, p.sym[0] ? "symmetric" : "ordinary",
           cta ? cta : "default");
    printf("  all_reduce [n, d] bf16: %.3f ms (busbw %.0f GB/s); f32: %.3f ms (busbw %.0f GB/s)\n", ar16,
           nd * 2 * bus / (ar16 * 1e6), ar32, nd * 4 * bus / (ar32 * 1e6));
    printf("  gate|up GEMM [n, d] x [2ff, d] bf16: %.3f ms (%.0f TFLOP/s)\n", g,
           2.0 * (double)p.n * (double)p.d * 2.0 * (double)p.ff / (g * 1e9));
    printf("  all_reduce [n/2, d] bf16 then GEMM: %.3f ms; overlapped (start, GEMM, wait): %.3f ms\n",
           worst(&p, W, M_SERIAL), worst(&p, W, M_OVERLAP));
    printf("  add_rmsnorm [n, d] (f32 x, bf16 addend, bf16 dst): %.3f ms; own n/W rows: %.3f ms\n",
           worst(&p, W, M_NORM), worst(&p, W, M_NORM_SP));
    double rs = worst(&p, W, M_RS16), ag = worst(&p, W, M_AG16), busw = (double)(W - 1) / W;
    printf("  reduce_scatter [n, d] bf16 in place: %.3f ms (busbw %.0f GB/s); all_gather in place: %.3f ms (busbw "
           "%.0f GB/s)\n",
           rs, nd * 2 * busw / (rs * 1e6), ag, nd * 2 * busw / (ag * 1e6));
    printf("  all_gather then gate|up GEMM in two row halves: %.3f ms; overlapped (start, own half, wait, other "
           "half): %.3f ms\n",
           worst(&p, W, M_AG_SER), worst(&p, W, M_AG_OVL));
    printf("  all_to_all [n, d] bf16: %.3f ms; GEMM half, all_to_all started, GEMM other half, wait: %.3f ms (the "
           "two halves alone: see above)\n",
           worst(&p, W, M_A2A), worst(&p, W, M_A2A_OVL));
    printf("  all_gather out of place from a send buffer: %.3f ms; overlapped (start, own half, wait, other half): "
           "%.3f ms\n",
           worst(&p, W, M_AG_OOP), worst(&p, W, M_AG_OOP_OVL));
    return 0;
}
