/* The split-KV decode kernel of PAGED_ATTENTION on CUDA (k_fd,
 * cuda_paged_attn.cu) against the CPU op: single decode rows at the model
 * shapes that matter (Llama-3-8B: 32 / 8 heads, Qwen3-0.6B: 16 / 8, hd 128,
 * bf16 cache), every group size 1..8 (GM instances 1, 2, 4, 8 and G that
 * is not a power of two), hd 64 / 128 / 256, f32 / f16 / bf16 caches,
 * contexts of 1 key up to 2049 (not a multiple of any split), block tables
 * much wider than the context (most splits empty), the most splits, sliding
 * windows (which move the first split), softcap, batches of decode rows
 * with short prompt chunks among them, 64 decode rows; graph replays (the
 * split counters must be back at zero after each launch); bad block ids
 * inside the context flagged, garbage past the context ignored. Every
 * case runs with each kernel variant (VLLM_CUDA_FD_V2 = 0: the original;
 * 1: v2 at every batch size, with VLLM_CUDA_FD_PRE = 0 waiting for the
 * previous kernel first, and 1 reading metadata and old K/V before that,
 * the latter also with VLLM_CUDA_FD_MPF = 0: split merge without the
 * early partial loads; and v1 and the pre-wait v2 again with
 * VLLM_CUDA_FD_SPLIT=width, the old split rule).
 * test_fd_wide_table: 131,072-key block tables over contexts of 1 .. 2048
 * keys (each row's split length from its own length), eager and in one
 * graph replayed after new lengths are copied to the device.
 * test_fd_store_then_attend: KV stores of the new tokens' rows right
 * before the attention (eager and in a graph), over stale rows in those
 * slots: the pre-wait variant must see the stored rows.
 *
 * test_fd_speed (skipped when VLLM_CUDA_SPEED=0) times the kernel in a CUDA
 * graph of 32 calls over 32 different caches (one per "layer", so the L2
 * holds none of them) for each VLLM_CUDA_FD_CTAS = 1..4 and each variant,
 * and prints us per call and GB/s of K/V read; then Llama-3-8B T = 1 at
 * 1000 keys under a 131,072-key table and under its own, with the old and
 * the per-row split rule ("speed: fd llama-8b T=1 ctx 1000 table ...").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/clock.h"
#include "base/err.h"
#include "runtime/ops.h"
#include "runtime/quant.h"

#include "cuda_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float rnd(void) { return cuda_test_rnd(&g_rng); } /* [-1, 1) */

typedef struct {
    int64_t h, kvh, hd, B;
    rt_dtype kvt;
    int32_t window;
    float softcap;
    int S;
    const int32_t *seq_lens, *q_lens;
    int64_t extra_blocks; /* block-table width beyond the longest context */
    int bad;              /* 1: a block id inside the context out of range; 2: seq_lens[0] past the table */
    int graph;            /* run through a graph of two calls, replayed three times */
} fd_case;

/* k_fd variants (VLLM_CUDA_FD_V2, VLLM_CUDA_FD_PRE, VLLM_CUDA_FD_MPF and
 * VLLM_CUDA_FD_SPLIT, read by the backend at each launch): v1, v2, v3, v3
 * without early partial loads, each with the per-row split rule (the
 * default), then v1 and v3 with the old rule (split length from the
 * block-table width). */
enum { NVAR = 6 };
static const char *const g_v2[NVAR] = {"0", "1", "1", "1", "0", "1"}, *const g_pre[NVAR] = {"0", "0", "1", "1", "0", "1"},
                         *const g_mpf[NVAR] = {"1", "1", "1", "0", "1", "1"},
                         *const g_split[NVAR] = {"row", "row", "row", "row", "width", "width"};

static void set_var(int var) {
    setenv("VLLM_CUDA_FD_V2", g_v2[var], 1);
    setenv("VLLM_CUDA_FD_PRE", g_pre[var], 1);
    setenv("VLLM_CUDA_FD_MPF", g_mpf[var], 1);
    setenv("VLLM_CUDA_FD_SPLIT", g_split[var], 1);
}

static void unset_var(void) {
    unsetenv("VLLM_CUDA_FD_V2");
    unsetenv("VLLM_CUDA_FD_PRE");
    unsetenv("VLLM_CUDA_FD_MPF");
    unsetenv("VLLM_CUDA_FD_SPLIT");
}

/* One case against the CPU op (normalised error <= 1e-5) with each k_fd
 * variant; the block table past each context holds garbage that must never
 * be read as an error. */
static void run_case(const fd_case *c) {
    int64_t maxlen = 0, T = 0;
    for (int s = 0; s < c->S; s++) {
        maxlen = c->seq_lens[s] > maxlen ? c->seq_lens[s] : maxlen;
        T += c->q_lens[s];
    }
    const int64_t MB = (maxlen + c->B - 1) / c->B + c->extra_blocks, NB = c->S * MB + 1;
    const int64_t h = c->h, hd = c->hd;
    int32_t *qsl = xmalloc((size_t)(c->S + 1) * 4), *bt = xmalloc((size_t)(c->S * MB) * 4);
    int32_t *perm = xmalloc((size_t)NB * 4), *sl = xmalloc((size_t)c->S * 4);
    for (int s = 0; s < c->S; s++) qsl[s + 1] = qsl[s] + c->q_lens[s];
    memcpy(sl, c->seq_lens, (size_t)c->S * 4);
    for (int64_t i = 0; i < NB; i++) perm[i] = (int32_t)i;
    for (int64_t i = NB - 1; i > 0; i--) {
        int64_t j = (int64_t)((rnd() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int64_t used = 0;
    for (int s = 0; s < c->S; s++)
        for (int64_t b = 0; b < MB; b++)
            bt[s * MB + b] = b * c->B < sl[s] ? perm[used++] : (b % 3 == 0 ? -1 : (int32_t)(NB + 5 + b));
    int64_t sq[3] = {T, h, hd}, sc[4] = {NB, c->B, c->kvh, hd}, sbt[2] = {c->S, MB}, ssl[1] = {c->S},
            sqsl[1] = {c->S + 1};
    size_t qn = (size_t)(T * h * hd);
    float *q = xmalloc(qn * 4), *ref = xmalloc(qn * 4), *got = xmalloc(qn * 4);
    for (size_t e = 0; e < qn; e++) q[e] = rnd();
    void *k = rand_rows(c->kvt, NB * c->B * c->kvh, hd, 1.0f, rnd), *v = rand_rows(c->kvt, NB * c->B * c->kvh, hd, 1.0f, rnd);
    float scale = 2.0f / sqrtf((float)hd);
    char what[160];
    snprintf(what, sizeof what, "T=%lld S=%d h=%lld/%lld hd=%lld B=%lld win=%d cap=%g %s maxlen=%lld MB=%lld",
             (long long)T, c->S, (long long)h, (long long)c->kvh, (long long)hd, (long long)c->B, c->window,
             c->softcap, rt_dtype_name(c->kvt), (long long)maxlen, (long long)MB);
    rt_tensor dq = up(q, RT_F32, 3, sq), dk = up(k, c->kvt, 4, sc), dv = up(v, c->kvt, 4, sc);
    rt_tensor dqsl = up(qsl, RT_I32, 1, sqsl), dout = rt_tensor_alloc(g_gpu, RT_F32, 3, sq);
    if (c->bad == 1) { /* the block of sequence 0's last key */
        bt[(sl[0] - 1) / c->B] = (int32_t)NB;
    } else if (c->bad == 2) {
        sl[0] = (int32_t)(MB * c->B + 1);
    }
    rt_tensor dbt = up(bt, RT_I32, 2, sbt), dsl = up(sl, RT_I32, 1, ssl);
    if (!c->bad) {
        rt_tensor hq = rt_tensor_make(q, RT_F32, RT_DEV_CPU, 3, sq), ho = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 3, sq);
        rt_tensor hk = rt_tensor_make(k, c->kvt, RT_DEV_CPU, 4, sc), hv = rt_tensor_make(v, c->kvt, RT_DEV_CPU, 4, sc);
        rt_tensor hbt = rt_tensor_make(bt, RT_I32, RT_DEV_CPU, 2, sbt);
        rt_tensor hqsl = rt_tensor_make(qsl, RT_I32, RT_DEV_CPU, 1, sqsl), hsl = rt_tensor_make(sl, RT_I32, RT_DEV_CPU, 1, ssl);
        assert_int_equal(rt_paged_attention(g_cpu, &ho, &hq, &hk, &hv, &hbt, &hqsl, &hsl, scale, c->softcap, c->window),
                         VC_OK);
    }
    for (int var = 0; var < NVAR; var++) {
        set_var(var);
        if (c->bad) {
            assert_int_equal(
                rt_paged_attention(g_gpu, &dout, &dq, &dk, &dv, &dbt, &dqsl, &dsl, scale, c->softcap, c->window),
                VC_OK);
            if (rt_backend_sync(g_gpu) != VC_ERR_INVALID)
                fail_msg("%s var %d: bad=%d not reported", what, var, c->bad);
            continue;
        }
        int reps = 1;
        void *g = NULL;
        if (c->graph && rt_backend_has_graphs(g_gpu)) {
            assert_int_equal(rt_backend_graph_begin(g_gpu), VC_OK);
            for (int r = 0; r < 2; r++)
                assert_int_equal(
                    rt_paged_attention(g_gpu, &dout, &dq, &dk, &dv, &dbt, &dqsl, &dsl, scale, c->softcap, c->window),
                    VC_OK);
            assert_int_equal(rt_backend_graph_end(g_gpu, &g), VC_OK);
            reps = 3;
        }
        for (int r = 0; r < reps; r++) {
            memset(got, 0, qn * 4);
            rt_tensor hz = rt_tensor_make(got, RT_F32, RT_DEV_CPU, 3, sq);
            assert_int_equal(rt_tensor_copy_bytes(g_gpu, &dout, &hz), VC_OK); /* stale results must not pass */
            if (g) assert_int_equal(rt_backend_graph_launch(g_gpu, g), VC_OK);
            else
                assert_int_equal(
                    rt_paged_attention(g_gpu, &dout, &dq, &dk, &dv, &dbt, &dqsl, &dsl, scale, c->softcap, c->window),
                    VC_OK);
            down(got, &dout);
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            double e = nerr(got, ref, (int64_t)qn);
            if (!(e <= 1e-5)) fail_msg("%s var %d: normalised error %.3e (replay %d)", what, var, e, r);
        }
        if (g) rt_backend_graph_free(g_gpu, g);
    }
    unset_var();
    drop(&dq);
    drop(&dk);
    drop(&dv);
    drop(&dbt);
    drop(&dqsl);
    drop(&dsl);
    drop(&dout);
    free(q);
    free(ref);
    free(got);
    free(k);
    free(v);
    free(qsl);
    free(bt);
    free(perm);
    free(sl);
}

static void one(int64_t h, int64_t kvh, int64_t hd, rt_dtype kvt, int32_t len, int32_t window, float softcap,
                int64_t extra) {
    const int32_t one_q = 1;
    fd_case c = {h, kvh, hd, 16, kvt, window, softcap, 1, &len, &one_q, extra, 0, 0};
    run_case(&c);
}

/* Single decode rows: model shapes, contexts, group sizes, dtypes. */
static void test_fd_decode_row(void **st) {
    (void)st;
    NEED_GPU();
    static const int32_t lens[] = {1, 17, 640, 2049};
    for (int i = 0; i < 4; i++) {
        one(32, 8, 128, RT_BF16, lens[i], 0, 0.0f, 1); /* Llama-3-8B */
        one(16, 8, 128, RT_BF16, lens[i], 0, 0.0f, 0); /* Qwen3-0.6B */
    }
    one(32, 8, 128, RT_BF16, 2048, 0, 0.0f, 0);
    one(8, 8, 128, RT_F16, 300, 0, 0.0f, 2);   /* G 1 */
    one(32, 4, 128, RT_BF16, 1000, 0, 0.0f, 0); /* G 8 */
    one(6, 2, 64, RT_F32, 129, 0, 0.0f, 0);     /* G 3 */
    one(10, 2, 256, RT_BF16, 77, 0, 0.0f, 3);   /* G 5, hd 256 */
    one(14, 2, 128, RT_F16, 513, 0, 0.0f, 0);   /* G 7 */
    one(8, 1, 256, RT_F32, 1500, 0, 0.0f, 0);   /* one kv head: the most splits */
    one(4, 4, 64, RT_BF16, 999, 0, 0.0f, 0);    /* G 1, hd 64 */
    one(16, 4, 64, RT_F16, 260, 0, 0.0f, 0);    /* G 4, hd 64 */
    one(16, 2, 256, RT_F16, 700, 0, 20.0f, 0);  /* G 8, hd 256, softcap */
    one(32, 8, 128, RT_BF16, 5, 0, 0.0f, 255);  /* table 4096 keys wide, 5 used: splits empty */
    one(16, 8, 128, RT_F32, 40, 0, 0.0f, 127);
}

/* Sliding windows (the first split starts at hi - window + 1) and softcap. */
static void test_fd_window(void **st) {
    (void)st;
    NEED_GPU();
    one(32, 8, 128, RT_BF16, 2049, 100, 0.0f, 0);
    one(32, 8, 128, RT_BF16, 2049, 1000, 30.0f, 0);
    one(16, 8, 128, RT_BF16, 640, 639, 0.0f, 0);
    one(8, 2, 64, RT_F32, 300, 33, 0.0f, 4);
    one(6, 2, 256, RT_F16, 90, 4096, 50.0f, 0); /* window wider than the context */
}

/* Batches: decode rows of different lengths, prompt chunks among them. */
static void test_fd_batch(void **st) {
    (void)st;
    NEED_GPU();
    const int32_t sl1[5] = {1, 700, 33, 2048, 129}, q1[5] = {1, 1, 1, 1, 1};
    fd_case c1 = {32, 8, 128, 16, RT_BF16, 0, 0.0f, 5, sl1, q1, 1, 0, 0};
    run_case(&c1);
    const int32_t q2[5] = {1, 3, 1, 5, 1};
    fd_case c2 = {16, 8, 128, 16, RT_BF16, 200, 0.0f, 5, sl1, q2, 0, 0, 0};
    run_case(&c2);
    fd_case c3 = {12, 4, 64, 4, RT_F16, 0, 10.0f, 5, sl1, q2, 3, 0, 0};
    run_case(&c3);
    /* 64 decode rows of up to 1024 keys (one split per row and kv head) */
    int32_t sl4[64], q4[64];
    for (int s = 0; s < 64; s++) {
        sl4[s] = 1 + (int32_t)((rnd() + 1.0f) * 511.5f);
        q4[s] = 1;
    }
    sl4[7] = 1024;
    fd_case c4 = {16, 8, 128, 16, RT_BF16, 0, 0.0f, 64, sl4, q4, 0, 0, 0};
    run_case(&c4);
    fd_case c5 = {8, 2, 128, 16, RT_F32, 0, 0.0f, 16, sl4, q4, 2, 0, 0}; /* 32 CTAs per split: some splits */
    run_case(&c5);
}

/* Graph replays (split counters back at zero) and the error flags. */
static void test_fd_graph_and_flags(void **st) {
    (void)st;
    NEED_GPU();
    const int32_t len = 2049, q1 = 1, lens2[3] = {640, 5, 1200}, q3[3] = {1, 1, 1};
    fd_case c = {32, 8, 128, 16, RT_BF16, 0, 0.0f, 1, &len, &q1, 0, 0, 1};
    run_case(&c);
    fd_case c2 = {16, 8, 128, 16, RT_BF16, 0, 0.0f, 3, lens2, q3, 1, 0, 1};
    run_case(&c2);
    fd_case c3 = {32, 8, 128, 16, RT_BF16, 0, 0.0f, 3, lens2, q3, 1, 1, 0}; /* bad block id */
    run_case(&c3);
    fd_case c4 = {32, 8, 128, 16, RT_BF16, 0, 0.0f, 3, lens2, q3, 1, 2, 0}; /* seq_lens past the table */
    run_case(&c4);
    fd_case c5 = {8, 1, 256, 16, RT_F32, 0, 0.0f, 1, &len, &q1, 0, 1, 0};
    run_case(&c5);
}

/* Wide block tables (vllm serve with a model's full context: 131,072 keys
 * = 8192 blocks of 16 per row) over short real contexts. R rounds of
 * lengths (lens[r * S + s]) for one batch shape: each round eagerly, then
 * one graph captured at round 0's lengths and replayed after the lengths
 * of each round are copied to the device (as decode steps do), each
 * variant, against the CPU op. Blocks exist for the longest length of
 * each sequence over the rounds; the table past them holds garbage. */
typedef struct {
    int64_t h, kvh, hd;
    rt_dtype kvt;
    int32_t window;
    int S, R;
    const int32_t *q_lens, *lens;
} fd_wide;

enum { WIDE_MB = 131072 / 16 };

static void run_wide(const fd_wide *c) {
    const int64_t B = 16, MB = WIDE_MB, h = c->h, hd = c->hd, S = c->S, R = c->R;
    int64_t T = 0, NB = 1;
    int32_t *need = xmalloc((size_t)S * 4), *qsl = xmalloc((size_t)(S + 1) * 4);
    for (int64_t s = 0; s < S; s++) {
        int32_t m = 0;
        for (int64_t r = 0; r < R; r++) m = c->lens[r * S + s] > m ? c->lens[r * S + s] : m;
        need[s] = (int32_t)((m + B - 1) / B);
        NB += need[s];
        T += c->q_lens[s];
        qsl[s + 1] = qsl[s] + c->q_lens[s];
    }
    int32_t *bt = xmalloc((size_t)(S * MB) * 4), *perm = xmalloc((size_t)NB * 4);
    for (int64_t i = 0; i < NB; i++) perm[i] = (int32_t)i;
    for (int64_t i = NB - 1; i > 0; i--) {
        int64_t j = (int64_t)((rnd() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int64_t used = 0;
    for (int64_t s = 0; s < S; s++)
        for (int64_t b = 0; b < MB; b++)
            bt[s * MB + b] = b < need[s] ? perm[used++] : (b % 3 == 0 ? -1 : (int32_t)(NB + 5 + b % 1000));
    const int64_t sq[3] = {T, h, hd}, sc[4] = {NB, B, c->kvh, hd}, sbt[2] = {S, MB}, ssl[1] = {S}, sqsl[1] = {S + 1};
    const size_t qn = (size_t)(T * h * hd);
    float *q = xmalloc(qn * 4), *ref = xmalloc(qn * (size_t)R * 4), *got = xmalloc(qn * 4);
    for (size_t e = 0; e < qn; e++) q[e] = rnd();
    void *k = rand_rows(c->kvt, NB * B * c->kvh, hd, 1.0f, rnd), *v = rand_rows(c->kvt, NB * B * c->kvh, hd, 1.0f, rnd);
    const float scale = 1.0f / sqrtf((float)hd);
    rt_tensor hq = rt_tensor_make(q, RT_F32, RT_DEV_CPU, 3, sq);
    rt_tensor hk = rt_tensor_make(k, c->kvt, RT_DEV_CPU, 4, sc), hv = rt_tensor_make(v, c->kvt, RT_DEV_CPU, 4, sc);
    rt_tensor hbt = rt_tensor_make(bt, RT_I32, RT_DEV_CPU, 2, sbt), hqsl = rt_tensor_make(qsl, RT_I32, RT_DEV_CPU, 1, sqsl);
    for (int64_t r = 0; r < R; r++) {
        rt_tensor ho = rt_tensor_make(ref + (size_t)r * qn, RT_F32, RT_DEV_CPU, 3, sq);
        rt_tensor hsl = rt_tensor_make((void *)(c->lens + r * S), RT_I32, RT_DEV_CPU, 1, ssl);
        assert_int_equal(rt_paged_attention(g_cpu, &ho, &hq, &hk, &hv, &hbt, &hqsl, &hsl, scale, 0.0f, c->window),
                         VC_OK);
    }
    rt_tensor dq = up(q, RT_F32, 3, sq), dk = up(k, c->kvt, 4, sc), dv = up(v, c->kvt, 4, sc);
    rt_tensor dbt = up(bt, RT_I32, 2, sbt), dqsl = up(qsl, RT_I32, 1, sqsl), dsl = up(c->lens, RT_I32, 1, ssl);
    rt_tensor dout = rt_tensor_alloc(g_gpu, RT_F32, 3, sq);
    const bool graphs = rt_backend_has_graphs(g_gpu);
    for (int var = 0; var < NVAR; var++) {
        set_var(var);
        for (int mode = 0; mode < (graphs ? 2 : 1); mode++) { /* 0 eager, 1 one graph replayed */
            void *g = NULL;
            if (mode == 1) {
                rt_tensor h0 = rt_tensor_make((void *)c->lens, RT_I32, RT_DEV_CPU, 1, ssl);
                assert_int_equal(rt_tensor_copy_bytes(g_gpu, &dsl, &h0), VC_OK);
                assert_int_equal(rt_backend_graph_begin(g_gpu), VC_OK);
                assert_int_equal(
                    rt_paged_attention(g_gpu, &dout, &dq, &dk, &dv, &dbt, &dqsl, &dsl, scale, 0.0f, c->window), VC_OK);
                assert_int_equal(rt_backend_graph_end(g_gpu, &g), VC_OK);
            }
            for (int64_t r = 0; r < R; r++) {
                rt_tensor hsl = rt_tensor_make((void *)(c->lens + r * S), RT_I32, RT_DEV_CPU, 1, ssl);
                assert_int_equal(rt_tensor_copy_bytes(g_gpu, &dsl, &hsl), VC_OK); /* this step's lengths */
                memset(got, 0, qn * 4);
                rt_tensor hz = rt_tensor_make(got, RT_F32, RT_DEV_CPU, 3, sq);
                assert_int_equal(rt_tensor_copy_bytes(g_gpu, &dout, &hz), VC_OK); /* stale results must not pass */
                if (g) assert_int_equal(rt_backend_graph_launch(g_gpu, g), VC_OK);
                else
                    assert_int_equal(
                        rt_paged_attention(g_gpu, &dout, &dq, &dk, &dv, &dbt, &dqsl, &dsl, scale, 0.0f, c->window),
                        VC_OK);
                down(got, &dout);
                assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
                double e = nerr(got, ref + (size_t)r * qn, (int64_t)qn);
                if (!(e <= 1e-5))
                    fail_msg("wide table T=%lld S=%lld h=%lld/%lld hd=%lld %s win=%d: var %d %s round %lld "
                             "(first len %d): normalised error %.3e",
                             (long long)T, (long long)S, (long long)h, (long long)c->kvh, (long long)hd,
                             rt_dtype_name(c->kvt), c->window, var, g ? "graph" : "eager", (long long)r,
                             c->lens[r * S], e);
            }
            if (g) rt_backend_graph_free(g_gpu, g);
        }
    }
    unset_var();
    drop(&dq);
    drop(&dk);
    drop(&dv);
    drop(&dbt);
    drop(&dqsl);
    drop(&dsl);
    drop(&dout);
    free(q);
    free(ref);
    free(got);
    free(k);
    free(v);
    free(qsl);
    free(bt);
    free(perm);
    free(need);
}

/* Short contexts (1 .. 2048 keys, chunk multiples among them) under
 * 131,072-key tables: T = 1, 4 decode rows, 5 mixed rows, one sequence of 4
 * new tokens (its rows have different contexts), a window; GQA 4 and 2,
 * bf16 and f32 caches. */
static void test_fd_wide_table(void **st) {
    (void)st;
    NEED_GPU();
    static const int32_t q1[5] = {1, 1, 1, 1, 1}, q4[1] = {4};
    static const int32_t l1[5] = {1, 17, 640, 1000, 2048};
    fd_wide w1 = {32, 8, 128, RT_BF16, 0, 1, 5, q1, l1}; /* Llama-3-8B, T = 1, one length per round */
    run_wide(&w1);
    fd_wide w2 = {16, 8, 128, RT_F32, 0, 1, 5, q1, l1}; /* GQA 2, f32 */
    run_wide(&w2);
    static const int32_t l4[3 * 4] = {17, 1000, 2048, 1, 2048, 1, 640, 1000, 32, 64, 1056, 33};
    fd_wide w3 = {16, 8, 128, RT_BF16, 0, 4, 3, q1, l4}; /* Qwen3-0.6B, T = 4 */
    run_wide(&w3);
    fd_wide w4 = {32, 8, 128, RT_F32, 0, 4, 3, q1, l4}; /* GQA 4, f32, T = 4 */
    run_wide(&w4);
    fd_wide w5 = {32, 8, 128, RT_BF16, 700, 4, 3, q1, l4}; /* a window below some contexts */
    run_wide(&w5);
    static const int32_t l5[3 * 5] = {1, 17, 640, 1000, 2048, 2048, 1, 17, 640, 1000, 1024, 2047, 2, 256, 31};
    fd_wide w6 = {32, 8, 128, RT_BF16, 0, 5, 3, q1, l5}; /* 5 mixed rows */
    run_wide(&w6);
    static const int32_t l6[4] = {640, 4, 1000, 2048};
    fd_wide w7 = {16, 8, 128, RT_BF16, 0, 1, 4, q4, l6}; /* one sequence, 4 new tokens */
    run_wide(&w7);
    fd_wide w8 = {32, 8, 128, RT_F32, 0, 1, 4, q4, l6};
    run_wide(&w8);
    /* T = 1 at the edges of the rule on an H200 (grid 33 splits; chunk_min
     * 32 for bf16, 16 for f32): n = 33 x 32 (every split active, len =
     * chunk_min), one more (len 40, 27 splits), 33 x 16 and one more. */
    static const int32_t l7[8] = {1056, 1057, 528, 529, 32, 33, 2047, 2};
    fd_wide w9 = {32, 8, 128, RT_BF16, 0, 1, 8, q1, l7};
    run_wide(&w9);
    fd_wide w10 = {16, 8, 128, RT_F32, 0, 1, 8, q1, l7};
    run_wide(&w10);
    print_message("wide table: 10 batches x %d variants, eager and graph replays: all match the CPU op\n", NVAR);
}

/* KV_STORE of K, then of V (or V then K), then the attention, eager and as
 * a graph, against the same three ops on the CPU. The slots of the new
 * tokens hold stale random rows before the stores, so a kernel that read
 * them before the store finished would differ. Sequences of 640, 5 and
 * 1201 keys with 1, 3 and 1 new tokens (T = 5), 32 / 8 heads, hd 128, bf16. */
static void test_fd_store_then_attend(void **st) {
    (void)st;
    NEED_GPU();
    enum { S = 3, T = 5, H = 32, KVH = 8, HD = 128, B = 16 };
    const int32_t sl[S] = {640, 5, 1201}, ql[S] = {1, 3, 1};
    const int64_t MB = (1201 + B - 1) / B + 1, NB = S * MB;
    int32_t qsl[S + 1] = {0}, *bt = xmalloc((size_t)(S * MB) * 4), slots[T];
    for (int s = 0; s < S; s++) qsl[s + 1] = qsl[s] + ql[s];
    for (int64_t e = 0; e < S * MB; e++) bt[e] = (int32_t)((e * 5 + 3) % NB); /* a permutation (NB = 231 = 3 * 7 * 11) */
    for (int s = 0; s < S; s++)
        for (int t = 0; t < ql[s]; t++) {
            const int pos = sl[s] - ql[s] + t;
            slots[qsl[s] + t] = bt[s * MB + pos / B] * B + pos % B;
        }
    const int64_t sq[3] = {T, H, HD}, skv[3] = {T, KVH, HD}, sc[4] = {NB, B, KVH, HD}, sbt[2] = {S, MB},
                  ssl[1] = {S}, sqsl[1] = {S + 1}, sslot[1] = {T};
    const size_t qn = (size_t)T * H * HD, kn = (size_t)T * KVH * HD, cn = (size_t)NB * B * KVH * HD;
    float *q = xmalloc(qn * 4), *kx = xmalloc(kn * 4), *vx = xmalloc(kn * 4), *ref = xmalloc(qn * 4),
          *got = xmalloc(qn * 4);
    for (size_t e = 0; e < qn; e++) q[e] = rnd();
    for (size_t e = 0; e < kn; e++) kx[e] = 2.0f * rnd(), vx[e] = 2.0f * rnd();
    void *k0 = rand_rows(RT_BF16, NB * B * KVH, HD, 1.0f, rnd), *v0 = rand_rows(RT_BF16, NB * B * KVH, HD, 1.0f, rnd);
    void *kh = xmalloc(cn * 2), *vh = xmalloc(cn * 2);
    memcpy(kh, k0, cn * 2);
    memcpy(vh, v0, cn * 2);
    const float scale = 1.0f / sqrtf((float)HD);
    {
        rt_tensor hk = rt_tensor_make(kh, RT_BF16, RT_DEV_CPU, 4, sc), hv = rt_tensor_make(vh, RT_BF16, RT_DEV_CPU, 4, sc);
        rt_tensor hkx = rt_tensor_make(kx, RT_F32, RT_DEV_CPU, 3, skv), hvx = rt_tensor_make(vx, RT_F32, RT_DEV_CPU, 3, skv);
        rt_tensor hsl = rt_tensor_make(slots, RT_I32, RT_DEV_CPU, 1, sslot);
        rt_tensor hq = rt_tensor_make(q, RT_F32, RT_DEV_CPU, 3, sq), ho = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 3, sq);
        rt_tensor hbt = rt_tensor_make(bt, RT_I32, RT_DEV_CPU, 2, sbt);
        rt_tensor hqsl = rt_tensor_make(qsl, RT_I32, RT_DEV_CPU, 1, sqsl);
        rt_tensor hlen = rt_tensor_make((void *)sl, RT_I32, RT_DEV_CPU, 1, ssl);
        assert_int_equal(rt_kv_store(g_cpu, &hk, &hkx, &hsl), VC_OK);
        assert_int_equal(rt_kv_store(g_cpu, &hv, &hvx, &hsl), VC_OK);
        assert_int_equal(rt_paged_attention(g_cpu, &ho, &hq, &hk, &hv, &hbt, &hqsl, &hlen, scale, 0.0f, 0), VC_OK);
    }
    rt_tensor dq = up(q, RT_F32, 3, sq), dkx = up(kx, RT_F32, 3, skv), dvx = up(vx, RT_F32, 3, skv);
    rt_tensor dk = up(k0, RT_BF16, 4, sc), dv = up(v0, RT_BF16, 4, sc), dbt = up(bt, RT_I32, 2, sbt);
    rt_tensor dqsl = up(qsl, RT_I32, 1, sqsl), dsl = up(sl, RT_I32, 1, ssl), dslot = up(slots, RT_I32, 1, sslot);
    rt_tensor dout = rt_tensor_alloc(g_gpu, RT_F32, 3, sq);
    for (int var = 0; var < NVAR; var++) {
        set_var(var);
        for (int mode = 0; mode < 4; mode++) { /* bit 0: V stored last (else K); bit 1: a graph */
            const bool vlast = mode & 1, graph = (mode & 2) && rt_backend_has_graphs(g_gpu);
            if ((mode & 2) && !graph) continue;
            rt_tensor hk = rt_tensor_make(k0, RT_BF16, RT_DEV_CPU, 4, sc), hv = rt_tensor_make(v0, RT_BF16, RT_DEV_CPU, 4, sc);
            assert_int_equal(rt_tensor_copy_bytes(g_gpu, &dk, &hk), VC_OK); /* stale rows again */
            assert_int_equal(rt_tensor_copy_bytes(g_gpu, &dv, &hv), VC_OK);
            memset(got, 0, qn * 4);
            rt_tensor hz = rt_tensor_make(got, RT_F32, RT_DEV_CPU, 3, sq);
            assert_int_equal(rt_tensor_copy_bytes(g_gpu, &dout, &hz), VC_OK);
            void *g = NULL;
            if (graph) assert_int_equal(rt_backend_graph_begin(g_gpu), VC_OK);
            rt_tensor *c1 = vlast ? &dk : &dv, *c2 = vlast ? &dv : &dk;
            assert_int_equal(rt_kv_store(g_gpu, c1, vlast ? &dkx : &dvx, &dslot), VC_OK);
            assert_int_equal(rt_kv_store(g_gpu, c2, vlast ? &dvx : &dkx, &dslot), VC_OK);
            assert_int_equal(rt_paged_attention(g_gpu, &dout, &dq, &dk, &dv, &dbt, &dqsl, &dsl, scale, 0.0f, 0), VC_OK);
            if (graph) {
                assert_int_equal(rt_backend_graph_end(g_gpu, &g), VC_OK);
                assert_int_equal(rt_backend_graph_launch(g_gpu, g), VC_OK);
            }
            down(got, &dout);
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            if (g) rt_backend_graph_free(g_gpu, g);
            double e = nerr(got, ref, (int64_t)qn);
            if (!(e <= 1e-5)) fail_msg("store then attend, var %d mode %d: normalised error %.3e", var, mode, e);
        }
    }
    unset_var();
    drop(&dq);
    drop(&dkx);
    drop(&dvx);
    drop(&dk);
    drop(&dv);
    drop(&dbt);
    drop(&dqsl);
    drop(&dsl);
    drop(&dslot);
    drop(&dout);
    free(q);
    free(kx);
    free(vx);
    free(ref);
    free(got);
    free(k0);
    free(v0);
    free(kh);
    free(vh);
    free(bt);
}

/* us per call of T decode rows over ctx keys each, per VLLM_CUDA_FD_CTAS
 * value (ctas[v]) and k_fd variant (VLLM_CUDA_FD_V2 = v2[v], ...; split[v]
 * for VLLM_CUDA_FD_SPLIT, NULL: unset): a graph of L calls, each over its
 * own part of the cache (>= 768 MB of K/V in all, L <= 64), so that the L2
 * never holds the next call's rows. Block tables of mbw blocks per row
 * (0: just the context's), entries past the context pointing at block 0. */
static void fd_time(int64_t h, int64_t kvh, int64_t T, int32_t ctx, int64_t mbw, int nv, const char *const *ctas,
                    const char *const *v2, const char *const *pre, const char *const *mpf, const char *const *split,
                    double *us, double *gbps) {
    enum { LMAX = 64, B = 16, HD = 128 };
    const int64_t MB = (ctx + B - 1) / B, layer = T * MB * B * kvh * HD * 2 * 2, MW = mbw > MB ? mbw : MB;
    const int L = (int)((768ll << 20) / layer < 1 ? 1 : (768ll << 20) / layer > LMAX ? LMAX : (768ll << 20) / layer);
    const int64_t NB = L * T * MB;
    const int64_t sc[4] = {NB, B, kvh, HD}, sq[3] = {T, h, HD}, sbt[2] = {T, MW}, ss[1] = {T}, sqsl[1] = {T + 1};
    size_t cbytes = (size_t)NB * B * kvh * HD * 2;
    uint16_t *host = xmalloc(cbytes);
    for (size_t e = 0; e < cbytes / 2; e++) host[e] = (uint16_t)(0x3c00u + (e * 2654435761u >> 20) % 0x200u);
    rt_tensor dk = up(host, RT_BF16, 4, sc), dv = up(host, RT_BF16, 4, sc);
    free(host);
    float *q = xmalloc((size_t)(T * h * HD) * 4);
    for (int64_t e = 0; e < T * h * HD; e++) q[e] = rnd();
    rt_tensor dq = up(q, RT_F32, 3, sq), dout = rt_tensor_alloc(g_gpu, RT_F32, 3, sq);
    int32_t *bt = xmalloc((size_t)(L * T * MW) * 4), *qsl = xmalloc((size_t)(T + 1) * 4), *sl = xmalloc((size_t)T * 4);
    for (int64_t e = 0; e < L * T * MW; e++) /* row e / MW of the L * T rows; blocks 0 .. L*T*MB - 1 */
        bt[e] = e % MW < MB ? (int32_t)(e / MW * MB + e % MW) : 0;
    for (int64_t s = 0; s < T; s++) qsl[s + 1] = (int32_t)(s + 1), sl[s] = ctx;
    rt_tensor dqsl = up(qsl, RT_I32, 1, sqsl), dsl = up(sl, RT_I32, 1, ss), dbt[LMAX];
    for (int l = 0; l < L; l++) dbt[l] = up(bt + (size_t)l * T * MW, RT_I32, 2, sbt);
    for (int v = 0; v < nv; v++) {
        setenv("VLLM_CUDA_FD_CTAS", ctas[v], 1);
        setenv("VLLM_CUDA_FD_V2", v2[v], 1);
        setenv("VLLM_CUDA_FD_PRE", pre[v], 1);
        setenv("VLLM_CUDA_FD_MPF", mpf[v], 1);
        if (split) setenv("VLLM_CUDA_FD_SPLIT", split[v], 1);
        else unsetenv("VLLM_CUDA_FD_SPLIT");
        void *g = NULL;
        assert_int_equal(rt_backend_graph_begin(g_gpu), VC_OK);
        for (int l = 0; l < L; l++)
            assert_int_equal(rt_paged_attention(g_gpu, &dout, &dq, &dk, &dv, &dbt[l], &dqsl, &dsl, 0.088f, 0.0f, 0),
                             VC_OK);
        assert_int_equal(rt_backend_graph_end(g_gpu, &g), VC_OK);
        assert_int_equal(rt_backend_graph_launch(g_gpu, g), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        const int R = 20;
        double t0 = vc_now_s();
        for (int r = 0; r < R; r++) assert_int_equal(rt_backend_graph_launch(g_gpu, g), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        double dt = (vc_now_s() - t0) / (R * L);
        rt_backend_graph_free(g_gpu, g);
        us[v] = dt * 1e6;
        gbps[v] = (double)T * ctx * kvh * HD * 2 * 2 / dt * 1e-9;
    }
    unsetenv("VLLM_CUDA_FD_CTAS");
    unset_var();
    for (int l = 0; l < L; l++) drop(&dbt[l]);
    drop(&dk);
    drop(&dv);
    drop(&dq);
    drop(&dout);
    drop(&dqsl);
    drop(&dsl);
    free(q);
    free(bt);
    free(qsl);
    free(sl);
}

static void test_fd_speed(void **st) {
    (void)st;
    NEED_GPU();
    const char *e = getenv("VLLM_CUDA_SPEED");
    if ((e && !strcmp(e, "0")) || !rt_backend_has_graphs(g_gpu)) skip();
    static const struct {
        const char *name;
        int64_t h, kvh, T;
        int32_t ctx;
    } cs[] = {{"llama-8b T=1 ctx 640", 32, 8, 1, 640},   {"llama-8b T=1 ctx 2048", 32, 8, 1, 2048},
              {"qwen3-0.6b T=1 ctx 640", 16, 8, 1, 640}, {"qwen3-0.6b T=1 ctx 2048", 16, 8, 1, 2048},
              {"llama-8b T=2 ctx 640", 32, 8, 2, 640},   {"llama-8b T=2 ctx 2048", 32, 8, 2, 2048},
              {"llama-8b T=8 ctx 1024", 32, 8, 8, 1024}, {"llama-8b T=64 ctx 1024", 32, 8, 64, 1024}};
    /* v1 (the original kernel), v2, v2 with pre-wait loads ("v3"), v3 with
     * the split merge's partials loaded after the (m, l) pairs ("v3-"), each
     * at VLLM_CUDA_FD_CTAS 1..4. In this graph of attention calls the
     * pre-wait loads overlap the previous call (in a model, QK_ROPE_STORE). */
    static const char *const name[] = {"v1 ", "v2 ", "v3 ", "v3-"};
    static const char *const ctas[] = {"1", "2", "3", "4", "1", "2", "3", "4", "1", "2", "3", "4", "1", "2", "3", "4"};
    static const char *const v2[] = {"0", "0", "0", "0", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1"};
    static const char *const pre[] = {"0", "0", "0", "0", "0", "0", "0", "0", "1", "1", "1", "1", "1", "1", "1", "1"};
    static const char *const mpf[] = {"1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "0", "0", "0", "0"};
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        double us[16], gb[16];
        fd_time(cs[k].h, cs[k].kvh, cs[k].T, cs[k].ctx, 0, 16, ctas, v2, pre, mpf, NULL, us, gb);
        for (int x = 0; x < 4; x++) {
            print_message("speed: fd %-24s %s", cs[k].name, name[x]);
            for (int v = 4 * x; v < 4 * x + 4; v++)
                print_message("  ctas %s: %6.2f us %5.0f GB/s", ctas[v], us[v], gb[v]);
            print_message("\n");
        }
    }
    /* Llama-3-8B, T = 1, 1000 keys under a 131,072-key table (vllm serve
     * with the model's full context) and under a table of its own size:
     * the old split rule (VLLM_CUDA_FD_SPLIT=width: one split of 4 warps
     * under the wide table) against the per-row rule, v1 / v2 / v3 at the
     * default CTAs per SM. */
    static const char *const wname[] = {"v1", "v2", "v3"};
    static const char *const wctas[] = {"2", "2", "2", "2", "2", "2"};
    static const char *const wv2[] = {"0", "0", "1", "1", "1", "1"}, *const wpre[] = {"0", "0", "0", "0", "1", "1"};
    static const char *const wmpf[] = {"1", "1", "1", "1", "1", "1"};
    static const char *const wsplit[] = {"width", "row", "width", "row", "width", "row"};
    for (int wide = 1; wide >= 0; wide--) {
        double us[6], gb[6];
        fd_time(32, 8, 1, 1000, wide ? WIDE_MB : 0, 6, wctas, wv2, wpre, wmpf, wsplit, us, gb);
        for (int x = 0; x < 3; x++)
            print_message("speed: fd llama-8b T=1 ctx 1000 table %6d keys %s: split width %7.2f us, row %7.2f us\n",
                          wide ? WIDE_MB * 16 : 1008, wname[x], us[2 * x], us[2 * x + 1]);
    }
}

static int setup(void **st) {
    (void)st;
    /* these are k_fd's tests: batches of >= 256 rows x kv heads would take
     * the tensor-core decode kernel (test_cuda_attn_mixed) */
    setenv("VLLM_CUDA_FLASH_DEC", "0", 1);
    return cuda_test_setup(2);
}

static int teardown(void **st) {
    (void)st;
    return cuda_test_teardown();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_decode_row),      cmocka_unit_test(test_fd_window), cmocka_unit_test(test_fd_batch),
        cmocka_unit_test(test_fd_graph_and_flags), cmocka_unit_test(test_fd_store_then_attend),
        cmocka_unit_test(test_fd_wide_table),      cmocka_unit_test(test_fd_speed),
    };
    /* VLLM_TEST_FILTER=<pattern>: only the matching tests (memcheck runs) */
    const char *flt = getenv("VLLM_TEST_FILTER");
    if (flt && *flt) cmocka_set_test_filter(flt);
    return cmocka_run_group_tests(tests, setup, teardown);
}
