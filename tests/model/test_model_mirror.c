/* The device mirror of sampled ids (model.h: enqueue + collect, splices) on
 * the CPU backend, which takes the same code path as an accelerator
 * (VLLM_TEST_DEVICE=cuda runs it on the CUDA backend; logits then compare
 * within 1e-5 relative instead of bit for bit):
 *  - pipelined greedy decoding of two sequences — step k+1 enqueued with
 *    its input ids spliced from step k's ticket before step k is collected —
 *    gives the ids of plain synchronous steps whose inputs are filled on
 *    the host;
 *  - device sampling with a history entry spliced in (frequency penalty
 *    over the in-flight token) equals the synchronous step with the
 *    history filled on the host; a logits step with a splice
 *    (mdl_forward_batch_splice) equals mdl_forward_batch with the ids
 *    filled; mdl_mirror_put ids splice like device ones;
 *  - the single-sequence API (mdl_seq_argmax_async, `vllm run`'s greedy
 *    loop) a step ahead gives mdl_forward_argmax's ids; sampling on the
 *    device a step ahead (mdl_seq_sample_async) draws the tokens of steps
 *    taken one at a time and, on the CPU, the host sampler's;
 *  - the rules: a ticket whose slot holds an uncollected ticket is refused
 *    (buffers are reused only after their copy was seen complete); splices
 *    only from the last ticket, with rows / sources / history indices in
 *    range; collect of an unknown ticket fails; collect is idempotent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/model.h"
#include "runtime/ops.h"
#include "sample/batch.h"

#define TINY VLLM_SOURCE_DIR "/tests/fixtures/models/tiny-llama"
enum { BS = 4, MB = 4, STEPS = 6 };

static rt_backend *g_be;
static mdl_model *g_m;

static void same_logits(const float *a, const float *b, int64_t n) {
    if (g_be->device == RT_DEV_CPU) {
        assert_memory_equal(a, b, (size_t)n * sizeof *a);
        return;
    }
    double mx = 1e-6, err = 0;
    for (int64_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs((double)a[i]));
        err = fmax(err, fabs((double)a[i] - b[i]));
    }
    if (err > 1e-5 * mx) fail_msg("logits differ by %g (max %g)", err, mx);
}

/* Two sequences: a prefill of 3 / 4 tokens, then one token each. */
typedef struct {
    int32_t ids[8], pos[8], slots[8], qsl[3], sl[2], rows[2], len[2], T;
    int32_t bt[2 * MB];
    mdl_batch b;
} step_buf;

static void make_step(step_buf *s, int step, const int32_t *next) {
    int64_t V = mdl_get_config(g_m)->vocab;
    if (step == 0) {
        memset(s, 0, sizeof *s);
        for (int i = 0; i < 2 * MB; i++) s->bt[i] = i;
    }
    s->T = 0;
    s->qsl[0] = 0;
    for (int q = 0; q < 2; q++) {
        int n = step == 0 ? 3 + q : 1;
        for (int i = 0; i < n; i++, s->T++) {
            s->ids[s->T] = step == 0 ? (int32_t)((5 * q + 7 * i + 1) % V) : next[q];
            s->pos[s->T] = s->len[q] + i;
            s->slots[s->T] = s->bt[q * MB + s->pos[s->T] / BS] * BS + s->pos[s->T] % BS;
        }
        s->len[q] += n;
        s->qsl[q + 1] = s->T;
        s->sl[q] = s->len[q];
        s->rows[q] = s->T - 1;
    }
    s->b = (mdl_batch){.n_tokens = s->T, .ids = s->ids, .positions = s->pos, .slots = s->slots, .n_seqs = 2,
                       .qsl = s->qsl, .seq_lens = s->sl, .block_tables = s->bt, .max_blocks = MB, .n_logits = 2,
                       .logit_rows = s->rows};
}

static mdl_kv *new_kv(void) {
    mdl_kv *kv = mdl_kv_create(g_m, 2 * MB, BS);
    assert_non_null(kv);
    return kv;
}

/* Reference: synchronous greedy steps, inputs filled on the host. */
static void reference(int32_t out[STEPS][2]) {
    mdl_kv *kv = new_kv();
    step_buf s;
    int32_t next[2] = {0, 0};
    for (int k = 0; k < STEPS; k++) {
        make_step(&s, k, next);
        assert_int_equal(mdl_forward_batch_argmax(g_m, kv, &s.b, out[k]), VC_OK);
        memcpy(next, out[k], sizeof next);
    }
    mdl_kv_free(kv);
}

static void test_pipelined_greedy(void **st) {
    (void)st;
    assert_true(mdl_can_mirror(g_m));
    int32_t want[STEPS][2], got[STEPS][2];
    reference(want);
    mdl_kv *kv = new_kv();
    step_buf s;
    const int32_t zero[2] = {0, 0}, rows[2] = {0, 1}, src[2] = {0, 1};
    mdl_ticket t[STEPS];
    make_step(&s, 0, zero);
    assert_int_equal(mdl_forward_batch_argmax_async(g_m, kv, &s.b, NULL, &t[0]), VC_OK);
    for (int k = 1; k < STEPS; k++) {
        make_step(&s, k, zero); /* placeholders: 0 on the host */
        mdl_splice sp = {.prev = t[k - 1], .n = 2, .rows = rows, .src = src};
        assert_int_equal(mdl_forward_batch_argmax_async(g_m, kv, &s.b, &sp, &t[k]), VC_OK);
        assert_int_equal(t[k], t[k - 1] + 1);
        assert_int_equal(mdl_collect(g_m, t[k - 1], got[k - 1]), VC_OK); /* after step k was enqueued */
    }
    assert_int_equal(mdl_collect(g_m, t[STEPS - 1], got[STEPS - 1]), VC_OK);
    int32_t again[2] = {-1, -1};
    assert_int_equal(mdl_collect(g_m, t[STEPS - 1], again), VC_OK); /* idempotent */
    assert_memory_equal(again, got[STEPS - 1], sizeof again);
    assert_memory_equal(got, want, sizeof want);
    /* not every step repeats the prompt's last ids: the splice mattered */
    int moved = 0;
    for (int k = 1; k < STEPS; k++) moved += want[k][0] != 0 || want[k][1] != 0;
    assert_true(moved > 0);
    mdl_kv_free(kv);
}

/* Greedy rows with a frequency penalty over their output history: the
 * last output is the in-flight token. */
static void sample_args(int32_t n_out, float *fp, int32_t *ip) {
    memset(fp, 0, 2 * RT_SAMPLE_NF * sizeof *fp);
    memset(ip, 0, 2 * RT_SAMPLE_NI * sizeof *ip);
    for (int r = 0; r < 2; r++) {
        float *f = fp + r * RT_SAMPLE_NF;
        int32_t *q = ip + r * RT_SAMPLE_NI;
        f[RT_SAMPLE_TOP_P] = 1.0f;
        f[RT_SAMPLE_LOG_MIN_P] = -INFINITY;
        f[RT_SAMPLE_REP] = 1.0f;
        f[RT_SAMPLE_FREQ] = 2.0f;
        f[RT_SAMPLE_PRES] = 2.0f;
        q[RT_SAMPLE_HIST_OFF] = r * n_out;
        q[RT_SAMPLE_N_OUTPUT] = n_out;
    }
}

static void test_sample_and_logits_splice(void **st) {
    (void)st;
    int64_t V = mdl_get_config(g_m)->vocab;
    float fp[2 * RT_SAMPLE_NF], *lg_a = malloc((size_t)(2 * V) * sizeof(float)),
                                *lg_b = malloc((size_t)(2 * V) * sizeof(float));
    int32_t ip[2 * RT_SAMPLE_NI];
    assert_true(lg_a && lg_b);
    /* Reference: outputs so far kept on the host, history = all of them;
     * and once with the in-flight entries left 0 (which must differ, else
     * the history splice would go unchecked). */
    int32_t hist_ref[2 * STEPS], want[STEPS][2], stale[STEPS][2];
    for (int pass = 0; pass < 2; pass++) {
        int32_t(*out)[2] = pass ? stale : want, next[2] = {0, 0};
        mdl_kv *kv = new_kv();
        step_buf s;
        for (int k = 0; k < STEPS; k++) {
            make_step(&s, k, next);
            for (int r = 0; r < 2; r++)
                for (int j = 0; j < k; j++) hist_ref[r * k + j] = pass && j == k - 1 ? 0 : out[j][r];
            sample_args(k, fp, ip);
            mdl_sample_args sa = {.fparams = fp, .iparams = ip, .hist = k ? hist_ref : NULL, .n_hist = 2 * k};
            if (mdl_forward_batch_sample(g_m, kv, &s.b, &sa, out[k]) != VC_OK) fail_msg("step %d: %s", k, vc_err_msg());
            memcpy(next, out[k], sizeof next);
        }
        mdl_kv_free(kv);
    }
    assert_memory_not_equal(want, stale, sizeof want);
    /* Pipelined: ids and the history's last entries spliced on the device. */
    mdl_kv *kv = new_kv();
    step_buf s;
    int32_t hist[2 * STEPS], got[STEPS][2];
    const int32_t zero[2] = {0, 0}, rows[2] = {0, 1}, src[2] = {0, 1};
    mdl_ticket t[STEPS];
    for (int k = 0; k < STEPS; k++) {
        make_step(&s, k, zero);
        for (int r = 0; r < 2; r++) {
            for (int j = 0; j + 1 < k; j++) hist[r * k + j] = got[j][r]; /* collected ones */
            if (k) hist[r * k + k - 1] = 0;                               /* in flight */
        }
        int32_t hpos[2] = {k - 1, 2 * k - 1};
        mdl_splice sp = {.prev = k ? t[k - 1] : 0, .n = k ? 2 : 0, .rows = rows, .src = src, .hist = hpos};
        sample_args(k, fp, ip);
        mdl_sample_args sa = {.fparams = fp, .iparams = ip, .hist = k ? hist : NULL, .n_hist = 2 * k};
        assert_int_equal(mdl_forward_batch_sample_async(g_m, kv, &s.b, &sa, k ? &sp : NULL, &t[k]), VC_OK);
        if (k) assert_int_equal(mdl_collect(g_m, t[k - 1], got[k - 1]), VC_OK);
    }
    assert_int_equal(mdl_collect(g_m, t[STEPS - 1], got[STEPS - 1]), VC_OK);
    assert_memory_equal(got, want, sizeof want);
    mdl_kv_free(kv);

    /* A logits step spliced from a device ticket / from host ids (put). */
    mdl_kv *ka = new_kv(), *kb = new_kv();
    step_buf sa_, sb_;
    make_step(&sa_, 0, zero);
    make_step(&sb_, 0, zero);
    mdl_ticket t0, tp;
    int32_t first[2];
    assert_int_equal(mdl_forward_batch_argmax_async(g_m, ka, &sa_.b, NULL, &t0), VC_OK);
    assert_int_equal(mdl_collect(g_m, t0, first), VC_OK);
    assert_int_equal(mdl_forward_batch_argmax(g_m, kb, &sb_.b, first), VC_OK);
    make_step(&sa_, 1, zero);
    make_step(&sb_, 1, first);
    mdl_splice sp = {.prev = t0 + 1, .n = 2, .rows = rows, .src = src}; /* t0 + 1: the sync call's ticket */
    assert_int_equal(mdl_forward_batch_splice(g_m, ka, &sa_.b, &sp, lg_a), VC_OK);
    assert_int_equal(mdl_forward_batch(g_m, kb, &sb_.b, lg_b), VC_OK);
    same_logits(lg_a, lg_b, 2 * V);
    int32_t put[2] = {(int32_t)(V - 1), 3};
    assert_int_equal(mdl_mirror_put(g_m, put, 2, &tp), VC_OK);
    int32_t back[2];
    assert_int_equal(mdl_collect(g_m, tp, back), VC_OK);
    assert_memory_equal(back, put, sizeof put);
    make_step(&sa_, 2, zero);
    make_step(&sb_, 2, put);
    sp.prev = tp;
    assert_int_equal(mdl_forward_batch_splice(g_m, ka, &sa_.b, &sp, lg_a), VC_OK);
    assert_int_equal(mdl_forward_batch(g_m, kb, &sb_.b, lg_b), VC_OK);
    same_logits(lg_a, lg_b, 2 * V);
    mdl_kv_free(ka);
    mdl_kv_free(kb);
    free(lg_a);
    free(lg_b);
}

static void test_rules(void **st) {
    (void)st;
    mdl_kv *kv = new_kv();
    step_buf s;
    const int32_t zero[2] = {0, 0}, rows[2] = {0, 1}, src[2] = {0, 1};
    make_step(&s, 0, zero);
    mdl_ticket a, b, c;
    assert_int_equal(mdl_forward_batch_argmax_async(g_m, kv, &s.b, NULL, &a), VC_OK);
    assert_int_equal(mdl_forward_batch_argmax_async(g_m, kv, &s.b, NULL, &b), VC_OK);
    /* a's buffers are b + 1's: refused until a is collected */
    assert_int_equal(mdl_forward_batch_argmax_async(g_m, kv, &s.b, NULL, &c), VC_ERR_INVALID);
    assert_non_null(strstr(vc_err_msg(), "collect"));
    int32_t ids[2];
    assert_int_equal(mdl_mirror_put(g_m, zero, 2, &c), VC_ERR_INVALID);
    assert_int_equal(mdl_collect(g_m, a, ids), VC_OK);
    /* splice from a, which is not the last ticket */
    make_step(&s, 1, zero);
    mdl_splice sp = {.prev = a, .n = 2, .rows = rows, .src = src};
    assert_int_equal(mdl_forward_batch_argmax_async(g_m, kv, &s.b, &sp, &c), VC_ERR_INVALID);
    sp.prev = b;
    int32_t bad_rows[2] = {0, 2}, bad_src[2] = {0, 2}, bad_hist[2] = {0, -1};
    sp.rows = bad_rows; /* the step has 2 tokens */
    assert_int_equal(mdl_forward_batch_argmax_async(g_m, kv, &s.b, &sp, &c), VC_ERR_INVALID);
    sp.rows = rows;
    sp.src = bad_src; /* b has 2 ids */
    assert_int_equal(mdl_forward_batch_argmax_async(g_m, kv, &s.b, &sp, &c), VC_ERR_INVALID);
    sp.src = src;
    sp.hist = bad_hist; /* no sampling history to patch */
    assert_int_equal(mdl_forward_batch_argmax_async(g_m, kv, &s.b, &sp, &c), VC_ERR_INVALID);
    sp.hist = NULL;
    assert_int_equal(mdl_forward_batch_argmax_async(g_m, kv, &s.b, &sp, &c), VC_OK);
    assert_int_equal(mdl_collect(g_m, b, ids), VC_OK);
    assert_int_equal(mdl_collect(g_m, c, ids), VC_OK);
    assert_int_equal(mdl_collect(g_m, a, ids), VC_ERR_INVALID); /* reused by c */
    assert_int_equal(mdl_collect(g_m, c + 1, ids), VC_ERR_INVALID);
    assert_int_equal(mdl_collect(g_m, 0, ids), VC_ERR_INVALID);
    int32_t big[1] = {(int32_t)mdl_get_config(g_m)->vocab};
    assert_int_equal(mdl_mirror_put(g_m, big, 1, &c), VC_ERR_INVALID);
    mdl_kv_free(kv);
}

/* The single-sequence API keeps the device a step ahead (`vllm run`'s
 * greedy loop): mdl_seq_argmax_async steps spliced from the previous
 * ticket give the ids of plain mdl_forward_argmax steps; no input token,
 * or a step past the context, is refused and leaves the sequence as it
 * was. */
static void test_seq_pipeline(void **st) {
    (void)st;
    enum { N = 10 };
    const int32_t prompt[3] = {1, 5, 9};
    int32_t want[N], got[N];
    mdl_seq *a = mdl_seq_create(g_m, 64), *b = mdl_seq_create(g_m, 64);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(mdl_forward_argmax(g_m, a, prompt, 3, &want[0]), VC_OK);
    for (int k = 1; k < N; k++) assert_int_equal(mdl_forward_argmax(g_m, a, &want[k - 1], 1, &want[k]), VC_OK);
    assert_int_equal(mdl_forward_argmax(g_m, b, prompt, 3, &got[0]), VC_OK);
    mdl_ticket held = 0, nt = 0;
    for (int k = 0; k < N; k++) { /* as cmd_run.c: queue k + 1, then collect k */
        nt = 0;
        if (k + 1 < N) assert_int_equal(mdl_seq_argmax_async(g_m, b, held ? NULL : &got[0], held, &nt), VC_OK);
        if (held) assert_int_equal(mdl_collect(g_m, held, &got[k]), VC_OK);
        held = nt;
    }
    assert_memory_equal(want, got, sizeof want);
    assert_int_equal(mdl_seq_len(b), 3 + N - 1);
    mdl_ticket t = 0;
    assert_int_equal(mdl_seq_argmax_async(g_m, b, NULL, 0, &t), VC_ERR_INVALID);
    assert_int_equal(t, 0);
    assert_int_equal(mdl_seq_len(b), 3 + N - 1);
    mdl_seq *c = mdl_seq_create(g_m, 4);
    assert_non_null(c);
    int32_t x = 0;
    assert_int_equal(mdl_forward_argmax(g_m, c, prompt, 3, &x), VC_OK);
    assert_int_equal(mdl_seq_argmax_async(g_m, c, &x, 0, &t), VC_OK);
    assert_int_equal(mdl_collect(g_m, t, &x), VC_OK);
    mdl_ticket t2 = 0;
    assert_int_equal(mdl_seq_argmax_async(g_m, c, NULL, t, &t2), VC_ERR_INVALID); /* position 4 of 4 */
    assert_int_equal(mdl_seq_len(c), 4);
    mdl_seq_free(a), mdl_seq_free(b), mdl_seq_free(c);
}

/* Sampling on the device a step ahead (`vllm run` at temperature > 0):
 * mdl_seq_sample_async steps queued before the previous one is collected
 * draw the tokens of steps collected one at a time (the same op on the
 * same inputs, so bit for bit on any backend); on the CPU they also equal
 * the host sampler's draws (smp_batch_sample_us) over mdl_forward's
 * logits with the same uniforms. No sampling arguments: refused. */
static void test_seq_pipeline_sample(void **st) {
    (void)st;
    enum { N = 12 };
    const int32_t prompt[3] = {2, 7, 11};
    const int64_t V = mdl_get_config(g_m)->vocab;
    int32_t one[N], piped[N], host[N];
    float f[N][RT_SAMPLE_NF];
    int32_t q[N][RT_SAMPLE_NI];
    double us[N];
    for (int k = 0; k < N; k++) {
        us[k] = (k * 0.37 + 0.11) - (int)(k * 0.37 + 0.11); /* spread over [0, 1) */
        rt_sample_row(f[k], q[k], 0.8f, k % 3 ? 0.9f : 1.0f, k % 4 ? 0.0f : 0.05f, k % 2 ? 0 : 20, 1.0f, 0.0f, 0.0f,
                      0, 0, 0, us[k]);
    }
    float *logits = malloc((size_t)V * sizeof *logits);
    assert_non_null(logits);
    mdl_seq *a = mdl_seq_create(g_m, 64), *b = mdl_seq_create(g_m, 64);
    assert_non_null(a);
    assert_non_null(b);
    /* one step at a time: enqueue, collect, the next with the host id */
    assert_int_equal(mdl_forward_argmax(g_m, a, prompt, 3, &one[0]), VC_OK);
    for (int k = 1; k < N; k++) {
        mdl_ticket t = 0;
        mdl_sample_args sa = {.fparams = f[k], .iparams = q[k]};
        assert_int_equal(mdl_seq_sample_async(g_m, a, &one[k - 1], 0, &sa, &t), VC_OK);
        assert_int_equal(mdl_collect(g_m, t, &one[k]), VC_OK);
    }
    /* a step ahead */
    assert_int_equal(mdl_forward_argmax(g_m, b, prompt, 3, &piped[0]), VC_OK);
    mdl_ticket held = 0;
    for (int k = 0; k < N; k++) {
        mdl_ticket nt = 0;
        if (k + 1 < N) {
            mdl_sample_args sa = {.fparams = f[k + 1], .iparams = q[k + 1]};
            assert_int_equal(mdl_seq_sample_async(g_m, b, held ? NULL : &piped[0], held, &sa, &nt), VC_OK);
        }
        if (held) assert_int_equal(mdl_collect(g_m, held, &piped[k]), VC_OK);
        held = nt;
    }
    assert_memory_equal(one, piped, sizeof one);
    if (g_be->device == RT_DEV_CPU) { /* the host sampler's draws over the logits */
        smp_batch_params bp = smp_batch_params_default();
        bp.vocab = V;
        bp.max_batch = 1;
        smp_batch *sb = smp_batch_create(&bp);
        assert_non_null(sb);
        mdl_seq *c = mdl_seq_create(g_m, 64);
        assert_non_null(c);
        assert_int_equal(mdl_forward_argmax(g_m, c, prompt, 3, &host[0]), VC_OK);
        for (int k = 1; k < N; k++) {
            assert_int_equal(mdl_forward(g_m, c, &host[k - 1], 1, logits, false), VC_OK);
            smp_plain pl = {.temperature = f[k][RT_SAMPLE_TEMP], .top_p = f[k][RT_SAMPLE_TOP_P],
                            .min_p = f[k][RT_SAMPLE_MIN_P], .repetition = 1.0f, .top_k = q[k][RT_SAMPLE_TOP_K]};
            smp_req *r = NULL;
            assert_int_equal(smp_req_create_plain(sb, &pl, &r), VC_OK);
            smp_row row = {.req = r};
            assert_int_equal(smp_batch_sample_us(sb, logits, &row, 1, &us[k]), VC_OK);
            host[k] = smp_batch_output(sb)->tokens[0];
            smp_req_free(r);
        }
        assert_memory_equal(one, host, sizeof one);
        mdl_seq_free(c);
        smp_batch_free(sb);
    }
    mdl_ticket t = 0;
    assert_int_equal(mdl_seq_sample_async(g_m, a, &one[0], 0, NULL, &t), VC_ERR_INVALID);
    assert_int_equal(t, 0);
    mdl_seq_free(a), mdl_seq_free(b);
    free(logits);
}

static int setup(void **st) {
    (void)st;
    rt_backend_params p = rt_backend_params_default();
    p.n_threads = 2;
    const char *dev = getenv("VLLM_TEST_DEVICE");
    g_be = rt_backend_create(dev && !strcmp(dev, "cuda") ? RT_DEV_CUDA : RT_DEV_CPU, &p);
    if (!g_be) return -1;
    g_m = mdl_load(TINY, g_be, NULL);
    return g_m ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    mdl_free(g_m);
    rt_backend_free(g_be);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipelined_greedy),
        cmocka_unit_test(test_seq_pipeline),
        cmocka_unit_test(test_seq_pipeline_sample),
        cmocka_unit_test(test_sample_and_logits_splice),
        cmocka_unit_test(test_rules),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
