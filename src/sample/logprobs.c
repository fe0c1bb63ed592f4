/* Logprobs of one row (vLLM's compute_logprobs + gather_logprobs): the
 * chosen token's logprob and rank, and the top k, without materialising
 * the [V] log_softmax. Two passes: max / top-k insertion / rank count,
 * then the sum of exponentials. */
#include "sample/sample_int.h"

#include "base/err.h"

static inline float val(const float *x, int64_t i) { return x[i] != x[i] ? -INFINITY : x[i]; }

void smp_row_logprobs(const float *x, int64_t V, int32_t tok, int32_t k, int32_t *ids, float *vals,
                      int32_t *rank) {
    const float xt = val(x, tok);
    float mx = -INFINITY;
    int64_t ge = 0, n_inf = 0;
    int32_t nk = 0; /* top list ids[1..nk], vals hold the logits meanwhile */
    for (int64_t i = 0; i < V; i++) {
        float v = val(x, i);
        mx = v > mx ? v : mx;
        ge += v >= xt;
        n_inf += v == INFINITY;
        if (k > 0 && (nk < k || v > vals[nk])) {
            int32_t j = nk < k ? ++nk : nk; /* slot to fill, then bubble up */
            while (j > 1 && vals[j - 1] < v) {
                vals[j] = vals[j - 1];
                ids[j] = ids[j - 1];
                j--;
            }
            vals[j] = v;
            ids[j] = (int32_t)i;
        }
    }
    /* log-sum-exp; +inf logits share all the mass. */
    float lse;
    if (mx == INFINITY) {
        lse = INFINITY;
    } else if (mx == -INFINITY) {
        lse = -INFINITY;
    } else {
        double s = 0;
        for (int64_t i = 0; i < V; i++) s += expf(val(x, i) - mx);
        lse = mx + (float)log(s);
    }
    for (int32_t j = 0; j <= nk; j++) {
        float v = j == 0 ? xt : vals[j];
        float lp;
        if (mx == INFINITY) lp = v == INFINITY ? -logf((float)n_inf) : -INFINITY;
        else if (mx == -INFINITY) lp = -INFINITY;
        else lp = v - lse;
        vals[j] = lp;
    }
    for (int32_t j = nk + 1; j <= k; j++) { /* k > V: nothing more to list */
        ids[j] = -1;
        vals[j] = -INFINITY;
    }
    ids[0] = tok;
    *rank = (int32_t)ge;
}

int smp_prompt_logprobs(const float *logits, int32_t P, int64_t V, const int32_t *next_ids, int32_t k,
                        int32_t *ids, float *vals, int32_t *ranks) {
    if (P < 0 || V <= 0 || (P > 0 && (!logits || !next_ids || !ids || !vals || !ranks)))
        return vc_err_set(VC_ERR_INVALID, "prompt_logprobs: bad arguments");
    if (k < 0) k = 0;
    for (int32_t p = 0; p < P; p++)
        if (next_ids[p] < 0 || next_ids[p] >= V)
            return vc_err_set(VC_ERR_INVALID, "prompt token id %d out of vocab (size %lld)", next_ids[p],
                              (long long)V);
    for (int32_t p = 0; p < P; p++)
        smp_row_logprobs(logits + (int64_t)p * V, V, next_ids[p], k, ids + (int64_t)p * (k + 1),
                         vals + (int64_t)p * (k + 1), ranks + p);
    return VC_OK;
}
