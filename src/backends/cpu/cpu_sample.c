/* cpu_sample — SAMPLE on the CPU: the host sampler itself (sample/batch.h).
 *
 * Each row becomes an unseeded request built from its plain parameters and
 * is sampled by smp_batch_sample_us with the row's uniform, so the op is the
 * host sampler bit for bit (it is the oracle of the CUDA kernels). The
 * counting scratch (src[4]) is not needed here. Rows run on the calling
 * thread: this op serves tests and the CPU backend when device sampling is
 * forced on (VLLM_DEVICE_SAMPLING=1); the runner's host path samples rows in
 * parallel.
 */
#include "backends/cpu/cpu_internal.h"
#include "base/err.h"
#include "sample/batch.h"

#include <stdlib.h>
#include <string.h>

static double row_uniform(const int32_t *ip) {
    uint64_t bits = (uint64_t)(uint32_t)ip[RT_SAMPLE_U_LO] | (uint64_t)(uint32_t)ip[RT_SAMPLE_U_HI] << 32;
    double u;
    memcpy(&u, &bits, sizeof u);
    return u;
}

int cpu_op_sample(rt_backend *be, const rt_op_args *a) {
    (void)be;
    rt_tensor *logits = (rt_tensor *)a->src[0];
    const rt_tensor *hist = a->src[3];
    int32_t R = (int32_t)logits->shape[0];
    int64_t V = logits->shape[1], n_hist = hist ? rt_tensor_nelem(hist) : 0;
    if (R == 0) return VC_OK;
    const float *fp = a->src[1]->data;
    const int32_t *ip = a->src[2]->data, *h = hist ? hist->data : NULL;
    smp_batch_params bp = smp_batch_params_default();
    bp.vocab = V;
    bp.max_batch = R;
    bp.has_seed = true; /* its generator is never used: every uniform is given */
    smp_batch *b = smp_batch_create(&bp);
    smp_req **reqs = calloc((size_t)R, sizeof *reqs);
    smp_row *rows = calloc((size_t)R, sizeof *rows);
    double *us = malloc((size_t)R * sizeof *us);
    int rc = VC_OK;
    if (!b || !reqs || !rows || !us) {
        rc = b ? vc_err_set(VC_ERR_OOM, "cpu sample: out of memory") : VC_ERR_OOM;
        goto done;
    }
    for (int32_t i = 0; i < R && rc == VC_OK; i++) {
        const float *f = fp + (int64_t)i * RT_SAMPLE_NF;
        const int32_t *n = ip + (int64_t)i * RT_SAMPLE_NI;
        smp_plain p = {.temperature = f[RT_SAMPLE_TEMP], .top_p = f[RT_SAMPLE_TOP_P], .min_p = f[RT_SAMPLE_MIN_P],
                       .repetition = f[RT_SAMPLE_REP], .frequency = f[RT_SAMPLE_FREQ], .presence = f[RT_SAMPLE_PRES],
                       .top_k = n[RT_SAMPLE_TOP_K]};
        int64_t off = n[RT_SAMPLE_HIST_OFF], np = n[RT_SAMPLE_N_PROMPT], no = n[RT_SAMPLE_N_OUTPUT];
        if (np < 0 || no < 0 || (np + no > 0 && (off < 0 || off + np + no > n_hist))) {
            rc = vc_err_set(VC_ERR_INVALID, "cpu sample: row %d: history [%lld, +%lld) outside [0, %lld)", i,
                            (long long)off, (long long)(np + no), (long long)n_hist);
            break;
        }
        rc = smp_req_create_plain(b, &p, &reqs[i]);
        if (rc < 0) break;
        rows[i] = (smp_row){.req = reqs[i], .prompt = np ? h + off : NULL, .n_prompt = (int32_t)np,
                            .output = no ? h + off + np : NULL, .n_output = (int32_t)no};
        us[i] = row_uniform(n);
    }
    if (rc == VC_OK) rc = smp_batch_sample_us(b, logits->data, rows, R, us);
    if (rc == VC_OK) memcpy(a->dst->data, smp_batch_output(b)->tokens, (size_t)R * sizeof(int32_t));
done:
    for (int32_t i = 0; reqs && i < R; i++) smp_req_free(reqs[i]);
    free(reqs);
    free(rows);
    free(us);
    smp_batch_free(b);
    return rc;
}
