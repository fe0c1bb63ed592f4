/* PAGED_ATTENTION on CUDA over decode-heavy and mixed steps.
 * test_dec_kernel: the tensor-core decode kernel (cuda_flash_dec.cu,
 * forced by VLLM_CUDA_FLASH_DEC=1; its launch counter must move), with its
 * split-K as chosen, off and at 3 splits, against
 * the CPU op (normalised error <= 5e-3: q and p in the cache dtype): GQA
 * groups of 1, 2, 4 and 16 heads, hd 64 and 128, bf16 and f16 caches,
 * contexts of 1 to 1,000 keys around the 32-key tile edges, rows of
 * several queries per sequence, a window, a soft-cap, a graph of two calls
 * replayed, bf16 q against f32 q, and a bad block id flagged.
 * Mixed steps: D decode sequences (one query
 * each) followed by prompt sequences, as one call and as the model's split
 * (mdl_paged_attention: the decode prefix, then the rest with its qsl
 * rebased to 0).
 * test_mixed_correct: both forms against the CPU op (bf16 cache, 32/8 and
 * 16/8 heads, hd 128): the one call hands the whole step to the flash
 * prefill kernel (q and p rounded to bf16: ~1e-3), the split gives the
 * decode rows to the decode kernels (k_fd at these sizes: f32 q, 1e-5).
 * test_mixed_speed (skipped when VLLM_CUDA_SPEED=0): Llama-3.1-8B heads,
 * D decode rows of 1024 keys + one new 1024-token prompt, us per step's
 * attention for one call, the split, and each part alone, and the decode
 * part's GB/s of K/V ("speed: mixed ..."); then decode-only calls of 1 to
 * 256 rows with k_fd and with the tensor-core kernel ("speed: dec ...").
 * VLLM_TEST_DEC_ROWS=n (a profiler run): only the decode-only timing at n
 * rows, the other tests skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/clock.h"
#include "base/err.h"
#include "runtime/ops.h"

#include "cuda_test_util.h"

uint64_t cuda_flash_dec_launches(void);

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x51ED270B27A5D35Full;
static float rnd(void) { return cuda_test_rnd(&g_rng); } /* [-1, 1) */

enum { BS = 16 };

/* A step's device tensors: q, out (split and one-call), cache, metadata of
 * the whole step and of its two parts. */
typedef struct {
    int64_t T, S, D, h, kvh, hd, MB;
    rt_tensor q, out, k, v, bt, qsl, sl, qsl_t;
} mixed;

/* S sequences: the first D decode (q_lens 1), the rest prompt rows;
 * seq_lens / q_lens per sequence. Blocks shuffled over the cache. */
static mixed mixed_make(int64_t h, int64_t kvh, int64_t HD, rt_dtype kvt, int64_t S, int64_t D, const int32_t *sl,
                        const int32_t *ql, float **hq, void **hk, void **hv, int32_t **hbt, int32_t **hqsl) {
    mixed m = {.S = S, .D = D, .h = h, .kvh = kvh, .hd = HD};
    int32_t maxlen = 0;
    for (int64_t s = 0; s < S; s++) {
        maxlen = sl[s] > maxlen ? sl[s] : maxlen;
        m.T += ql[s];
    }
    m.MB = (maxlen + BS - 1) / BS;
    const int64_t NB = S * m.MB;
    int32_t *qsl = xmalloc((size_t)(S + 1) * 4), *qt = xmalloc((size_t)(S - D + 1) * 4), *bt = xmalloc((size_t)NB * 4);
    for (int64_t s = 0; s < S; s++) qsl[s + 1] = qsl[s] + ql[s];
    for (int64_t s = 0; s <= S - D; s++) qt[s] = qsl[D + s] - qsl[D];
    for (int64_t i = 0; i < NB; i++) bt[i] = (int32_t)i;
    for (int64_t i = NB - 1; i > 0; i--) {
        int64_t j = (int64_t)((rnd() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
        int32_t t = bt[i];
        bt[i] = bt[j];
        bt[j] = t;
    }
    int64_t sq[3] = {m.T, h, HD}, sc[4] = {NB, BS, kvh, HD}, sbt[2] = {S, m.MB}, ss[1] = {S}, sqsl[1] = {S + 1};
    int64_t sqt[1] = {S - D + 1};
    float *q = xmalloc((size_t)(m.T * h * HD) * 4);
    for (int64_t e = 0; e < m.T * h * HD; e++) q[e] = rnd();
    void *k = rand_rows(kvt, NB * BS * kvh, HD, 1.0f, rnd), *v = rand_rows(kvt, NB * BS * kvh, HD, 1.0f, rnd);
    m.q = up(q, RT_F32, 3, sq);
    m.out = rt_tensor_alloc(g_gpu, RT_F32, 3, sq);
    m.k = up(k, kvt, 4, sc);
    m.v = up(v, kvt, 4, sc);
    m.bt = up(bt, RT_I32, 2, sbt);
    m.qsl = up(qsl, RT_I32, 1, sqsl);
    m.sl = up(sl, RT_I32, 1, ss);
    m.qsl_t = up(qt, RT_I32, 1, sqt);
    free(qt);
    if (hq) *hq = q, *hk = k, *hv = v, *hbt = bt, *hqsl = qsl;
    else free(q), free(k), free(v), free(bt), free(qsl);
    return m;
}

static void mixed_free(mixed *m) {
    rt_tensor *ts[] = {&m->q, &m->out, &m->k, &m->v, &m->bt, &m->qsl, &m->sl, &m->qsl_t};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) drop(ts[i]);
}

static const float SCALE = 0.08838834764f; /* 1 / sqrt(128) */

/* Decode-kernel case: S sequences (seq_lens sl, q_lens ql) against the CPU
 * op with the tensor-core kernel forced. graph: two calls recorded, the
 * graph replayed twice; bad: a block id of sequence 0 out of range. */
static void dec_case(int64_t h, int64_t kvh, int64_t hd, rt_dtype kvt, int64_t S, const int32_t *sl, const int32_t *ql,
                     int32_t window, float softcap, bool graph, bool bad) {
    float *q;
    void *k, *v;
    int32_t *bt, *qsl;
    mixed m = mixed_make(h, kvh, hd, kvt, S, 0, sl, ql, &q, &k, &v, &bt, &qsl);
    const int64_t NB = S * m.MB, n = m.T * h * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    int64_t sq[3] = {m.T, h, hd}, sc[4] = {NB, BS, kvh, hd}, sbt[2] = {S, m.MB}, ss[1] = {S}, sqsl[1] = {S + 1};
    char what[160];
    snprintf(what, sizeof what, "dec T=%lld S=%lld h=%lld/%lld hd=%lld %s win=%d cap=%g%s%s", (long long)m.T,
             (long long)S, (long long)h, (long long)kvh, (long long)hd, rt_dtype_name(kvt), window, softcap,
             graph ? " graph" : "", bad ? " bad" : "");
    setenv("VLLM_CUDA_FLASH_DEC", "1", 1);
    const uint64_t before = cuda_flash_dec_launches();
    if (bad) {
        int32_t *b2 = xmalloc((size_t)(S * m.MB) * 4);
        memcpy(b2, bt, (size_t)(S * m.MB) * 4);
        b2[(sl[0] - 1) / BS] = (int32_t)NB; /* the block of sequence 0's last key */
        drop(&m.bt);
        m.bt = up(b2, RT_I32, 2, sbt);
        free(b2);
        assert_int_equal(
            rt_paged_attention(g_gpu, &m.out, &m.q, &m.k, &m.v, &m.bt, &m.qsl, &m.sl, scale, softcap, window), VC_OK);
        if (rt_backend_sync(g_gpu) != VC_ERR_INVALID) fail_msg("%s: bad block id not reported", what);
    } else {
        float *ref = xmalloc((size_t)n * 4), *got = xmalloc((size_t)n * 4);
        rt_tensor hq = rt_tensor_make(q, RT_F32, RT_DEV_CPU, 3, sq), ho = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 3, sq);
        rt_tensor hk = rt_tensor_make(k, kvt, RT_DEV_CPU, 4, sc), hv = rt_tensor_make(v, kvt, RT_DEV_CPU, 4, sc);
        rt_tensor hbt = rt_tensor_make(bt, RT_I32, RT_DEV_CPU, 2, sbt);
        rt_tensor hsl = rt_tensor_make((void *)sl, RT_I32, RT_DEV_CPU, 1, ss), hqsl = rt_tensor_make(qsl, RT_I32, RT_DEV_CPU, 1, sqsl);
        assert_int_equal(rt_paged_attention(g_cpu, &ho, &hq, &hk, &hv, &hbt, &hqsl, &hsl, scale, softcap, window), VC_OK);
        void *g = NULL;
        if (graph && rt_backend_has_graphs(g_gpu)) {
            assert_int_equal(rt_backend_graph_begin(g_gpu), VC_OK);
            for (int r = 0; r < 2; r++)
                assert_int_equal(rt_paged_attention(g_gpu, &m.out, &m.q, &m.k, &m.v, &m.bt, &m.qsl, &m.sl, scale,
                                                    softcap, window),
                                 VC_OK);
            assert_int_equal(rt_backend_graph_end(g_gpu, &g), VC_OK);
        }
        for (int r = 0; r < (g ? 2 : 1); r++) {
            memset(got, 0, (size_t)n * 4);
            rt_tensor hz = rt_tensor_make(got, RT_F32, RT_DEV_CPU, 3, sq);
            assert_int_equal(rt_tensor_copy_bytes(g_gpu, &m.out, &hz), VC_OK); /* stale results must not pass */
            if (g) assert_int_equal(rt_backend_graph_launch(g_gpu, g), VC_OK);
            else
                assert_int_equal(rt_paged_attention(g_gpu, &m.out, &m.q, &m.k, &m.v, &m.bt, &m.qsl, &m.sl, scale,
                                                    softcap, window),
                                 VC_OK);
            down(got, &m.out);
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            const double e = nerr(got, ref, n);
            if (!(e <= 5e-3)) fail_msg("%s: normalised error %.3e (replay %d)", what, e, r);
            if (r == 0) print_message("%s: %.3e\n", what, e);
        }
        if (g) rt_backend_graph_free(g_gpu, g);
        if (!graph && kvt == RT_BF16 && hd == 128) { /* bf16 q and out: the same within bf16 rounding */
            uint16_t *q16 = xmalloc((size_t)n * 2), *o16 = xmalloc((size_t)n * 2);
            for (int64_t e = 0; e < n; e++) {
                uint32_t u;
                memcpy(&u, &q[e], 4);
                q16[e] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
            }
            rt_tensor dq16 = up(q16, RT_BF16, 3, sq), do16 = rt_tensor_alloc(g_gpu, RT_BF16, 3, sq);
            assert_int_equal(
                rt_paged_attention(g_gpu, &do16, &dq16, &m.k, &m.v, &m.bt, &m.qsl, &m.sl, scale, softcap, window), VC_OK);
            down(o16, &do16);
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            for (int64_t e = 0; e < n; e++) {
                uint32_t u = (uint32_t)o16[e] << 16;
                memcpy(&got[e], &u, 4);
            }
            const double e = nerr(got, ref, n);
            if (!(e <= 1e-2)) fail_msg("%s, bf16 q: normalised error %.3e", what, e);
            drop(&dq16);
            drop(&do16);
            free(q16);
            free(o16);
        }
        free(ref);
        free(got);
    }
    if (cuda_flash_dec_launches() == before) fail_msg("%s: the decode kernel did not run", what);
    unsetenv("VLLM_CUDA_FLASH_DEC");
    mixed_free(&m);
    free(q), free(k), free(v), free(bt), free(qsl);
}

/* VLLM_TEST_DEC_ROWS: the decode-only timing of that many rows alone */
static int64_t only_rows(void) {
    const char *e = getenv("VLLM_TEST_DEC_ROWS");
    return e && *e ? atoll(e) : 0;
}

static void test_dec_kernel(void **st) {
    (void)st;
    NEED_GPU();
    if (only_rows()) skip();
    /* decode rows around the tile edges, a 1-key row, a long one */
    static const int32_t sl1[9] = {1, 31, 32, 33, 64, 65, 200, 777, 1000}, ql1[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    /* several queries per sequence (speculative rows, a short chunk) */
    static const int32_t sl2[3] = {40, 100, 5}, ql2[3] = {3, 1, 5};
    static const struct {
        int64_t h, kvh, hd;
        rt_dtype kvt;
    } hs[] = {{32, 8, 128, RT_BF16}, {16, 8, 128, RT_BF16}, {64, 4, 128, RT_F16}, {8, 8, 64, RT_BF16}, {28, 4, 64, RT_F16}};
    /* splits: as chosen (these small batches split), none, 3 */
    static const char *const splits[] = {NULL, "1", "3"};
    for (int k = 0; k < 3; k++) {
        if (splits[k]) setenv("VLLM_CUDA_FLASH_DEC_SPLITS", splits[k], 1);
        for (size_t x = 0; x < sizeof hs / sizeof hs[0]; x++) {
            dec_case(hs[x].h, hs[x].kvh, hs[x].hd, hs[x].kvt, 9, sl1, ql1, 0, 0.0f, false, false);
            dec_case(hs[x].h, hs[x].kvh, hs[x].hd, hs[x].kvt, 3, sl2, ql2, 0, 0.0f, false, false);
        }
        unsetenv("VLLM_CUDA_FLASH_DEC_SPLITS");
    }
    dec_case(32, 8, 128, RT_BF16, 9, sl1, ql1, 100, 0.0f, false, false); /* window */
    dec_case(16, 8, 128, RT_BF16, 9, sl1, ql1, 0, 30.0f, false, false);  /* soft-cap */
    dec_case(32, 8, 128, RT_BF16, 9, sl1, ql1, 0, 0.0f, true, false);    /* graph */
    dec_case(32, 8, 128, RT_BF16, 9, sl1, ql1, 0, 0.0f, false, true);    /* bad block id */
}

static void call_one(mixed *m) {
    assert_int_equal(rt_paged_attention(g_gpu, &m->out, &m->q, &m->k, &m->v, &m->bt, &m->qsl, &m->sl, SCALE, 0.0f, 0),
                     VC_OK);
}

/* part 1: the decode prefix, 2: the rest, 3: both (the model's split). */
static void call_split(mixed *m, int part) {
    const int64_t D = m->D, S = m->S, T = m->T;
    if (part & 1) {
        rt_tensor q0 = rt_tensor_slice0(&m->q, 0, D), o0 = rt_tensor_slice0(&m->out, 0, D);
        rt_tensor bt0 = rt_tensor_slice0(&m->bt, 0, D), qsl0 = rt_tensor_slice0(&m->qsl, 0, D + 1);
        rt_tensor sl0 = rt_tensor_slice0(&m->sl, 0, D);
        assert_int_equal(rt_paged_attention(g_gpu, &o0, &q0, &m->k, &m->v, &bt0, &qsl0, &sl0, SCALE, 0.0f, 0), VC_OK);
    }
    if (part & 2) {
        rt_tensor q1 = rt_tensor_slice0(&m->q, D, T - D), o1 = rt_tensor_slice0(&m->out, D, T - D);
        rt_tensor bt1 = rt_tensor_slice0(&m->bt, D, S - D), sl1 = rt_tensor_slice0(&m->sl, D, S - D);
        assert_int_equal(rt_paged_attention(g_gpu, &o1, &q1, &m->k, &m->v, &bt1, &m->qsl_t, &sl1, SCALE, 0.0f, 0),
                         VC_OK);
    }
}

static void test_mixed_correct(void **st) {
    (void)st;
    NEED_GPU();
    if (only_rows()) skip();
    /* 5 decode rows (1 .. 700 keys), a new 80-token prompt, a 70-token
     * chunk of a prompt at 200, a 3-token chunk */
    static const int32_t sl[8] = {37, 300, 1, 129, 700, 80, 200, 19}, ql[8] = {1, 1, 1, 1, 1, 80, 70, 3};
    static const int64_t heads[2][2] = {{32, 8}, {16, 8}}, HD = 128;
    for (int hc = 0; hc < 2; hc++) {
        const int64_t h = heads[hc][0], kvh = heads[hc][1], S = 8, D = 5;
        float *q;
        void *k, *v;
        int32_t *bt, *qsl;
        mixed m = mixed_make(h, kvh, HD, RT_BF16, S, D, sl, ql, &q, &k, &v, &bt, &qsl);
        const int64_t NB = S * m.MB, n = m.T * h * HD;
        int64_t sq[3] = {m.T, h, HD}, sc[4] = {NB, BS, kvh, HD}, sbt[2] = {S, m.MB}, ss[1] = {S}, sqsl[1] = {S + 1};
        float *ref = xmalloc((size_t)n * 4), *got = xmalloc((size_t)n * 4);
        rt_tensor hq = rt_tensor_make(q, RT_F32, RT_DEV_CPU, 3, sq), ho = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 3, sq);
        rt_tensor hk = rt_tensor_make(k, RT_BF16, RT_DEV_CPU, 4, sc), hv = rt_tensor_make(v, RT_BF16, RT_DEV_CPU, 4, sc);
        rt_tensor hbt = rt_tensor_make(bt, RT_I32, RT_DEV_CPU, 2, sbt), hsl = rt_tensor_make((void *)sl, RT_I32, RT_DEV_CPU, 1, ss);
        rt_tensor hqsl = rt_tensor_make(qsl, RT_I32, RT_DEV_CPU, 1, sqsl);
        assert_int_equal(rt_paged_attention(g_cpu, &ho, &hq, &hk, &hv, &hbt, &hqsl, &hsl, SCALE, 0.0f, 0), VC_OK);
        for (int form = 0; form < 2; form++) {
            memset(got, 0, (size_t)n * 4);
            rt_tensor hz = rt_tensor_make(got, RT_F32, RT_DEV_CPU, 3, sq);
            assert_int_equal(rt_tensor_copy_bytes(g_gpu, &m.out, &hz), VC_OK); /* stale results must not pass */
            if (form == 0) call_one(&m);
            else call_split(&m, 3);
            down(got, &m.out);
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            /* the decode rows alone, then all rows */
            const double ed = nerr(got, ref, D * h * HD), ea = nerr(got, ref, n);
            print_message("mixed %lld/%lld heads, %s: decode rows %.3e, all rows %.3e\n", (long long)h,
                          (long long)kvh, form ? "split" : "one call", ed, ea);
            if (!(ea <= 5e-3) || (form == 1 && !(ed <= 5e-3)))
                fail_msg("mixed %lld/%lld %s: error decode %.3e all %.3e", (long long)h, (long long)kvh,
                         form ? "split" : "one call", ed, ea);
        }
        mixed_free(&m);
        free(ref), free(got), free(q), free(k), free(v), free(bt), free(qsl);
    }
}

/* us per step's attention, eager, after a warm-up: form 0 one call, 1..3
 * call_split's parts. */
static double time_us(mixed *m, int form) {
    const int R = 20;
    for (int r = 0; r < 2; r++) { /* warm-up, drained before the clock starts */
        if (form == 0) call_one(m);
        else call_split(m, form);
    }
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    double t0 = vc_now_s();
    for (int r = 0; r < R; r++) {
        if (form == 0) call_one(m);
        else call_split(m, form);
    }
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    return (vc_now_s() - t0) / R * 1e6;
}

/* VLLM_TEST_DEC_ROWS: the same decode call timed in other forms, to tell
 * the kernel from its surroundings: the host's enqueue time per eager
 * call, a graph of 20 calls, and eager calls over a block table in order
 * (blocks of a row contiguous) instead of shuffled. */
static void profile_forms(mixed *m, double bytes) {
    const int R = 20;
    for (int k = 0; k < 2; k++) {
        setenv("VLLM_CUDA_FLASH_DEC", k ? "1" : "0", 1);
        const char *name = k ? "tensor-core" : "k_fd";
        call_one(m);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        double t0 = vc_now_s();
        for (int r = 0; r < R; r++) call_one(m);
        const double enq = (vc_now_s() - t0) / R * 1e6;
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        const double all = (vc_now_s() - t0) / R * 1e6;
        void *g = NULL;
        double gr = 0.0;
        if (rt_backend_has_graphs(g_gpu)) {
            assert_int_equal(rt_backend_graph_begin(g_gpu), VC_OK);
            for (int r = 0; r < R; r++) call_one(m);
            assert_int_equal(rt_backend_graph_end(g_gpu, &g), VC_OK);
            assert_int_equal(rt_backend_graph_launch(g_gpu, g), VC_OK);
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            t0 = vc_now_s();
            for (int x = 0; x < 3; x++) assert_int_equal(rt_backend_graph_launch(g_gpu, g), VC_OK);
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            gr = (vc_now_s() - t0) / (3 * R) * 1e6;
            rt_backend_graph_free(g_gpu, g);
        }
        print_message("speed: dec form %lld rows %-11s eager %7.1f us (host enqueue %6.1f us/call), graph %7.1f us = "
                      "%5.0f GB/s\n",
                      (long long)m->T, name, all, enq, gr, bytes / (gr * 1e-6) * 1e-9);
    }
    /* blocks in order: row s owns blocks s*MB .. s*MB+MB-1 */
    int32_t *bt = xmalloc((size_t)(m->S * m->MB) * 4);
    for (int64_t e = 0; e < m->S * m->MB; e++) bt[e] = (int32_t)e;
    int64_t sbt[2] = {m->S, m->MB};
    rt_tensor keep = m->bt;
    m->bt = up(bt, RT_I32, 2, sbt);
    for (int k = 0; k < 2; k++) {
        setenv("VLLM_CUDA_FLASH_DEC", k ? "1" : "0", 1);
        const double us = time_us(m, 0);
        print_message("speed: dec form %lld rows %-11s blocks in order: eager %7.1f us = %5.0f GB/s\n",
                      (long long)m->T, k ? "tensor-core" : "k_fd", us, bytes / (us * 1e-6) * 1e-9);
    }
    unsetenv("VLLM_CUDA_FLASH_DEC");
    drop(&m->bt);
    m->bt = keep;
    free(bt);
}

static void test_mixed_speed(void **st) {
    (void)st;
    NEED_GPU();
    const char *e = getenv("VLLM_CUDA_SPEED");
    if (e && !strcmp(e, "0")) skip();
    static const int64_t Ds[3] = {16, 64, 256}, HD = 128;
    for (int x = 0; x < (only_rows() ? 0 : 3); x++) {
        const int64_t D = Ds[x], S = D + 1;
        int32_t *sl = xmalloc((size_t)S * 4), *ql = xmalloc((size_t)S * 4);
        for (int64_t s = 0; s < D; s++) sl[s] = 1024, ql[s] = 1;
        sl[D] = 1024, ql[D] = 1024;
        mixed m = mixed_make(32, 8, HD, RT_BF16, S, D, sl, ql, NULL, NULL, NULL, NULL, NULL);
        const double one = time_us(&m, 0), split = time_us(&m, 3), dec = time_us(&m, 1), pr = time_us(&m, 2);
        const double gb = (double)D * 1024 * 8 * HD * 2 * 2 / (dec * 1e-6) * 1e-9;
        print_message("speed: mixed llama-8b %3lld decode rows x 1024 keys + 1024-token prompt: one call %8.1f us, "
                      "split %8.1f us (decode part %7.1f us = %5.0f GB/s, prompt part %7.1f us)\n",
                      (long long)D, one, split, dec, gb, pr);
        mixed_free(&m);
        free(sl);
        free(ql);
    }
    /* decode only: k_fd vs the tensor-core kernel (split as chosen) */
    static const int64_t Ts[9] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    for (int x = 0; x < (only_rows() ? 1 : 9); x++) {
        const int64_t S = only_rows() ? only_rows() : Ts[x];
        int32_t *sl = xmalloc((size_t)S * 4), *ql = xmalloc((size_t)S * 4);
        for (int64_t s = 0; s < S; s++) sl[s] = 1024, ql[s] = 1;
        mixed m = mixed_make(32, 8, HD, RT_BF16, S, 0, sl, ql, NULL, NULL, NULL, NULL, NULL);
        double us[3]; /* k_fd; the tensor-core kernel with its split rule and the first ("ceil") */
        for (int k = 0; k < 3; k++) {
            setenv("VLLM_CUDA_FLASH_DEC", k ? "1" : "0", 1);
            if (k == 2) setenv("VLLM_CUDA_FLASH_DEC_NSRULE", "ceil", 1);
            us[k] = time_us(&m, 0);
        }
        unsetenv("VLLM_CUDA_FLASH_DEC");
        unsetenv("VLLM_CUDA_FLASH_DEC_NSRULE");
        const double bytes = (double)S * 1024 * 8 * HD * 2 * 2;
        print_message("speed: dec llama-8b %3lld rows x 1024 keys: k_fd %7.1f us = %5.0f GB/s, tensor-core %7.1f us = "
                      "%5.0f GB/s (splits by the first rule: %7.1f us)\n",
                      (long long)S, us[0], bytes / (us[0] * 1e-6) * 1e-9, us[1], bytes / (us[1] * 1e-6) * 1e-9, us[2]);
        if (only_rows()) profile_forms(&m, bytes);
        mixed_free(&m);
        free(sl);
        free(ql);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_dec_kernel), cmocka_unit_test(test_mixed_correct),
                                       cmocka_unit_test(test_mixed_speed)};
    return cmocka_run_group_tests(tests, cuda_test_group_setup, cuda_test_group_teardown);
}
