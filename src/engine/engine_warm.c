/* engine_warm — the engine's start-up warm-up on an accelerator (like
 * vLLM's profile run), before the KV cache is sized from the free memory:
 *   1. a forward of the whole step budget (max_num_batched_tokens tokens of
 *      id 0; in several sequences where the budget exceeds the model
 *      length, as many as a step may hold) and one decode token;
 *   2. steps of 1 .. max_num_seqs sequences of 4 tokens (every logit row
 *      count a step can bring), sampled on the device where the model can.
 * Library kernels get loaded and tuned (cuBLAS loads a GEMM's kernels at
 * its first call: ~40 ms on an 8B prefill; the first call of a new shape
 * holds the host), workspaces reach their steady size and so count in the
 * free memory measured next, and the first requests pay for none of it.
 * Everything runs on throw-away KV caches: it leaves no trace
 * (test_engine_warmup). The CPU backend skips it (nothing to load; a full
 * budget would take seconds). VLLM_WARMUP=0 turns it off, VLLM_WARMUP=1
 * forces it on any backend; VLLM_WARMUP_ROWS sets part 2's rows. */
#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "engine/engine_int.h"
#include "runtime/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { WARM_BS = 16 }; /* the throw-away caches' block size */

/* Part 1: `budget` tokens in k sequences of at most max_len tokens each (k
 * at most max_seqs: no step holds more; then fewer tokens), one logit row a
 * sequence (argmaxed), then one decode token on the first sequence.
 * *tokens_out / *seqs_out: the forward's tokens and sequences. */
static int warm_up_budget(eng_engine *e, int64_t budget, int64_t max_len, int64_t max_seqs, int64_t *tokens_out,
                          int64_t *seqs_out) {
    int64_t k = (budget + max_len - 1) / max_len;
    if (k > max_seqs) k = max_seqs;
    const int64_t T = budget < k * max_len ? budget : k * max_len;
    /* blocks a sequence: its tokens and the decode token (the first one's) */
    const int64_t maxb = (max_len + 1 + WARM_BS - 1) / WARM_BS;
    int32_t *buf = malloc((size_t)(3 * T + 4 * k + 1 + k * maxb + 8) * sizeof *buf);
    if (!buf) return vc_err_set(VC_ERR_OOM, "warm-up: out of memory");
    int32_t *ids = buf, *pos = ids + T, *slots = pos + T, *qsl = slots + T, *sl = qsl + k + 1, *rows = sl + k,
            *out = rows + k, *bt = out + k, *one = bt + k * maxb; /* one: the decode step's 4 ints */
    int32_t nblk = 0;
    for (int64_t s = 0, t = 0; s < k; s++) {
        const int64_t len = T - t < max_len ? T - t : max_len;
        const int32_t nb = (int32_t)((len + 1 + WARM_BS - 1) / WARM_BS);
        for (int32_t j = 0; j < maxb; j++) bt[s * maxb + j] = j < nb ? nblk + j : 0;
        qsl[s] = (int32_t)t, sl[s] = (int32_t)len, rows[s] = (int32_t)(t + len - 1);
        for (int64_t j = 0; j < len; j++, t++)
            ids[t] = 0, pos[t] = (int32_t)j, slots[t] = (int32_t)(bt[s * maxb + j / WARM_BS] * WARM_BS + j % WARM_BS);
        nblk += nb;
    }
    qsl[k] = (int32_t)T;
    mdl_kv *kv = mdl_kv_create(e->m, nblk, WARM_BS);
    int rc = kv ? VC_OK : VC_ERR_OOM; /* message set by mdl_kv_create */
    if (rc == VC_OK) {
        mdl_batch b = {.n_tokens = (int32_t)T, .ids = ids, .positions = pos, .slots = slots, .n_seqs = (int32_t)k,
                       .qsl = qsl, .seq_lens = sl, .block_tables = bt, .max_blocks = (int32_t)maxb,
                       .n_logits = (int32_t)k, .logit_rows = rows};
        rc = mdl_forward_batch_argmax(e->m, kv, &b, out);
    }
    if (rc == VC_OK) { /* one decode token on sequence 0 (its sl[0] tokens cached) */
        const int32_t p0 = sl[0];
        one[0] = 0, one[1] = p0, one[2] = bt[p0 / WARM_BS] * WARM_BS + p0 % WARM_BS, one[3] = 0;
        int32_t q1[2] = {0, 1}, l1 = p0 + 1, r1 = 0;
        mdl_batch d = {.n_tokens = 1, .ids = one, .positions = one + 1, .slots = one + 2, .n_seqs = 1, .qsl = q1,
                       .seq_lens = &l1, .block_tables = bt, .max_blocks = (int32_t)maxb, .n_logits = 1,
                       .logit_rows = &r1};
        rc = mdl_forward_batch_argmax(e->m, kv, &d, out);
    }
    mdl_kv_free(kv);
    free(buf);
    *tokens_out = T, *seqs_out = k;
    return rc;
}

/* Part 2, the row counts: a step of L sequences of 4 tokens each for L =
 * 1 .. max_rows (the step's logit rows, L, are then a quarter of its rows:
 * the last layer on the logit rows takes it where it is on). A new row
 * count meets GEMM shapes the engine has not run yet (the LM head over L
 * rows; the last layer's matmuls over L rows), and their first call blocks
 * the host for the device's queue (CUDA loads the library's kernel lazily,
 * cuBLAS picks its algorithm): session 23 traced concurrency-64 serving's
 * mixed 8,192-token steps held 14-17 ms in the LM head's first call at each
 * new row count, and VLLM_LAST_ROWS=any's steps 3-5 ms longer; the
 * sampler's first call 13.5 ms, so the steps sample where the model can.
 * VLLM_WARMUP_ROWS=0 skips it; n: up to n rows (default: the engine's
 * max_num_seqs, at most 256 and a quarter of the step budget); *rows_io:
 * in the default, out the rows warmed. */
static int warm_up_rows(eng_engine *e, int64_t *rows_io, int64_t max_tokens) {
    const char *env = getenv("VLLM_WARMUP_ROWS");
    int64_t max_rows = *rows_io;
    if (env && *env) {
        char *end = NULL;
        long long v = strtoll(env, &end, 10);
        if (*end || v < 0) VC_WARN("VLLM_WARMUP_ROWS=%s: expected a row count >= 0; using %lld", env, (long long)max_rows);
        else max_rows = v;
    }
    if (max_rows > 256) max_rows = 256;
    if (max_rows > max_tokens / 4) max_rows = max_tokens / 4;
    if (max_rows < 1) max_rows = 0;
    *rows_io = max_rows; /* the rows warmed */
    if (max_rows < 1) return VC_OK;
    const int32_t NT = 4; /* tokens a sequence */
    const int64_t T = NT * max_rows;
    mdl_kv *kv = mdl_kv_create(e->m, (int32_t)max_rows, WARM_BS);
    int32_t *buf = malloc((size_t)(5 * T + 3 * max_rows + 2) * sizeof *buf);
    if (!kv || !buf) {
        mdl_kv_free(kv), free(buf);
        return kv ? vc_err_set(VC_ERR_OOM, "warm-up: out of memory") : VC_ERR_OOM;
    }
    int32_t *ids = buf, *pos = ids + T, *slots = pos + T, *out = slots + T, *qsl = out + T, *sl = qsl + max_rows + 1,
            *bt = sl + max_rows, *rows = bt + max_rows;
    /* the rows sampled on the device where the model can (the SAMPLE
     * op's first call held the host 13.5 ms in a traced run): temperature
     * 1, no filters, no penalties, u = 0 */
    const bool smp = mdl_can_sample(e->m);
    float *fp = smp ? calloc((size_t)(max_rows * RT_SAMPLE_NF), sizeof *fp) : NULL;
    int32_t *ip = smp ? calloc((size_t)(max_rows * RT_SAMPLE_NI), sizeof *ip) : NULL;
    if (smp && (!fp || !ip)) {
        mdl_kv_free(kv), free(buf), free(fp), free(ip);
        return vc_err_set(VC_ERR_OOM, "warm-up: out of memory");
    }
    for (int64_t r = 0; smp && r < max_rows; r++) {
        float *f = fp + r * RT_SAMPLE_NF;
        f[RT_SAMPLE_TEMP] = 1.0f, f[RT_SAMPLE_TOP_P] = 1.0f, f[RT_SAMPLE_MIN_P] = 0.0f;
        f[RT_SAMPLE_LOG_MIN_P] = -INFINITY, f[RT_SAMPLE_REP] = 1.0f;
    }
    const mdl_sample_args sa = {.fparams = fp, .iparams = ip, .hist = NULL, .n_hist = 0};
    int rc = VC_OK;
    for (int64_t L = 1; L <= max_rows && rc == VC_OK; L++) {
        for (int32_t s = 0; s < (int32_t)L; s++) {
            for (int32_t j = 0; j < NT; j++)
                ids[NT * s + j] = 0, pos[NT * s + j] = j, slots[NT * s + j] = s * WARM_BS + j;
            qsl[s] = NT * s, sl[s] = NT, bt[s] = s, rows[s] = NT * s + NT - 1;
        }
        qsl[L] = NT * (int32_t)L;
        mdl_batch b = {.n_tokens = NT * (int32_t)L, .ids = ids, .positions = pos, .slots = slots,
                       .n_seqs = (int32_t)L, .qsl = qsl, .seq_lens = sl, .block_tables = bt, .max_blocks = 1,
                       .n_logits = (int32_t)L, .logit_rows = rows};
        rc = smp && L > 1 ? mdl_forward_batch_sample(e->m, kv, &b, &sa, out) : mdl_forward_batch_argmax(e->m, kv, &b, out);
        if (rc == VC_OK && smp && L == 1) rc = mdl_forward_batch_sample(e->m, kv, &b, &sa, out);
    }
    mdl_kv_free(kv);
    free(buf), free(fp), free(ip);
    return rc;
}

int eng_warm_up(eng_engine *e, int64_t *rows_io) {
    const eng_params *p = &e->p;
    int64_t max_rows = *rows_io;
    *rows_io = 0;
    e->warm_tokens = e->warm_seqs = 0;
    const char *env = getenv("VLLM_WARMUP");
    bool force = env && !strcmp(env, "1"); /* also on the CPU (tests) */
    /* a sequence's tokens: its prompt and the decode token within the model length */
    const int64_t budget = p->max_num_batched_tokens, max_len = (int64_t)e->max_model_len - 1;
    if ((rt_backend_is_host(e->be) && !force) || (env && !strcmp(env, "0")) || budget < 1 || max_len < 1)
        return VC_OK;
    double t0 = vc_now_s();
    int64_t T = 0, k = 0;
    int rc = warm_up_budget(e, budget, max_len, p->max_num_seqs, &T, &k);
    if (rc < 0) return rc;
    e->warm_tokens = T, e->warm_seqs = k;
    const double t1 = vc_now_s();
    rc = warm_up_rows(e, &max_rows, T);
    if (rc < 0) return rc;
    *rows_io = max_rows; /* the decode graphs' warm-up goes as far (eng_create) */
    VC_INFO("warm-up: %lld-token forward (%lld sequence%s) + 1 decode step in %.0f ms, steps of 1 .. %lld rows in "
            "%.0f ms",
            (long long)T, (long long)k, k == 1 ? "" : "s", 1e3 * (t1 - t0), (long long)max_rows,
            1e3 * (vc_now_s() - t1));
    return VC_OK;
}
