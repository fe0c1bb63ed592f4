/* The tensor-core prefill attention (cuda_flash.cu, reached through
 * PAGED_ATTENTION on prompt-heavy batches over bf16/f16 caches) against the
 * CPU op on random inputs: GQA ratios 1/2/3/4/8, head_dim 64/128, block sizes
 * 8/16/32/256, whole prompts and chunks after a cached prefix (q_len 1..2048), several
 * sequences of different lengths in one batch (tiles spanning sequences),
 * sliding windows, soft-capping; a bad block table is reported at the next
 * sync. Every case runs on the mma.sync kernel at both tile heights
 * (VLLM_CUDA_FLASH_WG=0, VLLM_CUDA_FLASH_TILE 64 and 128 packed rows) and
 * with the Hopper wgmma kernel allowed (VLLM_CUDA_FLASH_WG=1: it takes the
 * causal cases without soft-cap, sliding windows included) and with its warp-specialised
 * TMA variant (VLLM_CUDA_FLASH_WG=2, the hd-128 ones of those; 3 adds the
 * ping-pong of its consumer warpgroups); hd 256 runs the mma.sync kernel in
 * every mode, a block size that is not a power of two the SIMT fallback. Cases marked act16 run with bf16 q and output (the
 * bf16-activation prefill: q values rounded to bf16 on both sides, the
 * GPU's output once more, 2^-8 added to the bound). Ends with the time of
 * one 2048-token causal prefill at the Qwen3-0.6B (16/8 heads) and
 * Llama-3.1-8B (32/8 heads) shapes, hd 128, f32 and bf16 q/out: the wgmma
 * kernel, its warp-specialised variants (2, 3), then the mma.sync kernel (tiles 64
 * and 128), in the same run.
 * VLLM_TEST_FILTER=<test name> runs only that test (profiling);
 * VLLM_TEST_FLASH_ONLY=<list> (comma-separated of 64, 128, wg, fa3, fa3pp)
 * runs the cases and the timing on those variants only (compute-sanitizer
 * of one kernel).
 *
 * Error measure: max_i |gpu_i - cpu_i| / max_i |cpu_i|. Bounds: q and the
 * softmax weights are rounded to the cache dtype before the tensor-core
 * products (8 bits of mantissa for bf16, 11 for f16), so 1.5e-2 (bf16) and
 * 3e-3 (f16); a wrong mask or a wrong key moves outputs by O(1).
 * Skips (cmocka skip) when no CUDA device is present.
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

static double g_worst[2]; /* bf16, f16 */

/* cuda_flash_wg.cu (C linkage): calls that ran the warp-specialised
 * variant so far; the fa3 / fa3pp runs of the cases it takes check that it
 * did (it gives calls back to the wgmma kernel when TMA cannot describe a
 * cache, which would otherwise pass unseen). */
uint64_t cuda_flash_fa3_launches(void);

/* Whether variant `name` (64, 128, wg, fa3, fa3pp) runs:
 * VLLM_TEST_FLASH_ONLY, when set, is a comma-separated list of them (one
 * kernel under compute-sanitizer; a variant that hangs left out). */
static bool variant_on(const char *name) {
    const char *only = getenv("VLLM_TEST_FLASH_ONLY");
    if (!only || !*only) return true;
    const size_t n = strlen(name);
    for (const char *p = only; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float rnd(void) { return cuda_test_rnd(&g_rng); } /* [-1, 1) */

/* One varlen batch: sequence s has q_lens[s] query rows over seq_lens[s]
 * cached tokens (its rows sit at the last q_lens[s] positions), blocks of B
 * slots drawn from a shuffled pool. The batch must be prompt-heavy (T >= 64
 * and >= 4 rows per sequence) so that the GPU takes the flash path. */
typedef struct {
    int64_t h, kvh, hd, B;
    rt_dtype kvt;
    int32_t window;
    float softcap;
    int S;
    const int32_t *seq_lens, *q_lens;
    bool bad_table; /* also check that a bad block id is reported */
    bool act16;     /* bf16 q and output */
} flash_case;

/* On a failure: where the wrong rows are, by the wgmma kernels' tiles
 * (QT = 128 / G tokens of kv head g per CTA, warpgroup = packed row / 64):
 * the CTA's token range, the last key of its last segment (khi; khi % 128
 * == 127: that segment ends on a whole key tile) and the wrong rows per
 * warpgroup, for the first 8 CTAs with any. Row error: max over the head
 * dim of |gpu - cpu| / max |cpu| over the batch, wrong above the bound. */
static void diag_rows(const flash_case *c, const float *got, const float *ref, int64_t T, const int32_t *qsl,
                      double bound) {
    const int64_t h = c->h, hd = c->hd, G = c->h / c->kvh, QT = 128 / G;
    double mx = 0.0;
    for (int64_t i = 0; i < T * h * hd; i++) mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
    int shown = 0;
    int64_t bad_all = 0;
    for (int64_t tile = 0; tile * QT < T; tile++)
        for (int64_t g = 0; g < c->kvh; g++) {
            int bad[2] = {0, 0};
            const int64_t t0 = tile * QT, t1 = t0 + QT < T ? t0 + QT : T;
            for (int64_t tok = t0; tok < t1; tok++)
                for (int64_t j = 0; j < G; j++) {
                    const int64_t hq = g * G + j, row = (tok * h + hq) * hd;
                    double d = 0.0;
                    for (int64_t x = 0; x < hd; x++) d = fmax(d, fabs((double)got[row + x] - ref[row + x]));
                    if (mx > 0.0 && d / mx > bound) bad[((tok - t0) * G + j) / 64]++;
                }
            bad_all += bad[0] + bad[1];
            if (!(bad[0] + bad[1]) || shown >= 8) continue;
            if (shown < 2) { /* the wrong packed rows, and the first one's values */
                char buf[512];
                int len = 0, first = -1;
                for (int64_t tok = t0; tok < t1; tok++)
                    for (int64_t j = 0; j < G; j++) {
                        const int64_t hq = g * G + j, row = (tok * h + hq) * hd;
                        double d = 0.0;
                        for (int64_t x = 0; x < hd; x++) d = fmax(d, fabs((double)got[row + x] - ref[row + x]));
                        if (!(mx > 0.0 && d / mx > bound)) continue;
                        const int pr = (int)((tok - t0) * G + j);
                        if (first < 0) first = (int)row;
                        if (len < 480) len += snprintf(buf + len, sizeof buf - (size_t)len, " %d", pr);
                    }
                print_message("  packed rows:%s\n", buf);
                double rmin = 1e30, rmax = -1e30;
                for (int64_t x = 0; x < hd; x++)
                    if (fabs(ref[first + x]) > 1e-3) {
                        rmin = fmin(rmin, got[first + x] / ref[first + x]);
                        rmax = fmax(rmax, got[first + x] / ref[first + x]);
                    }
                print_message("  first: got %.4f %.4f %.4f %.4f ref %.4f %.4f %.4f %.4f, got/ref in [%.3f, %.3f]\n",
                              got[first], got[first + 1], got[first + 2], got[first + 3], ref[first], ref[first + 1],
                              ref[first + 2], ref[first + 3], rmin, rmax);
            }
            int s = 0;
            while (s + 1 < c->S && qsl[s + 1] <= t1 - 1) s++;
            const int64_t khi = (int64_t)c->seq_lens[s] - c->q_lens[s] - qsl[s] + t1 - 1;
            print_message("  wrong rows: kv head %lld tokens %lld..%lld (last segment: sequence %d, khi %lld, "
                          "khi %% 128 = %lld): warpgroup 0 %d, warpgroup 1 %d\n",
                          (long long)g, (long long)t0, (long long)t1 - 1, s, (long long)khi, (long long)(khi % 128),
                          bad[0], bad[1]);
            shown++;
        }
    print_message("  wrong rows in all: %lld of %lld\n", (long long)bad_all, (long long)(T * h));
}

static void run_case(const flash_case *c) {
    int64_t maxlen = 0, T = 0;
    for (int i = 0; i < c->S; i++) {
        maxlen = c->seq_lens[i] > maxlen ? c->seq_lens[i] : maxlen;
        T += c->q_lens[i];
    }
    assert_true(T >= 64 && T >= 4 * (int64_t)c->S);
    const int64_t MB = maxlen / c->B + 2, NB = c->S * MB;
    int32_t *qsl = xmalloc((size_t)(c->S + 1) * 4), *bt = xmalloc((size_t)(c->S * MB) * 4),
            *perm = xmalloc((size_t)NB * 4);
    qsl[0] = 0;
    for (int i = 0; i < c->S; i++) qsl[i + 1] = qsl[i] + c->q_lens[i];
    for (int64_t i = 0; i < NB; i++) perm[i] = (int32_t)i;
    for (int64_t i = NB - 1; i > 0; i--) {
        int64_t j = (int64_t)((rnd() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int64_t used = 0;
    for (int s = 0; s < c->S; s++)
        for (int64_t b = 0; b < MB; b++) bt[s * MB + b] = b * c->B < c->seq_lens[s] ? perm[used++] : -1;
    const int64_t h = c->h, hd = c->hd, kvh = c->kvh;
    int64_t sq[3] = {T, h, hd}, sc[4] = {NB, c->B, kvh, hd}, sbt[2] = {c->S, MB}, ssl[1] = {c->S},
            sqsl[1] = {c->S + 1};
    float *q = rand_rows(RT_F32, T * h, hd, 1.0f, rnd), *ref = xmalloc((size_t)(T * h * hd) * 4),
          *got = xmalloc((size_t)(T * h * hd) * 4);
    uint16_t *q16 = xmalloc((size_t)(T * h * hd) * 2), *o16 = xmalloc((size_t)(T * h * hd) * 2);
    if (c->act16) /* the CPU sees the bf16 values of q */
        for (int64_t i = 0; i < T * h * hd; i++) {
            q16[i] = rt_f32_to_bf16(q[i]);
            q[i] = rt_bf16_to_f32(q16[i]);
        }
    const rt_dtype at = c->act16 ? RT_BF16 : RT_F32;
    void *k = rand_rows(c->kvt, NB * c->B * kvh, hd, 1.0f, rnd), *v = rand_rows(c->kvt, NB * c->B * kvh, hd, 1.0f, rnd);
    const float scale = 2.5f / sqrtf((float)hd);
    rt_tensor hq = rt_tensor_make(q, RT_F32, RT_DEV_CPU, 3, sq), ho = rt_tensor_make(ref, RT_F32, RT_DEV_CPU, 3, sq);
    rt_tensor hk = rt_tensor_make(k, c->kvt, RT_DEV_CPU, 4, sc), hv = rt_tensor_make(v, c->kvt, RT_DEV_CPU, 4, sc);
    rt_tensor hbt = rt_tensor_make(bt, RT_I32, RT_DEV_CPU, 2, sbt);
    rt_tensor hqsl = rt_tensor_make(qsl, RT_I32, RT_DEV_CPU, 1, sqsl);
    rt_tensor hsl = rt_tensor_make((void *)c->seq_lens, RT_I32, RT_DEV_CPU, 1, ssl);
    assert_int_equal(rt_paged_attention(g_cpu, &ho, &hq, &hk, &hv, &hbt, &hqsl, &hsl, scale, c->softcap, c->window),
                     VC_OK);
    rt_tensor dq = c->act16 ? up(q16, RT_BF16, 3, sq) : up(q, RT_F32, 3, sq), dk = up(k, c->kvt, 4, sc),
              dv = up(v, c->kvt, 4, sc);
    rt_tensor dbt = up(bt, RT_I32, 2, sbt), dqsl = up(qsl, RT_I32, 1, sqsl), dsl = up(c->seq_lens, RT_I32, 1, ssl);
    rt_tensor dout = rt_tensor_alloc(g_gpu, at, 3, sq);
    assert_non_null(dout.data);
    /* Other q values, run through the wgmma kernel before every variant:
     * its shared memory (Q, K/V stages at the same offsets as the variants')
     * then holds other data, so that a variant that leaves part of a tile
     * unwritten cannot pass on the previous variant's leftovers (k_flash_fa3
     * once did: the first 8 Q rows of its second consumer warpgroup). */
    uint16_t *qp16 = xmalloc((size_t)(T * h * hd) * 2);
    float *qp = rand_rows(RT_F32, T * h, hd, 1.0f, rnd);
    for (int64_t i = 0; i < T * h * hd; i++) qp16[i] = rt_f32_to_bf16(qp[i]);
    rt_tensor dqp = c->act16 ? up(qp16, RT_BF16, 3, sq) : up(qp, RT_F32, 3, sq), dop = rt_tensor_alloc(g_gpu, at, 3, sq);
    assert_non_null(dop.data);
    /* every case: the mma.sync kernel at both tile heights (64 / 128 packed
     * rows), then the wgmma kernel (which takes the causal cases without
     * soft-cap, windows included; the others run the mma.sync kernel again), then
     * its warp-specialised variant (VLLM_CUDA_FLASH_WG=2: the hd-128 ones
     * of those; hd 64 runs the wgmma kernel again) and that variant with
     * the consumers' ping-pong (VLLM_CUDA_FLASH_WG=3) */
    static const char *tiles[5] = {"64", "128", "wg", "fa3", "fa3pp"}, *wgv[5] = {"0", "0", "1", "2", "3"};
    for (int ti = 0; ti < 5; ti++) {
        if (!variant_on(tiles[ti])) continue;
        unsetenv("VLLM_CUDA_FLASH_TILE");
        setenv("VLLM_CUDA_FLASH_WG", "1", 1);
        assert_int_equal(rt_paged_attention(g_gpu, &dop, &dqp, &dk, &dv, &dbt, &dqsl, &dsl, scale, c->softcap, c->window),
                         VC_OK);
        setenv("VLLM_CUDA_FLASH_WG", wgv[ti], 1);
        if (ti < 2) setenv("VLLM_CUDA_FLASH_TILE", tiles[ti], 1);
        else unsetenv("VLLM_CUDA_FLASH_TILE");
        memset(got, 0, (size_t)(T * h * hd) * 4);
        const uint64_t fa3_before = cuda_flash_fa3_launches();
        assert_int_equal(
            rt_paged_attention(g_gpu, &dout, &dq, &dk, &dv, &dbt, &dqsl, &dsl, scale, c->softcap, c->window), VC_OK);
        /* fa3 / fa3pp take hd 128, causal (any window) without soft-cap, blocks of 2^k >= 8 slots */
        const bool fa3_case = c->hd == 128 && !(c->softcap > 0.0f) && c->B >= 8 && !(c->B & (c->B - 1));
        if (ti >= 3 && fa3_case && cuda_flash_fa3_launches() == fa3_before)
            fail_msg("VLLM_CUDA_FLASH_WG=%s did not run the warp-specialised kernel", wgv[ti]);
        rt_tensor hg = rt_tensor_make(c->act16 ? (void *)o16 : (void *)got, at, RT_DEV_CPU, 3, sq);
        assert_int_equal(rt_tensor_copy_bytes(g_gpu, &hg, &dout), VC_OK);
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        if (c->act16)
            for (int64_t i = 0; i < T * h * hd; i++) got[i] = rt_bf16_to_f32(o16[i]);
        const double e = nerr(got, ref, T * h * hd),
                     bound = (c->kvt == RT_BF16 ? 1.5e-2 : 3e-3) + (c->act16 ? 1.0 / 256 : 0.0);
        double *worst = &g_worst[c->kvt == RT_BF16 ? 0 : 1];
        if (!(e <= *worst)) *worst = e;
        print_message("flash: T=%-5lld S=%d h=%lld/%lld hd=%lld B=%lld win=%d cap=%g %s tile %s: normalised error "
                      "%.3e%s\n",
                      (long long)T, c->S, (long long)h, (long long)kvh, (long long)hd, (long long)c->B, c->window,
                      c->softcap, rt_dtype_name(c->kvt), tiles[ti], e, c->act16 ? " (bf16 q/out)" : "");
        if (!(e <= bound)) {
            diag_rows(c, got, ref, T, qsl, bound);
            fail_msg("normalised error %.3e > %.1e (tile %s)", e, bound, tiles[ti]);
        }
        if (c->bad_table) { /* the block of sequence 0's last key: every row of it reads it */
            const int32_t keep = bt[(c->seq_lens[0] - 1) / c->B];
            bt[(c->seq_lens[0] - 1) / c->B] = (int32_t)NB;
            rt_tensor dbad = up(bt, RT_I32, 2, sbt);
            assert_int_equal(
                rt_paged_attention(g_gpu, &dout, &dq, &dk, &dv, &dbad, &dqsl, &dsl, scale, c->softcap, c->window),
                VC_OK);
            assert_int_equal(rt_backend_sync(g_gpu), VC_ERR_INVALID);
            assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
            drop(&dbad);
            bt[(c->seq_lens[0] - 1) / c->B] = keep;
        }
    }
    unsetenv("VLLM_CUDA_FLASH_TILE");
    unsetenv("VLLM_CUDA_FLASH_WG");
    drop(&dq);
    drop(&dqp);
    drop(&dop);
    free(qp);
    free(qp16);
    drop(&dk);
    drop(&dv);
    drop(&dbt);
    drop(&dqsl);
    drop(&dsl);
    drop(&dout);
    free(q);
    free(ref);
    free(got);
    free(q16);
    free(o16);
    free(k);
    free(v);
    free(bt);
    free(perm);
    free(qsl);
}

/* A mixed batch: a chunk after a cached prefix, a whole prompt, decode
 * rows, a long chunk, a short prompt (tiles span sequence boundaries). */
static const int32_t mix_sl[5] = {300, 45, 1, 700, 130}, mix_ql[5] = {100, 45, 1, 650, 130};

static void test_flash_gqa(void **st) {
    (void)st;
    NEED_GPU();
    for (int i = 0; i < 4; i++) { /* G = 1, 2, 4, 8 */
        static const int64_t hs[4][2] = {{8, 8}, {16, 8}, {16, 4}, {32, 4}};
        flash_case c = {.h = hs[i][0], .kvh = hs[i][1], .hd = 128, .B = i & 1 ? 32 : 16,
                        .kvt = i < 2 ? RT_BF16 : RT_F16, .S = 5, .seq_lens = mix_sl, .q_lens = mix_ql};
        run_case(&c);
        c.hd = 64;
        c.kvt = i < 2 ? RT_F16 : RT_BF16;
        c.B = i & 1 ? 16 : 32;
        run_case(&c);
    }
    /* G = 3: packed tiles of 21 tokens x 3 heads, one idle row per warp group */
    flash_case c = {.h = 6, .kvh = 2, .hd = 64, .B = 16, .kvt = RT_BF16, .S = 5, .seq_lens = mix_sl,
                    .q_lens = mix_ql};
    run_case(&c);
    /* bf16 q and output (the bf16-activation prefill) over bf16 and f16 caches */
    flash_case d = {.h = 32, .kvh = 8, .hd = 128, .B = 16, .kvt = RT_BF16, .S = 5, .seq_lens = mix_sl,
                    .q_lens = mix_ql, .act16 = true};
    run_case(&d);
    d.h = 16, d.kvh = 4, d.hd = 64, d.kvt = RT_F16, d.window = 50;
    run_case(&d);
}

/* Block sizes 8 and 256 at hd 128: the warp-specialised variant's
 * smallest TMA box (8 slots, 16 blocks per key tile, two per producer
 * lane) and boxes that start inside a block (slot 128 of 256). */
static void test_flash_block_sizes(void **st) {
    (void)st;
    NEED_GPU();
    flash_case c = {.h = 16, .kvh = 8, .hd = 128, .B = 8, .kvt = RT_BF16, .S = 5, .seq_lens = mix_sl,
                    .q_lens = mix_ql};
    run_case(&c);
    c.B = 256;
    c.kvt = RT_F16;
    c.h = 32;
    c.kvh = 4;
    run_case(&c);
}

static void test_flash_window_softcap(void **st) {
    (void)st;
    NEED_GPU();
    flash_case c = {.h = 16, .kvh = 8, .hd = 128, .B = 16, .kvt = RT_BF16, .window = 100, .S = 5,
                    .seq_lens = mix_sl, .q_lens = mix_ql};
    run_case(&c);
    c.window = 37;
    c.hd = 64;
    c.kvt = RT_F16;
    c.B = 32;
    c.h = 32;
    run_case(&c);
    c.window = 0;
    c.softcap = 30.0f;
    c.kvt = RT_BF16;
    run_case(&c);
    c.window = 64; /* window = one key tile */
    c.softcap = 0.0f;
    c.hd = 128;
    c.h = 8;
    c.kvh = 8;
    run_case(&c);
}

static void test_flash_long(void **st) {
    (void)st;
    NEED_GPU();
    /* a whole 2048-token prompt (Qwen3-0.6B heads) */
    static const int32_t sl1[1] = {2048}, ql1[1] = {2048};
    flash_case c = {.h = 16, .kvh = 8, .hd = 128, .B = 16, .kvt = RT_BF16, .S = 1, .seq_lens = sl1,
                    .q_lens = ql1, .bad_table = true};
    run_case(&c);
    c.act16 = true; /* bf16 q and output */
    c.bad_table = false;
    run_case(&c);
    /* chunked prefill: 1024- and 64-token chunks after cached prefixes, a
     * decode row, a 7-token chunk */
    static const int32_t sl2[4] = {2000, 900, 513, 7}, ql2[4] = {1024, 64, 1, 7};
    flash_case d = {.h = 16, .kvh = 4, .hd = 128, .B = 32, .kvt = RT_F16, .S = 4, .seq_lens = sl2, .q_lens = ql2};
    run_case(&d);
    d.hd = 64;
    d.kvt = RT_BF16;
    d.B = 16;
    d.window = 512;
    run_case(&d);
    /* windows through the wgmma kernels at hd 128: the chunks again (a
     * window shorter than a chunk, key tiles starting past 0), and the
     * whole prompt with bf16 q / out and a window of 300 (Mistral-like) */
    d.hd = 128;
    d.B = 32;
    d.window = 200;
    run_case(&d);
    c.window = 300;
    run_case(&c);
}

/* hd 256 (Gemma 2 / 3 below 27B) on the mma.sync kernel (session 19; the
 * SIMT kernels before): Gemma 2's soft-cap, Gemma 3's local layers (a
 * window), G 1 / 2 / 4 / 8, an f16 cache, bf16 q and output, a whole
 * 2048-token prompt and chunks after cached context. Then a block size
 * that is not a power of two: the SIMT kernels, still right. */
static void test_flash_fallbacks(void **st) {
    (void)st;
    NEED_GPU();
    flash_case c = {.h = 8, .kvh = 4, .hd = 256, .B = 16, .kvt = RT_BF16, .S = 5, .seq_lens = mix_sl,
                    .q_lens = mix_ql, .softcap = 50.0f};
    run_case(&c);
    c.softcap = 0.0f;
    c.window = 512; /* Gemma 3's local layers */
    c.h = 4, c.kvh = 1;
    run_case(&c);
    c.window = 0;
    c.h = 16, c.kvh = 16;
    c.kvt = RT_F16;
    c.B = 32;
    run_case(&c);
    c.h = 16, c.kvh = 2;
    c.kvt = RT_BF16;
    c.act16 = true;
    run_case(&c);
    static const int32_t sl1[1] = {2048}, ql1[1] = {2048}, sl2[3] = {1500, 700, 90}, ql2[3] = {500, 700, 33};
    flash_case d = {.h = 8, .kvh = 4, .hd = 256, .B = 16, .kvt = RT_BF16, .S = 1, .seq_lens = sl1, .q_lens = ql1,
                    .act16 = true};
    run_case(&d);
    d.S = 3, d.seq_lens = sl2, d.q_lens = ql2, d.window = 100;
    run_case(&d);
    c.act16 = false;
    c.hd = 128; /* a block size that is not a power of two */
    c.B = 24;
    run_case(&c);
}

/* The speed tests' call: one prompt of T tokens (one sequence, blocks of
 * 16 in order) with zero q and caches (the speed does not depend on the
 * values), q / out of dtype at, a bf16 cache. */
typedef struct {
    int64_t T, h, kvh, hd;
    rt_tensor q, out, k, v, bt, qsl, sl;
} spd_call;

static spd_call spd_make(int64_t T, int64_t h, int64_t kvh, int64_t hd, rt_dtype at) {
    spd_call c = {.T = T, .h = h, .kvh = kvh, .hd = hd};
    const int64_t B = 16, NB = T / B;
    int64_t sq[3] = {T, h, hd}, sc[4] = {NB, B, kvh, hd}, sbt[2] = {1, NB}, s1[1] = {1}, s2[1] = {2};
    int32_t *bt = xmalloc((size_t)NB * 4), qsl[2] = {0, (int32_t)T}, sl[1] = {(int32_t)T};
    for (int64_t b = 0; b < NB; b++) bt[b] = (int32_t)b;
    c.q = rt_tensor_alloc(g_gpu, at, 3, sq), c.out = rt_tensor_alloc(g_gpu, at, 3, sq);
    c.k = rt_tensor_alloc(g_gpu, RT_BF16, 4, sc), c.v = rt_tensor_alloc(g_gpu, RT_BF16, 4, sc);
    assert_true(c.q.data && c.out.data && c.k.data && c.v.data);
    float *zero = xmalloc((size_t)(T * h * hd) * 4);
    rt_tensor hz = rt_tensor_make(zero, at, RT_DEV_CPU, 3, sq), hzk = rt_tensor_make(zero, RT_BF16, RT_DEV_CPU, 4, sc);
    assert_int_equal(rt_tensor_copy_bytes(g_gpu, &c.q, &hz), VC_OK);
    assert_int_equal(rt_tensor_copy_bytes(g_gpu, &c.k, &hzk), VC_OK);
    assert_int_equal(rt_tensor_copy_bytes(g_gpu, &c.v, &hzk), VC_OK);
    c.bt = up(bt, RT_I32, 2, sbt), c.qsl = up(qsl, RT_I32, 1, s2), c.sl = up(sl, RT_I32, 1, s1);
    free(zero), free(bt);
    return c;
}

static void spd_free(spd_call *c) {
    drop(&c->q), drop(&c->out), drop(&c->k), drop(&c->v), drop(&c->bt), drop(&c->qsl), drop(&c->sl);
}

/* us a call, mean of `iters` after 2 warm calls (host-timed around syncs) */
static double spd_time(spd_call *c, float scale, int iters) {
    for (int w = 0; w < 2; w++)
        assert_int_equal(rt_paged_attention(g_gpu, &c->out, &c->q, &c->k, &c->v, &c->bt, &c->qsl, &c->sl, scale, 0.0f, 0),
                         VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    double t0 = vc_now_s();
    for (int it = 0; it < iters; it++)
        assert_int_equal(rt_paged_attention(g_gpu, &c->out, &c->q, &c->k, &c->v, &c->bt, &c->qsl, &c->sl, scale, 0.0f, 0),
                         VC_OK);
    assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
    return (vc_now_s() - t0) / iters * 1e6;
}

/* Attention work of a causal T-token prompt: 4 hd per query head and key seen (QK^T and PV). */
static double spd_flop(const spd_call *c) { return 4.0 * (double)c->hd * (double)c->h * (double)c->T * (c->T + 1) / 2; }

/* One 2048-token causal prefill per kv-head layout, hd 128, bf16 cache:
 * GPU time per call and TFLOP/s of attention work. */
static void test_flash_speed(void **st) {
    (void)st;
    NEED_GPU();
    static const int64_t hs[2][2] = {{16, 8}, {32, 8}};
    for (int i = 0; i < 4; i++) { /* q/out f32, then bf16 (the bf16-activation prefill) */
        const rt_dtype at = i < 2 ? RT_F32 : RT_BF16;
        spd_call c = spd_make(2048, hs[i % 2][0], hs[i % 2][1], 128, at);
        const float scale = 1.0f / sqrtf((float)c.hd);
        /* the wgmma kernel (VLLM_CUDA_FLASH_WG=1), its warp-specialised
         * variant (2, the default) and that with ping-pong (3), then the mma.sync kernel at 64
         * packed rows (its default) and 128: old vs new in one run */
        static const char *tiles[5] = {NULL, NULL, NULL, "64", "128"}, *wgv[5] = {"1", "2", "3", "0", "0"};
        static const char *names[5] = {"wg (wgmma)", "fa3 (wgmma, warp-specialised; default)",
                                       "fa3pp (warp-specialised, ping-pong)", "64", "128"};
        static const char *vname[5] = {"wg", "fa3", "fa3pp", "64", "128"};
        for (int ti = 0; ti < 5; ti++) {
            if (!variant_on(vname[ti])) continue;
            if (tiles[ti]) setenv("VLLM_CUDA_FLASH_TILE", tiles[ti], 1);
            else unsetenv("VLLM_CUDA_FLASH_TILE");
            setenv("VLLM_CUDA_FLASH_WG", wgv[ti], 1);
            const double us = spd_time(&c, scale, 20);
            print_message("speed: flash prefill T=%lld h=%lld/%lld hd=%lld bf16 cache, %s q/out, tile %s: %.1f us/layer, "
                          "%.0f TFLOP/s\n",
                          (long long)c.T, (long long)c.h, (long long)c.kvh, (long long)c.hd, rt_dtype_name(at),
                          names[ti], us, spd_flop(&c) / us * 1e-6);
        }
        unsetenv("VLLM_CUDA_FLASH_TILE");
        unsetenv("VLLM_CUDA_FLASH_WG");
        spd_free(&c);
    }
}

static void test_report(void **st) {
    (void)st;
    NEED_GPU();
    print_message("flash vs cpu: max normalised error bf16 %.3e, f16 %.3e\n", g_worst[0], g_worst[1]);
}

static int setup(void **st) {
    (void)st;
    return cuda_test_setup(8);
}

static int teardown(void **st) {
    (void)st;
    return cuda_test_teardown();
}

/* hd 256 at 2048 tokens (Gemma-3-4B's 8/4 heads), f32 q/out over a bf16
 * cache: the mma.sync kernel vs the SIMT prefill kernel it replaced
 * (VLLM_CUDA_FLASH=0), one run (report only). */
static void test_flash_speed_hd256(void **st) {
    (void)st;
    NEED_GPU();
    spd_call c = spd_make(2048, 8, 4, 256, RT_F32);
    double us[2];
    for (int k = 0; k < 2; k++) {
        if (k) setenv("VLLM_CUDA_FLASH", "0", 1);
        us[k] = spd_time(&c, 1.0f / 16.0f, 10);
    }
    unsetenv("VLLM_CUDA_FLASH");
    const double flop = spd_flop(&c);
    print_message("speed: prefill T=%lld h=%lld/%lld hd=%lld bf16 cache, f32 q/out: mma.sync flash %.1f us/layer "
                  "(%.0f TFLOP/s), SIMT %.1f us/layer (%.0f TFLOP/s)\n",
                  (long long)c.T, (long long)c.h, (long long)c.kvh, (long long)c.hd, us[0], flop / us[0] * 1e-6, us[1],
                  flop / us[1] * 1e-6);
    spd_free(&c);
}

int main(void) {
    const char *only = getenv("VLLM_TEST_FILTER"); /* e.g. test_flash_speed (profiling) */
    if (only && *only) cmocka_set_test_filter(only);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flash_gqa),       cmocka_unit_test(test_flash_block_sizes),
        cmocka_unit_test(test_flash_window_softcap),
        cmocka_unit_test(test_flash_long),      cmocka_unit_test(test_flash_fallbacks),
        cmocka_unit_test(test_flash_speed),     cmocka_unit_test(test_flash_speed_hd256),
        cmocka_unit_test(test_report),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
