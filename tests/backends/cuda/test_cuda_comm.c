/* Tensor-parallel pieces of the CUDA backend. NCCL collectives (runtime/comm.h): all_reduce_sum
 * (f32, bf16) and all_gather against a serial reference, many back-to-back
 * calls of changing sizes, one thread per rank.
 *
 *  - world 1 through the native path (rt_comm_group_create_native: NCCL
 *    itself, not the no-op shortcut), so NCCL init, the collectives on the
 *    backend's stream and teardown run on a one-GPU machine;
 *  - world 2 .. min(4, GPUs) when the machine has several GPUs (skipped
 *    otherwise: NCCL refuses two ranks on one GPU).
 * Values are small multiples of 0.25, so every sum is exact in f32 and bf16
 * whatever order NCCL adds them in. And the vocab-parallel EMBED
 * (rt_embed_shard) against the CPU op, bit for bit, with ids on the host
 * and on the device. Skipped without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "runtime/comm.h"
#include "runtime/dtype.h"
#include "runtime/ops.h"
#include "runtime/quant.h"

#define MAX_W 4
#define ROUNDS 24

static rt_backend *g_be[MAX_W];
static int g_ngpu;

static float val(int r, int k, size_t i) { return (float)((int)((i * 7 + (size_t)r * 13 + (size_t)k) % 97) - 48) * 0.25f; }

static size_t round_n(int k) { return (size_t)(1 + (k * 4099) % 70000); }

typedef struct {
    rt_comm *c;
    int failures;
    char err[256];
} rank_arg;

static void note(rank_arg *a, const char *what) {
    a->failures++;
    if (!a->err[0]) snprintf(a->err, sizeof a->err, "%s: %s", what, vc_err_msg());
}

/* One rank: ROUNDS of all_reduce (f32 then bf16) and all_gather on device
 * tensors, each checked on the host. */
static void *rank_main(void *p) {
    rank_arg *a = p;
    rt_comm *c = a->c;
    rt_backend *be = c->be;
    int W = c->world;
    for (int k = 0; k < ROUNDS; k++) {
        size_t n = round_n(k);
        for (int bf = 0; bf < 2; bf++) {
            rt_dtype dt = bf ? RT_BF16 : RT_F32;
            size_t es = bf ? 2 : 4;
            void *h = malloc(n * es);
            int64_t shp[1] = {(int64_t)n};
            rt_tensor d = rt_tensor_alloc(be, dt, 1, shp);
            if (!h || !d.data) {
                note(a, "alloc");
                free(h);
                return NULL;
            }
            for (size_t i = 0; i < n; i++) {
                float v = val(c->rank, k, i);
                if (bf) ((uint16_t *)h)[i] = rt_f32_to_bf16(v);
                else ((float *)h)[i] = v;
            }
            rt_tensor ht = rt_tensor_1d(h, dt, RT_DEV_CPU, (int64_t)n);
            if (rt_tensor_copy_bytes(be, &d, &ht) < 0) note(a, "upload");
            if (rt_comm_all_reduce_sum(c, &d) < 0) note(a, "all_reduce");
            if (rt_tensor_copy_bytes(be, &ht, &d) < 0 || rt_backend_sync(be) < 0) note(a, "download");
            for (size_t i = 0; i < n; i++) {
                float want = 0;
                for (int r = 0; r < W; r++) want += val(r, k, i);
                float got = bf ? rt_bf16_to_f32(((uint16_t *)h)[i]) : ((float *)h)[i];
                if (got != want) {
                    if (!a->err[0])
                        snprintf(a->err, sizeof a->err, "all_reduce %s round %d [%zu]: %g, want %g",
                                 rt_dtype_name(dt), k, i, got, want);
                    a->failures++;
                    break;
                }
            }
            rt_backend_free_mem(be, d.data);
            free(h);
        }
        /* all_gather: [n] per rank -> [W, n] rank-major */
        float *src = malloc(n * sizeof *src), *dst = malloc((size_t)W * n * sizeof *dst);
        int64_t s1[1] = {(int64_t)n}, s2[2] = {W, (int64_t)n};
        rt_tensor ds = rt_tensor_alloc(be, RT_F32, 1, s1), dd = rt_tensor_alloc(be, RT_F32, 2, s2);
        if (!src || !dst || !ds.data || !dd.data) {
            note(a, "alloc");
        } else {
            for (size_t i = 0; i < n; i++) src[i] = val(c->rank, k + 1, i);
            rt_tensor hs = rt_tensor_1d(src, RT_F32, RT_DEV_CPU, (int64_t)n);
            rt_tensor hd = rt_tensor_2d(dst, RT_F32, RT_DEV_CPU, W, (int64_t)n);
            if (rt_tensor_copy_bytes(be, &ds, &hs) < 0) note(a, "upload");
            if (rt_comm_all_gather(c, &ds, &dd) < 0) note(a, "all_gather");
            if (rt_tensor_copy_bytes(be, &hd, &dd) < 0 || rt_backend_sync(be) < 0) note(a, "download");
            for (int r = 0; r < W && !a->failures; r++)
                for (size_t i = 0; i < n; i++)
                    if (dst[(size_t)r * n + i] != val(r, k + 1, i)) {
                        snprintf(a->err, sizeof a->err, "all_gather round %d rank block %d [%zu]", k, r, i);
                        a->failures++;
                        break;
                    }
        }
        if (ds.data) rt_backend_free_mem(be, ds.data);
        if (dd.data) rt_backend_free_mem(be, dd.data);
        free(src);
        free(dst);
    }
    return NULL;
}

static void run_world(int W, bool native) {
    rt_comm *c[MAX_W];
    int rc = native ? rt_comm_group_create_native(g_be, W, c) : rt_comm_group_create(g_be, W, c);
    if (rc < 0) fail_msg("group of %d: %s", W, vc_err_msg());
    assert_string_equal(c[0]->vt->name, native || W > 1 ? "nccl" : c[0]->vt->name);
    pthread_t th[MAX_W];
    rank_arg args[MAX_W];
    for (int r = 0; r < W; r++) {
        args[r] = (rank_arg){.c = c[r]};
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &args[r]), 0);
    }
    for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
    rt_comm_group_free(c, W);
    for (int r = 0; r < W; r++)
        if (args[r].failures) fail_msg("world %d rank %d: %d failures, first: %s", W, r, args[r].failures, args[r].err);
    print_message("nccl world %d: %d rounds of all_reduce f32/bf16 + all_gather equal to the reference\n", W, ROUNDS);
}

static void test_nccl_world1(void **st) {
    (void)st;
    if (!g_ngpu) skip();
    run_world(1, true);
}

static void test_nccl_multi_gpu(void **st) {
    (void)st;
    if (g_ngpu < 2) {
        print_message("%d GPU(s): multi-GPU collectives not run\n", g_ngpu);
        skip();
    }
    for (int W = 2; W <= g_ngpu; W++) run_world(W, false);
}

static void test_bad_groups(void **st) {
    (void)st;
    if (!g_ngpu) skip();
    rt_comm *c[MAX_W];
    rt_backend *bes[2] = {g_be[0], NULL};
    assert_true(rt_comm_group_create_native(bes, 2, c) < 0); /* a rank without a backend */
    assert_true(rt_comm_group_create_native(g_be, 0, c) < 0);
}

static void test_embed_shard(void **st) {
    (void)st;
    if (!g_ngpu) skip();
    rt_backend *cpu = rt_backend_create(RT_DEV_CPU, NULL), *gpu = g_be[0];
    assert_non_null(cpu);
    enum { V = 96, D = 128, N = 50, W = 4 };
    const rt_dtype dts[] = {RT_F32, RT_BF16, RT_Q8_0, RT_Q4_K};
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        rt_dtype dt = dts[k];
        int64_t dd = dt == RT_Q4_K ? 256 : D;
        size_t rb = rt_dtype_row_bytes(dt, dd);
        float *tf = malloc(sizeof(float) * V * dd), *want = malloc(sizeof(float) * N * dd),
              *got = malloc(sizeof(float) * N * dd);
        char *tab = malloc(rb * V);
        for (int64_t i = 0; i < V * dd; i++) tf[i] = (float)((i * 37) % 101 - 50) * 0.03125f;
        for (int r = 0; r < V; r++) assert_int_equal(rt_quant_row(dt, tf + r * dd, tab + rb * r, dd), 0);
        int32_t ids[N];
        for (int i = 0; i < N; i++) ids[i] = (i * 11 + 5) % V;
        rt_tensor ht = rt_tensor_2d(tab, dt, RT_DEV_CPU, V, dd);
        ht.stride[0] = (int64_t)rb;
        int64_t ts[2] = {V, dd}, is[1] = {N}, os[2] = {N, dd};
        rt_tensor dtab = rt_tensor_alloc(gpu, dt, 2, ts), dids = rt_tensor_alloc(gpu, RT_I32, 1, is),
                  dout = rt_tensor_alloc(gpu, RT_F32, 2, os);
        assert_non_null(dtab.data);
        assert_int_equal(rt_tensor_copy_bytes(gpu, &dtab, &ht), VC_OK);
        rt_tensor hid = rt_tensor_1d(ids, RT_I32, RT_DEV_CPU, N);
        assert_int_equal(rt_tensor_copy_bytes(gpu, &dids, &hid), VC_OK);
        for (int r = 0; r < W; r++) {
            int64_t Vl = V / W;
            rt_tensor hs = rt_tensor_slice0(&ht, r * Vl, Vl), ds = rt_tensor_slice0(&dtab, r * Vl, Vl);
            rt_tensor hw = rt_tensor_2d(want, RT_F32, RT_DEV_CPU, N, dd), hg = rt_tensor_2d(got, RT_F32, RT_DEV_CPU, N, dd);
            assert_int_equal(rt_embed_shard(cpu, &hw, &hs, &hid, r * Vl), VC_OK);
            for (int host_ids = 0; host_ids < 2; host_ids++) {
                memset(got, 0xff, sizeof(float) * N * dd);
                if (rt_embed_shard(gpu, &dout, &ds, host_ids ? &hid : &dids, r * Vl) != VC_OK)
                    fail_msg("embed shard %s rank %d (%s ids): %s", rt_dtype_name(dt), r, host_ids ? "host" : "device",
                             vc_err_msg());
                assert_int_equal(rt_tensor_copy_bytes(gpu, &hg, &dout), VC_OK);
                assert_int_equal(rt_backend_sync(gpu), VC_OK);
                if (memcmp(got, want, sizeof(float) * N * dd))
                    fail_msg("embed shard %s rank %d (%s ids): cuda != cpu", rt_dtype_name(dt), r,
                             host_ids ? "host" : "device");
            }
        }
        rt_backend_free_mem(gpu, dtab.data);
        rt_backend_free_mem(gpu, dids.data);
        rt_backend_free_mem(gpu, dout.data);
        free(tf);
        free(want);
        free(got);
        free(tab);
    }
    rt_backend_free(cpu);
    print_message("vocab-parallel embed: cuda == cpu (f32, bf16, q8_0, q4_k; 4 shards; host and device ids)\n");
}

static int setup(void **st) {
    (void)st;
    for (int d = 0; d < MAX_W; d++) {
        rt_backend_params bp = rt_backend_params_default();
        bp.device_id = d;
        g_be[d] = rt_backend_create(RT_DEV_CUDA, &bp);
        if (!g_be[d]) break;
        g_ngpu++;
    }
    if (!g_ngpu) print_message("no CUDA device: %s\n", vc_err_msg());
    return 0;
}

static int teardown(void **st) {
    (void)st;
    for (int d = 0; d < g_ngpu; d++) rt_backend_free(g_be[d]);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nccl_world1),
        cmocka_unit_test(test_nccl_multi_gpu),
        cmocka_unit_test(test_bad_groups),
        cmocka_unit_test(test_embed_shard),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
