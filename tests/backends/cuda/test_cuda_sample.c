/* SAMPLE on the CUDA backend against the CPU op (the host sampler itself,
 * sample/batch.c) on random logits and random per-row parameters.
 *
 *  - greedy rows (with and without penalties), rows with nothing finite and
 *    rows with +inf logits: identical tokens;
 *  - sampled rows (temperature, min_p, top_k, top_p, penalties): identical
 *    tokens, except where the two sums disagree by rounding. The GPU sums
 *    exact fixed-point masses, the CPU float lanes into doubles, and both
 *    compute bit-identical exp(x - max) (same polynomial, same rounding), so
 *    a differing row must be explained by one of (checked per row, in
 *    double, from the CPU's processed rows):
 *      (a) the GPU token g is kept by the CPU and u lies within 1e-5 of g's
 *          CDF interval [C(g-), C(g)) over the CPU's kept tokens in id
 *          order: u sits on a boundary up to float rounding;
 *      (b) top_p < 1 and the cumulative mass at the CPU's last kept token
 *          (before or after adding it) is within 1e-5 of top_p * S (S: the
 *          mass after min_p/top_k, from a second CPU run with top_p = 1):
 *          the top_p cut is ambiguous up to rounding.
 *    At most 1% of sampled rows may differ even so;
 *  - the penalty counting scratch is left all zero;
 *  - distribution: 40,000 draws of one 48-token row (T 0.7, top_k 30,
 *    top_p 0.9) with fresh uniforms; chi-square against the CPU's processed
 *    probabilities below dof + 8 sqrt(2 dof), no draw outside the kept set;
 *  - top_k paths: rows for the kernel's candidate path and its fallback
 *    (k 1..V-1, top_p 1e-4..1, min_p, ties at the k-th, few finite
 *    values), checked as above;
 *  - top_p paths: top_p without top_k candidates (no top_k, or k past the
 *    candidate cap) on peaked rows (the nucleus fits the kernel's top_p
 *    candidate cut), flat rows (it does not: the whole-row fallback),
 *    plateaus of 3071..3073 tied tokens alone (the cap's edge, ties at the
 *    top_p value), staircases of logits one ev bin apart (the target near
 *    a bin edge), 2 or 3 tied tokens alone at top_p 1/2, 1/3, 2/3 (the
 *    target exactly at a tie), with min_p and penalties on some rows;
 *    checked as above, and both kinds of row must occur (judged from the
 *    CPU's nucleus sizes);
 *  - every GPU check runs the op's kernels in turn (VLLM_CUDA_TOPP /
 *    _CL / _HIST / _BLOCKROWS, set per run; g_cfgs): the cluster kernel
 *    with its own cluster size, with 3, 8 and 16 CTAs a row (small and odd
 *    slices, empty slices at tiny V, the cross-CTA merges at every batch
 *    size), with the match-aggregated histogram, with one CTA a row (rows
 *    without top_p on k_sample's row code, the rest on its own, in one
 *    launch; 64 to 210 rows) and the same with every row on its own code,
 *    and the one-block-per-row kernel, whose tokens every other kernel's
 *    must equal (printed);
 *    VLLM_CUDA_CFG=digits runs only those configs (e.g. under
 *    compute-sanitizer); the distribution test runs with and without
 *    top_k (its candidates; the tail over the row);
 *  - speed at V = 128256 and 151936, B = 1, 16, 64 (and 256 at 151936),
 *    one line per setting: block kernel, cluster kernel (auto size; 16
 *    CTAs a row; match-aggregated bins; at B = 256 also "own": every row
 *    on the cluster kernel's own code): T 1, greedy, top_k + top_p,
 *    top_p alone on flat rows and on peaked (LM-like) rows;
 *    VLLM_CUDA_SPEED=0 skips it, =topp times only the top_p-alone lines
 *    once (for ncu). VLLM_TEST_FILTER / VLLM_TEST_SKIP (main) pick tests.
 * Skips when no CUDA device is present.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/err.h"
#include "runtime/ops.h"

#include "cuda_test_util.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint64_t next(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static double unif(void) { return (double)(next() >> 11) * 0x1.0p-53; }
static float rnd(void) { return (float)(2.0 * unif() - 1.0); }

static void set_u(int32_t *q, double u) {
    uint64_t b;
    memcpy(&b, &u, sizeof b);
    q[RT_SAMPLE_U_LO] = (int32_t)(uint32_t)b;
    q[RT_SAMPLE_U_HI] = (int32_t)(uint32_t)(b >> 32);
}
static double get_u(const int32_t *q) {
    uint64_t b = (uint64_t)(uint32_t)q[RT_SAMPLE_U_LO] | (uint64_t)(uint32_t)q[RT_SAMPLE_U_HI] << 32;
    double u;
    memcpy(&u, &b, sizeof u);
    return u;
}

/* One step's inputs on the host. */
typedef struct {
    int64_t R, V, n_hist;
    float *logits; /* [R, V] */
    float *fp;     /* [R, NF] */
    int32_t *ip;   /* [R, NI] */
    int32_t *hist; /* [n_hist] */
} step;

static void step_free(step *s) {
    free(s->logits);
    free(s->fp);
    free(s->ip);
    free(s->hist);
}

/* Run the op on a backend over copies of the inputs: tokens [R] and the
 * processed rows [R, V] (CPU only). */
static void run_cpu(const step *s, int32_t *tok, float *rows_out) {
    float *lg = xmalloc((size_t)(s->R * s->V) * sizeof *lg);
    memcpy(lg, s->logits, (size_t)(s->R * s->V) * sizeof *lg);
    int32_t *cnt = s->n_hist ? xmalloc((size_t)(s->R * s->V) * sizeof *cnt) : NULL;
    rt_tensor l = rt_tensor_2d(lg, RT_F32, RT_DEV_CPU, s->R, s->V), d = rt_tensor_1d(tok, RT_I32, RT_DEV_CPU, s->R);
    rt_tensor f = rt_tensor_2d(s->fp, RT_F32, RT_DEV_CPU, s->R, RT_SAMPLE_NF);
    rt_tensor i = rt_tensor_2d(s->ip, RT_I32, RT_DEV_CPU, s->R, RT_SAMPLE_NI);
    rt_tensor h = rt_tensor_1d(s->hist, RT_I32, RT_DEV_CPU, s->n_hist ? s->n_hist : 1);
    rt_tensor c = rt_tensor_2d(cnt, RT_I32, RT_DEV_CPU, s->R, s->V);
    int rc = rt_sample(g_cpu, &d, &l, &f, &i, s->n_hist ? &h : NULL, s->n_hist ? &c : NULL);
    if (rc < 0) fail_msg("cpu sample: %s", vc_err_msg());
    if (rows_out) memcpy(rows_out, lg, (size_t)(s->R * s->V) * sizeof *lg);
    free(lg);
    free(cnt);
}

static double g_gpu_us;

static void run_gpu(const step *s, int32_t *tok, int reps) {
    int64_t sl[2] = {s->R, s->V}, sf[2] = {s->R, RT_SAMPLE_NF}, si[2] = {s->R, RT_SAMPLE_NI}, sh = s->n_hist ? s->n_hist : 1;
    rt_tensor l = up(s->logits, RT_F32, 2, sl), f = up(s->fp, RT_F32, 2, sf), i = up(s->ip, RT_I32, 2, si);
    rt_tensor h = up(s->hist ? (void *)s->hist : (void *)&sh, RT_I32, 1, &sh);
    int32_t *zeros = xmalloc((size_t)(s->R * s->V) * sizeof *zeros);
    rt_tensor c = up(zeros, RT_I32, 2, sl);
    rt_tensor d = rt_tensor_alloc(g_gpu, RT_I32, 1, &s->R);
    assert_non_null(d.data);
    g_gpu_us = 0;
    for (int r = 0; r < reps; r++) {
        if (r > 0) { /* fresh logits: the op overwrites them */
            rt_tensor hl = rt_tensor_2d(s->logits, RT_F32, RT_DEV_CPU, s->R, s->V);
            assert_int_equal(rt_tensor_copy_bytes(g_gpu, &l, &hl), VC_OK);
        }
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int rc = rt_sample(g_gpu, &d, &l, &f, &i, s->n_hist ? &h : NULL, s->n_hist ? &c : NULL);
        if (rc < 0) fail_msg("cuda sample: %s", vc_err_msg());
        assert_int_equal(rt_backend_sync(g_gpu), VC_OK);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-3;
        if (r == 0 || us < g_gpu_us) g_gpu_us = us;
    }
    down(tok, &d);
    if (s->n_hist) { /* the scratch is left zero */
        down(zeros, &c);
        for (int64_t k = 0; k < s->R * s->V; k++)
            if (zeros[k]) fail_msg("penalty counts not zero at %lld: %d", (long long)k, zeros[k]);
    }
    free(zeros);
    drop(&l);
    drop(&f);
    drop(&i);
    drop(&h);
    drop(&c);
    drop(&d);
}

/* Row kinds of a random step. */
enum { K_GREEDY, K_GREEDY_PEN, K_TEMP, K_TOPK, K_TOPP, K_MINP, K_ALL, K_PEN, K_NKINDS };

static step make_step(int64_t R, int64_t V, float amp, int special) {
    step s = {.R = R, .V = V};
    s.logits = xmalloc((size_t)(R * V) * sizeof *s.logits);
    s.fp = xmalloc((size_t)R * RT_SAMPLE_NF * sizeof *s.fp);
    s.ip = xmalloc((size_t)R * RT_SAMPLE_NI * sizeof *s.ip);
    int64_t cap = R * 300;
    s.hist = xmalloc((size_t)cap * sizeof *s.hist);
    for (int64_t r = 0; r < R; r++) {
        float *x = s.logits + r * V, *f = s.fp + r * RT_SAMPLE_NF;
        int32_t *q = s.ip + r * RT_SAMPLE_NI;
        for (int64_t j = 0; j < V; j++) x[j] = amp * rnd();
        /* ties: copy a few values, and a row of a few distinct values */
        for (int k = 0; k < 8; k++) x[next() % V] = x[next() % V];
        if (r % 17 == 5)
            for (int64_t j = 0; j < V; j++) x[j] = (float)(next() % 4);
        if (special) {
            if (r % 11 == 3) x[next() % V] = NAN;
            if (r % 13 == 4) x[next() % V] = -INFINITY;
            if (r % 29 == 7) x[next() % V] = INFINITY, x[next() % V] = INFINITY;
            if (r % 31 == 8)
                for (int64_t j = 0; j < V; j++) x[j] = -INFINITY;
        }
        int kind = (int)(r % K_NKINDS);
        f[RT_SAMPLE_TEMP] = kind <= K_GREEDY_PEN ? 0.0f : (float)(0.3 + 1.2 * unif());
        f[RT_SAMPLE_TOP_P] = (kind == K_TOPP || kind == K_ALL) ? (float)(0.5 + 0.49 * unif()) : 1.0f;
        f[RT_SAMPLE_MIN_P] = (kind == K_MINP || kind == K_ALL) ? (float)(0.01 + 0.2 * unif()) : 0.0f;
        f[RT_SAMPLE_LOG_MIN_P] = f[RT_SAMPLE_MIN_P] > 0 ? logf(f[RT_SAMPLE_MIN_P]) : -INFINITY;
        bool pen = kind == K_GREEDY_PEN || kind == K_PEN || (kind == K_ALL && r % 2);
        f[RT_SAMPLE_REP] = pen ? (float)(0.8 + 0.6 * unif()) : 1.0f;
        f[RT_SAMPLE_FREQ] = pen ? (float)(2 * unif() - 1) : 0.0f;
        f[RT_SAMPLE_PRES] = pen ? (float)(2 * unif() - 1) : 0.0f;
        static const int ks[] = {1, 2, 5, 40, 1000, 5000};
        int k = (kind == K_TOPK || kind == K_ALL) ? ks[next() % 6] : 0;
        q[RT_SAMPLE_TOP_K] = k < V ? k : 0;
        q[RT_SAMPLE_HIST_OFF] = (int32_t)s.n_hist;
        if (pen) {
            int np = f[RT_SAMPLE_REP] != 1.0f ? (int)(next() % 200) : 0, no = (int)(next() % 90);
            for (int j = 0; j < np + no; j++) /* repeats: draw from a small range often */
                s.hist[s.n_hist + j] = (int32_t)(j % 3 ? next() % (V < 64 ? V : 64) : next() % V);
            q[RT_SAMPLE_N_PROMPT] = np;
            q[RT_SAMPLE_N_OUTPUT] = no;
            s.n_hist += np + no;
        }
        set_u(q, f[RT_SAMPLE_TEMP] > 0 ? unif() : 0.0);
    }
    return s;
}

/* Explain a differing sampled row (see the file comment); returns the case
 * (1 or 2) or 0 when unexplained. p1: the CPU's processed row; p0: the same
 * with top_p = 1. */
static int explain(const float *p1, const float *p0, int64_t V, float top_p, double u, int32_t g) {
    const double tol = 1e-5;
    double mx = -INFINITY;
    for (int64_t j = 0; j < V; j++) mx = p0[j] > mx ? p0[j] : mx;
    if (!(mx > -INFINITY) || mx == INFINITY) return 0;
    double S0 = 0, S1 = 0, last = INFINITY;
    for (int64_t j = 0; j < V; j++) {
        if (p0[j] > -INFINITY) S0 += exp((double)p0[j] - mx);
        if (p1[j] > -INFINITY) {
            double e = exp((double)p1[j] - mx);
            S1 += e;
            last = e < last ? e : last;
        }
    }
    if (top_p < 1.0f) {
        double need = (double)top_p * S0;
        if (fabs(S1 - need) <= tol * S0 || fabs(S1 - last - need) <= tol * S0) return 2;
    }
    if (g < 0 || g >= V || !(p1[g] > -INFINITY)) return 0;
    double c = 0;
    for (int64_t j = 0; j < g; j++)
        if (p1[j] > -INFINITY) c += exp((double)p1[j] - mx);
    double lo = c / S1, hi = (c + exp((double)p1[g] - mx)) / S1;
    return u >= lo - tol && u <= hi + tol ? 1 : 0;
}

/* The kernels compared against the CPU op (VLLM_CUDA_TOPP / _CL / _HIST /
 * _BLOCKROWS, read by the op at each call): the cluster kernel with its own
 * cluster size (one CTA a row, the plain build, once 2 CTAs a row would
 * exceed the SM count: from 67 rows on an H200), with 3, 8 and 16 CTAs a
 * row whatever the batch (16 where the device runs it, else the largest
 * below), with k_sample's histogram aggregation, with one CTA a row
 * whatever the batch (its rows without top_p run k_sample's row code),
 * the same with every row on the cluster kernel's own code
 * (VLLM_CUDA_TOPP_BLOCKROWS=0), and the one-block-per-row kernel (last:
 * the others are compared with it). dist: also in the distribution test. */
static const struct {
    const char *name, *topp, *cl, *hist, *brows;
    bool dist;
} g_cfgs[] = {{"cluster auto", "1", "", "", "", true},
              {"cluster 3", "1", "3", "", "", false},
              {"cluster 8", "1", "8", "", "", true},
              {"cluster 16", "1", "16", "", "", true},
              {"cluster 8 match", "1", "8", "match", "", false},
              {"cluster 1", "1", "1", "", "", false},
              {"cluster 1 own rows", "1", "1", "", "0", false},
              {"block", "0", "", "", "", true}};
#define N_CFGS (int)(sizeof g_cfgs / sizeof g_cfgs[0])
enum { CFG_AUTO = 0, CFG_16 = 3, CFG_BLOCK = N_CFGS - 1 };

static void use_cfg(int c) {
    setenv("VLLM_CUDA_TOPP", g_cfgs[c].topp, 1);
    setenv("VLLM_CUDA_TOPP_CL", g_cfgs[c].cl, 1);
    setenv("VLLM_CUDA_TOPP_HIST", g_cfgs[c].hist, 1);
    setenv("VLLM_CUDA_TOPP_BLOCKROWS", g_cfgs[c].brows, 1);
}

/* VLLM_CUDA_CFG=digits: only those configs (e.g. "02" under compute-sanitizer). */
static bool cfg_on(int c) {
    const char *only = getenv("VLLM_CUDA_CFG");
    return !(only && *only) || strchr(only, '0' + c);
}

static void compare_one(const step *s, const char *what, const int32_t *tc, const float *p1, int32_t *tg);

static void compare(const step *s, const char *what) {
    int32_t *tc = xmalloc((size_t)s->R * sizeof *tc);
    float *p1 = xmalloc((size_t)(s->R * s->V) * sizeof *p1);
    run_cpu(s, tc, p1);
    int32_t *tk[N_CFGS] = {0};
    for (int c = 0; c < N_CFGS; c++) {
        if (!cfg_on(c)) continue;
        char w[96];
        snprintf(w, sizeof w, "%s [%s]", what, g_cfgs[c].name);
        use_cfg(c);
        tk[c] = xmalloc((size_t)s->R * sizeof *tk[c]);
        compare_one(s, w, tc, p1, tk[c]);
    }
    /* the kernels sum the same exact masses: the same token on every row */
    for (int c = 0; c + 1 < N_CFGS; c++) {
        if (!tk[c] || !tk[N_CFGS - 1]) continue;
        int nd = 0;
        for (int64_t r = 0; r < s->R; r++) nd += tk[c][r] != tk[N_CFGS - 1][r];
        print_message("%s: [%s] vs [%s]: %d rows differ\n", what, g_cfgs[c].name, g_cfgs[N_CFGS - 1].name, nd);
        assert_int_equal(nd, 0);
    }
    for (int c = 0; c < N_CFGS; c++) free(tk[c]);
    use_cfg(CFG_AUTO);
    free(tc);
    free(p1);
}

static void compare_one(const step *s, const char *what, const int32_t *tc, const float *p1, int32_t *tg) {
    run_gpu(s, tg, 1);
    int n_sampled = 0, n_diff = 0, n_a = 0, n_b = 0;
    for (int64_t r = 0; r < s->R; r++) {
        const float *f = s->fp + r * RT_SAMPLE_NF;
        bool sampled = f[RT_SAMPLE_TEMP] > 0;
        n_sampled += sampled;
        if (tc[r] == tg[r]) continue;
        if (!sampled) fail_msg("%s: greedy row %lld: cpu %d gpu %d", what, (long long)r, tc[r], tg[r]);
        /* the row alone again on the CPU with top_p = 1: the mass before top_p */
        step one = {.R = 1, .V = s->V, .n_hist = s->n_hist, .logits = s->logits + r * s->V, .hist = s->hist};
        float f1[RT_SAMPLE_NF];
        int32_t i1[RT_SAMPLE_NI], t0;
        memcpy(f1, f, sizeof f1);
        memcpy(i1, s->ip + r * RT_SAMPLE_NI, sizeof i1);
        f1[RT_SAMPLE_TOP_P] = 1.0f;
        one.fp = f1;
        one.ip = i1;
        float *p0 = xmalloc((size_t)s->V * sizeof *p0);
        run_cpu(&one, &t0, p0);
        int why = explain(p1 + r * s->V, p0, s->V, f[RT_SAMPLE_TOP_P], get_u(s->ip + r * RT_SAMPLE_NI), tg[r]);
        free(p0);
        if (!why)
            fail_msg("%s: row %lld: cpu %d gpu %d, not explained by rounding (T %g top_k %d top_p %g min_p %g u %.17g)",
                     what, (long long)r, tc[r], tg[r], (double)f[RT_SAMPLE_TEMP], s->ip[r * RT_SAMPLE_NI + RT_SAMPLE_TOP_K],
                     (double)f[RT_SAMPLE_TOP_P], (double)f[RT_SAMPLE_MIN_P], get_u(s->ip + r * RT_SAMPLE_NI));
        n_diff++;
        n_a += why == 1;
        n_b += why == 2;
    }
    print_message("%s: %lld rows (%d sampled): %d differ (%d on a CDF boundary, %d on the top_p cut), rest identical\n",
                  what, (long long)s->R, n_sampled, n_diff, n_a, n_b);
    assert_true(n_diff * 100 <= n_sampled || n_diff <= 1);
}

static void test_small_vocab(void **st) {
    (void)st;
    NEED_GPU();
    for (int64_t V = 1; V <= 300; V = V * 3 + 1) {
        step s = make_step(97, V, 4.0f, 1);
        char what[64];
        snprintf(what, sizeof what, "V=%lld", (long long)V);
        compare(&s, what);
        step_free(&s);
    }
}

static void test_large_vocab(void **st) {
    (void)st;
    NEED_GPU();
    step s = make_step(200, 151936, 6.0f, 1);
    compare(&s, "V=151936 mixed");
    step_free(&s);
    s = make_step(64, 32000, 1.0f, 0);
    compare(&s, "V=32000 flat logits");
    step_free(&s);
}

/* Rows aimed at the kernel's top_k paths (candidates in shared memory for
 * k <= 3072 when they fit, the whole row otherwise): k from 1 to V - 1,
 * top_p from near 0 to near 1, min_p on a third of the rows, penalties
 * (make_step's), and rows shaped so that the k-th value is tied (a small
 * plateau at the top, inside the candidate cap; a coarse grid, far past
 * it), has fewer than k finite values, or is all -inf. */
static void topk_rows(step *s) {
    const int64_t V = s->V;
    const int ks[] = {1, 2, 50, 1000, 3000, 3072, 3073, 20000, (int)V - 1};
    const float ps[] = {1.0f, 1e-4f, 0.5f, 0.9f, 0.999f};
    for (int64_t r = 0; r < s->R; r++) {
        float *x = s->logits + r * V, *f = s->fp + r * RT_SAMPLE_NF;
        int32_t *q = s->ip + r * RT_SAMPLE_NI;
        switch (r % 5) {
        case 1: /* a plateau of 40 tokens at the top, 30 just under it */
            for (int j = 0; j < 40; j++) x[next() % V] = 9.0f;
            for (int j = 0; j < 30; j++) x[next() % V] = 8.5f;
            break;
        case 2: /* a coarse grid: thousands of ties per value */
            for (int64_t j = 0; j < V; j++) x[j] = floorf(2.0f * x[j]) * 0.5f;
            break;
        case 3: /* few finite values */
            for (int64_t j = 0; j < V; j++)
                if (next() % 64) x[j] = -INFINITY;
            break;
        default:
            break;
        }
        f[RT_SAMPLE_TEMP] = (float)(0.3 + 1.2 * unif());
        int k = ks[(r / 5) % 9];
        q[RT_SAMPLE_TOP_K] = k >= 1 && k < V ? k : 0;
        f[RT_SAMPLE_TOP_P] = ps[(r / 3) % 5];
        f[RT_SAMPLE_MIN_P] = r % 3 == 0 ? (float)(0.001 + 0.2 * unif()) : 0.0f;
        f[RT_SAMPLE_LOG_MIN_P] = f[RT_SAMPLE_MIN_P] > 0 ? logf(f[RT_SAMPLE_MIN_P]) : -INFINITY;
        set_u(q, unif());
    }
}

static void test_topk_paths(void **st) {
    (void)st;
    NEED_GPU();
    step s = make_step(180, 151936, 6.0f, 1);
    topk_rows(&s);
    compare(&s, "top_k paths V=151936");
    step_free(&s);
    s = make_step(90, 5000, 3.0f, 1);
    topk_rows(&s);
    compare(&s, "top_k paths V=5000");
    step_free(&s);
}

/* A peaked row, roughly an LM's: a bell of spread ~2 over the vocabulary
 * and 30 tokens 8..16 above it. */
static void peak_row(float *x, int64_t V) {
    for (int64_t j = 0; j < V; j++) x[j] = 2.0f * (rnd() + rnd() + rnd());
    for (int j = 0; j < 30; j++) x[next() % V] += (float)(8.0 + 8.0 * unif());
}

/* Rows aimed at the kernel's top_p paths (see the file comment). */
static void topp_rows(step *s) {
    const int64_t V = s->V;
    const float ps[] = {1e-4f, 0.3f, 0.5f, 0.7f, 0.9f, 0.95f, 0.99f, 0.999f};
    for (int64_t r = 0; r < s->R; r++) {
        float *x = s->logits + r * V, *f = s->fp + r * RT_SAMPLE_NF;
        int32_t *q = s->ip + r * RT_SAMPLE_NI;
        int k = 0;
        switch (r % 7) {
        case 0: /* peaked: the cut applies */
        case 6: /* the same behind top_k's whole-row path (k past the cap) */
            peak_row(x, V);
            if (r % 7 == 6) k = (r / 7) % 2 ? 3073 : 20000;
            break;
        case 1: /* flat: the nucleus is thousands of tokens wide */
            for (int64_t j = 0; j < V; j++) x[j] = 0.5f * rnd();
            break;
        case 2: { /* a plateau of 3071..3073 tied tokens, nothing else: exact masses on both sides (a
                   * tail far under the plateau would carry mass on the CPU only, making 1/2 of 3072 a
                   * rounding boundary that is allowed to differ, and such rows count against the 1%) */
            int64_t n = 3071 + (r / 7) % 3, st = 1 + (int64_t)(next() % 7);
            for (int64_t j = 0; j < V; j++) x[j] = -INFINITY;
            for (int64_t j = 0; j < n && j * st < V; j++) x[j * st] = 5.0f;
            break;
        }
        case 3: /* a staircase one ev bin (ln 2 / 8) per step, 1..4 tokens per stair */
            for (int64_t j = 0; j < V; j++) x[j] = 4.0f * rnd() - 20.0f;
            for (int j = 0; j < 64; j++)
                for (int t = 0; t < 1 + j % 4; t++) x[next() % V] = 10.0f - 0.0866433976f * (float)j;
            break;
        case 4: /* 2 or 3 tied tokens alone (as case 2): top_p targets exactly at their tie */
            for (int64_t j = 0; j < V; j++) x[j] = -INFINITY;
            for (int t = 0; t < 2 + (int)(r / 7) % 2; t++) x[next() % V] = 20.0f;
            break;
        default: /* make_step's row (ties, NaN, -inf, +inf, all -inf) */
            break;
        }
        f[RT_SAMPLE_TEMP] = (float)(0.3 + 1.2 * unif());
        q[RT_SAMPLE_TOP_K] = k < V ? k : 0;
        const int nt = 2 + (int)(r / 7) % 2, num = 1 + (int)(r / 14) % (nt - 1); /* case 4: 1/2, 1/3, 2/3 */
        f[RT_SAMPLE_TOP_P] = r % 7 == 4 ? (float)num / (float)nt : ps[(r / 3) % 8];
        f[RT_SAMPLE_MIN_P] = r % 3 == 0 ? (float)(0.001 + 0.2 * unif()) : 0.0f;
        f[RT_SAMPLE_LOG_MIN_P] = f[RT_SAMPLE_MIN_P] > 0 ? logf(f[RT_SAMPLE_MIN_P]) : -INFINITY;
        set_u(q, unif());
    }
}

/* Rows of s whose CPU nucleus (finite tokens after all cuts) has <= cap
 * tokens, and rows with more. */
static void nucleus_sizes(const step *s, int cap, int *n_small, int *n_wide) {
    int32_t *tc = xmalloc((size_t)s->R * sizeof *tc);
    float *p = xmalloc((size_t)(s->R * s->V) * sizeof *p);
    run_cpu(s, tc, p);
    *n_small = *n_wide = 0;
    for (int64_t r = 0; r < s->R; r++) {
        if (!(s->fp[r * RT_SAMPLE_NF + RT_SAMPLE_TOP_P] < 1.0f)) continue;
        int64_t n = 0;
        for (int64_t j = 0; j < s->V; j++) n += p[r * s->V + j] > -INFINITY;
        if (n > cap) (*n_wide)++;
        else if (n > 0) (*n_small)++;
    }
    free(tc);
    free(p);
}

static void test_topp_paths(void **st) {
    (void)st;
    NEED_GPU();
    const int64_t Vs[] = {151936, 32000, 5000};
    const int64_t Rs[] = {210, 70, 70};
    int n_small = 0, n_wide = 0;
    for (int vi = 0; vi < 3; vi++) {
        step s = make_step(Rs[vi], Vs[vi], 6.0f, 1);
        topp_rows(&s);
        int small, wide;
        nucleus_sizes(&s, 3072, &small, &wide);
        n_small += small;
        n_wide += wide;
        char what[64];
        snprintf(what, sizeof what, "top_p paths V=%lld", (long long)Vs[vi]);
        print_message("%s: %d top_p rows with a nucleus <= 3072 tokens, %d wider\n", what, small, wide);
        compare(&s, what);
        step_free(&s);
    }
    assert_true(n_small >= 60 && n_wide >= 20); /* both the cut and the fallback were exercised */
}

static void dist_check(const int32_t *tg, int64_t R, const double *e, double S, const char *name);

static void test_distribution(void **st) {
    (void)st;
    NEED_GPU();
    const int64_t V = 48, R = 40000;
    step s = {.R = R, .V = V};
    s.logits = xmalloc((size_t)(R * V) * sizeof *s.logits);
    s.fp = xmalloc((size_t)R * RT_SAMPLE_NF * sizeof *s.fp);
    s.ip = xmalloc((size_t)R * RT_SAMPLE_NI * sizeof *s.ip);
    float row[48];
    for (int64_t j = 0; j < V; j++) row[j] = 2.0f * rnd();
    for (int64_t r = 0; r < R; r++) {
        memcpy(s.logits + r * V, row, sizeof row);
        float *f = s.fp + r * RT_SAMPLE_NF;
        int32_t *q = s.ip + r * RT_SAMPLE_NI;
        f[RT_SAMPLE_TEMP] = 0.7f;
        f[RT_SAMPLE_TOP_P] = 0.9f;
        f[RT_SAMPLE_LOG_MIN_P] = -INFINITY;
        f[RT_SAMPLE_REP] = 1.0f;
        q[RT_SAMPLE_TOP_K] = 30;
        set_u(q, unif());
    }
    int32_t *tg = xmalloc((size_t)R * sizeof *tg), t1;
    for (int kk = 0; kk < 2; kk++) { /* top_k 30 (its candidates) and none (the tail over the row) */
        for (int64_t r = 0; r < R; r++) s.ip[r * RT_SAMPLE_NI + RT_SAMPLE_TOP_K] = kk ? 0 : 30;
        step one = s;
        one.R = 1;
        float p[48];
        run_cpu(&one, &t1, p);
        double mx = -INFINITY, S = 0, e[48];
        for (int64_t j = 0; j < V; j++) mx = p[j] > mx ? p[j] : mx;
        for (int64_t j = 0; j < V; j++) S += e[j] = p[j] > -INFINITY ? exp((double)p[j] - mx) : 0.0;
        for (int c = 0; c < N_CFGS; c++) { /* the cluster kernel (one CTA a row here, 8, 16) and the block kernel */
            if (!g_cfgs[c].dist || !cfg_on(c)) continue;
            use_cfg(c);
            run_gpu(&s, tg, 1);
            char name[64];
            snprintf(name, sizeof name, "%s, top_k %d", g_cfgs[c].name, kk ? 0 : 30);
            dist_check(tg, R, e, S, name);
        }
    }
    use_cfg(CFG_AUTO);
    free(tg);
    step_free(&s);
}

static void dist_check(const int32_t *tg, int64_t R, const double *e, double S, const char *name) {
    const int64_t V = 48;
    int64_t obs[48] = {0};
    for (int64_t r = 0; r < R; r++) {
        assert_true(tg[r] >= 0 && tg[r] < V);
        obs[tg[r]]++;
    }
    double chi2 = 0;
    int kept = 0;
    for (int64_t j = 0; j < V; j++) {
        if (e[j] == 0) {
            if (obs[j]) fail_msg("token %lld drawn %lld times but filtered", (long long)j, (long long)obs[j]);
            continue;
        }
        double ex = (double)R * e[j] / S;
        chi2 += ((double)obs[j] - ex) * ((double)obs[j] - ex) / ex;
        kept++;
    }
    double dof = kept - 1, lim = dof + 8 * sqrt(2 * dof);
    print_message("distribution [%s]: %d kept tokens, chi2 %.1f (dof %.0f, limit %.1f) over %lld draws\n", name, kept,
                  chi2, dof, lim, (long long)R);
    assert_true(kept > 3 && chi2 < lim);
}

/* Every row of s: temperature T, top_k k (0: off), top_p p, nothing else. */
static void speed_params(step *s, float T, int k, float p) {
    for (int64_t r = 0; r < s->R; r++) {
        float *f = s->fp + r * RT_SAMPLE_NF;
        int32_t *q = s->ip + r * RT_SAMPLE_NI;
        f[RT_SAMPLE_TEMP] = T;
        f[RT_SAMPLE_TOP_P] = p;
        f[RT_SAMPLE_MIN_P] = 0.0f;
        f[RT_SAMPLE_LOG_MIN_P] = -INFINITY;
        f[RT_SAMPLE_REP] = 1.0f;
        f[RT_SAMPLE_FREQ] = f[RT_SAMPLE_PRES] = 0.0f;
        q[RT_SAMPLE_TOP_K] = k;
        q[RT_SAMPLE_N_PROMPT] = q[RT_SAMPLE_N_OUTPUT] = 0;
    }
}

/* One speed line: the op on s with the one-block-per-row kernel
 * (VLLM_CUDA_TOPP=0, before) and the cluster kernel (after; then forced to
 * 16 CTAs a row, and with k_sample's match-aggregated histogram), each the
 * best of reps calls, us including launch and sync. At B > 132 (one CTA a
 * row on an H200, where rows without top_p run k_sample's row code) also
 * "own": the cluster kernel with every row on its own code
 * (VLLM_CUDA_TOPP_BLOCKROWS=0, i.e. before that routing). */
static void speed_line(step *s, int32_t *tg, const char *name, int reps) {
    /* block, cluster auto, cluster 16, auto with match-aggregated bins, auto with every row on its own code */
    static const int cfg[5] = {CFG_BLOCK, CFG_AUTO, CFG_16, -1, -2};
    const int n = s->R > 132 ? 5 : 4;
    double us[5];
    const int64_t nh = s->n_hist;
    s->n_hist = 0;
    for (int c = 0; c < n; c++) {
        use_cfg(cfg[c] >= 0 ? cfg[c] : CFG_AUTO);
        if (cfg[c] == -1) setenv("VLLM_CUDA_TOPP_HIST", "match", 1);
        if (cfg[c] == -2) setenv("VLLM_CUDA_TOPP_BLOCKROWS", "0", 1);
        run_gpu(s, tg, reps);
        us[c] = g_gpu_us;
    }
    use_cfg(CFG_AUTO);
    s->n_hist = nh;
    char own[32] = "";
    if (n == 5) snprintf(own, sizeof own, ", own: %6.1f", us[4]);
    print_message("speed: sample B=%-3lld V=%-6lld %-24s block %7.1f cluster %6.1f (16: %6.1f, match: %6.1f%s) us\n",
                  (long long)s->R, (long long)s->V, name, us[0], us[1], us[2], us[3], own);
}

static void test_speed(void **st) {
    (void)st;
    NEED_GPU();
    /* VLLM_CUDA_SPEED=0: skip (e.g. under compute-sanitizer); =topp: only
     * the top_p-alone lines, one call each (for ncu) */
    const char *env = getenv("VLLM_CUDA_SPEED");
    if (env && !strcmp(env, "0")) skip();
    const bool topp_only = env && !strcmp(env, "topp");
    const int reps = topp_only ? 1 : 3;
    const int64_t Vs[] = {128256, 151936}, Bs[] = {1, 16, 64, 256};
    for (int vi = 0; vi < 2; vi++)
        for (int bi = 0; bi < 4; bi++) {
            const int64_t V = Vs[vi], R = Bs[bi];
            if (R == 256 && (V != 151936 || topp_only)) continue;
            step s = make_step(R, V, 4.0f, 0); /* flat rows: logits uniform in [-4, 4] */
            int32_t *tg = xmalloc((size_t)R * sizeof *tg);
            if (!topp_only) {
                speed_params(&s, 1.0f, 0, 1.0f);
                speed_line(&s, tg, "T=1", reps);
                speed_params(&s, 0.0f, 0, 1.0f);
                speed_line(&s, tg, "greedy", reps);
                speed_params(&s, 0.8f, 50, 0.9f);
                speed_line(&s, tg, "T=0.8 top_k=50 top_p=0.9", reps);
            }
            speed_params(&s, 0.8f, 0, 0.9f);
            speed_line(&s, tg, "T=0.8 top_p=0.9 flat", reps);
            for (int64_t r = 0; r < R; r++) peak_row(s.logits + r * V, V); /* LM-like rows */
            speed_line(&s, tg, "T=0.8 top_p=0.9 peaked", reps);
            if (!topp_only) {
                speed_params(&s, 1.0f, 0, 1.0f);
                speed_line(&s, tg, "T=1 peaked", reps);
            }
            free(tg);
            step_free(&s);
        }
    use_cfg(CFG_AUTO);
}

int main(void) {
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_small_vocab),
        cmocka_unit_test(test_large_vocab),
        cmocka_unit_test(test_topk_paths),
        cmocka_unit_test(test_topp_paths),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_speed),
    };
    /* VLLM_TEST_FILTER=name: that test only; VLLM_TEST_SKIP=a,b: all but
     * those (e.g. under compute-sanitizer) */
    const char *flt = getenv("VLLM_TEST_FILTER"), *skp = getenv("VLLM_TEST_SKIP");
    struct CMUnitTest tests[sizeof all / sizeof all[0]];
    size_t n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (flt && *flt && strcmp(flt, all[i].name)) continue;
        if (skp && *skp) {
            const char *p = strstr(skp, all[i].name);
            size_t l = strlen(all[i].name);
            if (p && (p == skp || p[-1] == ',') && (p[l] == ',' || p[l] == 0)) continue;
        }
        tests[n++] = all[i];
    }
    return _cmocka_run_group_tests("test_cuda_sample", tests, n, cuda_test_group_setup, cuda_test_group_teardown);
}
